//! The engine JSONs' static DMA blocks (`dma`: queue, id, desc list, semaphore) realised as
//! descriptor rings, one ring per `def.json` DMA queue, and the doorbell WRITEs a DMA_TRIGGER
//! becomes at load (`docs/isa/cayman.md` §1.3, §5.5). Each block is its descriptors' data
//! runs followed by one 4-byte descriptor that adds 1 to the block's semaphore (the DMA
//! engine writes the core's semaphore-increment register), so the program's semaphore wait
//! sees the block complete. The rings are set up through the driver at load; the device
//! program rings them with WRITEs to the queue's doorbell registers (`tpb::DMA_DOORBELL`).

use crate::status::NrtError;
use neuron_abi::consts::{SEMA_PAGE_SEM_INC, SEMA_REG_STRIDE};
use neuron_abi::tpb;
use neuron_abi::udma::{UdmaDesc, DESC_FIRST, DESC_LAST, META_CTRL_COPY};
use neuron_isa::cayman::translate::TriggerWrite;
use neuron_neff::{DmaBlock, DmaDescJson};
use std::collections::BTreeMap;

/// Semaphore increments the value table covers (a block adds its queue's `num_queues`).
pub const SEM_VALUES: u32 = 65;
/// Descriptors one queue may hold (far above the model layers' few dozen).
const MAX_QUEUE_DESCS: usize = 1 << 16;
/// Ring sizes the driver accepts: a multiple of 16, at least 32 (`udma::validate_ring`).
const RING_MULTIPLE: usize = 16;
const RING_MIN: usize = 32;

/// One DMA queue's ring: its descriptors and, per block id, how many of them the block's
/// doorbell releases.
#[derive(Debug, Clone)]
pub struct TriggerQueue {
    pub name: String,
    /// Global DMA engine id (queue 0 of it).
    pub eng: u32,
    pub tx: Vec<UdmaDesc>,
    pub rx: Vec<UdmaDesc>,
    /// Per block id (ascending = the order the program triggers them): descriptors released.
    pub blocks: BTreeMap<u32, u32>,
}

/// Every DMA queue of one subgraph.
#[derive(Debug, Clone, Default)]
pub struct Triggers {
    pub queues: Vec<TriggerQueue>,
    /// The core's TPB window (doorbell registers).
    tpb: u64,
}

/// Where the runtime puts one core's DMA queues and what their descriptors may use.
#[derive(Debug, Clone, Copy)]
pub struct QueuePlace {
    /// The core's TPB window and its first DMA engine (global id) for data queues.
    pub tpb: u64,
    pub first_eng: u32,
    /// Engines available from `first_eng`.
    pub engines: u32,
    /// [`SEM_VALUES`] device words holding u32 0, 1, 2, …: the word at `4·n` is what a
    /// block adding `n` to its semaphore writes; word 0 is also the padding descriptors'
    /// source and destination.
    pub one: u64,
}

fn invalid(what: String) -> NrtError {
    NrtError::invalid(what)
}

/// The contiguous byte runs of one side of a descriptor (sizes and steps in bytes, innermost
/// first; the innermost step must be 1).
fn runs(
    base: u64,
    off: u64,
    sizes: &[u64],
    steps: &[i64],
    what: &str,
) -> Result<Vec<(u64, u64)>, NrtError> {
    let inner = *sizes.first().unwrap_or(&0);
    if inner == 0 || sizes.len() != steps.len() || sizes.len() > 4 || steps[0] != 1 {
        return Err(invalid(format!(
            "{what}: sizes {sizes:?} steps {steps:?}: only contiguous innermost runs are known"
        )));
    }
    let outer: u64 = sizes[1..].iter().map(|s| (*s).max(1)).product();
    if outer as usize > MAX_QUEUE_DESCS {
        return Err(invalid(format!("{what}: {outer} runs")));
    }
    let mut out = Vec::with_capacity(outer as usize);
    for k in 0..outer {
        let (mut rest, mut at) = (k, base as i64 + off as i64);
        for (s, st) in sizes[1..].iter().zip(&steps[1..]) {
            let s = (*s).max(1);
            at += (rest % s) as i64 * st;
            rest /= s;
        }
        out.push((at as u64, inner));
    }
    Ok(out)
}

/// Pair two run lists of equal total length into descriptor pairs of equal lengths.
fn pair(
    mut src: Vec<(u64, u64)>,
    mut dst: Vec<(u64, u64)>,
    out: &mut Vec<(u64, u64, u32)>,
) -> Result<(), String> {
    src.reverse();
    dst.reverse();
    while !src.is_empty() && !dst.is_empty() {
        let (Some(s), Some(d)) = (src.pop(), dst.pop()) else {
            break;
        };
        let n = s.1.min(d.1).min(1 << 16);
        out.push((s.0, d.0, n as u32));
        if s.1 > n {
            src.push((s.0 + n, s.1 - n));
        }
        if d.1 > n {
            dst.push((d.0 + n, d.1 - n));
        }
        if out.len() > MAX_QUEUE_DESCS {
            return Err(format!("more than {MAX_QUEUE_DESCS} descriptors"));
        }
    }
    if !src.is_empty() || !dst.is_empty() {
        return Err("source and destination sizes differ".into());
    }
    Ok(())
}

fn desc_pairs(
    d: &DmaDescJson,
    base_of: &dyn Fn(&str) -> Option<u64>,
    what: &str,
) -> Result<Vec<(u64, u64, u32)>, NrtError> {
    if d.op != "copy" || d.from_dtype != d.to_dtype {
        return Err(invalid(format!(
            "{what}: op '{}' {:?} -> {:?}: only same-dtype copies are known",
            d.op, d.from_dtype, d.to_dtype
        )));
    }
    let var = |n: &str| base_of(n).ok_or_else(|| invalid(format!("{what}: no placed var '{n}'")));
    let src = runs(
        var(&d.from)?,
        d.from_off,
        &d.from_sizes,
        &d.from_steps,
        what,
    )?;
    let dst = runs(var(&d.to)?, d.to_off, &d.to_sizes, &d.to_steps, what)?;
    let mut out = Vec::new();
    pair(src, dst, &mut out).map_err(|e| invalid(format!("{what}: {e}")))?;
    Ok(out)
}

/// The DMA blocks of every engine JSON of subgraph `sg`, by engine JSON name.
pub fn engine_blocks(
    neff: &neuron_neff::Neff,
    sg: &str,
    def: &neuron_neff::SubgraphDef,
) -> Result<Vec<(String, Vec<DmaBlock>)>, NrtError> {
    let mut out = Vec::new();
    for (_, json, _) in def.engine_files() {
        let Some(j) = json else { continue };
        let e = neff
            .shared_engine_json(sg, j)
            .map_err(|e| invalid(format!("{sg}/{j}: {e}")))?;
        if !e.dma.is_empty() {
            out.push((j.trim_end_matches(".json").to_string(), e.dma.clone()));
        }
    }
    Ok(out)
}

impl Triggers {
    /// Plan the rings of one subgraph from its engine JSONs' DMA blocks (`(engine name,
    /// blocks)`); `base_of` gives a var's device address by name.
    pub fn plan(
        sg: &str,
        engines: &[(String, Vec<DmaBlock>)],
        queue_defs: &BTreeMap<String, neuron_neff::DmaQueueDef>,
        base_of: &dyn Fn(&str) -> Option<u64>,
        place: QueuePlace,
    ) -> Result<Self, NrtError> {
        let sem_inc = place.tpb + tpb::SEMAPHORE_PAGE + SEMA_PAGE_SEM_INC;
        let mut by_queue: BTreeMap<String, Vec<(&str, &DmaBlock)>> = BTreeMap::new();
        for (e, blocks) in engines {
            for b in blocks {
                let q = b.queue.clone().ok_or_else(|| {
                    invalid(format!("{sg}/{e}.json DMA block {} names no queue", b.id))
                })?;
                by_queue.entry(q).or_default().push((e, b));
            }
        }
        if by_queue.len() > place.engines as usize {
            return Err(invalid(format!(
                "{sg}: {} DMA queues, this runtime has {} DMA engines for them",
                by_queue.len(),
                place.engines
            )));
        }
        let mut queues = Vec::new();
        for (qi, (name, mut blocks)) in by_queue.into_iter().enumerate() {
            blocks.sort_by_key(|(_, b)| b.id);
            // A block's completion adds the queue's sub-queue count to its semaphore (the
            // programs wait for 16, 32, … on a 16-queue set: kgm-attn_tkg_v6 SP pcs 51, 67).
            let inc = queue_defs.get(&name).map_or(1, |d| d.num_queues.max(1));
            if inc >= SEM_VALUES {
                return Err(invalid(format!("{sg}: DMA queue {name} has {inc} queues")));
            }
            let (mut tx, mut rx) = (Vec::new(), Vec::new());
            let mut counts = BTreeMap::new();
            for (e, b) in blocks {
                let what = format!("{sg}/{e}.json queue {name} block {}", b.id);
                let before = tx.len();
                for d in &b.desc {
                    for (s, t, n) in desc_pairs(d, base_of, &what)? {
                        tx.push(
                            UdmaDesc::tx(s, n, DESC_FIRST | DESC_LAST)
                                .with_meta_ctrl(META_CTRL_COPY),
                        );
                        rx.push(UdmaDesc::rx(t, n, 0));
                    }
                }
                if let Some(sem) = b.semaphore {
                    tx.push(
                        UdmaDesc::tx(place.one + 4 * inc as u64, 4, DESC_FIRST | DESC_LAST)
                            .with_meta_ctrl(META_CTRL_COPY),
                    );
                    rx.push(UdmaDesc::rx(sem_inc + sem as u64 * SEMA_REG_STRIDE, 4, 0));
                }
                if tx.len() > MAX_QUEUE_DESCS {
                    return Err(invalid(format!(
                        "{what}: more than {MAX_QUEUE_DESCS} descriptors"
                    )));
                }
                if counts.insert(b.id, (tx.len() - before) as u32).is_some() {
                    return Err(invalid(format!("{what}: block id used twice")));
                }
            }
            // Pad the ring to a size the driver takes; the last block's doorbell releases the
            // padding too, so every execution starts at ring index 0.
            let ring = tx.len().div_ceil(RING_MULTIPLE).max(1) * RING_MULTIPLE;
            let ring = ring.max(RING_MIN);
            let pad = ring - tx.len();
            for _ in 0..pad {
                tx.push(
                    UdmaDesc::tx(place.one, 4, DESC_FIRST | DESC_LAST)
                        .with_meta_ctrl(META_CTRL_COPY),
                );
                rx.push(UdmaDesc::rx(place.one, 4, 0));
            }
            if let Some(last) = counts.values_mut().next_back() {
                *last += pad as u32;
            }
            queues.push(TriggerQueue {
                name,
                eng: place.first_eng + qi as u32,
                tx,
                rx,
                blocks: counts,
            });
        }
        Ok(Triggers {
            queues,
            tpb: place.tpb,
        })
    }

    /// The two WRITEs that start block `block` of queue `queue`: the TX then the RX doorbell,
    /// each advanced by the block's descriptor count.
    pub fn writes(&self, queue: &str, block: u32) -> Option<[TriggerWrite; 2]> {
        let q = self.queues.iter().find(|q| q.name == queue)?;
        let n = *q.blocks.get(&block)?;
        let local = (q.eng % 16) as u64;
        let db = self.tpb + tpb::DMA_DOORBELL + local * 16 * 8;
        let w = |off: u64| TriggerWrite {
            dst: [db + off, 0],
            data: [n, 0],
            sizes: [4, 0],
        };
        Some([w(0), w(4)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(id: u32, from: &str, sizes: Vec<u64>, steps: Vec<i64>) -> DmaBlock {
        DmaBlock {
            id,
            queue: Some("q0".into()),
            semaphore: Some(24 + id),
            desc: vec![DmaDescJson {
                op: "copy".into(),
                from: from.into(),
                from_off: 0x10,
                from_sizes: sizes,
                from_steps: steps,
                from_dtype: Some("float32".into()),
                to: "out".into(),
                to_off: 0,
                to_sizes: vec![8, 1],
                to_steps: vec![1, 8],
                to_dtype: Some("float32".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn blocks_become_runs_a_semaphore_increment_and_padding() {
        let base = |n: &str| match n {
            "SB" => Some(0x1000_0000),
            "out" => Some(0x2000),
            _ => None,
        };
        let place = QueuePlace {
            tpb: 0x20_0000_0000,
            first_eng: 5,
            engines: 11,
            one: 0x9000,
        };
        let blocks = vec![
            block(1, "SB", vec![4, 2], vec![1, 0x40000]),
            block(0, "SB", vec![8, 1], vec![1, 8]),
        ];
        let mut defs = BTreeMap::new();
        defs.insert(
            "q0".to_string(),
            neuron_neff::DmaQueueDef {
                num_queues: 16,
                ..Default::default()
            },
        );
        let t =
            Triggers::plan("sg00", &[("DVE".into(), blocks)], &defs, &base, place).expect("plan");
        let q = &t.queues[0];
        assert_eq!(q.eng, 5);
        assert_eq!(q.tx.len(), 32, "padded to the smallest ring");
        // Block 0 (sorted first): one 8-byte run + the semaphore; block 1: two 4-byte runs
        // from two partitions into one 8-byte destination + the semaphore; then 27 pads.
        assert_eq!(q.blocks[&0], 2);
        assert_eq!(q.blocks[&1], 3 + 27);
        assert_eq!(q.tx[2].buf_ptr, 0x1000_0010);
        assert_eq!(q.tx[3].buf_ptr, 0x1004_0010);
        assert_eq!((q.rx[2].buf_ptr, q.rx[3].buf_ptr), (0x2000, 0x2004));
        assert_eq!(q.tx[2].len(), 4);
        assert_eq!(q.tx[4].buf_ptr, place.one + 4 * 16, "adds num_queues");
        assert_eq!(
            q.rx[4].buf_ptr,
            place.tpb + tpb::SEMAPHORE_PAGE + SEMA_PAGE_SEM_INC + 25 * SEMA_REG_STRIDE
        );
        let [a, b] = t.writes("q0", 1).expect("writes");
        assert_eq!(a.dst[0], place.tpb + tpb::DMA_DOORBELL + 5 * 128);
        assert_eq!(b.dst[0], a.dst[0] + 4);
        assert_eq!((a.data[0], b.data[0]), (30, 30));
        assert!(t.writes("q0", 2).is_none() && t.writes("q1", 0).is_none());
        // Unknown vars and mismatched sizes are load errors, not panics.
        let bad = vec![block(0, "nowhere", vec![8, 1], vec![1, 8])];
        assert!(Triggers::plan("sg00", &[("DVE".into(), bad)], &defs, &base, place).is_err());
        let bad = vec![block(0, "SB", vec![4, 1], vec![1, 8])];
        assert!(Triggers::plan("sg00", &[("DVE".into(), bad)], &defs, &base, place).is_err());
    }
}
