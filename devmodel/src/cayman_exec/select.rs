//! AFFINE_SELECT (`nki.isa.affine_select` on GpSimd): `dst = cmp(affine, 0) ? src : fill`,
//! where `affine = offset + partition·channel_multiplier + Σ index_d·step_d` over a four-dim
//! iota pattern (innermost first), element by element in the order the patterns walk.

use super::OpFault;

/// The comparison codes: only 3 is seen (read as not-equal, `docs/isa/cayman.md` §1.3).
pub(super) fn cmp_of(code: u64) -> Result<fn(i64) -> bool, OpFault> {
    match code {
        3 => Ok(|v| v != 0),
        c => Err(OpFault::bad(format!(
            "AFFINE_SELECT comparison code {c} not known"
        ))),
    }
}

/// The affine values of one partition's elements, innermost dimension first.
pub(super) fn affine_row(
    offset: i64,
    partition: i64,
    multiplier: i64,
    step: [i16; 4],
    num: [u16; 4],
    out: &mut Vec<i64>,
) {
    out.clear();
    let start = offset + partition * multiplier;
    out.push(start);
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

/// Apply the selection to `vals` (`channels` rows of `n`) in place.
pub(super) fn select(
    vals: &mut [f32],
    n: usize,
    first_partition: usize,
    (offset, multiplier): (i64, i64),
    (step, num): ([i16; 4], [u16; 4]),
    cmp: fn(i64) -> bool,
    fill: f32,
) -> Result<(), OpFault> {
    let total: usize = num.iter().map(|v| (*v).max(1) as usize).product();
    if total != n {
        return Err(OpFault::bad(format!(
            "AFFINE_SELECT pattern of {total} elements for tiles of {n}"
        )));
    }
    let mut aff = Vec::with_capacity(n);
    for (p, row) in vals.chunks_exact_mut(n.max(1)).enumerate() {
        affine_row(
            offset,
            (first_partition + p) as i64,
            multiplier,
            step,
            num,
            &mut aff,
        );
        for (v, a) in row.iter_mut().zip(&aff) {
            if !cmp(*a) {
                *v = fill;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
