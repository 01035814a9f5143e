//! The one decoded instruction form every encoding front end produces and every engine runs.
//!
//! Semantics follow the public NKI ISA (`nki-isa-and-cost-model.md` §2) plus the control
//! operations seen in real programs (semaphore wait/update in every instruction's header,
//! DMA trigger, notify, end).

use crate::dtype::Dtype;
use std::fmt;

/// The five engines of a NeuronCore, in the order AWS's profiler lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Engine {
    /// PE / TensorE: matmul into PSUM.
    Pe = 0,
    /// ACT / ScalarE: activation functions.
    Act = 1,
    /// POOL / GpSimdE.
    Pool = 2,
    /// DVE / VectorE: elementwise and reductions.
    Dve = 3,
    /// SP / SyncE: sequencer-only, mostly triggers DMA.
    Sp = 4,
}

impl Engine {
    pub const ALL: [Engine; 5] = [
        Engine::Pe,
        Engine::Act,
        Engine::Pool,
        Engine::Dve,
        Engine::Sp,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn from_index(i: usize) -> Option<Engine> {
        Engine::ALL.get(i).copied()
    }

    /// The profiler's engine name.
    pub fn profiler_name(self) -> &'static str {
        match self {
            Engine::Pe => "Tensor",
            Engine::Act => "Scalar",
            Engine::Pool => "GpSimd",
            Engine::Dve => "Vector",
            Engine::Sp => "Sync",
        }
    }

    /// The short name used in `def.json` (`pe`, `act`, `pool`, `dve`, `sp`).
    pub fn def_name(self) -> &'static str {
        match self {
            Engine::Pe => "pe",
            Engine::Act => "act",
            Engine::Pool => "pool",
            Engine::Dve => "dve",
            Engine::Sp => "sp",
        }
    }

    pub fn from_def_name(s: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.def_name() == s)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.profiler_name())
    }
}

/// On-chip memory an operand lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    /// State buffer (SBUF): 128 partitions.
    Sbuf,
    /// Partial-sum buffer (PSUM): 128 partitions, fp32 accumulation.
    Psum,
}

/// A 2-D (partition x free) view of SBUF or PSUM.
///
/// Partitions `partition .. partition + partitions` are active. Within each partition the
/// free pattern is `num[0]` x `num[1]` elements: element `(i, j)` sits at byte
/// `offset + (i * step[0] + j * step[1]) * dtype.size()` (steps in elements, as in the
/// hardware's `[step, num]` access patterns, `nki-isa-and-cost-model.md` §1.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorRef {
    pub space: Space,
    pub dtype: Dtype,
    pub partition: u8,
    pub partitions: u8,
    pub offset: u32,
    pub num: [u16; 2],
    pub step: [i16; 2],
}

impl TensorRef {
    /// A contiguous `[partitions, n]` tile at `offset` of each partition.
    pub fn tile(
        space: Space,
        dtype: Dtype,
        partition: u8,
        partitions: u8,
        offset: u32,
        n: u16,
    ) -> Self {
        TensorRef {
            space,
            dtype,
            partition,
            partitions,
            offset,
            num: [1, n],
            step: [0, 1],
        }
    }

    /// Elements per partition.
    pub fn free_elems(&self) -> usize {
        self.num[0] as usize * self.num[1] as usize
    }

    /// Whether the free pattern is one contiguous run.
    pub fn is_contiguous(&self) -> bool {
        self.step[1] == 1 && (self.num[0] <= 1 || self.step[0] as i32 == self.num[1] as i32)
    }

    /// Byte offsets (relative to the partition start) touched by this pattern: (min, max_end).
    pub fn byte_span(&self) -> (i64, i64) {
        let es = self.dtype.size() as i64;
        let mut lo = 0i64;
        let mut hi = 0i64;
        for d in 0..2 {
            if self.num[d] == 0 {
                return (self.offset as i64, self.offset as i64);
            }
            let ext = (self.num[d] as i64 - 1) * self.step[d] as i64;
            if ext < 0 {
                lo += ext;
            } else {
                hi += ext;
            }
        }
        (
            self.offset as i64 + lo * es,
            self.offset as i64 + (hi + 1) * es,
        )
    }
}

/// Activation functions (ScalarE), computed in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ActFunc {
    Identity = 0,
    Relu = 1,
    Exp = 2,
    /// Exact GELU, x * Phi(x).
    Gelu = 3,
    Tanh = 4,
    Sigmoid = 5,
    Square = 6,
}

impl ActFunc {
    pub fn from_code(c: u8) -> Option<ActFunc> {
        Some(match c {
            0 => ActFunc::Identity,
            1 => ActFunc::Relu,
            2 => ActFunc::Exp,
            3 => ActFunc::Gelu,
            4 => ActFunc::Tanh,
            5 => ActFunc::Sigmoid,
            6 => ActFunc::Square,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ActFunc::Identity => "identity",
            ActFunc::Relu => "relu",
            ActFunc::Exp => "exp",
            ActFunc::Gelu => "gelu",
            ActFunc::Tanh => "tanh",
            ActFunc::Sigmoid => "sigmoid",
            ActFunc::Square => "square",
        }
    }
}

/// Binary ALU operators (VectorE / GpSimdE / ScalarE), NKI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AluOp {
    Add = 0,
    Subtract = 1,
    Multiply = 2,
    Maximum = 3,
    Minimum = 4,
    Divide = 5,
}

impl AluOp {
    pub fn from_code(c: u8) -> Option<AluOp> {
        Some(match c {
            0 => AluOp::Add,
            1 => AluOp::Subtract,
            2 => AluOp::Multiply,
            3 => AluOp::Maximum,
            4 => AluOp::Minimum,
            5 => AluOp::Divide,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            AluOp::Add => "add",
            AluOp::Subtract => "subtract",
            AluOp::Multiply => "multiply",
            AluOp::Maximum => "maximum",
            AluOp::Minimum => "minimum",
            AluOp::Divide => "divide",
        }
    }
    #[inline]
    pub fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            AluOp::Add => a + b,
            AluOp::Subtract => a - b,
            AluOp::Multiply => a * b,
            AluOp::Maximum => a.max(b),
            AluOp::Minimum => a.min(b),
            AluOp::Divide => a / b,
        }
    }
}

/// Condition of a semaphore/event wait in an instruction header. Codes are the real trn2
/// header codes where known (`trn2-encoding-notes.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitCond {
    /// `$S[i] == v` (code 0x01).
    Eq,
    /// `$S[i] >= v` (code 0x05).
    Ge,
    /// Wait for event `i` to be set, then clear it (code 0x07).
    EventSetThenClear,
    /// `$S[i] > v` (code 0x04; only `$S[0] > 0` with a decrement, AWS's per-execution start
    /// wait at the loop head — `docs/isa/cayman.md` §5.2; MED).
    Gt,
}

impl WaitCond {
    pub fn code(self) -> u8 {
        match self {
            WaitCond::Eq => 0x01,
            WaitCond::Ge => 0x05,
            WaitCond::EventSetThenClear => 0x07,
            WaitCond::Gt => 0x04,
        }
    }
    pub fn from_code(c: u8) -> Option<WaitCond> {
        Some(match c {
            0x01 => WaitCond::Eq,
            0x05 => WaitCond::Ge,
            0x07 => WaitCond::EventSetThenClear,
            0x04 => WaitCond::Gt,
            _ => return None,
        })
    }
}

/// Update applied to a semaphore/event when an instruction completes. Codes are the real
/// trn2 codes (`trn2-encoding-notes.md` §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SemOp {
    /// `$S[i]++` (0x13).
    Inc,
    /// `$S[i]--` (0x14).
    Dec,
    /// `$S[i] += imm` (0x15).
    Add,
    /// `$S[i] = imm` (0x19).
    Set,
    /// Set event `i` (0x11).
    EventSet,
}

impl SemOp {
    pub fn code(self) -> u8 {
        match self {
            SemOp::EventSet => 0x11,
            SemOp::Inc => 0x13,
            SemOp::Dec => 0x14,
            SemOp::Add => 0x15,
            SemOp::Set => 0x19,
        }
    }
    pub fn from_code(c: u8) -> Option<SemOp> {
        Some(match c {
            0x11 => SemOp::EventSet,
            0x13 => SemOp::Inc,
            0x14 => SemOp::Dec,
            0x15 => SemOp::Add,
            0x19 => SemOp::Set,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SemWait {
    pub cond: WaitCond,
    pub index: u8,
    pub value: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SemUpdate {
    pub op: SemOp,
    pub index: u8,
    /// Immediate for `Add`/`Set`; ignored (0) otherwise.
    pub value: i32,
}

/// The synchronisation header every instruction carries: wait before issue, update on
/// completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sync {
    pub wait: Option<SemWait>,
    pub update: Option<SemUpdate>,
}

/// What an instruction does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Nop,
    /// `dst[m, n] (+)= sum_k stationary[k, m] * moving[k, n]`, fp32 in PSUM. K runs over the
    /// (shared) partitions of both operands; M = stationary free size (<= 128) = dst
    /// partitions; N = moving free size (<= 512) = dst free size.
    MatMul {
        dst: TensorRef,
        stationary: TensorRef,
        moving: TensorRef,
        accumulate: bool,
    },
    /// `dst = func(src * scale + bias[p])`, bias a per-partition `[P, 1]` column.
    Activation {
        func: ActFunc,
        dst: TensorRef,
        src: TensorRef,
        bias: Option<TensorRef>,
        scale: f32,
    },
    /// `dst = a op b`, elementwise.
    TensorTensor {
        op: AluOp,
        dst: TensorRef,
        a: TensorRef,
        b: TensorRef,
    },
    /// `dst = src op scalar`.
    TensorScalar {
        op: AluOp,
        dst: TensorRef,
        src: TensorRef,
        scalar: f32,
    },
    /// `dst = src`, converting between dtypes (round to nearest even).
    Copy {
        dst: TensorRef,
        src: TensorRef,
    },
    /// NEFF-side pseudo-instruction: start DMA block `block` of this engine's JSON `dma`
    /// list. The runtime rewrites it into [`Op::DmaStart`] at load.
    DmaTrigger {
        block: u16,
    },
    /// Hardware form: advance the tail of DMA queue (`dma_engine` of this core, `queue`) by
    /// `descs` descriptor pairs.
    DmaStart {
        dma_engine: u8,
        queue: u8,
        descs: u32,
    },
    /// Post an explicit notification with `id` to this engine's NOTIFY queue.
    Notify {
        id: u16,
    },
    /// End of this engine's program: post the end-of-execution notification and halt.
    End,
}

/// One decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instr {
    pub sync: Sync,
    pub op: Op,
}

impl Instr {
    pub fn new(op: Op) -> Self {
        Instr {
            sync: Sync::default(),
            op,
        }
    }

    pub fn wait(mut self, cond: WaitCond, index: u8, value: i32) -> Self {
        self.sync.wait = Some(SemWait { cond, index, value });
        self
    }

    pub fn then(mut self, op: SemOp, index: u8, value: i32) -> Self {
        self.sync.update = Some(SemUpdate { op, index, value });
        self
    }

    /// The opcode's name as this project's disassembler prints it.
    pub fn mnemonic(&self) -> &'static str {
        match self.op {
            Op::Nop => "NOP",
            Op::MatMul { .. } => "MATMUL",
            Op::Activation { .. } => "ACTIVATE",
            Op::TensorTensor { .. } => "TENSOR_TENSOR",
            Op::TensorScalar { .. } => "TENSOR_SCALAR",
            Op::Copy { .. } => "COPY",
            Op::DmaTrigger { .. } => "DMA_TRIGGER",
            Op::DmaStart { .. } => "DMA_START",
            Op::Notify { .. } => "NOTIFY",
            Op::End => "END",
        }
    }
}
