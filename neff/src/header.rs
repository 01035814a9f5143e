//! The 1024-byte NEFF header (little-endian, no magic).
//!
//! Layout: AWS `work-with-neff-files.rst` ("NEFF Header"), confirmed on the
//! real fixtures (reference §3.1). [`RawNeffHeader`] is the byte-exact wire
//! form; [`NeffHeader`] the plain Rust form.

use md5::Md5;
use sha2::{Digest, Sha256};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::{HashAlgorithm, NeffError};

/// Size of the NEFF header; the payload starts at this file offset.
pub const HEADER_SIZE: usize = 1024;

/// Highest accepted `neff_version_major` (libnrt accepts 0.x–2.x; minor is not checked).
pub const MAX_VERSION_MAJOR: u64 = 2;

/// `pkg_version` whose hash is SHA-256 over `data[0..data_size]` (all 32 bytes).
pub const PKG_VERSION_SHA256: u64 = 1;
/// `pkg_version` whose hash is MD5 over `data[0..data_size]` (`hash[0..16]`). Real files use 2.
pub const PKG_VERSION_MD5: u64 = 2;

// ---- feature bits (reference §3.5; decoded from neuronx-cc 2.24 `NeffPackager::writeNEFFFeatures`) ----

/// `collective_has_offset`
pub const FEATURE_COLLECTIVE_HAS_OFFSET: u64 = 0x2;
/// `neff_feature_custom_ops`
pub const FEATURE_CUSTOM_OPS: u64 = 0x4;
/// `neff_coalesced_ccops`
pub const FEATURE_COALESCED_CCOPS: u64 = 0x8;
/// `neff_queue_set_instances`
pub const FEATURE_QUEUE_SET_INSTANCES: u64 = 0x10;
/// `neff_has_functions`
pub const FEATURE_HAS_FUNCTIONS: u64 = 0x20;
/// `neff_feature_dynamic_pwp`
pub const FEATURE_DYNAMIC_PWP: u64 = 0x40;
/// `neff_feature_indirect_memcpy_32b_sem_wait`
pub const FEATURE_INDIRECT_MEMCPY_32B_SEM_WAIT: u64 = 0x80;
/// `neff_feature_indirect_memcpy_bound_check`
pub const FEATURE_INDIRECT_MEMCPY_BOUND_CHECK: u64 = 0x100;
/// `neff_feature_DMA_desc_higher_dim`
pub const FEATURE_DMA_DESC_HIGHER_DIM: u64 = 0x200;
/// `neff_feature_vnc` (virtual core / LNC); def.json lists `neff_feature_vnc` whenever it is set.
pub const FEATURE_VNC: u64 = 0x400;
/// DVE perf mode ("v3-2x-4x-dve-perf-mode" in neuron-profile; arch > 20).
pub const FEATURE_DVE_PERF_MODE: u64 = 0x800;
/// DGE (descriptor generation engine).
pub const FEATURE_DGE: u64 = 0x1000;
/// POOL_RSQRT
pub const FEATURE_POOL_RSQRT: u64 = 0x2000;
/// `neff_feature_remote_sem`
pub const FEATURE_REMOTE_SEM: u64 = 0x4000;
/// DGE_cast
pub const FEATURE_DGE_CAST: u64 = 0x8000;
/// vector_DGE
pub const FEATURE_VECTOR_DGE: u64 = 0x10000;
/// embedding_stride32
pub const FEATURE_EMBEDDING_STRIDE32: u64 = 0x20000;
/// SQI_no_rearm
pub const FEATURE_SQI_NO_REARM: u64 = 0x100000;
/// hardware_DGE
pub const FEATURE_HARDWARE_DGE: u64 = 0x200000;
/// partial_sb2sb_ccop
pub const FEATURE_PARTIAL_SB2SB_CCOP: u64 = 0x400000;
/// Companion bit set for arch > 39 (no name known).
pub const FEATURE_ARCH_GT39: u64 = 0x1000000;
/// large_tensor_support
pub const FEATURE_LARGE_TENSOR_SUPPORT: u64 = 0x2000000;

/// Project-defined (NOT an AWS bit): the NEFF's engine `.bin` files use the
/// project's 64-byte test ISA encoding instead of a real one.
///
/// Real libnrt 2.31 rejects any `feature_bits & 0x7FFF_FFFF_F800_0000` on a
/// 2.x NEFF (see [`LIBNRT_REJECTED_FEATURE_MASK`]), so **a real runtime refuses
/// every NEFF carrying this bit** — deliberately: such files only make sense
/// on the emulator.
pub const FEATURE_EMU_TEST_ISA: u64 = 1 << 62;

/// Bits libnrt 2.31 refuses on NEFF 2.x (it knows bits 0..26). Informational.
pub const LIBNRT_REJECTED_FEATURE_MASK: u64 = 0x7FFF_FFFF_F800_0000;

const _: () = assert!(FEATURE_EMU_TEST_ISA & LIBNRT_REJECTED_FEATURE_MASK != 0);

/// Every AWS feature bit with its name (def.json string where one exists).
pub const FEATURES: &[(u64, &str)] = &[
    (FEATURE_COLLECTIVE_HAS_OFFSET, "collective_has_offset"),
    (FEATURE_CUSTOM_OPS, "neff_feature_custom_ops"),
    (FEATURE_COALESCED_CCOPS, "neff_coalesced_ccops"),
    (FEATURE_QUEUE_SET_INSTANCES, "neff_queue_set_instances"),
    (FEATURE_HAS_FUNCTIONS, "neff_has_functions"),
    (FEATURE_DYNAMIC_PWP, "neff_feature_dynamic_pwp"),
    (
        FEATURE_INDIRECT_MEMCPY_32B_SEM_WAIT,
        "neff_feature_indirect_memcpy_32b_sem_wait",
    ),
    (
        FEATURE_INDIRECT_MEMCPY_BOUND_CHECK,
        "neff_feature_indirect_memcpy_bound_check",
    ),
    (
        FEATURE_DMA_DESC_HIGHER_DIM,
        "neff_feature_DMA_desc_higher_dim",
    ),
    (FEATURE_VNC, "neff_feature_vnc"),
    (FEATURE_DVE_PERF_MODE, "dve_perf_mode"),
    (FEATURE_DGE, "dge"),
    (FEATURE_POOL_RSQRT, "pool_rsqrt"),
    (FEATURE_REMOTE_SEM, "neff_feature_remote_sem"),
    (FEATURE_DGE_CAST, "dge_cast"),
    (FEATURE_VECTOR_DGE, "vector_dge"),
    (FEATURE_EMBEDDING_STRIDE32, "embedding_stride32"),
    (FEATURE_SQI_NO_REARM, "sqi_no_rearm"),
    (FEATURE_HARDWARE_DGE, "hardware_dge"),
    (FEATURE_PARTIAL_SB2SB_CCOP, "partial_sb2sb_ccop"),
    (FEATURE_ARCH_GT39, "arch_gt39"),
    (FEATURE_LARGE_TENSOR_SUPPORT, "large_tensor_support"),
];

const fn known_aws_bits() -> u64 {
    let mut acc = 0;
    let mut i = 0;
    while i < FEATURES.len() {
        acc |= FEATURES[i].0;
        i += 1;
    }
    acc
}

/// All feature bits the reader accepts: the AWS table plus [`FEATURE_EMU_TEST_ISA`].
pub const KNOWN_FEATURE_BITS: u64 = known_aws_bits() | FEATURE_EMU_TEST_ISA;

/// Names of the bits set in `bits` (unknown bits are ignored).
pub fn feature_names(bits: u64) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = FEATURES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if bits & FEATURE_EMU_TEST_ISA != 0 {
        v.push("emu_test_isa");
    }
    v
}

/// Byte-exact wire form of the header. Offsets are asserted in the tests.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct RawNeffHeader {
    /// @0
    pub pkg_version: U64,
    /// @8
    pub header_size: U64,
    /// @16
    pub data_size: U64,
    /// @24
    pub version_major: U64,
    /// @32
    pub version_minor: U64,
    /// @40
    pub build_version: [u8; 128],
    /// @168
    pub num_tpb: U32,
    /// @172
    pub hash: [u8; 32],
    /// @204
    pub uuid: [u8; 16],
    /// @220
    pub name: [u8; 256],
    /// @476
    pub requested_tpb_count: U32,
    /// @480
    pub tpb_per_node: [u8; 64],
    /// @544
    pub feature_bits: U64,
    /// @552
    pub lnc_size: U32,
    /// @556
    pub pad: [u8; 468],
}

const _: () = assert!(core::mem::size_of::<RawNeffHeader>() == HEADER_SIZE);

/// The decoded NEFF header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeffHeader {
    /// Packager version; selects the hash algorithm (1 SHA-256, 2 MD5). Real files: 2.
    pub pkg_version: u64,
    /// Must be 1024.
    pub header_size: u64,
    /// Bytes of payload after the header (gzip member + zero padding).
    pub data_size: u64,
    /// NEFF major version (1 trn1, 2 trn2); > 2 is rejected.
    pub version_major: u64,
    /// NEFF minor version (not checked).
    pub version_minor: u64,
    /// NUL-padded build string (empty in real compiler output).
    pub build_version: [u8; 128],
    /// Logical cores needed ("number_of_logical_neuroncores").
    pub num_tpb: u32,
    /// Package hash; pkg 2 uses `[0..16]` (MD5), pkg 1 all 32 bytes (SHA-256).
    pub hash: [u8; 32],
    /// Model identity (the driver's per-NC load lock is keyed by it).
    pub uuid: [u8; 16],
    /// NUL-terminated NEFF name (e.g. `file.neff`).
    pub name: [u8; 256],
    /// TPBs requested at compile time.
    pub requested_tpb_count: u32,
    /// TPBs per kelf node, one byte per node.
    pub tpb_per_node: [u8; 64],
    /// Incompatible-feature mask (see [`KNOWN_FEATURE_BITS`]).
    pub feature_bits: u64,
    /// Physical cores per logical core (1 trn1, 2 trn2).
    pub lnc_size: u32,
}

impl Default for NeffHeader {
    /// pkg 2, header 1024, version 2.0, num_tpb 1, requested 1, tpb_per_node `[1,0,..]`,
    /// no features, lnc 1, everything else zero.
    fn default() -> Self {
        let mut tpb_per_node = [0u8; 64];
        tpb_per_node[0] = 1;
        NeffHeader {
            pkg_version: PKG_VERSION_MD5,
            header_size: HEADER_SIZE as u64,
            data_size: 0,
            version_major: 2,
            version_minor: 0,
            build_version: [0; 128],
            num_tpb: 1,
            hash: [0; 32],
            uuid: [0; 16],
            name: [0; 256],
            requested_tpb_count: 1,
            tpb_per_node,
            feature_bits: 0,
            lnc_size: 1,
        }
    }
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl NeffHeader {
    /// Decodes the first 1024 bytes without any validation beyond the length.
    pub fn decode(bytes: &[u8]) -> Result<NeffHeader, NeffError> {
        let (raw, _) = RawNeffHeader::read_from_prefix(bytes)
            .map_err(|_| NeffError::FileTooShort { len: bytes.len() })?;
        Ok(Self::from_raw(&raw))
    }

    /// Decodes the header and applies the checks that need no file length:
    /// `header_size == 1024`, `version_major <= 2`, no unknown feature bits.
    /// (`data_size` against the file length is checked by [`crate::Neff::parse`].)
    pub fn parse(bytes: &[u8]) -> Result<NeffHeader, NeffError> {
        let h = Self::decode(bytes)?;
        h.check()?;
        Ok(h)
    }

    /// The header-only gates, in the order the reader applies them.
    pub fn check(&self) -> Result<(), NeffError> {
        if self.header_size != HEADER_SIZE as u64 {
            return Err(NeffError::HeaderSizeMismatch {
                header_size: self.header_size,
            });
        }
        self.check_version_and_features()
    }

    pub(crate) fn check_version_and_features(&self) -> Result<(), NeffError> {
        if self.version_major > MAX_VERSION_MAJOR {
            return Err(NeffError::UnsupportedVersion {
                major: self.version_major,
                minor: self.version_minor,
            });
        }
        let unknown = self.feature_bits & !KNOWN_FEATURE_BITS;
        if unknown != 0 {
            return Err(NeffError::UnknownFeatureBits {
                bits: self.feature_bits,
                unknown,
            });
        }
        Ok(())
    }

    /// Plain form from the wire form.
    pub fn from_raw(raw: &RawNeffHeader) -> NeffHeader {
        NeffHeader {
            pkg_version: raw.pkg_version.get(),
            header_size: raw.header_size.get(),
            data_size: raw.data_size.get(),
            version_major: raw.version_major.get(),
            version_minor: raw.version_minor.get(),
            build_version: raw.build_version,
            num_tpb: raw.num_tpb.get(),
            hash: raw.hash,
            uuid: raw.uuid,
            name: raw.name,
            requested_tpb_count: raw.requested_tpb_count.get(),
            tpb_per_node: raw.tpb_per_node,
            feature_bits: raw.feature_bits.get(),
            lnc_size: raw.lnc_size.get(),
        }
    }

    /// Wire form (pad zeroed).
    pub fn to_raw(&self) -> RawNeffHeader {
        let mut raw = RawNeffHeader::new_zeroed();
        raw.pkg_version.set(self.pkg_version);
        raw.header_size.set(self.header_size);
        raw.data_size.set(self.data_size);
        raw.version_major.set(self.version_major);
        raw.version_minor.set(self.version_minor);
        raw.build_version = self.build_version;
        raw.num_tpb.set(self.num_tpb);
        raw.hash = self.hash;
        raw.uuid = self.uuid;
        raw.name = self.name;
        raw.requested_tpb_count.set(self.requested_tpb_count);
        raw.tpb_per_node = self.tpb_per_node;
        raw.feature_bits.set(self.feature_bits);
        raw.lnc_size.set(self.lnc_size);
        raw
    }

    /// The 1024 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out.copy_from_slice(self.to_raw().as_bytes());
        out
    }

    /// The name up to the first NUL (lossy UTF-8).
    pub fn name_str(&self) -> String {
        c_string(&self.name)
    }

    /// The build version up to the first NUL (lossy UTF-8).
    pub fn build_version_str(&self) -> String {
        c_string(&self.build_version)
    }

    /// Sets the name; at most 255 bytes (the field is NUL-terminated) and no NUL.
    pub fn set_name(&mut self, name: &str) -> Result<(), NeffError> {
        let b = name.as_bytes();
        if b.len() >= self.name.len() || b.contains(&0) {
            return Err(NeffError::NameTooLong { len: b.len() });
        }
        self.name = [0; 256];
        self.name[..b.len()].copy_from_slice(b);
        Ok(())
    }

    /// UUID as `8-4-4-4-12` lowercase hex.
    pub fn uuid_string(&self) -> String {
        let h = hex(&self.uuid);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// Names of the set feature bits.
    pub fn feature_names(&self) -> Vec<&'static str> {
        feature_names(self.feature_bits)
    }

    /// The algorithm `pkg_version` selects, or [`NeffError::UnsupportedPackager`].
    pub fn hash_algorithm(&self) -> Result<HashAlgorithm, NeffError> {
        match self.pkg_version {
            PKG_VERSION_SHA256 => Ok(HashAlgorithm::Sha256),
            PKG_VERSION_MD5 => Ok(HashAlgorithm::Md5),
            other => Err(NeffError::UnsupportedPackager { pkg_version: other }),
        }
    }

    /// Computes the hash field for `data` (= `data[0..data_size]`) under this
    /// header's `pkg_version`: SHA-256 fills all 32 bytes, MD5 the first 16
    /// (the rest zero).
    pub fn compute_hash(&self, data: &[u8]) -> Result<[u8; 32], NeffError> {
        let mut out = [0u8; 32];
        match self.hash_algorithm()? {
            HashAlgorithm::Sha256 => out.copy_from_slice(&Sha256::digest(data)),
            HashAlgorithm::Md5 => out[..16].copy_from_slice(&Md5::digest(data)),
        }
        Ok(out)
    }

    /// Checks `hash` against `data` (= `data[0..data_size]`), the rule libnrt
    /// applies under `NEURON_RT_VALIDATE_HASH`: pkg 1 compares all 32 bytes of
    /// SHA-256, pkg 2 the first 16 bytes against MD5 (the upper 16 are never
    /// compared). NOTE: real neuronx-cc files fail this (reference §3.4).
    pub fn verify_hash(&self, data: &[u8]) -> Result<(), NeffError> {
        let algorithm = self.hash_algorithm()?;
        let computed = self.compute_hash(data)?;
        let n = match algorithm {
            HashAlgorithm::Sha256 => 32,
            HashAlgorithm::Md5 => 16,
        };
        if computed[..n] != self.hash[..n] {
            return Err(NeffError::HashMismatch {
                pkg_version: self.pkg_version,
                algorithm,
                data_size: data.len() as u64,
                stored: hex(&self.hash[..n]),
                computed: hex(&computed[..n]),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn raw_offsets_match_the_real_layout() {
        assert_eq!(offset_of!(RawNeffHeader, pkg_version), 0);
        assert_eq!(offset_of!(RawNeffHeader, header_size), 8);
        assert_eq!(offset_of!(RawNeffHeader, data_size), 16);
        assert_eq!(offset_of!(RawNeffHeader, version_major), 24);
        assert_eq!(offset_of!(RawNeffHeader, version_minor), 32);
        assert_eq!(offset_of!(RawNeffHeader, build_version), 40);
        assert_eq!(offset_of!(RawNeffHeader, num_tpb), 168);
        assert_eq!(offset_of!(RawNeffHeader, hash), 172);
        assert_eq!(offset_of!(RawNeffHeader, uuid), 204);
        assert_eq!(offset_of!(RawNeffHeader, name), 220);
        assert_eq!(offset_of!(RawNeffHeader, requested_tpb_count), 476);
        assert_eq!(offset_of!(RawNeffHeader, tpb_per_node), 480);
        assert_eq!(offset_of!(RawNeffHeader, feature_bits), 544);
        assert_eq!(offset_of!(RawNeffHeader, lnc_size), 552);
        assert_eq!(offset_of!(RawNeffHeader, pad), 556);
        assert_eq!(core::mem::size_of::<RawNeffHeader>(), 1024);
    }

    #[test]
    fn known_bits_cover_the_table_and_test_isa() {
        assert_eq!(KNOWN_FEATURE_BITS, 0x4000_0000_0373_fffe);
        assert_eq!(KNOWN_FEATURE_BITS & 1, 0);
        assert_ne!(KNOWN_FEATURE_BITS & FEATURE_EMU_TEST_ISA, 0);
        // 0xc00 is "virtual-core, v3-2x-4x-dve-perf-mode" in neuron-profile.
        assert_eq!(feature_names(0xc00), ["neff_feature_vnc", "dve_perf_mode"]);
    }

    #[test]
    fn header_round_trips_through_bytes() {
        let mut h = NeffHeader {
            data_size: 10240,
            feature_bits: FEATURE_VNC,
            lnc_size: 2,
            ..NeffHeader::default()
        };
        h.set_name("file.neff").expect("short name");
        h.uuid = [0xab; 16];
        let bytes = h.to_bytes();
        assert_eq!(&bytes[220..229], b"file.neff");
        assert_eq!(bytes[552], 2);
        let back = NeffHeader::parse(&bytes).expect("valid header");
        assert_eq!(back, h);
        assert_eq!(back.name_str(), "file.neff");
        assert_eq!(back.uuid_string(), "abababab-abab-abab-abab-abababababab");
    }

    #[test]
    fn set_name_rejects_overlong_names() {
        let mut h = NeffHeader::default();
        assert!(h.set_name(&"a".repeat(255)).is_ok());
        assert!(matches!(
            h.set_name(&"a".repeat(256)),
            Err(NeffError::NameTooLong { len: 256 })
        ));
    }
}
