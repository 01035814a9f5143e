//! `libnrt.so`: the `nrt.h` C API (headers in `runtime/include/nrt/`) as a thin layer over
//! `neuron_runtime::api`. Every entry point catches panics and returns a status; handles are
//! boxed Rust objects; pointers from C are checked for null before use.
//!
//! Order rules: before `nrt_init` every call returns `NRT_UNINITIALIZED` (13) except the
//! documented exempt ones (`nrt_get_version`, `nrt_get_total_(v)nc_count`,
//! `nrt_get_visible_(v)nc_count`, `nrt_get_status_as_str`); after `nrt_close` they return
//! `NRT_CLOSED` (14) until `nrt_init` is called again.
// A C ABI is raw pointers by nature; every dereference below has a SAFETY comment.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

pub mod async_api;
pub mod device;
pub mod profile;
pub mod systrace;

use neuron_runtime::api::{
    core_request_from_env, CoreRequest, DeviceProvider, LoadedModel, Nrt, Placement, Tensor,
    TensorSet,
};
use neuron_runtime::{Config, NrtError, NrtStatus};
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

pub type NrtStatusCode = u32;

const SUCCESS: u32 = 0;

enum State {
    Uninit,
    Active(Arc<Global>),
    Closed,
}

struct Global {
    nrt: Nrt,
    provider: Box<dyn DeviceProvider>,
}

static STATE: Mutex<State> = Mutex::new(State::Uninit);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn active() -> Result<Arc<Global>, u32> {
    match &*state() {
        State::Active(g) => Ok(g.clone()),
        State::Uninit => Err(NrtStatus::Uninitialized.code()),
        State::Closed => Err(NrtStatus::Closed.code()),
    }
}

/// Run an entry point: panics become NRT_FAILURE, errors are logged in the runtime's shape.
fn guard(func: &str, f: impl FnOnce() -> Result<(), NrtError>) -> u32 {
    neuron_runtime::logging::init(0);
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => {
            if !e.logged && !matches!(e.status, NrtStatus::Uninitialized | NrtStatus::Closed) {
                tracing::error!(target: "NRT", "{func} {}", e.message);
            }
            e.status.code()
        }
        Err(_) => {
            tracing::error!(target: "NRT", "{func} internal error (panic caught at the C boundary)");
            NrtStatus::Failure.code()
        }
    }
}

fn order(code: u32) -> NrtError {
    let status = NrtStatus::from_code(code).unwrap_or(NrtStatus::Failure);
    let msg = if status == NrtStatus::Closed {
        "called after nrt_close"
    } else {
        "called before nrt_init"
    };
    NrtError::new(status, msg)
}

fn global() -> Result<Arc<Global>, NrtError> {
    active().map_err(order)
}

fn null(what: &str) -> NrtError {
    NrtError::invalid(format!("{what} is NULL"))
}

/// A C string argument; NULL gives `None`.
unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string per the API contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// The `nrt_model_t` behind a handle.
#[derive(Debug)]
pub struct CModel {
    /// None once `nrt_close` unloaded it (the handle itself stays valid until `nrt_unload`).
    model: Mutex<Option<LoadedModel>>,
    /// Its logical core, readable while an execution holds the model.
    vnc: u32,
}

impl CModel {
    /// Execute once with Rust tensor sets; the execution is recorded in a running profile of
    /// this model and in a running system trace of its core.
    fn run(&self, ins: &TensorSet, outs: &TensorSet) -> Result<(), NrtError> {
        let host_start = systrace::now_ns();
        self.with(|lm| {
            let (_, spans) = lm.execute_spans(ins, outs)?;
            let host_end = systrace::now_ns();
            profile::record(self as *const CModel as usize, lm.model.name(), &spans);
            systrace::record(lm.vnc, lm.model.name(), host_start, host_end, &spans);
            Ok(())
        })
    }

    fn with<R>(
        &self,
        f: impl FnOnce(&mut LoadedModel) -> Result<R, NrtError>,
    ) -> Result<R, NrtError> {
        let mut g = self.model.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_mut() {
            Some(m) => f(m),
            None => Err(NrtError::new(
                NrtStatus::Closed,
                "the model was unloaded by nrt_close",
            )),
        }
    }
}

/// Live model handles, so `nrt_close` can unload what the application did not.
static MODELS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The `nrt_tensor_t` behind a handle.
#[derive(Debug)]
pub struct CTensor {
    t: Tensor,
}

/// The `nrt_tensor_set_t` behind a handle: names to tensor handles (tensors outlive the set).
#[derive(Debug, Default)]
pub struct CTensorSet {
    map: BTreeMap<String, *mut CTensor>,
}

impl CTensorSet {
    /// A Rust tensor set with clones of the live tensors.
    unsafe fn to_set(&self) -> TensorSet {
        let mut s = TensorSet::new();
        for (n, p) in &self.map {
            if !p.is_null() {
                // SAFETY: tensors added to a set must outlive it (API contract).
                s.add(n, unsafe { &**p }.t.clone());
            }
        }
        s
    }
}

// ------------------------------------------------------------------------------- status

static STATUS_STRINGS: &[(u32, &CStr)] = &[
    (0, c"NRT_SUCCESS"),
    (1, c"NRT_FAILURE"),
    (2, c"NRT_INVALID"),
    (3, c"NRT_INVALID_HANDLE"),
    (4, c"NRT_RESOURCE"),
    (5, c"NRT_TIMEOUT"),
    (6, c"NRT_HW_ERROR"),
    (7, c"NRT_QUEUE_FULL"),
    (9, c"NRT_LOAD_NOT_ENOUGH_NC"),
    (10, c"NRT_UNSUPPORTED_NEFF_VERSION"),
    (11, c"NRT_FAIL_HOST_MEM_ALLOC"),
    (13, c"NRT_UNINITIALIZED"),
    (14, c"NRT_CLOSED"),
    (15, c"NRT_QUEUE_EMPTY"),
    (101, c"NRT_EXEC_UNIT_UNRECOVERABLE"),
    (1002, c"NRT_EXEC_BAD_INPUT"),
    (1003, c"NRT_EXEC_COMPLETED_WITH_NUM_ERR"),
    (1004, c"NRT_EXEC_COMPLETED_WITH_ERR"),
    (1005, c"NRT_EXEC_NC_BUSY"),
    (1006, c"NRT_EXEC_OOB"),
    (1100, c"NRT_COLL_PENDING"),
    (1200, c"NRT_EXEC_HW_ERR_COLLECTIVES"),
    (1201, c"NRT_EXEC_HW_ERR_HBM_UE"),
    (1202, c"NRT_EXEC_HW_ERR_NC_UE"),
    (1203, c"NRT_EXEC_HW_ERR_DMA_ABORT"),
    (1204, c"NRT_EXEC_SW_NQ_OVERFLOW"),
    (1205, c"NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE"),
    (1206, c"NRT_NETWORK_PROXY_FAILURE"),
];

#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: u32) -> *const c_char {
    STATUS_STRINGS
        .iter()
        .find(|(c, _)| *c == status)
        .map_or(c"NRT_UNKNOWN_STATUS".as_ptr(), |(_, s)| s.as_ptr())
}

// ------------------------------------------------------------------------------- version, info

#[repr(C)]
#[derive(Debug)]
pub struct NrtVersion {
    pub rt_major: u64,
    pub rt_minor: u64,
    pub rt_patch: u64,
    pub rt_maintenance: u64,
    pub rt_detail: [c_char; 128],
    pub git_hash: [c_char; 64],
}

fn fill(dst: &mut [c_char], s: &str) {
    let n = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_version(ver: *mut NrtVersion, size: usize) -> u32 {
    guard("nrt_get_version", || {
        if ver.is_null() {
            return Err(null("ver"));
        }
        let mut v = NrtVersion {
            rt_major: 2,
            rt_minor: 0,
            rt_patch: 0,
            rt_maintenance: 0,
            rt_detail: [0; 128],
            git_hash: [0; 64],
        };
        fill(
            &mut v.rt_detail,
            concat!("neuron-emu libnrt ", env!("CARGO_PKG_VERSION")),
        );
        fill(&mut v.git_hash, "neuron-emu");
        let n = size.min(std::mem::size_of::<NrtVersion>());
        // SAFETY: the caller provides `size` writable bytes at `ver`; we write at most that.
        unsafe {
            std::ptr::copy_nonoverlapping(&v as *const NrtVersion as *const u8, ver as *mut u8, n)
        };
        Ok(())
    })
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtInstanceInfo {
    pub family: u32,
    pub size: u32,
    pub arch_name: [c_char; 16],
    pub device_revision: [c_char; 8],
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_instance_info(info: *mut NrtInstanceInfo, len: usize) -> u32 {
    guard("nrt_get_instance_info", || {
        let g = global()?;
        if info.is_null() || len < std::mem::size_of::<NrtInstanceInfo>() {
            return Err(NrtError::invalid("info is NULL or too small"));
        }
        use neuron_abi::arch::Arch;
        let arch = g.nrt.arch();
        let family = match arch {
            Arch::V2Trn1 => 2,
            Arch::V2Inf2 => 4,
            Arch::V3Trn2 => 5,
        };
        let mut v = NrtInstanceInfo {
            family,
            size: 9,
            arch_name: [0; 16],
            device_revision: [0; 8],
        };
        fill(&mut v.arch_name, arch.name());
        fill(&mut v.device_revision, "0");
        // SAFETY: checked non-null and large enough above.
        unsafe { info.write(v) };
        Ok(())
    })
}

// ------------------------------------------------------------------------------- init / close

#[no_mangle]
pub unsafe extern "C" fn nrt_init(
    framework: u32,
    fw_version: *const c_char,
    fal_version: *const c_char,
) -> u32 {
    guard("nrt_init", || {
        let mut st = state();
        if matches!(*st, State::Active(_)) {
            return Err(NrtError::new(
                NrtStatus::Failure,
                "nrt_init called twice without nrt_close",
            ));
        }
        if framework > 5 {
            return Err(NrtError::invalid(format!(
                "unknown framework type {framework}"
            )));
        }
        // SAFETY: optional C strings, only logged.
        let (fw, fal) = unsafe {
            (
                opt_str(fw_version).unwrap_or(""),
                opt_str(fal_version).unwrap_or(""),
            )
        };
        tracing::debug!(target: "NRT", "nrt_init framework {framework} fw_version {fw:?} fal_version {fal:?}");
        // Every setting is checked before any device is touched.
        let mut config = Config::from_env_checked()?;
        if let Some(u) = POOL_UCODE.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            config.pool_ucode = Some(u);
        }
        let provider = device::select()?;
        let nrt = Nrt::init(&*provider, config)?;
        *st = State::Active(Arc::new(Global { nrt, provider }));
        Ok(())
    })
}

/// `nrt_ucode_img` (`nrt_experimental.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NrtUcodeImg {
    pub bin: *const u8,
    pub size: usize,
}

/// `nrt_ucode_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NrtUcodeInfo {
    pub iram: NrtUcodeImg,
    pub dram: NrtUcodeImg,
}

/// The GpSimd images `nrt_set_pool_eng_ucode` set, used by every later `nrt_init`.
static POOL_UCODE: Mutex<Option<Arc<neuron_runtime::firmware::PoolUcode>>> = Mutex::new(None);

/// A C image as bytes: null is only allowed for an empty image.
///
/// # Safety
/// A non-null `bin` points to `size` readable bytes.
unsafe fn ucode_bytes<'a>(what: &str, img: NrtUcodeImg) -> Result<&'a [u8], NrtError> {
    if img.size == 0 {
        return Ok(&[]);
    }
    if img.bin.is_null() {
        return Err(NrtError::invalid(format!(
            "{what}.bin is NULL with size {}",
            img.size
        )));
    }
    // SAFETY: non-null, and the caller vouches for `size` bytes.
    Ok(unsafe { std::slice::from_raw_parts(img.bin, img.size) })
}

/// Override the GpSimd (pool engine) microcode: before `nrt_init` only (after it:
/// `NRT_INVALID`, the images already being on the cores). The images are copied.
#[no_mangle]
pub unsafe extern "C" fn nrt_set_pool_eng_ucode(ucode_info: *const NrtUcodeInfo) -> u32 {
    guard("nrt_set_pool_eng_ucode", || {
        if matches!(*state(), State::Active(_)) {
            return Err(NrtError::invalid(
                "must be called before nrt_init (the GpSimd microcode is already staged)",
            ));
        }
        if ucode_info.is_null() {
            return Err(null("ucode_info"));
        }
        // SAFETY: checked non-null; the caller passes a valid nrt_ucode_info.
        let info = unsafe { ucode_info.read() };
        // SAFETY: each image's bin/size pair comes from the caller as documented.
        let (iram, dram) = unsafe {
            (
                ucode_bytes("iram", info.iram)?,
                ucode_bytes("dram", info.dram)?,
            )
        };
        let u = neuron_runtime::firmware::PoolUcode::from_images(iram, dram)?;
        tracing::info!(target: "NRT", "nrt_set_pool_eng_ucode: {}", u.describe());
        *POOL_UCODE.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(u));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn nrt_close() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let mut st = state();
        if matches!(*st, State::Active(_)) {
            // Let the async queues finish what was submitted and stop their workers.
            async_api::shutdown();
            systrace::reset();
            // Unload every model still loaded (their handles stay valid for nrt_unload), then
            // release the cores.
            for p in MODELS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                // SAFETY: registered handles are live until nrt_unload removes them.
                let m = unsafe { &*(*p as *const CModel) };
                m.model.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            *st = State::Closed;
        }
    }));
}

/// Logical NeuronCores of all devices: physical cores / `NEURON_LOGICAL_NC_CONFIG` (LNC=2 by
/// default on trn2: 4 per device), as `nrt_get_total_nc_count` reports them.
fn total_cores() -> Result<u32, NrtError> {
    if let Ok(g) = active() {
        return Ok(g.provider.device_count() * g.nrt.arch().nc_count() / g.nrt.lnc());
    }
    let p = device::select()?;
    let dev = p
        .open(0, true)
        .map_err(|e| NrtError::new(NrtStatus::Failure, format!("cannot open /dev/neuron0: {e}")))?;
    let info = neuron_runtime::drv::Driver::new(dev)
        .basic_info()
        .map_err(|e| NrtError::new(NrtStatus::Failure, format!("DEVICE_BASIC_INFO: {e}")))?;
    let arch = match info.architecture {
        2 => neuron_abi::arch::Arch::V2Trn1,
        _ => neuron_abi::arch::Arch::V3Trn2,
    };
    let lnc = neuron_runtime::api::lnc_from_env(arch)?;
    Ok(p.device_count() * arch.nc_count() / lnc)
}

unsafe fn put_u32(p: *mut u32, v: u32) -> Result<(), NrtError> {
    if p.is_null() {
        return Err(null("output pointer"));
    }
    // SAFETY: checked non-null; the caller provides a writable u32.
    unsafe { p.write(v) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_vnc_count(count: *mut u32) -> u32 {
    // SAFETY: `count` is checked by put_u32.
    guard("nrt_get_total_vnc_count", || unsafe {
        put_u32(count, total_cores()?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_total_nc_count(count: *mut u32) -> u32 {
    // SAFETY: forwarded.
    unsafe { nrt_get_total_vnc_count(count) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_vnc_count(count: *mut u32) -> u32 {
    guard("nrt_get_visible_vnc_count", || {
        let n = match active() {
            Ok(g) => g.nrt.visible_vnc_count(),
            Err(_) => {
                let total = total_cores()?;
                match core_request_from_env(total)? {
                    CoreRequest::Range(a, b) => (b - a + 1).min(total),
                    CoreRequest::Count(n) => n.min(total),
                }
            }
        };
        // SAFETY: checked by put_u32.
        unsafe { put_u32(count, n) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_visible_nc_count(count: *mut u32) -> u32 {
    // SAFETY: forwarded.
    unsafe { nrt_get_visible_vnc_count(count) }
}

// ------------------------------------------------------------------------------- models

#[no_mangle]
pub unsafe extern "C" fn nrt_load(
    neff: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    model: *mut *mut CModel,
) -> u32 {
    guard("nrt_load", || {
        let g = global()?;
        if neff.is_null() || model.is_null() {
            return Err(null("neff_bytes or model"));
        }
        if vnc_count != -1 && vnc_count != 1 {
            return Err(NrtError::invalid(format!(
                "vnc_count is deprecated. only use -1. (got {vnc_count})"
            )));
        }
        // SAFETY: the caller passes `size` readable bytes at `neff`.
        let bytes = unsafe { std::slice::from_raw_parts(neff as *const u8, size) };
        let m = g.nrt.load(bytes, vnc)?;
        // SAFETY: checked non-null.
        unsafe {
            model.write(Box::into_raw(Box::new(CModel {
                vnc: m.vnc,
                model: Mutex::new(Some(m)),
            })))
        };
        // SAFETY: the handle was just written above.
        MODELS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(unsafe { model.read() } as usize);
        Ok(())
    })
}

/// `nrt_load_collectives`: one rank of a collectives group. This runtime models a single node
/// without collective operations, so the model loads as by `nrt_load`; the rank arguments are
/// checked (`ctx_device_id` < `ctx_device_count`).
#[no_mangle]
pub unsafe extern "C" fn nrt_load_collectives(
    neff: *const c_void,
    size: usize,
    vnc: i32,
    vnc_count: i32,
    ctx_device_id: u32,
    ctx_device_count: u32,
    model: *mut *mut CModel,
) -> u32 {
    if ctx_device_count == 0 || ctx_device_id >= ctx_device_count {
        return guard("nrt_load_collectives", || {
            global()?;
            Err(NrtError::invalid(format!(
                "g_device_id {ctx_device_id} is not below g_device_count {ctx_device_count}"
            )))
        });
    }
    tracing::debug!(target: "NRT", "nrt_load_collectives rank {ctx_device_id} of {ctx_device_count}: loaded as a single-rank model");
    // SAFETY: forwarded with the caller's pointers.
    unsafe { nrt_load(neff, size, vnc, vnc_count, model) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_unload(model: *mut CModel) -> u32 {
    guard("nrt_unload", || {
        if model.is_null() {
            return Err(null("model"));
        }
        let mut live = MODELS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = live.iter().position(|p| *p == model as usize) else {
            return Err(NrtError::invalid("not a loaded model (unloaded twice?)"));
        };
        live.remove(pos);
        drop(live);
        profile::forget(model as usize);
        // SAFETY: a handle from nrt_load that is still registered, freed exactly once here.
        drop(unsafe { Box::from_raw(model) });
        // After nrt_close the model was already unloaded; the handle is freed all the same.
        global().map(|_| ())
    })
}

unsafe fn model_ref<'a>(m: *const CModel) -> Result<&'a CModel, NrtError> {
    // SAFETY: a live handle from nrt_load (API contract), checked non-null.
    unsafe { m.as_ref() }.ok_or_else(|| null("model"))
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_vnc_count(model: *const CModel, count: *mut u32) -> u32 {
    guard("nrt_get_model_vnc_count", || {
        global()?;
        // SAFETY: checked helpers.
        unsafe {
            model_ref(model)?;
            put_u32(count, 1)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_nc_count(model: *const CModel, count: *mut u32) -> u32 {
    // SAFETY: forwarded.
    unsafe { nrt_get_model_vnc_count(model, count) }
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtTensorInfo {
    pub name: [c_char; 256],
    pub usage: u32,
    pub size: usize,
    pub dtype: u32,
    pub shape: *mut u32,
    pub ndim: u32,
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_tensor_info(
    model: *mut CModel,
    out: *mut *mut c_void,
) -> u32 {
    guard("nrt_get_model_tensor_info", || {
        global()?;
        // SAFETY: checked helper.
        let m = unsafe { model_ref(model)? };
        if out.is_null() {
            return Err(null("tensor_info"));
        }
        let list: Vec<(u32, neuron_runtime::TensorInfo)> = m.with(|lm| {
            let mut l: Vec<_> = lm.model.inputs().map(|t| (0, t.clone())).collect();
            l.extend(lm.model.outputs().map(|t| (1, t.clone())));
            Ok(l)
        })?;
        // One block: the header, the entries, then every shape array.
        let entry = std::mem::size_of::<NrtTensorInfo>();
        let shapes: usize = list.iter().map(|(_, t)| t.shape.len()).sum();
        let total = 8 + list.len() * entry + shapes * 4;
        // SAFETY: plain allocation, zero-filled; freed by nrt_free_model_tensor_info.
        let base = unsafe { libc::calloc(1, total.max(8)) } as *mut u8;
        if base.is_null() {
            return Err(NrtError::new(NrtStatus::Resource, "out of host memory"));
        }
        // SAFETY: all writes below stay inside the `total` bytes just allocated; the block is
        // 16-byte aligned (malloc), entries start at 8 with 8-byte alignment.
        unsafe {
            (base as *mut u64).write(list.len() as u64);
            let mut shape_at = base.add(8 + list.len() * entry) as *mut u32;
            for (i, (usage, t)) in list.iter().enumerate() {
                let mut e = NrtTensorInfo {
                    name: [0; 256],
                    usage: *usage,
                    size: t.size as usize,
                    dtype: t.dtype.code() as u32,
                    shape: shape_at,
                    ndim: t.shape.len() as u32,
                };
                fill(&mut e.name, &t.name);
                for (k, d) in t.shape.iter().enumerate() {
                    shape_at.add(k).write(*d as u32);
                }
                shape_at = shape_at.add(t.shape.len());
                (base.add(8 + i * entry) as *mut NrtTensorInfo).write(e);
            }
            out.write(base as *mut c_void);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_free_model_tensor_info(info: *mut c_void) -> u32 {
    guard("nrt_free_model_tensor_info", || {
        if info.is_null() {
            return Err(null("tensor_info"));
        }
        // SAFETY: a block from nrt_get_model_tensor_info (calloc), freed once.
        unsafe { libc::free(info) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_info(
    model: *const CModel,
    info: *mut u32,
    size_in: usize,
    size_out: *mut usize,
) -> u32 {
    guard("nrt_get_model_info", || {
        global()?;
        // SAFETY: checked helper.
        let m = unsafe { model_ref(model)? };
        if info.is_null() {
            return Err(null("info"));
        }
        let vnc = m.with(|lm| Ok(lm.vnc))?;
        if size_in >= 4 {
            // SAFETY: the caller provides `size_in` >= 4 writable bytes.
            unsafe { info.write(vnc) };
        }
        if !size_out.is_null() {
            // SAFETY: checked non-null.
            unsafe { size_out.write(4) };
        }
        Ok(())
    })
}

// ------------------------------------------------------------------------------- tensor sets

#[no_mangle]
pub unsafe extern "C" fn nrt_allocate_tensor_set(result: *mut *mut CTensorSet) -> u32 {
    guard("nrt_allocate_tensor_set", || {
        global()?;
        if result.is_null() {
            return Err(null("result"));
        }
        // SAFETY: checked non-null.
        unsafe { result.write(Box::into_raw(Box::default())) };
        Ok(())
    })
}

/// Free the boxed handle `*pp` (if any) and clear it; NULL `pp` is ignored.
///
/// # Safety
/// `pp` is NULL or points to NULL or to a pointer this library produced with `Box::into_raw`.
unsafe fn free_handle<T>(pp: *mut *mut T) {
    if pp.is_null() {
        return;
    }
    // SAFETY: per the contract above; the handle is cleared so a second free is a no-op.
    unsafe {
        let p = pp.read();
        if !p.is_null() {
            drop(Box::from_raw(p));
        }
        pp.write(std::ptr::null_mut());
    }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_destroy_tensor_set(set: *mut *mut CTensorSet) {
    // SAFETY: the caller passes NULL or a pointer to a handle from nrt_allocate_tensor_set.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { free_handle(set) }));
}

#[no_mangle]
pub unsafe extern "C" fn nrt_add_tensor_to_tensor_set(
    set: *mut CTensorSet,
    name: *const c_char,
    tensor: *mut CTensor,
) -> u32 {
    guard("nrt_add_tensor_to_tensor_set", || {
        global()?;
        // SAFETY: handles per API contract, checked non-null.
        let (s, n) = unsafe {
            (
                set.as_mut().ok_or_else(|| null("tensor_set"))?,
                opt_str(name).ok_or_else(|| null("tensor_name"))?,
            )
        };
        if tensor.is_null() {
            return Err(null("tensor"));
        }
        s.map.insert(n.to_string(), tensor);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_tensor_from_tensor_set(
    set: *mut CTensorSet,
    name: *const c_char,
    tensor: *mut *mut CTensor,
) -> u32 {
    guard("nrt_get_tensor_from_tensor_set", || {
        global()?;
        // SAFETY: handles per API contract, checked non-null.
        let (s, n) = unsafe {
            (
                set.as_ref().ok_or_else(|| null("tensor_set"))?,
                opt_str(name).ok_or_else(|| null("tensor_name"))?,
            )
        };
        if tensor.is_null() {
            return Err(null("tensor"));
        }
        let t = *s.map.get(n).ok_or_else(|| {
            NrtError::new(
                NrtStatus::Failure,
                format!("tensor '{n}' is not in the set"),
            )
        })?;
        // SAFETY: checked non-null.
        unsafe { tensor.write(t) };
        Ok(())
    })
}

// ------------------------------------------------------------------------------- execute

#[no_mangle]
pub unsafe extern "C" fn nrt_execute(
    model: *mut CModel,
    inputs: *const CTensorSet,
    outputs: *mut CTensorSet,
) -> u32 {
    // SAFETY: forwarded.
    unsafe { execute("nrt_execute", model, inputs, outputs, 1) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_execute_repeat(
    model: *mut CModel,
    inputs: *const CTensorSet,
    outputs: *mut CTensorSet,
    repeat: c_int,
) -> u32 {
    // SAFETY: forwarded.
    unsafe { execute("nrt_execute_repeat", model, inputs, outputs, repeat) }
}

unsafe fn execute(
    func: &str,
    model: *mut CModel,
    inputs: *const CTensorSet,
    outputs: *mut CTensorSet,
    repeat: c_int,
) -> u32 {
    guard(func, || {
        global()?;
        // SAFETY: handles per API contract, checked non-null.
        let (m, i, o) = unsafe {
            (
                model_ref(model)?,
                inputs.as_ref().ok_or_else(|| null("input_set"))?,
                outputs.as_ref().ok_or_else(|| null("output_set"))?,
            )
        };
        if repeat < 1 {
            return Err(NrtError::invalid(format!("repeat_count {repeat} < 1")));
        }
        // SAFETY: tensors in the sets are live handles (API contract).
        let (mut ins, outs) = unsafe { (i.to_set(), o.to_set()) };
        let names: Vec<String> =
            m.with(|lm| Ok(lm.model.inputs().map(|t| t.name.clone()).collect()))?;
        for r in 0..repeat {
            m.run(&ins, &outs)?;
            // Run n-1's outputs feed run n's inputs of the same name.
            if r + 1 < repeat {
                for name in &names {
                    if let Some(t) = outs.get(name) {
                        ins.add(name, t.clone());
                    }
                }
            }
        }
        Ok(())
    })
}

// ------------------------------------------------------------------------------- tensors

unsafe fn tensor_ref<'a>(t: *const CTensor) -> Result<&'a CTensor, NrtError> {
    // SAFETY: a live handle from nrt_tensor_allocate* (API contract), checked non-null.
    unsafe { t.as_ref() }.ok_or_else(|| null("tensor"))
}

unsafe fn new_tensor(out: *mut *mut CTensor, t: Tensor) -> Result<(), NrtError> {
    if out.is_null() {
        return Err(null("tensor"));
    }
    // SAFETY: checked non-null.
    unsafe { out.write(Box::into_raw(Box::new(CTensor { t }))) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate(
    placement: u32,
    vnc: c_int,
    size: usize,
    name: *const c_char,
    tensor: *mut *mut CTensor,
) -> u32 {
    guard("nrt_tensor_allocate", || {
        let g = global()?;
        let p = Placement::from_code(placement)
            .ok_or_else(|| NrtError::invalid(format!("unknown tensor placement {placement}")))?;
        // SAFETY: optional C string.
        let n = unsafe { opt_str(name) }.unwrap_or("");
        let t = g.nrt.tensor_allocate(p, vnc, size as u64, n)?;
        let mapped = p == Placement::Device && t.va().is_some();
        // SAFETY: checked inside.
        unsafe { new_tensor(tensor, t)? };
        if mapped {
            // SAFETY: written just above.
            mapped_tensors().push(unsafe { tensor.read() } as usize);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_free(tensor: *mut *mut CTensor) {
    // SAFETY: the caller passes NULL or a pointer to a handle from nrt_tensor_allocate*.
    let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
        if !tensor.is_null() {
            let h = tensor.read() as usize;
            mapped_tensors().retain(|p| *p != h);
        }
        free_handle(tensor)
    }));
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read(
    tensor: *const CTensor,
    buf: *mut c_void,
    offset: usize,
    size: usize,
) -> u32 {
    guard("nrt_tensor_read", || {
        global()?;
        // SAFETY: checked helper; `buf` has `size` writable bytes per API contract.
        let t = unsafe { tensor_ref(tensor)? };
        if buf.is_null() && size > 0 {
            return Err(null("buf"));
        }
        if size > isize::MAX as usize {
            return Err(NrtError::invalid(format!("size {size} is too large")));
        }
        let out = if size == 0 {
            &mut [][..]
        } else {
            // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) }
        };
        t.t.read(out, offset as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write(
    tensor: *mut CTensor,
    buf: *const c_void,
    offset: usize,
    size: usize,
) -> u32 {
    guard("nrt_tensor_write", || {
        global()?;
        // SAFETY: checked helper; `buf` has `size` readable bytes per API contract.
        let t = unsafe { tensor_ref(tensor)? };
        if buf.is_null() && size > 0 {
            return Err(null("buf"));
        }
        if size > isize::MAX as usize {
            return Err(NrtError::invalid(format!("size {size} is too large")));
        }
        let data = if size == 0 {
            &[][..]
        } else {
            // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
            unsafe { std::slice::from_raw_parts(buf as *const u8, size) }
        };
        t.t.write(data, offset as u64)
    })
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtTensorBatchOp {
    pub offset: u64,
    pub size: u64,
    pub buffer: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtTensorBatch {
    pub tensor: *const CTensor,
    pub ops: *const NrtTensorBatchOp,
    pub num_ops: u32,
}

unsafe fn batch(func: &str, batches: *const NrtTensorBatch, n: u64, write: bool) -> u32 {
    guard(func, || {
        global()?;
        if batches.is_null() && n > 0 {
            return Err(null("batches"));
        }
        for b in 0..n as usize {
            // SAFETY: `n` batches of `num_ops` ops each, per API contract.
            let bt = unsafe { &*batches.add(b) };
            let t = unsafe { tensor_ref(bt.tensor)? };
            if bt.ops.is_null() && bt.num_ops > 0 {
                return Err(null("ops"));
            }
            for k in 0..bt.num_ops as usize {
                // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
                let op = unsafe { &*bt.ops.add(k) };
                if op.buffer.is_null() && op.size > 0 {
                    return Err(null("op buffer"));
                }
                if op.size == 0 {
                    continue;
                }
                if write {
                    // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
                    let d = unsafe {
                        std::slice::from_raw_parts(op.buffer as *const u8, op.size as usize)
                    };
                    t.t.write(d, op.offset)?;
                } else {
                    // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
                    let d = unsafe {
                        std::slice::from_raw_parts_mut(op.buffer as *mut u8, op.size as usize)
                    };
                    t.t.read(d, op.offset)?;
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read_batch(
    batches: *const NrtTensorBatch,
    num_batches: u64,
    _unsafe: bool,
) -> u32 {
    // SAFETY: forwarded.
    unsafe { batch("nrt_tensor_read_batch", batches, num_batches, false) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write_batch(
    batches: *const NrtTensorBatch,
    num_batches: u64,
    _unsafe: bool,
) -> u32 {
    // SAFETY: forwarded.
    unsafe { batch("nrt_tensor_write_batch", batches, num_batches, true) }
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_copy(
    src: *const CTensor,
    src_offset: usize,
    dst: *mut CTensor,
    dst_offset: usize,
    size: usize,
) -> u32 {
    guard("nrt_tensor_copy", || {
        global()?;
        // SAFETY: checked helpers.
        let (s, d) = unsafe { (tensor_ref(src)?, tensor_ref(dst)?) };
        Tensor::copy(
            &s.t,
            src_offset as u64,
            &d.t,
            dst_offset as u64,
            size as u64,
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_size(tensor: *const CTensor) -> usize {
    // SAFETY: a live handle or NULL.
    catch_unwind(AssertUnwindSafe(|| {
        unsafe { tensor.as_ref() }.map_or(0, |t| t.t.size() as usize)
    }))
    .unwrap_or(0)
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_memset(
    tensor: *mut CTensor,
    offset: u64,
    value: c_int,
    size: usize,
) -> u32 {
    guard("nrt_tensor_memset", || {
        global()?;
        // SAFETY: checked helper.
        let t = unsafe { tensor_ref(tensor)? };
        t.t.memset(offset, value as u8, size as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_empty(
    name: *const c_char,
    tensor: *mut *mut CTensor,
) -> u32 {
    guard("nrt_tensor_allocate_empty", || {
        global()?;
        // SAFETY: optional C string; output checked inside new_tensor.
        unsafe { new_tensor(tensor, Tensor::empty(opt_str(name).unwrap_or(""))) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_attach_buffer(
    tensor: *mut CTensor,
    buffer: *mut c_void,
    size: usize,
) -> u32 {
    guard("nrt_tensor_attach_buffer", || {
        global()?;
        // SAFETY: a live handle; the caller keeps `buffer` valid while the tensor uses it.
        let t = unsafe { tensor.as_mut() }.ok_or_else(|| null("tensor"))?;
        unsafe { t.t.attach_buffer(buffer as *mut u8, size) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_slice(
    src: *const CTensor,
    offset: usize,
    size: usize,
    name: *const c_char,
    slice: *mut *mut CTensor,
) -> u32 {
    guard("nrt_tensor_allocate_slice", || {
        global()?;
        // SAFETY: checked helpers.
        let s = unsafe { tensor_ref(src)? };
        let t = s.t.slice(
            offset as u64,
            size as u64,
            // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
            unsafe { opt_str(name) }.unwrap_or(""),
        )?;
        // SAFETY: a live handle or caller buffer per the nrt.h contract (pointer and size checked above).
        unsafe { new_tensor(slice, t) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_va(tensor: *const CTensor) -> *mut c_void {
    // SAFETY: a live handle or NULL.
    catch_unwind(AssertUnwindSafe(|| {
        unsafe { tensor.as_ref() }
            .and_then(|t| t.t.va())
            .map_or(std::ptr::null_mut(), |p| p as *mut c_void)
    }))
    .unwrap_or(std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_lnc_index(
    tensor: *const CTensor,
    lnc_idx: *mut c_int,
) -> u32 {
    guard("nrt_tensor_get_lnc_index", || {
        global()?;
        // SAFETY: checked helper.
        let t = unsafe { tensor_ref(tensor)? };
        if lnc_idx.is_null() {
            return Err(null("lnc_idx"));
        }
        // SAFETY: checked non-null.
        unsafe { lnc_idx.write(t.t.lnc() as c_int) };
        Ok(())
    })
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtTensorDeviceAllocationInfo {
    pub physical_address: u64,
    pub size: usize,
    pub hbm_index: c_int,
}

#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_device_allocation_info(
    tensor: *const CTensor,
    info: *mut NrtTensorDeviceAllocationInfo,
) -> u32 {
    guard("nrt_tensor_get_device_allocation_info", || {
        global()?;
        // SAFETY: checked helper.
        let t = unsafe { tensor_ref(tensor)? };
        if info.is_null() {
            return Err(null("alloc_info"));
        }
        let (pa, size, hbm) = t.t.device_allocation().ok_or_else(|| {
            NrtError::invalid(format!("tensor '{}' is not a DEVICE tensor", t.t.name))
        })?;
        // SAFETY: checked non-null.
        unsafe {
            info.write(NrtTensorDeviceAllocationInfo {
                physical_address: pa,
                size: size as usize,
                hbm_index: hbm,
            })
        };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_instance_count(
    model: *const CModel,
    count: *mut u32,
) -> u32 {
    guard("nrt_get_model_instance_count", || {
        global()?;
        // SAFETY: checked helpers.
        unsafe {
            model_ref(model)?;
            put_u32(count, 1)
        }
    })
}

/// Live tensor handles with a device mapping, for `nrt_memcpy_to_device`.
fn mapped_tensors() -> std::sync::MutexGuard<'static, Vec<usize>> {
    static MAPPED: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    MAPPED.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn nrt_memcpy_to_device(
    dest: *mut c_void,
    src: *const c_void,
    size: usize,
) -> u32 {
    guard("nrt_memcpy_to_device", || {
        global()?;
        if dest.is_null() || (src.is_null() && size > 0) {
            return Err(null("dest or src"));
        }
        if size > isize::MAX as usize {
            return Err(NrtError::invalid(format!("size {size} is too large")));
        }
        let data = if size == 0 {
            &[][..]
        } else {
            // SAFETY: the caller passes `size` readable bytes at `src`.
            unsafe { std::slice::from_raw_parts(src as *const u8, size) }
        };
        for h in mapped_tensors().iter() {
            // SAFETY: registered handles are live until nrt_tensor_free removes them.
            let t = unsafe { &*(*h as *const CTensor) };
            if let Some(r) = t.t.write_at_va(dest as usize, data) {
                return r;
            }
        }
        Err(NrtError::invalid(
            "dest is not inside a mapped DEVICE tensor (allocate it with NEURON_RT_MAP_HBM=1)",
        ))
    })
}

#[repr(C)]
#[derive(Debug)]
pub struct NrtVncMemoryStats {
    pub bytes_used: usize,
    pub bytes_limit: usize,
}

#[no_mangle]
pub unsafe extern "C" fn nrt_get_vnc_memory_stats(
    vnc: u32,
    stats: *mut NrtVncMemoryStats,
    size_in: usize,
    size_out: *mut usize,
) -> u32 {
    guard("nrt_get_vnc_memory_stats", || {
        let g = global()?;
        if stats.is_null() {
            return Err(null("stats"));
        }
        let (used, limit) = g.nrt.memory_stats(vnc)?;
        let v = NrtVncMemoryStats {
            bytes_used: used as usize,
            bytes_limit: limit as usize,
        };
        let n = size_in.min(std::mem::size_of::<NrtVncMemoryStats>());
        // SAFETY: the caller provides `size_in` writable bytes at `stats`.
        unsafe { std::ptr::copy_nonoverlapping(&v as *const _ as *const u8, stats as *mut u8, n) };
        if !size_out.is_null() {
            // SAFETY: checked non-null.
            unsafe { size_out.write(std::mem::size_of::<NrtVncMemoryStats>()) };
        }
        Ok(())
    })
}
