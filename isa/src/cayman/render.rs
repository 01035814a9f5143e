//! Operand text in the syntax of AWS's profiler, program listings with profiler pcs, and
//! the token comparison used by the acceptance figures.

use super::layout::{
    enum_name, ACT_FUNCS, ALU_OPS, CMP_OPS, FP32_MODES, ORDERING, RANGE_CLEAR_MODES, TRANSPOSE,
};
use super::{AccessPattern, CaymanInstr, DmaAddr, Namespace, Opcode, Value, WORD};
use crate::dtype::Dtype;
use crate::instr::Engine;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Names the profiler prints next to semaphore numbers and that DMA addresses are
/// relative to. Built from a NEFF's `def.json` (see `neuron-emu disasm`).
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// Semaphore index → profiler name (`Tensor`, `qGpSimdDynamic`, ...).
    pub sems: BTreeMap<u8, String>,
    /// `def.json` var_id → variable name.
    pub vars: BTreeMap<u8, String>,
}

/// Engine semaphores named by the profiler in every akc profile (S[4]..S[6]).
pub const ENGINE_SEMAPHORES: &[(u8, &str)] = &[(4, "Scalar"), (5, "Tensor"), (6, "Vector")];

impl Names {
    /// Engine semaphores plus DMA queues: each `def.json` `dma_queue` name with its engine
    /// part in profiler spelling (`qPoolDynamic` → `qGpSimdDynamic`) for every semaphore
    /// of its `semaphore_set`.
    pub fn with_queues<'a>(queues: impl IntoIterator<Item = (&'a str, &'a [u32])>) -> Names {
        let mut n = Names::default();
        for (i, s) in ENGINE_SEMAPHORES {
            n.sems.insert(*i, (*s).to_owned());
        }
        for (name, sems) in queues {
            let pn = profiler_queue_name(name);
            for s in sems {
                if let Ok(s) = u8::try_from(*s) {
                    n.sems.insert(s, pn.clone());
                }
            }
        }
        n
    }
}

/// `qPoolDynamic` → `qGpSimdDynamic`, `qSPDynamicHW` → `qSyncDynamicHW`,
/// `qActDynamicHW` → `qScalarDynamicHW` (PE/DVE by analogy).
pub fn profiler_queue_name(def_name: &str) -> String {
    const MAP: &[(&str, &str)] = &[
        ("Pool", "GpSimd"),
        ("SP", "Sync"),
        ("Act", "Scalar"),
        ("PE", "Tensor"),
        ("DVE", "Vector"),
    ];
    if let Some(rest) = def_name.strip_prefix('q') {
        for (d, p) in MAP {
            if let Some(tail) = rest.strip_prefix(d) {
                return format!("q{p}{tail}");
            }
        }
    }
    def_name.to_owned()
}

/// The profiler's dtype names (`fp32`, `bfloat16`, `int32`, `uint32`); other codes use the
/// `nrt_dtype_t` names.
pub fn dtype_name(code: u8) -> String {
    match code {
        0x0a => "fp32".into(),
        0x06 => "bfloat16".into(),
        0x08 => "int32".into(),
        0x09 => "uint32".into(),
        c => Dtype::from_code(c)
            .map(|d| d.name().to_owned())
            .unwrap_or_else(|| format!("dtype{c}")),
    }
}

fn ap_text(ap: &AccessPattern) -> String {
    let d = ap.dims as usize;
    let s: Vec<String> = ap.step[..d].iter().map(|x| x.to_string()).collect();
    let n: Vec<String> = ap.num[..d].iter().map(|x| x.to_string()).collect();
    format!("0x{:x}[{}][{}]", ap.addr, s.join(","), n.join(","))
}

fn enum_text(table: &[(u8, &'static str)], code: u64) -> String {
    enum_name(table, code)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("0x{code:x}"))
}

impl CaymanInstr {
    fn uu(&self, n: &str) -> u64 {
        self.u(n).unwrap_or(0)
    }

    /// The bits of an f32 field.
    fn uu_bits(&self, n: &str) -> u32 {
        self.f32(n).map(f32::to_bits).unwrap_or(0)
    }

    fn tensor_text(&self, ap: &str, dt: Option<u8>) -> String {
        let a = self.ap(ap).unwrap_or_default();
        match dt {
            Some(dt) => format!("{ap}={}@{}", dtype_name(dt), ap_text(&a)),
            None => format!("{ap}={}", ap_text(&a)),
        }
    }

    fn sem_text(names: &Names, i: u8) -> String {
        match names.sems.get(&i) {
            Some(n) => format!("S[{i}] ({n})"),
            None => format!("S[{i}]"),
        }
    }

    /// The header's wait and update in profiler syntax (`S[5] (Tensor)>=1`,
    /// `S[4] (Scalar)++@complete`, `$E[4]==1-`, `$E[3]+@complete`).
    pub fn header_text(&self, names: &Names) -> Vec<String> {
        let h = &self.header;
        let mut t = Vec::new();
        match h.wait_cond {
            0 => {}
            0x07 => t.push(format!("$E[{}]=={}-", h.wait_index, h.wait_value)),
            c => {
                let op = match c {
                    0x01 => "==".to_owned(),
                    0x05 => ">=".to_owned(),
                    c => format!("?cond{c:#x}?"),
                };
                t.push(format!(
                    "{}{op}{}",
                    Self::sem_text(names, h.wait_index),
                    h.wait_value
                ));
            }
        }
        match h.update_op {
            0 => {}
            0x11 => t.push(format!("$E[{}]+@complete", h.update_index)),
            c => {
                let op = match c {
                    0x13 => "++".to_owned(),
                    0x14 => "--".to_owned(),
                    c => format!("?op{c:#x}?"),
                };
                t.push(format!(
                    "{}{op}@complete",
                    Self::sem_text(names, h.update_index)
                ));
            }
        }
        t
    }

    fn dma_addr_text(&self, side: &str, names: &Names) -> String {
        match self.addr(side) {
            Some(DmaAddr::Absolute(v)) => format!("{side}_addr_imm=0x{v:x}"),
            Some(DmaAddr::Table { offset, index, .. }) => {
                format!("{side}_table_offset_imm=0x{offset:x} {side}_table_index={index}")
            }
            Some(DmaAddr::TableReg { reg, index, .. }) => {
                format!("{side}_table_offset_reg=$R[{reg}] {side}_table_index={index}")
            }
            Some(DmaAddr::VarRelative { offset, var_id, .. }) => {
                let v = names
                    .vars
                    .get(&var_id)
                    .cloned()
                    .unwrap_or_else(|| format!("var{var_id}"));
                format!("{side}_addr_imm={v}+0x{offset:x}")
            }
            Some(DmaAddr::Other(v)) => format!("{side}_addr_raw=0x{v:016x}"),
            None => String::new(),
        }
    }

    /// The operand text in the profiler's syntax, followed by `raw[a..b]=hex` for every
    /// non-zero byte run that no field names.
    pub fn operands(&self, names: &Names) -> String {
        let mut t = self.header_text(names);
        let mut p = |s: String| t.push(s);
        match self.opcode {
            Opcode::Ldweights => {
                if self.uu("fp32_mode") != 0 {
                    p(format!(
                        "fp32_mode={}",
                        enum_text(FP32_MODES, self.uu("fp32_mode"))
                    ));
                }
                p(format!(
                    "transpose_mode={}",
                    enum_text(TRANSPOSE, self.uu("transpose"))
                ));
                p(self.tensor_text("src", Some(self.uu("src_dtype") as u8)));
                p(format!("{}*{}", self.uu("rows"), self.uu("cols")));
            }
            Opcode::Matmul => {
                p(format!("acc_flags={}", self.uu("acc_flags")));
                if self.uu("fp32_mode") != 0 {
                    p(format!(
                        "fp32_mode={}",
                        enum_text(FP32_MODES, self.uu("fp32_mode"))
                    ));
                }
                p(self.tensor_text("src", Some(self.uu("src_dtype") as u8)));
                p(self.tensor_text("dst", None));
                p(format!("{}*{}", self.uu("rows"), self.uu("cols")));
            }
            Opcode::Copy | Opcode::Cast | Opcode::Reciprocal => {
                p(self.tensor_text("src", Some(self.uu("src_dtype") as u8)));
                p(self.tensor_text("dst", Some(self.uu("dst_dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::Memset => {
                p(self.tensor_text("dst", Some(self.uu("dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::TensorReduce => {
                p(format!("op={}", enum_text(ALU_OPS, self.uu("op"))));
                p(format!(
                    "dim={}",
                    enum_text(super::layout::REDUCE_DIMS, self.uu("dim"))
                ));
                if self.uu("negated") != 0 {
                    p(format!("negated={}", self.uu("negated")));
                }
                p(self.tensor_text("src", Some(self.uu("src_dtype") as u8)));
                p(self.tensor_text("dst", Some(self.uu("dst_dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::Activate => {
                let pair = self.uu("dtype_pair") as u8;
                p(enum_text(ACT_FUNCS, self.uu("func")));
                if self.uu("bias_src") == 1 {
                    p(format!(
                        "bias={}",
                        f32::from_bits(self.uu("bias_addr") as u32)
                    ));
                } else {
                    p(format!(
                        "bias_ptr={}@0x{:x}",
                        dtype_name(pair >> 4),
                        self.uu("bias_addr")
                    ));
                }
                p(self.tensor_text("src", Some(pair & 0xf)));
                p(self.tensor_text("dst", Some(self.uu("dst_dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
                if self.uu("scale_src") == 1 {
                    p(format!("scale_ptr=fp32@0x{:x}", self.uu_bits("scale")));
                } else {
                    p(format!("scale={:.6}", self.f32("scale").unwrap_or(0.0)));
                }
                p(format!("imm={:.6}", self.f32("imm").unwrap_or(0.0)));
            }
            Opcode::TensorTensor => {
                let pair = self.uu("dtype_pair") as u8;
                p(format!("op={}", enum_text(ALU_OPS, self.uu("op"))));
                p(self.tensor_text("src0", Some(pair >> 4)));
                p(self.tensor_text("src1", Some(pair & 0xf)));
                p(self.tensor_text("dst", Some(self.uu("dst_dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::TensorScalar => {
                let src = self.uu("imm_src");
                let imm = |i: u64, v: u64| {
                    if src >> i & 1 == 1 {
                        format!("0x{v:x}")
                    } else {
                        format!("{}", f32::from_bits(v as u32))
                    }
                };
                let kind = |i: u64| {
                    if src >> i & 1 == 1 {
                        "PTR"
                    } else {
                        "INSTRUCTION"
                    }
                };
                p(format!(
                    "ops={},{}",
                    enum_text(ALU_OPS, self.uu("op0")),
                    enum_text(ALU_OPS, self.uu("op1"))
                ));
                p(format!(
                    "imm={},{}",
                    imm(0, self.uu("imm0")),
                    imm(1, self.uu("imm1"))
                ));
                p(format!("imm_src={},{}", kind(0), kind(1)));
                p(self.tensor_text("src", Some(self.uu("src_dtype") as u8)));
                p(self.tensor_text("dst", Some(self.uu("dst_dtype") as u8)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::EventSemaphore => {
                let c = self.uu("ext_cond");
                if c != 0 {
                    let op = enum_text(super::layout::SEM_CONDS, c);
                    p(format!(
                        "$S[{}]{op}{}",
                        self.uu("ext_wait_index"),
                        self.uu("ext_wait_value")
                    ));
                }
                let i = self.uu("ext_index");
                match self.uu("ext_op") {
                    0 => {}
                    0x13 => p(format!("$S[{i}]++@complete")),
                    0x14 => p(format!("$S[{i}]--@complete")),
                    0x15 => p(format!("$S[{i}]+={}@complete", self.uu("ext_operand"))),
                    0x19 => p(format!("$S[{i}]={}@complete", self.uu("ext_operand"))),
                    o => p(format!(
                        "$S[{i}]?op{o:#x}?{}@complete",
                        self.uu("ext_operand")
                    )),
                }
            }
            Opcode::Nop => p(format!("cycle={}", self.uu("cycle"))),
            Opcode::SetOrderingMode => p(format!(
                "ordering_mode={}",
                enum_text(ORDERING, self.uu("mode"))
            )),
            Opcode::EventSemaphoreRangeClear => {
                p(format!(
                    "mode={}",
                    enum_text(RANGE_CLEAR_MODES, self.uu("mode"))
                ));
                p(format!("first={}", self.uu("first")));
                p(format!("last={}", self.uu("last")));
            }
            Opcode::Write => {
                let n = if self.uu("size1") != 0 { 2 } else { 1 };
                let list = |a: &str, b: &str, hex: bool| {
                    let f = |x: u64| {
                        if hex {
                            format!("0x{x:x}")
                        } else {
                            x.to_string()
                        }
                    };
                    let mut s = f(self.uu(a));
                    if n == 2 {
                        s = format!("{s},{}", f(self.uu(b)));
                    }
                    s
                };
                p(format!("data={}", list("data0", "data1", true)));
                p(format!("size={}", list("size0", "size1", false)));
                p(format!("dst={}", list("dst0", "dst1", true)));
            }
            Opcode::Notify => p(format!("hint={}", self.uu("hint"))),
            Opcode::CompareBranch => {
                let op = self.uu("cmp_op");
                p(format!("cmp_op={}", enum_text(CMP_OPS, op)));
                if op != 0 {
                    p(format!("dtype={}", dtype_name(self.uu("dtype") as u8)));
                    p(format!("cmp0=$R[{}]", self.uu("cmp0")));
                }
                p(format!(
                    "label_id={}",
                    self.i("label").unwrap_or(0) as i32 as u32
                ));
                if self.header.debug_hint != 0 {
                    p(format!("debugHint={}", self.header.debug_hint));
                }
            }
            Opcode::TensorLoad => {
                p(format!(
                    "addr={}@0x{:x}[{},{}][{},{}]",
                    dtype_name(self.uu("dtype") as u8),
                    self.uu("addr"),
                    self.i("step0").unwrap_or(0),
                    self.i("step1").unwrap_or(0),
                    self.uu("num0"),
                    self.uu("num1")
                ));
                p(self.regs_text());
            }
            Opcode::DmaDirect2d => {
                p(format!("semaphore={}", self.uu("semaphore")));
                p(format!("sem_increment={}", self.uu("sem_increment")));
                p(format!("src_elem_size={}", self.uu("src_elem_size")));
                p(format!("dst_elem_size={}", self.uu("dst_elem_size")));
                let bound = self.uu("bound_reg");
                if bound != 0 {
                    p(format!("bound_reg=$R[{}]", bound & 0x7f));
                    if bound & 0x80 == 0 {
                        p(format!("bound_flag=0x{bound:x}"));
                    }
                }
                for side in ["src", "dst"] {
                    p(format!(
                        "{side}_pattern=[{},{}][{},{}]",
                        self.uu(&format!("{side}_step0")),
                        self.uu(&format!("{side}_step1")),
                        self.uu(&format!("{side}_num0")),
                        self.uu(&format!("{side}_num1"))
                    ));
                }
                p(self.dma_addr_text("src", names));
                p(self.dma_addr_text("dst", names));
                let (i, o) = (self.uu("in_dtype"), self.uu("out_dtype"));
                if i != o {
                    p(format!("in_dtype={}", dtype_name(i as u8)));
                    p(format!("out_dtype={}", dtype_name(o as u8)));
                }
            }
            Opcode::RegisterMove => {
                p(format!("$R[{}]=0x{:x}", self.uu("dst_reg"), self.uu("imm")));
                p(format!("dtype={}", dtype_name(self.uu("dtype") as u8)));
            }
            Opcode::RegisterAlu => {
                p(format!(
                    "$R[{}]=$R[{}]",
                    self.uu("dst_reg"),
                    self.uu("src_reg")
                ));
                p(format!("op={}", enum_text(ALU_OPS, self.uu("op"))));
                p(format!("imm=0x{:x}", self.uu("imm")));
                p(format!("dtype={}", dtype_name(self.uu("dtype") as u8)));
            }
            Opcode::TensorLoadVar => {
                let at = match self.addr("addr") {
                    Some(DmaAddr::VarRelative { offset, var_id, .. }) => {
                        let v = names
                            .vars
                            .get(&var_id)
                            .cloned()
                            .unwrap_or_else(|| format!("var{var_id}"));
                        format!("{v}+0x{offset:x}")
                    }
                    Some(a) => format!("0x{:x}", a.encode()),
                    None => String::new(),
                };
                p(format!(
                    "addr={}@{at}[{},{}][{},{}]",
                    dtype_name(self.uu("dtype") as u8),
                    self.i("step0").unwrap_or(0),
                    self.i("step1").unwrap_or(0),
                    self.uu("num0"),
                    self.uu("num1")
                ));
                p(self.regs_text());
            }
            Opcode::DmaTrigger => {
                p(format!("queue={}", self.queue_name().unwrap_or_default()));
                p(format!("block={}", self.uu("block")));
            }
            Opcode::DmaExt => p(format!("queues={}", self.uu("queues"))),
            Opcode::AffineSelect => {
                let pair = self.uu("dtype_pair") as u8;
                p(format!(
                    "cmp_op={}",
                    enum_text(super::layout::AFFINE_CMPS, self.uu("cmp_op"))
                ));
                p(format!("offset={}", self.i("offset").unwrap_or(0)));
                p(format!(
                    "channel_multiplier={}",
                    self.i("channel_multiplier").unwrap_or(0)
                ));
                if let Some((st, nm)) = self.affine_pattern() {
                    p(format!("pattern={st:?}{nm:?}").replace(' ', ""));
                }
                p(format!("fill=$R[{}]", self.uu("fill_reg")));
                p(self.tensor_text("src", Some(pair >> 4)));
                p(self.tensor_text("dst", Some(pair & 0xf)));
                p(format!("channels={}", self.uu("channels")));
            }
            Opcode::ActTableLoad | Opcode::Drain | Opcode::Unnamed(_) | Opcode::Unknown(_) => {}
        }
        for r in self.nonzero_unknown() {
            // Show the non-zero span of the run.
            let first = r.bytes.iter().position(|b| *b != 0).unwrap_or(0);
            let last = r.bytes.iter().rposition(|b| *b != 0).unwrap_or(0);
            let mut h = String::new();
            for b in &r.bytes[first..=last] {
                let _ = write!(h, "{b:02x}");
            }
            let a = r.off as usize + first;
            t.push(format!("raw[{a}..{}]={h}", r.off as usize + last + 1));
        }
        if self.header.b2 != 0 && self.opcode != Opcode::Notify {
            t.push(format!("raw[2]={:02x}", self.header.b2));
        }
        if self.header.len != 0x10 {
            t.push(format!("raw[1]={:02x}", self.header.len));
        }
        t.join(" ")
    }

    /// `data=$R[a],$R[b]`: the registers a TENSOR_LOAD writes.
    fn regs_text(&self) -> String {
        let n = (self.uu("num0") * self.uu("num1").max(1)).min(4) as usize;
        match self.get("regs") {
            Some(Value::Bytes(r)) => {
                let regs: Vec<String> = r[..n.min(r.len())]
                    .iter()
                    .map(|x| format!("$R[{x}]"))
                    .collect();
                format!("data={}", regs.join(","))
            }
            _ => String::new(),
        }
    }

    /// DMA_TRIGGER's queue name (the bytes up to the first NUL, if they are ASCII).
    pub fn queue_name(&self) -> Option<String> {
        match self.get("queue") {
            Some(Value::Bytes(b)) => {
                let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
                let s = &b[..end];
                s.iter()
                    .all(|c| c.is_ascii_graphic())
                    .then(|| String::from_utf8_lossy(s).into_owned())
            }
            _ => None,
        }
    }

    /// AFFINE_SELECT's pattern: four i16 steps and four u16 counts, innermost first.
    pub fn affine_pattern(&self) -> Option<([i16; 4], [u16; 4])> {
        match self.get("pattern") {
            Some(Value::Bytes(b)) if b.len() == 16 => {
                let mut st = [0i16; 4];
                let mut nm = [0u16; 4];
                for i in 0..4 {
                    st[i] = i16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
                    nm[i] = u16::from_le_bytes([b[8 + 2 * i], b[9 + 2 * i]]);
                }
                Some((st, nm))
            }
            _ => None,
        }
    }

    /// The word as lowercase hex.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(2 * WORD);
        for b in self.encode() {
            let _ = write!(s, "{b:02x}");
        }
        s
    }
}

/// Where a listed word comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Word of the NEFF engine file, at this byte offset.
    Neff { offset: u32 },
    /// Inserted by the runtime (prologue, epilogue).
    Runtime,
}

/// One line of a listing.
#[derive(Debug, Clone)]
pub struct Line {
    pub subgraph: String,
    pub engine: Engine,
    pub pc: u32,
    pub instr: CaymanInstr,
    pub origin: Origin,
}

/// What the runtime prologue length depends on (see `docs/isa/cayman.md` §Prologue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramFeatures {
    /// `def.json` has a `dge-table` variable: the prologue loads `$R[130],$R[131]` (+1 slot).
    pub dge_table: bool,
    /// The Activation engine has `activation_function_sets`: the Scalar prologue sets up the
    /// ACT tables (+10 slots, Scalar only).
    pub act_tables: bool,
    /// The DMA queue this engine starts blocks of with DMA_TRIGGER (its engine JSON's `dma`
    /// blocks name it): the prologue sets its rings up, the epilogue resets it
    /// ([`TriggerQueue::prologue_slots`], [`TriggerQueue::epilogue_slots`]).
    pub trigger_queue: Option<TriggerQueue>,
}

/// A DMA-trigger queue an engine owns, as far as its set-up slots depend on it
/// (`docs/isa/cayman.md` §5.1; three programs of evidence, LOW).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TriggerQueue {
    /// Rings of the queue set (`def.json` `num_queues`, 1..=16: a DMA engine's queues); the
    /// set-up writes them in groups of four, three `0xab` words per group.
    pub rings: u8,
    /// `def.json` `type` is `"data"` (kgm-attn's `qDVESpillReload0`; `"in"` on the two MoE
    /// queues): two more WRITEs after the rings, and again in the epilogue.
    pub data: bool,
    /// The engine's `dma` blocks on this queue (the value of the data queue's WRITEs).
    pub blocks: u32,
}

impl TriggerQueue {
    /// A queue of `num_queues` rings (`def.json`; clamped to 1..=16, a DMA engine's queues: a
    /// set-up for more is not known), of `def.json` type `"data"` or not, with `blocks` DMA
    /// blocks.
    pub fn new(num_queues: u32, data: bool, blocks: usize) -> Self {
        TriggerQueue {
            rings: num_queues.clamp(1, 16) as u8,
            data,
            blocks: u32::try_from(blocks).unwrap_or(u32::MAX),
        }
    }
    /// Ring groups of four (the last may hold fewer).
    pub fn groups(&self) -> u32 {
        u32::from(self.rings.clamp(1, 16)).div_ceil(4)
    }
    /// Prologue slots: the WRITE pair, three `0xab` per ring group, the data queue's two
    /// WRITEs (13 for a 16-ring `"in"` queue, 15 for a `"data"` one).
    pub fn prologue_slots(&self) -> u32 {
        1 + 3 * self.groups() + 2 * u32::from(self.data)
    }
    /// Epilogue slots: the WRITE pair again, and the data queue's two WRITEs (1 or 3).
    pub fn epilogue_slots(&self) -> u32 {
        1 + 2 * u32::from(self.data)
    }
}

/// The pc of a NEFF engine file's word 0: the number of runtime prologue slots before it.
/// Established on the 60 (kernel, subgraph, engine) programs of the six akc profiles; the
/// trigger-queue set-up on the three such programs of the two model layers.
pub fn neff_base(engine: Engine, f: ProgramFeatures) -> u32 {
    let b = match engine {
        Engine::Pe => 65,
        Engine::Act => 55,
        Engine::Pool => 60,
        Engine::Dve => 65,
        Engine::Sp => 48,
    };
    b + u32::from(f.dge_table)
        + if engine == Engine::Act && f.act_tables {
            10
        } else {
            0
        }
        + f.trigger_queue.map_or(0, |q| q.prologue_slots())
}

/// List a NEFF engine file with profiler pcs.
pub fn list_neff(subgraph: &str, engine: Engine, bin: &[u8], f: ProgramFeatures) -> Vec<Line> {
    let base = neff_base(engine, f);
    CaymanInstr::decode_all(Namespace::Neff, bin)
        .into_iter()
        .enumerate()
        .map(|(i, instr)| Line {
            subgraph: subgraph.to_owned(),
            engine,
            pc: base + i as u32,
            instr,
            origin: Origin::Neff {
                offset: (i * WORD) as u32,
            },
        })
        .collect()
}

/// Split text into the whitespace-separated tokens the comparison counts.
pub fn tokens(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// How many of `theirs`' tokens appear in `ours` (multiset intersection), and how many
/// `theirs` has.
pub fn token_agreement(ours: &str, theirs: &str) -> (usize, usize) {
    let mut pool: BTreeMap<&str, usize> = BTreeMap::new();
    for t in tokens(ours) {
        *pool.entry(t).or_default() += 1;
    }
    let th = tokens(theirs);
    let mut hit = 0;
    for t in &th {
        if let Some(c) = pool.get_mut(t) {
            if *c > 0 {
                *c -= 1;
                hit += 1;
            }
        }
    }
    (hit, th.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The queue term: 13 / 15 slots for the 16-ring queues seen; ring counts outside a DMA
    /// engine's 1..=16 are clamped, so a NEFF cannot ask for an unbounded prologue.
    #[test]
    fn trigger_queue_slots() {
        let q = |rings, data| TriggerQueue {
            rings,
            data,
            blocks: 20,
        };
        assert_eq!(q(16, false).prologue_slots(), 13);
        assert_eq!(q(16, true).prologue_slots(), 15);
        assert_eq!(q(16, false).epilogue_slots(), 1);
        assert_eq!(q(16, true).epilogue_slots(), 3);
        assert_eq!(q(0, false).groups(), 1);
        assert_eq!(q(5, false).groups(), 2);
        assert_eq!(q(255, false).groups(), 4);
        let f = |trigger_queue| ProgramFeatures {
            dge_table: true,
            act_tables: false,
            trigger_queue,
        };
        assert_eq!(neff_base(Engine::Dve, f(None)), 66);
        assert_eq!(neff_base(Engine::Dve, f(Some(q(16, true)))), 81);
        assert_eq!(neff_base(Engine::Sp, f(Some(q(16, false)))), 62);
    }
}
