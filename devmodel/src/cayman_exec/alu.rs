//! The arithmetic of the data path: ALU codes, elementwise and reducing loops, the blocked
//! transpose, and the identity test a transposing MATMUL uses.
// The transposes' AVX blocks (`blocks_avx`); every unsafe block has a SAFETY note.
#![allow(unsafe_code)]

use super::{CaymanInstr, OpFault};
use crate::gemm::View;

/// ALU codes seen in the corpus (`docs/isa/cayman.md` §6): 0 BYPASS, 4 ADD, 6 MULTIPLY, 8 MAX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Alu {
    Bypass,
    Add,
    Mul,
    Max,
}

impl Alu {
    pub(super) fn of(code: u64, ci: &CaymanInstr, field: &str) -> Result<Alu, OpFault> {
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
pub(super) fn alu_zip(op: Alu, x: &mut [f32], y: &[f32]) {
    let it = x.iter_mut().zip(y);
    match op {
        Alu::Bypass => {}
        Alu::Add => it.for_each(|(a, b)| *a += *b),
        Alu::Mul => it.for_each(|(a, b)| *a *= *b),
        Alu::Max => it.for_each(|(a, b)| *a = a.max(*b)),
    }
}

/// `x[i] = op(x[i], s)`.
pub(super) fn alu_scalar(op: Alu, x: &mut [f32], s: f32) {
    match op {
        Alu::Bypass => {}
        Alu::Add => x.iter_mut().for_each(|a| *a += s),
        Alu::Mul => x.iter_mut().for_each(|a| *a *= s),
        Alu::Max => x.iter_mut().for_each(|a| *a = a.max(s)),
    }
}

/// Reduce a non-empty row. Sums run in eight interleaved partial sums (combined pairwise):
/// the hardware's summation order is not documented, and this order vectorises.
pub(super) fn alu_reduce(op: Alu, row: &[f32]) -> f32 {
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
pub(super) fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    transpose_into(src, rows, cols, dst, 0, rows, false);
}

/// `dst[off + j * pitch + c] = src[c * cols + j]` (`+=` when `accumulate`) for a
/// `rows x cols` source, in 8 x 8 blocks: a transpose written straight into strided rows (a
/// PE transpose into PSUM). False, and nothing written, if `src` is short or a row would
/// leave `dst`.
pub(super) fn transpose_into(
    src: &[f32],
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    off: usize,
    pitch: usize,
    accumulate: bool,
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let last = (cols - 1)
        .checked_mul(pitch)
        .and_then(|x| x.checked_add(off))
        .and_then(|x| x.checked_add(rows));
    if src.len() < rows * cols || pitch < rows || last.is_none_or(|l| l > dst.len()) {
        return false;
    }
    let put = |d: &mut f32, v: f32| *d = if accumulate { *d + v } else { v };
    let (rb, cb) = (rows - rows % B, cols - cols % B);
    #[cfg(target_arch = "x86_64")]
    let wide = std::is_x86_feature_detected!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    let wide = false;
    if wide {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX detected just above; the bounds were checked above (every block's
        // source rows lie in `src`, its destination rows in `dst`).
        unsafe {
            blocks_avx(src, cols, rb, cb, dst, off, pitch, accumulate)
        };
    } else {
        blocks(src, cols, rb, cb, dst, off, pitch, accumulate);
    }
    // Edges (only when a dimension is not a multiple of 8): the last columns of the blocked
    // rows, then every column of the last rows.
    for c in 0..rb {
        for j in cb..cols {
            put(&mut dst[off + j * pitch + c], src[c * cols + j]);
        }
    }
    for c in rb..rows {
        for j in 0..cols {
            put(&mut dst[off + j * pitch + c], src[c * cols + j]);
        }
    }
    true
}

/// The transposes' block size.
const B: usize = 8;

/// The full 8 x 8 blocks of [`transpose_into`] (`rb`, `cb`: the rows and columns they cover),
/// element by element. The caller has checked the bounds.
#[allow(clippy::too_many_arguments)]
fn blocks(
    src: &[f32],
    cols: usize,
    rb: usize,
    cb: usize,
    dst: &mut [f32],
    off: usize,
    pitch: usize,
    accumulate: bool,
) {
    for c0 in (0..rb).step_by(B) {
        for j0 in (0..cb).step_by(B) {
            let mut t = [[0f32; B]; B];
            for (i, r) in t.iter_mut().enumerate() {
                r.copy_from_slice(&src[(c0 + i) * cols + j0..][..B]);
            }
            for j in 0..B {
                let d = &mut dst[off + (j0 + j) * pitch + c0..][..B];
                for i in 0..B {
                    d[i] = if accumulate { d[i] + t[i][j] } else { t[i][j] };
                }
            }
        }
    }
}

/// [`blocks`] with each block transposed in eight AVX registers (unpack, shuffle, lane
/// permute): the same values moved, and the same single IEEE add when accumulating, so the
/// same bits (`tests::avx_blocks_equal_the_element_loop`).
///
/// # Safety
/// The CPU must have AVX, and the caller must have checked that `src` holds `rb` rows of
/// `cols` and that row `j0 + j` of every block, `off + (j0 + j) * pitch + c0 .. + 8`, lies in
/// `dst` (as [`transpose_into`] does).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocks_avx(
    src: &[f32],
    cols: usize,
    rb: usize,
    cb: usize,
    dst: &mut [f32],
    off: usize,
    pitch: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    debug_assert!(rb == 0 || cb == 0 || (rb - 1) * cols + cb <= src.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    for c0 in (0..rb).step_by(B) {
        for j0 in (0..cb).step_by(B) {
            // SAFETY (all loads and stores below): inside the bounds the caller checked.
            let r = |i: usize| _mm256_loadu_ps(s.add((c0 + i) * cols + j0));
            let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
            let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            // Columns 0-3 of rows 0-3 (and 4-7 in the upper lanes), then of rows 4-7.
            let a = [
                _mm256_shuffle_ps::<0x44>(t0, t2),
                _mm256_shuffle_ps::<0xee>(t0, t2),
                _mm256_shuffle_ps::<0x44>(t1, t3),
                _mm256_shuffle_ps::<0xee>(t1, t3),
            ];
            let b = [
                _mm256_shuffle_ps::<0x44>(t4, t6),
                _mm256_shuffle_ps::<0xee>(t4, t6),
                _mm256_shuffle_ps::<0x44>(t5, t7),
                _mm256_shuffle_ps::<0xee>(t5, t7),
            ];
            for j in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(a[j], b[j]);
                let hi = _mm256_permute2f128_ps::<0x31>(a[j], b[j]);
                for (col, v) in [(j, lo), (j + 4, hi)] {
                    let p = d.add(off + (j0 + col) * pitch + c0);
                    let v = if accumulate {
                        _mm256_add_ps(_mm256_loadu_ps(p), v)
                    } else {
                        v
                    };
                    _mm256_storeu_ps(p, v);
                }
            }
        }
    }
}

/// Whether the `n x n` matrix at `view` in `m` is the identity (a transpose's moving tensor).
pub(super) fn is_identity(m: &[f32], view: View, n: usize) -> bool {
    // ±0 has no bits outside the sign: OR-ing the rest of each row's bits is one pass that
    // vectorizes (an early-exit `all` does not), and a transpose's identity is the common case.
    let zeros = |xs: &[f32]| xs.iter().fold(0u32, |acc, v| acc | (v.to_bits() << 1)) == 0;
    (0..n).all(|i| {
        let at = view.off + i * view.rs;
        if view.cs == 1 {
            m.get(at..at + n)
                .is_some_and(|row| row[i] == 1.0 && zeros(&row[..i]) && zeros(&row[i + 1..]))
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
pub(super) fn hi_part(w: f32) -> f32 {
    f32::from_bits(w.to_bits() & 0xFFFF_0000)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn transpose_into_writes_strided_rows_and_accumulates() {
        for (rows, cols) in [(128, 128), (16, 8), (13, 21), (1, 9), (8, 3)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5).collect();
            let (off, pitch) = (3, rows + 5);
            let len = off + (cols - 1) * pitch + rows;
            let old: Vec<f32> = (0..len + 2).map(|i| i as f32).collect();
            for accumulate in [false, true] {
                let mut dst = old.clone();
                assert!(transpose_into(
                    &src, rows, cols, &mut dst, off, pitch, accumulate
                ));
                let mut want = old.clone();
                for c in 0..rows {
                    for j in 0..cols {
                        let at = off + j * pitch + c;
                        let v = src[c * cols + j];
                        want[at] = if accumulate { old[at] + v } else { v };
                    }
                }
                assert_eq!(dst, want, "{rows}x{cols} accumulate {accumulate}");
            }
            // A destination one element short, a pitch under a row, or a short source:
            // refused, nothing written.
            let mut short = old[..len - 1].to_vec();
            assert!(!transpose_into(
                &src, rows, cols, &mut short, off, pitch, false
            ));
            assert_eq!(short, old[..len - 1].to_vec());
            let mut dst = old.clone();
            assert!(!transpose_into(
                &src,
                rows,
                cols,
                &mut dst,
                off,
                rows - 1,
                false
            ));
            assert!(!transpose_into(
                &src[1..],
                rows,
                cols,
                &mut dst,
                off,
                pitch,
                false
            ));
        }
    }

    /// The AVX blocks move the element loop's bits, overwriting and accumulating (NaN,
    /// -0, subnormals included), where the host has AVX.
    #[test]
    fn avx_blocks_equal_the_element_loop() {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::is_x86_feature_detected!("avx") {
                eprintln!("SKIPPED: no AVX on this host; only the element loop ran");
                return;
            }
            eprintln!("AVX present: comparing its blocks with the element loop");
            let (rows, cols) = (24usize, 40usize);
            let specials = [f32::NAN, -0.0, 1e-40, f32::INFINITY];
            let src: Vec<f32> = (0..rows * cols)
                .map(|i| {
                    if i % 37 == 0 {
                        specials[(i / 37) % specials.len()]
                    } else {
                        (i as f32 * 0.731).sin()
                    }
                })
                .collect();
            let (off, pitch) = (5, rows + 3);
            let len = off + (cols - 1) * pitch + rows;
            let old: Vec<f32> = (0..len).map(|i| (i as f32 * 0.17).cos()).collect();
            for accumulate in [false, true] {
                let (mut a, mut b) = (old.clone(), old.clone());
                blocks(&src, cols, rows, cols, &mut a, off, pitch, accumulate);
                // SAFETY: AVX detected; bounds as transpose_into checks them.
                unsafe { blocks_avx(&src, cols, rows, cols, &mut b, off, pitch, accumulate) };
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "accumulate {accumulate}");
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: not x86-64; only the element loop exists");
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
        m[7 + 3] = -0.0;
        assert!(is_identity(&m, v, n), "-0 is a zero");
        for bad in [1e-30, f32::NAN, f32::MIN_POSITIVE / 4.0, -1.0] {
            m[7 + 3] = bad;
            assert!(!is_identity(&m, v, n), "{bad} off the diagonal");
        }
        m[7 + 3] = 0.0;
        m[2 * 7 + 2] = -1.0;
        assert!(!is_identity(&m, v, n), "-1 on the diagonal");
        m[2 * 7 + 2] = 1.0;
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
}
