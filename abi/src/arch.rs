//! Architecture variants (driver-abi.md §6, mmap windows §2.4).
//!
//! Covers the architectures this project emulates: v2 (Trn1, Inf2) and v3 (Trn2). v4 (Trn3)
//! shares most v3 facts and can be added as another variant later.

use crate::consts::{
    MMAP_BLOCK_HBM, MMAP_BLOCK_TOPSP, MMAP_BLOCK_TPB, MMAP_RESOURCE_ALL, MMAP_RESOURCE_DMEM,
    MMAP_RESOURCE_SBUF, MMAP_RESOURCE_SEMAPHORE,
};
use std::fmt;

/// PCI vendor id of every Neuron device (Amazon, 0x1d0f) (§6).
pub const PCI_VENDOR_ID: u16 = 0x1d0f;

/// Size of the per-TPB/TOP_SP semaphore/event register page exposed by mmap (§2.4, §5).
pub const TPB_SEMAPHORE_MMAP_SIZE: u64 = 0x2000;
/// Size of the per-TPB state-buffer (SBUF) mmap window, 32 MiB (§2.4).
pub const TPB_SBUF_MMAP_SIZE: u64 = 0x200_0000;
/// Size of the TOP_SP semaphore page mmap window (§2.4).
pub const TOPSP_SEMAPHORE_MMAP_SIZE: u64 = 0x2000;
/// Size of the read-only whole-TOP_SP ("ALL") mmap window, 4 MiB (§2.4).
pub const TOPSP_ALL_MMAP_SIZE: u64 = 0x40_0000;
/// Size of one TPB (NeuronCore) register window in BAR0, 64 MiB (§5).
pub const TPB_WINDOW_SIZE: u64 = 0x400_0000;
/// Stride of TOP_SP windows in BAR0 (§2.4).
pub const TOPSP_WINDOW_STRIDE: u64 = 0x40_0000;
/// First 16 MiB of every HBM are carved out for firmware (§8).
pub const HBM_RESERVED_BYTES: u64 = 16 << 20;

const GIB: u64 = 1 << 30;

/// A Neuron device architecture / product (§6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Arch {
    /// Trainium1 (arch v2, PCI 1d0f:7164).
    V2Trn1,
    /// Inferentia2 (arch v2, PCI 1d0f:7264).
    V2Inf2,
    /// Trainium2 (arch v3, PCI 1d0f:7364).
    V3Trn2,
}

/// One special mmap resource (a §2.4 table row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceWindow {
    /// `consts::MMAP_BLOCK_*`.
    pub block: u32,
    pub block_id: u32,
    /// `consts::MMAP_RESOURCE_*`.
    pub resource: u32,
    /// mmap offset (key) returned by RESOURCE_MMAP_INFO; must match exactly.
    pub offset: u64,
    /// mmap size; must match exactly.
    pub size: u64,
    /// Backing BAR (0 or 4).
    pub bar: u8,
    /// Offset of the backing region inside that BAR.
    pub bar_offset: u64,
    /// RESOURCE_ALL rows are mapped read-only.
    pub read_only: bool,
}

impl Arch {
    /// Every supported variant.
    pub const ALL: [Arch; 3] = [Arch::V2Trn1, Arch::V2Inf2, Arch::V3Trn2];

    /// Short product name: `"trn1"`, `"inf2"`, `"trn2"`.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::V2Trn1 => "trn1",
            Arch::V2Inf2 => "inf2",
            Arch::V3Trn2 => "trn2",
        }
    }

    /// Parse a product name (ASCII case-insensitive): `"trn1"`, `"inf2"`, `"trn2"`.
    pub fn from_name(name: &str) -> Option<Arch> {
        Arch::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// `architecture` value reported by DEVICE_INFO / DEVICE_BASIC_INFO / DRIVER_INFO (2 or 3).
    pub const fn architecture(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 2,
            Arch::V3Trn2 => 3,
        }
    }

    /// PCI device id (vendor [`PCI_VENDOR_ID`]).
    pub const fn pci_device_id(self) -> u16 {
        match self {
            Arch::V2Trn1 => 0x7164,
            Arch::V2Inf2 => 0x7264,
            Arch::V3Trn2 => 0x7364,
        }
    }

    /// NeuronCores per device (2 / 8).
    pub const fn nc_count(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 2,
            Arch::V3Trn2 => 8,
        }
    }

    /// Dies per device (1 / 2).
    pub const fn dies(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 1,
            Arch::V3Trn2 => 2,
        }
    }

    /// Compute engines per NeuronCore (5 on v2 and v3).
    pub const fn compute_engines_per_nc(self) -> u32 {
        5
    }

    /// DMA engines per device (34 / 132) (§3.1).
    pub const fn dma_engines(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 34,
            Arch::V3Trn2 => 132,
        }
    }

    /// DMA engines owned by each NeuronCore (16; engine ids `nc*16 .. nc*16+16`) (§3.1).
    pub const fn dma_engines_per_nc(self) -> u32 {
        16
    }

    /// Queues per DMA engine (16) (§3.1).
    pub const fn dma_queues_per_engine(self) -> u32 {
        16
    }

    /// The host-transfer (H2T) DMA engine the driver uses for NC `nc`: v2 32 (NC0) / 33 (NC1);
    /// v3 {128, 129, 130, 131}[nc / 2] (§3.1). `None` if `nc` is out of range.
    pub const fn h2t_engine(self, nc: u32) -> Option<u32> {
        if nc >= self.nc_count() {
            return None;
        }
        Some(match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 32 + nc,
            Arch::V3Trn2 => 128 + nc / 2,
        })
    }

    /// The driver's default queue on [`Arch::h2t_engine`] for NC `nc`: v2 0; v3 `nc % 2` (§3.1).
    pub const fn h2t_default_queue(self, nc: u32) -> Option<u32> {
        if nc >= self.nc_count() {
            return None;
        }
        Some(match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 0,
            Arch::V3Trn2 => nc % 2,
        })
    }

    /// Host-memory bit ORed into device-side addresses of host memory (`pci_host_base`):
    /// v2 0x1000_0000_0000 (bit 44), v3 0x4000_0000_0000 (bit 46) (§6, §8).
    pub const fn host_base_bit(self) -> u64 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 0x1000_0000_0000,
            Arch::V3Trn2 => 0x4000_0000_0000,
        }
    }

    /// Number of HBMs (= valid `dram_channel` values): 2 / 4 (§6, §8).
    pub const fn hbm_count(self) -> u32 {
        self.hbm_bases().len() as u32
    }

    /// Device PA of every HBM (§6).
    pub const fn hbm_bases(self) -> &'static [u64] {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => &[0x0, 0x10_0000_0000],
            Arch::V3Trn2 => &[0x0, 0x40_0000_0000, 0x8000_0000_0000, 0x8040_0000_0000],
        }
    }

    /// Device PA of HBM `k`, `None` if out of range (§6).
    pub const fn hbm_base(self, k: u32) -> Option<u64> {
        let bases = self.hbm_bases();
        if (k as usize) < bases.len() {
            Some(bases[k as usize])
        } else {
            None
        }
    }

    /// Size of each HBM: 16 GiB (v2) / 24 GiB (v3) (§6).
    pub const fn hbm_size(self) -> u64 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 16 * GIB,
            Arch::V3Trn2 => 24 * GIB,
        }
    }

    /// Bytes at the start of each HBM reserved for firmware (16 MiB); the allocator's usable
    /// base is `hbm_base(k) + hbm_reserved_bytes()` (§8).
    pub const fn hbm_reserved_bytes(self) -> u64 {
        HBM_RESERVED_BYTES
    }

    /// Offset of HBM `k` inside BAR4: v2 k × 16 GiB; v3 k × 64 GiB (§2.4).
    pub const fn hbm_bar4_offset(self, k: u32) -> Option<u64> {
        if k >= self.hbm_count() {
            return None;
        }
        Some(match self {
            Arch::V2Trn1 | Arch::V2Inf2 => k as u64 * 16 * GIB,
            Arch::V3Trn2 => k as u64 * 64 * GIB,
        })
    }

    /// Runtime compatibility versions `(min, max)` returned by COMPATIBLE_VERSION: v2 (5, 7),
    /// v3 (10, 11) (§2.3, §6).
    pub const fn compat_versions(self) -> (u32, u32) {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => (5, 7),
            Arch::V3Trn2 => (10, 11),
        }
    }

    /// Semaphores per NeuronCore (and per TOP_SP): 256 (§5).
    pub const fn semaphores_per_nc(self) -> u32 {
        256
    }

    /// Events per NeuronCore (and per TOP_SP): 256 (§5).
    pub const fn events_per_nc(self) -> u32 {
        256
    }

    /// TOP_SP (collectives sequencers) per device: 6 (v2) / 16 (v3) (§6).
    pub const fn topsp_count(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 6,
            Arch::V3Trn2 => 16,
        }
    }

    /// NQ types listed by the arch's address map: 6 (v2) / 5 (v3). The driver accepts all 6
    /// types (queue id < 96) on every arch (§4, §6).
    pub const fn nq_type_count(self) -> u32 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 6,
            Arch::V3Trn2 => 5,
        }
    }

    /// sysfs `info/architecture/arch_type` of the device: Trn1 "v2", Inf2 "v3", Trn2 "v3" (§6).
    pub const fn arch_type(self) -> &'static str {
        match self {
            Arch::V2Trn1 => "v2",
            Arch::V2Inf2 | Arch::V3Trn2 => "v3",
        }
    }

    /// sysfs `neuron_core<k>/info/architecture/arch_type`: "v2", "v2", "v3" (§6).
    pub const fn nc_arch_type(self) -> &'static str {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => "v2",
            Arch::V3Trn2 => "v3",
        }
    }

    /// sysfs `info/architecture/instance_type`: "Trn1", "Inf2", "Trn2" (§6).
    pub const fn instance_type(self) -> &'static str {
        match self {
            Arch::V2Trn1 => "Trn1",
            Arch::V2Inf2 => "Inf2",
            Arch::V3Trn2 => "Trn2",
        }
    }

    /// sysfs `info/architecture/device_name`: "Trainium1", "Inferentia2", "Trainium2" (§6).
    pub const fn device_name(self) -> &'static str {
        match self {
            Arch::V2Trn1 => "Trainium1",
            Arch::V2Inf2 => "Inferentia2",
            Arch::V3Trn2 => "Trainium2",
        }
    }

    /// BAR0 offset of the misc-RAM block (firmware mailbox, routing id, ...) (§6).
    pub const fn misc_ram_bar0_offset(self) -> u64 {
        match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 0x30fa_0000,
            Arch::V3Trn2 => 0x6c8_4000,
        }
    }

    /// Table turning a firmware routing id into `/dev/neuron<N>` index N, as listed in §1
    /// (Trn1 and Trn2 tables; `None` = identity, Inf2). Indexing direction
    /// (`index = table[routing_id]`) is **(inferred)**.
    pub const fn routing_id_table(self) -> Option<&'static [u32; 16]> {
        match self {
            Arch::V2Trn1 => Some(&[0, 4, 1, 5, 3, 7, 2, 6, 12, 8, 13, 9, 15, 11, 14, 10]),
            Arch::V2Inf2 => None,
            Arch::V3Trn2 => Some(&[0, 3, 4, 7, 12, 15, 8, 11, 1, 2, 5, 6, 13, 14, 9, 10]),
        }
    }

    /// BAR0 offset of NC `nc`'s 64 MiB TPB window: v2 k × 0x4000000; v3 0xd0000000 +
    /// k × 0x4000000 (§5, §6).
    pub const fn tpb_bar0_offset(self, nc: u32) -> Option<u64> {
        if nc >= self.nc_count() {
            return None;
        }
        Some(
            match self {
                Arch::V2Trn1 | Arch::V2Inf2 => 0,
                Arch::V3Trn2 => 0xd000_0000,
            } + nc as u64 * TPB_WINDOW_SIZE,
        )
    }

    /// mmap offset of NC `nc`'s 8 KiB semaphore/event page ([`TPB_SEMAPHORE_MMAP_SIZE`]):
    /// v2 0xfffc2700000 + k × 0x4000000; v3 0x2002700000 + k × 0x4000000 (§2.4).
    pub const fn tpb_semaphore_mmap_offset(self, nc: u32) -> Option<u64> {
        if nc >= self.nc_count() {
            return None;
        }
        Some(
            match self {
                Arch::V2Trn1 | Arch::V2Inf2 => 0xfff_c270_0000,
                Arch::V3Trn2 => 0x20_0270_0000,
            } + nc as u64 * TPB_WINDOW_SIZE,
        )
    }

    /// mmap offset of NC `nc`'s 32 MiB state buffer ([`TPB_SBUF_MMAP_SIZE`]):
    /// v2 0xfffc0000000 + k × 0x4000000; v3 0x2000000000 + k × 0x4000000 (§2.4).
    pub const fn tpb_sbuf_mmap_offset(self, nc: u32) -> Option<u64> {
        if nc >= self.nc_count() {
            return None;
        }
        Some(
            match self {
                Arch::V2Trn1 | Arch::V2Inf2 => 0xfff_c000_0000,
                Arch::V3Trn2 => 0x20_0000_0000,
            } + nc as u64 * TPB_WINDOW_SIZE,
        )
    }

    /// BAR0 offset of TOP_SP `t`'s window: v2 0x10000000 + t × 0x400000; v3 0xf0000000 +
    /// t × 0x400000 (t < 8) or 0xf2800000 + (t − 8) × 0x400000 (§2.4).
    pub const fn topsp_bar0_offset(self, t: u32) -> Option<u64> {
        if t >= self.topsp_count() {
            return None;
        }
        let t = t as u64;
        Some(match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 0x1000_0000 + t * TOPSP_WINDOW_STRIDE,
            Arch::V3Trn2 if t < 8 => 0xf000_0000 + t * TOPSP_WINDOW_STRIDE,
            Arch::V3Trn2 => 0xf280_0000 + (t - 8) * TOPSP_WINDOW_STRIDE,
        })
    }

    /// mmap offset of TOP_SP `t` (both its SEMAPHORE page and its read-only ALL window):
    /// v2 0xfffd0000000 + t × 0x400000; v3 0x8280000000 + t × 0x40000000 (t < 8) or
    /// 0x808280000000 + (t − 8) × 0x40000000 (§2.4).
    pub const fn topsp_mmap_offset(self, t: u32) -> Option<u64> {
        if t >= self.topsp_count() {
            return None;
        }
        let t = t as u64;
        Some(match self {
            Arch::V2Trn1 | Arch::V2Inf2 => 0xfff_d000_0000 + t * 0x40_0000,
            Arch::V3Trn2 if t < 8 => 0x82_8000_0000 + t * 0x4000_0000,
            Arch::V3Trn2 => 0x8082_8000_0000 + (t - 8) * 0x4000_0000,
        })
    }

    /// The special mmap resource `(block, block_id, resource)` as RESOURCE_MMAP_INFO resolves it,
    /// or `None` if this arch has no such row (§2.4). v2 has no HBM DMEM rows.
    pub const fn resource_mmap(
        self,
        block: u32,
        block_id: u32,
        resource: u32,
    ) -> Option<ResourceWindow> {
        let (offset, size, bar, bar_offset, read_only) = match (block, resource) {
            (MMAP_BLOCK_TPB, MMAP_RESOURCE_SEMAPHORE) => match (
                self.tpb_semaphore_mmap_offset(block_id),
                self.tpb_bar0_offset(block_id),
            ) {
                (Some(o), Some(b)) => (o, TPB_SEMAPHORE_MMAP_SIZE, 0, b + 0x270_0000, false),
                _ => return None,
            },
            (MMAP_BLOCK_TPB, MMAP_RESOURCE_SBUF) => {
                match (
                    self.tpb_sbuf_mmap_offset(block_id),
                    self.tpb_bar0_offset(block_id),
                ) {
                    (Some(o), Some(b)) => (o, TPB_SBUF_MMAP_SIZE, 0, b, false),
                    _ => return None,
                }
            }
            (MMAP_BLOCK_TOPSP, MMAP_RESOURCE_SEMAPHORE | MMAP_RESOURCE_ALL) => {
                match (
                    self.topsp_mmap_offset(block_id),
                    self.topsp_bar0_offset(block_id),
                ) {
                    (Some(o), Some(b)) => {
                        if resource == MMAP_RESOURCE_ALL {
                            (o, TOPSP_ALL_MMAP_SIZE, 0, b, true)
                        } else {
                            (o, TOPSP_SEMAPHORE_MMAP_SIZE, 0, b, false)
                        }
                    }
                    _ => return None,
                }
            }
            (MMAP_BLOCK_HBM, MMAP_RESOURCE_DMEM) => match self {
                Arch::V2Trn1 | Arch::V2Inf2 => return None,
                Arch::V3Trn2 => match (self.hbm_base(block_id), self.hbm_bar4_offset(block_id)) {
                    (Some(o), Some(b)) => (o, self.hbm_size(), 4, b, false),
                    _ => return None,
                },
            },
            _ => return None,
        };
        Some(ResourceWindow {
            block,
            block_id,
            resource,
            offset,
            size,
            bar,
            bar_offset,
            read_only,
        })
    }

    /// Every special mmap resource of this arch (all rows of the §2.4 table).
    pub fn resource_windows(self) -> impl Iterator<Item = ResourceWindow> {
        let tpb = (0..self.nc_count()).flat_map(move |k| {
            [MMAP_RESOURCE_SEMAPHORE, MMAP_RESOURCE_SBUF]
                .into_iter()
                .filter_map(move |r| self.resource_mmap(MMAP_BLOCK_TPB, k, r))
        });
        let topsp = (0..self.topsp_count()).flat_map(move |k| {
            [MMAP_RESOURCE_SEMAPHORE, MMAP_RESOURCE_ALL]
                .into_iter()
                .filter_map(move |r| self.resource_mmap(MMAP_BLOCK_TOPSP, k, r))
        });
        let hbm = (0..self.hbm_count())
            .filter_map(move |k| self.resource_mmap(MMAP_BLOCK_HBM, k, MMAP_RESOURCE_DMEM));
        tpb.chain(topsp).chain(hbm)
    }

    /// The special resource an `mmap(len, offset)` names, if any: offset **and** size must match
    /// a row exactly (§2.4, resolution step 2).
    pub fn find_resource(self, offset: u64, len: u64) -> Option<ResourceWindow> {
        self.resource_windows()
            .find(|w| w.offset == offset && w.size == len)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for a in Arch::ALL {
            assert_eq!(Arch::from_name(a.name()), Some(a));
        }
        assert_eq!(Arch::from_name("trn1"), Some(Arch::V2Trn1));
        assert_eq!(Arch::from_name("inf2"), Some(Arch::V2Inf2));
        assert_eq!(Arch::from_name("trn2"), Some(Arch::V3Trn2));
        assert_eq!(Arch::from_name("TRN2"), Some(Arch::V3Trn2));
        assert_eq!(Arch::from_name("trn3"), None);
        assert_eq!(Arch::from_name(""), None);
        assert_eq!(Arch::V3Trn2.to_string(), "trn2");
    }

    #[test]
    fn basic_counts() {
        assert_eq!(Arch::V2Trn1.architecture(), 2);
        assert_eq!(Arch::V2Inf2.architecture(), 2);
        assert_eq!(Arch::V3Trn2.architecture(), 3);
        assert_eq!(Arch::V2Trn1.nc_count(), 2);
        assert_eq!(Arch::V3Trn2.nc_count(), 8);
        assert_eq!(Arch::V2Inf2.dma_engines(), 34);
        assert_eq!(Arch::V3Trn2.dma_engines(), 132);
        assert_eq!(Arch::V3Trn2.dma_engines_per_nc(), 16);
        assert_eq!(Arch::V2Trn1.dma_queues_per_engine(), 16);
        assert_eq!(Arch::V2Trn1.semaphores_per_nc(), 256);
        assert_eq!(Arch::V3Trn2.events_per_nc(), 256);
        assert_eq!(Arch::V2Trn1.topsp_count(), 6);
        assert_eq!(Arch::V3Trn2.topsp_count(), 16);
        assert_eq!(Arch::V2Trn1.compat_versions(), (5, 7));
        assert_eq!(Arch::V3Trn2.compat_versions(), (10, 11));
        assert_eq!(Arch::V2Trn1.pci_device_id(), 0x7164);
        assert_eq!(Arch::V2Inf2.pci_device_id(), 0x7264);
        assert_eq!(Arch::V3Trn2.pci_device_id(), 0x7364);
        assert_eq!(PCI_VENDOR_ID, 0x1d0f);
        assert_eq!(Arch::V3Trn2.dies(), 2);
        assert_eq!(Arch::V2Trn1.misc_ram_bar0_offset(), 0x30fa0000);
        assert_eq!(Arch::V3Trn2.misc_ram_bar0_offset(), 0x6c84000);
    }

    #[test]
    fn h2t() {
        assert_eq!(Arch::V2Trn1.h2t_engine(0), Some(32));
        assert_eq!(Arch::V2Trn1.h2t_engine(1), Some(33));
        assert_eq!(Arch::V2Trn1.h2t_engine(2), None);
        assert_eq!(Arch::V2Inf2.h2t_default_queue(1), Some(0));
        let v3: Vec<_> = (0..8).filter_map(|n| Arch::V3Trn2.h2t_engine(n)).collect();
        assert_eq!(v3, [128, 128, 129, 129, 130, 130, 131, 131]);
        let q: Vec<_> = (0..8)
            .filter_map(|n| Arch::V3Trn2.h2t_default_queue(n))
            .collect();
        assert_eq!(q, [0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(Arch::V3Trn2.h2t_engine(8), None);
        assert_eq!(Arch::V3Trn2.h2t_default_queue(8), None);
    }

    #[test]
    fn memory() {
        assert_eq!(Arch::V2Trn1.host_base_bit(), 0x100000000000);
        assert_eq!(Arch::V3Trn2.host_base_bit(), 0x400000000000);
        assert_eq!(Arch::V2Trn1.hbm_count(), 2);
        assert_eq!(Arch::V2Trn1.hbm_base(0), Some(0));
        assert_eq!(Arch::V2Trn1.hbm_base(1), Some(0x1000000000));
        assert_eq!(Arch::V2Trn1.hbm_base(2), None);
        assert_eq!(Arch::V2Trn1.hbm_size(), 16 << 30);
        assert_eq!(Arch::V3Trn2.hbm_count(), 4);
        assert_eq!(Arch::V3Trn2.hbm_base(0), Some(0));
        assert_eq!(Arch::V3Trn2.hbm_base(1), Some(0x4000000000));
        assert_eq!(Arch::V3Trn2.hbm_base(2), Some(0x800000000000));
        assert_eq!(Arch::V3Trn2.hbm_base(3), Some(0x804000000000));
        assert_eq!(Arch::V3Trn2.hbm_base(4), None);
        assert_eq!(Arch::V3Trn2.hbm_size(), 24 << 30);
        assert_eq!(Arch::V3Trn2.hbm_reserved_bytes(), 16 << 20);
        assert_eq!(Arch::V2Trn1.hbm_bar4_offset(1), Some(16 << 30));
        assert_eq!(Arch::V3Trn2.hbm_bar4_offset(3), Some(3 * (64 << 30)));
        assert_eq!(Arch::V3Trn2.hbm_bar4_offset(4), None);
    }

    #[test]
    fn sysfs_strings() {
        let s = |a: Arch| {
            (
                a.arch_type(),
                a.nc_arch_type(),
                a.instance_type(),
                a.device_name(),
            )
        };
        assert_eq!(s(Arch::V2Trn1), ("v2", "v2", "Trn1", "Trainium1"));
        assert_eq!(s(Arch::V2Inf2), ("v3", "v2", "Inf2", "Inferentia2"));
        assert_eq!(s(Arch::V3Trn2), ("v3", "v3", "Trn2", "Trainium2"));
    }

    #[test]
    fn mmap_offsets() {
        assert_eq!(
            Arch::V2Trn1.tpb_semaphore_mmap_offset(0),
            Some(0xfffc2700000)
        );
        assert_eq!(
            Arch::V2Trn1.tpb_semaphore_mmap_offset(1),
            Some(0xfffc6700000)
        );
        assert_eq!(Arch::V2Trn1.tpb_semaphore_mmap_offset(2), None);
        assert_eq!(Arch::V2Trn1.tpb_sbuf_mmap_offset(1), Some(0xfffc4000000));
        assert_eq!(
            Arch::V3Trn2.tpb_semaphore_mmap_offset(0),
            Some(0x2002700000)
        );
        assert_eq!(
            Arch::V3Trn2.tpb_semaphore_mmap_offset(7),
            Some(0x2002700000 + 7 * 0x4000000)
        );
        assert_eq!(
            Arch::V3Trn2.tpb_sbuf_mmap_offset(3),
            Some(0x2000000000 + 3 * 0x4000000)
        );
        assert_eq!(Arch::V3Trn2.tpb_sbuf_mmap_offset(8), None);
        assert_eq!(TPB_SEMAPHORE_MMAP_SIZE, 0x2000);
        assert_eq!(TPB_SBUF_MMAP_SIZE, 0x2000000);
        assert_eq!(Arch::V2Trn1.tpb_bar0_offset(1), Some(0x4000000));
        assert_eq!(Arch::V3Trn2.tpb_bar0_offset(2), Some(0xd8000000));
        assert_eq!(
            Arch::V2Trn1.topsp_mmap_offset(5),
            Some(0xfffd0000000 + 5 * 0x400000)
        );
        assert_eq!(Arch::V2Trn1.topsp_mmap_offset(6), None);
        assert_eq!(Arch::V2Trn1.topsp_bar0_offset(2), Some(0x10800000));
        assert_eq!(
            Arch::V3Trn2.topsp_mmap_offset(7),
            Some(0x8280000000 + 7 * 0x40000000)
        );
        assert_eq!(Arch::V3Trn2.topsp_mmap_offset(8), Some(0x808280000000));
        assert_eq!(
            Arch::V3Trn2.topsp_mmap_offset(15),
            Some(0x808280000000 + 7 * 0x40000000)
        );
        assert_eq!(Arch::V3Trn2.topsp_bar0_offset(8), Some(0xf2800000));
        assert_eq!(Arch::V3Trn2.topsp_bar0_offset(1), Some(0xf0400000));
    }

    #[test]
    fn resource_table() {
        let w = Arch::V2Trn1.resource_mmap(MMAP_BLOCK_TPB, 1, MMAP_RESOURCE_SEMAPHORE);
        assert_eq!(
            w.map(|w| (w.offset, w.size, w.bar, w.bar_offset)),
            Some((0xfffc6700000, 0x2000, 0, 0x6700000))
        );
        let w = Arch::V3Trn2.resource_mmap(MMAP_BLOCK_TPB, 0, MMAP_RESOURCE_SEMAPHORE);
        assert_eq!(
            w.map(|w| (w.offset, w.bar_offset)),
            Some((0x2002700000, 0xd2700000))
        );
        let w = Arch::V3Trn2.resource_mmap(MMAP_BLOCK_TOPSP, 9, MMAP_RESOURCE_ALL);
        assert_eq!(
            w.map(|w| (w.offset, w.size, w.bar_offset, w.read_only)),
            Some((0x808280000000 + 0x40000000, 0x400000, 0xf2c00000, true))
        );
        let w = Arch::V3Trn2.resource_mmap(MMAP_BLOCK_HBM, 2, MMAP_RESOURCE_DMEM);
        assert_eq!(
            w.map(|w| (w.offset, w.size, w.bar, w.bar_offset)),
            Some((0x800000000000, 24 << 30, 4, 128 << 30))
        );
        assert_eq!(
            Arch::V2Trn1.resource_mmap(MMAP_BLOCK_HBM, 0, MMAP_RESOURCE_DMEM),
            None
        );
        assert_eq!(
            Arch::V2Trn1.resource_mmap(MMAP_BLOCK_TPB, 0, MMAP_RESOURCE_ALL),
            None
        );
        assert_eq!(Arch::V2Trn1.resource_mmap(u32::MAX, 0, 0), None);
        // Row counts: v2 2×2 TPB + 6×2 TOP_SP; v3 8×2 + 16×2 + 4 HBM.
        assert_eq!(Arch::V2Trn1.resource_windows().count(), 16);
        assert_eq!(Arch::V3Trn2.resource_windows().count(), 52);
        // Exact offset + exact size.
        assert!(Arch::V2Trn1.find_resource(0xfffc2700000, 0x2000).is_some());
        assert!(Arch::V2Trn1.find_resource(0xfffc2700000, 0x1000).is_none());
        let sem = Arch::V2Trn1.find_resource(0xfffd0000000, 0x2000);
        let all = Arch::V2Trn1.find_resource(0xfffd0000000, 0x400000);
        assert_eq!(sem.map(|w| w.resource), Some(MMAP_RESOURCE_SEMAPHORE));
        assert_eq!(all.map(|w| w.read_only), Some(true));
    }

    #[test]
    fn routing_tables() {
        assert_eq!(Arch::V2Inf2.routing_id_table(), None);
        for a in [Arch::V2Trn1, Arch::V3Trn2] {
            let t = a.routing_id_table().copied().unwrap_or_default();
            let mut s = t;
            s.sort_unstable();
            assert_eq!(
                s,
                core::array::from_fn::<u32, 16, _>(|i| i as u32),
                "{a} is a permutation"
            );
        }
    }
}
