//! Element data types, numbered with the hardware dtype codes that `nrt_dtype_t` uses
//! (`nrt-api-and-neff.md` §1.2), and conversions between them and f32.

use half::{bf16, f16};

/// An element type. The discriminants are the `nrt_dtype_t` / hardware codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Dtype {
    U64 = 0x1,
    I8 = 0x2,
    U8 = 0x3,
    I16 = 0x4,
    U16 = 0x5,
    Bf16 = 0x6,
    F16 = 0x7,
    I32 = 0x8,
    U32 = 0x9,
    F32 = 0xA,
    /// fp32 "round" mode (fp32 with reduced-precision matmul), stored as f32.
    F32r = 0xB,
    I64 = 0xC,
    Fp8E3 = 0xD,
    Fp8E4 = 0xE,
    Fp8E5 = 0xF,
}

impl Dtype {
    /// Decode a hardware dtype code; `None` for codes outside the table.
    pub fn from_code(code: u8) -> Option<Dtype> {
        Some(match code {
            0x1 => Dtype::U64,
            0x2 => Dtype::I8,
            0x3 => Dtype::U8,
            0x4 => Dtype::I16,
            0x5 => Dtype::U16,
            0x6 => Dtype::Bf16,
            0x7 => Dtype::F16,
            0x8 => Dtype::I32,
            0x9 => Dtype::U32,
            0xA => Dtype::F32,
            0xB => Dtype::F32r,
            0xC => Dtype::I64,
            0xD => Dtype::Fp8E3,
            0xE => Dtype::Fp8E4,
            0xF => Dtype::Fp8E5,
            _ => return None,
        })
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// Element size in bytes.
    pub fn size(self) -> usize {
        match self {
            Dtype::I8 | Dtype::U8 | Dtype::Fp8E3 | Dtype::Fp8E4 | Dtype::Fp8E5 => 1,
            Dtype::I16 | Dtype::U16 | Dtype::Bf16 | Dtype::F16 => 2,
            Dtype::I32 | Dtype::U32 | Dtype::F32 | Dtype::F32r => 4,
            Dtype::U64 | Dtype::I64 => 8,
        }
    }

    /// The name the compiler writes in `neff.json` / `tensor_map.json`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U64 => "uint64",
            Dtype::I8 => "int8",
            Dtype::U8 => "uint8",
            Dtype::I16 => "int16",
            Dtype::U16 => "uint16",
            Dtype::Bf16 => "bfloat16",
            Dtype::F16 => "float16",
            Dtype::I32 => "int32",
            Dtype::U32 => "uint32",
            Dtype::F32 => "float32",
            Dtype::F32r => "float32r",
            Dtype::I64 => "int64",
            Dtype::Fp8E3 => "float8_e3m4",
            Dtype::Fp8E4 => "float8_e4m3",
            Dtype::Fp8E5 => "float8_e5m2",
        }
    }

    /// Parse a compiler dtype name (also accepts a few common aliases).
    pub fn from_name(name: &str) -> Option<Dtype> {
        Some(match name {
            "uint64" => Dtype::U64,
            "int8" => Dtype::I8,
            "uint8" => Dtype::U8,
            "int16" => Dtype::I16,
            "uint16" => Dtype::U16,
            "bfloat16" | "bf16" => Dtype::Bf16,
            "float16" | "fp16" | "half" => Dtype::F16,
            "int32" => Dtype::I32,
            "uint32" => Dtype::U32,
            "float32" | "fp32" | "float" => Dtype::F32,
            "float32r" | "fp32r" => Dtype::F32r,
            "int64" => Dtype::I64,
            "float8_e3m4" | "fp8_e3" => Dtype::Fp8E3,
            "float8_e4m3" | "float8_e4m3fn" | "fp8_e4" => Dtype::Fp8E4,
            "float8_e5m2" | "fp8_e5" => Dtype::Fp8E5,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Bf16
                | Dtype::F16
                | Dtype::F32
                | Dtype::F32r
                | Dtype::Fp8E3
                | Dtype::Fp8E4
                | Dtype::Fp8E5
        )
    }
}

/// Read one element at the start of `b` as f32 (`b.len() >= dt.size()` is the caller's duty;
/// short slices read as 0).
#[inline]
pub fn load_f32(dt: Dtype, b: &[u8]) -> f32 {
    #[inline]
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        if b.len() >= N {
            a.copy_from_slice(&b[..N]);
        }
        a
    }
    match dt {
        Dtype::F32 | Dtype::F32r => f32::from_le_bytes(arr(b)),
        Dtype::Bf16 => bf16::from_bits(u16::from_le_bytes(arr(b))).to_f32(),
        Dtype::F16 => f16::from_bits(u16::from_le_bytes(arr(b))).to_f32(),
        Dtype::I8 => i8::from_le_bytes(arr(b)) as f32,
        Dtype::U8 => u8::from_le_bytes(arr(b)) as f32,
        Dtype::I16 => i16::from_le_bytes(arr(b)) as f32,
        Dtype::U16 => u16::from_le_bytes(arr(b)) as f32,
        Dtype::I32 => i32::from_le_bytes(arr(b)) as f32,
        Dtype::U32 => u32::from_le_bytes(arr(b)) as f32,
        Dtype::I64 => i64::from_le_bytes(arr(b)) as f32,
        Dtype::U64 => u64::from_le_bytes(arr(b)) as f32,
        Dtype::Fp8E4 => fp8_e4m3_to_f32(arr::<1>(b)[0]),
        Dtype::Fp8E5 => fp8_e5m2_to_f32(arr::<1>(b)[0]),
        Dtype::Fp8E3 => fp8_e3m4_to_f32(arr::<1>(b)[0]),
    }
}

/// Write `v` as one element of type `dt` at the start of `b`, rounding to nearest even for
/// narrower floats and saturating for integers.
#[inline]
pub fn store_f32(dt: Dtype, v: f32, b: &mut [u8]) {
    let n = dt.size().min(b.len());
    let mut put = |bytes: &[u8]| b[..n].copy_from_slice(&bytes[..n]);
    match dt {
        Dtype::F32 | Dtype::F32r => put(&v.to_le_bytes()),
        Dtype::Bf16 => put(&bf16::from_f32(v).to_bits().to_le_bytes()),
        Dtype::F16 => put(&f16::from_f32(v).to_bits().to_le_bytes()),
        Dtype::I8 => put(&(v as i8).to_le_bytes()),
        Dtype::U8 => put(&(v as u8).to_le_bytes()),
        Dtype::I16 => put(&(v as i16).to_le_bytes()),
        Dtype::U16 => put(&(v as u16).to_le_bytes()),
        Dtype::I32 => put(&(v as i32).to_le_bytes()),
        Dtype::U32 => put(&(v as u32).to_le_bytes()),
        Dtype::I64 => put(&(v as i64).to_le_bytes()),
        Dtype::U64 => put(&(v as u64).to_le_bytes()),
        Dtype::Fp8E4 => put(&[f32_to_fp8(v, 4, 3, true)]),
        Dtype::Fp8E5 => put(&[f32_to_fp8(v, 5, 2, false)]),
        Dtype::Fp8E3 => put(&[f32_to_fp8(v, 3, 4, false)]),
    }
}

fn fp8_to_f32(b: u8, ebits: u32, mbits: u32, fn_variant: bool) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let e = ((b as u32) >> mbits) & ((1 << ebits) - 1);
    let m = (b as u32) & ((1 << mbits) - 1);
    let bias = (1i32 << (ebits - 1)) - 1;
    let emax = (1u32 << ebits) - 1;
    if fn_variant {
        // OCP e4m3fn: no infinities; S.1111.111 is NaN.
        if e == emax && m == (1 << mbits) - 1 {
            return f32::NAN;
        }
    } else if e == emax {
        return if m == 0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    if e == 0 {
        sign * (m as f32) * 2f32.powi(1 - bias - mbits as i32)
    } else {
        sign * (1.0 + (m as f32) / (1u32 << mbits) as f32) * 2f32.powi(e as i32 - bias)
    }
}

fn fp8_e4m3_to_f32(b: u8) -> f32 {
    fp8_to_f32(b, 4, 3, true)
}
fn fp8_e5m2_to_f32(b: u8) -> f32 {
    fp8_to_f32(b, 5, 2, false)
}
fn fp8_e3m4_to_f32(b: u8) -> f32 {
    fp8_to_f32(b, 3, 4, false)
}

/// Round-to-nearest-even conversion to an 8-bit float by exhaustive nearest search over the
/// 256 codes (exact and simple; fp8 is not on a hot path here). Saturates to the largest
/// finite value.
fn f32_to_fp8(v: f32, ebits: u32, mbits: u32, fn_variant: bool) -> u8 {
    if v.is_nan() {
        return 0x7F;
    }
    let mut best = 0u8;
    let mut best_err = f32::INFINITY;
    for code in 0u8..=0x7F {
        let c = fp8_to_f32(code, ebits, mbits, fn_variant);
        if !c.is_finite() {
            continue;
        }
        let err = (c - v.abs()).abs();
        // Ties go to the even code (last mantissa bit clear).
        if err < best_err || (err == best_err && code & 1 == 0) {
            best_err = err;
            best = code;
        }
    }
    if v.is_sign_negative() {
        best | 0x80
    } else {
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in 0u8..=0xFF {
            if let Some(d) = Dtype::from_code(c) {
                assert_eq!(d.code(), c);
                assert_eq!(Dtype::from_name(d.name()), Some(d));
            }
        }
        assert_eq!(Dtype::from_code(0), None);
        assert_eq!(Dtype::F32.code(), 0xA);
        assert_eq!(Dtype::Bf16.code(), 0x6);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let mut b = [0u8; 2];
        // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0.
        store_f32(Dtype::Bf16, 1.0 + 1.0 / 256.0, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x3F80);
        store_f32(Dtype::Bf16, 1.0 + 3.0 / 256.0, &mut b);
        assert_eq!(u16::from_le_bytes(b), 0x3F82);
        assert_eq!(load_f32(Dtype::Bf16, &b), 1.015625);
    }

    #[test]
    fn fp8_values() {
        assert_eq!(fp8_e4m3_to_f32(0x38), 1.0);
        assert_eq!(fp8_e4m3_to_f32(0x7E), 448.0);
        assert!(fp8_e4m3_to_f32(0x7F).is_nan());
        assert_eq!(fp8_e5m2_to_f32(0x3C), 1.0);
        assert_eq!(fp8_e5m2_to_f32(0x7B), 57344.0);
        let mut b = [0u8; 1];
        store_f32(Dtype::Fp8E4, 1000.0, &mut b);
        assert_eq!(b[0], 0x7E, "saturates to max finite");
        store_f32(Dtype::Fp8E4, -1.0, &mut b);
        assert_eq!(b[0], 0xB8);
    }
}
