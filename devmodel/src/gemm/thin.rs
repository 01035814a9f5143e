//! Thin products: MATMULs whose stationary matrix has one to eight columns (`m`), as an MoE
//! layer's router and gates load a weight vector and stream 128 tokens past it. The blocked
//! SGEMM would pack all of the moving tensor (`k x n`, widened to f32 first) to make one to
//! eight rows of C; here each row of it is read once, straight from SBUF/PSUM storage (bf16
//! widened as it loads), and multiplied into the rows of sums.
//!
//! Same bits as the SGEMM where the host has FMA: each sum is one fused multiply-add chain in
//! `k` order from +0, as in `matrixmultiply`'s FMA kernels (`narrow` gives the details), and
//! the caller adds it to C as they do (`gemm::add_into`); checked bit for bit against the
//! SGEMM (`tests::thin_products_equal_the_sgemm_bit_for_bit`).

use super::View;

/// The most stationary columns (rows of C) computed here.
pub const MAX_M: usize = 8;

/// The most moving columns: one PSUM bank of fp32.
pub const MAX_N: usize = 512;

/// The moving tensor's rows as storage holds them: row `kk` is `n` consecutive elements at
/// `off + kk * rs` of the slice.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    F32(&'a [f32]),
    /// bf16 values as their bits.
    Bf16(&'a [u16]),
}

/// Whether this host runs the thin loop (the narrow loop's condition: FMA).
pub fn available() -> bool {
    super::narrow::available()
}

/// `sums[j * n + c] = Σ_kk A[j][kk] · B[kk][c]` for an `m x k` A (its view into `a`) and the
/// `k x n` B of `rows` (row `kk` at `off + kk * rs`), each sum one FMA chain in `kk` order.
/// False, with `sums` unspecified, where this path does not apply: `m` or `n` out of range,
/// `k` of 0 or beyond one block of the SGEMM's (whose sums are rounded into C between
/// blocks), a view that leaves its slice, or a host without FMA.
#[allow(clippy::too_many_arguments)]
pub fn sums(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    av: View,
    b: Rows<'_>,
    off: usize,
    rs: usize,
    sums: &mut Vec<f32>,
) -> bool {
    if !(1..=MAX_M).contains(&m)
        || !(1..=MAX_N).contains(&n)
        || !(1..=super::narrow::SGEMM_KC).contains(&k)
        || !available()
    {
        return false;
    }
    let b_len = match b {
        Rows::F32(s) => s.len(),
        Rows::Bf16(s) => s.len(),
    };
    let b_fits = (k - 1)
        .checked_mul(rs)
        .and_then(|x| x.checked_add(off))
        .and_then(|x| x.checked_add(n))
        .is_some_and(|end| end <= b_len);
    let a_fits = av.last(m, k).is_some_and(|l| l < a.len());
    if !b_fits || !a_fits {
        return false;
    }
    sums.clear();
    sums.resize(m * n, 0.0);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `available` detected FMA and AVX2; the function only indexes slices
        // (bounds checked, and the views were checked to fit just above).
        unsafe { sums_fma(k, n, a, av, b, off, rs, sums) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn sums_fma(
    k: usize,
    n: usize,
    a: &[f32],
    av: View,
    b: Rows<'_>,
    off: usize,
    rs: usize,
    sums: &mut [f32],
) {
    use super::narrow::{sums_in_registers, ROWS};
    let m = sums.len() / n.max(1);
    // Whole chunks of 64 columns: each row of C's sums held in registers over all of `k`
    // (`narrow::sums_in_registers` with the roles turned round: B's row is the vector, A's
    // element the scalar; a·b and b·a are the same product, so the same chains). The sums
    // lived in memory otherwise, each multiply-add a load and a store.
    let whole = n / ROWS * ROWS;
    for j in 0..m {
        let w = View {
            off: av.off + j * av.rs,
            rs: av.cs,
            cs: 0,
        };
        for c0 in (0..whole).step_by(ROWS) {
            let acc = &mut sums[j * n + c0..j * n + c0 + ROWS];
            // SAFETY: AVX2 and FMA by this function's contract; the callee indexes slices.
            unsafe {
                match b {
                    Rows::F32(s) => sums_in_registers(s, off + c0, rs, a, w, 0, 0..k, acc),
                    Rows::Bf16(s) => sums_in_registers(s, off + c0, rs, a, w, 0, 0..k, acc),
                }
            }
        }
    }
    if whole == n {
        return;
    }
    // The columns past the last whole chunk.
    let mut wide = [0f32; MAX_N];
    let rest = n - whole;
    for kk in 0..k {
        let at = off + kk * rs + whole;
        let row: &[f32] = match b {
            Rows::F32(s) => &s[at..at + rest],
            Rows::Bf16(s) => {
                // A bf16 is the top half of its f32.
                for (w, x) in wide.iter_mut().zip(&s[at..at + rest]) {
                    *w = f32::from_bits(u32::from(*x) << 16);
                }
                &wide[..rest]
            }
        };
        for (j, acc) in sums.chunks_exact_mut(n).enumerate() {
            let w = a[av.off + j * av.rs + kk * av.cs];
            for (x, y) in acc[whole..].iter_mut().zip(row) {
                *x = w.mul_add(*y, *x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::amx::tests::{bf16_values, lcg};

    /// The blocked SGEMM itself into a dense `m x n` C.
    fn blocked(m: usize, k: usize, n: usize, a: &[f32], av: View, b: &[f32], bv: View) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        let p = crate::gemm::narrow::Product {
            m,
            k,
            n,
            a,
            av,
            b,
            bv,
            beta: 0.0,
        };
        crate::gemm::narrow::tests::blocked(
            &p,
            &mut c,
            View {
                off: 0,
                rs: n,
                cs: 1,
            },
        );
        c
    }

    /// One thin product against the blocked SGEMM, bit for bit, for both forms of the
    /// moving tensor: A (`m x k`, the PE layout: column `kk` at `aoff + kk * cs`) and B
    /// (`k x n`, row `kk` at `boff + kk * rs`, bf16-representable so both forms hold the same
    /// values) filled from `seed`.
    fn check(
        m: usize,
        k: usize,
        n: usize,
        (aoff, cs): (usize, usize),
        (boff, rs): (usize, usize),
        seed: u64,
    ) {
        let mut t = seed;
        let a: Vec<f32> = (0..aoff + (k - 1) * cs + m).map(|_| lcg(&mut t)).collect();
        let (bits, wide) = bf16_values(&mut t, boff + (k - 1) * rs + n, 4.0);
        let av = View {
            off: aoff,
            rs: 1,
            cs,
        };
        let bv = View {
            off: boff,
            rs,
            cs: 1,
        };
        let want = blocked(m, k, n, &a, av, &wide, bv);
        let to_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for rows in [Rows::F32(&wide), Rows::Bf16(&bits)] {
            let mut got = Vec::new();
            assert!(
                sums(m, k, n, &a, av, rows, boff, rs, &mut got),
                "seed {seed}"
            );
            assert_eq!(to_bits(&got), to_bits(&want), "seed {seed}: {m}x{k}x{n}");
        }
    }

    #[test]
    fn thin_products_equal_the_sgemm_bit_for_bit() {
        if !available() {
            eprintln!("SKIPPED: this host has no FMA: the thin path is off (SGEMM only)");
            return;
        }
        eprintln!("FMA present: testing the thin path against the SGEMM");
        for (m, k, n) in [
            (1, 128, 128),
            (1, 128, 512),
            (2, 64, 3),
            (8, 128, 100),
            (5, 1, 1),
            // Three whole 64-column chunks in registers and eight columns past them.
            (3, 200, 200),
        ] {
            check(m, k, n, (2, m), (3, n + 7), 5);
        }
    }

    /// Random shapes, offsets and row strides (a seeded generator, 120 cases): bit for bit
    /// the SGEMM's, for both forms of the moving tensor.
    #[test]
    fn random_thin_products_equal_the_sgemm() {
        if !available() {
            eprintln!("SKIPPED: this host has no FMA: the thin path is off (SGEMM only)");
            return;
        }
        let mut s = 77;
        let mut below = |n: usize| ((lcg(&mut s) + 0.5) * n as f32) as usize % n;
        for case in 0..120 {
            let (m, k, n) = (1 + below(MAX_M), 1 + below(128), 1 + below(MAX_N));
            let a = (below(5), m + below(3));
            let b = (below(7), n + below(9));
            check(m, k, n, a, b, case);
        }
    }

    #[test]
    fn shapes_and_views_outside_the_path_are_refused() {
        let a = [1.0f32; 64];
        let b = [1.0f32; 64];
        // The PE layout of up to 8 columns: A's column kk at 8 kk.
        let av = View {
            off: 0,
            rs: 1,
            cs: 8,
        };
        let mut out = Vec::new();
        let go = |m, k, n, off, rs, out: &mut Vec<f32>| {
            sums(m, k, n, &a, av, Rows::F32(&b), off, rs, out)
        };
        assert!(!go(0, 4, 4, 0, 4, &mut out), "no rows");
        assert!(!go(MAX_M + 1, 4, 4, 0, 4, &mut out), "too many rows");
        assert!(!go(1, 0, 4, 0, 4, &mut out), "k of 0");
        assert!(!go(1, 4, 0, 0, 4, &mut out), "no columns");
        assert!(!go(1, 4, MAX_N + 1, 0, 4, &mut out), "too many columns");
        assert!(!go(1, 4, 16, 1, 16, &mut out), "B leaves its slice");
        assert!(!go(1, 4, 4, usize::MAX, 4, &mut out), "B offset overflows");
        assert!(!go(1, 4, 4, 0, usize::MAX, &mut out), "B stride overflows");
        assert!(
            !go(8, 9, 4, 0, 4, &mut out),
            "A leaves its slice (71 of 64)"
        );
        if available() {
            assert!(go(2, 4, 4, 0, 4, &mut out));
            assert_eq!(out, vec![4.0; 8]);
        }
    }
}
