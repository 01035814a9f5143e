//! Notification queues: configuring them, posting 16-byte entries (payload first, the word
//! holding the phase bit last), and faults, which post an ERROR entry as the hardware does.

use super::{Device, Ev, NQ_ERROR};
use crate::fault::{Fault, FaultKind, OpFault};
use crate::hooks::{Notice, NotifyAction};
use neuron_abi::notify::{NotificationEntry, NotifyKind, ENTRY_SIZE};
use neuron_isa::Engine;

#[derive(Debug, Clone, Copy)]
pub(super) struct Nq {
    pub(super) base: u64,
    pub(super) entries: u64,
    /// Entries posted since the queue was configured.
    pub(super) index: u64,
}

impl Device {
    /// Point notification queue (`nq_type`, `engine_index`) of core `nc` at `size` bytes of
    /// device memory at `base` (`size` a power of two, checked by the caller).
    pub fn nq_configure(
        &mut self,
        nc: usize,
        nq_type: u8,
        engine_index: u8,
        base: u64,
        size: u64,
    ) -> bool {
        let Some(c) = self.cores.get_mut(nc) else {
            return false;
        };
        c.nqs.insert(
            (nq_type, engine_index),
            Nq {
                base,
                entries: size / ENTRY_SIZE as u64,
                index: 0,
            },
        );
        true
    }

    /// Post a notification (through the notification hook, when one is installed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn post(
        &mut self,
        nc: usize,
        nq_type: u8,
        engine_index: u8,
        kind: NotifyKind,
        engine: u8,
        value: u32,
        pc: u32,
    ) {
        let mut n = Notice {
            nc,
            nq_type,
            engine_index,
            kind,
            engine,
            value,
            pc,
        };
        if self.hooks.0.is_some() {
            let site = self.site(nc, Engine::from_index(engine as usize), pc, 0);
            match self.call_hook(site, |h, c| h.on_notify(c, &mut n)) {
                Some(NotifyAction::Drop) => return,
                Some(NotifyAction::Duplicate) => self.post_notice(n),
                Some(NotifyAction::Delay(d)) => {
                    let at = self.now + d;
                    return self.schedule(at, Ev::Notice(n));
                }
                _ => {}
            }
        }
        self.post_notice(n);
    }

    /// Write a notification into its queue now.
    pub(super) fn post_notice(&mut self, n: Notice) {
        let Some(q) = self
            .cores
            .get_mut(n.nc)
            .and_then(|c| c.nqs.get_mut(&(n.nq_type, n.engine_index)))
        else {
            self.stats.dropped_notifications += 1;
            return;
        };
        if q.entries == 0 {
            self.stats.dropped_notifications += 1;
            return;
        }
        let slot = q.index % q.entries;
        let phase = (q.index / q.entries) % 2 == 0;
        q.index += 1;
        let addr = q.base + slot * ENTRY_SIZE as u64;
        let e = NotificationEntry::new(n.kind, n.engine, n.value, n.pc, self.now.0, phase);
        let bytes = zerocopy::IntoBytes::as_bytes(&e);
        self.stats.notifications += 1;
        if let Some(t) = self.trace.as_mut() {
            t.mark(crate::stats::TraceMark::Notify {
                nc: n.nc,
                at: self.now,
                engine: n.engine,
                kind: n.kind.bits(),
                value: n.value,
                pc: n.pc,
            });
        }
        // Publish the payload first and the word holding the phase bit last.
        if let Ok((crate::addrmap::Target::Host(s), off)) =
            self.resolve(addr, bytes.len() as u64, true)
        {
            if let Some((_, r)) = self.host.get(s as usize).and_then(|s| s.as_ref()) {
                r.write(off as usize + 4, &bytes[4..]);
                r.store_u32_release(off as usize, e.word0);
                return;
            }
        } else if !neuron_abi::addr::DevAddr(addr).is_host(self.profile.arch)
            && self.write(addr + 4, &bytes[4..]).is_ok()
            && self.write(addr, &bytes[..4]).is_ok()
        {
            return;
        }
        self.stats.dropped_notifications += 1;
    }

    /// Record a fault and post its ERROR notification.
    pub(super) fn fault(
        &mut self,
        nc: usize,
        engine: Option<Engine>,
        pc: u32,
        opcode: u8,
        f: OpFault,
    ) {
        let fault = Fault {
            kind: f.kind,
            nc,
            engine,
            pc,
            opcode,
            detail: f.detail,
        };
        tracing::debug!(target: "devmodel", "fault: {fault}");
        self.ecc.record(fault.kind);
        let eidx = engine.map(|e| e.index() as u8).unwrap_or(7);
        self.post(
            nc,
            NQ_ERROR,
            0,
            NotifyKind::Error,
            eidx,
            fault.kind.code(),
            pc,
        );
        self.faults.push(fault);
    }

    /// A hook's error, posted as the hardware would; the engine, if named, stops.
    pub(crate) fn hook_fault(
        &mut self,
        nc: usize,
        engine: Option<Engine>,
        pc: u32,
        opcode: u8,
        kind: FaultKind,
        detail: String,
    ) {
        if nc >= self.cores.len() {
            return;
        }
        if let Some(e) = engine {
            self.cores[nc].engines[e.index()].status = super::engine::EngStatus::Faulted;
        }
        self.fault(nc, engine, pc, opcode, OpFault { kind, detail });
    }

    /// A hook's error report for an engine that carries on (a flagged NaN): the ERROR
    /// notification and the recorded fault, without stopping the engine.
    pub(crate) fn hook_report(
        &mut self,
        nc: usize,
        engine: Engine,
        pc: u32,
        opcode: u8,
        kind: FaultKind,
        detail: String,
    ) {
        if nc < self.cores.len() {
            self.fault(nc, Some(engine), pc, opcode, OpFault { kind, detail });
        }
    }
}
