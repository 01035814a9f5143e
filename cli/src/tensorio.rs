//! Turning `.npy` files into tensor bytes and back, with the dtype rules of `neuron-emu run`.

use neuron_isa::dtype::{load_f32, store_f32};
use neuron_isa::Dtype;
use neuron_kbuild::npy_dtype;
use neuron_neff::npy::{NpyArray, NpyDtype};
use neuron_runtime::TensorInfo;

/// Bytes for tensor `t` from a `.npy` array: same dtype one to one, or a float32 array for a
/// bf16/fp16/fp8 tensor (rounded to nearest even). The shape must match. Takes the array so
/// that same-dtype data is moved, not copied.
pub fn npy_to_tensor(t: &TensorInfo, a: NpyArray) -> Result<Vec<u8>, String> {
    let shape: Vec<u64> = a.shape.iter().map(|&d| d as u64).collect();
    if shape != t.shape {
        return Err(format!(
            "input '{}': file has shape {:?}, the model expects {:?}",
            t.name, shape, t.shape
        ));
    }
    if a.fortran_order && shape.len() > 1 {
        return Err(format!(
            "input '{}': Fortran-ordered arrays are not supported",
            t.name
        ));
    }
    let native = npy_dtype(t.dtype);
    if a.dtype == native
        || (matches!(native, NpyDtype::Void(_))
            && matches!(a.dtype, NpyDtype::U16 | NpyDtype::U8)
            && a.dtype.size() == t.dtype.size())
    {
        return Ok(a.data);
    }
    let narrow_float = matches!(
        t.dtype,
        Dtype::Bf16 | Dtype::F16 | Dtype::Fp8E3 | Dtype::Fp8E4 | Dtype::Fp8E5
    );
    if a.dtype == NpyDtype::F32 && narrow_float {
        let n = a.element_count();
        let mut out = vec![0u8; n * t.dtype.size()];
        for i in 0..n {
            let v = load_f32(Dtype::F32, &a.data[i * 4..]);
            store_f32(t.dtype, v, &mut out[i * t.dtype.size()..]);
        }
        return Ok(out);
    }
    Err(format!(
        "input '{}': file dtype {} does not fit a {} tensor (give {} or float32)",
        t.name,
        a.dtype.descr(),
        t.dtype.name(),
        native.descr()
    ))
}

/// An output as a `.npy` array: bf16/fp16/fp8 as float32 unless `raw` (then their bit
/// patterns, `<u2` / `|u1`); other dtypes one to one. (`run` writes the same file in
/// pieces: [`npy_header`], [`npy_data`].)
#[cfg(test)]
pub fn tensor_to_npy(t: &TensorInfo, data: &[u8], raw: bool) -> Result<NpyArray, String> {
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    NpyArray::new(npy_out_dtype(t, raw), shape, npy_data(t, data, raw))
        .map_err(|e| format!("output '{}': {e}", t.name))
}

/// The `.npy` dtype output `t` is written as ([`tensor_to_npy`]).
fn npy_out_dtype(t: &TensorInfo, raw: bool) -> NpyDtype {
    let narrow_float = matches!(
        t.dtype,
        Dtype::Bf16 | Dtype::F16 | Dtype::Fp8E3 | Dtype::Fp8E4 | Dtype::Fp8E5
    );
    match (narrow_float, raw) {
        (true, false) => NpyDtype::F32,
        (true, true) if t.dtype.size() == 2 => NpyDtype::U16,
        (true, true) => NpyDtype::U8,
        _ => npy_dtype(t.dtype),
    }
}

/// The `.npy` header of output `t`'s file ([`tensor_to_npy`]): its data follows, written in
/// pieces with [`npy_data`].
pub fn npy_header(t: &TensorInfo, raw: bool) -> Vec<u8> {
    NpyArray {
        dtype: npy_out_dtype(t, raw),
        shape: t.shape.iter().map(|&d| d as usize).collect(),
        fortran_order: false,
        data: Vec::new(),
    }
    .to_bytes()
}

/// The `.npy` data of whole elements of output `t` (float32 for narrow floats unless `raw`).
pub fn npy_data(t: &TensorInfo, data: &[u8], raw: bool) -> Vec<u8> {
    if npy_out_dtype(t, raw) == NpyDtype::F32 && t.dtype != Dtype::F32 {
        to_f32(t.dtype, data)
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    } else {
        data.to_vec()
    }
}

/// Room for a `.npy` header on top of the data (format 2/3 headers may exceed 64 KiB).
const NPY_HEADER_ALLOWANCE: u64 = 1 << 20;

/// The largest `.npy` file input `t` can be given as: its elements as float32 or in its own
/// dtype, whichever is wider, plus a header.
pub fn max_input_file_bytes(t: &TensorInfo) -> u64 {
    let es = t.dtype.size().max(1) as u64;
    (t.size / es)
        .saturating_mul(es.max(4))
        .saturating_add(NPY_HEADER_ALLOWANCE)
}

/// Read the `.npy` file given for input `t`, bounded: only a regular file, and at most the
/// bytes the tensor can need plus one (so `/dev/zero` or a huge file is refused, not read).
pub fn read_input_file(t: &TensorInfo, p: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let what = || format!("input '{}': {}", t.name, p.display());
    let cannot =
        |e: std::io::Error| format!("input '{}': cannot read {}: {e}", t.name, p.display());
    let f = std::fs::File::open(p).map_err(cannot)?;
    let md = f.metadata().map_err(cannot)?;
    if !md.is_file() {
        return Err(format!("{}: not a regular file", what()));
    }
    let limit = max_input_file_bytes(t);
    if md.len() > limit {
        return Err(format!(
            "{}: {} bytes, more than the {} a [{}] {:?} tensor can need",
            what(),
            md.len(),
            limit,
            t.dtype.name(),
            t.shape
        ));
    }
    let mut raw = Vec::new();
    raw.try_reserve(md.len() as usize)
        .map_err(|e| format!("{}: {e}", what()))?;
    f.take(limit.saturating_add(1))
        .read_to_end(&mut raw)
        .map_err(cannot)?;
    if raw.len() as u64 > limit {
        return Err(format!("{}: grew past {limit} bytes while read", what()));
    }
    Ok(raw)
}

/// The built-in data of input `index` with `seed` (uniform in [-1, 1), as `neuron-emu run`
/// documents), stored in the tensor's dtype.
pub fn builtin_input(t: &TensorInfo, seed: u64, index: usize) -> Vec<u8> {
    let mut b = vec![0u8; t.size as usize];
    BuiltinStream::new(t, seed, index).fill(&mut b);
    b
}

/// The built-in data of one input produced in pieces, so a large input can be written to the
/// device block by block without a full-size host copy. Same values as [`builtin_input`].
#[derive(Debug)]
pub struct BuiltinStream {
    g: neuron_kbuild::prng::SplitMix64,
    dtype: Dtype,
}

impl BuiltinStream {
    pub fn new(t: &TensorInfo, seed: u64, index: usize) -> Self {
        BuiltinStream {
            g: neuron_kbuild::prng::SplitMix64::new(neuron_kbuild::prng::input_seed(seed, index)),
            dtype: t.dtype,
        }
    }

    /// Fill `out` with the next `out.len() / element size` values (a trailing partial element
    /// is left as is).
    pub fn fill(&mut self, out: &mut [u8]) {
        use half::slice::HalfFloatSliceExt;
        const N: usize = 1024;
        let es = self.dtype.size().max(1);
        let mut vals = [0f32; N];
        let mut halves = [half::f16::ZERO; N];
        let mut bhalves = [half::bf16::ZERO; N];
        for block in out.chunks_mut(N * es) {
            let n = block.len() / es;
            for v in &mut vals[..n] {
                *v = self.g.uniform();
            }
            // fp16 and bf16 (the large inputs) convert a slice at a time, vectorised where the
            // CPU allows, with the same rounding as `store_f32` (to nearest even).
            match self.dtype {
                Dtype::F16 => {
                    halves[..n].convert_from_f32_slice(&vals[..n]);
                    for (o, h) in block.chunks_exact_mut(2).zip(&halves[..n]) {
                        o.copy_from_slice(&h.to_bits().to_le_bytes());
                    }
                }
                Dtype::Bf16 => {
                    bhalves[..n].convert_from_f32_slice(&vals[..n]);
                    for (o, h) in block.chunks_exact_mut(2).zip(&bhalves[..n]) {
                        o.copy_from_slice(&h.to_bits().to_le_bytes());
                    }
                }
                dt => {
                    for (o, v) in block.chunks_exact_mut(es).zip(&vals[..n]) {
                        store_f32(dt, *v, o);
                    }
                }
            }
        }
    }
}

/// Every input of a model with its built-in data (seed 0).
pub fn builtin_inputs<'a>(infos: impl Iterator<Item = &'a TensorInfo>) -> Vec<(String, Vec<u8>)> {
    infos
        .enumerate()
        .map(|(i, t)| (t.name.clone(), builtin_input(t, 0, i)))
        .collect()
}

/// Decode tensor bytes as f32 values.
pub fn to_f32(dt: Dtype, data: &[u8]) -> Vec<f32> {
    data.chunks_exact(dt.size())
        .map(|c| load_f32(dt, c))
        .collect()
}

/// FNV-1a 64 of the raw bytes: a quick, stable checksum for eyeballing runs (`run` computes
/// it in pieces with [`checksum_update`]).
#[cfg(test)]
pub fn checksum(data: &[u8]) -> u64 {
    checksum_update(CHECKSUM_INIT, data)
}

/// [`checksum`]'s starting value.
pub const CHECKSUM_INIT: u64 = 0xcbf2_9ce4_8422_2325;

/// [`checksum`] continued over more bytes: `checksum(a ++ b) ==
/// checksum_update(checksum(a), b)`.
pub fn checksum_update(h: u64, data: &[u8]) -> u64 {
    data.iter().fold(h, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(dtype: Dtype, shape: &[u64]) -> TensorInfo {
        TensorInfo {
            name: "t".into(),
            dtype,
            shape: shape.to_vec(),
            size: shape.iter().product::<u64>() * dtype.size() as u64,
        }
    }

    #[test]
    fn builtin_data_streamed_in_pieces_is_the_whole_and_the_generator() {
        for dt in [Dtype::F16, Dtype::Bf16, Dtype::F32, Dtype::Fp8E4] {
            // More than one 1024-value block of `fill`.
            let t = info(dt, &[37, 111]);
            let whole = builtin_input(&t, 3, 1);
            let want =
                neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(3, 1), 37 * 111, 1.0);
            let mut conv = vec![0u8; t.size as usize];
            for (k, v) in want.iter().enumerate() {
                store_f32(dt, *v, &mut conv[k * dt.size()..]);
            }
            assert_eq!(whole, conv, "{dt:?}: the documented generator");
            let mut s = BuiltinStream::new(&t, 3, 1);
            let mut pieces = vec![0u8; t.size as usize];
            let mut at = 0;
            for n in [1usize, 5, 64, 100, 1000, 1500] {
                let end = (at + n * dt.size()).min(pieces.len());
                s.fill(&mut pieces[at..end]);
                at = end;
            }
            s.fill(&mut pieces[at..]);
            assert_eq!(pieces, whole, "{dt:?}");
        }
        let (a, b) = (b"neuron".as_slice(), b"-emu".as_slice());
        assert_eq!(checksum_update(checksum(a), b), checksum(b"neuron-emu"));
    }

    #[test]
    fn conversions() {
        let t = info(Dtype::Bf16, &[2]);
        let a = NpyArray::new(
            NpyDtype::F32,
            vec![2],
            [1.0f32, 1.0 + 1.0 / 256.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        )
        .expect("npy");
        let b = npy_to_tensor(&t, a).expect("convert");
        assert_eq!(b, vec![0x80, 0x3F, 0x80, 0x3F], "ties to even");
        let bad = NpyArray::new(NpyDtype::F32, vec![3], vec![0; 12]).expect("npy");
        assert!(npy_to_tensor(&t, bad).expect_err("shape").contains("shape"));
        let i32a = NpyArray::new(NpyDtype::I32, vec![2], vec![0; 8]).expect("npy");
        assert!(npy_to_tensor(&t, i32a)
            .expect_err("dtype")
            .contains("dtype"));
        let out = tensor_to_npy(&t, &b, false).expect("out");
        assert_eq!(out.dtype, NpyDtype::F32);
        let raw = tensor_to_npy(&t, &b, true).expect("raw");
        assert_eq!(raw.dtype, NpyDtype::U16);
        assert_eq!(raw.data, b);
        for r in [false, true] {
            let whole = tensor_to_npy(&t, &b, r).expect("npy").to_bytes();
            let mut pieces = npy_header(&t, r);
            pieces.extend(npy_data(&t, &b[..2], r));
            pieces.extend(npy_data(&t, &b[2..], r));
            assert_eq!(
                pieces, whole,
                "header + data in pieces is the file (raw {r})"
            );
        }
    }
}
