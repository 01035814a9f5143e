//! Host memory of `neuron-emu run`: peak RSS against the model's bytes, the estimate and
//! refusal before a big run, progress on stderr only.

use neuron_isa::{Dtype, Engine};
use neuron_kbuild::words::{
    nop, sb, tensor_scalar, Scalar, ALU_ADD, ALU_BYPASS, DMA_INCREMENT, SEM_VECTOR,
};
use neuron_kbuild::{KernelBuilder, Xfer};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuron-emu"));
    c.env_remove("NEURON_RT_LOG_LEVEL");
    c.env_remove("NEURON_EMU_MEMINFO");
    c
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-mem-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

/// `out = in + 1` over [128, 4] fp32, plus an input `pad` of `pad_cols` fp16 columns and an
/// output `pad_out` of `out_cols` fp32 columns that the program never touches: tensors the run must still
/// stage and read back, at almost no compute.
fn padded_neff(dir: &Path, pad_cols: u64, out_cols: u64) -> PathBuf {
    let f = Dtype::F32;
    let mut k = KernelBuilder::new("padded");
    k.input("in", f, &[128, 4]).expect("in");
    k.input("pad", Dtype::F16, &[128, pad_cols]).expect("pad");
    k.output("out", f, &[128, 4]).expect("out");
    k.output("pad_out", f, &[128, out_cols]).expect("pad_out");
    k.dma_queue("qSPDynamicHW", Engine::Sp, &(8..=23).collect::<Vec<_>>());
    let l = k
        .dma("qSPDynamicHW", 8, &Xfer::row_tiles("in", f, 4, 4, 1, 0, 0))
        .expect("load");
    let s = k
        .dma("qSPDynamicHW", 9, &Xfer::store("out", f, 4, 64))
        .expect("store");
    k.push(Engine::Sp, l);
    k.push(Engine::Sp, s.wait(SEM_VECTOR, 1));
    k.push(Engine::Sp, nop().wait(9, DMA_INCREMENT));
    k.push(
        Engine::Dve,
        tensor_scalar(
            sb(64),
            f,
            sb(0),
            f,
            4,
            (ALU_ADD, Scalar::Imm(1.0)),
            (ALU_BYPASS, Scalar::Imm(0.0)),
        )
        .wait(8, DMA_INCREMENT)
        .inc(SEM_VECTOR),
    );
    let p = dir.join("padded.neff");
    std::fs::write(&p, k.build().expect("build")).expect("write neff");
    p
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The largest peak RSS of the children waited for so far, in bytes.
#[allow(unsafe_code)]
fn children_max_rss() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer we own.
    let r = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, ru.as_mut_ptr()) };
    assert_eq!(r, 0, "getrusage");
    // SAFETY: initialised by the successful call (and zeroed before).
    let ru = unsafe { ru.assume_init() };
    ru.ru_maxrss as u64 * 1024
}

/// A run whose tensors are 128 MiB (a 96 MiB fp16 input) stays within 1.3x of them plus a
/// fixed allowance: before inputs were staged and outputs read a block at a time, the built-in
/// fp16 input was held three times over while it was generated (its f32 values, twice its
/// size, and its bytes), about 290 MiB, and then once more on the device.
/// RUSAGE_CHILDREN is the largest of this binary's children; the other tests' are small.
#[test]
fn peak_rss_of_a_run_stays_near_the_models_bytes() {
    let d = tmpdir("rss");
    let (pad_cols, out_cols) = (384 * 1024u64, 64 * 1024u64);
    let neff = padded_neff(&d, pad_cols, out_cols);
    let o = bin()
        .args(["run", neff.to_str().expect("utf8")])
        .output()
        .expect("spawn");
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("output pad_out"), "{stdout}");
    let model = 128 * (2 * pad_cols + 4 * out_cols) + 2 * 128 * 16;
    let rss = children_max_rss();
    // The fixed part: code, the emulator's touched SBUF/PSUM/register pages, block buffers
    // (13-25 MiB for the small fixtures in a release build; more for this debug binary).
    let allowance = 64u64 << 20;
    let bound = model * 13 / 10 + allowance;
    assert!(
        rss <= bound,
        "peak RSS {} MiB > 1.3 x {} MiB + {} MiB",
        rss >> 20,
        model >> 20,
        allowance >> 20
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Before a run over 1 GiB, `run` prints what it needs; with too little MemAvailable it
/// refuses, before staging anything (so this 1.25 GiB model costs nothing here).
#[test]
fn a_big_run_prints_its_need_and_is_refused_without_the_memory() {
    let d = tmpdir("refuse");
    let neff = padded_neff(&d, 5 * 1024 * 1024, 4);
    let meminfo = d.join("meminfo");
    std::fs::write(
        &meminfo,
        "MemTotal:        2097152 kB\nMemAvailable:    1048576 kB\n",
    )
    .expect("meminfo");
    let o = bin()
        .args(["run", neff.to_str().expect("utf8")])
        .env("NEURON_EMU_MEMINFO", &meminfo)
        .output()
        .expect("spawn");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("memory: this run needs about 1.5") && err.contains("MemAvailable 1.00 GiB"),
        "{err}"
    );
    assert!(err.contains("not enough host memory"), "{err}");
    assert!(o.stdout.is_empty(), "nothing ran: {}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// `--progress` reports on stderr and leaves stdout (the results) exactly as without it.
#[test]
fn progress_goes_to_stderr_and_changes_no_result() {
    let d = tmpdir("progress");
    let neff = padded_neff(&d, 64, 64);
    let run = |extra: &[&str]| {
        let o = bin()
            .args(["run", neff.to_str().expect("utf8")])
            .args(extra)
            .output()
            .expect("spawn");
        assert!(o.status.success(), "{}", text(&o));
        o
    };
    let plain = run(&[]);
    let shown = run(&["--progress"]);
    let err = String::from_utf8_lossy(&shown.stderr);
    assert!(
        err.contains("progress: inputs") && err.contains("progress: done"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("progress:"));
    let strip = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.starts_with("device time") && !l.starts_with("model "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&plain), strip(&shown));
    let _ = std::fs::remove_dir_all(&d);
}

/// Under `ulimit -v` (here 24 GiB of address space, less than the arena's default 516 GiB
/// reservation) the device arena takes the room there is: the run works and gives the
/// output it gives without the limit. Before, every user mapping failed with ENODEV and the
/// load stopped at "mmap(notification queue) failed: ENODEV".
#[test]
#[allow(unsafe_code)]
fn a_run_under_a_limited_address_space_works() {
    use std::os::unix::process::CommandExt;
    let d = tmpdir("aslimit");
    let neff = padded_neff(&d, 4, 4);
    let free = bin()
        .args(["run", neff.to_str().expect("utf8")])
        .output()
        .expect("spawn");
    assert!(free.status.success(), "{}", text(&free));
    let mut c = bin();
    c.args(["run", neff.to_str().expect("utf8")]);
    // SAFETY: setrlimit only, between fork and exec (async-signal-safe).
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 24 << 30,
                rlim_max: 24 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let limited = c.output().expect("spawn");
    assert!(limited.status.success(), "{}", text(&limited));
    let checksums = |o: &Output| -> Vec<String> {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("output "))
            .map(str::to_string)
            .collect()
    };
    assert!(!checksums(&free).is_empty(), "{}", text(&free));
    assert_eq!(checksums(&limited), checksums(&free));
    let _ = std::fs::remove_dir_all(&d);
}
