//! Semaphores and events: host register writes, the mailboxes of user-space stores, updates
//! at an instruction's or a DMA's completion (through the semaphore hook), and waking the
//! engines blocked on a core's registers.

use super::{engine::EngStatus, Device, Ev, ENGINES};
use crate::hooks::SemAction;
use neuron_isa::{Engine, SemOp, SemUpdate};

impl Device {
    /// A semaphore/event register write by the host (ioctl or BAR path): applied now.
    pub fn reg_write(&mut self, nc: usize, page_off: u64, v: u32) -> bool {
        let Some(c) = self.cores.get(nc) else {
            return false;
        };
        let ok = c.regs.write_reg(page_off, v);
        if ok {
            self.wake_blocked(nc);
        }
        ok
    }

    /// Whether user space left a store in any core's register mailboxes.
    pub fn has_mail(&self) -> bool {
        self.cores.iter().any(|c| c.regs.has_mail())
    }

    /// [`Device::has_mail`] where no mapping of a register page takes stores untrapped
    /// (`regs::RegPage::has_posted_mail`).
    pub fn has_posted_mail(&self) -> bool {
        self.cores.iter().any(|c| c.regs.has_posted_mail())
    }

    /// Apply stores user space made through mapped register pages. Call only at quiescent
    /// points (see `regs`). Returns whether anything changed.
    pub fn drain_mailboxes(&mut self) -> bool {
        let mut any = false;
        for nc in 0..self.cores.len() {
            if self.cores[nc].regs.drain_mailboxes() {
                any = true;
                self.wake_blocked(nc);
            }
        }
        any
    }

    /// A core's registers changed: its blocked engines look at their waits again.
    pub(super) fn wake_blocked(&mut self, nc: usize) {
        let now = self.now;
        if let (Some(t), Some(c)) = (self.trace.as_mut(), self.cores.get(nc)) {
            t.regs_changed(nc, &c.regs, now);
        }
        for e in 0..ENGINES {
            let st = &mut self.cores[nc].engines[e];
            if st.status == EngStatus::Blocked && !st.scheduled {
                st.scheduled = true;
                st.status = EngStatus::Idle;
                self.schedule(now, Ev::Step(nc, e));
            }
        }
    }

    /// Apply a completion's semaphore/event update on core `nc` (`e`, `pc`: the engine whose
    /// word it completes, if any), through the semaphore hook when one is installed.
    pub(super) fn update_sem(&mut self, nc: usize, e: Option<usize>, pc: u32, mut u: SemUpdate) {
        if nc >= self.cores.len() {
            return;
        }
        let mut times = 1;
        if self.hooks.0.is_some() {
            let site = self.site(nc, e.and_then(Engine::from_index), pc, 0);
            times = match self.call_hook(site, |h, c| h.on_sem_update(c, &mut u)) {
                Some(SemAction::Drop) => 0,
                Some(SemAction::Duplicate) => 2,
                _ => 1,
            };
        }
        for _ in 0..times {
            let regs = &self.cores[nc].regs;
            match u.op {
                SemOp::Inc => regs.add_sem(u.index, 1),
                SemOp::Dec => regs.add_sem(u.index, -1),
                SemOp::Add => regs.add_sem(u.index, u.value),
                SemOp::Set => regs.set_sem(u.index, u.value),
                SemOp::EventSet => regs.set_event(u.index, 1),
            }
        }
        if times > 0 {
            self.wake_blocked(nc);
        }
    }
}
