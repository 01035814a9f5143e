//! Helpers the CLI's test files share.

/// The stdout of a finished `neuron-emu` (or other) process, which must have exited 0; its
/// stdout and stderr in the message where it did not.
pub fn ok(out: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
