//! Mem chunks: the driver's allocator (`driver-abi.md` §8) — handles, placement, lifespans.

use neuron_abi::Errno;
use std::collections::{BTreeMap, HashMap};

pub const PAGE: u64 = 4096;

/// When a chunk is freed automatically (`driver-abi.md` §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifespan {
    /// Freed when the allocating process closes its last fd.
    CurProcess,
    /// Driver-owned (notification queues): survives the process.
    Device,
}

#[derive(Debug, Clone)]
pub struct Chunk {
    pub handle: u64,
    /// Device-visible physical address (host chunks carry the arch host bit).
    pub pa: u64,
    pub size: u64,
    pub host: bool,
    pub hbm: u32,
    /// The NC label given at allocation (selects the H2T queue of driver copies).
    pub nc: u32,
    pub mem_type: u32,
    pub pid: u32,
    pub refcount: u32,
    pub lifespan: Lifespan,
    /// User mappings outstanding; the PA stays reserved until they are gone.
    pub maps: u32,
    /// Freed by its owner while still mapped.
    pub zombie: bool,
}

/// A first-fit range allocator.
#[derive(Debug, Clone)]
pub struct RangeAlloc {
    free: BTreeMap<u64, u64>,
}

impl RangeAlloc {
    pub fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(start, len);
        }
        RangeAlloc { free }
    }

    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let align = align.max(PAGE);
        let (base, len, at) = self.free.iter().find_map(|(&b, &l)| {
            let at = b.checked_add(align - 1)? / align * align;
            (at.checked_add(size)? <= b + l).then_some((b, l, at))
        })?;
        self.free.remove(&base);
        if at > base {
            self.free.insert(base, at - base);
        }
        let end = at + size;
        if end < base + len {
            self.free.insert(end, base + len - end);
        }
        Some(at)
    }

    pub fn release(&mut self, at: u64, size: u64) {
        let mut start = at;
        let mut len = size;
        if let Some((&pb, &pl)) = self.free.range(..at).next_back() {
            if pb + pl == at {
                self.free.remove(&pb);
                start = pb;
                len += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(at + size)) {
            self.free.remove(&(at + size));
            len += nl;
        }
        self.free.insert(start, len);
    }
}

/// Bytes of one memory category as sysfs `memory_usage` shows them: `present` now, `peak` the
/// most `present` ever was, `total` every byte ever allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemCounter {
    pub total: u64,
    pub present: u64,
    pub peak: u64,
}

impl MemCounter {
    fn add(&mut self, n: u64) {
        self.total = self.total.saturating_add(n);
        self.present = self.present.saturating_add(n);
        self.peak = self.peak.max(self.present);
    }
    fn sub(&mut self, n: u64) {
        self.present = self.present.saturating_sub(n);
    }
}

/// A sysfs memory counter a chunk counts under: its side (host or device), its category
/// (`None`: all of the side) and NC label (`None`: device-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemKey {
    pub host: bool,
    pub category: Option<&'static str>,
    pub nc: Option<u32>,
}

/// The per-device chunk table.
#[derive(Debug)]
pub struct ChunkTable {
    /// Bytes by (side, type, NC), kept as chunks come and go (the driver's mc_alloc/mc_free
    /// sysfs accounting).
    usage: BTreeMap<MemKey, MemCounter>,
    chunks: HashMap<u64, Chunk>,
    /// Freed handles, reused last-in first-out as the driver does.
    free_handles: Vec<u64>,
    next_handle: u64,
    by_pa: BTreeMap<u64, u64>,
    hbm: Vec<RangeAlloc>,
    host: RangeAlloc,
    host_bit: u64,
}

/// Host bus addresses handed out for host chunks: below 4 GiB, as `GFP_DMA32` gives.
const HOST_BUS_START: u64 = 0x1000_0000;
const HOST_BUS_END: u64 = 0x1_0000_0000;

impl ChunkTable {
    pub fn new(hbm: &[(u64, u64)], host_bit: u64) -> Self {
        ChunkTable {
            usage: BTreeMap::new(),
            chunks: HashMap::new(),
            free_handles: Vec::new(),
            next_handle: 1,
            by_pa: BTreeMap::new(),
            hbm: hbm.iter().map(|&(b, l)| RangeAlloc::new(b, l)).collect(),
            host: RangeAlloc::new(HOST_BUS_START, HOST_BUS_END - HOST_BUS_START),
            host_bit,
        }
    }

    pub fn hbm_count(&self) -> usize {
        self.hbm.len()
    }

    /// Allocate a chunk. Returns a copy of the new chunk.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc(
        &mut self,
        size: u64,
        align: u64,
        host: bool,
        hbm: u32,
        nc_id: u32, // the driver keeps it only as a label (accounting, H2T queue choice)
        mem_type: u32,
        pid: u32,
        lifespan: Lifespan,
    ) -> Result<Chunk, Errno> {
        if size == 0 {
            return Err(Errno::EINVAL);
        }
        let size = size.checked_add(PAGE - 1).ok_or(Errno::EINVAL)? / PAGE * PAGE;
        if host && align != 0 {
            return Err(Errno::EINVAL);
        }
        if align != 0 && !align.is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        let pa = if host {
            self.host.alloc(size, PAGE).ok_or(Errno::ENOMEM)? | self.host_bit
        } else {
            self.hbm
                .get_mut(hbm as usize)
                .ok_or(Errno::EINVAL)?
                .alloc(size, align)
                .ok_or(Errno::ENOMEM)?
        };
        let handle = self.free_handles.pop().unwrap_or_else(|| {
            let h = self.next_handle;
            self.next_handle += 1;
            h
        });
        let c = Chunk {
            handle,
            pa,
            size,
            host,
            hbm: if host { 0 } else { hbm },
            nc: nc_id,
            mem_type,
            pid,
            refcount: 1,
            lifespan,
            maps: 0,
            zombie: false,
        };
        self.by_pa.insert(pa, handle);
        for k in Self::keys(&c) {
            self.usage.entry(k).or_default().add(c.size);
        }
        self.chunks.insert(handle, c.clone());
        Ok(c)
    }

    /// The driver's two counters per chunk: its category (device categories per NC, host
    /// categories device-wide) and its side's total for its NC label.
    fn keys(c: &Chunk) -> [MemKey; 2] {
        let category = crate::sysfs::category(c.host, c.mem_type);
        [
            MemKey {
                host: c.host,
                category: Some(category),
                nc: (!c.host).then_some(c.nc),
            },
            MemKey {
                host: c.host,
                category: None,
                nc: Some(c.nc),
            },
        ]
    }

    /// Bytes per sysfs memory counter since the table was created.
    pub fn usage(&self) -> &BTreeMap<MemKey, MemCounter> {
        &self.usage
    }

    pub fn get(&self, handle: u64) -> Option<&Chunk> {
        self.chunks.get(&handle).filter(|c| !c.zombie)
    }

    /// The live chunk containing device address `pa`.
    pub fn find_pa(&self, pa: u64) -> Option<&Chunk> {
        let (_, h) = self.by_pa.range(..=pa).next_back()?;
        let c = self.chunks.get(h)?;
        (pa < c.pa + c.size).then_some(c)
    }

    /// Drop one reference. Returns the chunk if it is now gone (its memory must be released
    /// by the caller), or None if references or mappings remain.
    pub fn free(&mut self, handle: u64) -> Result<Option<Chunk>, Errno> {
        let c = self
            .chunks
            .get_mut(&handle)
            .filter(|c| !c.zombie)
            .ok_or(Errno::EINVAL)?;
        c.refcount -= 1;
        if c.refcount > 0 {
            return Ok(None);
        }
        if c.maps > 0 {
            c.zombie = true;
            return Ok(None);
        }
        Ok(self.remove(handle))
    }

    fn remove(&mut self, handle: u64) -> Option<Chunk> {
        let c = self.chunks.remove(&handle)?;
        self.by_pa.remove(&c.pa);
        for k in Self::keys(&c) {
            if let Some(u) = self.usage.get_mut(&k) {
                u.sub(c.size);
            }
        }
        if c.host {
            self.host.release(c.pa & !self.host_bit, c.size);
        } else if let Some(a) = self.hbm.get_mut(c.hbm as usize) {
            a.release(c.pa, c.size);
        }
        self.free_handles.push(handle);
        Some(c)
    }

    /// Record or drop a user mapping of the chunk at `pa`. Dropping the last mapping of a
    /// zombie releases it (returned).
    pub fn map_ref(&mut self, pa: u64, delta: i32) -> Option<Chunk> {
        let (&base, &h) = self.by_pa.range(..=pa).next_back()?;
        let c = self.chunks.get_mut(&h)?;
        if pa != base {
            return None;
        }
        c.maps = c.maps.saturating_add_signed(delta);
        if c.maps == 0 && c.zombie {
            return self.remove(h);
        }
        None
    }

    /// Handles of a process's chunks with the given lifespan.
    pub fn owned_by(&self, pid: u32, lifespan: Lifespan) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .chunks
            .values()
            .filter(|c| c.pid == pid && c.lifespan == lifespan && !c.zombie)
            .map(|c| c.handle)
            .collect();
        v.sort_unstable();
        v
    }

    /// Force-release a chunk regardless of its refcount (process exit).
    pub fn release_all_refs(&mut self, handle: u64) -> Option<Chunk> {
        let c = self.chunks.get_mut(&handle)?;
        c.refcount = 0;
        if c.maps > 0 {
            c.zombie = true;
            return None;
        }
        self.remove(handle)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.values().filter(|c| !c.zombie)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_recycled_lifo_and_ranges_coalesce() {
        let mut t = ChunkTable::new(&[(0x100_0000, 0x1000_0000)], 0x4000_0000_0000);
        let a = t
            .alloc(1, 0, false, 0, 0, 9, 1, Lifespan::CurProcess)
            .expect("a");
        let b = t
            .alloc(5000, 0, false, 0, 0, 9, 1, Lifespan::CurProcess)
            .expect("b");
        assert_eq!((a.handle, b.handle), (1, 2));
        assert_eq!(a.size, 4096);
        assert_eq!(b.size, 8192);
        assert_eq!(b.pa, a.pa + 4096);
        assert!(t.free(a.handle).expect("free").is_some());
        let c = t
            .alloc(4096, 0, false, 0, 0, 9, 1, Lifespan::CurProcess)
            .expect("c");
        assert_eq!(c.handle, a.handle, "LIFO handle reuse");
        assert_eq!(c.pa, a.pa, "first fit reuses the hole");
        let h = t
            .alloc(100, 0, true, 0, 0, 2, 1, Lifespan::CurProcess)
            .expect("host");
        assert_eq!(h.pa & 0x4000_0000_0000, 0x4000_0000_0000);
        assert!(h.pa & !0x4000_0000_0000 < 0x1_0000_0000);
        assert_eq!(
            t.alloc(100, 4096, true, 0, 0, 2, 1, Lifespan::CurProcess)
                .map(|_| ()),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.alloc(0, 0, false, 0, 0, 2, 1, Lifespan::CurProcess)
                .map(|_| ()),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.alloc(4096, 0, false, 3, 0, 2, 1, Lifespan::CurProcess)
                .map(|_| ()),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            t.alloc(1 << 40, 0, false, 0, 0, 2, 1, Lifespan::CurProcess)
                .map(|_| ()),
            Err(Errno::ENOMEM)
        );
        let big = t
            .alloc(1 << 20, 1 << 20, false, 0, 0, 2, 1, Lifespan::CurProcess)
            .expect("aligned");
        assert_eq!(big.pa % (1 << 20), 0);
        assert_eq!(t.find_pa(big.pa + 100).map(|c| c.handle), Some(big.handle));
        assert_eq!(t.free(999).map(|_| ()), Err(Errno::EINVAL));
    }

    #[test]
    fn usage_counts_present_peak_and_total_by_type_and_nc() {
        let mut t = ChunkTable::new(&[(0x100_0000, 0x1000_0000)], 0x4000_0000_0000);
        let key = MemKey {
            host: false,
            category: Some("tensors"),
            nc: Some(1),
        };
        let a = t
            .alloc(4096, 0, false, 0, 1, 9, 1, Lifespan::CurProcess)
            .expect("a");
        let b = t
            .alloc(8192, 0, false, 0, 1, 9, 1, Lifespan::CurProcess)
            .expect("b");
        let _ = t.free(a.handle).expect("free");
        let u = t.usage()[&key];
        assert_eq!((u.present, u.peak, u.total), (8192, 12288, 12288));
        // A mapped chunk's bytes stay present until the mapping is gone.
        t.map_ref(b.pa, 1);
        let _ = t.free(b.handle).expect("free");
        assert_eq!(t.usage()[&key].present, 8192);
        assert!(t.map_ref(b.pa, -1).is_some());
        assert_eq!(t.usage()[&key].present, 0);
        assert_eq!(t.usage().len(), 2, "the category and the side's total");
    }
}
