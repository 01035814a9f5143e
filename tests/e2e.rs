//! End-to-end: runtime -> driver ABI -> emulator -> device model, on the project fixtures.

use neuron_abi::arch::Arch;
use neuron_e2e_tests::{
    builtin_input, execute_builtin, max_abs_diff, read_f32_npy, repo_path, setup,
};
use neuron_isa::Dtype;
use neuron_kbuild::kernels::{self, Broken};
use neuron_runtime::NrtStatus;
use std::time::{Duration, Instant};

fn mlp_bytes() -> Vec<u8> {
    std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("fixtures/neff/mlp.neff")
}

fn bf16_to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect()
}

#[test]
fn checked_in_fixture_is_what_the_generator_builds() {
    let fresh = kernels::mlp().expect("build mlp");
    assert!(
        fresh == mlp_bytes(),
        "fixtures/neff/mlp.neff is stale: run `cargo run -p neuron-kbuild --example gen_fixtures`"
    );
}

#[test]
fn mlp_matches_the_independent_golden() {
    let s = setup(Duration::from_secs(30));
    let mut m = s.rt.load(&mlp_bytes(), 0).expect("load");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let out = m.execute(&[("x", &x)]).expect("execute");
    assert_eq!(out.outputs.len(), 1);
    let (info, y) = &out.outputs[0];
    assert_eq!(info.name, "y");
    assert_eq!(info.shape, vec![128, 128]);
    let got = bf16_to_f32(y);
    let want = read_f32_npy(&repo_path("fixtures/neff/mlp.golden/y.npy"));
    assert_eq!(got.len(), want.len());
    // Metric: max |got - want| over all elements, relative to max |want|; bf16 tolerance 2e-2.
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(err <= 2e-2 * scale, "max abs err {err} vs max |y| {scale}");
    assert!(out.device_time_ps > 0);
}

#[test]
fn runs_are_bit_identical_in_outputs_and_device_time() {
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let mut results = Vec::new();
    for _ in 0..2 {
        let s = setup(Duration::from_secs(30));
        let mut m = s.rt.load(&mlp_bytes(), 0).expect("load");
        // Two executions of one loaded model, and two independent devices.
        let a = m.execute(&[("x", &x)]).expect("execute");
        let b = m.execute(&[("x", &x)]).expect("execute again");
        assert_eq!(a, b);
        results.push(a);
    }
    assert_eq!(results[0].outputs, results[1].outputs);
    assert_eq!(results[0].device_time_ps, results[1].device_time_ps);
}

/// A NEFF parsed by the caller (`Runtime::load_neff`, as a fault campaign loads one NEFF in
/// every experiment) loads as its bytes do: the same outputs, device time, memory per
/// category, name and datastore id, on the project's MLP and a real kernel.
#[test]
fn a_parsed_neff_loads_as_its_bytes_do() {
    for bytes in [
        mlp_bytes(),
        neuron_e2e_tests::real_neff("akc-fused_bf16_s512"),
    ] {
        let parsed = neuron_neff::Neff::parse(&bytes).expect("parse");
        let run = |from_bytes: bool| {
            let s = setup(Duration::from_secs(30));
            let mut m = if from_bytes {
                s.rt.load(&bytes, 0)
            } else {
                s.rt.load_neff(&parsed, 0)
            }
            .expect("load");
            let out = execute_builtin(&mut m).expect("execute");
            (
                out,
                format!("{:?}", m.usage()),
                m.name().to_string(),
                m.datastore_id(),
            )
        };
        let (a, b) = (run(true), run(false));
        assert_eq!(a.0.outputs, b.0.outputs, "{}", a.2);
        assert_eq!(a.0.device_time_ps, b.0.device_time_ps, "{}", a.2);
        assert_eq!((&a.1, &a.2, a.3), (&b.1, &b.2, b.3));
    }
}

#[test]
fn an_engine_that_never_finishes_times_out() {
    let s = setup(Duration::from_millis(300));
    let mut m =
        s.rt.load(&kernels::broken(Broken::Hang).expect("build"), 0)
            .expect("load");
    let input = vec![0u8; 128 * 4 * 4];
    let t = Instant::now();
    let e = m.execute(&[("in", &input)]).expect_err("must time out");
    let took = t.elapsed();
    assert_eq!(e.status, NrtStatus::Timeout);
    assert_eq!(e.status.code(), 5);
    assert!(
        e.message.contains(
            "(FATAL-RT-UNDEFINED-STATE) execution timeout (300 ms) on Neuron Device 0 NC 0"
        ),
        "{}",
        e.message
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(10),
        "took {took:?}"
    );
    // The core is now in an undefined state: further executions are refused.
    assert_eq!(
        m.execute(&[("in", &input)])
            .expect_err("unrecoverable")
            .status,
        NrtStatus::ExecUnitUnrecoverable
    );
}

#[test]
fn out_of_bounds_sbuf_access_reports_exec_oob_with_engine_and_pc() {
    let s = setup(Duration::from_secs(10));
    let mut m =
        s.rt.load(&kernels::broken(Broken::SbufOutOfBounds).expect("build"), 0)
            .expect("load");
    let e = m.execute(&[("in", &vec![0u8; 2048])]).expect_err("oob");
    assert_eq!(e.status, NrtStatus::ExecOob);
    // DVE's NEFF words start at pc 65 (the trn2 prologue length, docs/isa/cayman.md §5.1):
    // DRAIN, SET_ORDERING_MODE, then the TENSOR_SCALAR.
    assert!(
        e.message
            .contains("engine Vector pc 67 opcode 0x43 (TENSOR_SCALAR)"),
        "{}",
        e.message
    );
}

#[test]
fn unknown_opcode_fails_the_load_with_nrt_invalid() {
    let s = setup(Duration::from_secs(10));
    let e =
        s.rt.load(&kernels::broken(Broken::UnknownOpcode).expect("build"), 0)
            .expect_err("bad opcode");
    assert_eq!(e.status, NrtStatus::Invalid);
    // ACT's NEFF words start at pc 55: DRAIN, SET_ORDERING_MODE, then the bad word.
    assert_eq!(e.message, "sg00 engine Scalar pc 57: unknown opcode 0xd6");
}

#[test]
fn execute_checks_input_names_and_sizes() {
    let s = setup(Duration::from_secs(10));
    let mut m = s.rt.load(&mlp_bytes(), 0).expect("load");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let e = m.execute(&[]).expect_err("missing");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(e.message.contains("missing input tensor 'x'"));
    let e = m.execute(&[("x", &x[..100])]).expect_err("size");
    assert!(
        e.message
            .contains("input tensor 'x' is 100 bytes, the model expects 131072"),
        "{}",
        e.message
    );
    let e = m.execute(&[("x", &x), ("z", &x)]).expect_err("unknown");
    assert!(e.message.contains("unknown input tensor 'z'"));
    // The model still works after rejected calls.
    m.execute(&[("x", &x)]).expect("execute");
}

#[test]
fn project_neffs_are_real_trn2_neffs_and_unknown_bits_are_refused() {
    // No project feature bit: the runtime loads them through its real-NEFF path.
    let mut bytes = mlp_bytes();
    let h = neuron_neff::Neff::parse(&bytes).expect("parse");
    assert_eq!(h.header().feature_bits, 0);
    for k in [Broken::Hang, Broken::SbufOutOfBounds, Broken::UnknownOpcode] {
        let b = kernels::broken(k).expect("build");
        assert_eq!(
            neuron_neff::Neff::parse(&b)
                .expect("parse")
                .header()
                .feature_bits,
            0
        );
    }
    let g = kernels::gemm_bench(2).expect("build");
    assert_eq!(
        neuron_neff::Neff::parse(&g)
            .expect("parse")
            .header()
            .feature_bits,
        0
    );
    // Every word decodes as a known trn2 opcode.
    for (name, data) in h.members() {
        if name.ends_with(".bin") {
            for w in neuron_isa::cayman::CaymanInstr::decode_all(
                neuron_isa::cayman::Namespace::Neff,
                data,
            ) {
                assert!(w.opcode.is_known(), "{name}: {:?}", w.opcode);
            }
        }
    }
    let s = setup(Duration::from_secs(10));
    // The project's old test-encoding bit: known to the reader, refused by the runtime.
    bytes[544..552].copy_from_slice(&neuron_neff::FEATURE_EMU_TEST_ISA.to_le_bytes());
    let e = s.rt.load(&bytes, 0).expect_err("test-encoding NEFF");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(e.message.contains("test-encoding"), "{}", e.message);
    bytes[544..552].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let e = s.rt.load(&bytes, 0).expect_err("unknown feature");
    assert_eq!(e.status, NrtStatus::UnsupportedNeffVersion);
}

#[test]
fn gemm_kernel_matches_a_plain_rust_reference() {
    let n = 3u32;
    let s = setup(Duration::from_secs(10));
    let mut m =
        s.rt.load(&kernels::gemm_bench(n).expect("build"), 0)
            .expect("load");
    let a = neuron_kbuild::prng::uniform(7, 128 * 128, 1.0);
    let b = neuron_kbuild::prng::uniform(8, 128 * 512, 1.0);
    let ab: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bb: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out = m.execute(&[("a", &ab), ("b", &bb)]).expect("execute");
    let c: Vec<f32> = out.outputs[0]
        .1
        .chunks_exact(4)
        .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    // Plain triple loop in f64: c[i][j] = n * sum_k a[k][i] * b[k][j].
    for i in (0..128).step_by(17) {
        for j in (0..512).step_by(31) {
            let want: f64 = n as f64
                * (0..128)
                    .map(|k| a[k * 128 + i] as f64 * b[k * 512 + j] as f64)
                    .sum::<f64>();
            let got = c[i * 512 + j] as f64;
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "({i},{j}) {got} vs {want}"
            );
        }
    }
}

/// The compiler-produced NEFFs run on the device model and match the numpy goldens of
/// `fixtures/real-golden` (computed from the kernels' math, not from their instructions).
/// `nkipy-matmul_large` needs a 4 GiB input and is checked by its reduced golden elsewhere.
/// One execution with the built-in seeded inputs (the ones `neuron-emu run` uses).
#[test]
fn real_neffs_match_their_independent_goldens() {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo_path("fixtures/real-golden/goldens.json")).expect("goldens.json"),
    )
    .expect("goldens.json parses");
    let kernels = manifest["kernels"].as_object().expect("kernels");
    let mut ran = 0;
    for (stem, k) in kernels {
        if k["outputs"][0]["reduced"] == true {
            continue;
        }
        let tol = k["tolerance"].as_f64().expect("tolerance");
        let bytes = std::fs::read(repo_path(&format!(
            "../shared/fixtures/real-neff/{stem}.neff"
        )))
        .expect("real NEFF fixture");
        let s = setup(Duration::from_secs(60));
        let mut m =
            s.rt.load(&bytes, 0)
                .unwrap_or_else(|e| panic!("{stem}: {e}"));
        let out = execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(out.device_time_ps > 0, "{stem}: no device time");
        for o in k["outputs"].as_array().expect("outputs") {
            let name = o["name"].as_str().expect("name");
            let (info, raw) = out
                .outputs
                .iter()
                .find(|(t, _)| t.name == name)
                .unwrap_or_else(|| panic!("{stem}: no output {name}"));
            let got: Vec<f32> = raw
                .chunks_exact(info.dtype.size())
                .map(|c| neuron_isa::dtype::load_f32(info.dtype, c))
                .collect();
            let file = o["file"].as_str().expect("file");
            let want = read_f32_npy(&repo_path(&format!("fixtures/real-golden/{file}")));
            assert_eq!(got.len(), want.len(), "{stem}/{name}");
            let scale = want.iter().fold(0f32, |m, w| m.max(w.abs())) as f64;
            let err = max_abs_diff(&got, &want);
            assert!(
                err / scale <= tol,
                "{stem}/{name}: max|got-want|/max|want| = {} > {tol}",
                err / scale
            );
        }
        ran += 1;
    }
    assert_eq!(ran, 7);
}

/// An LNC=2 NEFF loads on any core pair: at NC 2 its subgraphs run on cores 2 and 3 and give the
/// same numbers as at NC 0; at NC 7 there is no core 8.
#[test]
fn real_neff_runs_on_another_core_pair() {
    let bytes = std::fs::read(repo_path(
        "../shared/fixtures/real-neff/nkipy-matmul_small.neff",
    ))
    .expect("fixture");
    let x = builtin_input(Dtype::F16, 128 * 256, 0);
    let y = builtin_input(Dtype::F16, 256 * 128, 1);
    let s = setup(Duration::from_secs(30));
    let run = |nc: u32| {
        let mut m = s.rt.load(&bytes, nc).expect("load");
        m.execute(&[("x", &x), ("y", &y)]).expect("execute")
    };
    let (a, b) = (run(0), run(2));
    assert_eq!(a.outputs[0].1, b.outputs[0].1);
    assert_eq!(a.device_time_ps, b.device_time_ps);
    let err = s.rt.load(&bytes, 7).expect_err("no core 8");
    assert_eq!(err.status, NrtStatus::LoadNotEnoughNc, "{}", err.message);
}

#[test]
fn reloading_after_a_fault_recovers_the_core() {
    let s = setup(Duration::from_millis(300));
    let input = vec![0u8; 2048];
    let mut bad =
        s.rt.load(&kernels::broken(Broken::SbufOutOfBounds).expect("build"), 0)
            .expect("load");
    assert_eq!(
        bad.execute(&[("in", &input)]).expect_err("oob").status,
        NrtStatus::ExecOob
    );
    drop(bad);
    let mut hang =
        s.rt.load(&kernels::broken(Broken::Hang).expect("build"), 0)
            .expect("load");
    assert_eq!(
        hang.execute(&[("in", &input)]).expect_err("hang").status,
        NrtStatus::Timeout
    );
    drop(hang);
    // Loading resets the core, so the next model runs normally.
    let mut m = s.rt.load(&mlp_bytes(), 0).expect("reload");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let out = m.execute(&[("x", &x)]).expect("runs after the faults");
    let got = bf16_to_f32(&out.outputs[0].1);
    let want = read_f32_npy(&repo_path("fixtures/neff/mlp.golden/y.npy"));
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(err <= 2e-2, "{err}");
}

/// Device times pinned to the picosecond (the MLP fixture, and an LNC=2 attention kernel whose
/// prologue, handshake and calibrated costs all take part): a change to the timing model or
/// the scheduler shows up here and must be made on purpose — update these numbers and the
/// tables of `docs/timing.md` together.
#[test]
fn device_times_are_pinned() {
    let s = setup(Duration::from_secs(60));
    let mut m = s.rt.load(&mlp_bytes(), 0).expect("load");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let mlp = m.execute(&[("x", &x)]).expect("execute").device_time_ps;
    let bytes = std::fs::read(repo_path(
        "../shared/fixtures/real-neff/akc-fused_bf16_s512.neff",
    ))
    .expect("fixture");
    let mut m = s.rt.load(&bytes, 0).expect("load");
    let akc = execute_builtin(&mut m).expect("execute").device_time_ps;
    // Issue 15 (start hand-off by queue kind, runtime words at their issue interval,
    // TENSOR_LOAD by registers, peer WRITE, software-DGE start-up, barrier hops) moved these
    // from (14_313_354, 21_877_796); silicon's total for akc-fused_bf16_s512 is 36_351_609.
    // Issue 17's MATMUL column rate (`calib::MM_INIT_COLUMNS`: a 16-bit MATMUL costs its
    // moving columns at the fitted rate, floored at 64; AWS's `max(N, 64)` cycles) moved the
    // MLP, whose bf16 MATMULs stream 128 columns, from 23_840_021 (378 ns each, the 512-column
    // constant); no akc MATMUL streams other than 128 or 512 columns, so akc did not move.
    // Issue 17's DVE/ACT wake-up after a blocking wait and ACTIVATE's service time
    // (`calib::TRN2_WAKE`, `TRN2_SERVICE`, fitted on the akc and attention NTFF records) moved
    // akc from 35_430_080 and the MLP from 21_853_771. Issue 17's unblocked DVE/ACT words
    // completing the wake-up after their interval (`calib::with_wake`: silicon's records of
    // unblocked words are as long as of blocked ones) moved akc from 35_714_663; the MLP did
    // not move.
    assert_eq!(
        (mlp, akc),
        (22_020_014, 35_736_912),
        "MLP, akc-fused_bf16_s512 device_time_ps"
    );
}

/// Functional mode (`CostTable::functional`) changes when things happen, never what: the
/// outputs of the MLP and of an LNC=2 attention kernel are bit-identical to the timed run's,
/// and the device time is only an order of events (far shorter).
#[test]
fn functional_mode_computes_what_timed_mode_does() {
    let paths = [
        "fixtures/neff/mlp.neff",
        "../shared/fixtures/real-neff/akc-fused_bf16_s512.neff",
    ];
    for p in paths {
        let bytes = std::fs::read(repo_path(p)).expect("fixture");
        let s = setup(Duration::from_secs(60));
        let mut m = s.rt.load(&bytes, 0).expect("load");
        let timed = execute_builtin(&mut m).expect("timed run");
        let cost = neuron_devmodel::ArchProfile::new(Arch::V3Trn2).cost;
        assert!(s.emu.set_cost(0, cost.functional()));
        let func = execute_builtin(&mut m).expect("functional run");
        assert_eq!(func.outputs, timed.outputs, "{p}: outputs");
        assert!(
            func.device_time_ps * 4 < timed.device_time_ps,
            "{p}: {} vs {} ps",
            func.device_time_ps,
            timed.device_time_ps
        );
        assert!(s.emu.set_cost(0, cost));
        let again = execute_builtin(&mut m).expect("timed again");
        assert_eq!(
            again.device_time_ps, timed.device_time_ps,
            "{p}: back to timed"
        );
    }
}
