//! `neuron-emu neff inspect` and `neuron-emu bench neff` as a user runs them,
//! on the eight real NEFFs and the project's own fixture.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const REAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/real-neff/"
);
const MLP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/neff/mlp.neff");

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .args(args)
        .env_remove("NEURON_RT_LOG_LEVEL")
        .output()
        .expect("spawn neuron-emu")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn inspect_json(path: &str) -> Value {
    let stdout = ok(&bin(&["neff", "inspect", "--json", path]));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{path}: bad JSON: {e}\n{stdout}"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("tmp dir");
    d.join(name)
}

struct Real {
    file: &'static str,
    members: u64,
    feature_bits: &'static str,
    features: &'static [&'static str],
    /// (name, dtype, shape, size)
    inputs: &'static [(&'static str, &'static str, [u64; 2], u64)],
    output: (&'static str, &'static str, [u64; 2], u64),
    /// PE instructions in sg00 and sg01 (the akc kernels run on one core;
    /// their sg01 is a 2-instruction stub per engine with no DMA queues).
    pe_instructions: [u64; 2],
    /// DMA queues of sg00 and sg01.
    dma_queues: [&'static [&'static str]; 2],
}

const VNC_DVE: &[&str] = &["neff_feature_vnc", "dve_perf_mode"];
const BF16: &str = "bfloat16";
const F32: &str = "float32";
const F16: &str = "float16";
const Q3: &[&str] = &["qActDynamicHW", "qPoolDynamic", "qSPDynamicHW"];
const Q2: &[&str] = &["qPoolDynamic", "qSPDynamicHW"];
const NONE: &[&str] = &[];

const fn qkv(
    dtype: &'static str,
    s: u64,
    size: u64,
) -> [(&'static str, &'static str, [u64; 2], u64); 3] {
    [
        ("q_ref", dtype, [128, s], size),
        ("k_ref", dtype, [128, s], size),
        ("v_ref", dtype, [128, s], size),
    ]
}

const REALS: &[Real] = &[
    Real {
        file: "nkipy-matmul_small.neff",
        members: 72,
        feature_bits: "0x0000000000209c00",
        features: &[
            "neff_feature_vnc",
            "dve_perf_mode",
            "dge",
            "dge_cast",
            "hardware_dge",
        ],
        inputs: &[("x", F16, [128, 256], 65536), ("y", F16, [256, 128], 65536)],
        output: ("output0", F16, [128, 128], 32768),
        pe_instructions: [12, 12],
        dma_queues: [Q2, Q2],
    },
    Real {
        file: "nkipy-matmul_large.neff",
        members: 72,
        feature_bits: "0x0000000000201c00",
        features: &["neff_feature_vnc", "dve_perf_mode", "dge", "hardware_dge"],
        inputs: &[
            ("x", F16, [128, 32768], 8388608),
            ("y", F16, [32768, 65536], 4294967296),
        ],
        output: ("output0", F16, [128, 65536], 16777216),
        pe_instructions: [21269, 21269],
        dma_queues: [Q3, Q3],
    },
    Real {
        file: "akc-baseline_bf16_s512.neff",
        members: 67,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(BF16, 512, 131072),
        output: ("kernel_out", BF16, [512, 128], 131072),
        pe_instructions: [117, 2],
        dma_queues: [Q3, NONE],
    },
    Real {
        file: "akc-baseline_fp32_s512.neff",
        members: 65,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(F32, 512, 262144),
        output: ("kernel_out", F32, [512, 128], 262144),
        pe_instructions: [124, 2],
        dma_queues: [Q3, NONE],
    },
    Real {
        file: "akc-baseline_fp32_s1024.neff",
        members: 65,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(F32, 1024, 524288),
        output: ("kernel_out", F32, [1024, 128], 524288),
        pe_instructions: [469, 2],
        dma_queues: [Q3, NONE],
    },
    Real {
        file: "akc-fused_bf16_s512.neff",
        members: 67,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(BF16, 512, 131072),
        output: ("kernel_out", BF16, [512, 128], 131072),
        pe_instructions: [117, 2],
        dma_queues: [Q2, NONE],
    },
    Real {
        file: "akc-fused_bf16_s1024.neff",
        members: 67,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(BF16, 1024, 262144),
        output: ("kernel_out", BF16, [1024, 128], 262144),
        pe_instructions: [438, 2],
        dma_queues: [Q2, NONE],
    },
    Real {
        file: "akc-fused_fp32_s512.neff",
        members: 65,
        feature_bits: "0x0000000000000c00",
        features: VNC_DVE,
        inputs: &qkv(F32, 512, 262144),
        output: ("kernel_out", F32, [512, 128], 262144),
        pe_instructions: [124, 2],
        dma_queues: [Q2, NONE],
    },
];

fn tensor(t: &Value) -> (String, String, Vec<u64>, u64) {
    (
        t["name"].as_str().expect("name").to_owned(),
        t["dtype"].as_str().expect("dtype").to_owned(),
        t["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim"))
            .collect(),
        t["size"].as_u64().expect("size"),
    )
}

fn want((n, d, s, z): &(&str, &str, [u64; 2], u64)) -> (String, String, Vec<u64>, u64) {
    (n.to_string(), d.to_string(), s.to_vec(), *z)
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string"))
        .collect()
}

#[test]
fn every_real_fixture_is_covered() {
    let mut on_disk: Vec<String> = std::fs::read_dir(REAL)
        .expect("fixture dir")
        .filter_map(|d| d.ok())
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".neff"))
        .collect();
    on_disk.sort();
    let mut ours: Vec<String> = REALS.iter().map(|r| r.file.to_owned()).collect();
    ours.sort();
    assert_eq!(on_disk, ours);
}

#[test]
fn json_of_the_real_fixtures() {
    for r in REALS {
        let path = format!("{REAL}{}", r.file);
        let j = inspect_json(&path);
        let f = r.file;
        assert_eq!(j["schema_version"], 1, "{f}");
        assert_eq!(j["file"]["path"], path.as_str(), "{f}");
        let size = std::fs::metadata(&path).expect("stat").len();
        assert_eq!(j["file"]["size"], size, "{f}");

        let h = &j["header"];
        assert_eq!(h["pkg_version"], 2, "{f}");
        assert_eq!(h["hash_algorithm"], "MD5", "{f}");
        assert_eq!(h["header_size"], 1024, "{f}");
        assert_eq!(h["data_size"], size - 1024, "{f}");
        assert_eq!(
            (&h["version_major"], &h["version_minor"]),
            (&2.into(), &0.into())
        );
        assert_eq!(h["lnc_size"], 2, "{f}");
        assert_eq!(h["num_tpb"], 1, "{f}");
        assert_eq!(h["tpb_per_node"], serde_json::json!([1]), "{f}");
        assert_eq!(h["feature_bits"], r.feature_bits, "{f}");
        assert_eq!(strs(&h["features"]), r.features, "{f}");
        assert_eq!(h["hash"].as_str().map(str::len), Some(64), "{f}");
        assert!(h["hash"].as_str().expect("hash").ends_with(&"0".repeat(32)));
        assert_eq!(h["uuid"].as_str().map(str::len), Some(36), "{f}");

        assert_eq!(j["info"]["tool_version"], "2.23.6484.0+3b612583", "{f}");
        assert_eq!(j["kelf"]["path"], "kelf-0.json", "{f}");
        assert_eq!(j["kelf"]["target"], "cayman", "{f}");
        assert_eq!(j["kelf"]["version"], "0.5", "{f}");

        let ins: Vec<_> = j["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .map(tensor)
            .collect();
        let want_ins: Vec<_> = r.inputs.iter().map(want).collect();
        assert_eq!(ins, want_ins, "{f}");
        let outs: Vec<_> = j["outputs"]
            .as_array()
            .expect("outputs")
            .iter()
            .map(tensor)
            .collect();
        assert_eq!(outs, [want(&r.output)], "{f}");

        let sgs = j["subgraphs"].as_array().expect("subgraphs");
        let names: Vec<&str> = sgs
            .iter()
            .map(|s| s["name"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["sg00", "sg01"], "{f}");
        for (i, sg) in sgs.iter().enumerate() {
            let engines = sg["engines"].as_array().expect("engines");
            let kinds: Vec<&str> = engines
                .iter()
                .map(|e| e["engine"].as_str().expect("e"))
                .collect();
            assert_eq!(kinds, ["pe", "act", "pool", "dve", "sp"], "{f}");
            for e in engines {
                let bytes = e["instr_bytes"].as_u64().expect("instr_bytes");
                assert_eq!(e["instructions"].as_u64(), Some(bytes / 64), "{f}");
                assert_eq!(bytes % 64, 0, "{f}");
            }
            assert_eq!(engines[0]["instructions"], r.pe_instructions[i], "{f}");
            assert_eq!(engines[0]["instr"], "PE.bin", "{f}");
            assert_eq!(engines[0]["role"], "Tensor", "{f}");

            let queues = sg["dma_queues"].as_array().expect("queues");
            let qnames: Vec<&str> = queues
                .iter()
                .map(|q| q["name"].as_str().expect("q"))
                .collect();
            assert_eq!(qnames, r.dma_queues[i], "{f}");
            for q in queues {
                assert_eq!(q["type"], "dynamic", "{f}");
                let n = q["num_queues"].as_u64().expect("num_queues");
                assert_eq!(
                    q["semaphore_set"].as_array().map(Vec::len),
                    Some(n as usize)
                );
                assert!(q["owner"].is_string(), "{f}");
            }

            let types: Vec<&str> = sg["vars"]
                .as_array()
                .expect("vars")
                .iter()
                .map(|t| t["type"].as_str().expect("type"))
                .collect();
            assert_eq!(&types[..2], ["input", "output"], "{f}");
            assert!(types.contains(&"state-buffer"), "{f}");
            let input_vars = &sg["vars"][0];
            assert_eq!(input_vars["count"], r.inputs.len(), "{f}");
            let in_bytes: u64 = r.inputs.iter().map(|i| i.3).sum();
            assert_eq!(input_vars["bytes"], in_bytes, "{f}");
            assert_eq!(sg["runtime_event_count"], 12, "{f}");
            assert_eq!(sg["runtime_semaphore_count"], 3, "{f}");
            assert_eq!(strs(&sg["neff_features"]), ["neff_feature_vnc"], "{f}");
        }

        assert_eq!(j["member_count"], r.members, "{f}");
        let members = j["members"].as_array().expect("members");
        assert_eq!(members.len() as u64, r.members, "{f}");
        let total: u64 = members
            .iter()
            .map(|m| m["size"].as_u64().expect("size"))
            .sum();
        assert_eq!(j["member_bytes"], total, "{f}");
        assert_eq!(
            members.last().map(|m| &m["path"]),
            Some(&"neff.json".into())
        );
        assert!(members.iter().any(|m| m["path"] == "sg01/def.json"), "{f}");
    }
}

#[test]
fn text_of_the_real_fixtures() {
    for r in REALS {
        let path = format!("{REAL}{}", r.file);
        let out = ok(&bin(&["neff", "inspect", &path]));
        let f = r.file;
        for needle in [
            "pkg_version   2 (hash algorithm: MD5)".to_owned(),
            "version       2.0".to_owned(),
            "lnc_size      2".to_owned(),
            format!(
                "feature_bits  {} ({})",
                r.feature_bits,
                r.features.join(", ")
            ),
            "target      cayman (kelf-0.json version 0.5; 2 subgraphs: sg00, sg01)".to_owned(),
            format!("inputs      {}", r.inputs.len()),
            "outputs     1".to_owned(),
            "subgraph sg00 (sg00/def.json)".to_owned(),
            "subgraph sg01 (sg01/def.json)".to_owned(),
            format!("{} instructions", r.pe_instructions[0]),
            format!("members     {} (", r.members),
            "sg00/PE.bin".to_owned(),
            "neff.json".to_owned(),
        ] {
            assert!(out.contains(&needle), "{f}: no {needle:?} in\n{out}");
        }
        let (n, d, s, z) = r.output;
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{n} ")))
            .unwrap_or_else(|| panic!("{f}: no output line\n{out}"));
        assert!(line.contains(d), "{line}");
        assert!(line.contains(&format!("[{}, {}]", s[0], s[1])), "{line}");
        assert!(line.contains(&format!("{z} bytes")), "{line}");
        for q in r.dma_queues[0] {
            assert!(out.contains(q), "{f}: no queue {q}");
        }
    }
}

#[test]
fn project_fixture_mlp() {
    let j = inspect_json(MLP);
    assert_eq!(j["schema_version"], 1);
    let h = &j["header"];
    assert_eq!(h["lnc_size"], 1);
    assert_eq!(h["name"], "mlp.neff");
    // Real trn2 words: no project feature bit, the compiler's kelf target.
    assert_eq!(h["feature_bits"], "0x0000000000000000");
    assert!(strs(&h["features"]).is_empty());
    assert_eq!(j["kelf"]["target"], "cayman");
    assert_eq!(j["member_count"], 20);
    let ins: Vec<_> = j["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(tensor)
        .collect();
    assert_eq!(ins, [want(&("x", BF16, [128, 512], 131072))]);
    let outs: Vec<_> = j["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(tensor)
        .collect();
    assert_eq!(outs, [want(&("y", BF16, [128, 128], 32768))]);
    let sgs = j["subgraphs"].as_array().expect("subgraphs");
    assert_eq!(sgs.len(), 1);
    let q = &sgs[0]["dma_queues"][0];
    assert_eq!(
        (&q["name"], &q["type"], &q["owner"], &q["num_queues"]),
        (
            &"qSPDynamicHW".into(),
            &"dynamic".into(),
            &"sp".into(),
            &16.into()
        )
    );
    let file_vars = sgs[0]["vars"]
        .as_array()
        .expect("vars")
        .iter()
        .find(|t| t["type"] == "file")
        .expect("file vars");
    assert_eq!(file_vars["count"], 5);

    let text = ok(&bin(&["neff", "inspect", MLP]));
    assert!(text.contains("feature_bits  0x0000000000000000"), "{text}");
    assert!(text.contains("target      cayman"), "{text}");
}

#[test]
fn json_output_is_deterministic() {
    let path = format!("{REAL}akc-fused_bf16_s512.neff");
    let a = ok(&bin(&["neff", "inspect", "--json", &path]));
    let b = ok(&bin(&["neff", "inspect", "--json", &path]));
    assert_eq!(a, b);
}

#[test]
fn malformed_files_exit_1_with_the_neff_error() {
    let good = std::fs::read(format!("{REAL}nkipy-matmul_small.neff")).expect("fixture");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "short.neff",
            good[..100].to_vec(),
            "shorter than the 1024-byte header",
        ),
        ("trunc.neff", good[..3000].to_vec(), "data_size (offset 16)"),
        (
            "feature.neff",
            {
                let mut b = good.clone();
                b[544 + 7] = 0x20; // bit 61: unknown
                b
            },
            "unknown bits 0x2000000000000000",
        ),
        (
            "gzip.neff",
            {
                let mut b = good.clone();
                b[5000] ^= 0xff;
                b
            },
            "gzip member (file offset 1024) is corrupt or truncated",
        ),
    ];
    for (name, bytes, needle) in cases {
        let p = tmp(name);
        std::fs::write(&p, bytes).expect("write");
        for json in [false, true] {
            let p = p.to_str().expect("utf-8 path");
            let args: &[&str] = if json {
                &["neff", "inspect", "--json", p]
            } else {
                &["neff", "inspect", p]
            };
            let out = bin(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
            assert!(stderr.contains(needle), "{name}: {stderr}");
            assert!(out.stdout.is_empty(), "{name}");
        }
        let _ = std::fs::remove_file(&p);
    }
    if let Some(dir) = tmp("x").parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

#[test]
fn missing_file_exits_2() {
    let out = bin(&["neff", "inspect", "/nonexistent/dir/model.neff"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/dir/model.neff"),
        "{stderr}"
    );
    let out = bin(&["bench", "neff", "/nonexistent/dir/model.neff"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn bench_neff_prints_both_times_and_the_ratio() {
    let path = format!("{REAL}nkipy-matmul_small.neff");
    let out = ok(&bin(&["bench", "neff", &path, "--repeat", "3"]));
    assert!(out.contains("bare inflate (flate2 GzDecoder)"), "{out}");
    assert!(out.contains("Neff::parse + all typed views"), "{out}");
    assert!(out.contains("356864 bytes inflated"), "{out}");
    let ratio: f64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("ratio parse/inflate"))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {out}"));
    assert!(ratio > 0.0 && ratio.is_finite(), "{ratio}");
}

/// mlp.neff rebuilt with `change` applied to its members (path, bytes).
fn mlp_with(name: &str, change: impl Fn(&str, &[u8]) -> Option<Vec<u8>>) -> PathBuf {
    let bytes = std::fs::read(MLP).expect("mlp.neff");
    let neff = neuron_neff::Neff::parse(&bytes).expect("parse");
    let mut w = neuron_neff::NeffWriter::new(&neff.header().name_str());
    w.header = neff.header().clone();
    for (p, b) in neff.members() {
        if let Some(nb) = change(p, b) {
            w.add_member(p, nb);
        }
    }
    let p = tmp(name);
    std::fs::write(&p, w.to_bytes().expect("write NEFF")).expect("write");
    p
}

/// The loader refuses a NEFF without neff.json and an instruction file that is not whole
/// 64-byte instructions; inspect reports both as errors too (exit 1, nothing on stdout).
#[test]
fn inspect_refuses_what_the_loader_refuses() {
    let no_json = mlp_with("no-neff-json.neff", |p, b| {
        (p != "neff.json").then(|| b.to_vec())
    });
    let odd = mlp_with("odd-instr.neff", |p, b| {
        Some(if p.ends_with(".bin") && !b.is_empty() {
            let mut v = b.to_vec();
            v.push(0);
            v
        } else {
            b.to_vec()
        })
    });
    for (p, needle) in [(&no_json, "neff.json"), (&odd, "not a multiple of 64")] {
        let ps = p.to_str().expect("utf-8");
        for args in [
            &["neff", "inspect", ps][..],
            &["neff", "inspect", "--json", ps],
        ] {
            let out = bin(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{ps}: {stderr}");
            assert!(stderr.contains(needle) && stderr.contains(ps), "{stderr}");
            assert!(out.stdout.is_empty(), "{ps}");
        }
        // The runtime's loader refuses the same file.
        let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
            .args(["run", ps])
            .output()
            .expect("spawn");
        assert_eq!(out.status.code(), Some(1), "{ps}");
    }
    // The unchanged rebuild still inspects cleanly.
    let same = mlp_with("same.neff", |_, b| Some(b.to_vec()));
    ok(&bin(&["neff", "inspect", same.to_str().expect("utf-8")]));
}
