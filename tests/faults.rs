//! Every fault effect of the plan format, injected into the MLP fixture through the device
//! hooks, gives what a real Neuron user sees (`users-faults-and-tools.md` §2.1, §2.2, §2.3,
//! §2.6): the NRT status, the runtime's log text, the `NEURON_HW_ERR=` kernel-log line written
//! through PRINTK, and the sticky state with its recovery.

use neuron_e2e_tests::{builtin_input, repo_path, setup, Setup};
use neuron_faults::inject::{Injector, InjectorSet};
use neuron_faults::plan::{parse, Limits};
use neuron_runtime::{ExecOutput, Model, NrtError, NrtStatus, WaitCancel};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn limits() -> Limits {
    Limits::for_arch(neuron_abi::Arch::V3Trn2, 1)
}

fn mlp() -> Vec<u8> {
    std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("fixtures/neff/mlp.neff")
}

fn run(m: &mut Model) -> Result<ExecOutput, NrtError> {
    let infos: Vec<_> = m.inputs().cloned().collect();
    let data: Vec<(String, Vec<u8>)> = infos
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let n = (t.size as usize) / t.dtype.size();
            (t.name.clone(), builtin_input(t.dtype, n, i))
        })
        .collect();
    let refs: Vec<(&str, &[u8])> = data
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    m.execute(&refs)
}

/// The fault-free run.
fn golden() -> ExecOutput {
    let s = setup(Duration::from_secs(30));
    let mut m = s.rt.load(&mlp(), 0).expect("load");
    run(&mut m).expect("golden run")
}

struct Faulty {
    s: Setup,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// A fresh device with the plan's (single) fault installed; `timeout` bounds hangs.
fn faulty(plan: &str, timeout: Duration) -> Faulty {
    let p = parse(plan, &limits()).unwrap_or_else(|e| panic!("{e}"));
    let inj = p.sample_all(&limits(), 0).remove(0);
    let s = setup(timeout);
    let hook = Injector::new(inj);
    let fired = hook.fired();
    assert!(s.emu.set_hooks(0, Some(Box::new(hook))));
    Faulty { s, fired }
}

impl Faulty {
    fn kmsg(&self) -> Vec<String> {
        self.s
            .emu
            .kernel_log()
            .into_iter()
            .map(|l| l.text)
            .collect()
    }
    fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
    /// `neuron0/neuron_core0/stats/status/<name>/present` as the driver's sysfs shows it (the
    /// counters the runtime keeps in its datastore page).
    fn status_counter(&self, name: &str) -> u64 {
        let path = format!(
            "/sys/devices/virtual/neuron_device/neuron0/neuron_core0/stats/status/{name}/present"
        );
        let v = self.s.emu.sysfs().read(&path);
        v.as_deref()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{path}: {v:?}"))
    }
}

fn status(r: &Result<ExecOutput, NrtError>) -> u32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.status.code(),
    }
}

/// A hardware error: its status, its line, its kernel-log kind; the core is then unusable
/// (`NRT_EXEC_UNIT_UNRECOVERABLE`) until the model is reloaded on a healthy device.
fn hardware_error(plan: &str, want: NrtStatus, line: &str, kind: &str) {
    let f = faulty(plan, Duration::from_secs(10));
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let r = run(&mut m);
    assert!(f.fired(), "{plan}");
    let e = r.expect_err("the fault is reported");
    assert_eq!(e.status, want, "{e}");
    assert!(e.message.contains(line), "{}", e.message);
    let k = f.kmsg();
    assert!(
        k.iter()
            .any(|l| l.starts_with(&format!("NEURON_HW_ERR={kind} "))
                && l.contains("nd-id=0 nc-id=0")),
        "{k:?}"
    );
    // The runtime counts the error where the driver's sysfs shows it (`users-faults-and-tools.md`
    // §2.6): the hardware class and the fault's own counter.
    let counter = match want {
        NrtStatus::ExecHwErrNcUe => "hw_nc_ue_error",
        NrtStatus::ExecHwErrHbmUe => "hw_hbm_ue_error",
        NrtStatus::ExecHwErrRepairableHbmUe => "hw_repairable_hbm_ue_error",
        NrtStatus::ExecHwErrDmaAbort => "hw_dma_abort_error",
        _ => unreachable!("not a hardware error: {want:?}"),
    };
    assert_eq!(f.status_counter(counter), 1, "{counter}");
    assert_eq!(f.status_counter("hw_error"), 1);
    assert_eq!(f.status_counter("success"), 0);
    let ecc = f.s.emu.ecc(0).expect("device 0");
    match want {
        NrtStatus::ExecHwErrNcUe => assert_eq!(ecc.sysfs_sram_ecc_uncorrected(), 1, "{ecc:?}"),
        NrtStatus::ExecHwErrHbmUe => {
            assert!(
                ecc.sysfs_mem_ecc_uncorrected() >= 1 && ecc.repair_state == 2,
                "{ecc:?}"
            )
        }
        NrtStatus::ExecHwErrRepairableHbmUe => assert!(
            ecc.sysfs_mem_ecc_repairable_uncorrected() >= 1 && ecc.repair_state == 1,
            "{ecc:?}"
        ),
        _ => assert_eq!(
            ecc,
            Default::default(),
            "no memory error counted for {want:?}"
        ),
    }
    let again = run(&mut m).expect_err("sticky");
    assert_eq!(again.status, NrtStatus::ExecUnitUnrecoverable, "{again}");
    // Recovery: the fault gone (a replaced instance / reloaded driver), a reload runs.
    drop(m);
    f.s.emu.set_hooks(0, None);
    let mut m = f.s.rt.load(&mlp(), 0).expect("reload");
    run(&mut m).expect("after recovery");
}

#[test]
fn dma_error_aborts_the_queue() {
    hardware_error(
        "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\ndescriptor = 2\n",
        NrtStatus::ExecHwErrDmaAbort,
        "[MLA 0][NC 0] DMA TX engine 0 is in an abort state",
        "DMA_ERROR",
    );
}

#[test]
fn sram_uncorrectable_error() {
    hardware_error(
        "[[fault]]\nid = \"s\"\neffect = \"sram-ue\"\ncore = 0\nat-ns = 500\n",
        NrtStatus::ExecHwErrNcUe,
        "(FATAL-RT-UNDEFINED-STATE) [ND 0][NC 0] Uncorrectable memory error is detected, metadata: 0x16. Please terminate or stop/start this instance",
        "SRAM_UNCORRECTABLE_ERROR",
    );
}

/// The first HBM chunk the runtime allocates (past the driver's reserved 16 MiB) holds data
/// the MLP reads.
const HBM_PLAN: &str =
    "[[fault]]\nid = \"h\"\neffect = \"hbm-ue\"\naddress = [0x1000000, 0x1000040]\nat-ns = 1\n";

#[test]
fn hbm_uncorrectable_error_is_sticky_until_the_driver_reloads() {
    hardware_error(
        HBM_PLAN,
        NrtStatus::ExecHwErrHbmUe,
        "(FATAL-RT-UNDEFINED-STATE) Uncorrectable HBM memory error is detected. Execution results may be invalid. Please terminate this instance",
        "HBM_UNCORRECTABLE_ERROR",
    );
    // With the bad line still there, reloading the model does not help.
    let f = faulty(HBM_PLAN, Duration::from_secs(10));
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    assert_eq!(status(&run(&mut m)), NrtStatus::ExecHwErrHbmUe.code());
    drop(m);
    let mut m = f.s.rt.load(&mlp(), 0).expect("reload");
    assert_eq!(
        status(&run(&mut m)),
        NrtStatus::ExecHwErrHbmUe.code(),
        "sticky across model reloads"
    );
}

#[test]
fn repairable_hbm_error_asks_for_a_driver_reload() {
    let plan = HBM_PLAN.replace("at-ns = 1", "repairable = true\nat-ns = 1");
    hardware_error(
        &plan,
        NrtStatus::ExecHwErrRepairableHbmUe,
        "Please reload the neuron driver or reboot your EC2 instance",
        "HBM_UNCORRECTABLE_ERROR",
    );
}

#[test]
fn a_nan_completes_with_a_numerical_error_and_leaves_the_core_usable() {
    let f = faulty(
        "[[fault]]\nid = \"n\"\neffect = \"nan\"\nengine = \"Vector\"\ninstruction = 1\n",
        Duration::from_secs(10),
    );
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let infos: Vec<_> = m.inputs().cloned().collect();
    let x = builtin_input(
        infos[0].dtype,
        (infos[0].size as usize) / infos[0].dtype.size(),
        0,
    );
    let (out, e) = m
        .execute_completed(&[(infos[0].name.as_str(), x.as_slice())])
        .expect("the execution completes");
    let e = e.expect("numerical error");
    assert!(f.fired());
    assert_eq!(e.status, NrtStatus::ExecCompletedWithNumErr, "{e}");
    assert!(
        !out.outputs.is_empty(),
        "the outputs come with the status, as nrt_execute writes them"
    );
    assert!(e.message.contains("numerical error"), "{}", e.message);
    assert!(f.kmsg().is_empty(), "no kernel-log line for a NaN");
    assert_eq!(f.status_counter("execute_completed_with_num_error"), 1);
    // Not sticky: the next execution runs (the fault fired once).
    f.s.emu.set_hooks(0, None);
    run(&mut m).expect("the core is still usable");
    assert_eq!(f.status_counter("success"), 1);
}

#[test]
fn an_infinity_is_not_an_error() {
    let g = golden();
    let f = faulty(
        "[[fault]]\nid = \"i\"\neffect = \"inf\"\nengine = \"Vector\"\ninstruction = 1\n",
        Duration::from_secs(10),
    );
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let out = run(&mut m).expect("overflow to infinity is no error");
    assert!(f.fired());
    assert_ne!(
        out.outputs, g.outputs,
        "the infinity reached the output: silent corruption"
    );
}

fn hangs(plan: &str) {
    // Wall-clock timeout: long enough that a loaded host still reaches the fault first.
    let f = faulty(plan, Duration::from_millis(1000));
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let e = run(&mut m).expect_err("a hang");
    assert!(f.fired(), "{plan}");
    assert_eq!(e.status, NrtStatus::Timeout, "{e}");
    assert!(
        e.message.contains(
            "(FATAL-RT-UNDEFINED-STATE) execution timeout (1000 ms) on Neuron Device 0 NC 0"
        ),
        "{}",
        e.message
    );
    assert!(
        f.kmsg().is_empty(),
        "a compute hang writes no kernel-log line"
    );
    assert_eq!(f.status_counter("timeout"), 1, "sysfs status/timeout");
    assert_eq!(
        status(&run(&mut m)),
        NrtStatus::ExecUnitUnrecoverable.code()
    );
    // The same hang, its timeout ten minutes away, with a watchdog that ends the wait once
    // the device is quiescent (as `neuron-emu campaign` does): the same outcome, now.
    let early = seen_by_a_watchdog(plan);
    assert_eq!(
        early.0.message,
        e.message.replace("(1000 ms)", "(600000 ms)"),
        "the watchdog's hang differs from the timeout's"
    );
    assert_eq!(early.0.status, e.status);
    assert_eq!(
        early.1,
        (true, true, 1, NrtStatus::ExecUnitUnrecoverable.code())
    );
}

/// `plan`'s hang on a fresh device with a 600 s timeout and a watchdog
/// (`WaitCancel::watching` on `Emulator::quiescent`): the error, then whether the fault fired,
/// whether the kernel log stayed empty, the sysfs timeout count and the next run's status.
/// Fails if the watchdog has not ended the wait within a minute.
fn seen_by_a_watchdog(plan: &str) -> (NrtError, (bool, bool, u64, u32)) {
    let plan = plan.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let f = faulty(&plan, Duration::from_secs(600));
        let mut m = f.s.rt.load(&mlp(), 0).expect("load");
        let token = std::sync::Arc::new(WaitCancel::new());
        m.set_wait_cancel(token.clone());
        let e = token
            .watching(
                || f.s.emu.quiescent(0) == Some(true),
                Duration::from_millis(1),
                || run(&mut m),
            )
            .expect_err("a hang");
        let after = (
            f.fired(),
            f.kmsg().is_empty(),
            f.status_counter("timeout"),
            status(&run(&mut m)),
        );
        let _ = tx.send((e, after));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the watchdog did not end the hung execution's wait")
}

#[test]
fn a_watchdog_never_ends_an_execution_that_completes() {
    // A watchdog looking as often as it can: the device is quiescent as soon as an execution
    // ends, often before the runtime has seen the end; the execution is still complete.
    let g = golden();
    let s = setup(Duration::from_secs(30));
    let mut m = s.rt.load(&mlp(), 0).expect("load");
    let token = std::sync::Arc::new(WaitCancel::new());
    m.set_wait_cancel(token.clone());
    token.watching(
        || s.emu.quiescent(0) == Some(true),
        Duration::ZERO,
        || {
            for i in 0..50 {
                let out = run(&mut m).unwrap_or_else(|e| panic!("execution {i}: {e}"));
                assert_eq!(out.outputs, g.outputs, "execution {i}");
            }
        },
    );
}

#[test]
fn an_engine_hang_times_out() {
    hangs(
        "[[fault]]\nid = \"h\"\neffect = \"engine-hang\"\nengine = \"Tensor\"\ninstruction = 20\n",
    );
}

#[test]
fn a_lost_semaphore_update_times_out() {
    hangs("[[fault]]\nid = \"s\"\neffect = \"semaphore-drop\"\nupdate = 1\n");
}

#[test]
fn a_lost_end_notification_times_out() {
    // Sync's notifications of the execution: its start (hint 2), then its end (hint 3).
    hangs("[[fault]]\nid = \"n\"\neffect = \"notification-drop\"\nengine = \"Sync\"\nnotification = 2\n");
}

#[test]
fn a_delayed_notification_delays_completion() {
    let g = golden();
    let f = faulty(
        "[[fault]]\nid = \"n\"\neffect = \"notification-delay\"\nengine = \"Sync\"\nnotification = 2\ndelay-ns = 50000\n",
        Duration::from_secs(10),
    );
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let out = run(&mut m).expect("completes late");
    assert!(f.fired());
    assert_eq!(out.outputs, g.outputs);
    // Sync's end comes last by 50 us (less the other engines' lead over it).
    assert!(
        out.device_time_ps > g.device_time_ps + 45_000_000,
        "{} vs {}",
        out.device_time_ps,
        g.device_time_ps
    );
}

#[test]
fn slow_engines_and_queues_cost_device_time_not_results() {
    let g = golden();
    for plan in [
        "[[fault]]\nid = \"e\"\neffect = \"engine-slow\"\nengine = \"Tensor\"\nfactor = 4.0\ninstruction = 1\n",
        "[[fault]]\nid = \"q\"\neffect = \"queue-slow\"\nfactor = 3.0\ndescriptor = 1\n",
    ] {
        let f = faulty(plan, Duration::from_secs(10));
        let mut m = f.s.rt.load(&mlp(), 0).expect("load");
        let out = run(&mut m).expect("slow, not wrong");
        assert!(f.fired(), "{plan}");
        assert_eq!(out.outputs, g.outputs, "{plan}");
        assert!(out.device_time_ps > g.device_time_ps, "{plan}: {} vs {}", out.device_time_ps, g.device_time_ps);
        // A constant factor, not a compounding one: the run stays within the factor.
        assert!(out.device_time_ps < g.device_time_ps * 5, "{plan}: {} vs {}", out.device_time_ps, g.device_time_ps);
    }
}

#[test]
fn corrupted_instructions() {
    // Every bit flipped: the opcode byte is one the engine cannot decode.
    let f = faulty(
        "[[fault]]\nid = \"c\"\neffect = \"corrupt-instruction\"\nengine = \"Vector\"\nbits = 512\ninstruction = 1\n",
        Duration::from_millis(300),
    );
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let e = run(&mut m).expect_err("refused");
    assert!(f.fired());
    assert_eq!(e.status, NrtStatus::Invalid, "{e}");
    assert!(
        e.message.contains("invalid instruction (engine Vector"),
        "{}",
        e.message
    );
    // A few random bits: whatever the word becomes, the answer is a status or an output.
    for seed in 0..8u64 {
        let p = parse(
            "[[fault]]\nid = \"c\"\neffect = \"corrupt-instruction\"\nengine = \"Tensor\"\nbits = 3\ninstruction = [1, 40]\n",
            &limits(),
        )
        .expect("plan");
        let s = setup(Duration::from_millis(300));
        let hook = Injector::new(p.sample_all(&limits(), seed).remove(0));
        let fired = hook.fired();
        s.emu.set_hooks(0, Some(Box::new(hook)));
        let mut m = s.rt.load(&mlp(), 0).expect("load");
        let _ = run(&mut m);
        assert!(fired.load(Ordering::Acquire), "seed {seed}");
    }
}

#[test]
fn memory_upsets_and_stuck_bits_land_in_sbuf() {
    for plan in [
        "[[fault]]\nid = \"b\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\ncore = 0\npartitions = [0, 128]\noffset = [0, 4096]\nbits = 4\ninstruction = 30\nengine = \"Tensor\"\n",
        "[[fault]]\nid = \"s\"\neffect = \"stuck-at\"\nregion = \"psum\"\ncore = 0\nvalue = 1\nbits = 8\nat-ns = 100\n",
    ] {
        let f = faulty(plan, Duration::from_secs(10));
        let mut m = f.s.rt.load(&mlp(), 0).expect("load");
        let r = run(&mut m);
        assert!(f.fired(), "{plan}");
        assert_eq!(status(&r), 0, "an upset is silent: masked or corrupt data, never a status");
    }
}

/// A NaN's injection watches memory only until its word's write lands (later words take
/// the unwatched paths); beside a stuck word in one set, memory stays watched for it.
#[test]
fn memory_is_watched_only_while_an_injection_needs_it() {
    let nan = "[[fault]]\nid = \"n\"\neffect = \"nan\"\nengine = \"Vector\"\ninstruction = 1\n";
    let watching = |s: &Setup| s.emu.status(0).expect("device").watching_memory;
    let f = faulty(nan, Duration::from_secs(10));
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let r = run(&mut m);
    assert!(f.fired());
    assert_eq!(status(&r), NrtStatus::ExecCompletedWithNumErr.code());
    assert!(!watching(&f.s), "the NaN landed: nothing left to watch");

    let stuck = "[[fault]]\nid = \"s\"\neffect = \"stuck-at\"\nregion = \"psum\"\ncore = 0\nvalue = 1\nbits = 8\nat-ns = 100\n";
    let plan = parse(&format!("{nan}\n{stuck}"), &limits()).unwrap_or_else(|e| panic!("{e}"));
    let set = InjectorSet::from_plan(&plan, &limits(), 0);
    let fired = set.fired();
    let s = setup(Duration::from_secs(10));
    assert!(s.emu.set_hooks(0, Some(Box::new(set))));
    let mut m = s.rt.load(&mlp(), 0).expect("load");
    let r = run(&mut m);
    assert!(
        fired.iter().all(|f| f.load(Ordering::Acquire)),
        "both fired"
    );
    assert_eq!(status(&r), NrtStatus::ExecCompletedWithNumErr.code());
    assert!(
        watching(&s),
        "the stuck word is still watched after the NaN"
    );
    let on_chip = |s: &Setup| s.emu.status(0).expect("device").watching_on_chip;
    assert!(on_chip(&s), "a PSUM word is watched on chip");

    // A poisoned HBM line is watched off chip only: the engines' operands stay home.
    let f = faulty(HBM_PLAN, Duration::from_secs(10));
    let mut m = f.s.rt.load(&mlp(), 0).expect("load");
    let _ = run(&mut m);
    assert!(f.fired());
    assert!(watching(&f.s) && !on_chip(&f.s), "HBM: off chip only");
}

#[test]
fn a_driver_fault_point_fails_the_call_with_its_errno() {
    // fail_mc_alloc through the driver's own hook: the 3rd allocation gets ENOMEM, the load
    // fails as the runtime reports a refused allocation.
    let f = faulty(
        "[[fault]]\nid = \"a\"\neffect = \"ioctl-fail\"\npoint = \"fail_mc_alloc\"\nioctl = 3\n",
        Duration::from_secs(10),
    );
    let e = f.s.rt.load(&mlp(), 0).expect_err("allocation fails");
    assert!(f.fired());
    assert_eq!(e.status, NrtStatus::Resource, "{e}");
    assert!(
        e.message.contains("Cannot allocate memory")
            || e.message.contains("ENOMEM")
            || e.message.contains("errno 12"),
        "{}",
        e.message
    );
}

/// Runtimes before 2.23.110.0 reported every hardware error as `NRT_TIMEOUT` (an SRAM error
/// as `NRT_EXEC_COMPLETED_WITH_ERR`); `NEURON_EMU_HW_ERROR_CODES=timeout` emulates them.
#[test]
fn older_runtimes_report_hardware_errors_as_timeouts() {
    use neuron_abi::DeviceFile;
    use neuron_runtime::{Config, HwErrorCodes, Runtime};
    for (plan, want) in [
        (
            "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\ndescriptor = 2\n",
            NrtStatus::Timeout,
        ),
        (HBM_PLAN, NrtStatus::Timeout),
        (
            "[[fault]]\nid = \"s\"\neffect = \"sram-ue\"\nat-ns = 500\n",
            NrtStatus::ExecCompletedWithErr,
        ),
    ] {
        let p = parse(plan, &limits()).expect("plan");
        let emu = neuron_emulator::Emulator::new(neuron_abi::Arch::V3Trn2, 1);
        let f = emu
            .open(0, neuron_emulator::OpenOptions::default())
            .expect("open");
        let dev: std::sync::Arc<dyn DeviceFile> = std::sync::Arc::new(f);
        let cfg = Config {
            hw_errors: HwErrorCodes::Timeout,
            ..Config::default()
        };
        let rt = Runtime::new(dev, 0, cfg).expect("runtime");
        emu.set_hooks(
            0,
            Some(Box::new(Injector::new(
                p.sample_all(&limits(), 0).remove(0),
            ))),
        );
        let mut m = rt.load(&mlp(), 0).expect("load");
        let e = run(&mut m).expect_err("fault");
        assert_eq!(e.status, want, "{plan}: {e}");
    }
}
