//! The seam between a runtime and a Neuron device: a file-descriptor-like object.
//!
//! The runtime talks to a device only through [`DeviceFile`]. The bytes that cross it are
//! the real driver ABI's bytes: a 32-bit ioctl command value plus a pointer to the argument
//! struct (which may itself embed user pointers), and `mmap(len, offset, prot)` with the
//! driver's offset rules. Two implementations exist: real syscalls on an open `/dev/neuronN`
//! (runtime crate), and the emulator's in-process file (emulator crate).

use std::fmt;

/// A positive Linux errno value, as the kernel would report it to user space.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(1);
    pub const ENOENT: Errno = Errno(2);
    pub const ESRCH: Errno = Errno(3);
    pub const EINTR: Errno = Errno(4);
    pub const EIO: Errno = Errno(5);
    pub const ENXIO: Errno = Errno(6);
    pub const E2BIG: Errno = Errno(7);
    pub const EBADF: Errno = Errno(9);
    pub const EAGAIN: Errno = Errno(11);
    pub const ENOMEM: Errno = Errno(12);
    pub const EACCES: Errno = Errno(13);
    pub const EFAULT: Errno = Errno(14);
    pub const EBUSY: Errno = Errno(16);
    pub const EEXIST: Errno = Errno(17);
    pub const ENODEV: Errno = Errno(19);
    pub const EINVAL: Errno = Errno(22);
    pub const ENOSPC: Errno = Errno(28);
    pub const ENOSYS: Errno = Errno(38);
    pub const EBADMSG: Errno = Errno(74);
    pub const EALREADY: Errno = Errno(114);
    pub const ETIMEDOUT: Errno = Errno(110);
    /// Kernel-internal "no such ioctl" (seen by user space as errno 515 from some paths).
    pub const ENOIOCTLCMD: Errno = Errno(515);
    /// Kernel-internal "operation not supported" (ENOTSUPP, 524; distinct from EOPNOTSUPP).
    pub const ENOTSUPP: Errno = Errno(524);

    /// Symbolic name for the values this project uses; `None` for others.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "EPERM",
            2 => "ENOENT",
            3 => "ESRCH",
            4 => "EINTR",
            5 => "EIO",
            6 => "ENXIO",
            7 => "E2BIG",
            9 => "EBADF",
            11 => "EAGAIN",
            12 => "ENOMEM",
            13 => "EACCES",
            14 => "EFAULT",
            16 => "EBUSY",
            17 => "EEXIST",
            19 => "ENODEV",
            22 => "EINVAL",
            28 => "ENOSPC",
            38 => "ENOSYS",
            74 => "EBADMSG",
            110 => "ETIMEDOUT",
            114 => "EALREADY",
            515 => "ENOIOCTLCMD",
            524 => "ENOTSUPP",
            _ => return None,
        })
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Errno {}

/// `mmap(2)` protection bit: readable (Linux value).
pub const PROT_READ: i32 = 1;
/// `mmap(2)` protection bit: writable (Linux value).
pub const PROT_WRITE: i32 = 2;
/// Read-write, what a runtime normally asks for.
pub const PROT_RW: i32 = PROT_READ | PROT_WRITE;

/// A file-descriptor-like handle on one Neuron device node (`/dev/neuronN`).
///
/// Semantics follow the real driver: `ioctl` dispatches on the full 32-bit command value;
/// `mmap` takes a length and an offset that is a device-side physical-address key (a mem chunk
/// PA, or a resource offset from RESOURCE_MMAP_INFO) and must match the chunk size exactly.
pub trait DeviceFile: Send + Sync {
    /// Issue one ioctl. Returns the (non-negative) value the syscall would return.
    ///
    /// # Safety
    /// `arg` is passed on exactly as to `ioctl(2)`: it must point to the argument struct the
    /// command's ABI expects (or be null/any value for commands without an argument), and any
    /// user pointers embedded in that struct must be valid for the accesses the command makes.
    // An ioctl argument is a raw user pointer by nature; the trait must say so.
    #[allow(unsafe_code)]
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno>;

    /// Map `len` bytes at device offset `offset`, shared, with protection `prot` (the
    /// `PROT_*` bits of `mmap(2)`: [`PROT_READ`], [`PROT_WRITE`]; the driver may grant less,
    /// e.g. another process's chunk is always read-only). Returns the address of the mapping
    /// in this process.
    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno>;

    /// Remove all or part of a mapping made by [`DeviceFile::mmap`] (page-granular, as
    /// `munmap(2)`).
    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno>;
}
