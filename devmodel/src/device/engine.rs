//! The five sequencers of a core: the instruction stream at each port, decoding a trn2 word,
//! waiting on its semaphore conditions, issuing it (the data path is `exec`), and completing
//! it (pc, branch, the completion update, NOTIFY).

use super::{Device, Ev};
use crate::fault::OpFault;
use crate::hooks::IssueAction;
use crate::regs::RegPage;
use crate::time::Ps;
use neuron_isa::cayman::{CaymanInstr, Opcode, WORD};
use neuron_isa::{Engine, SemUpdate, SemWait, Sync, WaitCond};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EngStatus {
    Idle,
    Blocked,
    Busy,
    Faulted,
    /// Stopped by a hook: never issues or completes again (until the core is reset).
    Hung,
}

/// A decoded word waiting for its semaphores.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) sync: Sync,
    pub(super) opcode: u8,
    /// The decoded word (taken when it issues), shared with the decode cache.
    pub(super) word: Option<Arc<CaymanInstr>>,
    /// What issuing it reads off it (`decode::Facts`), the second wait an EVENT_SEMAPHORE
    /// body names among it.
    pub(super) facts: super::decode::Facts,
    /// A DRAIN: also waits for the engine's outstanding completion signals.
    pub(super) drain: bool,
}

/// The word being executed: what its completion does.
#[derive(Debug, Clone, Copy)]
pub(super) struct Inflight {
    pub(super) update: Option<SemUpdate>,
    /// A NOTIFY's hint, posted at completion.
    pub(super) notify: Option<u16>,
    /// The word ran on the core's lane: its result (and fault) is taken at completion, with
    /// the word's opcode byte for the fault record.
    pub(super) lane: Option<(super::lane::LaneWord, u8)>,
}

#[derive(Debug)]
pub(super) struct Sequencer {
    pub(super) ibuf: Vec<u8>,
    /// The decodings of `ibuf`'s words by position (word `i` at byte `64 i`), filled as
    /// they are fetched: `ibuf` only grows at its end, so a word once decoded at a position
    /// stays that word, and a program that loops (the runtime's prologue branches back to
    /// pc 0 every execution) finds each word here instead of hashing its 64 bytes into the
    /// device's cache (`decode::DecodeCache`: 8% of a decode step's device thread). Only
    /// the first [`POSITIONS`] words; not used while hooks may rewrite words at issue.
    pub(super) decoded: Vec<Option<super::decode::Word>>,
    pub(super) consumed: usize,
    pub(super) pc: u32,
    pub(super) status: EngStatus,
    /// The decoded word waiting to issue.
    pub(super) pending: Option<Pending>,
    pub(super) inflight: Option<Inflight>,
    pub(super) scheduled: bool,
    /// `ibuf` offset of pc 0 of the program being run (a program that loops with
    /// COMPARE_BRANCH keeps it, and its words stay in `ibuf`).
    pub(super) origin: usize,
    /// A taken COMPARE_BRANCH's target pc, applied when the word completes.
    pub(super) branch: Option<u32>,
    /// The engine's registers `$R[n]` (loaded by TENSOR_LOAD, read by COMPARE_BRANCH).
    pub(super) regs: Box<[u32; 256]>,
    /// Completion signals of words this engine has moved past that have not landed yet
    /// (calibrated latencies); a DRAIN waits for them.
    pub(super) outstanding: u32,
    /// Timing state (`Device::pre_issue_delay`): the pending word blocked on a wait, its
    /// pre-issue delay has been served, the opcode last issued, and the queue kind read off
    /// the program (with the `ibuf` length it was read at).
    pub(super) waited: bool,
    pub(super) held: bool,
    pub(super) last_op: Option<Opcode>,
    pub(super) kind: Option<(usize, crate::calib::QueueKind)>,
}

impl Sequencer {
    pub(super) fn new() -> Self {
        Sequencer {
            ibuf: Vec::new(),
            decoded: Vec::new(),
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
            waited: false,
            held: false,
            last_op: None,
            kind: None,
        }
    }

    pub(super) fn is_idle(&self) -> bool {
        self.status == EngStatus::Idle
    }

    /// The word at `consumed`, decoded, becomes the pending word.
    fn take(&mut self, opcode: u8, w: super::decode::Word) {
        self.pending = Some(Pending {
            sync: w.sync,
            opcode,
            drain: w.ci.opcode == Opcode::Drain,
            facts: w.facts,
            word: Some(w.ci),
        });
        self.consumed += WORD;
        // Words before the running program's pc 0 are done with.
        if self.origin >= 1 << 16 {
            self.ibuf.drain(..self.origin);
            let words = (self.origin / WORD).min(self.decoded.len());
            self.decoded.drain(..words);
            self.consumed -= self.origin;
            self.origin = 0;
        }
    }
}

/// Instruction words per engine whose decodings are kept by position
/// (`Sequencer::decoded`): 4 MiB of a program, far more than any real NEFF's engine streams.
const POSITIONS: usize = 1 << 16;

/// Ask the cache for what the engine's next words will read as they issue: the decodings
/// lie in three places (the position's slot, the shared instruction, its fields), and a
/// real layer's data (weights, KV cache) streams through the caches between one word of an
/// engine and its next, so each was a miss on every word (kgm-attn: two thirds of the event
/// loop's own time, `docs/performance.md`, seventeenth session). Three words ahead the
/// slot, two the instruction, one its fields: each read here was asked for a word earlier.
/// A hint only.
fn ask_ahead(decoded: &[Option<super::decode::Word>], at: usize) {
    use crate::prefetch;
    if let Some(slot) = decoded.get(at + 3) {
        prefetch::lines(slot as *const _, std::mem::size_of_val(slot));
    }
    if let Some(Some(w)) = decoded.get(at + 2) {
        prefetch::lines(Arc::as_ptr(&w.ci), std::mem::size_of::<CaymanInstr>());
    }
    if let Some(Some(w)) = decoded.get(at + 1) {
        let fields = w.ci.fields.as_slice();
        prefetch::lines(fields.as_ptr(), std::mem::size_of_val(fields));
    }
}

/// Whether semaphore/event wait `w` holds on `regs`.
pub(super) fn wait_holds(regs: &RegPage, w: &SemWait) -> bool {
    match w.cond {
        WaitCond::Eq => regs.sem(w.index) == w.value,
        WaitCond::Ge => regs.sem(w.index) >= w.value,
        WaitCond::Gt => regs.sem(w.index) > w.value,
        WaitCond::EventSetThenClear => regs.event(w.index) != 0,
    }
}

impl Device {
    /// Take the next word of engine `e` off its stream and decode it into `pending`.
    /// Returns false when the engine cannot go on (no word yet, a fault, a hook's hang or
    /// delay).
    fn fetch(&mut self, nc: usize, e: usize, engine: Engine) -> bool {
        let st = &mut self.cores[nc].engines[e];
        // A forward branch may point past the words fetched so far: wait for them.
        let Some(w) = st.ibuf.get(st.consumed..st.consumed + WORD) else {
            st.status = EngStatus::Idle;
            return false;
        };
        let pc = st.pc;
        let at = st.consumed / WORD;
        if self.hooks.0.is_none() {
            if let Some(Some(d)) = st.decoded.get(at) {
                ask_ahead(&st.decoded, at);
                // (The decoding's copy of byte 0: `ibuf`'s line is not read at all.)
                debug_assert_eq!(d.ci.opcode_byte, w[0]);
                let (d, opcode) = (d.clone(), d.ci.opcode_byte);
                st.take(opcode, d);
                return true;
            }
        }
        let mut word: [u8; WORD] = w.try_into().unwrap_or([0; WORD]);
        let mut delay = None;
        if self.hooks.0.is_some() {
            let site = self.site(nc, Some(engine), pc, word[0]);
            match self.call_hook(site, |h, c| h.before_issue(c, &mut word)) {
                Some(IssueAction::Hang) => {
                    self.cores[nc].engines[e].status = EngStatus::Hung;
                    return false;
                }
                Some(IssueAction::Delay(d)) => delay = Some(d),
                _ => {}
            }
        }
        let opcode = word[0];
        match self.decoded.get(&word) {
            Ok(d) => {
                let st = &mut self.cores[nc].engines[e];
                if self.hooks.0.is_none() && at < POSITIONS {
                    if st.decoded.len() <= at {
                        st.decoded.resize(at + 1, None);
                    }
                    st.decoded[at] = Some(d.clone());
                }
                st.take(opcode, d);
                if let Some(d) = delay {
                    st.scheduled = true;
                    st.status = EngStatus::Idle;
                    let at = self.now + d;
                    self.schedule(at, Ev::Step(nc, e));
                    return false;
                }
                true
            }
            Err(err) => {
                self.cores[nc].engines[e].status = EngStatus::Faulted;
                self.fault(
                    nc,
                    Some(engine),
                    pc,
                    opcode,
                    OpFault::bad(format!("cannot decode instruction: {err}")),
                );
                false
            }
        }
    }

    pub(super) fn engine_step(&mut self, nc: usize, e: usize) {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        let st = &mut self.cores[nc].engines[e];
        st.scheduled = false;
        if matches!(
            st.status,
            EngStatus::Busy | EngStatus::Faulted | EngStatus::Hung
        ) {
            return;
        }
        if st.pending.is_none() && !self.fetch(nc, e, engine) {
            return;
        }
        let st = &self.cores[nc].engines[e];
        let Some(p) = st.pending.as_ref() else {
            return;
        };
        let (sync, opcode, facts) = (p.sync, p.opcode, p.facts);
        let ext_wait = facts.ext_wait;
        // Every wait must hold: the header's and, for EVENT_SEMAPHORE, the one in its body. A
        // DRAIN also waits until the engine's own completion signals have all landed.
        let draining = p.drain && st.outstanding > 0;
        let regs = &self.cores[nc].regs;
        if draining
            || !sync
                .wait
                .iter()
                .chain(ext_wait.iter())
                .all(|w| wait_holds(regs, w))
        {
            let st = &mut self.cores[nc].engines[e];
            st.status = EngStatus::Blocked;
            st.waited = true;
            return;
        }
        // Calibrated start-up costs before the word issues (the wait is checked again then).
        if let Some(d) = self.pre_issue_delay(nc, e, engine, &sync) {
            let st = &mut self.cores[nc].engines[e];
            st.held = true;
            st.scheduled = true;
            st.status = EngStatus::Idle;
            let at = self.now + d;
            return self.schedule(at, Ev::Step(nc, e));
        }
        let regs = &self.cores[nc].regs;
        if let Some(w) = sync.wait {
            if w.cond == WaitCond::EventSetThenClear {
                regs.set_event(w.index, 0);
            }
        }
        let pc = self.cores[nc].engines[e].pc;
        // The wait is satisfied: the word issues now.
        let Some(ci) = self.cores[nc].engines[e]
            .pending
            .as_mut()
            .and_then(|p| p.word.take())
        else {
            return;
        };
        let name = ci.opcode.static_name();
        // Operands of a kept host-profile word, found before its time starts.
        let word_ops = match &self.host_profile {
            Some(p) if p.keep_words => {
                let lane = self.cores[nc].lane.get();
                Some(crate::cayman_exec::operands(&ci, &lane.mem, &lane.pe))
            }
            _ => None,
        };
        let host_t0 = self.host_profile.is_some().then(std::time::Instant::now);
        // Memory-access hooks see a data-path word's operands: reads before, writes after.
        let ops = if self.watch.on_chip && self.hooks.0.is_some() {
            let lane = self.cores[nc].lane.get();
            crate::cayman_exec::operands(&ci, &lane.mem, &lane.pe)
        } else {
            Vec::new()
        };
        let site = self.site(nc, Some(engine), pc, opcode);
        let run = |dev: &mut Device| {
            if !ops.is_empty() {
                dev.report_operands(site, &ops, false)?;
            }
            let r = dev.execute_real(nc, e, pc, &ci, &facts)?;
            if !ops.is_empty() {
                dev.report_operands(site, &ops, true)?;
            }
            Ok(r)
        };
        let (cycles, latency, lane) = match run(self) {
            Ok(r) => r,
            Err(f) => {
                self.cores[nc].engines[e].status = EngStatus::Faulted;
                return self.fault(nc, Some(engine), pc, opcode, f);
            }
        };
        if let (Some(t0), Some(hp)) = (host_t0, self.host_profile.as_mut()) {
            let d = t0.elapsed();
            hp.record(name, d);
            if let Some(operands) = word_ops {
                let at_ns = hp.since_start(t0);
                hp.record_word(crate::stats::HostWord {
                    nc,
                    engine: engine.profiler_name(),
                    pc,
                    name,
                    ns: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                    at_ns,
                    operands,
                });
            }
        }
        let mut extra = Ps::ZERO;
        if self.hooks.0.is_some() {
            let site = self.site(nc, Some(engine), pc, opcode);
            extra = self
                .call_hook(site, |h, c| h.after_execute(c, &ci))
                .unwrap_or(Ps::ZERO);
            // The hook may have stopped the engine (a hang, a posted error).
            if matches!(
                self.cores[nc].engines[e].status,
                EngStatus::Hung | EngStatus::Faulted
            ) {
                return;
            }
        }
        self.stats.instructions += 1;
        let mhz = self.profile.cost.engine_mhz[e];
        let dur = Ps::from_cycles(cycles, mhz) + extra;
        let mut update = sync.update;
        // Silicon signals a word's completion (its semaphore update) after its latency, which
        // for a MATMUL is longer than the interval before PE takes the next word.
        if let (Some(lat), Some(u)) = (latency, update) {
            if lat > dur {
                update = None;
                let at = self.now + lat;
                self.cores[nc].engines[e].outstanding += 1;
                self.schedule(at, Ev::Update(nc, e, u));
            }
        }
        let notify = (ci.opcode == Opcode::Notify).then(|| ci.u("hint").unwrap_or(0) as u16);
        let opcode_byte = opcode;
        let opcode = ci.opcode;
        if let Some(t) = self.trace.as_mut() {
            t.push(crate::stats::TraceEvent {
                nc,
                track: engine.profiler_name().to_string(),
                name,
                pc,
                start: self.now,
                dur,
                word: Some(ci),
                waits: [sync.wait, ext_wait],
                bytes: 0,
            });
        }
        let st = &mut self.cores[nc].engines[e];
        st.pending = None;
        (st.waited, st.held, st.last_op) = (false, false, Some(opcode));
        let lane = lane.map(|w| (w, opcode_byte));
        st.inflight = Some(Inflight {
            update,
            notify,
            lane,
        });
        st.status = EngStatus::Busy;
        st.scheduled = true;
        let at = self.now + dur;
        self.schedule(at, Ev::Complete(nc, e));
    }

    pub(super) fn engine_complete(&mut self, nc: usize, e: usize) {
        let st = &mut self.cores[nc].engines[e];
        if matches!(st.status, EngStatus::Hung | EngStatus::Faulted) {
            return;
        }
        st.scheduled = false;
        let Some(done) = st.inflight.take() else {
            return;
        };
        let pc = st.pc;
        if let Some((w, opcode)) = done.lane {
            if let Err(f) = self.take_lane_result(nc, w) {
                // The word's fault stops the engine now, before its completion signal; a
                // completion signal it deferred (`Ev::Update`) is dropped with it.
                self.cores[nc].engines[e].status = EngStatus::Faulted;
                self.events
                    .retain(|ev| !matches!(ev, Ev::Update(n, x, _) if *n == nc && *x == e));
                let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
                return self.fault(nc, Some(engine), pc, opcode, f);
            }
        }
        let st = &mut self.cores[nc].engines[e];
        st.status = EngStatus::Idle;
        if let Some(t) = st.branch.take() {
            st.pc = t;
            st.consumed = st.origin + t as usize * WORD;
        } else {
            st.pc += 1;
        }
        if let Some(u) = done.update {
            self.update_sem(nc, Some(e), pc, u);
        }
        if let Some(id) = done.notify {
            use neuron_abi::notify::NotifyKind;
            let ei = e as u8;
            self.post(
                nc,
                super::NQ_NOTIFY,
                ei,
                NotifyKind::Notify,
                ei,
                id as u32,
                pc,
            );
        }
        let st = &mut self.cores[nc].engines[e];
        if !st.scheduled {
            st.scheduled = true;
            let now = self.now;
            self.schedule(now, Ev::Step(nc, e));
        }
    }

    /// Take a lane word's result: its PE state for the cost model, its multiply-adds, or its
    /// fault.
    fn take_lane_result(&mut self, nc: usize, w: super::lane::LaneWord) -> Result<(), OpFault> {
        let out = self.cores[nc].lane.take(w.id);
        if w.pe_word {
            self.cores[nc].pe_timing = out.pe;
        }
        let r = out.result?;
        match r {
            crate::cayman_exec::Exec::Dma(_) => {
                return Err(OpFault::bad("internal error: a DMA from a lane word"));
            }
            // The cost charged at issue must be the one the word's result gives.
            crate::cayman_exec::Exec::Done { elems, .. } => {
                debug_assert!(w.elems.is_none_or(|k| k == elems), "lane word elems");
            }
        }
        self.account(&r, w.src_dtype);
        Ok(())
    }

    /// The pc of engine `e` of core `nc` (of the word waiting to issue, when it waits).
    pub fn engine_pc(&self, nc: usize, e: Engine) -> Option<u32> {
        Some(self.cores.get(nc)?.engines.get(e.index())?.pc)
    }

    /// Whether some engine waits on a semaphore or event (so host writes may unblock it).
    pub fn waiting(&self) -> bool {
        self.cores
            .iter()
            .any(|c| c.engines.iter().any(|e| e.status == EngStatus::Blocked))
    }

    /// Stop an engine for good (a hook's engine hang).
    pub(crate) fn hang_engine(&mut self, nc: usize, e: Engine) {
        if let Some(st) = self
            .cores
            .get_mut(nc)
            .and_then(|c| c.engines.get_mut(e.index()))
        {
            st.status = EngStatus::Hung;
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(crate) fn word(hex: &str) -> [u8; WORD] {
        let v: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        v.try_into().expect("64 bytes")
    }

    /// Bytes of the retired project test encoding (0xE0-0xE9) are not trn2 words: the engine
    /// faults on them like on any unknown opcode.
    #[test]
    fn project_test_encoding_is_refused() {
        let mut dev = Device::new(crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let mut w = [0u8; WORD];
        w[0] = 0xE9; // the old END
        w[1] = 0x10;
        let port = dev.instr_port(0, Engine::Pool);
        dev.write(port, &w).expect("port");
        dev.run(100);
        let f = dev.faults().first().expect("fault");
        assert_eq!((f.engine, f.opcode), (Some(Engine::Pool), 0xE9));
        assert!(f.detail.contains("cannot decode"), "{}", f.detail);
    }
}
