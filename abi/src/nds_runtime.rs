//! This project's records in the runtime's own area of the datastore page (between
//! [`nds::RUNTIME_AREA_START`] and [`nds::EXT_OFFSET_OLD`]): the process, its loaded models
//! and per-NeuronCore latency histograms, read by `neuron-ls`, `neuron-monitor` and
//! `neuron-top` in other processes.
//!
//! AWS's runtime keeps its own records there, but their layout is not public, so this one is
//! the project's (`docs/tools.md`). Everything is fixed-size and bounded. The whole area is
//! guarded by one seqlock: the writer makes [`RuntimeArea::generation`] odd, writes, then
//! makes it even again; a reader copies the area between two equal even reads of it, so it
//! never sees a torn record.

use crate::nds;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `"nemu"`: the area holds this project's records.
pub const MAGIC: [u8; 4] = *b"nemu";
/// Layout version of [`RuntimeArea`].
pub const VERSION: u32 = 1;
/// Byte offset of the area in the page.
pub const AREA_OFFSET: usize = nds::RUNTIME_AREA_START;
/// Byte offset of [`RuntimeArea::generation`] in the page.
pub const GENERATION_OFFSET: usize = AREA_OFFSET + 8;
/// Models one process's records hold per device (further loads are counted but not listed).
pub const MAX_MODELS: usize = 32;
/// NeuronCores with latency histograms (every NC a page has counters for).
pub const HIST_NCS: usize = nds::MAX_NC_TOTAL;
/// Buckets of one latency histogram.
pub const HIST_BUCKETS: usize = 64;
/// Longest `NEURON_PROCESS_TAG` kept (the real tools' limit).
pub const TAG_MAX: usize = 255;
/// Bytes of the command line kept (`/proc/<pid>/cmdline` form: NUL-separated arguments).
pub const CMDLINE_MAX: usize = 1024;
/// Bytes of a model's NEFF name kept.
pub const NAME_MAX: usize = 256;
/// Bytes of the runtime version string kept.
pub const VERSION_MAX: usize = 32;

/// Memory categories a model or process is charged in: the datastore's `MEM_USAGE_*`
/// counters (code, tensors, constants, scratchpad, misc), in that order.
pub const MEM_CATEGORIES: usize = 5;
pub const MEM_CODE: usize = 0;
pub const MEM_TENSORS: usize = 1;
pub const MEM_CONSTANTS: usize = 2;
pub const MEM_SCRATCHPAD: usize = 3;
pub const MEM_MISC: usize = 4;

/// The process the page belongs to.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ProcessRecord {
    pub pid: u32,
    /// Bytes of `cmdline` in use.
    pub cmdline_len: u32,
    /// Wall-clock time the runtime took the page (Unix, milliseconds).
    pub start_unix_ms: u64,
    /// NUL-terminated, e.g. `"2.0.0"`.
    pub runtime_version: [u8; VERSION_MAX],
    /// `NEURON_PROCESS_TAG` (default: the pid), NUL-terminated.
    pub tag: [u8; TAG_MAX + 1],
    /// The command line as `/proc/<pid>/cmdline` has it.
    pub cmdline: [u8; CMDLINE_MAX],
}

/// One loaded model (a slot with `in_use == 0` is free).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct ModelRecord {
    /// Runtime model id (10001, 10002, ... per process).
    pub model_id: u32,
    pub in_use: u32,
    /// First NeuronCore and how many it runs on (two for LNC=2 NEFFs).
    pub nc_index: u32,
    pub nc_count: u32,
    /// 1 while an execution is in flight.
    pub is_running: u32,
    pub _pad0: u32,
    /// Executions started (all outcomes).
    pub executions: u64,
    /// Host bytes charged to the model, per category.
    pub host_bytes: [u64; MEM_CATEGORIES],
    /// Device bytes charged to the model, per category.
    pub device_bytes: [u64; MEM_CATEGORIES],
    /// The NEFF header's UUID.
    pub uuid: [u8; 16],
    /// The NEFF's path or name, NUL-terminated.
    pub name: [u8; NAME_MAX],
}

/// A log-spaced latency histogram: bucket 0 counts latencies under 1 µs, bucket `i ≥ 1`
/// those in `[2^((i-1)/2), 2^(i/2))` µs, the last one everything above. Cumulative: a
/// reader diffs two samples to get one period's distribution.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct LatencyHistogram {
    pub count: u64,
    pub sum_us: u64,
    pub buckets: [u64; HIST_BUCKETS],
}

/// Total (wall, around the whole execute call) and device latency of one NeuronCore.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct NcLatency {
    pub total: LatencyHistogram,
    pub device: LatencyHistogram,
}

/// The runtime area as a whole, at [`AREA_OFFSET`].
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RuntimeArea {
    pub magic: [u8; 4],
    pub version: u32,
    /// Seqlock: odd while the writer is inside.
    pub generation: u64,
    /// `size_of::<RuntimeArea>()` as the writer built it.
    pub area_size: u32,
    pub max_models: u32,
    pub hist_ncs: u32,
    pub hist_buckets: u32,
    /// Models loaded since the page was taken (also those not listed).
    pub models_loaded: u64,
    pub process: ProcessRecord,
    pub models: [ModelRecord; MAX_MODELS],
    pub latency: [NcLatency; HIST_NCS],
}

/// Size of the area in bytes.
pub const AREA_SIZE: usize = std::mem::size_of::<RuntimeArea>();
// The records stay inside the runtime's area, clear of the driver's extended counters.
const _: () = assert!(AREA_OFFSET + AREA_SIZE <= nds::EXT_OFFSET_OLD);

/// The bucket a latency of `us` microseconds falls in.
pub fn bucket_of(us: f64) -> usize {
    if us.is_nan() || us < 1.0 {
        return 0;
    }
    let i = (us.log2() * 2.0).floor() as i64 + 1;
    i.clamp(1, HIST_BUCKETS as i64 - 1) as usize
}

/// The `[low, high)` bounds of bucket `i` in microseconds (`high` infinite for the last).
pub fn bucket_bounds(i: usize) -> (f64, f64) {
    match i {
        0 => (0.0, 1.0),
        i if i >= HIST_BUCKETS - 1 => (2f64.powf((HIST_BUCKETS - 2) as f64 / 2.0), f64::INFINITY),
        i => (2f64.powf((i - 1) as f64 / 2.0), 2f64.powf(i as f64 / 2.0)),
    }
}

/// Percentile `p` (0..=100) of a distribution given as bucket counts, in microseconds: the
/// geometric middle of the bucket holding that rank (the lower bound for the open last one,
/// 0.5 µs for the first). `None` when the counts are all zero.
pub fn percentile_us(counts: &[u64], p: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    // Rank of the sample (1-based): p0 is the smallest, p100 the largest.
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * (total - 1) as f64).round() as u64 + 1;
    let mut seen = 0u64;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            let (lo, hi) = bucket_bounds(i);
            return Some(match i {
                0 => 0.5,
                _ if hi.is_infinite() => lo,
                _ => (lo * hi).sqrt(),
            });
        }
    }
    None
}

/// A NUL-terminated field as a string (up to the first NUL; invalid UTF-8 replaced).
pub fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Copy `s` into a NUL-terminated field, truncated at a character boundary.
pub fn set_c_str(dst: &mut [u8], s: &str) {
    dst.fill(0);
    let mut n = s.len().min(dst.len().saturating_sub(1));
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

impl RuntimeArea {
    /// The area of a page copy, if the page holds one of this version.
    pub fn of_page(page: &[u8]) -> Option<RuntimeArea> {
        let b = page.get(AREA_OFFSET..AREA_OFFSET + AREA_SIZE)?;
        let a = RuntimeArea::read_from_bytes(b).ok()?;
        (a.magic == MAGIC && a.version == VERSION && a.area_size as usize == AREA_SIZE).then_some(a)
    }

    /// The listed (in-use) models.
    pub fn loaded_models(&self) -> impl Iterator<Item = &ModelRecord> {
        self.models.iter().filter(|m| m.in_use != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layout_fits_the_runtime_area() {
        assert_eq!(size_of::<ProcessRecord>(), 16 + 32 + 256 + 1024);
        assert_eq!(size_of::<ModelRecord>(), 24 + 8 + 80 + 16 + 256);
        assert_eq!(size_of::<LatencyHistogram>(), 16 + 64 * 8);
        assert_eq!(size_of::<NcLatency>(), 2 * 528);
        assert_eq!(offset_of!(RuntimeArea, generation), 8);
        assert_eq!(offset_of!(RuntimeArea, models_loaded), 32);
        assert_eq!(offset_of!(RuntimeArea, process), 40);
        assert_eq!(offset_of!(RuntimeArea, models), 40 + 1328);
        assert_eq!(offset_of!(RuntimeArea, latency), 40 + 1328 + 32 * 384);
        assert_eq!(AREA_SIZE, 40 + 1328 + 32 * 384 + 16 * 1056);
        assert_eq!(GENERATION_OFFSET % 8, 0);
        const { assert!(AREA_OFFSET + AREA_SIZE <= nds::EXT_OFFSET_OLD) };
    }

    #[test]
    fn buckets_are_log_spaced() {
        assert_eq!(bucket_of(0.2), 0);
        assert_eq!(bucket_of(1.0), 1);
        assert_eq!(bucket_of(1.5), 2);
        assert_eq!(bucket_of(2.0), 3);
        assert_eq!(bucket_of(1e12), HIST_BUCKETS - 1);
        assert_eq!(bucket_of(f64::NAN), 0);
        for i in 1..HIST_BUCKETS - 1 {
            let (lo, hi) = bucket_bounds(i);
            assert_eq!(bucket_of(lo * 1.0001), i, "bucket {i}");
            assert_eq!(bucket_of(hi * 0.9999), i, "bucket {i}");
        }
        let mut c = [0u64; HIST_BUCKETS];
        assert_eq!(percentile_us(&c, 50.0), None);
        c[bucket_of(100.0)] = 99;
        c[bucket_of(10_000.0)] = 1;
        let p50 = percentile_us(&c, 50.0).expect("p50");
        assert!((70.0..150.0).contains(&p50), "{p50}");
        let p100 = percentile_us(&c, 100.0).expect("p100");
        assert!((7_000.0..15_000.0).contains(&p100), "{p100}");
        assert_eq!(percentile_us(&c, 0.0), Some(p50));
    }

    #[test]
    fn strings_and_pages() {
        let mut f = [0u8; 4];
        set_c_str(&mut f, "héllo");
        assert_eq!(c_str(&f), "hé");
        let page = vec![0u8; crate::consts::NDS_SLOT_SIZE as usize];
        assert!(RuntimeArea::of_page(&page).is_none());
        assert!(RuntimeArea::of_page(&page[..100]).is_none());
    }
}
