//! Real (neuronx-cc) NEFFs: placing their variables and translating their engine programs the
//! way libnrt does at load (`docs/isa/cayman.md` §1, §3, §5.5, `cayman::translate`): the
//! pseudo-opcodes are rewritten to their hardware opcodes, every variable-relative DMA address
//! becomes the absolute address of the variable the runtime placed, a register-offset DMA gets
//! its bound REGISTER_MOVE and a DMA_TRIGGER becomes the doorbell WRITEs of its queue
//! (`crate::trigger`).
//!
//! The runtime prologue and epilogue around each program have AWS's shape, slot for slot
//! (`crate::prologue`), so NEFF word `i` sits at the pc AWS's profiler gives it
//! (`neff_base + i`).

use crate::status::NrtError;
use neuron_isa::cayman::render::{neff_base, ProgramFeatures, TriggerQueue};
use neuron_isa::cayman::WORD;
use neuron_isa::cayman::{CaymanInstr, DmaAddr, Namespace, Value};
use neuron_isa::Engine;
use neuron_neff::{Neff, SubgraphDef, VarType};
use std::collections::BTreeMap;

/// Where a loaded word came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WordOrigin {
    /// Inserted by this runtime (prologue/epilogue, `crate::prologue`).
    Runtime,
    /// NEFF word `index` of the engine's `.bin` file.
    Neff { index: usize },
}

/// One engine's program as this runtime loads it.
#[derive(Debug, Clone)]
pub struct LoadedProgram {
    pub subgraph: String,
    pub engine: Engine,
    /// pc of NEFF word 0.
    pub base: u32,
    pub words: Vec<[u8; 64]>,
    pub origins: Vec<WordOrigin>,
}

/// The prologue-length features of one engine program (`cayman::render::neff_base`).
pub fn features(
    neff: &Neff,
    def: &SubgraphDef,
    sg: &str,
    engine: Engine,
    json: Option<&str>,
) -> ProgramFeatures {
    let dge_table = def.var.values().any(|v| v.ty == VarType::DgeTable);
    let ej = json.and_then(|j| neff.shared_engine_json(sg, j).ok());
    ProgramFeatures {
        dge_table,
        act_tables: engine == Engine::Act && ej.as_ref().is_some_and(|j| j.has_activation_tables()),
        trigger_queue: ej.as_ref().and_then(|j| j.owned_queue(def)).map(|q| {
            TriggerQueue::new(
                q.def.map_or(1, |d| d.num_queues),
                q.def.is_some_and(|d| d.ty == "data"),
                q.blocks,
            )
        }),
    }
}

/// The trn2 TPB windows (cores 0..8): DMA operands the compiler wrote as absolute SBUF
/// addresses of the cores it compiled for (0 and 1 for LNC=2).
fn tpb_range() -> (u64, u64) {
    let arch = neuron_abi::arch::Arch::V3Trn2;
    let lo = arch.tpb_sbuf_mmap_offset(0).unwrap_or(0);
    (lo, lo + arch.nc_count() as u64 * neuron_abi::tpb::WINDOW)
}

/// Move a NEFF word's absolute TPB addresses by `tpb_shift` bytes (the model's first core ×
/// the window size), so a model loaded at NC 2 reaches cores 2 and 3. The word stays in the
/// NEFF namespace.
pub fn shift_tpb(word: &[u8; 64], tpb_shift: u64) -> Result<[u8; 64], String> {
    if tpb_shift == 0 {
        return Ok(*word);
    }
    let (tpb_lo, tpb_hi) = tpb_range();
    let mut d = CaymanInstr::decode(Namespace::Neff, word);
    let mut moved_any = false;
    for f in d.fields.iter_mut() {
        if let Value::Addr(DmaAddr::Absolute(v)) = f.value {
            if (tpb_lo..tpb_hi).contains(&v) {
                let moved = v
                    .checked_add(tpb_shift)
                    .filter(|m| *m < tpb_hi)
                    .ok_or_else(|| {
                        format!(
                            "{}: SBUF address 0x{v:x} moved by 0x{tpb_shift:x} leaves the device's cores",
                            f.spec.name
                        )
                    })?;
                f.value = Value::Addr(DmaAddr::Absolute(moved));
                moved_any = true;
            }
        }
    }
    Ok(if moved_any { d.encode() } else { *word })
}

/// Where graph `g`'s programs run: its core's TPB window, the peer core's (its own for a
/// one-core model) and its control block.
#[derive(Debug, Clone, Copy)]
pub struct CorePlace {
    pub tpb: u64,
    pub peer_tpb: u64,
    pub control: u64,
}

/// The size of the variable each DGE table entry names (`cayman::translate`'s bound).
fn table_var_sizes(def: &SubgraphDef) -> Vec<Option<u64>> {
    let by_id = |id: u64| {
        def.var
            .values()
            .find(|v| v.var_id.map(u64::from) == Some(id))
            .and_then(|v| v.size)
    };
    def.var
        .values()
        .find(|v| v.ty == VarType::DgeTable)
        .and_then(|t| t.list.as_ref())
        .map(|l| l.iter().map(|id| by_id(*id)).collect())
        .unwrap_or_default()
}

/// Translate one engine program to its loaded words (`cayman::translate`), checking that its
/// DMA_TRIGGERs start each block of their queue once, in block order (the rings release
/// blocks in that order).
fn translate_body(
    bin: &[u8],
    base: u32,
    tpb_shift: u64,
    var_base: &dyn Fn(u8) -> Option<u64>,
    sizes: &[Option<u64>],
    triggers: &crate::trigger::Triggers,
) -> Result<Vec<neuron_isa::cayman::translate::LoadedWord>, String> {
    use neuron_isa::cayman::translate::{translate_program, LoadEnv};
    let mut shifted = Vec::with_capacity(bin.len());
    for (i, w) in bin.chunks_exact(WORD).enumerate() {
        let word: &[u8; 64] = w.try_into().map_err(|_| "word size".to_string())?;
        shifted.extend_from_slice(
            &shift_tpb(word, tpb_shift).map_err(|e| format!("pc {}: {e}", base as usize + i))?,
        );
    }
    let seen = std::cell::RefCell::new(BTreeMap::<String, Vec<u32>>::new());
    let trigger = |q: &str, b: u32| {
        seen.borrow_mut().entry(q.to_string()).or_default().push(b);
        triggers.writes(q, b)
    };
    let table_var_size = |i: u8| sizes.get(i as usize).copied().flatten();
    let env = LoadEnv {
        var_base,
        table_var_size: &table_var_size,
        trigger: &trigger,
    };
    let words = translate_program(&shifted, &env).map_err(|e| {
        use neuron_isa::cayman::translate::TranslateError as T;
        let pc = |i: usize| base as usize + i;
        match e {
            T::Unknown { index, byte } => format!("pc {}: unknown opcode 0x{byte:02x}", pc(index)),
            T::StrayExt { index } => format!("pc {}: {e}", pc(index)),
            T::Field { index, ref what } => format!("pc {}: {what}", pc(index)),
        }
    })?;
    for (q, ids) in seen.borrow().iter() {
        let want: Vec<u32> = triggers
            .queues
            .iter()
            .find(|t| &t.name == q)
            .map(|t| t.blocks.keys().copied().collect())
            .unwrap_or_default();
        if *ids != want {
            return Err(format!(
                "DMA queue {q}: blocks triggered in the order {ids:?}, this runtime needs {want:?}"
            ));
        }
    }
    Ok(words)
}

/// Build every engine program of every subgraph. `bases[g]` maps var_id to address for graph
/// g; `triggers[g]` are its DMA queues.
pub fn build_programs(
    neff: &Neff,
    graphs: &[(String, std::sync::Arc<SubgraphDef>)],
    bases: &[BTreeMap<u8, u64>],
    places: &[CorePlace],
    triggers: &[crate::trigger::Triggers],
    tpb_shift: u64,
) -> Result<Vec<LoadedProgram>, NrtError> {
    let mut out = Vec::new();
    let none = crate::trigger::Triggers::default();
    for (gi, (sg, def)) in graphs.iter().enumerate() {
        let vb = bases.get(gi).cloned().unwrap_or_default();
        let base_of = move |id: u8| vb.get(&id).copied();
        let sizes = table_var_sizes(def);
        let trig = triggers.get(gi).unwrap_or(&none);
        for (kind, json, instr_file) in def.engine_files() {
            let engine = Engine::from_index(kind as usize).unwrap_or(Engine::Sp);
            let feat = features(neff, def, sg, engine, json);
            let base = neff_base(engine, feat);
            let bin = match instr_file {
                Some(f) => neff
                    .subgraph_file(sg, f)
                    .map_err(|e| NrtError::invalid(e.to_string()))?,
                None => &[],
            };
            if bin.len() % WORD != 0 {
                return Err(NrtError::invalid(format!(
                    "{sg} engine {engine}: instruction file is {} bytes, not a multiple of 64",
                    bin.len()
                )));
            }
            let place = places
                .get(gi)
                .ok_or_else(|| NrtError::invalid(format!("{sg}: no core placed")))?;
            let body = translate_body(bin, base, tpb_shift, &base_of, &sizes, trig)
                .map_err(|e| NrtError::invalid(format!("{sg} engine {engine} {e}")))?;
            // The epilogue's branches count loaded words (a DMA_TRIGGER is two).
            let (pro, epi) = crate::prologue::build(
                engine,
                &crate::prologue::Place {
                    core_index: gi,
                    tpb: place.tpb,
                    peer_tpb: place.peer_tpb,
                    control: place.control,
                    dge: feat.dge_table,
                    act: feat.act_tables,
                    queue: feat.trigger_queue,
                },
                body.len(),
            );
            if pro.len() != base as usize {
                return Err(NrtError::invalid(format!(
                    "{sg} engine {engine}: the prologue has {} slots, NEFF word 0 belongs at pc {base}",
                    pro.len()
                )));
            }
            let mut words = pro;
            let mut origins = vec![WordOrigin::Runtime; words.len()];
            for w in body {
                words.push(w.word);
                origins.push(WordOrigin::Neff {
                    index: w.neff_index,
                });
            }
            origins.extend(std::iter::repeat_n(WordOrigin::Runtime, epi.len()));
            words.extend(epi);
            out.push(LoadedProgram {
                subgraph: sg.clone(),
                engine,
                base,
                words,
                origins,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_sbuf_addresses_move_with_the_model_core() {
        let mut w = [0u8; 64];
        w[0] = 0xd4;
        w[1] = 0x10;
        let sbuf_core1 = 0x20_0400_0000u64 + 0x37c00;
        w[40..48].copy_from_slice(&sbuf_core1.to_le_bytes());
        w[16..24].copy_from_slice(&0x1234_0000u64.to_le_bytes()); // HBM: never moved
        let out = shift_tpb(&w, 2 * 0x400_0000).expect("shift");
        let at = |o: &[u8; 64], i: usize| u64::from_le_bytes(o[i..i + 8].try_into().expect("8"));
        assert_eq!(at(&out, 40), 0x20_0c00_0000 + 0x37c00, "core 1 -> core 3");
        assert_eq!(at(&out, 16), 0x1234_0000);
        assert_eq!(out[0], 0xd4, "still a NEFF word");
        // Moving past the last core is refused.
        assert!(shift_tpb(&w, 7 * 0x400_0000)
            .expect_err("core 8")
            .contains("leaves the device's cores"));
    }

    #[test]
    fn translation_rewrites_var_relative_addresses_and_names_the_pc() {
        // A DMA_DIRECT2D (NEFF 0xd4) with a var-relative src and a DGE-table dst.
        let mut w = [0u8; 64];
        w[0] = 0xd4;
        w[1] = 0x10;
        let src = DmaAddr::VarRelative {
            offset: 0x40,
            var_id: 3,
            pad: 0,
        }
        .encode();
        let dst = DmaAddr::Table {
            offset: 0x80,
            index: 1,
            pad: 0,
        }
        .encode();
        w[16..24].copy_from_slice(&src.to_le_bytes());
        w[40..48].copy_from_slice(&dst.to_le_bytes());
        let none = crate::trigger::Triggers::default();
        let body = |bin: &[u8], base_of: &dyn Fn(u8) -> Option<u64>| {
            translate_body(bin, 10, 0, base_of, &[], &none)
        };
        let out = body(&w, &|id| (id == 3).then_some(0x1000_0000)).expect("translate");
        let out = out[0].word;
        assert_eq!(out[0], 0xb8, "pseudo-opcode translated");
        assert_eq!(
            u64::from_le_bytes(out[16..24].try_into().expect("8")),
            0x1000_0040
        );
        assert_eq!(
            &out[40..48],
            &w[40..48],
            "table addresses are not rewritten at load"
        );
        assert_eq!(&out[1..16], &w[1..16]);
        assert!(body(&w, &|_| None)
            .expect_err("unknown var")
            .starts_with("pc 10: "));
        let mut two = w.to_vec();
        two.extend_from_slice(&[0xd6; 64]);
        assert_eq!(
            body(&two, &|_| Some(0)).expect_err("unknown opcode"),
            "pc 11: unknown opcode 0xd6"
        );
    }
}
