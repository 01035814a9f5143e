//! The `neuron.ko` user-space ABI (driver 2.26.5.0 + 2.27/2.28 additions) as data.
//!
//! Facts come from `shared/reference/driver-abi.md`; section numbers in comments refer to it.
//!
//! * [`ioctl`]: every command value ([`ioctl::COMMANDS`]) and the `_IOC` field helpers.
//! * [`structs`]: every ioctl argument struct, `#[repr(C)]` + zerocopy, exact LP64 layout.
//! * [`udma`]: the 16-byte UDMA descriptor and ring constraints.
//! * [`arch`]: per-architecture facts (Trn1, Inf2, Trn2).
//! * [`consts`]: enumerations and constants of the ABI (mem types, NQ types, semaphore page, ...).
//! * [`notify`]: this project's notification-queue entry format (**not** defined by the driver).
//! * [`device`]: the [`DeviceFile`] seam between a runtime and a device.
//! * [`backend`]: the C ABI of a loadable device backend (how libnrt.so reaches the emulator).
//! * [`nds`]: the per-process datastore page (counters the driver and the tools read).
//! * [`nds_runtime`]: this project's records in the runtime's own area of that page.

pub mod addr;
pub mod arch;
pub mod backend;
pub mod consts;
pub mod device;
pub mod ioctl;
pub mod nds;
pub mod nds_runtime;
pub mod notify;
pub mod structs;
pub mod tpb;
pub mod udma;

pub use arch::Arch;
pub use device::{DeviceFile, Errno};
pub use notify::{NotificationEntry, NotifyKind};
pub use udma::UdmaDesc;
