//! The per-NeuronCore event/semaphore register page (`driver-abi.md` §5).
//!
//! The 8 KiB page is what user space maps (the SEMAPHORE mmap resource), so it is backed by
//! live atomics that the engines use directly:
//!
//! | bytes | registers |
//! |---|---|
//! | 0x0000-0x03FF | event[i]: read = value, write = set |
//! | 0x1000-0x13FF | semaphore[i] value (read) |
//! | 0x1400-0x17FF | semaphore[i] set (write) |
//! | 0x1800-0x1BFF | semaphore[i] increment (write v = atomic add v) |
//! | 0x1C00-0x1FFF | semaphore[i] decrement (write v = atomic subtract v) |
//!
//! Hardware reacts to every store on a write register. Where the emulator can trap user
//! stores (x86_64: user mappings are read-only views and a SIGSEGV handler decodes each store),
//! every store is posted, in order, to the page's bounded lock-free FIFO ([`RegPage::post_store`],
//! async-signal-safe) and applied as a register write when the device drains it at a quiescent
//! point. Elsewhere, and when the FIFO is full, the write registers are mailboxes: set slots
//! hold [`SET_EMPTY`] when empty, inc/dec slots accumulate (`fetch_add`). Applying host
//! writes only at quiescent points keeps runs deterministic.
//!
//! The page's bytes live in a [`HostRegion`] (page aligned), which may be memory user space maps.
// The page is a HostRegion viewed as atomics; every block has a SAFETY comment.
#![allow(unsafe_code)]

use crate::hostmem::{heap_source, region_from, HostRegion, MemSource};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use neuron_abi::consts as abi;

/// Word indices of the page's register blocks (`driver-abi.md` §5, named in `neuron_abi`).
pub const EVENTS: usize = (abi::SEMA_PAGE_EVENT / abi::SEMA_REG_STRIDE) as usize;
pub const SEM_VALUE: usize = (abi::SEMA_PAGE_SEM_READ / abi::SEMA_REG_STRIDE) as usize;
pub const SEM_SET: usize = (abi::SEMA_PAGE_SEM_SET / abi::SEMA_REG_STRIDE) as usize;
pub const SEM_INC: usize = (abi::SEMA_PAGE_SEM_INC / abi::SEMA_REG_STRIDE) as usize;
pub const SEM_DEC: usize = (abi::SEMA_PAGE_SEM_DEC / abi::SEMA_REG_STRIDE) as usize;
pub const COUNT: usize = abi::SEMAPHORES_PER_NC as usize;
pub const PAGE_WORDS: usize = (abi::SEMA_PAGE_SIZE / abi::SEMA_REG_STRIDE) as usize;
/// Marks an empty set-mailbox slot (the value real registers read during reset).
pub const SET_EMPTY: u32 = 0xDEAD_BEEF;

/// Bytes of the page.
pub const PAGE_BYTES: usize = PAGE_WORDS * 4;
/// Entries of the store FIFO (a power of two).
const FIFO_LEN: usize = 4096;

/// A bounded lock-free multi-producer FIFO of (offset, value) stores (Vyukov's bounded queue:
/// a producer claims a slot with a CAS on `tail`, fills it, then publishes it through the
/// slot's sequence number). Producers may be signal handlers: only atomics, no allocation,
/// never blocks. The one consumer is the device, under its lock.
struct StoreFifo {
    seq: Box<[AtomicUsize]>,
    data: Box<[AtomicU64]>,
    tail: AtomicUsize,
    head: AtomicUsize,
}

impl StoreFifo {
    fn new() -> StoreFifo {
        StoreFifo {
            seq: (0..FIFO_LEN).map(AtomicUsize::new).collect(),
            data: (0..FIFO_LEN).map(|_| AtomicU64::new(0)).collect(),
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
        }
    }

    /// Append; false if full.
    fn push(&self, v: u64) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = pos % FIFO_LEN;
            let seq = self.seq[slot].load(Ordering::Acquire);
            match seq.wrapping_sub(pos) as isize {
                0 => match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.data[slot].store(v, Ordering::Relaxed);
                        self.seq[slot].store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(p) => pos = p,
                },
                d if d < 0 => return false,
                _ => pos = self.tail.load(Ordering::Relaxed),
            }
        }
    }

    /// Take the oldest published entry (single consumer). An entry claimed but not yet
    /// published stops the drain there, so order is kept.
    fn pop(&self) -> Option<u64> {
        let pos = self.head.load(Ordering::Relaxed);
        let slot = pos % FIFO_LEN;
        if self.seq[slot].load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        let v = self.data[slot].load(Ordering::Relaxed);
        self.seq[slot].store(pos.wrapping_add(FIFO_LEN), Ordering::Release);
        self.head.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(v)
    }

    fn is_empty(&self) -> bool {
        self.tail.load(Ordering::Acquire) == self.head.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for StoreFifo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreFifo")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .finish()
    }
}

#[derive(Debug)]
pub struct RegPage {
    /// `PAGE_BYTES`, page aligned, viewed as `PAGE_WORDS` atomics.
    mem: HostRegion,
    fifo: StoreFifo,
    /// A posted store found the FIFO full and went to a mailbox word since the last drain
    /// ([`RegPage::has_posted_mail`]).
    folded: AtomicBool,
}

impl Default for RegPage {
    fn default() -> Self {
        Self::new()
    }
}

impl RegPage {
    pub fn new() -> Self {
        Self::with_memory(&heap_source)
    }

    /// A page whose bytes come from `src` (the heap where it gives none). Allocation failure
    /// of this fixed 8 KiB is fatal, like any allocation failure.
    pub fn with_memory(src: MemSource) -> Self {
        let mem = region_from(src, PAGE_BYTES).expect("register page");
        let p = RegPage {
            mem,
            fifo: StoreFifo::new(),
            folded: AtomicBool::new(false),
        };
        p.reset();
        p
    }

    fn words(&self) -> &[AtomicU32; PAGE_WORDS] {
        // SAFETY: the region is at least PAGE_BYTES, page aligned and initialised, lives as
        // long as `self`, and is only ever accessed atomically from Rust (AtomicU32 has u32's
        // layout); user mappings of it are shared memory, where atomics are valid.
        unsafe { &*(self.mem.as_ptr() as *const [AtomicU32; PAGE_WORDS]) }
    }

    /// Post one user-space store of `v` at byte offset `off` (a trapped store). In order with
    /// every other posted store; applied at the device's next drain. Async-signal-safe. When
    /// the FIFO is full the store folds into the mailbox words, so none is lost.
    pub fn post_store(&self, off: u32, v: u32) {
        let i = off as usize / 4;
        if !off.is_multiple_of(4) || i >= PAGE_WORDS {
            return;
        }
        if self.fifo.push((off as u64) << 32 | v as u64) {
            return;
        }
        let w = &self.words()[i];
        match i {
            _ if (SEM_INC..SEM_INC + COUNT).contains(&i)
                || (SEM_DEC..SEM_DEC + COUNT).contains(&i) =>
            {
                w.fetch_add(v, Ordering::SeqCst);
            }
            _ if (SEM_SET..SEM_SET + COUNT).contains(&i) => w.store(v, Ordering::SeqCst),
            // Event and value words are written directly, as a register write would.
            _ => {
                self.write_reg(off as u64, v);
            }
        }
        self.folded.store(true, Ordering::SeqCst);
    }

    /// Zero every register and empty the mailboxes.
    pub fn reset(&self) {
        // Plain stores and one fence after them: a sequentially consistent store each
        // (a locked exchange, ~20 cycles) made the 2,048 words ~10 us of every core reset.
        for (i, w) in self.words().iter().enumerate() {
            let v = if (SEM_SET..SEM_SET + COUNT).contains(&i) {
                SET_EMPTY
            } else {
                0
            };
            w.store(v, Ordering::Relaxed);
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Address of the page (the device's own view of it).
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }

    pub fn sem(&self, i: u8) -> i32 {
        self.words()[SEM_VALUE + i as usize].load(Ordering::SeqCst) as i32
    }
    pub fn set_sem(&self, i: u8, v: i32) {
        self.words()[SEM_VALUE + i as usize].store(v as u32, Ordering::SeqCst);
    }
    pub fn add_sem(&self, i: u8, d: i32) {
        self.words()[SEM_VALUE + i as usize].fetch_add(d as u32, Ordering::SeqCst);
    }
    pub fn event(&self, i: u8) -> u32 {
        self.words()[EVENTS + i as usize].load(Ordering::SeqCst)
    }
    pub fn set_event(&self, i: u8, v: u32) {
        self.words()[EVENTS + i as usize].store(v, Ordering::SeqCst);
    }

    /// Read the register at byte offset `off` (4-byte aligned, < 8 KiB).
    pub fn read_reg(&self, off: u64) -> Option<u32> {
        let i = usize::try_from(off / 4).ok()?;
        (off.is_multiple_of(4) && i < PAGE_WORDS).then(|| self.words()[i].load(Ordering::SeqCst))
    }

    /// A register write as the hardware sees it (DMA or BAR store): applied immediately.
    /// Returns false for an offset outside the page or misaligned.
    pub fn write_reg(&self, off: u64, v: u32) -> bool {
        let Some(i) = usize::try_from(off / 4)
            .ok()
            .filter(|i| off.is_multiple_of(4) && *i < PAGE_WORDS)
        else {
            return false;
        };
        match i {
            _ if i < EVENTS + COUNT => self.words()[i].store(v, Ordering::SeqCst),
            _ if (SEM_SET..SEM_SET + COUNT).contains(&i) => {
                self.words()[SEM_VALUE + i - SEM_SET].store(v, Ordering::SeqCst)
            }
            _ if (SEM_INC..SEM_INC + COUNT).contains(&i) => {
                self.words()[SEM_VALUE + i - SEM_INC].fetch_add(v, Ordering::SeqCst);
            }
            _ if (SEM_DEC..SEM_DEC + COUNT).contains(&i) => {
                self.words()[SEM_VALUE + i - SEM_DEC].fetch_sub(v, Ordering::SeqCst);
            }
            // Reading or writing the value window directly is allowed on the page.
            _ if (SEM_VALUE..SEM_VALUE + COUNT).contains(&i) => {
                self.words()[i].store(v, Ordering::SeqCst)
            }
            _ => {}
        }
        true
    }

    /// Apply stores user space made through the mapping: the posted stores in order, then
    /// the mailboxes. Returns whether anything changed.
    pub fn drain_mailboxes(&self) -> bool {
        // Cleared before the words are read: a store folded after this sets it again.
        self.folded.store(false, Ordering::SeqCst);
        let mut changed = false;
        // Bounded: at most one FIFO's worth per drain (producers may keep posting).
        for _ in 0..FIFO_LEN {
            let Some(e) = self.fifo.pop() else { break };
            self.write_reg(e >> 32, e as u32);
            changed = true;
        }
        // Plain loads first: the swaps below are only needed when something was stored.
        if !self.mailbox_mail() {
            return changed;
        }
        for s in 0..COUNT {
            let v = self.words()[SEM_SET + s].swap(SET_EMPTY, Ordering::SeqCst);
            if v != SET_EMPTY {
                self.words()[SEM_VALUE + s].store(v, Ordering::SeqCst);
                changed = true;
            }
        }
        for s in 0..COUNT {
            let v = self.words()[SEM_INC + s].swap(0, Ordering::SeqCst);
            if v != 0 {
                self.words()[SEM_VALUE + s].fetch_add(v, Ordering::SeqCst);
                changed = true;
            }
            let v = self.words()[SEM_DEC + s].swap(0, Ordering::SeqCst);
            if v != 0 {
                self.words()[SEM_VALUE + s].fetch_sub(v, Ordering::SeqCst);
                changed = true;
            }
        }
        changed
    }

    /// Whether user space left a store in the FIFO or a mailbox.
    pub fn has_mail(&self) -> bool {
        !self.fifo.is_empty() || self.mailbox_mail()
    }

    /// [`RegPage::has_mail`] where every store comes through [`RegPage::post_store`] (no
    /// mapping of the page takes stores untrapped): the FIFO, or a store folded into the
    /// mailboxes since the last drain, without reading the 768 mailbox words (every ioctl
    /// asks, `docs/performance.md`, seventeenth session).
    pub fn has_posted_mail(&self) -> bool {
        !self.fifo.is_empty() || self.folded.load(Ordering::SeqCst)
    }

    fn mailbox_mail(&self) -> bool {
        (0..COUNT).any(|s| {
            self.words()[SEM_SET + s].load(Ordering::Relaxed) != SET_EMPTY
                || self.words()[SEM_INC + s].load(Ordering::Relaxed) != 0
                || self.words()[SEM_DEC + s].load(Ordering::Relaxed) != 0
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_semantics() {
        let p = RegPage::new();
        assert!(p.write_reg(0x1400 + 4 * 7, 5));
        assert_eq!(p.sem(7), 5);
        p.write_reg(0x1800 + 4 * 7, 3);
        assert_eq!(p.sem(7), 8);
        p.write_reg(0x1C00 + 4 * 7, 10);
        assert_eq!(p.sem(7), -2);
        assert_eq!(p.read_reg(0x1000 + 4 * 7), Some((-2i32) as u32));
        p.write_reg(4 * 3, 1);
        assert_eq!(p.event(3), 1);
        assert!(!p.write_reg(0x2000, 1));
        assert!(!p.write_reg(2, 1));
    }

    #[test]
    fn mailboxes_apply_on_drain() {
        let p = RegPage::new();
        let words = unsafe_free_view(&p);
        words[SEM_SET + 2].store(9, Ordering::SeqCst);
        words[SEM_INC + 2].fetch_add(1, Ordering::SeqCst);
        words[SEM_INC + 2].fetch_add(1, Ordering::SeqCst);
        assert!(p.has_mail());
        assert_eq!(p.sem(2), 0, "not applied before the drain");
        assert!(p.drain_mailboxes());
        assert_eq!(p.sem(2), 11);
        assert!(!p.has_mail());
        assert!(!p.drain_mailboxes());
    }

    fn unsafe_free_view(p: &RegPage) -> &[AtomicU32] {
        p.words()
    }

    #[test]
    fn posted_stores_apply_in_order_and_each_counts() {
        let p = RegPage::new();
        for _ in 0..3 {
            p.post_store(0x1800 + 4 * 5, 1);
        }
        p.post_store(0x1400 + 4 * 6, 9);
        p.post_store(0x1800 + 4 * 6, 1);
        assert!(p.has_mail());
        assert_eq!(p.sem(5), 0, "not applied before the drain");
        assert!(p.drain_mailboxes());
        assert_eq!(
            (p.sem(5), p.sem(6)),
            (3, 10),
            "set then increment, in order"
        );
        assert!(!p.has_mail());
    }

    #[test]
    fn a_full_fifo_folds_into_the_mailboxes() {
        let p = RegPage::new();
        let n = FIFO_LEN as i32 + 100;
        for _ in 0..n {
            p.post_store(0x1800, 1);
        }
        p.post_store(0x1C00, 2);
        assert!(p.has_posted_mail());
        assert!(p.drain_mailboxes());
        assert_eq!(p.sem(0), n - 2);
        assert!(!p.has_posted_mail() && !p.has_mail());
        // Only the FIFO's worth went through it; the folded stores are known too.
        for _ in 0..FIFO_LEN + 1 {
            p.post_store(0x1800, 1);
        }
        while p.fifo.pop().is_some() {} // as if a drain had taken the FIFO only
        assert!(
            p.has_posted_mail(),
            "a store folded into a mailbox is posted mail"
        );
        p.drain_mailboxes();
        assert!(!p.has_posted_mail());
        // A store straight into a mailbox word (an untrapped mapping) is not posted: only
        // `has_mail` reads the words.
        p.words()[SEM_INC + 3].store(1, Ordering::SeqCst);
        assert!(p.has_mail() && !p.has_posted_mail());
    }

    #[test]
    fn concurrent_posts_are_all_counted() {
        let p = std::sync::Arc::new(RegPage::new());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                std::thread::spawn(move || (0..20_000).for_each(|_| p.post_store(0x1800 + 8, 1)))
            })
            .collect();
        // Drain while the posters run (at least once: on a loaded host they may all finish
        // before this thread is scheduled, which must not fail the test).
        let mut drained = 0;
        loop {
            p.drain_mailboxes();
            drained += 1;
            if hs.iter().all(|h| h.is_finished()) {
                break;
            }
        }
        hs.into_iter().for_each(|h| h.join().expect("thread"));
        while p.has_mail() {
            p.drain_mailboxes();
        }
        assert!(drained > 0);
        assert_eq!(p.sem(2), 80_000);
    }

    #[test]
    fn page_is_page_aligned() {
        assert_eq!(RegPage::new().as_ptr() as usize % 4096, 0);
    }
}
