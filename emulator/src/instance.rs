//! EC2 instance presets: which devices an instance has, how they are linked (what DEVICE_INFO
//! and sysfs `connected_devices` report) and the instance's identity (DMI product name, id).
//!
//! The driver has no topology discovery on v2/v3: `fw_io_topology` is a hard-coded table chosen
//! by the PCI device id and the number of devices on the host (`driver-abi.md` §6,
//! `v2/neuron_dhal_v2.c`, `v3/neuron_dhal_v3.c`). [`links`] reproduces that rule, so any
//! emulator (preset or not) reports what the driver would for its arch and device count.

use neuron_abi::arch::Arch;

/// Trn1 with 16 devices (trn1.32xlarge, trn1n.32xlarge): a 4x4 torus, 4 links each
/// (`trn1_32xl_neigbor_ids`, driver order).
const TRN1_16: [[u32; 4]; 16] = [
    [12, 3, 4, 1],
    [13, 0, 5, 2],
    [14, 1, 6, 3],
    [15, 2, 7, 0],
    [0, 7, 8, 5],
    [1, 4, 9, 6],
    [2, 5, 10, 7],
    [3, 6, 11, 4],
    [4, 11, 12, 9],
    [5, 8, 13, 10],
    [6, 9, 14, 11],
    [7, 10, 15, 8],
    [8, 15, 0, 13],
    [9, 12, 1, 14],
    [10, 13, 2, 15],
    [11, 14, 3, 12],
];

/// Trn2 with 16 devices (trn2.48xlarge): a 4x4 torus over the trn2 routing order
/// (`trn2_32xl_neigbor_ids`, driver order).
const TRN2_16: [[u32; 4]; 16] = [
    [12, 1, 3, 4],
    [0, 13, 5, 2],
    [14, 3, 1, 6],
    [2, 15, 7, 0],
    [8, 5, 7, 0],
    [4, 9, 1, 6],
    [10, 7, 5, 2],
    [6, 11, 3, 4],
    [4, 9, 11, 12],
    [8, 5, 13, 10],
    [6, 11, 9, 14],
    [10, 7, 15, 8],
    [0, 13, 15, 8],
    [12, 1, 9, 14],
    [2, 15, 13, 10],
    [14, 3, 11, 12],
];

/// The devices device `dev` of `count` devices of `arch` is linked to, in the driver's order:
/// Trn1/Trn2 with a multiple of 16 devices the 4x4 torus (devices 16.. keep bit 4 of their own
/// index, as the driver ORs it in); Inf2 with 12 devices a ring, with 6 a chain; otherwise none.
pub fn links(arch: Arch, count: usize, dev: usize) -> Vec<u32> {
    if dev >= count {
        return Vec::new();
    }
    let high = dev as u32 & 0x10;
    match arch {
        Arch::V2Trn1 if count.is_multiple_of(16) => {
            TRN1_16[dev % 16].iter().map(|d| d | high).collect()
        }
        Arch::V3Trn2 if count.is_multiple_of(16) => {
            TRN2_16[dev % 16].iter().map(|d| d | high).collect()
        }
        Arch::V2Inf2 if count == 12 => {
            let d = dev as u32;
            vec![(d + 11) % 12, (d + 1) % 12]
        }
        Arch::V2Inf2 if count == 6 => {
            let d = dev as u32;
            let mut v = Vec::new();
            if d > 0 {
                v.push(d - 1);
            }
            if d < 5 {
                v.push(d + 1);
            }
            v
        }
        _ => Vec::new(),
    }
}

/// One named preset: (name, arch, devices).
const PRESETS: [(&str, Arch, usize); 9] = [
    ("trn1.2xlarge", Arch::V2Trn1, 1),
    ("trn1.32xlarge", Arch::V2Trn1, 16),
    ("trn1n.32xlarge", Arch::V2Trn1, 16),
    ("inf2.xlarge", Arch::V2Inf2, 1),
    ("inf2.8xlarge", Arch::V2Inf2, 1),
    ("inf2.24xlarge", Arch::V2Inf2, 6),
    ("inf2.48xlarge", Arch::V2Inf2, 12),
    ("trn2.3xlarge", Arch::V3Trn2, 1),
    ("trn2.48xlarge", Arch::V3Trn2, 16),
];

/// An emulated EC2 instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The instance type (DMI `product_name`), `None` for an arch/device count no preset has.
    pub name: Option<&'static str>,
    pub arch: Arch,
    pub devices: usize,
    /// Per device, the devices it is linked to (driver order).
    pub topology: Vec<Vec<u32>>,
    /// The instance id (DMI `board_asset_tag`): "i-" and 17 hex digits, stable per name.
    pub instance_id: String,
}

/// FNV-1a, for stable made-up identifiers.
pub(crate) fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.iter() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Instance {
    /// The preset names, in table order.
    pub fn names() -> impl Iterator<Item = &'static str> {
        PRESETS.iter().map(|p| p.0)
    }

    /// The preset called `name` (e.g. "trn2.48xlarge").
    pub fn by_name(name: &str) -> Option<Instance> {
        let &(n, arch, devices) = PRESETS.iter().find(|p| p.0 == name)?;
        Some(Instance::build(Some(n), arch, devices))
    }

    /// `count` devices of `arch` with no preset chosen: the first preset of that shape gives
    /// the name (trn2 × 16 is trn2.48xlarge), else the instance is unnamed. The links are the
    /// driver's rule either way.
    pub fn generic(arch: Arch, count: usize) -> Instance {
        let name = PRESETS
            .iter()
            .find(|p| p.1 == arch && p.2 == count)
            .map(|p| p.0);
        Instance::build(name, arch, count)
    }

    fn build(name: Option<&'static str>, arch: Arch, devices: usize) -> Instance {
        let devices = devices.min(neuron_abi::consts::MAX_NEURON_DEVICE_COUNT as usize);
        let topology = (0..devices).map(|d| links(arch, devices, d)).collect();
        let label = name.unwrap_or(arch.name());
        let id = fnv(&[label.as_bytes(), &(devices as u64).to_le_bytes()]);
        Instance {
            name,
            arch,
            devices,
            topology,
            instance_id: format!("i-0{id:016x}"),
        }
    }

    /// The devices device `dev` is linked to.
    pub fn connected(&self, dev: usize) -> &[u32] {
        self.topology.get(dev).map_or(&[], |v| v.as_slice())
    }

    /// The stable 64-bit serial number of device `dev` (never 0, no 0xdeadbeef half: the driver
    /// shows an empty line for those).
    pub fn serial_number(&self, dev: usize) -> u64 {
        let s = fnv(&[
            self.instance_id.as_bytes(),
            &(dev as u64).to_le_bytes(),
            b"serial",
        ]);
        let bad = |v: u64| v == 0 || v as u32 == 0xdead_beef || (v >> 32) as u32 == 0xdead_beef;
        if bad(s) {
            s ^ 0x0101_0101_0101_0101
        } else {
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_and_generic_picks_the_first_of_a_shape() {
        for n in Instance::names() {
            let i = Instance::by_name(n).expect("preset");
            assert_eq!(i.name, Some(n));
            assert_eq!(i.topology.len(), i.devices);
        }
        assert_eq!(Instance::by_name("p4d.24xlarge"), None);
        assert_eq!(
            Instance::generic(Arch::V3Trn2, 16).name,
            Some("trn2.48xlarge")
        );
        let odd = Instance::generic(Arch::V3Trn2, 3);
        assert_eq!(odd.name, None);
        assert!(odd.topology.iter().all(|l| l.is_empty()));
        assert!(odd.instance_id.starts_with("i-0") && odd.instance_id.len() == 19);
    }

    #[test]
    fn links_are_symmetric_where_the_driver_table_is() {
        for (arch, n) in [
            (Arch::V2Trn1, 16),
            (Arch::V3Trn2, 16),
            (Arch::V2Inf2, 12),
            (Arch::V2Inf2, 6),
        ] {
            for d in 0..n {
                for &e in &links(arch, n, d) {
                    assert!(
                        links(arch, n, e as usize).contains(&(d as u32)),
                        "{arch:?} {d} -> {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn serial_numbers_are_stable_and_distinct() {
        let i = Instance::by_name("trn1.32xlarge").expect("preset");
        let s: std::collections::HashSet<u64> = (0..16).map(|d| i.serial_number(d)).collect();
        assert_eq!(s.len(), 16);
        assert_eq!(i.serial_number(3), i.clone().serial_number(3));
    }
}
