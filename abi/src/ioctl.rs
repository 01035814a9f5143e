//! ioctl command values of `neuron.ko` (driver-abi.md §2).
//!
//! Every value below is the exact 32-bit command number given in driver-abi.md §2.3 (2.26.5.0)
//! and §2.6 (later additions). They are copied, never computed from `_IOC` direction/size macros:
//! the driver's encoded directions are not meaningful and many encoded sizes are `sizeof(pointer)`
//! (§2.1). Dispatch must always be on the full 32-bit value.
//!
//! [`COMMANDS`] lists every value exactly once with its metadata; [`lookup`] finds one.

/// ioctl "type"/magic byte of every Neuron command: `'N'` = 0x4E (§2.1).
pub const NEURON_IOCTL_BASE: u8 = b'N';

/// `NEURON_IOCTL_MAX` as declared by the 2.26.5.0 header (§2.1). Note that nr 133
/// (DMA_QUEUE_INIT_BATCH) lies above it.
pub const NEURON_IOCTL_MAX: u8 = 132;

/// `_IOC` direction value "none" (§2.1).
pub const IOC_NONE: u32 = 0;
/// `_IOC` direction bit "write" (`_IOW`, user → kernel) (§2.1).
pub const IOC_WRITE: u32 = 1;
/// `_IOC` direction bit "read" (`_IOR`, kernel → user) (§2.1).
pub const IOC_READ: u32 = 2;

const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = 8;
const IOC_SIZESHIFT: u32 = 16;
const IOC_DIRSHIFT: u32 = 30;
const IOC_SIZEMASK: u32 = (1 << 14) - 1;

/// ioctl number: bits 0-7 of the command (Linux generic `_IOC` layout, §2.1).
pub const fn ioc_nr(cmd: u32) -> u8 {
    ((cmd >> IOC_NRSHIFT) & 0xff) as u8
}

/// ioctl type/magic: bits 8-15 (0x4E for every Neuron command, §2.1).
pub const fn ioc_type(cmd: u32) -> u8 {
    ((cmd >> IOC_TYPESHIFT) & 0xff) as u8
}

/// Encoded argument size: bits 16-29 (§2.1). Often `sizeof(pointer)` = 8 rather than the size
/// of the struct the driver actually copies; see [`CommandInfo::arg_size`].
pub const fn ioc_size(cmd: u32) -> u32 {
    (cmd >> IOC_SIZESHIFT) & IOC_SIZEMASK
}

/// Encoded direction: bits 30-31 ([`IOC_WRITE`] = 1, [`IOC_READ`] = 2, both = 3) (§2.1).
/// Not meaningful for this driver: most input commands are declared `_IOR`.
pub const fn ioc_dir(cmd: u32) -> u32 {
    cmd >> IOC_DIRSHIFT
}

/// ioctl nrs the 2.26.5.0 driver dispatches by `_IOC_NR` first on a normal fd (then selects the
/// struct version by exact value or `_IOC_SIZE`; unknown size → `-EINVAL`) (§2.1).
pub const NR_DISPATCH_BY_NR_NORMAL: &[u8] = &[23, 24, 28, 38, 102, 105, 108, 111, 124];

/// ioctl nrs dispatched by `_IOC_NR` first on the misc path (§2.1).
pub const NR_DISPATCH_BY_NR_MISC: &[u8] = &[110, 115, 121, 122, 123, 131];

/// Driver release in which a command value first appears (§2.2, §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriverVersion {
    /// aws-neuronx-dkms 2.26.5.0 (full source, §2.3).
    V2_26,
    /// 2.27.x (R@f4e736b; version attribution inferred, §2.6).
    V2_27,
    /// 2.28.0.0 (R@9ff8921d, §2.6).
    V2_28,
    /// The newest staging header seen (R@9f5cb0c5, ≥ 2.28, §2.6).
    Newest,
}

/// Metadata of one command value (§2.3, §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandInfo {
    /// Command name as in the doc, without the `NEURON_IOCTL_` prefix (e.g. `"MEM_ALLOC_V2MT"`).
    pub name: &'static str,
    /// Full 32-bit command value.
    pub cmd: u32,
    /// ioctl nr (bits 0-7 of `cmd`).
    pub nr: u8,
    /// First driver release defining this value.
    pub since: DriverVersion,
    /// Flag **M**: also accepted on an `O_WRONLY` "misc" fd (§1, §2.3). Unknown for the post-2.26
    /// commands, which are recorded as `false` (normal fd only).
    pub misc_fd_ok: bool,
    /// Flag **A**: requires the calling process to be attached, else `-EACCES` (§1).
    pub needs_attach: bool,
    /// `sizeof` the argument the driver really copies (the full struct, whatever the encoded
    /// size says); 0 when the command takes no argument or its layout is unpublished
    /// (DMABUF_FD_V2).
    pub arg_size: usize,
}

/// Every known command value, each exactly once: the 101 values of 2.26.5.0 in §2.3 table order,
/// then the §2.6 additions.
pub static COMMANDS: &[CommandInfo] = &[
    CommandInfo {
        name: "DEVICE_INFO",
        cmd: NEURON_IOCTL_DEVICE_INFO,
        nr: 3,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 80,
    },
    CommandInfo {
        name: "DEVICE_BASIC_INFO",
        cmd: NEURON_IOCTL_DEVICE_BASIC_INFO,
        nr: 100,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "DRIVER_INFO_GET",
        cmd: NEURON_IOCTL_DRIVER_INFO_GET,
        nr: 110,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "DRIVER_INFO_SET",
        cmd: NEURON_IOCTL_DRIVER_INFO_SET,
        nr: 110,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: true,
        arg_size: 24,
    },
    CommandInfo {
        name: "COMPATIBLE_VERSION",
        cmd: NEURON_IOCTL_COMPATIBLE_VERSION,
        nr: 93,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "DEVICE_BDF",
        cmd: NEURON_IOCTL_DEVICE_BDF,
        nr: 101,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "DEVICE_BDF_EXT",
        cmd: NEURON_IOCTL_DEVICE_BDF_EXT,
        nr: 106,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "HOST_DEVICE_ID",
        cmd: NEURON_IOCTL_HOST_DEVICE_ID,
        nr: 114,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 4,
    },
    CommandInfo {
        name: "HOST_DEVICE_ID_TO_RID_MAP",
        cmd: NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP,
        nr: 115,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 260,
    },
    CommandInfo {
        name: "GET_LOGICAL_TO_PHYSICAL_NC_MAP",
        cmd: NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP,
        nr: 120,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "POD_INFO",
        cmd: NEURON_IOCTL_POD_INFO,
        nr: 121,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 260,
    },
    CommandInfo {
        name: "POD_STATUS",
        cmd: NEURON_IOCTL_POD_STATUS,
        nr: 122,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 268,
    },
    CommandInfo {
        name: "POD_STATUS_V2",
        cmd: NEURON_IOCTL_POD_STATUS_V2,
        nr: 122,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 276,
    },
    CommandInfo {
        name: "POD_CTRL",
        cmd: NEURON_IOCTL_POD_CTRL,
        nr: 123,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "POD_CTRL_V2",
        cmd: NEURON_IOCTL_POD_CTRL_V2,
        nr: 123,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 20,
    },
    CommandInfo {
        name: "DEVICE_GET_ALL_APPS_INFO",
        cmd: NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO,
        nr: 7,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "DEVICE_APP_PID",
        cmd: NEURON_IOCTL_DEVICE_APP_PID,
        nr: 6,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 4,
    },
    CommandInfo {
        name: "GET_VA_PLACEMENT",
        cmd: NEURON_IOCTL_GET_VA_PLACEMENT,
        nr: 131,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "MEM_ALLOC",
        cmd: NEURON_IOCTL_MEM_ALLOC,
        nr: 21,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 32,
    },
    CommandInfo {
        name: "MEM_ALLOC_V2",
        cmd: NEURON_IOCTL_MEM_ALLOC_V2,
        nr: 102,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 40,
    },
    CommandInfo {
        name: "MEM_ALLOC_V2MT",
        cmd: NEURON_IOCTL_MEM_ALLOC_V2MT,
        nr: 102,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 48,
    },
    CommandInfo {
        name: "MEM_ALLOC_V2MT64",
        cmd: NEURON_IOCTL_MEM_ALLOC_V2MT64,
        nr: 102,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 56,
    },
    CommandInfo {
        name: "MEM_FREE",
        cmd: NEURON_IOCTL_MEM_FREE,
        nr: 22,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 8,
    },
    CommandInfo {
        name: "MEM_GET_EXTENDED_INFO",
        cmd: NEURON_IOCTL_MEM_GET_EXTENDED_INFO,
        nr: 29,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 48,
    },
    CommandInfo {
        name: "MEM_GET_PA",
        cmd: NEURON_IOCTL_MEM_GET_PA,
        nr: 25,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 16,
    },
    CommandInfo {
        name: "MEM_GET_INFO",
        cmd: NEURON_IOCTL_MEM_GET_INFO,
        nr: 26,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 24,
    },
    CommandInfo {
        name: "MEM_MC_GET_INFO",
        cmd: NEURON_IOCTL_MEM_MC_GET_INFO,
        nr: 111,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "MEM_MC_GET_INFO_V2",
        cmd: NEURON_IOCTL_MEM_MC_GET_INFO_V2,
        nr: 111,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "DUMP_MEM_CHUNKS",
        cmd: NEURON_IOCTL_DUMP_MEM_CHUNKS,
        nr: 116,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "MEM_COPY",
        cmd: NEURON_IOCTL_MEM_COPY,
        nr: 23,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 32,
    },
    CommandInfo {
        name: "MEM_COPY64",
        cmd: NEURON_IOCTL_MEM_COPY64,
        nr: 23,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 40,
    },
    CommandInfo {
        name: "MEM_COPY_ASYNC",
        cmd: NEURON_IOCTL_MEM_COPY_ASYNC,
        nr: 108,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 48,
    },
    CommandInfo {
        name: "MEM_COPY_ASYNC64",
        cmd: NEURON_IOCTL_MEM_COPY_ASYNC64,
        nr: 108,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 56,
    },
    CommandInfo {
        name: "MEM_COPY_ASYNC_WAIT",
        cmd: NEURON_IOCTL_MEM_COPY_ASYNC_WAIT,
        nr: 109,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 24,
    },
    CommandInfo {
        name: "MEM_BUF_COPY",
        cmd: NEURON_IOCTL_MEM_BUF_COPY,
        nr: 24,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "MEM_BUF_COPY64",
        cmd: NEURON_IOCTL_MEM_BUF_COPY64,
        nr: 24,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 40,
    },
    CommandInfo {
        name: "MEM_BUF_ZEROCOPY64",
        cmd: NEURON_IOCTL_MEM_BUF_ZEROCOPY64,
        nr: 124,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 48,
    },
    CommandInfo {
        name: "MEM_BUF_ZEROCOPY64_BATCHES",
        cmd: NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES,
        nr: 129,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "MEMSET",
        cmd: NEURON_IOCTL_MEMSET,
        nr: 28,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "MEMSET64",
        cmd: NEURON_IOCTL_MEMSET64,
        nr: 28,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "DMABUF_FD",
        cmd: NEURON_IOCTL_DMABUF_FD,
        nr: 107,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "DMA_ENG_INIT",
        cmd: NEURON_IOCTL_DMA_ENG_INIT,
        nr: 30,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 4,
    },
    CommandInfo {
        name: "DMA_ENG_SET_STATE",
        cmd: NEURON_IOCTL_DMA_ENG_SET_STATE,
        nr: 31,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 8,
    },
    CommandInfo {
        name: "DMA_ENG_GET_STATE",
        cmd: NEURON_IOCTL_DMA_ENG_GET_STATE,
        nr: 32,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "DMA_QUEUE_INIT",
        cmd: NEURON_IOCTL_DMA_QUEUE_INIT,
        nr: 33,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 48,
    },
    CommandInfo {
        name: "DMA_QUEUE_INIT_BATCH",
        cmd: NEURON_IOCTL_DMA_QUEUE_INIT_BATCH,
        nr: 133,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12296,
    },
    CommandInfo {
        name: "DMA_QUEUE_RELEASE",
        cmd: NEURON_IOCTL_DMA_QUEUE_RELEASE,
        nr: 34,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 8,
    },
    CommandInfo {
        name: "DMA_QUEUE_COPY_START",
        cmd: NEURON_IOCTL_DMA_QUEUE_COPY_START,
        nr: 35,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "DMA_ACK_COMPLETED",
        cmd: NEURON_IOCTL_DMA_ACK_COMPLETED,
        nr: 36,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 12,
    },
    CommandInfo {
        name: "DMA_QUEUE_GET_STATE",
        cmd: NEURON_IOCTL_DMA_QUEUE_GET_STATE,
        nr: 37,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "DMA_COPY_DESCRIPTORS",
        cmd: NEURON_IOCTL_DMA_COPY_DESCRIPTORS,
        nr: 38,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 32,
    },
    CommandInfo {
        name: "DMA_COPY_DESCRIPTORS64",
        cmd: NEURON_IOCTL_DMA_COPY_DESCRIPTORS64,
        nr: 38,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 40,
    },
    CommandInfo {
        name: "DMA_DESCRIPTOR_COPYOUT",
        cmd: NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT,
        nr: 39,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "DMA_QUIESCE_QUEUES",
        cmd: NEURON_IOCTL_DMA_QUIESCE_QUEUES,
        nr: 40,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 264,
    },
    CommandInfo {
        name: "H2T_DMA_ALLOC_QUEUES",
        cmd: NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES,
        nr: 125,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 20,
    },
    CommandInfo {
        name: "H2T_DMA_FREE_QUEUES",
        cmd: NEURON_IOCTL_H2T_DMA_FREE_QUEUES,
        nr: 126,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "HBM_SCRUB_START",
        cmd: NEURON_IOCTL_HBM_SCRUB_START,
        nr: 118,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "HBM_SCRUB_WAIT",
        cmd: NEURON_IOCTL_HBM_SCRUB_WAIT,
        nr: 119,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "NOTIFICATIONS_INIT_V1",
        cmd: NEURON_IOCTL_NOTIFICATIONS_INIT_V1,
        nr: 51,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 24,
    },
    CommandInfo {
        name: "NOTIFICATIONS_INIT_V2",
        cmd: NEURON_IOCTL_NOTIFICATIONS_INIT_V2,
        nr: 53,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 48,
    },
    CommandInfo {
        name: "NOTIFICATIONS_INIT_WITH_REALLOC_V2",
        cmd: NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2,
        nr: 54,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 56,
    },
    CommandInfo {
        name: "NOTIFICATIONS_DESTROY_V1",
        cmd: NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1,
        nr: 52,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "NOTIFICATIONS_QUEUE_INFO",
        cmd: NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO,
        nr: 58,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "THROTTLING_NOTIFICATIONS",
        cmd: NEURON_IOCTL_THROTTLING_NOTIFICATIONS,
        nr: 130,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 4,
    },
    CommandInfo {
        name: "SEMAPHORE_INCREMENT",
        cmd: NEURON_IOCTL_SEMAPHORE_INCREMENT,
        nr: 41,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "SEMAPHORE_DECREMENT",
        cmd: NEURON_IOCTL_SEMAPHORE_DECREMENT,
        nr: 42,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "SEMAPHORE_READ",
        cmd: NEURON_IOCTL_SEMAPHORE_READ,
        nr: 43,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "SEMAPHORE_WRITE",
        cmd: NEURON_IOCTL_SEMAPHORE_WRITE,
        nr: 44,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "EVENT_SET",
        cmd: NEURON_IOCTL_EVENT_SET,
        nr: 45,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "EVENT_GET",
        cmd: NEURON_IOCTL_EVENT_GET,
        nr: 46,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "BAR_READ",
        cmd: NEURON_IOCTL_BAR_READ,
        nr: 11,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "BAR_WRITE",
        cmd: NEURON_IOCTL_BAR_WRITE,
        nr: 12,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 32,
    },
    CommandInfo {
        name: "READ_HW_COUNTERS",
        cmd: NEURON_IOCTL_READ_HW_COUNTERS,
        nr: 61,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "PROGRAM_ENGINE",
        cmd: NEURON_IOCTL_PROGRAM_ENGINE,
        nr: 27,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "PROGRAM_ENGINE_NC",
        cmd: NEURON_IOCTL_PROGRAM_ENGINE_NC,
        nr: 105,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "PROGRAM_ENGINE_NC64",
        cmd: NEURON_IOCTL_PROGRAM_ENGINE_NC64,
        nr: 105,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 40,
    },
    CommandInfo {
        name: "NC_RESET",
        cmd: NEURON_IOCTL_NC_RESET,
        nr: 103,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "NC_RESET_READY",
        cmd: NEURON_IOCTL_NC_RESET_READY,
        nr: 104,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "DEVICE_RESET",
        cmd: NEURON_IOCTL_DEVICE_RESET,
        nr: 1,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 0,
    },
    CommandInfo {
        name: "DEVICE_READY",
        cmd: NEURON_IOCTL_DEVICE_READY,
        nr: 2,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 1,
    },
    CommandInfo {
        name: "DEVICE_RESET_STATUS",
        cmd: NEURON_IOCTL_DEVICE_RESET_STATUS,
        nr: 106,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 1,
    },
    CommandInfo {
        name: "DEVICE_INIT",
        cmd: NEURON_IOCTL_DEVICE_INIT,
        nr: 4,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 4,
    },
    CommandInfo {
        name: "DEVICE_RELEASE",
        cmd: NEURON_IOCTL_DEVICE_RELEASE,
        nr: 5,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 0,
    },
    CommandInfo {
        name: "CINIT_SET_STATE",
        cmd: NEURON_IOCTL_CINIT_SET_STATE,
        nr: 91,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 12,
    },
    CommandInfo {
        name: "NC_MODEL_STARTED_COUNT",
        cmd: NEURON_IOCTL_NC_MODEL_STARTED_COUNT,
        nr: 92,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "CRWL_READER_ENTER",
        cmd: NEURON_IOCTL_CRWL_READER_ENTER,
        nr: 81,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 36,
    },
    CommandInfo {
        name: "CRWL_READER_EXIT",
        cmd: NEURON_IOCTL_CRWL_READER_EXIT,
        nr: 82,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 36,
    },
    CommandInfo {
        name: "CRWL_WRITER_ENTER",
        cmd: NEURON_IOCTL_CRWL_WRITER_ENTER,
        nr: 83,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 36,
    },
    CommandInfo {
        name: "CRWL_WRITER_DOWNGRADE",
        cmd: NEURON_IOCTL_CRWL_WRITER_DOWNGRADE,
        nr: 84,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 36,
    },
    CommandInfo {
        name: "CRWL_NC_RANGE_MARK",
        cmd: NEURON_IOCTL_CRWL_NC_RANGE_MARK,
        nr: 85,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "CRWL_NC_RANGE_MARK_EXT0",
        cmd: NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0,
        nr: 85,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 80,
    },
    CommandInfo {
        name: "CRWL_NC_RANGE_UNMARK",
        cmd: NEURON_IOCTL_CRWL_NC_RANGE_UNMARK,
        nr: 86,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "CRWL_NC_RANGE_UNMARK_EXT0",
        cmd: NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0,
        nr: 86,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 80,
    },
    CommandInfo {
        name: "ACQUIRE_NEURON_DS",
        cmd: NEURON_IOCTL_ACQUIRE_NEURON_DS,
        nr: 71,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "RELEASE_NEURON_DS",
        cmd: NEURON_IOCTL_RELEASE_NEURON_DS,
        nr: 72,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "NC_PID_STATE_DUMP",
        cmd: NEURON_IOCTL_NC_PID_STATE_DUMP,
        nr: 117,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "POST_METRIC",
        cmd: NEURON_IOCTL_POST_METRIC,
        nr: 13,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: true,
        arg_size: 16,
    },
    CommandInfo {
        name: "METRICS_CTRL",
        cmd: NEURON_IOCTL_METRICS_CTRL,
        nr: 128,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 4,
    },
    CommandInfo {
        name: "POWER_PROFILE",
        cmd: NEURON_IOCTL_POWER_PROFILE,
        nr: 127,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "PRINTK",
        cmd: NEURON_IOCTL_PRINTK,
        nr: 113,
        since: DriverVersion::V2_26,
        misc_fd_ok: true,
        needs_attach: false,
        arg_size: 16,
    },
    CommandInfo {
        name: "RESOURCE_MMAP_INFO",
        cmd: NEURON_IOCTL_RESOURCE_MMAP_INFO,
        nr: 112,
        since: DriverVersion::V2_26,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 32,
    },
    CommandInfo {
        name: "GET_PERFORMANCE_PROFILE",
        cmd: NEURON_IOCTL_GET_PERFORMANCE_PROFILE,
        nr: 132,
        since: DriverVersion::V2_27,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "AVAILABLE_PERF_PROFILES",
        cmd: NEURON_IOCTL_AVAILABLE_PERF_PROFILES,
        nr: 134,
        since: DriverVersion::V2_27,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 36,
    },
    CommandInfo {
        name: "GET_ASYNC_H2T_DMA_COMPL_QUEUES",
        cmd: NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES,
        nr: 135,
        since: DriverVersion::V2_27,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 264,
    },
    CommandInfo {
        name: "MEM_ALLOC_V2MT64_PA",
        cmd: NEURON_IOCTL_MEM_ALLOC_V2MT64_PA,
        nr: 102,
        since: DriverVersion::V2_28,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 64,
    },
    CommandInfo {
        name: "HOST_MEM_PIN",
        cmd: NEURON_IOCTL_HOST_MEM_PIN,
        nr: 136,
        since: DriverVersion::V2_28,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 24,
    },
    CommandInfo {
        name: "HOST_MEM_UNPIN",
        cmd: NEURON_IOCTL_HOST_MEM_UNPIN,
        nr: 137,
        since: DriverVersion::V2_28,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 8,
    },
    CommandInfo {
        name: "DMABUF_FD_V2",
        cmd: NEURON_IOCTL_DMABUF_FD_V2,
        nr: 138,
        since: DriverVersion::Newest,
        misc_fd_ok: false,
        needs_attach: false,
        arg_size: 0,
    },
];

/// Look up a command by its full 32-bit value.
pub fn lookup(cmd: u32) -> Option<&'static CommandInfo> {
    COMMANDS.iter().find(|c| c.cmd == cmd)
}

/// Alias for the 48-byte zero-copy command under its newest-header name (§2.6).
///
/// The newest R header renames the 2.26 struct to `neuron_ioctl_mem_buf_copy64zc_deprecated` and
/// adds a second value on nr 124 for a resized struct whose layout the doc does not give.
/// **(inferred)** the deprecated macro keeps the old struct and therefore the old value; the new
/// value is unknown and not defined here.
pub const NEURON_IOCTL_MEM_BUF_ZEROCOPY64_DEPRECATED: u32 = NEURON_IOCTL_MEM_BUF_ZEROCOPY64;

// ---- command values ----

/// `DEVICE_INFO`: nr 3, since 2.26.5.0 (§2.3); normal fd only; argument [`DeviceInfo`](crate::structs::DeviceInfo).
pub const NEURON_IOCTL_DEVICE_INFO: u32 = 0x80084e03;
/// `DEVICE_BASIC_INFO`: nr 100, since 2.26.5.0 (§2.3); misc fd OK; argument [`DeviceBasicInfo`](crate::structs::DeviceBasicInfo).
pub const NEURON_IOCTL_DEVICE_BASIC_INFO: u32 = 0x40084e64;
/// `DRIVER_INFO_GET`: nr 110, since 2.26.5.0 (§2.3); misc fd OK; argument [`DeviceDriverInfo`](crate::structs::DeviceDriverInfo).
pub const NEURON_IOCTL_DRIVER_INFO_GET: u32 = 0x80184e6e;
/// `DRIVER_INFO_SET`: nr 110, since 2.26.5.0 (§2.3); misc fd OK, requires attached pid; argument [`DeviceDriverInfo`](crate::structs::DeviceDriverInfo).
pub const NEURON_IOCTL_DRIVER_INFO_SET: u32 = 0x40184e6e;
/// `COMPATIBLE_VERSION`: nr 93, since 2.26.5.0 (§2.3); misc fd OK; argument [`CompatibleVersion`](crate::structs::CompatibleVersion).
pub const NEURON_IOCTL_COMPATIBLE_VERSION: u32 = 0x40084e5d;
/// `DEVICE_BDF`: nr 101, since 2.26.5.0 (§2.3); normal fd only; argument [`DeviceBdf`](crate::structs::DeviceBdf).
pub const NEURON_IOCTL_DEVICE_BDF: u32 = 0x80084e65;
/// `DEVICE_BDF_EXT`: nr 106, since 2.26.5.0 (§2.3); misc fd OK; argument [`DeviceBdfExt`](crate::structs::DeviceBdfExt).
pub const NEURON_IOCTL_DEVICE_BDF_EXT: u32 = 0x80084e6a;
/// `HOST_DEVICE_ID`: nr 114, since 2.26.5.0 (§2.3); normal fd only; argument [`HostDeviceId`](crate::structs::HostDeviceId).
pub const NEURON_IOCTL_HOST_DEVICE_ID: u32 = 0x80044e72;
/// `HOST_DEVICE_ID_TO_RID_MAP`: nr 115, since 2.26.5.0 (§2.3); misc fd OK; argument [`HostDeviceIdToRidMap`](crate::structs::HostDeviceIdToRidMap).
pub const NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP: u32 = 0xc1044e73;
/// `GET_LOGICAL_TO_PHYSICAL_NC_MAP`: nr 120, since 2.26.5.0 (§2.3); misc fd OK; argument [`GetLogicalToPhysicalNcMap`](crate::structs::GetLogicalToPhysicalNcMap).
pub const NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP: u32 = 0xc0104e78;
/// `POD_INFO`: nr 121, since 2.26.5.0 (§2.3); misc fd OK; argument [`PodInfo`](crate::structs::PodInfo).
pub const NEURON_IOCTL_POD_INFO: u32 = 0xc1044e79;
/// `POD_STATUS`: nr 122, since 2.26.5.0 (§2.3); misc fd OK; argument [`PodStatus`](crate::structs::PodStatus).
pub const NEURON_IOCTL_POD_STATUS: u32 = 0xc10c4e7a;
/// `POD_STATUS_V2`: nr 122, since 2.26.5.0 (§2.3); misc fd OK; argument [`PodStatusV2`](crate::structs::PodStatusV2).
pub const NEURON_IOCTL_POD_STATUS_V2: u32 = 0xc1144e7a;
/// `POD_CTRL`: nr 123, since 2.26.5.0 (§2.3); misc fd OK; argument [`PodCtrl`](crate::structs::PodCtrl).
pub const NEURON_IOCTL_POD_CTRL: u32 = 0xc0104e7b;
/// `POD_CTRL_V2`: nr 123, since 2.26.5.0 (§2.3); misc fd OK; argument [`PodCtrlV2`](crate::structs::PodCtrlV2).
pub const NEURON_IOCTL_POD_CTRL_V2: u32 = 0xc0144e7b;
/// `DEVICE_GET_ALL_APPS_INFO`: nr 7, since 2.26.5.0 (§2.3); normal fd only; argument [`GetAppsInfo`](crate::structs::GetAppsInfo).
pub const NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO: u32 = 0x80084e07;
/// `DEVICE_APP_PID`: nr 6, since 2.26.5.0 (§2.3); normal fd only; argument `i32`.
pub const NEURON_IOCTL_DEVICE_APP_PID: u32 = 0x80044e06;
/// `GET_VA_PLACEMENT`: nr 131, since 2.26.5.0 (§2.3); misc fd OK; argument [`GetVaPlacement`](crate::structs::GetVaPlacement).
pub const NEURON_IOCTL_GET_VA_PLACEMENT: u32 = 0x40104e83;
/// `MEM_ALLOC`: nr 21, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemAlloc`](crate::structs::MemAlloc).
pub const NEURON_IOCTL_MEM_ALLOC: u32 = 0x80084e15;
/// `MEM_ALLOC_V2`: nr 102, since 2.26.5.0 (§2.3); normal fd only; argument [`MemAllocV2`](crate::structs::MemAllocV2).
pub const NEURON_IOCTL_MEM_ALLOC_V2: u32 = 0x80084e66;
/// `MEM_ALLOC_V2MT`: nr 102, since 2.26.5.0 (§2.3); normal fd only; argument [`MemAllocV2MemType`](crate::structs::MemAllocV2MemType).
pub const NEURON_IOCTL_MEM_ALLOC_V2MT: u32 = 0x80304e66;
/// `MEM_ALLOC_V2MT64`: nr 102, since 2.26.5.0 (§2.3); normal fd only; argument [`MemAllocV2MemType64`](crate::structs::MemAllocV2MemType64).
pub const NEURON_IOCTL_MEM_ALLOC_V2MT64: u32 = 0x80384e66;
/// `MEM_FREE`: nr 22, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemFree`](crate::structs::MemFree).
pub const NEURON_IOCTL_MEM_FREE: u32 = 0x80084e16;
/// `MEM_GET_EXTENDED_INFO`: nr 29, since 2.26.5.0 (§2.3); normal fd only; argument [`MemGetExtendedInfo`](crate::structs::MemGetExtendedInfo).
pub const NEURON_IOCTL_MEM_GET_EXTENDED_INFO: u32 = 0x80084e1d;
/// `MEM_GET_PA`: nr 25, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemGetPa`](crate::structs::MemGetPa).
pub const NEURON_IOCTL_MEM_GET_PA: u32 = 0x80084e19;
/// `MEM_GET_INFO`: nr 26, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemGetInfo`](crate::structs::MemGetInfo).
pub const NEURON_IOCTL_MEM_GET_INFO: u32 = 0x80084e1a;
/// `MEM_MC_GET_INFO`: nr 111, since 2.26.5.0 (§2.3); normal fd only; argument [`MemGetMcMmapInfo`](crate::structs::MemGetMcMmapInfo).
pub const NEURON_IOCTL_MEM_MC_GET_INFO: u32 = 0xc0184e6f;
/// `MEM_MC_GET_INFO_V2`: nr 111, since 2.26.5.0 (§2.3); normal fd only; argument [`MemGetMcMmapInfoV2`](crate::structs::MemGetMcMmapInfoV2).
pub const NEURON_IOCTL_MEM_MC_GET_INFO_V2: u32 = 0xc0204e6f;
/// `DUMP_MEM_CHUNKS`: nr 116, since 2.26.5.0 (§2.3); normal fd only; argument [`DumpMemChunks`](crate::structs::DumpMemChunks).
pub const NEURON_IOCTL_DUMP_MEM_CHUNKS: u32 = 0x80084e74;
/// `MEM_COPY`: nr 23, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemCopy`](crate::structs::MemCopy).
pub const NEURON_IOCTL_MEM_COPY: u32 = 0x80084e17;
/// `MEM_COPY64`: nr 23, since 2.26.5.0 (§2.3); normal fd only; argument [`MemCopy64`](crate::structs::MemCopy64).
pub const NEURON_IOCTL_MEM_COPY64: u32 = 0x80284e17;
/// `MEM_COPY_ASYNC`: nr 108, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemCopyAsync`](crate::structs::MemCopyAsync).
pub const NEURON_IOCTL_MEM_COPY_ASYNC: u32 = 0xc0304e6c;
/// `MEM_COPY_ASYNC64`: nr 108, since 2.26.5.0 (§2.3); normal fd only; argument [`MemCopyAsync64`](crate::structs::MemCopyAsync64).
pub const NEURON_IOCTL_MEM_COPY_ASYNC64: u32 = 0xc0384e6c;
/// `MEM_COPY_ASYNC_WAIT`: nr 109, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`MemCopyAsyncWait`](crate::structs::MemCopyAsyncWait).
pub const NEURON_IOCTL_MEM_COPY_ASYNC_WAIT: u32 = 0x40184e6d;
/// `MEM_BUF_COPY`: nr 24, since 2.26.5.0 (§2.3); normal fd only; argument [`MemBufCopy`](crate::structs::MemBufCopy).
pub const NEURON_IOCTL_MEM_BUF_COPY: u32 = 0xc0084e18;
/// `MEM_BUF_COPY64`: nr 24, since 2.26.5.0 (§2.3); normal fd only; argument [`MemBufCopy64`](crate::structs::MemBufCopy64).
pub const NEURON_IOCTL_MEM_BUF_COPY64: u32 = 0xc0284e18;
/// `MEM_BUF_ZEROCOPY64`: nr 124, since 2.26.5.0 (§2.3); normal fd only; argument [`MemBufCopy64zc`](crate::structs::MemBufCopy64zc).
pub const NEURON_IOCTL_MEM_BUF_ZEROCOPY64: u32 = 0xc0304e7c;
/// `MEM_BUF_ZEROCOPY64_BATCHES`: nr 129, since 2.26.5.0 (§2.3); normal fd only; argument [`MemBufCopy64zcBatches`](crate::structs::MemBufCopy64zcBatches).
pub const NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES: u32 = 0xc0204e81;
/// `MEMSET`: nr 28, since 2.26.5.0 (§2.3); normal fd only; argument [`Memset`](crate::structs::Memset).
pub const NEURON_IOCTL_MEMSET: u32 = 0x80084e1c;
/// `MEMSET64`: nr 28, since 2.26.5.0 (§2.3); normal fd only; argument [`Memset64`](crate::structs::Memset64).
pub const NEURON_IOCTL_MEMSET64: u32 = 0x80204e1c;
/// `DMABUF_FD`: nr 107, since 2.26.5.0 (§2.3); misc fd OK; argument [`DmabufFd`](crate::structs::DmabufFd).
pub const NEURON_IOCTL_DMABUF_FD: u32 = 0x80084e6b;
/// `DMA_ENG_INIT`: nr 30, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaEngInit`](crate::structs::DmaEngInit).
pub const NEURON_IOCTL_DMA_ENG_INIT: u32 = 0x80084e1e;
/// `DMA_ENG_SET_STATE`: nr 31, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaEngSetState`](crate::structs::DmaEngSetState).
pub const NEURON_IOCTL_DMA_ENG_SET_STATE: u32 = 0x80084e1f;
/// `DMA_ENG_GET_STATE`: nr 32, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaEngGetState`](crate::structs::DmaEngGetState).
pub const NEURON_IOCTL_DMA_ENG_GET_STATE: u32 = 0xc0084e20;
/// `DMA_QUEUE_INIT`: nr 33, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaQueueInit`](crate::structs::DmaQueueInit).
pub const NEURON_IOCTL_DMA_QUEUE_INIT: u32 = 0x80084e21;
/// `DMA_QUEUE_INIT_BATCH`: nr 133, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaQueueInitBatch`](crate::structs::DmaQueueInitBatch).
pub const NEURON_IOCTL_DMA_QUEUE_INIT_BATCH: u32 = 0xb0084e85;
/// `DMA_QUEUE_RELEASE`: nr 34, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaQueueRelease`](crate::structs::DmaQueueRelease).
pub const NEURON_IOCTL_DMA_QUEUE_RELEASE: u32 = 0x80084e22;
/// `DMA_QUEUE_COPY_START`: nr 35, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaQueueCopyStart`](crate::structs::DmaQueueCopyStart).
pub const NEURON_IOCTL_DMA_QUEUE_COPY_START: u32 = 0x80084e23;
/// `DMA_ACK_COMPLETED`: nr 36, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaAckCompleted`](crate::structs::DmaAckCompleted).
pub const NEURON_IOCTL_DMA_ACK_COMPLETED: u32 = 0x80084e24;
/// `DMA_QUEUE_GET_STATE`: nr 37, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaQueueGetState`](crate::structs::DmaQueueGetState).
pub const NEURON_IOCTL_DMA_QUEUE_GET_STATE: u32 = 0xc0084e25;
/// `DMA_COPY_DESCRIPTORS`: nr 38, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`DmaCopyDescriptors`](crate::structs::DmaCopyDescriptors).
pub const NEURON_IOCTL_DMA_COPY_DESCRIPTORS: u32 = 0x80084e26;
/// `DMA_COPY_DESCRIPTORS64`: nr 38, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaCopyDescriptors64`](crate::structs::DmaCopyDescriptors64).
pub const NEURON_IOCTL_DMA_COPY_DESCRIPTORS64: u32 = 0x80284e26;
/// `DMA_DESCRIPTOR_COPYOUT`: nr 39, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaDescriptorCopyout`](crate::structs::DmaDescriptorCopyout).
pub const NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT: u32 = 0xc0084e27;
/// `DMA_QUIESCE_QUEUES`: nr 40, since 2.26.5.0 (§2.3); normal fd only; argument [`DmaQuiesceQueues`](crate::structs::DmaQuiesceQueues).
pub const NEURON_IOCTL_DMA_QUIESCE_QUEUES: u32 = 0x80084e28;
/// `H2T_DMA_ALLOC_QUEUES`: nr 125, since 2.26.5.0 (§2.3); normal fd only; argument [`H2tDmaAllocQueues`](crate::structs::H2tDmaAllocQueues).
pub const NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES: u32 = 0xc0144e7d;
/// `H2T_DMA_FREE_QUEUES`: nr 126, since 2.26.5.0 (§2.3); normal fd only; argument [`H2tDmaFreeQueues`](crate::structs::H2tDmaFreeQueues).
pub const NEURON_IOCTL_H2T_DMA_FREE_QUEUES: u32 = 0xc0084e7e;
/// `HBM_SCRUB_START`: nr 118, since 2.26.5.0 (§2.3); normal fd only; argument [`HbmScrubStart`](crate::structs::HbmScrubStart).
pub const NEURON_IOCTL_HBM_SCRUB_START: u32 = 0xc0104e76;
/// `HBM_SCRUB_WAIT`: nr 119, since 2.26.5.0 (§2.3); normal fd only; argument [`HbmScrubWait`](crate::structs::HbmScrubWait).
pub const NEURON_IOCTL_HBM_SCRUB_WAIT: u32 = 0xc0084e77;
/// `NOTIFICATIONS_INIT_V1`: nr 51, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`NotificationsInitV1`](crate::structs::NotificationsInitV1).
pub const NEURON_IOCTL_NOTIFICATIONS_INIT_V1: u32 = 0x80084e33;
/// `NOTIFICATIONS_INIT_V2`: nr 53, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`NotificationsInitV2`](crate::structs::NotificationsInitV2).
pub const NEURON_IOCTL_NOTIFICATIONS_INIT_V2: u32 = 0x80084e35;
/// `NOTIFICATIONS_INIT_WITH_REALLOC_V2`: nr 54, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`NotificationsInitWithReallocV2`](crate::structs::NotificationsInitWithReallocV2).
pub const NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2: u32 = 0x80084e36;
/// `NOTIFICATIONS_DESTROY_V1`: nr 52, since 2.26.5.0 (§2.3); normal fd only; argument [`NotificationsDestroy`](crate::structs::NotificationsDestroy).
pub const NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1: u32 = 0x80084e34;
/// `NOTIFICATIONS_QUEUE_INFO`: nr 58, since 2.26.5.0 (§2.3); normal fd only; argument [`NotificationsQueueInfo`](crate::structs::NotificationsQueueInfo).
pub const NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO: u32 = 0x80084e3a;
/// `THROTTLING_NOTIFICATIONS`: nr 130, since 2.26.5.0 (§2.3); normal fd only; argument [`ThrottlingNotifications`](crate::structs::ThrottlingNotifications).
pub const NEURON_IOCTL_THROTTLING_NOTIFICATIONS: u32 = 0x40044e82;
/// `SEMAPHORE_INCREMENT`: nr 41, since 2.26.5.0 (§2.3); normal fd only; argument [`Semaphore`](crate::structs::Semaphore).
pub const NEURON_IOCTL_SEMAPHORE_INCREMENT: u32 = 0x80084e29;
/// `SEMAPHORE_DECREMENT`: nr 42, since 2.26.5.0 (§2.3); normal fd only; argument [`Semaphore`](crate::structs::Semaphore).
pub const NEURON_IOCTL_SEMAPHORE_DECREMENT: u32 = 0x80084e2a;
/// `SEMAPHORE_READ`: nr 43, since 2.26.5.0 (§2.3); normal fd only; argument [`Semaphore`](crate::structs::Semaphore).
pub const NEURON_IOCTL_SEMAPHORE_READ: u32 = 0xc0084e2b;
/// `SEMAPHORE_WRITE`: nr 44, since 2.26.5.0 (§2.3); normal fd only; argument [`Semaphore`](crate::structs::Semaphore).
pub const NEURON_IOCTL_SEMAPHORE_WRITE: u32 = 0x80084e2c;
/// `EVENT_SET`: nr 45, since 2.26.5.0 (§2.3); normal fd only; argument [`Event`](crate::structs::Event).
pub const NEURON_IOCTL_EVENT_SET: u32 = 0x80084e2d;
/// `EVENT_GET`: nr 46, since 2.26.5.0 (§2.3); normal fd only; argument [`Event`](crate::structs::Event).
pub const NEURON_IOCTL_EVENT_GET: u32 = 0xc0084e2e;
/// `BAR_READ`: nr 11, since 2.26.5.0 (§2.3); normal fd only; argument [`BarRw`](crate::structs::BarRw).
pub const NEURON_IOCTL_BAR_READ: u32 = 0x80084e0b;
/// `BAR_WRITE`: nr 12, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`BarRw`](crate::structs::BarRw).
pub const NEURON_IOCTL_BAR_WRITE: u32 = 0x40084e0c;
/// `READ_HW_COUNTERS`: nr 61, since 2.26.5.0 (§2.3); normal fd only; argument [`ReadHwCounters`](crate::structs::ReadHwCounters).
pub const NEURON_IOCTL_READ_HW_COUNTERS: u32 = 0x80084e3d;
/// `PROGRAM_ENGINE`: nr 27, since 2.26.5.0 (§2.3); normal fd only; argument [`ProgramEngine`](crate::structs::ProgramEngine).
pub const NEURON_IOCTL_PROGRAM_ENGINE: u32 = 0xc0084e1b;
/// `PROGRAM_ENGINE_NC`: nr 105, since 2.26.5.0 (§2.3); normal fd only; argument [`ProgramEngineNc`](crate::structs::ProgramEngineNc).
pub const NEURON_IOCTL_PROGRAM_ENGINE_NC: u32 = 0xc0084e69;
/// `PROGRAM_ENGINE_NC64`: nr 105, since 2.26.5.0 (§2.3); normal fd only; argument [`ProgramEngineNc64`](crate::structs::ProgramEngineNc64).
pub const NEURON_IOCTL_PROGRAM_ENGINE_NC64: u32 = 0xc0284e69;
/// `NC_RESET`: nr 103, since 2.26.5.0 (§2.3); normal fd only; argument [`DeviceReset`](crate::structs::DeviceReset).
pub const NEURON_IOCTL_NC_RESET: u32 = 0x80084e67;
/// `NC_RESET_READY`: nr 104, since 2.26.5.0 (§2.3); normal fd only; argument [`DeviceReady`](crate::structs::DeviceReady).
pub const NEURON_IOCTL_NC_RESET_READY: u32 = 0x80084e68;
/// `DEVICE_RESET`: nr 1, since 2.26.5.0 (§2.3); normal fd only; no argument.
pub const NEURON_IOCTL_DEVICE_RESET: u32 = 0x00004e01;
/// `DEVICE_READY`: nr 2, since 2.26.5.0 (§2.3); normal fd only; argument `u8`.
pub const NEURON_IOCTL_DEVICE_READY: u32 = 0x80014e02;
/// `DEVICE_RESET_STATUS`: nr 106, since 2.26.5.0 (§2.3); normal fd only; argument `u8`.
pub const NEURON_IOCTL_DEVICE_RESET_STATUS: u32 = 0x80014e6a;
/// `DEVICE_INIT`: nr 4, since 2.26.5.0 (§2.3); normal fd only; argument [`DeviceInit`](crate::structs::DeviceInit).
pub const NEURON_IOCTL_DEVICE_INIT: u32 = 0x80084e04;
/// `DEVICE_RELEASE`: nr 5, since 2.26.5.0 (§2.3); normal fd only; no argument.
pub const NEURON_IOCTL_DEVICE_RELEASE: u32 = 0x00004e05;
/// `CINIT_SET_STATE`: nr 91, since 2.26.5.0 (§2.3); normal fd only; argument [`CinitSet`](crate::structs::CinitSet).
pub const NEURON_IOCTL_CINIT_SET_STATE: u32 = 0x40084e5b;
/// `NC_MODEL_STARTED_COUNT`: nr 92, since 2.26.5.0 (§2.3); normal fd only; argument [`NcModelStartedCount`](crate::structs::NcModelStartedCount).
pub const NEURON_IOCTL_NC_MODEL_STARTED_COUNT: u32 = 0x40084e5c;
/// `CRWL_READER_ENTER`: nr 81, since 2.26.5.0 (§2.3); normal fd only; argument [`Crwl`](crate::structs::Crwl).
pub const NEURON_IOCTL_CRWL_READER_ENTER: u32 = 0x40084e51;
/// `CRWL_READER_EXIT`: nr 82, since 2.26.5.0 (§2.3); normal fd only; argument [`Crwl`](crate::structs::Crwl).
pub const NEURON_IOCTL_CRWL_READER_EXIT: u32 = 0x40084e52;
/// `CRWL_WRITER_ENTER`: nr 83, since 2.26.5.0 (§2.3); normal fd only; argument [`Crwl`](crate::structs::Crwl).
pub const NEURON_IOCTL_CRWL_WRITER_ENTER: u32 = 0x40084e53;
/// `CRWL_WRITER_DOWNGRADE`: nr 84, since 2.26.5.0 (§2.3); normal fd only; argument [`Crwl`](crate::structs::Crwl).
pub const NEURON_IOCTL_CRWL_WRITER_DOWNGRADE: u32 = 0x40084e54;
/// `CRWL_NC_RANGE_MARK`: nr 85, since 2.26.5.0 (§2.3); misc fd OK; argument [`CrwlNcMap`](crate::structs::CrwlNcMap).
pub const NEURON_IOCTL_CRWL_NC_RANGE_MARK: u32 = 0x40084e55;
/// `CRWL_NC_RANGE_MARK_EXT0`: nr 85, since 2.26.5.0 (§2.3); misc fd OK; argument [`CrwlNcMapExt`](crate::structs::CrwlNcMapExt).
pub const NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0: u32 = 0xc0504e55;
/// `CRWL_NC_RANGE_UNMARK`: nr 86, since 2.26.5.0 (§2.3); misc fd OK; argument [`CrwlNcMap`](crate::structs::CrwlNcMap).
pub const NEURON_IOCTL_CRWL_NC_RANGE_UNMARK: u32 = 0x40084e56;
/// `CRWL_NC_RANGE_UNMARK_EXT0`: nr 86, since 2.26.5.0 (§2.3); misc fd OK; argument [`CrwlNcMapExt`](crate::structs::CrwlNcMapExt).
pub const NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0: u32 = 0x40504e56;
/// `ACQUIRE_NEURON_DS`: nr 71, since 2.26.5.0 (§2.3); normal fd only; argument [`NeuronDsInfo`](crate::structs::NeuronDsInfo).
pub const NEURON_IOCTL_ACQUIRE_NEURON_DS: u32 = 0x80084e47;
/// `RELEASE_NEURON_DS`: nr 72, since 2.26.5.0 (§2.3); normal fd only; argument [`NeuronDsInfo`](crate::structs::NeuronDsInfo).
pub const NEURON_IOCTL_RELEASE_NEURON_DS: u32 = 0x80084e48;
/// `NC_PID_STATE_DUMP`: nr 117, since 2.26.5.0 (§2.3); misc fd OK; argument [`NcPidStateDump`](crate::structs::NcPidStateDump).
pub const NEURON_IOCTL_NC_PID_STATE_DUMP: u32 = 0xc0104e75;
/// `POST_METRIC`: nr 13, since 2.26.5.0 (§2.3); normal fd only, requires attached pid; argument [`PostMetric`](crate::structs::PostMetric).
pub const NEURON_IOCTL_POST_METRIC: u32 = 0x40084e0d;
/// `METRICS_CTRL`: nr 128, since 2.26.5.0 (§2.3); normal fd only; argument [`MetricsCtrl`](crate::structs::MetricsCtrl).
pub const NEURON_IOCTL_METRICS_CTRL: u32 = 0x40044e80;
/// `POWER_PROFILE`: nr 127, since 2.26.5.0 (§2.3); normal fd only; argument [`PowerProfile`](crate::structs::PowerProfile).
pub const NEURON_IOCTL_POWER_PROFILE: u32 = 0x40084e7f;
/// `PRINTK`: nr 113, since 2.26.5.0 (§2.3); misc fd OK; argument [`Printk`](crate::structs::Printk).
pub const NEURON_IOCTL_PRINTK: u32 = 0x40104e71;
/// `RESOURCE_MMAP_INFO`: nr 112, since 2.26.5.0 (§2.3); normal fd only; argument [`ResourceMmapInfo`](crate::structs::ResourceMmapInfo).
pub const NEURON_IOCTL_RESOURCE_MMAP_INFO: u32 = 0xc0204e70;
/// `GET_PERFORMANCE_PROFILE`: nr 132, since 2.27.x (§2.6, inferred version); normal fd only; argument [`PowerProfile`](crate::structs::PowerProfile).
pub const NEURON_IOCTL_GET_PERFORMANCE_PROFILE: u32 = 0xc0084e84;
/// `AVAILABLE_PERF_PROFILES`: nr 134, since 2.27.x (§2.6, inferred version); normal fd only; argument [`AvailablePerfProfiles`](crate::structs::AvailablePerfProfiles).
pub const NEURON_IOCTL_AVAILABLE_PERF_PROFILES: u32 = 0xc0244e86;
/// `GET_ASYNC_H2T_DMA_COMPL_QUEUES`: nr 135, since 2.27.x (§2.6, inferred version); normal fd only; argument [`GetAsyncH2tDmaComplQueues`](crate::structs::GetAsyncH2tDmaComplQueues).
pub const NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES: u32 = 0xc1084e87;
/// `MEM_ALLOC_V2MT64_PA`: nr 102, since 2.28.0.0 (§2.6); normal fd only; argument [`MemAllocV2MemType64Pa`](crate::structs::MemAllocV2MemType64Pa).
pub const NEURON_IOCTL_MEM_ALLOC_V2MT64_PA: u32 = 0xc0404e66;
/// `HOST_MEM_PIN`: nr 136, since 2.28.0.0 (§2.6); normal fd only; argument [`HostMemPin`](crate::structs::HostMemPin).
pub const NEURON_IOCTL_HOST_MEM_PIN: u32 = 0xc0184e88;
/// `HOST_MEM_UNPIN`: nr 137, since 2.28.0.0 (§2.6); normal fd only; argument [`HostMemUnpin`](crate::structs::HostMemUnpin).
pub const NEURON_IOCTL_HOST_MEM_UNPIN: u32 = 0x40084e89;
/// `DMABUF_FD_V2`: nr 138, since newest R header, ≥2.28 (§2.6); normal fd only; argument struct `neuron_ioctl_dmabuf_fd_v2` (layout not published).
pub const NEURON_IOCTL_DMABUF_FD_V2: u32 = 0x80084e8a;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs;
    use core::mem::size_of;
    use std::collections::HashSet;

    fn v226() -> impl Iterator<Item = &'static CommandInfo> {
        COMMANDS.iter().filter(|c| c.since == DriverVersion::V2_26)
    }

    #[test]
    fn counts_2_26() {
        // §2.2: 101 distinct values over 86 distinct nrs.
        assert_eq!(v226().count(), 101);
        assert_eq!(v226().map(|c| c.cmd).collect::<HashSet<_>>().len(), 101);
        assert_eq!(v226().map(|c| c.nr).collect::<HashSet<_>>().len(), 86);
    }

    #[test]
    fn counts_later_versions() {
        // §2.2: 2.27 → 104 values over 89 nrs; 2.28 adds 3 more values (one on nr 102).
        let upto = |v: DriverVersion| COMMANDS.iter().filter(move |c| c.since <= v);
        assert_eq!(upto(DriverVersion::V2_27).count(), 104);
        assert_eq!(
            upto(DriverVersion::V2_27)
                .map(|c| c.nr)
                .collect::<HashSet<_>>()
                .len(),
            89
        );
        assert_eq!(upto(DriverVersion::V2_28).count(), 107);
        assert_eq!(
            upto(DriverVersion::V2_28)
                .map(|c| c.nr)
                .collect::<HashSet<_>>()
                .len(),
            91
        );
        assert_eq!(COMMANDS.len(), 108);
    }

    #[test]
    fn all_values_distinct_and_names_distinct() {
        let cmds: HashSet<u32> = COMMANDS.iter().map(|c| c.cmd).collect();
        assert_eq!(cmds.len(), COMMANDS.len());
        let names: HashSet<&str> = COMMANDS.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), COMMANDS.len());
    }

    #[test]
    fn type_byte_and_nr_consistent() {
        for c in COMMANDS {
            assert_eq!(ioc_type(c.cmd), 0x4E, "{}", c.name);
            assert_eq!(ioc_type(c.cmd), NEURON_IOCTL_BASE);
            assert_eq!(ioc_nr(c.cmd), c.nr, "{}", c.name);
        }
    }

    #[test]
    fn lookup_finds_every_command() {
        for c in COMMANDS {
            assert_eq!(lookup(c.cmd), Some(c));
        }
        assert_eq!(lookup(0), None);
        assert_eq!(lookup(0x80084e00), None);
        // Same nr, different size: must not alias.
        assert_eq!(lookup(0x80104e66), None);
    }

    #[test]
    fn spot_check_literals() {
        assert_eq!(NEURON_IOCTL_MEM_ALLOC_V2MT, 0x80304e66);
        assert_eq!(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, 0x80284e26);
        assert_eq!(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, 0x80084e35);
        assert_eq!(NEURON_IOCTL_MEM_BUF_COPY64, 0xc0284e18);
        assert_eq!(NEURON_IOCTL_DMA_QUEUE_INIT, 0x80084e21);
        assert_eq!(NEURON_IOCTL_DMA_QUEUE_COPY_START, 0x80084e23);
        assert_eq!(NEURON_IOCTL_RESOURCE_MMAP_INFO, 0xc0204e70);
        assert_eq!(NEURON_IOCTL_DEVICE_RESET_STATUS, 0x80014e6a);
        assert_eq!(NEURON_IOCTL_DEVICE_BDF_EXT, 0x80084e6a);
        assert_eq!(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, 0xb0084e85);
        assert_eq!(NEURON_IOCTL_DEVICE_RESET, 0x00004e01);
        assert_eq!(NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0, 0xc0504e55);
        assert_eq!(NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0, 0x40504e56);
        assert_eq!(NEURON_IOCTL_POD_STATUS_V2, 0xc1144e7a);
        assert_eq!(NEURON_IOCTL_DRIVER_INFO_SET, 0x40184e6e);
        assert_eq!(NEURON_IOCTL_MEM_ALLOC_V2MT64_PA, 0xc0404e66);
        assert_eq!(NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES, 0xc1084e87);
        assert_eq!(NEURON_IOCTL_DMABUF_FD_V2, 0x80084e8a);
    }

    #[test]
    fn ioc_field_helpers() {
        assert_eq!(ioc_nr(NEURON_IOCTL_MEM_ALLOC_V2MT), 102);
        assert_eq!(ioc_size(NEURON_IOCTL_MEM_ALLOC_V2MT), 48);
        assert_eq!(ioc_dir(NEURON_IOCTL_MEM_ALLOC_V2MT), IOC_READ);
        assert_eq!(ioc_dir(NEURON_IOCTL_DEVICE_BASIC_INFO), IOC_WRITE);
        assert_eq!(ioc_dir(NEURON_IOCTL_MEM_BUF_COPY64), IOC_READ | IOC_WRITE);
        assert_eq!(ioc_dir(NEURON_IOCTL_DEVICE_RESET), IOC_NONE);
        assert_eq!(ioc_size(NEURON_IOCTL_DEVICE_RESET), 0);
        assert_eq!(ioc_size(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH), 12296);
        assert_eq!(ioc_size(NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP), 260);
        // nr 106 collision kept apart by size (§2.1).
        assert_eq!(ioc_nr(NEURON_IOCTL_DEVICE_RESET_STATUS), 106);
        assert_eq!(ioc_nr(NEURON_IOCTL_DEVICE_BDF_EXT), 106);
        assert_eq!(ioc_size(NEURON_IOCTL_DEVICE_RESET_STATUS), 1);
        assert_eq!(ioc_size(NEURON_IOCTL_DEVICE_BDF_EXT), 8);
    }

    #[test]
    fn nr_102_variants() {
        // §2.1 / §2.2: nr 102 sizes 8/48/56, +64 in 2.28.
        let mut sizes: Vec<u32> = COMMANDS
            .iter()
            .filter(|c| c.nr == 102)
            .map(|c| ioc_size(c.cmd))
            .collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [8, 48, 56, 64]);
    }

    #[test]
    fn attach_and_misc_flags() {
        // §1: the exact set requiring an attached pid.
        let mut att: Vec<&str> = COMMANDS
            .iter()
            .filter(|c| c.needs_attach)
            .map(|c| c.name)
            .collect();
        att.sort_unstable();
        let mut want = vec![
            "DMA_ENG_INIT",
            "DMA_ENG_SET_STATE",
            "DMA_QUEUE_INIT",
            "DMA_ACK_COMPLETED",
            "DMA_QUEUE_RELEASE",
            "DMA_COPY_DESCRIPTORS",
            "MEM_ALLOC",
            "MEM_FREE",
            "MEM_COPY",
            "MEM_GET_PA",
            "MEM_COPY_ASYNC",
            "MEM_COPY_ASYNC_WAIT",
            "MEM_GET_INFO",
            "BAR_WRITE",
            "POST_METRIC",
            "NOTIFICATIONS_INIT_V1",
            "NOTIFICATIONS_INIT_V2",
            "NOTIFICATIONS_INIT_WITH_REALLOC_V2",
            "DRIVER_INFO_SET",
        ];
        want.sort_unstable();
        assert_eq!(att, want);
        let misc = COMMANDS.iter().filter(|c| c.misc_fd_ok).count();
        assert_eq!(misc, 20);
        for nr in NR_DISPATCH_BY_NR_MISC {
            assert!(
                COMMANDS
                    .iter()
                    .filter(|c| c.nr == *nr)
                    .all(|c| c.misc_fd_ok),
                "nr {nr}"
            );
        }
        assert!(lookup(NEURON_IOCTL_PRINTK).is_some_and(|c| c.misc_fd_ok));
        assert!(lookup(NEURON_IOCTL_MEM_COPY64).is_some_and(|c| !c.needs_attach));
    }

    #[test]
    fn arg_size_matches_struct() {
        let table: &[(u32, usize)] = &[
            (NEURON_IOCTL_DEVICE_INFO, size_of::<structs::DeviceInfo>()),
            (
                NEURON_IOCTL_DEVICE_BASIC_INFO,
                size_of::<structs::DeviceBasicInfo>(),
            ),
            (
                NEURON_IOCTL_DRIVER_INFO_GET,
                size_of::<structs::DeviceDriverInfo>(),
            ),
            (
                NEURON_IOCTL_DRIVER_INFO_SET,
                size_of::<structs::DeviceDriverInfo>(),
            ),
            (
                NEURON_IOCTL_COMPATIBLE_VERSION,
                size_of::<structs::CompatibleVersion>(),
            ),
            (NEURON_IOCTL_DEVICE_BDF, size_of::<structs::DeviceBdf>()),
            (
                NEURON_IOCTL_DEVICE_BDF_EXT,
                size_of::<structs::DeviceBdfExt>(),
            ),
            (
                NEURON_IOCTL_HOST_DEVICE_ID,
                size_of::<structs::HostDeviceId>(),
            ),
            (
                NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP,
                size_of::<structs::HostDeviceIdToRidMap>(),
            ),
            (
                NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP,
                size_of::<structs::GetLogicalToPhysicalNcMap>(),
            ),
            (NEURON_IOCTL_POD_INFO, size_of::<structs::PodInfo>()),
            (NEURON_IOCTL_POD_STATUS, size_of::<structs::PodStatus>()),
            (
                NEURON_IOCTL_POD_STATUS_V2,
                size_of::<structs::PodStatusV2>(),
            ),
            (NEURON_IOCTL_POD_CTRL, size_of::<structs::PodCtrl>()),
            (NEURON_IOCTL_POD_CTRL_V2, size_of::<structs::PodCtrlV2>()),
            (
                NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO,
                size_of::<structs::GetAppsInfo>(),
            ),
            (NEURON_IOCTL_DEVICE_APP_PID, size_of::<i32>()),
            (
                NEURON_IOCTL_GET_VA_PLACEMENT,
                size_of::<structs::GetVaPlacement>(),
            ),
            (NEURON_IOCTL_MEM_ALLOC, size_of::<structs::MemAlloc>()),
            (NEURON_IOCTL_MEM_ALLOC_V2, size_of::<structs::MemAllocV2>()),
            (
                NEURON_IOCTL_MEM_ALLOC_V2MT,
                size_of::<structs::MemAllocV2MemType>(),
            ),
            (
                NEURON_IOCTL_MEM_ALLOC_V2MT64,
                size_of::<structs::MemAllocV2MemType64>(),
            ),
            (NEURON_IOCTL_MEM_FREE, size_of::<structs::MemFree>()),
            (
                NEURON_IOCTL_MEM_GET_EXTENDED_INFO,
                size_of::<structs::MemGetExtendedInfo>(),
            ),
            (NEURON_IOCTL_MEM_GET_PA, size_of::<structs::MemGetPa>()),
            (NEURON_IOCTL_MEM_GET_INFO, size_of::<structs::MemGetInfo>()),
            (
                NEURON_IOCTL_MEM_MC_GET_INFO,
                size_of::<structs::MemGetMcMmapInfo>(),
            ),
            (
                NEURON_IOCTL_MEM_MC_GET_INFO_V2,
                size_of::<structs::MemGetMcMmapInfoV2>(),
            ),
            (
                NEURON_IOCTL_DUMP_MEM_CHUNKS,
                size_of::<structs::DumpMemChunks>(),
            ),
            (NEURON_IOCTL_MEM_COPY, size_of::<structs::MemCopy>()),
            (NEURON_IOCTL_MEM_COPY64, size_of::<structs::MemCopy64>()),
            (
                NEURON_IOCTL_MEM_COPY_ASYNC,
                size_of::<structs::MemCopyAsync>(),
            ),
            (
                NEURON_IOCTL_MEM_COPY_ASYNC64,
                size_of::<structs::MemCopyAsync64>(),
            ),
            (
                NEURON_IOCTL_MEM_COPY_ASYNC_WAIT,
                size_of::<structs::MemCopyAsyncWait>(),
            ),
            (NEURON_IOCTL_MEM_BUF_COPY, size_of::<structs::MemBufCopy>()),
            (
                NEURON_IOCTL_MEM_BUF_COPY64,
                size_of::<structs::MemBufCopy64>(),
            ),
            (
                NEURON_IOCTL_MEM_BUF_ZEROCOPY64,
                size_of::<structs::MemBufCopy64zc>(),
            ),
            (
                NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES,
                size_of::<structs::MemBufCopy64zcBatches>(),
            ),
            (NEURON_IOCTL_MEMSET, size_of::<structs::Memset>()),
            (NEURON_IOCTL_MEMSET64, size_of::<structs::Memset64>()),
            (NEURON_IOCTL_DMABUF_FD, size_of::<structs::DmabufFd>()),
            (NEURON_IOCTL_DMA_ENG_INIT, size_of::<structs::DmaEngInit>()),
            (
                NEURON_IOCTL_DMA_ENG_SET_STATE,
                size_of::<structs::DmaEngSetState>(),
            ),
            (
                NEURON_IOCTL_DMA_ENG_GET_STATE,
                size_of::<structs::DmaEngGetState>(),
            ),
            (
                NEURON_IOCTL_DMA_QUEUE_INIT,
                size_of::<structs::DmaQueueInit>(),
            ),
            (
                NEURON_IOCTL_DMA_QUEUE_INIT_BATCH,
                size_of::<structs::DmaQueueInitBatch>(),
            ),
            (
                NEURON_IOCTL_DMA_QUEUE_RELEASE,
                size_of::<structs::DmaQueueRelease>(),
            ),
            (
                NEURON_IOCTL_DMA_QUEUE_COPY_START,
                size_of::<structs::DmaQueueCopyStart>(),
            ),
            (
                NEURON_IOCTL_DMA_ACK_COMPLETED,
                size_of::<structs::DmaAckCompleted>(),
            ),
            (
                NEURON_IOCTL_DMA_QUEUE_GET_STATE,
                size_of::<structs::DmaQueueGetState>(),
            ),
            (
                NEURON_IOCTL_DMA_COPY_DESCRIPTORS,
                size_of::<structs::DmaCopyDescriptors>(),
            ),
            (
                NEURON_IOCTL_DMA_COPY_DESCRIPTORS64,
                size_of::<structs::DmaCopyDescriptors64>(),
            ),
            (
                NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT,
                size_of::<structs::DmaDescriptorCopyout>(),
            ),
            (
                NEURON_IOCTL_DMA_QUIESCE_QUEUES,
                size_of::<structs::DmaQuiesceQueues>(),
            ),
            (
                NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES,
                size_of::<structs::H2tDmaAllocQueues>(),
            ),
            (
                NEURON_IOCTL_H2T_DMA_FREE_QUEUES,
                size_of::<structs::H2tDmaFreeQueues>(),
            ),
            (
                NEURON_IOCTL_HBM_SCRUB_START,
                size_of::<structs::HbmScrubStart>(),
            ),
            (
                NEURON_IOCTL_HBM_SCRUB_WAIT,
                size_of::<structs::HbmScrubWait>(),
            ),
            (
                NEURON_IOCTL_NOTIFICATIONS_INIT_V1,
                size_of::<structs::NotificationsInitV1>(),
            ),
            (
                NEURON_IOCTL_NOTIFICATIONS_INIT_V2,
                size_of::<structs::NotificationsInitV2>(),
            ),
            (
                NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2,
                size_of::<structs::NotificationsInitWithReallocV2>(),
            ),
            (
                NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1,
                size_of::<structs::NotificationsDestroy>(),
            ),
            (
                NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO,
                size_of::<structs::NotificationsQueueInfo>(),
            ),
            (
                NEURON_IOCTL_THROTTLING_NOTIFICATIONS,
                size_of::<structs::ThrottlingNotifications>(),
            ),
            (
                NEURON_IOCTL_SEMAPHORE_INCREMENT,
                size_of::<structs::Semaphore>(),
            ),
            (
                NEURON_IOCTL_SEMAPHORE_DECREMENT,
                size_of::<structs::Semaphore>(),
            ),
            (NEURON_IOCTL_SEMAPHORE_READ, size_of::<structs::Semaphore>()),
            (
                NEURON_IOCTL_SEMAPHORE_WRITE,
                size_of::<structs::Semaphore>(),
            ),
            (NEURON_IOCTL_EVENT_SET, size_of::<structs::Event>()),
            (NEURON_IOCTL_EVENT_GET, size_of::<structs::Event>()),
            (NEURON_IOCTL_BAR_READ, size_of::<structs::BarRw>()),
            (NEURON_IOCTL_BAR_WRITE, size_of::<structs::BarRw>()),
            (
                NEURON_IOCTL_READ_HW_COUNTERS,
                size_of::<structs::ReadHwCounters>(),
            ),
            (
                NEURON_IOCTL_PROGRAM_ENGINE,
                size_of::<structs::ProgramEngine>(),
            ),
            (
                NEURON_IOCTL_PROGRAM_ENGINE_NC,
                size_of::<structs::ProgramEngineNc>(),
            ),
            (
                NEURON_IOCTL_PROGRAM_ENGINE_NC64,
                size_of::<structs::ProgramEngineNc64>(),
            ),
            (NEURON_IOCTL_NC_RESET, size_of::<structs::DeviceReset>()),
            (
                NEURON_IOCTL_NC_RESET_READY,
                size_of::<structs::DeviceReady>(),
            ),
            (NEURON_IOCTL_DEVICE_READY, size_of::<u8>()),
            (NEURON_IOCTL_DEVICE_RESET_STATUS, size_of::<u8>()),
            (NEURON_IOCTL_DEVICE_INIT, size_of::<structs::DeviceInit>()),
            (NEURON_IOCTL_CINIT_SET_STATE, size_of::<structs::CinitSet>()),
            (
                NEURON_IOCTL_NC_MODEL_STARTED_COUNT,
                size_of::<structs::NcModelStartedCount>(),
            ),
            (NEURON_IOCTL_CRWL_READER_ENTER, size_of::<structs::Crwl>()),
            (NEURON_IOCTL_CRWL_READER_EXIT, size_of::<structs::Crwl>()),
            (NEURON_IOCTL_CRWL_WRITER_ENTER, size_of::<structs::Crwl>()),
            (
                NEURON_IOCTL_CRWL_WRITER_DOWNGRADE,
                size_of::<structs::Crwl>(),
            ),
            (
                NEURON_IOCTL_CRWL_NC_RANGE_MARK,
                size_of::<structs::CrwlNcMap>(),
            ),
            (
                NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0,
                size_of::<structs::CrwlNcMapExt>(),
            ),
            (
                NEURON_IOCTL_CRWL_NC_RANGE_UNMARK,
                size_of::<structs::CrwlNcMap>(),
            ),
            (
                NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0,
                size_of::<structs::CrwlNcMapExt>(),
            ),
            (
                NEURON_IOCTL_ACQUIRE_NEURON_DS,
                size_of::<structs::NeuronDsInfo>(),
            ),
            (
                NEURON_IOCTL_RELEASE_NEURON_DS,
                size_of::<structs::NeuronDsInfo>(),
            ),
            (
                NEURON_IOCTL_NC_PID_STATE_DUMP,
                size_of::<structs::NcPidStateDump>(),
            ),
            (NEURON_IOCTL_POST_METRIC, size_of::<structs::PostMetric>()),
            (NEURON_IOCTL_METRICS_CTRL, size_of::<structs::MetricsCtrl>()),
            (
                NEURON_IOCTL_POWER_PROFILE,
                size_of::<structs::PowerProfile>(),
            ),
            (NEURON_IOCTL_PRINTK, size_of::<structs::Printk>()),
            (
                NEURON_IOCTL_RESOURCE_MMAP_INFO,
                size_of::<structs::ResourceMmapInfo>(),
            ),
            (
                NEURON_IOCTL_GET_PERFORMANCE_PROFILE,
                size_of::<structs::PowerProfile>(),
            ),
            (
                NEURON_IOCTL_AVAILABLE_PERF_PROFILES,
                size_of::<structs::AvailablePerfProfiles>(),
            ),
            (
                NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES,
                size_of::<structs::GetAsyncH2tDmaComplQueues>(),
            ),
            (
                NEURON_IOCTL_MEM_ALLOC_V2MT64_PA,
                size_of::<structs::MemAllocV2MemType64Pa>(),
            ),
            (NEURON_IOCTL_HOST_MEM_PIN, size_of::<structs::HostMemPin>()),
            (
                NEURON_IOCTL_HOST_MEM_UNPIN,
                size_of::<structs::HostMemUnpin>(),
            ),
        ];
        for &(cmd, size) in table {
            let info = lookup(cmd);
            assert!(info.is_some(), "{cmd:#x} missing");
            if let Some(info) = info {
                assert_eq!(info.arg_size, size, "{}", info.name);
            }
        }
        // Every command with a nonzero arg_size has a struct in the table.
        let with_struct: HashSet<u32> = table.iter().map(|t| t.0).collect();
        for c in COMMANDS {
            assert_eq!(c.arg_size != 0, with_struct.contains(&c.cmd), "{}", c.name);
        }
        // Newer macros encode the real size (§2.1).
        for c in COMMANDS {
            let enc = ioc_size(c.cmd) as usize;
            assert!(enc == c.arg_size || enc == 8 || enc == 0, "{}", c.name);
        }
    }
}
