//! Real trn2 ("cayman") instruction words in the NEFF namespace, built with
//! `neuron_isa::cayman`'s encoder in the shapes neuronx-cc emits them (`docs/isa/cayman.md` §6;
//! "the corpus" below is `shared/fixtures/real-neff/`).
//!
//! Conventions copied from the corpus:
//! - compute access patterns: a byte offset in each partition (PSUM: bit 25 set), steps in
//!   elements; PE operands are 3-D `[1,0,0][n,1,1]`, ACT/DVE ones `[1,1,1][n,1,1]` (3-D) or
//!   `[1,1,1,1][n,1,1,1]` (4-D); `channels` is 128;
//! - LDWEIGHTS reads its row from the last element backwards (step −1), so the row lands in
//!   the PE array in order; bf16 patterns are `[-1,0,-32][32,1,4]`, fp32 ones `[-1,0,0][128,1,1]`;
//! - PE words carry `0f 0f` in their undecoded bytes 44–45 (every PE word of the corpus does);
//! - each engine bumps its own semaphore when a word completes (S[4] Scalar, S[5] Tensor,
//!   S[6] Vector) and other engines wait on it with `>=`; a DMA_DIRECT2D adds 16 to one of its
//!   queue's semaphores, and its consumer waits for `>= 16`.

use neuron_isa::cayman::{
    layout_of, AccessPattern, CaymanInstr, DmaAddr, Header, Namespace, Opcode, Value, PSUM_BIT,
};
use neuron_isa::Dtype;

/// Header wait condition `>=` (byte 4).
pub const WAIT_GE: u8 = 0x05;
/// Header update `++` on completion (byte 6).
pub const SEM_INC: u8 = 0x13;
/// Engine semaphores as the profiles name them.
pub const SEM_SCALAR: u8 = 4;
pub const SEM_TENSOR: u8 = 5;
pub const SEM_VECTOR: u8 = 6;
/// What one DMA_DIRECT2D adds to its semaphore (the only value in the corpus).
pub const DMA_INCREMENT: u32 = 16;
/// Partitions every compute word names.
pub const CHANNELS: u64 = 128;

/// ALU codes (`docs/isa/cayman.md` §6: TENSOR_REDUCE / TENSOR_SCALAR / TENSOR_TENSOR).
pub const ALU_BYPASS: u64 = 0;
pub const ALU_ADD: u64 = 4;
pub const ALU_MULT: u64 = 6;
pub const ALU_MAX: u64 = 8;

/// MATMUL `acc_flags`: bit 0 = first of an accumulation group (overwrite PSUM), bit 1 = last.
pub const ACC_MIDDLE: u64 = 0;
pub const ACC_FIRST: u64 = 1;
pub const ACC_LAST: u64 = 2;
pub const ACC_SINGLE: u64 = 3;

/// The flags of an accumulation group of `n` MATMULs, for member `i`.
pub fn acc_flags(i: usize, n: usize) -> u64 {
    (if i == 0 { ACC_FIRST } else { 0 }) | (if i + 1 == n { ACC_LAST } else { 0 })
}

/// One NEFF-namespace word.
#[derive(Debug, Clone, PartialEq)]
pub struct Word(pub CaymanInstr);

impl Word {
    /// A word of `op` with the named fields set (others zero). Field names come from
    /// `neuron_isa::cayman::layout`; a name the layout lacks is a bug in this crate.
    fn new(op: Opcode, fields: &[(&str, Value)]) -> Word {
        let header = Header {
            len: 0x10,
            ..Header::default()
        };
        let mut ci = CaymanInstr::new(Namespace::Neff, op, header, Vec::new());
        for (name, v) in fields {
            let f = ci.fields.iter_mut().find(|f| f.spec.name == *name);
            debug_assert!(
                f.is_some(),
                "{} has no field '{name}' ({:?})",
                op.name(),
                layout_of(op).iter().map(|s| s.name).collect::<Vec<_>>()
            );
            if let Some(f) = f {
                f.value = v.clone();
            }
        }
        Word(ci)
    }

    /// Wait until semaphore `sem >= value` before issuing (the header's wait).
    pub fn wait(mut self, sem: u8, value: u32) -> Word {
        self.0.header.wait_cond = WAIT_GE;
        self.0.header.wait_index = sem;
        self.0.header.wait_value = value;
        self
    }

    /// Increment semaphore `sem` when the word completes (the header's update).
    pub fn inc(mut self, sem: u8) -> Word {
        self.0.header.update_op = SEM_INC;
        self.0.header.update_index = sem;
        self
    }

    /// The 64 bytes.
    pub fn encode(&self) -> [u8; 64] {
        let mut w = self.0.encode();
        if matches!(self.0.opcode, Opcode::Ldweights | Opcode::Matmul) {
            w[44] = 0x0f;
            w[45] = 0x0f;
        }
        w
    }
}

fn u(v: u64) -> Value {
    Value::U(v)
}

fn dt(d: Dtype) -> Value {
    Value::U(d.code() as u64)
}

fn ap(addr: u32, step: &[i16], num: &[u16]) -> Value {
    let mut a = AccessPattern {
        addr,
        dims: step.len() as u8,
        ..AccessPattern::default()
    };
    a.step[..step.len()].copy_from_slice(step);
    a.num[..num.len()].copy_from_slice(num);
    Value::Ap(a)
}

/// A compute operand: SBUF byte offset `off` within each partition, or PSUM when `psum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub addr: u32,
}

/// SBUF byte offset within each partition.
pub fn sb(off: u32) -> Loc {
    Loc { addr: off }
}

/// PSUM byte offset within each partition (bit 25 set).
pub fn ps(off: u32) -> Loc {
    Loc {
        addr: PSUM_BIT | off,
    }
}

/// `n` contiguous elements, 3-D, as PE operands are written.
fn pe_ap(l: Loc, n: u16) -> Value {
    ap(l.addr, &[1, 0, 0], &[n, 1, 1])
}

/// `n` contiguous elements, 3-D, as ACT/DVE operands are written.
fn ap3(l: Loc, n: u16) -> Value {
    ap(l.addr, &[1, 1, 1], &[n, 1, 1])
}

/// `n` contiguous elements, 4-D.
fn ap4(l: Loc, n: u16) -> Value {
    ap(l.addr, &[1, 1, 1, 1], &[n, 1, 1, 1])
}

/// DRAIN, the first word of every program in the corpus.
pub fn drain() -> Word {
    Word::new(Opcode::Drain, &[])
}

/// SET_ORDERING_MODE relaxed, the second word of every program in the corpus.
pub fn relaxed() -> Word {
    Word::new(Opcode::SetOrderingMode, &[("mode", u(0))])
}

/// NOP (the corpus' last Pool word waits for its last DMA with one).
pub fn nop() -> Word {
    Word::new(Opcode::Nop, &[("cycle", u(0))])
}

/// EVENT_SEMAPHORE with only a header: a standalone wait (`.wait(..)`).
pub fn event_semaphore() -> Word {
    Word::new(Opcode::EventSemaphore, &[])
}

/// LDWEIGHTS: 128 partitions × `cols` elements at SBUF `src` (the row's first element) into
/// the PE array. `transpose` = the following MATMUL transposes (moves 16-bit data exactly).
pub fn ldweights(src: Loc, dtype: Dtype, cols: u16, transpose: bool) -> Word {
    let last = src.addr + (cols as u32 - 1) * dtype.size() as u32;
    let pattern = if dtype.size() == 2 && cols == 128 {
        ap(last, &[-1, 0, -32], &[32, 1, 4])
    } else {
        ap(last, &[-1, 0, 0], &[cols, 1, 1])
    };
    Word::new(
        Opcode::Ldweights,
        &[
            ("src", pattern),
            ("src_dtype", dt(dtype)),
            ("transpose", u(transpose as u64)),
            ("rows", u(CHANNELS)),
            ("cols", u(cols as u64)),
        ],
    )
}

/// MATMUL: `psum[j][n] (+)= Σ_k w[k][j] · moving[k][n]` with the last LDWEIGHTS as `w`,
/// `n` moving columns of `dtype` at SBUF `src`, into PSUM `dst`.
pub fn matmul(dst: Loc, src: Loc, dtype: Dtype, n: u16, acc: u64, transpose: bool) -> Word {
    Word::new(
        Opcode::Matmul,
        &[
            ("src", pe_ap(src, n)),
            ("src_dtype", dt(dtype)),
            ("transpose", u(transpose as u64)),
            ("rows", u(CHANNELS)),
            ("cols", u(CHANNELS)),
            ("acc_flags", u(acc)),
            ("dst", pe_ap(dst, n)),
        ],
    )
}

/// COPY (same dtypes: bits move unchanged) or CAST (dtype conversion), `n` elements per
/// partition.
pub fn copy(dst: Loc, ddt: Dtype, src: Loc, sdt: Dtype, n: u16) -> Word {
    let op = if sdt == ddt {
        Opcode::Copy
    } else {
        Opcode::Cast
    };
    Word::new(
        op,
        &[
            ("src", ap4(src, n)),
            ("src_dtype", dt(sdt)),
            ("dst_dtype", dt(ddt)),
            ("channels", u(CHANNELS)),
            ("dst", ap4(dst, n)),
        ],
    )
}

/// A TENSOR_SCALAR operand: an f32 immediate, or a per-partition fp32 value in SBUF.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Imm(f32),
    /// SBUF byte offset of one fp32 per partition.
    Ptr(u32),
}

/// TENSOR_SCALAR: `dst = (src op0 s0) op1 s1`, `n` elements per partition.
#[allow(clippy::too_many_arguments)]
pub fn tensor_scalar(
    dst: Loc,
    ddt: Dtype,
    src: Loc,
    sdt: Dtype,
    n: u16,
    (op0, s0): (u64, Scalar),
    (op1, s1): (u64, Scalar),
) -> Word {
    let raw = |s: Scalar| match s {
        Scalar::Imm(v) => v.to_bits() as u64,
        Scalar::Ptr(a) => a as u64,
    };
    let ptr = |s: Scalar| matches!(s, Scalar::Ptr(_)) as u64;
    Word::new(
        Opcode::TensorScalar,
        &[
            ("src", ap3(src, n)),
            ("src_dtype", dt(sdt)),
            ("dst_dtype", dt(ddt)),
            ("channels", u(CHANNELS)),
            ("imm_src", u(ptr(s0) | ptr(s1) << 1)),
            ("op0", u(op0)),
            ("op1", u(op1)),
            ("imm0", u(raw(s0))),
            ("imm1", u(raw(s1))),
            ("dst", ap3(dst, n)),
        ],
    )
}

/// TENSOR_TENSOR: `dst = src0 op src1`, `n` elements per partition.
pub fn tensor_tensor(
    op: u64,
    dst: Loc,
    ddt: Dtype,
    (src0, d0): (Loc, Dtype),
    (src1, d1): (Loc, Dtype),
    n: u16,
) -> Word {
    Word::new(
        Opcode::TensorTensor,
        &[
            (
                "dtype_pair",
                u(((d0.code() << 4) | (d1.code() & 0xf)) as u64),
            ),
            ("dst_dtype", dt(ddt)),
            ("op", u(op)),
            ("channels", u(CHANNELS)),
            ("src0", ap3(src0, n)),
            ("src1", ap3(src1, n)),
            ("dst", ap3(dst, n)),
        ],
    )
}

/// One side of a DMA_DIRECT2D: `num[0] × num[1]` elements of `elem` bytes, `num[0]`
/// innermost, at byte steps `step` from `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaSide {
    pub addr: DmaAddr,
    pub step: [u32; 2],
    pub num: [u16; 2],
    pub elem: u32,
}

/// DMA_DIRECT2D from `src` to `dst` (converting `in_dtype` to `out_dtype` element by element
/// when they differ), adding [`DMA_INCREMENT`] to `semaphore` when it lands.
pub fn dma(src: DmaSide, dst: DmaSide, in_dtype: Dtype, out_dtype: Dtype, semaphore: u8) -> Word {
    let mut fields = vec![
        ("semaphore".to_string(), u(semaphore as u64)),
        ("sem_increment".to_string(), u(DMA_INCREMENT as u64)),
    ];
    for (side, d) in [("src", src), ("dst", dst)] {
        fields.push((side.to_string(), Value::Addr(d.addr)));
        for (i, (step, num)) in d.step.iter().zip(d.num).enumerate() {
            fields.push((format!("{side}_step{i}"), u(*step as u64)));
            fields.push((format!("{side}_num{i}"), u(num as u64)));
        }
        fields.push((format!("{side}_elem_size"), u(d.elem as u64)));
    }
    fields.push(("in_dtype".to_string(), dt(in_dtype)));
    fields.push(("out_dtype".to_string(), dt(out_dtype)));
    let fields: Vec<(&str, Value)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    Word::new(Opcode::DmaDirect2d, &fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words built here are byte-identical to the compiler's for the same operands.
    #[test]
    fn words_match_the_corpus_bytes() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
                .collect()
        };
        // akc-fused_bf16_s512 sg00 PE pc 71/72 and DVE pc 81 (`neuron-emu disasm`).
        let ldw = ldweights(sb(0x37300), Dtype::Bf16, 128, true);
        assert_eq!(ldw.encode().to_vec(), hex("01100000000000000000000000000000fe730300ffff0000e0ff2000010004000600010000008080000000000f0f000000000000000000000000000000000000"));
        let mm = matmul(ps(0x100), sb(0x37e00), Dtype::Bf16, 128, ACC_SINGLE, true).inc(SEM_TENSOR);
        assert_eq!(mm.encode().to_vec(), hex("02100000000013050000000000000000007e03000100000000008000010001000600010000008080000000030f0f000000010002010000000000800001000100"));
        let ts = tensor_scalar(
            sb(0x8850),
            Dtype::F32,
            ps(0x2000),
            Dtype::F32,
            128,
            (ALU_MULT, Scalar::Ptr(0x6840)),
            (ALU_BYPASS, Scalar::Imm(0.0)),
        )
        .wait(SEM_TENSOR, 28)
        .inc(SEM_VECTOR);
        assert_eq!(ts.encode().to_vec(), hex("43100000050513061c00000000000000002000020100010001008000010001000a0a800106000000406800000000000050880000010001000100800001000100"));
        let tt = tensor_tensor(
            ALU_ADD,
            sb(0x5000),
            Dtype::F32,
            (ps(0x2000), Dtype::F32),
            (sb(0x5000), Dtype::F32),
            512,
        )
        .wait(SEM_TENSOR, 157)
        .inc(SEM_VECTOR);
        assert_eq!(tt.encode().to_vec(), hex("41100000050513069d000000aa0a0480002000020100010001000002010001000050000001000100010000020100010000500000010001000100000201000100"));
        assert_eq!(acc_flags(0, 1), ACC_SINGLE);
        assert_eq!(acc_flags(0, 4), ACC_FIRST);
        assert_eq!(acc_flags(2, 4), ACC_MIDDLE);
        assert_eq!(acc_flags(3, 4), ACC_LAST);
    }
}
