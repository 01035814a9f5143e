//! The project's reference GpSimd microcode: a deterministic IRAM/DRAM pair generated here
//! (never AWS bytes). The device model implements GpSimd operations natively for exactly this
//! image, identified by SHA-256; the runtime stages it when no carrier is found.

use sha2::{Digest, Sha256};

/// IRAM image size in bytes (project-defined).
pub const IRAM_LEN: usize = 4096;
/// DRAM image size in bytes (project-defined).
pub const DRAM_LEN: usize = 1024;

/// Deterministic filler: a tag, then a splitmix64 stream seeded by `seed`.
fn blob(tag: &[u8], seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&tag[..tag.len().min(len)]);
    let mut s = seed;
    while out.len() < len {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&z.to_le_bytes()[..take]);
    }
    out
}

/// The reference IRAM image.
pub fn iram() -> Vec<u8> {
    blob(
        b"NEURON-EMU REFERENCE GPSIMD MICROCODE IRAM v1\0",
        0x4e58_5543_0001,
        IRAM_LEN,
    )
}

/// The reference DRAM image.
pub fn dram() -> Vec<u8> {
    blob(
        b"NEURON-EMU REFERENCE GPSIMD MICROCODE DRAM v1\0",
        0x4e58_5543_0002,
        DRAM_LEN,
    )
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A digest as lowercase hex.
pub fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of [`iram`].
pub fn iram_sha256() -> [u8; 32] {
    sha256(&iram())
}

/// SHA-256 of [`dram`].
pub fn dram_sha256() -> [u8; 32] {
    sha256(&dram())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        assert_eq!(iram(), iram());
        assert_eq!(iram().len(), IRAM_LEN);
        assert_eq!(dram().len(), DRAM_LEN);
        assert_ne!(iram_sha256(), dram_sha256());
        assert!(iram().starts_with(b"NEURON-EMU REFERENCE"));
        assert_eq!(hex(&[0xab; 32]).len(), 64);
    }
}
