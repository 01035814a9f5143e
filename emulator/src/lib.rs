//! The fake `neuron.ko`: the real driver's user-space ABI answered by an in-process "kernel".
//!
//! [`Emulator`] owns one or more emulated devices (`/dev/neuronN`). [`Emulator::open`] returns
//! an [`EmuFile`], which implements [`neuron_abi::DeviceFile`] with the driver's semantics:
//! ioctls dispatched on the full 32-bit command value with every argument validated (bad
//! handles, ids, sizes and pointers give the real driver's errno), `mmap` of whole mem chunks
//! and register pages, and the per-process lifecycle (attach on open, cleanup on last close).
//!
//! Each device runs on a worker thread that advances the device model whenever it has work,
//! and applies user-space stores to mapped register pages at quiescent points.
//!
//! Every user mapping is a new mapping of the device's memfd arena (`arena`), so user
//! `munmap`/`mprotect` (whole or partial) touch only the user's view; register-page views trap
//! each store (`mmio`). A forked child inherits open files but is not attached and has no
//! device thread: it gets errors, and its close touches nothing shared.

mod arena;
mod chunks;
mod driver;
mod drvstate;
pub mod envconfig;
mod forks;
#[doc(hidden)]
pub mod fuzzing;
pub mod guarded;
pub mod instance;
pub mod kmsg;
pub mod mmio;
pub mod serve;
pub mod sysfs;
pub mod uaccess;

pub use driver::{pci_bdf, Caller, BAR0_KVA, REVISION};

/// Keep the shared memory of up to `n` dropped devices of each device index, and the chunks
/// their HBM pages came from, zeroed, for devices made after (0: off, the default, and what
/// is kept is released). For a process that makes a fresh emulator per run, e.g. a fault
/// campaign: allocating each page anew was most of a small run's cost. Nothing a device
/// computes changes; what is kept stays allocated until the process ends or this is set to 0
/// (the HBM chunks kept are at most what the process's devices held at once). An arena user space may still reach (a mapping that
/// outlived its device, a memfd handed to a daemon's client, a forked child) is never kept.
pub fn keep_device_memory(n: usize) {
    arena::recycle::set(n);
    // The devices' instruction decodings too (a word decodes the same on any device).
    neuron_devmodel::device::keep_decodings(n);
    // And every HBM page chunk a device emptied: the process held them all at once, and the
    // next devices, alike, take them again (at 256 MiB a device, a 384 MiB model's pages
    // beyond it were faulted in anew every experiment: half its campaign's system time,
    // `docs/performance.md`, nineteenth session).
    neuron_devmodel::pagepool::PagePool::global().keep_empty(if n == 0 { 0 } else { usize::MAX });
}

/// Devices whose shared memory was a dropped device's ([`keep_device_memory`]).
pub fn device_memory_reused() -> u64 {
    arena::recycle::reused()
}

use arena::Arena;
use chunks::{ChunkTable, Lifespan};
use drvstate::DrvState;
use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_devmodel::regs::RegPage;
use neuron_devmodel::{ArchProfile, Device};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

const PAGE: usize = 4096;

/// Most processes that may have one device open at once (`driver-abi.md` §1).
pub const MAX_PROCESSES_PER_DEVICE: usize = 16;

/// How to open a device node.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// The process identity (TGID) the driver attributes this fd to.
    pub pid: u32,
    /// `O_WRONLY`: the "misc" fd that only accepts the misc ioctls and never attaches.
    pub write_only: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            pid: neuron_emu_remote::selfpid::get(),
            write_only: false,
        }
    }
}

/// What one user `mmap` shows.
#[derive(Debug)]
enum MapKind {
    /// A mem chunk (read-only if another process's); `hbm`: a device chunk, listed in the
    /// global VA table.
    Chunk { pa: u64, hbm: bool },
    /// A register page, its views' stores trapped by `traps` (empty where traps are not
    /// supported: the view is then writable and stores land in the mailboxes).
    Regs {
        _page: Arc<RegPage>,
        traps: Vec<mmio::Trap>,
    },
    /// A core's SBUF window (storage that lives as long as the device).
    Sbuf,
}

/// One user `mmap` call: what it maps and how many of its bytes are still mapped.
#[derive(Debug)]
struct Origin {
    va: usize,
    live: usize,
    kind: MapKind,
    /// Where the view's first byte lies in the device arena, and the protection granted
    /// (what a daemon tells its remote caller to map).
    arena_off: u64,
    prot: i32,
}

pub use neuron_emu_remote::ranges::carve;

impl DevState {
    /// Whether stores made through register mappings wait to be applied. Only a page
    /// mapped writable without traps takes stores in its mailbox words unseen; otherwise
    /// every store was posted, and the posted ones are known without reading the words.
    pub(crate) fn mail_waiting(&self) -> bool {
        if self.untrapped_views {
            self.dev.has_mail()
        } else {
            self.dev.has_posted_mail()
        }
    }
}

impl Drop for DevState {
    fn drop(&mut self) {
        // Every region of the arena goes with the fields: a kept arena is zeroed once, whole.
        if let Some(a) = &self.arena {
            a.closing();
        }
    }
}

/// One attach slot (`attached_processes[16]`, `driver-abi.md` §1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) open_count: u32,
}

/// Mutable state of one device: the model plus the driver's bookkeeping.
#[derive(Debug)]
pub(crate) struct DevState {
    pub(crate) dev: Device,
    pub(crate) chunks: ChunkTable,
    /// Attach slots, in slot order (DEVICE_APP_PID reports slot 0).
    pub(crate) procs: Vec<Option<Proc>>,
    /// (DMA engine, queue) -> owning pid.
    pub(crate) queue_owner: HashMap<(u32, u32), u32>,
    /// (nc, nq_type, engine_index) -> chunk handle of a notification queue.
    pub(crate) nqs: HashMap<(u32, u32, u32), u64>,
    /// User mappings: pieces by start address -> (origin id, length), and the origins.
    maps: BTreeMap<usize, (u64, usize)>,
    origins: HashMap<u64, Origin>,
    next_origin: u64,
    node_open_count: u32,
    /// The OS process that created the emulator (a forked child has another id).
    os_pid: u32,
    /// Shared-memory arena for mappable memory (None: heap fallback, no read-only aliases).
    pub(crate) arena: Option<Arena>,
    /// The rest of the driver's per-device state (CRWL, core init, datastore, ...).
    pub(crate) drv: DrvState,
    /// An ioctl found stores in the register mailboxes while the device was running: apply
    /// them at its next quiescent point.
    pub(crate) drain_pending: bool,
    /// Ioctls waiting for the device to reach a quiescent point (`claim_mail`).
    ioctls_waiting: u32,
    /// A register page was mapped writable without store traps (a daemon's remote caller):
    /// the device thread also applies mailbox stores no ioctl claims.
    untrapped_views: bool,
}

impl DevState {
    pub(crate) fn attached(&self, pid: u32) -> bool {
        // In a forked child nobody is attached: the child inherited the fds, not the slots.
        neuron_emu_remote::selfpid::get() == self.os_pid
            && self.procs.iter().flatten().any(|p| p.pid == pid)
    }

    /// Register host memory for a new host chunk at device address `pa`.
    pub(crate) fn add_host_memory(&mut self, pa: u64, size: u64) -> bool {
        let bus = pa & !self.dev.profile().arch.host_base_bit();
        if let Some(r) = self.arena.as_ref().and_then(|a| a.host_region(bus, size)) {
            return self.dev.add_host_region_external(bus, r).is_some();
        }
        self.dev.add_host_region(bus, size as usize).is_some()
    }
}

/// State shared by all devices of one emulator (the driver's module-global state).
#[derive(Debug)]
pub(crate) struct Global {
    pub(crate) count: usize,
    /// Owner pid of each of the 64 × 8 global NeuronCore slots (CRWL range marks), 0 = free.
    pub(crate) crwl_range: Mutex<Vec<u32>>,
    /// Device-memory mappings by user VA: (pid, length, device index, HBM index).
    pub(crate) va_maps: Mutex<BTreeMap<usize, (u32, usize, usize, u32)>>,
    /// The kernel log (`dmesg`).
    pub(crate) kmsg: Mutex<kmsg::Kmsg>,
    /// The emulated instance: its devices' links (DEVICE_INFO, sysfs) and identity.
    pub(crate) instance: instance::Instance,
}

impl Global {
    pub(crate) fn lock_range(&self) -> MutexGuard<'_, Vec<u32>> {
        self.crwl_range.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn lock_va(&self) -> MutexGuard<'_, BTreeMap<usize, (u32, usize, usize, u32)>> {
        self.va_maps.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn lock_kmsg(&self) -> MutexGuard<'_, kmsg::Kmsg> {
        self.kmsg.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct DevShared {
    index: usize,
    arch: Arch,
    global: Arc<Global>,
    state: Mutex<DevState>,
    kick: Condvar,
    /// Wake-ups sent ([`DevShared::wake`]): what the worker watches while it spins after a
    /// run instead of sleeping on `kick`.
    kicks: AtomicU64,
    /// Signalled by the worker when the device is quiescent and an ioctl waits for that.
    quiet: Condvar,
    stop: AtomicBool,
    /// The OS process that created the device (and runs its worker thread).
    os_pid: u32,
    /// Threads other than the worker waiting for `state` ([`DevShared::lock`]): the worker
    /// yields its CPU between batches only then (a yield per batch cost the device thread
    /// ~5% of a decode step in syscalls and switches, `docs/performance.md`).
    wanting: AtomicU32,
}

impl DevShared {
    /// The device state, for anyone but the worker: counted in `wanting` while waiting.
    fn lock(&self) -> MutexGuard<'_, DevState> {
        self.wanting.fetch_add(1, Ordering::AcqRel);
        let g = self.lock_worker();
        self.wanting.fetch_sub(1, Ordering::AcqRel);
        g
    }

    /// The worker's own lock, not counted in `wanting`.
    fn lock_worker(&self) -> MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wake the worker: the model may have work now.
    fn wake(&self) {
        self.kicks.fetch_add(1, Ordering::AcqRel);
        self.kick.notify_all();
    }

    /// Whether this is a forked child's copy: no device thread, nothing here is the child's.
    fn forked(&self) -> bool {
        neuron_emu_remote::selfpid::get() != self.os_pid
    }
}

/// The device thread. User-space stores to mapped register pages take effect at points fixed
/// by what user space does, never by host thread timing: on entry to the next ioctl of any kind
/// (at once if the device is quiescent, else at its next quiescent point). Trapped stores
/// (`mmio`) that no ioctl claims are applied by this thread at a quiescent point once they
/// have stood through one of its idle polls with no newer store, after at least `SETTLE` of
/// idling (so a burst of stores followed by an ioctl, such as the runtime's start of both cores
/// of an LNC=2 model, is applied as one by that ioctl; only a program that stores and makes no
/// ioctl relies on this thread, and sees its stores within a few milliseconds).
fn worker(sh: Arc<DevShared>) {
    const MIN: Duration = Duration::from_micros(50);
    const MAX: Duration = Duration::from_millis(5);
    const SETTLE: Duration = Duration::from_millis(1);
    let mut backoff = MIN;
    // Until when the idle worker watches `kicks` instead of sleeping (set by each run).
    let mut spin_until = None;
    // Trapped-store count covered by this thread's last drain, and seen at its last poll.
    let mut applied = mmio::posted();
    let mut last = applied;
    // Whether untrapped mailbox stores were there at the last idle poll already.
    let mut mail_stood = false;
    let mut g = sh.lock_worker();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        if !g.dev.busy() {
            if g.ioctls_waiting > 0 {
                sh.quiet.notify_all();
            }
            let posted = mmio::posted();
            let settled = posted != applied && posted == last && backoff >= SETTLE;
            // Stores through untrapped views (remote callers) post no count: they are applied
            // once they stood through one idle poll, after the same settle time.
            let mail = g.untrapped_views && backoff >= SETTLE && g.dev.has_mail();
            if g.drain_pending || settled || (mail && mail_stood) {
                g.drain_pending = false;
                g.dev.drain_mailboxes();
                applied = posted;
                mail_stood = false;
            } else {
                mail_stood = mail;
            }
            last = posted;
        }
        if g.dev.busy() {
            // A bug in the model must not take the device thread down with it: report it and
            // reset the cores, as a hardware watchdog would.
            let dev = &mut g.dev;
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.run(64))).is_err() {
                tracing::error!(target: "KDRV", "device model panic on /dev/neuron{}: all cores reset", sh.index);
                for nc in 0..g.dev.profile().nc_count {
                    g.dev.reset_nc(nc);
                }
            }
            backoff = MIN;
            spin_until = Some(std::time::Instant::now() + IDLE_SPIN);
            drop(g);
            // An ioctl (or another caller) waiting for the state gets it now: a thread woken
            // from the lock's wait would otherwise find it taken again at once.
            if sh.wanting.load(Ordering::Acquire) > 0 {
                std::thread::yield_now();
            }
            g = sh.lock_worker();
            continue;
        }
        if let Some(until) = spin_until.filter(|u| std::time::Instant::now() < *u) {
            // Idle after a run: the caller's next execution usually starts within tens of
            // microseconds, and a wake-up from `kick` takes ~10-20 µs to reach a VM's halted
            // vCPU. Watch for one without the lock, then look at the state again from the top
            // (still idle once the spin is over: the wait below, which misses no wake-up).
            let seen = sh.kicks.load(Ordering::Acquire);
            drop(g);
            neuron_devmodel::spin::until(
                || sh.kicks.load(Ordering::Acquire) != seen || sh.stop.load(Ordering::Acquire),
                until,
            );
            g = sh.lock_worker();
            continue;
        }
        let (ng, to) = sh
            .kick
            .wait_timeout(g, backoff)
            .unwrap_or_else(|e| e.into_inner());
        g = ng;
        backoff = if to.timed_out() {
            (backoff * 2).min(MAX)
        } else {
            MIN
        };
    }
}

/// How long the worker watches for a wake-up after a run before it sleeps.
const IDLE_SPIN: Duration = Duration::from_micros(100);

/// Longest an ioctl waits for a running device to reach a quiescent point. Only a device that
/// keeps running this long (a program in an endless loop, or an ioctl from another thread
/// during a long execution) sees an ioctl take effect at a point host timing chooses.
const QUIESCE_WAIT: Duration = Duration::from_millis(100);

/// On entry to an ioctl: let a running device reach its next quiescent point first (so what
/// the ioctl does takes effect at a point fixed by the device's own progress, not by host
/// thread timing: runs and their traces are deterministic), then apply the stores user space
/// made through register mappings before it (see `worker`). Not in a forked child (its copy of
/// the device runs nowhere). True where stores were claimed: the caller wakes the worker after
/// the ioctl.
fn claim_mail(sh: &DevShared) -> bool {
    if sh.forked() {
        return false;
    }
    let mut g = sh.lock();
    if g.dev.busy() {
        let deadline = std::time::Instant::now() + QUIESCE_WAIT;
        g.ioctls_waiting += 1;
        sh.wake();
        while g.dev.busy() && !sh.stop.load(Ordering::Acquire) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            g = sh
                .quiet
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        g.ioctls_waiting -= 1;
    }
    if !g.mail_waiting() {
        return false;
    }
    if g.dev.busy() {
        g.drain_pending = true;
    } else {
        g.dev.drain_mailboxes();
    }
    true
}

/// A set of emulated Neuron devices.
#[derive(Debug)]
pub struct Emulator {
    devices: Vec<Arc<DevShared>>,
    workers: Vec<JoinHandle<()>>,
    global: Arc<Global>,
}

impl Emulator {
    /// Create `count` devices of architecture `arch`, each with its worker thread: a generic
    /// instance (`instance::Instance::generic`: the driver's links for that arch and count).
    pub fn new(arch: Arch, count: usize) -> Emulator {
        Emulator::with_instance(&instance::Instance::generic(arch, count))
    }

    /// Create the devices of instance `inst` (a preset of `instance::Instance::by_name`).
    pub fn with_instance(inst: &instance::Instance) -> Emulator {
        let (arch, count) = (inst.arch, inst.devices);
        let mut devices = Vec::new();
        let mut workers = Vec::new();
        let count = count.min(neuron_abi::consts::MAX_NEURON_DEVICE_COUNT as usize);
        let global = Arc::new(Global {
            count,
            crwl_range: Mutex::new(vec![0; drvstate::CRWL_GLOBAL_SLOTS]),
            va_maps: Mutex::new(BTreeMap::new()),
            kmsg: Mutex::new(kmsg::Kmsg::default()),
            instance: inst.clone(),
        });
        for index in 0..count {
            let profile = ArchProfile::new(arch);
            let hbm: Vec<(u64, u64)> = (0..arch.hbm_count())
                .filter_map(|k| arch.hbm_base(k))
                .map(|b| {
                    (
                        b + arch.hbm_reserved_bytes(),
                        arch.hbm_size() - arch.hbm_reserved_bytes(),
                    )
                })
                .collect();
            let arena = Arena::new(index);
            // SBUF, PSUM and register pages live in the arena, so user space can map them.
            let dev = match &arena {
                Some(a) => Device::with_memory(profile, &|n| a.internal_region(n)),
                None => Device::new(profile),
            };
            let st = DevState {
                dev,
                chunks: ChunkTable::new(&hbm, arch.host_base_bit()),
                procs: vec![None; MAX_PROCESSES_PER_DEVICE],
                queue_owner: HashMap::new(),
                nqs: HashMap::new(),
                maps: BTreeMap::new(),
                origins: HashMap::new(),
                next_origin: 0,
                node_open_count: 0,
                os_pid: neuron_emu_remote::selfpid::get(),
                arena,
                drv: DrvState::new(arch),
                drain_pending: false,
                ioctls_waiting: 0,
                untrapped_views: false,
            };
            let sh = Arc::new(DevShared {
                index,
                arch,
                global: global.clone(),
                state: Mutex::new(st),
                kick: Condvar::new(),
                kicks: AtomicU64::new(0),
                quiet: Condvar::new(),
                stop: AtomicBool::new(false),
                wanting: AtomicU32::new(0),
                os_pid: neuron_emu_remote::selfpid::get(),
            });
            forks::register(&sh);
            let w = sh.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("neuron{index}-device"))
                .spawn(move || worker(w));
            if let Ok(h) = spawned {
                workers.push(h);
            }
            devices.push(sh);
        }
        Emulator {
            devices,
            workers,
            global,
        }
    }

    /// The emulated instance.
    pub fn instance(&self) -> &instance::Instance {
        &self.global.instance
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    pub fn arch(&self) -> Option<Arch> {
        self.devices.first().map(|d| d.arch)
    }

    /// `open("/dev/neuron<index>")`. In a forked child of the process that created the
    /// emulator the device is unreachable (its thread and memory are the parent's): `ENODEV`.
    pub fn open(&self, index: usize, opts: OpenOptions) -> Result<EmuFile, Errno> {
        let sh = self.devices.get(index).ok_or(Errno::ENODEV)?.clone();
        if sh.forked() {
            return Err(Errno::ENODEV);
        }
        {
            let mut g = sh.lock();
            if !opts.write_only {
                // npid_attach: a known process bumps its count, a new one takes a free slot.
                if let Some(p) = g.procs.iter_mut().flatten().find(|p| p.pid == opts.pid) {
                    p.open_count += 1;
                } else if let Some(slot) = g.procs.iter_mut().find(|s| s.is_none()) {
                    *slot = Some(Proc {
                        pid: opts.pid,
                        open_count: 1,
                    });
                } else {
                    return Err(Errno::EBUSY);
                }
                g.node_open_count += 1;
            }
        }
        Ok(EmuFile {
            sh,
            pid: opts.pid,
            misc: opts.write_only,
            inherited: false,
            untrapped: false,
        })
    }

    /// Run `f` on device `index`'s model. A test hook: tools use the typed queries of
    /// [`control`]. Must not be called in a forked child.
    #[doc(hidden)]
    pub fn with_device<R>(&self, index: usize, f: impl FnOnce(&mut Device) -> R) -> Option<R> {
        let sh = self.devices.get(index)?;
        let mut g = sh.lock();
        Some(f(&mut g.dev))
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if self.devices.first().is_some_and(|d| d.forked()) {
            // A forked child's copy: the worker threads are not here to join, and freeing the
            // devices would touch memory shared with the parent. Leave it all to _exit.
            std::mem::forget(std::mem::take(&mut self.devices));
            std::mem::forget(std::mem::take(&mut self.workers));
            return;
        }
        for d in &self.devices {
            d.stop.store(true, Ordering::Release);
            d.wake();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// An open file on an emulated `/dev/neuronN`.
#[derive(Debug)]
pub struct EmuFile {
    sh: Arc<DevShared>,
    pid: u32,
    misc: bool,
    /// Inherited across a (simulated) fork: the holder never attached.
    inherited: bool,
    /// Register pages map writable without store traps (stores land in the mailboxes): for
    /// a daemon serving another process, whose stores this process cannot trap.
    untrapped: bool,
}

impl EmuFile {
    /// The same open file as seen by process `pid` after a `fork`: it inherits the fd but was
    /// never attached, so the commands marked **A** answer `EACCES` for it (the only way that
    /// answer is reachable, `driver-abi.md` §1). Closing it runs no per-process cleanup.
    pub fn inherit(&self, pid: u32) -> EmuFile {
        if !self.misc {
            self.sh.lock().node_open_count += 1;
        }
        EmuFile {
            sh: self.sh.clone(),
            pid,
            misc: self.misc,
            inherited: true,
            untrapped: self.untrapped,
        }
    }

    /// This file's register-page mappings are writable views without store traps (their
    /// stores land in the page's mailboxes, applied at the next ioctl or by the device thread
    /// after its settle time). For a daemon, whose callers' stores it cannot trap.
    pub fn without_store_traps(mut self) -> EmuFile {
        self.untrapped = true;
        self
    }

    /// Whether this is the misc (`O_WRONLY`) fd.
    pub fn is_misc(&self) -> bool {
        self.misc
    }

    /// The device arena's memfd (every mapping's bytes), if the device has one. Valid as long
    /// as the emulator lives; the caller must not close it.
    pub fn arena_fd(&self) -> Option<i32> {
        self.sh.lock().arena.as_ref().map(|a| a.fd())
    }

    /// For the start `p` of a mapping made by [`DeviceFile::mmap`] on this device: where its
    /// bytes lie in the arena memfd, and the protection granted.
    pub fn mapping_source(&self, p: *mut u8) -> Option<(u64, i32)> {
        let g = self.sh.lock();
        let (&start, &(id, _)) = g.maps.range(..=p as usize).next_back()?;
        let o = g.origins.get(&id)?;
        let delta = (p as usize).checked_sub(o.va)?;
        (start <= p as usize).then_some((o.arena_off + delta as u64, o.prot))
    }

    /// An ioctl whose user memory is `mem` (a daemon's remote caller) instead of this
    /// process's: the same gates, quiescent point and dispatch as [`DeviceFile::ioctl`].
    pub fn ioctl_with(
        &self,
        cmd: u32,
        arg: u64,
        mem: &dyn uaccess::UserMemory,
    ) -> Result<i32, Errno> {
        let mail = !self.misc && claim_mail(&self.sh);
        let caller = Caller { pid: self.pid, mem };
        // A bug in a handler answers EIO instead of unwinding into the caller.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            driver::ioctl(&self.sh, self.misc, &caller, cmd, arg)
        }))
        .unwrap_or(Err(Errno::EIO));
        // The stores claimed may have given the device work: wake it once the handler is
        // done, so it does not take the state from the handler in between.
        if mail {
            self.sh.wake();
        }
        let name = neuron_abi::ioctl::lookup(cmd).map_or("unknown", |c| c.name);
        match r {
            Ok(_) => {
                tracing::debug!(target: "KDRV", "ioctl {name} (0x{cmd:08x}) pid {} -> 0", self.pid)
            }
            Err(e) => {
                tracing::debug!(target: "KDRV", "ioctl {name} (0x{cmd:08x}) pid {} -> {e}", self.pid)
            }
        }
        r
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
    pub fn device_index(&self) -> usize {
        self.sh.index
    }
    pub fn arch(&self) -> Arch {
        self.sh.arch
    }
}

impl DeviceFile for EmuFile {
    // The argument is only ever touched through `uaccess` (a guarded copy, else
    // process_vm_readv/writev), which turns bad pointers into EFAULT, so this implementation
    // is sound for any `arg`.
    #[allow(unsafe_code)]
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        self.ioctl_with(cmd, arg as u64, &uaccess::OwnProcess)
    }

    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno> {
        use neuron_abi::device::{PROT_READ, PROT_RW, PROT_WRITE};
        if self.misc || prot & !PROT_RW != 0 {
            return Err(Errno::EINVAL);
        }
        if self.sh.forked() {
            // Not attached (and the device's memory is not the child's to map).
            return Err(Errno::EACCES);
        }
        let mut g = self.sh.lock();
        // Every user mapping is a new view of the arena; without one nothing is mappable.
        let arena = g.arena.clone().ok_or(Errno::ENODEV)?;
        let host_bit = self.sh.arch.host_base_bit();
        if let Some(c) = g.chunks.find_pa(offset).cloned() {
            // Whole chunks only, from their first byte (`driver-abi.md` §2.4).
            if len as u64 != c.size || offset != c.pa {
                return Err(Errno::EINVAL);
            }
            let rw = if c.host {
                g.dev
                    .host_region_ptr(c.pa & !host_bit)
                    .ok_or(Errno::EFAULT)?
            } else {
                match g.dev.hbm_backing(c.pa) {
                    Some((p, _)) => p,
                    None => {
                        let region = arena.device_region(c.size).ok_or(Errno::ENOMEM)?;
                        g.dev.back_hbm(c.pa, region).map_err(|_| Errno::ENODEV)?
                    }
                }
            };
            // Another process's chunk (not device-lifespan) is mapped read-only.
            let read_only = c.pid != self.pid && c.lifespan != Lifespan::Device;
            let uprot = if read_only { prot & !PROT_WRITE } else { prot };
            let p = arena.map_user(rw, len, uprot).ok_or(Errno::ENOMEM)?;
            g.chunks.map_ref(c.pa, 1);
            let hbm = !c.host;
            let src = (arena.offset_of(rw), uprot);
            add_mapping(&mut g, p, len, MapKind::Chunk { pa: c.pa, hbm }, src);
            if hbm {
                self.sh
                    .global
                    .lock_va()
                    .insert(p as usize, (self.pid, len, self.sh.index, c.hbm));
            }
            tracing::debug!(target: "KDRV", "mmap chunk pa 0x{:x} len 0x{len:x} pid {}{}", c.pa, self.pid, if read_only { " (read-only)" } else { "" });
            return Ok(p);
        }
        if let Some(w) = self.sh.arch.find_resource(offset, len as u64) {
            use neuron_abi::consts::{MMAP_BLOCK_TPB, MMAP_RESOURCE_SBUF, MMAP_RESOURCE_SEMAPHORE};
            if w.block == MMAP_BLOCK_TPB && w.resource == MMAP_RESOURCE_SEMAPHORE {
                let page = g.dev.regs(w.block_id as usize).ok_or(Errno::EINVAL)?;
                // With traps, the view is read-only and each store faults into `mmio`.
                let trapped = mmio::available() && !self.untrapped;
                let vprot = match (trapped, prot) {
                    (_, 0) => 0,
                    (true, _) => PROT_READ,
                    (false, p) => p,
                };
                let p = arena
                    .map_user(page.as_ptr(), len, vprot)
                    .ok_or(Errno::ENOMEM)?;
                let mut traps = Vec::new();
                if trapped && vprot != 0 {
                    for k in (0..len).step_by(PAGE) {
                        let t =
                            mmio::register(p as usize + k, &page, k as u32, prot & PROT_WRITE != 0);
                        match t {
                            Some(t) => traps.push(t),
                            None => {
                                drop(traps);
                                arena.unmap_user(p, len);
                                return Err(Errno::ENOMEM);
                            }
                        }
                    }
                }
                tracing::debug!(target: "KDRV", "mmap TPB {} semaphore page (offset 0x{offset:x}, stores {})",
                    w.block_id, if trapped { "trapped" } else { "to the mailboxes" });
                if !trapped && vprot & PROT_WRITE != 0 {
                    g.untrapped_views = true;
                }
                let src = (arena.offset_of(page.as_ptr()), vprot);
                add_mapping(&mut g, p, len, MapKind::Regs { _page: page, traps }, src);
                return Ok(p);
            }
            if w.block == MMAP_BLOCK_TPB && w.resource == MMAP_RESOURCE_SBUF {
                let rw = g
                    .dev
                    .sbuf_window_ptr(w.block_id as usize)
                    .ok_or(Errno::EINVAL)?;
                let p = arena.map_user(rw, len, prot).ok_or(Errno::ENOMEM)?;
                tracing::debug!(target: "KDRV", "mmap TPB {} SBUF window (offset 0x{offset:x})", w.block_id);
                let src = (arena.offset_of(rw), prot);
                add_mapping(&mut g, p, len, MapKind::Sbuf, src);
                return Ok(p);
            }
            // TOP_SP pages and whole-HBM DMEM rows are not backed by a consistent host memory
            // in the model (docs/abi-coverage.md, mmap).
            return Err(Errno::ENODEV);
        }
        Err(Errno::EINVAL)
    }

    /// Whole or partial, as `munmap(2)`: page-aligned `addr`, `len` rounded up to pages, and
    /// the range must lie in mappings made here (else `EINVAL`). A mapping's chunk reference
    /// drops when its last byte is unmapped.
    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        let addr = addr as usize;
        let len = len.checked_next_multiple_of(PAGE).ok_or(Errno::EINVAL)?;
        if self.sh.forked() || !addr.is_multiple_of(PAGE) || len == 0 {
            // A forked child has none of the parent's mappings (they are DONTFORK).
            return Err(Errno::EINVAL);
        }
        let mut g = self.sh.lock();
        let parts = carve(&mut g.maps, addr, len).ok_or(Errno::EINVAL)?;
        for &(start, n, id) in &parts {
            if let Some(MapKind::Regs { traps, .. }) = g.origins.get_mut(&id).map(|o| &mut o.kind) {
                // Stop trapping before the view goes, so a racing store cannot be misread.
                traps.retain(|t| !(start..start + n).contains(&t.start()));
            }
        }
        // The range is ours without a gap (`carve`): one munmap for every mapping it meets
        // (one TLB shootdown on the process's other CPUs, not one per mapping).
        if let Some(a) = g.arena.as_ref() {
            a.unmap_user(addr as *mut u8, len);
        }
        for (_, n, id) in parts {
            let Some(o) = g.origins.get_mut(&id) else {
                continue;
            };
            o.live = o.live.saturating_sub(n);
            let done = o.live == 0;
            if done {
                if let Some(o) = g.origins.remove(&id) {
                    finish_mapping(&mut g, &self.sh.global, o);
                }
            }
        }
        Ok(())
    }
}

/// Record a new user mapping of `len` bytes at `p`.
fn add_mapping(g: &mut DevState, p: *mut u8, len: usize, kind: MapKind, src: (Option<u64>, i32)) {
    let len = len.next_multiple_of(PAGE);
    let id = g.next_origin;
    g.next_origin += 1;
    g.maps.insert(p as usize, (id, len));
    g.origins.insert(
        id,
        Origin {
            va: p as usize,
            live: len,
            kind,
            arena_off: src.0.unwrap_or(0),
            prot: src.1,
        },
    );
}

/// The last byte of a user mapping is gone: drop what it held.
fn finish_mapping(g: &mut DevState, global: &Global, o: Origin) {
    if let MapKind::Chunk { pa, hbm } = o.kind {
        if hbm {
            global.lock_va().remove(&o.va);
        }
        if let Some(c) = g.chunks.map_ref(pa, -1) {
            release_chunk_memory(g, &c);
        }
    }
}

pub(crate) fn release_chunk_memory(g: &mut DevState, c: &chunks::Chunk) {
    let host_bit = g.dev.profile().arch.host_base_bit();
    if c.host {
        g.dev.remove_host_region(c.pa & !host_bit);
    } else {
        g.dev.discard(c.pa, c.size);
    }
}

impl Drop for EmuFile {
    /// flush + release (`driver-abi.md` §1): a misc fd's close drops the pid's core
    /// reservations; the last close by a process stops the DMA queues it owns, releases its
    /// CRWL locks, datastore entry and process-lifespan chunks; the node's last close clears the
    /// datastore.
    fn drop(&mut self) {
        if self.sh.forked() {
            // A forked child's close: no cleanup, nothing shared touched, and the device must
            // never be freed here (its memory is the parent's).
            std::mem::forget(self.sh.clone());
            return;
        }
        let pid = self.pid;
        if self.misc {
            for o in self.sh.global.lock_range().iter_mut() {
                if *o == pid {
                    *o = 0;
                }
            }
            return;
        }
        let mut g = self.sh.lock();
        let mut last_of_process = false;
        if !self.inherited {
            for slot in g.procs.iter_mut() {
                if let Some(p) = slot {
                    if p.pid == pid {
                        if p.open_count > 1 {
                            p.open_count -= 1;
                        } else {
                            *slot = None;
                            last_of_process = true;
                        }
                        break;
                    }
                }
            }
        }
        if last_of_process {
            process_exit(&mut g, self.sh.arch, pid);
        }
        g.node_open_count = g.node_open_count.saturating_sub(1);
        if g.node_open_count == 0 {
            drvstate::datastore_clear(&mut g);
        }
    }
}

/// The driver's per-process cleanup on a process's last close.
fn process_exit(g: &mut DevState, arch: Arch, pid: u32) {
    let owned: Vec<(u32, u32)> = g
        .queue_owner
        .iter()
        .filter(|(_, p)| **p == pid)
        .map(|(k, _)| *k)
        .collect();
    for (eng, q) in owned {
        g.queue_owner.remove(&(eng, q));
        // Queues reserved for collectives / NX cores are never reset (`driver-abi.md` §3.1).
        if drvstate::reserved_queue(arch, eng, q) {
            continue;
        }
        // Re-point the queue at nothing: further doorbells are refused.
        let _ = g.dev.dma_queue_init(eng as usize, q as usize, 0, 0, 0, 0);
    }
    drvstate::crwl_release_process(g, pid);
    drvstate::datastore_release(g, pid);
    g.drv.pins.retain(|(p, _), _| *p != pid);
    for h in g.chunks.owned_by(pid, Lifespan::CurProcess) {
        if let Some(c) = g.chunks.release_all_refs(h) {
            release_chunk_memory(g, &c);
        }
    }
}

pub mod control;
