//! The runs of one DMA transfer copied as a batch: between HBM pages and a core's SBUF/PSUM
//! they are independent copies into disjoint bytes, so a large transfer is cut into pieces
//! for the data-path helpers (`fanout`). A host copy of a few hundred KiB out of the last
//! level cache runs about twice as fast on two CPUs as on one (`docs/performance.md`,
//! 2026-12-05, eighth session). No run reads what another writes, so the bytes cannot depend
//! on the split.
#![allow(unsafe_code)]

use crate::shortcopy::copy_short;

/// One run: `len` bytes from `from` to `to`.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    pub from: *const u8,
    pub to: *mut u8,
    pub len: usize,
}

// SAFETY: a `Run` is two addresses and a length; they are dereferenced only inside [`copy`],
// whose caller vouches for them for the duration of the call (a list of runs may be kept,
// cleared, between transfers).
unsafe impl Send for Run {}
// SAFETY: as for `Send`: shared `Run`s are only read as plain values.
unsafe impl Sync for Run {}

/// Transfers of fewer bytes stay on their thread: a helper's join costs a few microseconds.
pub const SHARE_BYTES: usize = 128 << 10;

/// Bytes one piece of a shared transfer holds at least (4-8 pieces for the compiler's
/// 256-512 KiB spills; one piece per worker measured the same, `docs/performance.md`).
const PIECE_BYTES: usize = 64 << 10;

/// Whether the `num[0] x num[1]` elements of `elem` bytes at `i0·step[0] + i1·step[1]` (a
/// DMA side's access pattern) are pairwise apart: each dimension's elements step at least an
/// element apart, and the longer step clears the whole run of the shorter. Sufficient, not
/// necessary (an interleaving that happens to miss is refused); false where a sum overflows.
pub fn pattern_disjoint(num: [u64; 2], step: [u64; 2], elem: u64) -> bool {
    // Dimensions of one element take no room of their own.
    let mut dims = [(step[0], num[0]), (step[1], num[1])];
    dims.sort_unstable();
    let mut reach = elem; // bytes the dimensions so far span from their first element
    for (s, n) in dims.into_iter().filter(|d| d.1 > 1) {
        if s < reach {
            return false;
        }
        let Some(r) = (n - 1).checked_mul(s).and_then(|x| x.checked_add(reach)) else {
            return false;
        };
        reach = r;
    }
    true
}

/// Copy every run in order on this thread, or, where `share` and the runs hold at least
/// [`SHARE_BYTES`], in pieces on this thread and the free data-path helpers
/// ([`crate::fanout::run`], which keeps everything here where fan-out is off). With `ahead`,
/// the source of the run that many places on is asked for early where it is a cache line or longer (rows
/// of a strided transfer are each too short for the hardware prefetcher; shorter runs lie
/// close together).
///
/// # Safety
/// For the whole call every run's `len` bytes at `from` must be readable and at `to`
/// writable, and nothing else may access the destinations. Where `share` is set, no two
/// runs' destinations may overlap and no source may overlap a destination.
pub unsafe fn copy(runs: &[Run], ahead: Option<usize>, share: bool) {
    let one = |rs: &[Run]| {
        for (i, r) in rs.iter().enumerate() {
            if let Some(next) = ahead
                .and_then(|a| rs.get(i.saturating_add(a)))
                .filter(|r| r.len >= 64)
            {
                let end = next.len.min(8 * 64);
                for o in (0..end).step_by(64) {
                    crate::prefetch::line(next.from.wrapping_add(o));
                }
            }
            // SAFETY: the caller's contract: both ranges are live for `len` bytes, the
            // destination is touched by no one else, and (disjoint) apart from the source.
            let (to, from) = unsafe {
                (
                    std::slice::from_raw_parts_mut(r.to, r.len),
                    std::slice::from_raw_parts(r.from, r.len),
                )
            };
            copy_short(to, from);
        }
    };
    let total = runs.iter().fold(0usize, |t, r| t.saturating_add(r.len));
    if !share || total < SHARE_BYTES || runs.len() < 2 || crate::fanout::workers() <= 1 {
        return one(runs);
    }
    let pieces = (total / PIECE_BYTES).clamp(2, 16).min(runs.len());
    let per = runs.len().div_ceil(pieces);
    let n = runs.len().div_ceil(per);
    crate::fanout::run(n, &|i| {
        let start = i * per;
        one(&runs[start..(start + per).min(runs.len())]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern check against every pair of elements, on small random patterns: it may
    /// refuse disjoint ones, never pass overlapping ones.
    #[test]
    fn disjoint_patterns_have_no_common_byte() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let (mut passed, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let elem = 1 + next(8);
            let num = [1 + next(6), 1 + next(6)];
            let step = [next(40), next(40)];
            let mut bytes = std::collections::HashSet::new();
            let mut apart = true;
            for i1 in 0..num[1] {
                for i0 in 0..num[0] {
                    let at = i0 * step[0] + i1 * step[1];
                    for b in at..at + elem {
                        apart &= bytes.insert(b);
                    }
                }
            }
            if pattern_disjoint(num, step, elem) {
                assert!(apart, "{num:?} {step:?} {elem}");
                passed += 1;
            } else {
                refused += 1;
            }
        }
        assert!(passed > 1000 && refused > 1000, "{passed} {refused}");
        // A spill's pattern, a KV-cache row load, and what overflows.
        assert!(pattern_disjoint([2, 128], [262_144, 2048], 2048));
        assert!(pattern_disjoint([1, 128], [0, 4096], 256));
        assert!(!pattern_disjoint([2, 128], [262_144, 2048], 4096));
        assert!(!pattern_disjoint([4, 3], [u64::MAX / 2, 8], 8));
    }

    /// Shared or not, large or small, in pieces or whole: every run lands where it goes, and
    /// nothing else is written.
    #[test]
    fn shared_copies_equal_copies_in_order() {
        // 256 rows of 2 KiB from one buffer's 4 KiB-strided rows into another's rows in a
        // permuted order (a spill's pattern), then rows of 1-40 bytes.
        for (rows, len, stride) in [(256usize, 2048usize, 4096usize), (3000, 40, 64), (7, 3, 5)] {
            let src: Vec<u8> = (0..rows * stride).map(|i| (i * 31 % 251) as u8).collect();
            let mut want = vec![0xAAu8; rows * len + 64];
            let mut got = want.clone();
            let order: Vec<usize> = (0..rows).map(|r| (r * 7 + 3) % rows).collect();
            for (i, &r) in order.iter().enumerate() {
                want[i * len..(i + 1) * len].copy_from_slice(&src[r * stride..r * stride + len]);
            }
            for share in [false, true] {
                got.fill(0xAA);
                let runs: Vec<Run> = order
                    .iter()
                    .enumerate()
                    .map(|(i, &r)| Run {
                        from: src[r * stride..].as_ptr(),
                        to: got[i * len..].as_mut_ptr(),
                        len,
                    })
                    .collect();
                crate::fanout::with(true, || {
                    // SAFETY: every run lies in `src` and `got`, destinations disjoint.
                    unsafe { copy(&runs, Some(8), share) }
                });
                assert!(got == want, "{rows} rows of {len}, shared {share}");
            }
        }
    }
}
