//! A core's data path, optionally on a host thread of its own: the words that only touch the
//! core's SBUF, PSUM and PE state run there in issue order, while the device thread goes on
//! scheduling. The device thread takes a word's result when the word completes; a DMA's
//! bytes for those memories follow the words sent before them, and anything else that
//! touches the memories brings the lane home (waiting for every word sent before). A core
//! that stays on the device thread may have its words deferred until their results are
//! taken, so another core's words run on its thread meanwhile. Results never depend on the
//! thread: a lane word's fault is raised at the word's completion whether it ran on the
//! lane's thread, deferred or inline (`NEURON_EMU_THREADS`).

use crate::cayman_exec::{Exec, PeState};
use crate::core::{CoreMem, Scratch};
use crate::fault::OpFault;
use neuron_isa::cayman::{CaymanInstr, Opcode};
use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Whether a word may run on its core's lane: data-path words that neither start a
/// DMA nor write the engine's registers.
pub(super) fn lane_opcode(op: Opcode) -> bool {
    !matches!(
        op,
        Opcode::DmaDirect2d | Opcode::RegisterMove | Opcode::RegisterAlu
    )
}

/// Whether a word is worth handing to its lane's thread when the lane is at home (Auto): it
/// streams `elems` elements per partition over up to 128 partitions, and its multiply-adds
/// (a MATMUL's against the `pe_cols` columns of weights loaded last, any other word's at
/// `cayman_exec::ELEMENTWISE_WEIGHT` an element, as the helpers count a step) reach
/// [`LANE_MIN_WORK`] (a test may set another, [`set_lane_min_work`]). A lane already on its
/// thread takes every word behind the ones there, whatever their size.
pub(super) fn worth_a_thread(op: Opcode, elems: u64, pe_cols: u64) -> bool {
    let per_elem = match op {
        Opcode::Matmul => 128 * pe_cols.max(1),
        _ => 128 * crate::cayman_exec::ELEMENTWISE_WEIGHT,
    };
    elems.saturating_mul(per_elem) >= MIN_WORK_NOW.load(std::sync::atomic::Ordering::Relaxed)
}

/// [`LANE_MIN_WORK`], unless a test set another ([`set_lane_min_work`]).
static MIN_WORK_NOW: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(LANE_MIN_WORK);

/// Tests: the least work Auto hands to an idle lane's thread, in this process (0: every
/// word, as before there was a least; `LANE_MIN_WORK` is the default), so a small real kernel
/// still drives words onto lane threads beside deferred ones.
#[doc(hidden)]
pub fn set_lane_min_work(work: u64) {
    MIN_WORK_NOW.store(work, std::sync::atomic::Ordering::Relaxed);
}

/// The least work [`worth_a_thread`] hands to a lane's thread: twice the helpers' least
/// share of a step (`fanout::MIN_WORK`), as a word handed over whole moves the core's data
/// to another cache and back and may wait for the lane thread to wake, where a step's helper
/// takes half of it, usually spinning already.
/// nkipy-matmul_small, whose second core runs one 128 x 128 x 128 product (2^21) and its
/// copy an execution: 0.16-0.32 ms an execution with these on a thread, 0.16-0.18 with
/// them home, as with `NEURON_EMU_THREADS=1` (`docs/performance.md`, 2026-12-06 sixteenth
/// session); nkipy-matmul_large's 128 x 128 x 512 products still go.
pub const LANE_MIN_WORK: u64 = 2 * crate::fanout::MIN_WORK;

/// A word sent to its core's lane: the completion takes its result.
#[derive(Debug, Clone, Copy)]
pub(super) struct LaneWord {
    pub(super) id: u64,
    /// The word's operand type (its math is counted by type).
    pub(super) src_dtype: Option<neuron_isa::Dtype>,
    /// A PE word: its result carries the PE state the next MATMUL's cost reads.
    pub(super) pe_word: bool,
    /// The streamed elements the cost was charged for (checked against the result in debug
    /// builds).
    pub(super) elems: Option<u64>,
}

/// Whether a word changes the PE state the cost model reads (`lane::PeTiming`): only the PE
/// words do. Another engine's word completing later must not bring back an older state.
pub(super) fn sets_pe_timing(op: Opcode) -> bool {
    matches!(op, Opcode::Ldweights | Opcode::Matmul)
}

/// What a lane owns: the core's memories and the data path's state.
#[derive(Debug)]
pub(super) struct Lane {
    pub(super) mem: CoreMem,
    pub(super) pe: PeState,
    pub(super) scratch: Scratch,
    /// Large steps may be shared with the data-path helpers (`fanout`; off with
    /// `NEURON_EMU_THREADS=1`).
    pub(super) fanout: bool,
    /// Registers for a word run later that reads none (`Job::run_on`): no copy per word.
    pub(super) spare_regs: Option<Box<[u32; 256]>>,
}

impl Lane {
    /// Run one word on the lane (`regs`: the issuing engine's registers). A panic in the
    /// data path (a bug of the emulator) becomes the word's fault, on whichever thread it
    /// ran, rather than losing the core's memories with a thread.
    pub(super) fn run(&mut self, ci: &CaymanInstr, regs: &mut [u32; 256]) -> Outcome {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::fanout::with(self.fanout, || {
                crate::cayman_exec::execute(
                    ci,
                    &mut self.mem,
                    &mut self.pe,
                    &mut self.scratch,
                    regs,
                )
            })
        }))
        .unwrap_or_else(|_| {
            Err(OpFault::bad(format!(
                "internal error: the data path panicked on {}",
                ci.opcode.name()
            )))
        });
        Outcome {
            result,
            pe: PeTiming::of(&self.pe),
        }
    }
}

/// The PE state the cost model reads when a MATMUL issues, as the word left it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PeTiming {
    pub(super) transpose: bool,
    pub(super) cols: u64,
    pub(super) fresh: bool,
}

impl PeTiming {
    pub(super) fn of(pe: &PeState) -> PeTiming {
        PeTiming {
            transpose: pe.transpose,
            cols: pe.m as u64,
            fresh: pe.fresh,
        }
    }
}

/// A word's result and the PE state after it.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) result: Result<Exec, OpFault>,
    pub(super) pe: PeTiming,
}

/// A word sent to a lane's thread.
#[derive(Debug)]
struct Job {
    ci: Arc<CaymanInstr>,
    /// A copy of the issuing engine's registers at issue, for a word that reads them
    /// (`cayman_exec::reads_registers`; lane words never write them).
    regs: Option<Box<[u32; 256]>>,
}

impl Job {
    /// Run on `lane`, with the registers copied at issue or, for a word that reads none,
    /// the lane's spare set.
    fn run_on(&mut self, lane: &mut Lane) -> Outcome {
        match self.regs.as_deref_mut() {
            Some(regs) => lane.run(&self.ci, regs),
            None => {
                let mut spare = lane.spare_regs.take().unwrap_or_else(|| Box::new([0; 256]));
                let out = lane.run(&self.ci, &mut spare);
                lane.spare_regs = Some(spare);
                out
            }
        }
    }
}

enum ToLane {
    Take(Box<Lane>),
    Job(u64, Job),
    /// Bytes for runs (byte offset, length) of the lane's SBUF or PSUM (a DMA's
    /// destination), one after another in the buffer, written in order with the jobs.
    Write(neuron_isa::Space, Vec<(usize, usize)>, Vec<u8>),
    Give,
}

enum FromLane {
    Done(u64, Outcome),
    Back(Box<Lane>),
}

/// The lane's thread and its channels.
struct Worker {
    tx: Sender<ToLane>,
    rx: Receiver<FromLane>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Worker")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        let (tx, _) = channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The thread's loop: hold the lane while the device thread lends it, run words in order.
fn serve(rx: Receiver<ToLane>, tx: Sender<FromLane>) {
    let mut lane: Option<Box<Lane>> = None;
    while let Some(msg) = recv_spinning(&rx) {
        let reply = match msg {
            ToLane::Take(l) => {
                lane = Some(l);
                continue;
            }
            ToLane::Job(id, mut job) => {
                let out = match lane.as_mut() {
                    Some(l) => {
                        let _busy = crate::fanout::LaneBusy::enter();
                        job.run_on(l)
                    }
                    None => Outcome {
                        result: Err(OpFault::bad("internal error: lane word without the lane")),
                        pe: PeTiming::default(),
                    },
                };
                FromLane::Done(id, out)
            }
            ToLane::Write(space, runs, data) => {
                if let Some(l) = lane.as_mut() {
                    let mem = l.mem.bytes_mut(space);
                    let mut from = 0;
                    for (at, len) in runs {
                        if let (Some(d), Some(s)) =
                            (mem.get_mut(at..at + len), data.get(from..from + len))
                        {
                            d.copy_from_slice(s);
                        }
                        from += len;
                    }
                }
                continue;
            }
            ToLane::Give => match lane.take() {
                Some(l) => FromLane::Back(l),
                None => continue,
            },
        };
        if tx.send(reply).is_err() {
            return;
        }
    }
}

/// Where a core's lane is: home (the device thread owns it) or lent to its thread. A forked
/// child has no lane threads: its copy of the device runs nowhere (`emulator::forks`) and
/// must not be asked for a lane that was lent at the fork.
#[derive(Debug)]
pub(super) struct LaneSlot {
    home: Option<Box<Lane>>,
    worker: Option<Worker>,
    next: u64,
    /// Words with data to move or compute (not the ordering words) sent and not yet taken
    /// (`fasthash`: every word goes in and out of these).
    working: std::collections::HashSet<u64, crate::fasthash::Build>,
    /// Results not yet taken, by job id.
    ready: HashMap<u64, Outcome, crate::fasthash::Build>,
    /// Words to run on the device thread, in issue order, when their result or the lane is
    /// first needed ([`Self::defer`]); only while the lane is home.
    deferred: std::collections::VecDeque<(u64, Job)>,
    /// The lane's SBUF and PSUM sizes in bytes.
    sbuf_len: usize,
    psum_len: usize,
    /// Its SBUF and PSUM storage strides (`CoreMem::stride`, known while it is away; SBUF's
    /// changes only where [`LaneSlot::sbuf_ptr`] hands the storage to a user mapping).
    strides: [usize; 2],
}

impl LaneSlot {
    pub(super) fn new(lane: Lane) -> LaneSlot {
        let (sbuf_len, psum_len) = (
            lane.mem.bytes(neuron_isa::Space::Sbuf).len(),
            lane.mem.bytes(neuron_isa::Space::Psum).len(),
        );
        let strides = [
            lane.mem.stride(neuron_isa::Space::Sbuf),
            lane.mem.stride(neuron_isa::Space::Psum),
        ];
        LaneSlot {
            sbuf_len,
            psum_len,
            strides,
            home: Some(Box::new(lane)),
            worker: None,
            next: 0,
            working: Default::default(),
            ready: Default::default(),
            deferred: Default::default(),
        }
    }

    /// The lane, at home: waits for every word sent before.
    pub(super) fn get(&mut self) -> &mut Lane {
        if self.home.is_none() {
            self.bring_home();
        }
        if !self.deferred.is_empty() {
            self.run_deferred(None);
        }
        self.home_lane()
    }

    /// The lane, at home (waiting for every word sent to its thread), deferred words not
    /// run: for a word that comes before them.
    fn home_lane(&mut self) -> &mut Lane {
        if self.home.is_none() {
            self.bring_home();
        }
        self.home
            .as_deref_mut()
            .expect("a core's lane is home or with its thread")
    }

    /// Whether words with data to move or compute were sent and not yet taken (the core is
    /// running, not just holding ordering words).
    pub(super) fn working(&self) -> bool {
        !self.working.is_empty()
    }

    fn bring_home(&mut self) {
        let Some(w) = self.worker.as_ref() else {
            return;
        };
        if w.tx.send(ToLane::Give).is_err() {
            return;
        }
        while let Some(m) = recv_spinning(&w.rx) {
            match m {
                FromLane::Done(id, out) => {
                    self.ready.insert(id, out);
                }
                FromLane::Back(l) => {
                    self.home = Some(l);
                    return;
                }
            }
        }
    }

    fn id(&mut self, working: bool) -> u64 {
        let id = self.next;
        self.next += 1;
        if working {
            self.working.insert(id);
        }
        id
    }

    /// A word as a job to run later, with a copy of the registers at issue, and its id.
    fn job(&mut self, ci: &Arc<CaymanInstr>, regs: &[u32; 256], working: bool) -> (u64, Job) {
        let job = Job {
            ci: Arc::clone(ci),
            regs: crate::cayman_exec::reads_registers(ci.opcode).then(|| Box::new(*regs)),
        };
        (self.id(working), job)
    }

    /// Run a word now, on the device thread; its result is taken with [`Self::take`].
    /// `working`: it has data to move or compute (not an ordering word).
    pub(super) fn run_inline(
        &mut self,
        ci: &CaymanInstr,
        regs: &mut [u32; 256],
        working: bool,
    ) -> u64 {
        let out = self.get().run(ci, regs);
        let id = self.id(working);
        self.ready.insert(id, out);
        id
    }

    /// Run a word on the device thread later: when its result is taken, when the lane is
    /// needed for anything else, or on the lane's thread if a later word goes there (in
    /// issue order either way). Another core's word issued meanwhile can then go to its own
    /// thread and run while this one does, where running it now would finish this one first.
    pub(super) fn defer(&mut self, ci: &Arc<CaymanInstr>, regs: &[u32; 256], working: bool) -> u64 {
        let (id, job) = self.job(ci, regs, working);
        if self.home.is_some() {
            self.deferred.push_back((id, job));
        } else {
            self.send_job(id, job);
        }
        id
    }

    /// Fill runs (byte offset, length) of the lane's SBUF or PSUM, each with `fill(i, bytes)`,
    /// after every word issued before: where the lane is with its thread, the bytes are sent
    /// after those words instead of bringing the lane home, so a DMA filling one tile does
    /// not wait for a MATMUL reading another. False (nothing written) if a run leaves the
    /// memory.
    pub(super) fn write_runs(
        &mut self,
        space: neuron_isa::Space,
        runs: &[(usize, usize)],
        mut fill: impl FnMut(usize, &mut [u8]),
    ) -> bool {
        let len = self.mem_len(space);
        if runs
            .iter()
            .any(|(at, n)| at.checked_add(*n).is_none_or(|end| end > len))
        {
            return false;
        }
        if let (true, Some(w)) = (self.is_away(), self.worker.as_ref()) {
            let mut data = vec![0u8; runs.iter().map(|r| r.1).sum()];
            let mut from = 0;
            for (i, (_, n)) in runs.iter().enumerate() {
                fill(i, &mut data[from..from + n]);
                from += n;
            }
            if w.tx.send(ToLane::Write(space, runs.to_vec(), data)).is_ok() {
                return true;
            }
            // The thread is gone: the lane is written where `get` finds it.
        }
        let mem = self.get().mem.bytes_mut(space);
        for (i, (at, n)) in runs.iter().enumerate() {
            fill(i, &mut mem[*at..at + n]);
        }
        true
    }

    /// Whether the lane is with its thread (words and DMA bytes for it are queued there).
    /// Whether the lane is at home with no deferred words: a word run inline now would run
    /// right after every word issued before it.
    pub(super) fn at_rest(&self) -> bool {
        self.home.is_some() && self.deferred.is_empty()
    }

    /// Words given to the lane so far (ids handed out), and results not yet taken.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (u64, usize) {
        (self.next, self.ready.len())
    }

    pub(super) fn is_away(&self) -> bool {
        self.home.is_none() && self.worker.is_some()
    }

    /// The storage stride of a memory of the lane (known while it is away).
    pub(super) fn stride(&self, space: neuron_isa::Space) -> usize {
        match space {
            neuron_isa::Space::Psum => self.strides[1],
            _ => self.strides[0],
        }
    }

    /// The SBUF storage's address for a user mapping of the window (`CoreMem::sbuf_ptr`,
    /// which lays the storage out as the window), every word sent before done.
    pub(super) fn sbuf_ptr(&mut self) -> *mut f32 {
        let mem = &mut self.get().mem;
        let p = mem.sbuf_ptr();
        self.strides[0] = self.home_lane().mem.stride(neuron_isa::Space::Sbuf);
        p
    }

    /// The size of a memory of the lane in bytes (known while it is away).
    pub(super) fn mem_len(&self, space: neuron_isa::Space) -> usize {
        match space {
            neuron_isa::Space::Psum => self.psum_len,
            _ => self.sbuf_len,
        }
    }

    /// Run the deferred words in order, up to and including `upto` (all of them for None).
    fn run_deferred(&mut self, upto: Option<u64>) {
        while let Some((id, mut job)) = self.deferred.pop_front() {
            let Some(lane) = self.home.as_deref_mut() else {
                self.deferred.push_front((id, job));
                return;
            };
            let out = job.run_on(lane);
            self.ready.insert(id, out);
            if upto == Some(id) {
                return;
            }
        }
    }

    /// Send a word to the lane's thread (started on first use; where no thread can be
    /// started the word runs inline); its result is taken with [`Self::take`].
    pub(super) fn send(&mut self, ci: &Arc<CaymanInstr>, regs: &[u32; 256], working: bool) -> u64 {
        let (id, job) = self.job(ci, regs, working);
        // Deferred words go first, to the thread as well, so the words keep their order.
        while let Some((d, j)) = self.deferred.pop_front() {
            self.send_job(d, j);
        }
        self.send_job(id, job);
        id
    }

    /// Hand the lane (if home) and one job to the thread; where no thread can be started or
    /// it is gone, the job runs inline now.
    fn send_job(&mut self, id: u64, mut job: Job) {
        if self.worker.is_none() {
            self.worker = spawn();
        }
        // (The lane leaves home only if there is a thread to take it.)
        if let Some(w) = self.worker.as_ref() {
            if let Some(l) = self.home.take() {
                if let Err(e) = w.tx.send(ToLane::Take(l)) {
                    if let ToLane::Take(l) = e.0 {
                        self.home = Some(l);
                    }
                }
            }
        }
        if let Some(w) = self.worker.as_ref() {
            match w.tx.send(ToLane::Job(id, job)) {
                Ok(()) => return,
                Err(e) => match e.0 {
                    ToLane::Job(_, j) => job = j,
                    _ => return,
                },
            }
        }
        // Deferred words still queued come after this one (`send` hands them over in order).
        let out = job.run_on(self.home_lane());
        self.ready.insert(id, out);
    }

    /// The result of word `id`, waiting for it.
    pub(super) fn take(&mut self, id: u64) -> Outcome {
        // Ids rise in issue order and every word after the first deferred one is deferred
        // too (handing one over or running one inline runs or sends the deferred first), so
        // `id` is deferred exactly when it is not before the queue's front.
        if self.deferred.front().is_some_and(|(d, _)| *d <= id) {
            self.run_deferred(Some(id));
        }
        loop {
            if let Some(o) = self.ready.remove(&id) {
                self.working.remove(&id);
                return o;
            }
            let got = self.worker.as_ref().and_then(|w| recv_spinning(&w.rx));
            match got {
                Some(FromLane::Done(i, out)) => {
                    self.ready.insert(i, out);
                }
                Some(FromLane::Back(l)) => self.home = Some(l),
                None => {
                    self.working.remove(&id);
                    return Outcome {
                        result: Err(OpFault::bad(format!(
                            "internal error: the result of lane word {id} was lost"
                        ))),
                        pe: PeTiming::default(),
                    };
                }
            }
        }
    }

    /// Drop every result not taken (a core reset).
    pub(super) fn forget(&mut self) {
        self.get();
        self.ready.clear();
        self.working.clear();
    }
}

/// Receive, polling for a while before sleeping (`crate::spin`): the two sides hand words and
/// results back and forth every few tens of microseconds, and waking a sleeping thread costs
/// more than that (100-400 us measured on a 2-CPU VM, where the idle CPU halts:
/// `docs/performance.md`).
fn recv_spinning<T>(rx: &Receiver<T>) -> Option<T> {
    use std::sync::mpsc::TryRecvError;
    let mut got: Option<Result<T, TryRecvError>> = None;
    let deadline = std::time::Instant::now() + SPIN;
    let ended = crate::spin::until(
        || match rx.try_recv() {
            Err(TryRecvError::Empty) => false,
            r => {
                got = Some(r);
                true
            }
        },
        deadline,
    );
    match (ended, got) {
        (true, Some(Ok(m))) => Some(m),
        (true, _) => None, // the other side is gone
        (false, _) => rx.recv().ok(),
    }
}

/// How long [`recv_spinning`] polls before it sleeps.
const SPIN: std::time::Duration = std::time::Duration::from_micros(300);

#[cfg(test)]
thread_local! {
    /// Tests: no lane thread can be started from this thread (as when the host refuses one).
    static REFUSE_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn spawn() -> Option<Worker> {
    #[cfg(test)]
    if REFUSE_SPAWN.with(std::cell::Cell::get) {
        return None;
    }
    let (tx, wrx) = channel();
    let (wtx, rx) = channel();
    let handle = std::thread::Builder::new()
        .name("neuron-lane".into())
        .spawn(move || serve(wrx, wtx))
        .ok()?;
    Some(Worker {
        tx,
        rx,
        handle: Some(handle),
    })
}

/// Where the cores' data paths run (`NEURON_EMU_THREADS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadMode {
    /// Every data path on the device thread (`1`).
    Off,
    /// A core's words go to its own thread while a lower-numbered core has words in flight
    /// (where they are worth the handover, `worth_a_thread`, or follow words already there),
    /// and that core's words run on the device thread when their results are taken
    /// (`LaneSlot::defer`), so cores running at the same time (an LNC=2 model's two,
    /// independent models) run on separate host threads, one of them the device thread;
    /// a core running alone stays on the device thread, where handing each word over would
    /// cost more than it saves (the default, `auto`).
    Auto,
    /// Every core that runs words on its own thread (`always`; for tests and measurements).
    Always,
}

impl ThreadMode {
    /// `NEURON_EMU_THREADS`: `1` (or `0`, `off`) → Off, `always` → Always, unset, `auto` or
    /// a number above 1 → Auto; Auto on a host with one CPU is Off. Other values keep Auto.
    pub fn from_env() -> ThreadMode {
        let v = std::env::var("NEURON_EMU_THREADS").unwrap_or_default();
        let mode = match v.trim() {
            "0" | "1" | "off" => ThreadMode::Off,
            "always" => ThreadMode::Always,
            _ => ThreadMode::Auto,
        };
        let host = crate::hostcpus::host_cpus();
        match mode {
            ThreadMode::Auto if host < 2 => ThreadMode::Off,
            m => m,
        }
    }
}

/// The environment variable [`ThreadMode::from_env`] reads.
pub const THREADS_ENV: &str = "NEURON_EMU_THREADS";

#[cfg(test)]
mod tests;
