//! Calling the installed hook: installing it, the call itself (the hook is taken out of the
//! device while it runs, so what it does through its context never re-enters it), the
//! hook-aware memory accesses of DMAs and engines, timers and ioctls.

use super::{Device, Ev, MemError};
use crate::addrmap::Target;
use crate::arch::tpb;
use crate::cayman_exec::Operand;
use crate::fault::OpFault;
use crate::hooks::{DeviceHooks, Dir, HookCtx, MemAccess, MemAction, Site, Watch};
use crate::time::Ps;
use neuron_isa::{Engine, Space};

impl Device {
    /// Install (or, with `None`, remove) the device's hooks. An installed hook's
    /// `on_install` runs at once.
    pub fn set_hooks(&mut self, hooks: Option<Box<dyn DeviceHooks>>) {
        self.set_mem_watch(Watch::NONE);
        // A hook may write memory between the two passes of an fp32 pass pair, which a fused
        // pair would not see: with hooks installed every pass runs as issued.
        let fuse = hooks.is_none() && crate::cayman_exec::passpair_enabled();
        for c in &mut self.cores {
            c.lane.get().pe.fuse = fuse;
        }
        self.hooks.0 = hooks;
        let site = self.site(0, None, 0, 0);
        self.call_hook(site, |h, c| h.on_install(c));
    }

    /// Whether hooks are installed.
    pub fn has_hooks(&self) -> bool {
        self.hooks.0.is_some()
    }

    /// Ask the hook about ioctl `cmd` from process `pid` (the emulator calls this before
    /// handling it): `Some(errno)` fails the ioctl.
    pub fn hook_ioctl(&mut self, cmd: u32, pid: u32) -> Option<i32> {
        let h = self.hooks.0.as_mut()?;
        h.on_ioctl(cmd, pid)
    }

    /// Run `f` on the installed hook, if any.
    #[inline]
    pub(super) fn call_hook<R>(
        &mut self,
        site: Site,
        f: impl FnOnce(&mut dyn DeviceHooks, &mut HookCtx<'_>) -> R,
    ) -> Option<R> {
        let mut h = self.hooks.0.take()?;
        let r = f(&mut *h, &mut HookCtx { dev: self, site });
        self.hooks.0 = Some(h);
        Some(r)
    }

    /// The call site on core `nc` (engine `engine` at `pc`, or a device-level one) now.
    pub(super) fn site(&self, nc: usize, engine: Option<Engine>, pc: u32, opcode: u8) -> Site {
        Site {
            time: self.now,
            nc,
            engine,
            queue: None,
            pc,
            opcode,
        }
    }

    pub(crate) fn set_mem_watch(&mut self, w: Watch) {
        self.watch = w;
    }

    /// The memories the memory-access hook is shown now.
    pub(crate) fn mem_watch(&self) -> Watch {
        self.watch
    }

    /// Schedule a hook timer (deterministic: an event at device time `at`).
    pub(crate) fn hook_timer(&mut self, at: Ps, token: u64) {
        let at = at.max(self.now);
        self.schedule(at, Ev::Timer(token));
    }

    pub(super) fn deliver_timer(&mut self, token: u64) {
        let site = self.site(0, None, 0, 0);
        self.call_hook(site, |h, c| h.on_timer(c, token));
    }

    /// A DMA's or an engine's read: through the memory hook while it watches.
    #[inline]
    pub(super) fn hooked_read(
        &mut self,
        addr: u64,
        buf: &mut [u8],
        site: impl FnOnce(&Device) -> Site,
    ) -> Result<(), MemError> {
        if !self.watch.any() {
            return self.read(addr, buf);
        }
        let (target, offset) = self.resolve(addr, buf.len() as u64, false)?;
        self.read_at(target, offset, addr, buf)?;
        if !self.watch.shows(target) {
            return Ok(());
        }
        let a = MemAccess {
            dir: Dir::Read,
            target,
            offset,
            addr,
            len: buf.len() as u64,
        };
        self.mem_hook(site(self), &a, buf)
    }

    /// A DMA's or an engine's write: through the memory hook (which may alter `data`) while
    /// it watches.
    #[inline]
    pub(super) fn hooked_write(
        &mut self,
        addr: u64,
        data: &mut [u8],
        site: impl FnOnce(&Device) -> Site,
    ) -> Result<(), MemError> {
        if !self.watch.any() {
            return self.write(addr, data);
        }
        let (target, offset) = self.resolve(addr, data.len() as u64, true)?;
        if !self.watch.shows(target) {
            return self.write_at(target, offset, addr, data);
        }
        let a = MemAccess {
            dir: Dir::Write,
            target,
            offset,
            addr,
            len: data.len() as u64,
        };
        self.mem_hook(site(self), &a, data)?;
        self.write_at(target, offset, addr, data)
    }

    fn mem_hook(&mut self, site: Site, a: &MemAccess, data: &mut [u8]) -> Result<(), MemError> {
        match self.call_hook(site, |h, c| h.on_mem_access(c, a, data)) {
            Some(MemAction::Fail) => Err(MemError {
                addr: a.addr,
                len: a.len,
                reason: "uncorrectable memory error",
            }),
            _ => Ok(()),
        }
    }

    /// Report a data-path word's SBUF/PSUM operands of one direction to the memory hook, one
    /// call per partition, with the memory's bytes; what the hook changes lands in memory.
    pub(super) fn report_operands(
        &mut self,
        site: Site,
        ops: &[Operand],
        write: bool,
    ) -> Result<(), OpFault> {
        let nc = site.nc;
        let mut buf = Vec::new();
        for op in ops.iter().filter(|o| o.write == write) {
            let (target, base, stride) = match op.space {
                Space::Sbuf => (
                    Target::Sbuf(nc as u8),
                    tpb::SBUF,
                    tpb::SBUF_PARTITION_STRIDE,
                ),
                Space::Psum => (
                    Target::Psum(nc as u8),
                    tpb::PSUM,
                    tpb::PSUM_PARTITION_STRIDE,
                ),
            };
            let window = self.profile.tpb_base(nc) + base;
            let len = op.hi - op.lo;
            for p in 0..op.channels as u64 {
                let offset = p * stride + op.lo;
                let mem = &self.cores[nc].lane.get().mem;
                let at = mem.storage_at(op.space, offset as usize);
                let r = at..at + len as usize;
                let Some(bytes) = mem.bytes(op.space).get(r.clone()) else {
                    continue;
                };
                buf.clear();
                buf.extend_from_slice(bytes);
                let a = MemAccess {
                    dir: if write { Dir::Write } else { Dir::Read },
                    target,
                    offset,
                    addr: window + offset,
                    len,
                };
                if self.mem_hook(site, &a, &mut buf).is_err() {
                    return Err(OpFault::oob(format!(
                        "{:?} partition {p} bytes {}..{}: uncorrectable memory error",
                        op.space, op.lo, op.hi
                    )));
                }
                // Only what the hook changed is written back: taking the bytes to write
                // marks them written (a kept PSUM page is copied first).
                let mem = &mut self.cores[nc].lane.get().mem;
                if mem.bytes(op.space).get(r.clone()) != Some(buf.as_slice()) {
                    if let Some(m) = mem.bytes_mut(op.space).get_mut(r) {
                        m.copy_from_slice(&buf);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::hooks::DeviceHooks;
    use crate::{ArchProfile, Device};

    struct Nop;
    impl DeviceHooks for Nop {}

    /// Hooks turn pass-pair fusion off on every core (also across a core reset) and removing
    /// them restores the default.
    #[test]
    fn hooks_turn_pass_pair_fusion_off() {
        let mut d = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let default = crate::cayman_exec::passpair_enabled();
        assert!(d.cores.iter_mut().all(|c| c.lane.get().pe.fuse == default));
        d.set_hooks(Some(Box::new(Nop)));
        assert!(d.cores.iter_mut().all(|c| !c.lane.get().pe.fuse));
        d.reset_nc(0);
        assert!(!d.cores[0].lane.get().pe.fuse);
        d.set_hooks(None);
        assert!(d.cores.iter_mut().all(|c| c.lane.get().pe.fuse == default));
    }
}
