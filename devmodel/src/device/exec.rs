//! The trn2 executor glue: running one issued word. Control words (WRITE, TENSOR_LOAD,
//! COMPARE_BRANCH, EVENT_SEMAPHORE_RANGE_CLEAR, NOTIFY) act on the device here; data-path
//! words run in `cayman_exec` on the core's memories; DMA_DIRECT2D goes to `dma`. Also the
//! cost of each word (the table, or its calibrated class).

use super::decode::Facts;
use super::{Device, MAX_PENDING_INSTR_BYTES};
use crate::fault::{FaultKind, OpFault};
use crate::time::Ps;
use neuron_isa::cayman::{CaymanInstr, Opcode, WORD};
use neuron_isa::Engine;
use std::sync::Arc;

/// Whether a Pool word is GpSimd work (runs on the microcode: compute, and the DMA the
/// GpSimd cores generate, software DGE) rather than the sequencer's own ordering words.
fn needs_ucode(op: Opcode) -> bool {
    !crate::cayman_exec::is_ordering(op)
}

/// What issuing a word gave: its cost in engine cycles, the time from issue to its
/// completion signal (a calibrated class), and the lane word whose result is pending.
pub(super) type Issued = (u64, Option<Ps>, Option<super::lane::LaneWord>);

impl Device {
    /// Run one real trn2 word (or send it to its core's lane); returns its cost in engine
    /// cycles (issue overhead included) and, for a calibrated class, the time from its issue
    /// to its completion signal.
    pub(super) fn execute_real(
        &mut self,
        nc: usize,
        e: usize,
        pc: u32,
        ci: &Arc<CaymanInstr>,
        facts: &Facts,
    ) -> Result<Issued, OpFault> {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        if ci.opcode == Opcode::Ldweights {
            self.cores[nc].pass_pair_possible = facts.src_dtype == Some(neuron_isa::Dtype::F32)
                && matches!(ci.u("fp32_mode"), Some(1 | 2));
        }
        let waited = self.cores[nc].engines[e].waited;
        let (cycles, latency, job) = self.execute_word(nc, e, pc, ci, facts)?;
        // A DVE/ACT compute word pays the wake-up (`calib::TRN2_WAKE`): on the engine when it
        // blocked on its wait, in its completion either way (`calib::with_wake`).
        let cost = &self.profile.cost;
        let Some(w) = crate::calib::wake(&cost.wake, engine, ci.opcode) else {
            return Ok((cycles, latency, job));
        };
        let mhz = cost.engine_mhz[e] as u64;
        let (c, l) = crate::calib::with_wake(w, waited, cycles, mhz, latency);
        Ok((c, l, job))
    }

    /// Count a finished data-path word's multiply-adds and on-chip operand bytes.
    pub(super) fn account(&mut self, r: &crate::cayman_exec::Exec, dt: Option<neuron_isa::Dtype>) {
        if let crate::cayman_exec::Exec::Done {
            sgemm_macs,
            amx_macs,
            dot_macs,
            math_macs,
            onchip_bytes,
            ..
        } = *r
        {
            self.stats.onchip_bytes += onchip_bytes;
            self.stats.sgemm_macs += sgemm_macs;
            self.stats.amx_macs += amx_macs;
            self.stats.dot_macs += dot_macs;
            if let (1.., Some(dt)) = (math_macs, dt) {
                self.stats.math_macs[dt as usize & 15] += math_macs;
            }
        }
    }

    /// Whether data-path words go to the lanes: not while hooks watch each word's effects
    /// (they run inline, at issue, as before).
    fn lanes_on(&self) -> bool {
        self.hooks.0.is_none() && !self.watch.any()
    }

    /// Whether core `nc`'s next lane word goes to its thread (`lane::ThreadMode`): in Auto,
    /// while another core has words with data in flight. Never while host time is measured
    /// per word.
    fn lane_thread_for(&self, nc: usize) -> bool {
        if self.host_profile.is_some() {
            return false;
        }
        match self.threads {
            super::ThreadMode::Off => false,
            super::ThreadMode::Always => true,
            super::ThreadMode::Auto => self.cores[..nc].iter().any(|c| c.lane.working()),
        }
    }

    /// Whether core `nc`'s next lane word that stays on the device thread is deferred to
    /// when its result is taken (`LaneSlot::defer`): in Auto, while a higher-numbered core
    /// that has had data-path work (`Core::has_worked`) runs with its lane on its own
    /// thread, so the deferred word runs beside that thread's words; never while host time
    /// is measured per word. (Deferring for a core that never works, an LNC=2 kernel's idle
    /// second core waiting at a barrier, or for one whose words all stay on the device
    /// thread, too small to be worth a thread of their own (`lane::worth_a_thread`), gains
    /// nothing and only moves every word from its issue to its completion.)
    fn defer_for(&self, nc: usize) -> bool {
        self.threads == super::ThreadMode::Auto
            && self.host_profile.is_none()
            && self.cores[nc + 1..].iter().any(|c| {
                c.has_worked
                    && c.lane.is_away()
                    && c.engines
                        .iter()
                        .any(|s| s.status != super::engine::EngStatus::Idle)
            })
    }

    /// [`Self::execute_real`] before the wake-up.
    fn execute_word(
        &mut self,
        nc: usize,
        e: usize,
        pc: u32,
        ci: &Arc<CaymanInstr>,
        facts: &Facts,
    ) -> Result<Issued, OpFault> {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        // The weights a MATMUL streams against were loaded by the LDWEIGHTS before it; only
        // the first MATMUL after it shares the pair's calibrated interval with it.
        let pe = self.cores[nc].pe_timing;
        // Elements streamed per partition, for the uncalibrated table.
        let (mut peer, mut local_load) = (false, false);
        let streamed = match ci.opcode {
            Opcode::Write => {
                peer = self.exec_write(nc, engine, pc, ci)?;
                0
            }
            Opcode::TensorLoad => {
                // Read from a core's own window (SBUF) rather than device memory: its cost
                // differs (`calib::TENSOR_LOAD_LOCAL`).
                local_load = self.profile.tpb_of(ci.u("addr").unwrap_or(0)).is_some();
                self.exec_tensor_load(nc, engine, pc, ci).map(|_| 0)?
            }
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
                // GpSimd work runs on the core's microcode: only a known image runs it.
                if engine == Engine::Pool && needs_ucode(ci.opcode) {
                    core.ucode.check().map_err(|detail| OpFault {
                        kind: FaultKind::GpsimdException,
                        detail,
                    })?;
                }
                // A word whose cost is known before it runs goes to the lane; its completion
                // takes the result (`lane`).
                if self.lanes_on() && super::lane::lane_opcode(ci.opcode) {
                    let known = facts.static_elems;
                    if let Some((c, l)) =
                        self.word_cost(e, ci, facts.features, known, false, false, pe)
                    {
                        // Ordering words stream nothing: they do not keep a core `working`,
                        // and they go to the lane's thread only behind words already there
                        // (a core holding only ordering words, e.g. an LNC=2 kernel's idle
                        // second core, would otherwise start a thread that spins beside the
                        // busy ones); in Auto, nor do words too small to be worth handing
                        // over (`lane::worth_a_thread`).
                        let working = known != Some(0);
                        self.cores[nc].has_worked |= working;
                        let worth = || {
                            self.threads == super::ThreadMode::Always
                                || super::lane::worth_a_thread(ci.opcode, facts.features.0, pe.cols)
                        };
                        let threaded = self.lane_thread_for(nc)
                            && (self.cores[nc].lane.is_away() || (working && worth()));
                        let defer = self.defer_for(nc);
                        let core = &mut self.cores[nc];
                        // An ordering word has no data-path effect (`cayman_exec::execute`:
                        // nothing read or written, a deferred pass pair kept): with the lane
                        // at home and nothing deferred, running it there and taking its
                        // empty result at completion would only be bookkeeping.
                        if crate::cayman_exec::is_ordering(ci.opcode)
                            && !threaded
                            && !defer
                            && core.lane.at_rest()
                        {
                            return Ok((c, l, None));
                        }
                        let regs = &mut core.engines[e].regs;
                        let id = if threaded {
                            self.stats.lane_thread_words += 1;
                            core.lane.send(ci, regs, working)
                        } else if defer {
                            self.stats.deferred_words += 1;
                            core.lane.defer(ci, regs, working)
                        } else {
                            core.lane.run_inline(ci, regs, working)
                        };
                        let src_dtype = facts.src_dtype;
                        let pe_word = super::lane::sets_pe_timing(ci.opcode);
                        let w = super::lane::LaneWord {
                            id,
                            src_dtype,
                            pe_word,
                            elems: known,
                        };
                        return Ok((c, l, Some(w)));
                    }
                }
                let lanes_on = self.lanes_on();
                let core = &mut self.cores[nc];
                // A DMA_DIRECT2D reads only its word and registers, and a pending pass pair
                // (which it would settle first) is impossible after a non-fp32-pass
                // LDWEIGHTS: decoded here, the core's data path runs on undisturbed.
                let out =
                    if ci.opcode == Opcode::DmaDirect2d && lanes_on && !core.pass_pair_possible {
                        super::lane::Outcome {
                            result: crate::cayman_exec::dma2d_of(ci, &core.engines[e].regs)
                                .map(crate::cayman_exec::Exec::Dma),
                            pe: core.pe_timing,
                        }
                    } else {
                        core.lane.get().run(ci, &mut core.engines[e].regs)
                    };
                if super::lane::sets_pe_timing(ci.opcode) {
                    core.pe_timing = out.pe;
                }
                let r = out.result?;
                self.account(&r, facts.src_dtype);
                match r {
                    crate::cayman_exec::Exec::Done { elems, .. } => {
                        // The cost a lane word is charged before it runs must be this one.
                        debug_assert!(
                            facts.static_elems.is_none_or(|k| k == elems),
                            "{}: static elems {:?} vs {elems}",
                            ci.opcode.name(),
                            facts.static_elems
                        );
                        elems
                    }
                    crate::cayman_exec::Exec::Dma(d) => {
                        // A software-DGE DMA starts moving the DGE's latency after GpSimd
                        // took it (`docs/timing.md`, "GpSimd's descriptor generation").
                        let lead = self.swdge_lead(engine);
                        let (end, bytes) = self.dma2d(nc, &d, lead)?;
                        if let Some(t) = self.trace.as_mut() {
                            t.mark(crate::stats::TraceMark::Dma2d {
                                nc,
                                engine: e,
                                pc,
                                start: self.now + lead,
                                end,
                                bytes,
                                semaphore: d.semaphore,
                                increment: d.increment,
                            });
                        }
                        0
                    }
                }
            }
        };
        let cost = self
            .word_cost(e, ci, facts.features, Some(streamed), peer, local_load, pe)
            .unwrap_or((self.profile.cost.instr_overhead_cycles, None));
        Ok((cost.0, cost.1, None))
    }

    /// A word's cost in engine cycles and its completion latency, from the cost table or its
    /// calibrated class; `None` when it needs the word's streamed elements and `streamed`
    /// does not give them (the word must run first). `features`: the word's
    /// `calib::word_features`; `pe`: the PE state before the word.
    #[allow(clippy::too_many_arguments)]
    fn word_cost(
        &self,
        e: usize,
        ci: &CaymanInstr,
        features: (u64, bool),
        streamed: Option<u64>,
        peer: bool,
        local_load: bool,
        pe: super::lane::PeTiming,
    ) -> Option<(u64, Option<Ps>)> {
        let engine = Engine::from_index(e).unwrap_or(Engine::Sp);
        let (transpose, ldw_cols, fresh) = (pe.transpose, pe.cols, pe.fresh);
        let cost = &self.profile.cost;
        let stream = cost.stream_elems_per_cycle.max(1);
        let table = streamed.map(|s| cost.instr_overhead_cycles + s / stream);
        if cost.real.is_empty() {
            return table.map(|t| (t, None));
        }
        let mhz = cost.engine_mhz[engine.index()] as u64;
        if let (true, Some(m)) = (peer, cost.mech) {
            return Some((m.peer_write.whole_cycles(mhz), None));
        }
        let (elems, wide) = features;
        if let (true, Some(_)) = (local_load, cost.mech) {
            let p = Ps(crate::calib::TENSOR_LOAD_LOCAL.0.saturating_mul(elems));
            return Some((p.whole_cycles(mhz), None));
        }
        let register = matches!(ci.opcode, Opcode::RegisterAlu | Opcode::RegisterMove);
        if let (true, Engine::Pool, Some(_)) = (register, engine, cost.mech) {
            return Some((crate::calib::REGISTER_INTERVAL.whole_cycles(mhz), None));
        }
        // A calibrated class replaces the table's charge (`calib.rs`) with the word's whole
        // fitted interval. A MATMUL's interval covers the LDWEIGHTS before it, which was
        // already charged the table's cost.
        let is_mm = ci.opcode == Opcode::Matmul;
        // A DVE/ACT compute word's service time is its interval (`calib::TRN2_SERVICE`).
        if let Some(s) = crate::calib::service(&cost.service, engine, ci.opcode, features) {
            let lat = crate::calib::lookup(&cost.real, engine, ci.opcode, wide, false)
                .map(|c| c.latency(elems))
                .filter(|l| *l > s);
            return Some((s.whole_cycles(mhz), lat));
        }
        let Some(c) = crate::calib::lookup(&cost.real, engine, ci.opcode, wide, is_mm && transpose)
        else {
            return table.map(|t| (t, None));
        };
        // The LDWEIGHTS before a fresh MATMUL was charged this much of the pair's interval.
        let ldw = if is_mm && fresh {
            cost.instr_overhead_cycles + ldw_cols / stream
        } else {
            0
        };
        // An all-zero interval: the class is calibrated for its completion latency only and
        // keeps the table's interval.
        let (interval, cycles) = if c.fixed == Ps::ZERO && c.per_elem_fs == 0 {
            let table = table?;
            (Ps::from_cycles(table, mhz as u32), table)
        } else {
            let i = if is_mm {
                crate::calib::matmul_interval(c, elems)
            } else {
                c.cost(elems)
            };
            (i, i.whole_cycles(mhz).saturating_sub(ldw))
        };
        let lat = c.latency(elems);
        // A software-DGE DMA_DIRECT2D (GpSimd): GpSimd generates its descriptors, which
        // holds the engine the class's fitted interval (silicon's back-to-back spacing); the
        // transfer starts later (`swdge_lead`). `docs/timing.md`, "GpSimd's descriptor
        // generation".
        let sw = crate::calib::queue_kind(engine, true) == crate::calib::QueueKind::SoftwareDge;
        if ci.opcode == Opcode::DmaDirect2d && sw && cost.mech.is_some() {
            return Some((interval.whole_cycles(mhz), None));
        }
        // Only a latency longer than the fitted interval defers the completion signal (the
        // comparison is on the fitted values, before cycle rounding).
        let latency = (lat > interval).then(|| {
            Ps(lat
                .0
                .saturating_sub(ldw.saturating_mul(1_000_000) / mhz.max(1)))
        });
        Some((cycles, latency))
    }

    /// The calibrated wait before engine `e` issues its pending word, whose waits hold
    /// (`calib::Mechanisms`): the start hand-off when an event wait released it. Served once.
    pub(super) fn pre_issue_delay(
        &mut self,
        nc: usize,
        e: usize,
        engine: Engine,
        sync: &neuron_isa::Sync,
    ) -> Option<Ps> {
        let m = self.profile.cost.mech?;
        let st = &self.cores[nc].engines[e];
        if st.held {
            return None;
        }
        let released = st.waited
            && sync
                .wait
                .is_some_and(|w| w.cond == neuron_isa::WaitCond::EventSetThenClear);
        if released {
            let kind = self.queue_kind_of(nc, e, engine);
            return Some(m.handoff[kind.index()]);
        }
        None
    }

    /// How long after GpSimd takes a software-DGE DMA_DIRECT2D its transfer starts
    /// (`calib::Mechanisms::swdge_startup`: the descriptor generation, which also holds the
    /// engine, then the hand-off to the rings); zero for the other engines' DMAs and
    /// uncalibrated profiles. Paid by every such DMA: the kgm NTFFs' GpSimd marks show it
    /// whether or not an earlier DMA is in flight.
    fn swdge_lead(&self, engine: Engine) -> Ps {
        let cost = &self.profile.cost;
        let sw = crate::calib::queue_kind(engine, true) == crate::calib::QueueKind::SoftwareDge;
        match cost.mech {
            Some(m) if sw && !cost.real.is_empty() => m.swdge_startup,
            _ => Ps::ZERO,
        }
    }

    /// The DMA queue kind engine `e` owns, read off its program: whether it holds
    /// DMA_DIRECT2D words (`calib::queue_kind`). Cached until more words arrive.
    fn queue_kind_of(&mut self, nc: usize, e: usize, engine: Engine) -> crate::calib::QueueKind {
        let st = &mut self.cores[nc].engines[e];
        match st.kind {
            Some((len, k)) if len == st.ibuf.len() => k,
            _ => {
                let byte = Opcode::DmaDirect2d.byte(neuron_isa::cayman::Namespace::Loaded);
                let from = st.origin.min(st.ibuf.len());
                let has = st.ibuf[from..]
                    .chunks_exact(WORD)
                    .any(|w| Some(w[0]) == byte);
                let k = crate::calib::queue_kind(engine, has);
                st.kind = Some((st.ibuf.len(), k));
                k
            }
        }
    }

    /// WRITE: up to two immediate 32-bit stores to device addresses (a semaphore register of
    /// this or another core, an event register, memory). The stores happen at issue. Returns
    /// whether a store went to another core's window (its cost differs).
    fn exec_write(
        &mut self,
        nc: usize,
        engine: Engine,
        pc: u32,
        ci: &CaymanInstr,
    ) -> Result<bool, OpFault> {
        let site = |d: &Device| d.site(nc, Some(engine), pc, ci.opcode_byte);
        let mut peer = false;
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
            if let Some((eng, q, rx)) = self.dma_doorbell(dst) {
                let (t, r) = if rx { (0, data) } else { (data, 0) };
                self.dma_queue_start(eng, q, t, r).map_err(|e| OpFault {
                    kind: FaultKind::DmaAbort,
                    detail: format!(
                        "WRITE slot {k}: doorbell of DMA engine {eng} queue {q}: {e:?}"
                    ),
                })?;
                continue;
            }
            let mut bytes = data.to_le_bytes();
            self.hooked_write(dst, &mut bytes[..size as usize], site)
                .map_err(|err| OpFault {
                    kind: FaultKind::OutOfBounds,
                    detail: format!("WRITE slot {k}: {err}"),
                })?;
            peer |= self.profile.tpb_of(dst).is_some_and(|(c, _)| c != nc);
        }
        Ok(peer)
    }

    /// TENSOR_LOAD: `num0 x num1` 32-bit values (`step0` elements apart) from a device
    /// address into the engine's registers named by the word's `regs` bytes.
    fn exec_tensor_load(
        &mut self,
        nc: usize,
        engine: Engine,
        pc: u32,
        ci: &CaymanInstr,
    ) -> Result<(), OpFault> {
        let site = |d: &Device| d.site(nc, Some(engine), pc, ci.opcode_byte);
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
            self.hooked_read(at, &mut b, site).map_err(|err| OpFault {
                kind: FaultKind::OutOfBounds,
                detail: format!("TENSOR_LOAD: {err}"),
            })?;
            self.cores[nc].engines[engine.index()].regs[*r as usize] = u32::from_le_bytes(b);
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
        let max_words = (MAX_PENDING_INSTR_BYTES / WORD) as i64;
        let target = pc as i64 + label / 64;
        if label % 64 != 0 || target < 0 || target >= max_words {
            return Err(OpFault::bad(format!(
                "COMPARE_BRANCH label {label}: target pc {target} is outside the program"
            )));
        }
        st.branch = Some(target as u32);
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::arch::{tpb, ArchProfile};

    /// Feed `words` to engine `e` of core `nc` and run the device until it is quiet (or
    /// `budget` events ran).
    pub(crate) fn run_words(
        dev: &mut Device,
        nc: usize,
        e: Engine,
        words: &[[u8; 64]],
        budget: usize,
    ) {
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

    /// Ordering words (NOP, DRAIN, SET_ORDERING_MODE, EVENT_SEMAPHORE) have no data-path
    /// effect: with the lane at home and nothing deferred they do not go through it (no id,
    /// no result to take at completion); they still issue, complete and update semaphores.
    #[test]
    fn ordering_words_bypass_a_resting_lane() {
        use neuron_isa::cayman::build as b;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let words = [
            b::set_ordering(true),
            b::nop(neuron_isa::cayman::Header::default()),
            b::drain(0),
            b::event_semaphore((0, 0, 0), 0x15, 7, 1),
            b::notify(2),
        ];
        run_words(&mut dev, 0, Engine::Act, &words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        assert_eq!(dev.cores[0].engines[1].pc, 5, "every word completed");
        assert_eq!(dev.regs(0).expect("core 0").sem(7), 1, "the update landed");
        assert_eq!(
            dev.cores[0].lane.counts(),
            (0, 0),
            "nothing went to the lane"
        );
        assert_eq!(dev.stats().instructions, 5);
        // Again on another engine, later in device time.
        let t1 = dev.now;
        run_words(&mut dev, 0, Engine::Sp, &words[..3], 10_000);
        assert!(dev.now > t1);
        assert_eq!(dev.cores[0].lane.counts(), (0, 0));
    }

    /// Host nanoseconds per control word through the event loop, best of 400 runs of 1,000
    /// words (a probe, not a test: `cargo test --release -p neuron-devmodel --lib
    /// control_words_host_ns -- --ignored --nocapture`). Each run writes its words at new
    /// positions, so every word is also looked up in the decode cache once.
    #[test]
    #[ignore]
    fn control_words_host_ns() {
        use neuron_isa::cayman::build as b;
        for (name, w) in [
            ("SET_ORDERING_MODE", b::set_ordering(true)),
            ("DRAIN", b::drain(0)),
            ("NOP", b::nop(neuron_isa::cayman::Header::default())),
            ("EVENT_SEMAPHORE_RANGE_CLEAR", b::range_clear(3, 10)),
        ] {
            let words = vec![w; 1000];
            let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
            let mut best = u128::MAX;
            for i in 0..400 {
                // An instruction port holds a bounded stream: a fresh device now and then.
                if i % 40 == 0 {
                    dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
                }
                let t = std::time::Instant::now();
                run_words(&mut dev, 0, Engine::Act, &words, 1_000_000);
                best = best.min(t.elapsed().as_nanos());
            }
            assert!(dev.faults().is_empty(), "{:?}", dev.faults());
            eprintln!("{name}: {:.1} ns a word", best as f64 / 1000.0);
        }
    }

    /// A program that loops runs its words again from their decodings by position
    /// (`Sequencer::decoded`): the loop's second pass reads the value its first pass
    /// stored, so it leaves the loop, and each pass's WRITE lands once.
    #[test]
    fn a_loop_runs_its_words_again_from_their_decodings() {
        use neuron_isa::cayman::build as b;
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        dev.write(hbm, &[0; 4]).expect("hbm");
        let peer_inc1 = dev_sem_page(&dev, 1) + 0x1800 + 4;
        let words = [
            b::tensor_load(&[0], hbm, 1), // $R[0] = the flag
            b::write(&[(peer_inc1, 1)]),  // core 1's $S[1] += 1
            b::write(&[(hbm, 1)]),        // the flag set
            b::branch_eq(0, -3),          // $R[0] == 0: again from pc 0
            b::notify(2),
        ];
        run_words(&mut dev, 0, Engine::Pe, &words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        assert_eq!(dev.regs(1).expect("core 1").sem(1), 2, "two passes");
        let st = &dev.cores[0].engines[0];
        assert_eq!((st.regs[0], st.pc), (1, 5));
        assert_eq!(st.decoded.len(), 5, "every word decoded once, by position");
        assert!(st.decoded.iter().all(Option::is_some));
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

#[cfg(test)]
mod timing_tests {
    use super::*;
    use crate::arch::ArchProfile;
    use crate::calib::{QueueKind, TRN2_MECH};
    use neuron_isa::cayman::build as b;
    use neuron_isa::cayman::Header;

    fn trn2() -> Device {
        Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2))
    }

    fn span(dev: &mut Device, track: &str, pc: u32) -> (Ps, Ps) {
        dev.take_trace()
            .iter()
            .find(|t| t.pc == pc && t.nc == 0 && t.track == track)
            .map(|t| (t.start, t.dur))
            .unwrap_or_else(|| panic!("{track} pc {pc} not traced"))
    }

    /// Tensor releases two engines with events (the runtime's loop head): each takes its
    /// next word the calibrated hand-off after the event, by the DMA queue kind its program
    /// shows (Sync's holds a DMA_DIRECT2D word: a hardware-DGE queue; Scalar's none).
    #[test]
    fn start_hand_off_depends_on_the_queue_kind() {
        let wait = |k: u8| {
            b::nop(Header {
                wait_cond: 7,
                wait_index: k,
                ..Header::default()
            })
        };
        let set = |k: u8| {
            b::nop(Header {
                update_op: 0x11,
                update_index: k,
                ..Header::default()
            })
        };
        // A DMA_DIRECT2D word Sync never reaches (it blocks on $S[9] first).
        let mut dma = [0u8; WORD];
        dma[0] = Opcode::DmaDirect2d
            .byte(neuron_isa::cayman::Namespace::Loaded)
            .expect("loaded DMA opcode");
        let never = b::event_semaphore((9, 1, 5), 0x13, 9, 1);
        let mut dev = trn2();
        dev.set_tracing(true);
        for (e, words) in [
            (Engine::Act, vec![wait(0), b::notify(2)]),
            (Engine::Sp, vec![wait(3), b::notify(2), never, dma]),
        ] {
            let port = dev.instr_port(0, e);
            dev.write(port, &words.concat()).expect("port");
        }
        dev.run(1000);
        let port = dev.instr_port(0, Engine::Pe);
        dev.write(port, &[set(0), set(3)].concat()).expect("port");
        dev.run(10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        let trace = dev.take_trace();
        let at = |track: &str, pc: u32| {
            trace
                .iter()
                .find(|t| t.pc == pc && t.track == track)
                .map(|t| (t.start, t.dur))
                .unwrap_or_else(|| panic!("{track} pc {pc}"))
        };
        let released = |pc| {
            let (s, d) = at("Tensor", pc);
            s + d
        };
        let h = TRN2_MECH.handoff;
        assert_eq!(at("Scalar", 0).0, released(0) + h[QueueKind::None.index()]);
        assert_eq!(
            at("Sync", 0).0,
            released(1) + h[QueueKind::HardwareDge.index()]
        );
        // A second event wait that did not block pays nothing.
        assert_eq!(at("Scalar", 1).0, at("Scalar", 0).0 + at("Scalar", 0).1);
    }

    /// The LNC=2 handshake WRITE (a store into the peer core's window) costs the calibrated
    /// interval; a WRITE to this core's own registers keeps its class.
    #[test]
    fn a_write_to_the_peer_core_costs_the_handshake_interval() {
        let mut dev = trn2();
        dev.set_tracing(true);
        let page = |nc: usize| dev.profile.tpb_base(nc) + crate::arch::tpb::SEMAPHORE_PAGE;
        let (own, peer) = (page(0) + 0x1400 + 4 * 5, page(1) + 0x1800 + 4);
        exec_tests_run(&mut dev, &[b::write(&[(peer, 1)]), b::write(&[(own, 1)])]);
        let mhz = dev.profile.cost.engine_mhz[0];
        let want = |p: Ps| Ps::from_cycles(p.0 * mhz as u64 / 1_000_000, mhz);
        assert_eq!(span(&mut dev, "Tensor", 0).1, want(TRN2_MECH.peer_write));
        let mut d2 = trn2();
        d2.set_tracing(true);
        exec_tests_run(&mut d2, &[b::write(&[(own, 1)])]);
        let local = span(&mut d2, "Tensor", 0).1;
        assert!(local.0 < TRN2_MECH.peer_write.0 / 4, "{local}");
    }

    fn exec_tests_run(dev: &mut Device, words: &[[u8; 64]]) {
        tests::run_words(dev, 0, Engine::Pe, words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
    }

    /// A GpSimd DMA_DIRECT2D of `n` fp32 elements from device memory at `hbm` into SBUF.
    fn pool_dma_word(dev: &Device, hbm: u64, n: u16) -> [u8; WORD] {
        let mut w = [0u8; WORD];
        neuron_isa::cayman::Header {
            len: 0x10,
            ..Default::default()
        }
        .encode(&mut w);
        w[0] = Opcode::DmaDirect2d
            .byte(neuron_isa::cayman::Namespace::Loaded)
            .expect("loaded DMA opcode");
        let sbuf = dev.profile.tpb_base(0) + crate::arch::tpb::SBUF;
        for (off, bytes) in [
            (16, hbm.to_le_bytes().to_vec()),
            (24, 4u32.to_le_bytes().to_vec()),
            (32, [n.to_le_bytes(), 1u16.to_le_bytes()].concat()),
            (36, 4u16.to_le_bytes().to_vec()),
            (40, sbuf.to_le_bytes().to_vec()),
            (48, 4u32.to_le_bytes().to_vec()),
            (56, [n.to_le_bytes(), 1u16.to_le_bytes()].concat()),
            (60, 4u16.to_le_bytes().to_vec()),
        ] {
            w[off..off + bytes.len()].copy_from_slice(&bytes);
        }
        w
    }

    /// GpSimd generates a software-DGE DMA_DIRECT2D's descriptors itself: the word holds the
    /// engine the class's fitted interval (582 ns: kgm-moe_tkg_v6b's GpSimd resumes ~610 ns
    /// after the word before the DMA ended, median of 160), and every such DMA's transfer
    /// starts the DGE's latency (`swdge_startup`, 1.23 µs) after the engine took it, whether
    /// or not an earlier DMA is still moving (the second one here is issued while the first
    /// is in flight). Register words cost the measured interval. Before this, the engine was
    /// freed after ~49 ns and only a DMA finding the DGE idle paid the latency.
    #[test]
    fn software_dge_holds_gpsimd_and_every_transfer_starts_after_the_dge_latency() {
        let mut dev = trn2();
        dev.set_tracing(true);
        let hbm = 0x100_0000u64;
        dev.write(hbm, &[7u8; 256]).expect("hbm");
        let dma = pool_dma_word(&dev, hbm, 16);
        let mut alu = [0u8; WORD];
        alu[0] = Opcode::RegisterAlu
            .byte(neuron_isa::cayman::Namespace::Loaded)
            .expect("loaded REGISTER_ALU opcode");
        let words = [dma, alu, dma];
        tests::run_words(&mut dev, 0, Engine::Pool, &words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        let trace = dev.take_trace();
        let at = |pc: u32| {
            trace
                .iter()
                .find(|t| t.pc == pc && t.nc == 0 && t.track == "GpSimd")
                .map(|t| (t.start, t.dur))
                .unwrap_or_else(|| panic!("GpSimd pc {pc} not traced"))
        };
        let c = crate::calib::lookup(
            crate::calib::TRN2,
            Engine::Pool,
            Opcode::DmaDirect2d,
            false,
            false,
        )
        .expect("Pool DMA_DIRECT2D calibrated");
        let mhz = dev.profile.cost.engine_mhz[Engine::Pool.index()];
        let whole = |p: Ps| Ps::from_cycles(p.whole_cycles(mhz as u64), mhz);
        let ((s0, d0), (s1, d1), (s2, _)) = (at(0), at(1), at(2));
        assert_eq!(d0, whole(c.cost(0)), "the DMA holds GpSimd its interval");
        assert_eq!(s1 - s0, d0, "the register word waits for the descriptors");
        assert_eq!(d1, whole(crate::calib::REGISTER_INTERVAL));
        assert_eq!(s2 - s1, d1);
        let starts: Vec<(Ps, Ps)> = dev
            .take_marks()
            .iter()
            .filter_map(|m| match m {
                crate::stats::TraceMark::Dma2d { start, end, .. } => Some((*start, *end)),
                _ => None,
            })
            .collect();
        let lead = TRN2_MECH.swdge_startup;
        assert_eq!(starts.len(), 2, "{starts:?}");
        assert!(
            starts[0].1 > s2,
            "the first DMA still moves when the second issues"
        );
        assert_eq!(starts[0].0, s0 + lead);
        assert_eq!(starts[1].0, s2 + lead, "no idle-DGE condition");
    }

    /// A TENSOR_LOAD from SBUF (the MoE's expert ids) costs the measured local interval
    /// per register, not the device-memory class (~700 ns for one register).
    #[test]
    fn tensor_load_from_sbuf_costs_the_local_interval() {
        let mut dev = trn2();
        dev.set_tracing(true);
        let sbuf = dev.profile.tpb_base(0) + crate::arch::tpb::SBUF;
        let words = [
            b::tensor_load(&[0], sbuf, 0),
            b::tensor_load(&[1], 0x100_0000, 0),
        ];
        tests::run_words(&mut dev, 0, Engine::Pool, &words, 10_000);
        assert!(dev.faults().is_empty(), "{:?}", dev.faults());
        let trace = dev.take_trace();
        let dur = |pc: u32| {
            trace
                .iter()
                .find(|t| t.pc == pc && t.track == "GpSimd")
                .map(|t| t.dur)
                .unwrap_or_else(|| panic!("pc {pc}"))
        };
        let local = crate::calib::TENSOR_LOAD_LOCAL;
        assert!(dur(0) <= local && dur(0) + Ps(2_000) >= local, "{}", dur(0));
        assert!(dur(1) > Ps(600_000), "device-memory load {}", dur(1));
    }

    /// A TENSOR_LOAD's calibrated cost grows with the registers it loads.
    #[test]
    fn tensor_load_cost_grows_with_registers() {
        let one = CaymanInstr::decode(
            neuron_isa::cayman::Namespace::Loaded,
            &b::tensor_load(&[0], 0x100_0000, 0),
        );
        let two = CaymanInstr::decode(
            neuron_isa::cayman::Namespace::Loaded,
            &b::tensor_load(&[130, 131], 0x100_0000, 1),
        );
        assert_eq!(crate::calib::word_features(&one).0, 1);
        assert_eq!(crate::calib::word_features(&two).0, 2);
        let c = crate::calib::lookup(
            crate::calib::TRN2,
            Engine::Pe,
            Opcode::TensorLoad,
            false,
            false,
        )
        .expect("PE TENSOR_LOAD calibrated");
        assert!(
            c.cost(2) > c.cost(1) + Ps(400_000),
            "{:?}",
            (c.cost(1), c.cost(2))
        );
    }
}
