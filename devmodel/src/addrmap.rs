//! The device's address map: every range of device addresses that answers (each HBM, each
//! host region while it exists, each core's SBUF, PSUM, register page, instruction ports and
//! DGE-table register) registered once, with overlaps refused.
//!
//! Like crosvm's `Bus`, [`AddrMap::insert`] rejects a range that overlaps one already there,
//! and [`AddrMap::resolve`] turns `(addr, len)` into the one target holding all of it and the
//! offset inside that target, refusing accesses that leave it (straddle two targets or run
//! into a hole). Lookup is a binary search over a sorted vector: the map is small (tens of
//! ranges plus the host regions) and changes rarely.

use neuron_abi::addr::DevAddr;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What answers a range of device addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// HBM `k` (sparse storage keyed by device address).
    Hbm(u8),
    /// Host region slot `s` (coherent host memory).
    Host(u32),
    /// Core `nc`'s SBUF window (partition `p` at `p * SBUF_PARTITION_STRIDE`).
    Sbuf(u8),
    /// Core `nc`'s PSUM window.
    Psum(u8),
    /// Core `nc`'s event/semaphore register page.
    Regs(u8),
    /// The instruction port of engine `e` of core `nc`.
    InstrPort(u8, u8),
    /// Core `nc`'s DGE-table base register.
    DgeTable(u8),
    /// Core `nc`'s GpSimd microcode memory (IRAM or DRAM).
    Ucode(u8, crate::firmware::UcodeMem),
}

/// Why a range could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapError {
    /// The range is empty or wraps past the end of the address space.
    BadRange { start: DevAddr, len: u64 },
    /// The range overlaps one already registered.
    Overlap {
        new: Target,
        start: DevAddr,
        len: u64,
        existing: Target,
        existing_start: DevAddr,
        existing_end: DevAddr,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::BadRange { start, len } => write!(f, "bad range {start} +{len}"),
            MapError::Overlap {
                new,
                start,
                len,
                existing,
                existing_start,
                existing_end,
            } => write!(
                f,
                "{new:?} at {start} +{len} overlaps {existing:?} at {existing_start}..{existing_end}"
            ),
        }
    }
}
impl std::error::Error for MapError {}

/// Why an access resolves to no single target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// No target holds the first byte.
    Unmapped,
    /// The access starts in `Target` but runs past its end.
    Straddles(Target),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: u64,
    /// Exclusive.
    end: u64,
    target: Target,
}

/// Non-overlapping ranges of device addresses, sorted by start.
#[derive(Debug, Clone, Default)]
pub struct AddrMap {
    ranges: Vec<Range>,
    hints: Hints,
}

/// The indices of the two ranges resolved last, tried before the binary search: a DMA
/// alternates between its source and destination, run after run (a decode step's attention
/// layer resolves ~88 k addresses per execution). A hint is only a place to look: a range
/// that holds the address is the one range that does, so stale indices cost nothing but the
/// search.
#[derive(Debug, Default)]
struct Hints([AtomicUsize; 2]);

impl Clone for Hints {
    fn clone(&self) -> Self {
        let h = |i: usize| AtomicUsize::new(self.0[i].load(Ordering::Relaxed));
        Hints([h(0), h(1)])
    }
}

impl AddrMap {
    /// Register `[start, start + len)` for `target`; refused if empty, wrapping, or
    /// overlapping a registered range.
    pub fn insert(&mut self, start: DevAddr, len: u64, target: Target) -> Result<(), MapError> {
        let end = start
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(MapError::BadRange { start, len })?
            .raw();
        let s = start.raw();
        let at = self.ranges.partition_point(|r| r.start < s);
        // Only the neighbours can overlap: the one before may run past `s`, the one at `at`
        // may start before `end`.
        let clash = [at.checked_sub(1), Some(at)]
            .into_iter()
            .flatten()
            .filter_map(|i| self.ranges.get(i))
            .find(|r| r.start < end && s < r.end);
        if let Some(r) = clash {
            return Err(MapError::Overlap {
                new: target,
                start,
                len,
                existing: r.target,
                existing_start: DevAddr(r.start),
                existing_end: DevAddr(r.end),
            });
        }
        self.ranges.insert(
            at,
            Range {
                start: s,
                end,
                target,
            },
        );
        Ok(())
    }

    /// Remove the range that starts exactly at `start`; returns its target.
    pub fn remove(&mut self, start: DevAddr) -> Option<Target> {
        let at = self.index_of(start)?;
        Some(self.ranges.remove(at).target)
    }

    /// The target of the range starting exactly at `start`.
    pub fn at(&self, start: DevAddr) -> Option<Target> {
        self.index_of(start).map(|i| self.ranges[i].target)
    }

    fn index_of(&self, start: DevAddr) -> Option<usize> {
        self.ranges
            .binary_search_by_key(&start.raw(), |r| r.start)
            .ok()
    }

    /// The target holding all of `[addr, addr + len)` and the offset of `addr` inside it. A
    /// zero-length access needs only its address to be mapped.
    #[inline]
    pub fn resolve(&self, addr: DevAddr, len: u64) -> Result<(Target, u64), Unresolved> {
        let a = addr.raw();
        let holds = |i: usize| self.ranges.get(i).filter(|r| r.start <= a && a < r.end);
        let [h0, h1] = &self.hints.0;
        let (i0, i1) = (h0.load(Ordering::Relaxed), h1.load(Ordering::Relaxed));
        let r = if let Some(r) = holds(i0) {
            r
        } else if let Some(r) = holds(i1) {
            h0.store(i1, Ordering::Relaxed);
            h1.store(i0, Ordering::Relaxed);
            r
        } else {
            let i = self.ranges.partition_point(|r| r.start <= a);
            let r = i
                .checked_sub(1)
                .and_then(|i| self.ranges.get(i))
                .filter(|r| a < r.end)
                .ok_or(Unresolved::Unmapped)?;
            h1.store(i0, Ordering::Relaxed);
            h0.store(i - 1, Ordering::Relaxed);
            r
        };
        match a.checked_add(len) {
            Some(e) if e <= r.end => Ok((r.target, a - r.start)),
            _ => Err(Unresolved::Straddles(r.target)),
        }
    }

    /// Every range: (start, length, target), ascending.
    pub fn iter(&self) -> impl Iterator<Item = (DevAddr, u64, Target)> + '_ {
        self.ranges
            .iter()
            .map(|r| (DevAddr(r.start), r.end - r.start, r.target))
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> AddrMap {
        let mut m = AddrMap::default();
        m.insert(DevAddr(0x1000), 0x1000, Target::Hbm(0))
            .expect("first");
        m.insert(DevAddr(0x3000), 0x100, Target::Regs(0))
            .expect("second");
        m
    }

    /// The binary search alone: what every lookup must give, hints or not.
    fn searched(m: &AddrMap, a: u64, len: u64) -> Result<(Target, u64), Unresolved> {
        let i = m.ranges.partition_point(|r| r.start <= a);
        let r = i
            .checked_sub(1)
            .and_then(|i| m.ranges.get(i))
            .filter(|r| a < r.end)
            .ok_or(Unresolved::Unmapped)?;
        match a.checked_add(len) {
            Some(e) if e <= r.end => Ok((r.target, a - r.start)),
            _ => Err(Unresolved::Straddles(r.target)),
        }
    }

    #[test]
    fn lookups_through_the_hints_equal_the_search_as_ranges_come_and_go() {
        let mut m = map();
        let mut s = 3u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s >> 33
        };
        for round in 0..6u64 {
            for _ in 0..2000 {
                // Mostly inside the ranges (alternating, as a DMA's runs do), sometimes not.
                let a = match next() % 4 {
                    0 => 0x1000 + next() % 0x1000,
                    1 => 0x3000 + next() % 0x200,
                    2 => 0x8000 + next() % 0x4000,
                    _ => next() % 0x10000,
                };
                let len = next() % 0x300;
                assert_eq!(
                    m.resolve(DevAddr(a), len),
                    searched(&m, a, len),
                    "{a:#x}+{len:#x}"
                );
            }
            // Shift the indices the hints hold: a range added before them, or removed.
            if round % 2 == 0 {
                m.insert(DevAddr(0x100 * (round + 1)), 0x80, Target::Sbuf(0))
                    .expect("free");
            } else {
                m.remove(DevAddr(0x100 * round)).expect("added last round");
            }
            let _ = m.insert(DevAddr(0x8000), 0x4000, Target::Hbm(1));
        }
    }

    #[test]
    fn overlapping_ranges_are_refused() {
        let mut m = map();
        for (start, len) in [
            (0x1000, 0x1000),
            (0x0800, 0x0801),
            (0x1fff, 1),
            (0x1800, 0x2000),
            (0x0, 0x10_0000),
        ] {
            let e = m.insert(DevAddr(start), len, Target::Psum(1));
            assert!(
                matches!(e, Err(MapError::Overlap { .. })),
                "{start:#x}+{len:#x}: {e:?}"
            );
        }
        // Adjacent on either side is fine.
        m.insert(DevAddr(0x0800), 0x800, Target::Sbuf(0))
            .expect("touching below");
        m.insert(DevAddr(0x2000), 0x1000, Target::Sbuf(1))
            .expect("touching above and below");
        assert_eq!(m.len(), 4);
        assert_eq!(
            m.insert(DevAddr(u64::MAX), 2, Target::DgeTable(0)),
            Err(MapError::BadRange {
                start: DevAddr(u64::MAX),
                len: 2
            })
        );
        assert!(m.insert(DevAddr(0x9000), 0, Target::DgeTable(0)).is_err());
    }

    #[test]
    fn resolve_at_the_boundaries() {
        let m = map();
        assert_eq!(m.resolve(DevAddr(0x1000), 1), Ok((Target::Hbm(0), 0)));
        assert_eq!(m.resolve(DevAddr(0x1000), 0x1000), Ok((Target::Hbm(0), 0)));
        assert_eq!(m.resolve(DevAddr(0x1fff), 1), Ok((Target::Hbm(0), 0xfff)));
        assert_eq!(
            m.resolve(DevAddr(0x1fff), 2),
            Err(Unresolved::Straddles(Target::Hbm(0)))
        );
        assert_eq!(m.resolve(DevAddr(0x2000), 1), Err(Unresolved::Unmapped));
        assert_eq!(m.resolve(DevAddr(0x0fff), 1), Err(Unresolved::Unmapped));
        assert_eq!(m.resolve(DevAddr(0x0fff), 2), Err(Unresolved::Unmapped));
        assert_eq!(m.resolve(DevAddr(0x30ff), 1), Ok((Target::Regs(0), 0xff)));
        assert_eq!(m.resolve(DevAddr(0x3100), 0), Err(Unresolved::Unmapped));
        assert_eq!(m.resolve(DevAddr(0x3000), 0), Ok((Target::Regs(0), 0)));
        assert_eq!(
            m.resolve(DevAddr(0x1800), u64::MAX),
            Err(Unresolved::Straddles(Target::Hbm(0)))
        );
    }

    #[test]
    fn a_range_straddling_two_targets_is_refused() {
        let mut m = map();
        m.insert(DevAddr(0x2000), 0x1000, Target::Sbuf(0))
            .expect("adjacent");
        // Both bytes are mapped, but by two targets.
        assert_eq!(
            m.resolve(DevAddr(0x1fff), 2),
            Err(Unresolved::Straddles(Target::Hbm(0)))
        );
        assert_eq!(m.resolve(DevAddr(0x2000), 2), Ok((Target::Sbuf(0), 0)));
    }

    #[test]
    fn ranges_come_and_go() {
        let mut m = map();
        assert_eq!(m.remove(DevAddr(0x1001)), None, "only exact starts");
        assert_eq!(m.remove(DevAddr(0x1000)), Some(Target::Hbm(0)));
        assert_eq!(m.resolve(DevAddr(0x1000), 1), Err(Unresolved::Unmapped));
        m.insert(DevAddr(0x1800), 0x100, Target::Host(3))
            .expect("hole reused");
        assert_eq!(m.at(DevAddr(0x1800)), Some(Target::Host(3)));
        let all: Vec<_> = m.iter().map(|(s, _, t)| (s.raw(), t)).collect();
        assert_eq!(all, [(0x1800, Target::Host(3)), (0x3000, Target::Regs(0))]);
    }
}
