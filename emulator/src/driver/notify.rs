//! Notification-queue ioctls: NOTIFICATIONS_INIT_V1 / V2 / WITH_REALLOC_V2 folded into one
//! request, destroy, queue info and throttling (`driver-abi.md` §2.3, §4).

use super::{Ctx, R};
use crate::chunks::Lifespan;
use crate::release_chunk_memory;
use neuron_abi::consts::{nq_id_valid, MemType, NQ_DEVICE_TYPE_NEURON_CORE, NQ_ENGINES_PER_TYPE};
use neuron_abi::ioctl::*;
use neuron_abi::notify::ENTRY_SIZE;
use neuron_abi::structs::*;
use neuron_abi::Errno;

/// One queue-init request, whatever the struct version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NqInit {
    nc: u32,
    dev_type: u32,
    nq_type: u32,
    engine: u32,
    size: u32,
    host: bool,
    channel: u32,
    /// WITH_REALLOC_V2's `force_alloc_mem`: always make a new queue.
    force: bool,
}

/// The caller's struct, written back with the queue's mmap offset (and handle from V2 on).
#[derive(Debug)]
pub(crate) enum InitReply {
    V1(NotificationsInitV1),
    V2(NotificationsInitV2),
    Realloc(NotificationsInitWithReallocV2),
}

#[derive(Debug)]
pub(crate) enum Req {
    Init {
        q: NqInit,
        reply: InitReply,
    },
    /// NOTIFICATIONS_DESTROY_V1: accepted (queues go with their core's reset).
    Destroy,
    QueueInfo,
    Throttling(bool),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(match cmd {
            NEURON_IOCTL_NOTIFICATIONS_INIT_V1 => {
                cx.arg::<cmd::NOTIFICATIONS_INIT_V1>().map(|a| Req::Init {
                    q: NqInit {
                        nc: a.nc_id,
                        dev_type: NQ_DEVICE_TYPE_NEURON_CORE,
                        nq_type: a.nq_type,
                        engine: a.engine_index,
                        size: a.size,
                        host: true,
                        channel: 0,
                        force: false,
                    },
                    reply: InitReply::V1(a),
                })
            }
            NEURON_IOCTL_NOTIFICATIONS_INIT_V2 => {
                cx.arg::<cmd::NOTIFICATIONS_INIT_V2>().map(|a| Req::Init {
                    q: NqInit {
                        nc: a.nq_dev_id,
                        dev_type: a.nq_dev_type,
                        nq_type: a.nq_type,
                        engine: a.engine_index,
                        size: a.size,
                        host: a.on_host_memory != 0,
                        channel: a.dram_channel,
                        force: false,
                    },
                    reply: InitReply::V2(a),
                })
            }
            NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2 => cx
                .arg::<cmd::NOTIFICATIONS_INIT_WITH_REALLOC_V2>()
                .map(|a| Req::Init {
                    q: NqInit {
                        nc: a.nq_dev_id,
                        dev_type: a.nq_dev_type,
                        nq_type: a.nq_type,
                        engine: a.engine_index,
                        size: a.size,
                        host: a.on_host_memory != 0,
                        channel: a.dram_channel,
                        force: a.force_alloc_mem != 0,
                    },
                    reply: InitReply::Realloc(a),
                }),
            NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1 => Ok(Req::Destroy),
            NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO => Ok(Req::QueueInfo),
            NEURON_IOCTL_THROTTLING_NOTIFICATIONS => cx
                .arg::<cmd::THROTTLING_NOTIFICATIONS>()
                .map(|a| Req::Throttling(a.enable != 0)),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Init { q, reply } => {
                let (off, h) = nq_init(cx, q)?;
                match reply {
                    InitReply::V1(mut a) => {
                        a.mmap_offset = off;
                        cx.reply(&a)
                    }
                    InitReply::V2(mut a) => {
                        a.mmap_offset = off;
                        a.mem_handle = h;
                        cx.reply(&a)
                    }
                    InitReply::Realloc(mut a) => {
                        a.mmap_offset = off;
                        a.mem_handle = h;
                        cx.reply(&a)
                    }
                }
            }
            Req::Destroy => Ok(0),
            Req::QueueInfo => Err(Errno::EPERM),
            Req::Throttling(on) => {
                let mut g = cx.lock();
                if cx.arch().architecture() >= 3 {
                    super::fwio::enable_throttling_notifications(&mut g, on)?;
                }
                g.drv.throttling = on;
                Ok(0)
            }
        }
    }
}

/// Create (or reuse) the queue and point the core's notification block at it. Returns the
/// mmap offset (host queues; `u64::MAX` for device ones) and the chunk handle.
fn nq_init(cx: &Ctx, q: NqInit) -> Result<(u64, u64), Errno> {
    if q.dev_type != NQ_DEVICE_TYPE_NEURON_CORE {
        // TOP_SP queues (collectives sequencers) are not modelled.
        return Err(Errno::EINVAL);
    }
    if q.nc >= cx.arch().nc_count()
        || !nq_id_valid(q.nq_type, q.engine)
        || q.engine >= NQ_ENGINES_PER_TYPE
    {
        return Err(Errno::EINVAL);
    }
    if !q.size.is_power_of_two() || (q.size as usize) < ENTRY_SIZE {
        return Err(Errno::EINVAL);
    }
    let mut g = cx.lock();
    let key = (q.nc, q.nq_type, q.engine);
    let size = q.size as u64;
    let existing = g.nqs.get(&key).and_then(|h| g.chunks.get(*h)).cloned();
    let c = match existing {
        Some(c) if !q.force && c.size >= size && c.host == q.host => c,
        other => {
            if let Some(old) = other {
                g.nqs.remove(&key);
                if let Ok(Some(c)) = g.chunks.free(old.handle) {
                    release_chunk_memory(&mut g, &c);
                }
            }
            let mt = if q.host {
                MemType::NOTIFICATION_HOST
            } else {
                MemType::NOTIFICATION_DEVICE
            };
            // Device NQs are aligned to their own size (`driver-abi.md` §4).
            let align = if q.host { 0 } else { size };
            let c = g.chunks.alloc(
                size,
                align,
                q.host,
                q.channel,
                q.nc,
                mt.0,
                cx.pid(),
                Lifespan::Device,
            )?;
            if c.host && !g.add_host_memory(c.pa, c.size) {
                let _ = g.chunks.free(c.handle);
                tracing::warn!(target: "KDRV", "notifications_init: no host memory for a {size:#x}-byte queue");
                return Err(Errno::ENOMEM);
            }
            g.nqs.insert(key, c.handle);
            c
        }
    };
    g.dev
        .nq_configure(q.nc as usize, q.nq_type as u8, q.engine as u8, c.pa, size);
    let off = if c.host { c.pa } else { u64::MAX };
    Ok((off, c.handle))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::Bench;
    use super::*;
    use neuron_abi::consts::{NQ_TYPE_ERROR, NQ_TYPE_NOTIFY};

    #[test]
    fn versions_create_and_reuse_one_queue() {
        let b = Bench::v3();
        let v1 = NotificationsInitV1 {
            nc_id: 0,
            nq_type: NQ_TYPE_NOTIFY,
            engine_index: 1,
            size: 4096,
            ..Default::default()
        };
        let (r, a) = b.io(NEURON_IOCTL_NOTIFICATIONS_INIT_V1, &v1);
        assert_eq!(r, Ok(0));
        let v2 = NotificationsInitV2 {
            nq_dev_id: 0,
            nq_type: NQ_TYPE_NOTIFY,
            engine_index: 1,
            size: 4096,
            on_host_memory: 1,
            ..Default::default()
        };
        let (r, c) = b.io(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &v2);
        assert_eq!(r, Ok(0));
        assert_eq!(c.mmap_offset, a.mmap_offset, "same queue reused");
        let re = NotificationsInitWithReallocV2 {
            nq_dev_id: 0,
            nq_type: NQ_TYPE_NOTIFY,
            engine_index: 1,
            size: 4096,
            on_host_memory: 1,
            force_alloc_mem: 1,
            ..Default::default()
        };
        let (r, d) = b.io(NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2, &re);
        assert_eq!(r, Ok(0));
        assert_ne!(d.mem_handle, 0);
        assert_eq!(b.emu.devices[0].lock().nqs.len(), 1);
        // A device queue has no mmap offset.
        let dev = NotificationsInitV2 {
            nq_type: NQ_TYPE_ERROR,
            on_host_memory: 0,
            ..v2
        };
        let (r, e) = b.io(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &dev);
        assert_eq!((r, e.mmap_offset), (Ok(0), u64::MAX));
    }

    #[test]
    fn bad_queues_are_einval() {
        let b = Bench::v3();
        let ok = NotificationsInitV2 {
            nq_type: NQ_TYPE_NOTIFY,
            size: 4096,
            on_host_memory: 1,
            ..Default::default()
        };
        for bad in [
            NotificationsInitV2 { size: 4095, ..ok },
            NotificationsInitV2 { size: 8, ..ok },
            NotificationsInitV2 {
                nq_dev_type: 1,
                ..ok
            },
            NotificationsInitV2 {
                engine_index: 16,
                ..ok
            },
            NotificationsInitV2 { nq_type: 6, ..ok },
            NotificationsInitV2 { nq_dev_id: 8, ..ok },
        ] {
            assert_eq!(
                b.run(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &bad),
                Err(Errno::EINVAL),
                "{bad:?}"
            );
        }
        assert_eq!(
            b.raw(NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO, 0),
            Err(Errno::EPERM)
        );
        assert_eq!(b.raw(NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1, 0), Ok(0));
    }
}
