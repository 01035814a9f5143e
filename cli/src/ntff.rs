//! `neuron-emu ntff FILE.ntff`: a silicon run's execution records decoded from its NTFF
//! (`neuron_isa::ntff`, `docs/isa/cayman.md` §4): per engine the words executed, first and
//! last timestamps, busy and active time, per opcode the time sums, and the DMA packets. The
//! same records are `profile-diff`'s silicon side when it is given an NTFF.

use crate::Failure;
use clap::Args;
use neuron_isa::cayman::render::{neff_base, Names};
use neuron_isa::cayman::{CaymanInstr, Namespace, WORD};
use neuron_isa::ntff::{Ntff, Record};
use neuron_isa::Engine;
use neuron_runtime::profile::union_len;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub(crate) struct NtffArgs {
    /// The NTFF profile (`neuron-profile capture` output).
    pub(crate) file: PathBuf,
    /// The NEFF it profiles: names the semaphores in operands (`S[24] (qGpSimdDynamic)`).
    #[arg(long, value_name = "FILE.neff")]
    pub(crate) neff: Option<PathBuf>,
    /// Print one JSON object (engines, opcodes, DMA) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also print the time per (subgraph, engine, opcode).
    #[arg(long)]
    pub(crate) per_opcode: bool,
}

/// Largest NTFF read (the eight fixture profiles are 0.1–1 MB).
const MAX_BYTES: u64 = 1 << 30;

/// Words whose records include their wait (EVENT_SEMAPHORE, DRAIN, NOP): the profiler's
/// engine active time leaves them out (on the six akc profiles the union of the other words
/// is within 3% of its `*_engine_active_time` on PE, ACT and DVE).
pub(crate) const WAIT_OPCODES: &[&str] = &["EVENT_SEMAPHORE", "DRAIN", "NOP"];

/// One executed word as the profiler's JSON lists it: times in ns from the window's start.
#[derive(Debug, Clone)]
pub(crate) struct Word {
    pub(crate) sg: String,
    pub(crate) engine: Engine,
    pub(crate) pc: u32,
    pub(crate) opcode: String,
    pub(crate) operands: String,
    pub(crate) ts: f64,
    pub(crate) dur: f64,
}

/// One DMA packet in the window (ns from its start).
#[derive(Debug, Clone)]
pub(crate) struct Packet {
    pub(crate) sg: String,
    pub(crate) queue: u8,
    pub(crate) dma_engine: u16,
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) bytes: u64,
}

/// What `ntff` and `profile-diff` read of an NTFF.
#[derive(Debug)]
pub(crate) struct Silicon {
    pub(crate) neff_name: String,
    /// The window's length (TOC 15), else the records' span.
    pub(crate) total_ns: f64,
    pub(crate) window_from_toc: bool,
    /// The executed words that started in the window.
    pub(crate) words: Vec<Word>,
    /// Executed words outside the window (the run before, the loop back after).
    pub(crate) outside: usize,
    pub(crate) unpaired: usize,
    pub(crate) unplaced: usize,
    pub(crate) other_marks: usize,
    pub(crate) packets: Vec<Packet>,
    pub(crate) packets_unpaired: usize,
    pub(crate) semaphore_updates: usize,
}

/// What a NEFF adds to its NTFF: per subgraph the names of its semaphores and variables, and
/// per (subgraph, engine) the pc this runtime gives NEFF word 0 (`cayman::render::neff_base`).
#[derive(Debug, Default)]
pub(crate) struct NeffInfo {
    pub(crate) names: BTreeMap<String, Names>,
    pub(crate) bases: BTreeMap<(String, Engine), u32>,
}

fn bad(p: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", p.display())
}

pub(crate) fn neff_info(path: &Path) -> Result<NeffInfo, String> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    let neff = neuron_neff::Neff::parse(&bytes).map_err(|e| bad(path, e))?;
    let kelf = neff.kelf().map_err(|e| bad(path, e))?;
    let mut out = NeffInfo::default();
    for g in &kelf.graphs {
        let def = neff.subgraph_def(&g.definition).map_err(|e| bad(path, e))?;
        for (i, (_, json, _)) in def.engine_files().into_iter().enumerate() {
            if let Some(e) = Engine::from_index(i) {
                let f = neuron_runtime::real::features(&neff, &def, g.dir(), e, json);
                out.bases.insert((g.name.clone(), e), neff_base(e, f));
            }
        }
        out.names
            .insert(g.name.clone(), crate::disasm::def_names(&def));
    }
    Ok(out)
}

/// Whether `path` holds an NTFF (byte 0 = 6; a JSON document starts with text).
pub(crate) fn is_ntff(path: &Path) -> bool {
    let mut b = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok_and(|()| b[0] == 6)
}

/// Read an NTFF's execution records. With `info`, operands name the NEFF's semaphores and
/// pcs are renumbered to this runtime's prologue where its length differs from AWS's
/// (`docs/isa/cayman.md` §5.1; the identity on every NEFF in the fixtures, the queue-owning
/// engines included); prologue words that have no counterpart get pc `u32::MAX`, which
/// matches nothing.
pub(crate) fn read(path: &Path, info: Option<&NeffInfo>) -> Result<Silicon, String> {
    let size = std::fs::metadata(path).map_err(|e| bad(path, e))?.len();
    if size > MAX_BYTES {
        return Err(bad(path, format!("{size} bytes, more than {MAX_BYTES}")));
    }
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    let nt = Ntff::parse(&bytes).map_err(|e| bad(path, e))?;
    Ok(silicon(&nt, info))
}

fn silicon(nt: &Ntff, info: Option<&NeffInfo>) -> Silicon {
    let ex = nt.executed();
    let (packets, packets_unpaired) = nt.dma_packets();
    let origin = nt.window.map(|w| w.start_ps).unwrap_or_else(|| {
        ex.executed
            .iter()
            .map(|x| x.start_ps)
            .chain(packets.iter().map(|p| p.start_ps))
            .min()
            .unwrap_or(0)
    });
    let end = nt.window.map(|w| w.end_ps).unwrap_or_else(|| {
        ex.executed
            .iter()
            .map(|x| x.end_ps)
            .chain(packets.iter().map(|p| p.end_ps))
            .max()
            .unwrap_or(origin)
    });
    let len = end.saturating_sub(origin);
    let ns = |ps: u64| ps.saturating_sub(origin) as f64 / 1e3;
    let inside = |ps: u64| ps >= origin && ps - origin < len;
    let empty = Names::default();
    let mut words = Vec::new();
    let mut outside = 0;
    for x in &ex.executed {
        if !inside(x.start_ps) {
            outside += 1;
            continue;
        }
        let Some(p) = nt.program(&x.subgraph, x.engine) else {
            continue;
        };
        let at = x.pc as usize * WORD;
        let Some(w) = p.bytes.get(at..at + WORD).and_then(|w| w.try_into().ok()) else {
            continue;
        };
        let instr = CaymanInstr::decode(Namespace::Loaded, w);
        let names = info
            .and_then(|i| i.names.get(&x.subgraph))
            .unwrap_or(&empty);
        let rule = info.and_then(|i| i.bases.get(&(x.subgraph.clone(), x.engine)));
        let pc = match (rule, p.neff_base()) {
            (Some(&r), Some(b)) => (x.pc + r).checked_sub(b).unwrap_or(u32::MAX),
            _ => x.pc,
        };
        words.push(Word {
            sg: x.subgraph.clone(),
            engine: x.engine,
            pc,
            opcode: instr.opcode.name(),
            operands: instr.operands(names),
            ts: ns(x.start_ps),
            dur: (x.end_ps - x.start_ps) as f64 / 1e3,
        });
    }
    let packets = packets
        .iter()
        .filter(|p| inside(p.start_ps))
        .map(|p| Packet {
            sg: p.subgraph.clone(),
            queue: p.queue,
            dma_engine: p.dma_engine,
            start: ns(p.start_ps),
            end: ns(p.end_ps),
            bytes: u64::from(p.bytes),
        })
        .collect();
    let semaphore_updates = nt
        .records()
        .filter(|(_, r)| matches!(r, Record::Event(e) if e.semaphore && inside(e.ts)))
        .count();
    Silicon {
        neff_name: nt.neff_name.clone(),
        total_ns: len as f64 / 1e3,
        window_from_toc: nt.window.is_some(),
        words,
        outside,
        unpaired: ex.unpaired,
        unplaced: ex.unplaced,
        other_marks: ex.other,
        packets,
        packets_unpaired,
        semaphore_updates,
    }
}

/// One engine's figures (ns).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EngineStats {
    pub(crate) count: usize,
    pub(crate) first: f64,
    pub(crate) last: f64,
    /// Union of every word's record (waits included).
    pub(crate) busy: f64,
    /// Union of the records of words other than [`WAIT_OPCODES`].
    pub(crate) active: f64,
    /// Sum of the durations of words other than [`WAIT_OPCODES`].
    pub(crate) instr: f64,
    /// Sum of every duration.
    pub(crate) sum: f64,
}

/// [`EngineStats`] per (subgraph, engine) of records `(subgraph, engine, opcode, ts, dur)`.
pub(crate) fn engine_stats<'a>(
    recs: impl IntoIterator<Item = (&'a str, Engine, &'a str, f64, f64)>,
) -> BTreeMap<(String, Engine), EngineStats> {
    type Acc = (EngineStats, Vec<(f64, f64)>, Vec<(f64, f64)>);
    let mut by: BTreeMap<(String, Engine), Acc> = BTreeMap::new();
    for (sg, e, op, ts, dur) in recs {
        let (s, all, work) = by.entry((sg.to_owned(), e)).or_insert_with(|| {
            let s = EngineStats {
                first: f64::INFINITY,
                last: f64::NEG_INFINITY,
                ..EngineStats::default()
            };
            (s, Vec::new(), Vec::new())
        });
        s.count += 1;
        s.first = s.first.min(ts);
        s.last = s.last.max(ts + dur);
        s.sum += dur;
        all.push((ts, ts + dur));
        if !WAIT_OPCODES.contains(&op) {
            s.instr += dur;
            work.push((ts, ts + dur));
        }
    }
    by.into_iter()
        .map(|(k, (mut s, all, work))| {
            s.busy = union_len(all);
            s.active = union_len(work);
            (k, s)
        })
        .collect()
}

fn us(ns: f64) -> f64 {
    ns / 1e3
}

/// The report as JSON (what `--json` prints and the text is made from).
fn report(path: &Path, s: &Silicon) -> Value {
    let stats = engine_stats(
        s.words
            .iter()
            .map(|w| (w.sg.as_str(), w.engine, w.opcode.as_str(), w.ts, w.dur)),
    );
    let engines: Vec<Value> = stats
        .iter()
        .map(|((sg, e), st)| {
            json!({
                "subgraph": sg, "engine": e.profiler_name(), "words": st.count,
                "first_us": us(st.first), "last_us": us(st.last), "busy_us": us(st.busy),
                "active_us": us(st.active), "instruction_us": us(st.instr), "sum_us": us(st.sum),
            })
        })
        .collect();
    let mut ops: BTreeMap<(&str, Engine, &str), (usize, f64)> = BTreeMap::new();
    for w in &s.words {
        let o = ops.entry((&w.sg, w.engine, &w.opcode)).or_default();
        o.0 += 1;
        o.1 += w.dur;
    }
    let opcodes: Vec<Value> = ops
        .iter()
        .map(|((sg, e, op), (n, t))| {
            json!({"subgraph": sg, "engine": e.profiler_name(), "opcode": op, "count": n,
                   "sum_us": us(*t)})
        })
        .collect();
    // Per (subgraph, queue): packets, bytes, intervals, DMA engines used.
    type Acc = (usize, u64, Vec<(f64, f64)>, BTreeSet<u16>);
    let mut dma: BTreeMap<(&str, u8), Acc> = BTreeMap::new();
    for p in &s.packets {
        let d = dma.entry((&p.sg, p.queue)).or_default();
        d.0 += 1;
        d.1 += p.bytes;
        d.2.push((p.start, p.end));
        d.3.insert(p.dma_engine);
    }
    let all: Vec<(f64, f64)> = s.packets.iter().map(|p| (p.start, p.end)).collect();
    let queues: Vec<Value> = dma
        .into_iter()
        .map(|((sg, q), (n, b, iv, engines))| {
            let summed: f64 = iv.iter().map(|(a, b)| b - a).sum();
            json!({"subgraph": sg, "queue": q, "packets": n, "bytes": b,
                   "dma_engines": engines.len(), "summed_us": us(summed),
                   "active_us": us(union_len(iv))})
        })
        .collect();
    json!({
        "file": path.display().to_string(),
        "neff_name": s.neff_name,
        "total_time_us": us(s.total_ns),
        "window_from_toc": s.window_from_toc,
        "engines": engines,
        "opcodes": opcodes,
        "dma": {"packets": s.packets.len(), "bytes": s.packets.iter().map(|p| p.bytes).sum::<u64>(),
                "active_us": us(union_len(all)), "queues": queues,
                "unpaired_records": s.packets_unpaired},
        "records": {"words": s.words.len(), "words_outside_window": s.outside,
                    "unpaired": s.unpaired, "unplaced": s.unplaced, "other_marks": s.other_marks,
                    "semaphore_updates": s.semaphore_updates},
    })
}

pub(crate) fn run(a: &NtffArgs) -> Result<(), Failure> {
    let info = a
        .neff
        .as_deref()
        .map(neff_info)
        .transpose()
        .map_err(|e| Failure(2, e))?;
    let s = read(&a.file, info.as_ref()).map_err(|e| Failure(2, e))?;
    let doc = report(&a.file, &s);
    if a.json {
        println!("{doc}");
        return Ok(());
    }
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    println!(
        "ntff: {} (NEFF '{}'): {:.3} us {}",
        a.file.display(),
        s.neff_name,
        us(s.total_ns),
        if s.window_from_toc {
            "execution window (TOC)"
        } else {
            "span of the records (no window in the TOC)"
        }
    );
    let r = &doc["records"];
    println!(
        "records: {} words executed in the window ({} outside it, {} unpaired, {} unplaced, {} other marks), {} semaphore updates",
        s.words.len(),
        s.outside,
        s.unpaired,
        s.unplaced,
        s.other_marks,
        r["semaphore_updates"]
    );
    println!(
        "  sg   engine    words   first us    last us    busy us  active us  instr us     sum us"
    );
    for e in doc["engines"].as_array().into_iter().flatten() {
        println!(
            "  {:<4} {:<8} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>9.3} {:>10.3}",
            e["subgraph"].as_str().unwrap_or("?"),
            e["engine"].as_str().unwrap_or("?"),
            e["words"].as_u64().unwrap_or(0),
            f(e, "first_us"),
            f(e, "last_us"),
            f(e, "busy_us"),
            f(e, "active_us"),
            f(e, "instruction_us"),
            f(e, "sum_us")
        );
    }
    println!("  (busy: union of all records; active and instr: words other than EVENT_SEMAPHORE, DRAIN, NOP)");
    let d = &doc["dma"];
    println!(
        "DMA: {} packets, {} bytes, active {:.3} us (union); {} records unpaired",
        d["packets"],
        d["bytes"],
        f(d, "active_us"),
        d["unpaired_records"]
    );
    println!("  sg   queue  packets        bytes  DMA engines  summed us  active us");
    for g in d["queues"].as_array().into_iter().flatten() {
        println!(
            "  {:<4} {:>5} {:>8} {:>12} {:>12} {:>10.3} {:>10.3}",
            g["subgraph"].as_str().unwrap_or("?"),
            n(g, "queue"),
            n(g, "packets"),
            n(g, "bytes"),
            n(g, "dma_engines"),
            f(g, "summed_us"),
            f(g, "active_us")
        );
    }
    if a.per_opcode {
        println!("  sg   engine   opcode                        count     sum us");
        for o in doc["opcodes"].as_array().into_iter().flatten() {
            println!(
                "  {:<4} {:<8} {:<28} {:>6} {:>10.3}",
                o["subgraph"].as_str().unwrap_or("?"),
                o["engine"].as_str().unwrap_or("?"),
                o["opcode"].as_str().unwrap_or("?"),
                n(o, "count"),
                f(o, "sum_us")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn model(stem: &str) -> PathBuf {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/real-models"
        ))
        .join(stem)
    }

    /// The model layers' decoded records give the figures published with them
    /// (`SOURCES.md`): attention 359.87 us total; MoE DMA active 137.83 us and Tensor active
    /// 69.64 us (the records' no-wait union, within 5%; its window is 275.78 us, 0.4% over
    /// the published 274.76 us).
    #[test]
    fn model_layers_match_their_published_figures() {
        let a = read(&model("kgm-attn_tkg_v6.ntff"), None).expect("attention");
        assert!(a.window_from_toc);
        assert!((us(a.total_ns) - 359.87).abs() < 0.01, "{}", a.total_ns);
        let m = read(&model("kgm-moe_tkg_v6b.ntff"), None).expect("moe");
        assert!((us(m.total_ns) / 274.76 - 1.0).abs() < 0.01);
        let doc = report(Path::new("moe"), &m);
        let dma = doc["dma"]["active_us"].as_f64().expect("dma");
        assert!((dma / 137.83 - 1.0).abs() < 0.05, "DMA active {dma}");
        let pe = doc["engines"]
            .as_array()
            .and_then(|v| {
                v.iter()
                    .find(|e| e["subgraph"] == "sg00" && e["engine"] == "Tensor")
            })
            .and_then(|e| e["active_us"].as_f64())
            .expect("sg00 Tensor");
        assert!((pe / 69.64 - 1.0).abs() < 0.05, "Tensor active {pe}");
        // Queue 0 (the expert weights: 6,144 of its packets are 4 KiB) uses all 16 DMA engines.
        let q0 = doc["dma"]["queues"]
            .as_array()
            .and_then(|v| {
                v.iter()
                    .find(|q| q["subgraph"] == "sg00" && q["queue"] == 0)
            })
            .expect("sg00 queue 0");
        assert_eq!(q0["dma_engines"], 16);
        assert_eq!(q0["packets"], 8960);
        // Every executed word decodes to a known opcode of its engine's loaded program.
        assert!(m.words.iter().all(|w| !w.opcode.starts_with("UNKNOWN")));
        assert_eq!(m.words.len(), 3574);
    }

    /// With the NEFF, pcs are this runtime's numbering, which since the queue set-up slots
    /// (`runtime/src/prologue.rs`) equals AWS's on every engine, the three queue-owning ones
    /// (MoE GpSimd and Sync: 13 slots longer before those slots existed) included.
    #[test]
    fn neff_numbering_equals_the_ntffs() {
        let info = neff_info(&model("kgm-moe_tkg_v6b.neff")).expect("neff");
        let raw = read(&model("kgm-moe_tkg_v6b.ntff"), None).expect("ntff");
        let ren = read(&model("kgm-moe_tkg_v6b.ntff"), Some(&info)).expect("ntff");
        assert_eq!(raw.words.len(), ren.words.len());
        for (a, b) in raw.words.iter().zip(&ren.words) {
            assert_eq!(a.pc, b.pc, "{} {} {}", a.sg, a.engine, a.opcode);
        }
        // Semaphore names come from def.json.
        assert!(ren.words.iter().any(|w| w.operands.contains(" (q")));
        assert!(!raw.words.iter().any(|w| w.operands.contains(" (q")));
    }

    #[test]
    fn engine_stats_leave_wait_words_out_of_active_time() {
        let recs = [
            ("sg00", Engine::Pe, "MATMUL", 0.0, 10.0),
            ("sg00", Engine::Pe, "EVENT_SEMAPHORE", 5.0, 20.0),
            ("sg00", Engine::Pe, "LDWEIGHTS", 8.0, 4.0),
        ];
        let s = engine_stats(recs);
        let pe = s[&("sg00".to_owned(), Engine::Pe)];
        assert_eq!(pe.count, 3);
        assert_eq!((pe.first, pe.last), (0.0, 25.0));
        assert_eq!((pe.busy, pe.active), (25.0, 12.0));
        assert_eq!((pe.instr, pe.sum), (14.0, 34.0));
    }
}
