//! Helper threads that share one large data-path step (a MATMUL's GEMM, an ACTIVATE's
//! function, a reduction) with the thread running it. The step is cut into chunks whose
//! results do not depend on who computes them; the caller claims chunks itself, and a helper
//! that is free claims some too. Nobody ever waits for a busy helper: if none joins, the
//! caller does every chunk, so results, fork children and one-CPU hosts all behave the same.
//!
//! Whether a thread may fan out is its own setting ([`with`]), set by the core's lane for
//! each word from `NEURON_EMU_THREADS` (`1` keeps every step on one thread).
//!
//! Sharing pays only while the helpers' caches are near the caller's: a shared step hands
//! part of its operands to another CPU and takes its results back. Each shared step times
//! how soon a spinning helper took it ([`NEAR_NS`]); while that says far ([`far`]), a
//! thread counts as one worker, so steps are cut and run as with `NEURON_EMU_THREADS=1`,
//! and every [`PROBE_NS`] a job with no pieces keeps measuring.
#![allow(unsafe_code)]

mod placement;

pub use placement::{far, NEAR_NS};
use placement::{note_join, prompt, stamp};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, LocalKey, Thread};
use std::time::{Duration, Instant};

/// Steps smaller than this many multiply-adds (or element operations weighted alike) stay
/// on one thread: a helper's first touch of the caller's operands and the caller's wait for
/// the last piece cost more than a 128 x 128 x 128 product saves (measured on a 2-CPU VM,
/// `docs/performance.md`); 128 x 128 x 256 and larger gain.
pub const MIN_WORK: u64 = 1 << 21;

/// How long an idle helper spins before it sleeps: a kernel's large steps come every few
/// tens of microseconds, and waking a sleeping thread costs about as much as a step.
const SPIN: Duration = Duration::from_micros(300);
/// How long an idle helper sleeps before it looks again (unless woken).
const PARK: Duration = Duration::from_millis(100);

thread_local! {
    static ALLOWED: Cell<bool> = const { Cell::new(false) };
    /// Whether [`far`] is heeded on this thread (tests that check how steps are cut set it
    /// off: a test process's helpers are often late for the other tests' threads).
    static HEED_PLACEMENT: Cell<bool> = const { Cell::new(true) };
}

/// Run `f` with this thread's steps cut as near whatever the placement ([`far`]): for
/// tests that check the cut.
#[cfg(test)]
pub(crate) fn ignoring_placement<R>(f: impl FnOnce() -> R) -> R {
    set_during(&HEED_PLACEMENT, false, f)
}

/// Run `f` with fan-out allowed or not on this thread (restored afterwards).
pub fn with<R>(allowed: bool, f: impl FnOnce() -> R) -> R {
    set_during(&ALLOWED, allowed, f)
}

/// Run `f` with this thread's flag `key` set to `value`, restored afterwards (on unwind
/// too).
fn set_during<R>(key: &'static LocalKey<Cell<bool>>, value: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|c| c.replace(value)));
    f()
}

/// Threads that would share a step on this thread now: 1 where fan-out is off, the host
/// has one CPU or the helpers are far ([`far`]), else the caller plus the pool's helpers.
pub fn workers() -> usize {
    if !ALLOWED.with(Cell::get) {
        return 1;
    }
    let Some(p) = pool() else { return 1 };
    let far = far() && HEED_PLACEMENT.with(Cell::get);
    if far {
        probe(p);
    }
    workers_of(true, p.helpers.get().map_or(0, Vec::len), far)
}

/// Threads that share a step: the caller and `helpers` where fan-out is `allowed` and the
/// helpers are near; only the caller where they are far ([`far`]), so a step is cut and run
/// as with fan-out off.
fn workers_of(allowed: bool, helpers: usize, far: bool) -> usize {
    if allowed && !far {
        helpers + 1
    } else {
        1
    }
}

/// A posted step: `n` chunks of `f`, claimed through `claimed`.
struct Job {
    /// When the helper that took the job had it ([`stamp`]; 0 until one does).
    joined: AtomicU64,
    /// Since when that helper had been spinning (not in a yield or asleep) when it took it.
    awake: AtomicU64,
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
    /// Chunks claimed from the front (the caller, low 32 bits) and from the back (helpers,
    /// high 32 bits): each thread tends to take the same end of every step, so rows a
    /// helper wrote in one step are the rows it reads in the next, in its own cache.
    claimed: AtomicU64,
    /// Helpers inside `f`'s chunks: the caller returns only once this is zero.
    active: AtomicUsize,
    panicked: AtomicBool,
}

/// A pointer to the caller's stack frame, valid while the job is posted and `active` > 0.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: a `Job` is only reached through this pointer between its posting and its
// retraction (under `Pool::slot`) or while its `active` count, which the caller waits on,
// holds it; its closure is `Sync`.
unsafe impl Send for JobPtr {}

struct Pool {
    slot: Mutex<Option<JobPtr>>,
    /// Bumped at each post, so a helper joins each job once.
    seq: AtomicU64,
    posted: AtomicBool,
    sleeping: AtomicUsize,
    helpers: OnceLock<Vec<Thread>>,
    /// Sleeping helpers woken for a probe ([`probe`]).
    probe_wakes: AtomicU64,
}

static POOL: OnceLock<Pool> = OnceLock::new();

impl Pool {
    /// A pool with no job posted and its helpers not yet started.
    fn new() -> Pool {
        Pool {
            slot: Mutex::new(None),
            seq: AtomicU64::new(0),
            posted: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            helpers: OnceLock::new(),
            probe_wakes: AtomicU64::new(0),
        }
    }
}

/// Steps shared out, and their pieces run by helpers (for `bench`).
static SHARED_STEPS: AtomicU64 = AtomicU64::new(0);
static HELPER_PIECES: AtomicU64 = AtomicU64::new(0);
static ALL_PIECES: AtomicU64 = AtomicU64::new(0);
static CALLER_WAIT_NS: AtomicU64 = AtomicU64::new(0);
static TIMED_JOINS: AtomicU64 = AtomicU64::new(0);
static PROMPT_JOINS: AtomicU64 = AtomicU64::new(0);

/// While far, a thread that asks how many workers share its step ([`workers`]) probes the
/// helpers this often (nanoseconds): it posts a job with no pieces (no operand crosses for
/// it), and a spinning helper's join times the distance again. A
/// helper asleep is woken instead and probed [`PROBE_WAKE_NS`] later; between probes it
/// spins its 300 us and sleeps, leaving its CPU alone.
pub const PROBE_NS: u64 = 50_000_000;
const PROBE_WAKE_NS: u64 = 50_000;

/// How long a probe waits for a spinning helper to take it (far, 230-270 ns).
const PROBE_WAIT: Duration = Duration::from_micros(2);

/// When the helpers were last probed ([`stamp`]; moved on by a wake-up, see [`PROBE_NS`]).
static LAST_PROBE: AtomicU64 = AtomicU64::new(0);

/// Counts since the process started: steps posted to the helpers, their pieces, the pieces
/// helpers ran, and how long callers waited, with every piece claimed, for helpers to finish
/// theirs (the cost of sharing a step that `bench real` reports).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub steps: u64,
    pub pieces: u64,
    pub helper_pieces: u64,
    pub caller_wait_ns: u64,
    /// Joins of a helper that was spinning when the step was posted, and those of them
    /// within [`NEAR_NS`] of the post: how near the helpers' caches were.
    pub timed_joins: u64,
    pub prompt_joins: u64,
    /// Nanoseconds the helpers were far ([`far`]): steps ran as on one thread.
    pub far_ns: u64,
}

impl Counts {
    /// Of the spinning helpers' joins timed since `before`, the share within [`NEAR_NS`],
    /// and whether that says the helpers' caches were near the callers' (half or more
    /// prompt: near runs gave 77-83%, far ones 0%); None where none was timed.
    pub fn near_since(&self, before: &Counts) -> Option<(f64, bool)> {
        let timed = self.timed_joins.checked_sub(before.timed_joins)?;
        let prompt = self.prompt_joins.checked_sub(before.prompt_joins)?;
        (timed > 0).then(|| (prompt as f64 / timed as f64, 2 * prompt >= timed))
    }
}

pub fn counts() -> Counts {
    Counts {
        steps: SHARED_STEPS.load(Ordering::Relaxed),
        pieces: ALL_PIECES.load(Ordering::Relaxed),
        helper_pieces: HELPER_PIECES.load(Ordering::Relaxed),
        caller_wait_ns: CALLER_WAIT_NS.load(Ordering::Relaxed),
        timed_joins: TIMED_JOINS.load(Ordering::Relaxed),
        prompt_joins: PROMPT_JOINS.load(Ordering::Relaxed),
        far_ns: placement::far_ns(),
    }
}

/// The helper threads this process has (0 on a one-CPU host).
pub fn helpers() -> usize {
    pool().and_then(|p| p.helpers.get()).map_or(0, Vec::len)
}

/// The process's pool: one helper per CPU beyond the first (at most 7), started on first
/// use; None on a one-CPU host or where no helper could start.
fn pool() -> Option<&'static Pool> {
    let p = POOL.get_or_init(Pool::new);
    let helpers = p.helpers.get_or_init(|| start_helpers(p));
    (!helpers.is_empty()).then_some(p)
}

/// Start the helper threads (a failed spawn leaves fewer).
fn start_helpers(p: &'static Pool) -> Vec<Thread> {
    let cpus = crate::hostcpus::host_cpus();
    let want = cpus.saturating_sub(1).min(7);
    let mut threads = Vec::new();
    for i in 0..want {
        match thread::Builder::new()
            .name(format!("neuron-fanout{i}"))
            .spawn(move || helper(p))
        {
            Ok(h) => threads.push(h.thread().clone()),
            Err(_) => break,
        }
    }
    threads
}

fn helper(p: &'static Pool) {
    let mut seen = 0u64;
    loop {
        let mut idle = Instant::now();
        // Since when this thread has been spinning: a post made before then was taken late
        // for that, not for the distance.
        let mut awake = stamp();
        let mut spins = 0u32;
        while !(p.posted.load(Ordering::SeqCst) && p.seq.load(Ordering::SeqCst) != seen) {
            spins = spins.wrapping_add(1);
            // Every 64 spins the clock is read and the CPU offered to anything else that
            // waits for it (on a busy host, the thread this helper would help).
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            if idle.elapsed() < SPIN {
                thread::yield_now();
                awake = stamp();
                continue;
            }
            p.sleeping.fetch_add(1, Ordering::SeqCst);
            if !(p.posted.load(Ordering::SeqCst) && p.seq.load(Ordering::SeqCst) != seen) {
                let slept = Instant::now();
                thread::park_timeout(PARK);
                if slept.elapsed() < PARK {
                    // Woken (a probe wakes a sleeping helper, then posts once it spins):
                    // spin again. Parking at once left every probe finding it asleep and
                    // waking it again, an unpark every `PROBE_WAKE_NS` while far.
                    idle = Instant::now();
                }
            }
            p.sleeping.fetch_sub(1, Ordering::SeqCst);
            awake = stamp();
        }
        let job = {
            let Ok(slot) = p.slot.lock() else { return };
            seen = p.seq.load(Ordering::SeqCst);
            match *slot {
                Some(j) => {
                    // SAFETY: the job is posted (we hold the slot), so its frame is alive.
                    unsafe { (*j.0).active.fetch_add(1, Ordering::SeqCst) };
                    j
                }
                None => continue,
            }
        };
        // SAFETY: `active` counts us, so the caller keeps the job (and `f`) alive.
        let j = unsafe { &*job.0 };
        // Stamped once the job is ours: the sighting and the two cache lines taking it
        // cross from the caller (a far cache pays each; `NEAR_NS`).
        j.awake.store(awake, Ordering::Relaxed);
        j.joined.store(stamp(), Ordering::Relaxed);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let ran = claim(j, true);
            HELPER_PIECES.fetch_add(ran, Ordering::Relaxed);
        }));
        if r.is_err() {
            j.panicked.store(true, Ordering::SeqCst);
        }
        j.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Claim and run chunks, from the front (the caller) or the back (a helper), until none are
/// left; returns how many this thread ran.
fn claim(j: &Job, from_back: bool) -> u64 {
    let mut ran = 0;
    loop {
        let got = j
            .claimed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                let (front, back) = (c & 0xffff_ffff, c >> 32);
                (front + back < j.n as u64).then(|| c + if from_back { 1 << 32 } else { 1 })
            });
        let Ok(c) = got else {
            return ran;
        };
        let (front, back) = ((c & 0xffff_ffff) as usize, (c >> 32) as usize);
        let i = if from_back { j.n - 1 - back } else { front };
        ran += 1;
        // SAFETY: `f` outlives the job (see `JobPtr`).
        unsafe { (*j.f)(i) };
    }
}

/// Lane threads (`device::lane`) running a word now: when they and the device thread fill
/// the host's CPUs (an LNC=2 model's two cores on a 2-CPU host: one core's words on the
/// device thread, the other's on its lane), a helper would only take CPU time from them, so
/// steps stay on their thread.
static LANES_BUSY: AtomicUsize = AtomicUsize::new(0);

/// Marks a lane thread as running a word while it lives ([`LANES_BUSY`]).
#[derive(Debug)]
pub struct LaneBusy(());

impl LaneBusy {
    pub fn enter() -> LaneBusy {
        LANES_BUSY.fetch_add(1, Ordering::SeqCst);
        LaneBusy(())
    }
}

impl Drop for LaneBusy {
    fn drop(&mut self) {
        LANES_BUSY.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Run `f(0..n)`, each index once, on this thread and on free helpers where fan-out is
/// allowed and the helpers are near ([`far`]); returns when every chunk is done. A panic in
/// a helper's chunk is raised here.
pub fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    let serial = || (0..n).for_each(f);
    let workers = workers();
    if n <= 1
        || n > u32::MAX as usize
        || workers <= 1
        || LANES_BUSY.load(Ordering::SeqCst) + 1 >= workers
    {
        return serial();
    }
    let Some(p) = pool() else { return serial() };
    if !post(p, n, f) {
        serial(); // another core's step holds the helpers
    }
}

/// While far, time a helper's join of a job with no pieces every [`PROBE_NS`] (no operand
/// crosses for it); a helper asleep is woken first.
fn probe(p: &'static Pool) {
    let now = stamp();
    if now.saturating_sub(LAST_PROBE.load(Ordering::Relaxed)) < PROBE_NS {
        return;
    }
    if p.sleeping.load(Ordering::SeqCst) > 0 {
        p.probe_wakes.fetch_add(1, Ordering::Relaxed);
        p.helpers
            .get()
            .into_iter()
            .flatten()
            .for_each(Thread::unpark);
        LAST_PROBE.store(
            now.saturating_sub(PROBE_NS - PROBE_WAKE_NS),
            Ordering::Relaxed,
        );
    } else {
        LAST_PROBE.store(now, Ordering::Relaxed);
        post(p, 0, &|_| {});
    }
}

/// Post `n` chunks of `f` to the helpers, run chunks here until none are left, retract the
/// job and wait for helpers still in theirs; then time the join. False (nothing run) where
/// another step holds the helpers.
fn post(p: &'static Pool, n: usize, f: &(dyn Fn(usize) + Sync)) -> bool {
    // SAFETY: only the lifetime is erased; the job is retracted and every helper has left
    // `f` before this function returns (or unwinds: `Retract` runs on the way out).
    let f_static: *const (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
    let job = Job {
        joined: AtomicU64::new(0),
        awake: AtomicU64::new(0),
        f: f_static,
        n,
        claimed: AtomicU64::new(0),
        active: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    };
    let posted;
    {
        let Ok(mut slot) = p.slot.try_lock() else {
            return false;
        };
        if slot.is_some() {
            return false;
        }
        *slot = Some(JobPtr(&job));
        p.seq.fetch_add(1, Ordering::SeqCst);
        p.posted.store(true, Ordering::SeqCst);
        posted = stamp();
    }
    // A sleeping helper's join measures its wake-up, not its distance.
    let spinning = p.sleeping.load(Ordering::SeqCst) == 0;
    if !spinning {
        p.helpers
            .get()
            .into_iter()
            .flatten()
            .for_each(Thread::unpark);
    }
    struct Retract<'a>(&'a Pool, &'a Job);
    impl Drop for Retract<'_> {
        fn drop(&mut self) {
            // Retracted even from a poisoned slot: a job left posted would point into a
            // frame that is about to go.
            let mut slot = self.0.slot.lock().unwrap_or_else(|e| e.into_inner());
            *slot = None;
            self.0.posted.store(false, Ordering::SeqCst);
            drop(slot);
            // A helper still in a piece: spin a little, then give it the CPU (on a busy
            // host it may be waiting for one).
            let mut spins = 0u32;
            while self.1.active.load(Ordering::SeqCst) != 0 {
                spins = spins.saturating_add(1);
                if spins < 2048 {
                    std::hint::spin_loop();
                } else {
                    thread::yield_now();
                }
            }
        }
    }
    if n == 0 {
        // A probe: held until a spinning helper takes it, or briefly.
        let _retract = Retract(p, &job);
        let asked = Instant::now();
        while spinning && job.joined.load(Ordering::Relaxed) == 0 && asked.elapsed() < PROBE_WAIT {
            std::hint::spin_loop();
        }
    } else {
        SHARED_STEPS.fetch_add(1, Ordering::Relaxed);
        ALL_PIECES.fetch_add(n as u64, Ordering::Relaxed);
        // Every piece is claimed when `claim` returns; `_retract` then waits, as it drops,
        // for helpers still in theirs: that wait is what `caller_wait_ns` counts.
        let waiting = {
            let _retract = Retract(p, &job);
            claim(&job, false);
            Instant::now()
        };
        let waited = u64::try_from(waiting.elapsed().as_nanos()).unwrap_or(u64::MAX);
        CALLER_WAIT_NS.fetch_add(waited, Ordering::Relaxed);
    }
    // Only the join of a helper spinning since before the post says how far it is.
    let awake = job.awake.load(Ordering::Relaxed);
    if let (true, Some(near)) = (
        spinning && awake <= posted,
        prompt(posted, job.joined.load(Ordering::Relaxed)),
    ) {
        TIMED_JOINS.fetch_add(1, Ordering::Relaxed);
        PROMPT_JOINS.fetch_add(u64::from(near), Ordering::Relaxed);
        note_join(near);
    }
    if job.panicked.load(Ordering::SeqCst) {
        panic!("a data-path step panicked on a helper thread");
    }
    true
}

/// A pointer into operands the pieces of one shared step reach from several threads (a
/// product's A, B and C; a transpose's source and destination), each piece reading what it
/// may and writing only its own elements.
#[derive(Clone, Copy)]
pub(crate) struct SharedPtr(pub(crate) *mut f32);
// SAFETY: the operands are borrowed by the step's caller for the whole step, and the pieces
// write apart (each user's SAFETY note says how).
unsafe impl Send for SharedPtr {}
unsafe impl Sync for SharedPtr {}

impl SharedPtr {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not its field).
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

/// Split `data` into pieces of `piece` elements (the last may be shorter) and run
/// `f(index, piece)` on each, fanned out where `work` (element operations) is large enough.
pub fn for_each_mut<T: Send>(
    data: &mut [T],
    piece: usize,
    work: u64,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let piece = piece.max(1);
    if work < MIN_WORK || data.len() <= piece || workers() <= 1 {
        data.chunks_mut(piece)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
        return;
    }
    let pieces: Vec<Mutex<&mut [T]>> = data.chunks_mut(piece).map(Mutex::new).collect();
    run(pieces.len(), &|i| {
        if let Ok(mut c) = pieces[i].lock() {
            f(i, &mut c);
        }
    });
}

/// How many rows (partitions) one piece of a `rows`-row step of `work` element operations
/// holds: one piece per worker ([`per_piece`]), all rows where the step stays on one
/// thread.
pub fn rows_per_piece(rows: usize, work: u64) -> usize {
    if work < MIN_WORK {
        return rows.max(1);
    }
    per_piece(rows)
}

/// How many of a step's `units` (rows, blocks of rows or columns) one piece holds where it
/// is shared: one piece per worker, so the caller takes the first and a helper the last,
/// the same rows step after step. Measured against two pieces per worker (2-CPU VM,
/// `bench real` on the six attention kernels, the two settings alternated execution by
/// execution in one process): 1.6-5.7% less host time, in quiet and busy spells alike (one
/// run of fused_fp32_s512 3.7% more); three pieces (one thread doing two) 7-21% more.
pub fn per_piece(units: usize) -> usize {
    units.div_ceil(workers().min(units).max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Shared steps are cut into one piece per worker (the caller and each helper); a step
    /// kept on one thread is one piece.
    #[test]
    fn a_shared_step_has_one_piece_per_worker() {
        let w = helpers() + 1;
        with(true, || {
            ignoring_placement(|| {
                assert_eq!(per_piece(128), 128usize.div_ceil(w));
                assert_eq!(per_piece(1), 1);
                assert_eq!(per_piece(0), 1);
                assert_eq!(rows_per_piece(128, MIN_WORK), 128usize.div_ceil(w));
                assert_eq!(rows_per_piece(128, MIN_WORK - 1), 128);
            })
        });
        with(false, || {
            assert_eq!(per_piece(128), 128);
            assert_eq!(rows_per_piece(128, MIN_WORK), 128);
        });
        eprintln!("helpers in this process: {}", w - 1);
    }

    #[test]
    fn every_chunk_runs_once_with_or_without_helpers() {
        for allowed in [false, true] {
            with(allowed, || {
                for n in [0usize, 1, 2, 7, 64, 1000] {
                    let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                    run(n, &|i| {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                }
            });
        }
    }

    /// Half or more of the joins prompt reads as near; nothing timed reads as nothing.
    #[test]
    fn the_share_of_prompt_joins_says_near_or_far() {
        let at = |timed, prompt| Counts {
            timed_joins: timed,
            prompt_joins: prompt,
            ..Counts::default()
        };
        let start = at(10, 8);
        assert_eq!(at(10, 8).near_since(&start), None);
        assert_eq!(at(110, 88).near_since(&start), Some((0.8, true)));
        assert_eq!(at(110, 58).near_since(&start), Some((0.5, true)));
        assert_eq!(at(110, 57).near_since(&start), Some((0.49, false)));
        assert_eq!(at(110, 8).near_since(&start), Some((0.0, false)));
    }

    /// While far, a probe wakes a sleeping helper and posts once it spins: one wake-up a
    /// probe. (A woken helper that went back to sleep at once was found asleep by every
    /// probe after it, and woken again every `PROBE_WAKE_NS`: 3,017 in the 300 ms here.)
    #[test]
    fn a_helper_woken_for_a_probe_spins_until_the_probe_comes() {
        let p: &'static Pool = Box::leak(Box::new(Pool::new()));
        let h = thread::Builder::new()
            .name("probe-test-helper".into())
            .spawn(move || helper(p))
            .expect("spawn");
        p.helpers.get_or_init(|| vec![h.thread().clone()]);
        // (Left running, asleep between looks: the test's own pool.)
        drop(h);
        let t = Instant::now();
        while p.sleeping.load(Ordering::SeqCst) == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the helper never slept"
            );
            thread::sleep(Duration::from_millis(1));
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(300) {
            probe(p);
            std::hint::spin_loop();
        }
        let wakes = p.probe_wakes.load(Ordering::Relaxed);
        // Six probes in 300 ms, each waking it once; room for a helper slow to be run.
        assert!(wakes <= 600, "{wakes} wake-ups for six probes");
    }

    /// Far, a thread allowed to fan out counts as one worker, as with fan-out off.
    #[test]
    fn far_counts_one_worker() {
        assert_eq!(workers_of(true, 1, false), 2);
        assert_eq!(workers_of(true, 1, true), 1);
        assert_eq!(workers_of(true, 7, false), 8);
        assert_eq!(workers_of(false, 7, false), 1);
        assert_eq!(workers_of(true, 0, false), 1);
    }

    #[test]
    fn pieces_cover_the_slice_and_the_setting_is_restored() {
        let mut v = vec![0u32; 10_000];
        with(true, || {
            for_each_mut(&mut v, 333, u64::MAX, |i, c| {
                c.iter_mut().for_each(|x| *x += i as u32 + 1)
            });
            assert!(with(false, workers) == 1);
        });
        assert_eq!(workers(), 1);
        for (j, x) in v.iter().enumerate() {
            assert_eq!(*x, (j / 333) as u32 + 1);
        }
    }

    /// The caller takes chunks from the front and helpers from the back, so each side keeps
    /// to the same rows step after step: the caller's chunks are a prefix.
    #[test]
    fn the_caller_takes_the_front_and_helpers_the_back() {
        with(true, || {
            let me = thread::current().id();
            let mine: Vec<AtomicBool> = (0..256).map(|_| AtomicBool::new(false)).collect();
            run(256, &|i| {
                mine[i].store(thread::current().id() == me, Ordering::Relaxed);
                std::hint::black_box((0..2000).sum::<u64>());
            });
            let k = mine
                .iter()
                .take_while(|m| m.load(Ordering::Relaxed))
                .count();
            // (A caller preempted right after its post may find every chunk taken: k = 0.)
            assert!(mine[k..].iter().all(|m| !m.load(Ordering::Relaxed)));
        });
    }

    /// A caller that has claimed every piece while a helper is still in one waits for it,
    /// and that wait is counted (other tests may add to the process-wide counts meanwhile,
    /// never take from them).
    #[test]
    fn a_callers_wait_for_a_helper_is_counted() {
        with(true, || {
            if workers() < 2 {
                eprintln!("SKIPPED: no helper thread on this host");
                return;
            }
            let before = counts();
            let me = thread::current().id();
            let back_on_helper = AtomicBool::new(false);
            run(2, &|i| {
                // The caller's piece (the front) gives a helper time to join and take the
                // back one, which outlasts it.
                let ms = if i == 0 { 5 } else { 40 };
                if i == 1 {
                    back_on_helper.store(thread::current().id() != me, Ordering::Relaxed);
                }
                thread::sleep(Duration::from_millis(ms));
            });
            let after = counts();
            // (Whether a helper took the back piece is asked of the piece itself: other tests'
            // steps add helper pieces to the process-wide counts meanwhile.)
            if back_on_helper.load(Ordering::Relaxed) {
                let waited = after.caller_wait_ns - before.caller_wait_ns;
                assert!(waited >= 10_000_000, "waited {waited} ns");
            } else {
                eprintln!("no helper joined this time; nothing to check");
            }
        });
    }

    /// While lane threads fill every worker's CPU, a step runs whole on its caller.
    #[test]
    fn busy_lanes_keep_a_step_on_its_caller() {
        with(true, || {
            let guards: Vec<LaneBusy> = (0..workers()).map(|_| LaneBusy::enter()).collect();
            let me = thread::current().id();
            let others = AtomicU32::new(0);
            let hits: Vec<AtomicU32> = (0..256).map(|_| AtomicU32::new(0)).collect();
            run(256, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                if thread::current().id() != me {
                    others.fetch_add(1, Ordering::Relaxed);
                }
                std::hint::black_box((0..200).sum::<u64>());
            });
            drop(guards);
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            assert_eq!(others.load(Ordering::Relaxed), 0);
        });
    }

    #[test]
    fn a_panicking_chunk_panics_the_caller_and_the_pool_stays_usable() {
        let r = std::panic::catch_unwind(|| {
            with(true, || {
                run(64, &|i| {
                    if i == 37 {
                        panic!("chunk 37");
                    }
                })
            })
        });
        assert!(r.is_err());
        let count = AtomicU32::new(0);
        with(true, || {
            run(64, &|_| {
                count.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 64);
    }
}
