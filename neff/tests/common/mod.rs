//! Shared helpers for the integration tests: fixture loading, a minimal
//! valid model, and raw builders that bypass the writer's validation.
#![allow(dead_code)]

use std::io::Write;

use flate2::{Compression, GzBuilder};
use neuron_neff::{NeffHeader, NeffWriter, NpyArray, NpyDtype, HEADER_SIZE};
use serde_json::json;

pub const FIXTURE_DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/real-neff/"
);

pub fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{FIXTURE_DIR}{name}");
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading fixture {path}: {e}"))
}

/// A small but complete model: neff.json → kelf-0.json → sg00/def.json →
/// five engine JSONs + .bin files, a file var (.npy), a tensor map, info.json.
pub fn sample_model() -> NeffWriter {
    let mut w = NeffWriter::new("sample.neff");
    w.header.feature_bits = neuron_neff::FEATURE_VNC;
    w.header.lnc_size = 2;
    let engines = [
        ("pe", "PE"),
        ("act", "Activation"),
        ("pool", "Pool"),
        ("dve", "DVE"),
        ("sp", "SP"),
    ];
    let mut def = serde_json::Map::new();
    for (key, stem) in engines {
        def.insert(key.into(), json!(format!("{stem}.json")));
        def.insert(format!("{key}_instr"), json!(format!("{stem}.bin")));
        w.add_member(&format!("sg00/{stem}.bin"), vec![0u8; 64]);
        w.add_json(
            &format!("sg00/{stem}.json"),
            &json!({"dma": [], "instr": format!("{stem}.bin"), "name": format!("{stem}.json")}),
        )
        .expect("engine json");
    }
    def.insert(
        "var".into(),
        json!({
            "x": {"type": "input", "var_id": 1, "size": 512, "ops": []},
            "out": {"type": "output", "var_id": 2, "size": 512, "ops": []},
            "w": {"type": "file", "var_id": 3, "size": 64, "file_name": "w.npy", "fabric_path": "main"},
            "SB": {"type": "state-buffer", "var_id": 0}
        }),
    );
    def.insert(
        "dma_queue".into(),
        json!({"qSPDynamicHW": {"type": "dynamic", "num_queues": 16, "owner": "sp",
               "semaphore_set": [8, 9], "fabric_path": "main"}}),
    );
    def.insert("neff_features".into(), json!(["neff_feature_vnc"]));
    def.insert("version".into(), json!("0.6"));
    w.add_json("sg00/def.json", &def).expect("def");
    let npy = NpyArray::new(NpyDtype::F32, vec![4, 4], vec![0u8; 64]).expect("npy");
    w.add_member("sg00/w.npy", npy.to_bytes());
    w.add_json(
        "sg00/tensor_map.json",
        &json!({"x": {"dtype": "float32", "kind": "input", "is_const": false, "sim_shape": [128, 1], "tf_shape": [128, 1]}}),
    )
    .expect("tmap");
    w.add_json(
        "kelf-0.json",
        &json!({"graphs": [{"definition": "sg00/def.json", "name": "sg00"}], "version": "0.5", "target": "cayman"}),
    )
    .expect("kelf");
    w.add_json(
        "info.json",
        &json!({"tool_version": "emu", "name": "sample.neff", "num_tpb": 1}),
    )
    .expect("info");
    w.add_json(
        "neff.json",
        &json!({
            "nodes": [
                {"op": "null", "name": "x", "inputs": [], "output_names": ["x"], "is_param": "0"},
                {"op": "tvm_op", "name": "sg", "attrs": {"func_name": "__kelf", "kelf": "kelf-0.json",
                  "num_inputs": "1", "num_outputs": "1"}, "inputs": [[0, 0, 0]], "output_names": ["out"]}
            ],
            "arg_nodes": [0], "heads": [[1, 0, 0]], "node_row_ptr": [0, 1, 2],
            "metadata": {"signatures": {"default": {"inputs": {"x": {"id": 0, "dtype": "float32", "shape": [128, 1]}}, "outputs": {}}}}
        }),
    )
    .expect("neff.json");
    w
}

/// gzip as the writer does.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzBuilder::new()
        .mtime(0)
        .operating_system(3)
        .write(Vec::new(), Compression::default());
    gz.write_all(bytes).expect("vec write");
    gz.finish().expect("vec write")
}

/// Header + payload, with `data_size = payload.len()`.
pub fn assemble(header: &NeffHeader, payload: &[u8]) -> Vec<u8> {
    let mut h = header.clone();
    h.header_size = HEADER_SIZE as u64;
    h.data_size = payload.len() as u64;
    let mut out = h.to_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

fn octal(field: &mut [u8], v: u64) {
    let digits = field.len() - 1;
    let s = format!("{v:0digits$o}");
    field[..digits].copy_from_slice(s.as_bytes());
    field[digits] = 0;
}

/// A raw ustar header with an arbitrary (unvalidated) name and type flag.
pub fn raw_header(name: &[u8], size: u64, typeflag: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], 0o664);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..271].copy_from_slice(b"nobody");
    h[297..303].copy_from_slice(b"nobody");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// A tar of raw entries `(name, data, typeflag)` plus the two end blocks.
pub fn raw_tar(entries: &[(&[u8], &[u8], u8)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data, ty) in entries {
        out.extend_from_slice(&raw_header(name, data.len() as u64, *ty));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// A NEFF from raw tar entries (regular files), default header.
pub fn neff_from_entries(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let raw: Vec<(&[u8], &[u8], u8)> = entries
        .iter()
        .map(|(n, d)| (n.as_bytes(), *d, b'0'))
        .collect();
    assemble(&NeffHeader::default(), &gzip(&raw_tar(&raw)))
}
