//! Executing real trn2 ("cayman") words, as decoded by `neuron_isa::cayman`.
//!
//! Semantics are this project's reading of the evidence (`docs/isa/cayman.md`, the profiles,
//! and the numbers the real kernels must produce: `fixtures/real-golden/`); each rule below says
//! what it rests on. Access patterns: a byte offset in each partition (bit 25 = PSUM), then up
//! to four `[step, num]` dimensions in elements, innermost first; `channels` partitions from 0.

use crate::core::CoreMem;
use crate::fault::OpFault;
use crate::gemm::View;
use neuron_isa::cayman::{AccessPattern, CaymanInstr, DmaAddr, Opcode};
use neuron_isa::dtype::{load_f32, store_f32};
use neuron_isa::{Dtype, Space};

/// The stationary matrix TensorE holds between LDWEIGHTS and MATMUL: `w[k * m + j]`.
#[derive(Debug, Default, Clone)]
pub struct PeState {
    pub w: Vec<f32>,
    pub k: usize,
    pub m: usize,
    pub loaded: bool,
    /// The last LDWEIGHTS was in transpose mode (bit-exact data movement).
    pub transpose: bool,
}

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
    /// Data path done; elements streamed per partition (for the cost model).
    Done { elems: u64, pe: bool },
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

/// The element offsets (relative to the pattern's start) of an access pattern, innermost dim first.
fn offsets(ap: &AccessPattern) -> Result<Vec<i64>, OpFault> {
    let dims = (ap.dims as usize).min(4);
    // A pattern can name at most one element per byte of a partition; refuse larger ones
    // before walking them (the fields are 16/32-bit, so a corrupt word could ask for 2^64).
    ap.num[..dims]
        .iter()
        .try_fold(1u64, |t, n| t.checked_mul((*n).max(1) as u64))
        .filter(|t| *t <= MAX_PATTERN_ELEMS)
        .ok_or_else(|| {
            OpFault::oob(format!(
                "access pattern of {:?} elements exceeds a partition",
                &ap.num[..dims]
            ))
        })?;
    let mut out = vec![0i64];
    for d in 0..dims {
        let (step, num) = (ap.step[d] as i64, ap.num[d].max(1) as i64);
        // Dimension d is outside the ones before it: index = i0 + n0 * (i1 + n1 * ...).
        let mut next = Vec::with_capacity(out.len() * num as usize);
        for i in 0..num {
            next.extend(out.iter().map(|o| o + i * step));
        }
        out = next;
    }
    Ok(out)
}

/// Columns of the PE array.
const PE_COLUMNS: usize = 128;
/// Moving-tensor elements per partition one MATMUL may stream: one 2 KiB PSUM bank of fp32.
const MAX_MOVING: usize = 512;

/// Elements one access pattern may name: a whole SBUF partition of bytes.
const MAX_PATTERN_ELEMS: u64 = 256 * 1024;

/// Where an access pattern's elements lie, checked against the partition size.
struct Span {
    /// Offsets are `offs[0], offs[0]+1, ...` (one ascending run per partition).
    contiguous: bool,
    /// Offsets are `offs[0], offs[0]-1, ...` (one descending run: LDWEIGHTS patterns).
    descending: bool,
    space: Space,
    stride: usize,
    offs: Vec<i64>,
    es: i64,
    base: i64,
}

fn span(mem: &CoreMem, ap: &AccessPattern, dt: Dtype, channels: usize) -> Result<Span, OpFault> {
    let (space, stride, limit) = match ap.space() {
        Space::Psum => (Space::Psum, mem.psum_stride, mem.psum_pb),
        _ => (Space::Sbuf, mem.sbuf_stride, mem.sbuf_pb),
    };
    let offs = offsets(ap)?;
    let es = dt.size() as i64;
    let base = ap.offset() as i64;
    let lo = offs.iter().min().copied().unwrap_or(0) * es + base;
    let hi = offs.iter().max().copied().unwrap_or(0) * es + base + es;
    if lo < 0 || hi > limit as i64 || channels > mem.partitions {
        return Err(OpFault::oob(format!(
            "{space:?} bytes {lo}..{hi} of {channels} partitions outside {limit}-byte partitions"
        )));
    }
    let contiguous = offs.windows(2).all(|w| w[1] == w[0] + 1);
    let descending = !contiguous && offs.windows(2).all(|w| w[1] == w[0] - 1);
    Ok(Span {
        contiguous,
        descending,
        space,
        stride,
        offs,
        es,
        base,
    })
}

/// Read `channels` partitions of an access pattern as f32, partition-major.
fn gather(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    out: &mut Vec<f32>,
) -> Result<usize, OpFault> {
    let sp = span(mem, ap, dt, channels)?;
    let bytes = mem.bytes(sp.space);
    out.clear();
    out.reserve(channels * sp.offs.len());
    // One loop per common dtype so the conversion is inlined, not dispatched per element.
    match dt {
        Dtype::F32 | Dtype::F32r => gather_with(bytes, &sp, channels, out, |b| {
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }),
        Dtype::Bf16 => gather_with(bytes, &sp, channels, out, |b| {
            half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
        }),
        Dtype::F16 => gather_with(bytes, &sp, channels, out, |b| {
            half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
        }),
        _ => gather_with(bytes, &sp, channels, out, |b| load_f32(dt, b)),
    }
    Ok(sp.offs.len())
}

#[inline(always)]
fn gather_with(
    bytes: &[u8],
    sp: &Span,
    channels: usize,
    out: &mut Vec<f32>,
    load: impl Fn(&[u8]) -> f32,
) {
    let es = sp.es as usize;
    let n = sp.offs.len();
    for p in 0..channels {
        let pb = (p * sp.stride) as i64 + sp.base;
        if sp.contiguous {
            // One slice per partition: the conversion loop vectorises.
            let at = (pb + sp.offs[0] * sp.es) as usize;
            out.extend(bytes[at..at + n * es].chunks_exact(es).map(&load));
            continue;
        }
        if sp.descending {
            let at = (pb + sp.offs[n - 1] * sp.es) as usize;
            out.extend(bytes[at..at + n * es].chunks_exact(es).rev().map(&load));
            continue;
        }
        for o in &sp.offs {
            let at = (pb + o * sp.es) as usize;
            out.push(load(&bytes[at..at + es]));
        }
    }
}

fn scatter(
    mem: &mut CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    channels: usize,
    vals: &[f32],
) -> Result<(), OpFault> {
    let sp = span(mem, ap, dt, channels)?;
    if vals.len() < channels * sp.offs.len() {
        return Err(OpFault::bad(
            "shape mismatch between source and destination patterns",
        ));
    }
    let bytes = mem.bytes_mut(sp.space);
    match dt {
        Dtype::F32 | Dtype::F32r => scatter_with(bytes, &sp, channels, vals, |v, b| {
            b.copy_from_slice(&v.to_le_bytes())
        }),
        Dtype::Bf16 => scatter_with(bytes, &sp, channels, vals, |v, b| {
            b.copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes())
        }),
        Dtype::F16 => scatter_with(bytes, &sp, channels, vals, |v, b| {
            b.copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes())
        }),
        _ => scatter_with(bytes, &sp, channels, vals, |v, b| store_f32(dt, v, b)),
    }
    Ok(())
}

#[inline(always)]
fn scatter_with(
    bytes: &mut [u8],
    sp: &Span,
    channels: usize,
    vals: &[f32],
    store: impl Fn(f32, &mut [u8]),
) {
    let es = sp.es as usize;
    let n = sp.offs.len();
    let mut k = 0;
    for p in 0..channels {
        let pb = (p * sp.stride) as i64 + sp.base;
        if sp.contiguous {
            let at = (pb + sp.offs[0] * sp.es) as usize;
            for (c, v) in bytes[at..at + n * es]
                .chunks_exact_mut(es)
                .zip(&vals[k..k + n])
            {
                store(*v, c);
            }
            k += n;
            continue;
        }
        for o in &sp.offs {
            let at = (pb + o * sp.es) as usize;
            store(vals[k], &mut bytes[at..at + es]);
            k += 1;
        }
    }
}

/// A bounds-checked fp32 pattern that is one ascending run per partition, as a view into the
/// core's f32 storage: (memory, view with rows = partitions, elements per partition).
fn f32_view(
    mem: &CoreMem,
    ap: &AccessPattern,
    channels: usize,
) -> Result<Option<(Space, View, usize)>, OpFault> {
    let sp = span(mem, ap, Dtype::F32, channels)?;
    let start = sp.base + sp.offs[0] * 4;
    if !sp.contiguous || start % 4 != 0 || sp.stride % 4 != 0 {
        return Ok(None);
    }
    let v = View {
        off: start as usize / 4,
        rs: sp.stride / 4,
        cs: 1,
    };
    Ok(Some((sp.space, v, sp.offs.len())))
}

/// Copy `channels` partitions from one pattern to another without converting the elements.
fn copy_bits(
    mem: &mut CoreMem,
    src: &AccessPattern,
    dst: &AccessPattern,
    dt: Dtype,
    channels: usize,
) -> Result<usize, OpFault> {
    let s = span(mem, src, dt, channels)?;
    let d = span(mem, dst, dt, channels)?;
    if s.offs.len() != d.offs.len() {
        return Err(OpFault::bad(
            "shape mismatch between source and destination patterns",
        ));
    }
    let es = s.es as usize;
    let mut tmp = Vec::with_capacity(channels * s.offs.len() * es);
    let from = mem.bytes(s.space);
    for p in 0..channels {
        let pb = (p * s.stride) as i64 + s.base;
        for o in &s.offs {
            let at = (pb + o * s.es) as usize;
            tmp.extend_from_slice(&from[at..at + es]);
        }
    }
    let to = mem.bytes_mut(d.space);
    let mut k = 0;
    for p in 0..channels {
        let pb = (p * d.stride) as i64 + d.base;
        for o in &d.offs {
            let at = (pb + o * d.es) as usize;
            to[at..at + es].copy_from_slice(&tmp[k..k + es]);
            k += es;
        }
    }
    Ok(s.offs.len())
}

/// ALU codes seen in the corpus (`docs/isa/cayman.md` §6): 0 BYPASS, 4 ADD, 6 MULTIPLY, 8 MAX.
fn alu(code: u64, a: f32, b: f32) -> Option<f32> {
    Some(match code {
        0 => a,
        4 => a + b,
        6 => a * b,
        8 => a.max(b),
        _ => return None,
    })
}

/// The high part of an fp32 value as the two-pass fp32 matmul splits it (a bf16 truncation;
/// only `hi + lo == w` matters for the sum of the two passes).
fn hi_part(w: f32) -> f32 {
    f32::from_bits(w.to_bits() & 0xFFFF_0000)
}

/// The operands every one-source elementwise instruction names.
struct Unary {
    src: AccessPattern,
    dst: AccessPattern,
    sdt: Dtype,
    ddt: Dtype,
    ch: usize,
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

/// Execute one loaded word on a core.
pub fn execute(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    a: &mut Vec<f32>,
    b: &mut Vec<f32>,
) -> Result<Exec, OpFault> {
    let done = |elems: usize| {
        Ok(Exec::Done {
            elems: elems as u64,
            pe: false,
        })
    };
    match ci.opcode {
        // Ordering and table management have no data-path effect in this model.
        Opcode::Nop
        | Opcode::EventSemaphore
        | Opcode::Drain
        | Opcode::SetOrderingMode
        | Opcode::ActTableLoad => done(0),
        Opcode::Ldweights => {
            let ap = need(ci.ap("src"), ci, "src")?;
            let dt = need(ci.dtype("src_dtype"), ci, "src_dtype")?;
            let rows = need(ci.u("rows"), ci, "rows")? as usize;
            let n = gather(mem, &ap, dt, rows, a)?;
            let transpose = ci.u("transpose").unwrap_or(0) == 1;
            let mode = ci.u("fp32_mode").unwrap_or(0);
            if n > PE_COLUMNS {
                return Err(OpFault::bad(format!(
                    "LDWEIGHTS of {n} columns; the PE array has {PE_COLUMNS}"
                )));
            }
            pe.k = rows;
            pe.m = n;
            pe.w.clear();
            pe.w.resize(rows * n, 0.0);
            // The array shifts weights in, so the pattern's first element lands in the last
            // column: the compiler emits reversed patterns (step -1) to load rows in order.
            for k in 0..rows {
                for j in 0..n {
                    let v = a[k * n + (n - 1 - j)];
                    pe.w[k * n + j] = match (transpose, mode) {
                        (false, 1) => v - hi_part(v),
                        (false, 2) => hi_part(v),
                        _ => v,
                    };
                }
            }
            pe.loaded = true;
            pe.transpose = transpose;
            Ok(Exec::Done {
                elems: n as u64,
                pe: true,
            })
        }
        Opcode::Matmul => {
            if !pe.loaded {
                return Err(OpFault::bad("MATMUL without LDWEIGHTS"));
            }
            let src = need(ci.ap("src"), ci, "src")?;
            let dt = need(ci.dtype("src_dtype"), ci, "src_dtype")?;
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let acc = ci.u("acc_flags").unwrap_or(3);
            let (k, m) = (pe.k, pe.m);
            // Transposes write 16-bit data as 16-bit PSUM elements (`nki-isa-and-cost-model.md`
            // §1.4); everything else accumulates in fp32.
            let out_dt = if pe.transpose && dt.size() == 2 {
                dt
            } else {
                Dtype::F32
            };
            // fp32 operands that lie contiguously in each partition are used in place (no copy).
            let mut mv = match dt {
                Dtype::F32 => f32_view(mem, &src, k)?,
                _ => None,
            };
            let dv = match out_dt {
                Dtype::F32 => f32_view(mem, &dst, m)?,
                _ => None,
            };
            if let (Some(b_), Some(c_)) = (&mv, &dv) {
                if b_.0 == c_.0 {
                    mv = None; // same memory: read through a copy
                }
            }
            let nmov = match &mv {
                Some((_, _, n)) => *n,
                None => gather(mem, &src, dt, k, a)?,
            };
            if nmov > MAX_MOVING {
                return Err(OpFault::bad(format!(
                    "MATMUL moving free size {nmov} exceeds one PSUM bank ({MAX_MOVING})"
                )));
            }
            let ndst = match &dv {
                Some((_, _, n)) => *n,
                None => span(mem, &dst, out_dt, m)?.offs.len(),
            };
            if ndst != nmov {
                return Err(OpFault::bad(format!(
                    "MATMUL writes {ndst} elements per partition for {nmov} moving columns"
                )));
            }
            // out[m x nmov] = W^T[m x k] * moving[k x nmov], with w[kk][j] at kk*m + j.
            let wv = View {
                off: 0,
                rs: 1,
                cs: m,
            };
            let dense = View {
                off: 0,
                rs: nmov,
                cs: 1,
            };
            // acc_flags bit 0: first of an accumulation group (overwrite); else accumulate.
            let beta = if acc & 1 == 0 { 1.0 } else { 0.0 };
            if let Some((dspace, cv, _)) = dv {
                let CoreMem { sbuf, psum, .. } = mem;
                let (bsl, csl): (&[f32], &mut [f32]) = match (&mv, dspace) {
                    (Some((Space::Sbuf, _, _)), Space::Psum) => (&sbuf[..], &mut psum[..]),
                    (Some((Space::Psum, _, _)), Space::Sbuf) => (&psum[..], &mut sbuf[..]),
                    (_, Space::Psum) => (&a[..], &mut psum[..]),
                    (_, Space::Sbuf) => (&a[..], &mut sbuf[..]),
                };
                let bv = mv.map_or(dense, |(_, v, _)| v);
                if !crate::gemm::sgemm(m, k, nmov, &pe.w, wv, bsl, bv, beta, csl, cv) {
                    return Err(OpFault::bad("MATMUL operand shapes do not fit"));
                }
            } else {
                let mut out = vec![0f32; m * nmov];
                if !crate::gemm::sgemm(m, k, nmov, &pe.w, wv, a, dense, 0.0, &mut out, dense) {
                    return Err(OpFault::bad("MATMUL operand shapes do not fit"));
                }
                if acc & 1 == 0 {
                    gather(mem, &dst, out_dt, m, b)?;
                    for (x, y) in out.iter_mut().zip(b.iter()) {
                        *x += *y;
                    }
                }
                scatter(mem, &dst, out_dt, m, &out)?;
            }
            Ok(Exec::Done {
                elems: nmov as u64 * if dt == Dtype::F32 { 4 } else { 1 },
                pe: true,
            })
        }
        Opcode::Activate => {
            let src = need(ci.ap("src"), ci, "src")?;
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let pair = need(ci.u("dtype_pair"), ci, "dtype_pair")? as u8;
            let sdt = need(Dtype::from_code(pair & 0xf), ci, "src dtype")?;
            let bdt = need(Dtype::from_code(pair >> 4), ci, "bias dtype")?;
            let ddt = need(ci.dtype("dst_dtype"), ci, "dst_dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let scale = ci.f32("scale").unwrap_or(1.0);
            let func = need(ci.u("func"), ci, "func")?;
            let n = gather(mem, &src, sdt, ch, a)?;
            let bias_ap = AccessPattern {
                addr: need(ci.u("bias_addr"), ci, "bias_addr")? as u32,
                dims: 1,
                step: [1, 0, 0, 0],
                num: [1, 0, 0, 0],
            };
            gather(mem, &bias_ap, bdt, ch, b)?;
            for p in 0..ch {
                for v in &mut a[p * n..(p + 1) * n] {
                    let x = *v * scale + b[p];
                    *v = match func {
                        7 => x.exp(),
                        0 => x,
                        f => {
                            return Err(OpFault::bad(format!(
                                "activation function code {f} not known"
                            )))
                        }
                    };
                }
            }
            scatter(mem, &dst, ddt, ch, a)?;
            done(n)
        }
        Opcode::Copy | Opcode::Cast | Opcode::Reciprocal => {
            let u = unary(ci)?;
            let (src, dst, ch) = (u.src, u.dst, u.ch);
            if ci.opcode == Opcode::Copy && u.sdt == u.ddt {
                // A same-type copy moves bits: integer words (the compiler copies 16-bit pairs
                // as int32) must not pass through f32.
                return done(copy_bits(mem, &src, &dst, u.sdt, ch)?);
            }
            let n = gather(mem, &src, u.sdt, ch, a)?;
            if ci.opcode == Opcode::Reciprocal {
                for v in a.iter_mut() {
                    *v = 1.0 / *v;
                }
            }
            scatter(mem, &dst, u.ddt, ch, a)?;
            done(n)
        }
        Opcode::TensorReduce => {
            let u = unary(ci)?;
            let (src, dst, ch) = (u.src, u.dst, u.ch);
            let op = need(ci.u("op"), ci, "op")?;
            let neg = ci.u("negated").unwrap_or(0) == 1;
            let n = gather(mem, &src, u.sdt, ch, a)?;
            // dim=X: reduce the innermost dimension; the destination holds the rest.
            let inner = (src.num[0].max(1) as usize).min(n.max(1));
            let groups = n / inner.max(1);
            b.clear();
            for p in 0..ch {
                for g in 0..groups {
                    let row = &a[p * n + g * inner..p * n + (g + 1) * inner];
                    let mut acc = row[0];
                    for v in &row[1..] {
                        acc = need(alu(op, acc, *v), ci, "op")?;
                    }
                    b.push(if neg { -acc } else { acc });
                }
            }
            scatter(mem, &dst, u.ddt, ch, b)?;
            done(n)
        }
        Opcode::TensorScalar => {
            let u = unary(ci)?;
            let (src, dst, ch) = (u.src, u.dst, u.ch);
            let imm_src = ci.u("imm_src").unwrap_or(0);
            let n = gather(mem, &src, u.sdt, ch, a)?;
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
            let (op0, op1) = (need(ci.u("op0"), ci, "op0")?, ci.u("op1").unwrap_or(0));
            for p in 0..ch {
                for v in &mut a[p * n..(p + 1) * n] {
                    let x = need(alu(op0, *v, s0[p]), ci, "op0")?;
                    *v = need(alu(op1, x, s1[p]), ci, "op1")?;
                }
            }
            scatter(mem, &dst, u.ddt, ch, a)?;
            done(n)
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
            let op = need(ci.u("op"), ci, "op")?;
            let n = gather(mem, &s0, d0, ch, a)?;
            let n1 = gather(mem, &s1, d1, ch, b)?;
            if n1 != n {
                return Err(OpFault::bad("TENSOR_TENSOR operand shapes differ"));
            }
            for (x, y) in a.iter_mut().zip(b.iter()) {
                *x = need(alu(op, *x, *y), ci, "op")?;
            }
            scatter(mem, &dst, ddt, ch, a)?;
            done(n)
        }
        Opcode::Memset => {
            let dst = need(ci.ap("dst"), ci, "dst")?;
            let dt = need(ci.dtype("dtype"), ci, "dtype")?;
            let ch = need(ci.u("channels"), ci, "channels")? as usize;
            let n = offsets(&dst)?.len();
            a.clear();
            a.resize(ch * n, 0.0);
            scatter(mem, &dst, dt, ch, a)?;
            done(n)
        }
        Opcode::DmaDirect2d => {
            let g = |n: &str| ci.u(n).unwrap_or(0);
            Ok(Exec::Dma(Dma2d {
                src: need(ci.addr("src"), ci, "src")?,
                src_step: [g("src_step0"), g("src_step1")],
                src_num: [g("src_num0"), g("src_num1")],
                src_elem: g("src_elem_size"),
                dst: need(ci.addr("dst"), ci, "dst")?,
                dst_step: [g("dst_step0"), g("dst_step1")],
                dst_num: [g("dst_num0"), g("dst_num1")],
                dst_elem: g("dst_elem_size"),
                in_dtype: ci.dtype("in_dtype"),
                out_dtype: ci.dtype("out_dtype"),
                semaphore: g("semaphore") as u8,
                increment: g("sem_increment") as u32,
            }))
        }
        other => Err(OpFault::bad(format!(
            "{} is not executable by this emulator yet",
            other.name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_ascending_descending_and_strided_patterns_alike() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        for p in 0..2usize {
            for i in 0..8usize {
                let at = p * mem.sbuf_stride + 0x40 + 4 * i;
                let v = (10 * p + i) as f32;
                mem.bytes_mut(Space::Sbuf)[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        let ap = |addr, step, num| AccessPattern {
            addr,
            dims: 1,
            step: [step, 0, 0, 0],
            num: [num, 0, 0, 0],
        };
        let mut out = Vec::new();
        gather(&mem, &ap(0x40, 1, 8), Dtype::F32, 2, &mut out).expect("ascending");
        assert_eq!(out[..8], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
        assert_eq!(out[8], 10.0);
        gather(&mem, &ap(0x40 + 28, -1, 8), Dtype::F32, 2, &mut out).expect("descending");
        assert_eq!(out[..8], [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]);
        assert_eq!(out[8..], [17.0, 16.0, 15.0, 14.0, 13.0, 12.0, 11.0, 10.0]);
        gather(&mem, &ap(0x40, 2, 4), Dtype::F32, 1, &mut out).expect("strided");
        assert_eq!(out, [0.0, 2.0, 4.0, 6.0]);
        assert!(gather(&mem, &ap(0, -1, 2), Dtype::F32, 1, &mut out).is_err());
    }

    #[test]
    fn same_type_integer_copy_keeps_every_bit() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // Two fp16 values packed in an int32 word: 0x4d3e_c0a1 is not exact in f32.
        let word = 0x4d3e_c0a1u32.to_le_bytes();
        mem.bytes_mut(Space::Sbuf)[0x100..0x104].copy_from_slice(&word);
        let ap = |addr| AccessPattern {
            addr,
            dims: 1,
            step: [1, 0, 0, 0],
            num: [1, 0, 0, 0],
        };
        let n = copy_bits(&mut mem, &ap(0x100), &ap(0x200), Dtype::I32, 1).expect("copy");
        assert_eq!(n, 1);
        assert_eq!(&mem.bytes(Space::Sbuf)[0x200..0x204], &word);
        assert!(copy_bits(&mut mem, &ap(0x100), &ap(0x40_0000), Dtype::I32, 1).is_err());
    }

    #[test]
    fn offsets_walk_innermost_first() {
        let ap = AccessPattern {
            addr: 0,
            dims: 3,
            step: [-1, 0, -32, 0],
            num: [32, 1, 4, 0],
        };
        let o = offsets(&ap).expect("small pattern");
        assert_eq!(o.len(), 128);
        assert_eq!(&o[..3], &[0, -1, -2]);
        assert_eq!(o[32], -32);
        assert_eq!(o[127], -127);
        let ap = AccessPattern {
            addr: 0,
            dims: 2,
            step: [1, 10, 0, 0],
            num: [3, 2, 0, 0],
        };
        assert_eq!(offsets(&ap).expect("small"), vec![0, 1, 2, 10, 11, 12]);
        let huge = AccessPattern {
            addr: 0,
            dims: 4,
            step: [1, 1, 1, 1],
            num: [65535, 65535, 65535, 65535],
        };
        assert!(offsets(&huge).is_err());
    }
}
