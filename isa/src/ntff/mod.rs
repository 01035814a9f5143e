//! The NTFF device-profile container (`neuron-profile capture` output): the program the runtime
//! loaded and the device's execution records, decoded as far as the evidence goes
//! (`docs/isa/cayman.md` §4).
//!
//! Layout, established on the six akc profiles (each checked against its profiler JSON):
//!
//! - bytes 0–127: a fixed header. Byte 0 = 6; bytes 1–4 = `toc_len`, u32 LE; the rest are
//!   host pointers and sizes of the capturing process (not needed here).
//! - bytes 128 .. 128+toc_len: a protobuf message, the table of contents (TOC).
//! - then the instruction blob: every engine program of every subgraph, one after another.
//!   Each program's offset and size (relative to the blob start) are in the TOC.
//! - then the trace: 16-byte records to the end of the file, in sections the TOC lists
//!   (field `16`): per NeuronCore, instruction records ([`InstrRecord`]), semaphore and event
//!   updates ([`EventRecord`]) and DMA packet records ([`DmaRecord`]), decoded in `records`.
//!
//! TOC paths used (field numbers): `4.4.1` = subgraph (repeated); in a subgraph, `1` = name,
//! `3` = physical NeuronCore, `14` = the execution's length (ps), `4` = engine program {`1`
//! engine index (0 PE, 1 Act, 2 Pool, 3 DVE, 4 SP; absent = 0), `2` device address, `7` blob
//! offset (absent = 0), `8` byte size}, `5` = segments of one engine {`1` engine index, `2` =
//! segment {`1` byte offset, `2` count/flag, `3` kind}}, `7` = DMA queue {`1` queue id, `4`
//! name}. Top level: `15` = the profiled execution {`2` start, `3` end, ps}; `16` = trace
//! section {`1` kind (absent = 0), `3`, `4`, `5` blob offset, `6` byte size, `7` NeuronCore}.

use crate::instr::Engine;
use thiserror::Error;

mod records;
pub use records::*;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum NtffError {
    #[error("NTFF too short ({0} bytes)")]
    Short(usize),
    #[error("NTFF header byte 0 is {0}, expected 6")]
    Magic(u8),
    #[error("NTFF table of contents: {0}")]
    Toc(String),
    #[error("NTFF program {sg}/{engine}: bytes {off}..{end} outside the file")]
    Range {
        sg: String,
        engine: String,
        off: usize,
        end: usize,
    },
}

/// Size of the fixed header before the TOC.
pub const HEADER_LEN: usize = 128;

/// A protobuf field value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PbValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// Parse one protobuf message into `(field number, value)` pairs.
pub fn pb_fields(mut b: &[u8]) -> Result<Vec<(u32, PbValue<'_>)>, NtffError> {
    fn varint(b: &mut &[u8]) -> Result<u64, NtffError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&c, rest) = b
                .split_first()
                .ok_or_else(|| NtffError::Toc("truncated varint".into()))?;
            *b = rest;
            v |= ((c & 0x7f) as u64) << (7 * i);
            if c < 0x80 {
                return Ok(v);
            }
        }
        Err(NtffError::Toc("varint too long".into()))
    }
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], NtffError> {
        if b.len() < n {
            return Err(NtffError::Toc("truncated field".into()));
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Ok(h)
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let field = (key >> 3) as u32;
        if field == 0 {
            return Err(NtffError::Toc("field number 0".into()));
        }
        let v = match key & 7 {
            0 => PbValue::Varint(varint(&mut b)?),
            1 => {
                let x = take(&mut b, 8)?;
                PbValue::Fixed64(u64::from_le_bytes(x.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let n = varint(&mut b)? as usize;
                PbValue::Bytes(take(&mut b, n)?)
            }
            5 => {
                let x = take(&mut b, 4)?;
                PbValue::Fixed32(u32::from_le_bytes(x.try_into().unwrap_or([0; 4])))
            }
            w => return Err(NtffError::Toc(format!("wire type {w}"))),
        };
        out.push((field, v));
    }
    Ok(out)
}

fn varint_of(f: &[(u32, PbValue<'_>)], n: u32) -> Option<u64> {
    f.iter().find_map(|(k, v)| match v {
        PbValue::Varint(x) if *k == n => Some(*x),
        _ => None,
    })
}

fn messages<'a>(f: &[(u32, PbValue<'a>)], n: u32) -> Vec<&'a [u8]> {
    f.iter()
        .filter_map(|(k, v)| match v {
            PbValue::Bytes(b) if *k == n => Some(*b),
            _ => None,
        })
        .collect()
}

/// A segment of a loaded program, from the TOC (`5.2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Byte offset in the program.
    pub offset: u64,
    /// Field 2 (a slot count for the prologue and epilogue segments).
    pub count: u64,
    /// Field 3 (2 for the NEFF-body segment, absent = 0 otherwise).
    pub kind: u64,
}

/// One engine's loaded program.
#[derive(Debug, Clone)]
pub struct Program {
    pub subgraph: String,
    pub engine: Engine,
    /// Device address the program was loaded at.
    pub device_addr: u64,
    /// Offset of the program in the NTFF file.
    pub file_offset: usize,
    /// The 64-byte words.
    pub bytes: Vec<u8>,
    /// The TOC's segments for this engine: `[prologue, body, epilogue]` in every profile seen.
    pub segments: Vec<Segment>,
}

impl Program {
    pub fn words(&self) -> usize {
        self.bytes.len() / crate::cayman::WORD
    }

    /// pc of the NEFF file's word 0: the prologue segment's count − 1 (the prologue segment
    /// ends with the NEFF's word 0, DRAIN). Matches the profiler numbering in all 60 programs.
    pub fn neff_base(&self) -> Option<u32> {
        self.segments
            .first()
            .map(|s| s.count.saturating_sub(1) as u32)
    }

    /// pc of the first epilogue slot (the last segment's offset / 64).
    pub fn epilogue_start(&self) -> Option<u32> {
        self.segments
            .last()
            .map(|s| (s.offset / crate::cayman::WORD as u64) as u32)
    }
}

/// A DMA queue listed in the TOC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmaQueue {
    pub subgraph: String,
    pub id: u64,
    pub name: String,
}

/// A subgraph's TOC entry beyond its programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubgraphInfo {
    pub name: String,
    /// Field `3`: the physical NeuronCore it ran on (4 and 5 in all eight profiles), the key
    /// of its trace sections.
    pub nc: Option<u64>,
    /// Field `14`: the length of its execution, ps (equals the window on sg00).
    pub duration_ps: Option<u64>,
}

/// TOC field `15`: the profiled execution, device timestamps in ps. The profiler's JSON
/// timestamps are `(record − start) / 1000` ns and its `total_time` is `end − start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ps: u64,
    pub end_ps: u64,
}

impl Window {
    pub fn len_ps(&self) -> u64 {
        self.end_ps.saturating_sub(self.start_ps)
    }
}

/// What a trace section holds (TOC `16.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SectionKind {
    /// 0: instruction start / end records.
    Instructions,
    /// 1: semaphore and event updates.
    Events,
    /// 4: DMA packet records.
    Dma,
    /// Any other kind (2 and 5 occur; 5 holds a few `0x9e` records, not decoded).
    Other(u64),
}

impl SectionKind {
    fn of(k: u64) -> SectionKind {
        match k {
            0 => SectionKind::Instructions,
            1 => SectionKind::Events,
            4 => SectionKind::Dma,
            k => SectionKind::Other(k),
        }
    }
}

/// One trace section (TOC `16`): records `first .. first + count` of [`Ntff::trace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSection {
    pub kind: SectionKind,
    /// The NeuronCore (`16.7`); the subgraph whose `nc` it is.
    pub nc: u64,
    /// Fields `3` and `4` (set only on empty sections: `3` = 2, `4` = 8..11, queue-like).
    pub f3: Option<u64>,
    pub f4: Option<u64>,
    pub first: usize,
    pub count: usize,
}

/// A parsed NTFF.
#[derive(Debug, Clone)]
pub struct Ntff {
    /// The NEFF file name the profile was taken of (TOC field 1).
    pub neff_name: String,
    pub programs: Vec<Program>,
    pub dma_queues: Vec<DmaQueue>,
    pub subgraphs: Vec<SubgraphInfo>,
    /// The profiled execution (TOC 15), if the TOC has it.
    pub window: Option<Window>,
    /// The trace sections whose range lies inside the trace (TOC 16).
    pub sections: Vec<TraceSection>,
    /// TOC 16 entries skipped because their range is not inside the trace.
    pub bad_sections: usize,
    /// Offset of the instruction blob in the file.
    pub blob_offset: usize,
    /// Offset of the trace records: the end of the last program.
    pub trace_offset: usize,
    /// The trace records after the programs.
    pub trace: Vec<TraceRecord>,
}

impl Ntff {
    pub fn parse(b: &[u8]) -> Result<Ntff, NtffError> {
        if b.len() < HEADER_LEN {
            return Err(NtffError::Short(b.len()));
        }
        if b[0] != 6 {
            return Err(NtffError::Magic(b[0]));
        }
        let toc_len = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
        let blob = HEADER_LEN + toc_len;
        if blob > b.len() {
            return Err(NtffError::Toc(format!("length {toc_len} past the end")));
        }
        let top = pb_fields(&b[HEADER_LEN..blob])?;
        let neff_name = messages(&top, 1)
            .first()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default();
        let mut programs = Vec::new();
        let mut dma_queues = Vec::new();
        let mut subgraphs = Vec::new();
        for m4 in messages(&top, 4) {
            for m44 in messages(&pb_fields(m4)?, 4) {
                for sg in messages(&pb_fields(m44)?, 1) {
                    let sgf = pb_fields(sg)?;
                    let name = messages(&sgf, 1)
                        .first()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .ok_or_else(|| NtffError::Toc("subgraph without a name".into()))?;
                    subgraphs.push(SubgraphInfo {
                        name: name.clone(),
                        nc: varint_of(&sgf, 3),
                        duration_ps: varint_of(&sgf, 14),
                    });
                    let mut segs: Vec<(u64, Vec<Segment>)> = Vec::new();
                    for m in messages(&sgf, 5) {
                        let f = pb_fields(m)?;
                        let e = varint_of(&f, 1).unwrap_or(0);
                        let mut v = Vec::new();
                        for s in messages(&f, 2) {
                            let sf = pb_fields(s)?;
                            v.push(Segment {
                                offset: varint_of(&sf, 1).unwrap_or(0),
                                count: varint_of(&sf, 2).unwrap_or(0),
                                kind: varint_of(&sf, 3).unwrap_or(0),
                            });
                        }
                        segs.push((e, v));
                    }
                    for m in messages(&sgf, 4) {
                        let f = pb_fields(m)?;
                        let e = varint_of(&f, 1).unwrap_or(0);
                        let engine = Engine::from_index(e as usize)
                            .ok_or_else(|| NtffError::Toc(format!("engine index {e}")))?;
                        let (s, end) = blob_range(
                            blob,
                            varint_of(&f, 7).unwrap_or(0),
                            varint_of(&f, 8).unwrap_or(0),
                        )
                        .filter(|&(_, end)| end <= b.len())
                        .ok_or_else(|| NtffError::Range {
                            sg: name.clone(),
                            engine: engine.to_string(),
                            off: varint_of(&f, 7).unwrap_or(0) as usize,
                            end: b.len(),
                        })?;
                        programs.push(Program {
                            subgraph: name.clone(),
                            engine,
                            device_addr: varint_of(&f, 2).unwrap_or(0),
                            file_offset: s,
                            bytes: b[s..end].to_vec(),
                            segments: segs
                                .iter()
                                .find(|(x, _)| *x == e)
                                .map(|(_, v)| v.clone())
                                .unwrap_or_default(),
                        });
                    }
                    for m in messages(&sgf, 7) {
                        let f = pb_fields(m)?;
                        dma_queues.push(DmaQueue {
                            subgraph: name.clone(),
                            id: varint_of(&f, 1).unwrap_or(0),
                            name: messages(&f, 4)
                                .first()
                                .map(|s| String::from_utf8_lossy(s).into_owned())
                                .unwrap_or_default(),
                        });
                    }
                }
            }
        }
        let trace_offset = programs
            .iter()
            .map(|p| p.file_offset + p.bytes.len())
            .max()
            .unwrap_or(blob);
        let trace: Vec<TraceRecord> = b[trace_offset..]
            .chunks_exact(16)
            .map(|c| {
                let mut raw = [0u8; 16];
                raw.copy_from_slice(c);
                TraceRecord { raw }
            })
            .collect();
        let window = match messages(&top, 15).first() {
            Some(m) => {
                let f = pb_fields(m)?;
                varint_of(&f, 2)
                    .zip(varint_of(&f, 3))
                    .map(|(start_ps, end_ps)| Window { start_ps, end_ps })
            }
            None => None,
        };
        let (mut sections, mut bad_sections) = (Vec::new(), 0);
        for m in messages(&top, 16) {
            let f = pb_fields(m)?;
            let range = blob_range(
                blob,
                varint_of(&f, 5).unwrap_or(0),
                varint_of(&f, 6).unwrap_or(0),
            );
            // Inside the trace and on a record boundary, else skipped (counted).
            let at = range.and_then(|(s, end)| {
                let rel = s.checked_sub(trace_offset)?;
                let ok = rel % 16 == 0 && (end - s) % 16 == 0 && rel / 16 <= trace.len();
                let (first, count) = (rel / 16, (end - s) / 16);
                (ok && first + count <= trace.len()).then_some((first, count))
            });
            let Some((first, count)) = at else {
                bad_sections += 1;
                continue;
            };
            sections.push(TraceSection {
                kind: SectionKind::of(varint_of(&f, 1).unwrap_or(0)),
                nc: varint_of(&f, 7).unwrap_or(0),
                f3: varint_of(&f, 3),
                f4: varint_of(&f, 4),
                first,
                count,
            });
        }
        Ok(Ntff {
            neff_name,
            programs,
            dma_queues,
            subgraphs,
            window,
            sections,
            bad_sections,
            blob_offset: blob,
            trace_offset,
            trace,
        })
    }

    pub fn program(&self, subgraph: &str, engine: Engine) -> Option<&Program> {
        self.programs
            .iter()
            .find(|p| p.subgraph == subgraph && p.engine == engine)
    }
}

/// File range `blob + off .. blob + off + size`, None on overflow.
fn blob_range(blob: usize, off: u64, size: u64) -> Option<(usize, usize)> {
    let s = blob.checked_add(usize::try_from(off).ok()?)?;
    Some((s, s.checked_add(usize::try_from(size).ok()?)?))
}
