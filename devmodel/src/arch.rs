//! Arch profiles: the numbers the device model needs, as data.
//!
//! Architecture facts come from `nki-isa-and-cost-model.md` §1 and `driver-abi.md` §2.4/§5/§6.
//! Costs live in [`CostTable`] so calibration changes data, not code paths.

use crate::time::Ps;
use neuron_abi::arch::Arch;

/// Offsets inside one NeuronCore's (TPB's) device-address window (shared with the runtime).
pub use neuron_abi::tpb;

/// Per-instruction and per-transfer costs (the "simple" model; the timing model comes later).
#[derive(Debug, Clone, PartialEq)]
pub struct CostTable {
    /// Engine clocks in MHz, indexed by `Engine::index()` (PE, ACT, POOL, DVE, SP).
    pub engine_mhz: [u32; 5],
    /// Fixed issue overhead per instruction, in engine cycles.
    pub instr_overhead_cycles: u64,
    /// Elements per cycle per partition lane for ACT/POOL/DVE streaming ops.
    pub stream_elems_per_cycle: u64,
    /// PE: moving-tile columns per cycle for 16-bit types; fp32 runs at a quarter of that.
    pub pe_cols_per_cycle: u64,
    /// DMA: bytes per ns per DMA engine (achievable peak), and fixed latency per descriptor.
    pub dma_bytes_per_ns: u32,
    pub dma_desc_latency: Ps,
    /// Calibrated issue costs of real trn2 words by class (`calib.rs`); words of other
    /// classes use the figures above.
    pub real: Vec<crate::calib::OpCost>,
    /// Calibrated DMA_DIRECT2D transfers (`calib.rs`); `None`: each transfer costs
    /// `dma_desc_latency` + bytes / `dma_bytes_per_ns`, with no sharing.
    pub dma2d: Option<crate::calib::Dma2dCost>,
    /// Calibrated mechanisms outside one word's class (start hand-off, peer WRITE,
    /// software-DGE start-up); `None`: none of them is modelled.
    pub mech: Option<crate::calib::Mechanisms>,
    /// Service times of DVE/ACT compute words by class (`calib::TRN2_SERVICE`): they replace
    /// the interval of `real` or of the table; empty: not modelled.
    pub service: Vec<crate::calib::OpCost>,
    /// Wake-up of a DVE/ACT compute word after a blocking wait, by engine
    /// (`calib::TRN2_WAKE`); zero: none.
    pub wake: [Ps; 5],
}

impl CostTable {
    /// Functional mode: the same instructions, data and ordering (semaphores, events, DMA
    /// completions) with no timing model: every word costs one engine cycle, every DMA
    /// transfer nothing, no calibrated class or mechanism. Device times are then only an
    /// order of events; what it is for is measuring what the timing model costs the host
    /// (`bench real`'s timed / functional column).
    pub fn functional(&self) -> CostTable {
        CostTable {
            engine_mhz: self.engine_mhz,
            instr_overhead_cycles: 1,
            stream_elems_per_cycle: u64::MAX,
            pe_cols_per_cycle: u64::MAX,
            dma_bytes_per_ns: u32::MAX,
            dma_desc_latency: Ps::ZERO,
            real: Vec::new(),
            dma2d: None,
            mech: None,
            service: Vec::new(),
            wake: [Ps::ZERO; 5],
        }
    }
}

/// Everything the device model needs to know about one architecture.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchProfile {
    pub arch: Arch,
    pub nc_count: usize,
    pub dma_engines: usize,
    pub sbuf_partition_bytes: usize,
    pub psum_partition_bytes: usize,
    pub partitions: usize,
    pub cost: CostTable,
}

impl ArchProfile {
    pub fn new(arch: Arch) -> ArchProfile {
        let (sbuf, mhz) = match arch {
            // Trn1/Inf2: 24 MiB SBUF = 128 x 192 KiB; PE 2.8 GHz, DVE 1.12, ACT/POOL 1.4.
            Arch::V2Trn1 | Arch::V2Inf2 => (192 * 1024, [2800, 1400, 1400, 1120, 1400]),
            // Trn2: 128 x 224 KiB (the real def.json reserves bytes up to 229376 per partition);
            // PE 2.4 GHz, DVE 0.96, ACT/POOL 1.2.
            _ => (224 * 1024, [2400, 1200, 1200, 960, 1200]),
        };
        ArchProfile {
            arch,
            nc_count: arch.nc_count() as usize,
            dma_engines: arch.dma_engines() as usize,
            sbuf_partition_bytes: sbuf,
            psum_partition_bytes: 16 * 1024,
            partitions: 128,
            cost: CostTable {
                engine_mhz: mhz,
                instr_overhead_cycles: 64,
                stream_elems_per_cycle: 1,
                pe_cols_per_cycle: 1,
                dma_bytes_per_ns: if matches!(arch, Arch::V2Trn1 | Arch::V2Inf2) {
                    17
                } else {
                    23
                },
                dma_desc_latency: Ps(64_000),
                real: if arch == Arch::V3Trn2 {
                    crate::calib::TRN2.to_vec()
                } else {
                    Vec::new()
                },
                dma2d: (arch == Arch::V3Trn2).then_some(crate::calib::TRN2_DMA2D),
                mech: (arch == Arch::V3Trn2).then_some(crate::calib::TRN2_MECH),
                service: if arch == Arch::V3Trn2 {
                    crate::calib::TRN2_SERVICE.to_vec()
                } else {
                    Vec::new()
                },
                wake: if arch == Arch::V3Trn2 {
                    crate::calib::TRN2_WAKE
                } else {
                    [Ps::ZERO; 5]
                },
            },
        }
    }

    /// Base device address of NeuronCore `nc`'s TPB window (the SBUF mmap key of
    /// `driver-abi.md` §2.4).
    pub fn tpb_base(&self, nc: usize) -> u64 {
        // nc is always < nc_count here; the fallback is an address no window matches.
        self.arch
            .tpb_sbuf_mmap_offset(nc as u32)
            .unwrap_or(u64::MAX - tpb::WINDOW)
    }

    /// The NeuronCore whose TPB window holds `addr`, and the offset inside it.
    pub fn tpb_of(&self, addr: u64) -> Option<(usize, u64)> {
        (0..self.nc_count).find_map(|nc| {
            let base = self.tpb_base(nc);
            (addr >= base && addr < base + tpb::WINDOW).then(|| (nc, addr - base))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functional mode keeps the clocks and drops every cost beyond one cycle a word.
    #[test]
    fn functional_costs_are_one_cycle_and_no_transfer_time() {
        let timed = ArchProfile::new(Arch::V3Trn2).cost;
        let f = timed.functional();
        assert_eq!(f.engine_mhz, timed.engine_mhz);
        assert_eq!((f.instr_overhead_cycles, f.dma_desc_latency), (1, Ps::ZERO));
        assert!(f.real.is_empty() && f.dma2d.is_none() && f.mech.is_none());
        assert!(f.service.is_empty() && f.wake == [Ps::ZERO; 5]);
        assert_eq!(Ps::from_bytes(1 << 30, f.dma_bytes_per_ns), Ps(251));
    }
}
