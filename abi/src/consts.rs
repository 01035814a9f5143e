//! Enumerations and constants of the `neuron.ko` ABI (driver-abi.md §1, §2.7, §4, §5, §8).

use std::fmt;

// ---------------------------------------------------------------------------------------------
// Device / process limits (§1, §2.3)
// ---------------------------------------------------------------------------------------------

/// Maximum Neuron devices (char-device minors) per host (§1).
pub const MAX_NEURON_DEVICE_COUNT: u32 = 64;
/// Maximum distinct processes attached to one device; a 17th open gets `-EBUSY` (§1).
pub const NEURON_MAX_PROCESS_PER_DEVICE: u32 = 16;
/// Maximum registers per BAR_READ / BAR_WRITE (`FW_IO_MAX_READLESS_READ_REGISTER_COUNT`, §2.3).
pub const BAR_RW_MAX_REGISTERS: u32 = 100;
/// Maximum PRINTK string length including the terminating NUL (§2.3).
pub const PRINTK_MAX_LEN: u32 = 512;
/// Maximum entries of GET_LOGICAL_TO_PHYSICAL_NC_MAP (§2.3).
pub const NC_MAP_MAX_ENTRIES: u32 = 128;
/// DMA_QUEUE_INIT_BATCH entry array size; `count` must be below it (≥ 256 → `-E2BIG`) (§2.3).
pub const DMA_QUEUE_INIT_BATCH_MAX: u32 = 256;
/// NeuronCores tracked per device in the global CRWL reservation table (64 devices × 8) (§2.3).
pub const CRWL_MAX_NC_PER_DEVICE: u32 = 8;
/// Required `sz` of HOST_DEVICE_ID_TO_RID_MAP and POD_INFO (§2.3).
pub const POD_INFO_SZ: u16 = 260;
/// Required `sz` of POWER_PROFILE / GET_PERFORMANCE_PROFILE (§2.3, §2.6).
pub const POWER_PROFILE_SZ: u16 = 8;
/// POWER_PROFILE `ctrl`: set (§2.3).
pub const POWER_PROFILE_CTRL_SET: u16 = 0;
/// GET_PERFORMANCE_PROFILE `ctrl`: get (§2.6).
pub const POWER_PROFILE_CTRL_GET: u16 = 1;
/// Minimum encoded size accepted by DRIVER_INFO_GET, and the `size` it reports (§2.3).
pub const DRIVER_INFO_SIZE: u32 = 24;
/// DMA_ENG_GET_STATE `max_queues` / `num_queues` (§2.3).
pub const DMA_ENG_MAX_QUEUES: u32 = 16;
/// DMA_ENG_GET_STATE `revision_id`: the UDMA revision the driver reports (§2.3).
pub const DMA_ENG_REVISION_ID: u32 = 4;
/// DMA engine state (DMA_ENG_GET/SET_STATE `state`): disabled (§2.3).
pub const DMA_ENG_STATE_DISABLE: u32 = 0;
/// DMA engine state: idle.
pub const DMA_ENG_STATE_IDLE: u32 = 1;
/// DMA engine state: normal (running).
pub const DMA_ENG_STATE_NORMAL: u32 = 2;
/// DMA engine state: aborted.
pub const DMA_ENG_STATE_ABORT: u32 = 3;
/// DMA_QUEUE_GET_STATE `sw_status`: disabled (§2.3).
pub const DMA_QUEUE_SW_DISABLED: u32 = 1;
/// DMA_QUEUE_GET_STATE `sw_status`: enabled.
pub const DMA_QUEUE_SW_ENABLED: u32 = 2;
/// DMA_QUEUE_GET_STATE `sw_status`: aborted.
pub const DMA_QUEUE_SW_ABORTED: u32 = 3;

// ---------------------------------------------------------------------------------------------
// Device state, reset, core init (§1, §2.3, §2.7, §7.1)
// ---------------------------------------------------------------------------------------------

/// Device state (sysfs `reset`): RESET (§1).
pub const DEVICE_STATE_RESET: u32 = 0;
/// Device state: READY.
pub const DEVICE_STATE_READY: u32 = 1;
/// Device state: INVALID.
pub const DEVICE_STATE_INVALID: u32 = 2;

/// `nc_map` value meaning the whole device (`NEURON_NC_MAP_DEVICE`, §2.7).
pub const NEURON_NC_MAP_DEVICE: u32 = 0xFFFF_FFFF;
/// Alias of [`NEURON_NC_MAP_DEVICE`].
pub const NC_MAP_DEVICE: u32 = NEURON_NC_MAP_DEVICE;
/// Reset request id the driver uses for its own (internal) requests (§7.1).
pub const RESET_REQUEST_ID_INTERNAL: u32 = 0xFFFF_FFFF;
/// NC_RESET_READY `result`: success (§2.3).
pub const RESET_RESULT_SUCCESS: i32 = 0;
/// NC_RESET_READY `result`: failure / unknown id (§2.3).
pub const RESET_RESULT_FAILURE: i32 = 1;

/// `neuron_cinit_state` STARTED (§2.7).
pub const CINIT_STATE_STARTED: u32 = 1;
/// `neuron_cinit_state` COMPLETED (§2.7).
pub const CINIT_STATE_COMPLETED: u32 = 2;
/// `neuron_cinit_state` INVALID (state after reset) (§2.7).
pub const CINIT_STATE_INVALID: u32 = 3;

// ---------------------------------------------------------------------------------------------
// DRIVER_INFO feature flags (§2.7)
// ---------------------------------------------------------------------------------------------

/// `feature_flags1` bit 0: DMABUF.
pub const DRIVER_FEATURE_DMABUF: u64 = 1 << 0;
/// `feature_flags1` bit 1: ASYNC_DMA.
pub const DRIVER_FEATURE_ASYNC_DMA: u64 = 1 << 1;
/// `feature_flags1` bit 2: BATCH_DMAQ_INIT.
pub const DRIVER_FEATURE_BATCH_DMAQ_INIT: u64 = 1 << 2;
/// `feature_flags1` bit 3: BIG_CORE_MAPS.
pub const DRIVER_FEATURE_BIG_CORE_MAPS: u64 = 1 << 3;
/// `feature_flags1` bit 4: MEM_ALLOC_TYPE.
pub const DRIVER_FEATURE_MEM_ALLOC_TYPE: u64 = 1 << 4;
/// `feature_flags1` bit 5: HBM_SCRUB.
pub const DRIVER_FEATURE_HBM_SCRUB: u64 = 1 << 5;
/// `feature_flags1` bit 6: MEM_ALLOC64.
pub const DRIVER_FEATURE_MEM_ALLOC64: u64 = 1 << 6;
/// `feature_flags1` bit 7: CONTIGUOUS_SCRATCHPAD.
pub const DRIVER_FEATURE_CONTIGUOUS_SCRATCHPAD: u64 = 1 << 7;
/// `feature_flags1` bit 8: ZEROCOPY.
pub const DRIVER_FEATURE_ZEROCOPY: u64 = 1 << 8;
/// `feature_flags1` reported by 2.26: all nine flags (§2.3, §2.7).
pub const DRIVER_FEATURE_FLAGS1_2_26: u64 = 0x1FF;

// ---------------------------------------------------------------------------------------------
// mmap resource selectors (§2.4, §2.7)
// ---------------------------------------------------------------------------------------------

/// RESOURCE_MMAP_INFO `block`: INVALID (−1 as C enum).
pub const MMAP_BLOCK_INVALID: u32 = u32::MAX;
/// RESOURCE_MMAP_INFO `block`: TPB (NeuronCore).
pub const MMAP_BLOCK_TPB: u32 = 0;
/// RESOURCE_MMAP_INFO `block`: TOP_SP.
pub const MMAP_BLOCK_TOPSP: u32 = 1;
/// RESOURCE_MMAP_INFO `block`: HBM.
pub const MMAP_BLOCK_HBM: u32 = 2;
/// RESOURCE_MMAP_INFO `resource`: SEMAPHORE (8 KiB semaphore/event page).
pub const MMAP_RESOURCE_SEMAPHORE: u32 = 0;
/// RESOURCE_MMAP_INFO `resource`: ALL (read-only).
pub const MMAP_RESOURCE_ALL: u32 = 1;
/// RESOURCE_MMAP_INFO `resource`: SBUF (state buffer).
pub const MMAP_RESOURCE_SBUF: u32 = 2;
/// RESOURCE_MMAP_INFO `resource`: DMEM (device memory).
pub const MMAP_RESOURCE_DMEM: u32 = 3;

// ---------------------------------------------------------------------------------------------
// H2T DMA contexts (§2.7, §3.5)
// ---------------------------------------------------------------------------------------------

/// H2T DMA context handle NONE (§2.7).
pub const H2T_CTX_HANDLE_NONE: i32 = -1;
/// H2T DMA context handle SYNC.
pub const H2T_CTX_HANDLE_SYNC: i32 = 0;
/// H2T DMA context handle ASYNC1.
pub const H2T_CTX_HANDLE_ASYNC1: i32 = 1;
/// H2T DMA context handle ASYNC2.
pub const H2T_CTX_HANDLE_ASYNC2: i32 = 2;
/// Number of H2T DMA context handles.
pub const H2T_CTX_HANDLE_CNT: i32 = 3;
/// `h2t_qid` meaning "the NC's default H2T queue" (§2.7).
pub const H2T_DEFAULT_QID: i32 = -1;

// ---------------------------------------------------------------------------------------------
// Notification queues (§2.7, §4)
// ---------------------------------------------------------------------------------------------

/// `NQ_DEVICE_TYPE` NeuronCore (§2.7).
pub const NQ_DEVICE_TYPE_NEURON_CORE: u32 = 0;
/// `NQ_DEVICE_TYPE` TOP_SP.
pub const NQ_DEVICE_TYPE_TOPSP: u32 = 1;

/// `NQ_TYPE` TRACE: implicit per-instruction trace (§2.7, §4).
pub const NQ_TYPE_TRACE: u32 = 0;
/// `NQ_TYPE` NOTIFY: explicit NOTIFY instructions.
pub const NQ_TYPE_NOTIFY: u32 = 1;
/// `NQ_TYPE` EVENT: event set/clear.
pub const NQ_TYPE_EVENT: u32 = 2;
/// `NQ_TYPE` ERROR.
pub const NQ_TYPE_ERROR: u32 = 3;
/// `NQ_TYPE` TRACE_DMA: generated by the DMA engines.
pub const NQ_TYPE_TRACE_DMA: u32 = 4;
/// `NQ_TYPE` THROTTLE: HAM throttling (requested by THROTTLING_NOTIFICATIONS).
pub const NQ_TYPE_THROTTLE: u32 = 5;
/// Number of NQ types the driver accepts.
pub const NQ_TYPE_COUNT: u32 = 6;
/// Queues per NQ type (engine_index 0..16) (§4).
pub const NQ_ENGINES_PER_TYPE: u32 = 16;
/// `MAX_NQ_SUPPORTED` = 6 × 16: queue ids must be below it (§4).
pub const MAX_NQ: u32 = 96;

/// Queue id inside an NC (or TOP_SP): `nq_type × 16 + engine_index` (§4).
pub const fn nq_id(nq_type: u32, engine_index: u32) -> u32 {
    nq_type
        .wrapping_mul(NQ_ENGINES_PER_TYPE)
        .wrapping_add(engine_index)
}

/// Whether the driver accepts `(nq_type, engine_index)`: the queue id must be below [`MAX_NQ`]
/// (§4). Computed without overflow.
pub const fn nq_id_valid(nq_type: u32, engine_index: u32) -> bool {
    match nq_type.checked_mul(NQ_ENGINES_PER_TYPE) {
        Some(base) => match base.checked_add(engine_index) {
            Some(id) => id < MAX_NQ,
            None => false,
        },
        None => false,
    }
}

/// Offset of queue slot `i`'s registers inside a "notific" register block: 0x100 + i × 0x28 (§4).
pub const fn notific_queue_regs(i: u32) -> u64 {
    NOTIFIC_QUEUE_BASE + i as u64 * NOTIFIC_QUEUE_STRIDE
}
/// First queue slot inside a notific block (§4).
pub const NOTIFIC_QUEUE_BASE: u64 = 0x100;
/// Stride between queue slots of a notific block (§4).
pub const NOTIFIC_QUEUE_STRIDE: u64 = 0x28;
/// Queue slot register: base address, low 32 bits (§4).
pub const NOTIFIC_Q_BASE_ADDR_LO: u64 = 0x0;
/// Queue slot register: base address, high 32 bits.
pub const NOTIFIC_Q_BASE_ADDR_HI: u64 = 0x4;
/// Queue slot register: queue size in bytes (0 = halted).
pub const NOTIFIC_Q_F_SIZE: u64 = 0x8;
/// Queue slot register: HEAD (consumer progress).
pub const NOTIFIC_Q_HEAD: u64 = 0xC;

// ---------------------------------------------------------------------------------------------
// Semaphore / event register page (§5)
// ---------------------------------------------------------------------------------------------

/// Offset of the semaphore/event page inside a 64 MiB TPB window (§5).
pub const TPB_SEMA_PAGE_OFFSET: u64 = 0x270_0000;
/// Size of the semaphore/event page (= the SEMAPHORE mmap resource) (§2.4, §5).
pub const SEMA_PAGE_SIZE: u64 = 0x2000;
/// Page offset of `event[0]`: read = value, write = set value (§5).
pub const SEMA_PAGE_EVENT: u64 = 0x0;
/// Page offset of `semaphore[0]` read register (§5).
pub const SEMA_PAGE_SEM_READ: u64 = 0x1000;
/// Page offset of `semaphore[0]` set register (write = set) (§5).
pub const SEMA_PAGE_SEM_SET: u64 = 0x1400;
/// Page offset of `semaphore[0]` increment register (write v = atomic add v) (§5).
pub const SEMA_PAGE_SEM_INC: u64 = 0x1800;
/// Page offset of `semaphore[0]` decrement register (write v = atomic subtract v) (§5).
pub const SEMA_PAGE_SEM_DEC: u64 = 0x1c00;
/// Stride between consecutive registers of one kind (§5).
pub const SEMA_REG_STRIDE: u64 = 4;
/// Semaphores per NC / TOP_SP on v2+ (§5).
pub const SEMAPHORES_PER_NC: u32 = 256;
/// Events per NC / TOP_SP (§5).
pub const EVENTS_PER_NC: u32 = 256;

/// One register of the semaphore/event page (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SemaReg {
    /// `event[i]`: read value / write to set.
    Event(u32),
    /// `semaphore[i]` read register.
    SemRead(u32),
    /// `semaphore[i]` set register.
    SemSet(u32),
    /// `semaphore[i]` increment register.
    SemInc(u32),
    /// `semaphore[i]` decrement register.
    SemDec(u32),
}

impl SemaReg {
    /// Byte offset of this register inside the 8 KiB page, `None` if the index is ≥ 256.
    pub const fn page_offset(self) -> Option<u64> {
        let (base, i) = match self {
            SemaReg::Event(i) => (SEMA_PAGE_EVENT, i),
            SemaReg::SemRead(i) => (SEMA_PAGE_SEM_READ, i),
            SemaReg::SemSet(i) => (SEMA_PAGE_SEM_SET, i),
            SemaReg::SemInc(i) => (SEMA_PAGE_SEM_INC, i),
            SemaReg::SemDec(i) => (SEMA_PAGE_SEM_DEC, i),
        };
        if i >= SEMAPHORES_PER_NC {
            return None;
        }
        Some(base + i as u64 * SEMA_REG_STRIDE)
    }

    /// Decode a byte offset inside the 8 KiB page; `None` for unaligned offsets, the unused hole
    /// 0x400..0x1000 and offsets ≥ 0x2000.
    pub const fn from_page_offset(off: u64) -> Option<SemaReg> {
        if off & (SEMA_REG_STRIDE - 1) != 0 || off >= SEMA_PAGE_SIZE {
            return None;
        }
        let i = ((off & 0x3ff) / SEMA_REG_STRIDE) as u32;
        Some(match off & !0x3ff {
            SEMA_PAGE_EVENT => SemaReg::Event(i),
            SEMA_PAGE_SEM_READ => SemaReg::SemRead(i),
            SEMA_PAGE_SEM_SET => SemaReg::SemSet(i),
            SEMA_PAGE_SEM_INC => SemaReg::SemInc(i),
            SEMA_PAGE_SEM_DEC => SemaReg::SemDec(i),
            _ => return None,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Memory allocator (§2.7, §8)
// ---------------------------------------------------------------------------------------------

/// Allocation granule: sizes are rounded up to 4 KiB and chunks are 4 KiB aligned (§8).
pub const MC_PAGE_SIZE: u64 = 4096;
/// First mem handle ever returned; 0 is invalid (§8).
pub const FIRST_MEM_HANDLE: u64 = 1;
/// Mem-handle table capacity per device: 512 × 8192 entries (§8).
pub const MEM_HANDLE_TABLE_ENTRIES: u64 = 512 * 8192;
/// Size of the "small" pool at the end of each HBM (§8).
pub const MEMPOOL_SMALL_POOL_SIZE: u64 = 1 << 30;
/// Largest allocation served from the small pool (§8).
pub const MEMPOOL_SMALL_ALLOC_MAX: u64 = 512 << 10;
/// Host bounce buffer / memset buffer size used by driver-internal copies (§2.3, §3.5).
pub const DRIVER_BOUNCE_BUFFER_SIZE: u64 = 64 << 10;
/// Datastore (NDS) size per process slot (§2.7).
pub const NDS_SLOT_SIZE: u64 = 256 << 10;
/// Datastore slots per device (§2.7).
pub const NDS_SLOTS_PER_DEVICE: u32 = 16;

/// `mem_alloc_category_t` (the `mem_type` of MEM_ALLOC_V2MT*, §2.7). Open: any `u32` is a valid
/// value on the wire (the driver re-labels out-of-range values as UNKNOWN).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MemType(pub u32);

impl MemType {
    pub const UNKNOWN_HOST: MemType = MemType(0);
    pub const CODE_HOST: MemType = MemType(1);
    pub const TENSORS_HOST: MemType = MemType(2);
    pub const CONSTANTS_HOST: MemType = MemType(3);
    pub const MISC_HOST: MemType = MemType(4);
    pub const NCDEV_HOST: MemType = MemType(5);
    pub const NOTIFICATION_HOST: MemType = MemType(6);
    pub const UNKNOWN_DEVICE: MemType = MemType(7);
    pub const CODE_DEVICE: MemType = MemType(8);
    pub const TENSORS_DEVICE: MemType = MemType(9);
    pub const CONSTANTS_DEVICE: MemType = MemType(10);
    pub const SCRATCHPAD_DEVICE: MemType = MemType(11);
    pub const MISC_DEVICE: MemType = MemType(12);
    pub const NCDEV_DEVICE: MemType = MemType(13);
    pub const COLLECTIVES_DEVICE: MemType = MemType(14);
    pub const SCRATCHPAD_NONSHARED_DEVICE: MemType = MemType(15);
    pub const NOTIFICATION_DEVICE: MemType = MemType(16);
    pub const DMA_RINGS_HOST: MemType = MemType(17);
    pub const DMA_RINGS_DEVICE: MemType = MemType(18);
    pub const CONTIGUOUS_SCRATCHPAD_DEVICE: MemType = MemType(19);
    /// One past the last defined category.
    pub const MAX: MemType = MemType(20);

    /// The category's name without the `NEURON_MEMALLOC_TYPE_` style prefix (e.g.
    /// `"TENSORS_DEVICE"`), `None` for values ≥ [`MemType::MAX`].
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "UNKNOWN_HOST",
            1 => "CODE_HOST",
            2 => "TENSORS_HOST",
            3 => "CONSTANTS_HOST",
            4 => "MISC_HOST",
            5 => "NCDEV_HOST",
            6 => "NOTIFICATION_HOST",
            7 => "UNKNOWN_DEVICE",
            8 => "CODE_DEVICE",
            9 => "TENSORS_DEVICE",
            10 => "CONSTANTS_DEVICE",
            11 => "SCRATCHPAD_DEVICE",
            12 => "MISC_DEVICE",
            13 => "NCDEV_DEVICE",
            14 => "COLLECTIVES_DEVICE",
            15 => "SCRATCHPAD_NONSHARED_DEVICE",
            16 => "NOTIFICATION_DEVICE",
            17 => "DMA_RINGS_HOST",
            18 => "DMA_RINGS_DEVICE",
            19 => "CONTIGUOUS_SCRATCHPAD_DEVICE",
            _ => return None,
        })
    }

    /// Whether the value is a defined category (< 20).
    pub const fn is_known(self) -> bool {
        self.0 < MemType::MAX.0
    }

    /// Whether a defined category names host memory (0-6, 17).
    pub const fn is_host(self) -> bool {
        matches!(self.0, 0..=6 | 17)
    }

    /// Whether a defined category names device memory (7-16, 18, 19).
    pub const fn is_device(self) -> bool {
        matches!(self.0, 7..=16 | 18 | 19)
    }
}

impl fmt::Debug for MemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "MemType({})", self.0),
        }
    }
}

impl fmt::Display for MemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl From<u32> for MemType {
    fn from(v: u32) -> Self {
        MemType(v)
    }
}

impl From<MemType> for u32 {
    fn from(v: MemType) -> Self {
        v.0
    }
}

// ---------------------------------------------------------------------------------------------
// Pod / metrics / apps info (§2.3, §2.7)
// ---------------------------------------------------------------------------------------------

/// Pod type NONE (standard instance).
pub const POD_TYPE_NONE: u8 = 0;
/// Pod type P2P.
pub const POD_TYPE_P2P: u8 = 1;
/// Pod type SWITCH.
pub const POD_TYPE_SWITCH: u8 = 2;
/// Pod election state NOT_STARTED.
pub const POD_STATE_NOT_STARTED: u32 = 0;
/// Pod election state IN_PROGRESS.
pub const POD_STATE_IN_PROGRESS: u32 = 1;
/// Pod election state ULTRASERVER.
pub const POD_STATE_ULTRASERVER: u32 = 2;
/// Pod election state FAILED.
pub const POD_STATE_FAILED: u32 = 3;
/// Pod election state SINGLE_NODE (what a standard instance reports).
pub const POD_STATE_SINGLE_NODE: u32 = 4;
/// Pod ctrl REQ_POD.
pub const POD_CTRL_REQ_POD: u32 = 0;
/// Pod ctrl REQ_SINGLE_NODE.
pub const POD_CTRL_REQ_SINGLE_NODE: u32 = 1;
/// Pod ctrl REQ_KILL.
pub const POD_CTRL_REQ_KILL: u32 = 2;
/// Pod ctrl SET_MODE.
pub const POD_CTRL_SET_MODE: u32 = 3;
/// Ultraserver mode UNSET.
pub const ULTRASERVER_MODE_UNSET: u32 = 0;
/// Ultraserver mode X4.
pub const ULTRASERVER_MODE_X4: u32 = 1;
/// Ultraserver mode X2H.
pub const ULTRASERVER_MODE_X2H: u32 = 2;
/// Ultraserver mode X2V.
pub const ULTRASERVER_MODE_X2V: u32 = 3;
/// Ultraserver mode X1.
pub const ULTRASERVER_MODE_X1: u32 = 4;

/// METRICS_CTRL mode: periodic posting enabled.
pub const METRICS_PERIODIC_ENABLE: u32 = 0;
/// METRICS_CTRL mode: periodic posting disabled.
pub const METRICS_PERIODIC_DISABLE: u32 = 1;

/// DEVICE_GET_ALL_APPS_INFO flag: NC lock info.
pub const APPS_INFO_PID_NC_LOCK_INFO: u16 = 1;
/// DEVICE_GET_ALL_APPS_INFO flag: memory usage.
pub const APPS_INFO_PID_MEM_USAGE: u16 = 2;
/// DEVICE_GET_ALL_APPS_INFO flags: all.
pub const APPS_INFO_ALL: u16 = 0xF;
/// UUIDs per [`crate::structs::AppInfo`].
pub const APP_INFO_MAX_MODELS_PER_DEVICE: u32 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(MAX_NEURON_DEVICE_COUNT, 64);
        assert_eq!(NEURON_MAX_PROCESS_PER_DEVICE, 16);
        assert_eq!(BAR_RW_MAX_REGISTERS, 100);
        assert_eq!(PRINTK_MAX_LEN, 512);
        assert_eq!(NEURON_NC_MAP_DEVICE, 0xFFFFFFFF);
        assert_eq!(NC_MAP_DEVICE, 0xFFFFFFFF);
    }

    #[test]
    fn feature_flags() {
        let all = DRIVER_FEATURE_DMABUF
            | DRIVER_FEATURE_ASYNC_DMA
            | DRIVER_FEATURE_BATCH_DMAQ_INIT
            | DRIVER_FEATURE_BIG_CORE_MAPS
            | DRIVER_FEATURE_MEM_ALLOC_TYPE
            | DRIVER_FEATURE_HBM_SCRUB
            | DRIVER_FEATURE_MEM_ALLOC64
            | DRIVER_FEATURE_CONTIGUOUS_SCRATCHPAD
            | DRIVER_FEATURE_ZEROCOPY;
        assert_eq!(all, 0x1FF);
        assert_eq!(DRIVER_FEATURE_FLAGS1_2_26, 0x1FF);
        assert_eq!(DRIVER_FEATURE_ZEROCOPY, 0x100);
    }

    #[test]
    fn states_and_selectors() {
        assert_eq!(
            (
                CINIT_STATE_STARTED,
                CINIT_STATE_COMPLETED,
                CINIT_STATE_INVALID
            ),
            (1, 2, 3)
        );
        assert_eq!(
            (DEVICE_STATE_RESET, DEVICE_STATE_READY, DEVICE_STATE_INVALID),
            (0, 1, 2)
        );
        assert_eq!(
            (MMAP_BLOCK_TPB, MMAP_BLOCK_TOPSP, MMAP_BLOCK_HBM),
            (0, 1, 2)
        );
        assert_eq!(MMAP_BLOCK_INVALID, -1i32 as u32);
        assert_eq!(
            (
                MMAP_RESOURCE_SEMAPHORE,
                MMAP_RESOURCE_ALL,
                MMAP_RESOURCE_SBUF,
                MMAP_RESOURCE_DMEM
            ),
            (0, 1, 2, 3)
        );
        assert_eq!(
            (
                H2T_CTX_HANDLE_NONE,
                H2T_CTX_HANDLE_SYNC,
                H2T_CTX_HANDLE_ASYNC1,
                H2T_CTX_HANDLE_ASYNC2
            ),
            (-1, 0, 1, 2)
        );
        assert_eq!(H2T_CTX_HANDLE_CNT, 3);
        assert_eq!(H2T_DEFAULT_QID, -1);
        assert_eq!(POD_STATE_SINGLE_NODE, 4);
    }

    #[test]
    fn nq() {
        assert_eq!(
            [
                NQ_TYPE_TRACE,
                NQ_TYPE_NOTIFY,
                NQ_TYPE_EVENT,
                NQ_TYPE_ERROR,
                NQ_TYPE_TRACE_DMA,
                NQ_TYPE_THROTTLE
            ],
            [0, 1, 2, 3, 4, 5]
        );
        assert_eq!((NQ_DEVICE_TYPE_NEURON_CORE, NQ_DEVICE_TYPE_TOPSP), (0, 1));
        assert_eq!(nq_id(NQ_TYPE_NOTIFY, 3), 19);
        assert_eq!(nq_id(NQ_TYPE_THROTTLE, 15), 95);
        assert_eq!(MAX_NQ, 96);
        assert!(nq_id_valid(5, 15));
        assert!(!nq_id_valid(6, 0));
        assert!(nq_id_valid(0, 95)); // only the id is checked, as in the driver
        assert!(!nq_id_valid(u32::MAX, 0));
        assert!(!nq_id_valid(0, u32::MAX));
        assert_eq!(notific_queue_regs(2) + NOTIFIC_Q_HEAD, 0x100 + 0x50 + 0xC);
    }

    #[test]
    fn sema_page() {
        assert_eq!(TPB_SEMA_PAGE_OFFSET, 0x2700000);
        assert_eq!(SEMA_PAGE_SIZE, 0x2000);
        assert_eq!(SemaReg::Event(0).page_offset(), Some(0x0));
        assert_eq!(SemaReg::Event(255).page_offset(), Some(0x3fc));
        assert_eq!(SemaReg::SemRead(1).page_offset(), Some(0x1004));
        assert_eq!(SemaReg::SemSet(0).page_offset(), Some(0x1400));
        assert_eq!(SemaReg::SemInc(2).page_offset(), Some(0x1808));
        assert_eq!(SemaReg::SemDec(255).page_offset(), Some(0x1ffc));
        assert_eq!(SemaReg::SemDec(256).page_offset(), None);
        for r in [
            SemaReg::Event(7),
            SemaReg::SemRead(0),
            SemaReg::SemSet(100),
            SemaReg::SemInc(255),
            SemaReg::SemDec(3),
        ] {
            let off = r.page_offset().unwrap_or(u64::MAX);
            assert_eq!(SemaReg::from_page_offset(off), Some(r));
        }
        assert_eq!(SemaReg::from_page_offset(0x400), None);
        assert_eq!(SemaReg::from_page_offset(0xffc), None);
        assert_eq!(SemaReg::from_page_offset(0x1001), None);
        assert_eq!(SemaReg::from_page_offset(0x2000), None);
    }

    #[test]
    fn mem_types() {
        assert_eq!(MemType::UNKNOWN_HOST.0, 0);
        assert_eq!(MemType::NOTIFICATION_HOST.0, 6);
        assert_eq!(MemType::UNKNOWN_DEVICE.0, 7);
        assert_eq!(MemType::TENSORS_DEVICE.0, 9);
        assert_eq!(MemType::SCRATCHPAD_DEVICE.0, 11);
        assert_eq!(MemType::NOTIFICATION_DEVICE.0, 16);
        assert_eq!(MemType::DMA_RINGS_HOST.0, 17);
        assert_eq!(MemType::DMA_RINGS_DEVICE.0, 18);
        assert_eq!(MemType::CONTIGUOUS_SCRATCHPAD_DEVICE.0, 19);
        assert_eq!(MemType::MAX.0, 20);
        assert_eq!(MemType(9).name(), Some("TENSORS_DEVICE"));
        assert_eq!(MemType(20).name(), None);
        assert_eq!(format!("{:?}", MemType(99)), "MemType(99)");
        assert_eq!(MemType::CODE_DEVICE.to_string(), "CODE_DEVICE");
        for v in 0..20 {
            let t = MemType(v);
            assert!(t.is_known() && t.name().is_some());
            assert!(t.is_host() != t.is_device(), "{t}");
        }
        assert!(MemType::DMA_RINGS_HOST.is_host());
        assert!(MemType::CONTIGUOUS_SCRATCHPAD_DEVICE.is_device());
        assert!(!MemType(20).is_host() && !MemType(20).is_device());
    }
}
