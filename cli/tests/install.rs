//! `neuron-emu install`: lays the files out under a prefix, records them, refuses to overwrite
//! a file it did not write unless `--force`, and is idempotent.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-install-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// A fake build directory with every artifact install copies.
fn build_dir() -> PathBuf {
    let d = tmp("from");
    for f in [
        "neuron-ls",
        "neuron-top",
        "neuron-monitor",
        "libnrt.so",
        "libneuron_emu.so",
        "libneuron_emu_preload.so",
    ] {
        std::fs::write(d.join(f), format!("fake {f}")).expect("write");
    }
    d
}

fn install(prefix: &Path, from: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .arg("install")
        .arg("--prefix")
        .arg(prefix)
        .arg("--from")
        .arg(from)
        .args(extra)
        .output()
        .expect("spawn")
}

#[test]
fn install_lays_out_the_prefix_and_keeps_foreign_files() {
    let from = build_dir();
    let prefix = tmp("prefix");
    let o = install(&prefix, &from, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for f in [
        "bin/neuron-ls",
        "bin/neuron-top",
        "bin/neuron-monitor",
        "lib/libnrt.so.2.0.0",
        "lib/libneuron_emu.so",
        "lib/libneuron_emu_preload.so",
        "include/nrt/nrt.h",
        "include/nrt/nrt_status.h",
        "include/nrt/nrt_version.h",
        "include/nrt/nrt_experimental.h",
        "include/nrt/nrt_profile.h",
        "include/nrt/nrt_sys_trace.h",
        "include/nrt/nrt_async.h",
    ] {
        assert!(prefix.join(f).is_file(), "{f} missing:\n{out}");
        assert!(out.contains(f), "not reported: {f}\n{out}");
    }
    assert_eq!(
        std::fs::read_link(prefix.join("lib/libnrt.so")).expect("symlink"),
        PathBuf::from("libnrt.so.1")
    );
    assert_eq!(
        std::fs::read_link(prefix.join("lib/libnrt.so.1")).expect("symlink"),
        PathBuf::from("libnrt.so.2.0.0")
    );
    assert_eq!(
        std::fs::read_to_string(prefix.join("lib/libnrt.so.1")).expect("read"),
        "fake libnrt.so"
    );
    // Again: everything is ours, nothing changes.
    let o = install(&prefix, &from, &[]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("unchanged"));
    // A file someone else changed is not overwritten without --force.
    std::fs::write(prefix.join("bin/neuron-ls"), "someone else's").expect("write");
    let o = install(&prefix, &from, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(
        std::fs::read_to_string(prefix.join("bin/neuron-ls")).expect("read"),
        "someone else's"
    );
    let o = install(&prefix, &from, &["--force"]);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read_to_string(prefix.join("bin/neuron-ls")).expect("read"),
        "fake neuron-ls"
    );
    // A missing artifact is named.
    std::fs::remove_file(from.join("neuron-top")).expect("rm");
    let o = install(&tmp("other"), &from, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("neuron-top"));
}
