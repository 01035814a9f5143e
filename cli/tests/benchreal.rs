//! `neuron-emu bench real` as a user runs it: the floor columns (issue 16), the path and AMX
//! report, peak RSS, and the published silicon time of the model layers. No timed assertions.

mod common;

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Run `cmd` in the repository; its stdout, which it must exit 0 with.
fn stdout_of(cmd: &mut Command) -> String {
    common::ok(&cmd.current_dir(repo()).output().expect("spawn"))
}

/// `bench real --repeat 1 <fixture>` (a file of `../shared/fixtures`, which must exist): its
/// stdout, and the columns of the row of `stem`.
fn bench(rel: &str, stem: &str) -> (String, Vec<String>) {
    let dir = repo().join("../shared/fixtures");
    assert!(
        dir.is_dir(),
        "the shared fixtures folder is missing: expected {}",
        dir.display()
    );
    let stdout = stdout_of(
        Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
            .env_remove("NEURON_RT_LOG_LEVEL")
            .args([
                "bench",
                "real",
                &format!("../shared/fixtures/{rel}"),
                "--repeat",
                "1",
            ]),
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with(stem))
        .unwrap_or_else(|| panic!("no row for {stem}: {stdout}"));
    let cols = row.split_whitespace().map(str::to_string).collect();
    (stdout, cols)
}

fn num(s: &str) -> f64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s}"))
}

#[test]
fn bench_real_prints_the_floor_wall_over_floor_slowdown_and_path() {
    let (out, c) = bench("real-neff/akc-fused_bf16_s512.neff", "akc-fused_bf16_s512");
    let header = out
        .lines()
        .find(|l| l.starts_with("neff "))
        .expect("a column header");
    for col in [
        "host ms",
        "floor ms",
        "wall/floor",
        "trn2 us",
        "slowdown",
        "path",
        "func ms",
        "t/func",
        "peak MiB",
        "peak/io",
    ] {
        assert!(header.contains(col), "{col}: {header}");
    }
    assert_eq!(c.len(), 13, "{c:?}");
    let (host, floor, ratio) = (num(&c[1]), num(&c[2]), num(&c[3]));
    assert!(host > 0.0 && floor > 0.0, "{c:?}");
    // wall/floor is host ms / floor ms (both rounded as printed).
    assert!((ratio - host / floor).abs() <= 0.01 * ratio + 0.02, "{c:?}");
    // The profiled trn2 time of this NEFF (summary.total_time) is 36.35 us.
    assert_eq!(c[5], "36.35", "{c:?}");
    assert!(c[6].ends_with('x'), "{c:?}");
    // The bf16 MATMULs ran on AMX tiles where the host has them, else on VDPBF16PS where
    // `auto` picks it (NEURON_EMU_GEMM unset).
    let amx = neuron_devmodel::gemm::amx::available();
    let dot =
        !amx && neuron_devmodel::gemm::dot::available() && neuron_devmodel::gemm::dot::preferred();
    let path = match (amx, dot) {
        (true, _) => "amx",
        (_, true) => "bf16dot",
        _ => "portable",
    };
    assert_eq!(c[7], path, "{c:?}");
    assert_eq!(out.contains("on VDPBF16PS;"), dot, "{out}");
    assert_eq!(
        out.contains("VDPBF16PS panels bf16 128x128x512"),
        neuron_devmodel::gemm::dot::available(),
        "{out}"
    );
    assert!(out.contains("VDPBF16PS: "), "{out}");
    assert!(num(&c[8]) > 0.0 && num(&c[9]) > 0.0, "{c:?}");
    assert!(num(&c[11]) > 0.0 && num(&c[12]) > 0.0, "{c:?}");
    // The header says what the floor is and what the host offers.
    assert!(out.contains("LOW/HIGH pass pair once"), "{out}");
    assert!(
        out.contains(if amx {
            "AMX: present, used"
        } else {
            "AMX: absent"
        }),
        "{out}"
    );
    // The widest loops the host runs.
    #[cfg(target_arch = "x86_64")]
    let want = if std::is_x86_feature_detected!("avx512f") {
        "avx512"
    } else if std::is_x86_feature_detected!("avx2") {
        "avx2"
    } else {
        "portable"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let want = "portable";
    assert!(out.contains(&format!("ACTIVATE loops: {want} ")), "{out}");
    // The floor's parts: bf16 products, fp32 pass pairs (counted once), DMA bytes.
    let detail = out
        .lines()
        .find(|l| l.starts_with("    floor = "))
        .expect("a floor line");
    assert!(
        detail.contains("bfloat16 ") && detail.contains("float32 ") && detail.contains("DMA "),
        "{detail}"
    );
    // The on-chip operand bytes: some, and a floor with them above the floor alone.
    let onchip = out
        .lines()
        .find(|l| l.starts_with("    on-chip: operands "))
        .expect("an on-chip line");
    let mb: f64 = onchip
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .expect("on-chip MB");
    assert!(mb > 0.0, "{onchip}");
}

#[test]
fn bench_real_gives_a_model_layer_its_published_silicon_time() {
    let (out, c) = bench("real-models/kgm-attn_tkg_v6.neff", "kgm-attn_tkg_v6");
    // No profile JSON: the figure of fixtures/trn2-times.json (the source's 359.87 us).
    assert_eq!(c[5], "359.87", "{c:?}");
    assert!(c[6].ends_with('x'), "{c:?}");
    assert!(out.contains("trn2 time: published"), "{out}");
}

/// `--word-trace DIR` writes every word of the timed executions, in issue order, with its
/// host time and operands, in the layout `scripts/overlap-bound.py` reads; the script (where
/// python3 is installed) bounds the two-thread schedule at or above one thread's time.
#[test]
fn word_trace_lists_each_execution_s_words_with_operands() {
    let dir = std::env::temp_dir().join(format!("neuron-emu-words-{}", std::process::id()));
    let stdout = stdout_of(
        Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
            .env_remove("NEURON_RT_LOG_LEVEL")
            .env("NEURON_EMU_THREADS", "1")
            .args(["bench", "real", "--repeat", "2", "--word-trace"])
            .arg(&dir)
            .arg("../shared/fixtures/real-neff/akc-fused_bf16_s512.neff"),
    );
    assert!(
        stdout.contains("MATMUL"),
        "--word-trace implies the host profile: {stdout}"
    );
    let file = dir.join("akc-fused_bf16_s512.words.jsonl");
    let text = std::fs::read_to_string(&file).expect("the word trace");
    let mut lines = text.lines();
    let header: serde_json::Value =
        serde_json::from_str(lines.next().expect("a header")).expect("JSON");
    assert_eq!(header["repeat"], 2);
    assert_eq!(header["dropped"], 0);
    let words: Vec<serde_json::Value> = lines
        .map(|l| serde_json::from_str(l).expect("a JSON word"))
        .collect();
    assert_eq!(header["words"], words.len());
    assert!(
        !words.is_empty() && words.len().is_multiple_of(2),
        "{} words",
        words.len()
    );
    let (first, second) = words.split_at(words.len() / 2);
    let key =
        |w: &serde_json::Value| format!("{} {} {} {}", w["nc"], w["engine"], w["pc"], w["op"]);
    assert!(
        first.iter().map(key).eq(second.iter().map(key)),
        "the two executions issue the same words"
    );
    // Issue times count from the first word and never go back: a word is issued after the
    // one before it is done (the device thread issues them one at a time).
    let at = |w: &serde_json::Value| w["at"].as_u64().expect("an issue time");
    let ns = |w: &serde_json::Value| w["ns"].as_u64().expect("a host time");
    assert_eq!(at(&words[0]), 0);
    assert!(
        words.windows(2).all(|p| at(&p[1]) >= at(&p[0]) + ns(&p[0])),
        "issue times out of order"
    );
    // A MATMUL reads SBUF and writes PSUM (`[space, write, channels, lo, hi]`).
    let mm = first
        .iter()
        .find(|w| w["op"] == "MATMUL")
        .expect("a MATMUL");
    let ops = mm["ops"].as_array().expect("operands");
    assert!(ops.iter().any(|o| o[0] == "P" && o[1] == 1), "{mm}");
    assert!(ops.iter().any(|o| o[0] == "S" && o[1] == 0), "{mm}");
    assert!(ops.iter().all(|o| o[3].as_u64() < o[4].as_u64()), "{mm}");
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no python3 here; scripts/overlap-bound.py not run");
    } else {
        let text = stdout_of(
            Command::new("python3")
                .arg("scripts/overlap-bound.py")
                .arg(&file),
        );
        let row = text
            .lines()
            .find(|l| l.starts_with("akc-fused_bf16_s512"))
            .unwrap_or_else(|| panic!("no row: {text}"));
        let gains: Vec<f64> = row
            .split_whitespace()
            .filter_map(|c| c.strip_suffix('x')?.parse().ok())
            .collect();
        assert_eq!(gains.len(), 2, "{row}");
        assert!(
            gains.iter().all(|g| *g >= 1.0),
            "a bound below one thread: {row}"
        );
        let gaps = stdout_of(
            Command::new("python3")
                .arg("scripts/word-gaps.py")
                .arg(&file),
        );
        assert!(
            gaps.starts_with("akc-fused_bf16_s512: ") && gaps.contains("between executions"),
            "{gaps}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `--word-trace` directory that cannot be created is a usage error (exit 2) named before
/// anything runs.
#[test]
fn word_trace_into_an_uncreatable_directory_is_refused() {
    let file = std::env::temp_dir().join(format!("neuron-emu-not-a-dir-{}", std::process::id()));
    std::fs::write(&file, b"x").expect("a plain file");
    let out = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .current_dir(repo())
        .args(["bench", "real", "--repeat", "1", "--word-trace"])
        .arg(file.join("sub"))
        .arg("../shared/fixtures/real-neff/akc-fused_bf16_s512.neff")
        .output()
        .expect("spawn");
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot create"), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("akc-fused"),
        "ran before refusing"
    );
}
