//! fp32 pass pairs: the compiler runs each fp32 matrix product as two MATMULs into one PSUM
//! accumulator, a LOW pass against `w − hi(w)` then a HIGH pass against `hi(w)`
//! (`docs/isa/cayman.md` §9). The model defers the LOW pass and, when the HIGH pass follows
//! with the same data, computes the pair as one SGEMM against `w`: half the host
//! multiply-adds. The cost model is untouched (both words report the same `elems`); only the
//! rounding of the sum changes (one rounded sum of `w·m` instead of two).
//!
//! Safety: the pair is fused only if the words that follow are its HIGH LDWEIGHTS (the loaded
//! `hi` bitwise equal to the `hi` of the LOW pass's values) and second MATMUL (same moving
//! pattern, its values bitwise equal to the LOW pass's, same destination, accumulating), with
//! no semaphore signal or wait inside the pair (another engine could otherwise see or change
//! the partial sum). Any other word that could see the deferred sum (one touching the
//! destination, a DMA, another PE word) first runs the LOW pass as it was issued (`lo(w)·M`
//! on the moving values the LOW pass read), so every mismatch gives the two-pass result bit
//! for bit.
//!
//! The LOW pass's weights are likewise read where LDWEIGHTS found them (`PeState::full_words`,
//! kept in `CoreMem`'s words slot, copied out before a write reaches them): no 64 KiB copy per
//! pair, and with the product shared, each thread reads the weight rows from where they lie
//! instead of from the copy in the loading thread's cache.
//!
//! The LOW pass's moving values: an fp32 tensor of whole rows in the space the product does
//! not write is left where it lies and kept by the core's memory (`CoreMem::keep`), which
//! copies it out before anything next writes that space; every write to SBUF or PSUM goes
//! through a `CoreMem` method that does so, and counts it (`CoreMem::writes`). So the common
//! pair, with nothing written between its passes, costs no snapshot and no comparison: the
//! HIGH LDWEIGHTS of the same pattern with its space's write count unchanged loads the LOW
//! values, and the second MATMUL finds the moving tensor not copied, so unchanged. Other
//! moving tensors are copied at the LOW pass and compared at the HIGH one, and so is every
//! SBUF one once user space has mapped SBUF (its writes are not counted:
//! `CoreMem::sees_all_writes`). `NEURON_EMU_PASS_PAIRS=0` turns fusion off (read when a core's PE state is created or
//! reset); so do installed device hooks (fault injection may write memory between the passes,
//! which a fused pair would not see: `Device::set_hooks`).

use super::*;

/// Environment switch: `0` computes every pass separately.
pub const ENV: &str = "NEURON_EMU_PASS_PAIRS";

/// Whether fusion is on for a new PE state.
pub(super) fn enabled_by_env() -> bool {
    std::env::var(ENV).map_or(true, |v| v.trim() != "0")
}

/// A deferred LOW pass waiting for its HIGH pass.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The HIGH LDWEIGHTS has been seen and matched.
    high_loaded: bool,
    ldw: (AccessPattern, Dtype, usize),
    src: AccessPattern,
    dst: AccessPattern,
    dspace: Space,
    cv: View,
    /// The destination's bytes per partition, for the overlap test.
    dext: (Space, u64, u64),
    /// The LOW pass's accumulate flag as SGEMM's beta (0: overwrite).
    beta: f32,
    k: usize,
    m: usize,
    nmov: usize,
    /// The moving tensor as the LOW pass read it, dense `k × nmov`, unless `in_place`. The
    /// unsplit weights stay in `PeState::full`: only a LOW LDWEIGHTS replaces them, and any
    /// LDWEIGHTS but the matched HIGH one settles the pair first.
    moving: Vec<f32>,
    /// The moving tensor is read where it lies (at this view of the space other than
    /// `dspace`), kept by the core's memory (`CoreMem::keep`): copied out there only if that
    /// space is written before the pair ends. The common case, nothing written in between,
    /// then costs neither a snapshot nor a comparison.
    in_place: Option<View>,
}

/// What the word after a fused LOW pass does.
pub(super) enum Resume {
    /// Execute the word normally.
    Run,
    /// The pair's second MATMUL: already computed.
    Done(Exec),
}

fn no_sync(ci: &CaymanInstr) -> bool {
    ci.header.wait_cond == 0 && ci.header.update_op == 0
}

fn wv(m: usize) -> View {
    View {
        off: 0,
        rs: 1,
        cs: m,
    }
}

fn dense(n: usize) -> View {
    View {
        off: 0,
        rs: n,
        cs: 1,
    }
}

/// The moving tensor of a MATMUL as dense `k × n` values (copied).
fn moving(
    mem: &CoreMem,
    src: &AccessPattern,
    k: usize,
    out: &mut Vec<f32>,
) -> Result<usize, OpFault> {
    match f32_view(mem, src, k)? {
        Some((sp, v, n)) => {
            let s = mem.f32s(sp);
            out.clear();
            for kk in 0..k {
                let row = v.off + kk * v.rs;
                if v.cs == 1 {
                    out.extend_from_slice(&s[row..row + n]);
                } else {
                    out.extend((0..n).map(|c| s[row + c * v.cs]));
                }
            }
            Ok(n)
        }
        None => gather(mem, src, Dtype::F32, k, out),
    }
}

/// Whether a MATMUL's moving tensor still holds `snap` (`k × n`, dense): compared where it
/// lies when it is an fp32 view, else gathered into `scratch` first.
fn moving_is(
    mem: &CoreMem,
    src: &AccessPattern,
    k: usize,
    n: usize,
    snap: &[f32],
    scratch: &mut Vec<f32>,
) -> Result<bool, OpFault> {
    match f32_view(mem, src, k)? {
        Some((sp, v, got)) if v.cs == 1 => {
            let s = mem.f32s(sp);
            Ok(got == n
                && snap.len() == k * n
                && (0..k).all(|kk| {
                    let row = v.off + kk * v.rs;
                    same_bits(&s[row..row + n], &snap[kk * n..(kk + 1) * n])
                }))
        }
        _ => {
            let got = moving(mem, src, k, scratch)?;
            Ok(got == n && same_bits(scratch, snap))
        }
    }
}

pub(super) fn same_bits(a: &[f32], b: &[f32]) -> bool {
    // As bytes: one memcmp instead of an element loop (the same bits either way).
    use zerocopy::IntoBytes;
    a.as_bytes() == b.as_bytes()
}

/// At a LOW-pass MATMUL whose in-place fp32 destination `dv` is known: defer it (`beta`
/// from the word's accumulate flag) and remember what must follow. Returns false (nothing
/// done; the caller runs the pass) when the word cannot start a pair.
#[allow(clippy::too_many_arguments)]
pub(super) fn start(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    src: AccessPattern,
    dst: AccessPattern,
    dspace: Space,
    cv: View,
    beta: f32,
) -> Result<bool, OpFault> {
    let (k, m) = (pe.k, pe.m);
    let Some(ldw) = pe.low_src else {
        return Ok(false);
    };
    // A completion signal on the first pass would let another engine read the partial sum.
    if !pe.fuse || ci.header.update_op != 0 || pe.full_len(mem) != k * m {
        return Ok(false);
    }
    let mut mv = std::mem::take(&mut pe.snapshot);
    let (nmov, in_place) = match f32_view(mem, &src, k)? {
        Some((sp, v, n)) if v.cs == 1 && sp != dspace && mem.sees_all_writes(sp) => {
            let buf = std::mem::take(&mut mv);
            if !mem.keep(sp, v, k, n, buf) {
                return Ok(false);
            }
            (n, Some(v))
        }
        _ => (moving(mem, &src, k, &mut mv)?, None),
    };
    let dext = match extent(mem, &dst, Dtype::F32, m) {
        Ok(d) => d,
        Err(e) => {
            mem.release();
            return Err(e);
        }
    };
    pe.pair = Some(Pending {
        high_loaded: false,
        ldw,
        src,
        dst,
        dspace,
        cv,
        dext,
        beta,
        k,
        m,
        nmov,
        moving: mv,
        in_place,
    });
    Ok(true)
}

/// `D = beta·D + w·M` on the moving tensor as the LOW pass read it: the whole pair (`w`
/// unsplit) or the LOW pass alone. `w`: dense weights, or None for the LOW pass's weights
/// kept where they lie (`PeState::full_words`; the caller has checked they are neither
/// copied out nor in the destination's space). Ends the keeping of a moving tensor read in
/// place; gives back the buffer for the next pair's snapshot.
fn product(p: Pending, w: Option<&[f32]>, mem: &mut CoreMem) -> (Result<(), OpFault>, Vec<f32>) {
    // The moving tensor's rows end being kept here (a copy, if one was made, is ours now).
    let kept = match p.in_place {
        Some(_) => mem.release(),
        None => None,
    };
    // Weights in place: row `kk` (a partition's `m` values) at `off + kk * rs`; the SGEMM's
    // A(j, kk) then lies at `off + j + kk * rs`.
    let wview = match w {
        Some(_) => None,
        None => mem.kept_words().map(|kp| {
            let v = kp.view();
            View {
                off: v.off,
                rs: 1,
                cs: v.rs,
            }
        }),
    };
    let (other, c) = mem.split_f32(p.dspace);
    let (a, av) = match (w, wview) {
        (Some(w), _) => (w, wv(p.m)),
        (None, Some(v)) => (other, v),
        (None, None) => (&[][..], wv(p.m)), // (no weights: refused below)
    };
    let (b, bv): (&[f32], View) = match (p.in_place, &kept) {
        (None, _) => (&p.moving, dense(p.nmov)),
        // Its space was written: the values as they were are in the copy.
        (Some(_), Some(kp)) if kp.copy().is_some() => (kp.copy().unwrap_or(&[]), dense(p.nmov)),
        (Some(v), _) => (other, v),
    };
    let done = (w.is_some() || wview.is_some())
        && crate::gemm::sgemm(p.m, p.k, p.nmov, a, av, b, bv, p.beta, c, p.cv);
    let buf = match p.in_place {
        None => p.moving,
        Some(_) => kept.map(|kp| kp.into_buffer()).unwrap_or_default(),
    };
    let r = if done {
        Ok(())
    } else {
        Err(OpFault::bad("MATMUL operand shapes do not fit"))
    };
    (r, buf)
}

/// The pair's weights for [`product`]: where they lie (None) while they are kept there
/// unwritten and outside the destination's space; else brought into `pe.full` (Some).
fn pair_weights<'a>(
    p: &Pending,
    mem: &mut CoreMem,
    pe: &'a mut PeState,
) -> Result<Option<&'a [f32]>, OpFault> {
    let in_place = pe.full_words
        && mem
            .kept_words()
            .is_some_and(|kp| kp.copy().is_none() && kp.space != p.dspace);
    if in_place {
        return Ok(None);
    }
    pe.unkeep_full(mem)?;
    Ok(Some(&pe.full[..]))
}

/// Run the deferred LOW pass as it was issued: the two-pass state, bit for bit.
fn settle(p: Pending, mem: &mut CoreMem, pe: &mut PeState) -> Result<(), OpFault> {
    pe.settled += 1;
    tracing::debug!(target: "devmodel", "pass pair: LOW pass run alone ({} so far)", pe.settled);
    // The array's LOW weights, exactly as LDWEIGHTS mode 1 computes them.
    pe.unkeep_full(mem)?;
    let lo: Vec<f32> = pe.full.iter().map(|v| v - hi_part(*v)).collect();
    let (r, buf) = product(p, Some(&lo), mem);
    pe.snapshot = buf;
    r
}

/// Before any word while a LOW pass is deferred.
pub(super) fn resume(
    ci: &CaymanInstr,
    mem: &mut CoreMem,
    pe: &mut PeState,
    scratch: &mut Vec<f32>,
) -> Result<Resume, OpFault> {
    let Some(p) = pe.pair.take() else {
        return Ok(Resume::Run);
    };
    let u = |f: &str| ci.u(f).unwrap_or(0);
    match ci.opcode {
        Opcode::Ldweights
            if !p.high_loaded
                && no_sync(ci)
                && u("fp32_mode") == 2
                && u("transpose") == 0
                && ci.ap("src") == Some(p.ldw.0)
                && ci.dtype("src_dtype") == Some(p.ldw.1)
                && u("rows") as usize == p.ldw.2 =>
        {
            // Matched structurally; the loaded values are checked by `high_loaded`.
            pe.pair = Some(p);
            Ok(Resume::Run)
        }
        Opcode::Matmul
            if p.high_loaded
                && ci.header.wait_cond == 0
                && u("acc_flags") & 1 == 0
                && ci.ap("src") == Some(p.src)
                && ci.dtype("src_dtype") == Some(Dtype::F32)
                && ci.ap("dst") == Some(p.dst)
                && pe.k == p.k
                && pe.m == p.m
                && !pe.transpose =>
        {
            let same = match (p.in_place, mem.kept()) {
                (None, _) => moving_is(mem, &p.src, p.k, p.nmov, &p.moving, scratch)?,
                // Nothing has written the moving tensor's space since the LOW pass.
                (Some(_), Some(kp)) if kp.copy().is_none() => true,
                (Some(_), Some(kp)) => {
                    let copy = kp.copy().unwrap_or(&[]);
                    moving_is(mem, &p.src, p.k, p.nmov, copy, scratch)?
                }
                (Some(_), None) => false,
            };
            if same {
                let (nmov, macs) = (p.nmov, (p.m * p.k * p.nmov) as u64);
                let w = pair_weights(&p, mem, pe)?;
                let (r, buf) = product(p, w, mem);
                pe.snapshot = buf;
                r?;
                pe.fresh = false;
                pe.fused_pairs += 1;
                tracing::trace!(target: "devmodel", "pass pair fused ({} so far)", pe.fused_pairs);
                return Ok(Resume::Done(Exec::Done {
                    elems: nmov as u64 * 4,
                    sgemm_macs: 0,
                    amx_macs: 0,
                    dot_macs: 0,
                    math_macs: macs,
                    onchip_bytes: 0,
                }));
            }
            settle(p, mem, pe)?;
            Ok(Resume::Run)
        }
        // PE words outside the pair, and DMAs (their targets are resolved later), end it.
        Opcode::Ldweights | Opcode::Matmul | Opcode::DmaDirect2d => {
            settle(p, mem, pe)?;
            Ok(Resume::Run)
        }
        _ => {
            let (sp, lo, hi) = p.dext;
            let touches = operands(ci, mem, pe)
                .iter()
                .any(|o| o.space == sp && o.lo < hi && lo < o.hi);
            if touches {
                settle(p, mem, pe)?;
            } else {
                pe.pair = Some(p);
            }
            Ok(Resume::Run)
        }
    }
}

/// After a HIGH LDWEIGHTS that `resume` let through: keep the pair only if the array now
/// holds exactly the `hi(w)` of the LOW pass's values (`same_values`: it loaded the LOW
/// pass's very values, so it does).
pub(super) fn high_loaded(
    mem: &mut CoreMem,
    pe: &mut PeState,
    same_values: bool,
) -> Result<(), OpFault> {
    let Some(mut p) = pe.pair.take() else {
        return Ok(());
    };
    if !same_values {
        pe.materialize(mem)?;
        pe.unkeep_full(mem)?;
    }
    let hi_matches = same_values
        || (pe.w.len() == pe.full.len()
            && pe
                .w
                .iter()
                .zip(&pe.full)
                .all(|(w, v)| w.to_bits() == hi_part(*v).to_bits()));
    if hi_matches {
        p.high_loaded = true;
        pe.pair = Some(p);
        Ok(())
    } else {
        settle(p, mem, pe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Scratch;
    use neuron_isa::cayman::Namespace;

    const K: usize = 128;
    const M: usize = 96;
    const N: usize = 64;
    const X: u32 = 0x1000; // weights: K partitions x M fp32
    const MOV: u32 = 0x8000; // moving: K partitions x N fp32
    const D: u32 = 0x200_0000; // PSUM destination: M partitions x N fp32
    const SEED: u64 = 7;

    fn ap3(addr: u32, step: i16, num: u16) -> Vec<u8> {
        let mut v = addr.to_le_bytes().to_vec();
        for s in [step, 0, 0] {
            v.extend_from_slice(&s.to_le_bytes());
        }
        for n in [num, 1, 1] {
            v.extend_from_slice(&n.to_le_bytes());
        }
        v
    }

    fn word(op: u8, fields: &[(usize, Vec<u8>)], update: bool) -> CaymanInstr {
        let mut w = [0u8; 64];
        w[0] = op;
        w[1] = 0x10;
        if update {
            (w[6], w[7]) = (0x13, 5);
        }
        for (off, b) in fields {
            w[*off..*off + b.len()].copy_from_slice(b);
        }
        CaymanInstr::decode(Namespace::Loaded, &w)
    }

    /// LDWEIGHTS of the K x M weights at X in `mode` (1 LOW, 2 HIGH); reversed pattern.
    fn ldw(mode: u8) -> CaymanInstr {
        let src = ap3(X + 4 * (M as u32 - 1), -1, M as u16);
        word(
            0x01,
            &[(16, src), (32, vec![0x0a, mode, 0]), (38, vec![K as u8])],
            false,
        )
    }

    fn matmul(acc: u8, dst: u32, update: bool) -> CaymanInstr {
        word(
            0x02,
            &[
                (16, ap3(MOV, 1, N as u16)),
                (32, vec![0x0a, 3, 0]),
                (43, vec![acc]),
                (48, ap3(dst, 1, N as u16)),
            ],
            update,
        )
    }

    /// MEMSET of `num` fp32 zeros per partition at `addr` over `ch` partitions.
    fn memset(addr: u32, ch: u8, num: u16) -> CaymanInstr {
        let mut dst = addr.to_le_bytes().to_vec();
        for s in [1i16, 0, 0, 0] {
            dst.extend_from_slice(&s.to_le_bytes());
        }
        for n in [num, 1, 1, 1] {
            dst.extend_from_slice(&n.to_le_bytes());
        }
        word(0x49, &[(32, vec![0x0a, 0, ch]), (44, dst)], false)
    }

    /// Deterministic values with full 24-bit mantissas, signs and a spread of magnitudes.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let u = (s >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                let e = ((s >> 8) % 9) as i32 - 4;
                (u - 0.5) * 2f32.powi(e)
            })
            .collect()
    }

    fn put(m: &mut CoreMem, sp: Space, addr: u32, parts: usize, v: &[f32]) {
        let stride = if sp == Space::Sbuf {
            m.sbuf_stride
        } else {
            m.psum_stride
        };
        let per = v.len() / parts;
        let bytes = m.bytes_mut(sp);
        for (i, x) in v.iter().enumerate() {
            let at = (i / per) * stride + (addr as usize & 0xff_ffff) + 4 * (i % per);
            bytes[at..at + 4].copy_from_slice(&x.to_le_bytes());
        }
    }

    fn dest(m: &CoreMem, addr: u32) -> Vec<f32> {
        let b = m.bytes(Space::Psum);
        (0..M * N)
            .map(|i| {
                let at = (i / N) * m.psum_stride + (addr as usize & 0xff_ffff) + 4 * (i % N);
                f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
            })
            .collect()
    }

    struct Run {
        mem: CoreMem,
        pe: PeState,
        /// `Exec::Done::math_macs` summed over the words.
        math: u64,
        /// `Exec::Done::onchip_bytes` summed over the words.
        onchip: u64,
        /// The LOW pass's weights were still read where they lie after the last word.
        weights_kept: bool,
    }

    /// Fill weights, moving data and the destination, then run `words` with fusion on or off.
    fn run(seed: u64, fuse: bool, words: &[CaymanInstr]) -> Run {
        run_with(seed, fuse, words, false)
    }

    /// [`run`], with SBUF mapped by user space first where `mapped`.
    fn run_with(seed: u64, fuse: bool, words: &[CaymanInstr], mapped: bool) -> Run {
        let mut mem = CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        if mapped {
            let _ = mem.sbuf_ptr();
        }
        put(&mut mem, Space::Sbuf, X, K, &values(seed, K * M));
        put(&mut mem, Space::Sbuf, MOV, K, &values(seed + 1, K * N));
        put(&mut mem, Space::Psum, D, M, &values(seed + 2, M * N));
        let mut pe = PeState {
            fuse,
            ..PeState::default()
        };
        let (mut scratch, mut regs, mut math, mut onchip) = (Scratch::default(), [0u32; 256], 0, 0);
        for w in words {
            if let Exec::Done {
                math_macs,
                onchip_bytes,
                ..
            } = execute(w, &mut mem, &mut pe, &mut scratch, &mut regs).expect("word runs")
            {
                math += math_macs;
                onchip += onchip_bytes;
            }
        }
        // The LOW weights as values, for the checks (kept in SBUF where they lie otherwise).
        let weights_kept = pe.full_words;
        pe.unkeep_full(&mut mem).expect("kept weights");
        Run {
            weights_kept,
            mem,
            pe,
            math,
            onchip,
        }
    }

    fn pair() -> Vec<CaymanInstr> {
        vec![ldw(1), matmul(1, D, false), ldw(2), matmul(0, D, false)]
    }

    /// The bound on |fused − two-pass| per element: both sums are within γ·Σ|w||m| of the
    /// exact value (Higham, Thm 3.5: γ_n = n·u/(1 − n·u), u = 2⁻²⁴; the LOW and HIGH parts
    /// have the sign of w, so Σ|lo||m| + Σ|hi||m| = Σ|w||m|). The two-pass sum chains K + 1
    /// terms per pass, so γ_{2K+2} bounds both together with room.
    fn bound(r: &Run) -> Vec<f64> {
        let u = 2f64.powi(-24);
        let n = (2 * K + 2) as f64;
        let g = 2.0 * n * u / (1.0 - n * u);
        let w = &r.pe.full;
        let mov: Vec<f32> = values(SEED + 1, K * N);
        (0..M * N)
            .map(|i| {
                let (j, c) = (i / N, i % N);
                let s: f64 = (0..K)
                    .map(|kk| (w[kk * M + j] as f64 * mov[kk * N + c] as f64).abs())
                    .sum();
                g * s
            })
            .collect()
    }

    fn assert_close(a: &[f32], b: &[f32], bound: &[f64]) {
        for (i, ((x, y), e)) in a.iter().zip(b).zip(bound).enumerate() {
            let d = (*x as f64 - *y as f64).abs();
            assert!(d <= *e, "element {i}: {x} vs {y}, |diff| {d} > bound {e}");
        }
    }

    #[test]
    fn a_pending_pair_is_settled_before_a_reader_of_the_destination() {
        // LOW pass, then a word that writes one destination element: the deferred LOW pass
        // runs first, so the destination is bit for bit what it is without fusion.
        let words = [ldw(1), matmul(1, D, false), memset(D, 1, 1)];
        let (two, one) = (run(SEED, false, &words), run(SEED, true, &words));
        assert_eq!((one.pe.fused_pairs, one.pe.settled), (0, 1));
        assert_eq!(dest(&one.mem, D), dest(&two.mem, D));
    }

    #[test]
    fn a_fused_pair_equals_the_two_passes_within_the_gemm_bound() {
        let mut two = run(SEED, false, &pair());
        let mut one = run(SEED, true, &pair());
        assert_eq!((two.pe.fused_pairs, one.pe.fused_pairs), (0, 1));
        assert_eq!(one.pe.settled, 0);
        let (a, b) = (dest(&one.mem, D), dest(&two.mem, D));
        assert_close(&a, &b, &bound(&one));
        // The weights left in the array are the HIGH pass's, as without fusion.
        let (mut one_pe, mut two_pe) = (one.pe.clone(), two.pe.clone());
        one_pe.materialize(&mut one.mem).expect("no weights kept");
        two_pe.materialize(&mut two.mem).expect("no weights kept");
        assert_eq!(one_pe.w, two_pe.w);
    }

    /// The kernel's math counts a pass pair once (K·M·N), fused or not, and interrupted
    /// (its LOW pass settled alone) or not; a plain fp32 product counts once too.
    #[test]
    fn a_pass_pair_counts_its_math_once() {
        let once = (K * M * N) as u64;
        let mut split = pair();
        split.insert(2, memset(D, 1, 1));
        for (what, words) in [("pair", pair()), ("interrupted", split)] {
            for fuse in [true, false] {
                assert_eq!(run(SEED, fuse, &words).math, once, "{what}, fuse {fuse}");
            }
        }
        let plain = [ldw(0), matmul(1, D, false)];
        assert_eq!(run(SEED, true, &plain).math, once);
    }

    /// The on-chip bytes of a pass pair are its HIGH pass's, fused or not: the weights
    /// (K partitions x M fp32), the moving tensor (K x N) and the destination (M x N), each
    /// once; a plain fp32 product the same; a MEMSET its destination's bytes.
    #[test]
    fn a_pass_pair_counts_its_operand_bytes_once() {
        crate::cayman_exec::count_onchip(true);
        let once = (4 * (K * M + K * N + M * N)) as u64;
        for fuse in [true, false] {
            assert_eq!(run(SEED, fuse, &pair()).onchip, once, "fuse {fuse}");
        }
        let plain = [ldw(0), matmul(1, D, false)];
        assert_eq!(run(SEED, true, &plain).onchip, once);
        // 3 partitions x 10 fp32.
        assert_eq!(run(SEED, true, &[memset(D, 3, 10)]).onchip, 3 * 10 * 4);
        // Interrupted by that MEMSET: the pair's bytes and the MEMSET's.
        let mut split = pair();
        split.insert(2, memset(D, 1, 1));
        assert_eq!(run(SEED, true, &split).onchip, once + 4);
    }

    #[test]
    fn an_accumulating_first_pass_keeps_the_old_sum() {
        let words = [ldw(1), matmul(0, D, false), ldw(2), matmul(0, D, false)];
        let (two, one) = (run(SEED, false, &words), run(SEED, true, &words));
        assert_eq!(one.pe.fused_pairs, 1);
        let old: f64 = values(SEED + 2, M * N)
            .iter()
            .map(|v| v.abs() as f64)
            .fold(0.0, f64::max);
        let b: Vec<f64> = bound(&one).iter().map(|e| e + old * 4e-7).collect();
        assert_close(&dest(&one.mem, D), &dest(&two.mem, D), &b);
    }

    #[test]
    fn near_pairs_are_not_fused() {
        let other = D + 4 * N as u32;
        let cases: Vec<(&str, Vec<CaymanInstr>, u64)> = vec![
            // the first pass signals completion: another engine may read the partial sum
            (
                "signal",
                vec![ldw(1), matmul(1, D, true), ldw(2), matmul(0, D, false)],
                0,
            ),
            // the second pass writes elsewhere
            (
                "dst",
                vec![ldw(1), matmul(1, D, false), ldw(2), matmul(0, other, false)],
                1,
            ),
            // the second pass starts a new group instead of accumulating
            (
                "acc",
                vec![ldw(1), matmul(1, D, false), ldw(2), matmul(1, D, false)],
                1,
            ),
            // the moving tensor is rewritten between the passes
            (
                "moving",
                vec![
                    ldw(1),
                    matmul(1, D, false),
                    ldw(2),
                    memset(MOV, K as u8, 8),
                    matmul(0, D, false),
                ],
                1,
            ),
            // the weights are rewritten before the HIGH load
            (
                "weights",
                vec![
                    ldw(1),
                    matmul(1, D, false),
                    memset(X, K as u8, 4),
                    ldw(2),
                    matmul(0, D, false),
                ],
                1,
            ),
            // a word touches the destination between the passes
            (
                "dst touched",
                vec![
                    ldw(1),
                    matmul(1, D, false),
                    memset(D, 1, 1),
                    ldw(2),
                    matmul(0, D, false),
                ],
                1,
            ),
            // a second LOW load instead of the HIGH one
            (
                "two lows",
                vec![ldw(1), matmul(1, D, false), ldw(1), matmul(0, D, false)],
                2,
            ),
        ];
        for (what, mut words, settled) in cases {
            // A word that reads or writes the destination settles a pending pair first.
            words.push(memset(D, 1, 1));
            let two = run(SEED, false, &words);
            let one = run(SEED, true, &words);
            assert_eq!(one.pe.fused_pairs, 0, "{what}: fused");
            assert_eq!(one.pe.settled, settled, "{what}: settled");
            // Not fused: the same words, the same bits.
            assert_eq!(dest(&one.mem, D), dest(&two.mem, D), "{what}");
        }
    }

    /// A HIGH load that names the LOW pass's very values is recognised where they lie: the
    /// array is left as `hi(full)`, computed only if a pass must run alone; rewritten
    /// weights are loaded (and `hi(w)` of the gathered values computed) instead.
    #[test]
    fn a_high_load_of_the_low_values_is_recognised_in_place() {
        let words = pair();
        let r = run(SEED, true, &words[..3]);
        assert_eq!(r.pe.w_from_full, Some(super::super::pe::Split::Hi));
        let changed = [ldw(1), matmul(1, D, false), memset(X, K as u8, 4), ldw(2)];
        let r = run(SEED, true, &changed);
        assert_eq!(r.pe.w_from_full, None);
    }

    /// With SBUF mapped by user space (writes the model does not count), a pair snapshots
    /// and compares as before: it still fuses, to the same bits, and a rewritten moving
    /// tensor still settles it.
    #[test]
    fn a_pair_under_a_user_mapping_snapshots_and_compares() {
        let (plain, mapped) = (
            run(SEED, true, &pair()),
            run_with(SEED, true, &pair(), true),
        );
        assert_eq!((mapped.pe.fused_pairs, mapped.pe.settled), (1, 0));
        assert_eq!(dest(&mapped.mem, D), dest(&plain.mem, D));
        assert!(mapped.mem.kept().is_none(), "nothing kept in a mapped SBUF");
        let moved = [
            ldw(1),
            matmul(1, D, false),
            ldw(2),
            memset(MOV, K as u8, 8),
            matmul(0, D, false),
        ];
        let (two, one) = (run(SEED, false, &moved), run_with(SEED, true, &moved, true));
        assert_eq!((one.pe.fused_pairs, one.pe.settled), (0, 1));
        assert_eq!(dest(&one.mem, D), dest(&two.mem, D));
    }

    /// The LOW pass's weights are read where LDWEIGHTS found them (no 64 KiB copy): kept
    /// through the pair, and the fused product's bits those of the same pair with the
    /// weights copied (SBUF mapped, so nothing can be kept). Weights rewritten after the
    /// HIGH load are read from the copy made before the write: the array's values, as if
    /// nothing had been written.
    #[test]
    fn pair_weights_are_read_where_they_lie() {
        let (plain, mapped) = (
            run(SEED, true, &pair()),
            run_with(SEED, true, &pair(), true),
        );
        assert!(plain.weights_kept, "weights kept where they lie");
        assert!(!mapped.weights_kept, "nothing kept in a mapped SBUF");
        assert_eq!((plain.pe.fused_pairs, plain.pe.settled), (1, 0));
        assert_eq!(dest(&plain.mem, D), dest(&mapped.mem, D));
        let rewritten = [
            ldw(1),
            matmul(1, D, false),
            ldw(2),
            memset(X, K as u8, 4),
            matmul(0, D, false),
        ];
        let late = run(SEED, true, &rewritten);
        assert_eq!((late.pe.fused_pairs, late.pe.settled), (1, 0));
        assert_eq!(dest(&late.mem, D), dest(&plain.mem, D));
    }

    #[test]
    fn unrelated_words_between_the_passes_keep_the_pair() {
        let words = [
            ldw(1),
            matmul(1, D, false),
            memset(0x2_0000, K as u8, 16), // SBUF far from X and the moving tensor
            ldw(2),
            memset(D + 0x1000, 4, 16), // another PSUM bank
            matmul(0, D, false),
        ];
        let one = run(SEED, true, &words);
        assert_eq!((one.pe.fused_pairs, one.pe.settled), (1, 0));
    }
}
