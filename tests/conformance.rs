//! ABI conformance: one generic test body over `&dyn DeviceFile` (any implementation of the
//! seam: the emulator's in-process file today, a real `/dev/neuronN` or the preload shim
//! later), plus lifecycle tests that need the emulator's process identities.

use neuron_abi::arch::Arch;
use neuron_abi::consts::{
    MemType, CINIT_STATE_COMPLETED, CINIT_STATE_STARTED, MMAP_BLOCK_TPB, MMAP_RESOURCE_SBUF,
    MMAP_RESOURCE_SEMAPHORE, POD_STATE_SINGLE_NODE,
};
use neuron_abi::device::PROT_RW;
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::udma::{UdmaDesc, DESC_FIRST, DESC_LAST, META_CTRL_COPY};
use neuron_abi::{DeviceFile, Errno};
use neuron_e2e_tests::call::{ioctl, ioctl_raw, map_read_u32, map_write_u32};
use neuron_emulator::{Emulator, OpenOptions};
use std::time::{Duration, Instant};
use zerocopy::FromZeros;

fn alloc(dev: &dyn DeviceFile, size: u64, host: bool) -> Result<(u64, MemGetExtendedInfo), Errno> {
    let mut h = 0u64;
    let mut a = MemAllocV2MemType {
        size,
        host_memory: host as u32,
        mem_type: MemType::TENSORS_DEVICE.0,
        mem_handle: &mut h as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut a)?;
    let mut i = MemGetExtendedInfo {
        mem_handle: h,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut i)?;
    Ok((h, i))
}

fn buf_copy(
    dev: &dyn DeviceFile,
    h: u64,
    off: u64,
    buf: &mut [u8],
    to_dev: bool,
) -> Result<i32, Errno> {
    let mut a = MemBufCopy64 {
        mem_handle: h,
        buffer: buf.as_mut_ptr() as u64,
        size: buf.len() as u64,
        offset: off,
        copy_to_mem_handle: to_dev as u32,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_BUF_COPY64, &mut a)
}

fn sem(dev: &dyn DeviceFile, cmd: u32, nc: u32, idx: u32, v: u32) -> Result<u32, Errno> {
    let mut a = Semaphore {
        nc_id: nc,
        semaphore_index: idx,
        value: v,
    };
    ioctl(dev, cmd, &mut a).map(|_| a.value)
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// A failed copy from/to user memory: the emulator answers EFAULT; the real driver often returns
/// the positive `copy_*_user` residue instead (`driver-abi.md` §2.1).
fn faulted(r: Result<i32, Errno>) -> bool {
    matches!(r, Err(Errno::EFAULT)) || matches!(r, Ok(n) if n > 0)
}

/// The generic body: command values, struct sizes, results and errnos.
fn conformance(dev: &dyn DeviceFile, arch: Arch) {
    conformance_core(dev, arch);
    conformance_more(dev, arch);
}

fn conformance_core(dev: &dyn DeviceFile, arch: Arch) {
    // Device info.
    let mut bi = DeviceBasicInfo::new_zeroed();
    ioctl(dev, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut bi).expect("basic info");
    assert_eq!(bi.architecture, arch.architecture());
    let mut cv = CompatibleVersion::new_zeroed();
    ioctl(dev, NEURON_IOCTL_COMPATIBLE_VERSION, &mut cv).expect("compat");
    assert_eq!((cv.min, cv.max), arch.compat_versions());

    // Unknown values, null and bad pointers.
    assert_eq!(ioctl_raw(dev, 0xdead_beef, 0), Err(Errno::EINVAL));
    assert_eq!(ioctl_raw(dev, 0x8008_4eff, 0), Err(Errno::EINVAL));
    assert!(faulted(ioctl_raw(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, 0)));
    assert!(faulted(ioctl_raw(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, 16)));
    assert_eq!(
        ioctl_raw(dev, NEURON_IOCTL_DRIVER_INFO_SET, 0),
        Err(Errno::ENOTSUPP)
    );
    assert_eq!(
        ioctl_raw(dev, NEURON_IOCTL_DMA_QUIESCE_QUEUES, 0),
        Err(Errno::ENOIOCTLCMD)
    );

    // Memory: allocation rules and errnos.
    let (h, info) = alloc(dev, 1, false).expect("alloc");
    assert_eq!(info.size, 4096, "sizes round up to 4 KiB");
    assert_eq!(info.host_memory, 0);
    let mut bad = MemAllocV2MemType {
        size: 4096,
        nc_id: arch.nc_count(),
        mem_handle: 8,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut bad),
        Err(Errno::EINVAL),
        "nc out of range"
    );
    let mut out = 0u64;
    let mut bad = MemAllocV2MemType {
        size: 4096,
        dram_channel: arch.hbm_count(),
        mem_handle: &mut out as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut bad),
        Err(Errno::EINVAL),
        "HBM out of range"
    );
    let mut bad = MemAllocV2MemType {
        size: 4096,
        host_memory: 1,
        align: 4096,
        mem_handle: &mut out as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut bad),
        Err(Errno::EINVAL),
        "align on host memory"
    );
    let mut bad = MemAllocV2MemType {
        size: 4096,
        mem_handle: 0,
        ..FromZeros::new_zeroed()
    };
    assert!(
        faulted(ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut bad)),
        "null handle pointer"
    );
    let mut xi = MemGetExtendedInfo {
        mem_handle: 999_999,
        ..FromZeros::new_zeroed()
    };
    let r = ioctl(dev, NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut xi);
    // The driver returns a *positive* EINVAL here (`driver-abi.md` §2.1).
    assert!(r == Err(Errno::EINVAL) || r == Ok(22), "bad handle: {r:?}");
    let mut data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    buf_copy(dev, h, 0, &mut data, true).expect("copy in");
    let mut back = vec![0u8; 4096];
    buf_copy(dev, h, 0, &mut back, false).expect("copy out");
    assert_eq!(back, data);
    assert_eq!(
        buf_copy(dev, h, 1, &mut back, false),
        Err(Errno::EINVAL),
        "beyond the chunk"
    );
    let mut bad = MemBufCopy64 {
        mem_handle: h,
        buffer: 16,
        size: 64,
        copy_to_mem_handle: 1,
        ..FromZeros::new_zeroed()
    };
    assert!(
        faulted(ioctl(dev, NEURON_IOCTL_MEM_BUF_COPY64, &mut bad)),
        "bad buffer pointer"
    );
    // Device memory maps whole chunks, coherently with the ioctls.
    assert_eq!(
        dev.mmap(8192, info.pa, PROT_RW),
        Err(Errno::EINVAL),
        "wrong length"
    );
    let dp = dev.mmap(4096, info.pa, PROT_RW).expect("mmap device chunk");
    assert_eq!(map_read_u32(dp, 0), u32::from_le_bytes([0, 7, 14, 21]));
    map_write_u32(dp, 8, 0x1234_5678);
    let mut w8 = [0u8; 4];
    buf_copy(dev, h, 8, &mut w8, false).expect("read through the ioctl");
    assert_eq!(u32::from_le_bytes(w8), 0x1234_5678);
    buf_copy(dev, h, 8, &mut data[8..12], false).expect("keep data in sync");
    let mut vp = GetVaPlacement {
        va: dp as u64 + 100,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_GET_VA_PLACEMENT, &mut vp).expect("va placement");
    assert_eq!(vp.hbm_index, 0);
    dev.munmap(dp, 4096).expect("unmap device chunk");

    // Host chunk: map it, write through the mapping, read back with MEM_BUF_COPY64.
    let (hh, hinfo) = alloc(dev, 8192, true).expect("host alloc");
    assert_eq!(hinfo.host_memory, 1);
    assert_ne!(
        hinfo.pa & arch.host_base_bit(),
        0,
        "host PAs carry the host bit"
    );
    assert_eq!(
        dev.mmap(4096, hinfo.mmap_offset, PROT_RW),
        Err(Errno::EINVAL),
        "partial mappings are refused"
    );
    let p = dev
        .mmap(8192, hinfo.mmap_offset, PROT_RW)
        .expect("mmap host chunk");
    map_write_u32(p, 100 * 4, 0xfeed_f00d);
    let mut w = [0u8; 4];
    buf_copy(dev, hh, 400, &mut w, false).expect("read back");
    assert_eq!(u32::from_le_bytes(w), 0xfeed_f00d);

    // A device-side DMA: host chunk -> device chunk through a queue of real descriptors.
    let (rt, rti) = alloc(dev, 32 * 16, true).expect("tx ring");
    let (rr, rri) = alloc(dev, 32 * 16, true).expect("rx ring");
    let mut txd =
        [UdmaDesc::tx(hinfo.pa, 4096, DESC_FIRST | DESC_LAST).with_meta_ctrl(META_CTRL_COPY)];
    let mut rxd = [UdmaDesc::rx(info.pa, 4096, 0)];
    let _ = (rti, rri);
    for (ring, d, ty) in [
        (rt, txd.as_mut_slice(), 0u32),
        (rr, rxd.as_mut_slice(), 1u32),
    ] {
        let mut a = DmaCopyDescriptors64 {
            mem_handle: ring,
            buffer: d.as_mut_ptr() as u64,
            num_descs: 1,
            queue_type: ty,
            ..FromZeros::new_zeroed()
        };
        ioctl(dev, NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &mut a).expect("copy descriptors");
    }
    let mut bad_desc = [UdmaDesc::tx(arch.host_base_bit() | 0x5000, 16, 0)];
    let mut a = DmaCopyDescriptors64 {
        mem_handle: rt,
        buffer: bad_desc.as_mut_ptr() as u64,
        num_descs: 1,
        queue_type: 0,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &mut a),
        Err(Errno::EINVAL),
        "host address outside every chunk"
    );
    let mut a = DmaCopyDescriptors64 {
        mem_handle: rt,
        buffer: txd.as_mut_ptr() as u64,
        num_descs: 1,
        queue_type: 2,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &mut a),
        Err(Errno::EINVAL),
        "queue type"
    );
    let qi = |eng, qid, n, rxc| DmaQueueInit {
        eng_id: eng,
        qid,
        tx_desc_count: n,
        rx_desc_count: n,
        tx_handle: rt,
        rx_handle: rr,
        rxc_handle: rxc,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(
            dev,
            NEURON_IOCTL_DMA_QUEUE_INIT,
            &mut qi(arch.dma_engines(), 0, 32, 0)
        ),
        Err(Errno::EINVAL),
        "engine out of range"
    );
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_INIT, &mut qi(3, 16, 32, 0)),
        Err(Errno::EINVAL),
        "queue out of range"
    );
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_INIT, &mut qi(3, 0, 20, 0)),
        Err(Errno::EINVAL),
        "ring size not a multiple of 16"
    );
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_INIT, &mut qi(3, 0, 32, rr)),
        Err(Errno::EINVAL),
        "completion rings unsupported"
    );
    let mut cs = DmaQueueCopyStart {
        eng_id: 3,
        qid: 1,
        tx_desc_count: 1,
        rx_desc_count: 1,
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_COPY_START, &mut cs),
        Err(Errno::EINVAL),
        "queue not initialised"
    );
    ioctl(dev, NEURON_IOCTL_DMA_QUEUE_INIT, &mut qi(3, 1, 32, 0)).expect("queue init");
    let mut cs0 = DmaQueueCopyStart {
        eng_id: 3,
        qid: 1,
        tx_desc_count: 1,
        rx_desc_count: 0,
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_COPY_START, &mut cs0),
        Err(Errno::EINVAL),
        "rx count 0"
    );
    ioctl(dev, NEURON_IOCTL_DMA_QUEUE_COPY_START, &mut cs).expect("doorbell");
    let mut txs = DmaQueueState::new_zeroed();
    let mut rxs = DmaQueueState::new_zeroed();
    let done = wait_until(|| {
        let mut g = DmaQueueGetState {
            eng_id: 3,
            qid: 1,
            tx: &mut txs as *mut _ as u64,
            rx: &mut rxs as *mut _ as u64,
        };
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_GET_STATE, &mut g).is_ok() && rxs.head_pointer == 1
    });
    assert!(done, "the queue's head reaches the tail");
    let mut back_desc = [UdmaDesc::new_zeroed(); 1];
    let mut co = DmaDescriptorCopyout {
        eng_id: 3,
        qid: 1,
        r#type: 0,
        start_index: 0,
        count: 1,
        buffer: back_desc.as_mut_ptr() as u64,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &mut co).expect("copyout");
    assert_eq!(back_desc[0], txd[0], "the TX ring holds what was copied in");
    co.count = 0;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &mut co),
        Err(Errno::EINVAL)
    );
    co.count = 33;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &mut co),
        Err(Errno(27)),
        "EFBIG past the ring"
    );
    assert_eq!(txs.sw_status, 2);
    let mut moved = vec![0u8; 4096];
    buf_copy(dev, h, 0, &mut moved, false).expect("read DMA result");
    assert_eq!(&moved[400..404], &0xfeed_f00du32.to_le_bytes());
    dev.munmap(p, 8192).expect("munmap");
    assert_eq!(dev.munmap(p, 8192), Err(Errno::EINVAL), "double munmap");

    // Semaphores through ioctls and through the mapped register page.
    assert_eq!(sem(dev, NEURON_IOCTL_SEMAPHORE_WRITE, 0, 3, 5), Ok(5));
    sem(dev, NEURON_IOCTL_SEMAPHORE_INCREMENT, 0, 3, 2).expect("inc");
    sem(dev, NEURON_IOCTL_SEMAPHORE_DECREMENT, 0, 3, 1).expect("dec");
    assert_eq!(sem(dev, NEURON_IOCTL_SEMAPHORE_READ, 0, 3, 0), Ok(6));
    assert_eq!(
        sem(dev, NEURON_IOCTL_SEMAPHORE_READ, arch.nc_count(), 3, 0),
        Err(Errno::E2BIG)
    );
    assert_eq!(
        sem(dev, NEURON_IOCTL_SEMAPHORE_READ, 0, 256, 0),
        Err(Errno::EINVAL)
    );
    let mut ev = Event {
        nc_id: 0,
        event_index: 9,
        value: 1,
    };
    ioctl(dev, NEURON_IOCTL_EVENT_SET, &mut ev).expect("event set");
    let mut ev = Event {
        nc_id: 0,
        event_index: 9,
        value: 0,
    };
    ioctl(dev, NEURON_IOCTL_EVENT_GET, &mut ev).expect("event get");
    assert_eq!(ev.value, 1);
    let mut ri = ResourceMmapInfo {
        block: MMAP_BLOCK_TPB,
        block_id: 0,
        resource: MMAP_RESOURCE_SEMAPHORE,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_RESOURCE_MMAP_INFO, &mut ri).expect("resource info");
    assert_eq!(
        (ri.offset, ri.size),
        (arch.tpb_semaphore_mmap_offset(0).expect("nc0"), 0x2000)
    );
    let page = dev
        .mmap(0x2000, ri.offset, PROT_RW)
        .expect("map semaphore page");
    assert_eq!(map_read_u32(page, 0x1000 + 4 * 3), 6, "value register");
    assert_eq!(map_read_u32(page, 4 * 9), 1, "event register");
    map_write_u32(page, 0x1800 + 4 * 3, 4);
    assert!(
        wait_until(|| sem(dev, NEURON_IOCTL_SEMAPHORE_READ, 0, 3, 0) == Ok(10)),
        "a store to the increment register adds"
    );
    map_write_u32(page, 0x1400 + 4 * 3, 42);
    assert!(
        wait_until(|| map_read_u32(page, 0x1000 + 4 * 3) == 42),
        "a store to the set register sets"
    );
    dev.munmap(page, 0x2000).expect("unmap page");

    // Notification queues: argument checks.
    let mut nq = NotificationsInitV2 {
        nq_dev_id: 0,
        nq_type: 1,
        engine_index: 0,
        size: 1000,
        on_host_memory: 1,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut nq),
        Err(Errno::EINVAL),
        "size not a power of two"
    );
    nq.size = 4096;
    nq.nq_type = 6;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut nq),
        Err(Errno::EINVAL),
        "queue id 96 out of range"
    );
    nq.nq_type = 1;
    ioctl(dev, NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut nq).expect("nq init");
    let m = dev.mmap(4096, nq.mmap_offset, PROT_RW).expect("map nq");
    dev.munmap(m, 4096).expect("unmap nq");

    // Freeing.
    let mut f = MemFree { mem_handle: h };
    ioctl(dev, NEURON_IOCTL_MEM_FREE, &mut f).expect("free");
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_FREE, &mut f),
        Err(Errno::EINVAL),
        "double free"
    );
}

/// Read-only or idempotent checks of the remaining commands (safe on a real device too).
fn conformance_more(dev: &dyn DeviceFile, arch: Arch) {
    let mut di = DeviceDriverInfo::new_zeroed();
    ioctl(dev, NEURON_IOCTL_DRIVER_INFO_GET, &mut di).expect("driver info");
    assert_eq!((di.architecture, di.size), (arch.architecture(), 24));
    assert_ne!(di.feature_flags1, 0);
    let mut info = DeviceInfo::new_zeroed();
    ioctl(dev, NEURON_IOCTL_DEVICE_INFO, &mut info).expect("device info");
    assert_eq!(info.architecture, arch.architecture());
    let bar0 = info.bar_address[0];
    assert_ne!(bar0, 0);

    // PCI addresses and device ids.
    let mut bdf = DeviceBdf::new_zeroed();
    ioctl(dev, NEURON_IOCTL_DEVICE_BDF, &mut bdf).expect("bdf");
    let mut ext = DeviceBdfExt::new_zeroed();
    ioctl(dev, NEURON_IOCTL_DEVICE_BDF_EXT, &mut ext).expect("bdf ext");
    assert_eq!(
        (ext.bus_number, ext.slot, ext.func),
        (bdf.bus_number, bdf.slot, bdf.func),
        "nd_index 0 is this fd's own device"
    );
    ext.nd_index = 1000;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DEVICE_BDF_EXT, &mut ext),
        Err(Errno::EINVAL)
    );
    let mut hid = HostDeviceId::new_zeroed();
    ioctl(dev, NEURON_IOCTL_HOST_DEVICE_ID, &mut hid).expect("host device id");
    let mut rid = HostDeviceIdToRidMap::new_zeroed();
    ioctl(dev, NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP, &mut rid).expect("rid map");
    assert!(rid.count > hid.host_device_id);

    // Logical-to-physical core map: v2 has none.
    let mut entries = vec![0u8; 4 + 8 * 16];
    let mut lp = GetLogicalToPhysicalNcMap {
        map: entries.as_mut_ptr() as u64,
        max_map_entries: 16,
        mapping_version: 0,
    };
    if arch.architecture() == 2 {
        assert_eq!(
            ioctl(dev, NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &mut lp),
            Err(Errno::ENOTSUPP)
        );
    } else {
        ioctl(dev, NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &mut lp).expect("nc map");
        let n = u32::from_le_bytes([entries[0], entries[1], entries[2], entries[3]]);
        assert!((1..=16).contains(&n));
        lp.max_map_entries = 129;
        assert_eq!(
            ioctl(dev, NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &mut lp),
            Err(Errno::EINVAL)
        );
    }

    // Pods: a standard instance is a single node.
    let mut pi = PodInfo::new_zeroed();
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_POD_INFO, &mut pi),
        Err(Errno::EINVAL),
        "sz must be 260"
    );
    pi.sz = 260;
    ioctl(dev, NEURON_IOCTL_POD_INFO, &mut pi).expect("pod info");
    let mut ps = PodStatusV2::new_zeroed();
    ps.v1.sz = 276;
    ioctl(dev, NEURON_IOCTL_POD_STATUS_V2, &mut ps).expect("pod status v2");
    let mut ps1 = PodStatus::new_zeroed();
    ps1.sz = 276;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_POD_STATUS, &mut ps1),
        Err(Errno::EINVAL),
        "sz must match the encoded size"
    );
    ps1.sz = 268;
    ioctl(dev, NEURON_IOCTL_POD_STATUS, &mut ps1).expect("pod status");
    if pi.pod_type == 0 {
        assert_eq!(ps1.state, POD_STATE_SINGLE_NODE);
        assert_eq!(ps1.node_id, -1);
    }

    // Processes.
    let mut pid = 0i32;
    ioctl(dev, NEURON_IOCTL_DEVICE_APP_PID, &mut pid).expect("app pid");
    let mut apps = vec![0u8; 16 + 16 * 152];
    apps[0] = 3; // NC lock info + memory usage
    apps[4] = 16; // capacity
    let r = neuron_e2e_tests::call::ioctl_raw(
        dev,
        NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO,
        apps.as_mut_ptr() as usize,
    );
    r.expect("apps info");
    let n = u32::from_le_bytes([apps[8], apps[9], apps[10], apps[11]]) as usize;
    assert!((1..=16).contains(&n));
    let pids: Vec<i32> = (0..n)
        .map(|i| {
            let o = 16 + 152 * i;
            i32::from_le_bytes([apps[o], apps[o + 1], apps[o + 2], apps[o + 3]])
        })
        .collect();
    assert!(pids.contains(&pid), "slot 0's pid is listed");

    // Fixed answers.
    assert_eq!(
        ioctl_raw(dev, NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO, 0),
        Err(Errno::EPERM)
    );
    let mut one = 0u8;
    ioctl(dev, NEURON_IOCTL_DEVICE_RESET_STATUS, &mut one).expect("reset status");
    assert_eq!(one, 1);
    let mut batch = DmaQueueInitBatch::new_zeroed();
    batch.count = 256;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, &mut batch),
        Err(Errno::E2BIG)
    );

    // DMA engine state.
    let mut es = DmaEngState::new_zeroed();
    let mut gs = DmaEngGetState {
        eng_id: 0,
        state: &mut es as *mut _ as u64,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_DMA_ENG_GET_STATE, &mut gs).expect("engine state");
    assert_eq!((es.revision_id, es.max_queues, es.num_queues), (4, 16, 16));

    // Memory reverse lookups, async copies, zero-copy.
    let (h, info) = alloc(dev, 8192, false).expect("alloc");
    let (h2, _) = alloc(dev, 8192, false).expect("alloc");
    let mut mi = MemGetMcMmapInfoV2 {
        pa: info.pa + 5000,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_MC_GET_INFO_V2, &mut mi).expect("mc info v2");
    assert_eq!((mi.mmap_offset, mi.size), (info.pa, 8192));
    assert_ne!(mi.mem_handle, 0);
    let mut m1 = MemGetMcMmapInfo {
        pa: info.pa + 8192 * 1024,
        ..FromZeros::new_zeroed()
    };
    let r = ioctl(dev, NEURON_IOCTL_MEM_MC_GET_INFO, &mut m1);
    assert!(r.is_ok() || r == Err(Errno::ENOMEM));
    let mut src = vec![0x5au8; 8192];
    let mut zc = MemBufCopy64zc {
        mem_handle: h,
        buffer: src.as_mut_ptr() as u64,
        size: 8192,
        offset: 0,
        is_copy_to_device: 1,
        h2t_qid: -1,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_BUF_ZEROCOPY64, &mut zc).expect("zero-copy write");
    let mut handles = Vec::new();
    for _ in 0..3 {
        let mut ca = MemCopyAsync64 {
            src_mem_handle: h,
            dst_mem_handle: h2,
            size: 4096,
            pwait_handle: u32::MAX,
            ..FromZeros::new_zeroed()
        };
        ioctl(dev, NEURON_IOCTL_MEM_COPY_ASYNC64, &mut ca).expect("async copy");
        handles.push(ca.wait_handle);
    }
    assert!(handles.iter().all(|w| *w == 1 || *w == 2));
    assert_ne!(handles[0], handles[1], "handles rotate");
    let mut wt = MemCopyAsyncWait {
        src_mem_handle: h,
        dst_mem_handle: h2,
        pwait_handle: handles[2],
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_COPY_ASYNC_WAIT, &mut wt).expect("wait");
    wt.pwait_handle = 3;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_COPY_ASYNC_WAIT, &mut wt),
        Err(Errno::EINVAL)
    );
    let mut out = vec![0u8; 4096];
    buf_copy(dev, h2, 0, &mut out, false).expect("read copy");
    assert!(out.iter().all(|b| *b == 0x5a));

    // Core init token and model counter.
    let mut ci = CinitSet {
        nc_id: arch.nc_count(),
        state: CINIT_STATE_STARTED,
        new_state: 0,
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_CINIT_SET_STATE, &mut ci),
        Err(Errno::E2BIG)
    );
    let mut msc = NcModelStartedCount {
        nc_id: 0,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_NC_MODEL_STARTED_COUNT, &mut msc).expect("model count");
    assert_eq!(msc.started_count, 0);

    // CRWL model lock on core 0.
    let uuid = Uuid32 { value: [7; 32] };
    let other = Uuid32 { value: [8; 32] };
    let crwl = |cmd, u: Uuid32, nc| {
        let mut a = Crwl { nc_id: nc, uuid: u };
        ioctl(dev, cmd, &mut a)
    };
    assert_eq!(
        crwl(NEURON_IOCTL_CRWL_WRITER_ENTER, uuid, 8),
        Err(Errno::EINVAL)
    );
    crwl(NEURON_IOCTL_CRWL_WRITER_ENTER, uuid, 0).expect("writer enter");
    crwl(NEURON_IOCTL_CRWL_WRITER_DOWNGRADE, uuid, 0).expect("downgrade");
    crwl(NEURON_IOCTL_CRWL_READER_EXIT, uuid, 0).expect("reader exit");
    assert_eq!(
        crwl(NEURON_IOCTL_CRWL_READER_EXIT, uuid, 0),
        Err(Errno::EINVAL),
        "no readers left"
    );
    assert_eq!(
        crwl(NEURON_IOCTL_CRWL_WRITER_ENTER, uuid, 0),
        Err(Errno::EALREADY),
        "same process, same model: already loaded (lock taken)"
    );
    crwl(NEURON_IOCTL_CRWL_WRITER_DOWNGRADE, uuid, 0).expect("downgrade");
    assert_eq!(
        crwl(NEURON_IOCTL_CRWL_READER_ENTER, other, 0),
        Err(Errno::ENOENT),
        "another model"
    );
    crwl(NEURON_IOCTL_CRWL_READER_ENTER, uuid, 0).expect("reader enter");
    crwl(NEURON_IOCTL_CRWL_READER_EXIT, uuid, 0).expect("reader exit");
    crwl(NEURON_IOCTL_CRWL_READER_EXIT, uuid, 0).expect("reader exit");

    // Extended range marks (512-bit bitmap), relative to this device.
    let mut mx = CrwlNcMapExt {
        nc_count: 1,
        start_nc_index: 0,
        end_nc_index: arch.nc_count() - 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0, &mut mx).expect("mark ext");
    assert_eq!(mx.bitmap.iter().map(|w| w.count_ones()).sum::<u32>(), 1);
    ioctl(dev, NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0, &mut mx).expect("unmark ext");

    // Datastore.
    let mut ds = NeuronDsInfo::new_zeroed();
    ioctl(dev, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds).expect("acquire ds");
    assert_eq!(ds.size, 256 << 10);
    let dsp = dev
        .mmap(256 << 10, ds.mmap_offset, PROT_RW)
        .expect("map ds");
    dev.munmap(dsp, 256 << 10).expect("unmap ds");
    let mut ds2 = NeuronDsInfo {
        pid: 0x3fff_fff0,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds2),
        Err(Errno::ENOENT),
        "no such process's datastore"
    );
    ioctl(dev, NEURON_IOCTL_RELEASE_NEURON_DS, &mut ds).expect("release ds");

    // printk.
    let mut msg = *b"conformance printk\0";
    let mut pk = Printk {
        buffer: msg.as_mut_ptr() as u64,
        size: msg.len() as u32,
        action: 0,
    };
    ioctl(dev, NEURON_IOCTL_PRINTK, &mut pk).expect("printk");
    pk.size -= 1;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_PRINTK, &mut pk),
        Err(Errno::EBADMSG)
    );
    pk.size = 513;
    assert_eq!(ioctl(dev, NEURON_IOCTL_PRINTK, &mut pk), Err(Errno::EFAULT));

    // Power profile argument checks.
    let mut pp = PowerProfile {
        sz: 4,
        ctrl: 0,
        profile: 0,
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_POWER_PROFILE, &mut pp),
        Err(Errno::ENXIO)
    );
    pp.sz = 8;
    pp.ctrl = 1;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_POWER_PROFILE, &mut pp),
        Err(Errno::ENOTSUPP)
    );

    // BAR access: the semaphore registers of TPB 0 at their BAR0 offsets.
    let tpb0 = arch.tpb_bar0_offset(0).expect("tpb0");
    sem(dev, NEURON_IOCTL_SEMAPHORE_WRITE, 0, 9, 77).expect("sem write");
    let mut addrs = [bar0 + tpb0 + 0x270_1000 + 4 * 9];
    let mut vals = [0u32; 1];
    let mut bar = BarRw {
        bar: 0,
        address: addrs.as_mut_ptr() as u64,
        data: vals.as_mut_ptr() as u64,
        count: 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_BAR_READ, &mut bar).expect("bar read");
    assert_eq!(vals[0], 77);
    addrs[0] = bar0 + tpb0 + 0x270_1400 + 4 * 9;
    vals[0] = 5;
    bar.address = addrs.as_mut_ptr() as u64;
    bar.data = vals.as_mut_ptr() as u64;
    ioctl(dev, NEURON_IOCTL_BAR_WRITE, &mut bar).expect("bar write");
    assert_eq!(sem(dev, NEURON_IOCTL_SEMAPHORE_READ, 0, 9, 0), Ok(5));
    bar.count = 101;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_BAR_READ, &mut bar),
        Err(Errno::EINVAL)
    );
    bar.count = 1;
    bar.bar = 4;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_BAR_READ, &mut bar),
        Err(Errno::EINVAL)
    );
    bar.bar = 0;
    addrs[0] = 0x1000;
    bar.address = addrs.as_mut_ptr() as u64;
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_BAR_READ, &mut bar),
        Err(Errno::EINVAL),
        "outside BAR0"
    );

    // Program-engine destinations outside the whitelist.
    let mut pe = ProgramEngineNc64 {
        nc_id: 0,
        dst: 0xffff_ffff_0000,
        buffer: src.as_mut_ptr() as u64,
        size: 64,
        offset: 0,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_PROGRAM_ENGINE_NC64, &mut pe),
        Err(Errno::ENOMEM)
    );

    // H2T queue reservations.
    let mut hq = H2tDmaAllocQueues {
        sz: 19,
        nc_id: 0,
        copy_queue_cnt: 1,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES, &mut hq),
        Err(Errno::EINVAL)
    );
    hq.sz = 20;
    ioctl(dev, NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES, &mut hq).expect("h2t alloc");
    assert_eq!(hq.copy_queue_bmap.count_ones(), 1);
    assert_eq!(
        hq.copy_queue_bmap & (1 << hq.copy_default_queue),
        0,
        "never the default queue"
    );
    let mut hf = H2tDmaFreeQueues {
        sz: 8,
        nc_id: 0,
        queue_bmap: hq.copy_queue_bmap,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_H2T_DMA_FREE_QUEUES, &mut hf).expect("h2t free");

    for hh in [h, h2] {
        let mut f = MemFree { mem_handle: hh };
        ioctl(dev, NEURON_IOCTL_MEM_FREE, &mut f).expect("free");
    }
}

#[test]
fn conformance_on_the_in_process_emulator() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let f = emu.open(0, OpenOptions::default()).expect("open");
    conformance(&f, Arch::V3Trn2);
}

#[test]
fn conformance_on_an_emulated_trn1() {
    let emu = Emulator::new(Arch::V2Trn1, 2);
    let f = emu.open(1, OpenOptions::default()).expect("open");
    conformance(&f, Arch::V2Trn1);
    // v2 numbering: 2 cores, engines 0-31 + H2T 32/33, host bit 44, compat 5..7.
    let mut s = Semaphore {
        nc_id: 2,
        semaphore_index: 0,
        value: 0,
    };
    assert_eq!(
        ioctl(&f, NEURON_IOCTL_SEMAPHORE_READ, &mut s),
        Err(Errno::E2BIG)
    );
    let (_, hi) = alloc(&f, 4096, true).expect("host alloc");
    assert_eq!(hi.pa & 0x1000_0000_0000, 0x1000_0000_0000);
    let mut es = DmaEngState::new_zeroed();
    let mut gs = DmaEngGetState {
        eng_id: 33,
        state: &mut es as *mut _ as u64,
        ..FromZeros::new_zeroed()
    };
    ioctl(&f, NEURON_IOCTL_DMA_ENG_GET_STATE, &mut gs).expect("H2T engine 33");
    gs.eng_id = 34;
    assert_eq!(
        ioctl(&f, NEURON_IOCTL_DMA_ENG_GET_STATE, &mut gs),
        Err(Errno::EINVAL)
    );
    let mut ri = ResourceMmapInfo {
        block: MMAP_BLOCK_TPB,
        block_id: 1,
        resource: MMAP_RESOURCE_SEMAPHORE,
        ..FromZeros::new_zeroed()
    };
    ioctl(&f, NEURON_IOCTL_RESOURCE_MMAP_INFO, &mut ri).expect("resource");
    assert_eq!(ri.offset, 0xfffc6700000);
    ri.block_id = 2;
    assert_eq!(
        ioctl(&f, NEURON_IOCTL_RESOURCE_MMAP_INFO, &mut ri),
        Err(Errno::EINVAL)
    );
    // Device 1's cores are global slots 2-3; bitmaps stay relative to the fd's device.
    let mut m = CrwlNcMap {
        nc_count: 2,
        start_nc_index: 0,
        end_nc_index: 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(&f, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m).expect("mark");
    assert_eq!(m.bitmap, 0b11);
    let d0 = emu
        .open(
            0,
            OpenOptions {
                pid: 4242,
                write_only: true,
            },
        )
        .expect("dev 0");
    let mut m0 = CrwlNcMap {
        nc_count: 2,
        start_nc_index: 2,
        end_nc_index: 3,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(&d0, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m0),
        Err(Errno::EBUSY),
        "device 0's view of slots 2-3 is device 1's cores"
    );
    let mut bdf = DeviceBdf::new_zeroed();
    ioctl(&f, NEURON_IOCTL_DEVICE_BDF, &mut bdf).expect("bdf");
    assert_eq!(
        (bdf.bus_number, bdf.slot, bdf.func),
        (0x11, 0x1c, 0),
        "0000:11:1c.0"
    );
}

/// Runs the generic body against a real device node when `NEURON_CONFORMANCE_DEVICE` names one
/// (e.g. `/dev/neuron0`); skipped otherwise.
#[test]
fn conformance_on_a_real_device() {
    let Ok(path) = std::env::var("NEURON_CONFORMANCE_DEVICE") else {
        eprintln!("skipped: set NEURON_CONFORMANCE_DEVICE=/dev/neuronN to run on hardware");
        return;
    };
    let dev = neuron_runtime::sys::SysDevice::open(&path).expect("open the device node");
    let mut bi = DeviceBasicInfo::new_zeroed();
    ioctl(&dev, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut bi).expect("basic info");
    let arch = match bi.architecture {
        2 => Arch::V2Trn1,
        3 => Arch::V3Trn2,
        a => {
            eprintln!("skipped: architecture {a} is not one this suite knows");
            return;
        }
    };
    conformance(&dev, arch);
}

fn proc(emu: &Emulator, pid: u32) -> neuron_emulator::EmuFile {
    emu.open(
        0,
        OpenOptions {
            pid,
            write_only: false,
        },
    )
    .expect("open")
}

#[test]
fn queues_of_a_process_stop_on_its_last_close_and_device_nqs_survive() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let watcher = proc(&emu, 1);
    let p = proc(&emu, 50);
    let (rt, _) = alloc(&p, 512, true).expect("ring");
    let (rr, _) = alloc(&p, 512, true).expect("ring");
    let mut qi = DmaQueueInit {
        eng_id: 5,
        qid: 2,
        tx_desc_count: 32,
        rx_desc_count: 32,
        tx_handle: rt,
        rx_handle: rr,
        ..FromZeros::new_zeroed()
    };
    ioctl(&p, NEURON_IOCTL_DMA_QUEUE_INIT, &mut qi).expect("queue init");
    let mut nq = NotificationsInitV2 {
        nq_dev_id: 0,
        nq_type: 1,
        engine_index: 3,
        size: 4096,
        on_host_memory: 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(&p, NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut nq).expect("nq init");
    let state = |f: &dyn DeviceFile| {
        let mut tx = DmaQueueState::new_zeroed();
        let mut rx = DmaQueueState::new_zeroed();
        let mut g = DmaQueueGetState {
            eng_id: 5,
            qid: 2,
            tx: &mut tx as *mut _ as u64,
            rx: &mut rx as *mut _ as u64,
        };
        ioctl(f, NEURON_IOCTL_DMA_QUEUE_GET_STATE, &mut g).expect("state");
        tx
    };
    assert_ne!(state(&watcher).base_addr, 0);
    drop(p);
    let st = state(&watcher);
    assert_eq!(
        (st.base_addr, st.length),
        (0, 0),
        "the queue was re-pointed"
    );
    // The NQ (device lifespan) is still there: re-initialising returns the same buffer.
    let mut again = nq;
    ioctl(&watcher, NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &mut again).expect("nq again");
    assert_eq!(again.mmap_offset, nq.mmap_offset);
    let m = watcher
        .mmap(4096, nq.mmap_offset, PROT_RW)
        .expect("map the surviving NQ");
    watcher.munmap(m, 4096).expect("unmap");
}

#[test]
fn datastore_entries_are_per_process() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let app = proc(&emu, 60);
    let mon = proc(&emu, 61);
    let mut ds = NeuronDsInfo::new_zeroed();
    ioctl(&app, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds).expect("acquire");
    let p = app.mmap(256 << 10, ds.mmap_offset, PROT_RW).expect("map");
    assert_eq!(map_read_u32(p, 0), u32::from_le_bytes(*b"nds\0"));
    assert_eq!(map_read_u32(p, 4), 1, "header version");
    map_write_u32(p, 8, 99);
    let mut ds_mon = NeuronDsInfo {
        pid: 60,
        ..FromZeros::new_zeroed()
    };
    ioctl(&mon, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds_mon).expect("monitor");
    assert_eq!(ds_mon.mmap_offset, ds.mmap_offset);
    let q = mon
        .mmap(256 << 10, ds_mon.mmap_offset, PROT_RW)
        .expect("monitor map");
    assert_eq!(
        map_read_u32(q, 8),
        99,
        "the monitor sees the app's counters"
    );
    mon.munmap(q, 256 << 10).expect("unmap");
    app.munmap(p, 256 << 10).expect("unmap");
    drop(app);
    assert_eq!(
        ioctl(&mon, NEURON_IOCTL_ACQUIRE_NEURON_DS, &mut ds_mon),
        Err(Errno::ENOENT),
        "the entry went with its process"
    );
}

#[test]
fn another_process_maps_a_chunk_read_only() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let a = proc(&emu, 70);
    let b = proc(&emu, 71);
    let (h, info) = alloc(&a, 4096, false).expect("alloc");
    let mut data = vec![3u8; 4096];
    buf_copy(&a, h, 0, &mut data, true).expect("write");
    let pa = a.mmap(4096, info.pa, PROT_RW).expect("owner map");
    let pb = b.mmap(4096, info.pa, PROT_RW).expect("reader map");
    assert_ne!(pa, pb, "a separate, read-only view");
    map_write_u32(pa, 0, 0xabcd);
    assert_eq!(
        map_read_u32(pb, 0),
        0xabcd,
        "coherent with the owner's view"
    );
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let line = maps
        .lines()
        .find(|l| l.starts_with(&format!("{:x}-", pb as usize)))
        .expect("the alias is a mapping of its own");
    assert!(line.contains(" r--s "), "read-only: {line}");
    b.munmap(pb, 4096).expect("unmap");
    a.munmap(pa, 4096).expect("unmap");
}

#[test]
fn attach_required_commands_refuse_an_inherited_fd() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let parent = proc(&emu, 80);
    let child = parent.inherit(81);
    let mut out = 0u64;
    let mut a = MemAlloc {
        size: 4096,
        mem_handle: &mut out as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(&child, NEURON_IOCTL_MEM_ALLOC, &mut a),
        Err(Errno::EACCES)
    );
    ioctl(&parent, NEURON_IOCTL_MEM_ALLOC, &mut a).expect("the parent is attached");
    let mut bi = DeviceBasicInfo::new_zeroed();
    ioctl(&child, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut bi).expect("not an A command");
}

#[test]
fn core_init_token_and_scrub() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let a = proc(&emu, 90);
    let b = proc(&emu, 91);
    let set = |f: &dyn DeviceFile, st| {
        let mut c = CinitSet {
            nc_id: 1,
            state: st,
            new_state: 0,
        };
        ioctl(f, NEURON_IOCTL_CINIT_SET_STATE, &mut c).map(|_| c.new_state)
    };
    assert_eq!(
        set(&a, CINIT_STATE_STARTED),
        Ok(CINIT_STATE_STARTED),
        "a gets the token"
    );
    assert_eq!(
        set(&b, CINIT_STATE_STARTED),
        Ok(CINIT_STATE_STARTED),
        "b waited (bounded) and still sees STARTED"
    );
    assert_eq!(set(&a, CINIT_STATE_COMPLETED), Ok(CINIT_STATE_COMPLETED));
    assert_eq!(
        set(&b, CINIT_STATE_STARTED),
        Ok(CINIT_STATE_COMPLETED),
        "nothing to do"
    );
    // HBM scrub: every byte of the HBM, chunks included, becomes the pattern.
    let (h, _) = alloc(&a, 8192, false).expect("alloc");
    let mut sc = HbmScrubStart {
        nc_id: 0,
        hbm_index: 0,
        axi_port: 0,
        init_val: 0xa5a5_a5a5,
    };
    ioctl(&a, NEURON_IOCTL_HBM_SCRUB_START, &mut sc).expect("scrub");
    let mut w = HbmScrubWait {
        nc_id: 0,
        hbm_index: 0,
    };
    ioctl(&a, NEURON_IOCTL_HBM_SCRUB_WAIT, &mut w).expect("wait");
    assert_eq!(
        ioctl(&a, NEURON_IOCTL_HBM_SCRUB_WAIT, &mut w),
        Err(Errno::EPERM),
        "nothing pending"
    );
    let mut back = vec![0u8; 8192];
    buf_copy(&a, h, 0, &mut back, false).expect("read");
    assert!(back.iter().all(|b| *b == 0xa5));
    sc.hbm_index = 4;
    assert_eq!(
        ioctl(&a, NEURON_IOCTL_HBM_SCRUB_START, &mut sc),
        Err(Errno::EPERM)
    );
    // The SBUF window maps the core's live SBUF: partition p at p * 256 KiB.
    let mut ri = ResourceMmapInfo {
        block: MMAP_BLOCK_TPB,
        block_id: 1,
        resource: MMAP_RESOURCE_SBUF,
        ..FromZeros::new_zeroed()
    };
    ioctl(&a, NEURON_IOCTL_RESOURCE_MMAP_INFO, &mut ri).expect("sbuf info");
    assert_eq!(ri.size, 0x200_0000);
    assert_eq!(
        a.mmap(4096, ri.offset, PROT_RW),
        Err(Errno::EINVAL),
        "whole window only"
    );
    // Bytes the device wrote before the mapping (storage then had its own layout) are where
    // the window puts them.
    emu.with_device(0, |d| {
        d.write(ri.offset + 9 * 0x4_0000 + 40, &0x1234_5678u32.to_le_bytes())
    })
    .expect("device")
    .expect("device write before the mapping");
    let p = a
        .mmap(ri.size as usize, ri.offset, PROT_RW)
        .expect("map the SBUF window");
    assert_eq!(
        map_read_u32(p, 9 * 0x4_0000 + 40),
        0x1234_5678,
        "the mapping shows what the device wrote before it"
    );
    assert_eq!(
        map_read_u32(p, 8 * 0x4_0000 + 40),
        0,
        "the partition before"
    );
    let at = 3 * 0x4_0000 + 16;
    map_write_u32(p, at, 0xabad_cafe);
    let mut w = [0u8; 4];
    emu.with_device(0, |d| d.read(ri.offset + at as u64, &mut w))
        .expect("device")
        .expect("device read");
    assert_eq!(
        u32::from_le_bytes(w),
        0xabad_cafe,
        "the device sees stores through the window"
    );
    emu.with_device(0, |d| {
        d.write(ri.offset + 5 * 0x4_0000, &7u32.to_le_bytes())
    })
    .expect("device")
    .expect("device write");
    assert_eq!(
        map_read_u32(p, 5 * 0x4_0000),
        7,
        "and the window sees the device's writes"
    );
    a.munmap(p, ri.size as usize).expect("unmap");
}

#[test]
fn misc_fd_accepts_only_misc_commands() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let misc = emu
        .open(
            0,
            OpenOptions {
                pid: 7,
                write_only: true,
            },
        )
        .expect("open O_WRONLY");
    let mut bi = DeviceBasicInfo::new_zeroed();
    ioctl(&misc, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut bi).expect("misc command");
    let mut out = 0u64;
    let mut a = MemAllocV2MemType {
        size: 4096,
        mem_handle: &mut out as *mut u64 as u64,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(&misc, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut a),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        misc.mmap(0x2000, 0x20_0270_0000, PROT_RW),
        Err(Errno::EINVAL)
    );
}

#[test]
fn seventeenth_process_gets_ebusy() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let files: Vec<_> = (0..16)
        .map(|pid| {
            emu.open(
                0,
                OpenOptions {
                    pid: 1000 + pid,
                    write_only: false,
                },
            )
            .expect("attach")
        })
        .collect();
    assert_eq!(
        emu.open(
            0,
            OpenOptions {
                pid: 2000,
                write_only: false
            }
        )
        .map(|_| ()),
        Err(Errno::EBUSY)
    );
    // Re-opens by an attached process and misc fds do not count.
    let again = emu
        .open(
            0,
            OpenOptions {
                pid: 1000,
                write_only: false,
            },
        )
        .expect("reopen");
    let misc = emu
        .open(
            0,
            OpenOptions {
                pid: 2000,
                write_only: true,
            },
        )
        .expect("misc");
    drop((again, misc));
    drop(files);
    emu.open(
        0,
        OpenOptions {
            pid: 2000,
            write_only: false,
        },
    )
    .expect("room again after close");
    assert_eq!(
        emu.open(1, OpenOptions::default()).map(|_| ()),
        Err(Errno::ENODEV)
    );
}

#[test]
fn last_close_frees_process_chunks() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let count = |f: &dyn DeviceFile| {
        let mut buf = vec![MemChunkInfo::new_zeroed(); 64];
        let mut d = DumpMemChunks {
            hbm_index: 0,
            num_entries_in: 64,
            data: buf.as_mut_ptr() as u64,
            ..FromZeros::new_zeroed()
        };
        ioctl(f, NEURON_IOCTL_DUMP_MEM_CHUNKS, &mut d).expect("dump");
        d.num_entries_out
    };
    let watcher = emu
        .open(
            0,
            OpenOptions {
                pid: 1,
                write_only: false,
            },
        )
        .expect("watcher");
    let a1 = emu
        .open(
            0,
            OpenOptions {
                pid: 77,
                write_only: false,
            },
        )
        .expect("a1");
    let a2 = emu
        .open(
            0,
            OpenOptions {
                pid: 77,
                write_only: false,
            },
        )
        .expect("a2");
    alloc(&a1, 4096, false).expect("alloc");
    alloc(&a2, 8192, false).expect("alloc");
    assert_eq!(count(&watcher), 2);
    let mut d = DumpMemChunks {
        hbm_index: 0,
        num_entries_in: 1,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(&watcher, NEURON_IOCTL_DUMP_MEM_CHUNKS, &mut d),
        Err(Errno::EAGAIN),
        "buffer too small"
    );
    drop(a1);
    assert_eq!(count(&watcher), 2, "the process still has an open fd");
    drop(a2);
    assert_eq!(count(&watcher), 0, "last close frees CUR_PROCESS chunks");
}

#[test]
fn core_reservations_are_exclusive_between_processes() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let a = emu
        .open(
            0,
            OpenOptions {
                pid: 10,
                write_only: true,
            },
        )
        .expect("a");
    let b = emu
        .open(
            0,
            OpenOptions {
                pid: 11,
                write_only: true,
            },
        )
        .expect("b");
    let mut m = CrwlNcMap {
        nc_count: 2,
        start_nc_index: 0,
        end_nc_index: 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(&a, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m).expect("a marks nc0-1");
    assert_eq!(m.bitmap, 0b11);
    let mut m2 = CrwlNcMap {
        nc_count: 1,
        start_nc_index: 0,
        end_nc_index: 1,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(&b, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m2),
        Err(Errno::EBUSY)
    );
    let mut m3 = CrwlNcMap {
        nc_count: 1,
        start_nc_index: 0,
        end_nc_index: 7,
        ..FromZeros::new_zeroed()
    };
    ioctl(&b, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m3).expect("b gets nc2");
    assert_eq!(m3.bitmap, 0b100);
    drop(a);
    ioctl(&b, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m2).expect("released on close of a's misc fd");
}
