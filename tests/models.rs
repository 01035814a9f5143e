//! The two model layers of `shared/fixtures/real-models` (issue 17) end to end: load through
//! the ABI, run with the inputs of `fixtures/real-golden/gen_model_goldens.py` (regenerated
//! here from the same SplitMix64 recipe), compare with its numpy goldens; and bad inputs a
//! real model can get (expert ids out of range) end as a DMA error with its NRT status.

use neuron_e2e_tests::{execute_builtin, max_abs_diff, read_f32_npy, repo_path, setup};
use neuron_runtime::NrtStatus;
use std::time::Duration;

const MOE: &str = "../shared/fixtures/real-models/kgm-moe_tkg_v6b.neff";
const ATTN: &str = "../shared/fixtures/real-models/kgm-attn_tkg_v6.neff";
/// gen_model_goldens.py: input `i` has SplitMix seed `RUN_SEED·1000 + i + 1`.
const RUN_SEED: u64 = 17;
const E: usize = 128;
const K: usize = 8;
const I: usize = 256;
const HID: usize = 2048;

/// Output `n` (0-based) of SplitMix64(seed) in counter form (gen_real_goldens.splitmix_at).
fn splitmix_at(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add((n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Element `n` of input `index`'s stream, uniform in [-1, 1) (exact in f32).
fn uniform(index: u64, n: u64) -> f64 {
    let z = splitmix_at(RUN_SEED * 1000 + index + 1, n);
    ((z >> 40) as f64 / (1u64 << 23) as f64 - 1.0) as f32 as f64
}

/// The bf16 bytes of `v` (via f32, ties to even: the generator's `rbf`).
fn bf16(v: f64) -> [u8; 2] {
    half::bf16::from_f32(v as f32).to_bits().to_le_bytes()
}

/// bf16 bytes of `scale · uniform(index, first..first + n)`.
fn bf16_uniform(index: u64, n: usize, scale: f64) -> Vec<u8> {
    (0..n as u64)
        .flat_map(|k| bf16(scale * uniform(index, k)))
        .collect()
}

/// The MoE layer's inputs (gen_model_goldens.moe_small_inputs and the expert weights).
fn moe_inputs() -> Vec<(String, Vec<u8>)> {
    let logits: Vec<f64> = (0..K as u64).map(|k| 2.0 * uniform(0, k)).collect();
    let max = logits.iter().cloned().fold(f64::MIN, f64::max);
    let w: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = w.iter().sum();
    let weights: Vec<u8> = w
        .iter()
        .flat_map(|x| ((x / sum) as f32).to_le_bytes())
        .collect();
    let mut keys: Vec<(u64, usize)> = (0..E)
        .map(|e| (splitmix_at(RUN_SEED * 1000 + 2, e as u64), e))
        .collect();
    keys.sort();
    let ids: Vec<u8> = keys[..K]
        .iter()
        .flat_map(|(_, e)| (*e as i32).to_le_bytes())
        .collect();
    let x: Vec<f64> = (0..HID as u64).map(|k| uniform(4, k)).collect();
    let rms = (x.iter().map(|v| v * v).sum::<f64>() / HID as f64).sqrt();
    let hidden: Vec<u8> = x.iter().flat_map(|v| bf16(v / rms)).collect();
    vec![
        ("input0".into(), weights),
        ("input1".into(), ids),
        ("input2".into(), bf16_uniform(2, E * I * HID, 0.05)),
        ("input3".into(), bf16_uniform(3, E * HID * 2 * I, 0.05)),
        ("input4".into(), hidden),
    ]
}

fn run(
    neff: &str,
    inputs: &[(String, Vec<u8>)],
) -> Result<neuron_runtime::ExecOutput, neuron_runtime::NrtError> {
    let bytes = std::fs::read(repo_path(neff)).expect("model-layer fixture");
    let s = setup(Duration::from_secs(120));
    let mut m = s.rt.load(&bytes, 0).expect("the layer loads");
    let refs: Vec<(&str, &[u8])> = inputs
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    m.execute(&refs)
}

/// max|got − want| / max|want| of a bf16 output against a golden `.npy`.
fn rel_err(raw: &[u8], golden: &str) -> f64 {
    let want = read_f32_npy(&repo_path(golden));
    let got: Vec<f32> = raw
        .chunks_exact(2)
        .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect();
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs() as f64));
    max_abs_diff(&got, &want) / scale
}

/// The whole MoE layer (router weights, top-8 expert ids, 384 MiB of expert weights gathered
/// by id through the register-offset DMAs, the DMA-queue blocks that bring the ids in and the
/// output out) matches its golden within the bf16 tolerance (2e-2).
#[test]
fn moe_layer_matches_its_numpy_golden() {
    let out = run(MOE, &moe_inputs()).expect("the MoE layer runs");
    let (info, raw) = &out.outputs[0];
    assert_eq!(info.name, "output0");
    let rel = rel_err(raw, "fixtures/real-golden/kgm-moe_tkg_v6b/output0.npy");
    assert!(rel <= 2e-2, "MoE rel {rel}");
    // Pinned (deterministic emulated time; silicon's NTFF window is 275.780 µs): a change
    // of the timing model shows here and in `docs/timing.md` "Model layers".
    assert_eq!(out.device_time_ps, 256_262_428, "MoE device_time_ps");
}

/// An expert id past the 128 experts sends the gather's offset past its bound register: the
/// run fails with a DMA error and an NRT status, not a host panic.
#[test]
fn moe_expert_id_out_of_range_is_a_dma_error() {
    let mut inputs = moe_inputs();
    inputs[1].1[12..16].copy_from_slice(&200i32.to_le_bytes());
    let err = run(MOE, &inputs).expect_err("expert 200 of 128");
    assert_eq!(err.status, NrtStatus::ExecHwErrDmaAbort, "{}", err.message);
    assert!(err.message.contains("DMA_DIRECT2D"), "{}", err.message);
}

/// The attention layer's inputs (gen_model_goldens.attn_inputs): position 640 after 640 cached
/// tokens, its RoPE row, K/V caches, norm weights, projections and a normalised hidden state.
fn attn_inputs() -> Vec<(String, Vec<u8>)> {
    const D: usize = 128;
    const S: usize = 640;
    let pos = S as f64;
    let emb: Vec<f64> = (0..D)
        .map(|i| pos * (1.0 / 1e6f64.powf((2 * (i % (D / 2))) as f64 / D as f64)))
        .collect();
    let x: Vec<f64> = (0..HID as u64).map(|k| uniform(10, k)).collect();
    let rms = (x.iter().map(|v| v * v).sum::<f64>() / HID as f64).sqrt();
    let norm_w = |index| (0..D as u64).flat_map(move |k| bf16(1.0 + 0.1 * uniform(index, k)));
    vec![
        ("input0".into(), (S as i32).to_le_bytes().to_vec()),
        (
            "input1".into(),
            emb.iter().flat_map(|e| bf16(e.sin())).collect(),
        ),
        (
            "input2".into(),
            emb.iter().flat_map(|e| bf16(e.cos())).collect(),
        ),
        ("input3".into(), bf16_uniform(3, 4 * S * D, 0.5)),
        ("input4".into(), bf16_uniform(4, 4 * S * D, 0.5)),
        ("input5".into(), norm_w(5).collect()),
        ("input6".into(), norm_w(6).collect()),
        ("input7".into(), bf16_uniform(7, 512 * HID, 0.05)),
        ("input8".into(), bf16_uniform(8, 512 * HID, 0.05)),
        ("input9".into(), bf16_uniform(9, 1024 * HID, 0.05)),
        (
            "input10".into(),
            x.iter().flat_map(|v| bf16(v / rms)).collect(),
        ),
    ]
}

/// The whole attention layer (RMSNorm through ones-matmuls of a `memset(1.0)` bf16 tile, RoPE,
/// online softmax from a `memset(-1e9)` running max over 640 cached positions and the active
/// token) matches its golden within the bf16 tolerance (2e-2). Before MEMSET honoured its fill
/// value the ones tile was zero and the error was 1.2e10.
#[test]
fn attention_layer_matches_its_numpy_golden() {
    let out = run(ATTN, &attn_inputs()).expect("the attention layer runs");
    let (info, raw) = &out.outputs[0];
    assert_eq!(info.name, "output0");
    let rel = rel_err(raw, "fixtures/real-golden/kgm-attn_tkg_v6/output0.npy");
    assert!(rel <= 2e-2, "attention rel {rel}");
    // Pinned as the MoE's (silicon's NTFF window: 359.874 µs).
    assert_eq!(out.device_time_ps, 259_478_343, "attention device_time_ps");
}

/// The attention layer runs to completion through its DMA-queue blocks (the Vector spill
/// queue) and produces an output of the declared shape.
#[test]
fn attention_layer_runs_end_to_end() {
    let bytes = std::fs::read(repo_path(ATTN)).expect("model-layer fixture");
    let s = setup(Duration::from_secs(120));
    let mut m = s.rt.load(&bytes, 0).expect("the layer loads");
    let out = execute_builtin(&mut m).expect("the attention layer runs");
    let (info, raw) = &out.outputs[0];
    assert_eq!(info.name, "output0");
    assert_eq!(raw.len(), 2048);
    assert!(out.device_time_ps > 0);
}
