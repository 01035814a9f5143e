//! Instruction encodings decoded into one [`Instr`] form, and their encoders.
//!
//! - [`testenc`]: the project-defined 64-byte encoding for hand-built test programs.
//! - (later) `cayman`: the real trn2 encoding, decoded from evidence.

pub mod cayman;
pub mod dtype;
pub mod instr;
pub mod testenc;

pub use dtype::Dtype;
pub use instr::*;
