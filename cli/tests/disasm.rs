//! `neuron-emu disasm` on the real trn2 fixtures.

use std::process::Command;

const FX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");

fn disasm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .arg("disasm")
        .args(args)
        .output()
        .expect("spawn");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> Vec<serde_json::Value> {
    let (ok, out, err) = disasm(args);
    assert!(ok, "{err}");
    serde_json::from_str::<serde_json::Value>(&out)
        .expect("json")
        .as_array()
        .expect("list")
        .clone()
}

#[test]
fn neff_json_has_profiler_pcs_and_syntax() {
    let neff = format!("{FX}/real-neff/akc-fused_fp32_s512.neff");
    let v = json(&[&neff, "--json"]);
    // Every word of both subgraphs: sg00 124+11+7+19+3, sg01 5 x 2.
    assert_eq!(v.len(), 174);
    for e in &v {
        for k in [
            "subgraph", "engine", "pc", "opcode", "operands", "origin", "raw",
        ] {
            assert!(e.get(k).is_some(), "{k} missing in {e}");
        }
        assert_eq!(e["origin"]["kind"], "neff");
        assert_eq!(e["raw"].as_str().map(str::len), Some(128));
    }
    // trn2-encoding-notes.md §5.2 anchor: Tensor pc 69.
    let l = v
        .iter()
        .find(|e| e["subgraph"] == "sg00" && e["engine"] == "Tensor" && e["pc"] == 69)
        .expect("pc 69");
    assert_eq!(l["opcode"], "LDWEIGHTS");
    let ops = l["operands"].as_str().unwrap_or("");
    assert!(
        ops.contains(
            "fp32_mode=LOW transpose_mode=ENABLED src=fp32@0x369f4[-1,0,0][128,1,1] 128*128"
        ),
        "{ops}"
    );
    assert_eq!(l["origin"]["offset"], 192);
    assert_eq!(l["origin"]["file"], "sg00/PE.bin");
}

#[test]
fn ntff_listing_marks_runtime_and_neff_words() {
    let ntff = format!("{FX}/real-profiles/akc-fused_fp32_s512.ntff");
    let neff = format!("{FX}/real-neff/akc-fused_fp32_s512.neff");
    let v = json(&["--ntff", &ntff, &neff, "--json"]);
    // Stream lengths from trn2-encoding-notes.md §2.
    assert_eq!(v.len(), 201 + 88 + 79 + 96 + 61 + 78 + 68 + 73 + 78 + 59);
    let neff_words = v.iter().filter(|e| e["origin"]["kind"] == "neff").count();
    assert_eq!(neff_words, 174);
    let l = v
        .iter()
        .find(|e| e["subgraph"] == "sg00" && e["engine"] == "Scalar" && e["pc"] == 37)
        .expect("pc 37");
    assert_eq!(l["opcode"], "TENSOR_LOAD");
    assert_eq!(
        l["operands"],
        "addr=uint32@0x8005c035e000[0,0][1,1] data=$R[0]"
    );
    // Without the NEFF the loaded program still disassembles.
    let (ok, text, err) = disasm(&["--ntff", &ntff]);
    assert!(ok, "{err}");
    assert!(text.contains("EVENT_SEMAPHORE_RANGE_CLEAR"));
}

#[test]
fn every_fixture_disassembles() {
    for f in [
        "nkipy-matmul_small",
        "nkipy-matmul_large",
        "akc-baseline_bf16_s512",
    ] {
        let (ok, text, err) = disasm(&[&format!("{FX}/real-neff/{f}.neff")]);
        assert!(ok, "{f}: {err}");
        assert!(!text.contains("UNKNOWN_"), "{f}");
    }
}

#[test]
fn bad_input_exits_2() {
    let (ok, _, err) = disasm(&["/nonexistent.neff"]);
    assert!(!ok);
    assert!(err.contains("nonexistent"), "{err}");
    let (ok, _, _) = disasm(&[]);
    assert!(!ok);
}

/// `disasm --loaded`: the program as this runtime loads it. Every profiled instruction, from a
/// NEFF word or from the runtime prologue/epilogue (AWS's shape), has the same opcode at the
/// same (subgraph, engine, pc).
#[test]
fn loaded_listing_agrees_with_the_profiles_at_every_profiled_pc() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/");
    let (mut compared, mut runtime) = (0, 0);
    for stem in [
        "akc-baseline_bf16_s512",
        "akc-baseline_fp32_s512",
        "akc-baseline_fp32_s1024",
        "akc-fused_bf16_s512",
        "akc-fused_bf16_s1024",
        "akc-fused_fp32_s512",
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
            .args(["disasm", "--loaded", "--json"])
            .arg(format!("{root}real-neff/{stem}.neff"))
            .output()
            .expect("spawn");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let list = list.as_array().expect("array");
        let prof: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!("{root}real-profiles/{stem}.profile.json")).expect("profile"),
        )
        .expect("profile json");
        for rec in prof["instruction"].as_array().expect("instructions") {
            // The profiler labels PE's MATMUL records "TensorMatrix".
            let label = rec["label"].as_str().unwrap_or_default();
            let engine = if label.starts_with("Tensor") {
                "Tensor"
            } else {
                label
            };
            let hit = list.iter().find(|e| {
                e["subgraph"] == rec["subgraph"] && e["engine"] == engine && e["pc"] == rec["pc"]
            });
            let e = hit.unwrap_or_else(|| {
                panic!(
                    "{stem} {} {} pc {}: no loaded word",
                    rec["subgraph"], rec["label"], rec["pc"]
                )
            });
            assert_eq!(
                e["opcode"], rec["opcode"],
                "{stem} {} {} pc {}",
                rec["subgraph"], rec["label"], rec["pc"]
            );
            if e["origin"]["kind"] == "neff" {
                compared += 1;
            } else {
                runtime += 1;
            }
        }
    }
    // Every profiled instruction that comes from a NEFF word (1,929 in the six profiles), and
    // every one from the runtime prologue/epilogue.
    assert_eq!(compared, 1929);
    assert_eq!(compared + runtime, 3530);
}

/// The model layers (`real-models/kgm-*`): every loaded word of their NTFFs and every NEFF
/// word has a known opcode, and the new forms print their operands.
#[test]
fn model_layers_disassemble_with_the_new_opcodes() {
    let dir = format!("{FX}/real-models");
    let neff = format!("{dir}/kgm-moe_tkg_v6b.neff");
    let ntff = format!("{dir}/kgm-moe_tkg_v6b.ntff");
    let loaded = json(&[&neff, "--ntff", &ntff, "--json"]);
    let listed = json(&[&neff, "--json"]);
    for e in loaded.iter().chain(&listed) {
        let op = e["opcode"].as_str().unwrap_or("");
        assert!(!op.starts_with("UNKNOWN"), "{e}");
    }
    let at = |v: &[serde_json::Value], eng: &str, pc: u64| {
        v.iter()
            .find(|e| e["subgraph"] == "sg00" && e["engine"] == eng && e["pc"] == pc)
            .cloned()
            .expect("pc")
    };
    // AWS's loaded form: REGISTER_MOVE of the bound, then the register-offset DMA (§1.3).
    let rm = at(&loaded, "GpSimd", 83);
    assert_eq!(rm["opcode"], "REGISTER_MOVE");
    assert!(
        rm["operands"]
            .as_str()
            .unwrap_or("")
            .contains("$R[61]=0xffe0000"),
        "{rm}"
    );
    let dma = at(&loaded, "GpSimd", 84);
    let ops = dma["operands"].as_str().unwrap_or("");
    assert!(
        ops.contains("src_table_offset_reg=$R[31] src_table_index=1"),
        "{ops}"
    );
    assert!(ops.contains("bound_reg=$R[61]"), "{ops}");
    // The NEFF form: the DMA's second slot, and a trigger naming its queue and block.
    let names: Vec<&str> = listed.iter().filter_map(|e| e["opcode"].as_str()).collect();
    for op in [
        "DMA_DIRECT2D_EXT",
        "TENSOR_LOAD_VAR",
        "REGISTER_ALU",
        "DMA_TRIGGER",
    ] {
        assert!(names.contains(&op), "{op}");
    }
    let trig = listed
        .iter()
        .find(|e| e["opcode"] == "DMA_TRIGGER" && e["engine"] == "Sync")
        .expect("trigger");
    assert!(
        trig["operands"]
            .as_str()
            .unwrap_or("")
            .contains("queue=qSPIO0 block=0"),
        "{trig}"
    );
}

/// `disasm --loaded` of the model layers against the programs inside their NTFFs: the loaded
/// bodies (translated NEFF words: REGISTER_MOVE + DMA for the register-offset gathers, two
/// WRITEs per DMA_TRIGGER) have AWS's opcode at every position in all 20 programs, and the 17
/// programs whose engine owns no DMA-trigger queue have AWS's opcode at every pc. The three
/// that own one (attention Vector, MoE GpSimd and Sync) lack AWS's 15/13/13 queue-set-up
/// prologue slots (`docs/isa/cayman.md` §1.3), so their pcs sit that many lower, and 3/1/1
/// epilogue slots. Bytes differ
/// only where the runtime chooses (variable bases, TPB window, doorbell WRITEs); not compared.
#[test]
fn model_layers_loaded_programs_have_the_ntff_opcodes() {
    let dir = format!("{FX}/real-models");
    let short = [
        ("kgm-attn_tkg_v6", "Vector", 15, 3),
        ("kgm-moe_tkg_v6b", "GpSimd", 13, 1),
        ("kgm-moe_tkg_v6b", "Sync", 13, 1),
    ];
    let mut bodies = 0;
    for stem in ["kgm-attn_tkg_v6", "kgm-moe_tkg_v6b"] {
        let neff = format!("{dir}/{stem}.neff");
        let ntff = format!("{dir}/{stem}.ntff");
        let aws = json(&[&neff, "--ntff", &ntff, "--json"]);
        let ours = json(&[&neff, "--loaded", "--json"]);
        for sg in ["sg00", "sg01"] {
            for eng in ["Tensor", "Scalar", "GpSimd", "Vector", "Sync"] {
                let prog = |v: &[serde_json::Value]| -> Vec<serde_json::Value> {
                    v.iter()
                        .filter(|e| e["subgraph"] == sg && e["engine"] == eng)
                        .cloned()
                        .collect()
                };
                let (a, o) = (prog(&aws), prog(&ours));
                let base = |p: &[serde_json::Value]| {
                    p.iter()
                        .position(|e| e["origin"]["kind"] == "neff")
                        .expect("a body")
                };
                let body = |p: &[serde_json::Value]| -> Vec<String> {
                    p.iter()
                        .filter(|e| e["origin"]["kind"] == "neff")
                        .map(|e| e["opcode"].to_string())
                        .collect()
                };
                assert_eq!(body(&a), body(&o), "{stem} {sg} {eng}: body opcodes");
                bodies += body(&o).len();
                let (missing, tail) = short
                    .iter()
                    .find(|(s, e, _, _)| *s == stem && *e == eng && sg == "sg00")
                    .map_or((0, 0), |(_, _, n, t)| (*n, *t));
                assert_eq!(
                    base(&a),
                    base(&o) + missing,
                    "{stem} {sg} {eng}: body start"
                );
                assert_eq!(
                    a.len(),
                    o.len() + missing + tail,
                    "{stem} {sg} {eng}: length"
                );
                if missing == 0 {
                    for (x, y) in a.iter().zip(&o) {
                        assert_eq!(x["opcode"], y["opcode"], "{stem} {sg} {eng} pc {}", x["pc"]);
                    }
                }
            }
        }
    }
    // sg00 bodies 1,981 (attention) + 3,294 (MoE); every sg01 body is 2 words.
    assert_eq!(bodies, 1981 + 3294 + 20);
}
