//! bf16 matrix products on Intel AMX tiles (`TDPBF16PS`), for the MATMULs whose operands are
//! bf16 or fp8 (every value is a bf16) or fp16 (every value is the exact sum of two bf16), on
//! hosts with AMX-BF16 (issue 16). Detected at run time; elsewhere `available()` is false and
//! the portable SGEMM runs.
//!
//! How the result can differ from the portable path: the products are exact either way (a
//! bf16 × bf16 product fits an fp32), but the tiles sum them in another order and treat bf16
//! denormal inputs as zero and flush denormal results (Intel SDM, `TDPBF16PS`), so the bits
//! differ within fp32 rounding of the same sum. An fp16 operand can be split into `hi` (its
//! top 8 significant bits) and `lo` (the other 3), both exact bf16 values, with every pair of
//! parts multiplied, so fp16 products stay exact: `bench real` measures that rate for its
//! floor, but the device model keeps fp16 on the SGEMM (`gemm::Path::amx_parts`), as packing
//! four parts cost more than the tiles saved.
//!
//! Which threads may run tiles: only those that take no MMIO traps (the device thread, a
//! benchmark's own measuring thread). Once a thread has used AMX its signal frames carry the
//! 8 KiB tile state, and the emulator's SIGSEGV trap handler runs on Rust's alternate signal
//! stack (AT_MINSIGSTKSZ, ~11.7 KiB here), leaving it too little room: a debug build crashed
//! on the first trapped store of a thread that had measured tile rates.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// bf16 values per tile row (64 bytes), the K step of one `TDPBF16PS`.
const TILE_K: usize = 32;
/// Rows of every tile; also the columns of a C tile (16 fp32 = 64 bytes).
const TILE_N: usize = 16;
/// bf16s in one A or B tile (16 rows × 64 bytes).
const TILE_ELEMS: usize = TILE_N * TILE_K;
/// C is computed in blocks of 2 × 2 tiles.
const BLOCK: usize = 2 * TILE_N;
/// The largest K' (the parts of a product concatenated) a packed operand may have: four
/// parts of a 128-row PE array, padded.
pub const MAX_K: usize = 4 * 128;

/// Whether the CPU has AMX-BF16 and the OS enables its tile state: CPUID leaf 7 EDX bits 22
/// (AMX-BF16) and 24 (AMX-TILE), and XCR0 bits 17-18 (XTILECFG, XTILEDATA).
pub fn cpu_has_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
        // CPUID exists on every x86_64 CPU; leaf 7 is read only if leaf 0 says it exists.
        let (max, l1) = (__cpuid(0).eax, __cpuid(1));
        if max < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        let cpu = edx & (1 << 22) != 0 && edx & (1 << 24) != 0;
        // XGETBV needs XSAVE enabled by the OS (CPUID.1:ECX.OSXSAVE, bit 27).
        if !cpu || l1.ecx & (1 << 27) == 0 {
            return false;
        }
        // SAFETY: OSXSAVE is set, so XGETBV with ECX = 0 (XCR0) is defined.
        let xcr0 = unsafe { _xgetbv(0) };
        xcr0 & (0b11 << 17) == 0b11 << 17
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this process may run the tile kernel: the CPU has AMX and Linux granted the
/// process the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, asked
/// once; without it the first tile instruction would kill the process with SIGILL).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| cpu_has_amx() && request_tile_permission())
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only changes the process's permitted xstate
    // features; it reads no memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_tile_permission() -> bool {
    false
}

/// How an operand's values become bf16 parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// Every value is a bf16 (bf16 and fp8 operands): one part.
    Exact,
    /// Every value is `hi + lo` with both parts bf16 (fp16 operands): two parts.
    Split,
}

impl Parts {
    /// The parts of an operand of this type, or None if its values are not sums of bf16s
    /// (fp32, integers): such MATMULs stay on the portable path.
    pub fn of(dt: neuron_isa::Dtype) -> Option<Parts> {
        use neuron_isa::Dtype::*;
        match dt {
            Bf16 | Fp8E4 | Fp8E5 | Fp8E3 => Some(Parts::Exact),
            F16 => Some(Parts::Split),
            _ => None,
        }
    }

    fn count(self) -> usize {
        match self {
            Parts::Exact => 1,
            Parts::Split => 2,
        }
    }
}

/// bf16 bits of part `which` (0 = hi, 1 = lo) of `x`. `hi` is `x` truncated to bf16; `lo` is
/// the rest, exact for a value with at most 16 significant bits (fp16, bf16, fp8), and 0 for
/// infinities and NaNs (whose `hi` is already the whole value).
#[cfg(test)]
fn part(x: f32, which: usize) -> u16 {
    let hi = x.to_bits() & 0xffff_0000;
    if which == 0 {
        return (hi >> 16) as u16;
    }
    if !x.is_finite() {
        return 0;
    }
    ((x - f32::from_bits(hi)).to_bits() >> 16) as u16
}

/// [`part`]`(x, 1)` without branches, so packing loops vectorize.
#[inline]
fn lo_part(x: f32) -> u16 {
    let hi = f32::from_bits(x.to_bits() & 0xffff_0000);
    let lo = ((x - hi).to_bits() >> 16) as u16;
    if x.is_finite() {
        lo
    } else {
        0
    }
}

/// The pairs of parts (A part, B part) whose products sum to the exact product.
fn terms(a: Parts, b: Parts) -> impl Iterator<Item = (usize, usize)> {
    (0..a.count()).flat_map(move |i| (0..b.count()).map(move |j| (i, j)))
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// K' of a product of operands with these parts: their `k`-row segments one after another,
/// rounded up to a tile row; None for `k == 0` or past [`MAX_K`].
fn padded_k(a: Parts, b: Parts, k: usize) -> Option<usize> {
    let kp = round_up(a.count() * b.count() * k, TILE_K);
    (k > 0 && kp <= MAX_K).then_some(kp)
}

/// The stationary operand `A[m x k]` in tile layout: `mp` rows (m rounded up to a 2-tile
/// block) of `kp` bf16s (the parts' K segments one after another, rounded up to a tile row),
/// stored as 1 KiB tiles of 16 rows × 32 (row tiles outer), each loaded with a 64-byte stride.
#[derive(Debug, Clone, Default)]
pub struct PackedA {
    bits: Vec<u16>,
    m: usize,
    k: usize,
    mp: usize,
    kp: usize,
    parts: Option<(Parts, Parts)>,
}

impl PackedA {
    /// Pack `A(j, kk) = w[kk * m + j]` (the PE array's stationary layout) for products with a
    /// moving operand of parts `b`. None if the shape is out of the kernel's range.
    pub fn pack(w: &[f32], m: usize, k: usize, a: Parts, b: Parts, into: &mut PackedA) -> bool {
        let Some(kp) = padded_k(a, b, k).filter(|_| m > 0 && w.len() >= m * k) else {
            return false;
        };
        let mp = round_up(m, BLOCK);
        into.bits.clear();
        into.bits.resize(mp * kp, 0);
        // A transpose (w is k-major, the tiles want rows of k), in 16 x 16 blocks so both
        // sides stay in a few cache lines; tiles one after another (row tiles outer).
        let ktiles = kp / TILE_K;
        for (t, (pa, _)) in terms(a, b).enumerate() {
            for k0 in (0..k).step_by(16) {
                for j0 in (0..m).step_by(16) {
                    for kk in k0..(k0 + 16).min(k) {
                        let q = t * k + kk;
                        // Row j of the tile (j / 16, q / 32), element q % 32.
                        let at = ((j0 / TILE_N) * ktiles + q / TILE_K) * TILE_ELEMS + q % TILE_K;
                        let src = &w[kk * m + j0..kk * m + (j0 + 16).min(m)];
                        let dst = into.bits[at..].iter_mut().step_by(TILE_K);
                        if pa == 0 {
                            dst.zip(src)
                                .for_each(|(d, x)| *d = (x.to_bits() >> 16) as u16);
                        } else {
                            dst.zip(src).for_each(|(d, x)| *d = lo_part(*x));
                        }
                    }
                }
            }
        }
        into.m = m;
        into.k = k;
        into.mp = mp;
        into.kp = kp;
        into.parts = Some((a, b));
        true
    }

    /// Packed for these operand parts (and not emptied since).
    pub fn is_for(&self, a: Parts, b: Parts) -> bool {
        self.parts == Some((a, b))
    }

    /// Forget the packed weights (a new LDWEIGHTS).
    pub fn clear(&mut self) {
        self.parts = None;
    }
}

/// The moving operand `B[k x n]` in the tiles' pair-interleaved ("VNNI") layout, one 1 KiB
/// tile after another (16 columns × 32 K' rows each, column tiles outer): a tile row holds,
/// for each of its 16 columns, the bf16s of K' rows `q` and `q + 1`. Contiguous tiles load
/// with a 64-byte stride instead of one row of the whole operand (2 KiB at 512 columns,
/// which maps a tile's rows onto few cache sets).
#[derive(Debug, Clone, Default)]
pub struct PackedB {
    bits: Vec<u16>,
    k: usize,
    n: usize,
    np: usize,
    kp: usize,
    parts: Option<(Parts, Parts)>,
}

impl PackedB {
    /// Pack `B(kk, c) = src[kk * n + c]` (dense, row-major) for products with a stationary
    /// operand of parts `a`.
    pub fn pack(src: &[f32], k: usize, n: usize, a: Parts, b: Parts, into: &mut PackedB) -> bool {
        if src.len() < k * n {
            return false;
        }
        let parts: Vec<usize> = terms(a, b).map(|(_, pb)| pb).collect();
        into.fill(k, n, a, b, |q, c0, h| {
            // K' row q: part `parts[q / k]` of source row `q % k`.
            let Some(&p) = parts.get(q / k) else { return };
            let row = (q % k) * n;
            let cols = &src[row + c0..row + c0 + h.len().min(n - c0)];
            if p == 0 {
                h.iter_mut()
                    .zip(cols)
                    .for_each(|(d, x)| *d = (x.to_bits() >> 16) as u16);
            } else {
                h.iter_mut().zip(cols).for_each(|(d, x)| *d = lo_part(*x));
            }
        })
    }

    /// Pack a bf16 moving operand from its bits as they lie in SBUF (`src[kk * n + c]`), with
    /// no conversion: every part of a bf16 is the bf16 itself.
    pub fn pack_bits(src: &[u16], k: usize, n: usize, a: Parts, into: &mut PackedB) -> bool {
        if src.len() < k * n {
            return false;
        }
        if a == Parts::Exact {
            return into.interleave(src, k, n);
        }
        let nt = a.count();
        into.fill(k, n, a, Parts::Exact, |q, c0, h| {
            if q / k >= nt {
                return;
            }
            let row = (q % k) * n;
            let cols = &src[row + c0..row + c0 + h.len().min(n - c0)];
            h[..cols.len()].copy_from_slice(cols);
        })
    }

    /// Lay out K' rows (`row(q, c0, h)` writes the bf16s of K' row `q`, columns `c0..`, into
    /// `h`, leaving zeros past the end) two at a time: the layout interleaves them column by
    /// column.
    fn fill(
        &mut self,
        k: usize,
        n: usize,
        a: Parts,
        b: Parts,
        row: impl Fn(usize, usize, &mut [u16; TILE_N]),
    ) -> bool {
        let Some(kp) = padded_k(a, b, k).filter(|_| n > 0) else {
            return false;
        };
        let nt = a.count() * b.count();
        let np = round_up(n, TILE_N);
        self.bits.clear();
        self.bits.resize(kp * np, 0);
        let ktiles = kp / TILE_K;
        for q in (0..nt * k).step_by(2) {
            let base = (q / TILE_K) * TILE_ELEMS + ((q % TILE_K) / 2) * 2 * TILE_N;
            for ct in 0..np / TILE_N {
                let c0 = ct * TILE_N;
                // 16 columns of each row (zero past the end), then interleaved: fixed sizes,
                // so the compiler vectorizes both steps.
                let mut half = [[0u16; TILE_N]; 2];
                row(q, c0, &mut half[0]);
                if q + 1 < nt * k {
                    row(q + 1, c0, &mut half[1]);
                }
                let at = ct * ktiles * TILE_ELEMS + base;
                let dst = &mut self.bits[at..at + 2 * TILE_N];
                for (c, pair) in dst.chunks_exact_mut(2).enumerate() {
                    pair[0] = half[0][c];
                    pair[1] = half[1][c];
                }
            }
        }
        self.k = k;
        self.n = n;
        self.np = np;
        self.kp = kp;
        self.parts = Some((a, b));
        true
    }

    /// [`Self::pack_bits`] for one part (bf16/fp8 weights): each pair of source rows goes
    /// straight into its tile rows, 16 columns at a time, with no per-row staging. The
    /// padding is zeroed only when the shape changes: every other element is rewritten.
    fn interleave(&mut self, src: &[u16], k: usize, n: usize) -> bool {
        let Some(kp) = padded_k(Parts::Exact, Parts::Exact, k).filter(|_| n > 0) else {
            return false;
        };
        let np = round_up(n, TILE_N);
        let same = self.bits.len() == kp * np
            && (self.k, self.n) == (k, n)
            && self.parts == Some((Parts::Exact, Parts::Exact));
        if !same {
            self.bits.clear();
            self.bits.resize(kp * np, 0);
        }
        let ktiles = kp / TILE_K;
        // Column tiles outer: each one's K' tiles are contiguous, so the stores stream,
        // while the 32-byte pieces of the source rows they read stay in L1 for the next tile.
        for ct in 0..np / TILE_N {
            let c0 = ct * TILE_N;
            let cols = TILE_N.min(n - c0);
            let tile = &mut self.bits[ct * ktiles * TILE_ELEMS..(ct + 1) * ktiles * TILE_ELEMS];
            // Tile row q / 2 (of all K' tiles in turn) holds rows q and q + 1 interleaved.
            for (q, dst) in (0..k).step_by(2).zip(tile.chunks_exact_mut(2 * TILE_N)) {
                // A whole tile's 16 columns as a fixed-size copy (a variable-length one is a
                // memcpy call per 32 bytes).
                let row = |r: usize| -> [u16; TILE_N] {
                    let at = r * n + c0;
                    match src.get(at..at + TILE_N) {
                        Some(s) if r < k && cols == TILE_N => {
                            let mut h = [0u16; TILE_N];
                            h.copy_from_slice(s);
                            h
                        }
                        _ => {
                            let mut h = [0u16; TILE_N];
                            if r < k {
                                h[..cols].copy_from_slice(&src[at..at + cols]);
                            }
                            h
                        }
                    }
                };
                let (h0, h1) = (row(q), row(q + 1));
                for (c, d) in dst.chunks_exact_mut(2).enumerate() {
                    d[0] = h0[c];
                    d[1] = h1[c];
                }
            }
        }
        self.k = k;
        self.n = n;
        self.np = np;
        self.kp = kp;
        self.parts = Some((Parts::Exact, Parts::Exact));
        true
    }

    /// The columns of a row of [`gemm`]'s product: `n` rounded up to a tile.
    pub fn padded_columns(&self) -> usize {
        self.np
    }
}

/// Whether `a` and `b` were packed for one product (same parts and K) this host can run.
fn runnable(a: &PackedA, b: &PackedB) -> bool {
    available()
        && a.parts.is_some()
        && a.parts == b.parts
        && a.k == b.k
        && a.kp == b.kp
        && a.bits.len() >= a.mp * a.kp
        && b.bits.len() >= b.kp * b.np
}

/// `out[mp x np] = A · B` (dense row-major, `np` columns: the caller reads its `m x n`
/// corner). False, with nothing computed, if the host cannot run the kernel or the operands
/// were packed for different shapes or parts.
pub fn gemm(a: &PackedA, b: &PackedB, out: &mut Vec<f32>) -> bool {
    if !runnable(a, b) {
        return false;
    }
    let (mp, np, kp) = (a.mp, b.np, a.kp);
    debug_assert!(mp % BLOCK == 0 && np % TILE_N == 0 && kp % TILE_K == 0);
    // The kernel stores every element of `out`: no need to clear it.
    if out.len() != mp * np {
        out.clear();
        out.resize(mp * np, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `runnable` says the CPU has AMX-BF16, the OS granted the tile state and
        // the operands hold `mp x kp` and `kp x np` elements; `out` holds `mp x np`, which
        // bounds every tile row the kernel loads or stores, and is exclusive.
        unsafe {
            kernel(
                &a.bits,
                &b.bits,
                mp,
                kp,
                np,
                Store::<fn(usize, usize, &Block)>::Dense(out),
            )
        };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `C = A · B + C` (`beta` 1) or `C = A · B` (`beta` 0) for the `m x n` product, C at view
/// `cv` of `c` (a MATMUL's PSUM accumulator): each 32 x 32 block of the product is added as
/// soon as the tiles hold it, with no product-sized buffer between. The same bits as
/// [`gemm`] followed by `gemm::add_into` (the same sums, each added to C once). False, with
/// nothing changed, where [`gemm`] would refuse or C does not fit `c`.
pub fn gemm_into(a: &PackedA, b: &PackedB, beta: f32, c: &mut [f32], cv: super::View) -> bool {
    let (m, n) = (a.m, b.n);
    if !runnable(a, b) || m == 0 || n == 0 || cv.last(m, n).is_none_or(|l| l >= c.len()) {
        return false;
    }
    let (mp, np, kp) = (a.mp, b.np, a.kp);
    #[cfg(target_arch = "x86_64")]
    {
        // C's rows are a PSUM partition apart: short streams no hardware prefetcher follows,
        // so each block's rows are asked for while the block before is added.
        let prefetch_block = |c: &[f32], i: usize, j: usize| {
            for r in i..(i + BLOCK).min(m) {
                let at = cv.off + r * cv.rs + j;
                crate::prefetch::line(c.as_ptr().wrapping_add(at));
                crate::prefetch::line(c.as_ptr().wrapping_add(at + 16));
            }
        };
        if cv.cs == 1 {
            prefetch_block(c, 0, 0);
        }
        let add = |i: usize, j: usize, blk: &Block| {
            let (ni, nj) = if i + BLOCK < m {
                (i + BLOCK, j)
            } else {
                (0, j + BLOCK)
            };
            if cv.cs == 1 && nj < n {
                prefetch_block(c, ni, nj);
            }
            // The block's corner of C: inside `cv`, which fits `c` (checked above).
            let at = super::View {
                off: cv.off + i * cv.rs + j * cv.cs,
                ..cv
            };
            let (rows, cols) = (BLOCK.min(m - i), BLOCK.min(n - j));
            super::add_into(rows, cols, &blk.0, BLOCK, beta, c, at);
        };
        // SAFETY: as in `gemm` for the operands; the kernel stores only into its own block
        // buffer, and `add` writes `c` through the bounds-checked `add_into`.
        unsafe { kernel(&a.bits, &b.bits, mp, kp, np, Store::Blocks(add)) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (beta, mp, np, kp);
        false
    }
}

/// One 32 x 32 block of the product (rows of 32 fp32), as the tiles store it.
#[repr(C, align(64))]
struct Block([f32; BLOCK * BLOCK]);

/// Where the kernel puts the product.
enum Store<'a, F: FnMut(usize, usize, &Block)> {
    /// Every element of a dense `mp x np` row-major matrix.
    Dense(&'a mut [f32]),
    /// Each block, once computed, handed over at its (row, column) origin; a last 16-column
    /// tile fills only the block's first 16 columns.
    Blocks(F),
}

/// The tile configuration: palette 1, eight tiles of 16 rows × 64 bytes (C: tmm0-3, A:
/// tmm4-5, B: tmm6-7).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn full() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
            c[48 + t] = TILE_N as u8;
        }
        TileConfig(c)
    }
}

/// # Safety
/// AMX must be usable (`available()`); `a` holds `mp x kp` bf16s, `b` `kp x np` (in tiles), a
/// dense `out` `mp x np` f32s, with `mp` a multiple of 32, `np` of 16 and `kp` of 32.
#[cfg(target_arch = "x86_64")]
unsafe fn kernel<F: FnMut(usize, usize, &Block)>(
    a: &[u16],
    b: &[u16],
    mp: usize,
    kp: usize,
    np: usize,
    mut out: Store<'_, F>,
) {
    use std::arch::asm;
    let cfg = TileConfig::full();
    asm!("ldtilecfg [{0}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
    let (sa, sb) = (64usize, 64usize); // row strides in bytes
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut blk = Block([0.0; BLOCK * BLOCK]);
    let ktiles = kp / TILE_K;
    // Column blocks outer: a block's B tiles (8 KiB at K' = 128) stay in L1 across the rows.
    let mut j = 0;
    while j < np {
        // A 2 x 2 block of C tiles, or 2 x 1 for a last 16 columns.
        let two = j + BLOCK <= np;
        for i in (0..mp).step_by(BLOCK) {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for kk in (0..kp).step_by(TILE_K) {
                let a0 = ap.add(((i / TILE_N) * ktiles + kk / TILE_K) * TILE_ELEMS);
                let a1 = a0.add(ktiles * TILE_ELEMS);
                let b0 = bp.add(((j / TILE_N) * ktiles + kk / TILE_K) * TILE_ELEMS);
                asm!(
                    "tileloadd tmm4, [{a0} + {sa}*1]",
                    "tileloadd tmm5, [{a1} + {sa}*1]",
                    "tileloadd tmm6, [{b0} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    a0 = in(reg) a0, a1 = in(reg) a1, b0 = in(reg) b0,
                    sa = in(reg) sa, sb = in(reg) sb, options(nostack, readonly)
                );
                if two {
                    let b1 = b0.add(ktiles * TILE_ELEMS);
                    asm!(
                        "tileloadd tmm7, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        b1 = in(reg) b1, sb = in(reg) sb, options(nostack, readonly)
                    );
                }
            }
            // Into the dense product, or into the block buffer (rows of 32) for the caller.
            let (c0, pitch) = match &mut out {
                Store::Dense(c) => (c.as_mut_ptr().add(i * np + j), np),
                Store::Blocks(_) => (blk.0.as_mut_ptr(), BLOCK),
            };
            let c2 = c0.add(TILE_N * pitch);
            let sc = pitch * 4;
            asm!(
                "tilestored [{c0} + {sc}*1], tmm0",
                "tilestored [{c2} + {sc}*1], tmm2",
                c0 = in(reg) c0, c2 = in(reg) c2, sc = in(reg) sc, options(nostack)
            );
            if two {
                let (c1, c3) = (c0.add(TILE_N), c2.add(TILE_N));
                asm!(
                    "tilestored [{c1} + {sc}*1], tmm1",
                    "tilestored [{c3} + {sc}*1], tmm3",
                    c1 = in(reg) c1, c3 = in(reg) c3, sc = in(reg) sc, options(nostack)
                );
            }
            if let Store::Blocks(f) = &mut out {
                f(i, j, &blk);
            }
        }
        j += if two { BLOCK } else { TILE_N };
    }
    // Back to the initial tile state: nothing stale for the next caller, and a thread that
    // no longer uses tiles is cheap to switch.
    asm!("tilerelease", options(nostack, nomem));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Uniform in [-0.5, 0.5) from a 64-bit LCG: the GEMM tests' seeded operands.
    pub(crate) fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }

    /// `n` bf16 values from `seed` (`lcg` times `scale`, rounded), as bits and widened: the
    /// same values in both forms.
    pub(crate) fn bf16_values(seed: &mut u64, n: usize, scale: f32) -> (Vec<u16>, Vec<f32>) {
        let bits: Vec<u16> = (0..n)
            .map(|_| half::bf16::from_f32(lcg(seed) * scale).to_bits())
            .collect();
        let wide = bits
            .iter()
            .map(|b| f32::from_bits(u32::from(*b) << 16))
            .collect();
        (bits, wide)
    }

    /// Exact products summed in f64: the reference every path is held to.
    fn reference(w: &[f32], bm: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for j in 0..m {
            for c in 0..n {
                out[j * n + c] = (0..k)
                    .map(|kk| w[kk * m + j] as f64 * bm[kk * n + c] as f64)
                    .sum();
            }
        }
        out
    }

    #[test]
    fn parts_are_exact_for_fp16_bf16_and_fp8_values() {
        let mut s = 7;
        for _ in 0..10_000 {
            let h = half::f16::from_f32(lcg(&mut s) * 1000.0).to_f32();
            let (hi, lo) = (part(h, 0), part(h, 1));
            let sum = f32::from_bits((hi as u32) << 16) + f32::from_bits((lo as u32) << 16);
            assert_eq!(sum.to_bits(), h.to_bits(), "{h}");
            let b = half::bf16::from_f32(lcg(&mut s)).to_f32();
            assert_eq!(part(b, 1), 0, "a bf16 has no lo part");
        }
        assert_eq!(part(f32::INFINITY, 1), 0);
        assert_eq!(part(f32::NAN, 1), 0);
        assert!(f32::from_bits((part(f32::NAN, 0) as u32) << 16).is_nan());
    }

    /// Whether the host can run the tiles; says which way the test goes.
    fn amx_or_skip(what: &str) -> bool {
        if available() {
            eprintln!("AMX-BF16 present: testing {what}");
        } else {
            eprintln!("SKIPPED: this host has no usable AMX-BF16 (path tested: none)");
        }
        available()
    }

    #[test]
    fn tiles_match_exact_products_for_every_part_combination_and_edge_shape() {
        if !amx_or_skip("the tile kernel") {
            return;
        }
        let mut s = 1;
        for (m, k, n) in [
            (128, 128, 512),
            (1, 1, 1),
            (17, 33, 15),
            (128, 128, 48),
            (64, 96, 16),
        ] {
            for (pa, pb) in [
                (Parts::Exact, Parts::Exact),
                (Parts::Split, Parts::Exact),
                (Parts::Exact, Parts::Split),
                (Parts::Split, Parts::Split),
            ] {
                let val = |p: Parts, x: f32| match p {
                    Parts::Exact => half::bf16::from_f32(x).to_f32(),
                    Parts::Split => half::f16::from_f32(x).to_f32(),
                };
                let w: Vec<f32> = (0..m * k).map(|_| val(pa, lcg(&mut s))).collect();
                let b: Vec<f32> = (0..k * n).map(|_| val(pb, lcg(&mut s))).collect();
                let (mut ap, mut bp, mut out) = (PackedA::default(), PackedB::default(), vec![]);
                assert!(PackedA::pack(&w, m, k, pa, pb, &mut ap));
                assert!(PackedB::pack(&b, k, n, pa, pb, &mut bp));
                assert!(gemm(&ap, &bp, &mut out));
                let want = reference(&w, &b, m, k, n);
                let np = bp.np;
                for j in 0..m {
                    for c in 0..n {
                        let (got, r) = (out[j * np + c] as f64, want[j * n + c]);
                        // fp32 summation of k·parts exact products: |err| ≤ γ·Σ|products|.
                        let bound: f64 = (0..k)
                            .map(|kk| (w[kk * m + j] as f64 * b[kk * n + c] as f64).abs())
                            .sum::<f64>()
                            * (4 * k) as f64
                            * f32::EPSILON as f64
                            + 1e-30;
                        assert!(
                            (got - r).abs() <= bound,
                            "{m}x{k}x{n} {pa:?}/{pb:?} ({j},{c}): {got} vs {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn packing_bf16_bits_equals_packing_their_values() {
        let mut s = 3;
        for (k, n) in [(128, 512), (17, 33), (1, 1), (64, 16)] {
            let vals: Vec<f32> = (0..k * n)
                .map(|_| half::bf16::from_f32(lcg(&mut s)).to_f32())
                .collect();
            let bits: Vec<u16> = vals.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
            for a in [Parts::Exact, Parts::Split] {
                let (mut x, mut y) = (PackedB::default(), PackedB::default());
                assert!(PackedB::pack(&vals, k, n, a, Parts::Exact, &mut x));
                assert!(PackedB::pack_bits(&bits, k, n, a, &mut y));
                assert_eq!(x.bits, y.bits, "{k}x{n} {a:?}");
                assert_eq!((x.kp, x.np, x.parts), (y.kp, y.np, y.parts));
            }
        }
        assert!(!PackedB::pack_bits(
            &[0; 3],
            2,
            2,
            Parts::Exact,
            &mut PackedB::default()
        ));
    }

    #[test]
    fn packing_into_a_used_buffer_equals_packing_afresh() {
        let mut s = 11;
        let mut reused = PackedB::default();
        // Shapes and parts in turn, some repeated, so stale padding would show.
        for (k, n, a) in [
            (8, 20, Parts::Split),
            (8, 20, Parts::Exact),
            (128, 512, Parts::Exact),
            (128, 512, Parts::Exact),
            (7, 33, Parts::Exact),
            (8, 20, Parts::Exact),
            (7, 33, Parts::Split),
            (7, 33, Parts::Exact),
        ] {
            let bits: Vec<u16> = (0..k * n)
                .map(|_| (half::bf16::from_f32(lcg(&mut s)).to_bits()) | 1)
                .collect();
            let mut fresh = PackedB::default();
            assert!(PackedB::pack_bits(&bits, k, n, a, &mut fresh));
            assert!(PackedB::pack_bits(&bits, k, n, a, &mut reused));
            assert_eq!(fresh.bits, reused.bits, "{k}x{n} {a:?}");
            assert_eq!(
                (fresh.kp, fresh.np, fresh.parts),
                (reused.kp, reused.np, reused.parts)
            );
        }
    }

    /// The product added into a strided view block by block gives the bits of the dense
    /// product followed by `add_into`, for both `beta`s, unit and other column strides, and
    /// edge shapes; a view that does not fit is refused with nothing written.
    #[test]
    fn products_into_a_view_equal_the_dense_product_added() {
        if !amx_or_skip("the tile kernel into views") {
            return;
        }
        let mut s = 5;
        for (m, k, n) in [(128, 128, 512), (17, 33, 15), (128, 128, 48), (40, 64, 16)] {
            let bf = |s: &mut u64| half::bf16::from_f32(lcg(s)).to_f32();
            let w: Vec<f32> = (0..m * k).map(|_| bf(&mut s)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| bf(&mut s)).collect();
            let (mut ap, mut bp, mut dense) = (PackedA::default(), PackedB::default(), vec![]);
            assert!(PackedA::pack(&w, m, k, Parts::Exact, Parts::Exact, &mut ap));
            assert!(PackedB::pack(&b, k, n, Parts::Exact, Parts::Exact, &mut bp));
            assert!(gemm(&ap, &bp, &mut dense));
            for (cs, beta) in [(1, 0.0), (1, 1.0), (3, 1.0), (2, 0.0)] {
                let cv = super::super::View {
                    off: 5,
                    rs: n * cs + 7,
                    cs,
                };
                let len = 5 + (m - 1) * cv.rs + (n - 1) * cs + 1;
                let old: Vec<f32> = (0..len).map(|_| lcg(&mut s)).collect();
                let mut want = old.clone();
                assert!(super::super::add_into(
                    m,
                    n,
                    &dense,
                    bp.padded_columns(),
                    beta,
                    &mut want,
                    cv
                ));
                let mut got = old.clone();
                assert!(gemm_into(&ap, &bp, beta, &mut got, cv));
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} cs {cs} beta {beta}");
                let mut short = old[..len - 1].to_vec();
                assert!(!gemm_into(&ap, &bp, beta, &mut short, cv));
                assert_eq!(bits(&short), bits(&old[..len - 1]), "nothing written");
            }
        }
    }

    #[test]
    fn refuses_mismatched_or_oversized_operands() {
        let (mut ap, mut bp, mut out) = (PackedA::default(), PackedB::default(), vec![]);
        assert!(!PackedA::pack(
            &[0.0; 4],
            0,
            4,
            Parts::Exact,
            Parts::Exact,
            &mut ap
        ));
        assert!(!PackedA::pack(
            &[0.0; 4],
            2,
            4,
            Parts::Exact,
            Parts::Exact,
            &mut ap
        ));
        let w = vec![0.0; 300 * 2];
        assert!(!PackedA::pack(
            &w,
            2,
            300,
            Parts::Split,
            Parts::Split,
            &mut ap
        ));
        assert!(PackedA::pack(
            &[0.0; 8],
            2,
            4,
            Parts::Exact,
            Parts::Exact,
            &mut ap
        ));
        assert!(PackedB::pack(
            &[0.0; 16],
            4,
            4,
            Parts::Split,
            Parts::Exact,
            &mut bp
        ));
        assert!(
            !gemm(&ap, &bp, &mut out),
            "operands packed for different parts"
        );
        assert!(PackedB::pack(
            &[0.0; 12],
            3,
            4,
            Parts::Exact,
            Parts::Exact,
            &mut bp
        ));
        assert!(!gemm(&ap, &bp, &mut out), "different K");
    }
}
