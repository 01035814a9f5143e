//! Golden outputs: each output compared with `<dir>/<name>.npy` (or a reduced golden), and
//! the tolerance it must meet (`--rtol`/`--atol`, `goldens.json`, or a default by dtype).

use crate::run::RunArgs;
use crate::tensorio;
use neuron_neff::npy::NpyArray;
use std::path::Path;

/// An output's tolerance and where it came from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tolerance {
    pub(crate) rtol: f64,
    pub(crate) atol: f64,
    pub(crate) source: &'static str,
}

/// Default relative tolerance of an output dtype (the precisions of fixtures/real-golden).
pub(crate) fn dtype_rtol(dt: neuron_isa::Dtype) -> f64 {
    use neuron_isa::Dtype::*;
    match dt {
        F32 | F32r => 1e-4,
        Bf16 | F16 => 2e-2,
        Fp8E3 | Fp8E4 | Fp8E5 => 1.25e-1,
        _ => 0.0,
    }
}

/// The `tolerance` that a `goldens.json` beside (or in) the golden directory gives output
/// `name`, for the kernel named like the golden directory or whose NEFF file is `neff`.
pub(crate) fn manifest_rtol(golden: &Path, neff: &Path, name: &str) -> Option<f64> {
    let dir_name = golden.file_name()?.to_str()?;
    let neff_name = neff.file_name().and_then(|n| n.to_str());
    for m in [
        golden.join("goldens.json"),
        golden.parent()?.join("goldens.json"),
    ] {
        let Ok(f) = std::fs::File::open(&m) else {
            continue;
        };
        // A manifest is a few KiB: read it bounded.
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut raw).ok()?;
        let j: serde_json::Value = serde_json::from_slice(&raw).ok()?;
        let kernels = j["kernels"].as_object()?;
        let k = kernels.get(dir_name).or_else(|| {
            kernels
                .values()
                .find(|k| neff_name.is_some() && k["neff"]["file"].as_str() == neff_name)
        })?;
        let out = k["outputs"]
            .as_array()
            .and_then(|o| o.iter().find(|o| o["name"] == name));
        if out.is_none() && k["outputs"].is_array() {
            continue;
        }
        return out
            .and_then(|o| o["tolerance"].as_f64())
            .or_else(|| k["tolerance"].as_f64());
    }
    None
}

pub(crate) fn tolerance(a: &RunArgs, golden: &Path, t: &neuron_runtime::TensorInfo) -> Tolerance {
    let atol = a.atol.unwrap_or(0.0);
    if let Some(rtol) = a.rtol {
        return Tolerance {
            rtol,
            atol,
            source: "--rtol",
        };
    }
    match manifest_rtol(golden, &a.neff, &t.name) {
        Some(rtol) => Tolerance {
            rtol,
            atol,
            source: "goldens.json",
        },
        None => Tolerance {
            rtol: dtype_rtol(t.dtype),
            atol,
            source: "dtype default",
        },
    }
}

/// JSON has no NaN or infinity: those errors are written as null (and fail).
pub(crate) fn finite_or_null(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// An output against its golden.
pub(crate) struct GoldenCmp {
    /// max |got - want| (NaN if any compared element is NaN in one but not the other).
    pub(crate) max_abs_err: f64,
    /// max |want|.
    pub(crate) scale: f64,
    /// max_abs_err / scale (max_abs_err when the golden is all zero).
    pub(crate) rel_err: f64,
    pub(crate) what: String,
}

/// What an output is compared with: every element (a full golden), or chosen elements.
enum Want {
    All(Vec<f32>),
    /// `(element index, wanted value)`, sorted by index (stable: duplicates keep their order);
    /// `next` is the first not yet compared.
    Picked {
        at: Vec<(usize, f32)>,
        next: usize,
    },
}

/// An output compared with its golden as its bytes stream past in order ([`GoldenStream::feed`]),
/// so the output is never held whole on the host: `<dir>/<name>.npy` (float32, same element
/// count), or a reduced golden (`<dir>/reduction.json`: column blocks and sampled elements of
/// a large output).
pub(crate) struct GoldenStream {
    want: Want,
    /// Elements fed so far.
    seen: usize,
    err: f64,
    scale: f64,
    what: String,
}

impl GoldenStream {
    pub(crate) fn open(dir: &Path, name: &str, shape: &[u64]) -> Result<GoldenStream, String> {
        let read = |p: &Path| -> Result<Vec<f32>, String> {
            let raw = std::fs::read(p).map_err(|e| format!("golden {}: {e}", p.display()))?;
            let g = NpyArray::parse(&raw).map_err(|e| format!("golden {}: {e}", p.display()))?;
            drop(raw);
            if g.dtype != neuron_neff::npy::NpyDtype::F32 {
                return Err(format!("golden {} must be float32", p.display()));
            }
            Ok(tensorio::to_f32(neuron_isa::Dtype::F32, &g.data))
        };
        let elems = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
            .ok_or_else(|| format!("output {name}: shape {shape:?} too large"))?;
        let full = dir.join(format!("{name}.npy"));
        let (want, what) = if full.exists() {
            let want = read(&full)?;
            if want.len() != elems {
                return Err(format!(
                    "golden {} has {} elements, output {elems}",
                    full.display(),
                    want.len(),
                ));
            }
            (Want::All(want), "all elements".to_string())
        } else {
            let (mut at, what) = reduced_golden(dir, name, shape, &read)?;
            at.sort_by_key(|p| p.0);
            (Want::Picked { at, next: 0 }, what)
        };
        let scale = match &want {
            Want::All(w) => max_abs(w.iter()),
            Want::Picked { at, .. } => max_abs(at.iter().map(|p| &p.1)),
        };
        Ok(GoldenStream {
            want,
            seen: 0,
            err: 0.0,
            scale,
            what,
        })
    }

    /// The output's next elements (in order, as f32).
    pub(crate) fn feed(&mut self, got: &[f32]) {
        let base = self.seen;
        self.seen += got.len();
        match &mut self.want {
            Want::All(w) => {
                let w = w.get(base..self.seen).unwrap_or_default();
                for (w, g) in w.iter().zip(got) {
                    worst(&mut self.err, *w, *g);
                }
            }
            Want::Picked { at, next } => {
                while let Some(&(i, w)) = at.get(*next) {
                    if i >= self.seen {
                        break;
                    }
                    if let Some(g) = i.checked_sub(base).and_then(|k| got.get(k)) {
                        worst(&mut self.err, w, *g);
                    }
                    *next += 1;
                }
            }
        }
    }

    pub(crate) fn finish(self) -> GoldenCmp {
        let (err, scale) = (self.err, self.scale);
        GoldenCmp {
            max_abs_err: err,
            scale,
            rel_err: if scale > 0.0 { err / scale } else { err },
            what: self.what,
        }
    }
}

/// Fold one compared pair into the running max |got - want|. f32::max drops NaN; a NaN
/// difference must poison the error instead (equal infinities or NaN in both count as a
/// match), and then it stays NaN.
fn worst(err: &mut f64, w: f32, g: f32) {
    let (w, g) = (f64::from(w), f64::from(g));
    if err.is_nan() || w == g || (w.is_nan() && g.is_nan()) {
        return;
    }
    let d = (w - g).abs();
    if d.is_nan() || d > *err {
        *err = d;
    }
}

/// max |w| over the finite values.
fn max_abs<'a>(w: impl Iterator<Item = &'a f32>) -> f64 {
    w.filter(|w| w.is_finite())
        .fold(0.0f64, |m, w| m.max(f64::from(w.abs())))
}

/// The elements a `reduction.json` golden names, as (element index in the output, wanted
/// value), read from the golden files (paths in it are relative to the golden directory's
/// parent), and a description.
pub(crate) fn reduced_golden(
    dir: &Path,
    name: &str,
    shape: &[u64],
    read: &dyn Fn(&Path) -> Result<Vec<f32>, String>,
) -> Result<(Vec<(usize, f32)>, String), String> {
    let rp = dir.join("reduction.json");
    let raw = std::fs::read(&rp)
        .map_err(|_| format!("no golden {}/{name}.npy or reduction.json", dir.display()))?;
    let j: serde_json::Value =
        serde_json::from_slice(&raw).map_err(|e| format!("{}: {e}", rp.display()))?;
    if j["output"] != name {
        return Err(format!(
            "{} describes output {}, not {name}",
            rp.display(),
            j["output"]
        ));
    }
    let [rows, cols] = shape else {
        return Err(format!(
            "reduced goldens need a 2-D output; {name} is {shape:?}"
        ));
    };
    let (rows, cols) = (*rows as usize, *cols as usize);
    let base = dir.parent().unwrap_or(Path::new("."));
    let files = j["files"].as_array().cloned().unwrap_or_default();
    let file = |i: usize| -> Result<std::path::PathBuf, String> {
        files
            .get(i)
            .and_then(|f| f["file"].as_str())
            .map(|f| base.join(f))
            .ok_or_else(|| format!("{}: files[{i}] missing", rp.display()))
    };
    let mut at = Vec::new();
    let blocks = j["column_blocks"].as_array().cloned().unwrap_or_default();
    for (bi, b) in blocks.iter().enumerate() {
        let (c0, c1) = (
            b[0].as_u64().unwrap_or(0) as usize,
            b[1].as_u64().unwrap_or(0) as usize,
        );
        if c0 >= c1 || c1 > cols {
            return Err(format!("{}: bad column block {b}", rp.display()));
        }
        let want = read(&file(bi)?)?;
        if want.len() != rows * (c1 - c0) {
            return Err(format!("{}: block {bi} size mismatch", rp.display()));
        }
        let width = c1 - c0;
        at.extend(
            want.iter()
                .enumerate()
                .map(|(k, w)| ((k / width) * cols + c0 + k % width, *w)),
        );
    }
    let idx_path = file(blocks.len())?;
    let idx_raw = std::fs::read(&idx_path).map_err(|e| format!("{}: {e}", idx_path.display()))?;
    let idx = NpyArray::parse(&idx_raw).map_err(|e| format!("{}: {e}", idx_path.display()))?;
    let vals = read(&file(blocks.len() + 1)?)?;
    let pairs: Vec<u64> = idx
        .data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])))
        .collect();
    if pairs.len() != 2 * vals.len() {
        return Err(format!(
            "{}: sample index/value count mismatch",
            rp.display()
        ));
    }
    for (rc, v) in pairs.chunks_exact(2).zip(&vals) {
        let (r, c) = (rc[0] as usize, rc[1] as usize);
        if r >= rows || c >= cols {
            return Err(format!(
                "{}: sample ({r}, {c}) outside the output",
                rp.display()
            ));
        }
        at.push((r * cols + c, *v));
    }
    let what = format!(
        "reduced: {} column blocks + {} samples",
        blocks.len(),
        vals.len()
    );
    Ok((at, what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_neff::npy::NpyDtype;

    fn npy(p: &Path, dt: NpyDtype, shape: &[usize], data: Vec<u8>) {
        let a = NpyArray::new(dt, shape.to_vec(), data).expect("npy");
        std::fs::write(p, a.to_bytes()).expect("write");
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Fed in pieces, both golden kinds give the error over exactly their elements.
    #[test]
    fn streamed_comparison_sees_every_chosen_element_once() {
        let d = std::env::temp_dir().join(format!("neuron-emu-golden-{}", std::process::id()));
        let g = d.join("k");
        std::fs::create_dir_all(&g).expect("dir");
        let got = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        // Full golden: off by 0.5 at element 4, 0.25 at element 1.
        npy(
            &g.join("o.npy"),
            NpyDtype::F32,
            &[2, 3],
            f32s(&[1.0, 2.25, 3.0, 4.0, 5.5, -7.0]),
        );
        let mut s = GoldenStream::open(&g, "o", &[2, 3]).expect("open");
        for piece in [&got[..2], &got[2..3], &got[3..]] {
            s.feed(piece);
        }
        let c = s.finish();
        assert_eq!((c.max_abs_err, c.scale), (13.0, 7.0), "element 5: 6 vs -7");
        // Reduced golden of output p [2, 3]: column block 1..2 and samples (0, 0), (1, 2).
        std::fs::write(
            g.join("reduction.json"),
            r#"{"output": "p", "column_blocks": [[1, 2]],
                "files": [{"file": "k/b.npy"}, {"file": "k/i.npy"}, {"file": "k/v.npy"}]}"#,
        )
        .expect("json");
        npy(&g.join("b.npy"), NpyDtype::F32, &[2, 1], f32s(&[2.0, 5.25]));
        let idx: Vec<u8> = [1u64, 2, 0, 0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        npy(&g.join("i.npy"), NpyDtype::I64, &[2, 2], idx);
        npy(&g.join("v.npy"), NpyDtype::F32, &[2], f32s(&[6.5, 1.0]));
        let mut s = GoldenStream::open(&g, "p", &[2, 3]).expect("open reduced");
        for x in &got {
            s.feed(std::slice::from_ref(x));
        }
        let c = s.finish();
        assert_eq!((c.max_abs_err, c.scale), (0.5, 6.5), "(1, 2): 6 vs 6.5");
        assert_eq!(c.what, "reduced: 1 column blocks + 2 samples");
        // A NaN in the output poisons the error wherever it comes.
        let mut s = GoldenStream::open(&g, "p", &[2, 3]).expect("open reduced");
        s.feed(&[1.0, f32::NAN, 3.0, 4.0, 5.0, 6.0]);
        assert!(s.finish().max_abs_err.is_nan());
        let _ = std::fs::remove_dir_all(&d);
    }
}
