//! The hook seam's tests: each kind of hook observes and alters a small trn2 program.

use super::*;
use crate::arch::ArchProfile;
use crate::device::EngineState;
use neuron_isa::cayman::build as b;
use std::sync::{Arc, Mutex};

fn trn2() -> Device {
    Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2))
}

fn feed(dev: &mut Device, e: Engine, words: &[[u8; WORD]]) {
    let port = dev.instr_port(0, e);
    dev.write(port, &words.concat()).expect("instruction port");
}

/// One descriptor pair on DMA queue 0.0 of core 0: `len` bytes HBM `src` -> `dst`.
fn dma(dev: &mut Device, src: u64, dst: u64, len: u32) {
    let (tx, rx) = (0x10_0000u64, 0x10_1000u64);
    let d = |x: UdmaDesc| zerocopy::IntoBytes::as_bytes(&x).to_vec();
    dev.write(tx, &d(UdmaDesc::tx(src, len, 0)))
        .expect("tx ring");
    dev.write(rx, &d(UdmaDesc::rx(dst, len, 0)))
        .expect("rx ring");
    dev.dma_queue_init(0, 0, tx, 32, rx, 32).expect("init");
    dev.dma_queue_start(0, 0, 1, 1).expect("start");
}

/// Everything a hook saw, in order.
type Log = Arc<Mutex<Vec<String>>>;

/// Records each call; `alter` decides what to do.
struct Rec {
    log: Log,
    sem: Option<(u8, SemAction)>,
    desc: Option<DescAction>,
    after: Option<(u64, Ps)>,
    corrupt_pc: Option<u32>,
    timer_at: Option<Ps>,
    watch: bool,
    /// Watch exactly these memories (else all or none, by `watch`).
    watch_in: Option<Watch>,
    flip: Option<u8>,
    fail_reads: bool,
    notify: NotifyAction,
    issue: Option<(u32, IssueAction)>,
}

impl Rec {
    fn new(log: &Log) -> Rec {
        Rec {
            log: log.clone(),
            sem: None,
            desc: None,
            after: None,
            corrupt_pc: None,
            timer_at: None,
            watch: false,
            watch_in: None,
            flip: None,
            fail_reads: false,
            notify: NotifyAction::Post,
            issue: None,
        }
    }
    fn note(&self, s: String) {
        self.log.lock().expect("log").push(s);
    }
}

impl DeviceHooks for Rec {
    fn on_install(&mut self, ctx: &mut HookCtx<'_>) {
        if let Some(t) = self.timer_at {
            ctx.set_timer(t, 42);
        }
        match self.watch_in {
            Some(w) => ctx.watch_memory_in(w),
            None => ctx.watch_memory(self.watch),
        }
    }
    fn before_issue(&mut self, ctx: &mut HookCtx<'_>, w: &mut [u8; WORD]) -> IssueAction {
        let s = ctx.site;
        self.note(format!("issue {:?} pc{} {:02x}", s.engine, s.pc, w[0]));
        if self.corrupt_pc == Some(s.pc) {
            w[0] = 0xFF;
        }
        match self.issue {
            Some((pc, a)) if pc == s.pc => a,
            _ => IssueAction::Proceed,
        }
    }
    fn after_execute(&mut self, ctx: &mut HookCtx<'_>, w: &CaymanInstr) -> Ps {
        self.note(format!("done pc{} {}", ctx.site.pc, w.opcode.name()));
        match self.after {
            // A NaN into SBUF partition `p`, and the engine held busy longer.
            Some((p, extra)) => {
                let at = ctx.window_addr(ctx.site.nc, Space::Sbuf, p, 0x40);
                ctx.poke(at, &f32::NAN.to_le_bytes()).expect("SBUF");
                extra
            }
            None => Ps::ZERO,
        }
    }
    fn before_descriptor(
        &mut self,
        ctx: &mut HookCtx<'_>,
        tx: &mut UdmaDesc,
        rx: &mut UdmaDesc,
    ) -> DescAction {
        self.note(format!("desc {:?} {}", ctx.site.queue, tx.len()));
        match self.desc.take() {
            // Redirect the destination 0x100 bytes further.
            Some(DescAction::Proceed) => {
                rx.buf_ptr += 0x100;
                DescAction::Proceed
            }
            Some(a) => a,
            None => DescAction::Proceed,
        }
    }
    fn on_sem_update(&mut self, _ctx: &mut HookCtx<'_>, u: &mut SemUpdate) -> SemAction {
        self.note(format!("sem {:?} {}", u.op, u.index));
        match self.sem {
            Some((i, a)) if i == u.index => a,
            _ => SemAction::Apply,
        }
    }
    fn on_notify(&mut self, _ctx: &mut HookCtx<'_>, n: &mut Notice) -> NotifyAction {
        self.note(format!("notify {:?} {}", n.kind, n.value));
        self.notify
    }
    fn on_mem_access(
        &mut self,
        _ctx: &mut HookCtx<'_>,
        a: &MemAccess,
        data: &mut [u8],
    ) -> MemAction {
        self.note(format!("mem {:?} {:?} {}", a.dir, a.target, a.len));
        if let (Some(m), Dir::Write) = (self.flip, a.dir) {
            data[0] ^= m;
        }
        if self.fail_reads && a.dir == Dir::Read {
            return MemAction::Fail;
        }
        MemAction::Proceed
    }
    fn on_timer(&mut self, ctx: &mut HookCtx<'_>, token: u64) {
        self.note(format!("timer {token} at {}", ctx.now().0));
        if token == 42 {
            // A time already passed fires at once.
            ctx.set_timer(Ps(1), 7);
        }
    }
    fn on_ioctl(&mut self, cmd: u32, pid: u32) -> Option<i32> {
        (cmd == 0x1234 && pid == 7).then_some(5)
    }
}

fn logged(log: &Log) -> Vec<String> {
    log.lock().expect("log").clone()
}

/// A recording hook sees each word's issue and execution, the completion updates, the
/// NOTIFY's notification and the DMA descriptor, in device order.
#[test]
fn a_recording_hook_sees_the_run_in_order() {
    let mut dev = trn2();
    let log = Log::default();
    dev.set_hooks(Some(Box::new(Rec::new(&log))));
    feed(
        &mut dev,
        Engine::Pe,
        &[b::event_semaphore((0, 0, 0), 0x13, 7, 0), b::notify(2)],
    );
    dev.run(1000);
    dma(&mut dev, 0x20_0000, 0x30_0000, 64);
    dev.run(1000);
    assert!(dev.faults().is_empty(), "{:?}", dev.faults());
    assert_eq!(
        logged(&log),
        [
            "issue Some(Pe) pc0 a0",
            "done pc0 EVENT_SEMAPHORE",
            "sem Inc 7",
            "issue Some(Pe) pc1 a6",
            "done pc1 NOTIFY",
            "notify Notify 2",
            "desc Some((0, 0)) 64",
        ]
    );
    assert_eq!(dev.regs(0).expect("core 0").sem(7), 1);
    // No memory-access calls: the hook did not ask to watch memory.
    assert!(!logged(&log).iter().any(|l| l.starts_with("mem")));
}

/// A lost semaphore update leaves the engine that waits for it blocked; a duplicated one
/// counts twice.
#[test]
fn a_dropped_semaphore_update_blocks_the_waiter() {
    for action in [SemAction::Apply, SemAction::Drop, SemAction::Duplicate] {
        let drop = action == SemAction::Drop;
        let mut dev = trn2();
        let log = Log::default();
        let mut h = Rec::new(&log);
        h.sem = Some((3, action));
        dev.set_hooks(Some(Box::new(h)));
        // Act: $S[3]++. Pool: wait $S[3] >= 1, then $S[4]++.
        feed(
            &mut dev,
            Engine::Pool,
            &[b::event_semaphore((3, 5, 1), 0x13, 4, 0)],
        );
        feed(
            &mut dev,
            Engine::Act,
            &[b::event_semaphore((0, 0, 0), 0x13, 3, 0)],
        );
        dev.run(1000);
        let regs = dev.regs(0).expect("core 0");
        let pool = &dev.status().cores[0].engines[Engine::Pool.index()];
        if drop {
            assert_eq!((regs.sem(3), regs.sem(4)), (0, 0));
            assert!(matches!(pool.state, EngineState::Blocked(_)), "{pool:?}");
            assert!(dev.waiting());
        } else {
            let twice = (action == SemAction::Duplicate) as i32;
            assert_eq!((regs.sem(3), regs.sem(4)), (1 + twice, 1));
            assert_eq!(pool.state, EngineState::Idle);
        }
    }
}

/// A word corrupted on its way to the decoder faults the engine through the ordinary
/// path: an ERROR notification and a recorded fault naming engine, pc and opcode.
#[test]
fn a_corrupted_word_faults_the_engine() {
    let mut dev = trn2();
    let log = Log::default();
    let mut h = Rec::new(&log);
    h.corrupt_pc = Some(1);
    dev.set_hooks(Some(Box::new(h)));
    let n = b::event_semaphore((0, 0, 0), 0x13, 1, 0);
    feed(&mut dev, Engine::Act, &[n, n, n]);
    dev.run(1000);
    let f = dev.faults().first().expect("fault");
    assert_eq!(
        (f.kind, f.engine, f.pc, f.opcode),
        (FaultKind::BadInstruction, Some(Engine::Act), 1, 0xFF)
    );
    assert_eq!(dev.regs(0).expect("core 0").sem(1), 1, "only pc 0 ran");
    assert!(logged(&log).contains(&"notify Error 2".to_string()));
}

/// A timer fires at exactly the device time asked for, between the engine's events.
#[test]
fn a_timer_fires_at_the_requested_device_time() {
    let mut dev = trn2();
    let log = Log::default();
    let mut h = Rec::new(&log);
    h.timer_at = Some(Ps(12_345));
    dev.set_hooks(Some(Box::new(h)));
    assert!(dev.busy(), "the timer is a pending event");
    let n = b::event_semaphore((0, 0, 0), 0x13, 1, 0);
    feed(&mut dev, Engine::Sp, &[n; 400]);
    dev.run(100_000);
    let l = logged(&log);
    let t = l
        .iter()
        .position(|s| s == "timer 42 at 12345")
        .expect("timer");
    // Words issued before and after it: the timer came in device-time order.
    assert!(t > 0 && t + 1 < l.len(), "{t} of {}", l.len());
    assert_eq!(l[t + 1], "timer 7 at 12345");
    assert!(dev.now() > Ps(12_345));
}

/// The ioctl hook answers through the device; without hooks nothing fails.
#[test]
fn the_ioctl_hook_is_defined() {
    let mut dev = trn2();
    assert_eq!(dev.hook_ioctl(0x1234, 7), None);
    dev.set_hooks(Some(Box::new(Rec::new(&Log::default()))));
    assert_eq!(dev.hook_ioctl(0x1234, 7), Some(5));
    assert_eq!(dev.hook_ioctl(0x1234, 8), None);
    dev.set_hooks(None);
    assert!(!dev.status().hooks_installed);
}

/// Watching memory: a DMA's reads and writes are reported with their target; a flipped
/// bit lands; an uncorrectable read aborts the queue.
#[test]
fn memory_hooks_see_and_flip_dma_data() {
    let mut dev = trn2();
    let log = Log::default();
    let mut h = Rec::new(&log);
    h.watch = true;
    h.flip = Some(0x80);
    dev.set_hooks(Some(Box::new(h)));
    dev.write(0x20_0000, &[1, 2, 3, 4]).expect("src");
    let sbuf = dev.profile().tpb_base(0) + tpb::SBUF + tpb::SBUF_PARTITION_STRIDE;
    dma(&mut dev, 0x20_0000, sbuf, 4);
    dev.run(100);
    let mut got = [0u8; 4];
    dev.read(sbuf, &mut got).expect("dst");
    assert_eq!(got, [0x81, 2, 3, 4]);
    let l = logged(&log);
    assert!(l.contains(&"mem Read Hbm(0) 4".to_string()), "{l:?}");
    assert!(l.contains(&"mem Write Sbuf(0) 4".to_string()), "{l:?}");

    let mut dev = trn2();
    let mut h = Rec::new(&log);
    h.watch = true;
    h.fail_reads = true;
    dev.set_hooks(Some(Box::new(h)));
    dma(&mut dev, 0x20_0000, sbuf, 4);
    dev.run(100);
    let f = dev.faults().first().expect("abort");
    assert_eq!(f.kind, FaultKind::DmaAbort);
    assert!(f.detail.contains("uncorrectable"), "{}", f.detail);
    assert!(dev.dma_queue_state(0, 0).expect("queue").aborted);
}

/// Notifications can be dropped, duplicated or delayed; an engine can be delayed or hung.
#[test]
fn notifications_and_engines_can_be_disturbed() {
    let run = |notify: NotifyAction, issue: Option<(u32, IssueAction)>| {
        let mut dev = trn2();
        let mut h = Rec::new(&Log::default());
        h.notify = notify;
        h.issue = issue;
        dev.set_hooks(Some(Box::new(h)));
        dev.nq_configure(0, 1, 0, 0x40_0000, 4096);
        dev.set_tracing(true);
        feed(&mut dev, Engine::Pe, &[b::notify(2), b::notify(3)]);
        dev.run(1000);
        let posted = dev.status().cores[0].notify_queues[0].posted;
        let starts: Vec<Ps> = dev.take_trace().iter().map(|t| t.start).collect();
        (posted, starts, dev)
    };
    let (n, base, _) = run(NotifyAction::Post, None);
    assert_eq!(n, 2);
    assert_eq!(run(NotifyAction::Drop, None).0, 0);
    assert_eq!(run(NotifyAction::Duplicate, None).0, 4);
    let (n, _, dev) = run(NotifyAction::Delay(Ps(1_000_000)), None);
    assert_eq!(n, 2);
    assert!(dev.now() >= base[1] + Ps(1_000_000), "posted late");
    let (_, slow, _) = run(
        NotifyAction::Post,
        Some((1, IssueAction::Delay(Ps(50_000)))),
    );
    assert_eq!(slow[1], base[1] + Ps(50_000), "pc 1 issued 50 ns late");
    let (n, _, dev) = run(NotifyAction::Post, Some((1, IssueAction::Hang)));
    assert_eq!(n, 1, "only pc 0's NOTIFY");
    assert!(!dev.busy() && dev.faults().is_empty());
    assert_eq!(dev.status().cores[0].engines[0].state, EngineState::Hung);
}

/// A descriptor can be altered (its destination moved), delayed, or turned into a queue
/// abort.
#[test]
fn descriptors_can_be_altered_delayed_or_aborted() {
    let run = |a: DescAction| {
        let mut dev = trn2();
        let mut h = Rec::new(&Log::default());
        h.desc = Some(a);
        dev.set_hooks(Some(Box::new(h)));
        dev.write(0x20_0000, &[5; 8]).expect("src");
        dma(&mut dev, 0x20_0000, 0x30_0000, 8);
        dev.run(100);
        let (mut at, mut moved) = ([0u8; 8], [0u8; 8]);
        dev.read(0x30_0000, &mut at).expect("dst");
        dev.read(0x30_0100, &mut moved).expect("moved dst");
        (at, moved, dev)
    };
    let (at, moved, dev) = run(DescAction::Proceed);
    assert_eq!(
        (at, moved),
        ([0; 8], [5; 8]),
        "the altered RX address was used"
    );
    assert!(dev.faults().is_empty());
    let (at, _, dev) = run(DescAction::Delay(Ps(2_000_000)));
    assert_eq!(at, [5; 8]);
    assert!(dev.now() >= Ps(2_000_000), "consumed late: {}", dev.now());
    let (at, _, dev) = run(DescAction::Abort("injected".into()));
    assert_eq!(at, [0; 8]);
    let f = dev.faults().first().expect("abort");
    assert_eq!((f.kind, f.engine), (FaultKind::DmaAbort, None));
    assert!(f.detail.contains("injected"), "{}", f.detail);
    assert!(dev.dma_queue_state(0, 0).expect("queue").aborted);
}

/// After a word executes the hook may alter its results and keep the engine busy longer.
#[test]
fn after_execute_alters_results_and_timing() {
    let words = [b::event_semaphore((0, 0, 0), 0x13, 1, 0), b::notify(1)];
    let run = |after: Option<(u64, Ps)>| {
        let mut dev = trn2();
        let mut h = Rec::new(&Log::default());
        h.after = after;
        dev.set_hooks(Some(Box::new(h)));
        dev.set_tracing(true);
        feed(&mut dev, Engine::Act, &words);
        dev.run(100);
        let trace = dev.take_trace();
        (trace[0].dur, trace[1].start, dev)
    };
    let (dur, next, _) = run(None);
    let (dur2, next2, mut dev) = run(Some((9, Ps(1_000_000))));
    assert_eq!((dur2, next2), (dur + Ps(1_000_000), next + Ps(1_000_000)));
    let mut v = [0u8; 4];
    let at = dev.profile().tpb_base(0) + 9 * tpb::SBUF_PARTITION_STRIDE + 0x40;
    dev.read(at, &mut v).expect("SBUF");
    assert!(f32::from_le_bytes(v).is_nan());
}

/// Watching memory also reports a data-path word's SBUF/PSUM operands, one access per
/// partition: LDWEIGHTS reads its rows, MATMUL reads its moving tensor and writes PSUM;
/// a failed read faults the engine as an out-of-bounds access.
/// akc-fused_bf16_s512 sg00 PE pc 71/72 (as in kbuild's corpus test), in the loaded
/// encoding: a transposing LDWEIGHTS of 128 rows and the MATMUL against it.
fn ldweights_and_matmul() -> [[u8; WORD]; 2] {
    use neuron_isa::cayman::Namespace;
    let hex = |s: &str| -> [u8; WORD] {
        let v: Vec<u8> = (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect();
        let w: [u8; WORD] = v.try_into().expect("64 bytes");
        CaymanInstr::decode(Namespace::Neff, &w)
            .with_namespace(Namespace::Loaded)
            .encode()
    };
    [
        hex("01100000000000000000000000000000fe730300ffff0000e0ff2000010004000600010000008080000000000f0f000000000000000000000000000000000000"),
        hex("02100000000013050000000000000000007e03000100000000008000010001000600010000008080000000030f0f000000010002010000000000800001000100"),
    ]
}

#[test]
fn memory_hooks_see_engine_operands() {
    let [ldw, mm] = ldweights_and_matmul();
    let log = Log::default();
    let mut dev = trn2();
    let mut h = Rec::new(&log);
    h.watch = true;
    dev.set_hooks(Some(Box::new(h)));
    feed(&mut dev, Engine::Pe, &[ldw, mm]);
    dev.run(100);
    assert!(dev.faults().is_empty(), "{:?}", dev.faults());
    let l = logged(&log);
    let count = |p: &str| l.iter().filter(|s| s.starts_with(p)).count();
    assert_eq!(count("mem Read Sbuf(0) 256"), 2 * 128, "{l:?}");
    assert!(count("mem Write Psum(0)") > 0, "{l:?}");
    let first_write = l
        .iter()
        .position(|s| s.starts_with("mem Write"))
        .expect("write");
    let mm_done = l
        .iter()
        .position(|s| s == "done pc1 MATMUL")
        .expect("matmul");
    assert!(
        first_write < mm_done,
        "writes are reported before after_execute"
    );

    let mut dev = trn2();
    let mut h = Rec::new(&Log::default());
    h.watch = true;
    h.fail_reads = true;
    dev.set_hooks(Some(Box::new(h)));
    feed(&mut dev, Engine::Pe, &[ldw, mm]);
    dev.run(100);
    let f = dev.faults().first().expect("fault");
    assert_eq!((f.kind, f.pc), (FaultKind::OutOfBounds, 0));
    assert!(f.detail.contains("uncorrectable"), "{}", f.detail);
}

/// A watch naming some memories shows the hook those only: off chip, a DMA's HBM read and
/// not its SBUF write (nor the engines' SBUF/PSUM operands); on chip, the reverse.
#[test]
fn a_watch_shows_the_hook_the_memories_it_names_only() {
    let [ldw, mm] = ldweights_and_matmul();
    let sbuf = |dev: &Device| dev.profile().tpb_base(0) + tpb::SBUF + tpb::SBUF_PARTITION_STRIDE;
    for (w, hbm_seen, sbuf_seen) in [
        (Watch::OFF_CHIP, true, false),
        (Watch::ON_CHIP, false, true),
    ] {
        let log = Log::default();
        let mut dev = trn2();
        let mut h = Rec::new(&log);
        h.watch_in = Some(w);
        h.flip = Some(0x80);
        dev.set_hooks(Some(Box::new(h)));
        dev.write(0x20_0000, &[1, 2, 3, 4]).expect("src");
        let dst = sbuf(&dev);
        dma(&mut dev, 0x20_0000, dst, 4);
        dev.run(100);
        let mut got = [0u8; 4];
        dev.read(dst, &mut got).expect("dst");
        let l = logged(&log);
        assert_eq!(
            l.contains(&"mem Read Hbm(0) 4".to_string()),
            hbm_seen,
            "{w:?} {l:?}"
        );
        assert_eq!(
            l.contains(&"mem Write Sbuf(0) 4".to_string()),
            sbuf_seen,
            "{w:?} {l:?}"
        );
        let flipped = if sbuf_seen { 0x81 } else { 1 };
        assert_eq!(
            got,
            [flipped, 2, 3, 4],
            "{w:?}: only a shown write is altered"
        );

        log.lock().expect("log").clear();
        feed(&mut dev, Engine::Pe, &[ldw, mm]);
        dev.run(100);
        let l = logged(&log);
        let operands = l.iter().filter(|s| s.contains("Sbuf(0) 256")).count();
        assert_eq!(operands > 0, sbuf_seen, "{w:?}: operands {operands}");
        assert_eq!(dev.status().watching_memory, w.any());
    }
}
