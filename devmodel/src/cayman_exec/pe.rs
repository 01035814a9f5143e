//! TensorE's data path: the stationary matrix LDWEIGHTS loads (`PeState`) and the MATMUL
//! that multiplies a moving tensor by it into PSUM, on the host's GEMM path (`gemm`: the
//! portable SGEMM or AMX tiles), with transposes done as data movement and fp32 pass pairs
//! handed to `passpair`.

use super::alu::{hi_part, is_identity};
use super::pattern::{
    descending_run, f32_view, gather, gather_bits16, gather_reversed, scatter, span,
};
use super::transpose::{
    fp32_identity, transpose, transpose_bits, transpose_into, transpose_kept_words, Identities,
};
use super::{need, passpair, Exec};
use crate::core::CoreMem;
use crate::fault::OpFault;
use crate::gemm::{amx, dot, Path, View};
use neuron_isa::cayman::{AccessPattern, CaymanInstr};
use neuron_isa::Dtype;
use zerocopy::IntoBytes;

/// The stationary matrix TensorE holds between LDWEIGHTS and MATMUL: `w[k * m + j]`.
#[derive(Debug, Clone)]
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
    /// Compute fp32 LOW/HIGH pass pairs as one product (`passpair`).
    pub fuse: bool,
    /// The weights are a LOW pass (fp32, with fusion on): the LDWEIGHTS' pattern, dtype and
    /// rows, and the unsplit values in `full`.
    pub low_src: Option<(AccessPattern, Dtype, usize)>,
    /// Writes to the LOW pass's weights' space when they were loaded (`CoreMem::writes`):
    /// the same count at the HIGH load means it loads the very same values.
    pub low_writes: u64,
    /// The weights are an fp32 LOW pass (fusion on or off): its math is counted at the HIGH
    /// pass (`Exec::Done::math_macs`).
    pub low_pass: bool,
    pub full: Vec<f32>,
    /// `w` is not computed yet: it is this part of `full` (an fp32 pass pair's weights are
    /// split only when a pass must run alone; [`PeState::materialize`]).
    pub w_from_full: Option<Split>,
    /// The weights' dtype (of the last LDWEIGHTS): whether they are bf16 parts (`gemm::amx`).
    pub w_dt: Option<Dtype>,
    /// `w` is not computed yet: it is `w_bits` widened. bf16 weights are kept as bits when
    /// the last MATMUL was a matrix-vector product (`last_narrow`), which reads them so
    /// (`gemm::narrow::product_bits`); any other use widens them first ([`PeState::materialize`]).
    pub w_from_bits: bool,
    pub w_bits: Vec<u16>,
    /// Neither `w` nor `w_bits` holds the weights: they are bf16 bits kept where LDWEIGHTS
    /// found them (`CoreMem::keep_weights`: each partition's row in memory order, which is
    /// the PE layout's, as the pattern descends), for a matrix-vector product to read there
    /// ([`PeState::unkeep`] brings them into `w_bits` for anything else).
    pub w_kept: bool,
    /// Neither does `w`: the weights are a transpose's fp32 rows kept where LDWEIGHTS found
    /// them (`CoreMem::keep_words`, memory order as for `w_kept`), for the MATMUL that
    /// transposes them to read there ([`PeState::unkeep`] brings them into `w` for anything
    /// else, as a copying LDWEIGHTS would have left them).
    pub w_words: bool,
    /// Nor does `full`: a LOW pass's fp32 weights (fusion on) are kept where LDWEIGHTS found
    /// them (`CoreMem::keep_words`, memory order as for `w_words`), for the fused product to
    /// read there instead of a 64 KiB copy per pair ([`PeState::unkeep_full`] brings them
    /// into `full` for anything else: a pass run alone, a HIGH load compared value by value).
    pub full_words: bool,
    pub last_narrow: bool,
    /// The GEMM kernel for MATMULs of bf16-representable operands (`NEURON_EMU_GEMM`).
    pub gemm: Path,
    /// The weights packed for the AMX tiles, once per LDWEIGHTS (on first use).
    pub wpack: amx::PackedA,
    /// The weights packed as bf16 pairs for `VDPBF16PS` (`Path::Dot`), likewise.
    pub wpairs: dot::PackedA,
    /// A deferred LOW pass waiting for its HIGH pass.
    pub pair: Option<passpair::Pending>,
    /// Where transposes last found identity moving tensors (a kernel transposes against
    /// the same ones again and again): while nothing writes their columns, they still are.
    pub identity_at: Identities,
    /// A deferred pass's moving-tensor snapshot buffer (or the buffer its kept rows are
    /// copied into), kept between pairs.
    pub snapshot: Vec<f32>,
    /// Pairs computed as one product, and deferred LOW passes run alone (diagnostics, tests).
    pub fused_pairs: u64,
    pub settled: u64,
}

impl Default for PeState {
    fn default() -> Self {
        PeState {
            w: Vec::new(),
            k: 0,
            m: 0,
            loaded: false,
            transpose: false,
            fresh: false,
            fuse: passpair::enabled_by_env(),
            low_src: None,
            low_pass: false,
            full: Vec::new(),
            w_from_full: None,
            w_dt: None,
            w_from_bits: false,
            w_bits: Vec::new(),
            w_kept: false,
            w_words: false,
            full_words: false,
            last_narrow: false,
            gemm: Path::from_env(),
            wpack: amx::PackedA::default(),
            wpairs: dot::PackedA::default(),
            pair: None,
            identity_at: Identities::default(),
            low_writes: 0,
            snapshot: Vec::new(),
            fused_pairs: 0,
            settled: 0,
        }
    }
}

/// Which part of an fp32 value a pass's weights are: `w − hi(w)` or `hi(w)` (`alu::hi_part`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Lo,
    Hi,
}

impl PeState {
    /// Compute `w` if it is still a deferred part of `full`, bf16 bits, or kept in `mem`.
    pub fn materialize(&mut self, mem: &mut CoreMem) -> Result<(), OpFault> {
        self.unkeep(mem)?;
        if self.w_from_full.is_some() {
            self.unkeep_full(mem)?;
        }
        if std::mem::take(&mut self.w_from_bits) {
            self.w.clear();
            if self.w_dt == Some(Dtype::F16) {
                // fp16 bits (a transpose's weights): `half`'s widening, as the gathers'.
                use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
                self.w.resize(self.w_bits.len(), 0.0);
                self.w_bits
                    .reinterpret_cast::<half::f16>()
                    .convert_to_f32_slice(&mut self.w);
                return self.materialize_full();
            }
            #[cfg(target_endian = "little")]
            super::widen::bf16_into(zerocopy::IntoBytes::as_bytes(&self.w_bits[..]), &mut self.w);
            #[cfg(not(target_endian = "little"))]
            self.w.extend(
                self.w_bits
                    .iter()
                    .map(|b| f32::from_bits(u32::from(*b) << 16)),
            );
        }
        self.materialize_full()
    }

    /// Compute `w` if it is still a deferred part of `full`.
    fn materialize_full(&mut self) -> Result<(), OpFault> {
        if let Some(part) = self.w_from_full.take() {
            self.w.clear();
            match part {
                Split::Lo => self.w.extend(self.full.iter().map(|v| v - hi_part(*v))),
                Split::Hi => self.w.extend(self.full.iter().map(|v| hi_part(*v))),
            }
        }
        Ok(())
    }

    /// Bring weights kept in `mem` into `w_bits` ([`PeState::w_kept`]) or `w`
    /// ([`PeState::w_words`]), as an LDWEIGHTS that copied them would have left them.
    pub fn unkeep(&mut self, mem: &mut CoreMem) -> Result<(), OpFault> {
        if std::mem::take(&mut self.w_words) {
            let kp = mem
                .release_words()
                .ok_or_else(|| OpFault::bad("MATMUL's weights are no longer kept (core reset?)"))?;
            let space = kp.space;
            self.w = kp.into_rows(mem.f32s(space));
        }
        if !std::mem::take(&mut self.w_kept) {
            return Ok(());
        }
        // Only a reset releases them otherwise, and it resets this state too.
        let kp = mem
            .release_weights()
            .ok_or_else(|| OpFault::bad("MATMUL's weights are no longer kept (core reset?)"))?;
        let space = kp.space;
        self.w_bits = kp.into_rows(mem.bits16(space));
        self.w_from_bits = true;
        Ok(())
    }

    /// Bring a LOW pass's weights kept in `mem` into `full` ([`PeState::full_words`]), as the
    /// LDWEIGHTS that copied them would have left them.
    pub fn unkeep_full(&mut self, mem: &mut CoreMem) -> Result<(), OpFault> {
        if std::mem::take(&mut self.full_words) {
            let kp = mem
                .release_words()
                .ok_or_else(|| OpFault::bad("MATMUL's weights are no longer kept (core reset?)"))?;
            let space = kp.space;
            self.full = kp.into_rows(mem.f32s(space));
        }
        Ok(())
    }

    /// How many unsplit weights a LOW pass loaded, wherever they are.
    pub fn full_len(&self, mem: &CoreMem) -> usize {
        if self.full_words {
            mem.kept_words().map_or(0, |kp| {
                let (k, n) = kp.shape();
                k * n
            })
        } else {
            self.full.len()
        }
    }

    /// Stop keeping weights in `mem` (new ones are loading), reusing their buffer; a pending
    /// pair's LOW weights stay kept for its HIGH load (`keep_full`).
    fn forget_kept(&mut self, mem: &mut CoreMem, keep_full: bool) {
        if !keep_full && std::mem::take(&mut self.full_words) {
            if let Some(kp) = mem.release_words() {
                self.full = kp.into_buffer();
            }
        }
        if std::mem::take(&mut self.w_words) {
            if let Some(kp) = mem.release_words() {
                self.w = kp.into_buffer();
            }
        }
        if std::mem::take(&mut self.w_kept) {
            if let Some(kp) = mem.release_weights() {
                self.w_bits = kp.into_buffer();
            }
        }
    }
}

/// MATMULs with fewer moving columns stay on the SGEMM: a tile is 16 columns wide, and a
/// matrix-vector product (a decode step's one token) would compute 16 to keep 1.
const AMX_MIN_COLUMNS: usize = 16;

/// Columns of the PE array.
const PE_COLUMNS: usize = 128;
/// Moving-tensor elements per partition one MATMUL may stream: one 2 KiB PSUM bank of fp32.
pub(super) const MAX_MOVING: usize = 512;

/// LDWEIGHTS: load the stationary matrix (`a` is scratch).
pub(super) fn ldweights(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    a: &mut Vec<f32>,
) -> Result<Exec, OpFault> {
    let ap = need(ci.ap("src"), ci, "src")?;
    let dt = need(ci.dtype("src_dtype"), ci, "src_dtype")?;
    let rows = need(ci.u("rows"), ci, "rows")? as usize;
    let transpose = ci.u("transpose").unwrap_or(0) == 1;
    let mode = ci.u("fp32_mode").unwrap_or(0);
    // The HIGH load of a pending pair (`passpair::resume` let only that through) that
    // loads the LOW pass's very values: compared where they lie, not copied (`hi(w)` is
    // computed only if a pass runs alone).
    let high = pe.pair.is_some() && !transpose && mode == 2 && dt == Dtype::F32;
    pe.forget_kept(mem, high);
    // The array shifts weights in, so the pattern's first element lands in the last
    // column: the compiler emits reversed patterns (step -1) to load rows in order.
    // Each row of the pattern, reversed, gives w[k][j]. bf16 weights for what is likely
    // another matrix-vector product stay bits (`PeState::w_from_bits`).
    // bf16 weights of a transpose are only moved, so they stay bits too (`transpose_bits`).
    // fp16 weights of a transpose likewise.
    let as_bits = !matches!(mode, 1 | 2)
        && pe.pair.is_none()
        && match dt {
            Dtype::Bf16 => transpose || (pe.last_narrow && crate::gemm::narrow::available()),
            Dtype::F16 => transpose,
            _ => false,
        };
    let in_place = if high {
        // The LOW load's pattern, and nothing written to its space since: its values.
        let unwritten = pe.low_src == Some((ap, dt, rows))
            && cols_unwritten_since(mem, &ap, dt, rows, pe.low_writes)?
            && pe.full_len(mem).is_multiple_of(rows.max(1));
        if unwritten {
            Some(true)
        } else {
            pe.unkeep_full(mem)?;
            same_weights_in_place(mem, &ap, rows, &pe.full)?
        }
    } else {
        None
    };
    let same_as_low = in_place == Some(true);
    // bf16 weights for a matrix-vector product are read where they lie until SBUF/PSUM is
    // written (`CoreMem::keep_weights`), not copied.
    let kept = if as_bits && !transpose {
        keep_in_place(mem, &ap, rows, pe)?
    } else {
        None
    };
    pe.w_kept = kept.is_some();
    // fp32 weights of a transpose are only moved, by the MATMUL that transposes them: read
    // where they lie until SBUF/PSUM is written (`CoreMem::keep_words`), not copied.
    let words = if transpose && dt == Dtype::F32 && pe.pair.is_none() {
        keep_words_in_place(mem, &ap, rows, &mut pe.w)?
    } else {
        None
    };
    pe.w_words = words.is_some();
    // A LOW pass's fp32 weights (fusion on) likewise, for the fused product to read there.
    let low_fused = pe.fuse && !transpose && mode == 1 && dt == Dtype::F32;
    let full_kept = if low_fused && pe.pair.is_none() {
        keep_words_in_place(mem, &ap, rows, &mut pe.full)?
    } else {
        None
    };
    pe.full_words = pe.full_words || full_kept.is_some();
    let n = if same_as_low {
        pe.full_len(mem) / rows.max(1)
    } else if let Some(n) = kept.or(words).or(full_kept) {
        n
    } else if as_bits {
        gather_bits16(mem, &ap, rows, &mut pe.w_bits, true)?
    } else {
        gather_reversed(mem, &ap, dt, rows, a)?
    };
    if n > PE_COLUMNS {
        return Err(OpFault::bad(format!(
            "LDWEIGHTS of {n} columns; the PE array has {PE_COLUMNS}"
        )));
    }
    pe.k = rows;
    pe.m = n;
    pe.low_src = None;
    pe.low_pass = !transpose && mode == 1;
    pe.w_from_full = None;
    pe.w_from_bits = as_bits && kept.is_none();
    // The gathered rows become the array's contents by swapping buffers, not copying.
    a.truncate(rows * n);
    // (A pattern not compared in place is compared gathered.)
    let same_as_low =
        same_as_low || (high && in_place.is_none() && passpair::same_bits(a, &pe.full));
    if as_bits || words.is_some() {
        // `w` is left as it was: `w_from_bits` or `w_words` says it is stale.
    } else if low_fused {
        // Split only if the LOW pass must run alone.
        if full_kept.is_none() {
            std::mem::swap(&mut pe.full, a);
        }
        pe.low_src = Some((ap, dt, rows));
        pe.low_writes = mem.writes(ap.space());
        pe.w_from_full = Some(Split::Lo);
    } else if same_as_low {
        pe.w_from_full = Some(Split::Hi);
    } else {
        match (transpose, mode) {
            (false, 1) => {
                pe.w.clear();
                pe.w.extend(a.iter().map(|v| v - hi_part(*v)));
            }
            (false, 2) => {
                pe.w.clear();
                pe.w.extend(a.iter().map(|v| hi_part(*v)));
            }
            _ => std::mem::swap(&mut pe.w, a),
        }
    }
    pe.loaded = true;
    pe.w_dt = Some(dt);
    pe.wpack.clear();
    pe.wpairs.clear();
    pe.transpose = transpose;
    pe.fresh = true;
    if pe.pair.is_some() {
        passpair::high_loaded(mem, pe, same_as_low)?;
    }
    Ok(Exec::Done {
        elems: n as u64,
        sgemm_macs: 0,
        amx_macs: 0,
        dot_macs: 0,
        math_macs: 0,
        onchip_bytes: 0,
    })
}

/// MATMUL: `out = W^T · moving` into PSUM, overwriting or accumulating (`acc_flags`); `a`,
/// `b`, `c`, `bpack`, `tiles` and `bits16` are scratch.
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    a: &mut Vec<f32>,
    b: &mut Vec<f32>,
    c: &mut Vec<f32>,
    bpack: &mut amx::PackedB,
    tiles: &mut Vec<f32>,
    bits16: &mut Vec<u16>,
) -> Result<Exec, OpFault> {
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
    // A bf16 transpose of weights kept as bits moves the bits (or leaves it all to the
    // general path below, which widens them).
    if pe.transpose && pe.w_from_bits && pe.w_dt == Some(dt) && acc & 1 == 1 {
        if let Some(n) = transpose_bits(mem, pe, &src, &dst, dt)? {
            pe.last_narrow = n <= crate::gemm::narrow::MAX_N;
            return Ok(Exec::Done {
                elems: n as u64,
                sgemm_macs: 0,
                amx_macs: 0,
                dot_macs: 0,
                math_macs: 0,
                onchip_bytes: 0,
            });
        }
    }
    // fp32 operands that lie contiguously in each partition are used in place (no copy).
    let mut mv = match dt {
        Dtype::F32 => f32_view(mem, &src, k)?,
        _ => None,
    };
    let dv = match out_dt {
        Dtype::F32 => f32_view(mem, &dst, m)?,
        _ => None,
    };
    if pe.w_words && pe.transpose && dt == Dtype::F32 {
        if let Some(n) = transpose_kept_words(mem, pe, mv, dv, acc & 1 == 0) {
            pe.last_narrow = n <= crate::gemm::narrow::MAX_N;
            return Ok(Exec::Done {
                elems: n as u64 * 4,
                sgemm_macs: 0,
                amx_macs: 0,
                dot_macs: 0,
                math_macs: 0,
                onchip_bytes: 0,
            });
        }
    }
    // Deferred weights are needed unless this is a LOW pass `passpair` may defer (an fp32
    // product into an in-place fp32 destination).
    let may_defer = pe.low_src.is_some() && dt == Dtype::F32 && !pe.transpose && dv.is_some();
    // acc_flags bit 0: first of an accumulation group (overwrite); else accumulate.
    let beta = if acc & 1 == 0 { 1.0 } else { 0.0 };
    // A stationary matrix of a few columns (an MoE router's or gate's weight vector) meets
    // each row of the moving tensor straight from storage (`gemm::thin`), and so does a
    // matrix-vector product's bf16 moving vector (`gemm::narrow_bf16`).
    if !pe.transpose && !may_defer && pe.pair.is_none() {
        let op = super::direct::Operands {
            src: &src,
            dt,
            mv,
            dv,
            beta,
        };
        if let Some((n, dot_macs)) = super::direct::product(mem, pe, &op, c)? {
            pe.last_narrow = n <= crate::gemm::narrow::MAX_N;
            let macs = (m * k * n) as u64;
            return Ok(Exec::Done {
                elems: n as u64 * if dt == Dtype::F32 { 4 } else { 1 },
                sgemm_macs: macs,
                amx_macs: 0,
                dot_macs,
                math_macs: if pe.low_pass { 0 } else { macs },
                onchip_bytes: 0,
            });
        }
    }
    // Weights kept where they lie are read there only by `direct`'s matrix-vector product.
    pe.unkeep(mem)?;
    if !may_defer && !pe.w_from_bits {
        pe.materialize(mem)?;
    }
    if let (Some(b_), Some(c_)) = (&mv, &dv) {
        if b_.0 == c_.0 {
            mv = None; // same memory: read through a copy
        }
    }
    // The operand types the tiles take on this path (`gemm::amx`; transposes stay
    // data movement, and a transpose's moving tensor is checked from `a`).
    let parts = |d: Option<Dtype>| d.and_then(|d| pe.gemm.amx_parts(d));
    let tile_parts = match (pe.transpose, parts(pe.w_dt), parts(Some(dt))) {
        (false, Some(pa), Some(pb)) => Some((pa, pb)),
        _ => None,
    };
    // A bf16 moving tensor bound for the tiles is read as bits: no f32 pass.
    let as_bits = tile_parts.is_some() && dt == Dtype::Bf16 && mv.is_none();
    let nmov = match &mv {
        Some((_, _, n)) => *n,
        None if as_bits => gather_bits16(mem, &src, k, bits16, false)?,
        None => gather(mem, &src, dt, k, a)?,
    };
    if nmov > MAX_MOVING {
        return Err(OpFault::bad(format!(
            "MATMUL moving free size {nmov} exceeds one PSUM bank ({MAX_MOVING})"
        )));
    }
    let ndst = match &dv {
        Some((_, _, n)) => *n,
        None => span(mem, &dst, out_dt, m)?.len,
    };
    if ndst != nmov {
        return Err(OpFault::bad(format!(
            "MATMUL writes {ndst} elements per partition for {nmov} moving columns"
        )));
    }
    // bf16 weights kept as bits feed a matrix-vector product as they are; anything else
    // (tiles need at least 16 columns, so never these) widens them now.
    let bits_product = pe.w_from_bits
        && pe.w_dt == Some(Dtype::Bf16)
        && !pe.transpose
        && crate::gemm::narrow::bits_apply(m, k, nmov);
    if pe.w_from_bits && !bits_product {
        pe.materialize(mem)?;
    }
    pe.last_narrow = nmov <= crate::gemm::narrow::MAX_N;
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
    // A transpose against an identity moving tensor is data movement: do it as such
    // (bit-exact, as the hardware's transpose path is; no 0 * inf products).
    let ident = pe.transpose
        && k == nmov
        && match &mv {
            Some((sp, v, _)) if v.cs == 1 => fp32_identity(pe, mem, *sp, *v, k),
            Some((sp, v, _)) => is_identity(mem.f32s(*sp), *v, k),
            None => is_identity(&a[..], dense, k),
        };
    // bf16-representable operands on AMX tiles where the host has them (`gemm::amx`;
    // their moving tensor is always gathered, as only fp32 is used in place).
    // An fp32 destination takes the product block by block (`amx::gemm_into`); any other
    // is staged through `tiles`.
    let on_amx = match (tile_parts, &mv, nmov >= AMX_MIN_COLUMNS) {
        (Some((pa, pb)), None, true) => {
            (pe.wpack.is_for(pa, pb) || amx::PackedA::pack(&pe.w, m, k, pa, pb, &mut pe.wpack))
                && if as_bits {
                    amx::PackedB::pack_bits(bits16, k, nmov, pa, bpack)
                } else {
                    amx::PackedB::pack(&a[..], k, nmov, pa, pb, bpack)
                }
                && match dv {
                    Some((dspace, cv, _)) => {
                        amx::gemm_into(&pe.wpack, bpack, beta, mem.f32s_mut(dspace), cv)
                    }
                    None => amx::gemm(&pe.wpack, bpack, tiles),
                }
        }
        _ => false,
    };
    if as_bits && !on_amx {
        // Too few columns for the tiles: the SGEMM takes the values as f32.
        a.clear();
        a.extend(bits16.iter().map(|b| f32::from_bits(u32::from(*b) << 16)));
    }
    if on_amx {
        // Already in an fp32 destination.
        if dv.is_none() {
            let np = bpack.padded_columns();
            let out = c;
            out.clear();
            for row in tiles.chunks_exact(np).take(m) {
                out.extend_from_slice(&row[..nmov]);
            }
            if acc & 1 == 0 {
                gather(mem, &dst, out_dt, m, b)?;
                for (x, y) in out.iter_mut().zip(b.iter()) {
                    *x += *y;
                }
            }
            scatter(mem, &dst, out_dt, m, out)?;
        }
    } else if ident {
        // out[j][c] = w[c][j]: straight into an fp32 destination's unit-stride, disjoint
        // rows; any other destination is staged.
        if let Some((dspace, cv, _)) = dv.filter(|(_, v, _)| v.cs == 1 && v.rs >= nmov) {
            let csl = mem.f32s_mut(dspace);
            let w = &pe.w[..nmov * m];
            if !transpose_into(w, nmov, m, csl, cv.off, cv.rs, beta != 0.0) {
                return Err(OpFault::bad("MATMUL operand shapes do not fit"));
            }
        } else {
            b.clear();
            b.resize(m * nmov, 0.0);
            transpose(&pe.w[..nmov * m], nmov, m, b);
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
        // An fp32 LOW pass may be computed together with its HIGH pass (`passpair`).
        let fused = may_defer && passpair::start(ci, mem, pe, src, dst, dspace, cv, beta)?;
        if !fused && !bits_product {
            pe.materialize(mem)?;
        }
        // (A moving tensor in place lies in the other space: one in `dspace` was copied.)
        let (other, csl) = mem.split_f32(dspace);
        let bsl: &[f32] = if mv.is_some() { other } else { &a[..] };
        let bv = mv.map_or(dense, |(_, v, _)| v);
        let done = fused
            || if bits_product {
                crate::gemm::sgemm_bits(m, k, nmov, &pe.w_bits, wv, bsl, bv, beta, csl, cv)
            } else {
                crate::gemm::sgemm(m, k, nmov, &pe.w, wv, bsl, bv, beta, csl, cv)
            };
        if !done {
            return Err(OpFault::bad("MATMUL operand shapes do not fit"));
        }
    } else {
        let out = c;
        out.clear();
        out.resize(m * nmov, 0.0);
        let done = if bits_product {
            crate::gemm::sgemm_bits(m, k, nmov, &pe.w_bits, wv, a, dense, 0.0, out, dense)
        } else {
            crate::gemm::sgemm(m, k, nmov, &pe.w, wv, a, dense, 0.0, out, dense)
        };
        if !done {
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
        sgemm_macs: if ident || on_amx {
            0
        } else {
            (m * k * nmov) as u64
        },
        amx_macs: if on_amx { (m * k * nmov) as u64 } else { 0 },
        dot_macs: 0,
        math_macs: if ident || pe.low_pass {
            0
        } else {
            (m * k * nmov) as u64
        },
        onchip_bytes: 0,
    })
}

/// Whether nothing has written the columns `rows` partitions of pattern `ap` lie in since
/// its space's write count was `count` (the whole space where the columns cannot be told).
fn cols_unwritten_since(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    rows: usize,
    count: u64,
) -> Result<bool, OpFault> {
    let sp = span(mem, ap, dt, rows)?;
    Ok(match sp.cols(sp.base_in_partition()) {
        Some((lo, hi)) => mem.cols_unwritten_since(sp.space(), count, lo, hi),
        None => mem.unwritten_since(sp.space(), count),
    })
}

/// Where LDWEIGHTS' weights lie when the pattern is one descending run per partition (the
/// compiler's weights pattern: the array shifts the weights in, so memory order is the PE
/// layout's) starting on an element boundary of `dt`: their space, their rows' view in
/// elements of `dt`, and the number of columns. None for any other pattern.
fn weights_view(
    mem: &CoreMem,
    ap: &AccessPattern,
    dt: Dtype,
    rows: usize,
) -> Result<Option<(neuron_isa::Space, View, usize)>, OpFault> {
    let Some((space, stride, base, n)) = descending_run(mem, ap, dt, rows)? else {
        return Ok(None);
    };
    let es = dt.size();
    if n == 0 || es == 0 || !cfg!(target_endian = "little") {
        return Ok(None);
    }
    // The first row's lowest byte (`descending_run` checked every row lies in its memory).
    let lowest = usize::try_from(base + (1 - n as i64) * es as i64).ok();
    let Some(lo) = lowest.filter(|lo| lo % es == 0 && stride % es == 0) else {
        return Ok(None);
    };
    let view = View {
        off: lo / es,
        rs: stride / es,
        cs: 1,
    };
    Ok(Some((space, view, n)))
}

/// Keep bf16 LDWEIGHTS weights where they lie (`CoreMem::keep_weights`, [`weights_view`]):
/// the number of columns, or None where they cannot be (or nothing could be kept: a user
/// mapping of SBUF). `pe.w_bits` lends its buffer for the copy.
fn keep_in_place(
    mem: &mut CoreMem,
    ap: &AccessPattern,
    rows: usize,
    pe: &mut PeState,
) -> Result<Option<usize>, OpFault> {
    let Some((space, view, n)) = weights_view(mem, ap, Dtype::Bf16, rows)? else {
        return Ok(None);
    };
    let buf = std::mem::take(&mut pe.w_bits);
    Ok(mem.keep_weights(space, view, rows, n, buf).then_some(n))
}

/// Keep fp32 LDWEIGHTS weights where they lie (`CoreMem::keep_words`, [`weights_view`]): a
/// transpose's (`buf` is `pe.w`) or a fused LOW pass's (`pe.full`). The number of columns,
/// or None where they cannot be (or nothing could be kept: a user mapping of SBUF). `buf`
/// lends its allocation for the copy.
fn keep_words_in_place(
    mem: &mut CoreMem,
    ap: &AccessPattern,
    rows: usize,
    buf: &mut Vec<f32>,
) -> Result<Option<usize>, OpFault> {
    let Some((space, view, n)) = weights_view(mem, ap, Dtype::F32, rows)? else {
        return Ok(None);
    };
    Ok(mem
        .keep_words(space, view, rows, n, std::mem::take(buf))
        .then_some(n))
}

/// Whether an fp32 LDWEIGHTS pattern that descends in each partition (the compiler's weights
/// pattern, whose reverse is memory order) names exactly the values `full` holds, compared
/// where they lie: a pass pair's HIGH load need not copy weights it only checks. None where
/// the pattern has another shape (or the host stores f32 otherwise than little-endian).
fn same_weights_in_place(
    mem: &CoreMem,
    ap: &AccessPattern,
    rows: usize,
    full: &[f32],
) -> Result<Option<bool>, OpFault> {
    let sp = span(mem, ap, Dtype::F32, rows)?;
    if !sp.is_descending() || !cfg!(target_endian = "little") {
        return Ok(None);
    }
    let n = sp.len;
    if full.len() != rows * n || n == 0 {
        return Ok(Some(false));
    }
    let bytes = mem.bytes(sp.space());
    let same = full.chunks_exact(n).enumerate().all(|(p, want)| {
        // The row's lowest byte (`span` checked the whole row lies in its partition).
        let at = sp.row_base(p) + (1 - n as i64) * 4;
        usize::try_from(at)
            .ok()
            .and_then(|at| bytes.get(at..at + 4 * n))
            .is_some_and(|row| row == want.as_bytes())
    });
    Ok(Some(same))
}
