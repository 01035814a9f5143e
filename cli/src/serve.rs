//! `neuron-emu serve` (a daemon sharing one emulated machine between processes over a Unix
//! socket, `docs/daemon.md`) and `neuron-emu dmesg` (the daemon's kernel log).

use crate::Failure;
use neuron_abi::arch::Arch;
use neuron_emu_remote::socket::{resolve, well_known_path, Resolved, SOCKET_ENV};
use neuron_emulator::instance::Instance;
use neuron_emulator::serve::Server;
use neuron_emulator::Emulator;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// An EC2 instance preset: its devices, their links and its identity (e.g. trn2.48xlarge,
    /// trn1.32xlarge, inf2.xlarge; `neuron-emu sysfs --help` lists them). Excludes
    /// --arch/--devices.
    #[arg(long, value_name = "TYPE", conflicts_with_all = ["arch", "devices"])]
    instance: Option<String>,
    /// Architecture of the emulated devices: trn2, trn1 or inf2 (default trn2).
    #[arg(long)]
    arch: Option<String>,
    /// Number of devices (/dev/neuron0..N-1, default 1).
    #[arg(long)]
    devices: Option<usize>,
    /// Where to keep the driver's sysfs tree as real files, for programs that cannot be
    /// preloaded (refreshed every second). Default: `<socket>.sysfs`; `none` to
    /// skip. Programs under the preload shim read it at the real /sys paths either way.
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<PathBuf>,
    /// Socket path. Default: $XDG_RUNTIME_DIR/neuron-emu.sock, else
    /// /tmp/neuron-emu-<uid>/neuron-emu.sock.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Stay in the foreground (the only mode: run it under a supervisor or with `&`).
    #[arg(long)]
    foreground: bool,
}

#[derive(clap::Args, Debug)]
pub struct DmesgArgs {
    /// The daemon's socket. Default: NEURON_EMU_SOCKET, else the well-known path.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

/// Set by SIGINT / SIGTERM.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Release);
}

#[allow(unsafe_code)]
fn catch_signals() {
    // SAFETY: installing an async-signal-safe handler (one atomic store) for two signals.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// The machine `serve` emulates: a preset, or an arch and a device count.
fn machine(a: &ServeArgs) -> Result<Instance, Failure> {
    if let Some(name) = &a.instance {
        return Instance::by_name(name).ok_or_else(|| {
            let all: Vec<_> = Instance::names().collect();
            crate::usage(format!(
                "--instance {name:?}: not a preset (one of {})",
                all.join(", ")
            ))
        });
    }
    let name = a.arch.as_deref().unwrap_or("trn2");
    let arch = Arch::from_name(name)
        .ok_or_else(|| crate::usage(format!("--arch {name:?}: expected trn2, trn1 or inf2")))?;
    let devices = a.devices.unwrap_or(1);
    let max = neuron_emulator::envconfig::MAX_DEVICES;
    if !(1..=max).contains(&devices) {
        return Err(crate::usage(format!(
            "--devices {devices}: expected 1..={max}"
        )));
    }
    Ok(Instance::generic(arch, devices))
}

/// Keep the sysfs tree under `root` current until the daemon stops.
fn keep_sysfs(emu: std::sync::Arc<Emulator>, root: PathBuf) {
    std::thread::spawn(move || {
        let mut warned = false;
        while !SIGNALLED.load(Ordering::Acquire) {
            if let Err(e) = emu.sysfs().write_to(&root) {
                if !warned {
                    eprintln!(
                        "neuron-emu: cannot write the sysfs tree to {}: {e}",
                        root.display()
                    );
                    warned = true;
                }
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    });
}

pub fn serve(a: ServeArgs) -> Result<(), Failure> {
    let inst = machine(&a)?;
    let path = a
        .socket
        .clone()
        .unwrap_or_else(|| well_known_path(&|k: &str| std::env::var(k).ok()));
    let emu = Emulator::with_instance(&inst);
    let server =
        Server::bind(emu, &path, inst.name.unwrap_or("")).map_err(|e| Failure(1, e.to_string()))?;
    catch_signals();
    let stop = server.stopper();
    std::thread::spawn(move || loop {
        if SIGNALLED.load(Ordering::Acquire) {
            stop.stop();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    });
    let sysfs_root = match &a.sysfs_root {
        Some(p) if p.as_os_str() == "none" => None,
        Some(p) => Some(p.clone()),
        None => Some(PathBuf::from(format!("{}.sysfs", path.display()))),
    };
    println!(
        "neuron-emu: serving {} x{}{} on {}",
        inst.arch.name(),
        inst.devices,
        inst.name.map(|n| format!(" ({n})")).unwrap_or_default(),
        path.display()
    );
    println!("export {SOCKET_ENV}={}", path.display());
    if let Some(root) = sysfs_root {
        println!("neuron-emu: sysfs tree under {}", root.display());
        keep_sysfs(server.emulator().clone(), root);
    }
    server
        .run()
        .map_err(|e| Failure(1, format!("{}: {e}", path.display())))?;
    // Dropping the server removes the socket file.
    drop(server);
    Ok(())
}

pub fn dmesg(a: DmesgArgs) -> Result<(), Failure> {
    let path = match a.socket {
        Some(p) => p,
        None => match resolve() {
            Resolved::InProcess => {
                return Err(Failure(1, format!("no daemon: {SOCKET_ENV} is off")));
            }
            Resolved::Explicit(p) | Resolved::WellKnown(p) => p,
        },
    };
    let text = neuron_emu_remote::dmesg(&path).map_err(|e| Failure(1, e.to_string()))?;
    print!("{text}");
    Ok(())
}
