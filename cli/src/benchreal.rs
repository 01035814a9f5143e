//! `neuron-emu bench real`: compiler-produced NEFFs on the emulated trn2, against the device
//! time measured on silicon and against a host floor (issue 16): the kernel's math and bytes
//! at the best rates this host reaches for them, measured in the same process.

use crate::{open_emulated, usage, Failure};
use neuron_abi::arch::Arch;
use neuron_devmodel::Stats;
use neuron_runtime::{Config, Model, Runtime, TensorInfo};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Inputs larger than this are skipped when no file is named (nkipy-matmul_large: 4 GiB).
const DEFAULT_INPUT_LIMIT: u64 = 1 << 30;

/// Published silicon times of NEFFs that have no profile JSON (the model layers), by SHA-256.
const TRN2_TIMES: &str = include_str!("../../fixtures/trn2-times.json");

/// memcpy buffer sizes: one that stays in cache, one larger than this host's caches.
const COPY_CACHE: usize = 1 << 20;
const COPY_MEMORY: usize = 256 << 20;
/// Models whose tensors (inputs + outputs) exceed this move their bytes at memory speed.
const CACHE_RESIDENT: u64 = 32 << 20;

/// Timed rounds per host-rate measurement; the best is kept (the host is shared and noisy).
const ROUNDS: usize = 7;

/// The fixture directory beside the checkout, as CI lays it out.
fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real-neff")
}

/// `summary[0].total_time` (seconds) of `<stem>.profile.json` in `profiles`.
fn profiled_seconds(profiles: &Path, stem: &str) -> Option<f64> {
    let j = crate::calibrate::read_json(&profiles.join(format!("{stem}.profile.json"))).ok()?;
    j["summary"][0]["total_time"].as_f64()
}

/// The published trn2 time (seconds) in `table` (the format of `fixtures/trn2-times.json`) of
/// the NEFF with these bytes.
fn published_seconds(table: &str, neff: &[u8]) -> Option<f64> {
    use sha2::{Digest, Sha256};
    let j: serde_json::Value = serde_json::from_str(table).ok()?;
    let hash: String = Sha256::digest(neff)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let e = j["neffs"]
        .as_array()?
        .iter()
        .find(|e| e["sha256"].as_str() == Some(hash.as_str()))?;
    e["trn2_us"].as_f64().map(|us| us / 1e6)
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

/// Work per second of `call` (`work` units per call): the call is repeated until a round
/// takes 5 ms, then the best of [`ROUNDS`] rounds counts.
fn best_rate(work: f64, mut call: impl FnMut()) -> f64 {
    let round = |reps: u32, call: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..reps {
            call();
        }
        t.elapsed().as_secs_f64()
    };
    let mut reps = 1u32;
    while round(reps, &mut call) < 5e-3 && reps < 1 << 20 {
        reps *= 2;
    }
    let best = (0..ROUNDS)
        .map(|_| round(reps, &mut call))
        .fold(f64::INFINITY, f64::min);
    work * reps as f64 / best.max(1e-9)
}

/// The host's rates, measured before each NEFF (the host is shared: its rates drift).
#[derive(Debug, Clone)]
struct HostRates {
    /// FLOP/s of the host SGEMM per tile shape (m, k, n) the kernels issue.
    sgemm: Vec<((usize, usize, usize), f64)>,
    /// memcpy bytes/s of a [`COPY_CACHE`] and a [`COPY_MEMORY`] buffer.
    memcpy_cache: f64,
    memcpy_memory: f64,
}

impl HostRates {
    fn measure() -> HostRates {
        // One PE-array load (128 x 128) against a 128-column and a full-bank (512) moving
        // tensor, accumulating as into PSUM.
        let sgemm = [(128, 128, 128), (128, 128, 512)]
            .into_iter()
            .map(|(m, k, n)| {
                let a = neuron_kbuild::prng::uniform(21, k * m, 1.0);
                let b = neuron_kbuild::prng::uniform(22, k * n, 1.0);
                let mut c = vec![0f32; m * n];
                let r = best_rate(2.0 * (m * k * n) as f64, || {
                    crate::hostgemm::sgemm_at_b(m, k, n, &a, &b, 1.0, &mut c);
                });
                std::hint::black_box(&c);
                ((m, k, n), r)
            })
            .collect();
        HostRates {
            sgemm,
            memcpy_cache: memcpy_rate(COPY_CACHE),
            memcpy_memory: memcpy_rate(COPY_MEMORY),
        }
    }

    fn best_sgemm(&self) -> f64 {
        self.sgemm.iter().map(|(_, r)| *r).fold(1.0, f64::max)
    }

    /// FLOP/s of a MATMUL by moving dtype code. The device model widens every operand type
    /// to fp32 for the SGEMM, and this host has no faster kernel for bf16/fp16/fp8 than that
    /// (no AMX; VDPBF16PS is slower than fp32 FMA, issue 16): the SGEMM's best rate for all.
    fn flops_by_dtype(&self) -> [f64; 16] {
        [self.best_sgemm(); 16]
    }

    /// memcpy bytes/s for a model with `tensor_bytes` of inputs and outputs, and which.
    fn memcpy_for(&self, tensor_bytes: u64) -> (f64, &'static str) {
        if tensor_bytes > CACHE_RESIDENT {
            (self.memcpy_memory, "memory")
        } else {
            (self.memcpy_cache, "cache")
        }
    }
}

/// Bytes/s of `copy_from_slice` between two `len`-byte buffers (bytes copied, not read+written).
fn memcpy_rate(len: usize) -> f64 {
    let src = vec![1u8; len];
    let mut dst = vec![0u8; len];
    let r = best_rate(len as f64, || {
        dst.copy_from_slice(std::hint::black_box(&src));
    });
    std::hint::black_box(&dst);
    r
}

/// The floor of one execution (seconds): its math at the host's rates, its bytes at memcpy.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Floor {
    math: f64,
    bytes: f64,
}

impl Floor {
    /// `math_macs`: the kernel's multiply-adds by moving dtype code (`Stats::math_macs`, a
    /// pass pair once); `flops`: FLOP/s by the same code; `bytes` moved at `memcpy` bytes/s.
    fn of(math_macs: &[u64; 16], flops: &[f64; 16], bytes: u64, memcpy: f64) -> Floor {
        let math = math_macs
            .iter()
            .zip(flops)
            .filter(|(m, _)| **m > 0)
            .map(|(m, r)| 2.0 * *m as f64 / r.max(1.0))
            .sum();
        Floor {
            math,
            bytes: bytes as f64 / memcpy.max(1.0),
        }
    }

    fn total(&self) -> f64 {
        self.math + self.bytes
    }
}

/// What the timed executions did (stats after minus before), per execution.
fn per_execution(before: &Stats, after: &Stats, repeat: u32) -> ([u64; 16], u64) {
    let r = u64::from(repeat.max(1));
    let mut math = [0u64; 16];
    for (i, m) in math.iter_mut().enumerate() {
        *m = after.math_macs[i].saturating_sub(before.math_macs[i]) / r;
    }
    (math, after.dma_bytes.saturating_sub(before.dma_bytes) / r)
}

/// Set the process's peak RSS (`VmHWM`) back to its current RSS (Linux >= 4.0); false where
/// that is refused, and then `VmHWM` counts from the process's start.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// `VmHWM` of `/proc/self/status`, bytes.
fn peak_rss() -> Option<u64> {
    crate::runmem::proc_kib_field(&std::fs::read_to_string("/proc/self/status").ok()?, "VmHWM")
}

/// Stage the model's built-in inputs (seed 0, as `run` makes them) a block at a time into
/// device memory: no whole-input host buffer.
fn stage_inputs(
    model: &Model,
    infos: &[TensorInfo],
    progress: &mut crate::runmem::Progress,
) -> Result<(), String> {
    for (i, t) in infos.iter().enumerate() {
        let mut gen = crate::tensorio::BuiltinStream::new(t, 0, i);
        let mut buf = vec![0u8; (t.size as usize).min(crate::run::block_of(t))];
        let mut off = 0u64;
        while off < t.size {
            let n = (t.size - off).min(buf.len() as u64) as usize;
            gen.fill(&mut buf[..n]);
            model
                .write_input(&t.name, off, &buf[..n])
                .map_err(|e| format!("staging input '{}': {e}", t.name))?;
            progress.inc(n as u64);
            off += n as u64;
        }
    }
    Ok(())
}

/// One execution on the staged inputs: its device time (ps).
fn execute(model: &mut Model) -> Result<u64, String> {
    match model.execute_staged() {
        Ok((o, None)) => Ok(o.device_time_ps),
        Ok((_, Some(e))) | Err(e) => Err(e.to_string()),
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
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
    print_header(repeat);
    for path in &list {
        bench_one(path, explicit, profiles, repeat, host_profile)?;
    }
    Ok(())
}

fn print_header(repeat: u32) {
    println!(
        "bench real: {repeat} timed executions each (after one warm-up) on inputs staged once in 8 MiB blocks (built-in data, as `run`); host ms = host wall per execution"
    );
    println!(
        "floor = the execution's MATMUL math (multiply-adds the kernel needs: an fp32 LOW/HIGH pass pair once, transposes as data movement not at all) at the host's best GEMM rate for its operand type, plus its DMA bytes at host memcpy speed; wall/floor = host ms / floor ms"
    );
    println!(
        "host rates: measured in this process just before each NEFF loads (best of {ROUNDS} rounds): fp32 SGEMM on 128x128 weights against 128 and 512 moving columns, the best of the two for every operand type (the device model widens bf16/fp16/fp8 to fp32; no faster kernel on this path); memcpy of {} MiB for models with <= {} MiB of inputs + outputs, {} MiB for larger ones",
        COPY_CACHE >> 20,
        CACHE_RESIDENT >> 20,
        COPY_MEMORY >> 20,
    );
    println!(
        "AMX: {}",
        if crate::hostgemm::amx_present() {
            "present (not used: the emulator has no AMX kernel; every floor is at the SGEMM rate)"
        } else {
            "absent (CPUID leaf 7 EDX bits 22/24, XCR0 bits 17-18)"
        }
    );
    println!(
        "slowdown = host wall / trn2 device time (the profile JSON's summary.total_time, else the published figure in fixtures/trn2-times.json); path = the GEMM kernel the MATMULs ran on"
    );
    println!(
        "func ms = host wall of the same executions in functional mode (no timing model); t/func = timed / functional"
    );
    println!(
        "io MiB = the model's inputs + outputs; peak MiB = the process's peak RSS (VmHWM) from the load to the last execution; peak/io (issue 16 asks <= 1.3)"
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>8}",
        "neff",
        "host ms",
        "floor ms",
        "wall/floor",
        "emulated us",
        "trn2 us",
        "slowdown",
        "path",
        "func ms",
        "t/func",
        "io MiB",
        "peak MiB",
        "peak/io"
    );
}

/// Load, stage, time and report one NEFF.
fn bench_one(
    path: &Path,
    explicit: bool,
    profiles: Option<&Path>,
    repeat: u32,
    host_profile: bool,
) -> Result<(), Failure> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("?")
        .to_string();
    let fail = |e: String| Failure(1, format!("{stem}: {e}"));
    let bytes =
        std::fs::read(path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let words = neff_words(&bytes).map_err(fail)?;
    // Before the load, so the measurement's buffers are not in the model's peak RSS.
    let rates = HostRates::measure();
    let rss_reset = reset_peak_rss();
    let (emu, dev) = open_emulated(Arch::V3Trn2)?;
    let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| Failure(1, e.to_string()))?;
    let mut model = rt
        .load(&bytes, 0)
        .map_err(|e| fail(format!("load failed: {e}")))?;
    let infos: Vec<_> = model.inputs().cloned().collect();
    let inputs: u64 = infos.iter().map(|t| t.size).sum();
    let io = inputs + model.outputs().map(|t| t.size).sum::<u64>();
    if !explicit && inputs > DEFAULT_INPUT_LIMIT {
        println!(
            "{stem:<28} skipped: {:.1} GiB of inputs (name the file to run it)",
            inputs as f64 / (1u64 << 30) as f64
        );
        return Ok(());
    }
    // Print what a big run will need (never refused: a benchmark is asked for by name).
    crate::runmem::check(&crate::run::need_of(&model, 0), true).map_err(fail)?;
    let mut progress = crate::runmem::Progress::new(false, io);
    progress.phase("inputs", inputs);
    stage_inputs(&model, &infos, &mut progress).map_err(fail)?;
    progress.finish();
    execute(&mut model).map_err(fail)?;
    if host_profile {
        emu.set_host_profiling(0, true);
    }
    let before = emu.stats(0).unwrap_or_default();
    let t = Instant::now();
    let (mut dev_ps, mut fastest) = (0, f64::INFINITY);
    for _ in 0..repeat {
        let t1 = Instant::now();
        dev_ps = execute(&mut model).map_err(fail)?;
        fastest = fastest.min(t1.elapsed().as_secs_f64());
    }
    let wall = t.elapsed().as_secs_f64() / repeat as f64;
    let after = emu.stats(0).unwrap_or_default();
    // The host profile is of the timed executions only.
    let hp = if host_profile {
        emu.host_profile(0)
    } else {
        None
    };
    emu.set_host_profiling(0, false);
    let functional = functional_wall(&emu, &mut model, repeat)
        .map_err(|e| fail(format!("functional mode: {e}")))?;
    let peak = peak_rss();
    let (math, dma) = per_execution(&before, &after, repeat);
    let (memcpy, copy_kind) = rates.memcpy_for(io);
    let floor = Floor::of(&math, &rates.flops_by_dtype(), dma, memcpy);
    let prof_dir = profiles.map(Path::to_path_buf).unwrap_or_else(|| {
        path.parent()
            .unwrap_or(Path::new("."))
            .join("../real-profiles")
    });
    let silicon = match profiled_seconds(&prof_dir, &stem) {
        Some(s) if s > 0.0 => Some((s, "profile JSON")),
        _ => published_seconds(TRN2_TIMES, &bytes)
            .filter(|s| *s > 0.0)
            .map(|s| (s, "published, fixtures/trn2-times.json")),
    };
    let (trn2, slow) = match silicon {
        Some((s, _)) => (format!("{:.2}", s * 1e6), format!("{:.0}x", wall / s)),
        None => ("-".into(), "-".into()),
    };
    let (peak_s, ratio) = match peak {
        Some(p) => (
            format!("{:.0}", mib(p)),
            format!("{:.2}", p as f64 / io as f64),
        ),
        None => ("-".into(), "-".into()),
    };
    println!(
        "{stem:<28} {:>10.2} {:>10.3} {:>10.2} {:>12.2} {:>10} {:>9} {:>9} {:>9.2} {:>7.2} {:>9.1} {:>9} {:>8}",
        wall * 1e3,
        floor.total() * 1e3,
        wall / floor.total().max(1e-12),
        dev_ps as f64 / 1e6,
        trn2,
        slow,
        crate::hostgemm::DEVICE_GEMM_PATH,
        functional * 1e3,
        wall / functional,
        mib(io),
        peak_s,
        ratio
    );
    let flops = rates.flops_by_dtype();
    let mut parts: Vec<String> = math
        .iter()
        .enumerate()
        .filter(|(_, m)| **m > 0)
        .map(|(code, m)| {
            let name = neuron_isa::Dtype::from_code(code as u8).map_or("?", |d| d.name());
            format!(
                "{name} {:.1} M MACs {:.3} ms",
                *m as f64 / 1e6,
                2e3 * *m as f64 / flops[code]
            )
        })
        .collect();
    parts.push(format!(
        "DMA {:.2} MB at {:.1} GB/s ({copy_kind}) {:.3} ms",
        dma as f64 / 1e6,
        memcpy / 1e9,
        floor.bytes * 1e3
    ));
    println!(
        "    floor = {}; fastest execution {:.2} ms ({:.2}x the floor); {words} words ({:.2} M words/s){}{}",
        parts.join(" + "),
        fastest * 1e3,
        fastest / floor.total().max(1e-12),
        words as f64 / wall / 1e6,
        silicon.map_or(String::new(), |(_, src)| format!("; trn2 time: {src}")),
        if rss_reset {
            ""
        } else {
            "; peak RSS since the process started (VmHWM reset refused)"
        }
    );
    let shapes: Vec<String> = rates
        .sgemm
        .iter()
        .map(|((m, k, n), r)| format!("{m}x{k}x{n} {:.1}", r / 1e9))
        .collect();
    println!(
        "    host: SGEMM (m x k x n, GFLOP/s) {}; memcpy {} MiB {:.1} GB/s, {} MiB {:.1} GB/s",
        shapes.join(", "),
        COPY_CACHE >> 20,
        rates.memcpy_cache / 1e9,
        COPY_MEMORY >> 20,
        rates.memcpy_memory / 1e9
    );
    if let Some(p) = hp {
        print_host_profile(&p, repeat, wall);
    }
    Ok(())
}

/// Host wall per execution of `model` in functional mode (`CostTable::functional`: the same
/// work with no timing model), after one warm-up; the timed cost table is restored after.
fn functional_wall(
    emu: &neuron_emulator::Emulator,
    model: &mut Model,
    repeat: u32,
) -> Result<f64, String> {
    let timed = neuron_devmodel::ArchProfile::new(Arch::V3Trn2).cost;
    emu.set_cost(0, timed.functional());
    let run = |model: &mut Model| -> Result<f64, String> {
        execute(model)?;
        let t = Instant::now();
        for _ in 0..repeat {
            execute(model)?;
        }
        Ok(t.elapsed().as_secs_f64() / repeat as f64)
    };
    let r = run(model);
    emu.set_cost(0, timed);
    r
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

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_isa::Dtype;

    fn macs(by: &[(Dtype, u64)]) -> [u64; 16] {
        let mut m = [0; 16];
        for (d, n) in by {
            m[*d as usize] = *n;
        }
        m
    }

    /// Per-type math at per-type rates, plus bytes at memcpy speed, by hand:
    /// fp32 1e9 MACs at 100 GFLOP/s = 20 ms; bf16 2e9 at 400 GFLOP/s = 10 ms;
    /// 1e9 bytes at 10 GB/s = 100 ms; 130 ms in all.
    #[test]
    fn the_floor_is_math_by_type_plus_bytes() {
        let mut flops = [100e9; 16];
        flops[Dtype::Bf16 as usize] = 400e9;
        let f = Floor::of(
            &macs(&[(Dtype::F32, 1_000_000_000), (Dtype::Bf16, 2_000_000_000)]),
            &flops,
            1_000_000_000,
            10e9,
        );
        assert!((f.math - 0.030).abs() < 1e-12, "{f:?}");
        assert!((f.bytes - 0.100).abs() < 1e-12, "{f:?}");
        assert!((f.total() - 0.130).abs() < 1e-12, "{f:?}");
        // A type with no math costs nothing, whatever its rate.
        flops[Dtype::F16 as usize] = 0.0;
        assert_eq!(Floor::of(&macs(&[]), &flops, 0, 10e9).total(), 0.0);
    }

    /// A pass pair counted once: the stats' fp32 math of an fp32 K=128, M=128, N=512 product
    /// issued as a LOW and a HIGH pass is 128·128·512 = 8,388,608 multiply-adds, 16.78 MFLOP:
    /// 0.16777216 ms at 100 GFLOP/s, where the two passes would have been twice that.
    #[test]
    fn per_execution_math_counts_a_pair_once_and_divides_by_the_repeats() {
        let before = Stats::default();
        let mut after = Stats::default();
        // Three executions of one pair each, 3 x 4096 bytes of DMA.
        after.math_macs[Dtype::F32 as usize] = 3 * 128 * 128 * 512;
        after.sgemm_macs = 3 * 2 * 128 * 128 * 512; // as if unfused: not what the floor uses
        after.dma_bytes = 3 * 4096;
        let (math, dma) = per_execution(&before, &after, 3);
        assert_eq!(math[Dtype::F32 as usize], 8_388_608);
        assert_eq!(dma, 4096);
        let f = Floor::of(&math, &[100e9; 16], 0, 1e9);
        assert!((f.math - 0.16777216e-3).abs() < 1e-15, "{f:?}");
    }

    #[test]
    fn published_times_are_found_by_the_neffs_hash() {
        // SHA-256 of the three bytes "abc".
        let table = r#"{"neffs": [{"sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "trn2_us": 12.5}]}"#;
        assert_eq!(published_seconds(table, b"abc"), Some(12.5e-6));
        assert_eq!(published_seconds(table, b"abd"), None);
        assert_eq!(published_seconds("not json", b"abc"), None);
        // The table shipped with the repository parses and names both model layers.
        let j: serde_json::Value = serde_json::from_str(TRN2_TIMES).expect("trn2-times.json");
        assert_eq!(j["neffs"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn peak_rss_is_read_from_proc() {
        // Linux CI: the status file exists and the peak is at least a page.
        assert!(peak_rss().is_some_and(|p| p >= 4096));
    }
}
