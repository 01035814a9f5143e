//! Semantics of the model-layer words (`docs/isa/cayman.md` §1.3, §9) against plain Rust:
//! each test builds the word from raw bytes, runs it on a core's memories and registers, and
//! compares with the result computed directly.

use super::*;
use crate::core::{CoreMem, Scratch};
use neuron_isa::cayman::Namespace;

fn mem() -> CoreMem {
    CoreMem::new(&crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2))
}

fn word(op: u8, fields: &[(usize, &[u8])]) -> CaymanInstr {
    let mut w = [0u8; 64];
    w[0] = op;
    w[1] = 0x10;
    for (off, b) in fields {
        w[*off..*off + b.len()].copy_from_slice(b);
    }
    CaymanInstr::decode(Namespace::Loaded, &w)
}

fn run(ci: &CaymanInstr, m: &mut CoreMem, regs: &mut [u32; 256]) -> Result<Exec, OpFault> {
    execute(
        ci,
        m,
        &mut PeState::default(),
        &mut Scratch::default(),
        regs,
    )
}

fn put_f32(m: &mut CoreMem, p: usize, off: usize, v: f32) {
    let at = p * m.sbuf_stride + off;
    m.bytes_mut(Space::Sbuf)[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// `v(p, i)` at `off + 4i` of partitions `first..first + ch`, `n` per partition.
fn fill_f32(
    m: &mut CoreMem,
    first: usize,
    ch: usize,
    n: usize,
    off: usize,
    v: impl Fn(usize, usize) -> f32,
) {
    for p in 0..ch {
        for i in 0..n {
            put_f32(m, first + p, off + 4 * i, v(p, i));
        }
    }
}

fn get_f32(m: &CoreMem, p: usize, off: usize) -> f32 {
    let at = p * m.sbuf_stride + off;
    let b = &m.bytes(Space::Sbuf)[at..at + 4];
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// A word's 3-dimensional access pattern field: `addr`, steps `[step, 0, 0]`, counts
/// `[num, 1, 1]`.
fn ap3(addr: usize, step: i16, num: u16) -> Vec<u8> {
    let mut v = (addr as u32).to_le_bytes().to_vec();
    for s in [step, 0, 0] {
        v.extend_from_slice(&s.to_le_bytes());
    }
    for n in [num, 1, 1] {
        v.extend_from_slice(&n.to_le_bytes());
    }
    v
}

/// Arbitrary values in [-2, 2) from a seed (a 64-bit LCG's top bits).
fn values(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 4.0
    }
}

/// kgm-moe's offset computation: TENSOR_LOAD'd id → id·0x100000 (+0x10000·k) → ·2.
#[test]
fn register_words_compute_the_expert_offset() {
    let mut m = mem();
    let mut regs = [0u32; 256];
    for (id, k) in [(0u32, 0u32), (5, 3), (127, 15)] {
        regs[60] = id;
        let mul = |src: u8, dst: u8, imm: u32| {
            word(
                0xa8,
                &[
                    (12, &[6, 9, 1]),
                    (16, &[src]),
                    (20, &[dst]),
                    (24, &imm.to_le_bytes()),
                ],
            )
        };
        let add = word(
            0xa8,
            &[
                (12, &[4, 9, 1]),
                (16, &[61]),
                (20, &[60]),
                (24, &(0x10000 * k).to_le_bytes()),
            ],
        );
        run(&mul(60, 61, 0x10_0000), &mut m, &mut regs).expect("mul");
        run(&add, &mut m, &mut regs).expect("add");
        run(&mul(60, 31, 2), &mut m, &mut regs).expect("mul 2");
        assert_eq!(regs[31], (id * 0x10_0000 + 0x10000 * k) * 2);
    }
    // REGISTER_MOVE: $R[61] = imm.
    let mv = word(
        0xa7,
        &[
            (12, &[1, 9, 1]),
            (24, &[61]),
            (32, &0x0ffe_0000u32.to_le_bytes()),
        ],
    );
    run(&mv, &mut m, &mut regs).expect("move");
    assert_eq!(regs[61], 0x0ffe_0000);
    // A register number past the 256 an engine has is a bad word, not a panic.
    let bad = word(0xa7, &[(24, &[0, 1])]);
    assert!(run(&bad, &mut m, &mut regs).is_err());
}

/// The register-offset DMA resolves to table entry + register, and an offset past the
/// bound register aborts (an out-of-range expert id).
#[test]
fn register_offset_dma_is_bounded() {
    let mut m = mem();
    let mut regs = [0u32; 256];
    let mut src = [0u8; 8];
    src[0] = 31; // $R[31]
    src[4] = 1; // table entry 1
    src[7] = 0x28;
    let dma = word(
        0xb8,
        &[
            (13, &[12, 16]),
            (16, &src),
            (24, &1024u32.to_le_bytes()),
            (32, &[128, 0, 1, 0]),
            (36, &[0, 4, 0xbd]),
            (40, &0x8020_0000_4000u64.to_le_bytes()),
            (48, &0x40000u32.to_le_bytes()),
            (56, &[128, 0, 1, 0, 0, 4, 6, 6]),
        ],
    );
    regs[61] = 0x0ffe_0000; // 256 MiB - 128 KiB
    for id in [0u32, 127] {
        regs[31] = id * 0x20_0000;
        match run(&dma, &mut m, &mut regs).expect("in range") {
            Exec::Dma(d) => {
                assert_eq!(
                    d.src,
                    DmaAddr::Table {
                        offset: id * 0x20_0000,
                        index: 1,
                        pad: 0
                    }
                );
                assert_eq!((d.src_num, d.src_elem), ([128, 1], 1024));
            }
            e => panic!("{e:?}"),
        }
    }
    regs[31] = 128 * 0x20_0000; // expert 128 of 128
    let e = run(&dma, &mut m, &mut regs).expect_err("out of range");
    assert_eq!(e.kind, crate::fault::FaultKind::DmaAbort);
    assert!(e.detail.contains("above its bound"), "{}", e.detail);
}

/// AFFINE_SELECT as the attention kernel uses it builds the identity matrix.
#[test]
fn affine_select_builds_the_identity() {
    let mut m = mem();
    let mut regs = [0u32; 256];
    regs[61] = 1.0f32.to_bits();
    let n = 128usize;
    for p in 0..n {
        for x in 0..n {
            put_f32(&mut m, p, 0x58a8 + 4 * x, 0.0);
        }
    }
    let ap = [0xa8u8, 0x58, 0, 0, 1, 0, 1, 0, 128, 0, 1, 0];
    let sel = word(
        0x92,
        &[
            (12, &[128, 0xaa, 3, 61]),
            (20, &[1, 0, 1, 0, 1, 0, 1, 0, 128, 0, 1, 0, 1, 0, 1, 0]),
            (36, &ap),
            (48, &ap),
            (60, &(-1i32).to_le_bytes()),
        ],
    );
    run(&sel, &mut m, &mut regs).expect("select");
    for p in 0..n {
        for x in 0..n {
            let want = if p == x { 1.0 } else { 0.0 };
            assert_eq!(get_f32(&m, p, 0x58a8 + 4 * x), want, "({p},{x})");
        }
    }
}

/// MEMSET fills with the value at bytes 40.., encoded in the dst dtype: kgm-attn's
/// `memset(rms_ones, 1.0)` (bf16 `803f`) and `memset(running_max, -1e9)` (fp32 `286b6ece`).
#[test]
fn memset_fills_with_its_value_in_the_dst_dtype() {
    let mut m = mem();
    let mut regs = [0u32; 256];
    let (ch, n) = (4usize, 8u16);
    let ap = |addr: u32| {
        let mut b = addr.to_le_bytes().to_vec();
        for v in [1u16, 0, 0, 0, n, 1, 1, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    };
    for (dt, bits, addr, want) in [
        (0x06u8, 0x3f80u32, 0x5d20u32, 1.0f32),
        (0x0a, (-1e9f32).to_bits(), 0x41b8, -1e9),
        (0x0a, 0, 0x4000, 0.0),
    ] {
        let w = word(
            0x49,
            &[
                (32, &[dt, 0, ch as u8]),
                (40, &bits.to_le_bytes()),
                (44, &ap(addr)),
            ],
        );
        for p in 0..ch {
            for x in 0..n as usize {
                put_f32(&mut m, p, addr as usize + 4 * x, 7.0);
            }
        }
        run(&w, &mut m, &mut regs).expect("memset");
        for p in 0..ch {
            for x in 0..n as usize {
                let got = if dt == 0x06 {
                    let at = p * m.sbuf_stride + addr as usize + 2 * x;
                    let b = &m.bytes(Space::Sbuf)[at..at + 2];
                    half::bf16::from_le_bytes([b[0], b[1]]).to_f32()
                } else {
                    get_f32(&m, p, addr as usize + 4 * x)
                };
                assert_eq!(got, want, "dtype {dt:#x} ({p},{x})");
            }
        }
    }
}

/// ACTIVATE with the model layers' functions, a per-partition scale pointer, an immediate
/// bias and a start partition (address = partition · 256 KiB + offset).
#[test]
fn activate_functions_scale_pointers_and_start_partitions() {
    type Def = fn(f64) -> f64;
    let refs: [(u8, Def); 4] = [
        (36, |x| x / (1.0 + (-x).exp())),
        (29, |x| 1.0 / x.sqrt()),
        (10, f64::ln),
        (128, |x| x),
    ];
    let first = 32usize;
    let ch = 4usize;
    let base = (first as u32) << 18;
    // Rows of 1 and 2 elements and of 8 take the whole-operand loop (per-element scales),
    // rows of 20 the row-by-row one.
    for (n, (func, f)) in [1usize, 2, 8, 20]
        .into_iter()
        .flat_map(|n| refs.iter().map(move |r| (n, *r)))
    {
        let mut m = mem();
        let mut regs = [0u32; 256];
        fill_f32(&mut m, first, ch, n, 0x100, |p, i| {
            0.25 + (p * n + i) as f32 * 0.5
        });
        fill_f32(&mut m, first, ch, 1, 0x800, |p, _| 0.5 + p as f32); // scale
        let ap = |off: u32| {
            let mut v = (base + off).to_le_bytes().to_vec();
            v.extend_from_slice(&[1, 0, 1, 0, 1, 0, n as u8, 0, 1, 0, 1, 0]);
            v
        };
        let act = word(
            0x21,
            &[
                (12, &[1, 1, 0, 1]),
                (16, &ap(0x100)),
                (32, &[0xaa, 0x0a, ch as u8, func]),
                (36, &(base + 0x800).to_le_bytes()),
                // bias_src 1 (byte 15): an immediate bias, as in the kgm words.
                (40, &0.125f32.to_bits().to_le_bytes()),
                (48, &ap(0x400)),
            ],
        );
        run(&act, &mut m, &mut regs).expect("activate");
        for p in 0..ch {
            for i in 0..n {
                let x = 0.25 + (p * n + i) as f32 * 0.5;
                let arg = (x * (0.5 + p as f32) + 0.125) as f64;
                let want = f(arg);
                let got = get_f32(&m, first + p, 0x400 + 4 * i) as f64;
                assert!(
                    (got - want).abs() <= 5e-7 * want.abs(),
                    "func {func} n {n} p{p} i{i}: {got} vs {want}"
                );
            }
        }
        // Partition 0 (below the operand) is untouched.
        assert_eq!(get_f32(&m, 0, 0x400), 0.0);
    }
    // A start partition whose channels pass partition 127 is out of bounds.
    let mut m = mem();
    let mut regs = [0u32; 256];
    let mut src = (100u32 << 18).to_le_bytes().to_vec();
    src.extend_from_slice(&[1, 0, 1, 0, 1, 0, 8, 0, 1, 0, 1, 0]);
    let act = word(
        0x21,
        &[(16, &src), (32, &[0xaa, 0x0a, 64, 128]), (48, &src)],
    );
    let e = run(&act, &mut m, &mut regs).expect_err("past partition 127");
    assert_eq!(e.kind, crate::fault::FaultKind::OutOfBounds);
}

/// Large ACTIVATE and TENSOR_REDUCE words are shared out by partitions (`fanout`, through
/// `rows::map_rows` where the operands allow it, else the whole-operand path): the
/// results are the same bits as on one thread, and the reduction's groups are those of
/// plain Rust sums of the same rows.
#[test]
fn shared_out_activate_and_reduce_match_one_thread() {
    let (ch, n, inner) = (128usize, 1024usize, 64usize);
    let ap4 = |addr: u32, steps: [i16; 4], nums: [u16; 4]| {
        let mut v = addr.to_le_bytes().to_vec();
        steps
            .iter()
            .for_each(|s| v.extend_from_slice(&s.to_le_bytes()));
        nums.iter()
            .for_each(|x| v.extend_from_slice(&x.to_le_bytes()));
        v
    };
    let ap2 = |addr: u32, num: u16| {
        let mut v = addr.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0]);
        v.extend_from_slice(&num.to_le_bytes());
        v.extend_from_slice(&[1, 0]);
        v
    };
    // SiLU of every element (src 0x0, dst 0x1000), then a sum over each run of 64 (dst 0x2000).
    let act = word(
        0x21,
        &[
            (12, &[1, 1, 0, 1]),
            (16, &ap2(0, n as u16)),
            (32, &[0xaa, 0x0a, ch as u8, 36]),
            (40, &0.0f32.to_bits().to_le_bytes()),
            (48, &ap2(0x1000, n as u16)),
        ],
    );
    let groups = (n / inner) as u16;
    let reduce = word(
        0x42,
        &[
            (
                12,
                &ap4(
                    0x1000,
                    [1, inner as i16, 1, 1],
                    [inner as u16, groups, 1, 1],
                ),
            ),
            (32, &[0x0a, 0x0a, ch as u8, 0, 4, 2]),
            (44, &ap4(0x2000, [1, 1, 1, 1], [groups, 1, 1, 1])),
        ],
    );
    let outputs = |fan: bool| {
        let mut m = mem();
        let mut regs = [0u32; 256];
        fill_f32(&mut m, 0, ch, n, 0, |p, i| {
            ((p * 7919 + i * 104729) % 2001) as f32 / 250.0 - 4.0
        });
        crate::fanout::with(fan, || {
            // Both words are cut into pieces where the host has a helper (whether a helper
            // is free to take some varies; the bits must not).
            crate::fanout::ignoring_placement(|| {
                if fan && crate::fanout::workers() > 1 {
                    assert!(crate::fanout::rows_per_piece(ch, (ch * n) as u64 * 32) < ch);
                }
            });
            run(&act, &mut m, &mut regs).expect("activate");
            run(&reduce, &mut m, &mut regs).expect("reduce");
        });
        let silu: Vec<u32> = (0..ch * n)
            .map(|j| get_f32(&m, j / n, 0x1000 + 4 * (j % n)).to_bits())
            .collect();
        let sums: Vec<f32> = (0..ch * groups as usize)
            .map(|j| get_f32(&m, j / groups as usize, 0x2000 + 4 * (j % groups as usize)))
            .collect();
        (silu, sums, m)
    };
    let (silu1, sums1, m) = outputs(false);
    let (silu2, sums2, _) = outputs(true);
    assert_eq!(silu1, silu2, "ACTIVATE bits differ when shared out");
    assert_eq!(
        sums1.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        sums2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        "TENSOR_REDUCE bits differ when shared out"
    );
    for (j, got) in sums1.iter().enumerate() {
        let (p, g) = (j / groups as usize, j % groups as usize);
        let want: f64 = (0..inner)
            .map(|i| get_f32(&m, p, 0x1000 + 4 * (g * inner + i)) as f64)
            .sum();
        assert!(
            (*got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
            "p{p} g{g}: {got} vs {want}"
        );
    }
}

/// bf16 weights that a decode step's matrix-vector MATMULs read as bits (an LDWEIGHTS after a
/// narrow MATMUL keeps them unwidened, `PeState::w_from_bits`) give the product of their
/// values, and a wide MATMUL on the same weights widens them first: both against f64 sums
/// of the same values (reference: plain Rust on the bf16 values), to fp32 accuracy.
#[test]
fn bf16_weights_kept_as_bits_multiply_as_their_values() {
    const K: usize = 128; // partitions: rows of the weights and of the moving tensor
    const W: usize = 0x1000; // weights: K partitions x 128 bf16
    const MOV: usize = 0x8000; // moving: K partitions x 16 fp32
    let mut m = mem();
    let mut next = values(0x5eed);
    let mut w = vec![0f32; K * 128];
    for kk in 0..K {
        for j in 0..128 {
            let v = half::bf16::from_f32(next());
            w[kk * 128 + j] = v.to_f32();
            let at = kk * m.sbuf_stride + W + 2 * j;
            m.bytes_mut(Space::Sbuf)[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    let moving: Vec<f32> = (0..K * 16).map(|_| next()).collect();
    fill_f32(&mut m, 0, K, 16, MOV, |p, i| moving[p * 16 + i]);
    // LDWEIGHTS: the reversed pattern of 128 bf16 per partition, as the compiler emits.
    let ldw = word(
        0x01,
        &[
            (16, &ap3(W + 2 * 127, -1, 128)),
            (32, &[0x06, 0, 0]),
            (38, &[K as u8]),
        ],
    );
    let mm = |n: u16, dst: usize| {
        word(
            0x02,
            &[
                (16, &ap3(MOV, 1, n)),
                (32, &[0x0a, 3, 0]),
                (43, &[1]),
                (48, &ap3(0x200_0000 + dst, 1, n)),
            ],
        )
    };
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    let mut exec = |ci: &CaymanInstr, m: &mut CoreMem, pe: &mut PeState| {
        execute(ci, m, pe, &mut scratch, &mut regs).expect("word runs");
    };
    // A first narrow product, then the weights again: kept as bits where the narrow path
    // runs, left where they lie in SBUF (an fp32 moving vector takes the general path,
    // which copies them out then).
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(1, 0), &mut m, &mut pe);
    exec(&ldw, &mut m, &mut pe);
    let narrow = crate::gemm::narrow::available();
    assert_eq!(pe.w_kept, narrow, "bits kept in SBUF");
    assert_eq!(m.kept_weights().is_some(), narrow);
    exec(&mm(2, 0x100), &mut m, &mut pe);
    assert_eq!(pe.w_from_bits, narrow, "bits copied out");
    assert!(!pe.w_kept && m.kept_weights().is_none());
    exec(&mm(16, 0x200), &mut m, &mut pe);
    assert!(!pe.w_from_bits, "a 16-column product widened them");
    let psum = |p: usize, off: usize| {
        let at = p * m.psum_stride + off;
        let b = &m.bytes(Space::Psum)[at..at + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    for (n, dst) in [(1, 0), (2, 0x100), (16, 0x200)] {
        for j in 0..128 {
            for c in 0..n {
                let want: f64 = (0..K)
                    .map(|kk| f64::from(w[kk * 128 + j]) * f64::from(get_f32(&m, kk, MOV + 4 * c)))
                    .sum();
                let got = f64::from(psum(j, dst + 4 * c));
                let bound: f64 = (0..K)
                    .map(|kk| {
                        (f64::from(w[kk * 128 + j]) * f64::from(get_f32(&m, kk, MOV + 4 * c))).abs()
                    })
                    .sum::<f64>()
                    * 1e-6;
                assert!(
                    (got - want).abs() <= bound,
                    "n {n} row {j} col {c}: {got} vs {want}"
                );
            }
        }
    }
}

/// A stationary matrix of one or three columns (an MoE router's weight vector) against 128
/// moving columns of bf16 and of fp32 (`gemm::thin` where the host has FMA), overwriting and
/// then accumulating: against f64 sums of the same values (plain Rust), to fp32 accuracy;
/// PSUM rows past the weights' columns are left alone.
#[test]
fn thin_weights_multiply_rows_of_the_moving_tensor() {
    const K: usize = 128;
    const W: usize = 0x1000;
    const MOV16: usize = 0x4000; // K partitions x 128 bf16
    const MOV32: usize = 0x8000; // K partitions x 128 fp32
    const N: usize = 128;
    let mut next = values(0x7417);
    for cols in [1usize, 3] {
        let mut m = mem();
        let put16 = |m: &mut CoreMem, p: usize, off: usize, v: half::bf16| {
            let at = p * m.sbuf_stride + off;
            m.bytes_mut(Space::Sbuf)[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        };
        let mut w = vec![0f64; K * cols];
        for kk in 0..K {
            for j in 0..cols {
                let v = half::bf16::from_f32(next());
                w[kk * cols + j] = f64::from(v.to_f32());
                put16(&mut m, kk, W + 2 * j, v);
            }
        }
        let mut mov16 = vec![0f64; K * N];
        for kk in 0..K {
            for c in 0..N {
                let v = half::bf16::from_f32(next());
                mov16[kk * N + c] = f64::from(v.to_f32());
                put16(&mut m, kk, MOV16 + 2 * c, v);
            }
        }
        let mov32: Vec<f32> = (0..K * N).map(|_| next()).collect();
        fill_f32(&mut m, 0, K, N, MOV32, |p, i| mov32[p * N + i]);
        // PSUM rows past the weights' columns hold a marker that must survive.
        let psum_at = |m: &CoreMem, p: usize, c: usize| p * m.psum_stride + 4 * c;
        for c in 0..N {
            let at = psum_at(&m, cols, c);
            m.bytes_mut(Space::Psum)[at..at + 4].copy_from_slice(&7.5f32.to_le_bytes());
        }
        let ldw = word(
            0x01,
            &[
                (16, &ap3(W + 2 * (cols - 1), -1, cols as u16)),
                (32, &[0x06, 0, 0]),
                (38, &[K as u8]),
            ],
        );
        let mm = |src: usize, dtype: u8, acc: u8| {
            word(
                0x02,
                &[
                    (16, &ap3(src, 1, N as u16)),
                    (32, &[dtype, 0, 0]),
                    (43, &[acc]),
                    (48, &ap3(0x200_0000, 1, N as u16)),
                ],
            )
        };
        let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
        for ci in [ldw, mm(MOV16, 0x06, 1), mm(MOV32, 0x0a, 0)] {
            execute(&ci, &mut m, &mut pe, &mut scratch, &mut regs).expect("word runs");
        }
        let psum = |p: usize, c: usize| {
            let at = psum_at(&m, p, c);
            let b = &m.bytes(Space::Psum)[at..at + 4];
            f32::from_le_bytes([b[0], b[1], b[2], b[3]])
        };
        for j in 0..cols {
            for c in 0..N {
                let terms = (0..K).flat_map(|kk| {
                    [
                        w[kk * cols + j] * mov16[kk * N + c],
                        w[kk * cols + j] * f64::from(mov32[kk * N + c]),
                    ]
                });
                let want: f64 = terms.clone().sum();
                let bound: f64 = terms.map(f64::abs).sum::<f64>() * 1e-6;
                let got = f64::from(psum(j, c));
                assert!(
                    (got - want).abs() <= bound,
                    "{cols} columns: row {j} col {c}: {got} vs {want}"
                );
            }
        }
        assert!((0..N).all(|c| psum(cols, c) == 7.5), "row {cols} untouched");
    }
}

/// Matrix-vector products whose bf16 moving vector is read from storage as bits
/// (`gemm::narrow_bf16`), with the weights widened and kept as bits (the LDWEIGHTS after a
/// narrow product), overwriting then accumulating: against f64 sums of the same values.
#[test]
fn narrow_products_read_a_bf16_moving_vector_from_storage() {
    const K: usize = 128;
    const W: usize = 0x1000; // K partitions x 128 bf16 weights
    const MOV: usize = 0x4000; // K partitions x 2 bf16
    let mut seeded = values(0xbeef);
    let mut next = move || half::bf16::from_f32(seeded());
    let mut m = mem();
    let mut put = |m: &mut CoreMem, p: usize, off: usize| {
        let v = next();
        let at = p * m.sbuf_stride + off;
        m.bytes_mut(Space::Sbuf)[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
        f64::from(v.to_f32())
    };
    let w: Vec<f64> = (0..K * 128)
        .map(|i| put(&mut m, i / 128, W + 2 * (i % 128)))
        .collect();
    let mv: Vec<f64> = (0..K * 2)
        .map(|i| put(&mut m, i / 2, MOV + 2 * (i % 2)))
        .collect();
    let ldw = word(
        0x01,
        &[
            (16, &ap3(W + 2 * 127, -1, 128)),
            (32, &[0x06, 0, 0]),
            (38, &[K as u8]),
        ],
    );
    let mm = |n: u16, acc: u8| {
        word(
            0x02,
            &[
                (16, &ap3(MOV, 1, n)),
                (32, &[0x06, 0, 0]),
                (43, &[acc]),
                (48, &ap3(0x200_0000, 1, n)),
            ],
        )
    };
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    // Widened weights, then the same weights kept as bits (after a narrow product).
    for ci in [ldw.clone(), mm(2, 1), ldw, mm(1, 0)] {
        execute(&ci, &mut m, &mut pe, &mut scratch, &mut regs).expect("word runs");
    }
    let psum = |p: usize, c: usize| {
        let at = p * m.psum_stride + 4 * c;
        let b = &m.bytes(Space::Psum)[at..at + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    for j in 0..128 {
        for c in 0..2 {
            // Column 0 was written twice (overwrite, then accumulate), column 1 once.
            let times = if c == 0 { 2.0 } else { 1.0 };
            let terms = (0..K).map(|kk| w[kk * 128 + j] * mv[kk * 2 + c]);
            let want: f64 = terms.clone().sum::<f64>() * times;
            let bound: f64 = terms.map(f64::abs).sum::<f64>() * times * 1e-6;
            let got = f64::from(psum(j, c));
            assert!(
                (got - want).abs() <= bound,
                "row {j} col {c}: {got} vs {want}"
            );
        }
    }
}

/// bf16 weights for matrix-vector products are read where LDWEIGHTS found them
/// (`CoreMem::keep_weights`), and are still the values it loaded when their memory is
/// written before the MATMUL (SBUF rewritten under them; weights in PSUM, the product's own
/// destination memory). A MATMUL after a reset that dropped them is refused, not run on
/// whatever lies there. Expected values: f64 sums of the loaded values.
#[test]
fn kept_bf16_weights_are_the_values_ldweights_loaded() {
    if !crate::gemm::narrow::available() {
        eprintln!("SKIPPED: this host has no FMA: no narrow path, weights are always copied");
        return;
    }
    eprintln!("FMA present: weights read where they lie");
    const K: usize = 128;
    const W: usize = 0x1000; // K partitions x 128 bf16 weights (in SBUF, or at PSUM + W)
    const MOV: usize = 0x4000; // K partitions x 1 bf16
    const PSUM: usize = 0x200_0000;
    let mut next = values(0x5eed);
    let mut m = mem();
    // Random bf16 values at `base + 2 * (i % per)` of partition `i / per` of `space`.
    let mut put = |m: &mut CoreMem, space: Space, n: usize, per: usize, base: usize| {
        let stride = match space {
            Space::Sbuf => m.sbuf_stride,
            Space::Psum => m.psum_stride,
        };
        (0..n)
            .map(|i| {
                let v = half::bf16::from_f32(next());
                let at = (i / per) * stride + base + 2 * (i % per);
                m.bytes_mut(space)[at..at + 2].copy_from_slice(&v.to_bits().to_le_bytes());
                f64::from(v.to_f32())
            })
            .collect::<Vec<f64>>()
    };
    let mv = put(&mut m, Space::Sbuf, K, 1, MOV);
    let ldw = |at: usize| {
        word(
            0x01,
            &[
                (16, &ap3(at + 2 * 127, -1, 128)),
                (32, &[0x06, 0, 0]),
                (38, &[K as u8]),
            ],
        )
    };
    let mm = |dst: usize| {
        word(
            0x02,
            &[
                (16, &ap3(MOV, 1, 1)),
                (32, &[0x06, 0, 0]),
                (43, &[1]),
                (48, &ap3(PSUM + dst, 1, 1)),
            ],
        )
    };
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    let mut run = |ci: &CaymanInstr, m: &mut CoreMem, pe: &mut PeState| {
        execute(ci, m, pe, &mut scratch, &mut regs)
    };
    let check = |m: &CoreMem, w: &[f64], dst: usize, what: &str| {
        for j in 0..128 {
            let terms = (0..K).map(|kk| w[kk * 128 + j] * mv[kk]);
            let want: f64 = terms.clone().sum();
            let bound: f64 = terms.map(f64::abs).sum::<f64>() * 1e-6;
            let at = j * m.psum_stride + dst;
            let b = &m.bytes(Space::Psum)[at..at + 4];
            let got = f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            assert!(
                (got - want).abs() <= bound,
                "{what}: row {j}: {got} vs {want}"
            );
        }
    };
    let w = put(&mut m, Space::Sbuf, K * 128, 128, W);
    // A first narrow product (the weights copied), then the weights again: kept.
    for ci in [ldw(W), mm(0), ldw(W)] {
        run(&ci, &mut m, &mut pe).expect("word runs");
    }
    assert!(pe.w_kept, "kept where they lie");
    run(&mm(0x10), &mut m, &mut pe).expect("word runs");
    assert!(
        m.kept_weights().is_some_and(|kp| kp.copy().is_none()),
        "read in place"
    );
    check(&m, &w, 0x10, "in place");
    // New values under the kept weights: the next product still multiplies the loaded ones.
    let w2 = put(&mut m, Space::Sbuf, K * 128, 128, W);
    assert!(m.kept_weights().is_some_and(|kp| kp.copy().is_some()));
    run(&mm(0x20), &mut m, &mut pe).expect("word runs");
    check(&m, &w, 0x20, "copied out");
    // Loaded again: the new values.
    run(&ldw(W), &mut m, &mut pe).expect("word runs");
    run(&mm(0x30), &mut m, &mut pe).expect("word runs");
    check(&m, &w2, 0x30, "reloaded");
    // Weights in PSUM, the destination's memory: copied out as the product writes there.
    let wp = put(&mut m, Space::Psum, K * 128, 128, W);
    run(&ldw(PSUM + W), &mut m, &mut pe).expect("word runs");
    assert!(m.kept_weights().is_some_and(|kp| kp.space == Space::Psum));
    run(&mm(0x40), &mut m, &mut pe).expect("word runs");
    check(&m, &wp, 0x40, "in PSUM");
    // A reset of the memories alone drops the kept weights: the MATMUL is refused.
    run(&ldw(W), &mut m, &mut pe).expect("word runs");
    m.clear();
    let err = run(&mm(0x50), &mut m, &mut pe).expect_err("weights gone");
    assert!(format!("{err:?}").contains("no longer kept"), "{err:?}");
}

/// A bf16 transpose (LDWEIGHTS in transpose mode, MATMUL against the identity) writes
/// `out[j][c] = w[c][j]` as the same 16-bit values, into a bf16 PSUM destination; the weights
/// stay bits throughout (`pe::transpose_bits`). Weights holding a signalling NaN, an
/// accumulating MATMUL and a moving tensor that is not the identity take the general path
/// (the weights widened): the NaN comes back quieted, the sums are the old values plus the
/// transposed ones, and 2·I doubles each value. Expected values from the indices (plain
/// Rust, `half` for the sums).
#[test]
fn bf16_transposes_move_the_bits() {
    let bf16 = Half16 {
        code: 0x06,
        one: 0x3f80,
        snan: 0x7f81,
        widen: |b| half::bf16::from_bits(b).to_f32(),
        narrow: |v| half::bf16::from_f32(v).to_bits(),
    };
    transposes_move_the_bits(&bf16);
}

/// [`bf16_transposes_move_the_bits`] for fp16.
#[test]
fn fp16_transposes_move_the_bits() {
    let fp16 = Half16 {
        code: 0x07,
        one: 0x3c00,
        snan: 0x7c01,
        widen: |b| half::f16::from_bits(b).to_f32(),
        narrow: |v| half::f16::from_f32(v).to_bits(),
    };
    transposes_move_the_bits(&fp16);
}

/// A 16-bit float type for [`transposes_move_the_bits`]: its dtype code, 1.0's bits, a
/// signalling NaN's, and its conversions (`half`'s).
struct Half16 {
    code: u8,
    one: u16,
    snan: u16,
    widen: fn(u16) -> f32,
    narrow: fn(f32) -> u16,
}

fn transposes_move_the_bits(t: &Half16) {
    const K: usize = 128; // partitions of the weights and of the moving tensor
    const M: usize = 96; // columns of the weights: rows of the transpose
    const W: usize = 0x1000;
    const MOV: usize = 0x8000;
    let mut m = mem();
    let mut next = values(0x7a05);
    let mut w = vec![0u16; K * M];
    let put16 = |m: &mut CoreMem, p: usize, off: usize, v: u16| {
        let at = p * m.sbuf_stride + off;
        m.bytes_mut(Space::Sbuf)[at..at + 2].copy_from_slice(&v.to_le_bytes());
    };
    let write_weights = |m: &mut CoreMem, w: &[u16]| {
        for kk in 0..K {
            for j in 0..M {
                put16(m, kk, W + 2 * j, w[kk * M + j]);
            }
        }
    };
    for v in w.iter_mut() {
        *v = (t.narrow)(next());
    }
    // -0.0 and a subnormal among them: bits, not values, are what must come through.
    w[5] = 0x8000;
    w[6] = 0x0001;
    write_weights(&mut m, &w);
    let diag = |m: &mut CoreMem, one: u16| {
        for p in 0..K {
            for c in 0..K {
                // -0.0 off the diagonal counts as zero, as in `is_identity`.
                put16(
                    m,
                    p,
                    MOV + 2 * c,
                    if p == c {
                        one
                    } else if c % 3 == 0 {
                        0x8000
                    } else {
                        0
                    },
                );
            }
        }
    };
    diag(&mut m, t.one);
    let ldw = word(
        0x01,
        &[
            (16, &ap3(W + 2 * (M - 1), -1, M as u16)),
            (32, &[t.code, 0, 1]),
            (38, &[K as u8]),
        ],
    );
    let mm = |acc: u8, dst: usize| {
        word(
            0x02,
            &[
                (16, &ap3(MOV, 1, K as u16)),
                (32, &[t.code, 0, 0]),
                (43, &[acc]),
                (48, &ap3(0x200_0000 + dst, 1, K as u16)),
            ],
        )
    };
    let psum16 = |m: &CoreMem, p: usize, off: usize| {
        let at = p * m.psum_stride + off;
        let b = &m.bytes(Space::Psum)[at..at + 2];
        u16::from_le_bytes([b[0], b[1]])
    };
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    let mut exec = |ci: &CaymanInstr, m: &mut CoreMem, pe: &mut PeState| {
        execute(ci, m, pe, &mut scratch, &mut regs).expect("word runs");
    };
    let w_at = |j: usize, c: usize| w[c * M + j];
    let check = |m: &CoreMem, dst: usize, want: &dyn Fn(u16, usize, usize) -> u16, what: &str| {
        for j in 0..M {
            for c in 0..K {
                let (got, w) = (psum16(m, j, dst + 2 * c), w_at(j, c));
                assert_eq!(got, want(w, j, c), "{what}: out[{j}][{c}] from w {w:#06x}");
            }
        }
    };
    // The bits path: the weights are still bits after the MATMUL.
    exec(&ldw, &mut m, &mut pe);
    assert!(pe.w_from_bits, "transpose weights kept as bits");
    exec(&mm(3, 0), &mut m, &mut pe);
    assert!(pe.w_from_bits, "the transpose moved bits");
    check(&m, 0, &|w, _, _| w, "bits path");
    // Accumulating: the general path adds the transposed values to what PSUM holds (the
    // bits path's output just written: each value doubled, rounded to the type).
    exec(&mm(2, 0), &mut m, &mut pe);
    assert!(!pe.w_from_bits, "the general path widened the weights");
    let twice = |w: u16, _: usize, _: usize| {
        let v = (t.widen)(w);
        (t.narrow)(v + v)
    };
    check(&m, 0, &twice, "accumulated");
    // A moving tensor of 2·I is a product, not a transpose: each value doubled (a sum with
    // +0 products, so -0 comes out +0).
    diag(&mut m, 0x4000);
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(3, 0x200), &mut m, &mut pe);
    let product = |w: u16, j: usize, c: usize| if w == 0x8000 { 0 } else { twice(w, j, c) };
    check(&m, 0x200, &product, "2·I");
    // A signalling NaN among the weights: the general path, which quiets it.
    diag(&mut m, t.one);
    let mut w2 = w.clone();
    w2[7 * M + 3] = t.snan;
    let quiet = t.snan | if t.code == 0x06 { 0x0040 } else { 0x0200 };
    write_weights(&mut m, &w2);
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(3, 0x400), &mut m, &mut pe);
    assert!(!pe.w_from_bits, "NaN weights go the general way");
    check(
        &m,
        0x400,
        &|w, j, c| if (j, c) == (3, 7) { quiet } else { w },
        "NaN",
    );
}

/// An fp32 transpose's words: LDWEIGHTS of `m` columns of `k` partitions at `w` (the
/// compiler's descending pattern, transpose mode) and, for a PSUM destination offset and
/// `acc_flags`, the MATMUL against a `k x k` moving tensor at `mov`.
fn transpose_words(
    k: usize,
    m: usize,
    w: usize,
    mov: usize,
) -> (CaymanInstr, impl Fn(usize, u8) -> CaymanInstr) {
    let ldw = word(
        0x01,
        &[
            (16, &ap3(w + 4 * (m - 1), -1, m as u16)),
            (32, &[0x0a, 0, 1]),
            (38, &[k as u8]),
        ],
    );
    let mm = move |dst: usize, acc: u8| {
        word(
            0x02,
            &[
                (16, &ap3(mov, 1, k as u16)),
                (32, &[0x0a, 0, 0]),
                (43, &[acc]),
                (48, &ap3(0x200_0000 + dst, 1, k as u16)),
            ],
        )
    };
    (ldw, mm)
}

/// The fp32 value at byte `off` of PSUM partition `p`.
fn psum_f32(m: &CoreMem, p: usize, off: usize) -> f32 {
    let at = p * m.psum_stride + off;
    let b = &m.bytes(Space::Psum)[at..at + 4];
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// An fp32 transpose against an identity where it lies: the identity is remembered while
/// nothing writes its space (`PeState::identity_at`), and a write to it (here one diagonal
/// element doubled) makes the next MATMUL a product again: that column comes out doubled.
/// Expected values from the indices (plain Rust).
#[test]
fn fp32_transposes_remember_their_identity_until_it_is_written() {
    const K: usize = 64;
    const M: usize = 40;
    const W: usize = 0x1000;
    const MOV: usize = 0x9000;
    let mut m = mem();
    // Values with few mantissa bits, none zero: doubling and sums with zeros are exact.
    let w = |kk: usize, j: usize| ((kk * 7 + j * 3) % 29) as f32 * 0.25 + 0.5;
    fill_f32(&mut m, 0, K, M, W, w);
    fill_f32(&mut m, 0, K, K, MOV, |p, c| if p == c { 1.0 } else { 0.0 });
    let (ldw, mm3) = transpose_words(K, M, W, MOV);
    let mm = |dst: usize| mm3(dst, 3);
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    let mut exec = |ci: &CaymanInstr, m: &mut CoreMem, pe: &mut PeState| {
        execute(ci, m, pe, &mut scratch, &mut regs).expect("word runs");
    };
    let check = |m: &CoreMem, dst: usize, doubled: Option<usize>| {
        for j in 0..M {
            for c in 0..K {
                let f = if Some(c) == doubled { 2.0 } else { 1.0 };
                assert_eq!(psum_f32(m, j, dst + 4 * c), w(c, j) * f, "out[{j}][{c}]");
            }
        }
    };
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0), &mut m, &mut pe);
    check(&m, 0, None);
    assert!(pe.identity_at.any(), "the identity is remembered");
    // Again, nothing written to SBUF in between: the same transpose.
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0x400), &mut m, &mut pe);
    check(&m, 0x400, None);
    // One diagonal element doubled: a product now.
    put_f32(&mut m, 5, MOV + 4 * 5, 2.0);
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0x800), &mut m, &mut pe);
    check(&m, 0x800, Some(5));
    // Once user space maps SBUF (whose writes are not counted), nothing is remembered.
    put_f32(&mut m, 5, MOV + 4 * 5, 1.0);
    let _ = m.sbuf_ptr();
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0xc00), &mut m, &mut pe);
    check(&m, 0xc00, None);
    assert!(
        !pe.identity_at.any(),
        "nothing remembered under a user mapping"
    );
}

/// An fp32 transpose's weights are read where LDWEIGHTS found them (`PeState::w_words`),
/// and they are the values LDWEIGHTS saw: a write to them before the MATMUL does not reach
/// its output (the kept rows are copied out first); the next LDWEIGHTS loads the new ones;
/// an accumulating MATMUL adds the transpose. Expected values from the indices (plain Rust).
#[test]
fn fp32_transpose_weights_are_latched_where_they_lie() {
    const K: usize = 48;
    const M: usize = 24;
    const W: usize = 0x1000;
    const MOV: usize = 0x9000;
    let mut m = mem();
    let w = |kk: usize, j: usize| ((kk * 5 + j * 11) % 31) as f32 * 0.5 - 3.0;
    fill_f32(&mut m, 0, K, M, W, w);
    fill_f32(&mut m, 0, K, K, MOV, |p, c| if p == c { 1.0 } else { 0.0 });
    let (ldw, mm) = transpose_words(K, M, W, MOV);
    let (mut pe, mut scratch, mut regs) = (PeState::default(), Scratch::default(), [0u32; 256]);
    let mut exec = |ci: &CaymanInstr, m: &mut CoreMem, pe: &mut PeState| {
        execute(ci, m, pe, &mut scratch, &mut regs).expect("word runs");
    };
    let check = |m: &CoreMem, dst: usize, f: &dyn Fn(usize, usize) -> f32| {
        for j in 0..M {
            for c in 0..K {
                assert_eq!(psum_f32(m, j, dst + 4 * c), f(c, j), "out[{j}][{c}]");
            }
        }
    };
    exec(&ldw, &mut m, &mut pe);
    assert!(
        pe.w_words && m.kept_words().is_some(),
        "kept where they lie"
    );
    // Weight (kk 7, column 3) rewritten after LDWEIGHTS: the MATMUL still moves the old one.
    put_f32(&mut m, 7, W + 4 * 3, 100.0);
    assert!(m.kept_words().is_some_and(|kp| kp.copy().is_some()));
    exec(&mm(0, 3), &mut m, &mut pe);
    check(&m, 0, &w);
    let new = |kk: usize, j: usize| if (kk, j) == (7, 3) { 100.0 } else { w(kk, j) };
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0x400, 3), &mut m, &mut pe);
    check(&m, 0x400, &new);
    // Accumulating onto the first transpose: old + new.
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0, 2), &mut m, &mut pe);
    check(&m, 0, &|kk, j| w(kk, j) + new(kk, j));
    assert!(pe.identity_at.any(), "moved, not multiplied");
    // A word's write to the weights' columns (a MEMSET of column 5, every row) between
    // LDWEIGHTS and MATMUL: copied out first, so the MATMUL still moves what was loaded;
    // one to other columns leaves them where they lie.
    let memset = |col: usize| {
        let mut dst = ((W + 4 * col) as u32).to_le_bytes().to_vec();
        for v in [1u16, 0, 0, 0, 1, 1, 1, 1] {
            dst.extend_from_slice(&v.to_le_bytes());
        }
        word(
            0x49,
            &[
                (32, &[0x0a, 0, K as u8]),
                (40, &7.0f32.to_bits().to_le_bytes()),
                (44, &dst),
            ],
        )
    };
    exec(&ldw, &mut m, &mut pe);
    exec(&memset(M + 2), &mut m, &mut pe);
    assert!(
        m.kept_words().is_some_and(|kp| kp.copy().is_none()),
        "other columns"
    );
    exec(&memset(5), &mut m, &mut pe);
    assert!(
        m.kept_words().is_some_and(|kp| kp.copy().is_some()),
        "its columns"
    );
    exec(&mm(0x800, 3), &mut m, &mut pe);
    check(&m, 0x800, &new);
    exec(&ldw, &mut m, &mut pe);
    exec(&mm(0xc00, 3), &mut m, &mut pe);
    check(&m, 0xc00, &|kk, j| if j == 5 { 7.0 } else { new(kk, j) });
}

/// Measurement, not a check: host ns per word of a decode step's small words (128 partitions,
/// two fp32 elements each): TENSOR_TENSOR (two inputs, one output) and ACTIVATE (exp, a scale
/// per partition), best of five rounds. `cargo test --release -p neuron-devmodel --lib
/// small_words_host_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn small_words_host_cost() {
    let (ch, n) = (128usize, 2usize);
    let mut m = mem();
    let mut regs = [0u32; 256];
    fill_f32(&mut m, 0, ch, n, 0x100, |p, i| {
        0.25 + (p * n + i) as f32 * 0.5
    });
    fill_f32(&mut m, 0, ch, n, 0x200, |p, i| {
        0.5 + (p * n + i) as f32 * 0.5
    });
    fill_f32(&mut m, 0, ch, 1, 0x800, |p, _| 0.5 + p as f32);
    let ap = |off: u32| {
        let mut v = off.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0, 1, 0, n as u8, 0, 1, 0, 1, 0]);
        v
    };
    // TENSOR_TENSOR: fp32 pair, fp32 out, ADD; ACTIVATE: exp, scale from SBUF, bias 0.125.
    let tt = word(
        0x41,
        &[
            (12, &[0xaa, 0x0a, 4, ch as u8]),
            (16, &ap(0x100)),
            (32, &ap(0x200)),
            (48, &ap(0x400)),
        ],
    );
    let act = word(
        0x21,
        &[
            (12, &[1, 1, 0, 1]),
            (16, &ap(0x100)),
            (32, &[0xaa, 0x0a, ch as u8, 7]),
            (36, &0x800u32.to_le_bytes()),
            (40, &0.125f32.to_bits().to_le_bytes()),
            (48, &ap(0x400)),
        ],
    );
    // TENSOR_REDUCE max over groups of one (the attention kernels' [1, 4] pattern: four
    // groups of one element a partition); TENSOR_SCALAR mul by a per-partition scalar.
    let ap4 = |off: u32, nums: [u16; 4]| {
        let mut v = off.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0, 1, 0, 1, 0]);
        nums.iter()
            .for_each(|x| v.extend_from_slice(&x.to_le_bytes()));
        v
    };
    let reduce = word(
        0x42,
        &[
            (12, &ap4(0x100, [1, n as u16, 1, 1])),
            (32, &[0x0a, 0x0a, ch as u8, 0, 8, 2]),
            (44, &ap4(0x400, [n as u16, 1, 1, 1])),
        ],
    );
    let scalar = word(
        0x43,
        &[
            (16, &ap(0x100)),
            (32, &[0x0a, 0x0a, ch as u8, 1, 6, 0]),
            (40, &0x800u32.to_le_bytes()),
            (48, &ap(0x400)),
        ],
    );
    let (mut pe, mut sc) = (PeState::default(), Scratch::default());
    for (name, w) in [
        ("TENSOR_TENSOR", &tt),
        ("ACTIVATE", &act),
        ("TENSOR_REDUCE (groups of 1)", &reduce),
        ("TENSOR_SCALAR", &scalar),
    ] {
        let best = (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..20_000 {
                    execute(w, &mut m, &mut pe, &mut sc, &mut regs).expect("word");
                }
                t.elapsed().as_nanos() as f64 / 20_000.0
            })
            .fold(f64::INFINITY, f64::min);
        eprintln!("{name} of {ch} partitions x {n} fp32: {best:.0} ns a word");
    }
}

/// Measurement, not a check: host ns per word of an attention kernel's elementwise words on
/// 128 partitions x 512 fp32 (the shapes of `akc-*`'s softmax: PSUM scores to SBUF), best of
/// five rounds, each against the same run's plain loop that reads the source row and writes
/// the destination row at the same storage layout (`dst = src * s`, one pass: the memory
/// floor of a one-source word). `cargo test --release -p neuron-devmodel --lib
/// elementwise_words_host_cost -- --ignored --nocapture`
#[test]
#[ignore]
fn elementwise_words_host_cost() {
    let (ch, n) = (128usize, 512usize);
    let mut m = mem();
    let mut regs = [0u32; 256];
    let (ps, sb) = (m.psum_stride, m.sbuf_stride);
    // PSUM source at 0 (addressed 0x2000000), SBUF operands at 0x1000 / 0x2000 / 0x4000.
    {
        let psum = m.bytes_mut(Space::Psum);
        for p in 0..ch {
            for i in 0..n {
                let v = 0.25 + ((p * n + i) % 61) as f32 * 0.05;
                psum[p * ps + 4 * i..p * ps + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    fill_f32(&mut m, 0, ch, n, 0x2000, |p, i| {
        0.5 + ((p * n + i) % 53) as f32 * 0.05
    });
    fill_f32(&mut m, 0, ch, 1, 0x800, |p, _| 0.5 + p as f32);
    const PSUM: u32 = 0x200_0000;
    let ap3 = |off: u32| {
        let mut v = off.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0, 1, 0]);
        v.extend_from_slice(&(n as u16).to_le_bytes());
        v.extend_from_slice(&[1, 0, 1, 0]);
        v
    };
    let ap4 = |off: u32, count: usize| {
        let mut v = off.to_le_bytes().to_vec();
        v.extend_from_slice(&[1, 0, 1, 0, 1, 0, 1, 0]);
        v.extend_from_slice(&(count as u16).to_le_bytes());
        v.extend_from_slice(&[1, 0, 1, 0, 1, 0]);
        v
    };
    let c = ch as u8;
    let words = [
        (
            "ACTIVATE exp",
            word(
                0x21,
                &[
                    (12, &[0xaa, 0x0a, 0, 7]),
                    (16, &ap3(PSUM)),
                    (32, &[0xaa, 0x0a, c, 7]),
                    (36, &1.0f32.to_bits().to_le_bytes()),
                    (40, &0x800u32.to_le_bytes()),
                    (48, &ap3(0x4000)),
                ],
            ),
        ),
        (
            "COPY",
            word(
                0x46,
                &[
                    (12, &ap4(PSUM, n)),
                    (32, &[0x0a, 0x0a, c]),
                    (44, &ap4(0x4000, n)),
                ],
            ),
        ),
        (
            "CAST to bf16",
            word(
                0x47,
                &[
                    (12, &ap4(PSUM, n)),
                    (32, &[0x0a, 0x06, c]),
                    (44, &ap4(0x4000, n)),
                ],
            ),
        ),
        (
            "TENSOR_SCALAR mul",
            word(
                0x43,
                &[
                    (16, &ap3(PSUM)),
                    (32, &[0x0a, 0x0a, c, 1, 6, 0]),
                    (40, &0x800u32.to_le_bytes()),
                    (48, &ap3(0x4000)),
                ],
            ),
        ),
        (
            "TENSOR_REDUCE max",
            word(
                0x42,
                &[
                    (12, &ap4(PSUM, n)),
                    (32, &[0x0a, 0x0a, c, 0, 8, 2]),
                    (44, &ap4(0x4000, 1)),
                ],
            ),
        ),
        (
            "TENSOR_REDUCE add",
            word(
                0x42,
                &[
                    (12, &ap4(PSUM, n)),
                    (32, &[0x0a, 0x0a, c, 0, 4, 2]),
                    (44, &ap4(0x4000, 1)),
                ],
            ),
        ),
        (
            "TENSOR_TENSOR add",
            word(
                0x41,
                &[
                    (12, &[0xaa, 0x0a, 4, c]),
                    (16, &ap3(PSUM)),
                    (32, &ap3(0x2000)),
                    (48, &ap3(0x4000)),
                ],
            ),
        ),
    ];
    let (mut pe, mut sc) = (PeState::default(), Scratch::default());
    let best_of = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..200 {
                    f();
                }
                t.elapsed().as_nanos() as f64 / 200.0
            })
            .fold(f64::INFINITY, f64::min)
    };
    // The floor: the same rows, read from PSUM storage and written to SBUF storage.
    let floor = {
        let mut psum = m.f32s(Space::Psum).to_vec();
        let mut sbuf = m.f32s(Space::Sbuf).to_vec();
        let (ps, sb) = (ps / 4, sb / 4);
        best_of(&mut || {
            for p in 0..ch {
                let src = &psum[p * ps..p * ps + n];
                let dst = &mut sbuf[p * sb + 0x1000..p * sb + 0x1000 + n];
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = *s * 1.5;
                }
            }
            std::hint::black_box(&mut sbuf);
            std::hint::black_box(&mut psum);
        })
    };
    eprintln!("plain loop, {ch} rows of {n} fp32 PSUM -> SBUF: {floor:.0} ns");
    for (name, w) in &words {
        let t = best_of(&mut || {
            execute(w, &mut m, &mut pe, &mut sc, &mut regs).expect("word");
        });
        eprintln!(
            "{name:<18} {t:>8.0} ns a word, {:.2}x the plain loop",
            t / floor
        );
    }
    let _ = sb;
}

/// CAST (fp32 to bf16, rounded to nearest even) and RECIPROCAL against plain Rust, for rows
/// short enough for the whole-operand loop (1, 2, 5 elements) and long enough for the
/// row-by-row one (20), from a start partition above 0; partitions outside are untouched.
#[test]
fn cast_and_reciprocal_rows_short_and_long() {
    // A 4-D pattern field: `addr`, steps [1, 0, 0, 0], counts [n, 1, 1, 1].
    let ap4 = |addr: u32, n: usize| {
        let mut v = addr.to_le_bytes().to_vec();
        for s in [1i16, 0, 0, 0] {
            v.extend_from_slice(&s.to_le_bytes());
        }
        for c in [n as u16, 1, 1, 1] {
            v.extend_from_slice(&c.to_le_bytes());
        }
        v
    };
    let (first, ch) = (3usize, 90usize);
    let base = (first as u32) << 18;
    for n in [1usize, 2, 5, 20] {
        let mut next = values(n as u64 + 17);
        let xs: Vec<f32> = (0..ch * n).map(|_| next()).collect();
        for (op, out_dt) in [(0x47u8, 0x06u8), (0x48, 0x0a)] {
            let mut m = mem();
            let mut regs = [0u32; 256];
            fill_f32(&mut m, first, ch, n, 0x100, |p, i| xs[p * n + i]);
            let w = word(
                op,
                &[
                    (12, &ap4(base + 0x100, n)),
                    (32, &[0x0a, out_dt, ch as u8]),
                    (44, &ap4(base + 0x400, n)),
                ],
            );
            run(&w, &mut m, &mut regs).expect("word");
            let sb = m.bytes(Space::Sbuf);
            for p in 0..ch {
                for i in 0..n {
                    let x = xs[p * n + i];
                    let at = (first + p) * m.sbuf_stride + 0x400;
                    if op == 0x47 {
                        let b = &sb[at + 2 * i..at + 2 * i + 2];
                        let want = half::bf16::from_f32(x).to_bits();
                        assert_eq!(
                            u16::from_le_bytes([b[0], b[1]]),
                            want,
                            "CAST n {n} p{p} i{i}"
                        );
                    } else {
                        assert_eq!(
                            get_f32(&m, first + p, 0x400 + 4 * i),
                            1.0 / x,
                            "RECIP n {n} p{p} i{i}"
                        );
                    }
                }
            }
            assert_eq!(get_f32(&m, first - 1, 0x400), 0.0, "the partition below");
            assert_eq!(get_f32(&m, first + ch, 0x400), 0.0, "the partition above");
        }
    }
}
