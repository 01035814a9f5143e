//! Page-range bookkeeping shared by the emulator and the daemon's client: cutting a range out
//! of a set of mapping pieces, as `munmap(2)` does.
use std::collections::BTreeMap;

/// Remove `[addr, addr + len)` from `pieces` (start -> (tag, length)), splitting the pieces
/// it cuts, as `munmap` does to mappings. The range must be covered by pieces without a gap,
/// else nothing changes and the answer is `None`; otherwise the removed parts
/// (start, length, tag) in address order.
pub fn carve<T: Copy>(
    pieces: &mut BTreeMap<usize, (T, usize)>,
    addr: usize,
    len: usize,
) -> Option<Vec<(usize, usize, T)>> {
    let end = addr.checked_add(len).filter(|_| len > 0)?;
    let (&first, _) = pieces
        .range(..=addr)
        .next_back()
        .filter(|(s, (_, l))| **s + *l > addr)?;
    let mut cover = first;
    let mut hits = Vec::new();
    for (&s, &(t, l)) in pieces.range(first..) {
        if s >= end {
            break;
        }
        if s != cover {
            return None;
        }
        hits.push((s, t, l));
        cover = s + l;
    }
    if cover < end {
        return None;
    }
    let mut out = Vec::with_capacity(hits.len());
    for (s, t, l) in hits {
        pieces.remove(&s);
        let (cs, ce) = (s.max(addr), (s + l).min(end));
        if s < cs {
            pieces.insert(s, (t, cs - s));
        }
        if ce < s + l {
            pieces.insert(ce, (t, s + l - ce));
        }
        out.push((cs, ce - cs, t));
    }
    Some(out)
}
