//! The floor `bench real` holds the emulator to (issue 16): the host's own rates, measured in
//! the same process (SGEMM on the kernels' tile shapes, memcpy in and out of cache), and the
//! floor of one execution from what its device stats say it needed (math by operand type, a
//! pass pair once; DMA bytes).

use neuron_devmodel::Stats;
use std::time::Instant;

/// memcpy buffer sizes: one that stays in cache, one larger than this host's caches.
pub(crate) const COPY_CACHE: usize = 1 << 20;
pub(crate) const COPY_MEMORY: usize = 256 << 20;
/// Models whose tensors (inputs + outputs) exceed this move their bytes at memory speed.
pub(crate) const CACHE_RESIDENT: u64 = 32 << 20;

/// Timed rounds per host-rate measurement; the best is kept (the host is shared and noisy).
pub(crate) const ROUNDS: usize = 7;

/// Work per second of `call` (`work` units per call): the call is repeated until a round
/// takes 5 ms, then the best of [`ROUNDS`] rounds counts.
fn best_rate(work: f64, mut call: impl FnMut()) -> f64 {
    let round = |reps: u32, call: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..reps {
            call();
        }
        t.elapsed().as_secs_f64()
    };
    let mut reps = 1u32;
    while round(reps, &mut call) < 5e-3 && reps < 1 << 20 {
        reps *= 2;
    }
    let best = (0..ROUNDS)
        .map(|_| round(reps, &mut call))
        .fold(f64::INFINITY, f64::min);
    work * reps as f64 / best.max(1e-9)
}

/// The host's rates, measured before each NEFF (the host is shared: its rates drift).
#[derive(Debug, Clone)]
pub(crate) struct HostRates {
    /// FLOP/s of the host SGEMM per tile shape (m, k, n) the kernels issue.
    pub(crate) sgemm: Vec<((usize, usize, usize), f64)>,
    /// FLOP/s of the device model's own AVX-512F kernel on the same shapes (empty without
    /// AVX-512F: `neuron_devmodel::gemm::panels`).
    pub(crate) panels: Vec<((usize, usize, usize), f64)>,
    /// FLOP/s of the AMX tile kernel on the same shapes (empty without AMX): bf16 operands,
    /// and fp16 operands split into two bf16 parts each (four tile products per product).
    pub(crate) amx_bf16: Vec<((usize, usize, usize), f64)>,
    /// FLOP/s of the panel kernel on `VDPBF16PS` for bf16 operands (empty without
    /// AVX512-BF16, or where its sums are not the FMA chain's: `gemm::dot`).
    pub(crate) dot_bf16: Vec<((usize, usize, usize), f64)>,
    pub(crate) amx_fp16: Vec<((usize, usize, usize), f64)>,
    /// memcpy bytes/s of a [`COPY_CACHE`] and a [`COPY_MEMORY`] buffer.
    pub(crate) memcpy_cache: f64,
    pub(crate) memcpy_memory: f64,
}

impl HostRates {
    pub(crate) fn measure() -> HostRates {
        // One PE-array load (128 x 128) against a 128-column and a full-bank (512) moving
        // tensor, accumulating as into PSUM.
        let sgemm = SHAPES
            .into_iter()
            .map(|(m, k, n)| {
                let a = neuron_kbuild::prng::uniform(21, k * m, 1.0);
                let b = neuron_kbuild::prng::uniform(22, k * n, 1.0);
                let mut c = vec![0f32; m * n];
                let r = best_rate(2.0 * (m * k * n) as f64, || {
                    crate::hostgemm::sgemm_at_b(m, k, n, &a, &b, 1.0, &mut c);
                });
                std::hint::black_box(&c);
                ((m, k, n), r)
            })
            .collect();
        let panels = SHAPES
            .into_iter()
            .filter(|_| neuron_devmodel::gemm::panels::available())
            .map(|(m, k, n)| {
                let a = neuron_kbuild::prng::uniform(21, k * m, 1.0);
                let b = neuron_kbuild::prng::uniform(22, k * n, 1.0);
                let mut c = vec![0f32; m * n];
                let r = best_rate(2.0 * (m * k * n) as f64, || {
                    neuron_devmodel::gemm::panels::dense(m, k, n, &a, &b, 1.0, &mut c);
                });
                std::hint::black_box(&c);
                ((m, k, n), r)
            })
            .collect();
        let dot_bf16 = SHAPES
            .into_iter()
            .filter_map(|(m, k, n)| Some(((m, k, n), dot_rate(m, k, n)?)))
            .collect();
        // On a thread of its own: a thread that has used the tiles gets ~11 KiB signal frames,
        // which would leave the MMIO trap handler (run on Rust's alternate signal stack, sized
        // by AT_MINSIGSTKSZ) too little room on this thread, which stores to the device's
        // mapped registers. The device model too runs tiles only on the device thread.
        let amx = |parts| {
            if !neuron_devmodel::gemm::amx::available() {
                return Vec::new();
            }
            std::thread::scope(|s| {
                s.spawn(|| {
                    SHAPES
                        .into_iter()
                        .filter_map(|(m, k, n)| Some(((m, k, n), amx_rate(m, k, n, parts)?)))
                        .collect()
                })
                .join()
                .unwrap_or_default()
            })
        };
        use neuron_devmodel::gemm::amx::Parts;
        HostRates {
            sgemm,
            panels,
            amx_bf16: amx(Parts::Exact),
            dot_bf16,
            amx_fp16: amx(Parts::Split),
            memcpy_cache: memcpy_rate(COPY_CACHE),
            memcpy_memory: memcpy_rate(COPY_MEMORY),
        }
    }

    /// The best fp32 rate: `matrixmultiply` or the panel kernel, whichever is faster here.
    pub(crate) fn best_sgemm(&self) -> f64 {
        self.sgemm
            .iter()
            .chain(&self.panels)
            .map(|(_, r)| *r)
            .fold(1.0, f64::max)
    }

    /// FLOP/s of a MATMUL by moving dtype code: the host's best kernel for it. fp32 (and
    /// everything else) has only the SGEMM; bf16 and fp8 also the AMX tiles where the host
    /// has AMX and `VDPBF16PS` where it has AVX512-BF16, fp16 the tiles on split operands.
    pub(crate) fn flops_by_dtype(&self) -> [f64; 16] {
        use neuron_isa::Dtype;
        let best =
            |v: &[((usize, usize, usize), f64)]| v.iter().map(|(_, r)| *r).fold(0.0, f64::max);
        let sgemm = self.best_sgemm();
        let mut out = [sgemm; 16];
        for dt in [Dtype::Bf16, Dtype::Fp8E3, Dtype::Fp8E4, Dtype::Fp8E5] {
            out[dt as usize] = sgemm.max(best(&self.amx_bf16)).max(best(&self.dot_bf16));
        }
        out[Dtype::F16 as usize] = sgemm.max(best(&self.amx_fp16));
        out
    }

    /// memcpy bytes/s for a model with `tensor_bytes` of inputs and outputs, and which.
    pub(crate) fn memcpy_for(&self, tensor_bytes: u64) -> (f64, &'static str) {
        if tensor_bytes > CACHE_RESIDENT {
            (self.memcpy_memory, "memory")
        } else {
            (self.memcpy_cache, "cache")
        }
    }
}

/// The GEMM shapes rates are measured on: one PE-array load (128 x 128) against a
/// 128-column and a full-bank (512) moving tensor.
const SHAPES: [(usize, usize, usize); 2] = [(128, 128, 128), (128, 128, 512)];

/// FLOP/s (of the unsplit product) of the AMX tile kernel on operands already packed with
/// these parts: the device model packs weights once per LDWEIGHTS, so the floor does too.
fn amx_rate(m: usize, k: usize, n: usize, parts: neuron_devmodel::gemm::amx::Parts) -> Option<f64> {
    use neuron_devmodel::gemm::amx::{gemm, PackedA, PackedB};
    let a = neuron_kbuild::prng::uniform(21, k * m, 1.0);
    let b = neuron_kbuild::prng::uniform(22, k * n, 1.0);
    let (mut pa, mut pb, mut c) = (PackedA::default(), PackedB::default(), Vec::new());
    if !(PackedA::pack(&a, m, k, parts, parts, &mut pa)
        && PackedB::pack(&b, k, n, parts, parts, &mut pb)
        && gemm(&pa, &pb, &mut c))
    {
        return None;
    }
    let r = best_rate(2.0 * (m * k * n) as f64, || {
        gemm(&pa, &pb, &mut c);
    });
    std::hint::black_box(&c);
    Some(r)
}

/// FLOP/s of the panel kernel on `VDPBF16PS` (`gemm::dot`) with bf16 operands whose sums
/// it proves exact (the device model's case), weights packed once as per LDWEIGHTS; None
/// where the host cannot run it.
fn dot_rate(m: usize, k: usize, n: usize) -> Option<f64> {
    use neuron_devmodel::gemm::dot;
    if !dot::available() {
        return None;
    }
    let bf16 = |x: f32| half::bf16::from_f32(x);
    let w: Vec<f32> = neuron_kbuild::prng::uniform(21, k * m, 1.0)
        .iter()
        .map(|x| bf16(*x).to_f32())
        .collect();
    let b: Vec<u16> = neuron_kbuild::prng::uniform(22, k * n, 1.0)
        .iter()
        .map(|x| bf16(*x).to_bits())
        .collect();
    let (mut a, mut c) = (dot::PackedA::default(), vec![0f32; m * n]);
    if !(a.ensure(&w, m, k) && dot::dense(n, &w, &a, &b, 1.0, &mut c)) {
        return None;
    }
    let r = best_rate(2.0 * (m * k * n) as f64, || {
        dot::dense(n, &w, &a, &b, 1.0, &mut c);
    });
    std::hint::black_box(&c);
    Some(r)
}

/// Bytes/s of `copy_from_slice` between two `len`-byte buffers (bytes copied, not read+written).
fn memcpy_rate(len: usize) -> f64 {
    let src = vec![1u8; len];
    let mut dst = vec![0u8; len];
    let r = best_rate(len as f64, || {
        dst.copy_from_slice(std::hint::black_box(&src));
    });
    std::hint::black_box(&dst);
    r
}

/// The floor of one execution (seconds): its math at the host's rates, its bytes at memcpy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Floor {
    pub(crate) math: f64,
    pub(crate) bytes: f64,
}

/// Seconds to move `onchip` operand bytes (`Stats::onchip_bytes`: reads and writes counted
/// apart) at `memcpy` bytes/s, where a copy of n bytes reads n and writes n: the on-chip
/// traffic the floor leaves out, at the rate of copies within the host's cache (a
/// lower bound: a core's SBUF is 24 MiB).
pub(crate) fn onchip_seconds(onchip: u64, memcpy: f64) -> f64 {
    onchip as f64 / 2.0 / memcpy.max(1.0)
}

impl Floor {
    /// `math_macs`: the kernel's multiply-adds by moving dtype code (`Stats::math_macs`, a
    /// pass pair once); `flops`: FLOP/s by the same code; `bytes` moved at `memcpy` bytes/s.
    pub(crate) fn of(math_macs: &[u64; 16], flops: &[f64; 16], bytes: u64, memcpy: f64) -> Floor {
        let math = math_macs
            .iter()
            .zip(flops)
            .filter(|(m, _)| **m > 0)
            .map(|(m, r)| 2.0 * *m as f64 / r.max(1.0))
            .sum();
        Floor {
            math,
            bytes: bytes as f64 / memcpy.max(1.0),
        }
    }

    pub(crate) fn total(&self) -> f64 {
        self.math + self.bytes
    }
}

/// What the timed executions did (stats after minus before), per execution.
pub(crate) struct PerExecution {
    /// Multiply-adds by moving dtype code.
    pub(crate) math: [u64; 16],
    pub(crate) dma_bytes: u64,
}

pub(crate) fn per_execution(before: &Stats, after: &Stats, repeat: u32) -> PerExecution {
    let r = u64::from(repeat.max(1));
    let mut math = [0u64; 16];
    for (i, m) in math.iter_mut().enumerate() {
        *m = after.math_macs[i].saturating_sub(before.math_macs[i]) / r;
    }
    PerExecution {
        math,
        dma_bytes: after.dma_bytes.saturating_sub(before.dma_bytes) / r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_isa::Dtype;

    fn macs(by: &[(Dtype, u64)]) -> [u64; 16] {
        let mut m = [0; 16];
        for (d, n) in by {
            m[*d as usize] = *n;
        }
        m
    }

    /// Per-type math at per-type rates, plus bytes at memcpy speed, by hand:
    /// fp32 1e9 MACs at 100 GFLOP/s = 20 ms; bf16 2e9 at 400 GFLOP/s = 10 ms;
    /// 1e9 bytes at 10 GB/s = 100 ms; 130 ms in all.
    #[test]
    fn the_floor_is_math_by_type_plus_bytes() {
        let mut flops = [100e9; 16];
        flops[Dtype::Bf16 as usize] = 400e9;
        let f = Floor::of(
            &macs(&[(Dtype::F32, 1_000_000_000), (Dtype::Bf16, 2_000_000_000)]),
            &flops,
            1_000_000_000,
            10e9,
        );
        assert!((f.math - 0.030).abs() < 1e-12, "{f:?}");
        assert!((f.bytes - 0.100).abs() < 1e-12, "{f:?}");
        assert!((f.total() - 0.130).abs() < 1e-12, "{f:?}");
        // A type with no math costs nothing, whatever its rate.
        flops[Dtype::F16 as usize] = 0.0;
        assert_eq!(Floor::of(&macs(&[]), &flops, 0, 10e9).total(), 0.0);
    }

    /// A pass pair counted once: the stats' fp32 math of an fp32 K=128, M=128, N=512 product
    /// issued as a LOW and a HIGH pass is 128·128·512 = 8,388,608 multiply-adds, 16.78 MFLOP:
    /// 0.16777216 ms at 100 GFLOP/s, where the two passes would have been twice that.
    #[test]
    fn per_execution_math_counts_a_pair_once_and_divides_by_the_repeats() {
        let before = Stats::default();
        let mut after = Stats::default();
        // Three executions of one pair each, 3 x 4096 bytes of DMA.
        after.math_macs[Dtype::F32 as usize] = 3 * 128 * 128 * 512;
        after.sgemm_macs = 3 * 2 * 128 * 128 * 512; // as if unfused: not what the floor uses
        after.dma_bytes = 3 * 4096;
        let pe = per_execution(&before, &after, 3);
        assert_eq!(pe.math[Dtype::F32 as usize], 8_388_608);
        assert_eq!(pe.dma_bytes, 4096);
        let f = Floor::of(&pe.math, &[100e9; 16], 0, 1e9);
        assert!((f.math - 0.16777216e-3).abs() < 1e-15, "{f:?}");
    }

    /// On-chip bytes count reads and writes apart; a memcpy of n bytes moves 2n of them:
    /// 2e9 operand bytes at 10 GB/s of memcpy are 100 ms.
    #[test]
    fn onchip_bytes_are_half_a_copy_each() {
        assert!((onchip_seconds(2_000_000_000, 10e9) - 0.1).abs() < 1e-12);
        assert_eq!(onchip_seconds(0, 10e9), 0.0);
        // A zero rate (never measured) does not divide by zero.
        assert!(onchip_seconds(10, 0.0).is_finite());
    }
}
