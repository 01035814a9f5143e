//! The GpSimd engine's microcode memories (IRAM, DRAM) of one core and the verdict on what they
//! hold: the device identifies the image by SHA-256 and runs GpSimd work only for the project
//! reference microcode; anything else makes GpSimd work fail with an exception naming the digest.

use neuron_abi::tpb;
use neuron_firmware_loader::reference;
use std::sync::OnceLock;

/// Which microcode memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UcodeMem {
    Iram,
    Dram,
}

impl UcodeMem {
    /// The memory's size in bytes (the window range it answers).
    pub fn size(self) -> u64 {
        match self {
            UcodeMem::Iram => tpb::GPSIMD_IRAM_SIZE,
            UcodeMem::Dram => tpb::GPSIMD_DRAM_SIZE,
        }
    }
}

/// The images this device runs natively: (IRAM digest, DRAM digest) pairs.
fn known() -> &'static [([u8; 32], [u8; 32])] {
    static K: OnceLock<Vec<([u8; 32], [u8; 32])>> = OnceLock::new();
    K.get_or_init(|| vec![(reference::iram_sha256(), reference::dram_sha256())])
}

/// One core's microcode memories. Untouched since reset, the core behaves as if the reference
/// image were resident (the state a raw device starts in); once either memory is written, its
/// contents decide.
#[derive(Debug, Clone, Default)]
pub struct UcodeState {
    iram: Vec<u8>,
    dram: Vec<u8>,
    written: bool,
    /// The cached verdict (cleared by every write).
    verdict: Option<Result<(), String>>,
}

impl UcodeState {
    fn mem(&self, m: UcodeMem) -> &Vec<u8> {
        match m {
            UcodeMem::Iram => &self.iram,
            UcodeMem::Dram => &self.dram,
        }
    }

    /// Store `data` at `off`; the caller (the address map) keeps `off + len` inside the memory.
    pub fn write(&mut self, m: UcodeMem, off: u64, data: &[u8]) -> Result<(), &'static str> {
        let end = off
            .checked_add(data.len() as u64)
            .filter(|e| *e <= m.size())
            .ok_or("past the end of the GpSimd microcode memory")?;
        let v = match m {
            UcodeMem::Iram => &mut self.iram,
            UcodeMem::Dram => &mut self.dram,
        };
        if v.len() < end as usize {
            v.resize(end as usize, 0);
        }
        v[off as usize..end as usize].copy_from_slice(data);
        self.written = true;
        self.verdict = None;
        Ok(())
    }

    /// Read back; bytes never written read as 0.
    pub fn read(&self, m: UcodeMem, off: u64, buf: &mut [u8]) {
        let v = self.mem(m);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = usize::try_from(off)
                .ok()
                .and_then(|o| o.checked_add(i))
                .and_then(|k| v.get(k))
                .copied()
                .unwrap_or(0);
        }
    }

    /// SHA-256 of the IRAM and DRAM contents (from 0 to the last byte written).
    pub fn digests(&self) -> ([u8; 32], [u8; 32]) {
        (reference::sha256(&self.iram), reference::sha256(&self.dram))
    }

    /// Whether the resident image is one this device runs; the error names the digests.
    pub fn check(&mut self) -> Result<(), String> {
        if !self.written {
            return Ok(());
        }
        if let Some(v) = &self.verdict {
            return v.clone();
        }
        let (i, d) = self.digests();
        let v = if known().contains(&(i, d)) {
            Ok(())
        } else {
            Err(format!(
                "GPSIMD EXCEPTION: unknown microcode image (IRAM sha256 {} over {} bytes, DRAM sha256 {} over {} bytes); this device runs GpSimd work only for the project reference microcode (IRAM sha256 {})",
                reference::hex(&i),
                self.iram.len(),
                reference::hex(&d),
                self.dram.len(),
                reference::hex(&reference::iram_sha256())
            ))
        };
        self.verdict = Some(v.clone());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_reference_and_unknown_images() {
        let mut u = UcodeState::default();
        assert_eq!(
            u.check(),
            Ok(()),
            "untouched: the reference image is resident"
        );
        u.write(UcodeMem::Iram, 0, &reference::iram())
            .expect("iram");
        assert!(u.check().is_err(), "IRAM alone is not the reference pair");
        u.write(UcodeMem::Dram, 0, &reference::dram())
            .expect("dram");
        assert_eq!(u.check(), Ok(()));
        u.write(UcodeMem::Iram, 8, &[0xff]).expect("patch");
        let e = u.check().expect_err("patched image");
        let (i, _) = u.digests();
        assert!(e.contains(&reference::hex(&i)), "{e}");
        let mut b = [9u8; 4];
        u.read(UcodeMem::Iram, 7, &mut b);
        assert_eq!(b[1], 0xff);
        u.read(UcodeMem::Dram, u64::MAX, &mut b);
        assert_eq!(b, [0; 4]);
        assert!(u
            .write(UcodeMem::Dram, UcodeMem::Dram.size(), &[1])
            .is_err());
    }
}
