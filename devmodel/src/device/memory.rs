//! Device memory through the address map: HBM, host regions (they come and go), and each
//! core's TPB window (SBUF and PSUM partitions, the register page, instruction ports, the
//! DGE-table register), read, written and filled.

use super::{Device, Ev, MAX_PENDING_INSTR_BYTES};
use crate::addrmap::Target;
use crate::arch::tpb;
use crate::hostmem::HostRegion;
use neuron_abi::addr::{BusAddr, DevAddr};
use neuron_isa::{Engine, Space};
use std::fmt;

/// A device address that no memory answers, or an access the target cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemError {
    pub addr: u64,
    pub len: u64,
    pub reason: &'static str,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device address 0x{:x} (+{} bytes): {}",
            self.addr, self.len, self.reason
        )
    }
}
impl std::error::Error for MemError {}

const NOT_READABLE: &str =
    "not a readable NeuronCore address (outside SBUF/PSUM partitions or registers)";
const NOT_WRITABLE: &str = "not a writable NeuronCore address";

fn err(addr: u64, len: u64, reason: &'static str) -> MemError {
    MemError { addr, len, reason }
}

impl Device {
    // ---------------------------------------------------------------- host memory

    /// Put `region` at bus address `pa` (replacing a region already there); refused (region
    /// handed back) if it would overlap another.
    fn insert_host(&mut self, pa: u64, region: HostRegion) -> Result<*mut u8, HostRegion> {
        self.remove_host_region(pa);
        let p = region.as_ptr();
        let slot = self.host.iter().position(Option::is_none);
        let slot = slot.unwrap_or(self.host.len());
        let dev = BusAddr(pa).to_dev(self.profile.arch);
        // A zero-length region answers no address, so it has no range.
        if !region.is_empty() {
            let t = Target::Host(slot as u32);
            if self.map.insert(dev, region.len() as u64, t).is_err() {
                return Err(region);
            }
        }
        if slot == self.host.len() {
            self.host.push(Some((pa, region)));
        } else {
            self.host[slot] = Some((pa, region));
        }
        Ok(p)
    }

    fn host_slot(&self, pa: u64) -> Option<usize> {
        self.host
            .iter()
            .position(|s| s.as_ref().is_some_and(|(a, _)| *a == pa))
    }

    /// Register a host ("coherent DMA") region at host physical address `pa` (without the
    /// arch host bit). Returns its address for user mappings; `None` if it cannot be
    /// allocated or overlaps another region.
    pub fn add_host_region(&mut self, pa: u64, len: usize) -> Option<*mut u8> {
        self.insert_host(pa, HostRegion::new(len)?).ok()
    }
    /// Register a host region whose memory the caller provides (see
    /// [`HostRegion::from_external`]). Returns its address; `None` if it overlaps another.
    pub fn add_host_region_external(&mut self, pa: u64, region: HostRegion) -> Option<*mut u8> {
        self.insert_host(pa, region).ok()
    }
    pub fn remove_host_region(&mut self, pa: u64) {
        if let Some(s) = self.host_slot(pa) {
            self.host[s] = None;
            self.map.remove(BusAddr(pa).to_dev(self.profile.arch));
        }
    }
    pub fn host_region_ptr(&self, pa: u64) -> Option<*mut u8> {
        let s = self.host_slot(pa)?;
        self.host[s].as_ref().map(|(_, r)| r.as_ptr())
    }

    fn host_at(&self, slot: u32) -> Option<&HostRegion> {
        self.host
            .get(slot as usize)
            .and_then(|s| s.as_ref())
            .map(|(_, r)| r)
    }

    // ---------------------------------------------------------------- routing

    /// The target holding all of `[addr, addr + len)` and the offset inside it.
    #[inline]
    pub(super) fn resolve(
        &self,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result<(Target, u64), MemError> {
        self.map
            .resolve(DevAddr(addr), len)
            .map_err(|_| self.unmapped(addr, len, write))
    }

    /// The error for an access no single target holds, named by where it points.
    fn unmapped(&self, addr: u64, len: u64, write: bool) -> MemError {
        let reason = if DevAddr(addr).is_host(self.profile.arch) {
            "no host memory chunk there"
        } else if self.profile.tpb_of(addr).is_some() {
            if write {
                NOT_WRITABLE
            } else {
                NOT_READABLE
            }
        } else {
            "unmapped device address"
        };
        err(addr, len, reason)
    }

    /// HBM `[addr, addr + len)`, wholly inside one HBM.
    fn in_hbm(&self, addr: u64, len: u64) -> bool {
        matches!(
            self.map.resolve(DevAddr(addr), len),
            Ok((Target::Hbm(_), _))
        )
    }

    /// The storage offset in core `nc`'s memory of `len` bytes at window offset `off` of an
    /// SBUF/PSUM window, if they lie inside one partition.
    pub(super) fn partition_span(
        &self,
        nc: usize,
        space: Space,
        off: u64,
        len: u64,
    ) -> Option<usize> {
        span_in_partition(self.partition_geometry(nc, space), off, len)
    }

    /// Core `nc`'s window geometry of `space`: the window's partition stride, the bytes each
    /// partition holds, and the stride of their storage (`CoreMem::stride`).
    pub(super) fn partition_geometry(&self, nc: usize, space: Space) -> Geometry {
        let (window, pb) = match space {
            Space::Sbuf => (
                tpb::SBUF_PARTITION_STRIDE,
                self.profile.sbuf_partition_bytes as u64,
            ),
            Space::Psum => (
                tpb::PSUM_PARTITION_STRIDE,
                self.profile.psum_partition_bytes as u64,
            ),
        };
        let storage = self
            .cores
            .get(nc)
            .map_or(window, |c| c.lane.stride(space) as u64);
        Geometry::new(window, pb, storage)
    }

    // ---------------------------------------------------------------- access

    /// Read device memory (HBM, host chunks, SBUF/PSUM windows, register pages).
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let (t, off) = self.resolve(addr, buf.len() as u64, false)?;
        self.read_at(t, off, addr, buf)
    }

    /// Read a resolved access.
    pub(super) fn read_at(
        &mut self,
        t: Target,
        off: u64,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), MemError> {
        let len = buf.len() as u64;
        match t {
            Target::Hbm(_) => self.hbm.read(addr, buf),
            Target::Host(s) => {
                let r = self
                    .host_at(s)
                    .ok_or(err(addr, len, "no host memory chunk there"))?;
                r.read(off as usize, buf);
            }
            Target::Sbuf(nc) | Target::Psum(nc) => {
                let space = space_of(t);
                let at = self
                    .partition_span(nc as usize, space, off, len)
                    .ok_or(err(addr, len, NOT_READABLE))?;
                let lane = self.cores[nc as usize].lane.get();
                buf.copy_from_slice(&lane.mem.bytes(space)[at..at + buf.len()]);
            }
            Target::Regs(nc) => {
                if !off.is_multiple_of(4) || !len.is_multiple_of(4) {
                    return Err(err(addr, len, NOT_READABLE));
                }
                let regs = &self.cores[nc as usize].regs;
                for (i, w) in buf.chunks_exact_mut(4).enumerate() {
                    let v = regs.read_reg(off + 4 * i as u64).ok_or(err(
                        addr,
                        len,
                        "register page overrun",
                    ))?;
                    w.copy_from_slice(&v.to_le_bytes());
                }
            }
            Target::InstrPort(..) | Target::DgeTable(_) => {
                return Err(err(addr, len, NOT_READABLE))
            }
            Target::Ucode(nc, m) => self.cores[nc as usize].ucode.read(m, off, buf),
        }
        Ok(())
    }

    /// Write device memory, with the side effects of register and instruction-port writes.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (t, off) = self.resolve(addr, data.len() as u64, true)?;
        self.write_at(t, off, addr, data)
    }

    /// Write a resolved access.
    pub(super) fn write_at(
        &mut self,
        t: Target,
        off: u64,
        addr: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let len = data.len() as u64;
        match t {
            Target::Hbm(_) => self.hbm.write(addr, data),
            Target::Host(s) => {
                let r = self
                    .host_at(s)
                    .ok_or(err(addr, len, "no host memory chunk there"))?;
                r.write(off as usize, data);
            }
            Target::Sbuf(nc) | Target::Psum(nc) => {
                let space = space_of(t);
                let at = self
                    .partition_span(nc as usize, space, off, len)
                    .ok_or(err(addr, len, NOT_WRITABLE))?;
                let lane = &mut self.cores[nc as usize].lane;
                if !lane.write_runs(space, &[(at, data.len())], |_, d| d.copy_from_slice(data)) {
                    return Err(err(addr, len, NOT_WRITABLE));
                }
            }
            Target::DgeTable(nc) => {
                let v: [u8; 8] = data.try_into().ok().filter(|_| off == 0).ok_or(err(
                    addr,
                    len,
                    "the DGE table register takes one 64-bit write",
                ))?;
                self.cores[nc as usize].dge_table = Some(u64::from_le_bytes(v));
            }
            Target::Regs(nc) => {
                if !off.is_multiple_of(4) || !len.is_multiple_of(4) {
                    return Err(err(
                        addr,
                        len,
                        "register writes must be whole aligned 32-bit words",
                    ));
                }
                let nc = nc as usize;
                for (i, w) in data.chunks_exact(4).enumerate() {
                    let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                    if !self.cores[nc].regs.write_reg(off + 4 * i as u64, v) {
                        return Err(err(addr, len, "register page overrun"));
                    }
                }
                self.wake_blocked(nc);
            }
            Target::InstrPort(nc, e) => self.port_write(nc as usize, e as usize, addr, data)?,
            Target::Ucode(nc, m) => self.cores[nc as usize]
                .ucode
                .write(m, off, data)
                .map_err(|r| err(addr, len, r))?,
        }
        Ok(())
    }

    /// Words arriving at an engine's instruction port: queued, and the engine woken.
    fn port_write(&mut self, nc: usize, e: usize, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let eng = &mut self.cores[nc].engines[e];
        // Bound what a stopped engine can accumulate (a runaway host re-kicking fetches).
        if eng.ibuf.len().saturating_sub(eng.origin) + data.len() > MAX_PENDING_INSTR_BYTES {
            return Err(err(
                addr,
                data.len() as u64,
                "instruction port overflow (engine not consuming)",
            ));
        }
        eng.ibuf.extend_from_slice(data);
        if eng.is_idle() && !eng.scheduled {
            eng.scheduled = true;
            let now = self.now;
            self.schedule(now, Ev::Step(nc, e));
        }
        Ok(())
    }

    /// Fill device memory with a byte.
    pub fn fill(&mut self, addr: u64, len: u64, byte: u8) -> Result<(), MemError> {
        if self.in_hbm(addr, len) {
            self.hbm.fill(addr, len, byte);
            return Ok(());
        }
        let chunk = vec![byte; 64 * 1024];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            self.write(addr + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Forget the contents of a freed HBM range (returns its pages, and any backed region
    /// inside it, to the host).
    pub fn discard(&mut self, addr: u64, len: u64) {
        if self.in_hbm(addr, len) {
            self.hbm.discard(addr, len);
        }
    }

    /// The contiguous backing of the HBM range starting at `addr`, if it has one:
    /// `(pointer, length)`.
    pub fn hbm_backing(&self, addr: u64) -> Option<(*mut u8, usize)> {
        self.hbm.backing(addr)
    }

    /// Give the HBM range `[addr, addr + region.len())` contiguous host backing (for a user
    /// mapping of device memory), initialised from its current contents; every later access to
    /// the range uses it, until the range is discarded. Refused (region handed back) outside
    /// HBM or when it overlaps another backed range.
    pub fn back_hbm(&mut self, addr: u64, region: HostRegion) -> Result<*mut u8, HostRegion> {
        if !self.in_hbm(addr, region.len() as u64) {
            return Err(region);
        }
        self.hbm.back(addr, region)
    }

    /// HBM scrub: `[addr, addr+len)` (inside one HBM) reads as the little-endian u32 `pattern`
    /// afterwards; untouched memory stays sparse.
    pub fn scrub_hbm(&mut self, addr: u64, len: u64, pattern: u32) -> Result<(), MemError> {
        if !self.in_hbm(addr, len) {
            return Err(err(addr, len, "scrub outside HBM"));
        }
        self.hbm.scrub(addr, len, pattern);
        Ok(())
    }

    /// Address of core `nc`'s SBUF storage, laid out exactly as its 32 MiB TPB SBUF window
    /// (partition `p` at `p * 0x40000`), for user mappings of that window. As on hardware,
    /// user accesses that race with running engines see unordered results.
    pub fn sbuf_window_ptr(&mut self, nc: usize) -> Option<*mut u8> {
        self.cores.get_mut(nc).map(|c| c.lane.sbuf_ptr() as *mut u8)
    }

    /// Address of engine `e`'s instruction port on core `nc`.
    pub fn instr_port(&self, nc: usize, e: Engine) -> u64 {
        self.profile.tpb_base(nc) + tpb::INSTR_PORT + e.index() as u64 * tpb::INSTR_PORT_STRIDE
    }
}

/// A window's partition layout and its storage's ([`Device::partition_geometry`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// The window's distance between partitions, as a power of two (a DMA maps every run:
    /// a shift and a mask, not two divisions).
    shift: u32,
    /// Bytes each partition holds.
    pb: u64,
    /// The storage's distance between partitions.
    storage: u64,
}

impl Geometry {
    /// `window`: the window's partition stride, a power of two (the TPB windows' are).
    pub(super) fn new(window: u64, pb: u64, storage: u64) -> Geometry {
        debug_assert!(window.is_power_of_two(), "window stride {window}");
        Geometry {
            shift: window.trailing_zeros(),
            pb,
            storage,
        }
    }

    /// The columns (bytes of a partition) every element of a DMA's window side lies in:
    /// `num` elements of `elem` bytes `step` apart per dimension from window offset `off`.
    /// Each dimension either stays in the partition, adding its reach to the first
    /// element's column, or moves whole partitions (a step that is a multiple of the
    /// window's partition stride: the column stays). None for any other pattern, or one
    /// whose reach leaves the partition: every column then counts as written.
    pub(super) fn cols_of(
        &self,
        off: u64,
        num: [u64; 2],
        step: [u64; 2],
        elem: u64,
    ) -> Option<(usize, usize)> {
        let w = 1u64.checked_shl(self.shift)?;
        let lo = off & (w - 1);
        let mut hi = lo.checked_add(elem)?;
        for (n, s) in num.into_iter().zip(step) {
            if n <= 1 || s % w == 0 {
                continue;
            }
            if s >= w {
                return None;
            }
            hi = hi.checked_add((n - 1).checked_mul(s)?)?;
        }
        (hi <= self.pb).then_some((lo as usize, hi as usize))
    }
}

/// [`Device::partition_span`] with the space's geometry fetched beforehand: the storage
/// offset of window offset `off`, if its `len` bytes lie inside one partition.
#[inline]
pub(super) fn span_in_partition(g: Geometry, off: u64, len: u64) -> Option<usize> {
    let (part, at) = (off >> g.shift, off & ((1u64 << g.shift) - 1));
    if at + len > g.pb {
        return None;
    }
    usize::try_from(part.checked_mul(g.storage)?.checked_add(at)?).ok()
}

pub(super) fn space_of(t: Target) -> Space {
    match t {
        Target::Psum(_) => Space::Psum,
        _ => Space::Sbuf,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ArchProfile;

    fn trn2() -> Device {
        Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2))
    }

    /// A DMA's window-side columns: partition-stepping rows keep one column range, steps
    /// inside a partition add their reach, and a step of a partition plus some bytes, or a
    /// reach past the partition's bytes, names none (every column then counts as written).
    #[test]
    fn dma_window_columns() {
        let dev = trn2();
        let g = dev.partition_geometry(0, Space::Sbuf);
        let ps = tpb::SBUF_PARTITION_STRIDE;
        let pb = dev.profile().sbuf_partition_bytes as u64;
        // A KV-cache load: one 256-byte row into each of 128 partitions.
        assert_eq!(
            g.cols_of(3 * ps + 0x400, [128, 1], [ps, 1], 256),
            Some((0x400, 0x500))
        );
        // 64 four-byte elements in a row, 40 partitions.
        assert_eq!(g.cols_of(0x40, [64, 40], [4, ps], 4), Some((0x40, 0x140)));
        // Two dimensions inside one partition.
        assert_eq!(
            g.cols_of(0x10, [4, 3], [8, 0x100], 8),
            Some((0x10, 0x10 + 24 + 0x200 + 8))
        );
        // Counts of 0 or 1 reach nowhere, whatever their step.
        assert_eq!(g.cols_of(0x10, [1, 0], [ps + 4, 7], 8), Some((0x10, 0x18)));
        assert_eq!(g.cols_of(0x10, [2, 1], [ps + 4, 1], 8), None);
        assert_eq!(
            g.cols_of(pb - 8, [1, 1], [1, 1], 8),
            Some(((pb - 8) as usize, pb as usize))
        );
        assert_eq!(g.cols_of(pb - 8, [2, 1], [8, 1], 8), None);
        assert_eq!(g.cols_of(0, [u64::MAX, 1], [4, 1], 4), None);
        let gp = dev.partition_geometry(0, Space::Psum);
        let pp = tpb::PSUM_PARTITION_STRIDE;
        assert_eq!(
            gp.cols_of(0x800, [128, 1], [pp, 1], 2048),
            Some((0x800, 0x1000))
        );
    }

    /// Each target answers its own range; accesses across a partition's end, between
    /// targets, or into holes are refused.
    #[test]
    fn window_targets_and_holes() {
        let mut dev = trn2();
        let base = dev.profile().tpb_base(1);
        let p3 = base + 3 * tpb::SBUF_PARTITION_STRIDE;
        dev.write(p3 + 0x10, &[1, 2, 3, 4])
            .expect("SBUF partition 3");
        let mut b = [0u8; 4];
        dev.read(p3 + 0x10, &mut b).expect("read back");
        assert_eq!(b, [1, 2, 3, 4]);
        let pb = dev.profile().sbuf_partition_bytes as u64;
        // The last 4 bytes of a partition are fine; one byte more crosses into the gap.
        dev.write(p3 + pb - 4, &[0; 4]).expect("partition end");
        assert!(dev.write(p3 + pb - 3, &[0; 4]).is_err());
        assert!(
            dev.read(p3 + pb, &mut b).is_err(),
            "the gap after a partition"
        );
        // PSUM follows SBUF directly: a write across the two is refused.
        let psum = base + tpb::PSUM;
        assert!(dev.write(psum - 2, &[0; 4]).is_err());
        dev.write(psum, &[9; 4]).expect("PSUM");
        // Registers: whole aligned words only.
        let regs = base + tpb::SEMAPHORE_PAGE;
        dev.write(regs + 0x1400 + 8, &5u32.to_le_bytes())
            .expect("semaphore set register");
        assert_eq!(dev.regs(1).expect("core 1").sem(2), 5);
        assert!(dev.write(regs + 0x1402, &[0; 4]).is_err());
        // The DGE table register takes exactly one 64-bit write at its address.
        let dge = base + tpb::DGE_TABLE;
        dev.write(dge, &0x1234u64.to_le_bytes()).expect("DGE");
        assert_eq!(dev.cores[1].dge_table, Some(0x1234));
        assert!(dev.write(dge, &[0; 4]).is_err());
        assert!(dev.read(dge, &mut [0; 8]).is_err());
        // A write spanning two instruction ports is refused.
        let port = dev.instr_port(1, Engine::Act);
        assert!(dev
            .write(port + tpb::INSTR_PORT_STRIDE - 32, &[0; 64])
            .is_err());
        let e = dev.read(0x3f00_0000_0000, &mut b).expect_err("unmapped");
        assert_eq!(e.reason, "unmapped device address");
    }

    /// SBUF window bytes written before a user mapping are where the mapping shows them
    /// (`p` × 256 KiB + offset), though storage held them at a skewed stride until then; the
    /// device reads what the mapping writes and the mapping what the device writes, and a
    /// DMA-style write into PSUM still lands at its window offset.
    #[test]
    #[allow(unsafe_code)] // reads and writes through the pointer user space would map
    fn a_mapping_of_the_sbuf_window_shows_the_window() {
        let mut dev = trn2();
        let base = dev.profile().tpb_base(0);
        let w = tpb::SBUF_PARTITION_STRIDE;
        for p in [0u64, 1, 63, 127] {
            dev.write(base + p * w + 0x20, &[p as u8 + 1; 4])
                .expect("SBUF before the mapping");
        }
        dev.write(base + tpb::PSUM + 5 * tpb::PSUM_PARTITION_STRIDE, &[9; 4])
            .expect("PSUM");
        let ptr = dev.sbuf_window_ptr(0).expect("core 0");
        // SAFETY: the storage is at least the 32 MiB window long and alive with `dev`; no
        // engine runs meanwhile.
        let at = |off: u64| unsafe { *ptr.add(off as usize) };
        for p in [0u64, 1, 63, 127] {
            assert_eq!(at(p * w + 0x20), p as u8 + 1, "partition {p}");
            assert_eq!(at(p * w + 0x1f), 0);
        }
        // SAFETY: as above.
        unsafe { *ptr.add((7 * w + 0x100) as usize) = 0x5a };
        let mut b = [0u8; 1];
        dev.read(base + 7 * w + 0x100, &mut b).expect("read");
        assert_eq!(b, [0x5a], "the device sees the mapping's write");
        dev.write(base + 9 * w + 0x8, &[0x77]).expect("write");
        assert_eq!(at(9 * w + 0x8), 0x77, "the mapping sees the device's write");
        let mut c = [0u8; 4];
        dev.read(base + tpb::PSUM + 5 * tpb::PSUM_PARTITION_STRIDE, &mut c)
            .expect("PSUM");
        assert_eq!(c, [9; 4]);
    }

    /// Window offsets become storage offsets partition by partition; a span crossing a
    /// partition's end is refused, as is one whose storage offset would overflow.
    #[test]
    fn window_spans_map_to_storage() {
        let g = Geometry::new(0x100, 0xc0, 0x140);
        assert_eq!(span_in_partition(g, 0x10, 8), Some(0x10));
        assert_eq!(span_in_partition(g, 0x310, 0x10), Some(3 * 0x140 + 0x10));
        assert_eq!(span_in_partition(g, 0x2b8, 8), Some(2 * 0x140 + 0xb8));
        assert_eq!(
            span_in_partition(g, 0x2b9, 8),
            None,
            "past the partition's end"
        );
        let huge = Geometry::new(0x100, 0xc0, u64::MAX / 2);
        assert_eq!(span_in_partition(huge, 0x300, 4), None);
    }

    #[test]
    fn host_regions_come_and_go_without_overlapping() {
        let mut dev = trn2();
        let bit = dev.profile().arch.host_base_bit();
        assert!(dev.add_host_region(0x10_0000, 0x2000).is_some());
        assert!(
            dev.add_host_region(0x10_1000, 0x2000).is_none(),
            "overlaps the first"
        );
        dev.write(bit | 0x10_1ff0, &[7; 16]).expect("inside");
        assert!(
            dev.write(bit | 0x10_1ff8, &[7; 16]).is_err(),
            "runs past the end"
        );
        // Re-adding at the same address replaces the region (fresh, zeroed memory).
        assert!(dev.add_host_region(0x10_0000, 0x1000).is_some());
        let mut b = [1u8; 4];
        dev.read(bit | 0x10_0000, &mut b).expect("replaced");
        assert_eq!(b, [0; 4]);
        assert!(dev.read(bit | 0x10_1000, &mut b).is_err(), "shorter now");
        dev.remove_host_region(0x10_0000);
        assert!(dev.host_region_ptr(0x10_0000).is_none());
        let e = dev.read(bit | 0x10_0000, &mut b).expect_err("gone");
        assert_eq!(e.reason, "no host memory chunk there");
        assert!(
            dev.add_host_region(0x10_1000, 0x2000).is_some(),
            "hole reused"
        );
        // A zero-length region exists (it has a pointer) but answers no address.
        assert!(dev.add_host_region(0x20_0000, 0).is_some());
        assert!(dev.host_region_ptr(0x20_0000).is_some());
    }

    #[test]
    fn hbm_operations_stay_inside_one_hbm() {
        let mut dev = trn2();
        let a = dev.profile().arch;
        let end0 = a.hbm_size();
        dev.fill(end0 - 8, 8, 0xab).expect("last bytes of HBM 0");
        assert!(dev.scrub_hbm(end0 - 8, 16, 0).is_err());
        assert!(dev.fill(end0 - 8, 16, 0).is_err(), "past HBM 0's end");
        let hbm1 = a.hbm_base(1).expect("HBM 1");
        dev.scrub_hbm(hbm1, 64, 0x0102_0304).expect("scrub");
        let mut b = [0u8; 4];
        dev.read(hbm1 + 60, &mut b).expect("read");
        assert_eq!(u32::from_le_bytes(b), 0x0102_0304);
    }
}
