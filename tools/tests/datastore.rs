//! The runtime's datastore counters after loads, executions and errors, read back both
//! through the runtime's own mapping and, as a tool would, from another "process"'s fd.

mod common;
use common::*;
use neuron_abi::nds::{self, NcCounter, NdCounter};
use neuron_abi::nds_runtime::RuntimeArea;
use neuron_kbuild::kernels::{broken, Broken};
use neuron_runtime::NrtStatus;
use std::sync::Arc;
use std::time::Duration;

fn tool_page(emu: &neuron_emulator::Emulator) -> Vec<u8> {
    let f = EmuDevices(emu);
    let dev = neuron_tools::snapshot::Devices::open(&f, 0).expect("tool fd");
    neuron_runtime::nds::read_page(&dev, APP_PID as i32).expect("app page")
}

#[test]
fn counters_follow_loads_executions_and_errors() {
    let emu = emulator();
    let rt = app(&emu, Duration::from_secs(30), Some("job-a"));
    let ds = rt.datastore().expect("datastore").clone();
    assert_eq!(
        ds.nd(NdCounter::RUNTIME_VERSION),
        neuron_runtime::nds::version_counter(2, 0, 0)
    );
    let mut m = rt.load(&mlp(), 0).expect("load");
    assert_eq!(m.datastore_id(), Some(10001));
    assert_eq!(ds.nc(0, NcCounter::MODEL_LOAD_COUNT), 1);
    let u = m.usage();
    assert!(u.device.iter().sum::<u64>() > 0, "{u:?}");
    assert_eq!(
        ds.nc(0, NcCounter::MEM_USAGE_CODE_DEVICE),
        u.device[neuron_abi::nds_runtime::MEM_CODE]
    );
    assert_eq!(
        ds.nc(0, NcCounter::MEM_USAGE_CONSTANTS_DEVICE),
        u.device[neuron_abi::nds_runtime::MEM_CONSTANTS]
    );
    assert!(
        ds.nd(NdCounter::MEM_USAGE_MISC_HOST) > 0,
        "rings and control words are host memory"
    );
    for _ in 0..3 {
        run(&mut m).expect("run");
    }
    assert_eq!(ds.nc(0, NcCounter::INFER_COMPLETED), 3);
    assert_eq!(ds.nc(0, NcCounter::INFERENCE_COUNT), 3);
    assert_eq!(ds.nc(0, NcCounter::GENERIC_FAIL), 0);
    assert!(ds.nc(0, NcCounter::LATENCY_TOTAL) > 0);
    assert!(ds.nc(0, NcCounter::TIME_IN_USE) > 0);
    // A bad input: incorrect input, a model error, a failure.
    let e = m.execute(&[("nope", &[0u8][..])]).expect_err("bad input");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert_eq!(ds.nc(0, NcCounter::INFER_INCORRECT_INPUT), 1);
    assert_eq!(ds.nc(0, NcCounter::ERR_MODEL), 1);
    assert_eq!(ds.nc(0, NcCounter::GENERIC_FAIL), 1);
    let area = ds.area();
    let rec = area.loaded_models().next().expect("listed");
    assert_eq!((rec.model_id, rec.nc_index, rec.executions), (10001, 0, 4));
    assert_eq!(rec.is_running, 0);
    assert_eq!(area.latency[0].total.count, 4);
    assert_eq!(area.latency[0].device.count, 3);

    // The same from another process's fd, through ACQUIRE_NEURON_DS(pid) + a read-only map.
    let page = tool_page(&emu);
    assert!(nds::is_initialised(&page));
    assert_eq!(nds::nc_counter(&page, 0, NcCounter::INFER_COMPLETED), 3);
    let a = RuntimeArea::of_page(&page).expect("area");
    assert_eq!(neuron_abi::nds_runtime::c_str(&a.process.tag), "job-a");
    assert_eq!(
        neuron_abi::nds_runtime::c_str(&a.process.runtime_version),
        "2.0.0"
    );
    assert_eq!(a.loaded_models().count(), 1);

    // Unload: the record goes and the memory is given back.
    drop(m);
    assert_eq!(ds.nc(0, NcCounter::MEM_USAGE_CODE_DEVICE), 0);
    assert_eq!(ds.nd(NdCounter::MEM_USAGE_MISC_HOST), 0);
    assert_eq!(ds.area().loaded_models().count(), 0);
    assert_eq!(ds.area().models_loaded, 1);

    drop(ds);
    drop(rt);
    assert!(
        neuron_runtime::nds::read_page(
            &neuron_tools::snapshot::Devices::open(&EmuDevices(&emu), 0).expect("fd"),
            APP_PID as i32
        )
        .is_err(),
        "nrt_close releases the page"
    );
}

#[test]
fn device_errors_and_timeouts_are_classified() {
    let emu = emulator();
    let rt = app(&emu, Duration::from_millis(300), None);
    let ds = rt.datastore().expect("datastore").clone();
    let mut oob = rt
        .load(&broken(Broken::SbufOutOfBounds).expect("build"), 0)
        .expect("load");
    let e = run(&mut oob).expect_err("oob");
    assert_eq!(e.status, NrtStatus::ExecOob);
    assert_eq!(ds.nc(0, NcCounter::OOB), 1);
    assert_eq!(ds.nc(0, NcCounter::ERR_MODEL), 1);
    // The core is now unrecoverable: the next one fails to queue (a runtime error).
    let e = run(&mut oob).expect_err("sticky");
    assert_eq!(e.status, NrtStatus::ExecUnitUnrecoverable);
    assert_eq!(ds.nc(0, NcCounter::INFER_FAILED_TO_QUEUE), 1);
    assert_eq!(ds.nc(0, NcCounter::ERR_RT), 1);
    drop(oob);
    let mut hang = rt
        .load(&broken(Broken::Hang).expect("build"), 1)
        .expect("load");
    let e = run(&mut hang).expect_err("hang");
    assert_eq!(e.status, NrtStatus::Timeout);
    assert_eq!(ds.nc(1, NcCounter::INFER_TIMED_OUT), 1);
    assert_eq!(ds.nc(1, NcCounter::ERR_TRANSIENT), 1);
    assert_eq!(ds.nc(1, NcCounter::GENERIC_FAIL), 1);
    assert_eq!(ds.nc(0, NcCounter::MODEL_LOAD_COUNT), 1);
    assert_eq!(ds.nc(1, NcCounter::MODEL_LOAD_COUNT), 1);
    // A load that fails counts its class on the core it was meant for.
    let e = rt.load(b"not a neff", 2).expect_err("bad neff");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert_eq!(ds.nc(2, NcCounter::ERR_INVALID), 1);
    assert_eq!(ds.nc(2, NcCounter::MODEL_LOAD_COUNT), 0);
}

#[test]
fn a_dma_abort_counts_as_a_hardware_error() {
    use neuron_faults::plan::{parse, Limits};
    let limits = Limits::for_arch(neuron_abi::Arch::V3Trn2, 1);
    let plan = parse(
        "[[fault]]\nid = \"d\"\neffect = \"dma-error\"\ndescriptor = 2\n",
        &limits,
    )
    .expect("plan");
    let inj = plan.sample_all(&limits, 0).remove(0);
    let emu = emulator();
    let rt = app(&emu, Duration::from_secs(30), None);
    assert!(emu.set_hooks(0, Some(Box::new(neuron_faults::inject::Injector::new(inj)))));
    let ds: Arc<neuron_runtime::nds::Datastore> = rt.datastore().expect("ds").clone();
    let mut m = rt.load(&mlp(), 0).expect("load");
    let e = run(&mut m).expect_err("abort");
    assert_eq!(e.status, NrtStatus::ExecHwErrDmaAbort);
    assert_eq!(ds.nc(0, NcCounter::HW_ERR_DMA_ABORT), 1);
    assert_eq!(ds.nc(0, NcCounter::ERR_HW), 1);
    assert_eq!(ds.nc(0, NcCounter::GENERIC_FAIL), 1);
}

#[test]
fn a_reader_in_another_process_never_sees_a_torn_record() {
    let emu = emulator();
    let rt = app(&emu, Duration::from_secs(30), None);
    let mut m = rt.load(&mlp(), 0).expect("load");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let tool = EmuDevices(&emu);
    let dev = neuron_tools::snapshot::Devices::open(&tool, 0).expect("tool fd");
    let reads = std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..40 {
                run(&mut m).expect("run");
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut reads = 0u32;
        while !stop.load(std::sync::atomic::Ordering::Acquire) || reads == 0 {
            let page = neuron_runtime::nds::read_page(&dev, APP_PID as i32).expect("page");
            let a = RuntimeArea::of_page(&page).expect("area");
            // The writer keeps these equal under the seqlock: a torn copy would split them.
            for l in &a.latency {
                assert_eq!(l.total.count, l.total.buckets.iter().sum::<u64>());
                assert_eq!(l.device.count, l.device.buckets.iter().sum::<u64>());
            }
            let rec = a.loaded_models().next().expect("listed");
            assert!(rec.executions >= a.latency[0].total.count);
            assert!(rec.executions <= a.latency[0].total.count + 1);
            reads += 1;
        }
        reads
    });
    assert!(reads > 0);
}
