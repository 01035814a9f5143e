//! Where a process's emulated devices are: an [`Emulator`] in the process, or a daemon's
//! machine (`neuron-emu serve`) when the socket resolution says one is there. What the
//! preload shim and `libneuron_emu.so` open their files on.

use crate::envconfig::EmuConfig;
use crate::{Emulator, OpenOptions};
use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_emu_remote::RemoteMachine;

/// The devices of this process.
#[derive(Debug)]
pub enum Machine {
    Local(Emulator),
    Remote(RemoteMachine),
}

impl Machine {
    /// The daemon's machine if one is configured (`NEURON_EMU_SOCKET`, or a daemon on the
    /// well-known socket), else a new in-process emulator from `EmuConfig::from_env`.
    pub fn from_env() -> Result<Machine, String> {
        match neuron_emu_remote::socket::daemon() {
            Some(p) => RemoteMachine::connect(&p)
                .map(Machine::Remote)
                .map_err(|e| e.to_string()),
            None => EmuConfig::from_env().map(|c| Machine::Local(c.build())),
        }
    }

    pub fn device_count(&self) -> usize {
        match self {
            Machine::Local(e) => e.device_count(),
            Machine::Remote(m) => m.device_count(),
        }
    }

    pub fn arch(&self) -> Option<Arch> {
        match self {
            Machine::Local(e) => e.arch(),
            Machine::Remote(m) => Some(m.arch()),
        }
    }

    /// A one-line description ("an emulated trn2 device x1", plus the daemon's socket).
    pub fn describe(&self) -> String {
        let arch = self.arch().map_or("?", |a| a.name());
        let n = self.device_count();
        match self {
            Machine::Local(_) => format!("an emulated {arch} device x{n}"),
            Machine::Remote(m) => {
                format!(
                    "an emulated {arch} device x{n} (daemon {})",
                    m.path().display()
                )
            }
        }
    }

    /// `open("/dev/neuron<index>")` as `pid` (a daemon takes the identity from the
    /// connection itself, never from the caller).
    pub fn open(
        &self,
        index: usize,
        write_only: bool,
        pid: u32,
    ) -> Result<Box<dyn DeviceFile>, Errno> {
        Ok(match self {
            Machine::Local(e) => Box::new(e.open(index, OpenOptions { pid, write_only })?),
            Machine::Remote(m) => Box::new(m.open(index, write_only)?),
        })
    }

    /// This machine's sysfs tree (`crate::sysfs`): rendered here, or fetched from the daemon
    /// (`None` if the daemon cannot be reached). With `path`, only what reading it needs.
    pub fn sysfs(&self, path: Option<&str>) -> Option<crate::sysfs::Tree> {
        use crate::sysfs::Tree;
        match (self, path) {
            (Machine::Local(e), Some(p)) => Some(Tree::render_for(e, p)),
            (Machine::Local(e), None) => Some(Tree::render(e)),
            (Machine::Remote(m), p) => Tree::decode(&m.sysfs(p.unwrap_or("")).ok()?),
        }
    }
}
