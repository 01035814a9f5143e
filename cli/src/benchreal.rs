//! `neuron-emu bench real`: compiler-produced NEFFs on the emulated trn2, against the device
//! time measured on silicon and against a host floor (issue 16): the kernel's math and bytes
//! at the best rates this host reaches for them, measured in the same process.

use crate::floor::{
    onchip_seconds, per_execution, Floor, HostRates, PerExecution, CACHE_RESIDENT, COPY_CACHE,
    COPY_MEMORY, ROUNDS,
};
use crate::{open_emulated, usage, Failure};
use neuron_abi::arch::Arch;
use neuron_runtime::{Config, Model, Runtime, TensorInfo};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Inputs larger than this are skipped when no file is named (nkipy-matmul_large: 4 GiB).
const DEFAULT_INPUT_LIMIT: u64 = 1 << 30;

/// Published silicon times of NEFFs that have no profile JSON (the model layers), by SHA-256.
const TRN2_TIMES: &str = include_str!("../../fixtures/trn2-times.json");

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

/// Set the process's peak RSS (`VmHWM`) back to its current RSS (Linux >= 4.0); false where
/// that is refused, and then `VmHWM` counts from the process's start.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Executions whose walls `bench real` keeps for the median (8 MiB of them).
const MAX_TIMES: usize = 1 << 20;

/// The median of `v` (the mean of the middle two for an even count; 0 for none), sorting it;
/// NaN-free input assumed (walls), NaNs sort last.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `VmHWM` of `/proc/self/status`, bytes.
fn peak_rss() -> Option<u64> {
    crate::runmem::proc_kib_field(&std::fs::read_to_string("/proc/self/status").ok()?, "VmHWM")
}

/// Stage the model's built-in inputs (seed 0, as `run` makes them) a block at a time into
/// device memory: no whole-input host buffer.
pub(crate) fn stage_inputs(
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
pub(crate) fn execute(model: &mut Model) -> Result<u64, String> {
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
    word_trace: Option<&Path>,
) -> Result<(), Failure> {
    if repeat == 0 {
        return Err(usage("--repeat must be positive"));
    }
    if let Some(dir) = word_trace {
        std::fs::create_dir_all(dir)
            .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let host_profile = host_profile || word_trace.is_some();
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
        bench_one(path, explicit, profiles, repeat, host_profile, word_trace)?;
    }
    Ok(())
}

fn print_header(repeat: u32) {
    println!(
        "bench real: {repeat} timed executions each (after one warm-up) on inputs staged once in 8 MiB blocks (built-in data, as `run`); host ms = host wall per execution"
    );
    println!(
        "floor = the execution's MATMUL math (multiply-adds the kernel needs: an fp32 LOW/HIGH pass pair once, transposes as data movement not at all) at the host's best one-thread GEMM rate for its operand type, plus its DMA bytes at host memcpy speed; wall/floor = host ms / floor ms (below 1 where the model's cores or helpers run on more than one thread)"
    );
    println!(
        "host rates: measured on one thread in this process just before each NEFF loads (best of {ROUNDS} rounds): fp32 SGEMM on 128x128 weights against 128 and 512 moving columns (the best of the two; matrixmultiply's, and where the host has AVX-512F the device model's panel kernel, the faster counting), where the host has AVX512-BF16 the panel kernel on VDPBF16PS for bf16, and where it has AMX the tile kernel on the same shapes for bf16/fp8 and for fp16 split into bf16 parts (a kernel the host has, though the device model keeps fp16 on the SGEMM); each operand type's floor is at its best kernel's rate; memcpy of {} MiB for models with <= {} MiB of inputs + outputs, {} MiB for larger ones",
        COPY_CACHE >> 20,
        CACHE_RESIDENT >> 20,
        COPY_MEMORY >> 20,
    );
    println!("AMX: {}", amx_line());
    println!("VDPBF16PS: {}", dot_line());
    println!(
        "data paths: NEURON_EMU_THREADS={:?} (lane words = data-path words that ran on their core's own host thread, in each NEFF's line; --host-profile keeps them all on the device thread); {} data-path helper thread(s) share large steps (a GEMM by column ranges; ACTIVATE, TENSOR_REDUCE, TENSOR_SCALAR and copies by partitions, each partition read, computed and written by one thread; off with NEURON_EMU_THREADS=1): steps shared and pieces run by helpers in each NEFF's line",
        neuron_devmodel::device::ThreadMode::from_env(),
        neuron_devmodel::fanout::helpers()
    );
    println!(
        "ACTIVATE loops: {} (chosen at run time; the same bits either way)",
        neuron_devmodel::cayman_exec::activate_simd_path()
    );
    println!(
        "portable SGEMM: {} (chosen at run time; the same bits either way)",
        if neuron_devmodel::gemm::panels::available() {
            "the AVX-512 panel kernel for whole 8-row x 32-column blocks, matrixmultiply for other shapes"
        } else {
            "matrixmultiply (no AVX-512F on this host)"
        }
    );
    println!(
        "HBM pages: 64 KiB, 64 KiB-aligned in 2 MiB chunks; transparent huge pages {} ({}=on asks for them; kernel setting: {})",
        if neuron_devmodel::pagepool::huge_pages_on() { "asked for" } else { "not asked for" },
        neuron_devmodel::pagepool::ENV,
        neuron_devmodel::pagepool::huge_pages_mode()
    );
    println!(
        "slowdown = host wall / trn2 device time (the profile JSON's summary.total_time, else the published figure in fixtures/trn2-times.json); path = the GEMM kernel the bf16/fp8/fp16 MATMULs ran on (amx, bf16dot = VDPBF16PS panels, or portable; fp32 always runs on the portable SGEMM)"
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
    word_trace: Option<&Path>,
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
    // The warm-up execution counts the on-chip operand bytes (the same in every execution),
    // so the timed ones do not pay for counting them.
    neuron_devmodel::cayman_exec::count_onchip(true);
    let warm0 = emu.stats(0).unwrap_or_default();
    let warm = execute(&mut model);
    neuron_devmodel::cayman_exec::count_onchip(false);
    warm.map_err(fail)?;
    let onchip_bytes = emu
        .stats(0)
        .unwrap_or_default()
        .onchip_bytes
        .saturating_sub(warm0.onchip_bytes);
    if host_profile {
        emu.set_host_profiling(0, true);
        emu.keep_host_words(0, word_trace.is_some());
    }
    let before = emu.stats(0).unwrap_or_default();
    let fan0 = neuron_devmodel::fanout::counts();
    let t = Instant::now();
    let (mut dev_ps, mut fastest) = (0, f64::INFINITY);
    // Each execution's wall, for the median (a host whose speed drifts moves the mean; the
    // first MAX_TIMES are kept).
    let mut times: Vec<f64> = Vec::with_capacity((repeat as usize).min(MAX_TIMES));
    for _ in 0..repeat {
        let t1 = Instant::now();
        dev_ps = execute(&mut model).map_err(fail)?;
        let took = t1.elapsed().as_secs_f64();
        fastest = fastest.min(took);
        if times.len() < MAX_TIMES {
            times.push(took);
        }
    }
    let median = median(&mut times);
    let wall = t.elapsed().as_secs_f64() / repeat as f64;
    let after = emu.stats(0).unwrap_or_default();
    let fan1 = neuron_devmodel::fanout::counts();
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
    let PerExecution {
        math,
        dma_bytes: dma,
        ..
    } = per_execution(&before, &after, repeat);
    let (memcpy, copy_kind) = rates.memcpy_for(io);
    let floor = Floor::of(&math, &rates.flops_by_dtype(), dma, memcpy);
    let onchip = onchip_seconds(onchip_bytes, rates.memcpy_cache);
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
        gemm_path(&before, &after),
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
        "    floor = {}; fastest execution {:.2} ms ({:.2}x the floor), median {:.2} ms ({:.2}x);{} {words} words ({:.2} M words/s); {} lane words; {} steps shared ({} of {} pieces on helpers; callers waited {:.1} us an execution for helpers' last pieces; {}{}){}{}",
        parts.join(" + "),
        fastest * 1e3,
        fastest / floor.total().max(1e-12),
        median * 1e3,
        median / floor.total().max(1e-12),
        match after.dot_macs - before.dot_macs {
            0 => String::new(),
            d => format!(
                " {:.1} M MACs an execution on VDPBF16PS;",
                d as f64 / 1e6 / f64::from(repeat)
            ),
        },
        words as f64 / wall / 1e6,
        after.lane_thread_words - before.lane_thread_words,
        fan1.steps - fan0.steps,
        fan1.helper_pieces - fan0.helper_pieces,
        fan1.pieces - fan0.pieces,
        (fan1.caller_wait_ns - fan0.caller_wait_ns) as f64 / 1e3 / f64::from(repeat),
        match fan1.near_since(&fan0) {
            None => "no spinning helper's join timed".to_string(),
            Some((share, near)) => format!(
                "{:.0}% of a spinning helper's joins within {} ns of the post: the helper's cache {}",
                100.0 * share,
                neuron_devmodel::fanout::NEAR_NS,
                if near {
                    "near the caller's"
                } else {
                    "far from the caller's (a slow placement: docs/performance.md)"
                }
            ),
        },
        match fan1.far_ns.saturating_sub(fan0.far_ns) {
            0 => String::new(),
            far => format!(
                "; the helpers far {:.0}% of the time, steps then run as on one thread",
                (100.0 * far as f64 / 1e9 / (wall * f64::from(repeat))).min(100.0)
            ),
        },
        silicon.map_or(String::new(), |(_, src)| format!("; trn2 time: {src}")),
        if rss_reset {
            ""
        } else {
            "; peak RSS since the process started (VmHWM reset refused)"
        }
    );
    println!(
        "    on-chip: operands {:.2} MB read + written (SBUF/PSUM, each once) = {:.3} ms of memcpy in cache; floor with them {:.3} ms, fastest execution {:.2}x that",
        onchip_bytes as f64 / 1e6,
        onchip * 1e3,
        (floor.total() + onchip) * 1e3,
        fastest / (floor.total() + onchip).max(1e-12)
    );
    let shapes: Vec<String> = rates
        .sgemm
        .iter()
        .map(|((m, k, n), r)| format!("{m}x{k}x{n} {:.1}", r / 1e9))
        .collect();
    let tiles = |name: &str, v: &[((usize, usize, usize), f64)]| {
        v.iter()
            .map(|((m, k, n), r)| format!("; {name} {m}x{k}x{n} {:.1}", r / 1e9))
            .collect::<String>()
    };
    println!(
        "    host: SGEMM (m x k x n, GFLOP/s) {}{}{}{}{}; memcpy {} MiB {:.1} GB/s, {} MiB {:.1} GB/s",
        shapes.join(", "),
        tiles("AVX-512 panels", &rates.panels),
        tiles("VDPBF16PS panels bf16", &rates.dot_bf16),
        tiles("AMX bf16", &rates.amx_bf16),
        tiles("AMX fp16 split", &rates.amx_fp16),
        COPY_CACHE >> 20,
        rates.memcpy_cache / 1e9,
        COPY_MEMORY >> 20,
        rates.memcpy_memory / 1e9
    );
    if let Some(p) = hp {
        print_host_profile(&p, repeat, wall);
        if let Some(dir) = word_trace {
            let file = dir.join(format!("{stem}.words.jsonl"));
            write_words(&file, &stem, &p, repeat, wall)
                .map_err(|e| Failure(1, format!("{stem}: cannot write {}: {e}", file.display())))?;
            println!("    words: {}", file.display());
        }
    }
    Ok(())
}

/// The kept words of a host profile as JSON lines: a header (`neff`, `repeat`,
/// `wall_ns_per_exec`, `words`, `dropped`), then one line per word in issue order: `nc`,
/// `engine`, `pc`, `op`, `ns`, and `ops`, its operands as `[space, write, channels, lo,
/// hi]` (`S` or `P`; bytes `[lo, hi)` of each partition from the first, offsets counted
/// from partition 0 as `cayman_exec::Operand` has them).
fn write_words(
    file: &Path,
    stem: &str,
    p: &neuron_devmodel::HostProfile,
    repeat: u32,
    wall: f64,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(file)?);
    let header = serde_json::json!({
        "neff": stem,
        "repeat": repeat,
        "wall_ns_per_exec": (wall * 1e9).round() as u64,
        "words": p.words.len(),
        "dropped": p.words_dropped,
    });
    writeln!(out, "{header}")?;
    for w in &p.words {
        let ops: Vec<_> = w
            .operands
            .iter()
            .map(|o| {
                let sp = if o.space == neuron_isa::Space::Psum {
                    "P"
                } else {
                    "S"
                };
                serde_json::json!([sp, u8::from(o.write), o.channels, o.lo, o.hi])
            })
            .collect();
        let line = serde_json::json!({
            "nc": w.nc, "engine": w.engine, "pc": w.pc, "op": w.name, "ns": w.ns, "at": w.at_ns, "ops": ops,
        });
        writeln!(out, "{line}")?;
    }
    out.flush()
}

/// What the host offers and what the device model does with it.
fn amx_line() -> String {
    use neuron_devmodel::gemm::{amx, Path, ENV};
    if !amx::cpu_has_amx() {
        return "absent (CPUID leaf 7 EDX bits 22/24, XCR0 bits 17-18): every MATMUL on the portable SGEMM".into();
    }
    if !amx::available() {
        return "present but refused by the kernel (arch_prctl ARCH_REQ_XCOMP_PERM): every MATMUL on the portable SGEMM".into();
    }
    match Path::from_env() {
        Path::Amx => format!("present, used for bf16/fp8 MATMULs of >= 16 moving columns ({ENV}=portable turns it off; fp16 stays on the SGEMM)"),
        Path::Portable => format!("present, not used ({ENV}=portable): every MATMUL on the portable SGEMM"),
        Path::Dot => format!("present, not used ({ENV}=dot): bf16 panels on VDPBF16PS, other MATMULs on the portable SGEMM"),
    }
}

/// Whether the host has `VDPBF16PS` and the device model uses it (`gemm::dot`).
fn dot_line() -> String {
    use neuron_devmodel::gemm::{dot, Path, ENV};
    if !dot::cpu_has_dot() {
        return "absent (AVX512-BF16): bf16 MATMULs on the fp32 FMA kernel".into();
    }
    if !dot::available() {
        return "present, but its sums are not two fused multiply-adds on this CPU: not used"
            .into();
    }
    match Path::from_env() {
        Path::Dot => format!("present, used for bf16 x bf16 panels it proves exact (the same bits as the FMA kernel; {ENV}=portable turns it off)"),
        Path::Amx => "present, not used (AMX takes bf16)".into(),
        Path::Portable if dot::preferred() => format!("present, not used ({ENV}=portable)"),
        Path::Portable => format!("present, not used by default on this vendor's CPUs (no faster than FMA; {ENV}=dot uses it)"),
    }
}

/// The kernel the timed executions' bf16-representable MATMULs ran on, from the device's
/// counters: `amx` if any multiply-add ran on tiles, `bf16dot` if any on `VDPBF16PS`.
fn gemm_path(before: &neuron_devmodel::Stats, after: &neuron_devmodel::Stats) -> &'static str {
    use neuron_devmodel::gemm::Path;
    if after.amx_macs > before.amx_macs {
        Path::Amx.name()
    } else if after.dot_macs > before.dot_macs {
        Path::Dot.name()
    } else {
        Path::Portable.name()
    }
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
    fn the_median_is_the_middle_value() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0]), 3.0);
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [9.0, 1.0, 1.0, 1.0, 9.0]), 1.0);
    }

    #[test]
    fn peak_rss_is_read_from_proc() {
        // Linux CI: the status file exists and the peak is at least a page.
        assert!(peak_rss().is_some_and(|p| p >= 4096));
    }
}
