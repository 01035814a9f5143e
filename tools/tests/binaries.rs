//! The three binaries as users run them: with no device, and under the preload shim
//! (`libneuron_emu_preload.so`, which serves `/dev/neuron0` to the process through real
//! `open`/`ioctl`/`mmap`). neuron-top runs in tmux when tmux is installed.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The shim next to the test binary's target dir (built by `cargo test --workspace`).
fn shim() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    let prof = deps.parent()?;
    [
        prof.join("libneuron_emu_preload.so"),
        deps.join("libneuron_emu_preload.so"),
        prof.join("../release/libneuron_emu_preload.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

fn sysfs_root(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-tools-bin-{name}-{}", std::process::id()));
    let dmi = d.join("sys/devices/virtual/dmi/id");
    std::fs::create_dir_all(&dmi).expect("mkdir");
    std::fs::write(dmi.join("product_name"), "trn2.48xlarge\n").expect("write");
    std::fs::write(dmi.join("board_asset_tag"), "i-0fedcba9876543210\n").expect("write");
    d
}

#[test]
fn neuron_ls_without_a_device_fails_like_the_real_one() {
    if std::path::Path::new("/dev/neuron0").exists() {
        return; // a real (or emulated) device is present on this machine
    }
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-ls"))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("level=error"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-ls"))
        .arg("--nope")
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("--nope"));
}

#[test]
fn neuron_ls_and_monitor_under_the_shim() {
    let Some(shim) = shim() else {
        eprintln!("libneuron_emu_preload.so not built: skipped (cargo test --workspace builds it)");
        return;
    };
    let root = sysfs_root("shim");
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-ls"))
        .arg("--json-output")
        .env("LD_PRELOAD", &shim)
        .env("NEURON_SYSFS_ROOT", &root)
        .output()
        .expect("spawn");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.ends_with(']'));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["neuron_device"], 0);
    assert_eq!(v[0]["nc_count"], 4);
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-ls"))
        .env("LD_PRELOAD", &shim)
        .env("NEURON_SYSFS_ROOT", &root)
        .output()
        .expect("spawn");
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.starts_with("instance-type: trn2.48xlarge\ninstance-id: i-0fedcba9876543210\nlogical-neuroncore-config: 2\n"), "{t}");

    // neuron-monitor: the first record comes at once (t≈0), then the tool is killed, as
    // all-smi does.
    let mut child = Command::new(env!("CARGO_BIN_EXE_neuron-monitor"))
        .env("LD_PRELOAD", &shim)
        .env("NEURON_SYSFS_ROOT", &root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut line).expect("read");
    let took = t0.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(took < Duration::from_secs(4), "first record after {took:?}");
    let r: Value = serde_json::from_str(line.trim()).expect("one JSON document per line");
    assert_eq!(r["neuron_hardware_info"]["neuron_device_type"], "trainium2");
    assert_eq!(r["instance_info"]["instance_id"], "i-0fedcba9876543210");
    assert!(r["system_data"]["vcpu_usage"]["period"].is_number());
    assert_eq!(r["neuron_runtime_data"], serde_json::json!([]));
}

#[test]
fn neuron_top_in_tmux_shows_its_sections_and_quits_on_q() {
    let (Some(shim), true) = (
        shim(),
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
    ) else {
        eprintln!("tmux or the shim missing: skipped");
        return;
    };
    let session = format!("neuron-top-test-{}", std::process::id());
    let sock = format!("neuron-tools-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &sock])
            .args(args)
            .output()
            .expect("tmux")
    };
    let cmd = format!(
        "env LD_PRELOAD={} {}; sleep 5",
        shim.display(),
        env!("CARGO_BIN_EXE_neuron-top")
    );
    let o = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "160",
        "-y",
        "48",
        &cmd,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut pane = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        pane = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout)
            .into_owned();
        if pane.contains("Memory Usage Details") {
            break;
        }
    }
    let _ = tmux(&["send-keys", "-t", &session, "q"]);
    std::thread::sleep(Duration::from_millis(800));
    let after =
        String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout).into_owned();
    let _ = tmux(&["kill-server"]);
    for s in [
        "neuron-top",
        "NeuronCore v3d Utilization",
        "vCPU Usage",
        "Memory Usage Summary",
        "Memory Usage Details",
        "Neuron Processes",
    ] {
        assert!(pane.contains(s), "missing {s:?} in:\n{pane}");
    }
    assert!(!after.contains("Memory Usage Details"), "q quits:\n{after}");
}
