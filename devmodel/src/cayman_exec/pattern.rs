//! Access patterns on a core's memories: the element offsets a pattern names, checked
//! against the partition size, gathered as f32, scattered back with conversion (whole, or a
//! partition's row at a time for `rows`), viewed in place as fp32 matrices, or copied bit
//! for bit.

use super::OpFault;
use crate::core::CoreMem;
use crate::gemm::View;
use neuron_isa::cayman::AccessPattern;
use neuron_isa::dtype::{load_f32, store_f32};
use neuron_isa::{Dtype, Space};

/// The elements per partition a pattern names; refused above a whole partition of bytes
/// before anything walks it (the fields are 16/32-bit, so a corrupt word could ask for 2^64).
pub(super) fn elem_count(ap: &AccessPattern) -> Result<u64, OpFault> {
    let dims = (ap.dims as usize).min(4);
    ap.num[..dims]
        .iter()
        .try_fold(1u64, |t, n| t.checked_mul((*n).max(1) as u64))
        .filter(|t| *t <= MAX_PATTERN_ELEMS)
        .ok_or_else(|| {
            OpFault::oob(format!(
                "access pattern of {:?} elements exceeds a partition",
                &ap.num[..dims]
            ))
        })
}

/// The element offsets (relative to the pattern's start) of an access pattern, innermost dim first.
pub(super) fn offsets(ap: &AccessPattern) -> Result<Vec<i64>, OpFault> {
    let dims = (ap.dims as usize).min(4);
    elem_count(ap)?;
    let mut out = vec![0i64];
    for d in 0..dims {
        let (step, num) = (ap.step[d] as i64, ap.num[d].max(1) as i64);
        // Dimension d is outside the ones before it: index = i0 + n0 * (i1 + n1 * ...).
        let mut next = Vec::with_capacity(out.len() * num as usize);
        for i in 0..num {
            next.extend(out.iter().map(|o| o + i * step));
        }
        out = next;
    }
    Ok(out)
}

/// Elements one access pattern may name: a whole SBUF partition of bytes.
const MAX_PATTERN_ELEMS: u64 = 256 * 1024;

/// The first partition an access pattern names. An SBUF address is `partition · 256 KiB +
/// offset`, as the DMA's state-buffer addresses are (kgm-moe: ACTIVATE reads the router
/// weights at 0x817200 = partition 32 + 0x17200, where a DMA put them); PSUM addresses start
/// at partition 0 (no other form is seen).
pub(super) fn first_partition(ap: &AccessPattern) -> usize {
    match ap.space() {
        Space::Sbuf => ap.offset() as usize / crate::core::window_stride(Space::Sbuf),
        Space::Psum => 0,
    }
}

/// Where an access pattern's elements lie, checked against the partition size.
pub(super) struct Span {
    /// The offsets are `0, 1, 2, ...` (one ascending run per partition).
    contiguous: bool,
    /// The offsets are `0, -1, -2, ...` (one descending run: LDWEIGHTS patterns).
    descending: bool,
    /// Offsets come in ascending runs of this many consecutive elements (`len` when
    /// `contiguous`, the innermost dimension when its step is 1, else 1).
    run: usize,
    space: Space,
    stride: usize,
    /// The offset of each run's first element, in pattern order (every offset where `run`
    /// is 1); built only when the pattern is not one run (empty for a contiguous pattern,
    /// whose one run starts at 0: [`Span::starts`]), so most spans allocate nothing.
    starts: Vec<i64>,
    /// Elements per partition.
    pub(super) len: usize,
    es: i64,
    base: i64,
    /// The storage partition of the operand's first partition.
    first: usize,
}

impl Span {
    /// The offset of each run's first element, in pattern order.
    fn starts(&self) -> &[i64] {
        if self.contiguous {
            &[0]
        } else {
            &self.starts
        }
    }

    /// The storage byte of element offset 0 in the operand's partition `p`.
    pub(super) fn row_base(&self, p: usize) -> i64 {
        (p * self.stride) as i64 + self.base
    }

    /// The same within the partition's own bytes (`stride` of them).
    pub(super) fn base_in_partition(&self) -> i64 {
        self.base - (self.first * self.stride) as i64
    }

    /// The bytes `[lo, hi)` of its partition that hold a partition's elements (and any
    /// between them), `pb` the byte of element offset 0: the columns a write through the
    /// span touches. None where they would lie before the partition's start.
    pub(super) fn cols(&self, pb: i64) -> Option<(usize, usize)> {
        let (first, last) = if self.contiguous {
            (0, self.len as i64 - 1)
        } else if self.descending {
            (1 - self.len as i64, 0)
        } else {
            let starts = self.starts();
            let lo = starts.iter().copied().min()?;
            let hi = starts.iter().copied().max()? + self.run as i64 - 1;
            (lo, hi)
        };
        let lo = pb.checked_add(first.checked_mul(self.es)?)?;
        let hi = pb.checked_add(last.checked_add(1)?.checked_mul(self.es)?)?;
        Some((usize::try_from(lo).ok()?, usize::try_from(hi).ok()?))
    }

    /// The columns a write through the span touches ([`Span::cols`] of the operand's
    /// partitions), every column where they cannot be told.
    pub(super) fn write_cols(&self) -> (usize, usize) {
        self.cols(self.base_in_partition())
            .unwrap_or((0, usize::MAX))
    }

    /// The bytes `[lo, hi)` a partition's elements take when they are one ascending run,
    /// `pb` the byte of element offset 0; None for other patterns.
    pub(super) fn run_bytes(&self, pb: i64) -> Option<(i64, i64)> {
        let len = i64::try_from(self.len).ok()?.checked_mul(self.es)?;
        (self.contiguous && pb >= 0).then_some((pb, pb.checked_add(len)?))
    }

    /// The elements of each partition are one ascending run (offsets `0, 1, 2, ...`).
    pub(super) fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// The elements of each partition are one descending run (offsets `0, -1, -2, ...`).
    pub(super) fn is_descending(&self) -> bool {
        self.descending
    }

    /// Bytes between partitions in storage.
    pub(super) fn stride(&self) -> usize {
        self.stride
    }

    /// The memory the pattern lies in.
    pub(super) fn space(&self) -> Space {
        self.space
    }

    /// The storage partition of the operand's first partition.
    pub(super) fn first(&self) -> usize {
        self.first
    }

    /// The storage bytes (`bytes`: the whole memory) of the operand's `channels`
    /// partitions, one slice each, for steps shared out by partitions; fewer if the memory
    /// ends first (`span` checked that it does not).
    pub(super) fn partitions_mut<'a>(
        &self,
        bytes: &'a mut [u8],
        channels: usize,
    ) -> Vec<&'a mut [u8]> {
        bytes
            .chunks_mut(self.stride.max(1))
            .skip(self.first)
            .take(channels)
            .collect()
    }
}

/// The smallest and largest element offset a pattern names, from its steps and counts alone
/// (what [`offsets`] would give, with its size check).
fn offset_range(ap: &AccessPattern) -> Result<(i64, i64), OpFault> {
    let dims = (ap.dims as usize).min(4);
    elem_count(ap)?;
    let (mut lo, mut hi) = (0i64, 0i64);
    for d in 0..dims {
        let reach = ap.step[d] as i64 * (ap.num[d].max(1) as i64 - 1);
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    Ok((lo, hi))
}

/// A pattern whose every byte lies inside its `channels` partitions.
struct Checked {
    space: Space,
    /// Bytes between partitions in storage.
    stride: usize,
    /// Element size in bytes.
    es: i64,
    /// Storage byte of element offset 0 in the operand's first partition.
    base: i64,
    /// The same as a window offset (what the word's address names).
    window_base: i64,
    /// Smallest and largest element offset.
    range: (i64, i64),
}

/// Check that every byte a pattern names lies inside `channels` partitions.
fn checked(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
) -> Result<Checked, OpFault> {
    let (space, limit) = match ap.space() {
        Space::Psum => (Space::Psum, mem.psum_pb),
        _ => (Space::Sbuf, mem.sbuf_pb),
    };
    let (stride, window) = (mem.stride(space), crate::core::window_stride(space));
    let (min, max) = offset_range(ap)?;
    let es = dt.size() as i64;
    let first = first_partition(ap);
    let at = ap.offset() as i64 - (first * window) as i64;
    let lo = min * es + at;
    let hi = max * es + at + es;
    if lo < 0 || hi > limit as i64 || first + channels > mem.partitions {
        return Err(OpFault::oob(format!(
            "{space:?} bytes {lo}..{hi} of partitions {first}..{} outside {} {limit}-byte partitions",
            first + channels,
            mem.partitions
        )));
    }
    // Partition p of the operand is storage partition first + p.
    let base = (first * stride) as i64 + at;
    Ok(Checked {
        space,
        stride,
        es,
        base,
        window_base: (first * window) as i64 + at,
        range: (min, max),
    })
}

pub(super) fn span(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
) -> Result<Span, OpFault> {
    let Checked {
        space,
        stride,
        es,
        base,
        ..
    } = checked(mem, ap, dt, channels)?;
    let len = elem_count(ap)? as usize;
    let (contiguous, descending) = one_run(ap);
    let run = if contiguous {
        len
    } else if ap.dims > 0 && ap.step[0] == 1 && ap.num[0] > 1 {
        // offsets() walks the innermost dimension first, so each block of num[0] is a run.
        ap.num[0] as usize
    } else {
        1
    };
    let starts = if contiguous {
        Vec::new()
    } else if run > 1 {
        // The runs start where the pattern without its innermost dimension goes.
        let mut outer = *ap;
        outer.num[0] = 1;
        offsets(&outer)?
    } else {
        offsets(ap)?
    };
    Ok(Span {
        contiguous,
        descending,
        run,
        space,
        stride,
        starts,
        len,
        es,
        base,
        first: first_partition(ap),
    })
}

/// Whether a pattern's offsets are one ascending run (`0, 1, 2, ...`) or, if not, one
/// descending run (`0, -1, -2, ...`): each dimension that counts steps by the product of the
/// counts inside it, or by its negation (the offsets walk the innermost dimension first).
fn one_run(ap: &AccessPattern) -> (bool, bool) {
    let (mut asc, mut desc, mut inner) = (true, true, 1i64);
    for d in 0..(ap.dims as usize).min(4) {
        let num = ap.num[d].max(1) as i64;
        if num > 1 {
            let step = ap.step[d] as i64;
            asc &= step == inner;
            desc &= step == -inner;
            inner *= num;
        }
    }
    (asc, !asc && desc)
}

/// Where a pattern whose offsets are one descending run lies (an LDWEIGHTS source), checked
/// as [`span`] checks it: its memory, the bytes between partitions, the storage byte of
/// element offset 0 in its first partition, and the elements per partition. None for any
/// other pattern. [`span`] without the run starts it would list (and allocate) for such a
/// pattern, which this caller does not read.
pub(super) fn descending_run(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
) -> Result<Option<(Space, usize, i64, usize)>, OpFault> {
    let Checked {
        space,
        stride,
        base,
        ..
    } = checked(mem, ap, dt, channels)?;
    let len = elem_count(ap)? as usize;
    Ok((one_run(ap).1).then_some((space, stride, base, len)))
}

/// The bytes `[lo, hi)` of each of `channels` partitions that a pattern touches (checked as
/// [`span`] checks them), and its memory, as window offsets: they count from partition 0, so
/// a pattern that starts at partition `f` has `lo` ≥ `f` × the window's partition stride.
pub(super) fn extent(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
) -> Result<(Space, u64, u64), OpFault> {
    let Checked {
        space,
        es,
        window_base: base,
        range: (min, max),
        ..
    } = checked(mem, ap, dt, channels)?;
    let (lo, hi) = (min * es + base, max * es + base + es);
    // checked() refused negative or out-of-partition bytes.
    Ok((space, lo.max(0) as u64, hi.max(0) as u64))
}

/// Read `channels` partitions of an access pattern as f32, partition-major.
pub(super) fn gather(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    out: &mut Vec<f32>,
) -> Result<usize, OpFault> {
    gather_impl(mem, ap, dt, channels, out, false)
}

/// [`gather`] with each partition's elements in reverse order: what LDWEIGHTS loads (the
/// array shifts weights in, so the pattern's first element lands in the last column). The
/// compiler's weights patterns descend, so their reverse is memory order: converted
/// straight, with no reversal pass.
pub(super) fn gather_reversed(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    out: &mut Vec<f32>,
) -> Result<usize, OpFault> {
    gather_impl(mem, ap, dt, channels, out, true)
}

fn gather_impl(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    out: &mut Vec<f32>,
    rev: bool,
) -> Result<usize, OpFault> {
    let sp = span(mem, ap, dt, channels)?;
    let bytes = mem.bytes(sp.space);
    out.clear();
    if let Some(rows) = small_rows(bytes, &sp, channels) {
        // Rows of a few elements each (a decode step's tensors): one loop over them all.
        out.resize(channels * sp.len, 0.0);
        let n = sp.len;
        match dt {
            Dtype::F32 | Dtype::F32r => small_rows_of::<4>(bytes, rows, n, out, rev, f32_at),
            Dtype::Bf16 => small_rows_of::<2>(bytes, rows, n, out, rev, bf16_at),
            _ => {
                out.clear();
                for p in 0..channels {
                    read_row(bytes, &sp, sp.row_base(p), dt, rev, out);
                }
            }
        }
        return Ok(n);
    }
    out.reserve(channels * sp.len);
    for p in 0..channels {
        read_row(bytes, &sp, sp.row_base(p), dt, rev, out);
    }
    Ok(sp.len)
}

/// One partition's elements of a checked span where they lie, when they are fp32 in one
/// ascending run (`pb`: the byte in `bytes` of the partition's element offset 0); None for
/// any other row, which [`read_row`] converts.
pub(super) fn f32_row<'a>(bytes: &'a [u8], sp: &Span, pb: i64, dt: Dtype) -> Option<&'a [f32]> {
    use zerocopy::FromBytes;
    if !matches!(dt, Dtype::F32 | Dtype::F32r) || !sp.contiguous || cfg!(target_endian = "big") {
        return None;
    }
    let at = usize::try_from(pb).ok()?;
    let b = bytes.get(at..at.checked_add(4 * sp.len)?)?;
    <[f32]>::ref_from_bytes(b).ok()
}

/// [`f32_row`] to write: the row's fp32 words in place, where it is one run of aligned fp32
/// words inside `bytes` (else None).
pub(super) fn f32_row_mut<'a>(
    bytes: &'a mut [u8],
    sp: &Span,
    pb: i64,
    dt: Dtype,
) -> Option<&'a mut [f32]> {
    use zerocopy::FromBytes;
    if !matches!(dt, Dtype::F32 | Dtype::F32r) || !sp.contiguous || cfg!(target_endian = "big") {
        return None;
    }
    let at = usize::try_from(pb).ok()?;
    let b = bytes.get_mut(at..at.checked_add(4 * sp.len)?)?;
    <[f32]>::mut_from_bytes(b).ok()
}

/// Append one partition's elements of a checked span, converted to f32 (reversed if `rev`);
/// `pb` is the byte in `bytes` of the partition's element offset 0.
pub(super) fn read_row(bytes: &[u8], sp: &Span, pb: i64, dt: Dtype, rev: bool, out: &mut Vec<f32>) {
    // One loop per common dtype so the conversion is inlined, not dispatched per element.
    let es = sp.es as usize;
    if let Some(b) = small_row(bytes, sp, pb) {
        // A few elements in one run (a decode step's tensors): converted in place, without
        // the general walk and a copy or widening call for each partition.
        let from = out.len();
        match dt {
            Dtype::F32 | Dtype::F32r => out.extend(b.chunks_exact(4).map(f32_at)),
            Dtype::Bf16 => out.extend(b.chunks_exact(2).map(bf16_at)),
            _ => out.extend(b.chunks_exact(es).map(|c| load_f32(dt, c))),
        }
        if rev {
            out[from..].reverse();
        }
        return;
    }
    match dt {
        Dtype::F32 | Dtype::F32r => gather_row_with(bytes, sp, pb, out, rev, |b, out| {
            use zerocopy::FromBytes;
            // The storage is f32 words, so aligned runs are plain copies.
            match <[f32]>::ref_from_bytes(b) {
                Ok(w) => out.extend_from_slice(w),
                Err(_) => out.extend(
                    b.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
            }
        }),
        Dtype::Bf16 => gather_row_with(bytes, sp, pb, out, rev, super::widen::bf16_into),
        Dtype::F16 => gather_row_with(bytes, sp, pb, out, rev, |b, out| {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            use zerocopy::FromBytes;
            match <[u16]>::ref_from_bytes(b) {
                // Aligned runs convert as a slice (F16C, several lanes at a time).
                Ok(bits) => {
                    let at = out.len();
                    out.resize(at + bits.len(), 0.0);
                    bits.reinterpret_cast::<half::f16>()
                        .convert_to_f32_slice(&mut out[at..]);
                }
                Err(_) => out.extend(
                    b.chunks_exact(2)
                        .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
                ),
            }
        }),
        _ => gather_row_with(bytes, sp, pb, out, rev, |b, out| {
            out.extend(b.chunks_exact(es).map(|c| load_f32(dt, c)))
        }),
    }
}

/// The element converters of the short paths and the whole-operand row loops (`c`: one
/// element's little-endian bytes).
/// Each goes through a fixed-size array: `copy_from_slice` of a chunk whose length the
/// compiler does not know became a `memmove` call per element (28% of a one-element-per-
/// partition ACTIVATE's host time).
#[inline(always)]
fn f32_at(c: &[u8]) -> f32 {
    c.first_chunk::<4>().map_or(0.0, |b| f32::from_le_bytes(*b))
}

#[inline(always)]
fn bf16_at(c: &[u8]) -> f32 {
    c.first_chunk::<2>().map_or(0.0, |b| {
        f32::from_bits(u32::from(u16::from_le_bytes(*b)) << 16)
    })
}

#[inline(always)]
fn put_f32(c: &mut [u8], x: f32) {
    if let Some(b) = c.first_chunk_mut::<4>() {
        *b = x.to_le_bytes();
    }
}

#[inline(always)]
fn put_bf16(c: &mut [u8], x: f32) {
    if let Some(b) = c.first_chunk_mut::<2>() {
        *b = bf16_bits(x).to_le_bytes();
    }
}

/// Rows of at most this many elements, in one ascending run, take the short path of
/// [`read_row`] and [`write_row`].
pub(super) const SMALL_ROW: usize = 16;

/// The bytes of a partition's row (`pb`: the byte of its element offset 0) where it is one
/// ascending run of at most [`SMALL_ROW`] elements.
#[inline(always)]
fn small_row<'a>(bytes: &'a [u8], sp: &Span, pb: i64) -> Option<&'a [u8]> {
    if !sp.contiguous || sp.len > SMALL_ROW {
        return None;
    }
    let at = usize::try_from(pb).ok()?;
    bytes.get(at..at + sp.len * sp.es as usize)
}

#[inline(always)]
fn small_row_mut<'a>(bytes: &'a mut [u8], sp: &Span, pb: i64) -> Option<&'a mut [u8]> {
    if !sp.contiguous || sp.len > SMALL_ROW {
        return None;
    }
    let at = usize::try_from(pb).ok()?;
    bytes.get_mut(at..at + sp.len * sp.es as usize)
}

/// The first byte of each of `channels` rows of a checked span where every row is one
/// ascending run of 1 to [`SMALL_ROW`] elements lying inside `bytes` (checked here once for
/// all: the rows ascend by the partition stride), else None.
fn small_rows(
    bytes: &[u8],
    sp: &Span,
    channels: usize,
) -> Option<impl Iterator<Item = usize> + Clone> {
    if !sp.contiguous || sp.len == 0 || sp.len > SMALL_ROW || channels == 0 {
        return None;
    }
    let first = usize::try_from(sp.row_base(0)).ok()?;
    let last = usize::try_from(sp.row_base(channels - 1)).ok()?;
    let end = last.checked_add(sp.len * sp.es as usize)?;
    let stride = sp.stride;
    (end <= bytes.len() && first <= last).then(|| (0..channels).map(move |p| first + p * stride))
}

/// Convert `n` elements of `ES` bytes at each row start of `rows` into consecutive rows of
/// `out` (each reversed if `rev`): [`rows_into`] with the row length a constant for the
/// common lengths (1, 2 and 4 elements: a decode step's tensors), so each row is a few
/// straight-line loads rather than a loop of unknown count.
#[inline(always)]
fn small_rows_of<const ES: usize>(
    bytes: &[u8],
    rows: impl Iterator<Item = usize>,
    n: usize,
    out: &mut [f32],
    rev: bool,
    f: impl Fn(&[u8]) -> f32,
) {
    match n {
        1 => rows_into::<ES, 1>(bytes, rows, n, out, rev, f),
        2 => rows_into::<ES, 2>(bytes, rows, n, out, rev, f),
        4 => rows_into::<ES, 4>(bytes, rows, n, out, rev, f),
        _ => rows_into::<ES, 0>(bytes, rows, n, out, rev, f),
    }
}

/// The rows of [`small_rows_of`], `N` elements each (0: `n`). Each row is sliced to its own
/// bytes, so the element loop has a known count (slicing to the memory's end cost a division
/// per row for the chunk count: a third of a 128-partition gather of one element each).
#[inline(always)]
fn rows_into<const ES: usize, const N: usize>(
    bytes: &[u8],
    rows: impl Iterator<Item = usize>,
    n: usize,
    out: &mut [f32],
    rev: bool,
    f: impl Fn(&[u8]) -> f32,
) {
    let n = if N > 0 { N } else { n.max(1) };
    for (o, at) in out.chunks_exact_mut(n).zip(rows) {
        let Some(row) = bytes.get(at..at + n * ES) else {
            continue; // (small_rows checked every row: not reached)
        };
        for (x, c) in o.iter_mut().zip(row.chunks_exact(ES)) {
            *x = f(c);
        }
        if rev {
            o.reverse();
        }
    }
}

/// The raw 16-bit elements of a pattern (a bf16 MATMUL's moving tensor for the AMX tiles,
/// which take bf16 bits as they are; bf16 weights a matrix-vector product reads as bits),
/// `channels` partitions one after another, each reversed if `rev` (as [`gather_reversed`]).
pub(super) fn gather_bits16(
    mem: &CoreMem,
    ap: &AccessPattern,
    channels: usize,
    out: &mut Vec<u16>,
    rev: bool,
) -> Result<usize, OpFault> {
    let sp = span(mem, ap, Dtype::Bf16, channels)?;
    out.clear();
    out.reserve(channels * sp.len);
    let bytes = mem.bytes(sp.space);
    for p in 0..channels {
        gather_row_with(bytes, &sp, sp.row_base(p), out, rev, |b, out| {
            use zerocopy::FromBytes;
            // Aligned runs on a little-endian host are plain copies.
            match <[u16]>::ref_from_bytes(b) {
                Ok(w) if cfg!(target_endian = "little") => out.extend_from_slice(w),
                _ => out.extend(b.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]))),
            }
        });
    }
    Ok(sp.len)
}

/// Walk one partition of a checked span (`pb`: the byte of its element offset 0), handing
/// each run of consecutive elements (as bytes) to `seg`, which appends them converted.
#[inline(always)]
fn gather_row_with<T>(
    bytes: &[u8],
    sp: &Span,
    pb: i64,
    out: &mut Vec<T>,
    rev: bool,
    seg: impl Fn(&[u8], &mut Vec<T>),
) {
    let es = sp.es as usize;
    let n = sp.len;
    let from = out.len();
    if sp.descending {
        // One descending run (offsets 0, -1, ..., 1 - n): convert it ascending (memory
        // order), then reverse in place unless the caller wants it reversed.
        let at = (pb + (1 - n as i64) * sp.es) as usize;
        seg(&bytes[at..at + n * es], out);
        if !rev {
            out[from..].reverse();
        }
        return;
    }
    let r = sp.run;
    for o in sp.starts() {
        let at = (pb + o * sp.es) as usize;
        seg(&bytes[at..at + r * es], out);
    }
    if rev {
        out[from..].reverse();
    }
}

/// `half::bf16::from_f32(x).to_bits()` without branches, so the loops over it vectorize:
/// round to nearest even, and a NaN keeps its sign and top payload bits with the quiet bit
/// set. NaN is told by its bits, in integer operations: a float compare kept the loops
/// half scalar (`widen::bf16_bytes_from_f32_bytes`).
#[inline]
pub(crate) fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rne = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x40;
    let m = 0u32.wrapping_sub(u32::from((b & 0x7fff_ffff) > 0x7f80_0000));
    ((nan & m) | (rne & !m)) as u16
}

pub(super) fn scatter(
    mem: &mut CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    vals: &[f32],
) -> Result<(), OpFault> {
    let sp = span(mem, ap, dt, channels)?;
    if vals.len() < channels * sp.len {
        return Err(OpFault::bad(
            "shape mismatch between source and destination patterns",
        ));
    }
    let (lo, hi) = sp.write_cols();
    let bytes = mem.bytes_mut_cols(sp.space, lo, hi);
    if let (Some(rows), Dtype::F32 | Dtype::F32r | Dtype::Bf16) =
        (small_rows(bytes, &sp, channels), dt)
    {
        // Rows of a few elements each: one loop over them all (as `gather`).
        let n = sp.len;
        if dt == Dtype::Bf16 {
            small_rows_out::<2>(bytes, rows, n, vals, put_bf16);
        } else {
            small_rows_out::<4>(bytes, rows, n, vals, put_f32);
        }
        return Ok(());
    }
    for (p, row) in vals.chunks_exact(sp.len.max(1)).take(channels).enumerate() {
        write_row(bytes, &sp, sp.row_base(p), dt, row);
    }
    Ok(())
}

/// MEMSET: every element `ap` names in `channels` partitions set to `value` stored as `dt`.
/// The first partition is written as [`scatter`] writes it; its first run's bytes are then
/// copied into every run of the other partitions (all elements hold the same value, so the
/// same bytes: no conversion per element, which for integer types cost ~5 ns each). Rows of
/// at most 64 bytes of fp32 or bf16 go through `scatter`'s one loop over all rows instead,
/// which beats copying run by run there. Returns the elements per partition; `vals` is
/// scratch.
pub(super) fn fill(
    mem: &mut CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    value: f32,
    vals: &mut Vec<f32>,
) -> Result<usize, OpFault> {
    let sp = span(mem, ap, dt, channels)?;
    if channels == 0 || sp.len == 0 {
        return Ok(sp.len);
    }
    if sp.len * dt.size() <= 64 && matches!(dt, Dtype::F32 | Dtype::F32r | Dtype::Bf16) {
        vals.clear();
        vals.resize(channels * sp.len, value);
        scatter(mem, ap, dt, channels, vals)?;
        return Ok(sp.len);
    }
    vals.clear();
    vals.resize(sp.len, value);
    let (lo, hi) = sp.write_cols();
    let bytes = mem.bytes_mut_cols(sp.space, lo, hi);
    write_row(bytes, &sp, sp.row_base(0), dt, vals);
    let (es, run) = (sp.es as usize, sp.run);
    let Some(&first) = sp.starts().first() else {
        return Ok(sp.len);
    };
    let at0 = (sp.row_base(0) + first * sp.es) as usize;
    let Some(one) = bytes.get(at0..at0 + run * es) else {
        return Ok(sp.len); // (`span` checked every run: not reached)
    };
    let one = one.to_vec();
    for p in 1..channels {
        let pb = sp.row_base(p);
        for o in sp.starts() {
            let at = (pb + o * sp.es) as usize;
            if let Some(r) = bytes.get_mut(at..at + run * es) {
                r.copy_from_slice(&one);
            }
        }
    }
    Ok(sp.len)
}

/// Store `n` values of `vals` per row at each row start of `rows`, `ES` bytes each through
/// `put`; the common lengths (1, 2, 4) as constants, as [`small_rows_of`].
#[inline(always)]
fn small_rows_out<const ES: usize>(
    bytes: &mut [u8],
    rows: impl Iterator<Item = usize>,
    n: usize,
    vals: &[f32],
    put: impl Fn(&mut [u8], f32),
) {
    /// The rows, `N` values each (0: `n`).
    #[inline(always)]
    fn rows_out<const ES: usize, const N: usize>(
        bytes: &mut [u8],
        rows: impl Iterator<Item = usize>,
        n: usize,
        vals: &[f32],
        put: impl Fn(&mut [u8], f32),
    ) {
        let n = if N > 0 { N } else { n.max(1) };
        for (v, at) in vals.chunks_exact(n).zip(rows) {
            let Some(row) = bytes.get_mut(at..at + n * ES) else {
                continue; // (small_rows checked every row: not reached)
            };
            for (c, x) in row.chunks_exact_mut(ES).zip(v) {
                put(c, *x);
            }
        }
    }
    match n {
        1 => rows_out::<ES, 1>(bytes, rows, n, vals, put),
        2 => rows_out::<ES, 2>(bytes, rows, n, vals, put),
        4 => rows_out::<ES, 4>(bytes, rows, n, vals, put),
        _ => rows_out::<ES, 0>(bytes, rows, n, vals, put),
    }
}

/// Store one partition's elements of a checked span (`vals`: at least its `len` values),
/// converted from f32; `pb` is the byte in `bytes` of the partition's element offset 0.
pub(super) fn write_row(bytes: &mut [u8], sp: &Span, pb: i64, dt: Dtype, vals: &[f32]) {
    let es = sp.es as usize;
    if let Some(b) = small_row_mut(bytes, sp, pb) {
        // A few elements in one run: as `read_row`.
        match dt {
            Dtype::F32 | Dtype::F32r => {
                for (c, x) in b.chunks_exact_mut(4).zip(vals) {
                    put_f32(c, *x);
                }
            }
            Dtype::Bf16 => {
                for (c, x) in b.chunks_exact_mut(2).zip(vals) {
                    put_bf16(c, *x);
                }
            }
            _ => {
                for (c, x) in b.chunks_exact_mut(es).zip(vals) {
                    store_f32(dt, *x, c);
                }
            }
        }
        return;
    }
    match dt {
        Dtype::F32 | Dtype::F32r => scatter_row_with(bytes, sp, pb, vals, |v, b| {
            for (c, x) in b.chunks_exact_mut(4).zip(v) {
                put_f32(c, *x);
            }
        }),
        Dtype::Bf16 => scatter_row_with(bytes, sp, pb, vals, |v, b| {
            use zerocopy::FromBytes;
            match <[u16]>::mut_from_bytes(b) {
                // Aligned runs on a little-endian host: narrowed as a slice.
                Ok(bits) if cfg!(target_endian = "little") => super::widen::bf16_from(v, bits),
                _ => {
                    for (c, x) in b.chunks_exact_mut(2).zip(v) {
                        put_bf16(c, *x);
                    }
                }
            }
        }),
        Dtype::F16 => scatter_row_with(bytes, sp, pb, vals, |v, b| {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            use zerocopy::FromBytes;
            match <[u16]>::mut_from_bytes(b) {
                // Aligned runs convert as a slice (F16C, several lanes at a time).
                Ok(bits) => bits
                    .reinterpret_cast_mut::<half::f16>()
                    .convert_from_f32_slice(v),
                Err(_) => {
                    for (c, x) in b.chunks_exact_mut(2).zip(v) {
                        c.copy_from_slice(&half::f16::from_f32(*x).to_bits().to_le_bytes());
                    }
                }
            }
        }),
        _ => scatter_row_with(bytes, sp, pb, vals, |v, b| {
            for (c, x) in b.chunks_exact_mut(es).zip(v) {
                store_f32(dt, *x, c);
            }
        }),
    }
}

/// Walk one partition of a checked span (`pb`: the byte of its element offset 0), handing
/// each run of consecutive elements (as bytes) and its values to `seg`, which stores them
/// converted.
#[inline(always)]
fn scatter_row_with(
    bytes: &mut [u8],
    sp: &Span,
    pb: i64,
    vals: &[f32],
    seg: impl Fn(&[f32], &mut [u8]),
) {
    let es = sp.es as usize;
    let r = sp.run;
    for (k, o) in sp.starts().iter().enumerate() {
        let at = (pb + o * sp.es) as usize;
        seg(&vals[k * r..(k + 1) * r], &mut bytes[at..at + r * es]);
    }
}

/// A bounds-checked fp32 pattern that is one ascending run per partition, as a view into the
/// core's f32 storage: (memory, view with rows = partitions, elements per partition).
pub(super) fn f32_view(
    mem: &CoreMem,
    ap: &AccessPattern,
    channels: usize,
) -> Result<Option<(Space, View, usize)>, OpFault> {
    let sp = span(mem, ap, Dtype::F32, channels)?;
    let start = sp.base;
    if !sp.contiguous || start % 4 != 0 || sp.stride % 4 != 0 {
        return Ok(None);
    }
    let v = View {
        off: start as usize / 4,
        rs: sp.stride / 4,
        cs: 1,
    };
    Ok(Some((sp.space, v, sp.len)))
}

/// Rows at least this long are asked for one partition ahead by the partition-by-partition
/// copy ([`copy_bits`]); shorter ones cost less than the hints.
const PREFETCH_ROW_BYTES: usize = 256;

/// Element operations a copied byte counts as when deciding to share a copy out.
const COPY_WEIGHT: u64 = 16;

/// Copy `channels` partitions from one pattern to another without converting the elements.
pub(super) fn copy_bits(
    mem: &mut CoreMem,
    src: &AccessPattern,
    dst: &AccessPattern,
    dt: Dtype,
    channels: usize,
    tmp: &mut Vec<u8>,
) -> Result<usize, OpFault> {
    let s = span(mem, src, dt, channels)?;
    let d = span(mem, dst, dt, channels)?;
    if s.len != d.len {
        return Err(OpFault::bad(
            "shape mismatch between source and destination patterns",
        ));
    }
    let es = s.es as usize;
    let n = s.len;
    if s.contiguous && d.contiguous && s.space == d.space {
        // One move per partition equals read-all-then-write-all when no move overwrites a
        // source partition still to be read: with the destination shifted to higher
        // partitions than the source, move the last partition first.
        let (lo, hi) = d.write_cols();
        let bytes = mem.bytes_mut_cols(s.space, lo, hi);
        let rev = d.base > s.base;
        for i in 0..channels {
            let p = if rev { channels - 1 - i } else { i };
            let from = ((p * s.stride) as i64 + s.base) as usize;
            let to = ((p * d.stride) as i64 + d.base) as usize;
            if !crate::shortcopy::copy_short_within(bytes, from, n * es, to) {
                bytes.copy_within(from..from + n * es, to);
            }
        }
        return Ok(n);
    }
    if s.contiguous && d.contiguous && n * es <= 16 {
        // SBUF <-> PSUM rows of a few bytes (a decode step's): one plain loop, each row a
        // fixed-size move rather than a `memcpy` call (span() checked every row's bounds).
        let (lo, hi) = d.write_cols();
        let (from, to) = mem.across_cols(s.space, lo, hi);
        let len = n * es;
        for p in 0..channels {
            let (at, dat) = (s.row_base(p) as usize, d.row_base(p) as usize);
            if let (Some(f), Some(t)) = (from.get(at..at + len), to.get_mut(dat..dat + len)) {
                crate::shortcopy::copy_short(t, f);
            }
        }
        return Ok(n);
    }
    if s.contiguous && d.contiguous {
        // SBUF <-> PSUM: one copy per partition, no staging buffer; a large copy is shared
        // out by partitions (`fanout`).
        let (lo, hi) = d.write_cols();
        let (from, to) = mem.across_cols(s.space, lo, hi);
        let len = n * es;
        let din = d.base_in_partition() as usize;
        let mut parts = d.partitions_mut(to, channels);
        let work = (channels * len) as u64 * COPY_WEIGHT;
        let rows = crate::fanout::rows_per_piece(parts.len(), work);
        crate::fanout::for_each_mut(&mut parts, rows, work, |i, piece| {
            let k = piece.len();
            for j in 0..k {
                // The next partition's rows asked for while this one's move: each row lies
                // on a page of its own, where the hardware prefetcher starts over (COPY of
                // 128 x 2 KiB PSUM -> SBUF in a kernel: 23.7-24.5 -> 21.8-22.3 us median).
                if len >= PREFETCH_ROW_BYTES && j + 1 < k {
                    let next = from
                        .as_ptr()
                        .wrapping_add(s.row_base(i * rows + j + 1) as usize);
                    let into = piece[j + 1].as_ptr().wrapping_add(din);
                    for l in (0..len).step_by(64) {
                        crate::prefetch::line(next.wrapping_add(l));
                        crate::prefetch::line(into.wrapping_add(l));
                    }
                }
                let at = s.row_base(i * rows + j) as usize;
                piece[j][din..din + len].copy_from_slice(&from[at..at + len]);
            }
        });
        return Ok(n);
    }
    tmp.clear();
    let from = mem.bytes(s.space);
    for p in 0..channels {
        let pb = (p * s.stride) as i64 + s.base;
        for o in s.starts() {
            let at = (pb + o * s.es) as usize;
            tmp.extend_from_slice(&from[at..at + s.run * es]);
        }
    }
    let (lo, hi) = d.write_cols();
    let to = mem.bytes_mut_cols(d.space, lo, hi);
    let mut k = 0;
    for p in 0..channels {
        let pb = (p * d.stride) as i64 + d.base;
        for o in d.starts() {
            let at = (pb + o * d.es) as usize;
            let len = d.run * es;
            to[at..at + len].copy_from_slice(&tmp[k..k + len]);
            k += len;
        }
    }
    Ok(n)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The span's runs, read off the steps and counts, are what the walked offsets give: one
    /// ascending run, one descending run, or runs of the innermost dimension starting where
    /// the walk says (every shape of up to 3 dimensions with steps -4..=4 and counts 1..=3,
    /// and some wider ones).
    #[test]
    fn span_runs_match_the_walked_offsets() {
        let mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut shapes = Vec::new();
        let steps = -4i16..=4;
        for dims in 1u8..=3 {
            for s0 in steps.clone() {
                for s1 in steps.clone() {
                    for s2 in [-9i16, -3, 0, 1, 3, 9] {
                        for n0 in 1u16..=3 {
                            for n1 in 1u16..=3 {
                                for n2 in [1u16, 2] {
                                    shapes.push((dims, [s0, s1, s2, 0], [n0, n1, n2, 1]));
                                }
                            }
                        }
                    }
                }
            }
        }
        shapes.push((2, [1, 64, 0, 0], [64, 32, 1, 1]));
        shapes.push((2, [-1, -64, 0, 0], [64, 32, 1, 1]));
        shapes.push((3, [1, 8, 256, 0], [8, 32, 4, 1]));
        shapes.push((4, [1, 0, 4, 0], [4, 1, 5, 0]));
        for (dims, step, num) in shapes {
            let ap = AccessPattern {
                addr: 0x8000,
                dims,
                step,
                num,
            };
            let sp = span(&mem, &ap, Dtype::F32, 2).expect("in bounds");
            let offs = offsets(&ap).expect("small");
            let asc = offs.windows(2).all(|w| w[1] == w[0] + 1);
            let desc = !asc && offs.windows(2).all(|w| w[1] == w[0] - 1);
            let what = format!("{ap:?}");
            assert_eq!((sp.contiguous, sp.descending), (asc, desc), "{what}");
            assert_eq!(sp.len, offs.len(), "{what}");
            if !asc {
                let starts: Vec<i64> = offs.iter().step_by(sp.run).copied().collect();
                assert_eq!(sp.starts(), starts, "{what}");
                // Each run is consecutive.
                for (k, o) in offs.iter().enumerate() {
                    assert_eq!(*o, starts[k / sp.run] + (k % sp.run) as i64, "{what}");
                }
            } else {
                assert_eq!((sp.starts(), sp.run), (&[0i64][..], offs.len()), "{what}");
            }
            // The LDWEIGHTS shortcut: a descending run's place as `span` gives it, and
            // nothing for any other pattern.
            let run = descending_run(&mem, &ap, Dtype::F32, 2).expect("in bounds");
            let want = desc.then(|| (sp.space(), sp.stride(), sp.row_base(0), sp.len));
            assert_eq!(run, want, "{what}");
        }
    }

    /// A same-space bit copy onto partitions shifted from its source's reads every source
    /// partition before any is overwritten (gather-then-scatter semantics), whichever way
    /// the shift goes.
    #[test]
    fn partition_shifted_copies_read_before_they_write() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let stride = mem.sbuf_stride;
        let row = |addr: u32| ap(addr, 1, 4);
        for (from, to) in [(0usize, 1usize), (1, 0), (0, 2), (3, 1)] {
            for p in 0..8 {
                for j in 0..4 {
                    mem.f32s_mut(Space::Sbuf)[p * stride / 4 + j] = (p * 10 + j) as f32;
                }
            }
            // Addresses at the window's stride; storage at the (skewed) storage stride.
            let w = crate::core::window_stride(Space::Sbuf);
            let src = row((from * w) as u32);
            let dst = row((to * w) as u32);
            let mut tmp = Vec::new();
            copy_bits(&mut mem, &src, &dst, Dtype::F32, 4, &mut tmp).expect("copy");
            for p in 0..4 {
                for j in 0..4 {
                    assert_eq!(
                        mem.f32s(Space::Sbuf)[(to + p) * stride / 4 + j],
                        ((from + p) * 10 + j) as f32,
                        "{from}->{to}: partition {p} element {j}"
                    );
                }
            }
        }
    }

    /// The offsets' range from steps and counts is the walked offsets' min and max, for
    /// ascending, descending and mixed steps and zero counts.
    #[test]
    fn offset_range_matches_the_walk() {
        let mut s = 0x2545_f491u32;
        let mut next = |m: u32| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s % m
        };
        for _ in 0..2000 {
            let dims = next(5) as u8;
            let mut ap = AccessPattern {
                addr: 0,
                dims,
                step: [0; 4],
                num: [0; 4],
            };
            for d in 0..4 {
                ap.step[d] = next(41) as i16 - 20;
                ap.num[d] = next(9) as u16;
            }
            let offs = offsets(&ap).expect("small pattern");
            let want = (
                offs.iter().min().copied().unwrap_or(0),
                offs.iter().max().copied().unwrap_or(0),
            );
            assert_eq!(offset_range(&ap).expect("small pattern"), want, "{ap:?}");
        }
        let huge = AccessPattern {
            addr: 0,
            dims: 4,
            step: [1; 4],
            num: [u16::MAX; 4],
        };
        assert!(offset_range(&huge).is_err() && offsets(&huge).is_err());
    }

    /// The branch-free bf16 rounding is `half`'s, bit for bit: ties, carries into the
    /// exponent, overflow to infinity, subnormals, ±0, infinities and NaN payloads.
    #[test]
    fn bf16_rounding_matches_half() {
        let mut s = 0x9e37_79b9u32;
        let check = |b: u32| {
            let x = f32::from_bits(b);
            assert_eq!(bf16_bits(x), half::bf16::from_f32(x).to_bits(), "{b:#010x}");
        };
        for hi in 0..=0xffffu32 {
            for lo in [0, 1, 0x7fff, 0x8000, 0x8001, 0xffff] {
                check(hi << 16 | lo);
            }
        }
        for _ in 0..1_000_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            check(s);
        }
    }

    /// A one-dimensional pattern.
    /// A one-dimensional pattern: `num` elements `step` apart from `addr`.
    pub(in crate::cayman_exec) fn ap(addr: u32, step: i16, num: u16) -> AccessPattern {
        AccessPattern {
            addr,
            dims: 1,
            step: [step, 0, 0, 0],
            num: [num, 0, 0, 0],
        }
    }

    /// For random patterns of one to four dimensions (steps -9..=9, counts 1..=6, fp32 and
    /// bf16, from partitions 0 and 3), the columns a write through the span declares cover
    /// every byte of every element it names: a write that declared fewer columns than it
    /// touches would leave kept rows and memos stale.
    #[test]
    fn span_columns_hold_every_element_of_random_patterns() {
        let m = crate::core::CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut seed = 0x51f1_5eed_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut checked = 0;
        for _ in 0..5000 {
            let dims = 1 + next(4) as u8;
            let mut step = [0i16; 4];
            let mut num = [1u16; 4];
            for d in 0..dims as usize {
                step[d] = next(19) as i16 - 9;
                num[d] = 1 + next(6) as u16;
            }
            let dt = if next(2) == 0 {
                Dtype::F32
            } else {
                Dtype::Bf16
            };
            let part = [0u32, 3][next(2) as usize];
            let addr = (part << 18) + 0x1000 + 4 * next(256) as u32;
            let ap = AccessPattern {
                addr,
                dims,
                step,
                num,
            };
            let Ok(sp) = span(&m, &ap, dt, 4) else {
                continue;
            };
            let (lo, hi) = sp.write_cols();
            let es = dt.size() as i64;
            let base = sp.base_in_partition();
            for o in offsets(&ap).expect("counted") {
                let at = base + o * es;
                assert!(
                    lo as i64 <= at && at + es <= hi as i64,
                    "{ap:?} {dt:?}: element at {at} outside columns {lo}..{hi}"
                );
            }
            checked += 1;
        }
        assert!(checked > 4000, "{checked} patterns checked");
    }

    /// MEMSET's fill leaves every byte as a scatter of the value does, for random patterns
    /// of one to four dimensions (overlapping ones included), every dtype, values that are
    /// exact, rounded, out of an integer's range and NaN, from partitions 0 and 3.
    #[test]
    fn fill_writes_what_a_scatter_of_the_value_writes() {
        let arch = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let (mut a, mut b) = (
            crate::core::CoreMem::new(&arch),
            crate::core::CoreMem::new(&arch),
        );
        let mut seed = 0x0f11_5eed_u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let dtypes: Vec<Dtype> = (1..=15).filter_map(Dtype::from_code).collect();
        let values = [
            1.0f32,
            -3.75,
            1e9,
            -1e-30,
            0.1,
            f32::NAN,
            f32::NEG_INFINITY,
            300.0,
        ];
        let (mut vals, mut scratch) = (Vec::new(), Vec::new());
        let mut checked = 0;
        for _ in 0..3000 {
            let dims = 1 + next(4) as u8;
            let (mut step, mut num) = ([0i16; 4], [1u16; 4]);
            for d in 0..dims as usize {
                step[d] = next(19) as i16 - 9;
                num[d] = 1 + next(6) as u16;
            }
            let dt = dtypes[next(dtypes.len() as u64) as usize];
            let value = values[next(values.len() as u64) as usize];
            let part = [0u32, 3][next(2) as usize];
            let space = if next(2) == 0 { 0 } else { 0x0200_0000 };
            let ap = AccessPattern {
                addr: space + (part << 18) + 0x1000 + 8 * next(128) as u32,
                dims,
                step,
                num,
            };
            let channels = 1 + next(5) as usize;
            let Ok(sp) = span(&a, &ap, dt, channels) else {
                continue;
            };
            vals.clear();
            vals.resize(channels * sp.len, value);
            scatter(&mut a, &ap, dt, channels, &vals).expect("in bounds");
            fill(&mut b, &ap, dt, channels, value, &mut scratch).expect("in bounds");
            // The partitions written (and one each side).
            let stride = a.stride(sp.space);
            let lo = (part as usize).saturating_sub(1) * stride;
            let hi = ((part as usize + channels + 1) * stride).min(a.bytes(sp.space).len());
            assert!(
                a.bytes(sp.space)[lo..hi] == b.bytes(sp.space)[lo..hi],
                "{ap:?} {dt:?} {value} x {channels}"
            );
            checked += 1;
        }
        assert!(checked > 1000, "{checked} patterns checked");
    }

    /// The columns a span's rows take: one run ascending or descending, and strided rows
    /// (their first to last element); none before the partition's start.
    #[test]
    fn span_columns_cover_every_element() {
        let m = crate::core::CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let cols = |a: AccessPattern, dt: Dtype| {
            let sp = span(&m, &a, dt, 4).expect("in bounds");
            sp.cols(sp.base_in_partition())
        };
        assert_eq!(cols(ap(0x100, 1, 16), Dtype::F32), Some((0x100, 0x140)));
        assert_eq!(cols(ap(0x13c, -1, 16), Dtype::F32), Some((0x100, 0x140)));
        assert_eq!(cols(ap(0x100, 3, 5), Dtype::Bf16), Some((0x100, 0x11a)));
        let two = AccessPattern {
            addr: 0x200,
            dims: 2,
            step: [1, 16, 0, 0],
            num: [4, 3, 1, 1],
        };
        assert_eq!(cols(two, Dtype::F32), Some((0x200, 0x200 + 4 * (32 + 4))));
    }

    /// A same-type copy between PSUM and SBUF (contiguous both sides: one copy per partition)
    /// and a strided one (through the staging buffer) move the same bits per partition.
    #[test]
    fn bit_copies_across_spaces_move_each_partition() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        for p in 0..3usize {
            for i in 0..16usize {
                let at = p * mem.psum_stride + 0x80 + 4 * i;
                let v = (1000 * p + i) as u32 | 0x7f80_0001; // NaN payloads survive: bits
                mem.bytes_mut(Space::Psum)[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        let psum = 1 << 25; // bit 25 of an access pattern's address: PSUM
        let mut tmp = Vec::new();
        let n = copy_bits(
            &mut mem,
            &ap(psum | 0x80, 1, 16),
            &ap(0x300, 1, 16),
            Dtype::F32,
            3,
            &mut tmp,
        )
        .expect("contiguous copy");
        assert_eq!(n, 16);
        copy_bits(
            &mut mem,
            &ap(psum | 0x80, 2, 8),
            &ap(0x600, 1, 8),
            Dtype::F32,
            3,
            &mut tmp,
        )
        .expect("strided copy");
        for p in 0..3usize {
            for i in 0..16usize {
                let word = |space, at: usize| {
                    let b = &mem.bytes(space)[at..at + 4];
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
                };
                let want = (1000 * p + i) as u32 | 0x7f80_0001;
                assert_eq!(word(Space::Sbuf, p * mem.sbuf_stride + 0x300 + 4 * i), want);
                if i % 2 == 0 {
                    assert_eq!(word(Space::Sbuf, p * mem.sbuf_stride + 0x600 + 2 * i), want);
                }
            }
        }
    }

    #[test]
    fn gathers_ascending_descending_and_strided_patterns_alike() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        for p in 0..2usize {
            for i in 0..8usize {
                let at = p * mem.sbuf_stride + 0x40 + 4 * i;
                let v = (10 * p + i) as f32;
                mem.bytes_mut(Space::Sbuf)[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        let mut out = Vec::new();
        gather(&mem, &ap(0x40, 1, 8), Dtype::F32, 2, &mut out).expect("ascending");
        assert_eq!(out[..8], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(out[8], 10.0);
        gather(&mem, &ap(0x40 + 28, -1, 8), Dtype::F32, 2, &mut out).expect("descending");
        assert_eq!(out[..8], [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
        assert_eq!(out[8..], [17.0, 16.0, 15.0, 14.0, 13.0, 12.0, 11.0, 10.0]);
        gather(&mem, &ap(0x40, 2, 4), Dtype::F32, 1, &mut out).expect("strided");
        assert_eq!(out, [0.0, 2.0, 4.0, 6.0]);
        assert!(gather(&mem, &ap(0, -1, 2), Dtype::F32, 1, &mut out).is_err());
        // The raw bits of a bf16 pattern are the bf16 gather's values, bit for bit.
        // Reversed too, as LDWEIGHTS reads bf16 weights for a matrix-vector product.
        // (An odd address: not a whole number of 16-bit words, so not a plain copy.)
        for (a, step, num) in [(0x40 + 14, -1, 8), (0x40, 1, 8), (0x40, 3, 4), (0x41, 1, 7)] {
            for rev in [false, true] {
                let mut bits = Vec::new();
                gather_bits16(&mem, &ap(a, step, num), 2, &mut bits, rev).expect("bits");
                let bf = ap(a, step, num);
                if rev {
                    gather_reversed(&mem, &bf, Dtype::Bf16, 2, &mut out).expect("bf16");
                } else {
                    gather(&mem, &bf, Dtype::Bf16, 2, &mut out).expect("bf16");
                }
                let want: Vec<u16> = out.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
                assert_eq!(bits, want, "step {step} reversed {rev}");
            }
        }
        // LDWEIGHTS' gather: each partition's elements reversed, whatever the pattern.
        for (a, step, num) in [(0x40 + 28, -1, 8), (0x40, 1, 8), (0x40, 2, 4)] {
            let mut fwd = Vec::new();
            gather(&mem, &ap(a, step, num), Dtype::F32, 2, &mut fwd).expect("forward");
            gather_reversed(&mem, &ap(a, step, num), Dtype::F32, 2, &mut out).expect("reversed");
            let n = num as usize;
            for (f, r) in fwd.chunks(n).zip(out.chunks(n)) {
                assert_eq!(
                    f.iter().rev().copied().collect::<Vec<_>>(),
                    r,
                    "step {step}"
                );
            }
        }
    }

    #[test]
    fn same_type_integer_copy_keeps_every_bit() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // Two fp16 values packed in an int32 word: 0x4d3e_c0a1 is not exact in f32.
        let word = 0x4d3e_c0a1u32.to_le_bytes();
        mem.bytes_mut(Space::Sbuf)[0x100..0x104].copy_from_slice(&word);
        let ap = |addr| AccessPattern {
            addr,
            dims: 1,
            step: [1, 0, 0, 0],
            num: [1, 0, 0, 0],
        };
        let mut tmp = Vec::new();
        let n = copy_bits(&mut mem, &ap(0x100), &ap(0x200), Dtype::I32, 1, &mut tmp).expect("copy");
        assert_eq!(n, 1);
        assert_eq!(&mem.bytes(Space::Sbuf)[0x200..0x204], &word);
        assert!(copy_bits(
            &mut mem,
            &ap(0x100),
            // Past the 224 KiB of partition 0 (0x40000 and up would be partition 1).
            &ap(0x3_8000),
            Dtype::I32,
            1,
            &mut tmp
        )
        .is_err());
    }

    #[test]
    fn offsets_walk_innermost_first() {
        let ap = AccessPattern {
            addr: 0,
            dims: 3,
            step: [-1, 0, -32, 0],
            num: [32, 1, 4, 0],
        };
        let o = offsets(&ap).expect("small pattern");
        assert_eq!(o.len(), 128);
        assert_eq!(&o[..3], &[0, -1, -2]);
        assert_eq!(o[32], -32);
        assert_eq!(o[127], -127);
        let ap = AccessPattern {
            addr: 0,
            dims: 2,
            step: [1, 10, 0, 0],
            num: [3, 2, 0, 0],
        };
        assert_eq!(offsets(&ap).expect("small"), vec![0, 1, 2, 10, 11, 12]);
        let huge = AccessPattern {
            addr: 0,
            dims: 4,
            step: [1, 1, 1, 1],
            num: [65535, 65535, 65535, 65535],
        };
        assert!(offsets(&huge).is_err());
    }

    /// Rows of a few elements in one run (the short path of `read_row`/`write_row`) and
    /// longer ones read and write each element as its dtype encodes it (reference: the
    /// bytes decoded and encoded with `f32::from_le_bytes` and `half`), reversed too; at the
    /// short path's limit and one past it.
    #[test]
    fn short_and_long_rows_convert_each_element() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut s = 0x51u64;
        let mut next = move || crate::gemm::amx::tests::lcg(&mut s) * 8.0;
        let (at, ch) = (0x200usize, 3usize);
        for dt in [Dtype::F32, Dtype::Bf16, Dtype::F16] {
            let es = dt.size();
            for n in [1usize, 2, 3, 4, 8, SMALL_ROW, SMALL_ROW + 1] {
                // Bytes of each dtype's own encoding of arbitrary values.
                let vals: Vec<f32> = (0..ch * n).map(|_| next()).collect();
                let enc = |v: f32| -> Vec<u8> {
                    match dt {
                        Dtype::F32 => v.to_le_bytes().to_vec(),
                        Dtype::Bf16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
                        _ => half::f16::from_f32(v).to_le_bytes().to_vec(),
                    }
                };
                let dec = |b: &[u8]| -> f32 {
                    match dt {
                        Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                        Dtype::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
                        _ => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
                    }
                };
                let stride = mem.sbuf_stride;
                scatter(&mut mem, &ap(at as u32, 1, n as u16), dt, ch, &vals).expect("scatter");
                let bytes = mem.bytes(Space::Sbuf);
                for p in 0..ch {
                    for i in 0..n {
                        let b = &bytes[p * stride + at + i * es..][..es];
                        assert_eq!(b, &enc(vals[p * n + i])[..], "{dt:?} n {n} write {p}/{i}");
                    }
                }
                let want: Vec<f32> = (0..ch * n)
                    .map(|j| dec(&bytes[(j / n) * stride + at + (j % n) * es..][..es]))
                    .collect();
                let mut got = Vec::new();
                gather(&mem, &ap(at as u32, 1, n as u16), dt, ch, &mut got).expect("gather");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{dt:?} n {n} read");
                gather_reversed(&mem, &ap(at as u32, 1, n as u16), dt, ch, &mut got).expect("rev");
                let rev: Vec<f32> = want
                    .chunks(n)
                    .flat_map(|r| r.iter().rev().copied())
                    .collect();
                assert_eq!(bits(&got), bits(&rev), "{dt:?} n {n} reversed");
            }
        }
    }

    #[test]
    fn runs_of_an_inner_unit_step_gather_and_scatter_alike() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // 3 runs of 4 bf16 elements, 10 elements apart, in 2 partitions.
        let ap = AccessPattern {
            addr: 0x200,
            dims: 2,
            step: [1, 10, 0, 0],
            num: [4, 3, 0, 0],
        };
        let vals: Vec<f32> = (0..24).map(|i| i as f32 - 7.5).collect();
        scatter(&mut mem, &ap, Dtype::Bf16, 2, &vals).expect("scatter");
        let mut out = Vec::new();
        assert_eq!(
            gather(&mem, &ap, Dtype::Bf16, 2, &mut out).expect("gather"),
            12
        );
        assert_eq!(out, vals);
        // Element 5 of partition 1 is run 1, index 1: byte 0x200 + 2 * (10 + 1).
        let at = mem.sbuf_stride + 0x200 + 2 * 11;
        let b = &mem.bytes(Space::Sbuf)[at..at + 2];
        assert_eq!(
            half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
            vals[12 + 5]
        );
    }

    /// A contiguous copy between SBUF and PSUM, shared out by partitions or not, moves each
    /// partition's bytes to the destination partition and touches nothing else (checked
    /// byte by byte against the offsets the patterns name).
    #[test]
    fn copies_across_memories_shared_or_not_move_each_partition() {
        let profile = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let psum = crate::cayman_exec::PSUM_BIT_FOR_TESTS;
        // (source, destination, channels): PSUM to SBUF from partition 0, SBUF from partition
        // 32 to PSUM at an offset.
        // Rows of 1 to 4 elements (4 to 16 bytes) take the short-row loop.
        let cases = [
            (ap(psum | 0x800, 1, 512), ap(0x4820, 1, 512), 128usize),
            (ap((32 << 18) + 0x100, 1, 300), ap(psum | 0x40, 1, 300), 96),
            (ap(psum | 0x804, 1, 2), ap(0x4824, 1, 2), 128),
            (ap((5 << 18) + 0x104, 1, 1), ap(psum | 0x48, 1, 1), 100),
            (ap(psum | 0x10, 1, 3), ap((1 << 18) + 0x30, 1, 3), 127),
            (ap(0x200, 1, 4), ap(psum | 0x100, 1, 4), 128),
        ];
        for (src, dst, ch) in cases {
            for shared in [false, true] {
                let mut m = CoreMem::new(&profile);
                for (sp, seed) in [(Space::Sbuf, 7u8), (Space::Psum, 91)] {
                    for (i, b) in m.bytes_mut(sp).iter_mut().enumerate().step_by(3) {
                        *b = (i as u8).wrapping_mul(seed).wrapping_add(1);
                    }
                }
                let before = (m.bytes(Space::Sbuf).to_vec(), m.bytes(Space::Psum).to_vec());
                let mut tmp = Vec::new();
                let n = crate::fanout::with(shared, || {
                    copy_bits(&mut m, &src, &dst, Dtype::F32, ch, &mut tmp)
                })
                .expect("in bounds");
                assert_eq!(n, src.num[0] as usize);
                // The storage byte of an operand's partition p: the address names window
                // offsets, storage has its own stride.
                let byte_at = |ap: &AccessPattern, stride: usize, p: usize| {
                    let w = crate::core::window_stride(ap.space());
                    let first = if ap.space() == Space::Sbuf {
                        ap.offset() as usize / w
                    } else {
                        0
                    };
                    (first + p) * stride + ap.offset() as usize % w
                };
                let (ss, ds) = (m.psum_stride.max(1), m.sbuf_stride.max(1));
                let (s_stride, d_stride) = if src.space() == Space::Psum {
                    (ss, ds)
                } else {
                    (ds, ss)
                };
                let mut want = if dst.space() == Space::Sbuf {
                    before.0.clone()
                } else {
                    before.1.clone()
                };
                let from = if src.space() == Space::Sbuf {
                    &before.0
                } else {
                    &before.1
                };
                for p in 0..ch {
                    let (a, b) = (byte_at(&src, s_stride, p), byte_at(&dst, d_stride, p));
                    want[b..b + 4 * n].copy_from_slice(&from[a..a + 4 * n]);
                }
                assert!(
                    m.bytes(dst.space()) == &want[..],
                    "shared: {shared}: destination"
                );
                let untouched = if src.space() == Space::Sbuf {
                    &before.0
                } else {
                    &before.1
                };
                assert!(
                    m.bytes(src.space()) == &untouched[..],
                    "shared: {shared}: source"
                );
            }
        }
    }
}
