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

/// Log components (the prefix before `:` in each line) and the env suffix that sets each one's
/// level: `NEURON_RT_LOG_LEVEL_<COMPONENT>`. KDRV is this project's fake driver.
pub const COMPONENTS: [&str; 5] = ["NRT", "TDRV", "NMGR", "NEFF", "KDRV"];

fn parse_level(v: &str) -> Option<Option<Level>> {
    Some(match v.trim().to_ascii_uppercase().as_str() {
        "QUIET" | "OFF" => None,
        "TRACE" => Some(Level::TRACE),
        "DEBUG" => Some(Level::DEBUG),
        "INFO" => Some(Level::INFO),
        "WARN" | "WARNING" => Some(Level::WARN),
        "ERROR" => Some(Level::ERROR),
        _ => return None,
    })
}

/// The level from `NEURON_RT_LOG_LEVEL` (ERROR by default or when unparsable; `QUIET` turns
/// logging off).
pub fn env_level() -> Option<Level> {
    std::env::var("NEURON_RT_LOG_LEVEL")
        .ok()
        .and_then(|v| parse_level(&v))
        .unwrap_or(Some(Level::ERROR))
}

/// `NEURON_RT_LOG_LEVEL` and the per-component levels: a set value that names no level is an
/// error naming the variable (`nrt_init` refuses it; the tools fall back to ERROR).
pub fn check_env() -> Result<(), String> {
    let vars = std::iter::once("NEURON_RT_LOG_LEVEL".to_string()).chain(
        COMPONENTS
            .iter()
            .map(|c| format!("NEURON_RT_LOG_LEVEL_{c}")),
    );
    for var in vars {
        if let Ok(v) = std::env::var(&var) {
            if parse_level(&v).is_none() {
                return Err(format!(
                    "invalid {var}={v:?} (ERROR, WARN, INFO, DEBUG, TRACE or QUIET expected)"
                ));
            }
        }
    }
    Ok(())
}

/// Filter directives: the base level plus per-component overrides, e.g. `error,TDRV=debug`.
pub fn env_directives(verbose: u8) -> String {
    let mut base = env_level();
    if verbose > 0 {
        let v = if verbose > 1 {
            Level::DEBUG
        } else {
            Level::INFO
        };
        base = Some(base.map_or(v, |l| l.max(v)));
    }
    let lvl =
        |l: Option<Level>| l.map_or("off".to_string(), |l| l.to_string().to_ascii_lowercase());
    let mut d = lvl(base);
    for c in COMPONENTS {
        if let Some(l) = std::env::var(format!("NEURON_RT_LOG_LEVEL_{c}"))
            .ok()
            .and_then(|v| parse_level(&v))
        {
            d.push_str(&format!(",{c}={}", lvl(l)));
        }
    }
    d
}

/// Install the subscriber (once per process). `verbose` raises the base level to at least
/// INFO (`-v`) or DEBUG (`-vv`).
pub fn init(verbose: u8) {
    let filter = tracing_subscriber::EnvFilter::new(env_directives(verbose));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(NrtFormat)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("warning"), Some(Some(Level::WARN)));
        assert_eq!(parse_level("QUIET"), Some(None));
        assert_eq!(parse_level("loud"), None);
    }
}
