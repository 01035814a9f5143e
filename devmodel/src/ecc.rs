//! The firmware's memory-error counters, as the driver reads them from misc RAM for sysfs
//! (`neuron<N>/stats/hardware/{sram_ecc_uncorrected, mem_ecc_uncorrected,
//! mem_ecc_repairable_uncorrected}`, `users-faults-and-tools.md` §2.4): only the low 16 bits of
//! a count are reported, and the HBM count is split by the 2-bit repair state (1 = pending
//! repair: repairable; 2 = repair failed: unrepairable). They survive core resets; only a new
//! device (a driver reload) clears them.

use crate::fault::FaultKind;

/// HBM repair state: nothing pending.
pub const REPAIR_NONE: u8 = 0;
/// HBM repair state: an error is pending repair.
pub const REPAIR_PENDING: u8 = 1;
/// HBM repair state: a repair failed.
pub const REPAIR_FAILED: u8 = 2;

/// The counters of one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EccCounters {
    /// Uncorrectable SRAM (SBUF/PSUM, NC memory) errors.
    pub sram_uncorrected: u32,
    /// Uncorrectable HBM errors, all repair states.
    pub hbm_uncorrected: u32,
    /// The HBM repair state (2 bits).
    pub repair_state: u8,
}

impl EccCounters {
    /// Count the error a fault reports, if it is a memory error.
    pub fn record(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::SramUe => self.sram_uncorrected = self.sram_uncorrected.wrapping_add(1),
            FaultKind::HbmUe { repairable } => {
                self.hbm_uncorrected = self.hbm_uncorrected.wrapping_add(1);
                // A failed repair is final; a repairable error leaves it pending otherwise.
                if !repairable {
                    self.repair_state = REPAIR_FAILED;
                } else if self.repair_state == REPAIR_NONE {
                    self.repair_state = REPAIR_PENDING;
                }
            }
            _ => {}
        }
    }

    /// `stats/hardware/sram_ecc_uncorrected`.
    pub fn sysfs_sram_ecc_uncorrected(&self) -> u16 {
        self.sram_uncorrected as u16
    }

    /// `stats/hardware/mem_ecc_uncorrected`: the HBM count when the repair failed (or with
    /// legacy state 0), else 0.
    pub fn sysfs_mem_ecc_uncorrected(&self) -> u16 {
        match self.repair_state {
            REPAIR_PENDING => 0,
            _ => self.hbm_uncorrected as u16,
        }
    }

    /// `stats/hardware/mem_ecc_repairable_uncorrected`: the HBM count while a repair is
    /// pending, else 0.
    pub fn sysfs_mem_ecc_repairable_uncorrected(&self) -> u16 {
        match self.repair_state {
            REPAIR_PENDING => self.hbm_uncorrected as u16,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_as_sysfs_reports_them() {
        let mut c = EccCounters::default();
        c.record(FaultKind::DmaAbort);
        assert_eq!(c, EccCounters::default(), "not a memory error");
        c.record(FaultKind::HbmUe { repairable: true });
        c.record(FaultKind::HbmUe { repairable: true });
        assert_eq!(c.repair_state, REPAIR_PENDING);
        assert_eq!(
            (
                c.sysfs_mem_ecc_repairable_uncorrected(),
                c.sysfs_mem_ecc_uncorrected()
            ),
            (2, 0)
        );
        c.record(FaultKind::HbmUe { repairable: false });
        assert_eq!(c.repair_state, REPAIR_FAILED);
        assert_eq!(
            (
                c.sysfs_mem_ecc_repairable_uncorrected(),
                c.sysfs_mem_ecc_uncorrected()
            ),
            (0, 3)
        );
        for _ in 0..0x1_0001 {
            c.record(FaultKind::SramUe);
        }
        assert_eq!(c.sram_uncorrected, 0x1_0001);
        assert_eq!(c.sysfs_sram_ecc_uncorrected(), 1, "only the low 16 bits");
    }
}
