//! A fast hasher for the device's own lookup keys (HBM page numbers, 64-byte instruction
//! words): eight bytes at a time by a multiply and a fold, then splitmix64's finaliser so every key
//! bit reaches both the bucket bits and the tag bits. SipHash (std's default) cost more than
//! the lookups it guards (~140 instructions per page lookup, `docs/performance.md`). Not
//! resistant to chosen-key flooding: the keys are bounded by what a program can touch, and
//! the tables that use it are bounded too.

use std::hash::{BuildHasherDefault, Hasher};

/// The hasher; `Build` makes tables use it.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

/// `HashMap<K, V, Build>` hashes with [`FastHasher`].
pub type Build = BuildHasherDefault<FastHasher>;

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
        for b in chunks.remainder() {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        // The multiply carries low bits up; the fold brings the high ones down, so a word
        // that differs only in a chunk's top byte is not left with differences up there.
        let m = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = m ^ (m >> 32);
    }

    fn finish(&self) -> u64 {
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Keys a power of two apart (strided pages) spread over a table's buckets as random keys
    /// would (1024 keys into 1024 buckets fill ~632) instead of sharing low bits; so do words
    /// that differ in one byte.
    #[test]
    fn strided_and_near_keys_spread_over_buckets() {
        let b = Build::default();
        for shift in [0, 4, 10, 16, 20] {
            let buckets: std::collections::HashSet<u64> = (0..1024u64)
                .map(|i| b.hash_one(i << shift) & 1023)
                .collect();
            assert!(
                buckets.len() > 590,
                "stride 2^{shift}: {} of 1024 buckets",
                buckets.len()
            );
        }
        for byte in [0, 7, 8, 63] {
            let buckets: std::collections::HashSet<u64> = (0..1024u32)
                .map(|i| {
                    let mut w = [0u8; 64];
                    w[byte] = i as u8;
                    w[(byte + 1) % 64] = (i >> 8) as u8;
                    b.hash_one(w) & 1023
                })
                .collect();
            assert!(
                buckets.len() > 590,
                "byte {byte}: {} of 1024 buckets",
                buckets.len()
            );
        }
    }
}
