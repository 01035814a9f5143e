//! Which daemon a process uses: `NEURON_EMU_SOCKET=PATH` selects one; set but empty or `off`
//! forces the in-process device; unset, the well-known path (`$XDG_RUNTIME_DIR/neuron-emu.sock`,
//! else `/tmp/neuron-emu-<uid>/neuron-emu.sock`) is used only if a daemon answers there.

use std::path::PathBuf;

/// The environment variable naming the daemon's socket.
pub const SOCKET_ENV: &str = "NEURON_EMU_SOCKET";
/// File name of the well-known socket.
pub const SOCKET_NAME: &str = "neuron-emu.sock";

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// No daemon: the in-process device, as without this crate.
    InProcess,
    /// `NEURON_EMU_SOCKET` names this socket: use it (failing to reach it is an error).
    Explicit(PathBuf),
    /// Nothing set: this well-known socket, if a daemon answers there.
    WellKnown(PathBuf),
}

/// The well-known socket path of the calling user.
pub fn well_known_path(get: &impl Fn(&str) -> Option<String>) -> PathBuf {
    match get("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join(SOCKET_NAME),
        None => {
            let uid = uid();
            PathBuf::from(format!("/tmp/neuron-emu-{uid}")).join(SOCKET_NAME)
        }
    }
}

/// The calling process's real uid.
pub fn uid() -> u32 {
    #[allow(unsafe_code)]
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe {
        libc::getuid()
    }
}

/// Resolve through `get` (a variable's value, if set).
pub fn resolve_with(get: impl Fn(&str) -> Option<String>) -> Resolved {
    match get(SOCKET_ENV) {
        Some(v) if v.trim().is_empty() || v.trim() == "off" => Resolved::InProcess,
        Some(v) => Resolved::Explicit(PathBuf::from(v)),
        None => Resolved::WellKnown(well_known_path(&get)),
    }
}

/// Resolve from the process environment.
pub fn resolve() -> Resolved {
    resolve_with(|k| std::env::var(k).ok())
}

/// The daemon socket this process should use, if any: an explicit one always, the well-known
/// one only if something accepts a connection there.
pub fn daemon() -> Option<PathBuf> {
    match resolve() {
        Resolved::InProcess => None,
        Resolved::Explicit(p) => Some(p),
        Resolved::WellKnown(p) => std::os::unix::net::UnixStream::connect(&p).ok().map(|_| p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_selects_the_daemon() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            resolve_with(env(&[("NEURON_EMU_SOCKET", "/x/s.sock")])),
            Resolved::Explicit("/x/s.sock".into())
        );
        assert_eq!(
            resolve_with(env(&[("NEURON_EMU_SOCKET", "off")])),
            Resolved::InProcess
        );
        assert_eq!(
            resolve_with(env(&[("NEURON_EMU_SOCKET", "")])),
            Resolved::InProcess
        );
        assert_eq!(
            resolve_with(env(&[("XDG_RUNTIME_DIR", "/run/user/7")])),
            Resolved::WellKnown("/run/user/7/neuron-emu.sock".into())
        );
        assert_eq!(
            resolve_with(env(&[])),
            Resolved::WellKnown(format!("/tmp/neuron-emu-{}/neuron-emu.sock", uid()).into())
        );
    }
}
