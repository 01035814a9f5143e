//! bf16 × bf16 products on AVX512-BF16 (`VDPBF16PS`) with the SGEMM's bits, for the panel
//! kernel (`panels`): where a host runs `VDPBF16PS` at twice the multiply-adds of fp32 FMA
//! (AMD Zen 4/5), a bf16 weight load against a bf16 moving tensor costs half as much.
//!
//! Why the bits are the same. `VDPBF16PS` adds two bf16 products to an fp32 lane, the
//! odd-numbered one first, each add rounded to nearest even, with bf16 inputs that are
//! subnormal read as zero and subnormal results flushed to zero. A product of two bf16 is
//! exact in fp32, so each step is what one fused multiply-add gives; putting row `2t` of K in
//! the odd (upper) half and `2t + 1` in the lower makes the chain run in K order from +0, as
//! the SGEMM's does (`narrow`). Only the flushing could differ, and [`exact`] proves it never
//! happens for a panel before the panel runs: no subnormal, infinite or NaN input, every
//! nonzero partial sum at least 2⁻¹²⁶ (all are multiples of the smallest products' last
//! bit), none larger than fp32 holds. A panel it cannot prove runs on the fp32 kernel. The
//! CPU's own instruction is checked against that chain once per process ([`available`]):
//! a host whose `VDPBF16PS` sums otherwise keeps the fp32 kernel.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// Columns of C (and B) a panel holds: two AVX-512 registers of fp32 sums.
const NR: usize = super::panels::NR;
/// Rows of C one block sums.
const MR: usize = super::panels::MR;
/// The deepest K a product may have (one SGEMM K block, `narrow::SGEMM_KC`).
const MAX_K: usize = super::narrow::SGEMM_KC;

/// Whether the CPU has AVX-512F, AVX-512BW and AVX512-BF16 (detected at run time).
pub fn cpu_has_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this process may run the kernel: the CPU has it and its `VDPBF16PS` gave the
/// fp32 chain's bits on a product that tells the orders apart ([`self_check`], once).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let ok = cpu_has_dot() && self_check();
        if cpu_has_dot() && !ok {
            tracing::warn!(
                "VDPBF16PS does not sum as two fused multiply-adds on this CPU: \
                 bf16 products stay on the fp32 kernel"
            );
        }
        ok
    })
}

/// Whether `auto` picks the kernel: hosts where it is faster than fp32 FMA. AMD's Zen 4 and
/// 5 issue `VDPBF16PS` at FMA's rate with twice the multiply-adds; Intel's cores issue it at
/// half FMA's rate, no gain (`docs/performance.md`, issue 16), and have AMX where they have
/// more. `NEURON_EMU_GEMM=dot` forces it where [`available`].
pub fn preferred() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Read once: under a hypervisor every CPUID is a trap to it, and each core's
        // state asks this when it is made (every device of a fault campaign).
        static AMD: OnceLock<bool> = OnceLock::new();
        *AMD.get_or_init(|| {
            use std::arch::x86_64::__cpuid;
            let v = __cpuid(0);
            let vendor = [v.ebx, v.edx, v.ecx];
            vendor == [0x6874_7541, 0x6974_6e65, 0x444d_4163] // "AuthenticAMD"
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Exponent fields (biased, 0-255) over an operand's values: the least of its nonzero
/// values (255 if all are zero), the greatest of all (0 if all are zero). A subnormal has
/// field 0 and so makes `min` 0; an infinity or NaN makes `max` 255.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exponents {
    pub min: u16,
    pub max: u16,
}

impl Exponents {
    /// No values seen yet.
    pub const NONE: Exponents = Exponents { min: 255, max: 0 };

    fn join(self, o: Exponents) -> Exponents {
        Exponents {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }

    /// These and `bits`'s (a bf16).
    pub fn with(self, bits: u16) -> Exponents {
        let e = (bits >> 7) & 0xff;
        Exponents {
            min: if bits & 0x7fff != 0 {
                self.min.min(e)
            } else {
                self.min
            },
            max: self.max.max(e),
        }
    }
}

/// Whether a K-deep chain of fused multiply-adds from +0 over bf16 operands with these
/// exponents gives the same bits with subnormals flushed (as `VDPBF16PS` does): no
/// subnormal, infinite or NaN input; every product (hence every partial sum) a multiple of
/// at least 2⁻¹²⁶, so none is subnormal; `k` products of the largest magnitudes below 2¹²⁶
/// (a factor of two to spare for the rounding of partial sums), so none overflows.
///
/// A bf16 of biased exponent `e` is a multiple of 2^(e − 134) and below 2^(e − 126); a
/// product's last bit is then at least 2^(ea + eb − 268), which is ≥ 2⁻¹²⁶ where `ea + eb
/// ≥ 142`; a sum of `k` products is below 2^(ea + eb − 252 + ⌈log₂ k⌉).
pub fn exact(a: Exponents, b: Exponents, k: usize) -> bool {
    let all_zero = |x: Exponents| x.max == 0 && x.min == 255;
    if all_zero(a) || all_zero(b) {
        return a.max < 255 && b.max < 255; // every product ±0 exactly
    }
    let log2k = usize::BITS - k.saturating_sub(1).leading_zeros();
    a.min >= 1
        && b.min >= 1
        && a.max <= 254
        && b.max <= 254
        && u32::from(a.min) + u32::from(b.min) >= 142
        && u32::from(a.max) + u32::from(b.max) + log2k <= 378
}

/// The weights of one LDWEIGHTS as `VDPBF16PS` takes them, packed once per load: for each
/// pair of K rows `t` and output row `j`, `bf16(A[2t][j]) << 16 | bf16(A[2t + 1][j])` (a
/// zero lower half past an odd K), with their exponents. Empty where a weight is not a bf16
/// value.
#[derive(Debug, Clone, Default)]
pub struct PackedA {
    pairs: Vec<u32>,
    m: usize,
    k: usize,
    exps: Option<Exponents>,
    /// Packing was tried since the load (it may have found the weights not bf16).
    tried: bool,
}

impl PackedA {
    /// Pack the `m x k` weights `w` (PE layout: row `kk` at `kk * m`) unless packed since the
    /// last [`Self::clear`]; false if they cannot be (a value that is not a bf16, a shape
    /// too large). Only where [`available`].
    pub fn ensure(&mut self, w: &[f32], m: usize, k: usize) -> bool {
        if self.tried && self.m == m && self.k == k {
            return self.exps.is_some();
        }
        self.tried = true;
        self.m = m;
        self.k = k;
        self.exps = None;
        if m == 0 || k == 0 || k > MAX_K || w.len() < m.saturating_mul(k) {
            return false;
        }
        let pairs = k.div_ceil(2);
        self.pairs.clear();
        self.pairs.resize(pairs * m, 0);
        let zeros = vec![0f32; m];
        let mut exps = Exponents::NONE;
        for (t, out) in self.pairs.chunks_exact_mut(m).enumerate() {
            let hi = &w[2 * t * m..][..m];
            let lo = if 2 * t + 1 < k {
                &w[(2 * t + 1) * m..][..m]
            } else {
                &zeros[..]
            };
            match pack_a_row(hi, lo, out) {
                Some(e) => exps = exps.join(e),
                None => return false,
            }
        }
        self.exps = Some(exps);
        true
    }

    /// K of the weights last packed.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Forget the weights (a new LDWEIGHTS).
    pub fn clear(&mut self) {
        self.tried = false;
        self.exps = None;
    }

    /// The packed weights for a product's operands (`panels::Operands::pairs`), if packed.
    pub(super) fn view(&self) -> Option<Pairs> {
        Some(Pairs {
            p: self.pairs.as_ptr(),
            m: self.m,
            exps: self.exps?,
        })
    }
}

/// `C = A·B + β·C` on dense operands, on one thread, through the panel kernel with `a`'s
/// pairs (A `k x m` as `a` packed it, B `k x n` bf16 bits row-major, C `m x n` row-major):
/// the host rate `bench real` measures for bf16. False (nothing written) where the kernel
/// or this path does not take the product or a slice is short; panels [`exact`] cannot
/// prove run on the fp32 kernel, which reads A from `w` (the weights `a` packed).
pub fn dense(n: usize, w: &[f32], a: &PackedA, b: &[u16], beta: f32, c: &mut [f32]) -> bool {
    let (m, k) = (a.m, a.k);
    let fits = |len: usize, r: usize, cl: usize| r.checked_mul(cl).is_some_and(|x| x <= len);
    let Some(pairs) = a.view() else {
        return false;
    };
    if !available()
        || !super::panels::applies(m, k, n, 1, 1)
        || !fits(w.len(), k, m)
        || !fits(b.len(), k, n)
        || !fits(c.len(), m, n)
    {
        return false;
    }
    let op = super::panels::Operands {
        a: w.as_ptr(),
        acs: m,
        b: super::panels::Moving::Bf16(b.as_ptr()),
        brs: n,
        bcs: 1,
        c: c.as_mut_ptr(),
        crs: n,
        pairs: Some(pairs),
    };
    // SAFETY: `applies` and `available` held, the slices hold every element named (checked
    // above), `a` packs an `m x k` A; `c` is an exclusive borrow, apart from `w` and `b`.
    unsafe { super::panels::product(m, k, n, &op, beta) };
    true
}

/// One pair row of [`PackedA`]: `out[j] = bf16(hi[j]) << 16 | bf16(lo[j])`, and the
/// exponents of its values; None if a value is not a bf16 (low 16 bits set). AVX-512 where
/// the host has it (16 weights a step: this runs once per bf16 LDWEIGHTS).
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
fn pack_a_row(hi: &[f32], lo: &[f32], out: &mut [u32]) -> Option<Exponents> {
    let n = out.len().min(hi.len()).min(lo.len());
    let mut done = 0;
    let mut exps = Exponents::NONE;
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
        done = n / 16 * 16;
        // SAFETY: the CPU has the features; the three slices hold `done` elements.
        exps = unsafe { pack_a_avx512(&hi[..done], &lo[..done], &mut out[..done])? };
    }
    for j in done..n {
        let (h, l) = (hi[j].to_bits(), lo[j].to_bits());
        if (h | l) & 0xffff != 0 {
            return None;
        }
        out[j] = (h & 0xffff_0000) | (l >> 16);
        exps = exps.with((h >> 16) as u16).with((l >> 16) as u16);
    }
    Some(exps)
}

/// [`pack_a_row`] on whole 16-lane steps.
///
/// # Safety
/// AVX-512F and AVX-512BW; the slices have the same length, a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_a_avx512(hi: &[f32], lo: &[f32], out: &mut [u32]) -> Option<Exponents> {
    use std::arch::x86_64::*;
    let (low16, top16) = (_mm512_set1_epi32(0xffff), _mm512_set1_epi32(-65536));
    let mut low = _mm512_setzero_si512();
    let mut e = Exps16::new();
    for j in (0..out.len()).step_by(16) {
        // SAFETY: `j + 16 <= len` for all three slices (the caller's contract).
        unsafe {
            let h = _mm512_loadu_si512(hi.as_ptr().add(j).cast());
            let l = _mm512_loadu_si512(lo.as_ptr().add(j).cast());
            low = _mm512_or_si512(low, _mm512_and_si512(_mm512_or_si512(h, l), low16));
            let pair = _mm512_or_si512(_mm512_and_si512(h, top16), _mm512_srli_epi32::<16>(l));
            e.add(pair);
            _mm512_storeu_si512(out.as_mut_ptr().add(j).cast(), pair);
        }
    }
    // SAFETY: AVX-512F (the caller's contract).
    let clean = _mm512_test_epi32_mask(low, low) == 0;
    clean.then(|| e.get())
}

/// Exponents of bf16 lanes, 32 at a time (the 16-bit words of a 512-bit register).
#[cfg(target_arch = "x86_64")]
struct Exps16 {
    min: std::arch::x86_64::__m512i,
    max: std::arch::x86_64::__m512i,
}

#[cfg(target_arch = "x86_64")]
impl Exps16 {
    #[target_feature(enable = "avx512f,avx512bw")]
    fn new() -> Exps16 {
        use std::arch::x86_64::*;
        Exps16 {
            min: _mm512_set1_epi16(255),
            max: _mm512_setzero_si512(),
        }
    }

    /// Take in the 32 bf16s of `v`.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn add(&mut self, v: std::arch::x86_64::__m512i) {
        use std::arch::x86_64::*;
        let e = _mm512_and_si512(_mm512_srli_epi16::<7>(v), _mm512_set1_epi16(0xff));
        let nonzero = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7fff));
        self.min = _mm512_mask_min_epu16(self.min, nonzero, self.min, e);
        self.max = _mm512_max_epu16(self.max, e);
    }

    #[target_feature(enable = "avx512f,avx512bw")]
    fn get(&self) -> Exponents {
        use std::arch::x86_64::*;
        let (mut lmin, mut lmax) = ([0u16; 32], [0u16; 32]);
        // SAFETY: 64-byte stores into 64-byte arrays.
        unsafe {
            _mm512_storeu_si512(lmin.as_mut_ptr().cast(), self.min);
            _mm512_storeu_si512(lmax.as_mut_ptr().cast(), self.max);
        }
        Exponents {
            min: lmin.iter().copied().fold(255, u16::min),
            max: lmax.iter().copied().fold(0, u16::max),
        }
    }
}

/// Packed weights as a product reads them: pair `t` of output row `j` at `p + t * m + j`.
#[derive(Clone, Copy)]
pub(super) struct Pairs {
    pub(super) p: *const u32,
    pub(super) m: usize,
    pub(super) exps: Exponents,
}

impl Pairs {
    /// The same weights from output row `r0` on.
    pub(super) fn at_row(self, r0: usize) -> Pairs {
        Pairs {
            p: self.p.wrapping_add(r0),
            ..self
        }
    }
}

/// One 32-column panel of `C = A·B + β·C` (`m` rows, K `k`) from bf16 B: element `(kk, c)`
/// at `b + kk * brs + c * bcs`, C's `(j, c)` at `c + j * crs`. Packs the panel into `buf`
/// and runs it if [`exact`] holds for it and `a`; false (nothing written) if not.
///
/// # Safety
/// [`available`]; `m` a multiple of `panels::MR`, `1 <= k <= MAX_K`; every element named
/// lies in live memory, C's apart from A's and B's and accessed by nothing else meanwhile;
/// `a` packs the product's `m x k` weights.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn panel(
    m: usize,
    k: usize,
    a: Pairs,
    b: *const u16,
    brs: usize,
    bcs: usize,
    c: *mut f32,
    crs: usize,
    beta: f32,
    buf: &mut [u32; MAX_K / 2 * NR],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract.
    unsafe {
        let exps = pack_b(k, b, brs, bcs, buf);
        if !exact(a.exps, exps, k) {
            return false;
        }
        blocks(m, k, a, buf, c, crs, beta);
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (m, k, a, b, brs, bcs, c, crs, beta, buf);
        false
    }
}

/// Lay out B's panel as pairs of K rows, `buf[t * NR + c] = B[2t][c] << 16 | B[2t + 1][c]`,
/// and return its exponents.
///
/// # Safety
/// As [`panel`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_b(
    k: usize,
    b: *const u16,
    brs: usize,
    bcs: usize,
    buf: &mut [u32; MAX_K / 2 * NR],
) -> Exponents {
    use std::arch::x86_64::*;
    let pairs = k.div_ceil(2);
    if bcs != 1 {
        let mut exps = Exponents::NONE;
        for t in 0..pairs {
            for cc in 0..NR {
                // SAFETY: the caller's contract names every element of B's panel.
                let hi = unsafe { *b.add(2 * t * brs + cc * bcs) };
                let lo = if 2 * t + 1 < k {
                    // SAFETY: as above.
                    unsafe { *b.add((2 * t + 1) * brs + cc * bcs) }
                } else {
                    0
                };
                exps = exps.with(hi).with(lo);
                buf[t * NR + cc] = u32::from(hi) << 16 | u32::from(lo);
            }
        }
        return exps;
    }
    let mut exps = Exps16::new();
    let to = buf.as_mut_ptr();
    for t in 0..pairs {
        // SAFETY: each row of the panel is NR contiguous bf16s the caller names; `to` has
        // room for `pairs <= MAX_K / 2` rows of NR.
        unsafe {
            let hi = _mm512_loadu_si512(b.add(2 * t * brs).cast());
            let lo = if 2 * t + 1 < k {
                _mm512_loadu_si512(b.add((2 * t + 1) * brs).cast())
            } else {
                _mm512_setzero_si512()
            };
            exps.add(hi);
            exps.add(lo);
            for h in 0..2 {
                let (hs, ls) = if h == 0 {
                    (_mm512_castsi512_si256(hi), _mm512_castsi512_si256(lo))
                } else {
                    (
                        _mm512_extracti64x4_epi64::<1>(hi),
                        _mm512_extracti64x4_epi64::<1>(lo),
                    )
                };
                let pair = _mm512_or_si512(
                    _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hs)),
                    _mm512_cvtepu16_epi32(ls),
                );
                _mm512_storeu_si512(to.add(t * NR + 16 * h).cast(), pair);
            }
        }
    }
    exps.get()
}

/// The panel's 8-row blocks of C from the packed pairs: each element's sum in K order from
/// +0, then `1·ab` (β = 0) or `fma(1, ab, β·c)`, as `panels` writes it.
///
/// # Safety
/// As [`panel`]; `buf` holds the panel's `k.div_ceil(2)` pair rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn blocks(
    m: usize,
    k: usize,
    a: Pairs,
    buf: &[u32; MAX_K / 2 * NR],
    c: *mut f32,
    crs: usize,
    beta: f32,
) {
    use std::arch::x86_64::*;
    let pairs = k.div_ceil(2);
    let bp = buf.as_ptr();
    for j0 in (0..m).step_by(MR) {
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for t in 0..pairs {
            // SAFETY: `buf` holds `pairs` rows of NR; A's pairs lie where `a` says for the
            // caller's `m` rows.
            unsafe {
                let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(t * NR).cast()));
                let b1: __m512bh =
                    std::mem::transmute(_mm512_loadu_si512(bp.add(t * NR + 16).cast()));
                let at = a.p.add(j0 + t * a.m);
                for (r, sums) in acc.iter_mut().enumerate() {
                    let w: __m512bh = std::mem::transmute(_mm512_set1_epi32(*at.add(r) as i32));
                    sums[0] = _mm512_dpbf16_ps(sums[0], w, b0);
                    sums[1] = _mm512_dpbf16_ps(sums[1], w, b1);
                }
            }
        }
        // SAFETY: C's rows of this block lie where the caller says.
        unsafe { super::panels::store_block(&acc, c.add(j0 * crs), crs, beta) };
    }
}

/// K of the self-check's product.
const CHECK_K: usize = 64;

/// The self-check's `MR x CHECK_K` weights and `CHECK_K x NR` moving values, as bf16 bits:
/// random signs, exponents 2^-8..2^8, all 7 fraction bits.
fn check_values() -> (Vec<u16>, Vec<u16>) {
    let mut seed = 0x5eed_u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let s = (seed >> 33) as u32;
        let e = 119 + (s >> 8) % 17;
        ((s & 0x8000) | (e << 7) | (s & 0x7f)) as u16
    };
    let w = (0..CHECK_K * MR).map(|_| next()).collect();
    let b = (0..CHECK_K * NR).map(|_| next()).collect();
    (w, b)
}

/// Run the kernel on a product whose K order tells a chain of fused multiply-adds apart
/// from the instruction's other plausible orders (the even product first, both products
/// summed before one rounding), and compare with the scalar chain.
fn self_check() -> bool {
    let (m, k) = (MR, CHECK_K);
    let (w, b) = check_values();
    let wf: Vec<f32> = w
        .iter()
        .map(|x| f32::from_bits(u32::from(*x) << 16))
        .collect();
    let mut a = PackedA::default();
    if !a.ensure(&wf, m, k) {
        return false;
    }
    let Some(pairs) = a.view() else {
        return false;
    };
    let mut c = vec![0f32; m * NR];
    let mut buf = [0u32; MAX_K / 2 * NR];
    // SAFETY: the CPU has the instructions (checked by the caller); the operands are the
    // vectors above, sized for an m x k x NR product.
    let ran = unsafe {
        panel(
            m,
            k,
            pairs,
            b.as_ptr(),
            NR,
            1,
            c.as_mut_ptr(),
            NR,
            0.0,
            &mut buf,
        )
    };
    ran && (0..m).all(|j| {
        (0..NR).all(|cc| {
            let want = (0..k).fold(0f32, |s, kk| {
                wf[kk * m + j].mul_add(f32::from_bits(u32::from(b[kk * NR + cc]) << 16), s)
            });
            want.to_bits() == c[j * NR + cc].to_bits()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bf(bits: u16) -> f32 {
        f32::from_bits(u32::from(bits) << 16)
    }

    /// A bf16 of sign `s`, biased exponent `e` and fraction `f`.
    fn b16(s: u16, e: u16, f: u16) -> u16 {
        s << 15 | e << 7 | f
    }

    fn exps(v: &[u16]) -> Exponents {
        v.iter().fold(Exponents::NONE, |x, b| x.with(*b))
    }

    #[test]
    fn exponents_skip_zeros_and_see_subnormals_and_specials() {
        assert_eq!(exps(&[0, 0x8000]), Exponents::NONE, "±0 only");
        assert_eq!(
            exps(&[0, b16(1, 100, 3), b16(0, 130, 0)]),
            Exponents { min: 100, max: 130 }
        );
        assert_eq!(exps(&[b16(0, 0, 1), b16(0, 127, 0)]).min, 0, "a subnormal");
        assert_eq!(exps(&[0x7f80]).max, 255, "+inf");
        assert_eq!(exps(&[0xffc1]).max, 255, "a NaN");
    }

    /// The bounds by hand: smallest products' last bits at 2^-126 pass and 2^-127 do not;
    /// 128 products below 2^126 pass and below 2^127 do not.
    #[test]
    fn exact_holds_only_where_no_sum_can_be_flushed_or_overflow() {
        let e = |min, max| Exponents { min, max };
        assert!(exact(e(71, 127), e(71, 127), 128));
        assert!(
            !exact(e(70, 127), e(71, 127), 128),
            "a product's last bit 2^-127"
        );
        assert!(
            exact(e(1, 127), e(141, 141), 128),
            "2^-133 times 2^7: 2^-126"
        );
        assert!(
            !exact(e(0, 127), e(200, 200), 128),
            "a subnormal is read as zero"
        );
        // Largest product below 2^(ea + eb - 252), 128 of them: 2^(ea + eb - 245).
        assert!(exact(e(127, 185), e(127, 186), 128), "sums below 2^126");
        assert!(!exact(e(127, 186), e(127, 186), 128), "sums up to 2^127");
        assert!(exact(e(127, 186), e(127, 186), 64), "a shallower K");
        assert!(!exact(e(127, 255), e(127, 127), 128), "an infinity or NaN");
        assert!(
            exact(Exponents::NONE, e(0, 254), 128),
            "all-zero weights: every product 0"
        );
        assert!(!exact(Exponents::NONE, e(1, 255), 128), "0 × inf is NaN");
    }

    /// A kernel and the chain it must equal: element `(j, c)` is `fma` over `kk` from +0,
    /// then `1·ab` or `fma(1, ab, β·c)`.
    #[allow(clippy::too_many_arguments)]
    fn chain(
        w: &[f32],
        m: usize,
        k: usize,
        b: &[u16],
        brs: usize,
        bcs: usize,
        j: usize,
        c: usize,
    ) -> f32 {
        (0..k).fold(0f32, |s, kk| {
            w[kk * m + j].mul_add(bf(b[kk * brs + c * bcs]), s)
        })
    }

    fn lcg(seed: &mut u64) -> u32 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (*seed >> 33) as u32
    }

    /// bf16 values with exponents `lo..hi`, random signs and fractions, some zeros.
    fn values(seed: &mut u64, n: usize, lo: u32, hi: u32) -> Vec<u16> {
        (0..n)
            .map(|_| {
                let s = lcg(seed);
                if s.is_multiple_of(23) {
                    0
                } else {
                    b16(
                        ((s >> 20) & 1) as u16,
                        (lo + (s >> 8) % (hi - lo)) as u16,
                        (s & 0x7f) as u16,
                    )
                }
            })
            .collect()
    }

    /// Products of the shapes the device model gives (K odd and even, 1 to one K block; 8 to
    /// 128 rows; B dense or strided; both β): the FMA chain's bits where [`exact`] holds, and
    /// where it does not (subnormals, infinities, NaN, products down to 2^-140) the panel is
    /// refused with C untouched.
    #[test]
    fn panels_give_the_fma_chain_bits_or_are_refused() {
        if !available() {
            eprintln!("SKIPPED: no AVX512-BF16 whose VDPBF16PS sums as two FMAs on this host");
            return;
        }
        eprintln!("AVX512-BF16 present: comparing VDPBF16PS panels with the FMA chain");
        let mut seed = 9u64;
        let mut buf = [0u32; MAX_K / 2 * NR];
        let (mut ran, mut refused) = (0, 0);
        for (case, (m, k)) in [(128, 128), (8, 1), (16, 3), (64, 77), (8, 256), (32, 2)]
            .into_iter()
            .enumerate()
        {
            if k > MAX_K {
                let mut a = PackedA::default();
                assert!(!a.ensure(&vec![1.0; m * k], m, k), "K beyond one block");
                continue;
            }
            for (lo, hi, specials) in [
                (100, 150, false),
                (60, 200, false),
                (40, 80, false),
                (110, 140, true),
            ] {
                let w16 = values(&mut seed, m * k, lo, hi);
                let w: Vec<f32> = w16.iter().map(|x| bf(*x)).collect();
                let bcs = 1 + case % 2;
                let brs = NR * bcs + 5;
                let mut b = values(&mut seed, k * brs, lo, hi);
                if specials {
                    let at = (lcg(&mut seed) as usize) % b.len();
                    b[at] = [0x0001, 0x7f80, 0xffc0, 0x8003][case % 4];
                }
                let mut a = PackedA::default();
                assert!(a.ensure(&w, m, k));
                let pairs = a.view().expect("packed");
                for beta in [0.0f32, 1.0] {
                    let old: Vec<f32> = (0..m * NR).map(|i| i as f32 * 0.25 - 3.0).collect();
                    let mut c = old.clone();
                    // SAFETY: the vectors hold an m x k A (packed), k rows of B `brs` apart
                    // with NR columns `bcs` apart, and m x NR of C; the host has the kernel.
                    let on = unsafe {
                        panel(
                            m,
                            k,
                            pairs,
                            b.as_ptr(),
                            brs,
                            bcs,
                            c.as_mut_ptr(),
                            NR,
                            beta,
                            &mut buf,
                        )
                    };
                    let bexps = exps(
                        &(0..k)
                            .flat_map(|kk| (0..NR).map(move |cc| (kk, cc)))
                            .map(|(kk, cc)| b[kk * brs + cc * bcs])
                            .collect::<Vec<_>>(),
                    );
                    assert_eq!(
                        on,
                        exact(exps(&w16), bexps, k),
                        "{m}x{k} exponents {lo}..{hi}"
                    );
                    if !on {
                        refused += 1;
                        assert_eq!(c, old, "a refused panel wrote C");
                        continue;
                    }
                    ran += 1;
                    for j in 0..m {
                        for cc in 0..NR {
                            let ab = chain(&w, m, k, &b, brs, bcs, j, cc);
                            let want = if beta == 0.0 {
                                ab
                            } else {
                                1f32.mul_add(ab, beta * old[j * NR + cc])
                            };
                            assert_eq!(
                                c[j * NR + cc].to_bits(),
                                want.to_bits(),
                                "{m}x{k} beta {beta} C[{j}][{cc}]"
                            );
                        }
                    }
                }
            }
        }
        assert!(
            ran > 0 && refused > 0,
            "both outcomes covered: {ran} ran, {refused} refused"
        );
    }

    /// The self-check's product tells the orders apart: summing each pair's products the
    /// other way round, or both before one rounding, changes some of its bits.
    #[test]
    fn the_self_check_tells_the_summation_orders_apart() {
        let (m, k) = (MR, CHECK_K);
        let (w, b) = check_values();
        let w: Vec<f32> = w.iter().map(|x| bf(*x)).collect();
        let b: Vec<f32> = b.iter().map(|x| bf(*x)).collect();
        let (mut swapped, mut joined) = (0, 0);
        for j in 0..m {
            for c in 0..NR {
                let p = |kk: usize| w[kk * m + j] * b[kk * NR + c];
                let chain = (0..k).fold(0f32, |s, kk| w[kk * m + j].mul_add(b[kk * NR + c], s));
                let (mut s1, mut s2) = (0f32, 0f32);
                for t in 0..k / 2 {
                    s1 = (s1 + p(2 * t + 1)) + p(2 * t);
                    s2 = (f64::from(s2) + f64::from(p(2 * t)) + f64::from(p(2 * t + 1))) as f32;
                }
                swapped += usize::from(s1.to_bits() != chain.to_bits());
                joined += usize::from(s2.to_bits() != chain.to_bits());
            }
        }
        assert!(
            swapped > 0 && joined > 0,
            "{swapped} and {joined} of {} differ",
            m * NR
        );
        if available() {
            assert!(self_check());
        }
    }

    /// A bf16 drawn for the property below: mostly normal values of exponents `lo..=hi`,
    /// some zeros, and (where `special`) subnormals, infinities and NaN.
    fn arb_bf16(lo: u16, hi: u16, special: bool) -> impl Strategy<Value = u16> {
        let normal =
            (any::<bool>(), lo..=hi, 0u16..128).prop_map(|(s, e, f)| b16(u16::from(s), e, f));
        let specials = prop_oneof![
            Just(0x0001u16),
            Just(0x807f),
            Just(0x7f80),
            Just(0xff80),
            Just(0x7fc1)
        ];
        prop_oneof![
            20 => normal,
            2 => prop_oneof![Just(0u16), Just(0x8000)],
            if special { 1 } else { 0 } => specials,
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any panel: where it runs, the FMA chain's bits; where [`exact`] (on the operands'
        /// exponents, gathered independently) does not hold, refused with C untouched.
        #[test]
        fn any_panel_gives_the_fma_chain_bits_or_is_refused(
            (m, k, lo, hi, special, bcs, beta, w, b) in (1usize..=8, 1usize..=128, 1u16..=200, 0u16..=60, proptest::prelude::any::<bool>(), 1usize..=2, proptest::prelude::any::<bool>())
                .prop_flat_map(|(mb, k, lo, span, special, bcs, beta)| {
                    let (m, hi) = (mb * MR, (lo + span).min(254));
                    (Just(m), Just(k), Just(lo), Just(hi), Just(special), Just(bcs), Just(beta),
                     proptest::collection::vec(arb_bf16(lo, hi, special), m * k),
                     proptest::collection::vec(arb_bf16(lo, hi, special), k * NR * bcs))
                })
        ) {
            let _ = (lo, hi, special);
            if !available() {
                return Ok(());
            }
            let wf: Vec<f32> = w.iter().map(|x| bf(*x)).collect();
            let mut a = PackedA::default();
            proptest::prop_assert!(a.ensure(&wf, m, k));
            let pairs = a.view().expect("packed");
            let beta = if beta { 1.0f32 } else { 0.0 };
            let old: Vec<f32> = (0..m * NR).map(|i| (i % 7) as f32 - 2.5).collect();
            let mut c = old.clone();
            let brs = NR * bcs;
            let mut buf = [0u32; MAX_K / 2 * NR];
            // SAFETY: `w` packs an m x k A; `b` holds k rows of `brs` with NR columns `bcs`
            // apart; C holds m x NR; the host has the kernel (checked above).
            let ran = unsafe {
                panel(m, k, pairs, b.as_ptr(), brs, bcs, c.as_mut_ptr(), NR, beta, &mut buf)
            };
            let bexps = (0..k)
                .flat_map(|kk| (0..NR).map(move |cc| kk * brs + cc * bcs))
                .fold(Exponents::NONE, |e, at| e.with(b[at]));
            proptest::prop_assert_eq!(ran, exact(exps(&w), bexps, k));
            if !ran {
                proptest::prop_assert_eq!(&c, &old);
                return Ok(());
            }
            for j in 0..m {
                for cc in 0..NR {
                    let ab = chain(&wf, m, k, &b, brs, bcs, j, cc);
                    let want = if beta == 0.0 { ab } else { 1f32.mul_add(ab, beta * old[j * NR + cc]) };
                    proptest::prop_assert_eq!(c[j * NR + cc].to_bits(), want.to_bits(), "C[{}][{}]", j, cc);
                }
            }
        }
    }

    #[test]
    fn weights_that_are_not_bf16_are_not_packed() {
        let mut a = PackedA::default();
        let mut w = vec![1.0f32; 8 * 4];
        assert!(a.ensure(&w, 8, 4));
        a.clear();
        w[5] = 1.0 + f32::EPSILON;
        assert!(!a.ensure(&w, 8, 4), "a weight with 24 significant bits");
        assert!(a.view().is_none());
        a.clear();
        assert!(!a.ensure(&w[..31], 8, 4), "a short slice");
        // 16 rows: the 16-lane loop sees it too, in the last pair row.
        let mut w = vec![-2.5f32; 16 * 5];
        a.clear();
        assert!(a.ensure(&w, 16, 5));
        w[16 * 4 + 15] = f32::from_bits(0x4000_0001);
        a.clear();
        assert!(!a.ensure(&w, 16, 5), "low bits in the 16-lane loop");
        a.clear();
        assert!(!a.ensure(&w, 0, 4), "no rows");
    }
}
