//! ioctl dispatch: one handler per command value, validating every argument the way the real
//! driver does (`driver-abi.md` §2.3). Every value of `neuron_abi::ioctl::COMMANDS` is either
//! implemented or answered as the driver answers it; `docs/abi-coverage.md` has the table.

use crate::chunks::Lifespan;
use crate::drvstate::{self, CRWL_GLOBAL_SLOTS, MAX_NC_PER_DEVICE};
use crate::uaccess::{copy_from_user, copy_to_user, read_struct, write_struct};
use crate::{release_chunk_memory, DevState, EmuFile};
use neuron_abi::arch::Arch;
use neuron_abi::consts::{
    MemType, CINIT_STATE_COMPLETED, CINIT_STATE_INVALID, CINIT_STATE_STARTED,
    DRIVER_FEATURE_FLAGS1_2_26, MAX_NQ, NQ_DEVICE_TYPE_NEURON_CORE, POD_STATE_SINGLE_NODE,
};
use neuron_abi::ioctl::*;
use neuron_abi::notify::ENTRY_SIZE;
use neuron_abi::structs::*;
use neuron_abi::udma::{validate_ring, UdmaDesc};
use neuron_abi::Errno;
use std::time::Duration;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// A fake kernel virtual address for BAR0 (what DEVICE_INFO reports as `bar_address[0]`).
pub const BAR0_KVA: u64 = 0xffff_c900_0000_0000;
/// The PCI revision the emulated devices report.
pub const REVISION: u32 = 0;
/// `EFBIG`, DMA_DESCRIPTOR_COPYOUT's answer for a range past the ring.
const EFBIG: Errno = Errno(27);
/// Most registers per BAR_READ / BAR_WRITE / READ_HW_COUNTERS call.
const MAX_REGS: u32 = 100;
/// Largest async copy: one batch of 2031 descriptors of 64 KiB (`driver-abi.md` §3.5).
const ASYNC_MAX: u64 = 2031 * 65536;
/// Bounded waits (the driver waits 0.5 s / 2 s / 10 × 500 ms; the emulator much less, since
/// nothing but another emulated process can change the state meanwhile).
const CRWL_READER_WAIT: Duration = Duration::from_millis(20);
const CRWL_WRITER_WAIT: Duration = Duration::from_millis(50);
const CINIT_WAIT: Duration = Duration::from_millis(50);

type R = Result<i32, Errno>;

/// The made-up, stable PCI address of device `index`: domain 0, bus 0x10 + index, slot 0x1c,
/// function 0 (`0000:10:1c.0` for /dev/neuron0).
pub fn pci_bdf(index: usize) -> (u32, u32, u8, u8) {
    (0, 0x10 + index as u32, 0x1c, 0)
}

/// BAR0 length reported by DEVICE_INFO: v2 1 GiB, v3 4 GiB (covers every landmark of §6).
fn bar0_size(arch: Arch) -> u64 {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => 0x4000_0000,
        Arch::V3Trn2 => 0x1_0000_0000,
    }
}

/// A struct read whose copy-in failure the driver reports as `-EACCES` instead of the usual
/// residue (DMA_QUEUE_INIT, DMA_QUEUE_INIT_BATCH, MEM_ALLOC).
fn read_eacces<T: FromBytes + IntoBytes>(arg: u64) -> Result<T, Errno> {
    read_struct(arg).map_err(|_| Errno::EACCES)
}

pub(crate) fn ioctl(f: &EmuFile, cmd: u32, arg: u64) -> R {
    let Some(info) = lookup(cmd) else {
        // Unknown values fall through to the misc dispatcher and end in EINVAL.
        return Err(Errno::EINVAL);
    };
    if f.misc && !info.misc_fd_ok {
        return Err(Errno::EINVAL);
    }
    if !f.misc && info.needs_attach && !f.sh.lock().attached(f.pid) {
        return Err(Errno::EACCES);
    }
    let arch = f.sh.arch;
    match cmd {
        // ------------------------------------------------------------ info / discovery
        NEURON_IOCTL_DEVICE_BASIC_INFO => {
            let v = DeviceBasicInfo {
                architecture: arch.architecture(),
                revision: REVISION,
            };
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_INFO => {
            let mut v = DeviceInfo::new_zeroed();
            v.architecture = arch.architecture();
            v.revision = REVISION;
            v.bar_address = [BAR0_KVA, 0];
            v.bar_size = [bar0_size(arch), 0];
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_DRIVER_INFO_GET => {
            let v = DeviceDriverInfo {
                architecture: arch.architecture(),
                revision: REVISION,
                version: 0,
                size: 24,
                feature_flags1: DRIVER_FEATURE_FLAGS1_2_26,
            };
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_DRIVER_INFO_SET => Err(Errno::ENOTSUPP),
        NEURON_IOCTL_COMPATIBLE_VERSION => {
            let (min, max) = arch.compat_versions();
            write_struct(arg, &CompatibleVersion { max, min }).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_BDF => {
            let (_, bus, slot, func) = pci_bdf(f.sh.index);
            let v = DeviceBdf {
                bus_number: bus,
                slot,
                func,
                ..FromZeros::new_zeroed()
            };
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_BDF_EXT => {
            let mut a: DeviceBdfExt = read_struct(arg)?;
            // nd_index is relative to this fd's device (container view).
            let idx = (a.nd_index as usize)
                .checked_add(f.sh.index)
                .filter(|i| *i < f.sh.global.count)
                .ok_or(Errno::EINVAL)?;
            let (dom, bus, slot, func) = pci_bdf(idx);
            a.domain = dom;
            a.bus_number = bus;
            a.slot = slot;
            a.func = func;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_HOST_DEVICE_ID => write_struct(
            arg,
            &HostDeviceId {
                host_device_id: f.sh.index as u32,
            },
        )
        .map(|_| 0),
        NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP => {
            let mut v = HostDeviceIdToRidMap::new_zeroed();
            v.count = f.sh.global.count as u32;
            for (i, slot) in v
                .host_did_to_rid_map
                .iter_mut()
                .enumerate()
                .take(f.sh.global.count)
            {
                *slot = routing_id(arch, i as u32);
            }
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP => {
            if arch.architecture() == 2 {
                return Err(Errno::ENOTSUPP);
            }
            let a: GetLogicalToPhysicalNcMap = read_struct(arg)?;
            if a.max_map_entries > neuron_abi::consts::NC_MAP_MAX_ENTRIES || a.mapping_version != 0
            {
                return Err(Errno::EINVAL);
            }
            // Identity: logical core k of device d is physical core k of device d. The real
            // table is a fixed "SENG swap" permutation (plus a die flip on ultraserver nodes).
            let max = a.max_map_entries as usize;
            let ncs = arch.nc_count() as usize;
            let n = (f.sh.global.count * ncs).min(max);
            let mut out = vec![0u8; 4 + 8 * max];
            out[..4].copy_from_slice(&(n as u32).to_le_bytes());
            for k in 0..n {
                let e = NcMapEntry {
                    device_id: (k / ncs) as u32,
                    device_nc_idx: (k % ncs) as u32,
                };
                out[4 + 8 * k..12 + 8 * k].copy_from_slice(e.as_bytes());
            }
            copy_to_user(a.map, &out).map(|_| 0)
        }
        NEURON_IOCTL_POD_INFO => {
            let a: PodInfo = read_struct(arg)?;
            if a.sz != 260 {
                return Err(Errno::EINVAL);
            }
            let mut v = PodInfo::new_zeroed();
            v.sz = 260;
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_POD_STATUS | NEURON_IOCTL_POD_STATUS_V2 => {
            let size = if cmd == NEURON_IOCTL_POD_STATUS {
                268
            } else {
                276
            };
            let mut buf = vec![0u8; size];
            copy_from_user(arg, &mut buf)?;
            if u16::from_le_bytes([buf[0], buf[1]]) as usize != size {
                return Err(Errno::EINVAL);
            }
            let mut v = PodStatusV2::new_zeroed();
            v.v1.sz = size as u16;
            v.v1.state = POD_STATE_SINGLE_NODE;
            v.v1.node_id = -1;
            copy_to_user(arg, &v.as_bytes()[..size]).map(|_| 0)
        }
        NEURON_IOCTL_POD_CTRL | NEURON_IOCTL_POD_CTRL_V2 => {
            let size = if cmd == NEURON_IOCTL_POD_CTRL { 16 } else { 20 };
            let mut v = PodCtrlV2::new_zeroed();
            copy_from_user(arg, &mut v.as_mut_bytes()[..size])?;
            if v.v1.sz as usize != size {
                return Err(Errno::EINVAL);
            }
            // A standard instance has no pod: every request leaves it a single node.
            v.v1.state = POD_STATE_SINGLE_NODE;
            copy_to_user(arg, &v.as_bytes()[..size]).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO => apps_info(f, arg),
        NEURON_IOCTL_DEVICE_APP_PID => {
            let pid = f.sh.lock().procs[0].map_or(0, |p| p.pid as i32);
            copy_to_user(arg, &pid.to_le_bytes()).map(|_| 0)
        }
        NEURON_IOCTL_GET_VA_PLACEMENT => {
            let mut a: GetVaPlacement = read_struct(arg)?;
            let found = va_lookup(f, a.va, 1);
            match found {
                Some((dev, hbm)) => {
                    a.device_index = dev as i32;
                    a.hbm_index = hbm as i32;
                    write_struct(arg, &a).map(|_| 0)
                }
                None => {
                    a.device_index = -1;
                    a.hbm_index = -1;
                    write_struct(arg, &a)?;
                    Err(Errno::ENXIO)
                }
            }
        }
        NEURON_IOCTL_DEVICE_INIT
        | NEURON_IOCTL_DEVICE_RELEASE
        | NEURON_IOCTL_DMA_ENG_INIT
        | NEURON_IOCTL_DMA_QUEUE_RELEASE
        | NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1 => Ok(0),
        NEURON_IOCTL_DMA_QUIESCE_QUEUES => Err(Errno::ENOIOCTLCMD),
        NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO => Err(Errno::EPERM),
        // A newer driver's value whose argument layout is unpublished: the emulated driver
        // (2.27 + the 2.28 additions) does not define it.
        NEURON_IOCTL_DMABUF_FD_V2 => Err(Errno::EINVAL),

        // ------------------------------------------------------------ memory
        NEURON_IOCTL_MEM_ALLOC => {
            let a: MemAlloc = read_eacces(arg)?;
            let mt = unknown_type(a.host_memory);
            alloc(
                f,
                a.size,
                0,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                mt,
                a.mem_handle,
            )
            .map(|_| 0)
        }
        NEURON_IOCTL_MEM_ALLOC_V2 => {
            let a: MemAllocV2 = read_struct(arg)?;
            let mt = unknown_type(a.host_memory);
            alloc(
                f,
                a.size,
                a.align,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                mt,
                a.mem_handle,
            )
            .map(|_| 0)
        }
        NEURON_IOCTL_MEM_ALLOC_V2MT => {
            let a: MemAllocV2MemType = read_struct(arg)?;
            alloc(
                f,
                a.size,
                a.align,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                a.mem_type,
                a.mem_handle,
            )
            .map(|_| 0)
        }
        NEURON_IOCTL_MEM_ALLOC_V2MT64 => {
            let a: MemAllocV2MemType64 = read_struct(arg)?;
            alloc(
                f,
                a.size,
                a.align,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                a.mem_type,
                a.mem_handle,
            )
            .map(|_| 0)
        }
        NEURON_IOCTL_MEM_ALLOC_V2MT64_PA => {
            let mut a: MemAllocV2MemType64Pa = read_struct(arg)?;
            let (h, pa) = alloc(
                f,
                a.size,
                a.align,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                a.mem_type,
                a.mem_handle,
            )?;
            a.pa = pa;
            if let Err(e) = write_struct(arg, &a) {
                let mut g = f.sh.lock();
                drvstate::free_handle(&mut g, h);
                return Err(e);
            }
            Ok(0)
        }
        NEURON_IOCTL_MEM_FREE => {
            let a: MemFree = read_struct(arg)?;
            let mut g = f.sh.lock();
            if let Some(c) = g.chunks.free(a.mem_handle)? {
                release_chunk_memory(&mut g, &c);
            }
            Ok(0)
        }
        NEURON_IOCTL_MEM_GET_EXTENDED_INFO => {
            let mut a: MemGetExtendedInfo = read_struct(arg)?;
            let g = f.sh.lock();
            let c = g.chunks.get(a.mem_handle).ok_or(Errno::EINVAL)?;
            a.host_memory = c.host as u32;
            a.mmap_offset = c.pa;
            a.pa = c.pa;
            a.pid = c.pid as u64;
            a.size = c.size;
            drop(g);
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_MEM_GET_PA => {
            let a: MemGetPa = read_struct(arg)?;
            let pa = chunk_pa(f, a.mem_handle)?;
            copy_to_user(a.pa, &pa.to_le_bytes()).map(|_| 0)
        }
        NEURON_IOCTL_MEM_GET_INFO => {
            let a: MemGetInfo = read_struct(arg)?;
            let pa = chunk_pa(f, a.mem_handle)?;
            copy_to_user(a.pa, &pa.to_le_bytes())?;
            if a.mmap_offset != 0 {
                copy_to_user(a.mmap_offset, &pa.to_le_bytes())?;
            }
            Ok(0)
        }
        NEURON_IOCTL_MEM_MC_GET_INFO => {
            let mut a: MemGetMcMmapInfo = read_struct(arg)?;
            let g = f.sh.lock();
            let c = g.chunks.find_pa(a.pa).ok_or(Errno::ENOMEM)?;
            a.mmap_offset = c.pa;
            a.size = c.size;
            drop(g);
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_MEM_MC_GET_INFO_V2 => {
            let mut a: MemGetMcMmapInfoV2 = read_struct(arg)?;
            let g = f.sh.lock();
            let c = g.chunks.find_pa(a.pa).ok_or(Errno::ENOMEM)?;
            a.mmap_offset = c.pa;
            a.size = c.size;
            a.mem_handle = c.handle;
            drop(g);
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_MEM_BUF_COPY => {
            let a: MemBufCopy = read_struct(arg)?;
            buf_copy(
                f,
                a.mem_handle,
                a.buffer,
                a.size as u64,
                a.offset as u64,
                a.copy_to_mem_handle != 0,
            )
        }
        NEURON_IOCTL_MEM_BUF_COPY64 => {
            let a: MemBufCopy64 = read_struct(arg)?;
            buf_copy(
                f,
                a.mem_handle,
                a.buffer,
                a.size,
                a.offset,
                a.copy_to_mem_handle != 0,
            )
        }
        NEURON_IOCTL_MEM_BUF_ZEROCOPY64 => {
            let a: MemBufCopy64zc = read_struct(arg)?;
            check_h2t_qid(a.h2t_qid)?;
            buf_copy(
                f,
                a.mem_handle,
                a.buffer,
                a.size,
                a.offset,
                a.is_copy_to_device != 0,
            )
        }
        NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES => zerocopy_batches(f, arg),
        NEURON_IOCTL_MEMSET => {
            let a: Memset = read_struct(arg)?;
            memset(f, a.mem_handle, a.offset, a.value, a.size as u64)
        }
        NEURON_IOCTL_MEMSET64 => {
            let a: Memset64 = read_struct(arg)?;
            memset(f, a.mem_handle, a.offset, a.value, a.size)
        }
        NEURON_IOCTL_DUMP_MEM_CHUNKS => {
            let mut a: DumpMemChunks = read_struct(arg)?;
            let g = f.sh.lock();
            if a.hbm_index as usize >= g.chunks.hbm_count() {
                return Err(Errno::EINVAL);
            }
            let mut list: Vec<MemChunkInfo> = g
                .chunks
                .iter()
                .filter(|c| !c.host && c.hbm == a.hbm_index)
                .map(|c| MemChunkInfo {
                    pa: c.pa,
                    size: c.size,
                    mem_type: c.mem_type,
                    ..FromZeros::new_zeroed()
                })
                .collect();
            drop(g);
            list.sort_by_key(|c| c.pa);
            a.num_entries_out = list.len() as u32;
            write_struct(arg, &a)?;
            if (a.num_entries_in as usize) < list.len() {
                return Err(Errno::EAGAIN);
            }
            copy_to_user(a.data, list.as_bytes()).map(|_| 0)
        }
        NEURON_IOCTL_MEM_COPY => {
            let a: MemCopy = read_struct(arg)?;
            mem_copy(
                f,
                a.src_mem_handle,
                a.dst_mem_handle,
                a.size as u64,
                a.src_offset as u64,
                a.dst_offset as u64,
            )
        }
        NEURON_IOCTL_MEM_COPY64 => {
            let a: MemCopy64 = read_struct(arg)?;
            mem_copy(
                f,
                a.src_mem_handle,
                a.dst_mem_handle,
                a.size,
                a.src_offset,
                a.dst_offset,
            )
        }
        NEURON_IOCTL_MEM_COPY_ASYNC => {
            let mut a: MemCopyAsync = read_struct(arg)?;
            a.wait_handle = copy_async(
                f,
                a.src_mem_handle,
                a.dst_mem_handle,
                a.size as u64,
                a.src_offset as u64,
                a.dst_offset as u64,
                a.pwait_handle,
            )?;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_MEM_COPY_ASYNC64 => {
            let mut a: MemCopyAsync64 = read_struct(arg)?;
            a.wait_handle = copy_async(
                f,
                a.src_mem_handle,
                a.dst_mem_handle,
                a.size,
                a.src_offset,
                a.dst_offset,
                a.pwait_handle,
            )?;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_MEM_COPY_ASYNC_WAIT => {
            let a: MemCopyAsyncWait = read_struct(arg)?;
            let g = f.sh.lock();
            if g.chunks.get(a.src_mem_handle).is_none() || g.chunks.get(a.dst_mem_handle).is_none()
            {
                return Err(Errno::EINVAL);
            }
            // Copies complete synchronously, so waiting on a valid handle returns at once.
            if !(1..=2).contains(&(a.pwait_handle as i32)) {
                return Err(Errno::EINVAL);
            }
            Ok(0)
        }
        NEURON_IOCTL_DMABUF_FD => {
            let a: DmabufFd = read_struct(arg)?;
            // The range must be an mmap of device memory, as for the real exporter; the
            // emulator has no dma-buf exporter (a kernel object) to hand out.
            if a.size == 0 || va_lookup(f, a.va, a.size).is_none() {
                return Err(Errno::EINVAL);
            }
            Err(Errno::ENOTSUPP)
        }
        NEURON_IOCTL_HOST_MEM_PIN => {
            let mut a: HostMemPin = read_struct(arg)?;
            let end = a.va.checked_add(a.size).ok_or(Errno::EINVAL)?;
            if a.va == 0 || a.size == 0 {
                return Err(Errno::EINVAL);
            }
            // The pages must exist (pinning faults them in).
            let mut b = [0u8; 1];
            copy_from_user(a.va, &mut b)?;
            copy_from_user(end - 1, &mut b)?;
            {
                let mut g = f.sh.lock();
                if g.drv.pins.contains_key(&(f.pid, a.va)) {
                    return Err(Errno::EEXIST);
                }
                g.drv.pins.insert((f.pid, a.va), a.size);
            }
            // User memory has no device-visible physical address in the emulator.
            a.pa = u64::MAX;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_HOST_MEM_UNPIN => {
            let a: HostMemUnpin = read_struct(arg)?;
            let mut g = f.sh.lock();
            g.drv
                .pins
                .remove(&(f.pid, a.va))
                .map(|_| 0)
                .ok_or(Errno::EINVAL)
        }

        // ------------------------------------------------------------ DMA
        NEURON_IOCTL_DMA_ENG_SET_STATE => {
            let a: DmaEngSetState = read_struct(arg)?;
            let mut g = f.sh.lock();
            let st = g
                .drv
                .eng_state
                .get_mut(a.eng_id as usize)
                .ok_or(Errno::EINVAL)?;
            if matches!(a.state, 0 | 2 | 3) {
                *st = a.state;
            }
            Ok(0)
        }
        NEURON_IOCTL_DMA_ENG_GET_STATE => {
            let a: DmaEngGetState = read_struct(arg)?;
            let st = *f
                .sh
                .lock()
                .drv
                .eng_state
                .get(a.eng_id as usize)
                .ok_or(Errno::EINVAL)?;
            let v = DmaEngState {
                revision_id: 4,
                max_queues: 16,
                num_queues: 16,
                tx_state: st,
                rx_state: st,
            };
            write_struct(a.state, &v).map(|_| 0)
        }
        NEURON_IOCTL_DMA_QUEUE_INIT => {
            let a: DmaQueueInit = read_eacces(arg)?;
            queue_init(f, &a)
        }
        NEURON_IOCTL_DMA_QUEUE_INIT_BATCH => {
            let a: DmaQueueInitBatch = read_eacces(arg)?;
            if a.count >= 256 {
                return Err(Errno::E2BIG);
            }
            for e in &a.entries[..a.count as usize] {
                queue_init(f, e)?;
            }
            Ok(0)
        }
        NEURON_IOCTL_DMA_COPY_DESCRIPTORS => {
            let a: DmaCopyDescriptors = read_struct(arg)?;
            copy_descriptors(
                f,
                a.mem_handle,
                a.buffer,
                a.num_descs,
                a.offset as u64,
                a.queue_type,
            )
        }
        NEURON_IOCTL_DMA_COPY_DESCRIPTORS64 => {
            let a: DmaCopyDescriptors64 = read_struct(arg)?;
            copy_descriptors(
                f,
                a.mem_handle,
                a.buffer,
                a.num_descs,
                a.offset,
                a.queue_type,
            )
        }
        NEURON_IOCTL_DMA_QUEUE_COPY_START => {
            let a: DmaQueueCopyStart = read_struct(arg)?;
            check_queue(f, a.eng_id, a.qid)?;
            if a.rx_desc_count == 0 {
                return Err(Errno::EINVAL);
            }
            let mut g = f.sh.lock();
            g.dev
                .dma_queue_start(
                    a.eng_id as usize,
                    a.qid as usize,
                    a.tx_desc_count,
                    a.rx_desc_count,
                )
                .map_err(|_| Errno::EINVAL)?;
            drop(g);
            f.sh.kick.notify_all();
            Ok(0)
        }
        NEURON_IOCTL_DMA_QUEUE_GET_STATE => {
            let a: DmaQueueGetState = read_struct(arg)?;
            check_queue(f, a.eng_id, a.qid)?;
            let st =
                f.sh.lock()
                    .dev
                    .dma_queue_state(a.eng_id as usize, a.qid as usize)
                    .ok_or(Errno::EINVAL)?;
            let sw = if st.aborted {
                3
            } else if st.enabled {
                2
            } else {
                1
            };
            let tx = DmaQueueState {
                hw_status: 0,
                sw_status: sw,
                base_addr: st.tx_base,
                length: st.tx_len,
                head_pointer: (st.head % st.tx_len.max(1) as u64) as u32,
                tail_pointer: (st.tx_tail % st.tx_len.max(1) as u64) as u32,
                ..Default::default()
            };
            let rx = DmaQueueState {
                hw_status: 0,
                sw_status: sw,
                base_addr: st.rx_base,
                length: st.rx_len,
                head_pointer: (st.head % st.rx_len.max(1) as u64) as u32,
                tail_pointer: (st.rx_tail % st.rx_len.max(1) as u64) as u32,
                ..Default::default()
            };
            write_struct(a.tx, &tx)?;
            write_struct(a.rx, &rx).map(|_| 0)
        }
        NEURON_IOCTL_DMA_ACK_COMPLETED => {
            let a: DmaAckCompleted = read_struct(arg)?;
            check_queue(f, a.eng_id, a.qid)?;
            // Software bookkeeping only; refused for rings that are not a power of two.
            let st =
                f.sh.lock()
                    .dev
                    .dma_queue_state(a.eng_id as usize, a.qid as usize)
                    .ok_or(Errno::EINVAL)?;
            if st.enabled && (!st.tx_len.is_power_of_two() || !st.rx_len.is_power_of_two()) {
                return Err(Errno::EINVAL);
            }
            Ok(0)
        }
        NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT => descriptor_copyout(f, arg),
        NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES => h2t_alloc(f, arg),
        NEURON_IOCTL_H2T_DMA_FREE_QUEUES => {
            let a: H2tDmaFreeQueues = read_struct(arg)?;
            if a.sz != 8 || a.nc_id as u32 >= arch.nc_count() {
                return Err(Errno::EINVAL);
            }
            let mut g = f.sh.lock();
            let h = &mut g.drv.h2t[a.nc_id as usize];
            h.copy_bmap &= !a.queue_bmap;
            h.service_bmap &= !a.queue_bmap;
            Ok(0)
        }
        NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES => compl_queues(f, arg),
        NEURON_IOCTL_HBM_SCRUB_START => {
            let a: HbmScrubStart = read_struct(arg)?;
            if a.hbm_index >= arch.hbm_count() {
                return Err(Errno::EPERM);
            }
            if a.nc_id >= arch.nc_count() {
                return Err(Errno::EINVAL);
            }
            let base = arch.hbm_base(a.hbm_index).ok_or(Errno::EPERM)?;
            let start = base + arch.hbm_reserved_bytes();
            let len = arch.hbm_size() - arch.hbm_reserved_bytes();
            let mut g = f.sh.lock();
            // The whole usable HBM, chunks included, is overwritten (synchronously here).
            g.dev
                .scrub_hbm(start, len, a.init_val)
                .map_err(|_| Errno::EPERM)?;
            g.drv.scrub_pending[a.hbm_index as usize] = true;
            Ok(0)
        }
        NEURON_IOCTL_HBM_SCRUB_WAIT => {
            let a: HbmScrubWait = read_struct(arg)?;
            let mut g = f.sh.lock();
            match g.drv.scrub_pending.get_mut(a.hbm_index as usize) {
                Some(p) if *p => {
                    *p = false;
                    Ok(0)
                }
                // No scrub context for that HBM (or no such HBM): the driver returns -1.
                _ => Err(Errno::EPERM),
            }
        }

        // ------------------------------------------------------------ notifications
        NEURON_IOCTL_NOTIFICATIONS_INIT_V1 => {
            let mut a: NotificationsInitV1 = read_struct(arg)?;
            let (off, _) = nq_init(
                f,
                a.nc_id,
                NQ_DEVICE_TYPE_NEURON_CORE,
                a.nq_type,
                a.engine_index,
                a.size,
                true,
                0,
                false,
            )?;
            a.mmap_offset = off;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_NOTIFICATIONS_INIT_V2 => {
            let mut a: NotificationsInitV2 = read_struct(arg)?;
            let (off, h) = nq_init(
                f,
                a.nq_dev_id,
                a.nq_dev_type,
                a.nq_type,
                a.engine_index,
                a.size,
                a.on_host_memory != 0,
                a.dram_channel,
                false,
            )?;
            a.mmap_offset = off;
            a.mem_handle = h;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2 => {
            let mut a: NotificationsInitWithReallocV2 = read_struct(arg)?;
            let (off, h) = nq_init(
                f,
                a.nq_dev_id,
                a.nq_dev_type,
                a.nq_type,
                a.engine_index,
                a.size,
                a.on_host_memory != 0,
                a.dram_channel,
                a.force_alloc_mem != 0,
            )?;
            a.mmap_offset = off;
            a.mem_handle = h;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_THROTTLING_NOTIFICATIONS => {
            let a: ThrottlingNotifications = read_struct(arg)?;
            f.sh.lock().drv.throttling = a.enable != 0;
            Ok(0)
        }

        // ------------------------------------------------------------ semaphores / events
        NEURON_IOCTL_SEMAPHORE_INCREMENT
        | NEURON_IOCTL_SEMAPHORE_DECREMENT
        | NEURON_IOCTL_SEMAPHORE_WRITE
        | NEURON_IOCTL_SEMAPHORE_READ => {
            let mut a: Semaphore = read_struct(arg)?;
            if a.nc_id >= arch.nc_count() {
                return Err(Errno::E2BIG);
            }
            if a.semaphore_index >= 256 {
                return Err(Errno::EINVAL);
            }
            let base = match cmd {
                NEURON_IOCTL_SEMAPHORE_INCREMENT => 0x1800,
                NEURON_IOCTL_SEMAPHORE_DECREMENT => 0x1C00,
                NEURON_IOCTL_SEMAPHORE_WRITE => 0x1400,
                _ => 0x1000,
            };
            let off = base + 4 * a.semaphore_index as u64;
            let mut g = f.sh.lock();
            if cmd == NEURON_IOCTL_SEMAPHORE_READ {
                let regs = g.dev.regs(a.nc_id as usize).ok_or(Errno::EINVAL)?;
                a.value = regs.read_reg(off).ok_or(Errno::EINVAL)?;
                drop(g);
                return write_struct(arg, &a).map(|_| 0);
            }
            g.dev.reg_write(a.nc_id as usize, off, a.value);
            drop(g);
            f.sh.kick.notify_all();
            Ok(0)
        }
        NEURON_IOCTL_EVENT_SET | NEURON_IOCTL_EVENT_GET => {
            let mut a: Event = read_struct(arg)?;
            // The real driver checks `> 256` here (off by one) and not the nc id; an emulator
            // must still not index out of range, so both are bounded.
            if a.event_index >= 256 || a.nc_id >= arch.nc_count() {
                return Err(Errno::EINVAL);
            }
            let off = 4 * a.event_index as u64;
            let mut g = f.sh.lock();
            if cmd == NEURON_IOCTL_EVENT_GET {
                let regs = g.dev.regs(a.nc_id as usize).ok_or(Errno::EINVAL)?;
                a.value = regs.read_reg(off).ok_or(Errno::EINVAL)?;
                drop(g);
                return write_struct(arg, &a).map(|_| 0);
            }
            g.dev.reg_write(a.nc_id as usize, off, a.value);
            drop(g);
            f.sh.kick.notify_all();
            Ok(0)
        }
        NEURON_IOCTL_BAR_READ | NEURON_IOCTL_BAR_WRITE => {
            bar_rw(f, arg, cmd == NEURON_IOCTL_BAR_READ)
        }
        NEURON_IOCTL_READ_HW_COUNTERS => {
            let a: ReadHwCounters = read_struct(arg)?;
            if a.count > MAX_REGS {
                return Err(Errno::EINVAL);
            }
            let mut addrs = vec![0u64; a.count as usize];
            copy_from_user(a.address, addrs.as_mut_bytes())?;
            let g = f.sh.lock();
            // Counters the model has no storage for read as 0.
            let vals: Vec<u32> = addrs
                .iter()
                .map(|&ad| {
                    let mut w = [0u8; 4];
                    g.dev.read(ad, &mut w).map_or(0, |_| u32::from_le_bytes(w))
                })
                .collect();
            drop(g);
            copy_to_user(a.data, vals.as_bytes()).map(|_| 0)
        }
        NEURON_IOCTL_PROGRAM_ENGINE => {
            let a: ProgramEngine = read_struct(arg)?;
            program_engine(f, 0, a.dst, a.buffer, a.size as u64, a.offset as u64)
        }
        NEURON_IOCTL_PROGRAM_ENGINE_NC => {
            let a: ProgramEngineNc = read_struct(arg)?;
            program_engine(f, a.nc_id, a.dst, a.buffer, a.size as u64, a.offset as u64)
        }
        NEURON_IOCTL_PROGRAM_ENGINE_NC64 => {
            let a: ProgramEngineNc64 = read_struct(arg)?;
            program_engine(f, a.nc_id, a.dst, a.buffer, a.size, a.offset)
        }

        // ------------------------------------------------------------ mmap info, reset, init
        NEURON_IOCTL_RESOURCE_MMAP_INFO => {
            let mut a: ResourceMmapInfo = read_struct(arg)?;
            let w = arch
                .resource_mmap(a.block, a.block_id, a.resource)
                .ok_or(Errno::EINVAL)?;
            a.offset = w.offset;
            a.size = w.size;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_NC_RESET => {
            let mut a: DeviceReset = read_struct(arg)?;
            let mut g = f.sh.lock();
            for nc in 0..arch.nc_count() {
                if a.nc_map == u32::MAX || a.nc_map & (1 << nc) != 0 {
                    reset_nc(&mut g, nc);
                }
            }
            // Resets complete at once; the request waits to be collected by NC_RESET_READY.
            g.drv.reset_done.insert(f.pid);
            drop(g);
            a.request_id = f.pid;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_NC_RESET_READY => {
            let mut a: DeviceReady = read_struct(arg)?;
            // A finished request reports success once; an unknown id reports failure (1).
            let known = f.sh.lock().drv.reset_done.remove(&a.request_id);
            a.result = if known { 0 } else { 1 };
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_RESET => {
            let mut g = f.sh.lock();
            for nc in 0..arch.nc_count() {
                reset_nc(&mut g, nc);
            }
            g.drv.reset_done.insert(f.pid);
            Ok(0)
        }
        NEURON_IOCTL_DEVICE_READY => {
            // Waits for the caller's reset; reports 1 (success) also when none is pending.
            f.sh.lock().drv.reset_done.remove(&f.pid);
            copy_to_user(arg, &[1u8]).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_RESET_STATUS => copy_to_user(arg, &[1u8]).map(|_| 0),
        NEURON_IOCTL_CINIT_SET_STATE => cinit_set_state(f, arg),
        NEURON_IOCTL_NC_MODEL_STARTED_COUNT => {
            let mut a: NcModelStartedCount = read_struct(arg)?;
            if a.nc_id >= arch.nc_count() {
                return Err(Errno::E2BIG);
            }
            // Only ever incremented on v1 (Inf1) by the driver.
            a.started_count = 0;
            write_struct(arg, &a).map(|_| 0)
        }

        // ------------------------------------------------------------ CRWL
        NEURON_IOCTL_CRWL_READER_ENTER
        | NEURON_IOCTL_CRWL_READER_EXIT
        | NEURON_IOCTL_CRWL_WRITER_ENTER
        | NEURON_IOCTL_CRWL_WRITER_DOWNGRADE => {
            let a: Crwl = read_struct(arg)?;
            crwl(f, cmd, a.nc_id, a.uuid.value)
        }
        NEURON_IOCTL_CRWL_NC_RANGE_MARK | NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0 => {
            let size = if cmd == NEURON_IOCTL_CRWL_NC_RANGE_MARK {
                24
            } else {
                80
            };
            let mut a = CrwlNcMapExt::new_zeroed();
            copy_from_user(arg, &mut a.as_mut_bytes()[..size])?;
            a.bitmap = [0; 8];
            let off = arch.nc_count() * f.sh.index as u32;
            let r = range_mark(
                f,
                a.nc_count,
                a.start_nc_index.saturating_add(off),
                a.end_nc_index.saturating_add(off),
            );
            let (bits, max, res) = match r {
                Ok((bits, max)) => (bits, max, Ok(0)),
                Err((e, max)) => (Vec::new(), max, Err(e)),
            };
            a.max_nc_available = max;
            // The bitmap is reported relative to this fd's device.
            for b in bits {
                if let Some(rel) = b.checked_sub(off as usize) {
                    a.bitmap[rel / 64] |= 1 << (rel % 64);
                }
            }
            copy_to_user(arg, &a.as_bytes()[..size])?;
            res
        }
        NEURON_IOCTL_CRWL_NC_RANGE_UNMARK | NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0 => {
            let size = if cmd == NEURON_IOCTL_CRWL_NC_RANGE_UNMARK {
                24
            } else {
                80
            };
            let mut a = CrwlNcMapExt::new_zeroed();
            copy_from_user(arg, &mut a.as_mut_bytes()[..size])?;
            let off = (arch.nc_count() * f.sh.index as u32) as usize;
            let mut table = f.sh.global.lock_range();
            for rel in 0..512usize {
                if a.bitmap[rel / 64] & (1 << (rel % 64)) != 0 {
                    if let Some(o) = table.get_mut(rel + off) {
                        if *o == f.pid {
                            *o = 0;
                        }
                    }
                }
            }
            Ok(0)
        }

        // ------------------------------------------------------------ datastore, debug, metrics
        NEURON_IOCTL_ACQUIRE_NEURON_DS => {
            let mut a: NeuronDsInfo = read_struct(arg)?;
            let (pa, size) = drvstate::datastore_acquire(&mut f.sh.lock(), a.pid, f.pid)?;
            a.mmap_offset = pa;
            a.size = size as u32;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_RELEASE_NEURON_DS => {
            let a: NeuronDsInfo = read_struct(arg)?;
            let mut g = f.sh.lock();
            // Only the owner's release clears an entry (pid 0 names the caller's own).
            let target = if a.pid == 0 { f.pid } else { a.pid as u32 };
            if target == f.pid {
                drvstate::datastore_release(&mut g, f.pid);
            }
            Ok(0)
        }
        NEURON_IOCTL_NC_PID_STATE_DUMP => {
            let a: NcPidStateDump = read_struct(arg)?;
            if a.nc_id as usize >= CRWL_GLOBAL_SLOTS {
                return Err(Errno::ENOENT);
            }
            let pid = f.sh.global.lock_range()[a.nc_id as usize];
            if pid == 0 {
                return Ok(0);
            }
            let dev = a.nc_id / arch.nc_count();
            if dev as usize >= f.sh.global.count {
                return Err(Errno::EPERM);
            }
            tracing::info!(target: "KDRV", "nc_pid_state_dump: nc_id {} pid {pid} (process state not tracked by the emulator)", a.nc_id);
            Ok(0)
        }
        NEURON_IOCTL_POST_METRIC => {
            let a: PostMetric = read_struct(arg)?;
            if a.data_size > 4 << 20 {
                return Err(Errno::ENOMEM);
            }
            let mut data = vec![0u8; a.data_size as usize];
            copy_from_user(a.data, &mut data)?;
            tracing::debug!(target: "KDRV", "post_metric: {} bytes (firmware CloudWatch post not modelled)", data.len());
            Ok(0)
        }
        NEURON_IOCTL_METRICS_CTRL => {
            let a: MetricsCtrl = read_struct(arg)?;
            if a.mode > 1 {
                return Err(Errno::EINVAL);
            }
            f.sh.lock().drv.metrics_mode = a.mode;
            Ok(0)
        }
        NEURON_IOCTL_POWER_PROFILE => {
            let a: PowerProfile = read_struct(arg)?;
            if a.sz != 8 {
                return Err(Errno::ENXIO);
            }
            if a.ctrl != 0 {
                return Err(Errno::ENOTSUPP);
            }
            if arch.architecture() >= 3 {
                f.sh.lock().drv.power_profile = a.profile;
            }
            Ok(0)
        }
        NEURON_IOCTL_GET_PERFORMANCE_PROFILE => {
            let mut a: PowerProfile = read_struct(arg)?;
            if a.sz != 8 {
                return Err(Errno::ENXIO);
            }
            if a.ctrl != 1 {
                return Err(Errno::ENOTSUPP);
            }
            a.profile = f.sh.lock().drv.power_profile;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_AVAILABLE_PERF_PROFILES => {
            let mut a: AvailablePerfProfiles = read_struct(arg)?;
            // One firmware profile (0, the default), whatever feature is asked about.
            a.num_profiles = 1;
            a.bitmap = [0; 32];
            a.bitmap[0] = 1;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_PRINTK => {
            let a: Printk = read_struct(arg)?;
            if a.size > 512 {
                return Err(Errno::EFAULT);
            }
            let mut buf = vec![0u8; a.size as usize];
            copy_from_user(a.buffer, &mut buf)?;
            if buf.last() != Some(&0) {
                return Err(Errno::EBADMSG);
            }
            let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
            tracing::error!(target: "KDRV", "{}", String::from_utf8_lossy(&buf[..end]));
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

fn reset_nc(g: &mut DevState, nc: u32) {
    g.dev.reset_nc(nc as usize);
    // The core must be initialised again (CINIT token back to INVALID).
    if let Some(s) = g.drv.cinit.get_mut(nc as usize) {
        *s = CINIT_STATE_INVALID;
    }
    // Notification queues of a reset core are destroyed (`driver-abi.md` §7.1).
    let gone: Vec<(u32, u32, u32)> = g.nqs.keys().filter(|k| k.0 == nc).copied().collect();
    for k in gone {
        if let Some(h) = g.nqs.remove(&k) {
            if let Ok(Some(c)) = g.chunks.free(h) {
                release_chunk_memory(g, &c);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn alloc(
    f: &EmuFile,
    size: u64,
    align: u64,
    host: u32,
    channel: u32,
    nc_id: u32,
    mem_type: u32,
    out: u64,
) -> Result<(u64, u64), Errno> {
    let arch = f.sh.arch;
    if nc_id >= arch.nc_count() {
        return Err(Errno::EINVAL);
    }
    if out == 0 {
        return Err(Errno::EFAULT);
    }
    // Out-of-range categories are accepted and re-labelled UNKNOWN (`driver-abi.md` §2.7).
    let mem_type = if MemType(mem_type).is_known() {
        mem_type
    } else {
        unknown_type(host)
    };
    let mut g = f.sh.lock();
    let c = g.chunks.alloc(
        size,
        align,
        host != 0,
        channel,
        nc_id,
        mem_type,
        f.pid,
        Lifespan::CurProcess,
    )?;
    if c.host && !g.add_host_memory(c.pa, c.size) {
        let _ = g.chunks.free(c.handle);
        return Err(Errno::ENOMEM);
    }
    drop(g);
    if let Err(e) = copy_to_user(out, &c.handle.to_le_bytes()) {
        let mut g = f.sh.lock();
        if let Ok(Some(c)) = g.chunks.free(c.handle) {
            release_chunk_memory(&mut g, &c);
        }
        return Err(e);
    }
    Ok((c.handle, c.pa))
}

/// Bounds of `[offset, offset+size)` inside a chunk, as a device address.
fn chunk_range(g: &DevState, handle: u64, offset: u64, size: u64) -> Result<u64, Errno> {
    let c = g.chunks.get(handle).ok_or(Errno::EINVAL)?;
    let end = offset.checked_add(size).ok_or(Errno::EINVAL)?;
    if end > c.size {
        return Err(Errno::EINVAL);
    }
    Ok(c.pa + offset)
}

const COPY_BLOCK: usize = 1 << 20;

fn buf_copy(f: &EmuFile, handle: u64, buffer: u64, size: u64, offset: u64, to_chunk: bool) -> R {
    let addr = chunk_range(&f.sh.lock(), handle, offset, size)?;
    if size > 0 && buffer == 0 {
        return Err(Errno::EFAULT);
    }
    let mut tmp = vec![0u8; (size as usize).min(COPY_BLOCK)];
    let mut done = 0u64;
    while done < size {
        let n = ((size - done) as usize).min(COPY_BLOCK);
        let t = &mut tmp[..n];
        if to_chunk {
            copy_from_user(buffer + done, t)?;
            f.sh.lock()
                .dev
                .write(addr + done, t)
                .map_err(|_| Errno::EFAULT)?;
        } else {
            f.sh.lock()
                .dev
                .read(addr + done, t)
                .map_err(|_| Errno::EFAULT)?;
            copy_to_user(buffer + done, t)?;
        }
        done += n as u64;
    }
    f.sh.kick.notify_all();
    Ok(0)
}

fn memset(f: &EmuFile, handle: u64, offset: u64, value: u32, size: u64) -> R {
    let mut g = f.sh.lock();
    let addr = chunk_range(&g, handle, offset, size)?;
    g.dev
        .fill(addr, size, value as u8)
        .map_err(|_| Errno::EFAULT)?;
    Ok(0)
}

fn mem_copy(f: &EmuFile, src: u64, dst: u64, size: u64, src_off: u64, dst_off: u64) -> R {
    let mut g = f.sh.lock();
    let s = chunk_range(&g, src, src_off, size)?;
    let d = chunk_range(&g, dst, dst_off, size)?;
    let mut tmp = vec![0u8; (size as usize).min(COPY_BLOCK)];
    let mut done = 0u64;
    while done < size {
        let n = ((size - done) as usize).min(COPY_BLOCK);
        g.dev
            .read(s + done, &mut tmp[..n])
            .map_err(|_| Errno::EFAULT)?;
        g.dev
            .write(d + done, &tmp[..n])
            .map_err(|_| Errno::EFAULT)?;
        done += n as u64;
    }
    Ok(0)
}

fn check_queue(f: &EmuFile, eng: u32, q: u32) -> Result<(), Errno> {
    if eng >= f.sh.arch.dma_engines() || q >= 16 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn queue_init(f: &EmuFile, a: &DmaQueueInit) -> R {
    check_queue(f, a.eng_id, a.qid)?;
    if a.rxc_handle != 0 {
        return Err(Errno::EINVAL);
    }
    let mut g = f.sh.lock();
    let ring = |g: &DevState, h: u64, n: u32| -> Result<u64, Errno> {
        if h == 0 {
            return Ok(0);
        }
        let c = g.chunks.get(h).ok_or(Errno::EINVAL)?;
        validate_ring(c.pa, n).map_err(|_| Errno::EINVAL)?;
        Ok(c.pa)
    };
    let tx = ring(&g, a.tx_handle, a.tx_desc_count)?;
    let rx = ring(&g, a.rx_handle, a.rx_desc_count)?;
    let (txn, rxn) = (
        if a.tx_handle == 0 { 0 } else { a.tx_desc_count },
        if a.rx_handle == 0 { 0 } else { a.rx_desc_count },
    );
    g.dev
        .dma_queue_init(a.eng_id as usize, a.qid as usize, tx, txn, rx, rxn)
        .map_err(|_| Errno::EINVAL)?;
    g.queue_owner.insert((a.eng_id, a.qid), f.pid);
    Ok(0)
}

fn copy_descriptors(
    f: &EmuFile,
    handle: u64,
    buffer: u64,
    num: u32,
    offset: u64,
    queue_type: u32,
) -> R {
    if queue_type > 1 {
        return Err(Errno::EINVAL);
    }
    let bytes = num as u64 * 16;
    let addr = chunk_range(&f.sh.lock(), handle, offset, bytes)?;
    let mut data = vec![0u8; bytes as usize];
    copy_from_user(buffer, &mut data)?;
    let mut g = f.sh.lock();
    let host_bit = f.sh.arch.host_base_bit();
    // A host-memory buffer address must fall inside some chunk (`driver-abi.md` §2.3).
    for d in data.chunks_exact(16) {
        let desc = UdmaDesc::read_from_bytes(d).map_err(|_| Errno::EINVAL)?;
        let a = desc.buf_ptr;
        if a & host_bit != 0 && g.chunks.find_pa(a).is_none() {
            return Err(Errno::EINVAL);
        }
    }
    g.dev.write(addr, &data).map_err(|_| Errno::EFAULT)?;
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn nq_init(
    f: &EmuFile,
    nc: u32,
    dev_type: u32,
    nq_type: u32,
    engine: u32,
    size: u32,
    host: bool,
    channel: u32,
    force: bool,
) -> Result<(u64, u64), Errno> {
    let arch = f.sh.arch;
    if dev_type != NQ_DEVICE_TYPE_NEURON_CORE {
        // TOP_SP queues (collectives sequencers) are not modelled.
        return Err(Errno::EINVAL);
    }
    if nc >= arch.nc_count()
        || nq_type
            .checked_mul(16)
            .and_then(|v| v.checked_add(engine))
            .is_none_or(|id| id >= MAX_NQ)
        || engine >= 16
    {
        return Err(Errno::EINVAL);
    }
    if !size.is_power_of_two() || (size as usize) < ENTRY_SIZE {
        return Err(Errno::EINVAL);
    }
    let mut g = f.sh.lock();
    let key = (nc, nq_type, engine);
    let existing = g.nqs.get(&key).and_then(|h| g.chunks.get(*h)).cloned();
    let c = match existing {
        Some(c) if !force && c.size >= size as u64 && c.host == host => c,
        other => {
            if let Some(old) = other {
                g.nqs.remove(&key);
                if let Ok(Some(c)) = g.chunks.free(old.handle) {
                    release_chunk_memory(&mut g, &c);
                }
            }
            let mt = if host {
                MemType::NOTIFICATION_HOST
            } else {
                MemType::NOTIFICATION_DEVICE
            };
            // Device NQs are aligned to their own size (`driver-abi.md` §4).
            let align = if host { 0 } else { size as u64 };
            let c = g.chunks.alloc(
                size as u64,
                align,
                host,
                channel,
                nc,
                mt.0,
                f.pid,
                Lifespan::Device,
            )?;
            if c.host && !g.add_host_memory(c.pa, c.size) {
                let _ = g.chunks.free(c.handle);
                return Err(Errno::ENOMEM);
            }
            g.nqs.insert(key, c.handle);
            c
        }
    };
    g.dev
        .nq_configure(nc as usize, nq_type as u8, engine as u8, c.pa, size as u64);
    let off = if c.host { c.pa } else { u64::MAX };
    Ok((off, c.handle))
}

/// Claim `count` consecutive free global core slots in `[start, end]` for the caller (first
/// fit). Returns the claimed slots and the largest free run seen, or the errno and that run.
fn range_mark(
    f: &EmuFile,
    count: u32,
    start: u32,
    end: u32,
) -> Result<(Vec<usize>, u32), (Errno, u32)> {
    let n = CRWL_GLOBAL_SLOTS as u32;
    if start > end || start >= n || end >= n {
        return Err((Errno::EINVAL, 0));
    }
    let mut table = f.sh.global.lock_range();
    let mut best = 0u32;
    let mut i = start;
    while i <= end {
        if table[i as usize] != 0 {
            i += 1;
            continue;
        }
        let mut run = 0u32;
        let mut j = i;
        while j <= end && run < count && table[j as usize] == 0 {
            run += 1;
            j += 1;
        }
        if run >= count {
            let slots: Vec<usize> = (i..i + count).map(|k| k as usize).collect();
            for &k in &slots {
                table[k] = f.pid;
            }
            return Ok((slots, best.max(run)));
        }
        best = best.max(run);
        i = j + 1;
    }
    Err((Errno::EBUSY, best))
}

/// The firmware routing id of device `index` (the inverse of the arch's routing table).
fn routing_id(arch: Arch, index: u32) -> u32 {
    arch.routing_id_table()
        .and_then(|t| t.iter().position(|&d| d == index))
        .map_or(index, |p| p as u32)
}

fn unknown_type(host: u32) -> u32 {
    if host != 0 {
        MemType::UNKNOWN_HOST.0
    } else {
        MemType::UNKNOWN_DEVICE.0
    }
}

fn chunk_pa(f: &EmuFile, h: u64) -> Result<u64, Errno> {
    f.sh.lock().chunks.get(h).map(|c| c.pa).ok_or(Errno::EINVAL)
}

/// The device-memory mapping of the caller holding `[va, va+len)`: (device index, HBM index).
fn va_lookup(f: &EmuFile, va: u64, len: u64) -> Option<(usize, u32)> {
    let maps = f.sh.global.lock_va();
    let (&start, &(pid, mlen, dev, hbm)) = maps.range(..=(va as usize)).next_back()?;
    let end = va.checked_add(len)?;
    (pid == f.pid && end <= start as u64 + mlen as u64).then_some((dev, hbm))
}

fn apps_info(f: &EmuFile, arg: u64) -> R {
    let mut hdr: GetAppsInfo = read_struct(arg)?;
    let g = f.sh.lock();
    let mut out: Vec<AppInfo> = Vec::new();
    for p in g.procs.iter().flatten() {
        if out.len() >= hdr.capacity as usize {
            break;
        }
        let mut e = AppInfo::new_zeroed();
        e.pid = p.pid as i32;
        if hdr.apps_info_flags & neuron_abi::consts::APPS_INFO_PID_NC_LOCK_INFO != 0 {
            for (nc, c) in g.drv.crwl.iter().take(4).enumerate() {
                if c.writer_pid == p.pid && (c.writer_acquired || c.reader_count > 0) {
                    e.nc_lock_map |= 1 << nc;
                    e.uuid_data[nc].value = c.uuid;
                }
            }
        }
        if hdr.apps_info_flags & neuron_abi::consts::APPS_INFO_PID_MEM_USAGE != 0 {
            for c in g.chunks.iter().filter(|c| c.pid == p.pid) {
                if c.host {
                    e.host_mem_size += c.size;
                } else {
                    e.device_mem_size += c.size;
                }
            }
        }
        out.push(e);
    }
    drop(g);
    hdr.size = out.len() as u32;
    write_struct(arg, &hdr)?;
    copy_to_user(arg + 16, out.as_bytes()).map(|_| 0)
}

fn check_h2t_qid(q: i32) -> Result<(), Errno> {
    if q == -1 || (0..16).contains(&q) {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// Most batches / ops per MEM_BUF_ZEROCOPY64_BATCHES call the emulator takes.
const ZC_MAX_ITEMS: u32 = 1 << 16;

fn zerocopy_batches(f: &EmuFile, arg: u64) -> R {
    let a: MemBufCopy64zcBatches = read_struct(arg)?;
    check_h2t_qid(a.h2t_qid)?;
    if a.num_batches > ZC_MAX_ITEMS {
        return Err(Errno::EINVAL);
    }
    for i in 0..a.num_batches as u64 {
        let b: MemcpyBatch = read_struct(a.batches_ptr.wrapping_add(i * 40))?;
        if b.num_ops > ZC_MAX_ITEMS {
            return Err(Errno::EINVAL);
        }
        for j in 0..b.num_ops as u64 {
            let op: TensorBatchOp = read_struct(b.ops_ptr.wrapping_add(j * 24))?;
            let off = b
                .mem_handle_offset
                .checked_add(op.offset)
                .ok_or(Errno::EINVAL)?;
            buf_copy(
                f,
                b.mem_handle,
                op.buffer,
                op.size,
                off,
                a.is_copy_to_device != 0,
            )?;
        }
    }
    Ok(0)
}

#[allow(clippy::too_many_arguments)]
fn copy_async(
    f: &EmuFile,
    src: u64,
    dst: u64,
    size: u64,
    src_off: u64,
    dst_off: u64,
    pwait: u32,
) -> Result<u32, Errno> {
    let pwait = pwait as i32;
    if pwait != -1 && !(1..=2).contains(&pwait) {
        return Err(Errno::EINVAL);
    }
    if size > ASYNC_MAX {
        return Err(Errno::EINVAL);
    }
    let nc = {
        let g = f.sh.lock();
        let s = g.chunks.get(src).ok_or(Errno::EINVAL)?;
        let d = g.chunks.get(dst).ok_or(Errno::EINVAL)?;
        // The device side chooses the H2T queue; host to host uses the destination's.
        if !s.host {
            s.nc
        } else {
            d.nc
        }
    };
    // Synchronous underneath: the transfer is complete when this returns.
    mem_copy(f, src, dst, size, src_off, dst_off)?;
    let mut g = f.sh.lock();
    let last = g.drv.async_last.get_mut(nc as usize).ok_or(Errno::EINVAL)?;
    *last = if *last == 1 { 2 } else { 1 };
    Ok(*last as u32)
}

fn descriptor_copyout(f: &EmuFile, arg: u64) -> R {
    let a: DmaDescriptorCopyout = read_struct(arg)?;
    if a.count == 0 {
        return Err(Errno::EINVAL);
    }
    check_queue(f, a.eng_id, a.qid)?;
    let g = f.sh.lock();
    let st = g
        .dev
        .dma_queue_state(a.eng_id as usize, a.qid as usize)
        .ok_or(Errno::EINVAL)?;
    let (base, len) = match a.r#type {
        0 => (st.tx_base, st.tx_len),
        1 => (st.rx_base, st.rx_len),
        _ => return Err(Errno::EINVAL),
    };
    if !st.enabled || len == 0 {
        return Err(Errno::EINVAL);
    }
    if a.count as u64 + a.start_index as u64 > len as u64 {
        return Err(EFBIG);
    }
    // The ring must be a chunk (located through the queue's base register).
    if g.chunks.find_pa(base).is_none() {
        return Err(Errno::EINVAL);
    }
    let mut buf = vec![0u8; a.count as usize * 16];
    g.dev
        .read(base + a.start_index as u64 * 16, &mut buf)
        .map_err(|_| Errno::EINVAL)?;
    drop(g);
    copy_to_user(a.buffer, &buf).map(|_| 0)
}

fn h2t_alloc(f: &EmuFile, arg: u64) -> R {
    let mut a: H2tDmaAllocQueues = read_struct(arg)?;
    let arch = f.sh.arch;
    let nc = a.nc_id as u32;
    if a.sz != 20 || nc >= arch.nc_count() {
        return Err(Errno::EINVAL);
    }
    let want = a.copy_queue_cnt as u32 + a.service_queue_cnt as u32;
    if want >= 16 {
        return Err(Errno::EINVAL);
    }
    let eng = arch.h2t_engine(nc).ok_or(Errno::EINVAL)?;
    let mut g = f.sh.lock();
    // Queues in use on the engine: every default queue of the NCs sharing it, and every
    // reservation already made.
    let mut used = 0u32;
    for other in 0..arch.nc_count() {
        if arch.h2t_engine(other) == Some(eng) {
            used |= 1 << arch.h2t_default_queue(other).unwrap_or(0);
            let h = &g.drv.h2t[other as usize];
            used |= h.copy_bmap | h.service_bmap;
        }
    }
    let take = |n: u16, used: &mut u32| -> Option<u32> {
        let mut bm = 0u32;
        for _ in 0..n {
            let q = (0..16).find(|q| *used & (1 << q) == 0)?;
            *used |= 1 << q;
            bm |= 1 << q;
        }
        Some(bm)
    };
    let copy = take(a.copy_queue_cnt, &mut used).ok_or(Errno::ENOMEM)?;
    let service = take(a.service_queue_cnt, &mut used).ok_or(Errno::ENOMEM)?;
    let h = &mut g.drv.h2t[nc as usize];
    h.copy_bmap |= copy;
    h.service_bmap |= service;
    drop(g);
    a.copy_queue_bmap = copy;
    a.service_queue_bmap = service;
    a.copy_default_queue = arch.h2t_default_queue(nc).unwrap_or(0);
    write_struct(arg, &a).map(|_| 0)
}

/// Entries per H2D completion queue the emulator creates (project-defined).
const COMPL_QUEUE_CAPACITY: u32 = 256;

fn compl_queues(f: &EmuFile, arg: u64) -> R {
    let mut a: GetAsyncH2tDmaComplQueues = read_struct(arg)?;
    let arch = f.sh.arch;
    if a.nc_id >= arch.nc_count() || a.qid_bitmap >> 16 != 0 {
        return Err(Errno::EINVAL);
    }
    let mut g = f.sh.lock();
    let h = g.drv.h2t[a.nc_id as usize].clone();
    let ready = h.copy_bmap | (1 << arch.h2t_default_queue(a.nc_id).unwrap_or(0));
    if a.qid_bitmap & !ready != 0 {
        // A queue that was never set up has no completion queue.
        return Err(Errno::EINVAL);
    }
    let bytes = 16 + COMPL_QUEUE_CAPACITY as u64 * 24;
    for q in 0..16u32 {
        if a.qid_bitmap & (1 << q) == 0 {
            continue;
        }
        let key = (a.nc_id, q);
        let pa = match g.drv.compl_queues.get(&key).and_then(|h| g.chunks.get(*h)) {
            Some(c) => c.pa,
            None => {
                let c = g.chunks.alloc(
                    bytes,
                    0,
                    true,
                    0,
                    a.nc_id,
                    MemType::NCDEV_HOST.0,
                    0,
                    Lifespan::Device,
                )?;
                if !g.add_host_memory(c.pa, c.size) {
                    let _ = g.chunks.free(c.handle);
                    return Err(Errno::ENOMEM);
                }
                let _ = g.dev.write(c.pa, &COMPL_QUEUE_CAPACITY.to_le_bytes());
                g.drv.compl_queues.insert(key, c.handle);
                c.pa
            }
        };
        a.compl_queue_info[q as usize] = AsyncH2tComplQueueInfo {
            mmap_offset: pa,
            mmap_size: bytes as u32,
            ..FromZeros::new_zeroed()
        };
    }
    drop(g);
    write_struct(arg, &a).map(|_| 0)
}

/// The UDMA engine bases in BAR0 and each engine's span (`driver-abi.md` §3.7).
fn udma_engines(arch: Arch) -> Vec<(u64, u64)> {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => {
            let mut v: Vec<(u64, u64)> = (0..16u64)
                .flat_map(|e| {
                    [
                        (0x3000_0000 + e * 0x4_0000, 0x4_0000),
                        (0x3070_0000 + e * 0x4_0000, 0x4_0000),
                    ]
                })
                .collect();
            v.push((0x3060_0000, 0x4_0000));
            v.push((0x30d0_0000, 0x4_0000));
            v
        }
        Arch::V3Trn2 => {
            let mut v: Vec<(u64, u64)> = [0x8200_0000u64, 0x9400_0000, 0xa200_0000, 0xb400_0000]
                .iter()
                .flat_map(|s| (0..32u64).map(move |e| (s + e * 0x10_0000, 0x4_0000)))
                .collect();
            for b in [0x680_0000u64, 0x690_0000, 0x4680_0000, 0x4690_0000] {
                v.push((b, 0x4_0000));
            }
            v
        }
    }
}

/// Whether a BAR_WRITE to BAR0 offset `off` is one the driver blocks: a UDMA queue's ring base
/// (DRBP/CRBP low/high) or tail increment (DRTP_INC), or the firmware mailbox registers.
fn bar_write_blocked(arch: Arch, off: u64) -> bool {
    let misc = arch.misc_ram_bar0_offset();
    if let Some(m) = off.checked_sub(misc) {
        if (0x1f0..0x200).contains(&m) || m == 0x800 {
            return true;
        }
    }
    udma_engines(arch).iter().any(|&(b, span)| {
        let Some(rel) = off.checked_sub(b).filter(|r| *r < span) else {
            return false;
        };
        let q = if (0x1000..0x1_1000).contains(&rel) {
            rel - 0x1000
        } else if (0x2_1000..0x3_1000).contains(&rel) {
            rel - 0x2_1000
        } else {
            return false;
        };
        matches!(q % 0x1000, 0x28 | 0x2c | 0x38 | 0x44 | 0x48)
    })
}

/// Misc-RAM words a runtime may write (runtime-reserved ranges, `driver-abi.md` §7.1).
fn misc_ram_writable(m: u64) -> bool {
    (0xc0..=0xf0).contains(&m) || (0x1a0..=0x1d0).contains(&m)
}

fn bar_read_reg(g: &DevState, arch: Arch, index: usize, off: u64) -> u32 {
    for nc in 0..arch.nc_count() {
        let Some(tpb) = arch.tpb_bar0_offset(nc) else {
            continue;
        };
        let page = tpb + 0x270_0000;
        if (page..page + 0x2000).contains(&off) {
            return g
                .dev
                .regs(nc as usize)
                .and_then(|r| r.read_reg(off - page))
                .unwrap_or(0);
        }
    }
    if let Some(m) = off.checked_sub(arch.misc_ram_bar0_offset()) {
        match m {
            0x00 => return 6, // firmware API version (ECC counters in the API ≥ 6 encoding)
            0x24 => return routing_id(arch, index as u32),
            0x38 => return 0x4e45_0000 | index as u32, // serial number, low word (made up)
            0x3c => return 0x0000_0e31,                // serial number, high word (made up)
            _ if misc_ram_writable(m) => return g.drv.misc_ram.get(&m).copied().unwrap_or(0),
            _ => {}
        }
    }
    0
}

fn bar_rw(f: &EmuFile, arg: u64, read: bool) -> R {
    let a: BarRw = read_struct(arg)?;
    let arch = f.sh.arch;
    if a.bar != 0 && !(read && a.bar == 2) {
        return Err(Errno::EINVAL);
    }
    if a.count > MAX_REGS {
        return Err(Errno::EINVAL);
    }
    // bar 0: one absolute address per register; bar 2: one base, registers in sequence.
    let n_addr = if a.bar == 0 { a.count as usize } else { 1 };
    let mut addrs = vec![0u64; n_addr];
    copy_from_user(a.address, addrs.as_mut_bytes())?;
    let size = bar0_size(arch);
    let offs: Vec<u64> = (0..a.count as u64)
        .map(|i| {
            let kva = if a.bar == 0 {
                addrs[i as usize]
            } else {
                addrs.first().copied().unwrap_or(0).wrapping_add(4 * i)
            };
            kva.checked_sub(BAR0_KVA)
                .filter(|o| *o + 4 <= size && o % 4 == 0)
                .ok_or(Errno::EINVAL)
        })
        .collect::<Result<_, _>>()?;
    if read {
        let g = f.sh.lock();
        let vals: Vec<u32> = offs
            .iter()
            .map(|&o| bar_read_reg(&g, arch, f.sh.index, o))
            .collect();
        drop(g);
        return copy_to_user(a.data, vals.as_bytes()).map(|_| 0);
    }
    let mut vals = vec![0u32; a.count as usize];
    copy_from_user(a.data, vals.as_mut_bytes())?;
    if offs.iter().any(|&o| bar_write_blocked(arch, o)) {
        return Err(Errno::EINVAL);
    }
    let mut g = f.sh.lock();
    for (&o, &v) in offs.iter().zip(&vals) {
        let mut done = false;
        for nc in 0..arch.nc_count() {
            let Some(page) = arch.tpb_bar0_offset(nc).map(|t| t + 0x270_0000) else {
                continue;
            };
            if (page..page + 0x2000).contains(&o) {
                g.dev.reg_write(nc as usize, o - page, v);
                done = true;
            }
        }
        if let Some(m) = o.checked_sub(arch.misc_ram_bar0_offset()) {
            if !done && misc_ram_writable(m) {
                g.drv.misc_ram.insert(m, v);
            }
        }
        // Other registers accept the store and keep nothing (not modelled).
    }
    drop(g);
    f.sh.kick.notify_all();
    Ok(0)
}

/// PROGRAM_ENGINE destinations (`driver-abi.md` §2.4, "program-engine regions"): v2 the two
/// TPB windows and the six TOP_SP windows; v3 the eight TPB device ranges and the HBMs (the
/// TOP_SP and PREPROC ranges of v3 are not listed in the reference and are left out).
fn program_regions(arch: Arch) -> Vec<(u64, u64)> {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => {
            vec![
                (0xfff_c000_0000, 2 * 0x400_0000),
                (0xfff_d000_0000, 6 * 0x40_0000),
            ]
        }
        Arch::V3Trn2 => {
            let mut v: Vec<(u64, u64)> = [
                0x20_0000_0000u64,
                0x30_0000_0000,
                0x60_0000_0000,
                0x70_0000_0000,
                0x8020_0000_0000,
                0x8030_0000_0000,
                0x8060_0000_0000,
                0x8070_0000_0000,
            ]
            .iter()
            .map(|&b| (b, 0x8_0400_0000))
            .collect();
            v.extend(arch.hbm_bases().iter().map(|&b| (b, arch.hbm_size())));
            v
        }
    }
}

fn program_engine(f: &EmuFile, nc: u32, dst: u64, buffer: u64, size: u64, offset: u64) -> R {
    let arch = f.sh.arch;
    let at = dst.checked_add(offset).ok_or(Errno::ENOMEM)?;
    let end = at.checked_add(size).ok_or(Errno::ENOMEM)?;
    if !program_regions(arch)
        .iter()
        .any(|&(b, l)| at >= b && end <= b + l)
    {
        return Err(Errno::ENOMEM);
    }
    if size == 0 || nc >= arch.nc_count() {
        // The bounce buffer allocation fails (size 0) or has no H2T queue (bad nc).
        return Err(Errno::ENOMEM);
    }
    let src = buffer.checked_add(offset).ok_or(Errno::EFAULT)?;
    let mut tmp = vec![0u8; (size as usize).min(COPY_BLOCK)];
    let mut done = 0u64;
    while done < size {
        let n = ((size - done) as usize).min(COPY_BLOCK);
        let t = &mut tmp[..n];
        copy_from_user(src + done, t)?;
        f.sh.lock()
            .dev
            .write(at + done, t)
            .map_err(|_| Errno::EIO)?;
        done += n as u64;
    }
    f.sh.kick.notify_all();
    Ok(0)
}

fn cinit_set_state(f: &EmuFile, arg: u64) -> R {
    let mut a: CinitSet = read_struct(arg)?;
    if a.nc_id >= f.sh.arch.nc_count() {
        return Err(Errno::E2BIG);
    }
    let nc = a.nc_id as usize;
    let mut g = f.sh.lock();
    match a.state {
        CINIT_STATE_STARTED => {
            let cur = g.drv.cinit[nc];
            if cur == CINIT_STATE_INVALID {
                // The caller got the token: it must initialise the core.
                g.drv.cinit[nc] = CINIT_STATE_STARTED;
            } else if cur == CINIT_STATE_STARTED {
                // Someone else is initialising: wait (bounded) for it to complete.
                let t = std::time::Instant::now();
                while g.drv.cinit[nc] == CINIT_STATE_STARTED && t.elapsed() < CINIT_WAIT {
                    drop(g);
                    std::thread::sleep(Duration::from_millis(2));
                    g = f.sh.lock();
                }
            }
        }
        // COMPLETED is only valid from STARTED.
        CINIT_STATE_COMPLETED if g.drv.cinit[nc] == CINIT_STATE_STARTED => {
            g.drv.cinit[nc] = CINIT_STATE_COMPLETED;
        }
        _ => {}
    }
    a.new_state = g.drv.cinit[nc];
    drop(g);
    write_struct(arg, &a).map(|_| 0)
}

fn crwl(f: &EmuFile, cmd: u32, nc: u32, uuid: [u8; 32]) -> R {
    if nc >= MAX_NC_PER_DEVICE {
        return Err(Errno::EINVAL);
    }
    let nc = nc as usize;
    let pid = f.pid;
    let valid = |c: &drvstate::Crwl| -> Result<(), Errno> {
        if c.uuid != uuid || c.writer_pid != pid {
            return Err(Errno::ENOENT);
        }
        Ok(())
    };
    let mut g = f.sh.lock();
    match cmd {
        NEURON_IOCTL_CRWL_READER_ENTER => {
            let t = std::time::Instant::now();
            while g.drv.crwl[nc].writer_acquired {
                if t.elapsed() > CRWL_READER_WAIT {
                    return Err(Errno::EBUSY);
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                g = f.sh.lock();
            }
            valid(&g.drv.crwl[nc])?;
            g.drv.crwl[nc].reader_count += 1;
            Ok(0)
        }
        NEURON_IOCTL_CRWL_READER_EXIT => {
            valid(&g.drv.crwl[nc])?;
            let c = &mut g.drv.crwl[nc];
            if c.reader_count == 0 {
                return Err(Errno::EINVAL);
            }
            c.reader_count -= 1;
            Ok(0)
        }
        NEURON_IOCTL_CRWL_WRITER_ENTER => {
            let t = std::time::Instant::now();
            while g.drv.crwl[nc].writer_acquired || g.drv.crwl[nc].reader_count > 0 {
                if t.elapsed() > CRWL_WRITER_WAIT {
                    return Err(Errno::EBUSY);
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                g = f.sh.lock();
            }
            let c = &mut g.drv.crwl[nc];
            c.writer_acquired = true;
            // The same process already loaded this model: the lock is still taken.
            if c.writer_pid == pid && c.uuid == uuid {
                return Err(Errno::EALREADY);
            }
            c.writer_pid = pid;
            c.uuid = uuid;
            Ok(0)
        }
        _ => {
            // CRWL_WRITER_DOWNGRADE
            if !g.drv.crwl[nc].writer_acquired {
                return Err(Errno::EINVAL);
            }
            valid(&g.drv.crwl[nc])?;
            let c = &mut g.drv.crwl[nc];
            c.writer_acquired = false;
            c.reader_count = 1;
            Ok(0)
        }
    }
}
