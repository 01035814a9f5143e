//! `neuron-emu install [--prefix DIR]`: lay the tools, `libnrt.so.1`, the emulator libraries
//! and the `nrt` headers out as AWS's packages do (default `/opt/aws/neuron`). A manifest
//! (`share/neuron-emu/install-manifest`: sha256 and path of every file written) tells its own
//! files from others': a file it did not write is not overwritten without `--force`.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Where to install (bin/, lib/, include/nrt/ under it).
    #[arg(long, value_name = "DIR", default_value = "/opt/aws/neuron")]
    pub prefix: PathBuf,
    /// Where the built binaries and libraries are. Default: this executable's directory.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
    /// Overwrite files this command did not write.
    #[arg(long)]
    pub force: bool,
}

/// The headers, as built into this binary (`runtime/include/nrt`).
const HEADERS: [(&str, &str); 7] = [
    ("nrt.h", include_str!("../../runtime/include/nrt/nrt.h")),
    (
        "nrt_experimental.h",
        include_str!("../../runtime/include/nrt/nrt_experimental.h"),
    ),
    (
        "nrt_status.h",
        include_str!("../../runtime/include/nrt/nrt_status.h"),
    ),
    (
        "nrt_version.h",
        include_str!("../../runtime/include/nrt/nrt_version.h"),
    ),
    (
        "nrt_profile.h",
        include_str!("../../runtime/include/nrt/nrt_profile.h"),
    ),
    (
        "nrt_sys_trace.h",
        include_str!("../../runtime/include/nrt/nrt_sys_trace.h"),
    ),
    (
        "nrt_async.h",
        include_str!("../../runtime/include/nrt/nrt_async.h"),
    ),
];

/// (file in the build directory, path under the prefix). `libnrt.so` goes to
/// `lib/libnrt.so.<version>` with the `libnrt.so.1` (SONAME) and `libnrt.so` links, as the
/// SDK's package lays it out.
const ARTIFACTS: [(&str, &str); 5] = [
    ("neuron-ls", "bin/neuron-ls"),
    ("neuron-top", "bin/neuron-top"),
    ("neuron-monitor", "bin/neuron-monitor"),
    ("libneuron_emu.so", "lib/libneuron_emu.so"),
    ("libneuron_emu_preload.so", "lib/libneuron_emu_preload.so"),
];

const MANIFEST: &str = "share/neuron-emu/install-manifest";
/// The manifest's hash field for a symlink (followed by its target).
const LINK_MARK: &str = "symlink:";

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn read_manifest(prefix: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(prefix.join(MANIFEST))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(h, p)| (p.to_string(), h.to_string()))
        .collect()
}

/// What one install does to one path.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Write(Vec<u8>),
    Link(String),
}

/// Run the install; prints one line per path.
pub fn run(a: InstallArgs) -> Result<(), String> {
    let from = match a.from {
        Some(d) => d,
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .ok_or("cannot tell where this executable is; pass --from")?,
    };
    let mut plan: Vec<(String, Step)> = Vec::new();
    for (src, dst) in ARTIFACTS {
        let p = from.join(src);
        let b = std::fs::read(&p).map_err(|e| {
            format!(
                "{}: {e} (build everything first: cargo build --release --workspace)",
                p.display()
            )
        })?;
        plan.push((dst.to_string(), Step::Write(b)));
    }
    let lib = from.join("libnrt.so");
    let b = std::fs::read(&lib).map_err(|e| {
        format!(
            "{}: {e} (build everything first: cargo build --release --workspace)",
            lib.display()
        )
    })?;
    let versioned = format!("libnrt.so.{}", neuron_runtime::nds::version_string());
    plan.push((format!("lib/{versioned}"), Step::Write(b)));
    plan.push(("lib/libnrt.so.1".into(), Step::Link(versioned)));
    plan.push(("lib/libnrt.so".into(), Step::Link("libnrt.so.1".into())));
    for (name, text) in HEADERS {
        plan.push((
            format!("include/nrt/{name}"),
            Step::Write(text.as_bytes().to_vec()),
        ));
    }
    let old = read_manifest(&a.prefix);
    // Refuse before touching anything: every existing path must be ours, unchanged.
    if !a.force {
        let mut foreign = Vec::new();
        for (rel, _) in &plan {
            let p = a.prefix.join(rel);
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let ours = match old.get(rel) {
                Some(h) if h.starts_with(LINK_MARK) => meta.file_type().is_symlink(),
                Some(h) => std::fs::read(&p).map(|b| sha(&b) == *h).unwrap_or(false),
                None => false,
            };
            if !ours {
                foreign.push(p.display().to_string());
            }
        }
        if !foreign.is_empty() {
            return Err(format!(
                "not overwriting files this command did not write (use --force): {}",
                foreign.join(", ")
            ));
        }
    }
    let mut manifest = String::new();
    for (rel, step) in &plan {
        let p = a.prefix.join(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let existed = std::fs::symlink_metadata(&p).is_ok();
        match step {
            Step::Write(b) => {
                if existed && std::fs::read(&p).is_ok_and(|cur| cur == *b) {
                    println!("unchanged {}", p.display());
                } else {
                    if existed {
                        std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                    }
                    std::fs::write(&p, b).map_err(|e| format!("{}: {e}", p.display()))?;
                    println!("installed {}", p.display());
                }
                set_mode(&p, rel)?;
                manifest.push_str(&format!("{} {rel}\n", sha(b)));
            }
            Step::Link(target) => {
                if existed {
                    std::fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                }
                std::os::unix::fs::symlink(target, &p)
                    .map_err(|e| format!("{}: {e}", p.display()))?;
                println!("linked {} -> {target}", p.display());
                manifest.push_str(&format!("{LINK_MARK}{target} {rel}\n"));
            }
        }
    }
    let mp = a.prefix.join(MANIFEST);
    if let Some(dir) = mp.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&mp, manifest).map_err(|e| format!("{}: {e}", mp.display()))?;
    println!("wrote {}", mp.display());
    Ok(())
}

/// Executables and shared objects get 0755, headers 0644.
fn set_mode(p: &Path, rel: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = if rel.starts_with("include/") {
        0o644
    } else {
        0o755
    };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    /// Every header of `runtime/include/nrt` is installed (a new header cannot be forgotten).
    #[test]
    fn every_header_is_installed() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/include/nrt");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("runtime/include/nrt")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".h"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = super::HEADERS.iter().map(|(n, _)| n.to_string()).collect();
        listed.sort();
        assert_eq!(listed, on_disk);
    }
}
