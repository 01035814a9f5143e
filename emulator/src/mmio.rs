//! Trapped stores to mapped register pages: every user store counted, in order.
//!
//! On x86_64 Linux a user mapping of a register page is a read-only view of the live page
//! (reads see the registers as they are). A store to it faults; the SIGSEGV handler installed
//! here finds the fault inside a registered trap (one per 4 KiB of view), decodes the faulting
//! store, posts `(offset, value)` to the page's FIFO ([`RegPage::post_store`], lock-free and
//! async-signal-safe), steps over the instruction and returns. The device applies posted
//! stores at its quiescent points. Anything else (an address not ours, a view mapped without
//! `PROT_WRITE`, an instruction the decoder does not know) goes to the previous handler exactly
//! as if this one did not exist, so real crashes and Rust's stack-overflow report still work.
//! Elsewhere ([`SUPPORTED`] false) views are writable and stores land in the mailbox words.
// A signal handler, ucontext registers and raw instruction bytes; every block has a SAFETY note.
#![allow(unsafe_code)]

use neuron_devmodel::regs::{RegPage, PAGE_BYTES};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};
use std::sync::{Arc, OnceLock};

/// Whether stores can be trapped on this target.
pub const SUPPORTED: bool = cfg!(all(target_arch = "x86_64", target_os = "linux"));

const VIEW: usize = 4096;
const SLOTS: usize = 1024;
const FREE: u8 = 0;
const BUSY: u8 = 1;
const LIVE: u8 = 2;

/// One trapped 4 KiB of a user view.
struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    /// `Arc::into_raw` of the page while the slot is claimed.
    page: AtomicPtr<RegPage>,
    /// Byte offset in the register page of the view's first byte.
    base: AtomicU32,
    writable: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    state: AtomicU8::new(FREE),
    start: AtomicUsize::new(0),
    page: AtomicPtr::new(std::ptr::null_mut()),
    base: AtomicU32::new(0),
    writable: AtomicBool::new(false),
};
static TRAPS: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Handlers currently looking at `TRAPS` (an unregistering thread waits for 0 before it
/// drops the page).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Stores trapped so far (the device workers poll it to notice new stores).
static POSTED: AtomicU64 = AtomicU64::new(0);

/// Stores trapped so far in this process.
pub fn posted() -> u64 {
    POSTED.load(SeqCst)
}

/// Whether stores can be trapped here: the target supports it, [`TRAPS_ENV`] does not turn
/// traps off, and the handler is installed (installing it on first use). Where not, register
/// views are mapped writable and stores land in the page's mailbox words.
pub fn available() -> bool {
    SUPPORTED && !traps_off() && install()
}

/// `NEURON_EMU_STORE_TRAPS=0` (or `off`): map register views writable with no SIGSEGV trap, as
/// for a daemon's callers, e.g. under valgrind, which does not return from a handler that
/// steps over the faulting store. Read once per process.
pub const TRAPS_ENV: &str = "NEURON_EMU_STORE_TRAPS";

fn traps_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| {
        std::env::var(TRAPS_ENV).is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no"))
    })
}

/// A registered trap; unregistered on drop.
#[derive(Debug)]
pub struct Trap(usize);

/// Trap stores to the 4 KiB of user view at `va` (page aligned), which shows `page` from byte
/// `base`. `writable`: the user asked for `PROT_WRITE` (else stores crash as on a read-only
/// mapping). `None` when every slot is taken.
pub fn register(va: usize, page: &Arc<RegPage>, base: u32, writable: bool) -> Option<Trap> {
    if !available() {
        return None;
    }
    let i = TRAPS
        .iter()
        .position(|s| s.state.compare_exchange(FREE, BUSY, SeqCst, SeqCst).is_ok())?;
    let s = &TRAPS[i];
    s.start.store(va, SeqCst);
    s.page
        .store(Arc::into_raw(page.clone()) as *mut RegPage, SeqCst);
    s.base.store(base, SeqCst);
    s.writable.store(writable, SeqCst);
    s.state.store(LIVE, SeqCst);
    Some(Trap(i))
}

impl Trap {
    /// The view address this trap covers.
    pub fn start(&self) -> usize {
        TRAPS[self.0].start.load(SeqCst)
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        let s = &TRAPS[self.0];
        s.state.store(BUSY, SeqCst);
        // A handler that saw LIVE before the store above may still use the page: wait for it.
        // (SeqCst: a handler entering later sees BUSY.) Handlers are a few hundred ns.
        while ACTIVE.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        let p = s.page.swap(std::ptr::null_mut(), SeqCst);
        if !p.is_null() {
            // SAFETY: `p` came from `Arc::into_raw` in `register` and is released once.
            drop(unsafe { Arc::from_raw(p as *const RegPage) });
        }
        s.state.store(FREE, SeqCst);
    }
}

/// `mprotect` of `[va, va+len)` to `prot` for traps in that range: record whether stores are
/// allowed. Returns whether any trap was affected (then the caller must keep the view
/// read-only: pass `prot & !PROT_WRITE` on to the kernel).
pub fn set_writable(va: usize, len: usize, prot: i32) -> bool {
    let end = va.saturating_add(len);
    let mut hit = false;
    for s in TRAPS.iter() {
        let st = s.start.load(SeqCst);
        if s.state.load(SeqCst) == LIVE && st >= va && st < end {
            s.writable.store(prot & libc::PROT_WRITE != 0, SeqCst);
            hit = true;
        }
    }
    hit
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::*;
    use std::sync::OnceLock;

    static PREV: OnceLock<libc::sigaction> = OnceLock::new();
    /// The process whose views the traps describe (a forked child has none of them: they are
    /// DONTFORK, so its stores there must fault as on Linux).
    static OWNER: AtomicU32 = AtomicU32::new(0);

    /// Install the handler once; whether it is installed.
    pub(super) fn install() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(|| {
            // SAFETY: reading the current SIGSEGV action, then installing ours; both structs
            // are fully initialised (zeroed, then the fields the kernel reads are set).
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) != 0 {
                    return false;
                }
                let _ = PREV.set(old);
                OWNER.store(std::process::id(), SeqCst);
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_segv as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()) == 0
            }
        })
    }

    /// The handler's address (`guarded` checks it is still installed).
    pub(super) fn handler() -> usize {
        on_segv as *const () as usize
    }

    extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // A fault of a guarded user-memory copy ends that copy (EFAULT), nothing else.
        // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
        if unsafe { crate::guarded::resume(ctx) } {
            return;
        }
        ACTIVE.fetch_add(1, SeqCst);
        // SAFETY: the kernel passes a valid siginfo and ucontext for an SA_SIGINFO handler.
        let done = unsafe { try_store(info, ctx) };
        ACTIVE.fetch_sub(1, SeqCst);
        if !done {
            crate::guarded::disturbed();
            // SAFETY: handing the same arguments on to the previous disposition.
            unsafe { chain(sig, info, ctx) };
        }
    }

    /// Behave as the previous disposition would have.
    unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let Some(prev) = PREV.get() else { return };
        let h = prev.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            // SAFETY: restoring the saved action; returning re-executes the faulting
            // instruction, which now gets the default action (a signal sent by kill is
            // re-raised instead).
            unsafe {
                libc::sigaction(libc::SIGSEGV, prev, std::ptr::null_mut());
                if (*info).si_code <= 0 {
                    libc::raise(sig);
                }
            }
        } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: `h` is the previous SA_SIGINFO handler with this signature.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        } else {
            // SAFETY: `h` is the previous plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }

    /// Decode and apply a store to a trapped view; false if this fault is not one.
    unsafe fn try_store(info: *mut libc::siginfo_t, ctx: *mut libc::c_void) -> bool {
        // SAFETY: valid siginfo for SIGSEGV (si_addr is the faulting address).
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        if code <= 0 {
            return false; // sent by kill/raise, not a fault
        }
        // SAFETY: getpid is async-signal-safe.
        if unsafe { libc::getpid() } as u32 != OWNER.load(SeqCst) {
            return false;
        }
        let Some(s) = TRAPS.iter().find(|s| {
            s.state.load(SeqCst) == LIVE && {
                let st = s.start.load(SeqCst);
                addr >= st && addr - st < VIEW
            }
        }) else {
            return false;
        };
        if !s.writable.load(SeqCst) {
            return false;
        }
        let page = s.page.load(SeqCst);
        if page.is_null() {
            return false;
        }
        // SAFETY: the slot holds a reference to the page until it is unregistered, which
        // waits for ACTIVE (incremented by our caller) to drop to 0.
        let page = unsafe { &*page };
        let off = s.base.load(SeqCst) as usize + (addr - s.start.load(SeqCst));
        // SAFETY: an SA_SIGINFO handler's third argument is the interrupted ucontext.
        let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
        let g = &mut uc.uc_mcontext.gregs;
        let rip = g[libc::REG_RIP as usize] as usize;
        // SAFETY: the faulting instruction's bytes are mapped executable (hence readable)
        // memory; `decode` reads no further than the instruction it recognises.
        let Some(ins) = decode(|i| unsafe { std::ptr::read_volatile((rip + i) as *const u8) })
        else {
            return false;
        };
        if !off.is_multiple_of(4) || off + ins.width.max(4) > PAGE_BYTES {
            return false;
        }
        let src = match ins.src {
            Src::Reg(r) => g[GREGS[r]] as u64,
            Src::Imm(v) => v,
        };
        let cur = |o: usize| page.read_reg(o as u64).unwrap_or(0) as u64;
        let old = match ins.width {
            8 => cur(off) | cur(off + 4) << 32,
            _ => cur(off),
        };
        let new = match ins.kind {
            Kind::Mov | Kind::Xchg => src,
            Kind::Add | Kind::Xadd => old.wrapping_add(src),
            Kind::Sub => old.wrapping_sub(src),
            Kind::Inc => old.wrapping_add(1),
            Kind::Dec => old.wrapping_sub(1),
        };
        match ins.width {
            8 => {
                page.post_store(off as u32, new as u32);
                page.post_store(off as u32 + 4, (new >> 32) as u32);
            }
            2 => page.post_store(off as u32, new as u16 as u32),
            _ => page.post_store(off as u32, new as u32),
        }
        if let (Kind::Xadd | Kind::Xchg, Src::Reg(r)) = (ins.kind, ins.src) {
            // The old memory value goes to the register (a 32-bit write zero-extends).
            let v = if ins.width == 8 {
                old
            } else {
                old & 0xffff_ffff
            };
            g[GREGS[r]] = v as i64;
        }
        POSTED.fetch_add(1, SeqCst);
        g[libc::REG_RIP as usize] = (rip + ins.len) as i64;
        true
    }

    /// `gregs` index of x86-64 register number 0..15 (rax, rcx, rdx, rbx, rsp, rbp, rsi,
    /// rdi, r8..r15).
    const GREGS: [usize; 16] = [
        libc::REG_RAX as usize,
        libc::REG_RCX as usize,
        libc::REG_RDX as usize,
        libc::REG_RBX as usize,
        libc::REG_RSP as usize,
        libc::REG_RBP as usize,
        libc::REG_RSI as usize,
        libc::REG_RDI as usize,
        libc::REG_R8 as usize,
        libc::REG_R9 as usize,
        libc::REG_R10 as usize,
        libc::REG_R11 as usize,
        libc::REG_R12 as usize,
        libc::REG_R13 as usize,
        libc::REG_R14 as usize,
        libc::REG_R15 as usize,
    ];
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    pub(super) fn install() -> bool {
        false
    }
    pub(super) fn handler() -> usize {
        0
    }
}

use imp::install;

/// Install the SIGSEGV handler (once); whether it is installed.
pub(crate) fn install_handler() -> bool {
    install()
}

/// The SIGSEGV handler's address.
pub(crate) fn segv_handler() -> usize {
    imp::handler()
}

/// What a store instruction does to its memory operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mov,
    Add,
    Sub,
    Inc,
    Dec,
    Xadd,
    Xchg,
}

/// The source operand: a general register (0..15) or an immediate (sign-extended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    Reg(usize),
    Imm(u64),
}

/// A decoded x86-64 store to memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    /// Bytes of the instruction.
    pub(crate) len: usize,
    pub(crate) kind: Kind,
    pub(crate) src: Src,
    /// Operand bytes: 2, 4 or 8.
    pub(crate) width: usize,
}

/// Decode the store at the instruction bytes `byte(0..)`: `mov r/m, r` (89), `mov r/m, imm`
/// (C7 /0), and the read-modify-write forms `add`/`sub` (01, 29, 81 /0 /5, 83 /0 /5),
/// `inc`/`dec` (FF /0 /1), `xchg` (87) and `xadd` (0F C1), with or without `lock`, with
/// 66 (16-bit `mov` only) and REX (REX.W: 64-bit) prefixes, any ModRM/SIB/displacement
/// including RIP-relative. The address itself comes from the fault, so only the length and
/// the source are needed. `None` for anything else (byte stores, vector stores, fs/gs or
/// 32-bit addressing, register destinations).
pub(crate) fn decode(byte: impl Fn(usize) -> u8) -> Option<Insn> {
    let mut i = 0;
    let mut op16 = false;
    loop {
        match byte(i) {
            0x66 => op16 = true,
            0xF0 | 0x2E | 0x3E | 0x26 | 0x36 => {}
            _ => break,
        }
        i += 1;
        if i > 4 {
            return None;
        }
    }
    let mut rex = 0u8;
    if (0x40..=0x4F).contains(&byte(i)) {
        rex = byte(i);
        i += 1;
    }
    let op = byte(i);
    i += 1;
    let op2 = if op == 0x0F {
        i += 1;
        Some(byte(i - 1))
    } else {
        None
    };
    let modrm = byte(i);
    i += 1;
    let md = modrm >> 6;
    let regf = (modrm >> 3) & 7;
    let reg = regf as usize | if rex & 4 != 0 { 8 } else { 0 };
    let rm = modrm & 7;
    if md == 3 {
        return None;
    }
    let width = if rex & 8 != 0 {
        8
    } else if op16 {
        2
    } else {
        4
    };
    // (kind, source is the reg field, immediate bytes)
    let (kind, reg_src, imm) = match (op, op2, regf) {
        (0x89, None, _) => (Kind::Mov, true, 0),
        (0xC7, None, 0) => (Kind::Mov, false, if width == 2 { 2 } else { 4 }),
        (0x01, None, _) => (Kind::Add, true, 0),
        (0x29, None, _) => (Kind::Sub, true, 0),
        (0x81, None, 0) => (Kind::Add, false, if width == 2 { 2 } else { 4 }),
        (0x81, None, 5) => (Kind::Sub, false, if width == 2 { 2 } else { 4 }),
        (0x83, None, 0) => (Kind::Add, false, 1),
        (0x83, None, 5) => (Kind::Sub, false, 1),
        (0xFF, None, 0) => (Kind::Inc, false, 0),
        (0xFF, None, 1) => (Kind::Dec, false, 0),
        (0x87, None, _) => (Kind::Xchg, true, 0),
        (0x0F, Some(0xC1), _) => (Kind::Xadd, true, 0),
        _ => return None,
    };
    if width == 2 && kind != Kind::Mov {
        return None;
    }
    if rm == 4 {
        let sib = byte(i);
        i += 1;
        if md == 0 && sib & 7 == 5 {
            i += 4;
        }
    }
    i += match (md, rm) {
        (0, 5) => 4,
        (1, _) => 1,
        (2, _) => 4,
        _ => 0,
    };
    let src = if reg_src {
        Src::Reg(reg)
    } else {
        let mut v: u64 = 0;
        for k in 0..imm {
            v |= (byte(i + k) as u64) << (8 * k);
        }
        i += imm;
        if imm == 0 {
            Src::Imm(0) // inc/dec
        } else {
            // Sign-extend the immediate to 64 bits (then cut to the operand width below).
            let sh = 64 - 8 * imm as u32;
            Src::Imm(((v << sh) as i64 >> sh) as u64)
        }
    };
    let src = match (src, width) {
        (Src::Imm(v), 4) => Src::Imm(v & 0xffff_ffff),
        (Src::Imm(v), 2) => Src::Imm(v & 0xffff),
        (s, _) => s,
    };
    Some(Insn {
        len: i,
        kind,
        src,
        width,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(b: &[u8]) -> Option<Insn> {
        decode(|i| b.get(i).copied().unwrap_or(0xCC))
    }

    #[test]
    fn decodes_the_store_forms() {
        // mov [rdi+0x1800], esi: 89 b7 00 18 00 00
        let i = d(&[0x89, 0xb7, 0x00, 0x18, 0, 0]).expect("mov");
        assert_eq!(
            (i.len, i.kind, i.src, i.width),
            (6, Kind::Mov, Src::Reg(6), 4)
        );
        // mov dword [rax], 1: c7 00 01 00 00 00
        let i = d(&[0xc7, 0x00, 1, 0, 0, 0]).expect("mov imm");
        assert_eq!((i.len, i.src), (6, Src::Imm(1)));
        // mov [r8+rcx*4+0x10], r9d: 45 89 4c 88 10
        let i = d(&[0x45, 0x89, 0x4c, 0x88, 0x10]).expect("rex sib");
        assert_eq!((i.len, i.src), (5, Src::Reg(9)));
        // mov [rip+0x1234], eax: 89 05 34 12 00 00
        assert_eq!(d(&[0x89, 0x05, 0x34, 0x12, 0, 0]).map(|i| i.len), Some(6));
        // mov [rsp], rax (REX.W): 48 89 04 24
        let i = d(&[0x48, 0x89, 0x04, 0x24]).expect("64-bit");
        assert_eq!((i.len, i.width), (4, 8));
        // mov word [rax], 7: 66 c7 00 07 00
        let i = d(&[0x66, 0xc7, 0x00, 7, 0]).expect("16-bit");
        assert_eq!((i.len, i.src, i.width), (5, Src::Imm(7), 2));
        // lock add dword [rdi], 1: f0 83 07 01
        let i = d(&[0xf0, 0x83, 0x07, 0x01]).expect("lock add");
        assert_eq!((i.len, i.kind, i.src), (4, Kind::Add, Src::Imm(1)));
        // lock sub dword [rdi], -1 imm8 sign-extended: f0 83 2f ff
        let i = d(&[0xf0, 0x83, 0x2f, 0xff]).expect("lock sub");
        assert_eq!((i.kind, i.src), (Kind::Sub, Src::Imm(0xffff_ffff)));
        // lock xadd [rdi+4], eax: f0 0f c1 47 04
        let i = d(&[0xf0, 0x0f, 0xc1, 0x47, 0x04]).expect("xadd");
        assert_eq!((i.len, i.kind, i.src), (5, Kind::Xadd, Src::Reg(0)));
        // xchg [rdx], ecx: 87 0a
        assert_eq!(d(&[0x87, 0x0a]).map(|i| i.kind), Some(Kind::Xchg));
        // lock inc dword [rax+0x100]: f0 ff 80 00 01 00 00
        assert_eq!(d(&[0xf0, 0xff, 0x80, 0, 1, 0, 0]).map(|i| i.len), Some(7));
        // SIB with no base: mov [rcx*4+0x1800], eax: 89 04 8d 00 18 00 00
        assert_eq!(
            d(&[0x89, 0x04, 0x8d, 0, 0x18, 0, 0]).map(|i| i.len),
            Some(7)
        );
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        assert_eq!(d(&[0x88, 0x07]), None, "byte store");
        assert_eq!(d(&[0x89, 0xc0]), None, "register destination");
        assert_eq!(d(&[0x64, 0x89, 0x07]), None, "fs segment");
        assert_eq!(d(&[0x0f, 0x11, 0x07]), None, "movups");
        assert_eq!(d(&[0xc7, 0x08, 1, 0, 0, 0]), None, "C7 /1");
        assert_eq!(d(&[0x66, 0x01, 0x07]), None, "16-bit add");
        assert_eq!(d(&[0x8b, 0x07]), None, "a load");
    }
}
