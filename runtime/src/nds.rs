//! The runtime's datastore page (`ACQUIRE_NEURON_DS`): the counters the driver's sysfs tree
//! and the monitoring tools read, at the driver-defined offsets (`neuron_abi::nds`), and this
//! project's process, model and latency records in the runtime's own area
//! (`neuron_abi::nds_runtime`, seqlock-guarded). Also the tools' side: a consistent copy of
//! another process's page ([`read_page`]).
//!
//! NRT status → error class (`ERR_*` counter, neuron-monitor `error_summary`), see
//! [`error_class`]: numerical = 1003; model = INVALID, EXEC_BAD_INPUT, EXEC_OOB,
//! UNSUPPORTED_NEFF_VERSION; transient = TIMEOUT, QUEUE_FULL, EXEC_NC_BUSY, COLL_PENDING;
//! hardware = HW_ERROR, 1004, 1200-1203, 1205; runtime = INVALID_HANDLE, RESOURCE,
//! LOAD_NOT_ENOUGH_NC, FAIL_HOST_MEM_ALLOC, UNINITIALIZED, CLOSED, QUEUE_EMPTY,
//! EXEC_UNIT_UNRECOVERABLE, 1204, 1206; generic = FAILURE and anything else.
#![allow(unsafe_code)]

use crate::status::NrtStatus;
use neuron_abi::consts::MemType;
use neuron_abi::ioctl::{NEURON_IOCTL_ACQUIRE_NEURON_DS, NEURON_IOCTL_RELEASE_NEURON_DS};
use neuron_abi::nds::{self, NcCounter, NdCounter};
use neuron_abi::nds_runtime::{self as rta, RuntimeArea, MEM_CATEGORIES};
use neuron_abi::structs::NeuronDsInfo;
use neuron_abi::{DeviceFile, Errno};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zerocopy::{FromZeros, IntoBytes};

/// This runtime's version as the datastore and the tools report it (libnrt's
/// `nrt_get_version` says 2.0.0).
pub const VERSION_MAJOR: u8 = 2;
pub const VERSION_MINOR: u8 = 0;
pub const VERSION_BUILD: u32 = 0;

/// `"2.0.0"`.
pub fn version_string() -> String {
    format!("{VERSION_MAJOR}.{VERSION_MINOR}.{VERSION_BUILD}")
}

/// `union nmetric_version { build_num:32, minor:8, major:8, reserved:16 }` as a `u64`.
pub const fn version_counter(major: u8, minor: u8, build: u32) -> u64 {
    build as u64 | (minor as u64) << 32 | (major as u64) << 40
}

/// `(major, minor, build)` of an `nmetric_version` counter.
pub const fn decode_version(v: u64) -> (u8, u8, u32) {
    ((v >> 40) as u8, (v >> 32) as u8, v as u32)
}

/// The `MEM_USAGE_*` category of an allocation's mem type.
pub fn mem_category(mt: MemType) -> usize {
    match mt {
        MemType::CODE_HOST | MemType::CODE_DEVICE => rta::MEM_CODE,
        MemType::TENSORS_HOST | MemType::TENSORS_DEVICE => rta::MEM_TENSORS,
        MemType::CONSTANTS_HOST | MemType::CONSTANTS_DEVICE => rta::MEM_CONSTANTS,
        MemType::SCRATCHPAD_DEVICE
        | MemType::SCRATCHPAD_NONSHARED_DEVICE
        | MemType::CONTIGUOUS_SCRATCHPAD_DEVICE => rta::MEM_SCRATCHPAD,
        _ => rta::MEM_MISC,
    }
}

const ND_HOST_COUNTERS: [NdCounter; MEM_CATEGORIES] = [
    NdCounter::MEM_USAGE_CODE_HOST,
    NdCounter::MEM_USAGE_TENSORS_HOST,
    NdCounter::MEM_USAGE_CONSTANTS_HOST,
    NdCounter::MEM_USAGE_SCRATCHPAD_HOST,
    NdCounter::MEM_USAGE_MISC_HOST,
];
/// The per-NC `MEM_USAGE_*_DEVICE` counters, by category.
pub const NC_DEVICE_COUNTERS: [NcCounter; MEM_CATEGORIES] = [
    NcCounter::MEM_USAGE_CODE_DEVICE,
    NcCounter::MEM_USAGE_TENSORS_DEVICE,
    NcCounter::MEM_USAGE_CONSTANTS_DEVICE,
    NcCounter::MEM_USAGE_SCRATCHPAD_DEVICE,
    NcCounter::MEM_USAGE_MISC_DEVICE,
];
/// The device-level `MEM_USAGE_*_HOST` counters, by category.
pub const ND_HOST_MEM_COUNTERS: [NdCounter; MEM_CATEGORIES] = ND_HOST_COUNTERS;

/// Bytes per memory category, host and device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub host: [u64; MEM_CATEGORIES],
    pub device: [u64; MEM_CATEGORIES],
}

impl Usage {
    pub fn add(&mut self, host: bool, mt: MemType, bytes: u64) {
        let side = if host {
            &mut self.host
        } else {
            &mut self.device
        };
        let c = &mut side[mem_category(mt)];
        *c = c.saturating_add(bytes);
    }
}

/// The error class counter of a failed call's status (module doc).
pub fn error_class(s: NrtStatus) -> NcCounter {
    use NrtStatus::*;
    match s {
        ExecCompletedWithNumErr => NcCounter::ERR_NUMERICAL,
        Invalid | ExecBadInput | ExecOob | UnsupportedNeffVersion => NcCounter::ERR_MODEL,
        Timeout | QueueFull | ExecNcBusy | CollPending => NcCounter::ERR_TRANSIENT,
        HwError
        | ExecCompletedWithErr
        | ExecHwErrCollectives
        | ExecHwErrHbmUe
        | ExecHwErrNcUe
        | ExecHwErrDmaAbort
        | ExecHwErrRepairableHbmUe => NcCounter::ERR_HW,
        InvalidHandle
        | Resource
        | LoadNotEnoughNc
        | FailHostMemAlloc
        | Uninitialized
        | Closed
        | QueueEmpty
        | ExecUnitUnrecoverable
        | ExecSwNqOverflow
        | NetworkProxyFailure => NcCounter::ERR_RT,
        Success | Failure => NcCounter::ERR_GENERIC,
    }
}

/// The execution-outcome counter (`INFER_*`) of an execution's status.
fn outcome_counter(s: NrtStatus) -> Option<NcCounter> {
    match s {
        NrtStatus::Success => Some(NcCounter::INFER_COMPLETED),
        NrtStatus::ExecCompletedWithNumErr => Some(NcCounter::INFER_COMPLETED_WITH_NUM_ERR),
        NrtStatus::ExecCompletedWithErr => Some(NcCounter::INFER_COMPLETED_WITH_ERR),
        NrtStatus::Timeout => Some(NcCounter::INFER_TIMED_OUT),
        NrtStatus::Invalid | NrtStatus::ExecBadInput => Some(NcCounter::INFER_INCORRECT_INPUT),
        NrtStatus::ExecUnitUnrecoverable | NrtStatus::ExecNcBusy | NrtStatus::QueueFull => {
            Some(NcCounter::INFER_FAILED_TO_QUEUE)
        }
        _ => None,
    }
}

/// The specific counter of a status (the ext hardware counters, OOB, load errors).
fn specific_counter(s: NrtStatus) -> Option<NcCounter> {
    match s {
        NrtStatus::ExecHwErrCollectives => Some(NcCounter::HW_ERR_COLLECTIVES),
        NrtStatus::ExecHwErrHbmUe => Some(NcCounter::HW_ERR_HBM_UE),
        NrtStatus::ExecHwErrNcUe => Some(NcCounter::HW_ERR_NC_UE),
        NrtStatus::ExecHwErrDmaAbort => Some(NcCounter::HW_ERR_DMA_ABORT),
        NrtStatus::ExecHwErrRepairableHbmUe => Some(NcCounter::HW_ERR_REPAIRABLE_HBM_UE),
        NrtStatus::ExecSwNqOverflow => Some(NcCounter::ERR_SW_NQ_OVERFLOW),
        NrtStatus::ExecOob => Some(NcCounter::OOB),
        NrtStatus::Resource | NrtStatus::FailHostMemAlloc => Some(NcCounter::ERR_RESOURCE),
        NrtStatus::LoadNotEnoughNc | NrtStatus::ExecNcBusy => Some(NcCounter::ERR_RESOURCE_NC),
        NrtStatus::Invalid => Some(NcCounter::ERR_INVALID),
        NrtStatus::UnsupportedNeffVersion => Some(NcCounter::ERR_UNSUPPORTED_NEFF_VERSION),
        _ => None,
    }
}

/// The ext counter of a device fault kind, whatever status it was reported as (a runtime
/// before the 2.23 split reports hardware errors as `NRT_TIMEOUT`).
pub fn fault_counter(code: u32) -> Option<NcCounter> {
    use neuron_abi::notify::*;
    match code {
        ERR_HBM_UE => Some(NcCounter::HW_ERR_HBM_UE),
        ERR_SRAM_UE => Some(NcCounter::HW_ERR_NC_UE),
        ERR_DMA_ABORT => Some(NcCounter::HW_ERR_DMA_ABORT),
        ERR_HBM_UE_REPAIRABLE => Some(NcCounter::HW_ERR_REPAIRABLE_HBM_UE),
        ERR_OOB => Some(NcCounter::OOB),
        _ => None,
    }
}

/// One mapping of a datastore page; unmapped on drop.
struct Page {
    ptr: *mut u8,
    len: usize,
    dev: Arc<dyn DeviceFile>,
}

// SAFETY: the pointer is a shared mapping valid until Drop; every access is bounds-checked
// and atomic or volatile.
unsafe impl Send for Page {}
// SAFETY: as above.
unsafe impl Sync for Page {}

impl Page {
    fn map(dev: &Arc<dyn DeviceFile>, pid: i32, prot: i32) -> Result<Page, Errno> {
        let mut a = NeuronDsInfo {
            pid,
            ..FromZeros::new_zeroed()
        };
        crate::drv::ioctl_struct(&**dev, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut a)?;
        let len = a.size as usize;
        if len < nds::DRIVER_AREA_END {
            return Err(Errno::EINVAL);
        }
        let ptr = dev.mmap(len, a.mmap_offset, prot)?;
        if ptr.is_null() || !(ptr as usize).is_multiple_of(8) {
            let _ = dev.munmap(ptr, len);
            return Err(Errno::EFAULT);
        }
        Ok(Page {
            ptr,
            len,
            dev: dev.clone(),
        })
    }

    fn word(&self, off: usize) -> Option<&AtomicU64> {
        if !off.is_multiple_of(8) || off.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 8-aligned (the base is 8-aligned); the mapping lives as long
        // as `self`; AtomicU64 has u64's layout and atomics are valid on shared memory.
        Some(unsafe { &*(self.ptr.add(off) as *const AtomicU64) })
    }

    /// Copy the whole page out with relaxed atomic word loads.
    fn copy_out(&self, out: &mut [u8]) {
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            if let Some(w) = self.word(i * 8) {
                chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.dev.munmap(self.ptr, self.len);
    }
}

/// A consistent copy of process `pid`'s datastore page on `dev` (read-only mapping): the
/// counters as they are, the runtime area copied between two equal even generations (retried
/// a bounded number of times, then `EAGAIN`).
pub fn read_page(dev: &Arc<dyn DeviceFile>, pid: i32) -> Result<Vec<u8>, Errno> {
    if pid == 0 {
        return Err(Errno::EINVAL);
    }
    let page = Page::map(dev, pid, neuron_abi::device::PROT_READ)?;
    let mut out = Vec::new();
    out.try_reserve_exact(page.len).map_err(|_| Errno::ENOMEM)?;
    out.resize(page.len & !7, 0);
    let gen = page.word(rta::GENERATION_OFFSET).ok_or(Errno::EINVAL)?;
    for attempt in 0..10_000u32 {
        let g1 = gen.load(Ordering::Acquire);
        if g1 % 2 == 0 {
            page.copy_out(&mut out);
            fence(Ordering::Acquire);
            if gen.load(Ordering::Relaxed) == g1 {
                return Ok(out);
            }
        }
        if attempt > 100 {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
    Err(Errno::EAGAIN)
}

/// The writer's state: the runtime area as it should read, and the next model id.
struct Writer {
    area: Box<RuntimeArea>,
    next_model_id: u32,
}

/// This process's datastore on one device.
pub struct Datastore {
    page: Page,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for Datastore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datastore")
            .field("len", &self.page.len)
            .finish()
    }
}

/// Model ids start here, as the real runtime's do.
pub const FIRST_MODEL_ID: u32 = 10001;

impl Datastore {
    /// Take this process's page on `dev` (pid 0 = the caller), write the runtime version and
    /// the process record. `tag` is `NEURON_PROCESS_TAG` (default: the pid).
    pub fn open(dev: &Arc<dyn DeviceFile>, tag: Option<&str>) -> Result<Arc<Datastore>, Errno> {
        let page = Page::map(dev, 0, neuron_abi::device::PROT_RW)?;
        let mut area = Box::new(RuntimeArea::new_zeroed());
        area.magic = rta::MAGIC;
        area.version = rta::VERSION;
        area.area_size = rta::AREA_SIZE as u32;
        area.max_models = rta::MAX_MODELS as u32;
        area.hist_ncs = rta::HIST_NCS as u32;
        area.hist_buckets = rta::HIST_BUCKETS as u32;
        let pid = std::process::id();
        let p = &mut area.process;
        p.pid = pid;
        p.start_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        rta::set_c_str(&mut p.runtime_version, &version_string());
        rta::set_c_str(&mut p.tag, tag.unwrap_or(&pid.to_string()));
        // Read once a process (a fault campaign opens a runtime per experiment).
        static CMDLINE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let cmdline =
            CMDLINE.get_or_init(|| std::fs::read("/proc/self/cmdline").unwrap_or_default());
        let n = cmdline.len().min(rta::CMDLINE_MAX);
        p.cmdline[..n].copy_from_slice(&cmdline[..n]);
        p.cmdline_len = n as u32;
        let ds = Datastore {
            page,
            writer: Mutex::new(Writer {
                area,
                next_model_id: FIRST_MODEL_ID,
            }),
        };
        ds.set_nd(
            NdCounter::RUNTIME_VERSION,
            version_counter(VERSION_MAJOR, VERSION_MINOR, VERSION_BUILD),
        );
        ds.publish(&mut ds.lock());
        Ok(Arc::new(ds))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Write the runtime area into the page under the seqlock (the caller holds the writer).
    fn publish(&self, w: &mut Writer) {
        let Some(gen) = self.page.word(rta::GENERATION_OFFSET) else {
            return;
        };
        let g = gen.load(Ordering::Relaxed) | 1;
        w.area.generation = g.wrapping_add(1);
        gen.store(g, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, chunk) in w.area.as_bytes().chunks_exact(8).enumerate() {
            let off = rta::AREA_OFFSET + i * 8;
            if off == rta::GENERATION_OFFSET {
                continue;
            }
            if let (Some(word), Ok(b)) = (self.page.word(off), <[u8; 8]>::try_from(chunk)) {
                word.store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
        }
        gen.store(g.wrapping_add(1), Ordering::Release);
    }

    fn set_nd(&self, c: NdCounter, v: u64) {
        if let Some(w) = nds::nd_counter_offset(c).and_then(|o| self.page.word(o)) {
            w.store(v, Ordering::Relaxed);
        }
    }

    fn add_nd(&self, c: NdCounter, v: i64) {
        if let Some(w) = nds::nd_counter_offset(c).and_then(|o| self.page.word(o)) {
            w.fetch_add(v as u64, Ordering::Relaxed);
        }
    }

    /// Add `v` (may be negative) to NeuronCore `nc`'s counter `c`.
    pub fn add_nc(&self, nc: u32, c: NcCounter, v: i64) {
        if let Some(w) = nds::nc_counter_offset(nc, c).and_then(|o| self.page.word(o)) {
            w.fetch_add(v as u64, Ordering::Relaxed);
        }
    }

    /// Counter `c` of NeuronCore `nc` as the page holds it.
    pub fn nc(&self, nc: u32, c: NcCounter) -> u64 {
        nds::nc_counter_offset(nc, c)
            .and_then(|o| self.page.word(o))
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Device counter `c` as the page holds it.
    pub fn nd(&self, c: NdCounter) -> u64 {
        nds::nd_counter_offset(c)
            .and_then(|o| self.page.word(o))
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Charge (`sign` 1) or release (`sign` -1) `u` on NeuronCore `nc`: device bytes in its
    /// `MEM_USAGE_*_DEVICE` counters, host bytes in the device's `MEM_USAGE_*_HOST`.
    fn apply_usage(&self, nc: u32, u: &Usage, sign: i64) {
        for k in 0..MEM_CATEGORIES {
            if u.device[k] != 0 {
                self.add_nc(nc, NC_DEVICE_COUNTERS[k], sign * u.device[k] as i64);
            }
            if u.host[k] != 0 {
                self.add_nd(ND_HOST_COUNTERS[k], sign * u.host[k] as i64);
            }
        }
    }

    /// Charge one allocation outside any model (a tensor); released when the guard drops.
    pub fn charge(self: &Arc<Self>, nc: u32, host: bool, mt: MemType, bytes: u64) -> MemCharge {
        let mut usage = Usage::default();
        usage.add(host, mt, bytes);
        self.apply_usage(nc, &usage, 1);
        MemCharge {
            ds: self.clone(),
            nc,
            usage,
        }
    }

    /// A load failed on `nc` with `status`: its error class and specific counter.
    pub fn load_failed(&self, nc: u32, status: NrtStatus) {
        self.add_nc(nc, error_class(status), 1);
        if let Some(c) = specific_counter(status) {
            self.add_nc(nc, c, 1);
        }
    }

    /// A model was loaded: count it, charge its memory, list it (if a slot is free).
    pub fn model_loaded(
        self: &Arc<Self>,
        name: &str,
        uuid: [u8; 16],
        nc: u32,
        nc_count: u32,
        usage: Usage,
    ) -> ModelEntry {
        self.add_nc(nc, NcCounter::MODEL_LOAD_COUNT, 1);
        self.apply_usage(nc, &usage, 1);
        let mut w = self.lock();
        let id = w.next_model_id;
        w.next_model_id = id.wrapping_add(1);
        w.area.models_loaded += 1;
        let slot = w.area.models.iter().position(|m| m.in_use == 0);
        if let Some(s) = slot {
            let m = &mut w.area.models[s];
            *m = FromZeros::new_zeroed();
            m.model_id = id;
            m.in_use = 1;
            m.nc_index = nc;
            m.nc_count = nc_count;
            m.host_bytes = usage.host;
            m.device_bytes = usage.device;
            m.uuid = uuid;
            rta::set_c_str(&mut m.name, name);
        }
        self.publish(&mut w);
        ModelEntry {
            ds: self.clone(),
            slot,
            id,
            nc,
            usage,
        }
    }

    fn set_running(&self, slot: Option<usize>, running: bool) {
        let mut w = self.lock();
        if let Some(m) = slot.and_then(|s| w.area.models.get_mut(s)) {
            m.is_running = running as u32;
            if running {
                m.executions += 1;
            }
        }
        self.publish(&mut w);
    }

    /// One execution on `nc` ended with `status` (`fault`: the device fault's own counter, if
    /// any), after `total` wall time; `device_ps` is its device time when it completed.
    pub fn execution_done(
        &self,
        slot: Option<usize>,
        nc: u32,
        status: NrtStatus,
        fault: Option<NcCounter>,
        total: Duration,
        device_ps: Option<u64>,
    ) {
        let total_us = total.as_secs_f64() * 1e6;
        self.add_nc(nc, NcCounter::INFERENCE_COUNT, 1);
        self.add_nc(nc, NcCounter::TIME_IN_USE, total_us as i64);
        self.add_nc(nc, NcCounter::LATENCY_TOTAL, total_us as i64);
        if let Some(ps) = device_ps {
            self.add_nc(nc, NcCounter::LATENCY_DEVICE, (ps / 1_000_000) as i64);
        }
        if let Some(c) = outcome_counter(status) {
            self.add_nc(nc, c, 1);
        }
        if status != NrtStatus::Success {
            self.add_nc(nc, NcCounter::GENERIC_FAIL, 1);
            self.add_nc(nc, error_class(status), 1);
            let specific = specific_counter(status);
            if let Some(c) = specific {
                self.add_nc(nc, c, 1);
            }
            if let Some(c) = fault.filter(|f| Some(*f) != specific) {
                self.add_nc(nc, c, 1);
            }
        }
        let mut w = self.lock();
        if let Some(m) = slot.and_then(|s| w.area.models.get_mut(s)) {
            m.is_running = 0;
        }
        if let Some(l) = w.area.latency.get_mut(nc as usize) {
            record(&mut l.total, total_us);
            if let Some(ps) = device_ps {
                record(&mut l.device, ps as f64 / 1e6);
            }
        }
        self.publish(&mut w);
    }

    /// A copy of the runtime area as this process last wrote it.
    pub fn area(&self) -> RuntimeArea {
        *self.lock().area
    }
}

fn record(h: &mut rta::LatencyHistogram, us: f64) {
    h.count += 1;
    h.sum_us = h.sum_us.saturating_add(us as u64);
    if let Some(b) = h.buckets.get_mut(rta::bucket_of(us)) {
        *b += 1;
    }
}

impl Drop for Datastore {
    fn drop(&mut self) {
        // nrt_close: give the page back (only the owner's release clears it).
        let mut a = NeuronDsInfo::new_zeroed();
        let _ = crate::drv::ioctl_struct(&*self.page.dev, NEURON_IOCTL_RELEASE_NEURON_DS, &mut a);
    }
}

/// Memory charged outside a model; released on drop.
#[derive(Debug)]
pub struct MemCharge {
    ds: Arc<Datastore>,
    nc: u32,
    usage: Usage,
}

impl Drop for MemCharge {
    fn drop(&mut self) {
        self.ds.apply_usage(self.nc, &self.usage, -1);
    }
}

/// A listed model; unlisted and its memory released on drop (unload).
#[derive(Debug)]
pub struct ModelEntry {
    ds: Arc<Datastore>,
    slot: Option<usize>,
    id: u32,
    nc: u32,
    usage: Usage,
}

impl ModelEntry {
    /// The runtime's model id (10001, ...).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// An execution starts.
    pub fn begin(&self) {
        self.ds.set_running(self.slot, true);
    }
    /// An execution ended (see [`Datastore::execution_done`]).
    pub fn end(
        &self,
        status: NrtStatus,
        fault: Option<NcCounter>,
        total: Duration,
        device_ps: Option<u64>,
    ) {
        self.ds
            .execution_done(self.slot, self.nc, status, fault, total, device_ps);
    }
}

impl Drop for ModelEntry {
    fn drop(&mut self) {
        self.ds.apply_usage(self.nc, &self.usage, -1);
        let mut w = self.ds.lock();
        if let Some(m) = self.slot.and_then(|s| w.area.models.get_mut(s)) {
            *m = FromZeros::new_zeroed();
        }
        self.ds.publish(&mut w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_classes() {
        let v = version_counter(2, 31, 24);
        assert_eq!(v, 24 | 31 << 32 | 2 << 40);
        assert_eq!(decode_version(v), (2, 31, 24));
        // Every status has a class; the hardware ones are hardware.
        for s in NrtStatus::ALL {
            let _ = error_class(s);
        }
        assert_eq!(error_class(NrtStatus::ExecHwErrDmaAbort), NcCounter::ERR_HW);
        assert_eq!(
            error_class(NrtStatus::ExecCompletedWithNumErr),
            NcCounter::ERR_NUMERICAL
        );
        assert_eq!(error_class(NrtStatus::Timeout), NcCounter::ERR_TRANSIENT);
        assert_eq!(mem_category(MemType::DMA_RINGS_HOST), rta::MEM_MISC);
        assert_eq!(mem_category(MemType::CODE_DEVICE), rta::MEM_CODE);
    }
}
