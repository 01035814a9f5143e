//! The arithmetic of the data path: ALU codes, elementwise and reducing loops, and the
//! identity test a transposing MATMUL uses (the transposes: `transpose`).

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
