//! `neuron-emu`: run NEFFs on an emulated Neuron device through the real driver ABI.

mod benchdaemon;
mod benchreal;
mod benchthreads;
mod calibrate;
mod campaign;
mod disasm;
mod firmware;
mod floor;
mod golden;
mod hostgemm;
mod inject;
mod inspect;
mod install;
mod ntff;
mod profile;
mod profile_diff;
mod run;
mod runmem;
mod serve;
mod sysfs;
mod tensorio;
mod trace;

use clap::{Parser, Subcommand};
use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::{Emulator, OpenOptions};
use neuron_runtime::{Config, Runtime};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "neuron-emu",
    version,
    about = "An emulated AWS Neuron device: run real-ABI NEFF workloads without silicon",
    after_help = "Environment:
  NEURON_EMU_GEMM=auto|portable|dot  MATMULs of bf16/fp8 operands on AMX tiles where the host
                                  has them (auto, the default) or all on the portable SGEMM;
                                  outputs may differ in the last bits between the two, device
                                  times never. Without AMX, auto runs bf16 x bf16 panels on
                                  VDPBF16PS on AMD hosts (dot: on any host with AVX512-BF16),
                                  with the portable path's bits
  NEURON_EMU_PASS_PAIRS=0         compute fp32 LOW/HIGH pass pairs as two products (default: one)
                                  (these two are read when a core's PE state is created or reset)
  NEURON_EMU_THREADS=auto|1|always  where the cores' data paths run: auto (the default) runs
                                  cores that work at the same time on separate host threads
                                  (the first on the device thread), 1 keeps all on the device
                                  thread (and turns off the helper threads that share large
                                  GEMMs and elementwise words), always threads every
                                  core; results and device times are bit-identical in every
                                  mode
  NEURON_EMU_HUGE_PAGES=on|off   HBM pages in transparent huge pages (on) or not (off, the
                                  default: in some VMs a huge page's first touch costs
                                  milliseconds); results are the same either way
  NEURON_EMU_UCODE_PATH=FILE|DIR  the GpSimd microcode carrier to stage (docs/firmware.md)
  NEURON_RT_*                     the runtime's settings, as libnrt reads them (docs/runtime-api.md)"
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
    Run(run::RunArgs),
    /// NEFF container tools.
    Neff {
        #[command(subcommand)]
        cmd: inspect::NeffCmd,
    },
    /// Disassemble a NEFF's engine programs.
    Disasm(disasm::DisasmArgs),
    /// Firmware carrier tools (docs/firmware.md).
    Firmware {
        #[command(subcommand)]
        cmd: firmware::FirmwareCmd,
    },
    /// Install neuron-ls/top/monitor, libnrt.so.1, the emulator libraries and the nrt headers.
    Install(install::InstallArgs),
    /// The emulated driver's sysfs tree: print an attribute or the tree, or write it to DIR.
    Sysfs(sysfs::SysfsArgs),
    /// Benchmarks that print a ratio against a host baseline measured in the same run.
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
    /// Fault-injection campaign: a golden run, then N seeded experiments with one fault of a
    /// plan each, classified masked / sdc / detected / hang / crash (docs/faults.md).
    Campaign(campaign::CampaignArgs),
    /// Serve one emulated machine to many processes over a Unix socket (docs/daemon.md).
    Serve(serve::ServeArgs),
    /// Print the kernel log (dmesg) of a running `neuron-emu serve`.
    Dmesg(serve::DmesgArgs),
    /// Compare two execution profiles of one NEFF (a silicon neuron-profile JSON and
    /// `run --profile-json`): total time, per phase, per engine, per opcode (docs/profiling.md).
    ProfileDiff(profile_diff::DiffArgs),
    /// Decode an NTFF profile's execution records (docs/isa/cayman.md §4): per engine the
    /// words executed, first/last timestamp, busy and active time; per opcode; DMA packets.
    Ntff(ntff::NtffArgs),
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
    /// Compiler-produced NEFFs: host wall time against a floor (the kernel's multiply-adds by
    /// operand type, a pass pair once, at the host's best one-thread GEMM rate, plus its DMA
    /// bytes at memcpy speed, both measured in the same run), emulated device time, and the
    /// slowdown
    /// against the trn2 time AWS's profiler measured (`<stem>.profile.json`,
    /// `summary.total_time`) or, for NEFFs without a profile, the published time in
    /// `fixtures/trn2-times.json`; peak RSS against the model's input and output bytes.
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
        /// Also write `<stem>.words.jsonl` into DIR (implies --host-profile): every word of
        /// the timed executions in issue order, with its host nanoseconds, when it was issued (`at`, ns from the first) and the SBUF/PSUM
        /// bytes it reads and writes; `scripts/overlap-bound.py` reads it to bound what
        /// running engines' words on separate threads could gain.
        #[arg(long, value_name = "DIR")]
        word_trace: Option<PathBuf>,
    },
    /// Through `neuron-emu serve` vs in-process: an ioctl round trip and one execution of an
    /// attention kernel (default ../shared/fixtures/real-neff/akc-fused_bf16_s512.neff).
    Daemon {
        /// The NEFF to execute.
        file: Option<PathBuf>,
        /// Timed DEVICE_BASIC_INFO calls per round.
        #[arg(long, default_value_t = 20000)]
        ioctls: u32,
        /// Timed executions (after one warm-up).
        #[arg(long, default_value_t = 5)]
        repeat: u32,
    },
    /// Two models executing at once on NC 0 and NC 2 against one alone, with every data path
    /// on the device thread (NEURON_EMU_THREADS=1), with a host thread per core while another
    /// core runs (auto) and always (always). Default NEFF:
    /// ../shared/fixtures/real-neff/akc-fused_bf16_s1024.neff.
    Threads {
        /// The NEFF to execute.
        file: Option<PathBuf>,
        /// Timed executions per model (after one warm-up).
        #[arg(long, default_value_t = 10)]
        repeat: u32,
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
    // This program is all our code: nothing else touches SIGSEGV/SIGBUS, so the driver's
    // user-memory copies need not ask the kernel about them before each copy.
    neuron_emulator::guarded::own_signals();
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
        Cmd::Run(a) => run::run(a),
        Cmd::Campaign(a) => campaign::run(a),
        Cmd::Serve(a) => serve::serve(a),
        Cmd::Dmesg(a) => serve::dmesg(a),
        Cmd::Neff { cmd } => inspect::run(&cmd).map_err(|(c, m)| Failure(c, m)),
        Cmd::Disasm(a) => disasm::run(&a).map_err(|(c, m)| Failure(c, m)),
        Cmd::Firmware { cmd } => firmware::run(&cmd).map_err(|(c, m)| Failure(c, m)),
        Cmd::Install(a) => install::run(a).map_err(|m| Failure(1, m)),
        Cmd::Sysfs(a) => sysfs::run(&a).map_err(|(c, m)| Failure(c, m)),
        Cmd::ProfileDiff(a) => profile_diff::run(&a),
        Cmd::Ntff(a) => ntff::run(&a),
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
                BenchCmd::Daemon {
                    file,
                    ioctls,
                    repeat,
                },
        } => benchdaemon::run(file.as_deref(), ioctls, repeat),
        Cmd::Bench {
            which:
                BenchCmd::Real {
                    files,
                    profiles,
                    repeat,
                    host_profile,
                    word_trace,
                },
        } => benchreal::run(
            &files,
            profiles.as_deref(),
            repeat,
            host_profile,
            word_trace.as_deref(),
        ),
        Cmd::Bench {
            which: BenchCmd::Threads { file, repeat },
        } => benchthreads::run(file.as_deref(), repeat),
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
