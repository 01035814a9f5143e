//! Sparse device memory: only pages that were written use host memory; untouched pages read
//! as zeros (or as the pattern of the last HBM scrub over them). A trn2 device has 96 GiB of
//! HBM; a typical run touches a few MiB.
//!
//! A range user space maps (a device mem chunk, `driver-abi.md` §2.4) needs contiguous host
//! bytes: it becomes a *backed region*, materialised from the sparse pages when it is first
//! mapped and used by every later access (device DMA, ioctls, the user's loads and stores)
//! until the range is discarded (its chunk freed). Untouched memory stays sparse.

use crate::hostmem::HostRegion;
use crate::pagepool::{PageBuf, PagePool};
use std::collections::{BTreeMap, HashMap};

pub const PAGE: u64 = crate::pagepool::PAGE as u64;

/// Pages by number (`fasthash`: every DMA run looks a page up), their bytes 64 KiB-aligned
/// in 2 MiB chunks (`pagepool`).
type Pages = HashMap<u64, PageBuf, crate::fasthash::Build>;

#[derive(Debug, Default)]
pub struct SparseMem {
    pages: Pages,
    /// Backed regions by start address.
    backed: BTreeMap<u64, HostRegion>,
    /// `(start, end, pattern)`: absent pages in these ranges read as the little-endian u32
    /// pattern (HBM scrub); later entries win.
    background: Vec<(u64, u64, u32)>,
}

/// A page number and its bytes, remembered by a loop of short accesses
/// ([`SparseMem::page_cached`]).
pub type PageMemo<'a> = Option<(u64, &'a [u8])>;

/// Ask for the first cache lines (at most 8) of `len` bytes at `off` of a page.
#[inline]
fn prefetch_lines(page: &[u8], off: usize, len: usize) {
    let end = off.saturating_add(len).min(page.len());
    for o in (off..end).step_by(64).take(8) {
        crate::prefetch::line(page.as_ptr().wrapping_add(o));
    }
}

/// A piece of an access: `(Some((region start, offset in region)) | None for pages, addr, len)`.
type OwnedSeg = (Option<(u64, usize)>, u64, u64);

/// One piece of an access: `len` bytes at `addr`, served by a backed region or by pages.
enum Seg<'a> {
    Backed(&'a HostRegion, usize),
    Pages,
}

/// The pattern `background` (a [`SparseMem`]'s, later entries winning) names for `addr`.
fn background_at(background: &[(u64, u64, u32)], addr: u64) -> Option<u32> {
    background
        .iter()
        .rev()
        .find(|(s, e, _)| addr >= *s && addr < *e)
        .map(|b| b.2)
}

/// A page from the pool, in the background pattern where `background` (a [`SparseMem`]'s)
/// names one for it, else zeros.
fn blank_page(background: &[(u64, u64, u32)], pg: u64) -> PageBuf {
    let mut p = PagePool::global().page();
    if !background.is_empty() {
        for (i, w) in p.chunks_exact_mut(4).enumerate() {
            if let Some(v) = background_at(background, pg * PAGE + 4 * i as u64) {
                w.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    p
}

impl SparseMem {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of host memory in use.
    pub fn resident_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    /// The segments of `[addr, addr+len)`: `(seg, seg_addr, seg_len)`.
    fn segments(&self, addr: u64, len: u64) -> Vec<(Seg<'_>, u64, u64)> {
        let mut out = Vec::new();
        let end = addr.saturating_add(len);
        let mut a = addr;
        while a < end {
            if let Some((&s, r)) = self.backed.range(..=a).next_back() {
                let rend = s + r.len() as u64;
                if a < rend {
                    let n = rend.min(end) - a;
                    out.push((Seg::Backed(r, (a - s) as usize), a, n));
                    a += n;
                    continue;
                }
            }
            let next = self
                .backed
                .range(a..)
                .next()
                .map_or(end, |(&s, _)| s.min(end));
            out.push((Seg::Pages, a, next - a));
            a = next;
        }
        out
    }

    /// [`SparseMem::segments`] without borrows: backed pieces as (region start, offset).
    fn owned_segments(&self, addr: u64, len: u64) -> Vec<OwnedSeg> {
        self.segments(addr, len)
            .into_iter()
            .map(|(seg, a, n)| match seg {
                Seg::Backed(_, off) => (Some((a - off as u64, off)), a, n),
                Seg::Pages => (None, a, n),
            })
            .collect()
    }

    fn background_at(&self, addr: u64) -> Option<u32> {
        background_at(&self.background, addr)
    }

    fn blank_page(&self, pg: u64) -> PageBuf {
        blank_page(&self.background, pg)
    }

    fn read_pages(&self, addr: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(buf.len() - done);
            match self.pages.get(&pg) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                None if self.background.is_empty() => buf[done..done + n].fill(0),
                None => {
                    let p = self.blank_page(pg);
                    buf[done..done + n].copy_from_slice(&p[off..off + n]);
                }
            }
            done += n;
        }
    }

    fn write_pages(&mut self, addr: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(data.len() - done);
            let src = &data[done..done + n];
            if n == PAGE as usize && self.background.is_empty() {
                // A whole absent page is made from the bytes (not zeroed, then overwritten).
                match self.pages.entry(pg) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(PagePool::global().page_with(src));
                    }
                    std::collections::hash_map::Entry::Occupied(mut o) => {
                        o.get_mut().copy_from_slice(src);
                    }
                }
            } else if let Some(page) = self.page_made(pg) {
                page[off..off + n].copy_from_slice(src);
            }
            done += n;
        }
    }

    /// The bytes of page `pg` where it holds data and no backed region is registered (then
    /// every read of it is a plain copy from this slice); None otherwise (absent pages read as
    /// zeros or the background pattern, backed regions take part of the address space:
    /// [`SparseMem::read`] knows both). Lets a loop of short reads look each page up once.
    #[inline]
    pub fn page(&self, pg: u64) -> Option<&[u8]> {
        if !self.backed.is_empty() {
            return None;
        }
        self.pages.get(&pg).map(|p| &p[..])
    }

    /// The bytes of page `pg` to write into, the page made (blank, or in the background
    /// pattern) if absent, where no backed region is registered; None otherwise (then
    /// [`SparseMem::write`] knows where the bytes go). A write through it is what
    /// [`SparseMem::write`] would make of the same bytes.
    pub fn page_for_write(&mut self, pg: u64) -> Option<&mut [u8]> {
        if !self.backed.is_empty() {
            return None;
        }
        self.page_made(pg).map(|p| &mut p[..])
    }

    /// Page `pg`, made (blank, or in the background pattern) if absent: what every write
    /// to the pages goes into.
    fn page_made(&mut self, pg: u64) -> Option<&mut PageBuf> {
        let SparseMem {
            pages, background, ..
        } = self;
        // One lookup whether the page is there or not (a spill's 2 KiB rows look pages up
        // hundreds of times an execution).
        Some(
            pages
                .entry(pg)
                .or_insert_with(|| blank_page(background, pg)),
        )
    }

    /// Ask for the first cache lines of `[addr, addr + len)` early (at most 8 of them), for
    /// a read that comes soon: a DMA's strided rows each start a new stream too short for
    /// the hardware prefetcher. A hint only; absent pages and backed regions are skipped.
    pub fn prefetch(&self, addr: u64, len: usize) {
        if !self.backed.is_empty() {
            return;
        }
        let (pg, off) = (addr / PAGE, (addr % PAGE) as usize);
        if let Some(p) = self.pages.get(&pg) {
            prefetch_lines(p, off, len);
        }
    }

    /// [`SparseMem::page`] of the page holding `addr`, from `memo` when the last address
    /// asked for lay in the same page, else looked up and remembered there: a DMA's rows are
    /// short and strided, so consecutive ones mostly share a page.
    #[inline]
    pub fn page_cached<'a>(&'a self, memo: &mut PageMemo<'a>, addr: u64) -> Option<&'a [u8]> {
        let pg = addr / PAGE;
        if memo.is_none_or(|(p, _)| p != pg) {
            *memo = self.page(pg).map(|b| (pg, b));
        }
        memo.map(|(_, b)| b)
    }

    /// [`SparseMem::prefetch`] with the page looked up through `memo`
    /// ([`SparseMem::page_cached`]).
    #[inline]
    pub fn prefetch_cached<'a>(&'a self, memo: &mut PageMemo<'a>, addr: u64, len: usize) {
        match self.page_cached(memo, addr) {
            Some(p) => prefetch_lines(p, (addr % PAGE) as usize, len),
            None => self.prefetch(addr, len),
        }
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) {
        if self.backed.is_empty() {
            return self.read_pages(addr, buf);
        }
        let mut at = 0usize;
        for (seg, a, n) in self.segments(addr, buf.len() as u64) {
            let n = n as usize;
            match seg {
                Seg::Backed(r, off) => {
                    r.read(off, &mut buf[at..at + n]);
                }
                Seg::Pages => self.read_pages(a, &mut buf[at..at + n]),
            }
            at += n;
        }
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) {
        if self.backed.is_empty() {
            return self.write_pages(addr, data);
        }
        let segs = self.owned_segments(addr, data.len() as u64);
        let mut at = 0usize;
        for (b, a, n) in segs {
            let n = n as usize;
            match b {
                Some((start, off)) => {
                    if let Some(r) = self.backed.get(&start) {
                        r.write(off, &data[at..at + n]);
                    }
                }
                None => self.write_pages(a, &data[at..at + n]),
            }
            at += n;
        }
    }

    /// Fill with a byte (zero fills of untouched pages stay sparse).
    pub fn fill(&mut self, addr: u64, len: u64, byte: u8) {
        let segs = self.owned_segments(addr, len);
        for (b, a, n) in segs {
            match b {
                Some((start, off)) => {
                    if let Some(r) = self.backed.get(&start) {
                        r.fill(off, n as usize, byte);
                    }
                }
                None => self.fill_pages(a, n, byte),
            }
        }
    }

    fn fill_pages(&mut self, addr: u64, len: u64, byte: u8) {
        let mut done = 0u64;
        while done < len {
            let a = addr + done;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE - off as u64).min(len - done) as usize;
            if byte == 0 && !self.pages.contains_key(&pg) && self.background_at(a).is_none() {
                done += n as u64;
                continue;
            }
            if let Some(page) = self.page_made(pg) {
                page[off..off + n].fill(byte);
            }
            done += n as u64;
        }
    }

    /// Drop the pages fully inside `[addr, addr+len)` (freed memory returns to the host), and
    /// the backed regions fully inside it.
    pub fn discard(&mut self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let gone: Vec<u64> = self
            .backed
            .range(addr..end)
            .filter(|(s, r)| **s + r.len() as u64 <= end)
            .map(|(s, _)| *s)
            .collect();
        for s in gone {
            self.backed.remove(&s);
        }
        let first = addr.div_ceil(PAGE);
        let end = end / PAGE;
        if end > first && end - first < self.pages.len() as u64 * 4 {
            for pg in first..end {
                self.pages.remove(&pg);
            }
        } else {
            self.pages.retain(|pg, _| *pg < first || *pg >= end);
        }
    }

    /// The backed region starting at `addr`: `(pointer, length)`.
    pub fn backing(&self, addr: u64) -> Option<(*mut u8, usize)> {
        self.backed.get(&addr).map(|r| (r.as_ptr(), r.len()))
    }

    /// Give `[addr, addr + region.len())` the contiguous backing `region`, initialised from the
    /// current contents. Refused (region returned) if the range overlaps an existing backed
    /// region.
    pub fn back(&mut self, addr: u64, region: HostRegion) -> Result<*mut u8, HostRegion> {
        let len = region.len() as u64;
        let end = addr.saturating_add(len);
        let overlaps = self
            .backed
            .range(..end)
            .next_back()
            .is_some_and(|(s, r)| *s + r.len() as u64 > addr);
        if overlaps || len == 0 {
            return Err(region);
        }
        // Copy present pages (and scrub patterns) in; absent memory stays as the region's zeros.
        let mut pg = addr / PAGE;
        let mut tmp = vec![0u8; PAGE as usize];
        while pg * PAGE < end {
            let (s, e) = ((pg * PAGE).max(addr), ((pg + 1) * PAGE).min(end));
            if self.pages.contains_key(&pg) || self.background_at(s).is_some() {
                let t = &mut tmp[..(e - s) as usize];
                self.read_pages(s, t);
                region.write((s - addr) as usize, t);
            }
            pg += 1;
        }
        // The region now holds those bytes: pages wholly inside it are never read again, so
        // free them rather than keep the range in host memory twice.
        let (first, last) = (addr.div_ceil(PAGE), end / PAGE);
        if last > first && last - first < self.pages.len() as u64 {
            for pg in first..last {
                self.pages.remove(&pg);
            }
        } else {
            self.pages.retain(|pg, _| *pg < first || *pg >= last);
        }
        let p = region.as_ptr();
        self.backed.insert(addr, region);
        Ok(p)
    }

    /// HBM scrub: every byte of `[addr, addr+len)` becomes the little-endian u32 `pattern`
    /// (aligned to `addr`), without materialising untouched pages.
    pub fn scrub(&mut self, addr: u64, len: u64, pattern: u32) {
        let end = addr.saturating_add(len);
        let first = addr.div_ceil(PAGE);
        let last = end / PAGE;
        self.pages.retain(|pg, _| *pg < first || *pg >= last);
        self.background.retain(|(s, e, _)| *s < addr || *e > end);
        if pattern != 0 {
            self.background.push((addr, end, pattern));
        }
        // Partial pages at the edges and backed regions: write the pattern.
        let word = pattern.to_le_bytes();
        let edge = |m: &mut SparseMem, s: u64, e: u64| {
            if e > s {
                let buf: Vec<u8> = (s..e).map(|a| word[((a - addr) % 4) as usize]).collect();
                m.write(s, &buf);
            }
        };
        edge(self, addr, (first * PAGE).min(end));
        edge(self, (last * PAGE).max(addr), end);
        let regions: Vec<(u64, u64)> = self
            .backed
            .iter()
            .map(|(s, r)| (*s, *s + r.len() as u64))
            .filter(|(s, e)| *e > addr && *s < end)
            .collect();
        for (s, e) in regions {
            edge(self, s.max(addr), e.min(end));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole pages written into absent pages, beside partial ones: every byte reads back as
    /// written and the rest of a partly written page as zeros (whatever the pool's reused
    /// slots held before).
    #[test]
    fn whole_page_writes_make_pages_from_the_bytes() {
        let mut dirty = SparseMem::new();
        dirty.fill(0, 4 * PAGE, 0xEE);
        drop(dirty);
        let mut m = SparseMem::new();
        let data: Vec<u8> = (0..3 * PAGE + 300).map(|i| (i % 253) as u8).collect();
        m.write(PAGE - 100, &data);
        assert_eq!(m.resident_bytes(), 5 * PAGE);
        let mut back = vec![0u8; data.len()];
        m.read(PAGE - 100, &mut back);
        assert_eq!(back, data);
        let mut edge = vec![1u8; PAGE as usize - 100];
        m.read(0, &mut edge);
        assert!(edge.iter().all(|b| *b == 0), "before the write: zeros");
        let mut tail = vec![1u8; 100];
        m.read(PAGE - 100 + data.len() as u64, &mut tail);
        assert!(tail.iter().all(|b| *b == 0), "after the write: zeros");
        // A page already there is overwritten in place.
        m.write(2 * PAGE, &vec![9u8; PAGE as usize]);
        let mut one = vec![0u8; PAGE as usize];
        m.read(2 * PAGE, &mut one);
        assert!(one.iter().all(|b| *b == 9));
    }

    #[test]
    fn sparse_read_write_across_pages() {
        let mut m = SparseMem::new();
        let mut b = [1u8; 8];
        m.read(0x5_0000_0000, &mut b);
        assert_eq!(b, [0; 8]);
        assert_eq!(m.resident_bytes(), 0);
        let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        m.write(PAGE - 100, &data);
        assert_eq!(m.resident_bytes(), 2 * PAGE);
        let mut back = vec![0u8; 200];
        m.read(PAGE - 100, &mut back);
        assert_eq!(back, data);
        m.discard(0, 4 * PAGE);
        assert_eq!(m.resident_bytes(), 0);
        m.fill(10, 3 * PAGE, 0);
        assert_eq!(m.resident_bytes(), 0);
        m.fill(10, 5, 7);
        m.read(8, &mut b);
        assert_eq!(b, [0, 0, 7, 7, 7, 7, 7, 0]);
    }

    /// A prefetch hint names any range — absent pages, a page's last bytes, past the end of
    /// the address space, huge lengths — and changes nothing: no page is made resident and
    /// every byte reads as before.
    #[test]
    fn prefetch_hints_change_nothing() {
        let mut m = SparseMem::new();
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        m.write(PAGE - 150, &data);
        let resident = m.resident_bytes();
        for (addr, len) in [
            (0, 64),
            (PAGE - 150, 300),
            (PAGE - 1, usize::MAX),
            (5 * PAGE, 4096),
            (u64::MAX - 3, 1 << 20),
            (PAGE, 0),
        ] {
            m.prefetch(addr, len);
        }
        assert_eq!(m.resident_bytes(), resident);
        let mut back = vec![0u8; 300];
        m.read(PAGE - 150, &mut back);
        assert_eq!(back, data);
    }

    /// A page's bytes are what reads of it give; absent pages, and every page once a region
    /// is backed, have none to hand out (their reads are not plain copies).
    #[test]
    fn pages_hand_out_the_bytes_reads_give() {
        let mut m = SparseMem::new();
        let data: Vec<u8> = (0..300u32).map(|i| (i * 13) as u8).collect();
        m.write(3 * PAGE + 100, &data);
        let p = m.page(3).expect("written page");
        assert_eq!(p.len(), PAGE as usize);
        assert_eq!(&p[100..400], &data[..]);
        assert!(m.page(4).is_none(), "absent page");
        m.scrub(4 * PAGE, 4 * PAGE, 0xdead_beef);
        assert!(m.page(5).is_none(), "absent page over a background pattern");
        assert_eq!(&m.page(3).expect("still there")[100..400], &data[..]);
        let r = HostRegion::new(8192).expect("region");
        m.back(0x100_0000, r).expect("backed");
        assert!(m.page(3).is_none(), "a backed region is registered");
    }

    #[test]
    fn backed_regions_take_over_their_range() {
        let mut m = SparseMem::new();
        m.write(0x10_0000 + 8, &[1, 2, 3, 4]);
        let r = HostRegion::new(8192).expect("region");
        let p = m.back(0x10_0000, r).expect("backed");
        assert!(!p.is_null());
        let mut b = [0u8; 4];
        m.read(0x10_0000 + 8, &mut b);
        assert_eq!(b, [1, 2, 3, 4], "materialised from the pages");
        // A write spanning the region's end lands half in the region, half in pages.
        m.write(0x10_0000 + 8190, &[9, 9, 9, 9]);
        let mut c = [0u8; 6];
        m.read(0x10_0000 + 8189, &mut c);
        assert_eq!(c, [0, 9, 9, 9, 9, 0]);
        let again = HostRegion::new(4096).expect("region");
        assert!(m.back(0x10_0000 + 4096, again).is_err(), "overlap refused");
        assert!(m.backing(0x10_0000).is_some());
        m.discard(0x10_0000, 8192);
        assert!(m.backing(0x10_0000).is_none());
    }

    /// Accesses inside one region, outside all, and across region edges read and write the
    /// bytes a flat shadow holds (reference: a plain `Vec<u8>`).
    #[test]
    fn accesses_in_one_piece_or_across_regions_match_a_flat_shadow() {
        let base = 3 * PAGE - 5000;
        let span = 4 * PAGE;
        let mut m = SparseMem::new();
        let mut shadow = vec![0u8; span as usize];
        // Two regions, a gap of pages between and around them.
        let regions = [(PAGE - 3000, 12_000usize), (2 * PAGE + 100, 9_000)];
        for (off, len) in regions {
            m.back(base + off, HostRegion::new(len).expect("region"))
                .expect("backed");
        }
        let mut s = 0x2545_f491_u64;
        let mut next = |n: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % n
        };
        for i in 0..4000u32 {
            let len = 1 + next(if i % 4 == 0 { 20_000 } else { 300 });
            let off = next(span - len);
            let at = off as usize..(off + len) as usize;
            if i % 2 == 0 {
                let data: Vec<u8> = (0..len).map(|_| next(256) as u8).collect();
                m.write(base + off, &data);
                shadow[at].copy_from_slice(&data);
            } else {
                let mut got = vec![0u8; len as usize];
                m.read(base + off, &mut got);
                assert_eq!(got, shadow[at], "read of {len} at +{off}");
            }
        }
    }

    #[test]
    fn backing_a_range_frees_the_pages_inside_it() {
        let mut m = SparseMem::new();
        // Pages 1..=3 written; back pages 1 and 2 and half of 3.
        m.write(PAGE, &vec![7u8; 3 * PAGE as usize]);
        assert_eq!(m.resident_bytes(), 3 * PAGE);
        let len = (2 * PAGE + PAGE / 2) as usize;
        m.back(PAGE, HostRegion::new(len).expect("region"))
            .expect("backed");
        assert_eq!(
            m.resident_bytes(),
            PAGE,
            "only the partly covered page stays"
        );
        let mut b = vec![0u8; 3 * PAGE as usize];
        m.read(PAGE, &mut b);
        assert!(
            b.iter().all(|&x| x == 7),
            "contents kept, inside and past the region"
        );
    }

    #[test]
    fn scrub_sets_a_background_without_materialising() {
        let mut m = SparseMem::new();
        m.write(0x1_0000, &[5; 16]);
        m.scrub(0x100, 4 * PAGE, 0xdead_beef);
        assert_eq!(m.resident_bytes(), 2 * PAGE, "only the edge pages exist");
        let mut b = [0u8; 8];
        m.read(0x2_0000, &mut b);
        assert_eq!(b, [0xef, 0xbe, 0xad, 0xde, 0xef, 0xbe, 0xad, 0xde]);
        m.read(0xfc, &mut b);
        assert_eq!(b, [0, 0, 0, 0, 0xef, 0xbe, 0xad, 0xde]);
        m.scrub(0x100, 4 * PAGE, 0);
        m.read(0x2_0000, &mut b);
        assert_eq!(b, [0; 8]);
    }
}
