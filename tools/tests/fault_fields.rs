//! What neuron-monitor shows for each injected fault (`users-faults-and-tools.md` §2.5, §2.6):
//! the per-period `error_summary` / `execution_summary` tallies of the runtime that met it, and
//! the ECC counts of `system_data.neuron_hw_counters`, read from the driver's sysfs tree as
//! the emulator renders it. The application and the tool are two processes (two pids) on one
//! emulated device.

mod common;

use common::*;
use neuron_faults::inject::Injector;
use neuron_faults::plan::{parse, Limits};
use neuron_tools::monitor::Monitor;
use neuron_tools::snapshot::Snapshot;
use serde_json::Value;
use std::time::Duration;

/// Run the MLP once with `plan`'s fault; the monitor's record of that period.
fn period_with(plan: &str, name: &str, timeout: Duration) -> Value {
    let limits = Limits::for_arch(neuron_abi::Arch::V3Trn2, 1);
    let p = parse(plan, &limits).expect("plan");
    let emu = emulator();
    let roots = roots(name);
    let devs = EmuDevices(&emu);
    let rt = app(&emu, timeout, None);
    let mut m = rt.load(&mlp(), 0).expect("load");
    let mut mon = Monitor::new(fast_config());
    let _ = mon.report(Ok(&Snapshot::take(&devs, &roots).expect("snapshot")));
    let inj = p.sample_all(&limits, 0).remove(0);
    assert!(emu.set_hooks(0, Some(Box::new(Injector::new(inj)))));
    let _ = run(&mut m);
    std::thread::sleep(Duration::from_millis(20));
    // The tool reads sysfs at its real paths; here they are the emulator's tree, written out.
    emu.sysfs().write_to(&roots.sysfs).expect("sysfs tree");
    mon.report(Ok(&Snapshot::take(&devs, &roots).expect("snapshot")))
}

fn runtime(r: &Value) -> &Value {
    let rts = r["neuron_runtime_data"].as_array().expect("runtimes");
    assert_eq!(rts.len(), 1, "{r}");
    &rts[0]["report"]["execution_stats"]
}

fn hw(r: &Value, field: &str) -> u64 {
    r["system_data"]["neuron_hw_counters"]["neuron_devices"][0][field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field}: {r}"))
}

#[test]
fn hardware_errors_count_as_hardware_with_their_ecc_counts() {
    for (name, plan, sram, mem) in [
        (
            "sram",
            "[[fault]]\nid = \"s\"\neffect = \"sram-ue\"\ncore = 0\nat-ns = 500\n",
            1,
            0,
        ),
        (
            "hbm",
            "[[fault]]\nid = \"h\"\neffect = \"hbm-ue\"\naddress = [0x1000000, 0x1000040]\nat-ns = 1\n",
            0,
            1,
        ),
        (
            "dma",
            "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\ndescriptor = 2\n",
            0,
            0,
        ),
    ] {
        let r = period_with(plan, name, Duration::from_secs(10));
        let es = runtime(&r);
        assert_eq!(es["error_summary"]["hardware"], 1, "{name}: {es}");
        assert_eq!(es["error_summary"]["numerical"], 0, "{name}: {es}");
        assert_eq!(es["execution_summary"]["completed"], 0, "{name}: {es}");
        assert_eq!(hw(&r, "sram_ecc_uncorrected"), sram, "{name}");
        assert!(hw(&r, "mem_ecc_uncorrected") >= mem, "{name}");
        if mem == 0 {
            assert_eq!(hw(&r, "mem_ecc_uncorrected"), 0, "{name}");
        }
    }
}

#[test]
fn a_nan_counts_as_numerical_and_completed_with_num_err() {
    let r = period_with(
        "[[fault]]\nid = \"n\"\neffect = \"nan\"\nengine = \"Vector\"\ninstruction = 1\n",
        "nan",
        Duration::from_secs(10),
    );
    let es = runtime(&r);
    assert_eq!(es["error_summary"]["numerical"], 1, "{es}");
    assert_eq!(es["execution_summary"]["completed_with_num_err"], 1, "{es}");
    assert_eq!(es["error_summary"]["hardware"], 0, "{es}");
}

#[test]
fn a_hang_counts_as_timed_out() {
    let r = period_with(
        "[[fault]]\nid = \"h\"\neffect = \"engine-hang\"\nengine = \"Tensor\"\ninstruction = 20\n",
        "hang",
        Duration::from_millis(300),
    );
    let es = runtime(&r);
    assert_eq!(es["execution_summary"]["timed_out"], 1, "{es}");
    assert_eq!(es["execution_summary"]["completed"], 0, "{es}");
}
