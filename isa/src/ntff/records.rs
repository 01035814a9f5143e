//! The NTFF trace: the 16-byte execution records after the programs, decoded by the section
//! the TOC puts them in (instruction start/end marks, semaphore and event updates, DMA
//! packets; `docs/isa/cayman.md` §4.1), and paired into executed words and DMA packets.

use super::{Ntff, SectionKind, TraceSection};
use crate::instr::Engine;
use std::collections::{BTreeMap, VecDeque};

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
    /// its start) and of Sync (slot 0). On GpSimd: the end of the DMA's descriptor generation
    /// (the next word starts ~50 ns later; `docs/isa/cayman.md` §4.1); on Sync unknown.
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
}
