//! `nrt_profile_start` / `nrt_profile_stop` write the profile report of
//! `neuron-emu run --profile-json` (`neuron_runtime::profile`): the same top-level lists, one
//! `summary` entry per execution, and the Perfetto view of the engine spans.
// These tests call the C ABI directly, which is unsafe by nature.
#![allow(unsafe_code)]

use nrt::profile::{nrt_profile_start, nrt_profile_stop};
use nrt::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::ffi::{c_void, CString};
use std::ptr::null_mut;

fn repo(p: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(p)
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn nrt_profile_writes_the_run_profile_report() {
    std::env::set_var("NEURON_EMU", "1");
    let out = std::env::temp_dir().join(format!("nrt-profile-{}.json", std::process::id()));
    let file = CString::new(out.to_string_lossy().as_bytes()).expect("path");
    let e = CString::new("").expect("c string");
    unsafe {
        assert_eq!(nrt_init(1, e.as_ptr(), e.as_ptr()), 0);
        let neff = std::fs::read(repo("fixtures/neff/mlp.neff")).expect("fixture");
        let mut m = null_mut();
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, neff.len(), -1, -1, &mut m),
            0
        );
        let (mut ins, mut outs) = (null_mut(), null_mut());
        assert_eq!(nrt_allocate_tensor_set(&mut ins), 0);
        assert_eq!(nrt_allocate_tensor_set(&mut outs), 0);
        let (xn, yn) = (CString::new("x").expect("x"), CString::new("y").expect("y"));
        let (mut xt, mut yt) = (null_mut(), null_mut());
        assert_eq!(nrt_tensor_allocate(0, 0, 131072, xn.as_ptr(), &mut xt), 0);
        assert_eq!(nrt_tensor_allocate(0, 0, 32768, yn.as_ptr(), &mut yt), 0);
        assert_eq!(nrt_add_tensor_to_tensor_set(ins, xn.as_ptr(), xt), 0);
        assert_eq!(nrt_add_tensor_to_tensor_set(outs, yn.as_ptr(), yt), 0);
        assert_eq!(nrt_profile_start(m, file.as_ptr()), 0);
        assert_eq!(nrt_execute(m, ins, outs), 0);
        assert_eq!(nrt_execute(m, ins, outs), 0);
        assert_eq!(nrt_profile_stop(file.as_ptr()), 0);
        nrt_unload(m);
        nrt_close();
    }
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&out).expect("profile written")).expect("json");
    let _ = std::fs::remove_file(&out);
    // The same document shape as the CLI's report (built by the same function).
    use neuron_runtime::profile::{report, Capture, Meta};
    let cli_shape = report(
        &Meta::default(),
        &[Capture {
            detail: true,
            ..Capture::default()
        }],
    );
    assert_eq!(keys(&doc), keys(&cli_shape));
    for k in [
        "instruction",
        "dma",
        "semaphore_update",
        "summary",
        "traceEvents",
    ] {
        assert!(doc[k].is_array(), "{k}");
    }
    let summary = doc["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 2, "one entry per execution");
    for (i, s) in summary.iter().enumerate() {
        let t = s["total_time"].as_f64().expect("total_time (s)");
        assert!(t > 0.0 && t < 1e-3, "{t}");
        assert_eq!(s["execution"].as_u64(), Some(i as u64));
    }
    assert_eq!(doc["engine_span"].as_array().map(Vec::len), Some(10));
    assert_eq!(doc["profile_info"][0]["executions"].as_u64(), Some(2));
    assert_eq!(
        doc["profile_info"][0]["instruction_detail"].as_bool(),
        Some(false),
        "the ABI gives libnrt no instruction records"
    );
    let spans = doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert_eq!(spans, 10, "2 executions x 5 engines");
}
