//! The Neuron device model: arch profiles, memories, engines, DMA, semaphores, notification
//! queues, and the discrete-event scheduler that runs them. No OS calls beyond host memory
//! (`pagepool`: anonymous mappings) and the AMX permission (`gemm::amx`).

pub mod addrmap;
pub mod arch;
pub mod calib;
pub mod cayman_exec;
pub mod core;
pub mod device;
pub mod ecc;
pub mod fanout;
pub mod fasthash;
pub mod fastmath;
pub mod fault;
pub mod firmware;
pub mod gemm;
pub mod hbm;
pub mod hooks;
pub mod hostcpus;
pub mod hostmem;
pub mod kept;
pub mod pagepool;
pub mod prefetch;
pub mod regs;
pub mod runcopy;
pub mod sched;
pub(crate) mod shortcopy;
pub mod spin;
pub mod stats;
pub mod time;
pub mod writemap;

pub use arch::ArchProfile;
pub use device::{
    Device, DeviceStatus, DmaError, HostProfile, MemError, QueueState, Stats, TraceEvent, TraceMark,
};
pub use fault::{Fault, FaultKind};
pub use hooks::DeviceHooks;
pub use time::Ps;
