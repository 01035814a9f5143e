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

mod chunks;
mod dispatch;
pub mod uaccess;

use chunks::{ChunkTable, Lifespan};
use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_devmodel::regs::RegPage;
use neuron_devmodel::{ArchProfile, Device};
use std::collections::HashMap;
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
struct Mapping {
    len: usize,
    /// Chunk PA for chunk mappings; None for register pages.
    chunk_pa: Option<u64>,
    _regs: Option<Arc<RegPage>>,
}

#[derive(Debug, Default)]
struct Proc {
    open_count: u32,
}

/// Mutable state of one device: the model plus the driver's bookkeeping.
#[derive(Debug)]
pub(crate) struct DevState {
    pub(crate) dev: Device,
    pub(crate) chunks: ChunkTable,
    procs: HashMap<u32, Proc>,
    /// (DMA engine, queue) -> owning pid.
    pub(crate) queue_owner: HashMap<(u32, u32), u32>,
    /// (nc, nq_type, engine_index) -> chunk handle of a notification queue.
    pub(crate) nqs: HashMap<(u32, u32, u32), u64>,
    maps: HashMap<usize, Mapping>,
    /// Per-NC reservation owner (CRWL range marks).
    pub(crate) nc_owner: Vec<Option<u32>>,
    node_open_count: u32,
}

#[derive(Debug)]
struct DevShared {
    index: usize,
    arch: Arch,
    state: Mutex<DevState>,
    kick: Condvar,
    stop: AtomicBool,
}

impl DevShared {
    fn lock(&self) -> MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn worker(sh: Arc<DevShared>) {
    const MIN: Duration = Duration::from_micros(50);
    const MAX: Duration = Duration::from_millis(5);
    let mut backoff = MIN;
    let mut g = sh.lock();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        // Host stores through mapped register pages take effect at quiescent points only,
        // which keeps device time deterministic for a given sequence of host actions.
        if !g.dev.busy() {
            g.dev.drain_mailboxes();
        }
        if g.dev.busy() {
            g.dev.run(64);
            backoff = MIN;
            drop(g);
            std::thread::yield_now();
            g = sh.lock();
            continue;
        }
        let (ng, _) = sh
            .kick
            .wait_timeout(g, backoff)
            .unwrap_or_else(|e| e.into_inner());
        g = ng;
        backoff = (backoff * 2).min(MAX);
    }
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
            let nc = profile.nc_count;
            let st = DevState {
                dev: Device::new(profile),
                chunks: ChunkTable::new(&hbm, arch.host_base_bit()),
                procs: HashMap::new(),
                queue_owner: HashMap::new(),
                nqs: HashMap::new(),
                maps: HashMap::new(),
                nc_owner: vec![None; nc],
                node_open_count: 0,
            };
            let sh = Arc::new(DevShared {
                index,
                arch,
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
                let attached = g.procs.len();
                match g.procs.get_mut(&opts.pid) {
                    Some(p) => p.open_count += 1,
                    None if attached >= MAX_PROCESSES_PER_DEVICE => return Err(Errno::EBUSY),
                    None => {
                        g.procs.insert(opts.pid, Proc { open_count: 1 });
                    }
                }
            }
            g.node_open_count += 1;
        }
        Ok(EmuFile {
            sh,
            pid: opts.pid,
            misc: opts.write_only,
        })
    }

    /// Run `f` on device `index`'s model (for tools and tests: traces, statistics, faults).
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
}

impl EmuFile {
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
        let r = dispatch::ioctl(self, cmd, arg as u64);
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
            if len as u64 != c.size {
                return Err(Errno::EINVAL);
            }
            if !c.host {
                // Device-memory mappings (BAR4) need a contiguous host backing; the sparse HBM
                // model has none yet (see docs/abi-coverage.md).
                return Err(Errno::ENODEV);
            }
            let p = g
                .dev
                .host_region_ptr(c.pa & !host_bit)
                .ok_or(Errno::EFAULT)?;
            g.chunks.map_ref(c.pa, 1);
            g.maps.insert(
                p as usize,
                Mapping {
                    len,
                    chunk_pa: Some(c.pa),
                    _regs: None,
                },
            );
            return Ok(p);
        }
        if let Some(w) = self.sh.arch.find_resource(offset, len as u64) {
            use neuron_abi::consts::{MMAP_BLOCK_TPB, MMAP_RESOURCE_SEMAPHORE};
            if w.block == MMAP_BLOCK_TPB && w.resource == MMAP_RESOURCE_SEMAPHORE {
                let regs = g.dev.regs(w.block_id as usize).ok_or(Errno::EINVAL)?;
                let p = regs.as_ptr();
                tracing::debug!(target: "KDRV", "mmap TPB {} semaphore page (offset 0x{offset:x})", w.block_id);
                g.maps.insert(
                    p as usize,
                    Mapping {
                        len,
                        chunk_pa: None,
                        _regs: Some(regs),
                    },
                );
                return Ok(p);
            }
            return Err(Errno::ENODEV);
        }
        Err(Errno::EINVAL)
    }

    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        let mut g = self.sh.lock();
        let m = g.maps.get(&(addr as usize)).ok_or(Errno::EINVAL)?;
        if m.len != len {
            return Err(Errno::EINVAL);
        }
        let m = g.maps.remove(&(addr as usize)).ok_or(Errno::EINVAL)?;
        if let Some(pa) = m.chunk_pa {
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
    /// flush + release (`driver-abi.md` §1): the last close by a process frees its
    /// process-lifespan chunks, stops the DMA queues it owns and drops its core reservations.
    fn drop(&mut self) {
        let mut g = self.sh.lock();
        let pid = self.pid;
        let last_of_process = if self.misc {
            false
        } else {
            match g.procs.get_mut(&pid) {
                Some(p) if p.open_count > 1 => {
                    p.open_count -= 1;
                    false
                }
                Some(_) => {
                    g.procs.remove(&pid);
                    true
                }
                None => false,
            }
        };
        if self.misc || last_of_process {
            for o in g.nc_owner.iter_mut() {
                if *o == Some(pid) {
                    *o = None;
                }
            }
        }
        if last_of_process {
            let owned: Vec<(u32, u32)> = g
                .queue_owner
                .iter()
                .filter(|(_, p)| **p == pid)
                .map(|(k, _)| *k)
                .collect();
            for (eng, q) in owned {
                // Re-point the queue at nothing: further doorbells are refused.
                let _ = g.dev.dma_queue_init(eng as usize, q as usize, 0, 0, 0, 0);
                g.queue_owner.remove(&(eng, q));
            }
            for h in g.chunks.owned_by(pid, Lifespan::CurProcess) {
                if let Some(c) = g.chunks.release_all_refs(h) {
                    release_chunk_memory(&mut g, &c);
                }
            }
        }
        g.node_open_count = g.node_open_count.saturating_sub(1);
    }
}
