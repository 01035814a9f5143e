//! A bounds-checked front end to a blocked SGEMM (`matrixmultiply`), so matmuls run on whole
//! tiles straight out of SBUF/PSUM storage without per-element interpretation.
#![allow(unsafe_code)]

/// A strided f32 matrix view: element (r, c) at `data[off + r*rs + c*cs]`.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl View {
    /// Largest index touched by a `rows x cols` matrix, or None on overflow.
    fn last(&self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(self.off);
        }
        self.off
            .checked_add((rows - 1).checked_mul(self.rs)?)?
            .checked_add((cols - 1).checked_mul(self.cs)?)
    }
}

/// `C[m x n] = A[m x k] * B[k x n] + beta * C`. Returns false (and does nothing) if any view
/// would leave its slice. `beta == 0` ignores C's old contents (NaN-safe).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    let fits =
        |len: usize, v: &View, r, cl| v.last(r, cl).is_some_and(|l| l < len || r == 0 || cl == 0);
    if !(fits(a.len(), &av, m, k) && fits(b.len(), &bv, k, n) && fits(c.len(), &cv, m, n)) {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    let as_isize = |x: usize| isize::try_from(x).ok();
    let (Some(rsa), Some(csa), Some(rsb), Some(csb), Some(rsc), Some(csc)) = (
        as_isize(av.rs),
        as_isize(av.cs),
        as_isize(bv.rs),
        as_isize(bv.cs),
        as_isize(cv.rs),
        as_isize(cv.cs),
    ) else {
        return false;
    };
    // C's rows/cols must not alias each other for a write (rs or cs of 0 with >1 extent).
    if (m > 1 && cv.rs == 0) || (n > 1 && cv.cs == 0) {
        return false;
    }
    // SAFETY: every index the kernel touches was bounds-checked above against the slices'
    // lengths; A/B are shared borrows and C is a distinct exclusive borrow, so no aliasing.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr().add(av.off),
            rsa,
            csa,
            b.as_ptr().add(bv.off),
            rsb,
            csb,
            beta,
            c.as_mut_ptr().add(cv.off),
            rsc,
            csc,
        );
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_and_rejects_oob() {
        let (m, k, n) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut c = vec![1.0f32; m * n];
        assert!(sgemm(
            m,
            k,
            n,
            &a,
            View {
                off: 0,
                rs: k,
                cs: 1
            },
            &b,
            View {
                off: 0,
                rs: n,
                cs: 1
            },
            1.0,
            &mut c,
            View {
                off: 0,
                rs: n,
                cs: 1
            }
        ));
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|x| a[i * k + x] * b[x * n + j]).sum::<f32>();
                assert!((c[i * n + j] - want).abs() < 1e-5);
            }
        }
        assert!(!sgemm(
            m,
            k,
            n,
            &a,
            View {
                off: 1,
                rs: k,
                cs: 1
            },
            &b,
            View {
                off: 0,
                rs: n,
                cs: 1
            },
            0.0,
            &mut c,
            View {
                off: 0,
                rs: n,
                cs: 1
            }
        ));
    }
}
