//! Host ("DMA-coherent") memory regions: owned by the device model, reachable by device DMA
//! and mapped into the runtime's address space.
//!
//! The runtime reads and writes these bytes through a raw pointer (its mmap) while the device
//! thread DMAs into them, exactly as with real coherent memory. Ordering is by protocol:
//! notification entries publish their first word last with release ordering.
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// One page-aligned, zero-initialised allocation, or memory owned by someone else (an
/// emulator's shared-memory arena) that stays valid while the region lives.
pub struct HostRegion {
    ptr: NonNull<u8>,
    len: usize,
    /// For external regions: what keeps the memory alive (dropped with the region) instead of
    /// the allocator.
    external: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("external", &self.external.is_some())
            .finish()
    }
}

// SAFETY: the region is a plain heap allocation; concurrent access from the runtime's mapping
// and the device thread is coordinated by the device protocol (as with real coherent memory),
// and every access from this crate goes through bounds-checked raw copies.
unsafe impl Send for HostRegion {}
// SAFETY: see above; no method hands out Rust references into the region.
unsafe impl Sync for HostRegion {}

impl HostRegion {
    /// Allocate `len` bytes (rounded up to whole 4 KiB pages by the caller's contract;
    /// here any len > 0 works). Returns `None` if the allocator refuses.
    pub fn new(len: usize) -> Option<HostRegion> {
        let layout = Layout::from_size_align(len.max(1), 4096).ok()?;
        // SAFETY: the layout has non-zero size.
        let p = unsafe { alloc_zeroed(layout) };
        NonNull::new(p).map(|ptr| HostRegion {
            ptr,
            len,
            external: None,
        })
    }

    /// Wrap `len` bytes at `ptr` that the caller owns (e.g. part of a shared-memory mapping that
    /// user space may also map). `keep` is dropped when the region is dropped (it may release
    /// the memory then).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable and writable, 4-byte aligned, initialised, and stay valid
    /// until `keep` is dropped.
    pub unsafe fn from_external(
        ptr: NonNull<u8>,
        len: usize,
        keep: Box<dyn std::any::Any + Send + Sync>,
    ) -> HostRegion {
        HostRegion {
            ptr,
            len,
            external: Some(keep),
        }
    }

    /// Fill `len` bytes at `off` with `byte`. Returns false if out of range.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> bool {
        if !self.check(off, len) {
            return false;
        }
        // SAFETY: range checked above.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), byte, len) };
        true
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address user space sees when it maps this region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, off: usize, n: usize) -> bool {
        off.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// Copy out `buf.len()` bytes at `off`. Returns false if out of range.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> bool {
        if !self.check(off, buf.len()) {
            return false;
        }
        // SAFETY: range checked above; the destination is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), buf.as_mut_ptr(), buf.len())
        };
        true
    }

    /// Copy `data` in at `off`. Returns false if out of range.
    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if !self.check(off, data.len()) {
            return false;
        }
        // SAFETY: range checked above; the source is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
        true
    }

    /// Store a 32-bit word with release ordering (publishes earlier writes to a poller).
    pub fn store_u32_release(&self, off: usize, v: u32) -> bool {
        if !self.check(off, 4) || !off.is_multiple_of(4) {
            return false;
        }
        // SAFETY: in range and 4-byte aligned (the region itself is page aligned); AtomicU32 has
        // the same layout as u32.
        let a = unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU32) };
        a.store(v, Ordering::Release);
        true
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        if self.external.take().is_some() {
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.len.max(1), 4096) {
            // SAFETY: allocated in `new` with this exact layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// Where a device gets memory that user space may map (SBUF, PSUM, register pages): a
/// page-aligned, zeroed region of the asked length, or `None` to fall back to the heap.
pub type MemSource<'a> = &'a dyn Fn(usize) -> Option<HostRegion>;

/// The heap as a [`MemSource`] that always defers to the fallback.
pub fn heap_source(_: usize) -> Option<HostRegion> {
    None
}

/// A zeroed region of `len` bytes from `src`, else from the heap.
pub fn region_from(src: MemSource, len: usize) -> Option<HostRegion> {
    src(len)
        .filter(|r| r.len() >= len)
        .or_else(|| HostRegion::new(len))
}

/// Page-aligned f32 storage (a core's SBUF or PSUM) in a [`HostRegion`]: derefs to `[f32]`,
/// so the data paths index it like a `Vec<f32>`, while the bytes may live in memory that user
/// space maps.
pub struct F32Mem {
    region: HostRegion,
    words: usize,
}

impl std::fmt::Debug for F32Mem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("F32Mem")
            .field("region", &self.region)
            .field("words", &self.words)
            .finish()
    }
}

impl F32Mem {
    /// `words` zeroed f32 words from `src` (the heap if it gives none). `None` only if the
    /// size overflows or the allocator refuses.
    pub fn zeroed(words: usize, src: MemSource) -> Option<F32Mem> {
        let len = words.checked_mul(4)?;
        let region = region_from(src, len)?;
        Some(F32Mem { region, words })
    }

    /// The storage's first byte (page aligned).
    pub fn as_byte_ptr(&self) -> *mut u8 {
        self.region.as_ptr()
    }
}

impl std::ops::Deref for F32Mem {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        // SAFETY: the region holds `words * 4` initialised (zeroed or written) bytes, page
        // aligned, alive as long as `self`; every bit pattern is a valid f32. Accesses racing
        // with user mappings of the same bytes are unordered, as with hardware SRAM.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr() as *const f32, self.words) }
    }
}

impl std::ops::DerefMut for F32Mem {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as `deref`; `&mut self` makes this the only Rust reference to the storage.
        unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr() as *mut f32, self.words) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_mem_is_page_aligned_zeroed_and_indexable() {
        let mut m = F32Mem::zeroed(1 << 20, &heap_source).expect("alloc");
        assert_eq!(m.as_byte_ptr() as usize % 4096, 0);
        assert!(m.iter().all(|v| *v == 0.0));
        m[12345] = 2.5;
        assert_eq!(m[12345], 2.5);
        let ext = |n: usize| HostRegion::new(n);
        let e = F32Mem::zeroed(1024, &ext).expect("external");
        assert_eq!(e.len(), 1024);
    }
}
