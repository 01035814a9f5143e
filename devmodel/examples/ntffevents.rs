//! Dumps an NTFF's non-instruction records (`neuron_isa::ntff`): semaphore/event updates,
//! DMA packets and the third ("other") instruction marks, one tab-separated line each, times
//! in ns from the window's start, for tracing waits word by word (`docs/timing.md`).
//!
//! `cargo run --release -p neuron-devmodel --example ntffevents -- FILE.ntff > events.tsv`
//!
//! Lines: `sem  sg source index op value t`, `dma  sg engine queue start end bytes`,
//! `mark sg engine pc t`.

use neuron_isa::ntff::{Mark, Ntff, Record, SLOT_MASK};

fn dump(path: &str) -> Result<(), String> {
    let b = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let nt = Ntff::parse(&b).map_err(|e| format!("{path}: {e}"))?;
    let origin = nt.window.map(|w| w.start_ps).unwrap_or(0) as f64;
    let ns = |ps: u64| (ps as f64 - origin) / 1e3;
    for (sg, rec) in nt.records() {
        let sg = sg.unwrap_or("?");
        match rec {
            Record::Event(e) if e.semaphore => println!(
                "sem\t{sg}\t{:?}\t{}\t{:#x}\t{}\t{}",
                e.source,
                e.index,
                e.op,
                e.value,
                ns(e.ts)
            ),
            Record::Instr(r) if r.mark == Mark::Other => {
                let pc = nt.program(sg, r.engine).map(|p| {
                    let base = (p.device_addr / neuron_isa::cayman::WORD as u64) as u32 & SLOT_MASK;
                    r.slot.wrapping_sub(base) & SLOT_MASK
                });
                println!("mark\t{sg}\t{:?}\t{:?}\t{}", r.engine, pc, ns(r.ts));
            }
            _ => {}
        }
    }
    let (packets, _) = nt.dma_packets();
    for p in packets {
        println!(
            "dma\t{}\t{}\t{}\t{}\t{}\t{}",
            p.subgraph,
            p.dma_engine,
            p.queue,
            ns(p.start_ps),
            ns(p.end_ps),
            p.bytes
        );
    }
    Ok(())
}

fn main() {
    for path in std::env::args().skip(1) {
        if let Err(e) = dump(&path) {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
