//! Expanding the NEFF's DMA descriptions (engine JSON `dma` blocks: up to 4-D access
//! patterns over named variables) into real 16-byte descriptor pairs.

/// Most descriptors one DMA block may expand to (bounds load time and memory).
pub const MAX_DESCS_PER_BLOCK: usize = 1 << 20;
/// Most pattern positions walked per transfer side.
pub const MAX_WALK: u64 = 1 << 24;

/// One side of a transfer: `base + off` then a multi-dimensional pattern, outermost first,
/// sizes and steps in elements of `esize` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub base: u64,
    pub off: u64,
    pub sizes: Vec<u64>,
    pub steps: Vec<i64>,
    pub esize: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("pattern has {sizes} sizes but {steps} steps")]
    Rank { sizes: usize, steps: usize },
    #[error("pattern rank {0} exceeds 4")]
    TooManyDims(usize),
    #[error("source moves {from} bytes but destination {to}")]
    SizeMismatch { from: u64, to: u64 },
    #[error("pattern reaches offset {lo}..{hi}, outside 0..{limit} of '{var}'")]
    OutOfBounds {
        var: String,
        lo: i128,
        hi: i128,
        limit: u64,
    },
    #[error("expansion exceeds {0} descriptors")]
    TooMany(usize),
}

impl Pattern {
    fn check_rank(&self) -> Result<(), ExpandError> {
        if self.sizes.len() != self.steps.len() {
            return Err(ExpandError::Rank {
                sizes: self.sizes.len(),
                steps: self.steps.len(),
            });
        }
        if self.sizes.len() > 4 {
            return Err(ExpandError::TooManyDims(self.sizes.len()));
        }
        Ok(())
    }

    pub fn elems(&self) -> u64 {
        self.sizes
            .iter()
            .try_fold(1u64, |a, &s| a.checked_mul(s))
            .unwrap_or(u64::MAX)
    }

    /// Byte range touched relative to `base`, to check against the variable's size.
    pub fn extent(&self) -> (i128, i128) {
        let mut lo = self.off as i128;
        let mut hi = self.off as i128;
        for (&n, &s) in self.sizes.iter().zip(&self.steps) {
            if n == 0 {
                return (self.off as i128, self.off as i128);
            }
            let e = (n as i128 - 1) * s as i128 * self.esize as i128;
            if e < 0 {
                lo += e;
            } else {
                hi += e;
            }
        }
        (lo, hi + self.esize as i128)
    }

    pub fn check_bounds(&self, var: &str, limit: u64) -> Result<(), ExpandError> {
        let (lo, hi) = self.extent();
        if self.elems() > 0 && (lo < 0 || hi > limit as i128) {
            return Err(ExpandError::OutOfBounds {
                var: var.to_string(),
                lo,
                hi,
                limit,
            });
        }
        Ok(())
    }

    /// Contiguous byte runs in order, merging the innermost unit-stride dimension and
    /// adjacent runs.
    fn runs(&self, max_runs: usize) -> Result<Vec<(u64, u64)>, ExpandError> {
        self.check_rank()?;
        let mut sizes = self.sizes.clone();
        let mut steps = self.steps.clone();
        if sizes.is_empty() {
            sizes.push(1);
            steps.push(1);
        }
        let last = sizes.len() - 1;
        let (inner_len, inner_count) = if steps[last] == 1 {
            (sizes[last] * self.esize, 1)
        } else {
            (self.esize, sizes[last])
        };
        sizes[last] = inner_count;
        let mut out: Vec<(u64, u64)> = Vec::new();
        if sizes.contains(&0) || inner_len == 0 {
            return Ok(out);
        }
        // Runs can merge, so bound the walk itself, not only the number of runs.
        let walk = sizes.iter().try_fold(1u64, |a, &s| a.checked_mul(s));
        if walk.is_none_or(|w| w > MAX_WALK) {
            return Err(ExpandError::TooMany(MAX_DESCS_PER_BLOCK));
        }
        let mut idx = vec![0u64; sizes.len()];
        loop {
            let mut elem: i128 = 0;
            for d in 0..sizes.len() {
                elem += idx[d] as i128 * steps[d] as i128;
            }
            let addr = (self.base as i128 + self.off as i128 + elem * self.esize as i128) as u64;
            match out.last_mut() {
                Some((a, l)) if *a + *l == addr => *l += inner_len,
                _ => {
                    if out.len() >= max_runs {
                        return Err(ExpandError::TooMany(max_runs));
                    }
                    out.push((addr, inner_len));
                }
            }
            // Odometer increment.
            let mut d = sizes.len();
            loop {
                if d == 0 {
                    return Ok(out);
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Pair source and destination runs into (src, dst, len) transfers of at most 64 KiB.
pub fn expand(from: &Pattern, to: &Pattern) -> Result<Vec<(u64, u64, u32)>, ExpandError> {
    let a = from.runs(MAX_DESCS_PER_BLOCK)?;
    let b = to.runs(MAX_DESCS_PER_BLOCK)?;
    let ta: u64 = a.iter().map(|r| r.1).sum();
    let tb: u64 = b.iter().map(|r| r.1).sum();
    if ta != tb {
        return Err(ExpandError::SizeMismatch { from: ta, to: tb });
    }
    let mut out = Vec::new();
    let (mut i, mut j, mut oa, mut ob) = (0usize, 0usize, 0u64, 0u64);
    while i < a.len() && j < b.len() {
        let n = (a[i].1 - oa).min(b[j].1 - ob).min(65536);
        if out.len() >= MAX_DESCS_PER_BLOCK {
            return Err(ExpandError::TooMany(MAX_DESCS_PER_BLOCK));
        }
        out.push((a[i].0 + oa, b[j].0 + ob, n as u32));
        oa += n;
        ob += n;
        if oa == a[i].1 {
            i += 1;
            oa = 0;
        }
        if ob == b[j].1 {
            j += 1;
            ob = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(base: u64, off: u64, sizes: &[u64], steps: &[i64], esize: u64) -> Pattern {
        Pattern {
            base,
            off,
            sizes: sizes.to_vec(),
            steps: steps.to_vec(),
            esize,
        }
    }

    #[test]
    fn rows_into_partitions() {
        // [4 rows x 8 bf16] contiguous in DRAM -> 4 partitions at a 0x40000 stride.
        let from = p(0x1000, 0, &[4, 8], &[8, 1], 2);
        let to = p(0x20_0000_0000, 64, &[4, 8], &[0x20000, 1], 2);
        let d = expand(&from, &to).expect("expand");
        assert_eq!(d.len(), 4);
        assert_eq!(d[1], (0x1010, 0x20_0000_0000 + 0x40000 + 64, 16));
    }

    #[test]
    fn broadcast_and_big_runs() {
        let from = p(0, 0, &[3, 4], &[0, 1], 4);
        let to = p(0x100, 0, &[3, 4], &[4, 1], 4);
        let d = expand(&from, &to).expect("expand");
        assert_eq!(d, vec![(0, 0x100, 16), (0, 0x110, 16), (0, 0x120, 16)]);
        let big = expand(
            &p(0, 0, &[200_000], &[1], 1),
            &p(1 << 20, 0, &[200_000], &[1], 1),
        )
        .expect("big");
        assert_eq!(big.len(), 4);
        assert_eq!(big[3].2 as u64, 200_000 - 3 * 65536);
    }

    #[test]
    fn errors() {
        assert!(matches!(
            expand(&p(0, 0, &[3], &[1], 4), &p(0, 0, &[4], &[1], 4)),
            Err(ExpandError::SizeMismatch { .. })
        ));
        assert!(matches!(
            expand(&p(0, 0, &[3], &[1, 1], 4), &p(0, 0, &[3], &[1], 4)),
            Err(ExpandError::Rank { .. })
        ));
        assert!(matches!(
            p(0, 8, &[4], &[1], 4).check_bounds("x", 16),
            Err(ExpandError::OutOfBounds { .. })
        ));
        assert!(p(0, 0, &[4], &[1], 4).check_bounds("x", 16).is_ok());
        assert!(matches!(
            expand(&p(0, 0, &[1 << 21], &[2], 1), &p(0, 0, &[1 << 21], &[2], 1)),
            Err(ExpandError::TooMany(_))
        ));
    }
}
