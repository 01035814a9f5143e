//! `neuron-ls`: list the Neuron devices and the processes using them (`neuron_tools::ls`).

use neuron_tools::snapshot::{Roots, Snapshot, SysDevices};
use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (code, out, err) =
        neuron_tools::ls::run(&args, || Snapshot::take(&SysDevices, &Roots::from_env()));
    let _ = std::io::stdout().write_all(out.as_bytes());
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(err.as_bytes());
    std::process::exit(code);
}
