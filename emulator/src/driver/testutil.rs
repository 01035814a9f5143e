//! Unit-test bench for the driver families: one emulated device, an attached process and a fake
//! user address space, so each family's tests can call the dispatcher with exact argument bytes.

use super::{Caller, Ctx, R};
use crate::uaccess::FakeMemory;
use crate::{EmuFile, Emulator, OpenOptions};
use neuron_abi::arch::Arch;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// The pid the bench's process is attached as.
pub(crate) const PID: u32 = 4242;

pub(crate) struct Bench {
    pub(crate) emu: Emulator,
    pub(crate) mem: FakeMemory,
    _file: EmuFile,
}

impl Bench {
    pub(crate) fn new(arch: Arch) -> Bench {
        let emu = Emulator::new(arch, 2);
        let file = emu
            .open(
                0,
                OpenOptions {
                    pid: PID,
                    write_only: false,
                },
            )
            .expect("open");
        Bench {
            emu,
            mem: FakeMemory::default(),
            _file: file,
        }
    }
    pub(crate) fn v3() -> Bench {
        Bench::new(Arch::V3Trn2)
    }
    pub(crate) fn v2() -> Bench {
        Bench::new(Arch::V2Trn1)
    }

    fn call(&self, pid: u32, misc: bool, cmd: u32, arg: u64) -> R {
        let caller = Caller {
            pid,
            mem: &self.mem,
        };
        super::ioctl(&self.emu.devices[0], misc, &caller, cmd, arg)
    }
    /// `cmd` with argument address `arg`, as the attached process.
    pub(crate) fn raw(&self, cmd: u32, arg: u64) -> R {
        self.call(PID, false, cmd, arg)
    }
    pub(crate) fn raw_as(&self, pid: u32, cmd: u32, arg: u64) -> R {
        self.call(pid, false, cmd, arg)
    }
    pub(crate) fn raw_misc(&self, cmd: u32, arg: u64) -> R {
        self.call(PID, true, cmd, arg)
    }
    /// `cmd` with `v` as its argument; returns the result and the argument as written back.
    pub(crate) fn io<T: IntoBytes + FromBytes + Immutable>(&self, cmd: u32, v: &T) -> (R, T) {
        let a = self.mem.put(v);
        let r = self.raw(cmd, a);
        (r, self.mem.get(a))
    }
    /// Only the result of [`Bench::io`].
    pub(crate) fn run<T: IntoBytes + FromBytes + Immutable>(&self, cmd: u32, v: &T) -> R {
        self.io(cmd, v).0
    }
    /// How many families decode `cmd` (each command must belong to exactly one).
    pub(crate) fn families_taking(&self, cmd: u32) -> usize {
        let caller = Caller {
            pid: PID,
            mem: &self.mem,
        };
        let cx = Ctx {
            sh: &self.emu.devices[0],
            caller: &caller,
            arg: self.mem.zeroed(16 << 10),
        };
        [
            super::info::Req::decode(&cx, cmd).is_some(),
            super::pod::Req::decode(&cx, cmd).is_some(),
            super::memory::Req::decode(&cx, cmd).is_some(),
            super::copy::Req::decode(&cx, cmd).is_some(),
            super::dma::Req::decode(&cx, cmd).is_some(),
            super::h2t::Req::decode(&cx, cmd).is_some(),
            super::notify::Req::decode(&cx, cmd).is_some(),
            super::sem::Req::decode(&cx, cmd).is_some(),
            super::reset::Req::decode(&cx, cmd).is_some(),
            super::crwl::Req::decode(&cx, cmd).is_some(),
            super::bar::Req::decode(&cx, cmd).is_some(),
            super::misc::Req::decode(&cx, cmd).is_some(),
        ]
        .iter()
        .filter(|t| **t)
        .count()
    }
    /// Allocate a chunk with MEM_ALLOC_V2MT; returns its handle.
    pub(crate) fn alloc(&self, size: u64, host: bool) -> u64 {
        use neuron_abi::structs::MemAllocV2MemType;
        let out = self.mem.zeroed(8);
        let a = MemAllocV2MemType {
            size,
            host_memory: host as u32,
            mem_type: if host { 2 } else { 9 },
            mem_handle: out,
            ..zerocopy::FromZeros::new_zeroed()
        };
        let r = self.run(neuron_abi::ioctl::NEURON_IOCTL_MEM_ALLOC_V2MT, &a);
        assert_eq!(r, Ok(0), "alloc {size:#x}");
        self.mem.get::<u64>(out)
    }
}
