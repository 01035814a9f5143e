//! `copy_from_user` / `copy_to_user` for an in-process "kernel".
//!
//! The runtime hands the emulator raw user pointers exactly as it would hand them to the
//! kernel. Dereferencing them directly would crash the process on a bad pointer, where the
//! kernel returns EFAULT. `process_vm_readv`/`process_vm_writev` on our own pid give the
//! kernel's behaviour: a bad address fails with EFAULT instead of faulting.
#![allow(unsafe_code)]

use neuron_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

/// Copy `buf.len()` bytes from user address `addr`.
pub fn copy_from_user(addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes our own exclusively borrowed buffer; the kernel validates
    // `remote` and reports EFAULT instead of touching invalid memory.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Copy `data` to user address `addr`.
pub fn copy_to_user(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` describes our own buffer (only read); the kernel validates `remote`.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Read a whole argument struct.
pub fn read_struct<T: FromBytes + IntoBytes>(addr: u64) -> Result<T, Errno> {
    let mut v = T::new_zeroed();
    copy_from_user(addr, v.as_mut_bytes())?;
    Ok(v)
}

/// Write a whole argument struct back.
pub fn write_struct<T: IntoBytes + zerocopy::Immutable>(addr: u64, v: &T) -> Result<(), Errno> {
    copy_to_user(addr, v.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pointers_give_efault() {
        let mut b = [0u8; 4];
        assert_eq!(copy_from_user(0, &mut b), Err(Errno::EFAULT));
        assert_eq!(copy_from_user(16, &mut b), Err(Errno::EFAULT));
        assert_eq!(copy_to_user(16, &b), Err(Errno::EFAULT));
        let src = [1u8, 2, 3, 4];
        copy_from_user(src.as_ptr() as u64, &mut b).expect("valid");
        assert_eq!(b, src);
        let mut dst = [0u8; 4];
        copy_to_user(dst.as_mut_ptr() as u64, &src).expect("valid");
        assert_eq!(dst, src);
    }
}
