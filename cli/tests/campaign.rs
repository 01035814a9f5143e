//! `neuron-emu campaign`: same seed, same per-experiment outcomes whatever `--jobs`; four
//! shards merged give exactly the single-run report; bad plans and arguments are refused with
//! a message naming the line and key; `--only` reproduces one experiment.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("neuron-emu-campaign-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

fn campaign(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .current_dir(repo())
        .env_remove("NEURON_RT_LOG_LEVEL")
        .arg("campaign")
        .args(args)
        .output()
        .expect("spawn")
}

/// `campaign PLAN --neff NEFF -n N --seed SEED ARGS...`
fn seeded(plan: &str, n: &str, seed: &str, args: &[&str]) -> Output {
    let mut all = vec![plan, "--neff", NEFF, "-n", n, "--seed", seed];
    all.extend_from_slice(args);
    campaign(&all)
}

fn ok(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "stdout: {s}\nstderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    s
}

const PLAN: &str = "fixtures/faults/driver-alloc.toml";
const NEFF: &str = "fixtures/neff/mlp.neff";

/// Device and driver effects that end quickly (no hangs): DMA errors, NaN, PSUM flips, HBM
/// errors on the first chunk, refused allocations.
const MIXED: &str = r#"
[[fault]]
id = "dma"
effect = "dma-error"
descriptor = [1, 8]
[[fault]]
id = "nan"
effect = "nan"
engine = "Vector"
instruction = [1, 12]
[[fault]]
id = "psum"
effect = "bit-flip"
region = "psum"
bits = 2
at-ns = [0, 15000]
[[fault]]
id = "hbm"
effect = "hbm-ue"
address = [0x1000000, 0x1100000]
at-ns = 1
[[fault]]
id = "alloc"
effect = "ioctl-fail"
point = "fail_mc_alloc"
ioctl = [1, 30]
"#;

#[test]
fn jobs_and_shards_do_not_change_the_report() {
    let d = tmpdir("shards");
    let plan_path = d.join("mixed.toml");
    std::fs::write(&plan_path, MIXED).expect("plan");
    let plan_s = plan_path.display().to_string();
    let plan: &str = &plan_s;
    let one = d.join("one.json");
    let four = d.join("four.json");
    let n = "24";
    ok(&seeded(
        plan,
        n,
        "5",
        &[
            "--jobs",
            "1",
            "--quiet",
            "--report",
            one.to_str().expect("p"),
        ],
    ));
    ok(&seeded(
        plan,
        n,
        "5",
        &[
            "--jobs",
            "4",
            "--quiet",
            "--report",
            four.to_str().expect("p"),
        ],
    ));
    let a = std::fs::read_to_string(&one).expect("one");
    assert_eq!(
        a,
        std::fs::read_to_string(&four).expect("four"),
        "--jobs 1 and --jobs 4"
    );
    let mut parts = Vec::new();
    for k in 0..4 {
        let p = d.join(format!("shard{k}.json"));
        ok(&seeded(
            plan,
            n,
            "5",
            &[
                "--shard",
                &format!("{k}/4"),
                "--quiet",
                "--report",
                p.to_str().expect("p"),
            ],
        ));
        parts.push(p);
    }
    let merged = d.join("merged.json");
    let csv = d.join("merged.csv");
    let svg = d.join("merged.svg");
    let mut args = vec!["merge"];
    let names: Vec<String> = parts.iter().map(|p| p.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let (m, c, s) = (
        merged.display().to_string(),
        csv.display().to_string(),
        svg.display().to_string(),
    );
    args.extend(["--report", &m, "--csv", &c, "--svg", &s]);
    let table = ok(&campaign(&args));
    assert_eq!(
        std::fs::read_to_string(&merged).expect("merged"),
        a,
        "4 shards merged = one run"
    );
    assert!(table.contains("24 experiments of mlp.neff"), "{table}");
    assert_eq!(
        std::fs::read_to_string(&csv).expect("csv").lines().count(),
        25
    );
    assert!(std::fs::read_to_string(&svg)
        .expect("svg")
        .starts_with("<svg"));
    // Driver faults surface as the runtime's statuses.
    let r: serde_json::Value = serde_json::from_str(&a).expect("json");
    let detected = r["summary"]["classes"]["detected"]["count"]
        .as_u64()
        .expect("count");
    assert!(detected > 0, "{a}");
    // A different seed gives a different campaign.
    let other = d.join("other.json");
    ok(&seeded(
        plan,
        n,
        "6",
        &["--quiet", "--report", other.to_str().expect("p")],
    ));
    assert_ne!(std::fs::read_to_string(&other).expect("other"), a);
    // Shards of another campaign do not merge.
    let out = campaign(&[
        "merge",
        names[0].as_str(),
        other.to_str().expect("p"),
        "--report",
        m.as_str(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("seed differs"));
}

#[test]
fn only_reruns_one_experiment() {
    let d = tmpdir("only");
    let t = d.join("t.json");
    let s = ok(&campaign(&[
        PLAN,
        "--neff",
        NEFF,
        "-n",
        "24",
        "--seed",
        "5",
        "--only",
        "3",
        "--trace",
        t.to_str().expect("p"),
    ]));
    assert!(s.contains("experiment 3 of seed 5"), "{s}");
    assert!(s.contains("outcome: "), "{s}");
    assert!(std::fs::metadata(&t).expect("trace").len() > 0);
}

#[test]
fn bad_plans_and_arguments_are_refused() {
    let d = tmpdir("bad");
    let plan = d.join("bad.toml");
    std::fs::write(
        &plan,
        "[[fault]]\nid = \"x\"\neffect = \"dma-error\"\ndescriptor = 0\n",
    )
    .expect("write");
    let o = campaign(&[plan.to_str().expect("p"), "--neff", NEFF, "-n", "2"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.toml: line 4") && e.contains("fault[0].descriptor"),
        "{e}"
    );
    for args in [
        vec![PLAN, "--neff", NEFF, "--shard", "4/4"],
        vec![PLAN, "--neff", NEFF, "--shard", "x"],
        vec![PLAN, "--neff", NEFF, "-n", "0"],
        vec![PLAN, "--neff", NEFF, "--report", "/nonexistent/dir/r.json"],
        vec![PLAN, "--neff", NEFF, "--trace", "t.json"],
        vec![PLAN, "--neff", "/nonexistent.neff"],
        vec!["/nonexistent.toml", "--neff", NEFF],
    ] {
        let o = campaign(&args);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn run_with_a_fault_plan_shows_what_the_user_would_see() {
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .current_dir(repo())
        .env_remove("NEURON_RT_LOG_LEVEL")
        .args(["run", NEFF, "--faults", "fixtures/faults/dma-abort.toml"])
        .output()
        .expect("spawn");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("fault first-descriptor: fired"), "{out}");
    assert!(
        out.contains("dmesg: [") && out.contains("NEURON_HW_ERR=DMA_ERROR"),
        "{out}"
    );
    assert!(
        out.contains("stats/hardware: sram_ecc_uncorrected 0"),
        "{out}"
    );
    assert!(
        err.contains("execution failed: NRT_EXEC_HW_ERR_DMA_ABORT"),
        "{err}"
    );
    // A plan that never fires leaves the run as it was.
    let d = tmpdir("never");
    let p = d.join("never.toml");
    std::fs::write(&p, "[[fault]]\nid = \"late\"\neffect = \"engine-hang\"\nengine = \"Tensor\"\ninstruction = 100000000\n").expect("plan");
    let o = Command::new(env!("CARGO_BIN_EXE_neuron-emu"))
        .current_dir(repo())
        .args(["run", NEFF, "--faults", p.to_str().expect("p")])
        .output()
        .expect("spawn");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("fault late: not reached") && out.contains("max_abs_err 0.000e0"),
        "{out}"
    );
}
