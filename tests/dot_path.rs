//! The `VDPBF16PS` panels of the device model (`devmodel::gemm::dot`, `NEURON_EMU_GEMM=dot`)
//! on the real bf16 kernels: the same output bits and device times as the portable path, with
//! the bf16 × bf16 multiply-adds really on that instruction. On a host without AVX512-BF16
//! (or whose instruction sums otherwise) the test says so and stops. One test per process:
//! the switch is an environment variable, read when a core's PE state is created.

use neuron_e2e_tests::{outputs_f32, run_real_once};

/// The real kernels whose MATMULs multiply bf16 weights by bf16 moving tensors.
const KERNELS: [&str; 3] = [
    "akc-baseline_bf16_s512",
    "akc-fused_bf16_s512",
    "akc-fused_bf16_s1024",
];

struct Run {
    bits: Vec<(String, Vec<u32>)>,
    device_ps: u64,
    dot_macs: u64,
    bf16_macs: u64,
}

fn run(stem: &str, path: &str) -> Run {
    std::env::set_var(neuron_devmodel::gemm::ENV, path);
    let (out, st0, st) = run_real_once(stem);
    let bf16 = neuron_isa::Dtype::Bf16 as usize;
    Run {
        bits: outputs_f32(&out)
            .into_iter()
            .map(|(n, v)| (n, v.iter().map(|x| x.to_bits()).collect()))
            .collect(),
        device_ps: out.device_time_ps,
        dot_macs: st.dot_macs - st0.dot_macs,
        bf16_macs: st.math_macs[bf16] - st0.math_macs[bf16],
    }
}

#[test]
fn bf16_panels_on_vdpbf16ps_give_the_portable_bits() {
    if !neuron_devmodel::gemm::dot::available() {
        eprintln!(
            "VDPBF16PS SKIPPED: this host has no AVX512-BF16 (or its VDPBF16PS does not sum \
             as two fused multiply-adds); every bf16 panel runs on the FMA kernel"
        );
        return;
    }
    for stem in KERNELS {
        let portable = run(stem, "portable");
        let dot = run(stem, "dot");
        assert_eq!(
            portable.dot_macs, 0,
            "{stem}: the portable path used VDPBF16PS"
        );
        assert!(
            dot.dot_macs > 0 && dot.dot_macs <= dot.bf16_macs,
            "{stem}: {} multiply-adds on VDPBF16PS of {} bf16",
            dot.dot_macs,
            dot.bf16_macs
        );
        assert_eq!(dot.device_ps, portable.device_ps, "{stem}: device time");
        assert_eq!(
            dot.bits, portable.bits,
            "{stem}: the two paths' output bits"
        );
        eprintln!(
            "{stem}: outputs bit-identical; {:.1} M of {:.1} M bf16 multiply-adds on VDPBF16PS",
            dot.dot_macs as f64 / 1e6,
            dot.bf16_macs as f64 / 1e6
        );
    }
}
