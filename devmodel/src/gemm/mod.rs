//! The matrix products MATMUL runs on: a bounds-checked front end to a blocked SGEMM
//! (`matrixmultiply`, or on AVX-512F hosts its own kernel for the PE layout, `panels`, with
//! the same bits), so matmuls run on whole tiles straight out of SBUF/PSUM storage, and
//! (`amx`) bf16 tiles where the host has AMX, or (`dot`) bf16 panels on `VDPBF16PS` with the
//! SGEMM's bits; [`Path`] says which one a core uses.
#![allow(unsafe_code)]

pub mod amx;
pub mod dot;
pub mod narrow;
pub mod panels;
pub mod thin;

/// The environment variable that chooses the GEMM path: `portable` forces the SGEMM for every
/// MATMUL; `auto` or `amx` (or unset) uses AMX tiles for bf16 and fp8 operands where the host
/// has them. fp16 operands stay on the SGEMM: split into bf16 parts they would need four tile
/// products per product, and packing the parts cost more than the tiles saved
/// (`docs/performance.md`, "AMX"). Without AMX, `auto` runs bf16 × bf16 panels on
/// `VDPBF16PS` where it is faster than FMA (`dot::preferred`); `dot` asks for that wherever
/// the CPU has it.
pub const ENV: &str = "NEURON_EMU_GEMM";

/// Which kernel a core's MATMULs of bf16-representable operands run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// fp32 SGEMM on operands widened to fp32: every host.
    Portable,
    /// AMX-BF16 tiles (`amx`) for bf16 and fp8 operands: hosts that have them, by default.
    Amx,
    /// The SGEMM, with bf16 × bf16 panels on `VDPBF16PS` (`dot`): the same bits as
    /// `Portable`, faster where the host issues it as fast as FMA.
    Dot,
}

impl Path {
    /// The path `NEURON_EMU_GEMM` and the host give (read when a core's PE state is created
    /// or reset). An unknown value is reported once and treated as `auto`.
    pub fn from_env() -> Path {
        let v = std::env::var(ENV).unwrap_or_default();
        let v = v.trim();
        if !matches!(v, "" | "auto" | "portable" | "amx" | "dot") {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("{ENV}={v:?} is not portable, amx, dot or auto: using auto");
            });
        }
        if v == "dot" && !dot::available() {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!("{ENV}=dot: this host has no usable VDPBF16PS; using auto");
            });
        }
        match v {
            "portable" => Path::Portable,
            "dot" if dot::available() => Path::Dot,
            _ if amx::available() => Path::Amx,
            _ if dot::preferred() && dot::available() => Path::Dot,
            _ => Path::Portable,
        }
    }

    /// The tile parts of an operand type on this path, or None if it runs on the SGEMM.
    pub fn amx_parts(self, dt: neuron_isa::Dtype) -> Option<amx::Parts> {
        match (self, amx::Parts::of(dt)) {
            (Path::Amx, Some(amx::Parts::Exact)) => Some(amx::Parts::Exact),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Amx => "amx",
            Path::Dot => "bf16dot",
        }
    }
}

/// A strided f32 matrix view: element (r, c) at `data[off + r*rs + c*cs]`.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl View {
    /// Largest index touched by a `rows x cols` matrix, or None on overflow.
    pub(crate) fn last(&self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(self.off);
        }
        self.off
            .checked_add((rows - 1).checked_mul(self.rs)?)?
            .checked_add((cols - 1).checked_mul(self.cs)?)
    }
}

/// Whether the `m x k` A, `k x n` B and `m x n` C views lie inside slices of these lengths
/// (an empty matrix anywhere), and a non-empty C's rows and columns do not alias for a write
/// (`rs` or `cs` of 0 with more than one of them).
fn views_fit([m, k, n]: [usize; 3], lens: [usize; 3], views: [View; 3]) -> bool {
    let fits =
        |len: usize, v: &View, r, cl| v.last(r, cl).is_some_and(|l| l < len || r == 0 || cl == 0);
    let cv = views[2];
    fits(lens[0], &views[0], m, k)
        && fits(lens[1], &views[1], k, n)
        && fits(lens[2], &cv, m, n)
        && (m == 0 || n == 0 || !((m > 1 && cv.rs == 0) || (n > 1 && cv.cs == 0)))
}

/// `C[m x n] = A[m x k] * B[k x n] + beta * C`. Returns false (and does nothing) if any view
/// would leave its slice. `beta == 0` ignores C's old contents (NaN-safe).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    if !views_fit([m, k, n], [a.len(), b.len(), c.len()], [av, bv, cv]) {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    let as_isize = |x: usize| isize::try_from(x).ok();
    let (Some(rsa), Some(csa), Some(rsb), Some(csb), Some(rsc), Some(csc)) = (
        as_isize(av.rs),
        as_isize(av.cs),
        as_isize(bv.rs),
        as_isize(bv.cs),
        as_isize(cv.rs),
        as_isize(cv.cs),
    ) else {
        return false;
    };
    // A matrix-vector product: directly, with the SGEMM's bits (`narrow`).
    let p = narrow::Product {
        m,
        k,
        n,
        a,
        av,
        b,
        bv,
        beta,
    };
    if narrow::product(&p, c, cv) {
        return true;
    }
    // (`wrapping_add`: with k == 0 the offsets need not lie inside A and B, unread.)
    let (a, b, c) = (
        a.as_ptr().wrapping_add(av.off),
        b.as_ptr().wrapping_add(bv.off),
        c.as_mut_ptr().wrapping_add(cv.off),
    );
    // Large products are cut into column ranges for the data-path helpers (`fanout`): each
    // element's sum runs in the same order whichever range holds it, so the bits are the same.
    if panels::applies(m, k, n, av.rs, cv.cs) {
        let op = panels::Operands {
            a,
            acs: av.cs,
            b: panels::Moving::F32(b),
            brs: bv.rs,
            bcs: bv.cs,
            c,
            crs: cv.rs,
            pairs: None,
        };
        // SAFETY: `applies` held; every element the product names was bounds-checked above
        // (`views_fit`); C is an exclusive borrow apart from A and B.
        unsafe { panel_pieces(m, k, n, op, beta) };
        return true;
    }
    let cols = column_piece(m, k, n);
    let pieces = n.div_ceil(cols);
    // (The pieces only read A and B and write disjoint columns of C.)
    let (ap, bp, cp) = (
        crate::fanout::SharedPtr(a as *mut f32),
        crate::fanout::SharedPtr(b as *mut f32),
        crate::fanout::SharedPtr(c),
    );
    let piece = |i: usize| {
        let (c0, w) = (i * cols, cols.min(n - i * cols));
        // SAFETY: every index the kernel touches was bounds-checked above against the
        // slices' lengths; A/B are shared borrows and C is a distinct exclusive borrow, so
        // no aliasing; pieces write disjoint columns of C.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                w,
                1.0,
                ap.get(),
                rsa,
                csa,
                bp.get().add(c0 * bv.cs),
                rsb,
                csb,
                beta,
                cp.get().add(c0 * cv.cs),
                rsc,
                csc,
            );
        }
    };
    if pieces <= 1 {
        piece(0);
    } else {
        crate::fanout::run(pieces, &piece);
    }
    true
}

/// A 16-bit float type B may be given as ([`sgemm_16`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Bf16,
    F16,
}

/// [`sgemm`] with B as bf16 or fp16 bits (a moving tensor read where it lies in storage), on
/// the AVX-512F panel kernel (`panels`): the same bits as [`sgemm`] on the widened values,
/// with no widened copy of B. Where `pairs` packs A (bf16 weights on the `dot` path), bf16
/// panels run on `VDPBF16PS`. The multiply-adds that ran there, or None (nothing written) if
/// a view would leave its slice or the kernel does not take the product
/// (`panels::applies`: the caller then widens B).
#[allow(clippy::too_many_arguments)]
pub fn sgemm_16(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    av: View,
    b: (Half, &[u16]),
    bv: View,
    beta: f32,
    c: &mut [f32],
    cv: View,
    pairs: Option<&dot::PackedA>,
) -> Option<u64> {
    let (half, b) = b;
    if !panels::applies(m, k, n, av.rs, cv.cs)
        || !views_fit([m, k, n], [a.len(), b.len(), c.len()], [av, bv, cv])
    {
        return None;
    }
    // Packed pairs only for this very A: the PE layout (`av` dense from 0) and shape.
    let pairs = match (half, pairs) {
        (Half::Bf16, Some(p)) if av.off == 0 && av.cs == m && dot::available() => {
            p.view().filter(|v| v.m == m && p.k() == k)
        }
        _ => None,
    };
    let op = panels::Operands {
        a: a[av.off..].as_ptr(),
        acs: av.cs,
        b: match half {
            Half::Bf16 => panels::Moving::Bf16(b[bv.off..].as_ptr()),
            Half::F16 => panels::Moving::F16(b[bv.off..].as_ptr()),
        },
        brs: bv.rs,
        bcs: bv.cs,
        c: c[cv.off..].as_mut_ptr(),
        crs: cv.rs,
        pairs,
    };
    // SAFETY: `applies` held; every element the product names was bounds-checked above
    // (`views_fit`); C is an exclusive borrow apart from A and B; `pairs` packs this A.
    let on_dot = unsafe { panel_pieces(m, k, n, op, beta) };
    Some((on_dot * panels::NR * m * k) as u64)
}

/// A product [`panels::applies`] accepts, cut for the data-path helpers: by output rows
/// where B is at most [`ROW_PIECES_MAX_N`] columns, else into column ranges as [`sgemm`] cuts
/// its own (whole panels: `column_piece` gives multiples of 32 or all `n`). Returns the
/// 32-column panels (of all `m` rows) that ran on `VDPBF16PS`.
///
/// Why rows for narrow products: every column piece reads all of A, and a pass pair's
/// weights were just written into SBUF by the device thread (a DMA), so a helper's column
/// piece waited on the other core for each of their lines; a row piece reads only its rows'
/// weights, and B (128 columns) is small (`tests::shared_products_host_cost`).
///
/// # Safety
/// As `panels::product` for the whole `m x k x n` product.
unsafe fn panel_pieces(m: usize, k: usize, n: usize, op: panels::Operands, beta: f32) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cols = column_piece(m, k, n);
    let pieces = n.div_ceil(cols);
    // Panels on `VDPBF16PS`, in units of one panel of `MR` rows (row pieces see a part of
    // each panel).
    let blocks = AtomicUsize::new(0);
    if pieces <= 1 {
        // SAFETY: the caller's contract.
        unsafe { panels::product(m, k, n, &op, beta) }
    } else if n <= ROW_PIECES_MAX_N {
        // Whole blocks of rows (`applies`: m is a multiple of `MR`), cut as other steps cut
        // their partitions.
        let work = (m as u64) * (k as u64) * (n as u64);
        let rows = crate::fanout::rows_per_piece(m / panels::MR, work) * panels::MR;
        let piece = |i: usize| {
            let (r0, h) = (i * rows, rows.min(m - i * rows));
            // SAFETY: the caller's contract for the whole product covers its rows `r0..r0 +
            // h`, whole 8-row blocks; pieces write disjoint rows of C.
            let on = unsafe { panels::product(h, k, n, &op.at_row(r0), beta) };
            blocks.fetch_add(on * (h / panels::MR), Ordering::Relaxed);
        };
        crate::fanout::run(m.div_ceil(rows), &piece);
        blocks.into_inner() / (m / panels::MR)
    } else {
        let piece = |i: usize| {
            let (c0, w) = (i * cols, cols.min(n - i * cols));
            // SAFETY: the caller's contract for the whole product covers its columns `c0..c0
            // + w`, a whole number of panels; pieces write disjoint columns of C.
            let on = unsafe { panels::product(m, k, w, &op.at_column(c0), beta) };
            blocks.fetch_add(on, Ordering::Relaxed);
        };
        crate::fanout::run(pieces, &piece);
        blocks.into_inner()
    }
}

/// The widest B [`panel_pieces`] cuts by rows.
const ROW_PIECES_MAX_N: usize = 128;

/// [`sgemm`] with A as bf16 bits in the PE layout (`narrow::product_bits`, where
/// `narrow::bits_apply` holds). False (nothing written) if a view would leave its slice or
/// the product is not one that path takes.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_bits(
    m: usize,
    k: usize,
    n: usize,
    a: &[u16],
    av: View,
    b: &[f32],
    bv: View,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    if !views_fit([m, k, n], [a.len(), b.len(), c.len()], [av, bv, cv]) {
        return false;
    }
    let p = narrow::Product {
        m,
        k,
        n,
        a,
        av,
        b,
        bv,
        beta,
    };
    narrow::product_bits(&p, c, cv)
}

/// The stationary matrix of a narrow product whose moving tensor is bf16 bits: f32, or bf16
/// bits in the PE layout (`narrow::product_bits`).
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

/// `C = A·B + β·C` for a matrix-vector product (`narrow`: 1 to 8 columns of B) whose B is
/// bf16 bits read straight from storage: the same bits as [`sgemm`] on the widened values.
/// False (nothing written) if a view would leave its slice or the narrow path does not take
/// the product (a wider B, no FMA, bf16 weights outside `narrow::bits_apply`).
#[allow(clippy::too_many_arguments)]
pub fn narrow_bf16(
    m: usize,
    k: usize,
    n: usize,
    a: Weights<'_>,
    av: View,
    b: &[u16],
    bv: View,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    let a_len = match a {
        Weights::F32(a) => a.len(),
        Weights::Bf16(a) => a.len(),
    };
    if n == 0 || !views_fit([m, k, n], [a_len, b.len(), c.len()], [av, bv, cv]) {
        return false;
    }
    match a {
        Weights::F32(a) => narrow::product(
            &narrow::Product {
                m,
                k,
                n,
                a,
                av,
                b,
                bv,
                beta,
            },
            c,
            cv,
        ),
        Weights::Bf16(a) => narrow::product_bits(
            &narrow::Product {
                m,
                k,
                n,
                a,
                av,
                b,
                bv,
                beta,
            },
            c,
            cv,
        ),
    }
}

/// The columns of one piece of an `m x k x n` product: all `n` where it stays on one
/// thread, else one piece per worker (`fanout::per_piece`), in multiples of 32 (the panel
/// kernel's panel) and at least 64 wide (under `matrixmultiply` each piece packs the whole A
/// again: 128 x 128 of it costs about a tenth of a 128 x 128 x 64 product).
fn column_piece(m: usize, k: usize, n: usize) -> usize {
    let work = (m as u64) * (k as u64) * (n as u64);
    if work < crate::fanout::MIN_WORK || n < 128 {
        return n.max(1);
    }
    crate::fanout::per_piece(n)
        .next_multiple_of(32)
        .clamp(64, n)
}

/// `C = beta·C + P` for a dense product `P` (`m x n` in rows of `pitch`), into the strided
/// view `cv` of `c`: how an AMX product reaches PSUM. False (and nothing written) if the
/// view leaves `c` or `P` is too short. `beta == 0` ignores C's old contents (NaN-safe).
#[allow(clippy::too_many_arguments)]
pub fn add_into(
    m: usize,
    n: usize,
    p: &[f32],
    pitch: usize,
    beta: f32,
    c: &mut [f32],
    cv: View,
) -> bool {
    if m == 0 || n == 0 {
        return true;
    }
    let fits = cv.last(m, n).is_some_and(|l| l < c.len());
    if !fits || pitch < n || p.len() < (m - 1) * pitch + n {
        return false;
    }
    for (j, row) in p.chunks(pitch).take(m).enumerate() {
        let base = cv.off + j * cv.rs;
        if cv.cs == 1 {
            let dst = &mut c[base..base + n];
            if beta == 0.0 {
                dst.copy_from_slice(&row[..n]);
            } else {
                dst.iter_mut().zip(&row[..n]).for_each(|(d, x)| *d += *x);
            }
        } else {
            for (col, x) in row[..n].iter().enumerate() {
                let at = base + col * cv.cs;
                c[at] = if beta == 0.0 { *x } else { c[at] + *x };
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_and_rejects_oob() {
        let (m, k, n) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 1.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut c = vec![1.0f32; m * n];
        assert!(sgemm(
            m,
            k,
            n,
            &a,
            View {
                off: 0,
                rs: k,
                cs: 1
            },
            &b,
            View {
                off: 0,
                rs: n,
                cs: 1
            },
            1.0,
            &mut c,
            View {
                off: 0,
                rs: n,
                cs: 1
            }
        ));
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|x| a[i * k + x] * b[x * n + j]).sum::<f32>();
                assert!((c[i * n + j] - want).abs() < 1e-5);
            }
        }
        assert!(!sgemm(
            m,
            k,
            n,
            &a,
            View {
                off: 1,
                rs: k,
                cs: 1
            },
            &b,
            View {
                off: 0,
                rs: n,
                cs: 1
            },
            0.0,
            &mut c,
            View {
                off: 0,
                rs: n,
                cs: 1
            }
        ));
    }
    /// Cutting a product into column or row pieces for the helpers gives the same bits as
    /// one piece, for edge widths and strided views alike (reference: the same product with
    /// fan-out off). 128 x 128 x 128 and 96 x 192 x 128 take the panel kernel's row pieces
    /// where the host has AVX-512F; 128 x 128 x 512 its column pieces.
    #[test]
    fn fanned_out_products_are_bit_identical() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed >> 8) as f32 / (1 << 23) as f32 - 0.5
        };
        for (m, k, n) in [
            (128, 128, 512),
            (128, 128, 100),
            (77, 128, 517),
            (128, 96, 400),
            (128, 128, 133),
            (96, 192, 133),
        ] {
            let a: Vec<f32> = (0..k * m).map(|_| next()).collect();
            // B rows and C rows strided as partitions are (row pitch above the width).
            let (bp, cp) = (n + 40, n + 24);
            let b: Vec<f32> = (0..k * bp).map(|_| next()).collect();
            let c0: Vec<f32> = (0..m * cp).map(|_| next()).collect();
            let views = (
                View {
                    off: 0,
                    rs: 1,
                    cs: m,
                },
                View {
                    off: 3,
                    rs: bp,
                    cs: 1,
                },
                View {
                    off: 5,
                    rs: cp,
                    cs: 1,
                },
            );
            for beta in [0.0, 1.0] {
                let run = |fan: bool| {
                    let mut c = c0.clone();
                    let mut cc = c.clone();
                    crate::fanout::with(fan, || {
                        assert!(sgemm(
                            m,
                            k,
                            n - 5,
                            &a,
                            views.0,
                            &b,
                            views.1,
                            beta,
                            &mut cc,
                            views.2
                        ));
                        crate::fanout::ignoring_placement(|| {
                            if fan && crate::fanout::workers() > 1 && n - 5 >= 128 {
                                assert!(
                                    column_piece(m, k, n - 5) < n - 5,
                                    "{m}x{k}x{n} was not cut"
                                );
                            }
                        });
                    });
                    c.copy_from_slice(&cc);
                    c.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
                };
                assert_eq!(run(true), run(false), "{m}x{k}x{n} beta {beta}");
            }
        }
    }

    /// One matrix-vector product of a bf16 moving tensor given as bits (B rows `rs` apart,
    /// C rows `cpitch` apart) against the blocked SGEMM on its widened values, bit for bit:
    /// with f32 weights, and with bf16 weights as bits where that path takes `m` (whole
    /// 64-row chunks). Operands from `seed`.
    #[allow(clippy::too_many_arguments)]
    fn check_narrow_bf16(
        m: usize,
        k: usize,
        n: usize,
        rs: usize,
        cpitch: usize,
        beta: f32,
        seed: u64,
    ) {
        let mut t = seed;
        let (w_bits, w_f32) = amx::tests::bf16_values(&mut t, m * k, 4.0);
        let (b_bits, b_f32) = amx::tests::bf16_values(&mut t, 1 + (k - 1) * rs + n, 4.0);
        let av = View {
            off: 0,
            rs: 1,
            cs: m,
        };
        let bv = View { off: 1, rs, cs: 1 };
        let cv = View {
            off: 1,
            rs: cpitch,
            cs: 1,
        };
        let old: Vec<f32> = (0..1 + m * cpitch).map(|i| i as f32 * 0.25).collect();
        let mut want = old.clone();
        let p = narrow::Product {
            m,
            k,
            n,
            a: &w_f32[..],
            av,
            b: &b_f32[..],
            bv,
            beta,
        };
        narrow::tests::blocked(&p, &mut want, cv);
        let mut forms = vec![Weights::F32(&w_f32)];
        if m.is_multiple_of(64) {
            forms.push(Weights::Bf16(&w_bits));
        }
        for a in forms {
            let mut got = old.clone();
            assert!(
                narrow_bf16(m, k, n, a, av, &b_bits, bv, beta, &mut got, cv),
                "seed {seed}"
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{m}x{k}x{n} beta {beta} {a:?}");
        }
    }

    /// A bf16 moving tensor given as bits gives the bits of the SGEMM on its widened values,
    /// with f32 weights and with bf16 weights as bits, both β, B rows strided as storage
    /// partitions are; a wider B or a view that leaves its slice is refused, C untouched.
    #[test]
    fn narrow_products_of_bf16_bits_equal_the_sgemm_on_their_values() {
        if !narrow::available() {
            eprintln!("SKIPPED: this host has no FMA: the narrow path is off (SGEMM only)");
            return;
        }
        for (m, k, n) in [(128, 128, 1), (128, 128, 2), (64, 7, 8)] {
            for beta in [0.0, 1.0] {
                check_narrow_bf16(m, k, n, 37, n + 2, beta, 23);
            }
        }
        let ones = vec![0x3f80u16; 64 * 64];
        let f = vec![1.0f32; 64 * 64];
        let mut c = vec![2.0f32; 64 * 9];
        let v = |rs, cs| View { off: 0, rs, cs };
        let go = |n, b: &[u16], c: &mut [f32]| {
            narrow_bf16(
                64,
                64,
                n,
                Weights::F32(&f),
                v(1, 64),
                b,
                v(n, 1),
                0.0,
                c,
                v(n, 1),
            )
        };
        assert!(!go(9, &ones, &mut c), "9 columns");
        assert!(!go(8, &ones[..64 * 8 - 1], &mut c), "B leaves its slice");
        assert!(!go(8, &ones, &mut c[..64 * 8 - 1]), "C leaves its slice");
        assert!(c.iter().all(|x| *x == 2.0), "C untouched");
    }

    /// Random shapes (k past the SGEMM's 256-row block too), strides and both β (a seeded
    /// generator, 80 cases): a bf16 moving tensor as bits gives the blocked SGEMM's bits on
    /// its values, with f32 weights and, where the bits path takes them, bf16 weights.
    #[test]
    fn random_narrow_bf16_products_equal_the_blocked_sgemm() {
        if !narrow::available() {
            eprintln!("SKIPPED: this host has no FMA: the narrow path is off (SGEMM only)");
            return;
        }
        let mut s = 91u64;
        let mut below = |n: usize| ((amx::tests::lcg(&mut s) + 0.5) * n as f32) as usize % n;
        for case in 0..80 {
            let m = if case % 2 == 1 {
                64 * (1 + below(3))
            } else {
                1 + below(130)
            };
            let (k, n) = (1 + below(300), 1 + below(narrow::MAX_N));
            let (rs, cpitch) = (n + below(40), n + below(3));
            let beta = if case % 3 == 0 { 0.0 } else { 1.0 };
            check_narrow_bf16(m, k, n, rs, cpitch, beta, case + 1000);
        }
    }

    /// A bf16 B read as bits by the panel kernel, on one thread and in column pieces shared
    /// with the data-path helpers: the bits of the SGEMM on the widened values (B rows a
    /// partition apart, C rows as PSUM's, both β). Shapes the kernel does not take, and views
    /// that leave their slices, are refused with nothing written.
    #[test]
    fn bf16_panels_equal_the_sgemm_on_their_values() {
        if !panels::available() {
            eprintln!("SKIPPED: no AVX-512F on this host; bf16 B is always widened first");
            assert!(sgemm_16(
                8,
                1,
                32,
                &[0.0; 8],
                v(0, 1, 8),
                (Half::Bf16, &[0; 32]),
                v(0, 32, 1),
                0.0,
                &mut [0.0; 256],
                v(0, 32, 1),
                None
            )
            .is_none());
            return;
        }
        let (m, k, n) = (128, 128, 512);
        let mut t = 5u64;
        let (_, a) = amx::tests::bf16_values(&mut t, m * k, 4.0);
        let rs = 700;
        let (b_bits, b_f32) = amx::tests::bf16_values(&mut t, 3 + (k - 1) * rs + n, 4.0);
        let (av, bv, cv) = (v(0, 1, m), v(3, rs, 1), v(1, n + 5, 1));
        let old: Vec<f32> = (0..1 + m * cv.rs).map(|i| i as f32 * 0.5).collect();
        for beta in [0.0, 1.0] {
            let mut want = old.clone();
            assert!(sgemm(m, k, n, &a, av, &b_f32, bv, beta, &mut want, cv));
            let mut got = old.clone();
            assert!(sgemm_16(
                m,
                k,
                n,
                &a,
                av,
                (Half::Bf16, &b_bits),
                bv,
                beta,
                &mut got,
                cv,
                None
            )
            .is_some());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "beta {beta}");
        }
        let mut c = old.clone();
        assert!(
            sgemm_16(
                m,
                k,
                n - 16,
                &a,
                av,
                (Half::Bf16, &b_bits),
                bv,
                0.0,
                &mut c,
                cv,
                None
            )
            .is_none(),
            "part panel"
        );
        assert!(
            sgemm_16(
                m,
                300,
                n,
                &a,
                av,
                (Half::Bf16, &b_bits),
                bv,
                0.0,
                &mut c,
                cv,
                None
            )
            .is_none(),
            "two K blocks"
        );
        assert!(
            sgemm_16(
                m,
                k,
                n,
                &a,
                av,
                (Half::Bf16, &b_bits[..b_bits.len() - 1]),
                bv,
                0.0,
                &mut c,
                cv,
                None
            )
            .is_none(),
            "B short"
        );
        assert!(
            sgemm_16(
                m,
                k,
                n,
                &a,
                av,
                (Half::Bf16, &b_bits),
                bv,
                0.0,
                &mut c[..cv.off + (m - 1) * cv.rs + n - 1],
                cv,
                None
            )
            .is_none(),
            "C short"
        );
        assert_eq!(c, old, "nothing written");
    }

    /// Random products the panel kernel takes (a seeded generator, 60 cases: rows in 8s,
    /// K up to one block, columns in 32s up to a full PSUM bank so some are cut into column
    /// pieces for the helpers, strides and offsets as storage gives them, both β), through
    /// the SGEMM front end with f32 B and through `sgemm_16` with bf16 and fp16 B:
    /// `matrixmultiply`'s bits on the same values.
    #[test]
    fn random_panel_products_equal_matrixmultiply() {
        if !panels::available() {
            eprintln!("SKIPPED: no AVX-512F on this host; matrixmultiply runs every product");
            return;
        }
        let mut s = 4242u64;
        let mut below = |n: usize| ((amx::tests::lcg(&mut s) + 0.5) * n as f32) as usize % n;
        for case in 0..60u64 {
            let (m, k, n) = (8 * (1 + below(16)), 1 + below(256), 32 * (1 + below(16)));
            let av = v(below(5), 1, m + below(9));
            let bv = v(below(7), n + below(300), 1);
            let cv = v(below(3), n + below(40), 1);
            let beta = if case % 2 == 0 { 0.0 } else { 1.0 };
            let mut t = case + 99;
            let (_, a) = amx::tests::bf16_values(&mut t, av.off + k * av.cs, 4.0);
            let (b_bits, b) = amx::tests::bf16_values(&mut t, bv.off + k * bv.rs, 4.0);
            let old: Vec<f32> = (0..cv.off + m * cv.rs).map(|i| (i % 13) as f32).collect();
            let mut want = old.clone();
            let p = narrow::Product {
                m,
                k,
                n,
                a: &a,
                av,
                b: &b,
                bv,
                beta,
            };
            narrow::tests::blocked(&p, &mut want, cv);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let mut got = old.clone();
            assert!(sgemm(m, k, n, &a, av, &b, bv, beta, &mut got, cv));
            assert_eq!(bits(&got), bits(&want), "case {case}: {m}x{k}x{n}, f32 B");
            // B as 16-bit bits against the SGEMM on `want`, their widened values' product.
            let check16 = |b16: (Half, &[u16]), want: &[f32], what: &str| {
                let mut got = old.clone();
                let on_dot = sgemm_16(m, k, n, &a, av, b16, bv, beta, &mut got, cv, None);
                assert_eq!(on_dot, Some(0), "case {case}: no pairs, no VDPBF16PS");
                assert_eq!(bits(&got), bits(want), "case {case}: {m}x{k}x{n}, {what} B");
            };
            check16((Half::Bf16, &b_bits), &want, "bf16");
            // The weights packed as pairs (`dot`, the PE layout from 0), where the host runs
            // them: every panel on VDPBF16PS, the same bits.
            let compact: Vec<f32> = (0..k * m)
                .map(|i| a[av.off + (i / m) * av.cs + i % m])
                .collect();
            let mut pairs = dot::PackedA::default();
            assert!(pairs.ensure(&compact, m, k));
            let mut got = old.clone();
            let b16 = (Half::Bf16, &b_bits[..]);
            let on_dot = sgemm_16(
                m,
                k,
                n,
                &compact,
                v(0, 1, m),
                b16,
                bv,
                beta,
                &mut got,
                cv,
                Some(&pairs),
            );
            let all = (m * k * n) as u64;
            assert_eq!(
                on_dot,
                Some(if dot::available() { all } else { 0 }),
                "case {case}"
            );
            assert_eq!(
                bits(&got),
                bits(&want),
                "case {case}: {m}x{k}x{n}, bf16 B on pairs"
            );
            // The same values as fp16 (rounded to it where they differ: the fp16 bits widened
            // are what the product must use).
            let h: Vec<u16> = b
                .iter()
                .map(|x| half::f16::from_f32(*x).to_bits())
                .collect();
            let hw: Vec<f32> = h
                .iter()
                .map(|x| half::f16::from_bits(*x).to_f32())
                .collect();
            let mut want = old.clone();
            narrow::tests::blocked(&narrow::Product { b: &hw, ..p }, &mut want, cv);
            check16((Half::F16, &h), &want, "fp16");
        }
    }

    /// Measurement, not a check: a pass pair's product as `akc-*` issues them (128 x 128 x
    /// 128 fp32, weights a new block each time, a partition apart in an SBUF-sized buffer,
    /// moving tensors and PSUM accumulation groups of four rotating) and a 128 x 128 x 512
    /// one, on this thread alone and shared with the data-path helpers, median of 3,000
    /// each; with the weights as they stay between products, and with all sixteen blocks
    /// rewritten by this thread every sixteen products (as a DMA brings them into SBUF in a
    /// kernel: a helper then reads lines another core holds modified). Prints which kernel
    /// ran and how many threads shared. `cargo test --release -p neuron-devmodel --lib
    /// shared_products_host_cost -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn shared_products_host_cost() {
        let (ps, pp) = (65_552usize, 4_112usize); // SBUF / PSUM partition strides, in f32
        let mut sbuf: Vec<f32> = (0..128 * ps).map(|i| (i % 977) as f32 * 1e-3).collect();
        let mut psum = vec![0f32; 128 * pp];
        let kernel = if panels::available() {
            "AVX-512F panel kernel"
        } else {
            "matrixmultiply (no AVX-512F)"
        };
        eprintln!(
            "{kernel}; {} thread(s) share a product",
            crate::fanout::with(true, crate::fanout::workers)
        );
        for rewritten in [false, true] {
            for n in [128usize, 512] {
                let mut medians = Vec::new();
                for shared in [false, true] {
                    let mut ns: Vec<u128> = crate::fanout::with(shared, || {
                        (0..3_000usize)
                            .map(|it| {
                                if rewritten && it % 16 == 0 {
                                    for r in 0..128 {
                                        let o = r * ps + 6_676;
                                        let blocks = &mut sbuf[o..o + 16 * 128];
                                        blocks.iter_mut().for_each(|x| *x = -*x);
                                    }
                                }
                                let weights = v(6_676 + 128 * (it % 16), 1, ps);
                                let moving = v(4_096 + 128 * (it % 4), ps, 1);
                                let dst = v(2_048 + 128 * ((it / 4) % 4), pp, 1);
                                let beta = if it % 4 == 0 { 0.0 } else { 1.0 };
                                let t = std::time::Instant::now();
                                let ok = sgemm(
                                    128, 128, n, &sbuf, weights, &sbuf, moving, beta, &mut psum,
                                    dst,
                                );
                                assert!(ok);
                                t.elapsed().as_nanos()
                            })
                            .collect()
                    });
                    ns.sort_unstable();
                    medians.push(ns[ns.len() / 2]);
                }
                eprintln!(
                    "128 x 128 x {n}, weights {}: one thread {:.1} us, shared {:.1} us ({:.2}x)",
                    if rewritten {
                        "just rewritten by this thread"
                    } else {
                        "as they were"
                    },
                    medians[0] as f64 / 1e3,
                    medians[1] as f64 / 1e3,
                    medians[0] as f64 / medians[1].max(1) as f64
                );
            }
        }
    }

    fn v(off: usize, rs: usize, cs: usize) -> View {
        View { off, rs, cs }
    }
}
