//! `neuron-emu calibrate`: the calibrated cost table compiled into the device model is what the
//! fit gives on the fixture profiles, and the command validates it on held-out kernels.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuron-emu"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

#[test]
fn the_compiled_table_is_the_fit_of_the_fixture_profiles() {
    let out_json = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("calibration.json");
    let out = bin()
        .args(["calibrate", "--validate", "--json"])
        .arg(&out_json)
        .output()
        .expect("spawn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).expect("json written")).expect("json");
    let classes = j["classes"].as_array().expect("classes");
    let table = neuron_devmodel::calib::TRN2;
    assert_eq!(classes.len(), table.len(), "{classes:?}");
    for c in classes {
        let engine = c["engine"].as_str().expect("engine");
        let opcode = c["opcode"].as_str().expect("opcode");
        let (wide, transpose) = (c["fp32"].as_bool(), c["transpose"].as_bool());
        let row = table
            .iter()
            .find(|r| {
                r.engine.profiler_name() == engine
                    && r.opcode.static_name() == opcode
                    && Some(r.wide) == wide
                    && Some(r.transpose) == transpose
            })
            .unwrap_or_else(|| panic!("class {c} missing from devmodel::calib::TRN2"));
        let ps = |k: &str| (c[k].as_f64().expect(k) * 1000.0).round() as u64;
        let fs = |k: &str| (c[k].as_f64().expect(k) * 1e6).round() as u64;
        assert_eq!(
            (
                row.fixed.0,
                row.per_elem_fs,
                row.lat_fixed.0,
                row.lat_per_elem_fs
            ),
            (
                ps("a_ns"),
                fs("b_ns_per_elem"),
                ps("lat_a_ns"),
                fs("lat_b_ns_per_elem")
            ),
            "{c}"
        );
    }
    let dma = &j["dma_direct2d"];
    let fixed_ps = (dma["fixed_ns"].as_f64().expect("fixed") * 1000.0).round() as u64;
    let d = neuron_devmodel::calib::TRN2_DMA2D;
    // The compiled constant is rounded to the nanosecond.
    assert!(
        fixed_ps.abs_diff(d.fixed.0) < 1000,
        "{fixed_ps} vs {:?}",
        d.fixed
    );
    assert_eq!(dma["bytes_per_ns"].as_f64(), Some(d.bytes_per_ns as f64));
    // Validation rows: every kernel's held-out NEFF-body time within 25% of silicon's.
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("validation: NEFF-body"))
        .skip(2)
        .take_while(|l| !l.starts_with("validation:"))
        .collect();
    assert_eq!(rows.len(), 6, "{stdout}");
    for r in rows {
        let held = r
            .split_whitespace()
            .nth(5)
            .and_then(|p| {
                p.trim_matches(|c| c == '(' || c == ')' || c == '%')
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("held-out column in {r}"));
        assert!(held.abs() <= 25.0, "{r}");
    }
}

#[test]
fn calibrate_needs_two_kernels() {
    let out = bin()
        .args([
            "calibrate",
            "../shared/fixtures/real-neff/akc-fused_bf16_s512.neff",
        ])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least two"));
}

#[test]
fn malformed_profiles_are_errors_not_panics() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bad-profiles");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let real = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/real-neff"
    ));
    let neffs = ["akc-fused_bf16_s512", "akc-fused_fp32_s512"];
    for (stem, body) in neffs.iter().zip([
        "{not json",
        r#"{"instruction": [{"subgraph": "sg00", "label": "Tensor", "pc": 4294967295, "timestamp": 1.0}]}"#,
    ]) {
        std::fs::write(dir.join(format!("{stem}.profile.json")), body).expect("write");
    }
    let out = bin()
        .arg("calibrate")
        .arg("--profiles")
        .arg(&dir)
        .args(neffs.iter().map(|s| real.join(format!("{s}.neff"))))
        .output()
        .expect("spawn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("akc-fused_bf16_s512"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Output into a pipe closed early (`| head`) ends the process like other command-line tools
/// (SIGPIPE), not with a panic about the failed write.
#[cfg(unix)]
#[test]
fn a_closed_pipe_is_not_a_panic() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    let mut child = bin()
        .args(["calibrate", "--validate"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    assert!(first.starts_with("calibrate:"), "{first}");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}
