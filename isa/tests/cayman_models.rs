//! The two real model layers (`shared/fixtures/real-models/kgm-*`): every NEFF and loaded word
//! decodes to a known opcode and round-trips, and each field the new opcodes carry decodes to
//! the value the evidence gives (`docs/isa/cayman.md` §1.3).

#[path = "../examples/align/common.rs"]
mod common;

use common::*;
use neuron_isa::cayman::{CaymanInstr, DmaAddr, Namespace, Opcode, Value, WORD};
use neuron_isa::Engine;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn models() -> PathBuf {
    fixtures().join("real-models")
}

const MODELS: [&str; 2] = ["kgm-attn_tkg_v6", "kgm-moe_tkg_v6b"];

/// The sg00 NEFF words of one engine.
fn neff_words(model: &str, engine: Engine) -> Vec<CaymanInstr> {
    let sgs = read_neff(&models().join(format!("{model}.neff")));
    let sg = sgs.iter().find(|s| s.name == "sg00").expect("sg00");
    let (_, _, bin) = sg
        .engines
        .iter()
        .find(|(e, _, _)| *e == engine)
        .expect("engine file");
    CaymanInstr::decode_all(Namespace::Neff, bin)
}

#[test]
fn every_model_word_decodes_and_round_trips() {
    let mut per_op: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for m in MODELS {
        for sg in read_neff(&models().join(format!("{m}.neff"))) {
            for (_, file, bin) in &sg.engines {
                for (i, c) in bin.chunks_exact(WORD).enumerate() {
                    let w = word(c);
                    let d = CaymanInstr::decode(Namespace::Neff, &w);
                    assert!(d.opcode.is_known(), "{m} {file} word {i}: {:#04x}", w[0]);
                    assert_eq!(d.encode(), w, "{m} {file} word {i}");
                    *per_op.entry((d.opcode.name(), m)).or_default() += 1;
                }
            }
        }
        let nt = read_ntff(&models().join(format!("{m}.ntff")));
        assert_eq!(nt.programs.len(), 10, "{m}");
        assert_ntff_roundtrips(m, &nt);
    }
    let n = |op: &str, m: &str| per_op.get(&(op.to_owned(), m)).copied().unwrap_or(0);
    let (a, e) = (MODELS[0], MODELS[1]);
    assert_eq!(n("AFFINE_SELECT", a), 2);
    assert_eq!(n("REGISTER_MOVE", a), 1);
    assert_eq!(n("DMA_TRIGGER", a), 20);
    assert_eq!(n("REGISTER_ALU", e), 416);
    assert_eq!(n("TENSOR_LOAD_VAR", e), 144);
    assert_eq!(n("DMA_DIRECT2D_EXT", e), 144);
    assert_eq!(n("DMA_TRIGGER", e), 16 + 9);
}

#[test]
fn register_words_decode_their_data_flow() {
    // kgm-moe_tkg_v6b sg00 GpSimd NEFF words 6-9: load an expert id, scale it to a byte
    // offset, use it as the DMA's register offset.
    let w = neff_words(MODELS[1], Engine::Pool);
    let tl = &w[6];
    assert_eq!(tl.opcode, Opcode::TensorLoadVar);
    assert_eq!(
        tl.addr("addr"),
        Some(DmaAddr::VarRelative {
            offset: 0x17300,
            var_id: 0,
            pad: 0
        })
    );
    assert_eq!(tl.get("regs"), Some(&Value::Bytes(vec![60, 0, 0, 0])));
    let (m1, m2) = (&w[7], &w[8]);
    assert_eq!(m1.opcode, Opcode::RegisterAlu);
    assert_eq!(
        (m1.u("op"), m1.u("src_reg"), m1.u("dst_reg"), m1.u("imm")),
        (Some(6), Some(60), Some(61), Some(0x10_0000))
    );
    assert_eq!(
        (m2.u("op"), m2.u("src_reg"), m2.u("dst_reg"), m2.u("imm")),
        (Some(6), Some(61), Some(31), Some(2))
    );
    let add = &w[13];
    assert_eq!(
        (
            add.u("op"),
            add.u("src_reg"),
            add.u("dst_reg"),
            add.u("imm")
        ),
        (Some(4), Some(60), Some(60), Some(0x1_0000))
    );
    let dma = &w[9];
    assert_eq!(dma.opcode, Opcode::DmaDirect2d);
    assert_eq!(
        dma.addr("src"),
        Some(DmaAddr::TableReg {
            reg: 31,
            index: 1,
            pad: 0
        })
    );
    assert_eq!(dma.u("src_elem_size"), Some(1024));
    assert_eq!(dma.u("bound_reg"), Some(0xbd));
    assert_eq!(w[10].opcode, Opcode::DmaExt);
    assert_eq!(w[10].header.len, 0, "the extension slot has byte 1 = 0");
    assert_eq!(w[10].u("queues"), Some(16));
    let text = dma.operands(&Default::default());
    assert!(
        text.contains("src_table_offset_reg=$R[31] src_table_index=1"),
        "{text}"
    );
    assert!(text.contains("bound_reg=$R[61]"), "{text}");
    // The loaded REGISTER_MOVE AWS's runtime puts before that DMA (pc 83): $R[61] = bound.
    let nt = read_ntff(&models().join(format!("{}.ntff", MODELS[1])));
    let p = nt.program("sg00", Engine::Pool).expect("program");
    let rm = CaymanInstr::decode(Namespace::Loaded, &word(&p.bytes[83 * WORD..84 * WORD]));
    assert_eq!(rm.opcode, Opcode::RegisterMove);
    assert_eq!(
        (rm.u("dst_reg"), rm.u("imm")),
        (Some(61), Some(0x0ffe_0000))
    );
    // ... and the TENSOR_LOAD_VAR became TENSOR_LOAD with the absolute SB address (pc 80).
    let ld = CaymanInstr::decode(Namespace::Loaded, &word(&p.bytes[80 * WORD..81 * WORD]));
    assert_eq!(ld.opcode, Opcode::TensorLoad);
    assert_eq!(ld.u("addr"), Some(0x8020_0001_7300));
}

#[test]
fn trigger_and_affine_select_decode() {
    let sp = neff_words(MODELS[1], Engine::Sp);
    let blocks: Vec<_> = sp[2..11]
        .iter()
        .map(|t| (t.queue_name(), t.u("block")))
        .collect();
    for (i, b) in blocks.iter().enumerate() {
        assert_eq!(*b, (Some("qSPIO0".to_owned()), Some(i as u64)));
    }
    let dve = neff_words(MODELS[0], Engine::Dve);
    assert_eq!(dve[68].opcode, Opcode::DmaTrigger);
    assert_eq!(dve[68].queue_name().as_deref(), Some("qDVESpillReload0"));
    let pool = neff_words(MODELS[0], Engine::Pool);
    let (rm, sel) = (&pool[4], &pool[5]);
    assert_eq!(rm.opcode, Opcode::RegisterMove);
    assert_eq!((rm.u("dst_reg"), rm.f32("imm")), (Some(61), None));
    assert_eq!(rm.u("imm"), Some(1.0f32.to_bits() as u64));
    assert_eq!(sel.opcode, Opcode::AffineSelect);
    assert_eq!(
        (
            sel.u("channels"),
            sel.u("dtype_pair"),
            sel.u("cmp_op"),
            sel.u("fill_reg")
        ),
        (Some(128), Some(0xaa), Some(3), Some(61))
    );
    assert_eq!(
        (sel.i("offset"), sel.i("channel_multiplier")),
        (Some(0), Some(-1))
    );
    assert_eq!(sel.affine_pattern(), Some(([1, 1, 1, 1], [128, 1, 1, 1])));
    let (src, dst) = (sel.ap("src").expect("src"), sel.ap("dst").expect("dst"));
    assert_eq!(
        (src.addr, src.step[..2].to_vec(), src.num[..2].to_vec()),
        (0x58a8, vec![1, 1], vec![128, 1])
    );
    assert_eq!(src, dst);
}

#[test]
fn activation_functions_are_named_from_the_table_files() {
    use neuron_isa::cayman::layout::{enum_name, ACT_FUNCS};
    let mut seen = BTreeMap::new();
    for (m, e) in [(MODELS[0], Engine::Act), (MODELS[1], Engine::Act)] {
        for w in neff_words(m, e) {
            if w.opcode == Opcode::Activate {
                let f = w.u("func").expect("func");
                *seen
                    .entry(enum_name(ACT_FUNCS, f).unwrap_or("?"))
                    .or_insert(0) += 1;
            }
        }
    }
    let want: BTreeMap<&str, i32> = [
        ("EXP", 48),
        ("copy", 200),
        ("reciprocal_sqrt", 16),
        ("silu", 16),
    ]
    .into();
    assert_eq!(seen, want);
}

#[test]
fn decode_program_keeps_pcs_as_slot_indices() {
    let sgs = read_neff(&models().join(format!("{}.neff", MODELS[1])));
    let sg = sgs.iter().find(|s| s.name == "sg00").expect("sg00");
    let (_, _, bin) = sg
        .engines
        .iter()
        .find(|(e, _, _)| *e == Engine::Pool)
        .expect("Pool");
    let prog = CaymanInstr::decode_program(Namespace::Neff, bin);
    assert_eq!(prog.len(), bin.len() / WORD - 144, "144 two-slot DMAs");
    let two: Vec<_> = prog.iter().filter(|s| s.ext.is_some()).collect();
    assert_eq!(two.len(), 144);
    for s in &prog {
        // Every entry's pc is the slot its bytes come from.
        let at = s.pc as usize * WORD;
        assert_eq!(s.instr.encode()[..], bin[at..at + WORD]);
        if let Some(e) = &s.ext {
            assert_eq!(s.instr.opcode, Opcode::DmaDirect2d);
            assert_eq!(e.encode()[..], bin[at + WORD..at + 2 * WORD]);
        }
    }
    assert_eq!(prog[9].pc, 9);
    assert_eq!(prog[10].pc, 11, "the slot after a two-slot DMA");
}

/// One model program's NEFF body translated with AWS's rules, against the NTFF's body: every
/// byte equal except what the runtime chooses (variable bases: learned from the words and
/// required to be one per variable; the DMA_TRIGGER WRITEs' destinations and data).
fn check_translation(model: &str, engine: Engine) -> (usize, usize) {
    use neuron_isa::cayman::translate::{translate_program, LoadEnv, TriggerWrite};
    use neuron_isa::cayman::Kind;
    let neff_bytes = std::fs::read(models().join(format!("{model}.neff"))).expect("neff");
    let neff = neuron_neff::Neff::parse(&neff_bytes).expect("parse");
    let def = neff.subgraph_def("sg00/def.json").expect("def");
    let sgs = read_neff(&models().join(format!("{model}.neff")));
    let sg = sgs.iter().find(|s| s.name == "sg00").expect("sg00");
    let (_, _, bin) = sg
        .engines
        .iter()
        .find(|(e, _, _)| *e == engine)
        .expect("engine");
    let nt = read_ntff(&models().join(format!("{model}.ntff")));
    let p = nt.program("sg00", engine).expect("program");
    let (base, end) = (
        p.neff_base().expect("base") as usize,
        p.epilogue_start().expect("end") as usize,
    );
    let body: Vec<[u8; WORD]> = p.bytes[base * WORD..end * WORD]
        .chunks_exact(WORD)
        .map(word)
        .collect();
    // Pre-pass: align (a DMA_TRIGGER is two loaded words, every other word one) and learn
    // each variable's base from its relocated fields; one base per variable.
    let neff_words = CaymanInstr::decode_all(Namespace::Neff, bin);
    let mut bases: BTreeMap<u8, u64> = BTreeMap::new();
    let mut triggers: BTreeMap<(String, u32), [TriggerWrite; 2]> = BTreeMap::new();
    let mut j = 0usize;
    for (i, d) in neff_words.iter().enumerate() {
        // A DMA with its extension slot is loaded as REGISTER_MOVE, then the DMA.
        let two_slot = d.opcode == Opcode::DmaDirect2d
            && neff_words
                .get(i + 1)
                .is_some_and(|n| n.opcode == Opcode::DmaExt);
        let at = if two_slot { j + 1 } else { j };
        if d.opcode == Opcode::DmaTrigger {
            let tw = |w: &[u8; WORD]| {
                let l = CaymanInstr::decode(Namespace::Loaded, w);
                assert_eq!(
                    l.opcode,
                    Opcode::Write,
                    "{model} {engine} loaded {}",
                    base + j
                );
                TriggerWrite {
                    dst: [l.u("dst0").unwrap_or(0), l.u("dst1").unwrap_or(0)],
                    data: [
                        l.u("data0").unwrap_or(0) as u32,
                        l.u("data1").unwrap_or(0) as u32,
                    ],
                    sizes: [
                        l.u("size0").unwrap_or(0) as u8,
                        l.u("size1").unwrap_or(0) as u8,
                    ],
                }
            };
            let key = (
                d.queue_name().expect("queue"),
                d.u("block").unwrap_or(0) as u32,
            );
            triggers.insert(key, [tw(&body[j]), tw(&body[j + 1])]);
            j += 2;
            continue;
        }
        for f in &d.fields {
            if let (
                Kind::Addr | Kind::VarAddr,
                Value::Addr(DmaAddr::VarRelative { offset, var_id, .. }),
            ) = (f.spec.kind, &f.value)
            {
                let o = f.spec.off as usize;
                let abs = u64::from_le_bytes(body[at][o..o + 8].try_into().expect("8 bytes"));
                let b = abs.checked_sub(*offset as u64).unwrap_or_else(|| {
                    panic!(
                        "{model} {engine} loaded {}: 0x{abs:x} below offset 0x{offset:x}",
                        base + j
                    )
                });
                assert_eq!(
                    *bases.entry(*var_id).or_insert(b),
                    b,
                    "{model} {engine}: var {var_id}"
                );
            }
        }
        j += 1;
    }
    let table: Vec<u64> = def
        .var
        .values()
        .find_map(|v| v.list.clone())
        .unwrap_or_default();
    let size_of_var = |id: u64| {
        def.var
            .values()
            .find(|v| v.var_id == Some(id as u32))
            .and_then(|v| v.size)
    };
    let var_base = |id: u8| bases.get(&id).copied();
    let table_var_size = |i: u8| table.get(i as usize).and_then(|id| size_of_var(*id));
    let trigger = |q: &str, b: u32| triggers.get(&(q.to_owned(), b)).copied();
    let env = LoadEnv {
        var_base: &var_base,
        table_var_size: &table_var_size,
        trigger: &trigger,
    };
    let out = translate_program(bin, &env).expect("translates");
    assert_eq!(out.len(), body.len(), "{model} {engine}: body length");
    for (k, (got, want)) in out.iter().zip(&body).enumerate() {
        assert_eq!(
            got.word,
            *want,
            "{model} {engine} pc {} (NEFF word {})",
            base + k,
            got.neff_index
        );
    }
    (out.len(), triggers.len())
}

/// §5.1's rule with the trigger-queue set-up: on all 20 model-layer programs `neff_base` is
/// the NTFF segment table's base, and the epilogue is 11 slots (9 on Sync) plus the queue's
/// 1 or 3. Exactly three engines own a trigger queue, with AWS's 15 / 13 / 13 extra slots.
#[test]
fn prologue_rule_numbers_the_model_layers_as_their_ntffs() {
    use neuron_isa::cayman::render::neff_base;
    let mut owners = Vec::new();
    for m in MODELS {
        let nt = read_ntff(&models().join(format!("{m}.ntff")));
        for sg in read_neff(&models().join(format!("{m}.neff"))) {
            for (e, file, bin) in &sg.engines {
                let p = nt.program(&sg.name, *e).expect("program");
                let f = sg.features_of(*e);
                assert_eq!(neff_base(*e, f), p.neff_base().expect("base"), "{m} {file}");
                let end = p.epilogue_start().expect("end") as usize;
                let plain = if *e == Engine::Sp { 9 } else { 11 };
                let extra = f.trigger_queue.map_or(0, |q| q.epilogue_slots()) as usize;
                assert_eq!(p.bytes.len() / WORD - end, plain + extra, "{m} {file}");
                // The other reading of "owns": the engine has DMA_TRIGGER words. Same three.
                let words = CaymanInstr::decode_all(Namespace::Neff, bin);
                let triggers = words.iter().any(|w| w.opcode == Opcode::DmaTrigger);
                assert_eq!(triggers, f.trigger_queue.is_some(), "{m} {file}");
                if let Some(q) = f.trigger_queue {
                    owners.push((m, sg.name.clone(), *e, q.prologue_slots(), q.rings));
                }
            }
        }
    }
    let s = |x: &str| x.to_string();
    assert_eq!(
        owners,
        [
            ("kgm-attn_tkg_v6", s("sg00"), Engine::Dve, 15, 16),
            ("kgm-moe_tkg_v6b", s("sg00"), Engine::Pool, 13, 16),
            ("kgm-moe_tkg_v6b", s("sg00"), Engine::Sp, 13, 16),
        ]
    );
}

/// No engine of the 8 `real-neff` fixtures owns a DMA-trigger queue (their prologues stay
/// §5.1's without the queue term): no `dma` blocks and no DMA_TRIGGER word.
#[test]
fn no_fixture_kernel_owns_a_trigger_queue() {
    let paths = all_neffs();
    assert_eq!(paths.len(), 8);
    for path in paths {
        for sg in read_neff(&path) {
            assert!(sg.queues.is_empty(), "{} {}", path.display(), sg.name);
            for (_, file, bin) in &sg.engines {
                let words = CaymanInstr::decode_all(Namespace::Neff, bin);
                assert!(
                    words.iter().all(|w| w.opcode != Opcode::DmaTrigger),
                    "{file}"
                );
            }
        }
    }
}

#[test]
fn translated_bodies_equal_the_ntff_programs() {
    let mut total = 0;
    let mut trig = 0;
    for m in MODELS {
        for e in Engine::ALL {
            let (n, t) = check_translation(m, e);
            total += n;
            trig += t;
        }
    }
    assert_eq!(trig, 20 + 25, "every DMA_TRIGGER");
    assert!(total > 5000, "{total}");
}

/// The trace records after the programs: 16 bytes each, filling the file exactly, with a u64
/// timestamp at bytes 8-15 whose span is within 10% of the published totals read as ps.
#[test]
fn trace_records_span_the_published_totals() {
    for (m, published_us, records) in [(MODELS[0], 359.87, 48_292), (MODELS[1], 274.76, 40_502)] {
        let path = models().join(format!("{m}.ntff"));
        let len = std::fs::metadata(&path).expect("ntff").len() as usize;
        let nt = read_ntff(&path);
        assert_eq!(nt.trace.len(), records, "{m}");
        assert_eq!(
            nt.trace_offset + 16 * records,
            len,
            "{m}: records fill the file"
        );
        let span_us = nt.trace_span() as f64 / 1e6;
        let ratio = span_us / published_us;
        assert!(
            (1.0..1.1).contains(&ratio),
            "{m}: span {span_us} us vs {published_us}"
        );
    }
}

/// The remaining fields of the new forms, at their anchors.
#[test]
fn every_new_field_decodes_at_its_anchor() {
    let pool = neff_words(MODELS[1], Engine::Pool);
    let (tl, alu) = (&pool[6], &pool[7]);
    assert_eq!(
        (
            tl.dtype("dtype"),
            tl.u("num0"),
            tl.u("num1"),
            tl.i("step0"),
            tl.i("step1")
        ),
        (
            Some(neuron_isa::Dtype::U32),
            Some(1),
            Some(1),
            Some(1),
            Some(8)
        )
    );
    assert_eq!(
        (alu.dtype("dtype"), alu.u("count")),
        (Some(neuron_isa::Dtype::U32), Some(1))
    );
    let rm = &neff_words(MODELS[0], Engine::Pool)[4];
    assert_eq!(
        (rm.u("mode"), rm.dtype("dtype"), rm.u("count")),
        (Some(1), Some(neuron_isa::Dtype::U32), Some(1))
    );
    // ACTIVATE: kgm-moe Scalar words with a pointer scale and an immediate bias, and an
    // akc-style word (pointer bias, immediate scale) for contrast.
    let act = neff_words(MODELS[1], Engine::Act);
    let scaled = act
        .iter()
        .find(|w| w.opcode == Opcode::Activate && w.u("scale_src") == Some(1))
        .expect("a pointer-scale ACTIVATE");
    assert_eq!(scaled.u("bias_src"), Some(1));
    assert_eq!(scaled.u("func"), Some(128));
    assert_eq!(scaled.f32("bias_addr"), None, "bias_addr is a u32 field");
    assert_eq!(scaled.u("bias_addr"), Some(0), "immediate bias 0.0");
    let text = scaled.operands(&Default::default());
    assert!(text.contains("copy bias=0 "), "{text}");
    assert!(text.contains("scale_ptr=fp32@0x"), "{text}");
    let silu = act
        .iter()
        .find(|w| w.opcode == Opcode::Activate && w.u("func") == Some(36))
        .expect("silu");
    assert_eq!(
        (silu.u("scale_src"), silu.u("bias_src")),
        (Some(0), Some(0))
    );
    assert_eq!(silu.f32("scale"), Some(1.0));
    let eps = neff_words(MODELS[0], Engine::Act)
        .into_iter()
        .find(|w| {
            w.opcode == Opcode::Activate
                && w.u("bias_src") == Some(1)
                && w.u("bias_addr") != Some(0)
        })
        .expect("an EPS bias");
    let b = f32::from_bits(eps.u("bias_addr").expect("bias") as u32);
    assert!(b == 1e-6 || b == 1e-9, "{b}");
}
