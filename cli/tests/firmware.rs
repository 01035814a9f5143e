//! `neuron-emu firmware inspect`: lists a generated carrier's images (table and JSON) and
//! exits 1 with the loader's message on a malformed one.

use neuron_firmware_loader::write;
use std::path::PathBuf;
use std::process::{Command, Output};

fn inspect(name: &str, bytes: &[u8], json: bool) -> Output {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, bytes).expect("write carrier");
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuron-emu"));
    c.args(["firmware", "inspect"]).arg(&path);
    if json {
        c.arg("--json");
    }
    let out = c.output().expect("spawn");
    let _ = std::fs::remove_file(&path);
    out
}

#[test]
fn inspect_lists_sequencer_images() {
    let file = write::sequencer_carrier(&[("cc_main", &[1u8; 48]), ("cc_aux", &[2u8; 8])])
        .expect("carrier");
    let out = inspect("fw-seq.so", &file, false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("collective-sequencer carrier, 2 image(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("cc_main") && stdout.contains("cc_aux"),
        "{stdout}"
    );
}

#[test]
fn inspect_json_reports_ucode_images() {
    let file =
        write::ucode_carrier(&[(1, 0x100, &[7u8; 32]), (2, 0x2000, &[9u8; 5])]).expect("carrier");
    let out = inspect("fw-ucode.so", &file, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(j["carrier"], "gpsimd-microcode");
    let imgs = j["images"].as_array().expect("images");
    assert_eq!(imgs.len(), 2);
    assert_eq!(imgs[0]["kind"], "gpsimd-iram");
    assert_eq!(imgs[0]["engine"], "gpsimd");
    assert_eq!(imgs[0]["load_address"], 0x100);
    assert_eq!(imgs[1]["kind"], "gpsimd-dram");
    assert_eq!(imgs[1]["size"], 5);
    assert_eq!(imgs[1]["sha256"].as_str().map(str::len), Some(64));
}

#[test]
fn malformed_carrier_exits_1_with_the_loaders_message() {
    let file = write::ucode_carrier(&[(1, 0, &[7u8; 32])]).expect("carrier");
    let out = inspect("fw-trunc.so", &file[..file.len() / 2], false);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fw-trunc.so"), "{stderr}");
    let out = inspect("fw-garbage.so", b"definitely not ELF", true);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a readable ELF carrier"));
}
