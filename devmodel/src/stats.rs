//! What a run is measured by: event and transfer counters ([`Stats`]), host time per
//! instruction kind ([`HostProfile`], off unless asked for) and timeline spans
//! ([`TraceEvent`], for Perfetto/Chrome trace output).

use crate::time::Ps;

/// Counters for benchmarks and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub instructions: u64,
    pub dma_descriptors: u64,
    pub dma_bytes: u64,
    pub notifications: u64,
    pub dropped_notifications: u64,
    /// Multiply-adds the model ran through the host SGEMM (MATMULs other than transposes
    /// done as data movement): the host compute floor of an execution.
    pub sgemm_macs: u64,
}

/// Host wall time the model spent issuing each kind of instruction (data path included):
/// where an emulation's host time goes. Off unless asked for; it is not part of the device's
/// deterministic state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostProfile {
    /// Mnemonic -> (instructions issued, host nanoseconds).
    pub ops: std::collections::BTreeMap<&'static str, (u64, u64)>,
}

impl HostProfile {
    pub(crate) fn record(&mut self, name: &'static str, d: std::time::Duration) {
        let e = self.ops.entry(name).or_default();
        e.0 += 1;
        e.1 += u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
}

/// One span on the device timeline (for Perfetto/Chrome trace output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub nc: usize,
    /// "Tensor", "Scalar", ... or "DMA e.q".
    pub track: String,
    pub name: &'static str,
    pub pc: u32,
    pub start: Ps,
    pub dur: Ps,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_profile_counts_and_sums() {
        let mut p = HostProfile::default();
        p.record("MATMUL", std::time::Duration::from_nanos(5));
        p.record("MATMUL", std::time::Duration::from_nanos(7));
        p.record("COPY", std::time::Duration::from_secs(u64::MAX));
        assert_eq!(p.ops["MATMUL"], (2, 12));
        assert_eq!(
            p.ops["COPY"],
            (1, u64::MAX),
            "saturates instead of wrapping"
        );
    }
}
