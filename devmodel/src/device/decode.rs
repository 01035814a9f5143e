//! Decoding words for execution: a loaded trn2 word's sync header (an EVENT_SEMAPHORE body's
//! wait and update folded in) and the word, cached by the word's bytes so a program's loop
//! decodes each of its words once, not on every execution.

use neuron_isa::cayman::{CaymanInstr, Namespace, Opcode, WORD};
use neuron_isa::{SemOp, SemUpdate, SemWait, Sync, WaitCond};
use std::collections::HashMap;
use std::sync::Arc;

/// Decoded words by their 64 bytes: a program's loop decodes the same words every execution
/// (a decode step's attention layer: ~1.5 k instructions a word, 8% of its device thread).
/// A word decodes the same whatever its pc or engine, so the bytes alone are the key; a
/// hook that rewrites a word before issue gives other bytes, and so another entry.
#[derive(Debug, Default)]
pub(super) struct DecodeCache {
    words: HashMap<Key, Decoded, crate::fasthash::Build>,
}

/// A word's bytes as a map key, compared as four 16-byte lanes inline (`[u8; 64]`'s own
/// equality is a `bcmp` call on every hit: 2% of an attention layer's device thread).
#[derive(Debug, Clone, Copy)]
struct Key([u8; WORD]);

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // The bytes, as `[u8; 64]` hashes them: equal keys (equal bytes) hash alike.
        self.0.hash(h)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        let lanes = |w: &[u8; WORD]| -> [u128; WORD / 16] {
            std::array::from_fn(|i| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&w[16 * i..16 * i + 16]);
                u128::from_ne_bytes(b)
            })
        };
        // Differences OR-ed together (no early exit, which LLVM turns back into `bcmp`).
        let (a, b) = (lanes(&self.0), lanes(&other.0));
        a.iter().zip(&b).fold(0u128, |d, (x, y)| d | (x ^ y)) == 0
    }
}

impl Eq for Key {}

/// A word's decoding: its sync header, what issuing it reads off it, and the word; or why
/// it cannot run.
type Decoded = Result<Word, String>;

/// A decoded word as the sequencers hold it.
#[derive(Debug, Clone)]
pub(super) struct Word {
    pub(super) sync: Sync,
    pub(super) facts: Facts,
    pub(super) ci: Arc<CaymanInstr>,
}

/// What issuing a word reads off it every time, found once when it is decoded: each is a
/// lookup of fields by name (a scan of the word's fields), and a control word's issue spent
/// most of its ~2,200 host instructions on them and on the lane's bookkeeping
/// (`docs/performance.md`, 2026-12-06).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Facts {
    /// [`crate::calib::word_features`]: the elements the word streams, and whether its input
    /// type is 4 bytes wide.
    pub(crate) features: (u64, bool),
    /// [`crate::cayman_exec::static_elems`]: the streamed elements, where known before the
    /// word runs.
    pub(crate) static_elems: Option<u64>,
    /// The second wait an EVENT_SEMAPHORE body names.
    pub(crate) ext_wait: Option<SemWait>,
    /// The word's `src_dtype` field.
    pub(crate) src_dtype: Option<neuron_isa::Dtype>,
}

impl Facts {
    pub(crate) fn of(ci: &CaymanInstr) -> Facts {
        Facts {
            features: crate::calib::word_features(ci),
            static_elems: crate::cayman_exec::static_elems(ci),
            ext_wait: ext_wait_of(ci),
            src_dtype: ci.dtype("src_dtype"),
        }
    }
}

/// Decode caches of dropped devices kept for the next devices of the process (at most
/// [`keep_decodings`]'s count; none by default): a fault campaign makes a fresh device per
/// experiment, and each decoded the same program anew (~6% of its device thread). A word
/// decodes the same on any device (the bytes alone are the key), so a kept cache changes no
/// result.
static KEPT: Keeper = Keeper::new();

/// Keep the decode caches of up to `n` dropped devices for the next devices made (0 turns
/// keeping off and drops those kept).
pub fn keep_decodings(n: usize) {
    KEPT.keep(n);
}

/// Dropped devices' caches and how many of them to keep.
#[derive(Debug)]
struct Keeper {
    keep: std::sync::atomic::AtomicUsize,
    caches: std::sync::Mutex<Vec<DecodeCache>>,
}

impl Keeper {
    const fn new() -> Keeper {
        Keeper {
            keep: std::sync::atomic::AtomicUsize::new(0),
            caches: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn caches(&self) -> std::sync::MutexGuard<'_, Vec<DecodeCache>> {
        // Pushing or popping a cache never panics midway: a poisoned list is still whole.
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn keep(&self, n: usize) {
        self.keep.store(n, std::sync::atomic::Ordering::Relaxed);
        self.caches().truncate(n);
    }

    /// A kept cache, or an empty one.
    fn take(&self) -> DecodeCache {
        if self.keep.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return DecodeCache::default();
        }
        self.caches().pop().unwrap_or_default()
    }

    /// Keep `c` if keeping is on and fewer than the count are kept.
    fn offer(&self, c: DecodeCache) {
        let n = self.keep.load(std::sync::atomic::Ordering::Relaxed);
        if n > 0 && !c.words.is_empty() {
            let mut k = self.caches();
            if k.len() < n {
                k.push(c);
            }
        }
    }
}

impl DecodeCache {
    /// A kept cache of a dropped device ([`keep_decodings`]), or an empty one.
    pub(super) fn kept_or_new() -> DecodeCache {
        KEPT.take()
    }

    /// Offer a dropped device's cache to the next device.
    pub(super) fn offer(self) {
        KEPT.offer(self);
    }
}

/// Distinct words the cache holds before it starts afresh: a bound (~15 MiB) for programs
/// that generate words or hooks that flip their bits; the real model layers have ~2-3.3 k.
const DECODE_CACHE_WORDS: usize = 1 << 14;

impl DecodeCache {
    /// The decoding of `w`, from the cache or decoded now.
    pub(super) fn get(&mut self, w: &[u8; WORD]) -> Decoded {
        if let Some(d) = self.words.get(&Key(*w)) {
            return d.clone();
        }
        if self.words.len() >= DECODE_CACHE_WORDS {
            self.words.clear();
        }
        let d = decode_real(w).map(|(sync, ci)| Word {
            sync,
            facts: Facts::of(&ci),
            ci: Arc::new(ci),
        });
        self.words.insert(Key(*w), d.clone());
        d
    }
}

/// Decode a real trn2 word (loaded namespace) for execution: its sync header (the body's
/// update of an EVENT_SEMAPHORE folded in) and the word itself.
pub(super) fn decode_real(w: &[u8; WORD]) -> Result<(Sync, CaymanInstr), String> {
    let ci = CaymanInstr::decode(Namespace::Loaded, w);
    if !ci.opcode.is_known() {
        return Err(format!("unknown opcode 0x{:02x}", w[0]));
    }
    let mut sync = ci
        .header
        .sync()
        .ok_or_else(|| format!("{}: unsupported semaphore header codes", ci.opcode.name()))?;
    if ci.opcode == Opcode::EventSemaphore {
        if let Some(c) = ci.u("ext_cond").filter(|c| *c != 0) {
            if !matches!(c, 0x01 | 0x04 | 0x05) {
                return Err(format!(
                    "EVENT_SEMAPHORE: extended wait condition 0x{c:02x} not known"
                ));
            }
        }
        // The body's update ("$S[i]++@complete" ...) completes like the header's.
        if let Some(op) = ci.u("ext_op").filter(|o| *o != 0) {
            let op = SemOp::from_code(op as u8)
                .ok_or_else(|| format!("EVENT_SEMAPHORE: extended update 0x{op:02x} not known"))?;
            if sync.update.is_some() {
                return Err("EVENT_SEMAPHORE with two semaphore updates is not modelled".into());
            }
            sync.update = Some(SemUpdate {
                op,
                index: ci.u("ext_index").unwrap_or(0) as u8,
                value: ci.u("ext_operand").unwrap_or(0) as u32 as i32,
            });
        }
    }
    Ok((sync, ci))
}

/// The second wait an EVENT_SEMAPHORE word carries in its body, if any.
pub(super) fn ext_wait_of(ci: &CaymanInstr) -> Option<SemWait> {
    if ci.opcode != Opcode::EventSemaphore {
        return None;
    }
    let c = ci.u("ext_cond").filter(|c| *c != 0)? as u8;
    Some(SemWait {
        cond: WaitCond::from_code(c)?,
        index: ci.u("ext_wait_index").unwrap_or(0) as u8,
        value: ci.u("ext_wait_value").unwrap_or(0) as u32 as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::engine::tests::word;

    #[test]
    fn the_decode_cache_gives_the_decoding_and_stays_bounded() {
        let mut c = DecodeCache::default();
        let w = word(&format!("{:0<128}", "41"));
        let direct = decode_real(&w);
        for _ in 0..3 {
            let cached = c.get(&w).map(|d| (d.sync, (*d.ci).clone()));
            assert_eq!(cached, direct);
        }
        // An undecodable word is cached as its error.
        let mut bad = w;
        bad[0] = 0xff;
        assert_eq!(c.get(&bad).err(), decode_real(&bad).err());
        // Past the bound the cache starts afresh rather than growing.
        for i in 0..(DECODE_CACHE_WORDS as u32 + 10) {
            let mut v = w;
            v[60..64].copy_from_slice(&i.to_le_bytes());
            let _ = c.get(&v);
        }
        assert!(c.words.len() <= DECODE_CACHE_WORDS);
    }

    /// With keeping on, an offered cache comes back (its decodings as decoded afresh), up
    /// to the count kept; with it off, nothing is kept and a fresh cache is empty.
    #[test]
    fn kept_caches_come_back_up_to_the_count() {
        let k = Keeper::new();
        let w = word(&format!("{:0<128}", "41"));
        let filled = || {
            let mut c = DecodeCache::default();
            let _ = c.get(&w);
            c
        };
        k.offer(filled());
        assert!(k.take().words.is_empty(), "keeping off: nothing kept");
        k.keep(1);
        k.offer(filled());
        k.offer(filled());
        assert_eq!(k.caches().len(), 1, "at most the count");
        let c = k.take();
        let back = c.words.get(&Key(w)).cloned();
        assert_eq!(
            back.map(|x| x.map(|x| (x.sync, (*x.ci).clone()))),
            Some(decode_real(&w))
        );
        assert!(k.take().words.is_empty(), "none left");
        k.offer(c);
        k.keep(0);
        assert!(k.caches().is_empty(), "keeping off drops those kept");
    }

    /// Keys are equal exactly when all 64 bytes are: a difference in any one byte (each
    /// lane's first and last included) makes another key.
    #[test]
    fn word_keys_compare_every_byte() {
        let w: [u8; WORD] = std::array::from_fn(|i| i as u8);
        assert!(Key(w) == Key(w));
        for at in [0, 15, 16, 31, 32, 47, 48, 63] {
            let mut v = w;
            v[at] ^= 0x80;
            assert!(Key(w) != Key(v), "byte {at}");
        }
    }

    /// nkipy-matmul_large sg00 Pool pc 6919 (loaded form): `S[32]>=4112 $S[6]>=603`. The body's
    /// wait guards the output DMA that follows; ignoring it let the DMA read two column blocks
    /// before the Vector engine had written them.
    #[test]
    fn event_semaphore_carries_a_second_wait() {
        let w = word("a010000005200000101000000000000000000000000000000000000000000000050600005b020000000000000000000000000000000000000000000000000000");
        let (sync, ci) = decode_real(&w).expect("decodes");
        assert_eq!(
            sync.wait.map(|w| (w.cond, w.index, w.value)),
            Some((WaitCond::Ge, 32, 4112))
        );
        let ext = ext_wait_of(&ci).expect("second wait");
        assert_eq!((ext.cond, ext.index, ext.value), (WaitCond::Ge, 6, 603));
        // A body update becomes the word's update; an unknown body condition is refused.
        let mut u = w;
        u[34] = 0x13;
        u[35] = 9;
        let (sync, _) = decode_real(&u).expect("decodes");
        assert_eq!(sync.update.map(|u| (u.op, u.index)), Some((SemOp::Inc, 9)));
        let mut bad = w;
        bad[32] = 0x07;
        assert!(decode_real(&bad).is_err());
    }
}
