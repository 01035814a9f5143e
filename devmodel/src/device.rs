//! The device: cores, DMA engines, memories, notification queues and the discrete-event
//! scheduler that runs them.
//!
//! One global clock in picoseconds; events are ordered by (time, insertion sequence), so a run
//! is bit-for-bit deterministic for the same inputs. The device runs only when asked
//! ([`Device::run`]) and touches no OS facilities; the emulator drives it from a thread.

use crate::arch::{tpb, ArchProfile};
use crate::core::{self, CoreMem, Scratch};
use crate::fault::{Fault, FaultKind, OpFault};
use crate::hbm::SparseMem;
use crate::hostmem::HostRegion;
use crate::regs::RegPage;
use crate::time::Ps;
use neuron_abi::notify::{NotificationEntry, NotifyKind, ENTRY_SIZE};
use neuron_abi::udma::UdmaDesc;
use neuron_isa::cayman::{CaymanInstr, DmaAddr, Namespace, Opcode};
use neuron_isa::{testenc, Dtype, Engine, Instr, Op, SemOp, SemUpdate, SemWait, WaitCond};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::sync::Arc;
use zerocopy::FromBytes;

/// DMA engines per NeuronCore and queues per DMA engine (`driver-abi.md` §3.1).
pub const DMA_ENGINES_PER_NC: usize = 16;
pub const DMA_QUEUES: usize = 16;
/// Notification-queue types used by the device (`driver-abi.md` §4).
pub const NQ_NOTIFY: u8 = 1;
pub const NQ_ERROR: u8 = 3;
/// Most instruction bytes waiting at one engine's port.
pub const MAX_PENDING_INSTR_BYTES: usize = 64 << 20;

/// A device address that no memory answers, or an access the target cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemError {
    pub addr: u64,
    pub len: u64,
    pub reason: &'static str,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device address 0x{:x} (+{} bytes): {}",
            self.addr, self.len, self.reason
        )
    }
}
impl std::error::Error for MemError {}

/// Why a DMA queue operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmaError {
    NoSuchQueue,
    NotInitialised,
    Overrun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Step(usize, usize),
    Complete(usize, usize),
    Dma(usize, usize),
    /// A DMA_DIRECT2D finished: add to a semaphore of a core.
    SemAdd(usize, u8, u32),
    /// A word's semaphore/event update landing after the engine moved on (its calibrated
    /// latency is longer than its issue interval).
    Update(usize, usize, SemUpdate),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EngStatus {
    Idle,
    Blocked,
    Busy,
    Faulted,
}

#[derive(Debug)]
struct EngineState {
    ibuf: Vec<u8>,
    consumed: usize,
    pc: u32,
    status: EngStatus,
    /// The decoded word waiting to issue.
    pending: Option<Pending>,
    inflight: Option<(Instr, u8)>,
    scheduled: bool,
    /// `ibuf` offset of pc 0 of the program being run (moves past each END; a program that
    /// loops with COMPARE_BRANCH keeps it, and its words stay in `ibuf`).
    origin: usize,
    /// A taken COMPARE_BRANCH's target pc, applied when the word completes.
    branch: Option<u32>,
    /// The engine's registers `$R[n]` (loaded by TENSOR_LOAD, read by COMPARE_BRANCH).
    regs: Box<[u32; 256]>,
    /// Completion signals of words this engine has moved past that have not landed yet
    /// (calibrated latencies); a DRAIN waits for them.
    outstanding: u32,
}

impl EngineState {
    fn new() -> Self {
        EngineState {
            ibuf: Vec::new(),
            consumed: 0,
            pc: 0,
            status: EngStatus::Idle,
            pending: None,
            inflight: None,
            scheduled: false,
            origin: 0,
            branch: None,
            regs: Box::new([0; 256]),
            outstanding: 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Nq {
    base: u64,
    entries: u64,
    index: u64,
}

#[derive(Debug)]
struct Core {
    mem: CoreMem,
    regs: Arc<RegPage>,
    engines: Vec<EngineState>,
    nqs: HashMap<(u8, u8), Nq>,
    scratch: Scratch,
    pe: crate::cayman_exec::PeState,
    /// Base of the core's DGE table (`abi::tpb::DGE_TABLE`), set by the runtime.
    dge_table: Option<u64>,
}

/// Hardware state of one DMA queue (TX/M2S and RX/S2M rings share head/tail bookkeeping here
/// because every transfer is a descriptor pair).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueState {
    pub enabled: bool,
    pub aborted: bool,
    pub tx_base: u64,
    pub rx_base: u64,
    /// Ring sizes in descriptors.
    pub tx_len: u32,
    pub rx_len: u32,
    pub head: u64,
    pub tx_tail: u64,
    pub rx_tail: u64,
}

#[derive(Debug, Default)]
struct DmaQueue {
    st: QueueState,
    scheduled: bool,
}

/// Counters for benchmarks and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub instructions: u64,
    pub dma_descriptors: u64,
    pub dma_bytes: u64,
    pub notifications: u64,
    pub dropped_notifications: u64,
    /// Multiply-adds the model ran through the host SGEMM (MATMULs other than transposes
    /// done as data movement): the host compute floor of an execution.
    pub sgemm_macs: u64,
}

/// Host wall time the model spent issuing each kind of instruction (data path included):
/// where an emulation's host time goes. Off unless asked for; it is not part of the device's
/// deterministic state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostProfile {
    /// Mnemonic -> (instructions issued, host nanoseconds).
    pub ops: std::collections::BTreeMap<&'static str, (u64, u64)>,
}

impl HostProfile {
    fn record(&mut self, name: &'static str, d: std::time::Duration) {
        let e = self.ops.entry(name).or_default();
        e.0 += 1;
        e.1 += u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
}

/// One span on the device timeline (for Perfetto/Chrome trace output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub nc: usize,
    /// "Tensor", "Scalar", ... or "DMA e.q".
    pub track: String,
    pub name: &'static str,
    pub pc: u32,
    pub start: Ps,
    pub dur: Ps,
}

/// A decoded word waiting for its semaphores.
#[derive(Debug)]
struct Pending {
    /// The sync header as an `Instr` (for project-encoding words, the whole instruction).
    instr: Instr,
    opcode: u8,
    /// The second wait an EVENT_SEMAPHORE body names, decoded once here.
    ext_wait: Option<SemWait>,
    /// For real trn2 words, the decoded word (taken when it issues).
    real: Option<Box<CaymanInstr>>,
}

/// Whether semaphore/event wait `w` holds on `regs`.
fn wait_holds(regs: &RegPage, w: &SemWait) -> bool {
    match w.cond {
        WaitCond::Eq => regs.sem(w.index) == w.value,
        WaitCond::Ge => regs.sem(w.index) >= w.value,
        WaitCond::Gt => regs.sem(w.index) > w.value,
        WaitCond::EventSetThenClear => regs.event(w.index) != 0,
    }
}

/// The whole device.
#[derive(Debug)]
pub struct Device {
    profile: ArchProfile,
    now: Ps,
    seq: u64,
    events: BinaryHeap<Reverse<(Ps, u64, Ev)>>,
    cores: Vec<Core>,
    dma: Vec<Vec<DmaQueue>>,
    hbm: SparseMem,
    host: BTreeMap<u64, HostRegion>,
    faults: Vec<Fault>,
    stats: Stats,
    trace: Option<Vec<TraceEvent>>,
    host_profile: Option<HostProfile>,
    copybuf: Vec<u8>,
    /// Per core: when its DMA_DIRECT2D pipe is free (calibrated DMA model).
    dma2d_free: Vec<Ps>,
    dmaout: Vec<u8>,
}

/// Bytes one DMA_DIRECT2D may move: far above what the compiler emits (a few MiB), low enough
/// that a corrupt word cannot stall the model for minutes.
const MAX_DMA2D_BYTES: u64 = 256 << 20;
/// Elements one DMA_DIRECT2D may move (the compiler's are ≤ a few thousand rows).
const MAX_DMA2D_ELEMS: u64 = 1 << 20;

/// Convert packed elements of dtype `i` to dtype `o` (the DMA engine's cast), appending to a
/// cleared `out`. The common float pairs have their own loops; the rest go through f32.
fn convert_elems(i: Dtype, o: Dtype, src: &[u8], out: &mut Vec<u8>) {
    out.clear();
    match (i, o) {
        (Dtype::F32 | Dtype::F32r, Dtype::Bf16) => out.extend(src.chunks_exact(4).flat_map(|c| {
            half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .to_bits()
                .to_le_bytes()
        })),
        (Dtype::Bf16, Dtype::F32 | Dtype::F32r) => out.extend(
            src.chunks_exact(2)
                .flat_map(|c| ((u16::from_le_bytes([c[0], c[1]]) as u32) << 16).to_le_bytes()),
        ),
        _ => {
            for c in src.chunks_exact(i.size()) {
                let mut e = [0u8; 8];
                neuron_isa::dtype::store_f32(o, neuron_isa::dtype::load_f32(i, c), &mut e);
                out.extend_from_slice(&e[..o.size()]);
            }
        }
    }
}

impl Device {
    pub fn new(profile: ArchProfile) -> Device {
        Self::with_memory(profile, &crate::hostmem::heap_source)
    }

    /// A device whose SBUF, PSUM and register pages come from `memory` (memory user space
    /// may map; the heap where it gives none).
    pub fn with_memory(profile: ArchProfile, memory: crate::hostmem::MemSource) -> Device {
        let cores_n = profile.nc_count;
        let cores = (0..profile.nc_count)
            .map(|_| Core {
                mem: CoreMem::with_memory(&profile, memory),
                regs: Arc::new(RegPage::with_memory(memory)),
                engines: (0..5).map(|_| EngineState::new()).collect(),
                nqs: HashMap::new(),
                scratch: Scratch::default(),
                pe: Default::default(),
                dge_table: None,
            })
            .collect();
        let dma = (0..profile.dma_engines)
            .map(|_| (0..DMA_QUEUES).map(|_| DmaQueue::default()).collect())
            .collect();
        Device {
            profile,
            now: Ps::ZERO,
            seq: 0,
            events: BinaryHeap::new(),
            cores,
            dma,
            hbm: SparseMem::new(),
            host: BTreeMap::new(),
            faults: Vec::new(),
            stats: Stats::default(),
            trace: None,
            host_profile: None,
            copybuf: Vec::new(),
            dma2d_free: vec![Ps(0); cores_n],
            dmaout: Vec::new(),
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
    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }
    pub fn hbm_resident_bytes(&self) -> u64 {
        self.hbm.resident_bytes()
    }

    /// Start (or stop, with `false`) recording a timeline.
    pub fn set_tracing(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }
    /// Take the recorded timeline.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Replace the cost table (calibration experiments: `neuron-emu calibrate`). Costs only
    /// change timing, never data.
    pub fn set_cost(&mut self, cost: crate::arch::CostTable) {
        self.profile.cost = cost;
    }

    /// Start (or stop, with `false`) measuring host time per instruction kind; starting
    /// clears what was measured.
    pub fn set_host_profiling(&mut self, on: bool) {
        self.host_profile = on.then(HostProfile::default);
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
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    /// Whether events are pending.
    pub fn busy(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether some engine waits on a semaphore or event (so host writes may unblock it).
    pub fn waiting(&self) -> bool {
        self.cores
            .iter()
            .any(|c| c.engines.iter().any(|e| e.status == EngStatus::Blocked))
    }

    // ---------------------------------------------------------------- host memory

    /// Register a host ("coherent DMA") region at host physical address `pa` (without the
    /// arch host bit). Returns its address for user mappings.
    pub fn add_host_region(&mut self, pa: u64, len: usize) -> Option<*mut u8> {
        let r = HostRegion::new(len)?;
        let p = r.as_ptr();
        self.host.insert(pa, r);
        Some(p)
    }
    /// Register a host region whose memory the caller provides (see
    /// [`HostRegion::from_external`]). Returns its address.
    pub fn add_host_region_external(&mut self, pa: u64, region: HostRegion) -> *mut u8 {
        let p = region.as_ptr();
        self.host.insert(pa, region);
        p
    }
    pub fn remove_host_region(&mut self, pa: u64) {
        self.host.remove(&pa);
    }
    pub fn host_region_ptr(&self, pa: u64) -> Option<*mut u8> {
        self.host.get(&pa).map(|r| r.as_ptr())
    }

    // ---------------------------------------------------------------- address routing

    fn host_bit(&self) -> u64 {
        self.profile.arch.host_base_bit()
    }

    fn in_hbm(&self, addr: u64, len: u64) -> bool {
        let a = self.profile.arch;
        (0..a.hbm_count()).any(|k| {
            a.hbm_base(k).is_some_and(|base| {
                addr >= base
                    && addr
                        .checked_add(len)
                        .is_some_and(|e| e <= base + a.hbm_size())
            })
        })
    }

    fn host_region(&self, addr: u64, len: u64) -> Result<(&HostRegion, usize), MemError> {
        let key = addr & !self.host_bit();
        let err = MemError {
            addr,
            len,
            reason: "no host memory chunk there",
        };
        let (base, r) = self.host.range(..=key).next_back().ok_or(err.clone())?;
        let off = key - base;
        if off.checked_add(len).is_some_and(|e| e <= r.len() as u64) {
            Ok((r, off as usize))
        } else {
            Err(err)
        }
    }

    /// Read device memory (HBM, host chunks, SBUF/PSUM windows, register pages).
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len() as u64;
        if addr & self.host_bit() != 0 {
            let (r, off) = self.host_region(addr, len)?;
            r.read(off, buf);
            return Ok(());
        }
        if self.in_hbm(addr, len) {
            self.hbm.read(addr, buf);
            return Ok(());
        }
        if let Some((nc, off)) = self.profile.tpb_of(addr) {
            return self.tpb_read(nc, off, addr, buf);
        }
        Err(MemError {
            addr,
            len,
            reason: "unmapped device address",
        })
    }

    /// Write device memory, with the side effects of register and instruction-port writes.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let len = data.len() as u64;
        if addr & self.host_bit() != 0 {
            let (r, off) = self.host_region(addr, len)?;
            r.write(off, data);
            return Ok(());
        }
        if self.in_hbm(addr, len) {
            self.hbm.write(addr, data);
            return Ok(());
        }
        if let Some((nc, off)) = self.profile.tpb_of(addr) {
            return self.tpb_write(nc, off, addr, data);
        }
        Err(MemError {
            addr,
            len,
            reason: "unmapped device address",
        })
    }

    /// Fill device memory with a byte.
    pub fn fill(&mut self, addr: u64, len: u64, byte: u8) -> Result<(), MemError> {
        if addr & self.host_bit() == 0 && self.in_hbm(addr, len) {
            self.hbm.fill(addr, len, byte);
            return Ok(());
        }
        let chunk = vec![byte; 64 * 1024];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            self.write(addr + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Forget the contents of a freed HBM range (returns its pages, and any backed region
    /// inside it, to the host).
    pub fn discard(&mut self, addr: u64, len: u64) {
        if self.in_hbm(addr, len) {
            self.hbm.discard(addr, len);
        }
    }

    /// The contiguous backing of the HBM range starting at `addr`, if it has one:
    /// `(pointer, length)`.
    pub fn hbm_backing(&self, addr: u64) -> Option<(*mut u8, usize)> {
        self.hbm.backing(addr)
    }

    /// Give the HBM range `[addr, addr + region.len())` contiguous host backing (for a user
    /// mapping of device memory), initialised from its current contents; every later access to
    /// the range uses it, until the range is discarded. Refused (region handed back) outside
    /// HBM or when it overlaps another backed range.
    pub fn back_hbm(&mut self, addr: u64, region: HostRegion) -> Result<*mut u8, HostRegion> {
        if addr & self.host_bit() != 0 || !self.in_hbm(addr, region.len() as u64) {
            return Err(region);
        }
        self.hbm.back(addr, region)
    }

    /// HBM scrub: `[addr, addr+len)` (inside one HBM) reads as the little-endian u32 `pattern`
    /// afterwards; untouched memory stays sparse.
    pub fn scrub_hbm(&mut self, addr: u64, len: u64, pattern: u32) -> Result<(), MemError> {
        if addr & self.host_bit() != 0 || !self.in_hbm(addr, len) {
            return Err(MemError {
                addr,
                len,
                reason: "scrub outside HBM",
            });
        }
        self.hbm.scrub(addr, len, pattern);
        Ok(())
    }

    fn sbuf_window(&self, off: u64, len: u64, space: neuron_isa::Space) -> Option<usize> {
        let (base, stride, pb) = match space {
            neuron_isa::Space::Sbuf => (
                tpb::SBUF,
                tpb::SBUF_PARTITION_STRIDE,
                self.profile.sbuf_partition_bytes as u64,
            ),
            neuron_isa::Space::Psum => (
                tpb::PSUM,
                tpb::PSUM_PARTITION_STRIDE,
                self.profile.psum_partition_bytes as u64,
            ),
        };
        let rel = off.checked_sub(base)?;
        let (p, inpart) = (rel / stride, rel % stride);
        // Storage uses the window's stride, so a window offset is a storage offset.
        (p < self.profile.partitions as u64 && inpart + len <= pb)
            .then(|| (p * stride + inpart) as usize)
    }

    /// Address of core `nc`'s SBUF storage, laid out exactly as its 32 MiB TPB SBUF window
    /// (partition `p` at `p * 0x40000`), for user mappings of that window. As on hardware,
    /// user accesses that race with running engines see unordered results.
    pub fn sbuf_window_ptr(&mut self, nc: usize) -> Option<*mut u8> {
        self.cores
            .get_mut(nc)
            .map(|c| c.mem.sbuf.as_mut_ptr() as *mut u8)
    }

    fn tpb_read(&self, nc: usize, off: u64, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len() as u64;
        let core = &self.cores[nc];
        for space in [neuron_isa::Space::Sbuf, neuron_isa::Space::Psum] {
            if let Some(at) = self.sbuf_window(off, len, space) {
                buf.copy_from_slice(&core.mem.bytes(space)[at..at + buf.len()]);
                return Ok(());
            }
        }
        if (tpb::SEMAPHORE_PAGE..tpb::SEMAPHORE_PAGE + tpb::SEMAPHORE_PAGE_SIZE).contains(&off)
            && off.is_multiple_of(4)
            && len.is_multiple_of(4)
        {
            for (i, w) in buf.chunks_exact_mut(4).enumerate() {
                let v = core
                    .regs
                    .read_reg(off - tpb::SEMAPHORE_PAGE + 4 * i as u64)
                    .ok_or(MemError {
                        addr,
                        len,
                        reason: "register page overrun",
                    })?;
                w.copy_from_slice(&v.to_le_bytes());
            }
            return Ok(());
        }
        Err(MemError {
            addr,
            len,
            reason: "not a readable NeuronCore address (outside SBUF/PSUM partitions or registers)",
        })
    }

    fn tpb_write(&mut self, nc: usize, off: u64, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let len = data.len() as u64;
        if off == tpb::DGE_TABLE {
            let v: [u8; 8] = data.try_into().map_err(|_| MemError {
                addr,
                len,
                reason: "the DGE table register takes one 64-bit write",
            })?;
            self.cores[nc].dge_table = Some(u64::from_le_bytes(v));
            return Ok(());
        }
        for space in [neuron_isa::Space::Sbuf, neuron_isa::Space::Psum] {
            if let Some(at) = self.sbuf_window(off, len, space) {
                self.cores[nc].mem.bytes_mut(space)[at..at + data.len()].copy_from_slice(data);
                return Ok(());
            }
        }
        if (tpb::SEMAPHORE_PAGE..tpb::SEMAPHORE_PAGE + tpb::SEMAPHORE_PAGE_SIZE).contains(&off) {
            if !off.is_multiple_of(4) || !len.is_multiple_of(4) {
                return Err(MemError {
                    addr,
                    len,
                    reason: "register writes must be whole aligned 32-bit words",
                });
            }
            for (i, w) in data.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                if !self.cores[nc]
                    .regs
                    .write_reg(off - tpb::SEMAPHORE_PAGE + 4 * i as u64, v)
                {
                    return Err(MemError {
                        addr,
                        len,
                        reason: "register page overrun",
                    });
                }
            }
            self.wake_blocked(nc);
            return Ok(());
        }
        let port_end = tpb::INSTR_PORT + 5 * tpb::INSTR_PORT_STRIDE;
        if (tpb::INSTR_PORT..port_end).contains(&off) {
            let e = ((off - tpb::INSTR_PORT) / tpb::INSTR_PORT_STRIDE) as usize;
            let eng = &mut self.cores[nc].engines[e];
            // Bound what a stopped engine can accumulate (a runaway host re-kicking fetches).
            if eng.ibuf.len().saturating_sub(eng.origin) + data.len() > MAX_PENDING_INSTR_BYTES {
                return Err(MemError {
                    addr,
                    len,
                    reason: "instruction port overflow (engine not consuming)",
                });
            }
            eng.ibuf.extend_from_slice(data);
            if eng.status == EngStatus::Idle && !eng.scheduled {
                eng.scheduled = true;
                let now = self.now;
                self.schedule(now, Ev::Step(nc, e));
            }
            return Ok(());
        }
        Err(MemError {
            addr,
            len,
            reason: "not a writable NeuronCore address",
        })
    }

    /// The pc of engine `e` of core `nc` (of the word waiting to issue, when it waits).
    pub fn engine_pc(&self, nc: usize, e: Engine) -> Option<u32> {
        Some(self.cores.get(nc)?.engines.get(e.index())?.pc)
    }

    /// Address of engine `e`'s instruction port on core `nc`.
    pub fn instr_port(&self, nc: usize, e: Engine) -> u64 {
        self.profile.tpb_base(nc) + tpb::INSTR_PORT + e.index() as u64 * tpb::INSTR_PORT_STRIDE
    }

    // ---------------------------------------------------------------- registers

    /// A semaphore/event register write by the host (ioctl or BAR path): applied now.
    pub fn reg_write(&mut self, nc: usize, page_off: u64, v: u32) -> bool {
        let Some(c) = self.cores.get(nc) else {
            return false;
        };
        let ok = c.regs.write_reg(page_off, v);
        if ok {
            self.wake_blocked(nc);
        }
        ok
    }

    /// Apply stores user space made through mapped register pages. Call only at quiescent
    /// points (see `regs`). Returns whether anything changed.
    /// Whether user space left a store in any core's register mailboxes.
    pub fn has_mail(&self) -> bool {
        self.cores.iter().any(|c| c.regs.has_mail())
    }

    pub fn drain_mailboxes(&mut self) -> bool {
        let mut any = false;
        for nc in 0..self.cores.len() {
            if self.cores[nc].regs.drain_mailboxes() {
                any = true;
                self.wake_blocked(nc);
            }
        }
        any
    }

    fn wake_blocked(&mut self, nc: usize) {
        let now = self.now;
        for e in 0..5 {
            let st = &mut self.cores[nc].engines[e];
            if st.status == EngStatus::Blocked && !st.scheduled {
                st.scheduled = true;
                st.status = EngStatus::Idle;
                self.seq += 1;
                self.events.push(Reverse((now, self.seq, Ev::Step(nc, e))));
            }
        }
    }

    // ---------------------------------------------------------------- notifications

    /// Point notification queue (`nq_type`, `engine_index`) of core `nc` at `size` bytes of
    /// device memory at `base` (`size` a power of two, checked by the caller).
    pub fn nq_configure(
        &mut self,
        nc: usize,
        nq_type: u8,
        engine_index: u8,
        base: u64,
        size: u64,
    ) -> bool {
        let Some(c) = self.cores.get_mut(nc) else {
            return false;
        };
        c.nqs.insert(
            (nq_type, engine_index),
            Nq {
                base,
                entries: size / ENTRY_SIZE as u64,
                index: 0,
            },
        );
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        nc: usize,
        nq_type: u8,
        engine_index: u8,
        kind: NotifyKind,
        engine: u8,
        value: u32,
        pc: u32,
    ) {
        let Some(q) = self.cores[nc].nqs.get_mut(&(nq_type, engine_index)) else {
            self.stats.dropped_notifications += 1;
            return;
        };
        if q.entries == 0 {
            self.stats.dropped_notifications += 1;
            return;
        }
        let slot = q.index % q.entries;
        let phase = (q.index / q.entries) % 2 == 0;
        q.index += 1;
        let addr = q.base + slot * ENTRY_SIZE as u64;
        let e = NotificationEntry::new(kind, engine, value, pc, self.now.0, phase);
        let bytes = zerocopy::IntoBytes::as_bytes(&e).to_vec();
        self.stats.notifications += 1;
        // Publish the payload first and the word holding the phase bit last.
        if addr & self.host_bit() != 0 {
            if let Ok((r, off)) = self.host_region(addr, bytes.len() as u64) {
                r.write(off + 4, &bytes[4..]);
                r.store_u32_release(off, e.word0);
                return;
            }
        } else if self.write(addr + 4, &bytes[4..]).is_ok() && self.write(addr, &bytes[..4]).is_ok()
        {
            return;
        }
        self.stats.dropped_notifications += 1;
    }

    fn fault(&mut self, nc: usize, engine: Option<Engine>, pc: u32, opcode: u8, f: OpFault) {
        let fault = Fault {
            kind: f.kind,
            nc,
            engine,
            pc,
            opcode,
            detail: f.detail,
        };
        tracing::debug!(target: "devmodel", "fault: {fault}");
        let eidx = engine.map(|e| e.index() as u8).unwrap_or(7);
        self.post(
            nc,
            NQ_ERROR,
            0,
            NotifyKind::Error,
            eidx,
            fault.kind.code(),
            pc,
        );
        self.faults.push(fault);
    }

    // ---------------------------------------------------------------- DMA

    /// `DMA_QUEUE_INIT`: bind rings and reset the queue's pointers.
    pub fn dma_queue_init(
        &mut self,
        eng: usize,
        q: usize,
        tx_base: u64,
        tx_len: u32,
        rx_base: u64,
        rx_len: u32,
    ) -> Result<(), DmaError> {
        let dq = self
            .dma
            .get_mut(eng)
            .and_then(|e| e.get_mut(q))
            .ok_or(DmaError::NoSuchQueue)?;
        dq.st = QueueState {
            enabled: true,
            aborted: false,
            tx_base,
            rx_base,
            tx_len,
            rx_len,
            head: 0,
            tx_tail: 0,
            rx_tail: 0,
        };
        // A stale pending step for the old ring is harmless: dma_step re-reads the state.
        Ok(())
    }

    pub fn dma_queue_state(&self, eng: usize, q: usize) -> Option<QueueState> {
        self.dma.get(eng).and_then(|e| e.get(q)).map(|d| d.st)
    }

    /// Ring the doorbell: advance the RX and TX tails.
    pub fn dma_queue_start(
        &mut self,
        eng: usize,
        q: usize,
        tx: u32,
        rx: u32,
    ) -> Result<(), DmaError> {
        let now = self.now;
        let dq = self
            .dma
            .get_mut(eng)
            .and_then(|e| e.get_mut(q))
            .ok_or(DmaError::NoSuchQueue)?;
        if !dq.st.enabled || dq.st.tx_len == 0 || dq.st.rx_len == 0 {
            return Err(DmaError::NotInitialised);
        }
        let (tx_t, rx_t) = (dq.st.tx_tail + tx as u64, dq.st.rx_tail + rx as u64);
        if tx_t - dq.st.head > dq.st.tx_len as u64 || rx_t - dq.st.head > dq.st.rx_len as u64 {
            return Err(DmaError::Overrun);
        }
        dq.st.tx_tail = tx_t;
        dq.st.rx_tail = rx_t;
        if !dq.scheduled {
            dq.scheduled = true;
            self.schedule(now, Ev::Dma(eng, q));
        }
        Ok(())
    }

    fn dma_nc(&self, eng: usize) -> usize {
        let per_core = self.cores.len() * DMA_ENGINES_PER_NC;
        let nc = if eng < per_core {
            eng / DMA_ENGINES_PER_NC
        } else {
            // Host-transfer engines after the per-core ones: each serves a pair of cores on v3
            // (engine 128 + k for cores 2k, 2k+1) and one core on v2 (32, 33).
            let k = eng - per_core;
            if self.cores.len() > 2 {
                2 * k
            } else {
                k
            }
        };
        nc.min(self.cores.len().saturating_sub(1))
    }

    fn dma_step(&mut self, eng: usize, q: usize) {
        let st = self.dma[eng][q].st;
        self.dma[eng][q].scheduled = false;
        if st.aborted || !st.enabled || st.head >= st.tx_tail.min(st.rx_tail) {
            return;
        }
        let nc = self.dma_nc(eng);
        let (tx_idx, rx_idx) = (
            st.head % st.tx_len.max(1) as u64,
            st.head % st.rx_len.max(1) as u64,
        );
        let abort = |this: &mut Device, why: String| {
            this.dma[eng][q].st.aborted = true;
            this.fault(
                nc,
                None,
                st.head as u32,
                0,
                OpFault {
                    kind: FaultKind::DmaAbort,
                    detail: format!("DMA engine {eng} queue {q}: {why}"),
                },
            );
        };
        let mut raw = [0u8; 32];
        let (tx_ok, rx_ok) = {
            let (a, b) = raw.split_at_mut(16);
            (
                self.read(st.tx_base + tx_idx * 16, a),
                self.read(st.rx_base + rx_idx * 16, b),
            )
        };
        if let Err(e) = tx_ok.and(rx_ok) {
            return abort(self, format!("descriptor fetch failed: {e}"));
        }
        let (Ok(tx), Ok(rx)) = (
            UdmaDesc::read_from_bytes(&raw[..16]),
            UdmaDesc::read_from_bytes(&raw[16..]),
        ) else {
            return abort(self, "descriptor decode".into());
        };
        let (tl, rl) = (tx.len(), rx.len());
        if tl != rl {
            return abort(
                self,
                format!(
                    "descriptor {} length mismatch: TX {tl} bytes, RX {rl} bytes",
                    st.head
                ),
            );
        }
        let mut buf = std::mem::take(&mut self.copybuf);
        buf.resize(tl as usize, 0);
        let res = self
            .read(tx.buf_ptr, &mut buf)
            .and_then(|_| self.write(rx.buf_ptr, &buf));
        self.copybuf = buf;
        if let Err(e) = res {
            return abort(self, format!("descriptor {}: {e}", st.head));
        }
        self.stats.dma_descriptors += 1;
        self.stats.dma_bytes += tl as u64;
        let cost = self.profile.cost.dma_desc_latency
            + Ps::from_bytes(tl as u64, self.profile.cost.dma_bytes_per_ns);
        if let Some(t) = self.trace.as_mut() {
            t.push(TraceEvent {
                nc,
                track: format!("DMA {eng}.{q}"),
                name: "DMA",
                pc: st.head as u32,
                start: self.now,
                dur: cost,
            });
        }
        let dq = &mut self.dma[eng][q];
        dq.st.head += 1;
        if dq.st.head < dq.st.tx_tail.min(dq.st.rx_tail) {
            dq.scheduled = true;
            let at = self.now + cost;
            self.schedule(at, Ev::Dma(eng, q));
        }
    }

    // ---------------------------------------------------------------- engines

    fn engine_step(&mut self, nc: usize, e: usize) {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        let st = &mut self.cores[nc].engines[e];
        st.scheduled = false;
        if matches!(st.status, EngStatus::Busy | EngStatus::Faulted) {
            return;
        }
        if st.pending.is_none() {
            // A forward branch may point past the words fetched so far: wait for them.
            if st.ibuf.len().saturating_sub(st.consumed) < testenc::WORD {
                st.status = EngStatus::Idle;
                return;
            }
            let word = &st.ibuf[st.consumed..st.consumed + testenc::WORD];
            let opcode = word[0];
            // Project-encoding words (0xE0-0xE9) and real trn2 words share the stream.
            let decoded = if (testenc::OP_NOP..=testenc::OP_END).contains(&opcode) {
                testenc::decode(word)
                    .map(|i| (i, None))
                    .map_err(|e| e.to_string())
            } else {
                decode_real(word)
            };
            match decoded {
                Ok((instr, real)) => {
                    st.pending = Some(Pending {
                        instr,
                        opcode,
                        ext_wait: real.as_deref().and_then(ext_wait_of),
                        real,
                    });
                    st.consumed += testenc::WORD;
                    // Words before the running program's pc 0 are done with.
                    if st.origin >= 1 << 16 {
                        st.ibuf.drain(..st.origin);
                        st.consumed -= st.origin;
                        st.origin = 0;
                    }
                }
                Err(err) => {
                    let pc = st.pc;
                    st.status = EngStatus::Faulted;
                    self.fault(
                        nc,
                        Some(engine),
                        pc,
                        opcode,
                        OpFault::bad(format!("cannot decode instruction: {err}")),
                    );
                    return;
                }
            }
        }
        let Some((mut instr, opcode, ext_wait)) =
            st.pending.as_ref().map(|p| (p.instr, p.opcode, p.ext_wait))
        else {
            return;
        };
        // Every wait must hold: the header's and, for EVENT_SEMAPHORE, the one in its body. A
        // DRAIN also waits until the engine's own completion signals have all landed.
        let draining = self.cores[nc].engines[e].outstanding > 0
            && self.cores[nc].engines[e]
                .pending
                .as_ref()
                .and_then(|p| p.real.as_ref())
                .is_some_and(|c| c.opcode == Opcode::Drain);
        let regs = &self.cores[nc].regs;
        if draining
            || !instr
                .sync
                .wait
                .iter()
                .chain(ext_wait.iter())
                .all(|w| wait_holds(regs, w))
        {
            self.cores[nc].engines[e].status = EngStatus::Blocked;
            return;
        }
        if let Some(w) = instr.sync.wait {
            if w.cond == WaitCond::EventSetThenClear {
                regs.set_event(w.index, 0);
            }
        }
        let pc = self.cores[nc].engines[e].pc;
        // The wait is satisfied: the word issues now.
        let real = self.cores[nc].engines[e]
            .pending
            .as_mut()
            .and_then(|p| p.real.take());
        let name = real
            .as_ref()
            .map_or(instr.mnemonic(), |c| c.opcode.static_name());
        let host_t0 = self.host_profile.is_some().then(std::time::Instant::now);
        let cost = &self.profile.cost;
        let mhz = cost.engine_mhz[e];
        let overhead = cost.instr_overhead_cycles;
        let mut latency = None;
        let cycles = match instr.op {
            _ if real.is_some() => {
                let Some(ci) = real else { return };
                match self.execute_real(nc, e, pc, &ci) {
                    Ok((c, lat)) => {
                        latency = lat;
                        c
                    }
                    Err(f) => {
                        self.cores[nc].engines[e].status = EngStatus::Faulted;
                        return self.fault(nc, Some(engine), pc, opcode, f);
                    }
                }
            }
            Op::DmaTrigger { .. } => {
                self.cores[nc].engines[e].status = EngStatus::Faulted;
                return self.fault(nc, Some(engine), pc, opcode, OpFault::bad("DMA_TRIGGER is a NEFF pseudo-instruction; the runtime must translate it before load"));
            }
            Op::DmaStart {
                dma_engine,
                queue,
                descs,
            } => {
                let geng = nc * DMA_ENGINES_PER_NC + dma_engine as usize;
                if dma_engine as usize >= DMA_ENGINES_PER_NC {
                    self.cores[nc].engines[e].status = EngStatus::Faulted;
                    return self.fault(
                        nc,
                        Some(engine),
                        pc,
                        opcode,
                        OpFault::bad(format!("DMA engine {dma_engine} out of range")),
                    );
                }
                if let Err(err) = self.dma_queue_start(geng, queue as usize, descs, descs) {
                    self.cores[nc].engines[e].status = EngStatus::Faulted;
                    return self.fault(
                        nc,
                        Some(engine),
                        pc,
                        opcode,
                        OpFault {
                            kind: FaultKind::DmaAbort,
                            detail: format!("DMA queue {geng}.{queue}: {err:?}"),
                        },
                    );
                }
                overhead
            }
            ref op => {
                let core = &mut self.cores[nc];
                match core::execute(op, &mut core.mem, &mut core.scratch) {
                    Ok(elems) => match op {
                        Op::MatMul { moving, .. } => {
                            let per = if matches!(moving.dtype, neuron_isa::Dtype::F32) {
                                4
                            } else {
                                1
                            };
                            overhead + elems * per / cost.pe_cols_per_cycle.max(1)
                        }
                        _ => overhead + elems / cost.stream_elems_per_cycle.max(1),
                    },
                    Err(f) => {
                        core.engines[e].status = EngStatus::Faulted;
                        return self.fault(nc, Some(engine), pc, opcode, f);
                    }
                }
            }
        };
        if let (Some(t0), Some(hp)) = (host_t0, self.host_profile.as_mut()) {
            hp.record(name, t0.elapsed());
        }
        self.stats.instructions += 1;
        let dur = Ps::from_cycles(cycles, mhz);
        // Silicon signals a word's completion (its semaphore update) after its latency, which
        // for a MATMUL is longer than the interval before PE takes the next word.
        if let (Some(lat), Some(u)) = (latency, instr.sync.update) {
            if lat > dur {
                instr.sync.update = None;
                let at = self.now + lat;
                self.cores[nc].engines[e].outstanding += 1;
                self.schedule(at, Ev::Update(nc, e, u));
            }
        }
        if let Some(t) = self.trace.as_mut() {
            t.push(TraceEvent {
                nc,
                track: engine.profiler_name().to_string(),
                name,
                pc,
                start: self.now,
                dur,
            });
        }
        let st = &mut self.cores[nc].engines[e];
        st.pending = None;
        st.inflight = Some((instr, opcode));
        st.status = EngStatus::Busy;
        st.scheduled = true;
        let at = self.now + dur;
        self.schedule(at, Ev::Complete(nc, e));
    }

    /// Run one real trn2 word; returns its cost in engine cycles (issue overhead included)
    /// and, for a calibrated class, the time from its issue to its completion signal.
    fn execute_real(
        &mut self,
        nc: usize,
        e: usize,
        pc: u32,
        ci: &CaymanInstr,
    ) -> Result<(u64, Option<Ps>), OpFault> {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        // The weights a MATMUL streams against were loaded by the LDWEIGHTS before it; only
        // the first MATMUL after it shares the pair's calibrated interval with it.
        let pe = &self.cores[nc].pe;
        let (transpose, ldw_cols, fresh) = (pe.transpose, pe.m as u64, pe.fresh);
        // Elements streamed per partition, for the uncalibrated table.
        let streamed = match ci.opcode {
            Opcode::Write => self.exec_write(ci).map(|_| 0)?,
            Opcode::TensorLoad => self.exec_tensor_load(nc, e, ci).map(|_| 0)?,
            Opcode::CompareBranch => self.exec_branch(nc, e, pc, ci).map(|_| 0)?,
            Opcode::EventSemaphoreRangeClear => {
                let (mode, first, last) = (
                    ci.u("mode").unwrap_or(0),
                    ci.u("first").unwrap_or(0),
                    ci.u("last").unwrap_or(0),
                );
                if mode != 1 || first > last || last > 255 {
                    return Err(OpFault::bad(format!(
                        "EVENT_SEMAPHORE_RANGE_CLEAR mode {mode} over {first}..={last}: only mode 1 (SEMAPHORE_ZERO) over an ascending range is known"
                    )));
                }
                let regs = &self.cores[nc].regs;
                for s in first..=last {
                    regs.set_sem(s as u8, 0);
                }
                self.wake_blocked(nc);
                0
            }
            // NOTIFY posts when it completes (`decode_real` gives it `Op::Notify`); the three
            // unnamed runtime opcodes are treated as no-ops (LOW: `docs/isa/cayman.md` §9).
            Opcode::Notify | Opcode::Unnamed(_) => 0,
            _ => {
                let core = &mut self.cores[nc];
                let r = crate::cayman_exec::execute(
                    ci,
                    &mut core.mem,
                    &mut core.pe,
                    &mut core.scratch,
                )?;
                match r {
                    crate::cayman_exec::Exec::Done { elems, sgemm_macs } => {
                        self.stats.sgemm_macs += sgemm_macs;
                        elems
                    }
                    crate::cayman_exec::Exec::Dma(d) => {
                        self.dma2d(nc, &d)?;
                        0
                    }
                }
            }
        };
        let cost = &self.profile.cost;
        let stream = cost.stream_elems_per_cycle.max(1);
        let table = cost.instr_overhead_cycles + streamed / stream;
        if cost.real.is_empty() {
            return Ok((table, None));
        }
        // A calibrated class replaces the table's charge (`calib.rs`) with the word's whole
        // fitted interval. A MATMUL's interval covers the LDWEIGHTS before it, which was
        // already charged the table's cost.
        let (elems, wide) = crate::calib::word_features(ci);
        let is_mm = ci.opcode == Opcode::Matmul;
        let Some(c) = crate::calib::lookup(&cost.real, engine, ci.opcode, wide, is_mm && transpose)
        else {
            return Ok((table, None));
        };
        let mhz = cost.engine_mhz[engine.index()] as u64;
        // The LDWEIGHTS before a fresh MATMUL was charged this much of the pair's interval.
        let ldw = if is_mm && fresh {
            cost.instr_overhead_cycles + ldw_cols / stream
        } else {
            0
        };
        let (interval, lat) = (c.cost(elems), c.latency(elems));
        let cycles = (interval.0.saturating_mul(mhz) / 1_000_000).saturating_sub(ldw);
        // Only a latency longer than the fitted interval defers the completion signal (the
        // comparison is on the fitted values, before cycle rounding).
        let latency = (lat > interval).then(|| {
            Ps(lat
                .0
                .saturating_sub(ldw.saturating_mul(1_000_000) / mhz.max(1)))
        });
        Ok((cycles, latency))
    }

    /// WRITE: up to two immediate 32-bit stores to device addresses (a semaphore register of
    /// this or another core, an event register, memory). The stores happen at issue.
    fn exec_write(&mut self, ci: &CaymanInstr) -> Result<(), OpFault> {
        for k in 0..2 {
            let size = ci.u(&format!("size{k}")).unwrap_or(0);
            if size == 0 {
                continue;
            }
            if size > 4 {
                return Err(OpFault::bad(format!(
                    "WRITE slot {k}: size {size}, at most 4 bytes are known"
                )));
            }
            let dst = ci.u(&format!("dst{k}")).unwrap_or(0);
            let data = ci.u(&format!("data{k}")).unwrap_or(0) as u32;
            self.write(dst, &data.to_le_bytes()[..size as usize])
                .map_err(|err| OpFault {
                    kind: FaultKind::OutOfBounds,
                    detail: format!("WRITE slot {k}: {err}"),
                })?;
        }
        Ok(())
    }

    /// TENSOR_LOAD: `num0 x num1` 32-bit values (`step0` elements apart) from a device
    /// address into the engine's registers named by the word's `regs` bytes.
    fn exec_tensor_load(&mut self, nc: usize, e: usize, ci: &CaymanInstr) -> Result<(), OpFault> {
        let dtype = ci.u("dtype").unwrap_or(0);
        let n = ci.u("num0").unwrap_or(0).max(1) * ci.u("num1").unwrap_or(0).max(1);
        let step = ci
            .i("step0")
            .or_else(|| ci.u("step0").map(|v| v as i64))
            .unwrap_or(0);
        let regs: Vec<u8> = match ci.get("regs") {
            Some(neuron_isa::cayman::Value::Bytes(b)) => b.clone(),
            _ => Vec::new(),
        };
        if dtype != 9 || n as usize > regs.len() {
            return Err(OpFault::bad(format!(
                "TENSOR_LOAD of {n} values of dtype code {dtype}: only uint32 (9) into at most {} registers is known",
                regs.len()
            )));
        }
        let addr = ci.u("addr").unwrap_or(0);
        for (i, r) in regs.iter().take(n as usize).enumerate() {
            let at = addr.wrapping_add((i as i64 * step * 4) as u64);
            let mut b = [0u8; 4];
            self.read(at, &mut b).map_err(|err| OpFault {
                kind: FaultKind::OutOfBounds,
                detail: format!("TENSOR_LOAD: {err}"),
            })?;
            self.cores[nc].engines[e].regs[*r as usize] = u32::from_le_bytes(b);
        }
        Ok(())
    }

    /// COMPARE_BRANCH: ALWAYS, or EQ (`$R[cmp0] == 0`); a taken branch moves the pc by
    /// `label / 64` words when the word completes. A target before pc 0 or beyond what the
    /// instruction port may hold faults; a target the fetch has not reached yet waits for it.
    fn exec_branch(
        &mut self,
        nc: usize,
        e: usize,
        pc: u32,
        ci: &CaymanInstr,
    ) -> Result<(), OpFault> {
        let raw14 = ci
            .unknown
            .iter()
            .find_map(|r| (14u8.checked_sub(r.off)).and_then(|i| r.bytes.get(i as usize)))
            .copied()
            .unwrap_or(0);
        if raw14 == 1 {
            return Err(OpFault::bad(
                "COMPARE_BRANCH register-indirect form (byte 14 = 1) is not modelled",
            ));
        }
        let st = &mut self.cores[nc].engines[e];
        let taken = match ci.u("cmp_op").unwrap_or(0) {
            0 => true,
            3 => st.regs[ci.u("cmp0").unwrap_or(0) as usize & 0xff] == 0,
            op => {
                return Err(OpFault::bad(format!(
                    "COMPARE_BRANCH comparison {op} is not known (0 ALWAYS, 3 EQ)"
                )))
            }
        };
        if !taken {
            return Ok(());
        }
        let label = ci.i("label").unwrap_or(0);
        let max_words = (MAX_PENDING_INSTR_BYTES / testenc::WORD) as i64;
        let target = pc as i64 + label / 64;
        if label % 64 != 0 || target < 0 || target >= max_words {
            return Err(OpFault::bad(format!(
                "COMPARE_BRANCH label {label}: target pc {target} is outside the program"
            )));
        }
        st.branch = Some(target as u32);
        Ok(())
    }

    fn dge_resolve(&self, nc: usize, a: DmaAddr) -> Result<u64, OpFault> {
        match a {
            DmaAddr::Absolute(v) => Ok(v),
            DmaAddr::Table { offset, index, .. } => {
                let base = self.cores[nc].dge_table.ok_or_else(|| OpFault {
                    kind: FaultKind::DmaAbort,
                    detail: "DGE-table address with no DGE table set".into(),
                })?;
                let mut e = [0u8; 8];
                self.read(base + 8 * index as u64, &mut e)
                    .map_err(|err| OpFault {
                        kind: FaultKind::DmaAbort,
                        detail: format!("DGE table entry {index}: {err}"),
                    })?;
                Ok(u64::from_le_bytes(e) + offset as u64)
            }
            other => Err(OpFault {
                kind: FaultKind::DmaAbort,
                detail: format!("untranslated DMA address {other:?}"),
            }),
        }
    }

    /// A descriptor-generating DMA (DMA_DIRECT2D): moves `num0 x num1` elements of
    /// `elem_size` bytes (`[step0, step1]` in bytes), converting dtypes when they differ, and
    /// adds `increment` to `semaphore` when the transfer completes.
    fn dma2d(&mut self, nc: usize, d: &crate::cayman_exec::Dma2d) -> Result<(), OpFault> {
        let abort = |detail: String| OpFault {
            kind: FaultKind::DmaAbort,
            detail,
        };
        let src = self.dge_resolve(nc, d.src)?;
        let dst = self.dge_resolve(nc, d.dst)?;
        let (sn, dn) = (
            d.src_num[0].max(1) * d.src_num[1].max(1),
            d.dst_num[0].max(1) * d.dst_num[1].max(1),
        );
        if sn != dn
            || sn > MAX_DMA2D_ELEMS
            || sn.saturating_mul(d.src_elem.max(d.dst_elem)) > MAX_DMA2D_BYTES
            || d.src_elem == 0
            || d.src_elem > 1 << 20
            || d.dst_elem > 1 << 20
        {
            return Err(abort(format!("DMA_DIRECT2D shapes: {sn} source elements of {} bytes, {dn} destination elements of {} bytes", d.src_elem, d.dst_elem)));
        }
        let convert = match (d.in_dtype, d.out_dtype) {
            (Some(i), Some(o)) if i != o => Some((i, o)),
            _ => None,
        };
        if convert.is_none() && d.src_elem != d.dst_elem {
            return Err(abort(format!(
                "DMA_DIRECT2D element sizes differ ({} vs {}) without a conversion",
                d.src_elem, d.dst_elem
            )));
        }
        // Reused buffers: runs can be large, and fresh large allocations cost page faults.
        let mut buf = std::mem::take(&mut self.copybuf);
        let mut out = std::mem::take(&mut self.dmaout);
        let moved = self.dma2d_runs(src, dst, d, convert, &mut buf, &mut out);
        self.copybuf = buf;
        self.dmaout = out;
        let bytes = moved?;
        self.stats.dma_bytes += bytes;
        let at = match self.profile.cost.dma2d {
            Some(c) => {
                // One pipe per core: bytes move after the transfers already queued on it.
                let free = self.dma2d_free.get(nc).copied().unwrap_or(self.now);
                let done = self.now.max(free) + Ps::from_bytes(bytes, c.bytes_per_ns);
                if let Some(f) = self.dma2d_free.get_mut(nc) {
                    *f = done;
                }
                done + c.fixed
            }
            None => {
                self.now
                    + self.profile.cost.dma_desc_latency
                    + Ps::from_bytes(bytes, self.profile.cost.dma_bytes_per_ns)
            }
        };
        self.schedule(at, Ev::SemAdd(nc, d.semaphore, d.increment));
        Ok(())
    }

    /// The data movement of [`Self::dma2d`] (shapes already checked); returns bytes moved.
    #[allow(clippy::too_many_arguments)]
    fn dma2d_runs(
        &mut self,
        src: u64,
        dst: u64,
        d: &crate::cayman_exec::Dma2d,
        convert: Option<(Dtype, Dtype)>,
        buf: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<u64, OpFault> {
        let abort = |detail: String| OpFault {
            kind: FaultKind::DmaAbort,
            detail,
        };
        let sn = d.src_num[0].max(1) * d.src_num[1].max(1);
        // Elements are moved in runs: as many consecutive elements as are contiguous on both
        // sides (a whole row when both patterns' inner steps equal the element size).
        let (n0s, n0d) = (d.src_num[0].max(1), d.dst_num[0].max(1));
        let src_dense = d.src_step[0] == d.src_elem;
        let dst_dense = d.dst_step[0] == d.dst_elem;
        let mut bytes = 0u64;
        let mut k = 0u64;
        while k < sn {
            let (i0, i1) = (k % n0s, k / n0s);
            let (j0, j1) = (k % n0d, k / n0d);
            let run = if src_dense && dst_dense {
                (n0s - i0).min(n0d - j0)
            } else {
                1
            };
            let s = src
                .wrapping_add(i0.wrapping_mul(d.src_step[0]))
                .wrapping_add(i1.wrapping_mul(d.src_step[1]));
            let t = dst
                .wrapping_add(j0.wrapping_mul(d.dst_step[0]))
                .wrapping_add(j1.wrapping_mul(d.dst_step[1]));
            buf.resize((run * d.src_elem) as usize, 0);
            self.read(s, buf)
                .map_err(|e| abort(format!("DMA_DIRECT2D source: {e}")))?;
            let data: &[u8] = match convert {
                Some((i, o)) => {
                    convert_elems(i, o, buf, out);
                    if out.len() as u64 != run * d.dst_elem {
                        return Err(abort(format!("DMA_DIRECT2D conversion gives {} bytes per element, destination expects {}", out.len() as u64 / run, d.dst_elem)));
                    }
                    out
                }
                None => buf,
            };
            self.write(t, data)
                .map_err(|e| abort(format!("DMA_DIRECT2D destination: {e}")))?;
            bytes += run * d.src_elem;
            k += run;
        }
        Ok(bytes)
    }

    fn apply_update(&mut self, nc: usize, u: SemUpdate) {
        let Some(c) = self.cores.get(nc) else {
            return;
        };
        let regs = &c.regs;
        match u.op {
            SemOp::Inc => regs.add_sem(u.index, 1),
            SemOp::Dec => regs.add_sem(u.index, -1),
            SemOp::Add => regs.add_sem(u.index, u.value),
            SemOp::Set => regs.set_sem(u.index, u.value),
            SemOp::EventSet => regs.set_event(u.index, 1),
        }
        self.wake_blocked(nc);
    }

    fn engine_complete(&mut self, nc: usize, e: usize) {
        let st = &mut self.cores[nc].engines[e];
        st.scheduled = false;
        let Some((instr, _)) = st.inflight.take() else {
            return;
        };
        st.status = EngStatus::Idle;
        let pc = st.pc;
        if let Op::End = instr.op {
            st.pc = 0;
            st.origin = st.consumed;
        } else if let Some(t) = st.branch.take() {
            st.pc = t;
            st.consumed = st.origin + t as usize * testenc::WORD;
        } else {
            st.pc += 1;
        }
        if let Some(u) = instr.sync.update {
            self.apply_update(nc, u);
        }
        match instr.op {
            Op::Notify { id } => self.post(
                nc,
                NQ_NOTIFY,
                e as u8,
                NotifyKind::Notify,
                e as u8,
                id as u32,
                pc,
            ),
            Op::End => self.post(nc, NQ_NOTIFY, e as u8, NotifyKind::End, e as u8, 0, pc),
            _ => {}
        }
        let st = &mut self.cores[nc].engines[e];
        if !st.scheduled {
            st.scheduled = true;
            let now = self.now;
            self.schedule(now, Ev::Step(nc, e));
        }
    }

    /// Run up to `budget` events. Returns whether events remain.
    pub fn run(&mut self, budget: usize) -> bool {
        for _ in 0..budget {
            let Some(Reverse((t, _, ev))) = self.events.pop() else {
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
                    if let Some(c) = self.cores.get(nc) {
                        c.regs.add_sem(sem, v as i32);
                        self.wake_blocked(nc);
                    }
                }
                Ev::Update(nc, e, u) => {
                    if let Some(st) = self.cores.get_mut(nc).and_then(|c| c.engines.get_mut(e)) {
                        st.outstanding = st.outstanding.saturating_sub(1);
                    }
                    self.apply_update(nc, u);
                }
            }
        }
        !self.events.is_empty()
    }

    /// Reset one core: engines, memories, registers, its DMA queues and notification queues.
    pub fn reset_nc(&mut self, nc: usize) {
        let Some(c) = self.cores.get_mut(nc) else {
            return;
        };
        c.engines = (0..5).map(|_| EngineState::new()).collect();
        c.mem.clear();
        c.regs.reset();
        c.nqs.clear();
        c.pe = Default::default();
        c.dge_table = None;
        if let Some(f) = self.dma2d_free.get_mut(nc) {
            *f = Ps(0);
        }
        for eng in nc * DMA_ENGINES_PER_NC..(nc + 1) * DMA_ENGINES_PER_NC {
            if let Some(qs) = self.dma.get_mut(eng) {
                for dq in qs.iter_mut() {
                    *dq = DmaQueue::default();
                }
            }
        }
        self.events.retain(|Reverse((_, _, ev))| match *ev {
            Ev::Step(n, _) | Ev::Complete(n, _) => n != nc,
            Ev::Dma(eng, _) => eng / DMA_ENGINES_PER_NC != nc,
            Ev::SemAdd(n, _, _) | Ev::Update(n, _, _) => n != nc,
        });
    }
}

/// Decode a real trn2 word (loaded namespace) for execution: its header as an `Instr`'s sync,
/// and the word itself.
fn decode_real(word: &[u8]) -> Result<(Instr, Option<Box<CaymanInstr>>), String> {
    let w: &[u8; 64] = word.try_into().map_err(|_| "short word".to_string())?;
    let ci = CaymanInstr::decode(Namespace::Loaded, w);
    if !ci.opcode.is_known() {
        return Err(format!("unknown opcode 0x{:02x}", word[0]));
    }
    let mut sync = ci
        .header
        .sync()
        .ok_or_else(|| format!("{}: unsupported semaphore header codes", ci.opcode.name()))?;
    if ci.opcode == Opcode::EventSemaphore {
        if let Some(c) = ci.u("ext_cond").filter(|c| *c != 0) {
            if !matches!(c, 0x01 | 0x04 | 0x05) {
                return Err(format!(
                    "EVENT_SEMAPHORE: extended wait condition 0x{c:02x} not known"
                ));
            }
        }
        // The body's update ("$S[i]++@complete" ...) completes like the header's.
        if let Some(op) = ci.u("ext_op").filter(|o| *o != 0) {
            let op = SemOp::from_code(op as u8)
                .ok_or_else(|| format!("EVENT_SEMAPHORE: extended update 0x{op:02x} not known"))?;
            if sync.update.is_some() {
                return Err("EVENT_SEMAPHORE with two semaphore updates is not modelled".into());
            }
            sync.update = Some(SemUpdate {
                op,
                index: ci.u("ext_index").unwrap_or(0) as u8,
                value: ci.u("ext_operand").unwrap_or(0) as u32 as i32,
            });
        }
    }
    // A NOTIFY posts its hint to the engine's notification queue when it completes.
    let op = match ci.opcode {
        Opcode::Notify => Op::Notify {
            id: ci.u("hint").unwrap_or(0) as u16,
        },
        _ => Op::Nop,
    };
    Ok((Instr { sync, op }, Some(Box::new(ci))))
}

/// The second wait an EVENT_SEMAPHORE word carries in its body, if any.
fn ext_wait_of(ci: &CaymanInstr) -> Option<SemWait> {
    if ci.opcode != Opcode::EventSemaphore {
        return None;
    }
    let c = ci.u("ext_cond").filter(|c| *c != 0)? as u8;
    Some(SemWait {
        cond: WaitCond::from_code(c)?,
        index: ci.u("ext_wait_index").unwrap_or(0) as u8,
        value: ci.u("ext_wait_value").unwrap_or(0) as u32 as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// nkipy-matmul_large sg00 Pool pc 6919 (loaded form): `S[32]>=4112 $S[6]>=603`. The body's
    /// wait guards the output DMA that follows; ignoring it let the DMA read two column blocks
    /// before the Vector engine had written them.
    #[test]
    fn event_semaphore_carries_a_second_wait() {
        let w = word("a010000005200000101000000000000000000000000000000000000000000000050600005b020000000000000000000000000000000000000000000000000000");
        let (instr, ci) = decode_real(&w).expect("decodes");
        let ci = ci.expect("real word");
        assert_eq!(
            instr.sync.wait.map(|w| (w.cond, w.index, w.value)),
            Some((WaitCond::Ge, 32, 4112))
        );
        let ext = ext_wait_of(&ci).expect("second wait");
        assert_eq!((ext.cond, ext.index, ext.value), (WaitCond::Ge, 6, 603));
        // A body update becomes the word's update; an unknown body condition is refused.
        let mut u = w.clone();
        u[34] = 0x13;
        u[35] = 9;
        let (instr, _) = decode_real(&u).expect("decodes");
        assert_eq!(
            instr.sync.update.map(|u| (u.op, u.index)),
            Some((SemOp::Inc, 9))
        );
        let mut bad = w.clone();
        bad[32] = 0x07;
        assert!(decode_real(&bad).is_err());
    }

    /// Feed `words` to engine `e` of core `nc` and run the device until it is quiet (or
    /// `budget` events ran).
    fn run_words(dev: &mut Device, nc: usize, e: Engine, words: &[[u8; 64]], budget: usize) {
        let port = dev.instr_port(nc, e);
        dev.write(port, &words.concat()).expect("instruction port");
        dev.run(budget);
    }

    /// The runtime prologue's words: TENSOR_LOAD into a register, COMPARE_BRANCH on it, a
    /// WRITE to another core's semaphore increment register, EVENT_SEMAPHORE_RANGE_CLEAR and
    /// NOTIFY (posted when it completes).
    #[test]
    fn prologue_words_execute() {
        use neuron_isa::cayman::build as b;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        dev.write(hbm, &[0, 0, 0, 0, 7, 0, 0, 0]).expect("hbm");
        let (page0, page1) = (dev_sem_page(&dev, 0), dev_sem_page(&dev, 1));
        let (set5, peer_inc1) = (page0 + 0x1400 + 4 * 5, page1 + 0x1800 + 4);
        // Core 0's semaphores 3..=10 hold 9 before the range clear.
        for i in 3..=10 {
            assert!(dev.reg_write(0, 0x1400 + 4 * i, 9));
        }
        let words = [
            b::tensor_load(&[0, 1], hbm, 1), // $R[0] = 0, $R[1] = 7
            b::branch_eq(1, 2),              // $R[1] != 0: not taken
            b::branch_eq(0, 2),              // taken: skips the next word
            b::write(&[(set5, 0x55)]),
            b::write(&[(peer_inc1, 1), (peer_inc1, 2)]),
            b::range_clear(3, 10),
            b::notify(2),
        ];
        run_words(&mut dev, 0, Engine::Pe, &words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        let regs0 = dev.regs(0).expect("core 0");
        let regs1 = dev.regs(1).expect("core 1");
        assert_eq!(
            regs0.sem(5),
            0,
            "the skipped WRITE did not run; the range clear zeroed 3..=10"
        );
        assert_eq!(regs0.sem(11), 0);
        assert_eq!(
            regs1.sem(1),
            3,
            "both stores reached core 1's increment register"
        );
        let st = &dev.cores[0].engines[0];
        assert_eq!((st.regs[0], st.regs[1]), (0, 7));
        assert_eq!(st.pc, 6 + 1, "pc after the NOTIFY");
        assert_eq!(
            dev.stats().dropped_notifications,
            1,
            "the NOTIFY posted (no queue set up)"
        );
        // A WRITE to an address no core, memory or register decodes faults as out of bounds.
        run_words(
            &mut dev,
            0,
            Engine::Sp,
            &[b::write(&[(0x7f00_0000_0000, 1)])],
            1000,
        );
        let f = dev.faults().first().expect("fault");
        assert_eq!(
            (f.kind, f.engine, f.pc, f.opcode),
            (FaultKind::OutOfBounds, Some(Engine::Sp), 0, 0xa5)
        );
    }

    /// A branch before pc 0 (or past what an instruction port may hold) faults with the
    /// engine, pc and opcode; a branch to itself spins but never stalls the event loop.
    #[test]
    fn branches_are_bounded() {
        use neuron_isa::cayman::build as b;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        run_words(
            &mut dev,
            0,
            Engine::Act,
            &[b::set_ordering(true), b::branch_always(-5, 0)],
            1000,
        );
        let f = dev.faults().first().expect("fault");
        assert_eq!(
            (f.kind, f.engine, f.pc, f.opcode),
            (FaultKind::BadInstruction, Some(Engine::Act), 1, 0xa9)
        );
        assert!(f.detail.contains("outside the program"), "{}", f.detail);
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        run_words(&mut dev, 0, Engine::Act, &[b::branch_always(0, 0)], 1000);
        assert!(dev.faults().is_empty());
        assert!(dev.run(1000), "still spinning: only a timeout ends it");
        // The register-indirect form is refused.
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        run_words(&mut dev, 0, Engine::Sp, &[b::branch_indirect()], 1000);
        assert!(dev.faults()[0].detail.contains("register-indirect"));
    }

    /// The `$S[2]` ticket barrier of the prologue, `$S[0] > 0` start wait included.
    #[test]
    fn ticket_barrier_and_start_wait() {
        use neuron_isa::cayman::build::event_semaphore as es;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // Tensor: wait $S[0] > 0 and take it, then +=1 and wait ==2, =0. Sync: ==1 ++.
        run_words(
            &mut dev,
            0,
            Engine::Pe,
            &[
                es((0, 4, 0), 0x14, 0, 1),
                es((0, 0, 0), 0x15, 2, 1),
                es((2, 1, 2), 0x19, 2, 0),
            ],
            1000,
        );
        run_words(&mut dev, 0, Engine::Sp, &[es((2, 1, 1), 0x13, 2, 1)], 1000);
        let regs = dev.regs(0).expect("core 0");
        assert_eq!(dev.cores[0].engines[0].pc, 0, "Tensor waits for the start");
        assert!(dev.reg_write(0, 0x1800, 1));
        dev.run(10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        assert_eq!((regs.sem(0), regs.sem(2)), (0, 0));
        assert_eq!(dev.cores[0].engines[0].pc, 3);
        assert_eq!(dev.cores[0].engines[4].pc, 1);
    }

    fn dev_sem_page(dev: &Device, nc: usize) -> u64 {
        dev.profile.tpb_base(nc) + tpb::SEMAPHORE_PAGE
    }

    /// DMA_DIRECT2D moves contiguous runs at once; the result must equal the element-by-element
    /// definition (computed here independently), with and without a dtype conversion.
    #[test]
    fn dma2d_runs_match_the_elementwise_definition() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        let src: Vec<f32> = (0..4096).map(|i| i as f32 * 0.37 - 50.0).collect();
        let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
        dev.write(hbm, &bytes).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        // 3 rows of 40 fp32 elements, source rows 64 elements apart, into partitions 2..5
        // (destination rows of 8 elements: runs end at the shorter row).
        let mut d = crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(hbm + 4 * 5),
            src_step: [4, 256],
            src_num: [40, 3],
            src_elem: 4,
            dst: DmaAddr::Absolute(sbuf + 2 * tpb::SBUF_PARTITION_STRIDE + 0x100),
            dst_step: [4, tpb::SBUF_PARTITION_STRIDE],
            dst_num: [8, 15],
            dst_elem: 4,
            in_dtype: Some(Dtype::F32),
            out_dtype: Some(Dtype::F32),
            semaphore: 0,
            increment: 0,
        };
        dev.dma2d(0, &d).expect("plain dma");
        let elem = |k: u64| src[(5 + (k % 40) + 64 * (k / 40)) as usize];
        for k in 0..120u64 {
            let at = sbuf + (2 + k / 8) * tpb::SBUF_PARTITION_STRIDE + 0x100 + 4 * (k % 8);
            let mut b = [0u8; 4];
            dev.read(at, &mut b).expect("read back");
            assert_eq!(f32::from_le_bytes(b), elem(k), "element {k}");
        }
        // Same shape, converted to bf16 on the way (round to nearest even).
        d.dst = DmaAddr::Absolute(sbuf + 0x800);
        d.dst_step = [2, tpb::SBUF_PARTITION_STRIDE];
        d.dst_elem = 2;
        d.out_dtype = Some(Dtype::Bf16);
        dev.dma2d(0, &d).expect("converting dma");
        for k in 0..120u64 {
            let at = sbuf + (k / 8) * tpb::SBUF_PARTITION_STRIDE + 0x800 + 2 * (k % 8);
            let mut b = [0u8; 2];
            dev.read(at, &mut b).expect("read back");
            let bits = elem(k).to_bits();
            let rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16;
            assert_eq!(u16::from_le_bytes(b), rne, "element {k}");
        }
        // A run that crosses into unmapped space still aborts.
        d.src = DmaAddr::Absolute(0x7F_FFFF_FF00);
        assert!(dev.dma2d(0, &d).is_err());
    }

    /// A calibrated word whose latency exceeds its interval: the engine moves on after the
    /// interval, its semaphore update lands at the latency, and a DRAIN waits for it.
    #[test]
    fn late_completion_signal_and_drain() {
        use neuron_isa::cayman::build as b;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut cost = dev.profile().cost.clone();
        // EVENT_SEMAPHORE on PE: 10 ns to issue, signalled 5 us later.
        cost.real = vec![crate::calib::OpCost {
            engine: Engine::Pe,
            opcode: Opcode::EventSemaphore,
            wide: false,
            transpose: false,
            fixed: Ps(10_000),
            per_elem_fs: 0,
            lat_fixed: Ps(5_000_000),
            lat_per_elem_fs: 0,
        }];
        dev.set_cost(cost);
        dev.set_tracing(true);
        // $S[7]++ at completion, then a DRAIN, then $S[8]++.
        let words = [
            b::event_semaphore((0, 0, 0), 0x13, 7, 0),
            b::drain(1),
            b::event_semaphore((0, 0, 0), 0x13, 8, 0),
        ];
        let port = dev.instr_port(0, Engine::Pe);
        dev.write(port, &words.concat()).expect("instruction port");
        dev.run(10_000);
        let regs = dev.regs(0).expect("core 0");
        assert_eq!((regs.sem(7), regs.sem(8)), (1, 1));
        let trace = dev.take_trace();
        let span = |pc: u32| {
            trace
                .iter()
                .find(|t| t.pc == pc && t.nc == 0 && t.track == "Tensor")
                .map(|t| (t.start, t.dur))
                .expect("traced")
        };
        // The engine was free after the 10 ns interval, but the DRAIN issued only once the
        // update had landed, 5 us after the word's issue.
        assert!(span(0).1 <= Ps(10_500), "{:?}", span(0));
        assert!(span(1).0 >= span(0).0 + Ps(5_000_000), "{:?}", span(1));
        assert!(span(2).0 >= span(1).0);
    }
}
