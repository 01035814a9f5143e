//! `neuron-emu sysfs`: an attribute, a directory listing, the materialised tree, bad presets.

use std::process::Command;

fn sysfs(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .arg("sysfs")
        .args(args)
        .env_remove("NEURON_EMU_INSTANCE")
        .env_remove("NEURON_EMU_ARCH")
        .env_remove("NEURON_EMU_DEVICES")
        .output()
        .expect("spawn");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_an_attribute_and_a_directory() {
    let (c, out, _) = sysfs(&[
        "--instance",
        "inf2.48xlarge",
        "/sys/class/neuron_device/neuron0/connected_devices",
    ]);
    assert_eq!((c, out.as_str()), (Some(0), "11, 1\n"));
    let (c, out, _) = sysfs(&["--instance", "trn1.2xlarge", "/sys/class/neuron_device"]);
    assert_eq!(c, Some(0));
    assert!(
        out.contains(
            "/sys/class/neuron_device/neuron0 -> ../../devices/virtual/neuron_device/neuron0\n"
        ),
        "{out}"
    );
    // Default: the environment's generic device, the whole tree.
    let (c, out, _) = sysfs(&[]);
    assert_eq!(c, Some(0));
    assert!(
        out.contains("/sys/devices/virtual/neuron_device/neuron0/core_count: 8\n"),
        "{out}"
    );
    assert!(out.contains("/sys/module/neuron/version: 2.26.5.0\n"));
}

#[test]
fn writes_the_tree_and_refuses_unknown_presets_and_paths() {
    let dir = std::env::temp_dir().join(format!("neuron-emu-cli-sysfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let (c, _, err) = sysfs(&["--instance", "trn2.48xlarge", "--write", &d]);
    assert_eq!(c, Some(0), "{err}");
    let p = dir.join("sys/devices/virtual/dmi/id/product_name");
    assert_eq!(std::fs::read_to_string(p).expect("dmi"), "trn2.48xlarge\n");
    let _ = std::fs::remove_dir_all(&dir);
    let (c, _, err) = sysfs(&["--instance", "p5.48xlarge"]);
    assert_eq!(c, Some(2));
    assert!(err.contains("trn2.48xlarge"), "{err}");
    let (c, _, err) = sysfs(&["/sys/class/neuron_device/neuron9"]);
    assert_eq!(c, Some(1));
    assert!(err.contains("neuron9"), "{err}");
}
