//! Firmware on the device: the GpSimd microcode memories of each core and their verdict
//! (`ucode`), and the resident firmware the driver talks to through the misc-RAM mailbox and
//! the reset handshake (`mailbox`). See `docs/firmware.md`.

pub mod mailbox;
pub mod ucode;

pub use mailbox::{Firmware, MailboxStats, Outcome, ResetPlan, Response};
pub use ucode::{UcodeMem, UcodeState};
