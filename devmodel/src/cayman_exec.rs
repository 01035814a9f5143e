//! Executing real trn2 ("cayman") words, as decoded by `neuron_isa::cayman`.
//!
//! Semantics are this project's reading of the evidence (`docs/isa/cayman.md`, the profiles,
//! and the numbers the real kernels must produce: `fixtures/real-golden/`); each rule below says
//! what it rests on. Access patterns: a byte offset in each partition (bit 25 = PSUM), then up
//! to four `[step, num]` dimensions in elements, innermost first; `channels` partitions from 0.

use crate::core::{CoreMem, Scratch};
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
    /// No MATMUL has used the weights since they were loaded (the cost model charges an
    /// LDWEIGHTS + MATMUL pair as one interval).
    pub fresh: bool,
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
    /// Data path done: elements streamed per partition (for the cost model) and the
    /// multiply-adds run through the host SGEMM (for host-cost accounting).
    Done { elems: u64, sgemm_macs: u64 },
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
    /// Offsets come in ascending runs of this many consecutive elements (`offs.len()` when
    /// `contiguous`, the innermost dimension when its step is 1, else 1).
    run: usize,
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
    let run = if contiguous {
        offs.len()
    } else if ap.dims > 0 && ap.step[0] == 1 && ap.num[0] > 1 {
        // offsets() walks the innermost dimension first, so each block of num[0] is a run.
        ap.num[0] as usize
    } else {
        1
    };
    Ok(Span {
        contiguous,
        descending,
        run,
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
    let es = sp.es as usize;
    match dt {
        Dtype::F32 | Dtype::F32r => gather_with(bytes, &sp, channels, out, |b, out| {
            use zerocopy::FromBytes;
            // The storage is f32 words, so aligned runs are plain copies.
            match <[f32]>::ref_from_bytes(b) {
                Ok(w) => out.extend_from_slice(w),
                Err(_) => out.extend(
                    b.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                ),
            }
        }),
        Dtype::Bf16 => gather_with(bytes, &sp, channels, out, |b, out| {
            out.extend(
                b.chunks_exact(2)
                    .map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)),
            )
        }),
        Dtype::F16 => gather_with(bytes, &sp, channels, out, |b, out| {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            use zerocopy::FromBytes;
            match <[u16]>::ref_from_bytes(b) {
                // Aligned runs convert as a slice (F16C, several lanes at a time).
                Ok(bits) => {
                    let at = out.len();
                    out.resize(at + bits.len(), 0.0);
                    bits.reinterpret_cast::<half::f16>()
                        .convert_to_f32_slice(&mut out[at..]);
                }
                Err(_) => out.extend(
                    b.chunks_exact(2)
                        .map(|b| half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
                ),
            }
        }),
        _ => gather_with(bytes, &sp, channels, out, |b, out| {
            out.extend(b.chunks_exact(es).map(|c| load_f32(dt, c)))
        }),
    }
    Ok(sp.offs.len())
}

/// Walk a checked span partition by partition, handing each run of consecutive elements (as
/// bytes) to `seg`, which appends them converted to f32.
#[inline(always)]
fn gather_with(
    bytes: &[u8],
    sp: &Span,
    channels: usize,
    out: &mut Vec<f32>,
    seg: impl Fn(&[u8], &mut Vec<f32>),
) {
    let es = sp.es as usize;
    let n = sp.offs.len();
    for p in 0..channels {
        let pb = (p * sp.stride) as i64 + sp.base;
        if sp.descending {
            // One descending run: convert it ascending, then reverse in place.
            let at = (pb + sp.offs[n - 1] * sp.es) as usize;
            let from = out.len();
            seg(&bytes[at..at + n * es], out);
            out[from..].reverse();
            continue;
        }
        let r = sp.run;
        for o in sp.offs.iter().step_by(r) {
            let at = (pb + o * sp.es) as usize;
            seg(&bytes[at..at + r * es], out);
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
    let es = sp.es as usize;
    match dt {
        Dtype::F32 | Dtype::F32r => scatter_with(bytes, &sp, channels, vals, |v, b| {
            for (c, x) in b.chunks_exact_mut(4).zip(v) {
                c.copy_from_slice(&x.to_le_bytes());
            }
        }),
        Dtype::Bf16 => scatter_with(bytes, &sp, channels, vals, |v, b| {
            for (c, x) in b.chunks_exact_mut(2).zip(v) {
                c.copy_from_slice(&half::bf16::from_f32(*x).to_bits().to_le_bytes());
            }
        }),
        Dtype::F16 => scatter_with(bytes, &sp, channels, vals, |v, b| {
            use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
            use zerocopy::FromBytes;
            match <[u16]>::mut_from_bytes(b) {
                // Aligned runs convert as a slice (F16C, several lanes at a time).
                Ok(bits) => bits
                    .reinterpret_cast_mut::<half::f16>()
                    .convert_from_f32_slice(v),
                Err(_) => {
                    for (c, x) in b.chunks_exact_mut(2).zip(v) {
                        c.copy_from_slice(&half::f16::from_f32(*x).to_bits().to_le_bytes());
                    }
                }
            }
        }),
        _ => scatter_with(bytes, &sp, channels, vals, |v, b| {
            for (c, x) in b.chunks_exact_mut(es).zip(v) {
                store_f32(dt, *x, c);
            }
        }),
    }
    Ok(())
}

/// Walk a checked span partition by partition, handing each run of consecutive elements (as
/// bytes) and its values to `seg`, which stores them converted.
#[inline(always)]
fn scatter_with(
    bytes: &mut [u8],
    sp: &Span,
    channels: usize,
    vals: &[f32],
    seg: impl Fn(&[f32], &mut [u8]),
) {
    let es = sp.es as usize;
    let r = sp.run;
    let mut k = 0;
    for p in 0..channels {
        let pb = (p * sp.stride) as i64 + sp.base;
        for o in sp.offs.iter().step_by(r) {
            let at = (pb + o * sp.es) as usize;
            seg(&vals[k..k + r], &mut bytes[at..at + r * es]);
            k += r;
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
    tmp: &mut Vec<u8>,
) -> Result<usize, OpFault> {
    let s = span(mem, src, dt, channels)?;
    let d = span(mem, dst, dt, channels)?;
    if s.offs.len() != d.offs.len() {
        return Err(OpFault::bad(
            "shape mismatch between source and destination patterns",
        ));
    }
    let es = s.es as usize;
    let n = s.offs.len();
    if s.contiguous && d.contiguous && s.space == d.space {
        // Partitions are disjoint, so a per-partition move equals read-all-then-write-all.
        let bytes = mem.bytes_mut(s.space);
        for p in 0..channels {
            let from = ((p * s.stride) as i64 + s.base + s.offs[0] * s.es) as usize;
            let to = ((p * d.stride) as i64 + d.base + d.offs[0] * d.es) as usize;
            bytes.copy_within(from..from + n * es, to);
        }
        return Ok(n);
    }
    tmp.clear();
    let from = mem.bytes(s.space);
    for p in 0..channels {
        let pb = (p * s.stride) as i64 + s.base;
        for o in s.offs.iter().step_by(s.run) {
            let at = (pb + o * s.es) as usize;
            tmp.extend_from_slice(&from[at..at + s.run * es]);
        }
    }
    let to = mem.bytes_mut(d.space);
    let mut k = 0;
    for p in 0..channels {
        let pb = (p * d.stride) as i64 + d.base;
        for o in d.offs.iter().step_by(d.run) {
            let at = (pb + o * d.es) as usize;
            let len = d.run * es;
            to[at..at + len].copy_from_slice(&tmp[k..k + len]);
            k += len;
        }
    }
    Ok(n)
}

/// ALU codes seen in the corpus (`docs/isa/cayman.md` §6): 0 BYPASS, 4 ADD, 6 MULTIPLY, 8 MAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alu {
    Bypass,
    Add,
    Mul,
    Max,
}

impl Alu {
    fn of(code: u64, ci: &CaymanInstr, field: &str) -> Result<Alu, OpFault> {
        Ok(match code {
            0 => Alu::Bypass,
            4 => Alu::Add,
            6 => Alu::Mul,
            8 => Alu::Max,
            _ => {
                return Err(OpFault::bad(format!(
                    "{}: ALU code {code} in '{field}' not known",
                    ci.opcode.name()
                )))
            }
        })
    }
}

/// `x[i] = op(x[i], y[i])`. One loop per operation so each vectorises.
fn alu_zip(op: Alu, x: &mut [f32], y: &[f32]) {
    let it = x.iter_mut().zip(y);
    match op {
        Alu::Bypass => {}
        Alu::Add => it.for_each(|(a, b)| *a += *b),
        Alu::Mul => it.for_each(|(a, b)| *a *= *b),
        Alu::Max => it.for_each(|(a, b)| *a = a.max(*b)),
    }
}

/// `x[i] = op(x[i], s)`.
fn alu_scalar(op: Alu, x: &mut [f32], s: f32) {
    match op {
        Alu::Bypass => {}
        Alu::Add => x.iter_mut().for_each(|a| *a += s),
        Alu::Mul => x.iter_mut().for_each(|a| *a *= s),
        Alu::Max => x.iter_mut().for_each(|a| *a = a.max(s)),
    }
}

/// Reduce a non-empty row. Sums run in eight interleaved partial sums (combined pairwise):
/// the hardware's summation order is not documented, and this order vectorises.
fn alu_reduce(op: Alu, row: &[f32]) -> f32 {
    match op {
        Alu::Bypass => row[0],
        Alu::Max => row[1..].iter().fold(row[0], |a, b| a.max(*b)),
        Alu::Add | Alu::Mul => {
            let unit = if op == Alu::Add { 0.0 } else { 1.0 };
            let mut lanes = [unit; 8];
            let chunks = row.chunks_exact(8);
            let tail = chunks.remainder();
            for c in chunks {
                for (l, v) in lanes.iter_mut().zip(c) {
                    *l = if op == Alu::Add { *l + *v } else { *l * *v };
                }
            }
            for (l, v) in lanes.iter_mut().zip(tail) {
                *l = if op == Alu::Add { *l + *v } else { *l * *v };
            }
            let f = |a: f32, b: f32| if op == Alu::Add { a + b } else { a * b };
            let q = [
                f(lanes[0], lanes[4]),
                f(lanes[1], lanes[5]),
                f(lanes[2], lanes[6]),
                f(lanes[3], lanes[7]),
            ];
            f(f(q[0], q[2]), f(q[1], q[3]))
        }
    }
}

/// `dst[j * rows + c] = src[c * cols + j]` for a `rows x cols` source, in 8 x 8 blocks.
fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const B: usize = 8;
    let (rb, cb) = (rows - rows % B, cols - cols % B);
    for c0 in (0..rb).step_by(B) {
        for j0 in (0..cb).step_by(B) {
            let mut t = [[0f32; B]; B];
            for (i, r) in t.iter_mut().enumerate() {
                r.copy_from_slice(&src[(c0 + i) * cols + j0..][..B]);
            }
            for j in 0..B {
                let d = &mut dst[(j0 + j) * rows + c0..][..B];
                for i in 0..B {
                    d[i] = t[i][j];
                }
            }
        }
    }
    // Edges (only when a dimension is not a multiple of 8).
    for c in 0..rows {
        for j in 0..cols {
            if c >= rb || j >= cb {
                dst[j * rows + c] = src[c * cols + j];
            }
        }
    }
}

/// Whether the `n x n` matrix at `view` in `m` is the identity (a transpose's moving tensor).
fn is_identity(m: &[f32], view: View, n: usize) -> bool {
    (0..n).all(|i| {
        let at = view.off + i * view.rs;
        if view.cs == 1 {
            m.get(at..at + n).is_some_and(|row| {
                row[i] == 1.0 && row[..i].iter().chain(&row[i + 1..]).all(|v| *v == 0.0)
            })
        } else {
            (0..n).all(|c| {
                m.get(at + c * view.cs)
                    .is_some_and(|v| *v == if i == c { 1.0 } else { 0.0 })
            })
        }
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
    scratch: &mut Scratch,
) -> Result<Exec, OpFault> {
    let Scratch { a, b, c, bytes } = scratch;
    let done = |elems: usize| {
        Ok(Exec::Done {
            elems: elems as u64,
            sgemm_macs: 0,
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
            let transpose = ci.u("transpose").unwrap_or(0) == 1;
            let mode = ci.u("fp32_mode").unwrap_or(0);
            // The array shifts weights in, so the pattern's first element lands in the last
            // column: the compiler emits reversed patterns (step -1) to load rows in order.
            // Gathering the pattern and reversing each row gives w[k][j].
            let n = gather(mem, &ap, dt, rows, a)?;
            if n > PE_COLUMNS {
                return Err(OpFault::bad(format!(
                    "LDWEIGHTS of {n} columns; the PE array has {PE_COLUMNS}"
                )));
            }
            pe.k = rows;
            pe.m = n;
            pe.w.clear();
            pe.w.reserve(rows * n);
            let rows_of = a[..rows * n].chunks_exact(n.max(1));
            match (transpose, mode) {
                (false, 1) => {
                    rows_of.for_each(|r| pe.w.extend(r.iter().rev().map(|v| v - hi_part(*v))))
                }
                (false, 2) => {
                    rows_of.for_each(|r| pe.w.extend(r.iter().rev().map(|v| hi_part(*v))))
                }
                _ => rows_of.for_each(|r| pe.w.extend(r.iter().rev())),
            }
            pe.loaded = true;
            pe.transpose = transpose;
            pe.fresh = true;
            Ok(Exec::Done {
                elems: n as u64,
                sgemm_macs: 0,
            })
        }
        Opcode::Matmul => {
            if !pe.loaded {
                return Err(OpFault::bad("MATMUL without LDWEIGHTS"));
            }
            pe.fresh = false;
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
            // A transpose against an identity moving tensor is data movement: do it as such
            // (bit-exact, as the hardware's transpose path is; no 0 * inf products).
            let ident = pe.transpose && k == nmov && {
                let (msl, view) = match &mv {
                    Some((sp, v, _)) => (mem.f32s(*sp), *v),
                    None => (&a[..], dense),
                };
                is_identity(msl, view, k)
            };
            if ident {
                // out[j][c] = w[c][j]
                b.clear();
                b.resize(m * nmov, 0.0);
                transpose(&pe.w[..nmov * m], nmov, m, b);
                if let Some((dspace, cv, _)) = dv {
                    let csl = mem.f32s_mut(dspace);
                    for (j, row) in b.chunks_exact(nmov).enumerate() {
                        for (c, t) in row.iter().enumerate() {
                            let at = cv.off + j * cv.rs + c * cv.cs;
                            csl[at] = if beta == 0.0 { *t } else { csl[at] + *t };
                        }
                    }
                } else {
                    if acc & 1 == 0 {
                        let old = c;
                        gather(mem, &dst, out_dt, m, old)?;
                        for (x, y) in b.iter_mut().zip(old.iter()) {
                            *x += *y;
                        }
                    }
                    scatter(mem, &dst, out_dt, m, b)?;
                }
            } else if let Some((dspace, cv, _)) = dv {
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
                let out = c;
                out.clear();
                out.resize(m * nmov, 0.0);
                if !crate::gemm::sgemm(m, k, nmov, &pe.w, wv, a, dense, 0.0, out, dense) {
                    return Err(OpFault::bad("MATMUL operand shapes do not fit"));
                }
                if acc & 1 == 0 {
                    gather(mem, &dst, out_dt, m, b)?;
                    for (x, y) in out.iter_mut().zip(b.iter()) {
                        *x += *y;
                    }
                }
                scatter(mem, &dst, out_dt, m, out)?;
            }
            Ok(Exec::Done {
                elems: nmov as u64 * if dt == Dtype::F32 { 4 } else { 1 },
                sgemm_macs: if ident { 0 } else { (m * k * nmov) as u64 },
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
            let exp = match func {
                7 => true,
                0 => false,
                f => {
                    return Err(OpFault::bad(format!(
                        "activation function code {f} not known"
                    )))
                }
            };
            for p in 0..ch {
                let (row, bias) = (&mut a[p * n..(p + 1) * n], b[p]);
                if exp {
                    row.iter_mut()
                        .for_each(|v| *v = crate::fastmath::exp_f32(*v * scale + bias));
                } else {
                    row.iter_mut().for_each(|v| *v = *v * scale + bias);
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
                return done(copy_bits(mem, &src, &dst, u.sdt, ch, bytes)?);
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
            let op = Alu::of(need(ci.u("op"), ci, "op")?, ci, "op")?;
            let neg = ci.u("negated").unwrap_or(0) == 1;
            let n = gather(mem, &src, u.sdt, ch, a)?;
            // dim=X: reduce the innermost dimension; the destination holds the rest.
            let inner = (src.num[0].max(1) as usize).min(n.max(1));
            let groups = n / inner.max(1);
            b.clear();
            for p in 0..ch {
                for g in 0..groups {
                    let acc = alu_reduce(op, &a[p * n + g * inner..p * n + (g + 1) * inner]);
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
            let op0 = Alu::of(need(ci.u("op0"), ci, "op0")?, ci, "op0")?;
            let op1 = Alu::of(ci.u("op1").unwrap_or(0), ci, "op1")?;
            for p in 0..ch {
                let row = &mut a[p * n..(p + 1) * n];
                alu_scalar(op0, row, s0[p]);
                alu_scalar(op1, row, s1[p]);
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
            let op = Alu::of(need(ci.u("op"), ci, "op")?, ci, "op")?;
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
        let mut tmp = Vec::new();
        let n = copy_bits(&mut mem, &ap(0x100), &ap(0x200), Dtype::I32, 1, &mut tmp).expect("copy");
        assert_eq!(n, 1);
        assert_eq!(&mem.bytes(Space::Sbuf)[0x200..0x204], &word);
        assert!(copy_bits(
            &mut mem,
            &ap(0x100),
            &ap(0x40_0000),
            Dtype::I32,
            1,
            &mut tmp
        )
        .is_err());
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

    #[test]
    fn transpose_matches_the_definition_for_any_shape() {
        for (rows, cols) in [(128, 128), (16, 8), (13, 21), (1, 9), (8, 3)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let mut dst = vec![f32::NAN; rows * cols];
            transpose(&src, rows, cols, &mut dst);
            for c in 0..rows {
                for j in 0..cols {
                    assert_eq!(
                        dst[j * rows + c],
                        src[c * cols + j],
                        "{rows}x{cols} ({c},{j})"
                    );
                }
            }
        }
    }

    #[test]
    fn identity_detection() {
        let n = 5;
        let mut m = vec![0f32; n * 7];
        for i in 0..n {
            m[i * 7 + i] = 1.0;
        }
        let v = View {
            off: 0,
            rs: 7,
            cs: 1,
        };
        assert!(is_identity(&m, v, n));
        assert!(is_identity(
            &m,
            View {
                off: 0,
                rs: 1,
                cs: 7
            },
            n
        ));
        m[7 + 3] = 1e-30;
        assert!(!is_identity(&m, v, n));
        assert!(
            !is_identity(&m[..20], v, n),
            "short slice is not an identity"
        );
    }

    #[test]
    fn reductions_agree_with_a_plain_fold() {
        let row: Vec<f32> = (0..515)
            .map(|i| ((i * 37) % 101) as f32 * 0.013 - 0.6)
            .collect();
        let seq: f64 = row.iter().map(|v| *v as f64).sum();
        assert!((alu_reduce(Alu::Add, &row) as f64 - seq).abs() < 1e-4);
        let max = row.iter().copied().fold(f32::MIN, f32::max);
        assert_eq!(alu_reduce(Alu::Max, &row), max);
        assert_eq!(alu_reduce(Alu::Bypass, &row), row[0]);
        let small = [1.5f32, 2.0, -1.0];
        assert_eq!(alu_reduce(Alu::Mul, &small), -3.0);
        assert_eq!(alu_reduce(Alu::Add, &small[..1]), 1.5);
    }

    #[test]
    fn runs_of_an_inner_unit_step_gather_and_scatter_alike() {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // 3 runs of 4 bf16 elements, 10 elements apart, in 2 partitions.
        let ap = AccessPattern {
            addr: 0x200,
            dims: 2,
            step: [1, 10, 0, 0],
            num: [4, 3, 0, 0],
        };
        let vals: Vec<f32> = (0..24).map(|i| i as f32 - 7.5).collect();
        scatter(&mut mem, &ap, Dtype::Bf16, 2, &vals).expect("scatter");
        let mut out = Vec::new();
        assert_eq!(
            gather(&mem, &ap, Dtype::Bf16, 2, &mut out).expect("gather"),
            12
        );
        assert_eq!(out, vals);
        // Element 5 of partition 1 is run 1, index 1: byte 0x200 + 2 * (10 + 1).
        let at = mem.sbuf_stride + 0x200 + 2 * 11;
        let b = &mem.bytes(Space::Sbuf)[at..at + 2];
        assert_eq!(
            half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
            vals[12 + 5]
        );
    }
}
