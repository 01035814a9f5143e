//! fp32 pass-pair fusion (`devmodel::cayman_exec::passpair`) on the real attention kernels:
//! with fusion on and off (`NEURON_EMU_PASS_PAIRS`), outputs stay within each kernel's golden
//! tolerance, device times are identical, and fusion halves the host multiply-adds of the
//! pairs it computes. One test per process: the switch is an environment variable, read when a
//! core's PE state is created or reset, so nothing else may run concurrently.

use neuron_e2e_tests::{
    execute_builtin, max_abs_diff, outputs_f32, read_f32_npy, real_neff, repo_path, setup,
};
use std::time::Duration;

const KERNELS: [&str; 6] = [
    "akc-baseline_bf16_s512",
    "akc-baseline_fp32_s512",
    "akc-baseline_fp32_s1024",
    "akc-fused_bf16_s512",
    "akc-fused_bf16_s1024",
    "akc-fused_fp32_s512",
];

/// Run `stem` once with fusion `on`: (its outputs as f32, device time, SGEMM multiply-adds).
fn run(stem: &str, on: bool) -> (Vec<(String, Vec<f32>)>, u64, u64) {
    std::env::set_var(
        neuron_devmodel::cayman_exec::passpair::ENV,
        if on { "1" } else { "0" },
    );
    let bytes = real_neff(stem);
    let s = setup(Duration::from_secs(60));
    let mut m =
        s.rt.load(&bytes, 0)
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
    let macs0 = s.emu.stats(0).map_or(0, |st| st.sgemm_macs);
    let out = execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
    let macs = s.emu.stats(0).map_or(0, |st| st.sgemm_macs) - macs0;
    let outs = outputs_f32(&out);
    (outs, out.device_time_ps, macs)
}

#[test]
fn pass_pairs_fused_and_unfused_match_the_goldens_with_the_same_device_times() {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo_path("fixtures/real-golden/goldens.json")).expect("goldens.json"),
    )
    .expect("goldens.json parses");
    for stem in KERNELS {
        let k = &manifest["kernels"][stem];
        let tol = k["tolerance"].as_f64().expect("tolerance");
        let (off, t_off, macs_off) = run(stem, false);
        let (on, t_on, macs_on) = run(stem, true);
        assert_eq!(t_on, t_off, "{stem}: device time changed with fusion");
        // Every akc kernel has fp32 pass pairs (the bf16 ones in their softmax products).
        assert!(
            macs_on < macs_off,
            "{stem}: fusion computed no pair ({macs_on} vs {macs_off} multiply-adds)"
        );
        for o in k["outputs"].as_array().expect("outputs") {
            let name = o["name"].as_str().expect("name");
            let file = o["file"].as_str().expect("file");
            let want = read_f32_npy(&repo_path(&format!("fixtures/real-golden/{file}")));
            let scale = want.iter().fold(0f32, |m, w| m.max(w.abs())) as f64;
            for (path, outs) in [("unfused", &off), ("fused", &on)] {
                let got = &outs
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("{stem}: no output {name}"))
                    .1;
                assert_eq!(got.len(), want.len(), "{stem}/{name}");
                let err = max_abs_diff(got, &want);
                assert!(
                    err / scale <= tol,
                    "{stem}/{name} {path}: max|got-want|/max|want| = {} > {tol}",
                    err / scale
                );
                eprintln!(
                    "{stem}/{name} {path}: rel err {:.3e} (tolerance {tol}), {} multiply-adds",
                    err / scale,
                    if path == "fused" { macs_on } else { macs_off }
                );
            }
        }
    }
}
