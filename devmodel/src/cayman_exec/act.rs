//! Activation functions by the `func_id` of the NEFF's activation table files
//! (`neuron_isa::cayman::layout::ACT_FUNCS`), computed in f32. The hardware interpolates
//! tables; these are the functions the tables approximate (`docs/isa/cayman.md` §9).
//!
//! The loops are compiled three times: for the build's baseline (SSE2 on x86-64) and, chosen
//! at run time, for AVX2 and for AVX-512F. Every operation is an IEEE elementwise one (no
//! contraction into FMA), so all give the same bits, only 4, 8 or 16 lanes at a time
//! (`tests::wide_loops_and_portable_agree`).
#![allow(unsafe_code)]

use super::OpFault;

/// The widest loop kind this host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Simd {
    Portable,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

/// The loop kind [`Func::apply`] runs on this host: `avx512`, `avx2` or `portable`.
pub fn simd_path() -> &'static str {
    match simd() {
        Simd::Avx512 => "avx512",
        Simd::Avx2 => "avx2",
        Simd::Portable => "portable",
    }
}

pub(super) fn simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        // std caches the CPUID reads.
        if std::is_x86_feature_detected!("avx512f") {
            return Simd::Avx512;
        }
        if std::is_x86_feature_detected!("avx2") {
            return Simd::Avx2;
        }
    }
    Simd::Portable
}

/// The functions this model computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Func {
    /// 0 (akc), 1 identity, 128 copy: `scale·x + bias`.
    Identity,
    Exp,
    Ln,
    Rsqrt,
    Silu,
    Relu,
    Tanh,
    Square,
    Abs,
    Sign,
    /// 130 memset_zero.
    Zero,
}

impl Func {
    pub(super) fn of(code: u64) -> Result<Func, OpFault> {
        Ok(match code {
            0 | 1 | 128 => Func::Identity,
            7 => Func::Exp,
            10 => Func::Ln,
            29 => Func::Rsqrt,
            36 => Func::Silu,
            2 => Func::Relu,
            6 => Func::Tanh,
            30 => Func::Square,
            33 => Func::Abs,
            31 => Func::Sign,
            130 => Func::Zero,
            f => {
                return Err(OpFault::bad(format!(
                    "activation function code {f} not known"
                )))
            }
        })
    }

    /// `row[i] = f(row[i]·scale + bias)`. One loop per function so each vectorises.
    pub(super) fn apply(self, row: &mut [f32], scale: f32, bias: f32) {
        match simd() {
            // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { self.apply_avx512(row, scale, bias) },
            // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { self.apply_avx2(row, scale, bias) },
            _ => self.body(row, scale, bias),
        }
    }

    /// [`Func::body`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn apply_avx2(self, row: &mut [f32], scale: f32, bias: f32) {
        self.body(row, scale, bias)
    }

    /// [`Func::body`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn apply_avx512(self, row: &mut [f32], scale: f32, bias: f32) {
        self.body(row, scale, bias)
    }

    #[inline(always)]
    fn body(self, row: &mut [f32], scale: f32, bias: f32) {
        let it = row.iter_mut();
        match self {
            Func::Identity => it.for_each(|v| *v = *v * scale + bias),
            Func::Exp => it.for_each(|v| *v = crate::fastmath::exp_f32(*v * scale + bias)),
            Func::Ln => it.for_each(|v| *v = (*v * scale + bias).ln()),
            Func::Rsqrt => it.for_each(|v| *v = 1.0 / (*v * scale + bias).sqrt()),
            Func::Silu => it.for_each(|v| *v = crate::fastmath::silu_f32(*v * scale + bias)),
            Func::Relu => it.for_each(|v| *v = (*v * scale + bias).max(0.0)),
            Func::Tanh => it.for_each(|v| *v = (*v * scale + bias).tanh()),
            Func::Square => it.for_each(|v| {
                let x = *v * scale + bias;
                *v = x * x
            }),
            Func::Abs => it.for_each(|v| *v = (*v * scale + bias).abs()),
            Func::Sign => it.for_each(|v| {
                let x = *v * scale + bias;
                *v = if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }),
            Func::Zero => it.for_each(|v| *v = 0.0),
        }
    }
}

/// Values every loop test includes: ±0, ±inf, NaN and a subnormal of each sign.
#[cfg(test)]
pub(super) const SPECIAL_F32: [f32; 7] = [
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-40,
    -1e-40,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX2 and AVX-512 loops give the portable loops' bits, for every function, on
    /// ordinary values, the edges of exp's range, ±0, ±inf, NaN and subnormals.
    #[test]
    fn wide_loops_and_portable_agree() {
        #[cfg(target_arch = "x86_64")]
        {
            /// A loop compiled for a CPU feature.
            type Wide = unsafe fn(Func, &mut [f32], f32, f32);
            let kinds: [(&str, bool, Wide); 2] = [
                (
                    "AVX2",
                    std::is_x86_feature_detected!("avx2"),
                    Func::apply_avx2,
                ),
                (
                    "AVX-512F",
                    std::is_x86_feature_detected!("avx512f"),
                    Func::apply_avx512,
                ),
            ];
            for (name, present, wide) in kinds {
                if !present {
                    eprintln!("SKIPPED: no {name} on this host; its loops did not run");
                    continue;
                }
                eprintln!("{name} present: comparing its loops with the portable ones");
                // SAFETY: the feature was detected just above.
                compare(|f, row, scale, bias| unsafe { wide(f, row, scale, bias) });
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: not x86-64; only the portable loops exist");
    }

    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn compare(wide: impl Fn(Func, &mut [f32], f32, f32)) {
        let mut xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.0371).collect();
        xs.extend(SPECIAL_F32);
        xs.extend([88.7, 88.8, -103.0, -104.0, f32::MAX, f32::MIN]);
        for code in [0, 7, 10, 29, 36, 2, 6, 30, 33, 31, 130] {
            let f = Func::of(code).expect("known code");
            for (scale, bias) in [(1.0, 0.0), (-0.5, 0.25), (3.0, -1.0)] {
                let mut a = xs.clone();
                let mut b = xs.clone();
                f.body(&mut a, scale, bias);
                wide(f, &mut b, scale, bias);
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    assert_eq!(
                        x.to_bits(),
                        y.to_bits(),
                        "{f:?} of {} (scale {scale}, bias {bias})",
                        xs[i]
                    );
                }
            }
        }
    }

    /// A function's definition in f64.
    type Def = fn(f64) -> f64;

    /// Each function against its definition in f64, rounded once to f32.
    #[test]
    fn functions_match_their_definitions() {
        let xs: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.37 + 0.011).collect();
        let (scale, bias) = (0.75f32, 0.125f32);
        let cases: [(u64, Def, f64); 9] = [
            (1, |x| x, 0.0),
            (128, |x| x, 0.0),
            (7, f64::exp, 2e-7),
            (10, f64::ln, 2e-7),
            (29, |x| 1.0 / x.sqrt(), 2e-7),
            (36, |x| x / (1.0 + (-x).exp()), 4e-7),
            (2, |x| x.max(0.0), 0.0),
            (6, f64::tanh, 4e-7),
            (30, |x| x * x, 2e-7),
        ];
        for (code, f, rel) in cases {
            let mut row = xs.clone();
            Func::of(code).expect("known").apply(&mut row, scale, bias);
            for (x, got) in xs.iter().zip(&row) {
                let arg = (*x * scale + bias) as f64;
                let want = f(arg);
                if want.is_nan() {
                    assert!(got.is_nan(), "func {code} at {arg}: {got}");
                    continue;
                }
                let err = (*got as f64 - want).abs();
                assert!(
                    err <= rel * want.abs() + 1e-30,
                    "func {code} at {arg}: {got} vs {want}"
                );
            }
        }
        let mut z = vec![3.0f32; 4];
        Func::of(130).expect("memset_zero").apply(&mut z, 1.0, 1.0);
        assert_eq!(z, vec![0.0; 4]);
        assert!(Func::of(99).is_err());
    }
}
