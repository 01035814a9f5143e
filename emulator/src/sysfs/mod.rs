//! The driver's sysfs tree (`/sys/devices/virtual/neuron_device/neuron<N>/...`, the class
//! links, `/sys/module/neuron/version`, and the EC2 DMI identity files), rendered from the live
//! emulator state with the driver's attribute names and formats (`docs/sysfs.md`).
//!
//! [`Tree::render`] takes one snapshot; [`Tree::read`] / [`Tree::list`] answer from it (class
//! paths resolve through their links), [`Tree::write_to`] materialises it as real files,
//! directories and symlinks under a root (each file written then renamed into place, so a
//! reader never sees half a file), and [`write`] is a write to an attribute (`reset`).

mod render;

pub use render::{category, DEVICE_MEM_CATEGORIES, HOST_MEM_CATEGORIES};

use crate::Emulator;
use neuron_abi::Errno;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::Path;

/// The emulated driver's version (`/sys/module/neuron/version`).
pub const DRIVER_VERSION: &str = "2.26.5.0";
/// Where the driver's device directories live.
pub const DEVICES_DIR: &str = "/sys/devices/virtual/neuron_device";
/// The `neuron_device` class directory (links to the device directories, class attributes).
pub const CLASS_DIR: &str = "/sys/class/neuron_device";
/// The module directory.
pub const MODULE_DIR: &str = "/sys/module/neuron";
/// The EC2 DMI files the tree carries (instance type, instance id); the rest of
/// `/sys/devices/virtual/dmi/id` is the host's.
pub const DMI_FILES: [&str; 2] = [
    "/sys/devices/virtual/dmi/id/product_name",
    "/sys/devices/virtual/dmi/id/board_asset_tag",
];

/// Whether `path` (absolute, as given) names something this tree serves: the device, class and
/// module directories and everything under them, and the two DMI files.
pub fn is_emulated_path(path: &str) -> bool {
    let p = path.trim_end_matches('/');
    let under = |d: &str| p == d || p.strip_prefix(d).is_some_and(|r| r.starts_with('/'));
    under(DEVICES_DIR) || under(CLASS_DIR) || under(MODULE_DIR) || DMI_FILES.contains(&p)
}

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File {
        data: String,
        writable: bool,
    },
    /// A symlink and its target, relative to the link's directory as sysfs has them.
    Link(String),
}

/// A rendered snapshot: absolute path -> entry (every ancestor of an entry is a `Dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    nodes: BTreeMap<String, Node>,
}

/// Collapse repeated and trailing slashes and `.`; `..` pops a component. `None` for a
/// relative path.
pub fn normalise(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

impl Tree {
    /// Render the tree of `emu` now.
    pub fn render(emu: &Emulator) -> Tree {
        render::render(emu, None)
    }

    /// A tree good for reading `path`: when it lies under one device's directory (or its class
    /// link), only that device is rendered (one device's lock and datastore pages, not all).
    pub fn render_for(emu: &Emulator, path: &str) -> Tree {
        let dev = normalise(path).and_then(|p| {
            let rest = p
                .strip_prefix(DEVICES_DIR)
                .or_else(|| p.strip_prefix(CLASS_DIR))?
                .strip_prefix("/neuron")?;
            let n = rest.split('/').next()?;
            n.parse::<usize>().ok().filter(|_| !n.starts_with('+'))
        });
        render::render(emu, dev)
    }

    fn insert(&mut self, path: &str, node: Node) {
        let mut at = 0;
        while let Some(k) = path[at + 1..].find('/') {
            at += k + 1;
            self.nodes
                .entry(path[..at].to_string())
                .or_insert(Node::Dir);
        }
        self.nodes.insert(path.to_string(), node);
    }

    pub(crate) fn file(&mut self, path: &str, data: impl Into<String>) {
        let data = data.into();
        self.insert(
            path,
            Node::File {
                data,
                writable: false,
            },
        );
    }

    pub(crate) fn writable(&mut self, path: &str, data: impl Into<String>) {
        let data = data.into();
        self.insert(
            path,
            Node::File {
                data,
                writable: true,
            },
        );
    }

    pub(crate) fn link(&mut self, path: &str, target: &str) {
        self.insert(path, Node::Link(target.to_string()));
    }

    /// The tree as one string, for the daemon's socket: per entry a header line
    /// `<kind> <path bytes> <data bytes>` (kind `d` directory, `f` file, `w` writable file,
    /// `l` link, whose data is its target), then the path and the data.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        for (path, node) in &self.nodes {
            let (kind, data) = match node {
                Node::Dir => ('d', ""),
                Node::File {
                    data,
                    writable: false,
                } => ('f', data.as_str()),
                Node::File {
                    data,
                    writable: true,
                } => ('w', data.as_str()),
                Node::Link(t) => ('l', t.as_str()),
            };
            out.push_str(&format!(
                "{kind} {} {}\n{path}{data}",
                path.len(),
                data.len()
            ));
        }
        out
    }

    /// Read back what [`Tree::encode`] wrote; `None` for anything malformed (a truncated
    /// entry, an unknown kind, a relative path, lengths past the end, a split UTF-8 char).
    pub fn decode(s: &str) -> Option<Tree> {
        let mut t = Tree::default();
        let mut rest = s;
        while !rest.is_empty() {
            let (head, tail) = rest.split_once('\n')?;
            let mut f = head.split(' ');
            let kind = f.next()?;
            let plen: usize = f.next()?.parse().ok()?;
            let dlen: usize = f.next()?.parse().ok()?;
            if f.next().is_some() || plen.checked_add(dlen)? > tail.len() {
                return None;
            }
            let path = tail.get(..plen)?;
            let data = tail.get(plen..plen + dlen)?;
            if !path.starts_with('/') {
                return None;
            }
            let node = match kind {
                "d" => Node::Dir,
                "f" | "w" => Node::File {
                    data: data.to_string(),
                    writable: kind == "w",
                },
                "l" => Node::Link(data.to_string()),
                _ => return None,
            };
            t.insert(path, node);
            rest = &tail[plen + dlen..];
        }
        Some(t)
    }

    /// Every entry, in path order (symlinks not followed).
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.nodes.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The entry at `path` itself (`lstat`: a link is not followed).
    pub fn entry(&self, path: &str) -> Option<&Node> {
        let p = normalise(path)?;
        // Links may sit in the middle of the path; only the last component stays unresolved.
        let (dir, name) = p.rsplit_once('/')?;
        let dir = if dir.is_empty() {
            "/".to_string()
        } else {
            self.resolve(dir)?
        };
        let full = if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        };
        self.nodes.get(&full)
    }

    /// `path` with every link followed, if it names an entry.
    pub fn resolve(&self, path: &str) -> Option<String> {
        let mut p = normalise(path)?;
        // Bounded: sysfs links here never chain more than once.
        'hops: for _ in 0..8 {
            let mut at = 0;
            loop {
                let end = p[at + 1..].find('/').map_or(p.len(), |k| at + 1 + k);
                let prefix = &p[..end];
                match self.nodes.get(prefix) {
                    Some(Node::Link(t)) => {
                        let parent = prefix.rsplit_once('/').map_or("", |x| x.0);
                        p = normalise(&format!("{parent}/{t}{}", &p[end..]))?;
                        continue 'hops;
                    }
                    Some(_) if end == p.len() => return Some(p),
                    Some(_) => at = end,
                    None if p == "/" => return Some(p),
                    None => return None,
                }
            }
        }
        None
    }

    /// The entry `path` names once every link is followed, and its resolved path.
    pub fn lookup(&self, path: &str) -> Option<(String, &Node)> {
        let r = self.resolve(path)?;
        let n = self.nodes.get(&r)?;
        Some((r, n))
    }

    /// The contents of the attribute at `path` (links followed).
    pub fn read(&self, path: &str) -> Option<String> {
        match self.nodes.get(&self.resolve(path)?)? {
            Node::File { data, .. } => Some(data.clone()),
            _ => None,
        }
    }

    /// The names in directory `dir` (links followed), sorted.
    pub fn list(&self, dir: &str) -> Option<Vec<String>> {
        let d = self.resolve(dir)?;
        if !matches!(self.nodes.get(&d), Some(Node::Dir)) {
            return None;
        }
        let prefix = if d == "/" { d.clone() } else { format!("{d}/") };
        Some(
            self.nodes
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .filter_map(|(k, _)| {
                    let rest = &k[prefix.len()..];
                    (!rest.contains('/')).then(|| rest.to_string())
                })
                .collect(),
        )
    }

    /// Materialise the tree under `root` (`root/sys/...`): directories, files (each written to
    /// a temporary name and renamed over the old one) and symlinks; entries of the tree's
    /// directories that the tree no longer has are removed. Safe to call again to refresh.
    pub fn write_to(&self, root: &Path) -> io::Result<()> {
        let on_disk = |p: &str| root.join(p.trim_start_matches('/'));
        let tmp_name = |p: &Path| {
            let mut n = p.as_os_str().to_os_string();
            n.push(format!(".tmp{}", std::process::id()));
            std::path::PathBuf::from(n)
        };
        for (path, node) in &self.nodes {
            let dst = on_disk(path);
            match node {
                Node::Dir => {
                    if std::fs::symlink_metadata(&dst).is_ok_and(|m| !m.is_dir()) {
                        std::fs::remove_file(&dst)?;
                    }
                    std::fs::create_dir_all(&dst)?;
                }
                Node::File { data, writable } => {
                    if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
                        std::fs::remove_dir_all(&dst)?;
                    }
                    if std::fs::read(&dst).is_ok_and(|old| old == data.as_bytes()) {
                        continue;
                    }
                    let tmp = tmp_name(&dst);
                    std::fs::write(&tmp, data)?;
                    use std::os::unix::fs::PermissionsExt;
                    let mode = if *writable { 0o644 } else { 0o444 };
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
                    std::fs::rename(&tmp, &dst)?;
                }
                Node::Link(target) => {
                    if std::fs::read_link(&dst).is_ok_and(|t| t == Path::new(target)) {
                        continue;
                    }
                    if std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_dir()) {
                        std::fs::remove_dir_all(&dst)?;
                    }
                    let tmp = tmp_name(&dst);
                    let _ = std::fs::remove_file(&tmp);
                    std::os::unix::fs::symlink(target, &tmp)?;
                    std::fs::rename(&tmp, &dst)?;
                }
            }
        }
        // Drop what the tree no longer has (a device gone, a renamed file).
        for (path, node) in &self.nodes {
            if *node != Node::Dir {
                continue;
            }
            let keep: BTreeSet<String> = self.list(path).unwrap_or_default().into_iter().collect();
            for e in std::fs::read_dir(on_disk(path))? {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                if keep.contains(&name) {
                    continue;
                }
                if e.file_type()?.is_dir() {
                    std::fs::remove_dir_all(e.path())?;
                } else {
                    std::fs::remove_file(e.path())?;
                }
            }
        }
        Ok(())
    }
}

/// Write `data` to the attribute at `path` of `emu`'s tree. `neuron<N>/reset` starts a full
/// device reset when no process has the node open, else `EBUSY` (the driver ignores such a
/// write silently); `info/notify_delay` accepts "0" or "-1" and changes nothing (change
/// notification is not emulated). Anything else: `EACCES` for a read-only attribute, `ENOENT`
/// for no attribute.
pub fn write(emu: &Emulator, path: &str, data: &[u8]) -> Result<usize, Errno> {
    let tree = Tree::render_for(emu, path);
    let real = tree.resolve(path).ok_or(Errno::ENOENT)?;
    match tree.nodes.get(&real) {
        Some(Node::File { writable: true, .. }) => {}
        Some(Node::File { .. }) => return Err(Errno::EACCES),
        Some(_) => return Err(Errno(21)), // EISDIR
        None => return Err(Errno::ENOENT),
    }
    let rest = real
        .strip_prefix(DEVICES_DIR)
        .and_then(|r| r.strip_prefix("/neuron"))
        .ok_or(Errno::EACCES)?;
    let (index, attr) = rest.split_once('/').ok_or(Errno::EACCES)?;
    let index: usize = index.parse().map_err(|_| Errno::ENOENT)?;
    let sh = emu.devices.get(index).ok_or(Errno::ENOENT)?;
    match attr {
        "reset" => {
            let mut g = sh.lock();
            if g.node_open_count > 0 {
                return Err(Errno::EBUSY);
            }
            for nc in 0..sh.arch.nc_count() {
                crate::driver::reset_nc(&mut g, nc);
            }
            Ok(data.len())
        }
        "info/notify_delay" => match std::str::from_utf8(data).map(str::trim) {
            Ok("0") | Ok("-1") => Ok(data.len()),
            _ => Err(Errno::EINVAL),
        },
        _ => Err(Errno::EACCES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_refuses_garbage() {
        let emu = Emulator::new(neuron_abi::Arch::V3Trn2, 2);
        let t = Tree::render(&emu);
        let enc = t.encode();
        assert_eq!(Tree::decode(&enc), Some(t));
        assert_eq!(Tree::decode(""), Some(Tree::default()));
        for bad in [
            "x 1 0\n/",
            "f 5 0\n/a",
            "f 2 99\n/ab",
            "f 1 0 7\n/",
            "f 1 0\na",
            "f one 0\n/",
            "f 18446744073709551615 2\n/ab",
        ] {
            assert_eq!(Tree::decode(bad), None, "{bad:?}");
        }
        // Cut anywhere, a valid encoding decodes to a prefix or is refused; never a panic.
        for cut in (0..enc.len())
            .step_by(97)
            .filter(|c| enc.is_char_boundary(*c))
        {
            let _ = Tree::decode(&enc[..cut]);
        }
    }

    #[test]
    fn paths_resolve_through_links_and_list_sorted() {
        let mut t = Tree::default();
        t.file("/sys/devices/virtual/neuron_device/neuron0/core_count", "8");
        t.link(
            "/sys/class/neuron_device/neuron0",
            "../../devices/virtual/neuron_device/neuron0",
        );
        assert_eq!(
            t.read("/sys/class/neuron_device/neuron0/core_count")
                .as_deref(),
            Some("8")
        );
        assert_eq!(
            t.read("//sys/class/neuron_device/./neuron0//core_count")
                .as_deref(),
            Some("8")
        );
        assert_eq!(
            t.list("/sys/class/neuron_device/neuron0"),
            Some(vec!["core_count".to_string()])
        );
        assert!(matches!(
            t.entry("/sys/class/neuron_device/neuron0"),
            Some(Node::Link(_))
        ));
        assert_eq!(
            t.entry("/sys/class/neuron_device/neuron0/core_count")
                .cloned(),
            Some(Node::File {
                data: "8".into(),
                writable: false
            })
        );
        assert_eq!(t.read("/sys/class/neuron_device/neuron1/core_count"), None);
        assert_eq!(
            t.list("/sys/class"),
            Some(vec!["neuron_device".to_string()])
        );
        assert_eq!(t.read("relative"), None);
    }

    #[test]
    fn a_device_path_renders_only_that_device() {
        let emu = Emulator::new(neuron_abi::arch::Arch::V2Inf2, 3);
        let p = "/sys/class/neuron_device/neuron1/info/architecture/device_name";
        let t = Tree::render_for(&emu, p);
        assert_eq!(t.read(p).as_deref(), Some("Inferentia2\n"));
        assert_eq!(t.list(DEVICES_DIR), Some(vec!["neuron1".to_string()]));
        let all = Tree::render_for(&emu, "/sys/module/neuron/version");
        assert_eq!(all, Tree::render(&emu));
    }

    #[test]
    fn emulated_paths() {
        assert!(is_emulated_path("/sys/class/neuron_device"));
        assert!(is_emulated_path("/sys/class/neuron_device/"));
        assert!(is_emulated_path("/sys/module/neuron/version"));
        assert!(is_emulated_path("/sys/devices/virtual/dmi/id/product_name"));
        assert!(!is_emulated_path("/sys/devices/virtual/dmi/id/bios_vendor"));
        assert!(!is_emulated_path("/sys/module/neuronx"));
        assert!(!is_emulated_path("/sys/class/neuron_devices"));
    }
}
