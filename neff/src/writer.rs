//! The NEFF writer: deterministic ustar + gzip + zero padding + header.

use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;

use flate2::{Compression, GzBuilder};
use md5::{Digest, Md5};

use crate::container::normalize_member_path;
use crate::error::NeffError;
use crate::header::{NeffHeader, HEADER_SIZE};

/// `data_size` is padded with zeros to a multiple of this, as in real files
/// (libarchive's default 10240-byte record).
pub const DATA_BLOCK: usize = 10240;

/// Largest member a ustar header can describe (11 octal digits).
const USTAR_MAX_SIZE: u64 = 0o77777777777;

/// Builds a NEFF. Output is a pure function of `header` and the members
/// (byte-identical for identical input).
///
/// Layout written: header (`pkg_version` as set, default 2; `header_size`
/// 1024; `data_size` and `hash` computed), then a gzip member (mtime 0, OS
/// Unix) of a POSIX ustar archive (members in insertion order, mode 0664,
/// uid/gid 0, uname/gname `nobody`, mtime 0, no directory entries), then
/// zeros up to a multiple of 10240 bytes. Hash: pkg 2 → MD5 of
/// `data[0..data_size]` in `hash[0..16]`; pkg 1 → SHA-256 in all 32 bytes.
pub struct NeffWriter {
    /// Caller-settable fields: version, num_tpb, requested_tpb_count,
    /// tpb_per_node, uuid, name, build_version, feature_bits, lnc_size,
    /// pkg_version (1 or 2). `header_size`, `data_size` and `hash` are
    /// overwritten by [`NeffWriter::to_bytes`].
    pub header: NeffHeader,
    members: Vec<(String, Vec<u8>)>,
}

impl fmt::Debug for NeffWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NeffWriter")
            .field("header", &self.header)
            .field(
                "members",
                &self
                    .members
                    .iter()
                    .map(|(p, b)| (p.as_str(), b.len()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Deterministic UUID for a name: MD5 of the name bytes, with RFC 4122
/// version 3 (name-based, MD5) and variant bits set.
pub fn uuid_from_name(name: &str) -> [u8; 16] {
    let mut u: [u8; 16] = Md5::digest(name.as_bytes()).into();
    u[6] = (u[6] & 0x0f) | 0x30;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

impl NeffWriter {
    /// A writer with [`NeffHeader::default`] (pkg 2, version 2.0, num_tpb 1,
    /// lnc 1, no features), `name` in the header (cut at a char boundary to
    /// 255 bytes if longer; NULs end it), and `uuid = uuid_from_name(name)`.
    pub fn new(name: &str) -> Self {
        let mut header = NeffHeader::default();
        let mut cut = name.split('\0').next().unwrap_or("");
        while cut.len() > 255 {
            let mut end = 255;
            while !cut.is_char_boundary(end) {
                end -= 1;
            }
            cut = &cut[..end];
        }
        // cannot fail: at most 255 bytes, no NUL
        let _ = header.set_name(cut);
        header.uuid = uuid_from_name(name);
        NeffWriter {
            header,
            members: Vec::new(),
        }
    }

    /// Appends a member. Path problems (bad path, duplicate) surface in
    /// [`NeffWriter::to_bytes`].
    pub fn add_member(&mut self, path: &str, bytes: Vec<u8>) {
        self.members.push((path.to_owned(), bytes));
    }

    /// Appends `v` serialized as pretty JSON (4-space indent like neuronx-cc).
    pub fn add_json(&mut self, path: &str, v: &impl serde::Serialize) -> Result<(), NeffError> {
        let mut out = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        v.serialize(&mut ser).map_err(|source| NeffError::Json {
            member: path.to_owned(),
            source,
        })?;
        self.add_member(path, out);
        Ok(())
    }

    /// Members added so far.
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Builds the tar archive (uncompressed).
    fn tar(&self) -> Result<Vec<u8>, NeffError> {
        let mut seen = BTreeSet::new();
        let mut builder = tar::Builder::new(Vec::new());
        for (raw, data) in &self.members {
            let path = normalize_member_path(raw).map_err(|reason| NeffError::BadMemberPath {
                path: raw.clone(),
                reason,
            })?;
            if !seen.insert(path) {
                return Err(NeffError::DuplicateMember {
                    path: path.to_owned(),
                });
            }
            let size = data.len() as u64;
            if size > USTAR_MAX_SIZE {
                return Err(NeffError::MemberTooLarge {
                    path: path.to_owned(),
                    size,
                    limit: USTAR_MAX_SIZE,
                });
            }
            let mut h = tar::Header::new_ustar();
            h.set_path(path).map_err(|_| NeffError::BadMemberPath {
                path: path.to_owned(),
                reason: "does not fit a ustar header (name ≤ 100, prefix ≤ 155 bytes)",
            })?;
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(size);
            h.set_mode(0o664);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            let bad_name = |_| NeffError::BadMemberPath {
                path: path.to_owned(),
                reason: "ustar owner name rejected",
            };
            h.set_username("nobody").map_err(bad_name)?;
            h.set_groupname("nobody").map_err(bad_name)?;
            h.set_cksum();
            builder
                .append(&h, data.as_slice())
                .map_err(|source| NeffError::Tar {
                    at: format!("writing member {path:?}"),
                    source,
                })?;
        }
        builder.into_inner().map_err(|source| NeffError::Tar {
            at: "writing the end-of-archive blocks".to_owned(),
            source,
        })
    }

    /// The complete NEFF file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, NeffError> {
        let mut header = self.header.clone();
        header.header_size = HEADER_SIZE as u64;
        header.check_version_and_features()?;
        header.hash_algorithm()?;

        let tar = self.tar()?;
        let mut gz = GzBuilder::new()
            .mtime(0)
            .operating_system(3)
            .write(Vec::new(), Compression::default());
        let gz_err = |e| NeffError::Gzip(e);
        gz.write_all(&tar).map_err(gz_err)?;
        let mut data = gz.finish().map_err(gz_err)?;
        let padded = data.len().div_ceil(DATA_BLOCK) * DATA_BLOCK;
        data.resize(padded, 0);

        header.data_size = data.len() as u64;
        header.hash = header.compute_hash(&data)?;

        let mut out = Vec::with_capacity(HEADER_SIZE + data.len());
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&data);
        Ok(out)
    }
}
