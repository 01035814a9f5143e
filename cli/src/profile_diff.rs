//! `neuron-emu profile-diff REAL.json EMU.json`: where an emulated profile's time differs from
//! a silicon one of the same NEFF — total time, per phase, per engine and per opcode
//! (`docs/profiling.md`). Both files are read the same way (the records `calibrate` reads), so
//! either side may be a real `neuron-profile` JSON or a `neuron-emu run --profile-json` report;
//! either may also be a raw NTFF (its decoded execution records, `crate::ntff`).

use crate::calibrate::{read_json, record_key};
use crate::ntff::{engine_stats, EngineStats, Word as Rec};
use crate::Failure;
use clap::Args;
use neuron_isa::Engine;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub(crate) struct DiffArgs {
    /// The reference profile (e.g. AWS neuron-profile's JSON of a silicon run).
    pub(crate) real: PathBuf,
    /// The profile compared with it (e.g. `neuron-emu run --profile-json`).
    pub(crate) emu: PathBuf,
    /// Print the comparison as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// The NEFF, when a side is an NTFF: names its semaphores and renumbers its pcs to this
    /// runtime's prologue, so words pair by pc on every engine.
    #[arg(long, value_name = "FILE.neff")]
    pub(crate) neff: Option<PathBuf>,
}

/// Largest profile file read (the six fixture profiles are 0.7-4 MB).
const MAX_BYTES: u64 = 256 << 20;
/// Most records read from one list.
const MAX_RECORDS: usize = 4_000_000;

/// Why a profile cannot be compared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProfileError {
    #[error("{path}: {0}", path = .1.display())]
    Io(std::io::Error, PathBuf),
    #[error("{path}: {size} bytes, more than the {MAX_BYTES}-byte limit of a profile", path = .path.display())]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{0}")]
    Parse(String),
    #[error("{path}: not a profile: {what}", path = .path.display())]
    Shape { path: PathBuf, what: String },
    #[error("{path}: {list}[{index}]: {what}", path = .path.display())]
    Record {
        path: PathBuf,
        list: &'static str,
        index: usize,
        what: String,
    },
    #[error("{path}: more than {MAX_RECORDS} {list} records", path = .path.display())]
    TooMany { path: PathBuf, list: &'static str },
    #[error("{0}")]
    Ntff(String),
}

/// One instruction record: the shape an NTFF's decoded words have.
impl Rec {
    fn end(&self) -> f64 {
        self.ts + self.dur
    }
}

/// What the comparison reads of a profile (ns).
#[derive(Debug)]
struct Profile {
    total_ns: f64,
    instrs: Vec<Rec>,
    /// Records of a label that is not an engine (skipped).
    other: usize,
}

/// The records of a list, bounded; an absent list is empty.
fn list<'a>(j: &'a Value, path: &Path, name: &'static str) -> Result<&'a [Value], ProfileError> {
    let v = match &j[name] {
        Value::Null => return Ok(&[]),
        Value::Array(a) => a.as_slice(),
        _ => {
            return Err(ProfileError::Shape {
                path: path.into(),
                what: format!("'{name}' is not a list"),
            })
        }
    };
    if v.len() > MAX_RECORDS {
        return Err(ProfileError::TooMany {
            path: path.into(),
            list: name,
        });
    }
    Ok(v)
}

/// Of a profile holding several executions (`execution` keys), the first.
fn first_execution(r: &Value) -> bool {
    r["execution"].as_u64().unwrap_or(0) == 0
}

/// An NTFF's decoded words as a profile.
fn read_ntff(path: &Path, info: Option<&crate::ntff::NeffInfo>) -> Result<Profile, ProfileError> {
    let s = crate::ntff::read(path, info).map_err(ProfileError::Ntff)?;
    Ok(Profile {
        total_ns: s.total_ns,
        instrs: s.words,
        other: 0,
    })
}

fn read(path: &Path, info: Option<&crate::ntff::NeffInfo>) -> Result<Profile, ProfileError> {
    if crate::ntff::is_ntff(path) {
        return read_ntff(path, info);
    }
    let size = std::fs::metadata(path)
        .map_err(|e| ProfileError::Io(e, path.into()))?
        .len();
    if size > MAX_BYTES {
        return Err(ProfileError::TooLarge {
            path: path.into(),
            size,
        });
    }
    let j = read_json(path).map_err(ProfileError::Parse)?;
    if !j.is_object() {
        return Err(ProfileError::Shape {
            path: path.into(),
            what: "the document is not a JSON object".into(),
        });
    }
    let summary = match &j["summary"] {
        Value::Array(a) => a.iter().find(|s| first_execution(s)),
        s @ Value::Object(_) => Some(s),
        _ => None,
    };
    let total_s = summary
        .and_then(|s| s["total_time"].as_f64())
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| ProfileError::Shape {
            path: path.into(),
            what: "no summary with a total_time (seconds)".into(),
        })?;
    let mut instrs = Vec::new();
    let mut other = 0;
    for (index, r) in list(&j, path, "instruction")?.iter().enumerate() {
        let bad = |what: String| ProfileError::Record {
            path: path.into(),
            list: "instruction",
            index,
            what,
        };
        if !r.is_object() {
            return Err(bad("not an object".into()));
        }
        if !first_execution(r) {
            continue;
        }
        let Some((sg, engine, pc, ts)) = record_key(r) else {
            // Say what is wrong; a well-formed record of a track that is no engine is skipped.
            for (k, ok) in [
                ("subgraph", r["subgraph"].is_string()),
                ("label", r["label"].is_string()),
                ("pc", r["pc"].as_u64().is_some_and(|p| p <= u32::MAX as u64)),
                ("timestamp", r["timestamp"].as_f64().is_some()),
            ] {
                if !ok {
                    return Err(bad(format!("no valid '{k}'")));
                }
            }
            other += 1;
            continue;
        };
        let dur = r["duration"]
            .as_f64()
            .filter(|d| d.is_finite() && *d >= 0.0)
            .ok_or_else(|| bad("no valid 'duration'".into()))?;
        let opcode = r["opcode"]
            .as_str()
            .ok_or_else(|| bad("no valid 'opcode'".into()))?;
        if !ts.is_finite() {
            return Err(bad("no valid 'timestamp'".into()));
        }
        instrs.push(Rec {
            sg: sg.to_string(),
            engine,
            pc,
            opcode: opcode.to_string(),
            operands: r["operands"].as_str().unwrap_or("").to_string(),
            ts,
            dur,
        });
    }
    Ok(Profile {
        total_ns: total_s * 1e9,
        instrs,
        other,
    })
}

/// Words the runtime runs around every NEFF (prologue, barriers, epilogue) use these opcodes
/// and only unnamed registers (`$S[2]`, `$E[4]`).
const RUNTIME_OPCODES: &[&str] = &[
    "NOP",
    "DRAIN",
    "EVENT_SEMAPHORE",
    "EVENT_SEMAPHORE_RANGE_CLEAR",
    "TENSOR_LOAD",
    "COMPARE_BRANCH",
    "NOTIFY",
    "WRITE",
    "SET_ORDERING_MODE",
];

/// Whether the operands name a semaphore the NEFF declares (`S[24] (qGpSimdDynamic)`), not a
/// bare runtime register (`$S[2]`).
fn names_a_semaphore(ops: &str) -> bool {
    ops.match_indices("S[")
        .any(|(i, _)| i == 0 || ops.as_bytes().get(i - 1) != Some(&b'$'))
}

/// A NEFF word: an opcode the runtime does not use, or one that names a NEFF semaphore.
fn is_neff(r: &Rec) -> bool {
    !RUNTIME_OPCODES.contains(&r.opcode.as_str()) || names_a_semaphore(&r.operands)
}

/// A compute word: a NEFF word that is neither control, DMA nor a table load.
fn is_compute(r: &Rec) -> bool {
    is_neff(r)
        && !RUNTIME_OPCODES.contains(&r.opcode.as_str())
        && !r.opcode.starts_with("DMA")
        && r.opcode != "ACT_TABLE_LOAD"
}

/// Phase names, in order.
const PHASES: [&str; 5] = ["hand-off", "input", "body", "output", "epilogue"];

/// One subgraph's phase lengths (ns), from the profile's origin (the start notification) to the
/// end: hand-off to the first NEFF word, input to the first compute word, body to the last
/// compute word's end, output to the last NEFF word's end, epilogue to the subgraph's last
/// `NOTIFY hint=3` (else the profile's total time).
fn phases(p: &Profile, sg: &str) -> Option<[f64; 5]> {
    let mine: Vec<&Rec> = p.instrs.iter().filter(|r| r.sg == sg).collect();
    let neff: Vec<&&Rec> = mine.iter().filter(|r| is_neff(r)).collect();
    let comp: Vec<&&Rec> = neff.iter().copied().filter(|r| is_compute(r)).collect();
    let min = |v: &[&&Rec]| v.iter().map(|r| r.ts).reduce(f64::min);
    let max = |v: &[&&Rec]| v.iter().map(|r| r.end()).reduce(f64::max);
    let (n0, n1) = (min(&neff)?, max(&neff)?);
    let (c0, c1) = (min(&comp).unwrap_or(n1), max(&comp).unwrap_or(n1));
    let end = mine
        .iter()
        .filter(|r| r.opcode == "NOTIFY" && r.operands.split_whitespace().any(|t| t == "hint=3"))
        .map(|r| r.end())
        .reduce(f64::max)
        .unwrap_or(p.total_ns)
        .max(n1);
    let d = |a: f64, b: f64| (b - a).max(0.0);
    Some([d(0.0, n0), d(n0, c0), d(c0, c1), d(c1, n1), d(n1, end)])
}

/// Count, summed duration, active time (the union of the records) and the union without
/// the wait words per (subgraph, engine).
fn engines(p: &Profile) -> BTreeMap<(String, Engine), EngineStats> {
    engine_stats(
        p.instrs
            .iter()
            .map(|r| (r.sg.as_str(), r.engine, r.opcode.as_str(), r.ts, r.dur)),
    )
}

fn err(emu: f64, real: f64) -> Option<f64> {
    (real > 0.0).then(|| (emu - real) / real)
}

/// The value at quantile `q` of sorted `v`.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied()
}

/// Per-opcode comparison of the words both profiles have, matched by (subgraph, engine, pc,
/// occurrence): pairs, median signed and p90 absolute relative duration error, total durations.
#[derive(Debug, Default)]
struct OpRow {
    pairs: usize,
    real_n: usize,
    emu_n: usize,
    errs: Vec<f64>,
    real_total: f64,
    emu_total: f64,
}

fn opcodes(real: &Profile, emu: &Profile) -> (BTreeMap<String, OpRow>, usize) {
    type Key = (String, Engine, u32, usize);
    let index = |p: &Profile| {
        let mut seen: BTreeMap<(String, Engine, u32), usize> = BTreeMap::new();
        let mut out: BTreeMap<Key, Rec> = BTreeMap::new();
        let mut order: Vec<&Rec> = p.instrs.iter().collect();
        order.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        for r in order {
            let k = seen.entry((r.sg.clone(), r.engine, r.pc)).or_default();
            out.insert((r.sg.clone(), r.engine, r.pc, *k), r.clone());
            *k += 1;
        }
        out
    };
    let (ri, ei) = (index(real), index(emu));
    let mut rows: BTreeMap<String, OpRow> = BTreeMap::new();
    for r in &real.instrs {
        rows.entry(r.opcode.clone()).or_default().real_n += 1;
    }
    for r in &emu.instrs {
        rows.entry(r.opcode.clone()).or_default().emu_n += 1;
    }
    let mut mismatched = 0;
    for (k, r) in &ri {
        let Some(e) = ei.get(k) else { continue };
        if e.opcode != r.opcode {
            mismatched += 1;
            continue;
        }
        let row = rows.entry(r.opcode.clone()).or_default();
        row.pairs += 1;
        row.real_total += r.dur;
        row.emu_total += e.dur;
        if let Some(x) = err(e.dur, r.dur) {
            row.errs.push(x);
        }
    }
    for row in rows.values_mut() {
        row.errs.sort_by(f64::total_cmp);
    }
    (rows, mismatched)
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{:+.1}%", x * 100.0))
}

pub(crate) fn run(a: &DiffArgs) -> Result<(), Failure> {
    let info = a
        .neff
        .as_deref()
        .map(crate::ntff::neff_info)
        .transpose()
        .map_err(|e| Failure(2, e))?;
    let real = read(&a.real, info.as_ref()).map_err(|e| Failure(2, e.to_string()))?;
    let emu = read(&a.emu, info.as_ref()).map_err(|e| Failure(2, e.to_string()))?;
    let doc = compare(&real, &emu);
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    println!(
        "profile-diff: {} (real) vs {} (emulated)",
        a.real.display(),
        a.emu.display()
    );
    println!(
        "total_time      real {:>10.3} us  emulated {:>10.3} us  error {}",
        real.total_ns / 1e3,
        emu.total_ns / 1e3,
        pct(err(emu.total_ns, real.total_ns))
    );
    for p in doc["phases"].as_array().into_iter().flatten() {
        println!(
            "phases of {} (us)        real   emulated     error",
            p["subgraph"].as_str().unwrap_or("?")
        );
        for ph in p["phases"].as_array().into_iter().flatten() {
            println!(
                "  {:<16} {:>10.3} {:>10.3} {:>9}",
                ph["phase"].as_str().unwrap_or("?"),
                ph["real_us"].as_f64().unwrap_or(0.0),
                ph["emu_us"].as_f64().unwrap_or(0.0),
                pct(ph["error"].as_f64())
            );
        }
    }
    println!(
        "engines              count real/emu     active us real / emu   error   instruction us real / emu   error   no-wait active us real / emu   error"
    );
    for e in doc["engines"].as_array().into_iter().flatten() {
        let f = |k: &str| e[k].as_f64().unwrap_or(0.0);
        println!(
            "  {:<4} {:<8} {:>6} {:>6}   {:>10.3} {:>10.3} {:>8}   {:>10.3} {:>10.3} {:>8}   {:>10.3} {:>10.3} {:>8}",
            e["subgraph"].as_str().unwrap_or("?"),
            e["engine"].as_str().unwrap_or("?"),
            e["real_count"].as_u64().unwrap_or(0),
            e["emu_count"].as_u64().unwrap_or(0),
            f("real_active_us"),
            f("emu_active_us"),
            pct(e["active_error"].as_f64()),
            f("real_instruction_us"),
            f("emu_instruction_us"),
            pct(e["instruction_error"].as_f64()),
            f("real_nowait_active_us"),
            f("emu_nowait_active_us"),
            pct(e["nowait_active_error"].as_f64())
        );
    }
    println!(
        "opcodes (matched by subgraph, engine, pc)  pairs  real/emu n  median err  p90 |err|   total us real / emu   error"
    );
    for o in doc["opcodes"].as_array().into_iter().flatten() {
        let f = |k: &str| o[k].as_f64().unwrap_or(0.0);
        println!(
            "  {:<28} {:>5} {:>6} {:>5} {:>10} {:>10}   {:>9.3} {:>9.3} {:>8}",
            o["opcode"].as_str().unwrap_or("?"),
            o["pairs"].as_u64().unwrap_or(0),
            o["real_count"].as_u64().unwrap_or(0),
            o["emu_count"].as_u64().unwrap_or(0),
            pct(o["median_error"].as_f64()),
            pct(o["p90_abs_error"].as_f64()),
            f("real_total_us"),
            f("emu_total_us"),
            pct(o["total_error"].as_f64())
        );
    }
    println!(
        "records: real {} ({} on other tracks), emulated {} ({} on other tracks); {} matched pcs with different opcodes",
        real.instrs.len(),
        real.other,
        emu.instrs.len(),
        emu.other,
        doc["mismatched_opcodes"]
    );
    if doc["mismatched_opcodes"].as_u64() > Some(0) {
        println!("warning: words at the same pcs differ: the two profiles are probably of different NEFFs");
    }
    Ok(())
}

/// The comparison as JSON (what `--json` prints and the text is made from).
fn compare(real: &Profile, emu: &Profile) -> Value {
    let mut sgs: Vec<String> = real.instrs.iter().map(|r| r.sg.clone()).collect();
    sgs.sort();
    sgs.dedup();
    let phases_j: Vec<Value> = sgs
        .iter()
        .filter_map(|sg| {
            let (r, e) = (phases(real, sg)?, phases(emu, sg)?);
            let rows: Vec<Value> = PHASES
                .iter()
                .zip(r.iter().zip(e.iter()))
                .map(|(n, (r, e))| {
                    json!({"phase": n, "real_us": r / 1e3, "emu_us": e / 1e3, "error": err(*e, *r)})
                })
                .collect();
            Some(json!({"subgraph": sg, "phases": rows}))
        })
        .collect();
    let (re, ee) = (engines(real), engines(emu));
    let mut keys: Vec<&(String, Engine)> = re.keys().chain(ee.keys()).collect();
    keys.sort();
    keys.dedup();
    let engines_j: Vec<Value> = keys
        .into_iter()
        .map(|k| {
            let r = re.get(k).copied().unwrap_or_default();
            let e = ee.get(k).copied().unwrap_or_default();
            json!({
                "subgraph": k.0, "engine": k.1.profiler_name(),
                "real_count": r.count, "emu_count": e.count,
                "real_active_us": r.busy / 1e3, "emu_active_us": e.busy / 1e3,
                "active_error": err(e.busy, r.busy),
                "real_instruction_us": r.sum / 1e3, "emu_instruction_us": e.sum / 1e3,
                "instruction_error": err(e.sum, r.sum),
                "real_nowait_active_us": r.active / 1e3, "emu_nowait_active_us": e.active / 1e3,
                "nowait_active_error": err(e.active, r.active),
            })
        })
        .collect();
    let (ops, mismatched) = opcodes(real, emu);
    let ops_j: Vec<Value> = ops
        .iter()
        .map(|(op, o)| {
            let abs: Vec<f64> = {
                let mut v: Vec<f64> = o.errs.iter().map(|x| x.abs()).collect();
                v.sort_by(f64::total_cmp);
                v
            };
            json!({
                "opcode": op, "pairs": o.pairs, "real_count": o.real_n, "emu_count": o.emu_n,
                "median_error": quantile(&o.errs, 0.5), "p90_abs_error": quantile(&abs, 0.9),
                "real_total_us": o.real_total / 1e3, "emu_total_us": o.emu_total / 1e3,
                "total_error": err(o.emu_total, o.real_total),
            })
        })
        .collect();
    json!({
        "total_time": {
            "real_us": real.total_ns / 1e3, "emu_us": emu.total_ns / 1e3,
            "error": err(emu.total_ns, real.total_ns),
        },
        "phases": phases_j,
        "engines": engines_j,
        "opcodes": ops_j,
        "mismatched_opcodes": mismatched,
        "records": {"real": real.instrs.len(), "emu": emu.instrs.len(),
                    "real_other_tracks": real.other, "emu_other_tracks": emu.other},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(opcode: &str, operands: &str, ts: f64, dur: f64) -> Rec {
        Rec {
            sg: "sg00".into(),
            engine: Engine::Sp,
            pc: 0,
            opcode: opcode.into(),
            operands: operands.into(),
            ts,
            dur,
        }
    }

    /// An NTFF reads as a profile: compared with itself every word pairs and no error is
    /// left.
    #[test]
    fn an_ntff_is_a_profile() {
        let path = crate::ntff::tests::model("kgm-attn_tkg_v6.ntff");
        let p = read(&path, None).expect("ntff profile");
        assert_eq!(p.instrs.len(), 2261);
        let doc = compare(&p, &p);
        assert_eq!(doc["mismatched_opcodes"], 0);
        assert_eq!(doc["total_time"]["error"], 0.0);
        for e in doc["engines"].as_array().expect("engines") {
            assert_eq!(e["real_count"], e["emu_count"]);
            assert_eq!(e["nowait_active_error"].as_f64().unwrap_or(0.0), 0.0);
        }
        for o in doc["opcodes"].as_array().expect("opcodes") {
            assert_eq!(o["pairs"], o["real_count"], "{o}");
        }
    }

    /// On a profiled kernel the NTFF reads as its profiler JSON does: the same total, per
    /// engine the same records (±1 at the window's edges) and busy time within 1%.
    #[test]
    fn an_ntff_reads_as_its_profiler_json() {
        let dir = std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/real-profiles"
        ));
        let k = "akc-fused_fp32_s512";
        let j = read(&dir.join(format!("{k}.profile.json")), None).expect("json");
        let n = read(&dir.join(format!("{k}.ntff")), None).expect("ntff");
        assert!((j.total_ns - n.total_ns).abs() < 1e-3);
        let (ej, en) = (engines(&j), engines(&n));
        assert_eq!(ej.len(), 10);
        assert_eq!(ej.keys().collect::<Vec<_>>(), en.keys().collect::<Vec<_>>());
        for (key, a) in &ej {
            let b = en[key];
            assert!(a.count.abs_diff(b.count) <= 1, "{key:?}");
            assert!((a.busy - b.busy).abs() <= 0.01 * a.busy + 50.0, "{key:?}");
        }
    }

    #[test]
    fn phases_follow_the_neff_words() {
        let p = Profile {
            total_ns: 100.0,
            other: 0,
            instrs: vec![
                rec("EVENT_SEMAPHORE", " $S[2]==4 $S[2]++@complete ", 1.0, 2.0),
                rec("DMA_DIRECT2D", " semaphore=8 ", 10.0, 1.0),
                rec("MATMUL", "S[5] (Tensor)++@complete", 30.0, 5.0),
                rec("COPY", "", 40.0, 10.0),
                rec("NOP", "S[27] (qGpSimdDynamic)>=16 cycle=0 ", 70.0, 2.0),
                rec("NOTIFY", " hint=3 ", 90.0, 1.0),
            ],
        };
        assert_eq!(phases(&p, "sg00"), Some([10.0, 20.0, 20.0, 22.0, 19.0]));
        assert_eq!(phases(&p, "sg01"), None);
        assert!(names_a_semaphore("S[8] (qSyncDynamicHW)>=16"));
        assert!(!names_a_semaphore(" setter=0 $S[2]==8 $S[2]=0@complete "));
    }
}
