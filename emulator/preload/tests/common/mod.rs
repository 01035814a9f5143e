//! Helpers the shim's integration tests share: the repository root and the built shim.

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `libneuron_emu_preload.so` as cargo built it for this test run.
pub fn shim() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let deps = exe.parent().expect("deps");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join("libneuron_emu_preload.so"))
        .find(|p| p.exists())
        .expect("libneuron_emu_preload.so next to the test binary")
}
