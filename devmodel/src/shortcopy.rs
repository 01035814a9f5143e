//! Moves of a few bytes (a decode step's rows of one to four elements, a DMA's 2-byte
//! elements) as fixed-size copies: `copy_from_slice` of a length the compiler cannot see
//! becomes a `memcpy` call, which for 2 to 16 bytes costs more than the bytes.

/// `to.copy_from_slice(from)` (equal lengths), rows of 2, 4, 8 or 16 bytes as one fixed-size
/// move: a `memcpy` call for a few bytes cost more than the bytes.
#[inline(always)]
pub(crate) fn copy_short(to: &mut [u8], from: &[u8]) {
    fn fixed<const N: usize>(to: &mut [u8], from: &[u8]) -> bool {
        match (to.first_chunk_mut::<N>(), from.first_chunk::<N>()) {
            (Some(t), Some(f)) => {
                *t = *f;
                true
            }
            _ => false,
        }
    }
    let done = match from.len() {
        2 => fixed::<2>(to, from),
        4 => fixed::<4>(to, from),
        8 => fixed::<8>(to, from),
        16 => fixed::<16>(to, from),
        _ => false,
    };
    if !done {
        to.copy_from_slice(from);
    }
}

/// `bytes.copy_within(from..from + len, to)` for rows of 2, 4, 8 or 16 bytes, read whole
/// before written (so overlap is as `copy_within`'s); false, nothing done, for other lengths
/// or a range outside `bytes`.
#[inline(always)]
pub(crate) fn copy_short_within(bytes: &mut [u8], from: usize, len: usize, to: usize) -> bool {
    fn fixed<const N: usize>(bytes: &mut [u8], from: usize, to: usize) -> bool {
        let Some(v) = bytes
            .get(from..)
            .and_then(|b| b.first_chunk::<N>())
            .copied()
        else {
            return false;
        };
        match bytes.get_mut(to..).and_then(|b| b.first_chunk_mut::<N>()) {
            Some(t) => {
                *t = v;
                true
            }
            None => false,
        }
    }
    match len {
        2 => fixed::<2>(bytes, from, to),
        4 => fixed::<4>(bytes, from, to),
        8 => fixed::<8>(bytes, from, to),
        16 => fixed::<16>(bytes, from, to),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length 0 to 40 copies as `copy_from_slice` and `copy_within` would, the fixed
    /// sizes included; overlapping moves in both directions read before they write; ranges
    /// past the end are refused (false) for the in-place form.
    #[test]
    fn short_copies_equal_the_slice_copies() {
        let src: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(5))
            .collect();
        for len in 0..=40usize {
            let mut a = vec![0u8; len];
            copy_short(&mut a, &src[3..3 + len]);
            assert_eq!(a, &src[3..3 + len], "len {len}");
            for (from, to) in [(0usize, 1usize), (5, 2), (10, 10), (20, 3)] {
                let mut want = src.clone();
                want.copy_within(from..from + len, to);
                let mut got = src.clone();
                if !copy_short_within(&mut got, from, len, to) {
                    assert!(![2, 4, 8, 16].contains(&len), "len {len} refused");
                    got.copy_within(from..from + len, to);
                }
                assert_eq!(got, want, "len {len} from {from} to {to}");
            }
        }
        let mut b = [0u8; 10];
        assert!(!copy_short_within(&mut b, 6, 8, 0), "source past the end");
        assert!(
            !copy_short_within(&mut b, 0, 8, 6),
            "destination past the end"
        );
        assert_eq!(b, [0; 10]);
    }
}
