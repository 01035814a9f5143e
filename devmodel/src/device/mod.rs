//! The device: cores, DMA engines, memories, notification queues and the discrete-event
//! scheduler that runs them. [`Device`] is the facade; each concern lives in a submodule.
//!
//! One global clock in picoseconds; events are ordered by (time, insertion sequence), so a run
//! is bit-for-bit deterministic for the same inputs. The device runs only when asked
//! ([`Device::run`]) and touches no OS facilities; the emulator drives it from a thread.
//!
//! - `memory`: the address map's targets (HBM, host regions, TPB windows) read/write/fill;
//! - `dma`: DMA queues, descriptor consumption, DMA_DIRECT2D runs;
//! - `engine`: sequencer state, decode, waits, issue and completion;
//! - `exec`: the trn2 executor glue (control words, the data path in `cayman_exec`);
//! - `lane`: a core's data path, on a host thread of its own or inline;
//! - `sem`: semaphore/event updates, register writes, wake-ups;
//! - `notify`: notification queues, posting, faults;
//! - `hooked`: calling the installed [`DeviceHooks`](crate::hooks::DeviceHooks);
//! - `status`: the typed snapshot [`Device::status`].

mod decode;
mod dma;
mod dmawindow;
mod engine;
mod exec;
mod hooked;
mod lane;
mod memory;
mod notify;
mod sem;
mod status;

pub use crate::stats::{HostProfile, Stats, TraceEvent, TraceMark};
pub use decode::keep_decodings;
pub use dma::QueueState;
pub use lane::{set_lane_min_work, ThreadMode, LANE_MIN_WORK, THREADS_ENV};
pub use memory::MemError;
pub use status::{
    CoreStatus, DeviceStatus, EngineState, EngineStatus, NqStatus, QueueStatus, WaitingOn,
};

use crate::addrmap::{AddrMap, Target};
use crate::arch::{tpb, ArchProfile};
use crate::core::{CoreMem, Scratch};
use crate::fault::Fault;
use crate::firmware::{Firmware, Outcome, ResetPlan, UcodeMem};
use crate::hbm::SparseMem;
use crate::hooks::{Installed, Notice};
use crate::hostmem::HostRegion;
use crate::regs::RegPage;
use crate::sched::EventQueue;
use crate::time::Ps;
use neuron_abi::addr::DevAddr;
use neuron_isa::SemUpdate;
use std::collections::HashMap;
use std::sync::Arc;

/// DMA engines per NeuronCore and queues per DMA engine (`driver-abi.md` §3.1).
pub const DMA_ENGINES_PER_NC: usize = 16;
pub const DMA_QUEUES: usize = 16;
/// Notification-queue types used by the device (`driver-abi.md` §4).
pub const NQ_NOTIFY: u8 = neuron_abi::consts::NQ_TYPE_NOTIFY as u8;
pub const NQ_ERROR: u8 = neuron_abi::consts::NQ_TYPE_ERROR as u8;
/// Most instruction bytes waiting at one engine's port.
pub const MAX_PENDING_INSTR_BYTES: usize = 64 << 20;
/// Compute engines (sequencers) per core.
const ENGINES: usize = 5;

/// Why a DMA queue operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaError {
    NoSuchQueue,
    NotInitialised,
    Overrun,
}

/// What the scheduler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// Engine (nc, e) looks at its next word.
    Step(usize, usize),
    /// Engine (nc, e)'s word completes.
    Complete(usize, usize),
    /// DMA queue (engine, queue) consumes its head descriptor.
    Dma(usize, usize),
    /// A DMA_DIRECT2D finished: add to a semaphore of a core.
    SemAdd(usize, u8, u32),
    /// A word's semaphore/event update landing after the engine moved on (its calibrated
    /// latency is longer than its issue interval).
    Update(usize, usize, SemUpdate),
    /// A notification a hook delayed.
    Notice(Notice),
    /// A timer a hook asked for.
    Timer(u64),
}

impl Drop for Device {
    fn drop(&mut self) {
        std::mem::take(&mut self.decoded).offer();
    }
}

impl Ev {
    /// The core an event belongs to (`None`: the device's).
    fn core(&self) -> Option<usize> {
        match *self {
            Ev::Step(n, _) | Ev::Complete(n, _) | Ev::SemAdd(n, _, _) | Ev::Update(n, _, _) => {
                Some(n)
            }
            Ev::Dma(eng, _) => Some(eng / DMA_ENGINES_PER_NC),
            Ev::Notice(n) => Some(n.nc),
            Ev::Timer(_) => None,
        }
    }
}

#[derive(Debug)]
struct Core {
    /// SBUF, PSUM and the PE state: reach them through `lane.get()`.
    lane: lane::LaneSlot,
    /// The PE state the cost model reads, as the last data-path word taken left it.
    pe_timing: lane::PeTiming,
    regs: Arc<RegPage>,
    engines: Vec<engine::Sequencer>,
    nqs: HashMap<(u8, u8), notify::Nq, crate::fasthash::Build>,
    /// Base of the core's DGE table (`abi::tpb::DGE_TABLE`), set by the runtime.
    dge_table: Option<u64>,
    /// The GpSimd microcode memories and their verdict.
    ucode: crate::firmware::UcodeState,
    /// The last LDWEIGHTS issued on the core loaded an fp32 pass (LOW or HIGH), so a pass
    /// pair may be pending in the data path (`cayman_exec::passpair`) until a later one.
    pass_pair_possible: bool,
    /// The core has issued a word with data to move or compute since its last reset: only
    /// then may a lower core's words wait for it (`Device::defer_for`). A core that only
    /// holds ordering words and waits at a barrier (an LNC=2 kernel's idle second core)
    /// never takes a word beside them.
    has_worked: bool,
}

impl Core {
    fn new(profile: &ArchProfile, memory: crate::hostmem::MemSource, threads: ThreadMode) -> Core {
        let data = lane::Lane {
            mem: CoreMem::with_memory(profile, memory),
            pe: Default::default(),
            scratch: Scratch::default(),
            fanout: threads != ThreadMode::Off,
            spare_regs: None,
        };
        Core {
            lane: lane::LaneSlot::new(data),
            pe_timing: Default::default(),
            regs: Arc::new(RegPage::with_memory(memory)),
            engines: (0..ENGINES).map(|_| engine::Sequencer::new()).collect(),
            nqs: Default::default(),
            dge_table: None,
            ucode: Default::default(),
            pass_pair_possible: false,
            has_worked: false,
        }
    }
}

/// The whole device.
#[derive(Debug)]
pub struct Device {
    profile: ArchProfile,
    now: Ps,
    events: EventQueue<Ev>,
    cores: Vec<Core>,
    dma: Vec<Vec<dma::DmaQueue>>,
    hbm: SparseMem,
    /// Host regions by slot (`Target::Host(slot)`), with their bus address.
    host: Vec<Option<(u64, HostRegion)>>,
    /// Every range of device addresses that answers.
    map: AddrMap,
    faults: Vec<Fault>,
    stats: Stats,
    trace: Option<crate::stats::Trace>,
    host_profile: Option<HostProfile>,
    /// Decoded words by their bytes (`decode::DecodeCache`).
    decoded: decode::DecodeCache,
    copybuf: Vec<u8>,
    /// Per core: when its DMA_DIRECT2D pipe is free (calibrated DMA model).
    dma2d_free: Vec<Ps>,
    dmaout: Vec<u8>,
    /// A DMA_DIRECT2D's runs between HBM and a window (HBM address, window offset, length),
    /// and their copies (reused: `window_runs`).
    dmaruns: Vec<(u64, usize, usize)>,
    dmamoves: Vec<crate::runcopy::Run>,
    hooks: Installed,
    /// The memories memory-access hooks are on for (set by the hook; none: off).
    watch: crate::hooks::Watch,
    /// The firmware's memory-error counters (kept across core resets).
    ecc: crate::ecc::EccCounters,
    /// The resident firmware: mailbox and reset handshake.
    fw: Firmware,
    /// Where the cores' data paths run (`lane`; inline while host profiling).
    threads: ThreadMode,
}

/// The fixed ranges of an architecture's address map: each HBM and each core's TPB window.
fn fixed_map(profile: &ArchProfile) -> AddrMap {
    let a = profile.arch;
    let mut m = AddrMap::default();
    let mut add = |start: u64, len: u64, t: Target| {
        // The layout is the architecture's; an overlap is a bug in its numbers (tested for
        // every architecture), and the later range is left out rather than panicking.
        if let Err(e) = m.insert(DevAddr(start), len, t) {
            tracing::error!(target: "devmodel", "address map: {e}");
        }
    };
    for k in 0..a.hbm_count() {
        if let Some(base) = a.hbm_base(k) {
            add(base, a.hbm_size(), Target::Hbm(k as u8));
        }
    }
    let p = profile.partitions as u64;
    for nc in 0..profile.nc_count {
        let (b, n) = (profile.tpb_base(nc), nc as u8);
        add(
            b + tpb::SBUF,
            p * tpb::SBUF_PARTITION_STRIDE,
            Target::Sbuf(n),
        );
        add(
            b + tpb::PSUM,
            p * tpb::PSUM_PARTITION_STRIDE,
            Target::Psum(n),
        );
        add(
            b + tpb::SEMAPHORE_PAGE,
            tpb::SEMAPHORE_PAGE_SIZE,
            Target::Regs(n),
        );
        for e in 0..ENGINES as u64 {
            add(
                b + tpb::INSTR_PORT + e * tpb::INSTR_PORT_STRIDE,
                tpb::INSTR_PORT_STRIDE,
                Target::InstrPort(n, e as u8),
            );
        }
        add(b + tpb::DGE_TABLE, 8, Target::DgeTable(n));
        for (at, m) in [
            (tpb::GPSIMD_IRAM, UcodeMem::Iram),
            (tpb::GPSIMD_DRAM, UcodeMem::Dram),
        ] {
            add(b + at, m.size(), Target::Ucode(n, m));
        }
    }
    m
}

impl Device {
    pub fn new(profile: ArchProfile) -> Device {
        Self::with_memory(profile, &crate::hostmem::heap_source)
    }

    /// A device whose SBUF, PSUM and register pages come from `memory` (memory user space
    /// may map; the heap where it gives none).
    pub fn with_memory(profile: ArchProfile, memory: crate::hostmem::MemSource) -> Device {
        let cores_n = profile.nc_count;
        let threads = ThreadMode::from_env();
        let cores = (0..cores_n)
            .map(|_| Core::new(&profile, memory, threads))
            .collect();
        let dma = (0..profile.dma_engines)
            .map(|_| (0..DMA_QUEUES).map(|_| dma::DmaQueue::default()).collect())
            .collect();
        Device {
            map: fixed_map(&profile),
            profile,
            now: Ps::ZERO,
            events: EventQueue::default(),
            cores,
            dma,
            hbm: SparseMem::new(),
            host: Vec::new(),
            faults: Vec::new(),
            stats: Stats::default(),
            trace: None,
            host_profile: None,
            decoded: decode::DecodeCache::kept_or_new(),
            copybuf: Vec::new(),
            dma2d_free: vec![Ps(0); cores_n],
            dmaout: Vec::new(),
            dmaruns: Vec::new(),
            dmamoves: Vec::new(),
            hooks: Installed::default(),
            watch: crate::hooks::Watch::NONE,
            ecc: crate::ecc::EccCounters::default(),
            fw: Firmware::default(),
            threads,
        }
    }

    pub fn profile(&self) -> &ArchProfile {
        &self.profile
    }
    pub fn now(&self) -> Ps {
        self.now
    }
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// The firmware's memory-error counters (`ecc`).
    pub fn ecc(&self) -> crate::ecc::EccCounters {
        self.ecc
    }
    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }
    pub fn hbm_resident_bytes(&self) -> u64 {
        self.hbm.resident_bytes()
    }
    /// The address map: every range of device addresses that answers, ascending.
    pub fn address_map(&self) -> &AddrMap {
        &self.map
    }

    /// Start (or stop, with `false`) recording a timeline.
    pub fn set_tracing(&mut self, on: bool) {
        self.trace = on.then(|| crate::stats::Trace::new(self.cores.iter().map(|c| &*c.regs)));
    }
    /// Take the recorded timeline.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.trace
            .as_mut()
            .map(|t| std::mem::take(&mut t.spans))
            .unwrap_or_default()
    }
    /// Take the recorded marks (register updates, notifications, DMA_DIRECT2D transfers).
    pub fn take_marks(&mut self) -> Vec<TraceMark> {
        self.trace
            .as_mut()
            .map(|t| std::mem::take(&mut t.marks))
            .unwrap_or_default()
    }

    /// Replace the cost table (calibration experiments: `neuron-emu calibrate`). Costs only
    /// change timing, never data.
    pub fn set_cost(&mut self, cost: crate::arch::CostTable) {
        self.profile.cost = cost;
    }

    /// Start (or stop, with `false`) measuring host time per instruction kind; starting
    /// clears what was measured.
    /// The data paths then run inline on the device thread, where the time is measured
    /// (results are the same either way).
    pub fn set_host_profiling(&mut self, on: bool) {
        self.host_profile = on.then(HostProfile::default);
    }

    /// While host profiling is on: also keep every word with its time and operands
    /// (`HostProfile::words`). False if profiling is off.
    pub fn keep_host_words(&mut self, on: bool) -> bool {
        match self.host_profile.as_mut() {
            Some(p) => {
                p.keep_words = on;
                true
            }
            None => false,
        }
    }

    /// Where the cores' data paths run; outputs, device times and traces are bit-identical
    /// in every mode (`lane`). The default comes from `NEURON_EMU_THREADS`.
    pub fn set_threads(&mut self, mode: ThreadMode) {
        self.threads = mode;
        for c in &mut self.cores {
            c.lane.get().fanout = mode != ThreadMode::Off;
        }
    }

    /// Where the cores' data paths run.
    pub fn threads(&self) -> ThreadMode {
        self.threads
    }
    /// What was measured since profiling started.
    pub fn host_profile(&self) -> Option<&HostProfile> {
        self.host_profile.as_ref()
    }

    /// The register page of core `nc` (shared with user-space mappings).
    pub fn regs(&self, nc: usize) -> Option<Arc<RegPage>> {
        self.cores.get(nc).map(|c| c.regs.clone())
    }

    fn schedule(&mut self, at: Ps, ev: Ev) {
        self.events.push(at, ev);
    }

    /// Whether events are pending.
    pub fn busy(&self) -> bool {
        !self.events.is_empty()
    }

    /// Run up to `budget` events. Returns whether events remain.
    pub fn run(&mut self, budget: usize) -> bool {
        for _ in 0..budget {
            let Some((t, ev)) = self.events.pop() else {
                return false;
            };
            if t > self.now {
                self.now = t;
            }
            self.stats.events += 1;
            match ev {
                Ev::Step(nc, e) => self.engine_step(nc, e),
                Ev::Complete(nc, e) => self.engine_complete(nc, e),
                Ev::Dma(eng, q) => self.dma_step(eng, q),
                Ev::SemAdd(nc, sem, v) => {
                    let u = SemUpdate {
                        op: neuron_isa::SemOp::Add,
                        index: sem,
                        value: v as i32,
                    };
                    self.update_sem(nc, None, 0, u);
                }
                Ev::Update(nc, e, u) => {
                    let mut pc = 0;
                    if let Some(st) = self.cores.get_mut(nc).and_then(|c| c.engines.get_mut(e)) {
                        st.outstanding = st.outstanding.saturating_sub(1);
                        pc = st.pc;
                    }
                    self.update_sem(nc, Some(e), pc, u);
                }
                Ev::Notice(n) => self.post_notice(n),
                Ev::Timer(token) => self.deliver_timer(token),
            }
        }
        !self.events.is_empty()
    }

    /// The resident firmware (mailbox state, reset handshake registers).
    pub fn firmware(&self) -> &Firmware {
        &self.fw
    }

    /// The resident firmware, to configure it (e.g. an older API version).
    pub fn firmware_mut(&mut self) -> &mut Firmware {
        &mut self.fw
    }

    /// A mailbox trigger at `at` (firmware time, never before the device clock) with request
    /// `req`; READ requests read device registers (0 where the model has no storage).
    pub fn fw_request(&mut self, at: Ps, req: &[u8]) -> Outcome {
        let mut fw = std::mem::take(&mut self.fw);
        let out = fw.handle(at.max(self.now), req, &mut |addr| {
            let mut w = [0u8; 4];
            self.read(addr, &mut w).map_or(0, |_| u32::from_le_bytes(w))
        });
        self.fw = fw;
        out
    }

    /// A driver store to a firmware register (misc-RAM offset `m`) at `at`; a trigger that
    /// starts a reset resets the cores it covers now and returns the handshake's timing.
    pub fn fw_write_reg(&mut self, m: u64, v: u32, at: Ps) -> Option<ResetPlan> {
        let plan = self
            .fw
            .write_reg(m, v, at.max(self.now), self.cores.len())?;
        for nc in 0..self.cores.len().min(64) {
            if plan.cores & (1 << nc) != 0 {
                self.reset_nc(nc);
            }
        }
        Some(plan)
    }

    /// The GpSimd microcode state of core `nc`.
    pub fn ucode(&self, nc: usize) -> Option<&crate::firmware::UcodeState> {
        self.cores.get(nc).map(|c| &c.ucode)
    }

    /// Reset one core: engines, memories, registers, its DMA queues and notification queues.
    pub fn reset_nc(&mut self, nc: usize) {
        let hooked = self.has_hooks();
        let Some(c) = self.cores.get_mut(nc) else {
            return;
        };
        c.engines = (0..ENGINES).map(|_| engine::Sequencer::new()).collect();
        c.lane.forget();
        let data = c.lane.get();
        data.mem.clear();
        data.pe = Default::default();
        // No pass-pair fusion under hooks (`set_hooks`).
        data.pe.fuse &= !hooked;
        c.pe_timing = Default::default();
        c.has_worked = false;
        c.regs.reset();
        c.nqs.clear();
        c.dge_table = None;
        // The microcode memories are cleared: the reference image counts as resident again.
        c.ucode = Default::default();
        if let Some(f) = self.dma2d_free.get_mut(nc) {
            *f = Ps(0);
        }
        for eng in nc * DMA_ENGINES_PER_NC..(nc + 1) * DMA_ENGINES_PER_NC {
            if let Some(qs) = self.dma.get_mut(eng) {
                for dq in qs.iter_mut() {
                    *dq = dma::DmaQueue::default();
                }
            }
        }
        self.events.retain(|ev| ev.core() != Some(nc));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every architecture's fixed ranges fit without overlap: each HBM, and per core five
    /// window ranges, two microcode memories and five instruction ports.
    #[test]
    fn every_architecture_has_a_consistent_address_map() {
        for arch in neuron_abi::Arch::ALL {
            let p = ArchProfile::new(arch);
            let m = fixed_map(&p);
            assert_eq!(
                m.len(),
                arch.hbm_count() as usize + p.nc_count * (6 + ENGINES),
                "{arch:?}"
            );
        }
    }
}
