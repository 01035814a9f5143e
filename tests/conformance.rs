//! ABI conformance: one generic test body over `&dyn DeviceFile` (any implementation of the
//! seam: the emulator's in-process file today, a real `/dev/neuronN` or the preload shim
//! later), plus lifecycle tests that need the emulator's process identities.

use neuron_abi::arch::Arch;
use neuron_abi::consts::{MemType, MMAP_BLOCK_TPB, MMAP_RESOURCE_SEMAPHORE};
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

/// The generic body: command values, struct sizes, results and errnos.
fn conformance(dev: &dyn DeviceFile, arch: Arch) {
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
    assert_eq!(
        ioctl_raw(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, 0),
        Err(Errno::EFAULT)
    );
    assert_eq!(
        ioctl_raw(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, 16),
        Err(Errno::EFAULT)
    );
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
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut bad),
        Err(Errno::EFAULT),
        "null handle pointer"
    );
    let mut xi = MemGetExtendedInfo {
        mem_handle: 999_999,
        ..FromZeros::new_zeroed()
    };
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut xi),
        Err(Errno::EINVAL),
        "bad handle"
    );
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
    assert_eq!(
        ioctl(dev, NEURON_IOCTL_MEM_BUF_COPY64, &mut bad),
        Err(Errno::EFAULT),
        "bad buffer pointer"
    );
    assert_eq!(
        dev.mmap(4096, info.pa),
        Err(Errno::ENODEV),
        "device memory mappings are not modelled yet"
    );

    // Host chunk: map it, write through the mapping, read back with MEM_BUF_COPY64.
    let (hh, hinfo) = alloc(dev, 8192, true).expect("host alloc");
    assert_eq!(hinfo.host_memory, 1);
    assert_ne!(
        hinfo.pa & arch.host_base_bit(),
        0,
        "host PAs carry the host bit"
    );
    assert_eq!(
        dev.mmap(4096, hinfo.mmap_offset),
        Err(Errno::EINVAL),
        "partial mappings are refused"
    );
    let p = dev.mmap(8192, hinfo.mmap_offset).expect("mmap host chunk");
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
    let page = dev.mmap(0x2000, ri.offset).expect("map semaphore page");
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
    let m = dev.mmap(4096, nq.mmap_offset).expect("map nq");
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

#[test]
fn conformance_on_the_in_process_emulator() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let f = emu.open(0, OpenOptions::default()).expect("open");
    conformance(&f, Arch::V3Trn2);
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
    assert_eq!(misc.mmap(0x2000, 0x20_0270_0000), Err(Errno::EINVAL));
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
