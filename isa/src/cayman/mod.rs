//! The real trn2 ("cayman") instruction encoding, decoded from evidence.
//!
//! Every instruction is one 64-byte word (`docs/isa/cayman.md`). Byte 0 is the opcode,
//! bytes 1–11 a header common to every opcode ([`Header`]), and bytes 12–63 the operand
//! fields, laid out per opcode ([`layout`]). A decoded word ([`CaymanInstr`]) holds the
//! opcode, the header, every field the layout names, and the raw bytes of every byte the
//! layout does not name, so [`CaymanInstr::encode`] reproduces the word exactly.
//!
//! There are two opcode namespaces ([`Namespace`]): NEFF `.bin` words, where three
//! pseudo-opcodes (`0xb1` DRAIN, `0xcc` SET_ORDERING_MODE, `0xd4` DMA_DIRECT2D) stand for the
//! hardware opcodes the runtime writes at load (`0xa2`, `0xb1`, `0xb8`), and loaded words
//! (the program as the runtime placed it in device memory, as captured in an NTFF).

pub mod build;
pub mod layout;
pub mod render;
pub mod translate;

use crate::dtype::Dtype;
use crate::instr::{
    ActFunc, AluOp, Instr, Op, SemOp, SemUpdate, SemWait, Space, Sync, TensorRef, WaitCond,
};
pub use layout::{layout_of, FieldSpec, Grade, Kind};

/// Bytes per instruction word.
pub const WORD: usize = 64;

/// Which opcode namespace a word is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Namespace {
    /// A word of a NEFF engine `.bin` file (pseudo-opcodes, var-relative DMA addresses).
    Neff,
    /// A word of the program as loaded by the runtime (hardware opcodes, absolute addresses).
    Loaded,
}

/// An opcode. Open: bytes with no known meaning decode to [`Opcode::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Opcode {
    Ldweights,
    Matmul,
    Activate,
    ActTableLoad,
    /// `0x41`, named here (never profiled): two tensor inputs, one output, an ALU op.
    TensorTensor,
    TensorReduce,
    TensorScalar,
    Copy,
    Cast,
    Reciprocal,
    /// `0x49`, named here (never profiled): output only, no input operand.
    Memset,
    EventSemaphore,
    Drain,
    Nop,
    Write,
    Notify,
    CompareBranch,
    TensorLoad,
    EventSemaphoreRangeClear,
    SetOrderingMode,
    DmaDirect2d,
    /// `0xa7` (both namespaces), named here: `$R[dst_reg] = imm` (the compiler's debug name of
    /// the word ends in `-register-move`).
    RegisterMove,
    /// `0xa8` (both namespaces), named here: `$R[dst_reg] = $R[src_reg] op imm` (`reg-mul`,
    /// `reg-add` in the compiler's debug names).
    RegisterAlu,
    /// NEFF `0xce`: a TENSOR_LOAD whose source is a var-relative state-buffer address; the
    /// runtime writes it as TENSOR_LOAD (`0xaa`) with the absolute address.
    TensorLoadVar,
    /// NEFF `0xc1`: start DMA block `block` of queue `queue` (the engine JSON's `dma` list);
    /// AWS's runtime writes it as two WRITEs to the queue's registers. Not a hardware opcode.
    DmaTrigger,
    /// NEFF `0xda`: the second 64-byte slot of a DMA_DIRECT2D with a register-offset address
    /// (byte 1 = 0, not 0x10). AWS's runtime turns it into a REGISTER_MOVE of the offset bound,
    /// placed before the DMA. Not a hardware opcode.
    DmaExt,
    /// `0x92` (both namespaces), named here after `nki.isa.affine_select` (GpSimd): the
    /// compiler's debug name is `IDAffineSelect(mask,fill=1)`.
    AffineSelect,
    /// Runtime-only opcodes never named by a profile: `0xa1`, `0xab`, `0x95`.
    Unnamed(u8),
    /// A byte with no entry in this namespace.
    Unknown(u8),
}

/// `(opcode, NEFF byte, loaded byte)`; `None`: does not occur in that namespace.
const OPCODES: &[(Opcode, Option<u8>, Option<u8>)] = &[
    (Opcode::Ldweights, Some(0x01), Some(0x01)),
    (Opcode::Matmul, Some(0x02), Some(0x02)),
    (Opcode::Activate, Some(0x21), Some(0x21)),
    (Opcode::ActTableLoad, Some(0x23), Some(0x23)),
    (Opcode::TensorTensor, Some(0x41), Some(0x41)),
    (Opcode::TensorReduce, Some(0x42), Some(0x42)),
    (Opcode::TensorScalar, Some(0x43), Some(0x43)),
    (Opcode::Copy, Some(0x46), Some(0x46)),
    (Opcode::Cast, Some(0x47), Some(0x47)),
    (Opcode::Reciprocal, Some(0x48), Some(0x48)),
    (Opcode::Memset, Some(0x49), Some(0x49)),
    (Opcode::EventSemaphore, Some(0xa0), Some(0xa0)),
    (Opcode::Drain, Some(0xb1), Some(0xa2)),
    (Opcode::Nop, Some(0xa4), Some(0xa4)),
    (Opcode::Write, Some(0xa5), Some(0xa5)),
    (Opcode::Notify, Some(0xa6), Some(0xa6)),
    (Opcode::CompareBranch, Some(0xa9), Some(0xa9)),
    (Opcode::TensorLoad, Some(0xaa), Some(0xaa)),
    (Opcode::EventSemaphoreRangeClear, Some(0xb0), Some(0xb0)),
    (Opcode::SetOrderingMode, Some(0xcc), Some(0xb1)),
    (Opcode::DmaDirect2d, Some(0xd4), Some(0xb8)),
    (Opcode::RegisterMove, Some(0xa7), Some(0xa7)),
    (Opcode::RegisterAlu, Some(0xa8), Some(0xa8)),
    // Loaded 0xaa decodes as TensorLoad (listed first); TensorLoadVar only encodes to it.
    (Opcode::TensorLoadVar, Some(0xce), Some(0xaa)),
    (Opcode::DmaTrigger, Some(0xc1), None),
    (Opcode::DmaExt, Some(0xda), None),
    (Opcode::AffineSelect, Some(0x92), Some(0x92)),
    (Opcode::Unnamed(0xa1), Some(0xa1), Some(0xa1)),
    (Opcode::Unnamed(0xab), Some(0xab), Some(0xab)),
    (Opcode::Unnamed(0x95), Some(0x95), Some(0x95)),
];

impl Opcode {
    /// Decode byte 0 in namespace `ns`.
    pub fn from_byte(ns: Namespace, b: u8) -> Opcode {
        OPCODES
            .iter()
            .find(|(_, n, l)| match ns {
                Namespace::Neff => *n == Some(b),
                Namespace::Loaded => *l == Some(b),
            })
            .map(|(o, _, _)| *o)
            .unwrap_or(Opcode::Unknown(b))
    }

    /// The byte this opcode has in namespace `ns` (`None`: not encodable there).
    pub fn byte(self, ns: Namespace) -> Option<u8> {
        if let Opcode::Unknown(b) = self {
            return (Opcode::from_byte(ns, b) == self).then_some(b);
        }
        OPCODES
            .iter()
            .find(|(o, _, _)| *o == self)
            .and_then(|(_, n, l)| match ns {
                Namespace::Neff => *n,
                Namespace::Loaded => *l,
            })
    }

    /// Every known opcode, in table order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        OPCODES.iter().map(|(o, _, _)| *o)
    }

    /// The name AWS's profiler prints; for opcodes never profiled, the name given in
    /// `docs/isa/cayman.md` (`TENSOR_TENSOR`, `MEMSET`, `REGISTER_MOVE`, ...) or `OP_0x..`.
    pub fn name(self) -> String {
        match self {
            Opcode::Unnamed(b) => format!("OP_0x{b:02x}"),
            Opcode::Unknown(b) => format!("UNKNOWN_0x{b:02x}"),
            _ => self.static_name().to_owned(),
        }
    }

    /// [`Opcode::name`] without allocating: `"OP_UNNAMED"` / `"UNKNOWN"` for unnamed bytes.
    pub fn static_name(self) -> &'static str {
        match self {
            Opcode::Ldweights => "LDWEIGHTS",
            Opcode::Matmul => "MATMUL",
            Opcode::Activate => "ACTIVATE",
            Opcode::ActTableLoad => "ACT_TABLE_LOAD",
            Opcode::TensorTensor => "TENSOR_TENSOR",
            Opcode::TensorReduce => "TENSOR_REDUCE",
            Opcode::TensorScalar => "TENSOR_SCALAR",
            Opcode::Copy => "COPY",
            Opcode::Cast => "CAST",
            Opcode::Reciprocal => "RECIPROCAL",
            Opcode::Memset => "MEMSET",
            Opcode::EventSemaphore => "EVENT_SEMAPHORE",
            Opcode::Drain => "DRAIN",
            Opcode::Nop => "NOP",
            Opcode::Write => "WRITE",
            Opcode::Notify => "NOTIFY",
            Opcode::CompareBranch => "COMPARE_BRANCH",
            Opcode::TensorLoad => "TENSOR_LOAD",
            Opcode::EventSemaphoreRangeClear => "EVENT_SEMAPHORE_RANGE_CLEAR",
            Opcode::SetOrderingMode => "SET_ORDERING_MODE",
            Opcode::DmaDirect2d => "DMA_DIRECT2D",
            Opcode::RegisterMove => "REGISTER_MOVE",
            Opcode::RegisterAlu => "REGISTER_ALU",
            Opcode::TensorLoadVar => "TENSOR_LOAD_VAR",
            Opcode::DmaTrigger => "DMA_TRIGGER",
            Opcode::DmaExt => "DMA_DIRECT2D_EXT",
            Opcode::AffineSelect => "AFFINE_SELECT",
            Opcode::Unnamed(_) => "OP_UNNAMED",
            Opcode::Unknown(_) => "UNKNOWN",
        }
    }

    pub fn is_known(self) -> bool {
        !matches!(self, Opcode::Unknown(_))
    }

    /// 64-byte slots the instruction starting with this opcode occupies, given the opcode of
    /// the slot after it: 2 for a DMA_DIRECT2D followed by its DMA_DIRECT2D_EXT slot.
    pub fn slots(self, next: Option<Opcode>) -> usize {
        match (self, next) {
            (Opcode::DmaDirect2d, Some(Opcode::DmaExt)) => 2,
            _ => 1,
        }
    }
}

/// Bytes 1–11, common to every opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// Byte 1: `0x10` in every word seen (probably the length in 32-bit units).
    pub len: u8,
    /// Byte 2: 9 in NOTIFY, 0 elsewhere (meaning open).
    pub b2: u8,
    /// Byte 3: COMPARE_BRANCH `debugHint` (2 in the loop-closing branch).
    pub debug_hint: u8,
    /// Byte 4: wait condition code (0 none, 0x01 `==`, 0x05 `>=`, 0x07 event set then clear).
    pub wait_cond: u8,
    /// Byte 5: semaphore (or event) index waited on.
    pub wait_index: u8,
    /// Byte 6: update on completion (0 none, 0x11 event set, 0x13 `++`, 0x14 `--`, ...).
    pub update_op: u8,
    /// Byte 7: semaphore (or event) index updated.
    pub update_index: u8,
    /// Bytes 8–11: the wait value, u32.
    pub wait_value: u32,
}

impl Header {
    pub fn decode(w: &[u8; WORD]) -> Header {
        Header {
            len: w[1],
            b2: w[2],
            debug_hint: w[3],
            wait_cond: w[4],
            wait_index: w[5],
            update_op: w[6],
            update_index: w[7],
            wait_value: u32::from_le_bytes([w[8], w[9], w[10], w[11]]),
        }
    }

    pub fn encode(&self, w: &mut [u8; WORD]) {
        w[1] = self.len;
        w[2] = self.b2;
        w[3] = self.debug_hint;
        w[4] = self.wait_cond;
        w[5] = self.wait_index;
        w[6] = self.update_op;
        w[7] = self.update_index;
        w[8..12].copy_from_slice(&self.wait_value.to_le_bytes());
    }

    /// The header as the device model's [`Sync`]; `None` if a code has no mapping.
    pub fn sync(&self) -> Option<Sync> {
        let wait = match self.wait_cond {
            0 => None,
            c => Some(SemWait {
                cond: WaitCond::from_code(c)?,
                index: self.wait_index,
                value: self.wait_value as i32,
            }),
        };
        let update = match self.update_op {
            0 => None,
            c => Some(SemUpdate {
                op: SemOp::from_code(c)?,
                index: self.update_index,
                value: 0,
            }),
        };
        Some(Sync { wait, update })
    }
}

/// A compute access pattern: a u32 address, then `dims` i16 steps, then `dims` u16 counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessPattern {
    /// SBUF: byte offset within a partition; PSUM: bit 25 (`0x2000000`) set.
    pub addr: u32,
    pub dims: u8,
    /// Steps in elements (first `dims` used).
    pub step: [i16; 4],
    /// Counts (first `dims` used).
    pub num: [u16; 4],
}

/// PSUM addresses carry bit 25.
pub const PSUM_BIT: u32 = 0x0200_0000;

impl AccessPattern {
    pub fn space(&self) -> Space {
        if self.addr & PSUM_BIT != 0 {
            Space::Psum
        } else {
            Space::Sbuf
        }
    }
    pub fn offset(&self) -> u32 {
        self.addr & !PSUM_BIT
    }
}

/// An 8-byte DMA address field. Byte 7 is a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DmaAddr {
    /// Tag 0 (loaded words): an absolute 48-bit device address; bytes 6–7 zero.
    Absolute(u64),
    /// Tag `0x10` (NEFF words): `offset` bytes into the `def.json` variable `var_id`.
    /// Bytes 5–6 are kept (zero in every word seen).
    VarRelative { offset: u32, var_id: u8, pad: u16 },
    /// Tag `0x20`: DGE table entry `index`, offset immediate `offset`. Not rewritten at load.
    Table { offset: u32, index: u8, pad: u16 },
    /// Tag `0x28`: DGE table entry `index` plus the value of register `$R[reg]` (bytes 0–3),
    /// resolved when the DMA runs (the MoE expert-weight gathers). Not rewritten at load.
    TableReg { reg: u32, index: u8, pad: u16 },
    /// Any other tag: the 8 raw bytes.
    Other(u64),
}

impl DmaAddr {
    pub fn decode(v: u64) -> DmaAddr {
        let tag = (v >> 56) as u8;
        let offset = v as u32;
        let id = (v >> 32) as u8;
        let pad = (v >> 40) as u16;
        match tag {
            0x00 if (v >> 48) == 0 => DmaAddr::Absolute(v),
            0x10 => DmaAddr::VarRelative {
                offset,
                var_id: id,
                pad,
            },
            0x20 => DmaAddr::Table {
                offset,
                index: id,
                pad,
            },
            0x28 => DmaAddr::TableReg {
                reg: offset,
                index: id,
                pad,
            },
            _ => DmaAddr::Other(v),
        }
    }
    pub fn encode(&self) -> u64 {
        let rel = |tag: u64, offset: u32, id: u8, pad: u16| {
            (tag << 56) | ((pad as u64) << 40) | ((id as u64) << 32) | offset as u64
        };
        match *self {
            DmaAddr::Absolute(v) | DmaAddr::Other(v) => v,
            DmaAddr::VarRelative {
                offset,
                var_id,
                pad,
            } => rel(0x10, offset, var_id, pad),
            DmaAddr::Table { offset, index, pad } => rel(0x20, offset, index, pad),
            DmaAddr::TableReg { reg, index, pad } => rel(0x28, reg, index, pad),
        }
    }

    /// A NEFF TENSOR_LOAD_VAR address (`Kind::VarAddr`): u32 var id, then u32 offset.
    pub fn decode_var32(v: u64) -> DmaAddr {
        let (var, offset) = (v as u32, (v >> 32) as u32);
        match u8::try_from(var) {
            Ok(var_id) => DmaAddr::VarRelative {
                offset,
                var_id,
                pad: 0,
            },
            Err(_) => DmaAddr::Other(v),
        }
    }

    /// The bytes of a `Kind::VarAddr` field: var-relative in the NEFF form, else the u64.
    pub fn encode_var32(&self) -> u64 {
        match *self {
            DmaAddr::VarRelative { offset, var_id, .. } => ((offset as u64) << 32) | var_id as u64,
            other => other.encode(),
        }
    }
}

/// A decoded field value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Value {
    /// Unsigned integers, codes, enums (raw code kept).
    U(u64),
    /// Signed integers.
    I(i64),
    /// f32, kept as its bits so every word round-trips.
    F32(u32),
    Ap(AccessPattern),
    Addr(DmaAddr),
    /// A run of bytes with per-byte meaning (register numbers).
    Bytes(Vec<u8>),
}

/// One named field of a decoded word.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Field {
    pub spec: &'static FieldSpec,
    pub value: Value,
}

/// Bytes no layout field names, kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawRange {
    pub off: u8,
    pub bytes: Vec<u8>,
}

/// One decoded 64-byte word.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CaymanInstr {
    pub ns: Namespace,
    pub opcode: Opcode,
    /// Byte 0 as read (kept so that an opcode foreign to `ns` still round-trips).
    pub opcode_byte: u8,
    pub header: Header,
    pub fields: Vec<Field>,
    /// Bytes 12–63 not covered by `fields`, in contiguous runs (zeros included).
    pub unknown: Vec<RawRange>,
}

/// One instruction of a program with the pc of its first slot and its extension slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slotted {
    pub pc: u32,
    pub instr: CaymanInstr,
    /// The second slot of a two-slot instruction.
    pub ext: Option<CaymanInstr>,
}

/// Alias used by the device-model side.
pub type Word = CaymanInstr;

fn rd(w: &[u8], off: usize, n: usize) -> u64 {
    let mut v = 0u64;
    for i in 0..n {
        v |= (w[off + i] as u64) << (8 * i);
    }
    v
}

fn wr(w: &mut [u8], off: usize, n: usize, v: u64) {
    for i in 0..n {
        w[off + i] = (v >> (8 * i)) as u8;
    }
}

impl Kind {
    /// Bytes this kind occupies.
    pub fn size(self) -> usize {
        match self {
            Kind::U8 | Kind::Dtype | Kind::Enum(_) => 1,
            Kind::U16 => 2,
            Kind::U32 | Kind::I32 | Kind::F32 => 4,
            Kind::U64 | Kind::Addr | Kind::VarAddr => 8,
            Kind::Ap(d) => 4 + 4 * d as usize,
            Kind::Bytes(n) => n as usize,
        }
    }

    fn read(self, w: &[u8], off: usize) -> Value {
        match self {
            Kind::U8 | Kind::Dtype | Kind::Enum(_) => Value::U(w[off] as u64),
            Kind::U16 => Value::U(rd(w, off, 2)),
            Kind::U32 => Value::U(rd(w, off, 4)),
            Kind::U64 => Value::U(rd(w, off, 8)),
            Kind::I32 => Value::I(rd(w, off, 4) as u32 as i32 as i64),
            Kind::F32 => Value::F32(rd(w, off, 4) as u32),
            Kind::Addr => Value::Addr(DmaAddr::decode(rd(w, off, 8))),
            Kind::VarAddr => Value::Addr(DmaAddr::decode_var32(rd(w, off, 8))),
            Kind::Ap(d) => {
                let d = d as usize;
                let mut ap = AccessPattern {
                    addr: rd(w, off, 4) as u32,
                    dims: d as u8,
                    ..Default::default()
                };
                for i in 0..d {
                    ap.step[i] = rd(w, off + 4 + 2 * i, 2) as u16 as i16;
                    ap.num[i] = rd(w, off + 4 + 2 * d + 2 * i, 2) as u16;
                }
                Value::Ap(ap)
            }
            Kind::Bytes(n) => Value::Bytes(w[off..off + n as usize].to_vec()),
        }
    }

    /// Write `v`; values of the wrong shape or out of range are truncated to the field.
    fn write(self, w: &mut [u8], off: usize, v: &Value) {
        let n = self.size();
        match (self, v) {
            (Kind::Ap(d), Value::Ap(ap)) => {
                let d = d as usize;
                wr(w, off, 4, ap.addr as u64);
                for i in 0..d {
                    wr(w, off + 4 + 2 * i, 2, ap.step[i] as u16 as u64);
                    wr(w, off + 4 + 2 * d + 2 * i, 2, ap.num[i] as u64);
                }
            }
            (Kind::VarAddr, Value::Addr(a)) => wr(w, off, n, a.encode_var32()),
            (_, Value::Addr(a)) => wr(w, off, n, a.encode()),
            (_, Value::U(x)) => wr(w, off, n, *x),
            (_, Value::I(x)) => wr(w, off, n, *x as u64),
            (_, Value::F32(x)) => wr(w, off, n, *x as u64),
            (_, Value::Bytes(b)) => {
                for (i, x) in b.iter().take(n).enumerate() {
                    w[off + i] = *x;
                }
            }
            (_, Value::Ap(_)) => {}
        }
    }
}

impl CaymanInstr {
    /// Decode one word. Every byte is accounted for: named fields, or `unknown` runs.
    pub fn decode(ns: Namespace, w: &[u8; WORD]) -> CaymanInstr {
        let opcode = Opcode::from_byte(ns, w[0]);
        let specs = layout_of(opcode);
        let mut covered = [false; WORD];
        covered[..12].fill(true);
        let mut fields = Vec::with_capacity(specs.len());
        for s in specs {
            let off = s.off as usize;
            fields.push(Field {
                spec: s,
                value: s.kind.read(w, off),
            });
            covered[off..off + s.kind.size()].fill(true);
        }
        // Each run of uncovered bytes copied once (not grown a byte at a time: every word of
        // every execution is decoded).
        let mut unknown: Vec<RawRange> = Vec::new();
        let mut i = 12;
        while i < WORD {
            if covered[i] {
                i += 1;
                continue;
            }
            let end = covered[i..].iter().position(|c| *c).map_or(WORD, |n| i + n);
            unknown.push(RawRange {
                off: i as u8,
                bytes: w[i..end].to_vec(),
            });
            i = end;
        }
        CaymanInstr {
            ns,
            opcode,
            opcode_byte: w[0],
            header: Header::decode(w),
            fields,
            unknown,
        }
    }

    /// Decode every word of a byte slice (a trailing partial word is ignored).
    pub fn decode_all(ns: Namespace, bytes: &[u8]) -> Vec<CaymanInstr> {
        bytes
            .chunks_exact(WORD)
            .map(|c| {
                let mut w = [0u8; WORD];
                w.copy_from_slice(c);
                CaymanInstr::decode(ns, &w)
            })
            .collect()
    }

    /// Decode a program slot by slot, grouping multi-slot instructions: each entry is the pc
    /// (slot index) of an instruction's first slot, the instruction, and its extension slot
    /// (the DMA_DIRECT2D_EXT after a DMA_DIRECT2D), so pcs stay slot indices.
    pub fn decode_program(ns: Namespace, bytes: &[u8]) -> Vec<Slotted> {
        let words = CaymanInstr::decode_all(ns, bytes);
        let mut out = Vec::with_capacity(words.len());
        let mut it = words.into_iter().enumerate().peekable();
        while let Some((pc, instr)) = it.next() {
            let next = it.peek().map(|(_, n)| n.opcode);
            let ext = if instr.opcode.slots(next) == 2 {
                it.next().map(|(_, e)| e)
            } else {
                None
            };
            out.push(Slotted {
                pc: pc as u32,
                instr,
                ext,
            });
        }
        out
    }

    /// Build an instruction from its opcode, header and field values (in layout order;
    /// missing values are zero). Unknown bytes are zero.
    pub fn new(ns: Namespace, opcode: Opcode, header: Header, values: Vec<Value>) -> CaymanInstr {
        let mut w = [0u8; WORD];
        w[0] = opcode.byte(ns).unwrap_or(0);
        header.encode(&mut w);
        for (s, v) in layout_of(opcode).iter().zip(values.iter()) {
            s.kind.write(&mut w, s.off as usize, v);
        }
        let mut d = CaymanInstr::decode(ns, &w);
        d.opcode = opcode;
        d
    }

    /// Encode back to 64 bytes.
    pub fn encode(&self) -> [u8; WORD] {
        let mut w = [0u8; WORD];
        w[0] = self.opcode.byte(self.ns).unwrap_or(self.opcode_byte);
        self.header.encode(&mut w);
        for r in &self.unknown {
            let o = r.off as usize;
            w[o..o + r.bytes.len()].copy_from_slice(&r.bytes);
        }
        for f in &self.fields {
            f.spec.kind.write(&mut w, f.spec.off as usize, &f.value);
        }
        w
    }

    /// The same instruction in the other namespace (what the runtime's pseudo-instruction
    /// translation does to the opcode byte; DMA addresses are not relocated here).
    pub fn with_namespace(&self, ns: Namespace) -> CaymanInstr {
        let mut c = self.clone();
        c.ns = ns;
        if let Some(b) = self.opcode.byte(ns) {
            c.opcode_byte = b;
        }
        c
    }

    /// A named field.
    pub fn get(&self, name: &str) -> Option<&Value> {
        // Names are a few bytes: compared inline, not through a `memcmp` call per field (the
        // device model looks fields up on every word it runs).
        let same =
            |a: &str| a.len() == name.len() && a.bytes().zip(name.bytes()).all(|(x, y)| x == y);
        self.fields
            .iter()
            .find(|f| same(f.spec.name))
            .map(|f| &f.value)
    }

    /// A named unsigned field.
    pub fn u(&self, name: &str) -> Option<u64> {
        match self.get(name)? {
            Value::U(v) => Some(*v),
            _ => None,
        }
    }

    pub fn i(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::I(v) => Some(*v),
            _ => None,
        }
    }

    pub fn f32(&self, name: &str) -> Option<f32> {
        match self.get(name)? {
            Value::F32(v) => Some(f32::from_bits(*v)),
            _ => None,
        }
    }

    pub fn ap(&self, name: &str) -> Option<AccessPattern> {
        match self.get(name)? {
            Value::Ap(v) => Some(*v),
            _ => None,
        }
    }

    pub fn addr(&self, name: &str) -> Option<DmaAddr> {
        match self.get(name)? {
            Value::Addr(v) => Some(*v),
            _ => None,
        }
    }

    pub fn dtype(&self, name: &str) -> Option<Dtype> {
        Dtype::from_code(self.u(name)? as u8)
    }

    /// Unknown byte runs that are not all zero (what the disassembler shows).
    pub fn nonzero_unknown(&self) -> impl Iterator<Item = &RawRange> {
        self.unknown
            .iter()
            .filter(|r| r.bytes.iter().any(|b| *b != 0))
    }

    /// Best-effort mapping onto the device model's [`Instr`], for opcodes whose semantics
    /// `Op` can express. `None` when the opcode or an operand has no `Op` form (e.g. MATMUL,
    /// whose stationary operand comes from the preceding LDWEIGHTS).
    pub fn to_instr(&self) -> Option<Instr> {
        let sync = self.header.sync()?;
        let op = match self.opcode {
            Opcode::Nop | Opcode::EventSemaphore | Opcode::Drain | Opcode::SetOrderingMode => {
                if self.opcode == Opcode::EventSemaphore && self.u("ext_op").unwrap_or(0) != 0 {
                    return None;
                }
                Op::Nop
            }
            Opcode::Copy | Opcode::Cast => Op::Copy {
                dst: self.tensor("dst", "dst_dtype")?,
                src: self.tensor("src", "src_dtype")?,
            },
            Opcode::Activate => {
                let func = match self.u("func")? {
                    7 => ActFunc::Exp,
                    _ => return None,
                };
                let dt = self.u("dtype_pair")? as u8;
                let bias_dt = Dtype::from_code(dt >> 4)?;
                let bias_addr = self.u("bias_addr")? as u32;
                let ch = self.u("channels")? as u8;
                Op::Activation {
                    func,
                    dst: self.tensor("dst", "dst_dtype")?,
                    src: self.tensor_dt("src", Dtype::from_code(dt & 0xf)?)?,
                    bias: Some(TensorRef::tile(
                        space_of(bias_addr),
                        bias_dt,
                        0,
                        ch,
                        bias_addr & !PSUM_BIT,
                        1,
                    )),
                    scale: self.f32("scale")?,
                }
            }
            Opcode::TensorScalar => {
                // Only `op0` with an immediate operand and `op1` = BYPASS map onto Op.
                if self.u("imm_src")? & 1 != 0 || self.u("op1")? != 0 {
                    return None;
                }
                let op = alu_op(self.u("op0")? as u8)?;
                Op::TensorScalar {
                    op,
                    dst: self.tensor("dst", "dst_dtype")?,
                    src: self.tensor("src", "src_dtype")?,
                    scalar: f32::from_bits(self.u("imm0")? as u32),
                }
            }
            Opcode::TensorTensor => {
                let dt = self.u("dtype_pair")? as u8;
                Op::TensorTensor {
                    op: alu_op(self.u("op")? as u8)?,
                    dst: self.tensor("dst", "dst_dtype")?,
                    a: self.tensor_dt("src0", Dtype::from_code(dt >> 4)?)?,
                    b: self.tensor_dt("src1", Dtype::from_code(dt & 0xf)?)?,
                }
            }
            _ => return None,
        };
        Some(Instr { sync, op })
    }

    fn tensor(&self, ap: &str, dt: &str) -> Option<TensorRef> {
        self.tensor_dt(ap, self.dtype(dt)?)
    }

    fn tensor_dt(&self, ap: &str, dtype: Dtype) -> Option<TensorRef> {
        let a = self.ap(ap)?;
        let ch = self.u("channels")? as u8;
        // Only patterns whose dims beyond the first two are trivial fit TensorRef.
        let d = a.dims as usize;
        if (2..d).any(|i| a.num[i] > 1) {
            return None;
        }
        Some(TensorRef {
            space: a.space(),
            dtype,
            partition: 0,
            partitions: ch,
            offset: a.offset(),
            num: [a.num.get(1).copied().unwrap_or(1), a.num[0]],
            step: [a.step.get(1).copied().unwrap_or(0), a.step[0]],
        })
    }
}

fn space_of(addr: u32) -> Space {
    if addr & PSUM_BIT != 0 {
        Space::Psum
    } else {
        Space::Sbuf
    }
}

/// The ALU codes seen: 4 ADD, 6 MULTIPLY, 8 MAX (0 is BYPASS, no `AluOp`).
fn alu_op(code: u8) -> Option<AluOp> {
    Some(match code {
        4 => AluOp::Add,
        6 => AluOp::Multiply,
        8 => AluOp::Maximum,
        _ => return None,
    })
}

#[cfg(test)]
mod lookup_tests {
    use super::*;

    /// Every field of every opcode's layout is found by its name, with its own value (names
    /// that differ only in their last byte, as `src_step0` and `src_step1` do, included),
    /// also when the name is built at run time, and names no field has are not found.
    #[test]
    fn fields_are_found_by_name_and_only_by_their_own() {
        // Bytes that give distinct values to distinct offsets.
        let w: [u8; WORD] = std::array::from_fn(|i| (i as u8).wrapping_mul(29).wrapping_add(3));
        for &(_, loaded, _) in OPCODES {
            let Some(byte) = loaded else { continue };
            let mut word = w;
            word[0] = byte;
            let ci = CaymanInstr::decode(Namespace::Loaded, &word);
            let op = ci.opcode;
            for f in &ci.fields {
                let first = ci.fields.iter().find(|g| g.spec.name == f.spec.name);
                assert_eq!(
                    ci.get(f.spec.name),
                    first.map(|g| &g.value),
                    "{op:?} {}",
                    f.spec.name
                );
                // The same name built at run time (not the layout's literal).
                let owned = String::from(f.spec.name);
                assert_eq!(ci.get(&owned), first.map(|g| &g.value));
            }
            for absent in ["", "x", "src_step9", "dst_num7", "a_name_longer_than_any"] {
                if ci.fields.iter().all(|g| g.spec.name != absent) {
                    assert_eq!(ci.get(absent), None, "{op:?} {absent}");
                }
            }
        }
    }
}
