//! The per-process datastore ("NDS") page: where a runtime keeps its counters for the driver's
//! sysfs tree and for monitoring tools (`driver-abi.md` §2.7, `share/neuron_driver_shared.h`
//! of driver 2.26-2.28).
//!
//! One 256 KiB host page per process slot (16 slots per device), got with
//! `ACQUIRE_NEURON_DS` and mapped by the runtime (read-write) and by tools (another process's,
//! read-only). The driver defines the header, the device counters and the per-NeuronCore
//! counters below; it reads them to fill `neuron_core<M>/stats/status/*` and
//! `other_info/*`. Everything between the end of the per-NC counters (byte 1248) and
//! [`EXT_OFFSET_OLD`] is the runtime's own (its process and model records are not public);
//! this project's runtime keeps its records there (`neuron_runtime::nds`).
//!
//! All counters are little-endian `u64`, naturally aligned, so a reader in another process
//! sees each one whole.

/// The first four bytes of an initialised page.
pub const SIGNATURE: [u8; 4] = *b"nds\0";
/// Byte offset of the device counters (after `{signature[4], int version}`).
pub const ND_COUNTERS_START: usize = 8;
/// Device counters: 14 named + 17 reserved.
pub const ND_COUNTER_COUNT: usize = 31;
/// Byte offset of the first NeuronCore counter block.
pub const NC_COUNTERS_START: usize = ND_COUNTERS_START + ND_COUNTER_COUNT * 8;
/// Counters per NeuronCore in the original blocks (`NDS_NC_COUNTER_COUNT`).
pub const NC_COUNTER_COUNT: usize = 31;
/// NeuronCores with an original counter block (`NDS_MAX_NEURONCORE_COUNT`).
pub const MAX_NC: usize = 4;
/// End of the original per-NC blocks: the runtime's private area starts here.
pub const RUNTIME_AREA_START: usize = NC_COUNTERS_START + NC_COUNTER_COUNT * MAX_NC * 8;
/// `NDS_EXT_OFFSET_OLD`: end of the runtime's process/model structures in the driver's view.
pub const EXT_OFFSET_OLD: usize = 44588;
/// Extended counters per NC (`NDS_EXT_NC_COUNTER_COUNT`: 10 named + 54 reserved).
pub const EXT_NC_COUNTER_COUNT: usize = 64;
/// Full counter sets (base + extended + 1 padding) of NCs 4..16.
pub const EXT_NC_DATA_COUNT: usize = NC_COUNTER_COUNT + EXT_NC_COUNTER_COUNT + 1;
/// NeuronCores beyond the first four that have a full set (`NDS_EXT_MAX_NEURONCORE_COUNT`).
pub const EXT_MAX_NC: usize = 12;
/// Most NeuronCores a page has counters for.
pub const MAX_NC_TOTAL: usize = MAX_NC + EXT_MAX_NC;

const fn align64(v: usize) -> usize {
    (v + 63) & !63
}
/// Size of the older extension section the current one is placed after.
const EXT_SECTION_SIZE_OLD: usize = 65 * MAX_NC * 8 + 96 * EXT_MAX_NC * 8;
/// Byte offset of the extended counters of NCs 0..4 (`NDS_EXT_NEURONCORE_COUNTERS_START`).
pub const EXT_NC_COUNTERS_START: usize = align64(EXT_OFFSET_OLD + EXT_SECTION_SIZE_OLD);
/// Byte offset of the full counter sets of NCs 4..16 (`NDS_EXT_NEURONCORE_NC_DATA_START`).
pub const EXT_NC_DATA_START: usize =
    align64(EXT_NC_COUNTERS_START + EXT_NC_COUNTER_COUNT * MAX_NC * 8);
/// End of everything the driver defines.
pub const DRIVER_AREA_END: usize = EXT_NC_DATA_START + EXT_MAX_NC * EXT_NC_DATA_COUNT * 8;

/// A device counter id (`NDS_ND_COUNTER_*`). Open: ids past the named ones are reserved slots.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NdCounter(pub u32);

impl NdCounter {
    pub const RUNTIME_VERSION: NdCounter = NdCounter(0);
    pub const FRAMEWORK_VERSION: NdCounter = NdCounter(1);
    pub const FAL_VERSION: NdCounter = NdCounter(2);
    pub const FEATURE_BITMAP: NdCounter = NdCounter(3);
    pub const MIN_NEFF_VERSION: NdCounter = NdCounter(4);
    pub const MAX_NEFF_VERSION: NdCounter = NdCounter(5);
    pub const MEM_USAGE_CODE_HOST: NdCounter = NdCounter(6);
    pub const MEM_USAGE_TENSORS_HOST: NdCounter = NdCounter(7);
    pub const MEM_USAGE_CONSTANTS_HOST: NdCounter = NdCounter(8);
    pub const MEM_USAGE_SCRATCHPAD_HOST: NdCounter = NdCounter(9);
    pub const MEM_USAGE_MISC_HOST: NdCounter = NdCounter(10);
    pub const DYNAMIC_SYSFS_METRIC_BITMAP: NdCounter = NdCounter(11);
    pub const DEVICE_CLUSTER_ID: NdCounter = NdCounter(12);
    pub const AGG_NEFF_ID: NdCounter = NdCounter(13);
}

/// A NeuronCore counter id (`NDS_NC_COUNTER_*`, then `NDS_EXT_NC_COUNTER_*` from 31). Open.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NcCounter(pub u32);

impl NcCounter {
    pub const TIME_IN_USE: NcCounter = NcCounter(0);
    pub const INFER_COMPLETED: NcCounter = NcCounter(1);
    pub const INFER_COMPLETED_WITH_ERR: NcCounter = NcCounter(2);
    pub const INFER_COMPLETED_WITH_NUM_ERR: NcCounter = NcCounter(3);
    pub const INFER_TIMED_OUT: NcCounter = NcCounter(4);
    pub const INFER_INCORRECT_INPUT: NcCounter = NcCounter(5);
    pub const INFER_FAILED_TO_QUEUE: NcCounter = NcCounter(6);
    /// The six error classes, "offset by error code" as the header says (generic first).
    pub const ERR_GENERIC: NcCounter = NcCounter(7);
    pub const ERR_NUMERICAL: NcCounter = NcCounter(8);
    pub const ERR_MODEL: NcCounter = NcCounter(9);
    pub const ERR_TRANSIENT: NcCounter = NcCounter(10);
    pub const ERR_HW: NcCounter = NcCounter(11);
    pub const ERR_RT: NcCounter = NcCounter(12);
    pub const LATENCY_DEVICE: NcCounter = NcCounter(13);
    pub const LATENCY_TOTAL: NcCounter = NcCounter(14);
    pub const NC_TIME: NcCounter = NcCounter(15);
    pub const GENERIC_FAIL: NcCounter = NcCounter(16);
    pub const ERR_RESOURCE: NcCounter = NcCounter(17);
    pub const ERR_RESOURCE_NC: NcCounter = NcCounter(18);
    pub const ERR_INVALID: NcCounter = NcCounter(19);
    pub const ERR_UNSUPPORTED_NEFF_VERSION: NcCounter = NcCounter(20);
    pub const CC_TIME: NcCounter = NcCounter(21);
    pub const MEM_USAGE_CODE_DEVICE: NcCounter = NcCounter(22);
    pub const MEM_USAGE_TENSORS_DEVICE: NcCounter = NcCounter(23);
    pub const MEM_USAGE_CONSTANTS_DEVICE: NcCounter = NcCounter(24);
    pub const MEM_USAGE_SCRATCHPAD_DEVICE: NcCounter = NcCounter(25);
    pub const MEM_USAGE_MISC_DEVICE: NcCounter = NcCounter(26);
    pub const MODEL_LOAD_COUNT: NcCounter = NcCounter(27);
    pub const INFERENCE_COUNT: NcCounter = NcCounter(28);
    pub const MAC_COUNT: NcCounter = NcCounter(29);
    pub const OOB: NcCounter = NcCounter(30);
    // Extended counters (`NDS_EXT_NC_COUNTER_*`), numbered after the original 31.
    pub const HW_ERR_COLLECTIVES: NcCounter = NcCounter(31);
    pub const HW_ERR_HBM_UE: NcCounter = NcCounter(32);
    pub const HW_ERR_NC_UE: NcCounter = NcCounter(33);
    pub const HW_ERR_DMA_ABORT: NcCounter = NcCounter(34);
    pub const ERR_SW_NQ_OVERFLOW: NcCounter = NcCounter(35);
    pub const ERR_SW_SEMAPHORE_ERROR: NcCounter = NcCounter(36);
    pub const ERR_SW_EVENT_ERROR: NcCounter = NcCounter(37);
    pub const ERR_SW_PSUM_COLLISION: NcCounter = NcCounter(38);
    pub const ERR_SW_SEQUENCER_FATAL: NcCounter = NcCounter(39);
    pub const HW_ERR_REPAIRABLE_HBM_UE: NcCounter = NcCounter(40);
}

/// `neuron_core<M>/stats/status/<name>` and the counter each shows, in the driver's order
/// (`neuron_sysfs_metrics.c`, `status_counter_nodes_info_tbl`).
pub const STATUS_COUNTERS: [(&str, NcCounter); 24] = [
    ("success", NcCounter::INFER_COMPLETED),
    ("failure", NcCounter::GENERIC_FAIL),
    ("timeout", NcCounter::INFER_TIMED_OUT),
    ("exec_bad_input", NcCounter::INFER_INCORRECT_INPUT),
    ("hw_error", NcCounter::ERR_HW),
    (
        "execute_completed_with_error",
        NcCounter::INFER_COMPLETED_WITH_ERR,
    ),
    (
        "execute_completed_with_num_error",
        NcCounter::INFER_COMPLETED_WITH_NUM_ERR,
    ),
    ("generic_error", NcCounter::ERR_GENERIC),
    ("resource_error", NcCounter::ERR_RESOURCE),
    ("resource_nc_error", NcCounter::ERR_RESOURCE_NC),
    ("execute_failed_to_queue", NcCounter::INFER_FAILED_TO_QUEUE),
    ("invalid_error", NcCounter::ERR_INVALID),
    (
        "unsupported_neff_version",
        NcCounter::ERR_UNSUPPORTED_NEFF_VERSION,
    ),
    ("oob_error", NcCounter::OOB),
    ("hw_collectives_error", NcCounter::HW_ERR_COLLECTIVES),
    ("hw_hbm_ue_error", NcCounter::HW_ERR_HBM_UE),
    ("hw_nc_ue_error", NcCounter::HW_ERR_NC_UE),
    ("hw_dma_abort_error", NcCounter::HW_ERR_DMA_ABORT),
    ("execute_sw_nq_overflow", NcCounter::ERR_SW_NQ_OVERFLOW),
    (
        "execute_sw_semaphore_error",
        NcCounter::ERR_SW_SEMAPHORE_ERROR,
    ),
    ("execute_sw_event_error", NcCounter::ERR_SW_EVENT_ERROR),
    (
        "execute_sw_psum_collision",
        NcCounter::ERR_SW_PSUM_COLLISION,
    ),
    (
        "execute_sw_sequencer_fatal",
        NcCounter::ERR_SW_SEQUENCER_FATAL,
    ),
    (
        "hw_repairable_hbm_ue_error",
        NcCounter::HW_ERR_REPAIRABLE_HBM_UE,
    ),
];

/// `neuron_core<M>/stats/other_info/<name>` entries that come from the datastore (the driver's
/// `custom_counter_nodes_info_tbl`; `reset_req_count` and `reset_fail_count` are the driver's
/// own counts, not in the page).
pub const OTHER_INFO_COUNTERS: [(&str, NcCounter); 4] = [
    ("model_load_count", NcCounter::MODEL_LOAD_COUNT),
    ("inference_count", NcCounter::INFERENCE_COUNT),
    ("flop_count", NcCounter::MAC_COUNT),
    ("nc_time_in_use", NcCounter::TIME_IN_USE),
];

/// Byte offset of device counter `c`, `None` past the 31 slots.
pub const fn nd_counter_offset(c: NdCounter) -> Option<usize> {
    if (c.0 as usize) < ND_COUNTER_COUNT {
        Some(ND_COUNTERS_START + c.0 as usize * 8)
    } else {
        None
    }
}

/// Byte offset of NeuronCore `nc`'s counter `c`: NCs 0..4 have their original 31 counters in
/// the first blocks and the extended ones in the extension section; NCs 4..16 keep a full set
/// in the extra-NC section. `None` for an NC or counter past the page's capacity.
pub const fn nc_counter_offset(nc: u32, c: NcCounter) -> Option<usize> {
    let (nc, id) = (nc as usize, c.0 as usize);
    if id >= NC_COUNTER_COUNT + EXT_NC_COUNTER_COUNT || nc >= MAX_NC_TOTAL {
        return None;
    }
    if nc >= MAX_NC {
        return Some(EXT_NC_DATA_START + ((nc - MAX_NC) * EXT_NC_DATA_COUNT + id) * 8);
    }
    if id < NC_COUNTER_COUNT {
        Some(NC_COUNTERS_START + (nc * NC_COUNTER_COUNT + id) * 8)
    } else {
        Some(EXT_NC_COUNTERS_START + (nc * EXT_NC_COUNTER_COUNT + id - NC_COUNTER_COUNT) * 8)
    }
}

/// Read a counter at byte offset `off` of a page (0 if the page is too short).
pub fn read_u64(page: &[u8], off: usize) -> u64 {
    page.get(off..off + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// NeuronCore `nc`'s counter `c` in `page` (0 where the page has no such slot).
pub fn nc_counter(page: &[u8], nc: u32, c: NcCounter) -> u64 {
    nc_counter_offset(nc, c).map_or(0, |o| read_u64(page, o))
}

/// Whether `page` starts with the datastore signature.
pub fn is_initialised(page: &[u8]) -> bool {
    page.get(..4) == Some(&SIGNATURE[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::NDS_SLOT_SIZE;

    #[test]
    fn offsets_match_the_driver_header() {
        // The figures `driver-abi.md` §2.7 gives (computed with gcc from the header macros).
        assert_eq!(NC_COUNTERS_START, 256);
        assert_eq!(RUNTIME_AREA_START, 1248);
        assert_eq!(EXT_NC_COUNTERS_START, 55936);
        assert_eq!(EXT_NC_DATA_START, 57984);
        assert_eq!(DRIVER_AREA_END, 57984 + 12 * 96 * 8);
        assert!(DRIVER_AREA_END <= NDS_SLOT_SIZE as usize);
        assert_eq!(NC_COUNTER_COUNT + EXT_NC_COUNTER_COUNT, 95);
    }

    #[test]
    fn counter_offsets() {
        assert_eq!(nd_counter_offset(NdCounter::RUNTIME_VERSION), Some(8));
        assert_eq!(nd_counter_offset(NdCounter(31)), None);
        assert_eq!(nc_counter_offset(0, NcCounter::TIME_IN_USE), Some(256));
        assert_eq!(
            nc_counter_offset(1, NcCounter::INFER_COMPLETED),
            Some(256 + (31 + 1) * 8)
        );
        assert_eq!(
            nc_counter_offset(3, NcCounter::OOB),
            Some(256 + (3 * 31 + 30) * 8)
        );
        assert_eq!(
            nc_counter_offset(0, NcCounter::HW_ERR_COLLECTIVES),
            Some(55936)
        );
        assert_eq!(
            nc_counter_offset(2, NcCounter::HW_ERR_NC_UE),
            Some(55936 + (2 * 64 + 2) * 8)
        );
        assert_eq!(nc_counter_offset(4, NcCounter::TIME_IN_USE), Some(57984));
        assert_eq!(
            nc_counter_offset(5, NcCounter::HW_ERR_DMA_ABORT),
            Some(57984 + (96 + 34) * 8)
        );
        assert_eq!(nc_counter_offset(16, NcCounter::TIME_IN_USE), None);
        assert_eq!(nc_counter_offset(0, NcCounter(95)), None);
        // No two (nc, counter) pairs share a slot, and none overlaps the runtime's area.
        let mut seen = std::collections::HashSet::new();
        for nc in 0..MAX_NC_TOTAL as u32 {
            for c in 0..95 {
                let o = nc_counter_offset(nc, NcCounter(c)).expect("in range");
                assert!(seen.insert(o), "nc {nc} counter {c} reuses byte {o}");
                assert!(!(RUNTIME_AREA_START..EXT_OFFSET_OLD).contains(&o));
                assert!(o + 8 <= DRIVER_AREA_END);
            }
        }
    }

    #[test]
    fn reads_are_bounded() {
        let mut page = vec![0u8; NDS_SLOT_SIZE as usize];
        page[..4].copy_from_slice(&SIGNATURE);
        let o = nc_counter_offset(6, NcCounter::INFER_COMPLETED).expect("slot");
        page[o..o + 8].copy_from_slice(&42u64.to_le_bytes());
        assert!(is_initialised(&page));
        assert_eq!(nc_counter(&page, 6, NcCounter::INFER_COMPLETED), 42);
        assert_eq!(nc_counter(&page[..100], 6, NcCounter::INFER_COMPLETED), 0);
        assert!(!is_initialised(&page[..2]));
        assert_eq!(STATUS_COUNTERS.len(), 24);
    }
}
