//! Chrome trace-event JSON (opens in Perfetto) of a device timeline: the shared writer of
//! `neuron_runtime::profile` over the device model's records (`docs/profiling.md`).

use neuron_devmodel::TraceEvent;
use neuron_runtime::profile::Capture;
use std::io::Write;
use std::path::Path;

/// A timeline of spans only (no model, names or marks): what `campaign --trace` records.
pub fn write_chrome_trace(path: &Path, events: &[TraceEvent]) -> std::io::Result<()> {
    let c = crate::profile::capture(0, Vec::new(), &[], events, &[], &Default::default());
    write_trace(path, &[c])
}

/// The trace of `caps`: processes per core, threads per engine, DMA queue and registers.
pub fn write_trace(path: &Path, caps: &[Capture]) -> std::io::Result<()> {
    write_json(path, &neuron_runtime::profile::chrome_trace(caps))
}

/// Write a JSON document to `path`.
pub fn write_json(path: &Path, v: &serde_json::Value) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer(&mut f, v)?;
    writeln!(f)?;
    f.flush()
}
