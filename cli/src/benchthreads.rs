//! `bench threads`: two models executing at the same time on two NeuronCores, against one
//! model alone measured in the same run, with every data path on the device thread
//! (`NEURON_EMU_THREADS=1`), with a host thread per core while another core runs (`auto`)
//! and with a thread per core always (`always`): what the cores' lanes
//! (`devmodel::device::lane`) buy when two cores run at once.

use crate::benchreal::{execute, stage_inputs};
use crate::{open_emulated, usage, Failure};
use neuron_abi::arch::Arch;
use neuron_runtime::{Config, Model, Runtime};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn default_neff() -> PathBuf {
    PathBuf::from("../shared/fixtures/real-neff/akc-fused_bf16_s1024.neff")
}

/// A model loaded on `nc` with its built-in inputs staged.
fn load(rt: &Runtime, bytes: &[u8], nc: u32) -> Result<Model, String> {
    let model = rt
        .load(bytes, nc)
        .map_err(|e| format!("load on NC {nc}: {e}"))?;
    let infos: Vec<_> = model.inputs().cloned().collect();
    let mut progress = crate::runmem::Progress::new(false, 0);
    stage_inputs(&model, &infos, &mut progress)?;
    Ok(model)
}

fn executions(model: &mut Model, n: u32) -> Result<(), String> {
    for _ in 0..n {
        execute(model)?;
    }
    Ok(())
}

/// (ms per execution alone, ms per pair of executions at once, words on lane threads).
fn measure(bytes: &[u8], mode: &str, repeat: u32) -> Result<(f64, f64, u64), String> {
    // Read when the device is created.
    std::env::set_var(neuron_devmodel::device::THREADS_ENV, mode);
    let (emu, dev) = open_emulated(Arch::V3Trn2).map_err(|f| f.1)?;
    let rt = Runtime::new(dev, 0, Config::from_env()).map_err(|e| e.to_string())?;
    let (mut a, mut b) = (load(&rt, bytes, 0)?, load(&rt, bytes, 2)?);
    executions(&mut a, 1)?;
    executions(&mut b, 1)?;
    let t = Instant::now();
    executions(&mut a, repeat)?;
    let alone = t.elapsed().as_secs_f64() * 1e3 / repeat as f64;
    let w0 = emu.stats(0).unwrap_or_default().lane_thread_words;
    let t = Instant::now();
    let (ra, rb) = std::thread::scope(|s| {
        let ta = s.spawn(|| executions(&mut a, repeat));
        let tb = s.spawn(|| executions(&mut b, repeat));
        (ta.join(), tb.join())
    });
    let both = t.elapsed().as_secs_f64() * 1e3 / repeat as f64;
    for r in [ra, rb] {
        r.map_err(|_| "an execution thread panicked".to_string())??;
    }
    let words = emu.stats(0).unwrap_or_default().lane_thread_words - w0;
    Ok((alone, both, words))
}

pub fn run(file: Option<&Path>, repeat: u32) -> Result<(), Failure> {
    if repeat == 0 {
        return Err(usage("--repeat must be positive"));
    }
    let path = file.map(Path::to_path_buf).unwrap_or_else(default_neff);
    let bytes =
        std::fs::read(&path).map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let host = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "bench threads: {} on NC 0 and NC 2, {repeat} timed executions each (after one warm-up); host CPUs {host}",
        path.display()
    );
    println!("alone ms = one model executing by itself; both ms = both executing at once, per pair; both/alone = 2.0 when the two run one after the other, 1.0 when fully in parallel");
    println!(
        "{:<8} {:>10} {:>10} {:>11} {:>12}",
        "threads", "alone ms", "both ms", "both/alone", "lane words"
    );
    let mut pair = [0.0; 3];
    for (i, mode) in ["1", "auto", "always"].iter().enumerate() {
        let (alone, both, words) =
            measure(&bytes, mode, repeat).map_err(|e| Failure(1, format!("{mode}: {e}")))?;
        pair[i] = both;
        println!(
            "{mode:<8} {alone:>10.2} {both:>10.2} {:>11.2} {words:>12}",
            both / alone
        );
    }
    println!(
        "two models at once: auto {:.2}x, always {:.2}x the speed of 1",
        pair[0] / pair[1],
        pair[0] / pair[2]
    );
    Ok(())
}
