//! Per-opcode field maps: where each operand field sits in the 64-byte word, how it is
//! encoded, how sure we are, and the evidence. `docs/isa/cayman.md` prints these tables.
//!
//! Bytes 0–11 (opcode and [`super::Header`]) are common to every opcode and not listed here.
//! Bytes 12–63 that no entry covers are kept raw by the decoder.

use super::Opcode;

/// Confidence in a field, as in `shared/reference/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grade {
    /// Checked against the profiler's operand text on every profiled word, with variety.
    Certain,
    /// Checked on every profiled word, but few distinct values (or one namespace only).
    High,
    /// Consistent with the bytes and the profile, position or meaning partly inferred.
    Med,
    /// A single value seen, or never profiled: a named hypothesis.
    Low,
}

impl Grade {
    pub fn name(self) -> &'static str {
        match self {
            Grade::Certain => "CERTAIN",
            Grade::High => "HIGH",
            Grade::Med => "MED",
            Grade::Low => "LOW",
        }
    }
}

/// How a field is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    U8,
    U16,
    U32,
    I32,
    F32,
    U64,
    /// A hardware dtype code (`0x0a` fp32, `0x06` bf16, `0x08` int32, `0x09` uint32, ...).
    Dtype,
    /// A one-byte code with the names seen (the raw code is what is stored).
    Enum(&'static [(u8, &'static str)]),
    /// Compute access pattern: u32 address, `n` i16 steps, `n` u16 counts (4 + 4n bytes).
    Ap(u8),
    /// 8-byte DMA address with a tag in byte 7 ([`super::DmaAddr`]).
    Addr,
    /// 8-byte state-buffer address of a NEFF TENSOR_LOAD (`0xce`): u32 var id (bytes 1–3
    /// zero), then a u32 byte offset; read as [`super::DmaAddr::VarRelative`] (or `Other` when
    /// bytes 1–3 are not zero), written as the absolute u64 once relocated.
    VarAddr,
    /// `n` bytes with per-byte meaning (register numbers).
    Bytes(u8),
}

/// One field of an opcode's layout.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    pub name: &'static str,
    /// Byte offset in the word.
    pub off: u8,
    pub kind: Kind,
    pub grade: Grade,
    /// What it means and the evidence anchor (kernel, subgraph, engine, pc).
    pub note: &'static str,
}

const fn f(name: &'static str, off: u8, kind: Kind, grade: Grade, note: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        off,
        kind,
        grade,
        note,
    }
}

use Grade::*;
use Kind::*;

/// ALU operation codes seen (TENSOR_REDUCE `op=`, TENSOR_SCALAR `ops=`).
pub const ALU_OPS: &[(u8, &str)] = &[(0, "BYPASS"), (4, "ADD"), (6, "MULTIPLY"), (8, "MAX")];
pub const FP32_MODES: &[(u8, &str)] = &[(1, "LOW"), (2, "HIGH"), (3, "LOW_HIGH")];
pub const TRANSPOSE: &[(u8, &str)] = &[(0, "DISABLED"), (1, "ENABLED")];
/// Activation function ids: the `func_id` of each `profile_meta_data` entry of the NEFF's
/// activation table files (`natural_log_exp_and_others.json`, `reciprocal_sqrt_and_small.json`,
/// `silu_and_others.json`), named as there without the accuracy suffix.
pub const ACT_FUNCS: &[(u8, &str)] = &[
    (1, "identity"),
    (2, "relu"),
    (3, "leaky_relu"),
    (4, "parametric_relu"),
    (6, "tanh"),
    (7, "EXP"),
    (10, "ln"),
    (11, "derivative_identity"),
    (12, "derivative_relu"),
    (13, "derivative_leaky_relu"),
    (19, "sin"),
    (29, "reciprocal_sqrt"),
    (30, "square"),
    (31, "sign"),
    (33, "abs"),
    (35, "is_finite"),
    (36, "silu"),
    (128, "copy"),
    (130, "memset_zero"),
];
/// AFFINE_SELECT comparison of the affine value with 0 (only code 3 seen; see the field).
pub const AFFINE_CMPS: &[(u8, &str)] = &[(3, "not_equal")];
pub const REDUCE_DIMS: &[(u8, &str)] = &[(2, "X")];
pub const ORDERING: &[(u8, &str)] = &[(0, "relaxed"), (1, "strict")];
pub const RANGE_CLEAR_MODES: &[(u8, &str)] = &[(1, "SEMAPHORE_ZERO")];
pub const CMP_OPS: &[(u8, &str)] = &[(0, "ALWAYS"), (3, "EQ")];
/// Semaphore conditions and operations of EVENT_SEMAPHORE's extended form (bytes 32–35),
/// the same codes as the header's.
pub const SEM_CONDS: &[(u8, &str)] = &[(1, "=="), (5, ">=")];
pub const SEM_OPS: &[(u8, &str)] = &[(0x13, "++"), (0x14, "--"), (0x15, "+="), (0x19, "=")];

static PE_LDWEIGHTS: &[FieldSpec] = &[
    f("src", 16, Ap(3), Certain, "moving/stationary source, 3-D pattern; akc-fused_fp32_s512 sg00 Tensor pc 69 `src=fp32@0x369f4[-1,0,0][128,1,1]`"),
    f("src_dtype", 32, Dtype, Certain, "0x0a fp32 / 0x06 bfloat16; bf16 and fp32 kernels"),
    f("fp32_mode", 33, Enum(FP32_MODES), High, "0 = not printed, 1 LOW, 2 HIGH (LDWEIGHTS), 3 LOW_HIGH (MATMUL); akc-baseline_bf16_s512 sg00 Tensor pc 87"),
    f("transpose", 34, Enum(TRANSPOSE), Certain, "LDWEIGHTS `transpose_mode`; MATMUL profile `instruction_type=TRANSPOSE`; pc 69 vs 71"),
    f("rows", 38, U8, Med, "printed as `rows*cols` (`128*128`); only 128 seen"),
    f("cols", 39, U8, Med, "see rows"),
];

static PE_MATMUL: &[FieldSpec] = &[
    f("src", 16, Ap(3), Certain, "moving source; akc-baseline_bf16_s512 sg00 Tensor pc 70 `src=bfloat16@0x37600[1,0,0][512,1,1]`"),
    f("src_dtype", 32, Dtype, Certain, "0x0a fp32 / 0x06 bfloat16"),
    f("fp32_mode", 33, Enum(FP32_MODES), High, "3 = LOW_HIGH in every fp32 MATMUL; akc-baseline_bf16_s512 sg00 Tensor pc 88"),
    f("transpose", 34, Enum(TRANSPOSE), High, "1 when the profile says `instruction_type=TRANSPOSE` (not printed in operands)"),
    f("rows", 38, U8, Med, "`128*128`"),
    f("cols", 39, U8, Med, "see rows"),
    f("acc_flags", 43, U8, Certain, "`acc_flags=` 0,1,2,3 seen; akc-baseline_bf16_s512 sg00 Tensor pc 104 (=1)"),
    f("dst", 48, Ap(3), Certain, "PSUM destination (bit 25 set), printed without dtype; pc 70 `dst=0x2000800[1,0,0][512,1,1]`"),
];

static ACTIVATE: &[FieldSpec] = &[
    f("src", 16, Ap(3), Certain, "akc-baseline_bf16_s512 sg00 Scalar pc 76 `src=fp32@0x36200[1,1,1][512,1,1]`"),
    f("bias_src", 15, U8, Med, "1: `bias_addr` (bytes 40-43) holds an immediate f32 bias for every partition: in all 200 kgm words with byte 15 = 1 those bits are 0.0, 1e-6 or 1e-9 (the kernels' EPS constants: `var + EPS` lowered to ACTIVATE copy), 0 in every word whose bias is an SBUF address. Byte 12 is 1 in exactly the same words (kept raw; which of the two is the flag is not separable)"),
    f("scale_src", 13, U8, Med, "1: `scale` (bytes 36-39) is the SBUF address of one fp32 per partition, not a float: in all 128 such kgm-moe words the scale bits are SB addresses (0x817200 = partition 32 + 0x17200, where SP.json's qSPIO0 blocks put the router weights); 0 in every other word"),
    f("dtype_pair", 32, U8, Low, "0xaa in all 48: two 4-bit dtype codes (high: bias, low: src), by analogy with TENSOR_TENSOR byte 12"),
    f("dst_dtype", 33, Dtype, Med, "0x0a in all 48 (dst fp32)"),
    f("channels", 34, U8, High, "`channels=128` (only value)"),
    f("func", 35, Enum(ACT_FUNCS), High, "7 = EXP (akc, profiled); the ids and names of every function are the `func_id`/`func_name` pairs of the NEFF's activation table files (kgm-*: 128 copy, 29 reciprocal_sqrt, 36 silu in use); how the hardware evaluates each is not visible"),
    f("scale", 36, F32, Med, "`scale=1.000000`, f32 1.0 in all 48"),
    f("bias_addr", 40, U32, Certain, "`bias_ptr=fp32@0x6010` (pc 76), varies"),
    f("imm", 44, F32, Low, "`imm=0.000000`; zero in all 48"),
    f("dst", 48, Ap(3), Certain, "pc 76 `dst=fp32@0x6020[1,1,1][512,1,1]`"),
];

static TENSOR_TENSOR: &[FieldSpec] = &[
    f(
        "dtype_pair",
        12,
        U8,
        Low,
        "0xaa: two 4-bit dtype codes (src0, src1); nkipy-matmul_large Vector, never profiled",
    ),
    f("dst_dtype", 13, Dtype, Low, "0x0a"),
    f(
        "op",
        14,
        Enum(ALU_OPS),
        Low,
        "4 = ADD (same code as TENSOR_REDUCE op=ADD)",
    ),
    f("channels", 15, U8, Low, "128"),
    f(
        "src0",
        16,
        Ap(3),
        Med,
        "PSUM input (bit 25 set), 3-D pattern as ACTIVATE",
    ),
    f("src1", 32, Ap(3), Med, "SBUF input"),
    f("dst", 48, Ap(3), Med, "SBUF output"),
];

static FOUR_D: &[FieldSpec] = &[
    f("src", 12, Ap(4), Certain, "4-D pattern; akc-baseline_bf16_s512 sg00 Scalar pc 69 `src=fp32@0x2000800[1,1,1,1][512,1,1,1]`"),
    f("src_dtype", 32, Dtype, Certain, "CAST 0x06→0x0a = bfloat16→fp32 (Scalar pc 73)"),
    f("dst_dtype", 33, Dtype, Certain, "CAST 0x0a→0x06 (Scalar pc 84)"),
    f("channels", 34, U8, High, "`channels=128` (only value)"),
    f("dst", 44, Ap(4), Certain, "pc 69 `dst=fp32@0x4000[1,1,1,1][512,1,1,1]`"),
];

static MEMSET: &[FieldSpec] = &[
    f("dtype", 32, Dtype, Low, "0x0a; the only dtype byte set (byte 33 is 0); nkipy-matmul_large Vector, never profiled"),
    f("channels", 34, U8, Low, "128"),
    f(
        "value",
        40,
        U32,
        High,
        "fill value as bits of `dtype`: kgm-attn_tkg_v6 Vector pc 71 `803f` (bf16 1.0, `memset(rms_ones, 1.0)`), pc 76 `286b6ece` (fp32 -1e9, `memset(running_max, -1e9)`)",
    ),
    f("dst", 44, Ap(4), Med, "well-formed 4-D SBUF pattern `[1,1,1,1][512,1,1,1]`; bytes 12-31 hold only a count 512 at 28-29 (kept raw)"),
];

static TENSOR_REDUCE: &[FieldSpec] = &[
    f(
        "src",
        12,
        Ap(4),
        Certain,
        "akc-baseline_bf16_s512 sg00 Vector pc 70",
    ),
    f("src_dtype", 32, Dtype, High, "0x0a"),
    f("dst_dtype", 33, Dtype, High, "0x0a"),
    f("channels", 34, U8, High, "`channels=128`"),
    f(
        "negated",
        35,
        U8,
        Certain,
        "`negated=1` printed when 1 (7 of 110); Vector pc 74",
    ),
    f("op", 36, Enum(ALU_OPS), Certain, "8 MAX / 4 ADD, 55 each"),
    f("dim", 37, Enum(REDUCE_DIMS), Low, "2 in all 110; `dim=X`"),
    f(
        "dst",
        44,
        Ap(4),
        Certain,
        "pc 70 `dst=fp32@0x6000[1,1,1,1][1,1,1,1]`",
    ),
];

static TENSOR_SCALAR: &[FieldSpec] = &[
    f(
        "src",
        16,
        Ap(3),
        Certain,
        "akc-baseline_bf16_s512 sg00 Vector pc 81 `src=fp32@0x6020[1,1,1][512,1,1]`",
    ),
    f(
        "src_dtype",
        32,
        Dtype,
        Med,
        "0x0a (src/dst order by analogy with CAST)",
    ),
    f("dst_dtype", 33, Dtype, Med, "0x0a"),
    f("channels", 34, U8, High, "`channels=128`"),
    f(
        "imm_src",
        35,
        U8,
        Med,
        "bit i set: operand i is a pointer (`PTR`), else an immediate (`INSTRUCTION`); only 1 seen",
    ),
    f("op0", 36, Enum(ALU_OPS), High, "6 = MULTIPLY in all 40"),
    f("op1", 37, Enum(ALU_OPS), Low, "0 = BYPASS in all 40"),
    f(
        "imm0",
        40,
        U32,
        Certain,
        "`imm=0x8040,0` (pc 81): SBUF address when PTR",
    ),
    f("imm1", 44, U32, Low, "0 in all 40"),
    f(
        "dst",
        48,
        Ap(3),
        Certain,
        "pc 81 `dst=fp32@0x8050[1,1,1][512,1,1]`",
    ),
];

static EVENT_SEMAPHORE: &[FieldSpec] = &[
    f(
        "ext_cond",
        32,
        Enum(SEM_CONDS),
        Certain,
        "extended wait: 0x01 `==`, 0x05 `>=`; akc-baseline_bf16_s512 sg00 Tensor pc 54 `$S[2]==8`. Also 0x04 at the loop head (`$S[0]0x40 $S[0]--`, printed raw by the profiler): read as `>` (MED: with value 0 and a decrement, a counting start semaphore)",
    ),
    f("ext_wait_index", 33, U8, Certain, "semaphore waited on"),
    f(
        "ext_op",
        34,
        Enum(SEM_OPS),
        Certain,
        "0x13 `++`, 0x14 `--`, 0x15 `+=imm`, 0x19 `=imm` @complete",
    ),
    f("ext_index", 35, U8, Certain, "semaphore updated"),
    f("ext_wait_value", 36, U32, Certain, "value compared"),
    f("ext_operand", 40, U32, Certain, "immediate of `+=` / `=`"),
];

static NOP: &[FieldSpec] = &[f(
    "cycle",
    12,
    U8,
    High,
    "`cycle=1` (runtime) / `cycle=0` (NEFF Pool words); akc-baseline_bf16_s512 sg00 GpSimd pc 68",
)];

static SET_ORDERING_MODE: &[FieldSpec] = &[f(
    "mode",
    12,
    Enum(ORDERING),
    Certain,
    "0 relaxed (NEFF word 1), 1 strict (runtime loop head)",
)];

static RANGE_CLEAR: &[FieldSpec] = &[
    f(
        "mode",
        12,
        Enum(RANGE_CLEAR_MODES),
        High,
        "1 = SEMAPHORE_ZERO (only value)",
    ),
    f("first", 13, U8, Certain, "`first=207` (Sync); 5 distinct"),
    f("last", 14, U8, Certain, "`last=255`"),
];

static WRITE: &[FieldSpec] = &[
    f("size0", 12, U8, High, "`size=4,4`; 0 = slot unused"),
    f("size1", 13, U8, High, "second write's size"),
    f(
        "dst0",
        16,
        U64,
        Certain,
        "`dst=0x80100252f038,...` akc-baseline_bf16_s512 sg00 Tensor pc 50",
    ),
    f("dst1", 24, U64, Certain, "second destination"),
    f("data0", 32, U32, High, "`data=0x2,0x2`"),
    f("data1", 40, U32, High, "second datum"),
];

static NOTIFY: &[FieldSpec] = &[f(
    "hint",
    36,
    U8,
    Certain,
    "`hint=2` (prologue) / `hint=3` (epilogue); 7 and 8 at unprofiled pcs",
)];

static COMPARE_BRANCH: &[FieldSpec] = &[
    f("cmp_op", 12, Enum(CMP_OPS), Certain, "3 EQ / 0 ALWAYS; 102 branches"),
    f("dtype", 13, Dtype, High, "0x08 int32"),
    f("cmp0", 32, U8, High, "register compared (`cmp0=$R[0]`); 3 and 4 at unprofiled pcs after TENSOR_LOAD of $R[3]/$R[4]"),
    f("label", 48, I32, Certain, "relative byte offset: target pc = pc + label/64; printed as u32 `label_id`"),
];

static TENSOR_LOAD: &[FieldSpec] = &[
    f("dtype", 12, Dtype, High, "0x09 uint32 (`addr=uint32@...`)"),
    f(
        "num0",
        14,
        U8,
        High,
        "registers loaded (`[2,1]` for $R[130],$R[131])",
    ),
    f("num1", 15, U8, Med, "1 in all"),
    f(
        "addr",
        16,
        U64,
        Certain,
        "host-visible source address, e.g. 0x8005c035e000",
    ),
    f("step0", 24, I32, Med, "`[1,0]` for the 2-register load"),
    f("step1", 28, I32, Low, "0 in all"),
    f(
        "regs",
        32,
        Bytes(4),
        Certain,
        "destination registers, one byte each (`82 83` = $R[130],$R[131])",
    ),
];

static DMA: &[FieldSpec] = &[
    f("semaphore", 13, U8, Certain, "`semaphore=24`; 37 distinct"),
    f("sem_increment", 14, U8, High, "`sem_increment=16` (only value)"),
    f("src", 16, Addr, Certain, "tag 0x10 var-relative (NEFF) → absolute (loaded); tag 0x20 DGE table; akc-baseline_bf16_s512 sg00 Sync pc 51"),
    f("src_step0", 24, U32, Certain, "`src_pattern=[step0,step1][num0,num1]`"),
    f("src_step1", 28, U32, Certain, ""),
    f("src_num0", 32, U16, Certain, ""),
    f("src_num1", 34, U16, Certain, ""),
    f("src_elem_size", 36, U16, Certain, "`src_elem_size=512`; u16 (bytes 38-39 are zero in the eight older fixtures)"),
    f("bound_reg", 38, U8, Med, "0 = none; 0x80 | r: a register-offset (tag 0x28) address is checked against `$R[r]`, the largest valid offset (0xbd = $R[61] in all 144 dynamic DMAs of kgm-moe_tkg_v6b sg00 Pool; AWS's runtime loads $R[61] = table variable size - transfer size by a REGISTER_MOVE just before the DMA)"),
    f("dst", 40, Addr, Certain, "as src"),
    f("dst_step0", 48, U32, Certain, "`dst_pattern=`"),
    f("dst_step1", 52, U32, Certain, ""),
    f("dst_num0", 56, U16, Certain, ""),
    f("dst_num1", 58, U16, Certain, ""),
    f("dst_elem_size", 60, U16, Certain, "`dst_elem_size=256` differs from src in the converting DMAs"),
    f("in_dtype", 62, Dtype, Certain, "`in_dtype=fp32 out_dtype=bfloat16` printed when 62 ≠ 63; akc-fused_bf16_s1024 sg00 GpSimd pc 66"),
    f("out_dtype", 63, Dtype, Certain, ""),
];

static REGISTER_MOVE: &[FieldSpec] = &[
    f("mode", 12, U8, Low, "1 in all 145 words (kgm-attn_tkg_v6 sg00 GpSimd NEFF word 4, kgm-moe_tkg_v6b loaded Pool)"),
    f("dtype", 13, Dtype, Med, "0x09 uint32 (as TENSOR_LOAD's dtype)"),
    f("count", 14, U8, Low, "1 in all"),
    f("dst_reg", 24, U32, High, "register written: $R[61]; the next word reads it (AFFINE_SELECT byte 15 = 0x3d; DMA bound_reg 0xbd)"),
    f("imm", 32, U32, High, "value: f32 1.0 for `IDAffineSelect(mask,fill=1)-register-move` (compiler debug name); 0x0ffe0000 / 0x07f80000 = size of DGE variable (256 / 128 MiB) - transfer (128 KiB / 512 KiB) before each dynamic DMA"),
];

static REGISTER_ALU: &[FieldSpec] = &[
    f("op", 12, Enum(ALU_OPS), High, "6 MULTIPLY (`reg-mul-*`), 4 ADD (`reg-add-*`), from the compiler's debug names of all 416 words; same codes as TENSOR_REDUCE"),
    f("dtype", 13, Dtype, Med, "0x09 uint32"),
    f("count", 14, U8, Low, "1 in all"),
    f("src_reg", 16, U32, High, "operand register; data flow: TENSOR_LOAD $R[60] -> reg-mul $R[60]*0x100000 -> $R[61] -> *2 -> $R[31], the DMA's register offset (kgm-moe_tkg_v6b sg00 GpSimd NEFF words 6-9)"),
    f("dst_reg", 20, U32, High, "result register"),
    f("imm", 24, U32, High, "immediate operand: 0x100000 / 0x80000 (elements per expert), 0x10000·k (chunk k), 2 (bytes per bf16)"),
];

static TENSOR_LOAD_VAR: &[FieldSpec] = &[
    f("dtype", 12, Dtype, High, "0x09 uint32"),
    f("num0", 14, U8, High, "registers loaded (1)"),
    f("num1", 15, U8, Med, "1 in all"),
    f("addr", 16, VarAddr, High, "u32 var id (0 = SB, only value) then u32 offset; at load the pair becomes the absolute u64 SB address (0x17304 -> 0x8020_0001_7304, kgm-moe_tkg_v6b sg00 GpSimd NEFF word 64 / loaded pc 138); the offsets 0x17300 + 4i are where SP.json's qSPIO0 block 0 puts the int32 expert ids"),
    f("step0", 24, I32, Med, "1"),
    f("step1", 28, I32, Low, "8 in all"),
    f("regs", 32, Bytes(4), High, "destination registers ($R[60]/$R[61])"),
];

static DMA_TRIGGER: &[FieldSpec] = &[
    f("queue", 12, Bytes(32), High, "NUL-padded queue name from def.json `dma_queue` (`qDVESpillReload0`, `qSPIO0`, `qPoolIO0`); kgm-attn_tkg_v6 sg00 Vector NEFF word 68 (bytes 12-27 = `qDVESpillReload0`)"),
    f("block", 48, U32, High, "the `id` of the engine JSON's `dma` block to start (0, 1, 2, ... in program order; kgm-moe_tkg_v6b sg00 SP words 2-10 = ids 0-8)"),
];

static DMA_EXT: &[FieldSpec] = &[
    f("queues", 15, U8, Low, "16 for the 128 KiB dynamic transfers, 8 for the 512 KiB ones (qPoolDynamic has num_queues 16); meaning not established"),
];

static AFFINE_SELECT: &[FieldSpec] = &[
    f("channels", 12, U8, Med, "128 partitions"),
    f("dtype_pair", 13, U8, Med, "0xaa fp32 / 0x66 bf16 (`id.float32=` / `id.bfloat16=IDAffineSelect`): input nibble high, output low (equal in both words)"),
    f("cmp_op", 14, Enum(AFFINE_CMPS), Low, "3 in both words; read as not_equal because the result is the identity the PE transposes need (on_true = the zero mask, fill 1.0 on the diagonal)"),
    f("fill_reg", 15, U8, High, "register holding on_false_value as f32 bits ($R[61], set to 1.0 by the REGISTER_MOVE before it)"),
    f("offset", 16, I32, Med, "affine offset (0)"),
    f("pattern", 20, Bytes(16), Med, "four i16 steps then four u16 counts, innermost first: [1,1,1,1][128,1,1,1]"),
    f("src", 36, Ap(2), Med, "on_true tile (SBUF, [1,1][128,1]); same address as dst"),
    f("dst", 48, Ap(2), Med, "output tile"),
    f("channel_multiplier", 60, I32, Med, "-1: affine value = offset + x - partition"),
];

static NONE: &[FieldSpec] = &[];

/// The field map of an opcode (bytes 12–63; the header is common).
pub fn layout_of(op: Opcode) -> &'static [FieldSpec] {
    match op {
        Opcode::Ldweights => PE_LDWEIGHTS,
        Opcode::Matmul => PE_MATMUL,
        Opcode::Activate => ACTIVATE,
        Opcode::TensorTensor => TENSOR_TENSOR,
        Opcode::Copy | Opcode::Cast | Opcode::Reciprocal => FOUR_D,
        Opcode::Memset => MEMSET,
        Opcode::TensorReduce => TENSOR_REDUCE,
        Opcode::TensorScalar => TENSOR_SCALAR,
        Opcode::EventSemaphore => EVENT_SEMAPHORE,
        Opcode::Nop => NOP,
        Opcode::SetOrderingMode => SET_ORDERING_MODE,
        Opcode::EventSemaphoreRangeClear => RANGE_CLEAR,
        Opcode::Write => WRITE,
        Opcode::Notify => NOTIFY,
        Opcode::CompareBranch => COMPARE_BRANCH,
        Opcode::TensorLoad => TENSOR_LOAD,
        Opcode::DmaDirect2d => DMA,
        Opcode::RegisterMove => REGISTER_MOVE,
        Opcode::RegisterAlu => REGISTER_ALU,
        Opcode::TensorLoadVar => TENSOR_LOAD_VAR,
        Opcode::DmaTrigger => DMA_TRIGGER,
        Opcode::DmaExt => DMA_EXT,
        Opcode::AffineSelect => AFFINE_SELECT,
        Opcode::ActTableLoad | Opcode::Drain | Opcode::Unnamed(_) | Opcode::Unknown(_) => NONE,
    }
}

/// The name of `code` in an enum table.
pub fn enum_name(table: &[(u8, &'static str)], code: u64) -> Option<&'static str> {
    table
        .iter()
        .find(|(c, _)| *c as u64 == code)
        .map(|(_, n)| *n)
}
