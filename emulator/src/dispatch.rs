//! ioctl dispatch: one handler per command value, validating every argument the way the real
//! driver does (`driver-abi.md` §2.3). Commands not handled here answer as
//! `docs/abi-coverage.md` says.

use crate::chunks::Lifespan;
use crate::uaccess::{copy_from_user, copy_to_user, read_struct, write_struct};
use crate::{release_chunk_memory, DevState, EmuFile};
use neuron_abi::consts::{MemType, DRIVER_FEATURE_FLAGS1_2_26, MAX_NQ, NQ_DEVICE_TYPE_NEURON_CORE};
use neuron_abi::ioctl::*;
use neuron_abi::notify::ENTRY_SIZE;
use neuron_abi::structs::*;
use neuron_abi::udma::{validate_ring, UdmaDesc};
use neuron_abi::Errno;
use zerocopy::{FromBytes, FromZeros};

/// A fake kernel virtual address for BAR0 (what DEVICE_INFO reports as `bar_address[0]`).
pub const BAR0_KVA: u64 = 0xffff_c900_0000_0000;
/// The PCI revision the emulated devices report.
pub const REVISION: u32 = 0;

type R = Result<i32, Errno>;

pub(crate) fn ioctl(f: &EmuFile, cmd: u32, arg: u64) -> R {
    let Some(info) = lookup(cmd) else {
        return Err(Errno::EINVAL);
    };
    if f.misc && !info.misc_fd_ok {
        return Err(Errno::EINVAL);
    }
    let arch = f.sh.arch;
    match cmd {
        NEURON_IOCTL_DEVICE_BASIC_INFO => {
            let v = DeviceBasicInfo {
                architecture: arch.architecture(),
                revision: REVISION,
            };
            write_struct(arg, &v).map(|_| 0)
        }
        NEURON_IOCTL_DEVICE_INFO => {
            let mut v: DeviceInfo = read_struct(arg)?;
            v.architecture = arch.architecture();
            v.revision = REVISION;
            v.connected_device_count = 0;
            v.connected_devices = [0; 8];
            v.bar_address = [BAR0_KVA, 0];
            v.bar_size = [0x1_0000_0000, 0];
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
        NEURON_IOCTL_DEVICE_INIT
        | NEURON_IOCTL_DEVICE_RELEASE
        | NEURON_IOCTL_DMA_ENG_INIT
        | NEURON_IOCTL_DMA_QUEUE_RELEASE
        | NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1 => Ok(0),
        NEURON_IOCTL_DMA_QUIESCE_QUEUES => Err(Errno::ENOIOCTLCMD),

        // ------------------------------------------------------------ memory
        NEURON_IOCTL_MEM_ALLOC => {
            let a: MemAlloc = read_struct(arg)?;
            alloc(
                f,
                a.size,
                0,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                MemType::UNKNOWN_DEVICE.0,
                a.mem_handle,
            )
        }
        NEURON_IOCTL_MEM_ALLOC_V2 => {
            let a: MemAllocV2 = read_struct(arg)?;
            alloc(
                f,
                a.size,
                a.align,
                a.host_memory,
                a.dram_channel,
                a.nc_id,
                MemType::UNKNOWN_DEVICE.0,
                a.mem_handle,
            )
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
            let pa =
                f.sh.lock()
                    .chunks
                    .get(a.mem_handle)
                    .ok_or(Errno::EINVAL)?
                    .pa;
            copy_to_user(a.pa, &pa.to_le_bytes()).map(|_| 0)
        }
        NEURON_IOCTL_MEM_GET_INFO => {
            let a: MemGetInfo = read_struct(arg)?;
            let pa =
                f.sh.lock()
                    .chunks
                    .get(a.mem_handle)
                    .ok_or(Errno::EINVAL)?
                    .pa;
            copy_to_user(a.pa, &pa.to_le_bytes())?;
            if a.mmap_offset != 0 {
                copy_to_user(a.mmap_offset, &pa.to_le_bytes())?;
            }
            Ok(0)
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
            if (a.num_entries_in as usize) < list.len() {
                write_struct(arg, &a)?;
                return Err(Errno::EAGAIN);
            }
            for (i, c) in list.iter().enumerate() {
                write_struct(a.data + (i * std::mem::size_of::<MemChunkInfo>()) as u64, c)?;
            }
            write_struct(arg, &a).map(|_| 0)
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

        // ------------------------------------------------------------ DMA
        NEURON_IOCTL_DMA_QUEUE_INIT => {
            let a: DmaQueueInit = read_struct(arg)?;
            queue_init(f, &a)
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
            check_queue(f, a.eng_id, a.qid).map(|_| 0)
        }

        // ------------------------------------------------------------ notifications
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
            if a.event_index > 256 || a.nc_id >= arch.nc_count() {
                return Err(Errno::EINVAL);
            }
            if a.event_index == 256 {
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

        // ------------------------------------------------------------ mmap info, reset
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
            let ncs = arch.nc_count();
            for nc in 0..ncs {
                if a.nc_map == u32::MAX || a.nc_map & (1 << nc) != 0 {
                    reset_nc(&mut g, nc);
                }
            }
            drop(g);
            a.request_id = f.pid;
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_NC_RESET_READY => {
            let mut a: DeviceReady = read_struct(arg)?;
            // Resets complete synchronously; an unknown request id reports failure (1).
            a.result = if a.request_id == f.pid { 0 } else { 1 };
            write_struct(arg, &a).map(|_| 0)
        }
        NEURON_IOCTL_CRWL_NC_RANGE_MARK => {
            let mut a: CrwlNcMap = read_struct(arg)?;
            match range_mark(f, a.nc_count, a.start_nc_index, a.end_nc_index) {
                Ok((bitmap, max)) => {
                    a.bitmap = bitmap;
                    a.max_nc_available = max;
                    write_struct(arg, &a).map(|_| 0)
                }
                Err((e, max)) => {
                    // The driver reports the largest free run along with EBUSY.
                    a.max_nc_available = max;
                    write_struct(arg, &a)?;
                    Err(e)
                }
            }
        }
        NEURON_IOCTL_CRWL_NC_RANGE_UNMARK => {
            let a: CrwlNcMap = read_struct(arg)?;
            let mut g = f.sh.lock();
            for (nc, o) in g.nc_owner.iter_mut().enumerate() {
                if a.bitmap & (1 << nc) != 0 && *o == Some(f.pid) {
                    *o = None;
                }
            }
            Ok(0)
        }
        _ => Err(Errno::EINVAL),
    }
}

fn reset_nc(g: &mut DevState, nc: u32) {
    g.dev.reset_nc(nc as usize);
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
) -> R {
    let arch = f.sh.arch;
    if nc_id >= arch.nc_count() {
        return Err(Errno::EINVAL);
    }
    if out == 0 {
        return Err(Errno::EFAULT);
    }
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
    if c.host
        && g.dev
            .add_host_region(c.pa & !arch.host_base_bit(), c.size as usize)
            .is_none()
    {
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
    Ok(0)
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
            if c.host
                && g.dev
                    .add_host_region(c.pa & !arch.host_base_bit(), c.size as usize)
                    .is_none()
            {
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

fn range_mark(f: &EmuFile, count: u32, start: u32, end: u32) -> Result<(u64, u32), (Errno, u32)> {
    let mut g = f.sh.lock();
    let n = g.nc_owner.len() as u32;
    if count == 0 || start > end || end >= n {
        return Err((Errno::EINVAL, 0));
    }
    let mut best = 0u32;
    let mut run = 0u32;
    for nc in start..=end {
        if g.nc_owner[nc as usize].is_none() {
            run += 1;
            best = best.max(run);
            if run == count {
                let first = nc + 1 - count;
                let mut bitmap = 0u64;
                for k in first..=nc {
                    g.nc_owner[k as usize] = Some(f.pid);
                    bitmap |= 1 << k;
                }
                return Ok((bitmap, best));
            }
        } else {
            run = 0;
        }
    }
    Err((Errno::EBUSY, best))
}
