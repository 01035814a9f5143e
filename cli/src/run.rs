//! `neuron-emu run`: load a NEFF through the driver ABI, run it once on given or built-in
//! inputs, report outputs (against a golden when given), device time, trace and faults.

use crate::golden::{finite_or_null, tolerance, GoldenStream};
use crate::runmem::{Need, Progress};
use crate::{campaign, open_emulated, runmem, tensorio, trace, usage, Failure};
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
    /// Show progress on stderr (a bar on a terminal, else a line per tenth of each phase).
    /// Without it, a bar is shown on a terminal when the model's tensors pass 256 MiB.
    #[arg(long)]
    pub(crate) progress: bool,
    /// Run even if the host memory the run needs (printed before runs over 1 GiB) exceeds
    /// MemAvailable; without it such a run is refused.
    #[arg(long)]
    pub(crate) no_memory_check: bool,
}

/// Bytes per block when tensors stream between the host and the device: inputs are built
/// or converted and outputs checked a block at a time, never whole on the host.
const BLOCK: usize = 8 << 20;

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
    let given_max = infos
        .iter()
        .filter(|t| given.iter().any(|(n, _)| n == &t.name))
        .map(|t| tensorio::max_input_file_bytes(t).saturating_mul(2))
        .max()
        .unwrap_or(0);
    let need = need_of(&model, given_max);
    runmem::check(&need, a.no_memory_check).map_err(|e| Failure(1, e))?;
    let mut progress = Progress::new(a.progress, need.inputs.saturating_add(need.outputs));
    // Inputs go to the device a block at a time: built-in data is generated into a
    // block-sized buffer, a file's converted bytes are freed once written.
    progress.phase("inputs", need.inputs);
    for (i, t) in infos.iter().enumerate() {
        let stage = |off: u64, b: &[u8]| {
            model
                .write_input(&t.name, off, b)
                .map_err(|e| Failure(1, format!("staging input '{}': {e}", t.name)))
        };
        match given.iter().find(|(n, _)| n == &t.name) {
            Some((_, p)) => {
                let raw = tensorio::read_input_file(t, p).map_err(usage)?;
                let arr = NpyArray::parse(&raw)
                    .map_err(|e| usage(format!("input '{}': {}: {e}", t.name, p.display())))?;
                drop(raw);
                let bytes = tensorio::npy_to_tensor(t, arr).map_err(usage)?;
                for (k, b) in bytes.chunks(BLOCK).enumerate() {
                    stage((k * BLOCK) as u64, b)?;
                    progress.inc(b.len() as u64);
                }
            }
            None => {
                let mut gen = tensorio::BuiltinStream::new(t, a.seed, i);
                let mut buf = vec![0u8; (t.size as usize).min(block_of(t))];
                let mut off = 0u64;
                while off < t.size {
                    let n = (t.size - off).min(buf.len() as u64) as usize;
                    gen.fill(&mut buf[..n]);
                    stage(off, &buf[..n])?;
                    progress.inc(n as u64);
                    off += n as u64;
                }
            }
        }
    }
    let recording = a.trace.is_some() || a.profile_json.is_some();
    if let (Some(emu), true) = (&emu, recording) {
        emu.set_tracing(0, true);
    }
    progress.phase("executing", 0);
    let t_exec = Instant::now();
    let out = match model.execute_staged() {
        Ok((o, None)) => o,
        Ok((_, Some(e))) | Err(e) => {
            progress.finish();
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
    let outputs: Vec<_> = model.outputs().cloned().collect();
    progress.phase("outputs", need.outputs);
    let mut checked = Vec::new();
    for t in &outputs {
        checked.push(check_output(
            &model,
            t,
            golden_dir.as_deref(),
            &a,
            &mut progress,
        )?);
    }
    progress.finish();
    for (t, (sum, golden)) in outputs.iter().zip(checked) {
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
        if let (Some(g), Some(golden)) = (&golden_dir, golden) {
            match golden {
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

/// The host memory a run of `model` needs ([`Need`]); `files`: the transient bytes of the
/// largest input file.
pub(crate) fn need_of(model: &neuron_runtime::Model, files: u64) -> Need {
    let inputs = model.inputs().map(|t| t.size).sum::<u64>();
    let outputs = model.outputs().map(|t| t.size).sum::<u64>();
    let u = model.usage();
    let all = u.host.iter().chain(&u.device).sum::<u64>();
    Need {
        inputs,
        outputs,
        other: all.saturating_sub(inputs + outputs),
        files,
    }
}

/// A block of whole elements of `t`.
pub(crate) fn block_of(t: &neuron_runtime::TensorInfo) -> usize {
    let es = t.dtype.size().max(1);
    (BLOCK / es).max(1) * es
}

type Checked = (u64, Option<Result<crate::golden::GoldenCmp, String>>);

/// Stream output `t` off the device a block at a time: its checksum, its comparison with the
/// golden in `golden_dir`, and its `.npy` file with `--output-dir`.
fn check_output(
    model: &neuron_runtime::Model,
    t: &neuron_runtime::TensorInfo,
    golden_dir: Option<&Path>,
    a: &RunArgs,
    progress: &mut Progress,
) -> Result<Checked, Failure> {
    use std::io::Write;
    let mut golden = golden_dir.map(|g| GoldenStream::open(g, &t.name, &t.shape));
    let mut file = match &a.output_dir {
        Some(dir) => {
            let p = dir.join(format!("{}.npy", t.name));
            let fail = |e: std::io::Error| Failure(1, format!("cannot write {}: {e}", p.display()));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&p).map_err(fail)?);
            // The header of the whole array, then its data a block at a time.
            f.write_all(&tensorio::npy_header(t, a.raw)).map_err(fail)?;
            Some((f, p))
        }
        None => None,
    };
    let mut sum = tensorio::CHECKSUM_INIT;
    let mut buf = vec![0u8; (t.size as usize).min(block_of(t))];
    let mut off = 0u64;
    while off < t.size {
        let n = (t.size - off).min(buf.len() as u64) as usize;
        let b = &mut buf[..n];
        model
            .read_output(&t.name, off, b)
            .map_err(|e| Failure(1, format!("reading output '{}': {e}", t.name)))?;
        sum = tensorio::checksum_update(sum, b);
        if let Some(Ok(g)) = &mut golden {
            g.feed(&tensorio::to_f32(t.dtype, b));
        }
        if let Some((f, p)) = &mut file {
            let data = tensorio::npy_data(t, b, a.raw);
            f.write_all(&data)
                .map_err(|e| Failure(1, format!("cannot write {}: {e}", p.display())))?;
        }
        progress.inc(n as u64);
        off += n as u64;
    }
    if let Some((f, p)) = file {
        f.into_inner()
            .map_err(|e| Failure(1, format!("cannot write {}: {}", p.display(), e.error())))?;
    }
    Ok((sum, golden.map(|g| g.map(GoldenStream::finish))))
}
