//! One NeuronCore's on-chip memories (SBUF and PSUM) and the scratch buffers its data path
//! reuses. The trn2 instruction semantics that work on them are in `cayman_exec`.

use crate::arch::ArchProfile;
use crate::gemm::View;
use crate::hostmem::{F32Mem, MemSource};
pub use crate::kept::Kept;
use crate::writemap::Stamps;
use neuron_isa::Space;
use zerocopy::IntoBytes;

/// On-chip memories of one core.
#[derive(Debug)]
pub struct CoreMem {
    pub partitions: usize,
    pub sbuf_pb: usize,
    pub psum_pb: usize,
    /// Distance between partitions in storage: the TPB window's stride (256 KiB for SBUF,
    /// 16 KiB for PSUM) plus [`STORAGE_SKEW`], so the same byte of each partition falls in
    /// another cache set (at the window's power-of-two stride a 128-partition operand's rows
    /// all compete for one set: [`CoreMem::storage_at`] maps a window offset to storage).
    /// SBUF's becomes the window's own once user space maps the window
    /// ([`CoreMem::sbuf_ptr`]), so the storage is then exactly the 32 MiB window.
    pub sbuf_stride: usize,
    pub psum_stride: usize,
    /// SBUF, partition-major, `partitions * sbuf_pb` bytes, stored as f32 words so fp32 tiles
    /// can feed the GEMM without copies; page-aligned, possibly in memory user space maps.
    /// Private, like `psum`: every write reaches them through a method that counts it.
    sbuf: F32Mem,
    psum: F32Mem,
    /// Mutable borrows of each space so far (SBUF, PSUM): equal counts at two moments mean
    /// nothing on the device wrote that space in between (user space's mapping of SBUF aside,
    /// whose writes race with the engines as on hardware).
    writes: [u64; 2],
    /// Which columns of each space each counted write touched (`writemap`): rows kept
    /// elsewhere in the space are not copied out, and memos of other columns stay true.
    stamps: [Stamps; 2],
    /// Values a deferred pass pair reads where they lie, copied out before their space is
    /// next written ([`CoreMem::keep`]).
    kept: Option<Kept>,
    /// bf16 weights a matrix-vector MATMUL reads where LDWEIGHTS found them, likewise
    /// ([`CoreMem::keep_weights`]).
    weights: Option<Kept<u16>>,
    /// fp32 weights of a transpose, read where LDWEIGHTS found them by the MATMUL that
    /// transposes them, likewise ([`CoreMem::keep_words`]).
    words: Option<Kept<f32>>,
    /// User space has been handed the SBUF storage's address (a mapping of the SBUF window):
    /// its writes are not counted, so SBUF's count proves nothing from then on.
    sbuf_mapped: bool,
    /// PSUM's write count when it was last all zero (created zeroed, or zeroed by
    /// [`CoreMem::clear`]): every PSUM write is counted, so an equal count now means it still
    /// is.
    psum_zero_at: u64,
}

/// Bytes each partition's storage stride adds to its window's: one cache line, so the rows
/// of a 128-partition operand at one offset fill 64 different L1 sets instead of one (a C
/// loop touching four such operands: 1.9 us at the window's stride, 0.4 us skewed,
/// `docs/performance.md`, 2026-12-05 sixth session).
pub const STORAGE_SKEW: usize = 64;

/// The TPB window's distance between partitions of `s` (what addresses use).
pub fn window_stride(s: Space) -> usize {
    match s {
        Space::Sbuf => crate::arch::tpb::SBUF_PARTITION_STRIDE as usize,
        Space::Psum => crate::arch::tpb::PSUM_PARTITION_STRIDE as usize,
    }
}

/// The on-chip memory that is not `s` (a product or move from one into the other).
pub fn other_space(s: Space) -> Space {
    match s {
        Space::Sbuf => Space::Psum,
        Space::Psum => Space::Sbuf,
    }
}

fn index(s: Space) -> usize {
    match s {
        Space::Sbuf => 0,
        Space::Psum => 1,
    }
}

impl CoreMem {
    pub fn new(p: &ArchProfile) -> Self {
        Self::with_memory(p, &crate::hostmem::heap_source)
    }

    /// SBUF and PSUM storage from `src` (the heap where it gives none). Allocation failure of
    /// this fixed-size, lazily-touched memory is fatal, like any allocation failure.
    pub fn with_memory(p: &ArchProfile, src: MemSource) -> Self {
        let stride = |s: Space| window_stride(s) + STORAGE_SKEW;
        let words = |s: Space| p.partitions * stride(s) / 4;
        let alloc = |n: usize| F32Mem::zeroed(n, src).expect("SBUF/PSUM storage");
        CoreMem {
            partitions: p.partitions,
            sbuf_pb: p.sbuf_partition_bytes,
            psum_pb: p.psum_partition_bytes,
            sbuf_stride: stride(Space::Sbuf),
            psum_stride: stride(Space::Psum),
            // Zeroed allocations this large come straight from the OS (or a sparse memfd):
            // untouched pages cost nothing.
            sbuf: alloc(words(Space::Sbuf)),
            psum: alloc(words(Space::Psum)),
            writes: [0; 2],
            stamps: [
                Stamps::new(p.sbuf_partition_bytes),
                Stamps::new(p.psum_partition_bytes),
            ],
            kept: None,
            weights: None,
            words: None,
            sbuf_mapped: false,
            psum_zero_at: 0,
        }
    }

    /// Count a write to `s` (to any of its columns), first copying out rows kept there.
    /// (Inlined: a DMA borrows its destination once per row.)
    #[inline(always)]
    fn before_write(&mut self, s: Space) {
        self.before_write_in(s, None);
    }

    /// Count a write to `s`, to columns `[lo, hi)` (bytes of each partition) where `cols`
    /// names them, else to any: stamped (`writemap`), and the rows kept in those columns
    /// copied out first.
    #[inline(always)]
    fn before_write_in(&mut self, s: Space, cols: Option<(usize, usize)>) {
        let i = index(s);
        self.writes[i] = self.writes[i].wrapping_add(1);
        match cols {
            Some((lo, hi)) => self.stamps[i].cols(self.writes[i], lo, hi),
            None => self.stamps[i].all(self.writes[i]),
        }
        if self.kept.is_some() || self.weights.is_some() || self.words.is_some() {
            self.copy_kept(s, cols);
        }
    }

    /// Copy out the rows kept in `s` (those meeting columns `cols`, if given).
    #[cold]
    #[inline(never)]
    fn copy_kept(&mut self, s: Space, cols: Option<(usize, usize)>) {
        let stride = self.stride(s);
        let meets = |kp_cols: Option<(usize, usize)>| match (cols, kp_cols) {
            (Some((lo, hi)), Some((a, b))) => a < hi && lo < b,
            _ => true,
        };
        let words: &[f32] = match s {
            Space::Sbuf => &self.sbuf,
            Space::Psum => &self.psum,
        };
        for kp in [self.kept.as_mut(), self.words.as_mut()]
            .into_iter()
            .flatten()
        {
            if kp.space == s && meets(kp.cols(stride, 4)) {
                kp.save(words);
            }
        }
        if let Some(kp) = self
            .weights
            .as_mut()
            .filter(|kp| kp.space == s && meets(kp.cols(stride, 2)))
        {
            let bits = match s {
                Space::Sbuf => bits16(&self.sbuf),
                Space::Psum => bits16(&self.psum),
            };
            kp.save(bits);
        }
    }

    /// Writes to `s` so far (see the field).
    pub fn writes(&self, s: Space) -> u64 {
        self.writes[index(s)]
    }

    /// Whether [`CoreMem::writes`] sees every write to `s`: not SBUF once user space maps it.
    pub fn sees_all_writes(&self, s: Space) -> bool {
        !(s == Space::Sbuf && self.sbuf_mapped)
    }

    /// Whether nothing has written columns `[lo, hi)` (bytes of each partition) of `s` since
    /// its count was `count` (false where the count does not see every write).
    pub fn cols_unwritten_since(&self, s: Space, count: u64, lo: usize, hi: usize) -> bool {
        self.sees_all_writes(s)
            && (self.writes(s) == count || self.stamps[index(s)].unwritten_since(count, lo, hi))
    }

    /// Whether nothing has written `s` since its count was `count` (false where the count
    /// does not see every write).
    pub fn unwritten_since(&self, s: Space, count: u64) -> bool {
        self.sees_all_writes(s) && self.writes(s) == count
    }

    /// Keep `k` rows of `n` fp32 words of `space` at `view` (`cs` 1) for a later reader
    /// ([`Kept`]): read where they lie until the space is next written, copied out (into
    /// `buf`) just before that. Replaces rows kept before; false, nothing kept, if a row would
    /// lie outside the space or the space has writers the model does not see (user space's
    /// mapping of SBUF).
    pub fn keep(&mut self, space: Space, view: View, k: usize, n: usize, buf: Vec<f32>) -> bool {
        let len = self.f32s(space).len();
        let sees = self.sees_all_writes(space);
        keep_in(&mut self.kept, sees, space, (view, k, n, len), buf)
    }

    /// The rows kept now, if any.
    pub fn kept(&self) -> Option<&Kept> {
        self.kept.as_ref()
    }

    /// Stop keeping rows: what was kept (its copy, if one was made, and its buffer).
    pub fn release(&mut self) -> Option<Kept> {
        self.kept.take()
    }

    /// [`CoreMem::keep`] for LDWEIGHTS' bf16 weights, in their own slot: `k` rows of `n`
    /// 16-bit elements of `space` at `view` (in 16-bit units, `cs` 1).
    pub fn keep_weights(
        &mut self,
        space: Space,
        view: View,
        k: usize,
        n: usize,
        buf: Vec<u16>,
    ) -> bool {
        let len = self.bits16(space).len();
        let sees = self.sees_all_writes(space);
        keep_in(&mut self.weights, sees, space, (view, k, n, len), buf)
    }

    /// The weights kept now, if any.
    pub fn kept_weights(&self) -> Option<&Kept<u16>> {
        self.weights.as_ref()
    }

    /// Stop keeping the weights: what was kept.
    pub fn release_weights(&mut self) -> Option<Kept<u16>> {
        self.weights.take()
    }

    /// [`CoreMem::keep`] for an LDWEIGHTS' fp32 weights, in their own slot: `k` rows of `n`
    /// fp32 words of `space` at `view` (`cs` 1).
    pub fn keep_words(
        &mut self,
        space: Space,
        view: View,
        k: usize,
        n: usize,
        buf: Vec<f32>,
    ) -> bool {
        let len = self.f32s(space).len();
        let sees = self.sees_all_writes(space);
        keep_in(&mut self.words, sees, space, (view, k, n, len), buf)
    }

    /// The fp32 weights kept now, if any.
    pub fn kept_words(&self) -> Option<&Kept<f32>> {
        self.words.as_ref()
    }

    /// Stop keeping the fp32 weights: what was kept.
    pub fn release_words(&mut self) -> Option<Kept<f32>> {
        self.words.take()
    }

    /// The kept fp32 weights' rows to read, where they are (`k` rows at the view: their
    /// copy, dense, once their space was written; else the space's storage), and `write`'s
    /// storage to write, the write counted first (so weights in `write` itself are read from
    /// their copy). None where no fp32 weights are kept.
    pub fn words_and(&mut self, write: Space) -> Option<(&[f32], View, &mut [f32])> {
        self.before_write(write);
        let kp = self.words.as_ref()?;
        let (other, out): (&[f32], &mut [f32]) = match write {
            Space::Psum => (&self.sbuf, &mut self.psum),
            Space::Sbuf => (&self.psum, &mut self.sbuf),
        };
        match kp.copy() {
            Some(c) => {
                let n = kp.shape().1;
                Some((
                    c,
                    View {
                        off: 0,
                        rs: n,
                        cs: 1,
                    },
                    out,
                ))
            }
            // Rows in `write` itself were copied out by the write's count above.
            None if kp.space != write => Some((other, kp.view(), out)),
            None => None,
        }
    }

    /// The storage of `s` as 16-bit words (bf16 elements at even byte offsets).
    pub fn bits16(&self, s: Space) -> &[u16] {
        bits16(self.f32s(s))
    }

    /// [`CoreMem::split_f32`] with the kept weights, read alongside the other space.
    pub fn split_f32_weights(&mut self, write: Space) -> (&[f32], Option<&Kept<u16>>, &mut [f32]) {
        self.before_write(write);
        let kept = self.weights.as_ref();
        match write {
            Space::Psum => (&self.sbuf, kept, &mut self.psum),
            Space::Sbuf => (&self.psum, kept, &mut self.sbuf),
        }
    }

    /// The other space's words to read and `write`'s to write (a product from one space into
    /// the other), the write counted.
    pub fn split_f32(&mut self, write: Space) -> (&[f32], &mut [f32]) {
        self.before_write(write);
        match write {
            Space::Psum => (&self.sbuf, &mut self.psum),
            Space::Sbuf => (&self.psum, &mut self.sbuf),
        }
    }

    /// The SBUF storage's address, for user space's mapping of the SBUF window: counted as a
    /// write, rows kept there copied out, and SBUF's count no proof of anything from now on
    /// (what the mapping writes is not seen). The storage is laid out as the window first
    /// (partition `p` at `p` × 256 KiB, the bytes past each partition's end zero), and stays
    /// so: a mapping shows storage as it is.
    pub fn sbuf_ptr(&mut self) -> *mut f32 {
        self.before_write(Space::Sbuf);
        self.sbuf_mapped = true;
        self.unskew_sbuf();
        self.sbuf.as_mut_ptr()
    }

    /// Move SBUF's partitions from the skewed stride to the window's, in place (each moves
    /// down, partition 0 first, so none is overwritten before it moves), and zero the bytes
    /// between partitions. Blocks that are zero where they are and where they go are not
    /// written: untouched storage stays untouched.
    fn unskew_sbuf(&mut self) {
        let w = window_stride(Space::Sbuf);
        let from_stride = self.sbuf_stride;
        if from_stride == w {
            return;
        }
        let (pb, parts) = (self.sbuf_pb.min(w), self.partitions);
        let bytes = self.sbuf.as_mut_bytes();
        const BLOCK: usize = 4096;
        let zero = |b: &[u8]| b.iter().all(|x| *x == 0);
        for p in 0..parts {
            let (from, to) = (p * from_stride, p * w);
            for at in (0..pb).step_by(BLOCK) {
                let n = BLOCK.min(pb - at);
                let (src, dst) = (from + at, to + at);
                let (Some(s), Some(d)) = (bytes.get(src..src + n), bytes.get(dst..dst + n)) else {
                    continue; // (the storage holds every partition: not reached)
                };
                if zero(s) && zero(d) {
                    continue;
                }
                bytes.copy_within(src..src + n, dst);
            }
            // The window's bytes past this partition's end, up to the next partition.
            let (gap, end) = (to + pb, (to + w).min(bytes.len()));
            if let Some(g) = bytes.get_mut(gap..end) {
                if !zero(g) {
                    g.fill(0);
                }
            }
        }
        // What lies past the last partition's window (storage the skew added) is unused.
        let tail = (parts * w).min(bytes.len());
        if !zero(&bytes[tail..]) {
            bytes[tail..].fill(0);
        }
        self.sbuf_stride = w;
    }

    /// The storage byte of window offset `off` of `s` (partition `off / window stride`, byte
    /// `off % window stride` of it).
    #[inline]
    pub fn storage_at(&self, s: Space, off: usize) -> usize {
        let w = window_stride(s);
        (off / w) * self.stride(s) + off % w
    }

    /// The storage stride of `s` (see the field).
    #[inline]
    pub fn stride(&self, s: Space) -> usize {
        match s {
            Space::Sbuf => self.sbuf_stride,
            Space::Psum => self.psum_stride,
        }
    }

    /// Reset-time clearing. PSUM (2 MiB) is zeroed; SBUF keeps its contents, as SRAM does
    /// across a core reset: zeroing the 32 MiB window would touch every page of it on each
    /// load, and programs must initialise what they read anyway. A PSUM with no write since it
    /// was last zero is left as it is: filling it would touch every page of storage nothing
    /// touched (a fresh device's load resets its cores: 512 page faults each, half of a fault
    /// campaign experiment's, `docs/performance.md`).
    pub fn clear(&mut self) {
        self.kept = None;
        self.weights = None;
        self.words = None;
        if self.writes[1] != self.psum_zero_at {
            self.before_write(Space::Psum);
            self.psum.fill(0.0);
            self.psum_zero_at = self.writes[1];
        }
    }

    pub fn bytes(&self, s: Space) -> &[u8] {
        match s {
            Space::Sbuf => self.sbuf.as_bytes(),
            Space::Psum => self.psum.as_bytes(),
        }
    }

    /// The storage of `s` as f32 words (fp32 views of aligned tiles index it directly).
    pub fn f32s(&self, s: Space) -> &[f32] {
        match s {
            Space::Sbuf => &self.sbuf,
            Space::Psum => &self.psum,
        }
    }

    #[inline]
    pub fn f32s_mut(&mut self, s: Space) -> &mut [f32] {
        self.before_write(s);
        match s {
            Space::Sbuf => &mut self.sbuf,
            Space::Psum => &mut self.psum,
        }
    }

    #[inline]
    pub fn bytes_mut(&mut self, s: Space) -> &mut [u8] {
        self.bytes_mut_in(s, None)
    }

    /// [`CoreMem::bytes_mut`] for a writer that touches only columns `[lo, hi)` (bytes of
    /// each partition, storage layout) of the partitions it writes.
    #[inline]
    pub fn bytes_mut_cols(&mut self, s: Space, lo: usize, hi: usize) -> &mut [u8] {
        self.bytes_mut_in(s, Some((lo, hi)))
    }

    /// [`CoreMem::across`] for a writer that touches only columns `[lo, hi)` of the space it
    /// writes.
    #[inline]
    pub fn across_cols(&mut self, from: Space, lo: usize, hi: usize) -> (&[u8], &mut [u8]) {
        self.across_in(from, Some((lo, hi)))
    }

    /// [`CoreMem::bytes_mut_cols`] where `cols` names the columns written, else
    /// [`CoreMem::bytes_mut`] (a write to every column).
    #[inline(always)]
    pub fn bytes_mut_in(&mut self, s: Space, cols: Option<(usize, usize)>) -> &mut [u8] {
        self.before_write_in(s, cols);
        match s {
            Space::Sbuf => self.sbuf.as_mut_bytes(),
            Space::Psum => self.psum.as_mut_bytes(),
        }
    }

    #[inline(always)]
    fn across_in(&mut self, from: Space, cols: Option<(usize, usize)>) -> (&[u8], &mut [u8]) {
        self.before_write_in(other_space(from), cols);
        match from {
            Space::Sbuf => (self.sbuf.as_bytes(), self.psum.as_mut_bytes()),
            Space::Psum => (self.psum.as_bytes(), self.sbuf.as_mut_bytes()),
        }
    }

    /// The bytes of `from` to read and of the other space to write (a move between SBUF and
    /// PSUM in one copy).
    #[inline]
    pub fn across(&mut self, from: Space) -> (&[u8], &mut [u8]) {
        self.across_in(from, None)
    }
}

/// Keep rows in `slot` (replacing what it held): `shape` is their view, number, length and
/// the storage's length in elements. False, nothing kept, where the space's writes are not
/// all seen (`sees`) or a row would leave the storage.
fn keep_in<T: Copy>(
    slot: &mut Option<Kept<T>>,
    sees: bool,
    space: Space,
    shape: (View, usize, usize, usize),
    buf: Vec<T>,
) -> bool {
    if !sees {
        return false;
    }
    let (view, k, n, len) = shape;
    *slot = Kept::new(space, view, k, n, len, buf);
    slot.is_some()
}

/// f32 words as 16-bit words (always whole: four-byte words hold two each).
fn bits16(words: &[f32]) -> &[u16] {
    use zerocopy::FromBytes;
    <[u16]>::ref_from_bytes(words.as_bytes()).unwrap_or(&[])
}

/// Scratch buffers reused across instructions (no allocation on the hot path).
#[derive(Debug, Default)]
pub struct Scratch {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub bytes: Vec<u8>,
    /// A MATMUL's moving tensor packed for AMX tiles, and the tiles' product.
    pub bpack: crate::gemm::amx::PackedB,
    pub tiles: Vec<f32>,
    /// A bf16 moving tensor's raw bits, for the tiles.
    pub bits16: Vec<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> CoreMem {
        CoreMem::new(&ArchProfile::new(neuron_abi::Arch::V3Trn2))
    }

    /// Every way to write a space counts as a write to it (and only to it); reads do not.
    #[test]
    fn every_mutable_borrow_counts_as_a_write_to_its_space() {
        let mut m = mem();
        let count = |m: &CoreMem| (m.writes(Space::Sbuf), m.writes(Space::Psum));
        assert_eq!(count(&m), (0, 0));
        let _ = m.bytes(Space::Sbuf);
        let _ = m.f32s(Space::Psum);
        assert_eq!(count(&m), (0, 0), "reads");
        m.bytes_mut(Space::Sbuf)[0] = 1;
        assert_eq!(count(&m), (1, 0));
        m.f32s_mut(Space::Psum)[0] = 1.0;
        assert_eq!(count(&m), (1, 1));
        let _ = m.across(Space::Sbuf); // reads SBUF, writes PSUM
        assert_eq!(count(&m), (1, 2));
        let _ = m.across(Space::Psum);
        assert_eq!(count(&m), (2, 2));
        let _ = m.split_f32(Space::Sbuf);
        assert_eq!(count(&m), (3, 2));
        let _ = m.sbuf_ptr();
        assert_eq!(count(&m), (4, 2));
        m.clear();
        assert_eq!(count(&m), (4, 3));
    }

    /// A reset zeroes PSUM where anything wrote it since it was last zero, and leaves a PSUM
    /// that is still zero untouched (no write counted, no page of it touched).
    #[test]
    fn a_reset_zeroes_only_a_psum_written_since_it_was_zero() {
        let mut m = mem();
        let psum_writes = |m: &CoreMem| m.writes(Space::Psum);
        m.clear();
        assert_eq!(psum_writes(&m), 0, "a fresh PSUM was filled again");
        assert!(m.f32s(Space::Psum).iter().all(|v| v.to_bits() == 0));
        let last = m.f32s(Space::Psum).len() - 1;
        m.f32s_mut(Space::Psum)[3] = 1.5;
        m.bytes_mut(Space::Psum)[last * 4] = 7;
        m.clear();
        assert_eq!(psum_writes(&m), 3, "the clear of a written PSUM is a write");
        assert!(
            m.f32s(Space::Psum).iter().all(|v| v.to_bits() == 0),
            "a written PSUM was not zeroed"
        );
        m.clear();
        assert_eq!(
            psum_writes(&m),
            3,
            "a PSUM zeroed and not written since was filled again"
        );
        // Writes to SBUF leave PSUM's zero standing.
        m.bytes_mut(Space::Sbuf)[0] = 1;
        m.clear();
        assert_eq!(psum_writes(&m), 3);
        let _ = m.across(Space::Sbuf); // a move into PSUM: a PSUM write
        m.clear();
        assert_eq!(psum_writes(&m), 5);
    }

    /// Storage strides are the window's plus the skew (so one offset of every partition
    /// falls in another cache set); window offsets map to storage partition by partition.
    /// Handing SBUF to a user mapping lays it out as the window: every partition's bytes at
    /// `p` × 256 KiB, the bytes between partitions and past the last zero, and window offsets
    /// then are storage offsets. PSUM keeps its skew.
    #[test]
    fn storage_is_skewed_until_user_space_maps_the_window() {
        let mut m = mem();
        let (w, pw) = (window_stride(Space::Sbuf), window_stride(Space::Psum));
        assert_eq!(m.stride(Space::Sbuf), w + STORAGE_SKEW);
        assert_eq!(m.stride(Space::Psum), pw + STORAGE_SKEW);
        assert_eq!(
            m.storage_at(Space::Sbuf, 3 * w + 10),
            3 * (w + STORAGE_SKEW) + 10
        );
        assert_eq!(
            m.storage_at(Space::Psum, 2 * pw + 4),
            2 * (pw + STORAGE_SKEW) + 4
        );
        let pb = m.sbuf_pb;
        // A few bytes of each partition, its first and last included; every other partition
        // is left untouched.
        let mark = |p: usize, o: usize| (p * 7 + o * 13 + 1) as u8;
        let offs = [0, 1, 4095, 4096, pb / 2, pb - 1];
        for p in (0..m.partitions).step_by(2) {
            for o in offs {
                let at = m.storage_at(Space::Sbuf, p * w + o);
                m.bytes_mut(Space::Sbuf)[at] = mark(p, o);
            }
        }
        let len = m.bytes(Space::Sbuf).len();
        let ptr = m.sbuf_ptr() as *const u8;
        assert_eq!(ptr, m.bytes(Space::Sbuf).as_ptr(), "the storage itself");
        assert_eq!(m.stride(Space::Sbuf), w);
        assert_eq!(m.storage_at(Space::Sbuf, 5 * w + 3), 5 * w + 3);
        let b = m.bytes(Space::Sbuf);
        assert_eq!(b.len(), len, "the storage keeps its size");
        for p in 0..m.partitions {
            for o in offs {
                let want = if p % 2 == 0 { mark(p, o) } else { 0 };
                assert_eq!(b[p * w + o], want, "partition {p} byte {o}");
            }
        }
        let marked: usize = b.iter().filter(|x| **x != 0).count();
        assert_eq!(
            marked,
            m.partitions / 2 * offs.len(),
            "nothing else is non-zero"
        );
        // A second mapping changes nothing.
        let again = m.sbuf_ptr() as *const u8;
        assert_eq!(again, ptr);
        assert_eq!(m.bytes(Space::Sbuf)[2 * w + 1], mark(2, 1));
    }

    /// Measurement, not a check: one element of each of 128 partitions of four operands read
    /// and written (what a decode step's small ACTIVATE, TENSOR_TENSOR or COPY touches), at
    /// the window's partition stride and at the storage's skewed one, best of seven rounds in
    /// one run. `cargo test --release -p neuron-devmodel --lib partition_rows_at_one_offset --
    /// --ignored --nocapture`
    #[test]
    #[ignore]
    fn partition_rows_at_one_offset() {
        let w = window_stride(Space::Sbuf);
        let mut buf = vec![1.0f32; 128 * (w + STORAGE_SKEW) / 4 + 4096];
        let mut time = |stride: usize| {
            (0..7)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    let rounds = 2000;
                    for _ in 0..rounds {
                        for op in 0..4 {
                            let base = op * 1024 + op * 32;
                            for p in 0..128 {
                                let i = (base + p * stride) / 4;
                                buf[i] = buf[i] * 1.0001 + 1.0;
                            }
                        }
                    }
                    t0.elapsed().as_secs_f64() * 1e9 / rounds as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        let (plain, skewed) = (time(w), time(w + STORAGE_SKEW));
        eprintln!(
            "4 operands x 128 partition rows at one offset: window stride {plain:.0} ns, storage stride (+{STORAGE_SKEW} B) {skewed:.0} ns, ratio {:.2}",
            plain / skewed
        );
        std::hint::black_box(&buf);
    }

    /// Kept rows are read where they lie until their space is written; the first write copies
    /// them out as they were (later writes do not copy again); writes to the other space copy
    /// nothing; rows outside the space are refused.
    #[test]
    fn kept_rows_are_copied_out_before_their_space_is_written() {
        let mut m = mem();
        let (k, n, rs, off) = (3, 5, m.sbuf_stride / 4, 7);
        let at = |r: usize, c: usize| off + r * rs + c;
        for r in 0..k {
            for c in 0..n {
                m.f32s_mut(Space::Sbuf)[at(r, c)] = (10 * r + c) as f32;
            }
        }
        let view = |off: usize, rs: usize| View { off, rs, cs: 1 };
        assert!(m.keep(Space::Sbuf, view(off, rs), k, n, Vec::new()));
        m.f32s_mut(Space::Psum)[0] = 9.0;
        assert!(
            m.kept().is_some_and(|kp| kp.copy().is_none()),
            "a PSUM write"
        );
        m.f32s_mut(Space::Sbuf)[at(1, 2)] = -1.0;
        m.bytes_mut(Space::Sbuf)[0] = 0xff;
        let want: Vec<f32> = (0..k)
            .flat_map(|r| (0..n).map(move |c| (10 * r + c) as f32))
            .collect();
        assert_eq!(m.kept().and_then(Kept::copy), Some(&want[..]));
        let kp = m.release().expect("kept");
        assert!(m.kept().is_none());
        assert!(kp.into_buffer().capacity() >= k * n);
        // The last row would end past the storage; zero rows are nothing to keep.
        let len = m.f32s(Space::Psum).len();
        assert!(!m.keep(Space::Psum, view(len - 4, 0), 1, 5, Vec::new()));
        assert!(!m.keep(Space::Psum, view(0, usize::MAX / 2), 3, 1, Vec::new()));
        assert!(!m.keep(Space::Psum, view(0, 1), 0, 1, Vec::new()));
        assert!(m.kept().is_none());
        assert!(m.keep(Space::Psum, view(len - 5, 0), 1, 5, Vec::new()));
        m.clear();
        assert!(m.kept().is_none(), "a reset drops kept rows");
    }

    /// Once user space has SBUF's address, SBUF's count proves nothing and nothing is kept
    /// there; PSUM's still does.
    #[test]
    fn a_user_mapping_of_sbuf_ends_trust_in_its_count() {
        let mut m = mem();
        let (sb, ps) = (m.writes(Space::Sbuf), m.writes(Space::Psum));
        assert!(m.unwritten_since(Space::Sbuf, sb) && m.unwritten_since(Space::Psum, ps));
        let row = View {
            off: 0,
            rs: 1,
            cs: 1,
        };
        assert!(m.keep(Space::Sbuf, row, 1, 4, Vec::new()));
        let _ = m.sbuf_ptr();
        assert!(
            m.kept().is_some_and(|kp| kp.copy().is_some()),
            "kept rows copied out"
        );
        let (sb, ps) = (m.writes(Space::Sbuf), m.writes(Space::Psum));
        assert!(!m.sees_all_writes(Space::Sbuf) && m.sees_all_writes(Space::Psum));
        assert!(!m.unwritten_since(Space::Sbuf, sb));
        assert!(m.unwritten_since(Space::Psum, ps));
        assert!(!m.keep(Space::Sbuf, row, 1, 4, Vec::new()));
        assert!(m.keep(Space::Psum, row, 1, 4, Vec::new()));
        assert!(!m.keep_weights(Space::Sbuf, row, 1, 4, Vec::new()));
        assert!(m.keep_weights(Space::Psum, row, 1, 4, Vec::new()));
    }

    /// Kept rows are copied out only by a write that meets their columns (or names none);
    /// rows of another layout (not a partition apart) by any write to their space.
    #[test]
    fn kept_rows_are_copied_out_only_by_writes_to_their_columns() {
        let mut m = mem();
        let rs = m.sbuf_stride / 4;
        let view = |off: usize, rs: usize| View { off, rs, cs: 1 };
        // Four rows of 8 fp32 at bytes 0x400..0x420 of partitions 0..4.
        assert!(m.keep_words(Space::Sbuf, view(0x100, rs), 4, 8, Vec::new()));
        m.bytes_mut_cols(Space::Sbuf, 0x420, 0x800);
        m.bytes_mut_cols(Space::Sbuf, 0, 0x400);
        m.bytes_mut(Space::Psum);
        assert!(
            m.kept_words().is_some_and(|kp| kp.copy().is_none()),
            "other columns"
        );
        m.bytes_mut_cols(Space::Sbuf, 0x41c, 0x420);
        assert!(
            m.kept_words().is_some_and(|kp| kp.copy().is_some()),
            "its columns"
        );
        assert!(m.keep_words(Space::Sbuf, view(0x100, rs), 4, 8, Vec::new()));
        m.bytes_mut(Space::Sbuf);
        assert!(
            m.kept_words().is_some_and(|kp| kp.copy().is_some()),
            "all columns"
        );
        // Rows 9 words apart lie across columns: any write copies them.
        assert!(m.keep_words(Space::Sbuf, view(0x100, 9), 4, 8, Vec::new()));
        m.bytes_mut_cols(Space::Sbuf, 0x8000, 0x8004);
        assert!(
            m.kept_words().is_some_and(|kp| kp.copy().is_some()),
            "another layout"
        );
        let (sb, ps) = (m.writes(Space::Sbuf), m.writes(Space::Psum));
        m.bytes_mut_cols(Space::Sbuf, 0x100, 0x200);
        assert!(m.cols_unwritten_since(Space::Sbuf, sb, 0x200, 0x300));
        assert!(!m.cols_unwritten_since(Space::Sbuf, sb, 0x1fc, 0x204));
        assert!(m.cols_unwritten_since(Space::Psum, ps, 0, 0x4000));
    }

    /// Kept fp32 weights (a transpose's) have their own slot: `words_and` hands their rows
    /// where they lie with the other space to write; a write to their own space (that one
    /// included) reads them from their copy; a reset drops them; a user mapping of SBUF
    /// refuses them.
    #[test]
    fn kept_words_are_read_in_place_until_their_space_is_written() {
        let mut m = mem();
        let (k, n, rs, off) = (3, 4, m.sbuf_stride / 4, 5);
        for r in 0..k {
            for c in 0..n {
                m.f32s_mut(Space::Sbuf)[off + r * rs + c] = (10 * r + c) as f32;
            }
        }
        let want: Vec<f32> = (0..k)
            .flat_map(|r| (0..n).map(move |c| (10 * r + c) as f32))
            .collect();
        let view = View { off, rs, cs: 1 };
        assert!(m.keep_words(Space::Sbuf, view, k, n, Vec::new()));
        let (rows, v, out) = m.words_and(Space::Psum).expect("kept");
        assert_eq!((v.off, v.rs), (off, rs), "in place");
        assert_eq!(rows[off + rs + 2], 12.0);
        out[0] = 1.0;
        assert!(m.kept_words().is_some_and(|kp| kp.copy().is_none()));
        let (rows, v, _) = m.words_and(Space::Sbuf).expect("kept");
        assert_eq!((v.off, v.rs), (0, n), "from the copy");
        assert_eq!(rows, &want[..]);
        m.clear();
        assert!(m.kept_words().is_none() && m.words_and(Space::Psum).is_none());
        let _ = m.sbuf_ptr();
        assert!(!m.keep_words(Space::Sbuf, view, k, n, Vec::new()));
        assert!(m.keep_words(
            Space::Psum,
            View {
                off: 0,
                rs: 8,
                cs: 1
            },
            2,
            8,
            Vec::new()
        ));
    }

    /// Kept weights (16-bit rows, at any even byte) have their own slot: copied out before
    /// their space is written, as the pass pair's rows are, independently of them; a reset
    /// drops them; rows past the storage are refused.
    #[test]
    fn kept_weights_are_copied_out_before_their_space_is_written() {
        let mut m = mem();
        let (k, n, rs, off) = (3, 5, m.sbuf_stride / 2, 3); // 16-bit units: an odd word
        let at = |r: usize, c: usize| 2 * (off + r * rs + c);
        for r in 0..k {
            for c in 0..n {
                let v = (100 * r + c) as u16;
                m.bytes_mut(Space::Sbuf)[at(r, c)..at(r, c) + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let view = |off: usize, rs: usize| View { off, rs, cs: 1 };
        assert!(m.keep_weights(Space::Sbuf, view(off, rs), k, n, Vec::new()));
        assert!(m.keep(Space::Psum, view(0, 1), 1, 1, Vec::new()));
        m.f32s_mut(Space::Psum)[0] = 9.0;
        assert!(
            m.kept().is_some_and(|kp| kp.copy().is_some()),
            "PSUM rows copied"
        );
        assert!(
            m.kept_weights().is_some_and(|kp| kp.copy().is_none()),
            "a PSUM write leaves SBUF's weights in place"
        );
        m.bytes_mut(Space::Sbuf)[at(2, 4)] = 0xff;
        let want: Vec<u16> = (0..k)
            .flat_map(|r| (0..n).map(move |c| (100 * r + c) as u16))
            .collect();
        assert_eq!(m.kept_weights().and_then(Kept::copy), Some(&want[..]));
        let kp = m.release_weights().expect("kept");
        assert_eq!(
            kp.into_rows(m.bits16(Space::Sbuf)),
            want,
            "the copy, not storage"
        );
        assert!(m.kept_weights().is_none() && m.kept().is_some());
        let len = m.bits16(Space::Psum).len();
        assert_eq!(len, 2 * m.f32s(Space::Psum).len());
        assert!(!m.keep_weights(Space::Psum, view(len - 4, 0), 1, 5, Vec::new()));
        assert!(m.keep_weights(Space::Psum, view(len - 5, 0), 1, 5, Vec::new()));
        // Not copied yet: the rows as they lie.
        let kp = m.release_weights().expect("kept");
        assert_eq!(kp.into_rows(m.bits16(Space::Psum)), vec![0u16; 5]);
        assert!(m.keep_weights(Space::Sbuf, view(off, rs), k, n, Vec::new()));
        m.clear();
        assert!(m.kept_weights().is_none(), "a reset drops kept weights");
    }
}
