//! `neuron-monitor`: one JSON report per period on stdout (`neuron_tools::monitor`).

use neuron_tools::monitor::{Config, Monitor};
use neuron_tools::snapshot::{Roots, Snapshot, SysDevices};
use std::io::Write;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: neuron-monitor [-c|--config-file PATH] [--verbose 0-4]\n";

fn main() {
    let mut args = std::env::args().skip(1);
    let mut config: Option<String> = None;
    let mut verbose = 0u32;
    while let Some(a) = args.next() {
        match a.as_str() {
            "-c" | "--config-file" => config = args.next(),
            "--verbose" | "-v" => {
                verbose = match args.next().and_then(|v| v.parse().ok()).filter(|v| *v <= 4) {
                    Some(v) => v,
                    None => {
                        println!("{USAGE}neuron-monitor: error: --verbose takes 0 to 4");
                        std::process::exit(1);
                    }
                }
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return;
            }
            other => {
                println!("{USAGE}neuron-monitor: error: unknown option: {other}");
                std::process::exit(1);
            }
        }
    }
    let cfg = match &config {
        None => Config::default(),
        Some(p) => match std::fs::read_to_string(p)
            .map_err(|e| format!("{p}: {e}"))
            .and_then(|t| Config::parse(&t))
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("level=error msg=\"{}\"", e.replace('"', "'"));
                std::process::exit(1);
            }
        },
    };
    if verbose >= 1 {
        for w in &cfg.warnings {
            eprintln!("level=warning msg=\"{}\"", w.replace('"', "'"));
        }
    }
    let tick = cfg.tick().max(Duration::from_millis(100));
    let mut mon = Monitor::new(cfg);
    let roots = Roots::from_env();
    let mut next = Instant::now();
    loop {
        let snap = Snapshot::take(&SysDevices, &roots);
        let rec = match &snap {
            Ok(s) => mon.report(Ok(s)),
            Err(e) => mon.report(Err(e.as_str())),
        };
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{rec}").and_then(|_| out.flush()).is_err() {
            // The reader went away (a consumer that takes one record and closes the pipe).
            return;
        }
        drop(out);
        next += tick;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}
