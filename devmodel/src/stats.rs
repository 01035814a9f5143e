//! What a run is measured by: event and transfer counters ([`Stats`]), host time per
//! instruction kind ([`HostProfile`], off unless asked for) and timeline spans
//! ([`TraceEvent`]) and points ([`TraceMark`]: register updates, notifications, DMA_DIRECT2D
//! transfers), for Perfetto traces and profiles; recorded only while tracing is on.

use crate::time::Ps;

/// Counters for benchmarks and reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub events: u64,
    pub instructions: u64,
    pub dma_descriptors: u64,
    pub dma_bytes: u64,
    pub notifications: u64,
    pub dropped_notifications: u64,
    /// Multiply-adds the model ran through the host SGEMM (MATMULs other than transposes
    /// done as data movement): the host compute floor of an execution.
    pub sgemm_macs: u64,
    /// Multiply-adds run on AMX tiles instead (bf16, fp8 and fp16 operands on an AMX host,
    /// `gemm::amx`): `sgemm_macs + amx_macs` is every non-transpose MATMUL's host math.
    pub amx_macs: u64,
    /// Of `sgemm_macs`, the bf16 × bf16 multiply-adds run on `VDPBF16PS` (`gemm::dot`, the
    /// same bits as the SGEMM's FMAs).
    pub dot_macs: u64,
    /// Data-path words that ran on their core's own host thread (`device::lane`) rather
    /// than on the device thread.
    pub lane_thread_words: u64,
    /// Data-path words deferred on the device thread to their completion so that another
    /// core's words could go to their thread first (`LaneSlot::defer`, `auto` only).
    pub deferred_words: u64,
    /// Multiply-adds the kernel's MATMULs need, by moving dtype code (`Dtype as u8`): an fp32
    /// LOW/HIGH pass pair counts once whether or not it was fused; transposes done as data
    /// movement not at all. The compute part of `bench real`'s floor.
    pub math_macs: [u64; 16],
    /// SBUF/PSUM bytes the data-path words' operands read and write as the kernel needs them
    /// (`cayman_exec::operand_bytes`: each operand once, an fp32 pass pair once): the
    /// on-chip part of `bench real`'s on-chip floor. Counted only while
    /// `cayman_exec::count_onchip` is on (else 0).
    pub onchip_bytes: u64,
}

/// Host wall time the model spent issuing each kind of instruction (data path included):
/// where an emulation's host time goes. Off unless asked for; it is not part of the device's
/// deterministic state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostProfile {
    /// Mnemonic -> (instructions issued, host nanoseconds).
    pub ops: std::collections::BTreeMap<&'static str, (u64, u64)>,
    /// Every word issued, in issue order, with its host time and operands, where asked for
    /// (`Device::keep_host_words`; at most [`HostProfile::MAX_WORDS`], then `words_dropped`
    /// counts the rest): what a schedule of the words on several threads could overlap.
    pub words: Vec<HostWord>,
    pub keep_words: bool,
    pub words_dropped: u64,
    /// When the first word was kept: `HostWord::at_ns` counts from here.
    pub started: Option<std::time::Instant>,
}

/// One issued word in a host profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostWord {
    pub nc: usize,
    pub engine: &'static str,
    pub pc: u32,
    pub name: &'static str,
    /// Host nanoseconds from issue to the word's data path done (inline).
    pub ns: u64,
    /// Host nanoseconds from the profile's start to the word's issue: the gaps between
    /// words are the device thread's time outside them (events, DMA rings, waiting).
    pub at_ns: u64,
    /// The SBUF/PSUM bytes it reads and writes (`cayman_exec::operands`; empty for words
    /// without such operands, DMAs included).
    pub operands: Vec<crate::cayman_exec::Operand>,
}

impl HostProfile {
    /// Words kept per profile: 1 Mi words (about 100 MB) at most.
    pub const MAX_WORDS: usize = 1 << 20;

    pub(crate) fn record(&mut self, name: &'static str, d: std::time::Duration) {
        let e = self.ops.entry(name).or_default();
        e.0 += 1;
        e.1 += u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Host nanoseconds from the first kept word's issue (this one's, if none was kept yet)
    /// to `t`.
    pub(crate) fn since_start(&mut self, t: std::time::Instant) -> u64 {
        let s = *self.started.get_or_insert(t);
        u64::try_from(t.saturating_duration_since(s).as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn record_word(&mut self, w: HostWord) {
        if self.words.len() < Self::MAX_WORDS {
            self.words.push(w);
        } else {
            self.words_dropped += 1;
        }
    }
}

/// One span on the device timeline (for Perfetto/Chrome trace output and profiles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    pub nc: usize,
    /// "Tensor", "Scalar", ... or "DMA e.q".
    pub track: String,
    pub name: &'static str,
    pub pc: u32,
    pub start: Ps,
    pub dur: Ps,
    /// An engine word: the word as it issued (its operands, for profiles), shared with the
    /// device's decode cache, so recording it costs no copy.
    pub word: Option<std::sync::Arc<neuron_isa::cayman::CaymanInstr>>,
    /// An engine word: the semaphore/event conditions it waited for (header, body).
    pub waits: [Option<neuron_isa::SemWait>; 2],
    /// A DMA descriptor: bytes moved.
    pub bytes: u64,
}

/// A point on the device timeline that is not an engine's or queue's span: kept apart from
/// the spans ([`Device::take_marks`](crate::Device::take_marks)) so span consumers see what
/// they always saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceMark {
    /// A semaphore (`event` false) or event register of core `nc` took a new value: seen when
    /// the core's blocked engines are woken, which every register change does. An event
    /// cleared by the wait that consumed it is not a mark.
    Reg {
        nc: usize,
        at: Ps,
        index: u8,
        event: bool,
        value: i32,
    },
    /// A notification was written into a queue of core `nc`.
    Notify {
        nc: usize,
        at: Ps,
        /// Reporting engine (index), kind bits (`abi::notify::NotifyKind::bits`), value, pc.
        engine: u8,
        kind: u8,
        value: u32,
        pc: u32,
    },
    /// A DMA_DIRECT2D that engine `engine` of core `nc` issued at `pc`: from its transfer's
    /// start (for a software-DGE DMA, the DGE's latency after the issue) to its completion
    /// update (`semaphore += increment`).
    Dma2d {
        nc: usize,
        engine: usize,
        pc: u32,
        start: Ps,
        end: Ps,
        bytes: u64,
        semaphore: u8,
        increment: u32,
    },
}

/// What the device records while tracing: spans, marks, and the register values last seen
/// per core (to tell which registers a wake-up changed).
#[derive(Debug, Default)]
pub(crate) struct Trace {
    pub(crate) spans: Vec<TraceEvent>,
    pub(crate) marks: Vec<TraceMark>,
    /// Per core: semaphore values then event values, as last recorded.
    seen: Vec<Vec<i32>>,
}

/// Semaphores (and events) per core page.
const REGS: usize = crate::regs::COUNT;

impl Trace {
    /// Start recording with the registers as they are now.
    pub(crate) fn new<'a>(pages: impl Iterator<Item = &'a crate::regs::RegPage>) -> Trace {
        let seen = pages.map(snapshot).collect();
        Trace {
            seen,
            ..Trace::default()
        }
    }

    pub(crate) fn push(&mut self, e: TraceEvent) {
        self.spans.push(e);
    }

    pub(crate) fn mark(&mut self, m: TraceMark) {
        self.marks.push(m);
    }

    /// Core `nc`'s registers may have changed (its engines are being woken): mark each
    /// semaphore that differs from what was seen, and each event that became set.
    pub(crate) fn regs_changed(&mut self, nc: usize, page: &crate::regs::RegPage, at: Ps) {
        let Some(seen) = self.seen.get_mut(nc) else {
            return;
        };
        for i in 0..REGS {
            let idx = i as u8;
            let (s, e) = (page.sem(idx), page.event(idx) as i32);
            if seen[i] != s {
                seen[i] = s;
                self.marks.push(TraceMark::Reg {
                    nc,
                    at,
                    index: idx,
                    event: false,
                    value: s,
                });
            }
            if seen[REGS + i] != e {
                seen[REGS + i] = e;
                if e != 0 {
                    self.marks.push(TraceMark::Reg {
                        nc,
                        at,
                        index: idx,
                        event: true,
                        value: e,
                    });
                }
            }
        }
    }
}

fn snapshot(p: &crate::regs::RegPage) -> Vec<i32> {
    let mut v: Vec<i32> = (0..REGS).map(|i| p.sem(i as u8)).collect();
    v.extend((0..REGS).map(|i| p.event(i as u8) as i32));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake-up marks exactly the registers that changed since the last one, events only
    /// when they become set.
    #[test]
    fn register_changes_are_marked_once() {
        let page = crate::regs::RegPage::new();
        page.set_sem(3, 5);
        let mut t = Trace::new(std::iter::once(&page));
        t.regs_changed(0, &page, Ps(1));
        assert!(t.marks.is_empty(), "nothing changed since tracing began");
        page.add_sem(3, 1);
        page.set_event(7, 1);
        t.regs_changed(0, &page, Ps(2));
        page.set_event(7, 0);
        t.regs_changed(0, &page, Ps(3));
        t.regs_changed(1, &page, Ps(4));
        assert_eq!(
            t.marks,
            vec![
                TraceMark::Reg {
                    nc: 0,
                    at: Ps(2),
                    index: 3,
                    event: false,
                    value: 6
                },
                TraceMark::Reg {
                    nc: 0,
                    at: Ps(2),
                    index: 7,
                    event: true,
                    value: 1
                },
            ]
        );
    }

    /// A traced run records the word with its operands and wait, the semaphore update it made
    /// and the notification it posted; an untraced run records nothing.
    #[test]
    fn a_traced_device_records_words_updates_and_notifications() {
        use neuron_isa::cayman::build as b;
        use neuron_isa::Engine;
        let run = |trace: bool| {
            let mut dev = crate::Device::new(crate::ArchProfile::new(neuron_abi::Arch::V3Trn2));
            dev.nq_configure(0, 1, 0, 0x40_0000, 4096);
            dev.set_tracing(trace);
            let words = [b::event_semaphore((0, 0, 0), 0x13, 7, 0), b::notify(2)];
            let port = dev.instr_port(0, Engine::Pe);
            dev.write(port, &words.concat()).expect("instruction port");
            dev.run(1000);
            (dev.take_trace(), dev.take_marks())
        };
        let (spans, marks) = run(true);
        assert_eq!(spans.len(), 2);
        assert!(spans.iter().all(|s| s.word.is_some()), "{spans:?}");
        let reg = marks.iter().find_map(|m| match m {
            TraceMark::Reg {
                index: 7, value, ..
            } => Some(*value),
            _ => None,
        });
        assert_eq!(reg, Some(1), "{marks:?}");
        assert!(marks.iter().any(|m| matches!(
            m,
            TraceMark::Notify {
                value: 2,
                pc: 1,
                ..
            }
        )));
        assert_eq!(run(false), (Vec::new(), Vec::new()));
    }

    #[test]
    fn host_profile_counts_and_sums() {
        let mut p = HostProfile::default();
        p.record("MATMUL", std::time::Duration::from_nanos(5));
        p.record("MATMUL", std::time::Duration::from_nanos(7));
        p.record("COPY", std::time::Duration::from_secs(u64::MAX));
        assert_eq!(p.ops["MATMUL"], (2, 12));
        assert_eq!(
            p.ops["COPY"],
            (1, u64::MAX),
            "saturates instead of wrapping"
        );
    }
}
