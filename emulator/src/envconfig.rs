//! Which devices an emulator embedded in a process emulates, from the environment:
//! `NEURON_EMU_ARCH` (trn2 | trn1 | inf2, default trn2), `NEURON_EMU_DEVICES` (1..=64,
//! default 1), and a fault plan to inject (`NEURON_EMU_FAULTS` = a plan file,
//! `NEURON_EMU_FAULTS_SEED` = its seed, default 0; `docs/faults.md`), or a whole instance
//! (`NEURON_EMU_INSTANCE` = a preset such as trn2.48xlarge: arch, device count, links and
//! identity; ARCH/DEVICES may be set too only if they agree). A set but invalid value is an
//! error naming the variable, never a silent default.

use neuron_abi::arch::Arch;

/// The environment variable selecting the architecture.
pub const ARCH_ENV: &str = "NEURON_EMU_ARCH";
/// The environment variable selecting the number of devices.
pub const DEVICES_ENV: &str = "NEURON_EMU_DEVICES";
/// The environment variable selecting an instance preset (`instance::Instance::by_name`).
pub const INSTANCE_ENV: &str = "NEURON_EMU_INSTANCE";
/// The environment variable naming a fault plan to inject.
pub const FAULTS_ENV: &str = "NEURON_EMU_FAULTS";
/// The environment variable with the fault plan's seed.
pub const FAULTS_SEED_ENV: &str = "NEURON_EMU_FAULTS_SEED";
/// Most devices one emulator may have (the driver's `MAX_NEURON_DEVICE_COUNT`).
pub const MAX_DEVICES: usize = neuron_abi::consts::MAX_NEURON_DEVICE_COUNT as usize;

/// A validated emulator configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EmuConfig {
    pub arch: Arch,
    pub devices: usize,
    /// The instance preset, if `NEURON_EMU_INSTANCE` chose one (else a generic instance).
    pub instance: Option<crate::instance::Instance>,
    /// The validated fault plan to inject, and its seed.
    pub faults: Option<(neuron_faults::Plan, u64)>,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            arch: Arch::V3Trn2,
            devices: 1,
            instance: None,
            faults: None,
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
        if let Some(s) = get(INSTANCE_ENV).filter(|s| !s.trim().is_empty()) {
            let name = s.trim();
            let inst = crate::instance::Instance::by_name(name).ok_or_else(|| {
                let all: Vec<&str> = crate::instance::Instance::names().collect();
                format!("{INSTANCE_ENV}={s:?}: expected one of {}", all.join(", "))
            })?;
            if get(ARCH_ENV).is_some() && c.arch != inst.arch {
                return Err(format!(
                    "{INSTANCE_ENV}={name} is a {} instance but {ARCH_ENV} says {}",
                    inst.arch.name(),
                    c.arch.name()
                ));
            }
            if get(DEVICES_ENV).is_some() && c.devices != inst.devices {
                return Err(format!(
                    "{INSTANCE_ENV}={name} has {} devices but {DEVICES_ENV} says {}",
                    inst.devices, c.devices
                ));
            }
            c.arch = inst.arch;
            c.devices = inst.devices;
            c.instance = Some(inst);
        }
        let seed = match get(FAULTS_SEED_ENV) {
            Some(s) => s
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{FAULTS_SEED_ENV}={s:?}: expected a non-negative integer"))?,
            None => 0,
        };
        if let Some(path) = get(FAULTS_ENV).filter(|p| !p.trim().is_empty()) {
            let text = neuron_faults::plan::read_plan_file(std::path::Path::new(&path))
                .map_err(|e| format!("{FAULTS_ENV}={path:?}: {e}"))?;
            let limits = neuron_faults::Limits::for_arch(c.arch, c.devices as u32);
            let plan = neuron_faults::parse(&text, &limits)
                .map_err(|e| format!("{FAULTS_ENV}: {}", e.in_file(path.clone())))?;
            c.faults = Some((plan, seed));
        }
        Ok(c)
    }

    /// An emulator of this configuration, with the fault plan (if any) installed on its
    /// devices: each fault on the device its site names.
    pub fn build(&self) -> crate::Emulator {
        let emu = match &self.instance {
            Some(i) => crate::Emulator::with_instance(i),
            None => crate::Emulator::new(self.arch, self.devices),
        };
        if let Some((plan, seed)) = &self.faults {
            let limits = neuron_faults::Limits::for_arch(self.arch, self.devices as u32);
            let all = plan.sample_all(&limits, *seed);
            for d in 0..self.devices {
                let mine: Vec<_> = all
                    .iter()
                    .filter(|i| i.device as usize == d)
                    .cloned()
                    .map(neuron_faults::inject::Injector::new)
                    .collect();
                if !mine.is_empty() {
                    tracing::info!(target: "KDRV", "/dev/neuron{d}: {} fault(s) of {FAULTS_ENV} armed (seed {seed})", mine.len());
                    emu.set_hooks(d, Some(Box::new(neuron_faults::inject::InjectorSet(mine))));
                }
            }
        }
        emu
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
    fn a_fault_plan_is_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("neuron-emu-envfaults-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "[[fault]]\nid = \"a\"\neffect = \"dma-error\"\ndescriptor = 1\n",
        )
        .expect("write");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[[fault]]\nid = \"a\"\neffect = \"dma-error\"\n").expect("write");
        let g = good.display().to_string();
        let c = cfg(&[(FAULTS_ENV, &g), (FAULTS_SEED_ENV, "7")]).expect("valid plan");
        let (plan, seed) = c.faults.clone().expect("plan");
        assert_eq!((plan.faults.len(), seed), (1, 7));
        let _emu = c.build();
        let b = bad.display().to_string();
        let e = cfg(&[(FAULTS_ENV, &b)]).expect_err("no trigger");
        assert!(
            e.contains("bad.toml: line 1") && e.contains("no trigger"),
            "{e}"
        );
        let e = cfg(&[(FAULTS_ENV, &g), (FAULTS_SEED_ENV, "x")]).expect_err("seed");
        assert!(e.starts_with(FAULTS_SEED_ENV), "{e}");
        let e = cfg(&[(FAULTS_ENV, "/nonexistent/plan.toml")]).expect_err("missing");
        assert!(e.contains("/nonexistent/plan.toml"), "{e}");
    }

    #[test]
    fn an_instance_sets_arch_and_devices_and_must_agree_with_them() {
        let c = cfg(&[(INSTANCE_ENV, "trn2.48xlarge")]).expect("preset");
        assert_eq!((c.arch, c.devices), (Arch::V3Trn2, 16));
        assert_eq!(c.build().instance().name, Some("trn2.48xlarge"));
        let c = cfg(&[
            (INSTANCE_ENV, "inf2.48xlarge"),
            (ARCH_ENV, "inf2"),
            (DEVICES_ENV, "12"),
        ])
        .expect("consistent");
        assert_eq!(c.instance.map(|i| i.topology[0].clone()), Some(vec![11, 1]));
        let e = cfg(&[(INSTANCE_ENV, "trn2.48xlarge"), (ARCH_ENV, "trn1")]).expect_err("arch");
        assert!(e.contains(INSTANCE_ENV) && e.contains(ARCH_ENV), "{e}");
        let e = cfg(&[(INSTANCE_ENV, "trn1.2xlarge"), (DEVICES_ENV, "2")]).expect_err("n");
        assert!(e.contains(INSTANCE_ENV) && e.contains(DEVICES_ENV), "{e}");
        let e = cfg(&[(INSTANCE_ENV, "p5.48xlarge")]).expect_err("unknown");
        assert!(
            e.starts_with(INSTANCE_ENV) && e.contains("trn1.32xlarge") && e.contains("inf2.xlarge"),
            "{e}"
        );
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
