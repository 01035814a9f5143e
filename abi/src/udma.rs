//! UDMA descriptors, rings and queues (driver-abi.md §3).
//!
//! A memory-to-memory copy is a pair of descriptors: one on the queue's TX (M2S, "read source")
//! ring and one on its RX (S2M, "write destination") ring (§3.1). Every descriptor is 16 bytes
//! (§3.2).

use crate::arch::Arch;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Size of one descriptor in bytes (§3.2).
pub const DESC_SIZE: usize = 16;

/// `len_ctrl` bits 15:0: transfer length; 0 encodes 65536 (§3.2).
pub const DESC_LEN_MASK: u32 = 0xFFFF;
/// `len_ctrl` ring-id ("phase") field shift, bits 25:24 (§3.2).
pub const DESC_RING_ID_SHIFT: u32 = 24;
/// `len_ctrl` ring-id field mask (bits 25:24) (§3.2).
pub const DESC_RING_ID_MASK: u32 = 0x3 << DESC_RING_ID_SHIFT;
/// `len_ctrl` bit 26: first descriptor of a packet (TX) (§3.2).
pub const DESC_FIRST: u32 = 1 << 26;
/// `len_ctrl` bit 27: last descriptor of a packet (TX) (§3.2).
pub const DESC_LAST: u32 = 1 << 27;
/// `len_ctrl` bit 28: interrupt enable (TX and RX) (§3.2).
pub const DESC_INT_EN: u32 = 1 << 28;
/// `len_ctrl` bit 29: strong write ordering (RX only, v3+) (§3.2).
pub const DESC_STRONG_ORDER_WR: u32 = 1 << 29;
/// `len_ctrl` bit 30: DMB, wait for previous transfers (TX only) (§3.2).
pub const DESC_DMB: u32 = 1 << 30;

/// Maximum bytes per descriptor (`MAX_DMA_DESC_SIZE`, §3.2).
pub const MAX_DESC_LEN: u32 = 65536;

/// `meta_ctrl` of the driver's own one-descriptor copy packets: is_last_block, is_first_block,
/// copy_source_data (bit 19), ssmae_op = 0b010 (bits 25:23) (§3.2).
pub const META_CTRL_COPY: u32 = 0x0108_0003;
/// [`META_CTRL_COPY`] plus the write-barrier bit 26 (last descriptor of a driver batch) (§3.2).
pub const META_CTRL_COPY_WRITE_BARRIER: u32 = 0x0508_0003;

/// Ring id the driver (and hardware) start with after queue init; it increments modulo 4
/// every time the producer index wraps (`UDMA_INITIAL_RING_ID`, §3.2, §3.3).
pub const INITIAL_RING_ID: u32 = 1;

/// Max descriptors per packet the engines are programmed with on v2/v3 (64 + 1 metadata) (§3.2).
pub const MAX_DESCS_PER_PACKET: u32 = 65;

/// `neuron_dma_queue_type` TX (M2S) (§2.7).
pub const QUEUE_TYPE_TX: u32 = 0;
/// `neuron_dma_queue_type` RX (S2M) (§2.7).
pub const QUEUE_TYPE_RX: u32 = 1;
/// `neuron_dma_queue_type` completion ring (unsupported by the driver) (§2.7).
pub const QUEUE_TYPE_COMPLETION: u32 = 2;

/// Queues per DMA engine on every arch (`DMA_MAX_Q_V4`, §3.1).
pub const DMA_QUEUES_PER_ENGINE: u32 = 16;
/// Size of the driver's engine array; every `eng_id` must be below it (`NUM_DMA_ENG_PER_DEVICE`,
/// §3.1, §3.3). The engines that exist depend on the arch: [`Arch::dma_engines`].
pub const NUM_DMA_ENG_PER_DEVICE: u32 = 132;
/// Queue reserved for collectives on every engine (never reset on process exit) (§3.1).
pub const COLLECTIVES_RESERVED_QUEUE: u32 = 15;
/// Queue reserved for "NX cores" on some engines (see [`is_reserved_queue`]) (§3.1).
pub const NX_RESERVED_QUEUE: u32 = 14;

/// Number of DMA engines on one device of `arch` (34 on v2, 132 on v3) (§3.1, §6).
pub fn dma_engines(arch: Arch) -> u32 {
    arch.dma_engines()
}

/// Whether queue `qid` of engine `eng_id` is one the driver reserves and never resets on process
/// exit: queue 15 of every engine; queue 14 on v2 engines with `eng % 16 < 11` and on v3 engines
/// with `eng % 16` in 0-4, 7, 8 (§3.1).
pub fn is_reserved_queue(arch: Arch, eng_id: u32, qid: u32) -> bool {
    if qid == COLLECTIVES_RESERVED_QUEUE {
        return true;
    }
    if qid != NX_RESERVED_QUEUE {
        return false;
    }
    let e = eng_id % 16;
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => e < 11,
        Arch::V3Trn2 => matches!(e, 0..=4 | 7 | 8),
    }
}

/// DMA engine states reported by DMA_ENG_GET_STATE `tx_state`/`rx_state` (§2.3).
pub const ENG_STATE_DISABLE: u32 = 0;
/// See [`ENG_STATE_DISABLE`].
pub const ENG_STATE_IDLE: u32 = 1;
/// See [`ENG_STATE_DISABLE`].
pub const ENG_STATE_NORMAL: u32 = 2;
/// See [`ENG_STATE_DISABLE`].
pub const ENG_STATE_ABORT: u32 = 3;
/// `revision_id` reported by DMA_ENG_GET_STATE (§2.3).
pub const ENG_REVISION_ID: u32 = 4;
/// DMA_QUEUE_GET_STATE `sw_status` values (§2.3).
pub const QUEUE_SW_STATUS_DISABLED: u32 = 1;
/// See [`QUEUE_SW_STATUS_DISABLED`].
pub const QUEUE_SW_STATUS_ENABLED: u32 = 2;
/// See [`QUEUE_SW_STATUS_DISABLED`].
pub const QUEUE_SW_STATUS_ABORTED: u32 = 3;

/// One 16-byte UDMA descriptor (`union udma_desc`, §3.2).
///
/// The same layout serves both directions: on TX (M2S) the second word is `meta_ctrl` and
/// `buf_ptr` is the source address; on RX (S2M) the second word is `buf2_ptr_lo` and `buf_ptr`
/// (`buf1_ptr` in the driver) is the destination address. Addresses are device-side: HBM PAs or
/// host PAs with the arch host-base bit ORed in.
#[repr(C)]
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct UdmaDesc {
    /// Length (bits 15:0) and control bits (`DESC_*`).
    pub len_ctrl: u32,
    /// TX: `meta_ctrl` (SDMA op word). RX: `buf2_ptr_lo`.
    pub meta_ctrl: u32,
    /// TX: source address. RX: destination address (`buf1_ptr`).
    pub buf_ptr: u64,
}

impl UdmaDesc {
    /// Encode a byte length into `len_ctrl` bits 15:0: 65536 encodes as 0. Values above 65536
    /// are not representable and are taken modulo 65536.
    pub const fn encode_len(len: u32) -> u32 {
        len & DESC_LEN_MASK
    }

    /// `len_ctrl` ring-id bits for ring id `id` (taken modulo 4).
    pub const fn ring_id_bits(id: u32) -> u32 {
        (id & 0x3) << DESC_RING_ID_SHIFT
    }

    /// A TX (M2S) descriptor reading `len` (1..=65536) bytes from `src`; `flags` are ORed into
    /// `len_ctrl` (`DESC_FIRST`, `DESC_LAST`, `DESC_INT_EN`, `DESC_DMB`, ring-id bits) and must
    /// not include length bits. `meta_ctrl` is 0 (set it with [`UdmaDesc::with_meta_ctrl`]).
    pub const fn tx(src: u64, len: u32, flags: u32) -> Self {
        UdmaDesc {
            len_ctrl: Self::encode_len(len) | (flags & !DESC_LEN_MASK),
            meta_ctrl: 0,
            buf_ptr: src,
        }
    }

    /// An RX (S2M) descriptor writing `len` (1..=65536) bytes to `dst`; `flags` as for
    /// [`UdmaDesc::tx`] (`DESC_INT_EN`, `DESC_STRONG_ORDER_WR`, ring-id bits). `buf2_ptr_lo` is 0.
    pub const fn rx(dst: u64, len: u32, flags: u32) -> Self {
        UdmaDesc {
            len_ctrl: Self::encode_len(len) | (flags & !DESC_LEN_MASK),
            meta_ctrl: 0,
            buf_ptr: dst,
        }
    }

    /// The same descriptor with `meta_ctrl` (TX) / `buf2_ptr_lo` (RX) replaced.
    pub const fn with_meta_ctrl(self, meta_ctrl: u32) -> Self {
        UdmaDesc { meta_ctrl, ..self }
    }

    /// The same descriptor with its ring id replaced by `id` (modulo 4).
    pub const fn with_ring_id(self, id: u32) -> Self {
        UdmaDesc {
            len_ctrl: (self.len_ctrl & !DESC_RING_ID_MASK) | Self::ring_id_bits(id),
            ..self
        }
    }

    /// Transfer length in bytes, decoding 0 as 65536.
    // A descriptor always moves 1..=65536 bytes, so an `is_empty` would be meaningless.
    #[allow(clippy::len_without_is_empty)]
    pub const fn len(&self) -> u32 {
        match self.len_ctrl & DESC_LEN_MASK {
            0 => MAX_DESC_LEN,
            n => n,
        }
    }

    /// Ring id ("phase"), bits 25:24.
    pub const fn ring_id(&self) -> u32 {
        (self.len_ctrl & DESC_RING_ID_MASK) >> DESC_RING_ID_SHIFT
    }

    /// FIRST bit (TX).
    pub const fn is_first(&self) -> bool {
        self.len_ctrl & DESC_FIRST != 0
    }

    /// LAST bit (TX).
    pub const fn is_last(&self) -> bool {
        self.len_ctrl & DESC_LAST != 0
    }

    /// INT_EN bit.
    pub const fn int_en(&self) -> bool {
        self.len_ctrl & DESC_INT_EN != 0
    }

    /// DMB bit (TX): wait for previous transfers.
    pub const fn is_dmb(&self) -> bool {
        self.len_ctrl & DESC_DMB != 0
    }

    /// STRONG_ORDER_WR bit (RX, v3+).
    pub const fn is_strong_order_wr(&self) -> bool {
        self.len_ctrl & DESC_STRONG_ORDER_WR != 0
    }

    /// The RX view of the second word.
    pub const fn buf2_ptr_lo(&self) -> u32 {
        self.meta_ctrl
    }
}

/// Ring base alignment in bytes (§3.3).
pub const RING_BASE_ALIGN: u64 = 256;
/// Ring size (in descriptors) must be a multiple of this (§3.3).
pub const RING_SIZE_MULTIPLE: u32 = 16;
/// Minimum ring size in descriptors (§3.3).
pub const RING_MIN_DESC: u32 = 32;
/// Maximum ring size in descriptors, 2^24 − 16 (§3.3).
pub const RING_MAX_DESC: u32 = (1 << 24) - 16;
/// Descriptors in the dummy host ring queues are re-pointed to on process exit (§3.6).
pub const DUMMY_RING_DESC: u32 = 64;
/// `DMA_H2T_DESC_COUNT` requested for driver H2T rings (§3.5).
pub const H2T_DESC_COUNT: u32 = 4096;
/// Actual H2T ring size per side after the driver's rounding (+16, next power of two) (§3.5).
pub const H2T_RING_DESC: u32 = 8192;
/// Max descriptor pairs per driver-internal batch (4096/2 − 17) (§3.5).
pub const H2T_MAX_PAIRS_PER_BATCH: u32 = 2031;
/// Value of the driver's completion-descriptor source word, polled for at the destination (§3.5).
pub const DRIVER_COMPLETION_MARKER: u32 = 0xABCD_EF01;

/// Why a ring failed [`validate_ring`] (§3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("ring base {0:#x} is not 256-byte aligned")]
    BaseMisaligned(u64),
    #[error("ring size {0} is not a multiple of 16 descriptors")]
    SizeNotMultipleOf16(u32),
    #[error("ring size {0} is below the minimum of 32 descriptors")]
    TooSmall(u32),
    #[error("ring size {0} exceeds the maximum of 2^24-16 descriptors")]
    TooLarge(u32),
    #[error(
        "ring end (base {base:#x} + {ndesc} descriptors) is not 256-byte aligned or overflows"
    )]
    EndMisaligned { base: u64, ndesc: u32 },
}

/// Check a ring against the driver's queue-init constraints (§3.3): base 256-byte aligned; size
/// in descriptors a multiple of 16, ≥ 32 and ≤ 2^24 − 16; base + size × 16 256-byte aligned.
/// Sizes need not be powers of two.
pub fn validate_ring(base: u64, ndesc: u32) -> Result<(), RingError> {
    if base & (RING_BASE_ALIGN - 1) != 0 {
        return Err(RingError::BaseMisaligned(base));
    }
    if ndesc & (RING_SIZE_MULTIPLE - 1) != 0 {
        return Err(RingError::SizeNotMultipleOf16(ndesc));
    }
    if ndesc < RING_MIN_DESC {
        return Err(RingError::TooSmall(ndesc));
    }
    if ndesc > RING_MAX_DESC {
        return Err(RingError::TooLarge(ndesc));
    }
    match base.checked_add(u64::from(ndesc) * DESC_SIZE as u64) {
        Some(end) if end & (RING_BASE_ALIGN - 1) == 0 => Ok(()),
        _ => Err(RingError::EndMisaligned { base, ndesc }),
    }
}

/// UDMA register offsets relative to an engine's base in BAR0 (§3.7).
pub mod regs {
    /// M2S (TX) block base.
    pub const M2S_BASE: u64 = 0x0;
    /// M2S `state` register.
    pub const M2S_STATE: u64 = 0x200;
    /// M2S `change_state` register (bit 0 NORMAL, bit 1 DISABLE, bit 2 ABORT).
    pub const M2S_CHANGE_STATE: u64 = 0x204;
    /// First M2S queue block; queue q at `M2S_QUEUE_BASE + q × QUEUE_STRIDE`.
    pub const M2S_QUEUE_BASE: u64 = 0x1000;
    /// S2M (RX) block base.
    pub const S2M_BASE: u64 = 0x20000;
    /// First S2M queue block; queue q at `S2M_QUEUE_BASE + q × QUEUE_STRIDE`.
    pub const S2M_QUEUE_BASE: u64 = 0x21000;
    /// Stride between queue register blocks.
    pub const QUEUE_STRIDE: u64 = 0x1000;
    /// "gen" block (interrupt controller, AXI error tables).
    pub const GEN_BASE: u64 = 0x38000;
    /// "gen_ex" block.
    pub const GEN_EX_BASE: u64 = 0x3c000;
    /// `change_state` bit: NORMAL.
    pub const CHANGE_STATE_NORMAL: u32 = 1 << 0;
    /// `change_state` bit: DISABLE.
    pub const CHANGE_STATE_DISABLE: u32 = 1 << 1;
    /// `change_state` bit: ABORT.
    pub const CHANGE_STATE_ABORT: u32 = 1 << 2;

    /// Per-queue register offsets (both directions), relative to the queue block.
    pub const Q_CFG: u64 = 0x20;
    /// See [`Q_CFG`].
    pub const Q_STATUS: u64 = 0x24;
    /// Descriptor ring base, low 32 bits (write-blocked for BAR_WRITE).
    pub const Q_DRBP_LOW: u64 = 0x28;
    /// Descriptor ring base, high 32 bits (write-blocked for BAR_WRITE).
    pub const Q_DRBP_HIGH: u64 = 0x2c;
    /// Descriptor ring length in descriptors.
    pub const Q_DRL: u64 = 0x30;
    /// Descriptor ring head pointer (hardware consumer index).
    pub const Q_DRHP: u64 = 0x34;
    /// Tail-pointer increment doorbell (write-blocked for BAR_WRITE).
    pub const Q_DRTP_INC: u64 = 0x38;
    /// Descriptor ring tail pointer.
    pub const Q_DRTP: u64 = 0x3c;
    /// See [`Q_CFG`].
    pub const Q_DCP: u64 = 0x40;
    /// Completion ring base, low (write-blocked for BAR_WRITE).
    pub const Q_CRBP_LOW: u64 = 0x44;
    /// Completion ring base, high (write-blocked for BAR_WRITE).
    pub const Q_CRBP_HIGH: u64 = 0x48;
    /// Completion ring head pointer.
    pub const Q_CRHP: u64 = 0x4c;
    /// M2S queue `comp_cfg`.
    pub const M2S_Q_COMP_CFG: u64 = 0xa0;
    /// M2S queue `q_sw_ctrl`.
    pub const M2S_Q_SW_CTRL: u64 = 0xb0;
    /// S2M queue `comp_cfg`.
    pub const S2M_Q_COMP_CFG: u64 = 0x54;
    /// S2M queue `q_sw_ctrl`.
    pub const S2M_Q_SW_CTRL: u64 = 0x64;
    /// Pointer registers hold 24-bit descriptor indices.
    pub const PTR_MASK: u32 = 0x00FF_FFFF;

    /// Offset of M2S (TX) queue `q`'s register block.
    pub const fn m2s_queue(q: u32) -> u64 {
        M2S_QUEUE_BASE + q as u64 * QUEUE_STRIDE
    }

    /// Offset of S2M (RX) queue `q`'s register block.
    pub const fn s2m_queue(q: u32) -> u64 {
        S2M_QUEUE_BASE + q as u64 * QUEUE_STRIDE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layout() {
        assert_eq!(size_of::<UdmaDesc>(), 16);
        assert_eq!(DESC_SIZE, 16);
        assert_eq!(offset_of!(UdmaDesc, len_ctrl), 0);
        assert_eq!(offset_of!(UdmaDesc, meta_ctrl), 4);
        assert_eq!(offset_of!(UdmaDesc, buf_ptr), 8);
    }

    #[test]
    fn bit_constants() {
        assert_eq!(DESC_LEN_MASK, 0xFFFF);
        assert_eq!(DESC_RING_ID_MASK, 0x0300_0000);
        assert_eq!(DESC_FIRST, 0x0400_0000);
        assert_eq!(DESC_LAST, 0x0800_0000);
        assert_eq!(DESC_INT_EN, 0x1000_0000);
        assert_eq!(DESC_STRONG_ORDER_WR, 0x2000_0000);
        assert_eq!(DESC_DMB, 0x4000_0000);
        assert_eq!(MAX_DESC_LEN, 65536);
        assert_eq!(META_CTRL_COPY, 0x01080003);
        assert_eq!(META_CTRL_COPY_WRITE_BARRIER, 0x05080003);
        assert_eq!(META_CTRL_COPY_WRITE_BARRIER, META_CTRL_COPY | 1 << 26);
        assert_eq!(INITIAL_RING_ID, 1);
        assert_eq!(
            (QUEUE_TYPE_TX, QUEUE_TYPE_RX, QUEUE_TYPE_COMPLETION),
            (0, 1, 2)
        );
        assert_eq!(DMA_QUEUES_PER_ENGINE, 16);
        assert_eq!(RING_MAX_DESC, 16_777_200);
    }

    #[test]
    fn tx_rx_constructors() {
        let t = UdmaDesc::tx(
            0x1000,
            4096,
            DESC_FIRST | DESC_LAST | UdmaDesc::ring_id_bits(1),
        )
        .with_meta_ctrl(META_CTRL_COPY);
        assert_eq!(t.len(), 4096);
        assert_eq!(t.ring_id(), 1);
        assert!(t.is_first() && t.is_last());
        assert!(!t.int_en() && !t.is_dmb());
        assert_eq!(t.meta_ctrl, 0x01080003);
        assert_eq!(t.buf_ptr, 0x1000);
        assert_eq!(t.len_ctrl, 0x0D00_1000);

        let r = UdmaDesc::rx(0x4000_0000_2000, 65536, DESC_INT_EN | DESC_STRONG_ORDER_WR);
        assert_eq!(r.len_ctrl & DESC_LEN_MASK, 0);
        assert_eq!(r.len(), 65536);
        assert!(r.int_en() && r.is_strong_order_wr());
        assert!(!r.is_first() && !r.is_last());
        assert_eq!(r.buf_ptr, 0x4000_0000_2000);
        assert_eq!(r.buf2_ptr_lo(), 0);

        // Length bits in flags are ignored; ring id is replaceable.
        let d = UdmaDesc::tx(0, 1, 0xFFFF).with_ring_id(3);
        assert_eq!(d.len(), 1);
        assert_eq!(d.ring_id(), 3);
        assert_eq!(d.with_ring_id(2).ring_id(), 2);
        assert!(UdmaDesc::tx(0, 1, DESC_DMB).is_dmb());
    }

    #[test]
    fn bytes_round_trip() {
        let d = UdmaDesc {
            len_ctrl: 0x0C00_0010,
            meta_ctrl: 0x0508_0003,
            buf_ptr: 0x1122_3344_5566_7788,
        };
        let b = d.as_bytes();
        assert_eq!(b.len(), 16);
        assert_eq!(&b[0..4], &0x0C00_0010u32.to_le_bytes());
        assert_eq!(UdmaDesc::read_from_bytes(b), Ok(d));
    }

    #[test]
    fn ring_validation() {
        assert_eq!(validate_ring(0x1000, 32), Ok(()));
        assert_eq!(validate_ring(0x100, 48), Ok(())); // not a power of two: fine
        assert_eq!(validate_ring(0, RING_MAX_DESC), Ok(()));
        assert_eq!(
            validate_ring(0x1080, 32),
            Err(RingError::BaseMisaligned(0x1080))
        );
        assert_eq!(
            validate_ring(0x1000, 40),
            Err(RingError::SizeNotMultipleOf16(40))
        );
        assert_eq!(validate_ring(0x1000, 16), Err(RingError::TooSmall(16)));
        assert_eq!(validate_ring(0x1000, 0), Err(RingError::TooSmall(0)));
        assert_eq!(
            validate_ring(0x1000, 1 << 24),
            Err(RingError::TooLarge(1 << 24))
        );
        assert_eq!(
            validate_ring(u64::MAX - 255, 32),
            Err(RingError::EndMisaligned {
                base: u64::MAX - 255,
                ndesc: 32
            })
        );
    }

    #[test]
    fn engines_and_reserved_queues() {
        assert_eq!(dma_engines(Arch::V2Trn1), 34);
        assert_eq!(dma_engines(Arch::V2Inf2), 34);
        assert_eq!(dma_engines(Arch::V3Trn2), 132);
        assert_eq!(NUM_DMA_ENG_PER_DEVICE, 132);
        assert!(is_reserved_queue(Arch::V2Trn1, 33, 15));
        assert!(is_reserved_queue(Arch::V2Trn1, 10, 14));
        assert!(!is_reserved_queue(Arch::V2Trn1, 11, 14));
        assert!(is_reserved_queue(Arch::V2Trn1, 26, 14));
        assert!(is_reserved_queue(Arch::V3Trn2, 7, 14));
        assert!(!is_reserved_queue(Arch::V3Trn2, 5, 14));
        assert!(!is_reserved_queue(Arch::V3Trn2, 0, 13));
    }

    #[test]
    fn register_offsets() {
        assert_eq!(regs::m2s_queue(3) + regs::Q_DRTP_INC, 0x4038);
        assert_eq!(regs::s2m_queue(0), 0x21000);
        assert_eq!(regs::s2m_queue(15), 0x30000);
        assert_eq!(regs::S2M_QUEUE_BASE + regs::Q_DRHP, 0x21034);
    }
}
