//! A small kernel builder: write engine programs as real trn2 ("cayman") instruction words
//! ([`words`]) plus variables, get a NEFF in the real container layout (1024-byte header,
//! gzip'd ustar tar, `neff.json`, `kelf-0.json`, `sgNN/def.json`, per-engine JSON and
//! instruction files, `tensor_map.json`, `.npy` constants).
//!
//! The NEFFs are shaped like neuronx-cc's (`docs/isa/cayman.md`): every program starts with
//! DRAIN and SET_ORDERING_MODE relaxed; DMA is DMA_DIRECT2D with variable-relative addresses
//! (tag `0x10`, the `def.json` var id; var 0 is the state buffer); compute words use the field
//! layouts of `neuron_isa::cayman`. No project feature bit is set, so the runtime loads them
//! through its real-NEFF path (relocation, pseudo-opcode translation) like compiler output.
//! The project test encoding (`docs/isa/test-encoding.md`) is not used.

pub mod kernels;
pub mod prng;
pub mod words;

use neuron_isa::cayman::DmaAddr;
use neuron_isa::{Dtype, Engine};
use neuron_neff::npy::{NpyArray, NpyDtype};
use neuron_neff::NeffWriter;
use serde_json::{json, Map, Value};
use words::{DmaSide, Word};

/// The state buffer's variable name in `def.json` (var id 0).
pub const SB: &str = "SB";
/// Bytes between SBUF partitions in the device address space.
pub const PARTITION: u32 = neuron_abi::tpb::SBUF_PARTITION_STRIDE as u32;

/// One side of a transfer, before variable ids are known: `num[0] x num[1]` chunks of `elem`
/// bytes at byte steps `step` (`num[0]` innermost) from byte `off` of variable `var`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    pub var: String,
    pub off: u32,
    pub step: [u32; 2],
    pub num: [u16; 2],
    pub elem: u32,
}

/// One DMA_DIRECT2D: chunk `k` of `src` goes to chunk `k` of `dst`, converted element by
/// element from `in_dtype` to `out_dtype` when they differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xfer {
    pub src: Side,
    pub dst: Side,
    pub in_dtype: Dtype,
    pub out_dtype: Dtype,
}

fn side(var: &str, off: u32, step: [u32; 2], num: [u16; 2], elem: u32) -> Side {
    Side {
        var: var.into(),
        off,
        step,
        num,
        elem,
    }
}

impl Xfer {
    /// `tiles` row tiles of a row-major DRAM matrix with `ld` columns: row `t*128 + p`
    /// (`cols` elements from column 0) goes to partition `p` at SBUF byte
    /// `sb_off + t * tile_step`.
    pub fn row_tiles(
        var: &str,
        dtype: Dtype,
        ld: u32,
        cols: u32,
        tiles: u16,
        sb_off: u32,
        tile_step: u32,
    ) -> Xfer {
        let es = dtype.size() as u32;
        let outer = |s: u32| if tiles > 1 { s } else { 1 };
        Xfer {
            src: side(
                var,
                0,
                [ld * es, outer(128 * ld * es)],
                [128, tiles],
                cols * es,
            ),
            dst: side(
                SB,
                sb_off,
                [PARTITION, outer(tile_step)],
                [128, tiles],
                cols * es,
            ),
            in_dtype: dtype,
            out_dtype: dtype,
        }
    }

    /// A DRAM vector of `128 * cols` elements, element `c*128 + p` to partition `p`, column
    /// `c` (one element each) at SBUF byte `sb_off`, converted to `to`.
    pub fn columns(var: &str, from: Dtype, to: Dtype, cols: u16, sb_off: u32) -> Xfer {
        let (si, so) = (from.size() as u32, to.size() as u32);
        let outer = |s: u32| if cols > 1 { s } else { 1 };
        Xfer {
            src: side(var, 0, [si, outer(128 * si)], [128, cols], si),
            dst: side(SB, sb_off, [PARTITION, outer(so)], [128, cols], so),
            in_dtype: from,
            out_dtype: to,
        }
    }

    /// One DRAM row of `cols` elements into every partition at SBUF byte `sb_off` (a zero
    /// source step), converted to `to`.
    pub fn broadcast_row(var: &str, from: Dtype, to: Dtype, cols: u32, sb_off: u32) -> Xfer {
        Xfer {
            src: side(var, 0, [0, 1], [128, 1], cols * from.size() as u32),
            dst: side(
                SB,
                sb_off,
                [PARTITION, 1],
                [128, 1],
                cols * to.size() as u32,
            ),
            in_dtype: from,
            out_dtype: to,
        }
    }

    /// Partitions `0..128`, `cols` elements at SBUF byte `sb_off`, out to the rows of a
    /// row-major DRAM matrix with `cols` columns.
    pub fn store(var: &str, dtype: Dtype, cols: u32, sb_off: u32) -> Xfer {
        let es = dtype.size() as u32;
        Xfer {
            src: side(SB, sb_off, [PARTITION, 1], [128, 1], cols * es),
            dst: side(var, 0, [cols * es, 1], [128, 1], cols * es),
            in_dtype: dtype,
            out_dtype: dtype,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("duplicate variable '{0}'")]
    DuplicateVar(String),
    #[error("unknown variable '{0}'")]
    UnknownVar(String),
    #[error("constant '{name}' has {got} bytes, shape needs {want}")]
    ConstantSize { name: String, got: usize, want: u64 },
    #[error("unknown DMA queue '{0}'")]
    UnknownQueue(String),
    #[error("semaphore {sem} is not in DMA queue '{queue}'")]
    NotQueueSemaphore { queue: String, sem: u8 },
    #[error(transparent)]
    Neff(#[from] neuron_neff::NeffError),
}

#[derive(Debug, Clone)]
struct Var {
    name: String,
    kind: &'static str,
    dtype: Dtype,
    shape: Vec<u64>,
    data: Option<Vec<u8>>,
}

impl Var {
    fn size(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.dtype.size() as u64
    }
}

/// Builds a single-subgraph NEFF (LNC=1).
#[derive(Debug, Clone)]
pub struct KernelBuilder {
    name: String,
    vars: Vec<Var>,
    queues: Vec<(String, Engine, Vec<u32>)>,
    programs: [Vec<[u8; 64]>; 5],
}

impl KernelBuilder {
    pub fn new(name: &str) -> Self {
        KernelBuilder {
            name: name.to_string(),
            vars: Vec::new(),
            queues: Vec::new(),
            programs: Default::default(),
        }
    }

    fn add_var(&mut self, v: Var) -> Result<(), BuildError> {
        if self.vars.iter().any(|x| x.name == v.name) || v.name == SB {
            return Err(BuildError::DuplicateVar(v.name));
        }
        self.vars.push(v);
        Ok(())
    }

    pub fn input(&mut self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<(), BuildError> {
        self.add_var(Var {
            name: name.into(),
            kind: "input",
            dtype,
            shape: shape.to_vec(),
            data: None,
        })
    }

    pub fn output(&mut self, name: &str, dtype: Dtype, shape: &[u64]) -> Result<(), BuildError> {
        self.add_var(Var {
            name: name.into(),
            kind: "output",
            dtype,
            shape: shape.to_vec(),
            data: None,
        })
    }

    /// A constant (a `file` variable backed by a `.npy` member); `data` is raw little-endian.
    pub fn constant(
        &mut self,
        name: &str,
        dtype: Dtype,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<(), BuildError> {
        let v = Var {
            name: name.into(),
            kind: "file",
            dtype,
            shape: shape.to_vec(),
            data: Some(data),
        };
        let want = v.size();
        let got = v.data.as_ref().map_or(0, Vec::len);
        if got as u64 != want {
            return Err(BuildError::ConstantSize {
                name: name.into(),
                got,
                want,
            });
        }
        self.add_var(v)
    }

    /// A constant given as f32 values, stored in `dtype` (rounded to nearest even).
    pub fn constant_f32(
        &mut self,
        name: &str,
        dtype: Dtype,
        shape: &[u64],
        vals: &[f32],
    ) -> Result<(), BuildError> {
        let mut data = vec![0u8; vals.len() * dtype.size()];
        for (i, v) in vals.iter().enumerate() {
            neuron_isa::dtype::store_f32(dtype, *v, &mut data[i * dtype.size()..]);
        }
        self.constant(name, dtype, shape, data)
    }

    /// Declare a DMA queue owned by `owner` with its semaphores (`def.json` `dma_queue`).
    pub fn dma_queue(&mut self, name: &str, owner: Engine, semaphores: &[u32]) {
        self.queues.push((name.into(), owner, semaphores.to_vec()));
    }

    /// The `def.json` var id of a variable (`SB` is 0, the others count from 1 in
    /// declaration order).
    pub fn var_id(&self, name: &str) -> Result<u8, BuildError> {
        if name == SB {
            return Ok(0);
        }
        self.vars
            .iter()
            .position(|v| v.name == name)
            .and_then(|i| u8::try_from(i + 1).ok())
            .ok_or_else(|| BuildError::UnknownVar(name.into()))
    }

    fn dma_side(&self, s: &Side) -> Result<DmaSide, BuildError> {
        Ok(DmaSide {
            addr: DmaAddr::VarRelative {
                offset: s.off,
                var_id: self.var_id(&s.var)?,
                pad: 0,
            },
            step: s.step,
            num: s.num,
            elem: s.elem,
        })
    }

    /// A DMA_DIRECT2D word for `x` on `queue`, adding 16 to `semaphore` (one of the queue's)
    /// when it lands. Push it to the engine that owns the queue.
    pub fn dma(&self, queue: &str, semaphore: u8, x: &Xfer) -> Result<Word, BuildError> {
        let q = self
            .queues
            .iter()
            .find(|q| q.0 == queue)
            .ok_or_else(|| BuildError::UnknownQueue(queue.into()))?;
        if !q.2.contains(&(semaphore as u32)) {
            return Err(BuildError::NotQueueSemaphore {
                queue: queue.into(),
                sem: semaphore,
            });
        }
        Ok(words::dma(
            self.dma_side(&x.src)?,
            self.dma_side(&x.dst)?,
            x.in_dtype,
            x.out_dtype,
            semaphore,
        ))
    }

    /// Append a word to `engine`'s program (after the DRAIN and SET_ORDERING_MODE every
    /// program starts with).
    pub fn push(&mut self, engine: Engine, w: Word) {
        self.programs[engine.index()].push(w.encode());
    }

    /// Append raw 64 bytes (for tests of bad programs).
    pub fn push_raw(&mut self, engine: Engine, w: [u8; 64]) {
        self.programs[engine.index()].push(w);
    }

    fn program_bytes(&self, e: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity((self.programs[e].len() + 2) * 64);
        out.extend_from_slice(&words::drain().encode());
        out.extend_from_slice(&words::relaxed().encode());
        for w in &self.programs[e] {
            out.extend_from_slice(w);
        }
        out
    }

    /// Produce the NEFF bytes (deterministic).
    pub fn build(&self) -> Result<Vec<u8>, BuildError> {
        let mut w = NeffWriter::new(&format!("{}.neff", self.name));
        w.header.version_major = 2;
        w.header.version_minor = 0;
        w.header.num_tpb = 1;
        w.header.requested_tpb_count = 1;
        w.header.tpb_per_node[0] = 1;
        w.header.lnc_size = 1;
        w.header.feature_bits = 0;

        let mut tpn = vec![0u32; 64];
        tpn[0] = 1;
        w.add_json(
            "info.json",
            &json!({
                "tool_version": concat!("neuron-emu-kbuild ", env!("CARGO_PKG_VERSION")),
                "kelp_version": "Dynamic", "name": format!("{}.neff", self.name),
                "num_tpb": 1, "num_tpb_requested": 1, "num_tpb_per_node": tpn,
            }),
        )?;
        w.add_json("kelf-0.json", &json!({"graphs": [{"definition": "sg00/def.json", "name": "sg00"}], "version": "0.5", "target": "cayman"}))?;

        // def.json
        let mut vars = Map::new();
        vars.insert(SB.into(), json!({"type": "state-buffer", "var_id": 0}));
        for (i, v) in self.vars.iter().enumerate() {
            let mut o = Map::new();
            o.insert("type".into(), json!(v.kind));
            o.insert("var_id".into(), json!(i + 1));
            o.insert("size".into(), json!(v.size()));
            o.insert("ops".into(), json!([]));
            if v.kind == "file" {
                o.insert("file_name".into(), json!(format!("value_{}.npy", v.name)));
                o.insert("fabric_path".into(), json!("main"));
            }
            vars.insert(v.name.clone(), Value::Object(o));
        }
        let mut queues = Map::new();
        for (n, owner, sems) in &self.queues {
            queues.insert(n.clone(), json!({"fabric_path": "main", "num_queues": sems.len(), "owner": owner.def_name(), "semaphore_set": sems, "type": "dynamic"}));
        }
        let files = [
            (Engine::Pe, "PE"),
            (Engine::Act, "Activation"),
            (Engine::Pool, "Pool"),
            (Engine::Dve, "DVE"),
            (Engine::Sp, "SP"),
        ];
        let mut def = Map::new();
        for (e, stem) in files {
            def.insert(e.def_name().into(), json!(format!("{stem}.json")));
            def.insert(
                format!("{}_instr", e.def_name()),
                json!(format!("{stem}.bin")),
            );
        }
        def.insert("name".into(), json!("definition"));
        def.insert("version".into(), json!("0.6"));
        def.insert("var".into(), Value::Object(vars));
        def.insert("dma_queue".into(), Value::Object(queues));
        // The values every def.json of the compiler's corpus carries.
        def.insert("runtime_event_count".into(), json!(12));
        def.insert("runtime_semaphore_count".into(), json!(3));
        def.insert("neff_features".into(), json!([]));
        w.add_json("sg00/def.json", &Value::Object(def))?;
        for (e, stem) in files {
            w.add_json(
                &format!("sg00/{stem}.json"),
                &json!({"dma": [], "instr": format!("{stem}.bin"), "name": format!("{stem}.json")}),
            )?;
            w.add_member(&format!("sg00/{stem}.bin"), self.program_bytes(e.index()));
        }
        let mut tmap = Map::new();
        for v in &self.vars {
            let mut o = Map::new();
            o.insert("dtype".into(), json!(v.dtype.name()));
            o.insert("is_const".into(), json!(v.kind == "file"));
            if v.kind != "file" {
                o.insert("kind".into(), json!(v.kind));
            }
            o.insert("layer_name".into(), json!(v.name));
            o.insert("sim_shape".into(), json!(v.shape));
            o.insert("tf_shape".into(), json!(v.shape));
            o.insert("tf_file".into(), json!(format!("value_{}.npy", v.name)));
            tmap.insert(v.name.clone(), Value::Object(o));
        }
        w.add_json("sg00/tensor_map.json", &Value::Object(tmap))?;
        for v in self.vars.iter().filter(|v| v.kind == "file") {
            let npy_dt = npy_dtype(v.dtype);
            let arr = NpyArray::new(
                npy_dt,
                v.shape.iter().map(|&d| d as usize).collect(),
                v.data.clone().unwrap_or_default(),
            )
            .map_err(|e| {
                BuildError::Neff(neuron_neff::NeffError::Npy {
                    member: v.name.clone(),
                    source: e,
                })
            })?;
            w.add_member(&format!("sg00/value_{}.npy", v.name), arr.to_bytes());
        }

        // neff.json (TVM-relay style, as the compiler writes it).
        let inputs: Vec<&Var> = self.vars.iter().filter(|v| v.kind == "input").collect();
        let outputs: Vec<&Var> = self.vars.iter().filter(|v| v.kind == "output").collect();
        let mut nodes: Vec<Value> = inputs.iter().map(|v| json!({"op": "null", "name": v.name, "inputs": [], "output_names": [v.name], "is_param": "0"})).collect();
        nodes.push(json!({
            "op": "tvm_op", "name": "sg_coreV10",
            "attrs": {"func_name": "__kelf", "flatten_data": "0", "num_inputs": inputs.len().to_string(), "kelf": "kelf-0.json", "num_outputs": outputs.len().to_string()},
            "inputs": (0..inputs.len()).map(|i| json!([i, 0, 0])).collect::<Vec<_>>(),
            "output_names": outputs.iter().map(|v| v.name.clone()).collect::<Vec<_>>(),
        }));
        let all: Vec<&Var> = inputs.iter().chain(outputs.iter()).copied().collect();
        let mut sig = Map::new();
        for (i, v) in inputs.iter().enumerate() {
            sig.insert(
                v.name.clone(),
                json!({"id": i, "dtype": v.dtype.name(), "shape": v.shape}),
            );
        }
        let k = inputs.len();
        w.add_json("neff.json", &json!({
            "nodes": nodes,
            "arg_nodes": (0..k).collect::<Vec<_>>(),
            "heads": (0..outputs.len()).map(|i| json!([k, i, 0])).collect::<Vec<_>>(),
            "attrs": {
                "shape": ["list_shape", all.iter().map(|v| v.shape.clone()).collect::<Vec<_>>()],
                "storage_id": ["list_int", (0..all.len()).collect::<Vec<_>>()],
                "dltype": ["list_str", all.iter().map(|v| v.dtype.name()).collect::<Vec<_>>()],
            },
            "node_row_ptr": (0..=k).chain(std::iter::once(k + outputs.len())).collect::<Vec<_>>(),
            "metadata": {"signatures": {"default": {"inputs": sig, "outputs": {}}}},
        }))?;
        Ok(w.to_bytes()?)
    }
}

/// The `.npy` element type used for a dtype (bf16/fp8 as raw void bytes, as the compiler does).
pub fn npy_dtype(d: Dtype) -> NpyDtype {
    match d {
        Dtype::F32 | Dtype::F32r => NpyDtype::F32,
        Dtype::F16 => NpyDtype::F16,
        Dtype::I8 => NpyDtype::I8,
        Dtype::U8 => NpyDtype::U8,
        Dtype::I16 => NpyDtype::I16,
        Dtype::U16 => NpyDtype::U16,
        Dtype::I32 => NpyDtype::I32,
        Dtype::U32 => NpyDtype::U32,
        Dtype::I64 => NpyDtype::I64,
        Dtype::U64 => NpyDtype::U64,
        Dtype::Bf16 | Dtype::Fp8E3 | Dtype::Fp8E4 | Dtype::Fp8E5 => NpyDtype::Void(d.size()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_words_name_declared_vars_and_queue_semaphores() {
        let mut k = KernelBuilder::new("t");
        k.input("a", Dtype::F32, &[128, 4]).expect("input");
        k.dma_queue("q", Engine::Sp, &[8, 9]);
        let x = Xfer::row_tiles("a", Dtype::F32, 4, 4, 1, 64, 0);
        let w = k.dma("q", 9, &x).expect("dma").0;
        assert_eq!(
            w.addr("src"),
            Some(DmaAddr::VarRelative {
                offset: 0,
                var_id: 1,
                pad: 0
            })
        );
        assert_eq!(
            w.addr("dst"),
            Some(DmaAddr::VarRelative {
                offset: 64,
                var_id: 0,
                pad: 0
            })
        );
        assert_eq!(w.u("semaphore"), Some(9));
        assert!(matches!(
            k.dma("q", 10, &x),
            Err(BuildError::NotQueueSemaphore { .. })
        ));
        assert!(matches!(
            k.dma("p", 8, &x),
            Err(BuildError::UnknownQueue(_))
        ));
        let bad = Xfer::row_tiles("b", Dtype::F32, 4, 4, 1, 64, 0);
        assert!(matches!(
            k.dma("q", 8, &bad),
            Err(BuildError::UnknownVar(_))
        ));
        assert!(matches!(
            k.input(SB, Dtype::F32, &[1]),
            Err(BuildError::DuplicateVar(_))
        ));
    }
}
