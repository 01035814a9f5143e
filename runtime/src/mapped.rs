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

/// One mapping; unmapped on drop (unless [`unmap_together`] unmapped it already).
pub struct Mapped {
    ptr: Ptr,
    len: usize,
    dev: Arc<dyn DeviceFile>,
    unmapped: bool,
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
    /// Map `len` bytes at device offset `offset` read-write.
    pub fn new(dev: Arc<dyn DeviceFile>, len: usize, offset: u64) -> Result<Mapped, Errno> {
        Self::with_prot(dev, len, offset, neuron_abi::device::PROT_RW)
    }

    /// Map memory the runtime only reads (a notification queue) read-only: its writes
    /// would be a bug, and each writable queue mapping cost the process's other CPUs a TLB
    /// shootdown of its own when it went, even inside one `munmap` (`unmap_together`; the
    /// `tlb:tlb_flush` tracepoint, a 6.18 kernel), read-only ones one per `munmap`.
    pub fn read_only(dev: Arc<dyn DeviceFile>, len: usize, offset: u64) -> Result<Mapped, Errno> {
        Self::with_prot(dev, len, offset, neuron_abi::device::PROT_READ)
    }

    fn with_prot(
        dev: Arc<dyn DeviceFile>,
        len: usize,
        offset: u64,
        prot: i32,
    ) -> Result<Mapped, Errno> {
        let p = dev.mmap(len, offset, prot)?;
        if p.is_null() || !(p as usize).is_multiple_of(8) {
            let _ = dev.munmap(p, len);
            return Err(Errno::EFAULT);
        }
        Ok(Mapped {
            ptr: Ptr(p),
            len,
            dev,
            unmapped: false,
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
        if !self.unmapped {
            let _ = self.dev.munmap(self.ptr.0, self.len);
        }
    }
}

/// The least page size: a mapping covers at least its length rounded up to it.
const PAGE: usize = 4096;

/// Unmap `maps` with one `munmap` per run of mappings of one device file that lie end to
/// end, instead of one each: where a mapping's length rounded up to a page reaches the
/// next one's start, nothing lies between them, so the run's range is exactly the union of
/// our live mappings. Each `munmap` of a process running threads on other CPUs costs a TLB
/// shootdown there (~12 µs on a 2-vCPU VM, ~6% of a fault campaign's CPU when a model's 16
/// mappings went one by one, `docs/performance.md`, nineteenth session). A run the file
/// refuses is unmapped mapping by mapping. Each mapping is marked unmapped (its drop does
/// nothing more).
pub fn unmap_together(maps: &mut [&mut Mapped]) {
    maps.sort_by_key(|m| m.ptr.0 as usize);
    let mut i = 0;
    // Each turn unmaps a run of at least one mapping.
    while i < maps.len() {
        let start = maps[i].ptr.0 as usize;
        let mut end = start.saturating_add(maps[i].len.next_multiple_of(PAGE));
        let mut j = i + 1;
        while j < maps.len()
            && !maps[j - 1].unmapped
            && !maps[j].unmapped
            && maps[j].ptr.0 as usize == end
            && Arc::ptr_eq(&maps[j].dev, &maps[i].dev)
        {
            end = end.saturating_add(maps[j].len.next_multiple_of(PAGE));
            j += 1;
        }
        let run = &mut maps[i..j];
        if run.len() == 1 || run[0].dev.munmap(run[0].ptr.0, end - start).is_err() {
            for m in run.iter_mut() {
                if !m.unmapped {
                    let _ = m.dev.munmap(m.ptr.0, m.len);
                }
            }
        }
        for m in run.iter_mut() {
            m.unmapped = true;
        }
        i = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Hands out addresses of our choosing (never touched) and records each munmap; one
    /// longer than `refuse_over` bytes fails.
    struct Fake {
        next: Mutex<Vec<usize>>,
        unmaps: Mutex<Vec<(usize, usize)>>,
        prots: Mutex<Vec<i32>>,
        refuse_over: usize,
    }

    impl DeviceFile for Fake {
        unsafe fn ioctl(&self, _: u32, _: *mut u8) -> Result<i32, Errno> {
            Err(Errno::EINVAL)
        }
        fn mmap(&self, _: usize, _: u64, prot: i32) -> Result<*mut u8, Errno> {
            self.prots.lock().expect("lock").push(prot);
            self.next
                .lock()
                .expect("lock")
                .pop()
                .map(|a| a as *mut u8)
                .ok_or(Errno::ENOMEM)
        }
        fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
            self.unmaps.lock().expect("lock").push((addr as usize, len));
            if len > self.refuse_over {
                return Err(Errno::EINVAL);
            }
            Ok(())
        }
    }

    fn fake(addrs: &[usize], refuse_over: usize) -> Arc<Fake> {
        Arc::new(Fake {
            next: Mutex::new(addrs.iter().rev().copied().collect()),
            unmaps: Mutex::new(Vec::new()),
            prots: Mutex::new(Vec::new()),
            refuse_over,
        })
    }

    /// Mappings end to end (a length rounded up to a page reaching the next start) of one
    /// file go in one munmap; a gap, or another file, starts another; a run the file refuses
    /// goes mapping by mapping; a dropped mapping is not unmapped again.
    #[test]
    fn mappings_end_to_end_go_in_one_munmap() {
        const B: usize = 0x7000_0000;
        let f = fake(&[B + 0x3000, B, B + 0x1000, B + 0x9000], usize::MAX);
        let g = fake(&[B + 0xA000], usize::MAX);
        let dev: Arc<dyn DeviceFile> = f.clone();
        let other: Arc<dyn DeviceFile> = g.clone();
        let mut a = Mapped::new(dev.clone(), 100, 0).expect("map"); // B+0x3000, one page
        let mut b = Mapped::new(dev.clone(), 4096, 0).expect("map"); // B
        let mut c = Mapped::new(dev.clone(), 5000, 0).expect("map"); // B+0x1000, two pages
        let mut d = Mapped::new(dev.clone(), 4096, 0).expect("map"); // B+0x9000: a gap before
        let mut e = Mapped::new(other, 4096, 0).expect("map"); // right after d, another file
        unmap_together(&mut [&mut a, &mut b, &mut c, &mut d, &mut e]);
        assert_eq!(
            *f.unmaps.lock().expect("lock"),
            [(B, 0x4000), (B + 0x9000, 4096)]
        );
        assert_eq!(*g.unmaps.lock().expect("lock"), [(B + 0xA000, 4096)]);
        drop((a, b, c, d, e));
        assert_eq!(
            f.unmaps.lock().expect("lock").len(),
            2,
            "not unmapped again"
        );

        let f = fake(&[B, B + 0x1000], 4096);
        let dev: Arc<dyn DeviceFile> = f.clone();
        let mut a = Mapped::new(dev.clone(), 4096, 0).expect("map");
        let mut b = Mapped::new(dev, 4096, 0).expect("map");
        unmap_together(&mut [&mut b, &mut a]);
        assert_eq!(
            *f.unmaps.lock().expect("lock"),
            [(B, 0x2000), (B, 4096), (B + 0x1000, 4096)],
            "refused as a run: one by one"
        );
    }

    #[test]
    fn read_only_maps_ask_for_read_only() {
        let f = fake(&[0x7000_0000, 0x7000_1000], usize::MAX);
        let dev: Arc<dyn DeviceFile> = f.clone();
        let _rw = Mapped::new(dev.clone(), 4096, 0).expect("map");
        let _ro = Mapped::read_only(dev, 4096, 0).expect("map");
        assert_eq!(
            *f.prots.lock().expect("lock"),
            [neuron_abi::device::PROT_RW, neuron_abi::device::PROT_READ]
        );
    }
}
