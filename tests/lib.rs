//! Shared helpers for the end-to-end tests: a runtime on an in-process emulated device.

use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::{Emulator, OpenOptions};
use neuron_runtime::{Config, Runtime};
use std::sync::Arc;
use std::time::Duration;

/// Path of a file under the repository root.
pub fn repo_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(rel)
}

/// An emulator plus a runtime bound to its device 0 through the in-process backend.
#[derive(Debug)]
pub struct Setup {
    pub emu: Emulator,
    pub rt: Runtime,
}

pub fn setup(timeout: Duration) -> Setup {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let f = emu
        .open(0, OpenOptions::default())
        .expect("open /dev/neuron0");
    let dev: Arc<dyn DeviceFile> = Arc::new(f);
    let rt = Runtime::new(
        dev,
        0,
        Config {
            exec_timeout: timeout,
            validate_hash: false,
        },
    )
    .expect("runtime");
    Setup { emu, rt }
}

/// The built-in deterministic input bytes `neuron-emu run` uses for input `index`.
pub fn builtin_input(dtype: neuron_isa::Dtype, elems: usize, index: usize) -> Vec<u8> {
    let vals = neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, index), elems, 1.0);
    let mut b = vec![0u8; elems * dtype.size()];
    for (k, v) in vals.iter().enumerate() {
        neuron_isa::dtype::store_f32(dtype, *v, &mut b[k * dtype.size()..]);
    }
    b
}

/// Read a float32 .npy file's values.
pub fn read_f32_npy(path: &std::path::Path) -> Vec<f32> {
    let raw = std::fs::read(path).expect("read npy");
    let a = neuron_neff::npy::NpyArray::parse(&raw).expect("parse npy");
    assert_eq!(a.dtype, neuron_neff::npy::NpyDtype::F32);
    a.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
