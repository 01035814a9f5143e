//! What each attribute of the tree shows, from one snapshot of every device (formats as the
//! driver prints them: `neuron_sysfs_metrics.c`, `neuron_cdev.c`, the v2/v3 HALs).

use super::{Tree, CLASS_DIR, DEVICES_DIR, DMI_FILES, DRIVER_VERSION, MODULE_DIR};
use crate::chunks::MemKey;
use crate::drvstate::{ds_live_counters, NcCounters};
use crate::{DevShared, Emulator};
use neuron_abi::arch::Arch;
use neuron_abi::consts::MemType;
use neuron_abi::nds::{NcCounter, STATUS_COUNTERS};
use std::collections::BTreeMap;

/// `neuron_core<M>/stats/memory_usage/device_mem/<name>` and the allocation types counted
/// there (the driver's category table; CONTIGUOUS_SCRATCHPAD is placed with the shared
/// scratchpad, inferred).
pub const DEVICE_MEM_CATEGORIES: [(&str, &[MemType]); 11] = [
    ("model_code", &[MemType::CODE_DEVICE]),
    ("tensors", &[MemType::TENSORS_DEVICE]),
    ("constants", &[MemType::CONSTANTS_DEVICE]),
    (
        "model_shared_scratchpad",
        &[
            MemType::SCRATCHPAD_DEVICE,
            MemType::CONTIGUOUS_SCRATCHPAD_DEVICE,
        ],
    ),
    ("runtime_memory", &[MemType::MISC_DEVICE]),
    ("driver_memory", &[MemType::NCDEV_DEVICE]),
    ("collectives", &[MemType::COLLECTIVES_DEVICE]),
    (
        "nonshared_scratchpad",
        &[MemType::SCRATCHPAD_NONSHARED_DEVICE],
    ),
    ("notifications", &[MemType::NOTIFICATION_DEVICE]),
    ("dma_rings", &[MemType::DMA_RINGS_DEVICE]),
    ("uncategorized", &[MemType::UNKNOWN_DEVICE]),
];

/// `neuron<N>/stats/memory_usage/host_mem/<name>` and the allocation types counted there.
pub const HOST_MEM_CATEGORIES: [(&str, &[MemType]); 8] = [
    ("dma_buffers", &[MemType::CODE_HOST]),
    ("tensors", &[MemType::TENSORS_HOST]),
    ("constants", &[MemType::CONSTANTS_HOST]),
    ("application_memory", &[MemType::MISC_HOST]),
    ("driver_memory", &[MemType::NCDEV_HOST]),
    ("notifications", &[MemType::NOTIFICATION_HOST]),
    ("dma_rings", &[MemType::DMA_RINGS_HOST]),
    ("uncategorized", &[MemType::UNKNOWN_HOST]),
];

/// The category an allocation of `mem_type` on side `host` counts under (a type of the other
/// side or an unknown value: the side's "uncategorized", as the driver folds unknown types).
pub fn category(host: bool, mem_type: u32) -> &'static str {
    let table: &[(&str, &[MemType])] = if host {
        &HOST_MEM_CATEGORIES
    } else {
        &DEVICE_MEM_CATEGORIES
    };
    table
        .iter()
        .find(|(_, types)| types.iter().any(|t| t.0 == mem_type))
        .map_or("uncategorized", |(name, _)| name)
}

/// PE-array row groups `pe_cntrs` reports (`pe_row_grp_count`, 4 on v2 and v3).
const PE_ROW_GROUPS: u32 = 4;

type Mem = crate::chunks::MemCounter;

/// Everything the tree shows of one device, taken under its lock.
struct Snapshot {
    index: usize,
    arch: Arch,
    state: u32,
    ecc: neuron_devmodel::ecc::EccCounters,
    mem: BTreeMap<MemKey, Mem>,
    live: Vec<NcCounters>,
    released: Vec<NcCounters>,
    reset_req: Vec<u64>,
    reset_fail: Vec<u64>,
}

impl Snapshot {
    fn mem_at(&self, host: bool, category: Option<&'static str>, nc: Option<u32>) -> Mem {
        let k = MemKey { host, category, nc };
        self.mem.get(&k).copied().unwrap_or_default()
    }
}

fn snapshot(sh: &DevShared) -> Snapshot {
    let mut g = sh.lock();
    Snapshot {
        index: sh.index,
        arch: sh.arch,
        // Resets complete at once: the device is READY whenever it can be read.
        state: 1,
        ecc: g.dev.ecc(),
        mem: g.chunks.usage().clone(),
        live: ds_live_counters(&mut g),
        released: g.drv.ds_released.clone(),
        reset_req: g.drv.reset_req.clone(),
        reset_fail: g.drv.reset_fail.clone(),
    }
}

fn mem_files(t: &mut Tree, dir: &str, m: Mem) {
    t.writable(&format!("{dir}/total"), format!("{}\n", m.total));
    t.writable(&format!("{dir}/present"), format!("{}\n", m.present));
    t.writable(&format!("{dir}/peak"), format!("{}\n", m.peak));
}

fn counter_files(t: &mut Tree, dir: &str, present: u64, total: u64) {
    t.writable(&format!("{dir}/total"), format!("{total}\n"));
    t.writable(&format!("{dir}/present"), format!("{present}\n"));
}

/// The wall-clock second the power sample stands for (the driver aggregates per minute).
fn power_epoch() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now - now % 60
}

fn device(t: &mut Tree, emu: &Emulator, s: &Snapshot) {
    let d = format!("{DEVICES_DIR}/neuron{}", s.index);
    let inst = emu.instance();
    let nc_count = s.arch.nc_count();
    // neuron_cdev.c: core_count has no newline; connected_devices is "a, b, c\n".
    t.file(&format!("{d}/core_count"), nc_count.to_string());
    let links: Vec<String> = inst
        .connected(s.index)
        .iter()
        .map(|x| x.to_string())
        .collect();
    t.file(
        &format!("{d}/connected_devices"),
        format!("{}\n", links.join(", ")),
    );
    t.writable(&format!("{d}/reset"), format!("{}\n", s.state));
    t.file(&format!("{d}/dev"), format!("240:{}\n", s.index));
    t.file(
        &format!("{d}/uevent"),
        format!("MAJOR=240\nMINOR={0}\nDEVNAME=neuron{0}\n", s.index),
    );
    t.link(&format!("{d}/subsystem"), "../../../../class/neuron_device");

    t.writable(&format!("{d}/info/notify_delay"), "-1\n");
    t.writable(
        &format!("{d}/info/serial_number"),
        format!("{:016x}\n", inst.serial_number(s.index)),
    );
    let a = format!("{d}/info/architecture");
    t.writable(
        &format!("{a}/arch_type"),
        format!("ND{}\n", s.arch.arch_type()),
    );
    t.writable(
        &format!("{a}/instance_type"),
        format!("{}\n", s.arch.instance_type()),
    );
    t.writable(
        &format!("{a}/device_name"),
        format!("{}\n", s.arch.device_name()),
    );

    // v2 and v3 HALs both add the hardware node (v1 has none; not emulated).
    let hw = format!("{d}/stats/hardware");
    t.writable(
        &format!("{hw}/sram_ecc_uncorrected"),
        format!("{}\n", s.ecc.sysfs_sram_ecc_uncorrected()),
    );
    t.writable(
        &format!("{hw}/mem_ecc_uncorrected"),
        format!("{}\n", s.ecc.sysfs_mem_ecc_uncorrected()),
    );
    // v2 has no repair state: its repairable count is always 0.
    let repairable = match s.arch {
        Arch::V3Trn2 => s.ecc.sysfs_mem_ecc_repairable_uncorrected(),
        Arch::V2Trn1 | Arch::V2Inf2 => 0,
    };
    t.writable(
        &format!("{hw}/mem_ecc_repairable_uncorrected"),
        format!("{repairable}\n"),
    );
    t.writable(
        &format!("{d}/stats/power/utilization"),
        format!("POWER_STATUS_VALID,{},0.00,0.00,0.00\n", power_epoch()),
    );
    for (name, _) in HOST_MEM_CATEGORIES {
        let m = s.mem_at(true, Some(name), None);
        mem_files(t, &format!("{d}/stats/memory_usage/host_mem/{name}"), m);
    }

    for nc in 0..nc_count {
        let c = format!("{d}/neuron_core{nc}");
        t.writable(
            &format!("{c}/info/architecture/arch_type"),
            format!("NC{}\n", s.arch.nc_arch_type()),
        );
        let live = s.live.get(nc as usize);
        let gone = s.released.get(nc as usize);
        let ds = |id: NcCounter| {
            let at = |v: Option<&NcCounters>| v.and_then(|a| a.get(id.0 as usize)).copied();
            let p = at(live).unwrap_or(0);
            (p, p.wrapping_add(at(gone).unwrap_or(0)))
        };
        for (name, id) in STATUS_COUNTERS {
            let (p, tot) = ds(id);
            counter_files(t, &format!("{c}/stats/status/{name}"), p, tot);
        }
        let mu = format!("{c}/stats/memory_usage");
        mem_files(t, &format!("{mu}/host_mem"), s.mem_at(true, None, Some(nc)));
        mem_files(
            t,
            &format!("{mu}/device_mem"),
            s.mem_at(false, None, Some(nc)),
        );
        for (name, _) in DEVICE_MEM_CATEGORIES {
            let m = s.mem_at(false, Some(name), Some(nc));
            mem_files(t, &format!("{mu}/device_mem/{name}"), m);
        }
        let oi = format!("{c}/stats/other_info");
        let (p, tot) = ds(NcCounter::MODEL_LOAD_COUNT);
        counter_files(t, &format!("{oi}/model_load_count"), p, tot);
        let (p, tot) = ds(NcCounter::INFERENCE_COUNT);
        counter_files(t, &format!("{oi}/inference_count"), p, tot);
        // One MAC is two floating-point operations: the driver doubles the count.
        let (p, tot) = ds(NcCounter::MAC_COUNT);
        counter_files(
            t,
            &format!("{oi}/flop_count"),
            p.wrapping_mul(2),
            tot.wrapping_mul(2),
        );
        let (p, tot) = ds(NcCounter::TIME_IN_USE);
        counter_files(t, &format!("{oi}/nc_time_in_use"), p, tot);
        let n = s.reset_req.get(nc as usize).copied().unwrap_or(0);
        counter_files(t, &format!("{oi}/reset_req_count"), n, n);
        let n = s.reset_fail.get(nc as usize).copied().unwrap_or(0);
        counter_files(t, &format!("{oi}/reset_fail_count"), n, n);
        // PE-array activity: no cycle counters in the model, every row group idle-free zero.
        let mut pe = String::from("xrow_grp,mm_active,wl_active,idle\n");
        for r in 0..PE_ROW_GROUPS {
            pe.push_str(&format!("{r},0,0,0\n"));
        }
        t.writable(&format!("{c}/stats/tensor_engine/pe_cntrs"), pe);
    }

    t.link(
        &format!("{CLASS_DIR}/neuron{}", s.index),
        &format!("../../devices/virtual/neuron_device/neuron{}", s.index),
    );
}

/// The tree, with only device `only`'s directory when given (the rest is unchanged).
pub(super) fn render(emu: &Emulator, only: Option<usize>) -> Tree {
    let mut t = Tree::default();
    let snaps: Vec<Snapshot> = emu
        .devices
        .iter()
        .filter(|d| only.is_none_or(|i| i == d.index))
        .map(|d| snapshot(d))
        .collect();
    for s in &snaps {
        device(&mut t, emu, s);
    }
    // Class attributes: on a standalone (not UltraServer) v3 node the election has no result;
    // the v2 HAL has no show function, so the files read empty.
    let v3 = emu.arch() == Some(Arch::V3Trn2);
    for (name, v3_value) in [
        ("node_id_2", "-1\n"),
        ("node_id_4", "-1\n"),
        ("server_id_2", "0000000000000000\n"),
        ("server_id_4", "0000000000000000\n"),
        ("ultraserver_mode", "0\n"),
    ] {
        t.file(
            &format!("{CLASS_DIR}/{name}"),
            if v3 { v3_value } else { "" },
        );
    }
    if emu.devices.is_empty() {
        t.insert(CLASS_DIR, super::Node::Dir);
        t.insert(DEVICES_DIR, super::Node::Dir);
    }
    t.file(
        &format!("{MODULE_DIR}/version"),
        format!("{DRIVER_VERSION}\n"),
    );
    let inst = emu.instance();
    if let Some(name) = inst.name {
        t.file(DMI_FILES[0], format!("{name}\n"));
        t.file(DMI_FILES[1], format!("{}\n", inst.instance_id));
    }
    t
}
