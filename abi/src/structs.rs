//! ioctl argument structs of `neuron.ko` (driver-abi.md §2.5, §2.6).
//!
//! Every struct is `#[repr(C)]` with the exact LP64 layout given in the doc. Implicit padding is
//! made explicit as `_pad*` fields (always to be written as zero) so the structs can be
//! `IntoBytes`; user pointers (`type*` in the doc) are `u64`; C enums are `u32`. Field names are
//! the C field names. Each struct's doc names the C struct and the commands using it.

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

// ---------------------------------------------------------------------------------------------
// Shared sub-structures
// ---------------------------------------------------------------------------------------------

/// `neuron_uuid` (32 B): an opaque model UUID (§2.5). Used by [`Crwl`] and [`AppInfo`].
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Uuid32 {
    pub value: [u8; 32],
}

/// `neuron_app_info` (152 B): one entry of DEVICE_GET_ALL_APPS_INFO output (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct AppInfo {
    pub pid: i32,
    /// NC lock bitmap (NCs 0-3 only).
    pub nc_lock_map: u8,
    /// One UUID per NC (`APP_INFO_MAX_MODELS_PER_DEVICE` = 4).
    pub uuid_data: [Uuid32; 4],
    pub _pad0: [u8; 3],
    pub host_mem_size: u64,
    pub device_mem_size: u64,
}

/// `neuron_dma_eng_state` (20 B): output of DMA_ENG_GET_STATE, written to
/// [`DmaEngGetState::state`] (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaEngState {
    pub revision_id: u32,
    pub max_queues: u32,
    pub num_queues: u32,
    /// 0 disable, 1 idle, 2 normal, 3 abort.
    pub tx_state: u32,
    pub rx_state: u32,
}

/// `neuron_dma_queue_state` (48 B): output of DMA_QUEUE_GET_STATE, written to
/// [`DmaQueueGetState::tx`] and [`DmaQueueGetState::rx`] (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaQueueState {
    pub hw_status: u32,
    /// 1 disabled, 2 enabled, 3 aborted.
    pub sw_status: u32,
    pub base_addr: u64,
    pub length: u32,
    pub head_pointer: u32,
    pub tail_pointer: u32,
    pub _pad0: u32,
    pub completion_base_addr: u64,
    pub completion_head: u32,
    pub _pad1: u32,
}

/// `neuron_ioctl_mem_chunk_info` (24 B): one entry of DUMP_MEM_CHUNKS output (§2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemChunkInfo {
    pub pa: u64,
    pub size: u64,
    /// `mem_alloc_category_t` (see `consts::MemType`).
    pub mem_type: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_nc_map_entry` (8 B): one entry of [`NcMap`] (§2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NcMapEntry {
    pub device_id: u32,
    pub device_nc_idx: u32,
}

/// `neuron_ioctl_nc_map` (4 B header): output buffer of GET_LOGICAL_TO_PHYSICAL_NC_MAP, followed
/// by `num_entries` [`NcMapEntry`] (flexible array `mappings`, offset 4) (§2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NcMap {
    pub num_entries: u32,
    /// Flexible array member; entries follow the header in memory.
    pub mappings: [NcMapEntry; 0],
}

/// `neuron_memcpy_batch` (`neuron_memcpy_batch_t`, 40 B): one batch of
/// MEM_BUF_ZEROCOPY64_BATCHES (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemcpyBatch {
    pub mem_handle: u64,
    pub mem_handle_offset: u64,
    /// User pointer to `num_ops` [`TensorBatchOp`].
    pub ops_ptr: u64,
    pub num_ops: u32,
    pub bar4_wr_threshold: u16,
    pub flags: u16,
    /// User pointer (opaque context).
    pub context: u64,
}

/// `nrt_tensor_batch_op` (`nrt_tensor_batch_op_t`, 24 B): one op of a [`MemcpyBatch`]; `offset`
/// is relative to the batch's `mem_handle_offset` (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct TensorBatchOp {
    pub offset: u64,
    pub size: u64,
    /// User pointer.
    pub buffer: u64,
}

// ---------------------------------------------------------------------------------------------
// Device info / discovery / versioning
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_device_info` (80 B): DEVICE_INFO (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceInfo {
    pub architecture: u32,
    pub revision: u32,
    pub connected_device_count: u32,
    pub connected_devices: [u32; 8],
    pub _pad0: u32,
    /// `[0]` = kernel VA of BAR0 (base for BAR_READ/WRITE addresses), `[1]` = BAR2 (0 on v2+).
    pub bar_address: [u64; 2],
    pub bar_size: [u64; 2],
}

/// `neuron_ioctl_device_basic_info` (8 B): DEVICE_BASIC_INFO (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceBasicInfo {
    pub architecture: u32,
    pub revision: u32,
}

/// `neuron_ioctl_device_driver_info` (24 B): DRIVER_INFO_GET / DRIVER_INFO_SET (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceDriverInfo {
    pub architecture: u32,
    pub revision: u32,
    pub version: u32,
    pub size: u32,
    /// See `consts::DRIVER_FEATURE_*`.
    pub feature_flags1: u64,
}

/// `neuron_ioctl_compatible_version` (8 B): COMPATIBLE_VERSION (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CompatibleVersion {
    pub max: u32,
    pub min: u32,
}

/// `neuron_ioctl_device_bdf` (8 B): DEVICE_BDF (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceBdf {
    pub bus_number: u32,
    pub slot: u8,
    pub func: u8,
    pub _pad0: [u8; 2],
}

/// `neuron_ioctl_device_bdf_ext` (16 B): DEVICE_BDF_EXT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceBdfExt {
    /// Relative to the fd's device index.
    pub nd_index: u32,
    pub domain: u32,
    pub bus_number: u32,
    pub slot: u8,
    pub func: u8,
    pub _pad0: [u8; 2],
}

/// `neuron_ioctl_host_device_id` (4 B): HOST_DEVICE_ID (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct HostDeviceId {
    pub host_device_id: u32,
}

/// `neuron_ioctl_host_device_id_to_rid_map` (260 B): HOST_DEVICE_ID_TO_RID_MAP (§2.3, §2.5).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct HostDeviceIdToRidMap {
    pub count: u32,
    /// `map[device_id]` = routing id (`MAX_NEURON_DEVICE_COUNT` = 64 entries).
    pub host_did_to_rid_map: [u32; 64],
}

/// `neuron_ioctl_get_logical_to_physical_nc_map` (16 B): GET_LOGICAL_TO_PHYSICAL_NC_MAP
/// (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GetLogicalToPhysicalNcMap {
    /// User pointer to an [`NcMap`] buffer.
    pub map: u64,
    /// At most 128.
    pub max_map_entries: u32,
    /// Must be 0.
    pub mapping_version: u32,
}

/// `neuron_ioctl_pod_info` (260 B): POD_INFO (§2.3, §2.5). `sz` must be 260.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PodInfo {
    pub sz: u16,
    pub pod_type: u8,
    pub pod_id: [u8; 256],
    pub pod_sz: u8,
}

/// `neuron_ioctl_pod_status` (268 B): POD_STATUS (§2.3, §2.5). `sz` must be 268.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PodStatus {
    pub sz: u16,
    pub pod_id: [u8; 256],
    pub _pad0: [u8; 2],
    pub state: u32,
    pub pod_type: u8,
    pub pod_sz: u8,
    pub node_id: i8,
    pub _pad1: u8,
}

/// `neuron_ioctl_pod_status_v2` (276 B): POD_STATUS_V2 (§2.3, §2.5). `v1.sz` must be 276.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct PodStatusV2 {
    pub v1: PodStatus,
    pub mode: u32,
    pub modes_supported: u32,
}

/// `neuron_ioctl_pod_ctrl` (16 B): POD_CTRL (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PodCtrl {
    pub sz: u16,
    pub _pad0: [u8; 2],
    pub ctrl: u32,
    pub timeout: u32,
    pub state: u32,
}

/// `neuron_ioctl_pod_ctrl_v2` (20 B): POD_CTRL_V2 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PodCtrlV2 {
    pub v1: PodCtrl,
    pub mode: u32,
}

/// `neuron_ioctl_get_apps_info` (16 B header): DEVICE_GET_ALL_APPS_INFO; followed by `size`
/// (≤ `capacity`) [`AppInfo`] entries (flexible array `app_data`, offset 16) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GetAppsInfo {
    /// Bit 0 = NC lock info, bit 1 = memory usage.
    pub apps_info_flags: u16,
    pub _pad0: [u8; 2],
    pub capacity: u32,
    pub size: u32,
    pub _pad1: u32,
    /// Flexible array member; entries follow the header in memory.
    pub app_data: [AppInfo; 0],
}

/// `neuron_ioctl_get_va_placement` (16 B): GET_VA_PLACEMENT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GetVaPlacement {
    pub va: u64,
    pub device_index: i32,
    pub hbm_index: i32,
}

// ---------------------------------------------------------------------------------------------
// Memory (mem chunks)
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_mem_alloc` (32 B): MEM_ALLOC (legacy) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemAlloc {
    pub size: u64,
    pub host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub nc_id: u32,
    /// User pointer to a `u64` receiving the handle.
    pub mem_handle: u64,
}

/// `neuron_ioctl_mem_alloc_v2` (40 B): MEM_ALLOC_V2 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2 {
    pub size: u64,
    pub align: u64,
    pub host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub nc_id: u32,
    /// User pointer to a `u64` receiving the handle.
    pub mem_handle: u64,
}

/// `neuron_ioctl_mem_alloc_v2_mem_type` (48 B): MEM_ALLOC_V2MT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2MemType {
    pub size: u64,
    pub align: u64,
    pub host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub nc_id: u32,
    /// `mem_alloc_category_t` (see `consts::MemType`).
    pub mem_type: u32,
    pub _pad0: u32,
    /// User pointer to a `u64` receiving the handle.
    pub mem_handle: u64,
}

/// `neuron_ioctl_mem_alloc_v2_mem_type64` (56 B): MEM_ALLOC_V2MT64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2MemType64 {
    pub size: u64,
    pub align: u64,
    pub host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub nc_id: u32,
    /// `mem_alloc_category_t` (see `consts::MemType`).
    pub mem_type: u32,
    pub _pad0: u32,
    /// User pointer to a `u64` receiving the handle.
    pub mem_handle: u64,
    /// The C struct's own `pad` field.
    pub pad: u32,
    pub _pad1: u32,
}

/// `neuron_ioctl_mem_free` (8 B): MEM_FREE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemFree {
    pub mem_handle: u64,
}

/// `neuron_ioctl_mem_get_extended_info` (48 B): MEM_GET_EXTENDED_INFO (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemGetExtendedInfo {
    pub mem_handle: u64,
    pub version: u32,
    pub host_memory: u32,
    /// = chunk PA.
    pub mmap_offset: u64,
    /// Device-visible address (host chunks carry the arch host-base bit).
    pub pa: u64,
    pub pid: u64,
    pub size: u64,
}

/// `neuron_ioctl_mem_get_pa` (16 B): MEM_GET_PA (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemGetPa {
    pub mem_handle: u64,
    /// User pointer to a `u64`.
    pub pa: u64,
}

/// `neuron_ioctl_mem_get_info` (24 B): MEM_GET_INFO (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemGetInfo {
    pub mem_handle: u64,
    /// User pointer to a `u64` (may be NULL).
    pub mmap_offset: u64,
    /// User pointer to a `u64`.
    pub pa: u64,
}

/// `neuron_ioctl_mem_get_mc_mmap_info` (24 B): MEM_MC_GET_INFO (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemGetMcMmapInfo {
    pub pa: u64,
    pub mmap_offset: u64,
    pub size: u64,
}

/// `neuron_ioctl_mem_get_mc_mmap_info_v2` (32 B): MEM_MC_GET_INFO_V2 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemGetMcMmapInfoV2 {
    pub pa: u64,
    pub mmap_offset: u64,
    pub size: u64,
    pub mem_handle: u64,
}

/// `neuron_ioctl_dump_mem_chunks` (24 B): DUMP_MEM_CHUNKS (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DumpMemChunks {
    pub hbm_index: u32,
    pub num_entries_in: u32,
    pub num_entries_out: u32,
    pub _pad0: u32,
    /// User pointer to `num_entries_in` [`MemChunkInfo`].
    pub data: u64,
}

/// `neuron_ioctl_mem_copy` (32 B): MEM_COPY (legacy) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemCopy {
    pub src_mem_handle: u64,
    pub dst_mem_handle: u64,
    pub size: u32,
    pub src_offset: u32,
    pub dst_offset: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_mem_copy64` (40 B): MEM_COPY64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemCopy64 {
    pub src_mem_handle: u64,
    pub dst_mem_handle: u64,
    pub size: u64,
    pub src_offset: u64,
    pub dst_offset: u64,
}

/// `neuron_ioctl_mem_copy_async` (48 B): MEM_COPY_ASYNC (32-bit sizes) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemCopyAsync {
    pub src_mem_handle: u64,
    pub dst_mem_handle: u64,
    pub size: u32,
    pub src_offset: u32,
    pub dst_offset: u32,
    pub _pad0: u32,
    pub host_prefetch_addr: u64,
    pub pwait_handle: u32,
    pub wait_handle: u32,
}

/// `neuron_ioctl_mem_copy_async64` (56 B): MEM_COPY_ASYNC64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemCopyAsync64 {
    pub src_mem_handle: u64,
    pub dst_mem_handle: u64,
    pub size: u64,
    pub src_offset: u64,
    pub dst_offset: u64,
    pub host_prefetch_addr: u64,
    pub pwait_handle: u32,
    pub wait_handle: u32,
}

/// `neuron_ioctl_mem_copy_async_wait` (24 B): MEM_COPY_ASYNC_WAIT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemCopyAsyncWait {
    pub src_mem_handle: u64,
    pub dst_mem_handle: u64,
    pub pwait_handle: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_mem_buf_copy` (32 B): MEM_BUF_COPY (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemBufCopy {
    pub mem_handle: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u32,
    pub offset: u32,
    /// Non-zero = write into the chunk.
    pub copy_to_mem_handle: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_mem_buf_copy64` (40 B): MEM_BUF_COPY64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemBufCopy64 {
    pub mem_handle: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u64,
    pub offset: u64,
    /// Non-zero = write into the chunk.
    pub copy_to_mem_handle: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_mem_buf_copy64zc` (48 B): MEM_BUF_ZEROCOPY64 (§2.3, §2.5); renamed
/// `neuron_ioctl_mem_buf_copy64zc_deprecated` in the newest header (§2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemBufCopy64zc {
    pub mem_handle: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u64,
    pub offset: u64,
    pub is_copy_to_device: u32,
    pub bar4_wr_threshold: u32,
    /// −1 = default H2T queue.
    pub h2t_qid: i32,
    pub dummy: u32,
}

/// `neuron_ioctl_mem_buf_copy64zc_batches` (32 B): MEM_BUF_ZEROCOPY64_BATCHES (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemBufCopy64zcBatches {
    pub sequence_num: u64,
    /// User pointer to `num_batches` [`MemcpyBatch`].
    pub batches_ptr: u64,
    pub num_batches: u32,
    pub is_copy_to_device: u16,
    pub _pad0: [u8; 2],
    pub h2t_qid: i32,
    pub flags: u16,
    pub _pad1: [u8; 2],
}

/// `neuron_ioctl_memset` (24 B): MEMSET (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Memset {
    pub mem_handle: u64,
    pub offset: u64,
    pub value: u32,
    pub size: u32,
}

/// `neuron_ioctl_memset64` (32 B): MEMSET64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Memset64 {
    pub mem_handle: u64,
    pub offset: u64,
    pub value: u32,
    pub _pad0: u32,
    pub size: u64,
}

/// `neuron_ioctl_dmabuf_fd` (24 B): DMABUF_FD (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmabufFd {
    pub va: u64,
    pub size: u64,
    /// User pointer to an `i32` receiving the fd.
    pub fd: u64,
}

// ---------------------------------------------------------------------------------------------
// DMA rings, queues, engines
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_dma_eng_init` (4 B): DMA_ENG_INIT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaEngInit {
    pub eng_id: u32,
}

/// `neuron_ioctl_dma_eng_set_state` (8 B): DMA_ENG_SET_STATE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaEngSetState {
    pub eng_id: u32,
    /// 0 disable, 2 normal, 3 abort; others ignored.
    pub state: u32,
}

/// `neuron_ioctl_dma_eng_get_state` (16 B): DMA_ENG_GET_STATE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaEngGetState {
    pub eng_id: u32,
    pub _pad0: u32,
    /// User pointer to a [`DmaEngState`].
    pub state: u64,
}

/// `neuron_ioctl_dma_queue_init` (48 B): DMA_QUEUE_INIT, and the entries of
/// DMA_QUEUE_INIT_BATCH (§2.3, §2.5, §3.3). 2.28 renames `axi_port` to `axi_port_unused` (§2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaQueueInit {
    pub eng_id: u32,
    pub qid: u32,
    pub tx_desc_count: u32,
    pub rx_desc_count: u32,
    /// Mem handle of the TX ring chunk (0 = none).
    pub tx_handle: u64,
    /// Mem handle of the RX ring chunk (0 = none).
    pub rx_handle: u64,
    /// Completion ring; must be 0.
    pub rxc_handle: u64,
    pub axi_port: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_dma_queue_init_batch` (12296 B): DMA_QUEUE_INIT_BATCH (§2.3, §2.5);
/// `count` must be < 256.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DmaQueueInitBatch {
    pub count: u32,
    pub _pad0: u32,
    pub entries: [DmaQueueInit; 256],
}

/// `neuron_ioctl_dma_queue_release` (8 B): DMA_QUEUE_RELEASE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaQueueRelease {
    pub eng_id: u32,
    pub qid: u32,
}

/// `neuron_ioctl_dma_queue_copy_start` (16 B): DMA_QUEUE_COPY_START (§2.3, §2.5, §3.4).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaQueueCopyStart {
    pub eng_id: u32,
    pub qid: u32,
    pub tx_desc_count: u32,
    pub rx_desc_count: u32,
}

/// `neuron_ioctl_dma_ack_completed` (12 B): DMA_ACK_COMPLETED (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaAckCompleted {
    pub eng_id: u32,
    pub qid: u32,
    pub count: u32,
}

/// `neuron_ioctl_dma_queue_get_state` (24 B): DMA_QUEUE_GET_STATE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaQueueGetState {
    pub eng_id: u32,
    pub qid: u32,
    /// User pointer to a [`DmaQueueState`] (TX queue).
    pub tx: u64,
    /// User pointer to a [`DmaQueueState`] (RX queue).
    pub rx: u64,
}

/// `neuron_ioctl_dma_copy_descriptors` (32 B): DMA_COPY_DESCRIPTORS (legacy) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaCopyDescriptors {
    pub mem_handle: u64,
    /// User pointer to `num_descs` 16-byte descriptors.
    pub buffer: u64,
    pub num_descs: u32,
    pub offset: u32,
    /// `neuron_dma_queue_type`: 0 TX, 1 RX.
    pub queue_type: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_dma_copy_descriptors64` (40 B): DMA_COPY_DESCRIPTORS64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaCopyDescriptors64 {
    pub mem_handle: u64,
    /// User pointer to `num_descs` 16-byte descriptors.
    pub buffer: u64,
    pub num_descs: u32,
    pub _pad0: u32,
    /// Byte offset into the ring chunk.
    pub offset: u64,
    /// `neuron_dma_queue_type`: 0 TX, 1 RX.
    pub queue_type: u32,
    pub _pad1: u32,
}

/// `neuron_ioctl_dma_descriptor_copyout` (32 B): DMA_DESCRIPTOR_COPYOUT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DmaDescriptorCopyout {
    pub eng_id: u32,
    pub qid: u32,
    /// `neuron_dma_queue_type` (C field `type`).
    pub r#type: u32,
    pub start_index: u32,
    pub count: u32,
    pub _pad0: u32,
    /// User pointer receiving `count` 16-byte descriptors.
    pub buffer: u64,
}

/// `neuron_ioctl_dma_quiesce_queues` (264 B): DMA_QUIESCE_QUEUES (removed in 2.26) (§2.3, §2.5).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct DmaQuiesceQueues {
    pub nc_id: u32,
    pub engine_count: u32,
    pub queue_mask: [u32; 64],
}

/// `neuron_ioctl_h2t_dma_alloc_queues` (20 B): H2T_DMA_ALLOC_QUEUES (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct H2tDmaAllocQueues {
    pub sz: u16,
    pub nc_id: u16,
    pub copy_queue_cnt: u16,
    pub service_queue_cnt: u16,
    pub copy_queue_bmap: u32,
    pub service_queue_bmap: u32,
    pub copy_default_queue: u32,
}

/// `neuron_ioctl_h2t_dma_free_queues` (8 B): H2T_DMA_FREE_QUEUES (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct H2tDmaFreeQueues {
    pub sz: u16,
    pub nc_id: u8,
    pub fill0: u8,
    pub queue_bmap: u32,
}

/// `neuron_ioctl_hbm_scrub_start` (16 B): HBM_SCRUB_START (§2.3, §2.5). 2.28 renames `axi_port`
/// to `axi_port_unused` (§2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct HbmScrubStart {
    pub nc_id: u32,
    pub hbm_index: u32,
    pub axi_port: u32,
    pub init_val: u32,
}

/// `neuron_ioctl_hbm_scrub_wait` (8 B): HBM_SCRUB_WAIT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct HbmScrubWait {
    pub nc_id: u32,
    pub hbm_index: u32,
}

// ---------------------------------------------------------------------------------------------
// Notification queues
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_notifications_init_v1` (24 B): NOTIFICATIONS_INIT_V1 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsInitV1 {
    pub nc_id: u32,
    pub nq_type: u32,
    pub engine_index: u32,
    /// Bytes; power of two.
    pub size: u32,
    pub mmap_offset: u64,
}

/// `neuron_ioctl_notifications_init_v2` (48 B): NOTIFICATIONS_INIT_V2 (§2.3, §2.5, §4).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsInitV2 {
    pub nq_dev_id: u32,
    /// 0 = NeuronCore, 1 = TOP_SP.
    pub nq_dev_type: u32,
    pub nq_type: u32,
    pub engine_index: u32,
    /// Bytes; power of two.
    pub size: u32,
    pub on_host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    /// Out: buffer PA (host) or −1 (device memory).
    pub mmap_offset: u64,
    /// Out: mem handle of the queue buffer.
    pub mem_handle: u64,
}

/// `neuron_ioctl_notifications_init_with_realloc_v2` (56 B): NOTIFICATIONS_INIT_WITH_REALLOC_V2
/// (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsInitWithReallocV2 {
    pub nq_dev_id: u32,
    pub nq_dev_type: u32,
    pub nq_type: u32,
    pub engine_index: u32,
    pub size: u32,
    pub on_host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub force_alloc_mem: u32,
    pub _pad0: u32,
    pub mmap_offset: u64,
    pub mem_handle: u64,
}

/// `neuron_ioctl_notifications_destroy` (8 B): NOTIFICATIONS_DESTROY_V1 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsDestroy {
    pub mmap_offset: u64,
}

/// `neuron_ioctl_notifications_destroy_nq` (12 B): defined in the header, used by no 2.26
/// command (§2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsDestroyNq {
    pub nq_dev_id: u32,
    pub nq_type: u32,
    pub engine_index: u32,
}

/// `neuron_ioctl_notifications_queue_info` (12 B): NOTIFICATIONS_QUEUE_INFO (unimplemented)
/// (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NotificationsQueueInfo {
    pub nq_dev_id: u8,
    pub nq_dev_type: u8,
    pub nq_type: u8,
    pub engine_index: u8,
    pub head: u32,
    pub phase_bit: u32,
}

/// `neuron_ioctl_throttling_notifications` (4 B): THROTTLING_NOTIFICATIONS (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ThrottlingNotifications {
    pub enable: u32,
}

// ---------------------------------------------------------------------------------------------
// Semaphores / events / registers
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_semaphore` (12 B): SEMAPHORE_INCREMENT / _DECREMENT / _READ / _WRITE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Semaphore {
    pub nc_id: u32,
    pub semaphore_index: u32,
    pub value: u32,
}

/// `neuron_ioctl_event` (12 B): EVENT_SET / EVENT_GET (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Event {
    pub nc_id: u32,
    pub event_index: u32,
    pub value: u32,
}

/// `neuron_ioctl_bar_rw` (32 B): BAR_READ / BAR_WRITE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct BarRw {
    pub bar: u32,
    pub _pad0: u32,
    /// User pointer to `count` `u64` absolute BAR0 kernel VAs.
    pub address: u64,
    /// User pointer to `count` `u32` values.
    pub data: u64,
    /// At most 100.
    pub count: u32,
    pub _pad1: u32,
}

/// `neuron_ioctl_read_hw_counters` (24 B): READ_HW_COUNTERS (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ReadHwCounters {
    /// User pointer to `count` `u64` device addresses.
    pub address: u64,
    /// User pointer to `count` `u32` values.
    pub data: u64,
    pub count: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_program_engine` (24 B): PROGRAM_ENGINE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ProgramEngine {
    pub dst: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u32,
    pub offset: u32,
}

/// `neuron_ioctl_program_engine_nc` (32 B): PROGRAM_ENGINE_NC (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ProgramEngineNc {
    pub nc_id: u32,
    pub _pad0: u32,
    pub dst: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u32,
    pub offset: u32,
}

/// `neuron_ioctl_program_engine_nc64` (40 B): PROGRAM_ENGINE_NC64 (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ProgramEngineNc64 {
    pub nc_id: u32,
    pub _pad0: u32,
    pub dst: u64,
    /// User pointer.
    pub buffer: u64,
    pub size: u64,
    pub offset: u64,
}

// ---------------------------------------------------------------------------------------------
// Reset, core init, reservation (crwl), process/app bookkeeping, datastore
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_device_reset` (8 B): NC_RESET (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceReset {
    /// NC bitmap; `NEURON_NC_MAP_DEVICE` (0xFFFFFFFF) = whole device.
    pub nc_map: u32,
    /// Out: request id (= caller TGID).
    pub request_id: u32,
}

/// `neuron_ioctl_device_ready` (8 B): NC_RESET_READY (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceReady {
    pub request_id: u32,
    /// 0 success, 1 failure.
    pub result: i32,
}

/// `neuron_ioctl_device_init` (4 B): DEVICE_INIT (no-op) (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct DeviceInit {
    pub mem_regions: u32,
}

/// `neuron_ioctl_cinit_set` (12 B): CINIT_SET_STATE (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CinitSet {
    pub nc_id: u32,
    /// `neuron_cinit_state` requested.
    pub state: u32,
    /// Out: resulting state.
    pub new_state: u32,
}

/// `neuron_ioctl_nc_model_started_count` (16 B): NC_MODEL_STARTED_COUNT (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NcModelStartedCount {
    pub nc_id: u32,
    pub _pad0: u32,
    pub started_count: u64,
}

/// `neuron_ioctl_crwl` (36 B): CRWL_READER_ENTER / _EXIT, CRWL_WRITER_ENTER / _DOWNGRADE
/// (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Crwl {
    pub nc_id: u32,
    pub uuid: Uuid32,
}

/// `neuron_ioctl_crwl_nc_map` (24 B): CRWL_NC_RANGE_MARK / CRWL_NC_RANGE_UNMARK (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CrwlNcMap {
    pub nc_count: u32,
    pub start_nc_index: u32,
    pub end_nc_index: u32,
    pub max_nc_available: u32,
    /// 64-core bitmap (C `unsigned long`).
    pub bitmap: u64,
}

/// `neuron_ioctl_crwl_nc_map_ext` (80 B): CRWL_NC_RANGE_MARK_EXT0 / CRWL_NC_RANGE_UNMARK_EXT0
/// (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CrwlNcMapExt {
    pub nc_count: u32,
    pub start_nc_index: u32,
    pub end_nc_index: u32,
    pub max_nc_available: u32,
    /// 512-core bitmap (64 devices × 8 NCs; C `unsigned long[8]`).
    pub bitmap: [u64; 8],
}

/// `neuron_ioctl_neuron_ds_info` (24 B): ACQUIRE_NEURON_DS / RELEASE_NEURON_DS (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NeuronDsInfo {
    /// `pid_t`; 0 = the caller.
    pub pid: i32,
    pub _pad0: u32,
    pub mmap_offset: u64,
    pub size: u32,
    pub _pad1: u32,
}

/// `neuron_ioctl_nc_pid_state_dump` (16 B): NC_PID_STATE_DUMP (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct NcPidStateDump {
    pub size: u32,
    pub nc_id: u32,
    pub filter_log_owner: u32,
    pub log_dump_limit: u32,
}

// ---------------------------------------------------------------------------------------------
// Metrics, power, debug
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_post_metric` (16 B): POST_METRIC (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PostMetric {
    /// User pointer to `u32` data.
    pub data: u64,
    pub data_size: u32,
    pub _pad0: u32,
}

/// `neuron_ioctl_metrics_ctrl` (4 B): METRICS_CTRL (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MetricsCtrl {
    pub mode: u32,
}

/// `neuron_ioctl_power_profile` (8 B): POWER_PROFILE, and GET_PERFORMANCE_PROFILE (2.27)
/// (§2.3, §2.5, §2.6). `sz` must be 8.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct PowerProfile {
    pub sz: u16,
    /// 0 = set, 1 = get.
    pub ctrl: u16,
    pub profile: u32,
}

/// `neuron_ioctl_printk` (16 B): PRINTK (§2.3, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Printk {
    /// User pointer to a NUL-terminated string (≤ 512 bytes).
    pub buffer: u64,
    pub size: u32,
    pub action: u32,
}

/// `neuron_ioctl_resource_mmap_info` (32 B): RESOURCE_MMAP_INFO (§2.3, §2.4, §2.5).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ResourceMmapInfo {
    /// `consts::MMAP_BLOCK_*`.
    pub block: u32,
    pub block_id: u32,
    /// `consts::MMAP_RESOURCE_*`.
    pub resource: u32,
    pub _pad0: u32,
    /// Out: mmap offset (key).
    pub offset: u64,
    /// Out: mmap size.
    pub size: u64,
}

// ---------------------------------------------------------------------------------------------
// 2.27 / 2.28 additions (§2.6)
// ---------------------------------------------------------------------------------------------

/// `neuron_ioctl_available_perf_profiles` (36 B): AVAILABLE_PERF_PROFILES (2.27, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct AvailablePerfProfiles {
    /// 0 = all.
    pub requested_feature: u16,
    /// Out.
    pub num_profiles: u8,
    /// Out: up to 256 firmware profiles.
    pub bitmap: [u8; 32],
    pub _pad0: u8,
}

/// One `compl_queue_info` entry (16 B) of [`GetAsyncH2tDmaComplQueues`] (2.27, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct AsyncH2tComplQueueInfo {
    pub mmap_offset: u64,
    pub mmap_size: u32,
    pub _pad0: u32,
}

/// Argument of GET_ASYNC_H2T_DMA_COMPL_QUEUES (264 B, 2.27, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct GetAsyncH2tDmaComplQueues {
    pub nc_id: u32,
    pub qid_bitmap: u32,
    pub compl_queue_info: [AsyncH2tComplQueueInfo; 16],
}

/// `neuron_h2d_dma_compl_queue_entry` (24 B): one entry of a host-memory H2D DMA completion queue
/// (2.27 shared header, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct H2dDmaComplQueueEntry {
    /// 0 = empty slot.
    pub sequence_num: u64,
    /// 0 ok / −errno.
    pub compl_ret: i64,
    /// Copied from the batch submission (user pointer).
    pub context: u64,
}

/// `neuron_h2d_dma_compl_queue` header (16 B); `capacity` [`H2dDmaComplQueueEntry`] follow at
/// offset 16, so the mapping is `16 + capacity × 24` bytes (2.27 shared header, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct H2dDmaComplQueue {
    pub capacity: u32,
    /// Free-running, consumer = runtime.
    pub head: u32,
    /// Free-running, producer = driver.
    pub tail: u32,
    pub _pad0: u32,
}

/// Argument of MEM_ALLOC_V2MT64_PA (64 B, 2.28, §2.6): the V2MT64 layout plus an output `pa`.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct MemAllocV2MemType64Pa {
    pub size: u64,
    pub align: u64,
    pub host_memory: u32,
    pub dram_channel: u32,
    pub dram_region: u32,
    pub nc_id: u32,
    pub mem_type: u32,
    pub _pad0: u32,
    /// User pointer to a `u64` receiving the handle.
    pub mem_handle: u64,
    pub pad: u32,
    pub _pad1: u32,
    /// Out: PA of the new chunk.
    pub pa: u64,
}

/// Argument of HOST_MEM_PIN (24 B, 2.28, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct HostMemPin {
    pub va: u64,
    pub size: u64,
    /// Out: PA, or `!0` if not physically contiguous.
    pub pa: u64,
}

/// Argument of HOST_MEM_UNPIN (8 B, 2.28, §2.6).
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct HostMemUnpin {
    /// Exactly the pinned VA.
    pub va: u64,
}

// ---------------------------------------------------------------------------------------------
// Default for structs whose arrays are too long for `#[derive(Default)]`
// ---------------------------------------------------------------------------------------------

macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t as FromZeros>::new_zeroed()
            }
        }
    )*};
}

zeroed_default!(
    HostDeviceIdToRidMap,
    PodInfo,
    PodStatus,
    PodStatusV2,
    DmaQueueInitBatch,
    DmaQuiesceQueues
);

#[cfg(test)]
mod tests {
    //! Layout tests: sizes and field offsets are the numbers of driver-abi.md §2.5 / §2.6
    //! (pads: the holes the doc describes). Each test also checks that the listed fields cover
    //! every byte of the struct, so no field can be missing from the list.
    use super::*;
    use core::mem::{offset_of, size_of, size_of_val};

    macro_rules! layout {
        ($test:ident, $t:ty, $size:expr; $($f:ident = $off:expr),+ $(,)?) => {
            #[test]
            fn $test() {
                assert_eq!(size_of::<$t>(), $size, "size of {}", stringify!($t));
                $(
                    assert_eq!(
                        offset_of!($t, $f), $off,
                        "offset of {}.{}", stringify!($t), stringify!($f)
                    );
                )+
                let v = <$t as FromZeros>::new_zeroed();
                let covered = 0usize $(+ size_of_val(&v.$f))+;
                assert_eq!(covered, $size, "fields of {} do not cover it", stringify!($t));
                assert_eq!(v, <$t>::default());
                assert!(v.as_bytes().iter().all(|&b| b == 0));
            }
        };
    }

    // §2.5, generated from the doc's list (plus the documented holes).
    layout!(app_info_layout, AppInfo, 152; pid = 0, nc_lock_map = 4, uuid_data = 5, host_mem_size = 136, device_mem_size = 144, _pad0 = 133);
    layout!(dma_eng_state_layout, DmaEngState, 20; revision_id = 0, max_queues = 4, num_queues = 8, tx_state = 12, rx_state = 16);
    layout!(dma_queue_state_layout, DmaQueueState, 48; hw_status = 0, sw_status = 4, base_addr = 8, length = 16, head_pointer = 20, tail_pointer = 24, completion_base_addr = 32, completion_head = 40, _pad0 = 28, _pad1 = 44);
    layout!(bar_rw_layout, BarRw, 32; bar = 0, address = 8, data = 16, count = 24, _pad0 = 4, _pad1 = 28);
    layout!(cinit_set_layout, CinitSet, 12; nc_id = 0, state = 4, new_state = 8);
    layout!(compatible_version_layout, CompatibleVersion, 8; max = 0, min = 4);
    layout!(crwl_nc_map_ext_layout, CrwlNcMapExt, 80; nc_count = 0, start_nc_index = 4, end_nc_index = 8, max_nc_available = 12, bitmap = 16);
    layout!(crwl_nc_map_layout, CrwlNcMap, 24; nc_count = 0, start_nc_index = 4, end_nc_index = 8, max_nc_available = 12, bitmap = 16);
    layout!(crwl_layout, Crwl, 36; nc_id = 0, uuid = 4);
    layout!(device_basic_info_layout, DeviceBasicInfo, 8; architecture = 0, revision = 4);
    layout!(device_bdf_ext_layout, DeviceBdfExt, 16; nd_index = 0, domain = 4, bus_number = 8, slot = 12, func = 13, _pad0 = 14);
    layout!(device_bdf_layout, DeviceBdf, 8; bus_number = 0, slot = 4, func = 5, _pad0 = 6);
    layout!(device_driver_info_layout, DeviceDriverInfo, 24; architecture = 0, revision = 4, version = 8, size = 12, feature_flags1 = 16);
    layout!(device_info_layout, DeviceInfo, 80; architecture = 0, revision = 4, connected_device_count = 8, connected_devices = 12, bar_address = 48, bar_size = 64, _pad0 = 44);
    layout!(device_init_layout, DeviceInit, 4; mem_regions = 0);
    layout!(device_ready_layout, DeviceReady, 8; request_id = 0, result = 4);
    layout!(device_reset_layout, DeviceReset, 8; nc_map = 0, request_id = 4);
    layout!(dma_ack_completed_layout, DmaAckCompleted, 12; eng_id = 0, qid = 4, count = 8);
    layout!(dma_copy_descriptors64_layout, DmaCopyDescriptors64, 40; mem_handle = 0, buffer = 8, num_descs = 16, offset = 24, queue_type = 32, _pad0 = 20, _pad1 = 36);
    layout!(dma_copy_descriptors_layout, DmaCopyDescriptors, 32; mem_handle = 0, buffer = 8, num_descs = 16, offset = 20, queue_type = 24, _pad0 = 28);
    layout!(dma_descriptor_copyout_layout, DmaDescriptorCopyout, 32; eng_id = 0, qid = 4, r#type = 8, start_index = 12, count = 16, buffer = 24, _pad0 = 20);
    layout!(dma_eng_get_state_layout, DmaEngGetState, 16; eng_id = 0, state = 8, _pad0 = 4);
    layout!(dma_eng_init_layout, DmaEngInit, 4; eng_id = 0);
    layout!(dma_eng_set_state_layout, DmaEngSetState, 8; eng_id = 0, state = 4);
    layout!(dma_queue_copy_start_layout, DmaQueueCopyStart, 16; eng_id = 0, qid = 4, tx_desc_count = 8, rx_desc_count = 12);
    layout!(dma_queue_get_state_layout, DmaQueueGetState, 24; eng_id = 0, qid = 4, tx = 8, rx = 16);
    layout!(dma_queue_init_batch_layout, DmaQueueInitBatch, 12296; count = 0, entries = 8, _pad0 = 4);
    layout!(dma_queue_init_layout, DmaQueueInit, 48; eng_id = 0, qid = 4, tx_desc_count = 8, rx_desc_count = 12, tx_handle = 16, rx_handle = 24, rxc_handle = 32, axi_port = 40, _pad0 = 44);
    layout!(dma_queue_release_layout, DmaQueueRelease, 8; eng_id = 0, qid = 4);
    layout!(dma_quiesce_queues_layout, DmaQuiesceQueues, 264; nc_id = 0, engine_count = 4, queue_mask = 8);
    layout!(dmabuf_fd_layout, DmabufFd, 24; va = 0, size = 8, fd = 16);
    layout!(dump_mem_chunks_layout, DumpMemChunks, 24; hbm_index = 0, num_entries_in = 4, num_entries_out = 8, data = 16, _pad0 = 12);
    layout!(event_layout, Event, 12; nc_id = 0, event_index = 4, value = 8);
    layout!(get_apps_info_layout, GetAppsInfo, 16; apps_info_flags = 0, capacity = 4, size = 8, app_data = 16, _pad0 = 2, _pad1 = 12);
    layout!(get_logical_to_physical_nc_map_layout, GetLogicalToPhysicalNcMap, 16; map = 0, max_map_entries = 8, mapping_version = 12);
    layout!(get_va_placement_layout, GetVaPlacement, 16; va = 0, device_index = 8, hbm_index = 12);
    layout!(h2t_dma_alloc_queues_layout, H2tDmaAllocQueues, 20; sz = 0, nc_id = 2, copy_queue_cnt = 4, service_queue_cnt = 6, copy_queue_bmap = 8, service_queue_bmap = 12, copy_default_queue = 16);
    layout!(h2t_dma_free_queues_layout, H2tDmaFreeQueues, 8; sz = 0, nc_id = 2, fill0 = 3, queue_bmap = 4);
    layout!(hbm_scrub_start_layout, HbmScrubStart, 16; nc_id = 0, hbm_index = 4, axi_port = 8, init_val = 12);
    layout!(hbm_scrub_wait_layout, HbmScrubWait, 8; nc_id = 0, hbm_index = 4);
    layout!(host_device_id_to_rid_map_layout, HostDeviceIdToRidMap, 260; count = 0, host_did_to_rid_map = 4);
    layout!(host_device_id_layout, HostDeviceId, 4; host_device_id = 0);
    layout!(mem_alloc_v2_mem_type64_layout, MemAllocV2MemType64, 56; size = 0, align = 8, host_memory = 16, dram_channel = 20, dram_region = 24, nc_id = 28, mem_type = 32, mem_handle = 40, pad = 48, _pad0 = 36, _pad1 = 52);
    layout!(mem_alloc_v2_mem_type_layout, MemAllocV2MemType, 48; size = 0, align = 8, host_memory = 16, dram_channel = 20, dram_region = 24, nc_id = 28, mem_type = 32, mem_handle = 40, _pad0 = 36);
    layout!(mem_alloc_v2_layout, MemAllocV2, 40; size = 0, align = 8, host_memory = 16, dram_channel = 20, dram_region = 24, nc_id = 28, mem_handle = 32);
    layout!(mem_alloc_layout, MemAlloc, 32; size = 0, host_memory = 8, dram_channel = 12, dram_region = 16, nc_id = 20, mem_handle = 24);
    layout!(mem_buf_copy64_layout, MemBufCopy64, 40; mem_handle = 0, buffer = 8, size = 16, offset = 24, copy_to_mem_handle = 32, _pad0 = 36);
    layout!(mem_buf_copy64zc_batches_layout, MemBufCopy64zcBatches, 32; sequence_num = 0, batches_ptr = 8, num_batches = 16, is_copy_to_device = 20, h2t_qid = 24, flags = 28, _pad0 = 22, _pad1 = 30);
    layout!(mem_buf_copy64zc_layout, MemBufCopy64zc, 48; mem_handle = 0, buffer = 8, size = 16, offset = 24, is_copy_to_device = 32, bar4_wr_threshold = 36, h2t_qid = 40, dummy = 44);
    layout!(mem_buf_copy_layout, MemBufCopy, 32; mem_handle = 0, buffer = 8, size = 16, offset = 20, copy_to_mem_handle = 24, _pad0 = 28);
    layout!(mem_chunk_info_layout, MemChunkInfo, 24; pa = 0, size = 8, mem_type = 16, _pad0 = 20);
    layout!(mem_copy64_layout, MemCopy64, 40; src_mem_handle = 0, dst_mem_handle = 8, size = 16, src_offset = 24, dst_offset = 32);
    layout!(mem_copy_async64_layout, MemCopyAsync64, 56; src_mem_handle = 0, dst_mem_handle = 8, size = 16, src_offset = 24, dst_offset = 32, host_prefetch_addr = 40, pwait_handle = 48, wait_handle = 52);
    layout!(mem_copy_async_wait_layout, MemCopyAsyncWait, 24; src_mem_handle = 0, dst_mem_handle = 8, pwait_handle = 16, _pad0 = 20);
    layout!(mem_copy_async_layout, MemCopyAsync, 48; src_mem_handle = 0, dst_mem_handle = 8, size = 16, src_offset = 20, dst_offset = 24, host_prefetch_addr = 32, pwait_handle = 40, wait_handle = 44, _pad0 = 28);
    layout!(mem_copy_layout, MemCopy, 32; src_mem_handle = 0, dst_mem_handle = 8, size = 16, src_offset = 20, dst_offset = 24, _pad0 = 28);
    layout!(mem_free_layout, MemFree, 8; mem_handle = 0);
    layout!(mem_get_extended_info_layout, MemGetExtendedInfo, 48; mem_handle = 0, version = 8, host_memory = 12, mmap_offset = 16, pa = 24, pid = 32, size = 40);
    layout!(mem_get_info_layout, MemGetInfo, 24; mem_handle = 0, mmap_offset = 8, pa = 16);
    layout!(mem_get_mc_mmap_info_v2_layout, MemGetMcMmapInfoV2, 32; pa = 0, mmap_offset = 8, size = 16, mem_handle = 24);
    layout!(mem_get_mc_mmap_info_layout, MemGetMcMmapInfo, 24; pa = 0, mmap_offset = 8, size = 16);
    layout!(mem_get_pa_layout, MemGetPa, 16; mem_handle = 0, pa = 8);
    layout!(memset64_layout, Memset64, 32; mem_handle = 0, offset = 8, value = 16, size = 24, _pad0 = 20);
    layout!(memset_layout, Memset, 24; mem_handle = 0, offset = 8, value = 16, size = 20);
    layout!(metrics_ctrl_layout, MetricsCtrl, 4; mode = 0);
    layout!(nc_map_entry_layout, NcMapEntry, 8; device_id = 0, device_nc_idx = 4);
    layout!(nc_map_layout, NcMap, 4; num_entries = 0, mappings = 4);
    layout!(nc_model_started_count_layout, NcModelStartedCount, 16; nc_id = 0, started_count = 8, _pad0 = 4);
    layout!(nc_pid_state_dump_layout, NcPidStateDump, 16; size = 0, nc_id = 4, filter_log_owner = 8, log_dump_limit = 12);
    layout!(neuron_ds_info_layout, NeuronDsInfo, 24; pid = 0, mmap_offset = 8, size = 16, _pad0 = 4, _pad1 = 20);
    layout!(notifications_destroy_nq_layout, NotificationsDestroyNq, 12; nq_dev_id = 0, nq_type = 4, engine_index = 8);
    layout!(notifications_destroy_layout, NotificationsDestroy, 8; mmap_offset = 0);
    layout!(notifications_init_v1_layout, NotificationsInitV1, 24; nc_id = 0, nq_type = 4, engine_index = 8, size = 12, mmap_offset = 16);
    layout!(notifications_init_v2_layout, NotificationsInitV2, 48; nq_dev_id = 0, nq_dev_type = 4, nq_type = 8, engine_index = 12, size = 16, on_host_memory = 20, dram_channel = 24, dram_region = 28, mmap_offset = 32, mem_handle = 40);
    layout!(notifications_init_with_realloc_v2_layout, NotificationsInitWithReallocV2, 56; nq_dev_id = 0, nq_dev_type = 4, nq_type = 8, engine_index = 12, size = 16, on_host_memory = 20, dram_channel = 24, dram_region = 28, force_alloc_mem = 32, mmap_offset = 40, mem_handle = 48, _pad0 = 36);
    layout!(notifications_queue_info_layout, NotificationsQueueInfo, 12; nq_dev_id = 0, nq_dev_type = 1, nq_type = 2, engine_index = 3, head = 4, phase_bit = 8);
    layout!(pod_ctrl_v2_layout, PodCtrlV2, 20; v1 = 0, mode = 16);
    layout!(pod_ctrl_layout, PodCtrl, 16; sz = 0, ctrl = 4, timeout = 8, state = 12, _pad0 = 2);
    layout!(pod_info_layout, PodInfo, 260; sz = 0, pod_type = 2, pod_id = 3, pod_sz = 259);
    layout!(pod_status_v2_layout, PodStatusV2, 276; v1 = 0, mode = 268, modes_supported = 272);
    layout!(pod_status_layout, PodStatus, 268; sz = 0, pod_id = 2, state = 260, pod_type = 264, pod_sz = 265, node_id = 266, _pad0 = 258, _pad1 = 267);
    layout!(post_metric_layout, PostMetric, 16; data = 0, data_size = 8, _pad0 = 12);
    layout!(power_profile_layout, PowerProfile, 8; sz = 0, ctrl = 2, profile = 4);
    layout!(printk_layout, Printk, 16; buffer = 0, size = 8, action = 12);
    layout!(program_engine_nc64_layout, ProgramEngineNc64, 40; nc_id = 0, dst = 8, buffer = 16, size = 24, offset = 32, _pad0 = 4);
    layout!(program_engine_nc_layout, ProgramEngineNc, 32; nc_id = 0, dst = 8, buffer = 16, size = 24, offset = 28, _pad0 = 4);
    layout!(program_engine_layout, ProgramEngine, 24; dst = 0, buffer = 8, size = 16, offset = 20);
    layout!(read_hw_counters_layout, ReadHwCounters, 24; address = 0, data = 8, count = 16, _pad0 = 20);
    layout!(resource_mmap_info_layout, ResourceMmapInfo, 32; block = 0, block_id = 4, resource = 8, offset = 16, size = 24, _pad0 = 12);
    layout!(semaphore_layout, Semaphore, 12; nc_id = 0, semaphore_index = 4, value = 8);
    layout!(throttling_notifications_layout, ThrottlingNotifications, 4; enable = 0);
    layout!(memcpy_batch_layout, MemcpyBatch, 40; mem_handle = 0, mem_handle_offset = 8, ops_ptr = 16, num_ops = 24, bar4_wr_threshold = 28, flags = 30, context = 32);
    layout!(uuid32_layout, Uuid32, 32; value = 0);
    layout!(tensor_batch_op_layout, TensorBatchOp, 24; offset = 0, size = 8, buffer = 16);

    // §2.6 additions.
    layout!(available_perf_profiles_layout, AvailablePerfProfiles, 36;
        requested_feature = 0, num_profiles = 2, bitmap = 3, _pad0 = 35);
    layout!(async_h2t_compl_queue_info_layout, AsyncH2tComplQueueInfo, 16;
        mmap_offset = 0, mmap_size = 8, _pad0 = 12);
    layout!(get_async_h2t_dma_compl_queues_layout, GetAsyncH2tDmaComplQueues, 264;
        nc_id = 0, qid_bitmap = 4, compl_queue_info = 8);
    layout!(h2d_dma_compl_queue_entry_layout, H2dDmaComplQueueEntry, 24;
        sequence_num = 0, compl_ret = 8, context = 16);
    layout!(h2d_dma_compl_queue_layout, H2dDmaComplQueue, 16;
        capacity = 0, head = 4, tail = 8, _pad0 = 12);
    layout!(mem_alloc_v2_mem_type64_pa_layout, MemAllocV2MemType64Pa, 64;
        size = 0, align = 8, host_memory = 16, dram_channel = 20, dram_region = 24, nc_id = 28,
        mem_type = 32, _pad0 = 36, mem_handle = 40, pad = 48, _pad1 = 52, pa = 56);
    layout!(host_mem_pin_layout, HostMemPin, 24; va = 0, size = 8, pa = 16);
    layout!(host_mem_unpin_layout, HostMemUnpin, 8; va = 0);

    #[test]
    fn alignment_is_natural() {
        assert_eq!(core::mem::align_of::<PodInfo>(), 2);
        assert_eq!(core::mem::align_of::<Crwl>(), 4);
        assert_eq!(core::mem::align_of::<GetAppsInfo>(), 8);
        assert_eq!(core::mem::align_of::<DmaQueueInitBatch>(), 8);
    }

    #[test]
    fn round_trip_through_bytes() {
        let a = MemAllocV2MemType {
            size: 0x1000,
            align: 0x2000,
            host_memory: 1,
            dram_channel: 2,
            dram_region: 3,
            nc_id: 4,
            mem_type: 9,
            mem_handle: 0xdead_beef_0000,
            ..Default::default()
        };
        let bytes = a.as_bytes();
        assert_eq!(bytes.len(), 48);
        assert_eq!(&bytes[32..36], &9u32.to_ne_bytes());
        let b = MemAllocV2MemType::read_from_bytes(bytes);
        assert_eq!(b, Ok(a));
        // Too short a buffer is an error, not a panic.
        assert!(MemAllocV2MemType::read_from_bytes(&bytes[..40]).is_err());
    }
}
