//! Driver-internal copies: user buffer <-> chunk (MEM_BUF_COPY / 64 / ZEROCOPY64 / _BATCHES),
//! MEMSET / 64, chunk-to-chunk MEM_COPY / 64 and the async variants with their wait
//! (`driver-abi.md` §2.3, §3.5). Every copy is streamed in bounded blocks: no buffer of a
//! user-chosen size is ever allocated.

use super::memory::chunk_range;
use super::{Ctx, R};
use neuron_abi::consts::{DMA_ENG_MAX_QUEUES, H2T_DEFAULT_QID};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use std::mem::size_of;

/// Largest async copy: one batch of 2031 descriptors of 64 KiB (`driver-abi.md` §3.5).
const ASYNC_MAX: u64 = 2031 * 65536;
/// Bytes moved per lock hold (the bounce buffer of every streamed copy).
pub(crate) const COPY_BLOCK: usize = 1 << 20;
/// Run `f` on `len` (at most [`COPY_BLOCK`]) bytes of scratch: the calling thread's bounce
/// buffer, kept between copies (a fresh one each copy was zeroed and its pages faulted in
/// every time: a quarter of a fault-campaign experiment's page faults, `docs/performance.md`,
/// seventeenth session). Its bytes are whatever the last copy left: every use overwrites
/// what it then reads. A copy made inside another on the same thread gets a buffer of its own.
pub(crate) fn with_bounce<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    thread_local! {
        static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let len = len.min(COPY_BLOCK);
    BOUNCE.with(|b| match b.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0);
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![0u8; len]),
    })
}

/// Most batches / ops per MEM_BUF_ZEROCOPY64_BATCHES call the emulator takes.
const ZC_MAX_ITEMS: u32 = 1 << 16;
/// Most HBM bytes the model may hold resident after a MEMSET with a non-zero byte: the sparse
/// HBM materialises every page such a fill touches, so a fill of a huge chunk is refused with
/// `ENOMEM` instead of exhausting host memory (emulator limit; zero fills cost nothing).
pub(crate) const FILL_RESIDENT_LIMIT: u64 = 8 << 30;

/// A user-buffer <-> chunk copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BufCopy {
    handle: u64,
    buffer: u64,
    size: u64,
    offset: u64,
    to_chunk: bool,
}

/// A chunk-to-chunk copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemCopy {
    src: u64,
    dst: u64,
    size: u64,
    src_off: u64,
    dst_off: u64,
}

/// MEM_COPY_ASYNC's two versions (written back with the new wait handle).
#[derive(Debug)]
pub(crate) enum AsyncReply {
    V32(MemCopyAsync),
    V64(MemCopyAsync64),
}

#[derive(Debug)]
pub(crate) enum Req {
    BufCopy(BufCopy),
    Batches(MemBufCopy64zcBatches),
    Memset {
        handle: u64,
        offset: u64,
        value: u32,
        size: u64,
    },
    Copy(MemCopy),
    Async {
        copy: MemCopy,
        pwait: u32,
        reply: AsyncReply,
    },
    AsyncWait(MemCopyAsyncWait),
}

fn check_h2t_qid(q: i32) -> Result<(), Errno> {
    if q == H2T_DEFAULT_QID || (0..DMA_ENG_MAX_QUEUES as i32).contains(&q) {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(match cmd {
            NEURON_IOCTL_MEM_BUF_COPY => cx.arg::<cmd::MEM_BUF_COPY>().map(|a| {
                Req::BufCopy(BufCopy {
                    handle: a.mem_handle,
                    buffer: a.buffer,
                    size: a.size as u64,
                    offset: a.offset as u64,
                    to_chunk: a.copy_to_mem_handle != 0,
                })
            }),
            NEURON_IOCTL_MEM_BUF_COPY64 => cx.arg::<cmd::MEM_BUF_COPY64>().map(|a| {
                Req::BufCopy(BufCopy {
                    handle: a.mem_handle,
                    buffer: a.buffer,
                    size: a.size,
                    offset: a.offset,
                    to_chunk: a.copy_to_mem_handle != 0,
                })
            }),
            NEURON_IOCTL_MEM_BUF_ZEROCOPY64 => cx.arg::<cmd::MEM_BUF_ZEROCOPY64>().and_then(|a| {
                check_h2t_qid(a.h2t_qid)?;
                Ok(Req::BufCopy(BufCopy {
                    handle: a.mem_handle,
                    buffer: a.buffer,
                    size: a.size,
                    offset: a.offset,
                    to_chunk: a.is_copy_to_device != 0,
                }))
            }),
            NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES => {
                cx.arg::<cmd::MEM_BUF_ZEROCOPY64_BATCHES>().and_then(|a| {
                    check_h2t_qid(a.h2t_qid)?;
                    if a.num_batches > ZC_MAX_ITEMS {
                        return Err(Errno::EINVAL);
                    }
                    Ok(Req::Batches(a))
                })
            }
            NEURON_IOCTL_MEMSET => cx.arg::<cmd::MEMSET>().map(|a| Req::Memset {
                handle: a.mem_handle,
                offset: a.offset,
                value: a.value,
                size: a.size as u64,
            }),
            NEURON_IOCTL_MEMSET64 => cx.arg::<cmd::MEMSET64>().map(|a| Req::Memset {
                handle: a.mem_handle,
                offset: a.offset,
                value: a.value,
                size: a.size,
            }),
            NEURON_IOCTL_MEM_COPY => cx.arg::<cmd::MEM_COPY>().map(|a| {
                Req::Copy(MemCopy {
                    src: a.src_mem_handle,
                    dst: a.dst_mem_handle,
                    size: a.size as u64,
                    src_off: a.src_offset as u64,
                    dst_off: a.dst_offset as u64,
                })
            }),
            NEURON_IOCTL_MEM_COPY64 => cx.arg::<cmd::MEM_COPY64>().map(|a| {
                Req::Copy(MemCopy {
                    src: a.src_mem_handle,
                    dst: a.dst_mem_handle,
                    size: a.size,
                    src_off: a.src_offset,
                    dst_off: a.dst_offset,
                })
            }),
            NEURON_IOCTL_MEM_COPY_ASYNC => cx.arg::<cmd::MEM_COPY_ASYNC>().map(|a| Req::Async {
                copy: MemCopy {
                    src: a.src_mem_handle,
                    dst: a.dst_mem_handle,
                    size: a.size as u64,
                    src_off: a.src_offset as u64,
                    dst_off: a.dst_offset as u64,
                },
                pwait: a.pwait_handle,
                reply: AsyncReply::V32(a),
            }),
            NEURON_IOCTL_MEM_COPY_ASYNC64 => {
                cx.arg::<cmd::MEM_COPY_ASYNC64>().map(|a| Req::Async {
                    copy: MemCopy {
                        src: a.src_mem_handle,
                        dst: a.dst_mem_handle,
                        size: a.size,
                        src_off: a.src_offset,
                        dst_off: a.dst_offset,
                    },
                    pwait: a.pwait_handle,
                    reply: AsyncReply::V64(a),
                })
            }
            NEURON_IOCTL_MEM_COPY_ASYNC_WAIT => {
                cx.arg::<cmd::MEM_COPY_ASYNC_WAIT>().map(Req::AsyncWait)
            }
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::BufCopy(c) => buf_copy(cx, c),
            Req::Batches(a) => zerocopy_batches(cx, &a),
            Req::Memset {
                handle,
                offset,
                value,
                size,
            } => memset(cx, handle, offset, value, size),
            Req::Copy(c) => mem_copy(cx, c),
            Req::Async { copy, pwait, reply } => {
                let wait = copy_async(cx, copy, pwait)?;
                match reply {
                    AsyncReply::V32(mut a) => {
                        a.wait_handle = wait;
                        cx.reply(&a)
                    }
                    AsyncReply::V64(mut a) => {
                        a.wait_handle = wait;
                        cx.reply(&a)
                    }
                }
            }
            Req::AsyncWait(a) => {
                let g = cx.lock();
                if g.chunks.get(a.src_mem_handle).is_none()
                    || g.chunks.get(a.dst_mem_handle).is_none()
                {
                    return Err(Errno::EINVAL);
                }
                // Copies complete synchronously, so waiting on a valid handle returns at once.
                if !(1..=2).contains(&(a.pwait_handle as i32)) {
                    return Err(Errno::EINVAL);
                }
                Ok(0)
            }
        }
    }
}

fn buf_copy(cx: &Ctx, c: BufCopy) -> R {
    let addr = chunk_range(&cx.lock(), c.handle, c.offset, c.size)?;
    if c.size > 0 && c.buffer == 0 {
        return Err(Errno::EFAULT);
    }
    with_bounce(c.size as usize, |tmp| {
        let mut done = 0u64;
        while done < c.size {
            let n = ((c.size - done) as usize).min(COPY_BLOCK);
            let t = &mut tmp[..n];
            if c.to_chunk {
                cx.copy_in(c.buffer + done, t)?;
                cx.lock()
                    .dev
                    .write(addr + done, t)
                    .map_err(|_| Errno::EFAULT)?;
            } else {
                cx.lock()
                    .dev
                    .read(addr + done, t)
                    .map_err(|_| Errno::EFAULT)?;
                cx.copy_out(c.buffer + done, t)?;
            }
            done += n as u64;
        }
        Ok(())
    })?;
    cx.kick();
    Ok(0)
}

fn memset(cx: &Ctx, handle: u64, offset: u64, value: u32, size: u64) -> R {
    let mut g = cx.lock();
    let addr = chunk_range(&g, handle, offset, size)?;
    let host = addr & cx.arch().host_base_bit() != 0;
    if value as u8 != 0
        && !host
        && g.dev.hbm_resident_bytes().saturating_add(size) > FILL_RESIDENT_LIMIT
    {
        tracing::warn!(target: "KDRV", "memset: refusing to fill {size:#x} bytes of HBM with {:#04x} (emulator limit {FILL_RESIDENT_LIMIT:#x} resident bytes)", value as u8);
        return Err(Errno::ENOMEM);
    }
    g.dev
        .fill(addr, size, value as u8)
        .map_err(|_| Errno::EFAULT)?;
    Ok(0)
}

fn mem_copy(cx: &Ctx, c: MemCopy) -> R {
    let mut g = cx.lock();
    let s = chunk_range(&g, c.src, c.src_off, c.size)?;
    let d = chunk_range(&g, c.dst, c.dst_off, c.size)?;
    with_bounce(c.size as usize, |tmp| {
        let mut done = 0u64;
        while done < c.size {
            let n = ((c.size - done) as usize).min(COPY_BLOCK);
            g.dev
                .read(s + done, &mut tmp[..n])
                .map_err(|_| Errno::EFAULT)?;
            g.dev
                .write(d + done, &tmp[..n])
                .map_err(|_| Errno::EFAULT)?;
            done += n as u64;
        }
        Ok(0)
    })
}

fn zerocopy_batches(cx: &Ctx, a: &MemBufCopy64zcBatches) -> R {
    let batch = size_of::<MemcpyBatch>() as u64;
    let op_size = size_of::<TensorBatchOp>() as u64;
    for i in 0..a.num_batches as u64 {
        let b: MemcpyBatch = cx.read_at(a.batches_ptr.wrapping_add(i * batch))?;
        if b.num_ops > ZC_MAX_ITEMS {
            return Err(Errno::EINVAL);
        }
        for j in 0..b.num_ops as u64 {
            let op: TensorBatchOp = cx.read_at(b.ops_ptr.wrapping_add(j * op_size))?;
            let offset = b
                .mem_handle_offset
                .checked_add(op.offset)
                .ok_or(Errno::EINVAL)?;
            buf_copy(
                cx,
                BufCopy {
                    handle: b.mem_handle,
                    buffer: op.buffer,
                    size: op.size,
                    offset,
                    to_chunk: a.is_copy_to_device != 0,
                },
            )?;
        }
    }
    Ok(0)
}

fn copy_async(cx: &Ctx, c: MemCopy, pwait: u32) -> Result<u32, Errno> {
    let pwait = pwait as i32;
    if pwait != -1 && !(1..=2).contains(&pwait) {
        return Err(Errno::EINVAL);
    }
    if c.size > ASYNC_MAX {
        return Err(Errno::EINVAL);
    }
    let nc = {
        let g = cx.lock();
        let s = g.chunks.get(c.src).ok_or(Errno::EINVAL)?;
        let d = g.chunks.get(c.dst).ok_or(Errno::EINVAL)?;
        // The device side chooses the H2T queue; host to host uses the destination's.
        if !s.host {
            s.nc
        } else {
            d.nc
        }
    };
    // Synchronous underneath: the transfer is complete when this returns.
    mem_copy(cx, c)?;
    let mut g = cx.lock();
    let last = g.drv.async_last.get_mut(nc as usize).ok_or(Errno::EINVAL)?;
    *last = if *last == 1 { 2 } else { 1 };
    Ok(*last as u32)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::Bench;
    use super::*;

    #[test]
    fn buf_copy_round_trip_and_bounds() {
        let b = Bench::v3();
        let h = b.alloc(4096, false);
        let src = b.mem.put_bytes(&[7u8; 100]);
        let a = MemBufCopy64 {
            mem_handle: h,
            buffer: src,
            size: 100,
            offset: 8,
            copy_to_mem_handle: 1,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY64, &a), Ok(0));
        let dst = b.mem.zeroed(100);
        let back = MemBufCopy {
            mem_handle: h,
            buffer: dst,
            size: 100,
            offset: 8,
            copy_to_mem_handle: 0,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY, &back), Ok(0));
        assert_eq!(b.mem.bytes(dst, 100), [7u8; 100]);
        // Past the chunk: EINVAL; null buffer: EFAULT; unknown handle: EINVAL.
        let past = MemBufCopy64 { offset: 4000, ..a };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_BUF_COPY64, &past),
            Err(Errno::EINVAL)
        );
        let null = MemBufCopy64 { buffer: 0, ..a };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_BUF_COPY64, &null),
            Err(Errno::EFAULT)
        );
        let zc = MemBufCopy64zc {
            mem_handle: h,
            buffer: src,
            size: 100,
            h2t_qid: 16,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_BUF_ZEROCOPY64, &zc),
            Err(Errno::EINVAL)
        );
    }

    /// A copy that gives the model no work (no engine waits on those bytes) leaves the
    /// device worker asleep: no wake-up is counted.
    #[test]
    fn a_copy_that_schedules_nothing_wakes_no_one() {
        let b = Bench::v3();
        let h = b.alloc(4096, false);
        let src = b.mem.put_bytes(&[7u8; 100]);
        let kicks = || {
            b.emu.devices[0]
                .kicks
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        let before = kicks();
        let a = MemBufCopy64 {
            mem_handle: h,
            buffer: src,
            size: 100,
            copy_to_mem_handle: 1,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY64, &a), Ok(0));
        assert!(!b.emu.devices[0].lock().dev.busy());
        assert_eq!(kicks(), before, "an idle device's worker was woken");
    }

    #[test]
    fn huge_sizes_are_refused_without_allocating() {
        let b = Bench::v3();
        let h = b.alloc(4096, false);
        // A u64::MAX copy overflows the chunk range check before any buffer exists.
        let a = MemBufCopy64 {
            mem_handle: h,
            buffer: 0x1000,
            size: u64::MAX,
            offset: 1,
            copy_to_mem_handle: 1,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY64, &a), Err(Errno::EINVAL));
        let m = Memset64 {
            mem_handle: h,
            value: 1,
            size: u64::MAX,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEMSET64, &m), Err(Errno::EINVAL));
        let c = MemCopy64 {
            src_mem_handle: h,
            dst_mem_handle: h,
            size: 1 << 40,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_COPY64, &c), Err(Errno::EINVAL));
        // A huge chunk (sparse HBM: costs nothing until touched) filled with a non-zero byte
        // would materialise every page: refused with ENOMEM; a zero fill is free and allowed.
        let big = b.alloc(FILL_RESIDENT_LIMIT + 4096, false);
        let m = Memset64 {
            mem_handle: big,
            value: 0xab,
            size: FILL_RESIDENT_LIMIT + 4096,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEMSET64, &m), Err(Errno::ENOMEM));
        let zero = Memset64 { value: 0, ..m };
        assert_eq!(b.run(NEURON_IOCTL_MEMSET64, &zero), Ok(0));
        assert!(b.emu.devices[0].lock().dev.hbm_resident_bytes() < 1 << 20);
        // A huge device-to-user copy from a small user buffer faults on the first block.
        let user = b.mem.zeroed(4096);
        let out = MemBufCopy64 {
            mem_handle: big,
            buffer: user,
            size: FILL_RESIDENT_LIMIT,
            offset: 0,
            copy_to_mem_handle: 0,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY64, &out), Err(Errno::EFAULT));
    }

    #[test]
    fn memset_and_mem_copy() {
        let b = Bench::v3();
        let h1 = b.alloc(4096, false);
        let h2 = b.alloc(4096, true);
        let m = Memset {
            mem_handle: h1,
            offset: 0,
            value: 0x5a,
            size: 64,
        };
        assert_eq!(b.run(NEURON_IOCTL_MEMSET, &m), Ok(0));
        let c = neuron_abi::structs::MemCopy {
            src_mem_handle: h1,
            dst_mem_handle: h2,
            size: 64,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_COPY, &c), Ok(0));
        let dst = b.mem.zeroed(64);
        let back = MemBufCopy64 {
            mem_handle: h2,
            buffer: dst,
            size: 64,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_BUF_COPY64, &back), Ok(0));
        assert_eq!(b.mem.bytes(dst, 64), [0x5a; 64]);
    }

    #[test]
    fn async_handles_rotate_and_wait_checks_them() {
        let b = Bench::v3();
        let h1 = b.alloc(4096, false);
        let h2 = b.alloc(4096, false);
        let a = MemCopyAsync64 {
            src_mem_handle: h1,
            dst_mem_handle: h2,
            size: 16,
            pwait_handle: u32::MAX,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_MEM_COPY_ASYNC64, &a);
        assert_eq!((r, v.wait_handle), (Ok(0), 1));
        let a32 = MemCopyAsync {
            src_mem_handle: h1,
            dst_mem_handle: h2,
            size: 16,
            pwait_handle: 1,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_MEM_COPY_ASYNC, &a32);
        assert_eq!((r, v.wait_handle), (Ok(0), 2));
        let big = MemCopyAsync64 {
            size: ASYNC_MAX + 1,
            ..a
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_COPY_ASYNC64, &big),
            Err(Errno::EINVAL)
        );
        let w = MemCopyAsyncWait {
            src_mem_handle: h1,
            dst_mem_handle: h2,
            pwait_handle: 2,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_MEM_COPY_ASYNC_WAIT, &w), Ok(0));
        let w = MemCopyAsyncWait {
            pwait_handle: 0,
            ..w
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_COPY_ASYNC_WAIT, &w),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn batches_bounds() {
        let b = Bench::v3();
        let a = MemBufCopy64zcBatches {
            num_batches: ZC_MAX_ITEMS + 1,
            h2t_qid: -1,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES, &a),
            Err(Errno::EINVAL)
        );
        let a = MemBufCopy64zcBatches {
            num_batches: 1,
            batches_ptr: 0x10,
            ..a
        };
        assert_eq!(
            b.run(NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES, &a),
            Err(Errno::EFAULT)
        );
    }
}
