//! Semaphore and event ioctls: reads and writes of a core's register page (`driver-abi.md`
//! §2.3, §5: events at 0x0, semaphore values at 0x1000, set / increment / decrement registers
//! at 0x1400 / 0x1800 / 0x1C00).

use super::{Ctx, R};
use neuron_abi::consts::{
    EVENTS_PER_NC, SEMAPHORES_PER_NC, SEMA_PAGE_EVENT, SEMA_PAGE_SEM_DEC, SEMA_PAGE_SEM_INC,
    SEMA_PAGE_SEM_READ, SEMA_PAGE_SEM_SET, SEMA_REG_STRIDE,
};
use neuron_abi::ioctl::*;
use neuron_abi::Errno;
use zerocopy::{Immutable, IntoBytes};

/// A register of one core's page: read it back into the caller's struct, or write `value`.
#[derive(Debug)]
pub(crate) struct RegOp<T> {
    nc: u32,
    /// Register page offset.
    off: u64,
    read: bool,
    /// The caller's struct (its `value` field receives a read).
    arg: T,
}

#[derive(Debug)]
pub(crate) enum Req {
    Semaphore(RegOp<neuron_abi::structs::Semaphore>),
    Event(RegOp<neuron_abi::structs::Event>),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let nc_count = cx.arch().nc_count();
        let sem = |base: u64| {
            // SEMAPHORE_* share one struct layout; the command picks the register bank.
            let a = cx.arg::<cmd::SEMAPHORE_READ>()?;
            if a.nc_id >= nc_count {
                return Err(Errno::E2BIG);
            }
            if a.semaphore_index >= SEMAPHORES_PER_NC {
                return Err(Errno::EINVAL);
            }
            Ok(Req::Semaphore(RegOp {
                nc: a.nc_id,
                off: base + SEMA_REG_STRIDE * a.semaphore_index as u64,
                read: base == SEMA_PAGE_SEM_READ,
                arg: a,
            }))
        };
        let event = |read: bool| {
            let a = cx.arg::<cmd::EVENT_GET>()?;
            // The real driver checks `> 256` here (off by one) and not the nc id; an emulator
            // must still not index out of range, so both are bounded.
            if a.event_index >= EVENTS_PER_NC || a.nc_id >= nc_count {
                return Err(Errno::EINVAL);
            }
            Ok(Req::Event(RegOp {
                nc: a.nc_id,
                off: SEMA_PAGE_EVENT + SEMA_REG_STRIDE * a.event_index as u64,
                read,
                arg: a,
            }))
        };
        Some(match cmd {
            NEURON_IOCTL_SEMAPHORE_INCREMENT => sem(SEMA_PAGE_SEM_INC),
            NEURON_IOCTL_SEMAPHORE_DECREMENT => sem(SEMA_PAGE_SEM_DEC),
            NEURON_IOCTL_SEMAPHORE_WRITE => sem(SEMA_PAGE_SEM_SET),
            NEURON_IOCTL_SEMAPHORE_READ => sem(SEMA_PAGE_SEM_READ),
            NEURON_IOCTL_EVENT_SET => event(false),
            NEURON_IOCTL_EVENT_GET => event(true),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Semaphore(op) => reg(cx, op, |a| &mut a.value),
            Req::Event(op) => reg(cx, op, |a| &mut a.value),
        }
    }
}

fn reg<T: IntoBytes + Immutable>(cx: &Ctx, mut op: RegOp<T>, value: fn(&mut T) -> &mut u32) -> R {
    let mut g = cx.lock();
    if op.read {
        let regs = g.dev.regs(op.nc as usize).ok_or(Errno::EINVAL)?;
        *value(&mut op.arg) = regs.read_reg(op.off).ok_or(Errno::EINVAL)?;
        drop(g);
        return cx.reply(&op.arg);
    }
    let v = *value(&mut op.arg);
    g.dev.reg_write(op.nc as usize, op.off, v);
    cx.kick_with(g);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::Bench;
    use super::*;
    use neuron_abi::structs::{Event, Semaphore};

    #[test]
    fn write_increment_decrement_read() {
        let b = Bench::v3();
        let s = |index, value| Semaphore {
            nc_id: 1,
            semaphore_index: index,
            value,
        };
        assert_eq!(b.run(NEURON_IOCTL_SEMAPHORE_WRITE, &s(5, 10)), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_SEMAPHORE_INCREMENT, &s(5, 3)), Ok(0));
        assert_eq!(b.run(NEURON_IOCTL_SEMAPHORE_DECREMENT, &s(5, 1)), Ok(0));
        let (r, v) = b.io(NEURON_IOCTL_SEMAPHORE_READ, &s(5, 0));
        assert_eq!((r, v.value), (Ok(0), 12));
        assert_eq!(
            b.run(NEURON_IOCTL_SEMAPHORE_READ, &s(256, 0)),
            Err(Errno::EINVAL)
        );
        let bad_nc = Semaphore {
            nc_id: 99,
            ..s(0, 0)
        };
        assert_eq!(
            b.run(NEURON_IOCTL_SEMAPHORE_READ, &bad_nc),
            Err(Errno::E2BIG)
        );
    }

    #[test]
    fn events_set_and_get() {
        let b = Bench::v3();
        let e = Event {
            nc_id: 0,
            event_index: 7,
            value: 1,
        };
        assert_eq!(b.run(NEURON_IOCTL_EVENT_SET, &e), Ok(0));
        let (r, v) = b.io(NEURON_IOCTL_EVENT_GET, &Event { value: 0, ..e });
        assert_eq!((r, v.value), (Ok(0), 1));
        let bad = Event {
            event_index: 256,
            ..e
        };
        assert_eq!(b.run(NEURON_IOCTL_EVENT_GET, &bad), Err(Errno::EINVAL));
        assert_eq!(b.raw(NEURON_IOCTL_EVENT_GET, 0), Err(Errno::EFAULT));
    }
}
