//! Per-device driver state beyond chunks and queues: CRWL model locks, core-init tokens, DMA
//! engine states, the datastore, async-copy handles, H2T queue reservations, scrubs, pins,
//! misc-RAM words (`driver-abi.md` §2.3, §7).

use crate::chunks::Lifespan;
use crate::{release_chunk_memory, DevState};
use neuron_abi::arch::Arch;
use neuron_abi::consts::{
    MemType, CINIT_STATE_INVALID, CRWL_MAX_NC_PER_DEVICE, DMA_ENG_STATE_NORMAL,
    MAX_NEURON_DEVICE_COUNT, NDS_SLOTS_PER_DEVICE, NDS_SLOT_SIZE,
};
use neuron_abi::nds;
use neuron_abi::Errno;
use std::collections::{HashMap, HashSet};

/// Global NeuronCore slots of the CRWL range table: 64 devices × 8 cores.
pub const CRWL_GLOBAL_SLOTS: usize = (MAX_NEURON_DEVICE_COUNT * CRWL_MAX_NC_PER_DEVICE) as usize;
/// `MAX_NC_PER_DEVICE`: the CRWL lock arrays are this long on every arch.
pub const MAX_NC_PER_DEVICE: u32 = CRWL_MAX_NC_PER_DEVICE;
/// Datastore header version this emulator writes after "nds\0" (project-defined).
pub const NDS_VERSION: u32 = 1;
/// NeuronCore counter ids a datastore page has (original + extended).
pub const NDS_NC_IDS: usize = nds::NC_COUNTER_COUNT + nds::EXT_NC_COUNTER_COUNT;
/// Per-NC datastore counters, indexed by `NcCounter` id.
pub type NcCounters = [u64; NDS_NC_IDS];

/// One per-NC model reader/writer lock.
#[derive(Debug, Clone, Default)]
pub struct Crwl {
    pub uuid: [u8; 32],
    pub writer_acquired: bool,
    pub writer_pid: u32,
    pub reader_count: u64,
}

/// One datastore slot.
#[derive(Debug, Clone, Default)]
pub struct DsEntry {
    pub pid: u32,
    /// Chunk handle of its 256 KiB host page (0 until first used).
    pub handle: u64,
    pub clear_tick: u64,
}

/// H2T queues reserved on one NC's host-transfer engine.
#[derive(Debug, Clone, Default)]
pub struct H2t {
    pub copy_bmap: u32,
    pub service_bmap: u32,
}

#[derive(Debug)]
pub struct DrvState {
    pub crwl: Vec<Crwl>,
    pub cinit: Vec<u32>,
    /// DMA engine state as DMA_ENG_GET_STATE reports it (0 disable, 2 normal, 3 abort).
    pub eng_state: Vec<u32>,
    pub ds: Vec<DsEntry>,
    pub ds_tick: u64,
    /// Last async-copy wait handle handed out per NC (-1 = none yet).
    pub async_last: Vec<i32>,
    pub h2t: Vec<H2t>,
    pub scrub_pending: Vec<bool>,
    pub throttling: bool,
    pub metrics_mode: u32,
    pub power_profile: u32,
    /// (pid, va) -> size of HOST_MEM_PIN ranges.
    pub pins: HashMap<(u32, u64), u64>,
    /// Writable misc-RAM words (runtime-reserved ranges), by misc-RAM offset.
    pub misc_ram: HashMap<u64, u32>,
    /// Reset request ids that completed and were not waited for yet.
    pub reset_done: HashSet<u32>,
    /// (nc, H2T queue) -> chunk handle of its H2D completion queue (2.27).
    pub compl_queues: HashMap<(u32, u32), u64>,
    /// Per NC: the datastore counters of entries already released, summed (the driver's
    /// `nsysfsmetric_nds_aggregate` on release; sysfs `total` adds them to the live ones).
    pub ds_released: Vec<NcCounters>,
    /// Per NC: reset requests (NC_RESET, DEVICE_RESET, sysfs `reset`) and failed resets.
    pub reset_req: Vec<u64>,
    pub reset_fail: Vec<u64>,
    /// The driver's fw-io context (mailbox sequence numbers, its firmware timeline).
    pub(crate) fwio: crate::driver::FwIo,
}

impl DrvState {
    pub fn new(arch: Arch) -> DrvState {
        DrvState {
            crwl: vec![Crwl::default(); MAX_NC_PER_DEVICE as usize],
            cinit: vec![CINIT_STATE_INVALID; arch.nc_count() as usize],
            eng_state: vec![DMA_ENG_STATE_NORMAL; arch.dma_engines() as usize],
            ds: vec![DsEntry::default(); NDS_SLOTS_PER_DEVICE as usize],
            ds_tick: 1,
            async_last: vec![-1; arch.nc_count() as usize],
            h2t: vec![H2t::default(); arch.nc_count() as usize],
            scrub_pending: vec![false; arch.hbm_count() as usize],
            throttling: false,
            metrics_mode: 0,
            power_profile: 0,
            pins: HashMap::new(),
            misc_ram: HashMap::new(),
            reset_done: HashSet::new(),
            compl_queues: HashMap::new(),
            ds_released: vec![[0; NDS_NC_IDS]; arch.nc_count() as usize],
            reset_req: vec![0; arch.nc_count() as usize],
            reset_fail: vec![0; arch.nc_count() as usize],
            fwio: Default::default(),
        }
    }
}

/// Queues the driver never resets on process exit: queue 15 of every engine (collectives) and
/// queue 14 of the NX-reserved engines (`driver-abi.md` §3.1).
pub fn reserved_queue(arch: Arch, eng: u32, q: u32) -> bool {
    if q == 15 {
        return true;
    }
    if q != 14 || eng >= arch.nc_count() * 16 {
        return false;
    }
    let e = eng % 16;
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => e < 11,
        Arch::V3Trn2 => e <= 4 || e == 7 || e == 8,
    }
}

/// Release the CRWL locks a process holds as writer (`ncrwl_release_current_process`).
pub fn crwl_release_process(g: &mut DevState, pid: u32) {
    for c in g.drv.crwl.iter_mut() {
        if c.writer_pid == pid {
            *c = Crwl::default();
        }
    }
}

/// The driver-defined part of datastore entry `i`'s page, if it has one.
fn ds_page(g: &mut DevState, i: usize) -> Option<Vec<u8>> {
    let pa = g.chunks.get(g.drv.ds.get(i)?.handle)?.pa;
    let mut page = vec![0u8; nds::DRIVER_AREA_END];
    g.dev.read(pa, &mut page).ok()?;
    Some(page)
}

/// Add every per-NC counter of `page` into `acc` (one array per NC of the device).
fn add_page(acc: &mut [NcCounters], page: &[u8]) {
    for (nc, a) in acc.iter_mut().enumerate() {
        for (id, v) in a.iter_mut().enumerate() {
            *v = v.wrapping_add(nds::nc_counter(page, nc as u32, nds::NcCounter(id as u32)));
        }
    }
}

/// Per NC, the counters of the datastore entries in use now (sysfs `present`).
pub fn ds_live_counters(g: &mut DevState) -> Vec<NcCounters> {
    let mut acc = vec![[0; NDS_NC_IDS]; g.drv.ds_released.len()];
    for i in 0..g.drv.ds.len() {
        if g.drv.ds[i].pid == 0 {
            continue;
        }
        if let Some(page) = ds_page(g, i) {
            add_page(&mut acc, &page);
        }
    }
    acc
}

fn ds_clear_entry(g: &mut DevState, i: usize) {
    // Fold the leaving process's counters into the device's before the page is zeroed.
    if g.drv.ds[i].pid != 0 {
        if let Some(page) = ds_page(g, i) {
            add_page(&mut g.drv.ds_released, &page);
        }
    }
    let tick = g.drv.ds_tick;
    g.drv.ds_tick += 1;
    let e = &mut g.drv.ds[i];
    e.pid = 0;
    e.clear_tick = tick;
    let h = e.handle;
    if let Some(pa) = g.chunks.get(h).map(|c| c.pa) {
        let _ = g.dev.fill(pa, NDS_SLOT_SIZE, 0);
    }
}

/// ACQUIRE_NEURON_DS: `pid` 0 = the caller's own entry (created on first use), otherwise an
/// existing entry of process `pid` (`-ENOENT` if none). Returns the entry's chunk (pa, size).
pub fn datastore_acquire(g: &mut DevState, pid: i32, caller: u32) -> Result<(u64, u64), Errno> {
    let i = if pid != 0 {
        g.drv
            .ds
            .iter()
            .position(|e| e.pid != 0 && e.pid == pid as u32)
            .ok_or(Errno::ENOENT)?
    } else if let Some(i) = g.drv.ds.iter().position(|e| e.pid == caller) {
        i
    } else {
        // An empty slot, least recently cleared first (never-used slots first).
        let i = g
            .drv
            .ds
            .iter()
            .enumerate()
            .filter(|(_, e)| e.pid == 0)
            .min_by_key(|(_, e)| e.clear_tick)
            .map(|(i, _)| i)
            .ok_or(Errno::ENOMEM)?;
        if g.chunks.get(g.drv.ds[i].handle).is_none() {
            let c = g.chunks.alloc(
                NDS_SLOT_SIZE,
                0,
                true,
                0,
                0,
                MemType::NCDEV_HOST.0,
                0,
                Lifespan::Device,
            )?;
            if !g.add_host_memory(c.pa, c.size) {
                let _ = g.chunks.free(c.handle);
                return Err(Errno::ENOMEM);
            }
            g.drv.ds[i].handle = c.handle;
        }
        g.drv.ds[i].pid = caller;
        let pa = g.chunks.get(g.drv.ds[i].handle).map(|c| c.pa);
        if let Some(pa) = pa {
            let mut hdr = [0u8; 8];
            hdr[..4].copy_from_slice(b"nds\0");
            hdr[4..].copy_from_slice(&NDS_VERSION.to_le_bytes());
            let _ = g.dev.write(pa, &hdr);
        }
        i
    };
    let c = g.chunks.get(g.drv.ds[i].handle).ok_or(Errno::ENOMEM)?;
    Ok((c.pa, c.size))
}

/// RELEASE_NEURON_DS / process exit: only the owner's release clears its entry.
pub fn datastore_release(g: &mut DevState, caller: u32) {
    if caller == 0 {
        return;
    }
    if let Some(i) = g.drv.ds.iter().position(|e| e.pid == caller) {
        ds_clear_entry(g, i);
    }
}

/// The node's last close: every entry is cleared.
pub fn datastore_clear(g: &mut DevState) {
    for i in 0..g.drv.ds.len() {
        if g.drv.ds[i].pid != 0 {
            ds_clear_entry(g, i);
        }
    }
}

/// Free a driver-owned chunk (completion queues and the like).
pub fn free_handle(g: &mut DevState, h: u64) {
    if let Ok(Some(c)) = g.chunks.free(h) {
        release_chunk_memory(g, &c);
    }
}
