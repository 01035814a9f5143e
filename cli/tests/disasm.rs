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

/// The fields of a loaded word whose bytes this runtime chooses (`docs/isa/cayman.md` §5.4,
/// model layers): (opcode, field, bytes, which words). Every other byte of every loaded word
/// equals AWS's.
const RUNTIME_FIELDS: &[(&str, &str, std::ops::Range<usize>, Words)] = &[
    // Variable bases (DRAM tensors, the DGE-table variables) and the TPB window of the core.
    ("DMA_DIRECT2D", "src addr", 16..24, Words::Neff),
    ("DMA_DIRECT2D", "dst addr", 40..48, Words::Neff),
    // Control-block words (prologue) and the var-relative loads (`TENSOR_LOAD_VAR` → SB).
    ("TENSOR_LOAD", "addr", 16..24, Words::Any),
    // Table stores / scratch / events (prologue) and the DMA_TRIGGER doorbells (body): AWS
    // rings two queue registers in one WRITE, this runtime one per WRITE (TX, then RX).
    ("WRITE", "dst0", 16..24, Words::Any),
    ("WRITE", "dst1", 24..32, Words::Any),
    ("WRITE", "data0", 32..36, Words::Any),
    ("WRITE", "data1", 40..44, Words::Any),
    ("WRITE", "size1", 13..14, Words::Neff),
    // The branch after `NOTIFY hint=8` (this runtime enters the loop head).
    ("COMPARE_BRANCH", "label", 48..52, Words::Runtime),
    // ACT/DVE tables and DMA-trigger rings: destinations, ring stride, address values.
    ("OP_0xab", "dst", 16..24, Words::Runtime),
    ("OP_0xab", "stride", 28..32, Words::Runtime),
    ("OP_0xab", "addresses", 32..64, Words::RuntimeAddresses),
    ("OP_0x95", "addr", 16..24, Words::Runtime),
];

/// Which loaded words a runtime-chosen field may differ in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Words {
    Any,
    Neff,
    Runtime,
    /// Runtime `0xab` words whose u32 at 24 is 1 (address values; the `0x8000` ones carry
    /// AWS's fill values, compared).
    RuntimeAddresses,
}

/// `disasm --loaded` of the model layers against the programs inside their NTFFs: all 20
/// programs have AWS's length, AWS's opcode at every pc, NEFF words at the same pcs, and
/// AWS's bytes at every pc except the `RUNTIME_FIELDS` (each of which does differ somewhere).
/// The three engines that own a DMA-trigger queue (attention Vector, MoE GpSimd and Sync)
/// carry AWS's 15/13/13 queue-set-up prologue slots and 3/1/1 epilogue slots (§1.3, §5.1).
#[test]
fn model_layers_loaded_programs_equal_the_ntff_programs() {
    let dir = format!("{FX}/real-models");
    let hex = |e: &serde_json::Value| -> Vec<u8> {
        let s = e["raw"].as_str().expect("raw");
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()
    };
    let mut used = std::collections::BTreeSet::new();
    let (mut words, mut identical, mut bodies, mut programs) = (0, 0, 0, 0);
    for stem in ["kgm-attn_tkg_v6", "kgm-moe_tkg_v6b"] {
        let neff = format!("{dir}/{stem}.neff");
        let ntff = format!("{dir}/{stem}.ntff");
        let aws = json(&[&neff, "--ntff", &ntff, "--json"]);
        let ours = json(&[&neff, "--loaded", "--json"]);
        let listed = json(&[&neff, "--json"]);
        for sg in ["sg00", "sg01"] {
            for eng in ["Tensor", "Scalar", "GpSimd", "Vector", "Sync"] {
                let prog = |v: &[serde_json::Value]| -> Vec<serde_json::Value> {
                    v.iter()
                        .filter(|e| e["subgraph"] == sg && e["engine"] == eng)
                        .cloned()
                        .collect()
                };
                let (a, o) = (prog(&aws), prog(&ours));
                let at = format!("{stem} {sg} {eng}");
                assert_eq!(a.len(), o.len(), "{at}: length");
                // `disasm` of the NEFF alone numbers word 0 where both loads put it.
                let first = |p: &[serde_json::Value]| {
                    p.iter()
                        .find(|e| e["origin"]["kind"] == "neff")
                        .map(|e| e["pc"].clone())
                };
                assert_eq!(first(&a), first(&o), "{at}: body start");
                assert_eq!(first(&prog(&listed)), first(&a), "{at}: NEFF listing base");
                programs += 1;
                for (x, y) in a.iter().zip(&o) {
                    let pc = &x["pc"];
                    assert_eq!(x["opcode"], y["opcode"], "{at} pc {pc}");
                    assert_eq!(x["origin"]["kind"], y["origin"]["kind"], "{at} pc {pc}");
                    let op = x["opcode"].as_str().unwrap_or_default();
                    let neff_word = x["origin"]["kind"] == "neff";
                    bodies += usize::from(neff_word);
                    let (xa, yo) = (hex(x), hex(y));
                    words += 1;
                    if xa == yo {
                        identical += 1;
                        continue;
                    }
                    for i in (0..64).filter(|i| xa[*i] != yo[*i]) {
                        let field = RUNTIME_FIELDS.iter().find(|(o, _, r, w)| {
                            *o == op
                                && r.contains(&i)
                                && match w {
                                    Words::Any => true,
                                    Words::Neff => neff_word,
                                    Words::Runtime => !neff_word,
                                    Words::RuntimeAddresses => !neff_word && xa[24] == 1,
                                }
                        });
                        let (_, name, _, _) = field.unwrap_or_else(|| {
                            panic!(
                                "{at} pc {pc} {op} byte {i}: AWS {:02x}, ours {:02x}\n {}\n {}",
                                xa[i], yo[i], x["raw"], y["raw"]
                            )
                        });
                        used.insert((op.to_string(), *name));
                    }
                }
            }
        }
    }
    assert_eq!(programs, 20);
    // sg00 bodies 1,981 (attention) + 3,294 (MoE); every sg01 body is 2 words.
    assert_eq!(bodies, 1981 + 3294 + 20);
    let listed: std::collections::BTreeSet<_> = RUNTIME_FIELDS
        .iter()
        .map(|(o, n, _, _)| (o.to_string(), *n))
        .collect();
    assert_eq!(
        used, listed,
        "every listed field differs somewhere, no other does"
    );
    eprintln!("{identical} of {words} loaded words byte-identical to the NTFF's");
    assert!(identical * 10 > words * 8, "{identical} / {words}");
}
