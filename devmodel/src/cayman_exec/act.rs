//! Activation functions by the `func_id` of the NEFF's activation table files
//! (`neuron_isa::cayman::layout::ACT_FUNCS`), computed in f32. The hardware interpolates
//! tables; these are the functions the tables approximate (`docs/isa/cayman.md` §9).
//!
//! The loops are compiled three times: for the build's baseline (SSE2 on x86-64) and, chosen
//! at run time, for AVX2 with FMA and for AVX-512F. Every operation is an IEEE elementwise one,
//! the fused multiply-adds `exp` asks for (`f32::mul_add`, `fastmath`) included, so all give
//! the same bits, only 4, 8 or 16 lanes at a time (`tests::wide_loops_and_portable_agree`);
//! the baseline build computes those with libm's `fmaf` (slower, the same bits).
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

/// The loop kind [`Func::apply_into`] runs on this host: `avx512`, `avx2` or `portable`.
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
        // The AVX2 loops are compiled with FMA as well (`exp`'s fused multiply-adds).
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
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

/// `$body` with `$g` bound to the function's elementwise closure `(x, scale, bias) ->
/// f(x·scale + bias)`, one match arm per function so each loop is compiled (and vectorised)
/// for its own closure. The one definition of each function: the loops with one scale and
/// bias per row ([`each_func!`]) and with one per element ([`Func::apply_each`]) share it.
macro_rules! each_func_sb {
    ($func:expr, $g:ident => $body:expr) => {{
        match $func {
            Func::Identity => {
                let $g = |v: f32, s: f32, b: f32| v * s + b;
                $body
            }
            Func::Exp => {
                let $g = |v: f32, s: f32, b: f32| crate::fastmath::exp_f32(v * s + b);
                $body
            }
            Func::Ln => {
                let $g = |v: f32, s: f32, b: f32| (v * s + b).ln();
                $body
            }
            Func::Rsqrt => {
                let $g = |v: f32, s: f32, b: f32| 1.0 / (v * s + b).sqrt();
                $body
            }
            Func::Silu => {
                let $g = |v: f32, s: f32, b: f32| crate::fastmath::silu_f32(v * s + b);
                $body
            }
            Func::Relu => {
                let $g = |v: f32, s: f32, b: f32| (v * s + b).max(0.0);
                $body
            }
            Func::Tanh => {
                let $g = |v: f32, s: f32, b: f32| (v * s + b).tanh();
                $body
            }
            Func::Square => {
                let $g = |v: f32, s: f32, b: f32| {
                    let x = v * s + b;
                    x * x
                };
                $body
            }
            Func::Abs => {
                let $g = |v: f32, s: f32, b: f32| (v * s + b).abs();
                $body
            }
            Func::Sign => {
                let $g = |v: f32, s: f32, b: f32| {
                    let x = v * s + b;
                    if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        x
                    }
                };
                $body
            }
            Func::Zero => {
                let $g = |_: f32, _: f32, _: f32| 0.0f32;
                $body
            }
        }
    }};
}

/// `$body` with `$g` bound to `x -> f(x·scale + bias)` for one scale and bias.
macro_rules! each_func {
    ($func:expr, $scale:expr, $bias:expr, $g:ident => $body:expr) => {{
        let (s0, b0) = ($scale, $bias);
        each_func_sb!($func, h => {
            let $g = |v: f32| h(v, s0, b0);
            $body
        })
    }};
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

    /// `out[i] = f(src[i]·scale + bias)` for as many elements as both hold: the source read
    /// where it lies, the results written where they go (a destination row in storage, or
    /// a scratch row). One loop per function so each vectorises.
    pub(super) fn apply_into(self, src: &[f32], out: &mut [f32], scale: f32, bias: f32) {
        match simd() {
            // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { self.apply_into_avx512(src, out, scale, bias) },
            // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { self.apply_into_avx2(src, out, scale, bias) },
            _ => self.body_into(src, out, scale, bias),
        }
    }

    /// [`Func::body_into`] compiled for AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_into_avx2(self, src: &[f32], out: &mut [f32], scale: f32, bias: f32) {
        self.body_into(src, out, scale, bias)
    }

    /// [`Func::body_into`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn apply_into_avx512(self, src: &[f32], out: &mut [f32], scale: f32, bias: f32) {
        self.body_into(src, out, scale, bias)
    }

    #[inline(always)]
    fn body_into(self, src: &[f32], out: &mut [f32], scale: f32, bias: f32) {
        each_func!(self, scale, bias, g => {
            out.iter_mut().zip(src).for_each(|(o, v)| *o = g(*v))
        });
    }

    /// `vals[i] = f(vals[i]·scales[i] + biases[i])` (each slice as long as `vals`; extra
    /// elements of the others are ignored): a whole operand of short rows in one loop, with
    /// each row's scale and bias repeated per element. A row of a few elements alone would
    /// run the wide loops' scalar tail (`docs/performance.md`, 2026-12-05 sixth session);
    /// the same bits as [`Func::apply_into`] row by row.
    pub(super) fn apply_each(self, vals: &mut [f32], scales: &[f32], biases: &[f32]) {
        match simd() {
            // SAFETY: the CPU has AVX-512F (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { self.apply_each_avx512(vals, scales, biases) },
            // SAFETY: the CPU has AVX2 (checked at run time, cached by std).
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => unsafe { self.apply_each_avx2(vals, scales, biases) },
            _ => self.body_each(vals, scales, biases),
        }
    }

    /// [`Func::body_each`] compiled for AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_each_avx2(self, vals: &mut [f32], scales: &[f32], biases: &[f32]) {
        self.body_each(vals, scales, biases)
    }

    /// [`Func::body_each`] compiled for AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn apply_each_avx512(self, vals: &mut [f32], scales: &[f32], biases: &[f32]) {
        self.body_each(vals, scales, biases)
    }

    #[inline(always)]
    fn body_each(self, vals: &mut [f32], scales: &[f32], biases: &[f32]) {
        each_func_sb!(self, g => {
            vals.iter_mut()
                .zip(scales.iter().zip(biases))
                .for_each(|(v, (s, b))| *v = g(*v, *s, *b))
        })
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

    /// The AVX2 and AVX-512 loops give the portable loop's bits, for every function, on
    /// ordinary values, the edges of exp's range, ±0, ±inf, NaN and subnormals.
    #[test]
    fn wide_loops_and_portable_agree() {
        #[cfg(target_arch = "x86_64")]
        {
            /// A loop compiled for a CPU feature.
            type Wide = unsafe fn(Func, &[f32], &mut [f32], f32, f32);
            let kinds: [(&str, bool, Wide); 2] = [
                (
                    "AVX2+FMA",
                    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
                    Func::apply_into_avx2,
                ),
                (
                    "AVX-512F",
                    std::is_x86_feature_detected!("avx512f"),
                    Func::apply_into_avx512,
                ),
            ];
            for (name, present, wide) in kinds {
                if !present {
                    eprintln!("SKIPPED: no {name} on this host; its loops did not run");
                    continue;
                }
                eprintln!("{name} present: comparing its loops with the portable ones");
                // SAFETY: the feature was detected just above.
                compare(|f, src, out, scale, bias| unsafe { wide(f, src, out, scale, bias) });
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        eprintln!("SKIPPED: not x86-64; only the portable loops exist");
    }

    /// [`Func::apply_into`] (this host's widest loops) gives the portable loop's bits, and
    /// writes as many results as both rows hold: a shorter destination takes the first
    /// results, a longer one keeps what it held past the source's end.
    #[test]
    fn the_chosen_loop_fills_what_both_rows_hold() {
        eprintln!("loops: {}", simd_path());
        compare(|f, src, out, scale, bias| f.apply_into(src, out, scale, bias));
        let f = Func::of(7).expect("exp");
        let src: Vec<f32> = (0..40).map(|i| i as f32 * 0.25 - 3.0).collect();
        let mut want = vec![0.0; 40];
        f.body_into(&src, &mut want, 0.5, 0.125);
        let mut short = vec![9.0; 21];
        f.apply_into(&src, &mut short, 0.5, 0.125);
        assert_eq!(short, want[..21]);
        let mut long = vec![9.0; 45];
        f.apply_into(&src, &mut long, 0.5, 0.125);
        assert_eq!(long[..40], want[..]);
        assert_eq!(long[40..], [9.0; 5]);
    }

    /// [`Func::apply_each`] on a whole operand of short rows, each row with its own scale
    /// and bias repeated per element, gives each row's bits from the portable loop of one
    /// scale and bias: on this host's widest loops, on every compiled wide loop the host has,
    /// and on the portable per-element loop; rows of 1 to 17 elements (so the wide loops'
    /// vectors straddle rows and their tails vary).
    #[test]
    fn loops_with_a_scale_and_bias_per_element_agree_row_by_row() {
        eprintln!("loops: {}", simd_path());
        let mut xs: Vec<f32> = (-700..=700).map(|i| i as f32 * 0.1371).collect();
        xs.extend(SPECIAL_F32);
        xs.extend([88.7, 88.8, -103.0, -104.0, f32::MAX, f32::MIN]);
        type Each = fn(Func, &mut [f32], &[f32], &[f32]);
        let mut loops: Vec<(&str, Each)> = vec![
            ("chosen", |f, v, s, b| f.apply_each(v, s, b)),
            ("portable", |f, v, s, b| f.body_each(v, s, b)),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: AVX2 and FMA were detected just above.
                loops.push(("AVX2+FMA", |f, v, s, b| unsafe {
                    f.apply_each_avx2(v, s, b)
                }));
            } else {
                eprintln!(
                    "SKIPPED: no AVX2 with FMA on this host; its per-element loop did not run"
                );
            }
            if std::is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512F was detected just above.
                loops.push(("AVX-512F", |f, v, s, b| unsafe {
                    f.apply_each_avx512(v, s, b)
                }));
            } else {
                eprintln!("SKIPPED: no AVX-512F on this host; its per-element loop did not run");
            }
        }
        for code in [0, 7, 10, 29, 36, 2, 6, 30, 33, 31, 130] {
            let f = Func::of(code).expect("known code");
            for n in 1..=17usize {
                let rows = xs.len() / n;
                let vals = &xs[..rows * n];
                // Row r: scale and bias from a short cycle, so neighbouring rows differ.
                let sb = |r: usize| -> (f32, f32) {
                    [(1.0, 0.0), (-0.5, 0.25), (3.0, -1.0), (0.125, 2.5)][r % 4]
                };
                let mut want = vals.to_vec();
                for (r, (row, src)) in want
                    .chunks_exact_mut(n)
                    .zip(vals.chunks_exact(n))
                    .enumerate()
                {
                    let (s, b) = sb(r);
                    f.body_into(src, row, s, b);
                }
                let scales: Vec<f32> = (0..rows * n).map(|i| sb(i / n).0).collect();
                let biases: Vec<f32> = (0..rows * n).map(|i| sb(i / n).1).collect();
                for (name, each) in &loops {
                    let mut got = vals.to_vec();
                    each(f, &mut got, &scales, &biases);
                    for (i, (x, y)) in want.iter().zip(&got).enumerate() {
                        assert_eq!(
                            x.to_bits(),
                            y.to_bits(),
                            "{name}: {f:?} of {} (row {} of {n})",
                            vals[i],
                            i / n
                        );
                    }
                }
            }
        }
    }

    /// `wide` (a loop into a destination row) against the portable loop, bit for bit.
    fn compare(wide: impl Fn(Func, &[f32], &mut [f32], f32, f32)) {
        let mut xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.0371).collect();
        xs.extend(SPECIAL_F32);
        xs.extend([88.7, 88.8, -103.0, -104.0, f32::MAX, f32::MIN]);
        for code in [0, 7, 10, 29, 36, 2, 6, 30, 33, 31, 130] {
            let f = Func::of(code).expect("known code");
            for (scale, bias) in [(1.0, 0.0), (-0.5, 0.25), (3.0, -1.0)] {
                let mut a = vec![0.0; xs.len()];
                let mut b = vec![1.0; xs.len()];
                f.body_into(&xs, &mut a, scale, bias);
                wide(f, &xs, &mut b, scale, bias);
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
            let mut row = vec![0.0; xs.len()];
            Func::of(code)
                .expect("known")
                .apply_into(&xs, &mut row, scale, bias);
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
        Func::of(130)
            .expect("memset_zero")
            .apply_into(&[5.0; 4], &mut z, 1.0, 1.0);
        assert_eq!(z, vec![0.0; 4]);
        assert!(Func::of(99).is_err());
    }
}
