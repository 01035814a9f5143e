//! The SGEMM's own kernel for MATMUL's layout on AVX-512F hosts. The stationary matrix A is
//! stored as the PE array holds it (for each `kk`, the `m` output rows' weights consecutive),
//! which is already the order a kernel broadcasts from: unlike `matrixmultiply`, nothing
//! packs A again for every product. B is copied once per 32-column panel into a dense
//! buffer, and each 8 x 32 block of C is summed in sixteen registers.
//!
//! Same bits as `matrixmultiply`: every element of A·B is one fused multiply-add chain in
//! `kk` order from +0 (products up to `narrow::SGEMM_KC` deep, one block of its), then
//! `1·ab` (β = 0) or `fma(1, ab, β·c)`, as `narrow` documents
//! (`tests::panel_products_equal_the_blocked_sgemm_bit_for_bit`). Other shapes and hosts
//! keep `matrixmultiply`. Where the weights come packed as bf16 pairs (`dot`), a bf16 B's
//! panels run on `VDPBF16PS` instead, with the same bits.
#![allow(unsafe_code)]

use super::narrow::SGEMM_KC;

/// Columns of C (and B) a panel holds: two AVX-512 registers.
pub(super) const NR: usize = 32;
/// Rows of C one block sums: one broadcast of A each.
pub(super) const MR: usize = 8;

/// Whether this host runs the kernel (AVX-512F, detected at run time).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether [`product`] takes an `m x k x n` product: A in the PE layout (`rs` 1), C's rows
/// contiguous (`cs` 1), whole 8-row blocks and 32-column panels, one K block, on a host with
/// AVX-512F.
pub(crate) fn applies(m: usize, k: usize, n: usize, a_rs: usize, c_cs: usize) -> bool {
    a_rs == 1
        && c_cs == 1
        && m.is_multiple_of(MR)
        && n.is_multiple_of(NR)
        && (1..=SGEMM_KC).contains(&k)
        && m > 0
        && n > 0
        && available()
}

/// `C = A·B + β·C` on dense matrices, on one thread: A `k x m` in the PE layout (row `kk`
/// holds the `m` output rows' weights), B `k x n` and C `m x n` row-major. False (nothing
/// written) where [`applies`] fails or a slice is short. (The host rate `bench real`
/// measures, beside `matrixmultiply`'s.)
pub fn dense(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) -> bool {
    let fits = |len: usize, r: usize, cl: usize| r.checked_mul(cl).is_some_and(|x| x <= len);
    if !applies(m, k, n, 1, 1)
        || !fits(a.len(), k, m)
        || !fits(b.len(), k, n)
        || !fits(c.len(), m, n)
    {
        return false;
    }
    let op = Operands {
        a: a.as_ptr(),
        acs: m,
        b: Moving::F32(b.as_ptr()),
        brs: n,
        bcs: 1,
        c: c.as_mut_ptr(),
        crs: n,
        pairs: None,
    };
    // SAFETY: `applies` held and the slices hold every element named (checked above); `c` is
    // an exclusive borrow, apart from `a` and `b`.
    unsafe { product(m, k, n, &op, beta) };
    true
}

/// B's elements: f32, or bf16 or fp16 bits (a moving tensor read where it lies, widened as
/// the panel is copied: exactly, as any 16-bit float widens to f32).
#[derive(Clone, Copy)]
pub(super) enum Moving {
    F32(*const f32),
    Bf16(*const u16),
    F16(*const u16),
}

/// The operands of one product as [`product`] reads them: element `(j, kk)` of A at
/// `a + j + kk * acs`, `(kk, col)` of B at `b + kk * brs + col * bcs`, `(j, col)` of C at
/// `c + j * crs + col`.
#[derive(Clone, Copy)]
pub(super) struct Operands {
    pub(super) a: *const f32,
    pub(super) acs: usize,
    pub(super) b: Moving,
    pub(super) brs: usize,
    pub(super) bcs: usize,
    pub(super) c: *mut f32,
    pub(super) crs: usize,
    /// A's weights packed for `VDPBF16PS` (`dot`), where the path is on and they are bf16.
    pub(super) pairs: Option<super::dot::Pairs>,
}

// SAFETY: the pointers are only dereferenced by `product`, under its caller's contract; a
// product cut into column or row pieces (`gemm::panel_pieces`) reads A and B from several
// threads and writes disjoint columns or rows of C from each.
unsafe impl Send for Operands {}
unsafe impl Sync for Operands {}

impl Operands {
    /// The same product from output row `r0` on: A's `r0`th weight of every row `kk`, C's
    /// row `r0`.
    pub(super) fn at_row(&self, r0: usize) -> Operands {
        Operands {
            a: self.a.wrapping_add(r0),
            c: self.c.wrapping_add(r0 * self.crs),
            pairs: self.pairs.map(|p| p.at_row(r0)),
            ..*self
        }
    }

    /// The same product from column `c0` of B and C on.
    pub(super) fn at_column(&self, c0: usize) -> Operands {
        let b = match self.b {
            Moving::F32(p) => Moving::F32(p.wrapping_add(c0 * self.bcs)),
            Moving::Bf16(p) => Moving::Bf16(p.wrapping_add(c0 * self.bcs)),
            Moving::F16(p) => Moving::F16(p.wrapping_add(c0 * self.bcs)),
        };
        Operands {
            b,
            c: self.c.wrapping_add(c0),
            ..*self
        }
    }
}

/// `C = A·B + β·C` for an `m x k x n` product [`applies`] accepts. Returns how many of its
/// 32-column panels ran on `VDPBF16PS` (`dot`).
///
/// # Safety
/// [`applies`] must hold (so the CPU has AVX-512F); every element of the `m x k` A, `k x n` B
/// and `m x n` C the operands name must lie in live allocations, C's apart from A's and B's,
/// and nothing else may access C's elements during the call; `op.pairs`, where given, packs
/// that A and `dot::available()` holds.
pub(super) unsafe fn product(m: usize, k: usize, n: usize, op: &Operands, beta: f32) -> usize {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract.
    unsafe {
        product_avx512(m, k, n, op, beta)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, k, n, op, beta);
        0
    }
}

/// # Safety
/// As [`product`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn product_avx512(m: usize, k: usize, n: usize, op: &Operands, beta: f32) -> usize {
    use std::arch::x86_64::*;
    // bf16 B against bf16 weights packed as pairs: `VDPBF16PS`, panel by panel where `dot`
    // proves the bits the same.
    let dot = match (op.pairs, op.b) {
        (Some(p), Moving::Bf16(b)) => Some((p, b)),
        _ => None,
    };
    // (Zeroed only where used: 8 KiB per product showed in fp32 products' profiles.)
    let mut dot_buf = dot.map(|_| [0u32; SGEMM_KC / 2 * NR]);
    let mut on_dot = 0;
    // One K block (`applies`): the panel of B fits this buffer. Left uninitialised (zeroing
    // 32 KiB per product showed in profiles): the first `k` rows are written before any is
    // read, and no other row is read.
    let mut panel = [const { std::mem::MaybeUninit::<f32>::uninit() }; SGEMM_KC * NR];
    let pp: *mut f32 = panel.as_mut_ptr().cast();
    // Ask for all of A first. Every panel reads it, row `kk` after row `kk - 1` a partition
    // apart, and a pass pair's weights come cold from SBUF: the first panel's loads then
    // waited on memory one row group at a time, on each thread that shares the product.
    match dot {
        Some((p, _)) => {
            for t in 0..k.div_ceil(2) {
                crate::prefetch::lines(p.p.wrapping_add(t * p.m), m * 4);
            }
        }
        None => {
            for kk in 0..k {
                crate::prefetch::lines(op.a.wrapping_add(kk * op.acs), m * 4);
            }
        }
    }
    for p0 in (0..n).step_by(NR) {
        if let (Some((p, b)), Some(buf)) = (dot, dot_buf.as_mut()) {
            let (b, c) = (b.add(p0 * op.bcs), op.c.add(p0));
            // SAFETY: the caller's contract, for this panel's columns.
            if super::dot::panel(m, k, p, b, op.brs, op.bcs, c, op.crs, beta, buf) {
                on_dot += 1;
                continue;
            }
        }
        // SAFETY (all accesses below): B's, A's and C's elements lie where the caller says;
        // the panel holds k <= SGEMM_KC rows of NR.
        for kk in 0..k {
            let at = kk * op.brs + p0 * op.bcs;
            let to = pp.add(kk * NR);
            match op.b {
                Moving::F32(b) if op.bcs == 1 => {
                    let from = b.add(at);
                    _mm512_storeu_ps(to, _mm512_loadu_ps(from));
                    _mm512_storeu_ps(to.add(16), _mm512_loadu_ps(from.add(16)));
                }
                Moving::F32(b) => {
                    for cc in 0..NR {
                        *to.add(cc) = *b.add(at + cc * op.bcs);
                    }
                }
                Moving::Bf16(b) if op.bcs == 1 => {
                    // A bf16 is the top half of its f32: zero-extend, shift up.
                    for h in 0..2 {
                        let bits = _mm256_loadu_si256(b.add(at + 16 * h).cast());
                        let wide = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits));
                        _mm512_storeu_ps(to.add(16 * h), _mm512_castsi512_ps(wide));
                    }
                }
                Moving::Bf16(b) => {
                    for cc in 0..NR {
                        let v = u32::from(*b.add(at + cc * op.bcs)) << 16;
                        *to.add(cc) = f32::from_bits(v);
                    }
                }
                Moving::F16(b) if op.bcs == 1 => {
                    // VCVTPH2PS, as the gathers' F16C conversion (`half`) widens.
                    for h in 0..2 {
                        let bits = _mm256_loadu_si256(b.add(at + 16 * h).cast());
                        _mm512_storeu_ps(to.add(16 * h), _mm512_cvtph_ps(bits));
                    }
                }
                Moving::F16(b) => {
                    for cc in 0..NR {
                        let v = half::f16::from_bits(*b.add(at + cc * op.bcs));
                        *to.add(cc) = v.to_f32();
                    }
                }
            }
        }
        for j0 in (0..m).step_by(MR) {
            let mut acc = [[_mm512_setzero_ps(); 2]; MR];
            for kk in 0..k {
                let b0 = _mm512_loadu_ps(pp.add(kk * NR));
                let b1 = _mm512_loadu_ps(pp.add(kk * NR + 16));
                let at = op.a.add(j0 + kk * op.acs);
                for (r, sums) in acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(*at.add(r));
                    sums[0] = _mm512_fmadd_ps(w, b0, sums[0]);
                    sums[1] = _mm512_fmadd_ps(w, b1, sums[1]);
                }
            }
            store_block(&acc, op.c.add(j0 * op.crs + p0), op.crs, beta);
        }
    }
    on_dot
}

/// Write an 8 x 32 block's sums `ab` to C (row `r` at `c + r * crs`): `1·ab` (β = 0: C's
/// old values unread, NaN-safe) or `fma(1, ab, β·c)`, as `matrixmultiply` does.
///
/// # Safety
/// The block's rows of C lie in live memory nothing else accesses meanwhile; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn store_block(
    ab: &[[std::arch::x86_64::__m512; 2]; MR],
    c: *mut f32,
    crs: usize,
    beta: f32,
) {
    use std::arch::x86_64::*;
    let (ones, betas) = (_mm512_set1_ps(1.0), _mm512_set1_ps(beta));
    for (r, sums) in ab.iter().enumerate() {
        for (h, s) in sums.iter().enumerate() {
            // SAFETY: the caller's contract.
            unsafe {
                let at = c.add(r * crs + 16 * h);
                let v = if beta == 0.0 {
                    *s
                } else {
                    _mm512_fmadd_ps(ones, *s, _mm512_mul_ps(_mm512_loadu_ps(at), betas))
                };
                _mm512_storeu_ps(at, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::narrow::tests::blocked;
    use crate::gemm::narrow::Product;
    use crate::gemm::View;

    fn lcg(s: &mut u64) -> f32 {
        crate::gemm::amx::tests::lcg(s) * 8.0
    }

    /// Products of the shapes MATMUL gives (and others the kernel takes: k up to one K
    /// block, strided and dense B, C rows apart as PSUM partitions are), both β, values with
    /// NaN, ±inf, ±0 and subnormals among them: the bits `matrixmultiply` gives.
    #[test]
    fn panel_products_equal_the_blocked_sgemm_bit_for_bit() {
        if !available() {
            eprintln!("SKIPPED: no AVX-512F on this host; matrixmultiply runs every product");
            return;
        }
        eprintln!("AVX-512F present: comparing the panel kernel with matrixmultiply");
        let mut s = 77u64;
        let specials = [f32::NAN, f32::INFINITY, -0.0, 0.0, 1e-40, -1e-39];
        for (case, (m, k, n)) in [
            (128, 128, 512),
            (128, 128, 32),
            (64, 1, 64),
            (8, 256, 96),
            (120, 77, 160),
            (128, 128, 128),
        ]
        .into_iter()
        .enumerate()
        {
            let mut val = |i: usize| {
                if i % 211 == 5 && case % 2 == 1 {
                    specials[i % specials.len()]
                } else {
                    lcg(&mut s)
                }
            };
            let av = View {
                off: 3,
                rs: 1,
                cs: m + 4,
            };
            let a: Vec<f32> = (0..3 + k * (m + 4)).map(&mut val).collect();
            // B dense or strided (rows a "partition" apart, columns 1 or 2 apart).
            let bcs = 1 + case % 2;
            let bv = View {
                off: 5,
                rs: n * bcs + 13,
                cs: bcs,
            };
            let b: Vec<f32> = (0..5 + k * bv.rs).map(&mut val).collect();
            let cv = View {
                off: 2,
                rs: n + 9,
                cs: 1,
            };
            let old: Vec<f32> = (0..2 + m * cv.rs).map(&mut val).collect();
            assert!(applies(m, k, n, av.rs, cv.cs), "{m}x{k}x{n}");
            for beta in [0.0, 1.0] {
                let mut want = old.clone();
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
                let mut got = old.clone();
                let op = Operands {
                    a: a[av.off..].as_ptr(),
                    acs: av.cs,
                    b: Moving::F32(b[bv.off..].as_ptr()),
                    brs: bv.rs,
                    bcs: bv.cs,
                    c: got[cv.off..].as_mut_ptr(),
                    crs: cv.rs,
                    pairs: None,
                };
                // SAFETY: `applies` held; the views lie in the vectors (built to fit).
                unsafe { product(m, k, n, &op, beta) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} beta {beta}");
                // B as 16-bit bits (`moving` names them): the product of their widened values.
                let check16 = |b16: &[u16],
                               widen: fn(u16) -> f32,
                               moving: fn(*const u16) -> Moving,
                               what: &str| {
                    let wide: Vec<f32> = b16.iter().map(|x| widen(*x)).collect();
                    let mut want = old.clone();
                    blocked(&Product { b: &wide, ..p }, &mut want, cv);
                    let mut got = old.clone();
                    let op16 = Operands {
                        b: moving(b16[bv.off..].as_ptr()),
                        c: got[cv.off..].as_mut_ptr(),
                        ..op
                    };
                    // SAFETY: as above.
                    unsafe { product(m, k, n, &op16, beta) };
                    assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} beta {beta}, {what} B");
                };
                let h16: Vec<u16> = b
                    .iter()
                    .map(|x| half::f16::from_f32(*x).to_bits())
                    .collect();
                check16(
                    &h16,
                    |x| half::f16::from_bits(x).to_f32(),
                    Moving::F16,
                    "fp16",
                );
                let b16: Vec<u16> = b.iter().map(|x| (x.to_bits() >> 16) as u16).collect();
                check16(
                    &b16,
                    |x| f32::from_bits(u32::from(x) << 16),
                    Moving::Bf16,
                    "bf16",
                );
            }
        }
    }

    /// The dense front end: the kernel's bits where it applies, nothing written elsewhere.
    #[test]
    fn dense_products_check_their_slices() {
        if !available() {
            eprintln!("SKIPPED: no AVX-512F on this host");
            assert!(!dense(
                8,
                1,
                32,
                &[1.0; 8],
                &[1.0; 32],
                0.0,
                &mut [0.0; 256]
            ));
            return;
        }
        let (m, k, n) = (8, 3, 32);
        let a: Vec<f32> = (0..k * m).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|i| 0.5 * i as f32).collect();
        let mut c = vec![1.0f32; m * n];
        assert!(dense(m, k, n, &a, &b, 1.0, &mut c));
        for j in 0..m {
            for col in 0..n {
                let want: f32 = 1.0
                    + (0..k)
                        .map(|kk| a[kk * m + j] * b[kk * n + col])
                        .sum::<f32>();
                assert_eq!(c[j * n + col], want, "C[{j}][{col}]");
            }
        }
        let mut short = vec![7.0f32; m * n - 1];
        assert!(!dense(m, k, n, &a, &b, 0.0, &mut short));
        assert!(!dense(m, k, n, &a[1..], &b, 0.0, &mut c));
        assert!(!dense(m, k, n - 1, &a, &b, 0.0, &mut c));
        assert!(short.iter().all(|x| *x == 7.0));
    }

    #[test]
    fn other_shapes_are_left_to_matrixmultiply() {
        assert!(!applies(128, 128, 500, 1, 1), "a part panel");
        assert!(!applies(100, 128, 512, 1, 1), "a part block of rows");
        assert!(!applies(128, 300, 512, 1, 1), "two K blocks");
        assert!(!applies(128, 0, 512, 1, 1), "no K");
        assert!(!applies(128, 128, 512, 2, 1), "A not in the PE layout");
        assert!(!applies(128, 128, 512, 1, 3), "C's columns apart");
    }
}
