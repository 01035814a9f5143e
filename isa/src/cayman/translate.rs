//! AWS's load-time translation of a NEFF engine program into the words it places between the
//! runtime prologue and epilogue, as the model-layer NTFFs show it (`docs/isa/cayman.md` §1.3):
//! pseudo-opcodes become hardware opcodes, var-relative addresses become absolute, a
//! DMA_DIRECT2D with its DMA_DIRECT2D_EXT slot becomes REGISTER_MOVE (the offset bound) +
//! DMA_DIRECT2D, and a DMA_TRIGGER becomes two WRITEs to its queue's registers. Everything
//! the runtime chooses (variable bases, the trigger WRITEs' addresses and values) comes from
//! the caller.

use super::{CaymanInstr, DmaAddr, Header, Kind, Namespace, Opcode, Value, WORD};
use thiserror::Error;

/// Why a NEFF program cannot be translated.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TranslateError {
    #[error("word {index}: unknown opcode 0x{byte:02x}")]
    Unknown { index: usize, byte: u8 },
    #[error("word {index}: a DMA_DIRECT2D_EXT slot without a DMA_DIRECT2D before it")]
    StrayExt { index: usize },
    #[error("word {index}: {what}")]
    Field { index: usize, what: String },
}

/// The two WRITE words a DMA_TRIGGER becomes: per word, its destinations, data and sizes
/// (`sizes[1] == 0`: one destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TriggerWrite {
    pub dst: [u64; 2],
    pub data: [u32; 2],
    pub sizes: [u8; 2],
}

/// What the runtime decides at load.
#[allow(missing_debug_implementations)]
pub struct LoadEnv<'a> {
    /// Device address of `def.json` variable `var_id`.
    pub var_base: &'a dyn Fn(u8) -> Option<u64>,
    /// Size in bytes of the variable DGE table entry `index` names.
    pub table_var_size: &'a dyn Fn(u8) -> Option<u64>,
    /// The WRITEs that start block `block` of DMA queue `queue`.
    pub trigger: &'a dyn Fn(&str, u32) -> Option<[TriggerWrite; 2]>,
}

/// One loaded word and the NEFF word it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedWord {
    pub word: [u8; WORD],
    pub neff_index: usize,
}

fn field_err(index: usize, what: impl Into<String>) -> TranslateError {
    TranslateError::Field {
        index,
        what: what.into(),
    }
}

/// A REGISTER_MOVE `$R[reg] = imm` in AWS's form (mode 1, uint32, count 1).
pub fn register_move(header: Header, reg: u8, imm: u32) -> [u8; WORD] {
    let mut w = [0u8; WORD];
    w[0] = 0xa7;
    Header {
        len: 0x10,
        ..header
    }
    .encode(&mut w);
    w[12] = 1;
    w[13] = 0x09;
    w[14] = 1;
    w[24] = reg;
    w[32..36].copy_from_slice(&imm.to_le_bytes());
    w
}

/// A WRITE of `t` in AWS's form.
pub fn trigger_write(header: Header, t: &TriggerWrite) -> [u8; WORD] {
    let mut w = [0u8; WORD];
    w[0] = 0xa5;
    Header {
        len: 0x10,
        ..header
    }
    .encode(&mut w);
    w[12] = t.sizes[0];
    w[13] = t.sizes[1];
    w[16..24].copy_from_slice(&t.dst[0].to_le_bytes());
    w[24..32].copy_from_slice(&t.dst[1].to_le_bytes());
    w[32..36].copy_from_slice(&t.data[0].to_le_bytes());
    w[40..44].copy_from_slice(&t.data[1].to_le_bytes());
    w
}

/// Relocate every var-relative address of a NEFF word and give it its loaded opcode byte.
fn relocate(index: usize, d: &CaymanInstr, env: &LoadEnv) -> Result<[u8; WORD], TranslateError> {
    let mut d = d.clone();
    for f in d.fields.iter_mut() {
        if !matches!(f.spec.kind, Kind::Addr | Kind::VarAddr) {
            continue;
        }
        if let Value::Addr(DmaAddr::VarRelative {
            offset,
            var_id,
            pad,
        }) = f.value
        {
            if pad != 0 {
                return Err(field_err(
                    index,
                    format!("{}: reserved bytes set", f.spec.name),
                ));
            }
            let abs = (env.var_base)(var_id)
                .and_then(|b| b.checked_add(offset as u64))
                .filter(|a| a >> 48 == 0)
                .ok_or_else(|| {
                    field_err(
                        index,
                        format!("{}: var {var_id} + 0x{offset:x}", f.spec.name),
                    )
                })?;
            f.value = Value::Addr(DmaAddr::Absolute(abs));
        }
    }
    Ok(d.with_namespace(Namespace::Loaded).encode())
}

/// The REGISTER_MOVE AWS puts before a register-offset DMA: `$R[bound] = size(table var) −
/// transfer bytes`, the largest offset that keeps the transfer inside the variable.
fn bound_move(
    index: usize,
    dma: &CaymanInstr,
    env: &LoadEnv,
) -> Result<[u8; WORD], TranslateError> {
    let bound = dma.u("bound_reg").unwrap_or(0);
    let table = match (dma.addr("src"), dma.addr("dst")) {
        (Some(DmaAddr::TableReg { index, .. }), _) => index,
        (_, Some(DmaAddr::TableReg { index, .. })) => index,
        _ => {
            return Err(field_err(
                index,
                "DMA_DIRECT2D_EXT after a DMA without a register offset",
            ))
        }
    };
    if bound & 0x80 == 0 {
        return Err(field_err(
            index,
            "register-offset DMA without a bound register",
        ));
    }
    let g = |n: &str| dma.u(n).unwrap_or(0);
    let bytes = g("src_num0").max(1) * g("src_num1").max(1) * g("src_elem_size");
    let size = (env.table_var_size)(table)
        .ok_or_else(|| field_err(index, format!("DGE table entry {table}: no variable size")))?;
    let imm = size
        .checked_sub(bytes)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            field_err(
                index,
                format!("transfer of {bytes} bytes does not fit its {size}-byte variable"),
            )
        })?;
    Ok(register_move(Header::default(), (bound & 0x7f) as u8, imm))
}

/// Translate a NEFF engine program (`.bin` bytes, whole 64-byte words) to AWS's loaded words.
pub fn translate_program(bin: &[u8], env: &LoadEnv) -> Result<Vec<LoadedWord>, TranslateError> {
    let words = CaymanInstr::decode_all(Namespace::Neff, bin);
    let mut out = Vec::with_capacity(words.len() + words.len() / 8);
    let mut i = 0;
    while i < words.len() {
        let d = &words[i];
        match d.opcode {
            Opcode::Unknown(byte) => return Err(TranslateError::Unknown { index: i, byte }),
            Opcode::DmaExt => return Err(TranslateError::StrayExt { index: i }),
            Opcode::DmaDirect2d if words.get(i + 1).is_some_and(|n| n.opcode == Opcode::DmaExt) => {
                out.push(LoadedWord {
                    word: bound_move(i, d, env)?,
                    neff_index: i + 1,
                });
                out.push(LoadedWord {
                    word: relocate(i, d, env)?,
                    neff_index: i,
                });
                i += 2;
                continue;
            }
            Opcode::DmaTrigger => {
                let q = d
                    .queue_name()
                    .ok_or_else(|| field_err(i, "DMA_TRIGGER queue name is not ASCII"))?;
                let block = d.u("block").unwrap_or(0) as u32;
                let [a, b] = (env.trigger)(&q, block)
                    .ok_or_else(|| field_err(i, format!("no DMA queue {q} block {block}")))?;
                for (h, t) in [(d.header, a), (Header::default(), b)] {
                    out.push(LoadedWord {
                        word: trigger_write(h, &t),
                        neff_index: i,
                    });
                }
            }
            _ => out.push(LoadedWord {
                word: relocate(i, d, env)?,
                neff_index: i,
            }),
        }
        i += 1;
    }
    Ok(out)
}
