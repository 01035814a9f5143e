//! The matrix products MATMUL runs on: a bounds-checked front end to a blocked SGEMM
//! (`matrixmultiply`), so matmuls run on whole tiles straight out of SBUF/PSUM storage, and
//! (`amx`) bf16 tiles where the host has AMX; [`Path`] says which one a core uses.
#![allow(unsafe_code)]

pub mod amx;

/// The environment variable that chooses the GEMM path: `portable` forces the SGEMM for every
/// MATMUL; `auto` or `amx` (or unset) uses AMX tiles for bf16 and fp8 operands where the host
/// has them. fp16 operands stay on the SGEMM: split into bf16 parts they would need four tile
/// products per product, and packing the parts cost more than the tiles saved
/// (`docs/performance.md`, "AMX").
pub const ENV: &str = "NEURON_EMU_GEMM";

/// Which kernel a core's MATMULs of bf16-representable operands run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// fp32 SGEMM on operands widened to fp32: every host.
    Portable,
    /// AMX-BF16 tiles (`amx`) for bf16 and fp8 operands: hosts that have them, by default.
    Amx,
}

impl Path {
    /// The path `NEURON_EMU_GEMM` and the host give (read when a core's PE state is created
    /// or reset). An unknown value is reported once and treated as `auto`.
    pub fn from_env() -> Path {
        let v = std::env::var(ENV).unwrap_or_default();
        let v = v.trim();
        if !matches!(v, "" | "auto" | "portable" | "amx") {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("{ENV}={v:?} is not portable, amx or auto: using auto");
            });
        }
        if v == "portable" || !amx::available() {
            Path::Portable
        } else {
            Path::Amx
        }
    }

    /// The tile parts of an operand type on this path, or None if it runs on the SGEMM.
    pub fn amx_parts(self, dt: neuron_isa::Dtype) -> Option<amx::Parts> {
        match (self, amx::Parts::of(dt)) {
            (Path::Amx, Some(amx::Parts::Exact)) => Some(amx::Parts::Exact),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Amx => "amx",
        }
    }
}

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

/// `C = beta·C + P` for a dense product `P` (`m x n` in rows of `pitch`), into the strided
/// view `cv` of `c`: how an AMX product reaches PSUM. False (and nothing written) if the
/// view leaves `c` or `P` is too short. `beta == 0` ignores C's old contents (NaN-safe).
#[allow(clippy::too_many_arguments)]
pub fn add_into(
    m: usize,
    n: usize,
    p: &[f32],
    pitch: usize,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    if m == 0 || n == 0 {
        return true;
    }
    let fits = cv.last(m, n).is_some_and(|l| l < c.len());
    if !fits || pitch < n || p.len() < (m - 1) * pitch + n {
        return false;
    }
    for (j, row) in p.chunks(pitch).take(m).enumerate() {
        let base = cv.off + j * cv.rs;
        if cv.cs == 1 {
            let dst = &mut c[base..base + n];
            if beta == 0.0 {
                dst.copy_from_slice(&row[..n]);
            } else {
                dst.iter_mut().zip(&row[..n]).for_each(|(d, x)| *d += *x);
            }
        } else {
            for (col, x) in row[..n].iter().enumerate() {
                let at = base + col * cv.cs;
                c[at] = if beta == 0.0 { *x } else { c[at] + *x };
            }
        }
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
