//! Discovery ioctls: device / driver info, versions, PCI address, device ids and maps, the apps
//! table, VA placement and mmap resource lookup (`driver-abi.md` §2.3).

use super::{Ctx, R};
use neuron_abi::arch::Arch;
use neuron_abi::consts::{
    APPS_INFO_PID_MEM_USAGE, APPS_INFO_PID_NC_LOCK_INFO, DRIVER_FEATURE_FLAGS1_2_26,
    DRIVER_INFO_SIZE, NC_MAP_MAX_ENTRIES,
};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

/// A fake kernel virtual address for BAR0 (what DEVICE_INFO reports as `bar_address[0]`).
pub const BAR0_KVA: u64 = 0xffff_c900_0000_0000;
/// The PCI revision the emulated devices report.
pub const REVISION: u32 = 0;

/// The made-up, stable PCI address of device `index`: domain 0, bus 0x10 + index, slot 0x1c,
/// function 0 (`0000:10:1c.0` for /dev/neuron0).
pub fn pci_bdf(index: usize) -> (u32, u32, u8, u8) {
    (0, 0x10 + index as u32, 0x1c, 0)
}

/// BAR0 length reported by DEVICE_INFO: v2 1 GiB, v3 4 GiB (covers every landmark of §6).
pub(crate) fn bar0_size(arch: Arch) -> u64 {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => 0x4000_0000,
        Arch::V3Trn2 => 0x1_0000_0000,
    }
}

/// The firmware routing id of device `index` (the inverse of the arch's routing table).
pub(crate) fn routing_id(arch: Arch, index: u32) -> u32 {
    arch.routing_id_table()
        .and_then(|t| t.iter().position(|&d| d == index))
        .map_or(index, |p| p as u32)
}

/// The device-memory mapping of the caller holding `[va, va+len)`: (device index, HBM index).
pub(crate) fn va_lookup(cx: &Ctx, va: u64, len: u64) -> Option<(usize, u32)> {
    let maps = cx.global().lock_va();
    let (&start, &(pid, mlen, dev, hbm)) = maps.range(..=(va as usize)).next_back()?;
    let end = va.checked_add(len)?;
    (pid == cx.pid() && end <= start as u64 + mlen as u64).then_some((dev, hbm))
}

#[derive(Debug)]
pub(crate) enum Req {
    BasicInfo,
    DeviceInfo,
    DriverInfoGet,
    DriverInfoSet,
    CompatibleVersion,
    Bdf,
    BdfExt(DeviceBdfExt),
    HostDeviceId,
    RidMap,
    /// GET_LOGICAL_TO_PHYSICAL_NC_MAP: entries wanted (≤ NC_MAP_MAX_ENTRIES), output pointer.
    NcMap {
        max: u32,
        out: u64,
    },
    AppsInfo(GetAppsInfo),
    AppPid,
    VaPlacement(GetVaPlacement),
    ResourceMmapInfo(ResourceMmapInfo),
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(Ok(match cmd {
            NEURON_IOCTL_DEVICE_BASIC_INFO => Req::BasicInfo,
            NEURON_IOCTL_DEVICE_INFO => Req::DeviceInfo,
            NEURON_IOCTL_DRIVER_INFO_GET => Req::DriverInfoGet,
            NEURON_IOCTL_DRIVER_INFO_SET => Req::DriverInfoSet,
            NEURON_IOCTL_COMPATIBLE_VERSION => Req::CompatibleVersion,
            NEURON_IOCTL_DEVICE_BDF => Req::Bdf,
            NEURON_IOCTL_DEVICE_BDF_EXT => match cx.arg::<cmd::DEVICE_BDF_EXT>() {
                Ok(a) => Req::BdfExt(a),
                Err(e) => return Some(Err(e)),
            },
            NEURON_IOCTL_HOST_DEVICE_ID => Req::HostDeviceId,
            NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP => Req::RidMap,
            NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP => return Some(decode_nc_map(cx)),
            NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO => {
                match cx.arg::<cmd::DEVICE_GET_ALL_APPS_INFO>() {
                    Ok(a) => Req::AppsInfo(a),
                    Err(e) => return Some(Err(e)),
                }
            }
            NEURON_IOCTL_DEVICE_APP_PID => Req::AppPid,
            NEURON_IOCTL_GET_VA_PLACEMENT => match cx.arg::<cmd::GET_VA_PLACEMENT>() {
                Ok(a) => Req::VaPlacement(a),
                Err(e) => return Some(Err(e)),
            },
            NEURON_IOCTL_RESOURCE_MMAP_INFO => match cx.arg::<cmd::RESOURCE_MMAP_INFO>() {
                Ok(a) => Req::ResourceMmapInfo(a),
                Err(e) => return Some(Err(e)),
            },
            _ => return None,
        }))
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        let arch = cx.arch();
        match self {
            Req::BasicInfo => cx.reply(&DeviceBasicInfo {
                architecture: arch.architecture(),
                revision: REVISION,
            }),
            Req::DeviceInfo => {
                let mut v = DeviceInfo::new_zeroed();
                v.architecture = arch.architecture();
                v.revision = REVISION;
                v.bar_address = [BAR0_KVA, 0];
                v.bar_size = [bar0_size(arch), 0];
                // The instance's links (the driver's fw_io_topology table), at most 8.
                let links = cx.global().instance.connected(cx.index());
                for (slot, d) in v.connected_devices.iter_mut().zip(links) {
                    *slot = *d;
                }
                v.connected_device_count = links.len().min(v.connected_devices.len()) as u32;
                cx.reply(&v)
            }
            Req::DriverInfoGet => cx.reply(&DeviceDriverInfo {
                architecture: arch.architecture(),
                revision: REVISION,
                version: 0,
                size: DRIVER_INFO_SIZE,
                feature_flags1: DRIVER_FEATURE_FLAGS1_2_26,
            }),
            Req::DriverInfoSet => Err(Errno::ENOTSUPP),
            Req::CompatibleVersion => {
                let (min, max) = arch.compat_versions();
                cx.reply(&CompatibleVersion { max, min })
            }
            Req::Bdf => {
                let (_, bus, slot, func) = pci_bdf(cx.index());
                cx.reply(&DeviceBdf {
                    bus_number: bus,
                    slot,
                    func,
                    ..FromZeros::new_zeroed()
                })
            }
            Req::BdfExt(mut a) => {
                // nd_index is relative to this fd's device (container view).
                let idx = (a.nd_index as usize)
                    .checked_add(cx.index())
                    .filter(|i| *i < cx.global().count)
                    .ok_or(Errno::EINVAL)?;
                let (dom, bus, slot, func) = pci_bdf(idx);
                a.domain = dom;
                a.bus_number = bus;
                a.slot = slot;
                a.func = func;
                cx.reply(&a)
            }
            Req::HostDeviceId => cx.reply(&HostDeviceId {
                host_device_id: cx.index() as u32,
            }),
            Req::RidMap => {
                let count = cx.global().count;
                let mut v = HostDeviceIdToRidMap::new_zeroed();
                v.count = count as u32;
                for (i, slot) in v.host_did_to_rid_map.iter_mut().enumerate().take(count) {
                    *slot = routing_id(arch, i as u32);
                }
                cx.reply(&v)
            }
            Req::NcMap { max, out } => nc_map(cx, max, out),
            Req::AppsInfo(hdr) => apps_info(cx, hdr),
            Req::AppPid => {
                let pid = cx.lock().procs[0].map_or(0, |p| p.pid as i32);
                cx.copy_out(cx.arg, &pid.to_le_bytes()).map(|_| 0)
            }
            Req::VaPlacement(mut a) => match va_lookup(cx, a.va, 1) {
                Some((dev, hbm)) => {
                    a.device_index = dev as i32;
                    a.hbm_index = hbm as i32;
                    cx.reply(&a)
                }
                None => {
                    a.device_index = -1;
                    a.hbm_index = -1;
                    cx.reply(&a)?;
                    Err(Errno::ENXIO)
                }
            },
            Req::ResourceMmapInfo(mut a) => {
                let w = arch
                    .resource_mmap(a.block, a.block_id, a.resource)
                    .ok_or(Errno::EINVAL)?;
                a.offset = w.offset;
                a.size = w.size;
                cx.reply(&a)
            }
        }
    }
}

fn decode_nc_map(cx: &Ctx) -> Result<Req, Errno> {
    if cx.arch().architecture() == 2 {
        return Err(Errno::ENOTSUPP);
    }
    let a = cx.arg::<cmd::GET_LOGICAL_TO_PHYSICAL_NC_MAP>()?;
    if a.max_map_entries > NC_MAP_MAX_ENTRIES || a.mapping_version != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Req::NcMap {
        max: a.max_map_entries,
        out: a.map,
    })
}

/// Identity: logical core k of device d is physical core k of device d. The real table is a
/// fixed "SENG swap" permutation (plus a die flip on ultraserver nodes).
fn nc_map(cx: &Ctx, max: u32, out: u64) -> R {
    let max = max as usize;
    let ncs = cx.arch().nc_count() as usize;
    let n = (cx.global().count * ncs).min(max);
    let mut buf = vec![0u8; 4 + 8 * max];
    buf[..4].copy_from_slice(&(n as u32).to_le_bytes());
    for k in 0..n {
        let e = NcMapEntry {
            device_id: (k / ncs) as u32,
            device_nc_idx: (k % ncs) as u32,
        };
        buf[4 + 8 * k..12 + 8 * k].copy_from_slice(e.as_bytes());
    }
    cx.copy_out(out, &buf).map(|_| 0)
}

fn apps_info(cx: &Ctx, mut hdr: GetAppsInfo) -> R {
    let g = cx.lock();
    let mut out: Vec<AppInfo> = Vec::new();
    for p in g.procs.iter().flatten() {
        if out.len() >= hdr.capacity as usize {
            break;
        }
        let mut e = AppInfo::new_zeroed();
        e.pid = p.pid as i32;
        if hdr.apps_info_flags & APPS_INFO_PID_NC_LOCK_INFO != 0 {
            for (nc, c) in g.drv.crwl.iter().take(4).enumerate() {
                if c.writer_pid == p.pid && (c.writer_acquired || c.reader_count > 0) {
                    e.nc_lock_map |= 1 << nc;
                    e.uuid_data[nc].value = c.uuid;
                }
            }
        }
        if hdr.apps_info_flags & APPS_INFO_PID_MEM_USAGE != 0 {
            for c in g.chunks.iter().filter(|c| c.pid == p.pid) {
                if c.host {
                    e.host_mem_size += c.size;
                } else {
                    e.device_mem_size += c.size;
                }
            }
        }
        out.push(e);
    }
    drop(g);
    hdr.size = out.len() as u32;
    cx.reply(&hdr)?;
    cx.copy_out(cx.arg + 16, out.as_bytes()).map(|_| 0)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Bench, PID};
    use super::*;

    #[test]
    fn basic_and_driver_info() {
        let b = Bench::v3();
        let (r, v) = b.io(NEURON_IOCTL_DEVICE_BASIC_INFO, &DeviceBasicInfo::default());
        assert_eq!(r, Ok(0));
        assert_eq!(v.architecture, 3);
        let (r, v) = b.io(NEURON_IOCTL_DRIVER_INFO_GET, &DeviceDriverInfo::default());
        assert_eq!(r, Ok(0));
        assert_eq!((v.size, v.feature_flags1), (24, 0x1ff));
        assert_eq!(b.raw(NEURON_IOCTL_DRIVER_INFO_SET, 0), Err(Errno::ENOTSUPP));
        // A bad pointer is EFAULT, never a crash.
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_INFO, 16), Err(Errno::EFAULT));
    }

    #[test]
    fn device_info_reports_the_instance_links() {
        let emu = crate::Emulator::with_instance(
            &crate::instance::Instance::by_name("trn2.48xlarge").expect("preset"),
        );
        let f = emu.open(0, crate::OpenOptions::default()).expect("open");
        let mut v = DeviceInfo::default();
        // SAFETY: a live, exclusively borrowed argument of the command's size.
        #[allow(unsafe_code)]
        let r = unsafe {
            neuron_abi::DeviceFile::ioctl(
                &f,
                NEURON_IOCTL_DEVICE_INFO,
                v.as_mut_bytes().as_mut_ptr(),
            )
        };
        assert_eq!(r, Ok(0));
        assert_eq!(v.connected_device_count, 4);
        assert_eq!(v.connected_devices[..4], [12, 1, 3, 4]);
        assert_eq!(v.connected_devices[4..], [0; 4]);
        // One device: no links, as before.
        let b = Bench::v3();
        let (r, v) = b.io(NEURON_IOCTL_DEVICE_INFO, &DeviceInfo::default());
        assert_eq!((r, v.connected_device_count), (Ok(0), 0));
    }

    #[test]
    fn bdf_ext_is_relative_and_bounded() {
        let b = Bench::v3();
        let a = DeviceBdfExt {
            nd_index: 1,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_DEVICE_BDF_EXT, &a);
        assert_eq!(r, Ok(0));
        assert_eq!(v.bus_number, 0x11);
        let a = DeviceBdfExt {
            nd_index: 2,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_DEVICE_BDF_EXT, &a), Err(Errno::EINVAL));
    }

    #[test]
    fn nc_map_checks_version_and_size() {
        let b = Bench::v3();
        let out = b.mem.zeroed(4 + 8 * 128);
        let a = GetLogicalToPhysicalNcMap {
            map: out,
            max_map_entries: 3,
            ..Default::default()
        };
        assert_eq!(
            b.run(NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &a),
            Ok(0)
        );
        assert_eq!(b.mem.bytes(out, 4), 3u32.to_le_bytes());
        let bad = GetLogicalToPhysicalNcMap {
            max_map_entries: NC_MAP_MAX_ENTRIES + 1,
            ..a
        };
        assert_eq!(
            b.run(NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &bad),
            Err(Errno::EINVAL)
        );
        let v2 = Bench::v2();
        assert_eq!(
            v2.run(NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP, &a),
            Err(Errno::ENOTSUPP)
        );
    }

    #[test]
    fn app_pid_and_apps_info_show_the_attached_process() {
        let b = Bench::v3();
        let out = b.mem.zeroed(4);
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_APP_PID, out), Ok(0));
        assert_eq!(b.mem.bytes(out, 4), (PID as i32).to_le_bytes());
        b.alloc(8192, false);
        let hdr = GetAppsInfo {
            apps_info_flags: APPS_INFO_PID_MEM_USAGE,
            capacity: 4,
            ..Default::default()
        };
        let mut buf = hdr.as_bytes().to_vec();
        buf.resize(16 + 4 * std::mem::size_of::<AppInfo>(), 0);
        let a = b.mem.put_bytes(&buf);
        assert_eq!(b.raw(NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO, a), Ok(0));
        let h: GetAppsInfo = b.mem.get(a);
        assert_eq!(h.size, 1);
        let e: AppInfo = b.mem.get(a + 16);
        assert_eq!((e.pid, e.device_mem_size), (PID as i32, 8192));
    }

    #[test]
    fn va_placement_of_an_unmapped_address_is_enxio() {
        let b = Bench::v3();
        let (r, v) = b.io(
            NEURON_IOCTL_GET_VA_PLACEMENT,
            &GetVaPlacement {
                va: 0x1000,
                ..Default::default()
            },
        );
        assert_eq!(r, Err(Errno::ENXIO));
        assert_eq!((v.device_index, v.hbm_index), (-1, -1));
    }
}
