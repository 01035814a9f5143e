//! The Neuron device model: arch profiles, memories, engines, DMA, semaphores, notification
//! queues, and the discrete-event scheduler that runs them. No OS calls.

pub mod arch;
pub mod calib;
pub mod cayman_exec;
pub mod core;
pub mod device;
pub mod fastmath;
pub mod fault;
mod gemm;
pub mod hbm;
pub mod hostmem;
pub mod regs;
pub mod time;

pub use arch::ArchProfile;
pub use device::{Device, DmaError, HostProfile, MemError, QueueState, Stats, TraceEvent};
pub use fault::{Fault, FaultKind};
pub use time::Ps;
