//! The one error type of the container reader and writer.

use std::io;

use crate::header::HEADER_SIZE;
use crate::npy::NpyError;

/// Hash algorithm selected by `pkg_version` (1 → SHA-256, 2 → MD5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// `pkg_version` 1: SHA-256 over `data[0..data_size]`, all 32 bytes compared.
    Sha256,
    /// `pkg_version` 2: MD5 over `data[0..data_size]`, `hash[0..16]` compared.
    Md5,
}

impl std::fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HashAlgorithm::Sha256 => "SHA-256",
            HashAlgorithm::Md5 => "MD5",
        })
    }
}

/// Everything that can go wrong reading or writing a NEFF.
///
/// One variant per distinct failure; each names what failed and where.
/// Underlying causes are kept as `#[source]` and not repeated in the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NeffError {
    /// The file cannot even hold the 1024-byte header.
    #[error("NEFF file is {len} bytes, shorter than the {HEADER_SIZE}-byte header")]
    FileTooShort { len: usize },

    /// `header_size` (offset 8) is not 1024.
    #[error("NEFF header_size (offset 8) is {header_size}, expected {HEADER_SIZE}")]
    HeaderSizeMismatch { header_size: u64 },

    /// `data_size` (offset 16) runs past the end of the file.
    #[error(
        "NEFF data_size (offset 16) is {data_size} but only {available} bytes follow the header"
    )]
    DataSizeMismatch { data_size: u64, available: u64 },

    /// `neff_version_major` (offset 24) is above 2.
    #[error("NEFF version {major}.{minor} is not supported (accepted: 0.x-2.x)")]
    UnsupportedVersion { major: u64, minor: u64 },

    /// `feature_bits` (offset 544) has bits this reader does not know.
    #[error("NEFF feature_bits (offset 544) {bits:#x} contain unknown bits {unknown:#x}")]
    UnknownFeatureBits { bits: u64, unknown: u64 },

    /// Hash validation was requested and the stored hash differs.
    #[error(
        "NEFF hash (offset 172) mismatch: pkg_version {pkg_version} selects {algorithm} over \
         data[0..{data_size}], header holds {stored}, computed {computed}"
    )]
    HashMismatch {
        pkg_version: u64,
        algorithm: HashAlgorithm,
        data_size: u64,
        /// Hex of the compared part of the stored hash.
        stored: String,
        /// Hex of the computed digest.
        computed: String,
    },

    /// Hash validation was requested and `pkg_version` selects no known algorithm.
    #[error(
        "unsupported NEFF packager: pkg_version (offset 0) {pkg_version} selects no hash algorithm"
    )]
    UnsupportedPackager { pkg_version: u64 },

    /// The gzip member at the start of the payload (file offset 1024) is corrupt or truncated.
    #[error("NEFF payload gzip member (file offset {HEADER_SIZE}) is corrupt or truncated")]
    Gzip(#[source] io::Error),

    /// The inflated payload is not a readable tar archive.
    #[error("NEFF payload tar archive is malformed at {at}")]
    Tar {
        /// Which entry (index, and the last good member) the failure happened at.
        at: String,
        #[source]
        source: io::Error,
    },

    /// Non-zero bytes follow the gzip member inside `data[0..data_size]`.
    #[error("non-zero bytes after the NEFF payload gzip member, first at file offset {offset}")]
    TrailingGarbage { offset: u64 },

    /// The inflated payload is larger than [`crate::Limits::max_inflated_bytes`].
    #[error("NEFF payload inflates to more than the {limit}-byte limit")]
    InflatedTooLarge { limit: u64 },

    /// The archive holds more than [`crate::Limits::max_members`] regular files.
    #[error("NEFF payload holds more than the limit of {limit} members")]
    TooManyMembers { limit: usize },

    /// One member is larger than [`crate::Limits::max_member_bytes`] (or than a ustar header can hold, when writing).
    #[error("NEFF member {path:?} is {size} bytes, over the {limit}-byte limit")]
    MemberTooLarge { path: String, size: u64, limit: u64 },

    /// A member path is absolute, has a `..` component, or is otherwise unusable.
    #[error("bad NEFF member path {path:?}: {reason}")]
    BadMemberPath { path: String, reason: &'static str },

    /// Two archive entries have the same path.
    #[error("duplicate NEFF member {path:?}")]
    DuplicateMember { path: String },

    /// A member named by another file (or by convention) is absent.
    #[error("NEFF member {path:?} (referenced by {referenced_by}) is missing")]
    MissingMember { path: String, referenced_by: String },

    /// A JSON member is not syntactically valid JSON (or could not be serialized, when writing).
    #[error("NEFF member {member:?} is not valid JSON")]
    Json {
        member: String,
        #[source]
        source: serde_json::Error,
    },

    /// A JSON member is valid JSON but does not have the expected shape.
    #[error("NEFF member {member:?} has an unexpected JSON shape: {what}")]
    JsonShape { member: String, what: String },

    /// A `.npy` member is malformed.
    #[error("NEFF member {member:?} is not a valid .npy array")]
    Npy {
        member: String,
        #[source]
        source: NpyError,
    },

    /// The NEFF name does not fit the 256-byte NUL-terminated header field.
    #[error("NEFF name is {len} bytes; the header field holds at most 255")]
    NameTooLong { len: usize },
}
