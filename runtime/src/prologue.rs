//! The runtime prologue and epilogue around each engine program, in AWS's shape
//! (`docs/isa/cayman.md` §5): the words of the NTFF's loaded programs, slot for slot, built
//! with `neuron_isa::cayman::build` from the addresses this runtime chose.
//!
//! Control flow as this runtime runs it (every control word the runtime writes is 0):
//! 1. **Load** (pc 0 to the `NOTIFY hint=8`): `NOTIFY hint=7`, on an engine that owns a
//!    DMA-trigger queue its set-up (WRITEs and `0xab` ring words into control-block scratch),
//!    the per-engine table setup (skipped: `$R[3]` = 0), three `$S[2]` barrier rounds, `NOTIFY hint=8`. The runtime waits
//!    for every engine's hint 8 before the load returns.
//! 2. **Loop head**: Tensor waits for `$S[0] > 0` and decrements it (the runtime increments
//!    `$S[0]` through the mapped semaphore page to start an execution), sets its own event 8
//!    and waits for it, then sets events 0–3, which release the other four engines. Each
//!    engine loads `$R[0]` from its core's control word and, `$R[0]` being 0, branches to
//! 3. **`NOTIFY hint=2`** (execution start), the `$S[2]` barrier, the DGE register load, the
//!    core-to-core handshake (Tensor: WRITE 1 to the peer core's `$S[1]` increment register,
//!    then wait `$S[1] >= 1` and decrement), the NEFF words,
//! 4. **epilogue**: barrier, this engine's semaphore range cleared, barrier, the trigger
//!    queue's reset WRITEs (if any), `NOTIFY hint=3` (execution end), branch back to the loop
//!    head.

use neuron_isa::cayman::build::{self as b, event_semaphore as es};
use neuron_isa::cayman::render::TriggerQueue;
use neuron_isa::cayman::Header;
use neuron_isa::Engine;

/// `NOTIFY` hints the runtime reacts to.
pub const HINT_LOADED: u32 = 8;
pub const HINT_START: u32 = 2;
pub const HINT_END: u32 = 3;

/// Bytes of the runtime's per-core control block (host-visible, all zero).
pub const CONTROL_BYTES: u64 = 0x1000;
/// Offset in the control block of the u64 the DGE register load reads.
pub const CONTROL_DGE: u64 = 0x800;
/// Offset in the control block of the scratch words the ACT/DVE table setup writes.
pub const CONTROL_SCRATCH: u64 = 0x900;
/// Offset in the control block of the DMA-trigger queues' ring images, `QUEUE_RINGS` bytes
/// per engine (the `0xab` words' destinations and values; no-ops in this device model).
pub const CONTROL_QUEUE_RINGS: u64 = 0x80;
/// Bytes of one engine's ring image: four groups of (4 TX bases, 4 RX bases, 4 size pairs).
pub const QUEUE_RINGS: u64 = 0x180;
/// Offset in the control block of the DMA-trigger queues' scratch registers, 0x10 per
/// engine: the `0x100` WRITE pair at +0 and +4, the data queue's WRITEs at +8.
pub const CONTROL_QUEUE_REGS: u64 = 0xa00;
// The five engines' ring images lie between the control words (up to +0x34) and the DGE
// word, their scratch registers after the table scratch (up to +0x9c8): no overlaps.
const _: () = assert!(CONTROL_QUEUE_RINGS >= 0x34);
const _: () = assert!(CONTROL_QUEUE_RINGS + 5 * QUEUE_RINGS <= CONTROL_DGE);
const _: () = assert!(4 * 0x60 <= QUEUE_RINGS);
const _: () = assert!(CONTROL_QUEUE_REGS >= CONTROL_SCRATCH + 0xc8);
const _: () = assert!(CONTROL_QUEUE_REGS + 5 * 0x10 <= CONTROL_BYTES);

/// The addresses this runtime chose for one engine program.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    /// Index of this core among the model's (0 = the first subgraph, sg00).
    pub core_index: usize,
    /// This core's TPB window base (this model's address map).
    pub tpb: u64,
    /// The peer core's TPB window base (this core's own for a one-core model).
    pub peer_tpb: u64,
    /// The core's control block (`CONTROL_BYTES`, zero-filled).
    pub control: u64,
    /// Whether the subgraph has a DGE table (`neff_base`'s `+1`).
    pub dge: bool,
    /// Whether the Scalar engine sets up ACT tables (`neff_base`'s `+10`).
    pub act: bool,
    /// The DMA-trigger queue the engine owns (`neff_base`'s `+13` / `+15`).
    pub queue: Option<TriggerQueue>,
}

/// Semaphore page of a TPB window (`abi::tpb::SEMAPHORE_PAGE`).
const SEM_PAGE: u64 = neuron_abi::tpb::SEMAPHORE_PAGE;
use neuron_abi::consts::{SEMA_PAGE_SEM_INC, SEMA_REG_STRIDE};

/// Per-engine table block offset in a TPB window (AWS's layout, kept; these stores sit in the
/// block `$R[3] == 0` skips and are never executed by this runtime).
fn table_block(e: Engine) -> u64 {
    match e {
        Engine::Pe => 0x266_0000,
        Engine::Act => 0x246_0000,
        Engine::Pool => 0x306_0000,
        Engine::Dve => 0x2b6_0000,
        Engine::Sp => 0x286_0000,
    }
}

/// One engine's `$S[2]` ticket-barrier words.
fn barrier(e: Engine) -> Vec<[u8; 64]> {
    let inc = |v: u32| es((2, 1, v), 0x13, 2, 1);
    match e {
        Engine::Pe => vec![es((0, 0, 0), 0x15, 2, 1), es((2, 1, 8), 0x19, 2, 0)],
        Engine::Act => vec![inc(1), inc(7)],
        Engine::Pool => vec![inc(2), inc(6)],
        Engine::Dve => vec![inc(3), inc(5)],
        Engine::Sp => vec![inc(4)],
    }
}

/// The WRITEs of a DMA-trigger queue's set-up (`docs/isa/cayman.md` §1.3), repeated at the
/// end of the epilogue: AWS writes `0x100` to two of the queue's registers (before the rings)
/// and, on a `"data"` queue, its block count, then `0xfffe_0000 |` it, to a third (after the
/// rings); ours go to the engine's scratch registers in the control block.
fn queue_writes(q: &TriggerQueue, regs: u64) -> Vec<[u8; 64]> {
    let mut w = vec![b::write(&[(regs, 0x100), (regs + 4, 0x100)])];
    if q.data {
        w.push(b::write(&[(regs + 8, q.blocks)]));
        w.push(b::write(&[(regs + 8, 0xfffe_0000 | (q.blocks & 0xffff))]));
    }
    w
}

/// The ring set-up of a DMA-trigger queue (AWS's twelve `0xab` words for 16 rings): per
/// group of up to four rings, the TX bases, the RX bases (u64 each) and two `0x00ff_fff0`
/// u32s per ring. Bytes 12–15 `09 01 02 n`, the destination u64 at 16, a u32 at 24 (1 for the
/// bases, `0x8000` for the fills), the stride between rings at 28, the values from 32. AWS's
/// destinations are DMA registers 0x40000 apart and its bases the rings' descriptor memory;
/// ours are the engine's ring image in the control block (`image`, stride 8), each base the
/// address of its own slot. `0xab` is a no-op in this device model.
fn queue_rings(q: &TriggerQueue, image: u64) -> Vec<[u8; 64]> {
    let rings = u32::from(q.rings.clamp(1, 16));
    let mut out = Vec::new();
    for g in 0..q.groups() {
        let n = (rings - 4 * g).min(4);
        let at = image + 0x60 * u64::from(g);
        let head = |dst: u64, kind: u32| {
            let mut ops = vec![9u8, 1, 2, n as u8];
            ops.extend_from_slice(&dst.to_le_bytes());
            ops.extend_from_slice(&kind.to_le_bytes());
            ops.extend_from_slice(&8u32.to_le_bytes());
            ops
        };
        for side in [at, at + 0x20] {
            let mut ops = head(side, 1);
            for k in 0..u64::from(n) {
                ops.extend_from_slice(&(side + 8 * k).to_le_bytes());
            }
            out.push(b::unnamed(0xab, &ops));
        }
        let mut ops = head(at + 0x40, 0x8000);
        for _ in 0..2 * n {
            ops.extend_from_slice(&0x00ff_fff0u32.to_le_bytes());
        }
        out.push(b::unnamed(0xab, &ops));
    }
    out
}

/// A program under construction, with forward labels.
struct Asm {
    words: Vec<[u8; 64]>,
    fix: Vec<(usize, &'static str, Option<u8>)>,
    labels: Vec<(&'static str, usize)>,
}

impl Asm {
    fn w(&mut self, w: [u8; 64]) {
        self.words.push(w);
    }
    fn ws(&mut self, ws: Vec<[u8; 64]>) {
        self.words.extend(ws);
    }
    /// DRAIN, barrier, DRAIN.
    fn round(&mut self, e: Engine) {
        self.w(b::drain(0));
        self.ws(barrier(e));
        self.w(b::drain(0));
    }
    fn label(&mut self, l: &'static str) {
        self.labels.push((l, self.words.len()));
    }
    /// A branch to `l`: `Some(reg)` = EQ on that register, `None` = ALWAYS (debugHint 2).
    fn branch(&mut self, reg: Option<u8>, l: &'static str) {
        self.fix.push((self.words.len(), l, reg));
        self.words.push([0; 64]);
    }
    fn resolve(mut self) -> Vec<[u8; 64]> {
        for (at, l, reg) in std::mem::take(&mut self.fix) {
            let to = self
                .labels
                .iter()
                .find(|(n, _)| *n == l)
                .map_or(at, |(_, i)| *i);
            let d = to as i32 - at as i32;
            self.words[at] = match reg {
                Some(r) => b::branch_eq(r, d),
                None => b::branch_always(d, 2),
            };
        }
        self.words
    }
}

/// The prologue (ending where NEFF word 0 goes) and the epilogue of engine `e`, and the pc of
/// the loop head (the epilogue's branch target is resolved against `body_len`).
pub fn build(e: Engine, p: &Place, body_len: usize) -> (Vec<[u8; 64]>, Vec<[u8; 64]>) {
    let sg00 = p.core_index == 0;
    let ctl = p.control;
    let idx = e.index() as u64;
    let tbl = p.tpb + table_block(e);
    let scratch = ctl + CONTROL_SCRATCH + 0x10 * idx;
    let ev = |i: u8| p.tpb + SEM_PAGE + 4 * i as u64;
    let mut a = Asm {
        words: Vec::new(),
        fix: Vec::new(),
        labels: Vec::new(),
    };
    // ---- load-time initialisation
    a.w(b::notify(7));
    a.w(b::set_ordering(true));
    let queue_regs = ctl + CONTROL_QUEUE_REGS + 0x10 * idx;
    if let Some(q) = &p.queue {
        // The DMA-trigger queue's set-up: reset, rings (then the data queue's WRITEs).
        let mut w = queue_writes(q, queue_regs);
        let data = w.split_off(1);
        a.ws(w);
        a.ws(queue_rings(
            q,
            ctl + CONTROL_QUEUE_RINGS + QUEUE_RINGS * idx,
        ));
        a.ws(data);
    }
    let table = matches!(e, Engine::Dve) || (e == Engine::Act && p.act);
    if table {
        // ACT / DVE table setup. The WRITE's two stores go to runtime scratch words (AWS's
        // go to DMA registers this model lacks); the three 0xab words are no-ops here.
        let (cfg, doorbell, event) = if e == Engine::Act {
            (0xfdff_0100u32, 5u32, 6u8)
        } else {
            (0xfbff_0100, 6, 7)
        };
        a.w(b::write(&[(scratch, cfg), (scratch + 8, cfg)]));
        for k in 0..3u64 {
            let mut ops = vec![9u8, 1, 2, 1];
            ops.extend_from_slice(&(scratch + 4 * k).to_le_bytes());
            if k < 2 {
                ops.extend_from_slice(&[1, 0, 0, 0, 0, 0, 4, 0]);
                ops.extend_from_slice(&(ctl + CONTROL_SCRATCH + 0x80).to_le_bytes()[..6]);
            } else {
                ops.extend_from_slice(&[0, 0x80, 0, 0, 0, 0, 4, 0]);
                ops.extend_from_slice(&[0xf0, 0xff, 0xff, 0, 0xf0, 0xff, 0xff]);
            }
            a.w(b::unnamed(0xab, &ops));
        }
        a.w(b::tensor_load(&[4], ctl + 0x30, 0));
        a.branch(Some(4), "tbl_self");
        // $R[4] != 0: the table DMA's doorbells; its completion sets the event (here: the
        // WRITE sets the engine's own event register directly).
        a.w(b::write(&[(ev(event), doorbell), (ev(event), doorbell)]));
        a.branch(None, "tbl_done");
        a.label("tbl_self");
        a.w(b::nop(Header {
            update_op: 0x11,
            update_index: event,
            ..Header::default()
        }));
        a.label("tbl_done");
    }
    a.w(b::tensor_load(&[3], ctl + 0x2c, 0));
    a.branch(Some(3), "init_skip");
    let v = |x: u32| if sg00 { x } else { 0 };
    let rows: Vec<(u64, u32)> = match e {
        Engine::Pool => vec![
            (0x1500, v(0x1ffff)),
            (0x14e0, v(0x400_0000)),
            (0x13a0, 0),
            (0x13c0, 0),
            (0x13e0, v(2)),
            (0x14c0, 4),
        ],
        Engine::Sp => vec![
            (0x13a0, v(0xffff)),
            (0x13c0, v(2)),
            (0x13e0, v(2)),
            (0x14c0, 4),
        ],
        Engine::Dve => vec![(0x13a0, 0), (0x13c0, 0), (0x13e0, v(2)), (0x14c0, 5)],
        _ => vec![(0x13a0, 0), (0x13c0, 0), (0x13e0, v(2)), (0x14c0, 4)],
    };
    for (off, d) in &rows {
        a.w(b::write(&[(tbl + off, *d)]));
    }
    a.round(e);
    a.w(b::write(&[(tbl + 4, 1)]));
    a.w(b::unnamed(0xa1, &[]));
    a.label("init_skip");
    a.round(e);
    match e {
        Engine::Pool => {
            let mut ops = vec![1u8, 0xff, 0, 0];
            ops.extend_from_slice(&(ctl + CONTROL_SCRATCH + 0xc0).to_le_bytes());
            ops.extend_from_slice(&[0, 0, 0, 0, 0xe0, 0x48]);
            a.w(b::unnamed(0x95, &ops));
        }
        Engine::Act | Engine::Dve if table => {
            let event = if e == Engine::Act { 6 } else { 7 };
            a.w(b::nop(Header {
                wait_cond: 7,
                wait_index: event,
                ..Header::default()
            }));
        }
        _ => {}
    }
    a.round(e);
    a.w(b::notify(HINT_LOADED as u8));
    // AWS branches from here past the loop head to `NOTIFY hint=2` (the first execution
    // follows the load at once); this runtime enters the loop head, so every execution,
    // the first included, waits for its start.
    a.branch(None, "loop");
    // ---- loop head: one pass per execution
    a.label("loop");
    a.w(b::set_ordering(true));
    a.w(b::set_ordering(true));
    if e == Engine::Pe {
        a.w(es((0, 4, 0), 0x14, 0, 1)); // $S[0] > 0, $S[0]--
        a.w(b::write(&[(ev(8), 2), (ev(8), 2)]));
        a.w(b::nop(Header {
            wait_cond: 7,
            wait_index: 8,
            ..Header::default()
        }));
        a.w(b::drain(0));
        for i in 0..4 {
            a.w(b::nop(Header {
                update_op: 0x11,
                update_index: i,
                ..Header::default()
            }));
        }
    } else {
        a.w(b::nop(Header {
            wait_cond: 7,
            wait_index: e.index() as u8 - 1,
            ..Header::default()
        }));
    }
    a.w(b::tensor_load(&[0], ctl, 0));
    if e != Engine::Pe {
        a.w(b::drain(0));
    }
    a.branch(Some(0), "start");
    // $R[0] != 0 (never, here): a program switch through $R[1], $R[2].
    a.w(b::tensor_load(&[1], ctl + 0x04 + 4 * idx, 0));
    a.w(b::tensor_load(&[2], ctl + 0x18 + 4 * idx, 0));
    if e == Engine::Pool {
        a.w(b::unnamed(0x95, &[2, 0xff]));
    }
    a.w(b::tensor_load(&[3], ctl + 0x2c, 0));
    a.branch(Some(3), "sw_skip");
    if e == Engine::Pool {
        a.w(b::write(&[(tbl + 0x1500, 0), (tbl + 0x14e0, 0)]));
    }
    a.w(b::write(&[(tbl + 0x13a0, 0), (tbl + 0x13c0, 0)]));
    a.w(b::write(&[(tbl + 0x13e0, 0)]));
    a.label("sw_skip");
    a.w(b::write(&[(tbl + 4, 1)]));
    a.w(b::unnamed(0xa1, &[]));
    a.round(e);
    a.w(b::branch_indirect());
    // ---- per execution
    a.label("start");
    a.w(b::notify(HINT_START as u8));
    if e == Engine::Pe {
        let n = if sg00 { 2 } else { 1 };
        a.w(b::write(&[(ev(4), n), (ev(4), n)]));
        a.w(b::nop(Header {
            wait_cond: 7,
            wait_index: 4,
            ..Header::default()
        }));
    }
    a.round(e);
    if p.dge {
        a.w(b::tensor_load(&[130, 131], ctl + CONTROL_DGE, 1));
    }
    a.round(e);
    if e == Engine::Pe {
        // The core-to-core handshake: +1 on the peer's $S[1], wait for the peer's +1 on ours.
        a.w(b::write(&[(
            p.peer_tpb + SEM_PAGE + SEMA_PAGE_SEM_INC + SEMA_REG_STRIDE,
            1,
        )]));
        a.w(es((1, 5, 1), 0x14, 1, 1));
    }
    // The last round's closing DRAIN is NEFF word 0.
    a.w(b::drain(0));
    a.ws(barrier(e));
    let loop_head = a
        .labels
        .iter()
        .find(|(n, _)| *n == "loop")
        .map_or(0, |(_, i)| *i);
    let pro = a.resolve();
    // ---- epilogue
    let (first, last) = match e {
        Engine::Pe => (3, 53),
        Engine::Act => (54, 104),
        Engine::Pool => (105, 155),
        Engine::Dve => (156, 206),
        Engine::Sp => (207, 255),
    };
    let mut epi = vec![b::drain(1)];
    epi.extend(barrier(e));
    epi.push(b::drain(0));
    epi.push(b::range_clear(first, last));
    epi.push(b::drain(0));
    epi.extend(barrier(e));
    epi.push(b::drain(0));
    if let Some(q) = &p.queue {
        epi.extend(queue_writes(q, queue_regs));
    }
    epi.push(b::notify(HINT_END as u8));
    let back_pc = pro.len() + body_len + epi.len();
    epi.push(b::branch_always(loop_head as i32 - back_pc as i32, 2));
    (pro, epi)
}

/// Byte 0 of a loaded NOTIFY word (what a notification queue is sized for).
pub const NOTIFY_OPCODE: u8 = 0xa6;

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_isa::cayman::render::{neff_base, ProgramFeatures};

    const CTL: u64 = 0x4000_0000;

    fn place(queue: Option<TriggerQueue>) -> Place {
        Place {
            core_index: 0,
            tpb: 0x20_0000_0000,
            peer_tpb: 0x20_0400_0000,
            control: CTL,
            dge: true,
            act: false,
            queue,
        }
    }

    /// An engine owning a trigger queue gets `neff_base`'s extra slots, at AWS's places, and
    /// every address they carry is inside the control block; without one nothing changes.
    #[test]
    fn trigger_queue_set_up_fills_neff_base_and_stays_in_the_control_block() {
        for (e, data) in [
            (Engine::Dve, true),
            (Engine::Pool, false),
            (Engine::Sp, false),
        ] {
            let q = TriggerQueue {
                rings: 16,
                data,
                blocks: 20,
            };
            let (p0, e0) = build(e, &place(None), 4);
            let (p1, e1) = build(e, &place(Some(q)), 4);
            let f = ProgramFeatures {
                dge_table: true,
                act_tables: false,
                trigger_queue: Some(q),
            };
            assert_eq!(p1.len() as u32, neff_base(e, f), "{e}");
            let extra = (p1.len() - p0.len(), e1.len() - e0.len());
            assert_eq!(extra, if data { (15, 3) } else { (13, 1) }, "{e}");
            let set_up = &p1[2..2 + extra.0];
            assert_eq!(set_up[0][0], 0xa5, "the WRITE pair first");
            assert!(set_up[1..13].iter().all(|w| w[0] == 0xab), "twelve 0xab");
            // The words before and after the set-up are the plain prologue's.
            assert_eq!(&p1[..2], &p0[..2]);
            assert_eq!(p1[2 + extra.0..].len(), p0[2..].len());
            let in_ctl = |a: u64| (CTL..CTL + CONTROL_BYTES).contains(&a);
            let u64_at = |w: &[u8; 64], o: usize| {
                u64::from_le_bytes(w[o..o + 8].try_into().expect("8 bytes"))
            };
            for w in set_up
                .iter()
                .chain(&e1[e1.len() - 2 - (extra.1)..e1.len() - 2])
            {
                match w[0] {
                    0xa5 => {
                        assert!(in_ctl(u64_at(w, 16)), "{e}");
                        assert!(w[13] == 0 || in_ctl(u64_at(w, 24)), "{e}");
                    }
                    _ => {
                        assert_eq!(&w[12..15], &[9, 1, 2]);
                        let (n, stride) = (w[15] as u64, 8);
                        let dst = u64_at(w, 16);
                        assert!(in_ctl(dst) && in_ctl(dst + stride * n - 1), "{e}");
                        if w[24] == 1 {
                            assert!((0..n as usize).all(|k| in_ctl(u64_at(w, 32 + 8 * k))));
                        }
                    }
                }
            }
            assert_eq!(e1[e1.len() - 2][0], 0xa6, "then NOTIFY hint=3");
        }
    }
}
