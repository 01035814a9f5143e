//! Real NEFFs as this runtime loads them, against the program AWS's runtime loaded (captured in
//! each profile's NTFF): every NEFF word sits at the same pc and equals the loaded word except
//! in the absolute DMA addresses the runtime chose.

use neuron_e2e_tests::{repo_path, setup};
use neuron_isa::cayman::{CaymanInstr, DmaAddr, Namespace, Value};
use neuron_isa::ntff::Ntff;
use neuron_runtime::real::WordOrigin;
use std::time::Duration;

/// A loaded word with its absolute DMA addresses zeroed.
fn masked(w: &[u8; 64]) -> [u8; 64] {
    let mut d = CaymanInstr::decode(Namespace::Loaded, w);
    for f in d.fields.iter_mut() {
        if let Value::Addr(DmaAddr::Absolute(_)) = f.value {
            f.value = Value::Addr(DmaAddr::Absolute(0));
        }
    }
    d.encode()
}

#[test]
fn translated_programs_match_the_ntff_except_runtime_chosen_addresses() {
    let dir = repo_path("../shared/fixtures/real-profiles");
    let mut kernels = 0;
    let mut words = 0;
    let mut relocated = 0;
    for e in std::fs::read_dir(&dir).expect("profiles") {
        let p = e.expect("entry").path();
        if p.extension().and_then(|x| x.to_str()) != Some("ntff") {
            continue;
        }
        let stem = p
            .file_stem()
            .and_then(|x| x.to_str())
            .unwrap_or_default()
            .to_string();
        let ntff = Ntff::parse(&std::fs::read(&p).expect("ntff")).expect("parse ntff");
        let neff = std::fs::read(repo_path(&format!(
            "../shared/fixtures/real-neff/{stem}.neff"
        )))
        .expect("neff");
        let s = setup(Duration::from_secs(10));
        let image = s.rt.load_image(&neff, 0).expect("load image");
        assert_eq!(image.len(), 10, "{stem}: 2 subgraphs x 5 engines");
        for prog in &image {
            let theirs = ntff
                .program(&prog.subgraph, prog.engine)
                .unwrap_or_else(|| {
                    panic!("{stem}: no NTFF program {} {}", prog.subgraph, prog.engine)
                });
            assert_eq!(
                theirs.neff_base(),
                Some(prog.base),
                "{stem} {} {}: NEFF word 0's pc",
                prog.subgraph,
                prog.engine
            );
            for (pc, (ours, origin)) in prog.words.iter().zip(&prog.origins).enumerate() {
                let WordOrigin::Neff { index } = origin else {
                    continue;
                };
                let at = pc * 64;
                let theirs_w: &[u8; 64] = theirs
                    .bytes
                    .get(at..at + 64)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or_else(|| panic!("{stem}: NTFF program too short at pc {pc}"));
                assert_eq!(
                    masked(ours),
                    masked(theirs_w),
                    "{stem} {} {} pc {pc} (NEFF word {index}) differs beyond runtime-chosen addresses",
                    prog.subgraph,
                    prog.engine
                );
                if ours != theirs_w {
                    relocated += 1;
                }
                words += 1;
            }
        }
        kernels += 1;
    }
    assert_eq!(kernels, 6);
    assert_eq!(words, 1929, "every NEFF word of the six profiled kernels");
    assert!(relocated > 0, "some words carry runtime-chosen addresses");
}

#[test]
fn every_real_neff_places_and_translates() {
    let dir = repo_path("../shared/fixtures/real-neff");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("real-neff") {
        let p = e.expect("entry").path();
        if p.extension().and_then(|x| x.to_str()) != Some("neff") {
            continue;
        }
        let s = setup(Duration::from_secs(10));
        let image =
            s.rt.load_image(&std::fs::read(&p).expect("neff"), 0)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(image
            .iter()
            .all(|prog| prog.words.len() == prog.origins.len()));
        n += 1;
    }
    assert_eq!(n, 8);
}
