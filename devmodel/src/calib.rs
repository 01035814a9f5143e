//! Calibrated issue costs of real trn2 words, fitted to AWS's per-instruction profiles.
//!
//! Produced by `neuron-emu calibrate` (cli/src/calibrate.rs): for each class (engine, opcode,
//! fp32 input or not, MATMUL after a transposing LDWEIGHTS or not) the issue interval on
//! silicon is fitted as `fixed + per_elem * elements per partition`, over every profiled
//! kernel in `shared/fixtures/real-profiles` (six akc kernels). Words with nothing to stream
//! (TENSOR_LOAD, COMPARE_BRANCH, DRAIN, NOTIFY, barriers' EVENT_SEMAPHOREs, ...: mostly the
//! runtime's prologue and epilogue) are constant classes: the median of their recorded
//! durations, taking only records with no wait in them. A class enters this table only
//! if its samples come from at least two kernels and the fit predicts held-out kernels (fitted
//! without them) within 50% per instruction; the rest keep the uncalibrated cost table
//! (`docs/timing.md`). A test in `cli/tests/calibrate.rs` re-runs the fit on the fixtures and
//! checks that this table is what it gives.
//!
//! A MATMUL's class covers the LDWEIGHTS before it: on PE the next LDWEIGHTS overlaps the
//! running MATMUL, so only the pair's interval is well defined. The model charges the
//! LDWEIGHTS the table's cost and the MATMUL the rest of the pair's interval. A MATMUL that
//! reuses weights already loaded (the compiler's NEFFs never do; `kbuild`'s GEMM benchmark
//! does) is charged the whole pair interval: an extrapolation the profiles cannot check.

use crate::time::Ps;
use neuron_isa::cayman::{CaymanInstr, Opcode};
use neuron_isa::Engine;

/// The calibrated cost of one class of real words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpCost {
    pub engine: Engine,
    pub opcode: Opcode,
    /// The main input is a 4-byte type.
    pub wide: bool,
    /// MATMUL against weights loaded in transpose mode.
    pub transpose: bool,
    pub fixed: Ps,
    /// Femtoseconds per element per partition.
    pub per_elem_fs: u64,
    /// From issue (of the LDWEIGHTS, for a MATMUL) to the completion signal: `lat_fixed +
    /// lat_per_elem_fs * elements`. Where it exceeds the issue interval the semaphore update
    /// lands later than the engine moves on.
    pub lat_fixed: Ps,
    pub lat_per_elem_fs: u64,
}

impl OpCost {
    pub fn cost(&self, elems: u64) -> Ps {
        Ps(self.fixed.0 + elems.saturating_mul(self.per_elem_fs) / 1000)
    }
    pub fn latency(&self, elems: u64) -> Ps {
        Ps(self.lat_fixed.0 + elems.saturating_mul(self.lat_per_elem_fs) / 1000)
    }
}

/// Elements per partition of a word's main access pattern (`src`, else `src0`, else `dst`),
/// and whether its input type is 4 bytes wide (only for [`sized`] opcodes: a DMA's issue
/// cost is descriptor work, a TENSOR_LOAD's a register load). The calibration samples and
/// the device model share this definition.
pub fn word_features(ci: &CaymanInstr) -> (u64, bool) {
    let ap = ["src", "src0", "dst"].iter().find_map(|n| ci.ap(n));
    let elems = ap.map_or(0, |ap| {
        let dims = (ap.dims as usize).min(4);
        ap.num[..dims]
            .iter()
            .fold(1u64, |t, n| t.saturating_mul((*n).max(1) as u64))
    });
    let dt = ["src_dtype", "dtype", "in_dtype"]
        .iter()
        .find_map(|n| ci.dtype(n))
        .or_else(|| {
            ci.u("dtype_pair")
                .and_then(|p| neuron_isa::Dtype::from_code((p & 0xf) as u8))
        });
    let wide = dt.is_some_and(|d| d.size() == 4) && sized(ci.opcode);
    (elems, wide)
}

/// Opcodes whose cost depends on the data they stream (the others are constant classes).
pub fn sized(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Matmul
            | Opcode::Ldweights
            | Opcode::Activate
            | Opcode::Copy
            | Opcode::Cast
            | Opcode::Reciprocal
            | Opcode::TensorReduce
            | Opcode::TensorScalar
            | Opcode::TensorTensor
            | Opcode::Memset
    )
}

/// The class of `costs` a word belongs to, if calibrated.
pub fn lookup(
    costs: &[OpCost],
    engine: Engine,
    opcode: Opcode,
    wide: bool,
    transpose: bool,
) -> Option<&OpCost> {
    costs.iter().find(|c| {
        c.engine == engine && c.opcode == opcode && c.wide == wide && c.transpose == transpose
    })
}

/// (engine, opcode, wide, transpose), interval (fixed ps, fs per element), latency (same).
const fn op(
    (engine, opcode, wide, transpose): (Engine, Opcode, bool, bool),
    (fixed_ps, per_elem_fs): (u64, u64),
    (lat_ps, lat_per_elem_fs): (u64, u64),
) -> OpCost {
    OpCost {
        engine,
        opcode,
        wide,
        transpose,
        fixed: Ps(fixed_ps),
        per_elem_fs,
        lat_fixed: Ps(lat_ps),
        lat_per_elem_fs,
    }
}

/// DMA_DIRECT2D transfers of one core share one pipe to device memory: a transfer's bytes
/// move at `bytes_per_ns` after the ones before it, and its semaphore increment lands `fixed`
/// later (descriptor generation, queue spreading, completion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dma2dCost {
    pub fixed: Ps,
    pub bytes_per_ns: u32,
}

/// trn2: `bytes_per_ns` is the profiles' `metadata.dma_ddr_bandwidth` (435 GB/s, a figure
/// AWS's profiler reports); `fixed` is the median, over the 20 transfers that had no other
/// DMA_DIRECT2D in flight, of their latency beyond moving their bytes at that rate (82
/// transfers in the six akc profiles; `neuron-emu calibrate`).
pub const TRN2_DMA2D: Dma2dCost = Dma2dCost {
    fixed: Ps(1_934_000),
    bytes_per_ns: 435,
};

/// trn2, fitted 2026-11-30 on the six akc profiles (`neuron-emu calibrate`: 672 issue
/// intervals of sized words, 1,224 durations of constant-cost words).
pub const TRN2: &[OpCost] = &[
    op(
        (Engine::Pe, Opcode::Matmul, false, false),
        (378_000, 0),
        (1_008_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::Matmul, false, true),
        (106_000, 0),
        (415_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::Matmul, true, false),
        (0, 1_098_424),
        (98_789, 2_512_342),
    ),
    op(
        (Engine::Pe, Opcode::Matmul, true, true),
        (110_000, 0),
        (382_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::EventSemaphore, false, false),
        (52_000, 0),
        (52_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::Drain, false, false),
        (12_000, 0),
        (12_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::Nop, false, false),
        (19_000, 0),
        (19_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::Notify, false, false),
        (7_000, 0),
        (7_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::CompareBranch, false, false),
        (233_000, 0),
        (233_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::EventSemaphoreRangeClear, false, false),
        (374_000, 0),
        (374_000, 0),
    ),
    op(
        (Engine::Pe, Opcode::SetOrderingMode, false, false),
        (44_000, 0),
        (44_000, 0),
    ),
    op(
        (Engine::Act, Opcode::Activate, true, false),
        (612_000, 0),
        (705_000, 0),
    ),
    op(
        (Engine::Act, Opcode::ActTableLoad, false, false),
        (1_283_000, 0),
        (1_283_000, 0),
    ),
    op(
        (Engine::Act, Opcode::Drain, false, false),
        (7_000, 0),
        (7_000, 0),
    ),
    op(
        (Engine::Act, Opcode::Notify, false, false),
        (4_000, 0),
        (4_000, 0),
    ),
    op(
        (Engine::Act, Opcode::CompareBranch, false, false),
        (222_000, 0),
        (222_000, 0),
    ),
    op(
        (Engine::Act, Opcode::TensorLoad, false, false),
        (669_000, 0),
        (669_000, 0),
    ),
    op(
        (Engine::Act, Opcode::EventSemaphoreRangeClear, false, false),
        (256_000, 0),
        (256_000, 0),
    ),
    op(
        (Engine::Act, Opcode::SetOrderingMode, false, false),
        (41_000, 0),
        (41_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::Drain, false, false),
        (29_000, 0),
        (29_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::Notify, false, false),
        (15_000, 0),
        (15_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::TensorLoad, false, false),
        (682_000, 0),
        (682_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::EventSemaphoreRangeClear, false, false),
        (281_000, 0),
        (281_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::SetOrderingMode, false, false),
        (41_000, 0),
        (41_000, 0),
    ),
    op(
        (Engine::Pool, Opcode::DmaDirect2d, false, false),
        (582_000, 0),
        (49_000, 0),
    ),
    op(
        (Engine::Dve, Opcode::TensorReduce, true, false),
        (59_504, 1_062_004),
        (139_466, 1_066_799),
    ),
    op(
        (Engine::Dve, Opcode::TensorScalar, true, false),
        (224_905, 336_682),
        (308_643, 338_728),
    ),
    op(
        (Engine::Dve, Opcode::Drain, false, false),
        (13_000, 0),
        (13_000, 0),
    ),
    op(
        (Engine::Dve, Opcode::Notify, false, false),
        (13_000, 0),
        (13_000, 0),
    ),
    op(
        (Engine::Dve, Opcode::TensorLoad, false, false),
        (847_000, 0),
        (847_000, 0),
    ),
    op(
        (Engine::Dve, Opcode::EventSemaphoreRangeClear, false, false),
        (308_000, 0),
        (308_000, 0),
    ),
    op(
        (Engine::Dve, Opcode::SetOrderingMode, false, false),
        (56_000, 0),
        (56_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::Drain, false, false),
        (8_000, 0),
        (8_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::Notify, false, false),
        (10_000, 0),
        (10_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::TensorLoad, false, false),
        (647_000, 0),
        (647_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::EventSemaphoreRangeClear, false, false),
        (99_000, 0),
        (99_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::SetOrderingMode, false, false),
        (18_000, 0),
        (18_000, 0),
    ),
    op(
        (Engine::Sp, Opcode::DmaDirect2d, false, false),
        (590_000, 0),
        (542_000, 0),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_exact_on_every_key() {
        let c = lookup(TRN2, Engine::Pe, Opcode::Matmul, true, false).expect("fp32 matmul");
        assert_eq!(c.cost(128), Ps(140_598));
        // Silicon signals an fp32 MATMUL done well after PE can take the next word.
        assert!(c.latency(128) > c.cost(128));
        assert!(lookup(TRN2, Engine::Act, Opcode::Matmul, true, false).is_none());
        assert!(lookup(TRN2, Engine::Dve, Opcode::TensorReduce, false, false).is_none());
        assert_eq!(
            lookup(TRN2, Engine::Dve, Opcode::TensorReduce, true, false).map(|c| c.cost(512)),
            Some(Ps(59_504 + 543_746))
        );
    }
}
