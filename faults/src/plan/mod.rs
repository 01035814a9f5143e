//! Fault plans: the TOML a researcher writes (`docs/faults.md`), parsed strictly and validated
//! into typed faults (when × where × what). Every refusal names the line, the column and the
//! key, and nothing in a plan can panic the parser or ask for unbounded work.

use neuron_isa::Engine;
use serde::Deserialize;
use std::fmt;
use std::ops::Range;

mod validate;

use validate::engine_named;
pub use validate::parse;

/// Most faults one plan may list.
pub const MAX_FAULTS: usize = 1024;
/// Largest plan accepted, in bytes.
pub const MAX_PLAN_BYTES: usize = 1 << 20;

/// Limits of the machine a plan is checked against (from the emulated architecture).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub devices: u32,
    pub cores: u32,
    pub partitions: u32,
    pub sbuf_partition_bytes: u64,
    pub psum_partition_bytes: u64,
    /// Device address ranges of the HBMs.
    pub hbm: Vec<Range<u64>>,
    pub dma_queues: u32,
    pub semaphores: u32,
}

/// Read a plan file: a regular file of at most [`MAX_PLAN_BYTES`] of UTF-8 (never more is
/// read, so `/dev/zero` or a FIFO cannot exhaust memory or block).
pub fn read_plan_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buf = Vec::new();
    f.take(MAX_PLAN_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if buf.len() > MAX_PLAN_BYTES {
        return Err(format!(
            "{}: larger than {MAX_PLAN_BYTES} bytes",
            path.display()
        ));
    }
    String::from_utf8(buf).map_err(|_| format!("{}: not UTF-8 text", path.display()))
}

impl Limits {
    /// The limits of `devices` emulated devices of architecture `arch`.
    pub fn for_arch(arch: neuron_abi::Arch, devices: u32) -> Limits {
        let p = neuron_devmodel::ArchProfile::new(arch);
        Limits {
            devices,
            cores: p.nc_count as u32,
            partitions: p.partitions as u32,
            sbuf_partition_bytes: p.sbuf_partition_bytes as u64,
            psum_partition_bytes: p.psum_partition_bytes as u64,
            hbm: (0..arch.hbm_count())
                .filter_map(|k| arch.hbm_base(k))
                .map(|b| b..b + arch.hbm_size())
                .collect(),
            dma_queues: arch.dma_queues_per_engine(),
            semaphores: neuron_abi::consts::SEMAPHORES_PER_NC,
        }
    }
}

/// A refused plan: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}line {line}, column {column}: {}{message}", source_prefix(.source_name), key_prefix(.key))]
pub struct PlanError {
    /// The plan's file name, when known.
    pub source_name: Option<String>,
    /// 1-based.
    pub line: usize,
    /// 1-based.
    pub column: usize,
    /// The key the error is about (`fault[2].bits`), if any.
    pub key: Option<String>,
    pub message: String,
}

fn source_prefix(s: &Option<String>) -> String {
    s.as_ref().map(|s| format!("{s}: ")).unwrap_or_default()
}
fn key_prefix(k: &Option<String>) -> String {
    k.as_ref()
        .map(|k| format!("key `{k}`: "))
        .unwrap_or_default()
}

impl PlanError {
    /// Name the file the plan came from in the message.
    pub fn in_file(mut self, name: impl Into<String>) -> PlanError {
        self.source_name = Some(name.into());
        self
    }
}

/// A half-open range `lo..hi` of u64 values, never empty once validated. A single value `v`
/// is `v..v+1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Span {
    pub lo: u64,
    pub hi: u64,
}

impl Span {
    pub fn one(v: u64) -> Span {
        Span {
            lo: v,
            hi: v.saturating_add(1),
        }
    }
    pub fn len(&self) -> u64 {
        self.hi - self.lo
    }
    pub fn is_empty(&self) -> bool {
        self.hi <= self.lo
    }
    pub fn is_one(&self) -> bool {
        self.len() == 1
    }
}

/// A memory region of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    Sbuf,
    Psum,
    Hbm,
}

/// Which bits a flip touches within one 32-bit word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// `bits` bits at random positions (1 bit: a single-bit upset).
    Random,
    /// `bits` adjacent bits from a random start (a multi-cell upset).
    Adjacent,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "kebab-case")]
pub enum Effect {
    /// Flip `bits` bits of one 32-bit word in the region (a transient upset).
    BitFlip {
        bits: u32,
        pattern: Pattern,
    },
    /// Hold `bits` bits of one word at `value` from the trigger on (a permanent defect).
    StuckAt {
        bits: u32,
        pattern: Pattern,
        value: u8,
    },
    /// The engine's next result holds a NaN.
    Nan,
    /// The engine's next result holds an infinity.
    Inf,
    /// Flip `bits` bits of the instruction word about to issue.
    CorruptInstruction {
        bits: u32,
    },
    /// The DMA descriptor about to execute is in error: the queue aborts.
    DmaError,
    NotificationDrop,
    NotificationDuplicate,
    NotificationDelay {
        delay_ns: u64,
    },
    SemaphoreDrop,
    SemaphoreDuplicate,
    /// The engine stops issuing forever.
    EngineHang,
    /// The engine's instructions take `factor` times as long from the trigger on.
    EngineSlow {
        factor: f64,
    },
    /// The DMA queue's transfers take `factor` times as long from the trigger on.
    QueueSlow {
        factor: f64,
    },
    /// An uncorrectable HBM error at an address; `repairable` as the firmware's repair state.
    HbmUe {
        repairable: bool,
    },
    /// An uncorrectable on-chip SRAM (NeuronCore memory) error.
    SramUe,
    /// The driver answers the ioctl with `errno`.
    IoctlFail {
        errno: i32,
    },
}

impl Effect {
    /// The plan's name of the effect.
    pub fn name(&self) -> &'static str {
        match self {
            Effect::BitFlip { .. } => "bit-flip",
            Effect::StuckAt { .. } => "stuck-at",
            Effect::Nan => "nan",
            Effect::Inf => "inf",
            Effect::CorruptInstruction { .. } => "corrupt-instruction",
            Effect::DmaError => "dma-error",
            Effect::NotificationDrop => "notification-drop",
            Effect::NotificationDuplicate => "notification-duplicate",
            Effect::NotificationDelay { .. } => "notification-delay",
            Effect::SemaphoreDrop => "semaphore-drop",
            Effect::SemaphoreDuplicate => "semaphore-duplicate",
            Effect::EngineHang => "engine-hang",
            Effect::EngineSlow { .. } => "engine-slow",
            Effect::QueueSlow { .. } => "queue-slow",
            Effect::HbmUe { .. } => "hbm-ue",
            Effect::SramUe => "sram-ue",
            Effect::IoctlFail { .. } => "ioctl-fail",
        }
    }
}

/// Every effect name a plan may use.
pub const EFFECTS: &[&str] = &[
    "bit-flip",
    "stuck-at",
    "nan",
    "inf",
    "corrupt-instruction",
    "dma-error",
    "notification-drop",
    "notification-duplicate",
    "notification-delay",
    "semaphore-drop",
    "semaphore-duplicate",
    "engine-hang",
    "engine-slow",
    "queue-slow",
    "hbm-ue",
    "sram-ue",
    "ioctl-fail",
];

/// When a fault fires. Counts are 1-based and counted within one execution
/// ([`Fault::execution`]); ranges are sampled once per experiment.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(tag = "trigger", rename_all = "kebab-case")]
pub enum Trigger {
    /// At a device time (ns from the execution's start).
    AtNs { ns: Span },
    /// At the Nth instruction the engine issues.
    Instruction { nth: Span },
    /// At the first issue of a pc in the range.
    Pc { pc: Span },
    /// At the Nth DMA descriptor of the queue (of any queue if none is named).
    Descriptor { nth: Span },
    /// At the Nth notification posted.
    Notification { nth: Span },
    /// At the Nth semaphore update.
    Update { nth: Span },
    /// At the Nth call of the ioctl command.
    Ioctl { nth: Span },
    /// At every opportunity of the site's kind, independently with this probability.
    Probability { p: f64 },
}

impl Trigger {
    fn key(&self) -> &'static str {
        match self {
            Trigger::AtNs { .. } => "at-ns",
            Trigger::Instruction { .. } => "instruction",
            Trigger::Pc { .. } => "pc",
            Trigger::Descriptor { .. } => "descriptor",
            Trigger::Notification { .. } => "notification",
            Trigger::Update { .. } => "update",
            Trigger::Ioctl { .. } => "ioctl",
            Trigger::Probability { .. } => "probability",
        }
    }
}

/// Where a fault lands. Unset fields mean "any" (or the default named in `docs/faults.md`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, Deserialize)]
pub struct Site {
    pub device: u32,
    pub core: Option<u32>,
    #[serde(with = "opt_engine")]
    pub engine: Option<Engine>,
    pub queue: Option<u32>,
    pub region: Option<Region>,
    /// SBUF/PSUM partitions.
    pub partitions: Option<Span>,
    /// Byte offsets within a partition (SBUF/PSUM).
    pub offset: Option<Span>,
    /// HBM device addresses.
    pub address: Option<Span>,
    pub semaphore: Option<u32>,
    /// ioctl command values (empty: none named); [`crate::errno::MMAP`] stands for `mmap`.
    pub commands: Vec<u32>,
}

/// One validated fault of a plan.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct Fault {
    pub id: String,
    /// Relative weight when a campaign picks one fault per experiment.
    pub weight: f64,
    pub effect: Effect,
    pub trigger: Trigger,
    pub site: Site,
    /// The execution (1-based, counted from the model's load) whose events the trigger counts.
    pub execution: u64,
    /// 1-based line of the fault's table in the plan.
    pub line: usize,
}

/// A validated plan.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct Plan {
    pub description: Option<String>,
    pub faults: Vec<Fault>,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Region::Sbuf => "SBUF",
            Region::Psum => "PSUM",
            Region::Hbm => "HBM",
        })
    }
}

/// An optional engine as its profiler name ("Tensor", ...) in reports.
pub mod opt_engine {
    use super::engine_named;
    use neuron_isa::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(e: &Option<Engine>, s: S) -> Result<S::Ok, S::Error> {
        match e {
            Some(e) => s.serialize_some(e.profiler_name()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Engine>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(n) => engine_named(&n)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown engine {n:?}"))),
        }
    }
}
