//! The lane's ordering guarantees: deferred, handed-over and inline words and DMA writes
//! against a lane driven directly in issue order.

use super::*;
use neuron_isa::{Dtype, Space};
use neuron_kbuild::words::{copy, sb, tensor_tensor};

fn lane() -> Lane {
    let p = crate::arch::ArchProfile::new(neuron_abi::Arch::V3Trn2);
    let mut mem = CoreMem::new(&p);
    for (i, b) in mem
        .bytes_mut(Space::Sbuf)
        .iter_mut()
        .enumerate()
        .take(1 << 20)
    {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
    }
    Lane {
        mem,
        pe: PeState::default(),
        scratch: Scratch::default(),
        fanout: false,
        spare_regs: None,
    }
}

/// Words deferred, sent to the thread, run inline, DMA bytes written while the lane is
/// home or away, results taken out of order and the lane brought home, in a seeded
/// random mix: every result and every byte of SBUF as when each word runs at issue and
/// each write lands at once (reference: the same lane driven directly).
/// A word goes to an idle lane's thread only with twice the helpers' least work: a
/// 128 x 128 x 128 product stays home, one of 256 moving columns goes, and a product against
/// fewer weight columns counts only those; other words count 32 an element.
#[test]
fn only_words_worth_a_thread_go_to_one() {
    use neuron_isa::cayman::Opcode;
    assert!(!worth_a_thread(Opcode::Matmul, 128, 128));
    assert!(worth_a_thread(Opcode::Matmul, 256, 128));
    assert!(!worth_a_thread(Opcode::Matmul, 512, 32));
    assert!(worth_a_thread(Opcode::Matmul, 1024, 32));
    // No weights loaded yet: counted as one column, never as none.
    assert!(!worth_a_thread(Opcode::Matmul, 4096, 0));
    assert!(worth_a_thread(Opcode::Matmul, 1 << 15, 0));
    assert!(!worth_a_thread(Opcode::Activate, 512, 0));
    assert!(worth_a_thread(Opcode::Activate, 1024, 0));
    assert!(!worth_a_thread(Opcode::Ldweights, 128, 0));
    assert!(
        worth_a_thread(Opcode::Copy, u64::MAX, 0),
        "saturates, does not wrap"
    );
    assert_eq!(LANE_MIN_WORK, 2 * crate::fanout::MIN_WORK);
}

#[test]
fn deferred_sent_and_written_words_keep_issue_order() {
    let (sent, deferred, writes_away) = drive_in_a_seeded_mix();
    assert!(
        sent > 100 && deferred > 100 && writes_away > 20,
        "{sent} {deferred} {writes_away}"
    );
}

/// Where no lane thread can be started, words sent to it run on the device thread and
/// the lane never leaves home: the same results, nothing lost.
#[test]
fn without_a_lane_thread_everything_runs_at_home() {
    REFUSE_SPAWN.with(|r| r.set(true));
    let (sent, _, writes_away) = drive_in_a_seeded_mix();
    REFUSE_SPAWN.with(|r| r.set(false));
    assert!(sent > 100 && writes_away == 0, "{sent} {writes_away}");
}

/// A word that reads the engine's registers (AFFINE_SELECT's fill register, as the
/// attention kernel builds its identity) uses them as they were at issue, whether it is
/// deferred, sent to the thread or run inline, though they change before it runs.
#[test]
fn a_word_run_later_reads_the_registers_of_its_issue() {
    let ap = [0xa8u8, 0x58, 0, 0, 1, 0, 1, 0, 128, 0, 1, 0];
    let mut w = [0u8; 64];
    w[0] = 0x92;
    w[1] = 0x10;
    for (off, b) in [
        (12, &[128u8, 0xaa, 3, 61][..]),
        (20, &[1, 0, 1, 0, 1, 0, 1, 0, 128, 0, 1, 0, 1, 0, 1, 0][..]),
        (36, &ap[..]),
        (48, &ap[..]),
        (60, &(-1i32).to_le_bytes()[..]),
    ] {
        w[off..off + b.len()].copy_from_slice(b);
    }
    let ci = Arc::new(CaymanInstr::decode(
        neuron_isa::cayman::Namespace::Loaded,
        &w,
    ));
    assert!(crate::cayman_exec::reads_registers(ci.opcode));
    for how in 0..3 {
        let mut slot = LaneSlot::new(lane());
        let mut regs = [0u32; 256];
        regs[61] = 1.0f32.to_bits();
        let id = match how {
            0 => slot.defer(&ci, &regs, true),
            1 => slot.send(&ci, &regs, true),
            _ => slot.run_inline(&ci, &mut regs.clone(), true),
        };
        // The engine's registers change before the word runs (its copy must not).
        regs[61] = 2.0f32.to_bits();
        std::hint::black_box(&regs);
        assert!(slot.take(id).result.is_ok(), "{how}");
        let mem = &slot.get().mem;
        let at = 5 * mem.sbuf_stride + 0x58a8 + 4 * 5;
        let b = &mem.bytes(Space::Sbuf)[at..at + 4];
        assert_eq!(f32::from_le_bytes([b[0], b[1], b[2], b[3]]), 1.0, "{how}");
    }
}

/// Words deferred, sent to the thread, run inline and DMA runs written in a seeded mix,
/// against a lane driven directly; returns the words sent and deferred and the writes
/// made while the lane was away.
fn drive_in_a_seeded_mix() -> (u32, u32, u32) {
    let mut slot = LaneSlot::new(lane());
    let mut reference = lane();
    let stride = reference.mem.sbuf_stride;
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s % n
    };
    let mut pending: std::collections::VecDeque<(u64, String)> = Default::default();
    let mut regs = [0u32; 256];
    let (mut sent, mut deferred, mut writes_away) = (0, 0, 0);
    for _ in 0..3000 {
        match next(10) {
            0..=5 => {
                let (src, dst) = (4 * next(512) as u32, 4 * next(512) as u32);
                let n = 1 + next(64) as u16;
                let w = if next(2) == 0 {
                    copy(sb(dst), Dtype::F32, sb(src), Dtype::F32, n)
                } else {
                    tensor_tensor(
                        4,
                        sb(dst),
                        Dtype::F32,
                        (sb(src), Dtype::F32),
                        (sb(dst), Dtype::F32),
                        n,
                    )
                };
                let ci = Arc::new(w.0);
                let want = format!("{:?}", reference.run(&ci, &mut regs).result);
                let id = match next(3) {
                    0 => {
                        sent += 1;
                        slot.send(&ci, &regs, true)
                    }
                    1 => {
                        deferred += 1;
                        slot.defer(&ci, &regs, true)
                    }
                    _ => slot.run_inline(&ci, &mut regs.clone(), true),
                };
                pending.push_back((id, want));
            }
            6 | 7 => {
                let runs: Vec<(usize, usize)> = (0..1 + next(4))
                    .map(|_| {
                        (
                            next(128) as usize * stride + next(2048) as usize,
                            1 + next(300) as usize,
                        )
                    })
                    .collect();
                let fill = |i: usize, d: &mut [u8]| {
                    d.iter_mut()
                        .enumerate()
                        .for_each(|(j, b)| *b = (i * 31 + j) as u8)
                };
                if slot.home.is_none() {
                    writes_away += 1;
                }
                assert!(slot.write_runs(Space::Sbuf, &runs, fill));
                let mem = reference.mem.bytes_mut(Space::Sbuf);
                for (i, (at, n)) in runs.iter().enumerate() {
                    fill(i, &mut mem[*at..at + n]);
                }
            }
            8 => {
                if let Some((id, want)) = pending.pop_front() {
                    assert_eq!(format!("{:?}", slot.take(id).result), want);
                }
            }
            _ => {
                slot.get();
            }
        }
    }
    while let Some((id, want)) = pending.pop_back() {
        assert_eq!(format!("{:?}", slot.take(id).result), want);
    }
    assert!(
        slot.get().mem.bytes(Space::Sbuf) == reference.mem.bytes(Space::Sbuf),
        "SBUF differs from the in-order reference"
    );
    // A write outside the memory is refused whether the lane is home or away.
    let past = slot.mem_len(Space::Sbuf);
    assert!(!slot.write_runs(Space::Sbuf, &[(past - 1, 2)], |_, _| ()));
    let ci = Arc::new(copy(sb(0), Dtype::F32, sb(4), Dtype::F32, 1).0);
    let id = slot.send(&ci, &regs, true);
    assert!(!slot.write_runs(Space::Sbuf, &[(past, 1)], |_, _| ()));
    assert!(slot.take(id).result.is_ok());
    (sent, deferred, writes_away)
}
