//! Host-to-device (H2T) queue reservations, their completion queues (2.27), and HBM scrubs
//! (`driver-abi.md` §2.3, §3.1, §3.5).

use super::{Ctx, R};
use crate::chunks::Lifespan;
use neuron_abi::consts::{MemType, DMA_ENG_MAX_QUEUES};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use std::mem::size_of;
use zerocopy::FromZeros;

/// Entries per H2D completion queue the emulator creates (project-defined).
const COMPL_QUEUE_CAPACITY: u32 = 256;

#[derive(Debug)]
pub(crate) enum Req {
    Alloc(H2tDmaAllocQueues),
    Free { nc: u32, bmap: u32 },
    ComplQueues(Box<GetAsyncH2tDmaComplQueues>),
    ScrubStart(HbmScrubStart),
    ScrubWait(u32),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let arch = cx.arch();
        Some(match cmd {
            NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES => {
                cx.arg::<cmd::H2T_DMA_ALLOC_QUEUES>().and_then(|a| {
                    let want = a.copy_queue_cnt as u32 + a.service_queue_cnt as u32;
                    if a.sz as usize != size_of::<H2tDmaAllocQueues>()
                        || a.nc_id as u32 >= arch.nc_count()
                        || want >= DMA_ENG_MAX_QUEUES
                    {
                        return Err(Errno::EINVAL);
                    }
                    Ok(Req::Alloc(a))
                })
            }
            NEURON_IOCTL_H2T_DMA_FREE_QUEUES => {
                cx.arg::<cmd::H2T_DMA_FREE_QUEUES>().and_then(|a| {
                    if a.sz as usize != size_of::<H2tDmaFreeQueues>()
                        || a.nc_id as u32 >= arch.nc_count()
                    {
                        return Err(Errno::EINVAL);
                    }
                    Ok(Req::Free {
                        nc: a.nc_id as u32,
                        bmap: a.queue_bmap,
                    })
                })
            }
            NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES => cx
                .arg::<cmd::GET_ASYNC_H2T_DMA_COMPL_QUEUES>()
                .and_then(|a| {
                    if a.nc_id >= arch.nc_count() || a.qid_bitmap >> 16 != 0 {
                        return Err(Errno::EINVAL);
                    }
                    Ok(Req::ComplQueues(Box::new(a)))
                }),
            NEURON_IOCTL_HBM_SCRUB_START => cx.arg::<cmd::HBM_SCRUB_START>().and_then(|a| {
                if a.hbm_index >= arch.hbm_count() {
                    return Err(Errno::EPERM);
                }
                if a.nc_id >= arch.nc_count() {
                    return Err(Errno::EINVAL);
                }
                Ok(Req::ScrubStart(a))
            }),
            NEURON_IOCTL_HBM_SCRUB_WAIT => cx
                .arg::<cmd::HBM_SCRUB_WAIT>()
                .map(|a| Req::ScrubWait(a.hbm_index)),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Alloc(a) => alloc(cx, a),
            Req::Free { nc, bmap } => {
                let mut g = cx.lock();
                let h = &mut g.drv.h2t[nc as usize];
                h.copy_bmap &= !bmap;
                h.service_bmap &= !bmap;
                Ok(0)
            }
            Req::ComplQueues(a) => compl_queues(cx, *a),
            Req::ScrubStart(a) => {
                let arch = cx.arch();
                let base = arch.hbm_base(a.hbm_index).ok_or(Errno::EPERM)?;
                let start = base + arch.hbm_reserved_bytes();
                let len = arch.hbm_size() - arch.hbm_reserved_bytes();
                let mut g = cx.lock();
                // The whole usable HBM, chunks included, is overwritten (synchronously here).
                g.dev
                    .scrub_hbm(start, len, a.init_val)
                    .map_err(|_| Errno::EPERM)?;
                g.drv.scrub_pending[a.hbm_index as usize] = true;
                Ok(0)
            }
            Req::ScrubWait(hbm) => {
                let mut g = cx.lock();
                match g.drv.scrub_pending.get_mut(hbm as usize) {
                    Some(p) if *p => {
                        *p = false;
                        Ok(0)
                    }
                    // No scrub context for that HBM (or no such HBM): the driver returns -1.
                    _ => Err(Errno::EPERM),
                }
            }
        }
    }
}

fn alloc(cx: &Ctx, mut a: H2tDmaAllocQueues) -> R {
    let arch = cx.arch();
    let nc = a.nc_id as u32;
    let eng = arch.h2t_engine(nc).ok_or(Errno::EINVAL)?;
    let mut g = cx.lock();
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
            let q = (0..DMA_ENG_MAX_QUEUES).find(|q| *used & (1 << q) == 0)?;
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
    cx.reply(&a)
}

fn compl_queues(cx: &Ctx, mut a: GetAsyncH2tDmaComplQueues) -> R {
    let arch = cx.arch();
    let mut g = cx.lock();
    let h = g.drv.h2t[a.nc_id as usize].clone();
    let ready = h.copy_bmap | (1 << arch.h2t_default_queue(a.nc_id).unwrap_or(0));
    if a.qid_bitmap & !ready != 0 {
        // A queue that was never set up has no completion queue.
        return Err(Errno::EINVAL);
    }
    let bytes = 16 + COMPL_QUEUE_CAPACITY as u64 * 24;
    for q in 0..DMA_ENG_MAX_QUEUES {
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
                    tracing::warn!(target: "KDRV", "h2t completion queue: no host memory");
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
    cx.reply(&a)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::Bench;
    use super::*;

    #[test]
    fn reserve_free_and_completion_queues() {
        let b = Bench::v3();
        let a = H2tDmaAllocQueues {
            sz: 20,
            nc_id: 0,
            copy_queue_cnt: 2,
            service_queue_cnt: 1,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES, &a);
        assert_eq!(r, Ok(0));
        assert_eq!(v.copy_queue_bmap.count_ones(), 2);
        assert_eq!(v.service_queue_bmap.count_ones(), 1);
        assert_eq!(v.copy_queue_bmap & v.service_queue_bmap, 0);
        let c = GetAsyncH2tDmaComplQueues {
            nc_id: 0,
            qid_bitmap: v.copy_queue_bmap,
            ..Default::default()
        };
        let (r, cq) = b.io(NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES, &c);
        assert_eq!(r, Ok(0));
        let q = v.copy_queue_bmap.trailing_zeros() as usize;
        assert_ne!(cq.compl_queue_info[q].mmap_offset, 0);
        let f = H2tDmaFreeQueues {
            sz: 8,
            nc_id: 0,
            queue_bmap: v.copy_queue_bmap,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_H2T_DMA_FREE_QUEUES, &f), Ok(0));
        // Freed queues have no completion queue any more.
        assert_eq!(
            b.run(NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES, &c),
            Err(Errno::EINVAL)
        );
        let bad = H2tDmaAllocQueues { sz: 8, ..a };
        assert_eq!(
            b.run(NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES, &bad),
            Err(Errno::EINVAL)
        );
        let many = H2tDmaAllocQueues {
            copy_queue_cnt: 15,
            service_queue_cnt: 1,
            ..a
        };
        assert_eq!(
            b.run(NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES, &many),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn scrub_start_then_wait_once() {
        let b = Bench::v2();
        let w = HbmScrubWait {
            nc_id: 0,
            hbm_index: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_HBM_SCRUB_WAIT, &w), Err(Errno::EPERM));
        let s = HbmScrubStart {
            nc_id: 0,
            hbm_index: 0,
            axi_port: 0,
            init_val: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_HBM_SCRUB_START, &s), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_HBM_SCRUB_WAIT, &w), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_HBM_SCRUB_WAIT, &w), Err(Errno::EPERM));
        let s = HbmScrubStart { hbm_index: 99, ..s };
        assert_eq!(b.run(NEURON_IOCTL_HBM_SCRUB_START, &s), Err(Errno::EPERM));
    }
}
