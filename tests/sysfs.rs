//! The emulated sysfs tree against the driver's facts (`driver-abi.md` §1, §7.3,
//! `users-faults-and-tools.md` §2.4): every name and format from tables written here from the
//! driver source (not from the renderer), values that follow the live state (ECC after an
//! injected HBM error, datastore status counters, memory by category, reset counts), the
//! instance presets' links against the documented neighbour lists, and the materialised copy.

use neuron_abi::consts::MemType;
use neuron_abi::device::PROT_RW;
use neuron_abi::ioctl::*;
use neuron_abi::nds::{nc_counter_offset, NcCounter};
use neuron_abi::structs::*;
use neuron_abi::{DeviceFile, Errno};
use neuron_e2e_tests::call::ioctl;
use neuron_e2e_tests::{builtin_input, repo_path, setup};
use neuron_emulator::instance::Instance;
use neuron_emulator::sysfs::{self, Node, Tree};
use neuron_emulator::{EmuFile, Emulator, OpenOptions};
use std::collections::BTreeSet;
use std::time::Duration;
use zerocopy::FromZeros;

const DEV: &str = "/sys/devices/virtual/neuron_device";

fn preset(name: &str) -> Emulator {
    Emulator::with_instance(&Instance::by_name(name).expect("preset"))
}

fn read(emu: &Emulator, rel: &str) -> String {
    let p = format!("{DEV}/{rel}");
    Tree::render(emu)
        .read(&p)
        .unwrap_or_else(|| panic!("{p} missing"))
}

/// Every attribute under `neuron<N>/` the driver creates (`neuron_cdev.c` attrs,
/// `nsysfsmetric_register`, the v2/v3 HAL nodes), for `nc` cores, plus the device-model files
/// every class device has (`dev`, `uevent`, `subsystem`).
fn expected_device_files(nc: u32) -> BTreeSet<String> {
    // A memory counter directory has total, present and peak.
    let mem = |v: &mut Vec<String>, dir: String| {
        for f in ["total", "present", "peak"] {
            v.push(format!("{dir}/{f}"));
        }
    };
    let mut v: Vec<String> = [
        "core_count",
        "connected_devices",
        "reset",
        "dev",
        "uevent",
        "subsystem",
        "info/notify_delay",
        "info/serial_number",
        "info/architecture/arch_type",
        "info/architecture/instance_type",
        "info/architecture/device_name",
        "stats/hardware/sram_ecc_uncorrected",
        "stats/hardware/mem_ecc_uncorrected",
        "stats/hardware/mem_ecc_repairable_uncorrected",
        "stats/power/utilization",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for cat in [
        "dma_buffers",
        "tensors",
        "constants",
        "application_memory",
        "driver_memory",
        "notifications",
        "dma_rings",
        "uncategorized",
    ] {
        mem(&mut v, format!("stats/memory_usage/host_mem/{cat}"));
    }
    for c in 0..nc {
        let p = format!("neuron_core{c}");
        v.push(format!("{p}/info/architecture/arch_type"));
        v.push(format!("{p}/stats/tensor_engine/pe_cntrs"));
        for s in [
            "success",
            "failure",
            "timeout",
            "exec_bad_input",
            "hw_error",
            "execute_completed_with_error",
            "execute_completed_with_num_error",
            "generic_error",
            "resource_error",
            "resource_nc_error",
            "execute_failed_to_queue",
            "invalid_error",
            "unsupported_neff_version",
            "oob_error",
            "hw_collectives_error",
            "hw_hbm_ue_error",
            "hw_nc_ue_error",
            "hw_dma_abort_error",
            "execute_sw_nq_overflow",
            "execute_sw_semaphore_error",
            "execute_sw_event_error",
            "execute_sw_psum_collision",
            "execute_sw_sequencer_fatal",
            "hw_repairable_hbm_ue_error",
        ] {
            v.push(format!("{p}/stats/status/{s}/total"));
            v.push(format!("{p}/stats/status/{s}/present"));
        }
        for m in ["host_mem", "device_mem"] {
            mem(&mut v, format!("{p}/stats/memory_usage/{m}"));
        }
        for cat in [
            "model_code",
            "tensors",
            "constants",
            "model_shared_scratchpad",
            "runtime_memory",
            "driver_memory",
            "collectives",
            "nonshared_scratchpad",
            "notifications",
            "dma_rings",
            "uncategorized",
        ] {
            mem(&mut v, format!("{p}/stats/memory_usage/device_mem/{cat}"));
        }
        for o in [
            "flop_count",
            "inference_count",
            "model_load_count",
            "reset_req_count",
            "reset_fail_count",
            "nc_time_in_use",
        ] {
            v.push(format!("{p}/stats/other_info/{o}/total"));
            v.push(format!("{p}/stats/other_info/{o}/present"));
        }
    }
    v.into_iter().collect()
}

/// The files (and links) under `dir` of a rendered tree, relative to it.
fn files_under(t: &Tree, dir: &str) -> BTreeSet<String> {
    t.entries()
        .filter(|(_, n)| !matches!(n, Node::Dir))
        .filter_map(|(p, _)| p.strip_prefix(&format!("{dir}/")).map(str::to_string))
        .collect()
}

fn is_count(s: &str) -> bool {
    s.strip_suffix('\n')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
fn the_tree_has_the_driver_names_and_formats() {
    // (preset, cores, ND suffix, NC suffix, instance_type, device_name), `driver-abi.md` §6.
    for (name, nc, nd_t, nc_t, it, dn) in [
        ("trn2.48xlarge", 8, "NDv3", "NCv3", "Trn2", "Trainium2"),
        ("trn1.32xlarge", 2, "NDv2", "NCv2", "Trn1", "Trainium1"),
        ("inf2.xlarge", 2, "NDv3", "NCv2", "Inf2", "Inferentia2"),
    ] {
        let emu = preset(name);
        let t = Tree::render(&emu);
        let n = emu.device_count();
        for d in 0..n {
            let dir = format!("{DEV}/neuron{d}");
            assert_eq!(
                files_under(&t, &dir),
                expected_device_files(nc),
                "{name} {dir}"
            );
            // Class links, as sysfs has them.
            assert_eq!(
                t.entry(&format!("/sys/class/neuron_device/neuron{d}")),
                Some(&Node::Link(format!(
                    "../../devices/virtual/neuron_device/neuron{d}"
                )))
            );
        }
        let class = t.list("/sys/class/neuron_device").expect("class dir");
        for a in [
            "node_id_2",
            "node_id_4",
            "server_id_2",
            "server_id_4",
            "ultraserver_mode",
        ] {
            assert!(class.contains(&a.to_string()), "{a} in {class:?}");
        }
        assert_eq!(class.len(), n + 5);
        assert_eq!(
            t.read("/sys/module/neuron/version").as_deref(),
            Some("2.26.5.0\n")
        );
        assert_eq!(
            t.read("/sys/devices/virtual/dmi/id/product_name"),
            Some(format!("{name}\n"))
        );
        let id = t
            .read("/sys/devices/virtual/dmi/id/board_asset_tag")
            .expect("instance id");
        assert!(
            id.starts_with("i-") && id.len() == 20 && id.ends_with('\n'),
            "{id:?}"
        );
        assert_eq!(
            t.list("/sys/devices/virtual/dmi/id").map(|v| v.len()),
            Some(2),
            "only the two EC2 identity files"
        );

        // Formats (`neuron_cdev.c`, `neuron_sysfs_metrics.c`): core_count has no newline.
        assert_eq!(read(&emu, "neuron0/core_count"), nc.to_string());
        assert_eq!(read(&emu, "neuron0/reset"), "1\n");
        assert_eq!(read(&emu, "neuron0/info/notify_delay"), "-1\n");
        let serial = read(&emu, "neuron0/info/serial_number");
        assert!(
            serial.len() == 17 && serial[..16].bytes().all(|b| b.is_ascii_hexdigit()),
            "{serial:?}"
        );
        assert_eq!(serial, read(&emu, "neuron0/info/serial_number"), "stable");
        let a = "neuron0/info/architecture";
        assert_eq!(read(&emu, &format!("{a}/arch_type")), format!("{nd_t}\n"));
        assert_eq!(read(&emu, &format!("{a}/instance_type")), format!("{it}\n"));
        assert_eq!(read(&emu, &format!("{a}/device_name")), format!("{dn}\n"));
        assert_eq!(
            read(&emu, "neuron0/neuron_core1/info/architecture/arch_type"),
            format!("{nc_t}\n")
        );
        let u = read(&emu, "neuron0/stats/power/utilization");
        let f: Vec<&str> = u.trim_end().split(',').collect();
        assert_eq!(f.len(), 5, "{u:?}");
        assert_eq!(f[0], "POWER_STATUS_VALID");
        assert!(f[1].bytes().all(|b| b.is_ascii_digit()));
        for x in &f[2..] {
            let (i, d) = x.split_once('.').expect("x.yy");
            assert!(!i.is_empty() && d.len() == 2, "{u:?}");
        }
        assert_eq!(
            read(&emu, "neuron0/neuron_core0/stats/tensor_engine/pe_cntrs"),
            "xrow_grp,mm_active,wl_active,idle\n0,0,0,0\n1,0,0,0\n2,0,0,0\n3,0,0,0\n"
        );
        for (p, n) in t.entries() {
            let counter = ["/total", "/present", "/peak"]
                .iter()
                .any(|s| p.ends_with(s))
                || p.contains("/stats/hardware/");
            if let (true, Node::File { data, .. }) = (counter, n) {
                assert!(is_count(data), "{p}: {data:?}");
            }
        }
        // Serial numbers differ between devices.
        if n > 1 {
            assert_ne!(serial, read(&emu, "neuron1/info/serial_number"));
        }
    }
}

#[test]
fn presets_link_devices_as_the_driver_and_the_docs_say() {
    // Driver tables (`fw_io_topology`): exact order.
    let trn2 = preset("trn2.48xlarge");
    assert_eq!(trn2.device_count(), 16);
    assert_eq!(read(&trn2, "neuron0/connected_devices"), "12, 1, 3, 4\n");
    assert_eq!(read(&trn2, "neuron15/connected_devices"), "14, 3, 11, 12\n");
    // neuron-ls documentation (trn2): device 0 is connected to "12, 3, 4, 1" — the same set.
    let set = |s: &str| -> BTreeSet<u32> {
        s.trim()
            .split(", ")
            .map(|x| x.parse().expect("id"))
            .collect()
    };
    assert_eq!(
        set(&read(&trn2, "neuron0/connected_devices")),
        set("12, 3, 4, 1")
    );
    let trn1 = preset("trn1.32xlarge");
    assert_eq!(trn1.device_count(), 16);
    assert_eq!(read(&trn1, "neuron0/connected_devices"), "12, 3, 4, 1\n");
    assert_eq!(read(&trn1, "neuron5/connected_devices"), "1, 4, 9, 6\n");
    let inf2 = preset("inf2.48xlarge");
    assert_eq!(inf2.device_count(), 12);
    assert_eq!(read(&inf2, "neuron0/connected_devices"), "11, 1\n");
    assert_eq!(read(&inf2, "neuron11/connected_devices"), "10, 0\n");
    let inf2_24 = preset("inf2.24xlarge");
    assert_eq!(read(&inf2_24, "neuron0/connected_devices"), "1\n");
    assert_eq!(read(&inf2_24, "neuron3/connected_devices"), "2, 4\n");
    for single in ["trn1.2xlarge", "inf2.xlarge"] {
        let e = preset(single);
        assert_eq!(e.device_count(), 1);
        assert_eq!(read(&e, "neuron0/connected_devices"), "\n", "{single}");
    }
    // Every torus node has 4 distinct neighbours, never itself.
    for e in [&trn1, &trn2] {
        for d in 0..16 {
            let s = set(&read(e, &format!("neuron{d}/connected_devices")));
            assert!(s.len() == 4 && !s.contains(&d), "{d}: {s:?}");
        }
    }
    // DEVICE_INFO reports the same links.
    let f = trn2.open(4, OpenOptions::default()).expect("open");
    let mut v = DeviceInfo::new_zeroed();
    ioctl(&f, NEURON_IOCTL_DEVICE_INFO, &mut v).expect("device info");
    assert_eq!(v.connected_device_count, 4);
    assert_eq!(v.connected_devices[..4], [8, 5, 7, 0]);
}

fn open_as(emu: &Emulator, pid: u32) -> EmuFile {
    emu.open(
        0,
        OpenOptions {
            pid,
            write_only: false,
        },
    )
    .expect("open")
}

fn put_u64(p: *mut u8, off: usize, v: u64) {
    for (k, w) in [v as u32, (v >> 32) as u32].into_iter().enumerate() {
        neuron_e2e_tests::call::map_write_u32(p, off + 4 * k, w);
    }
}

#[test]
fn status_counters_come_from_the_datastore_pages_and_survive_release() {
    let emu = preset("trn2.48xlarge");
    let a = open_as(&emu, 500);
    let b = open_as(&emu, 501);
    let ok = "neuron0/neuron_core1/stats/status/success";
    let oob = "neuron0/neuron_core5/stats/status/oob_error";
    let flops = "neuron0/neuron_core1/stats/other_info/flop_count";
    let mut pages = Vec::new();
    for (f, n) in [(&a, 7u64), (&b, 5)] {
        let mut ds = NeuronDsInfo::new_zeroed();
        ioctl(f, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds).expect("acquire");
        let p = f
            .mmap(ds.size as usize, ds.mmap_offset, PROT_RW)
            .expect("map");
        let off = |nc, c| nc_counter_offset(nc, c).expect("slot") as usize;
        put_u64(p, off(1, NcCounter::INFER_COMPLETED), n);
        // NC 5 keeps its counters in the extra-NC section of the page.
        put_u64(p, off(5, NcCounter::OOB), 1);
        put_u64(p, off(1, NcCounter::MAC_COUNT), 1000);
        pages.push((p, ds.size as usize));
    }
    assert_eq!(read(&emu, &format!("{ok}/present")), "12\n");
    assert_eq!(read(&emu, &format!("{ok}/total")), "12\n");
    assert_eq!(read(&emu, &format!("{oob}/present")), "2\n");
    assert_eq!(
        read(&emu, &format!("{flops}/present")),
        "4000\n",
        "2 flops per MAC"
    );
    // Process a releases its entry: its counts leave `present` and stay in `total`.
    let mut ds = NeuronDsInfo::new_zeroed();
    ioctl(&a, NEURON_IOCTL_RELEASE_NEURON_DS, &mut ds).expect("release");
    assert_eq!(read(&emu, &format!("{ok}/present")), "5\n");
    assert_eq!(read(&emu, &format!("{ok}/total")), "12\n");
    // Process b exits: everything is history.
    let (pb, nb) = pages.pop().expect("b page");
    b.munmap(pb, nb).expect("unmap");
    drop(b);
    assert_eq!(read(&emu, &format!("{ok}/present")), "0\n");
    assert_eq!(read(&emu, &format!("{ok}/total")), "12\n");
    assert_eq!(read(&emu, &format!("{oob}/total")), "2\n");
    assert_eq!(read(&emu, &format!("{flops}/total")), "4000\n");
    let (pa, na) = pages.pop().expect("a page");
    a.munmap(pa, na).expect("unmap");
}

fn alloc(f: &dyn DeviceFile, size: u64, host: bool, nc: u32, t: MemType) -> u64 {
    let mut h = 0u64;
    let mut a = MemAllocV2MemType {
        size,
        host_memory: host as u32,
        nc_id: nc,
        mem_type: t.0,
        mem_handle: &mut h as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    ioctl(f, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut a).expect("alloc");
    h
}

#[test]
fn memory_usage_follows_allocations_by_category() {
    let emu = preset("trn2.48xlarge");
    let f = emu.open(0, OpenOptions::default()).expect("open");
    let base = "neuron0/neuron_core1/stats/memory_usage/device_mem";
    let dm = |rel: &str| read(&emu, &format!("{base}/{rel}"));
    let h1 = alloc(&f, 1 << 20, false, 1, MemType::TENSORS_DEVICE);
    let h2 = alloc(&f, 3 << 20, false, 1, MemType::CONSTANTS_DEVICE);
    let h3 = alloc(&f, 8192, true, 1, MemType::CONSTANTS_HOST);
    let _h4 = alloc(&f, 4096, false, 1, MemType(77));
    assert_eq!(dm("tensors/present"), "1048576\n");
    assert_eq!(dm("constants/present"), "3145728\n");
    assert_eq!(dm("uncategorized/present"), "4096\n", "unknown type");
    assert_eq!(dm("present"), format!("{}\n", (4 << 20) + 4096));
    assert_eq!(
        read(
            &emu,
            "neuron0/stats/memory_usage/host_mem/constants/present"
        ),
        "8192\n"
    );
    assert_eq!(
        read(
            &emu,
            "neuron0/neuron_core1/stats/memory_usage/host_mem/present"
        ),
        "8192\n"
    );
    assert_eq!(
        read(
            &emu,
            "neuron0/neuron_core0/stats/memory_usage/device_mem/tensors/present"
        ),
        "0\n",
        "another core's"
    );
    for h in [h1, h3] {
        let mut a = MemFree { mem_handle: h };
        ioctl(&f, NEURON_IOCTL_MEM_FREE, &mut a).expect("free");
    }
    assert_eq!(dm("tensors/present"), "0\n");
    assert_eq!(dm("tensors/peak"), "1048576\n");
    assert_eq!(dm("tensors/total"), "1048576\n");
    let h5 = alloc(&f, 2 << 20, false, 1, MemType::TENSORS_DEVICE);
    assert_eq!(dm("tensors/present"), "2097152\n");
    assert_eq!(dm("tensors/peak"), "2097152\n");
    assert_eq!(
        dm("tensors/total"),
        "3145728\n",
        "every byte ever allocated"
    );
    assert_eq!(
        read(
            &emu,
            "neuron0/stats/memory_usage/host_mem/constants/present"
        ),
        "0\n"
    );
    let _ = (h2, h5);
}

#[test]
fn resets_are_counted_per_core_and_a_sysfs_reset_needs_a_closed_node() {
    let emu = preset("trn1.2xlarge");
    let f = emu.open(0, OpenOptions::default()).expect("open");
    let mut r = DeviceReset {
        nc_map: 1 << 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(&f, NEURON_IOCTL_NC_RESET, &mut r).expect("reset");
    let req = |nc: u32| {
        read(
            &emu,
            &format!("neuron0/neuron_core{nc}/stats/other_info/reset_req_count/total"),
        )
    };
    assert_eq!((req(0), req(1)), ("0\n".into(), "1\n".into()));
    let p = format!("{DEV}/neuron0/reset");
    assert_eq!(emu.write_sysfs(&p, b"1\n"), Err(Errno::EBUSY));
    assert_eq!(
        sysfs::write(&emu, &format!("{DEV}/neuron0/core_count"), b"1"),
        Err(Errno::EACCES)
    );
    drop(f);
    assert_eq!(
        sysfs::write(&emu, "/sys/class/neuron_device/neuron0/reset", b"1\n"),
        Ok(2)
    );
    assert_eq!((req(0), req(1)), ("1\n".into(), "2\n".into()));
    assert_eq!(emu.sysfs().read(&p).as_deref(), Some("1\n"), "READY again");
    assert_eq!(
        read(
            &emu,
            "neuron0/neuron_core0/stats/other_info/reset_fail_count/total"
        ),
        "0\n"
    );
}

#[test]
fn ecc_counters_follow_an_injected_hbm_error() {
    use neuron_faults::inject::Injector;
    use neuron_faults::plan::{parse, Limits};
    let limits = Limits::for_arch(neuron_abi::Arch::V3Trn2, 1);
    for (extra, unrep, rep) in [("", "1\n", "0\n"), ("repairable = true\n", "0\n", "1\n")] {
        let plan = format!(
            "[[fault]]\nid = \"h\"\neffect = \"hbm-ue\"\naddress = [0x1000000, 0x1000040]\n{extra}at-ns = 1\n"
        );
        let p = parse(&plan, &limits).unwrap_or_else(|e| panic!("{e}"));
        let s = setup(Duration::from_secs(10));
        let hw = "neuron0/stats/hardware";
        assert_eq!(read(&s.emu, &format!("{hw}/mem_ecc_uncorrected")), "0\n");
        assert!(s.emu.set_hooks(
            0,
            Some(Box::new(Injector::new(p.sample_all(&limits, 0).remove(0))))
        ));
        let neff = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("mlp.neff");
        let mut m = s.rt.load(&neff, 0).expect("load");
        let infos: Vec<_> = m.inputs().cloned().collect();
        let x = builtin_input(
            infos[0].dtype,
            (infos[0].size as usize) / infos[0].dtype.size(),
            0,
        );
        assert!(m
            .execute(&[(infos[0].name.as_str(), x.as_slice())])
            .is_err());
        assert_eq!(read(&s.emu, &format!("{hw}/mem_ecc_uncorrected")), unrep);
        assert_eq!(
            read(&s.emu, &format!("{hw}/mem_ecc_repairable_uncorrected")),
            rep
        );
        assert_eq!(read(&s.emu, &format!("{hw}/sram_ecc_uncorrected")), "0\n");
        s.emu.set_hooks(0, None);
    }
}

#[test]
fn the_tree_materialises_and_refreshes_in_place() {
    let emu = preset("inf2.48xlarge");
    let root = std::env::temp_dir().join(format!("neuron-emu-sysfs-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    Tree::render(&emu).write_to(&root).expect("write");
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    assert_eq!(
        std::fs::read_link(at("/sys/class/neuron_device/neuron3")).expect("link"),
        std::path::Path::new("../../devices/virtual/neuron_device/neuron3")
    );
    let cd = at("/sys/class/neuron_device/neuron3/connected_devices");
    assert_eq!(std::fs::read_to_string(&cd).expect("read"), "2, 4\n");
    let present = at(&format!(
        "{DEV}/neuron0/neuron_core0/stats/memory_usage/device_mem/tensors/present"
    ));
    assert_eq!(std::fs::read_to_string(&present).expect("read"), "0\n");
    // A stale file goes; a changed value is rewritten.
    let stale = at(&format!("{DEV}/neuron0/stale"));
    std::fs::write(&stale, "x").expect("stale");
    let f = emu.open(0, OpenOptions::default()).expect("open");
    let _h = alloc(&f, 4096, false, 0, MemType::TENSORS_DEVICE);
    Tree::render(&emu).write_to(&root).expect("rewrite");
    assert!(!stale.exists());
    assert_eq!(std::fs::read_to_string(&present).expect("read"), "4096\n");
    let names: Vec<String> = std::fs::read_dir(at(&format!("{DEV}/neuron0")))
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");
    std::fs::remove_dir_all(&root).expect("cleanup");
}
