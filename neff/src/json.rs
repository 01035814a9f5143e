//! Typed views of the JSON members (shapes taken from the real fixtures,
//! reference §3.6).
//!
//! Every struct keeps unknown keys in `extra` (`#[serde(flatten)]`), so a
//! file is never rejected for having more fields than we know; optional
//! fields are `Option` or `#[serde(default)]`. A JSON member that is not
//! JSON at all is [`NeffError::Json`]; valid JSON of the wrong shape
//! (e.g. `"num_queues": "x"`) is [`NeffError::JsonShape`].

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::NeffError;

/// Unknown keys of a JSON object, in file order.
pub type Extra = Map<String, Value>;

pub(crate) fn parse_json<T: DeserializeOwned>(member: &str, bytes: &[u8]) -> Result<T, NeffError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => NeffError::JsonShape {
            member: member.to_owned(),
            what: e.to_string(),
        },
        _ => NeffError::Json {
            member: member.to_owned(),
            source: e,
        },
    })
}

// ------------------------------------------------------------------ neff.json

/// `neff.json`: the top-level TVM-relay-style graph.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeffJson {
    pub nodes: Vec<NeffNode>,
    #[serde(default)]
    pub arg_nodes: Vec<u64>,
    /// `[[node, output, version], ...]`
    #[serde(default)]
    pub heads: Vec<Vec<u64>>,
    #[serde(default)]
    pub attrs: GraphAttrs,
    #[serde(default)]
    pub node_row_ptr: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<NeffMetadata>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One graph node. Inputs have `"op": "null"`; the compute node has
/// `"op": "tvm_op"` and `attrs.func_name == "__kelf"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeffNode {
    pub op: String,
    pub name: String,
    /// `[[node, output, version], ...]`
    #[serde(default)]
    pub inputs: Vec<Vec<u64>>,
    #[serde(default)]
    pub output_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attrs: Option<NodeAttrs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_param: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Attributes of a compute node; numbers are strings in real files (`"num_inputs": "2"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeAttrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub func_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flatten_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_inputs: Option<String>,
    /// The kelf member, e.g. `kelf-0.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kelf: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_outputs: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `attrs` of the graph: `["list_shape", [[..], ..]]`, `["list_int", [..]]`, `["list_str", [..]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphAttrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<(String, Vec<Vec<u64>>)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_id: Option<(String, Vec<u64>)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dltype: Option<(String, Vec<String>)>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `metadata`: `{"signatures": {"default": {"inputs": {..}, "outputs": {..}}}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeffMetadata {
    #[serde(default)]
    pub signatures: BTreeMap<String, Signature>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One signature: tensors by name (order is by `id`, not by key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    #[serde(default)]
    pub inputs: BTreeMap<String, SignatureTensor>,
    /// Empty in every real fixture; outputs are the def.json `output` vars.
    #[serde(default)]
    pub outputs: BTreeMap<String, SignatureTensor>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `{"id": 0, "dtype": "float16", "shape": [128, 256]}`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SignatureTensor {
    pub id: u32,
    pub dtype: String,
    pub shape: Vec<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl NeffJson {
    /// `metadata.signatures.default.inputs` as `(name, dtype, shape)` in `id` order.
    pub fn inputs(&self) -> Vec<(String, String, Vec<u64>)> {
        let Some(sig) = self
            .metadata
            .as_ref()
            .and_then(|m| m.signatures.get("default"))
        else {
            return Vec::new();
        };
        let mut v: Vec<(u32, String, String, Vec<u64>)> = sig
            .inputs
            .iter()
            .map(|(n, t)| (t.id, n.clone(), t.dtype.clone(), t.shape.clone()))
            .collect();
        v.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        v.into_iter().map(|(_, n, d, s)| (n, d, s)).collect()
    }

    /// The kelf member named by the `__kelf` node (`attrs.kelf`); failing
    /// that, by any node carrying `attrs.kelf`.
    pub fn kelf_member(&self) -> Option<String> {
        let attrs = || self.nodes.iter().filter_map(|n| n.attrs.as_ref());
        attrs()
            .find(|a| a.func_name.as_deref() == Some("__kelf") && a.kelf.is_some())
            .or_else(|| attrs().find(|a| a.kelf.is_some()))
            .and_then(|a| a.kelf.clone())
    }
}

// ------------------------------------------------------------------ kelf

/// `kelf-0.json`: one graph per physical core.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Kelf {
    pub graphs: Vec<KelfGraph>,
    /// `"0.5"` in real files.
    #[serde(default)]
    pub version: String,
    /// `"sunda"` (trn1/inf2) or `"cayman"` (trn2).
    #[serde(default)]
    pub target: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `{"definition": "sg00/def.json", "name": "sg00"}`
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KelfGraph {
    pub definition: String,
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

impl KelfGraph {
    /// Directory holding the definition (`"sg00"` for `"sg00/def.json"`; `""` at top level).
    /// Files named in def.json are relative to it.
    pub fn dir(&self) -> &str {
        self.definition
            .rsplit_once('/')
            .map(|(d, _)| d)
            .unwrap_or("")
    }
}

// ------------------------------------------------------------------ def.json

/// Variable type (`var.<name>.type`): an open set, unknown strings are kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VarType {
    /// `"input"`
    Input,
    /// `"output"`
    Output,
    /// `"file"`: constant loaded from `file_name`.
    File,
    /// `"virtual"`: view into another variable (`backing_variable_off`).
    Virtual,
    /// `"state-buffer"`
    StateBuffer,
    /// `"dge-table"`
    DgeTable,
    /// `"tmp-buf"`
    TmpBuf,
    /// `"pointer"`
    Pointer,
    /// Anything else, verbatim.
    Other(String),
}

impl VarType {
    /// The JSON string.
    pub fn as_str(&self) -> &str {
        match self {
            VarType::Input => "input",
            VarType::Output => "output",
            VarType::File => "file",
            VarType::Virtual => "virtual",
            VarType::StateBuffer => "state-buffer",
            VarType::DgeTable => "dge-table",
            VarType::TmpBuf => "tmp-buf",
            VarType::Pointer => "pointer",
            VarType::Other(s) => s,
        }
    }

    /// From the JSON string; unknown strings become [`VarType::Other`].
    pub fn from_name(s: &str) -> VarType {
        match s {
            "input" => VarType::Input,
            "output" => VarType::Output,
            "file" => VarType::File,
            "virtual" => VarType::Virtual,
            "state-buffer" => VarType::StateBuffer,
            "dge-table" => VarType::DgeTable,
            "tmp-buf" => VarType::TmpBuf,
            "pointer" => VarType::Pointer,
            other => VarType::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for VarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for VarType {
    fn from(s: &str) -> Self {
        VarType::from_name(s)
    }
}

impl Serialize for VarType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for VarType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(VarType::from_name(&s))
    }
}

/// One variable of a subgraph. Unlisted keys (`ops`, `backing_variable_off`,
/// `referenced_var_id`, ...) are in `extra`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarDef {
    #[serde(rename = "type")]
    pub ty: VarType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub var_id: Option<u32>,
    /// Bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alignment: Option<u64>,
    /// For `file` vars: the constant's member name, relative to the subgraph directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_path: Option<String>,
    /// For `dge-table` vars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<Vec<u64>>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl VarDef {
    /// A var of type `ty` with every optional field empty.
    pub fn new(ty: VarType) -> Self {
        VarDef {
            ty,
            var_id: None,
            size: None,
            alignment: None,
            file_name: None,
            fabric_path: None,
            list: None,
            extra: Extra::new(),
        }
    }
}

/// A DMA queue (`dma_queue.<name>`). Real trn2 files only have `"type": "dynamic"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DmaQueueDef {
    /// `in`, `out`, `data`, `embedding_update`, `dynamic`.
    #[serde(rename = "type")]
    pub ty: String,
    pub num_queues: u32,
    /// Engine that owns the queue (`sp`, `act`, `pool`, ...).
    pub owner: String,
    #[serde(default)]
    pub semaphore_set: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_path: Option<String>,
    /// e.g. `{"SB_scratch_partition_offset": 0, "SB_scratch_partition_size": 16384}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_dma: Option<Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `runtime_statebuffer_reservation` entry, e.g.
/// `{"base_partition":0,"offset":229368,"partitions":128,"size":8,"type":"evtaccel"}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StateBufferReservation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_partition: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub ty: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `sgNN/def.json`: the subgraph definition. Unlisted keys (`version`, `name`,
/// `*_dbg`, `cc_streams`, `fp8_conversion_config`, `#rank_world_size`, ...) are in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubgraphDef {
    #[serde(default)]
    pub var: BTreeMap<String, VarDef>,
    #[serde(default)]
    pub dma_queue: BTreeMap<String, DmaQueueDef>,
    /// Scalar engine (Activation) JSON / instruction stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act_instr: Option<String>,
    /// Vector engine (DVE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dve: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dve_instr: Option<String>,
    /// Tensor engine (PE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pe: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pe_instr: Option<String>,
    /// GpSimd engine (Pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_instr: Option<String>,
    /// Sync engine (SP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sp_instr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_event_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_semaphore_count: Option<u32>,
    /// e.g. `["neff_feature_vnc"]`.
    #[serde(default)]
    pub neff_features: Vec<String>,
    #[serde(default)]
    pub runtime_statebuffer_reservation: Vec<StateBufferReservation>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The five engines, in the order [`SubgraphDef::engine_files`] returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EngineKind {
    /// PE: tensor engine.
    Pe,
    /// Activation: scalar engine.
    Act,
    /// Pool: GpSimd engine.
    Pool,
    /// DVE: vector engine.
    Dve,
    /// SP: sync engine.
    Sp,
}

impl EngineKind {
    /// All five, in order.
    pub const ALL: [EngineKind; 5] = [
        EngineKind::Pe,
        EngineKind::Act,
        EngineKind::Pool,
        EngineKind::Dve,
        EngineKind::Sp,
    ];

    /// The def.json key prefix (`pe`, `act`, `pool`, `dve`, `sp`).
    pub fn def_key(&self) -> &'static str {
        match self {
            EngineKind::Pe => "pe",
            EngineKind::Act => "act",
            EngineKind::Pool => "pool",
            EngineKind::Dve => "dve",
            EngineKind::Sp => "sp",
        }
    }

    /// The engine's role name (Tensor, Scalar, GpSimd, Vector, Sync).
    pub fn role(&self) -> &'static str {
        match self {
            EngineKind::Pe => "Tensor",
            EngineKind::Act => "Scalar",
            EngineKind::Pool => "GpSimd",
            EngineKind::Dve => "Vector",
            EngineKind::Sp => "Sync",
        }
    }

    /// The file stem compilers use (`PE`, `Activation`, `Pool`, `DVE`, `SP`).
    pub fn file_stem(&self) -> &'static str {
        match self {
            EngineKind::Pe => "PE",
            EngineKind::Act => "Activation",
            EngineKind::Pool => "Pool",
            EngineKind::Dve => "DVE",
            EngineKind::Sp => "SP",
        }
    }
}

impl SubgraphDef {
    /// `(engine, json file, instr file)` for PE, Act, Pool, DVE, SP, relative to the subgraph dir.
    pub fn engine_files(&self) -> [(EngineKind, Option<&str>, Option<&str>); 5] {
        [
            (EngineKind::Pe, self.pe.as_deref(), self.pe_instr.as_deref()),
            (
                EngineKind::Act,
                self.act.as_deref(),
                self.act_instr.as_deref(),
            ),
            (
                EngineKind::Pool,
                self.pool.as_deref(),
                self.pool_instr.as_deref(),
            ),
            (
                EngineKind::Dve,
                self.dve.as_deref(),
                self.dve_instr.as_deref(),
            ),
            (EngineKind::Sp, self.sp.as_deref(), self.sp_instr.as_deref()),
        ]
    }

    /// Vars of type `ty`, ordered by `var_id` (vars without one last), then name.
    pub fn vars_of_type(&self, ty: &VarType) -> Vec<(&str, &VarDef)> {
        let mut v: Vec<(&str, &VarDef)> = self
            .var
            .iter()
            .filter(|(_, d)| &d.ty == ty)
            .map(|(n, d)| (n.as_str(), d))
            .collect();
        v.sort_by_key(|(n, d)| (d.var_id.unwrap_or(u32::MAX), *n));
        v
    }
}

/// The DMA-trigger queue an engine owns (`EngineJson::owned_queue`): the queue its `dma`
/// blocks name, its `def.json` entry, and how many of the blocks are on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OwnedQueue<'a> {
    pub name: &'a str,
    /// `dma_queue.<name>` of `def.json`, if it declares the queue.
    pub def: Option<&'a DmaQueueDef>,
    pub blocks: usize,
}

// ------------------------------------------------------------------ engine JSON

/// `sgNN/{PE,Activation,Pool,DVE,SP}.json`. Engine-specific keys
/// (`act_info`, `act_semaphore`, `activation_function_sets`, `dve_tables`)
/// are in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineJson {
    /// Static DMA blocks; `[]` in every real trn2 fixture (they use dynamic DMA).
    #[serde(default)]
    pub dma: Vec<DmaBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl EngineJson {
    /// The DMA-trigger queue this engine owns: the queue its `dma` blocks name (the first by
    /// name if they named several, which no NEFF seen does). `None` for an engine without
    /// blocks (all 8 `real-neff` fixtures, 17 of the 20 model-layer programs).
    pub fn owned_queue<'a>(&'a self, def: &'a SubgraphDef) -> Option<OwnedQueue<'a>> {
        let name = self.dma.iter().filter_map(|b| b.queue.as_deref()).min()?;
        let blocks = self
            .dma
            .iter()
            .filter(|b| b.queue.as_deref() == Some(name))
            .count();
        Some(OwnedQueue {
            name,
            def: def.dma_queue.get(name),
            blocks,
        })
    }

    /// Whether the engine loads activation tables (`activation_function_sets` not empty).
    pub fn has_activation_tables(&self) -> bool {
        self.extra
            .get("activation_function_sets")
            .and_then(|v| v.as_array())
            .is_some_and(|a| !a.is_empty())
    }
}

/// One static DMA block of an engine (official doc field names).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DmaBlock {
    pub id: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semaphore: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<u32>,
    #[serde(default)]
    pub desc: Vec<DmaDescJson>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One DMA descriptor: `from`/`to` are var names; sizes/steps ≤ 4 dims.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DmaDescJson {
    pub op: String,
    pub from: String,
    #[serde(default)]
    pub from_off: u64,
    #[serde(default)]
    pub from_sizes: Vec<u64>,
    #[serde(default)]
    pub from_steps: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_dtype: Option<String>,
    pub to: String,
    #[serde(default)]
    pub to_off: u64,
    #[serde(default)]
    pub to_sizes: Vec<u64>,
    #[serde(default)]
    pub to_steps: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_tiling_dimensions: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ------------------------------------------------------------------ tensor_map.json

/// `sgNN/tensor_map.json`: per-tensor metadata by name.
pub type TensorMap = BTreeMap<String, TensorMapEntry>;

/// One tensor. Unlisted keys (`layer_name`, `sim_format`, `tf_format`,
/// `tf_file`, `split_axis`, `split_indices_or_sections`) are in `extra`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorMapEntry {
    /// e.g. `float16`, `bfloat16`, `float32`.
    pub dtype: String,
    /// `input` / `output`; absent for internal tensors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_const: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_shape: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf_shape: Option<Vec<u64>>,
    #[serde(flatten)]
    pub extra: Extra,
}

// ------------------------------------------------------------------ info.json

/// `info.json`: compiler version and core counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InfoJson {
    /// e.g. `"2.23.6484.0+3b612583"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
    /// `"Dynamic"` in real files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kelp_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_tpb: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_tpb_requested: Option<u32>,
    /// 64 entries in real files.
    #[serde(default)]
    pub num_tpb_per_node: Vec<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_owns_the_queue_its_blocks_name() {
        let mut def = SubgraphDef::default();
        def.dma_queue.insert(
            "qB".into(),
            DmaQueueDef {
                ty: "data".into(),
                num_queues: 16,
                ..Default::default()
            },
        );
        let block = |id, q: &str| DmaBlock {
            id,
            queue: Some(q.into()),
            ..Default::default()
        };
        let mut ej = EngineJson::default();
        assert_eq!(ej.owned_queue(&def), None);
        ej.dma = vec![block(0, "qB"), block(1, "qZ"), block(2, "qB")];
        let q = ej.owned_queue(&def).expect("owned");
        assert_eq!((q.name, q.blocks), ("qB", 2));
        assert_eq!(q.def.map(|d| d.num_queues), Some(16));
        ej.dma = vec![block(0, "qZ")];
        assert_eq!(ej.owned_queue(&def).map(|q| q.def), Some(None));
        assert!(!ej.has_activation_tables());
        ej.extra
            .insert("activation_function_sets".into(), serde_json::json!([]));
        assert!(!ej.has_activation_tables());
        ej.extra.insert(
            "activation_function_sets".into(),
            serde_json::json!([{"x": 1}]),
        );
        assert!(ej.has_activation_tables());
    }

    #[test]
    fn var_type_is_open_and_round_trips() {
        for s in [
            "input",
            "output",
            "file",
            "virtual",
            "state-buffer",
            "dge-table",
            "tmp-buf",
            "pointer",
            "something-new",
        ] {
            let t: VarType = serde_json::from_value(Value::String(s.into())).expect("string");
            assert_eq!(t.as_str(), s);
            assert_eq!(
                serde_json::to_value(&t).expect("ser"),
                Value::String(s.into())
            );
        }
        assert_eq!(VarType::from_name("weird"), VarType::Other("weird".into()));
    }

    #[test]
    fn extra_fields_are_kept() {
        let v: VarDef = parse_json(
            "d",
            br#"{"type":"virtual","size":8,"backing_variable_off":4,"ops":[]}"#,
        )
        .expect("parses");
        assert_eq!(v.ty, VarType::Virtual);
        assert_eq!(v.extra.get("backing_variable_off"), Some(&Value::from(4)));
        let back = serde_json::to_value(&v).expect("ser");
        assert_eq!(back["backing_variable_off"], 4);
        assert_eq!(back["type"], "virtual");
    }

    #[test]
    fn syntax_and_shape_errors_are_distinct() {
        assert!(matches!(
            parse_json::<DmaQueueDef>("q", b"{"),
            Err(NeffError::Json { .. })
        ));
        assert!(matches!(
            parse_json::<DmaQueueDef>("q", br#"{"type":"dynamic","num_queues":"x","owner":"sp"}"#),
            Err(NeffError::JsonShape { .. })
        ));
    }

    #[test]
    fn kelf_graph_dir() {
        let g = KelfGraph {
            definition: "sg01/def.json".into(),
            name: "sg01".into(),
            extra: Extra::new(),
        };
        assert_eq!(g.dir(), "sg01");
        let g = KelfGraph {
            definition: "def.json".into(),
            ..g
        };
        assert_eq!(g.dir(), "");
    }
}
