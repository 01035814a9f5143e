//! The libnrt-shaped API in safe Rust: [`Nrt`] (init/close, core reservation, load),
//! [`Tensor`], [`TensorSet`] and execution by tensor sets. The C library (`runtime/capi`) is a
//! thin layer over this.

use crate::config::Config;
use crate::drv::{Chunk, Driver};
use crate::mapped::Mapped;
use crate::model::{Model, TensorInfo};
use crate::rawbuf::RawBuf;
use crate::status::{NrtError, NrtStatus};
use crate::sys::SysDevice;
use crate::Runtime;
use neuron_abi::arch::Arch;
use neuron_abi::consts::MemType;
use neuron_abi::ioctl::{NEURON_IOCTL_CRWL_NC_RANGE_MARK, NEURON_IOCTL_CRWL_NC_RANGE_UNMARK};
use neuron_abi::structs::CrwlNcMap;
use neuron_abi::{DeviceFile, Errno};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use zerocopy::{FromZeros, IntoBytes};

/// Where device files come from: real `/dev/neuronN` nodes, or an emulator.
pub trait DeviceProvider: Send + Sync + std::fmt::Debug {
    /// Number of devices.
    fn device_count(&self) -> u32;
    /// Open device `index`; `write_only` is the driver's misc fd (`O_WRONLY`).
    fn open(&self, index: u32, write_only: bool) -> Result<Arc<dyn DeviceFile>, Errno>;
    /// One line for logs ("/dev/neuron*", "embedded emulated trn2 device", ...).
    fn describe(&self) -> String;
}

/// Real device nodes.
#[derive(Debug, Default)]
pub struct SysProvider;

impl DeviceProvider for SysProvider {
    fn device_count(&self) -> u32 {
        SysDevice::count_present()
    }
    fn open(&self, index: u32, write_only: bool) -> Result<Arc<dyn DeviceFile>, Errno> {
        Ok(Arc::new(SysDevice::open_with(
            &format!("/dev/neuron{index}"),
            write_only,
        )?))
    }
    fn describe(&self) -> String {
        "/dev/neuron*".into()
    }
}

/// `nrt_tensor_placement_t` (real values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Placement {
    Device = 0,
    Host = 1,
    Virtual = 2,
}

impl Placement {
    pub fn from_code(c: u32) -> Option<Placement> {
        match c {
            0 => Some(Placement::Device),
            1 => Some(Placement::Host),
            2 => Some(Placement::Virtual),
            _ => None,
        }
    }
}

/// Parse `NEURON_RT_VISIBLE_CORES` ("3-5,6"): increasing and contiguous, as the docs require.
pub fn parse_visible_cores(s: &str) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: u32 = a.parse().map_err(|_| format!("bad core number '{a}'"))?;
        let b: u32 = b.parse().map_err(|_| format!("bad core number '{b}'"))?;
        if b < a || b - a > 4096 {
            return Err(format!("bad range '{part}'"));
        }
        v.extend(a..=b);
    }
    if v.is_empty() {
        return Err("empty core list".into());
    }
    if v.windows(2).any(|w| w[1] != w[0] + 1) {
        return Err(format!("cores must be contiguous and increasing: '{s}'"));
    }
    Ok(v)
}

/// Physical NeuronCores per logical core: `NEURON_LOGICAL_NC_CONFIG` (1 or 2; 2 only on trn2),
/// default 2 on trn2 and 1 on trn1/inf2, as the real runtime.
pub fn lnc_from_env(arch: Arch) -> Result<u32, NrtError> {
    let default = if arch == Arch::V3Trn2 { 2 } else { 1 };
    match std::env::var("NEURON_LOGICAL_NC_CONFIG") {
        Err(_) => Ok(default),
        Ok(v) => match v.trim() {
            "1" => Ok(1),
            "2" if arch == Arch::V3Trn2 => Ok(2),
            _ => {
                let msg = format!(
                    "NEURON_LOGICAL_NC_CONFIG={v:?} is invalid: 1{} expected",
                    if arch == Arch::V3Trn2 {
                        " or 2"
                    } else {
                        " (this device has no LNC=2)"
                    }
                );
                tracing::error!(target: "NRT", "nrt_init {msg}");
                Err(NrtError::invalid(msg).logged())
            }
        },
    }
}

/// Which cores this process wants, from the environment, for a device with `total` cores.
/// `NEURON_RT_VISIBLE_CORES` wins over `NEURON_RT_NUM_CORES`; default: all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoreRequest {
    Range(u32, u32),
    Count(u32),
}

pub fn core_request_from_env(total: u32) -> Result<CoreRequest, NrtError> {
    if let Ok(v) = std::env::var("NEURON_RT_VISIBLE_CORES") {
        let cores = parse_visible_cores(&v)
            .map_err(|e| NrtError::invalid(format!("NEURON_RT_VISIBLE_CORES={v:?}: {e}")))?;
        let (a, b) = (cores[0], cores[cores.len() - 1]);
        return Ok(CoreRequest::Range(a, b));
    }
    if let Ok(v) = std::env::var("NEURON_RT_NUM_CORES") {
        let n: u32 = v.trim().parse().map_err(|_| {
            NrtError::invalid(format!(
                "NEURON_RT_NUM_CORES={v:?} is not a number of NeuronCores"
            ))
        })?;
        if n > 0 {
            return Ok(CoreRequest::Count(n));
        }
    }
    Ok(CoreRequest::Count(total))
}

/// Device-memory accounting per visible core.
#[derive(Debug, Default)]
struct Accounting {
    used: BTreeMap<u32, u64>,
}

/// An initialised runtime: one device, the cores this process reserved, the models on them.
#[derive(Debug)]
pub struct Nrt {
    rt: Runtime,
    drv: Driver,
    misc: Driver,
    /// The first physical core of each visible logical core (VNC).
    cores: Vec<u32>,
    /// Physical cores per logical core (`NEURON_LOGICAL_NC_CONFIG`).
    lnc: u32,
    busy: Arc<Mutex<Vec<bool>>>,
    acct: Arc<Mutex<Accounting>>,
    arch: Arch,
    hbm_bytes_per_core: u64,
}

impl Nrt {
    /// `nrt_init`: open device 0, reserve cores through the driver's CRWL range marks.
    pub fn init(provider: &dyn DeviceProvider, config: Config) -> Result<Nrt, NrtError> {
        if provider.device_count() == 0 {
            return Err(NrtError::new(
                NrtStatus::Failure,
                "no Neuron device available",
            ));
        }
        let dev = provider.open(0, false).map_err(|e| {
            NrtError::new(NrtStatus::Failure, format!("cannot open /dev/neuron0: {e}"))
        })?;
        let misc = provider.open(0, true).map_err(|e| {
            NrtError::new(
                NrtStatus::Failure,
                format!("cannot open /dev/neuron0 (misc): {e}"),
            )
        })?;
        let rt = Runtime::new(dev.clone(), 0, config)?;
        let arch = rt.arch();
        let lnc = lnc_from_env(arch)?;
        // Requests count logical cores; the driver reserves physical ones.
        let total = arch.nc_count() / lnc;
        let (count, start, end) = match core_request_from_env(total)? {
            CoreRequest::Range(a, b) => (b - a + 1, a, b),
            CoreRequest::Count(n) => (n, 0, total.saturating_sub(1)),
        };
        if end >= total || count == 0 || count > total {
            let msg = format!(
                "NeuronCore(s) not available - Requested:nc{start}-nc{end} Available:{total}"
            );
            tracing::error!(target: "NRT", "nrt_allocate_neuron_cores {msg}");
            return Err(NrtError::new(NrtStatus::Resource, msg).logged());
        }
        let mut m = CrwlNcMap {
            nc_count: count * lnc,
            start_nc_index: start * lnc,
            end_nc_index: (end + 1) * lnc - 1,
            ..FromZeros::new_zeroed()
        };
        let r = call(&*misc, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m);
        if let Err(e) = r {
            let avail = if e == Errno::EBUSY {
                m.max_nc_available
            } else {
                0
            };
            let msg = format!(
                "NeuronCore(s) not available - Requested:nc{start}-nc{} Available:{avail}",
                start + count - 1
            );
            tracing::error!(target: "NRT", "nrt_allocate_neuron_cores {msg}");
            return Err(NrtError::new(NrtStatus::Resource, msg).logged());
        }
        let physical: Vec<u32> = (0..64).filter(|b| m.bitmap & (1u64 << b) != 0).collect();
        if std::env::var("NEURON_RT_RESET_CORES")
            .map(|v| crate::config::parse_bool(&v) != Some(false))
            .unwrap_or(true)
        {
            let map = physical
                .iter()
                .filter(|c| **c < 32)
                .fold(0u32, |a, c| a | 1 << c);
            rt_driver(&rt)
                .nc_reset(map)
                .map_err(|e| NrtError::new(NrtStatus::Failure, format!("NC_RESET failed: {e}")))?;
        }
        let hbm_bytes_per_core = arch.hbm_size() * arch.hbm_count() as u64 / total.max(1) as u64;
        tracing::info!(target: "NRT", "nrt_init reserved NeuronCores {:?} (LNC={lnc}) on {}", physical, provider.describe());
        // Logical core i is the i-th run of `lnc` reserved physical cores.
        let cores: Vec<u32> = physical.chunks_exact(lnc as usize).map(|c| c[0]).collect();
        Ok(Nrt {
            drv: rt_driver(&rt),
            rt,
            misc: Driver::new(misc),
            busy: Arc::new(Mutex::new(vec![false; cores.len()])),
            cores,
            lnc,
            acct: Arc::new(Mutex::new(Accounting::default())),
            arch,
            hbm_bytes_per_core,
        })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// `nrt_get_visible_vnc_count`.
    pub fn visible_vnc_count(&self) -> u32 {
        self.cores.len() as u32
    }

    /// The first physical core of a visible core.
    pub fn physical_core(&self, vnc: u32) -> Option<u32> {
        self.cores.get(vnc as usize).copied()
    }

    /// Physical cores per logical core.
    pub fn lnc(&self) -> u32 {
        self.lnc
    }

    /// `nrt_load`: `vnc` -1 picks the first free visible core.
    pub fn load(&self, neff: &[u8], vnc: i32) -> Result<LoadedModel, NrtError> {
        // A NEFF needs one physical core per subgraph, all inside the logical core it is
        // loaded on (real libnrt refuses a NEFF built for another LNC).
        if let Ok(subgraphs) = neuron_neff::Neff::parse(neff)
            .and_then(|n| n.kelf())
            .map(|k| k.graphs.len())
        {
            if subgraphs as u64 > u64::from(self.lnc) {
                let msg = format!(
                    "the NEFF has {subgraphs} subgraphs (compiled for LNC={subgraphs}); this runtime runs LNC={} (NEURON_LOGICAL_NC_CONFIG)",
                    self.lnc
                );
                tracing::error!(target: "NRT", "nrt_load {msg}");
                return Err(NrtError::new(NrtStatus::LoadNotEnoughNc, msg).logged());
            }
        }
        let v = {
            let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            let v = if vnc < 0 {
                busy.iter().position(|b| !b).ok_or_else(|| {
                    NrtError::new(NrtStatus::LoadNotEnoughNc, "no free NeuronCore to load on")
                })?
            } else {
                let v = vnc as usize;
                if v >= busy.len() {
                    return Err(NrtError::new(
                        NrtStatus::LoadNotEnoughNc,
                        format!("VNC {vnc} is not visible (visible: {})", busy.len()),
                    ));
                }
                v
            };
            busy[v] = true;
            v
        };
        match self.rt.load(neff, self.cores[v]) {
            Ok(model) => Ok(LoadedModel {
                model,
                vnc: v as u32,
                busy: self.busy.clone(),
            }),
            Err(e) => {
                self.busy.lock().unwrap_or_else(|e| e.into_inner())[v] = false;
                Err(e)
            }
        }
    }

    /// `nrt_tensor_allocate`.
    pub fn tensor_allocate(
        &self,
        placement: Placement,
        vnc: i32,
        size: u64,
        name: &str,
    ) -> Result<Tensor, NrtError> {
        let storage = match placement {
            Placement::Virtual => {
                let mut v = Vec::new();
                v.try_reserve_exact(size as usize).map_err(|_| {
                    NrtError::new(
                        NrtStatus::Resource,
                        format!("no host memory for tensor '{name}' ({size} bytes)"),
                    )
                })?;
                v.resize(size as usize, 0);
                Storage::Virtual(Mutex::new(v))
            }
            Placement::Device | Placement::Host => {
                let v = if vnc < 0 { 0 } else { vnc as u32 };
                let nc = self
                    .physical_core(v)
                    .ok_or_else(|| NrtError::invalid(format!("VNC {vnc} is not visible")))?;
                let host = placement == Placement::Host;
                if host && size > 4 << 20 {
                    return Err(NrtError::invalid(format!(
                        "HOST tensors are limited to 4 MB ({size} requested)"
                    )));
                }
                let mt = if host {
                    MemType::TENSORS_HOST
                } else {
                    MemType::TENSORS_DEVICE
                };
                let chunk = self.drv.mem_alloc(size.max(1), host, nc, mt).map_err(|e| {
                    let st = if e == Errno::ENOMEM {
                        NrtStatus::Resource
                    } else {
                        NrtStatus::Failure
                    };
                    NrtError::new(
                        st,
                        format!("allocating {size} bytes for tensor '{name}': {e}"),
                    )
                })?;
                // Charged in the datastore's memory counters until the tensor is freed.
                let charge = self
                    .rt
                    .datastore()
                    .map(|ds| ds.charge(nc, host, mt, chunk.size));
                if host {
                    let map = Mapped::new(self.drv.dev.clone(), chunk.size as usize, chunk.pa)
                        .map_err(|e| {
                            NrtError::new(
                                NrtStatus::Failure,
                                format!("mmap of tensor '{name}': {e}"),
                            )
                        })?;
                    Storage::Host {
                        drv: self.drv.clone(),
                        chunk,
                        map,
                        _charge: charge,
                    }
                } else {
                    self.acct
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .used
                        .entry(v)
                        .and_modify(|u| *u += chunk.size)
                        .or_insert(chunk.size);
                    // NEURON_RT_MAP_HBM=1: the device memory is also mapped into the process
                    // (nrt_tensor_get_va), as the driver allows for device chunks.
                    let map = if map_hbm() {
                        Some(
                            Mapped::new(self.drv.dev.clone(), chunk.size as usize, chunk.pa)
                                .map_err(|e| {
                                    NrtError::new(
                                        NrtStatus::Failure,
                                        format!("mmap of device tensor '{name}': {e}"),
                                    )
                                })?,
                        )
                    } else {
                        None
                    };
                    Storage::Device {
                        drv: self.drv.clone(),
                        chunk,
                        vnc: v,
                        acct: self.acct.clone(),
                        map,
                        _charge: charge,
                    }
                }
            }
        };
        Ok(Tensor {
            name: name.to_string(),
            storage: Arc::new(storage),
            offset: 0,
            size,
            lnc: u32::try_from(vnc.max(0)).unwrap_or(0),
        })
    }

    /// `nrt_get_vnc_memory_stats`: (bytes used by tensors, bytes available to the core).
    pub fn memory_stats(&self, vnc: u32) -> Result<(u64, u64), NrtError> {
        if vnc as usize >= self.cores.len() {
            return Err(NrtError::invalid(format!("VNC {vnc} is not visible")));
        }
        let used = self
            .acct
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .used
            .get(&vnc)
            .copied()
            .unwrap_or(0);
        Ok((used, self.hbm_bytes_per_core))
    }
}

impl Drop for Nrt {
    fn drop(&mut self) {
        let bitmap = self.cores.iter().fold(0u64, |a, c| a | 1 << c);
        let mut m = CrwlNcMap {
            bitmap,
            ..FromZeros::new_zeroed()
        };
        let _ = call(&*self.misc.dev, NEURON_IOCTL_CRWL_NC_RANGE_UNMARK, &mut m);
    }
}

fn rt_driver(rt: &Runtime) -> Driver {
    rt.driver().clone()
}

fn call<T: IntoBytes + zerocopy::FromBytes>(
    dev: &dyn DeviceFile,
    cmd: u32,
    arg: &mut T,
) -> Result<(), Errno> {
    crate::drv::ioctl_struct(dev, cmd, arg)
}

/// A model loaded on one visible core.
#[derive(Debug)]
pub struct LoadedModel {
    pub model: Model,
    pub vnc: u32,
    busy: Arc<Mutex<Vec<bool>>>,
}

impl Drop for LoadedModel {
    fn drop(&mut self) {
        if let Some(b) = self
            .busy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(self.vnc as usize)
        {
            *b = false;
        }
    }
}

impl LoadedModel {
    /// `nrt_execute`: inputs and outputs by name from tensor sets. Every model input must be in
    /// `inputs` with exactly its size; outputs present in `outputs` are written.
    pub fn execute(&mut self, inputs: &TensorSet, outputs: &TensorSet) -> Result<u64, NrtError> {
        self.execute_spans(inputs, outputs).map(|(t, _)| t)
    }

    /// [`execute`](Self::execute), also returning each engine's span of the execution.
    pub fn execute_spans(
        &mut self,
        inputs: &TensorSet,
        outputs: &TensorSet,
    ) -> Result<(u64, Vec<crate::model::EngineSpan>), NrtError> {
        let infos: Vec<TensorInfo> = self.model.inputs().cloned().collect();
        let mut data = Vec::new();
        for t in &infos {
            let tensor = inputs.get(&t.name).ok_or_else(|| {
                NrtError::invalid(format!(
                    "input tensor '{}' is missing from the input set",
                    t.name
                ))
            })?;
            if tensor.size() != t.size {
                return Err(NrtError::invalid(format!(
                    "input tensor '{}' has {} bytes, the model expects {}",
                    t.name,
                    tensor.size(),
                    t.size
                )));
            }
            let mut b = vec![0u8; t.size as usize];
            tensor.read(&mut b, 0)?;
            data.push((t.name.clone(), b));
        }
        for t in self.model.outputs() {
            if let Some(o) = outputs.get(&t.name) {
                if o.size() != t.size {
                    return Err(NrtError::invalid(format!(
                        "output tensor '{}' has {} bytes, the model produces {}",
                        t.name,
                        o.size(),
                        t.size
                    )));
                }
            } else {
                return Err(NrtError::invalid(format!(
                    "output tensor '{}' is missing from the output set",
                    t.name
                )));
            }
        }
        let refs: Vec<(&str, &[u8])> = data
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        let (out, numerical) = self.model.execute_completed(&refs)?;
        for (t, bytes) in &out.outputs {
            if let Some(o) = outputs.get(&t.name) {
                o.write(bytes, 0)?;
            }
        }
        // A NaN: the outputs are written and the status says so (1003).
        match numerical {
            Some(e) => Err(e),
            None => Ok((out.device_time_ps, self.model.last_spans().to_vec())),
        }
    }
}

enum Storage {
    Device {
        drv: Driver,
        chunk: Chunk,
        vnc: u32,
        acct: Arc<Mutex<Accounting>>,
        /// The chunk mapped into the process (`NEURON_RT_MAP_HBM=1`).
        map: Option<Mapped>,
        _charge: Option<crate::nds::MemCharge>,
    },
    Host {
        drv: Driver,
        chunk: Chunk,
        map: Mapped,
        _charge: Option<crate::nds::MemCharge>,
    },
    Virtual(Mutex<Vec<u8>>),
    Attached(RawBuf),
    Empty,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Device { chunk, .. } => write!(f, "Device({chunk:?})"),
            Storage::Host { chunk, .. } => write!(f, "Host({chunk:?})"),
            Storage::Virtual(_) => f.write_str("Virtual"),
            Storage::Attached(b) => write!(f, "Attached({b:?})"),
            Storage::Empty => f.write_str("Empty"),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        match self {
            Storage::Device {
                drv,
                chunk,
                vnc,
                acct,
                map,
                ..
            } => {
                // Unmap before the free, so the chunk is not left reserved by the mapping.
                drop(map.take());
                if let Some(u) = acct
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .used
                    .get_mut(vnc)
                {
                    *u = u.saturating_sub(chunk.size);
                }
                let _ = drv.mem_free(chunk.handle);
            }
            Storage::Host { drv, chunk, .. } => {
                let _ = drv.mem_free(chunk.handle);
            }
            _ => {}
        }
    }
}

/// A tensor: storage (device, host, virtual, attached or none) plus a window on it. Slices
/// share storage, which lives until the last of them is dropped.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    storage: Arc<Storage>,
    offset: u64,
    size: u64,
    /// The logical core it was allocated on.
    lnc: u32,
}

/// `NEURON_RT_MAP_HBM`: map device tensors into the process.
fn map_hbm() -> bool {
    std::env::var("NEURON_RT_MAP_HBM")
        .ok()
        .and_then(|v| crate::config::parse_bool(&v))
        .unwrap_or(false)
}

impl Tensor {
    /// `nrt_tensor_get_lnc_index`: the logical core it was allocated on.
    pub fn lnc(&self) -> u32 {
        self.lnc
    }

    /// `nrt_tensor_allocate_empty`: no storage until a buffer is attached.
    pub fn empty(name: &str) -> Tensor {
        Tensor {
            name: name.to_string(),
            storage: Arc::new(Storage::Empty),
            offset: 0,
            size: 0,
            lnc: 0,
        }
    }

    /// `nrt_tensor_attach_buffer`: use caller memory (placement becomes VIRTUAL).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid for reads and writes for as long as this tensor (or a
    /// slice of it) is used.
    #[allow(unsafe_code)]
    pub unsafe fn attach_buffer(&mut self, ptr: *mut u8, len: usize) -> Result<(), NrtError> {
        if ptr.is_null() {
            return Err(NrtError::invalid("attach_buffer: null buffer"));
        }
        self.storage = Arc::new(Storage::Attached(RawBuf {
            ptr: ptr as usize,
            len,
        }));
        self.offset = 0;
        self.size = len as u64;
        Ok(())
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn placement(&self) -> Option<Placement> {
        match &*self.storage {
            Storage::Device { .. } => Some(Placement::Device),
            Storage::Host { .. } => Some(Placement::Host),
            Storage::Virtual(_) | Storage::Attached(_) => Some(Placement::Virtual),
            Storage::Empty => None,
        }
    }

    fn range(&self, off: u64, len: u64) -> Result<u64, NrtError> {
        let end = off
            .checked_add(len)
            .ok_or_else(|| NrtError::invalid("offset overflow"))?;
        if end > self.size {
            return Err(NrtError::invalid(format!(
                "tensor '{}': range {off}..{end} exceeds its {} bytes",
                self.name, self.size
            )));
        }
        Ok(self.offset + off)
    }

    /// `nrt_tensor_read`.
    pub fn read(&self, buf: &mut [u8], off: u64) -> Result<(), NrtError> {
        let at = self.range(off, buf.len() as u64)?;
        let ok = match &*self.storage {
            Storage::Device { drv, chunk, .. } => drv.copy_from(chunk, at, buf).is_ok(),
            Storage::Host { map, .. } => map.read(at as usize, buf),
            Storage::Virtual(v) => {
                let v = v.lock().unwrap_or_else(|e| e.into_inner());
                buf.copy_from_slice(&v[at as usize..at as usize + buf.len()]);
                true
            }
            Storage::Attached(r) => r.read(at as usize, buf),
            Storage::Empty => {
                return Err(NrtError::invalid(format!(
                    "tensor '{}' has no storage",
                    self.name
                )))
            }
        };
        ok.then_some(()).ok_or_else(|| {
            NrtError::new(
                NrtStatus::Failure,
                format!("reading tensor '{}' failed", self.name),
            )
        })
    }

    /// `nrt_tensor_write`.
    pub fn write(&self, data: &[u8], off: u64) -> Result<(), NrtError> {
        let at = self.range(off, data.len() as u64)?;
        let ok = match &*self.storage {
            Storage::Device { drv, chunk, .. } => drv.copy_to(chunk, at, data).is_ok(),
            Storage::Host { map, .. } => map.write(at as usize, data),
            Storage::Virtual(v) => {
                let mut v = v.lock().unwrap_or_else(|e| e.into_inner());
                v[at as usize..at as usize + data.len()].copy_from_slice(data);
                true
            }
            Storage::Attached(r) => r.write(at as usize, data),
            Storage::Empty => {
                return Err(NrtError::invalid(format!(
                    "tensor '{}' has no storage",
                    self.name
                )))
            }
        };
        ok.then_some(()).ok_or_else(|| {
            NrtError::new(
                NrtStatus::Failure,
                format!("writing tensor '{}' failed", self.name),
            )
        })
    }

    /// `nrt_tensor_memset`.
    pub fn memset(&self, off: u64, value: u8, len: u64) -> Result<(), NrtError> {
        self.range(off, len)?;
        let block = vec![value; (len as usize).min(1 << 20)];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(block.len() as u64) as usize;
            self.write(&block[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// `nrt_tensor_copy`.
    pub fn copy(
        src: &Tensor,
        src_off: u64,
        dst: &Tensor,
        dst_off: u64,
        len: u64,
    ) -> Result<(), NrtError> {
        src.range(src_off, len)?;
        dst.range(dst_off, len)?;
        if let (
            Storage::Device {
                chunk: a, vnc: va, ..
            },
            Storage::Device {
                chunk: b, vnc: vb, ..
            },
        ) = (&*src.storage, &*dst.storage)
        {
            if va != vb {
                return Err(NrtError::invalid(format!(
                    "device-to-device copy between VNC {va} and VNC {vb}"
                )));
            }
            let _ = (a, b);
        }
        let mut buf = vec![0u8; (len as usize).min(1 << 20)];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            src.read(&mut buf[..n], src_off + done)?;
            dst.write(&buf[..n], dst_off + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// `nrt_tensor_allocate_slice`.
    pub fn slice(&self, off: u64, len: u64, name: &str) -> Result<Tensor, NrtError> {
        let at = self.range(off, len)?;
        Ok(Tensor {
            name: name.to_string(),
            storage: self.storage.clone(),
            offset: at,
            size: len,
            lnc: self.lnc,
        })
    }

    /// `nrt_tensor_get_va`: host-visible address: HOST and VIRTUAL memory, a DEVICE tensor's
    /// mapping with `NEURON_RT_MAP_HBM=1`; else None.
    pub fn va(&self) -> Option<*mut u8> {
        match &*self.storage {
            Storage::Host { map, .. } => Some(map.as_ptr().wrapping_add(self.offset as usize)),
            Storage::Virtual(v) => Some(
                v.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_mut_ptr()
                    .wrapping_add(self.offset as usize),
            ),
            Storage::Attached(r) => Some((r.ptr + self.offset as usize) as *mut u8),
            Storage::Device { map: Some(m), .. } => {
                Some(m.as_ptr().wrapping_add(self.offset as usize))
            }
            _ => None,
        }
    }

    /// `nrt_memcpy_to_device`: whether `addr..addr+len` lies in this tensor's mapping; then
    /// copy `data` there through the driver (the device sees it at once).
    pub fn write_at_va(&self, addr: usize, data: &[u8]) -> Option<Result<(), NrtError>> {
        let base = self.va()? as usize;
        let off = addr.checked_sub(base)? as u64;
        if off.checked_add(data.len() as u64)? > self.size {
            return None;
        }
        Some(self.write(data, off))
    }

    /// `nrt_tensor_get_device_allocation_info`: (physical address, allocation size, HBM index).
    pub fn device_allocation(&self) -> Option<(u64, u64, i32)> {
        match &*self.storage {
            Storage::Device { chunk, .. } => {
                Some((chunk.pa + self.offset, chunk.size - self.offset, 0))
            }
            _ => None,
        }
    }
}

/// `nrt_tensor_set_t`: tensors by name.
#[derive(Debug, Clone, Default)]
pub struct TensorSet {
    map: BTreeMap<String, Tensor>,
}

impl TensorSet {
    pub fn new() -> Self {
        Self::default()
    }
    /// Add or replace.
    pub fn add(&mut self, name: &str, t: Tensor) {
        self.map.insert(name.to_string(), t);
    }
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.map.get(name)
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
