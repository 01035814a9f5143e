//! One emulated machine, many real processes (issue 14, acceptance 1): a daemon
//! (`neuron_emulator::serve::Server` on a thread of this test, on a temporary socket) owns a
//! trn2 device; a libnrt application (`tests/c/hold_model.c`, `NEURON_EMU=1`) loads and runs
//! the MLP on it and holds it; `neuron-ls --json-output` and `neuron-monitor`, separate
//! processes under the preload shim, see that application's process, memory and executions
//! and read the sysfs tree at its real paths; a second application asking for the same core
//! is refused as the runtime refuses it (`NRT_RESOURCE`, "NeuronCore(s) not available");
//! `kill -9` of the first frees everything, and the second then gets the core.

use neuron_e2e_tests::cprog::{built, nrt_program};
use neuron_emulator::instance::Instance;
use neuron_emulator::serve::Server;
use neuron_emulator::Emulator;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    neuron_e2e_tests::repo_path("")
}

struct Daemon {
    path: PathBuf,
    emu: Arc<Emulator>,
    stop: neuron_emulator::serve::Stopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn daemon(dir: &Path) -> Daemon {
    let inst = Instance::by_name("trn2.3xlarge").expect("preset");
    let path = dir.join("machine.sock");
    let server = Server::bind(Emulator::with_instance(&inst), &path, "trn2.3xlarge").expect("bind");
    let emu = server.emulator().clone();
    let stop = server.stopper();
    let thread = Some(std::thread::spawn(move || server.run().expect("serve")));
    Daemon {
        path,
        emu,
        stop,
        thread,
    }
}

/// The application: started, and (if `ready`) waited for until it holds its model.
struct App {
    child: Child,
}

impl App {
    fn start(exe: &Path, d: &Daemon, cores: &str) -> (App, Option<u32>) {
        let mut child = Command::new(exe)
            .arg(repo().join("fixtures/neff/mlp.neff"))
            .arg("3")
            .env("NEURON_EMU", "1")
            .env("NEURON_EMU_SOCKET", &d.path)
            .env("NEURON_RT_VISIBLE_CORES", cores)
            .env_remove("LD_PRELOAD")
            .env_remove("NEURON_EMU_LIB")
            .env_remove("NEURON_EMU_FAULTS")
            .env_remove("NEURON_RT_NUM_CORES")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("hold_model");
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let _ = out.read_line(&mut line);
        let pid = line
            .strip_prefix("ready ")
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok());
        (App { child }, pid)
    }

    /// Close its stdin (it cleans up and exits), then its exit code and stderr.
    fn stderr(mut self) -> (Option<i32>, String) {
        use std::io::Read;
        drop(self.child.stdin.take());
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let code = self.child.wait().expect("wait").code();
        (code, err)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tool under the preload shim, on the daemon's machine.
fn tool(name: &str, d: &Daemon) -> Command {
    let exe = match name {
        "neuron-ls" => env!("CARGO_BIN_EXE_neuron-ls"),
        _ => env!("CARGO_BIN_EXE_neuron-monitor"),
    };
    let mut c = Command::new(exe);
    c.env("LD_PRELOAD", built("libneuron_emu_preload.so"))
        .env("NEURON_EMU_SOCKET", &d.path)
        .env_remove("NEURON_SYSFS_ROOT")
        .env_remove("NEURON_EMU");
    c
}

fn neuron_ls(d: &Daemon) -> Value {
    let o = tool("neuron-ls", d)
        .arg("--json-output")
        .output()
        .expect("neuron-ls");
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).expect("neuron-ls JSON")
}

/// The first record of neuron-monitor (period 1 s), then the monitor is stopped.
fn neuron_monitor(d: &Daemon, dir: &Path) -> Value {
    let cfg = dir.join("monitor.json");
    std::fs::write(
        &cfg,
        r#"{"period": "1s", "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"}, {"type": "execution_stats"}]}], "system_metrics": [{"type": "neuron_hw_counters"}]}"#,
    )
    .expect("config");
    let mut m = tool("neuron-monitor", d)
        .arg("-c")
        .arg(&cfg)
        .stdout(Stdio::piped())
        .spawn()
        .expect("neuron-monitor");
    let mut line = String::new();
    let r = BufReader::new(m.stdout.take().expect("stdout")).read_line(&mut line);
    let _ = m.kill();
    let _ = m.wait();
    r.expect("a record");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn success_counts(d: &Daemon, attr: &str) -> u64 {
    let t = d.emu.sysfs();
    (0..8)
        .filter_map(|nc| {
            t.read(&format!(
                "/sys/devices/virtual/neuron_device/neuron0/neuron_core{nc}/stats/status/success/{attr}"
            ))
        })
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

#[test]
fn a_second_process_sees_the_first_one_through_the_tools_and_kill_9_frees_it() {
    let dir = std::env::temp_dir().join(format!("neuron-tools-machine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp");
    let exe = nrt_program("hold_model", &dir);
    let d = daemon(&dir);

    // The application holds logical core 0 with the MLP loaded and run 3 times.
    let (app, pid) = App::start(&exe, &d, "0");
    let Some(pid) = pid else {
        let (code, err) = app.stderr();
        panic!("hold_model did not get ready ({code:?}): {err}");
    };

    // neuron-ls, another process: the device, its links, the application and its command.
    let ls = neuron_ls(&d);
    let dev = &ls[0];
    assert_eq!(dev["neuron_device"], 0, "{ls}");
    assert_eq!(dev["nc_count"], 4, "{ls}"); // logical cores (LNC=2)
    let procs = dev["neuron_processes"]
        .as_array()
        .expect("neuron_processes");
    let me = procs
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not listed: {ls}"));
    assert!(
        me["command"]
            .as_str()
            .is_some_and(|c| c.contains("hold_model")),
        "{me}"
    );
    assert_ne!(me["neuron_runtime_version"], "NA", "{me}");

    // neuron-monitor, another process: the application's runtime, its memory and its model.
    let mon = neuron_monitor(&d, &dir);
    let rts = mon["neuron_runtime_data"].as_array().expect("runtime data");
    let rt = rts
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in the monitor: {mon}"));
    let used = &rt["report"]["memory_used"]["neuron_runtime_used_bytes"];
    assert!(
        used["neuron_device"].as_u64().is_some_and(|b| b > 0),
        "{used}"
    );
    let models = rt["report"]["memory_used"]["loaded_models"]
        .as_array()
        .expect("loaded_models");
    assert_eq!(models.len(), 1, "{rt}");
    assert!(
        mon["system_data"]["neuron_hw_counters"]["neuron_devices"].is_array(),
        "{mon}"
    );

    // The driver's sysfs counters (the datastore the runtime keeps) say 3 executions.
    assert_eq!(success_counts(&d, "present"), 3);

    // A second application asking for the same core is refused as libnrt refuses it.
    let (second, none) = App::start(&exe, &d, "0");
    assert_eq!(none, None);
    let (code, err) = second.stderr();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("nrt_init") && err.contains("(4)"),
        "NRT_RESOURCE expected: {err}"
    );

    // kill -9: every byte, core mark and datastore entry of the application is freed.
    let mut app = app;
    app.child.kill().expect("kill -9");
    app.child.wait().expect("reap");
    // Everything the process allocated goes with it; only its notification queues stay, as
    // the driver owns those (device lifespan) until the core's next reset.
    let left = |pid: u32, nq: bool| -> u64 {
        let rep = d.emu.device(0).expect("device 0");
        rep.memory
            .iter()
            .filter(|m| m.pid == pid && (m.mem_type_name == Some("NOTIFICATION_HOST")) == nq)
            .map(|m| m.bytes)
            .sum()
    };
    let t0 = Instant::now();
    while left(pid, false) != 0 && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left(pid, false), 0, "memory left after kill -9");
    let ls = neuron_ls(&d);
    assert_eq!(ls[0]["neuron_processes"], serde_json::json!([]), "{ls}");
    // The executions stay counted in `total` after the process is gone.
    assert_eq!(success_counts(&d, "present"), 0);
    assert_eq!(success_counts(&d, "total"), 3);

    // Now the core is free for the next application.
    let (third, pid3) = App::start(&exe, &d, "0");
    assert!(pid3.is_some(), "the core is free after kill -9");
    // Its nrt_init reset the core: the old queues are gone too.
    assert_eq!(
        left(pid, true),
        0,
        "notification queues after the next reset"
    );
    let (code, err) = third.stderr();
    assert_eq!(code, Some(0), "{err}");
    // Stop the daemon while its socket is still there (the stop wakes it through the socket).
    drop(d);
    let _ = std::fs::remove_dir_all(&dir);
}
