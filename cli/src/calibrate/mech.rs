//! Evidence for the calibrated mechanisms and the fixed-cost words, read off the profile
//! records: header waits vs body waits, the peer-core WRITE, the semaphore timeline (barrier
//! hops, when a wait held) and the samples `calib::Mechanisms` is fitted from.

use super::*;

/// Words whose cost does not depend on a size: fitted as a constant from the records' own
/// `duration` (these words are mostly latency-bound: the next word waits for them), taking
/// only records with no semaphore or event wait in their operands (their duration holds the
/// wait). Most occur only in the runtime's prologue and epilogue.
pub(super) const FIXED: &[&str] = &[
    "TENSOR_LOAD",
    "COMPARE_BRANCH",
    "WRITE",
    "DRAIN",
    "NOTIFY",
    "NOP",
    "SET_ORDERING_MODE",
    "EVENT_SEMAPHORE",
    "EVENT_SEMAPHORE_RANGE_CLEAR",
    "ACT_TABLE_LOAD",
];

/// Whether a profiler operand string holds a wait (`$S[2]==8`, `S[24] (q..)>=16`, `$E[4]==1-`):
/// a comparison not marked `@complete` (updates are).
pub(super) fn has_wait(operands: &str) -> bool {
    operands.split_whitespace().any(|t| {
        !t.contains('@')
            && (t.contains("==") || t.contains(">=") || t.contains(")>") || t.contains("]>"))
    })
}

/// A profile's instruction records per (subgraph, engine track), in time order.
pub(super) fn tracks(j: &serde_json::Value) -> BTreeMap<(String, Engine), Vec<&serde_json::Value>> {
    let mut out: BTreeMap<(String, Engine), Vec<&serde_json::Value>> = BTreeMap::new();
    for r in j["instruction"].as_array().into_iter().flatten() {
        if let Some((sg, engine, _, _)) = record_key(r) {
            out.entry((sg.to_string(), engine)).or_default().push(r);
        }
    }
    for v in out.values_mut() {
        v.sort_by(|a, b| {
            let t = |r: &serde_json::Value| r["timestamp"].as_f64().unwrap_or(0.0);
            t(a).total_cmp(&t(b))
        });
    }
    out
}

/// Whether a record's word waits before it starts: a header wait (the record's timestamp is
/// then when the wait held, so the interval before it holds waiting). An EVENT_SEMAPHORE's
/// own condition (after `setter=`) is waited on inside its duration instead.
pub(super) fn header_wait(r: &serde_json::Value) -> bool {
    let ops = r["operands"].as_str().unwrap_or("");
    let head = match (r["opcode"].as_str(), ops.find("setter=")) {
        (Some("EVENT_SEMAPHORE"), Some(i)) => &ops[..i],
        _ => ops,
    };
    has_wait(head)
}

/// The LNC=2 handshake's WRITE: Tensor's WRITE to the peer core, followed by the wait for
/// the peer's `$S[1]` increment (`runtime/src/prologue.rs`).
pub(super) fn is_peer_write(r: &serde_json::Value, next: Option<&serde_json::Value>) -> bool {
    r["opcode"].as_str() == Some("WRITE")
        && next.is_some_and(|n| {
            n["opcode"].as_str() == Some("EVENT_SEMAPHORE")
                && n["operands"]
                    .as_str()
                    .is_some_and(|o| o.contains("$S[1]>="))
        })
}

/// Constant-cost samples (`FIXED`) of one profile: the issue interval (the next record's
/// start minus this one's, when the next has no header wait), else the record's duration;
/// TENSOR_LOAD sized by the registers it loads.
pub fn fixed_samples(kernel: usize, profile: &Path) -> Result<Vec<Sample>, String> {
    let j = read_json(profile)?;
    let sems = sem_timeline(&j);
    let mut out = Vec::new();
    for ((sg, engine), recs) in tracks(&j) {
        for (i, r) in recs.iter().enumerate() {
            let next = recs.get(i + 1).copied();
            let (Some(name), Some(ts), Some(d), Some(ops)) = (
                r["opcode"].as_str(),
                r["timestamp"].as_f64(),
                r["duration"].as_f64(),
                r["operands"].as_str(),
            ) else {
                continue;
            };
            let Some(opcode) = Opcode::all().find(|o| o.static_name() == name) else {
                continue;
            };
            let class = Class {
                engine,
                opcode,
                wide: false,
                transpose: false,
            };
            // A barrier hop: an EVENT_SEMAPHORE waiting on its own condition costs, once the
            // condition holds, until its update (both on the semaphore timeline). Tensor's
            // class has measured intervals (its barrier words that do not wait).
            if opcode == Opcode::EventSemaphore && engine != Engine::Pe {
                if let Some(hop) = barrier_hop(&sems, &sg, ts, ops) {
                    out.push(Sample {
                        kernel,
                        class,
                        elems: 0.0,
                        interval_ns: hop,
                        latency_ns: hop,
                        model_ns: table_fixed_ns(engine),
                        measured: true,
                    });
                }
                continue;
            }
            if !FIXED.contains(&name) || has_wait(ops) || is_peer_write(r, next) {
                continue;
            }
            let interval = next
                .filter(|n| !header_wait(n))
                .and_then(|n| n["timestamp"].as_f64())
                .map(|t| t - ts);
            let elems = if opcode == Opcode::TensorLoad {
                ops.matches("$R[").count().max(1) as f64
            } else {
                0.0
            };
            out.push(Sample {
                kernel,
                class,
                elems,
                interval_ns: interval.unwrap_or(d),
                latency_ns: d,
                model_ns: table_fixed_ns(engine),
                measured: interval.is_some(),
            });
        }
    }
    Ok(out)
}

/// An EVENT_SEMAPHORE `$S[n]==v $S[n]++` (or `=0`) that started at `ts`: from the update
/// that made `$S[n]` equal `v` (or from `ts`, if later) to its own update.
pub(super) fn barrier_hop(sems: &SemTimeline, sg: &str, ts: f64, ops: &str) -> Option<f64> {
    let toks: Vec<&str> = ops.split_whitespace().collect();
    let i = toks
        .iter()
        .position(|t| t.starts_with("$S[") && t.contains("]=="))?;
    let (sem, v) = toks[i].strip_prefix("$S[")?.split_once("]==")?;
    let (n, v): (u64, f64) = (sem.parse().ok()?, v.parse().ok()?);
    let upd = toks.get(i + 1)?;
    let next = if upd.ends_with("++@complete") {
        v + 1.0
    } else if upd.ends_with("=0@complete") {
        0.0
    } else {
        return None;
    };
    let ups = sems.get(&(sg.to_string(), n))?;
    // The last update to v before the word's own update, which is the first to `next` after.
    let own = ups.iter().find(|(t, val)| *t >= ts && *val == next)?.0;
    let held = ups
        .iter()
        .filter(|(t, val)| *val == v && *t <= own)
        .map(|(t, _)| *t)
        .fold(f64::NEG_INFINITY, f64::max);
    held.is_finite().then(|| own - held.max(ts))
}

/// Keep, per class, the measured intervals when they come from two kernels or more;
/// otherwise the class is fitted on its records' durations.
pub fn prefer_intervals(all: Vec<Sample>) -> Vec<Sample> {
    let mut ks: BTreeMap<Class, std::collections::BTreeSet<usize>> = BTreeMap::new();
    for s in all.iter().filter(|s| s.measured) {
        ks.entry(s.class).or_default().insert(s.kernel);
    }
    all.into_iter()
        .filter(|s| s.measured == ks.get(&s.class).is_some_and(|k| k.len() >= 2))
        .collect()
}

/// Evidence for the mechanisms outside one word's class (`calib::Mechanisms`).
#[derive(Debug, Clone, Default)]
pub struct MechSamples {
    /// (kernel, queue kind, delay from the engine's release to its first recorded word, ns).
    pub handoff: Vec<(usize, neuron_devmodel::calib::QueueKind, f64)>,
    /// (kernel, issue interval of the handshake WRITE to the peer core, ns).
    pub peer_write: Vec<(usize, f64)>,
    /// (kernel, software-DGE DMA start after it was ready, ns).
    pub startup: Vec<(usize, f64)>,
}

/// Per (subgraph, semaphore): the profile's semaphore values over time.
pub(super) type SemTimeline = BTreeMap<(String, u64), Vec<(f64, f64)>>;

pub(super) fn sem_timeline(j: &serde_json::Value) -> SemTimeline {
    let mut sems = SemTimeline::new();
    for u in j["semaphore_update"].as_array().into_iter().flatten() {
        // Ids read "S[24] (q...)" or "2".
        let id = match &u["id"] {
            serde_json::Value::String(s) => s
                .trim_start_matches("S[")
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok()),
            v => v.as_u64(),
        };
        let (Some(sg), Some(id), Some(ts), Some(v)) = (
            u["subgraph"].as_str(),
            id,
            u["timestamp"].as_f64(),
            u["value"].as_f64(),
        ) else {
            continue;
        };
        sems.entry((sg.to_string(), id)).or_default().push((ts, v));
    }
    for v in sems.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    sems
}

/// When the header waits of a record (`S[n] (name)>=v`) held, per the semaphore timeline.
pub(super) fn waits_held(sems: &SemTimeline, sg: &str, r: &serde_json::Value) -> Option<f64> {
    let ts = r["timestamp"].as_f64()?;
    let toks: Vec<&str> = r["operands"].as_str()?.split_whitespace().collect();
    let mut at: Option<f64> = None;
    for (i, t) in toks.iter().enumerate() {
        let n = t.strip_prefix("S[").and_then(|t| t.strip_suffix(']'));
        let want = toks
            .get(i + 1)
            .and_then(|w| w.split_once(")>="))
            .and_then(|(_, v)| v.parse::<f64>().ok());
        let (Some(Ok(n)), Some(want)) = (n.map(str::parse::<u64>), want) else {
            continue;
        };
        let held = sems
            .get(&(sg.to_string(), n))?
            .iter()
            .find(|(t, val)| *val >= want && *t <= ts)?
            .0;
        at = Some(at.map_or(held, |a| a.max(held)));
    }
    at
}

/// Mechanism samples of one profiled kernel.
pub fn mech_samples(kernel: usize, neff: &Path, profile: &Path) -> Result<MechSamples, String> {
    use neuron_devmodel::calib::queue_kind;
    let words = neff_words(neff)?;
    let j = read_json(profile)?;
    let tr = tracks(&j);
    let sems = sem_timeline(&j);
    let mut out = MechSamples::default();
    let ts = |r: &serde_json::Value| r["timestamp"].as_f64().unwrap_or(0.0);
    let end = |r: &serde_json::Value| ts(r) + r["duration"].as_f64().unwrap_or(0.0);
    // Tensor's loop head sets events 0-3 (one NOP each), releasing Scalar, GpSimd, Vector,
    // Sync, then loads $R[0], branches and starts (NOTIFY hint=2). Where the profile recorded
    // the NOPs (not in sg00, whose hint=2 is the profile's t=0), they give the release of
    // event k before hint=2; the median over subgraphs places the unrecorded ones.
    let hint2 = |sg: &str| {
        tr.get(&(sg.to_string(), Engine::Pe))?
            .iter()
            .find(|r| {
                r["opcode"] == "NOTIFY"
                    && r["operands"].as_str().is_some_and(|o| o.contains("hint=2"))
            })
            .map(|r| ts(r))
            .or((sg == "sg00").then_some(0.0))
    };
    let mut before: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for ((sg, e), recs) in &tr {
        let Some(h) = (*e == Engine::Pe).then(|| hint2(sg)).flatten() else {
            continue;
        };
        for r in recs.iter().filter(|r| ts(r) < h && r["opcode"] == "NOP") {
            let ops = r["operands"].as_str().unwrap_or("");
            if let Some(k) = (0..4).find(|k| ops.contains(&format!("$E[{k}]+@complete"))) {
                before.entry(k).or_default().push(h - end(r));
            }
        }
    }
    let step = {
        let m: Vec<(usize, f64)> = before
            .iter()
            .map(|(k, v)| (*k, median(v.clone())))
            .collect();
        // Release k's distance before hint=2, extrapolated from the recorded events.
        move |k: usize| -> Option<f64> {
            let (k0, d0) = *m.iter().max_by_key(|(kk, _)| *kk)?;
            let per = match (m.first(), m.last()) {
                (Some(a), Some(b)) if b.0 > a.0 => (a.1 - b.1) / (b.0 - a.0) as f64,
                _ => 98.0,
            };
            Some(d0 + per * (k0 as f64 - k as f64))
        }
    };
    let sgs: std::collections::BTreeSet<String> = tr.keys().map(|(sg, _)| sg.clone()).collect();
    for sg in &sgs {
        let Some(h) = hint2(sg) else { continue };
        for (k, engine) in [Engine::Act, Engine::Pool, Engine::Dve, Engine::Sp]
            .into_iter()
            .enumerate()
        {
            let (Some(first), Some(dist)) = (
                tr.get(&(sg.clone(), engine)).and_then(|v| v.first()),
                step(k),
            ) else {
                continue;
            };
            let dma = words
                .iter()
                .any(|((g, e, _), w)| g == sg && *e == engine && w.opcode == Opcode::DmaDirect2d);
            // The released NOP itself issues after the hand-off and costs the table's charge.
            let d = ts(first) - (h - dist) - table_fixed_ns(engine);
            out.handoff.push((kernel, queue_kind(engine, dma), d));
        }
    }
    for ((sg, engine), recs) in &tr {
        for (i, r) in recs.iter().enumerate() {
            let next = recs.get(i + 1).copied();
            if *engine == Engine::Pe && is_peer_write(r, next) {
                if let Some(n) = next {
                    out.peer_write.push((kernel, ts(n) - ts(r)));
                }
            }
            let sw = queue_kind(*engine, true) == neuron_devmodel::calib::QueueKind::SoftwareDge;
            // Back to back: right after another DMA_DIRECT2D, with no wait between.
            let back_to_back = i > 0 && recs[i - 1]["opcode"] == "DMA_DIRECT2D" && !header_wait(r);
            if sw && r["opcode"] == "DMA_DIRECT2D" && i > 0 && !back_to_back {
                let ready =
                    waits_held(&sems, sg, r).map_or(end(recs[i - 1]), |w| w.max(end(recs[i - 1])));
                out.startup.push((kernel, ts(r) - ready));
            }
        }
    }
    Ok(out)
}
