//! The sysfs tree at its real paths under `LD_PRELOAD=libneuron_emu_preload.so`: a C program
//! reading what lablup/all-smi reads, Python's `open`/`os.listdir`, Rust's `std::fs`, and `ls`
//! and `cat`, all on an emulated trn2.48xlarge; other paths pass through.

use std::process::{Command, Output};

mod common;

use common::{repo, shim};

/// Run `cmd` under the shim on an emulated trn2.48xlarge; it must succeed.
fn under_shim(cmd: &mut Command) -> String {
    let out: Output = cmd
        .env("LD_PRELOAD", shim())
        .env("NEURON_EMU_INSTANCE", "trn2.48xlarge")
        .env_remove("NEURON_EMU_ARCH")
        .env_remove("NEURON_EMU_DEVICES")
        .output()
        .expect("spawn");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn a_c_program_reads_the_all_smi_paths_and_lists_the_class() {
    let tmp = std::env::temp_dir().join(format!("neuron-emu-sysfs-c-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let exe = tmp.join("sysfs_paths");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(cc)
        .arg(repo().join("tests/c/sysfs_paths.c"))
        .arg("-o")
        .arg(&exe)
        .args(["-Wall", "-Werror", "-O1"])
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = under_shim(&mut Command::new(&exe));
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

#[test]
fn cat_and_ls_see_the_tree() {
    let s = under_shim(Command::new("cat").args([
        "/sys/module/neuron/version",
        "/sys/devices/virtual/dmi/id/product_name",
        "/sys/class/neuron_device/neuron15/connected_devices",
    ]));
    assert_eq!(s, "2.26.5.0\ntrn2.48xlarge\n14, 3, 11, 12\n");
    let s = under_shim(
        Command::new("ls")
            .arg("-R")
            .arg("/sys/devices/virtual/neuron_device/neuron15"),
    );
    assert!(s.contains("/sys/devices/virtual/neuron_device/neuron15/neuron_core7/stats/status/success:\npresent\ntotal\n"), "{}", &s[..s.len().min(2000)]);
    let s = under_shim(
        Command::new("ls")
            .arg("-l")
            .arg("/sys/class/neuron_device/"),
    );
    assert!(
        s.contains("neuron3 -> ../../devices/virtual/neuron_device/neuron3"),
        "{s}"
    );
    // The host's own files stay the host's.
    let s = under_shim(Command::new("cat").arg(repo().join("README.md")));
    assert!(s.starts_with("# neuron-emu"));
}

#[test]
fn python_open_and_listdir_see_the_tree() {
    if Command::new("python3").arg("-c").arg("1").output().is_err() {
        return; // no Python on this host
    }
    let script = r#"
import os, pathlib
c = "/sys/class/neuron_device"
names = sorted(os.listdir(c))
assert names[:2] == ["neuron0", "neuron1"] and len(names) == 21, names
assert os.path.islink(c + "/neuron2") and os.path.isdir(c + "/neuron2")
with open(c + "/neuron2/info/architecture/device_name") as f:
    assert f.read() == "Trainium2\n"
core = pathlib.Path(c, "neuron2", "neuron_core3", "stats", "other_info")
assert sorted(p.name for p in core.iterdir())[:2] == ["flop_count", "inference_count"]
assert (core / "flop_count" / "total").read_text() == "0\n"
print("ok")
"#;
    let s = under_shim(Command::new("python3").arg("-c").arg(script));
    assert_eq!(s, "ok\n");
}

/// Re-run this test binary under the shim to read the tree with Rust's `std::fs`.
#[test]
fn rust_std_fs_reads_the_tree() {
    if std::env::var_os("NEURON_EMU_SYSFS_CHILD").is_some() {
        let v = std::fs::read_to_string("/sys/module/neuron/version").expect("version");
        assert_eq!(v, "2.26.5.0\n");
        let m = std::fs::metadata("/sys/class/neuron_device/neuron1").expect("metadata");
        assert!(m.is_dir());
        let n = std::fs::read_dir("/sys/devices/virtual/neuron_device")
            .expect("read_dir")
            .count();
        assert_eq!(n, 16);
        let s = std::fs::read_to_string(
            "/sys/class/neuron_device/neuron1/neuron_core0/stats/memory_usage/device_mem/present",
        )
        .expect("present");
        assert_eq!(s, "0\n");
        println!("child ok");
        return;
    }
    let exe = std::env::current_exe().expect("test exe");
    let s = under_shim(
        Command::new(exe)
            .args(["--exact", "rust_std_fs_reads_the_tree", "--nocapture"])
            .env("NEURON_EMU_SYSFS_CHILD", "1"),
    );
    assert!(s.contains("child ok"), "{s}");
}
