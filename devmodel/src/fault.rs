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
}

impl FaultKind {
    /// Error codes carried in ERROR notification entries (see `neuron_abi::notify`).
    pub fn code(self) -> u32 {
        match self {
            FaultKind::OutOfBounds => 1,
            FaultKind::BadInstruction => 2,
            FaultKind::DmaAbort => 3,
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
