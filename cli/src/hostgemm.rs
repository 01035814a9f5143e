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

/// Which GEMM kernel the device model's MATMULs run on: every operand type is widened to fp32
/// and multiplied by the blocked SGEMM above (`devmodel/src/gemm.rs`); there is no other path.
pub const DEVICE_GEMM_PATH: &str = "portable";

/// Whether the CPU has AMX-BF16 and the OS enables its tile state: CPUID leaf 7 EDX bits 22
/// (AMX-BF16) and 24 (AMX-TILE), and XCR0 bits 17-18 (XTILECFG, XTILEDATA). The emulator has
/// no AMX kernel; this only says what the host offers.
pub fn amx_present() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
        // CPUID exists on every x86_64 CPU (a safe intrinsic); leaf 7 is read only if the
        // maximum leaf (leaf 0 EAX) includes it.
        let (max, l1) = (__cpuid(0).eax, __cpuid(1));
        if max < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        let cpu = edx & (1 << 22) != 0 && edx & (1 << 24) != 0;
        // XGETBV needs XSAVE enabled by the OS (CPUID.1:ECX.OSXSAVE, bit 27).
        if !cpu || l1.ecx & (1 << 27) == 0 {
            return false;
        }
        // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 (XCR0) is defined.
        let xcr0 = unsafe { _xgetbv(0) };
        xcr0 & (0b11 << 17) == 0b11 << 17
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}
