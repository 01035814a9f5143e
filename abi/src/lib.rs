//! The `neuron.ko` user-space ABI (driver 2.26.5.0 + 2.27 additions) as data.
//!
//! Facts come from `shared/reference/driver-abi.md`; section numbers in comments refer to it.

pub mod device;

pub use device::{DeviceFile, Errno};
