//! Elementwise words (ACTIVATE, TENSOR_REDUCE, TENSOR_SCALAR, TENSOR_TENSOR, converting
//! copies) as one step per partition: a partition's source row is read, computed and written at once, so a
//! data-path helper that takes some partitions takes their whole pass (`fanout`), not just
//! the arithmetic between a serial gather and scatter (`docs/performance.md`, 2026-12-05).

use super::pattern::{f32_row, f32_row_mut, gather, read_row, scatter, span, write_row, Span};
use super::OpFault;
use crate::core::CoreMem;
use neuron_isa::cayman::AccessPattern;
use neuron_isa::Dtype;

/// What one element of a step counts as, in multiply-adds, when deciding to share it out: a
/// 128-partition step of 512 elements per partition gains from a helper (COPY, TENSOR_REDUCE
/// on a 2-CPU VM, `docs/performance.md`); ACTIVATE counts its function evaluation on top.
pub(crate) const ELEMENTWISE_WEIGHT: u64 = 32;

/// `f(p, source, out)` on each of `op.channels` partitions: channel `p`'s source row (as
/// f32) turned into its `out.len()` destination elements (`op.out_len`, else as many as the
/// source's); row by row where [`map_rows`] can; elsewhere the whole source gathered into
/// `a`, each row computed, the rows' results written together (the same values either way).
/// Returns the source's elements per partition.
pub(super) fn elementwise(
    mem: &mut CoreMem,
    op: &Rows,
    a: &mut Vec<f32>,
    f: impl Fn(usize, &[f32], &mut [f32]) + Sync,
) -> Result<usize, OpFault> {
    // Rows shorter than one vector go faster whole, through the patterns' short-row loops,
    // than one step each (a step a partition cost ~13 ns in a hot cache, and in a kernel each
    // partition's row another cache miss: a reduction of four values a partition took
    // 3-7 us), as in `zip_rows` and `short_rows`.
    if super::pattern::elem_count(op.src)? >= super::pattern::SMALL_ROW as u64 {
        if let Some(n) = map_rows(mem, op, &f)? {
            return Ok(n);
        }
    }
    let n = gather(mem, op.src, op.sdt, op.channels, a)?;
    let out_len = op.out_len.unwrap_or(n);
    // `channels` rows of `out_len`: no larger than the destination pattern `scatter` checks
    // (a pattern's count is bounded by `elem_count`), else refused by it as before.
    let mut out = vec![0.0; op.channels.saturating_mul(out_len)];
    let rows = a.chunks(n.max(1)).zip(out.chunks_mut(out_len.max(1)));
    for (p, (r, o)) in rows.take(op.channels).enumerate() {
        f(p, r, o);
    }
    scatter(mem, op.dst, op.ddt, op.channels, &out)?;
    Ok(n)
}

/// A step on rows shorter than one 16-lane vector (a decode step's tensors, which the
/// pattern's short-row loops take): the whole source gathered, `f(values, n)` on all of it at
/// once (`n` elements a row), the result scattered to the destination (`op.out_len` and
/// `op.weight` do not apply). The whole-operand form
/// of [`elementwise`], without a step per row (each a scalar tail of the wide loops and a
/// buffer round trip). None, nothing done, for longer rows; else the elements per partition.
pub(super) fn short_rows(
    mem: &mut CoreMem,
    op: &Rows,
    a: &mut Vec<f32>,
    f: impl FnOnce(&mut [f32], usize),
) -> Result<Option<usize>, OpFault> {
    let n = super::pattern::elem_count(op.src)? as usize;
    if !(1..super::pattern::SMALL_ROW).contains(&n) {
        return Ok(None);
    }
    gather(mem, op.src, op.sdt, op.channels, a)?;
    f(a, n);
    scatter(mem, op.dst, op.ddt, op.channels, a)?;
    Ok(Some(n))
}

/// A row step's operands: `channels` partitions of `src` (as `sdt`) to `dst` (as `ddt`),
/// `out_len` destination elements per channel (None: the source's count), `weight` element
/// operations per source element (for sharing it out).
#[derive(Clone, Copy)]
pub(super) struct Rows<'a> {
    pub(super) src: &'a AccessPattern,
    pub(super) sdt: Dtype,
    pub(super) dst: &'a AccessPattern,
    pub(super) ddt: Dtype,
    pub(super) channels: usize,
    pub(super) out_len: Option<usize>,
    pub(super) weight: u64,
}

/// An elementwise step channel by channel: `f(p, source, out)` turns channel `p`'s source
/// elements (as f32) into its destination elements (`out_len` of them, e.g. a reduction's
/// groups; None: as many as the source's). One pass over the operands, with the row in
/// cache, where gathering and scattering whole operands makes three; and no copies where
/// the rows allow: an fp32 source row in one run is handed over where it lies, and an fp32
/// destination row in one run is `out` itself (the results land in place), unless it shares
/// bytes with the source. Large steps (`weight` element operations per source element) are
/// shared out by channels (`fanout`). Returns the source's elements per channel. The same as
/// `gather`, the computation, then `scatter` wherever no channel's destination shares bytes
/// with another channel's source: the operands lie in different memories, or in the same
/// partitions. Elsewhere (or where the destination does not hold `out_len` elements per
/// channel) nothing is done and None returned, for the caller to do it whole.
pub(super) fn map_rows(
    mem: &mut CoreMem,
    op: &Rows,
    f: impl Fn(usize, &[f32], &mut [f32]) + Sync,
) -> Result<Option<usize>, OpFault> {
    let (channels, sdt, ddt) = (op.channels, op.sdt, op.ddt);
    let s = span(mem, op.src, sdt, channels)?;
    let d = span(mem, op.dst, ddt, channels)?;
    let out_len = op.out_len.unwrap_or(s.len);
    let work = (channels as u64)
        .saturating_mul(s.len as u64)
        .saturating_mul(op.weight);
    let same = s.space() == d.space();
    if d.len != out_len || channels == 0 || (same && s.first() != d.first()) {
        return Ok(None);
    }
    let (sin, din) = (s.base_in_partition(), d.base_in_partition());
    // The columns the rows write (every column where they cannot be told).
    let (lo, hi) = d.write_cols();
    let (shared, dbytes): (&[u8], &mut [u8]) = if same {
        (&[], mem.bytes_mut_cols(d.space(), lo, hi))
    } else {
        mem.across_cols(s.space(), lo, hi)
    };
    // The destination's partitions, one slice each; a channel's source lies in its slice
    // (same memory) or in `shared`.
    let mut parts = d.partitions_mut(dbytes, channels);
    if parts.len() != channels {
        return Ok(None); // (span() checked the partitions: not reached)
    }
    let dst = Dest {
        span: &d,
        base: din,
        dt: ddt,
        len: out_len,
    };
    let rows = crate::fanout::rows_per_piece(channels, work);
    crate::fanout::for_each_mut(&mut parts, rows, work, |i, piece| {
        // A destination row to compute into where `out` cannot be the storage; the source
        // row converted (or copied away from the destination's bytes).
        let (mut row, mut buf) = (Vec::new(), Vec::new());
        for (j, part) in piece.iter_mut().enumerate() {
            let p = i * rows + j;
            if !same {
                let vals = source_row(shared, &s, s.row_base(p), sdt, &mut buf);
                dst.compute(part, &mut row, |out| f(p, vals, out));
            } else if let Some((src, base, out)) = dst.apart_from(part, &s, sin) {
                f(p, source_row(src, &s, base, sdt, &mut buf), out);
            } else {
                // Source and destination share bytes: the source read out first.
                buf.clear();
                read_row(part, &s, sin, sdt, false, &mut buf);
                dst.compute(part, &mut row, |out| f(p, &buf, out));
            }
        }
    });
    Ok(Some(s.len))
}

/// A two-source step (TENSOR_TENSOR) channel by channel: `f(first, second, out)` on channel
/// `p`'s rows of `a` and `b` (as f32; `a`'s the row step's source, `b` the second source
/// pattern and its type), `out` its destination row: [`map_rows`]' single pass for two
/// sources. A source in another memory than the destination is read where it lies (fp32
/// in one run) or converted; one in the destination's memory is read out of the channel's
/// partition before the destination row is written. `Err` where the sources' element counts
/// differ; None, nothing done, for rows shorter than one vector, or where a source in the
/// destination's memory lies in other partitions or the destination does not hold the
/// sources' count per channel.
pub(super) fn zip_rows(
    mem: &mut CoreMem,
    op: &Rows,
    b: (&AccessPattern, Dtype),
    f: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> Result<Option<usize>, OpFault> {
    let channels = op.channels;
    // Rows shorter than one vector (a decode step's tensors) go faster whole, through the
    // patterns' short-row loops, than one step each (told before any span is built).
    if super::pattern::elem_count(op.src)? < super::pattern::SMALL_ROW as u64 {
        return Ok(None);
    }
    let sa = span(mem, op.src, op.sdt, channels)?;
    let sb = span(mem, b.0, b.1, channels)?;
    if sa.len != sb.len {
        return Err(OpFault::bad("TENSOR_TENSOR operand shapes differ"));
    }
    let d = span(mem, op.dst, op.ddt, channels)?;
    let space = d.space();
    let apart = |s: &Span| s.space() == space && s.first() != d.first();
    if d.len != sa.len || channels == 0 || apart(&sa) || apart(&sb) {
        return Ok(None);
    }
    let (lo, hi) = d.write_cols();
    let (shared, dbytes) = mem.across_cols(crate::core::other_space(space), lo, hi);
    let mut parts = d.partitions_mut(dbytes, channels);
    if parts.len() != channels {
        return Ok(None); // (span() checked the partitions: not reached)
    }
    let work = (channels as u64)
        .saturating_mul(sa.len as u64)
        .saturating_mul(op.weight);
    let dst = Dest {
        span: &d,
        base: d.base_in_partition(),
        dt: op.ddt,
        len: sa.len,
    };
    let rows = crate::fanout::rows_per_piece(channels, work);
    crate::fanout::for_each_mut(&mut parts, rows, work, |i, piece| {
        let (mut row, mut ba, mut bb) = (Vec::new(), Vec::new(), Vec::new());
        for (j, part) in piece.iter_mut().enumerate() {
            let p = i * rows + j;
            // A source in the destination's memory: copied out of the partition first.
            let read = |s: &Span, dt: Dtype, part: &[u8], buf: &mut Vec<f32>| {
                if s.space() == space {
                    buf.clear();
                    read_row(part, s, s.base_in_partition(), dt, false, buf);
                    true
                } else {
                    false
                }
            };
            let (own_a, own_b) = (
                read(&sa, op.sdt, part, &mut ba),
                read(&sb, b.1, part, &mut bb),
            );
            let va = if own_a {
                &ba[..]
            } else {
                source_row(shared, &sa, sa.row_base(p), op.sdt, &mut ba)
            };
            let vb = if own_b {
                &bb[..]
            } else {
                source_row(shared, &sb, sb.row_base(p), b.1, &mut bb)
            };
            dst.compute(part, &mut row, |out| f(va, vb, out));
        }
    });
    Ok(Some(sa.len))
}

/// A channel's source row as f32: where it lies (fp32 in one run), else converted into `buf`.
fn source_row<'a>(
    bytes: &'a [u8],
    s: &Span,
    base: i64,
    sdt: Dtype,
    buf: &'a mut Vec<f32>,
) -> &'a [f32] {
    match f32_row(bytes, s, base, sdt) {
        Some(vals) => vals,
        None => {
            buf.clear();
            read_row(bytes, s, base, sdt, false, buf);
            buf
        }
    }
}

/// Where [`map_rows`] writes a channel's results: `len` elements of `dt` at `span`, `base`
/// the byte of element offset 0 within the channel's partition.
struct Dest<'a> {
    span: &'a Span,
    base: i64,
    dt: Dtype,
    len: usize,
}

impl Dest<'_> {
    /// `fill(out)` with the channel's results, `out` the destination row itself where it is
    /// fp32 in one run, else `row` (scratch) then stored as the destination's type.
    fn compute(&self, part: &mut [u8], row: &mut Vec<f32>, fill: impl FnOnce(&mut [f32])) {
        if let Some(out) = f32_row_mut(part, self.span, self.base, self.dt) {
            return fill(out);
        }
        if row.len() < self.len {
            row.resize(self.len, 0.0);
        }
        let out = &mut row[..self.len];
        fill(out);
        write_row(part, self.span, self.base, self.dt, out);
    }

    /// The partition's bytes split into the source's side (with the source's `base` in it)
    /// and the destination row as fp32, where the destination is fp32 in one run, the source
    /// one run too, and their bytes do not meet; else None.
    fn apart_from<'p>(
        &self,
        part: &'p mut [u8],
        s: &Span,
        sbase: i64,
    ) -> Option<(&'p [u8], i64, &'p mut [f32])> {
        let (slo, shi) = s.run_bytes(sbase)?;
        let (dlo, dhi) = self.span.run_bytes(self.base)?;
        if !matches!(self.dt, Dtype::F32 | Dtype::F32r) {
            return None;
        }
        if dlo >= shi {
            let (src, rest) = part.split_at_mut(usize::try_from(dlo).ok()?);
            let out = f32_row_mut(rest, self.span, 0, self.dt)?;
            Some((src, sbase, out))
        } else if dhi <= slo {
            let cut = usize::try_from(dhi).ok()?;
            let (lead, src) = part.split_at_mut(cut);
            let out = f32_row_mut(lead, self.span, self.base, self.dt)?;
            Some((src, sbase - dhi, out))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pattern::first_partition;
    use super::*;
    use neuron_isa::Space;

    /// A channel-by-channel step ([`map_rows`]) leaves both memories exactly as reading the
    /// whole source, computing, then writing the whole destination does: across memories,
    /// within the same partitions (in place, with source and destination bytes overlapping,
    /// with the destination row after or before the source's: computed in place; an fp32
    /// destination off the 4-byte grid: computed aside), from a start partition above 0, on
    /// strided and descending patterns, converting bf16/f16/fp32, reducing to fewer elements, on one thread and shared out.
    /// Operands in the same memory but other partitions, and destinations of another size,
    /// are left to the caller (None, nothing written).
    #[test]
    fn row_steps_equal_whole_operand_steps() {
        let profile = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let ap = |addr: u32, step: [i16; 2], num: [u16; 2]| AccessPattern {
            addr,
            dims: 2,
            step: [step[0], step[1], 0, 0],
            num: [num[0], num[1], 1, 1],
        };
        let sb = |part: u32, off: u32| (part << 18) + off;
        let ps = |off: u32| crate::cayman_exec::PSUM_BIT_FOR_TESTS | off;
        // (what, src, sdt, dst, ddt, channels, groups of the reduction or 0, row step applies)
        type Case = (
            &'static str,
            AccessPattern,
            Dtype,
            AccessPattern,
            Dtype,
            usize,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                "psum to sbuf",
                ap(ps(0x800), [1, 0], [512, 1]),
                Dtype::F32,
                ap(sb(0, 0x4820), [1, 0], [512, 1]),
                Dtype::F32,
                128,
                0,
            ),
            (
                "sbuf to psum, bf16 to fp32",
                ap(sb(0, 0x100), [1, 0], [256, 1]),
                Dtype::Bf16,
                ap(ps(0x40), [1, 0], [256, 1]),
                Dtype::F32,
                128,
                0,
            ),
            (
                "in place",
                ap(sb(0, 0x2000), [1, 0], [300, 1]),
                Dtype::F32,
                ap(sb(0, 0x2000), [1, 0], [300, 1]),
                Dtype::F32,
                64,
                0,
            ),
            (
                "same partitions, the destination after the source",
                ap(sb(0, 0x100), [1, 0], [128, 1]),
                Dtype::F32,
                ap(sb(0, 0x1000), [1, 0], [128, 1]),
                Dtype::F32,
                128,
                0,
            ),
            (
                "same partitions, the destination before the source",
                ap(sb(0, 0x2000), [1, 0], [200, 1]),
                Dtype::Bf16,
                ap(sb(0, 0x100), [1, 0], [200, 1]),
                Dtype::F32,
                100,
                0,
            ),
            (
                "an fp32 destination off the 4-byte grid",
                ap(ps(0x40), [1, 0], [64, 1]),
                Dtype::F32,
                ap(sb(0, 0x302), [1, 0], [64, 1]),
                Dtype::F32,
                128,
                0,
            ),
            (
                "overlapping bytes, one partition each",
                ap(sb(0, 0x100), [1, 0], [64, 1]),
                Dtype::Bf16,
                ap(sb(0, 0x120), [1, 0], [64, 1]),
                Dtype::F32,
                128,
                0,
            ),
            (
                "from partition 32, strided and descending",
                ap(sb(32, 0x1000), [2, 64], [32, 3]),
                Dtype::F32,
                ap(sb(32, 0x3000), [-1, 0], [96, 1]),
                Dtype::F16,
                96,
                0,
            ),
            (
                "reduction to groups",
                ap(ps(0), [1, 16], [16, 8]),
                Dtype::F32,
                ap(sb(0, 0x10), [1, 0], [8, 1]),
                Dtype::Bf16,
                128,
                8,
            ),
            (
                "other partitions of one memory",
                ap(sb(0, 0x100), [1, 0], [64, 1]),
                Dtype::F32,
                ap(sb(4, 0x100), [1, 0], [64, 1]),
                Dtype::F32,
                64,
                0,
            ),
            (
                "a destination of another size",
                ap(ps(0), [1, 0], [64, 1]),
                Dtype::F32,
                ap(sb(0, 0x100), [1, 0], [32, 1]),
                Dtype::F32,
                64,
                0,
            ),
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut fill = |m: &mut CoreMem| {
            for space in [Space::Sbuf, Space::Psum] {
                let stride = if space == Space::Sbuf {
                    m.sbuf_stride
                } else {
                    m.psum_stride
                };
                let bytes = m.bytes_mut(space);
                for p in 0..128 {
                    // The first 16 KiB of each partition, as finite values of either width.
                    for w in bytes[p * stride..p * stride + 0x4000].chunks_exact_mut(4) {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let v = ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0;
                        let h = half::bf16::from_f32(v).to_bits();
                        let bits = if seed & 1 == 0 {
                            v.to_bits()
                        } else {
                            (h as u32) << 16 | h as u32
                        };
                        w.copy_from_slice(&bits.to_le_bytes());
                    }
                }
            }
        };
        for (what, src, sdt, dst, ddt, ch, groups) in cases {
            for shared in [false, true] {
                let mut whole = CoreMem::new(&profile);
                fill(&mut whole);
                let mut rows = CoreMem::new(&profile);
                rows.f32s_mut(Space::Sbuf)
                    .copy_from_slice(whole.f32s(Space::Sbuf));
                rows.f32s_mut(Space::Psum)
                    .copy_from_slice(whole.f32s(Space::Psum));
                // The step: a per-channel affine map, or the groups' sums.
                let inner = if groups > 0 { src.num[0] as usize } else { 1 };
                let step = |p: usize, src: &[f32], out: &mut [f32]| {
                    if groups > 0 {
                        for (g, o) in out.iter_mut().enumerate() {
                            *o = src[g * inner..(g + 1) * inner].iter().sum();
                        }
                    } else {
                        for (o, v) in out.iter_mut().zip(src) {
                            *o = *v * 1.5 + p as f32;
                        }
                    }
                };
                let out_len = (groups > 0).then_some(groups);
                // Shared out: a weight that makes any step large.
                let weight = if shared { 1 << 30 } else { 1 };
                let op = Rows {
                    src: &src,
                    sdt,
                    dst: &dst,
                    ddt,
                    channels: ch,
                    out_len,
                    weight,
                };
                let got = crate::fanout::with(shared, || map_rows(&mut rows, &op, step))
                    .expect("in bounds");
                let mut a = Vec::new();
                let n = gather(&whole, &src, sdt, ch, &mut a).expect("in bounds");
                let mut vals = Vec::new();
                for (p, r) in a.chunks(n).enumerate() {
                    let mut row = vec![0.0; out_len.unwrap_or(n)];
                    step(p, r, &mut row);
                    vals.extend(row);
                }
                let fits =
                    span(&whole, &dst, ddt, ch).expect("in bounds").len == out_len.unwrap_or(n);
                let apart =
                    src.space() == dst.space() && first_partition(&src) != first_partition(&dst);
                if apart || !fits {
                    assert_eq!(got, None, "{what}: done row by row");
                    assert!(
                        rows.bytes(Space::Sbuf) == whole.bytes(Space::Sbuf)
                            && rows.bytes(Space::Psum) == whole.bytes(Space::Psum),
                        "{what}: written"
                    );
                    continue;
                }
                assert_eq!(got, Some(n), "{what}: not done row by row");
                scatter(&mut whole, &dst, ddt, ch, &vals).expect("in bounds");
                assert!(
                    rows.bytes(Space::Sbuf) == whole.bytes(Space::Sbuf),
                    "{what} (shared: {shared}): SBUF differs"
                );
                assert!(
                    rows.bytes(Space::Psum) == whole.bytes(Space::Psum),
                    "{what} (shared: {shared}): PSUM differs"
                );
            }
        }
    }

    /// A two-source step row by row ([`zip_rows`]) leaves both memories as gathering both
    /// sources, combining them and scattering the result does: sources in the other memory
    /// and in the destination's (one of them the destination itself), bf16 and fp32 sources
    /// and destinations, from a start partition above 0, on one thread and shared out.
    /// Rows shorter than a vector, a source in other partitions of the destination's memory,
    /// or a destination of another size, are left to the caller (None, nothing written);
    /// sources of different sizes are an error.
    #[test]
    fn two_source_rows_equal_whole_operand_steps() {
        let profile = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let ap = |addr: u32, num: u16| super::super::pattern::tests::ap(addr, 1, num);
        let sb = |part: u32, off: u32| (part << 18) + off;
        let ps = |off: u32| crate::cayman_exec::PSUM_BIT_FOR_TESTS | off;
        let (f32_, bf16) = (Dtype::F32, Dtype::Bf16);
        // (what, first source, second source, destination, channels, done row by row)
        type Case = (
            &'static str,
            (AccessPattern, Dtype),
            (AccessPattern, Dtype),
            (AccessPattern, Dtype),
            usize,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "psum + sbuf to sbuf",
                (ap(ps(0x40), 300), f32_),
                (ap(sb(0, 0x800), 300), f32_),
                (ap(sb(0, 0x2000), 300), f32_),
                128,
                true,
            ),
            (
                "in place over the second source",
                (ap(ps(0x40), 200), f32_),
                (ap(sb(0, 0x800), 200), f32_),
                (ap(sb(0, 0x800), 200), f32_),
                128,
                true,
            ),
            (
                "bf16 sources in sbuf to psum, from partition 32",
                (ap(sb(32, 0x100), 96), bf16),
                (ap(sb(32, 0x600), 96), bf16),
                (ap(ps(0x20), 96), f32_),
                64,
                true,
            ),
            (
                "fp32 sources to a bf16 destination over the first",
                (ap(sb(0, 0x1000), 50), f32_),
                (ap(ps(0x100), 50), f32_),
                (ap(sb(0, 0x1000), 50), bf16),
                100,
                true,
            ),
            (
                "a source in other partitions of the destination's memory",
                (ap(ps(0x40), 64), f32_),
                (ap(sb(4, 0x800), 64), f32_),
                (ap(sb(0, 0x2000), 64), f32_),
                64,
                false,
            ),
            (
                "a destination of another size",
                (ap(ps(0x40), 64), f32_),
                (ap(sb(0, 0x800), 64), f32_),
                (ap(sb(0, 0x2000), 32), f32_),
                64,
                false,
            ),
            (
                "rows shorter than a vector",
                (ap(ps(0x40), 8), f32_),
                (ap(sb(0, 0x800), 8), f32_),
                (ap(sb(0, 0x2000), 8), f32_),
                128,
                false,
            ),
        ];
        let fill = |m: &mut CoreMem| {
            for sp in [Space::Sbuf, Space::Psum] {
                for (i, w) in m.f32s_mut(sp).iter_mut().enumerate().take(130 << 16) {
                    *w = ((i * 7919) % 1013) as f32 * 0.125 - 60.0;
                }
            }
        };
        let step = |x: &[f32], y: &[f32], out: &mut [f32]| {
            for ((o, a), b) in out.iter_mut().zip(x).zip(y) {
                *o = *a * 0.75 - *b;
            }
        };
        for (what, (a, adt), (b, bdt), (d, ddt), ch, by_rows) in cases {
            for shared in [false, true] {
                let mut whole = CoreMem::new(&profile);
                fill(&mut whole);
                let mut rows = CoreMem::new(&profile);
                fill(&mut rows);
                let op = Rows {
                    src: &a,
                    sdt: adt,
                    dst: &d,
                    ddt,
                    channels: ch,
                    out_len: None,
                    weight: if shared { 1 << 30 } else { 1 },
                };
                let got = crate::fanout::with(shared, || zip_rows(&mut rows, &op, (&b, bdt), step))
                    .expect("in bounds");
                if !by_rows {
                    assert_eq!(got, None, "{what}");
                    assert!(
                        rows.bytes(Space::Sbuf) == whole.bytes(Space::Sbuf)
                            && rows.bytes(Space::Psum) == whole.bytes(Space::Psum),
                        "{what}: written"
                    );
                    continue;
                }
                let (mut x, mut y) = (Vec::new(), Vec::new());
                let n = gather(&whole, &a, adt, ch, &mut x).expect("in bounds");
                gather(&whole, &b, bdt, ch, &mut y).expect("in bounds");
                assert_eq!(got, Some(n), "{what}");
                let mut out = vec![0.0; x.len()];
                step(&x, &y, &mut out);
                scatter(&mut whole, &d, ddt, ch, &out).expect("in bounds");
                assert!(
                    rows.bytes(Space::Sbuf) == whole.bytes(Space::Sbuf),
                    "{what} (shared: {shared}): SBUF differs"
                );
                assert!(
                    rows.bytes(Space::Psum) == whole.bytes(Space::Psum),
                    "{what} (shared: {shared}): PSUM differs"
                );
            }
        }
        let mut m = CoreMem::new(&profile);
        let (a, b, d) = (ap(ps(0), 64), ap(0x100, 32), ap(0x400, 64));
        let op = Rows {
            src: &a,
            sdt: f32_,
            dst: &d,
            ddt: f32_,
            channels: 8,
            out_len: None,
            weight: 1,
        };
        let e = zip_rows(&mut m, &op, (&b, f32_), step).expect_err("sizes differ");
        assert!(e.detail.contains("shapes differ"), "{}", e.detail);
    }

    /// Where a word cannot go row by row, [`elementwise`] does it whole: the values are
    /// those of gathering, computing each partition's row, and scattering (a destination in
    /// other partitions of the same memory, one of another size), and the error of a
    /// destination too large for the results is the whole-operand form's.
    #[test]
    fn refused_layouts_are_done_whole() {
        let profile = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let ap = |addr: u32, num: u16| super::super::pattern::tests::ap(addr, 1, num);
        let psum = crate::cayman_exec::PSUM_BIT_FOR_TESTS;
        let step = |p: usize, src: &[f32], out: &mut [f32]| {
            for (o, v) in out.iter_mut().zip(src) {
                *o = *v * 0.5 - p as f32;
            }
        };
        fn rows<'a>(
            src: &'a AccessPattern,
            dst: &'a AccessPattern,
            channels: usize,
            weight: u64,
        ) -> Rows<'a> {
            Rows {
                src,
                sdt: Dtype::F32,
                dst,
                ddt: Dtype::F32,
                channels,
                out_len: None,
                weight,
            }
        }
        // Partitions 0..64 into 4..68 of SBUF (a channel's write lands on a later channel's
        // source), and 64 PSUM elements into 32 SBUF ones per partition.
        for (src, dst) in [
            (ap(0x100, 64), ap((4 << 18) + 0x100, 64)),
            (ap(psum, 64), ap(0x100, 32)),
        ] {
            let mut whole = CoreMem::new(&profile);
            for sp in [Space::Sbuf, Space::Psum] {
                for (i, w) in whole.f32s_mut(sp).iter_mut().enumerate().take(70 << 16) {
                    *w = (i % 977) as f32 * 0.25;
                }
            }
            let mut done = CoreMem::new(&profile);
            done.f32s_mut(Space::Sbuf)
                .copy_from_slice(whole.f32s(Space::Sbuf));
            done.f32s_mut(Space::Psum)
                .copy_from_slice(whole.f32s(Space::Psum));
            let mut a = Vec::new();
            let n = elementwise(&mut done, &rows(&src, &dst, 64, 1 << 30), &mut a, step)
                .expect("in bounds");
            let mut vals = Vec::new();
            assert_eq!(gather(&whole, &src, Dtype::F32, 64, &mut vals), Ok(n));
            for (p, r) in vals.chunks_mut(n).enumerate() {
                let src = r.to_vec();
                step(p, &src, r);
            }
            scatter(&mut whole, &dst, Dtype::F32, 64, &vals).expect("in bounds");
            assert!(
                done.bytes(Space::Sbuf) == whole.bytes(Space::Sbuf),
                "{dst:?}"
            );
            assert!(
                done.bytes(Space::Psum) == whole.bytes(Space::Psum),
                "{dst:?}"
            );
        }
        // Results too few for the destination: refused as the whole-operand form refuses.
        let mut m = CoreMem::new(&profile);
        let mut a = Vec::new();
        let (src, dst) = (ap(0x100, 16), ap((4 << 18) + 0x100, 32));
        let e =
            elementwise(&mut m, &rows(&src, &dst, 8, 1), &mut a, step).expect_err("too few values");
        assert!(e.detail.contains("shape mismatch"), "{}", e.detail);
    }
}
