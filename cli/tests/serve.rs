//! `neuron-emu serve` and `neuron-emu dmesg`: the socket path and env line printed, a live
//! daemon refused, a stale socket file replaced, SIGTERM removing the socket, `dmesg` without
//! a daemon failing with exit code 1.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
}

fn sock(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-cli-serve-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("tmp");
    d.join(name)
}

fn dmesg(path: &Path) -> std::process::Output {
    bin()
        .args(["dmesg", "--socket"])
        .arg(path)
        .output()
        .expect("dmesg")
}

#[test]
fn serve_prints_its_socket_refuses_a_second_daemon_and_cleans_up_on_sigterm() {
    let path = sock("a.sock");
    // A stale socket file (nobody listening) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale socket"));
    assert!(path.exists());
    let mut d = bin()
        .args(["serve", "--devices", "2", "--socket"])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut out = BufReader::new(d.stdout.take().expect("stdout"));
    let mut l1 = String::new();
    let mut l2 = String::new();
    out.read_line(&mut l1).expect("line");
    out.read_line(&mut l2).expect("line");
    assert!(l1.contains("serving trn2 x2"), "{l1}");
    assert_eq!(
        l2.trim(),
        format!("export NEURON_EMU_SOCKET={}", path.display())
    );
    let mut l3 = String::new();
    out.read_line(&mut l3).expect("line");
    let root = PathBuf::from(format!("{}.sysfs", path.display()));
    assert_eq!(
        l3.trim(),
        format!("neuron-emu: sysfs tree under {}", root.display())
    );
    // The tree as real files, for programs that cannot be preloaded.
    let version = root.join("sys/module/neuron/version");
    let t0 = std::time::Instant::now();
    while !version.exists() && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let v = std::fs::read_to_string(&version);
    let cores =
        std::fs::read_to_string(root.join("sys/devices/virtual/neuron_device/neuron1/core_count"));
    if v.is_err() || cores.is_err() {
        let _ = d.kill();
    }
    assert_eq!(v.expect("module version").trim(), "2.26.5.0");
    assert_eq!(cores.expect("core_count"), "8");
    let o = dmesg(&path);
    assert!(o.status.success(), "{o:?}");
    let second = bin()
        .args(["serve", "--socket"])
        .arg(&path)
        .output()
        .expect("second serve");
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already answers"));
    let k = Command::new("kill")
        .args(["-TERM", &d.id().to_string()])
        .status()
        .expect("kill");
    assert!(k.success());
    let st = d.wait().expect("wait");
    assert!(st.success(), "{st:?}");
    assert!(!path.exists(), "the socket file is removed");
    let o = dmesg(&path);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no daemon"),
        "{o:?}"
    );
}

#[test]
fn dmesg_with_the_daemon_switched_off_says_so() {
    let o = bin()
        .arg("dmesg")
        .env("NEURON_EMU_SOCKET", "off")
        .output()
        .expect("dmesg");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no daemon"));
}
