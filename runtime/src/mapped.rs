//! A device mapping (`mmap` through the [`DeviceFile`] seam) with bounds-checked accessors.
//!
//! The memory behind it is shared with the device (coherent host memory or a register page),
//! so every access is a volatile or atomic access through a raw pointer.
#![allow(unsafe_code)]

use neuron_abi::{DeviceFile, Errno};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

#[derive(Debug)]
struct Ptr(*mut u8);
// SAFETY: the pointer refers to a shared device mapping that stays valid until munmap in
// Drop; all accesses are atomic or volatile and bounds-checked.
unsafe impl Send for Ptr {}
// SAFETY: as above.
unsafe impl Sync for Ptr {}

/// One mapping; unmapped on drop.
pub struct Mapped {
    ptr: Ptr,
    len: usize,
    dev: Arc<dyn DeviceFile>,
}

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapped")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Mapped {
    pub fn new(dev: Arc<dyn DeviceFile>, len: usize, offset: u64) -> Result<Mapped, Errno> {
        let p = dev.mmap(len, offset, neuron_abi::device::PROT_RW)?;
        if p.is_null() || !(p as usize).is_multiple_of(8) {
            let _ = dev.munmap(p, len);
            return Err(Errno::EFAULT);
        }
        Ok(Mapped {
            ptr: Ptr(p),
            len,
            dev,
        })
    }

    fn word(&self, off: usize) -> Option<&AtomicU32> {
        if !off.is_multiple_of(4) || off.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: in bounds and 4-byte aligned (the base is 8-aligned); the mapping lives as
        // long as `self`; AtomicU32 has u32's layout and atomics are valid on shared memory.
        Some(unsafe { &*(self.ptr.0.add(off) as *const AtomicU32) })
    }

    pub fn load_u32_acquire(&self, off: usize) -> Option<u32> {
        self.word(off).map(|w| w.load(Ordering::Acquire))
    }

    /// One plain 32-bit volatile store (a register write through a mapped register page,
    /// as libnrt makes it).
    pub fn store_u32(&self, off: usize, v: u32) -> bool {
        let Some(w) = self.word(off) else {
            return false;
        };
        // SAFETY: `word` checked bounds and alignment; a volatile store to a live mapping.
        unsafe { std::ptr::write_volatile(w.as_ptr(), v) };
        true
    }

    /// Copy bytes out with volatile reads (the device may write concurrently; the caller
    /// orders this after an acquire load of a publishing word).
    pub fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        if off.checked_add(buf.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: bounds checked above.
            *b = unsafe { std::ptr::read_volatile(self.ptr.0.add(off + i)) };
        }
        true
    }
}

impl Mapped {
    /// Copy bytes in with volatile writes.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if off.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        for (i, b) in data.iter().enumerate() {
            // SAFETY: bounds checked above; the mapping is writable shared memory.
            unsafe { std::ptr::write_volatile(self.ptr.0.add(off + i), *b) };
        }
        true
    }

    /// The mapping's address in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.0
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        let _ = self.dev.munmap(self.ptr.0, self.len);
    }
}
