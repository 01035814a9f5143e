//! The project-defined 64-byte encoding for hand-built test programs
//! (`docs/isa/test-encoding.md`).
//!
//! The common header (bytes 1 and 4-11) follows the real trn2 layout
//! (`trn2-encoding-notes.md` §4) so the two encodings share their synchronisation fields;
//! opcodes live in 0xE0-0xEF, a range no real trn2 word has shown. NEFFs that use this
//! encoding carry the feature bit `FEATURE_EMU_TEST_ISA` (1 << 62), which the real runtime
//! rejects.

use crate::dtype::Dtype;
use crate::instr::*;
use thiserror::Error;

pub const WORD: usize = 64;
/// Byte 1 of every word (the real encoding's constant; inferred to be the length in 32-bit units).
pub const LEN_BYTE: u8 = 0x10;

pub const OP_NOP: u8 = 0xE0;
pub const OP_MATMUL: u8 = 0xE1;
pub const OP_ACTIVATE: u8 = 0xE2;
pub const OP_TENSOR_TENSOR: u8 = 0xE3;
pub const OP_TENSOR_SCALAR: u8 = 0xE4;
pub const OP_COPY: u8 = 0xE5;
pub const OP_DMA_TRIGGER: u8 = 0xE6;
pub const OP_DMA_START: u8 = 0xE7;
pub const OP_NOTIFY: u8 = 0xE8;
pub const OP_END: u8 = 0xE9;

const FLAG_ACCUMULATE: u8 = 0x01;

const SPACE_NONE: u8 = 0;
const SPACE_SBUF: u8 = 1;
const SPACE_PSUM: u8 = 2;

/// Why a word did not decode. `offset` is the byte within the 64-byte word.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("instruction word is {len} bytes, expected 64")]
    ShortWord { len: usize },
    #[error("unknown opcode 0x{opcode:02x}")]
    UnknownOpcode { opcode: u8 },
    #[error("byte 1 is 0x{value:02x}, expected 0x10")]
    BadLengthByte { value: u8 },
    #[error("opcode 0x{opcode:02x}: reserved byte {offset} is 0x{value:02x}, expected 0")]
    Reserved {
        opcode: u8,
        offset: usize,
        value: u8,
    },
    #[error("opcode 0x{opcode:02x}: bad {field} 0x{value:x} at byte {offset}")]
    BadField {
        opcode: u8,
        field: &'static str,
        offset: usize,
        value: u32,
    },
}

fn rd_u16(w: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([w[o], w[o + 1]])
}
fn rd_u32(w: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([w[o], w[o + 1], w[o + 2], w[o + 3]])
}

struct Dec<'a> {
    w: &'a [u8],
    op: u8,
}

impl Dec<'_> {
    fn bad(&self, field: &'static str, offset: usize, value: u32) -> DecodeError {
        DecodeError::BadField {
            opcode: self.op,
            field,
            offset,
            value,
        }
    }

    fn zero(&self, range: std::ops::Range<usize>) -> Result<(), DecodeError> {
        for o in range {
            if self.w[o] != 0 {
                return Err(DecodeError::Reserved {
                    opcode: self.op,
                    offset: o,
                    value: self.w[o],
                });
            }
        }
        Ok(())
    }

    fn operand(&self, at: usize) -> Result<Option<TensorRef>, DecodeError> {
        let w = self.w;
        let space = match w[at] {
            SPACE_NONE => {
                return self.zero(at..at + 8).map(|_| None);
            }
            SPACE_SBUF => Space::Sbuf,
            SPACE_PSUM => Space::Psum,
            v => return Err(self.bad("memory space", at, v as u32)),
        };
        let dtype = Dtype::from_code(w[at + 1])
            .ok_or_else(|| self.bad("dtype", at + 1, w[at + 1] as u32))?;
        let partition = w[at + 2];
        let partitions = w[at + 3];
        if partitions == 0 || partition as u32 + partitions as u32 > 128 {
            return Err(self.bad(
                "partition range",
                at + 3,
                ((partition as u32) << 8) | partitions as u32,
            ));
        }
        Ok(Some(TensorRef {
            space,
            dtype,
            partition,
            partitions,
            offset: rd_u32(w, at + 4),
            num: [rd_u16(w, at + 8), rd_u16(w, at + 12)],
            step: [rd_u16(w, at + 10) as i16, rd_u16(w, at + 14) as i16],
        }))
    }

    fn need(&self, at: usize) -> Result<TensorRef, DecodeError> {
        self.operand(at)?
            .ok_or_else(|| self.bad("missing operand", at, 0))
    }
}

/// Decode one 64-byte word.
pub fn decode(w: &[u8]) -> Result<Instr, DecodeError> {
    if w.len() != WORD {
        return Err(DecodeError::ShortWord { len: w.len() });
    }
    let op = w[0];
    if !(OP_NOP..=OP_END).contains(&op) {
        return Err(DecodeError::UnknownOpcode { opcode: op });
    }
    if w[1] != LEN_BYTE {
        return Err(DecodeError::BadLengthByte { value: w[1] });
    }
    let d = Dec { w, op };
    let sync = decode_sync(&d)?;
    let flags = w[2];
    let sub = w[3];
    let allowed_flags = if op == OP_MATMUL { FLAG_ACCUMULATE } else { 0 };
    if flags & !allowed_flags != 0 {
        return Err(DecodeError::Reserved {
            opcode: op,
            offset: 2,
            value: flags,
        });
    }
    let body = match op {
        OP_NOP | OP_END => {
            d.zero(3..4)?;
            d.zero(16..64)?;
            if op == OP_NOP {
                Op::Nop
            } else {
                Op::End
            }
        }
        OP_MATMUL => {
            d.zero(3..4)?;
            Op::MatMul {
                dst: d.need(16)?,
                stationary: d.need(32)?,
                moving: d.need(48)?,
                accumulate: flags & FLAG_ACCUMULATE != 0,
            }
        }
        OP_ACTIVATE => {
            let func = ActFunc::from_code(sub)
                .ok_or_else(|| d.bad("activation function", 3, sub as u32))?;
            // Operand 2 is the bias column; its bytes 8..12 carry the scale (f32) instead of a pattern.
            let bias = if w[48] == SPACE_NONE {
                d.zero(49..56)?;
                None
            } else {
                let mut b = d.need(48)?;
                b.num = [1, 1];
                b.step = [0, 1];
                Some(b)
            };
            d.zero(60..64)?;
            Op::Activation {
                func,
                dst: d.need(16)?,
                src: d.need(32)?,
                bias,
                scale: f32::from_bits(rd_u32(w, 56)),
            }
        }
        OP_TENSOR_TENSOR => {
            let alu = AluOp::from_code(sub).ok_or_else(|| d.bad("ALU op", 3, sub as u32))?;
            Op::TensorTensor {
                op: alu,
                dst: d.need(16)?,
                a: d.need(32)?,
                b: d.need(48)?,
            }
        }
        OP_TENSOR_SCALAR => {
            let alu = AluOp::from_code(sub).ok_or_else(|| d.bad("ALU op", 3, sub as u32))?;
            d.zero(48..56)?;
            d.zero(60..64)?;
            Op::TensorScalar {
                op: alu,
                dst: d.need(16)?,
                src: d.need(32)?,
                scalar: f32::from_bits(rd_u32(w, 56)),
            }
        }
        OP_COPY => {
            d.zero(3..4)?;
            d.zero(48..64)?;
            Op::Copy {
                dst: d.need(16)?,
                src: d.need(32)?,
            }
        }
        OP_DMA_TRIGGER => {
            d.zero(3..4)?;
            d.zero(18..64)?;
            Op::DmaTrigger {
                block: rd_u16(w, 16),
            }
        }
        OP_DMA_START => {
            d.zero(3..4)?;
            d.zero(18..20)?;
            d.zero(24..64)?;
            Op::DmaStart {
                dma_engine: w[16],
                queue: w[17],
                descs: rd_u32(w, 20),
            }
        }
        OP_NOTIFY => {
            d.zero(3..4)?;
            d.zero(18..64)?;
            Op::Notify { id: rd_u16(w, 16) }
        }
        other => return Err(DecodeError::UnknownOpcode { opcode: other }),
    };
    Ok(Instr { sync, op: body })
}

fn decode_sync(d: &Dec<'_>) -> Result<Sync, DecodeError> {
    let w = d.w;
    let wait = match w[4] {
        0 => {
            d.zero(5..6)?;
            d.zero(8..12)?;
            None
        }
        c => Some(SemWait {
            cond: WaitCond::from_code(c).ok_or_else(|| d.bad("wait condition", 4, c as u32))?,
            index: w[5],
            value: rd_u32(w, 8) as i32,
        }),
    };
    let update = match w[6] {
        0 => {
            d.zero(7..8)?;
            d.zero(12..16)?;
            None
        }
        c => {
            let op = SemOp::from_code(c).ok_or_else(|| d.bad("semaphore update", 6, c as u32))?;
            let value = rd_u32(w, 12) as i32;
            if !matches!(op, SemOp::Add | SemOp::Set) && value != 0 {
                return Err(d.bad("update immediate", 12, value as u32));
            }
            Some(SemUpdate {
                op,
                index: w[7],
                value,
            })
        }
    };
    Ok(Sync { wait, update })
}

fn put_operand(w: &mut [u8; WORD], at: usize, t: &TensorRef) {
    w[at] = match t.space {
        Space::Sbuf => SPACE_SBUF,
        Space::Psum => SPACE_PSUM,
    };
    w[at + 1] = t.dtype.code();
    w[at + 2] = t.partition;
    w[at + 3] = t.partitions;
    w[at + 4..at + 8].copy_from_slice(&t.offset.to_le_bytes());
    w[at + 8..at + 10].copy_from_slice(&t.num[0].to_le_bytes());
    w[at + 10..at + 12].copy_from_slice(&t.step[0].to_le_bytes());
    w[at + 12..at + 14].copy_from_slice(&t.num[1].to_le_bytes());
    w[at + 14..at + 16].copy_from_slice(&t.step[1].to_le_bytes());
}

/// Encode one instruction. `decode(&encode(i)) == i` for every instruction whose fields are
/// in range (a bias operand is normalised to a `[P, 1]` column).
pub fn encode(i: &Instr) -> [u8; WORD] {
    let mut w = [0u8; WORD];
    w[1] = LEN_BYTE;
    if let Some(s) = i.sync.wait {
        w[4] = s.cond.code();
        w[5] = s.index;
        w[8..12].copy_from_slice(&(s.value as u32).to_le_bytes());
    }
    if let Some(u) = i.sync.update {
        w[6] = u.op.code();
        w[7] = u.index;
        if matches!(u.op, SemOp::Add | SemOp::Set) {
            w[12..16].copy_from_slice(&(u.value as u32).to_le_bytes());
        }
    }
    match &i.op {
        Op::Nop => w[0] = OP_NOP,
        Op::End => w[0] = OP_END,
        Op::MatMul {
            dst,
            stationary,
            moving,
            accumulate,
        } => {
            w[0] = OP_MATMUL;
            if *accumulate {
                w[2] = FLAG_ACCUMULATE;
            }
            put_operand(&mut w, 16, dst);
            put_operand(&mut w, 32, stationary);
            put_operand(&mut w, 48, moving);
        }
        Op::Activation {
            func,
            dst,
            src,
            bias,
            scale,
        } => {
            w[0] = OP_ACTIVATE;
            w[3] = *func as u8;
            put_operand(&mut w, 16, dst);
            put_operand(&mut w, 32, src);
            if let Some(b) = bias {
                put_operand(&mut w, 48, b);
            }
            w[56..60].copy_from_slice(&scale.to_bits().to_le_bytes());
            w[60..64].fill(0);
        }
        Op::TensorTensor { op, dst, a, b } => {
            w[0] = OP_TENSOR_TENSOR;
            w[3] = *op as u8;
            put_operand(&mut w, 16, dst);
            put_operand(&mut w, 32, a);
            put_operand(&mut w, 48, b);
        }
        Op::TensorScalar {
            op,
            dst,
            src,
            scalar,
        } => {
            w[0] = OP_TENSOR_SCALAR;
            w[3] = *op as u8;
            put_operand(&mut w, 16, dst);
            put_operand(&mut w, 32, src);
            w[56..60].copy_from_slice(&scalar.to_bits().to_le_bytes());
        }
        Op::Copy { dst, src } => {
            w[0] = OP_COPY;
            put_operand(&mut w, 16, dst);
            put_operand(&mut w, 32, src);
        }
        Op::DmaTrigger { block } => {
            w[0] = OP_DMA_TRIGGER;
            w[16..18].copy_from_slice(&block.to_le_bytes());
        }
        Op::DmaStart {
            dma_engine,
            queue,
            descs,
        } => {
            w[0] = OP_DMA_START;
            w[16] = *dma_engine;
            w[17] = *queue;
            w[20..24].copy_from_slice(&descs.to_le_bytes());
        }
        Op::Notify { id } => {
            w[0] = OP_NOTIFY;
            w[16..18].copy_from_slice(&id.to_le_bytes());
        }
    }
    w
}

/// Decode a whole instruction stream; the error carries the word index.
pub fn decode_stream(bytes: &[u8]) -> Result<Vec<Instr>, (usize, DecodeError)> {
    if !bytes.len().is_multiple_of(WORD) {
        return Err((
            bytes.len() / WORD,
            DecodeError::ShortWord {
                len: bytes.len() % WORD,
            },
        ));
    }
    bytes
        .chunks_exact(WORD)
        .enumerate()
        .map(|(i, w)| decode(w).map_err(|e| (i, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tref() -> impl Strategy<Value = TensorRef> {
        (
            prop_oneof![Just(Space::Sbuf), Just(Space::Psum)],
            prop_oneof![
                Just(Dtype::F32),
                Just(Dtype::Bf16),
                Just(Dtype::F16),
                Just(Dtype::Fp8E4),
                Just(Dtype::I32)
            ],
            0u8..128,
            any::<u32>(),
            any::<[u16; 2]>(),
            any::<[i16; 2]>(),
        )
            .prop_flat_map(|(space, dtype, p, offset, num, step)| {
                (1u8..=(128 - p)).prop_map(move |n| TensorRef {
                    space,
                    dtype,
                    partition: p,
                    partitions: n,
                    offset,
                    num,
                    step,
                })
            })
    }

    fn column(t: TensorRef) -> TensorRef {
        TensorRef {
            num: [1, 1],
            step: [0, 1],
            ..t
        }
    }

    fn sync() -> impl Strategy<Value = Sync> {
        let wait = prop::option::of(
            (
                prop_oneof![
                    Just(WaitCond::Eq),
                    Just(WaitCond::Ge),
                    Just(WaitCond::EventSetThenClear)
                ],
                any::<u8>(),
                any::<i32>(),
            )
                .prop_map(|(cond, index, value)| SemWait { cond, index, value }),
        );
        let upd = prop::option::of(
            (
                prop_oneof![
                    Just(SemOp::Inc),
                    Just(SemOp::Dec),
                    Just(SemOp::Add),
                    Just(SemOp::Set),
                    Just(SemOp::EventSet)
                ],
                any::<u8>(),
                any::<i32>(),
            )
                .prop_map(|(op, index, v)| SemUpdate {
                    op,
                    index,
                    value: if matches!(op, SemOp::Add | SemOp::Set) {
                        v
                    } else {
                        0
                    },
                }),
        );
        (wait, upd).prop_map(|(wait, update)| Sync { wait, update })
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Nop),
            Just(Op::End),
            (tref(), tref(), tref(), any::<bool>()).prop_map(
                |(dst, stationary, moving, accumulate)| Op::MatMul {
                    dst,
                    stationary,
                    moving,
                    accumulate
                }
            ),
            (
                0u8..7,
                tref(),
                tref(),
                prop::option::of(tref()),
                any::<u32>()
            )
                .prop_map(|(f, dst, src, bias, s)| Op::Activation {
                    func: ActFunc::from_code(f).unwrap_or(ActFunc::Identity),
                    dst,
                    src,
                    bias: bias.map(column),
                    scale: f32::from_bits(s),
                }),
            (0u8..6, tref(), tref(), tref()).prop_map(|(o, dst, a, b)| Op::TensorTensor {
                op: AluOp::from_code(o).unwrap_or(AluOp::Add),
                dst,
                a,
                b
            }),
            (0u8..6, tref(), tref(), any::<u32>()).prop_map(|(o, dst, src, s)| Op::TensorScalar {
                op: AluOp::from_code(o).unwrap_or(AluOp::Add),
                dst,
                src,
                scalar: f32::from_bits(s)
            }),
            (tref(), tref()).prop_map(|(dst, src)| Op::Copy { dst, src }),
            any::<u16>().prop_map(|block| Op::DmaTrigger { block }),
            (any::<u8>(), any::<u8>(), any::<u32>()).prop_map(|(dma_engine, queue, descs)| {
                Op::DmaStart {
                    dma_engine,
                    queue,
                    descs,
                }
            }),
            any::<u16>().prop_map(|id| Op::Notify { id }),
        ]
    }

    /// Bitwise equality (NaN scales compare by bits).
    fn same(a: &Instr, b: &Instr) -> bool {
        encode(a) == encode(b) && format!("{a:?}") == format!("{b:?}")
    }

    proptest! {
        #[test]
        fn round_trip(sync in sync(), op in op()) {
            let i = Instr { sync, op };
            let w = encode(&i);
            let d = decode(&w).expect("encoded word decodes");
            prop_assert!(same(&i, &d), "{i:?} -> {d:?}");
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn decode_encode_is_identity_on_valid_words(mut bytes in any::<[u8; 64]>(), opc in 0xE0u8..=0xE9) {
            bytes[0] = opc;
            bytes[1] = LEN_BYTE;
            if let Ok(i) = decode(&bytes) {
                prop_assert_eq!(encode(&i).to_vec(), bytes.to_vec());
            }
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let mut w = encode(&Instr::new(Op::End));
        assert!(matches!(
            decode(&w[..10]),
            Err(DecodeError::ShortWord { len: 10 })
        ));
        w[0] = 0x02;
        assert_eq!(decode(&w), Err(DecodeError::UnknownOpcode { opcode: 0x02 }));
        w[0] = OP_END;
        w[1] = 0x11;
        assert_eq!(decode(&w), Err(DecodeError::BadLengthByte { value: 0x11 }));
        w[1] = LEN_BYTE;
        w[40] = 1;
        assert_eq!(
            decode(&w),
            Err(DecodeError::Reserved {
                opcode: OP_END,
                offset: 40,
                value: 1
            })
        );
        w[40] = 0;
        w[4] = 0x09;
        assert!(matches!(
            decode(&w),
            Err(DecodeError::BadField {
                field: "wait condition",
                offset: 4,
                ..
            })
        ));
        let mut c = encode(&Instr::new(Op::Copy {
            dst: TensorRef::tile(Space::Sbuf, Dtype::F32, 0, 128, 0, 4),
            src: TensorRef::tile(Space::Sbuf, Dtype::F32, 0, 128, 0, 4),
        }));
        c[17] = 0x33;
        assert!(matches!(
            decode(&c),
            Err(DecodeError::BadField {
                field: "dtype",
                offset: 17,
                ..
            })
        ));
        c[17] = Dtype::F32.code();
        c[18] = 100;
        c[19] = 100;
        assert!(matches!(
            decode(&c),
            Err(DecodeError::BadField {
                field: "partition range",
                ..
            })
        ));
        assert!(matches!(
            decode_stream(&[0u8; 65]),
            Err((1, DecodeError::ShortWord { len: 1 }))
        ));
    }
}
