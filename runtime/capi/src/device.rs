//! Device selection for the C library: real `/dev/neuron*` nodes when present, else an
//! embedded emulated device (`NEURON_EMU=0` forbids it, `NEURON_EMU=1` forces it).

use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_emulator::{Emulator, OpenOptions};
use neuron_runtime::api::{DeviceProvider, SysProvider};
use neuron_runtime::{NrtError, NrtStatus};
use std::sync::{Arc, Once};

/// Devices of an in-process emulator, opened as process `pid`.
#[derive(Debug, Clone)]
pub struct EmuProvider {
    pub emu: Arc<Emulator>,
    pub pid: u32,
}

impl EmuProvider {
    /// A new emulator from `NEURON_EMU_ARCH` (default trn2) and `NEURON_EMU_DEVICES` (default 1).
    pub fn from_env() -> Result<EmuProvider, NrtError> {
        let arch = match std::env::var("NEURON_EMU_ARCH") {
            Ok(s) => Arch::from_name(&s).ok_or_else(|| {
                NrtError::new(
                    NrtStatus::Failure,
                    format!("NEURON_EMU_ARCH={s:?}: expected trn1, inf2 or trn2"),
                )
            })?,
            Err(_) => Arch::V3Trn2,
        };
        let n = match std::env::var("NEURON_EMU_DEVICES") {
            Ok(s) => s
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=64).contains(n))
                .ok_or_else(|| {
                    NrtError::new(
                        NrtStatus::Failure,
                        format!("NEURON_EMU_DEVICES={s:?}: expected 1..64"),
                    )
                })?,
            Err(_) => 1,
        };
        Ok(EmuProvider {
            emu: Arc::new(Emulator::new(arch, n)),
            pid: std::process::id(),
        })
    }
}

impl DeviceProvider for EmuProvider {
    fn device_count(&self) -> u32 {
        self.emu.device_count() as u32
    }
    fn open(&self, index: u32, write_only: bool) -> Result<Arc<dyn DeviceFile>, Errno> {
        Ok(Arc::new(self.emu.open(
            index as usize,
            OpenOptions {
                pid: self.pid,
                write_only,
            },
        )?))
    }
    fn describe(&self) -> String {
        format!(
            "an embedded emulated {} device",
            self.emu.arch().map(|a| a.name()).unwrap_or("?")
        )
    }
}

static ANNOUNCE: Once = Once::new();

/// Pick the device provider as the library does at `nrt_init`.
pub fn select() -> Result<Box<dyn DeviceProvider>, NrtError> {
    let real = SysProvider.device_count() > 0;
    match std::env::var("NEURON_EMU").ok().as_deref().map(str::trim) {
        Some("1") => emulated(),
        Some("0") if real => Ok(Box::new(SysProvider)),
        Some("0") => Err(NrtError::new(NrtStatus::Failure, "no Neuron device found (no /dev/neuron*) and NEURON_EMU=0 forbids the embedded emulated device")),
        Some(other) if !other.is_empty() => Err(NrtError::new(NrtStatus::Failure, format!("NEURON_EMU={other:?}: expected 0 or 1"))),
        _ if real => Ok(Box::new(SysProvider)),
        _ => emulated(),
    }
}

fn emulated() -> Result<Box<dyn DeviceProvider>, NrtError> {
    let p = EmuProvider::from_env()?;
    ANNOUNCE.call_once(|| tracing::info!(target: "NRT", "nrt_init no /dev/neuron* in use: running on {}", p.describe()));
    Ok(Box::new(p))
}
