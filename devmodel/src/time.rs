//! Device time: one global clock in picoseconds.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in (or span of) device time, in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ps(pub u64);

impl Ps {
    pub const ZERO: Ps = Ps(0);

    /// Whole cycles of a clock running at `mhz` in this span (rounded down).
    pub fn whole_cycles(self, mhz: u64) -> u64 {
        self.0.saturating_mul(mhz) / 1_000_000
    }

    /// `cycles` of a clock running at `mhz`, rounded up to a whole picosecond.
    pub fn from_cycles(cycles: u64, mhz: u32) -> Ps {
        let mhz = mhz.max(1) as u64;
        Ps((cycles.saturating_mul(1_000_000)).div_ceil(mhz))
    }

    /// Time to move `bytes` at `bytes_per_ns`.
    pub fn from_bytes(bytes: u64, bytes_per_ns: u32) -> Ps {
        let bw = bytes_per_ns.max(1) as u64;
        Ps(bytes.saturating_mul(1000).div_ceil(bw))
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-12
    }
}

impl Add for Ps {
    type Output = Ps;
    fn add(self, o: Ps) -> Ps {
        Ps(self.0.saturating_add(o.0))
    }
}
impl AddAssign for Ps {
    fn add_assign(&mut self, o: Ps) {
        self.0 = self.0.saturating_add(o.0);
    }
}
impl Sub for Ps {
    type Output = Ps;
    fn sub(self, o: Ps) -> Ps {
        Ps(self.0.saturating_sub(o.0))
    }
}

impl fmt::Display for Ps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ps = self.0;
        if ps >= 1_000_000_000 {
            write!(f, "{:.3} ms", ps as f64 / 1e9)
        } else if ps >= 1_000_000 {
            write!(f, "{:.3} us", ps as f64 / 1e6)
        } else {
            write!(f, "{:.3} ns", ps as f64 / 1e3)
        }
    }
}
