//! Layout of one NeuronCore's (TPB's) device-address window, as the runtime and the device
//! model both use it.
//!
//! The window base is the TPB SBUF mmap key (`Arch::tpb_sbuf_mmap_offset`, `driver-abi.md`
//! §2.4). Offsets marked project-defined are this emulator's choices where no public source
//! gives the real value; see `docs/architecture.md`.

/// SBUF at the window base: 128 partitions at a 256 KiB stride (the 32 MiB SBUF window divided
/// by 128 partitions; inferred, MED). A partition holds 192 KiB (v2) or 224 KiB (v3).
pub const SBUF: u64 = 0x0;
pub const SBUF_PARTITION_STRIDE: u64 = 0x4_0000;
/// PSUM: 128 partitions x 16 KiB (project-defined placement, LOW).
pub const PSUM: u64 = 0x200_0000;
pub const PSUM_PARTITION_STRIDE: u64 = 0x4000;
/// The 8 KiB event/semaphore register page (`driver-abi.md` §5; HIGH).
pub const SEMAPHORE_PAGE: u64 = 0x270_0000;
pub const SEMAPHORE_PAGE_SIZE: u64 = 0x2000;
/// Engine instruction ports: DMA writes to port `e` feed engine `e`'s sequencer in order
/// (project-defined; the driver only says instruction streams are fed by DMA).
pub const INSTR_PORT: u64 = 0x280_0000;
pub const INSTR_PORT_STRIDE: u64 = 0x1_0000;
/// Size of one TPB window.
pub const WINDOW: u64 = 0x400_0000;
/// The core's DGE table base register (u64, little-endian): where the descriptor-generation
/// engine finds the table that DGE-table DMA addresses index (project-defined; the real runtime
/// loads the table address into sequencer registers in its prologue).
pub const DGE_TABLE: u64 = 0x290_0000;
/// DMA queue doorbells (project-defined): two u32 registers per queue of the core's 16 DMA
/// engines at `DMA_DOORBELL + (engine * 16 + queue) * 8`; a device WRITE of `n` to `+0` (TX)
/// or `+4` (RX) advances that ring's tail by `n` descriptors. The device programs ring them
/// (the words a DMA_TRIGGER becomes at load); the host rings queues through the driver.
pub const DMA_DOORBELL: u64 = 0x2a0_0000;
pub const DMA_DOORBELL_SIZE: u64 = 16 * 16 * 8;
/// The GpSimd engine's instruction memory (IRAM) and data memory (DRAM), where the runtime
/// stages the pool-engine microcode (project-defined placement and sizes, LOW; `docs/firmware.md`).
pub const GPSIMD_IRAM: u64 = 0x300_0000;
pub const GPSIMD_IRAM_SIZE: u64 = 0x10_0000;
pub const GPSIMD_DRAM: u64 = 0x340_0000;
pub const GPSIMD_DRAM_SIZE: u64 = 0x40_0000;
