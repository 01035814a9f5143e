//! ioctl command values of `neuron.ko` (driver-abi.md §2).
//!
//! Every value below is the exact 32-bit command number given in driver-abi.md §2.3 (2.26.5.0)
//! and §2.6 (later additions). They are copied, never computed from `_IOC` direction/size macros:
//! the driver's encoded directions are not meaningful and many encoded sizes are `sizeof(pointer)`
//! (§2.1). Dispatch must always be on the full 32-bit value.
//!
//! One table, written once in `neuron_ioctls!` form below, pairs every value with its metadata
//! and its argument type. It generates the `NEURON_IOCTL_*` constants, [`COMMANDS`] (with
//! `arg_size` computed from the argument type) and one marker type per command in [`cmd`]
//! implementing [`Ioctl`], so a decoder names the argument type through the command
//! (`<cmd::MEM_ALLOC_V2MT as Ioctl>::Arg`). [`lookup`] finds a command by value.

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
    /// (DMABUF_FD_V2). Computed from [`CommandInfo::arg_type`].
    pub arg_size: usize,
    /// Name of the argument type (a [`structs`](crate::structs) type, `u8`, `i32`, `()` for
    /// none, [`Unpublished`] when the layout is not published).
    pub arg_type: &'static str,
}

/// One ioctl command: its value, name and argument type. Implemented by the marker types of
/// [`cmd`] (one per command), generated from the same table as [`COMMANDS`].
pub trait Ioctl {
    /// Full 32-bit command value.
    const CMD: u32;
    /// Name without the `NEURON_IOCTL_` prefix.
    const NAME: &'static str;
    /// The argument the driver copies in and/or out (`()` when there is none).
    type Arg: zerocopy::FromBytes + zerocopy::IntoBytes + zerocopy::Immutable;
}

/// Argument marker of a command whose argument layout is not published (DMABUF_FD_V2):
/// zero-sized, so a decoder reads nothing for it.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::Immutable,
    zerocopy::KnownLayout,
)]
#[repr(C)]
pub struct Unpublished;

/// Doc text of a [`DriverVersion`] variant (used by `neuron_ioctls!`).
#[doc(hidden)]
#[macro_export]
macro_rules! __ioctl_since_doc {
    (V2_26) => {
        "since 2.26.5.0 (§2.3)"
    };
    (V2_27) => {
        "since 2.27.x (§2.6, inferred version)"
    };
    (V2_28) => {
        "since 2.28.0.0 (§2.6)"
    };
    (Newest) => {
        "since newest R header, ≥2.28 (§2.6)"
    };
}

/// Whether flag letter `f` is in a flags string of `neuron_ioctls!` (`"M"`, `"A"`, `"MA"`).
const fn has_flag(flags: &str, f: u8) -> bool {
    let b = flags.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == f {
            return true;
        }
        i += 1;
    }
    false
}

/// Doc text of a flags string.
#[doc(hidden)]
#[macro_export]
macro_rules! __ioctl_flags_doc {
    ("") => {
        "normal fd only"
    };
    ("M") => {
        "misc fd OK"
    };
    ("A") => {
        "normal fd only, requires attached pid"
    };
    ("MA") => {
        "misc fd OK, requires attached pid"
    };
}

/// The ioctl table: `NAME => CONST = value, nr N, Version, flags "MA", arg Type;` per command,
/// in §2.3 table order then the §2.6 additions. Flags: `M` = also accepted on a misc fd, `A` =
/// requires an attached pid (§1). Generates the constants, [`COMMANDS`] and [`cmd`].
macro_rules! neuron_ioctls {
    ($($name:ident => $konst:ident = $val:literal, nr $nr:literal, $since:ident, flags $flags:tt, arg $arg:ty;)*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`: nr ", stringify!($nr), ", ",
                $crate::__ioctl_since_doc!($since), "; ", $crate::__ioctl_flags_doc!($flags),
                "; argument `", stringify!($arg), "`.")]
            pub const $konst: u32 = $val;
        )*

        /// Every known command value, each exactly once: the 101 values of 2.26.5.0 in §2.3
        /// table order, then the §2.6 additions.
        pub static COMMANDS: &[CommandInfo] = &[
            $(CommandInfo {
                name: stringify!($name),
                cmd: $val,
                nr: $nr,
                since: DriverVersion::$since,
                misc_fd_ok: has_flag($flags, b'M'),
                needs_attach: has_flag($flags, b'A'),
                arg_size: core::mem::size_of::<$arg>(),
                arg_type: stringify!($arg),
            },)*
        ];

        /// One marker type per command (named as the command), implementing [`Ioctl`]: the
        /// command's argument type for decoders.
        #[allow(non_camel_case_types)]
        pub mod cmd {
            use super::Ioctl;
            #[allow(unused_imports)]
            use super::Unpublished;
            #[allow(unused_imports)]
            use $crate::structs::*;
            $(
                #[doc = concat!("`NEURON_IOCTL_", stringify!($name), "`.")]
                #[derive(Debug, Clone, Copy, PartialEq, Eq)]
                pub struct $name;
                impl Ioctl for $name {
                    const CMD: u32 = $val;
                    const NAME: &'static str = stringify!($name);
                    type Arg = $arg;
                }
            )*
        }
    };
}

use crate::structs::*;

neuron_ioctls! {
    DEVICE_INFO => NEURON_IOCTL_DEVICE_INFO = 0x80084e03, nr 3, V2_26, flags "", arg DeviceInfo;
    DEVICE_BASIC_INFO => NEURON_IOCTL_DEVICE_BASIC_INFO = 0x40084e64, nr 100, V2_26, flags "M", arg DeviceBasicInfo;
    DRIVER_INFO_GET => NEURON_IOCTL_DRIVER_INFO_GET = 0x80184e6e, nr 110, V2_26, flags "M", arg DeviceDriverInfo;
    DRIVER_INFO_SET => NEURON_IOCTL_DRIVER_INFO_SET = 0x40184e6e, nr 110, V2_26, flags "MA", arg DeviceDriverInfo;
    COMPATIBLE_VERSION => NEURON_IOCTL_COMPATIBLE_VERSION = 0x40084e5d, nr 93, V2_26, flags "M", arg CompatibleVersion;
    DEVICE_BDF => NEURON_IOCTL_DEVICE_BDF = 0x80084e65, nr 101, V2_26, flags "", arg DeviceBdf;
    DEVICE_BDF_EXT => NEURON_IOCTL_DEVICE_BDF_EXT = 0x80084e6a, nr 106, V2_26, flags "M", arg DeviceBdfExt;
    HOST_DEVICE_ID => NEURON_IOCTL_HOST_DEVICE_ID = 0x80044e72, nr 114, V2_26, flags "", arg HostDeviceId;
    HOST_DEVICE_ID_TO_RID_MAP => NEURON_IOCTL_HOST_DEVICE_ID_TO_RID_MAP = 0xc1044e73, nr 115, V2_26, flags "M", arg HostDeviceIdToRidMap;
    GET_LOGICAL_TO_PHYSICAL_NC_MAP => NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP = 0xc0104e78, nr 120, V2_26, flags "M", arg GetLogicalToPhysicalNcMap;
    POD_INFO => NEURON_IOCTL_POD_INFO = 0xc1044e79, nr 121, V2_26, flags "M", arg PodInfo;
    POD_STATUS => NEURON_IOCTL_POD_STATUS = 0xc10c4e7a, nr 122, V2_26, flags "M", arg PodStatus;
    POD_STATUS_V2 => NEURON_IOCTL_POD_STATUS_V2 = 0xc1144e7a, nr 122, V2_26, flags "M", arg PodStatusV2;
    POD_CTRL => NEURON_IOCTL_POD_CTRL = 0xc0104e7b, nr 123, V2_26, flags "M", arg PodCtrl;
    POD_CTRL_V2 => NEURON_IOCTL_POD_CTRL_V2 = 0xc0144e7b, nr 123, V2_26, flags "M", arg PodCtrlV2;
    DEVICE_GET_ALL_APPS_INFO => NEURON_IOCTL_DEVICE_GET_ALL_APPS_INFO = 0x80084e07, nr 7, V2_26, flags "", arg GetAppsInfo;
    DEVICE_APP_PID => NEURON_IOCTL_DEVICE_APP_PID = 0x80044e06, nr 6, V2_26, flags "", arg i32;
    GET_VA_PLACEMENT => NEURON_IOCTL_GET_VA_PLACEMENT = 0x40104e83, nr 131, V2_26, flags "M", arg GetVaPlacement;
    MEM_ALLOC => NEURON_IOCTL_MEM_ALLOC = 0x80084e15, nr 21, V2_26, flags "A", arg MemAlloc;
    MEM_ALLOC_V2 => NEURON_IOCTL_MEM_ALLOC_V2 = 0x80084e66, nr 102, V2_26, flags "", arg MemAllocV2;
    MEM_ALLOC_V2MT => NEURON_IOCTL_MEM_ALLOC_V2MT = 0x80304e66, nr 102, V2_26, flags "", arg MemAllocV2MemType;
    MEM_ALLOC_V2MT64 => NEURON_IOCTL_MEM_ALLOC_V2MT64 = 0x80384e66, nr 102, V2_26, flags "", arg MemAllocV2MemType64;
    MEM_FREE => NEURON_IOCTL_MEM_FREE = 0x80084e16, nr 22, V2_26, flags "A", arg MemFree;
    MEM_GET_EXTENDED_INFO => NEURON_IOCTL_MEM_GET_EXTENDED_INFO = 0x80084e1d, nr 29, V2_26, flags "", arg MemGetExtendedInfo;
    MEM_GET_PA => NEURON_IOCTL_MEM_GET_PA = 0x80084e19, nr 25, V2_26, flags "A", arg MemGetPa;
    MEM_GET_INFO => NEURON_IOCTL_MEM_GET_INFO = 0x80084e1a, nr 26, V2_26, flags "A", arg MemGetInfo;
    MEM_MC_GET_INFO => NEURON_IOCTL_MEM_MC_GET_INFO = 0xc0184e6f, nr 111, V2_26, flags "", arg MemGetMcMmapInfo;
    MEM_MC_GET_INFO_V2 => NEURON_IOCTL_MEM_MC_GET_INFO_V2 = 0xc0204e6f, nr 111, V2_26, flags "", arg MemGetMcMmapInfoV2;
    DUMP_MEM_CHUNKS => NEURON_IOCTL_DUMP_MEM_CHUNKS = 0x80084e74, nr 116, V2_26, flags "", arg DumpMemChunks;
    MEM_COPY => NEURON_IOCTL_MEM_COPY = 0x80084e17, nr 23, V2_26, flags "A", arg MemCopy;
    MEM_COPY64 => NEURON_IOCTL_MEM_COPY64 = 0x80284e17, nr 23, V2_26, flags "", arg MemCopy64;
    MEM_COPY_ASYNC => NEURON_IOCTL_MEM_COPY_ASYNC = 0xc0304e6c, nr 108, V2_26, flags "A", arg MemCopyAsync;
    MEM_COPY_ASYNC64 => NEURON_IOCTL_MEM_COPY_ASYNC64 = 0xc0384e6c, nr 108, V2_26, flags "", arg MemCopyAsync64;
    MEM_COPY_ASYNC_WAIT => NEURON_IOCTL_MEM_COPY_ASYNC_WAIT = 0x40184e6d, nr 109, V2_26, flags "A", arg MemCopyAsyncWait;
    MEM_BUF_COPY => NEURON_IOCTL_MEM_BUF_COPY = 0xc0084e18, nr 24, V2_26, flags "", arg MemBufCopy;
    MEM_BUF_COPY64 => NEURON_IOCTL_MEM_BUF_COPY64 = 0xc0284e18, nr 24, V2_26, flags "", arg MemBufCopy64;
    MEM_BUF_ZEROCOPY64 => NEURON_IOCTL_MEM_BUF_ZEROCOPY64 = 0xc0304e7c, nr 124, V2_26, flags "", arg MemBufCopy64zc;
    MEM_BUF_ZEROCOPY64_BATCHES => NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES = 0xc0204e81, nr 129, V2_26, flags "", arg MemBufCopy64zcBatches;
    MEMSET => NEURON_IOCTL_MEMSET = 0x80084e1c, nr 28, V2_26, flags "", arg Memset;
    MEMSET64 => NEURON_IOCTL_MEMSET64 = 0x80204e1c, nr 28, V2_26, flags "", arg Memset64;
    DMABUF_FD => NEURON_IOCTL_DMABUF_FD = 0x80084e6b, nr 107, V2_26, flags "M", arg DmabufFd;
    DMA_ENG_INIT => NEURON_IOCTL_DMA_ENG_INIT = 0x80084e1e, nr 30, V2_26, flags "A", arg DmaEngInit;
    DMA_ENG_SET_STATE => NEURON_IOCTL_DMA_ENG_SET_STATE = 0x80084e1f, nr 31, V2_26, flags "A", arg DmaEngSetState;
    DMA_ENG_GET_STATE => NEURON_IOCTL_DMA_ENG_GET_STATE = 0xc0084e20, nr 32, V2_26, flags "", arg DmaEngGetState;
    DMA_QUEUE_INIT => NEURON_IOCTL_DMA_QUEUE_INIT = 0x80084e21, nr 33, V2_26, flags "A", arg DmaQueueInit;
    DMA_QUEUE_INIT_BATCH => NEURON_IOCTL_DMA_QUEUE_INIT_BATCH = 0xb0084e85, nr 133, V2_26, flags "", arg DmaQueueInitBatch;
    DMA_QUEUE_RELEASE => NEURON_IOCTL_DMA_QUEUE_RELEASE = 0x80084e22, nr 34, V2_26, flags "A", arg DmaQueueRelease;
    DMA_QUEUE_COPY_START => NEURON_IOCTL_DMA_QUEUE_COPY_START = 0x80084e23, nr 35, V2_26, flags "", arg DmaQueueCopyStart;
    DMA_ACK_COMPLETED => NEURON_IOCTL_DMA_ACK_COMPLETED = 0x80084e24, nr 36, V2_26, flags "A", arg DmaAckCompleted;
    DMA_QUEUE_GET_STATE => NEURON_IOCTL_DMA_QUEUE_GET_STATE = 0xc0084e25, nr 37, V2_26, flags "", arg DmaQueueGetState;
    DMA_COPY_DESCRIPTORS => NEURON_IOCTL_DMA_COPY_DESCRIPTORS = 0x80084e26, nr 38, V2_26, flags "A", arg DmaCopyDescriptors;
    DMA_COPY_DESCRIPTORS64 => NEURON_IOCTL_DMA_COPY_DESCRIPTORS64 = 0x80284e26, nr 38, V2_26, flags "", arg DmaCopyDescriptors64;
    DMA_DESCRIPTOR_COPYOUT => NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT = 0xc0084e27, nr 39, V2_26, flags "", arg DmaDescriptorCopyout;
    DMA_QUIESCE_QUEUES => NEURON_IOCTL_DMA_QUIESCE_QUEUES = 0x80084e28, nr 40, V2_26, flags "", arg DmaQuiesceQueues;
    H2T_DMA_ALLOC_QUEUES => NEURON_IOCTL_H2T_DMA_ALLOC_QUEUES = 0xc0144e7d, nr 125, V2_26, flags "", arg H2tDmaAllocQueues;
    H2T_DMA_FREE_QUEUES => NEURON_IOCTL_H2T_DMA_FREE_QUEUES = 0xc0084e7e, nr 126, V2_26, flags "", arg H2tDmaFreeQueues;
    HBM_SCRUB_START => NEURON_IOCTL_HBM_SCRUB_START = 0xc0104e76, nr 118, V2_26, flags "", arg HbmScrubStart;
    HBM_SCRUB_WAIT => NEURON_IOCTL_HBM_SCRUB_WAIT = 0xc0084e77, nr 119, V2_26, flags "", arg HbmScrubWait;
    NOTIFICATIONS_INIT_V1 => NEURON_IOCTL_NOTIFICATIONS_INIT_V1 = 0x80084e33, nr 51, V2_26, flags "A", arg NotificationsInitV1;
    NOTIFICATIONS_INIT_V2 => NEURON_IOCTL_NOTIFICATIONS_INIT_V2 = 0x80084e35, nr 53, V2_26, flags "A", arg NotificationsInitV2;
    NOTIFICATIONS_INIT_WITH_REALLOC_V2 => NEURON_IOCTL_NOTIFICATIONS_INIT_WITH_REALLOC_V2 = 0x80084e36, nr 54, V2_26, flags "A", arg NotificationsInitWithReallocV2;
    NOTIFICATIONS_DESTROY_V1 => NEURON_IOCTL_NOTIFICATIONS_DESTROY_V1 = 0x80084e34, nr 52, V2_26, flags "", arg NotificationsDestroy;
    NOTIFICATIONS_QUEUE_INFO => NEURON_IOCTL_NOTIFICATIONS_QUEUE_INFO = 0x80084e3a, nr 58, V2_26, flags "", arg NotificationsQueueInfo;
    THROTTLING_NOTIFICATIONS => NEURON_IOCTL_THROTTLING_NOTIFICATIONS = 0x40044e82, nr 130, V2_26, flags "", arg ThrottlingNotifications;
    SEMAPHORE_INCREMENT => NEURON_IOCTL_SEMAPHORE_INCREMENT = 0x80084e29, nr 41, V2_26, flags "", arg Semaphore;
    SEMAPHORE_DECREMENT => NEURON_IOCTL_SEMAPHORE_DECREMENT = 0x80084e2a, nr 42, V2_26, flags "", arg Semaphore;
    SEMAPHORE_READ => NEURON_IOCTL_SEMAPHORE_READ = 0xc0084e2b, nr 43, V2_26, flags "", arg Semaphore;
    SEMAPHORE_WRITE => NEURON_IOCTL_SEMAPHORE_WRITE = 0x80084e2c, nr 44, V2_26, flags "", arg Semaphore;
    EVENT_SET => NEURON_IOCTL_EVENT_SET = 0x80084e2d, nr 45, V2_26, flags "", arg Event;
    EVENT_GET => NEURON_IOCTL_EVENT_GET = 0xc0084e2e, nr 46, V2_26, flags "", arg Event;
    BAR_READ => NEURON_IOCTL_BAR_READ = 0x80084e0b, nr 11, V2_26, flags "", arg BarRw;
    BAR_WRITE => NEURON_IOCTL_BAR_WRITE = 0x40084e0c, nr 12, V2_26, flags "A", arg BarRw;
    READ_HW_COUNTERS => NEURON_IOCTL_READ_HW_COUNTERS = 0x80084e3d, nr 61, V2_26, flags "", arg ReadHwCounters;
    PROGRAM_ENGINE => NEURON_IOCTL_PROGRAM_ENGINE = 0xc0084e1b, nr 27, V2_26, flags "", arg ProgramEngine;
    PROGRAM_ENGINE_NC => NEURON_IOCTL_PROGRAM_ENGINE_NC = 0xc0084e69, nr 105, V2_26, flags "", arg ProgramEngineNc;
    PROGRAM_ENGINE_NC64 => NEURON_IOCTL_PROGRAM_ENGINE_NC64 = 0xc0284e69, nr 105, V2_26, flags "", arg ProgramEngineNc64;
    NC_RESET => NEURON_IOCTL_NC_RESET = 0x80084e67, nr 103, V2_26, flags "", arg DeviceReset;
    NC_RESET_READY => NEURON_IOCTL_NC_RESET_READY = 0x80084e68, nr 104, V2_26, flags "", arg DeviceReady;
    DEVICE_RESET => NEURON_IOCTL_DEVICE_RESET = 0x00004e01, nr 1, V2_26, flags "", arg ();
    DEVICE_READY => NEURON_IOCTL_DEVICE_READY = 0x80014e02, nr 2, V2_26, flags "", arg u8;
    DEVICE_RESET_STATUS => NEURON_IOCTL_DEVICE_RESET_STATUS = 0x80014e6a, nr 106, V2_26, flags "", arg u8;
    DEVICE_INIT => NEURON_IOCTL_DEVICE_INIT = 0x80084e04, nr 4, V2_26, flags "", arg DeviceInit;
    DEVICE_RELEASE => NEURON_IOCTL_DEVICE_RELEASE = 0x00004e05, nr 5, V2_26, flags "", arg ();
    CINIT_SET_STATE => NEURON_IOCTL_CINIT_SET_STATE = 0x40084e5b, nr 91, V2_26, flags "", arg CinitSet;
    NC_MODEL_STARTED_COUNT => NEURON_IOCTL_NC_MODEL_STARTED_COUNT = 0x40084e5c, nr 92, V2_26, flags "", arg NcModelStartedCount;
    CRWL_READER_ENTER => NEURON_IOCTL_CRWL_READER_ENTER = 0x40084e51, nr 81, V2_26, flags "", arg Crwl;
    CRWL_READER_EXIT => NEURON_IOCTL_CRWL_READER_EXIT = 0x40084e52, nr 82, V2_26, flags "", arg Crwl;
    CRWL_WRITER_ENTER => NEURON_IOCTL_CRWL_WRITER_ENTER = 0x40084e53, nr 83, V2_26, flags "", arg Crwl;
    CRWL_WRITER_DOWNGRADE => NEURON_IOCTL_CRWL_WRITER_DOWNGRADE = 0x40084e54, nr 84, V2_26, flags "", arg Crwl;
    CRWL_NC_RANGE_MARK => NEURON_IOCTL_CRWL_NC_RANGE_MARK = 0x40084e55, nr 85, V2_26, flags "M", arg CrwlNcMap;
    CRWL_NC_RANGE_MARK_EXT0 => NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0 = 0xc0504e55, nr 85, V2_26, flags "M", arg CrwlNcMapExt;
    CRWL_NC_RANGE_UNMARK => NEURON_IOCTL_CRWL_NC_RANGE_UNMARK = 0x40084e56, nr 86, V2_26, flags "M", arg CrwlNcMap;
    CRWL_NC_RANGE_UNMARK_EXT0 => NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0 = 0x40504e56, nr 86, V2_26, flags "M", arg CrwlNcMapExt;
    ACQUIRE_NEURON_DS => NEURON_IOCTL_ACQUIRE_NEURON_DS = 0x80084e47, nr 71, V2_26, flags "", arg NeuronDsInfo;
    RELEASE_NEURON_DS => NEURON_IOCTL_RELEASE_NEURON_DS = 0x80084e48, nr 72, V2_26, flags "", arg NeuronDsInfo;
    NC_PID_STATE_DUMP => NEURON_IOCTL_NC_PID_STATE_DUMP = 0xc0104e75, nr 117, V2_26, flags "M", arg NcPidStateDump;
    POST_METRIC => NEURON_IOCTL_POST_METRIC = 0x40084e0d, nr 13, V2_26, flags "A", arg PostMetric;
    METRICS_CTRL => NEURON_IOCTL_METRICS_CTRL = 0x40044e80, nr 128, V2_26, flags "", arg MetricsCtrl;
    POWER_PROFILE => NEURON_IOCTL_POWER_PROFILE = 0x40084e7f, nr 127, V2_26, flags "", arg PowerProfile;
    PRINTK => NEURON_IOCTL_PRINTK = 0x40104e71, nr 113, V2_26, flags "M", arg Printk;
    RESOURCE_MMAP_INFO => NEURON_IOCTL_RESOURCE_MMAP_INFO = 0xc0204e70, nr 112, V2_26, flags "", arg ResourceMmapInfo;
    GET_PERFORMANCE_PROFILE => NEURON_IOCTL_GET_PERFORMANCE_PROFILE = 0xc0084e84, nr 132, V2_27, flags "", arg PowerProfile;
    AVAILABLE_PERF_PROFILES => NEURON_IOCTL_AVAILABLE_PERF_PROFILES = 0xc0244e86, nr 134, V2_27, flags "", arg AvailablePerfProfiles;
    GET_ASYNC_H2T_DMA_COMPL_QUEUES => NEURON_IOCTL_GET_ASYNC_H2T_DMA_COMPL_QUEUES = 0xc1084e87, nr 135, V2_27, flags "", arg GetAsyncH2tDmaComplQueues;
    MEM_ALLOC_V2MT64_PA => NEURON_IOCTL_MEM_ALLOC_V2MT64_PA = 0xc0404e66, nr 102, V2_28, flags "", arg MemAllocV2MemType64Pa;
    HOST_MEM_PIN => NEURON_IOCTL_HOST_MEM_PIN = 0xc0184e88, nr 136, V2_28, flags "", arg HostMemPin;
    HOST_MEM_UNPIN => NEURON_IOCTL_HOST_MEM_UNPIN = 0x40084e89, nr 137, V2_28, flags "", arg HostMemUnpin;
    DMABUF_FD_V2 => NEURON_IOCTL_DMABUF_FD_V2 = 0x80084e8a, nr 138, Newest, flags "", arg Unpublished;
}

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

    /// The table as the reference documents it (driver-abi.md §2.3, §2.6), written out
    /// literally: name, exact 32-bit value, nr, first release, misc fd OK, needs attach, and the
    /// size of the argument the driver copies. The generated table must match it entry for entry.
    #[test]
    fn table_matches_reference_literally() {
        use DriverVersion::*;
        let want: &[(&str, u32, u8, DriverVersion, bool, bool, usize)] = &[
            ("DEVICE_INFO", 0x80084e03, 3, V2_26, false, false, 80),
            ("DEVICE_BASIC_INFO", 0x40084e64, 100, V2_26, true, false, 8),
            ("DRIVER_INFO_GET", 0x80184e6e, 110, V2_26, true, false, 24),
            ("DRIVER_INFO_SET", 0x40184e6e, 110, V2_26, true, true, 24),
            ("COMPATIBLE_VERSION", 0x40084e5d, 93, V2_26, true, false, 8),
            ("DEVICE_BDF", 0x80084e65, 101, V2_26, false, false, 8),
            ("DEVICE_BDF_EXT", 0x80084e6a, 106, V2_26, true, false, 16),
            ("HOST_DEVICE_ID", 0x80044e72, 114, V2_26, false, false, 4),
            (
                "HOST_DEVICE_ID_TO_RID_MAP",
                0xc1044e73,
                115,
                V2_26,
                true,
                false,
                260,
            ),
            (
                "GET_LOGICAL_TO_PHYSICAL_NC_MAP",
                0xc0104e78,
                120,
                V2_26,
                true,
                false,
                16,
            ),
            ("POD_INFO", 0xc1044e79, 121, V2_26, true, false, 260),
            ("POD_STATUS", 0xc10c4e7a, 122, V2_26, true, false, 268),
            ("POD_STATUS_V2", 0xc1144e7a, 122, V2_26, true, false, 276),
            ("POD_CTRL", 0xc0104e7b, 123, V2_26, true, false, 16),
            ("POD_CTRL_V2", 0xc0144e7b, 123, V2_26, true, false, 20),
            (
                "DEVICE_GET_ALL_APPS_INFO",
                0x80084e07,
                7,
                V2_26,
                false,
                false,
                16,
            ),
            ("DEVICE_APP_PID", 0x80044e06, 6, V2_26, false, false, 4),
            ("GET_VA_PLACEMENT", 0x40104e83, 131, V2_26, true, false, 16),
            ("MEM_ALLOC", 0x80084e15, 21, V2_26, false, true, 32),
            ("MEM_ALLOC_V2", 0x80084e66, 102, V2_26, false, false, 40),
            ("MEM_ALLOC_V2MT", 0x80304e66, 102, V2_26, false, false, 48),
            ("MEM_ALLOC_V2MT64", 0x80384e66, 102, V2_26, false, false, 56),
            ("MEM_FREE", 0x80084e16, 22, V2_26, false, true, 8),
            (
                "MEM_GET_EXTENDED_INFO",
                0x80084e1d,
                29,
                V2_26,
                false,
                false,
                48,
            ),
            ("MEM_GET_PA", 0x80084e19, 25, V2_26, false, true, 16),
            ("MEM_GET_INFO", 0x80084e1a, 26, V2_26, false, true, 24),
            ("MEM_MC_GET_INFO", 0xc0184e6f, 111, V2_26, false, false, 24),
            (
                "MEM_MC_GET_INFO_V2",
                0xc0204e6f,
                111,
                V2_26,
                false,
                false,
                32,
            ),
            ("DUMP_MEM_CHUNKS", 0x80084e74, 116, V2_26, false, false, 24),
            ("MEM_COPY", 0x80084e17, 23, V2_26, false, true, 32),
            ("MEM_COPY64", 0x80284e17, 23, V2_26, false, false, 40),
            ("MEM_COPY_ASYNC", 0xc0304e6c, 108, V2_26, false, true, 48),
            ("MEM_COPY_ASYNC64", 0xc0384e6c, 108, V2_26, false, false, 56),
            (
                "MEM_COPY_ASYNC_WAIT",
                0x40184e6d,
                109,
                V2_26,
                false,
                true,
                24,
            ),
            ("MEM_BUF_COPY", 0xc0084e18, 24, V2_26, false, false, 32),
            ("MEM_BUF_COPY64", 0xc0284e18, 24, V2_26, false, false, 40),
            (
                "MEM_BUF_ZEROCOPY64",
                0xc0304e7c,
                124,
                V2_26,
                false,
                false,
                48,
            ),
            (
                "MEM_BUF_ZEROCOPY64_BATCHES",
                0xc0204e81,
                129,
                V2_26,
                false,
                false,
                32,
            ),
            ("MEMSET", 0x80084e1c, 28, V2_26, false, false, 24),
            ("MEMSET64", 0x80204e1c, 28, V2_26, false, false, 32),
            ("DMABUF_FD", 0x80084e6b, 107, V2_26, true, false, 24),
            ("DMA_ENG_INIT", 0x80084e1e, 30, V2_26, false, true, 4),
            ("DMA_ENG_SET_STATE", 0x80084e1f, 31, V2_26, false, true, 8),
            ("DMA_ENG_GET_STATE", 0xc0084e20, 32, V2_26, false, false, 16),
            ("DMA_QUEUE_INIT", 0x80084e21, 33, V2_26, false, true, 48),
            (
                "DMA_QUEUE_INIT_BATCH",
                0xb0084e85,
                133,
                V2_26,
                false,
                false,
                12296,
            ),
            ("DMA_QUEUE_RELEASE", 0x80084e22, 34, V2_26, false, true, 8),
            (
                "DMA_QUEUE_COPY_START",
                0x80084e23,
                35,
                V2_26,
                false,
                false,
                16,
            ),
            ("DMA_ACK_COMPLETED", 0x80084e24, 36, V2_26, false, true, 12),
            (
                "DMA_QUEUE_GET_STATE",
                0xc0084e25,
                37,
                V2_26,
                false,
                false,
                24,
            ),
            (
                "DMA_COPY_DESCRIPTORS",
                0x80084e26,
                38,
                V2_26,
                false,
                true,
                32,
            ),
            (
                "DMA_COPY_DESCRIPTORS64",
                0x80284e26,
                38,
                V2_26,
                false,
                false,
                40,
            ),
            (
                "DMA_DESCRIPTOR_COPYOUT",
                0xc0084e27,
                39,
                V2_26,
                false,
                false,
                32,
            ),
            (
                "DMA_QUIESCE_QUEUES",
                0x80084e28,
                40,
                V2_26,
                false,
                false,
                264,
            ),
            (
                "H2T_DMA_ALLOC_QUEUES",
                0xc0144e7d,
                125,
                V2_26,
                false,
                false,
                20,
            ),
            (
                "H2T_DMA_FREE_QUEUES",
                0xc0084e7e,
                126,
                V2_26,
                false,
                false,
                8,
            ),
            ("HBM_SCRUB_START", 0xc0104e76, 118, V2_26, false, false, 16),
            ("HBM_SCRUB_WAIT", 0xc0084e77, 119, V2_26, false, false, 8),
            (
                "NOTIFICATIONS_INIT_V1",
                0x80084e33,
                51,
                V2_26,
                false,
                true,
                24,
            ),
            (
                "NOTIFICATIONS_INIT_V2",
                0x80084e35,
                53,
                V2_26,
                false,
                true,
                48,
            ),
            (
                "NOTIFICATIONS_INIT_WITH_REALLOC_V2",
                0x80084e36,
                54,
                V2_26,
                false,
                true,
                56,
            ),
            (
                "NOTIFICATIONS_DESTROY_V1",
                0x80084e34,
                52,
                V2_26,
                false,
                false,
                8,
            ),
            (
                "NOTIFICATIONS_QUEUE_INFO",
                0x80084e3a,
                58,
                V2_26,
                false,
                false,
                12,
            ),
            (
                "THROTTLING_NOTIFICATIONS",
                0x40044e82,
                130,
                V2_26,
                false,
                false,
                4,
            ),
            (
                "SEMAPHORE_INCREMENT",
                0x80084e29,
                41,
                V2_26,
                false,
                false,
                12,
            ),
            (
                "SEMAPHORE_DECREMENT",
                0x80084e2a,
                42,
                V2_26,
                false,
                false,
                12,
            ),
            ("SEMAPHORE_READ", 0xc0084e2b, 43, V2_26, false, false, 12),
            ("SEMAPHORE_WRITE", 0x80084e2c, 44, V2_26, false, false, 12),
            ("EVENT_SET", 0x80084e2d, 45, V2_26, false, false, 12),
            ("EVENT_GET", 0xc0084e2e, 46, V2_26, false, false, 12),
            ("BAR_READ", 0x80084e0b, 11, V2_26, false, false, 32),
            ("BAR_WRITE", 0x40084e0c, 12, V2_26, false, true, 32),
            ("READ_HW_COUNTERS", 0x80084e3d, 61, V2_26, false, false, 24),
            ("PROGRAM_ENGINE", 0xc0084e1b, 27, V2_26, false, false, 24),
            (
                "PROGRAM_ENGINE_NC",
                0xc0084e69,
                105,
                V2_26,
                false,
                false,
                32,
            ),
            (
                "PROGRAM_ENGINE_NC64",
                0xc0284e69,
                105,
                V2_26,
                false,
                false,
                40,
            ),
            ("NC_RESET", 0x80084e67, 103, V2_26, false, false, 8),
            ("NC_RESET_READY", 0x80084e68, 104, V2_26, false, false, 8),
            ("DEVICE_RESET", 0x00004e01, 1, V2_26, false, false, 0),
            ("DEVICE_READY", 0x80014e02, 2, V2_26, false, false, 1),
            (
                "DEVICE_RESET_STATUS",
                0x80014e6a,
                106,
                V2_26,
                false,
                false,
                1,
            ),
            ("DEVICE_INIT", 0x80084e04, 4, V2_26, false, false, 4),
            ("DEVICE_RELEASE", 0x00004e05, 5, V2_26, false, false, 0),
            ("CINIT_SET_STATE", 0x40084e5b, 91, V2_26, false, false, 12),
            (
                "NC_MODEL_STARTED_COUNT",
                0x40084e5c,
                92,
                V2_26,
                false,
                false,
                16,
            ),
            ("CRWL_READER_ENTER", 0x40084e51, 81, V2_26, false, false, 36),
            ("CRWL_READER_EXIT", 0x40084e52, 82, V2_26, false, false, 36),
            ("CRWL_WRITER_ENTER", 0x40084e53, 83, V2_26, false, false, 36),
            (
                "CRWL_WRITER_DOWNGRADE",
                0x40084e54,
                84,
                V2_26,
                false,
                false,
                36,
            ),
            ("CRWL_NC_RANGE_MARK", 0x40084e55, 85, V2_26, true, false, 24),
            (
                "CRWL_NC_RANGE_MARK_EXT0",
                0xc0504e55,
                85,
                V2_26,
                true,
                false,
                80,
            ),
            (
                "CRWL_NC_RANGE_UNMARK",
                0x40084e56,
                86,
                V2_26,
                true,
                false,
                24,
            ),
            (
                "CRWL_NC_RANGE_UNMARK_EXT0",
                0x40504e56,
                86,
                V2_26,
                true,
                false,
                80,
            ),
            ("ACQUIRE_NEURON_DS", 0x80084e47, 71, V2_26, false, false, 24),
            ("RELEASE_NEURON_DS", 0x80084e48, 72, V2_26, false, false, 24),
            ("NC_PID_STATE_DUMP", 0xc0104e75, 117, V2_26, true, false, 16),
            ("POST_METRIC", 0x40084e0d, 13, V2_26, false, true, 16),
            ("METRICS_CTRL", 0x40044e80, 128, V2_26, false, false, 4),
            ("POWER_PROFILE", 0x40084e7f, 127, V2_26, false, false, 8),
            ("PRINTK", 0x40104e71, 113, V2_26, true, false, 16),
            (
                "RESOURCE_MMAP_INFO",
                0xc0204e70,
                112,
                V2_26,
                false,
                false,
                32,
            ),
            (
                "GET_PERFORMANCE_PROFILE",
                0xc0084e84,
                132,
                V2_27,
                false,
                false,
                8,
            ),
            (
                "AVAILABLE_PERF_PROFILES",
                0xc0244e86,
                134,
                V2_27,
                false,
                false,
                36,
            ),
            (
                "GET_ASYNC_H2T_DMA_COMPL_QUEUES",
                0xc1084e87,
                135,
                V2_27,
                false,
                false,
                264,
            ),
            (
                "MEM_ALLOC_V2MT64_PA",
                0xc0404e66,
                102,
                V2_28,
                false,
                false,
                64,
            ),
            ("HOST_MEM_PIN", 0xc0184e88, 136, V2_28, false, false, 24),
            ("HOST_MEM_UNPIN", 0x40084e89, 137, V2_28, false, false, 8),
            ("DMABUF_FD_V2", 0x80084e8a, 138, Newest, false, false, 0),
        ];
        assert_eq!(COMMANDS.len(), want.len());
        for (c, w) in COMMANDS.iter().zip(want) {
            let got = (
                c.name,
                c.cmd,
                c.nr,
                c.since,
                c.misc_fd_ok,
                c.needs_attach,
                c.arg_size,
            );
            assert_eq!(got, *w, "{}", c.name);
        }
    }

    #[test]
    fn marker_types_carry_value_and_argument() {
        assert_eq!(
            <cmd::MEM_ALLOC_V2MT as Ioctl>::CMD,
            NEURON_IOCTL_MEM_ALLOC_V2MT
        );
        assert_eq!(<cmd::MEM_ALLOC_V2MT as Ioctl>::NAME, "MEM_ALLOC_V2MT");
        assert_eq!(
            size_of::<<cmd::MEM_ALLOC_V2MT as Ioctl>::Arg>(),
            size_of::<structs::MemAllocV2MemType>()
        );
        assert_eq!(size_of::<<cmd::DMABUF_FD_V2 as Ioctl>::Arg>(), 0);
        assert_eq!(size_of::<<cmd::DEVICE_RESET as Ioctl>::Arg>(), 0);
        assert_eq!(
            lookup(NEURON_IOCTL_DMABUF_FD_V2).map(|c| c.arg_type),
            Some("Unpublished")
        );
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
