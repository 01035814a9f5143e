//! DMA_DIRECT2D runs between one HBM range and one core's SBUF/PSUM window, the common
//! case of the descriptor-generating DMA (`dma.rs`): each side resolved once per transfer,
//! HBM pages looked up once per page, runs copied or converted from where their source
//! lies into where they go, and a large transfer whose destination runs are apart moved as
//! one batch shared with the data-path helpers (`runcopy`). Whatever does not fit here
//! goes run by run through `Device::dma2d_runs`, errors included.

use super::dma::convert_into;
use super::memory::space_of;
use super::Device;
use crate::addrmap::Target;
use crate::hbm::{PageMemo, PAGE};
use neuron_isa::Dtype;

/// How many runs ahead a DMA from HBM into SBUF/PSUM asks for its source lines.
const RUNS_AHEAD: u64 = 8;

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
    /// The columns the window side's elements lie in, where the transfer writes the window
    /// and its pattern says ([`super::memory::Geometry::cols_of`]): a write stamps only
    /// those (`CoreMem::bytes_mut_cols`), so memos and rows kept in other columns (a
    /// transpose's identity, weights read where they lie) outlive it.
    cols: Option<(usize, usize)>,
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
    pub(super) fn window_runs(
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
        let cols = if into_window {
            geometry.cols_of(woff, d.dst_num, d.dst_step, d.dst_elem)
        } else {
            None
        };
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
            cols,
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
            self.share_window_runs(nc, space, into_window, cols, &runs);
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
            (false, true) => Window::Into(cores[nc].lane.get().mem.bytes_mut_in(space, cols)),
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
            Window::Into(mem.bytes_mut_in(space, walk.cols))
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
        cols: Option<(usize, usize)>,
        runs: &[(u64, usize, usize)],
    ) {
        let mut moves = std::mem::take(&mut self.dmamoves);
        moves.clear();
        let Device { hbm, cores, .. } = self;
        // The window's bytes, borrowed once for the whole transfer (a write is counted per
        // borrow, `CoreMem::writes`).
        let mem = &mut cores[nc].lane.get().mem;
        if into_window {
            let window = mem.bytes_mut_in(space, cols);
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
            // The last two pages written, latest first: a spill's rows alternate between
            // two blocks 256 KiB apart, so one remembered page missed at every run.
            let mut last: [Option<(u64, *mut u8)>; 2] = [None; 2];
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
                    [Some((p, ptr)), _] if p == pg => ptr,
                    [first, Some((p, ptr))] if p == pg => {
                        last = [Some((p, ptr)), first];
                        ptr
                    }
                    [first, _] => match hbm.page_for_write(pg) {
                        Some(b) => {
                            let ptr = b.as_mut_ptr();
                            last = [Some((pg, ptr)), first];
                            ptr
                        }
                        None => {
                            whole = false;
                            break;
                        }
                    },
                };
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
    pub(super) fn direct_run(&mut self, src: u64, dst: u64, len: u64) -> bool {
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
    use crate::fault::FaultKind;
    use crate::time::Ps;
    use neuron_isa::cayman::DmaAddr;
    use neuron_isa::Space;

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

    /// A DMA into SBUF stamps only the columns its rows land in (`Geometry::cols_of`): a
    /// memo of other columns (a transpose's identity) outlives it, one of its own columns
    /// does not, and a pattern whose columns are not known stamps them all. Copying, shared
    /// (large) and converting transfers alike.
    #[test]
    fn window_writes_stamp_their_own_columns() {
        let sbuf_of = |dev: &Device| dev.profile.tpb_base(0) + tpb::SBUF;
        let rows = |dst: u64, step: u64, elem: u64, convert: bool| crate::cayman_exec::Dma2d {
            src: DmaAddr::Absolute(0x100_0000),
            src_step: [elem, elem],
            src_num: [1, 128],
            src_elem: elem,
            dst: DmaAddr::Absolute(dst),
            dst_step: [elem, step],
            dst_num: [1, 128],
            dst_elem: if convert { elem / 2 } else { elem },
            in_dtype: Some(Dtype::F32),
            out_dtype: Some(if convert { Dtype::Bf16 } else { Dtype::F32 }),
            semaphore: 0,
            increment: 0,
        };
        for (elem, convert, fan) in [
            (256u64, false, ThreadMode::Off),
            (2048, false, ThreadMode::Auto),
            (256, true, ThreadMode::Off),
        ] {
            let mut dev = Device::new(ArchProfile::new(neuron_abi::Arch::V3Trn2));
            dev.set_threads(fan);
            dev.write(0x100_0000, &vec![1u8; 128 * elem as usize])
                .expect("hbm");
            let sbuf = sbuf_of(&dev);
            let before = dev.cores[0].lane.get().mem.writes(Space::Sbuf);
            let d = rows(sbuf + 0x4000, tpb::SBUF_PARTITION_STRIDE, elem, convert);
            dev.dma2d(0, &d, Ps::ZERO).expect("rows into SBUF");
            let out = if convert { elem / 2 } else { elem } as usize;
            let mem = &dev.cores[0].lane.get().mem;
            assert!(mem.writes(Space::Sbuf) > before, "counted as a write");
            assert!(
                mem.cols_unwritten_since(Space::Sbuf, before, 0, 0x4000),
                "{elem} {convert}: columns before untouched"
            );
            assert!(mem.cols_unwritten_since(Space::Sbuf, before, 0x4000 + out + 256, 0x8000));
            assert!(!mem.cols_unwritten_since(Space::Sbuf, before, 0x4000 + out - 1, 0x4000 + out));
            // Rows a partition and 16 bytes apart: columns not known, all stamped.
            let before = dev.cores[0].lane.get().mem.writes(Space::Sbuf);
            let d = rows(
                sbuf + 0x4000,
                tpb::SBUF_PARTITION_STRIDE + 16,
                elem,
                convert,
            );
            let _ = dev.dma2d(0, &d, Ps::ZERO);
            let mem = &dev.cores[0].lane.get().mem;
            assert!(
                !mem.cols_unwritten_since(Space::Sbuf, before, 0, 16),
                "all stamped"
            );
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
