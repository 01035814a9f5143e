//! One machine snapshot through the real driver ABI, as AWS's tools gather it: each
//! `/dev/neuronN` (DEVICE_INFO, DEVICE_BDF(_EXT), DEVICE_GET_ALL_APPS_INFO), each process's
//! datastore page (ACQUIRE_NEURON_DS with its pid, mapped read-only), the sysfs files under a
//! root (`NEURON_SYSFS_ROOT`, default `/`), `/proc/<pid>/{cmdline,stat}`, `/proc/stat` and
//! `/proc/meminfo`.

use neuron_abi::arch::Arch;
use neuron_abi::consts::APPS_INFO_PID_MEM_USAGE;
use neuron_abi::ioctl::{
    NEURON_IOCTL_DEVICE_BDF, NEURON_IOCTL_DEVICE_BDF_EXT, NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO,
    NEURON_IOCTL_DEVICE_INFO,
};
use neuron_abi::nds::{self, NdCounter};
use neuron_abi::nds_runtime::{self as rta, RuntimeArea};
use neuron_abi::structs::{AppInfo, DeviceBdf, DeviceBdfExt, DeviceInfo, GetAppsInfo};
use neuron_abi::{DeviceFile, Errno};
use neuron_runtime::drv::ioctl_struct;
use neuron_runtime::sys::SysDevice;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// Most processes asked for per device (the driver has 16 attach slots).
pub const MAX_APPS: usize = 64;

/// Where a snapshot's devices come from.
pub trait Devices {
    /// How many `/dev/neuronN` there are.
    fn count(&self) -> u32;
    /// Open device `index` read-write.
    fn open(&self, index: u32) -> Result<Arc<dyn DeviceFile>, Errno>;
    /// The pid the driver knows this tool's fds by (left out of the process lists).
    fn own_pid(&self) -> u32 {
        std::process::id()
    }
}

/// The real nodes, with real syscalls (the real driver, or the preload shim).
#[derive(Debug, Default)]
pub struct SysDevices;

impl Devices for SysDevices {
    fn count(&self) -> u32 {
        SysDevice::count_present()
    }
    fn open(&self, index: u32) -> Result<Arc<dyn DeviceFile>, Errno> {
        Ok(Arc::new(SysDevice::open(&format!("/dev/neuron{index}"))?))
    }
}

/// Where the files are read: `sysfs` (default `/`, `NEURON_SYSFS_ROOT`) and `/proc`.
#[derive(Debug, Clone)]
pub struct Roots {
    pub sysfs: PathBuf,
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            sysfs: PathBuf::from("/"),
            proc: PathBuf::from("/proc"),
        }
    }
}

impl Roots {
    /// The default roots, with `NEURON_SYSFS_ROOT` if set.
    pub fn from_env() -> Roots {
        let mut r = Roots::default();
        if let Some(v) = std::env::var_os("NEURON_SYSFS_ROOT").filter(|v| !v.is_empty()) {
            r.sysfs = PathBuf::from(v);
        }
        r
    }

    /// A sysfs file's trimmed contents (`rel` without the leading `/`), at most 64 KiB.
    pub fn sys(&self, rel: &str) -> Option<String> {
        read_small(&self.sysfs.join(rel.trim_start_matches('/')))
    }

    /// A sysfs file of device `nd` (`/sys/devices/virtual/neuron_device/neuron<nd>/<rel>`).
    pub fn dev_sys(&self, nd: u32, rel: &str) -> Option<String> {
        self.sys(&format!(
            "sys/devices/virtual/neuron_device/neuron{nd}/{rel}"
        ))
    }

    fn proc_file(&self, rel: &str) -> Option<Vec<u8>> {
        read_bounded(&self.proc.join(rel))
    }
}

fn read_bounded(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p).ok()?;
    let mut v = Vec::new();
    f.take(1 << 16).read_to_end(&mut v).ok()?;
    Some(v)
}

fn read_small(p: &Path) -> Option<String> {
    read_bounded(p).map(|b| String::from_utf8_lossy(&b).trim().to_string())
}

/// The instance, from the DMI files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Instance {
    /// `/sys/devices/virtual/dmi/id/product_name` (e.g. `trn2.48xlarge`).
    pub instance_type: String,
    /// `/sys/devices/virtual/dmi/id/board_asset_tag` (e.g. `i-0123...`).
    pub instance_id: String,
}

/// Memory-error counts of one device (`stats/hardware/*`; corrected counts are not exposed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ecc {
    pub mem_ecc_corrected: u64,
    pub mem_ecc_uncorrected: u64,
    pub sram_ecc_corrected: u64,
    pub sram_ecc_uncorrected: u64,
}

/// One process attached to a device.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: u32,
    /// The full command line, arguments joined by spaces.
    pub command: String,
    /// Its datastore page (a consistent copy), `None` for a process that never took one.
    pub page: Option<Vec<u8>>,
    /// Host and device bytes the driver charges to it (GET_ALL_APPS_INFO).
    pub host_bytes: u64,
    pub device_bytes: u64,
    /// (user, system) clock ticks from `/proc/<pid>/stat`.
    pub cpu_ticks: Option<(u64, u64)>,
}

impl Process {
    /// Whether it runs a Neuron runtime (it has a datastore page).
    pub fn is_runtime(&self) -> bool {
        self.page.as_deref().is_some_and(nds::is_initialised)
    }

    /// Its runtime version (`"2.0.0"`), from the RUNTIME_VERSION counter.
    pub fn runtime_version(&self) -> Option<String> {
        let page = self.page.as_deref().filter(|p| nds::is_initialised(p))?;
        let v =
            nds::nd_counter_offset(NdCounter::RUNTIME_VERSION).map(|o| nds::read_u64(page, o))?;
        let (ma, mi, b) = neuron_runtime::nds::decode_version(v);
        Some(format!("{ma}.{mi}.{b}"))
    }

    /// The runtime's records, if the page has this project's.
    pub fn area(&self) -> Option<RuntimeArea> {
        self.page.as_deref().and_then(RuntimeArea::of_page)
    }

    /// `NEURON_PROCESS_TAG` (default the pid).
    pub fn tag(&self) -> String {
        self.area()
            .map(|a| rta::c_str(&a.process.tag))
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| self.pid.to_string())
    }
}

/// One device.
#[derive(Debug, Clone)]
pub struct Device {
    pub index: u32,
    pub arch: Arch,
    /// `0000:cc:00.0`.
    pub bdf: String,
    pub cpu_affinity: String,
    pub numa_node: String,
    /// Devices it is connected to (empty on a single-device instance).
    pub connected_to: Vec<u32>,
    pub ecc: Ecc,
    pub processes: Vec<Process>,
}

impl Device {
    /// Physical NeuronCores.
    pub fn physical_cores(&self) -> u32 {
        self.arch.nc_count()
    }
    /// NeuronCores per logical core (2 on trn2, 1 elsewhere).
    pub fn lnc(&self) -> u32 {
        lnc(self.arch)
    }
    /// Logical NeuronCores (what the tools call the device's cores).
    pub fn nc_count(&self) -> u32 {
        self.physical_cores() / self.lnc()
    }
    /// HBM bytes.
    pub fn memory_size(&self) -> u64 {
        self.arch.hbm_size() * self.arch.hbm_count() as u64
    }
    /// Global logical core ids of this device.
    pub fn neuroncore_ids(&self) -> Vec<u32> {
        let n = self.nc_count();
        (self.index * n..self.index * n + n).collect()
    }
    /// Short BDF as the current table shows it (`cc:00.0`).
    pub fn short_bdf(&self) -> String {
        self.bdf
            .split_once(':')
            .map_or(self.bdf.as_str(), |x| x.1)
            .to_string()
    }
}

/// Logical NeuronCore size of an arch.
pub fn lnc(arch: Arch) -> u32 {
    match arch {
        Arch::V3Trn2 => 2,
        _ => 1,
    }
}

/// `/proc/stat`'s cpu lines and context switches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuStat {
    /// "cpu" (aggregate) first, then "cpu0", ...: user, nice, system, idle, iowait, irq, softirq.
    pub cpus: Vec<(String, [u64; 7])>,
    pub ctxt: u64,
}

/// `/proc/meminfo` in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub used: u64,
    pub swap_total: u64,
    pub swap_used: u64,
}

/// Everything the tools show, at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub at: Instant,
    pub instance: Instance,
    pub devices: Vec<Device>,
    pub cpu: Option<CpuStat>,
    pub mem: Option<MemInfo>,
    pub clk_tck: u64,
}

impl Snapshot {
    /// Gather one: every device `devs` has, its processes and their pages, the files.
    /// `Err` only when there is no device at all or the first one cannot be opened.
    pub fn take(devs: &dyn Devices, roots: &Roots) -> Result<Snapshot, String> {
        let count = devs.count();
        if count == 0 {
            return Err("No neuron devices found".into());
        }
        let instance = Instance {
            instance_type: roots
                .sys("sys/devices/virtual/dmi/id/product_name")
                .unwrap_or_default(),
            instance_id: roots
                .sys("sys/devices/virtual/dmi/id/board_asset_tag")
                .unwrap_or_default(),
        };
        let mut devices = Vec::new();
        for i in 0..count.min(64) {
            match devs.open(i) {
                Ok(f) => devices.push(device(&f, i, devs.own_pid(), count, roots, &instance)),
                Err(e) if i == 0 => return Err(format!("failed to open /dev/neuron0: {e}")),
                Err(_) => {}
            }
        }
        Ok(Snapshot {
            at: Instant::now(),
            instance,
            devices,
            cpu: roots.proc_file("stat").map(|b| parse_proc_stat(&b)),
            mem: roots.proc_file("meminfo").map(|b| parse_meminfo(&b)),
            clk_tck: clk_tck(),
        })
    }

    /// Every runtime process over all devices, once per (device, pid).
    pub fn runtimes(&self) -> impl Iterator<Item = (&Device, &Process)> {
        self.devices
            .iter()
            .flat_map(|d| d.processes.iter().map(move |p| (d, p)))
            .filter(|(_, p)| p.is_runtime())
    }
}

/// Clock ticks per second of `/proc` times: USER_HZ, 100 on every Linux user-space ABI.
fn clk_tck() -> u64 {
    100
}

fn device(
    f: &Arc<dyn DeviceFile>,
    index: u32,
    own_pid: u32,
    count: u32,
    roots: &Roots,
    inst: &Instance,
) -> Device {
    let mut info = DeviceInfo::new_zeroed();
    let arch_num = ioctl_struct(&**f, NEURON_IOCTL_DEVICE_INFO, &mut info)
        .map(|_| info.architecture)
        .unwrap_or(0);
    let name = roots.dev_sys(index, "info/architecture/device_name");
    let arch = match arch_num {
        3 => Arch::V3Trn2,
        _ if name.as_deref() == Some("Inferentia2") || inst.instance_type.starts_with("inf2") => {
            Arch::V2Inf2
        }
        2 => Arch::V2Trn1,
        _ => Arch::V3Trn2,
    };
    let mut ext = DeviceBdfExt::new_zeroed();
    let bdf = if ioctl_struct(&**f, NEURON_IOCTL_DEVICE_BDF_EXT, &mut ext).is_ok() {
        format!(
            "{:04x}:{:02x}:{:02x}.{}",
            ext.domain, ext.bus_number, ext.slot, ext.func
        )
    } else {
        let mut b = DeviceBdf::new_zeroed();
        match ioctl_struct(&**f, NEURON_IOCTL_DEVICE_BDF, &mut b) {
            Ok(()) => format!("0000:{:02x}:{:02x}.{}", b.bus_number, b.slot, b.func),
            Err(_) => String::new(),
        }
    };
    let pci = |file: &str| roots.sys(&format!("sys/bus/pci/devices/{bdf}/{file}"));
    let cpu_affinity = pci("local_cpulist")
        .or_else(|| roots.sys("sys/devices/system/cpu/online"))
        .unwrap_or_default();
    let numa_node = pci("numa_node").unwrap_or_else(|| "-1".into());
    let mut connected_to: Vec<u32> = roots
        .dev_sys(index, "connected_devices")
        .map(|s| {
            s.split(|c: char| c == ',' || c.is_whitespace())
                .filter_map(|t| t.trim().parse().ok())
                .take(16)
                .collect()
        })
        .unwrap_or_default();
    if connected_to.is_empty() && info.connected_device_count > 0 && count > 1 {
        let n = (info.connected_device_count as usize).min(info.connected_devices.len());
        connected_to = info.connected_devices[..n].to_vec();
    }
    let hw = |n: &str| {
        roots
            .dev_sys(index, &format!("stats/hardware/{n}"))
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let ecc = Ecc {
        mem_ecc_corrected: 0,
        mem_ecc_uncorrected: hw("mem_ecc_uncorrected") + hw("mem_ecc_repairable_uncorrected"),
        sram_ecc_corrected: 0,
        sram_ecc_uncorrected: hw("sram_ecc_uncorrected"),
    };
    let processes = apps(f)
        .into_iter()
        .filter(|a| a.pid > 0 && a.pid as u32 != own_pid)
        .map(|a| process(f, &a, roots))
        .collect();
    Device {
        index,
        arch,
        bdf,
        cpu_affinity,
        numa_node,
        connected_to,
        ecc,
        processes,
    }
}

/// DEVICE_GET_ALL_APPS_INFO: the header plus room for [`MAX_APPS`] entries.
fn apps(f: &Arc<dyn DeviceFile>) -> Vec<AppInfo> {
    let hdr_len = std::mem::size_of::<GetAppsInfo>();
    let ent = std::mem::size_of::<AppInfo>();
    let mut buf = vec![0u8; hdr_len + MAX_APPS * ent];
    let hdr = GetAppsInfo {
        apps_info_flags: APPS_INFO_PID_MEM_USAGE,
        capacity: MAX_APPS as u32,
        ..FromZeros::new_zeroed()
    };
    buf[..hdr_len].copy_from_slice(hdr.as_bytes());
    // SAFETY: `buf` holds the header and `capacity` entries, as the command expects.
    #[allow(unsafe_code)]
    let r = unsafe { f.ioctl(NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO, buf.as_mut_ptr()) };
    if r.is_err() {
        return Vec::new();
    }
    let n = GetAppsInfo::read_from_prefix(&buf)
        .map(|(h, _)| h.size as usize)
        .unwrap_or(0)
        .min(MAX_APPS);
    (0..n)
        .filter_map(|i| {
            let o = hdr_len + i * ent;
            AppInfo::read_from_bytes(buf.get(o..o + ent)?).ok()
        })
        .collect()
}

fn process(f: &Arc<dyn DeviceFile>, a: &AppInfo, roots: &Roots) -> Process {
    let pid = a.pid as u32;
    let page = neuron_runtime::nds::read_page(f, a.pid).ok();
    let from_proc = roots
        .proc_file(&format!("{pid}/cmdline"))
        .filter(|c| !c.is_empty());
    let from_page = page.as_deref().and_then(RuntimeArea::of_page).map(|ar| {
        ar.process.cmdline[..(ar.process.cmdline_len as usize).min(rta::CMDLINE_MAX)].to_vec()
    });
    let command = from_proc
        .or(from_page)
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let cpu_ticks = roots
        .proc_file(&format!("{pid}/stat"))
        .and_then(|b| parse_pid_stat(&b));
    Process {
        pid,
        command,
        page,
        host_bytes: a.host_mem_size,
        device_bytes: a.device_mem_size,
        cpu_ticks,
    }
}

/// (utime, stime) of `/proc/<pid>/stat` (fields 14 and 15, after the parenthesised name).
pub fn parse_pid_stat(b: &[u8]) -> Option<(u64, u64)> {
    let s = String::from_utf8_lossy(b);
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// `/proc/stat`: the cpu lines (bounded to 4096 cpus) and `ctxt`.
pub fn parse_proc_stat(b: &[u8]) -> CpuStat {
    let s = String::from_utf8_lossy(b);
    let mut st = CpuStat::default();
    for line in s.lines() {
        let mut it = line.split_whitespace();
        match it.next() {
            Some(name) if name.starts_with("cpu") && st.cpus.len() < 4097 => {
                let mut v = [0u64; 7];
                for (slot, t) in v.iter_mut().zip(it) {
                    *slot = t.parse().unwrap_or(0);
                }
                st.cpus.push((name.to_string(), v));
            }
            Some("ctxt") => st.ctxt = it.next().and_then(|t| t.parse().ok()).unwrap_or(0),
            _ => {}
        }
    }
    st
}

/// `/proc/meminfo` in bytes (kB fields × 1024).
pub fn parse_meminfo(b: &[u8]) -> MemInfo {
    let s = String::from_utf8_lossy(b);
    let get = |k: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kb| kb.saturating_mul(1024))
    };
    let total = get("MemTotal");
    let avail = get("MemAvailable");
    let swap_total = get("SwapTotal");
    MemInfo {
        total,
        used: total.saturating_sub(avail),
        swap_total,
        swap_used: swap_total.saturating_sub(get("SwapFree")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_parsers() {
        let st = parse_proc_stat(
            b"cpu  10 1 5 100 2 0 1 0 0 0\ncpu0 10 1 5 100 2 0 1 0\nintr 5\nctxt 777\n",
        );
        assert_eq!(st.cpus.len(), 2);
        assert_eq!(st.cpus[0].1, [10, 1, 5, 100, 2, 0, 1]);
        assert_eq!(st.ctxt, 777);
        let m = parse_meminfo(b"MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 400 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n");
        assert_eq!((m.total, m.used), (1000 * 1024, 600 * 1024));
        assert_eq!(
            parse_pid_stat(b"42 (a b) S 1 2 3 4 5 6 7 8 9 10 11 12 13"),
            Some((11, 12))
        );
        assert_eq!(parse_pid_stat(b"garbage"), None);
    }
}
