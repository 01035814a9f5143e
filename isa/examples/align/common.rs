//! Shared by `examples/align_profiles.rs` and `tests/cayman_profiles.rs`: list the NEFF and
//! NTFF programs of the akc fixtures and compare them with AWS's profiler output.
#![allow(dead_code)]

use neuron_isa::cayman::render::{
    list_neff, token_agreement, Line, Names, Origin, ProgramFeatures, TriggerQueue,
};
use neuron_isa::cayman::{CaymanInstr, Namespace, Opcode, WORD};
use neuron_isa::ntff::Ntff;
use neuron_isa::Engine;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures"
    ))
}

/// The profiled kernels (`real-neff/akc-*.neff` with `real-profiles/<kernel>.*`).
pub fn kernels() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fixtures().join("real-neff"))
        .expect("real-neff dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("akc-") && n.ends_with(".neff"))
        .map(|n| n.trim_end_matches(".neff").to_owned())
        .collect();
    v.sort();
    v
}

/// Every NEFF fixture path.
pub fn all_neffs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join("real-neff"))
        .expect("real-neff dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "neff"))
        .collect();
    v.sort();
    v
}

/// One subgraph of a NEFF: its engine files, names and prologue features.
pub struct NeffSubgraph {
    pub name: String,
    pub names: Names,
    pub features: ProgramFeatures,
    /// The DMA-trigger queue of each engine whose JSON's `dma` blocks name one.
    pub queues: BTreeMap<Engine, TriggerQueue>,
    pub engines: Vec<(Engine, String, Vec<u8>)>,
}

impl NeffSubgraph {
    /// Engine `e`'s prologue features.
    pub fn features_of(&self, e: Engine) -> ProgramFeatures {
        ProgramFeatures {
            trigger_queue: self.queues.get(&e).copied(),
            ..self.features
        }
    }
}

pub fn read_neff(path: &Path) -> Vec<NeffSubgraph> {
    let bytes = std::fs::read(path).expect("read neff");
    let neff = neuron_neff::Neff::parse(&bytes).expect("parse neff");
    let kelf = neff.kelf().expect("kelf");
    let mut out = Vec::new();
    for g in &kelf.graphs {
        let dir = g.dir().to_owned();
        let def = neff.subgraph_def(&g.definition).expect("def.json");
        let queues: Vec<(&str, &[u32])> = def
            .dma_queue
            .iter()
            .map(|(n, q)| (n.as_str(), q.semaphore_set.as_slice()))
            .collect();
        let mut names = Names::with_queues(queues);
        for (n, v) in &def.var {
            if let Some(id) = v.var_id.and_then(|x| u8::try_from(x).ok()) {
                names.vars.insert(id, n.clone());
            }
        }
        let dge_table = def.var.values().any(|v| v.ty.as_str() == "dge-table");
        let mut act_tables = false;
        let mut engines = Vec::new();
        let mut queues = BTreeMap::new();
        for (i, (_, json, instr)) in def.engine_files().into_iter().enumerate() {
            let engine = Engine::from_index(i).expect("engine");
            // The queue the engine owns, by the rule `runtime::real::features` uses.
            let ej = json.and_then(|j| neff.engine_json(&dir, j).ok());
            if let Some(q) = ej.as_ref().and_then(|j| j.owned_queue(&def)) {
                let d = q.def.expect("queue in def.json");
                queues.insert(
                    engine,
                    TriggerQueue::new(d.num_queues, d.ty == "data", q.blocks),
                );
            }
            if engine == Engine::Act {
                act_tables = ej.as_ref().is_some_and(|j| j.has_activation_tables());
            }
            if let Some(f) = instr {
                let b = neff.subgraph_file(&dir, f).expect("engine file").to_vec();
                out_push(&mut engines, engine, format!("{dir}/{f}"), b);
            }
        }
        out.push(NeffSubgraph {
            name: g.name.clone(),
            names,
            features: ProgramFeatures {
                dge_table,
                act_tables,
                trigger_queue: None,
            },
            queues,
            engines,
        });
    }
    out
}

fn out_push(v: &mut Vec<(Engine, String, Vec<u8>)>, e: Engine, f: String, b: Vec<u8>) {
    v.push((e, f, b));
}

pub fn neff_listing(path: &Path) -> (Vec<Line>, BTreeMap<String, Names>) {
    let mut lines = Vec::new();
    let mut names = BTreeMap::new();
    for sg in read_neff(path) {
        for (e, _, b) in &sg.engines {
            lines.extend(list_neff(&sg.name, *e, b, sg.features_of(*e)));
        }
        names.insert(sg.name.clone(), sg.names);
    }
    (lines, names)
}

pub fn read_ntff(path: &Path) -> Ntff {
    Ntff::parse(&std::fs::read(path).expect("read ntff")).expect("parse ntff")
}

pub fn ntff_listing(nt: &Ntff) -> Vec<Line> {
    let mut lines = Vec::new();
    for p in &nt.programs {
        let base = p.neff_base().unwrap_or(0);
        let end = p.epilogue_start().unwrap_or(0);
        for (i, c) in p.bytes.chunks_exact(WORD).enumerate() {
            let mut w = [0u8; WORD];
            w.copy_from_slice(c);
            let pc = i as u32;
            lines.push(Line {
                subgraph: p.subgraph.clone(),
                engine: p.engine,
                pc,
                instr: CaymanInstr::decode(Namespace::Loaded, &w),
                origin: if pc >= base && pc < end {
                    Origin::Neff {
                        offset: (pc - base) * WORD as u32,
                    }
                } else {
                    Origin::Runtime
                },
            });
        }
    }
    lines
}

/// One profiled instruction.
#[derive(Debug, Clone)]
pub struct Rec {
    pub subgraph: String,
    pub engine: Engine,
    pub pc: u32,
    pub opcode: String,
    pub operands: String,
}

pub fn read_profile(path: &Path) -> Vec<Rec> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("read profile")).expect("json");
    v["instruction"]
        .as_array()
        .expect("instruction list")
        .iter()
        .map(|r| Rec {
            subgraph: r["subgraph"].as_str().unwrap_or("").to_owned(),
            engine: Engine::ALL
                .into_iter()
                .find(|e| e.profiler_name() == r["subgroup"].as_str().unwrap_or(""))
                .expect("engine name"),
            pc: r["pc"].as_u64().unwrap_or(0) as u32,
            opcode: r["opcode"].as_str().unwrap_or("").to_owned(),
            operands: r["operands"].as_str().unwrap_or("").to_owned(),
        })
        .collect()
}

/// Per-opcode agreement of a listing with the profile.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub records: usize,
    pub with_entry: usize,
    pub opcode_match: usize,
    pub tokens: usize,
    pub tokens_hit: usize,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.records += o.records;
        self.with_entry += o.with_entry;
        self.opcode_match += o.opcode_match;
        self.tokens += o.tokens;
        self.tokens_hit += o.tokens_hit;
    }
}

/// A record the listing does not reproduce: (record, our opcode name, our operands).
pub type Mismatch = (Rec, Option<String>, String);

/// Compare the records `select` keeps with the listing, per profiled opcode name.
/// Returns the tallies and the mismatching (record, our operands) pairs.
pub fn compare(
    lines: &[Line],
    names: &BTreeMap<String, Names>,
    recs: &[Rec],
    select: impl Fn(&Rec) -> bool,
) -> (BTreeMap<String, Tally>, Vec<Mismatch>) {
    let idx: BTreeMap<(&str, Engine, u32), &Line> = lines
        .iter()
        .map(|l| ((l.subgraph.as_str(), l.engine, l.pc), l))
        .collect();
    let empty = Names::default();
    let mut t: BTreeMap<String, Tally> = BTreeMap::new();
    let mut bad = Vec::new();
    for r in recs.iter().filter(|r| select(r)) {
        let e = t.entry(r.opcode.clone()).or_default();
        e.records += 1;
        let Some(l) = idx.get(&(r.subgraph.as_str(), r.engine, r.pc)) else {
            e.tokens += r.operands.split_whitespace().count();
            bad.push((r.clone(), None, String::new()));
            continue;
        };
        e.with_entry += 1;
        let name = l.instr.opcode.name();
        if name == r.opcode {
            e.opcode_match += 1;
        }
        let ours = l.instr.operands(names.get(&r.subgraph).unwrap_or(&empty));
        let (hit, tot) = token_agreement(&ours, &r.operands);
        e.tokens += tot;
        e.tokens_hit += hit;
        if hit < tot || name != r.opcode {
            bad.push((r.clone(), Some(name), ours));
        }
    }
    (t, bad)
}

/// Whether a profiled record is a NEFF word, by the NTFF's own segment table (independent
/// of the disassembler's prologue rule).
pub fn from_neff_word(nt: &Ntff) -> impl Fn(&Rec) -> bool + '_ {
    move |r: &Rec| {
        nt.program(&r.subgraph, r.engine).is_some_and(|p| {
            let (b, e) = (p.neff_base().unwrap_or(0), p.epilogue_start().unwrap_or(0));
            r.pc >= b && r.pc < e
        })
    }
}

/// Whether `op` is a known opcode (not `Unknown`).
pub fn known(op: Opcode) -> bool {
    op.is_known()
}

/// One 64-byte word from a slice of exactly [`WORD`] bytes.
pub fn word(c: &[u8]) -> [u8; WORD] {
    let mut w = [0u8; WORD];
    w.copy_from_slice(c);
    w
}

/// Every loaded word of every program in `nt` decodes to a known opcode and encodes back to
/// the same bytes; `label` names the file in failures. The number of words checked.
pub fn assert_ntff_roundtrips(label: &str, nt: &Ntff) -> usize {
    let mut total = 0;
    for p in &nt.programs {
        for (i, c) in p.bytes.chunks_exact(WORD).enumerate() {
            let w = word(c);
            let d = CaymanInstr::decode(Namespace::Loaded, &w);
            assert!(
                d.opcode.is_known(),
                "{label} {} {} pc {i}: {:#04x}",
                p.subgraph,
                p.engine,
                w[0]
            );
            assert_eq!(d.encode(), w, "{label} {} {} pc {i}", p.subgraph, p.engine);
            total += 1;
        }
    }
    total
}
