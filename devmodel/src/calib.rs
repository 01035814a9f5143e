//! Calibrated issue costs of real trn2 words, fitted to AWS's per-instruction profiles.
//!
//! Produced by `neuron-emu calibrate` (cli/src/calibrate.rs): for each class (engine, opcode,
//! fp32 input or not, MATMUL after a transposing LDWEIGHTS or not) the issue interval on
//! silicon is fitted as `fixed + per_elem * elements per partition`, over every profiled
//! kernel in `shared/fixtures/real-profiles` (six akc kernels). A class enters this table only
//! if its samples come from at least two kernels and the fit predicts held-out kernels (fitted
//! without them) within 50% per instruction; the rest keep the uncalibrated cost table
//! (`docs/timing.md`). A test in `cli/tests/calibrate.rs` re-runs the fit on the fixtures and
//! checks that this table is what it gives.
//!
//! A MATMUL's class covers the LDWEIGHTS before it: on PE the next LDWEIGHTS overlaps the
//! running MATMUL, so only the pair's interval is well defined. The model charges the
//! LDWEIGHTS its issue overhead and the MATMUL the rest of the pair's interval.

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
}

impl OpCost {
    pub fn cost(&self, elems: u64) -> Ps {
        Ps(self.fixed.0 + elems.saturating_mul(self.per_elem_fs) / 1000)
    }
}

/// Elements per partition of a word's main access pattern (`src`, else `src0`, else `dst`),
/// and whether its input type is 4 bytes wide (a DMA's never counts: its issue cost is
/// descriptor work). The calibration samples and the device model share this definition.
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
    let wide = dt.is_some_and(|d| d.size() == 4) && ci.opcode != Opcode::DmaDirect2d;
    (elems, wide)
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

const fn op(
    engine: Engine,
    opcode: Opcode,
    wide: bool,
    transpose: bool,
    fixed_ps: u64,
    per_elem_fs: u64,
) -> OpCost {
    OpCost {
        engine,
        opcode,
        wide,
        transpose,
        fixed: Ps(fixed_ps),
        per_elem_fs,
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

/// trn2, fitted 2026-11-30 on the six akc profiles (`neuron-emu calibrate`, 672 intervals).
pub const TRN2: &[OpCost] = &[
    op(Engine::Pe, Opcode::Matmul, false, false, 269_000, 0),
    op(Engine::Pe, Opcode::Matmul, false, true, 112_692, 0),
    op(Engine::Pe, Opcode::Matmul, true, false, 0, 1_098_424),
    op(Engine::Pe, Opcode::Matmul, true, true, 153_283, 0),
    op(Engine::Act, Opcode::Activate, true, false, 600_366, 0),
    op(Engine::Pool, Opcode::DmaDirect2d, false, false, 583_000, 0),
    op(
        Engine::Dve,
        Opcode::TensorReduce,
        true,
        false,
        59_504,
        1_062_004,
    ),
    op(
        Engine::Dve,
        Opcode::TensorScalar,
        true,
        false,
        224_905,
        336_682,
    ),
    op(Engine::Sp, Opcode::DmaDirect2d, false, false, 595_000, 0),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_exact_on_every_key() {
        let c = lookup(TRN2, Engine::Pe, Opcode::Matmul, true, false).expect("fp32 matmul");
        assert_eq!(c.cost(128), Ps(140_598));
        assert!(lookup(TRN2, Engine::Act, Opcode::Matmul, true, false).is_none());
        assert!(lookup(TRN2, Engine::Dve, Opcode::TensorReduce, false, false).is_none());
        assert_eq!(
            lookup(TRN2, Engine::Dve, Opcode::TensorReduce, true, false).map(|c| c.cost(512)),
            Some(Ps(59_504 + 543_746))
        );
    }
}
