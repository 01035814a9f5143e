//! Loading a NEFF onto a NeuronCore and executing it — all through the driver ABI.
//!
//! Load: parse the NEFF, place every variable in device memory, expand the DMA descriptions
//! into real descriptor rings, translate pseudo-instructions, wrap each engine's program in the
//! runtime prologue/epilogue, stage the programs and their fetch rings, create notification
//! queues and map them, map the core's semaphore page.
//!
//! Execute: copy inputs in, clear semaphores, open the start gate through the mapped semaphore
//! page, then poll the notification queues for every engine's end-of-execution entry against
//! `NEURON_RT_EXEC_TIMEOUT`. Real NEFFs' programs (AWS's prologue/epilogue, `crate::prologue`)
//! are fetched once at load and loop: their gate is `$S[0]`, their markers `NOTIFY` hints 2
//! and 3. Test-encoding programs are re-fetched per execution and gated by `$S[255]`.

use crate::drv::{Chunk, Driver};
use crate::mapped::Mapped;
use crate::status::{NrtError, NrtStatus};
use neuron_abi::consts::{
    MemType, MMAP_RESOURCE_SBUF, MMAP_RESOURCE_SEMAPHORE, NQ_TYPE_ERROR, NQ_TYPE_NOTIFY,
};
use neuron_abi::notify::{
    NotificationEntry, NotifyKind, ENTRY_SIZE, ERR_BAD_INSTR, ERR_DMA_ABORT, ERR_GPSIMD_EXCEPTION,
    ERR_HBM_UE, ERR_HBM_UE_REPAIRABLE, ERR_NUMERICAL, ERR_OOB, ERR_SRAM_UE,
};
use neuron_abi::tpb;
use neuron_abi::udma::{
    UdmaDesc, DESC_FIRST, DESC_LAST, META_CTRL_COPY, QUEUE_TYPE_RX, QUEUE_TYPE_TX,
};
use neuron_isa::cayman::WORD;
use neuron_isa::{Dtype, Engine};
use neuron_neff::{Neff, NeffError, ParseOptions, VarType};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use zerocopy::FromBytes;

/// Bytes per notification queue (256 entries).
pub const NQ_BYTES: u32 = 4096;
/// DMA engines (per core) that fetch the five engines' instructions; data queues use the
/// engines after them (a runtime choice: the driver leaves queue use to the runtime).
pub const FETCH_DMA_ENGINE_BASE: u32 = 0;
pub const DATA_DMA_ENGINE_BASE: u32 = 5;
pub const DATA_DMA_ENGINES: u32 = 11;

/// Name, type and shape of a model input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    /// Bytes.
    pub size: u64,
}

#[derive(Debug)]
struct Queue {
    eng: u32,
    qid: u32,
    tx: Chunk,
    rx: Chunk,
    ring: u32,
    count: u32,
}

#[derive(Debug)]
struct NqReader {
    map: Mapped,
    entries: u64,
    index: u64,
}

impl NqReader {
    fn next(&mut self) -> Option<NotificationEntry> {
        let slot = (self.index % self.entries) as usize * ENTRY_SIZE;
        let phase = (self.index / self.entries).is_multiple_of(2);
        let w0 = self.map.load_u32_acquire(slot)?;
        let probe = NotificationEntry {
            word0: w0,
            pc: 0,
            timestamp_ps: 0,
        };
        if w0 == 0 || probe.phase() != phase {
            return None;
        }
        let mut b = [0u8; ENTRY_SIZE];
        if !self.map.read(slot, &mut b) {
            return None;
        }
        let mut e = NotificationEntry::read_from_bytes(&b).ok()?;
        e.word0 = w0;
        self.index += 1;
        Some(e)
    }
}

/// Result of one execution.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOutput {
    /// Output tensors in model order.
    pub outputs: Vec<(TensorInfo, Vec<u8>)>,
    /// Emulated (or real) device time from the first engine passing the start gate to the
    /// last end-of-execution notification, in picoseconds.
    pub device_time_ps: u64,
}

/// One engine's part of one execution, in device time (picoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSpan {
    /// Physical NeuronCore.
    pub nc: u32,
    /// Engine index (`neuron_isa::Engine::from_index`).
    pub engine: usize,
    pub start_ps: u64,
    pub end_ps: u64,
}

/// A model loaded on one NeuronCore.
#[derive(Debug)]
pub struct Model {
    drv: Driver,
    device_index: u32,
    name: String,
    inputs: Vec<(TensorInfo, Chunk)>,
    outputs: Vec<(TensorInfo, Chunk)>,
    chunks: Vec<Chunk>,
    /// One entry per physical core the model runs on (two for LNC=2 NEFFs).
    cores: Vec<CoreRun>,
    timeout: Duration,
    hw_errors: crate::config::HwErrorCodes,
    unrecoverable: bool,
    /// This load's identity in the cores' ownership records ([`owners`]), and those records.
    id: u64,
    owners: Vec<CoreOwner>,
    /// Each engine's span of the last completed execution (device time).
    last_spans: Vec<EngineSpan>,
    /// Bytes the load allocated, per category (charged to the datastore).
    usage: crate::nds::Usage,
    /// The model's record in the process's datastore page, if it has one.
    nds: Option<crate::nds::ModelEntry>,
    /// The datastore counter of the device fault that ended the last execution.
    last_fault: Option<neuron_abi::nds::NcCounter>,
    /// Host time the last two completed executions took from start to end notifications,
    /// the latest first (`poll::expected_wait`).
    last_waits: [Option<Duration>; 2],
    /// A watchdog's way to end an execution's wait early ([`Model::set_wait_cancel`]).
    wait_cancel: Option<std::sync::Arc<crate::waitcancel::WaitCancel>>,
}

/// Which loaded model's programs each physical core is running, by (device, core): the
/// engines run one resident program at a time, so a core shared by several models is
/// reprogrammed at execute when another model ran there last. The lock is also held for
/// the length of an execution, so two models on one core never run at once.
type CoreOwner = std::sync::Arc<std::sync::Mutex<u64>>;

fn owners(dev: &Driver, nc: u32) -> CoreOwner {
    static OWNERS: std::sync::Mutex<BTreeMap<(usize, u32), CoreOwner>> =
        std::sync::Mutex::new(BTreeMap::new());
    let key = (std::sync::Arc::as_ptr(&dev.dev) as *const u8 as usize, nc);
    let mut all = OWNERS.lock().unwrap_or_else(|e| e.into_inner());
    // Loaded models hold their cores' records; one no model holds any more is dropped (its
    // device may be gone and its address reused).
    all.retain(|k, o| *k == key || std::sync::Arc::strong_count(o) > 1);
    all.entry(key).or_default().clone()
}

fn next_model_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What runs one subgraph on one physical core: its engine programs, their fetch rings, its
/// notification queues and its mapped semaphore page.
#[derive(Debug)]
struct CoreRun {
    nc: u32,
    programs: Vec<Vec<u8>>,
    fetch: Vec<Queue>,
    /// The rings of its NEFF's DMA queues (`crate::trigger`), rung by its programs.
    data_queues: Vec<Queue>,
    nqs: Vec<NqReader>,
    err_nq: NqReader,
    /// Its programs stay loaded and loop (AWS's prologue/epilogue): fetched once at load,
    /// started per execution by incrementing `$S[0]`, bounded by NOTIFY hints 2 and 3.
    sem_page: Mapped,
    /// The device address of its DGE table, programmed into the core at load and again when
    /// the core is switched back to this model.
    dge: Option<u64>,
}

fn drv_err(what: &str, e: neuron_abi::Errno) -> NrtError {
    let status = if e == neuron_abi::Errno::ENOMEM {
        NrtStatus::Resource
    } else {
        NrtStatus::Failure
    };
    NrtError::new(status, format!("{what} failed: {e}"))
}

fn neff_err(e: NeffError) -> NrtError {
    match e {
        NeffError::UnsupportedVersion { .. }
        | NeffError::UnknownFeatureBits { .. }
        | NeffError::UnsupportedPackager { .. } => {
            NrtError::new(NrtStatus::UnsupportedNeffVersion, e.to_string())
        }
        other => NrtError::invalid(other.to_string()),
    }
}

struct Loader<'a> {
    drv: &'a Driver,
    nc: u32,
    chunks: Vec<Chunk>,
    usage: crate::nds::Usage,
}

impl Loader<'_> {
    fn alloc(&mut self, size: u64, host: bool, mt: MemType, what: &str) -> Result<Chunk, NrtError> {
        let c = self
            .drv
            .mem_alloc(size.max(1), host, self.nc, mt)
            .map_err(|e| drv_err(&format!("allocating {size} bytes for {what}"), e))?;
        self.usage.add(host, mt, c.size);
        self.chunks.push(c);
        Ok(c)
    }

    /// (base, size) of core `nc`'s SBUF window (`MMAP_RESOURCE_SBUF`).
    fn sbuf(&self, nc: u32) -> Result<(u64, u64), NrtError> {
        self.drv
            .tpb_resource(nc, MMAP_RESOURCE_SBUF)
            .map_err(|e| drv_err("RESOURCE_MMAP_INFO(SBUF)", e))
    }

    /// (base, size) of core `nc`'s semaphore page (`MMAP_RESOURCE_SEMAPHORE`).
    fn sem_page(&self, nc: u32) -> Result<(u64, u64), NrtError> {
        self.drv
            .tpb_resource(nc, MMAP_RESOURCE_SEMAPHORE)
            .map_err(|e| drv_err("RESOURCE_MMAP_INFO(SEMAPHORE)", e))
    }

    fn free_all(&mut self) {
        for c in self.chunks.drain(..) {
            let _ = self.drv.mem_free(c.handle);
        }
    }
}

/// Parse options for a load.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub validate_hash: bool,
    pub exec_timeout: Duration,
    pub device_index: u32,
    pub hw_errors: crate::config::HwErrorCodes,
    /// The device's architecture: a NEFF built for another one is refused at load.
    pub arch: neuron_abi::arch::Arch,
}

/// A NEFF to load: its bytes, parsed by the load, or parsed already by the caller (who then
/// chose the parse options).
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    Bytes(&'a [u8]),
    Parsed(&'a Neff),
}

pub(crate) fn load(
    drv: &Driver,
    src: Source<'_>,
    nc: u32,
    opts: LoadOptions,
) -> Result<Model, NrtError> {
    let mut l = Loader {
        drv,
        nc,
        chunks: Vec::new(),
        usage: crate::nds::Usage::default(),
    };
    match load_inner(&mut l, src, opts) {
        Ok(m) => Ok(m),
        Err(e) => {
            l.free_all();
            Err(e)
        }
    }
}

/// Parse a NEFF being loaded, logging a version or feature refusal as libnrt does.
fn parse_for_load(neff_bytes: &[u8], popts: &ParseOptions) -> Result<Neff, NrtError> {
    Neff::parse_with(neff_bytes, popts).map_err(|e| {
        let h = NeffHeaderSummary::of(neff_bytes);
        if matches!(e, NeffError::UnsupportedVersion { .. } | NeffError::UnknownFeatureBits { .. }) {
            tracing::error!(
                target: "NEFF",
                "neff_parse NEFF version: {}.{}, features: 0x{:x} are not supported. Currently supporting: 0x{:x}",
                h.major,
                h.minor,
                h.features,
                neuron_neff::KNOWN_FEATURE_BITS
            );
        }
        neff_err(e)
    })
}

fn load_inner(l: &mut Loader<'_>, src: Source<'_>, opts: LoadOptions) -> Result<Model, NrtError> {
    let nc = l.nc;
    // Start from a clean core: a fault or timeout of an earlier model leaves engines stopped
    // mid-program (a reset also destroys the core's notification queues, re-created below).
    l.drv
        .nc_reset(1 << nc)
        .map_err(|e| drv_err("NC_RESET", e))?;
    let popts = ParseOptions {
        validate_hash: opts.validate_hash,
        ..ParseOptions::default()
    };
    let parsed;
    let neff = match src {
        Source::Parsed(n) => n,
        Source::Bytes(neff_bytes) => {
            parsed = parse_for_load(neff_bytes, &popts)?;
            &parsed
        }
    };
    let name = neff.header().name_str();
    let kelf = neff.shared_kelf().map_err(neff_err)?;
    let graph = kelf
        .graphs
        .first()
        .ok_or_else(|| NrtError::invalid("kelf lists no subgraphs"))?;
    check_target(&kelf, opts.arch, l.nc)?;
    let sg = graph.dir().to_string();
    let def = neff
        .shared_subgraph_def(&graph.definition)
        .map_err(neff_err)?;
    let tmap = neff.shared_tensor_map(&sg).ok();

    if neff.header().feature_bits & neuron_neff::FEATURE_EMU_TEST_ISA != 0 {
        // The project's kernels have been built in the trn2 encoding since 2026-11-30; a NEFF
        // marked with the project's test-encoding bit predates that (real libnrt refuses it
        // for the unknown feature bit).
        return Err(NrtError::invalid(
            "NEFF is marked with the project test-encoding feature bit (1 << 62): this runtime loads trn2-encoded NEFFs only; rebuild it with the current kbuild",
        ));
    }
    load_real(l, neff, &kelf, &def, tmap.as_deref(), &sg, name, opts)
}

/// Refuse, before anything is placed, a NEFF compiled for another architecture
/// (`kelf-0.json` `"target"`: `cayman` is trn2, `sunda` trn1/inf2; NRT_INVALID, as libnrt
/// fails such a load) or one whose subgraphs need more NeuronCores from `nc` on than the device
/// has (one core per subgraph; NRT_LOAD_NOT_ENOUGH_NC). An older-arch NEFF on a newer device is
/// left to load (libnrt allows that with NEURON_RT_ALLOW_LEGACY_NEFF), as is an unnamed target.
fn check_target(
    kelf: &neuron_neff::Kelf,
    arch: neuron_abi::arch::Arch,
    nc: u32,
) -> Result<(), NrtError> {
    use neuron_abi::arch::Arch;
    let built_for = match kelf.target.as_str() {
        "cayman" => Some("trn2"),
        "sunda" => Some("trn1/inf2"),
        _ => None,
    };
    if kelf.target == "cayman" && arch != Arch::V3Trn2 {
        let msg = format!(
            "NEFF was compiled for {} (kelf target '{}'), this device is {arch}: refused",
            built_for.unwrap_or("?"),
            kelf.target
        );
        tracing::error!(target: "NRT", "nrt_load {msg}");
        return Err(NrtError::invalid(msg));
    }
    let cores = u32::try_from(kelf.graphs.len()).unwrap_or(u32::MAX);
    let have = arch.nc_count();
    if nc.checked_add(cores).is_none_or(|end| end > have) {
        let msg = format!(
            "the NEFF has {cores} subgraphs and needs NeuronCores {nc}..{} ({cores} cores from NC {nc}); the device has NCs 0..{}",
            nc.saturating_add(cores).saturating_sub(1),
            have.saturating_sub(1)
        );
        tracing::error!(target: "NRT", "nrt_load {msg}");
        return Err(NrtError::new(NrtStatus::LoadNotEnoughNc, msg));
    }
    Ok(())
}

type Tensors = Vec<(TensorInfo, Chunk)>;

/// The model's input and output tensors: names and dtypes from neff.json and the tensor map,
/// sizes from def.json, storage from the placed vars.
fn tensor_infos(
    neff: &Neff,
    def: &neuron_neff::SubgraphDef,
    tmap: Option<&neuron_neff::TensorMap>,
    sg: &str,
    var_chunks: &BTreeMap<String, Chunk>,
) -> Result<(Tensors, Tensors), NrtError> {
    let dtype_of = |n: &str, fallback: &str| -> Result<Dtype, NrtError> {
        Dtype::from_name(n)
            .or_else(|| Dtype::from_name(fallback))
            .ok_or_else(|| NrtError::invalid(format!("unknown dtype '{n}'")))
    };
    let mut inputs = Vec::new();
    for (iname, dt, shape) in neff.neff_json().map_err(neff_err)?.inputs() {
        let c = *var_chunks.get(&iname).ok_or_else(|| {
            NrtError::invalid(format!("input '{iname}' has no var in {sg}/def.json"))
        })?;
        let size = def.var.get(&iname).and_then(|v| v.size).unwrap_or(c.size);
        inputs.push((
            TensorInfo {
                name: iname,
                dtype: dtype_of(&dt, "")?,
                shape,
                size,
            },
            c,
        ));
    }
    let mut outputs = Vec::new();
    for (oname, v) in def.vars_of_type(&VarType::Output) {
        let c = *var_chunks
            .get(oname)
            .ok_or_else(|| NrtError::invalid(format!("output '{oname}' was not placed")))?;
        let tm = tmap.and_then(|t| t.get(oname));
        let dt = tm.map(|t| t.dtype.as_str()).unwrap_or("uint8");
        let shape = tm
            .and_then(|t| t.sim_shape.clone().or(t.tf_shape.clone()))
            .unwrap_or_else(|| vec![v.size.unwrap_or(0)]);
        outputs.push((
            TensorInfo {
                name: oname.to_string(),
                dtype: dtype_of(dt, "uint8")?,
                shape,
                size: v.size.unwrap_or(c.size),
            },
            c,
        ));
    }

    Ok((inputs, outputs))
}

/// Stage one core: each engine's program in device memory with its instruction-fetch ring, the
/// engines' NOTIFY queues and the core's ERROR queue (mapped), and the semaphore page (mapped).
fn stage_core(l: &mut Loader<'_>, nc: u32, programs: Vec<Vec<u8>>) -> Result<CoreRun, NrtError> {
    let (sb_base, _) = l.sbuf(nc)?;
    let (sem_base, sem_size) = l.sem_page(nc)?;
    let mut fetch = Vec::new();
    for (e, prog) in programs.iter().enumerate() {
        let code = l.alloc(
            prog.len() as u64,
            false,
            MemType::CODE_DEVICE,
            "instructions",
        )?;
        l.drv
            .copy_to(&code, 0, prog)
            .map_err(|e| drv_err("MEM_BUF_COPY64 (instructions)", e))?;
        let port = sb_base + tpb::INSTR_PORT + e as u64 * tpb::INSTR_PORT_STRIDE;
        let mut txd = Vec::new();
        let mut rxd = Vec::new();
        for (i, piece) in prog.chunks(65536).enumerate() {
            let n = piece.len() as u32;
            txd.push(
                UdmaDesc::tx(code.pa + i as u64 * 65536, n, DESC_FIRST | DESC_LAST)
                    .with_meta_ctrl(META_CTRL_COPY)
                    .with_ring_id(1),
            );
            rxd.push(UdmaDesc::rx(port, n, 0).with_ring_id(1));
        }
        fetch.push(make_queue(
            l,
            nc * 16 + FETCH_DMA_ENGINE_BASE + e as u32,
            &txd,
            &rxd,
            "instruction fetch",
        )?);
    }
    let (nqs, err_nq) = make_nqs(l.drv, nc, &programs)?;
    let sem_page = Mapped::new(l.drv.dev.clone(), sem_size as usize, sem_base)
        .map_err(|er| drv_err("mmap(semaphore page)", er))?;
    Ok(CoreRun {
        nc,
        programs,
        fetch,
        data_queues: Vec::new(),
        nqs,
        err_nq,
        sem_page,
        dge: None,
    })
}

/// Create (and map) core `nc`'s five NOTIFY queues, sized for `programs`, and its ERROR queue.
/// Called at load and again when the core is reprogrammed for this model (a reset destroys
/// the queues).
fn make_nqs(
    drv: &Driver,
    nc: u32,
    programs: &[Vec<u8>],
) -> Result<(Vec<NqReader>, NqReader), NrtError> {
    let dev = drv.dev.clone();
    let mut nqs = Vec::new();
    for e in 0..5u32 {
        // Room for the start marker, the END and every explicit NOTIFY of one execution, twice
        // over so the poller may lag a whole execution without being lapped.
        let posts = programs.get(e as usize).map_or(0, |p| {
            p.chunks_exact(WORD)
                .filter(|w| w[0] == crate::prologue::NOTIFY_OPCODE)
                .count()
        });
        let bytes = (((posts + 1) * 2 * ENTRY_SIZE).next_power_of_two() as u32).max(NQ_BYTES);
        let (off, _) = drv
            .nq_init(nc, NQ_TYPE_NOTIFY, e, bytes)
            .map_err(|er| drv_err("NOTIFICATIONS_INIT_V2", er))?;
        let map = Mapped::read_only(dev.clone(), bytes as usize, off)
            .map_err(|er| drv_err("mmap(notification queue)", er))?;
        nqs.push(NqReader {
            map,
            entries: (bytes as usize / ENTRY_SIZE) as u64,
            index: 0,
        });
    }
    let (off, _) = drv
        .nq_init(nc, NQ_TYPE_ERROR, 0, NQ_BYTES)
        .map_err(|er| drv_err("NOTIFICATIONS_INIT_V2", er))?;
    let err_nq = NqReader {
        map: Mapped::read_only(dev, NQ_BYTES as usize, off)
            .map_err(|er| drv_err("mmap(error queue)", er))?,
        entries: (NQ_BYTES as usize / ENTRY_SIZE) as u64,
        index: 0,
    };
    Ok((nqs, err_nq))
}

fn make_queue(
    l: &mut Loader<'_>,
    eng: u32,
    txd: &[UdmaDesc],
    rxd: &[UdmaDesc],
    what: &str,
) -> Result<Queue, NrtError> {
    let count = txd.len() as u32;
    let ring = count.div_ceil(16).max(2) * 16;
    let tx = l.alloc(ring as u64 * 16, true, MemType::DMA_RINGS_HOST, what)?;
    let rx = l.alloc(ring as u64 * 16, true, MemType::DMA_RINGS_HOST, what)?;
    l.drv
        .copy_descriptors(&tx, txd, QUEUE_TYPE_TX)
        .map_err(|e| drv_err("DMA_COPY_DESCRIPTORS64 (tx)", e))?;
    l.drv
        .copy_descriptors(&rx, rxd, QUEUE_TYPE_RX)
        .map_err(|e| drv_err("DMA_COPY_DESCRIPTORS64 (rx)", e))?;
    l.drv
        .queue_init(eng, 0, &tx, &rx, ring)
        .map_err(|e| drv_err("DMA_QUEUE_INIT", e))?;
    Ok(Queue {
        eng,
        qid: 0,
        tx,
        rx,
        ring,
        count,
    })
}

struct NeffHeaderSummary {
    major: u64,
    minor: u64,
    features: u64,
}

impl NeffHeaderSummary {
    fn of(b: &[u8]) -> Self {
        let rd = |o: usize| {
            b.get(o..o + 8)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
                .unwrap_or(0)
        };
        NeffHeaderSummary {
            major: rd(24),
            minor: rd(32),
            features: rd(544),
        }
    }
}

impl Model {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The model's first NeuronCore (subgraph *i* runs on `nc() + i`).
    pub fn nc(&self) -> u32 {
        self.cores.first().map_or(0, |c| c.nc)
    }
    pub fn inputs(&self) -> impl Iterator<Item = &TensorInfo> {
        self.inputs.iter().map(|(t, _)| t)
    }
    pub fn outputs(&self) -> impl Iterator<Item = &TensorInfo> {
        self.outputs.iter().map(|(t, _)| t)
    }
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Let `token`'s holder end an execution's wait for its completion early, as at its
    /// timeout (`crate::waitcancel`): a watchdog that knows the device can make no more
    /// progress.
    pub fn set_wait_cancel(&mut self, token: std::sync::Arc<crate::waitcancel::WaitCancel>) {
        self.wait_cancel = Some(token);
    }

    /// The loaded model, owning the loader's chunks.
    fn assemble(
        l: &mut Loader<'_>,
        opts: &LoadOptions,
        name: String,
        (inputs, outputs): (Tensors, Tensors),
        cores: Vec<CoreRun>,
    ) -> Model {
        Model {
            drv: l.drv.clone(),
            device_index: opts.device_index,
            name,
            inputs,
            outputs,
            chunks: std::mem::take(&mut l.chunks),
            cores,
            timeout: opts.exec_timeout,
            hw_errors: opts.hw_errors,
            unrecoverable: false,
            last_waits: [None; 2],
            wait_cancel: None,
            id: next_model_id(),
            owners: Vec::new(),
            last_spans: Vec::new(),
            usage: l.usage,
            nds: None,
            last_fault: None,
        }
    }

    /// Each engine's span of the last completed execution (its start and end notifications,
    /// device time), for profiles and system traces.
    pub fn last_spans(&self) -> &[EngineSpan] {
        &self.last_spans
    }

    /// The ownership records of this model's cores.
    fn core_owners(&self) -> Vec<CoreOwner> {
        self.owners.clone()
    }

    /// Reset this model's cores and give them its programs again, as at load (notification
    /// queues, DGE table, fetch, load-time part): a later load on the same core replaced them.
    fn reprogram(&mut self) -> Result<(), NrtError> {
        tracing::debug!(target: "NRT", "nrt_execute switching NC {} to model '{}'", self.nc(), self.name);
        for c in &mut self.cores {
            self.drv
                .nc_reset(1 << c.nc)
                .map_err(|e| drv_err("NC_RESET", e))?;
            let (nqs, err_nq) = make_nqs(&self.drv, c.nc, &c.programs)?;
            c.nqs = nqs;
            c.err_nq = err_nq;
            if let Some(table) = c.dge {
                let (sb_base, _) = self
                    .drv
                    .tpb_resource(c.nc, MMAP_RESOURCE_SBUF)
                    .map_err(|e| drv_err("RESOURCE_MMAP_INFO(SBUF)", e))?;
                self.drv
                    .program_engine(c.nc, sb_base + tpb::DGE_TABLE, &table.to_le_bytes())
                    .map_err(|e| drv_err("PROGRAM_ENGINE_NC64 (DGE table)", e))?;
            }
        }
        start_resident(&self.drv, &mut self.cores, self.timeout)
    }

    /// The opcode byte of word `pc` of `engine`'s loaded program on core index `ci`.
    fn opcode_at(&self, ci: usize, engine: usize, pc: u32) -> Option<u8> {
        self.cores
            .get(ci)?
            .programs
            .get(engine)?
            .get(pc as usize * WORD)
            .copied()
    }

    /// Run the model once. Every model input must be given, with exactly its size.
    pub fn execute(&mut self, inputs: &[(&str, &[u8])]) -> Result<ExecOutput, NrtError> {
        match self.execute_completed(inputs)? {
            (_, Some(e)) => Err(e),
            (out, None) => Ok(out),
        }
    }

    /// Run once; an execution that completed with a numerical error (a NaN,
    /// `NRT_EXEC_COMPLETED_WITH_NUM_ERR`) still has its outputs, returned with that error, as
    /// `nrt_execute` writes the output tensors and returns 1003.
    pub fn execute_completed(
        &mut self,
        inputs: &[(&str, &[u8])],
    ) -> Result<(ExecOutput, Option<NrtError>), NrtError> {
        self.counted(Some(inputs))
    }

    /// Run once on the inputs already in device memory ([`Model::write_input`]), leaving the
    /// outputs there ([`Model::read_output`]): `ExecOutput::outputs` is empty. A large model
    /// then needs no full-size host copy of its tensors. A numerical error comes back as in
    /// [`Model::execute_completed`].
    pub fn execute_staged(&mut self) -> Result<(ExecOutput, Option<NrtError>), NrtError> {
        self.counted(None)
    }

    /// Copy `data` into input `name` at byte `offset` of its device memory; an input can be
    /// staged in blocks this way before [`Model::execute_staged`].
    pub fn write_input(&self, name: &str, offset: u64, data: &[u8]) -> Result<(), NrtError> {
        let c = self.io_chunk(&self.inputs, "input", name, offset, data.len())?;
        self.drv
            .copy_to(c, offset, data)
            .map_err(|e| drv_err("MEM_BUF_COPY64 (input)", e))
    }

    /// Copy bytes of output `name` from byte `offset` of its device memory into `buf` (after
    /// an execution: the last one's output).
    pub fn read_output(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<(), NrtError> {
        let c = self.io_chunk(&self.outputs, "output", name, offset, buf.len())?;
        self.drv
            .copy_from(c, offset, buf)
            .map_err(|e| drv_err("MEM_BUF_COPY64 (output)", e))
    }

    /// The chunk of tensor `name` in `set`, if `len` bytes at `offset` lie inside the tensor.
    fn io_chunk<'a>(
        &self,
        set: &'a [(TensorInfo, Chunk)],
        what: &str,
        name: &str,
        offset: u64,
        len: usize,
    ) -> Result<&'a Chunk, NrtError> {
        let (t, c) = set
            .iter()
            .find(|(t, _)| t.name == name)
            .ok_or_else(|| self.bad_input(format!("unknown {what} tensor '{name}'")))?;
        if offset.checked_add(len as u64).is_none_or(|e| e > t.size) {
            return Err(self.bad_input(format!(
                "{what} tensor '{name}': {len} bytes at {offset} exceed its {} bytes",
                t.size
            )));
        }
        Ok(c)
    }

    /// One execution, counted in the datastore when the model is listed there. `inputs`:
    /// copied in first and the outputs read back, or `None` for staged tensors.
    fn counted(
        &mut self,
        inputs: Option<&[(&str, &[u8])]>,
    ) -> Result<(ExecOutput, Option<NrtError>), NrtError> {
        let Some(entry) = self.nds.take() else {
            return self.run_once(inputs);
        };
        // Count the execution in the datastore (`crate::nds`): outcome, class, latency.
        entry.begin();
        self.last_fault = None;
        let t0 = Instant::now();
        let r = self.run_once(inputs);
        let (status, device_ps) = match &r {
            Ok((out, num)) => (
                num.as_ref().map_or(NrtStatus::Success, |e| e.status),
                Some(out.device_time_ps),
            ),
            Err(e) => (e.status, None),
        };
        entry.end(status, self.last_fault.take(), t0.elapsed(), device_ps);
        self.nds = Some(entry);
        r
    }

    /// Bytes the load allocated, per category.
    pub fn usage(&self) -> crate::nds::Usage {
        self.usage
    }

    /// How many NeuronCores the model runs on.
    pub fn nc_count(&self) -> u32 {
        self.cores.len() as u32
    }

    /// List the model in the process's datastore (done by `Runtime::load`).
    pub fn attach_datastore(&mut self, entry: crate::nds::ModelEntry) {
        self.nds = Some(entry);
    }

    /// The model's datastore id (10001, ...), if it is listed.
    pub fn datastore_id(&self) -> Option<u32> {
        self.nds.as_ref().map(|e| e.id())
    }

    fn run_once(
        &mut self,
        inputs: Option<&[(&str, &[u8])]>,
    ) -> Result<(ExecOutput, Option<NrtError>), NrtError> {
        // Hold every core of the model for the execution; switch the engines back to this
        // model's programs if another model ran on one of them last.
        let owner_records = self.core_owners();
        let mut held: Vec<_> = owner_records
            .iter()
            .map(|o| o.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        if !self.unrecoverable && held.iter().any(|g| **g != self.id) {
            self.reprogram()?;
            for g in &mut held {
                **g = self.id;
            }
        }
        if self.unrecoverable {
            return Err(NrtError::new(NrtStatus::ExecUnitUnrecoverable, format!("NC {} is in an undefined state after a failed execution; reset it by reloading", self.nc())));
        }
        let staged = inputs.is_none();
        let inputs = inputs.unwrap_or_default();
        for (n, _) in inputs {
            if !self.inputs.iter().any(|(t, _)| t.name == *n) {
                return Err(self.bad_input(format!("unknown input tensor '{n}'")));
            }
        }
        for (t, c) in self.inputs.iter().filter(|_| !staged) {
            let mut given = inputs.iter().filter(|(n, _)| *n == t.name);
            let data = given
                .next()
                .ok_or_else(|| self.bad_input(format!("missing input tensor '{}'", t.name)))?
                .1;
            if given.next().is_some() {
                return Err(self.bad_input(format!("input tensor '{}' given twice", t.name)));
            }
            if data.len() as u64 != t.size {
                return Err(self.bad_input(format!(
                    "input tensor '{}' is {} bytes, the model expects {}",
                    t.name,
                    data.len(),
                    t.size
                )));
            }
            self.drv
                .copy_to(c, 0, data)
                .map_err(|e| drv_err("MEM_BUF_COPY64 (input)", e))?;
        }
        // Clear the semaphores a previous run left set. Values are read through the mapped
        // register page (plain loads), so only the non-zero ones cost an ioctl.
        for c in &self.cores {
            for sem in 0..256u32 {
                let v = c.sem_page.load_u32_acquire(0x1000 + 4 * sem as usize);
                if v != Some(0) {
                    self.drv
                        .sem_write(c.nc, sem, 0)
                        .map_err(|e| drv_err("SEMAPHORE_WRITE", e))?;
                }
            }
        }
        // Open every core's start gate through its mapped register page: `$S[0]`, which the
        // loop head of each resident program waits on.
        for c in &self.cores {
            if !c.sem_page.store_u32(0x1800, 1) {
                return Err(NrtError::new(
                    NrtStatus::Failure,
                    "semaphore page mapping too small",
                ));
            }
        }
        // The device applies stores to mapped pages at its quiescent points, first of all on
        // entry to the next ioctl (`emulator` crate, `worker`). Ring it with an increment of 0,
        // which changes no semaphore: every core's start store is applied at that one point, so
        // all cores start at the same device time whatever the host threads do.
        if let Some(c) = self.cores.first() {
            self.drv
                .sem_increment(c.nc, 0, 0)
                .map_err(|e| drv_err("SEMAPHORE_INCREMENT", e))?;
        }
        let started = Instant::now();
        let deadline = started + self.timeout;
        let expected = crate::poll::expected_wait(self.last_waits);
        // An execution that fails leaves nothing to expect of the next one.
        let waits = std::mem::take(&mut self.last_waits);
        let n = self.cores.len();
        let mut start = vec![[None::<u64>; 5]; n];
        let mut end = vec![[None::<u64>; 5]; n];
        let mut spins = 0u32;
        let mut numerical: Option<NrtError> = None;
        let token = self.wait_cancel.clone();
        let waiting = token.as_deref().map(|t| t.begin());
        loop {
            // A watchdog asks only once the device is quiet, after everything it posted: read
            // before the queues, a request means nothing more is coming.
            let give_up = waiting.as_ref().is_some_and(|w| w.cancelled());
            let mut progressed = false;
            for ci in 0..n {
                for e in 0..5 {
                    while let Some(entry) = self.cores[ci].nqs[e].next() {
                        progressed = true;
                        let (k, v) = (entry.kind(), entry.value());
                        let is_start = k == NotifyKind::Notify && v == crate::prologue::HINT_START;
                        let is_end = k == NotifyKind::Notify && v == crate::prologue::HINT_END;
                        if is_start {
                            start[ci][e] = Some(entry.timestamp_ps)
                        } else if is_end {
                            end[ci][e] = Some(entry.timestamp_ps)
                        }
                    }
                }
                if let Some(err) = self.cores[ci].err_nq.next() {
                    // A NaN is reported and the execution runs on to its end
                    // (NRT_EXEC_COMPLETED_WITH_NUM_ERR); every other error stops it and
                    // leaves the core in an undefined state.
                    if err.value() == ERR_NUMERICAL {
                        if numerical.is_none() {
                            numerical = Some(self.device_error(ci, &err));
                        }
                        progressed = true;
                        continue;
                    }
                    self.unrecoverable = true;
                    self.last_fault = crate::nds::fault_counter(err.value());
                    return Err(self.device_error(ci, &err));
                }
            }
            if end.iter().all(|c| c.iter().all(Option::is_some)) {
                break;
            }
            let now = Instant::now();
            if now >= deadline || give_up {
                self.unrecoverable = true;
                return Err(self.timed_out(&end));
            }
            crate::poll::pace(
                &mut spins,
                progressed,
                now - started,
                expected,
                deadline - now,
            );
        }
        self.last_waits = [Some(started.elapsed()), waits[0]];
        let mut spans = Vec::new();
        for (ci, c) in self.cores.iter().enumerate() {
            for e in 0..5 {
                if let (Some(s), Some(t)) = (start[ci][e], end[ci][e]) {
                    spans.push(EngineSpan {
                        nc: c.nc,
                        engine: e,
                        start_ps: s,
                        end_ps: t,
                    });
                }
            }
        }
        self.last_spans = spans;
        let start: Vec<Option<u64>> = start.iter().flatten().copied().collect();
        let end: Vec<Option<u64>> = end.iter().flatten().copied().collect();
        let t0 = start.iter().flatten().min().copied().unwrap_or(0);
        let t1 = end.iter().flatten().max().copied().unwrap_or(t0);
        let mut outs = Vec::new();
        for (t, c) in self.outputs.iter().filter(|_| !staged) {
            let mut buf = Vec::new();
            buf.try_reserve_exact(t.size as usize).map_err(|_| {
                NrtError::new(
                    NrtStatus::Resource,
                    format!("no host memory for output '{}' ({} bytes)", t.name, t.size),
                )
            })?;
            buf.resize(t.size as usize, 0);
            self.drv
                .copy_from(c, 0, &mut buf)
                .map_err(|e| drv_err("MEM_BUF_COPY64 (output)", e))?;
            outs.push((t.clone(), buf));
        }
        Ok((
            ExecOutput {
                outputs: outs,
                device_time_ps: t1.saturating_sub(t0),
            },
            numerical,
        ))
    }

    fn bad_input(&self, msg: String) -> NrtError {
        tracing::error!(target: "NRT", "nrt_execute {msg}");
        NrtError::invalid(msg).logged()
    }

    fn timed_out(&self, end: &[[Option<u64>; 5]]) -> NrtError {
        for (ci, core) in end.iter().enumerate() {
            for (e, t) in core.iter().enumerate() {
                if t.is_none() {
                    let nc = self.cores.get(ci).map_or(self.nc(), |c| c.nc);
                    tracing::error!(target: "TDRV", "exec_consume_tpb_status_notifications Missing infer_status notification: nc {nc} (end:{e})");
                }
            }
        }
        let ms = self.timeout.as_millis();
        let msg = format!(
            "(FATAL-RT-UNDEFINED-STATE) execution timeout ({ms} ms) on Neuron Device {} NC {}, model {}, waiting for execution completion notification",
            self.device_index, self.nc(), self.name
        );
        tracing::error!(target: "TDRV", "exec_consume_infer_status_notifications {msg}");
        tracing::error!(target: "NMGR", "dlr_infer Inference completed with err: {}", NrtStatus::Timeout.code());
        NrtError::new(NrtStatus::Timeout, msg).logged()
    }

    fn device_error(&self, ci: usize, n: &NotificationEntry) -> NrtError {
        let nc = self.cores.get(ci).map_or(self.nc(), |c| c.nc);
        let engine = Engine::from_index(n.engine() as usize);
        let code = n.value();
        let nd = self.device_index;
        let (status, what) = match code {
            ERR_OOB => (NrtStatus::ExecOob, "out-of-bounds access"),
            ERR_BAD_INSTR => (NrtStatus::Invalid, "invalid instruction"),
            ERR_DMA_ABORT => (NrtStatus::ExecHwErrDmaAbort, "DMA abort"),
            ERR_NUMERICAL => (NrtStatus::ExecCompletedWithNumErr, "numerical error (NaN)"),
            ERR_SRAM_UE => (NrtStatus::ExecHwErrNcUe, "uncorrectable SRAM error"),
            ERR_HBM_UE => (NrtStatus::ExecHwErrHbmUe, "uncorrectable HBM error"),
            ERR_HBM_UE_REPAIRABLE => (
                NrtStatus::ExecHwErrRepairableHbmUe,
                "uncorrectable HBM error (repairable)",
            ),
            // A GpSimd exception stops the engine: the real runtime reports the timeout that
            // follows (`users-faults-and-tools.md` §2.2); the device told us at once.
            ERR_GPSIMD_EXCEPTION => (NrtStatus::Timeout, "GpSimd exception"),
            _ => (NrtStatus::ExecCompletedWithErr, "hardware error"),
        };
        let where_ = match engine {
            Some(e) => {
                let op = self
                    .opcode_at(ci, e.index(), n.pc())
                    .map(|o| {
                        let name = neuron_isa::cayman::Opcode::from_byte(
                            neuron_isa::cayman::Namespace::Loaded,
                            o,
                        );
                        if (0xE0..=0xE9).contains(&o) || !name.is_known() {
                            format!("0x{o:02x}")
                        } else {
                            format!("0x{o:02x} ({})", name.name())
                        }
                    })
                    .unwrap_or_else(|| "?".into());
                format!("engine {e} pc {} opcode {op}", n.pc())
            }
            None => format!("DMA descriptor {}", n.pc()),
        };
        let msg = format!(
            "nd{nd}:nc{nc}: {what} ({where_}), error code {code}, model {}",
            self.name
        );
        tracing::error!(target: "TDRV", "exec_consume_error_notifications {msg}");
        // The user-facing lines real hardware errors produce, and the kernel-log line the
        // runtime writes through the driver (`users-faults-and-tools.md` §2.2, §2.3).
        let hw = match code {
            ERR_SRAM_UE => Some((
                format!("(FATAL-RT-UNDEFINED-STATE) [ND {nd}][NC {nc}] Uncorrectable memory error is detected, metadata: 0x16. Please terminate or stop/start this instance to prevent future impact from the hardware error."),
                "SRAM_UNCORRECTABLE_ERROR",
                "TERMINATE_INSTANCE",
            )),
            ERR_HBM_UE => Some((
                "(FATAL-RT-UNDEFINED-STATE) Uncorrectable HBM memory error is detected. Execution results may be invalid. Please terminate this instance to prevent future impact from the hardware error.".to_string(),
                "HBM_UNCORRECTABLE_ERROR",
                "TERMINATE_INSTANCE",
            )),
            ERR_HBM_UE_REPAIRABLE => Some((
                "(FATAL-RT-UNDEFINED-STATE) Uncorrectable HBM memory error is detected. Execution results may be invalid. Please reload the neuron driver or reboot your EC2 instance to prevent future impact from the hardware error.".to_string(),
                // The repairable kind's name is not public (inferred: the unrepairable one's).
                "HBM_UNCORRECTABLE_ERROR",
                "RELOAD_DRIVER",
            )),
            ERR_DMA_ABORT => Some((
                format!("[MLA {nd}][NC {nc}] DMA TX engine 0 is in an abort state"),
                "DMA_ERROR",
                "RESET_DEVICE",
            )),
            _ => None,
        };
        // A runtime before the 2.23 split reports these as a timeout (an SRAM error as a
        // completion with error).
        let status = match (self.hw_errors, status) {
            (crate::config::HwErrorCodes::Timeout, NrtStatus::ExecHwErrNcUe) => {
                NrtStatus::ExecCompletedWithErr
            }
            (
                crate::config::HwErrorCodes::Timeout,
                NrtStatus::ExecHwErrHbmUe
                | NrtStatus::ExecHwErrDmaAbort
                | NrtStatus::ExecHwErrRepairableHbmUe,
            ) => NrtStatus::Timeout,
            (_, s) => s,
        };
        let mut err_msg = msg;
        if code == ERR_GPSIMD_EXCEPTION {
            for line in crate::firmware::gpsimd_exception_lines(n.pc()) {
                tracing::error!(target: "TDRV", "{line}");
            }
            if let Some(u) = &self.drv.ucode {
                let d = u.describe();
                tracing::error!(target: "NRT", "the device does not run the staged {d}");
                err_msg = format!("{err_msg}; the device does not run the staged {d}");
            }
        }
        if let Some((line, kind, action)) = hw {
            tracing::error!(target: "NRT", "{line}");
            let k = hw_err_line(kind, nd, nc, action);
            if let Err(e) = self.drv.printk(&k) {
                tracing::warn!(target: "NRT", "could not write the kernel log line ({e}): {k}");
            }
            err_msg = format!("{err_msg}; {line}");
        }
        NrtError::new(status, err_msg).logged()
    }
}

/// The `NEURON_HW_ERR=` kernel-log line (`users-faults-and-tools.md` §2.3).
fn hw_err_line(kind: &str, nd: u32, nc: u32, action: &str) -> String {
    let instance = std::env::var("NEURON_EMU_INSTANCE_ID")
        .ok()
        .filter(|s| !s.is_empty() && s.len() < 64)
        .unwrap_or_else(|| "i-00000000000000000".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("NEURON_HW_ERR={kind} instance-id={instance} hostname={host} nd-id={nd} nc-id={nc} serial-num={:016x} action={action}", 0x19fc_da00_0000_0000u64 | u64::from(nd))
}

impl Drop for Model {
    fn drop(&mut self) {
        for c in self.chunks.drain(..) {
            let _ = self.drv.mem_free(c.handle);
        }
        // The cores' mappings, end to end as the kernel placed them, go in one munmap.
        let mut maps: Vec<&mut Mapped> = Vec::new();
        for c in &mut self.cores {
            maps.extend(c.nqs.iter_mut().map(|q| &mut q.map));
            maps.push(&mut c.err_nq.map);
            maps.push(&mut c.sem_page);
        }
        crate::mapped::unmap_together(&mut maps);
    }
}

/// Place a real NEFF's variables for every subgraph (subgraph `i` on core `nc + i`; inputs and
/// outputs shared by name, constants and scratch per subgraph) and build the loaded programs.
fn real_image(
    l: &mut Loader<'_>,
    neff: &Neff,
    kelf: &neuron_neff::Kelf,
) -> Result<RealImage, NrtError> {
    let mut graphs = Vec::new();
    for g in &kelf.graphs {
        graphs.push((
            g.dir().to_string(),
            neff.shared_subgraph_def(&g.definition).map_err(neff_err)?,
        ));
    }
    // Inputs and outputs are shared by the subgraphs of one model (one buffer per name).
    let mut shared: BTreeMap<String, Chunk> = BTreeMap::new();
    let mut bases = Vec::new();
    let mut dge = Vec::new();
    let mut tpbs = Vec::new();
    // Each core's control block (host-visible, zero: no program switch, no table setup).
    let control = l.alloc(
        crate::prologue::CONTROL_BYTES * graphs.len().max(1) as u64,
        true,
        MemType::MISC_HOST,
        "runtime control words",
    )?;
    for (gi, (sg, def)) in graphs.iter().enumerate() {
        let core = l.nc + gi as u32;
        let (sb_base, _) = l.drv.tpb_resource(core, MMAP_RESOURCE_SBUF).map_err(|e| {
            NrtError::new(
                NrtStatus::LoadNotEnoughNc,
                format!("subgraph {sg} needs NeuronCore {core}: RESOURCE_MMAP_INFO failed: {e}"),
            )
        })?;
        tpbs.push(sb_base);
        let mut b: BTreeMap<u8, u64> = BTreeMap::new();
        let mut tables = Vec::new();
        for (vname, v) in &def.var {
            let Some(id) = v.var_id.and_then(|i| u8::try_from(i).ok()) else {
                continue;
            };
            let size = || {
                v.size.ok_or_else(|| {
                    NrtError::invalid(format!("{sg}/def.json var '{vname}' has no size"))
                })
            };
            let addr = match &v.ty {
                VarType::StateBuffer => sb_base,
                VarType::Input | VarType::Output => match shared.get(vname) {
                    Some(c) => c.pa,
                    None => {
                        let c = l.alloc(size()?, false, MemType::TENSORS_DEVICE, vname)?;
                        shared.insert(vname.clone(), c);
                        c.pa
                    }
                },
                VarType::File | VarType::Virtual | VarType::TmpBuf => {
                    let mt = if v.ty == VarType::File {
                        MemType::CONSTANTS_DEVICE
                    } else {
                        MemType::SCRATCHPAD_DEVICE
                    };
                    let c = l.alloc(size()?, false, mt, vname)?;
                    if v.ty == VarType::File {
                        let file = v.file_name.as_deref().ok_or_else(|| {
                            NrtError::invalid(format!("file var '{vname}' names no file"))
                        })?;
                        let arr = neff.npy(&format!("{sg}/{file}")).map_err(neff_err)?;
                        if arr.data.len() as u64 > c.size {
                            return Err(NrtError::invalid(format!(
                                "constant '{file}' holds {} bytes, var '{vname}' only {}",
                                arr.data.len(),
                                c.size
                            )));
                        }
                        l.drv
                            .copy_to(&c, 0, &arr.data)
                            .map_err(|e| drv_err("MEM_BUF_COPY64 (constants)", e))?;
                    }
                    c.pa
                }
                // A DGE table lists var ids; it is filled once every var has its address.
                VarType::DgeTable => {
                    tables.push((vname.clone(), v.list.clone().unwrap_or_default()));
                    continue;
                }
                _ => continue,
            };
            b.insert(id, addr);
        }
        dge.push(match tables.as_slice() {
            [] => None,
            [(tname, list)] => {
                let mut bytes = Vec::with_capacity(list.len() * 8);
                for id in list {
                    let a = u8::try_from(*id).ok().and_then(|i| b.get(&i)).ok_or_else(|| {
                        NrtError::invalid(format!(
                            "{sg}/def.json DGE table '{tname}' lists var_id {id}, which names no placed var"
                        ))
                    })?;
                    bytes.extend_from_slice(&a.to_le_bytes());
                }
                let c = l.alloc(bytes.len().max(8) as u64, false, MemType::MISC_DEVICE, tname)?;
                l.drv
                    .copy_to(&c, 0, &bytes)
                    .map_err(|e| drv_err("MEM_BUF_COPY64 (DGE table)", e))?;
                Some(c.pa)
            }
            _ => {
                return Err(NrtError::new(
                    NrtStatus::Invalid,
                    format!("{sg}/def.json declares {} DGE tables; one per subgraph is supported", tables.len()),
                ))
            }
        });
        bases.push(b);
    }
    let ctl = |gi: usize| control.pa + gi as u64 * crate::prologue::CONTROL_BYTES;
    let mut places = Vec::new();
    for (gi, tpb) in tpbs.iter().enumerate() {
        // The DGE register load reads the table's address from the control block.
        if let Some(Some(table)) = dge.get(gi) {
            l.drv
                .copy_to(
                    &control,
                    gi as u64 * crate::prologue::CONTROL_BYTES + crate::prologue::CONTROL_DGE,
                    &table.to_le_bytes(),
                )
                .map_err(|e| drv_err("MEM_BUF_COPY64 (control block)", e))?;
        }
        // LNC=2: the cores of a pair handshake with each other; a lone core with itself.
        let peer = tpbs.get(gi ^ 1).copied().unwrap_or(*tpb);
        places.push(crate::real::CorePlace {
            tpb: *tpb,
            peer_tpb: peer,
            control: ctl(gi),
        });
    }
    let triggers = plan_triggers(l, neff, &graphs, &bases, &tpbs)?;
    let programs = crate::real::build_programs(
        neff,
        &graphs,
        &bases,
        &places,
        &triggers,
        l.nc as u64 * tpb::WINDOW,
    )?;
    Ok(RealImage {
        programs,
        shared,
        dge,
        triggers,
    })
}

/// A real NEFF placed in device memory and translated for this runtime.
struct RealImage {
    programs: Vec<crate::real::LoadedProgram>,
    /// Input and output buffers by name.
    shared: BTreeMap<String, Chunk>,
    /// Per subgraph: the device address of its DGE table.
    dge: Vec<Option<u64>>,
    /// Per subgraph: its DMA queues' rings.
    triggers: Vec<crate::trigger::Triggers>,
}

/// Plan every subgraph's DMA queue rings (`crate::trigger`); the semaphore word they share is
/// allocated only when some engine has DMA blocks.
fn plan_triggers(
    l: &mut Loader<'_>,
    neff: &Neff,
    graphs: &[(String, std::sync::Arc<neuron_neff::SubgraphDef>)],
    bases: &[BTreeMap<u8, u64>],
    tpbs: &[u64],
) -> Result<Vec<crate::trigger::Triggers>, NrtError> {
    let blocks = graphs
        .iter()
        .map(|(sg, def)| crate::trigger::engine_blocks(neff, sg, def))
        .collect::<Result<Vec<_>, _>>()?;
    if blocks.iter().flatten().all(|(_, b)| b.is_empty()) {
        return Ok(vec![Default::default(); graphs.len()]);
    }
    let values: Vec<u8> = (0..crate::trigger::SEM_VALUES)
        .flat_map(u32::to_le_bytes)
        .collect();
    let one = l.alloc(
        values.len() as u64,
        false,
        MemType::MISC_DEVICE,
        "DMA semaphore values",
    )?;
    l.drv
        .copy_to(&one, 0, &values)
        .map_err(|e| drv_err("MEM_BUF_COPY64 (DMA semaphore values)", e))?;
    let mut out = Vec::new();
    for (gi, ((sg, def), eb)) in graphs.iter().zip(&blocks).enumerate() {
        let b = bases.get(gi);
        let base_of = |name: &str| {
            let id = def
                .var
                .get(name)?
                .var_id
                .and_then(|i| u8::try_from(i).ok())?;
            b?.get(&id).copied()
        };
        let place = crate::trigger::QueuePlace {
            tpb: tpbs.get(gi).copied().unwrap_or(0),
            first_eng: (l.nc + gi as u32) * 16 + DATA_DMA_ENGINE_BASE,
            engines: DATA_DMA_ENGINES,
            one: one.pa,
        };
        out.push(crate::trigger::Triggers::plan(
            sg,
            eb,
            &def.dma_queue,
            &base_of,
            place,
        )?);
    }
    Ok(out)
}

/// Load a real (neuronx-cc) NEFF: subgraph `g` runs on NeuronCore `nc + g`, each with its own
/// engine programs, notification queues and DGE table; inputs and outputs are shared.
#[allow(clippy::too_many_arguments)]
fn load_real(
    l: &mut Loader<'_>,
    neff: &Neff,
    kelf: &neuron_neff::Kelf,
    def: &neuron_neff::SubgraphDef,
    tmap: Option<&neuron_neff::TensorMap>,
    sg: &str,
    name: String,
    opts: LoadOptions,
) -> Result<Model, NrtError> {
    let nc = l.nc;
    let cores = kelf.graphs.len() as u32;
    for extra in 1..cores {
        l.drv
            .nc_reset(1 << (nc + extra))
            .map_err(|e| drv_err("NC_RESET", e))?;
    }
    let img = real_image(l, neff, kelf)?;
    let (inputs, outputs) = tensor_infos(neff, def, tmap, sg, &img.shared)?;
    let mut staged = Vec::new();
    for (gi, g) in kelf.graphs.iter().enumerate() {
        let core = nc + gi as u32;
        let dir = g.dir();
        let mut programs = vec![Vec::new(); 5];
        for p in img.programs.iter().filter(|p| p.subgraph == dir) {
            programs[p.engine.index()] = p.words.concat();
        }
        if let Some(Some(table)) = img.dge.get(gi) {
            let (sb_base, _) = l.sbuf(core)?;
            l.drv
                .program_engine(core, sb_base + tpb::DGE_TABLE, &table.to_le_bytes())
                .map_err(|e| drv_err("PROGRAM_ENGINE_NC64 (DGE table)", e))?;
        }
        let mut run = stage_core(l, core, programs)?;
        run.dge = img.dge.get(gi).copied().flatten();
        for q in img.triggers.get(gi).map_or(&[][..], |t| &t.queues) {
            run.data_queues
                .push(make_queue(l, q.eng, &q.tx, &q.rx, "DMA queue ring")?);
        }
        staged.push(run);
    }
    start_resident(l.drv, &mut staged, opts.exec_timeout)?;
    tracing::info!(target: "NRT", "nrt_load loaded '{name}' on NC {nc}..{}: {} inputs, {} outputs, {} subgraphs", nc + cores - 1, inputs.len(), outputs.len(), cores);
    let mut model = Model::assemble(l, &opts, name, (inputs, outputs), staged);
    model.owners = model.cores.iter().map(|c| owners(l.drv, c.nc)).collect();
    // The cores now run this model's programs.
    for o in model.core_owners() {
        *o.lock().unwrap_or_else(|e| e.into_inner()) = model.id;
    }
    Ok(model)
}

/// Fetch resident programs once and run their load-time part: wait until every engine of
/// every core posted `NOTIFY hint=8` (its loop head is next), or fail on a device error or
/// after `timeout`.
fn start_resident(drv: &Driver, cores: &mut [CoreRun], timeout: Duration) -> Result<(), NrtError> {
    for q in cores.iter().flat_map(|c| c.data_queues.iter()) {
        drv.queue_init(q.eng, q.qid, &q.tx, &q.rx, q.ring)
            .map_err(|e| drv_err("DMA_QUEUE_INIT", e))?;
    }
    for q in cores.iter().flat_map(|c| c.fetch.iter()) {
        drv.queue_init(q.eng, q.qid, &q.tx, &q.rx, q.ring)
            .map_err(|e| drv_err("DMA_QUEUE_INIT", e))?;
        drv.copy_start(q.eng, q.qid, q.count)
            .map_err(|e| drv_err("DMA_QUEUE_COPY_START", e))?;
    }
    let deadline = Instant::now() + timeout;
    let mut loaded = vec![[false; 5]; cores.len()];
    let mut spins = 0u32;
    loop {
        let mut progressed = false;
        for (ci, c) in cores.iter_mut().enumerate() {
            for (e, nq) in c.nqs.iter_mut().enumerate() {
                while let Some(entry) = nq.next() {
                    progressed = true;
                    if entry.kind() == NotifyKind::Notify
                        && entry.value() == crate::prologue::HINT_LOADED
                    {
                        loaded[ci][e] = true;
                    }
                }
            }
            if let Some(err) = c.err_nq.next() {
                let engine = Engine::from_index(err.engine() as usize)
                    .map_or_else(|| "DMA".to_string(), |e| e.to_string());
                return Err(NrtError::new(
                    NrtStatus::Failure,
                    format!(
                        "NC {}: the runtime prologue faulted at load (engine {engine} pc {}, error code {})",
                        c.nc,
                        err.pc(),
                        err.value()
                    ),
                ));
            }
        }
        if loaded.iter().all(|c| c.iter().all(|x| *x)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(NrtError::new(
                NrtStatus::Timeout,
                format!(
                    "the runtime prologue did not finish within {} ms at load",
                    timeout.as_millis()
                ),
            ));
        }
        crate::poll::back_off(&mut spins, progressed);
    }
}

/// Place and translate a real NEFF as [`load`] would, and return the loaded programs (for
/// `neuron-emu disasm --loaded`); the allocations are released before returning.
pub(crate) fn load_image(
    drv: &Driver,
    neff_bytes: &[u8],
    nc: u32,
    validate_hash: bool,
) -> Result<Vec<crate::real::LoadedProgram>, NrtError> {
    let mut l = Loader {
        drv,
        nc,
        chunks: Vec::new(),
        usage: crate::nds::Usage::default(),
    };
    let r = (|| {
        let popts = ParseOptions {
            validate_hash,
            ..ParseOptions::default()
        };
        let neff = Neff::parse_with(neff_bytes, &popts).map_err(neff_err)?;
        let kelf = neff.kelf().map_err(neff_err)?;
        if neff.header().feature_bits & neuron_neff::FEATURE_EMU_TEST_ISA != 0 {
            return Err(NrtError::invalid("a project test-encoding NEFF: its loaded form is listed by `neuron-emu disasm` directly"));
        }
        real_image(&mut l, &neff, &kelf).map(|i| i.programs)
    })();
    l.free_all();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_abi::arch::Arch;

    fn kelf(target: &str, graphs: usize) -> neuron_neff::Kelf {
        neuron_neff::Kelf {
            graphs: (0..graphs)
                .map(|i| neuron_neff::KelfGraph {
                    definition: format!("sg{i:02}/def.json"),
                    name: format!("sg{i:02}"),
                    ..Default::default()
                })
                .collect(),
            target: target.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn a_trn2_neff_is_refused_at_load_on_trn1_and_inf2() {
        for arch in [Arch::V2Trn1, Arch::V2Inf2] {
            let e = check_target(&kelf("cayman", 1), arch, 0).expect_err("refused");
            assert_eq!(e.status, NrtStatus::Invalid);
            assert!(e.to_string().contains("compiled for trn2"), "{e}");
        }
        assert!(check_target(&kelf("cayman", 1), Arch::V3Trn2, 0).is_ok());
        // An older-arch NEFF on a newer device and an unnamed target still load.
        assert!(check_target(&kelf("sunda", 1), Arch::V3Trn2, 0).is_ok());
        assert!(check_target(&kelf("", 1), Arch::V2Trn1, 0).is_ok());
    }

    #[test]
    fn an_lnc2_neff_on_the_last_core_is_refused_as_not_enough_cores() {
        let e = check_target(&kelf("cayman", 2), Arch::V3Trn2, 7).expect_err("refused");
        assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
        assert!(e.to_string().contains("NeuronCores 7..8"), "{e}");
        assert!(check_target(&kelf("cayman", 2), Arch::V3Trn2, 6).is_ok());
        let e = check_target(&kelf("cayman", 1), Arch::V3Trn2, u32::MAX).expect_err("refused");
        assert_eq!(e.status, NrtStatus::LoadNotEnoughNc);
    }
}
