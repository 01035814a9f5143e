//! DMA: the queues (rings of descriptor pairs in device-visible memory, consumed from head to
//! the rung tails), one descriptor pair per event, and the descriptor-generating
//! DMA_DIRECT2D (strided runs, dtype conversion, a semaphore added at completion).

use super::memory::space_of;
use super::{Device, DmaError, Ev, DMA_ENGINES_PER_NC};
use crate::addrmap::Target;
use crate::fault::{FaultKind, OpFault};
use crate::hbm::{PageMemo, PAGE};
use crate::hooks::{DescAction, Site};
use crate::time::Ps;
use neuron_abi::udma::UdmaDesc;
use neuron_isa::cayman::DmaAddr;
use neuron_isa::Dtype;
use zerocopy::FromBytes;

/// How many runs ahead a DMA from HBM into SBUF/PSUM asks for its source lines.
const RUNS_AHEAD: u64 = 8;

/// Hardware state of one DMA queue (TX/M2S and RX/S2M rings share head/tail bookkeeping here
/// because every transfer is a descriptor pair).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueState {
    pub enabled: bool,
    pub aborted: bool,
    pub tx_base: u64,
    pub rx_base: u64,
    /// Ring sizes in descriptors.
    pub tx_len: u32,
    pub rx_len: u32,
    pub head: u64,
    pub tx_tail: u64,
    pub rx_tail: u64,
}

#[derive(Debug, Default)]
pub(super) struct DmaQueue {
    pub(super) st: QueueState,
    pub(super) scheduled: bool,
    /// A hook delayed the head descriptor: consume it without asking again.
    hook_passed: bool,
}

/// Bytes one DMA_DIRECT2D may move: far above what the compiler emits (a few MiB), low enough
/// that a corrupt word cannot stall the model for minutes.
const MAX_DMA2D_BYTES: u64 = 256 << 20;
/// Elements one DMA_DIRECT2D may move (the compiler's are ≤ a few thousand rows).
const MAX_DMA2D_ELEMS: u64 = 1 << 20;

/// Convert packed elements of dtype `i` to dtype `o` (the DMA engine's cast) into a cleared
/// `out`, sized for them ([`convert_into`]).
fn convert_elems(i: Dtype, o: Dtype, src: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.resize(src.len() / i.size() * o.size(), 0);
    convert_into(i, o, src, out);
}

/// Convert the whole elements of dtype `i` in `src` to dtype `o` into `out`, which must hold
/// exactly as many (false, nothing written, otherwise). The common float pairs have their
/// own loops; the rest go through f32.
fn convert_into(i: Dtype, o: Dtype, src: &[u8], out: &mut [u8]) -> bool {
    if out.len() != src.len() / i.size() * o.size() {
        return false;
    }
    match (i, o) {
        // Written in place (a byte-wise `extend` ran ~9 instructions an element), sixteen
        // at a time (`widen`).
        (Dtype::F32 | Dtype::F32r, Dtype::Bf16) => {
            crate::cayman_exec::bf16_bytes_from_f32_bytes(src, out);
        }
        (Dtype::Bf16, Dtype::F32 | Dtype::F32r) => {
            for (d, c) in out.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
                d.copy_from_slice(
                    &(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16).to_le_bytes(),
                );
            }
        }
        // `half`'s slice conversions (F16C where the host has it, chosen at run time, else
        // its software loop: the same bits as its scalar `from_f32`/`to_f32`, which the
        // per-element path calls) on batches of a stack buffer: element by element, each
        // conversion asked the CPU's features again and each byte group was a `memcpy`.
        (Dtype::F32 | Dtype::F32r, Dtype::F16) => {
            use half::slice::HalfFloatSliceExt;
            let (mut f, mut h) = ([0f32; BATCH], [half::f16::ZERO; BATCH]);
            for (d, c) in out.chunks_mut(2 * BATCH).zip(src.chunks(4 * BATCH)) {
                let m = d.len() / 2;
                for (x, b) in f.iter_mut().zip(c.chunks_exact(4)) {
                    *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
                h[..m].convert_from_f32_slice(&f[..m]);
                for (o, v) in d.chunks_exact_mut(2).zip(&h[..m]) {
                    o.copy_from_slice(&v.to_bits().to_le_bytes());
                }
            }
        }
        (Dtype::F16, Dtype::F32 | Dtype::F32r) => {
            use half::slice::HalfFloatSliceExt;
            let (mut h, mut f) = ([half::f16::ZERO; BATCH], [0f32; BATCH]);
            for (d, c) in out.chunks_mut(4 * BATCH).zip(src.chunks(2 * BATCH)) {
                let m = d.len() / 4;
                for (x, b) in h.iter_mut().zip(c.chunks_exact(2)) {
                    *x = half::f16::from_le_bytes([b[0], b[1]]);
                }
                h[..m].convert_to_f32_slice(&mut f[..m]);
                for (o, v) in d.chunks_exact_mut(4).zip(&f[..m]) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        _ => {
            for (c, d) in src
                .chunks_exact(i.size())
                .zip(out.chunks_exact_mut(o.size()))
            {
                let mut e = [0u8; 8];
                neuron_isa::dtype::store_f32(o, neuron_isa::dtype::load_f32(i, c), &mut e);
                d.copy_from_slice(&e[..o.size()]);
            }
        }
    }
    true
}

/// Elements [`convert_elems`] converts at a time through its stack buffers.
const BATCH: usize = 64;

impl Device {
    /// `DMA_QUEUE_INIT`: bind rings and reset the queue's pointers.
    pub fn dma_queue_init(
        &mut self,
        eng: usize,
        q: usize,
        tx_base: u64,
        tx_len: u32,
        rx_base: u64,
        rx_len: u32,
    ) -> Result<(), DmaError> {
        let dq = self
            .dma
            .get_mut(eng)
            .and_then(|e| e.get_mut(q))
            .ok_or(DmaError::NoSuchQueue)?;
        dq.st = QueueState {
            enabled: true,
            aborted: false,
            tx_base,
            rx_base,
            tx_len,
            rx_len,
            head: 0,
            tx_tail: 0,
            rx_tail: 0,
        };
        // A stale pending step for the old ring is harmless: dma_step re-reads the state.
        Ok(())
    }

    pub fn dma_queue_state(&self, eng: usize, q: usize) -> Option<QueueState> {
        self.dma.get(eng).and_then(|e| e.get(q)).map(|d| d.st)
    }

    /// Ring the doorbell: advance the RX and TX tails.
    pub fn dma_queue_start(
        &mut self,
        eng: usize,
        q: usize,
        tx: u32,
        rx: u32,
    ) -> Result<(), DmaError> {
        let now = self.now;
        let dq = self
            .dma
            .get_mut(eng)
            .and_then(|e| e.get_mut(q))
            .ok_or(DmaError::NoSuchQueue)?;
        if !dq.st.enabled || dq.st.tx_len == 0 || dq.st.rx_len == 0 {
            return Err(DmaError::NotInitialised);
        }
        let (tx_t, rx_t) = (dq.st.tx_tail + tx as u64, dq.st.rx_tail + rx as u64);
        if tx_t - dq.st.head > dq.st.tx_len as u64 || rx_t - dq.st.head > dq.st.rx_len as u64 {
            return Err(DmaError::Overrun);
        }
        dq.st.tx_tail = tx_t;
        dq.st.rx_tail = rx_t;
        if !dq.scheduled {
            dq.scheduled = true;
            self.schedule(now, Ev::Dma(eng, q));
        }
        Ok(())
    }

    /// The doorbell a device WRITE to `addr` rings, if it is one: (engine, queue, RX side).
    pub(super) fn dma_doorbell(&self, addr: u64) -> Option<(usize, usize, bool)> {
        use neuron_abi::tpb::{DMA_DOORBELL, DMA_DOORBELL_SIZE};
        let (nc, off) = self.profile.tpb_of(addr)?;
        let r = off
            .checked_sub(DMA_DOORBELL)
            .filter(|r| *r < DMA_DOORBELL_SIZE)?;
        let slot = (r / 8) as usize;
        Some((nc * DMA_ENGINES_PER_NC + slot / 16, slot % 16, r % 8 >= 4))
    }

    pub(super) fn dma_nc(&self, eng: usize) -> usize {
        let per_core = self.cores.len() * DMA_ENGINES_PER_NC;
        let nc = if eng < per_core {
            eng / DMA_ENGINES_PER_NC
        } else {
            // Host-transfer engines after the per-core ones: each serves a pair of cores on v3
            // (engine 128 + k for cores 2k, 2k+1) and one core on v2 (32, 33).
            let k = eng - per_core;
            if self.cores.len() > 2 {
                2 * k
            } else {
                k
            }
        };
        nc.min(self.cores.len().saturating_sub(1))
    }

    pub(super) fn dma_step(&mut self, eng: usize, q: usize) {
        let st = self.dma[eng][q].st;
        self.dma[eng][q].scheduled = false;
        if st.aborted || !st.enabled || st.head >= st.tx_tail.min(st.rx_tail) {
            return;
        }
        let nc = self.dma_nc(eng);
        let (tx_idx, rx_idx) = (
            st.head % st.tx_len.max(1) as u64,
            st.head % st.rx_len.max(1) as u64,
        );
        let abort = |this: &mut Device, why: String| {
            this.dma[eng][q].st.aborted = true;
            this.fault(
                nc,
                None,
                st.head as u32,
                0,
                OpFault {
                    kind: FaultKind::DmaAbort,
                    detail: format!("DMA engine {eng} queue {q}: {why}"),
                },
            );
        };
        let mut raw = [0u8; 32];
        let (tx_ok, rx_ok) = {
            let (a, b) = raw.split_at_mut(16);
            (
                self.read(st.tx_base + tx_idx * 16, a),
                self.read(st.rx_base + rx_idx * 16, b),
            )
        };
        if let Err(e) = tx_ok.and(rx_ok) {
            return abort(self, format!("descriptor fetch failed: {e}"));
        }
        let (Ok(mut tx), Ok(mut rx)) = (
            UdmaDesc::read_from_bytes(&raw[..16]),
            UdmaDesc::read_from_bytes(&raw[16..]),
        ) else {
            return abort(self, "descriptor decode".into());
        };
        let site = |d: &Device| Site {
            queue: Some((eng, q)),
            ..d.site(nc, None, st.head as u32, 0)
        };
        if self.hooks.0.is_some() && !std::mem::take(&mut self.dma[eng][q].hook_passed) {
            match self.call_hook(site(self), |h, c| h.before_descriptor(c, &mut tx, &mut rx)) {
                Some(DescAction::Abort(why)) => return abort(self, why),
                Some(DescAction::Delay(d)) => {
                    let dq = &mut self.dma[eng][q];
                    dq.hook_passed = true;
                    dq.scheduled = true;
                    let at = self.now + d;
                    return self.schedule(at, Ev::Dma(eng, q));
                }
                _ => {}
            }
        }
        let (tl, rl) = (tx.len(), rx.len());
        if tl != rl {
            return abort(
                self,
                format!(
                    "descriptor {} length mismatch: TX {tl} bytes, RX {rl} bytes",
                    st.head
                ),
            );
        }
        let mut buf = std::mem::take(&mut self.copybuf);
        buf.resize(tl as usize, 0);
        let res = self
            .hooked_read(tx.buf_ptr, &mut buf, site)
            .and_then(|_| self.hooked_write(rx.buf_ptr, &mut buf, site));
        self.copybuf = buf;
        if let Err(e) = res {
            return abort(self, format!("descriptor {}: {e}", st.head));
        }
        self.stats.dma_descriptors += 1;
        self.stats.dma_bytes += tl as u64;
        let cost = self.profile.cost.dma_desc_latency
            + Ps::from_bytes(tl as u64, self.profile.cost.dma_bytes_per_ns);
        if let Some(t) = self.trace.as_mut() {
            t.push(crate::stats::TraceEvent {
                nc,
                track: format!("DMA {eng}.{q}"),
                name: "DMA",
                pc: st.head as u32,
                start: self.now,
                dur: cost,
                word: None,
                waits: [None, None],
                bytes: tl as u64,
            });
        }
        let dq = &mut self.dma[eng][q];
        dq.st.head += 1;
        if dq.st.head < dq.st.tx_tail.min(dq.st.rx_tail) {
            dq.scheduled = true;
            let at = self.now + cost;
            self.schedule(at, Ev::Dma(eng, q));
        }
    }

    fn dge_resolve(&mut self, nc: usize, a: DmaAddr) -> Result<u64, OpFault> {
        match a {
            DmaAddr::Absolute(v) => Ok(v),
            DmaAddr::Table { offset, index, .. } => {
                let base = self.cores[nc].dge_table.ok_or_else(|| OpFault {
                    kind: FaultKind::DmaAbort,
                    detail: "DGE-table address with no DGE table set".into(),
                })?;
                let mut e = [0u8; 8];
                self.read(base + 8 * index as u64, &mut e)
                    .map_err(|err| OpFault {
                        kind: FaultKind::DmaAbort,
                        detail: format!("DGE table entry {index}: {err}"),
                    })?;
                Ok(u64::from_le_bytes(e) + offset as u64)
            }
            other => Err(OpFault {
                kind: FaultKind::DmaAbort,
                detail: format!("untranslated DMA address {other:?}"),
            }),
        }
    }

    /// A descriptor-generating DMA (DMA_DIRECT2D): moves `num0 x num1` elements of
    /// `elem_size` bytes (`[step0, step1]` in bytes), converting dtypes when they differ, and
    /// adds `increment` to `semaphore` when the transfer completes; the transfer starts `lead`
    /// after now (the software DGE's latency). Returns when it completes and the bytes moved.
    pub(super) fn dma2d(
        &mut self,
        nc: usize,
        d: &crate::cayman_exec::Dma2d,
        lead: Ps,
    ) -> Result<(Ps, u64), OpFault> {
        let abort = |detail: String| OpFault {
            kind: FaultKind::DmaAbort,
            detail,
        };
        let src = self.dge_resolve(nc, d.src)?;
        let dst = self.dge_resolve(nc, d.dst)?;
        let (sn, dn) = (
            d.src_num[0].max(1) * d.src_num[1].max(1),
            d.dst_num[0].max(1) * d.dst_num[1].max(1),
        );
        if sn != dn
            || sn > MAX_DMA2D_ELEMS
            || sn.saturating_mul(d.src_elem.max(d.dst_elem)) > MAX_DMA2D_BYTES
            || d.src_elem == 0
            || d.src_elem > 1 << 20
            || d.dst_elem > 1 << 20
        {
            return Err(abort(format!("DMA_DIRECT2D shapes: {sn} source elements of {} bytes, {dn} destination elements of {} bytes", d.src_elem, d.dst_elem)));
        }
        let convert = match (d.in_dtype, d.out_dtype) {
            (Some(i), Some(o)) if i != o => Some((i, o)),
            _ => None,
        };
        if convert.is_none() && d.src_elem != d.dst_elem {
            return Err(abort(format!(
                "DMA_DIRECT2D element sizes differ ({} vs {}) without a conversion",
                d.src_elem, d.dst_elem
            )));
        }
        // Reused buffers: runs can be large, and fresh large allocations cost page faults.
        let mut buf = std::mem::take(&mut self.copybuf);
        let mut out = std::mem::take(&mut self.dmaout);
        let moved = self.dma2d_runs(nc, src, dst, d, convert, &mut buf, &mut out);
        self.copybuf = buf;
        self.dmaout = out;
        let bytes = moved?;
        self.stats.dma_bytes += bytes;
        let at = match self.profile.cost.dma2d {
            Some(c) => {
                // One pipe per core: bytes move after the transfers already queued on it.
                let start = self.now + lead;
                let free = self.dma2d_free.get(nc).copied().unwrap_or(start);
                let done = start.max(free) + Ps::from_bytes(bytes, c.bytes_per_ns);
                if let Some(f) = self.dma2d_free.get_mut(nc) {
                    *f = done;
                }
                done + c.fixed
            }
            None => {
                self.now
                    + lead
                    + self.profile.cost.dma_desc_latency
                    + Ps::from_bytes(bytes, self.profile.cost.dma_bytes_per_ns)
            }
        };
        self.schedule(at, Ev::SemAdd(nc, d.semaphore, d.increment));
        Ok((at, bytes))
    }

    /// The data movement of [`Self::dma2d`] (shapes already checked); returns bytes moved.
    #[allow(clippy::too_many_arguments)]
    fn dma2d_runs(
        &mut self,
        nc: usize,
        src: u64,
        dst: u64,
        d: &crate::cayman_exec::Dma2d,
        convert: Option<(Dtype, Dtype)>,
        buf: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<u64, OpFault> {
        let abort = |detail: String| OpFault {
            kind: FaultKind::DmaAbort,
            detail,
        };
        let site = |dev: &Device| dev.site(nc, None, 0, 0);
        let sn = d.src_num[0].max(1) * d.src_num[1].max(1);
        // Elements are moved in runs: as many consecutive elements as are contiguous on both
        // sides (a whole row when both patterns' inner steps equal the element size).
        let (n0s, n0d) = (d.src_num[0].max(1), d.dst_num[0].max(1));
        let src_dense = d.src_step[0] == d.src_elem;
        let dst_dense = d.dst_step[0] == d.dst_elem;
        let (mut bytes, mut k) = (0u64, 0u64);
        if !self.mem_watch {
            (k, bytes) = self.window_runs(src, dst, d, sn, convert);
        }
        while k < sn {
            let (i0, i1) = (k % n0s, k / n0s);
            let (j0, j1) = (k % n0d, k / n0d);
            let run = if src_dense && dst_dense {
                (n0s - i0).min(n0d - j0)
            } else {
                1
            };
            let s = src
                .wrapping_add(i0.wrapping_mul(d.src_step[0]))
                .wrapping_add(i1.wrapping_mul(d.src_step[1]));
            let t = dst
                .wrapping_add(j0.wrapping_mul(d.dst_step[0]))
                .wrapping_add(j1.wrapping_mul(d.dst_step[1]));
            // Between HBM and a core's SBUF/PSUM, with no conversion and no hook watching:
            // one copy, no bounce buffer.
            if convert.is_none() && !self.mem_watch && self.direct_run(s, t, run * d.src_elem) {
                bytes += run * d.src_elem;
                k += run;
                continue;
            }
            buf.resize((run * d.src_elem) as usize, 0);
            self.hooked_read(s, buf, site)
                .map_err(|e| abort(format!("DMA_DIRECT2D source: {e}")))?;
            let data: &mut [u8] = match convert {
                Some((i, o)) => {
                    convert_elems(i, o, buf, out);
                    if out.len() as u64 != run * d.dst_elem {
                        return Err(abort(format!("DMA_DIRECT2D conversion gives {} bytes per element, destination expects {}", out.len() as u64 / run, d.dst_elem)));
                    }
                    out
                }
                None => buf,
            };
            self.hooked_write(t, data, site)
                .map_err(|e| abort(format!("DMA_DIRECT2D destination: {e}")))?;
            bytes += run * d.src_elem;
            k += run;
        }
        Ok(bytes)
    }
}

/// The runs of one DMA_DIRECT2D between HBM and a core's window, by index
/// ([`Device::window_runs`]): an inlined function, not a closure (as a closure it was called,
/// not inlined, and a KV-cache load's 128 short runs took 25% longer).
struct RunWalk<'a> {
    d: &'a crate::cayman_exec::Dma2d,
    src: u64,
    dst: u64,
    /// The window's offset of the transfer's first byte on its side.
    woff: u64,
    n0s: u64,
    n0d: u64,
    one_row_s: bool,
    one_row_d: bool,
    dense: bool,
    into_window: bool,
    geometry: super::memory::Geometry,
    limit: usize,
}

impl RunWalk<'_> {
    /// Run `k`'s HBM address, offset in the window's storage, bytes there, bytes in HBM
    /// (they differ where the run converts) and elements; None where it would leave its
    /// partition or the window.
    #[inline(always)]
    fn at(&self, k: u64) -> Option<(u64, usize, usize, usize, u64)> {
        let d = self.d;
        // A side whose inner dimension holds the whole transfer (a row of 128 partitions'
        // elements) is at (k, 0): no division for it.
        let (i0, i1) = if self.one_row_s {
            (k, 0)
        } else {
            (k % self.n0s, k / self.n0s)
        };
        let (j0, j1) = if self.one_row_d {
            (k, 0)
        } else {
            (k % self.n0d, k / self.n0d)
        };
        let run = if self.dense {
            (self.n0s - i0).min(self.n0d - j0)
        } else {
            1
        };
        let (src_len, dst_len) = (run * d.src_elem, run * d.dst_elem);
        let s = self.src + i0 * d.src_step[0] + i1 * d.src_step[1];
        let t = self.dst + j0 * d.dst_step[0] + j1 * d.dst_step[1];
        let (hbm_at, win_at, win_len, hbm_len) = if self.into_window {
            (s, self.woff + (t - self.dst), dst_len, src_len)
        } else {
            (t, self.woff + (s - self.src), src_len, dst_len)
        };
        let at = super::memory::span_in_partition(self.geometry, win_at, win_len)?;
        let n = win_len as usize;
        (at.checked_add(n)? <= self.limit).then_some((hbm_at, at, n, hbm_len as usize, run))
    }
}

/// A transfer's side in a core's window: its bytes to write or to read, or its lane away on
/// its thread.
enum Window<'a> {
    Away,
    Into(&'a mut [u8]),
    From(&'a [u8]),
}

impl Device {
    /// The runs of a DMA_DIRECT2D between one HBM range and one core's SBUF/PSUM window, each
    /// side resolved once for the whole transfer instead of once per run (a KV-cache load is
    /// 128 runs of one 256-byte element, each to another partition). Moves runs from the
    /// first until one would leave its partition (or none, where the sides are not such a
    /// pair): returns the elements and bytes moved, and [`Self::dma2d_runs`] moves the rest
    /// run by run, errors included.
    fn window_runs(
        &mut self,
        src: u64,
        dst: u64,
        d: &crate::cayman_exec::Dma2d,
        sn: u64,
        convert: Option<(Dtype, Dtype)>,
    ) -> (u64, u64) {
        // A converting transfer whose elements do not convert to the destination's size is
        // left to the run-by-run path, which reports it.
        if let Some((i, o)) = convert {
            if !d.src_elem.is_multiple_of(i.size() as u64)
                || d.src_elem / i.size() as u64 * o.size() as u64 != d.dst_elem
            {
                return (0, 0);
            }
        }
        let (n0s, n0d) = (d.src_num[0].max(1), d.dst_num[0].max(1));
        let (one_row_s, one_row_d) = (sn <= n0s, sn <= n0d);
        let dense = d.src_step[0] == d.src_elem && d.dst_step[0] == d.dst_elem;
        // The bytes each side spans (None if a step wraps or the sum overflows).
        let span = |n: [u64; 2], step: [u64; 2], elem: u64| {
            let inner = (n[0].max(1) - 1).checked_mul(step[0])?;
            let outer = (n[1].max(1) - 1).checked_mul(step[1])?;
            inner.checked_add(outer)?.checked_add(elem)
        };
        let (Some(sl), Some(dl)) = (
            span(d.src_num, d.src_step, d.src_elem),
            span(d.dst_num, d.dst_step, d.dst_elem),
        ) else {
            return (0, 0);
        };
        let (Ok((ts, os)), Ok((td, od))) =
            (self.resolve(src, sl, false), self.resolve(dst, dl, true))
        else {
            return (0, 0);
        };
        // (HBM reads into the window, the window's core, its space, its offset of the
        // transfer's first byte there.)
        let (into_window, t, woff) = match (ts, td) {
            (Target::Hbm(_), Target::Sbuf(_) | Target::Psum(_)) => (true, td, od),
            (Target::Sbuf(_) | Target::Psum(_), Target::Hbm(_)) => (false, ts, os),
            _ => return (0, 0),
        };
        let nc = match t {
            Target::Sbuf(c) | Target::Psum(c) if (c as usize) < self.cores.len() => c as usize,
            _ => return (0, 0),
        };
        let space = space_of(t);
        let limit = self.cores[nc].lane.mem_len(space);
        // The window's partition bounds (`partition_span`).
        let geometry = self.partition_geometry(nc, space);
        let walk = RunWalk {
            d,
            src,
            dst,
            woff,
            n0s,
            n0d,
            one_row_s,
            one_row_d,
            dense,
            into_window,
            geometry,
            limit,
        };
        let (mut k, mut bytes) = (0u64, 0u64);
        // A large transfer into bytes no other run of it writes (the destination's pattern)
        // moves as one batch of copies shared with the data-path helpers: first its runs,
        // then their bytes.
        let away = self.cores[nc].lane.is_away();
        if away && convert.is_some() {
            return (0, 0);
        }
        if !away
            && convert.is_none()
            && self.cores[nc].lane.get().fanout
            && crate::fanout::helpers() > 0
            && sn.saturating_mul(d.src_elem) >= crate::runcopy::SHARE_BYTES as u64
            && crate::runcopy::pattern_disjoint(d.dst_num, d.dst_step, d.dst_elem)
        {
            let mut runs = std::mem::take(&mut self.dmaruns);
            runs.clear();
            while k < sn {
                let Some((hbm_at, at, n, _, run)) = walk.at(k) else {
                    break;
                };
                runs.push((hbm_at, at, n));
                bytes += n as u64;
                k += run;
            }
            self.share_window_runs(nc, space, into_window, &runs);
            self.dmaruns = runs;
            return (k, bytes);
        }
        if let Some((i, o)) = convert {
            return self.convert_window_runs(&walk, nc, space, (i, o), sn);
        }
        // Into a lane that is with its thread, the runs (HBM address, window byte offset,
        // length) go to it in one message after the loop; else each moves at once.
        let away = into_window && away;
        let mut runs: Vec<(u64, usize, usize)> = Vec::new();
        // The HBM page the last run read and the one the last hint named: a DMA's rows are
        // short and strided, so consecutive runs mostly lie in one page (`SparseMem::page`).
        let (mut read_memo, mut hint_memo): (PageMemo, PageMemo) = (None, None);
        // The window's bytes, borrowed once for the whole transfer (a write is counted per
        // borrow, `CoreMem::writes`), unless the lane is away (its runs then go to it after
        // the loop).
        let Device { hbm, cores, .. } = self;
        let mut window = match (away, into_window) {
            (true, _) => Window::Away,
            (false, true) => Window::Into(cores[nc].lane.get().mem.bytes_mut(space)),
            (false, false) => Window::From(cores[nc].lane.get().mem.bytes(space)),
        };
        while k < sn {
            let Some((hbm_at, at, n, _, run)) = walk.at(k) else {
                break;
            };
            // HBM rows a few runs ahead are asked for early (rows of one DMA are strided,
            // each too short for the hardware prefetcher).
            // (Runs shorter than a cache line lie close together: nothing to ask for.)
            if into_window && !away && n >= 64 {
                let kf = k.saturating_add(RUNS_AHEAD.saturating_mul(run));
                if kf < sn {
                    let sf = src + (kf % n0s) * d.src_step[0] + (kf / n0s) * d.src_step[1];
                    hbm.prefetch_cached(&mut hint_memo, sf, n);
                }
            }
            match &mut window {
                Window::Away => runs.push((hbm_at, at, n)),
                Window::Into(mem) => {
                    let Some(to) = mem.get_mut(at..at + n) else {
                        break;
                    };
                    let off = (hbm_at % PAGE) as usize;
                    let from = hbm
                        .page_cached(&mut read_memo, hbm_at)
                        .and_then(|p| p.get(off..off.checked_add(n)?));
                    match from {
                        Some(b) => crate::shortcopy::copy_short(to, b),
                        None => hbm.read(hbm_at, to),
                    }
                }
                Window::From(mem) => {
                    let Some(from) = mem.get(at..at + n) else {
                        break;
                    };
                    // (Out of the window into HBM: no page is remembered, as writes add pages.)
                    (read_memo, hint_memo) = (None, None);
                    hbm.write(hbm_at, from);
                }
            }
            bytes += n as u64;
            k += run;
        }
        if away {
            let spans: Vec<(usize, usize)> = runs.iter().map(|r| (r.1, r.2)).collect();
            cores[nc].lane.write_runs(space, &spans, |i, to| {
                if let Some(r) = runs.get(i + RUNS_AHEAD as usize) {
                    hbm.prefetch(r.0, r.2);
                }
                hbm.read(runs[i].0, to)
            });
        }
        (k, bytes)
    }

    /// [`Self::window_runs`] for a converting transfer (the lane at home): each run converted
    /// from where its source lies into where it goes (HBM rows that are absent or cross a
    /// page through a buffer). Kept apart from the copying loop, which it slowed by a fifth
    /// on a KV-cache load's 128 short runs.
    fn convert_window_runs(
        &mut self,
        walk: &RunWalk,
        nc: usize,
        space: neuron_isa::Space,
        (i, o): (Dtype, Dtype),
        sn: u64,
    ) -> (u64, u64) {
        let (mut k, mut bytes) = (0u64, 0u64);
        let mut read_memo: PageMemo = None;
        let mut buf = std::mem::take(&mut self.copybuf);
        let Device { hbm, cores, .. } = self;
        // The window's bytes, borrowed once for the whole transfer.
        let mem = &mut cores[nc].lane.get().mem;
        let mut window = if walk.into_window {
            Window::Into(mem.bytes_mut(space))
        } else {
            Window::From(mem.bytes(space))
        };
        while k < sn {
            let Some((hbm_at, at, n, hbm_n, run)) = walk.at(k) else {
                break;
            };
            let done = match &mut window {
                Window::Into(w) => {
                    let Some(to) = w.get_mut(at..at + n) else {
                        break;
                    };
                    let off = (hbm_at % PAGE) as usize;
                    let from = hbm
                        .page_cached(&mut read_memo, hbm_at)
                        .and_then(|p| p.get(off..off.checked_add(hbm_n)?));
                    match from {
                        Some(b) => convert_into(i, o, b, to),
                        None => {
                            buf.resize(hbm_n, 0);
                            hbm.read(hbm_at, &mut buf);
                            convert_into(i, o, &buf, to)
                        }
                    }
                }
                Window::From(w) => {
                    let Some(from) = w.get(at..at + n) else {
                        break;
                    };
                    buf.resize(hbm_n, 0);
                    let done = convert_into(i, o, from, &mut buf);
                    // (Out of the window into HBM: no page is remembered, as writes add pages.)
                    read_memo = None;
                    hbm.write(hbm_at, &buf);
                    done
                }
                Window::Away => break,
            };
            debug_assert!(done, "sizes checked on entry");
            bytes += run * walk.d.src_elem;
            k += run;
        }
        self.copybuf = buf;
        (k, bytes)
    }

    /// Move the checked runs of a large [`Self::window_runs`] transfer (HBM address, offset
    /// in core `nc`'s `space`, length; into the window or out of it; no two runs write a
    /// common byte) as one batch of copies shared with the data-path helpers (`runcopy`)
    /// where every run's HBM bytes lie in one page, else run by run.
    #[allow(unsafe_code)]
    fn share_window_runs(
        &mut self,
        nc: usize,
        space: neuron_isa::Space,
        into_window: bool,
        runs: &[(u64, usize, usize)],
    ) {
        let mut moves = std::mem::take(&mut self.dmamoves);
        moves.clear();
        let Device { hbm, cores, .. } = self;
        // The window's bytes, borrowed once for the whole transfer (a write is counted per
        // borrow, `CoreMem::writes`).
        let mem = &mut cores[nc].lane.get().mem;
        if into_window {
            let window = mem.bytes_mut(space);
            let base = window.as_mut_ptr();
            let mut memo: PageMemo = None;
            let whole = runs.iter().all(|&(h, at, n)| {
                let off = (h % PAGE) as usize;
                let from = hbm
                    .page_cached(&mut memo, h)
                    .and_then(|p| p.get(off..off.checked_add(n)?));
                match (from, at.checked_add(n).is_some_and(|e| e <= window.len())) {
                    (Some(b), true) => {
                        moves.push(crate::runcopy::Run {
                            from: b.as_ptr(),
                            to: base.wrapping_add(at),
                            len: n,
                        });
                        true
                    }
                    _ => false,
                }
            });
            if whole {
                // SAFETY: each source lies in an HBM page and each destination in the
                // window (both checked above), memories apart; the destinations are apart
                // (the caller's pattern check); the pages and the window stay borrowed,
                // untouched by anything else, for the call.
                crate::fanout::with(true, || unsafe {
                    crate::runcopy::copy(&moves, Some(RUNS_AHEAD as usize), true)
                });
            } else {
                // Runs reading absent pages or crossing a page: one by one.
                for &(h, at, n) in runs {
                    if let Some(to) = window.get_mut(at..at + n) {
                        hbm.read(h, to);
                    }
                }
            }
        } else {
            let window = mem.bytes(space);
            let mut last: Option<(u64, *mut u8)> = None;
            let mut whole = true;
            for &(h, at, n) in runs {
                let (pg, off) = (h / PAGE, (h % PAGE) as usize);
                let (Some(from), true) = (
                    window.get(at..at.saturating_add(n)),
                    off.checked_add(n).is_some_and(|e| e <= PAGE as usize),
                ) else {
                    whole = false;
                    break;
                };
                let page = match last {
                    Some((p, ptr)) if p == pg => ptr,
                    _ => match hbm.page_for_write(pg) {
                        Some(b) => b.as_mut_ptr(),
                        None => {
                            whole = false;
                            break;
                        }
                    },
                };
                last = Some((pg, page));
                moves.push(crate::runcopy::Run {
                    from: from.as_ptr(),
                    to: page.wrapping_add(off),
                    len: n,
                });
            }
            if whole {
                // SAFETY: each source lies in the window and each destination in an HBM
                // page (made above; a page's bytes never move once made), memories
                // apart; the destinations are apart (the caller's pattern check: distinct
                // HBM addresses are distinct page bytes); nothing else touches HBM or the
                // window during the call.
                crate::fanout::with(true, || unsafe { crate::runcopy::copy(&moves, None, true) });
            } else {
                // Out of the window into HBM where a run crosses a page or HBM has
                // backed regions: one by one, in order.
                for &(h, at, n) in runs {
                    if let Some(from) = window.get(at..at + n) {
                        hbm.write(h, from);
                    }
                }
            }
        }
        moves.clear();
        self.dmamoves = moves;
    }

    /// Copy `len` bytes from `src` to `dst` in one step when one side is HBM and the other a
    /// core's SBUF or PSUM window, both resolvable and in bounds; false (nothing moved) for
    /// anything else, which the caller then moves through its buffer, errors included.
    fn direct_run(&mut self, src: u64, dst: u64, len: u64) -> bool {
        let (Ok((ts, os)), Ok((td, od))) =
            (self.resolve(src, len, false), self.resolve(dst, len, true))
        else {
            return false;
        };
        let window = |dev: &Device, t: Target, off: u64| match t {
            Target::Sbuf(nc) | Target::Psum(nc) if (nc as usize) < dev.cores.len() => {
                let space = space_of(t);
                dev.partition_span(nc as usize, space, off, len)
                    .map(|at| (nc as usize, space, at))
            }
            _ => None,
        };
        let n = len as usize;
        match (ts, td) {
            (Target::Hbm(_), _) => {
                let Some((nc, space, at)) = window(self, td, od) else {
                    return false;
                };
                let Device { hbm, cores, .. } = self;
                cores[nc]
                    .lane
                    .write_runs(space, &[(at, n)], |_, to| hbm.read(src, to))
            }
            (_, Target::Hbm(_)) => {
                let Some((nc, space, at)) = window(self, ts, os) else {
                    return false;
                };
                let Device { hbm, cores, .. } = self;
                let Some(from) = cores[nc].lane.get().mem.bytes(space).get(at..at + n) else {
                    return false;
                };
                hbm.write(dst, from);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{tpb, ArchProfile};
    use crate::device::ThreadMode;

    /// The DMA engine's fp32 ↔ bf16 and fp32 ↔ fp16 casts are `half`'s, bit for bit (round to nearest even,
    /// NaN payloads, infinities, subnormals), including a trailing partial element ignored.
    #[test]
    fn float_casts_round_as_half_does() {
        let mut s = 0x1234_5678u32;
        let mut bits: Vec<u32> = (0..20_000)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s
            })
            .collect();
        bits.extend([
            0,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0001,
            0x3f80_8000,
            0x0000_8000,
        ]);
        let mut src: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        src.push(0xaa);
        let mut out = vec![9u8];
        convert_elems(Dtype::F32, Dtype::Bf16, &src, &mut out);
        let want: Vec<u8> = bits
            .iter()
            .flat_map(|b| {
                half::bf16::from_f32(f32::from_bits(*b))
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        assert_eq!(out, want);
        let halves: Vec<u8> = want.iter().copied().chain([0x55]).collect();
        convert_elems(Dtype::Bf16, Dtype::F32, &halves, &mut out);
        let back: Vec<u8> = want
            .chunks_exact(2)
            .flat_map(|c| {
                half::bf16::from_le_bytes([c[0], c[1]])
                    .to_f32()
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        assert_eq!(out, back);
        // fp32 ↔ fp16 through the batched loops: `half`'s scalar conversions (what the
        // per-element path calls), over more than one batch and a trailing partial element.
        convert_elems(Dtype::F32, Dtype::F16, &src, &mut out);
        let want: Vec<u8> = bits
            .iter()
            .flat_map(|b| {
                half::f16::from_f32(f32::from_bits(*b))
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        assert_eq!(out, want);
        let halves: Vec<u8> = want.iter().copied().chain([0x55]).collect();
        convert_elems(Dtype::F16, Dtype::F32r, &halves, &mut out);
        let back: Vec<u8> = want
            .chunks_exact(2)
            .flat_map(|c| {
                half::f16::from_le_bytes([c[0], c[1]])
                    .to_f32()
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        assert_eq!(out, back);
    }

    /// DMA_DIRECT2D moves contiguous runs at once; the result must equal the element-by-element
    /// definition (computed here independently), with and without a dtype conversion.
    #[test]
    fn dma2d_runs_match_the_elementwise_definition() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        let src: Vec<f32> = (0..4096).map(|i| i as f32 * 0.37 - 50.0).collect();
        let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
        dev.write(hbm, &bytes).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        // 3 rows of 40 fp32 elements, source rows 64 elements apart, into partitions 2..5
        // (destination rows of 8 elements: runs end at the shorter row).
        let mut d = crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(hbm + 4 * 5),
            src_step: [4, 256],
            src_num: [40, 3],
            src_elem: 4,
            dst: DmaAddr::Absolute(sbuf + 2 * tpb::SBUF_PARTITION_STRIDE + 0x100),
            dst_step: [4, tpb::SBUF_PARTITION_STRIDE],
            dst_num: [8, 15],
            dst_elem: 4,
            in_dtype: Some(Dtype::F32),
            out_dtype: Some(Dtype::F32),
            semaphore: 0,
            increment: 0,
        };
        dev.dma2d(0, &d, Ps::ZERO).expect("plain dma");
        let elem = |k: u64| src[(5 + (k % 40) + 64 * (k / 40)) as usize];
        for k in 0..120u64 {
            let at = sbuf + (2 + k / 8) * tpb::SBUF_PARTITION_STRIDE + 0x100 + 4 * (k % 8);
            let mut b = [0u8; 4];
            dev.read(at, &mut b).expect("read back");
            assert_eq!(f32::from_le_bytes(b), elem(k), "element {k}");
        }
        // Same shape, converted to bf16 on the way (round to nearest even).
        d.dst = DmaAddr::Absolute(sbuf + 0x800);
        d.dst_step = [2, tpb::SBUF_PARTITION_STRIDE];
        d.dst_elem = 2;
        d.out_dtype = Some(Dtype::Bf16);
        dev.dma2d(0, &d, Ps::ZERO).expect("converting dma");
        for k in 0..120u64 {
            let at = sbuf + (k / 8) * tpb::SBUF_PARTITION_STRIDE + 0x800 + 2 * (k % 8);
            let mut b = [0u8; 2];
            dev.read(at, &mut b).expect("read back");
            let bits = elem(k).to_bits();
            let rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16;
            assert_eq!(u16::from_le_bytes(b), rne, "element {k}");
        }
        // A run that crosses into unmapped space still aborts.
        d.src = DmaAddr::Absolute(0x7F_FFFF_FF00);
        assert!(dev.dma2d(0, &d, Ps::ZERO).is_err());
    }

    /// Strided rows out of HBM (a KV cache's: 256 bytes every 4 KiB), one of them across a
    /// 64 KiB page boundary and the last ones in a page never written, land as HBM holds them
    /// (zeros for the absent page): a page remembered for one run never serves another's
    /// (`SparseMem::page_cached`). Reference: a flat shadow of what was written.
    #[test]
    fn strided_rows_across_hbm_pages_read_their_own_bytes() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        // Row 3 starts 128 bytes before a page boundary; 40 rows span three pages.
        let base = 0x100_0000u64 + PAGE - 3 * 4096 - 128;
        let written = 2 * PAGE - (base - 0x100_0000); // up to the third page
        let shadow: Vec<u8> = (0..written).map(|i| (i * 31 + i / 4096) as u8).collect();
        dev.write(base, &shadow).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        let d = crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(base),
            src_step: [4, 4096],
            src_num: [64, 40],
            src_elem: 4,
            dst: DmaAddr::Absolute(sbuf + 0x40),
            dst_step: [4, tpb::SBUF_PARTITION_STRIDE],
            dst_num: [64, 40],
            dst_elem: 4,
            in_dtype: Some(Dtype::F32),
            out_dtype: Some(Dtype::F32),
            semaphore: 0,
            increment: 0,
        };
        dev.dma2d(0, &d, Ps::ZERO).expect("strided dma");
        for r in 0..40u64 {
            let mut got = [0u8; 256];
            dev.read(sbuf + r * tpb::SBUF_PARTITION_STRIDE + 0x40, &mut got)
                .expect("read back");
            let want: Vec<u8> = (0..256)
                .map(|i| shadow.get((r * 4096 + i) as usize).copied().unwrap_or(0))
                .collect();
            assert_eq!(&got[..], &want[..], "row {r}");
        }
    }

    /// Runs between HBM and SBUF move in one copy (`direct_run`): a round trip through SBUF
    /// partitions gives the bytes back, and a run past a partition's end still aborts with
    /// the buffered path's destination error.
    #[test]
    fn direct_runs_give_the_buffered_bytes_and_errors() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let (from, back) = (0x100_0000u64, 0x200_0000u64);
        let bytes: Vec<u8> = (0..8 * 4096u32).map(|i| (i * 7 + i / 4096) as u8).collect();
        dev.write(from, &bytes).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        let row = |src, src_step, dst, dst_step| crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(src),
            src_step: [4096, src_step],
            src_num: [8, 1],
            src_elem: 4096,
            dst: DmaAddr::Absolute(dst),
            dst_step: [dst_step, 1],
            dst_num: [8, 1],
            dst_elem: 4096,
            in_dtype: None,
            out_dtype: None,
            semaphore: 0,
            increment: 0,
        };
        // 8 rows of 4 KiB into partitions 0..8 at offset 0x40, and back.
        let mut d = row(from, 1, sbuf + 0x40, tpb::SBUF_PARTITION_STRIDE);
        d.src_step = [4096, 1];
        assert_eq!(dev.dma2d(0, &d, Ps::ZERO).expect("in").1, 8 * 4096);
        let mut d = row(sbuf + 0x40, 1, back, 4096);
        d.src_step = [tpb::SBUF_PARTITION_STRIDE, 1];
        dev.dma2d(0, &d, Ps::ZERO).expect("out");
        let mut got = vec![0u8; bytes.len()];
        dev.read(back, &mut got).expect("read back");
        assert_eq!(got, bytes);
        let mut p3 = vec![0u8; 4096];
        dev.read(sbuf + 3 * tpb::SBUF_PARTITION_STRIDE + 0x40, &mut p3)
            .expect("partition 3");
        assert_eq!(p3, bytes[3 * 4096..4 * 4096]);
        // A row that would run past the partition's end.
        let pb = dev.profile.sbuf_partition_bytes as u64;
        let mut d = row(from, 1, sbuf + pb - 100, tpb::SBUF_PARTITION_STRIDE);
        d.src_num = [1, 1];
        d.dst_num = [1, 1];
        let e = dev.dma2d(0, &d, Ps::ZERO).expect_err("past the partition");
        assert_eq!(e.kind, FaultKind::DmaAbort);
        assert!(e.detail.contains("destination"), "{}", e.detail);
        // Three 64-byte elements into partition 0, half a partition apart: the third starts
        // at the partition's end. The first two arrive (the window's runs), the third faults
        // as a run moved through the buffer does.
        let mut d = row(from, 1, sbuf, pb / 2);
        (d.src_step, d.src_num, d.src_elem) = ([64, 1], [3, 1], 64);
        (d.dst_num, d.dst_elem) = ([3, 1], 64);
        let e = dev.dma2d(0, &d, Ps::ZERO).expect_err("the third element");
        assert!(e.detail.contains("destination"), "{}", e.detail);
        let mut two = vec![0u8; 64];
        for (i, at) in [0, pb / 2].into_iter().enumerate() {
            dev.read(sbuf + at, &mut two).expect("partition 0");
            assert_eq!(two, bytes[64 * i..64 * (i + 1)], "element {i}");
        }
    }

    /// The doorbell registers name (engine, queue, side) of the core whose window holds them;
    /// other addresses are no doorbell, and ringing a queue never initialised is refused.
    #[test]
    fn doorbell_addresses_name_their_queue() {
        use neuron_abi::tpb::{DMA_DOORBELL, DMA_DOORBELL_SIZE};
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let core1 = dev.profile.tpb_base(1) + DMA_DOORBELL;
        assert_eq!(
            dev.dma_doorbell(core1 + (5 * 16 + 2) * 8),
            Some((16 + 5, 2, false))
        );
        assert_eq!(
            dev.dma_doorbell(core1 + (5 * 16 + 2) * 8 + 4),
            Some((16 + 5, 2, true))
        );
        assert_eq!(dev.dma_doorbell(core1 + DMA_DOORBELL_SIZE), None);
        assert_eq!(dev.dma_doorbell(core1 - 4), None);
        assert_eq!(dev.dma_doorbell(0x100_0000), None, "HBM");
        assert_eq!(
            dev.dma_queue_start(16 + 5, 2, 1, 0),
            Err(DmaError::NotInitialised)
        );
    }

    /// The measurements' transfer: 128 elements of `elem` bytes, `src_step` apart in HBM from
    /// `src`, one into each partition of the SBUF window from `dst`.
    /// Large transfers between HBM and SBUF (shared with the data-path helpers where their
    /// destination runs are apart) leave the bytes the element-by-element definition gives,
    /// with fan-out on or off: a spill out of 128 partitions, a load into them, both
    /// converting, rows that cross HBM pages, rows from never-written HBM, and a destination
    /// pattern whose runs overlap (the later run's bytes win).
    #[test]
    fn large_transfers_move_the_definitions_bytes_shared_or_not() {
        let stride = tpb::SBUF_PARTITION_STRIDE;
        let hbm = 0x100_0000u64;
        let spill = |elem: u64, dst_step: [u64; 2]| crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(0),
            src_step: [elem, stride],
            src_num: [2, 128],
            src_elem: elem,
            dst: DmaAddr::Absolute(hbm),
            dst_step,
            dst_num: [2, 128],
            dst_elem: elem,
            in_dtype: None,
            out_dtype: None,
            semaphore: 0,
            increment: 0,
        };
        let load = |src: u64, row: u64, elem: u64| crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(src),
            src_step: [row, 1],
            src_num: [128, 1],
            src_elem: elem,
            dst: DmaAddr::Absolute(0),
            dst_step: [stride, 1],
            dst_num: [128, 1],
            dst_elem: elem,
            in_dtype: None,
            out_dtype: None,
            semaphore: 0,
            increment: 0,
        };
        // A spill converted to bf16 on the way (as the attention kernels' outputs).
        let mut narrowing = spill(512, [32_768, 256]);
        (narrowing.dst_elem, narrowing.in_dtype, narrowing.out_dtype) =
            (256, Some(Dtype::F32), Some(Dtype::Bf16));
        let mut widening = load(hbm, 1024, 512);
        (widening.dst_elem, widening.in_dtype, widening.out_dtype) =
            (1024, Some(Dtype::Bf16), Some(Dtype::F32));
        let cases = [
            ("narrowing spill", narrowing),
            ("widening load", widening),
            ("spill", spill(2048, [262_144, 2048])),
            ("overlapping spill", spill(2048, [1024, 3072])),
            ("load", load(hbm, 2048, 2048)),
            ("rows across pages", load(hbm + 1000, 6000, 6000)),
            ("never-written rows", load(hbm + (64 << 20), 4096, 4096)),
        ];
        for (what, mut d) in cases {
            let into_sbuf = matches!(d.src, DmaAddr::Absolute(a) if a >= hbm);
            let mut got = Vec::new();
            for fan in [ThreadMode::Off, ThreadMode::Auto] {
                let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
                dev.set_threads(fan);
                let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
                let fill = |dev: &mut Device, at: u64, len: usize, seed: usize| {
                    let b: Vec<u8> = (0..len).map(|i| ((i * 131 + seed) % 251) as u8).collect();
                    dev.write(at, &b).expect("fill");
                    b
                };
                // Source bytes, and what every destination byte holds before.
                let hbm_len = 1 << 20;
                let hbm_bytes = fill(&mut dev, hbm, hbm_len, 1);
                let rows: Vec<Vec<u8>> = (0..128)
                    .map(|p| fill(&mut dev, sbuf + p * stride, 16 << 10, 7 * p as usize))
                    .collect();
                if into_sbuf {
                    d.dst = DmaAddr::Absolute(sbuf);
                } else {
                    d.src = DmaAddr::Absolute(sbuf);
                }
                dev.dma2d(0, &d, Ps::ZERO).expect(what);
                // The definition: element k from its source to its destination, in order.
                let mut want: std::collections::BTreeMap<u64, u8> = Default::default();
                let (n0s, n0d) = (d.src_num[0], d.dst_num[0]);
                for k in 0..d.src_num[0] * d.src_num[1] {
                    let (DmaAddr::Absolute(sa), DmaAddr::Absolute(da)) = (d.src, d.dst) else {
                        unreachable!()
                    };
                    let s = sa + (k % n0s) * d.src_step[0] + (k / n0s) * d.src_step[1];
                    let t = da + (k % n0d) * d.dst_step[0] + (k / n0d) * d.dst_step[1];
                    let byte = |a: u64| {
                        if a >= sbuf && a < sbuf + 128 * stride {
                            rows[((a - sbuf) / stride) as usize][((a - sbuf) % stride) as usize]
                        } else if a >= hbm && a < hbm + hbm_len as u64 {
                            hbm_bytes[(a - hbm) as usize]
                        } else {
                            0
                        }
                    };
                    let elem: Vec<u8> = (0..d.src_elem).map(|b| byte(s + b)).collect();
                    // Conversions by `half`, value by value.
                    let out: Vec<u8> = match (d.in_dtype, d.out_dtype) {
                        (Some(Dtype::F32), Some(Dtype::Bf16)) => elem
                            .chunks_exact(4)
                            .flat_map(|c| {
                                let x = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                                half::bf16::from_f32(x).to_bits().to_le_bytes()
                            })
                            .collect(),
                        (Some(Dtype::Bf16), Some(Dtype::F32)) => elem
                            .chunks_exact(2)
                            .flat_map(|c| {
                                half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))
                                    .to_f32()
                                    .to_le_bytes()
                            })
                            .collect(),
                        _ => elem,
                    };
                    for (b, v) in out.into_iter().enumerate() {
                        want.insert(t + b as u64, v);
                    }
                }
                let mut back = Vec::with_capacity(want.len());
                for (&a, &v) in &want {
                    let mut b = [0u8];
                    dev.read(a, &mut b).expect("read back");
                    assert_eq!(b[0], v, "{what}, fan-out {fan:?}: byte at 0x{a:x}");
                    back.push(b[0]);
                }
                got.push(back);
            }
            assert!(got[0] == got[1], "{what}");
        }
    }

    fn partition_rows(src: u64, src_step: u64, elem: u64, dst: u64) -> crate::cayman_exec::Dma2d {
        crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(src),
            src_step: [src_step, 1],
            src_num: [128, 1],
            src_elem: elem,
            dst: DmaAddr::Absolute(dst),
            dst_step: [tpb::SBUF_PARTITION_STRIDE, 1],
            dst_num: [128, 1],
            dst_elem: elem,
            in_dtype: None,
            out_dtype: None,
            semaphore: 0,
            increment: 0,
        }
    }

    /// µs per call of `f(0..512)`, the best of seven rounds.
    fn best_of_rounds(f: &mut dyn FnMut(u64)) -> f64 {
        (0..7)
            .map(|_| {
                let t0 = std::time::Instant::now();
                (0..512).for_each(&mut *f);
                t0.elapsed().as_secs_f64() * 1e6 / 512.0
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Not a test but a measurement (`--ignored`): a decode step's scatter of one 2-byte
    /// element into each of 128 partitions (256 contiguous HBM bytes, kgm-attn's other DMA),
    /// through `dma2d`, best of seven rounds of 512. `cargo test --release -p neuron-devmodel
    /// --lib two_byte_rows -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn two_byte_rows_dma_rate() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        dev.write(hbm, &vec![7u8; 1 << 20]).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        let best = best_of_rounds(&mut |t| {
            let d = partition_rows(hbm + (t % 64) * 256, 2, 2, sbuf + (t % 32) * 2);
            dev.dma2d(0, &d, Ps::ZERO).expect("dma");
        });
        eprintln!("128 x 2 B from 256 contiguous HBM bytes -> 128 partitions: dma2d {best:.2} us per transfer");
    }

    /// Not a test but a measurement (`--ignored`): a decode step's KV-cache loads, 128 rows of
    /// 256 bytes every 4 KiB of HBM into 128 partitions, through `dma2d`, against the same
    /// rows copied between two plain buffers in the same run; prints the huge-page setting
    /// (`pagepool`). `cargo test --release -p neuron-devmodel --lib kv_cache_rows -- --ignored
    /// --nocapture`
    #[test]
    #[ignore]
    fn kv_cache_rows_dma_rate() {
        let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
        let hbm = 0x100_0000u64;
        let span = 32usize << 20;
        dev.write(hbm, &vec![7u8; span]).expect("hbm write");
        let sbuf = dev.profile.tpb_base(0) + tpb::SBUF;
        // 256 transfers per round over 16 MiB of cache, as kgm-attn_tkg_v6's 256 a step.
        let transfer = |t: u64| {
            let src = (t % 32) * (512 << 10) + (t / 32 % 8) * 256 + (t / 256 % 2) * (16 << 20);
            (src, (t % 64) * 256)
        };
        // The plain copy's destination rows at the storage's partition stride, as the
        // DMA's land (`core::STORAGE_SKEW`).
        let rs = crate::core::window_stride(neuron_isa::Space::Sbuf) + crate::core::STORAGE_SKEW;
        let (src_plain, mut dst_plain) = (vec![7u8; span], vec![0u8; 128 * rs]);
        let best = best_of_rounds;
        let dma = best(&mut |t| {
            let (s, d) = transfer(t);
            let d = partition_rows(hbm + s, 4096, 256, sbuf + d);
            dev.dma2d(0, &d, Ps::ZERO).expect("dma");
        });
        let plain = best(&mut |t| {
            let (s, d) = transfer(t);
            for row in 0..128usize {
                let from = s as usize + row * 4096;
                let to = d as usize + row * rs;
                dst_plain[to..to + 256].copy_from_slice(&src_plain[from..from + 256]);
            }
        });
        eprintln!(
            "KV-cache rows (128 x 256 B every 4 KiB -> 128 partitions): dma2d {dma:.2} us, plain copy {plain:.2} us per transfer, ratio {:.2}; huge pages {} (kernel: {})",
            dma / plain,
            if crate::pagepool::huge_pages_on() { "on" } else { "off" },
            crate::pagepool::huge_pages_mode()
        );
    }
}
