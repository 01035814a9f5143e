//! Outside input never panics: corrupted NEFF members (instruction words, variable tables)
//! go through load and execute and come back as NRT statuses.

use neuron_e2e_tests::{builtin_input, repo_path, setup};
use neuron_isa::Dtype;
use neuron_neff::{Neff, NeffWriter};
use proptest::prelude::*;
use std::time::Duration;

/// Rebuild the MLP NEFF with `f` applied to one member.
fn mutate(member: &str, f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    mutate_file("fixtures/neff/mlp.neff", member, f)
}

/// Rebuild the NEFF at `rel` (repository-relative) with `f` applied to one member.
fn mutate_file(rel: &str, member: &str, f: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let bytes = std::fs::read(repo_path(rel)).expect("fixture");
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

/// `PROPTEST_CASES` when set (for longer local runs), else `default` (CI).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `err` has `status` and its message contains `needle`.
fn expect_status(err: &neuron_runtime::NrtError, status: neuron_runtime::NrtStatus, needle: &str) {
    assert_eq!(err.status, status, "{}", err.message);
    assert!(err.message.contains(needle), "{}", err.message);
}

const REAL_SMALL: &str = "../shared/fixtures/real-neff/nkipy-matmul_small.neff";

/// Run a (possibly corrupted) nkipy-matmul_small: load, and execute if it loads.
fn run_real_small(neff: &[u8]) -> Result<(), neuron_runtime::NrtError> {
    let s = setup(Duration::from_millis(300));
    let mut m = s.rt.load(neff, 0)?;
    let x = builtin_input(Dtype::F16, 128 * 256, 0);
    let y = builtin_input(Dtype::F16, 256 * 128, 1);
    m.execute(&[("x", &x), ("y", &y)]).map(|_| ())
}

#[test]
fn real_neff_with_an_unknown_opcode_is_refused_at_load() {
    use neuron_isa::cayman::{CaymanInstr, Namespace};
    let unknown = (0..=255u8)
        .find(|b| {
            let mut w = [0u8; 64];
            w[0] = *b;
            !CaymanInstr::decode(Namespace::Neff, &w).opcode.is_known()
                && !CaymanInstr::decode(Namespace::Loaded, &w).opcode.is_known()
        })
        .expect("some byte is no opcode");
    // Word 2 of the Pool program is its first DMA_DIRECT2D.
    let neff = mutate_file(REAL_SMALL, "sg00/Pool.bin", |d| d[128] = unknown);
    let err = run_real_small(&neff).expect_err("unknown opcode");
    assert_eq!(err.status, neuron_runtime::NrtStatus::Invalid);
    // Numbered as AWS's profiler numbers it: Pool's NEFF word 0 is loaded at pc 61.
    assert_eq!(
        err.message,
        format!("sg00 engine GpSimd pc 63: unknown opcode 0x{unknown:02x}")
    );
    run_real_small(&std::fs::read(repo_path(REAL_SMALL)).expect("fixture"))
        .expect("intact NEFF runs");
}

/// nkipy-matmul_small with one field of NEFF word `index` of `member` set to `v`.
fn real_small_with(
    member: &str,
    index: usize,
    field: &str,
    v: neuron_isa::cayman::Value,
) -> Vec<u8> {
    use neuron_isa::cayman::{CaymanInstr, Namespace};
    mutate_file(REAL_SMALL, member, |d| {
        let at = index * 64;
        let w: [u8; 64] = d[at..at + 64].try_into().expect("word");
        let mut ci = CaymanInstr::decode(Namespace::Neff, &w);
        let f = ci
            .fields
            .iter_mut()
            .find(|f| f.spec.name == field)
            .unwrap_or_else(|| panic!("no field {field} in {}", ci.opcode.name()));
        f.value = v.clone();
        d[at..at + 64].copy_from_slice(&ci.encode());
    })
}

#[test]
fn real_neff_sbuf_out_of_bounds_is_exec_oob_naming_engine_pc_and_opcode() {
    use neuron_isa::cayman::{AccessPattern, Value};
    // Activation word 3 copies 128 int32 per partition to SBUF 0x4000; move it to the last
    // 16 bytes of the 224 KiB partition.
    let ap = AccessPattern {
        addr: 224 * 1024 - 16,
        dims: 4,
        step: [1, 1, 1, 1],
        num: [128, 1, 1, 1],
    };
    let neff = real_small_with("sg00/Activation.bin", 3, "dst", Value::Ap(ap));
    let err = run_real_small(&neff).expect_err("out of bounds");
    expect_status(&err, neuron_runtime::NrtStatus::ExecOob, "");
    assert!(err.message.contains("out-of-bounds"), "{}", err.message);
    assert!(
        err.message
            .contains("engine Scalar pc 69 opcode 0x46 (COPY)"),
        "{}",
        err.message
    );
}

#[test]
fn real_neff_matmul_whose_output_shape_disagrees_is_invalid() {
    use neuron_isa::cayman::{AccessPattern, Value};
    // PE word 4 (pc 70) transposes 128 columns into PSUM; let it name only 64 outputs.
    let ap = AccessPattern {
        addr: 0x200_0800,
        dims: 3,
        step: [1, 0, 0, 0],
        num: [64, 1, 1, 0],
    };
    let neff = real_small_with("sg00/PE.bin", 4, "dst", Value::Ap(ap));
    let err = run_real_small(&neff).expect_err("shape mismatch");
    expect_status(
        &err,
        neuron_runtime::NrtStatus::Invalid,
        "engine Tensor pc 70 opcode 0x02 (MATMUL)",
    );
}

#[test]
fn real_neff_dma_to_an_unmapped_address_is_a_dma_abort() {
    use neuron_isa::cayman::{DmaAddr, Value};
    // SP word 2 is the DMA_DIRECT2D loading the identity constant into SBUF.
    let neff = real_small_with(
        "sg00/SP.bin",
        2,
        "dst",
        Value::Addr(DmaAddr::Absolute(0x7f00_0000_0000)),
    );
    let err = run_real_small(&neff).expect_err("unmapped");
    expect_status(
        &err,
        neuron_runtime::NrtStatus::ExecHwErrDmaAbort,
        "engine Sync pc 51 opcode 0xb8 (DMA_DIRECT2D)",
    );
}

#[test]
fn real_neff_semaphore_that_never_completes_times_out() {
    use neuron_isa::cayman::Value;
    // Pool word 2's DMA signals semaphore 24, which PE waits for; make it add nothing.
    let neff = real_small_with("sg00/Pool.bin", 2, "sem_increment", Value::U(0));
    let err = run_real_small(&neff).expect_err("hang");
    expect_status(&err, neuron_runtime::NrtStatus::Timeout, "");
    // The core is left undefined; the next load resets it and runs normally.
    run_real_small(&std::fs::read(repo_path(REAL_SMALL)).expect("fixture")).expect("recovers");
}

/// NEFF word 2 of Pool (pc 63) replaced by a COMPARE_BRANCH ALWAYS of `words` slots.
fn real_small_branching(words: i32) -> Vec<u8> {
    let w = neuron_isa::cayman::build::branch_always(words, 0);
    mutate_file(REAL_SMALL, "sg00/Pool.bin", |d| {
        d[128..192].copy_from_slice(&w)
    })
}

#[test]
fn real_neff_branch_out_of_the_program_is_invalid_naming_engine_pc_and_opcode() {
    let err = run_real_small(&real_small_branching(-100)).expect_err("bad target");
    expect_status(
        &err,
        neuron_runtime::NrtStatus::Invalid,
        "engine GpSimd pc 63 opcode 0xa9 (COMPARE_BRANCH)",
    );
}

/// A WRITE (the word of the LNC=2 handshake) whose destination nothing decodes: the device
/// faults out of bounds, reported with engine, pc and opcode.
#[test]
fn real_neff_write_to_an_unmapped_address_is_exec_oob() {
    let w = neuron_isa::cayman::build::write(&[(0x7f00_0000_1804, 1)]);
    let neff = mutate_file(REAL_SMALL, "sg00/Pool.bin", |d| {
        d[128..192].copy_from_slice(&w)
    });
    let err = run_real_small(&neff).expect_err("unmapped");
    expect_status(
        &err,
        neuron_runtime::NrtStatus::ExecOob,
        "engine GpSimd pc 63 opcode 0xa5 (WRITE)",
    );
}

#[test]
fn real_neff_branch_to_itself_spins_until_the_execution_timeout() {
    let err = run_real_small(&real_small_branching(0)).expect_err("spins");
    expect_status(&err, neuron_runtime::NrtStatus::Timeout, "");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), .. ProptestConfig::default() })]

    /// Corrupted operand fields of real trn2 words reach the device semantics and come back as
    /// statuses (out-of-bounds patterns, unknown dtypes, DMA aborts, hangs), never a panic.
    #[test]
    fn corrupted_real_instruction_words_fail_cleanly(engine in 0usize..5, flips in prop::collection::vec((0usize..1024, any::<u8>()), 1..4)) {
        let file = ["PE", "Activation", "Pool", "DVE", "SP"][engine];
        let neff = mutate_file(REAL_SMALL, &format!("sg00/{file}.bin"), |d| {
            for (at, v) in &flips {
                if !d.is_empty() {
                    let i = at % d.len();
                    if i % 64 != 0 {
                        d[i] ^= v | 1;
                    }
                }
            }
        });
        let _ = run_real_small(&neff);
    }

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

    /// The MLP's variables (ids, sizes) and queues, as the real load path reads them.
    #[test]
    fn corrupted_variable_tables_fail_cleanly(pos in 0usize..8192, byte in any::<u8>()) {
        let neff = mutate("sg00/def.json", |d| {
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
