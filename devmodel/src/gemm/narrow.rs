//! Narrow products (a decode step's matrix-vector MATMULs: `n` of 1 to 8 moving columns)
//! computed directly, where the host has FMA. The blocked SGEMM packs all of A for every call,
//! which for a 128 × 128 × 1 product costs several times the product's 16 Ki multiply-adds.
//!
//! Same bits as the SGEMM: `matrixmultiply`'s FMA kernels (AVX-512F, FMA) sum each element of
//! A·B as one fused multiply-add chain in `k` order from +0 over each block of [`SGEMM_KC`]
//! rows of B, then write `1·ab` (β = 0) or `fma(1, ab, β·c)`, with β = 1 for every block after
//! the first; this loop does the same operations in the same order
//! (`tests::narrow_products_equal_the_sgemm_bit_for_bit`, which also catches a change of the
//! crate's block size). Hosts without FMA keep the SGEMM, whose kernels there round the
//! product and the sum separately.

use super::View;

/// The widest product computed here.
pub const MAX_N: usize = 8;

/// Rows of C accumulated at a time: eight AVX registers of sums (the PE array's 128 columns
/// are two chunks). Each element's chain is the same whatever the chunk.
pub(super) const ROWS: usize = 64;

/// `matrixmultiply`'s K block for f32 (`archparam_defaults::S_KC`, unless its build was given
/// `MATMUL_SGEMM_KC`): the sum is rounded into C after each block.
pub(super) const SGEMM_KC: usize = 256;

/// Whether this host runs the narrow loop: where `matrixmultiply` picks one of its FMA
/// kernels (AVX-512F, or FMA with AVX2). Their epilogues differ only for a −0 product, which
/// a chain started at +0 never gives.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("fma")
            && (std::is_x86_feature_detected!("avx512f") || std::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The operands of `C = A·B + β·C`: `m x k` A (f32, or bf16 bits for [`product_bits`]),
/// `k x n` B (f32, or bf16 bits: a moving tensor read straight from storage; views into
/// their slices).
#[derive(Clone, Copy)]
pub(super) struct Product<'a, T = f32, U = f32> {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a: &'a [T],
    pub av: View,
    pub b: &'a [U],
    pub bv: View,
    pub beta: f32,
}

/// `C = A·B + β·C` for `n <= MAX_N`, the views already checked to fit their slices (by
/// `gemm::sgemm`). False, with nothing written, where this path does not apply.
pub(super) fn product<U: Moving>(p: &Product<'_, f32, U>, c: &mut [f32], cv: View) -> bool {
    if p.n > MAX_N || p.k == 0 || !available() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available` detected FMA and AVX2 (or AVX-512F, which includes it) just
        // above; the function only indexes slices (bounds checked): the features are its one
        // requirement.
        unsafe { product_fma(p, c, cv) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (c, cv);
        false
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA (every host `available` accepts: AVX-512F implies AVX2).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn product_fma<U: Moving>(p: &Product<'_, f32, U>, c: &mut [f32], cv: View) {
    let Product {
        m,
        k,
        n,
        a,
        av,
        b,
        bv,
        beta,
    } = *p;
    let mut acc = [0f32; 2 * ROWS];
    let chunk = chunk();
    for col in 0..n {
        let mut r0 = 0;
        while r0 < m {
            let rows = if m - r0 >= chunk {
                chunk
            } else {
                ROWS.min(m - r0)
            };
            let acc = &mut acc[..rows];
            for k0 in (0..k).step_by(SGEMM_KC) {
                let k1 = (k0 + SGEMM_KC).min(k);
                if av.rs == 1 && rows.is_multiple_of(ROWS) {
                    // Whole chunks of the PE layout: the sums in registers.
                    sums_in_registers(a, av.off + r0 + k0 * av.cs, av.cs, b, bv, col, k0..k1, acc);
                } else {
                    acc.fill(0.0);
                    for kk in k0..k1 {
                        let bk = b[bv.off + kk * bv.rs + col * bv.cs].value();
                        let at = av.off + r0 * av.rs + kk * av.cs;
                        if av.rs == 1 {
                            // The PE's stationary layout: a column of A is contiguous.
                            for (x, w) in acc.iter_mut().zip(&a[at..at + rows]) {
                                *x = w.mul_add(bk, *x);
                            }
                        } else {
                            for (j, x) in acc.iter_mut().enumerate() {
                                *x = a[at + j * av.rs].mul_add(bk, *x);
                            }
                        }
                    }
                }
                store(acc, if k0 == 0 { beta } else { 1.0 }, c, cv, r0, col);
            }
            r0 += rows;
        }
    }
}

/// One block's sums into rows `r0..` of column `col` of C: `1·ab` (β = 0) or `fma(1, ab, β·c)`.
#[inline(always)]
fn store(acc: &[f32], beta: f32, c: &mut [f32], cv: View, r0: usize, col: usize) {
    for (j, x) in acc.iter().enumerate() {
        let at = cv.off + (r0 + j) * cv.rs + col * cv.cs;
        c[at] = if beta == 0.0 {
            *x
        } else {
            1f32.mul_add(*x, c[at] * beta)
        };
    }
}

/// Whether [`product_bits`] takes an `m x k x n` product: bf16 weights in the PE layout
/// (`rs` 1) in whole 64-row chunks, `n` of 1 to [`MAX_N`], on a host with the narrow loop.
pub fn bits_apply(m: usize, k: usize, n: usize) -> bool {
    (1..=MAX_N).contains(&n) && k > 0 && m > 0 && m.is_multiple_of(ROWS) && available()
}

/// [`product`] with A given as bf16 bits in the PE layout (`av.rs == 1`), widened as the
/// sums read them: an LDWEIGHTS of bf16 weights need not widen 16 Ki of them for a
/// matrix-vector product that reads each once. The same sums of the same f32 values, so the
/// same bits (`tests::bf16_weights_as_bits_give_the_widened_product`). The views were
/// checked to fit (`gemm::sgemm_bits`); false, nothing written, where [`bits_apply`] fails.
pub(super) fn product_bits<U: Moving>(p: &Product<'_, u16, U>, c: &mut [f32], cv: View) -> bool {
    let Product {
        m,
        k,
        n,
        a,
        av,
        b,
        bv,
        beta,
    } = *p;
    if av.rs != 1 || !bits_apply(m, k, n) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut acc = [0f32; 2 * ROWS];
        let chunk = chunk();
        for col in 0..n {
            let mut r0 = 0;
            while r0 < m {
                // (`m` is whole chunks of ROWS: `bits_apply`.)
                let acc = &mut acc[..if m - r0 >= chunk { chunk } else { ROWS }];
                for k0 in (0..k).step_by(SGEMM_KC) {
                    let k1 = (k0 + SGEMM_KC).min(k);
                    // SAFETY: `bits_apply` (via `available`) detected FMA and AVX2; the
                    // function indexes slices (bounds checked).
                    unsafe {
                        sums_in_registers(
                            a,
                            av.off + r0 + k0 * av.cs,
                            av.cs,
                            b,
                            bv,
                            col,
                            k0..k1,
                            acc,
                        )
                    };
                    store(acc, if k0 == 0 { beta } else { 1.0 }, c, cv, r0, col);
                }
                r0 += acc.len();
            }
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, b, c);
        false
    }
}

/// The elements B can be given as: f32, or bf16 bits.
pub(super) trait Moving: Copy {
    fn value(self) -> f32;
}

impl Moving for f32 {
    #[inline(always)]
    fn value(self) -> f32 {
        self
    }
}

impl Moving for u16 {
    /// A bf16 is the top half of its f32.
    #[inline(always)]
    fn value(self) -> f32 {
        f32::from_bits(u32::from(self) << 16)
    }
}

/// The elements A can be given as: f32, or bf16 bits widened eight at a time as they load.
#[cfg(target_arch = "x86_64")]
pub(super) trait Lanes: Copy {
    /// Eight elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p` must be valid for reading eight elements, and the CPU must have AVX2 (the loads
    /// inline into the `target_feature` loop that calls them).
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;

    /// Sixteen elements from `p` as f32 lanes.
    ///
    /// # Safety
    /// `p` must be valid for reading sixteen elements, and the CPU must have AVX-512F.
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

#[cfg(target_arch = "x86_64")]
impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller's contract.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }

    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller's contract.
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for u16 {
    /// Zero-extend, shift into the top half: a bf16 is the top half of its f32.
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract.
        unsafe {
            let bits = _mm_loadu_si128(p.cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits)))
        }
    }

    #[inline(always)]
    unsafe fn load16(p: *const u16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract.
        unsafe {
            let bits = _mm256_loadu_si256(p.cast());
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits)))
        }
    }
}

/// Whether the sums run sixteen lanes wide (AVX-512F, detected at run time; std caches it).
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    std::is_x86_feature_detected!("avx512f")
}

/// Rows of C one call of [`sums_in_registers`] sums where the PE layout has that many:
/// [`ROWS`] eight lanes wide, twice as many sixteen wide. Either way eight registers of
/// independent FMA chains (four, 64 rows sixteen wide, left the loop waiting on the FMA's
/// latency); each element's chain is the same whatever the chunk.
#[cfg(target_arch = "x86_64")]
pub(super) fn chunk() -> usize {
    if wide() {
        2 * ROWS
    } else {
        ROWS
    }
}

/// [`sums_body`] eight lanes wide, or sixteen where the host has AVX-512F: each sum the same
/// FMA chain either way, so the same bits (`tests::both_lane_widths_give_the_same_sums`).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn sums_in_registers<T: Lanes, U: Moving>(
    a: &[T],
    at: usize,
    cs: usize,
    b: &[U],
    bv: View,
    col: usize,
    ks: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    // SAFETY: AVX2 and FMA by the caller's contract; AVX-512F where `wide` found it.
    unsafe {
        if wide() {
            sums_avx512(a, at, cs, b, bv, col, ks, acc)
        } else {
            sums_avx2(a, at, cs, b, bv, col, ks, acc)
        }
    }
}

/// A vector width the sums run at: its registers and the operations the loop needs.
#[cfg(target_arch = "x86_64")]
trait Width {
    type V: Copy;
    /// f32 lanes per register.
    const N: usize;
    /// # Safety (every method)
    /// The CPU must have the width's features, pointers must be valid for `N` elements (the
    /// methods inline into the `target_feature` loop that calls them).
    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load<T: Lanes>(p: *const T) -> Self::V;
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
}

/// Eight lanes (AVX2 with FMA).
#[cfg(target_arch = "x86_64")]
struct Avx2;

/// Sixteen lanes (AVX-512F).
#[cfg(target_arch = "x86_64")]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Width for Avx2 {
    type V = std::arch::x86_64::__m256;
    const N: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self::V {
        // SAFETY (all methods): the trait's contract.
        unsafe { std::arch::x86_64::_mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load<T: Lanes>(p: *const T) -> Self::V {
        unsafe { T::load8(p) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::V) {
        unsafe { std::arch::x86_64::_mm256_storeu_ps(p, v) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Width for Avx512 {
    type V = std::arch::x86_64::__m512;
    const N: usize = 16;
    #[inline(always)]
    unsafe fn zero() -> Self::V {
        // SAFETY (all methods): the trait's contract.
        unsafe { std::arch::x86_64::_mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        unsafe { std::arch::x86_64::_mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load<T: Lanes>(p: *const T) -> Self::V {
        unsafe { T::load16(p) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::V) {
        unsafe { std::arch::x86_64::_mm512_storeu_ps(p, v) }
    }
}

/// [`sums_body`] in four sixteen-lane registers.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn sums_avx512<T: Lanes, U: Moving>(
    a: &[T],
    at: usize,
    cs: usize,
    b: &[U],
    bv: View,
    col: usize,
    ks: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    // SAFETY: AVX-512F is enabled here.
    unsafe { sums_body::<Avx512, T, U>(a, at, cs, b, bv, col, ks, acc) }
}

/// [`sums_body`] in eight eight-lane registers.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn sums_avx2<T: Lanes, U: Moving>(
    a: &[T],
    at: usize,
    cs: usize,
    b: &[U],
    bv: View,
    col: usize,
    ks: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    // SAFETY: AVX2 and FMA are enabled here.
    unsafe { sums_body::<Avx2, T, U>(a, at, cs, b, bv, col, ks, acc) }
}

/// `acc[j] = Σ_kk a[at + j + (kk - k0) * cs] · B[kk][col]` over `ks`, each sum one FMA chain in
/// `kk` order from +0, held in `acc.len() / W::N` registers, at most eight (a stack array of
/// sums is loaded and stored again by every multiply-add).
///
/// # Safety
/// The CPU must have `W`'s features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn sums_body<W: Width, T: Lanes, U: Moving>(
    a: &[T],
    at: usize,
    cs: usize,
    b: &[U],
    bv: View,
    col: usize,
    ks: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    // Eight registers of sums: 64 rows eight lanes wide, or 128 sixteen wide.
    let rows = acc.len();
    let regs = rows / W::N;
    assert!(
        rows.is_multiple_of(W::N) && regs <= 8,
        "{rows} sums do not fill registers"
    );
    // SAFETY (all vector operations below): `W`'s features by the caller's contract; each
    // load reads `W::N` elements of `row`, which holds `rows` of them, and each store
    // writes `W::N` elements of `out`.
    let mut sums = [unsafe { W::zero() }; 8];
    for (i, kk) in ks.enumerate() {
        let bk = unsafe { W::splat(b[bv.off + kk * bv.rs + col * bv.cs].value()) };
        let row = &a[at + i * cs..at + i * cs + rows];
        for (v, s) in sums[..regs].iter_mut().enumerate() {
            *s = unsafe { W::fma(W::load(row.as_ptr().add(W::N * v)), bk, *s) };
        }
    }
    for (v, s) in sums[..regs].iter().enumerate() {
        let out = &mut acc[W::N * v..W::N * (v + 1)];
        unsafe { W::store(out.as_mut_ptr(), *s) };
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::gemm::amx::tests::{bf16_values, lcg};

    /// The sixteen-lane sums give the eight-lane sums' bits, for f32 and bf16-bits weights
    /// (with NaN, ±inf, ±0 and subnormals among them), where the host has both widths.
    #[test]
    fn both_lane_widths_give_the_same_sums() {
        #[cfg(target_arch = "x86_64")]
        {
            if !(available() && wide()) {
                eprintln!("SKIPPED: no AVX-512F here; only the eight-lane sums run");
                return;
            }
            eprintln!("AVX-512F present: comparing sixteen-lane sums with eight-lane ones");
            let mut s = 31u64;
            let (k, cs) = (200, ROWS + 3);
            let specials = [f32::NAN, f32::INFINITY, -0.0, 1e-40, f32::NEG_INFINITY];
            let mut a: Vec<f32> = (0..k * cs).map(|_| lcg(&mut s) * 9.0).collect();
            for (i, x) in a.iter_mut().enumerate().filter(|(i, _)| i % 97 == 3) {
                *x = specials[i % specials.len()];
            }
            let bits: Vec<u16> = a.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
            let b: Vec<f32> = (0..k * 2).map(|_| lcg(&mut s)).collect();
            let bv = View {
                off: 0,
                rs: 2,
                cs: 1,
            };
            let same =
                |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
            for col in 0..2 {
                let (mut eight, mut sixteen) = ([0f32; ROWS], [0f32; ROWS]);
                // SAFETY: this host has AVX2, FMA and AVX-512F (checked above); the slices
                // hold every row read.
                unsafe {
                    sums_avx2(&a, 1, cs, &b, bv, col, 0..k, &mut eight);
                    sums_avx512(&a, 1, cs, &b, bv, col, 0..k, &mut sixteen);
                }
                assert!(same(&eight, &sixteen), "f32 weights, column {col}");
                // SAFETY: as above.
                unsafe {
                    sums_avx2(&bits, 2, cs, &b, bv, col, 0..k, &mut eight);
                    sums_avx512(&bits, 2, cs, &b, bv, col, 0..k, &mut sixteen);
                }
                assert!(same(&eight, &sixteen), "bf16 weights, column {col}");
            }
        }
    }

    /// The blocked SGEMM itself on the same operands (no narrow path).
    pub(in crate::gemm) fn blocked(p: &Product<'_>, c: &mut [f32], cv: View) {
        let i = |x: usize| x as isize;
        // SAFETY: the test's views lie inside its buffers (checked by construction).
        unsafe {
            matrixmultiply::sgemm(
                p.m,
                p.k,
                p.n,
                1.0,
                p.a.as_ptr().add(p.av.off),
                i(p.av.rs),
                i(p.av.cs),
                p.b.as_ptr().add(p.bv.off),
                i(p.bv.rs),
                i(p.bv.cs),
                p.beta,
                c.as_mut_ptr().add(cv.off),
                i(cv.rs),
                i(cv.cs),
            )
        }
    }

    #[test]
    fn narrow_products_equal_the_sgemm_bit_for_bit() {
        if !available() {
            eprintln!("SKIPPED: this host has no FMA: the narrow path is off (SGEMM only)");
            return;
        }
        eprintln!("FMA present: testing the narrow path against the SGEMM");
        let mut s = 9;
        for (m, k, n) in [
            (128, 128, 1),
            (128, 128, 2),
            (2, 128, 8),
            (130, 7, 3),
            (1, 1, 1),
            (64, 300, 5),
            (3, 513, 2),
        ] {
            for (beta, pitch) in [(0.0, 0), (1.0, 0), (1.0, 3)] {
                // A in the PE layout (rs 1) and, every other case, row-major.
                for a_rows in [false, true] {
                    let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut s)).collect();
                    let av = if a_rows {
                        View {
                            off: 0,
                            rs: k,
                            cs: 1,
                        }
                    } else {
                        View {
                            off: 0,
                            rs: 1,
                            cs: m,
                        }
                    };
                    let b: Vec<f32> = (0..k * n + 1).map(|_| lcg(&mut s) * 4.0).collect();
                    let bv = View {
                        off: 1,
                        rs: n,
                        cs: 1,
                    };
                    let cv = View {
                        off: 2,
                        rs: n + pitch,
                        cs: 1,
                    };
                    let len = 2 + m * (n + pitch);
                    let old: Vec<f32> = (0..len).map(|_| lcg(&mut s)).collect();
                    let (mut want, mut got) = (old.clone(), old.clone());
                    let p = Product {
                        m,
                        k,
                        n,
                        a: &a,
                        av,
                        b: &b,
                        bv,
                        beta,
                    };
                    blocked(&p, &mut want, cv);
                    assert!(product(&p, &mut got, cv));
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{m}x{k}x{n} beta {beta} rows-major A {a_rows}"
                    );
                }
            }
        }
    }

    /// bf16 weights given as bits give the bits of the product of their widened values
    /// (reference: the f32 narrow path on the widened weights, itself checked against the
    /// SGEMM above), both β, a row-strided C, two K blocks; shapes outside whole 64-row
    /// chunks are refused with C untouched.
    #[test]
    fn bf16_weights_as_bits_give_the_widened_product() {
        if !available() {
            eprintln!("SKIPPED: this host has no FMA: the narrow path is off (SGEMM only)");
            return;
        }
        let mut s = 17;
        for (m, k, n) in [(128, 128, 1), (128, 128, 8), (64, 300, 3), (192, 1, 2)] {
            let (bits, wide) = bf16_values(&mut s, m * k + 3, 3.0);
            let av = View {
                off: 3,
                rs: 1,
                cs: m,
            };
            let b: Vec<f32> = (0..k * n + 1).map(|_| lcg(&mut s)).collect();
            let bv = View {
                off: 1,
                rs: n,
                cs: 1,
            };
            let cv = View {
                off: 2,
                rs: n + 3,
                cs: 1,
            };
            for beta in [0.0, 1.0] {
                let old: Vec<f32> = (0..2 + m * (n + 3)).map(|_| lcg(&mut s)).collect();
                let (mut want, mut got) = (old.clone(), old.clone());
                let p = Product {
                    m,
                    k,
                    n,
                    a: &wide,
                    av,
                    b: &b,
                    bv,
                    beta,
                };
                assert!(product(&p, &mut want, cv));
                let pb = Product {
                    m,
                    k,
                    n,
                    a: &bits[..],
                    av,
                    b: &b,
                    bv,
                    beta,
                };
                assert!(product_bits(&pb, &mut got, cv));
                let to_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(to_bits(&got), to_bits(&want), "{m}x{k}x{n} beta {beta}");
            }
        }
        let mut c = vec![1.0f32; 64];
        let v = View {
            off: 0,
            rs: 1,
            cs: 100,
        };
        let few = vec![0u16; 100 * 4];
        let ones = [1.0f32; 40];
        let p = |m, n| Product {
            m,
            k: 4,
            n,
            a: &few[..],
            av: v,
            b: &ones,
            bv: v,
            beta: 0.0,
        };
        assert!(!product_bits(&p(100, 1), &mut c, v), "100 rows");
        assert!(!product_bits(&p(64, 9), &mut c, v), "9 columns");
        assert_eq!(c, vec![1.0; 64]);
    }

    #[test]
    fn wide_or_empty_products_are_left_to_the_sgemm() {
        let mut c = [1.0f32; 4];
        let v = View {
            off: 0,
            rs: 1,
            cs: 1,
        };
        let ones = [1.0f32; 16];
        let p = |k, n| Product {
            m: 1,
            k,
            n,
            a: &ones,
            av: v,
            b: &ones,
            bv: v,
            beta: 0.0,
        };
        assert!(!product(&p(1, MAX_N + 1), &mut c, v));
        assert!(!product(&p(0, 1), &mut c, v));
        assert_eq!(c, [1.0; 4]);
    }
}
