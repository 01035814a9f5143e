//! Dumps every executed word of one or more NTFFs (`neuron_isa::ntff`) with the device
//! model's cost features (`calib::word_features`), one tab-separated line each: file,
//! subgraph, engine, pc, opcode, start ns, duration ns, header wait, elements per partition,
//! fp32 input, access patterns, fields, operands. `service_fit.py` fits
//! `calib::TRN2_SERVICE` from it (`docs/timing.md`).
//!
//! `cargo run --release -p neuron-devmodel --example ntffdump -- FILE.ntff... > words.tsv`

use neuron_isa::cayman::render::Names;
use neuron_isa::cayman::{CaymanInstr, Namespace, Value, WORD};
use neuron_isa::ntff::Ntff;

fn dump(path: &str) -> Result<(), String> {
    let b = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let nt = Ntff::parse(&b).map_err(|e| format!("{path}: {e}"))?;
    let file = path.rsplit('/').next().unwrap_or(path);
    let origin = nt.window.map(|w| w.start_ps).unwrap_or(0);
    let names = Names::default();
    for x in &nt.executed().executed {
        let Some(p) = nt.program(&x.subgraph, x.engine) else {
            continue;
        };
        let at = x.pc as usize * WORD;
        let Some(w) = p.bytes.get(at..at + WORD).and_then(|w| w.try_into().ok()) else {
            continue;
        };
        let ci = CaymanInstr::decode(Namespace::Loaded, w);
        let (elems, wide) = neuron_devmodel::calib::word_features(&ci);
        let aps: Vec<String> = ["dst", "src", "src0", "src1"]
            .iter()
            .filter_map(|n| {
                let a = ci.ap(n)?;
                let d = (a.dims as usize).min(4);
                Some(format!(
                    "{n}:{}:{:?}:{:?}",
                    a.dims,
                    &a.num[..d],
                    &a.step[..d]
                ))
            })
            .collect();
        let fields: Vec<String> = ci
            .fields
            .iter()
            .filter(|f| !matches!(f.value, Value::Ap(_)))
            .map(|f| format!("{}={:?}", f.spec.name, f.value))
            .collect();
        println!(
            "{file}\t{}\t{:?}\t{}\t{}\t{}\t{}\t{}\t{elems}\t{wide}\t{}\t{}\t{}",
            x.subgraph,
            x.engine,
            x.pc,
            ci.opcode.name(),
            x.start_ps.saturating_sub(origin) as f64 / 1e3,
            x.end_ps.saturating_sub(x.start_ps) as f64 / 1e3,
            ci.header.wait_cond,
            aps.join(" "),
            fields.join(" "),
            ci.operands(&names)
        );
    }
    Ok(())
}

fn main() {
    for path in std::env::args().skip(1) {
        if let Err(e) = dump(&path) {
            eprintln!("ntffdump: {e}");
            std::process::exit(1);
        }
    }
}
