//! MATMULs that read their moving tensor where it lies in SBUF/PSUM instead of gathering it
//! first: a stationary matrix of a few columns against many tokens (`gemm::thin`), a
//! matrix-vector product's bf16 moving vector (`gemm::narrow_bf16`), and a bf16 or fp16
//! moving tensor of whole 32-column panels on the AVX-512F kernel (`gemm::sgemm_16`). All are the
//! SGEMM's bits; where a layout does not fit, nothing is written and `pe::matmul` goes on as
//! before.

use super::pattern::span;
use super::pe::{PeState, MAX_MOVING};
use crate::core::CoreMem;
use crate::fault::OpFault;
use crate::gemm::{amx, thin, Half, Path, View, Weights};
use neuron_isa::cayman::AccessPattern;
use neuron_isa::{Dtype, Space};
use zerocopy::{FromBytes, IntoBytes};

/// A MATMUL's operands as `pe::matmul` resolved them: the moving tensor `src` (`dt`; `mv`
/// its fp32 view where it has one), the destination's fp32 view `dv` where it has one, and
/// `beta` as the word's accumulate flag gives it.
#[derive(Clone, Copy)]
pub(super) struct Operands<'a> {
    pub(super) src: &'a AccessPattern,
    pub(super) dt: Dtype,
    pub(super) mv: Option<(Space, View, usize)>,
    pub(super) dv: Option<(Space, View, usize)>,
    pub(super) beta: f32,
}

/// A product of the loaded weights (`pe`) and the moving tensor into the fp32 destination,
/// read where the moving tensor lies: a thin product for weights of up to `thin::MAX_M`
/// columns, a matrix-vector one for a bf16 moving vector. The number of moving columns and
/// the multiply-adds that ran on `VDPBF16PS`, or None (nothing written) where neither
/// applies; `sums` is scratch.
pub(super) fn product(
    mem: &mut CoreMem,
    pe: &mut PeState,
    op: &Operands,
    sums: &mut Vec<f32>,
) -> Result<Option<(usize, u64)>, OpFault> {
    if pe.m <= thin::MAX_M {
        Ok(thin_product(mem, pe, op, sums)?.map(|n| (n, 0)))
    } else if op.dt == Dtype::Bf16 {
        match narrow_product(mem, pe, op.src, op.dv, op.beta)? {
            Some(n) => Ok(Some((n, 0))),
            None => panel_product(mem, pe, op, Half::Bf16),
        }
    } else if op.dt == Dtype::F16 {
        panel_product(mem, pe, op, Half::F16)
    } else {
        Ok(None)
    }
}

/// A bf16 or fp16 moving tensor of whole panels read from storage as bits by the AVX-512F
/// kernel (`gemm::sgemm_16`: no widened copy), into an fp32 destination in the other memory,
/// on the portable path (AMX tiles take bf16 where the host has them). The number of moving
/// columns and the multiply-adds run on `VDPBF16PS`, or None (nothing written) where the
/// kernel does not take the product.
fn panel_product(
    mem: &mut CoreMem,
    pe: &mut PeState,
    op: &Operands,
    half: Half,
) -> Result<Option<(usize, u64)>, OpFault> {
    let Some((dspace, cv, n)) = op.dv else {
        return Ok(None);
    };
    let (src, beta) = (op.src, op.beta);
    let (k, m) = (pe.k, pe.m);
    let tiles = pe.gemm.amx_parts(op.dt).is_some();
    if tiles || !crate::gemm::panels::applies(m, k, n, 1, cv.cs) {
        return Ok(None);
    }
    let Some(bv) = bits_beside(mem, src, k, dspace, n)? else {
        return Ok(None);
    };
    pe.materialize(mem)?;
    // bf16 weights against a bf16 moving tensor on `VDPBF16PS` (`gemm::dot`), packed once
    // per load; the panels it cannot prove exact, and other types, on the fp32 kernel.
    let bf16_weights = pe.w_dt.and_then(amx::Parts::of) == Some(amx::Parts::Exact);
    let pairs = (pe.gemm == Path::Dot && half == Half::Bf16 && bf16_weights)
        .then(|| pe.wpairs.ensure(&pe.w, m, k))
        .and_then(|ok| ok.then_some(&pe.wpairs));
    let (other, c) = mem.split_f32(dspace);
    let Ok(bits) = <[u16]>::ref_from_bytes(other.as_bytes()) else {
        return Ok(None);
    };
    let wv = View {
        off: 0,
        rs: 1,
        cs: m,
    };
    let b = (half, bits);
    let done = crate::gemm::sgemm_16(m, k, n, &pe.w, wv, b, bv, beta, c, cv, pairs);
    Ok(done.map(|dot_macs| (n, dot_macs)))
}

/// A thin product (`gemm::thin`) into an fp32 destination used in place, its moving tensor
/// read from storage: fp32 used in place, or bf16 bits, one ascending run per partition.
/// The number of moving columns, or None (nothing written) where the path does not apply;
/// `sums` is scratch.
fn thin_product(
    mem: &mut CoreMem,
    pe: &mut PeState,
    op: &Operands,
    sums: &mut Vec<f32>,
) -> Result<Option<usize>, OpFault> {
    let Operands {
        src, dt, mv, beta, ..
    } = *op;
    let Some((dspace, cv, ndst)) = op.dv else {
        return Ok(None);
    };
    if !thin::available() || ndst > MAX_MOVING {
        return Ok(None);
    }
    pe.materialize(mem)?;
    let (k, m) = (pe.k, pe.m);
    let wv = View {
        off: 0,
        rs: 1,
        cs: m,
    };
    let done = match (dt, mv) {
        (Dtype::F32, Some((space, bv, n))) if bv.cs == 1 && n == ndst => {
            let rows = thin::Rows::F32(mem.f32s(space));
            thin::sums(m, k, n, &pe.w, wv, rows, bv.off, bv.rs, sums)
        }
        (Dtype::Bf16, _) => match bf16_rows(mem, src, k)? {
            Some((space, bv, n)) if n == ndst => match <[u16]>::ref_from_bytes(mem.bytes(space)) {
                Ok(bits) => {
                    let rows = thin::Rows::Bf16(bits);
                    thin::sums(m, k, n, &pe.w, wv, rows, bv.off, bv.rs, sums)
                }
                Err(_) => false,
            },
            _ => false,
        },
        _ => false,
    };
    if !done {
        return Ok(None);
    }
    if !crate::gemm::add_into(m, ndst, sums, ndst, beta, mem.f32s_mut(dspace), cv) {
        return Err(OpFault::bad("MATMUL operand shapes do not fit"));
    }
    Ok(Some(ndst))
}

/// A bf16 moving tensor in storage: its memory and the view of its `k x n` elements among
/// the memory's 16-bit words (row `kk` the partition's `n` elements, one ascending run), and
/// `n`. None where the pattern is not one run per partition or not 2-byte aligned.
fn bf16_rows(
    mem: &CoreMem,
    src: &AccessPattern,
    k: usize,
) -> Result<Option<(Space, View, usize)>, OpFault> {
    let sp = span(mem, src, Dtype::Bf16, k)?;
    let at = usize::try_from(sp.row_base(0)).ok();
    Ok(match at {
        Some(at) if sp.is_contiguous() && at % 2 == 0 && sp.stride() % 2 == 0 => {
            let v = View {
                off: at / 2,
                rs: sp.stride() / 2,
                cs: 1,
            };
            Some((sp.space(), v, sp.len))
        }
        _ => None,
    })
}

/// The view of a bf16 moving tensor of `n` columns read as bits where it lies (one run per
/// partition), in the memory other than `dspace`: it is read while C is written there.
/// None where it is not so.
fn bits_beside(
    mem: &CoreMem,
    src: &AccessPattern,
    k: usize,
    dspace: Space,
    n: usize,
) -> Result<Option<View>, OpFault> {
    Ok(bf16_rows(mem, src, k)?
        .filter(|(space, _, nmov)| *nmov == n && *space != dspace)
        .map(|(_, bv, _)| bv))
}

/// A matrix-vector product (`gemm::narrow_bf16`) whose bf16 moving tensor is read from
/// storage as bits, into an fp32 destination in the other memory used in place; the weights
/// as bits where they were kept so (`PeState::w_from_bits`). The number of moving columns, or
/// None (nothing written) where the path does not apply.
fn narrow_product(
    mem: &mut CoreMem,
    pe: &mut PeState,
    src: &AccessPattern,
    dv: Option<(Space, View, usize)>,
    beta: f32,
) -> Result<Option<usize>, OpFault> {
    let Some((dspace, cv, n)) = dv else {
        return Ok(None);
    };
    let (k, m) = (pe.k, pe.m);
    if n > crate::gemm::narrow::MAX_N || !crate::gemm::narrow::available() {
        return Ok(None);
    }
    let Some(bv) = bits_beside(mem, src, k, dspace, n)? else {
        return Ok(None);
    };
    let as_bits = (pe.w_from_bits || pe.w_kept)
        && pe.w_dt == Some(Dtype::Bf16)
        && crate::gemm::narrow::bits_apply(m, k, n);
    if !as_bits {
        pe.materialize(mem)?;
    }
    let (other, kept, c) = mem.split_f32_weights(dspace);
    let b: &[u8] = other.as_bytes();
    let Ok(bits) = <[u16]>::ref_from_bytes(b) else {
        return Ok(None);
    };
    let pe_layout = View {
        off: 0,
        rs: 1,
        cs: m,
    };
    let (a, wv) = if !as_bits {
        (Weights::F32(&pe.w), pe_layout)
    } else if !pe.w_kept {
        (Weights::Bf16(&pe.w_bits), pe_layout)
    } else {
        // Kept weights (each partition's row in memory order, the PE layout's): copied out
        // if their space was written since LDWEIGHTS (always so if it is `dspace`, just
        // counted as written), else read where they lie, in the other memory.
        let kp = kept
            .filter(|kp| kp.shape() == (k, m))
            .ok_or_else(|| OpFault::bad("MATMUL's weights are no longer kept (core reset?)"))?;
        match kp.copy() {
            Some(rows) => (Weights::Bf16(rows), pe_layout),
            None => {
                let at = kp.view();
                let storage = View {
                    off: at.off,
                    rs: 1,
                    cs: at.rs,
                };
                (Weights::Bf16(bits), storage)
            }
        }
    };
    Ok(crate::gemm::narrow_bf16(m, k, n, a, wv, bits, bv, beta, c, cv).then_some(n))
}
