//! `neuron-emu firmware inspect FILE [--json]`: the images a firmware carrier holds (kind,
//! engine, load address, size, SHA-256), read by `neuron-firmware-loader` without executing it.

use neuron_firmware_loader::{parse, CarrierKind, MAX_CARRIER_BYTES};
use serde_json::json;
use std::io::Read;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum FirmwareCmd {
    /// List the images of a firmware carrier (libncfw.so- or libnrtucode_extisa.so-shaped).
    Inspect {
        /// The carrier file.
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Reads at most one byte over the loader's limit, so a huge file costs bounded memory and
/// the loader reports it as too large.
fn read_bounded(path: &PathBuf) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut data = Vec::new();
    f.take(MAX_CARRIER_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(data)
}

pub fn run(cmd: &FirmwareCmd) -> Result<(), (u8, String)> {
    let FirmwareCmd::Inspect { file, json } = cmd;
    let data = read_bounded(file).map_err(|m| (1, m))?;
    let carrier = parse(&data).map_err(|e| (1, format!("{}: {e}", file.display())))?;
    let kind = match carrier.kind {
        CarrierKind::CollectiveSequencer => "collective-sequencer",
        CarrierKind::GpSimdMicrocode => "gpsimd-microcode",
        _ => "unknown",
    };
    if *json {
        let images: Vec<_> = carrier
            .images
            .iter()
            .map(|i| {
                json!({
                    "name": i.name,
                    "kind": i.kind.to_string(),
                    "engine": i.engine.to_string(),
                    "load_address": i.load_address,
                    "file_offset": i.file_range.start,
                    "size": i.bytes.len(),
                    "sha256": i.digest_hex(),
                })
            })
            .collect();
        let doc = json!({ "carrier": kind, "images": images });
        let s = serde_json::to_string_pretty(&doc).map_err(|e| (1, e.to_string()))?;
        println!("{s}");
        return Ok(());
    }
    println!(
        "{}: {kind} carrier, {} image(s)",
        file.display(),
        carrier.images.len()
    );
    println!(
        "{:<24} {:<20} {:<20} {:>12} {:>10}  sha256",
        "name", "kind", "engine", "load", "size"
    );
    for i in &carrier.images {
        println!(
            "{:<24} {:<20} {:<20} {:>#12x} {:>10}  {}",
            i.name,
            i.kind.to_string(),
            i.engine.to_string(),
            i.load_address,
            i.bytes.len(),
            i.digest_hex()
        );
    }
    Ok(())
}
