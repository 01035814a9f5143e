//! The emulated sysfs tree at its real paths (`/sys/devices/virtual/neuron_device`,
//! `/sys/class/neuron_device`, `/sys/module/neuron`, the DMI `product_name` and
//! `board_asset_tag`): opening an attribute gives a fresh snapshot of it (a read-only memfd at
//! offset 0); directories, `stat`, `access` and `readlink` are answered from a materialised copy
//! of the tree in a private temporary directory, refreshed by each `opendir`. Every other path
//! passes through untouched.
//!
//! The hooks at the top of the interposed `open`/`stat` family in `lib.rs` call in here; the
//! calls that only this module needs (`fopen`, `opendir`, `readlink`, `lstat`, `faccessat`,
//! `fstatat`) are interposed here. glibc's `fopen` and `opendir` open files internally without
//! the interposable `open`, so they are interposed themselves.

use crate::{inside, shim, OpenFn, IN_SHIM};
use libc::{c_char, c_int, c_void, size_t, ssize_t};
use neuron_emulator::sysfs::{self, Node};
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// `if let Some(r) = hook { return r; }` in one line per interposed function of `lib.rs`.
macro_rules! sysfs_hook {
    ($e:expr) => {
        if let Some(r) = $e {
            return r;
        }
    };
}

type LstatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type StatxFn =
    unsafe extern "C" fn(c_int, *const c_char, c_int, libc::c_uint, *mut libc::statx) -> c_int;
type ReadlinkFn = unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> ssize_t;
type OpendirFn = unsafe extern "C" fn(*const c_char) -> *mut libc::DIR;

/// The private directory holding the materialised tree (`<root>/sys/...`).
static MIRROR: OnceLock<Option<PathBuf>> = OnceLock::new();
/// Serialises refreshes of the materialised tree; when the last one finished.
static REFRESH: Mutex<Option<std::time::Instant>> = Mutex::new(None);
/// Refreshes closer together than this reuse the last one: the tree's shape is fixed for the
/// emulator's life (only values change, and attribute opens always render afresh), so a walk
/// such as `ls -R` opening thousands of directories refreshes about once.
const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

extern "C" fn remove_mirror() {
    if let Some(Some(root)) = MIRROR.get() {
        IN_SHIM.with(|c| c.set(true));
        let _ = std::fs::remove_dir_all(root);
    }
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The emulated path `p` names (normalised), if the call is not the shim's own and `p` is one.
fn emulated(p: *const c_char) -> Option<String> {
    if p.is_null() || IN_SHIM.with(Cell::get) {
        return None;
    }
    // SAFETY: `p` is the non-null, NUL-terminated path argument of an interposed call.
    let s = unsafe { CStr::from_ptr(p) }.to_str().ok()?;
    let n = sysfs::normalise(s)?;
    sysfs::is_emulated_path(&n).then_some(n)
}

/// Materialise the tree (again, if `refresh` or not yet there); its root. Called inside the
/// shim (re-entrancy flag set).
fn mirror(refresh: bool) -> Option<PathBuf> {
    let mut fresh = false;
    let root = MIRROR
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!(
                "neuron-emu-sysfs.{}.{:x}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos())
            ));
            std::fs::create_dir_all(&dir).ok()?;
            fresh = true;
            // SAFETY: registering a plain `extern "C" fn()` to run at exit.
            unsafe { libc::atexit(remove_mirror) };
            Some(dir)
        })
        .clone()?;
    if refresh || fresh {
        let mut last = REFRESH.lock().unwrap_or_else(|e| e.into_inner());
        if fresh || last.is_none_or(|t| t.elapsed() >= REFRESH_EVERY) {
            shim().emu.sysfs(None)?.write_to(&root).ok()?;
            *last = Some(std::time::Instant::now());
        }
    }
    Some(root)
}

/// `path` inside the materialised tree, as a C string.
fn mirrored(path: &str, refresh: bool) -> Option<CString> {
    let root = inside(|| mirror(refresh))??;
    let mut b = root.as_os_str().as_bytes().to_vec();
    b.extend_from_slice(path.as_bytes());
    CString::new(b).ok()
}

/// A read-only fd at offset 0 on a snapshot of `data`.
fn snapshot_fd(data: &[u8], cloexec: bool) -> c_int {
    // SAFETY: a NUL-terminated name; flags are valid memfd flags.
    let m = unsafe { libc::memfd_create(c"neuron-sysfs".as_ptr(), libc::MFD_CLOEXEC) };
    if m < 0 {
        return -1;
    }
    let mut off = 0;
    while off < data.len() {
        // SAFETY: writing from a live slice into the memfd just created.
        let n = unsafe { libc::write(m, data[off..].as_ptr() as *const c_void, data.len() - off) };
        if n <= 0 {
            // SAFETY: closing the memfd created above.
            unsafe { libc::close(m) };
            return -1;
        }
        off += n as usize;
    }
    // Reopen through /proc for a read-only file at offset 0; without /proc keep the memfd.
    let proc = CString::new(format!("/proc/self/fd/{m}")).unwrap_or_default();
    let open = real!("open", OpenFn);
    let flags = libc::O_RDONLY | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { open(proc.as_ptr(), flags, 0) };
    if fd >= 0 {
        // SAFETY: closing the memfd; the new fd keeps the file alive.
        unsafe { libc::close(m) };
        return fd;
    }
    // SAFETY: rewinding the memfd created above.
    unsafe { libc::lseek(m, 0, libc::SEEK_SET) };
    m
}

/// `open`/`openat` of an emulated path: an attribute is a fresh snapshot (read-only: a write
/// open is `EACCES`), a directory opens its materialised copy, anything else `ENOENT`.
pub(crate) fn open(path: *const c_char, flags: c_int) -> Option<c_int> {
    let p = emulated(path)?;
    let r = inside(|| {
        let Some(tree) = shim().emu.sysfs(Some(&p)) else {
            return Err(libc::EIO);
        };
        match tree.lookup(&p) {
            Some((_, Node::File { data, .. })) => {
                if flags & libc::O_ACCMODE != libc::O_RDONLY {
                    return Err(libc::EACCES);
                }
                let fd = snapshot_fd(data.as_bytes(), flags & libc::O_CLOEXEC != 0);
                if fd < 0 {
                    Err(libc::EMFILE)
                } else {
                    Ok(fd)
                }
            }
            Some((_, Node::Dir)) => Err(0),
            _ => Err(libc::ENOENT),
        }
    })?;
    match r {
        Ok(fd) => Some(fd),
        // A directory: the materialised copy, opened as asked.
        Err(0) => {
            let m = mirrored(&p, false)?;
            let f = real!("open", OpenFn);
            // SAFETY: a valid NUL-terminated path and the caller's flags.
            Some(unsafe { f(m.as_ptr(), flags, 0) })
        }
        Err(e) => {
            set_errno(e);
            Some(-1)
        }
    }
}

/// `openat` of an absolute emulated path (a relative one resolves against `dirfd`, which is a
/// real directory: the materialised copy when it came from here).
pub(crate) fn openat(_dirfd: c_int, path: *const c_char, flags: c_int) -> Option<c_int> {
    open(path, flags)
}

/// `stat` (`follow`) or `lstat` of an emulated path: the materialised copy's.
pub(crate) fn stat(path: *const c_char, st: *mut libc::stat64, follow: bool) -> Option<c_int> {
    let m = mirrored(&emulated(path)?, false)?;
    let f = if follow {
        real!("stat64", LstatFn)
    } else {
        real!("lstat64", LstatFn)
    };
    // SAFETY: a valid path and the caller's stat buffer.
    Some(unsafe { f(m.as_ptr(), st) })
}

/// `statx` of an absolute emulated path.
pub(crate) fn statx(
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> Option<c_int> {
    let m = mirrored(&emulated(path)?, false)?;
    let f = real!("statx", StatxFn);
    // SAFETY: a valid path and the caller's flags and buffer.
    Some(unsafe { f(libc::AT_FDCWD, m.as_ptr(), flags, mask, buf) })
}

/// `access` of an emulated path.
pub(crate) fn access(path: *const c_char, mode: c_int) -> Option<c_int> {
    let m = mirrored(&emulated(path)?, false)?;
    let f = real!("access", AccessFn);
    // SAFETY: a valid path.
    Some(unsafe { f(m.as_ptr(), mode) })
}

/// An interposed call: the sysfs hook first, else libc's own with the same arguments.
macro_rules! interpose {
    ($name:ident, $sym:literal, ($($arg:ident: $t:ty),*) -> $ret:ty, $hook:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> $ret {
            sysfs_hook!($hook);
            let f = real!($sym, unsafe extern "C" fn($($t),*) -> $ret);
            // SAFETY: forwarding the caller's arguments unchanged to libc.
            unsafe { f($($arg),*) }
        }
    };
}

// `struct stat` == `stat64` on x86_64 and aarch64 glibc.
interpose!(lstat64, "lstat64", (path: *const c_char, st: *mut libc::stat64) -> c_int,
    stat(path, st, false));
interpose!(lstat, "lstat", (path: *const c_char, st: *mut libc::stat64) -> c_int,
    stat(path, st, false));
interpose!(fstatat64, "fstatat64",
    (dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int,
    stat(path, st, flags & libc::AT_SYMLINK_NOFOLLOW == 0));
interpose!(fstatat, "fstatat",
    (dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int,
    stat(path, st, flags & libc::AT_SYMLINK_NOFOLLOW == 0));
interpose!(faccessat, "faccessat",
    (dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int,
    access(path, mode));

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, len: size_t) -> ssize_t {
    if let Some(m) = emulated(path).and_then(|p| mirrored(&p, false)) {
        let f = real!("readlink", ReadlinkFn);
        // SAFETY: a valid path and the caller's buffer.
        return unsafe { f(m.as_ptr(), buf, len) };
    }
    let f = real!("readlink", ReadlinkFn);
    // SAFETY: forwarding the caller's arguments unchanged to libc.
    unsafe { f(path, buf, len) }
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    // A listing is of the tree as it is now.
    if let Some(m) = emulated(path).and_then(|p| mirrored(&p, true)) {
        let f = real!("opendir", OpendirFn);
        // SAFETY: a valid path.
        return unsafe { f(m.as_ptr()) };
    }
    let f = real!("opendir", OpendirFn);
    // SAFETY: forwarding the caller's argument unchanged to libc.
    unsafe { f(path) }
}

/// `fopen` of an emulated path: read modes only (`EACCES` otherwise), on a snapshot fd.
fn fopen_emulated(path: *const c_char, mode: *const c_char) -> Option<*mut libc::FILE> {
    emulated(path)?;
    // SAFETY: `mode` is the caller's NUL-terminated mode string (or NULL).
    let m = (!mode.is_null()).then(|| unsafe { CStr::from_ptr(mode) }.to_bytes().to_vec())?;
    if m.first() != Some(&b'r') || m.contains(&b'+') {
        set_errno(libc::EACCES);
        return Some(std::ptr::null_mut());
    }
    let cloexec = if m.contains(&b'e') {
        libc::O_CLOEXEC
    } else {
        0
    };
    let fd = open(path, libc::O_RDONLY | cloexec)?;
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: wrapping the fd just opened in a stdio stream with a valid mode.
    let f = unsafe { libc::fdopen(fd, c"r".as_ptr()) };
    if f.is_null() {
        // SAFETY: closing the fd that could not be wrapped.
        unsafe { libc::close(fd) };
    }
    Some(f)
}

interpose!(fopen, "fopen", (path: *const c_char, mode: *const c_char) -> *mut libc::FILE,
    fopen_emulated(path, mode));
interpose!(fopen64, "fopen64", (path: *const c_char, mode: *const c_char) -> *mut libc::FILE,
    fopen_emulated(path, mode));

type GetxattrFn =
    unsafe extern "C" fn(*const c_char, *const c_char, *mut c_void, size_t) -> ssize_t;
type ListxattrFn = unsafe extern "C" fn(*const c_char, *mut c_char, size_t) -> ssize_t;

/// The materialised copy of `path` if it is emulated, else `path` itself (for the calls that
/// only need the path redirected: extended attributes, which `ls -l` asks for).
fn redirect(path: *const c_char) -> (Option<CString>, *const c_char) {
    match emulated(path).and_then(|p| mirrored(&p, false)) {
        Some(m) => {
            let p = m.as_ptr();
            (Some(m), p)
        }
        None => (None, path),
    }
}

/// An interposed xattr call whose path argument is redirected to the materialised copy.
macro_rules! xattr_redirect {
    ($name:ident, $sym:literal, $ty:ty, ($($arg:ident: $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, $($arg: $t),*) -> ssize_t {
            let (_keep, p) = redirect(path);
            let f = real!($sym, $ty);
            // SAFETY: a valid path (the caller's or the mirror's) and the caller's arguments.
            unsafe { f(p, $($arg),*) }
        }
    };
}

xattr_redirect!(getxattr, "getxattr", GetxattrFn, (name: *const c_char, value: *mut c_void, size: size_t));
xattr_redirect!(lgetxattr, "lgetxattr", GetxattrFn, (name: *const c_char, value: *mut c_void, size: size_t));
xattr_redirect!(listxattr, "listxattr", ListxattrFn, (list: *mut c_char, size: size_t));
xattr_redirect!(llistxattr, "llistxattr", ListxattrFn, (list: *mut c_char, size: size_t));
