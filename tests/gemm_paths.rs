//! The two GEMM paths of the device model (`devmodel::gemm`: the portable SGEMM and AMX
//! tiles, chosen by `NEURON_EMU_GEMM`) on the real kernels: on each path every output stays
//! within its golden tolerance, device times are the same, the bf16 MATMULs really ran on
//! tiles where the host has AMX, and repeated runs on one path are bit-identical. On a host
//! without AMX the tile half says so and checks only the portable path. One test per
//! process: the switch is an environment variable, read when a core's PE state is created.

use neuron_e2e_tests::{max_abs_diff, outputs_f32, read_f32_npy, repo_path, run_real_once};

/// The real kernels with bf16 or fp16 MATMULs (the fp32 ones run on the SGEMM on every path).
const KERNELS: [&str; 4] = [
    "akc-baseline_bf16_s512",
    "akc-fused_bf16_s512",
    "akc-fused_bf16_s1024",
    "nkipy-matmul_small",
];

struct Run {
    outputs: Vec<(String, Vec<f32>)>,
    device_ps: u64,
    amx_macs: u64,
    sgemm_macs: u64,
}

fn run(stem: &str, path: &str) -> Run {
    std::env::set_var(neuron_devmodel::gemm::ENV, path);
    let (out, st0, st) = run_real_once(stem);
    let outputs = outputs_f32(&out);
    Run {
        outputs,
        device_ps: out.device_time_ps,
        amx_macs: st.amx_macs - st0.amx_macs,
        sgemm_macs: st.sgemm_macs - st0.sgemm_macs,
    }
}

fn bits(r: &Run) -> Vec<Vec<u32>> {
    r.outputs
        .iter()
        .map(|(_, v)| v.iter().map(|x| x.to_bits()).collect())
        .collect()
}

#[test]
fn both_gemm_paths_match_the_goldens_with_the_same_device_times() {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo_path("fixtures/real-golden/goldens.json")).expect("goldens.json"),
    )
    .expect("goldens.json parses");
    let amx = neuron_devmodel::gemm::amx::available();
    if !amx {
        eprintln!("AMX SKIPPED: this host has no usable AMX-BF16; checking the portable path only");
    }
    // `auto` and `amx` put bf16/fp8 MATMULs on tiles; fp16 stays on the SGEMM.
    let paths: &[&str] = if amx {
        &["portable", "auto", "amx"]
    } else {
        &["portable"]
    };
    for stem in KERNELS {
        let k = &manifest["kernels"][stem];
        let tol = k["tolerance"].as_f64().expect("tolerance");
        let runs: Vec<(&str, Run)> = paths.iter().map(|p| (*p, run(stem, p))).collect();
        let portable = &runs[0].1;
        assert_eq!(portable.amx_macs, 0, "{stem}: portable path used tiles");
        let fp16 = stem.starts_with("nkipy");
        for (path, r) in &runs {
            assert_eq!(
                r.device_ps, portable.device_ps,
                "{stem} {path}: device time depends on the host GEMM path"
            );
            let on_tiles = *path != "portable" && !fp16;
            assert_eq!(
                r.amx_macs > 0,
                on_tiles,
                "{stem} {path}: {} multiply-adds on tiles, {} on the SGEMM",
                r.amx_macs,
                r.sgemm_macs
            );
            for o in k["outputs"].as_array().expect("outputs") {
                let name = o["name"].as_str().expect("name");
                let file = o["file"].as_str().expect("file");
                let want = read_f32_npy(&repo_path(&format!("fixtures/real-golden/{file}")));
                let got = &r
                    .outputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("{stem}: no output {name}"))
                    .1;
                assert_eq!(got.len(), want.len(), "{stem}/{name}");
                let scale = want.iter().fold(0f32, |m, w| m.max(w.abs())) as f64;
                let err = max_abs_diff(got, &want) / scale;
                assert!(
                    err <= tol,
                    "{stem}/{name} {path}: max|got-want|/max|want| = {err} > {tol}"
                );
                eprintln!(
                    "{stem}/{name} {path}: rel err {err:.3e} (tolerance {tol}); {} MACs on tiles, {} on the SGEMM",
                    r.amx_macs, r.sgemm_macs
                );
            }
        }
        // Same path, same bits: the tile kernel's summation order is fixed.
        for (path, r) in &runs {
            assert_eq!(
                bits(&run(stem, path)),
                bits(r),
                "{stem} {path}: a second run gave other bits"
            );
        }
    }
}
