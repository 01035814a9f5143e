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

mod arena;
mod chunks;
mod driver;
mod drvstate;
pub mod envconfig;
#[doc(hidden)]
pub mod fuzzing;
pub mod uaccess;

pub use driver::{pci_bdf, Caller, BAR0_KVA, REVISION};

use arena::Arena;
use chunks::{ChunkTable, Lifespan};
use drvstate::DrvState;
use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_devmodel::regs::RegPage;
use neuron_devmodel::{ArchProfile, Device};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

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
            pid: std::process::id(),
            write_only: false,
        }
    }
}

#[derive(Debug)]
enum MapKind {
    /// The chunk's own memory (shared with the device), `refs` mappings at this address.
    Chunk { pa: u64 },
    /// A read-only alias of another process's chunk (one per mmap call).
    Alias { pa: u64 },
    /// A register page.
    Regs(#[allow(dead_code)] Arc<RegPage>),
    /// A core's SBUF window (the core's live SBUF storage; lives as long as the device).
    Sbuf,
}

#[derive(Debug)]
struct Mapping {
    len: usize,
    refs: u32,
    kind: MapKind,
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
    maps: HashMap<usize, Mapping>,
    node_open_count: u32,
    /// Shared-memory arena for mappable memory (None: heap fallback, no read-only aliases).
    pub(crate) arena: Option<Arena>,
    /// The rest of the driver's per-device state (CRWL, core init, datastore, ...).
    pub(crate) drv: DrvState,
    /// An ioctl found stores in the register mailboxes while the device was running: apply
    /// them at its next quiescent point.
    pub(crate) drain_pending: bool,
}

impl DevState {
    pub(crate) fn attached(&self, pid: u32) -> bool {
        self.procs.iter().flatten().any(|p| p.pid == pid)
    }

    /// Register host memory for a new host chunk at device address `pa`.
    pub(crate) fn add_host_memory(&mut self, pa: u64, size: u64) -> bool {
        let bus = pa & !self.dev.profile().arch.host_base_bit();
        if let Some(r) = self.arena.as_ref().and_then(|a| a.host_region(bus, size)) {
            self.dev.add_host_region_external(bus, r);
            return true;
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
}

impl Global {
    pub(crate) fn lock_range(&self) -> MutexGuard<'_, Vec<u32>> {
        self.crwl_range.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn lock_va(&self) -> MutexGuard<'_, BTreeMap<usize, (u32, usize, usize, u32)>> {
        self.va_maps.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct DevShared {
    index: usize,
    arch: Arch,
    global: Arc<Global>,
    state: Mutex<DevState>,
    kick: Condvar,
    stop: AtomicBool,
}

impl DevShared {
    fn lock(&self) -> MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Stores to mapped register pages cannot trap, so the device applies them at points fixed by
/// what user space does, never by host thread timing: on entry to the next ioctl of any kind
/// (at once if the device is quiescent, else at its next quiescent point). A program that
/// stores and then makes no ioctl still sees its stores applied after they have stood
/// unchanged for `MAIL_FALLBACK`.
const MAIL_FALLBACK: Duration = Duration::from_millis(100);

fn worker(sh: Arc<DevShared>) {
    const MIN: Duration = Duration::from_micros(50);
    const MAX: Duration = Duration::from_millis(5);
    let mut backoff = MIN;
    // When the worker first saw mail that no ioctl has claimed yet.
    let mut mail_since: Option<std::time::Instant> = None;
    let mut g = sh.lock();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        if !g.dev.busy() {
            if g.drain_pending {
                g.drain_pending = false;
                g.dev.drain_mailboxes();
                mail_since = None;
            } else if g.dev.has_mail() {
                let since = *mail_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= MAIL_FALLBACK {
                    g.dev.drain_mailboxes();
                    mail_since = None;
                }
            } else {
                mail_since = None;
            }
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
            drop(g);
            std::thread::yield_now();
            g = sh.lock();
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

/// On entry to an ioctl: apply the mailbox stores user space made before it (see
/// `MAIL_FALLBACK`).
fn claim_mail(sh: &DevShared) {
    let mut g = sh.lock();
    if !g.dev.has_mail() {
        return;
    }
    if g.dev.busy() {
        g.drain_pending = true;
    } else {
        g.dev.drain_mailboxes();
    }
    drop(g);
    sh.kick.notify_all();
}

/// A set of emulated Neuron devices.
#[derive(Debug)]
pub struct Emulator {
    devices: Vec<Arc<DevShared>>,
    workers: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Create `count` devices of architecture `arch`, each with its worker thread.
    pub fn new(arch: Arch, count: usize) -> Emulator {
        let mut devices = Vec::new();
        let mut workers = Vec::new();
        let count = count.min(neuron_abi::consts::MAX_NEURON_DEVICE_COUNT as usize);
        let global = Arc::new(Global {
            count,
            crwl_range: Mutex::new(vec![0; drvstate::CRWL_GLOBAL_SLOTS]),
            va_maps: Mutex::new(BTreeMap::new()),
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
            let st = DevState {
                dev: Device::new(profile),
                chunks: ChunkTable::new(&hbm, arch.host_base_bit()),
                procs: vec![None; MAX_PROCESSES_PER_DEVICE],
                queue_owner: HashMap::new(),
                nqs: HashMap::new(),
                maps: HashMap::new(),
                node_open_count: 0,
                arena: Arena::new(index),
                drv: DrvState::new(arch),
                drain_pending: false,
            };
            let sh = Arc::new(DevShared {
                index,
                arch,
                global: global.clone(),
                state: Mutex::new(st),
                kick: Condvar::new(),
                stop: AtomicBool::new(false),
            });
            let w = sh.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("neuron{index}-device"))
                .spawn(move || worker(w));
            if let Ok(h) = spawned {
                workers.push(h);
            }
            devices.push(sh);
        }
        Emulator { devices, workers }
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    pub fn arch(&self) -> Option<Arch> {
        self.devices.first().map(|d| d.arch)
    }

    /// `open("/dev/neuron<index>")`.
    pub fn open(&self, index: usize, opts: OpenOptions) -> Result<EmuFile, Errno> {
        let sh = self.devices.get(index).ok_or(Errno::ENODEV)?.clone();
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
        })
    }

    /// Run `f` on device `index`'s model. A test hook: tools use the typed queries of
    /// [`control`].
    #[doc(hidden)]
    pub fn with_device<R>(&self, index: usize, f: impl FnOnce(&mut Device) -> R) -> Option<R> {
        let sh = self.devices.get(index)?;
        let mut g = sh.lock();
        Some(f(&mut g.dev))
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        for d in &self.devices {
            d.stop.store(true, Ordering::Release);
            d.kick.notify_all();
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
        }
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
    // The argument is only ever touched through `uaccess` (process_vm_readv/writev), which
    // turns bad pointers into EFAULT, so this implementation is sound for any `arg`.
    #[allow(unsafe_code)]
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        // A bug in a handler answers EIO instead of unwinding into the caller.
        if !self.misc {
            claim_mail(&self.sh);
        }
        let caller = Caller {
            pid: self.pid,
            mem: &uaccess::OwnProcess,
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            driver::ioctl(&self.sh, self.misc, &caller, cmd, arg as u64)
        }))
        .unwrap_or(Err(Errno::EIO));
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

    fn mmap(&self, len: usize, offset: u64) -> Result<*mut u8, Errno> {
        if self.misc {
            return Err(Errno::EINVAL);
        }
        let mut g = self.sh.lock();
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
                        let region = match g.arena.as_ref() {
                            Some(a) => a.device_region(c.size),
                            None => neuron_devmodel::hostmem::HostRegion::new(c.size as usize),
                        }
                        .ok_or(Errno::ENOMEM)?;
                        g.dev.back_hbm(c.pa, region).map_err(|_| Errno::ENODEV)?
                    }
                }
            };
            // Another process's chunk (not device-lifespan) is mapped read-only.
            let read_only = c.pid != self.pid && c.lifespan != Lifespan::Device;
            let (p, kind) = if read_only {
                let a = g.arena.as_ref().ok_or(Errno::ENODEV)?;
                let p = a.readonly_alias(rw, len).ok_or(Errno::ENOMEM)?;
                (p, MapKind::Alias { pa: c.pa })
            } else {
                (rw, MapKind::Chunk { pa: c.pa })
            };
            g.chunks.map_ref(c.pa, 1);
            match g.maps.get_mut(&(p as usize)) {
                Some(m) => m.refs += 1,
                None => {
                    g.maps.insert(p as usize, Mapping { len, refs: 1, kind });
                }
            }
            if !c.host {
                self.sh
                    .global
                    .lock_va()
                    .insert(p as usize, (self.pid, len, self.sh.index, c.hbm));
            }
            tracing::debug!(target: "KDRV", "mmap chunk pa 0x{:x} len 0x{len:x} pid {}{}", c.pa, self.pid, if read_only { " (read-only)" } else { "" });
            return Ok(p);
        }
        if let Some(w) = self.sh.arch.find_resource(offset, len as u64) {
            use neuron_abi::consts::{MMAP_BLOCK_TPB, MMAP_RESOURCE_SEMAPHORE};
            if w.block == MMAP_BLOCK_TPB && w.resource == MMAP_RESOURCE_SEMAPHORE {
                let regs = g.dev.regs(w.block_id as usize).ok_or(Errno::EINVAL)?;
                let p = regs.as_ptr();
                tracing::debug!(target: "KDRV", "mmap TPB {} semaphore page (offset 0x{offset:x})", w.block_id);
                match g.maps.get_mut(&(p as usize)) {
                    Some(m) => m.refs += 1,
                    None => {
                        g.maps.insert(
                            p as usize,
                            Mapping {
                                len,
                                refs: 1,
                                kind: MapKind::Regs(regs),
                            },
                        );
                    }
                }
                return Ok(p);
            }
            if w.block == MMAP_BLOCK_TPB && w.resource == neuron_abi::consts::MMAP_RESOURCE_SBUF {
                let p = g
                    .dev
                    .sbuf_window_ptr(w.block_id as usize)
                    .ok_or(Errno::EINVAL)?;
                tracing::debug!(target: "KDRV", "mmap TPB {} SBUF window (offset 0x{offset:x})", w.block_id);
                match g.maps.get_mut(&(p as usize)) {
                    Some(m) => m.refs += 1,
                    None => {
                        g.maps.insert(
                            p as usize,
                            Mapping {
                                len,
                                refs: 1,
                                kind: MapKind::Sbuf,
                            },
                        );
                    }
                }
                return Ok(p);
            }
            // TOP_SP pages and whole-HBM DMEM rows are not backed by a consistent host memory
            // in the model (docs/abi-coverage.md, mmap).
            return Err(Errno::ENODEV);
        }
        Err(Errno::EINVAL)
    }

    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        let mut g = self.sh.lock();
        let m = g.maps.get_mut(&(addr as usize)).ok_or(Errno::EINVAL)?;
        if m.len != len {
            return Err(Errno::EINVAL);
        }
        m.refs -= 1;
        let pa = match m.kind {
            MapKind::Chunk { pa } | MapKind::Alias { pa } => Some(pa),
            MapKind::Regs(_) | MapKind::Sbuf => None,
        };
        let alias = matches!(m.kind, MapKind::Alias { .. });
        if m.refs == 0 {
            g.maps.remove(&(addr as usize));
            self.sh.global.lock_va().remove(&(addr as usize));
        }
        if alias {
            if let Some(a) = g.arena.as_ref() {
                a.unmap_alias(addr, len);
            }
        }
        if let Some(pa) = pa {
            if let Some(c) = g.chunks.map_ref(pa, -1) {
                release_chunk_memory(&mut g, &c);
            }
        }
        Ok(())
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
