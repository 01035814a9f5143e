//! Where the cores' data paths run (`devmodel::device::lane`, `NEURON_EMU_THREADS`) never
//! shows in the results: on real kernels, every data-path word on its core's own host thread
//! (`always`) gives the same output bits, device times and multiply-add counts as everything
//! on the device thread (`1`); and two models running at the same time on two cores (`auto`
//! gives each core a thread then) give the outputs each gives alone. One test per process:
//! the mode is an environment variable, read when the device is created.

use neuron_e2e_tests::{execute_builtin, outputs_f32, real_neff, setup};
use std::time::Duration;

const KERNELS: [&str; 3] = [
    "akc-fused_bf16_s512",
    "akc-baseline_fp32_s512",
    "nkipy-matmul_small",
];

type Outputs = Vec<(String, Vec<u32>)>;

#[derive(Debug)]
struct Run {
    outputs: Outputs,
    device_ps: u64,
    sgemm_macs: u64,
    amx_macs: u64,
    math_macs: [u64; 16],
    onchip_bytes: u64,
    /// Words that ran on lane threads (not compared: it is what differs).
    lane_words: u64,
    /// Lane threads alive in the process after the executions.
    lane_threads: usize,
    /// Words deferred to their completion on the device thread (not compared either).
    deferred: u64,
}

/// Threads of this process named as a core's lane thread (`neuron-lane`).
fn lane_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.flatten()
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "neuron-lane")
                })
                .count()
        })
        .unwrap_or(0)
}

fn bits(out: &neuron_runtime::ExecOutput) -> Outputs {
    outputs_f32(out)
        .into_iter()
        .map(|(n, v)| (n, v.iter().map(|x| x.to_bits()).collect()))
        .collect()
}

/// `stem` executed twice (device times and counts of the second) in a device created with
/// `NEURON_EMU_THREADS=mode`.
fn run(stem: &str, mode: &str) -> Run {
    std::env::set_var(neuron_devmodel::device::THREADS_ENV, mode);
    neuron_devmodel::cayman_exec::count_onchip(true);
    let bytes = real_neff(stem);
    let s = setup(Duration::from_secs(120));
    let mut m =
        s.rt.load(&bytes, 0)
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
    execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
    let st0 = s.emu.stats(0).unwrap_or_default();
    let out = execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
    let st = s.emu.stats(0).unwrap_or_default();
    let mut math_macs = st.math_macs;
    for (a, b) in math_macs.iter_mut().zip(st0.math_macs) {
        *a -= b;
    }
    Run {
        outputs: bits(&out),
        device_ps: out.device_time_ps,
        sgemm_macs: st.sgemm_macs - st0.sgemm_macs,
        amx_macs: st.amx_macs - st0.amx_macs,
        math_macs,
        onchip_bytes: st.onchip_bytes - st0.onchip_bytes,
        lane_words: st.lane_thread_words - st0.lane_thread_words,
        deferred: st.deferred_words - st0.deferred_words,
        lane_threads: {
            // Then a few executions with core 0 in functional mode (no timing model), as
            // `bench real` measures: the cores' words then issue in another interleaving.
            let timed = neuron_devmodel::ArchProfile::new(neuron_abi::arch::Arch::V3Trn2).cost;
            s.emu.set_cost(0, timed.functional());
            for _ in 0..3 {
                execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
            }
            s.emu.set_cost(0, timed);
            lane_threads()
        },
    }
}

impl Run {
    /// What must not depend on the mode.
    fn same(&self) -> (&Outputs, u64, u64, u64, [u64; 16], u64) {
        let r = self;
        (
            &r.outputs,
            r.device_ps,
            r.sgemm_macs,
            r.amx_macs,
            r.math_macs,
            r.onchip_bytes,
        )
    }
}

/// Two models (`a` on NC 0, `b` on NC 2) executed at the same time from two host threads,
/// `rounds` times each; the outputs of each model's executions.
/// (each model's outputs per execution, words that ran on lane threads).
fn concurrent(a: &str, b: &str, mode: &str, rounds: usize) -> ([Vec<Outputs>; 2], u64) {
    std::env::set_var(neuron_devmodel::device::THREADS_ENV, mode);
    let s = setup(Duration::from_secs(120));
    let (ba, bb) = (real_neff(a), real_neff(b));
    let mut ma = s.rt.load(&ba, 0).unwrap_or_else(|e| panic!("{a}: {e}"));
    let mut mb = s.rt.load(&bb, 2).unwrap_or_else(|e| panic!("{b}: {e}"));
    let both = std::thread::scope(|sc| {
        let ta = sc.spawn(|| {
            (0..rounds)
                .map(|_| bits(&execute_builtin(&mut ma).expect("model a")))
                .collect::<Vec<_>>()
        });
        let tb = sc.spawn(|| {
            (0..rounds)
                .map(|_| bits(&execute_builtin(&mut mb).expect("model b")))
                .collect::<Vec<_>>()
        });
        [
            ta.join().expect("model a thread"),
            tb.join().expect("model b thread"),
        ]
    });
    let words = s.emu.stats(0).unwrap_or_default().lane_thread_words;
    (both, words)
}

/// The kbuild kernel whose Vector word reads past its SBUF partition, in a device created
/// with `NEURON_EMU_THREADS=mode`: the execution's status and message, and the device's
/// fault records.
fn oob(mode: &str) -> (String, String, Vec<String>) {
    use neuron_kbuild::kernels::{broken, Broken};
    std::env::set_var(neuron_devmodel::device::THREADS_ENV, mode);
    let s = setup(Duration::from_secs(10));
    let mut m =
        s.rt.load(&broken(Broken::SbufOutOfBounds).expect("build"), 0)
            .expect("load");
    let e = m
        .execute(&[("in", &vec![0u8; 2048])])
        .expect_err("out of bounds");
    let faults = s.emu.faults(0).unwrap_or_default();
    (
        format!("{:?}", e.status),
        e.message,
        faults.iter().map(|f| f.to_string()).collect(),
    )
}

#[test]
fn results_do_not_depend_on_where_the_data_paths_run() {
    // A data-path word's fault: raised at its completion in every mode, same record.
    let inline = oob("1");
    assert_eq!(inline.0, "ExecOob", "{inline:?}");
    assert_eq!(oob("always"), inline, "a lane thread changed the fault");
    for stem in KERNELS {
        let inline = run(stem, "1");
        let threaded = run(stem, "always");
        // Auto: a core's words deferred on the device thread while the other core runs
        // (the LNC=2 kernel), its words on a lane thread where they are worth it.
        let auto = run(stem, "auto");
        assert_eq!(
            auto.same(),
            inline.same(),
            "{stem}: auto (deferred and threaded words) changed outputs, device time or counts"
        );
        if stem == "nkipy-matmul_small" {
            // Both cores work, but core 1's words (128 x 128 x 128 products and their
            // copies) are too small to be worth a thread of their own
            // (`lane::worth_a_thread`): none starts, and core 0's words, with nothing to
            // run beside, are not deferred.
            assert_eq!(
                (auto.lane_words, auto.lane_threads, auto.deferred),
                (0, 0, 0),
                "{stem}: auto handed words too small to be worth it to a lane thread, or deferred words for none"
            );
            // With every word worth a thread, core 1's go to one while core 0's are
            // deferred, and the results are still those of one thread.
            neuron_devmodel::device::set_lane_min_work(0);
            let every = run(stem, "auto");
            neuron_devmodel::device::set_lane_min_work(neuron_devmodel::device::LANE_MIN_WORK);
            assert!(
                every.lane_words > 0 && every.deferred > 0,
                "{stem}: auto with no least work put no word on a lane thread or deferred none: {every:?}"
            );
            assert_eq!(
                every.same(),
                inline.same(),
                "{stem}: auto (deferred and threaded words) changed outputs, device time or counts"
            );
        } else {
            // Nor are core 0's words deferred for a core that never works.
            assert_eq!(
                auto.deferred, 0,
                "{stem}: auto deferred words for a core with no work"
            );
            // The akc kernels' second core holds only ordering words (DRAIN, ordering
            // mode): nothing to run beside core 0, so no thread that would spin beside it.
            assert_eq!(
                (auto.lane_words, auto.lane_threads),
                (0, 0),
                "{stem}: auto started a lane thread for ordering words"
            );
        }
        assert!(
            inline.math_macs.iter().sum::<u64>() > 0,
            "{stem}: no math counted"
        );
        assert_eq!(
            inline.lane_words, 0,
            "{stem}: words on lane threads with mode 1"
        );
        assert!(
            threaded.lane_words > 0,
            "{stem}: no word ran on a lane thread"
        );
        assert_eq!(
            threaded.same(),
            inline.same(),
            "{stem}: lane threads changed outputs, device time or counts"
        );
        eprintln!(
            "{stem}: device time {} ps, {} outputs bit-identical on lane threads and inline",
            inline.device_ps,
            inline.outputs.len()
        );
    }
    // Two models at once: each execution's outputs are the model's own, in every mode.
    let (a, b) = ("akc-fused_bf16_s512", "nkipy-matmul_small");
    let alone = [run(a, "1").outputs, run(b, "1").outputs];
    for mode in ["1", "auto", "always"] {
        let (both, words) = concurrent(a, b, mode, 3);
        eprintln!("{mode}: two models at once, {words} words on lane threads");
        if mode == "1" {
            assert_eq!(words, 0, "mode 1 used lane threads");
        }
        for (i, runs) in both.iter().enumerate() {
            for r in runs {
                assert_eq!(
                    r, &alone[i],
                    "{mode}: model {i} executed alongside another gave other outputs"
                );
            }
        }
    }
}
