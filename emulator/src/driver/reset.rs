//! Reset and core-init ioctls: NC_RESET / NC_RESET_READY, DEVICE_RESET / DEVICE_READY /
//! DEVICE_RESET_STATUS, the core-init token (CINIT_SET_STATE), NC_MODEL_STARTED_COUNT and the
//! no-op DEVICE_INIT / DEVICE_RELEASE (`driver-abi.md` §2.3, §7.1).

use super::{fwio, Ctx, R};
use crate::{release_chunk_memory, DevState};
use neuron_abi::consts::{
    CINIT_STATE_COMPLETED, CINIT_STATE_INVALID, CINIT_STATE_STARTED, NC_MAP_DEVICE,
    RESET_RESULT_FAILURE, RESET_RESULT_SUCCESS,
};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use std::time::Duration;

/// Bounded wait for another process's core init (the driver waits 10 × 500 ms; the emulator
/// much less, since nothing but another emulated process can change the state meanwhile).
const CINIT_WAIT: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub(crate) enum Req {
    /// DEVICE_INIT, DEVICE_RELEASE: accepted, nothing to do.
    Nop,
    NcReset(DeviceReset),
    NcResetReady(DeviceReady),
    DeviceReset,
    DeviceReady,
    ResetStatus,
    Cinit(CinitSet),
    StartedCount(NcModelStartedCount),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let nc_count = cx.arch().nc_count();
        Some(match cmd {
            NEURON_IOCTL_DEVICE_INIT | NEURON_IOCTL_DEVICE_RELEASE => Ok(Req::Nop),
            NEURON_IOCTL_NC_RESET => cx.arg::<cmd::NC_RESET>().map(Req::NcReset),
            NEURON_IOCTL_NC_RESET_READY => cx.arg::<cmd::NC_RESET_READY>().map(Req::NcResetReady),
            NEURON_IOCTL_DEVICE_RESET => Ok(Req::DeviceReset),
            NEURON_IOCTL_DEVICE_READY => Ok(Req::DeviceReady),
            NEURON_IOCTL_DEVICE_RESET_STATUS => Ok(Req::ResetStatus),
            NEURON_IOCTL_CINIT_SET_STATE => cx.arg::<cmd::CINIT_SET_STATE>().and_then(|a| {
                if a.nc_id >= nc_count {
                    return Err(Errno::E2BIG);
                }
                Ok(Req::Cinit(a))
            }),
            NEURON_IOCTL_NC_MODEL_STARTED_COUNT => {
                cx.arg::<cmd::NC_MODEL_STARTED_COUNT>().and_then(|a| {
                    if a.nc_id >= nc_count {
                        return Err(Errno::E2BIG);
                    }
                    Ok(Req::StartedCount(a))
                })
            }
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        let nc_count = cx.arch().nc_count();
        match self {
            Req::Nop => Ok(0),
            Req::NcReset(mut a) => {
                let mut g = cx.lock();
                if a.nc_map == NC_MAP_DEVICE {
                    reset_cores(&mut g, None);
                } else {
                    reset_cores(&mut g, Some(a.nc_map & ((1u64 << nc_count) - 1) as u32));
                }
                // Resets complete at once; the request waits to be collected by NC_RESET_READY.
                g.drv.reset_done.insert(cx.pid());
                drop(g);
                a.request_id = cx.pid();
                cx.reply(&a)
            }
            Req::NcResetReady(mut a) => {
                // A finished request reports success once; an unknown id reports failure.
                let known = cx.lock().drv.reset_done.remove(&a.request_id);
                a.result = if known {
                    RESET_RESULT_SUCCESS
                } else {
                    RESET_RESULT_FAILURE
                };
                cx.reply(&a)
            }
            Req::DeviceReset => {
                let mut g = cx.lock();
                reset_cores(&mut g, None);
                g.drv.reset_done.insert(cx.pid());
                Ok(0)
            }
            Req::DeviceReady => {
                // Waits for the caller's reset; reports 1 (success) also when none is pending.
                cx.lock().drv.reset_done.remove(&cx.pid());
                cx.copy_out(cx.arg, &[1u8]).map(|_| 0)
            }
            Req::ResetStatus => cx.copy_out(cx.arg, &[1u8]).map(|_| 0),
            Req::Cinit(a) => cinit_set_state(cx, a),
            Req::StartedCount(mut a) => {
                // Only ever incremented on v1 (Inf1) by the driver.
                a.started_count = 0;
                cx.reply(&a)
            }
        }
    }
}

/// Reset one core: the firmware resets it (`fwio::reset`), then the driver's side effects.
pub(crate) fn reset_nc(g: &mut DevState, nc: u32) {
    reset_cores(g, Some(1 << nc));
}

/// Reset the cores of `nc_map` (bit n: core n) with a TPB reset, or the whole device (`None`):
/// the firmware handshake resets the hardware, then each core's driver state goes.
fn reset_cores(g: &mut DevState, nc_map: Option<u32>) {
    let arch = g.dev.profile().arch;
    let cores: Vec<u32> = (0..arch.nc_count())
        .filter(|nc| nc_map.is_none_or(|m| m & (1 << nc) != 0))
        .collect();
    let ok = fwio::reset(
        g,
        nc_map.is_none(),
        nc_map.unwrap_or(0),
        arch.architecture() >= 3,
    );
    for &nc in &cores {
        if !ok {
            // The firmware never reported the reset done: counted as failed
            // (`reset_fail_count`), the driver's state is still reset.
            tracing::error!(target: "KDRV", "reset of nc{nc} timed out waiting for the firmware");
            if let Some(n) = g.drv.reset_fail.get_mut(nc as usize) {
                *n += 1;
            }
        }
        reset_nc_state(g, nc);
    }
}

/// The driver's side of a core reset: its request count, core-init token and notification
/// queues (the hardware was reset by the firmware).
fn reset_nc_state(g: &mut DevState, nc: u32) {
    // sysfs `other_info/reset_req_count` counts every request per core (`driver-abi.md` §7.1).
    if let Some(n) = g.drv.reset_req.get_mut(nc as usize) {
        *n += 1;
    }
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

fn cinit_set_state(cx: &Ctx, mut a: CinitSet) -> R {
    let nc = a.nc_id as usize;
    let mut g = cx.lock();
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
                    g = cx.lock();
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
    cx.reply(&a)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;

    #[test]
    fn cinit_token_then_reset_returns_it() {
        let b = Bench::v3();
        let s = |state| CinitSet {
            nc_id: 0,
            state,
            new_state: 0,
        };
        let (r, v) = b.io(NEURON_IOCTL_CINIT_SET_STATE, &s(CINIT_STATE_STARTED));
        assert_eq!((r, v.new_state), (Ok(0), CINIT_STATE_STARTED));
        let (_, v) = b.io(NEURON_IOCTL_CINIT_SET_STATE, &s(CINIT_STATE_COMPLETED));
        assert_eq!(v.new_state, CINIT_STATE_COMPLETED);
        let bad = CinitSet { nc_id: 8, ..s(1) };
        assert_eq!(b.run(NEURON_IOCTL_CINIT_SET_STATE, &bad), Err(Errno::E2BIG));
        let (r, v) = b.io(
            NEURON_IOCTL_NC_RESET,
            &DeviceReset {
                nc_map: 1,
                request_id: 0,
            },
        );
        assert_eq!((r, v.request_id), (Ok(0), PID));
        let (_, v) = b.io(NEURON_IOCTL_CINIT_SET_STATE, &s(0));
        assert_eq!(v.new_state, CINIT_STATE_INVALID);
        let ready = DeviceReady {
            request_id: PID,
            result: 7,
        };
        let (_, v) = b.io(NEURON_IOCTL_NC_RESET_READY, &ready);
        assert_eq!(v.result, RESET_RESULT_SUCCESS);
        let (_, v) = b.io(NEURON_IOCTL_NC_RESET_READY, &ready);
        assert_eq!(v.result, RESET_RESULT_FAILURE);
    }

    #[test]
    fn device_ready_and_status_write_one_byte() {
        let b = Bench::v2();
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_RESET, 0), Ok(0));
        let out = b.mem.zeroed(1);
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_READY, out), Ok(0));
        assert_eq!(b.mem.bytes(out, 1), [1]);
        assert_eq!(
            b.raw(NEURON_IOCTL_DEVICE_RESET_STATUS, 0),
            Err(Errno::EFAULT)
        );
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_INIT, 0), Ok(0));
        let c = NcModelStartedCount {
            nc_id: 1,
            started_count: 5,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_NC_MODEL_STARTED_COUNT, &c);
        assert_eq!((r, v.started_count), (Ok(0), 0));
    }
}
