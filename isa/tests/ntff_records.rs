//! The NTFF execution records (`docs/isa/cayman.md` §4), checked against AWS's profiler: the
//! six akc NTFFs have a `neuron-profile` JSON made from the same capture, so every record the
//! JSON lists (instructions, semaphore updates, DMA packets) must be a decoded record of the
//! NTFF with the same time. The two model layers, which have no JSON, pin what they decode to.

#[path = "../examples/align/common.rs"]
mod common;

use common::*;
use neuron_isa::ntff::{Mark, Ntff, Record, SectionKind, TraceRecord};
use neuron_isa::Engine;
use proptest::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

fn profile_json(kernel: &str) -> Value {
    let p = fixtures().join(format!("real-profiles/{kernel}.profile.json"));
    serde_json::from_slice(&std::fs::read(p).expect("profile json")).expect("json")
}

fn ntff(kernel: &str) -> Ntff {
    read_ntff(&fixtures().join(format!("real-profiles/{kernel}.ntff")))
}

/// ns from the window's start, as the profiler's JSON timestamps are.
fn rel_ns(nt: &Ntff, ps: u64) -> f64 {
    let w = nt.window.expect("window");
    (ps as f64 - w.start_ps as f64) / 1e3
}

/// Remove from `pool` the first entry `ok` accepts; whether there was one.
fn take<T>(pool: &mut Vec<T>, ok: impl Fn(&T) -> bool) -> bool {
    match pool.iter().position(ok) {
        Some(i) => {
            pool.swap_remove(i);
            true
        }
        None => false,
    }
}

/// TOC 15 is the profiled execution: its length is the profile's `total_time`, sg00's
/// duration (TOC 4.4.1.14) and the last hardware timestamp; the sections tile the trace.
#[test]
fn window_is_the_profiles_total_time() {
    for k in kernels() {
        let (nt, j) = (ntff(&k), profile_json(&k));
        let w = nt.window.expect("TOC 15");
        let total = j["summary"][0]["total_time"].as_f64().expect("total_time");
        assert!((w.len_ps() as f64 - total * 1e12).abs() < 2.0, "{k}");
        let last = j["metadata"][0]["last_hw_timestamp"]
            .as_u64()
            .expect("last");
        assert_eq!(w.len_ps() / 1000, last, "{k}");
        let sg00 = nt
            .subgraphs
            .iter()
            .find(|s| s.name == "sg00")
            .expect("sg00");
        assert_eq!(sg00.duration_ps, Some(w.len_ps()), "{k}");
        assert_eq!(
            (nt.subgraph_of(4), nt.subgraph_of(5)),
            (Some("sg00"), Some("sg01"))
        );
        assert_eq!(nt.bad_sections, 0);
        let covered: usize = nt.sections.iter().map(|s| s.count).sum();
        assert_eq!(covered, nt.trace.len(), "{k}: sections tile the trace");
    }
}

/// Every instruction record of the six JSON profiles (3,530) is an executed word of the
/// NTFF: same subgraph, engine and pc, start within 1 ns, duration within 1 ns.
#[test]
fn every_profiled_instruction_is_a_start_end_pair() {
    let mut n = 0;
    for k in kernels() {
        let (nt, j) = (ntff(&k), profile_json(&k));
        let ex = nt.executed();
        assert_eq!(ex.unplaced, 0, "{k}");
        // (subgraph, engine, pc) → (start ns, duration ns) of each execution.
        type Key<'a> = (String, &'a str, u32);
        let mut pool: BTreeMap<Key<'_>, Vec<(f64, f64)>> = BTreeMap::new();
        for x in &ex.executed {
            pool.entry((x.subgraph.clone(), x.engine.profiler_name(), x.pc))
                .or_default()
                .push((
                    rel_ns(&nt, x.start_ps),
                    (x.end_ps - x.start_ps) as f64 / 1e3,
                ));
        }
        for r in j["instruction"].as_array().expect("instruction") {
            let key = (
                r["subgraph"].as_str().expect("sg").to_owned(),
                r["subgroup"].as_str().expect("engine"),
                r["pc"].as_u64().expect("pc") as u32,
            );
            let (ts, dur) = (
                r["timestamp"].as_f64().expect("ts"),
                r["duration"].as_f64().expect("dur"),
            );
            let found = pool.get_mut(&key).is_some_and(|v| {
                take(v, |&(s, d)| (s - ts).abs() <= 1.0 && (d - dur).abs() <= 1.0)
            });
            assert!(found, "{k}: {key:?} at {ts} ns for {dur} ns");
            n += 1;
        }
    }
    assert_eq!(n, 3530);
}

/// Every semaphore update of the six profiles is an event record: index, value, time.
#[test]
fn every_profiled_semaphore_update_is_an_event_record() {
    for k in kernels() {
        let (nt, j) = (ntff(&k), profile_json(&k));
        let mut pool: Vec<(Option<&str>, u8, u32, f64)> = nt
            .records()
            .filter_map(|(sg, r)| match r {
                Record::Event(e) if e.semaphore => Some((sg, e.index, e.value, rel_ns(&nt, e.ts))),
                _ => None,
            })
            .collect();
        let ups = j["semaphore_update"].as_array().expect("semaphore_update");
        assert!(ups.len() > 700, "{k}");
        for u in ups {
            let id = u["id"].as_str().expect("id");
            // "2" or "S[5] (Tensor)".
            let index: u8 = id
                .trim_start_matches("S[")
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
                .expect("index");
            let (sg, value, ts) = (
                u["subgraph"].as_str(),
                u["value"].as_u64().expect("value") as u32,
                u["timestamp"].as_f64().expect("ts"),
            );
            let found = take(&mut pool, |&(s, i, v, t)| {
                s == sg && i == index && v == value && (t - ts).abs() <= 1.01
            });
            assert!(found, "{k}: {id} = {value} at {ts}");
        }
    }
}

/// Every DMA packet of the six profiles (13,734) is a start/end record pair of its DMA
/// engine and queue: time, duration, byte count and CRC all equal.
#[test]
fn every_profiled_dma_packet_is_a_record_pair() {
    let mut n = 0;
    for k in kernels() {
        let (nt, j) = (ntff(&k), profile_json(&k));
        let (packets, unpaired) = nt.dma_packets();
        assert_eq!(unpaired, 0, "{k}");
        let mut pool: Vec<_> = packets
            .iter()
            .map(|p| {
                (
                    p.subgraph.as_str(),
                    p.dma_engine,
                    p.queue,
                    rel_ns(&nt, p.start_ps),
                    (p.end_ps - p.start_ps) as f64 / 1e3,
                    p.bytes,
                    p.crc,
                )
            })
            .collect();
        for d in j["dma"].as_array().expect("dma") {
            let num = |f: &str| d[f].as_str().and_then(|s| s.parse::<u64>().ok());
            let (sg, eng, q) = (
                d["subgraph"].as_str().expect("sg"),
                num("dma_engine").expect("dma_engine") as u16,
                num("dma_queue").expect("dma_queue") as u8,
            );
            let (ts, dur) = (
                d["timestamp"].as_f64().expect("ts"),
                d["duration"].as_f64().expect("dur"),
            );
            let (size, crc) = (
                d["transfer_size"].as_u64().expect("size") as u16,
                d["crc"].as_u64().expect("crc") as u16,
            );
            let found = take(&mut pool, |p| {
                p.0 == sg
                    && p.1 == eng
                    && p.2 == q
                    && (p.3 - ts).abs() <= 1.0
                    && (p.4 - dur).abs() <= 1.0
                    && p.5 == size
                    && p.6 == crc
            });
            assert!(found, "{k}: {sg} E{eng} Q{q} at {ts}");
            n += 1;
        }
    }
    assert_eq!(n, 13_734);
}

/// The model layers' records, decoded: the window is the published attention total
/// (359.874 us; the MoE's 275.780 us is 0.4% over the published 274.76 us, another capture),
/// and per sg00 engine the words executed in it with their first start and last end (ps
/// from the window's start).
#[test]
fn model_layer_records_decode_per_engine() {
    // (engine, words in the window, first start, last end).
    type Row = (Engine, usize, u64, u64);
    // (model, window ps, rows, (executed, unpaired, other marks), DMA packets).
    type Case = (&'static str, u64, [Row; 5], (usize, usize, usize), usize);
    let cases: [Case; 2] = [
        (
            "kgm-attn_tkg_v6",
            359_874_021,
            [
                (Engine::Pe, 807, 84_167, 359_811_938),
                (Engine::Act, 176, 3_641_661, 359_922_771),
                (Engine::Pool, 365, 6_115_824, 359_764_438),
                (Engine::Dve, 716, 4_043_327, 359_892_771),
                (Engine::Sp, 49, 7_919_988, 359_853_605),
            ],
            (2_289, 2, 344),
            13_603,
        ),
        (
            "kgm-moe_tkg_v6b",
            275_780_403,
            [
                (Engine::Pe, 1500, 84_167, 275_784_569),
                (Engine::Act, 494, 3_718_328, 279_707_063),
                (Engine::Pool, 974, 5_856_658, 275_765_403),
                (Engine::Dve, 413, 4_085_827, 275_753_111),
                (Engine::Sp, 43, 3_817_494, 275_728_736),
            ],
            (3_601, 2, 160),
            9_404,
        ),
    ];
    for (m, window, rows, (words, unpaired, other), packets) in cases {
        let nt = read_ntff(&fixtures().join(format!("real-models/{m}.ntff")));
        let w = nt.window.expect("window");
        assert_eq!(w.len_ps(), window, "{m}");
        let covered: usize = nt.sections.iter().map(|s| s.count).sum();
        assert_eq!((covered, nt.bad_sections), (nt.trace.len(), 0), "{m}");
        let ex = nt.executed();
        assert_eq!(
            (ex.executed.len(), ex.unpaired, ex.other, ex.unplaced),
            (words, unpaired, other, 0),
            "{m}"
        );
        for (e, n, first, last) in rows {
            let mine: Vec<_> = ex
                .executed
                .iter()
                .filter(|x| x.subgraph == "sg00" && x.engine == e)
                .filter(|x| x.start_ps >= w.start_ps && x.start_ps < w.end_ps)
                .collect();
            let f = mine.iter().map(|x| x.start_ps - w.start_ps).min();
            let l = mine.iter().map(|x| x.end_ps - w.start_ps).max();
            assert_eq!((mine.len(), f, l), (n, Some(first), Some(last)), "{m} {e}");
            // Each pc is a word of the loaded program.
            let p = nt.program("sg00", e).expect("program");
            assert!(mine.iter().all(|x| (x.pc as usize) < p.words()));
        }
        // The Mark::Other records sit on GpSimd DMA_DIRECT2D words (loaded 0xb8), one per
        // execution of each, plus (attention) 20 on Sync at slot 0.
        let pool = nt.program("sg00", Engine::Pool).expect("pool");
        let base = (pool.device_addr / 64) as u32 & neuron_isa::ntff::SLOT_MASK;
        for (_, r) in nt.records() {
            if let Record::Instr(i) = r {
                if i.mark == Mark::Other && i.engine == Engine::Pool {
                    let pc = (i.slot.wrapping_sub(base) & neuron_isa::ntff::SLOT_MASK) as usize;
                    assert_eq!(pool.bytes.get(pc * 64), Some(&0xb8), "{m} pc {pc}");
                    assert!(i.flag);
                }
            }
        }
        let (ps, unpaired) = nt.dma_packets();
        assert_eq!((ps.len(), unpaired), (packets, 0), "{m}");
    }
}

/// The kind byte names the engine: on every akc profile each instruction section holds
/// Start/End records of all five engines, and only the epilogue's branch carries `last`.
#[test]
fn instruction_records_carry_engine_and_mark() {
    for k in kernels() {
        let nt = ntff(&k);
        let s = nt
            .sections
            .iter()
            .find(|s| s.kind == SectionKind::Instructions && s.nc == 4)
            .expect("sg00 instructions");
        let mut seen = BTreeMap::new();
        for r in nt.section_records(s) {
            let Record::Instr(i) = Record::decode(s.kind, r) else {
                panic!("{k}: undecoded {r:?}");
            };
            *seen.entry((i.engine, i.mark == Mark::Start)).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 10, "{k}: {seen:?}");
        let ex = nt.executed();
        for x in ex.executed.iter().filter(|x| x.last) {
            let p = nt.program(&x.subgraph, x.engine).expect("program");
            assert_eq!(x.pc as usize + 1, p.words(), "{k}: last = final slot");
        }
        assert_eq!(ex.executed.iter().filter(|x| x.last).count(), 10, "{k}");
        // DMA records: start, end and the third record, one each per packet.
        let mut ev = BTreeMap::new();
        for (_, r) in nt.records() {
            if let Record::Dma(d) = r {
                *ev.entry(format!("{:?}", d.event)).or_insert(0usize) += 1;
            }
        }
        assert_eq!(ev.len(), 3, "{k}: {ev:?}");
        assert!(ev.values().all(|&n| n == ev["Start"]), "{k}: {ev:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any 16 bytes decode to something in every section kind.
    #[test]
    fn any_record_decodes(raw in proptest::array::uniform16(any::<u8>()), k in 0u64..8) {
        let r = TraceRecord { raw };
        let _ = Record::decode(SectionKind::Instructions, &r);
        let _ = Record::decode(SectionKind::Events, &r);
        let _ = Record::decode(SectionKind::Dma, &r);
        let _ = Record::decode(SectionKind::Other(k), &r);
    }

    /// Random bytes behind a plausible header never panic the reader or the decoders.
    #[test]
    fn random_files_never_panic(body in proptest::collection::vec(any::<u8>(), 0..4096),
                                toc in 0u32..4096) {
        let mut b = vec![0u8; 128];
        b[0] = 6;
        b[1..5].copy_from_slice(&toc.to_le_bytes());
        b.extend_from_slice(&body);
        if let Ok(nt) = Ntff::parse(&b) {
            let _ = nt.executed();
            let _ = nt.dma_packets();
            let _ = nt.records().count();
        }
    }

    /// A real profile with bytes overwritten anywhere (TOC, programs, records) never panics.
    #[test]
    fn corrupted_profiles_never_panic(edits in proptest::collection::vec((any::<u32>(), any::<u8>()), 1..16)) {
        let mut b = std::fs::read(fixtures().join("real-profiles/akc-fused_fp32_s512.ntff"))
            .expect("ntff");
        let toc = 128 + u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
        for (i, (at, v)) in edits.into_iter().enumerate() {
            // Half the edits in the TOC, where a byte moves offsets and sizes.
            let n = if i % 2 == 0 { toc } else { b.len() };
            let at = at as usize % n;
            b[at] = v;
        }
        if let Ok(nt) = Ntff::parse(&b) {
            let _ = nt.executed();
            let _ = nt.dma_packets();
            let _ = nt.records().count();
        }
    }
}
