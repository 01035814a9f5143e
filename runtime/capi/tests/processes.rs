//! Core reservation between processes, through the emulator's process table (two runtime
//! instances with distinct process identities on one emulated device), and the env variables
//! read by the Rust API.

use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use neuron_emulator::Emulator;
use neuron_emulator::OpenOptions;
use neuron_runtime::api::DeviceProvider;
use neuron_runtime::api::{Nrt, Placement};
use neuron_runtime::{Config, NrtStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static SERIAL: Mutex<()> = Mutex::new(());

/// The devices of one in-process emulator, opened as process `pid`: two of these with
/// different pids are two processes sharing a device.
#[derive(Debug, Clone)]
struct EmuProvider {
    emu: Arc<Emulator>,
    pid: u32,
}

impl DeviceProvider for EmuProvider {
    fn device_count(&self) -> u32 {
        self.emu.device_count() as u32
    }
    fn open(&self, index: u32, write_only: bool) -> Result<Arc<dyn DeviceFile>, Errno> {
        let f = self.emu.open(
            index as usize,
            OpenOptions {
                pid: self.pid,
                write_only,
            },
        )?;
        Ok(Arc::new(f))
    }
    fn describe(&self) -> String {
        format!("an in-process emulator as pid {}", self.pid)
    }
}

fn clean() {
    for v in [
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
        "NEURON_RT_RESET_CORES",
        "NEURON_RT_EXEC_TIMEOUT",
        "NEURON_RT_VALIDATE_HASH",
        "NEURON_RT_LOG_LEVEL",
        "NEURON_LOGICAL_NC_CONFIG",
    ] {
        std::env::remove_var(v);
    }
}

#[test]
fn reserved_cores_conflict_between_two_processes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    let emu = Arc::new(Emulator::new(Arch::V3Trn2, 1));
    let a = EmuProvider {
        emu: emu.clone(),
        pid: 4001,
    };
    let b = EmuProvider {
        emu: emu.clone(),
        pid: 4002,
    };
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "0-1");
    let nrt_a = Nrt::init(&a, Config::default()).expect("process A owns nc0-1");
    assert_eq!(nrt_a.visible_vnc_count(), 2);
    let e = Nrt::init(&b, Config::default()).expect_err("B must not get nc0-1");
    assert_eq!(e.status, NrtStatus::Resource);
    assert_eq!(
        e.message,
        "NeuronCore(s) not available - Requested:nc0-nc1 Available:0"
    );
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "2");
    let nrt_b = Nrt::init(&b, Config::default()).expect("B gets nc2");
    // LNC=2 (the trn2 default): logical core 2 is physical cores 4 and 5.
    assert_eq!(nrt_b.physical_core(0), Some(4));
    assert_eq!(nrt_b.lnc(), 2);
    drop(nrt_b);
    // When A goes away (nrt_close), its cores are free again.
    drop(nrt_a);
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "0-1");
    let nrt_b = Nrt::init(&b, Config::default()).expect("B gets nc0-1 after A closed");
    drop(nrt_b);
    // NUM_CORES: any N free cores; all taken -> resource error.
    std::env::remove_var("NEURON_RT_VISIBLE_CORES");
    std::env::set_var("NEURON_RT_NUM_CORES", "4");
    let all = Nrt::init(&a, Config::default()).expect("A takes all 4 logical cores");
    assert_eq!(all.visible_vnc_count(), 4);
    std::env::set_var("NEURON_RT_NUM_CORES", "1");
    assert_eq!(
        Nrt::init(&b, Config::default())
            .expect_err("none left")
            .status,
        NrtStatus::Resource
    );
    drop(all);
    clean();
}

#[test]
fn reset_cores_at_init_unless_disabled() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    let emu = Arc::new(Emulator::new(Arch::V3Trn2, 1));
    let p = EmuProvider {
        emu: emu.clone(),
        pid: 5001,
    };
    let set_sem = || {
        emu.with_device(0, |d| {
            d.reg_write(
                0,
                neuron_abi::consts::SEMA_PAGE_SEM_SET + neuron_abi::consts::SEMA_REG_STRIDE * 7,
                42,
            )
        })
        .expect("device")
    };
    let sem = || {
        emu.with_device(0, |d| d.regs(0).map(|r| r.sem(7)))
            .flatten()
            .expect("regs")
    };
    set_sem();
    std::env::set_var("NEURON_RT_RESET_CORES", "0");
    drop(Nrt::init(&p, Config::default()).expect("init"));
    assert_eq!(sem(), 42, "no reset");
    std::env::remove_var("NEURON_RT_RESET_CORES");
    drop(Nrt::init(&p, Config::default()).expect("init"));
    assert_eq!(sem(), 0, "reset by default");
    clean();
}

#[test]
fn config_env_variables() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "0.5");
    std::env::set_var("NEURON_RT_VALIDATE_HASH", "true");
    let c = Config::from_env();
    assert_eq!(c.exec_timeout, Duration::from_millis(500));
    assert!(c.validate_hash);
    std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "-3");
    assert_eq!(
        Config::from_env().exec_timeout,
        Duration::from_secs(30),
        "invalid values keep the default"
    );
    for (v, want) in [
        ("ERROR", Some(tracing::Level::ERROR)),
        ("warning", Some(tracing::Level::WARN)),
        ("INFO", Some(tracing::Level::INFO)),
        ("QUIET", None),
    ] {
        std::env::set_var("NEURON_RT_LOG_LEVEL", v);
        assert_eq!(neuron_runtime::logging::env_level(), want, "{v}");
    }
    clean();
}

#[test]
fn validate_hash_checks_the_neff_hash_only_when_asked() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    let emu = Arc::new(Emulator::new(Arch::V3Trn2, 1));
    let p = EmuProvider { emu, pid: 6001 };
    let nrt = Nrt::init(&p, Config::default()).expect("init");
    let mut neff = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/neff/mlp.neff"
    ))
    .expect("fixture");
    neff[172] ^= 0xFF; // corrupt the stored MD5
    drop(nrt.load(&neff, 0).expect("hash not checked by default"));
    drop(nrt);
    let nrt = Nrt::init(
        &p,
        Config {
            validate_hash: true,
            ..Config::default()
        },
    )
    .expect("init");
    let e = nrt.load(&neff, 0).expect_err("hash mismatch");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(e.message.contains("hash"), "{}", e.message);
    let t = nrt
        .tensor_allocate(Placement::Device, 0, 64, "t")
        .expect("tensor");
    assert_eq!(t.size(), 64);
    clean();
}

/// Two models loaded on one NeuronCore both run, alternately and repeatedly: the core is
/// switched back to a model's programs when the other one ran there last (before, the first
/// model's executions timed out once the second was loaded).
#[test]
fn two_models_on_one_core_run_alternately() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    let emu = Arc::new(Emulator::new(Arch::V3Trn2, 1));
    let p = EmuProvider { emu, pid: 4101 };
    let cfg = Config {
        exec_timeout: Duration::from_secs(10),
        ..Config::default()
    };
    let nrt = Nrt::init(&p, cfg).expect("init");
    let neff = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/neff/mlp.neff"),
    )
    .expect("mlp.neff");
    let mut a = nrt.load(&neff, 0).expect("load a");
    let mut b = nrt.load(&neff, 0).expect("load b on the same core");
    assert_eq!(a.model.nc(), b.model.nc());
    let x: Vec<u8> = (0..128 * 512 * 2).map(|i| (i % 251) as u8 & 0x3f).collect();
    let run = |m: &mut neuron_runtime::api::LoadedModel| {
        m.model
            .execute(&[("x", &x)])
            .expect("execute")
            .outputs
            .remove(0)
            .1
    };
    let want = run(&mut b);
    for round in 0..3 {
        assert_eq!(run(&mut a), want, "model a, round {round}");
        assert_eq!(run(&mut b), want, "model b, round {round}");
    }
    // Unloading one leaves the other running.
    drop(b);
    assert_eq!(run(&mut a), want);
}

/// Logical cores as on trn2: LNC=2 by default (4 logical cores from 8 physical), an LNC=2 NEFF
/// on logical core N runs on physical 2N and 2N+1, `NEURON_RT_VISIBLE_CORES` counts logical
/// cores, `NEURON_LOGICAL_NC_CONFIG=1` gives 8 single-core logical cores and refuses an LNC=2
/// NEFF instead of letting it spill onto the next core.
#[test]
fn logical_cores_follow_neuron_logical_nc_config() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean();
    let emu = Arc::new(Emulator::new(Arch::V3Trn2, 1));
    let p = EmuProvider { emu, pid: 4201 };
    let neff = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/real-neff/akc-fused_fp32_s512.neff"),
    )
    .expect("the shared fixtures (../shared beside the repository)");
    {
        let nrt = Nrt::init(&p, Config::default()).expect("init");
        assert_eq!((nrt.lnc(), nrt.visible_vnc_count()), (2, 4));
        let m = nrt.load(&neff, 3).expect("LNC=2 NEFF on logical core 3");
        assert_eq!(m.model.nc(), 6, "logical core 3 = physical 6 and 7");
    }
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "1-2");
    {
        let nrt = Nrt::init(&p, Config::default()).expect("init");
        assert_eq!(nrt.visible_vnc_count(), 2);
        assert_eq!(nrt.physical_core(0), Some(2));
        assert_eq!(nrt.physical_core(1), Some(4));
        let m = nrt.load(&neff, 1).expect("on visible core 1");
        assert_eq!(m.model.nc(), 4);
    }
    std::env::remove_var("NEURON_RT_VISIBLE_CORES");
    std::env::set_var("NEURON_LOGICAL_NC_CONFIG", "1");
    {
        let nrt = Nrt::init(&p, Config::default()).expect("init");
        assert_eq!((nrt.lnc(), nrt.visible_vnc_count()), (1, 8));
        let e = nrt.load(&neff, 0).expect_err("an LNC=2 NEFF under LNC=1");
        assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
        assert!(e.message.contains("LNC=1"), "{}", e.message);
    }
    std::env::set_var("NEURON_LOGICAL_NC_CONFIG", "4");
    let e = Nrt::init(&p, Config::default()).expect_err("LNC=4");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(
        e.message.contains("NEURON_LOGICAL_NC_CONFIG"),
        "{}",
        e.message
    );
    clean();
}
