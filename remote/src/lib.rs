//! Client side and wire protocol of `neuron-emu serve`, the daemon that lets many processes
//! share one emulated machine (devices, memory, core reservations, per-process rules).
//!
//! [`proto`] is the length-prefixed binary protocol, [`fdpass`] passes the device arena's
//! memfd with `SCM_RIGHTS`, [`socket`] resolves which daemon (if any) a process uses, and
//! [`client`] is [`RemoteMachine`] / [`RemoteFile`] (a [`neuron_abi::DeviceFile`]).
//! `docs/daemon.md` describes the design.

pub mod client;
pub mod fdpass;
pub mod proto;
pub mod ranges;
pub mod selfpid;
pub mod socket;

pub use client::{dmesg, shutdown, ControlError, RemoteFile, RemoteMachine};
pub use socket::{resolve, Resolved, SOCKET_ENV};
