//! `neuron-emu`: run NEFFs on an emulated Neuron device through the real driver ABI.

mod benchreal;
mod calibrate;
mod campaign;
mod disasm;
mod hostgemm;
mod inject;
mod inspect;
mod tensorio;
mod trace;

use clap::{Args, Parser, Subcommand};
use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::{Emulator, OpenOptions};
use neuron_neff::npy::NpyArray;
use neuron_runtime::{Config, Runtime};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "neuron-emu",
    version,
    about = "An emulated AWS Neuron device: run real-ABI NEFF workloads without silicon"
)]
struct Cli {
    /// More log output (-v INFO, -vv DEBUG); NEURON_RT_LOG_LEVEL also applies.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Load a NEFF through /dev/neuron0's ABI onto an emulated device, run it, report outputs.
    Run(RunArgs),
    /// NEFF container tools.
    Neff {
        #[command(subcommand)]
        cmd: inspect::NeffCmd,
    },
    /// Disassemble a NEFF's engine programs.
    Disasm(disasm::DisasmArgs),
    /// Benchmarks that print a ratio against a host baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
    /// Fault-injection campaign: a golden run, then N seeded experiments with one fault of a
    /// plan each, classified masked / sdc / detected / hang / crash (docs/faults.md).
    Campaign(campaign::CampaignArgs),
    /// Fit the cost of real trn2 instructions to AWS's per-instruction profile records
    /// (issue intervals), with leave-one-kernel-out validation.
    Calibrate {
        /// Profiled NEFFs. Default: every NEFF in ../shared/fixtures/real-neff with a profile.
        files: Vec<PathBuf>,
        /// Directory of `<stem>.profile.json`. Default: ../shared/fixtures/real-profiles.
        #[arg(long, value_name = "DIR")]
        profiles: Option<PathBuf>,
        /// Also write the calibrated classes as JSON.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Also run each kernel on the emulator under the uncalibrated table, the fit that did
        /// not see it, and the full fit, and compare its NEFF-body time with silicon's.
        #[arg(long)]
        validate: bool,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The NEFF file.
    neff: PathBuf,
    /// Input tensor from a .npy file (repeatable). Inputs not given get built-in
    /// deterministic data (uniform in [-1, 1), seeded per input).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    inputs: Vec<String>,
    /// Write each output to DIR/<name>.npy.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Write bf16/fp16/fp8 outputs as raw bit patterns (<u2 / |u1) instead of float32.
    #[arg(long)]
    raw: bool,
    /// Device architecture: trn2, trn1 or inf2.
    #[arg(long, default_value = "trn2")]
    arch: String,
    /// Seed of the built-in inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Directory of golden outputs (<name>.npy). Default: <neff stem>.golden next to the NEFF,
    /// used only with built-in inputs and seed 0. An output off by more than its tolerance
    /// fails the run (exit 1).
    #[arg(long, value_name = "DIR")]
    golden: Option<PathBuf>,
    /// Relative tolerance: an output passes if max|got-want| <= atol + rtol*max|want|.
    /// Default: the output's `tolerance` in a goldens.json beside the golden directory that
    /// lists it, else by dtype (float32 1e-4, bf16/fp16 2e-2, fp8 1.25e-1, integers 0).
    #[arg(long, value_name = "X")]
    rtol: Option<f64>,
    /// Absolute tolerance (default 0).
    #[arg(long, value_name = "Y")]
    atol: Option<f64>,
    /// Print the results as one JSON object on stdout (other report lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Write a Chrome/Perfetto trace of the device timeline.
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
    /// NeuronCore to load on.
    #[arg(long, default_value_t = 0)]
    nc: u32,
    /// Use a real device node (e.g. /dev/neuron0) through open/ioctl/mmap instead of the
    /// in-process emulated device. Under LD_PRELOAD=libneuron_emu_preload.so this reaches the
    /// emulator through the same syscalls hardware would get.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Inject every fault of a plan (TOML, docs/faults.md) into this run; prints which fired,
    /// the kernel log and the memory-error counters.
    #[arg(long, value_name = "PLAN.toml")]
    faults: Option<PathBuf>,
    /// Seed the plan's ranges are drawn with.
    #[arg(long, default_value_t = 0, requires = "faults")]
    fault_seed: u64,
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Load + parse of a NEFF vs a bare inflate of the same payload.
    Neff {
        /// The NEFF file.
        file: PathBuf,
        /// Timed repetitions.
        #[arg(long, default_value_t = 20)]
        repeat: u32,
    },
    /// Compiler-produced NEFFs: host wall time, emulated device time, and the slowdown against
    /// the trn2 time AWS's profiler measured (`<stem>.profile.json`, `summary.total_time`).
    Real {
        /// NEFF files. Default: every NEFF in ../shared/fixtures/real-neff (inputs over 1 GiB
        /// skipped).
        files: Vec<PathBuf>,
        /// Directory of `<stem>.profile.json`. Default: `../real-profiles` next to each NEFF.
        #[arg(long, value_name = "DIR")]
        profiles: Option<PathBuf>,
        /// Timed executions (after one warm-up).
        #[arg(long, default_value_t = 5)]
        repeat: u32,
        /// Also print, per NEFF, where the host time of the timed executions went: host
        /// microseconds per execution for each instruction kind (the device thread's data path).
        #[arg(long)]
        host_profile: bool,
    },
    /// A matmul-heavy NEFF through the full stack vs a host SGEMM of the same shapes.
    Gemm {
        /// Matmul instructions (each [128x128]^T x [128x512], fp32).
        #[arg(long, default_value_t = 512)]
        matmuls: u32,
        /// Timed executions (after one warm-up).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
}

/// A failure with the exit code it maps to (2: bad usage or input; 1: the run failed).
struct Failure(u8, String);

fn usage(msg: impl Into<String>) -> Failure {
    Failure(2, msg.into())
}

/// Die quietly when stdout is a closed pipe (`neuron-emu … | head`), as command-line tools do,
/// instead of panicking on the failed write: Rust ignores SIGPIPE by default.
#[allow(unsafe_code)]
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal at start-up, before any thread
    // exists; no handler is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    // A campaign's experiments fail by design: the runtime's error lines would drown the
    // progress bar (each experiment keeps its message in the report). -v brings them back.
    if matches!(cli.cmd, Cmd::Campaign(_))
        && cli.verbose == 0
        && std::env::var_os("NEURON_RT_LOG_LEVEL").is_none()
    {
        std::env::set_var("NEURON_RT_LOG_LEVEL", "OFF");
    }
    neuron_runtime::logging::init(cli.verbose);
    let r = match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::Campaign(a) => campaign::run(a),
        Cmd::Neff { cmd } => inspect::run(&cmd).map_err(|(c, m)| Failure(c, m)),
        Cmd::Disasm(a) => disasm::run(&a).map_err(|(c, m)| Failure(c, m)),
        Cmd::Calibrate {
            files,
            profiles,
            json,
            validate,
        } => calibrate::run(&files, profiles.as_deref(), json.as_deref(), validate),
        Cmd::Bench {
            which: BenchCmd::Gemm { matmuls, repeat },
        } => bench_gemm(matmuls, repeat),
        Cmd::Bench {
            which:
                BenchCmd::Real {
                    files,
                    profiles,
                    repeat,
                    host_profile,
                },
        } => benchreal::run(&files, profiles.as_deref(), repeat, host_profile),
        Cmd::Bench {
            which: BenchCmd::Neff { file, repeat },
        } => inspect::bench(&file, repeat).map_err(|(c, m)| Failure(c, m)),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("neuron-emu: {msg}");
            ExitCode::from(code)
        }
    }
}

fn open_emulated(arch: Arch) -> Result<(Emulator, Arc<dyn DeviceFile>), Failure> {
    let emu = Emulator::new(arch, 1);
    let f = emu
        .open(0, OpenOptions::default())
        .map_err(|e| Failure(1, format!("open /dev/neuron0 (emulated): {e}")))?;
    Ok((emu, Arc::new(f)))
}

/// Refuse unusable `--output-dir` / `--trace` paths before anything runs: the output directory
/// is created now, the trace file's directory must exist and the trace must not be a directory.
fn check_out_paths(a: &RunArgs) -> Result<(), Failure> {
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| usage(format!("--output-dir {}: {e}", dir.display())))?;
    }
    if let Some(p) = &a.trace {
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if p.is_dir() {
            return Err(usage(format!("--trace {}: is a directory", p.display())));
        }
        if !parent.is_dir() {
            return Err(usage(format!(
                "--trace {}: directory {} does not exist",
                p.display(),
                parent.display()
            )));
        }
    }
    for (flag, v) in [("--rtol", a.rtol), ("--atol", a.atol)] {
        if v.is_some_and(|x| !(x >= 0.0 && x.is_finite())) {
            return Err(usage(format!("{flag} must be a finite number >= 0")));
        }
    }
    Ok(())
}

/// An output's tolerance and where it came from.
#[derive(Debug, Clone, Copy)]
struct Tolerance {
    rtol: f64,
    atol: f64,
    source: &'static str,
}

/// Default relative tolerance of an output dtype (the precisions of fixtures/real-golden).
fn dtype_rtol(dt: neuron_isa::Dtype) -> f64 {
    use neuron_isa::Dtype::*;
    match dt {
        F32 | F32r => 1e-4,
        Bf16 | F16 => 2e-2,
        Fp8E3 | Fp8E4 | Fp8E5 => 1.25e-1,
        _ => 0.0,
    }
}

/// The `tolerance` that a `goldens.json` beside (or in) the golden directory gives output
/// `name`, for the kernel named like the golden directory or whose NEFF file is `neff`.
fn manifest_rtol(golden: &Path, neff: &Path, name: &str) -> Option<f64> {
    let dir_name = golden.file_name()?.to_str()?;
    let neff_name = neff.file_name().and_then(|n| n.to_str());
    for m in [
        golden.join("goldens.json"),
        golden.parent()?.join("goldens.json"),
    ] {
        let Ok(f) = std::fs::File::open(&m) else {
            continue;
        };
        // A manifest is a few KiB: read it bounded.
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut raw).ok()?;
        let j: serde_json::Value = serde_json::from_slice(&raw).ok()?;
        let kernels = j["kernels"].as_object()?;
        let k = kernels.get(dir_name).or_else(|| {
            kernels
                .values()
                .find(|k| neff_name.is_some() && k["neff"]["file"].as_str() == neff_name)
        })?;
        let out = k["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["name"] == name));
        if out.is_none() && k["outputs"].is_array() {
            continue;
        }
        return out
            .and_then(|o| o["tolerance"].as_f64())
            .or_else(|| k["tolerance"].as_f64());
    }
    None
}

fn tolerance(a: &RunArgs, golden: &Path, t: &neuron_runtime::TensorInfo) -> Tolerance {
    let atol = a.atol.unwrap_or(0.0);
    if let Some(rtol) = a.rtol {
        return Tolerance {
            rtol,
            atol,
            source: "--rtol",
        };
    }
    match manifest_rtol(golden, &a.neff, &t.name) {
        Some(rtol) => Tolerance {
            rtol,
            atol,
            source: "goldens.json",
        },
        None => Tolerance {
            rtol: dtype_rtol(t.dtype),
            atol,
            source: "dtype default",
        },
    }
}

fn run(a: RunArgs) -> Result<(), Failure> {
    let arch = Arch::from_name(&a.arch)
        .ok_or_else(|| usage(format!("unknown --arch '{}' (trn2, trn1, inf2)", a.arch)))?;
    check_out_paths(&a)?;
    let bytes = std::fs::read(&a.neff)
        .map_err(|e| usage(format!("cannot read {}: {e}", a.neff.display())))?;
    let mut given: Vec<(String, PathBuf)> = Vec::new();
    for s in &a.inputs {
        let (n, p) = s
            .split_once('=')
            .ok_or_else(|| usage(format!("--input expects NAME=FILE.npy, got '{s}'")))?;
        given.push((n.to_string(), PathBuf::from(p)));
    }
    let (emu, dev): (Option<Emulator>, Arc<dyn DeviceFile>) = match &a.device {
        Some(p) => {
            if a.trace.is_some() {
                return Err(usage(
                    "--trace needs the in-process emulated device (drop --device)",
                ));
            }
            let path = p.to_string_lossy();
            let d = neuron_runtime::sys::SysDevice::open(&path)
                .map_err(|e| Failure(1, format!("open {path}: {e}")))?;
            (None, Arc::new(d))
        }
        None => {
            let (e, d) = open_emulated(arch)?;
            (Some(e), d)
        }
    };
    let mut armed = Vec::new();
    if let Some(plan_path) = &a.faults {
        let Some(emu) = &emu else {
            return Err(usage(
                "--faults needs the in-process emulated device (drop --device; under the preload shim use NEURON_EMU_FAULTS)",
            ));
        };
        let (plan, _) = campaign::load_plan(plan_path, arch)?;
        let set = neuron_faults::inject::InjectorSet::from_plan(
            &plan,
            &campaign::limits(arch),
            a.fault_seed,
        );
        armed = plan
            .faults
            .iter()
            .map(|f| f.id.clone())
            .zip(set.fired())
            .collect();
        emu.set_hooks(0, Some(Box::new(set)));
    }
    // With --json, stdout carries only the JSON object.
    let json = a.json;
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let report_faults = |emu: &Option<Emulator>| {
        if let (Some(emu), false) = (emu, armed.is_empty()) {
            for (id, fired) in &armed {
                let f = fired.load(std::sync::atomic::Ordering::Acquire);
                say(format!(
                    "fault {id}: {}",
                    if f { "fired" } else { "not reached" }
                ));
            }
            for l in emu.kernel_log() {
                say(format!("dmesg: {}", l.dmesg()));
            }
            if let Some(c) = emu.ecc(0) {
                say(format!(
                    "stats/hardware: sram_ecc_uncorrected {} mem_ecc_uncorrected {} mem_ecc_repairable_uncorrected {}",
                    c.sysfs_sram_ecc_uncorrected(),
                    c.sysfs_mem_ecc_uncorrected(),
                    c.sysfs_mem_ecc_repairable_uncorrected()
                ));
            }
        }
    };
    let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| Failure(1, e.to_string()))?;
    let t_load = Instant::now();
    let mut model = match rt.load(&bytes, a.nc) {
        Ok(m) => m,
        Err(e) => {
            report_faults(&emu);
            return Err(Failure(1, format!("load failed: {e}")));
        }
    };
    let load_time = t_load.elapsed();
    let infos: Vec<_> = model.inputs().cloned().collect();
    for (n, _) in &given {
        if !infos.iter().any(|t| &t.name == n) {
            let names: Vec<&str> = infos.iter().map(|t| t.name.as_str()).collect();
            return Err(usage(format!(
                "the model has no input '{n}' (inputs: {})",
                names.join(", ")
            )));
        }
    }
    let mut data: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, t) in infos.iter().enumerate() {
        let bytes = match given.iter().find(|(n, _)| n == &t.name) {
            Some((_, p)) => {
                let raw = tensorio::read_input_file(t, p).map_err(usage)?;
                let arr = NpyArray::parse(&raw)
                    .map_err(|e| usage(format!("input '{}': {}: {e}", t.name, p.display())))?;
                tensorio::npy_to_tensor(t, &arr).map_err(usage)?
            }
            None => tensorio::builtin_input(t, a.seed, i),
        };
        data.push((t.name.clone(), bytes));
    }
    if let (Some(emu), true) = (&emu, a.trace.is_some()) {
        emu.set_tracing(0, true);
    }
    let refs: Vec<(&str, &[u8])> = data
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let t_exec = Instant::now();
    let out = match model.execute(&refs) {
        Ok(o) => o,
        Err(e) => {
            report_faults(&emu);
            return Err(Failure(1, format!("execution failed: {e}")));
        }
    };
    let wall = t_exec.elapsed();
    report_faults(&emu);

    let golden_dir = a.golden.clone().or_else(|| {
        let d = a.neff.with_extension("golden");
        (given.is_empty() && a.seed == 0 && d.is_dir()).then_some(d)
    });
    let on = match &a.device {
        Some(p) => format!("{} ({})", p.display(), rt.arch()),
        None => format!("emulated {arch}"),
    };
    say(format!(
        "model {} (internal name '{}') on {on} NC {} (load {:.1} ms)",
        a.neff.display(),
        model.name(),
        a.nc,
        load_time.as_secs_f64() * 1e3
    ));
    let mut failures = Vec::new();
    let mut json_outputs = Vec::new();
    for (t, bytes) in &out.outputs {
        let sum = tensorio::checksum(bytes);
        let mut line = format!(
            "output {:<12} {:<9} {:?} checksum {:016x}",
            t.name,
            t.dtype.name(),
            t.shape,
            sum
        );
        let mut j = serde_json::json!({
            "name": t.name,
            "dtype": t.dtype.name(),
            "shape": t.shape,
            "checksum": format!("{sum:016x}"),
            "max_abs_err": null,
            "rel_err": null,
            "rtol": null,
            "atol": null,
            "compared": null,
            "pass": null,
        });
        if let Some(g) = &golden_dir {
            match compare_golden(g, &t.name, t.dtype, &t.shape, bytes) {
                Ok(c) => {
                    let tol = tolerance(&a, g, t);
                    // NaN errors compare false: a NaN output never passes.
                    let pass = c.max_abs_err <= tol.atol + tol.rtol * c.scale;
                    line.push_str(&format!(
                        " max_abs_err {:.3e} rel_err {:.3e} ({}) {} (rtol {:e}, atol {:e}, {})",
                        c.max_abs_err,
                        c.rel_err,
                        c.what,
                        if pass { "pass" } else { "FAIL" },
                        tol.rtol,
                        tol.atol,
                        tol.source
                    ));
                    j["max_abs_err"] = serde_json::json!(finite_or_null(c.max_abs_err));
                    j["rel_err"] = serde_json::json!(finite_or_null(c.rel_err));
                    j["rtol"] = serde_json::json!(tol.rtol);
                    j["atol"] = serde_json::json!(tol.atol);
                    j["compared"] = serde_json::json!(c.what);
                    j["pass"] = serde_json::json!(pass);
                    if !pass {
                        failures.push(format!(
                            "output {} does not match its golden: rel_err {:.3e} (max_abs_err {:.3e}) exceeds the tolerance rtol {:e} + atol {:e} ({})",
                            t.name, c.rel_err, c.max_abs_err, tol.rtol, tol.atol, tol.source
                        ));
                    }
                }
                Err(e) => {
                    line.push_str(" golden: unavailable");
                    j["pass"] = serde_json::json!(false);
                    j["golden_error"] = serde_json::json!(e);
                    failures.push(e);
                }
            }
        }
        say(line);
        json_outputs.push(j);
        if let Some(dir) = &a.output_dir {
            let arr = tensorio::tensor_to_npy(t, bytes, a.raw).map_err(|e| Failure(1, e))?;
            let p = dir.join(format!("{}.npy", t.name));
            std::fs::write(&p, arr.to_bytes())
                .map_err(|e| Failure(1, format!("cannot write {}: {e}", p.display())))?;
        }
    }
    say(format!(
        "device time {:.3} us, host wall {:.3} ms",
        out.device_time_ps as f64 / 1e6,
        wall.as_secs_f64() * 1e3
    ));
    if let (Some(p), Some(emu)) = (&a.trace, &emu) {
        let ev = emu.take_trace(0);
        trace::write_chrome_trace(p, &ev)
            .map_err(|e| Failure(1, format!("cannot write {}: {e}", p.display())))?;
        say(format!(
            "trace: {} events -> {} (open in ui.perfetto.dev)",
            ev.len(),
            p.display()
        ));
    }
    if json {
        let j = serde_json::json!({
            "model": model.name(),
            "neff": a.neff.display().to_string(),
            "device": on,
            "nc": a.nc,
            "golden": golden_dir.as_ref().map(|g| g.display().to_string()),
            "outputs": json_outputs,
            "device_time_ps": out.device_time_ps,
            "device_time_us": out.device_time_ps as f64 / 1e6,
            "host_time_ms": wall.as_secs_f64() * 1e3,
            "load_time_ms": load_time.as_secs_f64() * 1e3,
            "pass": failures.is_empty(),
        });
        println!("{j}");
    }
    if !failures.is_empty() {
        return Err(Failure(1, failures.join("\nneuron-emu: ")));
    }
    drop(model);
    Ok(())
}

/// JSON has no NaN or infinity: those errors are written as null (and fail).
fn finite_or_null(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// An output against its golden.
struct GoldenCmp {
    /// max |got - want| (NaN if any compared element is NaN in one but not the other).
    max_abs_err: f64,
    /// max |want|.
    scale: f64,
    /// max_abs_err / scale (max_abs_err when the golden is all zero).
    rel_err: f64,
    what: String,
}

/// Compare an output with its golden: `<dir>/<name>.npy` (float32, same element count), or a
/// reduced golden (`<dir>/reduction.json`: column blocks and sampled elements of a large
/// output).
fn compare_golden(
    dir: &Path,
    name: &str,
    dt: neuron_isa::Dtype,
    shape: &[u64],
    bytes: &[u8],
) -> Result<GoldenCmp, String> {
    let read = |p: &Path| -> Result<Vec<f32>, String> {
        let raw = std::fs::read(p).map_err(|e| format!("golden {}: {e}", p.display()))?;
        let g = NpyArray::parse(&raw).map_err(|e| format!("golden {}: {e}", p.display()))?;
        if g.dtype != neuron_neff::npy::NpyDtype::F32 {
            return Err(format!("golden {} must be float32", p.display()));
        }
        Ok(tensorio::to_f32(neuron_isa::Dtype::F32, &g.data))
    };
    let got = tensorio::to_f32(dt, bytes);
    let full = dir.join(format!("{name}.npy"));
    let (got_sel, want, what) = if full.exists() {
        let want = read(&full)?;
        if want.len() != got.len() {
            return Err(format!(
                "golden {} has {} elements, output {}",
                full.display(),
                want.len(),
                got.len()
            ));
        }
        (got, want, "all elements".to_string())
    } else {
        reduced_golden(dir, name, shape, &got, &read)?
    };
    // f32::max drops NaN; a NaN difference must poison the error instead (equal
    // infinities or NaN in both count as a match).
    let mut err = 0.0f64;
    for (w, g) in want.iter().zip(&got_sel) {
        let (w, g) = (f64::from(*w), f64::from(*g));
        if w == g || (w.is_nan() && g.is_nan()) {
            continue;
        }
        let d = (w - g).abs();
        if d.is_nan() || d > err {
            err = d;
        }
        if err.is_nan() {
            break;
        }
    }
    let scale = want
        .iter()
        .filter(|w| w.is_finite())
        .fold(0.0f64, |m, w| m.max(f64::from(w.abs())));
    Ok(GoldenCmp {
        max_abs_err: err,
        scale,
        rel_err: if scale > 0.0 { err / scale } else { err },
        what,
    })
}

type Selection = (Vec<f32>, Vec<f32>, String);

/// The elements a `reduction.json` golden names, from the output and from the golden files
/// (paths in it are relative to the golden directory's parent).
fn reduced_golden(
    dir: &Path,
    name: &str,
    shape: &[u64],
    got: &[f32],
    read: &dyn Fn(&Path) -> Result<Vec<f32>, String>,
) -> Result<Selection, String> {
    let rp = dir.join("reduction.json");
    let raw = std::fs::read(&rp)
        .map_err(|_| format!("no golden {}/{name}.npy or reduction.json", dir.display()))?;
    let j: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| format!("{}: {e}", rp.display()))?;
    if j["output"] != name {
        return Err(format!(
            "{} describes output {}, not {name}",
            rp.display(),
            j["output"]
        ));
    }
    let [rows, cols] = shape else {
        return Err(format!(
            "reduced goldens need a 2-D output; {name} is {shape:?}"
        ));
    };
    let (rows, cols) = (*rows as usize, *cols as usize);
    let base = dir.parent().unwrap_or(Path::new("."));
    let files = j["files"].as_array().cloned().unwrap_or_default();
    let file = |i: usize| -> Result<std::path::PathBuf, String> {
        files
            .get(i)
            .and_then(|f| f["file"].as_str())
            .map(|f| base.join(f))
            .ok_or_else(|| format!("{}: files[{i}] missing", rp.display()))
    };
    let (mut g, mut w) = (Vec::new(), Vec::new());
    let blocks = j["column_blocks"].as_array().cloned().unwrap_or_default();
    for (bi, b) in blocks.iter().enumerate() {
        let (c0, c1) = (
            b[0].as_u64().unwrap_or(0) as usize,
            b[1].as_u64().unwrap_or(0) as usize,
        );
        if c0 >= c1 || c1 > cols {
            return Err(format!("{}: bad column block {b}", rp.display()));
        }
        let want = read(&file(bi)?)?;
        if want.len() != rows * (c1 - c0) {
            return Err(format!("{}: block {bi} size mismatch", rp.display()));
        }
        for r in 0..rows {
            g.extend_from_slice(&got[r * cols + c0..r * cols + c1]);
        }
        w.extend(want);
    }
    let idx_path = file(blocks.len())?;
    let idx_raw = std::fs::read(&idx_path).map_err(|e| format!("{}: {e}", idx_path.display()))?;
    let idx = NpyArray::parse(&idx_raw).map_err(|e| format!("{}: {e}", idx_path.display()))?;
    let vals = read(&file(blocks.len() + 1)?)?;
    let pairs: Vec<u64> = idx
        .data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])))
        .collect();
    if pairs.len() != 2 * vals.len() {
        return Err(format!(
            "{}: sample index/value count mismatch",
            rp.display()
        ));
    }
    for (rc, v) in pairs.chunks_exact(2).zip(&vals) {
        let (r, c) = (rc[0] as usize, rc[1] as usize);
        if r >= rows || c >= cols {
            return Err(format!(
                "{}: sample ({r}, {c}) outside the output",
                rp.display()
            ));
        }
        g.push(got[r * cols + c]);
        w.push(*v);
    }
    let what = format!(
        "reduced: {} column blocks + {} samples",
        blocks.len(),
        vals.len()
    );
    Ok((g, w, what))
}

fn bench_gemm(matmuls: u32, repeat: u32) -> Result<(), Failure> {
    if matmuls == 0 || repeat == 0 {
        return Err(usage("--matmuls and --repeat must be positive"));
    }
    let (m, k, n) = (128usize, 128usize, 512usize);
    let flops = 2.0 * (m * k * n) as f64 * matmuls as f64;
    let neff =
        neuron_kbuild::kernels::gemm_bench(matmuls).map_err(|e| Failure(1, e.to_string()))?;
    let a = neuron_kbuild::prng::uniform(11, k * m, 1.0);
    let b = neuron_kbuild::prng::uniform(12, k * n, 1.0);
    let ab: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    let bb: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();

    // Host baseline: the same products on host matrices.
    let mut c = vec![0f32; m * n];
    let t = Instant::now();
    for _ in 0..repeat {
        for i in 0..matmuls {
            hostgemm::sgemm_at_b(m, k, n, &a, &b, if i == 0 { 0.0 } else { 1.0 }, &mut c);
        }
    }
    let host = t.elapsed().as_secs_f64() / repeat as f64;

    let (_emu, dev) = open_emulated(Arch::V3Trn2)?;
    let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| Failure(1, e.to_string()))?;
    let mut model = rt.load(&neff, 0).map_err(|e| Failure(1, e.to_string()))?;
    let inputs = [("a", ab.as_slice()), ("b", bb.as_slice())];
    let warm = model
        .execute(&inputs)
        .map_err(|e| Failure(1, e.to_string()))?;
    let t = Instant::now();
    let mut dev_ps = 0;
    for _ in 0..repeat {
        dev_ps = model
            .execute(&inputs)
            .map_err(|e| Failure(1, e.to_string()))?
            .device_time_ps;
    }
    let emu_s = t.elapsed().as_secs_f64() / repeat as f64;
    let got = tensorio::to_f32(neuron_isa::Dtype::F32, &warm.outputs[0].1);
    let max_rel = got
        .iter()
        .zip(&c)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0f32, f32::max);

    let host_gf = flops / host / 1e9;
    let emu_gf = flops / emu_s / 1e9;
    println!("bench gemm: {matmuls} x MATMUL fp32 [128x128]^T x [128x512], {:.2} GFLOP per execution, {repeat} timed runs", flops / 1e9);
    println!(
        "  host sgemm (same shapes)      {:>8.2} ms  {:>7.1} GFLOP/s",
        host * 1e3,
        host_gf
    );
    println!(
        "  emulated, full stack          {:>8.2} ms  {:>7.1} GFLOP/s",
        emu_s * 1e3,
        emu_gf
    );
    println!("  ratio emulated/host           {:>8.2}", emu_gf / host_gf);
    println!(
        "  emulated device time          {:>8.2} us; max rel diff vs host {:.1e}",
        dev_ps as f64 / 1e6,
        max_rel
    );
    Ok(())
}
