//! The remaining ioctls: the datastore (ACQUIRE / RELEASE_NEURON_DS), metrics (POST_METRIC,
//! METRICS_CTRL), power profiles and PRINTK (`driver-abi.md` §2.3, §7).

use super::{Ctx, R};
use crate::drvstate;
use neuron_abi::consts::{
    POWER_PROFILE_CTRL_GET, POWER_PROFILE_CTRL_SET, POWER_PROFILE_SZ, PRINTK_MAX_LEN,
};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;

/// Largest POST_METRIC payload the emulator reads (the driver's firmware mailbox bound).
const POST_METRIC_MAX: u32 = 4 << 20;

#[derive(Debug)]
pub(crate) enum Req {
    AcquireDs(NeuronDsInfo),
    ReleaseDs(i32),
    PostMetric { data: u64, size: u32 },
    MetricsCtrl(u32),
    SetPowerProfile(u32),
    GetPerformanceProfile(PowerProfile),
    AvailablePerfProfiles(AvailablePerfProfiles),
    Printk { buffer: u64, size: u32 },
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(match cmd {
            NEURON_IOCTL_ACQUIRE_NEURON_DS => cx.arg::<cmd::ACQUIRE_NEURON_DS>().map(Req::AcquireDs),
            NEURON_IOCTL_RELEASE_NEURON_DS => cx
                .arg::<cmd::RELEASE_NEURON_DS>()
                .map(|a| Req::ReleaseDs(a.pid)),
            NEURON_IOCTL_POST_METRIC => cx.arg::<cmd::POST_METRIC>().and_then(|a| {
                if a.data_size > POST_METRIC_MAX {
                    tracing::warn!(target: "KDRV", "post_metric: refusing {} bytes (limit {POST_METRIC_MAX})", a.data_size);
                    return Err(Errno::ENOMEM);
                }
                Ok(Req::PostMetric {
                    data: a.data,
                    size: a.data_size,
                })
            }),
            NEURON_IOCTL_METRICS_CTRL => cx.arg::<cmd::METRICS_CTRL>().and_then(|a| {
                if a.mode > 1 {
                    return Err(Errno::EINVAL);
                }
                Ok(Req::MetricsCtrl(a.mode))
            }),
            NEURON_IOCTL_POWER_PROFILE => cx.arg::<cmd::POWER_PROFILE>().and_then(|a| {
                check_profile(&a, POWER_PROFILE_CTRL_SET)?;
                Ok(Req::SetPowerProfile(a.profile))
            }),
            NEURON_IOCTL_GET_PERFORMANCE_PROFILE => {
                cx.arg::<cmd::GET_PERFORMANCE_PROFILE>().and_then(|a| {
                    check_profile(&a, POWER_PROFILE_CTRL_GET)?;
                    Ok(Req::GetPerformanceProfile(a))
                })
            }
            NEURON_IOCTL_AVAILABLE_PERF_PROFILES => cx
                .arg::<cmd::AVAILABLE_PERF_PROFILES>()
                .map(Req::AvailablePerfProfiles),
            NEURON_IOCTL_PRINTK => cx.arg::<cmd::PRINTK>().and_then(|a| {
                if a.size > PRINTK_MAX_LEN {
                    return Err(Errno::EFAULT);
                }
                Ok(Req::Printk {
                    buffer: a.buffer,
                    size: a.size,
                })
            }),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::AcquireDs(mut a) => {
                let (pa, size) = drvstate::datastore_acquire(&mut cx.lock(), a.pid, cx.pid())?;
                a.mmap_offset = pa;
                a.size = size as u32;
                cx.reply(&a)
            }
            Req::ReleaseDs(pid) => {
                let mut g = cx.lock();
                // Only the owner's release clears an entry (pid 0 names the caller's own).
                let target = if pid == 0 { cx.pid() } else { pid as u32 };
                if target == cx.pid() {
                    drvstate::datastore_release(&mut g, cx.pid());
                }
                Ok(0)
            }
            Req::PostMetric { data, size } => {
                let mut buf = vec![0u8; size as usize];
                cx.copy_in(data, &mut buf)?;
                super::fwio::post_metric(&mut cx.lock(), &buf).map(|_| 0)
            }
            Req::MetricsCtrl(mode) => {
                cx.lock().drv.metrics_mode = mode;
                Ok(0)
            }
            // v3 and later ask the firmware (`perf_*_v3`); v2 has no performance profiles and
            // keeps the driver's value.
            Req::SetPowerProfile(p) => {
                if cx.arch().architecture() < 3 {
                    return Ok(0);
                }
                let mut g = cx.lock();
                match super::fwio::set_power_profile(&mut g, p) {
                    Ok(()) => {
                        g.drv.power_profile = p;
                        Ok(0)
                    }
                    Err(e) => {
                        // As the driver: re-read what the firmware now runs.
                        if let Ok(cur) = super::fwio::get_performance_profile(&mut g) {
                            g.drv.power_profile = cur;
                        }
                        Err(e)
                    }
                }
            }
            Req::GetPerformanceProfile(mut a) => {
                let mut g = cx.lock();
                a.profile = if cx.arch().architecture() >= 3 {
                    super::fwio::get_performance_profile(&mut g)?
                } else {
                    g.drv.power_profile
                };
                drop(g);
                cx.reply(&a)
            }
            Req::AvailablePerfProfiles(mut a) => {
                if cx.arch().architecture() >= 3 {
                    let (n, bitmap) =
                        super::fwio::get_available_profiles(&mut cx.lock(), a.requested_feature)?;
                    a.num_profiles = n;
                    a.bitmap = bitmap;
                } else {
                    // One profile (0, the default), whatever feature is asked about.
                    a.num_profiles = 1;
                    a.bitmap = [0; 32];
                    a.bitmap[0] = 1;
                }
                cx.reply(&a)
            }
            Req::Printk { buffer, size } => {
                let mut buf = vec![0u8; size as usize];
                cx.copy_in(buffer, &mut buf)?;
                if buf.last() != Some(&0) {
                    return Err(Errno::EBADMSG);
                }
                let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
                let text = String::from_utf8_lossy(&buf[..end]);
                tracing::error!(target: "KDRV", "{text}");
                let now = cx.lock().dev.now().0;
                cx.global().lock_kmsg().push(cx.index(), now, &text);
                Ok(0)
            }
        }
    }
}

/// POWER_PROFILE / GET_PERFORMANCE_PROFILE: `sz` must be 8 (`ENXIO`), `ctrl` the command's.
fn check_profile(a: &PowerProfile, ctrl: u16) -> Result<(), Errno> {
    if a.sz != POWER_PROFILE_SZ {
        return Err(Errno::ENXIO);
    }
    if a.ctrl != ctrl {
        return Err(Errno::ENOTSUPP);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;

    #[test]
    fn datastore_acquire_release() {
        let b = Bench::v3();
        let (r, v) = b.io(NEURON_IOCTL_ACQUIRE_NEURON_DS, &NeuronDsInfo::default());
        assert_eq!(r, Ok(0));
        assert_eq!(v.size, 256 << 10);
        let other = NeuronDsInfo {
            pid: PID as i32,
            ..Default::default()
        };
        let (r, w) = b.io(NEURON_IOCTL_ACQUIRE_NEURON_DS, &other);
        assert_eq!((r, w.mmap_offset), (Ok(0), v.mmap_offset));
        assert_eq!(
            b.run(NEURON_IOCTL_RELEASE_NEURON_DS, &NeuronDsInfo::default()),
            Ok(0)
        );
        assert_eq!(
            b.run(NEURON_IOCTL_ACQUIRE_NEURON_DS, &other),
            Err(Errno::ENOENT)
        );
    }

    #[test]
    fn profiles_and_metrics() {
        let b = Bench::v3();
        let set = PowerProfile {
            sz: 8,
            ctrl: 0,
            profile: 2,
        };
        assert_eq!(b.run(NEURON_IOCTL_POWER_PROFILE, &set), Ok(0));
        let get = PowerProfile { ctrl: 1, ..set };
        let (r, v) = b.io(NEURON_IOCTL_GET_PERFORMANCE_PROFILE, &get);
        assert_eq!((r, v.profile), (Ok(0), 2));
        assert_eq!(
            b.run(NEURON_IOCTL_GET_PERFORMANCE_PROFILE, &set),
            Err(Errno::ENOTSUPP)
        );
        let bad = PowerProfile { sz: 4, ..set };
        assert_eq!(b.run(NEURON_IOCTL_POWER_PROFILE, &bad), Err(Errno::ENXIO));
        assert_eq!(
            b.run(NEURON_IOCTL_METRICS_CTRL, &MetricsCtrl { mode: 2 }),
            Err(Errno::EINVAL)
        );
        let big = PostMetric {
            data: 0,
            data_size: POST_METRIC_MAX + 1,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_POST_METRIC, &big), Err(Errno::ENOMEM));
    }

    #[test]
    fn printk_needs_a_terminated_short_message() {
        let b = Bench::v3();
        let msg = b.mem.put_bytes(b"hello\0");
        let p = Printk {
            buffer: msg,
            size: 6,
            action: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_PRINTK, &p), Ok(0));
        let p2 = Printk { size: 5, ..p };
        assert_eq!(b.run(NEURON_IOCTL_PRINTK, &p2), Err(Errno::EBADMSG));
        let p3 = Printk { size: 513, ..p };
        assert_eq!(b.run(NEURON_IOCTL_PRINTK, &p3), Err(Errno::EFAULT));
        // Accepted on a misc fd.
        let a = b.mem.put(&p);
        assert_eq!(b.raw_misc(NEURON_IOCTL_PRINTK, a), Ok(0));
    }
}
