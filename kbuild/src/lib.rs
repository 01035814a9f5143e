//! A small kernel builder: write engine programs as [`Instr`]s plus DMA descriptions, get a
//! NEFF in the real container layout (1024-byte header, gzip'd ustar tar, `neff.json`,
//! `kelf-0.json`, `sgNN/def.json`, per-engine JSON and instruction files, `tensor_map.json`,
//! `.npy` constants).
//!
//! Programs use the project test encoding, so the NEFF carries
//! [`neuron_neff::FEATURE_EMU_TEST_ISA`], a bit the real runtime rejects.

pub mod kernels;
pub mod prng;

use neuron_isa::{testenc, Dtype, Engine, Instr};
use neuron_neff::npy::{NpyArray, NpyDtype};
use neuron_neff::{NeffWriter, FEATURE_EMU_TEST_ISA};
use serde_json::{json, Map, Value};

/// One DMA transfer: an access pattern over a source variable and one over a destination
/// (sizes and steps in elements, outermost first, at most 4 dimensions; offsets in bytes).
/// The variable `"SB"` is the core's state buffer: partition `p` starts at byte
/// `p * 0x40000`.
#[derive(Debug, Clone, PartialEq)]
pub struct Xfer {
    pub from: String,
    pub from_off: u64,
    pub from_sizes: Vec<u64>,
    pub from_steps: Vec<i64>,
    pub to: String,
    pub to_off: u64,
    pub to_sizes: Vec<u64>,
    pub to_steps: Vec<i64>,
    pub dtype: Dtype,
}

/// The state buffer's variable name in `def.json`.
pub const SB: &str = "SB";
/// Elements of `dtype` per SBUF partition stride.
pub fn sb_partition_step(dtype: Dtype) -> i64 {
    (neuron_abi::tpb::SBUF_PARTITION_STRIDE / dtype.size() as u64) as i64
}

impl Xfer {
    /// Rows `[row0, row0+rows)` x cols `[col0, col0+cols)` of a row-major DRAM matrix with
    /// `ld` columns, into partitions `p0..p0+rows` at byte `sb_off`.
    #[allow(clippy::too_many_arguments)]
    pub fn load(
        var: &str,
        dtype: Dtype,
        ld: u64,
        row0: u64,
        col0: u64,
        rows: u64,
        cols: u64,
        p0: u64,
        sb_off: u64,
    ) -> Xfer {
        let es = dtype.size() as u64;
        Xfer {
            from: var.into(),
            from_off: (row0 * ld + col0) * es,
            from_sizes: vec![rows, cols],
            from_steps: vec![ld as i64, 1],
            to: SB.into(),
            to_off: p0 * neuron_abi::tpb::SBUF_PARTITION_STRIDE + sb_off,
            to_sizes: vec![rows, cols],
            to_steps: vec![sb_partition_step(dtype), 1],
            dtype,
        }
    }

    /// The same DRAM row of `cols` elements broadcast into `rows` partitions.
    pub fn broadcast_row(
        var: &str,
        dtype: Dtype,
        off_elems: u64,
        rows: u64,
        cols: u64,
        sb_off: u64,
    ) -> Xfer {
        let es = dtype.size() as u64;
        Xfer {
            from: var.into(),
            from_off: off_elems * es,
            from_sizes: vec![rows, cols],
            from_steps: vec![0, 1],
            to: SB.into(),
            to_off: sb_off,
            to_sizes: vec![rows, cols],
            to_steps: vec![sb_partition_step(dtype), 1],
            dtype,
        }
    }

    /// `n` consecutive DRAM elements into one column: element `i` to partition `i`.
    pub fn column(var: &str, dtype: Dtype, off_elems: u64, n: u64, sb_off: u64) -> Xfer {
        let es = dtype.size() as u64;
        Xfer {
            from: var.into(),
            from_off: off_elems * es,
            from_sizes: vec![n],
            from_steps: vec![1],
            to: SB.into(),
            to_off: sb_off,
            to_sizes: vec![n],
            to_steps: vec![sb_partition_step(dtype)],
            dtype,
        }
    }

    /// Partitions `0..rows`, `cols` elements at `sb_off`, out to a row-major DRAM matrix.
    pub fn store(var: &str, dtype: Dtype, ld: u64, rows: u64, cols: u64, sb_off: u64) -> Xfer {
        Xfer {
            from: SB.into(),
            from_off: sb_off,
            from_sizes: vec![rows, cols],
            from_steps: vec![sb_partition_step(dtype), 1],
            to: var.into(),
            to_off: 0,
            to_sizes: vec![rows, cols],
            to_steps: vec![ld as i64, 1],
            dtype,
        }
    }

    fn json(&self) -> Value {
        json!({
            "op": "copy",
            "from": self.from, "from_off": self.from_off, "from_sizes": self.from_sizes, "from_steps": self.from_steps,
            "from_dtype": self.dtype.name(),
            "to": self.to, "to_off": self.to_off, "to_sizes": self.to_sizes, "to_steps": self.to_steps,
            "to_dtype": self.dtype.name(),
            "num_tiling_dimensions": self.from_sizes.len().max(self.to_sizes.len()),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("duplicate variable '{0}'")]
    DuplicateVar(String),
    #[error("constant '{name}' has {got} bytes, shape needs {want}")]
    ConstantSize { name: String, got: usize, want: u64 },
    #[error("unknown DMA queue '{0}'")]
    UnknownQueue(String),
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
    programs: [Vec<Instr>; 5],
    dma: [Vec<Value>; 5],
    raw_words: [Vec<[u8; 64]>; 5],
}

impl KernelBuilder {
    pub fn new(name: &str) -> Self {
        KernelBuilder {
            name: name.to_string(),
            vars: Vec::new(),
            queues: Vec::new(),
            programs: Default::default(),
            dma: Default::default(),
            raw_words: Default::default(),
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

    /// Declare a DMA queue triggered by `owner`, with the semaphores its blocks may bump.
    pub fn dma_queue(&mut self, name: &str, owner: Engine, semaphores: &[u32]) {
        self.queues.push((name.into(), owner, semaphores.to_vec()));
    }

    /// Add a DMA block to `engine`'s JSON; returns its id (for `Op::DmaTrigger`). The block
    /// increments `semaphore` when its last transfer lands.
    pub fn dma(
        &mut self,
        engine: Engine,
        queue: &str,
        semaphore: Option<u8>,
        xfers: &[Xfer],
    ) -> Result<u16, BuildError> {
        if !self.queues.iter().any(|q| q.0 == queue) {
            return Err(BuildError::UnknownQueue(queue.into()));
        }
        let list = &mut self.dma[engine.index()];
        let id = list.len() as u16;
        let mut b = Map::new();
        b.insert("id".into(), json!(id));
        b.insert("queue".into(), json!(queue));
        if let Some(s) = semaphore {
            b.insert("semaphore".into(), json!(s));
        }
        b.insert(
            "desc".into(),
            Value::Array(xfers.iter().map(Xfer::json).collect()),
        );
        list.push(Value::Object(b));
        Ok(id)
    }

    /// Append an instruction to `engine`'s program.
    pub fn push(&mut self, engine: Engine, i: Instr) {
        self.programs[engine.index()].push(i);
    }

    /// Append a raw 64-byte word (for tests of bad programs).
    pub fn push_raw(&mut self, engine: Engine, w: [u8; 64]) {
        self.programs[engine.index()].push(Instr::new(neuron_isa::Op::Nop));
        let idx = self.programs[engine.index()].len() - 1;
        self.raw_words[engine.index()].resize(idx + 1, [0u8; 64]);
        self.raw_words[engine.index()][idx] = w;
    }

    fn program_bytes(&self, e: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.programs[e].len() * 64);
        for (i, ins) in self.programs[e].iter().enumerate() {
            match self.raw_words[e].get(i) {
                Some(w) if w[1] != 0 => out.extend_from_slice(w),
                _ => out.extend_from_slice(&testenc::encode(ins)),
            }
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
        w.header.feature_bits = FEATURE_EMU_TEST_ISA;

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
        w.add_json("kelf-0.json", &json!({"graphs": [{"definition": "sg00/def.json", "name": "sg00"}], "version": "0.5", "target": "emu-test"}))?;

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
            queues.insert(n.clone(), json!({"type": "data", "num_queues": 1, "owner": owner.def_name(), "semaphore_set": sems, "fabric_path": "main"}));
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
        def.insert("runtime_event_count".into(), json!(0));
        def.insert("runtime_semaphore_count".into(), json!(1));
        def.insert("neff_features".into(), json!([]));
        w.add_json("sg00/def.json", &Value::Object(def))?;
        for (e, stem) in files {
            w.add_json(&format!("sg00/{stem}.json"), &json!({"dma": self.dma[e.index()], "instr": format!("{stem}.bin"), "name": format!("{stem}.json")}))?;
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
