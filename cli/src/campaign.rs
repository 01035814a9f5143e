//! `neuron-emu campaign`: a fault-free golden run of a NEFF, then N seeded experiments, each
//! with one fault of a plan injected into a fresh emulated device, classified against the
//! golden (masked / SDC / detected with the NRT status / hang / crash). Experiments run on
//! `--jobs` threads; their results depend only on (plan, NEFF, seed, index), so any thread
//! count or `--shard K/N` split gives the same per-experiment outcomes, and `campaign merge`
//! turns shard reports into exactly the single-run report.

use crate::inject::{self, Armed};
use crate::{tensorio, usage, Failure};
use clap::{Args, Subcommand};
use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_devmodel::device::{ThreadMode, THREADS_ENV};
use neuron_emulator::{Emulator, OpenOptions};
use neuron_faults::plan::{Limits, Plan};
use neuron_faults::report::{shard_range, Experiment, Report, Setup};
use neuron_faults::{classify, Class, Injection};
use neuron_runtime::{Config, NrtStatus, Runtime, TensorInfo, WaitCancel};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CampaignArgs {
    #[command(subcommand)]
    pub cmd: Option<CampaignCmd>,
    #[command(flatten)]
    pub run: RunCampaign,
}

#[derive(Subcommand, Debug)]
pub enum CampaignCmd {
    /// Merge shard reports of one campaign into the report a single run gives.
    Merge {
        /// Shard reports (JSON) written by `campaign --shard K/N --report FILE`.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Write the merged report (JSON).
        #[arg(long, value_name = "FILE", required = true)]
        report: PathBuf,
        /// Also write one CSV line per experiment.
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
        /// Also write an SVG chart of outcome classes per fault.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct RunCampaign {
    /// The fault plan (TOML, docs/faults.md).
    #[arg(required = true)]
    pub plan: Option<PathBuf>,
    /// The NEFF to run (built-in inputs, seed 0).
    #[arg(long, required = true)]
    pub neff: Option<PathBuf>,
    /// Experiments in the campaign.
    #[arg(short = 'n', long = "experiments", default_value_t = 100)]
    pub n: u64,
    /// Campaign seed: experiment i draws its fault from (seed, i) alone.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Experiments run at once (threads). Default: the host's cores.
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Run only shard K of N (0-based: K in 0..N), a contiguous slice of the experiments.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// Write the report (JSON; `campaign merge` reads it).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Also write one CSV line per experiment.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Also write an SVG chart of outcome classes per fault.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Re-run one experiment by index and print what happened (add --trace for its timeline).
    #[arg(long, value_name = "INDEX")]
    pub only: Option<u64>,
    /// With --only: write the experiment's Perfetto trace.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Masked vs SDC threshold on max|got-golden|/max|golden| over all outputs.
    #[arg(long, default_value_t = 1e-6)]
    pub tolerance: f64,
    /// Device architecture.
    #[arg(long, default_value = "trn2")]
    pub arch: String,
    /// Execution timeout of an experiment in seconds (default: 20x the golden execution's
    /// host time, at least 0.1 s). A timed-out experiment is a hang.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The machine limits a plan is checked against.
pub fn limits(arch: Arch) -> Limits {
    Limits::for_arch(arch, 1)
}

/// Read and validate a plan file.
pub fn load_plan(path: &Path, arch: Arch) -> Result<(Plan, String), Failure> {
    let text = neuron_faults::plan::read_plan_file(path).map_err(usage)?;
    let plan = neuron_faults::parse(&text, &limits(arch))
        .map_err(|e| usage(e.in_file(path.display().to_string()).to_string()))?;
    Ok((plan, text))
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// The fault-free run every experiment is compared with.
#[derive(Debug, Clone)]
pub struct Golden {
    pub outputs: Vec<Vec<f32>>,
    pub scale: f64,
    pub device_ns: u64,
    pub wall: Duration,
    pub exec_wall: Duration,
}

/// One experiment's raw result.
#[derive(Debug)]
pub struct RunResult {
    pub status: Option<u32>,
    pub status_name: Option<String>,
    pub outputs: Option<Vec<Vec<f32>>>,
    pub device_ns: u64,
    pub fired: bool,
    pub message: Option<String>,
    /// Host time of the execution itself (not the load).
    pub exec_wall: Duration,
}

/// The NEFF every experiment of a campaign loads: its bytes, and its container parsed once
/// (with the runtime's default parse options), so that each load does not inflate and unpack
/// it again; None where it does not parse (each load then refuses it as the runtime does).
pub struct NeffImage<'a> {
    bytes: &'a [u8],
    parsed: Option<neuron_neff::Neff>,
    /// The built-in inputs, made at the first load for the inputs it reported (each
    /// experiment made and filled them again: the inputs' pages alone were a sixth of an
    /// experiment's page faults).
    inputs: Mutex<Option<BuiltinInputs>>,
}

/// Built-in input bytes and the inputs they were made for.
type BuiltinInputs = (Vec<TensorInfo>, Arc<Vec<(String, Vec<u8>)>>);

impl<'a> NeffImage<'a> {
    pub fn new(bytes: &'a [u8]) -> NeffImage<'a> {
        NeffImage {
            bytes,
            parsed: neuron_neff::Neff::parse(bytes).ok(),
            inputs: Mutex::new(None),
        }
    }

    /// The built-in inputs (seed 0) of a model with inputs `infos`: made once, or again if a
    /// load reports other inputs.
    fn inputs(&self, infos: &[TensorInfo]) -> Arc<Vec<(String, Vec<u8>)>> {
        let mut held = self.inputs.lock().unwrap_or_else(|e| e.into_inner());
        match &*held {
            Some((i, data)) if i.as_slice() == infos => data.clone(),
            _ => {
                let data = Arc::new(tensorio::builtin_inputs(infos.iter()));
                *held = Some((infos.to_vec(), data.clone()));
                data
            }
        }
    }

    /// Load onto NeuronCore 0 of `rt`'s device.
    fn load(&self, rt: &Runtime) -> Result<neuron_runtime::Model, neuron_runtime::NrtError> {
        match &self.parsed {
            Some(n) => rt.load_neff(n, 0),
            None => rt.load(self.bytes, 0),
        }
    }
}

/// Load `neff` on a fresh emulated device, arm `inj` (if any), run once on the built-in inputs.
pub fn run_once(
    neff: &NeffImage<'_>,
    arch: Arch,
    inj: Option<&Injection>,
    timeout: Duration,
    trace: Option<&Path>,
    threads: Option<ThreadMode>,
) -> RunResult {
    let emu = Emulator::new(arch, 1);
    if let Some(mode) = threads {
        emu.set_threads(0, mode);
    }
    let file = match emu.open(0, OpenOptions::default()) {
        Ok(f) => f,
        Err(e) => return crashed(format!("open /dev/neuron0 (emulated): {e}")),
    };
    let mut dev: Arc<dyn DeviceFile> = Arc::new(file);
    let mut armed = Armed::default();
    if let Some(inj) = inj {
        match inject::arm(&emu, dev.clone(), inj) {
            Ok((d, a)) => {
                dev = d;
                armed = a;
            }
            Err(e) => return crashed(e),
        }
    }
    if trace.is_some() {
        emu.set_tracing(0, true);
    }
    // Once the execution waits on a device that has gone quiescent (nothing pending: only
    // user space could move it on), it is as hung as at its timeout, with the same status
    // and message: the watchdog ends the wait then, so the campaign does not wait out the
    // timeout (a plan's engine hangs and lost semaphore updates were most of a campaign's
    // wall time). A device still busy (a program in an endless loop) is left to the timeout.
    let token = Arc::new(WaitCancel::new());
    let r = token.watching(
        || emu.quiescent(0) == Some(true),
        WATCH_EVERY,
        || load_and_execute(neff, dev, timeout, &armed, &token),
    );
    if let Some(p) = trace {
        let ev = emu.take_trace(0);
        if let Err(e) = crate::trace::write_chrome_trace(p, &ev) {
            eprintln!("neuron-emu: cannot write {}: {e}", p.display());
        }
    }
    r
}

/// Where a campaign's experiments run their data paths: where the jobs fill the host's CPUs,
/// each on its device thread alone (helper threads and a second core's lane would only take
/// CPU from the other jobs' experiments: 1,000 experiments of akc-fused_bf16_s512 on two jobs
/// of a 2-CPU host ran 4-11% faster so); otherwise, or where `NEURON_EMU_THREADS` is set, the
/// device's default. Reports are the same either way (every mode gives the same bits).
fn experiment_threads(jobs: usize) -> Option<ThreadMode> {
    let set = std::env::var_os(THREADS_ENV).is_some_and(|v| !v.is_empty());
    let cpus = neuron_devmodel::hostcpus::host_cpus();
    threads_for(jobs, cpus, set)
}

/// [`experiment_threads`] for `jobs` on `cpus` CPUs, `NEURON_EMU_THREADS` set or not.
fn threads_for(jobs: usize, cpus: usize, env_set: bool) -> Option<ThreadMode> {
    (!env_set && jobs >= cpus).then_some(ThreadMode::Off)
}

/// How often an experiment's watchdog looks at its device (a hang is called at the second
/// quiet look in a row: 1 ms looks left the campaign idle ~2 ms a hung experiment).
const WATCH_EVERY: Duration = Duration::from_micros(250);

fn load_and_execute(
    neff: &NeffImage<'_>,
    dev: Arc<dyn DeviceFile>,
    timeout: Duration,
    armed: &Armed,
    token: &Arc<WaitCancel>,
) -> RunResult {
    let cfg = Config {
        exec_timeout: timeout,
        ..Config::default()
    };
    let fail = |e: neuron_runtime::NrtError| RunResult {
        status: Some(e.status.code()),
        status_name: Some(e.status.name().to_string()),
        outputs: None,
        device_ns: 0,
        fired: armed.fired(),
        message: Some(e.message),
        exec_wall: Duration::ZERO,
    };
    let rt = match Runtime::new(dev, 0, cfg) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let mut model = match neff.load(&rt) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    model.set_wait_cancel(token.clone());
    let infos: Vec<_> = model.inputs().cloned().collect();
    let data = neff.inputs(&infos);
    let refs: Vec<(&str, &[u8])> = data
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let t = Instant::now();
    let r = model.execute(&refs);
    let exec_wall = t.elapsed();
    match r {
        Ok(out) => RunResult {
            status: Some(0),
            status_name: None,
            outputs: Some(
                out.outputs
                    .iter()
                    .map(|(t, b)| tensorio::to_f32(t.dtype, b))
                    .collect(),
            ),
            device_ns: out.device_time_ps / 1000,
            fired: armed.fired(),
            message: None,
            exec_wall,
        },
        Err(e) => fail(e),
    }
}

fn crashed(msg: String) -> RunResult {
    RunResult {
        status: None,
        status_name: None,
        outputs: None,
        device_ns: 0,
        fired: false,
        message: Some(msg),
        exec_wall: Duration::ZERO,
    }
}

/// max|got−want| / max|want| over all outputs (NaN anywhere in got → NaN).
fn rel_err(got: &[Vec<f32>], g: &Golden) -> f64 {
    let mut worst = 0f64;
    for (a, b) in got.iter().zip(&g.outputs) {
        if a.len() != b.len() {
            return f64::INFINITY;
        }
        for (x, y) in a.iter().zip(b) {
            let d = (f64::from(*x) - f64::from(*y)).abs();
            if d.is_nan() {
                return f64::NAN;
            }
            worst = worst.max(d);
        }
    }
    if g.scale > 0.0 {
        worst / g.scale
    } else {
        worst
    }
}

fn golden_run(neff: &NeffImage<'_>, arch: Arch) -> Result<Golden, Failure> {
    let t = Instant::now();
    let r = run_once(neff, arch, None, Duration::from_secs(120), None, None);
    let wall = t.elapsed();
    match (r.status, r.outputs) {
        (Some(0), Some(outputs)) => {
            let scale = outputs
                .iter()
                .flatten()
                .fold(0f64, |a, v| a.max(f64::from(*v).abs()));
            Ok(Golden {
                outputs,
                scale,
                device_ns: r.device_ns,
                wall,
                exec_wall: r.exec_wall,
            })
        }
        _ => Err(Failure(
            1,
            format!(
                "the fault-free golden run failed: {}",
                r.message.unwrap_or_else(|| "no outputs".into())
            ),
        )),
    }
}

/// What every experiment of a campaign shares.
struct Campaign<'a> {
    plan: &'a Plan,
    limits: &'a Limits,
    neff: &'a NeffImage<'a>,
    arch: Arch,
    seed: u64,
    golden: &'a Golden,
    timeout: Duration,
    tolerance: f64,
    /// Where each experiment's data paths run (None: the device's default).
    threads: Option<ThreadMode>,
}

impl Campaign<'_> {
    /// Run experiment `index`.
    fn experiment(&self, index: u64, trace: Option<&Path>) -> Option<Experiment> {
        let inj = self.plan.experiment(self.limits, self.seed, index)?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_once(
                self.neff,
                self.arch,
                Some(&inj),
                self.timeout,
                trace,
                self.threads,
            )
        }))
        .unwrap_or_else(|_| crashed("the experiment panicked".into()));
        let err = r.outputs.as_ref().map_or(0.0, |o| rel_err(o, self.golden));
        let class = classify(r.status, err, self.tolerance);
        Some(Experiment {
            index,
            injection: inj,
            fired: r.fired,
            class,
            status: r.status,
            status_name: r.status_name.or_else(|| {
                r.status
                    .filter(|s| *s != 0)
                    .and_then(NrtStatus::from_code)
                    .map(|s| s.name().to_string())
            }),
            max_rel_err: if err.is_finite() { err } else { f64::MAX },
            device_ns: r.device_ns,
            message: r.message.map(|m| without_timeout_value(&m)),
        })
    }
}

/// The runtime's timeout message names the timeout, which a campaign derives from the host
/// time of its golden run: leave the number out so reports depend only on their inputs.
fn without_timeout_value(m: &str) -> String {
    const AT: &str = "execution timeout (";
    match m.find(AT) {
        Some(i) => {
            let rest = &m[i + AT.len()..];
            match rest.find(" ms)") {
                Some(j) if rest[..j].bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{}{AT}--timeout){}", &m[..i], &rest[j + 4..])
                }
                _ => m.to_string(),
            }
        }
        None => m.to_string(),
    }
}

fn parse_shard(s: &str) -> Result<(u64, u64), Failure> {
    let bad = || usage(format!("--shard expects K/N with 0 <= K < N, got {s:?}"));
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let k: u64 = k.trim().parse().map_err(|_| bad())?;
    let n: u64 = n.trim().parse().map_err(|_| bad())?;
    if n == 0 || k >= n {
        return Err(bad());
    }
    Ok((k, n))
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure(1, format!("cannot write {}: {e}", path.display())))
}

/// Check an output path can be written before spending time on the run.
fn check_writable(p: &Option<PathBuf>) -> Result<(), Failure> {
    if let Some(p) = p {
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(usage(format!(
                "{}: directory {} does not exist",
                p.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

fn write_outputs(
    r: &Report,
    report: &Option<PathBuf>,
    csv: &Option<PathBuf>,
    svg: &Option<PathBuf>,
) -> Result<(), Failure> {
    if let Some(p) = report {
        write(p, &r.to_json())?;
    }
    if let Some(p) = csv {
        write(p, &r.to_csv())?;
    }
    if let Some(p) = svg {
        write(p, &r.to_svg())?;
    }
    Ok(())
}

pub fn run(a: CampaignArgs) -> Result<(), Failure> {
    if let Some(CampaignCmd::Merge {
        reports,
        report,
        csv,
        svg,
    }) = a.cmd
    {
        for p in [&Some(report.clone()), &csv, &svg] {
            check_writable(p)?;
        }
        let mut parts = Vec::new();
        for p in &reports {
            let text = std::fs::read_to_string(p)
                .map_err(|e| usage(format!("cannot read {}: {e}", p.display())))?;
            let r = Report::from_json(&p.display().to_string(), &text)
                .map_err(|e| usage(e.to_string()))?;
            parts.push((p.display().to_string(), r));
        }
        let merged = Report::merge(parts).map_err(|e| Failure(1, e.to_string()))?;
        write_outputs(&merged, &Some(report), &csv, &svg)?;
        print!("{}", merged.to_table());
        return Ok(());
    }
    let c = a.run;
    let (Some(plan_path), Some(neff_path)) = (c.plan, c.neff) else {
        return Err(usage("campaign needs a PLAN and --neff FILE (see --help)"));
    };
    let arch = Arch::from_name(&c.arch)
        .ok_or_else(|| usage(format!("unknown --arch '{}' (trn2, trn1, inf2)", c.arch)))?;
    if !(c.tolerance.is_finite() && c.tolerance >= 0.0) {
        return Err(usage("--tolerance must be a non-negative number"));
    }
    if c.n == 0 || c.n > 100_000_000 {
        return Err(usage("-n must be 1..=100000000"));
    }
    for p in [&c.report, &c.csv, &c.svg, &c.trace] {
        check_writable(p)?;
    }
    if c.trace.is_some() && c.only.is_none() {
        return Err(usage("--trace needs --only INDEX"));
    }
    let (plan, plan_text) = load_plan(&plan_path, arch)?;
    inject::check_supported(&plan).map_err(usage)?;
    let neff = std::fs::read(&neff_path)
        .map_err(|e| usage(format!("cannot read {}: {e}", neff_path.display())))?;
    let lim = limits(arch);
    let image = NeffImage::new(&neff);
    let jobs = c
        .jobs
        .unwrap_or_else(neuron_devmodel::hostcpus::host_cpus)
        .clamp(1, 256);
    // Every experiment is a fresh device: each takes the shared memory (SBUF, PSUM, rings)
    // of one gone before it, zeroed, instead of allocating it page by page anew.
    neuron_emulator::keep_device_memory(jobs);
    let golden = golden_run(&image, arch)?;
    let timeout = match c.timeout {
        Some(s) if s.is_finite() && s > 0.0 && s < 1e6 => Duration::from_secs_f64(s),
        Some(_) => return Err(usage("--timeout must be a positive number of seconds")),
        None => (golden.exec_wall * 20).max(Duration::from_millis(100)),
    };
    let setup = Setup {
        plan_sha256: sha256_hex(plan_text.as_bytes()),
        plan_name: plan_path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        neff_sha256: sha256_hex(&neff),
        neff_name: neff_path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        arch: arch.name().to_string(),
        seed: c.seed,
        experiments: c.n,
        tolerance: c.tolerance,
        golden_device_ns: golden.device_ns,
    };

    let camp = Campaign {
        plan: &plan,
        limits: &lim,
        neff: &image,
        arch,
        seed: c.seed,
        golden: &golden,
        timeout,
        tolerance: c.tolerance,
        threads: if c.only.is_some() {
            None
        } else {
            experiment_threads(jobs)
        },
    };
    if let Some(i) = c.only {
        if i >= c.n {
            return Err(usage(format!(
                "--only {i}: the campaign has experiments 0..{}",
                c.n
            )));
        }
        let e = camp
            .experiment(i, c.trace.as_deref())
            .ok_or_else(|| Failure(1, "the plan has no faults".into()))?;
        println!(
            "experiment {i} of seed {}: fault {} ({})",
            c.seed,
            e.injection.fault,
            e.injection.effect.name()
        );
        println!(
            "injection: {}",
            serde_json::to_string(&e.injection).unwrap_or_default()
        );
        println!(
            "fired: {}; outcome: {}; status: {}; max_rel_err {:.3e}; device time {:.3} us",
            e.fired,
            e.class.name(),
            e.status_name
                .clone()
                .unwrap_or_else(|| e.status.map_or("crash".into(), |s| s.to_string())),
            e.max_rel_err,
            e.device_ns as f64 / 1e3
        );
        if let Some(m) = &e.message {
            println!("message: {m}");
        }
        if let Some(t) = &c.trace {
            println!("trace -> {} (open in ui.perfetto.dev)", t.display());
        }
        return Ok(());
    }

    let range = match &c.shard {
        Some(s) => {
            let (k, n) = parse_shard(s)?;
            shard_range(c.n, k, n)
        }
        None => 0..c.n,
    };
    let count = range.end - range.start;
    let bar = if c.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::with_draw_target(
            Some(count),
            indicatif::ProgressDrawTarget::stderr(),
        );
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:40}] {pos}/{len} experiments ({per_sec}, eta {eta}) {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    };
    let next = AtomicU64::new(range.start);
    let results: Mutex<Vec<Experiment>> = Mutex::new(Vec::with_capacity(count.min(4096) as usize));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..jobs.min(count.max(1) as usize) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= range.end {
                    break;
                }
                if let Some(e) = camp.experiment(i, None) {
                    if e.class != Class::Masked {
                        bar.set_message(format!("last: #{i} {}", e.class.name()));
                    }
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let wall = t0.elapsed();
    let experiments = results.into_inner().unwrap_or_else(|p| p.into_inner());
    let report = Report::new(setup, range.start, range.end, experiments);
    write_outputs(&report, &c.report, &c.csv, &c.svg)?;
    print!("{}", report.to_table());
    eprintln!(
        "golden run: device {:.3} us, host {:.1} ms; {} experiments in {:.2} s on {jobs} threads ({:.1} experiments/s)",
        golden.device_ns as f64 / 1e3,
        golden.wall.as_secs_f64() * 1e3,
        count,
        wall.as_secs_f64(),
        count as f64 / wall.as_secs_f64().max(1e-9)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn experiments_keep_to_their_device_thread_only_where_the_jobs_fill_the_cpus() {
        assert_eq!(threads_for(2, 2, false), Some(ThreadMode::Off));
        assert_eq!(threads_for(8, 2, false), Some(ThreadMode::Off));
        assert_eq!(threads_for(1, 2, false), None, "a CPU left for helpers");
        assert_eq!(threads_for(2, 2, true), None, "NEURON_EMU_THREADS decides");
    }

    #[test]
    fn a_timeout_message_loses_its_number() {
        assert_eq!(
            without_timeout_value("execution timeout (187 ms) on nc 0"),
            "execution timeout (--timeout) on nc 0"
        );
        assert_eq!(without_timeout_value("other"), "other");
    }
}
