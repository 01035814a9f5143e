//! Runtime-driven DMA ioctls: engine state, queue init (single and batch), descriptor copy-in
//! (DMA_COPY_DESCRIPTORS / 64 folded) and copy-out, doorbell, queue state and acks
//! (`driver-abi.md` §2.3, §3).

use super::copy::COPY_BLOCK;
use super::memory::chunk_range;
use super::{Ctx, R};
use crate::DevState;
use neuron_abi::consts::{
    DMA_ENG_MAX_QUEUES, DMA_ENG_REVISION_ID, DMA_ENG_STATE_ABORT, DMA_ENG_STATE_DISABLE,
    DMA_ENG_STATE_NORMAL, DMA_QUEUE_INIT_BATCH_MAX, DMA_QUEUE_SW_ABORTED, DMA_QUEUE_SW_DISABLED,
    DMA_QUEUE_SW_ENABLED,
};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::udma::{validate_ring, UdmaDesc};
use neuron_abi::Errno;
use std::mem::size_of;
use zerocopy::FromBytes;

/// `EFBIG`, DMA_DESCRIPTOR_COPYOUT's answer for a range past the ring.
const EFBIG: Errno = Errno(27);
/// Bytes of one UDMA descriptor.
const DESC: usize = size_of::<UdmaDesc>();
/// Descriptor bytes moved per block (a whole number of descriptors).
const DESC_BLOCK: usize = COPY_BLOCK / DESC * DESC;

#[derive(Debug)]
pub(crate) enum Req {
    /// DMA_ENG_INIT, DMA_QUEUE_RELEASE: accepted, nothing to do.
    Nop,
    Quiesce,
    SetState(DmaEngSetState),
    GetState(DmaEngGetState),
    /// DMA_QUEUE_INIT (one entry) or DMA_QUEUE_INIT_BATCH (its `count` entries).
    QueueInit(Vec<DmaQueueInit>),
    CopyDescriptors {
        handle: u64,
        buffer: u64,
        num: u32,
        offset: u64,
    },
    Start(DmaQueueCopyStart),
    QueueState(DmaQueueGetState),
    Ack(DmaAckCompleted),
    Copyout(DmaDescriptorCopyout),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(match cmd {
            NEURON_IOCTL_DMA_ENG_INIT | NEURON_IOCTL_DMA_QUEUE_RELEASE => Ok(Req::Nop),
            NEURON_IOCTL_DMA_QUIESCE_QUEUES => Ok(Req::Quiesce),
            NEURON_IOCTL_DMA_ENG_SET_STATE => cx.arg::<cmd::DMA_ENG_SET_STATE>().map(Req::SetState),
            NEURON_IOCTL_DMA_ENG_GET_STATE => cx.arg::<cmd::DMA_ENG_GET_STATE>().map(Req::GetState),
            // The driver reports the queue-init copy-in failure as -EACCES.
            NEURON_IOCTL_DMA_QUEUE_INIT => cx
                .arg::<cmd::DMA_QUEUE_INIT>()
                .map_err(|_| Errno::EACCES)
                .map(|a| Req::QueueInit(vec![a])),
            NEURON_IOCTL_DMA_QUEUE_INIT_BATCH => cx
                .arg::<cmd::DMA_QUEUE_INIT_BATCH>()
                .map_err(|_| Errno::EACCES)
                .and_then(|a| {
                    if a.count >= DMA_QUEUE_INIT_BATCH_MAX {
                        return Err(Errno::E2BIG);
                    }
                    Ok(Req::QueueInit(a.entries[..a.count as usize].to_vec()))
                }),
            NEURON_IOCTL_DMA_COPY_DESCRIPTORS => {
                cx.arg::<cmd::DMA_COPY_DESCRIPTORS>().and_then(|a| {
                    copy_req(
                        a.queue_type,
                        a.mem_handle,
                        a.buffer,
                        a.num_descs,
                        a.offset as u64,
                    )
                })
            }
            NEURON_IOCTL_DMA_COPY_DESCRIPTORS64 => {
                cx.arg::<cmd::DMA_COPY_DESCRIPTORS64>().and_then(|a| {
                    copy_req(a.queue_type, a.mem_handle, a.buffer, a.num_descs, a.offset)
                })
            }
            NEURON_IOCTL_DMA_QUEUE_COPY_START => {
                cx.arg::<cmd::DMA_QUEUE_COPY_START>().map(Req::Start)
            }
            NEURON_IOCTL_DMA_QUEUE_GET_STATE => {
                cx.arg::<cmd::DMA_QUEUE_GET_STATE>().map(Req::QueueState)
            }
            NEURON_IOCTL_DMA_ACK_COMPLETED => cx.arg::<cmd::DMA_ACK_COMPLETED>().map(Req::Ack),
            NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT => {
                cx.arg::<cmd::DMA_DESCRIPTOR_COPYOUT>().and_then(|a| {
                    if a.count == 0 {
                        Err(Errno::EINVAL)
                    } else {
                        Ok(Req::Copyout(a))
                    }
                })
            }
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Nop => Ok(0),
            Req::Quiesce => Err(Errno::ENOIOCTLCMD),
            Req::SetState(a) => {
                let mut g = cx.lock();
                let st = g
                    .drv
                    .eng_state
                    .get_mut(a.eng_id as usize)
                    .ok_or(Errno::EINVAL)?;
                if matches!(
                    a.state,
                    DMA_ENG_STATE_DISABLE | DMA_ENG_STATE_NORMAL | DMA_ENG_STATE_ABORT
                ) {
                    *st = a.state;
                }
                Ok(0)
            }
            Req::GetState(a) => {
                let st = *cx
                    .lock()
                    .drv
                    .eng_state
                    .get(a.eng_id as usize)
                    .ok_or(Errno::EINVAL)?;
                let v = DmaEngState {
                    revision_id: DMA_ENG_REVISION_ID,
                    max_queues: DMA_ENG_MAX_QUEUES,
                    num_queues: DMA_ENG_MAX_QUEUES,
                    tx_state: st,
                    rx_state: st,
                };
                cx.write_at(a.state, &v).map(|_| 0)
            }
            Req::QueueInit(entries) => {
                for e in &entries {
                    queue_init(cx, e)?;
                }
                Ok(0)
            }
            Req::CopyDescriptors {
                handle,
                buffer,
                num,
                offset,
            } => copy_descriptors(cx, handle, buffer, num, offset),
            Req::Start(a) => {
                check_queue(cx, a.eng_id, a.qid)?;
                if a.rx_desc_count == 0 {
                    return Err(Errno::EINVAL);
                }
                let mut g = cx.lock();
                g.dev
                    .dma_queue_start(
                        a.eng_id as usize,
                        a.qid as usize,
                        a.tx_desc_count,
                        a.rx_desc_count,
                    )
                    .map_err(|_| Errno::EINVAL)?;
                cx.kick_with(g);
                Ok(0)
            }
            Req::QueueState(a) => queue_state(cx, a),
            Req::Ack(a) => {
                check_queue(cx, a.eng_id, a.qid)?;
                // Software bookkeeping only; refused for rings that are not a power of two.
                let st = cx
                    .lock()
                    .dev
                    .dma_queue_state(a.eng_id as usize, a.qid as usize)
                    .ok_or(Errno::EINVAL)?;
                if st.enabled && (!st.tx_len.is_power_of_two() || !st.rx_len.is_power_of_two()) {
                    return Err(Errno::EINVAL);
                }
                Ok(0)
            }
            Req::Copyout(a) => descriptor_copyout(cx, a),
        }
    }
}

fn copy_req(
    queue_type: u32,
    handle: u64,
    buffer: u64,
    num: u32,
    offset: u64,
) -> Result<Req, Errno> {
    if queue_type > 1 {
        return Err(Errno::EINVAL);
    }
    Ok(Req::CopyDescriptors {
        handle,
        buffer,
        num,
        offset,
    })
}

fn check_queue(cx: &Ctx, eng: u32, q: u32) -> Result<(), Errno> {
    if eng >= cx.arch().dma_engines() || q >= DMA_ENG_MAX_QUEUES {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

fn queue_init(cx: &Ctx, a: &DmaQueueInit) -> R {
    check_queue(cx, a.eng_id, a.qid)?;
    if a.rxc_handle != 0 {
        return Err(Errno::EINVAL);
    }
    let mut g = cx.lock();
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
    g.queue_owner.insert((a.eng_id, a.qid), cx.pid());
    Ok(0)
}

/// Copy `num` user descriptors into a ring chunk. Streamed in blocks, in two passes so the
/// answer is the driver's whatever the size: the first reads everything (`EFAULT` first) and
/// checks every host buffer address lies in a chunk (`driver-abi.md` §2.3); the second writes.
fn copy_descriptors(cx: &Ctx, handle: u64, buffer: u64, num: u32, offset: u64) -> R {
    let bytes = num as u64 * DESC as u64;
    let addr = chunk_range(&cx.lock(), handle, offset, bytes)?;
    let host_bit = cx.arch().host_base_bit();
    let mut tmp = vec![0u8; (bytes as usize).min(DESC_BLOCK)];
    let mut bad = false;
    let mut done = 0u64;
    while done < bytes {
        let n = ((bytes - done) as usize).min(DESC_BLOCK);
        let t = &mut tmp[..n];
        cx.copy_in(buffer + done, t)?;
        if !bad {
            let g = cx.lock();
            bad = t.chunks_exact(DESC).any(|d| {
                UdmaDesc::read_from_bytes(d).map_or(true, |desc| {
                    desc.buf_ptr & host_bit != 0 && g.chunks.find_pa(desc.buf_ptr).is_none()
                })
            });
        }
        done += n as u64;
    }
    if bad {
        return Err(Errno::EINVAL);
    }
    if bytes == 0 {
        // An empty copy still stores nothing at the chunk address, as one write always did.
        cx.lock().dev.write(addr, &[]).map_err(|_| Errno::EFAULT)?;
    }
    let mut done = 0u64;
    while done < bytes {
        let n = ((bytes - done) as usize).min(DESC_BLOCK);
        let t = &mut tmp[..n];
        cx.copy_in(buffer + done, t)?;
        cx.lock()
            .dev
            .write(addr + done, t)
            .map_err(|_| Errno::EFAULT)?;
        done += n as u64;
    }
    Ok(0)
}

fn queue_state(cx: &Ctx, a: DmaQueueGetState) -> R {
    check_queue(cx, a.eng_id, a.qid)?;
    let st = cx
        .lock()
        .dev
        .dma_queue_state(a.eng_id as usize, a.qid as usize)
        .ok_or(Errno::EINVAL)?;
    let sw = if st.aborted {
        DMA_QUEUE_SW_ABORTED
    } else if st.enabled {
        DMA_QUEUE_SW_ENABLED
    } else {
        DMA_QUEUE_SW_DISABLED
    };
    let side = |base: u64, len: u32, tail: u64| DmaQueueState {
        hw_status: 0,
        sw_status: sw,
        base_addr: base,
        length: len,
        head_pointer: (st.head % len.max(1) as u64) as u32,
        tail_pointer: (tail % len.max(1) as u64) as u32,
        ..Default::default()
    };
    cx.write_at(a.tx, &side(st.tx_base, st.tx_len, st.tx_tail))?;
    cx.write_at(a.rx, &side(st.rx_base, st.rx_len, st.rx_tail))
        .map(|_| 0)
}

/// Copy descriptors of a ring out to user memory, in blocks: a first pass checks the whole
/// range reads (`EINVAL` before anything is written), the second copies.
fn descriptor_copyout(cx: &Ctx, a: DmaDescriptorCopyout) -> R {
    check_queue(cx, a.eng_id, a.qid)?;
    let mut g = cx.lock();
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
    let from = base + a.start_index as u64 * DESC as u64;
    let bytes = a.count as u64 * DESC as u64;
    let mut tmp = vec![0u8; (bytes as usize).min(DESC_BLOCK)];
    let mut done = 0u64;
    while done < bytes {
        let n = ((bytes - done) as usize).min(DESC_BLOCK);
        g.dev
            .read(from + done, &mut tmp[..n])
            .map_err(|_| Errno::EINVAL)?;
        done += n as u64;
    }
    drop(g);
    let mut done = 0u64;
    while done < bytes {
        let n = ((bytes - done) as usize).min(DESC_BLOCK);
        cx.lock()
            .dev
            .read(from + done, &mut tmp[..n])
            .map_err(|_| Errno::EINVAL)?;
        cx.copy_out(a.buffer + done, &tmp[..n])?;
        done += n as u64;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn engine_state_round_trip() {
        let b = Bench::v3();
        let set = DmaEngSetState {
            eng_id: 3,
            state: 3,
        };
        assert_eq!(b.run(NEURON_IOCTL_DMA_ENG_SET_STATE, &set), Ok(0));
        let out = b.mem.zeroed(20);
        let get = DmaEngGetState {
            eng_id: 3,
            state: out,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_DMA_ENG_GET_STATE, &get), Ok(0));
        let v: DmaEngState = b.mem.get(out);
        assert_eq!((v.revision_id, v.max_queues, v.tx_state), (4, 16, 3));
        let bad = DmaEngSetState {
            eng_id: 9999,
            state: 2,
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_ENG_SET_STATE, &bad),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            b.raw(NEURON_IOCTL_DMA_QUIESCE_QUEUES, 0),
            Err(Errno::ENOIOCTLCMD)
        );
    }

    #[test]
    fn queue_init_batch_and_errors() {
        let b = Bench::v3();
        // Copy-in failure is EACCES for both versions.
        assert_eq!(b.raw(NEURON_IOCTL_DMA_QUEUE_INIT, 8), Err(Errno::EACCES));
        assert_eq!(
            b.raw(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, 8),
            Err(Errno::EACCES)
        );
        let mut batch = vec![0u8; size_of::<DmaQueueInitBatch>()];
        batch[..4].copy_from_slice(&256u32.to_le_bytes());
        assert_eq!(
            b.raw(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, b.mem.put_bytes(&batch)),
            Err(Errno::E2BIG)
        );
        let ring = b.alloc(4096, true);
        let e = DmaQueueInit {
            eng_id: 1,
            qid: 2,
            tx_desc_count: 64,
            rx_desc_count: 64,
            tx_handle: ring,
            rx_handle: ring,
            ..Default::default()
        };
        batch[..4].copy_from_slice(&1u32.to_le_bytes());
        batch[8..8 + size_of::<DmaQueueInit>()].copy_from_slice(e.as_bytes());
        assert_eq!(
            b.raw(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, b.mem.put_bytes(&batch)),
            Ok(0)
        );
        assert_eq!(b.emu.devices[0].lock().queue_owner.get(&(1, 2)), Some(&PID));
        let bad = DmaQueueInit { qid: 16, ..e };
        assert_eq!(b.run(NEURON_IOCTL_DMA_QUEUE_INIT, &bad), Err(Errno::EINVAL));
        let bad = DmaQueueInit { rxc_handle: 1, ..e };
        assert_eq!(b.run(NEURON_IOCTL_DMA_QUEUE_INIT, &bad), Err(Errno::EINVAL));
    }

    #[test]
    fn descriptors_are_checked_before_anything_is_written() {
        let b = Bench::v3();
        let ring = b.alloc(4096, true);
        let data = b.alloc(4096, true);
        let data_pa = b.emu.devices[0].lock().chunks.get(data).map_or(0, |c| c.pa);
        let good = UdmaDesc {
            buf_ptr: data_pa,
            ..Default::default()
        };
        let stray = UdmaDesc {
            buf_ptr: data_pa | 0x1_0000_0000,
            ..Default::default()
        };
        let mut descs = good.as_bytes().to_vec();
        descs.extend_from_slice(stray.as_bytes());
        let user = b.mem.put_bytes(&descs);
        let a = DmaCopyDescriptors64 {
            mem_handle: ring,
            buffer: user,
            num_descs: 2,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &a),
            Err(Errno::EINVAL)
        );
        let ring_pa = b.emu.devices[0].lock().chunks.get(ring).map_or(0, |c| c.pa);
        let mut w = [0u8; 16];
        let _ = b.emu.devices[0].lock().dev.read(ring_pa, &mut w);
        assert_eq!(w, [0u8; 16], "nothing written on a bad descriptor");
        let a = DmaCopyDescriptors64 { num_descs: 1, ..a };
        assert_eq!(b.run(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &a), Ok(0));
        let t = DmaCopyDescriptors64 { queue_type: 2, ..a };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &t),
            Err(Errno::EINVAL)
        );
        // Huge counts: past the chunk is EINVAL; inside a huge chunk, a short user buffer is
        // EFAULT on the first block (no buffer of the requested size is ever allocated).
        let huge = DmaCopyDescriptors {
            num_descs: u32::MAX,
            mem_handle: ring,
            buffer: user,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_COPY_DESCRIPTORS, &huge),
            Err(Errno::EINVAL)
        );
        let big = b.alloc(1 << 32, false);
        let huge = DmaCopyDescriptors64 {
            mem_handle: big,
            num_descs: 1 << 28,
            ..a
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &huge),
            Err(Errno::EFAULT)
        );
    }

    #[test]
    fn copyout_and_state_of_an_idle_queue() {
        let b = Bench::v3();
        let c = DmaDescriptorCopyout {
            eng_id: 0,
            qid: 0,
            count: 0,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &c),
            Err(Errno::EINVAL)
        );
        let c = DmaDescriptorCopyout { count: 1, ..c };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &c),
            Err(Errno::EINVAL)
        );
        let (tx, rx) = (b.mem.zeroed(48), b.mem.zeroed(48));
        let s = DmaQueueGetState {
            eng_id: 0,
            qid: 0,
            tx,
            rx,
        };
        assert_eq!(b.run(NEURON_IOCTL_DMA_QUEUE_GET_STATE, &s), Ok(0));
        let v: DmaQueueState = b.mem.get(tx);
        assert_eq!(v.sw_status, DMA_QUEUE_SW_DISABLED);
        let start = DmaQueueCopyStart {
            eng_id: 0,
            qid: 0,
            tx_desc_count: 1,
            rx_desc_count: 0,
        };
        assert_eq!(
            b.run(NEURON_IOCTL_DMA_QUEUE_COPY_START, &start),
            Err(Errno::EINVAL)
        );
    }
}
