//! `libneuron_emu_preload.so`: run unmodified programs against an emulated Neuron device.
//!
//! `LD_PRELOAD=libneuron_emu_preload.so program` interposes `open`, `open64`, `openat`,
//! `openat64`, `close`, `ioctl`, `mmap`, `mmap64`, `munmap`, `mprotect` and the `stat` family.
//! Emulated mappings are ordinary mappings of the emulator's memory: `munmap` of all or part
//! of one goes to the emulator's bookkeeping, `mprotect` passes through (a register-page view
//! stays read-only to the kernel; the emulator records whether stores are allowed). Paths
//! `/dev/neuron<N>` (N below `NEURON_EMU_DEVICES`, default 1) open files on an emulator living
//! in the same process (`NEURON_EMU_ARCH` = trn2 | trn1 | inf2, default trn2); every other path
//! and fd passes through to libc untouched. Each emulated fd is backed by a real fd on
//! `/dev/null`, so fd numbers stay unique and `close` works on them. With a daemon configured
//! (`NEURON_EMU_SOCKET`, or one on the well-known socket; `docs/daemon.md`) the files are the
//! daemon's, shared with other processes, and its hello gives the device count.
//!
//! Re-entrancy: the emulator itself allocates memory (which may call `mmap`/`munmap`) while the
//! shim holds its lock, so a thread-local flag sends every call made from inside the shim
//! straight to libc, and fds are checked against a lock-free bitmap before any lock is taken.
// Interposing libc is raw FFI by nature; every unsafe block has a SAFETY comment.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_ulong, c_void, mode_t, off_t, size_t};
use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::serve::Machine;
use neuron_emulator::Emulator;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Fds 0..4096 that are emulated (one bit each): checked without locking.
static FD_BITS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
/// Number of live emulated mapping pieces.
static MAPS: AtomicUsize = AtomicUsize::new(0);

struct Shim {
    emu: Machine,
    fds: Mutex<HashMap<c_int, Box<dyn DeviceFile>>>,
    /// Emulated mapping pieces: start -> (fd, length in whole pages).
    maps: Mutex<BTreeMap<usize, (c_int, usize)>>,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

fn fd_marked(fd: c_int) -> bool {
    (0..4096).contains(&fd)
        && FD_BITS[fd as usize / 64].load(Ordering::Acquire) & (1 << (fd % 64)) != 0
}

fn mark_fd(fd: c_int, on: bool) {
    if (0..4096).contains(&fd) {
        let bit = 1u64 << (fd % 64);
        if on {
            FD_BITS[fd as usize / 64].fetch_or(bit, Ordering::AcqRel);
        } else {
            FD_BITS[fd as usize / 64].fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

/// Run `f` with the re-entrancy flag set; `None` if the flag was already set (then the caller
/// must pass the call through to libc).
fn inside<R>(f: impl FnOnce() -> R) -> Option<R> {
    if IN_SHIM.with(|c| c.replace(true)) {
        return None;
    }
    // A panic must not unwind through an `extern "C"` frame (that aborts the process).
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    IN_SHIM.with(|c| c.set(false));
    r
}

fn shim() -> &'static Shim {
    SHIM.get_or_init(|| {
        // NEURON_EMU_ARCH / NEURON_EMU_DEVICES / NEURON_EMU_FAULTS, validated: a bad value is
        // reported once and leaves the process without emulated devices, never a silent default.
        // A daemon's machine when one is configured, else an in-process emulator.
        let emu = match Machine::from_env() {
            Ok(m) => m,
            Err(e) => {
                eprintln!("neuron-emu preload: {e}; no emulated /dev/neuron* in this process");
                Machine::Local(Emulator::new(Arch::V3Trn2, 0))
            }
        };
        Shim {
            emu,
            fds: Mutex::new(HashMap::new()),
            maps: Mutex::new(BTreeMap::new()),
        }
    })
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The device index of an emulated node path, if `path` is one.
fn device_index(path: &CStr) -> Option<usize> {
    let s = path.to_str().ok()?;
    let n: usize = s.strip_prefix("/dev/neuron")?.parse().ok()?;
    (n < shim().emu.device_count()).then_some(n)
}

macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static P: OnceLock<usize> = OnceLock::new();
        let p = *P.get_or_init(|| {
            // SAFETY: looking up the next definition of a libc symbol by its NUL-terminated name.
            unsafe {
                libc::dlsym(
                    libc::RTLD_NEXT,
                    concat!($name, "\0").as_ptr() as *const c_char,
                ) as usize
            }
        });
        // SAFETY: `p` is the address of the libc function with this exact signature.
        unsafe { std::mem::transmute::<usize, $ty>(p) }
    }};
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, mode_t) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, mode_t) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, size_t) -> c_int;
type MprotectFn = unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int;
type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
type StatxFn =
    unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int;
type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;

#[macro_use]
mod sysfs;

/// Open an emulated node: a placeholder fd on /dev/null carries the number.
fn open_emulated(index: usize, flags: c_int) -> c_int {
    inside(|| {
        let s = shim();
        let write_only = flags & libc::O_ACCMODE == libc::O_WRONLY;
        let file = match s.emu.open(index, write_only, std::process::id()) {
            Ok(f) => f,
            Err(e) => {
                set_errno(e.0);
                return -1;
            }
        };
        let open = real!("open", OpenFn);
        // SAFETY: a valid NUL-terminated path.
        let fd = unsafe {
            open(
                c"/dev/null".as_ptr(),
                libc::O_RDWR | (flags & libc::O_CLOEXEC),
                0,
            )
        };
        if fd < 0 {
            return -1;
        }
        if fd >= 4096 {
            // The lock-free fd bitmap covers fds 0..4096 only.
            let close = real!("close", CloseFn);
            // SAFETY: closing the placeholder fd just opened.
            unsafe { close(fd) };
            set_errno(libc::EMFILE);
            return -1;
        }
        s.fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fd, file);
        mark_fd(fd, true);
        fd
    })
    .unwrap_or_else(|| {
        set_errno(libc::ENODEV);
        -1
    })
}

unsafe fn path_of<'a>(p: *const c_char) -> Option<&'a CStr> {
    // SAFETY: callers pass the path argument of an interposed call (NUL-terminated or NULL).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    sysfs_hook!(sysfs::open(path, flags));
    // SAFETY: path from the caller.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !IN_SHIM.with(Cell::get) {
            return open_emulated(i, flags);
        }
    }
    {
        let f = real!("open", OpenFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(path, flags, mode) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    sysfs_hook!(sysfs::open(path, flags));
    // SAFETY: path from the caller.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !IN_SHIM.with(Cell::get) {
            return open_emulated(i, flags);
        }
    }
    {
        let f = real!("open64", OpenFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(path, flags, mode) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    sysfs_hook!(sysfs::openat(dirfd, path, flags));
    // SAFETY: path from the caller; /dev/neuron paths are absolute, so dirfd does not matter.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !IN_SHIM.with(Cell::get) {
            return open_emulated(i, flags);
        }
    }
    {
        let f = real!("openat", OpenatFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(dirfd, path, flags, mode) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    sysfs_hook!(sysfs::openat(dirfd, path, flags));
    // SAFETY: as openat.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !IN_SHIM.with(Cell::get) {
            return open_emulated(i, flags);
        }
    }
    {
        let f = real!("openat64", OpenatFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(dirfd, path, flags, mode) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fd_marked(fd) && !IN_SHIM.with(Cell::get) {
        // Dropping the EmuFile runs the driver's flush/release for this fd.
        let _ = inside(|| {
            mark_fd(fd, false);
            let f = shim()
                .fds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&fd);
            drop(f);
        });
    }
    {
        let f = real!("close", CloseFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(fd) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if fd_marked(fd) && !IN_SHIM.with(Cell::get) {
        let r = inside(|| {
            let s = shim();
            let fds = s.fds.lock().unwrap_or_else(|e| e.into_inner());
            let Some(f) = fds.get(&fd) else {
                return Err(libc::EBADF);
            };
            // SAFETY: `arg` is the caller's ioctl argument; the emulator only touches user
            // memory through process_vm_readv/writev, so any value is safe to pass.
            unsafe { f.ioctl(request as u32, arg as *mut u8) }.map_err(|e| e.0)
        })
        .unwrap_or(Err(libc::EDEADLK));
        return match r {
            Ok(v) => v,
            Err(e) => {
                set_errno(e);
                -1
            }
        };
    }
    {
        let f = real!("ioctl", IoctlFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(fd, request, arg) }
    }
}

fn mmap_emulated(len: size_t, prot: c_int, fd: c_int, off: off_t) -> *mut c_void {
    let r = inside(|| {
        let s = shim();
        let fds = s.fds.lock().unwrap_or_else(|e| e.into_inner());
        let Some(f) = fds.get(&fd) else {
            return Err(libc::EBADF);
        };
        let p = f.mmap(len, off as u64, prot).map_err(|e| e.0)?;
        let mut maps = s.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.insert(p as usize, (fd, len.next_multiple_of(4096)));
        MAPS.store(maps.len(), Ordering::Release);
        Ok(p)
    })
    .unwrap_or(Err(libc::EDEADLK));
    match r {
        Ok(p) => p as *mut c_void,
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if fd_marked(fd) && !IN_SHIM.with(Cell::get) {
        if flags & libc::MAP_FIXED != 0 {
            // The emulator chooses where its memory lives; a fixed address cannot be honoured.
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        return mmap_emulated(len, prot, fd, off);
    }
    {
        let f = real!("mmap", MmapFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(addr, len, prot, flags, fd, off) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if fd_marked(fd) && !IN_SHIM.with(Cell::get) {
        if flags & libc::MAP_FIXED != 0 {
            // The emulator chooses where its memory lives; a fixed address cannot be honoured.
            set_errno(libc::EINVAL);
            return libc::MAP_FAILED;
        }
        return mmap_emulated(len, prot, fd, off);
    }
    {
        let f = real!("mmap64", MmapFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(addr, len, prot, flags, fd, off) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if MAPS.load(Ordering::Acquire) > 0 && !IN_SHIM.with(Cell::get) {
        let r = inside(|| {
            let s = shim();
            let (a, n) = (addr as usize, len.next_multiple_of(4096));
            let mut maps = s.maps.lock().unwrap_or_else(|e| e.into_inner());
            // Not touching an emulated mapping: an ordinary munmap.
            let fd = maps
                .range(..a.saturating_add(n))
                .next_back()
                .filter(|(st, (_, l))| **st + *l > a)
                .map(|(_, (fd, _))| *fd)?;
            let fds = s.fds.lock().unwrap_or_else(|e| e.into_inner());
            let r = match fds.get(&fd) {
                Some(f) => f.munmap(addr as *mut u8, len).map_err(|e| e.0),
                // A mapping outlives its fd's close, as in the kernel: it is an ordinary
                // mapping of the emulator's memory now.
                None => {
                    let f = real!("munmap", MunmapFn);
                    // SAFETY: unmapping (part of) an emulated mapping whose file is closed.
                    match unsafe { f(addr, len) } {
                        0 => Ok(()),
                        _ => Err(libc::EINVAL),
                    }
                }
            };
            if r.is_ok() {
                let _ = neuron_emulator::carve(&mut maps, a, n);
                MAPS.store(maps.len(), Ordering::Release);
            }
            Some(r)
        })
        .flatten();
        match r {
            Some(Ok(())) => return 0,
            Some(Err(e)) => {
                set_errno(e);
                return -1;
            }
            None => {}
        }
    }
    {
        let f = real!("munmap", MunmapFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(addr, len) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // A trapped register-page view must stay read-only to the kernel so that every store
    // faults; the emulator records whether the user now allows stores.
    let prot = if MAPS.load(Ordering::Acquire) > 0
        && neuron_emulator::mmio::set_writable(addr as usize, len, prot)
    {
        prot & !libc::PROT_WRITE
    } else {
        prot
    };
    let f = real!("mprotect", MprotectFn);
    // SAFETY: forwarding the caller's arguments (protection adjusted as above) to libc.
    unsafe { f(addr, len, prot) }
}

/// A character-device `stat` result for an emulated node.
fn fake_stat(index: usize, st: *mut libc::stat64) {
    // SAFETY: `st` is the caller's stat buffer (checked non-null by the callers).
    unsafe {
        std::ptr::write_bytes(st, 0, 1);
        (*st).st_mode = libc::S_IFCHR | 0o666;
        (*st).st_rdev = libc::makedev(240, index as u32);
        (*st).st_nlink = 1;
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, st: *mut libc::stat64) -> c_int {
    sysfs_hook!(sysfs::stat(path, st, true));
    // SAFETY: path from the caller.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !st.is_null() {
            fake_stat(i, st);
            return 0;
        }
    }
    {
        let f = real!("stat64", StatFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(path, st) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, st: *mut libc::stat64) -> c_int {
    sysfs_hook!(sysfs::stat(path, st, true));
    // SAFETY: path from the caller; on x86_64 and aarch64 glibc `struct stat` == `stat64`.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !st.is_null() {
            fake_stat(i, st);
            return 0;
        }
    }
    {
        let f = real!("stat", StatFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(path, st) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    sysfs_hook!(sysfs::access(path, mode));
    // SAFETY: path from the caller.
    if unsafe { path_of(path) }.and_then(device_index).is_some() {
        return 0;
    }
    {
        let f = real!("access", AccessFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(path, mode) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> c_int {
    sysfs_hook!(sysfs::statx(path, flags, mask, buf));
    // SAFETY: path from the caller.
    if let Some(i) = unsafe { path_of(path) }.and_then(device_index) {
        if !buf.is_null() {
            // SAFETY: `buf` is the caller's statx buffer.
            unsafe {
                std::ptr::write_bytes(buf, 0, 1);
                (*buf).stx_mask = libc::STATX_TYPE | libc::STATX_MODE;
                (*buf).stx_mode = (libc::S_IFCHR | 0o666) as u16;
                (*buf).stx_nlink = 1;
                (*buf).stx_rdev_major = 240;
                (*buf).stx_rdev_minor = i as u32;
            }
            return 0;
        }
    }
    {
        let f = real!("statx", StatxFn);
        // SAFETY: forwarding the caller\'s arguments unchanged to libc.
        unsafe { f(dirfd, path, flags, mask, buf) }
    }
}
