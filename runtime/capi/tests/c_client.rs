//! `tests/c/run_neff.c`, a C program written against the public nrt.h API only, compiled with
//! the system cc against the project's headers and libnrt.so, runs the MLP fixture on the
//! embedded emulated device; its output equals the independent golden.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Removes a test's temporary directory when the test ends (the libraries copied there are
/// tens of megabytes; repeated runs must not fill the disk).
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A library cargo built for this test run (`libnrt.so`, `libneuron_emu.so`).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps dir");
    for d in [deps, deps.parent().unwrap_or(deps)] {
        let p = d.join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} not found next to {}", exe.display());
}

fn libnrt() -> PathBuf {
    built("libnrt.so")
}

/// libnrt.so reaches the emulator only through the backend library it loads: none of the
/// emulator's code is linked into it.
#[test]
fn libnrt_does_not_link_the_emulator() {
    let bytes = std::fs::read(libnrt()).expect("libnrt.so");
    for crate_name in [&b"neuron_emulator"[..], b"neuron_devmodel"] {
        assert!(
            !bytes.windows(crate_name.len()).any(|w| w == crate_name),
            "libnrt.so contains {}",
            String::from_utf8_lossy(crate_name)
        );
    }
    let emu = std::fs::read(built("libneuron_emu.so")).expect("libneuron_emu.so");
    assert!(emu.windows(15).any(|w| w == b"neuron_emulator"));
}

fn bf16_words(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
        .collect()
}

fn read_f32_npy(p: &Path) -> Vec<f32> {
    let raw = std::fs::read(p).expect("golden");
    // .npy v1: 10-byte preamble + header length at bytes 8..10.
    let hl = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    raw[10 + hl..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Compile `tests/c/run_neff.c` against the headers and a copy of libnrt.so in `tmp`.
fn build_client(tmp: &Path) -> PathBuf {
    build_c(tmp, &repo().join("tests/c/run_neff.c"), "run_neff")
}

/// Lay out `tmp/lib` as the SDK does (`libnrt.so` -> `libnrt.so.1` -> `libnrt.so.<version>`,
/// the backend beside it) and compile `src` against the headers with `cc -lnrt`.
fn build_c(tmp: &Path, src: &Path, name: &str) -> PathBuf {
    let _ = std::fs::remove_dir_all(tmp);
    let lib = tmp.join("lib");
    std::fs::create_dir_all(&lib).expect("tmp");
    // Programs record the SONAME (libnrt.so.1) as their dependency.
    let versioned = format!("libnrt.so.{}", env!("CARGO_PKG_VERSION"));
    std::fs::copy(libnrt(), lib.join(&versioned)).expect("copy lib");
    std::os::unix::fs::symlink(&versioned, lib.join("libnrt.so.1")).expect("symlink");
    std::os::unix::fs::symlink("libnrt.so.1", lib.join("libnrt.so")).expect("symlink");
    // NEURON_EMU=1 loads the backend from beside libnrt.so, as the SDK layout has it.
    std::fs::copy(built("libneuron_emu.so"), lib.join("libneuron_emu.so")).expect("copy backend");
    let exe = tmp.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg("-Wall")
        .arg("-Werror")
        .arg(format!("-I{}", repo().join("runtime/include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnrt")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let readelf = Command::new("readelf").arg("-d").arg(&exe).output();
    if let Ok(r) = readelf {
        let s = String::from_utf8_lossy(&r.stdout);
        assert!(s.contains("Shared library: [libnrt.so.1]"), "{s}");
    }
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(lib.join(&versioned))
        .output();
    if let Ok(r) = readelf {
        let s = String::from_utf8_lossy(&r.stdout);
        assert!(s.contains("Library soname: [libnrt.so.1]"), "{s}");
    }
    exe
}

/// Every nrt call AWS's spike client makes, from C (`tests/c/client_calls.c`): profiles, the
/// system trace, collectives loads, logical cores, device mappings, two models on one core and
/// the asynchronous API with real queues (submissions return first, 63 in flight).
#[test]
fn c_client_calls_every_function_spike_uses() {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-capi-calls-{}", std::process::id()));
    let _cleanup = Cleanup(tmp.clone());
    let exe = build_c(
        &tmp,
        &repo().join("runtime/capi/tests/c/client_calls.c"),
        "client_calls",
    );
    let out = client(&exe, &tmp, &repo().join("fixtures/neff/mlp.neff"), &[])
        .env("NEURON_RT_MAP_HBM", "1")
        .env_remove("NEURON_LOGICAL_NC_CONFIG")
        .output()
        .expect("run client_calls");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("all checks passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run the client in `tmp` on `neff` with `(input name, file)` pairs; returns stdout.
fn run_client(exe: &Path, tmp: &Path, neff: &Path, inputs: &[(&str, &str)]) -> String {
    let out = client(exe, tmp, neff, inputs)
        .output()
        .expect("run run_neff");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "run_neff failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The client command, environment set for the emulated device.
fn client(exe: &Path, tmp: &Path, neff: &Path, inputs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(exe);
    c.current_dir(tmp).arg(neff);
    for (n, f) in inputs {
        c.args([n, f]);
    }
    c.env("NEURON_EMU", "1")
        // Found beside libnrt.so, not through cargo's library path.
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("NEURON_EMU_LIB")
        .env_remove("NEURON_EMU_FAULTS")
        .env_remove("NEURON_RT_VISIBLE_CORES")
        .env_remove("NEURON_RT_NUM_CORES");
    c
}

/// `NEURON_EMU_FAULTS` reaches a program written for libnrt: the fault plan's HBM error is
/// the status `nrt_execute` returns.
#[test]
fn a_fault_plan_reaches_a_libnrt_client() {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-capi-faults-{}", std::process::id()));
    let _cleanup = Cleanup(tmp.clone());
    let exe = build_client(&tmp);
    let plan = tmp.join("hbm.toml");
    std::fs::write(
        &plan,
        "[[fault]]\nid = \"h\"\neffect = \"hbm-ue\"\naddress = [0x1000000, 0x1000040]\nat-ns = 1\n",
    )
    .expect("plan");
    let out = client(&exe, &tmp, &repo().join("fixtures/neff/mlp.neff"), &[])
        .env("NEURON_EMU_FAULTS", &plan)
        .output()
        .expect("run run_neff");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("nrt_execute(model, inputs, outputs) failed: NRT_EXEC_HW_ERR_HBM_UE (1201)"),
        "{stderr}"
    );
}

#[test]
fn run_neff_c_client_matches_golden() {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-capi-{}", std::process::id()));
    let _cleanup = Cleanup(tmp.clone());
    let exe = build_client(&tmp);

    // The built-in input x of `neuron-emu run` (seed 0), as raw bf16 bytes.
    let vals = neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, 0), 128 * 512, 1.0);
    let mut x = vec![0u8; 128 * 512 * 2];
    for (i, v) in vals.iter().enumerate() {
        neuron_isa::dtype::store_f32(neuron_isa::Dtype::Bf16, *v, &mut x[i * 2..]);
    }
    std::fs::write(tmp.join("x.bin"), &x).expect("x.bin");
    let stdout = run_client(
        &exe,
        &tmp,
        &repo().join("fixtures/neff/mlp.neff"),
        &[("x", "x.bin")],
    );
    assert!(
        stdout.contains("input x size 131072 dtype 0x6 ndim 2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("output y size 32768 dtype 0x6 ndim 2"),
        "{stdout}"
    );
    let y = bf16_words(&std::fs::read(tmp.join("y.out")).expect("y.out"));
    let want = read_f32_npy(&repo().join("fixtures/neff/mlp.golden/y.npy"));
    let rel = rel_err(&y, &want);
    assert!(rel <= 2e-2, "max|got-want|/max|want| = {rel}");
}

/// max |got - want| / max |want|, the metric of the goldens' manifests.
fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    err / scale
}

/// The same unmodified C client runs a NEFF that neuronx-cc compiled for trn2 (fused attention,
/// fp32, LNC=2) and matches its numpy golden.
#[test]
fn run_neff_c_client_runs_a_compiler_produced_neff() {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-capi-real-{}", std::process::id()));
    let _cleanup = Cleanup(tmp.clone());
    let exe = build_client(&tmp);
    let names = ["q_ref", "k_ref", "v_ref"];
    let mut args = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let vals =
            neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, i), 128 * 512, 1.0);
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let f = format!("{n}.bin");
        std::fs::write(tmp.join(&f), bytes).expect("input");
        args.push((*n, f));
    }
    let pairs: Vec<(&str, &str)> = args.iter().map(|(n, f)| (*n, f.as_str())).collect();
    let shared = repo().join("../shared/fixtures");
    assert!(
        shared.is_dir(),
        "the shared fixtures folder is missing: expected {} (../shared/fixtures beside the repository)",
        shared.display()
    );
    let neff = shared.join("real-neff/akc-fused_fp32_s512.neff");
    let stdout = run_client(&exe, &tmp, &neff, &pairs);
    assert!(stdout.contains("output kernel_out size 262144"), "{stdout}");
    let got: Vec<f32> = std::fs::read(tmp.join("kernel_out.out"))
        .expect("kernel_out.out")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let want =
        read_f32_npy(&repo().join("fixtures/real-golden/akc-fused_fp32_s512/kernel_out.npy"));
    let rel = rel_err(&got, &want);
    assert!(rel <= 1e-4, "max|got-want|/max|want| = {rel}");
}
