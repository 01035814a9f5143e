//! The project's deterministic data generator, simple enough to re-implement anywhere
//! (`fixtures/gen_mlp_golden.py` does, independently).
//!
//! SplitMix64: `state += 0x9E3779B97F4A7C15; z = state; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
//! z = (z ^ z>>27) * 0x94D049BB133111EB; z ^= z>>31` (all mod 2^64). A uniform value in
//! [-1, 1) is `(z >> 40) / 2^23 - 1`, exact in f32 (24 bits).

/// SplitMix64.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), a multiple of 2^-23.
    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32) / 8_388_608.0 - 1.0
    }
}

/// `n` uniform values in [-1, 1) scaled by `scale` (use a power of two to stay exact).
pub fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut g = SplitMix64::new(seed);
    (0..n).map(|_| g.uniform() * scale).collect()
}

/// The seed of the built-in input `index` (model order) for run seed `run_seed`.
pub fn input_seed(run_seed: u64, index: usize) -> u64 {
    run_seed.wrapping_mul(1000).wrapping_add(index as u64 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Reference values of SplitMix64 from seed 0 (the published test vector).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let v = uniform(1, 1000, 1.0);
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
    }
}
