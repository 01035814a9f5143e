//! NEFF container: 1024-byte header, gzip'd tar payload, typed JSON views, `.npy`.
//!
//! A NEFF (what AWS `neuronx-cc` writes) is a 1024-byte little-endian header
//! ([`NeffHeader`]) followed by `data_size` bytes of payload: one gzip member
//! holding a tar archive, then zero padding (reference
//! `nrt-api-and-neff.md` §3).
//!
//! - [`Neff::parse`] / [`Neff::parse_with`]: the strict reader. Every
//!   malformed input is a [`NeffError`], never a panic; time and memory are
//!   bounded by [`Limits`] (the gzip member is inflated through a counting
//!   reader that stops at `max_inflated_bytes`).
//! - Typed views of the manifest chain (`neff.json` → `kelf-0.json` →
//!   `sgNN/def.json` → engine JSONs / instruction files / constants):
//!   [`NeffJson`], [`Kelf`], [`SubgraphDef`], [`EngineJson`], [`TensorMap`],
//!   [`InfoJson`]; [`Neff::validate_references`] walks it.
//! - [`NeffWriter`]: deterministic writer whose output the reader accepts,
//!   including under `validate_hash`.
//! - [`npy`]: NumPy arrays (constants).
//!
//! # Gates the reader applies (as libnrt does, reference §3.5)
//!
//! `version_major > 2` → [`NeffError::UnsupportedVersion`]; any feature bit
//! outside [`KNOWN_FEATURE_BITS`] → [`NeffError::UnknownFeatureBits`].
//! [`KNOWN_FEATURE_BITS`] is the AWS table plus the project-defined
//! [`FEATURE_EMU_TEST_ISA`] (bit 62). **Real libnrt 2.31 rejects every bit in
//! `0x7FFF_FFFF_F800_0000`, so a real runtime refuses NEFFs carrying
//! [`FEATURE_EMU_TEST_ISA`]** — by design; they are emulator-only.
//!
//! # Hash
//!
//! Checked only with [`ParseOptions::validate_hash`] (libnrt's
//! `NEURON_RT_VALIDATE_HASH`, default off): `pkg_version` 1 → SHA-256 of
//! `data[0..data_size]` against all 32 bytes, 2 → MD5 against `hash[0..16]`,
//! anything else → [`NeffError::UnsupportedPackager`]. The real fixtures'
//! stored hashes match none of the obvious inputs (reference §3.4), so real
//! neuronx-cc files **fail** this check (asserted in the tests); files from
//! [`NeffWriter`] pass it.

mod container;
mod error;
mod header;
mod json;
mod memo;
pub mod npy;
mod writer;

pub use container::{
    normalize_member_path, Limits, Neff, ParseOptions, DEFAULT_KELF, INFO_JSON, NEFF_JSON,
    TENSOR_MAP_JSON,
};
pub use error::{HashAlgorithm, NeffError};
pub use header::*;
pub use json::*;
pub use npy::{NpyArray, NpyDtype, NpyError};
pub use writer::{uuid_from_name, NeffWriter, DATA_BLOCK};
