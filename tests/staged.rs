//! Staged executions (`Model::write_input`, `execute_staged`, `read_output`): a large model's
//! tensors move a block at a time, with the same outputs and device time as `execute`.

use neuron_e2e_tests::{builtin_input, repo_path, setup};
use neuron_isa::Dtype;
use std::time::Duration;

#[test]
fn staged_in_blocks_matches_execute_bit_for_bit() {
    let neff = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("mlp.neff");
    let x = builtin_input(Dtype::Bf16, 128 * 512, 0);
    let s = setup(Duration::from_secs(30));
    let mut m = s.rt.load(&neff, 0).expect("load");
    let whole = m.execute(&[("x", &x)]).expect("execute");
    let s2 = setup(Duration::from_secs(30));
    let mut m2 = s2.rt.load(&neff, 0).expect("load");
    // Odd-sized pieces, written out of order.
    let pieces: Vec<(usize, &[u8])> = x.chunks(40_000).enumerate().collect();
    for (k, b) in pieces.iter().rev() {
        m2.write_input("x", (k * 40_000) as u64, b)
            .expect("write_input");
    }
    let (staged, num) = m2.execute_staged().expect("execute_staged");
    assert!(num.is_none());
    assert!(staged.outputs.is_empty(), "outputs stay on the device");
    assert_eq!(staged.device_time_ps, whole.device_time_ps);
    let (info, want) = &whole.outputs[0];
    let mut got = vec![0u8; want.len()];
    for (k, b) in got.chunks_mut(3000).enumerate() {
        m2.read_output(&info.name, (k * 3000) as u64, b)
            .expect("read_output");
    }
    assert_eq!(&got, want);
    // Ranges outside a tensor and unknown names are refused.
    assert!(m2.write_input("x", x.len() as u64 - 1, &[0, 0]).is_err());
    assert!(m2.write_input("nope", 0, &[0]).is_err());
    assert!(m2.read_output(&info.name, u64::MAX, &mut [0]).is_err());
    assert!(m2.read_output("x", 0, &mut [0]).is_err(), "x is an input");
}
