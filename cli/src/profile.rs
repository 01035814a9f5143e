//! The device model's recorded timeline of an execution as the shared profile records
//! (`neuron_runtime::profile`), for `neuron-emu run --profile-json` and `--trace`: engine words
//! with their operands and waits, DMA transfers, register updates, notifications, each
//! engine's execution span. Semaphores are named from the NEFF's `def.json` queues, so operands
//! and ids read as AWS's profiler prints them.

use neuron_devmodel::{TraceEvent, TraceMark};
use neuron_isa::cayman::render::Names;
use neuron_isa::{Engine, WaitCond};
use neuron_runtime::profile::{Capture, Dma, Instr, Note, RegUpdate, Span};
use std::collections::BTreeMap;

/// Semaphore names per subgraph directory (`sg00`, ...).
pub(crate) type SubgraphNames = BTreeMap<String, Names>;

/// The names a NEFF gives its semaphores, per subgraph; none for a NEFF that does not parse
/// (the profile then shows plain numbers).
pub(crate) fn neff_names(bytes: &[u8]) -> SubgraphNames {
    let mut out = SubgraphNames::new();
    let Ok(neff) = neuron_neff::Neff::parse(bytes) else {
        return out;
    };
    let Ok(kelf) = neff.kelf() else {
        return out;
    };
    for g in &kelf.graphs {
        let Ok(def) = neff.subgraph_def(&g.definition) else {
            continue;
        };
        let names = crate::disasm::def_names(&def);
        out.insert(g.dir().to_string(), names);
    }
    out
}

/// The profiler's id of semaphore `i`: `S[5] (Tensor)` when the NEFF names it, else `5`.
fn sem_id(names: Option<&Names>, i: u8) -> String {
    match names.and_then(|n| n.sems.get(&i)) {
        Some(n) => format!("S[{i}] ({n})"),
        None => i.to_string(),
    }
}

fn engine_of(track: &str) -> Option<Engine> {
    Engine::ALL.into_iter().find(|e| e.profiler_name() == track)
}

/// `"DMA e.q"` (a queue descriptor's track) -> (engine, queue).
fn dma_track(track: &str) -> Option<(u32, u32)> {
    let (e, q) = track.strip_prefix("DMA ")?.split_once('.')?;
    Some((e.parse().ok()?, q.parse().ok()?))
}

fn kind_name(bits: u8) -> String {
    use neuron_abi::notify::NotifyKind;
    match NotifyKind::from_bits(bits) {
        NotifyKind::Notify => "NOTIFY".into(),
        NotifyKind::End => "END".into(),
        NotifyKind::Error => "ERROR".into(),
        NotifyKind::DmaTrace => "DMA_TRACE".into(),
        NotifyKind::Other(v) => format!("KIND_{v}"),
    }
}

/// One capture of device `device` from its recorded spans and marks. `cores`: the model's
/// physical cores in subgraph order (empty: every core seen); `spans`: each engine's
/// execution span (the runtime's), which also gives the window.
pub(crate) fn capture(
    device: u32,
    cores: Vec<u32>,
    spans: &[neuron_runtime::model::EngineSpan],
    events: &[TraceEvent],
    marks: &[TraceMark],
    names: &SubgraphNames,
) -> Capture {
    let sg_names = |nc: usize| {
        let k = cores.iter().position(|c| *c as usize == nc)?;
        names.get(&format!("sg{k:02}"))
    };
    let empty = Names::default();
    let mut c = Capture {
        device,
        window: spans
            .iter()
            .map(|s| s.start_ps)
            .min()
            .zip(spans.iter().map(|s| s.end_ps).max()),
        detail: true,
        spans: spans
            .iter()
            .filter_map(|s| {
                Some(Span {
                    nc: s.nc,
                    engine: Engine::from_index(s.engine)?,
                    start_ps: s.start_ps,
                    end_ps: s.end_ps,
                })
            })
            .collect(),
        ..Capture::default()
    };
    for ev in events {
        let nc = ev.nc as u32;
        if let Some(engine) = engine_of(&ev.track) {
            let waits = ev
                .waits
                .iter()
                .flatten()
                .map(|w| (w.index, w.cond == WaitCond::EventSetThenClear))
                .collect();
            let operands = ev.word.as_ref().map_or_else(String::new, |w| {
                w.operands(sg_names(ev.nc).unwrap_or(&empty))
            });
            c.instrs.push(Instr {
                nc,
                engine,
                pc: ev.pc,
                opcode: ev.name.to_string(),
                operands,
                start_ps: ev.start.0,
                dur_ps: ev.dur.0,
                waits,
            });
        } else if let Some((e, q)) = dma_track(&ev.track) {
            c.dmas.push(Dma {
                nc,
                track: format!("DMA engine {e} queue {q}"),
                dma_engine: e.to_string(),
                dma_queue: q.to_string(),
                subgroup: format!("Q{q}-E{e}"),
                queue_type: "static".into(),
                start_ps: ev.start.0,
                dur_ps: ev.dur.0,
                bytes: ev.bytes,
                semaphore: None,
                issuer: None,
            });
        }
    }
    for m in marks {
        match *m {
            TraceMark::Reg {
                nc,
                at,
                index,
                event,
                value,
            } => c.regs.push(RegUpdate {
                nc: nc as u32,
                at_ps: at.0,
                index,
                event,
                value: value.into(),
                id: sem_id(sg_names(nc), index),
            }),
            TraceMark::Notify {
                nc,
                at,
                engine,
                kind,
                value,
                pc,
            } => c.notes.push(Note {
                nc: nc as u32,
                at_ps: at.0,
                engine: Engine::from_index(engine as usize),
                kind: kind_name(kind),
                value,
                pc,
            }),
            TraceMark::Dma2d {
                nc,
                engine,
                pc,
                start,
                end,
                bytes,
                semaphore,
                ..
            } => {
                let e = Engine::from_index(engine).unwrap_or(Engine::Sp);
                // The software DGE serves GpSimd; the other engines' DMAs go to hardware DGE
                // queues (the profiles' `qGpSimdDynamic` / `qSyncDynamicHW`).
                let queue_type = if e == Engine::Pool {
                    "software_dynamic"
                } else {
                    "hardware_dynamic"
                };
                c.dmas.push(Dma {
                    nc: nc as u32,
                    track: format!("DMA_DIRECT2D from {}", e.profiler_name()),
                    dma_engine: "DGE".into(),
                    dma_queue: e.profiler_name().into(),
                    subgroup: format!("DGE-{}", e.profiler_name()),
                    queue_type: queue_type.into(),
                    start_ps: start.0,
                    dur_ps: end.0.saturating_sub(start.0),
                    bytes,
                    semaphore: Some(sem_id(sg_names(nc), semaphore)),
                    issuer: Some((e, pc)),
                });
            }
        }
    }
    c.cores = cores;
    c
}
