//! Chrome trace-event JSON (opens in Perfetto) of a device timeline.

use neuron_devmodel::TraceEvent;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

pub fn write_chrome_trace(path: &Path, events: &[TraceEvent]) -> std::io::Result<()> {
    let t0 = events.iter().map(|e| e.start.0).min().unwrap_or(0);
    let mut tids: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for e in events {
        let n = tids.len();
        tids.entry((e.nc, e.track.clone())).or_insert(n);
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
    let mut first = true;
    for ((nc, track), tid) in &tids {
        if !first {
            writeln!(f, ",")?;
        }
        first = false;
        write!(f, "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{nc},\"tid\":{tid},\"args\":{{\"name\":\"{track}\"}}}}")?;
    }
    for e in events {
        if !first {
            writeln!(f, ",")?;
        }
        first = false;
        let tid = tids.get(&(e.nc, e.track.clone())).copied().unwrap_or(0);
        write!(
            f,
            "{{\"ph\":\"X\",\"name\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.6},\"dur\":{:.6},\"args\":{{\"pc\":{}}}}}",
            e.name,
            e.nc,
            tid,
            (e.start.0 - t0) as f64 / 1e6,
            e.dur.0 as f64 / 1e6,
            e.pc
        )?;
    }
    writeln!(f, "\n]}}")?;
    f.flush()
}
