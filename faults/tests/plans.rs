//! Fault plans: the examples parse, every refusal names its line and key, sampling is a pure
//! function of (plan, seed, index), and no text makes the parser panic.

use neuron_faults::plan::{parse, Effect, Limits, Pattern, Region, Span, Trigger};
use neuron_faults::sample::{Location, When};
use proptest::prelude::*;

fn trn2() -> Limits {
    Limits::for_arch(neuron_abi::Arch::V3Trn2, 1)
}

fn repo(p: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(p)
}

#[test]
fn example_plans_parse() {
    let dir = repo("fixtures/faults");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("fixtures/faults") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&p).expect("read");
            let plan = parse(&text, &trn2()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(!plan.faults.is_empty());
            n += 1;
        }
    }
    assert!(n >= 3, "example plans in {}", dir.display());
}

#[test]
fn a_plan_becomes_typed_faults() {
    let text = r#"
description = "x"
[[fault]]
id = "f1"
effect = "bit-flip"
region = "SBUF"
partitions = [0, 64]
offset = [1024, 2048]
bits = 3
pattern = "adjacent"
at-ns = [10, 20]

[[fault]]
id = "f2"
effect = "ioctl-fail"
command = "NEURON_IOCTL_MEM_ALLOC_V2MT"
errno = "ENOMEM"
ioctl = 2
"#;
    let p = parse(text, &trn2()).expect("valid");
    let f = &p.faults[0];
    assert_eq!(f.line, 3);
    assert_eq!(
        f.effect,
        Effect::BitFlip {
            bits: 3,
            pattern: Pattern::Adjacent
        }
    );
    assert_eq!(
        f.trigger,
        Trigger::AtNs {
            ns: Span { lo: 10, hi: 20 }
        }
    );
    assert_eq!(f.site.region, Some(Region::Sbuf));
    assert_eq!(p.faults[1].effect, Effect::IoctlFail { errno: 12 });
    assert_eq!(p.faults[1].site.commands, vec![0x80304e66]);
    assert_eq!(p.faults[1].trigger, Trigger::Ioctl { nth: Span::one(2) });
}

/// (plan, expected line, expected key, a word of the message)
const BAD: &[(&str, usize, &str, &str)] = &[
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\nat-ns = 5\ncolour = 3\n", 6, "", "colour"),
    ("[[fault]]\nid = \"a\"\neffect = \"explode\"\nat-ns = 5\n", 3, "fault[0].effect", "unknown effect"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\noffset = [0, 300000]\nat-ns = 1\n", 5, "fault[0].offset", "exceeds"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\npartitions = [0, 129]\nat-ns = 1\n", 5, "fault[0].partitions", "exceeds"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"hbm\"\naddress = [0x600000000, 0x600001000]\nat-ns = 1\n", 5, "fault[0].address", "not inside one HBM"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\nbits = 33\nat-ns = 1\n", 5, "fault[0].bits", "1..=32"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\n", 1, "fault[0].when", "no trigger"),
    ("[[fault]]\nid = \"a\"\neffect = \"bit-flip\"\nregion = \"sbuf\"\nat-ns = 1\ndescriptor = 2\n", 6, "fault[0].descriptor", "exactly one trigger"),
    ("[[fault]]\nid = \"a\"\neffect = \"dma-error\"\nioctl = 2\n", 4, "fault[0].ioctl", "cannot be triggered"),
    ("[[fault]]\nid = \"a\"\neffect = \"engine-hang\"\nengine = \"Tensor\"\ninstruction = 0\n", 5, "fault[0].instruction", "start at 1"),
    ("[[fault]]\nid = \"a\"\neffect = \"engine-hang\"\nengine = \"Matrix\"\ninstruction = 1\n", 4, "fault[0].engine", "unknown engine"),
    ("[[fault]]\nid = \"a\"\neffect = \"nan\"\nprobability = 1.5\nengine = \"pe\"\n", 4, "fault[0].probability", "(0, 1]"),
    ("[[fault]]\nid = \"a\"\neffect = \"nan\"\nengine = \"pe\"\nat-ns = [20, 10]\n", 5, "fault[0].at-ns", "empty range"),
    ("[[fault]]\nid = \"a\"\neffect = \"engine-hang\"\nengine = \"pe\"\ncore = 8\nat-ns = 1\n", 5, "fault[0].core", "does not exist"),
    ("[[fault]]\nid = \"a\"\neffect = \"semaphore-drop\"\nsemaphore = 256\nupdate = 1\n", 4, "fault[0].semaphore", "does not exist"),
    ("[[fault]]\nid = \"a\"\neffect = \"ioctl-fail\"\ncommand = \"MEM_FROB\"\nerrno = \"EIO\"\nioctl = 1\n", 4, "fault[0].command", "unknown ioctl"),
    ("[[fault]]\nid = \"a\"\neffect = \"ioctl-fail\"\npoint = \"fail_everything\"\nioctl = 1\n", 4, "fault[0].point", "unknown driver fault point"),
    ("[[fault]]\nid = \"a\"\neffect = \"ioctl-fail\"\ncommand = \"MEM_FREE\"\nerrno = \"EWHAT\"\nioctl = 1\n", 5, "fault[0].errno", "unknown errno"),
    ("[[fault]]\nid = \"a\"\neffect = \"dma-error\"\nbits = 2\ndescriptor = 1\n", 4, "fault[0].bits", "takes no"),
    ("[[fault]]\nid = \"a\"\neffect = \"dma-error\"\nsemaphore = 2\ndescriptor = 1\n", 4, "fault[0].semaphore", "does not take"),
    ("[[fault]]\nid = \"a\"\neffect = \"engine-slow\"\nengine = \"pe\"\nat-ns = 1\n", 3, "fault[0].factor", "needs `factor`"),
    ("[[fault]]\nid = \"a\"\neffect = \"stuck-at\"\nregion = \"psum\"\nvalue = 2\nat-ns = 1\n", 5, "fault[0].value", "0 or 1"),
    ("[[fault]]\nid = \"a\"\neffect = \"nan\"\ninstruction = 3\n", 3, "fault[0].engine", "needs `engine`"),
    ("[[fault]]\nid = \"a\"\neffect = \"dma-error\"\ndescriptor = 1\n[[fault]]\nid = \"a\"\neffect = \"dma-error\"\ndescriptor = 2\n", 6, "fault[1].id", "duplicate id"),
    ("[[fault]]\nid = \"a b\"\neffect = \"dma-error\"\ndescriptor = 1\n", 2, "fault[0].id", "ids are"),
    ("description = \"nothing\"\n", 1, "fault", "no [[fault]]"),
    ("[[fault]]\nid = \"a\"\neffect = \"dma-error\"\ndescriptor = \"one\"\n", 4, "", "a number or a [lo, hi] range"),
    ("[[fault\n", 1, "", ""),
];

#[test]
fn bad_plans_name_line_and_key() {
    for (text, line, key, word) in BAD {
        let e = parse(text, &trn2()).expect_err(text);
        assert_eq!(e.line, *line, "{text}\n=> {e}");
        if !key.is_empty() {
            assert_eq!(e.key.as_deref(), Some(*key), "{text}\n=> {e}");
        }
        let msg = e.to_string();
        assert!(msg.contains(word), "{text}\n=> {msg}");
        assert!(msg.contains(&format!("line {line}")), "{msg}");
        let named = e.clone().in_file("plan.toml").to_string();
        assert!(named.starts_with("plan.toml: line "), "{named}");
    }
}

#[test]
fn sampling_is_deterministic_and_inside_the_site() {
    let text = std::fs::read_to_string(repo("fixtures/faults/mixed.toml")).expect("plan");
    let plan = parse(&text, &trn2()).expect("valid");
    let a: Vec<_> = (0..200).map(|i| plan.experiment(&trn2(), 9, i)).collect();
    let b: Vec<_> = (0..200)
        .rev()
        .map(|i| plan.experiment(&trn2(), 9, i))
        .collect();
    let b: Vec<_> = b.into_iter().rev().collect();
    assert_eq!(a, b, "an experiment depends only on (seed, index)");
    let mut seen = std::collections::BTreeSet::new();
    for inj in a.iter().flatten() {
        seen.insert(inj.fault.clone());
        match (&inj.effect, &inj.when, inj.location) {
            (Effect::DmaError, When::Descriptor { nth }, _) => assert!((1..8).contains(nth)),
            (
                Effect::BitFlip { bits, .. },
                When::AtNs { ns },
                Some(Location::Psum { partition, offset }),
            ) => {
                assert!(*ns < 40000 && partition < 128 && offset < 16 * 1024 && offset % 4 == 0);
                assert_eq!(inj.mask.count_ones(), *bits);
                // adjacent: one run of ones
                let m = inj.mask >> inj.mask.trailing_zeros();
                assert_eq!(m & (m + 1), 0, "{:#x}", inj.mask);
            }
            (
                Effect::HbmUe { repairable: false },
                When::AtNs { ns: 100 },
                Some(Location::Hbm { address }),
            ) => {
                assert!(trn2().hbm.iter().any(|h| h.contains(&address)));
            }
            (Effect::IoctlFail { errno: 12 }, When::Ioctl { nth }, None) => {
                assert!((1..6).contains(nth));
                assert_eq!(inj.commands.len(), 5, "every MEM_ALLOC variant");
            }
            (Effect::EngineHang | Effect::Nan | Effect::SemaphoreDrop, _, None) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        seen.len(),
        7,
        "every fault gets picked in 200 experiments: {seen:?}"
    );
    let c: Vec<_> = (0..200).map(|i| plan.experiment(&trn2(), 10, i)).collect();
    assert_ne!(a, c, "another seed, other experiments");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
        let _ = parse(&s, &trn2());
    }

    #[test]
    fn plan_shaped_text_never_panics(
        effect in prop::sample::select(neuron_faults::plan::EFFECTS.to_vec()),
        key in prop::sample::select(vec!["at-ns", "instruction", "pc", "descriptor", "notification", "update", "ioctl", "probability", "bits", "offset", "partitions", "address", "core", "queue", "semaphore"]),
        v in any::<u64>(),
        w in any::<u64>(),
    ) {
        let text = format!("[[fault]]\nid = \"x\"\neffect = \"{effect}\"\nengine = \"pe\"\nregion = \"sbuf\"\n{key} = [{v}, {w}]\n");
        let _ = parse(&text, &trn2());
        let text = format!("[[fault]]\nid = \"x\"\neffect = \"{effect}\"\n{key} = {v}\n");
        let _ = parse(&text, &trn2());
    }
}
