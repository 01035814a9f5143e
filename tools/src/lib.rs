//! AWS's Neuron tools over the real driver ABI: [`snapshot`] gathers what they show (device
//! nodes, each process's datastore page, sysfs, `/proc`), [`ls`], [`monitor`] and [`top`]
//! format it as `neuron-ls`, `neuron-monitor` and `neuron-top` do.

pub mod ls;
pub mod monitor;
pub mod snapshot;
pub mod top;
