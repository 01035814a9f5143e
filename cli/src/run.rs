//! `neuron-emu run`: load a NEFF through the driver ABI, run it once on given or built-in
//! inputs, report outputs (against a golden when given), device time, trace and faults.

use crate::golden::{compare_golden, finite_or_null, tolerance};
use crate::{campaign, open_emulated, tensorio, trace, usage, Failure};
use clap::Args;
use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::Emulator;
use neuron_neff::npy::NpyArray;
use neuron_runtime::{Config, Runtime};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The NEFF file.
    pub(crate) neff: PathBuf,
    /// Input tensor from a .npy file (repeatable). Inputs not given get built-in
    /// deterministic data (uniform in [-1, 1), seeded per input).
    #[arg(long = "input", value_name = "NAME=FILE.npy")]
    pub(crate) inputs: Vec<String>,
    /// Write each output to DIR/<name>.npy.
    #[arg(long, value_name = "DIR")]
    pub(crate) output_dir: Option<PathBuf>,
    /// Write bf16/fp16/fp8 outputs as raw bit patterns (<u2 / |u1) instead of float32.
    #[arg(long)]
    pub(crate) raw: bool,
    /// Device architecture: trn2, trn1 or inf2.
    #[arg(long, default_value = "trn2")]
    pub(crate) arch: String,
    /// Seed of the built-in inputs.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Directory of golden outputs (<name>.npy). Default: <neff stem>.golden next to the NEFF,
    /// used only with built-in inputs and seed 0. An output off by more than its tolerance
    /// fails the run (exit 1).
    #[arg(long, value_name = "DIR")]
    pub(crate) golden: Option<PathBuf>,
    /// Relative tolerance: an output passes if max|got-want| <= atol + rtol*max|want|.
    /// Default: the output's `tolerance` in a goldens.json beside the golden directory that
    /// lists it, else by dtype (float32 1e-4, bf16/fp16 2e-2, fp8 1.25e-1, integers 0).
    #[arg(long, value_name = "X")]
    pub(crate) rtol: Option<f64>,
    /// Absolute tolerance (default 0).
    #[arg(long, value_name = "Y")]
    pub(crate) atol: Option<f64>,
    /// Print the results as one JSON object on stdout (other report lines go to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// Write a Chrome/Perfetto trace of the device timeline: a process per core, a thread per
    /// engine and DMA queue, semaphore waits as flows, notifications (docs/profiling.md).
    #[arg(long, value_name = "FILE.json")]
    pub(crate) trace: Option<PathBuf>,
    /// Write a profile of the execution shaped like AWS neuron-profile's JSON (summary,
    /// instruction, dma, semaphore_update, ...), for `neuron-emu profile-diff`.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) profile_json: Option<PathBuf>,
    /// NeuronCore to load on.
    #[arg(long, default_value_t = 0)]
    pub(crate) nc: u32,
    /// Use a real device node (e.g. /dev/neuron0) through open/ioctl/mmap instead of the
    /// in-process emulated device. Under LD_PRELOAD=libneuron_emu_preload.so this reaches the
    /// emulator through the same syscalls hardware would get.
    #[arg(long, value_name = "PATH")]
    pub(crate) device: Option<PathBuf>,
    /// Inject every fault of a plan (TOML, docs/faults.md) into this run; prints which fired,
    /// the kernel log and the memory-error counters.
    #[arg(long, value_name = "PLAN.toml")]
    pub(crate) faults: Option<PathBuf>,
    /// Seed the plan's ranges are drawn with.
    #[arg(long, default_value_t = 0, requires = "faults")]
    pub(crate) fault_seed: u64,
}

/// Refuse unusable `--output-dir` / `--trace` / `--profile-json` paths before anything runs:
/// the output directory is created now, a file's directory must exist and the file must not be
/// a directory.
fn check_out_paths(a: &RunArgs) -> Result<(), Failure> {
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| usage(format!("--output-dir {}: {e}", dir.display())))?;
    }
    for (flag, p) in [("--trace", &a.trace), ("--profile-json", &a.profile_json)] {
        let Some(p) = p else { continue };
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if p.is_dir() {
            return Err(usage(format!("{flag} {}: is a directory", p.display())));
        }
        if !parent.is_dir() {
            return Err(usage(format!(
                "{flag} {}: directory {} does not exist",
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

pub(crate) fn run(a: RunArgs) -> Result<(), Failure> {
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
            if a.trace.is_some() || a.profile_json.is_some() {
                return Err(usage(
                    "--trace and --profile-json need the in-process emulated device (drop --device)",
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
    let recording = a.trace.is_some() || a.profile_json.is_some();
    if let (Some(emu), true) = (&emu, recording) {
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
    if let (Some(emu), true) = (&emu, recording) {
        let (ev, marks) = emu
            .with_device(0, |d| (d.take_trace(), d.take_marks()))
            .unwrap_or_default();
        let spans = model.last_spans();
        let mut cores: Vec<u32> = spans.iter().map(|s| s.nc).collect();
        cores.sort_unstable();
        cores.dedup();
        let cap = crate::profile::capture(
            0,
            cores,
            spans,
            &ev,
            &marks,
            &crate::profile::neff_names(&bytes),
        );
        let caps = [cap];
        let fail =
            |p: &Path, e: std::io::Error| Failure(1, format!("cannot write {}: {e}", p.display()));
        if let Some(p) = &a.trace {
            trace::write_trace(p, &caps).map_err(|e| fail(p, e))?;
            say(format!(
                "trace: {} spans, {} marks -> {} (open in ui.perfetto.dev)",
                ev.len(),
                marks.len(),
                p.display()
            ));
        }
        if let Some(p) = &a.profile_json {
            let meta = neuron_runtime::profile::Meta {
                profile_name: a
                    .neff
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                neff_name: model.name().to_string(),
                source: "neuron-emu run".into(),
            };
            let doc = neuron_runtime::profile::report(&meta, &caps);
            trace::write_json(p, &doc).map_err(|e| fail(p, e))?;
            say(format!(
                "profile: {} instructions -> {}",
                doc["instruction"].as_array().map_or(0, Vec::len),
                p.display()
            ));
        }
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
