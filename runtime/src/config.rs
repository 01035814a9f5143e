//! Runtime configuration from the environment (`nrt-api-and-neff.md` §1.6).

use std::time::Duration;

/// Settings read at init / load.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `NEURON_RT_EXEC_TIMEOUT` (seconds; fractions accepted). Default 30 s.
    pub exec_timeout: Duration,
    /// `NEURON_RT_VALIDATE_HASH` (default off, as in the real runtime).
    pub validate_hash: bool,
    /// How hardware errors are reported (`NEURON_EMU_HW_ERROR_CODES`).
    pub hw_errors: HwErrorCodes,
    /// `NEURON_PROCESS_TAG` (at most 255 characters): the tools' name for this process
    /// (default: its pid).
    pub process_tag: Option<String>,
}

/// Which runtime's error codes hardware errors get (`users-faults-and-tools.md` §2.1: the
/// 1201-1205 split arrived in Neuron Runtime 2.23.110.0; before it every hardware error was
/// `NRT_TIMEOUT`, an SRAM error `NRT_EXEC_COMPLETED_WITH_ERR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HwErrorCodes {
    /// 2.23.110.0 and later: the specific codes (default; `NEURON_EMU_HW_ERROR_CODES=split`).
    #[default]
    Split,
    /// Before 2.23.110.0 (`NEURON_EMU_HW_ERROR_CODES=timeout`).
    Timeout,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            exec_timeout: Duration::from_secs(30),
            validate_hash: false,
            hw_errors: HwErrorCodes::Split,
            process_tag: None,
        }
    }
}

/// Parse a boolean env value the way the runtime's docs use them (1/0, true/false, yes/no).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// Parse a timeout in seconds; non-positive or unparsable values are rejected.
pub fn parse_seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.trim().parse().ok()?;
    (s.is_finite() && s > 0.0 && s < 1e9).then(|| Duration::from_secs_f64(s))
}

impl Config {
    /// Read the environment; invalid values keep the default and are reported in the log.
    pub fn from_env() -> Config {
        let mut c = Config::default();
        if let Ok(v) = std::env::var("NEURON_RT_EXEC_TIMEOUT") {
            match parse_seconds(&v) {
                Some(d) => c.exec_timeout = d,
                None => {
                    tracing::warn!(target: "NRT", "nrt_init ignoring invalid NEURON_RT_EXEC_TIMEOUT={v:?} (seconds expected)")
                }
            }
        }
        if let Ok(v) = std::env::var("NEURON_RT_VALIDATE_HASH") {
            match parse_bool(&v) {
                Some(b) => c.validate_hash = b,
                None => {
                    tracing::warn!(target: "NRT", "nrt_init ignoring invalid NEURON_RT_VALIDATE_HASH={v:?}")
                }
            }
        }
        if let Ok(v) = std::env::var("NEURON_EMU_HW_ERROR_CODES") {
            match v.trim().to_ascii_lowercase().as_str() {
                "split" => c.hw_errors = HwErrorCodes::Split,
                "timeout" => c.hw_errors = HwErrorCodes::Timeout,
                _ => {
                    tracing::warn!(target: "NRT", "nrt_init ignoring invalid NEURON_EMU_HW_ERROR_CODES={v:?} (split or timeout expected)")
                }
            }
        }
        if let Ok(v) = std::env::var("NEURON_PROCESS_TAG") {
            match parse_tag(&v) {
                Some(t) => c.process_tag = Some(t),
                None => {
                    tracing::warn!(target: "NRT", "nrt_init ignoring invalid NEURON_PROCESS_TAG (1 to 255 characters, no NUL expected)")
                }
            }
        }
        c
    }
}

/// A `NEURON_PROCESS_TAG` value: 1 to 255 characters, no NUL.
pub fn parse_tag(v: &str) -> Option<String> {
    let n = v.chars().count();
    (n > 0 && n <= 255 && v.len() <= 255 && !v.contains('\0')).then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        assert_eq!(parse_seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_seconds("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), None);
        assert_eq!(parse_seconds("-1"), None);
        assert_eq!(parse_seconds("abc"), None);
        assert_eq!(parse_bool("TRUE"), Some(true));
        assert_eq!(parse_bool("0"), Some(false));
        assert_eq!(parse_bool("maybe"), None);
        assert_eq!(parse_tag("train-1"), Some("train-1".into()));
        assert_eq!(parse_tag(""), None);
        assert_eq!(parse_tag(&"x".repeat(256)), None);
        assert_eq!(parse_tag("a\0b"), None);
    }
}
