//! From a plan's fault (ranges, "any") to one concrete injection: the exact time or count,
//! address, bits and seed one experiment uses. Drawn from the experiment's own generator, so an
//! experiment is reproduced from (plan, campaign seed, index) alone.

use crate::plan::{Effect, Fault, Limits, Pattern, Plan, Region, Span, Trigger};
use crate::rng::Rng;
use neuron_isa::Engine;
use serde::{Deserialize, Serialize};

/// A trigger with its value chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "trigger", rename_all = "kebab-case")]
pub enum When {
    AtNs {
        ns: u64,
    },
    Instruction {
        nth: u64,
    },
    Pc {
        pc: u64,
    },
    Descriptor {
        nth: u64,
    },
    Notification {
        nth: u64,
    },
    Update {
        nth: u64,
    },
    Ioctl {
        nth: u64,
    },
    /// Each opportunity fires with probability `p`, drawn from a generator seeded `seed`.
    Probability {
        p: f64,
        seed: u64,
    },
}

/// A memory location with its value chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "region", rename_all = "lowercase")]
pub enum Location {
    /// A 4-byte word of SBUF or PSUM of `core`.
    Sbuf {
        partition: u32,
        offset: u64,
    },
    Psum {
        partition: u32,
        offset: u64,
    },
    /// A 4-byte word of HBM.
    Hbm {
        address: u64,
    },
}

/// One concrete fault of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Injection {
    /// The plan fault it came from.
    pub fault: String,
    pub effect: Effect,
    pub when: When,
    pub execution: u64,
    pub device: u32,
    pub core: Option<u32>,
    #[serde(with = "crate::plan::opt_engine")]
    pub engine: Option<Engine>,
    pub queue: Option<u32>,
    pub semaphore: Option<u32>,
    pub commands: Vec<u32>,
    pub location: Option<Location>,
    /// Bits of the 32-bit word a flip or stuck-at touches.
    pub mask: u32,
    /// Bit positions (0..512) a corrupt-instruction flips.
    pub word_bits: Vec<u16>,
}

fn draw(r: &mut Rng, s: Span) -> u64 {
    r.range(s.lo, s.hi)
}

/// `n` distinct values of `0..width`, ascending (n ≤ width).
fn distinct(r: &mut Rng, n: u32, width: u32) -> Vec<u32> {
    let mut picked: Vec<u32> = Vec::with_capacity(n as usize);
    // Floyd's algorithm: n draws, no rejection loop.
    for j in (width - n)..width {
        let t = r.range(0, u64::from(j) + 1) as u32;
        if picked.contains(&t) {
            picked.push(j);
        } else {
            picked.push(t);
        }
    }
    picked.sort_unstable();
    picked
}

fn mask(r: &mut Rng, bits: u32, pattern: Pattern) -> u32 {
    let bits = bits.clamp(1, 32);
    match pattern {
        Pattern::Random => distinct(r, bits, 32).iter().fold(0, |m, b| m | 1 << b),
        Pattern::Adjacent => {
            let start = r.range(0, u64::from(32 - bits) + 1) as u32;
            let run = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            run << start
        }
    }
}

impl Fault {
    /// Choose this fault's values for one experiment.
    pub fn sample(&self, limits: &Limits, r: &mut Rng) -> Injection {
        let when = match &self.trigger {
            Trigger::AtNs { ns } => When::AtNs { ns: draw(r, *ns) },
            Trigger::Instruction { nth } => When::Instruction { nth: draw(r, *nth) },
            Trigger::Pc { pc } => When::Pc { pc: draw(r, *pc) },
            Trigger::Descriptor { nth } => When::Descriptor { nth: draw(r, *nth) },
            Trigger::Notification { nth } => When::Notification { nth: draw(r, *nth) },
            Trigger::Update { nth } => When::Update { nth: draw(r, *nth) },
            Trigger::Ioctl { nth } => When::Ioctl { nth: draw(r, *nth) },
            Trigger::Probability { p } => When::Probability {
                p: *p,
                seed: r.next_u64(),
            },
        };
        let s = &self.site;
        let location = match (&self.effect, s.region) {
            (
                Effect::BitFlip { .. } | Effect::StuckAt { .. },
                Some(Region::Sbuf | Region::Psum),
            ) => {
                let sbuf = s.region == Some(Region::Sbuf);
                let pb = if sbuf {
                    limits.sbuf_partition_bytes
                } else {
                    limits.psum_partition_bytes
                };
                let parts = s.partitions.unwrap_or(Span {
                    lo: 0,
                    hi: u64::from(limits.partitions),
                });
                let offs = s.offset.unwrap_or(Span { lo: 0, hi: pb });
                let partition = draw(r, parts) as u32;
                let offset = draw(r, offs) & !3;
                Some(if sbuf {
                    Location::Sbuf { partition, offset }
                } else {
                    Location::Psum { partition, offset }
                })
            }
            (Effect::BitFlip { .. } | Effect::StuckAt { .. } | Effect::HbmUe { .. }, _) => {
                let address = match s.address {
                    Some(a) => draw(r, a),
                    None => {
                        // Any HBM byte, each HBM weighted by its size.
                        let total: u64 = limits.hbm.iter().map(|h| h.end - h.start).sum();
                        let mut at = r.range(0, total.max(1));
                        let mut addr = 0;
                        for h in &limits.hbm {
                            let len = h.end - h.start;
                            if at < len {
                                addr = h.start + at;
                                break;
                            }
                            at -= len;
                        }
                        addr
                    }
                };
                Some(Location::Hbm {
                    address: address & !3,
                })
            }
            _ => None,
        };
        let (mask, word_bits) = match self.effect {
            Effect::BitFlip { bits, pattern } | Effect::StuckAt { bits, pattern, .. } => {
                (mask(r, bits, pattern), Vec::new())
            }
            Effect::CorruptInstruction { bits } => (
                0,
                distinct(r, bits.clamp(1, 512), 512)
                    .into_iter()
                    .map(|b| b as u16)
                    .collect(),
            ),
            _ => (0, Vec::new()),
        };
        Injection {
            fault: self.id.clone(),
            effect: self.effect.clone(),
            when,
            execution: self.execution,
            device: s.device,
            core: s.core,
            engine: s.engine,
            queue: s.queue,
            semaphore: s.semaphore,
            commands: s.commands.clone(),
            location,
            mask,
            word_bits,
        }
    }
}

impl Plan {
    /// Every fault of the plan, sampled (a single faulty run applies them all).
    pub fn sample_all(&self, limits: &Limits, seed: u64) -> Vec<Injection> {
        let mut r = Rng::new(seed);
        self.faults
            .iter()
            .map(|f| f.sample(limits, &mut r))
            .collect()
    }

    /// Experiment `index` of a campaign: one fault picked by weight, then sampled (`None`
    /// only for a plan without faults, which `parse` never returns).
    pub fn experiment(&self, limits: &Limits, seed: u64, index: u64) -> Option<Injection> {
        let mut r = Rng::for_experiment(seed, index);
        let total: f64 = self.faults.iter().map(|f| f.weight).sum();
        let mut at = r.unit() * total;
        let mut pick = self.faults.last()?;
        for f in &self.faults {
            if at < f.weight {
                pick = f;
                break;
            }
            at -= f.weight;
        }
        Some(pick.sample(limits, &mut r))
    }
}
