//! Encoders for the runtime-only words of AWS's loaded prologue and epilogue
//! (`docs/isa/cayman.md` §5, §6), in the loaded namespace. Each function fills the fields of
//! §6's tables; bytes §6 leaves undecoded get the constant value every NTFF word of that form
//! carries (noted at each function), so a word built here equals AWS's byte for byte when its
//! operands do.

use super::{Header, Namespace, Opcode, WORD};

/// A word with the opcode byte and header set, operand bytes zero.
fn word(op: Opcode, h: Header) -> [u8; WORD] {
    let mut w = [0u8; WORD];
    w[0] = op.byte(Namespace::Loaded).unwrap_or(0);
    Header { len: 0x10, ..h }.encode(&mut w);
    w
}

fn put(w: &mut [u8; WORD], off: usize, bytes: &[u8]) {
    w[off..off + bytes.len()].copy_from_slice(bytes);
}

/// `NOTIFY hint=h`: header byte 2 = 9 and byte 39 = 1 in every NOTIFY.
pub fn notify(hint: u8) -> [u8; WORD] {
    let mut w = word(
        Opcode::Notify,
        Header {
            b2: 9,
            ..Header::default()
        },
    );
    w[36] = hint;
    w[39] = 1;
    w
}

/// `SET_ORDERING_MODE strict` (1) / `relaxed` (0).
pub fn set_ordering(strict: bool) -> [u8; WORD] {
    let mut w = word(Opcode::SetOrderingMode, Header::default());
    w[12] = strict as u8;
    w
}

/// `DRAIN`; the epilogue's first DRAIN has byte 40 = 1 (meaning open).
pub fn drain(b40: u8) -> [u8; WORD] {
    let mut w = word(Opcode::Drain, Header::default());
    w[40] = b40;
    w
}

/// `TENSOR_LOAD` of `regs.len()` (1..=4) uint32 values at `addr` (`step` elements apart) into
/// `$R[regs..]`.
pub fn tensor_load(regs: &[u8], addr: u64, step: i32) -> [u8; WORD] {
    let mut w = word(Opcode::TensorLoad, Header::default());
    w[12] = 9; // uint32
    w[14] = regs.len() as u8;
    w[15] = 1;
    put(&mut w, 16, &addr.to_le_bytes());
    put(&mut w, 24, &step.to_le_bytes());
    for (i, r) in regs.iter().take(4).enumerate() {
        w[32 + i] = *r;
    }
    w
}

/// `COMPARE_BRANCH EQ $R[reg]` (taken when the register is 0) by `words` slots; byte 14 = 3.
pub fn branch_eq(reg: u8, words: i32) -> [u8; WORD] {
    let mut w = word(Opcode::CompareBranch, Header::default());
    put(&mut w, 12, &[3, 8, 3, 0]);
    w[32] = reg;
    put(&mut w, 48, &(words * WORD as i32).to_le_bytes());
    w
}

/// `COMPARE_BRANCH ALWAYS` by `words` slots, with header `debugHint`; byte 14 = 3.
pub fn branch_always(words: i32, debug_hint: u8) -> [u8; WORD] {
    let mut w = word(
        Opcode::CompareBranch,
        Header {
            debug_hint,
            ..Header::default()
        },
    );
    w[14] = 3;
    put(&mut w, 48, &(words * WORD as i32).to_le_bytes());
    w
}

/// The second COMPARE_BRANCH form (byte 14 = 1, bytes 34–35 = `01 02`), read as a branch
/// through registers `$R[1]`/`$R[2]` (LOW; never executed in a profile).
pub fn branch_indirect() -> [u8; WORD] {
    let mut w = word(Opcode::CompareBranch, Header::default());
    w[14] = 1;
    put(&mut w, 34, &[1, 2]);
    w
}

/// `WRITE` of one or two 32-bit values.
pub fn write(slots: &[(u64, u32)]) -> [u8; WORD] {
    let mut w = word(Opcode::Write, Header::default());
    for (k, (dst, data)) in slots.iter().take(2).enumerate() {
        w[12 + k] = 4;
        put(&mut w, 16 + 8 * k, &dst.to_le_bytes());
        put(&mut w, 32 + 8 * k, &data.to_le_bytes());
    }
    w
}

/// `EVENT_SEMAPHORE` with only a body: wait `$S[wait.0] (cond wait.1) wait.2` (cond 0 = none)
/// and update `op` (0x13 `++`, 0x15 `+=v`, 0x19 `=v`) of `$S[index]` with operand `v`.
pub fn event_semaphore(wait: (u8, u8, u32), op: u8, index: u8, v: u32) -> [u8; WORD] {
    let mut w = word(Opcode::EventSemaphore, Header::default());
    put(&mut w, 32, &[wait.1, wait.0, op, index]);
    put(&mut w, 36, &wait.2.to_le_bytes());
    put(&mut w, 40, &v.to_le_bytes());
    w
}

/// An `EVENT_SEMAPHORE` whose wait and update are in the header (`h`); body operand `v`.
pub fn event_semaphore_header(h: Header, v: u32) -> [u8; WORD] {
    let mut w = word(Opcode::EventSemaphore, h);
    put(&mut w, 40, &v.to_le_bytes());
    w
}

/// `NOP` with a header wait/update and `cycle=1`.
pub fn nop(h: Header) -> [u8; WORD] {
    let mut w = word(Opcode::Nop, h);
    w[12] = 1;
    w
}

/// `EVENT_SEMAPHORE_RANGE_CLEAR mode=SEMAPHORE_ZERO first..=last`.
pub fn range_clear(first: u8, last: u8) -> [u8; WORD] {
    let mut w = word(Opcode::EventSemaphoreRangeClear, Header::default());
    put(&mut w, 12, &[1, first, last]);
    w
}

/// One of the unnamed runtime opcodes (`0xa1`, `0xab`, `0x95`) with operand bytes from 12.
pub fn unnamed(op: u8, operands: &[u8]) -> [u8; WORD] {
    let mut w = word(Opcode::Unnamed(op), Header::default());
    let n = operands.len().min(WORD - 12);
    put(&mut w, 12, &operands[..n]);
    w
}
