//! DMA: the queues (rings of descriptor pairs in device-visible memory, consumed from head to
//! the rung tails), one descriptor pair per event, and the descriptor-generating
//! DMA_DIRECT2D (strided runs, dtype conversion, a semaphore added at completion).

use super::{Device, DmaError, Ev, DMA_ENGINES_PER_NC};
use crate::fault::{FaultKind, OpFault};
use crate::hooks::{DescAction, Site};
use crate::time::Ps;
use neuron_abi::udma::UdmaDesc;
use neuron_isa::cayman::DmaAddr;
use neuron_isa::Dtype;
use zerocopy::FromBytes;

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
pub(super) fn convert_into(i: Dtype, o: Dtype, src: &[u8], out: &mut [u8]) -> bool {
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
        if !self.watch.any() {
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
            if convert.is_none() && !self.watch.any() && self.direct_run(s, t, run * d.src_elem) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{tpb, ArchProfile};

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
}
