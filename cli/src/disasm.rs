//! `neuron-emu disasm`: disassemble the engine programs of a NEFF (trn2 "cayman" encoding),
//! or the loaded program captured in an NTFF profile, with pcs numbered as AWS's profiler
//! numbers them and operands in the profiler's syntax (`docs/isa/cayman.md`).

use clap::Args;
use neuron_isa::cayman::render::{list_neff, Line, Names, Origin};
use neuron_isa::cayman::{CaymanInstr, Namespace, WORD};
use neuron_isa::ntff::Ntff;
use neuron_isa::Engine;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The names a subgraph's `def.json` gives its DMA queues' semaphores and its variables.
pub(crate) fn def_names(def: &neuron_neff::SubgraphDef) -> Names {
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
    names
}

#[derive(Args, Debug)]
pub struct DisasmArgs {
    /// The NEFF file. With --ntff it is optional and only supplies names (semaphores,
    /// variables) and engine file names.
    pub file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Disassemble the program loaded on the device, as captured in this NTFF profile.
    #[arg(long, value_name = "FILE")]
    pub ntff: Option<PathBuf>,
    /// Disassemble the programs as this runtime loads the NEFF (on an emulated trn2 core 0):
    /// pseudo-instructions translated, DMA addresses relocated, runtime prologue/epilogue in
    /// AWS's shape (real trn2 words).
    #[arg(long, conflicts_with = "ntff")]
    pub loaded: bool,
}

/// One listed word with the NEFF engine file it belongs to.
struct Entry {
    line: Line,
    file: Option<String>,
}

struct SubgraphInfo {
    names: Names,
    files: BTreeMap<Engine, String>,
}

fn bad(p: &Path, e: impl std::fmt::Display) -> (u8, String) {
    (2, format!("{}: {e}", p.display()))
}

/// Read a NEFF: per subgraph, its listing (NEFF namespace, profiler pcs) and names.
/// A NEFF's listing and its per-subgraph names.
type NeffRead = (Vec<Entry>, BTreeMap<String, SubgraphInfo>);

fn read_neff(path: &Path) -> Result<NeffRead, (u8, String)> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    let neff = neuron_neff::Neff::parse(&bytes).map_err(|e| bad(path, e))?;
    let kelf = neff.kelf().map_err(|e| bad(path, e))?;
    let mut entries = Vec::new();
    let mut info = BTreeMap::new();
    for g in &kelf.graphs {
        let dir = g.dir().to_owned();
        let def = neff.subgraph_def(&g.definition).map_err(|e| bad(path, e))?;
        let names = def_names(&def);
        let mut files = BTreeMap::new();
        let mut progs = Vec::new();
        for (i, (_, json, instr)) in def.engine_files().into_iter().enumerate() {
            let Some(engine) = Engine::from_index(i) else {
                continue;
            };
            // The runtime's own rule, so the NEFF's pcs are the ones it loads at.
            let features = neuron_runtime::real::features(&neff, &def, &dir, engine, json);
            if let Some(f) = instr {
                let name = if dir.is_empty() {
                    f.to_owned()
                } else {
                    format!("{dir}/{f}")
                };
                let b = neff.subgraph_file(&dir, f).map_err(|e| bad(path, e))?;
                if b.len() % WORD != 0 {
                    return Err(bad(
                        path,
                        format!("{name}: {} bytes, not a multiple of {WORD}", b.len()),
                    ));
                }
                files.insert(engine, name.clone());
                progs.push((engine, features, name, b.to_vec()));
            }
        }
        for (engine, features, name, b) in progs {
            for line in list_neff(&g.name, engine, &b, features) {
                entries.push(Entry {
                    line,
                    file: Some(name.clone()),
                });
            }
        }
        info.insert(g.name.clone(), SubgraphInfo { names, files });
    }
    Ok((entries, info))
}

fn read_ntff(
    path: &Path,
    info: &BTreeMap<String, SubgraphInfo>,
) -> Result<Vec<Entry>, (u8, String)> {
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    let nt = Ntff::parse(&bytes).map_err(|e| bad(path, e))?;
    let mut out = Vec::new();
    for p in &nt.programs {
        let base = p.neff_base().unwrap_or(0);
        let end = p.epilogue_start().unwrap_or(0);
        let file = info
            .get(&p.subgraph)
            .and_then(|i| i.files.get(&p.engine))
            .cloned();
        for (i, instr) in CaymanInstr::decode_all(Namespace::Loaded, &p.bytes)
            .into_iter()
            .enumerate()
        {
            let pc = i as u32;
            let origin = if pc >= base && pc < end {
                Origin::Neff {
                    offset: (pc - base) * WORD as u32,
                }
            } else {
                Origin::Runtime
            };
            out.push(Entry {
                line: Line {
                    subgraph: p.subgraph.clone(),
                    engine: p.engine,
                    pc,
                    instr,
                    origin,
                },
                file: file.clone(),
            });
        }
    }
    Ok(out)
}

/// The programs as this runtime loads them, through the ABI of an emulated trn2.
fn read_loaded(
    path: &Path,
    info: &BTreeMap<String, SubgraphInfo>,
) -> Result<Vec<Entry>, (u8, String)> {
    use neuron_runtime::real::WordOrigin;
    let bytes = std::fs::read(path).map_err(|e| bad(path, e))?;
    let emu = neuron_emulator::Emulator::new(neuron_abi::arch::Arch::V3Trn2, 1);
    let f = emu
        .open(0, neuron_emulator::OpenOptions::default())
        .map_err(|e| (1, format!("open emulated /dev/neuron0: {e}")))?;
    let rt = neuron_runtime::Runtime::new(
        std::sync::Arc::new(f),
        0,
        neuron_runtime::Config::from_env(),
    )
    .map_err(|e| (1, e.to_string()))?;
    let image = rt
        .load_image(&bytes, 0)
        .map_err(|e| (1, format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    for p in &image {
        let file = info
            .get(&p.subgraph)
            .and_then(|i| i.files.get(&p.engine))
            .cloned();
        for (pc, (w, origin)) in p.words.iter().zip(&p.origins).enumerate() {
            // The runtime prologue/epilogue is real trn2 words too (AWS's shape).
            let origin = match origin {
                WordOrigin::Neff { index } => Origin::Neff {
                    offset: (*index * WORD) as u32,
                },
                WordOrigin::Runtime => Origin::Runtime,
            };
            out.push(Entry {
                line: Line {
                    subgraph: p.subgraph.clone(),
                    engine: p.engine,
                    pc: pc as u32,
                    instr: CaymanInstr::decode(Namespace::Loaded, w),
                    origin,
                },
                file: file.clone(),
            });
        }
    }
    Ok(out)
}

/// Run the disassembler. Errors carry the exit code (2: bad input, 1: failure).
pub fn run(a: &DisasmArgs) -> Result<(), (u8, String)> {
    let (neff_entries, info) = match &a.file {
        Some(f) => read_neff(f)?,
        None => (Vec::new(), BTreeMap::new()),
    };
    let entries = match (&a.ntff, &a.file) {
        (Some(n), _) => read_ntff(n, &info)?,
        (None, Some(f)) if a.loaded => read_loaded(f, &info)?,
        (None, Some(_)) => neff_entries,
        (None, None) => return Err((2, "disasm: give a NEFF file, --ntff FILE, or both".into())),
    };
    let stdout = std::io::stdout();
    let mut o = std::io::BufWriter::new(stdout.lock());
    let r = write_out(&mut o, a.json, &entries, &info);
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err((1, format!("disasm: write: {e}"))),
        Ok(()) => Ok(()),
    }
}

fn write_out(
    o: &mut impl Write,
    as_json: bool,
    entries: &[Entry],
    info: &BTreeMap<String, SubgraphInfo>,
) -> std::io::Result<()> {
    let empty = Names::default();
    let names = |sg: &str| info.get(sg).map(|i| &i.names).unwrap_or(&empty);
    let io = |e: std::io::Error| e;
    if as_json {
        let v: Vec<Value> = entries
            .iter()
            .map(|e| {
                let l = &e.line;
                let origin = match l.origin {
                    Origin::Neff { offset } => {
                        json!({"kind": "neff", "file": e.file, "offset": offset})
                    }
                    Origin::Runtime => json!({"kind": "runtime"}),
                };
                let (opcode, operands) =
                    (l.instr.opcode.name(), l.instr.operands(names(&l.subgraph)));
                json!({
                    "subgraph": l.subgraph,
                    "engine": l.engine.profiler_name(),
                    "pc": l.pc,
                    "opcode": opcode,
                    "operands": operands,
                    "origin": origin,
                    "raw": l.instr.hex(),
                })
            })
            .collect();
        serde_json::to_writer(&mut *o, &v)?;
        writeln!(o).map_err(io)?;
    } else {
        let mut cur: Option<(String, Engine)> = None;
        for e in entries {
            let l = &e.line;
            if cur.as_ref() != Some(&(l.subgraph.clone(), l.engine)) {
                cur = Some((l.subgraph.clone(), l.engine));
                writeln!(
                    o,
                    "\n== {} {} ({})",
                    l.subgraph,
                    l.engine.profiler_name(),
                    e.file.as_deref().unwrap_or("loaded program")
                )
                .map_err(io)?;
            }
            let origin = match l.origin {
                Origin::Neff { offset } => format!("+{offset:#06x}"),
                Origin::Runtime => "runtime".to_owned(),
            };
            let (opcode, operands) = (l.instr.opcode.name(), l.instr.operands(names(&l.subgraph)));
            writeln!(
                o,
                "{:>6} {:>8}  {:<28} {}\n{:>17}{}",
                l.pc,
                origin,
                opcode,
                operands,
                "; ",
                l.instr.hex()
            )
            .map_err(io)?;
        }
    }
    o.flush()
}
