//! `neuron-emu neff ...`: NEFF container tools, and `neuron-emu bench neff`.
//!
//! `neff inspect FILE [--json]` reads a NEFF with the strict reader
//! ([`Neff::parse`]), walks every typed view (neff.json, info.json, the kelf,
//! each subgraph's def.json, engine JSONs, instruction files and
//! tensor_map.json) plus [`Neff::validate_references`], and prints a summary.
//! The JSON form is documented in `docs/neff.md` ("inspect JSON",
//! `schema_version` 1). Exit codes: 2 when the file cannot be read, 1 when it
//! is not a valid NEFF (the message is the [`NeffError`] text).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use neuron_neff::{
    feature_names, EngineJson, EngineKind, InfoJson, Kelf, KelfGraph, Neff, NeffError, NeffJson,
    SubgraphDef, TensorMap, VarType, HEADER_SIZE, TENSOR_MAP_JSON,
};
use serde_json::{json, Value};

/// Version of the `neff inspect --json` schema (docs/neff.md).
pub const SCHEMA_VERSION: u32 = 1;

/// Bytes per engine instruction slot (every real engine `.bin` is a multiple of 64).
const INSTR_BYTES: usize = 64;

#[derive(Subcommand, Debug)]
pub enum NeffCmd {
    /// Show a NEFF's header, target, subgraphs, tensors, engines, DMA queues and members.
    Inspect(InspectArgs),
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The NEFF file.
    pub file: std::path::PathBuf,
    /// Print stable JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run a `neff` subcommand. Errors carry the exit code (2: bad input, 1: failure).
pub fn run(cmd: &NeffCmd) -> Result<(), (u8, String)> {
    match cmd {
        NeffCmd::Inspect(a) => inspect(a),
    }
}

fn read_file(file: &Path) -> Result<Vec<u8>, (u8, String)> {
    std::fs::read(file).map_err(|e| (2, format!("cannot read {}: {e}", file.display())))
}

/// The error text with its cause chain (`NeffError` keeps causes as `source`).
fn neff_failure(file: &Path, e: &NeffError) -> (u8, String) {
    let mut msg = format!("{}: {e}", file.display());
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    (1, msg)
}

fn inspect(a: &InspectArgs) -> Result<(), (u8, String)> {
    let bytes = read_file(&a.file)?;
    let fail = |e: NeffError| neff_failure(&a.file, &e);
    let neff = Neff::parse(&bytes).map_err(fail)?;
    let views = Views::load(&neff).map_err(fail)?;
    neff.validate_references().map_err(fail)?;
    check_instruction_sizes(&views).map_err(|m| (1, format!("{}: {m}", a.file.display())))?;
    let report = report(&a.file, bytes.len(), &neff, &views);
    if a.json {
        let s = serde_json::to_string_pretty(&report)
            .map_err(|e| (1, format!("cannot serialize the report: {e}")))?;
        println!("{s}");
    } else {
        print!("{}", render_text(&report));
    }
    Ok(())
}

/// The loader refuses an engine instruction file that is not whole 64-byte instructions;
/// so does inspect, with the loader's wording.
fn check_instruction_sizes(views: &Views) -> Result<(), String> {
    for sv in &views.subgraphs {
        for e in &sv.engines {
            if let (Some(name), Some(n)) = (&e.instr, e.instr_bytes) {
                if n % INSTR_BYTES != 0 {
                    return Err(format!(
                        "{} engine {:?}: instruction file {name} is {n} bytes, not a multiple of {INSTR_BYTES}",
                        sv.graph.dir(),
                        e.kind
                    ));
                }
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ typed views

/// One engine of a subgraph, as def.json names it.
struct EngineView {
    kind: EngineKind,
    json: Option<String>,
    /// Parsed engine JSON (parsed to validate it; inspect reports only file names).
    _engine: Option<EngineJson>,
    instr: Option<String>,
    instr_bytes: Option<usize>,
}

struct SubgraphView {
    graph: KelfGraph,
    def: SubgraphDef,
    engines: Vec<EngineView>,
    tensor_map: Option<TensorMap>,
}

/// Every typed view of a NEFF, parsed. Optional members (`neff.json`,
/// `info.json`, `sgNN/tensor_map.json`) may be absent; when present they must parse.
struct Views {
    neff_json: Option<NeffJson>,
    info: Option<InfoJson>,
    kelf_path: String,
    kelf: Kelf,
    subgraphs: Vec<SubgraphView>,
}

impl Views {
    fn load(neff: &Neff) -> Result<Views, NeffError> {
        // Required, as the runtime's loader requires it (the model's input signature).
        let neff_json = Some(neff.neff_json()?);
        let info = neff.info()?;
        let kelf_path = neff.kelf_path()?;
        let kelf = neff.kelf()?;
        let mut subgraphs = Vec::with_capacity(kelf.graphs.len());
        for g in &kelf.graphs {
            let def = neff.subgraph_def(&g.definition)?;
            let sg = g.dir();
            let mut engines = Vec::new();
            for (kind, json, instr) in def.engine_files() {
                if json.is_none() && instr.is_none() {
                    continue;
                }
                let engine = json.map(|j| neff.engine_json(sg, j)).transpose()?;
                let instr_bytes = instr
                    .map(|i| neff.subgraph_file(sg, i).map(<[u8]>::len))
                    .transpose()?;
                engines.push(EngineView {
                    kind,
                    json: json.map(str::to_owned),
                    _engine: engine,
                    instr: instr.map(str::to_owned),
                    instr_bytes,
                });
            }
            let tm_path = if sg.is_empty() {
                TENSOR_MAP_JSON.to_owned()
            } else {
                format!("{sg}/{TENSOR_MAP_JSON}")
            };
            let tensor_map = if neff.contains(&tm_path) {
                Some(neff.tensor_map(sg)?)
            } else {
                None
            };
            subgraphs.push(SubgraphView {
                graph: g.clone(),
                def,
                engines,
                tensor_map,
            });
        }
        Ok(Views {
            neff_json,
            info,
            kelf_path,
            kelf,
            subgraphs,
        })
    }
}

// ------------------------------------------------------------------ the report (JSON)

fn dtype_size(dtype: &str) -> Option<u64> {
    neuron_isa::Dtype::from_name(dtype).map(|d| d.size() as u64)
}

fn computed_size(dtype: &str, shape: &[u64]) -> Option<u64> {
    shape
        .iter()
        .try_fold(dtype_size(dtype)?, |acc, &d| acc.checked_mul(d))
}

/// The first subgraph var named `name` of type `ty`.
fn find_var<'a>(views: &'a Views, name: &str, ty: &VarType) -> Option<&'a neuron_neff::VarDef> {
    views
        .subgraphs
        .iter()
        .find_map(|s| s.def.var.get(name).filter(|v| &v.ty == ty))
}

/// `(dtype, shape)` of a tensor from the first tensor_map.json that lists it
/// (`tf_shape`, else `sim_shape`).
fn tensor_map_entry(views: &Views, name: &str) -> (Option<String>, Option<Vec<u64>>) {
    for s in &views.subgraphs {
        if let Some(t) = s.tensor_map.as_ref().and_then(|m| m.get(name)) {
            let shape = t.tf_shape.clone().or_else(|| t.sim_shape.clone());
            return (Some(t.dtype.clone()), shape);
        }
    }
    (None, None)
}

fn tensor_json(
    name: &str,
    dtype: Option<String>,
    shape: Option<Vec<u64>>,
    var_size: Option<u64>,
) -> Value {
    let size = var_size.or_else(|| computed_size(dtype.as_deref()?, shape.as_deref()?));
    json!({ "name": name, "dtype": dtype, "shape": shape, "size": size })
}

/// Inputs: `neff.json` `metadata.signatures.default.inputs` (id order); when
/// that is absent or empty, the def.json `input` vars with tensor_map.json types.
fn inputs_json(views: &Views) -> Vec<Value> {
    let sig = views
        .neff_json
        .as_ref()
        .map(NeffJson::inputs)
        .unwrap_or_default();
    if !sig.is_empty() {
        return sig
            .into_iter()
            .map(|(name, dtype, shape)| {
                let size = find_var(views, &name, &VarType::Input).and_then(|v| v.size);
                tensor_json(&name, Some(dtype), Some(shape), size)
            })
            .collect();
    }
    io_vars(views, &VarType::Input)
}

/// The def.json vars of type `ty` across subgraphs (first occurrence of each
/// name, var_id order), dtype/shape from tensor_map.json.
fn io_vars(views: &Views, ty: &VarType) -> Vec<Value> {
    let mut seen = Vec::<&str>::new();
    let mut out = Vec::new();
    for s in &views.subgraphs {
        for (name, v) in s.def.vars_of_type(ty) {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let (dtype, shape) = tensor_map_entry(views, name);
            out.push(tensor_json(name, dtype, shape, v.size));
        }
    }
    out
}

const VAR_TYPE_ORDER: [&str; 8] = [
    "input",
    "output",
    "file",
    "virtual",
    "state-buffer",
    "dge-table",
    "tmp-buf",
    "pointer",
];

fn vars_json(def: &SubgraphDef) -> Vec<Value> {
    let mut types: Vec<VarType> = VAR_TYPE_ORDER
        .iter()
        .map(|t| VarType::from_name(t))
        .collect();
    let mut others: Vec<String> = def
        .var
        .values()
        .filter_map(|v| match &v.ty {
            VarType::Other(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    others.sort();
    others.dedup();
    types.extend(others.iter().map(|s| VarType::Other(s.clone())));
    types
        .iter()
        .filter_map(|ty| {
            let vars = def.vars_of_type(ty);
            if vars.is_empty() {
                return None;
            }
            let bytes: u64 = vars.iter().filter_map(|(_, v)| v.size).sum();
            let list: Vec<Value> = vars
                .iter()
                .map(|(n, v)| json!({ "name": n, "var_id": v.var_id, "size": v.size }))
                .collect();
            Some(json!({
                "type": ty.as_str(),
                "count": vars.len(),
                "bytes": bytes,
                "vars": list,
            }))
        })
        .collect()
}

fn subgraph_json(s: &SubgraphView) -> Value {
    let engines: Vec<Value> = s
        .engines
        .iter()
        .map(|e| {
            json!({
                "engine": e.kind.def_key(),
                "role": e.kind.role(),
                "json": e.json,
                "instr": e.instr,
                "instr_bytes": e.instr_bytes,
                "instructions": e.instr_bytes.map(|b| b / INSTR_BYTES),
            })
        })
        .collect();
    let queues: Vec<Value> = s
        .def
        .dma_queue
        .iter()
        .map(|(name, q)| {
            json!({
                "name": name,
                "type": q.ty,
                "owner": q.owner,
                "num_queues": q.num_queues,
                "semaphore_set": q.semaphore_set,
            })
        })
        .collect();
    json!({
        "name": s.graph.name,
        "definition": s.graph.definition,
        "engines": engines,
        "dma_queues": queues,
        "vars": vars_json(&s.def),
        "runtime_event_count": s.def.runtime_event_count,
        "runtime_semaphore_count": s.def.runtime_semaphore_count,
        "neff_features": s.def.neff_features,
    })
}

fn report(file: &Path, file_size: usize, neff: &Neff, views: &Views) -> Value {
    let h = neff.header();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let tpb_len = h
        .tpb_per_node
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |i| i + 1);
    let header = json!({
        "pkg_version": h.pkg_version,
        "hash_algorithm": h.hash_algorithm().ok().map(|a| a.to_string()),
        "header_size": h.header_size,
        "data_size": h.data_size,
        "version_major": h.version_major,
        "version_minor": h.version_minor,
        "build_version": h.build_version_str(),
        "name": h.name_str(),
        "uuid": h.uuid_string(),
        "hash": hex(&h.hash),
        "num_tpb": h.num_tpb,
        "requested_tpb_count": h.requested_tpb_count,
        "tpb_per_node": h.tpb_per_node[..tpb_len].to_vec(),
        "feature_bits": format!("{:#018x}", h.feature_bits),
        "features": feature_names(h.feature_bits),
        "lnc_size": h.lnc_size,
    });
    let info = views.info.as_ref().map(|i| {
        json!({
            "tool_version": i.tool_version,
            "name": i.name,
            "num_tpb": i.num_tpb,
        })
    });
    let members: Vec<Value> = neff
        .members()
        .map(|(p, b)| json!({ "path": p, "size": b.len() }))
        .collect();
    let member_bytes: usize = neff.members().map(|(_, b)| b.len()).sum();
    json!({
        "schema_version": SCHEMA_VERSION,
        "file": { "path": file.display().to_string(), "size": file_size },
        "header": header,
        "info": info,
        "kelf": {
            "path": views.kelf_path,
            "version": views.kelf.version,
            "target": views.kelf.target,
        },
        "inputs": inputs_json(views),
        "outputs": io_vars(views, &VarType::Output),
        "subgraphs": views.subgraphs.iter().map(subgraph_json).collect::<Vec<_>>(),
        "member_count": neff.member_count(),
        "member_bytes": member_bytes,
        "members": members,
    })
}

// ------------------------------------------------------------------ text rendering

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn shape_str(v: &Value) -> String {
    match v.as_array() {
        None => "-".to_owned(),
        Some(a) => format!("[{}]", a.iter().map(s).collect::<Vec<_>>().join(", ")),
    }
}

/// `[8, 9, 10, 12]` → `8-10,12`.
fn ranges(v: &Value) -> String {
    let nums: Vec<u64> = arr(v).iter().filter_map(Value::as_u64).collect();
    if nums.is_empty() {
        return "-".to_owned();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", nums[i], nums[j])
        } else {
            nums[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

fn render_text(r: &Value) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let h = &r["header"];
    let _ = writeln!(
        o,
        "file        {} ({} bytes)",
        s(&r["file"]["path"]),
        s(&r["file"]["size"])
    );
    let _ = writeln!(o, "header");
    let _ = writeln!(
        o,
        "  pkg_version   {} (hash {})",
        s(&h["pkg_version"]),
        match &h["hash_algorithm"] {
            Value::Null => "algorithm: none".to_owned(),
            a => format!("algorithm: {}", s(a)),
        }
    );
    let _ = writeln!(o, "  header_size   {}", s(&h["header_size"]));
    let _ = writeln!(o, "  data_size     {}", s(&h["data_size"]));
    let _ = writeln!(
        o,
        "  version       {}.{}",
        s(&h["version_major"]),
        s(&h["version_minor"])
    );
    let _ = writeln!(o, "  build_version {:?}", s(&h["build_version"]));
    let _ = writeln!(o, "  name          {} (internal name)", s(&h["name"]));
    let _ = writeln!(o, "  uuid          {}", s(&h["uuid"]));
    let _ = writeln!(o, "  hash          {}", s(&h["hash"]));
    let _ = writeln!(
        o,
        "  num_tpb       {} (requested {}, tpb_per_node {})",
        s(&h["num_tpb"]),
        s(&h["requested_tpb_count"]),
        shape_str(&h["tpb_per_node"])
    );
    let _ = writeln!(o, "  lnc_size      {}", s(&h["lnc_size"]));
    let feats: Vec<String> = arr(&h["features"]).iter().map(s).collect();
    let _ = writeln!(
        o,
        "  feature_bits  {}{}",
        s(&h["feature_bits"]),
        if feats.is_empty() {
            String::new()
        } else {
            format!(" ({})", feats.join(", "))
        }
    );
    if let Some(info) = r["info"].as_object() {
        let _ = writeln!(o, "compiler    {} (info.json)", s(&info["tool_version"]));
    }
    let k = &r["kelf"];
    let sgs: Vec<String> = arr(&r["subgraphs"]).iter().map(|g| s(&g["name"])).collect();
    let _ = writeln!(
        o,
        "target      {} ({} version {}; {} subgraph{}: {})",
        s(&k["target"]),
        s(&k["path"]),
        s(&k["version"]),
        sgs.len(),
        if sgs.len() == 1 { "" } else { "s" },
        sgs.join(", ")
    );
    for (title, key) in [("inputs", "inputs"), ("outputs", "outputs")] {
        let list = arr(&r[key]);
        let _ = writeln!(o, "{title:<11} {}", list.len());
        for t in list {
            let _ = writeln!(
                o,
                "  {:<16} {:<10} {:<18} {} bytes",
                s(&t["name"]),
                s(&t["dtype"]),
                shape_str(&t["shape"]),
                s(&t["size"])
            );
        }
    }
    for g in arr(&r["subgraphs"]) {
        let _ = writeln!(o, "subgraph {} ({})", s(&g["name"]), s(&g["definition"]));
        let _ = writeln!(o, "  engines");
        for e in arr(&g["engines"]) {
            let _ = writeln!(
                o,
                "    {:<5} {:<7} {:<16} {:<16} {:>8} bytes {:>7} instructions",
                s(&e["engine"]),
                s(&e["role"]),
                s(&e["json"]),
                s(&e["instr"]),
                s(&e["instr_bytes"]),
                s(&e["instructions"])
            );
        }
        let queues = arr(&g["dma_queues"]);
        let _ = writeln!(o, "  dma queues  {}", queues.len());
        for q in queues {
            let _ = writeln!(
                o,
                "    {:<20} type {:<8} owner {:<5} num_queues {:<3} semaphores {}",
                s(&q["name"]),
                s(&q["type"]),
                s(&q["owner"]),
                s(&q["num_queues"]),
                ranges(&q["semaphore_set"])
            );
        }
        let _ = writeln!(o, "  vars");
        for t in arr(&g["vars"]) {
            let list: Vec<String> = arr(&t["vars"])
                .iter()
                .map(|v| match &v["size"] {
                    Value::Null => s(&v["name"]),
                    size => format!("{} ({})", s(&v["name"]), s(size)),
                })
                .collect();
            let _ = writeln!(
                o,
                "    {:<13} {:>3} × {:>10} bytes: {}",
                s(&t["type"]),
                s(&t["count"]),
                s(&t["bytes"]),
                list.join(", ")
            );
        }
        let nf: Vec<String> = arr(&g["neff_features"]).iter().map(s).collect();
        let _ = writeln!(
            o,
            "  runtime events {}, semaphores {}; neff_features [{}]",
            s(&g["runtime_event_count"]),
            s(&g["runtime_semaphore_count"]),
            nf.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "members     {} ({} bytes in all)",
        s(&r["member_count"]),
        s(&r["member_bytes"])
    );
    for m in arr(&r["members"]) {
        let _ = writeln!(o, "  {:>10}  {}", s(&m["size"]), s(&m["path"]));
    }
    o
}

// ------------------------------------------------------------------ bench

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2
    }
}

fn bare_inflate(payload: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(payload).read_to_end(&mut out)?;
    Ok(out)
}

fn parse_and_views(bytes: &[u8]) -> Result<(Neff, Views), NeffError> {
    let neff = Neff::parse(bytes)?;
    let views = Views::load(&neff)?;
    Ok((neff, views))
}

/// `neuron-emu bench neff FILE`: load + parse vs a bare inflate of the same payload.
///
/// Each of `repeat` rounds times (a) a bare `flate2::read::GzDecoder` of
/// `bytes[1024..1024+data_size]` read to the end into a `Vec`, and (b)
/// [`Neff::parse`] plus every typed view (neff.json, info.json, kelf, each
/// def.json, engine JSON, instruction file lookup, tensor_map.json). One
/// untimed warm-up round comes first. Prints the medians and their ratio.
pub fn bench(file: &Path, repeat: u32) -> Result<(), (u8, String)> {
    if repeat == 0 {
        return Err((2, "--repeat must be positive".to_owned()));
    }
    let t_read = Instant::now();
    let bytes = read_file(file)?;
    let read_time = t_read.elapsed();
    let fail = |e: NeffError| neff_failure(file, &e);
    // Validates the file and gives data_size; also the warm-up round.
    let (neff, views) = parse_and_views(&bytes).map_err(fail)?;
    let data_size = neff.header().data_size as usize;
    let payload = &bytes[HEADER_SIZE..HEADER_SIZE + data_size];
    let inflated = bare_inflate(payload)
        .map_err(|e| (1, format!("{}: bare inflate failed: {e}", file.display())))?
        .len();
    let members = neff.member_count();
    let subgraphs = views.subgraphs.len();
    drop((neff, views));

    let mut t_inflate = Vec::with_capacity(repeat as usize);
    let mut t_parse = Vec::with_capacity(repeat as usize);
    for _ in 0..repeat {
        let t = Instant::now();
        let v = bare_inflate(payload)
            .map_err(|e| (1, format!("{}: bare inflate failed: {e}", file.display())))?;
        t_inflate.push(t.elapsed());
        std::hint::black_box(&v);
        drop(v);

        let t = Instant::now();
        let r = parse_and_views(&bytes).map_err(fail)?;
        t_parse.push(t.elapsed());
        std::hint::black_box(&r);
        drop(r);
    }
    let (min_i, min_p) = (
        t_inflate.iter().min().copied().unwrap_or_default(),
        t_parse.iter().min().copied().unwrap_or_default(),
    );
    let med_i = median(&mut t_inflate);
    let med_p = median(&mut t_parse);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mibs = |d: Duration| inflated as f64 / d.as_secs_f64() / (1 << 20) as f64;
    println!(
        "bench neff: {} ({} bytes; gzip payload {} bytes -> {} bytes inflated; {} members, {} subgraphs), {} timed rounds",
        file.display(),
        bytes.len(),
        data_size,
        inflated,
        members,
        subgraphs,
        repeat
    );
    println!(
        "  file read (once, not in the ratio)  {:>9.3} ms",
        ms(read_time)
    );
    println!(
        "  bare inflate (flate2 GzDecoder)     {:>9.3} ms median ({:.3} min)  {:>7.1} MiB/s inflated",
        ms(med_i),
        ms(min_i),
        mibs(med_i)
    );
    println!(
        "  Neff::parse + all typed views       {:>9.3} ms median ({:.3} min)  {:>7.1} MiB/s inflated",
        ms(med_p),
        ms(min_p),
        mibs(med_p)
    );
    println!(
        "  ratio parse/inflate                 {:>9.3}",
        med_p.as_secs_f64() / med_i.as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compress_runs() {
        assert_eq!(ranges(&json!([8, 9, 10, 12, 14, 15])), "8-10,12,14-15");
        assert_eq!(ranges(&json!([])), "-");
        assert_eq!(ranges(&json!([3])), "3");
    }

    #[test]
    fn computed_sizes() {
        assert_eq!(computed_size("float16", &[128, 256]), Some(65536));
        assert_eq!(computed_size("bfloat16", &[]), Some(2));
        assert_eq!(computed_size("mystery", &[2]), None);
        assert_eq!(computed_size("float32", &[u64::MAX, 2]), None);
    }

    #[test]
    fn median_of_even_and_odd() {
        let d = Duration::from_millis;
        assert_eq!(median(&mut [d(3), d(1), d(2)]), d(2));
        assert_eq!(
            median(&mut [d(4), d(1), d(2), d(3)]),
            Duration::from_micros(2500)
        );
    }
}
