//! `neuron-emu sysfs`: the emulated driver's sysfs tree (`docs/sysfs.md`) of an instance: print
//! one attribute, a directory's attributes, or the whole tree, or materialise it under a
//! directory (`DIR/sys/...`) for programs that read sysfs and cannot be preloaded.

use neuron_emulator::envconfig::EmuConfig;
use neuron_emulator::instance::Instance;
use neuron_emulator::sysfs::{Node, Tree};
use neuron_emulator::Emulator;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SysfsArgs {
    /// Instance preset (e.g. trn2.48xlarge). Default: NEURON_EMU_INSTANCE, or NEURON_EMU_ARCH
    /// and NEURON_EMU_DEVICES.
    #[arg(long, value_name = "TYPE")]
    instance: Option<String>,
    /// Write the tree under DIR (DIR/sys/devices/..., DIR/sys/class/...) instead of printing.
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// An attribute to print, or a directory whose attributes to list (default: /sys).
    path: Option<String>,
}

fn emulator(instance: Option<&str>) -> Result<Emulator, (u8, String)> {
    match instance {
        Some(n) => Instance::by_name(n)
            .map(|i| Emulator::with_instance(&i))
            .ok_or_else(|| {
                let all: Vec<&str> = Instance::names().collect();
                (
                    2,
                    format!("unknown instance {n:?}: expected one of {}", all.join(", ")),
                )
            }),
        None => EmuConfig::from_env().map(|c| c.build()).map_err(|e| (2, e)),
    }
}

pub fn run(a: &SysfsArgs) -> Result<(), (u8, String)> {
    let emu = emulator(a.instance.as_deref())?;
    let tree = Tree::render(&emu);
    if let Some(dir) = &a.write {
        return tree
            .write_to(dir)
            .map_err(|e| (1, format!("write {}: {e}", dir.display())));
    }
    let path = a.path.as_deref().unwrap_or("/sys");
    let Some((real, node)) = tree.lookup(path) else {
        return Err((1, format!("{path}: no such attribute or directory")));
    };
    if let Node::File { data, .. } = node {
        print!("{data}");
        return Ok(());
    }
    // A directory: every entry below it, one per line (multi-line values indented).
    let prefix = format!("{}/", real.trim_end_matches('/'));
    let mut out = String::new();
    for (p, n) in tree.entries().filter(|(p, _)| p.starts_with(&prefix)) {
        match n {
            Node::Dir => {}
            Node::Link(t) => out.push_str(&format!("{p} -> {t}\n")),
            Node::File { data, .. } => {
                let v = data
                    .strip_suffix('\n')
                    .unwrap_or(data)
                    .replace('\n', "\n    ");
                out.push_str(&format!("{p}: {v}\n"));
            }
        }
    }
    print!("{out}");
    Ok(())
}
