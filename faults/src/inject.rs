//! One concrete [`Injection`] as a device hook: counts the events of its trigger within the
//! execution it targets, and applies its effect through the device's hook seam
//! (`devmodel::hooks`) at that deterministic point. Installed with `Device::set_hooks`
//! before the model is loaded; [`Injector::fired`] tells whether the trigger was reached.

use crate::plan::Effect;
use crate::rng::Rng;
use crate::sample::{Injection, Location, When};
use neuron_abi::notify::NotifyKind;
use neuron_abi::udma::UdmaDesc;
use neuron_devmodel::hooks::{
    DescAction, DeviceHooks, Dir, HookCtx, IssueAction, MemAccess, MemAction, Notice, NotifyAction,
    SemAction, Watch,
};
use neuron_devmodel::{FaultKind, Ps};
use neuron_isa::cayman::{CaymanInstr, Namespace, Opcode, WORD};
use neuron_isa::{Engine, SemUpdate, Space};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The NOTIFY hint every engine posts when an execution starts (AWS's runtime prologue,
/// `docs/isa/cayman.md` §5.4): executions are counted by these.
pub const HINT_START: u32 = 2;

/// A NaN in f32, bf16 and fp16 alike (each half and the whole word).
const NAN_WORD: u32 = 0x7FC0_7FC0;
/// +infinity in f32 (and in the upper bf16 half).
const INF_WORD: u32 = 0x7F80_0000;
/// ECC granule an HBM uncorrectable error poisons (inferred: one 64-byte burst).
const HBM_LINE: u64 = 64;
/// Time one DMA transfer is charged on trn2 before any bytes move (the fitted DMA_DIRECT2D
/// latency, `docs/timing.md`): the unit a slow queue is slowed by.
const DMA_LATENCY: Ps = Ps(1_934_000);
/// Timer tokens.
const TOKEN_AT: u64 = 1;

/// `base × k` in picoseconds, saturating (a huge slow-down factor must not wrap).
fn scaled(base: u64, k: f64) -> Ps {
    let v = base as f64 * k.max(0.0);
    Ps(if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    })
}

/// The hook applying one injection.
#[derive(Debug)]
pub struct Injector {
    inj: Injection,
    fired: Arc<AtomicBool>,
    /// Executions started per core (NOTIFY hint 2 from its Tensor engine).
    starts: Vec<u64>,
    /// The targeted execution has started.
    active: bool,
    /// Events of the trigger's kind counted in the targeted execution.
    count: u64,
    rng: Option<Rng>,
    /// The effect waits for its next opportunity (a time trigger reached between them).
    pending: bool,
    /// Effects that last: a stuck word, a slow engine or queue, a poisoned HBM line.
    stuck: Option<(u64, u32, bool)>,
    slow: Option<f64>,
    poison: Option<u64>,
    last_issue: Vec<Option<Ps>>,
    ioctls: u64,
}

impl Injector {
    pub fn new(inj: Injection) -> Injector {
        let rng = match inj.when {
            When::Probability { seed, .. } => Some(Rng::new(seed)),
            _ => None,
        };
        Injector {
            inj,
            fired: Arc::new(AtomicBool::new(false)),
            starts: Vec::new(),
            active: false,
            count: 0,
            rng,
            pending: false,
            stuck: None,
            slow: None,
            poison: None,
            last_issue: Vec::new(),
            ioctls: 0,
        }
    }

    /// Set once the trigger was reached (the effect applied).
    pub fn fired(&self) -> Arc<AtomicBool> {
        self.fired.clone()
    }

    fn fire(&mut self) {
        self.fired.store(true, Ordering::Release);
    }

    fn core_ok(&self, nc: usize) -> bool {
        self.inj.core.is_none_or(|c| c as usize == nc)
    }

    fn engine_ok(&self, nc: usize, e: Option<Engine>) -> bool {
        self.core_ok(nc) && self.inj.engine.is_none_or(|x| Some(x) == e)
    }

    /// One opportunity of the trigger's kind: does the trigger fire on it?
    fn opportunity(&mut self) -> bool {
        if !self.active {
            return false;
        }
        self.count += 1;
        match self.inj.when {
            When::Instruction { nth }
            | When::Descriptor { nth }
            | When::Notification { nth }
            | When::Update { nth } => self.count == nth,
            When::Probability { p, .. } => self.rng.as_mut().is_some_and(|r| r.unit() < p),
            _ => false,
        }
    }

    /// The memories whose accesses the injection still looks at: a stuck word's (its
    /// location's), a poisoned HBM line's (off chip), and for a NaN/Inf waiting for its
    /// engine's next write, every memory (an engine's WRITE may store off chip).
    fn watch(&self) -> Watch {
        let mut w = Watch::NONE;
        if self.stuck.is_some() {
            w = w.with(match self.inj.location {
                Some(Location::Sbuf { .. } | Location::Psum { .. }) => Watch::ON_CHIP,
                Some(Location::Hbm { .. }) => Watch::OFF_CHIP,
                None => Watch::ALL,
            });
        }
        if self.poison.is_some() {
            w = w.with(Watch::OFF_CHIP);
        }
        if self.pending && matches!(self.inj.effect, Effect::Nan | Effect::Inf) {
            w = Watch::ALL;
        }
        w
    }

    /// The device address of the injection's memory word.
    fn word_addr(&self, ctx: &HookCtx<'_>) -> Option<u64> {
        let nc = self.inj.core.unwrap_or(0) as usize;
        match self.inj.location? {
            Location::Sbuf { partition, offset } => {
                Some(ctx.window_addr(nc, Space::Sbuf, u64::from(partition), offset))
            }
            Location::Psum { partition, offset } => {
                Some(ctx.window_addr(nc, Space::Psum, u64::from(partition), offset))
            }
            Location::Hbm { address } => Some(address),
        }
    }

    /// Apply a memory effect now (flip or set the word's bits).
    fn touch_word(&mut self, ctx: &mut HookCtx<'_>) {
        let Some(addr) = self.word_addr(ctx) else {
            return;
        };
        match self.inj.effect {
            Effect::BitFlip { .. } => {
                let _ = ctx.flip_bits(addr, &self.inj.mask.to_le_bytes());
            }
            Effect::StuckAt { value, .. } => {
                self.stuck = Some((addr, self.inj.mask, value == 1));
                self.apply_stuck(ctx);
                ctx.watch_memory_too(self.watch());
            }
            _ => {}
        }
    }

    fn apply_stuck(&self, ctx: &mut HookCtx<'_>) {
        if let Some((addr, mask, one)) = self.stuck {
            let mut b = [0u8; 4];
            if ctx.read(addr, &mut b).is_ok() {
                let v = u32::from_le_bytes(b);
                let w = if one { v | mask } else { v & !mask };
                if w != v {
                    let _ = ctx.poke(addr, &w.to_le_bytes());
                }
            }
        }
    }

    /// The effect at a point in time (a timer, or an instruction-count trigger for effects
    /// that are not about the instruction itself).
    fn apply_now(&mut self, ctx: &mut HookCtx<'_>) {
        self.fire();
        let nc = self.inj.core.unwrap_or(0) as usize;
        match self.inj.effect {
            Effect::BitFlip { .. } | Effect::StuckAt { .. } => self.touch_word(ctx),
            Effect::HbmUe { .. } => {
                if let Some(Location::Hbm { address }) = self.inj.location {
                    self.poison = Some(address & !(HBM_LINE - 1));
                    ctx.watch_memory_too(self.watch());
                }
            }
            Effect::SramUe => {
                ctx.post_error(nc, None, FaultKind::SramUe, "SRAM uncorrectable error")
            }
            Effect::EngineHang => {
                if let Some(e) = self.inj.engine {
                    ctx.hang_engine(nc, e);
                }
            }
            Effect::EngineSlow { factor } | Effect::QueueSlow { factor } => {
                self.slow = Some(factor)
            }
            Effect::Nan | Effect::Inf => {
                self.pending = true;
                ctx.watch_memory_too(self.watch());
            }
            // Word, descriptor and notification effects wait for their next opportunity.
            _ => self.pending = true,
        }
    }

    fn is_dma_word(word: &[u8; WORD]) -> bool {
        Opcode::from_byte(Namespace::Loaded, word[0]) == Opcode::DmaDirect2d
    }
}

impl DeviceHooks for Injector {
    fn on_install(&mut self, ctx: &mut HookCtx<'_>) {
        let n = ctx.device().profile().nc_count;
        self.starts = vec![0; n];
        self.last_issue = vec![None; n * 5];
    }

    fn on_notify(&mut self, ctx: &mut HookCtx<'_>, n: &mut Notice) -> NotifyAction {
        if n.kind == NotifyKind::Notify && n.value == HINT_START && n.engine == 0 {
            if let Some(s) = self.starts.get_mut(n.nc) {
                *s += 1;
                let exec = *s;
                // Triggers count within the targeted execution only: the next one ends it.
                if exec > self.inj.execution && self.active {
                    self.active = false;
                    self.pending = false;
                }
                if exec == self.inj.execution
                    && !self.active
                    && self.starts.iter().filter(|v| **v >= exec).count() == 1
                {
                    self.active = true;
                    if let When::AtNs { ns } = self.inj.when {
                        let at = Ps(ctx.now().0.saturating_add(ns.saturating_mul(1000)));
                        ctx.set_timer(at, TOKEN_AT);
                    }
                }
            }
            return NotifyAction::Post;
        }
        let notify_effect = matches!(
            self.inj.effect,
            Effect::NotificationDrop
                | Effect::NotificationDuplicate
                | Effect::NotificationDelay { .. }
        );
        if notify_effect
            && self.engine_ok(n.nc, Engine::from_index(n.engine as usize))
            && (self.pending || self.opportunity())
        {
            self.pending = false;
            self.fire();
            return match self.inj.effect {
                Effect::NotificationDrop => NotifyAction::Drop,
                Effect::NotificationDuplicate => NotifyAction::Duplicate,
                Effect::NotificationDelay { delay_ns } => {
                    NotifyAction::Delay(Ps(delay_ns.saturating_mul(1000)))
                }
                _ => NotifyAction::Post,
            };
        }
        NotifyAction::Post
    }

    fn on_timer(&mut self, ctx: &mut HookCtx<'_>, token: u64) {
        if token == TOKEN_AT && self.active && !self.fired.load(Ordering::Acquire) {
            self.apply_now(ctx);
        }
    }

    fn before_issue(&mut self, ctx: &mut HookCtx<'_>, word: &mut [u8; WORD]) -> IssueAction {
        let site = ctx.site;
        let idx = site.nc * 5 + site.engine.map_or(0, Engine::index);
        // The previous issue's time, less any delay this hook added to it: the engine's own
        // gap, so a slow engine is slowed by a constant factor, not a compounding one.
        let prev = self.last_issue.get(idx).copied().flatten();
        if let Some(slot) = self.last_issue.get_mut(idx) {
            *slot = Some(site.time);
        }
        if !self.active || !self.engine_ok(site.nc, site.engine) {
            return IssueAction::Proceed;
        }
        // A DMA_DIRECT2D word names no queue of its own: a plan that names one is not met here.
        let dma_word = Self::is_dma_word(word) && self.inj.queue.is_none();
        match self.inj.effect {
            // Slow engines and queues: each issue waits (factor - 1) times the last gap.
            Effect::EngineSlow { .. } if self.slow.is_some() => {
                let f = self.slow.unwrap_or(1.0);
                let gap = prev.map_or(0, |p| site.time.0.saturating_sub(p.0));
                let delay = scaled(gap, f - 1.0);
                // The delayed issue is what the next gap is measured from.
                if let Some(slot) = self.last_issue.get_mut(idx) {
                    *slot = Some(Ps(site.time.0.saturating_add(delay.0)));
                }
                return IssueAction::Delay(delay);
            }
            Effect::QueueSlow { .. } if self.slow.is_some() && dma_word => {
                let f = self.slow.unwrap_or(1.0);
                return IssueAction::Delay(scaled(DMA_LATENCY.0, f - 1.0));
            }
            Effect::DmaError | Effect::QueueSlow { .. } => {
                // DMA_DIRECT2D words are the transfers of a NEFF body: count them as descriptors.
                if dma_word
                    && (self.pending
                        || (matches!(
                            self.inj.when,
                            When::Descriptor { .. } | When::Probability { .. }
                        ) && self.opportunity()))
                {
                    self.pending = false;
                    if let Effect::QueueSlow { factor } = self.inj.effect {
                        self.fire();
                        self.slow = Some(factor);
                        return IssueAction::Delay(scaled(DMA_LATENCY.0, factor - 1.0));
                    }
                    self.fire();
                    ctx.post_error(
                        site.nc,
                        site.engine,
                        FaultKind::DmaAbort,
                        "DMA descriptor error (injected)",
                    );
                    return IssueAction::Hang;
                }
                return IssueAction::Proceed;
            }
            _ => {}
        }
        let instr_trigger = match self.inj.when {
            When::Instruction { .. } | When::Probability { .. } => {
                // Probability counts instruction issues only for the instruction effects.
                let counts = matches!(self.inj.when, When::Instruction { .. })
                    || matches!(
                        self.inj.effect,
                        Effect::Nan
                            | Effect::Inf
                            | Effect::CorruptInstruction { .. }
                            | Effect::EngineHang
                            | Effect::EngineSlow { .. }
                    );
                counts && self.opportunity()
            }
            When::Pc { pc } => u64::from(site.pc) == pc && !self.fired.load(Ordering::Acquire),
            _ => false,
        };
        if !(instr_trigger || self.pending) {
            return IssueAction::Proceed;
        }
        match self.inj.effect {
            Effect::CorruptInstruction { .. } => {
                self.pending = false;
                self.fire();
                for b in &self.inj.word_bits {
                    let (byte, bit) = (usize::from(*b / 8), *b % 8);
                    if let Some(x) = word.get_mut(byte) {
                        *x ^= 1 << bit;
                    }
                }
                IssueAction::Proceed
            }
            Effect::EngineHang => {
                self.pending = false;
                self.fire();
                IssueAction::Hang
            }
            Effect::Nan | Effect::Inf if instr_trigger => {
                self.fire();
                self.pending = true;
                ctx.watch_memory_too(self.watch());
                IssueAction::Proceed
            }
            Effect::EngineSlow { .. } if instr_trigger => {
                self.apply_now(ctx);
                IssueAction::Proceed
            }
            _ if instr_trigger => {
                self.apply_now(ctx);
                IssueAction::Proceed
            }
            _ => IssueAction::Proceed,
        }
    }

    fn after_execute(&mut self, ctx: &mut HookCtx<'_>, _word: &CaymanInstr) -> Ps {
        if self.stuck.is_some() {
            self.apply_stuck(ctx);
        }
        Ps::ZERO
    }

    fn before_descriptor(
        &mut self,
        ctx: &mut HookCtx<'_>,
        _tx: &mut UdmaDesc,
        _rx: &mut UdmaDesc,
    ) -> DescAction {
        if self.stuck.is_some() {
            self.apply_stuck(ctx);
        }
        let site = ctx.site;
        if !self.core_ok(site.nc) || !self.active {
            return DescAction::Proceed;
        }
        if let (Some(q), Some((_, sq))) = (self.inj.queue, site.queue) {
            if q as usize != sq {
                return DescAction::Proceed;
            }
        }
        match self.inj.effect {
            Effect::QueueSlow { factor } if self.slow.is_some() => {
                DescAction::Delay(scaled(DMA_LATENCY.0, factor - 1.0))
            }
            Effect::DmaError | Effect::QueueSlow { .. } => {
                if self.pending
                    || (matches!(
                        self.inj.when,
                        When::Descriptor { .. } | When::Probability { .. }
                    ) && self.opportunity())
                {
                    self.pending = false;
                    self.fire();
                    if let Effect::QueueSlow { factor } = self.inj.effect {
                        self.slow = Some(factor);
                        return DescAction::Delay(scaled(DMA_LATENCY.0, factor - 1.0));
                    }
                    return DescAction::Abort("descriptor error (injected)".into());
                }
                DescAction::Proceed
            }
            _ => DescAction::Proceed,
        }
    }

    fn on_sem_update(&mut self, ctx: &mut HookCtx<'_>, u: &mut SemUpdate) -> SemAction {
        if !matches!(
            self.inj.effect,
            Effect::SemaphoreDrop | Effect::SemaphoreDuplicate
        ) {
            return SemAction::Apply;
        }
        if !self.core_ok(ctx.site.nc) || self.inj.semaphore.is_some_and(|s| s != u32::from(u.index))
        {
            return SemAction::Apply;
        }
        if self.opportunity() {
            self.fire();
            return if self.inj.effect == Effect::SemaphoreDrop {
                SemAction::Drop
            } else {
                SemAction::Duplicate
            };
        }
        SemAction::Apply
    }

    fn on_mem_access(
        &mut self,
        ctx: &mut HookCtx<'_>,
        a: &MemAccess,
        data: &mut [u8],
    ) -> MemAction {
        if let (Some((addr, mask, one)), Dir::Read) = (self.stuck, a.dir) {
            // A read of the stuck word sees its bits forced, whoever wrote it last.
            if addr >= a.addr && addr + 4 <= a.addr.saturating_add(a.len) {
                let at = (addr - a.addr) as usize;
                if let Some(w) = data.get_mut(at..at + 4) {
                    let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    let f = if one { v | mask } else { v & !mask };
                    w.copy_from_slice(&f.to_le_bytes());
                }
            }
        }
        if let Some(line) = self.poison {
            if a.dir == Dir::Read && a.addr < line + HBM_LINE && line < a.addr.saturating_add(a.len)
            {
                let repairable = matches!(self.inj.effect, Effect::HbmUe { repairable: true });
                let site = ctx.site;
                ctx.post_error(
                    site.nc,
                    site.engine,
                    FaultKind::HbmUe { repairable },
                    format!("uncorrectable HBM error at {line:#x}"),
                );
                return MemAction::Fail;
            }
        }
        if self.pending
            && a.dir == Dir::Write
            && matches!(self.inj.effect, Effect::Nan | Effect::Inf)
        {
            let site = ctx.site;
            if self.engine_ok(site.nc, site.engine) && site.engine.is_some() && data.len() >= 4 {
                let nan = self.inj.effect == Effect::Nan;
                let w = if nan { NAN_WORD } else { INF_WORD };
                data[..4].copy_from_slice(&w.to_le_bytes());
                self.pending = false;
                // Nothing more to see in memory: later words take the unwatched paths (the
                // same results; every operand's bytes were copied out and back otherwise).
                ctx.watch_memory_in(self.watch());
                // The engines flag a NaN they produce (an overflow to infinity is not an
                // error: `users-faults-and-tools.md` §2.1); execution goes on.
                if nan {
                    if let Some(e) = site.engine {
                        ctx.report_error(site.nc, e, FaultKind::Numerical, "NaN in the result");
                    }
                }
            }
        }
        MemAction::Proceed
    }

    fn on_ioctl(&mut self, cmd: u32, _pid: u32) -> Option<i32> {
        let Effect::IoctlFail { errno } = self.inj.effect else {
            return None;
        };
        if !self.inj.commands.contains(&cmd) {
            return None;
        }
        self.ioctls += 1;
        let hit = match self.inj.when {
            When::Ioctl { nth } => self.ioctls == nth,
            When::Probability { p, .. } => self.rng.as_mut().is_some_and(|r| r.unit() < p),
            _ => false,
        };
        if hit {
            self.fire();
            Some(errno)
        } else {
            None
        }
    }
}

/// Several injections at once (every fault of a plan, for a single faulty run): each sees
/// every event; the first that alters one decides what happens to it.
#[derive(Debug, Default)]
pub struct InjectorSet(pub Vec<Injector>);

impl InjectorSet {
    /// Every fault of `plan`, sampled with `seed`.
    pub fn from_plan(
        plan: &crate::plan::Plan,
        limits: &crate::plan::Limits,
        seed: u64,
    ) -> InjectorSet {
        InjectorSet(
            plan.sample_all(limits, seed)
                .into_iter()
                .map(Injector::new)
                .collect(),
        )
    }

    /// The `fired` flags, in plan order.
    pub fn fired(&self) -> Vec<Arc<AtomicBool>> {
        self.0.iter().map(Injector::fired).collect()
    }
}

impl InjectorSet {
    /// Ask every injector (each must see every event); the first answer other than
    /// `unchanged` decides.
    fn first<A: PartialEq>(&mut self, unchanged: A, mut ask: impl FnMut(&mut Injector) -> A) -> A {
        let mut out = unchanged;
        let mut decided = false;
        for i in &mut self.0 {
            let a = ask(i);
            if !decided && a != out {
                out = a;
                decided = true;
            }
        }
        out
    }
}

impl DeviceHooks for InjectorSet {
    fn on_install(&mut self, ctx: &mut HookCtx<'_>) {
        self.0.iter_mut().for_each(|i| i.on_install(ctx));
    }
    fn on_notify(&mut self, ctx: &mut HookCtx<'_>, n: &mut Notice) -> NotifyAction {
        self.first(NotifyAction::Post, |i| i.on_notify(ctx, n))
    }
    fn on_timer(&mut self, ctx: &mut HookCtx<'_>, token: u64) {
        self.0.iter_mut().for_each(|i| i.on_timer(ctx, token));
    }
    fn before_issue(&mut self, ctx: &mut HookCtx<'_>, word: &mut [u8; WORD]) -> IssueAction {
        self.first(IssueAction::Proceed, |i| i.before_issue(ctx, word))
    }
    fn after_execute(&mut self, ctx: &mut HookCtx<'_>, word: &CaymanInstr) -> Ps {
        let mut extra = Ps::ZERO;
        for i in &mut self.0 {
            extra = Ps(extra.0.max(i.after_execute(ctx, word).0));
        }
        extra
    }
    fn before_descriptor(
        &mut self,
        ctx: &mut HookCtx<'_>,
        tx: &mut UdmaDesc,
        rx: &mut UdmaDesc,
    ) -> DescAction {
        self.first(DescAction::Proceed, |i| i.before_descriptor(ctx, tx, rx))
    }
    fn on_sem_update(&mut self, ctx: &mut HookCtx<'_>, u: &mut SemUpdate) -> SemAction {
        self.first(SemAction::Apply, |i| i.on_sem_update(ctx, u))
    }
    fn on_mem_access(
        &mut self,
        ctx: &mut HookCtx<'_>,
        a: &MemAccess,
        data: &mut [u8],
    ) -> MemAction {
        let r = self.first(MemAction::Proceed, |i| i.on_mem_access(ctx, a, data));
        // One injection done with memory narrows the watch to its own; the others' stay.
        let w = self.0.iter().fold(Watch::NONE, |w, i| w.with(i.watch()));
        ctx.watch_memory_in(w);
        r
    }
    fn on_ioctl(&mut self, cmd: u32, pid: u32) -> Option<i32> {
        self.first(None, |i| i.on_ioctl(cmd, pid))
    }
}
