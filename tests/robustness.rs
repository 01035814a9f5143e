//! Outside input never panics: corrupted NEFF members (instruction words, DMA descriptions)
//! go through load and execute and come back as NRT statuses.

use neuron_e2e_tests::{builtin_input, repo_path, setup};
use neuron_isa::Dtype;
use neuron_neff::{Neff, NeffWriter};
use proptest::prelude::*;
use std::time::Duration;

/// Rebuild the MLP NEFF with `f` applied to one member.
fn mutate(member: &str, f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let bytes = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("fixture");
    let neff = Neff::parse(&bytes).expect("parse");
    let mut w = NeffWriter::new("mlp.neff");
    w.header = neff.header().clone();
    for (name, data) in neff.members() {
        let mut d = data.to_vec();
        if name == member {
            f(&mut d);
        }
        w.add_member(name, d);
    }
    w.to_bytes().expect("write")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn corrupted_instruction_words_fail_cleanly(engine in 0usize..5, flips in prop::collection::vec((0usize..4096, any::<u8>()), 1..6)) {
        let file = ["PE", "Activation", "Pool", "DVE", "SP"][engine];
        let neff = mutate(&format!("sg00/{file}.bin"), |d| {
            for (at, v) in &flips {
                if !d.is_empty() {
                    let i = at % d.len();
                    // Keep the opcode byte sometimes, to reach the execution paths.
                    if i % 64 != 0 || *v % 2 == 0 {
                        d[i] ^= v | 1;
                    }
                }
            }
        });
        let s = setup(Duration::from_millis(200));
        if let Ok(mut m) = s.rt.load(&neff, 0) {
            let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
            let _ = m.execute(&[("x", &x)]);
        }
    }

    #[test]
    fn corrupted_dma_descriptions_fail_cleanly(pos in 0usize..8192, byte in any::<u8>()) {
        let neff = mutate("sg00/SP.json", |d| {
            if !d.is_empty() {
                let i = pos % d.len();
                if d[i].is_ascii_digit() {
                    d[i] = b'0' + byte % 10;
                }
            }
        });
        let s = setup(Duration::from_millis(200));
        if let Ok(mut m) = s.rt.load(&neff, 0) {
            let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
            let _ = m.execute(&[("x", &x)]);
        }
    }
}
