//! One NeuronCore: SBUF, PSUM, the register page, and the compute semantics of each
//! instruction on whole tiles.

use crate::arch::ArchProfile;
use crate::fault::OpFault;
use crate::gemm::{self, View};
use crate::hostmem::{F32Mem, MemSource};
use crate::regs::RegPage;
use neuron_isa::dtype::{load_f32, store_f32};
use neuron_isa::{ActFunc, Dtype, Op, Space, TensorRef};
use std::sync::Arc;
use zerocopy::IntoBytes;

/// On-chip memories of one core.
#[derive(Debug)]
pub struct CoreMem {
    pub partitions: usize,
    pub sbuf_pb: usize,
    pub psum_pb: usize,
    /// Distance between partitions in storage: the TPB window's stride (256 KiB for SBUF,
    /// 16 KiB for PSUM), so the SBUF storage is exactly the 32 MiB window user space maps.
    pub sbuf_stride: usize,
    pub psum_stride: usize,
    /// SBUF, partition-major, `partitions * sbuf_pb` bytes, stored as f32 words so fp32 tiles
    /// can feed the GEMM without copies; page-aligned, possibly in memory user space maps.
    pub sbuf: F32Mem,
    pub psum: F32Mem,
}

impl CoreMem {
    pub fn new(p: &ArchProfile) -> Self {
        Self::with_memory(p, &crate::hostmem::heap_source)
    }

    /// SBUF and PSUM storage from `src` (the heap where it gives none). Allocation failure of
    /// this fixed-size, lazily-touched memory is fatal, like any allocation failure.
    pub fn with_memory(p: &ArchProfile, src: MemSource) -> Self {
        let words = |stride: u64| p.partitions * stride as usize / 4;
        let alloc = |n: usize| F32Mem::zeroed(n, src).expect("SBUF/PSUM storage");
        CoreMem {
            partitions: p.partitions,
            sbuf_pb: p.sbuf_partition_bytes,
            psum_pb: p.psum_partition_bytes,
            sbuf_stride: crate::arch::tpb::SBUF_PARTITION_STRIDE as usize,
            psum_stride: crate::arch::tpb::PSUM_PARTITION_STRIDE as usize,
            // Zeroed allocations this large come straight from the OS (or a sparse memfd):
            // untouched pages cost nothing.
            sbuf: alloc(words(crate::arch::tpb::SBUF_PARTITION_STRIDE)),
            psum: alloc(words(crate::arch::tpb::PSUM_PARTITION_STRIDE)),
        }
    }

    /// Reset-time clearing. PSUM (2 MiB) is zeroed; SBUF keeps its contents, as SRAM does
    /// across a core reset: zeroing the 32 MiB window would touch every page of it on each
    /// load, and programs must initialise what they read anyway.
    pub fn clear(&mut self) {
        self.psum.fill(0.0);
    }

    fn pb(&self, s: Space) -> usize {
        match s {
            Space::Sbuf => self.sbuf_pb,
            Space::Psum => self.psum_pb,
        }
    }

    fn stride(&self, s: Space) -> usize {
        match s {
            Space::Sbuf => self.sbuf_stride,
            Space::Psum => self.psum_stride,
        }
    }

    pub fn bytes(&self, s: Space) -> &[u8] {
        match s {
            Space::Sbuf => self.sbuf.as_bytes(),
            Space::Psum => self.psum.as_bytes(),
        }
    }

    /// The storage of `s` as f32 words (fp32 views of aligned tiles index it directly).
    pub fn f32s(&self, s: Space) -> &[f32] {
        match s {
            Space::Sbuf => &self.sbuf,
            Space::Psum => &self.psum,
        }
    }

    pub fn f32s_mut(&mut self, s: Space) -> &mut [f32] {
        match s {
            Space::Sbuf => &mut self.sbuf,
            Space::Psum => &mut self.psum,
        }
    }

    pub fn bytes_mut(&mut self, s: Space) -> &mut [u8] {
        match s {
            Space::Sbuf => self.sbuf.as_mut_bytes(),
            Space::Psum => self.psum.as_mut_bytes(),
        }
    }

    /// Check that `t` stays inside its memory.
    pub fn check(&self, t: &TensorRef, what: &str) -> Result<(), OpFault> {
        let pb = self.pb(t.space) as i64;
        if t.partitions == 0 || t.partition as usize + t.partitions as usize > self.partitions {
            return Err(OpFault::oob(format!(
                "{what}: partitions {}..{} outside 0..{}",
                t.partition,
                t.partition as usize + t.partitions as usize,
                self.partitions
            )));
        }
        let (lo, hi) = t.byte_span();
        // The base offset must be inside the partition even for an empty pattern.
        if t.offset as i64 > pb || (t.free_elems() > 0 && (lo < 0 || hi > pb)) {
            return Err(OpFault::oob(format!(
                "{what}: {:?} bytes {lo}..{hi} outside the {pb}-byte partition",
                t.space
            )));
        }
        Ok(())
    }

    /// Read a tile as f32, partition-major (`partitions * free_elems`).
    pub fn gather(&self, t: &TensorRef, out: &mut Vec<f32>) {
        out.clear();
        let n = t.free_elems();
        if n == 0 {
            return;
        }
        out.reserve(t.partitions as usize * n);
        let pb = self.stride(t.space);
        let es = t.dtype.size() as i64;
        let mem = self.bytes(t.space);
        for p in t.partition as usize..t.partition as usize + t.partitions as usize {
            let base = (p * pb) as i64 + t.offset as i64;
            if t.dtype == Dtype::F32 && t.is_contiguous() && base % 4 == 0 {
                let start = (base / 4) as usize;
                let words = match t.space {
                    Space::Sbuf => &self.sbuf,
                    Space::Psum => &self.psum,
                };
                out.extend_from_slice(&words[start..start + n]);
                continue;
            }
            for i in 0..t.num[0] as i64 {
                let row = base + i * t.step[0] as i64 * es;
                for j in 0..t.num[1] as i64 {
                    let at = (row + j * t.step[1] as i64 * es) as usize;
                    out.push(load_f32(t.dtype, &mem[at..]));
                }
            }
        }
    }

    /// Write a partition-major f32 tile into `t`, converting to its dtype (RNE).
    pub fn scatter(&mut self, t: &TensorRef, vals: &[f32]) {
        let n = t.free_elems();
        if n == 0 || vals.len() < n * t.partitions as usize {
            return;
        }
        let pb = self.stride(t.space);
        let es = t.dtype.size() as i64;
        let dt = t.dtype;
        let contiguous_f32 = dt == Dtype::F32 && t.is_contiguous();
        let mem = self.bytes_mut(t.space);
        for (k, p) in
            (t.partition as usize..t.partition as usize + t.partitions as usize).enumerate()
        {
            let src = &vals[k * n..(k + 1) * n];
            let base = (p * pb) as i64 + t.offset as i64;
            if contiguous_f32 {
                let at = base as usize;
                mem[at..at + 4 * n].copy_from_slice(src.as_bytes());
                continue;
            }
            let mut idx = 0;
            for i in 0..t.num[0] as i64 {
                let row = base + i * t.step[0] as i64 * es;
                for j in 0..t.num[1] as i64 {
                    let at = (row + j * t.step[1] as i64 * es) as usize;
                    store_f32(dt, src[idx], &mut mem[at..]);
                    idx += 1;
                }
            }
        }
    }

    /// The single free-dimension stride (in elements) if the pattern has one.
    fn single_stride(t: &TensorRef) -> Option<usize> {
        let s = if t.num[0] <= 1 {
            t.step[1]
        } else if t.num[1] <= 1 {
            t.step[0]
        } else if t.step[0] as i32 == t.num[1] as i32 * t.step[1] as i32 {
            t.step[1]
        } else {
            return None;
        };
        usize::try_from(s).ok()
    }

    /// A direct f32 view of `t` as a `[partitions x free]` matrix, if its layout allows.
    fn f32_view(&self, t: &TensorRef) -> Option<(usize, usize, usize)> {
        if !matches!(t.dtype, Dtype::F32 | Dtype::F32r) || !t.offset.is_multiple_of(4) {
            return None;
        }
        let cs = Self::single_stride(t)?;
        let pbw = self.stride(t.space) / 4;
        Some((t.partition as usize * pbw + t.offset as usize / 4, pbw, cs))
    }
}

/// Scratch buffers reused across instructions (no allocation on the hot path).
#[derive(Debug, Default)]
pub struct Scratch {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub bytes: Vec<u8>,
}

/// Apply an activation function in f32.
#[inline]
pub fn activate(f: ActFunc, x: f32) -> f32 {
    match f {
        ActFunc::Identity => x,
        ActFunc::Relu => x.max(0.0),
        ActFunc::Exp => x.exp(),
        ActFunc::Gelu => 0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2)),
        ActFunc::Tanh => x.tanh(),
        ActFunc::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        ActFunc::Square => x * x,
    }
}

/// erf in f64 then rounded (W. J. Cody-style rational approximation via the complementary
/// error function's continued fraction is overkill here; this uses the Abramowitz-Stegun
/// 7.1.26 form refined by one Newton step, accurate to ~1e-7 in f32).
fn erf(x: f32) -> f32 {
    let xd = x as f64;
    let t = 1.0 / (1.0 + 0.327_591_1 * xd.abs());
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let mut y = 1.0 - poly * (-xd * xd).exp();
    if xd < 0.0 {
        y = -y;
    }
    // One Newton step on erf(y0) = x using d/dx erf = 2/sqrt(pi) e^{-x^2} is not applicable
    // (we approximate erf itself); the A-S form alone is within 1.5e-7 absolute.
    y as f32
}

/// Execute the data-path part of `op` on `mem`. Returns the number of elements streamed per
/// partition (for the cost model) or a fault.
pub fn execute(op: &Op, mem: &mut CoreMem, s: &mut Scratch) -> Result<u64, OpFault> {
    match op {
        Op::MatMul {
            dst,
            stationary,
            moving,
            accumulate,
        } => matmul(mem, s, dst, stationary, moving, *accumulate),
        Op::Activation {
            func,
            dst,
            src,
            bias,
            scale,
        } => {
            mem.check(dst, "dst")?;
            mem.check(src, "src")?;
            same_shape(dst, src)?;
            mem.gather(src, &mut s.a);
            let n = src.free_elems();
            if let Some(b) = bias {
                mem.check(b, "bias")?;
                if b.partitions != src.partitions {
                    return Err(OpFault::bad(format!(
                        "bias has {} partitions, src {}",
                        b.partitions, src.partitions
                    )));
                }
                let col = TensorRef {
                    num: [1, 1],
                    step: [0, 1],
                    ..*b
                };
                mem.gather(&col, &mut s.b);
            } else {
                s.b.clear();
                s.b.resize(src.partitions as usize, 0.0);
            }
            let (f, sc) = (*func, *scale);
            for (p, row) in s.a.chunks_mut(n.max(1)).enumerate() {
                let bias = s.b[p];
                for v in row.iter_mut() {
                    *v = activate(f, *v * sc + bias);
                }
            }
            mem.scatter(dst, &s.a);
            Ok(n as u64)
        }
        Op::TensorTensor { op, dst, a, b } => {
            mem.check(dst, "dst")?;
            mem.check(a, "a")?;
            mem.check(b, "b")?;
            same_shape(dst, a)?;
            same_shape(dst, b)?;
            mem.gather(a, &mut s.a);
            mem.gather(b, &mut s.b);
            let o = *op;
            for (x, y) in s.a.iter_mut().zip(&s.b) {
                *x = o.apply(*x, *y);
            }
            mem.scatter(dst, &s.a);
            Ok(dst.free_elems() as u64)
        }
        Op::TensorScalar {
            op,
            dst,
            src,
            scalar,
        } => {
            mem.check(dst, "dst")?;
            mem.check(src, "src")?;
            same_shape(dst, src)?;
            mem.gather(src, &mut s.a);
            let (o, c) = (*op, *scalar);
            for x in s.a.iter_mut() {
                *x = o.apply(*x, c);
            }
            mem.scatter(dst, &s.a);
            Ok(dst.free_elems() as u64)
        }
        Op::Copy { dst, src } => {
            mem.check(dst, "dst")?;
            mem.check(src, "src")?;
            same_shape(dst, src)?;
            mem.gather(src, &mut s.a);
            mem.scatter(dst, &s.a);
            Ok(dst.free_elems() as u64)
        }
        Op::Nop | Op::DmaTrigger { .. } | Op::DmaStart { .. } | Op::Notify { .. } | Op::End => {
            Ok(0)
        }
    }
}

fn same_shape(a: &TensorRef, b: &TensorRef) -> Result<(), OpFault> {
    if a.partitions != b.partitions || a.free_elems() != b.free_elems() {
        return Err(OpFault::bad(format!(
            "shape mismatch: [{}, {}] vs [{}, {}]",
            a.partitions,
            a.free_elems(),
            b.partitions,
            b.free_elems()
        )));
    }
    Ok(())
}

fn matmul(
    mem: &mut CoreMem,
    s: &mut Scratch,
    dst: &TensorRef,
    st: &TensorRef,
    mv: &TensorRef,
    acc: bool,
) -> Result<u64, OpFault> {
    if dst.space != Space::Psum || !matches!(dst.dtype, Dtype::F32 | Dtype::F32r) {
        return Err(OpFault::bad("matmul destination must be fp32 PSUM"));
    }
    if st.space != Space::Sbuf || mv.space != Space::Sbuf {
        return Err(OpFault::bad("matmul operands must be in SBUF"));
    }
    mem.check(dst, "dst")?;
    mem.check(st, "stationary")?;
    mem.check(mv, "moving")?;
    let k = st.partitions as usize;
    let m = st.free_elems();
    let n = mv.free_elems();
    if mv.partitions as usize != k {
        return Err(OpFault::bad(format!(
            "contraction mismatch: stationary {k} partitions, moving {}",
            mv.partitions
        )));
    }
    if m > 128 || n > 512 || dst.partitions as usize != m || dst.free_elems() != n {
        return Err(OpFault::bad(format!(
            "matmul shapes: stationary [{k}, {m}], moving [{k}, {n}], dst [{}, {}] (M <= 128, N <= 512)",
            dst.partitions,
            dst.free_elems()
        )));
    }
    let beta = if acc { 1.0 } else { 0.0 };
    // A = stationary^T (m x k), B = moving (k x n): take direct views when the operands are
    // fp32 with a single stride, else convert once into scratch.
    let (a_in_place, av) = match mem.f32_view(st) {
        Some((off, pbw, cs)) => (
            true,
            View {
                off,
                rs: cs,
                cs: pbw,
            },
        ),
        None => {
            mem.gather(st, &mut s.a);
            (
                false,
                View {
                    off: 0,
                    rs: 1,
                    cs: m,
                },
            )
        }
    };
    let (b_in_place, bv) = match mem.f32_view(mv) {
        Some((off, pbw, cs)) => (true, View { off, rs: pbw, cs }),
        None => {
            mem.gather(mv, &mut s.b);
            (
                false,
                View {
                    off: 0,
                    rs: n,
                    cs: 1,
                },
            )
        }
    };
    let c_view = mem
        .f32_view(dst)
        .map(|(off, pbw, cs)| View { off, rs: pbw, cs });
    let CoreMem { sbuf, psum, .. } = mem;
    let a: &[f32] = if a_in_place { sbuf } else { &s.a };
    let b: &[f32] = if b_in_place { sbuf } else { &s.b };
    let ok = match c_view {
        Some(cv) => gemm::sgemm(m, k, n, a, av, b, bv, beta, psum, cv),
        None => {
            // Strided PSUM destination: compute into scratch, then scatter.
            s.c.clear();
            s.c.resize(m * n, 0.0);
            let ok = gemm::sgemm(
                m,
                k,
                n,
                a,
                av,
                b,
                bv,
                0.0,
                &mut s.c,
                View {
                    off: 0,
                    rs: n,
                    cs: 1,
                },
            );
            if ok {
                let mut prev = Vec::new();
                if acc {
                    mem.gather(dst, &mut prev);
                    for (x, y) in s.c.iter_mut().zip(&prev) {
                        *x += *y;
                    }
                }
                let c = std::mem::take(&mut s.c);
                mem.scatter(dst, &c);
                s.c = c;
            }
            ok
        }
    };
    if !ok {
        return Err(OpFault::oob("matmul operand outside its memory"));
    }
    Ok(n as u64)
}

/// Shared handle type for the register page (mapped by user space).
pub type SharedRegs = Arc<RegPage>;

#[cfg(test)]
mod tests {
    use super::*;
    use neuron_abi::arch::Arch;
    use neuron_isa::AluOp;

    fn mem() -> CoreMem {
        CoreMem::new(&ArchProfile::new(Arch::V3Trn2))
    }

    #[test]
    fn matmul_bf16_and_f32_match_naive() {
        for dt in [Dtype::Bf16, Dtype::F32] {
            let mut m = mem();
            let (k, mm, n) = (16usize, 8usize, 12usize);
            let st = TensorRef::tile(Space::Sbuf, dt, 0, k as u8, 0, mm as u16);
            let mv = TensorRef::tile(Space::Sbuf, dt, 0, k as u8, 256, n as u16);
            let sv: Vec<f32> = (0..k * mm).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let mvv: Vec<f32> = (0..k * n).map(|i| ((i * 3) % 13) as f32 * 0.25).collect();
            m.scatter(&st, &sv);
            m.scatter(&mv, &mvv);
            let dst = TensorRef::tile(Space::Psum, Dtype::F32, 0, mm as u8, 0, n as u16);
            let mut s = Scratch::default();
            execute(
                &Op::MatMul {
                    dst,
                    stationary: st,
                    moving: mv,
                    accumulate: false,
                },
                &mut m,
                &mut s,
            )
            .expect("matmul");
            execute(
                &Op::MatMul {
                    dst,
                    stationary: st,
                    moving: mv,
                    accumulate: true,
                },
                &mut m,
                &mut s,
            )
            .expect("matmul");
            let mut out = Vec::new();
            m.gather(&dst, &mut out);
            for i in 0..mm {
                for j in 0..n {
                    let want: f32 =
                        2.0 * (0..k).map(|x| sv[x * mm + i] * mvv[x * n + j]).sum::<f32>();
                    assert_eq!(out[i * n + j], want, "{dt:?} ({i},{j})");
                }
            }
        }
    }

    #[test]
    fn elementwise_and_faults() {
        let mut m = mem();
        let mut s = Scratch::default();
        let a = TensorRef::tile(Space::Sbuf, Dtype::F32, 0, 4, 0, 3);
        m.scatter(
            &a,
            &[
                1.0, -2.0, 3.0, 4.0, -5.0, 6.0, 7.0, 8.0, -9.0, 10.0, 11.0, -12.0,
            ],
        );
        let d = TensorRef::tile(Space::Sbuf, Dtype::Bf16, 0, 4, 64, 3);
        execute(
            &Op::Activation {
                func: ActFunc::Relu,
                dst: d,
                src: a,
                bias: None,
                scale: 2.0,
            },
            &mut m,
            &mut s,
        )
        .expect("act");
        let mut out = Vec::new();
        m.gather(&d, &mut out);
        assert_eq!(
            out,
            vec![2.0, 0.0, 6.0, 8.0, 0.0, 12.0, 14.0, 16.0, 0.0, 20.0, 22.0, 0.0]
        );
        execute(
            &Op::TensorScalar {
                op: AluOp::Add,
                dst: d,
                src: d,
                scalar: 1.0,
            },
            &mut m,
            &mut s,
        )
        .expect("ts");
        m.gather(&d, &mut out);
        assert_eq!(out[0], 3.0);
        let far = TensorRef::tile(Space::Sbuf, Dtype::F32, 0, 4, 224 * 1024 - 4, 3);
        let e = execute(&Op::Copy { dst: far, src: a }, &mut m, &mut s).expect_err("oob");
        assert_eq!(e.kind, crate::fault::FaultKind::OutOfBounds);
        let small = TensorRef::tile(Space::Sbuf, Dtype::F32, 0, 2, 0, 3);
        let e = execute(&Op::Copy { dst: small, src: a }, &mut m, &mut s).expect_err("shape");
        assert_eq!(e.kind, crate::fault::FaultKind::BadInstruction);
        assert!((activate(ActFunc::Gelu, 1.0) - 0.841_344_7).abs() < 1e-6);
        // An empty pattern far outside the partition is refused, not dereferenced.
        let empty = TensorRef {
            num: [1, 0],
            offset: 0xFFFF_FFF0,
            ..a
        };
        let e = execute(
            &Op::Copy {
                dst: empty,
                src: empty,
            },
            &mut m,
            &mut s,
        )
        .expect_err("offset");
        assert_eq!(e.kind, crate::fault::FaultKind::OutOfBounds);
        let empty_ok = TensorRef { num: [1, 0], ..a };
        execute(
            &Op::Copy {
                dst: empty_ok,
                src: empty_ok,
            },
            &mut m,
            &mut s,
        )
        .expect("empty copy is a no-op");
    }
}
