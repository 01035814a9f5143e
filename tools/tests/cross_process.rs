//! The tools' library against an in-process emulator where one device file (pid APP_PID)
//! runs a model through the runtime and another (pid TOOL_PID) is the tool: the tool sees the
//! other process through the driver ABI only. Field names and types are checked against
//! tables written from `users-faults-and-tools.md` §3.1-3.2, not from the tools' code.

mod common;
use common::*;
use neuron_tools::ls;
use neuron_tools::monitor::{Config, Monitor};
use neuron_tools::snapshot::Snapshot;
use serde_json::Value;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
enum T {
    Num,
    Str,
    Bool,
    Arr,
    Obj,
    NullOrArr,
    NullOrObj,
}

fn check(v: &Value, fields: &[(&str, T)], what: &str) {
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{what} is not an object: {v}"));
    for (name, t) in fields {
        let f = o
            .get(*name)
            .unwrap_or_else(|| panic!("{what} lacks `{name}`: {v}"));
        let ok = match t {
            T::Num => f.is_number(),
            T::Str => f.is_string(),
            T::Bool => f.is_boolean(),
            T::Arr => f.is_array(),
            T::Obj => f.is_object(),
            T::NullOrArr => f.is_null() || f.is_array(),
            T::NullOrObj => f.is_null() || f.is_object(),
        };
        assert!(ok, "{what}.{name} should be {t:?}: {f}");
    }
}

// §3.1 neuron-ls --json-output, one object per device (trn2 adds logical_neuroncore_config).
const LS_DEVICE: &[(&str, T)] = &[
    ("neuron_device", T::Num),
    ("bdf", T::Str),
    ("cpu_affinity", T::Str),
    ("numa_node", T::Str),
    ("connected_to", T::NullOrArr),
    ("nc_count", T::Num),
    ("logical_neuroncore_config", T::Num),
    ("memory_size", T::Num),
    ("neuroncore_ids", T::Arr),
    ("neuron_processes", T::Arr),
];
const LS_PROCESS: &[(&str, T)] = &[
    ("pid", T::Num),
    ("command", T::Str),
    ("neuron_runtime_version", T::Str),
];
// §3.2 neuron-monitor.
const TOP: &[(&str, T)] = &[
    ("neuron_runtime_data", T::Arr),
    ("system_data", T::Obj),
    ("instance_info", T::Obj),
    ("neuron_hardware_info", T::Obj),
];
const RUNTIME: &[(&str, T)] = &[
    ("pid", T::Num),
    ("address", T::Str),
    ("neuron_runtime_tag", T::Str),
    ("error", T::Str),
    ("report", T::Obj),
];
const GROUP: &[(&str, T)] = &[("period", T::Num), ("error", T::Str)];
const ERROR_SUMMARY: &[(&str, T)] = &[
    ("generic", T::Num),
    ("numerical", T::Num),
    ("transient", T::Num),
    ("model", T::Num),
    ("runtime", T::Num),
    ("hardware", T::Num),
];
const EXEC_SUMMARY: &[(&str, T)] = &[
    ("completed", T::Num),
    ("completed_with_err", T::Num),
    ("completed_with_num_err", T::Num),
    ("timed_out", T::Num),
    ("incorrect_input", T::Num),
    ("failed_to_queue", T::Num),
];
const PCT: &[(&str, T)] = &[
    ("p0", T::Num),
    ("p1", T::Num),
    ("p25", T::Num),
    ("p50", T::Num),
    ("p75", T::Num),
    ("p99", T::Num),
    ("p100", T::Num),
];
const HOST_BREAKDOWN: &[(&str, T)] = &[
    ("application_memory", T::Num),
    ("constants", T::Num),
    ("dma_buffers", T::Num),
    ("tensors", T::Num),
];
const NC_MEM: &[(&str, T)] = &[
    ("constants", T::Num),
    ("model_code", T::Num),
    ("model_shared_scratchpad", T::Num),
    ("runtime_memory", T::Num),
    ("tensors", T::Num),
];
const MODEL: &[(&str, T)] = &[
    ("name", T::Str),
    ("uuid", T::Str),
    ("model_id", T::Num),
    ("is_running", T::Bool),
    ("subgraphs", T::Obj),
];
const SUBGRAPH: &[(&str, T)] = &[
    ("memory_used_bytes", T::Obj),
    ("neuroncore_index", T::Num),
    ("neuron_device_index", T::Num),
];
const HW_COUNTERS: &[(&str, T)] = &[
    ("neuron_device_index", T::Num),
    ("mem_ecc_corrected", T::Num),
    ("mem_ecc_uncorrected", T::Num),
    ("sram_ecc_corrected", T::Num),
    ("sram_ecc_uncorrected", T::Num),
];
const CPU: &[(&str, T)] = &[
    ("user", T::Num),
    ("nice", T::Num),
    ("system", T::Num),
    ("idle", T::Num),
    ("io_wait", T::Num),
    ("irq", T::Num),
    ("soft_irq", T::Num),
];
const MEMINFO: &[(&str, T)] = &[
    ("memory_total_bytes", T::Num),
    ("memory_used_bytes", T::Num),
    ("swap_total_bytes", T::Num),
    ("swap_used_bytes", T::Num),
];
const INSTANCE: &[(&str, T)] = &[
    ("instance_name", T::Str),
    ("instance_id", T::Str),
    ("instance_type", T::Str),
    ("instance_availability_zone", T::Str),
    ("instance_availability_zone_id", T::Str),
    ("instance_region", T::Str),
    ("ami_id", T::Str),
    ("subnet_id", T::Str),
    ("error", T::Str),
];
const HW_INFO: &[(&str, T)] = &[
    ("neuron_device_type", T::Str),
    ("neuron_device_version", T::Str),
    ("neuroncore_version", T::Str),
    ("neuron_device_count", T::Num),
    ("neuron_device_memory_size", T::Num),
    ("neuroncore_per_device_count", T::Num),
    ("logical_neuroncore_config", T::Num),
    ("error", T::Str),
];

fn check_report(r: &Value) {
    check(r, TOP, "report");
    for rt in r["neuron_runtime_data"].as_array().expect("array") {
        check(rt, RUNTIME, "runtime");
        let rep = &rt["report"];
        for g in [
            "neuroncore_counters",
            "execution_stats",
            "memory_used",
            "neuron_runtime_vcpu_usage",
        ] {
            check(&rep[g], GROUP, g);
        }
        check(
            &rep["neuroncore_counters"],
            &[("neuroncores_in_use", T::Obj)],
            "neuroncore_counters",
        );
        for (_, c) in rep["neuroncore_counters"]["neuroncores_in_use"]
            .as_object()
            .expect("obj")
        {
            check(
                c,
                &[("neuroncore_utilization", T::Num), ("flops", T::Num)],
                "core",
            );
        }
        let es = &rep["execution_stats"];
        check(&es["error_summary"], ERROR_SUMMARY, "error_summary");
        check(&es["execution_summary"], EXEC_SUMMARY, "execution_summary");
        check(
            &es["latency_stats"],
            &[
                ("total_latency", T::NullOrObj),
                ("device_latency", T::NullOrObj),
            ],
            "latency_stats",
        );
        for l in ["total_latency", "device_latency"] {
            if es["latency_stats"][l].is_object() {
                check(&es["latency_stats"][l], PCT, l);
            }
        }
        let mu = &rep["memory_used"];
        check(
            mu,
            &[
                ("neuron_runtime_used_bytes", T::Obj),
                ("loaded_models", T::Arr),
            ],
            "memory_used",
        );
        let b = &mu["neuron_runtime_used_bytes"];
        check(
            b,
            &[
                ("host", T::Num),
                ("neuron_device", T::Num),
                ("usage_breakdown", T::Obj),
            ],
            "used_bytes",
        );
        check(
            &b["usage_breakdown"]["host"],
            HOST_BREAKDOWN,
            "host breakdown",
        );
        for (_, c) in b["usage_breakdown"]["neuroncore_memory_usage"]
            .as_object()
            .expect("obj")
        {
            check(c, NC_MEM, "neuroncore_memory_usage");
        }
        for m in mu["loaded_models"].as_array().expect("arr") {
            check(m, MODEL, "loaded model");
            for (_, sg) in m["subgraphs"].as_object().expect("obj") {
                check(sg, SUBGRAPH, "subgraph");
                check(
                    &sg["memory_used_bytes"],
                    &[
                        ("host", T::Num),
                        ("neuron_device", T::Num),
                        ("usage_breakdown", T::Obj),
                    ],
                    "sg memory",
                );
            }
        }
        check(
            &rep["neuron_runtime_vcpu_usage"]["vcpu_usage"],
            &[("user", T::Num), ("system", T::Num)],
            "runtime vcpu",
        );
    }
    let sys = &r["system_data"];
    for g in ["neuron_hw_counters", "vcpu_usage", "memory_info"] {
        check(&sys[g], GROUP, g);
    }
    for d in sys["neuron_hw_counters"]["neuron_devices"]
        .as_array()
        .expect("arr")
    {
        check(d, HW_COUNTERS, "hw counters");
    }
    check(&sys["vcpu_usage"]["average_usage"], CPU, "average_usage");
    check(
        &sys["vcpu_usage"],
        &[("usage_data", T::Obj), ("context_switch_count", T::Num)],
        "vcpu_usage",
    );
    check(&sys["memory_info"], MEMINFO, "memory_info");
    check(&r["instance_info"], INSTANCE, "instance_info");
    check(&r["neuron_hardware_info"], HW_INFO, "neuron_hardware_info");
}

#[test]
fn the_tools_see_another_process_through_the_driver() {
    let emu = emulator();
    let roots = roots("xproc");
    let devs = EmuDevices(&emu);
    let rt = app(&emu, Duration::from_secs(30), Some("trainer"));
    let mut m = rt.load(&mlp(), 0).expect("load");
    run(&mut m).expect("run");

    // neuron-ls --json-output.
    let snap = Snapshot::take(&devs, &roots).expect("snapshot");
    let (code, out, err) = ls::run(&["-j".to_string()], || Ok(snap.clone()));
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.ends_with(']'), "no newline after the closing bracket");
    assert!(
        out.contains("\n    {\n        \"neuron_device\": 0,"),
        "4-space indent:\n{out}"
    );
    let v: Value = serde_json::from_str(&out).expect("json");
    let arr = v.as_array().expect("top-level array");
    assert_eq!(arr.len(), 1);
    check(&arr[0], LS_DEVICE, "device");
    assert_eq!(arr[0]["connected_to"], Value::Null, "single device");
    assert_eq!(arr[0]["nc_count"], 4);
    assert_eq!(arr[0]["logical_neuroncore_config"], 2);
    assert_eq!(arr[0]["memory_size"], 103079215104u64);
    assert_eq!(arr[0]["neuroncore_ids"], serde_json::json!([0, 1, 2, 3]));
    let procs = arr[0]["neuron_processes"].as_array().expect("procs");
    assert_eq!(procs.len(), 1, "the tool itself is not listed: {procs:?}");
    check(&procs[0], LS_PROCESS, "process");
    assert_eq!(procs[0]["pid"], APP_PID);
    assert_eq!(procs[0]["neuron_runtime_version"], "2.0.0");
    assert!(
        !procs[0]["command"].as_str().unwrap_or("").is_empty(),
        "the command comes from the page when /proc has none"
    );

    // A process that opened the device but runs no runtime is listed only with -a, as NA.
    let other = emu
        .open(
            0,
            neuron_emulator::OpenOptions {
                pid: 515_151,
                write_only: false,
            },
        )
        .expect("open");
    let snap_a = Snapshot::take(&devs, &roots).expect("snapshot");
    let (_, out, _) = ls::run(&["-j".to_string()], || Ok(snap_a.clone()));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["neuron_processes"].as_array().map(Vec::len), Some(1));
    let (_, out, _) = ls::run(&["-j".to_string(), "-a".to_string()], || Ok(snap_a.clone()));
    let v: Value = serde_json::from_str(&out).expect("json");
    let all = v[0]["neuron_processes"].as_array().expect("procs");
    assert_eq!(all.len(), 2);
    assert!(all
        .iter()
        .any(|p| p["pid"] == 515_151 && p["neuron_runtime_version"] == "NA"));
    let (_, t, _) = ls::run(&["-wa".to_string()], || Ok(snap_a.clone()));
    assert!(t.contains("515151") && t.contains("NA"), "{t}");
    drop(other);

    // The table.
    let (_, t, _) = ls::run(&["--wide".to_string()], || Ok(snap.clone()));
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "instance-type: trn2.48xlarge");
    assert_eq!(lines[1], "instance-id: i-0123456789abcdef0");
    assert_eq!(lines[2], "logical-neuroncore-config: 2");
    assert!(t.contains("| NEURON | NEURON | LOGICAL |"), "{t}");
    assert!(t.contains("RUNTIME"), "{t}");
    assert!(
        t.contains(&APP_PID.to_string()) && t.contains("2.0.0"),
        "{t}"
    );
    assert!(t.contains("96 GB"), "{t}");

    // neuron-monitor: a first record, three more executions, a second record.
    let mut mon = Monitor::new(Config::default());
    let r0 = mon.report(Ok(&snap));
    check_report(&r0);
    for _ in 0..3 {
        run(&mut m).expect("run");
    }
    let _ = m.execute(&[("bogus", &[1u8][..])]);
    std::thread::sleep(Duration::from_millis(50));
    let mut mon = Monitor::new(fast_config());
    let _ = mon.report(Ok(&snap));
    let snap2 = Snapshot::take(&devs, &roots).expect("snapshot");
    let r1 = mon.report(Ok(&snap2));
    check_report(&r1);
    let rts = r1["neuron_runtime_data"].as_array().expect("rts");
    assert_eq!(rts.len(), 1);
    assert_eq!(rts[0]["pid"], APP_PID);
    assert_eq!(rts[0]["neuron_runtime_tag"], "trainer");
    let es = &rts[0]["report"]["execution_stats"];
    assert_eq!(
        es["execution_summary"]["completed"], 3,
        "per-period tally: {es}"
    );
    assert_eq!(es["execution_summary"]["incorrect_input"], 1);
    assert_eq!(es["error_summary"]["model"], 1);
    let p50 = es["latency_stats"]["total_latency"]["p50"]
        .as_f64()
        .expect("p50");
    assert!(p50 > 0.0 && p50 < 30.0, "{p50}");
    assert!(es["latency_stats"]["device_latency"].is_object());
    let mu = &rts[0]["report"]["memory_used"];
    let models = mu["loaded_models"].as_array().expect("models");
    assert_eq!(models.len(), 1);
    assert_eq!(models[0]["model_id"], 10001);
    assert_eq!(models[0]["is_running"], false);
    assert!(
        mu["neuron_runtime_used_bytes"]["neuron_device"]
            .as_u64()
            .expect("n")
            > 0
    );
    assert!(rts[0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"].is_object());
    let hw = &r1["neuron_hardware_info"];
    assert_eq!(hw["neuron_device_type"], "trainium2");
    assert_eq!(hw["neuroncore_per_device_count"], 4);
    assert_eq!(r1["instance_info"]["instance_type"], "trn2.48xlarge");
    assert_eq!(
        r1["system_data"]["memory_info"]["memory_total_bytes"],
        2048 * 1024
    );

    // A tag filter that does not match drops the runtime.
    let cfg = Config::parse(r#"{"period": "1s", "neuron_runtimes": [{"tag_filter": "other.*", "metrics": [{"type": "execution_stats"}]}], "system_metrics": [{"type": "memory_info"}]}"#).expect("config");
    let r = Monitor::new(cfg).report(Ok(&snap2));
    assert_eq!(r["neuron_runtime_data"], serde_json::json!([]));
    assert!(r["system_data"]["memory_info"].is_object());
    assert!(r["system_data"].get("vcpu_usage").is_none());

    // Once the application closes, the tools no longer list it.
    drop(m);
    drop(rt);
    let snap3 = Snapshot::take(&devs, &roots).expect("snapshot");
    let (_, out, _) = ls::run(&["-j".to_string()], || Ok(snap3));
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["neuron_processes"], serde_json::json!([]));
}

#[test]
fn ls_failure_modes() {
    let (code, out, err) = ls::run(&[], || Err("No neuron devices found".to_string()));
    assert_eq!(code, 1);
    assert_eq!(out, "", "empty stdout");
    assert_eq!(err.lines().count(), 1);
    assert!(err.starts_with("level=error msg="), "{err}");
    let (code, out, err) = ls::run(&["--bogus".to_string()], || unreachable!());
    assert_eq!(code, 1);
    assert!(out.contains("--bogus"), "the message is on stdout: {out}");
    assert_eq!(err, "");
}

#[test]
fn monitor_periods_parse_as_the_real_one() {
    use neuron_tools::monitor::parse_period;
    assert_eq!(parse_period("1s"), Some(Duration::from_secs(1)));
    assert_eq!(parse_period("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(parse_period("1.0s"), None, "falls back to the default");
    let c = Config::parse(r#"{"period": "1.0s"}"#).expect("config");
    assert_eq!(c.period, Duration::from_secs(5));
    assert_eq!(c.warnings.len(), 1);
    let c = Config::parse(
        r#"{"period": "1s", "system_metrics": [{"period": "2s", "type": "neuron_hw_counters"}]}"#,
    )
    .expect("config");
    assert_eq!(c.system[0].period, Duration::from_secs(2));
    assert_eq!(c.tick(), Duration::from_secs(2));
    assert!(Config::parse("not json").is_err());
}

/// A record carries only the groups collected for it: a group whose period has not passed is
/// left out, so a consumer that adds every record's per-period tallies (AWS's Prometheus
/// exporter: `execution_status_total`) counts each execution once.
#[test]
fn a_group_not_due_is_left_out_of_the_next_record() {
    let emu = emulator();
    let roots = roots("not-due");
    let devs = EmuDevices(&emu);
    let rt = app(&emu, Duration::from_secs(30), None);
    let mut m = rt.load(&mlp(), 0).expect("load");
    run(&mut m).expect("run");
    let mut mon = Monitor::new(Config::default()); // every group every 5 s
    let r0 = mon.report(Ok(&Snapshot::take(&devs, &roots).expect("snapshot")));
    let es0 = &r0["neuron_runtime_data"][0]["report"]["execution_stats"];
    assert_eq!(es0["execution_summary"]["completed"], 1, "{r0}");
    let r1 = mon.report(Ok(&Snapshot::take(&devs, &roots).expect("snapshot")));
    let rep = &r1["neuron_runtime_data"][0]["report"];
    assert!(
        rep.get("execution_stats").is_none(),
        "a group not due must not repeat its tallies: {r1}"
    );
    assert!(
        r1["system_data"].get("neuron_hw_counters").is_none(),
        "{r1}"
    );
    let total: u64 = [&r0, &r1]
        .iter()
        .filter_map(|r| {
            r["neuron_runtime_data"][0]["report"]["execution_stats"]["execution_summary"]
                ["completed"]
                .as_u64()
        })
        .sum();
    assert_eq!(total, 1, "each execution counted once over the stream");
}
