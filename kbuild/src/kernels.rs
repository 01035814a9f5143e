//! The project's kernels: the MLP fixture, a matmul-heavy benchmark kernel, and deliberately
//! broken programs for error-path tests.

use crate::prng::uniform;
use crate::{BuildError, KernelBuilder, Xfer};
use neuron_isa::{ActFunc, AluOp, Dtype, Engine, Instr, Op, SemOp, Space, TensorRef, WaitCond};

fn sb(dtype: Dtype, off: u32, n: u16) -> TensorRef {
    TensorRef::tile(Space::Sbuf, dtype, 0, 128, off, n)
}
fn ps(off: u32, n: u16) -> TensorRef {
    TensorRef::tile(Space::Psum, Dtype::F32, 0, 128, off, n)
}

/// Seeds and scales of the MLP's constants (the golden script uses the same).
pub const MLP_W1: (u64, f32) = (101, 1.0 / 16.0);
pub const MLP_B1: (u64, f32) = (102, 0.25);
pub const MLP_W2: (u64, f32) = (103, 1.0 / 16.0);
pub const MLP_B2: (u64, f32) = (104, 0.25);

/// `y = relu(x . W1 + b1) . W2 + b2`, x [128, 512], W1 [512, 256], W2 [256, 128], all bf16,
/// fp32 accumulation in PSUM; hidden activations and y rounded to bf16.
///
/// Data flow: SP loads everything over one DMA queue (semaphore 1 counts landed blocks); PE
/// transposes x with an identity matmul; ACT copies the transposes to SBUF as bf16; PE computes
/// h^T = W1^T x^T per 128-row hidden slice; ACT applies relu with the per-partition bias b1;
/// PE computes y = h W2; DVE adds the broadcast b2; SP stores y.
pub fn mlp() -> Result<Vec<u8>, BuildError> {
    const S_DMA: u8 = 1;
    const S_PT: u8 = 2;
    const S_XT: u8 = 3;
    const S_PH: u8 = 4;
    const S_HT: u8 = 5;
    const S_PY: u8 = 6;
    const S_Y: u8 = 7;
    // SBUF byte offsets within each partition.
    const X: u32 = 0;
    const ID: u32 = 1024;
    const W1: u32 = 1280;
    const W2: u32 = 3328;
    const B1: u32 = 3840;
    const B2: u32 = 4096;
    const XT: u32 = 4352;
    const HT: u32 = 5376;
    const Y: u32 = 5888;
    // PSUM byte offsets.
    const PT: u32 = 0;
    const PH: u32 = 2048;
    const PY: u32 = 4096;
    let bf = Dtype::Bf16;

    let mut k = KernelBuilder::new("mlp");
    k.input("x", bf, &[128, 512])?;
    let mut ident = vec![0f32; 128 * 128];
    for i in 0..128 {
        ident[i * 128 + i] = 1.0;
    }
    k.constant_f32("ident", bf, &[128, 128], &ident)?;
    k.constant_f32(
        "w1",
        bf,
        &[512, 256],
        &uniform(MLP_W1.0, 512 * 256, MLP_W1.1),
    )?;
    k.constant_f32("b1", bf, &[256], &uniform(MLP_B1.0, 256, MLP_B1.1))?;
    k.constant_f32(
        "w2",
        bf,
        &[256, 128],
        &uniform(MLP_W2.0, 256 * 128, MLP_W2.1),
    )?;
    k.constant_f32("b2", bf, &[128], &uniform(MLP_B2.0, 128, MLP_B2.1))?;
    k.output("y", bf, &[128, 128])?;
    k.dma_queue("qSyncIO", Engine::Sp, &[S_DMA as u32]);

    let sp = Engine::Sp;
    let q = "qSyncIO";
    let loads = [
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &[Xfer::load("x", bf, 512, 0, 0, 128, 512, 0, X as u64)],
        )?,
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &[Xfer::load("ident", bf, 128, 0, 0, 128, 128, 0, ID as u64)],
        )?,
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &(0..4)
                .map(|kt| {
                    Xfer::load(
                        "w1",
                        bf,
                        256,
                        kt * 128,
                        0,
                        128,
                        256,
                        0,
                        (W1 + kt as u32 * 512) as u64,
                    )
                })
                .collect::<Vec<_>>(),
        )?,
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &(0..2)
                .map(|ht| {
                    Xfer::load(
                        "w2",
                        bf,
                        128,
                        ht * 128,
                        0,
                        128,
                        128,
                        0,
                        (W2 + ht as u32 * 256) as u64,
                    )
                })
                .collect::<Vec<_>>(),
        )?,
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &(0..2)
                .map(|ht| Xfer::column("b1", bf, ht * 128, 128, (B1 + ht as u32 * 2) as u64))
                .collect::<Vec<_>>(),
        )?,
        k.dma(
            sp,
            q,
            Some(S_DMA),
            &[Xfer::broadcast_row("b2", bf, 0, 128, 128, B2 as u64)],
        )?,
    ];
    let store = k.dma(
        sp,
        q,
        Some(S_DMA),
        &[Xfer::store("y", bf, 128, 128, 128, Y as u64)],
    )?;
    for b in loads {
        k.push(sp, Instr::new(Op::DmaTrigger { block: b }));
    }
    k.push(
        sp,
        Instr::new(Op::DmaTrigger { block: store }).wait(WaitCond::Ge, S_Y, 1),
    );
    k.push(sp, Instr::new(Op::Nop).wait(WaitCond::Ge, S_DMA, 7));

    let pe = Engine::Pe;
    for kt in 0..4u32 {
        let mut i = Instr::new(Op::MatMul {
            dst: ps(PT + kt * 512, 128),
            stationary: sb(bf, X + kt * 256, 128),
            moving: sb(bf, ID, 128),
            accumulate: false,
        });
        if kt == 0 {
            i = i.wait(WaitCond::Ge, S_DMA, 6);
        }
        if kt == 3 {
            i = i.then(SemOp::Inc, S_PT, 0);
        }
        k.push(pe, i);
    }
    for ht in 0..2u32 {
        for kt in 0..4u32 {
            let mut i = Instr::new(Op::MatMul {
                dst: ps(PH + ht * 512, 128),
                stationary: sb(bf, W1 + kt * 512 + ht * 256, 128),
                moving: sb(bf, XT + kt * 256, 128),
                accumulate: kt > 0,
            });
            if ht == 0 && kt == 0 {
                i = i.wait(WaitCond::Ge, S_XT, 1);
            }
            if kt == 3 {
                i = i.then(SemOp::Inc, S_PH, 0);
            }
            k.push(pe, i);
        }
    }
    for ht in 0..2u32 {
        let mut i = Instr::new(Op::MatMul {
            dst: ps(PY, 128),
            stationary: sb(bf, HT + ht * 256, 128),
            moving: sb(bf, W2 + ht * 256, 128),
            accumulate: ht > 0,
        });
        if ht == 0 {
            i = i.wait(WaitCond::Ge, S_HT, 2);
        } else {
            i = i.then(SemOp::Inc, S_PY, 0);
        }
        k.push(pe, i);
    }

    let act = Engine::Act;
    for kt in 0..4u32 {
        let mut i = Instr::new(Op::Copy {
            dst: sb(bf, XT + kt * 256, 128),
            src: ps(PT + kt * 512, 128),
        });
        if kt == 0 {
            i = i.wait(WaitCond::Ge, S_PT, 1);
        }
        if kt == 3 {
            i = i.then(SemOp::Inc, S_XT, 0);
        }
        k.push(act, i);
    }
    for ht in 0..2u32 {
        let bias = TensorRef::tile(Space::Sbuf, bf, 0, 128, B1 + ht * 2, 1);
        k.push(
            act,
            Instr::new(Op::Activation {
                func: ActFunc::Relu,
                dst: sb(bf, HT + ht * 256, 128),
                src: ps(PH + ht * 512, 128),
                bias: Some(bias),
                scale: 1.0,
            })
            .wait(WaitCond::Ge, S_PH, ht as i32 + 1)
            .then(SemOp::Inc, S_HT, 0),
        );
    }
    k.push(
        Engine::Dve,
        Instr::new(Op::TensorTensor {
            op: AluOp::Add,
            dst: sb(bf, Y, 128),
            a: ps(PY, 128),
            b: sb(bf, B2, 128),
        })
        .wait(WaitCond::Ge, S_PY, 1)
        .then(SemOp::Inc, S_Y, 0),
    );
    k.build()
}

/// A matmul-heavy fp32 kernel: `c = sum over n of a^T b` (the same [128x128]^T [128x512]
/// product accumulated `n` times in one PSUM bank), then c out. FLOPs: `2*128*128*512*n`.
pub fn gemm_bench(n: u32) -> Result<Vec<u8>, BuildError> {
    const S_DMA: u8 = 1;
    const S_MM: u8 = 2;
    const S_C: u8 = 3;
    let f = Dtype::F32;
    let mut k = KernelBuilder::new("gemm_bench");
    k.input("a", f, &[128, 128])?;
    k.input("b", f, &[128, 512])?;
    k.output("c", f, &[128, 512])?;
    k.dma_queue("qSyncIO", Engine::Sp, &[S_DMA as u32]);
    let la = k.dma(
        Engine::Sp,
        "qSyncIO",
        Some(S_DMA),
        &[Xfer::load("a", f, 128, 0, 0, 128, 128, 0, 0)],
    )?;
    let lb = k.dma(
        Engine::Sp,
        "qSyncIO",
        Some(S_DMA),
        &[Xfer::load("b", f, 512, 0, 0, 128, 512, 0, 512)],
    )?;
    let st = k.dma(
        Engine::Sp,
        "qSyncIO",
        Some(S_DMA),
        &[Xfer::store("c", f, 512, 128, 512, 2560)],
    )?;
    k.push(Engine::Sp, Instr::new(Op::DmaTrigger { block: la }));
    k.push(Engine::Sp, Instr::new(Op::DmaTrigger { block: lb }));
    k.push(
        Engine::Sp,
        Instr::new(Op::DmaTrigger { block: st }).wait(WaitCond::Ge, S_C, 1),
    );
    k.push(Engine::Sp, Instr::new(Op::Nop).wait(WaitCond::Ge, S_DMA, 3));
    for i in 0..n {
        let mut ins = Instr::new(Op::MatMul {
            dst: ps(0, 512),
            stationary: sb(f, 0, 128),
            moving: sb(f, 512, 512),
            accumulate: i > 0,
        });
        if i == 0 {
            ins = ins.wait(WaitCond::Ge, S_DMA, 2);
        }
        if i + 1 == n {
            ins = ins.then(SemOp::Inc, S_MM, 0);
        }
        k.push(Engine::Pe, ins);
    }
    k.push(
        Engine::Dve,
        Instr::new(Op::Copy {
            dst: sb(f, 2560, 512),
            src: ps(0, 512),
        })
        .wait(WaitCond::Ge, S_MM, 1)
        .then(SemOp::Inc, S_C, 0),
    );
    k.build()
}

/// Ways to break a program, for error-path tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// PE waits on a semaphore nothing increments: the execution never completes.
    Hang,
    /// DVE reads beyond the end of an SBUF partition.
    SbufOutOfBounds,
    /// ACT holds a word with an opcode no encoding defines.
    UnknownOpcode,
}

/// A tiny kernel (`out = in + 1` over [128, 4] fp32) with one defect.
pub fn broken(kind: Broken) -> Result<Vec<u8>, BuildError> {
    let f = Dtype::F32;
    let mut k = KernelBuilder::new(match kind {
        Broken::Hang => "hang",
        Broken::SbufOutOfBounds => "sbuf_oob",
        Broken::UnknownOpcode => "bad_opcode",
    });
    k.input("in", f, &[128, 4])?;
    k.output("out", f, &[128, 4])?;
    k.dma_queue("q", Engine::Sp, &[1]);
    let l = k.dma(
        Engine::Sp,
        "q",
        Some(1),
        &[Xfer::load("in", f, 4, 0, 0, 128, 4, 0, 0)],
    )?;
    let s = k.dma(
        Engine::Sp,
        "q",
        Some(1),
        &[Xfer::store("out", f, 4, 128, 4, 64)],
    )?;
    k.push(Engine::Sp, Instr::new(Op::DmaTrigger { block: l }));
    k.push(
        Engine::Sp,
        Instr::new(Op::DmaTrigger { block: s }).wait(WaitCond::Ge, 2, 1),
    );
    k.push(Engine::Sp, Instr::new(Op::Nop).wait(WaitCond::Ge, 1, 2));
    let src = if kind == Broken::SbufOutOfBounds {
        TensorRef::tile(Space::Sbuf, f, 0, 128, 224 * 1024 - 8, 4)
    } else {
        sb(f, 0, 4)
    };
    let mut add = Instr::new(Op::TensorScalar {
        op: AluOp::Add,
        dst: sb(f, 64, 4),
        src,
        scalar: 1.0,
    })
    .wait(WaitCond::Ge, 1, 1)
    .then(SemOp::Inc, 2, 0);
    if kind == Broken::Hang {
        add = add.wait(WaitCond::Ge, 9, 1);
    }
    k.push(Engine::Dve, add);
    if kind == Broken::UnknownOpcode {
        let mut w = [0u8; 64];
        w[0] = 0xD6; // 214: the code of the real runtime's "Unsupported hardware operator" log example
        w[1] = 0x10;
        k.push_raw(Engine::Act, w);
    }
    k.build()
}
