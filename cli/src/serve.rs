//! `neuron-emu serve` (a daemon sharing one emulated machine between processes over a Unix
//! socket, `docs/daemon.md`) and `neuron-emu dmesg` (the daemon's kernel log).

use crate::Failure;
use neuron_abi::arch::Arch;
use neuron_emu_remote::socket::{resolve, well_known_path, Resolved, SOCKET_ENV};
use neuron_emulator::serve::Server;
use neuron_emulator::Emulator;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Architecture of the emulated devices: trn2, trn1 or inf2.
    #[arg(long, default_value = "trn2")]
    arch: String,
    /// Number of devices (/dev/neuron0..N-1).
    #[arg(long, default_value_t = 1)]
    devices: usize,
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

pub fn serve(a: ServeArgs) -> Result<(), Failure> {
    let arch = Arch::from_name(&a.arch)
        .ok_or_else(|| crate::usage(format!("--arch {:?}: expected trn2, trn1 or inf2", a.arch)))?;
    let max = neuron_emulator::envconfig::MAX_DEVICES;
    if !(1..=max).contains(&a.devices) {
        return Err(crate::usage(format!(
            "--devices {}: expected 1..={max}",
            a.devices
        )));
    }
    // Instance presets (`--instance trn2.48xlarge`) belong here: a preset chooses `arch` and
    // `devices` and its name goes in the hello (`instance` below).
    let instance = "";
    let path = a
        .socket
        .unwrap_or_else(|| well_known_path(&|k: &str| std::env::var(k).ok()));
    let emu = Emulator::new(arch, a.devices);
    let server = Server::bind(emu, &path, instance).map_err(|e| Failure(1, e.to_string()))?;
    catch_signals();
    let stop = server.stopper();
    std::thread::spawn(move || loop {
        if SIGNALLED.load(Ordering::Acquire) {
            stop.stop();
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    });
    println!(
        "neuron-emu: serving {} x{} on {}",
        arch.name(),
        a.devices,
        path.display()
    );
    println!("export {SOCKET_ENV}={}", path.display());
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
