//! The strict NEFF reader: header gates, hash, bounded gzip+tar unpacking,
//! member lookup, typed accessors and the reference walk.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, BufReader, Read};
use std::rc::Rc;
use std::sync::Arc;

use flate2::bufread::GzDecoder;
use serde::de::DeserializeOwned;

use crate::error::NeffError;
use crate::header::{NeffHeader, HEADER_SIZE};
use crate::json::{
    parse_json, EngineJson, InfoJson, Kelf, NeffJson, SubgraphDef, TensorMap, VarType,
};
use crate::memo::Memo;
use crate::npy::NpyArray;

/// Default kelf member when neff.json names none.
pub const DEFAULT_KELF: &str = "kelf-0.json";
/// The top-level graph member.
pub const NEFF_JSON: &str = "neff.json";
/// The compiler-info member.
pub const INFO_JSON: &str = "info.json";
/// The per-subgraph tensor map file name.
pub const TENSOR_MAP_JSON: &str = "tensor_map.json";
/// What the kelf is kept under by [`Neff::shared_kelf`] (its member is found through
/// neff.json first; no member path holds a NUL).
const KELF_KEY: &str = "\0kelf";

/// Resource limits applied while unpacking (all enforced while streaming).
///
/// Memory stays within roughly `max_inflated_bytes` plus the members kept:
/// a member's declared size is checked against `max_member_bytes` before any
/// of it is read, and never more than 1 MiB is reserved ahead of the data.
/// Only regular files count against `max_members`; other entries (directories,
/// links, GNU long-name and pax records) are bounded by `max_inflated_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes the gzip member may inflate to (tar headers, data and padding). Default 1 GiB.
    pub max_inflated_bytes: u64,
    /// Most regular-file members. Default 4096 (real files: 32–72).
    pub max_members: usize,
    /// Largest single member. Default 1 GiB.
    pub max_member_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflated_bytes: 1 << 30,
            max_members: 4096,
            max_member_bytes: 1 << 30,
        }
    }
}

/// Reader options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    pub limits: Limits,
    /// Apply libnrt's `NEURON_RT_VALIDATE_HASH` rule (off by default, as in libnrt).
    /// Real neuronx-cc files FAIL it (reference §3.4); files from [`crate::NeffWriter`] pass.
    pub validate_hash: bool,
}

/// A parsed NEFF: the header plus every regular-file member, in archive order.
#[derive(Clone)]
pub struct Neff {
    header: NeffHeader,
    members: Vec<(String, Vec<u8>)>,
    index: BTreeMap<String, usize>,
    /// JSON members parsed by the `shared_*` getters, kept for the next call.
    memo: Memo,
}

impl fmt::Debug for Neff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Sizes<'a>(&'a [(String, Vec<u8>)]);
        impl fmt::Debug for Sizes<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|(p, b)| (p, b.len())))
                    .finish()
            }
        }
        f.debug_struct("Neff")
            .field("header", &self.header)
            .field("members", &Sizes(&self.members))
            .finish()
    }
}

/// Canonical member path: a leading `./` (repeated) is stripped; empty,
/// absolute, NUL-containing paths and paths with `..`, `.` or empty
/// components are refused (the reason is returned).
pub fn normalize_member_path(raw: &str) -> Result<&str, &'static str> {
    let mut p = raw;
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    if p.is_empty() {
        return Err("empty path");
    }
    if p.starts_with('/') {
        return Err("absolute path");
    }
    if p.contains('\0') {
        return Err("NUL in path");
    }
    for c in p.split('/') {
        match c {
            ".." => return Err("contains a '..' component"),
            "." => return Err("contains a '.' component"),
            "" => return Err("contains an empty component"),
            _ => {}
        }
    }
    Ok(p)
}

/// `dir/file` with the same validation as archive paths.
pub(crate) fn join_member(dir: &str, file: &str) -> Result<String, NeffError> {
    let joined = if dir.is_empty() {
        file.to_owned()
    } else {
        format!("{dir}/{file}")
    };
    match normalize_member_path(&joined) {
        Ok(p) => Ok(p.to_owned()),
        Err(reason) => Err(NeffError::BadMemberPath {
            path: joined,
            reason,
        }),
    }
}

// ---------------------------------------------------------------- bounded inflate

#[derive(Default)]
struct InflateState {
    limit_hit: bool,
    gzip_error: Option<io::Error>,
}

/// Reads the gzip member, counting inflated bytes and refusing to produce
/// more than `limit`. Gzip failures and limit hits are recorded in `state`,
/// since the tar crate re-wraps the io errors it sees.
struct BoundedInflate<'a> {
    inner: GzDecoder<&'a [u8]>,
    count: u64,
    limit: u64,
    state: Rc<RefCell<InflateState>>,
}

impl BoundedInflate<'_> {
    fn gzip_failed(&self, e: io::Error) -> io::Error {
        let copy = io::Error::new(e.kind(), e.to_string());
        self.state.borrow_mut().gzip_error.get_or_insert(e);
        copy
    }
}

impl Read for BoundedInflate<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let remaining = self.limit.saturating_sub(self.count);
        if remaining == 0 {
            // At the limit: fine only if the stream ends exactly here.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe) {
                Ok(0) => Ok(0),
                Ok(_) => {
                    self.state.borrow_mut().limit_hit = true;
                    Err(io::Error::other("inflated size limit exceeded"))
                }
                Err(e) => Err(self.gzip_failed(e)),
            };
        }
        let n = usize::try_from(remaining)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        match self.inner.read(&mut buf[..n]) {
            Ok(k) => {
                self.count += k as u64;
                Ok(k)
            }
            Err(e) => Err(self.gzip_failed(e)),
        }
    }
}

fn classify(state: &Rc<RefCell<InflateState>>, limit: u64, at: String, e: io::Error) -> NeffError {
    let mut st = state.borrow_mut();
    if st.limit_hit {
        NeffError::InflatedTooLarge { limit }
    } else if let Some(g) = st.gzip_error.take() {
        NeffError::Gzip(g)
    } else {
        NeffError::Tar { at, source: e }
    }
}

fn position(index: usize, last: Option<&str>) -> String {
    match last {
        Some(p) => format!("entry #{index} (after member {p:?})"),
        None => format!("entry #{index} (first entry)"),
    }
}

type Members = (Vec<(String, Vec<u8>)>, BTreeMap<String, usize>);
type Inflater<'a> = BufReader<BoundedInflate<'a>>;

/// Reads every entry; regular files become members.
fn read_entries(
    archive: &mut tar::Archive<Inflater<'_>>,
    state: &Rc<RefCell<InflateState>>,
    limits: &Limits,
    out: &mut Members,
) -> Result<(), NeffError> {
    let limit = limits.max_inflated_bytes;
    let (members, index) = out;
    let entries = archive
        .entries()
        .map_err(|e| classify(state, limit, position(0, None), e))?;
    for (i, entry) in entries.enumerate() {
        let at = || position(i, members.last().map(|(p, _)| p.as_str()));
        let mut entry = entry.map_err(|e| classify(state, limit, at(), e))?;
        let ty = entry.header().entry_type();
        if !(ty.is_file() || ty == tar::EntryType::Continuous) {
            // directories, links, devices, fifos, sparse files, unknown types
            continue;
        }
        let raw = entry.path_bytes();
        let raw = std::str::from_utf8(&raw).map_err(|_| NeffError::BadMemberPath {
            path: String::from_utf8_lossy(&raw).into_owned(),
            reason: "not UTF-8",
        })?;
        let path = normalize_member_path(raw)
            .map_err(|reason| NeffError::BadMemberPath {
                path: raw.to_owned(),
                reason,
            })?
            .to_owned();
        if index.contains_key(&path) {
            return Err(NeffError::DuplicateMember { path });
        }
        if members.len() >= limits.max_members {
            return Err(NeffError::TooManyMembers {
                limit: limits.max_members,
            });
        }
        let size = entry.size();
        if size > limits.max_member_bytes {
            return Err(NeffError::MemberTooLarge {
                path,
                size,
                limit: limits.max_member_bytes,
            });
        }
        // Never trust the declared size for more than 1 MiB up front.
        let cap = usize::try_from(size.min(1 << 20)).unwrap_or(0);
        let mut data = Vec::with_capacity(cap);
        entry
            .read_to_end(&mut data)
            .map_err(|e| classify(state, limit, at(), e))?;
        if data.len() as u64 != size {
            return Err(NeffError::Tar {
                at: at(),
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "member {path:?} declares {size} bytes but the archive ends after {}",
                        data.len()
                    ),
                ),
            });
        }
        index.insert(path.clone(), members.len());
        members.push((path, data));
    }
    Ok(())
}

fn unpack(payload: &[u8], limits: &Limits) -> Result<Members, NeffError> {
    let state = Rc::new(RefCell::new(InflateState::default()));
    let limit = limits.max_inflated_bytes;
    let reader = BoundedInflate {
        inner: GzDecoder::new(payload),
        count: 0,
        limit,
        state: Rc::clone(&state),
    };
    let mut archive = tar::Archive::new(BufReader::with_capacity(64 * 1024, reader));
    let mut out: Members = (Vec::new(), BTreeMap::new());
    let result = read_entries(&mut archive, &state, limits, &mut out);
    // Content errors (bad path, limits, ...) fail fast, without inflating further.
    if let Err(e) = &result {
        if !matches!(e, NeffError::Tar { .. }) {
            return result.map(|()| out);
        }
    }

    // Drain the rest of the inflated stream (end-of-archive blocks, record
    // padding) so the gzip trailer (CRC, length) is verified, still under
    // the limit. After a tar-level failure this also tells whether the real
    // cause is corrupt compressed data (CRC/deflate error): then that wins.
    let mut rest = archive.into_inner();
    let drained = io::copy(&mut rest, &mut io::sink());
    if let Err(NeffError::Tar { at, source }) = result {
        let mut st = state.borrow_mut();
        return Err(match st.gzip_error.take() {
            Some(g) if drained.is_err() => NeffError::Gzip(g),
            _ => NeffError::Tar { at, source },
        });
    }
    drained.map_err(|e| {
        classify(
            &state,
            limit,
            "end of archive".to_owned(),
            io::Error::new(e.kind(), e.to_string()),
        )
    })?;
    let after = rest.into_inner().inner.into_inner();
    if let Some(k) = after.iter().position(|&b| b != 0) {
        let gz_len = payload.len() - after.len();
        return Err(NeffError::TrailingGarbage {
            offset: (HEADER_SIZE + gz_len + k) as u64,
        });
    }
    Ok(out)
}

impl Neff {
    /// Parses with [`ParseOptions::default`] (1 GiB / 4096 members, no hash check).
    pub fn parse(bytes: &[u8]) -> Result<Neff, NeffError> {
        Self::parse_with(bytes, &ParseOptions::default())
    }

    /// Parses with explicit limits and hash policy.
    ///
    /// Gates, in order: length ≥ 1024; `header_size == 1024`; `data_size ≤
    /// len - 1024`; `version_major ≤ 2`; no unknown feature bits; the hash
    /// (only if `validate_hash`); then the payload: one gzip member, then
    /// only zero bytes up to `data_size`; a ustar/GNU/pax tar whose regular
    /// files become members (directories and other entry types skipped, a
    /// leading `./` stripped). Bytes after `1024 + data_size` are ignored,
    /// as libnrt does.
    pub fn parse_with(bytes: &[u8], opts: &ParseOptions) -> Result<Neff, NeffError> {
        let header = NeffHeader::decode(bytes)?;
        if header.header_size != HEADER_SIZE as u64 {
            return Err(NeffError::HeaderSizeMismatch {
                header_size: header.header_size,
            });
        }
        let available = (bytes.len() - HEADER_SIZE) as u64;
        if header.data_size > available {
            return Err(NeffError::DataSizeMismatch {
                data_size: header.data_size,
                available,
            });
        }
        header.check_version_and_features()?;
        // data_size <= available <= usize::MAX
        let data = &bytes[HEADER_SIZE..HEADER_SIZE + header.data_size as usize];
        if opts.validate_hash {
            header.verify_hash(data)?;
        }
        let (members, index) = unpack(data, &opts.limits)?;
        Ok(Neff {
            header,
            members,
            index,
            memo: Memo::default(),
        })
    }

    /// The header.
    pub fn header(&self) -> &NeffHeader {
        &self.header
    }

    /// A member's bytes by path (a leading `./` is ignored).
    pub fn member(&self, path: &str) -> Option<&[u8]> {
        let p = normalize_member_path(path).unwrap_or(path);
        self.index.get(p).map(|&i| self.members[i].1.as_slice())
    }

    /// Every member in archive order.
    pub fn members(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.members.iter().map(|(p, b)| (p.as_str(), b.as_slice()))
    }

    /// Number of regular-file members.
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &str) -> bool {
        self.member(path).is_some()
    }

    /// A member that must exist; `referenced_by` names who needs it.
    pub fn require(&self, path: &str, referenced_by: &str) -> Result<&[u8], NeffError> {
        self.member(path).ok_or_else(|| NeffError::MissingMember {
            path: path.to_owned(),
            referenced_by: referenced_by.to_owned(),
        })
    }

    /// A required member parsed as JSON of type `T`.
    pub fn json<T: DeserializeOwned>(
        &self,
        path: &str,
        referenced_by: &str,
    ) -> Result<T, NeffError> {
        parse_json(path, self.require(path, referenced_by)?)
    }

    /// `neff.json`.
    pub fn neff_json(&self) -> Result<NeffJson, NeffError> {
        self.json(NEFF_JSON, "the NEFF container")
    }

    /// The kelf member: named by neff.json's `__kelf` node (`attrs.kelf`),
    /// else [`DEFAULT_KELF`] (also when neff.json is absent).
    pub fn kelf_path(&self) -> Result<String, NeffError> {
        if !self.contains(NEFF_JSON) {
            return Ok(DEFAULT_KELF.to_owned());
        }
        Ok(self
            .neff_json()?
            .kelf_member()
            .unwrap_or_else(|| DEFAULT_KELF.to_owned()))
    }

    /// The kelf (see [`Neff::kelf_path`]).
    pub fn kelf(&self) -> Result<Kelf, NeffError> {
        let path = self.kelf_path()?;
        let path = normalize_member_path(&path)
            .map_err(|reason| NeffError::BadMemberPath {
                path: path.clone(),
                reason,
            })?
            .to_owned();
        let referenced_by = if self.contains(NEFF_JSON) {
            NEFF_JSON
        } else {
            "the default kelf name (no neff.json)"
        };
        self.json(&path, referenced_by)
    }

    /// A subgraph definition, e.g. `"sg00/def.json"`.
    pub fn subgraph_def(&self, def_path: &str) -> Result<SubgraphDef, NeffError> {
        self.json(def_path, "the kelf graph list")
    }

    /// An engine JSON inside a subgraph directory, e.g. `("sg00", "PE.json")`.
    pub fn engine_json(&self, sg_dir: &str, file: &str) -> Result<EngineJson, NeffError> {
        let path = join_member(sg_dir, file)?;
        self.json(&path, &format!("{}/def.json", sg_dir))
    }

    /// [`Neff::kelf`], parsed at the first call and shared by later ones (see `memo`).
    pub fn shared_kelf(&self) -> Result<Arc<Kelf>, NeffError> {
        self.memo.get(KELF_KEY, || self.kelf())
    }

    /// [`Neff::subgraph_def`], parsed at the first call and shared by later ones.
    pub fn shared_subgraph_def(&self, def_path: &str) -> Result<Arc<SubgraphDef>, NeffError> {
        self.memo.get(def_path, || self.subgraph_def(def_path))
    }

    /// [`Neff::engine_json`], parsed at the first call and shared by later ones.
    pub fn shared_engine_json(
        &self,
        sg_dir: &str,
        file: &str,
    ) -> Result<Arc<EngineJson>, NeffError> {
        let path = join_member(sg_dir, file)?;
        self.memo.get(&path, || self.engine_json(sg_dir, file))
    }

    /// [`Neff::tensor_map`], parsed at the first call and shared by later ones.
    pub fn shared_tensor_map(&self, sg_dir: &str) -> Result<Arc<TensorMap>, NeffError> {
        let path = join_member(sg_dir, TENSOR_MAP_JSON)?;
        self.memo.get(&path, || self.tensor_map(sg_dir))
    }

    /// A file named by a subgraph's def.json (instruction stream, table, ...),
    /// resolved relative to `sg_dir`; missing → [`NeffError::MissingMember`]
    /// naming `sg_dir/def.json`.
    pub fn subgraph_file(&self, sg_dir: &str, file: &str) -> Result<&[u8], NeffError> {
        let path = join_member(sg_dir, file)?;
        self.require(&path, &format!("{}/def.json", sg_dir))
    }

    /// `sg_dir/tensor_map.json`.
    pub fn tensor_map(&self, sg_dir: &str) -> Result<TensorMap, NeffError> {
        let path = join_member(sg_dir, TENSOR_MAP_JSON)?;
        self.json(&path, "the subgraph layout convention")
    }

    /// `info.json` if present.
    pub fn info(&self) -> Result<Option<InfoJson>, NeffError> {
        match self.member(INFO_JSON) {
            None => Ok(None),
            Some(b) => parse_json(INFO_JSON, b).map(Some),
        }
    }

    /// A `.npy` member.
    pub fn npy(&self, path: &str) -> Result<NpyArray, NeffError> {
        let b = self.require(path, "the caller")?;
        NpyArray::parse(b).map_err(|source| NeffError::Npy {
            member: path.to_owned(),
            source,
        })
    }

    /// Walks the manifest chain and checks every referenced member exists:
    /// neff.json → kelf → each graph's def.json → its engine JSONs and
    /// instruction files → each engine JSON's own `instr`, `act_info`,
    /// `activation_function_sets` (resolved through act_info's
    /// `act_func_sets`: `bkt_bin`, `ctrl_bin`, `profile_json`) and
    /// `dve_tables` files → every `file` var's `file_name`. All file names
    /// are relative to the subgraph directory. Parses every JSON on the way.
    pub fn validate_references(&self) -> Result<(), NeffError> {
        let kelf_path = self.kelf_path()?;
        let kelf = self.kelf()?;
        for g in &kelf.graphs {
            let def_path = normalize_member_path(&g.definition)
                .map_err(|reason| NeffError::BadMemberPath {
                    path: g.definition.clone(),
                    reason,
                })?
                .to_owned();
            let def: SubgraphDef = self.json(&def_path, &kelf_path)?;
            let sg = g.dir();
            for (_, json, instr) in def.engine_files() {
                if let Some(instr) = instr {
                    self.require(&join_member(sg, instr)?, &def_path)?;
                }
                if let Some(json) = json {
                    let ej_path = join_member(sg, json)?;
                    let ej: EngineJson = self.json(&ej_path, &def_path)?;
                    self.check_engine_refs(sg, &ej_path, &ej)?;
                }
            }
            for (name, var) in &def.var {
                if var.ty != VarType::File {
                    continue;
                }
                let Some(file) = &var.file_name else {
                    return Err(NeffError::JsonShape {
                        member: def_path.clone(),
                        what: format!("file var {name:?} has no file_name"),
                    });
                };
                self.require(&join_member(sg, file)?, &def_path)?;
            }
        }
        Ok(())
    }

    fn check_engine_refs(&self, sg: &str, ej_path: &str, ej: &EngineJson) -> Result<(), NeffError> {
        let shape = |what: String| NeffError::JsonShape {
            member: ej_path.to_owned(),
            what,
        };
        if let Some(instr) = &ej.instr {
            self.require(&join_member(sg, instr)?, ej_path)?;
        }
        if let Some(tables) = ej.extra.get("dve_tables") {
            let list = tables
                .as_array()
                .ok_or_else(|| shape("dve_tables is not an array".into()))?;
            for t in list {
                let obj = t
                    .as_object()
                    .ok_or_else(|| shape("dve_tables entry is not an object".into()))?;
                for (k, v) in obj {
                    let f = v
                        .as_str()
                        .ok_or_else(|| shape(format!("dve_tables.{k} is not a string")))?;
                    self.require(&join_member(sg, f)?, ej_path)?;
                }
            }
        }
        let act_info = match ej.extra.get("act_info") {
            None => None,
            Some(v) => {
                let f = v
                    .as_str()
                    .ok_or_else(|| shape("act_info is not a string".into()))?;
                let p = join_member(sg, f)?;
                let info: serde_json::Value = self.json(&p, ej_path)?;
                Some((p, info))
            }
        };
        if let Some(sets) = ej.extra.get("activation_function_sets") {
            let sets = sets
                .as_array()
                .ok_or_else(|| shape("activation_function_sets is not an array".into()))?;
            for s in sets {
                let name = s.as_str().ok_or_else(|| {
                    shape("activation_function_sets entry is not a string".into())
                })?;
                let Some((info_path, info)) = &act_info else {
                    return Err(shape(format!(
                        "activation function set {name:?} listed without act_info"
                    )));
                };
                let entry = info
                    .get("act_func_sets")
                    .and_then(|v| v.as_array())
                    .and_then(|a| {
                        a.iter()
                            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some(name))
                    })
                    .ok_or_else(|| NeffError::JsonShape {
                        member: info_path.clone(),
                        what: format!(
                            "act_func_sets has no entry named {name:?} (used by {ej_path})"
                        ),
                    })?;
                for key in ["bkt_bin", "ctrl_bin", "profile_json"] {
                    if let Some(f) = entry.get(key).and_then(|v| v.as_str()) {
                        self.require(&join_member(sg, f)?, info_path)?;
                    }
                }
            }
        }
        Ok(())
    }
}
