//! The host baseline for benchmarks: the same blocked SGEMM the device model uses, called
//! directly on host matrices.
#![allow(unsafe_code)]

/// `c[m x n] = a^T b + beta c`, `a` is `[k x m]`, `b` is `[k x n]`, all row-major.
pub fn sgemm_at_b(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    assert!(
        a.len() >= k * m && b.len() >= k * n && c.len() >= m * n,
        "host gemm buffers too small"
    );
    // SAFETY: the assertion above guarantees every index the kernel touches is in bounds;
    // `c` is an exclusive borrow distinct from `a` and `b`.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            1,
            m as isize,
            b.as_ptr(),
            n as isize,
            1,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}
