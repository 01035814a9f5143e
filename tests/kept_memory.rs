//! Devices made on the shared memory of devices gone before them
//! (`neuron_emulator::keep_device_memory`, what a fault campaign turns on): every run the
//! same outputs and device time as on fresh memory, after runs that left data in SBUF,
//! PSUM, rings and host chunks, and after one that hung. Its own test binary: the keeping
//! is process-wide.

use neuron_e2e_tests::{execute_builtin, real_neff, repo_path, setup};
use neuron_kbuild::kernels::{self, Broken};
use neuron_runtime::NrtStatus;
use std::time::Duration;

/// Outputs and device time of one execution on a fresh emulator (dropped before returning).
fn run(neff: &[u8]) -> (Vec<(String, Vec<u8>)>, u64) {
    let s = setup(Duration::from_secs(60));
    let mut m = s.rt.load(neff, 0).expect("load");
    let out = execute_builtin(&mut m).expect("execute");
    let outputs = out
        .outputs
        .iter()
        .map(|(t, b)| (t.name.clone(), b.clone()))
        .collect();
    (outputs, out.device_time_ps)
}

fn hang() {
    let s = setup(Duration::from_millis(200));
    let mut m =
        s.rt.load(&kernels::broken(Broken::Hang).expect("build"), 0)
            .expect("load");
    let e = m
        .execute(&[("in", &vec![0u8; 128 * 4 * 4])])
        .expect_err("must time out");
    assert_eq!(e.status, NrtStatus::Timeout);
}

#[test]
fn runs_on_kept_memory_match_runs_on_fresh_memory() {
    let mlp = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("mlp.neff");
    let akc = real_neff("akc-fused_bf16_s512");
    let fresh = [run(&mlp), run(&akc)];
    neuron_emulator::keep_device_memory(1);
    let before = neuron_emulator::device_memory_reused();
    for round in 0..2 {
        assert!(run(&akc) == fresh[1], "akc-fused_bf16_s512, round {round}");
        assert!(run(&mlp) == fresh[0], "mlp.neff after akc, round {round}");
        hang();
        assert!(
            run(&mlp) == fresh[0],
            "mlp.neff after a hang, round {round}"
        );
    }
    let reused = neuron_emulator::device_memory_reused() - before;
    neuron_emulator::keep_device_memory(0);
    // The first device of the loop may take the last fresh run's arena too.
    assert!(reused >= 7, "devices on kept memory: {reused} of 8");
}
