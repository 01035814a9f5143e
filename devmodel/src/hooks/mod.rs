//! The one seam through which a fault plan (or a tracer) observes and alters the device:
//! instruction issue and execution, DMA descriptors, semaphore updates, notifications,
//! memory accesses, timers and ioctls.
//!
//! Install a [`DeviceHooks`] with `Device::set_hooks`. Every method has a default that leaves
//! the device unchanged, so a hook implements only what it needs. Hooks run only at
//! deterministic points of the device (an event being processed at a device time, in the
//! scheduler's order) and never on host time, so a run with the same hooks is reproducible.
//! With no hooks installed each site costs one predictable branch; memory-access hooks are
//! further gated by [`HookCtx::watch_memory`], so they cost nothing unless asked for.
//!
//! While a hook runs it is taken out of the device: what it does through its [`HookCtx`]
//! (poking memory, posting an error) does not call hooks again.

use crate::addrmap::Target;
use crate::arch::tpb;
use crate::device::{Device, MemError};
use crate::fault::FaultKind;
use crate::time::Ps;
use neuron_abi::notify::NotifyKind;
use neuron_abi::udma::UdmaDesc;
use neuron_isa::cayman::{CaymanInstr, WORD};
use neuron_isa::{Engine, SemUpdate, Space};

/// Where in the device a hook is called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// Device time of the call.
    pub time: Ps,
    pub nc: usize,
    /// The compute engine concerned, if any.
    pub engine: Option<Engine>,
    /// The DMA (engine, queue) concerned, if any.
    pub queue: Option<(usize, usize)>,
    /// The engine's pc (for DMA: the descriptor index).
    pub pc: u32,
    /// The word's opcode byte (0 when there is no word).
    pub opcode: u8,
}

/// What to do with a word about to be decoded and issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueAction {
    Proceed,
    /// Issue it `Ps` later (a slow engine).
    Delay(Ps),
    /// The engine stops here for good (an engine hang): no fault, no completion.
    Hang,
}

/// What to do with a DMA descriptor pair about to be consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescAction {
    Proceed,
    /// Consume it `Ps` later (a slow queue); the hook is not asked again for it.
    Delay(Ps),
    /// Abort the queue as a bad descriptor would, with this detail.
    Abort(String),
}

/// What to do with a semaphore or event update about to be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SemAction {
    Apply,
    /// Lose it.
    Drop,
    /// Apply it twice.
    Duplicate,
}

/// What to do with a notification about to be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyAction {
    Post,
    Drop,
    /// Post it twice (two entries).
    Duplicate,
    /// Post it `Ps` later (the hook is not asked again for it).
    Delay(Ps),
}

/// What to do with a memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemAction {
    Proceed,
    /// Fail it as an uncorrectable memory error: the access reports a `MemError`, which the
    /// initiator handles as any bad address (a DMA abort, an out-of-bounds fault).
    Fail,
}

/// A notification before it is written: the hook may alter any field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    pub nc: usize,
    /// Notification-queue type and engine index of the queue it goes to.
    pub nq_type: u8,
    pub engine_index: u8,
    pub kind: NotifyKind,
    /// Engine field of the entry.
    pub engine: u8,
    pub value: u32,
    pub pc: u32,
}

/// Direction of a memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
}

/// One memory access: by a DMA (descriptor data, DMA_DIRECT2D runs), by an engine's WRITE or
/// TENSOR_LOAD, or one partition's share of a data-path word's SBUF/PSUM operand (reads
/// reported before the word executes, writes after it; `offset`/`len` are the partition's
/// bytes the operand spans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAccess {
    pub dir: Dir,
    /// What answers the address, and the offset inside it.
    pub target: Target,
    pub offset: u64,
    pub addr: u64,
    pub len: u64,
}

/// Observes and alters the device at its deterministic points. All methods default to
/// "leave it alone".
pub trait DeviceHooks: Send {
    /// Called once when installed (set memory watching, ask for timers).
    fn on_install(&mut self, _ctx: &mut HookCtx<'_>) {}

    /// A word leaves the instruction stream to be decoded and issued; `word` may be altered
    /// (a corrupted fetch: the stream itself keeps the original).
    fn before_issue(&mut self, _ctx: &mut HookCtx<'_>, _word: &mut [u8; WORD]) -> IssueAction {
        IssueAction::Proceed
    }

    /// A word executed (its data path is done; its completion is still to come). The hook
    /// may alter its results through `ctx` and return extra time the engine stays busy.
    fn after_execute(&mut self, _ctx: &mut HookCtx<'_>, _word: &CaymanInstr) -> Ps {
        Ps::ZERO
    }

    /// A DMA queue is about to consume the descriptor pair at its head.
    fn before_descriptor(
        &mut self,
        _ctx: &mut HookCtx<'_>,
        _tx: &mut UdmaDesc,
        _rx: &mut UdmaDesc,
    ) -> DescAction {
        DescAction::Proceed
    }

    /// A semaphore/event update (an instruction's completion, a DMA_DIRECT2D's completion)
    /// is about to be applied.
    fn on_sem_update(&mut self, _ctx: &mut HookCtx<'_>, _u: &mut SemUpdate) -> SemAction {
        SemAction::Apply
    }

    /// A notification is about to be posted.
    fn on_notify(&mut self, _ctx: &mut HookCtx<'_>, _n: &mut Notice) -> NotifyAction {
        NotifyAction::Post
    }

    /// A DMA or engine memory access (only while [`HookCtx::watch_memory`] is on). For a
    /// DMA or WRITE/TENSOR_LOAD read `data` holds what was read (changes affect only what
    /// the reader gets); for their writes, what is about to be written. For a data-path
    /// operand `data` is the memory's bytes, and changes land in memory (bit flips, stuck-at
    /// bits).
    fn on_mem_access(
        &mut self,
        _ctx: &mut HookCtx<'_>,
        _a: &MemAccess,
        _data: &mut [u8],
    ) -> MemAction {
        MemAction::Proceed
    }

    /// A timer asked for with [`HookCtx::set_timer`] is due (at exactly the asked time; a
    /// timer outlives the hook that asked for it and goes to the hook installed then).
    fn on_timer(&mut self, _ctx: &mut HookCtx<'_>, _token: u64) {}

    /// An ioctl `cmd` from process `pid` arrives (called by the emulator before it handles
    /// it); `Some(errno)` fails it with that errno.
    fn on_ioctl(&mut self, _cmd: u32, _pid: u32) -> Option<i32> {
        None
    }
}

/// What a hook sees and may do: the call site and a handle on the device.
pub struct HookCtx<'a> {
    pub(crate) dev: &'a mut Device,
    pub site: Site,
}

impl std::fmt::Debug for HookCtx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookCtx").field("site", &self.site).finish()
    }
}

impl HookCtx<'_> {
    /// Device time.
    pub fn now(&self) -> Ps {
        self.dev.now()
    }
    /// The device, read-only (status, profile, registers).
    pub fn device(&self) -> &Device {
        self.dev
    }
    /// Read device memory.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.dev.read(addr, buf)
    }
    /// Write device memory (with the side effects of register and port writes).
    pub fn poke(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.dev.write(addr, data)
    }
    /// XOR `mask` into the memory at `addr` (bit flips).
    pub fn flip_bits(&mut self, addr: u64, mask: &[u8]) -> Result<(), MemError> {
        let mut b = vec![0u8; mask.len()];
        self.dev.read(addr, &mut b)?;
        b.iter_mut().zip(mask).for_each(|(v, m)| *v ^= m);
        self.dev.write(addr, &b)
    }
    /// The device address of byte `offset` of partition `partition` of core `nc`'s SBUF or
    /// PSUM (to alter an instruction's result region).
    pub fn window_addr(&self, nc: usize, space: Space, partition: u64, offset: u64) -> u64 {
        let (base, stride) = match space {
            Space::Sbuf => (tpb::SBUF, tpb::SBUF_PARTITION_STRIDE),
            Space::Psum => (tpb::PSUM, tpb::PSUM_PARTITION_STRIDE),
        };
        self.dev.profile().tpb_base(nc) + base + partition * stride + offset
    }
    /// Stop engine `e` of core `nc` for good (no fault; it neither issues nor completes).
    pub fn hang_engine(&mut self, nc: usize, e: Engine) {
        self.dev.hang_engine(nc, e);
    }
    /// Post an error as the hardware would (an ERROR notification and a recorded fault);
    /// with an engine, that engine stops as a faulting one does.
    pub fn post_error(
        &mut self,
        nc: usize,
        engine: Option<Engine>,
        kind: FaultKind,
        detail: impl Into<String>,
    ) {
        let (pc, opcode) = (self.site.pc, self.site.opcode);
        self.dev
            .hook_fault(nc, engine, pc, opcode, kind, detail.into());
    }
    /// Report an error for engine `e` that keeps running (e.g. a NaN its result check
    /// flagged): an ERROR notification and a recorded fault, no stop.
    pub fn report_error(
        &mut self,
        nc: usize,
        e: Engine,
        kind: FaultKind,
        detail: impl Into<String>,
    ) {
        let (pc, opcode) = (self.site.pc, self.site.opcode);
        self.dev.hook_report(nc, e, pc, opcode, kind, detail.into());
    }
    /// Be called (`on_timer(token)`) at device time `at` (now, if `at` has passed).
    pub fn set_timer(&mut self, at: Ps, token: u64) {
        self.dev.hook_timer(at, token);
    }
    /// Turn memory-access hooks on (for every memory) or off.
    pub fn watch_memory(&mut self, on: bool) {
        self.dev
            .set_mem_watch(if on { Watch::ALL } else { Watch::NONE });
    }
    /// Show the memory-access hook exactly the memories `w` names (none: off).
    pub fn watch_memory_in(&mut self, w: Watch) {
        self.dev.set_mem_watch(w);
    }
    /// Show the memory-access hook the memories `w` names too, besides those it sees now.
    pub fn watch_memory_too(&mut self, w: Watch) {
        let now = self.dev.mem_watch();
        self.dev.set_mem_watch(now.with(w));
    }
}

/// Which device memories the memory-access hook is shown ([`HookCtx::watch_memory_in`]): a
/// hook that looks at one word or line asks for its memory only, and the accesses to the
/// others take the unwatched paths (a data-path word's SBUF/PSUM operands are copied out to
/// the hook and back only where on-chip memory is watched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watch {
    /// The cores' SBUF and PSUM: data-path words' operands, DMAs to or from them.
    pub on_chip: bool,
    /// Everything else a DMA or an engine reaches: HBM, host memory, register pages.
    pub off_chip: bool,
}

impl Watch {
    pub const NONE: Watch = Watch {
        on_chip: false,
        off_chip: false,
    };
    pub const ALL: Watch = Watch {
        on_chip: true,
        off_chip: true,
    };
    pub const ON_CHIP: Watch = Watch {
        on_chip: true,
        off_chip: false,
    };
    pub const OFF_CHIP: Watch = Watch {
        on_chip: false,
        off_chip: true,
    };

    /// Whether any memory is watched.
    pub fn any(self) -> bool {
        self.on_chip || self.off_chip
    }

    /// The memories of `self` and of `other`.
    pub fn with(self, other: Watch) -> Watch {
        Watch {
            on_chip: self.on_chip || other.on_chip,
            off_chip: self.off_chip || other.off_chip,
        }
    }

    /// Whether accesses to `t` are shown.
    pub(crate) fn shows(self, t: Target) -> bool {
        match t {
            Target::Sbuf(_) | Target::Psum(_) => self.on_chip,
            _ => self.off_chip,
        }
    }
}

/// The installed hook, if any (a newtype so `Device` can stay `Debug`).
#[derive(Default)]
pub(crate) struct Installed(pub(crate) Option<Box<dyn DeviceHooks>>);

impl std::fmt::Debug for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "hooks installed"
        } else {
            "no hooks"
        })
    }
}

#[cfg(test)]
mod tests;
