//! Shared by the tool tests: an in-process emulator where two device files opened as two
//! pids play two processes (an application running a model, and the tool).
#![allow(dead_code)]

use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_emulator::{Emulator, OpenOptions};
use neuron_runtime::{Config, Model, Runtime};
use neuron_tools::snapshot::{Devices, Roots};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The application's pid as the driver knows it.
pub const APP_PID: u32 = 424_242;
/// The tool's pid as the driver knows it.
pub const TOOL_PID: u32 = 424_243;

pub fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

pub fn mlp() -> Vec<u8> {
    std::fs::read(repo("fixtures/neff/mlp.neff")).expect("fixtures/neff/mlp.neff")
}

/// The application: a runtime on device 0 opened as [`APP_PID`].
pub fn app(emu: &Emulator, timeout: Duration, tag: Option<&str>) -> Runtime {
    let f = emu
        .open(
            0,
            OpenOptions {
                pid: APP_PID,
                write_only: false,
            },
        )
        .expect("open as the app");
    let dev: Arc<dyn DeviceFile> = Arc::new(f);
    Runtime::new(
        dev,
        0,
        Config {
            exec_timeout: timeout,
            process_tag: tag.map(str::to_string),
            ..Default::default()
        },
    )
    .expect("runtime")
}

/// Zero inputs of the right sizes.
pub fn run(m: &mut Model) -> Result<neuron_runtime::ExecOutput, neuron_runtime::NrtError> {
    let data: Vec<(String, Vec<u8>)> = m
        .inputs()
        .map(|t| (t.name.clone(), vec![0u8; t.size as usize]))
        .collect();
    let refs: Vec<(&str, &[u8])> = data
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    m.execute(&refs)
}

/// The tool's view of the emulator: its fds are opened as [`TOOL_PID`].
pub struct EmuDevices<'a>(pub &'a Emulator);

impl Devices for EmuDevices<'_> {
    fn count(&self) -> u32 {
        self.0.device_count() as u32
    }
    fn open(&self, index: u32) -> Result<Arc<dyn DeviceFile>, Errno> {
        let f = self.0.open(
            index as usize,
            OpenOptions {
                pid: TOOL_PID,
                write_only: false,
            },
        )?;
        Ok(Arc::new(f))
    }
    fn own_pid(&self) -> u32 {
        TOOL_PID
    }
}

/// A fake root: DMI files and `/proc` stand-ins in a fresh temp directory.
pub fn roots(name: &str) -> Roots {
    let d = std::env::temp_dir().join(format!("neuron-tools-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let dmi = d.join("sys/sys/devices/virtual/dmi/id");
    std::fs::create_dir_all(&dmi).expect("mkdir");
    std::fs::write(dmi.join("product_name"), "trn2.48xlarge\n").expect("write");
    std::fs::write(dmi.join("board_asset_tag"), "i-0123456789abcdef0\n").expect("write");
    let hw = d.join("sys/sys/devices/virtual/neuron_device/neuron0/stats/hardware");
    std::fs::create_dir_all(&hw).expect("mkdir");
    std::fs::write(hw.join("sram_ecc_uncorrected"), "0\n").expect("write");
    std::fs::write(hw.join("mem_ecc_uncorrected"), "0\n").expect("write");
    let proc = d.join("proc");
    std::fs::create_dir_all(&proc).expect("mkdir");
    std::fs::write(
        proc.join("stat"),
        "cpu  10 0 5 100 0 0 0 0\ncpu0 10 0 5 100 0 0 0 0\nctxt 50\n",
    )
    .expect("write");
    std::fs::write(
        proc.join("meminfo"),
        "MemTotal: 2048 kB\nMemAvailable: 1024 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
    )
    .expect("write");
    Roots {
        sysfs: d.join("sys"),
        proc,
    }
}

/// The emulator the tests share the shape of: one trn2 device.
pub fn emulator() -> Emulator {
    Emulator::new(Arch::V3Trn2, 1)
}

/// The monitor's default groups, every one due each 10 ms (tests take records back to back).
pub fn fast_config() -> neuron_tools::monitor::Config {
    let mut cfg = neuron_tools::monitor::Config::default();
    for r in &mut cfg.runtimes {
        for g in &mut r.groups {
            g.period = Duration::from_millis(10);
        }
    }
    for g in &mut cfg.system {
        g.period = Duration::from_millis(10);
    }
    cfg
}
