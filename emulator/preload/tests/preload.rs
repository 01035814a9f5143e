//! Unmodified binaries on the emulator through `LD_PRELOAD=libneuron_emu_preload.so`: the
//! runtime's real-syscall backend running the skeleton's end-to-end path, and a C program
//! driving the ABI with plain open/ioctl/mmap.

use std::process::Command;

mod common;

use common::{repo, shim};

#[test]
fn runtime_real_syscall_backend_runs_under_the_shim() {
    let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu-syscall-e2e"))
        .arg(repo().join("fixtures/neff/mlp.neff"))
        .arg(repo().join("fixtures/neff/mlp.golden/y.npy"))
        .env("LD_PRELOAD", shim())
        .output()
        .expect("spawn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Same device time as the in-process backend: determinism across transports.
    let want = format!("device_time_ps {}", in_process_device_time_ps());
    assert!(stdout.contains(&want), "{stdout} (in process: {want})");
}

/// The MLP fixture's device time with the same inputs through the in-process backend.
fn in_process_device_time_ps() -> u64 {
    use neuron_runtime::{Config, Runtime};
    let emu = neuron_emulator::Emulator::new(neuron_abi::arch::Arch::V3Trn2, 1);
    let f = emu
        .open(0, neuron_emulator::OpenOptions::default())
        .expect("open");
    let rt = Runtime::new(std::sync::Arc::new(f), 0, Config::default()).expect("runtime");
    let neff = std::fs::read(repo().join("fixtures/neff/mlp.neff")).expect("mlp.neff");
    let mut m = rt.load(&neff, 0).expect("load");
    let vals = neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, 0), 128 * 512, 1.0);
    let mut x = vec![0u8; 128 * 512 * 2];
    for (i, v) in vals.iter().enumerate() {
        neuron_isa::dtype::store_f32(neuron_isa::Dtype::Bf16, *v, &mut x[i * 2..]);
    }
    m.execute(&[("x", &x)]).expect("execute").device_time_ps
}

#[test]
fn without_the_shim_there_is_no_device() {
    let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu-syscall-e2e"))
        .arg("x.neff")
        .arg("y.npy")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("spawn");
    if std::path::Path::new("/dev/neuron0").exists() {
        return; // a real device is present; nothing to show here
    }
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("open /dev/neuron0"));
}

/// Compile `tests/c/<name>.c` with the system cc and run it under the shim; it must succeed
/// and print "all checks passed".
fn run_c_under_the_shim(name: &str, flags: &[&str]) {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-shim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let exe = tmp.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .arg(repo().join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&exe)
        .args(["-Wall", "-Werror", "-O1"])
        .args(flags)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe)
        .env("LD_PRELOAD", shim())
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

#[test]
fn c_program_drives_the_abi_under_the_shim() {
    run_c_under_the_shim("abi_smoke", &[]);
    // Other paths pass through untouched.
    let out = Command::new("cat")
        .arg(repo().join("README.md"))
        .env("LD_PRELOAD", shim())
        .output()
        .expect("cat");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("# neuron-emu")
    );
}

/// Device memory through plain syscalls, used as a hostile but legal program may (maps twice,
/// partial munmap, mprotect, many stores to the increment register from several threads).
#[test]
fn c_program_maps_unmaps_and_stores_freely_under_the_shim() {
    run_c_under_the_shim("mappings", &["-pthread"]);
}

/// The same fault plan works for an unmodified program: `NEURON_EMU_FAULTS` arms it on the
/// shim's devices, and the program sees the hardware's status; a bad plan is refused with its
/// line and key and no device appears.
#[test]
fn a_fault_plan_reaches_an_unmodified_program() {
    let dir =
        std::env::temp_dir().join(format!("neuron-emu-preload-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let plan = dir.join("dma.toml");
    std::fs::write(
        &plan,
        "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\ndescriptor = 1\n",
    )
    .expect("plan");
    let run = |plan: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_neuron-emu-syscall-e2e"))
            .arg(repo().join("fixtures/neff/mlp.neff"))
            .arg(repo().join("fixtures/neff/mlp.golden/y.npy"))
            .env("LD_PRELOAD", shim())
            .env("NEURON_EMU_FAULTS", plan)
            .output()
            .expect("spawn")
    };
    let out = run(&plan);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("NRT_EXEC_HW_ERR_DMA_ABORT"), "{stderr}");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\nbogus = 1\n",
    )
    .expect("plan");
    let out = run(&bad);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.toml: line 4") && stderr.contains("bogus"),
        "{stderr}"
    );
}
