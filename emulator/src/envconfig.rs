//! Which devices an emulator embedded in a process emulates, from the environment:
//! `NEURON_EMU_ARCH` (trn2 | trn1 | inf2, default trn2) and `NEURON_EMU_DEVICES` (1..=64,
//! default 1). A set but invalid value is an error naming the variable, never a silent default.

use neuron_abi::arch::Arch;

/// The environment variable selecting the architecture.
pub const ARCH_ENV: &str = "NEURON_EMU_ARCH";
/// The environment variable selecting the number of devices.
pub const DEVICES_ENV: &str = "NEURON_EMU_DEVICES";
/// Most devices one emulator may have (the driver's `MAX_NEURON_DEVICE_COUNT`).
pub const MAX_DEVICES: usize = neuron_abi::consts::MAX_NEURON_DEVICE_COUNT as usize;

/// A validated emulator configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmuConfig {
    pub arch: Arch,
    pub devices: usize,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            arch: Arch::V3Trn2,
            devices: 1,
        }
    }
}

impl EmuConfig {
    /// Read the configuration from the process environment.
    pub fn from_env() -> Result<EmuConfig, String> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read the configuration through `get` (a variable's value, if set).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<EmuConfig, String> {
        let mut c = EmuConfig::default();
        if let Some(s) = get(ARCH_ENV) {
            c.arch = Arch::from_name(s.trim())
                .ok_or_else(|| format!("{ARCH_ENV}={s:?}: expected trn2, trn1 or inf2"))?;
        }
        if let Some(s) = get(DEVICES_ENV) {
            c.devices = s
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_DEVICES).contains(n))
                .ok_or_else(|| {
                    format!("{DEVICES_ENV}={s:?}: expected a number in 1..={MAX_DEVICES}")
                })?;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<EmuConfig, String> {
        EmuConfig::from_lookup(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_and_valid_values() {
        assert_eq!(cfg(&[]), Ok(EmuConfig::default()));
        let c = cfg(&[(ARCH_ENV, "inf2"), (DEVICES_ENV, " 12 ")]).expect("valid");
        assert_eq!((c.arch, c.devices), (Arch::V2Inf2, 12));
    }

    #[test]
    fn invalid_values_name_the_variable() {
        for (k, v) in [
            (ARCH_ENV, "bogus"),
            (DEVICES_ENV, "abc"),
            (DEVICES_ENV, "0"),
            (DEVICES_ENV, "65"),
        ] {
            let e = cfg(&[(k, v)]).expect_err(v);
            assert!(e.starts_with(k) && e.contains(v), "{e}");
        }
    }
}
