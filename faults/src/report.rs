//! A campaign's report: every experiment (its injection, outcome, status, error) and the
//! tallies, as JSON (the merge format), CSV, a text table and an SVG chart of outcome classes
//! per fault. Nothing in it depends on host time, thread count or shard split, so shard
//! reports merge into exactly the report of one run.

use crate::outcome::{Class, Tally};
use crate::sample::Injection;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The report format's version.
pub const FORMAT: u32 = 1;

/// What the campaign ran: two reports merge only if these are equal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// SHA-256 of the plan text.
    pub plan_sha256: String,
    pub plan_name: String,
    /// SHA-256 of the NEFF.
    pub neff_sha256: String,
    pub neff_name: String,
    pub arch: String,
    pub seed: u64,
    /// Experiments in the whole campaign.
    pub experiments: u64,
    /// Tolerance on max|got−golden|/max|golden| for "masked".
    pub tolerance: f64,
    pub golden_device_ns: u64,
}

/// One experiment's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    pub index: u64,
    pub injection: Injection,
    /// Whether the fault's trigger was reached during the run.
    pub fired: bool,
    pub class: Class,
    /// NRT status of the faulty execution (`None`: crashed).
    pub status: Option<u32>,
    pub status_name: Option<String>,
    /// max|got−golden|/max|golden| over all outputs (0 when none were read).
    pub max_rel_err: f64,
    pub device_ns: u64,
    /// The first error line the runtime logged, if any.
    pub message: Option<String>,
}

/// A whole or partial (sharded) campaign report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub setup: Setup,
    /// Which experiments this report holds: `index` in `first..end`.
    pub first: u64,
    pub end: u64,
    pub experiments: Vec<Experiment>,
    pub summary: Tally,
    /// Tallies per plan fault id.
    pub by_fault: BTreeMap<String, Tally>,
}

/// Why reports could not be merged or read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}: not a campaign report: {1}")]
    Parse(String, String),
    #[error("{what}: ran a different campaign ({field} differs)")]
    Mismatch { what: String, field: &'static str },
    #[error("experiment {0} appears in two reports")]
    Overlap(u64),
    #[error(
        "the reports cover {have} of the campaign's {want} experiments (first missing: {missing})"
    )]
    Incomplete { have: u64, want: u64, missing: u64 },
    #[error("no reports to merge")]
    Empty,
}

/// The experiments `first..end` of shard `k` of `n` (0-based) of a campaign of `total`.
pub fn shard_range(total: u64, k: u64, n: u64) -> std::ops::Range<u64> {
    let n = n.max(1);
    let k = k.min(n - 1);
    let at = |i: u64| ((u128::from(total) * u128::from(i)) / u128::from(n)) as u64;
    at(k)..at(k + 1)
}

impl Report {
    /// A report of `experiments` (any order) of `setup`, covering `first..end`.
    pub fn new(setup: Setup, first: u64, end: u64, mut experiments: Vec<Experiment>) -> Report {
        experiments.sort_by_key(|e| e.index);
        let summary = Tally::of(
            experiments
                .iter()
                .map(|e| (e.class, e.status_name.as_deref())),
        );
        let mut groups: BTreeMap<String, Vec<&Experiment>> = BTreeMap::new();
        for e in &experiments {
            groups.entry(e.injection.fault.clone()).or_default().push(e);
        }
        let by_fault = groups
            .into_iter()
            .map(|(k, v)| {
                (
                    k,
                    Tally::of(v.into_iter().map(|e| (e.class, e.status_name.as_deref()))),
                )
            })
            .collect();
        Report {
            format: FORMAT,
            setup,
            first,
            end,
            experiments,
            summary,
            by_fault,
        }
    }

    pub fn from_json(name: &str, text: &str) -> Result<Report, ReportError> {
        let r: Report = serde_json::from_str(text)
            .map_err(|e| ReportError::Parse(name.into(), e.to_string()))?;
        if r.format != FORMAT {
            return Err(ReportError::Parse(
                name.into(),
                format!("format {} (this tool reads {FORMAT})", r.format),
            ));
        }
        Ok(r)
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Merge shard reports of one campaign into the report a single run gives.
    pub fn merge(parts: Vec<(String, Report)>) -> Result<Report, ReportError> {
        let mut it = parts.into_iter();
        let (_, first) = it.next().ok_or(ReportError::Empty)?;
        let setup = first.setup.clone();
        let mut all = first.experiments;
        for (name, r) in it {
            let s = &r.setup;
            let field = if s.plan_sha256 != setup.plan_sha256 {
                Some("plan")
            } else if s.neff_sha256 != setup.neff_sha256 {
                Some("NEFF")
            } else if s.seed != setup.seed {
                Some("seed")
            } else if s.experiments != setup.experiments {
                Some("experiment count")
            } else if s.arch != setup.arch {
                Some("arch")
            } else if s.tolerance.to_bits() != setup.tolerance.to_bits() {
                Some("tolerance")
            } else if s.golden_device_ns != setup.golden_device_ns {
                Some("golden run")
            } else {
                None
            };
            if let Some(field) = field {
                return Err(ReportError::Mismatch { what: name, field });
            }
            all.extend(r.experiments);
        }
        all.sort_by_key(|e| e.index);
        for w in all.windows(2) {
            if w[0].index == w[1].index {
                return Err(ReportError::Overlap(w[0].index));
            }
        }
        let want = setup.experiments;
        if let Some(missing) = (0..want)
            .zip(
                all.iter()
                    .map(|e| e.index)
                    .chain(std::iter::repeat(u64::MAX)),
            )
            .find(|(i, e)| i != e)
        {
            return Err(ReportError::Incomplete {
                have: all.len() as u64,
                want,
                missing: missing.0,
            });
        }
        if all.len() as u64 != want {
            return Err(ReportError::Incomplete {
                have: all.len() as u64,
                want,
                missing: want,
            });
        }
        Ok(Report::new(setup, 0, want, all))
    }

    /// One line per experiment.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "index,fault,effect,fired,class,status,status_name,max_rel_err,device_ns\n",
        );
        for e in &self.experiments {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:e},{}",
                e.index,
                e.injection.fault,
                e.injection.effect.name(),
                e.fired,
                e.class.name(),
                e.status.map_or(String::new(), |v| v.to_string()),
                e.status_name.as_deref().unwrap_or(""),
                e.max_rel_err,
                e.device_ns
            );
        }
        s
    }

    /// The summary table printed at the end of a campaign.
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} experiments of {} on {} (seed {}), tolerance {:e}",
            self.summary.experiments,
            self.setup.neff_name,
            self.setup.arch,
            self.setup.seed,
            self.setup.tolerance
        );
        let _ = writeln!(s, "{:<10} {:>7} {:>8}  95% CI", "outcome", "count", "share");
        for (c, sh) in &self.summary.classes {
            let _ = writeln!(
                s,
                "{:<10} {:>7} {:>7.2}%  [{:.2}%, {:.2}%]",
                c.name(),
                sh.count,
                sh.fraction * 100.0,
                sh.ci95[0] * 100.0,
                sh.ci95[1] * 100.0
            );
        }
        for (status, n) in &self.summary.detected_by_status {
            let _ = writeln!(s, "  detected as {status}: {n}");
        }
        if self.by_fault.len() > 1 {
            let _ = writeln!(s, "\nper fault:");
            for (id, t) in &self.by_fault {
                let parts: Vec<String> = t
                    .classes
                    .iter()
                    .filter(|(_, sh)| sh.count > 0)
                    .map(|(c, sh)| format!("{} {}", c.name(), sh.count))
                    .collect();
                let _ = writeln!(s, "  {id:<24} {:>6}  {}", t.experiments, parts.join(", "));
            }
        }
        s
    }

    /// A stacked bar per fault id: the share of each outcome class.
    pub fn to_svg(&self) -> String {
        const COLORS: [(&str, &str); 5] = [
            ("masked", "#4caf50"),
            ("sdc", "#e53935"),
            ("detected", "#1e88e5"),
            ("hang", "#fb8c00"),
            ("crash", "#6d4c41"),
        ];
        let rows: Vec<(&String, &Tally)> = self.by_fault.iter().collect();
        let (left, width, bar, gap, top) = (200.0, 560.0, 22.0, 10.0, 50.0);
        let height = top + rows.len() as f64 * (bar + gap) + 60.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="sans-serif" font-size="12">"#,
            left + width + 20.0
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="24" font-size="15">Outcomes per fault: {} experiments of {} (seed {})</text>"#,
            self.summary.experiments,
            xml(&self.setup.neff_name),
            self.setup.seed
        );
        for (i, (id, t)) in rows.iter().enumerate() {
            let y = top + i as f64 * (bar + gap);
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">{} (n={})</text>"#,
                left - 8.0,
                y + bar * 0.7,
                xml(id),
                t.experiments
            );
            let mut x = left;
            for (c, color) in Class::ALL.iter().zip(COLORS) {
                let f = t.classes.get(c).map_or(0.0, |sh| sh.fraction);
                if f > 0.0 {
                    let w = f * width;
                    let _ = writeln!(
                        s,
                        r#"<rect x="{x:.2}" y="{y}" width="{w:.2}" height="{bar}" fill="{}"><title>{} {}: {:.1}%</title></rect>"#,
                        color.1,
                        xml(id),
                        c.name(),
                        f * 100.0
                    );
                    x += w;
                }
            }
        }
        let ly = top + rows.len() as f64 * (bar + gap) + 20.0;
        for (i, (name, color)) in COLORS.iter().enumerate() {
            let x = left + i as f64 * 110.0;
            let _ = writeln!(
                s,
                r#"<rect x="{x}" y="{ly}" width="12" height="12" fill="{color}"/>"#
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}">{name}</text>"#,
                x + 16.0,
                ly + 11.0
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Effect;
    use crate::sample::When;

    fn setup(n: u64) -> Setup {
        Setup {
            plan_sha256: "p".into(),
            plan_name: "plan.toml".into(),
            neff_sha256: "n".into(),
            neff_name: "k.neff".into(),
            arch: "trn2".into(),
            seed: 7,
            experiments: n,
            tolerance: 1e-3,
            golden_device_ns: 1000,
        }
    }

    fn exp(i: u64, class: Class) -> Experiment {
        Experiment {
            index: i,
            injection: Injection {
                fault: if i.is_multiple_of(2) {
                    "a".into()
                } else {
                    "b".into()
                },
                effect: Effect::DmaError,
                when: When::Descriptor { nth: i + 1 },
                execution: 1,
                device: 0,
                core: None,
                engine: None,
                queue: None,
                semaphore: None,
                commands: Vec::new(),
                location: None,
                mask: 0,
                word_bits: Vec::new(),
            },
            fired: true,
            class,
            status: Some(if class == Class::Detected { 1203 } else { 0 }),
            status_name: (class == Class::Detected).then(|| "NRT_EXEC_HW_ERR_DMA_ABORT".into()),
            max_rel_err: 0.0,
            device_ns: 1000 + i,
            message: None,
        }
    }

    fn classes(i: u64) -> Class {
        Class::ALL[(i * 7 % 5) as usize]
    }

    #[test]
    fn shards_merge_into_the_single_run() {
        let n = 103;
        let whole = Report::new(setup(n), 0, n, (0..n).map(|i| exp(i, classes(i))).collect());
        let parts: Vec<(String, Report)> = (0..4)
            .map(|k| {
                let r = shard_range(n, k, 4);
                let rep = Report::new(
                    setup(n),
                    r.start,
                    r.end,
                    r.clone().rev().map(|i| exp(i, classes(i))).collect(),
                );
                (
                    format!("shard{k}"),
                    Report::from_json("x", &rep.to_json()).expect("round trip"),
                )
            })
            .collect();
        let merged = Report::merge(parts).expect("merge");
        assert_eq!(merged.to_json(), whole.to_json());
    }

    #[test]
    fn shard_ranges_cover_everything_once() {
        for total in [0, 1, 5, 1000] {
            for n in [1, 3, 4, 7] {
                let mut next = 0;
                for k in 0..n {
                    let r = shard_range(total, k, n);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, total);
            }
        }
    }

    #[test]
    fn merge_refuses_mismatches_gaps_and_overlaps() {
        let a = Report::new(
            setup(4),
            0,
            2,
            vec![exp(0, Class::Masked), exp(1, Class::Sdc)],
        );
        let mut other = setup(4);
        other.seed = 8;
        let b = Report::new(other, 2, 4, vec![exp(2, Class::Masked), exp(3, Class::Sdc)]);
        assert!(matches!(
            Report::merge(vec![("a".into(), a.clone()), ("b".into(), b)]),
            Err(ReportError::Mismatch { field: "seed", .. })
        ));
        let c = Report::new(setup(4), 2, 3, vec![exp(2, Class::Masked)]);
        assert!(matches!(
            Report::merge(vec![("a".into(), a.clone()), ("c".into(), c)]),
            Err(ReportError::Incomplete { missing: 3, .. })
        ));
        assert!(matches!(
            Report::merge(vec![("a".into(), a.clone()), ("a2".into(), a)]),
            Err(ReportError::Overlap(0))
        ));
        assert!(matches!(Report::merge(vec![]), Err(ReportError::Empty)));
        assert!(Report::from_json("bad", "{").is_err());
    }

    #[test]
    fn csv_svg_and_table() {
        let r = Report::new(setup(3), 0, 3, (0..3).map(|i| exp(i, classes(i))).collect());
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 4);
        assert!(csv
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("0,a,dma-error,true,masked,0,")));
        let svg = r.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a (n=2)") && svg.contains("b (n=1)"));
        assert!(r.to_table().contains("masked"));
    }
}
