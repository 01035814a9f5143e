//! Core reader/writer locks (CRWL_READER_* / WRITER_*), NeuronCore range reservations
//! (CRWL_NC_RANGE_MARK / UNMARK and their EXT0 versions folded) and NC_PID_STATE_DUMP
//! (`driver-abi.md` §2.3, §7).

use super::{Ctx, R};
use crate::drvstate::{self, CRWL_GLOBAL_SLOTS, MAX_NC_PER_DEVICE};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use std::mem::size_of;
use std::time::Duration;
use zerocopy::IntoBytes;

/// Bounded lock waits (the driver waits 0.5 s / 2 s; the emulator much less, since nothing but
/// another emulated process can change the state meanwhile).
const CRWL_READER_WAIT: Duration = Duration::from_millis(20);
const CRWL_WRITER_WAIT: Duration = Duration::from_millis(50);

/// Which lock operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockOp {
    ReaderEnter,
    ReaderExit,
    WriterEnter,
    WriterDowngrade,
}

#[derive(Debug)]
pub(crate) enum Req {
    Lock {
        op: LockOp,
        nc: u32,
        uuid: [u8; 32],
    },
    /// RANGE_MARK (`size` 24, the 64-core bitmap) or RANGE_MARK_EXT0 (80, 512 cores), widened.
    Mark {
        size: usize,
        a: CrwlNcMapExt,
    },
    Unmark(CrwlNcMapExt),
    PidStateDump(u32),
}

/// The 24-byte struct as the first bytes of the EXT0 one.
fn widen(a: CrwlNcMap) -> CrwlNcMapExt {
    let mut bitmap = [0u64; 8];
    bitmap[0] = a.bitmap;
    CrwlNcMapExt {
        nc_count: a.nc_count,
        start_nc_index: a.start_nc_index,
        end_nc_index: a.end_nc_index,
        max_nc_available: a.max_nc_available,
        bitmap,
    }
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let lock = |op| {
            cx.arg::<cmd::CRWL_READER_ENTER>().map(|a| Req::Lock {
                op,
                nc: a.nc_id,
                uuid: a.uuid.value,
            })
        };
        const NARROW: usize = size_of::<CrwlNcMap>();
        const WIDE: usize = size_of::<CrwlNcMapExt>();
        Some(match cmd {
            NEURON_IOCTL_CRWL_READER_ENTER => lock(LockOp::ReaderEnter),
            NEURON_IOCTL_CRWL_READER_EXIT => lock(LockOp::ReaderExit),
            NEURON_IOCTL_CRWL_WRITER_ENTER => lock(LockOp::WriterEnter),
            NEURON_IOCTL_CRWL_WRITER_DOWNGRADE => lock(LockOp::WriterDowngrade),
            NEURON_IOCTL_CRWL_NC_RANGE_MARK => {
                cx.arg::<cmd::CRWL_NC_RANGE_MARK>().map(|a| Req::Mark {
                    size: NARROW,
                    a: widen(a),
                })
            }
            NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0 => cx
                .arg::<cmd::CRWL_NC_RANGE_MARK_EXT0>()
                .map(|a| Req::Mark { size: WIDE, a }),
            NEURON_IOCTL_CRWL_NC_RANGE_UNMARK => cx
                .arg::<cmd::CRWL_NC_RANGE_UNMARK>()
                .map(|a| Req::Unmark(widen(a))),
            NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0 => {
                cx.arg::<cmd::CRWL_NC_RANGE_UNMARK_EXT0>().map(Req::Unmark)
            }
            NEURON_IOCTL_NC_PID_STATE_DUMP => cx.arg::<cmd::NC_PID_STATE_DUMP>().and_then(|a| {
                if a.nc_id as usize >= CRWL_GLOBAL_SLOTS {
                    return Err(Errno::ENOENT);
                }
                Ok(Req::PidStateDump(a.nc_id))
            }),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Lock { op, nc, uuid } => crwl(cx, op, nc, uuid),
            Req::Mark { size, mut a } => {
                a.bitmap = [0; 8];
                let off = cx.arch().nc_count() * cx.index() as u32;
                let r = range_mark(
                    cx,
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
                cx.copy_out(cx.arg, &a.as_bytes()[..size])?;
                res
            }
            Req::Unmark(a) => {
                let off = (cx.arch().nc_count() * cx.index() as u32) as usize;
                let mut table = cx.global().lock_range();
                for rel in 0..CRWL_GLOBAL_SLOTS {
                    if a.bitmap[rel / 64] & (1 << (rel % 64)) != 0 {
                        if let Some(o) = table.get_mut(rel + off) {
                            if *o == cx.pid() {
                                *o = 0;
                            }
                        }
                    }
                }
                Ok(0)
            }
            Req::PidStateDump(nc_id) => {
                let pid = cx.global().lock_range()[nc_id as usize];
                if pid == 0 {
                    return Ok(0);
                }
                let dev = nc_id / cx.arch().nc_count();
                if dev as usize >= cx.global().count {
                    return Err(Errno::EPERM);
                }
                tracing::info!(target: "KDRV", "nc_pid_state_dump: nc_id {nc_id} pid {pid} (process state not tracked by the emulator)");
                Ok(0)
            }
        }
    }
}

/// Claim `count` consecutive free global core slots in `[start, end]` for the caller (first
/// fit). Returns the claimed slots and the largest free run seen, or the errno and that run.
fn range_mark(
    cx: &Ctx,
    count: u32,
    start: u32,
    end: u32,
) -> Result<(Vec<usize>, u32), (Errno, u32)> {
    let n = CRWL_GLOBAL_SLOTS as u32;
    if start > end || start >= n || end >= n {
        return Err((Errno::EINVAL, 0));
    }
    let mut table = cx.global().lock_range();
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
                table[k] = cx.pid();
            }
            return Ok((slots, best.max(run)));
        }
        best = best.max(run);
        i = j + 1;
    }
    Err((Errno::EBUSY, best))
}

fn crwl(cx: &Ctx, op: LockOp, nc: u32, uuid: [u8; 32]) -> R {
    if nc >= MAX_NC_PER_DEVICE {
        return Err(Errno::EINVAL);
    }
    let nc = nc as usize;
    let pid = cx.pid();
    let valid = |c: &drvstate::Crwl| -> Result<(), Errno> {
        if c.uuid != uuid || c.writer_pid != pid {
            return Err(Errno::ENOENT);
        }
        Ok(())
    };
    let mut g = cx.lock();
    match op {
        LockOp::ReaderEnter => {
            let t = std::time::Instant::now();
            while g.drv.crwl[nc].writer_acquired {
                if t.elapsed() > CRWL_READER_WAIT {
                    return Err(Errno::EBUSY);
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                g = cx.lock();
            }
            valid(&g.drv.crwl[nc])?;
            g.drv.crwl[nc].reader_count += 1;
            Ok(0)
        }
        LockOp::ReaderExit => {
            valid(&g.drv.crwl[nc])?;
            let c = &mut g.drv.crwl[nc];
            if c.reader_count == 0 {
                return Err(Errno::EINVAL);
            }
            c.reader_count -= 1;
            Ok(0)
        }
        LockOp::WriterEnter => {
            let t = std::time::Instant::now();
            while g.drv.crwl[nc].writer_acquired || g.drv.crwl[nc].reader_count > 0 {
                if t.elapsed() > CRWL_WRITER_WAIT {
                    return Err(Errno::EBUSY);
                }
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                g = cx.lock();
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
        LockOp::WriterDowngrade => {
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

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;

    fn lock(nc: u32, u: u8) -> Crwl {
        Crwl {
            nc_id: nc,
            uuid: Uuid32 { value: [u; 32] },
        }
    }

    #[test]
    fn writer_downgrade_reader_exit() {
        let b = Bench::v3();
        assert_eq!(b.run(NEURON_IOCTL_CRWL_WRITER_ENTER, &lock(0, 1)), Ok(0));
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_READER_EXIT, &lock(0, 2)),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_WRITER_DOWNGRADE, &lock(0, 1)),
            Ok(0)
        );
        assert_eq!(b.run(NEURON_IOCTL_CRWL_READER_EXIT, &lock(0, 1)), Ok(0));
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_READER_EXIT, &lock(0, 1)),
            Err(Errno::EINVAL)
        );
        // Re-entering as writer for the same model: EALREADY (the lock stays taken).
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_WRITER_ENTER, &lock(0, 1)),
            Err(Errno::EALREADY)
        );
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_WRITER_ENTER, &lock(8, 1)),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn range_mark_versions_report_in_their_own_size() {
        let b = Bench::v3();
        let m = CrwlNcMap {
            nc_count: 2,
            start_nc_index: 0,
            end_nc_index: 7,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_CRWL_NC_RANGE_MARK, &m);
        assert_eq!((r, v.bitmap), (Ok(0), 0b11));
        assert_eq!(b.emu.devices[0].global.lock_range()[..3], [PID, PID, 0]);
        let e = CrwlNcMapExt {
            nc_count: 8,
            start_nc_index: 0,
            end_nc_index: 7,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0, &e);
        assert_eq!((r, v.max_nc_available), (Err(Errno::EBUSY), 6));
        let u = CrwlNcMap { bitmap: 0b1, ..m };
        assert_eq!(b.run(NEURON_IOCTL_CRWL_NC_RANGE_UNMARK, &u), Ok(0));
        assert_eq!(b.emu.devices[0].global.lock_range()[..3], [0, PID, 0]);
        let bad = CrwlNcMap {
            start_nc_index: 9,
            end_nc_index: 1,
            ..m
        };
        assert_eq!(
            b.run(NEURON_IOCTL_CRWL_NC_RANGE_MARK, &bad),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn pid_state_dump_bounds() {
        let b = Bench::v3();
        let d = NcPidStateDump {
            nc_id: 512,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_NC_PID_STATE_DUMP, &d),
            Err(Errno::ENOENT)
        );
        let d = NcPidStateDump { nc_id: 3, ..d };
        assert_eq!(b.run(NEURON_IOCTL_NC_PID_STATE_DUMP, &d), Ok(0));
    }
}
