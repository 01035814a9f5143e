//! Arming one concrete injection on a fresh emulated device. Device effects are a
//! `neuron_faults::inject::Injector` installed as the device's hooks; driver faults
//! (`ioctl-fail`, the driver's `fail_*` points) act at the device-file seam: the Nth matching
//! call returns the errno without reaching the driver, as the real driver's fault points do.

use neuron_abi::{DeviceFile, Errno};
use neuron_emulator::Emulator;
use neuron_faults::errno::MMAP;
use neuron_faults::inject::Injector;
use neuron_faults::plan::{Effect, Plan};
use neuron_faults::rng::Rng;
use neuron_faults::{Injection, When};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What an armed injection reports back: whether its trigger was reached.
#[derive(Debug, Default, Clone)]
pub struct Armed {
    fired: Option<Arc<AtomicBool>>,
}

impl Armed {
    pub fn fired(&self) -> bool {
        self.fired
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Acquire))
    }
}

/// Refuse plans with effects this build cannot inject, naming the fault (every effect of the
/// plan format is injected today).
pub fn check_supported(_plan: &Plan) -> Result<(), String> {
    Ok(())
}

/// Arm `inj` on `emu`, whose device file is `dev`; returns the file the runtime must use.
pub fn arm(
    emu: &Emulator,
    dev: Arc<dyn DeviceFile>,
    inj: &Injection,
) -> Result<(Arc<dyn DeviceFile>, Armed), String> {
    match inj.effect {
        Effect::IoctlFail { errno } => {
            let fired = Arc::new(AtomicBool::new(false));
            let trigger = match inj.when {
                When::Ioctl { nth } => Trigger::Nth(nth),
                When::Probability { p, seed } => Trigger::Random(p, Mutex::new(Rng::new(seed))),
                ref w => return Err(format!("ioctl-fail cannot be triggered by {w:?}")),
            };
            let f = FailingFile {
                inner: dev,
                commands: inj.commands.clone(),
                errno: Errno(errno),
                trigger,
                seen: AtomicU64::new(0),
                fired: fired.clone(),
            };
            Ok((Arc::new(f), Armed { fired: Some(fired) }))
        }
        _ => {
            let hook = Injector::new(inj.clone());
            let fired = hook.fired();
            if !emu.set_hooks(inj.device as usize, Some(Box::new(hook))) {
                return Err(format!("no device {}", inj.device));
            }
            Ok((dev, Armed { fired: Some(fired) }))
        }
    }
}

#[derive(Debug)]
enum Trigger {
    Nth(u64),
    Random(f64, Mutex<Rng>),
}

/// A device file whose matching calls fail as a driver fault point makes them.
struct FailingFile {
    inner: Arc<dyn DeviceFile>,
    commands: Vec<u32>,
    errno: Errno,
    trigger: Trigger,
    seen: AtomicU64,
    fired: Arc<AtomicBool>,
}

impl std::fmt::Debug for FailingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailingFile")
            .field("commands", &self.commands)
            .field("errno", &self.errno)
            .field("trigger", &self.trigger)
            .finish()
    }
}

impl FailingFile {
    /// Whether this call (of command `cmd`) fails.
    fn hit(&self, cmd: u32) -> bool {
        if !self.commands.contains(&cmd) {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::AcqRel) + 1;
        let hit = match &self.trigger {
            Trigger::Nth(k) => n == *k,
            Trigger::Random(p, r) => r.lock().unwrap_or_else(|e| e.into_inner()).unit() < *p,
        };
        if hit {
            self.fired.store(true, Ordering::Release);
            tracing::debug!(target: "FAULT", "call {n} of {cmd:#010x} fails with {}", self.errno);
        }
        hit
    }
}

impl DeviceFile for FailingFile {
    #[allow(unsafe_code)]
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        if self.hit(cmd) {
            return Err(self.errno);
        }
        // SAFETY: forwarded unchanged; the caller upholds the seam's contract.
        unsafe { self.inner.ioctl(cmd, arg) }
    }
    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno> {
        if self.hit(MMAP) {
            return Err(self.errno);
        }
        self.inner.mmap(len, offset, prot)
    }
    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        self.inner.munmap(addr, len)
    }
}
