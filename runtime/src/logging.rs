//! Log lines in the real runtime's shape: `LEVEL  COMPONENT:function message`.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

struct NrtFormat;

impl<S, N> FormatEvent<S, N> for NrtFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let m = event.metadata();
        let target = m.target().rsplit("::").next().unwrap_or(m.target());
        write!(w, "{:<5} {}:", m.level(), target)?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// The level from `NEURON_RT_LOG_LEVEL` (ERROR by default; `QUIET` turns logging off).
pub fn env_level() -> Option<Level> {
    match std::env::var("NEURON_RT_LOG_LEVEL")
        .unwrap_or_default()
        .to_ascii_uppercase()
        .as_str()
    {
        "QUIET" => None,
        "TRACE" => Some(Level::TRACE),
        "DEBUG" => Some(Level::DEBUG),
        "INFO" => Some(Level::INFO),
        "WARN" | "WARNING" => Some(Level::WARN),
        _ => Some(Level::ERROR),
    }
}

/// Install the subscriber. `verbose` raises the level to at least INFO.
pub fn init(verbose: u8) {
    let mut level = env_level();
    if verbose > 0 {
        let v = if verbose > 1 {
            Level::DEBUG
        } else {
            Level::INFO
        };
        level = Some(level.map_or(v, |l| l.max(v)));
    }
    let Some(level) = level else { return };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .event_format(NrtFormat)
        .try_init();
}
