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
//! Hardware reacts to a store on a write register at once. A plain store into mapped memory
//! cannot trap here, so the write registers are mailboxes that the device drains at its
//! quiescent points (no pending device events): set slots hold [`SET_EMPTY`] when empty,
//! inc/dec slots accumulate with `fetch_add` (a plain store of `v` also works when the slot
//! was drained). Applying host writes only at quiescent points keeps runs deterministic.

use std::sync::atomic::{AtomicU32, Ordering};

pub const EVENTS: usize = 0;
pub const SEM_VALUE: usize = 0x1000 / 4;
pub const SEM_SET: usize = 0x1400 / 4;
pub const SEM_INC: usize = 0x1800 / 4;
pub const SEM_DEC: usize = 0x1C00 / 4;
pub const COUNT: usize = 256;
pub const PAGE_WORDS: usize = 0x2000 / 4;
/// Marks an empty set-mailbox slot (the value real registers read during reset).
pub const SET_EMPTY: u32 = 0xDEAD_BEEF;

/// The page's words, page-aligned as a real mapping is.
#[repr(C, align(4096))]
#[derive(Debug)]
struct Words([AtomicU32; PAGE_WORDS]);

#[derive(Debug)]
pub struct RegPage {
    words: Box<Words>,
}

impl Default for RegPage {
    fn default() -> Self {
        Self::new()
    }
}

impl RegPage {
    pub fn new() -> Self {
        let words = Box::new(Words([const { AtomicU32::new(0) }; PAGE_WORDS]));
        let p = RegPage { words };
        p.reset();
        p
    }

    /// Zero every register and empty the mailboxes.
    pub fn reset(&self) {
        for (i, w) in self.words.0.iter().enumerate() {
            let v = if (SEM_SET..SEM_SET + COUNT).contains(&i) {
                SET_EMPTY
            } else {
                0
            };
            w.store(v, Ordering::SeqCst);
        }
    }

    /// Address of the page, for mmap.
    pub fn as_ptr(&self) -> *mut u8 {
        self.words.0.as_ptr() as *mut u8
    }

    pub fn sem(&self, i: u8) -> i32 {
        self.words.0[SEM_VALUE + i as usize].load(Ordering::SeqCst) as i32
    }
    pub fn set_sem(&self, i: u8, v: i32) {
        self.words.0[SEM_VALUE + i as usize].store(v as u32, Ordering::SeqCst);
    }
    pub fn add_sem(&self, i: u8, d: i32) {
        self.words.0[SEM_VALUE + i as usize].fetch_add(d as u32, Ordering::SeqCst);
    }
    pub fn event(&self, i: u8) -> u32 {
        self.words.0[EVENTS + i as usize].load(Ordering::SeqCst)
    }
    pub fn set_event(&self, i: u8, v: u32) {
        self.words.0[EVENTS + i as usize].store(v, Ordering::SeqCst);
    }

    /// Read the register at byte offset `off` (4-byte aligned, < 8 KiB).
    pub fn read_reg(&self, off: u64) -> Option<u32> {
        let i = usize::try_from(off / 4).ok()?;
        (off.is_multiple_of(4) && i < PAGE_WORDS).then(|| self.words.0[i].load(Ordering::SeqCst))
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
            _ if i < EVENTS + COUNT => self.words.0[i].store(v, Ordering::SeqCst),
            _ if (SEM_SET..SEM_SET + COUNT).contains(&i) => {
                self.words.0[SEM_VALUE + i - SEM_SET].store(v, Ordering::SeqCst)
            }
            _ if (SEM_INC..SEM_INC + COUNT).contains(&i) => {
                self.words.0[SEM_VALUE + i - SEM_INC].fetch_add(v, Ordering::SeqCst);
            }
            _ if (SEM_DEC..SEM_DEC + COUNT).contains(&i) => {
                self.words.0[SEM_VALUE + i - SEM_DEC].fetch_sub(v, Ordering::SeqCst);
            }
            // Reading or writing the value window directly is allowed on the page.
            _ if (SEM_VALUE..SEM_VALUE + COUNT).contains(&i) => {
                self.words.0[i].store(v, Ordering::SeqCst)
            }
            _ => {}
        }
        true
    }

    /// Apply stores user space made through the mapping. Returns whether anything changed.
    pub fn drain_mailboxes(&self) -> bool {
        // Plain loads first: the swaps below are only needed when something was stored.
        if !self.has_mail() {
            return false;
        }
        let mut changed = false;
        for s in 0..COUNT {
            let v = self.words.0[SEM_SET + s].swap(SET_EMPTY, Ordering::SeqCst);
            if v != SET_EMPTY {
                self.words.0[SEM_VALUE + s].store(v, Ordering::SeqCst);
                changed = true;
            }
        }
        for s in 0..COUNT {
            let v = self.words.0[SEM_INC + s].swap(0, Ordering::SeqCst);
            if v != 0 {
                self.words.0[SEM_VALUE + s].fetch_add(v, Ordering::SeqCst);
                changed = true;
            }
            let v = self.words.0[SEM_DEC + s].swap(0, Ordering::SeqCst);
            if v != 0 {
                self.words.0[SEM_VALUE + s].fetch_sub(v, Ordering::SeqCst);
                changed = true;
            }
        }
        changed
    }

    /// Whether user space left a store in a mailbox.
    pub fn has_mail(&self) -> bool {
        (0..COUNT).any(|s| {
            self.words.0[SEM_SET + s].load(Ordering::Relaxed) != SET_EMPTY
                || self.words.0[SEM_INC + s].load(Ordering::Relaxed) != 0
                || self.words.0[SEM_DEC + s].load(Ordering::Relaxed) != 0
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
        &p.words.0
    }

    #[test]
    fn page_is_page_aligned() {
        assert_eq!(RegPage::new().as_ptr() as usize % 4096, 0);
    }
}
