//! The skeleton's end-to-end run through the runtime's real-syscall backend: `open`, `ioctl`
//! and `mmap` on `/dev/neuron0`, exactly the code that would run on hardware. Run it under
//! `LD_PRELOAD=libneuron_emu_preload.so` to drive the emulator instead.
//!
//! Usage: neuron-emu-syscall-e2e MLP.neff GOLDEN_Y.npy   (exit 0 when y matches the golden)

use neuron_runtime::sys::SysDevice;
use neuron_runtime::{Config, Runtime};
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: {} MLP.neff GOLDEN_Y.npy", args[0]);
        std::process::exit(2);
    }
    let dev = match SysDevice::open("/dev/neuron0") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("open /dev/neuron0: {e}");
            std::process::exit(1);
        }
    };
    let rt =
        Runtime::new(Arc::new(dev), 0, Config::from_env()).unwrap_or_else(|e| fail(&e.to_string()));
    let neff = std::fs::read(&args[1]).unwrap_or_else(|e| fail(&e.to_string()));
    let mut m = rt.load(&neff, 0).unwrap_or_else(|e| fail(&e.to_string()));
    let vals = neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, 0), 128 * 512, 1.0);
    let mut x = vec![0u8; 128 * 512 * 2];
    for (i, v) in vals.iter().enumerate() {
        neuron_isa::dtype::store_f32(neuron_isa::Dtype::Bf16, *v, &mut x[i * 2..]);
    }
    let out = m
        .execute(&[("x", &x)])
        .unwrap_or_else(|e| fail(&e.to_string()));
    let raw = std::fs::read(&args[2]).unwrap_or_else(|e| fail(&e.to_string()));
    let golden = neuron_neff::npy::NpyArray::parse(&raw).unwrap_or_else(|e| fail(&e.to_string()));
    let want: Vec<f32> = golden
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let got: Vec<f32> = out.outputs[0]
        .1
        .chunks_exact(2)
        .map(|c| neuron_isa::dtype::load_f32(neuron_isa::Dtype::Bf16, c))
        .collect();
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    println!(
        "y max_abs_err {err:e} device_time_ps {}",
        out.device_time_ps
    );
    if got.len() != want.len() || err > 2e-2 {
        fail("output differs from the golden");
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("neuron-emu-syscall-e2e: {msg}");
    std::process::exit(1);
}
