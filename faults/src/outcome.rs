//! Outcome classes of one experiment and their tallies with confidence intervals, as fault
//! injectors (NVBitFI, GPGPU-Sim FI) report them: masked, silent data corruption, detected
//! (with the NRT status the program saw), hang, crash.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `NRT_TIMEOUT`: an execution that never completed.
pub const NRT_TIMEOUT: u32 = 5;

/// What one experiment came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Success, outputs within tolerance of the fault-free run.
    Masked,
    /// Success, outputs outside tolerance: silent data corruption.
    Sdc,
    /// The runtime reported an error status (other than a timeout).
    Detected,
    /// The execution timed out (`NRT_TIMEOUT`).
    Hang,
    /// The program under test died or the experiment could not complete.
    Crash,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Masked,
        Class::Sdc,
        Class::Detected,
        Class::Hang,
        Class::Crash,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Class::Masked => "masked",
            Class::Sdc => "sdc",
            Class::Detected => "detected",
            Class::Hang => "hang",
            Class::Crash => "crash",
        }
    }
}

/// Classify a finished experiment: `status` is the NRT status of the faulty execution (`None`
/// when it crashed), `max_rel_err` its outputs' distance from the golden run.
pub fn classify(status: Option<u32>, max_rel_err: f64, tolerance: f64) -> Class {
    match status {
        None => Class::Crash,
        Some(0) if max_rel_err.is_nan() || max_rel_err > tolerance => Class::Sdc,
        Some(0) => Class::Masked,
        Some(NRT_TIMEOUT) => Class::Hang,
        Some(_) => Class::Detected,
    }
}

/// A 95% Wilson score interval for `k` successes in `n` trials (`(0, 0)` when n = 0).
pub fn wilson95(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 0.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let n_f = n as f64;
    let p = k as f64 / n_f;
    let z2 = z * z;
    let denom = 1.0 + z2 / n_f;
    let centre = (p + z2 / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) / n_f + z2 / (4.0 * n_f * n_f)).sqrt()) / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Count and share of one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Share {
    pub count: u64,
    pub fraction: f64,
    /// 95% Wilson interval of the fraction.
    pub ci95: [f64; 2],
}

/// Tallies of a set of experiments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub experiments: u64,
    /// Per class, in [`Class::ALL`] order.
    pub classes: BTreeMap<Class, Share>,
    /// Detected experiments by NRT status name.
    pub detected_by_status: BTreeMap<String, u64>,
}

impl Tally {
    /// Tally `(class, status name)` pairs.
    pub fn of<'a>(items: impl IntoIterator<Item = (Class, Option<&'a str>)>) -> Tally {
        let mut counts: BTreeMap<Class, u64> = Class::ALL.iter().map(|c| (*c, 0)).collect();
        let mut by_status = BTreeMap::new();
        let mut n = 0;
        for (c, status) in items {
            n += 1;
            *counts.entry(c).or_insert(0) += 1;
            if c == Class::Detected {
                *by_status
                    .entry(status.unwrap_or("?").to_string())
                    .or_insert(0) += 1;
            }
        }
        let classes = counts
            .into_iter()
            .map(|(c, k)| {
                let (lo, hi) = wilson95(k, n);
                let fraction = if n == 0 { 0.0 } else { k as f64 / n as f64 };
                (
                    c,
                    Share {
                        count: k,
                        fraction,
                        ci95: [lo, hi],
                    },
                )
            })
            .collect();
        Tally {
            experiments: n,
            classes,
            detected_by_status: by_status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(classify(Some(0), 0.0, 1e-3), Class::Masked);
        assert_eq!(classify(Some(0), 1e-4, 1e-3), Class::Masked);
        assert_eq!(classify(Some(0), 0.5, 1e-3), Class::Sdc);
        assert_eq!(classify(Some(0), f64::NAN, 1e-3), Class::Sdc);
        assert_eq!(classify(Some(5), 0.0, 1e-3), Class::Hang);
        assert_eq!(classify(Some(1203), 0.0, 1e-3), Class::Detected);
        assert_eq!(classify(None, 0.0, 1e-3), Class::Crash);
    }

    #[test]
    fn wilson_matches_published_values() {
        // Wilson 95% interval for 0/10: [0, 0.2775]; 5/10: [0.2366, 0.7634]; 1000/1000: [0.99617, 1].
        let (lo, hi) = wilson95(0, 10);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-4, "{lo} {hi}");
        let (lo, hi) = wilson95(5, 10);
        assert!(
            (lo - 0.2366).abs() < 1e-4 && (hi - 0.7634).abs() < 1e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = wilson95(1000, 1000);
        assert!(
            (lo - 0.99617).abs() < 1e-5 && (hi - 1.0).abs() < 1e-12,
            "{lo} {hi}"
        );
        assert_eq!(wilson95(0, 0), (0.0, 0.0));
    }

    #[test]
    fn tally_counts_every_class() {
        let t = Tally::of([
            (Class::Masked, None),
            (Class::Detected, Some("NRT_EXEC_HW_ERR_DMA_ABORT")),
            (Class::Detected, Some("NRT_EXEC_HW_ERR_DMA_ABORT")),
            (Class::Hang, None),
        ]);
        assert_eq!(t.experiments, 4);
        assert_eq!(t.classes[&Class::Detected].count, 2);
        assert_eq!(t.classes[&Class::Crash].count, 0);
        assert_eq!(t.detected_by_status["NRT_EXEC_HW_ERR_DMA_ABORT"], 2);
    }
}
