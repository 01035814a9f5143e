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

/// The six profiled kernels: name, NTFF, and the programs this runtime loads for the NEFF.
fn profiled_kernels() -> Vec<(String, Ntff, Vec<neuron_runtime::real::LoadedProgram>)> {
    let dir = repo_path("../shared/fixtures/real-profiles");
    let mut out = Vec::new();
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
        out.push((stem, ntff, image));
    }
    out
}

#[test]
fn translated_programs_match_the_ntff_except_runtime_chosen_addresses() {
    let mut kernels = 0;
    let mut words = 0;
    let mut relocated = 0;
    for (stem, ntff, image) in profiled_kernels() {
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

/// The fields of a runtime word that hold an address or value this runtime chose
/// (`docs/isa/cayman.md` §5.4), zeroed: TENSOR_LOAD's source address, WRITE's destinations,
/// the values of the load-time per-engine table stores, the address bytes of the unnamed `0xab` and `0x95` words, and the label of the branch that
/// leaves the load-time part (`after_loaded`: AWS jumps past the loop head to the first
/// execution; this runtime enters the loop head).
fn masked_runtime(w: &[u8; 64], after_loaded: bool) -> [u8; 64] {
    let mut m = *w;
    let zero = |m: &mut [u8; 64], r: std::ops::Range<usize>| m[r].fill(0);
    match w[0] {
        0xaa => zero(&mut m, 16..24),
        0xa5 => {
            // The load-time table stores' values differ between models (baseline vs fused).
            let lo = u16::from_le_bytes([w[16], w[17]]);
            if matches!(lo, 0x13a0 | 0x13c0 | 0x13e0 | 0x14c0 | 0x14e0 | 0x1500) {
                zero(&mut m, 32..36);
                zero(&mut m, 40..44);
            }
            zero(&mut m, 16..32)
        }
        0xab => {
            zero(&mut m, 16..24);
            if w[24] == 1 {
                zero(&mut m, 32..38);
            }
        }
        0x95 => zero(&mut m, 16..24),
        0xa9 if after_loaded => zero(&mut m, 48..52),
        _ => {}
    }
    m
}

#[test]
fn runtime_prologue_and_epilogue_match_the_ntff_except_runtime_chosen_fields() {
    let mut kernels = 0;
    let (mut slots, mut exact) = (0, 0);
    let mut bad = Vec::new();
    for (stem, ntff, image) in profiled_kernels() {
        for prog in &image {
            let theirs = ntff
                .program(&prog.subgraph, prog.engine)
                .expect("NTFF program");
            assert_eq!(
                theirs.bytes.len(),
                prog.words.len() * 64,
                "{stem} {} {}: program length",
                prog.subgraph,
                prog.engine
            );
            let mut after_loaded = false;
            for (pc, (ours, origin)) in prog.words.iter().zip(&prog.origins).enumerate() {
                let theirs_w: &[u8; 64] =
                    theirs.bytes[pc * 64..pc * 64 + 64].try_into().expect("64");
                let next_after = ours[0] == 0xa6 && ours[36] == 8;
                if *origin == WordOrigin::Runtime {
                    slots += 1;
                    if ours == theirs_w {
                        exact += 1;
                    }
                    if masked_runtime(ours, after_loaded) != masked_runtime(theirs_w, after_loaded)
                    {
                        bad.push(format!(
                            "{stem} {} {} pc {pc}:\n  ours   {}\n  theirs {}",
                            prog.subgraph,
                            prog.engine,
                            hex(ours),
                            hex(theirs_w)
                        ));
                    }
                }
                after_loaded = next_after;
            }
        }
        kernels += 1;
    }
    assert_eq!(kernels, 6);
    assert!(
        bad.is_empty(),
        "{} of {slots} runtime slots differ:\n{}",
        bad.len(),
        bad[..bad.len().min(40)].join("\n")
    );
    eprintln!("{slots} runtime slots: {exact} byte-identical, the rest equal after masking");
}

fn hex(w: &[u8; 64]) -> String {
    w.iter().map(|b| format!("{b:02x}")).collect()
}

/// LNC=2: the Tensor engine of each core WRITEs 1 to its peer's `$S[1]` increment register
/// and waits for `$S[1] >= 1`. Started alone, core 0 stops at that wait (and its other
/// engines at the `$S[2]` barrier after it) until core 1 starts; then both run to their
/// epilogues and back to the loop head, waiting for the next start.
#[test]
fn lnc2_handshake_holds_a_core_until_its_peer_starts() {
    use neuron_isa::Engine;
    let s = setup(Duration::from_secs(10));
    let neff = std::fs::read(repo_path(
        "../shared/fixtures/real-neff/akc-fused_bf16_s512.neff",
    ))
    .expect("neff");
    let image = s.rt.load_image(&neff, 0).expect("image");
    let base = |sg: &str| {
        image
            .iter()
            .find(|p| p.subgraph == sg && p.engine == Engine::Pe)
            .expect("Tensor program")
            .base
    };
    let (base0, base1) = (base("sg00"), base("sg01"));
    let _model = s.rt.load(&neff, 0).expect("load");
    s.emu
        .with_device(0, |d| {
            let settle = |d: &mut neuron_devmodel::Device| while d.run(1 << 16) {};
            settle(d);
            // Both cores wait at their loop heads: Tensor on `$S[0] > 0` (pc 26).
            assert_eq!(d.engine_pc(0, Engine::Pe), Some(26));
            assert_eq!(d.engine_pc(1, Engine::Pe), Some(26));
            assert!(d.reg_write(0, 0x1800, 1), "start core 0 only");
            settle(d);
            // The handshake wait is 4 slots before NEFF word 0 (WRITE, EVENT_SEMAPHORE, DRAIN,
            // barrier...); core 1 has written nothing, so core 0 holds there.
            assert_eq!(d.engine_pc(0, Engine::Pe), Some(base0 - 4));
            assert_eq!(
                d.regs(1).expect("core 1").sem(1),
                1,
                "core 0's +1 reached core 1"
            );
            assert!(d.faults().is_empty(), "{:?}", d.faults());
            assert!(d.reg_write(1, 0x1800, 1), "start core 1");
            settle(d);
            assert!(d.faults().is_empty(), "{:?}", d.faults());
            for (nc, b) in [(0, base0), (1, base1)] {
                assert!(b > 26);
                assert_eq!(
                    d.engine_pc(nc, Engine::Pe),
                    Some(26),
                    "core {nc} ran its execution and is back at the loop head"
                );
                let r = d.regs(nc).expect("core");
                assert_eq!((r.sem(0), r.sem(1), r.sem(2)), (0, 0, 0), "core {nc}");
            }
        })
        .expect("device 0");
}
