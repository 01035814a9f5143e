//! Fault injection: plans (`plan`: the TOML format of
//! `docs/faults.md`, strictly validated), their seeded sampling into concrete injections
//! (`sample`, `rng`), the driver's errnos and fault points (`errno`), outcome classes with
//! confidence intervals (`outcome`), campaign reports that merge across shards (`report`), and
//! the device hook that applies one injection (`inject`).

pub mod errno;
pub mod inject;
pub mod outcome;
pub mod plan;
pub mod report;
pub mod rng;
pub mod sample;

pub use outcome::{classify, Class, Tally};
pub use plan::{parse, Effect, Fault, Limits, Plan, PlanError, Region, Trigger};
pub use report::{Experiment, Report, Setup};
pub use sample::{Injection, Location, When};
