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
//!   updates ([`EventRecord`]) and DMA packet records ([`DmaRecord`]).
//!
//! TOC paths used (field numbers): `4.4.1` = subgraph (repeated); in a subgraph, `1` = name,
//! `3` = physical NeuronCore, `14` = the execution's length (ps), `4` = engine program {`1`
//! engine index (0 PE, 1 Act, 2 Pool, 3 DVE, 4 SP; absent = 0), `2` device address, `7` blob
//! offset (absent = 0), `8` byte size}, `5` = segments of one engine {`1` engine index, `2` =
//! segment {`1` byte offset, `2` count/flag, `3` kind}}, `7` = DMA queue {`1` queue id, `4`
//! name}. Top level: `15` = the profiled execution {`2` start, `3` end, ps}; `16` = trace
//! section {`1` kind (absent = 0), `3`, `4`, `5` blob offset, `6` byte size, `7` NeuronCore}.

use crate::instr::Engine;
use std::collections::{BTreeMap, VecDeque};
use thiserror::Error;

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

/// One 16-byte record (`docs/isa/cayman.md` §4). Bytes 8–15 are always the timestamp; the
/// rest depends on the section ([`Record::decode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    pub raw: [u8; 16],
}

impl TraceRecord {
    /// Bytes 8–15: a u64 device timestamp in ps (CERTAIN: equals the profiler's ns × 1000).
    pub fn timestamp(&self) -> u64 {
        let mut t = [0u8; 8];
        t.copy_from_slice(&self.raw[8..16]);
        u64::from_le_bytes(t)
    }

    fn u16_at(&self, i: usize) -> u16 {
        u16::from_le_bytes([self.raw[i], self.raw[i + 1]])
    }

    fn u32_at(&self, i: usize) -> u32 {
        u32::from_le_bytes([
            self.raw[i],
            self.raw[i + 1],
            self.raw[i + 2],
            self.raw[i + 3],
        ])
    }
}

/// Bits 0–19 of an instruction record's bytes 0–2: the low bits of the word's slot address
/// (device address / 64).
pub const SLOT_MASK: u32 = 0xf_ffff;

/// Which edge of an instruction an [`InstrRecord`] marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// The word began (after its header wait, except wait words, whose records include it).
    Start,
    /// The word completed.
    End,
    /// A third record, only of GpSimd DMA_DIRECT2D words (one per execution, 0.6–20 µs before
    /// its start) and of Sync (slot 0); meaning unknown.
    Other,
}

/// An instruction record (section kind 0). Kind byte 3 = `0x84 + 4·engine + mark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstrRecord {
    pub engine: Engine,
    pub mark: Mark,
    /// Bytes 0–2, bits 0–19: the slot address' low bits (`pc = slot − load address / 64`).
    pub slot: u32,
    /// Byte 2 bit 5: set on the epilogue's last COMPARE_BRANCH (the branch back to the loop
    /// head) and nowhere else.
    pub last: bool,
    /// Byte 2 bit 4: set on [`Mark::Other`] records.
    pub flag: bool,
    /// Bytes 4–7 (raw: `0000xxxx` on starts, mostly `ffffffff` on ends).
    pub aux: u32,
    pub ts: u64,
}

/// Who made a semaphore or event update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventSource {
    Engine(Engine),
    /// Source code 5 (`0x9b`): not an engine; the DMA queues' completion increments.
    Other(u8),
}

/// A semaphore or event update (section kind 1). Kind byte 3 = `0x83 + 4·(source + 1)`,
/// bit 6 a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRecord {
    pub source: EventSource,
    /// Byte 0: the semaphore or event index.
    pub index: u8,
    /// Byte 1 bit 0: a semaphore (else an event).
    pub semaphore: bool,
    /// Byte 2: the operation (raw: `0xf3` count update, `0xf9` range clear, `0xf4`, `0xf1`
    /// event set, `0x07` event clear).
    pub op: u8,
    /// Kind bit 6 (raw).
    pub flag: bool,
    /// Bytes 4–7: the register's value after the update.
    pub value: u32,
    pub ts: u64,
}

/// What a DMA record marks (byte 4, low nibble).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaEvent {
    /// 1: the packet started.
    Start,
    /// 5: the packet ended (its size and CRC are in this record).
    End,
    /// 6: a third record per packet, ~255 ns after the end (raw).
    After,
    Other(u8),
}

/// A DMA packet record (section kind 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaRecord {
    /// The profiler's `dma_engine`: `64 + (kind & 0x7f)` (E64–E79 on the first core's rings).
    pub dma_engine: u16,
    /// Byte 4 high nibble: the profiler's `dma_queue`.
    pub queue: u8,
    pub event: DmaEvent,
    /// Bytes 0–1: on an end record the packet's byte count (raw on the others).
    pub size: u16,
    /// Bytes 6–7: on an end record the profiler's packet `crc`.
    pub crc: u16,
    pub ts: u64,
}

/// A record read according to its section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    Instr(InstrRecord),
    Event(EventRecord),
    Dma(DmaRecord),
    /// Not decoded (another section kind, or a kind byte outside the known ranges).
    Raw(TraceRecord),
}

impl Record {
    pub fn decode(kind: SectionKind, r: &TraceRecord) -> Record {
        let k = r.raw[3];
        let ts = r.timestamp();
        let decoded = match kind {
            SectionKind::Instructions if (0x84..=0x97).contains(&k) => {
                let e = Engine::from_index(usize::from((k - 0x84) / 4));
                let mark = match (k - 0x84) % 4 {
                    0 => Some(Mark::Start),
                    1 => Some(Mark::End),
                    2 => Some(Mark::Other),
                    _ => None,
                };
                let b = u32::from_le_bytes([r.raw[0], r.raw[1], r.raw[2], 0]);
                e.zip(mark).map(|(engine, mark)| {
                    Record::Instr(InstrRecord {
                        engine,
                        mark,
                        slot: b & SLOT_MASK,
                        last: b & (1 << 21) != 0,
                        flag: b & (1 << 20) != 0,
                        aux: r.u32_at(4),
                        ts,
                    })
                })
            }
            SectionKind::Events if k & 0x83 == 0x83 => {
                ((k & 0x3f) >> 2).checked_sub(1).map(|src| {
                    Record::Event(EventRecord {
                        source: Engine::from_index(usize::from(src))
                            .map_or(EventSource::Other(src), EventSource::Engine),
                        index: r.raw[0],
                        semaphore: r.raw[1] & 1 != 0,
                        op: r.raw[2],
                        flag: k & 0x40 != 0,
                        value: r.u32_at(4),
                        ts,
                    })
                })
            }
            SectionKind::Dma if k & 0x80 != 0 => Some(Record::Dma(DmaRecord {
                dma_engine: 64 + u16::from(k & 0x7f),
                queue: r.raw[4] >> 4,
                event: match r.raw[4] & 0xf {
                    1 => DmaEvent::Start,
                    5 => DmaEvent::End,
                    6 => DmaEvent::After,
                    x => DmaEvent::Other(x),
                },
                size: r.u16_at(0),
                crc: r.u16_at(6),
                ts,
            })),
            _ => None,
        };
        decoded.unwrap_or(Record::Raw(*r))
    }
}

/// One executed instruction: a start record paired with its end record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    pub subgraph: String,
    pub engine: Engine,
    /// Profiler pc (slot in the loaded program).
    pub pc: u32,
    pub start_ps: u64,
    pub end_ps: u64,
    /// The word is the epilogue's branch back to the loop head.
    pub last: bool,
}

/// [`Ntff::executed`]: the paired instructions and what could not be paired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Executions {
    /// By start time.
    pub executed: Vec<Executed>,
    /// Start or end records left without a partner (the capture cuts a word in two).
    pub unpaired: usize,
    /// Instruction records whose slot is in no program of their core.
    pub unplaced: usize,
    /// [`Mark::Other`] records (not paired).
    pub other: usize,
}

/// One DMA packet: a start record paired with its end record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DmaPacket {
    pub subgraph: String,
    pub dma_engine: u16,
    pub queue: u8,
    pub start_ps: u64,
    pub end_ps: u64,
    pub bytes: u16,
    pub crc: u16,
}

impl Ntff {
    /// The span of the trace's timestamps (last − first), 0 without records.
    pub fn trace_span(&self) -> u64 {
        let ts = self.trace.iter().map(TraceRecord::timestamp);
        match (ts.clone().min(), ts.max()) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        }
    }

    /// The records of a section.
    pub fn section_records(&self, s: &TraceSection) -> &[TraceRecord] {
        self.trace
            .get(s.first..s.first.saturating_add(s.count))
            .unwrap_or(&[])
    }

    /// Every record of every section, decoded, with the subgraph of its core.
    pub fn records(&self) -> impl Iterator<Item = (Option<&str>, Record)> + '_ {
        self.sections.iter().flat_map(move |s| {
            let sg = self.subgraph_of(s.nc);
            self.section_records(s)
                .iter()
                .map(move |r| (sg, Record::decode(s.kind, r)))
        })
    }

    /// The name of the subgraph that ran on NeuronCore `nc`.
    pub fn subgraph_of(&self, nc: u64) -> Option<&str> {
        self.subgraphs
            .iter()
            .find(|s| s.nc == Some(nc))
            .map(|s| s.name.as_str())
    }

    /// The executed instructions: per (subgraph, engine, pc), start and end records paired in
    /// time order (an engine overlaps its words, so ends do not follow starts one to one).
    pub fn executed(&self) -> Executions {
        type Key<'a> = (&'a str, Engine, u32);
        /// Start (timestamp, last) and end timestamps of one word.
        type Marks = (Vec<(u64, bool)>, Vec<u64>);
        let mut marks: BTreeMap<Key<'_>, Marks> = BTreeMap::new();
        let mut out = Executions::default();
        for (sg, rec) in self.records() {
            let Record::Instr(r) = rec else { continue };
            if r.mark == Mark::Other {
                out.other += 1;
                continue;
            }
            let pc = sg.and_then(|sg| {
                let p = self.program(sg, r.engine)?;
                let base = (p.device_addr / crate::cayman::WORD as u64) as u32 & SLOT_MASK;
                let pc = r.slot.wrapping_sub(base) & SLOT_MASK;
                ((pc as usize) < p.words()).then_some((sg, pc))
            });
            let Some((sg, pc)) = pc else {
                out.unplaced += 1;
                continue;
            };
            let e = marks.entry((sg, r.engine, pc)).or_default();
            match r.mark {
                Mark::Start => e.0.push((r.ts, r.last)),
                _ => e.1.push(r.ts),
            }
        }
        for ((sg, engine, pc), (mut starts, mut ends)) in marks {
            starts.sort_unstable();
            ends.sort_unstable();
            out.unpaired += starts.len().abs_diff(ends.len());
            for ((start_ps, last), end_ps) in starts.into_iter().zip(ends) {
                out.executed.push(Executed {
                    subgraph: sg.to_owned(),
                    engine,
                    pc,
                    start_ps,
                    end_ps: end_ps.max(start_ps),
                    last,
                });
            }
        }
        out.executed.sort_by_key(|x| (x.start_ps, x.end_ps));
        out
    }

    /// The DMA packets: per (core, DMA engine, queue), start and end records paired in file
    /// order; and how many records stayed unpaired.
    pub fn dma_packets(&self) -> (Vec<DmaPacket>, usize) {
        let mut open: BTreeMap<(Option<&str>, u16, u8), VecDeque<u64>> = BTreeMap::new();
        let (mut out, mut unpaired) = (Vec::new(), 0);
        for (sg, rec) in self.records() {
            let Record::Dma(d) = rec else { continue };
            let q = open.entry((sg, d.dma_engine, d.queue)).or_default();
            match d.event {
                DmaEvent::Start => q.push_back(d.ts),
                DmaEvent::End => match q.pop_front() {
                    Some(start_ps) => out.push(DmaPacket {
                        subgraph: sg.unwrap_or("?").to_owned(),
                        dma_engine: d.dma_engine,
                        queue: d.queue,
                        start_ps,
                        end_ps: d.ts.max(start_ps),
                        bytes: d.size,
                        crc: d.crc,
                    }),
                    None => unpaired += 1,
                },
                _ => {}
            }
        }
        unpaired += open.values().map(VecDeque::len).sum::<usize>();
        out.sort_by_key(|p| (p.start_ps, p.end_ps));
        (out, unpaired)
    }

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
