//! Device selection for the C library, decided once per `nrt_init` and logged once:
//!
//! | `NEURON_EMU` | `/dev/neuron*` present | devices used |
//! |---|---|---|
//! | `1` | either | the emulator's backend library (`libneuron_emu.so`), loaded with `dlopen` |
//! | unset or `0` | yes | the nodes, through real `open`/`ioctl`/`mmap` (the real driver, or the emulator's LD_PRELOAD shim) |
//! | unset or `0` | no | none: `nrt_init` fails with `NRT_FAILURE`, as on a machine without the driver |
//!
//! The library links no emulator: the embedded device is reached through the backend ABI
//! (`neuron_abi::backend`), whose functions carry the same ioctl bytes as the syscalls.
#![allow(unsafe_code)]

use neuron_abi::backend::{
    BackendEntry, BackendV1, BACKEND_LIBRARY, BACKEND_LIBRARY_ENV, BACKEND_SYMBOL, BACKEND_VERSION,
};
use neuron_abi::{DeviceFile, Errno};
use neuron_runtime::api::{DeviceProvider, SysProvider};
use neuron_runtime::{NrtError, NrtStatus};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The environment variable choosing the embedded emulated device.
pub const NEURON_EMU_ENV: &str = "NEURON_EMU";

/// A loaded backend library: its function table and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Backend {
    table: &'static BackendV1,
}

impl Backend {
    /// Load the backend: `NEURON_EMU_LIB` if set, else one already in the process (preloaded
    /// or linked), else `libneuron_emu.so` beside this library (or beside the executable, or
    /// one directory up from it, as cargo lays out test binaries), else by the dynamic
    /// linker's search path. Returns the backend and the place it was found.
    pub fn load() -> Result<(Backend, String), String> {
        if let Ok(p) = std::env::var(BACKEND_LIBRARY_ENV) {
            if p.trim().is_empty() {
                return Err(format!("{BACKEND_LIBRARY_ENV} is set but empty"));
            }
            return open_library(Path::new(&p)).map(|b| (b, p));
        }
        // SAFETY: RTLD_DEFAULT lookup of a NUL-terminated name.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol_name().as_ptr()) };
        if !sym.is_null() {
            return from_entry(sym).map(|b| (b, "already loaded in the process".into()));
        }
        let mut tried = Vec::new();
        for dir in candidate_dirs() {
            let p = dir.join(BACKEND_LIBRARY);
            if p.exists() {
                return open_library(&p).map(|b| (b, p.display().to_string()));
            }
            tried.push(dir.display().to_string());
        }
        open_library(Path::new(BACKEND_LIBRARY))
            .map(|b| (b, format!("{BACKEND_LIBRARY} (library search path)")))
            .map_err(|e| {
                format!(
                    "{e}; also looked in {}; set {BACKEND_LIBRARY_ENV} to its path",
                    tried.join(", ")
                )
            })
    }

    pub fn device_count(&self) -> u32 {
        // SAFETY: a function of a validated table.
        unsafe { (self.table.device_count)() }
    }

    pub fn describe(&self) -> String {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` has `buf.len()` writable bytes.
        let n = unsafe { (self.table.describe)(buf.as_mut_ptr(), buf.len()) };
        buf.truncate(n.min(buf.len() - 1));
        String::from_utf8_lossy(&buf).into_owned()
    }
}

fn symbol_name() -> CString {
    CString::new(BACKEND_SYMBOL).unwrap_or_default()
}

fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut info: libc::Dl_info = empty_dl_info();
    // SAFETY: dladdr fills `info` for an address inside a loaded object (this function).
    let ok = unsafe { libc::dladdr(candidate_dirs as *const libc::c_void, &mut info) };
    if ok != 0 && !info.dli_fname.is_null() {
        // SAFETY: dladdr returns a NUL-terminated path owned by the loader.
        let me = unsafe { CStr::from_ptr(info.dli_fname) };
        if let Some(d) = Path::new(&*me.to_string_lossy()).parent() {
            dirs.push(d.to_path_buf());
        }
    }
    if let Some(d) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        dirs.push(d.to_path_buf());
        if let Some(up) = d.parent() {
            dirs.push(up.to_path_buf());
        }
    }
    dirs.dedup();
    dirs
}

fn empty_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    }
}

fn open_library(path: &Path) -> Result<Backend, String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))?;
    // The library stays loaded for the life of the process (its table is 'static).
    // SAFETY: dlopen of a NUL-terminated path.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(format!("cannot load {}: {}", path.display(), dl_error()));
    }
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let sym = unsafe { libc::dlsym(h, symbol_name().as_ptr()) };
    if sym.is_null() {
        return Err(format!(
            "{} does not export {BACKEND_SYMBOL}: not a neuron-emu backend",
            path.display()
        ));
    }
    from_entry(sym)
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn from_entry(sym: *mut libc::c_void) -> Result<Backend, String> {
    // SAFETY: the symbol is the backend's entry point, whose type BackendEntry is part of the
    // backend ABI.
    let ptr = unsafe {
        let entry: BackendEntry = std::mem::transmute::<*mut libc::c_void, BackendEntry>(sym);
        entry()
    };
    if ptr.is_null() {
        return Err("the backend returned no function table".into());
    }
    // Every version of the table starts with (version: u32, size: u32): read those two words
    // before taking the table as this version's, which may be larger than what is there.
    // SAFETY: a non-null table pointer of any version has at least these 8 bytes.
    let (version, size) = unsafe {
        let words = ptr.cast::<u32>();
        (std::ptr::read(words), std::ptr::read(words.add(1)))
    };
    if version != BACKEND_VERSION || size as usize != std::mem::size_of::<BackendV1>() {
        return Err(format!(
            "backend ABI version {version} (table {size} bytes), this library speaks version {BACKEND_VERSION} ({} bytes)",
            std::mem::size_of::<BackendV1>()
        ));
    }
    // SAFETY: version and size match this table; it is static data of a library that is never
    // unloaded.
    let table = unsafe { &*ptr };
    Ok(Backend { table })
}

/// Devices of a loaded backend.
#[derive(Debug)]
pub struct BackendProvider {
    backend: Backend,
    origin: String,
}

impl DeviceProvider for BackendProvider {
    fn device_count(&self) -> u32 {
        self.backend.device_count()
    }
    fn open(&self, index: u32, write_only: bool) -> Result<Arc<dyn DeviceFile>, Errno> {
        // SAFETY: a function of a validated table.
        let h =
            unsafe { (self.backend.table.open)(index, i32::from(write_only), std::process::id()) };
        if h <= 0 {
            return Err(errno_of(h));
        }
        Ok(Arc::new(BackendFile {
            backend: self.backend,
            handle: h,
        }))
    }
    fn describe(&self) -> String {
        format!("{} (backend {})", self.backend.describe(), self.origin)
    }
}

/// One open device node of a backend.
#[derive(Debug)]
struct BackendFile {
    backend: Backend,
    handle: i64,
}

/// The errno of a failed backend call (−errno); anything out of range is EIO.
fn errno_of(r: i64) -> Errno {
    r.checked_neg()
        .and_then(|v| i32::try_from(v).ok())
        .filter(|v| *v > 0)
        .map_or(Errno::EIO, Errno)
}

impl DeviceFile for BackendFile {
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        // SAFETY: the caller upholds the seam's contract for `arg`; the backend validates it.
        let r = unsafe { (self.backend.table.ioctl)(self.handle, cmd, arg) };
        if r < 0 {
            Err(errno_of(r))
        } else {
            Ok(i32::try_from(r).unwrap_or(i32::MAX))
        }
    }

    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno> {
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` is a valid out slot.
        let r = unsafe { (self.backend.table.mmap)(self.handle, len, prot, offset, &mut p) };
        if r < 0 {
            Err(errno_of(i64::from(r)))
        } else if p.is_null() {
            Err(Errno::EIO)
        } else {
            Ok(p)
        }
    }

    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        // SAFETY: the backend checks the range is one it mapped for this handle.
        let r = unsafe { (self.backend.table.munmap)(self.handle, addr, len) };
        if r < 0 {
            Err(errno_of(i64::from(r)))
        } else {
            Ok(())
        }
    }
}

impl Drop for BackendFile {
    fn drop(&mut self) {
        // SAFETY: a handle this file owns, closed once.
        unsafe { (self.backend.table.close)(self.handle) };
    }
}

/// The last selection logged, so a choice is announced once (again only if it changes).
static ANNOUNCED: Mutex<Option<String>> = Mutex::new(None);

fn announce(line: String) {
    let mut a = ANNOUNCED.lock().unwrap_or_else(|e| e.into_inner());
    if a.as_deref() != Some(line.as_str()) {
        tracing::info!(target: "NRT", "{line}");
        *a = Some(line);
    }
}

/// Pick the device provider as the library does at `nrt_init` (table above).
pub fn select() -> Result<Box<dyn DeviceProvider>, NrtError> {
    let setting = std::env::var(NEURON_EMU_ENV).ok();
    match setting.as_deref().map(str::trim) {
        Some("1") => {
            let (backend, origin) = Backend::load().map_err(|e| {
                NrtError::new(
                    NrtStatus::Failure,
                    format!("NEURON_EMU=1: cannot load the emulated device: {e}"),
                )
            })?;
            if backend.device_count() == 0 {
                return Err(NrtError::new(
                    NrtStatus::Failure,
                    format!("NEURON_EMU=1: {}", backend.describe()),
                ));
            }
            let p = BackendProvider { backend, origin };
            announce(format!(
                "nrt_init NEURON_EMU=1: running on {}",
                p.describe()
            ));
            Ok(Box::new(p))
        }
        None | Some("0") | Some("") => {
            let n = SysProvider.device_count();
            if n == 0 {
                return Err(NrtError::new(
                    NrtStatus::Failure,
                    "no Neuron device found (no /dev/neuron*); set NEURON_EMU=1 to run on the emulated device, or preload libneuron_emu_preload.so",
                ));
            }
            announce(format!(
                "nrt_init running on /dev/neuron0..{} (the Neuron driver, or a preloaded emulator shim)",
                n - 1
            ));
            Ok(Box::new(SysProvider))
        }
        Some(other) => Err(NrtError::new(
            NrtStatus::Failure,
            format!("NEURON_EMU={other:?}: expected 0 or 1"),
        )),
    }
}
