//! The project's kernels: the MLP fixture, a matmul-heavy benchmark kernel, and deliberately
//! broken programs for error-path tests. All are real trn2 words (see [`crate::words`]).

use crate::prng::uniform;
use crate::words::{
    self, acc_flags, event_semaphore, ldweights, matmul, nop, ps, sb, tensor_scalar, tensor_tensor,
    Loc, Scalar, ALU_ADD, ALU_BYPASS, ALU_MAX, DMA_INCREMENT, SEM_SCALAR, SEM_TENSOR, SEM_VECTOR,
};
use crate::{BuildError, KernelBuilder, Xfer};
use neuron_isa::{Dtype, Engine};

/// The DMA queue every project kernel uses, named and numbered as in the compiler's NEFFs
/// (`qSPDynamicHW`, owned by SP, semaphores 8-23).
const QUEUE: &str = "qSPDynamicHW";
const QUEUE_SEMS: std::ops::RangeInclusive<u32> = 8..=23;

fn queue(k: &mut KernelBuilder) {
    k.dma_queue(QUEUE, Engine::Sp, &QUEUE_SEMS.collect::<Vec<_>>());
}

/// Seeds and scales of the MLP's constants (the golden script uses the same).
pub const MLP_W1: (u64, f32) = (101, 1.0 / 16.0);
pub const MLP_B1: (u64, f32) = (102, 0.25);
pub const MLP_W2: (u64, f32) = (103, 1.0 / 16.0);
pub const MLP_B2: (u64, f32) = (104, 0.25);

/// One accumulation step: stationary operand, moving operand, and a `(semaphore, value)` the
/// LDWEIGHTS waits for.
type Step = (Loc, Loc, Option<(u8, u32)>);

/// One PSUM accumulation group on PE: per `(stationary, moving, wait)` step an LDWEIGHTS of
/// 128 stationary columns (waiting on `wait`) and a MATMUL of 128 moving columns into `dst`;
/// the last MATMUL bumps S[Tensor].
fn accumulate(k: &mut KernelBuilder, dst: Loc, dtype: Dtype, steps: &[Step]) {
    for (i, (stationary, moving, wait)) in steps.iter().enumerate() {
        let mut l = ldweights(*stationary, dtype, 128, false);
        if let Some((sem, v)) = wait {
            l = l.wait(*sem, *v);
        }
        k.push(Engine::Pe, l);
        let mut m = matmul(dst, *moving, dtype, 128, acc_flags(i, steps.len()), false);
        if i + 1 == steps.len() {
            m = m.inc(SEM_TENSOR);
        }
        k.push(Engine::Pe, m);
    }
}

/// `y = relu(x . W1 + b1) . W2 + b2`, x [128, 512], W1 [512, 256], W2 [256, 128], all bf16,
/// fp32 accumulation in PSUM; hidden activations and y rounded to bf16.
///
/// Data flow: SP loads everything with DMA_DIRECT2D (one queue semaphore per transfer; the
/// biases are converted to fp32 on the way, as TENSOR_SCALAR and TENSOR_TENSOR read fp32
/// operands); PE transposes x in four 128-column blocks (transposing LDWEIGHTS + MATMUL by the
/// identity, bf16 results in PSUM); ACT copies the transposes to SBUF; PE computes
/// h^T = W1^T x^T per 128-row hidden slice (four accumulating MATMULs each); DVE adds the
/// per-partition bias b1 and takes max(., 0) in one TENSOR_SCALAR per slice, writing bf16;
/// PE computes y = h W2; DVE adds the broadcast b2 (TENSOR_TENSOR) and writes bf16; SP
/// stores y and waits for that DMA.
pub fn mlp() -> Result<Vec<u8>, BuildError> {
    // DMA semaphores (of the queue's set), one per transfer.
    const D_X: u8 = 8;
    const D_ID: u8 = 9;
    const D_W1: u8 = 10;
    const D_W2: u8 = 11;
    const D_B1: u8 = 12;
    const D_B2: u8 = 13;
    const D_Y: u8 = 14;
    // SBUF byte offsets within each partition.
    const X: u32 = 0; // 512 bf16
    const ID: u32 = 1024; // 128 bf16
    const W1: u32 = 1280; // 4 x 256 bf16
    const W2: u32 = 3328; // 2 x 128 bf16
    const B1: u32 = 3840; // 2 fp32
    const B2: u32 = 4096; // 128 fp32
    const XT: u32 = 4608; // 4 x 128 bf16
    const HT: u32 = 5632; // 2 x 128 bf16
    const Y: u32 = 6144; // 128 bf16
                         // PSUM byte offsets (one 2 KiB bank each).
    const PT: u32 = 0; // 4 x 128 bf16 (transposes)
    const PH: u32 = 2048; // 2 x 128 fp32
    const PY: u32 = 4096; // 128 fp32
    let bf = Dtype::Bf16;
    let f32_ = Dtype::F32;

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
    queue(&mut k);

    let sp = Engine::Sp;
    let loads = [
        (D_X, Xfer::row_tiles("x", bf, 512, 512, 1, X, 0)),
        (D_ID, Xfer::row_tiles("ident", bf, 128, 128, 1, ID, 0)),
        (D_W1, Xfer::row_tiles("w1", bf, 256, 256, 4, W1, 512)),
        (D_W2, Xfer::row_tiles("w2", bf, 128, 128, 2, W2, 256)),
        (D_B1, Xfer::columns("b1", bf, f32_, 2, B1)),
        (D_B2, Xfer::broadcast_row("b2", bf, f32_, 128, B2)),
    ];
    for (sem, x) in &loads {
        let w = k.dma(QUEUE, *sem, x)?;
        k.push(sp, w);
    }
    let store = k.dma(QUEUE, D_Y, &Xfer::store("y", bf, 128, Y))?;
    k.push(sp, store.wait(SEM_VECTOR, 3));
    k.push(sp, nop().wait(D_Y, DMA_INCREMENT));

    let pe = Engine::Pe;
    // x^T: four transposes by the identity; S[Tensor] reaches 4.
    k.push(pe, event_semaphore().wait(D_X, DMA_INCREMENT));
    for kt in 0..4u32 {
        let mut l = ldweights(sb(X + kt * 256), bf, 128, true);
        if kt == 0 {
            l = l.wait(D_ID, DMA_INCREMENT);
        }
        k.push(pe, l);
        k.push(
            pe,
            matmul(ps(PT + kt * 256), sb(ID), bf, 128, words::ACC_SINGLE, true).inc(SEM_TENSOR),
        );
    }
    // h^T slices: S[Tensor] reaches 5 and 6.
    k.push(pe, event_semaphore().wait(D_W1, DMA_INCREMENT));
    for ht in 0..2u32 {
        let steps: Vec<_> = (0..4u32)
            .map(|kt| {
                let wait = (ht == 0 && kt == 0).then_some((SEM_SCALAR, 1));
                (sb(W1 + kt * 512 + ht * 256), sb(XT + kt * 256), wait)
            })
            .collect();
        accumulate(&mut k, ps(PH + ht * 512), bf, &steps);
    }
    // y = h W2: S[Tensor] reaches 7.
    k.push(pe, event_semaphore().wait(D_W2, DMA_INCREMENT));
    let steps: Vec<_> = (0..2u32)
        .map(|ht| {
            let wait = Some((SEM_VECTOR, ht + 1));
            (sb(HT + ht * 256), sb(W2 + ht * 256), wait)
        })
        .collect();
    accumulate(&mut k, ps(PY), bf, &steps);

    // ACT: the four bf16 transposes (contiguous in PSUM) to SBUF in one COPY.
    k.push(
        Engine::Act,
        words::copy(sb(XT), bf, ps(PT), bf, 512)
            .wait(SEM_TENSOR, 4)
            .inc(SEM_SCALAR),
    );

    // DVE: h = max(h + b1, 0) per slice, then y + b2; S[Vector] reaches 3.
    let dve = Engine::Dve;
    k.push(dve, event_semaphore().wait(D_B1, DMA_INCREMENT));
    for ht in 0..2u32 {
        k.push(
            dve,
            tensor_scalar(
                sb(HT + ht * 256),
                bf,
                ps(PH + ht * 512),
                f32_,
                128,
                (ALU_ADD, Scalar::Ptr(B1 + ht * 4)),
                (ALU_MAX, Scalar::Imm(0.0)),
            )
            .wait(SEM_TENSOR, 5 + ht)
            .inc(SEM_VECTOR),
        );
    }
    k.push(dve, event_semaphore().wait(D_B2, DMA_INCREMENT));
    k.push(
        dve,
        tensor_tensor(ALU_ADD, sb(Y), bf, (ps(PY), f32_), (sb(B2), f32_), 128)
            .wait(SEM_TENSOR, 7)
            .inc(SEM_VECTOR),
    );
    k.build()
}

/// A matmul-heavy fp32 kernel: `c = sum over n of a^T b` (the same [128x128]^T [128x512]
/// product accumulated `n` times in one PSUM bank), then c out. FLOPs: `2*128*128*512*n`.
///
/// One LDWEIGHTS of `a`, then `n` MATMULs streaming `b`, in a single fp32 pass
/// (`fp32_mode` 0). Two departures from the compiler's shape, so that the benchmark measures
/// one SGEMM per product: the corpus' fp32 matmuls always take two passes (LDWEIGHTS
/// `fp32_mode` LOW, then HIGH, each followed by a MATMUL), and it always pairs each MATMUL
/// with its own LDWEIGHTS, while here the weights stay in the PE array across MATMULs (as the
/// device model keeps them; no corpus word shows reuse).
pub fn gemm_bench(n: u32) -> Result<Vec<u8>, BuildError> {
    const D_A: u8 = 8;
    const D_B: u8 = 9;
    const D_C: u8 = 10;
    const A: u32 = 0;
    const B: u32 = 512;
    const C: u32 = 2560;
    let f = Dtype::F32;
    let mut k = KernelBuilder::new("gemm_bench");
    k.input("a", f, &[128, 128])?;
    k.input("b", f, &[128, 512])?;
    k.output("c", f, &[128, 512])?;
    queue(&mut k);
    let sp = Engine::Sp;
    let la = k.dma(QUEUE, D_A, &Xfer::row_tiles("a", f, 128, 128, 1, A, 0))?;
    let lb = k.dma(QUEUE, D_B, &Xfer::row_tiles("b", f, 512, 512, 1, B, 0))?;
    let st = k.dma(QUEUE, D_C, &Xfer::store("c", f, 512, C))?;
    k.push(sp, la);
    k.push(sp, lb);
    k.push(sp, st.wait(SEM_VECTOR, 1));
    k.push(sp, nop().wait(D_C, DMA_INCREMENT));
    let pe = Engine::Pe;
    k.push(pe, event_semaphore().wait(D_A, DMA_INCREMENT));
    k.push(pe, ldweights(sb(A), f, 128, false).wait(D_B, DMA_INCREMENT));
    for i in 0..n as usize {
        let mut m = matmul(ps(0), sb(B), f, 512, acc_flags(i, n as usize), false);
        if i + 1 == n as usize {
            m = m.inc(SEM_TENSOR);
        }
        k.push(pe, m);
    }
    k.push(
        Engine::Dve,
        words::copy(sb(C), f, ps(0), f, 512)
            .wait(SEM_TENSOR, 1)
            .inc(SEM_VECTOR),
    );
    k.build()
}

/// Ways to break a program, for error-path tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// DVE waits on a DMA semaphore no transfer increments: the execution never completes.
    Hang,
    /// DVE reads beyond the end of an SBUF partition.
    SbufOutOfBounds,
    /// ACT holds a word whose opcode byte the trn2 decoder does not know (0xd6).
    UnknownOpcode,
}

/// The opcode byte of [`Broken::UnknownOpcode`]: 214, the code of the real runtime's
/// "Unsupported hardware operator" log example, unknown to the trn2 decoder in both namespaces.
pub const UNKNOWN_OPCODE: u8 = 0xd6;

/// A tiny kernel (`out = in + 1` over [128, 4] fp32) with one defect.
pub fn broken(kind: Broken) -> Result<Vec<u8>, BuildError> {
    const D_IN: u8 = 8;
    const D_OUT: u8 = 9;
    /// A semaphore of the queue no transfer uses.
    const D_NEVER: u8 = 23;
    let f = Dtype::F32;
    let mut k = KernelBuilder::new(match kind {
        Broken::Hang => "hang",
        Broken::SbufOutOfBounds => "sbuf_oob",
        Broken::UnknownOpcode => "bad_opcode",
    });
    k.input("in", f, &[128, 4])?;
    k.output("out", f, &[128, 4])?;
    queue(&mut k);
    let sp = Engine::Sp;
    let l = k.dma(QUEUE, D_IN, &Xfer::row_tiles("in", f, 4, 4, 1, 0, 0))?;
    let s = k.dma(QUEUE, D_OUT, &Xfer::store("out", f, 4, 64))?;
    k.push(sp, l);
    k.push(sp, s.wait(SEM_VECTOR, 1));
    k.push(sp, nop().wait(D_OUT, DMA_INCREMENT));
    let src = if kind == Broken::SbufOutOfBounds {
        sb(224 * 1024 - 8)
    } else {
        sb(0)
    };
    if kind == Broken::Hang {
        k.push(Engine::Dve, event_semaphore().wait(D_NEVER, DMA_INCREMENT));
    }
    k.push(
        Engine::Dve,
        tensor_scalar(
            sb(64),
            f,
            src,
            f,
            4,
            (ALU_ADD, Scalar::Imm(1.0)),
            (ALU_BYPASS, Scalar::Imm(0.0)),
        )
        .wait(D_IN, DMA_INCREMENT)
        .inc(SEM_VECTOR),
    );
    if kind == Broken::UnknownOpcode {
        let mut w = [0u8; 64];
        w[0] = UNKNOWN_OPCODE;
        w[1] = 0x10;
        k.push_raw(Engine::Act, w);
    }
    k.build()
}
