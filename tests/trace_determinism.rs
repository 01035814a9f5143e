//! Device timelines are a function of the program and its inputs only: the MLP fixture traced
//! 20 times, each on a fresh emulator, while another thread keeps a host core busy, gives the
//! same trace every time (host load may change how fast the device thread runs, never what
//! it records).

use neuron_e2e_tests::{builtin_input, repo_path, setup};
use neuron_isa::Dtype;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn mlp_traces_are_identical_under_host_load() {
    let neff = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("fixture");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let burner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut v = 0u64;
            while !stop.load(Ordering::Relaxed) {
                v = std::hint::black_box(v.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        })
    };
    let mut first: Option<String> = None;
    for run in 0..20 {
        let s = setup(Duration::from_secs(60));
        s.emu.with_device(0, |d| d.set_tracing(true));
        let mut m = s.rt.load(&neff, 0).expect("load");
        m.execute(&[("x", &x)]).expect("execute");
        let trace = s.emu.with_device(0, |d| d.take_trace()).expect("device 0");
        assert!(!trace.is_empty());
        let bytes = format!("{trace:?}");
        match &first {
            None => first = Some(bytes),
            Some(f) => assert!(*f == bytes, "run {run}: the trace differs from run 0"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    burner.join().expect("burner");
}
