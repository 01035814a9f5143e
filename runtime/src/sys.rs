//! The real-syscall backend: `open`/`ioctl`/`mmap` on `/dev/neuronN`, exactly what would run
//! on hardware (or under the LD_PRELOAD shim).
#![allow(unsafe_code)]

use neuron_abi::{DeviceFile, Errno};
use std::ffi::CString;

/// An open `/dev/neuronN`.
#[derive(Debug)]
pub struct SysDevice {
    fd: libc::c_int,
    path: String,
}

fn errno() -> Errno {
    Errno(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

impl SysDevice {
    /// Open a device node read-write.
    pub fn open(path: &str) -> Result<SysDevice, Errno> {
        Self::open_with(path, false)
    }

    /// Open a device node; `write_only` opens the driver's "misc" fd (`O_WRONLY`).
    pub fn open_with(path: &str, write_only: bool) -> Result<SysDevice, Errno> {
        let c = CString::new(path).map_err(|_| Errno::EINVAL)?;
        let mode = if write_only {
            libc::O_WRONLY
        } else {
            libc::O_RDWR
        };
        // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
        let fd = unsafe { libc::open(c.as_ptr(), mode | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(errno());
        }
        Ok(SysDevice {
            fd,
            path: path.to_string(),
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Number of consecutive `/dev/neuron<N>` nodes from 0.
    pub fn count_present() -> u32 {
        (0..64)
            .take_while(|i| std::path::Path::new(&format!("/dev/neuron{i}")).exists())
            .count() as u32
    }
}

impl DeviceFile for SysDevice {
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        // SAFETY: forwarded verbatim; the caller upholds the argument contract.
        let r = unsafe { libc::ioctl(self.fd, cmd as libc::c_ulong, arg) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(r)
        }
    }

    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno> {
        let off = libc::off_t::try_from(offset).map_err(|_| Errno::EINVAL)?;
        // SAFETY: a fresh shared mapping chosen by the kernel; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                self.fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(p.cast())
    }

    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        // SAFETY: unmapping a region this object mapped; callers only pass what mmap returned.
        let r = unsafe { libc::munmap(addr.cast(), len) };
        if r < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }
}

impl Drop for SysDevice {
    fn drop(&mut self) {
        // SAFETY: closing the fd this object owns, once.
        unsafe { libc::close(self.fd) };
    }
}
