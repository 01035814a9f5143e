//! `neuron-monitor`: one JSON report per period (NDJSON), structured as AWS's
//! (`users-faults-and-tools.md` §3.2): `neuron_runtime_data[]` per runtime process (counters
//! diffed between samples: per-period tallies), `system_data`, `instance_info`,
//! `neuron_hardware_info`. Every metric group carries `period` (seconds, as measured) and
//! `error`. The per-core flops field is named `flops`, as documented (real inf2 output names
//! it `effective_flops`).

use crate::snapshot::{Device, Process, Snapshot};
use neuron_abi::nds::{self, NcCounter};
use neuron_abi::nds_runtime::{self as rta, RuntimeArea, HIST_BUCKETS, MEM_CATEGORIES};
use neuron_runtime::nds::{NC_DEVICE_COUNTERS, ND_HOST_MEM_COUNTERS};
use regex::Regex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The default period (no config, or an unparsable period string).
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(5);

/// Runtime metric groups, in report order.
pub const RUNTIME_GROUPS: [&str; 4] = [
    "neuroncore_counters",
    "execution_stats",
    "memory_used",
    "neuron_runtime_vcpu_usage",
];
/// System metric groups, in report order.
pub const SYSTEM_GROUPS: [&str; 3] = ["neuron_hw_counters", "vcpu_usage", "memory_info"];

/// One metric group with its period.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub kind: String,
    pub period: Duration,
}

/// Which runtimes a set of groups applies to.
#[derive(Debug, Clone)]
pub struct RuntimeSel {
    /// `None` matches every tag (`".*"`).
    pub tag_filter: Option<Regex>,
    pub groups: Vec<Group>,
}

/// The monitor's configuration (`-c file`).
#[derive(Debug, Clone)]
pub struct Config {
    pub period: Duration,
    pub runtimes: Vec<RuntimeSel>,
    pub system: Vec<Group>,
    /// What was ignored while reading it (shown with `--verbose 1` and up).
    pub warnings: Vec<String>,
}

impl Default for Config {
    /// All groups, every 5 s, every runtime.
    fn default() -> Self {
        let g = |k: &str| Group {
            kind: k.into(),
            period: DEFAULT_PERIOD,
        };
        Config {
            period: DEFAULT_PERIOD,
            runtimes: vec![RuntimeSel {
                tag_filter: None,
                groups: RUNTIME_GROUPS.iter().map(|k| g(k)).collect(),
            }],
            system: SYSTEM_GROUPS.iter().map(|k| g(k)).collect(),
            warnings: Vec::new(),
        }
    }
}

/// A period string: an integer and a unit (`ms`, `s`, `m`, `h`; e.g. `"1s"`). Anything else
/// (`"1.0s"`) is `None`, and the caller keeps the default, as the real monitor does.
pub fn parse_period(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60)?),
        "h" => Duration::from_secs(n.checked_mul(3600)?),
        _ => return None,
    };
    (d >= Duration::from_millis(100) && d <= Duration::from_secs(86_400)).then_some(d)
}

impl Config {
    /// Read a config document; unknown metric types and bad periods are warnings.
    pub fn parse(text: &str) -> Result<Config, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("config: {e}"))?;
        let mut c = Config {
            runtimes: Vec::new(),
            system: Vec::new(),
            ..Config::default()
        };
        let period_of = |v: &Value, dflt: Duration, w: &mut Vec<String>| match v
            .get("period")
            .and_then(Value::as_str)
        {
            Some(s) => parse_period(s).unwrap_or_else(|| {
                w.push(format!("invalid period {s:?}, using {}s", dflt.as_secs()));
                dflt
            }),
            None => dflt,
        };
        let mut warnings = Vec::new();
        c.period = period_of(&v, DEFAULT_PERIOD, &mut warnings);
        let base = c.period;
        let groups = |arr: Option<&Value>, known: &[&str], w: &mut Vec<String>| -> Vec<Group> {
            let mut out = Vec::new();
            for m in arr.and_then(Value::as_array).into_iter().flatten().take(64) {
                let Some(k) = m.get("type").and_then(Value::as_str) else {
                    w.push("metric without a type ignored".into());
                    continue;
                };
                if !known.contains(&k) {
                    w.push(format!("unknown metric type {k:?} ignored"));
                    continue;
                }
                let period = match m.get("period").and_then(Value::as_str) {
                    Some(s) => parse_period(s).unwrap_or(base),
                    None => base,
                };
                out.push(Group {
                    kind: k.into(),
                    period,
                });
            }
            out
        };
        for r in v
            .get("neuron_runtimes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(64)
        {
            let f = r.get("tag_filter").and_then(Value::as_str).unwrap_or(".*");
            let re =
                Regex::new(&format!("^(?:{f})$")).map_err(|e| format!("tag_filter {f:?}: {e}"))?;
            let g = groups(r.get("metrics"), &RUNTIME_GROUPS, &mut warnings);
            c.runtimes.push(RuntimeSel {
                tag_filter: Some(re),
                groups: g,
            });
        }
        c.system = groups(v.get("system_metrics"), &SYSTEM_GROUPS, &mut warnings);
        c.warnings = warnings;
        Ok(c)
    }

    /// The report cadence: the shortest period of any group.
    pub fn tick(&self) -> Duration {
        self.runtimes
            .iter()
            .flat_map(|r| r.groups.iter())
            .chain(self.system.iter())
            .map(|g| g.period)
            .min()
            .unwrap_or(self.period)
    }
}

/// A group's last computation: when, from which snapshot, what it said.
#[derive(Debug)]
struct Last {
    at: Instant,
    base: Snapshot,
}

/// The streaming monitor: feeds snapshots, yields reports.
#[derive(Debug)]
pub struct Monitor {
    cfg: Config,
    started: Instant,
    last: HashMap<String, Last>,
}

impl Monitor {
    pub fn new(cfg: Config) -> Monitor {
        Monitor {
            cfg,
            started: Instant::now(),
            last: HashMap::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Group `key`'s value at `snap`: computed when its period has passed since its last
    /// computation (or it never ran), diffed against the snapshot of that computation; `None`
    /// while it is not due. A report carries only newly collected groups: their tallies are
    /// per period, and consumers (AWS's Prometheus exporter) add every record's tallies up, so
    /// a repeated group would count its executions twice.
    fn group(
        &mut self,
        key: String,
        period: Duration,
        snap: &Snapshot,
        f: impl FnOnce(Option<&Snapshot>, f64) -> Value,
    ) -> Option<Value> {
        if let Some(l) = self.last.get(&key) {
            // A little slack: a tick that comes a hair early still counts as due.
            if snap.at.duration_since(l.at) + Duration::from_millis(20) < period {
                return None;
            }
        }
        let (base, secs) = match self.last.get(&key) {
            Some(l) => (Some(&l.base), snap.at.duration_since(l.at).as_secs_f64()),
            None => (None, snap.at.duration_since(self.started).as_secs_f64()),
        };
        let mut v = f(base, secs);
        if let Value::Object(m) = &mut v {
            let mut o = Map::new();
            o.insert("period".into(), json!(secs));
            o.append(m);
            o.entry("error").or_insert(json!(""));
            v = Value::Object(o);
        }
        self.last.insert(
            key,
            Last {
                at: snap.at,
                base: snap.clone(),
            },
        );
        Some(v)
    }

    /// One report for `snap` (`Err`: no device could be read; the hardware group says so).
    pub fn report(&mut self, snap: Result<&Snapshot, &str>) -> Value {
        let mut top = Map::new();
        let snap = match snap {
            Ok(s) => s,
            Err(e) => {
                top.insert("neuron_runtime_data".into(), json!([]));
                top.insert("system_data".into(), json!({}));
                top.insert("instance_info".into(), instance_info(None));
                top.insert("neuron_hardware_info".into(), hardware_info(None, e));
                return Value::Object(top);
            }
        };
        // One block per runtime process (its pages on every device it uses).
        let mut by_pid: BTreeMap<u32, Vec<(&Device, &Process)>> = BTreeMap::new();
        for (d, p) in snap.runtimes() {
            by_pid.entry(p.pid).or_default().push((d, p));
        }
        let mut rts = Vec::new();
        let sels = self.cfg.runtimes.clone();
        for (pid, pages) in &by_pid {
            let tag = pages[0].1.tag();
            let Some(sel) = sels
                .iter()
                .find(|s| s.tag_filter.as_ref().is_none_or(|r| r.is_match(&tag)))
            else {
                continue;
            };
            let mut report = Map::new();
            for g in &sel.groups {
                let key = format!("rt/{pid}/{}", g.kind);
                let pid = *pid;
                let v = self.group(key, g.period, snap, |base, secs| {
                    runtime_group(&g.kind, snap, base, pid, secs)
                });
                if let Some(v) = v {
                    report.insert(g.kind.clone(), v);
                }
            }
            rts.push(json!({
                "pid": pid,
                "address": "",
                "neuron_runtime_tag": tag,
                "error": "",
                "report": Value::Object(report),
            }));
        }
        top.insert("neuron_runtime_data".into(), Value::Array(rts));
        let mut sys = Map::new();
        for g in self.cfg.system.clone() {
            let v = self.group(format!("sys/{}", g.kind), g.period, snap, |base, secs| {
                system_group(&g.kind, snap, base, secs)
            });
            if let Some(v) = v {
                sys.insert(g.kind.clone(), v);
            }
        }
        top.insert("system_data".into(), Value::Object(sys));
        top.insert("instance_info".into(), instance_info(Some(snap)));
        top.insert("neuron_hardware_info".into(), hardware_info(Some(snap), ""));
        Value::Object(top)
    }
}

/// The pages of `pid` in `snap`, by device index.
fn pages_of(snap: &Snapshot, pid: u32) -> Vec<(&Device, &[u8])> {
    snap.devices
        .iter()
        .flat_map(|d| {
            d.processes
                .iter()
                .filter(move |p| p.pid == pid)
                .filter_map(move |p| p.page.as_deref().map(|pg| (d, pg)))
        })
        .collect()
}

fn page_for(snap: Option<&Snapshot>, dev: u32, pid: u32) -> Option<&[u8]> {
    snap?
        .devices
        .iter()
        .find(|d| d.index == dev)?
        .processes
        .iter()
        .find(|p| p.pid == pid)?
        .page
        .as_deref()
}

fn delta(cur: &[u8], base: Option<&[u8]>, nc: u32, c: NcCounter) -> u64 {
    nds::nc_counter(cur, nc, c).saturating_sub(base.map_or(0, |b| nds::nc_counter(b, nc, c)))
}

fn runtime_group(
    kind: &str,
    snap: &Snapshot,
    base: Option<&Snapshot>,
    pid: u32,
    secs: f64,
) -> Value {
    let pages = pages_of(snap, pid);
    match kind {
        "neuroncore_counters" => neuroncore_counters(&pages, base, pid, secs),
        "execution_stats" => execution_stats(&pages, base, pid),
        "memory_used" => memory_used(&pages),
        "neuron_runtime_vcpu_usage" => runtime_vcpu(snap, base, pid, secs),
        _ => json!({}),
    }
}

/// The physical cores a runtime uses on a device: those with a listed model or any execution.
fn cores_in_use(d: &Device, page: &[u8]) -> Vec<u32> {
    let area = RuntimeArea::of_page(page);
    (0..d.physical_cores())
        .filter(|nc| {
            nds::nc_counter(page, *nc, NcCounter::INFERENCE_COUNT) > 0
                || nds::nc_counter(page, *nc, NcCounter::MODEL_LOAD_COUNT) > 0
                || area.as_ref().is_some_and(|a| {
                    a.loaded_models()
                        .any(|m| (m.nc_index..m.nc_index + m.nc_count.max(1)).contains(nc))
                })
        })
        .collect()
}

fn neuroncore_counters(
    pages: &[(&Device, &[u8])],
    base: Option<&Snapshot>,
    pid: u32,
    secs: f64,
) -> Value {
    let mut in_use = Map::new();
    for (d, page) in pages {
        let b = page_for(base, d.index, pid);
        let lnc = d.lnc();
        let mut logical: BTreeMap<u32, Vec<(u32, f64, u64)>> = BTreeMap::new();
        for nc in cores_in_use(d, page) {
            let busy_us = delta(page, b, nc, NcCounter::TIME_IN_USE) as f64;
            let util = if secs > 0.0 {
                (busy_us / (secs * 1e6) * 100.0).min(100.0)
            } else {
                0.0
            };
            let macs = delta(page, b, nc, NcCounter::MAC_COUNT);
            logical
                .entry(nc / lnc)
                .or_default()
                .push((nc % lnc, util, macs));
        }
        for (l, phys) in logical {
            let util = phys.iter().map(|p| p.1).sum::<f64>() / lnc as f64;
            let flops = if secs > 0.0 {
                (phys.iter().map(|p| p.2).sum::<u64>() as f64 * 2.0 / secs) as u64
            } else {
                0
            };
            let mut e = Map::new();
            e.insert("neuroncore_utilization".into(), json!(util));
            e.insert("flops".into(), json!(flops));
            if lnc > 1 {
                let v3d: Map<String, Value> = phys
                    .iter()
                    .map(|(k, u, _)| (format!("nc_v3.{k}"), json!({ "neuroncore_utilization": u })))
                    .collect();
                e.insert("v3d".into(), Value::Object(v3d));
            }
            in_use.insert((d.index * d.nc_count() + l).to_string(), Value::Object(e));
        }
    }
    json!({ "neuroncores_in_use": in_use })
}

/// Percentiles the report lists, and their keys.
const PERCENTILES: [(&str, f64); 7] = [
    ("p0", 0.0),
    ("p1", 1.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p99", 99.0),
    ("p100", 100.0),
];

fn latency(counts: &[u64; HIST_BUCKETS]) -> Value {
    if counts.iter().all(|c| *c == 0) {
        return Value::Null;
    }
    let m: Map<String, Value> = PERCENTILES
        .iter()
        .map(|(k, p)| {
            let us = rta::percentile_us(counts, *p).unwrap_or(0.0);
            (k.to_string(), json!(us / 1e6))
        })
        .collect();
    Value::Object(m)
}

fn execution_stats(pages: &[(&Device, &[u8])], base: Option<&Snapshot>, pid: u32) -> Value {
    let sum = |c: NcCounter| -> u64 {
        pages
            .iter()
            .map(|(d, p)| {
                let b = page_for(base, d.index, pid);
                (0..d.physical_cores())
                    .map(|nc| delta(p, b, nc, c))
                    .sum::<u64>()
            })
            .sum()
    };
    let errors = json!({
        "generic": sum(NcCounter::ERR_GENERIC),
        "numerical": sum(NcCounter::ERR_NUMERICAL),
        "transient": sum(NcCounter::ERR_TRANSIENT),
        "model": sum(NcCounter::ERR_MODEL),
        "runtime": sum(NcCounter::ERR_RT),
        "hardware": sum(NcCounter::ERR_HW),
    });
    let summary = json!({
        "completed": sum(NcCounter::INFER_COMPLETED),
        "completed_with_err": sum(NcCounter::INFER_COMPLETED_WITH_ERR),
        "completed_with_num_err": sum(NcCounter::INFER_COMPLETED_WITH_NUM_ERR),
        "timed_out": sum(NcCounter::INFER_TIMED_OUT),
        "incorrect_input": sum(NcCounter::INFER_INCORRECT_INPUT),
        "failed_to_queue": sum(NcCounter::INFER_FAILED_TO_QUEUE),
    });
    let mut total = [0u64; HIST_BUCKETS];
    let mut device = [0u64; HIST_BUCKETS];
    for (d, p) in pages {
        let (Some(cur), prev) = (
            RuntimeArea::of_page(p),
            page_for(base, d.index, pid).and_then(RuntimeArea::of_page),
        ) else {
            continue;
        };
        for (i, l) in cur.latency.iter().enumerate() {
            let pl = prev.as_ref().and_then(|a| a.latency.get(i));
            for k in 0..HIST_BUCKETS {
                total[k] += l.total.buckets[k].saturating_sub(pl.map_or(0, |x| x.total.buckets[k]));
                device[k] +=
                    l.device.buckets[k].saturating_sub(pl.map_or(0, |x| x.device.buckets[k]));
            }
        }
    }
    json!({
        "error_summary": errors,
        "execution_summary": summary,
        "latency_stats": {
            "total_latency": latency(&total),
            "device_latency": latency(&device),
        },
    })
}

/// Host bytes by category as the report breaks them down.
fn host_breakdown(h: &[u64; MEM_CATEGORIES]) -> Value {
    json!({
        "application_memory": h[rta::MEM_CODE] + h[rta::MEM_SCRATCHPAD],
        "constants": h[rta::MEM_CONSTANTS],
        "dma_buffers": h[rta::MEM_MISC],
        "tensors": h[rta::MEM_TENSORS],
    })
}

fn memory_used(pages: &[(&Device, &[u8])]) -> Value {
    let mut host = [0u64; MEM_CATEGORIES];
    let mut per_nc = Map::new();
    let mut device_total = 0u64;
    let mut models = Vec::new();
    for (d, page) in pages {
        for (k, c) in ND_HOST_MEM_COUNTERS.iter().enumerate() {
            host[k] += nds::nd_counter_offset(*c).map_or(0, |o| nds::read_u64(page, o));
        }
        let mut logical: BTreeMap<u32, [u64; MEM_CATEGORIES]> = BTreeMap::new();
        for nc in cores_in_use(d, page) {
            let e = logical.entry(nc / d.lnc()).or_default();
            for (k, c) in NC_DEVICE_COUNTERS.iter().enumerate() {
                e[k] += nds::nc_counter(page, nc, *c);
            }
        }
        for (l, v) in logical {
            device_total += v.iter().sum::<u64>();
            per_nc.insert(
                (d.index * d.nc_count() + l).to_string(),
                json!({
                    "constants": v[rta::MEM_CONSTANTS],
                    "model_code": v[rta::MEM_CODE],
                    "model_shared_scratchpad": v[rta::MEM_SCRATCHPAD],
                    "runtime_memory": v[rta::MEM_MISC],
                    "tensors": v[rta::MEM_TENSORS],
                }),
            );
        }
        if let Some(a) = RuntimeArea::of_page(page) {
            models.extend(a.loaded_models().map(|m| model_json(d, m)));
        }
    }
    json!({
        "neuron_runtime_used_bytes": {
            "host": host.iter().sum::<u64>(),
            "neuron_device": device_total,
            "usage_breakdown": {
                "host": host_breakdown(&host),
                "neuroncore_memory_usage": per_nc,
            },
        },
        "loaded_models": models,
    })
}

/// A loaded model as `memory_used.loaded_models[]` lists it; its memory is all in `sg_00`.
pub fn model_json(d: &Device, m: &rta::ModelRecord) -> Value {
    let dev = &m.device_bytes;
    let mut subgraphs = Map::new();
    for k in 0..m.nc_count.max(1) {
        let nc = m.nc_index + k;
        let (h, dv) = if k == 0 {
            (m.host_bytes, *dev)
        } else {
            ([0; MEM_CATEGORIES], [0; MEM_CATEGORIES])
        };
        let mut sg = Map::new();
        sg.insert(
            "memory_used_bytes".into(),
            json!({
                "host": h.iter().sum::<u64>(),
                "neuron_device": dv.iter().sum::<u64>(),
                "usage_breakdown": {
                    "host": host_breakdown(&h),
                    "neuron_device": {
                        "constants": dv[rta::MEM_CONSTANTS],
                        "model_code": dv[rta::MEM_CODE],
                        "runtime_memory": dv[rta::MEM_MISC] + dv[rta::MEM_SCRATCHPAD],
                        "tensors": dv[rta::MEM_TENSORS],
                    },
                },
            }),
        );
        sg.insert("neuroncore_index".into(), json!(nc / d.lnc()));
        sg.insert("neuron_device_index".into(), json!(d.index));
        let ver = if d.lnc() > 1 { "v3d" } else { "v2" };
        sg.insert(
            ver.into(),
            json!(format!("nc_{ver}.{}", nc % d.lnc().max(1))),
        );
        subgraphs.insert(format!("sg_{k:02}"), Value::Object(sg));
    }
    json!({
        "name": rta::c_str(&m.name),
        "uuid": m.uuid.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "model_id": m.model_id,
        "is_running": m.is_running != 0,
        "subgraphs": subgraphs,
    })
}

fn runtime_vcpu(snap: &Snapshot, base: Option<&Snapshot>, pid: u32, secs: f64) -> Value {
    let ticks = |s: &Snapshot| {
        s.devices
            .iter()
            .flat_map(|d| d.processes.iter())
            .find(|p| p.pid == pid)
            .and_then(|p| p.cpu_ticks)
    };
    let (u, s) = match (ticks(snap), base.and_then(ticks)) {
        (Some(c), Some(b)) if secs > 0.0 => {
            let ncpu = snap
                .cpu
                .as_ref()
                .map_or(1, |c| c.cpus.len().saturating_sub(1).max(1));
            let pct = |d: u64| d as f64 / snap.clk_tck as f64 / secs * 100.0 / ncpu as f64;
            (pct(c.0.saturating_sub(b.0)), pct(c.1.saturating_sub(b.1)))
        }
        _ => (0.0, 0.0),
    };
    json!({ "vcpu_usage": { "user": u, "system": s } })
}

fn system_group(kind: &str, snap: &Snapshot, base: Option<&Snapshot>, _secs: f64) -> Value {
    match kind {
        "neuron_hw_counters" => {
            let devs: Vec<Value> = snap
                .devices
                .iter()
                .map(|d| {
                    let b = base
                        .and_then(|b| b.devices.iter().find(|x| x.index == d.index))
                        .map(|x| x.ecc)
                        .unwrap_or_default();
                    json!({
                        "neuron_device_index": d.index,
                        "mem_ecc_corrected": d.ecc.mem_ecc_corrected.saturating_sub(b.mem_ecc_corrected),
                        "mem_ecc_uncorrected": d.ecc.mem_ecc_uncorrected.saturating_sub(b.mem_ecc_uncorrected),
                        "sram_ecc_corrected": d.ecc.sram_ecc_corrected.saturating_sub(b.sram_ecc_corrected),
                        "sram_ecc_uncorrected": d.ecc.sram_ecc_uncorrected.saturating_sub(b.sram_ecc_uncorrected),
                    })
                })
                .collect();
            json!({ "neuron_devices": devs })
        }
        "vcpu_usage" => vcpu_usage(snap, base),
        "memory_info" => match &snap.mem {
            Some(m) => json!({
                "memory_total_bytes": m.total,
                "memory_used_bytes": m.used,
                "swap_total_bytes": m.swap_total,
                "swap_used_bytes": m.swap_used,
            }),
            None => json!({
                "memory_total_bytes": 0, "memory_used_bytes": 0,
                "swap_total_bytes": 0, "swap_used_bytes": 0,
                "error": "cannot read /proc/meminfo",
            }),
        },
        _ => json!({}),
    }
}

fn usage_fields(cur: &[u64; 7], prev: &[u64; 7]) -> Value {
    let d: Vec<f64> = cur
        .iter()
        .zip(prev)
        .map(|(c, p)| c.saturating_sub(*p) as f64)
        .collect();
    let total: f64 = d.iter().sum();
    let pct = |i: usize| {
        if total > 0.0 {
            d[i] / total * 100.0
        } else {
            0.0
        }
    };
    json!({
        "user": pct(0), "nice": pct(1), "system": pct(2), "idle": pct(3),
        "io_wait": pct(4), "irq": pct(5), "soft_irq": pct(6),
    })
}

fn vcpu_usage(snap: &Snapshot, base: Option<&Snapshot>) -> Value {
    let Some(cur) = &snap.cpu else {
        return json!({ "error": "cannot read /proc/stat" });
    };
    let zero = crate::snapshot::CpuStat::default();
    let prev = base.and_then(|b| b.cpu.as_ref()).unwrap_or(&zero);
    let find = |name: &str| {
        prev.cpus
            .iter()
            .find(|(n, _)| n == name)
            .map_or([0; 7], |c| c.1)
    };
    let mut avg = json!({});
    let mut per = Map::new();
    for (name, v) in &cur.cpus {
        let u = usage_fields(v, &find(name));
        match name.strip_prefix("cpu") {
            Some("") => avg = u,
            Some(n) => {
                per.insert(n.to_string(), u);
            }
            None => {}
        }
    }
    json!({
        "average_usage": avg,
        "usage_data": per,
        "context_switch_count": cur.ctxt.saturating_sub(prev.ctxt),
    })
}

fn instance_info(snap: Option<&Snapshot>) -> Value {
    let i = snap.map(|s| s.instance.clone()).unwrap_or_default();
    json!({
        "instance_name": "",
        "instance_id": i.instance_id,
        "instance_type": i.instance_type,
        "instance_availability_zone": "",
        "instance_availability_zone_id": "",
        "instance_region": "",
        "ami_id": "",
        "subnet_id": "",
        "error": "",
    })
}

/// `neuron_hardware_info` (trn2: trainium2 / v4 / v3d / 4 cores per device / LNC 2).
pub fn hardware_info(snap: Option<&Snapshot>, err: &str) -> Value {
    let d = snap.and_then(|s| s.devices.first());
    let (ty, ver, core) = match d.map(|d| d.arch) {
        Some(neuron_abi::arch::Arch::V3Trn2) => ("trainium2", "v4", "v3d"),
        Some(neuron_abi::arch::Arch::V2Inf2) => ("inferentia2", "v3", "v2"),
        Some(neuron_abi::arch::Arch::V2Trn1) => ("trainium", "v2", "v2"),
        None => ("", "", ""),
    };
    json!({
        "neuron_device_type": ty,
        "neuron_device_version": ver,
        "neuroncore_version": core,
        "neuron_device_count": snap.map_or(0, |s| s.devices.len()),
        "neuron_device_memory_size": d.map_or(0, |d| d.memory_size()),
        "neuroncore_per_device_count": d.map_or(0, |d| d.nc_count()),
        "logical_neuroncore_config": d.map_or(1, |d| d.lnc()),
        "error": err,
    })
}

/// The device-level host memory counter sum of a page (used by neuron-top).
pub fn host_bytes(page: &[u8]) -> u64 {
    ND_HOST_MEM_COUNTERS
        .iter()
        .map(|c| nds::nd_counter_offset(*c).map_or(0, |o| nds::read_u64(page, o)))
        .sum()
}
