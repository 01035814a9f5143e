//! Fuzz the strict NEFF reader and every typed view.
//!
//! Invariants: no panic; bounded time/memory (small limits below); a
//! successful parse is deterministic and survives a writer round trip with
//! identical members (differential check against our own writer).
#![no_main]

use libfuzzer_sys::fuzz_target;
use neuron_neff::{Limits, Neff, NeffWriter, ParseOptions};

fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions {
        limits: Limits {
            max_inflated_bytes: 64 << 20,
            max_members: 1024,
            max_member_bytes: 16 << 20,
        },
        validate_hash: data.first().is_some_and(|b| b & 1 == 1),
    };
    let Ok(neff) = Neff::parse_with(data, &opts) else {
        return;
    };

    // Typed views: errors are fine, panics are not.
    let _ = neff.neff_json().map(|j| (j.inputs(), j.kelf_member()));
    let _ = neff.info();
    let _ = neff.validate_references();
    if let Ok(kelf) = neff.kelf() {
        for g in &kelf.graphs {
            let sg = g.dir();
            if let Ok(def) = neff.subgraph_def(&g.definition) {
                for (_, json, instr) in def.engine_files() {
                    if let Some(j) = json {
                        let _ = neff.engine_json(sg, j);
                    }
                    if let Some(i) = instr {
                        let _ = neff.subgraph_file(sg, i);
                    }
                }
            }
            let _ = neff.tensor_map(sg);
        }
    }
    for (path, _) in neff.members() {
        if path.ends_with(".npy") {
            if let Ok(a) = neff.npy(path) {
                assert_eq!(neuron_neff::NpyArray::parse(&a.to_bytes()).ok(), Some(a));
            }
        }
    }

    // Determinism.
    let again = Neff::parse_with(data, &opts).expect("second parse of accepted input");
    assert!(again.members().eq(neff.members()));
    assert_eq!(again.header(), neff.header());

    // Differential: what we accepted, our writer re-packs and we re-read identically.
    let mut w = NeffWriter::new("fuzz");
    w.header = neff.header().clone();
    for (p, b) in neff.members() {
        w.add_member(p, b.to_vec());
    }
    if let Ok(bytes) = w.to_bytes() {
        let back = Neff::parse(&bytes).expect("writer output parses");
        assert!(back.members().eq(neff.members()));
    }
});
