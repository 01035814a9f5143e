//! The driver-side control plane: typed, read-only snapshots of what the emulated driver holds
//! (attached processes, core locks and reservations, memory per process and type, DMA queue
//! owners, notification queues, device counters) that tools and a future daemon answer from,
//! plus the few typed tool controls (timeline tracing, host profiling, cost table) that used to
//! go through a closure over the device model.

use crate::{DevShared, Emulator};
use neuron_abi::arch::Arch;
use neuron_abi::consts::MemType;
use neuron_devmodel::arch::CostTable;
use neuron_devmodel::{Fault, HostProfile, Stats, TraceEvent};
use std::collections::BTreeMap;

/// One attached process (`attached_processes[16]`, `driver-abi.md` §1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Normal fds the process holds on the device.
    pub open_count: u32,
}

/// A core's model reader/writer lock (CRWL), when anyone holds or last held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreLock {
    pub nc: u32,
    pub writer_pid: u32,
    pub writer_acquired: bool,
    pub readers: u64,
    /// The loaded model's uuid.
    pub uuid: [u8; 32],
}

/// A NeuronCore of this device reserved by CRWL_NC_RANGE_MARK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreReservation {
    /// Core index on this device.
    pub nc: u32,
    pub pid: u32,
}

/// Memory held by one process (0: the driver) in one category.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemUsage {
    pub pid: u32,
    pub mem_type: u32,
    /// The category's name (`mem_alloc_category_t`), if known.
    pub mem_type_name: Option<&'static str>,
    pub host: bool,
    pub chunks: u32,
    /// Bytes, page-rounded as allocated.
    pub bytes: u64,
}

/// The process owning a DMA queue (the last DMA_QUEUE_INIT on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOwner {
    pub engine: u32,
    pub queue: u32,
    pub pid: u32,
}

/// A notification queue set up by NOTIFICATIONS_INIT_*.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationQueue {
    pub nc: u32,
    pub nq_type: u32,
    pub engine: u32,
    /// Device address of the ring (host queues carry the host bit).
    pub pa: u64,
    pub size: u64,
    pub host: bool,
    /// The process that created it (queues are driver-owned and outlive it).
    pub pid: u32,
}

/// The device model's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Device time in picoseconds.
    pub now_ps: u64,
    pub stats: Stats,
    /// Faults recorded since the device was created.
    pub faults: usize,
    /// HBM bytes the sparse model holds in host memory.
    pub hbm_resident_bytes: u64,
}

/// A snapshot of one emulated device as its driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReport {
    /// `/dev/neuron<index>`.
    pub index: usize,
    pub arch: Arch,
    pub nc_count: u32,
    /// Attached processes, in slot order.
    pub processes: Vec<ProcessInfo>,
    pub core_locks: Vec<CoreLock>,
    pub core_reservations: Vec<CoreReservation>,
    /// Sorted by (pid, mem type, side).
    pub memory: Vec<MemUsage>,
    /// Sorted by (engine, queue).
    pub dma_queues: Vec<QueueOwner>,
    /// Sorted by (nc, type, engine).
    pub notification_queues: Vec<NotificationQueue>,
    pub counters: DeviceCounters,
}

fn report(sh: &DevShared) -> DeviceReport {
    let nc_count = sh.arch.nc_count();
    // The global reservation table first (never both locks at once in the other order).
    let first = nc_count as usize * sh.index;
    let core_reservations: Vec<CoreReservation> = sh
        .global
        .lock_range()
        .iter()
        .enumerate()
        .skip(first)
        .take(nc_count as usize)
        .filter(|(_, pid)| **pid != 0)
        .map(|(slot, pid)| CoreReservation {
            nc: (slot - first) as u32,
            pid: *pid,
        })
        .collect();
    let g = sh.lock();
    let processes = g
        .procs
        .iter()
        .flatten()
        .map(|p| ProcessInfo {
            pid: p.pid,
            open_count: p.open_count,
        })
        .collect();
    let core_locks = g
        .drv
        .crwl
        .iter()
        .enumerate()
        .filter(|(_, c)| c.writer_pid != 0 || c.writer_acquired || c.reader_count > 0)
        .map(|(nc, c)| CoreLock {
            nc: nc as u32,
            writer_pid: c.writer_pid,
            writer_acquired: c.writer_acquired,
            readers: c.reader_count,
            uuid: c.uuid,
        })
        .collect();
    let mut mem: BTreeMap<(u32, u32, bool), (u32, u64)> = BTreeMap::new();
    for c in g.chunks.iter() {
        let e = mem.entry((c.pid, c.mem_type, c.host)).or_default();
        e.0 += 1;
        e.1 += c.size;
    }
    let memory = mem
        .into_iter()
        .map(|((pid, mem_type, host), (chunks, bytes))| MemUsage {
            pid,
            mem_type,
            mem_type_name: MemType(mem_type).name(),
            host,
            chunks,
            bytes,
        })
        .collect();
    let mut dma_queues: Vec<QueueOwner> = g
        .queue_owner
        .iter()
        .map(|(&(engine, queue), &pid)| QueueOwner { engine, queue, pid })
        .collect();
    dma_queues.sort_by_key(|q| (q.engine, q.queue));
    let mut notification_queues: Vec<NotificationQueue> = g
        .nqs
        .iter()
        .filter_map(|(&(nc, nq_type, engine), h)| {
            let c = g.chunks.get(*h)?;
            Some(NotificationQueue {
                nc,
                nq_type,
                engine,
                pa: c.pa,
                size: c.size,
                host: c.host,
                pid: c.pid,
            })
        })
        .collect();
    notification_queues.sort_by_key(|q| (q.nc, q.nq_type, q.engine));
    let counters = DeviceCounters {
        now_ps: g.dev.now().0,
        stats: g.dev.stats(),
        faults: g.dev.faults().len(),
        hbm_resident_bytes: g.dev.hbm_resident_bytes(),
    };
    DeviceReport {
        index: sh.index,
        arch: sh.arch,
        nc_count,
        processes,
        core_locks,
        core_reservations,
        memory,
        dma_queues,
        notification_queues,
        counters,
    }
}

impl Emulator {
    /// A snapshot of every device.
    pub fn devices(&self) -> Vec<DeviceReport> {
        self.devices.iter().map(|d| report(d)).collect()
    }

    /// A snapshot of device `index`.
    pub fn device(&self, index: usize) -> Option<DeviceReport> {
        self.devices.get(index).map(|d| report(d))
    }

    /// Whether device `index` has nothing left to do by itself: no event pending and no
    /// store made through a register mapping waiting to be applied. Only user space can
    /// then move it on, so an execution that has not completed on it (its program blocked on
    /// a semaphore nothing will raise, an engine hung) never will: a hang, known without
    /// waiting out a timeout (`neuron-emu campaign`).
    pub fn quiescent(&self, index: usize) -> Option<bool> {
        let g = self.devices.get(index)?.lock();
        Some(!g.dev.busy() && !g.drain_pending && !g.mail_waiting())
    }

    /// Device `index`'s model counters.
    pub fn stats(&self, index: usize) -> Option<Stats> {
        Some(self.devices.get(index)?.lock().dev.stats())
    }

    /// The kernel log (`dmesg`): every line the driver printed, oldest first.
    pub fn kernel_log(&self) -> Vec<crate::kmsg::KmsgLine> {
        self.devices
            .first()
            .map(|d| d.global.lock_kmsg().lines())
            .unwrap_or_default()
    }

    /// A snapshot of device `index`'s model (`Device::status`: engines, waits, semaphores,
    /// queues, memory, stats, faults).
    pub fn status(&self, index: usize) -> Option<neuron_devmodel::DeviceStatus> {
        Some(self.devices.get(index)?.lock().dev.status())
    }

    /// The driver's sysfs tree now (`sysfs::Tree::render`; `docs/sysfs.md`).
    pub fn sysfs(&self) -> crate::sysfs::Tree {
        crate::sysfs::Tree::render(self)
    }

    /// A write to sysfs attribute `path` (`sysfs::write`: `neuron<N>/reset`, `notify_delay`).
    pub fn write_sysfs(&self, path: &str, data: &[u8]) -> Result<usize, neuron_abi::Errno> {
        crate::sysfs::write(self, path, data)
    }

    /// Device `index`'s memory-error counters, as sysfs `stats/hardware/*` reports them.
    pub fn ecc(&self, index: usize) -> Option<neuron_devmodel::ecc::EccCounters> {
        Some(self.devices.get(index)?.lock().dev.ecc())
    }

    /// Install (or remove) device `index`'s hooks (`devmodel::hooks`: fault plans, tracers).
    /// False if there is no such device.
    pub fn set_hooks(
        &self,
        index: usize,
        hooks: Option<Box<dyn neuron_devmodel::DeviceHooks>>,
    ) -> bool {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.set_hooks(hooks))
            .is_some()
    }

    /// The faults device `index` recorded.
    pub fn faults(&self, index: usize) -> Option<Vec<Fault>> {
        Some(self.devices.get(index)?.lock().dev.faults().to_vec())
    }

    /// Start (or stop) recording device `index`'s timeline. False if there is no such device.
    pub fn set_tracing(&self, index: usize, on: bool) -> bool {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.set_tracing(on))
            .is_some()
    }

    /// Take the timeline device `index` recorded (empty when not tracing).
    pub fn take_trace(&self, index: usize) -> Vec<TraceEvent> {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.take_trace())
            .unwrap_or_default()
    }

    /// Start (or stop) measuring host time per instruction kind on device `index`.
    pub fn set_host_profiling(&self, index: usize, on: bool) -> bool {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.set_host_profiling(on))
            .is_some()
    }

    /// While host profiling is on for device `index`: keep every word with its time and
    /// operands too (`HostProfile::words`). False if there is no such device or profiling
    /// is off.
    pub fn keep_host_words(&self, index: usize, on: bool) -> bool {
        self.devices
            .get(index)
            .is_some_and(|d| d.lock().dev.keep_host_words(on))
    }

    /// What host profiling measured on device `index`, if it is on.
    pub fn host_profile(&self, index: usize) -> Option<HostProfile> {
        self.devices.get(index)?.lock().dev.host_profile().cloned()
    }

    /// Where device `index`'s data paths run (`ThreadMode`; outputs, device times and traces
    /// are the same in every mode). False if there is no such device.
    pub fn set_threads(&self, index: usize, mode: neuron_devmodel::device::ThreadMode) -> bool {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.set_threads(mode))
            .is_some()
    }

    /// Replace device `index`'s cost table (calibration: costs change timing, never data).
    pub fn set_cost(&self, index: usize, cost: CostTable) -> bool {
        self.devices
            .get(index)
            .map(|d| d.lock().dev.set_cost(cost))
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::testutil::{Bench, PID};
    use crate::driver::Caller;
    use crate::{Emulator, OpenOptions};
    use neuron_abi::arch::Arch;
    use neuron_abi::consts::{MemType, NQ_TYPE_NOTIFY};
    use neuron_abi::ioctl::*;
    use neuron_abi::structs::*;

    #[test]
    fn memory_shows_per_process_and_goes_with_the_last_close() {
        let emu = Emulator::new(Arch::V3Trn2, 1);
        let mem = crate::uaccess::FakeMemory::default();
        let f = emu
            .open(
                0,
                OpenOptions {
                    pid: 77,
                    write_only: false,
                },
            )
            .expect("open");
        let out = mem.zeroed(8);
        let a = mem.put(&MemAllocV2MemType {
            size: 5000,
            mem_type: MemType::TENSORS_DEVICE.0,
            mem_handle: out,
            ..Default::default()
        });
        let caller = Caller { pid: 77, mem: &mem };
        let r = crate::driver::ioctl(
            &emu.devices[0],
            false,
            &caller,
            NEURON_IOCTL_MEM_ALLOC_V2MT,
            a,
        );
        assert_eq!(r, Ok(0));
        let d = emu.device(0).expect("device");
        assert_eq!(d.processes.len(), 1);
        assert_eq!((d.processes[0].pid, d.processes[0].open_count), (77, 1));
        let m: Vec<_> = d.memory.iter().filter(|m| m.pid == 77).collect();
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].mem_type_name, m[0].bytes, m[0].chunks, m[0].host),
            (Some("TENSORS_DEVICE"), 8192, 1, false)
        );
        drop(f);
        let d = emu.device(0).expect("device");
        assert!(d.processes.is_empty());
        assert!(d.memory.iter().all(|m| m.pid != 77), "{:?}", d.memory);
        assert_eq!(emu.devices().len(), 1);
        assert!(emu.device(1).is_none());
    }

    #[test]
    fn locks_reservations_queues_and_counters() {
        let b = Bench::v3();
        let l = Crwl {
            nc_id: 1,
            uuid: Uuid32 { value: [5; 32] },
        };
        assert_eq!(b.run(NEURON_IOCTL_CRWL_WRITER_ENTER, &l), Ok(0));
        let m = CrwlNcMap {
            nc_count: 2,
            start_nc_index: 2,
            end_nc_index: 7,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_CRWL_NC_RANGE_MARK, &m), Ok(0));
        let ring = b.alloc(4096, true);
        let q = DmaQueueInit {
            eng_id: 3,
            qid: 4,
            tx_desc_count: 64,
            rx_desc_count: 64,
            tx_handle: ring,
            rx_handle: ring,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_DMA_QUEUE_INIT, &q), Ok(0));
        let n = NotificationsInitV2 {
            nq_type: NQ_TYPE_NOTIFY,
            engine_index: 2,
            size: 4096,
            on_host_memory: 1,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &n), Ok(0));
        let d = b.emu.device(0).expect("device");
        assert_eq!(d.core_locks.len(), 1);
        assert_eq!(
            (
                d.core_locks[0].nc,
                d.core_locks[0].writer_pid,
                d.core_locks[0].writer_acquired
            ),
            (1, PID, true)
        );
        let res: Vec<(u32, u32)> = d.core_reservations.iter().map(|r| (r.nc, r.pid)).collect();
        assert_eq!(res, [(2, PID), (3, PID)]);
        assert_eq!(d.dma_queues.len(), 1);
        assert_eq!(
            (
                d.dma_queues[0].engine,
                d.dma_queues[0].queue,
                d.dma_queues[0].pid
            ),
            (3, 4, PID)
        );
        assert_eq!(d.notification_queues.len(), 1);
        let nq = &d.notification_queues[0];
        assert_eq!(
            (nq.nc, nq.nq_type, nq.engine, nq.size, nq.host),
            (0, NQ_TYPE_NOTIFY, 2, 4096, true)
        );
        assert_eq!(d.counters.faults, 0);
        assert_eq!(b.emu.stats(0), Some(d.counters.stats));
        assert!(b.emu.set_tracing(0, true));
        assert!(b.emu.take_trace(0).is_empty());
        assert!(!b.emu.set_tracing(5, true));
    }
}
