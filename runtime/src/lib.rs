//! A runtime modelled on libnrt. It reaches the device only through
//! [`neuron_abi::DeviceFile`]: real syscalls on `/dev/neuronN` ([`sys::SysDevice`]) or any
//! other implementation of the same ABI (the emulator's in-process file). It never depends on
//! the emulator or the device model.

pub mod api;
pub mod config;
pub mod drv;
pub mod firmware;
pub mod logging;
mod mapped;
pub mod model;
pub mod nds;
mod poll;
pub mod profile;
pub mod prologue;
mod rawbuf;
pub mod real;
pub mod status;
pub mod sys;
pub mod trigger;
pub mod waitcancel;

pub use config::{Config, HwErrorCodes};
pub use model::{ExecOutput, Model, TensorInfo};
pub use status::{NrtError, NrtStatus};
pub use waitcancel::WaitCancel;

use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use std::sync::Arc;

/// One initialised runtime bound to one device.
#[derive(Debug)]
pub struct Runtime {
    drv: drv::Driver,
    device_index: u32,
    arch: Arch,
    config: Config,
    /// This process's datastore page on the device (none if the driver refused it).
    nds: Option<Arc<nds::Datastore>>,
}

impl Runtime {
    /// Bind to an open device and check that the driver is one this runtime can use.
    pub fn new(
        dev: Arc<dyn DeviceFile>,
        device_index: u32,
        config: Config,
    ) -> Result<Runtime, NrtError> {
        let ucode = config
            .pool_ucode
            .clone()
            .unwrap_or_else(|| Arc::new(firmware::PoolUcode::reference()));
        tracing::debug!(target: "NRT", "nrt_init {}", ucode.describe());
        let drv = drv::Driver::with_ucode(dev, ucode);
        let info = drv.basic_info().map_err(|e| {
            NrtError::new(NrtStatus::Failure, format!("DEVICE_BASIC_INFO failed: {e}"))
        })?;
        let arch = match info.architecture {
            2 => Arch::V2Trn1,
            3 => Arch::V3Trn2,
            a => {
                return Err(NrtError::new(
                    NrtStatus::Failure,
                    format!("unsupported device architecture {a}"),
                ))
            }
        };
        let cv = drv.compatible_version().map_err(|e| {
            NrtError::new(
                NrtStatus::Failure,
                format!("COMPATIBLE_VERSION failed: {e}"),
            )
        })?;
        tracing::debug!(target: "TDRV", "driver compatibility range {}..{}", cv.min, cv.max);
        // The counters page the driver's sysfs tree and the tools read (`nds`). A driver that
        // refuses it leaves the runtime working, uncounted.
        let nds = match nds::Datastore::open(&drv.dev, config.process_tag.as_deref()) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(target: "NRT", "nrt_init: no datastore on device {device_index} ({e}); the tools will not see this process's counters");
                None
            }
        };
        Ok(Runtime {
            drv,
            device_index,
            arch,
            config,
            nds,
        })
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The typed driver calls this runtime issues.
    pub fn driver(&self) -> &drv::Driver {
        &self.drv
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This process's datastore on the device.
    pub fn datastore(&self) -> Option<&Arc<nds::Datastore>> {
        self.nds.as_ref()
    }

    /// Place and translate a real NEFF as loading it on core `nc` would, returning the loaded
    /// programs (numbered like AWS's profiler). Allocations are released again.
    pub fn load_image(&self, neff: &[u8], nc: u32) -> Result<Vec<real::LoadedProgram>, NrtError> {
        model::load_image(&self.drv, neff, nc, self.config.validate_hash)
    }

    /// Load a NEFF onto NeuronCore `nc` of this device.
    pub fn load(&self, neff: &[u8], nc: u32) -> Result<Model, NrtError> {
        self.load_from(model::Source::Bytes(neff), nc)
    }

    /// [`Runtime::load`] of a NEFF parsed already (with the caller's parse options; the
    /// configuration's `validate_hash` is the parse's business then): the same driver calls
    /// and model, without inflating and unpacking the container again. A caller loading one
    /// NEFF many times (a fault campaign's experiments) parses it once.
    pub fn load_neff(&self, neff: &neuron_neff::Neff, nc: u32) -> Result<Model, NrtError> {
        self.load_from(model::Source::Parsed(neff), nc)
    }

    fn load_from(&self, src: model::Source<'_>, nc: u32) -> Result<Model, NrtError> {
        if nc >= self.arch.nc_count() {
            return Err(NrtError::new(
                NrtStatus::LoadNotEnoughNc,
                format!(
                    "NC {nc} does not exist (device has {})",
                    self.arch.nc_count()
                ),
            ));
        }
        let opts = model::LoadOptions {
            validate_hash: self.config.validate_hash,
            exec_timeout: self.config.exec_timeout,
            device_index: self.device_index,
            hw_errors: self.config.hw_errors,
            arch: self.arch,
        };
        let r = model::load(&self.drv, src, nc, opts);
        if let Some(ds) = &self.nds {
            match r {
                Ok(mut m) => {
                    let uuid = match src {
                        model::Source::Bytes(b) => {
                            neuron_neff::NeffHeader::decode(b).map_or([0; 16], |h| h.uuid)
                        }
                        model::Source::Parsed(n) => n.header().uuid,
                    };
                    let entry = ds.model_loaded(m.name(), uuid, nc, m.nc_count(), m.usage());
                    m.attach_datastore(entry);
                    return Ok(m);
                }
                Err(e) => {
                    ds.load_failed(nc, e.status);
                    return Err(e);
                }
            }
        }
        r
    }
}
