//! Instruction encodings decoded into one [`Instr`] form, and their encoders.
//!
//! - [`cayman`]: the real trn2 encoding, decoded from evidence; [`ntff`]: the profile container.

pub mod cayman;
pub mod dtype;
pub mod instr;
pub mod ntff;

pub use dtype::Dtype;
pub use instr::*;
