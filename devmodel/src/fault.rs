//! Faults the device detects, reported the way hardware does: an ERROR notification naming
//! the engine, pc and opcode, and a stuck engine.

use neuron_isa::Engine;
use std::fmt;

/// What went wrong (the error code posted in the ERROR notification is `code()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// SBUF/PSUM/memory access outside the addressable range.
    OutOfBounds,
    /// A word that does not decode, or an instruction with inconsistent operands.
    BadInstruction,
    /// A DMA descriptor the engine cannot execute (bad address, length mismatch, overrun).
    DmaAbort,
    /// An engine produced a NaN (`users-faults-and-tools.md` §2.1: code 1003).
    Numerical,
    /// An uncorrectable error in on-chip SRAM (SBUF/PSUM parity, NC memory).
    SramUe,
    /// An uncorrectable HBM error; `repairable` is the firmware's repair state 1 (pending
    /// repair) as opposed to 2 (repair failed).
    HbmUe { repairable: bool },
    /// The GpSimd engine raised an exception: its microcode is not an image the device runs.
    GpsimdException,
}

impl FaultKind {
    /// Error codes carried in ERROR notification entries (`neuron_abi::notify::ERR_*`).
    pub fn code(self) -> u32 {
        use neuron_abi::notify as n;
        match self {
            FaultKind::OutOfBounds => n::ERR_OOB,
            FaultKind::BadInstruction => n::ERR_BAD_INSTR,
            FaultKind::DmaAbort => n::ERR_DMA_ABORT,
            FaultKind::Numerical => n::ERR_NUMERICAL,
            FaultKind::SramUe => n::ERR_SRAM_UE,
            FaultKind::HbmUe { repairable: false } => n::ERR_HBM_UE,
            FaultKind::HbmUe { repairable: true } => n::ERR_HBM_UE_REPAIRABLE,
            FaultKind::GpsimdException => n::ERR_GPSIMD_EXCEPTION,
        }
    }
}

/// One fault, with where it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub nc: usize,
    /// The compute engine, or None for a DMA engine fault.
    pub engine: Option<Engine>,
    /// Word index in the engine's loaded program (or descriptor index for DMA).
    pub pc: u32,
    pub opcode: u8,
    pub detail: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.engine {
            Some(e) => write!(
                f,
                "nc{} {} pc={} opcode=0x{:02x}: {:?}: {}",
                self.nc, e, self.pc, self.opcode, self.kind, self.detail
            ),
            None => write!(
                f,
                "nc{} DMA desc={}: {:?}: {}",
                self.nc, self.pc, self.kind, self.detail
            ),
        }
    }
}

/// The fault of one instruction, before the device adds nc/engine/pc.
#[derive(Debug, Clone, PartialEq)]
pub struct OpFault {
    pub kind: FaultKind,
    pub detail: String,
}

impl OpFault {
    pub fn oob(detail: impl Into<String>) -> Self {
        OpFault {
            kind: FaultKind::OutOfBounds,
            detail: detail.into(),
        }
    }
    pub fn bad(detail: impl Into<String>) -> Self {
        OpFault {
            kind: FaultKind::BadInstruction,
            detail: detail.into(),
        }
    }
}
