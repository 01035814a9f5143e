//! Elementwise words (ACTIVATE, TENSOR_REDUCE, TENSOR_SCALAR, converting copies) as one
//! step per partition: a partition's source row is read, computed and written at once, so a
//! data-path helper that takes some partitions takes their whole pass (`fanout`), not just
//! the arithmetic between a serial gather and scatter (`docs/performance.md`, 2026-12-05).

use super::pattern::{f32_row, gather, read_row, scatter, span, write_row};
use super::OpFault;
use crate::core::CoreMem;
use neuron_isa::cayman::AccessPattern;
use neuron_isa::Dtype;

/// What one element of a step counts as, in multiply-adds, when deciding to share it out: a
/// 128-partition step of 512 elements per partition gains from a helper (COPY, TENSOR_REDUCE
/// on a 2-CPU VM, `docs/performance.md`); ACTIVATE counts its function evaluation on top.
pub(super) const ELEMENTWISE_WEIGHT: u64 = 32;

/// `f(p, row)` on each of `channels` partitions' source rows, the results written to `dst`:
/// row by row where [`map_rows`] can; elsewhere the whole source gathered into `a`, each
/// row computed, the rows' results written together (the same values either way). Returns
/// the source's elements per partition.
#[allow(clippy::too_many_arguments)]
pub(super) fn elementwise(
    mem: &mut CoreMem,
    src: &AccessPattern,
    sdt: Dtype,
    dst: &AccessPattern,
    ddt: Dtype,
    channels: usize,
    out_len: Option<usize>,
    weight: u64,
    a: &mut Vec<f32>,
    f: impl Fn(usize, &mut Vec<f32>) + Sync,
) -> Result<usize, OpFault> {
    let rows = Rows {
        src,
        sdt,
        dst,
        ddt,
        channels,
        out_len,
        weight,
    };
    if let Some(n) = map_rows(mem, &rows, &f)? {
        return Ok(n);
    }
    let n = gather(mem, src, sdt, channels, a)?;
    let (mut out, mut row) = (Vec::with_capacity(a.len()), Vec::with_capacity(n));
    for (p, r) in a.chunks(n.max(1)).take(channels).enumerate() {
        row.clear();
        row.extend_from_slice(r);
        f(p, &mut row);
        out.extend_from_slice(&row);
    }
    scatter(mem, dst, ddt, channels, &out)?;
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

/// An elementwise step channel by channel: channel `p`'s source elements are read as f32
/// into a row, `f(p, row)` turns them into the destination's elements (`out_len` of them,
/// e.g. a reduction's groups; None: as many as the source's), and they are stored at once:
/// one pass over the operands, with the row in cache, where gathering and scattering whole
/// operands makes three; large steps (`weight` element operations per source element) are
/// shared out by channels (`fanout`). Returns the source's elements per channel. The same as
/// `gather`, the computation, then `scatter` wherever no channel's destination shares
/// bytes with another channel's source: the operands lie in different memories, or in the
/// same partitions. Elsewhere (or where the destination does not hold `out_len` elements
/// per channel) nothing is done and None returned, for the caller to do it whole.
pub(super) fn map_rows(
    mem: &mut CoreMem,
    op: &Rows,
    f: impl Fn(usize, &mut Vec<f32>) + Sync,
) -> Result<Option<usize>, OpFault> {
    let step = |p: usize, src: Source, _: &mut Vec<f32>, row: &mut Vec<f32>| {
        read_row(src.bytes, src.span, src.base, op.sdt, false, row);
        f(p, row);
    };
    rows_with(mem, op, step)
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

/// [`map_rows`] for a step that only reads its source row: `f(p, source, out)` fills `out`
/// from channel `p`'s source elements, which an fp32 row in one run hands over where it lies
/// (no copy; other rows are converted into a buffer first).
pub(super) fn map_rows_from(
    mem: &mut CoreMem,
    op: &Rows,
    f: impl Fn(usize, &[f32], &mut Vec<f32>) + Sync,
) -> Result<Option<usize>, OpFault> {
    let sdt = op.sdt;
    let step = |p: usize, src: Source, buf: &mut Vec<f32>, row: &mut Vec<f32>| match f32_row(
        src.bytes, src.span, src.base, sdt,
    ) {
        Some(vals) => f(p, vals, row),
        None => {
            buf.clear();
            read_row(src.bytes, src.span, src.base, sdt, false, buf);
            f(p, buf, row);
        }
    };
    rows_with(mem, op, step)
}

/// Where a channel's source row lies: `base` is the byte in `bytes` of its element offset 0.
#[derive(Clone, Copy)]
struct Source<'a> {
    bytes: &'a [u8],
    span: &'a super::pattern::Span,
    base: i64,
}

/// The walk [`map_rows`] and [`map_rows_from`] share: `step(p, source, buffer, row)` leaves
/// channel `p`'s destination elements in `row` (empty on entry; `buffer` is scratch).
fn rows_with(
    mem: &mut CoreMem,
    op: &Rows,
    step: impl Fn(usize, Source, &mut Vec<f32>, &mut Vec<f32>) + Sync,
) -> Result<Option<usize>, OpFault> {
    let (channels, ddt) = (op.channels, op.ddt);
    let s = span(mem, op.src, op.sdt, channels)?;
    let d = span(mem, op.dst, ddt, channels)?;
    let out_len = op.out_len.unwrap_or(s.len);
    let work = (channels as u64)
        .saturating_mul(s.len as u64)
        .saturating_mul(op.weight);
    let same = s.space() == d.space();
    if d.len != out_len || channels == 0 || (same && s.first() != d.first()) {
        return Ok(None);
    }
    let (shared, dbytes): (&[u8], &mut [u8]) = if same {
        (&[], mem.bytes_mut(d.space()))
    } else {
        mem.across(s.space())
    };
    // The destination's partitions, one slice each; a channel's source lies in its slice
    // (same memory) or in `shared`.
    let mut parts = d.partitions_mut(dbytes, channels);
    if parts.len() != channels {
        return Ok(None); // (span() checked the partitions: not reached)
    }
    let (sin, din) = (s.base_in_partition(), d.base_in_partition());
    let rows = crate::fanout::rows_per_piece(channels, work);
    crate::fanout::for_each_mut(&mut parts, rows, work, |i, piece| {
        let mut row = Vec::with_capacity(s.len.max(out_len));
        let mut buf = Vec::new();
        for (j, part) in piece.iter_mut().enumerate() {
            let p = i * rows + j;
            row.clear();
            let source = if same {
                Source {
                    bytes: part,
                    span: &s,
                    base: sin,
                }
            } else {
                Source {
                    bytes: shared,
                    span: &s,
                    base: s.row_base(p),
                }
            };
            step(p, source, &mut buf, &mut row);
            debug_assert!(row.len() >= out_len, "a row step left too few values");
            if let Some(vals) = row.get(..out_len) {
                write_row(part, &d, din, ddt, vals);
            }
        }
    });
    Ok(Some(s.len))
}

#[cfg(test)]
mod tests {
    use super::super::pattern::first_partition;
    use super::*;
    use neuron_isa::Space;

    /// A channel-by-channel step ([`map_rows`]) leaves both memories exactly as reading the
    /// whole source, computing, then writing the whole destination does: across memories,
    /// within the same partitions (in place, and with source and destination bytes
    /// overlapping), from a start partition above 0, on strided and descending patterns,
    /// converting bf16/f16/fp32, reducing to fewer elements, on one thread and shared out.
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
                let step = |p: usize, row: &mut Vec<f32>| {
                    if groups > 0 {
                        for g in 0..groups {
                            row[g] = row[g * inner..(g + 1) * inner].iter().sum();
                        }
                        row.truncate(groups);
                    } else {
                        row.iter_mut().for_each(|v| *v = *v * 1.5 + p as f32);
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
                // The same step handed its source row (where it lies, or converted): the
                // same memories and answer as `map_rows`.
                let mut from = CoreMem::new(&profile);
                from.f32s_mut(Space::Sbuf)
                    .copy_from_slice(whole.f32s(Space::Sbuf));
                from.f32s_mut(Space::Psum)
                    .copy_from_slice(whole.f32s(Space::Psum));
                let read = |p: usize, src: &[f32], out: &mut Vec<f32>| {
                    out.extend_from_slice(src);
                    step(p, out);
                };
                let got_from = crate::fanout::with(shared, || map_rows_from(&mut from, &op, read))
                    .expect("in bounds");
                assert_eq!(got_from, got, "{what}: map_rows_from");
                assert!(
                    from.bytes(Space::Sbuf) == rows.bytes(Space::Sbuf)
                        && from.bytes(Space::Psum) == rows.bytes(Space::Psum),
                    "{what} (shared: {shared}): map_rows_from wrote otherwise"
                );
                let mut a = Vec::new();
                let n = gather(&whole, &src, sdt, ch, &mut a).expect("in bounds");
                let mut vals = Vec::new();
                for (p, r) in a.chunks(n).enumerate() {
                    let mut row = r.to_vec();
                    step(p, &mut row);
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

    /// Where a word cannot go row by row, [`elementwise`] does it whole: the values are
    /// those of gathering, computing each partition's row, and scattering (a destination in
    /// other partitions of the same memory, one of another size), and the error of a
    /// destination too large for the results is the whole-operand form's.
    #[test]
    fn refused_layouts_are_done_whole() {
        let profile = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
        let ap = |addr: u32, num: u16| super::super::pattern::tests::ap(addr, 1, num);
        let psum = crate::cayman_exec::PSUM_BIT_FOR_TESTS;
        let step = |p: usize, row: &mut Vec<f32>| {
            row.iter_mut().for_each(|v| *v = *v * 0.5 - p as f32);
        };
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
            let n = elementwise(
                &mut done,
                &src,
                Dtype::F32,
                &dst,
                Dtype::F32,
                64,
                None,
                1 << 30,
                &mut a,
                step,
            )
            .expect("in bounds");
            let mut vals = Vec::new();
            assert_eq!(gather(&whole, &src, Dtype::F32, 64, &mut vals), Ok(n));
            for (p, r) in vals.chunks_mut(n).enumerate() {
                let mut row = r.to_vec();
                step(p, &mut row);
                r.copy_from_slice(&row);
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
        let e = elementwise(
            &mut m,
            &ap(0x100, 16),
            Dtype::F32,
            &ap((4 << 18) + 0x100, 32),
            Dtype::F32,
            8,
            None,
            1,
            &mut a,
            step,
        )
        .expect_err("too few values");
        assert!(e.detail.contains("shape mismatch"), "{}", e.detail);
    }
}
