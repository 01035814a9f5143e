//! Notification-queue entry format — **project-defined, not from the driver**.
//!
//! The driver creates notification queues (NQs), programs their base/size into the hardware and
//! lets user space poll them, but it never defines the entry format or size (driver-abi.md §4).
//! The only driver hint is NOTIFICATIONS_QUEUE_INFO's `head` / `phase_bit`, suggesting entries
//! carry a phase bit that flips on every wrap **(inferred)**.
//!
//! This module fixes the format used between this project's device model and runtime:
//! 16-byte entries ([`NotificationEntry`]), written by the device at the queue's write index,
//! whose phase bit is the wrap parity — the consumer tracks its head and the expected phase,
//! and an entry whose phase differs from the expected one has not been written yet.
//!
//! `word0` layout:
//!
//! | bits  | field |
//! |-------|-------|
//! | 31    | phase |
//! | 30:28 | engine (0..=4, the compute engine of the NC; 0..=7 representable) |
//! | 27:24 | kind ([`NotifyKind`]) |
//! | 23:0  | value (notify id for NOTIFY, error code `ERR_*` for ERROR, ...) |

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one notification entry in bytes (project-defined).
pub const ENTRY_SIZE: usize = 16;

/// `word0` bit 31: phase.
pub const WORD0_PHASE: u32 = 1 << 31;
/// `word0` engine field shift (bits 30:28).
pub const WORD0_ENGINE_SHIFT: u32 = 28;
/// `word0` engine field mask (after shifting).
pub const WORD0_ENGINE_MASK: u32 = 0x7;
/// `word0` kind field shift (bits 27:24).
pub const WORD0_KIND_SHIFT: u32 = 24;
/// `word0` kind field mask (after shifting).
pub const WORD0_KIND_MASK: u32 = 0xF;
/// `word0` value field mask (bits 23:0).
pub const WORD0_VALUE_MASK: u32 = 0x00FF_FFFF;

/// Device error code in ERROR entries: out-of-bounds SBUF / PSUM / HBM access (project-defined).
pub const ERR_OOB: u32 = 1;
/// Device error code: undecodable instruction.
pub const ERR_BAD_INSTR: u32 = 2;
/// Device error code: bad descriptor / DMA abort.
pub const ERR_DMA_ABORT: u32 = 3;
/// Device error code: numerical error (NaN).
pub const ERR_NUMERICAL: u32 = 4;
/// Device error code: SRAM uncorrectable ECC error.
pub const ERR_SRAM_UE: u32 = 5;
/// Device error code: HBM uncorrectable ECC error the firmware cannot repair (repair state 2).
pub const ERR_HBM_UE: u32 = 6;
/// Device error code: HBM uncorrectable ECC error pending repair (repair state 1).
pub const ERR_HBM_UE_REPAIRABLE: u32 = 7;
/// Device error code: the GpSimd engine raised an exception (its microcode is not one the
/// device runs; `docs/firmware.md`).
pub const ERR_GPSIMD_EXCEPTION: u32 = 8;

/// What an entry reports (project-defined). Open: unknown kinds decode to [`NotifyKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    /// 1: an explicit NOTIFY instruction; value = notify id.
    Notify,
    /// 2: end of execution of the engine's instruction stream.
    End,
    /// 3: device error; value = `ERR_*` code.
    Error,
    /// 4: DMA trace.
    DmaTrace,
    /// Any other 4-bit kind value (0, 5..=15).
    Other(u8),
}

impl NotifyKind {
    /// The 4-bit wire value (an `Other` value is truncated to 4 bits).
    pub const fn bits(self) -> u8 {
        match self {
            NotifyKind::Notify => 1,
            NotifyKind::End => 2,
            NotifyKind::Error => 3,
            NotifyKind::DmaTrace => 4,
            NotifyKind::Other(v) => v & WORD0_KIND_MASK as u8,
        }
    }

    /// Decode a wire value (only the low 4 bits are used).
    pub const fn from_bits(v: u8) -> NotifyKind {
        match v & WORD0_KIND_MASK as u8 {
            1 => NotifyKind::Notify,
            2 => NotifyKind::End,
            3 => NotifyKind::Error,
            4 => NotifyKind::DmaTrace,
            o => NotifyKind::Other(o),
        }
    }
}

/// One 16-byte notification-queue entry (project-defined; see the module docs).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationEntry {
    /// Phase (31), engine (30:28), kind (27:24), value (23:0).
    pub word0: u32,
    /// Program counter (instruction index / address) of the reporting instruction.
    pub pc: u32,
    /// Device timestamp in picoseconds.
    pub timestamp_ps: u64,
}

impl NotificationEntry {
    /// Build an entry. `engine` is truncated to 3 bits and `value` to 24 bits.
    pub const fn new(
        kind: NotifyKind,
        engine: u8,
        value: u32,
        pc: u32,
        timestamp_ps: u64,
        phase: bool,
    ) -> Self {
        let word0 = (if phase { WORD0_PHASE } else { 0 })
            | ((engine as u32 & WORD0_ENGINE_MASK) << WORD0_ENGINE_SHIFT)
            | ((kind.bits() as u32) << WORD0_KIND_SHIFT)
            | (value & WORD0_VALUE_MASK);
        NotificationEntry {
            word0,
            pc,
            timestamp_ps,
        }
    }

    /// Phase bit.
    pub const fn phase(&self) -> bool {
        self.word0 & WORD0_PHASE != 0
    }

    /// Engine index (0..=7; the project uses 0..=4).
    pub const fn engine(&self) -> u8 {
        ((self.word0 >> WORD0_ENGINE_SHIFT) & WORD0_ENGINE_MASK) as u8
    }

    /// Entry kind.
    pub const fn kind(&self) -> NotifyKind {
        NotifyKind::from_bits(((self.word0 >> WORD0_KIND_SHIFT) & WORD0_KIND_MASK) as u8)
    }

    /// 24-bit value (notify id or error code).
    pub const fn value(&self) -> u32 {
        self.word0 & WORD0_VALUE_MASK
    }

    /// Program counter.
    pub const fn pc(&self) -> u32 {
        self.pc
    }

    /// Timestamp in picoseconds.
    pub const fn timestamp_ps(&self) -> u64 {
        self.timestamp_ps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layout() {
        assert_eq!(size_of::<NotificationEntry>(), 16);
        assert_eq!(ENTRY_SIZE, 16);
        assert_eq!(offset_of!(NotificationEntry, word0), 0);
        assert_eq!(offset_of!(NotificationEntry, pc), 4);
        assert_eq!(offset_of!(NotificationEntry, timestamp_ps), 8);
    }

    #[test]
    fn round_trip_every_field() {
        let kinds = [
            NotifyKind::Notify,
            NotifyKind::End,
            NotifyKind::Error,
            NotifyKind::DmaTrace,
            NotifyKind::Other(0),
            NotifyKind::Other(9),
            NotifyKind::Other(15),
        ];
        for kind in kinds {
            for engine in 0..8u8 {
                for phase in [false, true] {
                    for value in [0, 1, 0x1234, WORD0_VALUE_MASK] {
                        let e = NotificationEntry::new(
                            kind,
                            engine,
                            value,
                            0xdead_beef,
                            123_456_789_000,
                            phase,
                        );
                        assert_eq!(e.kind(), kind);
                        assert_eq!(e.engine(), engine);
                        assert_eq!(e.phase(), phase);
                        assert_eq!(e.value(), value);
                        assert_eq!(e.pc(), 0xdead_beef);
                        assert_eq!(e.timestamp_ps(), 123_456_789_000);
                        assert_eq!(NotificationEntry::read_from_bytes(e.as_bytes()), Ok(e));
                    }
                }
            }
        }
    }

    #[test]
    fn word0_encoding() {
        let e = NotificationEntry::new(NotifyKind::Error, 4, ERR_DMA_ABORT, 7, 8, true);
        assert_eq!(e.word0, 0x8000_0000 | 4 << 28 | 3 << 24 | 3);
        // Out-of-range inputs are truncated, not rejected.
        let e = NotificationEntry::new(NotifyKind::Notify, 9, 0x1FF_FFFF, 0, 0, false);
        assert_eq!(e.engine(), 1);
        assert_eq!(e.value(), 0xFF_FFFF);
        assert_eq!(e.kind(), NotifyKind::Notify);
        assert_eq!(NotifyKind::from_bits(1), NotifyKind::Notify);
        assert_eq!(NotifyKind::from_bits(0x12), NotifyKind::End);
        assert_eq!(NotifyKind::Other(0x1F).bits(), 0xF);
    }

    #[test]
    fn error_codes() {
        assert_eq!(
            [
                ERR_OOB,
                ERR_BAD_INSTR,
                ERR_DMA_ABORT,
                ERR_NUMERICAL,
                ERR_SRAM_UE,
                ERR_HBM_UE
            ],
            [1, 2, 3, 4, 5, 6]
        );
    }
}
