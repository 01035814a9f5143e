//! Acceptance 1 and 2: the decoded programs against AWS's profiler output for the six
//! profiled akc kernels. The per-opcode table is printed by
//! `cargo run -p neuron-isa --example align_profiles`.

#[path = "../examples/align/common.rs"]
mod common;

use common::*;
use std::collections::BTreeMap;

fn sum(t: &BTreeMap<String, Tally>) -> Tally {
    let mut a = Tally::default();
    for x in t.values() {
        a.add(x);
    }
    a
}

/// Acceptance 1: every profiled instruction from a NEFF word has a disassembly entry at the
/// same (subgraph, engine, pc) with the same opcode, and ≥ 95% of the profiler's operand
/// tokens are reproduced. "From a NEFF word" is decided by the NTFF's own segment table.
#[test]
fn neff_disassembly_matches_profiles() {
    let fx = fixtures();
    let mut all = Tally::default();
    for k in kernels() {
        let (lines, names) = neff_listing(&fx.join(format!("real-neff/{k}.neff")));
        let nt = read_ntff(&fx.join(format!("real-profiles/{k}.ntff")));
        let recs = read_profile(&fx.join(format!("real-profiles/{k}.profile.json")));
        let (t, bad) = compare(&lines, &names, &recs, from_neff_word(&nt));
        let s = sum(&t);
        assert_eq!(s.with_entry, s.records, "{k}: records without an entry");
        assert_eq!(
            s.opcode_match,
            s.records,
            "{k}: opcode mismatches: {:?}",
            bad.iter()
                .filter(|b| b.1.as_deref() != Some(b.0.opcode.as_str()))
                .take(5)
                .collect::<Vec<_>>()
        );
        all.add(&s);
    }
    assert_eq!(all.records, 1929, "NEFF-word records in the six profiles");
    let pct = 100.0 * all.tokens_hit as f64 / all.tokens as f64;
    eprintln!(
        "NEFF operand tokens reproduced: {}/{} = {pct:.2}%",
        all.tokens_hit, all.tokens
    );
    assert!(pct >= 95.0, "operand token agreement {pct:.2}% < 95%");
}

/// Acceptance 2: the loaded program of each NTFF decodes completely (every word a known
/// opcode) and agrees with the profile's opcode at every profiled pc.
#[test]
fn ntff_disassembly_matches_profiles() {
    let fx = fixtures();
    for k in kernels() {
        let nt = read_ntff(&fx.join(format!("real-profiles/{k}.ntff")));
        let lines = ntff_listing(&nt);
        assert!(lines.iter().all(|l| l.instr.opcode.is_known()), "{k}");
        let recs = read_profile(&fx.join(format!("real-profiles/{k}.profile.json")));
        let (t, bad) = compare(&lines, &BTreeMap::new(), &recs, |_| true);
        let s = sum(&t);
        assert_eq!(s.records, recs.len());
        assert_eq!(
            s.with_entry, s.records,
            "{k}: records without a loaded word"
        );
        assert_eq!(
            s.opcode_match,
            s.records,
            "{k}: {:?}",
            bad.iter()
                .filter(|b| b.1.as_deref() != Some(b.0.opcode.as_str()))
                .take(5)
                .collect::<Vec<_>>()
        );
    }
}

/// The prologue rule the NEFF disassembler numbers pcs with agrees with the NTFF's segment
/// table on all 60 programs (6 kernels x 2 subgraphs x 5 engines), and the NEFF words sit in
/// the loaded program at that base, identical except for the pseudo-opcode byte and the
/// relocated var-relative DMA addresses.
#[test]
fn prologue_rule_and_load_translation() {
    use neuron_isa::cayman::render::neff_base;
    use neuron_isa::cayman::{CaymanInstr, DmaAddr, Namespace, Opcode, WORD};
    let fx = fixtures();
    let mut programs = 0;
    for k in kernels() {
        let nt = read_ntff(&fx.join(format!("real-profiles/{k}.ntff")));
        for sg in read_neff(&fx.join(format!("real-neff/{k}.neff"))) {
            for (e, file, bin) in &sg.engines {
                let p = nt.program(&sg.name, *e).expect("program");
                let base = p.neff_base().expect("segments");
                assert_eq!(
                    neff_base(*e, sg.features_of(*e)),
                    base,
                    "{k} {} {e}",
                    sg.name
                );
                let n = bin.len() / WORD;
                assert_eq!(p.epilogue_start(), Some(base + n as u32), "{k} {file}");
                for i in 0..n {
                    let nw: [u8; WORD] = bin[i * WORD..][..WORD].try_into().expect("word");
                    let lw: [u8; WORD] = p.bytes[(base as usize + i) * WORD..][..WORD]
                        .try_into()
                        .expect("word");
                    let a = CaymanInstr::decode(Namespace::Neff, &nw);
                    let b = CaymanInstr::decode(Namespace::Loaded, &lw);
                    assert_eq!(a.opcode, b.opcode, "{k} {file} word {i}");
                    // Translate: namespace, and var-relative addresses → the loaded ones.
                    let mut t = a.with_namespace(Namespace::Loaded);
                    for f in &mut t.fields {
                        if let neuron_isa::cayman::Value::Addr(DmaAddr::VarRelative { .. }) =
                            f.value
                        {
                            let loaded = b.get(f.spec.name).expect("field").clone();
                            assert!(
                                matches!(
                                    loaded,
                                    neuron_isa::cayman::Value::Addr(DmaAddr::Absolute(_))
                                ),
                                "{k} {file} word {i}: var-relative must become absolute"
                            );
                            f.value = loaded;
                        }
                    }
                    assert_eq!(t.encode(), lw, "{k} {file} word {i} ({:?})", a.opcode);
                    if a.opcode != Opcode::DmaDirect2d {
                        assert_eq!(nw[1..], lw[1..], "{k} {file} word {i}");
                    }
                }
                programs += 1;
            }
        }
    }
    assert_eq!(programs, 60);
}
