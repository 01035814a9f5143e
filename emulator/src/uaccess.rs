//! `copy_from_user` / `copy_to_user` for an in-process "kernel", behind the [`UserMemory`]
//! trait the driver reaches a caller's memory through.
//!
//! The runtime hands the emulator raw user pointers exactly as it would hand them to the
//! kernel. Dereferencing them directly would crash the process on a bad pointer, where the
//! kernel returns EFAULT. A guarded copy ([`crate::guarded`]: a `rep movsb` whose fault the
//! signal handlers turn into a short copy, as the kernel's exception table does) gives the
//! kernel's behaviour at memcpy speed; where it cannot be relied on, `process_vm_readv` /
//! `process_vm_writev` on our own pid do (a bad address fails with EFAULT there too).

use neuron_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

/// Copy `buf.len()` bytes from user address `addr`: a guarded copy ([`crate::guarded`])
/// where it is available, else `process_vm_readv` (shared with the daemon's client, which
/// answers the daemon's reads the same way).
pub fn copy_from_user(addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if addr == 0 && !buf.is_empty() {
        return Err(Errno::EFAULT);
    }
    match usize::try_from(addr)
        .ok()
        .and_then(|a| crate::guarded::copy(buf.as_mut_ptr() as usize, a, buf.len()))
    {
        Some(r) => r.map_err(|()| Errno::EFAULT),
        None => neuron_emu_remote::client::copy_from_self(addr, buf),
    }
}

/// Copy `data` to user address `addr` (guarded, else `process_vm_writev`).
pub fn copy_to_user(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if addr == 0 && !data.is_empty() {
        return Err(Errno::EFAULT);
    }
    match usize::try_from(addr)
        .ok()
        .and_then(|a| crate::guarded::copy(a, data.as_ptr() as usize, data.len()))
    {
        Some(r) => r.map_err(|()| Errno::EFAULT),
        None => neuron_emu_remote::client::copy_to_self(addr, data),
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

/// A caller's address space as the driver sees it: copy from / to user addresses, a bad address
/// giving `EFAULT` (never a crash). [`OwnProcess`] is the in-process implementation; a daemon
/// serving other processes would implement it over their pids.
pub trait UserMemory {
    /// Copy `buf.len()` bytes from user address `addr` (an empty copy always succeeds).
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno>;
    /// Copy `data` to user address `addr` (an empty copy always succeeds).
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno>;
}

impl dyn UserMemory + '_ {
    /// Read a whole argument struct.
    pub fn read_struct<T: FromBytes + IntoBytes>(&self, addr: u64) -> Result<T, Errno> {
        let mut v = T::new_zeroed();
        self.read(addr, v.as_mut_bytes())?;
        Ok(v)
    }

    /// Write a whole argument struct back.
    pub fn write_struct<T: IntoBytes + zerocopy::Immutable>(
        &self,
        addr: u64,
        v: &T,
    ) -> Result<(), Errno> {
        self.write(addr, v.as_bytes())
    }
}

/// The emulator's own process (`process_vm_readv`/`writev` on the own pid).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnProcess;

impl UserMemory for OwnProcess {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        copy_from_user(addr, buf)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        copy_to_user(addr, data)
    }
}

/// An in-memory user address space for unit tests: regions placed at made-up addresses; any
/// access not wholly inside one region is `EFAULT`.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct FakeMemory {
    regions: std::sync::Mutex<std::collections::BTreeMap<u64, Vec<u8>>>,
}

#[cfg(test)]
impl FakeMemory {
    /// Where the first region goes (regions are 1 MiB apart, plus their length).
    const BASE: u64 = 0x7000_0000_0000;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, Vec<u8>>> {
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Place `data` in a new region; returns its address.
    pub(crate) fn put_bytes(&self, data: &[u8]) -> u64 {
        let mut r = self.lock();
        let at = r.iter().next_back().map_or(Self::BASE, |(a, v)| {
            (a + v.len() as u64 + (1 << 20)) & !0xfff
        });
        r.insert(at, data.to_vec());
        at
    }

    /// Place a struct in a new region; returns its address.
    pub(crate) fn put<T: IntoBytes + zerocopy::Immutable>(&self, v: &T) -> u64 {
        self.put_bytes(v.as_bytes())
    }

    /// A zeroed region of `len` bytes.
    pub(crate) fn zeroed(&self, len: usize) -> u64 {
        self.put_bytes(&vec![0; len])
    }

    /// The bytes at `[addr, addr+len)` (panics outside a region: tests only).
    pub(crate) fn bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        assert_eq!(self.read(addr, &mut b), Ok(()), "fake read at {addr:#x}");
        b
    }

    /// The struct at `addr`.
    pub(crate) fn get<T: FromBytes>(&self, addr: u64) -> T {
        let b = self.bytes(addr, std::mem::size_of::<T>());
        match T::read_from_bytes(&b) {
            Ok(v) => v,
            Err(_) => panic!("size"),
        }
    }

    fn span(&self, addr: u64, len: usize) -> Option<(u64, usize)> {
        let r = self.lock();
        let (&base, v) = r.range(..=addr).next_back()?;
        let off = (addr - base) as usize;
        (off.checked_add(len)? <= v.len()).then_some((base, off))
    }
}

#[cfg(test)]
impl UserMemory for FakeMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        if buf.is_empty() {
            return Ok(());
        }
        let (base, off) = self.span(addr, buf.len()).ok_or(Errno::EFAULT)?;
        let r = self.lock();
        let v = r.get(&base).ok_or(Errno::EFAULT)?;
        buf.copy_from_slice(&v[off..off + buf.len()]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        if data.is_empty() {
            return Ok(());
        }
        let (base, off) = self.span(addr, data.len()).ok_or(Errno::EFAULT)?;
        let mut r = self.lock();
        let v = r.get_mut(&base).ok_or(Errno::EFAULT)?;
        v[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
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

    #[test]
    fn fake_memory_faults_outside_its_regions() {
        let m = FakeMemory::default();
        let a = m.put_bytes(&[1, 2, 3, 4]);
        let mem: &dyn UserMemory = &m;
        let mut b = [0u8; 4];
        assert_eq!(mem.read(a, &mut b), Ok(()));
        assert_eq!(b, [1, 2, 3, 4]);
        assert_eq!(mem.read(a + 1, &mut b), Err(Errno::EFAULT));
        assert_eq!(mem.read(0, &mut b), Err(Errno::EFAULT));
        assert_eq!(mem.write(a + 2, &[9, 9]), Ok(()));
        assert_eq!(m.bytes(a, 4), [1, 2, 9, 9]);
        assert_eq!(mem.write(a + 3, &[9, 9]), Err(Errno::EFAULT));
        assert_eq!(mem.read(0, &mut []), Ok(()));
        let v: u32 = mem.read_struct(a).expect("struct");
        assert_eq!(v, u32::from_le_bytes([1, 2, 9, 9]));
    }
}
