//! The arithmetic of the data path: ALU codes, elementwise and reducing loops, and the
//! identity test a transposing MATMUL uses (the transposes: `transpose`).
#![allow(unsafe_code)]

use super::{CaymanInstr, OpFault};
use crate::gemm::View;

/// ALU codes seen in the corpus (`docs/isa/cayman.md` §6): 0 BYPASS, 4 ADD, 6 MULTIPLY, 8 MAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Alu {
    Bypass,
    Add,
    Mul,
    Max,
}

impl Alu {
    pub(super) fn of(code: u64, ci: &CaymanInstr, field: &str) -> Result<Alu, OpFault> {
        Ok(match code {
            0 => Alu::Bypass,
            4 => Alu::Add,
            6 => Alu::Mul,
            8 => Alu::Max,
            _ => {
                return Err(OpFault::bad(format!(
                    "{}: ALU code {code} in '{field}' not known",
                    ci.opcode.name()
                )))
            }
        })
    }
}

/// One ALU operation as a type, so a loop over a row is compiled for a fixed pair of them
/// (each combination its own vectorised loop; see [`scalar_pair`], [`zip_into`]).
trait Op {
    fn f(a: f32, b: f32) -> f32;
}

struct Bypass;
struct Add;
struct Mul;
struct Max;

impl Op for Bypass {
    #[inline(always)]
    fn f(a: f32, _: f32) -> f32 {
        a
    }
}
impl Op for Add {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        a + b
    }
}
impl Op for Mul {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        a * b
    }
}
impl Op for Max {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        a.max(b)
    }
}

/// Call `$body` with `$t` bound to the type of ALU operation `$op`.
macro_rules! with_op {
    ($op:expr, $t:ident, $body:expr) => {
        match $op {
            Alu::Bypass => {
                type $t = Bypass;
                $body
            }
            Alu::Add => {
                type $t = Add;
                $body
            }
            Alu::Mul => {
                type $t = Mul;
                $body
            }
            Alu::Max => {
                type $t = Max;
                $body
            }
        }
    };
}

/// `out[i] = B(A(src[i], s0), s1)`; destination elements past the source's get the two
/// operations on their own values (as the copy-then-operate form leaves them).
#[inline(always)]
fn scalar_pair_body<A: Op, B: Op>(s0: f32, s1: f32, src: &[f32], out: &mut [f32]) {
    let n = src.len().min(out.len());
    let (head, tail) = out.split_at_mut(n);
    for (o, x) in head.iter_mut().zip(src) {
        *o = B::f(A::f(*x, s0), s1);
    }
    for o in tail {
        *o = B::f(A::f(*o, s0), s1);
    }
}

#[inline(always)]
fn scalar_pair_ops(op0: Alu, s0: f32, op1: Alu, s1: f32, src: &[f32], out: &mut [f32]) {
    with_op!(
        op0,
        A,
        with_op!(op1, B, scalar_pair_body::<A, B>(s0, s1, src, out))
    )
}

/// TENSOR_SCALAR's row: `out[i] = op1(op0(src[i], s0), s1)` in one pass, each element's two
/// IEEE operations in that order, so the bits of copying the row and applying
/// [`alu_scalar`] twice. Compiled for AVX-512F and for AVX2 (chosen at run time, as
/// `act::simd`; the baseline target's loop was 4-wide SSE).
pub(super) fn scalar_pair(op0: Alu, s0: f32, op1: Alu, s1: f32, src: &[f32], out: &mut [f32]) {
    match super::act::simd() {
        // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
        #[cfg(target_arch = "x86_64")]
        super::act::Simd::Avx512 => unsafe { scalar_pair_avx512(op0, s0, op1, s1, src, out) },
        // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
        #[cfg(target_arch = "x86_64")]
        super::act::Simd::Avx2 => unsafe { scalar_pair_avx2(op0, s0, op1, s1, src, out) },
        _ => scalar_pair_ops(op0, s0, op1, s1, src, out),
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scalar_pair_avx512(op0: Alu, s0: f32, op1: Alu, s1: f32, src: &[f32], out: &mut [f32]) {
    scalar_pair_ops(op0, s0, op1, s1, src, out)
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scalar_pair_avx2(op0: Alu, s0: f32, op1: Alu, s1: f32, src: &[f32], out: &mut [f32]) {
    scalar_pair_ops(op0, s0, op1, s1, src, out)
}

/// `out[i] = A(x[i], y[i])` over the elements all three hold.
#[inline(always)]
fn zip_body<A: Op>(x: &[f32], y: &[f32], out: &mut [f32]) {
    for ((o, a), b) in out.iter_mut().zip(x).zip(y) {
        *o = A::f(*a, *b);
    }
}

#[inline(always)]
fn zip_ops(op: Alu, x: &[f32], y: &[f32], out: &mut [f32]) {
    with_op!(op, A, zip_body::<A>(x, y, out))
}

/// One element of [`alu_zip`].
fn alu_one(op: Alu, a: f32, b: f32) -> f32 {
    with_op!(op, A, A::f(a, b))
}

/// TENSOR_TENSOR's row: `out[i] = op(x[i], y[i])` in one pass, the bits of copying `x`
/// into `out` and applying [`alu_zip`] with `y` (where the lengths differ, too: `x`'s
/// elements past `y`'s copied, `out`'s past `x`'s combined with `y` as they are). Compiled
/// for AVX-512F and AVX2 where the CPU has them (chosen at run time).
pub(super) fn zip_into(op: Alu, x: &[f32], y: &[f32], out: &mut [f32]) {
    let n = x.len().min(out.len());
    let m = n.min(y.len());
    {
        let (x, y, head) = (&x[..m], &y[..m], &mut out[..m]);
        match super::act::simd() {
            // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            super::act::Simd::Avx512 => unsafe { zip_avx512(op, x, y, head) },
            // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            super::act::Simd::Avx2 => unsafe { zip_avx2(op, x, y, head) },
            _ => zip_ops(op, x, y, head),
        }
    }
    out[m..n].copy_from_slice(&x[m..n]);
    let e = out.len().min(y.len());
    for i in n..e {
        out[i] = alu_one(op, out[i], y[i]);
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn zip_avx512(op: Alu, x: &[f32], y: &[f32], out: &mut [f32]) {
    zip_ops(op, x, y, out)
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn zip_avx2(op: Alu, x: &[f32], y: &[f32], out: &mut [f32]) {
    zip_ops(op, x, y, out)
}

/// `x[i] = op(x[i], y[i])`. One loop per operation so each vectorises.
pub(super) fn alu_zip(op: Alu, x: &mut [f32], y: &[f32]) {
    let it = x.iter_mut().zip(y);
    match op {
        Alu::Bypass => {}
        Alu::Add => it.for_each(|(a, b)| *a += *b),
        Alu::Mul => it.for_each(|(a, b)| *a *= *b),
        Alu::Max => it.for_each(|(a, b)| *a = a.max(*b)),
    }
}

/// `x[i] = op(x[i], s)`: the definition [`scalar_pair`] is tested against.
#[cfg(test)]
pub(super) fn alu_scalar(op: Alu, x: &mut [f32], s: f32) {
    match op {
        Alu::Bypass => {}
        Alu::Add => x.iter_mut().for_each(|a| *a += s),
        Alu::Mul => x.iter_mut().for_each(|a| *a *= s),
        Alu::Max => x.iter_mut().for_each(|a| *a = a.max(s)),
    }
}

/// Reduce a non-empty row. Sums run in eight interleaved partial sums (combined pairwise):
/// the hardware's summation order is not documented, and this order vectorises.
pub(super) fn alu_reduce(op: Alu, row: &[f32]) -> f32 {
    match op {
        Alu::Bypass => row[0],
        // The lanes' answer is the fold's whenever the maximum is unique in bits: no NaN
        // (which `f32::max` skips) and not zero (whose sign a tie of ±0 decides).
        Alu::Max => {
            let fold = || {
                row.split_first().map_or(f32::NEG_INFINITY, |(x, rest)| {
                    rest.iter().fold(*x, |a, b| a.max(*b))
                })
            };
            // A row shorter than a vector (a reduction's groups of one to a few elements) is
            // folded: setting up and combining the lanes would cost more than it saves.
            if row.len() < 16 {
                fold()
            } else {
                max_lanes(row).unwrap_or_else(fold)
            }
        }
        Alu::Add | Alu::Mul => {
            let unit = if op == Alu::Add { 0.0 } else { 1.0 };
            let mut lanes = [unit; 8];
            let chunks = row.chunks_exact(8);
            let tail = chunks.remainder();
            for c in chunks {
                for (l, v) in lanes.iter_mut().zip(c) {
                    *l = if op == Alu::Add { *l + *v } else { *l * *v };
                }
            }
            for (l, v) in lanes.iter_mut().zip(tail) {
                *l = if op == Alu::Add { *l + *v } else { *l * *v };
            }
            let f = |a: f32, b: f32| if op == Alu::Add { a + b } else { a * b };
            let q = [
                f(lanes[0], lanes[4]),
                f(lanes[1], lanes[5]),
                f(lanes[2], lanes[6]),
                f(lanes[3], lanes[7]),
            ];
            f(f(q[0], q[2]), f(q[1], q[3]))
        }
    }
}

/// The maximum of `row` in sixteen lanes, or `None` where the row holds a NaN or the maximum
/// is ±0 (the one-lane fold decides those). A fold of `f32::max` is a chain of dependent
/// compares, four cycles each; lanes run it at the width the host has.
fn max_lanes(row: &[f32]) -> Option<f32> {
    match super::act::simd() {
        // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
        #[cfg(target_arch = "x86_64")]
        super::act::Simd::Avx512 => unsafe { max_lanes_avx512(row) },
        // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
        #[cfg(target_arch = "x86_64")]
        super::act::Simd::Avx2 => unsafe { max_lanes_avx2(row) },
        _ => max_lanes_body(row),
    }
}

/// [`max_lanes_body`] compiled for AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_lanes_avx2(row: &[f32]) -> Option<f32> {
    max_lanes_body(row)
}

/// [`max_lanes_body`] compiled for AVX-512F.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_lanes_avx512(row: &[f32]) -> Option<f32> {
    max_lanes_body(row)
}

#[inline(always)]
fn max_lanes_body(row: &[f32]) -> Option<f32> {
    // 64 lanes: four vectors' worth, so four chains of compares run at once (one chain, a
    // compare and a select per 16 elements, left a row latency-bound). Any order finds the
    // same maximum where it is unique in bits (the only case returned).
    const LANES: usize = 64;
    // `v > l` is false for a NaN `v`, so NaNs leave the lanes alone; `odd` records them.
    let pick = |l: f32, v: f32| if v > l { v } else { l };
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut odd = [0u32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            lanes[i] = pick(lanes[i], c[i]);
            odd[i] |= c[i].is_nan() as u32;
        }
    }
    for (i, v) in tail.iter().enumerate() {
        lanes[i] = pick(lanes[i], *v);
        odd[i] |= v.is_nan() as u32;
    }
    // Halved lane-wise down to 8 lanes (whole vectors), then folded: a fold of all 64 is a
    // chain of 64 dependent compares per row.
    let mut width = LANES;
    while width > 8 {
        width /= 2;
        let (lo, hi) = lanes.split_at_mut(width);
        for (l, h) in lo.iter_mut().zip(&hi[..width]) {
            *l = pick(*l, *h);
        }
    }
    let m = lanes[..8]
        .iter()
        .fold(f32::NEG_INFINITY, |a, v| pick(a, *v));
    (odd.iter().fold(0, |a, o| a | o) == 0 && m != 0.0).then_some(m)
}

/// Whether the `n x n` matrix at `view` in `m` is the identity (a transpose's moving tensor).
pub(super) fn is_identity(m: &[f32], view: View, n: usize) -> bool {
    // ±0 has no bits outside the sign: OR-ing the rest of each row's bits is one pass that
    // vectorizes (an early-exit `all` does not), and a transpose's identity is the common case.
    let zeros = |xs: &[f32]| xs.iter().fold(0u32, |acc, v| acc | (v.to_bits() << 1)) == 0;
    (0..n).all(|i| {
        let at = view.off + i * view.rs;
        if view.cs == 1 {
            m.get(at..at + n)
                .is_some_and(|row| row[i] == 1.0 && zeros(&row[..i]) && zeros(&row[i + 1..]))
        } else {
            (0..n).all(|c| {
                m.get(at + c * view.cs)
                    .is_some_and(|v| *v == if i == c { 1.0 } else { 0.0 })
            })
        }
    })
}

/// Whether `row`, `n` little-endian 16-bit float values (bf16 or fp16: `one` is 1.0's bits),
/// is row `i` of the `n x n` identity: 1.0 at `i`, ±0 elsewhere (what [`is_identity`]
/// accepts, on the 16-bit values).
pub(super) fn identity_row16(row: &[u8], i: usize, one: u16) -> bool {
    // As in `is_identity`: OR-ing the bits of each side but the sign is one pass.
    let zeros = |b: &[u8]| {
        b.chunks_exact(2)
            .fold(0u16, |acc, c| acc | (u16::from_le_bytes([c[0], c[1]]) << 1))
            == 0
    };
    row.get(2 * i..2 * i + 2) == Some(&one.to_le_bytes()[..])
        && zeros(&row[..2 * i])
        && zeros(&row[2 * i + 2..])
}

/// The high part of an fp32 value as the two-pass fp32 matmul splits it (a bf16 truncation;
/// only `hi + lo == w` matters for the sum of the two passes).
pub(super) fn hi_part(w: f32) -> f32 {
    f32::from_bits(w.to_bits() & 0xFFFF_0000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that tell operation orders and vector paths apart: NaNs, ±0, infinities,
    /// subnormals, ordinary values.
    fn tricky(n: usize, seed: u32) -> Vec<f32> {
        let specials = [
            f32::NAN,
            -0.0,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            -3.5,
        ];
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                if i % 7 == 3 {
                    specials[(s >> 8) as usize % specials.len()]
                } else {
                    ((s >> 9) as f32 / (1 << 23) as f32 - 0.5) * 1e3
                }
            })
            .collect()
    }

    const OPS: [Alu; 4] = [Alu::Bypass, Alu::Add, Alu::Mul, Alu::Max];

    type ScalarLoop = fn(Alu, f32, Alu, f32, &[f32], &mut [f32]);
    type ZipLoop = fn(Alu, &[f32], &[f32], &mut [f32]);

    /// The scalar-pair loops this host can run: the dispatcher, the portable loop, and each
    /// compiled one whose features the CPU has (the others reported as skipped).
    fn scalar_pair_loops() -> Vec<(&'static str, ScalarLoop)> {
        let mut v: Vec<(&'static str, ScalarLoop)> =
            vec![("dispatch", scalar_pair), ("portable", scalar_pair_ops)];
        #[cfg(target_arch = "x86_64")]
        for (name, has, f) in [
            (
                "avx2",
                std::is_x86_feature_detected!("avx2"),
                // SAFETY: pushed (and so called) only where the CPU has AVX2.
                (|a, b, c, d, e, f| unsafe { scalar_pair_avx2(a, b, c, d, e, f) }) as ScalarLoop,
            ),
            (
                "avx512",
                std::is_x86_feature_detected!("avx512f"),
                // SAFETY: pushed (and so called) only where the CPU has AVX-512F.
                |a, b, c, d, e, f| unsafe { scalar_pair_avx512(a, b, c, d, e, f) },
            ),
        ] {
            if has {
                v.push((name, f));
            } else {
                eprintln!("SKIPPED the {name} loop: not on this host");
            }
        }
        v
    }

    /// [`scalar_pair_loops`] for the zipped rows.
    fn zip_loops() -> Vec<(&'static str, ZipLoop)> {
        let mut v: Vec<(&'static str, ZipLoop)> =
            vec![("dispatch", zip_into), ("portable", zip_ops)];
        #[cfg(target_arch = "x86_64")]
        for (name, has, f) in [
            (
                "avx2",
                std::is_x86_feature_detected!("avx2"),
                // SAFETY: pushed (and so called) only where the CPU has AVX2.
                (|a, b, c, d| unsafe { zip_avx2(a, b, c, d) }) as ZipLoop,
            ),
            (
                "avx512",
                std::is_x86_feature_detected!("avx512f"),
                // SAFETY: pushed (and so called) only where the CPU has AVX-512F.
                |a, b, c, d| unsafe { zip_avx512(a, b, c, d) },
            ),
        ] {
            if has {
                v.push((name, f));
            }
        }
        v
    }

    /// TENSOR_SCALAR's one pass equals copying the row and applying each operation over it,
    /// bit for bit, for every pair of operations, special scalars, rows of any length and a
    /// destination longer than the source (on whichever loop this host runs).
    #[test]
    fn scalar_pairs_equal_two_passes() {
        eprintln!(
            "elementwise loops on this host: {}",
            super::super::act::simd_path()
        );
        let src = tricky(300, 1);
        for op0 in OPS {
            for op1 in OPS {
                for (s0, s1) in [(1.5, -2.0), (f32::NAN, 0.0), (-0.0, f32::INFINITY)] {
                    for (ls, lo) in [(0, 0), (1, 1), (17, 17), (300, 300), (40, 45)] {
                        let old = tricky(lo, 9);
                        let mut want = old.clone();
                        let k = ls.min(lo);
                        want[..k].copy_from_slice(&src[..k]);
                        alu_scalar(op0, &mut want, s0);
                        alu_scalar(op1, &mut want, s1);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        for (name, f) in scalar_pair_loops() {
                            let mut got = old.clone();
                            f(op0, s0, op1, s1, &src[..ls], &mut got);
                            assert_eq!(
                                bits(&got),
                                bits(&want),
                                "{name}: {op0:?} {op1:?} {s0} {s1} {ls}/{lo}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// TENSOR_TENSOR's one pass equals copying `x` and applying [`alu_zip`] with `y`, bit for
    /// bit, for every operation and rows of equal and unequal lengths.
    #[test]
    fn zipped_rows_equal_copy_then_zip() {
        let (x, y) = (tricky(300, 3), tricky(300, 5));
        for op in OPS {
            for (lx, ly, lo) in [
                (0, 0, 0),
                (1, 1, 1),
                (33, 33, 33),
                (300, 300, 300),
                (20, 15, 25),
                (15, 20, 25),
                (25, 30, 20),
            ] {
                let old = tricky(lo, 11);
                let mut want = old.clone();
                let k = lx.min(lo);
                want[..k].copy_from_slice(&x[..k]);
                alu_zip(op, &mut want, &y[..ly]);
                let mut got = old.clone();
                zip_into(op, &x[..lx], &y[..ly], &mut got);
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{op:?} {lx} {ly} {lo}");
                // Every loop the host has, on the rows all three hold.
                let m = lx.min(ly).min(lo);
                for (name, f) in zip_loops() {
                    let mut part = old.clone();
                    f(op, &x[..m], &y[..m], &mut part[..m]);
                    assert_eq!(bits(&part[..m]), bits(&want[..m]), "{name}: {op:?} {m}");
                }
            }
        }
    }

    #[test]
    fn identity_detection() {
        let n = 5;
        let mut m = vec![0f32; n * 7];
        for i in 0..n {
            m[i * 7 + i] = 1.0;
        }
        let v = View {
            off: 0,
            rs: 7,
            cs: 1,
        };
        assert!(is_identity(&m, v, n));
        assert!(is_identity(
            &m,
            View {
                off: 0,
                rs: 1,
                cs: 7
            },
            n
        ));
        m[7 + 3] = -0.0;
        assert!(is_identity(&m, v, n), "-0 is a zero");
        for bad in [1e-30, f32::NAN, f32::MIN_POSITIVE / 4.0, -1.0] {
            m[7 + 3] = bad;
            assert!(!is_identity(&m, v, n), "{bad} off the diagonal");
        }
        m[7 + 3] = 0.0;
        m[2 * 7 + 2] = -1.0;
        assert!(!is_identity(&m, v, n), "-1 on the diagonal");
        m[2 * 7 + 2] = 1.0;
        assert!(
            !is_identity(&m[..20], v, n),
            "short slice is not an identity"
        );
    }

    /// A max reduction gives the one-lane fold's bits (the fold is written out here, not
    /// taken from `alu_reduce`) on every lane width the host runs, for rows of 1 to 200
    /// elements drawn from ordinary values, ±0, ±inf, NaN and subnormals, wherever the
    /// maximum sits.
    #[test]
    fn lane_maxima_equal_the_fold_bit_for_bit() {
        let fold = |row: &[f32]| row[1..].iter().fold(row[0], |a, b| a.max(*b));
        type Lanes = fn(&[f32]) -> Option<f32>;
        let mut kinds: Vec<(&str, Lanes)> = vec![("portable", max_lanes_body)];
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY (both): called only where the feature is detected.
            let avx2: Lanes = |r| unsafe { max_lanes_avx2(r) };
            let avx512: Lanes = |r| unsafe { max_lanes_avx512(r) };
            for (name, present, f) in [
                ("AVX2", std::is_x86_feature_detected!("avx2"), avx2),
                ("AVX-512F", std::is_x86_feature_detected!("avx512f"), avx512),
            ] {
                if present {
                    kinds.push((name, f));
                } else {
                    eprintln!("SKIPPED: no {name} on this host; its loop did not run");
                }
            }
        }
        let pool: Vec<f32> = super::super::act::SPECIAL_F32
            .into_iter()
            .chain([1.5, -2.25, 3.0e38, -7.0])
            .collect();
        // A small LCG: the rows only need to cover the mixes, not be random.
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed >> 8
        };
        let (mut fell_back, mut laned) = (0, 0);
        for _ in 0..4000 {
            let n = 1 + (next() % 200) as usize;
            // Mostly ordinary values, with a specials drawn from the pool now and then.
            let row: Vec<f32> = (0..n)
                .map(|_| match next() % 8 {
                    0 => pool[(next() as usize) % pool.len()],
                    _ => (next() % 2001) as f32 * 0.01 - 10.0,
                })
                .collect();
            let want = fold(&row);
            assert_eq!(
                alu_reduce(Alu::Max, &row).to_bits(),
                want.to_bits(),
                "{row:?}"
            );
            for (name, lanes) in &kinds {
                match lanes(&row) {
                    Some(m) => {
                        laned += 1;
                        assert_eq!(m.to_bits(), want.to_bits(), "{name}: {row:?}");
                    }
                    None => {
                        fell_back += 1;
                        assert!(want.is_nan() || want == 0.0 || row.iter().any(|v| v.is_nan()));
                    }
                }
            }
        }
        // Both branches ran.
        assert!(laned > 1000 && fell_back > 100, "{laned} {fell_back}");
        // Where the lanes refuse: a NaN anywhere, a maximum of ±0.
        assert_eq!(max_lanes_body(&[1.0, f32::NAN, 2.0]), None);
        assert_eq!(max_lanes_body(&[-0.0, 0.0, -1.0]), None);
        assert_eq!(
            max_lanes_body(&[f32::NEG_INFINITY; 3]),
            Some(f32::NEG_INFINITY)
        );
    }

    #[test]
    fn reductions_agree_with_a_plain_fold() {
        let row: Vec<f32> = (0..515)
            .map(|i| ((i * 37) % 101) as f32 * 0.013 - 0.6)
            .collect();
        let seq: f64 = row.iter().map(|v| *v as f64).sum();
        assert!((alu_reduce(Alu::Add, &row) as f64 - seq).abs() < 1e-4);
        let max = row.iter().copied().fold(f32::MIN, f32::max);
        assert_eq!(alu_reduce(Alu::Max, &row), max);
        assert_eq!(alu_reduce(Alu::Bypass, &row), row[0]);
        let small = [1.5f32, 2.0, -1.0];
        assert_eq!(alu_reduce(Alu::Mul, &small), -3.0);
        assert_eq!(alu_reduce(Alu::Add, &small[..1]), 1.5);
    }
}
