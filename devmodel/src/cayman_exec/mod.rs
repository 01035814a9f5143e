//! Executing real trn2 ("cayman") words, as decoded by `neuron_isa::cayman`.
//!
//! Semantics are this project's reading of the evidence (`docs/isa/cayman.md`, the profiles,
//! and the numbers the real kernels must produce: `fixtures/real-golden/`); each rule below says
//! what it rests on. Access patterns: a byte offset in each partition (bit 25 = PSUM), then up
//! to four `[step, num]` dimensions in elements, innermost first; `channels` partitions from 0
//! (`pattern`); the arithmetic is in `alu`.

mod act;
mod alu;
mod direct;

pub use act::simd_path as activate_simd_path;
pub mod passpair;

/// Whether fp32 pass-pair fusion is on (`NEURON_EMU_PASS_PAIRS`, default on).
pub(crate) fn passpair_enabled() -> bool {
    passpair::enabled_by_env()
}
mod pattern;
mod pe;
mod rows;
mod select;
mod transpose;
mod widen;

pub(crate) use widen::bf16_bytes_from_f32_bytes;

#[cfg(test)]
const PSUM_BIT_FOR_TESTS: u32 = neuron_isa::cayman::PSUM_BIT;
pub use pe::PeState;

#[cfg(test)]
mod model_tests;

use crate::core::{CoreMem, Scratch};
use crate::fault::OpFault;
use crate::gemm::View;
use alu::{alu_reduce, alu_zip, hi_part, Alu};
use neuron_isa::cayman::{AccessPattern, CaymanInstr, DmaAddr, Opcode};
use neuron_isa::{Dtype, Space};
use pattern::{copy_bits, elem_count, extent, f32_view, gather, scatter};
use rows::elementwise;
pub(crate) use rows::ELEMENTWISE_WEIGHT;

/// A DMA the instruction starts (run by the device's DMA model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dma2d {
    pub src: DmaAddr,
    pub src_step: [u64; 2],
    pub src_num: [u64; 2],
    pub src_elem: u64,
    pub dst: DmaAddr,
    pub dst_step: [u64; 2],
    pub dst_num: [u64; 2],
    pub dst_elem: u64,
    pub in_dtype: Option<Dtype>,
    pub out_dtype: Option<Dtype>,
    pub semaphore: u8,
    pub increment: u32,
}

/// What executing a word did.
#[derive(Debug)]
pub enum Exec {
    /// Data path done: elements streamed per partition (for the cost model) and the
    /// multiply-adds run through the host SGEMM (for host-cost accounting), and those the
    /// kernel's math needs (an fp32 LOW/HIGH pass pair once, at its HIGH pass; `Stats::math_macs`).
    Done {
        elems: u64,
        sgemm_macs: u64,
        /// Multiply-adds run on AMX tiles instead (the unpadded `m·k·n`).
        amx_macs: u64,
        /// Of `sgemm_macs`, those run on `VDPBF16PS` (`gemm::dot`).
        dot_macs: u64,
        math_macs: u64,
        /// SBUF/PSUM bytes the word's operands read and write, as the kernel needs them
        /// ([`operand_bytes`]; `Stats::onchip_bytes`).
        onchip_bytes: u64,
    },
    /// Start a DMA.
    Dma(Dma2d),
}

fn need<T>(v: Option<T>, ci: &CaymanInstr, what: &str) -> Result<T, OpFault> {
    v.ok_or_else(|| {
        OpFault::bad(format!(
            "{}: missing or malformed field '{what}'",
            ci.opcode.name()
        ))
    })
}

/// The operands every one-source elementwise instruction names.
struct Unary {
    src: AccessPattern,
    dst: AccessPattern,
    sdt: Dtype,
    ddt: Dtype,
    ch: usize,
}

impl Unary {
    /// The word's operands as a row step's, at the shared weight (`rows::Rows`).
    fn rows(&self, out_len: Option<usize>) -> rows::Rows<'_> {
        rows::Rows {
            src: &self.src,
            sdt: self.sdt,
            dst: &self.dst,
            ddt: self.ddt,
            channels: self.ch,
            out_len,
            weight: ELEMENTWISE_WEIGHT,
        }
    }

    /// `f(p, source, out)` on each partition's source row, its results written to the
    /// destination (`rows::elementwise`); the source's elements per partition.
    fn each_row(
        &self,
        mem: &mut CoreMem,
        out_len: Option<usize>,
        a: &mut Vec<f32>,
        f: impl Fn(usize, &[f32], &mut [f32]) + Sync,
    ) -> Result<usize, OpFault> {
        elementwise(mem, &self.rows(out_len), a, f)
    }
}

/// A row step's source values into its results, as many as both hold.
fn copy_row(src: &[f32], out: &mut [f32]) {
    let n = src.len().min(out.len());
    out[..n].copy_from_slice(&src[..n]);
}

fn unary(ci: &CaymanInstr) -> Result<Unary, OpFault> {
    Ok(Unary {
        src: need(ci.ap("src"), ci, "src")?,
        dst: need(ci.ap("dst"), ci, "dst")?,
        sdt: need(ci.dtype("src_dtype"), ci, "src_dtype")?,
        ddt: need(ci.dtype("dst_dtype"), ci, "dst_dtype")?,
        ch: need(ci.u("channels"), ci, "channels")? as usize,
    })
}

/// One SBUF/PSUM operand of a word: bytes `[lo, hi)` of each of its first `channels`
/// partitions (for memory-access hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operand {
    pub write: bool,
    pub space: Space,
    pub channels: usize,
    pub lo: u64,
    pub hi: u64,
}

/// The elements per partition a data-path word streams (its `Exec::Done::elems`), read off
/// its fields without running it, where that is the element count of one of its patterns;
/// `None` where it is not known beforehand (a MATMUL, whose fused pass pair counts its own).
/// Lets the cost model charge a word before its data path has run (`device::lane`).
pub fn static_elems(ci: &CaymanInstr) -> Option<u64> {
    let count = |field: &str| pattern::elem_count(&ci.ap(field)?).ok();
    match ci.opcode {
        Opcode::Nop
        | Opcode::EventSemaphore
        | Opcode::Drain
        | Opcode::SetOrderingMode
        | Opcode::ActTableLoad => Some(0),
        Opcode::Ldweights
        | Opcode::Activate
        | Opcode::Copy
        | Opcode::Cast
        | Opcode::Reciprocal
        | Opcode::TensorReduce
        | Opcode::TensorScalar
        | Opcode::AffineSelect => count("src"),
        Opcode::TensorTensor => count("src0"),
        Opcode::Memset => count("dst"),
        _ => None,
    }
}

/// One operand a data-path word names: (field, dtype, partitions, written).
type Field = (&'static str, Option<Dtype>, Option<usize>, bool);

/// The SBUF/PSUM operands a data-path word's fields name (bias and scalar-pointer operands
/// left out), for [`operands`] and [`operand_bytes`]; no allocation, as every word asks.
fn operand_fields(ci: &CaymanInstr, pe: &PeState) -> [Option<Field>; 3] {
    use Opcode::*;
    if !matches!(
        ci.opcode,
        Ldweights
            | Matmul
            | Activate
            | Copy
            | Cast
            | Reciprocal
            | TensorReduce
            | TensorScalar
            | TensorTensor
            | Memset
            | AffineSelect
    ) {
        return [None; 3];
    }
    let pair = ci.u("dtype_pair").unwrap_or(0) as u8;
    let nibble = |n: u8| Dtype::from_code(n);
    let ch = ci.u("channels").map(|c| c as usize);
    let out_dt = |dt: Option<Dtype>| match dt {
        Some(d) if pe.transpose && d.size() == 2 => Some(d),
        _ => Some(Dtype::F32),
    };
    let src_dst = |src: Option<Dtype>, dst: Option<Dtype>| {
        [
            Some(("src", src, ch, false)),
            Some(("dst", dst, ch, true)),
            None,
        ]
    };
    match ci.opcode {
        Opcode::Ldweights => [
            Some((
                "src",
                ci.dtype("src_dtype"),
                ci.u("rows").map(|r| r as usize),
                false,
            )),
            None,
            None,
        ],
        Opcode::Matmul => [
            Some(("src", ci.dtype("src_dtype"), Some(pe.k), false)),
            Some(("dst", out_dt(ci.dtype("src_dtype")), Some(pe.m), true)),
            None,
        ],
        Opcode::Activate => src_dst(nibble(pair & 0xf), ci.dtype("dst_dtype")),
        Opcode::Copy
        | Opcode::Cast
        | Opcode::Reciprocal
        | Opcode::TensorReduce
        | Opcode::TensorScalar => src_dst(ci.dtype("src_dtype"), ci.dtype("dst_dtype")),
        Opcode::TensorTensor => [
            Some(("src0", nibble(pair >> 4), ch, false)),
            Some(("src1", nibble(pair & 0xf), ch, false)),
            Some(("dst", ci.dtype("dst_dtype"), ch, true)),
        ],
        Opcode::Memset => [Some(("dst", ci.dtype("dtype"), ch, true)), None, None],
        Opcode::AffineSelect => src_dst(nibble(pair >> 4), nibble(pair & 0xf)),
        _ => [None, None, None],
    }
}

/// The SBUF/PSUM operands a data-path word reads and writes, as its fields name them (bias
/// and scalar-pointer operands left out). Operands that do not decode or lie outside their
/// memory are left out too: the word faults when it executes.
pub fn operands(ci: &CaymanInstr, mem: &CoreMem, pe: &PeState) -> Vec<Operand> {
    operand_fields(ci, pe)
        .into_iter()
        .flatten()
        .filter_map(|(field, dt, channels, write)| {
            let (ap, dt, channels) = (ci.ap(field)?, dt?, channels?);
            let (space, lo, hi) = extent(mem, &ap, dt, channels).ok()?;
            Some(Operand {
                write,
                space,
                channels,
                lo,
                hi,
            })
        })
        .collect()
}

/// The SBUF/PSUM bytes a data-path word's operands read and write, as the kernel needs
/// them: each operand's elements once (an accumulating destination is not counted twice),
/// partitions × elements × dtype size; bias and scale vectors left out. The LOW pass of an
/// fp32 pass pair (its LDWEIGHTS and MATMUL) counts nothing, as in `Stats::math_macs`: the
/// HIGH pass reads the same operands and writes the same result. The on-chip traffic any
/// emulation must move, whatever it copies besides (`bench real`'s on-chip floor).
pub fn operand_bytes(ci: &CaymanInstr, pe: &PeState) -> u64 {
    let low = match ci.opcode {
        Opcode::Ldweights => {
            ci.u("transpose").unwrap_or(0) != 1
                && ci.u("fp32_mode").unwrap_or(0) == 1
                && ci.dtype("src_dtype") == Some(Dtype::F32)
        }
        Opcode::Matmul => pe.low_pass,
        _ => false,
    };
    if low {
        return 0;
    }
    operand_fields(ci, pe)
        .into_iter()
        .flatten()
        .filter_map(|(field, dt, channels, _)| {
            let n = pattern::elem_count(&ci.ap(field)?).ok()?;
            n.checked_mul(dt?.size() as u64)?
                .checked_mul(channels? as u64)
        })
        .fold(0u64, u64::saturating_add)
}

/// A register number field (256 registers per engine).
fn reg(ci: &CaymanInstr, field: &str) -> Result<usize, OpFault> {
    let r = need(ci.u(field), ci, field)?;
    if r >= 256 {
        return Err(OpFault::bad(format!(
            "{}: register {r} in '{field}'; an engine has 256",
            ci.opcode.name()
        )));
    }
    Ok(r as usize)
}

/// A register-offset DMA address (`DmaAddr::TableReg`) as the DGE-table address it names
/// when the word runs: `table[index] + $R[reg]`. With a bound register (`bound_reg` bit 7),
/// an offset above `$R[bound]` (the runtime's `size − transfer`) is refused as a DMA abort:
/// the transfer would leave its variable (an out-of-range expert id).
fn resolve_reg_addr(a: DmaAddr, ci: &CaymanInstr, regs: &[u32; 256]) -> Result<DmaAddr, OpFault> {
    let DmaAddr::TableReg { reg, index, pad } = a else {
        return Ok(a);
    };
    let r = usize::try_from(reg)
        .ok()
        .filter(|r| *r < 256)
        .ok_or_else(|| OpFault::bad(format!("DMA_DIRECT2D: offset register {reg}")))?;
    let offset = regs[r];
    let bound = ci.u("bound_reg").unwrap_or(0);
    if bound & 0x80 != 0 {
        let limit = regs[(bound & 0x7f) as usize];
        if offset > limit {
            return Err(OpFault {
                kind: crate::fault::FaultKind::DmaAbort,
                detail: format!(
                    "DMA_DIRECT2D: offset $R[{r}] = 0x{offset:x} above its bound $R[{}] = 0x{limit:x} (DGE table entry {index})",
                    bound & 0x7f
                ),
            });
        }
    }
    Ok(DmaAddr::Table { offset, index, pad })
}

/// Whether [`execute`] counts each word's [`operand_bytes`] (`Stats::onchip_bytes`): off
/// unless a benchmark asks ([`count_onchip`]), as reading the fields costs a few hundred
/// host instructions a word (~2% of a decode-step kernel's data path).
static COUNT_ONCHIP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Count on-chip operand bytes from now on (`on`) or not, in every device of the process.
pub fn count_onchip(on: bool) {
    COUNT_ONCHIP.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Execute one loaded word on a core; `regs` are the issuing engine's registers.
pub fn execute(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    scratch: &mut Scratch,
    regs: &mut [u32; 256],
) -> Result<Exec, OpFault> {
    // Read before the word runs: a MATMUL's operands are the weights loaded before it.
    let onchip = if COUNT_ONCHIP.load(std::sync::atomic::Ordering::Relaxed) {
        operand_bytes(ci, pe)
    } else {
        0
    };
    let mut r = execute_op(ci, mem, pe, scratch, regs)?;
    if let Exec::Done { onchip_bytes, .. } = &mut r {
        *onchip_bytes = onchip;
    }
    Ok(r)
}

/// Ordering and table-management words: no data-path effect in this model (nothing read or
/// written, a deferred pass pair kept, never a fault), as `execute_op` runs them.
pub fn is_ordering(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Nop
            | Opcode::EventSemaphore
            | Opcode::Drain
            | Opcode::SetOrderingMode
            | Opcode::ActTableLoad
    )
}

/// Whether executing a word of this opcode reads the issuing engine's registers: every arm
/// of `execute_op` that reads `regs` (keep in step). A word that does not may run later
/// without a copy of them (`device::lane`).
pub fn reads_registers(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::DmaDirect2d | Opcode::RegisterMove | Opcode::RegisterAlu | Opcode::AffineSelect
    )
}

/// A DMA_DIRECT2D word's transfer, its register-offset addresses resolved with `regs`.
/// It reads nothing else, so the device may decode it without the core's data path
/// (where no fp32 pass pair can be pending there: `passpair::resume` settles one first).
pub fn dma2d_of(ci: &CaymanInstr, regs: &[u32; 256]) -> Result<Dma2d, OpFault> {
    let g = |n: &str| ci.u(n).unwrap_or(0);
    Ok(Dma2d {
        src: resolve_reg_addr(need(ci.addr("src"), ci, "src")?, ci, regs)?,
        src_step: [g("src_step0"), g("src_step1")],
        src_num: [g("src_num0"), g("src_num1")],
        src_elem: g("src_elem_size"),
        dst: resolve_reg_addr(need(ci.addr("dst"), ci, "dst")?, ci, regs)?,
        dst_step: [g("dst_step0"), g("dst_step1")],
        dst_num: [g("dst_num0"), g("dst_num1")],
        dst_elem: g("dst_elem_size"),
        in_dtype: ci.dtype("in_dtype"),
        out_dtype: ci.dtype("out_dtype"),
        semaphore: g("semaphore") as u8,
        increment: g("sem_increment") as u32,
    })
}

fn execute_op(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    scratch: &mut Scratch,
    regs: &mut [u32; 256],
) -> Result<Exec, OpFault> {
    if pe.pair.is_some() {
        if let passpair::Resume::Done(r) = passpair::resume(ci, mem, pe, &mut scratch.a)? {
            return Ok(r);
        }
    }
    let Scratch {
        a,
        b,
        c,
        bytes,
        bpack,
        tiles,
        bits16,
    } = scratch;
    let done = |elems: usize| {
        Ok(Exec::Done {
            elems: elems as u64,
            sgemm_macs: 0,
            amx_macs: 0,
            dot_macs: 0,
            math_macs: 0,
            onchip_bytes: 0,
        })
    };
    match ci.opcode {
        // Ordering and table management have no data-path effect in this model.
        op if is_ordering(op) => done(0),
        Opcode::Ldweights => pe::ldweights(ci, mem, pe, a),
        Opcode::Matmul => pe::matmul(ci, mem, pe, a, b, c, bpack, tiles, bits16),
        Opcode::Activate => {
            let src = need(ci.ap("src"), ci, "src")?;
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let pair = need(ci.u("dtype_pair"), ci, "dtype_pair")? as u8;
            let sdt = need(Dtype::from_code(pair & 0xf), ci, "src dtype")?;
            let bdt = need(Dtype::from_code(pair >> 4), ci, "bias dtype")?;
            let ddt = need(ci.dtype("dst_dtype"), ci, "dst_dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let func = act::Func::of(need(ci.u("func"), ci, "func")?)?;
            // The source is checked first, as the whole-operand form reads it first.
            extent(mem, &src, sdt, ch)?;
            let bias_ap = AccessPattern {
                addr: need(ci.u("bias_addr"), ci, "bias_addr")? as u32,
                dims: 1,
                step: [1, 0, 0, 0],
                num: [1, 0, 0, 0],
            };
            if ci.u("bias_src").unwrap_or(0) == 1 {
                // An immediate bias: the field's bits as f32, for every partition.
                b.clear();
                b.resize(ch, f32::from_bits(bias_ap.addr));
            } else {
                gather(mem, &bias_ap, bdt, ch, b)?;
            }
            // scale_src 1: the scale is one fp32 per partition at an SBUF address.
            let scale_bits = ci
                .f32("scale")
                .map(f32::to_bits)
                .unwrap_or(1.0f32.to_bits());
            // The scales in scratch `c` (a buffer per word was an allocation per word).
            if ci.u("scale_src").unwrap_or(0) == 1 {
                let ap = AccessPattern {
                    addr: scale_bits,
                    dims: 1,
                    step: [1, 0, 0, 0],
                    num: [1, 0, 0, 0],
                };
                gather(mem, &ap, Dtype::F32, ch, c)?;
            } else {
                c.clear();
                c.resize(ch, f32::from_bits(scale_bits));
            }
            let scales = &c[..];
            // Short rows in one loop over the whole operand, each row's scale and bias
            // repeated per element.
            let whole = |vals: &mut [f32], n: usize| {
                if n == 1 {
                    // One element a row: the per-partition values are the per-element ones.
                    func.apply_each(vals, scales, b);
                } else {
                    let per_elem = |v: &[f32]| -> Vec<f32> {
                        let mut e = vec![0.0; ch * n];
                        for (row, x) in e.chunks_exact_mut(n).zip(v) {
                            row.fill(*x);
                        }
                        e
                    };
                    let (s, bi) = (per_elem(scales), per_elem(b));
                    func.apply_each(vals, &s, &bi);
                }
            };
            let op = rows::Rows {
                src: &src,
                sdt,
                dst: &dst,
                ddt,
                channels: ch,
                out_len: None,
                weight: 64,
            };
            if let Some(n) = rows::short_rows(mem, &op, a, whole)? {
                return done(n);
            }
            let bias = &b[..];
            // Function evaluation costs about as much per element as 64 multiply-adds: a
            // large ACTIVATE is shared out by partitions (`rows`). Each row computed from its
            // source where it lies (fp32 in one run), else from a converted copy, into its
            // destination where that is fp32 in one run; the whole operands where rows
            // cannot be used.
            let step = |p: usize, src: &[f32], out: &mut [f32]| {
                func.apply_into(src, out, scales[p], bias[p])
            };
            done(elementwise(mem, &op, a, step)?)
        }
        Opcode::Copy | Opcode::Cast | Opcode::Reciprocal => {
            let u = unary(ci)?;
            let (src, dst, ch) = (u.src, u.dst, u.ch);
            if ci.opcode == Opcode::Copy && u.sdt == u.ddt {
                // A same-type copy moves bits: integer words (the compiler copies 16-bit pairs
                // as int32) must not pass through f32.
                return done(copy_bits(mem, &src, &dst, u.sdt, ch, bytes)?);
            }
            let recip = ci.opcode == Opcode::Reciprocal;
            let whole = |vals: &mut [f32], _: usize| {
                if recip {
                    vals.iter_mut().for_each(|v| *v = 1.0 / *v);
                }
            };
            if let Some(n) = rows::short_rows(mem, &u.rows(None), a, whole)? {
                return done(n);
            }
            let step = |_: usize, src: &[f32], out: &mut [f32]| {
                if recip {
                    out.iter_mut().zip(src).for_each(|(o, v)| *o = 1.0 / *v);
                } else {
                    copy_row(src, out);
                }
            };
            done(u.each_row(mem, None, a, step)?)
        }
        Opcode::TensorReduce => {
            let u = unary(ci)?;
            let src = u.src;
            let op = Alu::of(need(ci.u("op"), ci, "op")?, ci, "op")?;
            let neg = ci.u("negated").unwrap_or(0) == 1;
            let n = elem_count(&src)? as usize;
            // dim=X: reduce the innermost dimension; the destination holds the rest.
            let inner = (src.num[0].max(1) as usize).min(n.max(1));
            let groups = n / inner.max(1);
            // The groups' results from the source row where it lies (fp32 rows in one run),
            // else from a converted copy; the whole operands where rows cannot be used.
            let reduce = |_: usize, src: &[f32], out: &mut [f32]| {
                for (o, g) in out.iter_mut().zip(src.chunks_exact(inner)) {
                    let acc = alu_reduce(op, g);
                    *o = if neg { -acc } else { acc };
                }
            };
            done(u.each_row(mem, Some(groups), a, reduce)?)
        }
        Opcode::TensorScalar => {
            let u = unary(ci)?;
            let (src, ch) = (u.src, u.ch);
            let imm_src = ci.u("imm_src").unwrap_or(0);
            // The source is checked first, as the whole-operand form reads it first.
            extent(mem, &src, u.sdt, ch)?;
            // Operand i is a per-partition fp32 value at an SBUF address when bit i of imm_src
            // is set, else the immediate's bits as f32.
            let operand = |i: usize, raw: u32| -> Result<Vec<f32>, OpFault> {
                if imm_src & (1 << i) != 0 {
                    let ap = AccessPattern {
                        addr: raw,
                        dims: 1,
                        step: [1, 0, 0, 0],
                        num: [1, 0, 0, 0],
                    };
                    let mut v = Vec::new();
                    gather(mem, &ap, Dtype::F32, ch, &mut v)?;
                    Ok(v)
                } else {
                    Ok(vec![f32::from_bits(raw); ch])
                }
            };
            let s0 = operand(0, need(ci.u("imm0"), ci, "imm0")? as u32)?;
            let s1 = operand(1, ci.u("imm1").unwrap_or(0) as u32)?;
            let op0 = Alu::of(need(ci.u("op0"), ci, "op0")?, ci, "op0")?;
            let op1 = Alu::of(ci.u("op1").unwrap_or(0), ci, "op1")?;
            let step = |p: usize, src: &[f32], out: &mut [f32]| {
                alu::scalar_pair(op0, s0[p], op1, s1[p], src, out);
            };
            done(u.each_row(mem, None, a, step)?)
        }
        Opcode::TensorTensor => {
            let s0 = need(ci.ap("src0"), ci, "src0")?;
            let s1 = need(ci.ap("src1"), ci, "src1")?;
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let pair = need(ci.u("dtype_pair"), ci, "dtype_pair")? as u8;
            let d0 = need(Dtype::from_code(pair >> 4), ci, "src0 dtype")?;
            let d1 = need(Dtype::from_code(pair & 0xf), ci, "src1 dtype")?;
            let ddt = need(ci.dtype("dst_dtype"), ci, "dst_dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let op = Alu::of(need(ci.u("op"), ci, "op")?, ci, "op")?;
            // Row by row where the operands allow (`rows::zip_rows`), else whole.
            let rows = rows::Rows {
                src: &s0,
                sdt: d0,
                dst: &dst,
                ddt,
                channels: ch,
                out_len: None,
                weight: ELEMENTWISE_WEIGHT,
            };
            let step = |x: &[f32], y: &[f32], out: &mut [f32]| alu::zip_into(op, x, y, out);
            if let Some(n) = rows::zip_rows(mem, &rows, (&s1, d1), step)? {
                return done(n);
            }
            let n = gather(mem, &s0, d0, ch, a)?;
            let n1 = gather(mem, &s1, d1, ch, b)?;
            if n1 != n {
                return Err(OpFault::bad("TENSOR_TENSOR operand shapes differ"));
            }
            alu_zip(op, a, b);
            scatter(mem, &dst, ddt, ch, a)?;
            done(n)
        }
        Opcode::Memset => {
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let dt = need(ci.dtype("dtype"), ci, "dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let n = elem_count(&dst)? as usize;
            // The fill value is the low bytes of `value`, encoded in the dst dtype.
            let bits = (ci.u("value").unwrap_or(0) as u32).to_le_bytes();
            let fill = neuron_isa::dtype::load_f32(dt, &bits);
            pattern::fill(mem, &dst, dt, ch, fill, a)?;
            done(n)
        }
        Opcode::DmaDirect2d => dma2d_of(ci, regs).map(Exec::Dma),
        Opcode::RegisterMove => {
            regs[reg(ci, "dst_reg")?] = need(ci.u("imm"), ci, "imm")? as u32;
            done(0)
        }
        Opcode::RegisterAlu => {
            let (src, dst) = (reg(ci, "src_reg")?, reg(ci, "dst_reg")?);
            let imm = need(ci.u("imm"), ci, "imm")? as u32;
            // 32-bit integer arithmetic, wrapping (LOW: overflow is not visible in the corpus).
            let x = regs[src];
            regs[dst] = match Alu::of(need(ci.u("op"), ci, "op")?, ci, "op")? {
                Alu::Bypass => x,
                Alu::Add => x.wrapping_add(imm),
                Alu::Mul => x.wrapping_mul(imm),
                Alu::Max => x.max(imm),
            };
            done(0)
        }
        Opcode::AffineSelect => {
            let src = need(ci.ap("src"), ci, "src")?;
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let pair = need(ci.u("dtype_pair"), ci, "dtype_pair")? as u8;
            let sdt = need(Dtype::from_code(pair >> 4), ci, "input dtype")?;
            let ddt = need(Dtype::from_code(pair & 0xf), ci, "output dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let cmp = select::cmp_of(need(ci.u("cmp_op"), ci, "cmp_op")?)?;
            let fill = f32::from_bits(regs[reg(ci, "fill_reg")?]);
            let pattern = need(ci.affine_pattern(), ci, "pattern")?;
            let affine = (
                need(ci.i("offset"), ci, "offset")?,
                need(ci.i("channel_multiplier"), ci, "channel_multiplier")?,
            );
            let n = gather(mem, &src, sdt, ch, a)?;
            let first = pattern::first_partition(&src);
            select::select(a, n, first, affine, pattern, cmp, fill)?;
            scatter(mem, &dst, ddt, ch, a)?;
            done(n)
        }
        other => Err(OpFault::bad(format!(
            "{} is not executable by this emulator yet",
            other.name()
        ))),
    }
}
