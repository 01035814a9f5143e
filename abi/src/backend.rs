//! The C ABI of a loadable device backend: how `libnrt.so` reaches an embedded emulated device
//! without linking the emulator.
//!
//! A backend library (the emulator's `libneuron_emu.so`) exports one symbol,
//! [`BACKEND_SYMBOL`], a function returning a pointer to a static [`BackendV1`] table. Its
//! functions carry exactly what crosses the [`crate::DeviceFile`] seam — an open of
//! `/dev/neuron<index>`, the 32-bit ioctl command value with the user's argument pointer, and
//! `mmap(len, prot, offset)` / `munmap` — so the bytes a runtime sends through it are the real
//! driver ABI's bytes, as with real syscalls. Errors are negative errno values, as the kernel
//! returns them.

/// Name of the exported entry point (`extern "C" fn() -> *const BackendV1`).
pub const BACKEND_SYMBOL: &str = "neuron_emu_backend_v1";

/// The value of [`BackendV1::version`] this ABI describes. A loader refuses any other.
pub const BACKEND_VERSION: u32 = 1;

/// Default file name of the emulator's backend library.
pub const BACKEND_LIBRARY: &str = "libneuron_emu.so";

/// Environment variable naming the backend library to load (a path), overriding the search.
pub const BACKEND_LIBRARY_ENV: &str = "NEURON_EMU_LIB";

/// Signature of the exported entry point.
pub type BackendEntry = unsafe extern "C" fn() -> *const BackendV1;

/// Version 1 of the backend function table. Handles are positive; every function returning
/// `i64`/`i32` returns a negative errno on failure.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct BackendV1 {
    /// [`BACKEND_VERSION`].
    pub version: u32,
    /// `size_of::<BackendV1>()` as the backend was built, a second guard against mismatches.
    pub size: u32,
    /// Number of `/dev/neuron*` nodes the backend emulates (0 if it could not start).
    pub device_count: unsafe extern "C" fn() -> u32,
    /// Write a NUL-terminated one-line description (e.g. "emulated trn2 x1") into `buf`
    /// (`len` bytes); returns the full length it needed, without the NUL.
    pub describe: unsafe extern "C" fn(buf: *mut u8, len: usize) -> usize,
    /// `open("/dev/neuron<index>", write_only ? O_WRONLY : O_RDWR)` as process `pid`:
    /// a handle > 0, or −errno.
    pub open: unsafe extern "C" fn(index: u32, write_only: i32, pid: u32) -> i64,
    /// `close`: 0 or −errno (unknown handle → −EBADF).
    pub close: unsafe extern "C" fn(handle: i64) -> i32,
    /// `ioctl(fd, cmd, arg)`: the handler's return value (≥ 0) or −errno.
    pub ioctl: unsafe extern "C" fn(handle: i64, cmd: u32, arg: *mut u8) -> i64,
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)`: 0 with `*out` set, or −errno.
    pub mmap: unsafe extern "C" fn(
        handle: i64,
        len: usize,
        prot: i32,
        offset: u64,
        out: *mut *mut u8,
    ) -> i32,
    /// `munmap(addr, len)` of a range this handle mapped: 0 or −errno.
    pub munmap: unsafe extern "C" fn(handle: i64, addr: *mut u8, len: usize) -> i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_layout_is_stable() {
        // Two u32 then seven function pointers, LP64.
        assert_eq!(std::mem::size_of::<BackendV1>(), 8 + 7 * 8);
        assert_eq!(std::mem::offset_of!(BackendV1, device_count), 8);
        assert_eq!(std::mem::offset_of!(BackendV1, munmap), 8 + 6 * 8);
    }
}
