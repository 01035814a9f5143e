//! `neuron-emu bench real`: compiler-produced NEFFs on the emulated trn2, against the device
//! time AWS's profiler measured for the same NEFF on silicon.

use crate::{open_emulated, usage, Failure};
use neuron_abi::arch::Arch;
use neuron_runtime::{Config, Runtime};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Inputs larger than this are skipped when no file is named (nkipy-matmul_large: 4 GiB).
const DEFAULT_INPUT_LIMIT: u64 = 1 << 30;

/// The fixture directory beside the checkout, as CI lays it out.
fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-neff")
}

/// `summary[0].total_time` (seconds) of `<stem>.profile.json` in `profiles`.
fn profiled_seconds(profiles: &Path, stem: &str) -> Option<f64> {
    let j = crate::calibrate::read_json(&profiles.join(format!("{stem}.profile.json"))).ok()?;
    j["summary"][0]["total_time"].as_f64()
}

/// Instruction words in every engine program of every subgraph of the NEFF (static count).
fn neff_words(bytes: &[u8]) -> Result<u64, String> {
    let neff = neuron_neff::Neff::parse(bytes).map_err(|e| e.to_string())?;
    let kelf = neff.kelf().map_err(|e| e.to_string())?;
    let mut n = 0u64;
    for g in &kelf.graphs {
        let def = neff
            .subgraph_def(&g.definition)
            .map_err(|e| e.to_string())?;
        for (_, _, f) in def.engine_files() {
            if let Some(f) = f {
                n += neff
                    .subgraph_file(g.dir(), f)
                    .map_err(|e| e.to_string())?
                    .len() as u64
                    / 64;
            }
        }
    }
    Ok(n)
}

pub fn run(
    files: &[PathBuf],
    profiles: Option<&Path>,
    repeat: u32,
    host_profile: bool,
) -> Result<(), Failure> {
    if repeat == 0 {
        return Err(usage("--repeat must be positive"));
    }
    let explicit = !files.is_empty();
    let mut list = files.to_vec();
    if !explicit {
        let dir = default_dir();
        let rd = std::fs::read_dir(&dir).map_err(|e| {
            usage(format!(
                "no NEFFs named and {} unreadable: {e}",
                dir.display()
            ))
        })?;
        list = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "neff"))
            .collect();
        list.sort();
    }
    let rate = host_sgemm_flops();
    println!(
        "bench real: {repeat} timed executions each (after one warm-up); slowdown = host wall / profiled trn2 time"
    );
    println!(
        "host SGEMM [128x128]^T x [128x128] in this process: {:.1} GFLOP/s; floor = the execution's SGEMM multiply-adds at that rate",
        rate / 1e9
    );
    println!(
        "func ms = host wall of the same executions in functional mode (no timing model); t/func = timed / functional"
    );
    println!(
        "{:<28} {:>10} {:>12} {:>12} {:>9} {:>8} {:>12} {:>10} {:>7} {:>8} {:>8}",
        "neff",
        "host ms",
        "emulated us",
        "trn2 us",
        "slowdown",
        "words",
        "words/s",
        "floor ms",
        "floor x",
        "func ms",
        "t/func"
    );
    for path in &list {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("?")
            .to_string();
        let bytes = std::fs::read(path)
            .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
        let words = neff_words(&bytes).map_err(|e| Failure(1, format!("{stem}: {e}")))?;
        let (emu, dev) = open_emulated(Arch::V3Trn2)?;
        let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| Failure(1, e.to_string()))?;
        let mut model = rt
            .load(&bytes, 0)
            .map_err(|e| Failure(1, format!("{stem}: load failed: {e}")))?;
        let infos: Vec<_> = model.inputs().cloned().collect();
        let total: u64 = infos.iter().map(|t| t.size).sum();
        if !explicit && total > DEFAULT_INPUT_LIMIT {
            println!(
                "{stem:<28} skipped: {:.1} GiB of inputs (name the file to run it)",
                total as f64 / (1u64 << 30) as f64
            );
            continue;
        }
        let data = crate::tensorio::builtin_inputs(infos.iter());
        let refs: Vec<(&str, &[u8])> = data
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        model
            .execute(&refs)
            .map_err(|e| Failure(1, format!("{stem}: {e}")))?;
        if host_profile {
            emu.set_host_profiling(0, true);
        }
        let macs0 = emu.stats(0).map_or(0, |s| s.sgemm_macs);
        let t = Instant::now();
        let mut dev_ps = 0;
        for _ in 0..repeat {
            dev_ps = model
                .execute(&refs)
                .map_err(|e| Failure(1, format!("{stem}: {e}")))?
                .device_time_ps;
        }
        let wall = t.elapsed().as_secs_f64() / repeat as f64;
        let macs = emu.stats(0).map_or(0, |s| s.sgemm_macs) - macs0;
        // The host profile is of the timed executions only.
        let hp = if host_profile {
            emu.host_profile(0)
        } else {
            None
        };
        emu.set_host_profiling(0, false);
        let functional = functional_wall(&emu, &mut model, &refs, repeat)
            .map_err(|e| Failure(1, format!("{stem}: functional mode: {e}")))?;
        let floor = 2.0 * macs as f64 / repeat as f64 / rate;
        let prof_dir = profiles.map(Path::to_path_buf).unwrap_or_else(|| {
            path.parent()
                .unwrap_or(Path::new("."))
                .join("../real-profiles")
        });
        let (trn2, slow, floor_x) = match profiled_seconds(&prof_dir, &stem) {
            Some(s) if s > 0.0 => (
                format!("{:.2}", s * 1e6),
                format!("{:.0}x", wall / s),
                format!("{:.0}x", floor / s),
            ),
            _ => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "{stem:<28} {:>10.2} {:>12.2} {:>12} {:>9} {:>8} {:>12.0} {:>10.2} {:>7} {:>8.2} {:>8.2}",
            wall * 1e3,
            dev_ps as f64 / 1e6,
            trn2,
            slow,
            words,
            words as f64 / wall,
            floor * 1e3,
            floor_x,
            functional * 1e3,
            wall / functional
        );
        if let Some(p) = hp {
            print_host_profile(&p, repeat, wall);
        }
    }
    Ok(())
}

/// Host wall per execution of `model` in functional mode (`CostTable::functional`: the same
/// work with no timing model), after one warm-up; the timed cost table is restored after.
fn functional_wall(
    emu: &neuron_emulator::Emulator,
    model: &mut neuron_runtime::Model,
    refs: &[(&str, &[u8])],
    repeat: u32,
) -> Result<f64, String> {
    let timed = neuron_devmodel::ArchProfile::new(Arch::V3Trn2).cost;
    emu.set_cost(0, timed.functional());
    let run = |model: &mut neuron_runtime::Model| -> Result<f64, String> {
        model.execute(refs).map_err(|e| e.to_string())?;
        let t = Instant::now();
        for _ in 0..repeat {
            model.execute(refs).map_err(|e| e.to_string())?;
        }
        Ok(t.elapsed().as_secs_f64() / repeat as f64)
    };
    let r = run(model);
    emu.set_cost(0, timed);
    r
}

/// FLOP/s of the host SGEMM on the tile shape that dominates the real kernels (one PE-array
/// load against a 128-column moving tensor), median of five timed rounds after a warm-up.
fn host_sgemm_flops() -> f64 {
    let (m, k, n, reps) = (128usize, 128usize, 128usize, 200);
    let a = neuron_kbuild::prng::uniform(21, k * m, 1.0);
    let b = neuron_kbuild::prng::uniform(22, k * n, 1.0);
    let mut c = vec![0f32; m * n];
    let mut round = || {
        let t = Instant::now();
        for i in 0..reps {
            crate::hostgemm::sgemm_at_b(m, k, n, &a, &b, if i == 0 { 0.0 } else { 1.0 }, &mut c);
        }
        t.elapsed().as_secs_f64()
    };
    round();
    let mut times: Vec<f64> = (0..5).map(|_| round()).collect();
    times.sort_by(f64::total_cmp);
    2.0 * (m * k * n * reps) as f64 / times[2].max(1e-9)
}

/// The instruction kinds by host time, per execution, with their share of the wall time.
fn print_host_profile(p: &neuron_devmodel::HostProfile, repeat: u32, wall: f64) {
    let mut ops: Vec<_> = p.ops.iter().collect();
    ops.sort_by_key(|(_, (_, ns))| std::cmp::Reverse(*ns));
    let per = |x: u64| x as f64 / repeat as f64;
    let total: u64 = ops.iter().map(|(_, (_, ns))| *ns).sum();
    for (name, (n, ns)) in ops.iter().filter(|(_, (_, ns))| *ns > 0) {
        println!(
            "    {name:<24} {:>7.0} per exec {:>9.1} us {:>6.1}%",
            per(*n),
            per(*ns) / 1e3,
            per(*ns) / 1e9 / wall * 100.0
        );
    }
    println!(
        "    {:<24} {:>7} {:>9.1} us {:>6.1}%  (wall time outside instruction issue: scheduling, DMA rings, ioctls, polling)",
        "other",
        "",
        (wall * 1e6 - per(total) / 1e3).max(0.0),
        (100.0 - per(total) / 1e9 / wall * 100.0).max(0.0)
    );
}
