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
    /// The GpSimd microcode to stage (`firmware`): `nrt_set_pool_eng_ucode`'s images, or the
    /// carrier found from `NEURON_EMU_UCODE_PATH` / the SDK library directory; none: the
    /// reference microcode.
    pub pool_ucode: Option<std::sync::Arc<crate::firmware::PoolUcode>>,
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
            pool_ucode: None,
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
    /// Read the environment; invalid values keep the default and are reported in the log
    /// (the tools' behaviour; `nrt_init` uses [`Config::from_env_checked`]).
    pub fn from_env() -> Config {
        Config::read_env(false).unwrap_or_default()
    }

    /// Read the environment as `nrt_init` does: a set but invalid value is an `NRT_INVALID`
    /// error naming the variable (and logged), never replaced by the default.
    pub fn from_env_checked() -> Result<Config, crate::NrtError> {
        crate::logging::check_env().map_err(|msg| {
            tracing::error!(target: "NRT", "nrt_init {msg}");
            crate::NrtError::invalid(msg).logged()
        })?;
        Config::read_env(true)
    }

    fn read_env(strict: bool) -> Result<Config, crate::NrtError> {
        let mut c = Config::default();
        let bad = |var: &str, v: &str, want: &str| -> Result<(), crate::NrtError> {
            let msg = format!("invalid {var}={v:?} ({want} expected)");
            if strict {
                tracing::error!(target: "NRT", "nrt_init {msg}");
                Err(crate::NrtError::invalid(msg).logged())
            } else {
                tracing::warn!(target: "NRT", "nrt_init ignoring {msg}");
                Ok(())
            }
        };
        if let Ok(v) = std::env::var("NEURON_RT_EXEC_TIMEOUT") {
            match parse_seconds(&v) {
                Some(d) => c.exec_timeout = d,
                None => bad("NEURON_RT_EXEC_TIMEOUT", &v, "a positive number of seconds")?,
            }
        }
        if let Ok(v) = std::env::var("NEURON_RT_VALIDATE_HASH") {
            match parse_bool(&v) {
                Some(b) => c.validate_hash = b,
                None => bad("NEURON_RT_VALIDATE_HASH", &v, "0 or 1")?,
            }
        }
        if let Ok(v) = std::env::var("NEURON_EMU_HW_ERROR_CODES") {
            match v.trim().to_ascii_lowercase().as_str() {
                "split" => c.hw_errors = HwErrorCodes::Split,
                "timeout" => c.hw_errors = HwErrorCodes::Timeout,
                _ => bad("NEURON_EMU_HW_ERROR_CODES", &v, "split or timeout")?,
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
        let u = crate::firmware::PoolUcode::locate(strict)?;
        if u.source != crate::firmware::UcodeSource::Reference {
            c.pool_ucode = Some(std::sync::Arc::new(u));
        }
        Ok(c)
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

    #[test]
    fn nrt_init_refuses_bad_values_the_tools_ignore() {
        std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "soon");
        let e = Config::from_env_checked().expect_err("refused");
        assert_eq!(e.status, crate::NrtStatus::Invalid);
        assert!(
            e.message.contains("NEURON_RT_EXEC_TIMEOUT"),
            "{}",
            e.message
        );
        assert_eq!(
            Config::from_env(),
            Config::default(),
            "tools keep the default"
        );
        std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "2.5");
        assert_eq!(
            Config::from_env_checked().expect("valid").exec_timeout,
            Duration::from_millis(2500)
        );
        std::env::remove_var("NEURON_RT_EXEC_TIMEOUT");
    }
}
