//! Cache hints for the data path: a core's partitions lie 256 KiB (SBUF storage) or 16 KiB
//! (PSUM) apart, and a loop over them touches a few hundred bytes of each, streams too short
//! for the hardware prefetcher to pick up. Asking for the next rows early overlaps their
//! cache misses with the work on the current ones (`docs/performance.md`, 2026-12-03: the
//! AMX product into PSUM and the transposes gained; the gathers and scatters did not). A
//! hint only: no result depends on it.
#![allow(unsafe_code)]

/// Ask for the cache line holding `p` in L1 (and L2); any address may be named, including
/// one past an allocation (a prefetch never faults and reads nothing architecturally).
#[inline]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 has no architectural effect and cannot fault, whatever `p` is;
        // SSE is part of x86-64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for every cache line holding a byte of the `len` bytes at `p` (none for `len` 0); as
/// [`line`], any addresses may be named.
#[inline]
pub fn lines<T>(p: *const T, len: usize) {
    let start = p as usize;
    let end = start.saturating_add(len);
    let mut at = start & !63;
    while at < end {
        line(at as *const u8);
        match at.checked_add(64) {
            Some(next) => at = next,
            None => break, // the address space's last line
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn any_address_may_be_named() {
        let v = [1u8; 100];
        for off in (0..4096).step_by(64) {
            super::line(v.as_ptr().wrapping_add(off));
        }
        super::line(std::ptr::null::<u8>());
        super::lines(v.as_ptr().wrapping_add(13), 70);
        super::lines(v.as_ptr(), 0);
        super::lines(usize::MAX as *const u8, 4096);
        super::line(usize::MAX as *const u8);
        assert_eq!(v[99], 1);
    }
}
