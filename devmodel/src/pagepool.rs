//! Host memory for the sparse HBM pages (`hbm`): 64 KiB pages carved out of 2 MiB chunks,
//! which may ask the kernel for transparent huge pages (`MADV_HUGEPAGE`,
//! `NEURON_EMU_HUGE_PAGES=on`). A DMA's strided rows (a KV cache's 256 bytes every 4 KiB)
//! touch a new 4 KiB host page per row, each a TLB miss; in a huge page one TLB entry covers
//! 32 device pages. Off by default: in a VM whose free memory goes back to the host, each
//! huge page's first touch can cost milliseconds (`docs/performance.md`). Where a chunk cannot
//! be mapped a page comes from the heap. A chunk whose pages are all freed goes back to the
//! kernel, unless the process keeps empty chunks for later pages ([`PagePool::keep_empty`]:
//! a fault campaign's fresh device per experiment).
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of one page (`hbm::PAGE`).
pub const PAGE: usize = 64 * 1024;
/// Bytes of one chunk: one x86-64 huge page.
const CHUNK: usize = 2 << 20;
/// Pages per chunk (one bit each in a `u32`).
const PER_CHUNK: usize = CHUNK / PAGE;
const ALL: u32 = u32::MAX >> (32 - PER_CHUNK);

/// A chunk's base address and which of its pages are free, and free and never used (those
/// are still the kernel's zeros).
#[derive(Debug)]
struct Chunk {
    base: usize,
    free: u32,
    fresh: u32,
    /// Listed in `Pools::partial`.
    listed: bool,
}

#[derive(Debug, Default)]
struct Pools {
    /// By index; `None` once unmapped (indices are not reused, so a stale `partial` entry can
    /// only name an unmapped chunk or the chunk it was listed for).
    chunks: Vec<Option<Chunk>>,
    /// Chunks that may have free pages, the last one used first.
    partial: Vec<usize>,
}

impl Pools {
    /// Give chunk `i`, all of whose pages are free, back to the kernel.
    fn unmap(&mut self, i: usize) {
        if let Some(c) = self.chunks.get_mut(i).and_then(Option::take) {
            // SAFETY: the chunk was mapped by `map_chunk` with this length, and no page
            // points into it any more (all are free).
            unsafe { libc::munmap(c.base as *mut libc::c_void, CHUNK) };
        }
    }
}

/// A set of chunks pages are taken from ([`PagePool::global`] for the device model).
#[derive(Debug)]
pub struct PagePool {
    inner: Mutex<Pools>,
    /// Chunks kept mapped once all their pages are free ([`PagePool::keep_empty`]).
    keep: AtomicUsize,
}

static GLOBAL: PagePool = PagePool::new();

impl Default for PagePool {
    fn default() -> Self {
        Self::new()
    }
}

impl PagePool {
    pub const fn new() -> PagePool {
        PagePool {
            inner: Mutex::new(Pools {
                chunks: Vec::new(),
                partial: Vec::new(),
            }),
            keep: AtomicUsize::new(0),
        }
    }

    /// Keep up to `n` chunks mapped once all their pages are free, for pages taken later
    /// (0, the default: a chunk goes back to the kernel with its last page; setting 0
    /// returns those kept). For a process that makes a fresh device per run, e.g. a fault
    /// campaign: each page of a new chunk cost a fault to allocate, while a page of a kept
    /// chunk is only zeroed (a reused slot always is).
    pub fn keep_empty(&self, n: usize) {
        self.keep.store(n, Ordering::SeqCst);
        let mut p = self.lock();
        let mut empty = 0;
        for i in 0..p.chunks.len() {
            if let Some(c) = &p.chunks[i] {
                if c.free == ALL {
                    empty += 1;
                    if empty > n {
                        p.unmap(i);
                    }
                }
            }
        }
    }

    /// The process's pool.
    pub fn global() -> &'static PagePool {
        &GLOBAL
    }

    /// Chunks mapped now.
    pub fn mapped_chunks(&self) -> usize {
        self.lock().chunks.iter().flatten().count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        // A panic while holding the lock leaves the bookkeeping consistent (no step of it
        // panics midway), so a poisoned lock is taken over.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A zeroed page: from a chunk, or from the heap if no chunk could be mapped.
    pub fn page(&'static self) -> PageBuf {
        self.page_filled(|ptr, fresh| {
            if !fresh {
                // SAFETY: the slot lies inside its chunk's mapping and was just taken, so
                // nothing else refers to it (zeroed outside the pool's lock).
                unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, PAGE) };
            }
        })
        .unwrap_or_else(|| PageBuf {
            at: At::Heap(vec![0u8; PAGE].into_boxed_slice()),
        })
    }

    /// A page holding `data` (exactly a page of bytes; otherwise a zeroed page with `data`
    /// at its start): taken and written once, not zeroed first (a model's inputs and weights
    /// are copied in whole pages: the zeroing was 12% of the samples of a 384 MiB model's
    /// fault campaign, though without it the copy pays the cache misses: 0-5% of its CPU).
    pub fn page_with(&'static self, data: &[u8]) -> PageBuf {
        if data.len() != PAGE {
            let mut p = self.page();
            let n = data.len().min(PAGE);
            p[..n].copy_from_slice(&data[..n]);
            return p;
        }
        self.page_filled(|ptr, _| {
            // SAFETY: the slot lies inside its chunk's mapping and was just taken, so nothing
            // else refers to it; `data` is exactly a page long.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr(), PAGE) };
        })
        .unwrap_or_else(|| PageBuf {
            at: At::Heap(data.to_vec().into_boxed_slice()),
        })
    }

    /// A page of a chunk, `fill` given its address and whether it was never used (still the
    /// kernel's zeros) to set its bytes; None where no chunk could be mapped.
    fn page_filled(&'static self, fill: impl FnOnce(NonNull<u8>, bool)) -> Option<PageBuf> {
        let (chunk, slot, ptr, fresh) = self.take()?;
        fill(ptr, fresh);
        Some(PageBuf {
            at: At::Pool {
                pool: self,
                ptr,
                chunk,
                slot,
            },
        })
    }

    /// A free page's chunk, slot and address, and whether it was never used (still the
    /// kernel's zeros).
    fn take(&self) -> Option<(usize, u8, NonNull<u8>, bool)> {
        let mut p = self.lock();
        loop {
            let Some(&i) = p.partial.last() else {
                let base = map_chunk()?;
                let i = p.chunks.len();
                p.chunks.push(Some(Chunk {
                    base,
                    free: ALL,
                    fresh: ALL,
                    listed: true,
                }));
                p.partial.push(i);
                continue;
            };
            let Some(c) = p.chunks.get_mut(i).and_then(Option::as_mut) else {
                p.partial.pop();
                continue;
            };
            if c.free == 0 {
                c.listed = false;
                p.partial.pop();
                continue;
            }
            let slot = c.free.trailing_zeros();
            let bit = 1u32 << slot;
            c.free &= !bit;
            let fresh = c.fresh & bit != 0;
            c.fresh &= !bit;
            let addr = c.base + slot as usize * PAGE;
            let ptr = NonNull::new(addr as *mut u8)?;
            return Some((i, slot as u8, ptr, fresh));
        }
    }

    /// Return a page; unmap its chunk if it was the chunk's last.
    fn give(&self, chunk: usize, slot: u8) {
        let mut p = self.lock();
        let Some(c) = p.chunks.get_mut(chunk).and_then(Option::as_mut) else {
            return;
        };
        c.free |= 1 << slot;
        let (empty, listed) = (c.free == ALL, c.listed);
        let keep = self.keep.load(Ordering::Relaxed);
        // An empty chunk stays mapped while at most `keep` are (this one counted).
        let stays = !empty
            || (keep > 0 && p.chunks.iter().flatten().filter(|c| c.free == ALL).count() <= keep);
        if !stays {
            p.unmap(chunk);
        } else if !listed {
            if let Some(c) = p.chunks.get_mut(chunk).and_then(Option::as_mut) {
                c.listed = true;
            }
            p.partial.push(chunk);
        }
    }
}

/// The environment variable that asks for huge pages: `on`, or `off` (the default).
pub const ENV: &str = "NEURON_EMU_HUGE_PAGES";

/// Whether chunks ask for huge pages (`NEURON_EMU_HUGE_PAGES`, read once per process; an
/// unknown value is reported once and treated as `off`).
pub fn huge_pages_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let v = std::env::var(ENV).unwrap_or_default();
        let v = v.trim();
        if !matches!(v, "" | "on" | "off") {
            tracing::warn!("{ENV}={v:?} is not on or off: using off");
        }
        v == "on"
    })
}

/// A fresh chunk: `CHUNK` zero bytes on a `CHUNK` boundary, advised for huge pages where
/// they are asked for.
fn map_chunk() -> Option<usize> {
    let len = 2 * CHUNK;
    // SAFETY: a new private anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let start = p as usize;
    let base = start.next_multiple_of(CHUNK);
    // SAFETY: both pieces lie in the mapping just made, outside the aligned chunk kept; the
    // advice names only the chunk (a refusal, e.g. huge pages disabled, leaves it ordinary
    // memory).
    unsafe {
        if base > start {
            libc::munmap(p, base - start);
        }
        let tail = start + len - (base + CHUNK);
        if tail > 0 {
            libc::munmap((base + CHUNK) as *mut libc::c_void, tail);
        }
        if huge_pages_on() {
            libc::madvise(base as *mut libc::c_void, CHUNK, libc::MADV_HUGEPAGE);
        }
    }
    Some(base)
}

enum At {
    Pool {
        pool: &'static PagePool,
        ptr: NonNull<u8>,
        chunk: usize,
        slot: u8,
    },
    Heap(Box<[u8]>),
}

/// One page of `PAGE` bytes, owned like a `Box<[u8]>`.
pub struct PageBuf {
    at: At,
}

// SAFETY: a `PageBuf` owns its bytes exclusively (the pool hands a slot to one page at a
// time), like a `Box<[u8]>`; the pool behind it is behind a mutex.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only reads the bytes (`Deref`).
unsafe impl Sync for PageBuf {}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.at {
            At::Pool { .. } => "chunk",
            At::Heap(_) => "heap",
        };
        f.debug_struct("PageBuf").field("in", &kind).finish()
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match &self.at {
            // SAFETY: `ptr` is `PAGE` bytes inside a mapped chunk that this page owns until
            // it is dropped.
            At::Pool { ptr, .. } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), PAGE) },
            At::Heap(b) => b,
        }
    }
}

impl std::ops::DerefMut for PageBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.at {
            // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
            At::Pool { ptr, .. } => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), PAGE) },
            At::Heap(b) => b,
        }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        if let At::Pool {
            pool, chunk, slot, ..
        } = self.at
        {
            pool.give(chunk, slot);
        }
    }
}

/// The kernel's transparent huge page setting (`always`, `madvise` or `never`; `unknown`
/// where it cannot be read), for reports: with `madvise` or `always`, chunks that ask for
/// huge pages get them (with `always`, all of them may).
pub fn huge_pages_mode() -> &'static str {
    static MODE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    MODE.get_or_init(|| {
        let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        // The active choice is bracketed: "always [madvise] never".
        ["always", "madvise", "never"]
            .into_iter()
            .find(|m| s.contains(&format!("[{m}]")))
            .unwrap_or("unknown")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> &'static PagePool {
        Box::leak(Box::new(PagePool::new()))
    }

    /// Pages start zeroed, hold their own bytes, and a reused slot is zeroed again; a chunk
    /// goes back to the kernel with its last page.
    #[test]
    fn pages_are_zeroed_own_their_bytes_and_chunks_are_returned() {
        let p = pool();
        let mut pages: Vec<PageBuf> = (0..PER_CHUNK + 3).map(|_| p.page()).collect();
        assert_eq!(p.mapped_chunks(), 2);
        for (i, pg) in pages.iter_mut().enumerate() {
            assert!(pg.iter().all(|b| *b == 0), "page {i} not zeroed");
            pg.fill(i as u8 + 1);
        }
        for (i, pg) in pages.iter().enumerate() {
            assert!(pg.iter().all(|b| *b == i as u8 + 1), "page {i} overwritten");
        }
        // Free one page of the first chunk: the next page reuses it, zeroed.
        let freed = pages.swap_remove(5);
        drop(freed);
        let again = p.page();
        assert!(again.iter().all(|b| *b == 0));
        pages.push(again);
        assert_eq!(p.mapped_chunks(), 2);
        pages.clear();
        assert_eq!(p.mapped_chunks(), 0);
        // And the pool starts over.
        let fresh = p.page();
        assert!(fresh.iter().all(|b| *b == 0));
        assert_eq!(p.mapped_chunks(), 1);
    }

    /// Random takes and drops against a model of what each live page holds: no page ever
    /// sees another's bytes, new pages are zeros, and the chunks mapped are those with live
    /// pages (at most one more per chunk's worth than needed).
    #[test]
    fn random_takes_and_drops_keep_every_page_its_own() {
        let p = pool();
        let mut live: Vec<(PageBuf, u8)> = Vec::new();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for step in 0..3000u32 {
            let r = next();
            if live.is_empty() || r % 3 != 0 {
                let mut pg = p.page();
                assert!(
                    pg.iter().all(|b| *b == 0),
                    "step {step}: new page not zeroed"
                );
                let tag = (r >> 8) as u8 | 1;
                pg[0] = tag;
                pg[PAGE - 1] = tag;
                pg[PAGE / 2] = tag;
                live.push((pg, tag));
            } else {
                let i = (r >> 16) as usize % live.len();
                let (pg, tag) = live.swap_remove(i);
                assert_eq!((pg[0], pg[PAGE / 2], pg[PAGE - 1]), (tag, tag, tag));
            }
            if live.len() > 200 {
                live.truncate(40);
            }
        }
        for (pg, tag) in &live {
            assert_eq!((pg[0], pg[PAGE / 2], pg[PAGE - 1]), (*tag, *tag, *tag));
        }
        assert!(p.mapped_chunks() <= live.len());
        live.clear();
        assert_eq!(p.mapped_chunks(), 0);
    }

    /// With empty chunks kept, a chunk whose pages are all freed stays mapped (up to the
    /// number kept) and its pages come back zeroed; keeping none returns them.
    #[test]
    fn kept_empty_chunks_give_zeroed_pages_and_go_when_no_longer_kept() {
        let p = pool();
        p.keep_empty(1);
        let mut pages: Vec<PageBuf> = (0..2 * PER_CHUNK).map(|_| p.page()).collect();
        for pg in &mut pages {
            pg.fill(0xA5);
        }
        assert_eq!(p.mapped_chunks(), 2);
        pages.clear();
        assert_eq!(
            p.mapped_chunks(),
            1,
            "one empty chunk kept, the other returned"
        );
        let again: Vec<PageBuf> = (0..PER_CHUNK).map(|_| p.page()).collect();
        assert_eq!(
            p.mapped_chunks(),
            1,
            "the kept chunk's pages are taken first"
        );
        assert!(again.iter().all(|pg| pg.iter().all(|b| *b == 0)));
        drop(again);
        assert_eq!(p.mapped_chunks(), 1);
        p.keep_empty(0);
        assert_eq!(p.mapped_chunks(), 0);
    }

    /// A page made from a page of bytes holds exactly them, also in a reused slot whose
    /// last owner left other bytes; a shorter slice gives zeros after it.
    #[test]
    fn a_page_made_from_bytes_holds_them_and_nothing_left_over() {
        let p = pool();
        p.keep_empty(1);
        let mut used = p.page();
        used.fill(0xA5);
        drop(used);
        let data: Vec<u8> = (0..PAGE).map(|i| (i % 251) as u8).collect();
        let pg = p.page_with(&data);
        assert_eq!(&pg[..], &data[..]);
        drop(pg);
        let short = p.page_with(&data[..100]);
        assert_eq!(&short[..100], &data[..100]);
        assert!(short[100..].iter().all(|b| *b == 0), "the rest zeroed");
        drop(short);
        p.keep_empty(0);
    }

    #[test]
    fn the_huge_page_mode_is_one_of_the_kernels_words() {
        assert!(["always", "madvise", "never", "unknown"].contains(&huge_pages_mode()));
    }
}
