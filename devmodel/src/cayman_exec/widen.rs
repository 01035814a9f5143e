//! bf16 → f32 widening of gathered elements (an LDWEIGHTS of bf16 weights widens 16 Ki of
//! them per word, and a decode step's layers issue hundreds of those), and f32 → bf16
//! narrowing of scattered ones ([`bf16_from`]) and of a DMA's cast. Widening compiled for
//! AVX-512F or AVX2 where the CPU has them (chosen at run time: zero-extend sixteen or eight at
//! a time, shift into the top half), narrowing for AVX-512BW or AVX2, a scalar loop elsewhere; the same bits either way,
//! as a bf16 is the top half of its f32 and the narrowing loops are one loop compiled for
//! each (`tests::avx2_and_portable_widen_alike`, `avx2_and_portable_narrow_alike`).
#![allow(unsafe_code)]

use zerocopy::IntoBytes;

/// Runs shorter than this many bytes widen inline: a matrix-vector product gathers one
/// element per partition, where a call and a feature check would cost more than the element.
const SHORT: usize = 32;

/// Append the bf16 values of `src` (little-endian byte pairs; a trailing odd byte is
/// ignored) to `out` as f32.
#[inline]
pub(super) fn bf16_into(src: &[u8], out: &mut Vec<f32>) {
    if src.len() < SHORT {
        return portable(src, out);
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just above.
        unsafe { bf16_into_avx512(src, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        unsafe { bf16_into_avx2(src, out) };
        return;
    }
    portable(src, out);
}

/// The widening path this host runs: `avx512`, `avx2` or `portable`.
#[cfg(test)]
fn path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        return "avx512";
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        return "avx2";
    }
    "portable"
}

fn widen(lo: u8, hi: u8) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes([lo, hi])) << 16)
}

#[inline]
fn portable(src: &[u8], out: &mut Vec<f32>) {
    out.extend(src.chunks_exact(2).map(|b| widen(b[0], b[1])));
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bf16_into_avx2(src: &[u8], out: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    let n = src.len() / 2;
    let start = out.len();
    out.reserve(n);
    let vectors = n / 8;
    // SAFETY: `reserve` made room for `n` more elements past `start`; vector `v` reads bytes
    // `16v .. 16v + 16` of `src` (inside it: `16 * vectors <= 2n <= src.len()`) and writes
    // elements `start + 8v .. + 8` (inside the reserved room); `set_len` follows only once
    // every element up to `start + n` is written.
    unsafe {
        let dst = out.as_mut_ptr().add(start);
        for v in 0..vectors {
            let bits = _mm_loadu_si128(src.as_ptr().add(16 * v).cast());
            let words = _mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(bits));
            _mm256_storeu_si256(dst.add(8 * v).cast(), words);
        }
        for i in 8 * vectors..n {
            dst.add(i).write(widen(src[2 * i], src[2 * i + 1]));
        }
        out.set_len(start + n);
    }
}

/// [`bf16_into_avx2`] sixteen at a time.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn bf16_into_avx512(src: &[u8], out: &mut Vec<f32>) {
    use std::arch::x86_64::*;
    let n = src.len() / 2;
    let start = out.len();
    out.reserve(n);
    let vectors = n / 16;
    // SAFETY: `reserve` made room for `n` more elements past `start`; vector `v` reads bytes
    // `32v .. 32v + 32` of `src` (inside it: `32 * vectors <= 2n <= src.len()`) and writes
    // elements `start + 16v .. + 16` (inside the reserved room); `set_len` follows only once
    // every element up to `start + n` is written.
    unsafe {
        let dst = out.as_mut_ptr().add(start);
        for v in 0..vectors {
            let bits = _mm256_loadu_si256(src.as_ptr().add(32 * v).cast());
            let words = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(bits));
            _mm512_storeu_si512(dst.add(16 * v).cast(), words);
        }
        for i in 16 * vectors..n {
            dst.add(i).write(widen(src[2 * i], src[2 * i + 1]));
        }
        out.set_len(start + n);
    }
}

/// Store `vals` as bf16 bits in `out` (as many as both hold), rounded as
/// `pattern::bf16_bits` rounds (to nearest even; a NaN keeps its sign and top payload bits,
/// quiet): a scatter of bf16 rows. The same loop compiled for AVX2 where the CPU has it
/// (the baseline x86-64 target has no 32 → 16-bit pack, so it stays scalar there); the
/// same bits either way (`tests::avx2_and_portable_narrow_alike`).
pub(super) fn bf16_from(vals: &[f32], out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if out.len() >= SHORT && std::is_x86_feature_detected!("avx512bw") {
        // SAFETY: AVX-512BW (and so AVX-512F) was detected just above.
        unsafe { bf16_from_avx512(vals, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if out.len() >= SHORT && std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        unsafe { bf16_from_avx2(vals, out) };
        return;
    }
    bf16_from_portable(vals, out);
}

#[inline(always)]
fn bf16_from_portable(vals: &[f32], out: &mut [u16]) {
    for (o, x) in out.iter_mut().zip(vals) {
        *o = super::pattern::bf16_bits(*x);
    }
}

/// [`bf16_from`]'s loop compiled for AVX2 (and, below, for AVX-512BW: twice the lanes; a
/// CAST of 128 × 512 fp32 to bf16 17.3 → 11.0–11.7 µs, `elementwise_words_host_cost`).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bf16_from_avx2(vals: &[f32], out: &mut [u16]) {
    bf16_from_portable(vals, out)
}

/// # Safety
/// The CPU must have AVX-512F and AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn bf16_from_avx512(vals: &[f32], out: &mut [u16]) {
    bf16_from_portable(vals, out)
}

/// `src`'s little-endian fp32 values as little-endian bf16 bits in `out` (as many whole
/// values as both hold), rounded as `pattern::bf16_bits` rounds: a DMA's fp32 → bf16 cast.
/// Sixteen values at a time through fixed arrays (the loop the compiler vectorizes; over
/// byte chunks of unknown length it stayed scalar, ~1 ns a value), compiled for AVX2 where
/// the CPU has it; the same bits either way.
pub(crate) fn bf16_bytes_from_f32_bytes(src: &[u8], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if out.len() >= SHORT && std::is_x86_feature_detected!("avx512bw") {
        // SAFETY: AVX-512BW (and so AVX-512F) was detected just above.
        unsafe { narrow_bytes_avx512(src, out) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if out.len() >= SHORT && std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        unsafe { narrow_bytes_avx2(src, out) };
        return;
    }
    narrow_bytes_portable(src, out);
}

#[inline(always)]
fn narrow_bytes_portable(src: &[u8], out: &mut [u8]) {
    let n = (src.len() / 4).min(out.len() / 2);
    let (src, out) = (&src[..4 * n], &mut out[..2 * n]);
    let (mut s, mut o) = (src.chunks_exact(64), out.chunks_exact_mut(32));
    for (c, d) in (&mut s).zip(&mut o) {
        // Whole-array moves in and out (byte by byte, half the loop stayed scalar).
        let mut x = [0u32; 16];
        x.as_mut_bytes().copy_from_slice(c);
        let mut w = [0u16; 16];
        for (v, b) in w.iter_mut().zip(x) {
            *v = super::pattern::bf16_bits(f32::from_bits(u32::from_le(b))).to_le();
        }
        d.copy_from_slice(w.as_bytes());
    }
    for (d, c) in o
        .into_remainder()
        .chunks_exact_mut(2)
        .zip(s.remainder().chunks_exact(4))
    {
        d.copy_from_slice(
            &super::pattern::bf16_bits(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes(),
        );
    }
}

/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn narrow_bytes_avx2(src: &[u8], out: &mut [u8]) {
    narrow_bytes_portable(src, out)
}

/// # Safety
/// The CPU must have AVX-512F and AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn narrow_bytes_avx512(src: &[u8], out: &mut [u8]) {
    narrow_bytes_portable(src, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DMA's byte-wise cast gives `bf16_bits` of every whole value, at any length and
    /// byte offset, and writes nothing past them.
    #[test]
    fn byte_casts_round_as_bf16_bits() {
        let mut s = 5u64;
        let mut bits = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 32) as u32
        };
        let mut vals: Vec<u32> = (0..3000).map(|_| bits()).collect();
        vals.extend([
            0x3f80_8000,
            0x3f81_8000,
            0x7f80_0001,
            0xff80_0000,
            0xffc0_1234,
            0x8000_0000,
        ]);
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (len, skew) in (0..70).map(|l| (l, l % 3)).chain([(2999, 1), (3006, 0)]) {
            let src = &bytes[4 * skew..4 * (skew + len).min(vals.len())];
            let n = src.len() / 4;
            let mut got = vec![0xEEu8; 2 * n + 3];
            bf16_bytes_from_f32_bytes(&src[..4 * n], &mut got[1..1 + 2 * n]);
            for (i, v) in vals[skew..skew + n].iter().enumerate() {
                let want = super::super::pattern::bf16_bits(f32::from_bits(*v));
                let at = 1 + 2 * i;
                assert_eq!(
                    u16::from_le_bytes([got[at], got[at + 1]]),
                    want,
                    "{len}: {i}"
                );
            }
            assert_eq!((got[0], got[2 * n + 1], got[2 * n + 2]), (0xEE, 0xEE, 0xEE));
            // Portable and every wide loop the host has alike.
            let mut portable = vec![0u8; 2 * n];
            narrow_bytes_portable(&src[..4 * n], &mut portable);
            assert!(portable[..] == got[1..1 + 2 * n]);
            #[cfg(target_arch = "x86_64")]
            for (name, has, f) in [
                (
                    "avx2",
                    std::is_x86_feature_detected!("avx2"),
                    narrow_bytes_avx2 as unsafe fn(&[u8], &mut [u8]),
                ),
                (
                    "avx512",
                    std::is_x86_feature_detected!("avx512bw"),
                    narrow_bytes_avx512,
                ),
            ] {
                if has {
                    let mut wide = vec![0u8; 2 * n];
                    // SAFETY: the CPU has the loop's features (checked just above).
                    unsafe { f(&src[..4 * n], &mut wide) };
                    assert!(portable == wide, "{name}: {len} values");
                } else if len == 0 {
                    eprintln!("SKIPPED the {name} byte narrowing: not on this host");
                }
            }
        }
    }

    #[test]
    fn avx2_and_portable_narrow_alike() {
        eprintln!("narrowing path on this host: {}", path());
        let mut s = 9u64;
        let mut bits = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            (s >> 32) as u32
        };
        // Arbitrary bit patterns (NaNs, infinities, denormals among them) and rounding ties.
        let mut vals: Vec<f32> = (0..5000).map(|_| f32::from_bits(bits())).collect();
        vals.extend([
            f32::from_bits(0x3f80_8000),
            f32::from_bits(0x3f81_8000),
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xff80_0000),
            f32::from_bits(0x0000_8000),
            -0.0,
        ]);
        for len in (0..70).chain([4097, vals.len()]) {
            let want: Vec<u16> = vals[..len]
                .iter()
                .map(|x| super::super::pattern::bf16_bits(*x))
                .collect();
            let mut got = vec![7u16; len + 1];
            bf16_from(&vals[..len], &mut got);
            assert_eq!(&got[..len], &want[..], "{len} values");
            assert_eq!(got[len], 7, "past the values");
            // Each compiled loop the host has, whichever `bf16_from` picks.
            #[cfg(target_arch = "x86_64")]
            for (name, has, f) in [
                (
                    "avx2",
                    std::is_x86_feature_detected!("avx2"),
                    bf16_from_avx2 as unsafe fn(&[f32], &mut [u16]),
                ),
                (
                    "avx512",
                    std::is_x86_feature_detected!("avx512bw"),
                    bf16_from_avx512,
                ),
            ] {
                if has {
                    let mut got = vec![7u16; len + 1];
                    // SAFETY: the CPU has the loop's features (checked just above).
                    unsafe { f(&vals[..len], &mut got) };
                    assert_eq!(&got[..len], &want[..], "{name}: {len} values");
                    assert_eq!(got[len], 7, "{name}: past the values");
                } else if len == 0 {
                    eprintln!("SKIPPED the {name} narrowing loop: not on this host");
                }
            }
        }
    }

    #[test]
    fn avx2_and_portable_widen_alike() {
        eprintln!("widening path on this host: {}", path());
        let mut s = 5u64;
        for len in (0..70).chain([256, 4097]) {
            let src: Vec<u8> = (0..len)
                .map(|_| {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (s >> 56) as u8
                })
                .collect();
            let mut want = vec![1.5f32];
            portable(&src, &mut want);
            let mut got = vec![1.5f32];
            bf16_into(&src, &mut got);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{len} bytes");
            assert_eq!(got.len(), 1 + len / 2);
            // Each compiled loop the host has, whichever `bf16_into` picks.
            #[cfg(target_arch = "x86_64")]
            for (name, has, f) in [
                (
                    "avx2",
                    std::is_x86_feature_detected!("avx2"),
                    bf16_into_avx2 as unsafe fn(&[u8], &mut Vec<f32>),
                ),
                (
                    "avx512",
                    std::is_x86_feature_detected!("avx512f"),
                    bf16_into_avx512,
                ),
            ] {
                if has {
                    let mut got = vec![1.5f32];
                    // SAFETY: the CPU has the loop's features (checked just above).
                    unsafe { f(&src, &mut got) };
                    assert_eq!(bits(&got), bits(&want), "{name}: {len} bytes");
                } else if len == 0 {
                    eprintln!("SKIPPED the {name} widening loop: not on this host");
                }
            }
        }
        // NaN and infinity bit patterns pass through as bits.
        let mut out = Vec::new();
        bf16_into(&[0xc1, 0x7f, 0x80, 0xff], &mut out);
        assert_eq!(out[0].to_bits(), 0x7fc1_0000);
        assert_eq!(out[1], f32::NEG_INFINITY);
    }
}
