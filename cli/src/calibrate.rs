//! `neuron-emu calibrate`: fit the per-instruction cost model of real trn2 words to AWS's
//! per-instruction profile records, and say how well the fit predicts kernels it has not seen.
//!
//! Evidence: each `<stem>.profile.json` lists every executed instruction with its
//! (subgraph, engine track, pc), opcode, start timestamp and duration (ns). A `duration` is
//! latency, not occupancy — on PE the next LDWEIGHTS starts a few ns after a MATMUL does — so
//! what is fitted is the **issue interval**: the start of the engine's next instruction minus
//! this one's, taken only when the next instruction has no semaphore wait (otherwise the gap
//! holds waiting, not work). Each sample is joined to the NEFF word at the same pc (NEFF word
//! 0 sits at `neff_base`), whose decoded operands give the size feature: elements per partition
//! of the main access pattern (MATMUL: moving columns).
//!
//! Model per class (engine, opcode, 4-byte input or not): `interval_ns = a + b * elements`,
//! least squares; `b < 0` falls back to a constant. The mechanisms outside one word's class
//! (`calib::Mechanisms`: start hand-off by DMA queue kind, peer-core WRITE, software-DGE
//! start-up) are medians of their own samples (`mech_samples`). Validation is
//! leave-one-kernel-out: each kernel is predicted by a fit to the other kernels only, per
//! instruction and over its whole execution window (against `summary.total_time`), so the
//! figures say how the model does on a kernel it was not fitted to.

use crate::{usage, Failure};
use neuron_isa::cayman::render::neff_base;
use neuron_isa::cayman::{CaymanInstr, Namespace, Opcode, WORD};
use neuron_isa::Engine;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod mech;
pub use mech::*;

/// One issue interval joined to its NEFF word.
#[derive(Debug, Clone)]
pub struct Sample {
    pub kernel: usize,
    pub class: Class,
    pub elems: f64,
    pub interval_ns: f64,
    /// From the sample's start to the end of its (last) record: when silicon signals it done.
    pub latency_ns: f64,
    /// What the uncalibrated cost table charges for the same word(s).
    pub model_ns: f64,
    /// `interval_ns` is a measured issue interval; false: the record's own duration, used
    /// only for classes with no interval samples from two kernels.
    pub measured: bool,
}

/// What a cost is fitted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Class {
    pub engine: Engine,
    pub opcode: Opcode,
    /// The main input is a 4-byte type (fp32 MATMULs run at a lower rate).
    pub wide: bool,
    /// MATMUL after an LDWEIGHTS in transpose mode.
    pub transpose: bool,
}

impl Class {
    fn variant(&self) -> &'static str {
        match (self.wide, self.transpose) {
            (true, true) => "fp32 T",
            (true, false) => "fp32",
            (false, true) => "16-bit T",
            (false, false) => "",
        }
    }
}

/// `interval_ns = a + b * elements`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub a: f64,
    pub b: f64,
    pub n: usize,
    /// Kernels the samples come from (a class seen in one kernel cannot be validated).
    pub kernels: usize,
}

impl Fit {
    pub fn predict(&self, elems: f64) -> f64 {
        self.a + self.b * elems
    }
}

/// Opcodes sampled by their issue interval: the data words the device model sizes, and a
/// DMA_DIRECT2D's issue (PE's MATMUL is sampled with its LDWEIGHTS, as a pair).
fn fitted(op: Opcode) -> bool {
    op == Opcode::DmaDirect2d
        || (neuron_devmodel::calib::sized(op) && !matches!(op, Opcode::Matmul | Opcode::Ldweights))
}

/// Elements per partition of the word's main access pattern and whether its input is 4-byte:
/// the device model's own definition, so samples and charges agree.
pub fn features(ci: &CaymanInstr) -> (f64, bool) {
    let (elems, wide) = neuron_devmodel::calib::word_features(ci);
    (elems as f64, wide)
}

/// A profile's JSON.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let raw = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&raw).map_err(|e| format!("{}: {e}", path.display()))
}

/// An instruction record's (subgraph, engine, pc, start ns), if well formed.
pub(crate) fn record_key(r: &serde_json::Value) -> Option<(&str, Engine, u32, f64)> {
    Some((
        r["subgraph"].as_str()?,
        r["label"].as_str().and_then(engine_of_track)?,
        r["pc"].as_u64().and_then(|p| u32::try_from(p).ok())?,
        r["timestamp"].as_f64()?,
    ))
}

fn engine_of_track(label: &str) -> Option<Engine> {
    Some(match label {
        "Tensor" | "TensorMatrix" => Engine::Pe,
        "Scalar" => Engine::Act,
        "GpSimd" => Engine::Pool,
        "Vector" => Engine::Dve,
        "Sync" => Engine::Sp,
        _ => return None,
    })
}

/// The NEFF's words by (subgraph dir, engine, profiler pc).
type Words = BTreeMap<(String, Engine, u32), CaymanInstr>;

fn neff_words(path: &Path) -> Result<Words, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let neff = neuron_neff::Neff::parse(&bytes).map_err(|e| e.to_string())?;
    let kelf = neff.kelf().map_err(|e| e.to_string())?;
    let mut out = Words::new();
    for g in &kelf.graphs {
        let sg = g.dir().to_string();
        let def = neff
            .subgraph_def(&g.definition)
            .map_err(|e| e.to_string())?;
        for (i, (_, json, file)) in def.engine_files().into_iter().enumerate() {
            let (Some(engine), Some(file)) = (Engine::from_index(i), file) else {
                continue;
            };
            let f = neuron_runtime::real::features(&neff, &def, &sg, engine, json);
            let base = neff_base(engine, f);
            let bin = neff.subgraph_file(&sg, file).map_err(|e| e.to_string())?;
            for (k, w) in bin.chunks_exact(WORD).enumerate() {
                let Ok(w) = <&[u8; WORD]>::try_from(w) else {
                    continue;
                };
                let pc = base + k as u32;
                out.insert(
                    (sg.clone(), engine, pc),
                    CaymanInstr::decode(Namespace::Neff, w),
                );
            }
        }
    }
    Ok(out)
}

/// The uncalibrated cost table's charge for one word (`docs/timing.md`): issue overhead plus
/// one element per cycle per lane, MATMUL's moving columns at a quarter rate for fp32; a
/// DMA_DIRECT2D costs its engine the overhead only.
fn table_ns(engine: Engine, ci: &CaymanInstr) -> f64 {
    let cost = neuron_devmodel::ArchProfile::new(neuron_abi::arch::Arch::V3Trn2).cost;
    let (elems, wide) = features(ci);
    let per = match ci.opcode {
        Opcode::DmaDirect2d => 0.0,
        Opcode::Matmul if wide => 4.0 * elems,
        _ => elems,
    };
    let cycles =
        cost.instr_overhead_cycles as f64 + per / cost.stream_elems_per_cycle.max(1) as f64;
    cycles * 1000.0 / cost.engine_mhz[engine.index()] as f64
}

/// Per (subgraph, engine): the pcs of the NEFF's words, `[base, base + n)`.
/// Per (subgraph, engine): a pc range.
type Ranges = BTreeMap<(String, Engine), (u32, u32)>;

fn body_ranges(path: &Path) -> Result<Ranges, String> {
    let mut out = Ranges::new();
    for (sg, engine, pc) in neff_words(path)?.keys() {
        let e = out
            .entry((sg.clone(), *engine))
            .or_insert((*pc, pc.saturating_add(1)));
        e.0 = e.0.min(*pc);
        e.1 = e.1.max(pc.saturating_add(1));
    }
    Ok(out)
}

/// Silicon: from the first NEFF word's start to the last NEFF word's end in subgraph `sg00`
/// (the runtime's prologue and epilogue excluded), ns.
fn profile_body_ns(neff: &Path, profile: &Path) -> Result<f64, String> {
    let ranges = body_ranges(neff)?;
    let j = read_json(profile)?;
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for r in j["instruction"].as_array().into_iter().flatten() {
        let (Some(("sg00", engine, pc, ts)), Some(d)) = (record_key(r), r["duration"].as_f64())
        else {
            continue;
        };
        if ranges
            .get(&("sg00".to_string(), engine))
            .is_some_and(|(a, b)| (*a..*b).contains(&pc))
        {
            lo = lo.min(ts);
            hi = hi.max(ts + d);
        }
    }
    (hi > lo)
        .then_some(hi - lo)
        .ok_or_else(|| format!("{}: no NEFF-word records in sg00", profile.display()))
}

/// The emulator: the same span on NC 0 (where sg00 runs), one execution with seeded inputs,
/// under cost table `cost`, ns.
fn emulated_body_ns(
    neff: &Path,
    cost: neuron_devmodel::arch::CostTable,
) -> Result<(f64, f64), String> {
    emulated_run(neff, cost).map(|r| (r.0, r.1))
}

/// One word's span on sg00 (NC 0), ns from the execution's t=0 (sg00 Tensor's hint=2).
#[derive(Debug, Clone)]
struct Span {
    engine: Engine,
    pc: u32,
    opcode: String,
    start: f64,
    end: f64,
}

/// Silicon's spans of sg00 (the profile's t=0 is sg00 Tensor's hint=2).
/// Silicon's spans, and per (engine, pc) whether the word waits at all and whether it has a
/// header wait (its record then starts when the wait held).
type WaitFlags = BTreeMap<(Engine, u32), (bool, bool)>;

fn silicon_spans(profile: &Path) -> Result<(Vec<Span>, WaitFlags), String> {
    let j = read_json(profile)?;
    let mut spans = Vec::new();
    let mut waits = BTreeMap::new();
    for r in j["instruction"].as_array().into_iter().flatten() {
        let (Some(("sg00", engine, pc, ts)), Some(d), Some(op)) =
            (record_key(r), r["duration"].as_f64(), r["opcode"].as_str())
        else {
            continue;
        };
        let own = r["operands"].as_str().is_some_and(has_wait);
        waits.insert((engine, pc), (own, header_wait(r)));
        spans.push(Span {
            engine,
            pc,
            opcode: op.to_string(),
            start: ts,
            end: ts + d,
        });
    }
    Ok((spans, waits))
}

/// The phases of sg00's execution, ns: start hand-off (t=0 to the first NEFF word), input
/// (to the first compute word), compute (to the last compute word's end), output (to the
/// last NEFF word's end), epilogue (to the end of the window, `total`).
fn phases(spans: &[Span], ranges: &Ranges, total: f64) -> Option<[f64; 5]> {
    let compute: Vec<&str> = Opcode::all()
        .filter(|o| neuron_devmodel::calib::sized(*o))
        .map(|o| o.static_name())
        .collect();
    let neff: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            ranges
                .get(&("sg00".to_string(), s.engine))
                .is_some_and(|(a, b)| (*a..*b).contains(&s.pc))
        })
        .collect();
    let lo = |v: &mut dyn Iterator<Item = f64>| v.fold(f64::INFINITY, f64::min);
    let hi = |v: &mut dyn Iterator<Item = f64>| v.fold(f64::NEG_INFINITY, f64::max);
    let first = lo(&mut neff.iter().map(|s| s.start));
    let last = hi(&mut neff.iter().map(|s| s.end));
    let comp = || neff.iter().filter(|s| compute.contains(&s.opcode.as_str()));
    let (c0, c1) = (
        lo(&mut comp().map(|s| s.start)),
        hi(&mut comp().map(|s| s.end)),
    );
    [first, last, c0, c1]
        .iter()
        .all(|v| v.is_finite())
        .then_some([first, c0 - first, c1 - c0, last - c1, total - last])
}

/// Issue intervals by (engine, pc): the start of the word at pc + 1 minus this one's (an
/// LDWEIGHTS + MATMUL pair is one interval, on its LDWEIGHTS), with the pair's label.
fn intervals(spans: &[Span]) -> BTreeMap<(Engine, u32), (String, f64, u32)> {
    let by: BTreeMap<(Engine, u32), &Span> = spans.iter().map(|s| ((s.engine, s.pc), s)).collect();
    let mut out = BTreeMap::new();
    for (&(e, pc), s) in &by {
        let pair =
            s.opcode == "LDWEIGHTS" && by.get(&(e, pc + 1)).is_some_and(|m| m.opcode == "MATMUL");
        if s.opcode == "MATMUL"
            && pc > 0
            && by
                .get(&(e, pc - 1))
                .is_some_and(|l| l.opcode == "LDWEIGHTS")
        {
            continue;
        }
        let span = if pair { 2 } else { 1 };
        if let Some(n) = by.get(&(e, pc + span)) {
            let name = if pair {
                "MATMUL pair".to_string()
            } else {
                s.opcode.clone()
            };
            out.insert((e, pc), (name, n.start - s.start, span));
        }
    }
    out
}

/// The emulator's run of one execution: (NEFF body ns, execution ns, sg00 spans).
fn emulated_run(
    neff: &Path,
    cost: neuron_devmodel::arch::CostTable,
) -> Result<(f64, f64, Vec<Span>), String> {
    use neuron_runtime::{Config, Runtime};
    let ranges = body_ranges(neff)?;
    let bytes = std::fs::read(neff).map_err(|e| e.to_string())?;
    let (emu, dev) = crate::open_emulated(neuron_abi::arch::Arch::V3Trn2).map_err(|f| f.1)?;
    emu.set_cost(0, cost);
    emu.set_tracing(0, true);
    let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| e.to_string())?;
    let mut model = rt.load(&bytes, 0).map_err(|e| e.to_string())?;
    let data = crate::tensorio::builtin_inputs(model.inputs());
    let refs: Vec<(&str, &[u8])> = data
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    emu.take_trace(0);
    let exec_ns = model
        .execute(&refs)
        .map_err(|e| e.to_string())?
        .device_time_ps as f64
        / 1e3;
    let trace = emu.take_trace(0);
    // t=0: sg00 Tensor's NOTIFY hint=2, its first NOTIFY of the execution.
    let t0 = trace
        .iter()
        .find(|e| e.nc == 0 && e.track == "Tensor" && e.name == "NOTIFY")
        .map_or(0, |e| e.start.0);
    let spans: Vec<Span> = trace
        .iter()
        .filter(|e| e.nc == 0 && e.start.0 >= t0)
        .filter_map(|e| {
            Some(Span {
                engine: engine_of_track(&e.track)?,
                pc: e.pc,
                opcode: e.name.to_string(),
                start: (e.start.0 - t0) as f64 / 1e3,
                end: (e.start.0 + e.dur.0 - t0) as f64 / 1e3,
            })
        })
        .collect();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for ev in trace.iter().filter(|e| e.nc == 0) {
        let Some(engine) = engine_of_track(&ev.track) else {
            continue;
        };
        if ranges
            .get(&("sg00".to_string(), engine))
            .is_some_and(|(a, b)| (*a..*b).contains(&ev.pc))
        {
            lo = lo.min(ev.start.0);
            hi = hi.max(ev.start.0 + ev.dur.0);
        }
    }
    (hi > lo)
        .then(|| ((hi - lo) as f64 / 1000.0, exec_ns, spans))
        .ok_or_else(|| "no NEFF words in the trace of NC 0".to_string())
}

/// Silicon: the whole execution window, `summary.total_time` (ns). Its t=0 is sg00 Tensor's
/// `NOTIFY hint=2` (unrecorded; the next word is recorded 84 ns later in every profile) and it
/// ends with the last `NOTIFY hint=3`: the window the runtime times on the emulator.
fn profile_total_ns(profile: &Path) -> Result<f64, String> {
    let j = read_json(profile)?;
    j["summary"][0]["total_time"]
        .as_f64()
        .filter(|t| *t > 0.0)
        .map(|t| t * 1e9)
        .ok_or_else(|| format!("{}: no summary.total_time", profile.display()))
}

/// A cost table with the calibrated classes of `fits` (those seen in two kernels or more and
/// not in `exclude`) and a DMA_DIRECT2D fixed latency. A data word's class fitted on
/// durations alone (`latency_only`) keeps the table's interval (an all-zero interval in
/// `OpCost`) and takes the fit as its completion latency.
fn table_from(
    (fits, lats): (&BTreeMap<Class, Fit>, &BTreeMap<Class, Fit>),
    (exclude, latency_only): (&[Class], &[Class]),
    dma_fixed_ns: Option<f64>,
    bytes_per_ns: f64,
    mech: Option<neuron_devmodel::calib::Mechanisms>,
) -> neuron_devmodel::arch::CostTable {
    let mut cost = neuron_devmodel::ArchProfile::new(neuron_abi::arch::Arch::V3Trn2).cost;
    cost.real = fits
        .iter()
        .filter(|(c, f)| f.kernels >= 2 && !exclude.contains(c))
        .map(|(c, f)| {
            let l = lats.get(c).copied().unwrap_or(*f);
            let f = if latency_only.contains(c) {
                Fit {
                    a: 0.0,
                    b: 0.0,
                    ..*f
                }
            } else {
                *f
            };
            neuron_devmodel::calib::OpCost {
                engine: c.engine,
                opcode: c.opcode,
                wide: c.wide,
                transpose: c.transpose,
                fixed: neuron_devmodel::Ps((f.a * 1000.0).round() as u64),
                per_elem_fs: (f.b * 1e6).round() as u64,
                lat_fixed: neuron_devmodel::Ps((l.a * 1000.0).round() as u64),
                lat_per_elem_fs: (l.b * 1e6).round() as u64,
            }
        })
        .collect();
    cost.dma2d = dma_fixed_ns.map(|f| neuron_devmodel::calib::Dma2dCost {
        fixed: neuron_devmodel::Ps((f * 1000.0).round() as u64),
        bytes_per_ns: bytes_per_ns.round() as u32,
    });
    cost.mech = mech;
    cost
}

/// Issue-interval samples of one profiled kernel.
pub fn samples(kernel: usize, neff: &Path, profile: &Path) -> Result<Vec<Sample>, String> {
    let words = neff_words(neff)?;
    let j = read_json(profile)?;
    let recs = j["instruction"]
        .as_array()
        .ok_or_else(|| format!("{}: no instruction records", profile.display()))?;
    // (subgraph, engine) -> pc -> (start, end) (ns).
    let mut starts: BTreeMap<(String, Engine), BTreeMap<u32, (f64, f64)>> = BTreeMap::new();
    for r in recs {
        let Some((sg, engine, pc, ts)) = record_key(r) else {
            continue;
        };
        let end = ts + r["duration"].as_f64().unwrap_or(0.0);
        starts
            .entry((sg.to_string(), engine))
            .or_default()
            .insert(pc, (ts, end));
    }
    let mut out = Vec::new();
    // The next word after `pc` must be a NEFF word that issues without waiting.
    let clean = |sg: &str, engine: Engine, pc: u32| {
        words
            .get(&(sg.to_string(), engine, pc))
            .is_some_and(|n| n.header.wait_cond == 0 && n.opcode != Opcode::EventSemaphore)
    };
    for ((sg, engine), pcs) in &starts {
        for (pc, &(ts, _)) in pcs {
            let Some(ci) = words.get(&(sg.clone(), *engine, *pc)) else {
                continue;
            };
            // PE overlaps an LDWEIGHTS with the MATMUL before it, so single intervals split the
            // pair's time arbitrarily: an LDWEIGHTS + MATMUL pair is one sample (of MATMUL,
            // sized by the moving columns), measured from the LDWEIGHTS to the word after.
            let transpose = ci.opcode == Opcode::Ldweights && ci.u("transpose") == Some(1);
            let ldw_model = if ci.opcode == Opcode::Ldweights {
                table_ns(*engine, ci)
            } else {
                0.0
            };
            let (ci, span) = match ci.opcode {
                Opcode::Ldweights => {
                    match words.get(&(sg.clone(), *engine, pc.saturating_add(1))) {
                        Some(m) if m.opcode == Opcode::Matmul && m.header.wait_cond == 0 => (m, 2),
                        _ => continue,
                    }
                }
                Opcode::Matmul => continue,
                op if fitted(op) => (ci, 1),
                _ => continue,
            };
            let (Some(&(next_ts, _)), Some(&(_, end))) = (
                pcs.get(&(pc.saturating_add(span))),
                pcs.get(&(pc.saturating_add(span - 1))),
            ) else {
                continue;
            };
            // Not clean: the record's own duration stands in (`prefer_intervals`), for single
            // words only (a pair's LDWEIGHTS duration is not the pair's).
            let measured = clean(sg, *engine, pc.saturating_add(span));
            if !measured && span != 1 {
                continue;
            }
            let (elems, wide) = features(ci);
            out.push(Sample {
                kernel,
                class: Class {
                    engine: *engine,
                    opcode: ci.opcode,
                    wide,
                    transpose,
                },
                elems,
                interval_ns: if measured { next_ts - ts } else { end - ts },
                latency_ns: end - ts,
                model_ns: ldw_model + table_ns(*engine, ci),
                measured,
            });
        }
    }
    Ok(out)
}

/// One DMA_DIRECT2D: its bytes and the time from issue until its semaphore reached the
/// issue-time value plus its increment (all of its queues done).
#[derive(Debug, Clone)]
pub struct DmaSample {
    pub kernel: usize,
    pub bytes: f64,
    pub latency_ns: f64,
    /// Another DMA_DIRECT2D of the subgraph was in flight when this one was issued.
    pub contended: bool,
}

/// The profile's per-core DMA bandwidth to device memory (`metadata.dma_ddr_bandwidth`, B/s).
pub fn dma_bandwidth(profile: &Path) -> Result<f64, String> {
    let j = read_json(profile)?;
    j["metadata"][0]["dma_ddr_bandwidth"]
        .as_f64()
        .or_else(|| j["metadata"]["dma_ddr_bandwidth"].as_f64())
        .ok_or_else(|| format!("{}: no metadata.dma_ddr_bandwidth", profile.display()))
}

/// DMA_DIRECT2D latencies of one profiled kernel.
pub fn dma_samples(kernel: usize, neff: &Path, profile: &Path) -> Result<Vec<DmaSample>, String> {
    let words = neff_words(neff)?;
    let j = read_json(profile)?;
    let sems = sem_timeline(&j);
    // (subgraph, issue, done, bytes)
    let mut found: Vec<(String, f64, f64, f64)> = Vec::new();
    for r in j["instruction"].as_array().into_iter().flatten() {
        if r["opcode"].as_str() != Some("DMA_DIRECT2D") {
            continue;
        }
        let Some((sg, engine, pc, ts)) = record_key(r) else {
            continue;
        };
        let Some(ci) = words.get(&(sg.to_string(), engine, pc)) else {
            continue;
        };
        let g = |n: &str| ci.u(n).unwrap_or(0) as f64;
        let bytes = g("src_elem_size") * g("src_num0").max(1.0) * g("src_num1").max(1.0);
        let (sem, inc) = (ci.u("semaphore").unwrap_or(0), g("sem_increment"));
        let Some(ups) = sems.get(&(sg.to_string(), sem)) else {
            continue;
        };
        let v0 = ups.iter().rev().find(|u| u.0 < ts).map_or(0.0, |u| u.1);
        if let Some(done) = ups.iter().find(|u| u.0 >= ts && u.1 >= v0 + inc) {
            found.push((sg.to_string(), ts, done.0, bytes));
        }
    }
    Ok(found
        .iter()
        .map(|(sg, ts, done, bytes)| DmaSample {
            kernel,
            bytes: *bytes,
            latency_ns: done - ts,
            contended: found
                .iter()
                .any(|(g, t2, d2, _)| g == sg && t2 < ts && d2 > ts),
        })
        .collect())
}

/// The DMA model's fixed latency: the median over uncontended transfers of the latency beyond
/// moving the bytes at the profile's bandwidth.
pub fn dma_fixed_ns(samples: &[DmaSample], bytes_per_ns: f64, skip: Option<usize>) -> Option<f64> {
    let v: Vec<f64> = samples
        .iter()
        .filter(|s| !s.contended && Some(s.kernel) != skip)
        .map(|s| s.latency_ns - s.bytes / bytes_per_ns)
        .collect();
    (!v.is_empty()).then(|| median(v))
}

/// Per kernel, the phases of sg00 on silicon and under the full fit.
#[allow(clippy::type_complexity)]
fn print_phases(rows: &[(String, Option<[f64; 5]>, Option<[f64; 5]>)]) {
    println!("validation: phases of sg00, silicon / emulated (full fit), us (t=0: sg00 Tensor's hint=2; compute = data words)");
    println!(
        "  {:<28} {:>15} {:>15} {:>15} {:>15} {:>15}",
        "kernel", "start hand-off", "input", "compute", "output", "epilogue"
    );
    for (stem, s, e) in rows {
        let (Some(s), Some(e)) = (s, e) else {
            println!("  {stem:<28} (no NEFF or compute words)");
            continue;
        };
        let cells: Vec<String> = s
            .iter()
            .zip(e)
            .map(|(a, b)| format!("{:.2} / {:.2}", a / 1e3, b / 1e3))
            .collect();
        println!(
            "  {stem:<28} {:>15} {:>15} {:>15} {:>15} {:>15}",
            cells[0], cells[1], cells[2], cells[3], cells[4]
        );
    }
}

/// Per kernel and opcode, the error of the full fit's issue intervals against silicon's
/// (words with no wait of their own whose next word has no header wait; sg00).
fn print_opcodes(
    kernels: &[(String, PathBuf, PathBuf)],
    errs: &BTreeMap<(usize, String), Vec<f64>>,
) {
    println!("validation: issue-interval error per opcode, full fit vs silicon (sg00; |error| median and p90, signed median; n words)");
    let stat = |v: &[f64]| {
        let mut a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
        a.sort_by(f64::total_cmp);
        let p90 = a[((a.len() as f64 * 0.9).ceil() as usize).clamp(1, a.len()) - 1];
        (median(a.clone()), p90, median(v.to_vec()))
    };
    let mut all: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for (k, (stem, _, _)) in kernels.iter().enumerate() {
        let mine: Vec<(&String, &Vec<f64>)> = errs
            .iter()
            .filter(|((kk, _), _)| *kk == k)
            .map(|((_, n), v)| (n, v))
            .collect();
        let cells: Vec<String> = mine
            .iter()
            .map(|(n, v)| {
                all.entry(n.as_str()).or_default().extend(v.iter());
                let (m, p, sm) = stat(v);
                format!(
                    "{n} {:.0}%/{:.0}% ({:+.0}%, {})",
                    m * 100.0,
                    p * 100.0,
                    sm * 100.0,
                    v.len()
                )
            })
            .collect();
        println!("  {stem}: {}", cells.join("; "));
    }
    println!(
        "  {:<28} {:>6} {:>9} {:>9} {:>9}",
        "all kernels", "n", "median", "p90", "signed"
    );
    for (n, v) in &all {
        let (m, p, sm) = stat(v);
        println!(
            "  {n:<28} {:>6} {:>8.0}% {:>8.0}% {:>+8.0}%",
            v.len(),
            m * 100.0,
            p * 100.0,
            sm * 100.0
        );
    }
}

/// The mechanisms' fit, and its spread over the leave-one-kernel-out fits.
fn print_mech(
    m: &MechSamples,
    full: Option<neuron_devmodel::calib::Mechanisms>,
    held: &[Option<neuron_devmodel::calib::Mechanisms>],
) {
    use neuron_devmodel::calib::QueueKind;
    let us = |p: neuron_devmodel::Ps| p.0 as f64 / 1e6;
    let Some(f) = full else {
        println!(
            "mechanisms: not enough evidence to fit (hand-off, peer WRITE, software-DGE start-up)"
        );
        return;
    };
    let range = |pick: &dyn Fn(&neuron_devmodel::calib::Mechanisms) -> neuron_devmodel::Ps| {
        let v: Vec<f64> = held.iter().flatten().map(|h| us(pick(h))).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("held-out fits {lo:.3}..{hi:.3} us")
    };
    for q in QueueKind::ALL {
        let n = m.handoff.iter().filter(|s| s.1 == q).count();
        println!(
            "start hand-off, engine owning {:<20} {:>7.3} us  ({n} engines; {})",
            q.name(),
            us(f.handoff[q.index()]),
            range(&|h| h.handoff[q.index()])
        );
    }
    println!(
        "WRITE to the peer core (LNC=2 handshake)   {:>7.3} us  ({} WRITEs; {})",
        us(f.peer_write),
        m.peer_write.len(),
        range(&|h| h.peer_write)
    );
    println!(
        "software-DGE DMA start-up (not after a DMA) {:>6.3} us  ({} DMAs; {})",
        us(f.swdge_startup),
        m.startup.len(),
        range(&|h| h.swdge_startup)
    );
}

/// The mechanisms' parameters: medians over the kernels other than `skip`.
pub fn fit_mech(
    m: &MechSamples,
    skip: Option<usize>,
) -> Option<neuron_devmodel::calib::Mechanisms> {
    use neuron_devmodel::calib::QueueKind;
    let ps = |ns: f64| neuron_devmodel::Ps((ns.max(0.0) * 1000.0).round() as u64);
    let keep = |k: usize| Some(k) != skip;
    let med = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
    let mut handoff = [neuron_devmodel::Ps::ZERO; 3];
    for q in QueueKind::ALL {
        let v = m
            .handoff
            .iter()
            .filter(|(k, kind, _)| keep(*k) && *kind == q)
            .map(|s| s.2)
            .collect();
        handoff[q.index()] = ps(med(v)?);
    }
    let pick = |v: &[(usize, f64)]| med(v.iter().filter(|s| keep(s.0)).map(|s| s.1).collect());
    Some(neuron_devmodel::calib::Mechanisms {
        handoff,
        peer_write: ps(pick(&m.peer_write)?),
        swdge_startup: ps(pick(&m.startup)?),
    })
}

/// The table's charge for a word with nothing to stream: the issue overhead.
fn table_fixed_ns(engine: Engine) -> f64 {
    let cost = neuron_devmodel::ArchProfile::new(neuron_abi::arch::Arch::V3Trn2).cost;
    cost.instr_overhead_cycles as f64 * 1000.0 / cost.engine_mhz[engine.index()] as f64
}

/// Least squares per class over `samples` (those whose kernel is not `skip`).
pub fn fit(samples: &[Sample], skip: Option<usize>) -> BTreeMap<Class, Fit> {
    fit_by(samples, skip, |s| s.interval_ns, true)
}

/// The completion latency per class, fitted the same way.
pub fn fit_latency(samples: &[Sample], skip: Option<usize>) -> BTreeMap<Class, Fit> {
    fit_by(samples, skip, |s| s.latency_ns, false)
}

fn fit_by(
    samples: &[Sample],
    skip: Option<usize>,
    y: impl Fn(&Sample) -> f64,
    intervals: bool,
) -> BTreeMap<Class, Fit> {
    let mut by: BTreeMap<Class, Vec<(f64, f64)>> = BTreeMap::new();
    let mut ks: BTreeMap<Class, std::collections::BTreeSet<usize>> = BTreeMap::new();
    for s in samples.iter().filter(|s| Some(s.kernel) != skip) {
        by.entry(s.class).or_default().push((s.elems, y(s)));
        ks.entry(s.class).or_default().insert(s.kernel);
    }
    by.into_iter()
        .map(|(c, pts)| {
            let kernels = ks.get(&c).map_or(0, |k| k.len());
            let n = pts.len() as f64;
            let (mx, my) = (
                pts.iter().map(|p| p.0).sum::<f64>() / n,
                pts.iter().map(|p| p.1).sum::<f64>() / n,
            );
            let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
            let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
            // No size dependence (one size, or a non-positive slope): the median, which is
            // what minimises the per-instruction absolute error and ignores stragglers.
            // A MATMUL pair's interval is a column rate (the fp32 class, sampled at 128 and
            // 512 columns, fits an intercept <= 0): a class seen at one size only is that rate
            // through the origin, not a constant for every moving size (a decode's 1-column
            // matrix-vector MATMULs; `docs/timing.md`, "Model layers").
            let (a, b) = if intervals && c.opcode == Opcode::Matmul && sxx == 0.0 && mx > 0.0 {
                (0.0, median(pts.iter().map(|p| p.1).collect()) / mx)
            } else if b > 0.0 {
                (my - b * mx, b)
            } else {
                (median(pts.iter().map(|p| p.1).collect()), 0.0)
            };
            // A negative intercept would make tiny instructions free: clamp it and refit the
            // slope through the origin.
            let (a, b) = if a < 0.0 {
                let sx2: f64 = pts.iter().map(|p| p.0 * p.0).sum();
                let sxy0: f64 = pts.iter().map(|p| p.0 * p.1).sum();
                (0.0, if sx2 > 0.0 { sxy0 / sx2 } else { 0.0 })
            } else {
                (a, b)
            };
            (
                c,
                Fit {
                    a,
                    b,
                    n: pts.len(),
                    kernels,
                },
            )
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The profiled kernels in `dir` that have a profile in `profiles`.
fn default_kernels(dir: &Path, profiles: &Path) -> Vec<(String, PathBuf, PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "neff"))
        .filter_map(|p| {
            let stem = p.file_stem()?.to_str()?.to_string();
            let prof = profiles.join(format!("{stem}.profile.json"));
            prof.exists().then_some((stem, p, prof))
        })
        .collect();
    v.sort();
    v
}

pub fn run(
    files: &[PathBuf],
    profiles: Option<&Path>,
    json_out: Option<&Path>,
    validate: bool,
) -> Result<(), Failure> {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    let prof_dir = profiles
        .map(Path::to_path_buf)
        .unwrap_or_else(|| fixtures.join("real-profiles"));
    let kernels: Vec<(String, PathBuf, PathBuf)> = if files.is_empty() {
        default_kernels(&fixtures.join("real-neff"), &prof_dir)
    } else {
        files
            .iter()
            .map(|p| {
                let stem = p
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("?")
                    .to_string();
                let prof = prof_dir.join(format!("{stem}.profile.json"));
                (stem, p.clone(), prof)
            })
            .collect()
    };
    if kernels.len() < 2 {
        return Err(usage(
            "calibration needs at least two profiled kernels (one is held out at a time)",
        ));
    }
    let mut all = Vec::new();
    let mut mech = MechSamples::default();
    for (k, (stem, neff, prof)) in kernels.iter().enumerate() {
        let s = samples(k, neff, prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
        all.extend(s);
        let f = fixed_samples(k, prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
        all.extend(f);
        let m = mech_samples(k, neff, prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
        mech.handoff.extend(m.handoff);
        mech.peer_write.extend(m.peer_write);
        mech.startup.extend(m.startup);
    }
    let all = prefer_intervals(all);
    // Data words seen only through their durations (a latency, not an occupancy: these
    // engines pipeline) keep the table's interval. A hardware-DGE DMA issue is an occupancy:
    // on Sync, whose intervals are measurable, the next word starts ~30 ns after its end.
    let latency_only: Vec<Class> = {
        let measured: std::collections::BTreeSet<Class> =
            all.iter().filter(|s| s.measured).map(|s| s.class).collect();
        let mut v: Vec<Class> = all
            .iter()
            .map(|s| s.class)
            .filter(|c| {
                !measured.contains(c)
                    && neuron_devmodel::calib::sized(c.opcode)
                    && c.opcode != Opcode::DmaDirect2d
            })
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let full_mech = fit_mech(&mech, None);
    let held_mech: Vec<_> = (0..kernels.len())
        .map(|k| fit_mech(&mech, Some(k)))
        .collect();

    let full = fit(&all, None);
    let held: Vec<BTreeMap<Class, Fit>> = (0..kernels.len()).map(|k| fit(&all, Some(k))).collect();
    let full_lat = fit_latency(&all, None);
    let held_lat: Vec<BTreeMap<Class, Fit>> = (0..kernels.len())
        .map(|k| fit_latency(&all, Some(k)))
        .collect();
    println!(
        "calibrate: {} kernels, {} samples (issue intervals; records' durations where a class has no measurable interval); ns = a + b * elements per partition (TENSOR_LOAD: registers)",
        kernels.len(),
        all.len()
    );
    println!(
        "{:<7} {:<15} {:<10} {:>5} {:>3} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "engine",
        "opcode",
        "variant",
        "n",
        "k",
        "a ns",
        "b ns/el",
        "fit err",
        "held-out",
        "table err"
    );
    for (c, f) in &full {
        let errs = |which: &dyn Fn(&Sample) -> Option<f64>| {
            median(
                all.iter()
                    .filter(|s| s.class == *c)
                    .filter_map(|s| which(s).map(|p| ((p - s.interval_ns) / s.interval_ns).abs()))
                    .collect(),
            )
        };
        let fit_err = errs(&|s| Some(f.predict(s.elems)));
        let held_err = errs(&|s| held[s.kernel].get(c).map(|h| h.predict(s.elems)));
        let table_err = errs(&|s| Some(s.model_ns));
        println!(
            "{:<7} {:<15} {:<10} {:>5} {:>3} {:>9.1} {:>9.3} {:>9.1}% {:>9.1}% {:>9.1}%",
            c.engine.profiler_name(),
            c.opcode.static_name(),
            c.variant(),
            f.n,
            f.kernels,
            f.a,
            f.b,
            fit_err * 100.0,
            held_err * 100.0,
            table_err * 100.0
        );
    }
    print_mech(&mech, full_mech, &held_mech);
    // Per kernel: the sum of the fitted intervals against the measured sum, with the fit that
    // did not see the kernel.
    println!("per kernel: sum of the sampled issue intervals, measured vs the fit that did not see the kernel vs the uncalibrated table");
    for (k, (stem, _, _)) in kernels.iter().enumerate() {
        let mine: Vec<&Sample> = all.iter().filter(|s| s.kernel == k).collect();
        let measured: f64 = mine.iter().map(|s| s.interval_ns).sum();
        let predicted: f64 = mine
            .iter()
            .map(|s| {
                held[k]
                    .get(&s.class)
                    .map_or(s.interval_ns, |h| h.predict(s.elems))
            })
            .sum();
        let unseen = mine
            .iter()
            .filter(|s| !held[k].contains_key(&s.class))
            .count();
        let table: f64 = mine.iter().map(|s| s.model_ns).sum();
        println!(
            "  {stem:<28} measured {:>9.0} ns  held-out fit {:>9.0} ns ({:+.1}%)  table {:>9.0} ns ({:+.1}%){}",
            measured,
            predicted,
            (predicted / measured - 1.0) * 100.0,
            table,
            (table / measured - 1.0) * 100.0,
            if unseen > 0 {
                format!("  [{unseen} samples of classes only this kernel has: taken as measured]")
            } else {
                String::new()
            }
        );
    }
    // DMA_DIRECT2D: latency = fixed + bytes / bandwidth, bandwidth from the profiles.
    let mut dmas = Vec::new();
    let mut bws = Vec::new();
    for (k, (stem, neff, prof)) in kernels.iter().enumerate() {
        dmas.extend(dma_samples(k, neff, prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?);
        bws.push(dma_bandwidth(prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?);
    }
    let bw = median(bws) / 1e9;
    let fixed = dma_fixed_ns(&dmas, bw, None);
    let unc: Vec<&DmaSample> = dmas.iter().filter(|s| !s.contended).collect();
    let held_err = median(
        unc.iter()
            .filter_map(|s| {
                let f = dma_fixed_ns(&dmas, bw, Some(s.kernel))?;
                Some(((f + s.bytes / bw - s.latency_ns) / s.latency_ns).abs())
            })
            .collect(),
    );
    let table_err = median(
        unc.iter()
            .map(|s| {
                let t = 64.0 + s.bytes / 23.0;
                ((t - s.latency_ns) / s.latency_ns).abs()
            })
            .collect(),
    );
    println!(
        "DMA_DIRECT2D latency: {} transfers ({} uncontended); bandwidth {:.0} B/ns (profiles' dma_ddr_bandwidth); fixed {:.0} ns; held-out error {:.1}% (table: 64 ns + bytes / 23 B/ns, {:.1}%)",
        dmas.len(),
        unc.len(),
        bw,
        fixed.unwrap_or(f64::NAN),
        held_err * 100.0,
        table_err * 100.0
    );
    // Classes whose fit does not carry to unseen kernels stay on the uncalibrated table.
    let exclude: Vec<Class> = full
        .keys()
        .filter(|c| {
            let e = median(
                all.iter()
                    .filter(|s| s.class == **c)
                    .filter_map(|s| {
                        held[s.kernel]
                            .get(c)
                            .map(|h| ((h.predict(s.elems) - s.interval_ns) / s.interval_ns).abs())
                    })
                    .collect(),
            );
            e.is_nan() || e > 0.5
        })
        .copied()
        .collect();
    println!(
        "calibrated classes: those seen in two kernels or more whose held-out error is at most 50% ({} of {})",
        full.iter()
            .filter(|(c, f)| f.kernels >= 2 && !exclude.contains(c))
            .count(),
        full.len()
    );
    if validate {
        let base = neuron_devmodel::ArchProfile::new(neuron_abi::arch::Arch::V3Trn2).cost;
        let mut uncal = base.clone();
        uncal.real.clear();
        uncal.dma2d = None;
        uncal.mech = None;
        let mut rows = Vec::new();
        let mut phase_rows = Vec::new();
        let mut op_errs: BTreeMap<(usize, String), Vec<f64>> = BTreeMap::new();
        for (k, (stem, neff, prof)) in kernels.iter().enumerate() {
            let f =
                |e: Result<(f64, f64), String>| e.map_err(|e| Failure(1, format!("{stem}: {e}")));
            let g = |e: Result<f64, String>| e.map_err(|e| Failure(1, format!("{stem}: {e}")));
            let silicon = (g(profile_body_ns(neff, prof))?, g(profile_total_ns(prof))?);
            let t0 = f(emulated_body_ns(neff, uncal.clone()))?;
            let loo = table_from(
                (&held[k], &held_lat[k]),
                (&exclude, &latency_only),
                dma_fixed_ns(&dmas, bw, Some(k)),
                bw,
                held_mech[k],
            );
            let t1 = f(emulated_body_ns(neff, loo))?;
            let (b2, e2, spans) = emulated_run(
                neff,
                table_from(
                    (&full, &full_lat),
                    (&exclude, &latency_only),
                    fixed,
                    bw,
                    full_mech,
                ),
            )
            .map_err(|e| Failure(1, format!("{stem}: {e}")))?;
            let t2 = (b2, e2);
            let (sil_spans, waits) =
                silicon_spans(prof).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
            let ranges = body_ranges(neff).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
            phase_rows.push((
                stem.clone(),
                phases(&sil_spans, &ranges, silicon.1),
                phases(&spans, &ranges, e2),
            ));
            let (si, ei) = (intervals(&sil_spans), intervals(&spans));
            for (key, (name, sil, span)) in &si {
                let clean = |pc: u32, _header: bool| waits.get(&(key.0, pc)).is_some_and(|w| !w.0);
                // The emulator's trace starts a word when it issues (after every wait), so
                // the next word must not wait at all.
                if !clean(key.1, false) || !clean(key.1 + span, false) || *sil <= 0.0 {
                    continue;
                }
                if let Some((_, emu, _)) = ei.get(key) {
                    op_errs
                        .entry((k, name.clone()))
                        .or_default()
                        .push((emu - sil) / sil);
                }
            }
            rows.push((stem.clone(), silicon, t0, t1, t2));
        }
        let r = |t: f64, s: f64| format!("{:.2} ({:+.0}%)", t / 1e3, (t / s - 1.0) * 100.0);
        for (title, pick) in [
            (
                "NEFF-body time of sg00 (first NEFF word start to last NEFF word end)",
                0usize,
            ),
            (
                "whole execution window (silicon: summary.total_time, from sg00 Tensor's NOTIFY hint=2; emulated: first hint=2 to last hint=3, what the runtime reports)",
                1,
            ),
        ] {
            println!("validation: {title}, emulated vs silicon");
            println!(
                "  {:<28} {:>9} {:>16} {:>20} {:>16}",
                "kernel", "trn2 us", "table us", "held-out fit us", "full fit us"
            );
            for (stem, s, t0, t1, t2) in &rows {
                let at = |p: (f64, f64)| if pick == 0 { p.0 } else { p.1 };
                let sil = at(*s);
                println!(
                    "  {stem:<28} {:>9.2} {:>16} {:>20} {:>16}",
                    sil / 1e3,
                    r(at(*t0), sil),
                    r(at(*t1), sil),
                    r(at(*t2), sil)
                );
            }
        }
        print_phases(&phase_rows);
        print_opcodes(&kernels, &op_errs);
    }
    if let Some(out) = json_out {
        // The table the device model compiles in (`devmodel::calib::TRN2`, `TRN2_MECH`).
        let compiled = table_from(
            (&full, &full_lat),
            (&exclude, &latency_only),
            fixed,
            bw,
            full_mech,
        );
        let ns = |p: neuron_devmodel::Ps| p.0 as f64 / 1000.0;
        let classes: Vec<serde_json::Value> = compiled
            .real
            .iter()
            .map(|r| {
                let c = Class {
                    engine: r.engine,
                    opcode: r.opcode,
                    wide: r.wide,
                    transpose: r.transpose,
                };
                let f = full.get(&c);
                json!({
                    "engine": r.engine.profiler_name(),
                    "opcode": r.opcode.static_name(),
                    "fp32": r.wide,
                    "transpose": r.transpose,
                    "a_ns": ns(r.fixed),
                    "b_ns_per_elem": r.per_elem_fs as f64 / 1e6,
                    "lat_a_ns": ns(r.lat_fixed),
                    "lat_b_ns_per_elem": r.lat_per_elem_fs as f64 / 1e6,
                    "latency_only": latency_only.contains(&c),
                    "samples": f.map_or(0, |f| f.n),
                    "kernels": f.map_or(0, |f| f.kernels),
                })
            })
            .collect();
        let mechanisms = compiled.mech.map(|m| {
            json!({
                "handoff_ns": m.handoff.iter().map(|p| ns(*p)).collect::<Vec<_>>(),
                "peer_write_ns": ns(m.peer_write),
                "swdge_startup_ns": ns(m.swdge_startup),
            })
        });
        let doc = json!({
            "dma_direct2d": { "fixed_ns": fixed, "bytes_per_ns": bw, "transfers": dmas.len() },
            "model": "interval_ns = a_ns + b_ns_per_elem * elements per partition",
            "kernels": kernels.iter().map(|k| k.0.clone()).collect::<Vec<_>>(),
            "classes": classes,
            "mechanisms": mechanisms,
        });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| Failure(1, e.to_string()))?;
        std::fs::write(out, text)
            .map_err(|e| usage(format!("cannot write {}: {e}", out.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(op: &str, ops: &str, ts: f64) -> serde_json::Value {
        json!({"opcode": op, "operands": ops, "timestamp": ts, "duration": 10.0})
    }

    /// A header wait moves a record's timestamp to when the wait held; an EVENT_SEMAPHORE's
    /// own condition (after `setter=`) does not.
    #[test]
    fn header_waits_are_told_from_body_waits() {
        assert!(header_wait(&rec("NOP", "$E[4]==1- cycle=1", 0.0)));
        assert!(header_wait(&rec(
            "EVENT_SEMAPHORE",
            "S[24] (qGpSimdDynamic)>=16 setter=0",
            0.0
        )));
        assert!(!header_wait(&rec(
            "EVENT_SEMAPHORE",
            "setter=0 $S[2]==8 $S[2]=0@complete",
            0.0
        )));
        assert!(!header_wait(&rec("DRAIN", "", 0.0)));
    }

    /// The handshake WRITE is recognised by the wait after it; a barrier hop runs from the
    /// update that released the word to its own update; a DMA's header wait held at the
    /// first update reaching its value.
    #[test]
    fn mechanism_evidence_from_records() {
        let w = rec("WRITE", "data=0x1 size=4 dst=0x803802701804", 0.0);
        let wait = rec(
            "EVENT_SEMAPHORE",
            "setter=0 $S[1]>=1 $S[1]--@complete",
            546.0,
        );
        assert!(is_peer_write(&w, Some(&wait)));
        assert!(!is_peer_write(&w, Some(&rec("NOP", "$E[4]==1-", 9.0))));
        let mut sems = SemTimeline::new();
        sems.insert(
            ("sg00".into(), 2),
            vec![(100.0, 1.0), (150.0, 2.0), (190.0, 3.0)],
        );
        sems.insert(("sg00".into(), 27), vec![(500.0, 8.0), (700.0, 16.0)]);
        // Waits $S[2]==2 from t=50; released at 150, its own ++ at 190.
        let hop = barrier_hop(&sems, "sg00", 50.0, "setter=0 $S[2]==2 $S[2]++@complete");
        assert_eq!(hop, Some(40.0));
        // Arrived after the release: counted from its arrival.
        let hop = barrier_hop(&sems, "sg00", 170.0, "setter=0 $S[2]==2 $S[2]++@complete");
        assert_eq!(hop, Some(20.0));
        let dma = rec(
            "DMA_DIRECT2D",
            "S[27] (qGpSimdDynamic)>=16 semaphore=28 sem_increment=16",
            1930.0,
        );
        let mut d = dma.clone();
        d["subgraph"] = json!("sg00");
        assert_eq!(waits_held(&sems, "sg00", &d), Some(700.0));
        assert_eq!(waits_held(&sems, "sg01", &d), None);
    }

    /// Measured intervals win for a class seen in two kernels; otherwise its durations stay.
    #[test]
    fn intervals_are_preferred_per_class() {
        let s = |kernel, opcode, measured| Sample {
            kernel,
            class: Class {
                engine: Engine::Act,
                opcode,
                wide: false,
                transpose: false,
            },
            elems: 0.0,
            interval_ns: 1.0,
            latency_ns: 1.0,
            model_ns: 1.0,
            measured,
        };
        let all = vec![
            s(0, Opcode::Drain, true),
            s(1, Opcode::Drain, true),
            s(2, Opcode::Drain, false),
            s(0, Opcode::DmaDirect2d, true),
            s(1, Opcode::DmaDirect2d, false),
            s(2, Opcode::DmaDirect2d, false),
        ];
        let kept: Vec<(Opcode, bool)> = prefer_intervals(all)
            .iter()
            .map(|x| (x.class.opcode, x.measured))
            .collect();
        assert_eq!(
            kept,
            vec![
                (Opcode::Drain, true),
                (Opcode::Drain, true),
                (Opcode::DmaDirect2d, false),
                (Opcode::DmaDirect2d, false)
            ]
        );
    }
}
