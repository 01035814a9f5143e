//! The ioctl driver, one module per ioctl family. Each command is decoded once into a typed
//! request of its family (the user struct read through the caller's [`UserMemory`], versioned
//! struct families folded into one request), then handled, validating every argument the way
//! the real driver does (`driver-abi.md` §2.3). Every value of `neuron_abi::ioctl::COMMANDS` is
//! either implemented or answered as the driver answers it; `docs/abi-coverage.md` has the table.

mod bar;
mod copy;
mod crwl;
mod dma;
mod fwio;
mod h2t;
mod info;
mod memory;
mod misc;
mod notify;
mod pod;
mod reset;
mod sem;
#[cfg(test)]
pub(crate) mod testutil;

pub(crate) use fwio::FwIo;
pub use info::{pci_bdf, BAR0_KVA, REVISION};
pub(crate) use reset::reset_nc;

use crate::uaccess::UserMemory;
use crate::{DevShared, DevState, Global};
use neuron_abi::arch::Arch;
use neuron_abi::ioctl::{lookup, Ioctl};
use neuron_abi::Errno;
use std::sync::MutexGuard;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// What an ioctl returns: the syscall's non-negative result or the errno.
pub(crate) type R = Result<i32, Errno>;

/// Who is calling: the process identity (TGID) the driver attributes the call to, and its
/// address space for copies from and to user memory.
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    pub pid: u32,
    pub mem: &'a dyn UserMemory,
}

impl std::fmt::Debug for Caller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller").field("pid", &self.pid).finish()
    }
}

/// One ioctl in flight: the device, the caller and the argument address.
pub(crate) struct Ctx<'a> {
    sh: &'a DevShared,
    caller: &'a Caller<'a>,
    arg: u64,
}

impl Ctx<'_> {
    fn lock(&self) -> MutexGuard<'_, DevState> {
        self.sh.lock()
    }
    fn arch(&self) -> Arch {
        self.sh.arch
    }
    fn pid(&self) -> u32 {
        self.caller.pid
    }
    fn mem(&self) -> &dyn UserMemory {
        self.caller.mem
    }
    fn index(&self) -> usize {
        self.sh.index
    }
    fn global(&self) -> &Global {
        &self.sh.global
    }
    /// Wake the device worker where the request gave the model work (events pending). A
    /// store that scheduled nothing leaves an idle worker asleep: a load's hundreds of copies
    /// each woke it for nothing, a context switch on the other CPU every time.
    fn kick(&self) {
        self.kick_with(self.lock());
    }
    /// [`Ctx::kick`] with the state already held (released here, before the wake-up).
    fn kick_with(&self, g: MutexGuard<'_, DevState>) {
        let busy = g.dev.busy();
        drop(g);
        if busy {
            self.sh.wake();
        }
    }
    /// Read command `C`'s argument struct.
    fn arg<C: Ioctl>(&self) -> Result<C::Arg, Errno>
    where
        C::Arg: IntoBytes,
    {
        self.mem().read_struct(self.arg)
    }
    /// Write a struct back to the argument and answer 0.
    fn reply<T: IntoBytes + Immutable>(&self, v: &T) -> R {
        self.mem().write_struct(self.arg, v).map(|_| 0)
    }
    /// Read a struct at any user address.
    fn read_at<T: FromBytes + IntoBytes>(&self, addr: u64) -> Result<T, Errno> {
        self.mem().read_struct(addr)
    }
    fn write_at<T: IntoBytes + Immutable>(&self, addr: u64, v: &T) -> Result<(), Errno> {
        self.mem().write_struct(addr, v)
    }
    fn copy_in(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.mem().read(addr, buf)
    }
    fn copy_out(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        self.mem().write(addr, data)
    }
}

/// A decoded request, one variant per family.
#[derive(Debug)]
enum Request {
    Info(info::Req),
    Pod(pod::Req),
    Memory(memory::Req),
    Copy(copy::Req),
    Dma(dma::Req),
    H2t(h2t::Req),
    Notify(notify::Req),
    Sem(sem::Req),
    Reset(reset::Req),
    Crwl(crwl::Req),
    Bar(bar::Req),
    Misc(misc::Req),
}

impl Request {
    /// Decode `cmd` (a known value): read and check its argument. `None`: no family takes it.
    fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Request, Errno>> {
        fn wrap<T>(
            r: Option<Result<T, Errno>>,
            f: fn(T) -> Request,
        ) -> Option<Result<Request, Errno>> {
            r.map(|r| r.map(f))
        }
        wrap(info::Req::decode(cx, cmd), Request::Info)
            .or_else(|| wrap(pod::Req::decode(cx, cmd), Request::Pod))
            .or_else(|| wrap(memory::Req::decode(cx, cmd), Request::Memory))
            .or_else(|| wrap(copy::Req::decode(cx, cmd), Request::Copy))
            .or_else(|| wrap(dma::Req::decode(cx, cmd), Request::Dma))
            .or_else(|| wrap(h2t::Req::decode(cx, cmd), Request::H2t))
            .or_else(|| wrap(notify::Req::decode(cx, cmd), Request::Notify))
            .or_else(|| wrap(sem::Req::decode(cx, cmd), Request::Sem))
            .or_else(|| wrap(reset::Req::decode(cx, cmd), Request::Reset))
            .or_else(|| wrap(crwl::Req::decode(cx, cmd), Request::Crwl))
            .or_else(|| wrap(bar::Req::decode(cx, cmd), Request::Bar))
            .or_else(|| wrap(misc::Req::decode(cx, cmd), Request::Misc))
    }

    fn handle(self, cx: &Ctx) -> R {
        match self {
            Request::Info(r) => r.handle(cx),
            Request::Pod(r) => r.handle(cx),
            Request::Memory(r) => r.handle(cx),
            Request::Copy(r) => r.handle(cx),
            Request::Dma(r) => r.handle(cx),
            Request::H2t(r) => r.handle(cx),
            Request::Notify(r) => r.handle(cx),
            Request::Sem(r) => r.handle(cx),
            Request::Reset(r) => r.handle(cx),
            Request::Crwl(r) => r.handle(cx),
            Request::Bar(r) => r.handle(cx),
            Request::Misc(r) => r.handle(cx),
        }
    }
}

/// Dispatch one ioctl from `caller` on device `sh` (through a misc fd when `misc`).
pub(crate) fn ioctl(sh: &DevShared, misc: bool, caller: &Caller, cmd: u32, arg: u64) -> R {
    let Some(info) = lookup(cmd) else {
        // Unknown values fall through to the misc dispatcher and end in EINVAL.
        return Err(Errno::EINVAL);
    };
    if misc && !info.misc_fd_ok {
        return Err(Errno::EINVAL);
    }
    if !misc && info.needs_attach && !sh.lock().attached(caller.pid) {
        return Err(Errno::EACCES);
    }
    // A fault plan's driver fault point (`DeviceHooks::on_ioctl`) fails the call before the
    // driver looks at it.
    if let Some(e) = sh.lock().dev.hook_ioctl(cmd, caller.pid) {
        tracing::debug!(target: "KDRV", "ioctl 0x{cmd:08x} pid {} failed by a fault hook: errno {e}", caller.pid);
        return Err(Errno(e));
    }
    let cx = Ctx { sh, caller, arg };
    match Request::decode(&cx, cmd) {
        Some(Ok(req)) => req.handle(&cx),
        Some(Err(e)) => Err(e),
        None => Err(Errno::EINVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::Bench;
    use neuron_abi::ioctl::{COMMANDS, NEURON_IOCTL_MEM_ALLOC};
    use neuron_abi::Errno;

    #[test]
    fn every_command_is_decoded_by_one_family() {
        let b = Bench::v3();
        for c in COMMANDS {
            let n = b.families_taking(c.cmd);
            assert_eq!(n, 1, "{} taken by {n} families", c.name);
        }
    }

    #[test]
    fn gate_unknown_misc_and_attach() {
        let b = Bench::v3();
        assert_eq!(b.raw(0x1234_5678, 0), Err(Errno::EINVAL));
        // MEM_ALLOC needs an attached process; pid 999 never opened the device.
        let a = b.mem.zeroed(64);
        assert_eq!(b.raw_as(999, NEURON_IOCTL_MEM_ALLOC, a), Err(Errno::EACCES));
        assert_eq!(b.raw_misc(NEURON_IOCTL_MEM_ALLOC, a), Err(Errno::EINVAL));
    }

    #[test]
    fn one_device_serves_callers_by_identity() {
        use crate::OpenOptions;
        use neuron_abi::ioctl::NEURON_IOCTL_MEM_ALLOC_V2MT;
        use neuron_abi::structs::MemAllocV2MemType;
        let b = Bench::v3();
        let other = b
            .emu
            .open(
                0,
                OpenOptions {
                    pid: 31,
                    write_only: false,
                },
            )
            .expect("open");
        let out = b.mem.zeroed(8);
        let a = b.mem.put(&MemAllocV2MemType {
            size: 4096,
            mem_type: 9,
            mem_handle: out,
            ..Default::default()
        });
        // The same argument bytes, two callers: each chunk is attributed to its caller.
        assert_eq!(b.raw_as(31, NEURON_IOCTL_MEM_ALLOC_V2MT, a), Ok(0));
        assert_eq!(b.raw(NEURON_IOCTL_MEM_ALLOC_V2MT, a), Ok(0));
        let pids: Vec<u32> = b
            .emu
            .device(0)
            .expect("dev")
            .memory
            .iter()
            .map(|m| m.pid)
            .collect();
        assert_eq!(pids, [31, super::testutil::PID]);
        drop(other);
        let pids: Vec<u32> = b
            .emu
            .device(0)
            .expect("dev")
            .memory
            .iter()
            .map(|m| m.pid)
            .collect();
        assert_eq!(pids, [super::testutil::PID]);
    }
}
