//! AFFINE_SELECT (`nki.isa.affine_select` on GpSimd): `dst = cmp(affine, 0) ? src : fill`,
//! where `affine = offset + partition·channel_multiplier + Σ index_d·step_d` over a four-dim
//! iota pattern (innermost first), element by element in the order the patterns walk.

use super::OpFault;

/// The comparisons, by code: only 3 is seen (read as not-equal, `docs/isa/cayman.md` §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    /// Keep the element where the affine value is not zero.
    NotEqual,
}

pub(super) fn cmp_of(code: u64) -> Result<Cmp, OpFault> {
    match code {
        3 => Ok(Cmp::NotEqual),
        c => Err(OpFault::bad(format!(
            "AFFINE_SELECT comparison code {c} not known"
        ))),
    }
}

/// Apply the selection to `vals` (`channels` rows of `n`) in place: each element's affine
/// value walked dimension by dimension, innermost first (wrapping, as 64-bit hardware
/// arithmetic would; the fields are far too narrow to reach it).
pub(super) fn select(
    vals: &mut [f32],
    n: usize,
    first_partition: usize,
    (offset, multiplier): (i64, i64),
    (step, num): ([i16; 4], [u16; 4]),
    cmp: Cmp,
    fill: f32,
) -> Result<(), OpFault> {
    let total: usize = num.iter().map(|v| (*v).max(1) as usize).product();
    if total != n {
        return Err(OpFault::bad(format!(
            "AFFINE_SELECT pattern of {total} elements for tiles of {n}"
        )));
    }
    let s = step.map(i64::from);
    let m = num.map(|v| usize::from(v.max(1)));
    for (p, row) in vals.chunks_exact_mut(n.max(1)).enumerate() {
        let start = offset.wrapping_add(((first_partition + p) as i64).wrapping_mul(multiplier));
        let mut runs = row.chunks_exact_mut(m[0]);
        for i3 in 0..m[3] {
            for i2 in 0..m[2] {
                for i1 in 0..m[1] {
                    let base = start
                        .wrapping_add((i3 as i64).wrapping_mul(s[3]))
                        .wrapping_add((i2 as i64).wrapping_mul(s[2]))
                        .wrapping_add((i1 as i64).wrapping_mul(s[1]));
                    let Some(run) = runs.next() else {
                        return Ok(()); // (the total was checked: not reached)
                    };
                    match cmp {
                        Cmp::NotEqual => {
                            for (i0, v) in run.iter_mut().enumerate() {
                                if base.wrapping_add((i0 as i64).wrapping_mul(s[0])) == 0 {
                                    *v = fill;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The affine values of one partition's elements, innermost dimension first: the
    /// definition, built up dimension by dimension (the reference for [`select`]).
    fn affine_row(
        offset: i64,
        partition: i64,
        multiplier: i64,
        step: [i16; 4],
        num: [u16; 4],
        out: &mut Vec<i64>,
    ) {
        out.clear();
        out.push(offset + partition * multiplier);
        for d in 0..4 {
            let (s, n) = (step[d] as i64, num[d].max(1) as i64);
            let len = out.len();
            for i in 1..n {
                for k in 0..len {
                    let v = out[k] + i * s;
                    out.push(v);
                }
            }
        }
    }

    /// `select` keeps exactly the elements whose affine value (the definition above) is not
    /// zero, for random four-dimensional patterns, partitions and multipliers.
    #[test]
    fn selection_follows_the_affine_definition() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        let mut aff = Vec::new();
        for _ in 0..300 {
            let num = [0; 4].map(|_| next(5) as u16);
            let step = [0; 4].map(|_| next(9) as i16 - 4);
            let (offset, multiplier) = (next(21) as i64 - 10, next(5) as i64 - 2);
            let (first, channels) = (next(4) as usize, 1 + next(6) as usize);
            let n: usize = num.iter().map(|v| (*v).max(1) as usize).product();
            let mut vals: Vec<f32> = (0..n * channels).map(|i| i as f32).collect();
            let mut want = vals.clone();
            select(
                &mut vals,
                n,
                first,
                (offset, multiplier),
                (step, num),
                Cmp::NotEqual,
                -1.0,
            )
            .expect("shapes agree");
            for (p, row) in want.chunks_exact_mut(n).enumerate() {
                affine_row(offset, (first + p) as i64, multiplier, step, num, &mut aff);
                for (v, a) in row.iter_mut().zip(&aff) {
                    if *a == 0 {
                        *v = -1.0;
                    }
                }
            }
            assert_eq!(
                vals, want,
                "num {num:?} step {step:?} offset {offset} mult {multiplier}"
            );
        }
    }

    /// The compiler's identity construction (kgm-attn Pool): a zero tile, affine value
    /// `x - p`, fill 1.0 where it is zero, is the identity matrix.
    #[test]
    fn identity_from_a_zero_mask() {
        let n = 8;
        let mut vals = vec![0.0f32; n * n];
        let cmp = cmp_of(3).expect("code 3");
        select(
            &mut vals,
            n,
            0,
            (0, -1),
            ([1, 1, 1, 1], [8, 1, 1, 1]),
            cmp,
            1.0,
        )
        .expect("ok");
        for p in 0..n {
            for x in 0..n {
                assert_eq!(vals[p * n + x], if p == x { 1.0 } else { 0.0 }, "{p},{x}");
            }
        }
        assert!(cmp_of(0).is_err());
        let mut short = vec![0.0f32; 4];
        assert!(select(
            &mut short,
            4,
            0,
            (0, 1),
            ([1, 1, 1, 1], [8, 1, 1, 1]),
            cmp,
            1.0
        )
        .is_err());
    }

    /// Two dimensions walk innermost first, as a direct double loop does.
    #[test]
    fn affine_values_walk_innermost_first() {
        let mut out = Vec::new();
        affine_row(5, 2, 3, [1, 10, 1, 1], [3, 2, 1, 1], &mut out);
        let mut want = Vec::new();
        for y in 0..2i64 {
            for x in 0..3i64 {
                want.push(5 + 2 * 3 + x + 10 * y);
            }
        }
        assert_eq!(out, want);
    }
}
