//! The GpSimd (pool-engine) microcode the runtime ships onto each core: found as libnrt finds
//! `libnrtucode_extisa.so` (an env override, then the SDK library directory), read as data with
//! `neuron-firmware-loader`, replaced by `nrt_set_pool_eng_ucode`, or the project's reference
//! image when there is none; staged through the driver (PROGRAM_ENGINE_NC64 into the core's
//! GpSimd IRAM/DRAM) after every core reset the runtime issues (`docs/firmware.md`).

use crate::drv::Driver;
use crate::status::NrtError;
use neuron_abi::consts::MMAP_RESOURCE_SBUF;
use neuron_abi::{tpb, Errno};
use neuron_firmware_loader::{self as fwl, reference, ImageKind};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The microcode carrier libnrt `dlopen`s.
pub const CARRIER_NAME: &str = "libnrtucode_extisa.so";
/// The SDK library directory it is installed in (libnrt's own directory).
pub const SDK_LIB_DIR: &str = "/opt/aws/neuron/lib";
/// The override: a carrier file, or a directory holding [`CARRIER_NAME`] (project-defined:
/// libnrt has no documented variable for it; it follows the `dlopen` search path).
pub const ENV_UCODE_PATH: &str = "NEURON_EMU_UCODE_PATH";

/// Where the images came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UcodeSource {
    /// The project's reference microcode (no carrier found).
    Reference,
    /// A carrier file.
    Carrier(PathBuf),
    /// `nrt_set_pool_eng_ucode`.
    Override,
}

/// One GpSimd microcode: IRAM and DRAM images with their load addresses in those memories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUcode {
    pub iram: Vec<u8>,
    pub dram: Vec<u8>,
    pub iram_at: u64,
    pub dram_at: u64,
    pub source: UcodeSource,
}

fn invalid(msg: String) -> NrtError {
    NrtError::invalid(msg)
}

/// An image of `len` bytes at `at` fits its memory.
fn fits(what: &str, at: u64, len: usize, size: u64) -> Result<(), NrtError> {
    match at.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(invalid(format!(
            "GpSimd {what} image of {len} bytes at 0x{at:x} does not fit the {size}-byte {what}"
        ))),
    }
}

impl PoolUcode {
    /// The project's reference microcode.
    pub fn reference() -> PoolUcode {
        PoolUcode {
            iram: reference::iram(),
            dram: reference::dram(),
            iram_at: 0,
            dram_at: 0,
            source: UcodeSource::Reference,
        }
    }

    /// `nrt_ucode_info`: raw images loaded at 0 (an IRAM image is required, DRAM may be empty).
    pub fn from_images(iram: &[u8], dram: &[u8]) -> Result<PoolUcode, NrtError> {
        if iram.is_empty() {
            return Err(invalid("the GpSimd IRAM image is empty".into()));
        }
        fits("IRAM", 0, iram.len(), tpb::GPSIMD_IRAM_SIZE)?;
        fits("DRAM", 0, dram.len(), tpb::GPSIMD_DRAM_SIZE)?;
        Ok(PoolUcode {
            iram: iram.to_vec(),
            dram: dram.to_vec(),
            iram_at: 0,
            dram_at: 0,
            source: UcodeSource::Override,
        })
    }

    /// Read a carrier: exactly one IRAM and at most one DRAM image.
    pub fn from_carrier(path: &Path) -> Result<PoolUcode, NrtError> {
        let bad = |why: String| {
            invalid(format!(
                "GpSimd microcode carrier {}: {why}",
                path.display()
            ))
        };
        let f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        let mut data = Vec::new();
        // At most one byte past the loader's limit is read (it then refuses the size).
        f.take(fwl::MAX_CARRIER_BYTES as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| bad(e.to_string()))?;
        let c = fwl::parse(&data).map_err(|e| bad(e.to_string()))?;
        let of = |k: ImageKind| c.images.iter().filter(move |i| i.kind == k);
        let (mut irams, mut drams) = (of(ImageKind::GpSimdIram), of(ImageKind::GpSimdDram));
        let (Some(iram), None) = (irams.next(), irams.next()) else {
            return Err(bad("it must hold exactly one GpSimd IRAM image".into()));
        };
        let dram = drams.next();
        if drams.next().is_some() {
            return Err(bad("it holds more than one GpSimd DRAM image".into()));
        }
        fits(
            "IRAM",
            iram.load_address,
            iram.bytes.len(),
            tpb::GPSIMD_IRAM_SIZE,
        )
        .map_err(|e| bad(e.message))?;
        if let Some(d) = dram {
            fits("DRAM", d.load_address, d.bytes.len(), tpb::GPSIMD_DRAM_SIZE)
                .map_err(|e| bad(e.message))?;
        }
        Ok(PoolUcode {
            iram: iram.bytes.clone(),
            dram: dram.map(|d| d.bytes.clone()).unwrap_or_default(),
            iram_at: iram.load_address,
            dram_at: dram.map_or(0, |d| d.load_address),
            source: UcodeSource::Carrier(path.to_path_buf()),
        })
    }

    /// Find the microcode as `nrt_init` does: [`ENV_UCODE_PATH`] (a file, or a directory
    /// holding the carrier), else [`SDK_LIB_DIR`], else the reference image. A carrier named by
    /// the variable must load (`strict`: an `NRT_INVALID` error, otherwise a warning and the
    /// reference image); one found in the SDK directory that this reader cannot use (AWS's
    /// own, in a format the project does not know) is skipped with a warning.
    pub fn locate(strict: bool) -> Result<PoolUcode, NrtError> {
        if let Some(v) = std::env::var_os(ENV_UCODE_PATH) {
            let p = PathBuf::from(&v);
            let path = if p.is_dir() { p.join(CARRIER_NAME) } else { p };
            let r = if v.is_empty() {
                Err(invalid(format!("{ENV_UCODE_PATH} is set but empty")))
            } else {
                PoolUcode::from_carrier(&path)
            };
            return match r {
                Ok(u) => Ok(u),
                Err(e) if strict => {
                    tracing::error!(target: "NRT", "nrt_init invalid {ENV_UCODE_PATH}: {}", e.message);
                    Err(
                        NrtError::invalid(format!("invalid {ENV_UCODE_PATH}: {}", e.message))
                            .logged(),
                    )
                }
                Err(e) => {
                    tracing::warn!(target: "NRT", "nrt_init ignoring {ENV_UCODE_PATH}: {}; using the reference GpSimd microcode", e.message);
                    Ok(PoolUcode::reference())
                }
            };
        }
        let sdk = Path::new(SDK_LIB_DIR).join(CARRIER_NAME);
        if sdk.is_file() {
            match PoolUcode::from_carrier(&sdk) {
                Ok(u) => return Ok(u),
                Err(e) => {
                    tracing::warn!(target: "NRT", "nrt_init skipping {}: {}; using the reference GpSimd microcode", sdk.display(), e.message)
                }
            }
        }
        Ok(PoolUcode::reference())
    }

    /// SHA-256 of the IRAM and DRAM images, as hex.
    pub fn digests(&self) -> (String, String) {
        (
            reference::hex(&reference::sha256(&self.iram)),
            reference::hex(&reference::sha256(&self.dram)),
        )
    }

    /// One line for logs and errors: where it came from and its digests.
    pub fn describe(&self) -> String {
        let (i, d) = self.digests();
        let from = match &self.source {
            UcodeSource::Reference => "the reference microcode".to_string(),
            UcodeSource::Carrier(p) => p.display().to_string(),
            UcodeSource::Override => "nrt_set_pool_eng_ucode".to_string(),
        };
        format!(
            "GpSimd microcode from {from} (IRAM sha256 {i}, {} bytes; DRAM sha256 {d}, {} bytes)",
            self.iram.len(),
            self.dram.len()
        )
    }

    /// Write the images into core `nc`'s GpSimd IRAM and DRAM (through the driver).
    pub fn stage(&self, drv: &Driver, nc: u32) -> Result<(), Errno> {
        let (base, _) = drv.tpb_resource(nc, MMAP_RESOURCE_SBUF)?;
        for (mem, at, img) in [
            (tpb::GPSIMD_IRAM, self.iram_at, &self.iram),
            (tpb::GPSIMD_DRAM, self.dram_at, &self.dram),
        ] {
            if !img.is_empty() {
                drv.program_engine(nc, base + mem + at, img)?;
            }
        }
        Ok(())
    }
}

/// Where `NRT_TIMEOUT` comes from for a GpSimd exception: the lines the real runtime prints
/// (`users-faults-and-tools.md` §2.2), then what the device reported.
pub fn gpsimd_exception_lines(pc: u32) -> [String; 4] {
    [
        "pool_stdio_queue_consume_all_entries Printing stderr from GPSIMD:".into(),
        "GPSIMD EXCEPTION OCCURRED: ILLEGAL INSTRUCTION".into(),
        "Subtype/Type/Cause: 0x201".into(),
        format!(
            "Exception PC: 0x{:08X}",
            0x8400_0000u32.wrapping_add(pc.wrapping_mul(64))
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NrtStatus;

    #[test]
    fn images_are_bounded() {
        assert!(PoolUcode::from_images(&[], &[1]).is_err());
        let big = vec![0u8; tpb::GPSIMD_IRAM_SIZE as usize + 1];
        assert!(PoolUcode::from_images(&big, &[]).is_err());
        let u = PoolUcode::from_images(&[1, 2], &[]).expect("small");
        assert_eq!(u.source, UcodeSource::Override);
        let r = PoolUcode::reference();
        assert_eq!(r.digests().0, reference::hex(&reference::iram_sha256()));
        assert!(r.describe().contains("reference"));
    }

    #[test]
    fn carriers_need_one_iram_image() {
        let dir = std::env::temp_dir().join(format!("nrt-ucode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let p = dir.join(CARRIER_NAME);
        let (i, d) = (reference::iram(), reference::dram());
        let c = fwl::write::ucode_carrier(&[(1, 0, &i), (2, 0x40, &d)]).expect("carrier");
        std::fs::write(&p, c).expect("write");
        let u = PoolUcode::from_carrier(&p).expect("loads");
        assert_eq!((u.iram, u.dram_at), (i.clone(), 0x40));
        let c = fwl::write::ucode_carrier(&[(2, 0, &d)]).expect("carrier");
        std::fs::write(&p, c).expect("write");
        let e = PoolUcode::from_carrier(&p).expect_err("no IRAM");
        assert!(
            e.message.contains("exactly one GpSimd IRAM"),
            "{}",
            e.message
        );
        let e = PoolUcode::from_carrier(&dir.join("missing.so")).expect_err("missing");
        assert_eq!(e.status, NrtStatus::Invalid);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
