//! Memory-chunk ioctls: allocation (MEM_ALLOC / V2 / V2MT / V2MT64 / V2MT64_PA folded into one
//! request), free, chunk info and reverse lookup, chunk dumps, dma-buf export and host-memory
//! pinning (`driver-abi.md` §2.3, §8).

use super::info::va_lookup;
use super::{Ctx, R};
use crate::chunks::Lifespan;
use crate::{drvstate, release_chunk_memory, DevState};
use neuron_abi::consts::MemType;
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

/// One allocation request, whatever the struct version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Alloc {
    size: u64,
    align: u64,
    host: u32,
    channel: u32,
    nc_id: u32,
    mem_type: u32,
    /// User pointer receiving the handle.
    out: u64,
}

/// MEM_MC_GET_INFO's two versions.
#[derive(Debug)]
pub(crate) enum McInfo {
    V1(MemGetMcMmapInfo),
    V2(MemGetMcMmapInfoV2),
}

#[derive(Debug)]
pub(crate) enum Req {
    /// `pa_reply`: the V2MT64_PA struct, written back with the chunk's PA.
    Alloc {
        a: Alloc,
        pa_reply: Option<MemAllocV2MemType64Pa>,
    },
    Free(u64),
    ExtendedInfo(MemGetExtendedInfo),
    GetPa(MemGetPa),
    GetInfo(MemGetInfo),
    McInfo(McInfo),
    Dump(DumpMemChunks),
    DmabufFd(DmabufFd),
    DmabufFdV2,
    Pin(HostMemPin),
    Unpin(u64),
}

/// The UNKNOWN category of the chunk's side (`driver-abi.md` §2.7).
fn unknown_type(host: u32) -> u32 {
    if host != 0 {
        MemType::UNKNOWN_HOST.0
    } else {
        MemType::UNKNOWN_DEVICE.0
    }
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let alloc = |a: Alloc| Req::Alloc { a, pa_reply: None };
        Some(match cmd {
            // The driver reports MEM_ALLOC's copy-in failure as -EACCES.
            NEURON_IOCTL_MEM_ALLOC => {
                cx.arg::<cmd::MEM_ALLOC>()
                    .map_err(|_| Errno::EACCES)
                    .map(|a| {
                        alloc(Alloc {
                            size: a.size,
                            align: 0,
                            host: a.host_memory,
                            channel: a.dram_channel,
                            nc_id: a.nc_id,
                            mem_type: unknown_type(a.host_memory),
                            out: a.mem_handle,
                        })
                    })
            }
            NEURON_IOCTL_MEM_ALLOC_V2 => cx.arg::<cmd::MEM_ALLOC_V2>().map(|a| {
                alloc(Alloc {
                    size: a.size,
                    align: a.align,
                    host: a.host_memory,
                    channel: a.dram_channel,
                    nc_id: a.nc_id,
                    mem_type: unknown_type(a.host_memory),
                    out: a.mem_handle,
                })
            }),
            NEURON_IOCTL_MEM_ALLOC_V2MT => cx.arg::<cmd::MEM_ALLOC_V2MT>().map(|a| {
                alloc(Alloc {
                    size: a.size,
                    align: a.align,
                    host: a.host_memory,
                    channel: a.dram_channel,
                    nc_id: a.nc_id,
                    mem_type: a.mem_type,
                    out: a.mem_handle,
                })
            }),
            NEURON_IOCTL_MEM_ALLOC_V2MT64 => cx.arg::<cmd::MEM_ALLOC_V2MT64>().map(|a| {
                alloc(Alloc {
                    size: a.size,
                    align: a.align,
                    host: a.host_memory,
                    channel: a.dram_channel,
                    nc_id: a.nc_id,
                    mem_type: a.mem_type,
                    out: a.mem_handle,
                })
            }),
            NEURON_IOCTL_MEM_ALLOC_V2MT64_PA => {
                cx.arg::<cmd::MEM_ALLOC_V2MT64_PA>().map(|a| Req::Alloc {
                    a: Alloc {
                        size: a.size,
                        align: a.align,
                        host: a.host_memory,
                        channel: a.dram_channel,
                        nc_id: a.nc_id,
                        mem_type: a.mem_type,
                        out: a.mem_handle,
                    },
                    pa_reply: Some(a),
                })
            }
            NEURON_IOCTL_MEM_FREE => cx.arg::<cmd::MEM_FREE>().map(|a| Req::Free(a.mem_handle)),
            NEURON_IOCTL_MEM_GET_EXTENDED_INFO => cx
                .arg::<cmd::MEM_GET_EXTENDED_INFO>()
                .map(Req::ExtendedInfo),
            NEURON_IOCTL_MEM_GET_PA => cx.arg::<cmd::MEM_GET_PA>().map(Req::GetPa),
            NEURON_IOCTL_MEM_GET_INFO => cx.arg::<cmd::MEM_GET_INFO>().map(Req::GetInfo),
            NEURON_IOCTL_MEM_MC_GET_INFO => cx
                .arg::<cmd::MEM_MC_GET_INFO>()
                .map(|a| Req::McInfo(McInfo::V1(a))),
            NEURON_IOCTL_MEM_MC_GET_INFO_V2 => cx
                .arg::<cmd::MEM_MC_GET_INFO_V2>()
                .map(|a| Req::McInfo(McInfo::V2(a))),
            NEURON_IOCTL_DUMP_MEM_CHUNKS => cx.arg::<cmd::DUMP_MEM_CHUNKS>().map(Req::Dump),
            NEURON_IOCTL_DMABUF_FD => cx.arg::<cmd::DMABUF_FD>().map(Req::DmabufFd),
            NEURON_IOCTL_DMABUF_FD_V2 => Ok(Req::DmabufFdV2),
            NEURON_IOCTL_HOST_MEM_PIN => cx.arg::<cmd::HOST_MEM_PIN>().map(Req::Pin),
            NEURON_IOCTL_HOST_MEM_UNPIN => {
                cx.arg::<cmd::HOST_MEM_UNPIN>().map(|a| Req::Unpin(a.va))
            }
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Alloc { a, pa_reply } => {
                let (h, pa) = alloc(cx, a)?;
                if let Some(mut reply) = pa_reply {
                    reply.pa = pa;
                    if let Err(e) = cx.reply(&reply) {
                        drvstate::free_handle(&mut cx.lock(), h);
                        return Err(e);
                    }
                }
                Ok(0)
            }
            Req::Free(h) => {
                let mut g = cx.lock();
                if let Some(c) = g.chunks.free(h)? {
                    release_chunk_memory(&mut g, &c);
                }
                Ok(0)
            }
            Req::ExtendedInfo(mut a) => {
                let g = cx.lock();
                let c = g.chunks.get(a.mem_handle).ok_or(Errno::EINVAL)?;
                a.host_memory = c.host as u32;
                a.mmap_offset = c.pa;
                a.pa = c.pa;
                a.pid = c.pid as u64;
                a.size = c.size;
                drop(g);
                cx.reply(&a)
            }
            Req::GetPa(a) => {
                let pa = chunk_pa(cx, a.mem_handle)?;
                cx.copy_out(a.pa, &pa.to_le_bytes()).map(|_| 0)
            }
            Req::GetInfo(a) => {
                let pa = chunk_pa(cx, a.mem_handle)?;
                cx.copy_out(a.pa, &pa.to_le_bytes())?;
                if a.mmap_offset != 0 {
                    cx.copy_out(a.mmap_offset, &pa.to_le_bytes())?;
                }
                Ok(0)
            }
            Req::McInfo(v) => {
                let pa = match &v {
                    McInfo::V1(a) => a.pa,
                    McInfo::V2(a) => a.pa,
                };
                let g = cx.lock();
                let c = g.chunks.find_pa(pa).ok_or(Errno::ENOMEM)?;
                let (off, size, handle) = (c.pa, c.size, c.handle);
                drop(g);
                match v {
                    McInfo::V1(mut a) => {
                        a.mmap_offset = off;
                        a.size = size;
                        cx.reply(&a)
                    }
                    McInfo::V2(mut a) => {
                        a.mmap_offset = off;
                        a.size = size;
                        a.mem_handle = handle;
                        cx.reply(&a)
                    }
                }
            }
            Req::Dump(a) => dump_chunks(cx, a),
            Req::DmabufFd(a) => {
                // The range must be an mmap of device memory, as for the real exporter; the
                // emulator has no dma-buf exporter (a kernel object) to hand out.
                if a.size == 0 || va_lookup(cx, a.va, a.size).is_none() {
                    return Err(Errno::EINVAL);
                }
                Err(Errno::ENOTSUPP)
            }
            // A newer driver's value whose argument layout is unpublished: the emulated driver
            // (2.27 + the 2.28 additions) does not define it.
            Req::DmabufFdV2 => Err(Errno::EINVAL),
            Req::Pin(a) => pin(cx, a),
            Req::Unpin(va) => {
                let mut g = cx.lock();
                g.drv
                    .pins
                    .remove(&(cx.pid(), va))
                    .map(|_| 0)
                    .ok_or(Errno::EINVAL)
            }
        }
    }
}

/// Allocate a process-lifespan chunk and hand its handle out. Returns (handle, PA).
fn alloc(cx: &Ctx, a: Alloc) -> Result<(u64, u64), Errno> {
    if a.nc_id >= cx.arch().nc_count() {
        return Err(Errno::EINVAL);
    }
    if a.out == 0 {
        return Err(Errno::EFAULT);
    }
    // Out-of-range categories are accepted and re-labelled UNKNOWN (`driver-abi.md` §2.7).
    let mem_type = if MemType(a.mem_type).is_known() {
        a.mem_type
    } else {
        unknown_type(a.host)
    };
    let mut g = cx.lock();
    let c = g.chunks.alloc(
        a.size,
        a.align,
        a.host != 0,
        a.channel,
        a.nc_id,
        mem_type,
        cx.pid(),
        Lifespan::CurProcess,
    )?;
    if c.host && !g.add_host_memory(c.pa, c.size) {
        let _ = g.chunks.free(c.handle);
        tracing::warn!(target: "KDRV", "mem_alloc: no host memory for a {:#x}-byte chunk", c.size);
        return Err(Errno::ENOMEM);
    }
    drop(g);
    if let Err(e) = cx.copy_out(a.out, &c.handle.to_le_bytes()) {
        let mut g = cx.lock();
        if let Ok(Some(c)) = g.chunks.free(c.handle) {
            release_chunk_memory(&mut g, &c);
        }
        return Err(e);
    }
    Ok((c.handle, c.pa))
}

fn chunk_pa(cx: &Ctx, h: u64) -> Result<u64, Errno> {
    cx.lock().chunks.get(h).map(|c| c.pa).ok_or(Errno::EINVAL)
}

/// Bounds of `[offset, offset+size)` inside a chunk, as a device address.
pub(crate) fn chunk_range(g: &DevState, handle: u64, offset: u64, size: u64) -> Result<u64, Errno> {
    let c = g.chunks.get(handle).ok_or(Errno::EINVAL)?;
    let end = offset.checked_add(size).ok_or(Errno::EINVAL)?;
    if end > c.size {
        return Err(Errno::EINVAL);
    }
    Ok(c.pa + offset)
}

fn dump_chunks(cx: &Ctx, mut a: DumpMemChunks) -> R {
    let g = cx.lock();
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
    cx.reply(&a)?;
    if (a.num_entries_in as usize) < list.len() {
        return Err(Errno::EAGAIN);
    }
    cx.copy_out(a.data, list.as_bytes()).map(|_| 0)
}

fn pin(cx: &Ctx, mut a: HostMemPin) -> R {
    let end = a.va.checked_add(a.size).ok_or(Errno::EINVAL)?;
    if a.va == 0 || a.size == 0 {
        return Err(Errno::EINVAL);
    }
    // The pages must exist (pinning faults them in).
    let mut b = [0u8; 1];
    cx.copy_in(a.va, &mut b)?;
    cx.copy_in(end - 1, &mut b)?;
    {
        let mut g = cx.lock();
        if g.drv.pins.contains_key(&(cx.pid(), a.va)) {
            return Err(Errno::EEXIST);
        }
        g.drv.pins.insert((cx.pid(), a.va), a.size);
    }
    // User memory has no device-visible physical address in the emulator.
    a.pa = u64::MAX;
    cx.reply(&a)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;

    #[test]
    fn alloc_versions_share_one_path() {
        let b = Bench::v3();
        let out = b.mem.zeroed(8);
        // MEM_ALLOC: copy-in failure is EACCES, a bad nc EINVAL, a null handle pointer EFAULT.
        assert_eq!(b.raw(NEURON_IOCTL_MEM_ALLOC, 8), Err(Errno::EACCES));
        let a = MemAlloc {
            size: 4096,
            nc_id: 99,
            mem_handle: out,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_ALLOC, &a), Err(Errno::EINVAL));
        let a = MemAlloc {
            nc_id: 0,
            mem_handle: 0,
            ..a
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_ALLOC, &a), Err(Errno::EFAULT));
        // MEM_ALLOC_V2 with an unknown type: labelled UNKNOWN_DEVICE.
        let a = MemAllocV2 {
            size: 100,
            mem_handle: out,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_ALLOC_V2, &a), Ok(0));
        let h: u64 = b.mem.get(out);
        let c = b.emu.devices[0]
            .lock()
            .chunks
            .get(h)
            .cloned()
            .expect("chunk");
        assert_eq!((c.size, c.mem_type, c.pid), (4096, 7, PID));
        // V2MT64_PA writes the PA back.
        let a = MemAllocV2MemType64Pa {
            size: 4096,
            mem_type: 9,
            mem_handle: out,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_MEM_ALLOC_V2MT64_PA, &a);
        assert_eq!(r, Ok(0));
        let h2: u64 = b.mem.get(out);
        assert_eq!(chunk_pa_of(&b, h2), v.pa);
        // Size 0 is EINVAL from the allocator.
        let a = MemAllocV2MemType64 {
            size: 0,
            mem_handle: out,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_ALLOC_V2MT64, &a), Err(Errno::EINVAL));
    }

    fn chunk_pa_of(b: &Bench, h: u64) -> u64 {
        b.emu.devices[0].lock().chunks.get(h).map_or(0, |c| c.pa)
    }

    #[test]
    fn free_info_and_reverse_lookup() {
        let b = Bench::v3();
        let h = b.alloc(8192, false);
        let pa = chunk_pa_of(&b, h);
        let (r, v) = b.io(
            NEURON_IOCTL_MEM_GET_EXTENDED_INFO,
            &MemGetExtendedInfo {
                mem_handle: h,
                ..Default::default()
            },
        );
        assert_eq!(r, Ok(0));
        assert_eq!((v.pa, v.size, v.pid), (pa, 8192, PID as u64));
        let (r, v) = b.io(
            NEURON_IOCTL_MEM_MC_GET_INFO_V2,
            &MemGetMcMmapInfoV2 {
                pa: pa + 100,
                ..Default::default()
            },
        );
        assert_eq!(r, Ok(0));
        assert_eq!((v.mmap_offset, v.size, v.mem_handle), (pa, 8192, h));
        let miss = MemGetMcMmapInfo {
            pa: 1,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_MC_GET_INFO, &miss),
            Err(Errno::ENOMEM)
        );
        let f = MemFree { mem_handle: h };
        assert_eq!(b.run(NEURON_IOCTL_MEM_FREE, &f), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_MEM_FREE, &f), Err(Errno::EINVAL));
        let out = b.mem.zeroed(8);
        let g = MemGetPa {
            mem_handle: h,
            pa: out,
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_GET_PA, &g), Err(Errno::EINVAL));
    }

    #[test]
    fn dump_asks_for_room() {
        let b = Bench::v3();
        b.alloc(4096, false);
        b.alloc(4096, false);
        let data = b.mem.zeroed(64);
        let a = DumpMemChunks {
            num_entries_in: 1,
            data,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_DUMP_MEM_CHUNKS, &a);
        assert_eq!((r, v.num_entries_out), (Err(Errno::EAGAIN), 2));
        let a = DumpMemChunks {
            num_entries_in: 2,
            ..a
        };
        assert_eq!(b.run(NEURON_IOCTL_DUMP_MEM_CHUNKS, &a), Ok(0));
        let a = DumpMemChunks { hbm_index: 9, ..a };
        assert_eq!(b.run(NEURON_IOCTL_DUMP_MEM_CHUNKS, &a), Err(Errno::EINVAL));
    }

    #[test]
    fn pin_unpin() {
        let b = Bench::v3();
        let buf = b.mem.zeroed(4096);
        let a = HostMemPin {
            va: buf,
            size: 4096,
            pa: 0,
        };
        let (r, v) = b.io(NEURON_IOCTL_HOST_MEM_PIN, &a);
        assert_eq!((r, v.pa), (Ok(0), u64::MAX));
        assert_eq!(b.run(NEURON_IOCTL_HOST_MEM_PIN, &a), Err(Errno::EEXIST));
        // The last page is checked before the duplicate.
        let big = HostMemPin { size: 8192, ..a };
        assert_eq!(b.run(NEURON_IOCTL_HOST_MEM_PIN, &big), Err(Errno::EFAULT));
        let u = HostMemUnpin { va: buf };
        assert_eq!(b.run(NEURON_IOCTL_HOST_MEM_UNPIN, &u), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_HOST_MEM_UNPIN, &u), Err(Errno::EINVAL));
        let bad = HostMemPin {
            va: buf,
            size: 1 << 20,
            pa: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_HOST_MEM_PIN, &bad), Err(Errno::EFAULT));
        assert_eq!(b.raw(NEURON_IOCTL_DMABUF_FD_V2, 0), Err(Errno::EINVAL));
    }
}
