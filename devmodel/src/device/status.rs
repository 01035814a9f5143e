//! The device-side control plane: a typed, plain-data snapshot of everything a tool or a
//! daemon may want to show (time, engines, registers, queues, memory, counters, faults).

use super::engine::EngStatus;
use super::Device;
use crate::fault::Fault;
use crate::stats::Stats;
use crate::time::Ps;
use neuron_isa::cayman::Opcode;
use neuron_isa::{Engine, SemWait};

/// The whole device at one device time.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceStatus {
    pub now: Ps,
    /// Events pending in the scheduler.
    pub pending_events: usize,
    pub cores: Vec<CoreStatus>,
    /// Every DMA queue that was initialised.
    pub dma: Vec<QueueStatus>,
    pub hbm_resident_bytes: u64,
    /// Host regions registered (their bytes).
    pub host_region_bytes: u64,
    pub stats: Stats,
    pub faults: Vec<Fault>,
    pub hooks_installed: bool,
    /// The hook watches memory accesses (`HookCtx::watch_memory`): data-path operands and
    /// DMA bytes go through it, on slower paths.
    pub watching_memory: bool,
    /// Its watch takes in SBUF and PSUM (`hooks::Watch::on_chip`): every data-path word's
    /// operands go out to it and back.
    pub watching_on_chip: bool,
}

/// One NeuronCore.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreStatus {
    pub nc: usize,
    pub engines: Vec<EngineStatus>,
    /// Semaphore values 0..256 and event values 0..256.
    pub semaphores: Vec<i32>,
    pub events: Vec<u32>,
    pub notify_queues: Vec<NqStatus>,
    pub dge_table: Option<u64>,
}

/// One sequencer.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStatus {
    pub engine: Engine,
    pub state: EngineState,
    /// pc of the word executing or waiting to issue.
    pub pc: u32,
    /// Instruction bytes fetched and not consumed yet.
    pub queued_bytes: usize,
    /// Completion signals still to land (calibrated latencies).
    pub outstanding: u32,
}

/// What an engine is doing.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineState {
    /// Nothing to do (or about to look at its next word).
    Idle,
    /// Executing a word.
    Running,
    /// Waiting to issue the word at its pc.
    Blocked(WaitingOn),
    /// Stopped by a fault with this code (`FaultKind::code`).
    Faulted { code: u32 },
    /// Stopped by a hook (engine hang).
    Hung,
}

/// What a blocked engine waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingOn {
    pub opcode: Option<Opcode>,
    /// The word's semaphore/event waits (header, and an EVENT_SEMAPHORE body's).
    pub waits: Vec<SemWait>,
    /// A DRAIN waiting for the engine's own completion signals.
    pub drain: bool,
}

/// One configured notification queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NqStatus {
    pub nq_type: u8,
    pub engine_index: u8,
    pub base: u64,
    pub entries: u64,
    /// Entries posted since it was configured (the slot of the next is `posted % entries`).
    pub posted: u64,
}

/// One initialised DMA queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStatus {
    pub engine: usize,
    pub queue: usize,
    /// The core the DMA engine belongs to.
    pub nc: usize,
    pub state: super::QueueState,
    /// Descriptor pairs rung and not yet consumed.
    pub pending: u64,
}

impl Device {
    /// A snapshot of the device's state.
    pub fn status(&self) -> DeviceStatus {
        let cores = self
            .cores
            .iter()
            .enumerate()
            .map(|(nc, c)| {
                let engines = c
                    .engines
                    .iter()
                    .enumerate()
                    .map(|(i, st)| EngineStatus {
                        engine: Engine::from_index(i).unwrap_or(Engine::Sp),
                        state: self.engine_state(nc, i),
                        pc: st.pc,
                        queued_bytes: st.ibuf.len().saturating_sub(st.consumed),
                        outstanding: st.outstanding,
                    })
                    .collect();
                let mut nqs: Vec<NqStatus> = c
                    .nqs
                    .iter()
                    .map(|(&(t, e), q)| NqStatus {
                        nq_type: t,
                        engine_index: e,
                        base: q.base,
                        entries: q.entries,
                        posted: q.index,
                    })
                    .collect();
                nqs.sort_by_key(|q| (q.nq_type, q.engine_index));
                CoreStatus {
                    nc,
                    engines,
                    semaphores: (0..=255u8).map(|i| c.regs.sem(i)).collect(),
                    events: (0..=255u8).map(|i| c.regs.event(i)).collect(),
                    notify_queues: nqs,
                    dge_table: c.dge_table,
                }
            })
            .collect();
        let mut dma = Vec::new();
        for (eng, qs) in self.dma.iter().enumerate() {
            for (q, dq) in qs.iter().enumerate().filter(|(_, d)| d.st.enabled) {
                let st = dq.st;
                dma.push(QueueStatus {
                    engine: eng,
                    queue: q,
                    nc: self.dma_nc(eng),
                    state: st,
                    pending: st.tx_tail.min(st.rx_tail).saturating_sub(st.head),
                });
            }
        }
        DeviceStatus {
            now: self.now,
            pending_events: self.events.len(),
            cores,
            dma,
            hbm_resident_bytes: self.hbm.resident_bytes(),
            host_region_bytes: self
                .host
                .iter()
                .flatten()
                .map(|(_, r)| r.len() as u64)
                .sum(),
            stats: self.stats,
            faults: self.faults.clone(),
            hooks_installed: self.hooks.0.is_some(),
            watching_memory: self.watch.any(),
            watching_on_chip: self.watch.on_chip,
        }
    }

    fn engine_state(&self, nc: usize, e: usize) -> EngineState {
        let st = &self.cores[nc].engines[e];
        match st.status {
            EngStatus::Idle => EngineState::Idle,
            EngStatus::Busy => EngineState::Running,
            EngStatus::Hung => EngineState::Hung,
            EngStatus::Faulted => EngineState::Faulted {
                code: self
                    .faults
                    .iter()
                    .rev()
                    .find(|f| f.nc == nc && f.engine.map(|x| x.index()) == Some(e))
                    .map_or(0, |f| f.kind.code()),
            },
            EngStatus::Blocked => {
                let p = st.pending.as_ref();
                EngineState::Blocked(WaitingOn {
                    opcode: p.and_then(|p| p.word.as_ref()).map(|w| w.opcode),
                    waits: p
                        .map(|p| {
                            p.sync
                                .wait
                                .iter()
                                .chain(p.facts.ext_wait.iter())
                                .copied()
                                .collect()
                        })
                        .unwrap_or_default(),
                    drain: p.is_some_and(|p| p.drain) && st.outstanding > 0,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ArchProfile;
    use neuron_isa::cayman::build as b;
    use neuron_isa::WaitCond;

    /// A blocked engine names its wait; a running program's registers, queues and counters
    /// show; a fault shows its code.
    #[test]
    fn status_reports_engines_registers_queues_and_faults() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let s = dev.status();
        assert_eq!(s.cores.len(), dev.profile().nc_count);
        assert!(s.cores[0]
            .engines
            .iter()
            .all(|e| e.state == EngineState::Idle && e.pc == 0));
        assert!(s.dma.is_empty() && s.faults.is_empty() && !s.hooks_installed);
        assert!(!s.watching_memory);
        // Pool waits for $S[4] >= 2 then bumps $S[5]; the host raises $S[4] to 1.
        let port = dev.instr_port(0, Engine::Pool);
        dev.write(port, &b::event_semaphore((4, 5, 2), 0x13, 5, 0))
            .expect("port");
        assert!(dev.reg_write(0, 0x1400 + 4 * 4, 1));
        dev.nq_configure(0, 1, 2, 0x1000, 4096);
        dev.dma_queue_init(3, 1, 0x1_0000, 64, 0x2_0000, 64)
            .expect("queue");
        dev.run(100);
        let s = dev.status();
        let pool = &s.cores[0].engines[Engine::Pool.index()];
        let EngineState::Blocked(w) = &pool.state else {
            panic!("{:?}", pool.state)
        };
        assert_eq!(w.opcode, Some(Opcode::EventSemaphore));
        assert_eq!(
            w.waits
                .iter()
                .map(|w| (w.cond, w.index, w.value))
                .collect::<Vec<_>>(),
            [(WaitCond::Ge, 4, 2)]
        );
        assert_eq!(s.cores[0].semaphores[4], 1);
        assert_eq!(
            s.cores[0].notify_queues,
            [NqStatus {
                nq_type: 1,
                engine_index: 2,
                base: 0x1000,
                entries: 256,
                posted: 0
            }]
        );
        assert_eq!((s.dma.len(), s.dma[0].engine, s.dma[0].nc), (1, 3, 0));
        assert_eq!(s.dma[0].pending, 0);
        // Unblock: the word completes, the engine goes idle, the update shows.
        assert!(dev.reg_write(0, 0x1400 + 4 * 4, 2));
        dev.run(100);
        let s = dev.status();
        assert_eq!(s.cores[0].semaphores[5], 1);
        assert_eq!(s.cores[0].engines[Engine::Pool.index()].pc, 1);
        assert_eq!(
            s.cores[0].engines[Engine::Pool.index()].state,
            EngineState::Idle
        );
        assert!(s.stats.instructions >= 1);
        // An undecodable word: Faulted with BadInstruction's code.
        dev.write(port, &[0xFFu8; 64]).expect("port");
        dev.run(100);
        let s = dev.status();
        assert_eq!(
            s.cores[0].engines[Engine::Pool.index()].state,
            EngineState::Faulted {
                code: crate::fault::FaultKind::BadInstruction.code()
            }
        );
        assert_eq!(s.faults.len(), 1);
        assert_eq!(s.now, dev.now());
    }
}
