//! Validation of a plan's TOML: the raw, spanned form serde reads (every key optional, unknown
//! keys refused), then one typed [`Fault`] per table, each refusal naming line, column and key.

use super::{
    Effect, Fault, Limits, Pattern, Plan, PlanError, Region, Site, Span, Trigger, EFFECTS,
    MAX_FAULTS, MAX_PLAN_BYTES,
};
use crate::errno;
use neuron_isa::Engine;
use serde::Deserialize;
use std::fmt;
use std::ops::Range;
use toml::Spanned;

/// A number or a half-open range `[lo, hi]` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RawSpan {
    One(u64),
    Range([u64; 2]),
}

impl<'de> Deserialize<'de> for RawSpan {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawSpan, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawSpan;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a [lo, hi] range of non-negative integers")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawSpan, E> {
                Ok(RawSpan::One(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawSpan, E> {
                u64::try_from(v)
                    .map(RawSpan::One)
                    .map_err(|_| E::custom(format!("{v} is negative: expected a number or a [lo, hi] range of non-negative integers")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<RawSpan, A::Error> {
                use serde::de::Error;
                let lo: u64 = a
                    .next_element()?
                    .ok_or_else(|| A::Error::custom("a [lo, hi] range needs two numbers"))?;
                let hi: u64 = a
                    .next_element()?
                    .ok_or_else(|| A::Error::custom("a [lo, hi] range needs two numbers"))?;
                if a.next_element::<u64>()?.is_some() {
                    return Err(A::Error::custom("a [lo, hi] range has exactly two numbers"));
                }
                Ok(RawSpan::Range([lo, hi]))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    description: Option<String>,
    #[serde(default)]
    fault: Vec<Spanned<RawFault>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFault {
    id: Spanned<String>,
    effect: Spanned<String>,
    weight: Option<Spanned<f64>>,
    // where
    device: Option<Spanned<u64>>,
    core: Option<Spanned<u64>>,
    engine: Option<Spanned<String>>,
    queue: Option<Spanned<u64>>,
    region: Option<Spanned<String>>,
    partitions: Option<Spanned<RawSpan>>,
    offset: Option<Spanned<RawSpan>>,
    address: Option<Spanned<RawSpan>>,
    semaphore: Option<Spanned<u64>>,
    command: Option<Spanned<String>>,
    point: Option<Spanned<String>>,
    // when
    at_ns: Option<Spanned<RawSpan>>,
    instruction: Option<Spanned<RawSpan>>,
    pc: Option<Spanned<RawSpan>>,
    descriptor: Option<Spanned<RawSpan>>,
    notification: Option<Spanned<RawSpan>>,
    update: Option<Spanned<RawSpan>>,
    ioctl: Option<Spanned<RawSpan>>,
    probability: Option<Spanned<f64>>,
    execution: Option<Spanned<u64>>,
    // what
    bits: Option<Spanned<u64>>,
    pattern: Option<Spanned<String>>,
    value: Option<Spanned<u64>>,
    delay_ns: Option<Spanned<u64>>,
    factor: Option<Spanned<f64>>,
    repairable: Option<Spanned<bool>>,
    errno: Option<Spanned<String>>,
}

/// Line and column (1-based) of byte offset `at` in `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let col = at
        - before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}

struct Ctx<'a> {
    text: &'a str,
    index: usize,
}

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, key: &str, msg: impl Into<String>) -> PlanError {
        let (line, column) = line_col(self.text, span.start);
        PlanError {
            source_name: None,
            line,
            column,
            key: Some(format!("fault[{}].{key}", self.index)),
            message: msg.into(),
        }
    }
}

fn span_of(ctx: &Ctx, key: &str, s: &Spanned<RawSpan>) -> Result<Span, PlanError> {
    let v = match *s.get_ref() {
        RawSpan::One(v) => Span::one(v),
        RawSpan::Range([lo, hi]) => Span { lo, hi },
    };
    if v.is_empty() {
        return Err(ctx.err(
            s.span(),
            key,
            format!(
                "empty range [{}, {}]: the upper end is exclusive and must exceed the lower",
                v.lo, v.hi
            ),
        ));
    }
    Ok(v)
}

fn within(
    ctx: &Ctx,
    key: &str,
    s: &Spanned<RawSpan>,
    max: u64,
    what: &str,
) -> Result<Span, PlanError> {
    let v = span_of(ctx, key, s)?;
    if v.hi > max {
        return Err(ctx.err(
            s.span(),
            key,
            format!("{what} [{}, {}) exceeds the device's {max}", v.lo, v.hi),
        ));
    }
    Ok(v)
}

fn small(ctx: &Ctx, key: &str, s: &Spanned<u64>, max: u64, what: &str) -> Result<u32, PlanError> {
    let v = *s.get_ref();
    if v >= max {
        return Err(ctx.err(
            s.span(),
            key,
            format!("{what} {v} does not exist (the device has {max})"),
        ));
    }
    u32::try_from(v).map_err(|_| ctx.err(s.span(), key, "too large"))
}

fn count_from_1(ctx: &Ctx, key: &str, s: &Spanned<RawSpan>) -> Result<Span, PlanError> {
    let v = span_of(ctx, key, s)?;
    if v.lo == 0 {
        return Err(ctx.err(s.span(), key, "counts start at 1 (the first event is 1)"));
    }
    Ok(v)
}

/// Parse and validate a plan's TOML text against the machine's limits.
pub fn parse(text: &str, limits: &Limits) -> Result<Plan, PlanError> {
    if text.len() > MAX_PLAN_BYTES {
        return Err(PlanError {
            source_name: None,
            line: 1,
            column: 1,
            key: None,
            message: format!(
                "the plan is {} bytes; at most {MAX_PLAN_BYTES} are accepted",
                text.len()
            ),
        });
    }
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |s| line_col(text, s.start));
        PlanError {
            source_name: None,
            line,
            column,
            key: None,
            message: e.message().trim().to_string(),
        }
    })?;
    if raw.fault.is_empty() {
        return Err(PlanError {
            source_name: None,
            line: 1,
            column: 1,
            key: Some("fault".into()),
            message: "the plan lists no [[fault]]".into(),
        });
    }
    if raw.fault.len() > MAX_FAULTS {
        let s = raw.fault[MAX_FAULTS].span();
        let (line, column) = line_col(text, s.start);
        return Err(PlanError {
            source_name: None,
            line,
            column,
            key: Some("fault".into()),
            message: format!("more than {MAX_FAULTS} faults"),
        });
    }
    let mut faults: Vec<Fault> = Vec::with_capacity(raw.fault.len());
    for (index, f) in raw.fault.iter().enumerate() {
        let ctx = Ctx { text, index };
        let fault = validate(&ctx, f, limits)?;
        if let Some(prev) = faults.iter().find(|p| p.id == fault.id) {
            return Err(ctx.err(
                f.get_ref().id.span(),
                "id",
                format!("duplicate id {:?} (first at line {})", fault.id, prev.line),
            ));
        }
        faults.push(fault);
    }
    Ok(Plan {
        description: raw.description,
        faults,
    })
}

pub(super) fn engine_named(s: &str) -> Option<Engine> {
    let l = s.to_ascii_lowercase();
    Engine::ALL
        .into_iter()
        .find(|e| e.profiler_name().eq_ignore_ascii_case(&l) || e.def_name() == l)
}

fn validate(ctx: &Ctx, sf: &Spanned<RawFault>, limits: &Limits) -> Result<Fault, PlanError> {
    let f = sf.get_ref();
    let (line, _) = line_col(ctx.text, sf.span().start);
    let id = f.id.get_ref().clone();
    if id.is_empty()
        || id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return Err(ctx.err(
            f.id.span(),
            "id",
            "ids are 1-64 characters of A-Z a-z 0-9 - _ .",
        ));
    }

    // Where.
    let mut site = Site::default();
    if let Some(d) = &f.device {
        site.device = small(ctx, "device", d, u64::from(limits.devices), "device")?;
    }
    if let Some(c) = &f.core {
        site.core = Some(small(
            ctx,
            "core",
            c,
            u64::from(limits.cores),
            "NeuronCore",
        )?);
    }
    if let Some(e) = &f.engine {
        site.engine = Some(engine_named(e.get_ref()).ok_or_else(|| {
            ctx.err(
                e.span(),
                "engine",
                format!(
                    "unknown engine {:?}: expected Tensor, Scalar, GpSimd, Vector or Sync",
                    e.get_ref()
                ),
            )
        })?);
    }
    if let Some(q) = &f.queue {
        site.queue = Some(small(
            ctx,
            "queue",
            q,
            u64::from(limits.dma_queues),
            "DMA queue",
        )?);
    }
    if let Some(s) = &f.semaphore {
        site.semaphore = Some(small(
            ctx,
            "semaphore",
            s,
            u64::from(limits.semaphores),
            "semaphore",
        )?);
    }
    if let Some(r) = &f.region {
        site.region = Some(match r.get_ref().to_ascii_lowercase().as_str() {
            "sbuf" => Region::Sbuf,
            "psum" => Region::Psum,
            "hbm" => Region::Hbm,
            other => {
                return Err(ctx.err(
                    r.span(),
                    "region",
                    format!("unknown region {other:?}: expected sbuf, psum or hbm"),
                ))
            }
        });
    }
    match site.region {
        Some(Region::Sbuf) | Some(Region::Psum) => {
            let pb = if site.region == Some(Region::Sbuf) {
                limits.sbuf_partition_bytes
            } else {
                limits.psum_partition_bytes
            };
            if let Some(p) = &f.partitions {
                site.partitions = Some(within(
                    ctx,
                    "partitions",
                    p,
                    u64::from(limits.partitions),
                    "partitions",
                )?);
            }
            if let Some(o) = &f.offset {
                site.offset = Some(within(ctx, "offset", o, pb, "bytes per partition")?);
            }
            if let Some(a) = &f.address {
                return Err(ctx.err(
                    a.span(),
                    "address",
                    "SBUF and PSUM are addressed by `partitions` and `offset`",
                ));
            }
        }
        Some(Region::Hbm) | None => {
            if let Some(a) = &f.address {
                let v = span_of(ctx, "address", a)?;
                if !limits.hbm.iter().any(|h| h.start <= v.lo && v.hi <= h.end) {
                    return Err(ctx.err(
                        a.span(),
                        "address",
                        format!(
                            "[{:#x}, {:#x}) is not inside one HBM of the device",
                            v.lo, v.hi
                        ),
                    ));
                }
                site.address = Some(v);
            }
            for (k, v) in [("partitions", &f.partitions), ("offset", &f.offset)] {
                if let Some(v) = v {
                    return Err(ctx.err(
                        v.span(),
                        k,
                        "only SBUF and PSUM faults take partitions and offsets",
                    ));
                }
            }
        }
    }
    if let Some(c) = &f.command {
        let name = c.get_ref().trim_start_matches("NEURON_IOCTL_");
        let cmd = neuron_abi::ioctl::COMMANDS
            .iter()
            .find(|i| i.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                ctx.err(
                    c.span(),
                    "command",
                    format!("unknown ioctl command {:?}", c.get_ref()),
                )
            })?;
        site.commands = vec![cmd.cmd];
    }

    // What.
    let effect_name = f.effect.get_ref().as_str();
    let bits = |max: u64| -> Result<u32, PlanError> {
        match &f.bits {
            None => Ok(1),
            Some(b) if (1..=max).contains(b.get_ref()) => Ok(*b.get_ref() as u32),
            Some(b) => Err(ctx.err(b.span(), "bits", format!("must be 1..={max}"))),
        }
    };
    let pattern = || -> Result<Pattern, PlanError> {
        match &f.pattern {
            None => Ok(Pattern::Random),
            Some(p) => match p.get_ref().as_str() {
                "random" | "single" => Ok(Pattern::Random),
                "adjacent" => Ok(Pattern::Adjacent),
                other => Err(ctx.err(
                    p.span(),
                    "pattern",
                    format!("unknown pattern {other:?}: expected single, random or adjacent"),
                )),
            },
        }
    };
    let factor = || -> Result<f64, PlanError> {
        match &f.factor {
            None => Err(ctx.err(
                f.effect.span(),
                "factor",
                format!("{effect_name} needs `factor` (> 1, how many times slower)"),
            )),
            Some(x) if x.get_ref().is_finite() && (1.0..=1e6).contains(x.get_ref()) => {
                Ok(*x.get_ref())
            }
            Some(x) => Err(ctx.err(x.span(), "factor", "must be a number in 1..=1e6")),
        }
    };
    let effect = match effect_name {
        "bit-flip" => Effect::BitFlip {
            bits: bits(32)?,
            pattern: pattern()?,
        },
        "stuck-at" => Effect::StuckAt {
            bits: bits(32)?,
            pattern: pattern()?,
            value: match &f.value {
                Some(v) if *v.get_ref() <= 1 => *v.get_ref() as u8,
                Some(v) => return Err(ctx.err(v.span(), "value", "a stuck bit is 0 or 1")),
                None => {
                    return Err(ctx.err(
                        f.effect.span(),
                        "value",
                        "stuck-at needs `value` (0 or 1)",
                    ))
                }
            },
        },
        "nan" => Effect::Nan,
        "inf" => Effect::Inf,
        "corrupt-instruction" => Effect::CorruptInstruction { bits: bits(512)? },
        "dma-error" => Effect::DmaError,
        "notification-drop" => Effect::NotificationDrop,
        "notification-duplicate" => Effect::NotificationDuplicate,
        "notification-delay" => Effect::NotificationDelay {
            delay_ns: match &f.delay_ns {
                Some(d) if (1..=3_600_000_000_000).contains(d.get_ref()) => *d.get_ref(),
                Some(d) => return Err(ctx.err(d.span(), "delay-ns", "must be 1 ns .. 1 hour")),
                None => {
                    return Err(ctx.err(
                        f.effect.span(),
                        "delay-ns",
                        "notification-delay needs `delay-ns`",
                    ))
                }
            },
        },
        "semaphore-drop" => Effect::SemaphoreDrop,
        "semaphore-duplicate" => Effect::SemaphoreDuplicate,
        "engine-hang" => Effect::EngineHang,
        "engine-slow" => Effect::EngineSlow { factor: factor()? },
        "queue-slow" => Effect::QueueSlow { factor: factor()? },
        "hbm-ue" => Effect::HbmUe {
            repairable: f.repairable.as_ref().is_some_and(|r| *r.get_ref()),
        },
        "sram-ue" => Effect::SramUe,
        "ioctl-fail" => {
            let e = match &f.point {
                Some(p) => {
                    let (cmds, e) = errno::driver_fault_point(p.get_ref()).ok_or_else(|| {
                        ctx.err(
                            p.span(),
                            "point",
                            format!(
                                "unknown driver fault point {:?}: expected one of {}",
                                p.get_ref(),
                                errno::FAULT_POINTS
                                    .iter()
                                    .map(|p| p.name)
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?;
                    if let Some(c) = &f.command {
                        return Err(ctx.err(
                            c.span(),
                            "command",
                            "the fault point already names the calls it fails; drop `command`",
                        ));
                    }
                    site.commands = cmds;
                    e
                }
                None => 0,
            };
            if site.commands.is_empty() {
                return Err(ctx.err(
                    f.effect.span(),
                    "command",
                    "ioctl-fail needs `command` (or a driver fault `point`)",
                ));
            }
            let errno = match &f.errno {
                Some(n) => errno::by_name(n.get_ref()).ok_or_else(|| {
                    ctx.err(
                        n.span(),
                        "errno",
                        format!(
                            "unknown errno {:?} (e.g. ENOMEM, ETIMEDOUT, ENOSPC, EBUSY, EIO)",
                            n.get_ref()
                        ),
                    )
                })?,
                None if e != 0 => e,
                None => {
                    return Err(ctx.err(
                        f.effect.span(),
                        "errno",
                        "ioctl-fail needs `errno` (or a driver fault `point`)",
                    ))
                }
            };
            Effect::IoctlFail { errno }
        }
        other => {
            return Err(ctx.err(
                f.effect.span(),
                "effect",
                format!(
                    "unknown effect {other:?}: expected one of {}",
                    EFFECTS.join(", ")
                ),
            ))
        }
    };
    // Parameters that do not belong to the effect are refused, not ignored.
    let own: &[&str] = match effect {
        Effect::BitFlip { .. } => &["bits", "pattern"],
        Effect::StuckAt { .. } => &["bits", "pattern", "value"],
        Effect::CorruptInstruction { .. } => &["bits"],
        Effect::NotificationDelay { .. } => &["delay-ns"],
        Effect::EngineSlow { .. } | Effect::QueueSlow { .. } => &["factor"],
        Effect::HbmUe { .. } => &["repairable"],
        Effect::IoctlFail { .. } => &["errno", "point"],
        _ => &[],
    };
    let params: [(&str, Option<Range<usize>>); 8] = [
        ("bits", f.bits.as_ref().map(|v| v.span())),
        ("pattern", f.pattern.as_ref().map(|v| v.span())),
        ("value", f.value.as_ref().map(|v| v.span())),
        ("delay-ns", f.delay_ns.as_ref().map(|v| v.span())),
        ("factor", f.factor.as_ref().map(|v| v.span())),
        ("repairable", f.repairable.as_ref().map(|v| v.span())),
        ("errno", f.errno.as_ref().map(|v| v.span())),
        ("point", f.point.as_ref().map(|v| v.span())),
    ];
    for (k, s) in params {
        if let Some(s) = s {
            if !own.contains(&k) {
                return Err(ctx.err(s, k, format!("{effect_name} takes no `{k}`")));
            }
        }
    }

    // Site keys that do not belong to the effect are refused too.
    let where_ok: &[&str] = match effect {
        // `engine` only to count instructions for an instruction or pc trigger.
        Effect::BitFlip { .. } | Effect::StuckAt { .. } => &[
            "device",
            "core",
            "engine",
            "region",
            "partitions",
            "offset",
            "address",
        ],
        Effect::Nan
        | Effect::Inf
        | Effect::CorruptInstruction { .. }
        | Effect::EngineHang
        | Effect::EngineSlow { .. } => &["device", "core", "engine"],
        Effect::DmaError | Effect::QueueSlow { .. } => &["device", "core", "queue", "engine"],
        Effect::NotificationDrop
        | Effect::NotificationDuplicate
        | Effect::NotificationDelay { .. } => &["device", "core", "engine"],
        Effect::SemaphoreDrop | Effect::SemaphoreDuplicate => &["device", "core", "semaphore"],
        Effect::HbmUe { .. } => &["device", "engine", "region", "address"],
        Effect::SramUe => &["device", "core", "engine"],
        Effect::IoctlFail { .. } => &["device", "command"],
    };
    let wheres: [(&str, Option<Range<usize>>); 10] = [
        ("core", f.core.as_ref().map(|v| v.span())),
        ("engine", f.engine.as_ref().map(|v| v.span())),
        ("queue", f.queue.as_ref().map(|v| v.span())),
        ("region", f.region.as_ref().map(|v| v.span())),
        ("partitions", f.partitions.as_ref().map(|v| v.span())),
        ("offset", f.offset.as_ref().map(|v| v.span())),
        ("address", f.address.as_ref().map(|v| v.span())),
        ("semaphore", f.semaphore.as_ref().map(|v| v.span())),
        ("command", f.command.as_ref().map(|v| v.span())),
        ("device", f.device.as_ref().map(|v| v.span())),
    ];
    for (k, s) in wheres {
        if let Some(s) = s {
            if !where_ok.contains(&k) {
                return Err(ctx.err(s, k, format!("{effect_name} does not take `{k}`")));
            }
        }
    }
    // Where the effect needs it.
    let need = |ok: bool, key: &str, what: &str| -> Result<(), PlanError> {
        if ok {
            Ok(())
        } else {
            Err(ctx.err(f.effect.span(), key, format!("{effect_name} needs {what}")))
        }
    };
    match effect {
        Effect::BitFlip { .. } | Effect::StuckAt { .. } => need(
            site.region.is_some(),
            "region",
            "`region` (sbuf, psum or hbm)",
        )?,
        Effect::Nan
        | Effect::Inf
        | Effect::CorruptInstruction { .. }
        | Effect::EngineHang
        | Effect::EngineSlow { .. } => need(site.engine.is_some(), "engine", "`engine`")?,
        Effect::HbmUe { .. } => {
            need(
                site.region != Some(Region::Sbuf) && site.region != Some(Region::Psum),
                "region",
                "an HBM site",
            )?;
            site.region = Some(Region::Hbm);
        }
        _ => {}
    }

    // When: exactly one trigger.
    let mut triggers: Vec<(Trigger, Range<usize>)> = Vec::new();
    let mut add = |t: Result<Trigger, PlanError>, s: Range<usize>| -> Result<(), PlanError> {
        triggers.push((t?, s));
        Ok(())
    };
    if let Some(s) = &f.at_ns {
        add(
            span_of(ctx, "at-ns", s).map(|ns| Trigger::AtNs { ns }),
            s.span(),
        )?;
    }
    if let Some(s) = &f.instruction {
        add(
            count_from_1(ctx, "instruction", s).map(|nth| Trigger::Instruction { nth }),
            s.span(),
        )?;
    }
    if let Some(s) = &f.pc {
        add(span_of(ctx, "pc", s).map(|pc| Trigger::Pc { pc }), s.span())?;
    }
    if let Some(s) = &f.descriptor {
        add(
            count_from_1(ctx, "descriptor", s).map(|nth| Trigger::Descriptor { nth }),
            s.span(),
        )?;
    }
    if let Some(s) = &f.notification {
        add(
            count_from_1(ctx, "notification", s).map(|nth| Trigger::Notification { nth }),
            s.span(),
        )?;
    }
    if let Some(s) = &f.update {
        add(
            count_from_1(ctx, "update", s).map(|nth| Trigger::Update { nth }),
            s.span(),
        )?;
    }
    if let Some(s) = &f.ioctl {
        add(
            count_from_1(ctx, "ioctl", s).map(|nth| Trigger::Ioctl { nth }),
            s.span(),
        )?;
    }
    if let Some(p) = &f.probability {
        let v = *p.get_ref();
        let t = if v.is_finite() && v > 0.0 && v <= 1.0 {
            Ok(Trigger::Probability { p: v })
        } else {
            Err(ctx.err(p.span(), "probability", "must be in (0, 1]"))
        };
        add(t, p.span())?;
    }
    let trigger = match triggers.len() {
        0 => {
            return Err(ctx.err(
                sf.span(),
                "when",
                "no trigger: give exactly one of at-ns, instruction, pc, descriptor, notification, update, ioctl, probability",
            ))
        }
        1 => triggers.remove(0).0,
        _ => {
            let (second, s) = &triggers[1];
            return Err(ctx.err(
                s.clone(),
                second.key(),
                format!("a fault has exactly one trigger; `{}` is already given", triggers[0].0.key()),
            ));
        }
    };
    // Triggers the effect can never meet.
    let allowed: &[&str] = match effect {
        Effect::BitFlip { .. } | Effect::StuckAt { .. } => &["at-ns", "instruction", "pc"],
        Effect::Nan
        | Effect::Inf
        | Effect::CorruptInstruction { .. }
        | Effect::EngineHang
        | Effect::EngineSlow { .. } => &["at-ns", "instruction", "pc", "probability"],
        Effect::DmaError | Effect::QueueSlow { .. } => &["at-ns", "descriptor", "probability"],
        Effect::NotificationDrop
        | Effect::NotificationDuplicate
        | Effect::NotificationDelay { .. } => &["notification", "probability"],
        Effect::SemaphoreDrop | Effect::SemaphoreDuplicate => &["update", "probability"],
        Effect::HbmUe { .. } | Effect::SramUe => &["at-ns", "instruction", "pc"],
        Effect::IoctlFail { .. } => &["ioctl", "probability"],
    };
    if !allowed.contains(&trigger.key()) {
        let s = triggers_span(f, trigger.key());
        return Err(ctx.err(
            s,
            trigger.key(),
            format!(
                "{effect_name} cannot be triggered by `{}`; use one of {}",
                trigger.key(),
                allowed.join(", ")
            ),
        ));
    }
    if matches!(trigger, Trigger::Instruction { .. } | Trigger::Pc { .. }) && site.engine.is_none()
    {
        return Err(ctx.err(
            triggers_span(f, trigger.key()),
            trigger.key(),
            "counting instructions needs `engine`",
        ));
    }
    let execution = match &f.execution {
        None => 1,
        Some(e) if (1..=1_000_000).contains(e.get_ref()) => *e.get_ref(),
        Some(e) => return Err(ctx.err(e.span(), "execution", "must be 1..=1000000")),
    };
    let weight = match &f.weight {
        None => 1.0,
        Some(w) if w.get_ref().is_finite() && *w.get_ref() > 0.0 && *w.get_ref() <= 1e9 => {
            *w.get_ref()
        }
        Some(w) => return Err(ctx.err(w.span(), "weight", "must be a positive number")),
    };
    Ok(Fault {
        id,
        weight,
        effect,
        trigger,
        site,
        execution,
        line,
    })
}

fn triggers_span(f: &RawFault, key: &str) -> Range<usize> {
    let s = |x: &Option<Spanned<RawSpan>>| x.as_ref().map(|v| v.span());
    match key {
        "at-ns" => s(&f.at_ns),
        "instruction" => s(&f.instruction),
        "pc" => s(&f.pc),
        "descriptor" => s(&f.descriptor),
        "notification" => s(&f.notification),
        "update" => s(&f.update),
        "ioctl" => s(&f.ioctl),
        _ => f.probability.as_ref().map(|v| v.span()),
    }
    .unwrap_or(0..0)
}
