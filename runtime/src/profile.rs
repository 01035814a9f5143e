//! The one builder of execution profiles: a report shaped like AWS `neuron-profile`'s JSON
//! (same key names and units where it has them) and the Perfetto (Chrome trace-event) view of
//! the same records. `neuron-emu run --profile-json / --trace` and libnrt's
//! `nrt_profile_start/stop` both fill a [`Capture`] and call [`report`] or [`chrome_trace`]
//! (`docs/profiling.md`).
//!
//! It lives in the runtime crate because both users depend on it and the runtime may not depend
//! on the device model: the CLI converts the device model's trace into a [`Capture`]; libnrt
//! fills one from what reaches it through the driver ABI (each engine's start and end
//! notification), so its captures have no instruction-level records.

use neuron_isa::Engine;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One engine word as it issued (device time in picoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instr {
    /// Physical NeuronCore.
    pub nc: u32,
    pub engine: Engine,
    /// Profiler pc (NEFF word 0 at the program's `neff_base`).
    pub pc: u32,
    pub opcode: String,
    /// Operand text in the profiler's syntax.
    pub operands: String,
    pub start_ps: u64,
    pub dur_ps: u64,
    /// The registers whose condition it waited for: (index, is an event).
    pub waits: Vec<(u8, bool)>,
}

/// One DMA transfer: a queue descriptor, or a DMA_DIRECT2D from issue to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dma {
    pub nc: u32,
    /// The track (thread) name in the trace.
    pub track: String,
    /// `dma_engine`, `dma_queue`, `subgroup`, `queue_type` as the profiler spells them.
    pub dma_engine: String,
    pub dma_queue: String,
    pub subgroup: String,
    pub queue_type: String,
    pub start_ps: u64,
    pub dur_ps: u64,
    pub bytes: u64,
    /// The semaphore it updates when done, in the profiler's id syntax.
    pub semaphore: Option<String>,
    /// The engine word that issued it.
    pub issuer: Option<(Engine, u32)>,
}

/// A semaphore or event register of a core taking a new value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegUpdate {
    pub nc: u32,
    pub at_ps: u64,
    pub index: u8,
    pub event: bool,
    pub value: i64,
    /// The profiler's id: `S[5] (Tensor)` for a named semaphore, else the number.
    pub id: String,
}

/// A notification written to a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub nc: u32,
    pub at_ps: u64,
    pub engine: Option<Engine>,
    /// `NOTIFY`, `END`, `ERROR`, ...
    pub kind: String,
    pub value: u32,
    pub pc: u32,
}

/// One engine's part of one execution: from its start notification to its end one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub nc: u32,
    pub engine: Engine,
    pub start_ps: u64,
    pub end_ps: u64,
}

/// What was recorded of one execution (or, for a bare trace, of one stretch of device time).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capture {
    /// The device (`/dev/neuronN`).
    pub device: u32,
    /// The model's physical cores in subgraph order (sg00 first); empty: the cores seen.
    pub cores: Vec<u32>,
    /// The execution window (first start notification, last end notification), ps.
    pub window: Option<(u64, u64)>,
    /// Whether instruction-level records were captured (false for libnrt's profiles).
    pub detail: bool,
    pub instrs: Vec<Instr>,
    pub dmas: Vec<Dma>,
    pub regs: Vec<RegUpdate>,
    pub notes: Vec<Note>,
    pub spans: Vec<Span>,
}

/// Who made a report of what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub profile_name: String,
    pub neff_name: String,
    /// What recorded it (`neuron-emu run`, `libnrt nrt_profile`).
    pub source: String,
}

impl Capture {
    /// The cores in subgraph order: the model's, else every core that has a record.
    fn core_list(&self) -> Vec<u32> {
        if !self.cores.is_empty() {
            return self.cores.clone();
        }
        let mut s = BTreeSet::new();
        s.extend(self.instrs.iter().map(|i| i.nc));
        s.extend(self.dmas.iter().map(|d| d.nc));
        s.extend(self.regs.iter().map(|r| r.nc));
        s.extend(self.notes.iter().map(|n| n.nc));
        s.extend(self.spans.iter().map(|n| n.nc));
        s.into_iter().collect()
    }

    /// The earliest time any record has (the trace's origin when there is no window).
    fn first_ps(&self) -> Option<u64> {
        let a = self.instrs.iter().map(|i| i.start_ps);
        let b = self.dmas.iter().map(|d| d.start_ps);
        let c = self.regs.iter().map(|r| r.at_ps);
        let d = self.notes.iter().map(|n| n.at_ps);
        let e = self.spans.iter().map(|s| s.start_ps);
        a.chain(b).chain(c).chain(d).chain(e).min()
    }
}

fn subgraph(cores: &[u32], nc: u32) -> String {
    let k = cores.iter().position(|c| *c == nc).unwrap_or(cores.len());
    format!("sg{k:02}")
}

/// The profiler's track label of a word: PE's MATMULs have a track of their own.
pub fn label(engine: Engine, opcode: &str) -> &'static str {
    if engine == Engine::Pe && opcode == "MATMUL" {
        "TensorMatrix"
    } else {
        engine.profiler_name()
    }
}

/// The summary's key prefix of an engine (`tensor`, `gpsimd`, ...).
fn summary_name(engine: Engine) -> String {
    engine.profiler_name().to_ascii_lowercase()
}

fn ns(ps: u64) -> f64 {
    ps as f64 / 1e3
}

fn rel_ns(ps: u64, t0: u64) -> f64 {
    (ps as f64 - t0 as f64) / 1e3
}

/// Total length of the union of `[start, end)` intervals (ps here; µs in `profile-diff`).
pub fn union_len<T>(mut v: Vec<(T, T)>) -> T
where
    T: Copy + PartialOrd + Default + std::ops::Add<Output = T> + std::ops::Sub<Output = T>,
{
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let (mut total, mut cur): (T, Option<(T, T)>) = (T::default(), None);
    for (s, e) in v {
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, if e > ce { e } else { ce })),
            Some((cs, ce)) => {
                total = total + (ce - cs);
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    total + cur.map_or(T::default(), |(s, e)| e - s)
}

/// The records of a capture that fall in its execution window (from its start on; records
/// after the end notification, the loop back to the loop head, are kept as the profiler keeps
/// them), and the window's origin and length.
struct Windowed<'a> {
    c: &'a Capture,
    t0: u64,
    total: u64,
    /// Each word with the time its record starts ([`recorded_start`]).
    instrs: Vec<(&'a Instr, u64)>,
    dmas: Vec<&'a Dma>,
    regs: Vec<&'a RegUpdate>,
}

fn windowed(c: &Capture) -> Windowed<'_> {
    let (t0, t1) = c
        .window
        .unwrap_or_else(|| (c.first_ps().unwrap_or(0), c.first_ps().unwrap_or(0)));
    let total = match c.window {
        Some(_) => t1.saturating_sub(t0),
        None => c
            .instrs
            .iter()
            .map(|i| i.start_ps + i.dur_ps)
            .chain(c.dmas.iter().map(|d| d.start_ps + d.dur_ps))
            .max()
            .unwrap_or(t0)
            .saturating_sub(t0),
    };
    Windowed {
        c,
        t0,
        total,
        instrs: c
            .instrs
            .iter()
            .zip(ready_times(&c.instrs))
            .filter(|(i, _)| i.start_ps >= t0)
            .map(|(i, ready)| (i, recorded_start(i, ready).max(t0)))
            .collect(),
        dmas: c.dmas.iter().filter(|d| d.start_ps >= t0).collect(),
        regs: c.regs.iter().filter(|r| r.at_ps >= t0).collect(),
    }
}

/// Per word of `instrs`: when its engine finished the word before it, if that was before this
/// word issued (it waited, or its engine had no word yet).
fn ready_times(instrs: &[Instr]) -> Vec<Option<u64>> {
    let mut order: Vec<usize> = (0..instrs.len()).collect();
    order.sort_by_key(|&k| instrs[k].start_ps);
    let mut prev: BTreeMap<(u32, Engine), u64> = BTreeMap::new();
    let mut out = vec![None; instrs.len()];
    for k in order {
        let i = &instrs[k];
        let p = prev.insert((i.nc, i.engine), i.start_ps + i.dur_ps);
        out[k] = p.filter(|r| *r < i.start_ps);
    }
    out
}

/// Where the profiler starts a word's record. The wait words, an EVENT_SEMAPHORE with a
/// condition and a DRAIN, are recorded from when their engine reached them, the wait included
/// in their `duration` (silicon's `EVENT_SEMAPHORE $S[2]==4` lasts 19.5 us in
/// akc-fused_bf16_s512); every other word's record starts when its wait is over (its gap to
/// the word before is the wait), as the device model's spans do.
fn recorded_start(i: &Instr, ready: Option<u64>) -> u64 {
    let wait_word = (i.opcode == "EVENT_SEMAPHORE" && !i.waits.is_empty()) || i.opcode == "DRAIN";
    match ready {
        Some(r) if wait_word => r,
        _ => i.start_ps,
    }
}

/// The `neuron-profile`-shaped report of executions `caps` (one `summary` entry per
/// execution; records carry their `execution` index, timestamps in ns from that execution's
/// start), with the Perfetto view of the same records under `traceEvents`.
pub fn report(meta: &Meta, caps: &[Capture]) -> Value {
    let mut instruction = Vec::new();
    let mut dma = Vec::new();
    let mut sems = Vec::new();
    let mut summary = Vec::new();
    let mut model_info = Vec::new();
    let mut layers = Vec::new();
    let mut spans = Vec::new();
    let mut cores_n = 0;
    for (k, c) in caps.iter().enumerate() {
        let w = windowed(c);
        let cores = c.core_list();
        cores_n = cores_n.max(cores.len());
        let sg = |nc: u32| subgraph(&cores, nc);
        for (i, at) in &w.instrs {
            let s = sg(i.nc);
            instruction.push(json!({
                "subgraph": s,
                "fully_qualified_subgraph": format!("/{s}"),
                "label": label(i.engine, &i.opcode),
                "subgroup": i.engine.profiler_name(),
                "opcode": i.opcode,
                "operands": i.operands,
                "pc": i.pc,
                "timestamp": rel_ns(*at, w.t0),
                "duration": ns(i.start_ps + i.dur_ps - at),
                "execution": k,
            }));
        }
        for (n, d) in w.dmas.iter().enumerate() {
            let rate = if d.dur_ps > 0 {
                d.bytes as f64 * 1e12 / d.dur_ps as f64
            } else {
                0.0
            };
            dma.push(json!({
                "subgraph": sg(d.nc),
                "dma_engine": d.dma_engine,
                "dma_queue": d.dma_queue,
                "subgroup": d.subgroup,
                "queue_type": d.queue_type,
                "timestamp": rel_ns(d.start_ps, w.t0),
                "duration": ns(d.dur_ps),
                "transfer_size": d.bytes,
                "read_size": d.bytes,
                "write_size": d.bytes,
                "transfer_rate": rate,
                "semaphore_id": d.semaphore.clone().unwrap_or_else(|| "-1".into()),
                "packet_idx": n,
                "execution": k,
            }));
        }
        for r in w.regs.iter().filter(|r| !r.event) {
            sems.push(json!({
                "subgraph": sg(r.nc),
                "timestamp": rel_ns(r.at_ps, w.t0),
                "value": r.value,
                "id": r.id,
                "execution": k,
            }));
        }
        for s in &c.spans {
            spans.push(json!({
                "subgraph": sg(s.nc),
                "engine": s.engine.profiler_name(),
                "start": rel_ns(s.start_ps, w.t0),
                "end": rel_ns(s.end_ps, w.t0),
                "execution": k,
            }));
        }
        summary.push(summary_of(&w, k));
        for nc in &cores {
            let s = sg(*nc);
            let mine: Vec<&(&Instr, u64)> = w.instrs.iter().filter(|i| i.0.nc == *nc).collect();
            let mut m = Map::new();
            m.insert("sg_name".into(), json!(s));
            m.insert("nc_idx".into(), json!(nc));
            m.insert("nd_idx".into(), json!(c.device));
            m.insert("execution".into(), json!(k));
            if c.detail {
                for e in Engine::ALL {
                    let n = mine.iter().filter(|i| i.0.engine == e).count();
                    m.insert(
                        format!("{}_engine_instruction_count", summary_name(e)),
                        json!(n),
                    );
                }
                let qs: BTreeSet<&str> = w
                    .dmas
                    .iter()
                    .filter(|d| d.nc == *nc)
                    .map(|d| d.subgroup.as_str())
                    .collect();
                m.insert("dma_queue_count".into(), json!(qs.len()));
                let ev = w.regs.iter().filter(|r| r.nc == *nc).count();
                m.insert("event_count".into(), json!(ev));
            }
            model_info.push(Value::Object(m));
            let ends = mine.iter().map(|(i, at)| (*at, i.start_ps + i.dur_ps));
            if let (Some(a), Some(b)) = (ends.clone().map(|e| e.0).min(), ends.map(|e| e.1).max()) {
                layers.push(json!({
                    "name": format!("/{s}"),
                    "fully_qualified_subgraph": format!("/{s}"),
                    "start": rel_ns(a, w.t0),
                    "end": rel_ns(b, w.t0),
                    "duration": ns(b - a),
                    "execution": k,
                }));
            }
        }
    }
    let total_ns = caps.first().map_or(0.0, |c| ns(windowed(c).total));
    json!({
        "profile_info": [{
            "profile_name": meta.profile_name,
            "neff_name": meta.neff_name,
            "profiler_version": format!("neuron-emu {}", env!("CARGO_PKG_VERSION")),
            "profile_type": "emulated",
            "source": meta.source,
            "executions": caps.len(),
            "instruction_detail": caps.iter().all(|c| c.detail),
        }],
        "metadata": [{
            "is_simulation": true,
            "num_physical_cores": cores_n,
            "num_subgraphs": cores_n,
            "first_hw_timestamp": 0,
            "last_hw_timestamp": total_ns,
            "time_unit": "ns (records), s (summary)",
        }],
        "summary": summary,
        "model_info": model_info,
        "layer_summary": layers,
        "instruction": instruction,
        "dma": dma,
        "semaphore_update": sems,
        "engine_span": spans,
        "traceEvents": trace_events(caps),
    })
}

/// One execution's `summary` entry (times in seconds, fractions of `total_time`).
fn summary_of(w: &Windowed<'_>, k: usize) -> Value {
    let total_s = w.total as f64 / 1e12;
    let frac = |ps: u64| {
        if w.total > 0 {
            ps as f64 / w.total as f64
        } else {
            0.0
        }
    };
    let mut m = Map::new();
    m.insert("total_time".into(), json!(total_s));
    m.insert("execution".into(), json!(k));
    if w.c.detail {
        // Instruction time: the records' durations (waits included); active time: when the
        // engine was executing a word (the union of issue-to-end spans).
        let busy = |f: &dyn Fn(&Instr) -> bool| {
            let mine: Vec<&(&Instr, u64)> = w.instrs.iter().filter(|i| f(i.0)).collect();
            let recorded: u64 = mine.iter().map(|(i, at)| i.start_ps + i.dur_ps - at).sum();
            let v: Vec<(u64, u64)> = mine
                .iter()
                .map(|(i, _)| (i.start_ps, i.start_ps + i.dur_ps))
                .collect();
            (v.len(), recorded, union_len(v))
        };
        for e in Engine::ALL {
            let n = summary_name(e);
            let (count, sum, active) = busy(&|i| i.engine == e);
            m.insert(format!("{n}_engine_instruction_count"), json!(count));
            m.insert(
                format!("{n}_engine_instruction_time"),
                json!(sum as f64 / 1e12),
            );
            m.insert(
                format!("{n}_engine_active_time"),
                json!(active as f64 / 1e12),
            );
            m.insert(
                format!("{n}_engine_active_time_percent"),
                json!(frac(active)),
            );
        }
        let (_, _, active) = busy(&|_| true);
        m.insert("total_active_time".into(), json!(active as f64 / 1e12));
        m.insert("total_active_time_percent".into(), json!(frac(active)));
        let d: Vec<(u64, u64)> = w
            .dmas
            .iter()
            .map(|d| (d.start_ps, d.start_ps + d.dur_ps))
            .collect();
        let da = union_len(d);
        m.insert("dma_active_time".into(), json!(da as f64 / 1e12));
        m.insert("dma_active_time_percent".into(), json!(frac(da)));
    }
    Value::Object(m)
}

/// A Chrome trace-event document (opens in Perfetto) of `caps`.
pub fn chrome_trace(caps: &[Capture]) -> Value {
    json!({
        "displayTimeUnit": "ns",
        "otherData": { "source": "neuron-emu (emulated device time)", "captures": caps.len() },
        "traceEvents": trace_events(caps),
    })
}

/// Thread ids within a core's process: engines 1..=5, their execution spans 11..=15, the
/// core's registers 20, notifications not tied to an engine 21, DMA tracks from 100 on.
fn engine_tid(e: Engine) -> u64 {
    1 + e.index() as u64
}
fn span_tid(e: Engine) -> u64 {
    11 + e.index() as u64
}
const REG_TID: u64 = 20;
/// An engine's thread name: `Tensor (PE)`.
fn engine_track(e: Engine) -> String {
    format!(
        "{} ({})",
        e.profiler_name(),
        e.def_name().to_ascii_uppercase()
    )
}
const NOTE_TID: u64 = 21;
const DMA_TID0: u64 = 100;

/// The trace events of `caps`, times in µs from the first record of the first capture:
/// metadata first (process and thread names, sort order), then every other event in time
/// order, so each track's timestamps never go back.
pub fn trace_events(caps: &[Capture]) -> Vec<Value> {
    let origin = caps
        .iter()
        .map(|c| match c.window {
            Some((a, _)) => c.first_ps().map_or(a, |f| f.min(a)),
            None => c.first_ps().unwrap_or(0),
        })
        .min()
        .unwrap_or(0);
    let us = |ps: u64| (ps as f64 - origin as f64) / 1e6;
    let pid = |dev: u32, nc: u32| 1 + dev as u64 * 1000 + nc as u64;
    // (pid) -> process name; (pid, tid) -> thread name.
    let mut procs: BTreeMap<u64, String> = BTreeMap::new();
    let mut threads: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut dma_tids: BTreeMap<(u64, String), u64> = BTreeMap::new();
    // (time ps, order, event)
    let mut evs: Vec<(u64, usize, Value)> = Vec::new();
    let mut flow_id = 0u64;
    for (k, c) in caps.iter().enumerate() {
        let cores = c.core_list();
        let lnc = cores.len();
        for (ci, nc) in cores.iter().enumerate() {
            let role = if lnc > 1 {
                format!("LNC={lnc} core {ci}, sg{ci:02}")
            } else {
                format!("sg{ci:02}")
            };
            procs.insert(
                pid(c.device, *nc),
                format!("neuron{} NC {nc} ({role})", c.device),
            );
        }
        let mut track = |p: u64, tid: u64, name: String| {
            threads.entry((p, tid)).or_insert(name);
            procs
                .entry(p)
                .or_insert_with(|| format!("neuron{} NC {}", c.device, (p - 1) % 1000));
        };
        for i in &c.instrs {
            let p = pid(c.device, i.nc);
            track(p, engine_tid(i.engine), engine_track(i.engine));
            evs.push((
                i.start_ps,
                evs.len(),
                json!({
                    "ph": "X", "cat": "instruction", "name": i.opcode,
                    "pid": p, "tid": engine_tid(i.engine),
                    "ts": us(i.start_ps), "dur": i.dur_ps as f64 / 1e6,
                    "args": { "pc": i.pc, "operands": i.operands, "subgraph": subgraph(&cores, i.nc), "execution": k },
                }),
            ));
        }
        for s in &c.spans {
            let p = pid(c.device, s.nc);
            track(
                p,
                span_tid(s.engine),
                format!("{} execution", s.engine.profiler_name()),
            );
            evs.push((
                s.start_ps,
                evs.len(),
                json!({
                    "ph": "X", "cat": "execution", "name": format!("execution {k}"),
                    "pid": p, "tid": span_tid(s.engine),
                    "ts": us(s.start_ps), "dur": s.end_ps.saturating_sub(s.start_ps) as f64 / 1e6,
                    "args": { "execution": k, "device_start_ps": s.start_ps, "device_end_ps": s.end_ps },
                }),
            ));
        }
        for d in &c.dmas {
            let p = pid(c.device, d.nc);
            let n = dma_tids.len() as u64;
            let tid = *dma_tids.entry((p, d.track.clone())).or_insert(DMA_TID0 + n);
            track(p, tid, d.track.clone());
            let issuer = d
                .issuer
                .map(|(e, pc)| format!("{} pc {pc}", e.profiler_name()));
            evs.push((
                d.start_ps,
                evs.len(),
                json!({
                    "ph": "X", "cat": "dma", "name": format!("DMA {} B", d.bytes),
                    "pid": p, "tid": tid,
                    "ts": us(d.start_ps), "dur": d.dur_ps as f64 / 1e6,
                    "args": { "bytes": d.bytes, "queue": d.subgroup, "queue_type": d.queue_type,
                              "semaphore": d.semaphore, "issued_by": issuer },
                }),
            ));
        }
        for r in &c.regs {
            let p = pid(c.device, r.nc);
            track(p, REG_TID, "semaphores and events".into());
            let what = if r.event {
                format!("$E[{}]", r.index)
            } else {
                r.id.clone()
            };
            evs.push((
                r.at_ps,
                evs.len(),
                json!({
                    "ph": "X", "cat": "register", "name": format!("{what} = {}", r.value),
                    "pid": p, "tid": REG_TID, "ts": us(r.at_ps), "dur": 0.0,
                    "args": { "index": r.index, "event": r.event, "value": r.value },
                }),
            ));
        }
        for n in &c.notes {
            let p = pid(c.device, n.nc);
            let tid = n.engine.map_or(NOTE_TID, engine_tid);
            let name = match n.engine {
                Some(e) => engine_track(e),
                None => "notifications".into(),
            };
            track(p, tid, name);
            evs.push((
                n.at_ps,
                evs.len(),
                json!({
                    "ph": "i", "s": "t", "cat": "notification",
                    "name": format!("{} {}", n.kind, n.value),
                    "pid": p, "tid": tid, "ts": us(n.at_ps),
                    "args": { "kind": n.kind, "value": n.value, "pc": n.pc },
                }),
            ));
        }
        // Waits: a word that issued after its engine's previous word ended, on a condition,
        // was released by the last update of a register it waited on, at or before its issue
        // and not before the previous word's end.
        let mut by_reg: BTreeMap<(u32, u8, bool), Vec<u64>> = BTreeMap::new();
        let mut reg_name: BTreeMap<(u32, u8, bool), &str> = BTreeMap::new();
        for r in &c.regs {
            by_reg
                .entry((r.nc, r.index, r.event))
                .or_default()
                .push(r.at_ps);
            reg_name.insert((r.nc, r.index, r.event), &r.id);
        }
        for v in by_reg.values_mut() {
            v.sort_unstable();
        }
        for (i, ready) in c.instrs.iter().zip(ready_times(&c.instrs)) {
            let Some(ready) = ready else {
                continue;
            };
            let release = i
                .waits
                .iter()
                .filter_map(|(idx, ev)| {
                    let ts = by_reg.get(&(i.nc, *idx, *ev))?;
                    let n = ts.partition_point(|t| *t <= i.start_ps);
                    let t = *ts.get(n.checked_sub(1)?)?;
                    (t >= ready).then_some((t, *idx, *ev))
                })
                .max();
            let Some((t, idx, ev)) = release else {
                continue;
            };
            flow_id += 1;
            let p = pid(c.device, i.nc);
            let name = match reg_name.get(&(i.nc, idx, ev)) {
                _ if ev => format!("$E[{idx}] wait"),
                Some(id) if id.starts_with('S') => format!("{id} wait"),
                _ => format!("$S[{idx}] wait"),
            };
            evs.push((
                t,
                evs.len(),
                json!({"ph": "s", "cat": "wait", "name": name, "id": flow_id,
                       "pid": p, "tid": REG_TID, "ts": us(t)}),
            ));
            evs.push((
                i.start_ps,
                evs.len(),
                json!({"ph": "f", "bp": "e", "cat": "wait", "name": name, "id": flow_id,
                       "pid": p, "tid": engine_tid(i.engine), "ts": us(i.start_ps)}),
            ));
        }
    }
    evs.sort_by_key(|(t, n, _)| (*t, *n));
    let mut out = Vec::with_capacity(evs.len() + procs.len() * 2 + threads.len() * 2);
    for (p, name) in &procs {
        out.push(
            json!({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": name}}),
        );
        out.push(json!({"ph": "M", "name": "process_sort_index", "pid": p, "tid": 0, "args": {"sort_index": p}}));
    }
    for ((p, t), name) in &threads {
        out.push(
            json!({"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": name}}),
        );
        out.push(json!({"ph": "M", "name": "thread_sort_index", "pid": p, "tid": t, "args": {"sort_index": t}}));
    }
    out.extend(evs.into_iter().map(|(_, _, v)| v));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instr(engine: Engine, pc: u32, start: u64, dur: u64, waits: Vec<(u8, bool)>) -> Instr {
        Instr {
            nc: 0,
            engine,
            pc,
            opcode: match pc {
                2 => "MATMUL".into(),
                8 => "EVENT_SEMAPHORE".into(),
                _ => "NOP".into(),
            },
            operands: String::new(),
            start_ps: start,
            dur_ps: dur,
            waits,
        }
    }

    fn capture() -> Capture {
        Capture {
            cores: vec![0],
            window: Some((1_000, 11_000)),
            detail: true,
            instrs: vec![
                instr(Engine::Pe, 0, 500, 100, vec![]),
                instr(Engine::Pe, 1, 1_000, 2_000, vec![]),
                instr(Engine::Pe, 2, 2_000, 2_000, vec![]),
                instr(Engine::Act, 7, 3_000, 1_000, vec![]),
                instr(Engine::Act, 8, 6_000, 1_000, vec![(5, false)]),
            ],
            regs: vec![RegUpdate {
                nc: 0,
                at_ps: 5_000,
                index: 5,
                event: false,
                value: 1,
                id: "S[5] (Tensor)".into(),
            }],
            ..Capture::default()
        }
    }

    #[test]
    fn summary_counts_the_window_and_merges_overlaps() {
        let r = report(&Meta::default(), &[capture()]);
        let s = &r["summary"][0];
        assert_eq!(s["total_time"], json!(1e-8));
        assert_eq!(
            s["tensor_engine_instruction_count"],
            json!(2),
            "pc 0 is before the start"
        );
        assert_eq!(s["tensor_engine_instruction_time"], json!(4e-9));
        assert_eq!(
            s["tensor_engine_active_time"],
            json!(3e-9),
            "overlap counted once"
        );
        assert_eq!(r["instruction"][1]["label"], json!("TensorMatrix"));
        assert_eq!(r["instruction"][0]["timestamp"], json!(0.0));
        assert_eq!(r["semaphore_update"][0]["timestamp"], json!(4.0));
        // The waiting word's record starts when its engine reached it, as the profiler's do.
        let w = &r["instruction"][3];
        assert_eq!(
            (&w["pc"], &w["timestamp"], &w["duration"]),
            (&json!(8), &json!(3.0), &json!(3.0))
        );
        assert_eq!(
            s["scalar_engine_instruction_time"],
            json!(4e-9),
            "waits included"
        );
        assert_eq!(
            s["scalar_engine_active_time"],
            json!(2e-9),
            "executing only"
        );
    }

    #[test]
    fn a_released_wait_is_one_flow_from_the_update() {
        let ev = trace_events(&[capture()]);
        let flows: Vec<&Value> = ev
            .iter()
            .filter(|e| matches!(e["ph"].as_str(), Some("s" | "f")))
            .collect();
        assert_eq!(flows.len(), 2, "{flows:?}");
        assert_eq!(flows[0]["tid"], json!(REG_TID));
        assert_eq!(flows[1]["tid"], json!(engine_tid(Engine::Act)));
        assert_eq!(flows[0]["id"], flows[1]["id"]);
    }

    #[test]
    fn union_of_intervals() {
        assert_eq!(union_len(vec![(0, 10), (5, 20), (30, 40), (40, 41)]), 31);
        assert_eq!(union_len::<u64>(vec![]), 0);
    }
}
