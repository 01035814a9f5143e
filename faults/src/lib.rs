//! Fault injection, the parts that need no device: plans (`plan`: the TOML format of
//! `docs/faults.md`, strictly validated), their seeded sampling into concrete injections
//! (`sample`, `rng`), the driver's errnos and fault points (`errno`), outcome classes with
//! confidence intervals (`outcome`) and campaign reports that merge across shards (`report`).

pub mod errno;
pub mod outcome;
pub mod plan;
pub mod report;
pub mod rng;
pub mod sample;

pub use outcome::{classify, Class, Tally};
pub use plan::{parse, Effect, Fault, Limits, Plan, PlanError, Region, Trigger};
pub use report::{Experiment, Report, Setup};
pub use sample::{Injection, Location, When};
