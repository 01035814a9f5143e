//! The eight real neuronx-cc NEFFs in `shared/fixtures/real-neff/`.
//!
//! Expected values: reference `nrt-api-and-neff.md` §4.3/§4.4, cross-checked
//! against the files (python zlib+tarfile). `akc-baseline_fp32_s512` and
//! `akc-fused_bf16_s512` are not in the doc tables; their values were
//! measured here.

mod common;

use common::fixture;
use neuron_neff::{
    EngineKind, HashAlgorithm, Neff, NeffError, NeffWriter, NpyArray, NpyDtype, ParseOptions,
    VarType,
};

struct Expected {
    file: &'static str,
    data_size: u64,
    name: &'static str,
    feature_bits: u64,
    uuid: &'static str,
    members: usize,
    inputs: &'static [(&'static str, &'static str, [u64; 2])],
    output: &'static str,
    /// hash[0..16] as stored.
    stored_hash: &'static str,
    /// MD5 of data[0..data_size] (what libnrt's rule expects to find).
    md5_data: &'static str,
}

const BF16: &str = "bfloat16";
const F32: &str = "float32";
const F16: &str = "float16";

const EXPECTED: &[Expected] = &[
    Expected {
        file: "nkipy-matmul_small.neff",
        data_size: 61440,
        name: "file.neff",
        feature_bits: 0x209c00,
        uuid: "00a04c53-5fd9-4f07-bffd-d5eacdefc852",
        members: 72,
        inputs: &[("x", F16, [128, 256]), ("y", F16, [256, 128])],
        output: "output0",
        stored_hash: "bcb3e9ef77301698cd8b4cb9471ff5ac",
        md5_data: "efe9b3bc98163077b94c8bcdacf51f47",
    },
    Expected {
        file: "nkipy-matmul_large.neff",
        data_size: 1515520,
        name: "file.neff",
        feature_bits: 0x201c00,
        uuid: "25e09fd2-caca-464a-9ec3-58c85854fd38",
        members: 72,
        inputs: &[("x", F16, [128, 32768]), ("y", F16, [32768, 65536])],
        output: "output0",
        stored_hash: "e116846fc3dd76b7fb2b87229a70151a",
        md5_data: "6f8416e1b776ddc322872bfb1a15709a",
    },
    Expected {
        file: "akc-baseline_bf16_s512.neff",
        data_size: 40960,
        name: "baseline.neff",
        feature_bits: 0xc00,
        uuid: "630e7739-f97c-4d40-b603-ffb553f8ae32",
        members: 67,
        inputs: &[
            ("q_ref", BF16, [128, 512]),
            ("k_ref", BF16, [128, 512]),
            ("v_ref", BF16, [128, 512]),
        ],
        output: "kernel_out",
        stored_hash: "7b1347762881aeccd977c60c08eba6a4",
        md5_data: "7647137bccae81280cc677d9a4a6eb08",
    },
    Expected {
        file: "akc-fused_bf16_s1024.neff",
        data_size: 51200,
        name: "fused.neff",
        feature_bits: 0xc00,
        uuid: "8a9ee31b-a6e8-4052-8fbf-bdb5d2db5d4b",
        members: 67,
        inputs: &[
            ("q_ref", BF16, [128, 1024]),
            ("k_ref", BF16, [128, 1024]),
            ("v_ref", BF16, [128, 1024]),
        ],
        output: "kernel_out",
        stored_hash: "b65a590282c3d4c56fd800dc46b17f8a",
        md5_data: "02595ab6c5d4c382dc00d86f8a7fb146",
    },
    Expected {
        file: "akc-baseline_fp32_s1024.neff",
        data_size: 51200,
        name: "baseline.neff",
        feature_bits: 0xc00,
        uuid: "5300eb4c-8c6f-4ab4-9adb-f7a49068b1f3",
        members: 65,
        inputs: &[
            ("q_ref", F32, [128, 1024]),
            ("k_ref", F32, [128, 1024]),
            ("v_ref", F32, [128, 1024]),
        ],
        output: "kernel_out",
        stored_hash: "3f717f165aa22f2ac8a7b5b34373f765",
        md5_data: "167f713f2a2fa25ab3b5a7c865f77343",
    },
    Expected {
        file: "akc-fused_fp32_s512.neff",
        data_size: 40960,
        name: "fused.neff",
        feature_bits: 0xc00,
        uuid: "858910c2-4e1f-4fc7-83a8-81c09fb52205",
        members: 65,
        inputs: &[
            ("q_ref", F32, [128, 512]),
            ("k_ref", F32, [128, 512]),
            ("v_ref", F32, [128, 512]),
        ],
        output: "kernel_out",
        stored_hash: "427efdc00a1c195bb481a02b64e8d5e4",
        md5_data: "c0fd7e425b191c0a2ba081b4e4d5e864",
    },
    // Not in the reference doc's tables: measured from the files.
    Expected {
        file: "akc-baseline_fp32_s512.neff",
        data_size: 40960,
        name: "baseline.neff",
        feature_bits: 0xc00,
        uuid: "219e2f5c-00cd-41d5-a790-84eea2d30b6b",
        members: 65,
        inputs: &[
            ("q_ref", F32, [128, 512]),
            ("k_ref", F32, [128, 512]),
            ("v_ref", F32, [128, 512]),
        ],
        output: "kernel_out",
        stored_hash: "5ab9cc33c5e3fc214c7240d157bc4732",
        md5_data: "33ccb95a21fce3c5d140724c3247bc57",
    },
    Expected {
        file: "akc-fused_bf16_s512.neff",
        data_size: 40960,
        name: "fused.neff",
        feature_bits: 0xc00,
        uuid: "dde49a87-175a-4a58-a152-58f2942acf29",
        members: 67,
        inputs: &[
            ("q_ref", BF16, [128, 512]),
            ("k_ref", BF16, [128, 512]),
            ("v_ref", BF16, [128, 512]),
        ],
        output: "kernel_out",
        stored_hash: "81828c3cda2feba288d8d390d645d3f5",
        md5_data: "3c8c8281a2eb2fda90d3d888f5d345d6",
    },
];

fn parse(e: &Expected) -> Neff {
    Neff::parse(&fixture(e.file)).unwrap_or_else(|err| panic!("{}: {err}", e.file))
}

#[test]
fn fixture_set_is_complete() {
    let mut on_disk: Vec<String> = std::fs::read_dir(common::FIXTURE_DIR)
        .expect("fixture dir")
        .filter_map(|d| d.ok())
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".neff"))
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = EXPECTED.iter().map(|e| e.file.to_owned()).collect();
    expected.sort();
    assert_eq!(on_disk, expected);
}

#[test]
fn headers_match_the_reference() {
    for e in EXPECTED {
        let bytes = fixture(e.file);
        let n = parse(e);
        let h = n.header();
        assert_eq!(h.pkg_version, 2, "{}", e.file);
        assert_eq!(h.header_size, 1024, "{}", e.file);
        assert_eq!(h.data_size, e.data_size, "{}", e.file);
        assert_eq!(bytes.len() as u64, 1024 + e.data_size, "{}", e.file);
        assert_eq!((h.version_major, h.version_minor), (2, 0), "{}", e.file);
        assert_eq!(h.build_version_str(), "", "{}", e.file);
        assert_eq!(h.num_tpb, 1, "{}", e.file);
        assert_eq!(h.requested_tpb_count, 1, "{}", e.file);
        assert_eq!(h.tpb_per_node[0], 1, "{}", e.file);
        assert!(h.tpb_per_node[1..].iter().all(|&b| b == 0), "{}", e.file);
        assert_eq!(h.name_str(), e.name, "{}", e.file);
        assert_eq!(h.feature_bits, e.feature_bits, "{}", e.file);
        assert!(
            h.feature_names().contains(&"neff_feature_vnc"),
            "{}",
            e.file
        );
        assert_eq!(h.lnc_size, 2, "{}", e.file);
        assert_eq!(h.uuid_string(), e.uuid, "{}", e.file);
        assert!(h.hash[16..].iter().all(|&b| b == 0), "{}", e.file);
        // The header re-encodes to the same bytes.
        assert_eq!(&h.to_bytes()[..], &bytes[..1024], "{}", e.file);
    }
}

#[test]
fn members_inputs_and_outputs() {
    for e in EXPECTED {
        let n = parse(e);
        assert_eq!(n.member_count(), e.members, "{}", e.file);
        assert_eq!(n.members().count(), e.members, "{}", e.file);
        // trn2 files put neff.json last.
        assert_eq!(n.members().last().map(|(p, _)| p), Some("neff.json"));

        let nj = n.neff_json().expect("neff.json");
        let inputs = nj.inputs();
        let want: Vec<(String, String, Vec<u64>)> = e
            .inputs
            .iter()
            .map(|(name, dt, shape)| (name.to_string(), dt.to_string(), shape.to_vec()))
            .collect();
        assert_eq!(inputs, want, "{}", e.file);
        assert_eq!(nj.kelf_member().as_deref(), Some("kelf-0.json"));

        let kelf = n.kelf().expect("kelf");
        assert_eq!(kelf.target, "cayman", "{}", e.file);
        assert_eq!(kelf.version, "0.5", "{}", e.file);
        let names: Vec<&str> = kelf.graphs.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["sg00", "sg01"], "{}", e.file);

        let def = n.subgraph_def("sg00/def.json").expect("def");
        let outs: Vec<&str> = def
            .vars_of_type(&VarType::Output)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(outs, [e.output], "{}", e.file);
        let ins: Vec<&str> = def
            .vars_of_type(&VarType::Input)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let want_ins: Vec<&str> = e.inputs.iter().map(|i| i.0).collect();
        assert_eq!(ins, want_ins, "{}", e.file);
        assert_eq!(def.neff_features, ["neff_feature_vnc"], "{}", e.file);

        let info = n.info().expect("info parses").expect("info present");
        assert_eq!(
            info.tool_version.as_deref(),
            Some("2.23.6484.0+3b612583"),
            "{}",
            e.file
        );
        assert_eq!(info.name.as_deref(), Some(e.name), "{}", e.file);
        assert_eq!(info.num_tpb, Some(1));
        assert_eq!(info.num_tpb_per_node.len(), 64);
    }
}

#[test]
fn references_resolve() {
    for e in EXPECTED {
        parse(e)
            .validate_references()
            .unwrap_or_else(|err| panic!("{}: {err}", e.file));
    }
}

#[test]
fn typed_views_parse_for_every_subgraph() {
    for e in EXPECTED {
        let n = parse(e);
        let kelf = n.kelf().expect("kelf");
        for g in &kelf.graphs {
            let sg = g.dir();
            let def = n
                .subgraph_def(&g.definition)
                .unwrap_or_else(|err| panic!("{}: {err}", e.file));
            assert_eq!(def.runtime_event_count, Some(12), "{}", e.file);
            assert_eq!(def.runtime_semaphore_count, Some(3), "{}", e.file);
            assert_eq!(def.runtime_statebuffer_reservation.len(), 1);
            assert_eq!(
                def.runtime_statebuffer_reservation[0].ty.as_deref(),
                Some("evtaccel")
            );
            assert!(def.var.contains_key("SB"));
            assert!(def.var.values().all(|v| !matches!(v.ty, VarType::Other(_))));
            for q in def.dma_queue.values() {
                assert_eq!(q.ty, "dynamic");
                assert_eq!(q.num_queues as usize, q.semaphore_set.len());
            }
            let files = def.engine_files();
            let kinds: Vec<EngineKind> = files.iter().map(|f| f.0).collect();
            assert_eq!(kinds, EngineKind::ALL);
            for (kind, json, instr) in files {
                let json = json.unwrap_or_else(|| panic!("{}: {kind:?} json", e.file));
                let instr = instr.unwrap_or_else(|| panic!("{}: {kind:?} instr", e.file));
                assert_eq!(json, format!("{}.json", kind.file_stem()));
                let ej = n
                    .engine_json(sg, json)
                    .unwrap_or_else(|err| panic!("{}: {err}", e.file));
                assert!(ej.dma.is_empty(), "real trn2 files use dynamic DMA");
                assert_eq!(ej.instr.as_deref(), Some(instr));
                let bin = n.subgraph_file(sg, instr).expect("instr present");
                assert_eq!(bin.len() % 64, 0, "{}: {sg}/{instr}", e.file);
            }
            let tm = n
                .tensor_map(sg)
                .unwrap_or_else(|err| panic!("{}: {err}", e.file));
            assert!(tm.values().any(|t| t.kind.as_deref() == Some("output")));

            // Every .npy constant parses, re-encodes byte-identically, and
            // agrees with its tensor_map entry (<V2 ⇔ bfloat16).
            for (path, bytes) in n.members() {
                let Some(file) = path.strip_prefix(&format!("{sg}/")) else {
                    continue;
                };
                if !file.ends_with(".npy") {
                    continue;
                }
                let a = n.npy(path).unwrap_or_else(|err| panic!("{path}: {err}"));
                assert_eq!(a.to_bytes(), bytes, "{path} re-encodes identically");
                assert_eq!(NpyArray::parse(bytes).expect("parses"), a);
                let (_, entry) = tm
                    .iter()
                    .find(|(_, t)| t.extra.get("tf_file").and_then(|v| v.as_str()) == Some(file))
                    .unwrap_or_else(|| panic!("{path}: no tensor_map entry"));
                let want = match a.dtype {
                    NpyDtype::Void(2) => "bfloat16",
                    NpyDtype::F16 => "float16",
                    NpyDtype::F32 => "float32",
                    other => panic!("{path}: unexpected dtype {other:?}"),
                };
                assert_eq!(entry.dtype, want, "{path}");
                let shape: Vec<u64> = a.shape.iter().map(|&d| d as u64).collect();
                assert_eq!(entry.tf_shape.as_ref(), Some(&shape), "{path}");
                assert_eq!(a.element_count() * a.dtype.size(), a.data.len());
            }
        }
    }
}

/// The `shared_*` getters: the same values as the owned ones, parsed once per NEFF (a second
/// call, or a clone's, hands out the value kept by the first).
#[test]
fn shared_views_equal_the_owned_ones_and_are_parsed_once() {
    use std::sync::Arc;
    for e in EXPECTED {
        let n = parse(e);
        let kelf = n.shared_kelf().expect("kelf");
        assert_eq!(*kelf, n.kelf().expect("kelf"), "{}", e.file);
        assert!(Arc::ptr_eq(&kelf, &n.shared_kelf().expect("kelf")));
        let c = n.clone();
        assert!(Arc::ptr_eq(&kelf, &c.shared_kelf().expect("kelf")));
        for g in &kelf.graphs {
            let sg = g.dir();
            let def = n.shared_subgraph_def(&g.definition).expect("def");
            assert_eq!(*def, n.subgraph_def(&g.definition).expect("def"));
            assert!(Arc::ptr_eq(
                &def,
                &n.shared_subgraph_def(&g.definition).expect("def")
            ));
            for (_, json, _) in def.engine_files() {
                let json = json.expect("engine json");
                let ej = n.shared_engine_json(sg, json).expect("engine json");
                assert_eq!(*ej, n.engine_json(sg, json).expect("engine json"));
                assert!(Arc::ptr_eq(
                    &ej,
                    &n.shared_engine_json(sg, json).expect("again")
                ));
            }
            let tm = n.shared_tensor_map(sg).expect("tensor map");
            assert_eq!(*tm, n.tensor_map(sg).expect("tensor map"));
            assert!(Arc::ptr_eq(&tm, &n.shared_tensor_map(sg).expect("again")));
        }
        assert!(matches!(
            n.shared_subgraph_def("sg99/def.json"),
            Err(NeffError::MissingMember { .. })
        ));
    }
}

/// Real neuronx-cc hashes do NOT follow the libnrt rule as reverse-engineered
/// (pkg 2 → MD5 over data[0..data_size]; reference §3.4). Pin that down.
#[test]
fn real_fixtures_fail_validate_hash() {
    let opts = ParseOptions {
        validate_hash: true,
        ..ParseOptions::default()
    };
    for e in EXPECTED {
        match Neff::parse_with(&fixture(e.file), &opts) {
            Err(NeffError::HashMismatch {
                pkg_version,
                algorithm,
                data_size,
                stored,
                computed,
            }) => {
                assert_eq!(pkg_version, 2, "{}", e.file);
                assert_eq!(algorithm, HashAlgorithm::Md5, "{}", e.file);
                assert_eq!(data_size, e.data_size, "{}", e.file);
                assert_eq!(stored, e.stored_hash, "{}", e.file);
                assert_eq!(computed, e.md5_data, "{}", e.file);
            }
            other => panic!("{}: expected HashMismatch, got {other:?}", e.file),
        }
    }
}

/// Re-packing a real NEFF with the writer keeps header fields and members,
/// and the result passes the hash rule.
#[test]
fn real_fixture_repacks_through_the_writer() {
    let e = &EXPECTED[2];
    let n = parse(e);
    let mut w = NeffWriter::new(e.name);
    w.header = n.header().clone();
    for (p, b) in n.members() {
        w.add_member(p, b.to_vec());
    }
    let bytes = w.to_bytes().expect("writes");
    assert_eq!(bytes.len() % 10240, 1024);
    let opts = ParseOptions {
        validate_hash: true,
        ..ParseOptions::default()
    };
    let back = Neff::parse_with(&bytes, &opts).expect("reads back with hash check");
    assert_eq!(back.header().uuid_string(), e.uuid);
    assert_eq!(back.header().feature_bits, e.feature_bits);
    assert!(back.members().eq(n.members()));
    back.validate_references().expect("references");
}
