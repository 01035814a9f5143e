//! Transposes done as data movement (a PE transpose against an identity moving tensor):
//! 8 x 8 blocks, in AVX registers where the CPU has AVX (chosen at run time), element by
//! element elsewhere and at the edges; the same bits either way. bf16 transposes of weights
//! kept as bits move 16-bit values (`transpose_bits`: SSE2 blocks on x86-64, straight into
//! the destination's rows), and where transposes found their identities is remembered while
//! nothing writes those columns (`identity_memo`).
// The AVX and SSE2 blocks (`blocks_avx`, `blocks16_sse2`); every unsafe block has a SAFETY
// note.
#![allow(unsafe_code)]

use super::alu::{identity_row16, is_identity};
use super::pattern::span;
use super::pe::PeState;
use crate::core::CoreMem;
use crate::fanout::SharedPtr;
use crate::fault::OpFault;
use crate::gemm::View;
use neuron_isa::cayman::AccessPattern;
use neuron_isa::Dtype;

/// `dst[j * rows + c] = src[c * cols + j]` for a `rows x cols` source, in 8 x 8 blocks.
pub(super) fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    transpose_into(src, rows, cols, dst, 0, rows, false);
}

/// `dst[off + j * pitch + c] = src[c * cols + j]` (`+=` when `accumulate`) for a
/// `rows x cols` source, in 8 x 8 blocks: a transpose written straight into strided rows (a
/// PE transpose into PSUM). False, and nothing written, if `src` is short or a row would
/// leave `dst`.
pub(super) fn transpose_into(
    src: &[f32],
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    off: usize,
    pitch: usize,
    accumulate: bool,
) -> bool {
    transpose_rows_into(src, cols, rows, cols, dst, off, pitch, accumulate)
}

/// [`transpose_into`] from source rows `srs` elements apart (`src[c * srs + j]`: weights
/// read where they lie, a partition's stride apart). False, and nothing written, if `srs`
/// is under a row, `src` is short or a row would leave `dst`.
#[allow(clippy::too_many_arguments)]
pub(super) fn transpose_rows_into(
    src: &[f32],
    srs: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    off: usize,
    pitch: usize,
    accumulate: bool,
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let last = (cols - 1)
        .checked_mul(pitch)
        .and_then(|x| x.checked_add(off))
        .and_then(|x| x.checked_add(rows));
    let src_end = (rows - 1)
        .checked_mul(srs)
        .and_then(|x| x.checked_add(cols));
    if srs < cols
        || src_end.is_none_or(|e| e > src.len())
        || pitch < rows
        || last.is_none_or(|l| l > dst.len())
    {
        return false;
    }
    let put = |d: &mut f32, v: f32| *d = if accumulate { *d + v } else { v };
    let (rb, cb) = (rows - rows % B, cols - cols % B);
    let g = Blocks {
        srs,
        rb,
        cb,
        off,
        pitch,
        accumulate,
    };
    #[cfg(target_arch = "x86_64")]
    let wide = std::is_x86_feature_detected!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    // (Each piece reads its own source columns and writes its own destination rows.)
    let (s, d) = (
        SharedPtr(src.as_ptr().cast_mut()),
        SharedPtr(dst.as_mut_ptr()),
    );
    // Destination rows `j0..j0 + w` (source columns, whole blocks), apart from any other
    // piece's.
    let piece = |j0: usize, w: usize| {
        let part = Blocks {
            cb: w,
            off: g.off + j0 * g.pitch,
            ..g
        };
        let from = s.get().cast_const().wrapping_add(j0);
        if wide {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX detected just above; the bounds were checked above (every
            // block's source rows lie in `src`, its destination rows in `dst`), and
            // pieces write apart.
            unsafe {
                blocks_avx(&part, from, d.get())
            };
        } else {
            // SAFETY: as above.
            unsafe { blocks(&part, from, d.get()) };
        }
    };
    // Destination rows per piece: as the elementwise step that reads them next cuts its
    // partitions (`fanout::per_piece`, whole blocks), so that step finds them in its own
    // cache.
    let per = if rb * cb >= SHARE_ELEMS {
        crate::fanout::per_piece(cb / B) * B
    } else {
        cb
    };
    if per >= cb {
        piece(0, cb);
    } else {
        crate::fanout::run(cb.div_ceil(per), &|i| piece(i * per, per.min(cb - i * per)));
    }
    // Edges (only when a dimension is not a multiple of 8): the last columns of the blocked
    // rows, then every column of the last rows.
    for c in 0..rb {
        for j in cb..cols {
            put(&mut dst[off + j * pitch + c], src[c * srs + j]);
        }
    }
    for c in rb..rows {
        for j in 0..cols {
            put(&mut dst[off + j * pitch + c], src[c * srs + j]);
        }
    }
    true
}

/// `src[c * cols + j]` (a `rows x cols` matrix of 16-bit values: a bf16 or fp16 transpose's
/// bits) written as little-endian bytes at `dst[at[j] + 2c ..]`: each source column becomes
/// the destination row that starts at byte `at[j]` (a partition's row, where it lies). In
/// 8 x 8 blocks, in SSE2 registers on x86-64 (every such CPU has them), element by element
/// elsewhere and at the edges; the same bytes either way. False, and nothing written, unless
/// `src` holds the matrix, `at` names `cols` rows and each of them lies in `dst`.
pub(super) fn transpose16_rows(
    src: &[u16],
    rows: usize,
    cols: usize,
    dst: &mut [u8],
    at: &[usize],
) -> bool {
    let fits = |a: &usize| {
        rows.checked_mul(2)
            .and_then(|n| a.checked_add(n))
            .is_some_and(|e| e <= dst.len())
    };
    if rows.checked_mul(cols).is_none_or(|n| n > src.len())
        || at.len() != cols
        || !at.iter().all(fits)
    {
        return false;
    }
    let (rb, cb) = (rows - rows % B, cols - cols % B);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; every block's source rows lie in `src` and its
    // destination rows in `dst` (checked just above).
    unsafe {
        blocks16_sse2(src, cols, rb, cb, dst, at)
    };
    #[cfg(not(target_arch = "x86_64"))]
    blocks16(src, cols, rb, cb, dst, at);
    // Edges: the last columns of the blocked rows, then every column of the last rows.
    let mut put = |c: usize, j: usize| {
        let o = at[j] + 2 * c;
        dst[o..o + 2].copy_from_slice(&src[c * cols + j].to_le_bytes());
    };
    for c in 0..rb {
        for j in cb..cols {
            put(c, j);
        }
    }
    for c in rb..rows {
        for j in 0..cols {
            put(c, j);
        }
    }
    true
}

/// [`transpose16_rows`]' full blocks (the first `rb` rows' first `cb` columns), element by
/// element. The caller has checked the bounds.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn blocks16(src: &[u16], cols: usize, rb: usize, cb: usize, dst: &mut [u8], at: &[usize]) {
    for j0 in (0..cb).step_by(B) {
        for c0 in (0..rb).step_by(B) {
            for j in j0..j0 + B {
                for c in c0..c0 + B {
                    let o = at[j] + 2 * c;
                    dst[o..o + 2].copy_from_slice(&src[c * cols + j].to_le_bytes());
                }
            }
        }
    }
}

/// [`blocks16`] with each 8 x 8 block transposed in eight SSE2 registers (16-, 32- and
/// 64-bit interleaves): the same bytes (`tests::sse2_blocks16_equal_the_element_loop`).
///
/// # Safety
/// The caller must have checked that `src` holds `rb` rows of `cols` and that every
/// destination row `at[j]` (`j < cb`) holds `rb` 16-bit values inside `dst`, as
/// [`transpose16_rows`] does.
#[cfg(target_arch = "x86_64")]
unsafe fn blocks16_sse2(
    src: &[u16],
    cols: usize,
    rb: usize,
    cb: usize,
    dst: &mut [u8],
    at: &[usize],
) {
    use std::arch::x86_64::*;
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for j0 in (0..cb).step_by(B) {
        for c0 in (0..rb).step_by(B) {
            // SAFETY (all loads and stores below): inside the bounds the caller checked;
            // the values are little-endian in registers as in memory.
            let r = |i: usize| _mm_loadu_si128(s.add((c0 + i) * cols + j0).cast());
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            // Pairs of rows interleaved, then pairs of pairs, then halves: column j of the
            // eight rows in register j.
            let (t0, t1) = (_mm_unpacklo_epi16(r0, r1), _mm_unpackhi_epi16(r0, r1));
            let (t2, t3) = (_mm_unpacklo_epi16(r2, r3), _mm_unpackhi_epi16(r2, r3));
            let (t4, t5) = (_mm_unpacklo_epi16(r4, r5), _mm_unpackhi_epi16(r4, r5));
            let (t6, t7) = (_mm_unpacklo_epi16(r6, r7), _mm_unpackhi_epi16(r6, r7));
            let (u0, u1) = (_mm_unpacklo_epi32(t0, t2), _mm_unpackhi_epi32(t0, t2));
            let (u2, u3) = (_mm_unpacklo_epi32(t1, t3), _mm_unpackhi_epi32(t1, t3));
            let (u4, u5) = (_mm_unpacklo_epi32(t4, t6), _mm_unpackhi_epi32(t4, t6));
            let (u6, u7) = (_mm_unpacklo_epi32(t5, t7), _mm_unpackhi_epi32(t5, t7));
            let out = [
                _mm_unpacklo_epi64(u0, u4),
                _mm_unpackhi_epi64(u0, u4),
                _mm_unpacklo_epi64(u1, u5),
                _mm_unpackhi_epi64(u1, u5),
                _mm_unpacklo_epi64(u2, u6),
                _mm_unpackhi_epi64(u2, u6),
                _mm_unpacklo_epi64(u3, u7),
                _mm_unpackhi_epi64(u3, u7),
            ];
            for (j, v) in out.into_iter().enumerate() {
                _mm_storeu_si128(d.add(at[j0 + j] + 2 * c0).cast(), v);
            }
        }
    }
}

/// An identity moving tensor where it lies: `n x n` values of type `dt` from element `off`
/// of `space` (rows `rs` apart), fp32 words or 16-bit floats (byte offsets), seen when the
/// space's write count was `writes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityAt {
    pub(super) space: neuron_isa::Space,
    pub(super) off: usize,
    pub(super) rs: usize,
    pub(super) n: usize,
    pub(super) dt: Dtype,
    pub(super) writes: u64,
}

/// Where transposes last found identity moving tensors: a few places, as a kernel may keep
/// one per operand type (kgm-attn transposes fp32 and bf16 weights in turn, against two
/// identities) and a single remembered place would be checked again at every switch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identities {
    places: [Option<IdentityAt>; IDENTITY_PLACES],
    /// The entry the next new place replaces (round robin).
    next: usize,
}

/// Identity places remembered at once.
const IDENTITY_PLACES: usize = 4;

impl Identities {
    /// Whether any place is remembered.
    pub fn any(&self) -> bool {
        self.places.iter().any(Option::is_some)
    }

    /// The entry remembering the place of `at` (whatever its write count).
    fn slot_of(&self, at: &IdentityAt) -> Option<usize> {
        self.places.iter().position(|m| {
            m.is_some_and(|m| {
                IdentityAt {
                    writes: at.writes,
                    ..m
                } == *at
            })
        })
    }

    /// Remember `at` (its own entry if it has one, else the next in turn), or forget its
    /// place.
    fn set(&mut self, at: IdentityAt, yes: bool) {
        match (self.slot_of(&at), yes) {
            (Some(i), true) => self.places[i] = Some(at),
            (Some(i), false) => self.places[i] = None,
            (None, true) => {
                self.places[self.next] = Some(at);
                self.next = (self.next + 1) % IDENTITY_PLACES;
            }
            (None, false) => {}
        }
    }
}

/// Whether `at` is a place where `pe` found an identity, with nothing written to its
/// columns since (`CoreMem::cols_unwritten_since`); else `check` decides, and a yes is
/// remembered (where `mem` sees every write to the space).
pub(super) fn identity_memo(
    pe: &mut PeState,
    mem: &CoreMem,
    at: IdentityAt,
    check: impl FnOnce() -> bool,
) -> bool {
    let trusted = mem.sees_all_writes(at.space);
    if let Some(memo) = pe
        .identity_at
        .slot_of(&at)
        .and_then(|i| pe.identity_at.places[i])
    {
        let unwritten = match at.cols(mem.stride(at.space)) {
            Some((lo, hi)) => mem.cols_unwritten_since(at.space, memo.writes, lo, hi),
            None => mem.unwritten_since(at.space, memo.writes),
        };
        if trusted && unwritten {
            pe.identity_at.set(at, true);
            return true;
        }
    }
    let yes = check();
    pe.identity_at.set(at, yes && trusted);
    yes
}

/// Whether the `n x n` fp32 tensor at `v` (`cs` 1) of `space` is the identity: remembered
/// where it was last found ([`identity_memo`]), else checked.
pub(super) fn fp32_identity(
    pe: &mut PeState,
    mem: &CoreMem,
    space: neuron_isa::Space,
    v: View,
    n: usize,
) -> bool {
    let at = IdentityAt {
        space,
        off: v.off,
        rs: v.rs,
        n,
        dt: Dtype::F32,
        writes: mem.writes(space),
    };
    identity_memo(pe, mem, at, || is_identity(mem.f32s(space), v, n))
}

/// A transpose of fp32 weights kept where they lie (`PeState::w_words`) against an
/// identity moving tensor in place, written straight into an fp32 destination's rows: one
/// pass from the weights' rows to the destination, no copy of them into `w`. The columns
/// when done; None, nothing written, for any other operands (the general path then brings
/// the weights into `w`).
pub(super) fn transpose_kept_words(
    mem: &mut CoreMem,
    pe: &mut PeState,
    mv: Option<(neuron_isa::Space, View, usize)>,
    dv: Option<(neuron_isa::Space, View, usize)>,
    accumulate: bool,
) -> Option<usize> {
    let (k, m) = (pe.k, pe.m);
    let (sp, v, nmov) = mv?;
    let (dspace, cv, ndst) = dv?;
    let fits = v.cs == 1 && cv.cs == 1 && cv.rs >= nmov && ndst == nmov && nmov == k;
    if !fits || sp == dspace || nmov > super::pe::MAX_MOVING {
        return None;
    }
    if !fp32_identity(pe, mem, sp, v, k) {
        return None;
    }
    let (rows, wv, out) = mem.words_and(dspace)?;
    let src = rows.get(wv.off..)?;
    transpose_rows_into(src, wv.rs, k, m, out, cv.off, cv.rs, accumulate).then_some(nmov)
}

impl IdentityAt {
    /// The columns `[lo, hi)` (bytes of each partition) the identity's rows lie in, where
    /// its rows lie a partition apart; None otherwise.
    fn cols(&self, stride: usize) -> Option<(usize, usize)> {
        // fp32 identities are placed in f32 words, 16-bit ones in bytes.
        let unit = if self.dt == Dtype::F32 { 4 } else { 1 };
        if self.rs.checked_mul(unit)? != stride || stride == 0 {
            return None;
        }
        let lo = self.off.checked_mul(unit)? % stride;
        let hi = lo.checked_add(self.n.checked_mul(self.dt.size())?)?;
        (hi <= stride).then_some((lo, hi))
    }
}

/// A transpose of bf16 or fp16 weights kept as bits (`pe.w_bits`, `k x m`, of type `dt`)
/// against an identity moving tensor of the same type, written over a destination of that
/// type: `out[j][c] = w[c][j]` as 16-bit values, with no pass through f32. The general path
/// gives the same bits, only slower: there a NaN comes back quieted (by the narrowing, or a
/// signalling one by F16C's widening), so weights holding a NaN are left to it.
/// `Some(columns)` when done; `None`, with nothing written, for any other shape or type (a
/// moving tensor that is not the identity, rows not one run each, a destination of another
/// length), which the general path then computes or refuses.
pub(super) fn transpose_bits(
    mem: &mut CoreMem,
    pe: &mut PeState,
    src: &AccessPattern,
    dst: &AccessPattern,
    dt: Dtype,
) -> Result<Option<usize>, OpFault> {
    let (k, m) = (pe.k, pe.m);
    // 1.0's bits, and the least NaN's (exponent all ones, fraction not zero; without sign).
    let (one, nan) = match dt {
        Dtype::Bf16 => (0x3f80u16, 0x7f81u16),
        Dtype::F16 => (0x3c00, 0x7c01),
        _ => return Ok(None),
    };
    if k == 0 || m == 0 || pe.w_bits.len() < k * m {
        return Ok(None);
    }
    let sp = span(mem, src, dt, k)?;
    if !sp.is_contiguous() || sp.len != k {
        return Ok(None);
    }
    /// Partition `p`'s `n` 16-bit elements, where they lie in `bytes`.
    fn row<'a>(sp: &super::pattern::Span, bytes: &'a [u8], p: usize, n: usize) -> Option<&'a [u8]> {
        let at = usize::try_from(sp.row_base(p)).ok()?;
        bytes.get(at..at.checked_add(2 * n)?)
    }
    let at = IdentityAt {
        space: sp.space(),
        off: usize::try_from(sp.row_base(0)).unwrap_or(usize::MAX),
        rs: sp.stride(),
        n: k,
        dt,
        writes: mem.writes(sp.space()),
    };
    let bytes = mem.bytes(sp.space());
    let ident = identity_memo(pe, mem, at, || {
        (0..k).all(|i| row(&sp, bytes, i, k).is_some_and(|r| identity_row16(r, i, one)))
    });
    let w = &pe.w_bits[..k * m];
    if !ident || w.iter().fold(false, |any, b| any | (b & 0x7fff >= nan)) {
        return Ok(None);
    }
    let dsp = span(mem, dst, dt, m)?;
    if !dsp.is_contiguous() || dsp.len != k || m > PE_ROWS {
        return Ok(None);
    }
    // Each destination row where it lies; every row is checked before any is written: all
    // or nothing.
    let mut at = [0usize; PE_ROWS];
    for (j, a) in at[..m].iter_mut().enumerate() {
        match usize::try_from(dsp.row_base(j)) {
            Ok(v) => *a = v,
            Err(_) => return Ok(None),
        }
    }
    let bytes = mem.bytes_mut(dsp.space());
    Ok(transpose16_rows(w, k, m, bytes, &at[..m]).then_some(k))
}

/// The most destination rows a transpose writes (the PE array's columns).
const PE_ROWS: usize = 128;

/// The transposes' block size.
const B: usize = 8;

/// Where [`transpose_into`]'s full 8 x 8 blocks lie (walked destination rows outer: a PSUM
/// destination's rows lie 16 KiB apart, on the same L1 sets, so eight rows are finished
/// before the next eight are touched, instead of every row's lines being evicted and
/// fetched again for each 32-byte piece): `rb` source rows (`srs` elements apart) and their
/// first `cb` columns, written to `dst[off + j * pitch + c]` (added when `accumulate`).
#[derive(Clone, Copy)]
struct Blocks {
    srs: usize,
    rb: usize,
    cb: usize,
    off: usize,
    pitch: usize,
    accumulate: bool,
}

/// Transposes with at least this many elements in full blocks are shared with the data-path
/// helpers by destination rows (the attention kernels' 128 x 128 fp32 transposes into PSUM,
/// 16-72 an execution: 1-2% less host time than kept on one thread, the two alternated
/// execution by execution, `docs/performance.md`).
const SHARE_ELEMS: usize = 64 * 64;

/// The full blocks, element by element.
///
/// # Safety
/// `s` must point at `rb` rows of `cb` elements, `srs` apart, and row `j` of the
/// destination, `d + off + j * pitch .. + rb`, must be writable for every `j < cb`, with
/// nothing else reading or writing those elements during the call (as
/// [`transpose_rows_into`] checks and arranges).
unsafe fn blocks(g: &Blocks, s: *const f32, d: *mut f32) {
    for j0 in (0..g.cb).step_by(B) {
        for c0 in (0..g.rb).step_by(B) {
            let mut t = [[0f32; B]; B];
            for (i, r) in t.iter_mut().enumerate() {
                for (j, v) in r.iter_mut().enumerate() {
                    // SAFETY: inside the source the caller names.
                    *v = unsafe { *s.add((c0 + i) * g.srs + j0 + j) };
                }
            }
            for j in 0..B {
                // SAFETY: inside the destination rows the caller names.
                let row = unsafe { d.add(g.off + (j0 + j) * g.pitch + c0) };
                for (i, t) in t.iter().enumerate() {
                    // SAFETY: as above.
                    unsafe {
                        let p = row.add(i);
                        *p = if g.accumulate { *p + t[j] } else { t[j] };
                    }
                }
            }
        }
    }
}

/// [`blocks`] with each block transposed in eight AVX registers (unpack, shuffle, lane
/// permute): the same values moved, and the same single IEEE add when accumulating, so the
/// same bits (`tests::avx_blocks_equal_the_element_loop`).
///
/// # Safety
/// The CPU must have AVX, and the pointers must be as [`blocks`] requires.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn blocks_avx(g: &Blocks, s: *const f32, d: *mut f32) {
    use std::arch::x86_64::*;
    for j0 in (0..g.cb).step_by(B) {
        // Destination rows two blocks ahead into cache while these eight are written (the
        // first three blocks' at the start): rows 16 KiB apart are separate short streams
        // the hardware prefetcher does not follow.
        let from = if j0 == 0 { 0 } else { j0 + 2 * B };
        for j in (from..j0 + 3 * B).take_while(|j| *j < g.cb) {
            let row = d.wrapping_add(g.off + j * g.pitch);
            for c in (0..g.rb).step_by(16) {
                crate::prefetch::line(row.wrapping_add(c));
            }
        }
        for c0 in (0..g.rb).step_by(B) {
            // SAFETY (all loads and stores below): inside the bounds the caller checked.
            let r = |i: usize| _mm256_loadu_ps(s.add((c0 + i) * g.srs + j0));
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            // Columns 0-3 of rows 0-3 (and 4-7 in the upper lanes), then of rows 4-7.
            let a = [
                _mm256_shuffle_ps::<0x44>(t0, t2),
                _mm256_shuffle_ps::<0xee>(t0, t2),
                _mm256_shuffle_ps::<0x44>(t1, t3),
                _mm256_shuffle_ps::<0xee>(t1, t3),
            ];
            let b = [
                _mm256_shuffle_ps::<0x44>(t4, t6),
                _mm256_shuffle_ps::<0xee>(t4, t6),
                _mm256_shuffle_ps::<0x44>(t5, t7),
                _mm256_shuffle_ps::<0xee>(t5, t7),
            ];
            for j in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(a[j], b[j]);
                let hi = _mm256_permute2f128_ps::<0x31>(a[j], b[j]);
                for (col, v) in [(j, lo), (j + 4, hi)] {
                    let p = d.add(g.off + (j0 + col) * g.pitch + c0);
                    let v = if g.accumulate {
                        _mm256_add_ps(_mm256_loadu_ps(p), v)
                    } else {
                        v
                    };
                    _mm256_storeu_ps(p, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_isa::Space;

    /// A remembered identity stays remembered across writes to other columns of its space
    /// (the check does not run again) and not across a write to its own columns, to every
    /// column (a write that names none), or in another place.
    #[test]
    fn an_identity_is_remembered_until_its_columns_are_written() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut pe = PeState::default();
        let stride = mem.stride(Space::Sbuf) / 4;
        let at = |mem: &CoreMem, off: usize| IdentityAt {
            space: Space::Sbuf,
            off,
            rs: stride,
            n: 64,
            dt: Dtype::F32,
            writes: mem.writes(Space::Sbuf),
        };
        let checks = std::cell::Cell::new(0);
        let memo = |mem: &CoreMem, pe: &mut PeState, off: usize| {
            identity_memo(pe, mem, at(mem, off), || {
                checks.set(checks.get() + 1);
                true
            })
        };
        // The identity at bytes 0x800..0x900 of each partition.
        assert!(memo(&mem, &mut pe, 0x200));
        assert!(memo(&mem, &mut pe, 0x200));
        assert_eq!(checks.get(), 1, "nothing written: remembered");
        mem.bytes_mut_cols(Space::Sbuf, 0x900, 0x1000);
        mem.bytes_mut_cols(Space::Sbuf, 0, 0x800);
        assert!(memo(&mem, &mut pe, 0x200));
        assert_eq!(checks.get(), 1, "other columns written: remembered");
        mem.bytes_mut_cols(Space::Sbuf, 0x8fc, 0x904);
        assert!(memo(&mem, &mut pe, 0x200));
        assert_eq!(checks.get(), 2, "its columns written: checked again");
        mem.bytes_mut(Space::Sbuf);
        assert!(memo(&mem, &mut pe, 0x200));
        assert_eq!(checks.get(), 3, "every column written: checked again");
        assert!(memo(&mem, &mut pe, 0x240));
        assert_eq!(checks.get(), 4, "another place: checked");
        // Both places are remembered: taking turns between them checks neither again.
        for _ in 0..3 {
            assert!(memo(&mem, &mut pe, 0x200));
            assert!(memo(&mem, &mut pe, 0x240));
        }
        assert_eq!(checks.get(), 4, "two places in turn: both remembered");
        // A fifth place pushes out the oldest of four.
        for off in [0x280, 0x2c0, 0x300] {
            assert!(memo(&mem, &mut pe, off));
        }
        assert_eq!(checks.get(), 7);
        assert!(memo(&mem, &mut pe, 0x240));
        assert!(memo(&mem, &mut pe, 0x300));
        assert_eq!(checks.get(), 7, "the four latest places remembered");
        assert!(memo(&mem, &mut pe, 0x200));
        assert_eq!(checks.get(), 8, "the oldest place was pushed out");
    }

    /// `dst` holds the `rows x cols` matrix `src` transposed (the definition, element by
    /// element).
    fn assert_transposed<T: PartialEq + std::fmt::Debug>(
        src: &[T],
        dst: &[T],
        rows: usize,
        cols: usize,
    ) {
        for c in 0..rows {
            for j in 0..cols {
                assert_eq!(
                    dst[j * rows + c],
                    src[c * cols + j],
                    "{rows}x{cols} at ({c},{j})"
                );
            }
        }
    }

    /// The 16-bit transpose into rows where they lie, against the definition: square and
    /// ragged shapes (edges in one dimension, the other, both), rows packed and a stride
    /// apart; bytes outside the rows untouched; a short source, a row past the end or a
    /// wrong row count refused with nothing written.
    #[test]
    fn transpose16_rows_match_the_definition_for_any_shape() {
        for (rows, cols) in [
            (1, 1),
            (8, 8),
            (128, 128),
            (16, 9),
            (13, 24),
            (21, 35),
            (3, 128),
        ] {
            let src: Vec<u16> = (0..rows * cols)
                .map(|i| (i * 7919 % 65_521) as u16)
                .collect();
            for pitch in [2 * rows, 2 * rows + 6, 4 * rows + 64] {
                let at: Vec<usize> = (0..cols).map(|j| 3 + j * pitch).collect();
                let len = 3 + (cols - 1) * pitch + 2 * rows + 5;
                let mut dst = vec![0xa5u8; len];
                assert!(transpose16_rows(&src, rows, cols, &mut dst, &at));
                let mut want = vec![0xa5u8; len];
                for c in 0..rows {
                    for j in 0..cols {
                        let o = at[j] + 2 * c;
                        want[o..o + 2].copy_from_slice(&src[c * cols + j].to_le_bytes());
                    }
                }
                assert_eq!(dst, want, "{rows}x{cols}, rows {pitch} bytes apart");
                let untouched = vec![0xa5u8; len];
                let mut d = untouched.clone();
                assert!(!transpose16_rows(&src[1..], rows, cols, &mut d, &at));
                assert!(!transpose16_rows(&src, rows, cols, &mut d[..len - 6], &at));
                assert!(!transpose16_rows(&src, rows, cols, &mut d, &at[1..]));
                assert_eq!(d, untouched, "refused: nothing written");
            }
        }
    }

    /// The SSE2 blocks move the element loop's bytes (x86-64 only: elsewhere the element
    /// loop is the only path).
    #[test]
    fn sse2_blocks16_equal_the_element_loop() {
        #[cfg(target_arch = "x86_64")]
        {
            eprintln!("x86-64: comparing the SSE2 blocks with the element loop");
            let (rows, cols) = (40usize, 24usize);
            let src: Vec<u16> = (0..rows * cols).map(|i| (i * 40_503) as u16).collect();
            let pitch = 2 * rows + 10;
            let at: Vec<usize> = (0..cols).map(|j| 1 + j * pitch).collect();
            let len = 1 + cols * pitch;
            let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
            blocks16(&src, cols, rows, cols, &mut a, &at);
            // SAFETY: `src` holds rows x cols values and every row of `at` lies in `b`.
            unsafe { blocks16_sse2(&src, cols, rows, cols, &mut b, &at) };
            assert_eq!(a, b);
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: not x86-64; only the element loop runs here");
    }

    #[test]
    fn transpose_matches_the_definition_for_any_shape() {
        for (rows, cols) in [(128, 128), (16, 8), (13, 21), (1, 9), (8, 3)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let mut dst = vec![f32::NAN; rows * cols];
            transpose(&src, rows, cols, &mut dst);
            assert_transposed(&src, &dst, rows, cols);
        }
    }

    #[test]
    fn transpose_into_writes_strided_rows_and_accumulates() {
        for (rows, cols) in [(128, 128), (16, 8), (13, 21), (1, 9), (8, 3)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5).collect();
            let (off, pitch) = (3, rows + 5);
            let len = off + (cols - 1) * pitch + rows;
            let old: Vec<f32> = (0..len + 2).map(|i| i as f32).collect();
            for accumulate in [false, true] {
                let mut dst = old.clone();
                assert!(transpose_into(
                    &src, rows, cols, &mut dst, off, pitch, accumulate
                ));
                let mut want = old.clone();
                for c in 0..rows {
                    for j in 0..cols {
                        let at = off + j * pitch + c;
                        let v = src[c * cols + j];
                        want[at] = if accumulate { old[at] + v } else { v };
                    }
                }
                assert_eq!(dst, want, "{rows}x{cols} accumulate {accumulate}");
            }
            // A destination one element short, a pitch under a row, or a short source:
            // refused, nothing written.
            let mut short = old[..len - 1].to_vec();
            assert!(!transpose_into(
                &src, rows, cols, &mut short, off, pitch, false
            ));
            assert_eq!(short, old[..len - 1].to_vec());
            let mut dst = old.clone();
            assert!(!transpose_into(
                &src,
                rows,
                cols,
                &mut dst,
                off,
                rows - 1,
                false
            ));
            assert!(!transpose_into(
                &src[1..],
                rows,
                cols,
                &mut dst,
                off,
                pitch,
                false
            ));
        }
    }

    /// Source rows a stride apart (weights where they lie) transpose as the same rows
    /// packed densely do; a stride under a row, or a source short of its last row, is
    /// refused with nothing written.
    #[test]
    fn strided_source_rows_transpose_as_dense_ones() {
        for (rows, cols, srs) in [(128, 128, 300), (16, 8, 8), (13, 21, 40), (9, 1, 2)] {
            let src: Vec<f32> = (0..(rows - 1) * srs + cols)
                .map(|i| i as f32 * 0.25 - 7.0)
                .collect();
            let dense: Vec<f32> = (0..rows)
                .flat_map(|c| src[c * srs..c * srs + cols].to_vec())
                .collect();
            let (off, pitch) = (2, rows + 1);
            let len = off + (cols - 1) * pitch + rows;
            for accumulate in [false, true] {
                let old: Vec<f32> = (0..len).map(|i| i as f32).collect();
                let (mut got, mut want) = (old.clone(), old.clone());
                assert!(transpose_rows_into(
                    &src, srs, rows, cols, &mut got, off, pitch, accumulate
                ));
                assert!(transpose_into(
                    &dense, rows, cols, &mut want, off, pitch, accumulate
                ));
                assert_eq!(got, want, "{rows}x{cols} rows {srs} apart");
            }
            let old = vec![1.5f32; len];
            let mut dst = old.clone();
            if cols > 1 {
                assert!(!transpose_rows_into(
                    &src,
                    cols - 1,
                    rows,
                    cols,
                    &mut dst,
                    off,
                    pitch,
                    false
                ));
            }
            assert!(!transpose_rows_into(
                &src[..src.len() - 1],
                srs,
                rows,
                cols,
                &mut dst,
                off,
                pitch,
                false
            ));
            assert_eq!(dst, old, "nothing written");
        }
    }

    /// A transpose large enough to share (`SHARE_ELEMS`), with helpers allowed and not,
    /// gives the definition's bits into strided rows, overwriting and accumulating, with
    /// ragged edges; elements between the rows untouched. Reference: the element-by-element
    /// definition written here.
    #[test]
    fn shared_transposes_match_the_definition() {
        for (rows, cols) in [(128usize, 128usize), (128, 136), (131, 96), (64, 64)] {
            assert!((rows - rows % B) * (cols - cols % B) >= SHARE_ELEMS);
            let (srs, off, pitch) = (cols + 16, 3, rows + 9);
            let src: Vec<f32> = (0..rows * srs)
                .map(|i| (i as f32 * 0.377).sin() * 1e3)
                .collect();
            let len = off + (cols - 1) * pitch + rows + 5;
            let old: Vec<f32> = (0..len).map(|i| (i as f32 * 0.19).cos()).collect();
            for accumulate in [false, true] {
                let mut want = old.clone();
                for c in 0..rows {
                    for j in 0..cols {
                        let d = &mut want[off + j * pitch + c];
                        *d = if accumulate {
                            *d + src[c * srs + j]
                        } else {
                            src[c * srs + j]
                        };
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                for allowed in [false, true] {
                    let mut got = old.clone();
                    let ok = crate::fanout::with(allowed, || {
                        transpose_rows_into(&src, srs, rows, cols, &mut got, off, pitch, accumulate)
                    });
                    assert!(ok);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{rows}x{cols} accumulate {accumulate} helpers allowed {allowed}"
                    );
                }
            }
        }
        eprintln!(
            "helpers in this process: {} (0: both runs stayed on one thread)",
            crate::fanout::helpers()
        );
    }

    /// The AVX blocks move the element loop's bits, overwriting and accumulating (NaN,
    /// -0, subnormals included), where the host has AVX.
    #[test]
    fn avx_blocks_equal_the_element_loop() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::is_x86_feature_detected!("avx") {
                eprintln!("SKIPPED: no AVX on this host; only the element loop ran");
                return;
            }
            eprintln!("AVX present: comparing its blocks with the element loop");
            let (rows, cols) = (24usize, 40usize);
            let specials = [f32::NAN, -0.0, 1e-40, f32::INFINITY];
            let src: Vec<f32> = (0..rows * cols)
                .map(|i| {
                    if i % 37 == 0 {
                        specials[(i / 37) % specials.len()]
                    } else {
                        (i as f32 * 0.731).sin()
                    }
                })
                .collect();
            let (off, pitch) = (5, rows + 3);
            let len = off + (cols - 1) * pitch + rows;
            let old: Vec<f32> = (0..len).map(|i| (i as f32 * 0.17).cos()).collect();
            for accumulate in [false, true] {
                let (mut a, mut b) = (old.clone(), old.clone());
                let g = Blocks {
                    srs: cols,
                    rb: rows,
                    cb: cols,
                    off,
                    pitch,
                    accumulate,
                };
                // SAFETY: bounds as transpose_into checks them (AVX detected for the
                // second).
                unsafe {
                    blocks(&g, src.as_ptr(), a.as_mut_ptr());
                    blocks_avx(&g, src.as_ptr(), b.as_mut_ptr());
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "accumulate {accumulate}");
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: not x86-64; only the element loop exists");
    }
}
