//! Align AWS's profiler output with the decoded programs and print, per opcode, how many
//! records have a decoded word at the same (subgraph, engine, pc), how many opcodes agree,
//! and how many of the profiler's operand tokens the disassembly reproduces.
//!
//! `cargo run -p neuron-isa --example align_profiles [-- --mismatches N]`
//!
//! Two listings are checked for each of the six profiled akc kernels:
//! - NEFF: the NEFF engine files, pcs from the prologue rule (`neff_base`), only the
//!   records that the NTFF's segment table places on NEFF words;
//! - NTFF: the loaded program captured in the profile, every record.

#[path = "align/common.rs"]
mod common;

use common::*;
use std::collections::BTreeMap;

fn print(title: &str, t: &BTreeMap<String, Tally>) {
    println!("\n{title}");
    println!(
        "{:<30} {:>7} {:>7} {:>7} {:>8} {:>8} {:>7}",
        "opcode", "records", "entry", "opcode", "tokens", "matched", "%"
    );
    let mut all = Tally::default();
    for (op, x) in t {
        all.add(x);
        println!(
            "{:<30} {:>7} {:>7} {:>7} {:>8} {:>8} {:>6.1}%",
            op,
            x.records,
            x.with_entry,
            x.opcode_match,
            x.tokens,
            x.tokens_hit,
            100.0 * x.tokens_hit as f64 / x.tokens.max(1) as f64
        );
    }
    println!(
        "{:<30} {:>7} {:>7} {:>7} {:>8} {:>8} {:>6.2}%",
        "TOTAL",
        all.records,
        all.with_entry,
        all.opcode_match,
        all.tokens,
        all.tokens_hit,
        100.0 * all.tokens_hit as f64 / all.tokens.max(1) as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let show = args
        .iter()
        .position(|a| a == "--mismatches")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    let fx = fixtures();
    let mut neff_t: BTreeMap<String, Tally> = BTreeMap::new();
    let mut ntff_t: BTreeMap<String, Tally> = BTreeMap::new();
    let mut bad_all = Vec::new();
    for k in kernels() {
        let (lines, names) = neff_listing(&fx.join(format!("real-neff/{k}.neff")));
        let nt = read_ntff(&fx.join(format!("real-profiles/{k}.ntff")));
        let recs = read_profile(&fx.join(format!("real-profiles/{k}.profile.json")));
        let (t, bad) = compare(&lines, &names, &recs, from_neff_word(&nt));
        for (op, x) in t {
            neff_t.entry(op).or_default().add(&x);
        }
        bad_all.extend(bad.into_iter().map(|b| (k.clone(), "neff", b)));
        let nl = ntff_listing(&nt);
        let (t, bad) = compare(&nl, &names, &recs, |_| true);
        for (op, x) in t {
            ntff_t.entry(op).or_default().add(&x);
        }
        bad_all.extend(bad.into_iter().map(|b| (k.clone(), "ntff", b)));
    }
    print("NEFF listing vs profile (records on NEFF words)", &neff_t);
    print(
        "NTFF (loaded program) listing vs profile (all records)",
        &ntff_t,
    );
    if show > 0 {
        println!("\nFirst {show} mismatches:");
        for (k, src, (r, ours_op, ours)) in bad_all.iter().take(show) {
            println!(
                "{k} [{src}] {} {} pc {} {}\n  profile: {}\n  ours:    {} {}",
                r.subgraph,
                r.engine,
                r.pc,
                r.opcode,
                r.operands.trim(),
                ours_op.as_deref().unwrap_or("<none>"),
                ours
            );
        }
    }
}
