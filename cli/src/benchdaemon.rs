//! `neuron-emu bench daemon`: the cost of sharing a machine through `neuron-emu serve`, as
//! ratios measured in the same run: one ioctl round trip (DEVICE_BASIC_INFO) and one
//! execution of a compiler-produced attention kernel, through a daemon (a separate process,
//! this binary's `serve` on a temporary socket) against the in-process device.

use crate::{open_emulated, usage, Failure};
use neuron_abi::arch::Arch;
use neuron_abi::structs::DeviceBasicInfo;
use neuron_abi::DeviceFile;
use neuron_runtime::{Config, Runtime};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The kernel timed by default (from the shared fixtures beside the checkout).
pub fn default_neff() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real-neff/akc-fused_bf16_s512.neff")
}

/// A daemon in a child process; stopped and reaped on drop.
struct Daemon {
    child: Child,
    path: PathBuf,
}

impl Daemon {
    fn start() -> Result<Daemon, Failure> {
        let path = std::env::temp_dir().join(format!(
            "neuron-emu-bench-{}/neuron-emu.sock",
            std::process::id()
        ));
        let exe = std::env::current_exe().map_err(|e| Failure(1, e.to_string()))?;
        let child = Command::new(exe)
            .args(["serve", "--socket"])
            .arg(&path)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| Failure(1, format!("start the daemon: {e}")))?;
        let d = Daemon { child, path };
        let deadline = Instant::now() + Duration::from_secs(10);
        while neuron_emu_remote::RemoteMachine::connect(&d.path).is_err() {
            if Instant::now() > deadline {
                return Err(Failure(1, "the daemon did not start".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(d)
    }

    fn open(&self) -> Result<Arc<dyn DeviceFile>, Failure> {
        let m = neuron_emu_remote::RemoteMachine::connect(&self.path)
            .map_err(|e| Failure(1, e.to_string()))?;
        let f = m
            .open(0, false)
            .map_err(|e| Failure(1, format!("open /dev/neuron0 (daemon): {e}")))?;
        Ok(Arc::new(f))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = neuron_emu_remote::shutdown(&self.path);
        let _ = self.child.wait();
    }
}

/// Seconds per DEVICE_BASIC_INFO over `n` calls.
fn ioctl_seconds(dev: &dyn DeviceFile, n: u32) -> Result<f64, Failure> {
    let mut info = DeviceBasicInfo::default();
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: `info` is the command's argument struct, exclusively borrowed.
        #[allow(unsafe_code)]
        let r = unsafe {
            dev.ioctl(
                neuron_abi::ioctl::NEURON_IOCTL_DEVICE_BASIC_INFO,
                (&mut info as *mut DeviceBasicInfo).cast(),
            )
        };
        r.map_err(|e| Failure(1, format!("DEVICE_BASIC_INFO: {e}")))?;
    }
    Ok(t.elapsed().as_secs_f64() / f64::from(n))
}

/// A loaded model with its inputs, ready to execute.
struct Loaded {
    model: neuron_runtime::Model,
    data: Vec<(String, Vec<u8>)>,
}

impl Loaded {
    fn new(dev: Arc<dyn DeviceFile>, neff: &[u8]) -> Result<Loaded, Failure> {
        let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| Failure(1, e.to_string()))?;
        let model = rt
            .load(neff, 0)
            .map_err(|e| Failure(1, format!("load failed: {e}")))?;
        let infos: Vec<_> = model.inputs().cloned().collect();
        let data = crate::tensorio::builtin_inputs(infos.iter());
        let mut l = Loaded { model, data };
        l.execute()?;
        Ok(l)
    }

    /// One execution: (host seconds, device picoseconds).
    fn execute(&mut self) -> Result<(f64, u64), Failure> {
        let refs: Vec<(&str, &[u8])> = self
            .data
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        let t = Instant::now();
        let r = self
            .model
            .execute(&refs)
            .map_err(|e| Failure(1, e.to_string()))?;
        Ok((t.elapsed().as_secs_f64(), r.device_time_ps))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(file: Option<&Path>, ioctls: u32, repeat: u32) -> Result<(), Failure> {
    if ioctls == 0 || repeat == 0 {
        return Err(usage("--ioctls and --repeat must be positive"));
    }
    let path = file.map_or_else(default_neff, Path::to_path_buf);
    let neff =
        std::fs::read(&path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let daemon = Daemon::start()?;
    let (_emu, local) = open_emulated(Arch::V3Trn2)?;
    let remote = daemon.open()?;
    // Interleaved rounds, the best of three each, so both sides see the same machine load.
    let mut li = f64::MAX;
    let mut ri = f64::MAX;
    for _ in 0..3 {
        li = li.min(ioctl_seconds(&*local, ioctls)?);
        ri = ri.min(ioctl_seconds(&*remote, ioctls)?);
    }
    println!("bench daemon: `neuron-emu serve` in a child process vs the in-process device");
    println!(
        "ioctl DEVICE_BASIC_INFO  in-process {:>9.2} us   daemon {:>9.2} us   ratio {:.1}x",
        li * 1e6,
        ri * 1e6,
        ri / li
    );
    drop((local, remote));
    let (_emu, local) = open_emulated(Arch::V3Trn2)?;
    let mut l = Loaded::new(local, &neff)?;
    let mut r = Loaded::new(daemon.open()?, &neff)?;
    // Alternating executions: host load (other processes) hits both sides alike.
    let (mut lt, mut rt) = (Vec::new(), Vec::new());
    let (mut lps, mut rps) = (0, 0);
    for _ in 0..repeat {
        let (t, ps) = l.execute()?;
        lt.push(t);
        lps = ps;
        let (t, ps) = r.execute()?;
        rt.push(t);
        rps = ps;
    }
    let lmin = lt.iter().copied().fold(f64::MAX, f64::min);
    let rmin = rt.iter().copied().fold(f64::MAX, f64::min);
    let (lmed, rmed) = (median(&mut lt), median(&mut rt));
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
    println!("execute {stem} ({repeat} alternating executions each, after a warm-up)");
    println!(
        "  best    in-process {:>9.2} ms   daemon {:>9.2} ms   ratio {:.2}x",
        lmin * 1e3,
        rmin * 1e3,
        rmin / lmin
    );
    println!(
        "  median  in-process {:>9.2} ms   daemon {:>9.2} ms   ratio {:.2}x",
        lmed * 1e3,
        rmed * 1e3,
        rmed / lmed
    );
    println!(
        "device time  in-process {} ps   daemon {} ps{}",
        lps,
        rps,
        if lps == rps {
            "   (identical)"
        } else {
            "   (DIFFERENT)"
        }
    );
    if lps != rps {
        return Err(Failure(
            1,
            "the device time differs through the daemon".into(),
        ));
    }
    Ok(())
}
