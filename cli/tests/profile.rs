//! Profiles and traces users open: `run --profile-json` reads like AWS neuron-profile's JSON,
//! `profile-diff` compares a silicon profile with the emulated profile of the same NEFF, and
//! `run --trace` is a valid Chrome trace-event file (checked here, independently of the
//! writer) with named processes and threads, DMA tracks, wait flows and notifications.

mod common;

use common::ok;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuron-emu"));
    c.current_dir(repo());
    c.env_remove("NEURON_RT_LOG_LEVEL");
    c
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-prof-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

/// A file of `../shared/fixtures` (beside the repository), or a failure saying that folder is
/// missing: these tests need it and must fail, not skip, without it.
fn shared_fixture(rel: &str) -> String {
    let dir = repo().join("../shared/fixtures");
    assert!(
        dir.is_dir(),
        "the shared fixtures folder is missing: expected {} (../shared/fixtures beside the repository)",
        dir.display()
    );
    format!("../shared/fixtures/{rel}")
}

fn read_json(p: &PathBuf) -> Value {
    serde_json::from_slice(&std::fs::read(p).expect("written")).expect("valid JSON")
}

/// Run the LNC=2 attention kernel with both outputs asked for.
fn run_fused(d: &std::path::Path) -> (PathBuf, PathBuf) {
    let (prof, trace) = (d.join("emu.profile.json"), d.join("trace.json"));
    let out = bin()
        .args([
            "run",
            &shared_fixture("real-neff/akc-fused_bf16_s512.neff"),
            "--profile-json",
        ])
        .arg(&prof)
        .arg("--trace")
        .arg(&trace)
        .output()
        .expect("spawn");
    ok(&out);
    (prof, trace)
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn profile_json_reads_like_the_real_profile_and_diffs_against_it() {
    let d = tmpdir("diff");
    let (prof, _) = run_fused(&d);
    let real_path = repo().join(shared_fixture(
        "real-profiles/akc-fused_bf16_s512.profile.json",
    ));
    let (emu, real) = (read_json(&prof), read_json(&real_path));
    // Every key a record has in the emulated report is a key the real list's records have
    // (`execution` aside), with values of the same JSON type.
    for list in ["instruction", "dma", "semaphore_update", "summary"] {
        let (e, r) = (&emu[list][0], &real[list][0]);
        assert!(e.is_object(), "{list}: {emu:?}");
        for k in keys(e) {
            if k == "execution" {
                continue;
            }
            let kind = |v: &Value| {
                std::mem::discriminant(&match v {
                    Value::Number(_) => Value::Number(0.into()),
                    o => o.clone(),
                })
            };
            assert!(
                r.get(&k).is_some_and(|rv| kind(rv) == kind(&e[&k])),
                "{list}.{k}: {} vs real {:?}",
                e[&k],
                r.get(&k)
            );
        }
    }
    let s = &emu["summary"][0];
    for e in ["tensor", "scalar", "gpsimd", "vector", "sync"] {
        for k in ["active_time", "instruction_count", "instruction_time"] {
            assert!(s[format!("{e}_engine_{k}")].is_number(), "{e}_engine_{k}");
        }
    }
    let total = s["total_time"].as_f64().expect("total_time");
    assert!(
        total > 1e-5 && total < 1e-4,
        "seconds, as the real one: {total}"
    );
    let ins = emu["instruction"].as_array().expect("instruction");
    assert!(ins.iter().any(|i| i["label"] == "TensorMatrix"
        && i["opcode"] == "MATMUL"
        && i["operands"]
            .as_str()
            .is_some_and(|o| o.contains("S[5] (Tensor)++@complete"))));
    assert!(emu["semaphore_update"]
        .as_array()
        .expect("semaphore_update")
        .iter()
        .any(|u| u["id"] == "S[24] (qGpSimdDynamic)"));

    let out = bin()
        .arg("profile-diff")
        .arg(&real_path)
        .arg(&prof)
        .arg("--json")
        .output()
        .expect("spawn");
    let j: Value = serde_json::from_str(&ok(&out)).expect("json");
    let t = &j["total_time"];
    assert!(
        (t["real_us"].as_f64().expect("real") - 36.3516).abs() < 1e-3,
        "{t}"
    );
    assert!(t["emu_us"].as_f64().expect("emu") > 1.0, "{t}");
    let phases = &j["phases"][0];
    assert_eq!(phases["subgraph"], "sg00");
    let names: Vec<&str> = phases["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    assert_eq!(names, ["hand-off", "input", "body", "output", "epilogue"]);
    // The real phases add up to the window: hand-off from t=0 to the end notification.
    let sum: f64 = phases["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["real_us"].as_f64())
        .sum();
    assert!((sum - 36.3).abs() < 0.2, "{sum}");
    let mm = j["opcodes"]
        .as_array()
        .expect("opcodes")
        .iter()
        .find(|o| o["opcode"] == "MATMUL")
        .expect("MATMUL row");
    assert_eq!(mm["pairs"].as_u64(), Some(56), "{mm}");
    assert!(mm["median_error"].is_number() && mm["p90_abs_error"].is_number());
    assert_eq!(j["mismatched_opcodes"].as_u64(), Some(0));
    assert!(j["engines"]
        .as_array()
        .expect("engines")
        .iter()
        .any(|e| e["subgraph"] == "sg01" && e["engine"] == "Sync"));

    // The text form names every section.
    let out = bin()
        .arg("profile-diff")
        .arg(&real_path)
        .arg(&prof)
        .output()
        .expect("spawn");
    let text = ok(&out);
    for s in [
        "total_time",
        "phases of sg00",
        "hand-off",
        "engines",
        "opcodes",
        "MATMUL",
    ] {
        assert!(text.contains(s), "{s}: {text}");
    }
}

#[test]
fn profile_diff_refuses_malformed_files_with_a_reason() {
    let d = tmpdir("bad");
    let good = repo().join(shared_fixture(
        "real-profiles/akc-fused_bf16_s512.profile.json",
    ));
    let sparse = d.join("huge.json");
    std::fs::File::create(&sparse)
        .and_then(|f| f.set_len(300 << 20))
        .expect("sparse file");
    let cases: Vec<(&str, String, &str)> = vec![
        ("missing", String::new(), "No such file"),
        ("text", "not json".into(), "expected"),
        ("array", "[1, 2]".into(), "not a JSON object"),
        ("nosummary", r#"{"instruction": []}"#.into(), "total_time"),
        (
            "badlist",
            r#"{"summary": [{"total_time": 1e-5}], "instruction": 7}"#.into(),
            "'instruction' is not a list",
        ),
        (
            "badrecord",
            r#"{"summary": [{"total_time": 1e-5}], "instruction": [{"subgraph": "sg00", "label": "Tensor", "timestamp": 1}]}"#.into(),
            "instruction[0]: no valid 'pc'",
        ),
        (
            "baddur",
            r#"{"summary": [{"total_time": 1e-5}], "instruction": [{"subgraph": "sg00", "label": "Tensor", "pc": 3, "timestamp": 1, "opcode": "NOP", "duration": -4}]}"#.into(),
            "no valid 'duration'",
        ),
        ("huge", String::new(), "limit"),
    ];
    for (name, body, want) in cases {
        let p = match name {
            "huge" => sparse.clone(),
            "missing" => d.join("absent.json"),
            _ => {
                let p = d.join(format!("{name}.json"));
                std::fs::write(&p, body).expect("write");
                p
            }
        };
        for (a, b) in [(&good, &p), (&p, &good)] {
            let out = bin()
                .arg("profile-diff")
                .arg(a)
                .arg(b)
                .output()
                .expect("spawn");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}: {err}");
            assert!(
                err.contains(want) && err.contains(&p.display().to_string()),
                "{name}: {err}"
            );
            assert!(!err.contains("panicked"), "{name}: {err}");
        }
    }
}

/// The Chrome trace-event format's rules this trace must keep, checked without the writer's
/// code: returns the events by phase for further checks.
fn check_trace_event_format(doc: &Value) -> BTreeMap<String, Vec<Value>> {
    let evs = doc["traceEvents"].as_array().expect("traceEvents array");
    assert!(!evs.is_empty());
    let mut by: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let num = |e: &Value, k: &str| {
        e[k].as_f64()
            .filter(|v| v.is_finite())
            .unwrap_or_else(|| panic!("{k} not a finite number: {e}"))
    };
    let mut procs = BTreeSet::new();
    let mut threads = BTreeSet::new();
    let mut last_ts: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut slices: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let mut seen_other = false;
    for e in evs {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(e["name"].is_string(), "name: {e}");
        let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("pid: {e}"));
        match ph {
            "M" => {
                assert!(!seen_other, "metadata comes first: {e}");
                let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("tid: {e}"));
                match e["name"].as_str() {
                    Some("process_name") => {
                        assert!(e["args"]["name"].is_string(), "{e}");
                        procs.insert(pid);
                    }
                    Some("thread_name") => {
                        assert!(e["args"]["name"].is_string(), "{e}");
                        threads.insert((pid, tid));
                    }
                    Some("process_sort_index" | "thread_sort_index") => {
                        assert!(e["args"]["sort_index"].is_number(), "{e}")
                    }
                    other => panic!("unknown metadata event {other:?}"),
                }
            }
            "X" | "i" | "s" | "f" => {
                seen_other = true;
                let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("tid: {e}"));
                assert!(
                    threads.contains(&(pid, tid)) && procs.contains(&pid),
                    "track without names: {e}"
                );
                let ts = num(e, "ts");
                assert!(ts >= 0.0, "{e}");
                let last = last_ts.entry((pid, tid)).or_insert(f64::MIN);
                assert!(ts >= *last, "ts goes back on its track: {e}");
                *last = ts;
                match ph {
                    "X" => {
                        let dur = num(e, "dur");
                        assert!(dur >= 0.0, "{e}");
                        slices.entry((pid, tid)).or_default().push((ts, ts + dur));
                    }
                    "i" => assert!(
                        matches!(e["s"].as_str(), Some("g" | "p" | "t")),
                        "instant scope: {e}"
                    ),
                    _ => {
                        assert!(e["id"].is_u64() || e["id"].is_string(), "{e}");
                        assert!(e["cat"].is_string(), "{e}");
                        if ph == "f" {
                            assert_eq!(e["bp"], "e", "{e}");
                        }
                    }
                }
            }
            other => panic!("phase {other} is not used: {e}"),
        }
        by.entry(ph.to_string()).or_default().push(e.clone());
    }
    // Complete events on one engine track do not overlap (an engine runs one word at a time).
    for ((pid, tid), v) in &slices {
        if *tid <= 5 {
            for w in v.windows(2) {
                assert!(w[1].0 >= w[0].1 - 1e-6, "overlap on {pid}/{tid}: {w:?}");
            }
        }
    }
    // Flows: one start and one finish per id, the finish not before the start, each bound to
    // a slice of its track that encloses its time.
    let mut flows: BTreeMap<String, (Option<Value>, Option<Value>)> = BTreeMap::new();
    for e in by.get("s").into_iter().flatten() {
        let f = flows.entry(e["id"].to_string()).or_default();
        assert!(f.0.replace(e.clone()).is_none(), "two flow starts: {e}");
    }
    for e in by.get("f").into_iter().flatten() {
        let f = flows.entry(e["id"].to_string()).or_default();
        assert!(f.1.replace(e.clone()).is_none(), "two flow ends: {e}");
    }
    let encloses = |e: &Value| {
        let key = (
            e["pid"].as_u64().unwrap_or(0),
            e["tid"].as_u64().unwrap_or(0),
        );
        let ts = e["ts"].as_f64().unwrap_or(-1.0);
        slices
            .get(&key)
            .is_some_and(|v| v.iter().any(|(a, b)| *a <= ts && ts <= *b))
    };
    for (id, (s, f)) in &flows {
        let (Some(s), Some(f)) = (s, f) else {
            panic!("flow {id} is not paired");
        };
        assert_eq!((&s["cat"], &s["name"]), (&f["cat"], &f["name"]), "{id}");
        assert!(num(f, "ts") >= num(s, "ts"), "flow {id} goes back in time");
        assert!(encloses(s) && encloses(f), "flow {id} is bound to no slice");
    }
    by
}

#[test]
fn the_trace_is_valid_trace_event_json_with_named_tracks_flows_and_notifications() {
    let d = tmpdir("trace");
    let (_, trace) = run_fused(&d);
    let doc = read_json(&trace);
    let by = check_trace_event_format(&doc);
    let meta = &by["M"];
    let names = |kind: &str| -> Vec<String> {
        meta.iter()
            .filter(|e| e["name"] == kind)
            .filter_map(|e| e["args"]["name"].as_str().map(str::to_string))
            .collect()
    };
    let procs = names("process_name");
    assert!(
        procs
            .iter()
            .any(|p| p.contains("NC 0") && p.contains("LNC=2 core 0"))
            && procs
                .iter()
                .any(|p| p.contains("NC 1") && p.contains("LNC=2 core 1")),
        "{procs:?}"
    );
    let threads = names("thread_name");
    for t in [
        "Tensor (PE)",
        "Scalar (ACT)",
        "GpSimd (POOL)",
        "Vector (DVE)",
        "Sync (SP)",
    ] {
        assert!(threads.iter().any(|x| x == t), "{t}: {threads:?}");
    }
    assert!(
        threads.iter().any(|t| t.starts_with("DMA_DIRECT2D from")),
        "a DMA queue track: {threads:?}"
    );
    assert!(threads.iter().any(|t| t == "semaphores and events"));
    let x = &by["X"];
    assert!(x
        .iter()
        .any(|e| e["cat"] == "dma" && e["args"]["bytes"].as_u64() > Some(0)));
    assert!(x.iter().any(|e| e["name"] == "MATMUL"
        && e["args"]["operands"]
            .as_str()
            .is_some_and(|o| o.contains("acc_flags="))
        && e["args"]["pc"].is_u64()));
    let notes = &by["i"];
    assert!(notes
        .iter()
        .any(|e| e["cat"] == "notification" && e["name"] == "NOTIFY 2"));
    // Flows: the LNC=2 handshake and the DMA completions release waits.
    assert!(by.get("s").map_or(0, Vec::len) >= 10, "{:?}", by.get("s"));
}
