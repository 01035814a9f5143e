//! User-memory copies that turn a fault into `EFAULT`, as the kernel's `copy_from_user` does
//! with its exception table, without a system call per copy.
//!
//! `process_vm_readv`/`writev` on our own pid (`uaccess`'s portable path) pin every page
//! before copying it: ~0.8 µs for a 64-byte ioctl argument on a VM, and a model's inputs
//! went at a quarter of `memcpy`'s speed (5.7-7.5 against 24-25 GB/s; a fault campaign on a
//! 384 MiB model spent most of its system time there). Here the copy is one `rep movsb`;
//! where it faults (an unmapped or `PROT_NONE` page, a write to a read-only one, a file
//! mapping past its end), the SIGSEGV handler (`mmio`) or this module's SIGBUS handler sees
//! the fault at that instruction, resumes after it with the count of bytes not copied, and
//! the copy fails with `EFAULT`. Any other fault goes on to the handler that was there
//! before.
//!
//! A copy takes this path only while both handlers are still ours and neither signal is
//! blocked in the calling thread (a handler replaced by the program, or a blocked signal,
//! would turn a bad pointer into a crash): two `sigaction` queries and a `pthread_sigmask`
//! query, ~0.4 µs, before each copy. Elsewhere (another target, or any check failing) the
//! portable path runs. A program all of whose code is ours (the `neuron-emu` binary) says so
//! once ([`own_signals`]): its copies then skip those queries until a signal that is not
//! the copy's passes through our handlers (which may hand the signal's disposition back).
// Inline assembly, a signal handler and ucontext registers; every block has a SAFETY note.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether this target has the guarded copy.
pub const SUPPORTED: bool = cfg!(all(target_arch = "x86_64", target_os = "linux"));

/// Copy `len` bytes from `src` to `dst`, either of which may be a bad user address: `Ok` once
/// every byte is copied, `Err(())` where a fault stopped the copy (some bytes may have been
/// copied), `None` where the guarded path is not available now (the caller copies another
/// way).
pub fn copy(dst: usize, src: usize, len: usize) -> Option<Result<(), ()>> {
    imp::copy(dst, src, len)
}

/// Install the SIGBUS handler and make sure the SIGSEGV one (`mmio`) is in place; whether
/// both are.
pub fn install() -> bool {
    imp::install()
}

/// Set by [`own_signals`]: nothing but this crate changes the SIGSEGV or SIGBUS disposition
/// or blocks either signal in a thread.
static OWNED: AtomicBool = AtomicBool::new(false);
/// Cleared when a signal that is not a guarded copy's fault passed through our handlers:
/// they hand it to the disposition found before them, which may replace them.
static UNDISTURBED: AtomicBool = AtomicBool::new(true);

/// Declare that every piece of code in this process is ours: nothing else installs a
/// SIGSEGV or SIGBUS handler or blocks those signals. Copies then check the handlers once,
/// not before every copy (two `sigaction` and a `pthread_sigmask` query each, ~4% of a fault
/// campaign's CPU). Call it from `main` before any thread starts: it unblocks both signals
/// in the calling thread (a parent may have started the program with them blocked), and
/// every thread started later inherits that mask. A library loaded into someone else's
/// program must not call it.
pub fn own_signals() {
    // SAFETY: unblocking two signals in the calling thread's mask, from a fully built set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGSEGV);
        libc::sigaddset(&mut set, libc::SIGBUS);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    OWNED.store(true, Ordering::SeqCst);
}

/// Whether copies skip the per-copy queries now ([`own_signals`], and no foreign signal
/// has passed through our handlers since).
pub fn owned() -> bool {
    OWNED.load(Ordering::Relaxed) && UNDISTURBED.load(Ordering::Relaxed)
}

/// A signal that is not a guarded copy's fault is being handed on by one of our handlers
/// (async-signal-safe: one atomic store).
pub(crate) fn disturbed() {
    UNDISTURBED.store(false, Ordering::SeqCst);
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::sync::OnceLock;

    // (dst: rdi, src: rsi, len: rdx) -> rax = bytes not copied. A fault inside `rep movsb`
    // leaves rcx at the bytes left and rip at the instruction; the handlers move rip to the
    // `_done` label, where the count is returned.
    std::arch::global_asm!(
        ".pushsection .text.neuron_emu_guarded_copy,\"ax\",@progbits",
        ".p2align 4",
        ".hidden neuron_emu_guarded_copy",
        ".globl neuron_emu_guarded_copy",
        ".type neuron_emu_guarded_copy,@function",
        "neuron_emu_guarded_copy:",
        "mov rcx, rdx",
        ".hidden neuron_emu_guarded_copy_insn",
        ".globl neuron_emu_guarded_copy_insn",
        "neuron_emu_guarded_copy_insn:",
        "rep movsb",
        ".hidden neuron_emu_guarded_copy_done",
        ".globl neuron_emu_guarded_copy_done",
        "neuron_emu_guarded_copy_done:",
        "mov rax, rcx",
        "ret",
        ".size neuron_emu_guarded_copy, . - neuron_emu_guarded_copy",
        ".popsection",
    );

    unsafe extern "C" {
        fn neuron_emu_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
        static neuron_emu_guarded_copy_insn: u8;
        static neuron_emu_guarded_copy_done: u8;
    }

    /// The `rep movsb`'s address (only the labels' addresses are taken, never their bytes).
    fn insn() -> usize {
        std::ptr::addr_of!(neuron_emu_guarded_copy_insn) as usize
    }

    /// Where a faulted copy resumes.
    fn done() -> usize {
        std::ptr::addr_of!(neuron_emu_guarded_copy_done) as usize
    }

    /// Called first by a SIGSEGV or SIGBUS handler: where the fault is the guarded copy's,
    /// resume after it (rcx holds the bytes left, which the copy returns) and say so.
    ///
    /// # Safety
    /// `ctx` is the ucontext an SA_SIGINFO handler was given.
    pub(crate) unsafe fn resume(ctx: *mut libc::c_void) -> bool {
        // SAFETY: per the contract, a valid ucontext.
        let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
        let g = &mut uc.uc_mcontext.gregs;
        if g[libc::REG_RIP as usize] as usize != insn() {
            return false;
        }
        g[libc::REG_RIP as usize] = done() as i64;
        true
    }

    static PREV_BUS: OnceLock<libc::sigaction> = OnceLock::new();

    extern "C" fn on_bus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
        if unsafe { resume(ctx) } {
            return;
        }
        super::disturbed();
        let Some(prev) = PREV_BUS.get() else { return };
        let h = prev.sa_sigaction;
        // SAFETY: behaving as the previous disposition: restore it and return, so the
        // faulting instruction runs again under it (a signal sent by kill is re-raised), or
        // call its handler with the same arguments.
        unsafe {
            if h == libc::SIG_DFL || h == libc::SIG_IGN {
                libc::sigaction(libc::SIGBUS, prev, std::ptr::null_mut());
                if (*info).si_code <= 0 {
                    libc::raise(sig);
                }
            } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
                f(sig);
            }
        }
    }

    pub(super) fn install() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        let bus = *INSTALLED.get_or_init(|| {
            // SAFETY: reading the current SIGBUS action, then installing ours; both structs
            // are fully initialised (zeroed, then the fields the kernel reads are set).
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                    return false;
                }
                let _ = PREV_BUS.set(old);
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_bus as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) == 0
            }
        });
        bus && crate::mmio::install_handler()
    }

    /// Whether `sig`'s action is still `handler`.
    fn ours(sig: libc::c_int, handler: usize) -> bool {
        // SAFETY: a query into a zeroed struct.
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut cur) == 0
                && cur.sa_sigaction == handler
                && cur.sa_flags & libc::SA_SIGINFO != 0
        }
    }

    /// Whether a fault in this thread would reach our handlers now.
    fn armed() -> bool {
        if super::owned() {
            return install();
        }
        if !install()
            || !ours(libc::SIGBUS, on_bus as *const () as usize)
            || !ours(libc::SIGSEGV, crate::mmio::segv_handler())
        {
            return false;
        }
        // SAFETY: a query of this thread's signal mask into a zeroed set.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) == 0
                && libc::sigismember(&set, libc::SIGSEGV) == 0
                && libc::sigismember(&set, libc::SIGBUS) == 0
        }
    }

    pub(super) fn copy(dst: usize, src: usize, len: usize) -> Option<Result<(), ()>> {
        if len == 0 {
            return Some(Ok(()));
        }
        if !armed() {
            return None;
        }
        // SAFETY: the routine reads `src` and writes `dst` byte by byte; a fault on either
        // is caught by our handlers (checked just above) and ends the copy early instead of
        // reaching Rust code. Callers pass their own buffer for one side.
        let left = unsafe { neuron_emu_guarded_copy(dst as *mut u8, src as *const u8, len) };
        Some(if left == 0 { Ok(()) } else { Err(()) })
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    pub(crate) unsafe fn resume(_ctx: *mut libc::c_void) -> bool {
        false
    }
    pub(super) fn install() -> bool {
        false
    }
    pub(super) fn copy(_dst: usize, _src: usize, _len: usize) -> Option<Result<(), ()>> {
        None
    }
}

pub(crate) use imp::resume;

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use super::*;

    /// `n` pages of fresh anonymous memory with protection `prot`.
    fn pages(n: usize, prot: libc::c_int) -> usize {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * 4096,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    fn protect(at: usize, n: usize, prot: libc::c_int) {
        // SAFETY: `at` is a page of a mapping made by `pages`.
        assert_eq!(unsafe { libc::mprotect(at as *mut _, n * 4096, prot) }, 0);
    }

    fn unmap(at: usize, n: usize) {
        // SAFETY: as in `protect`; nothing refers to the pages any more.
        assert_eq!(unsafe { libc::munmap(at as *mut _, n * 4096) }, 0);
    }

    #[test]
    fn good_memory_is_copied_and_bad_memory_is_a_failed_copy_not_a_crash() {
        assert!(install(), "handlers installed");
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let a = pages(3, rw);
        // SAFETY: the mapping is ours and writable.
        unsafe { std::ptr::write_bytes(a as *mut u8, 0x5a, 3 * 4096) };
        let mut buf = vec![0u8; 3 * 4096];
        assert_eq!(copy(buf.as_mut_ptr() as usize, a, buf.len()), Some(Ok(())));
        assert!(buf.iter().all(|&b| b == 0x5a));
        let data = [7u8; 100];
        assert_eq!(copy(a + 10, data.as_ptr() as usize, 100), Some(Ok(())));
        // SAFETY: reading our own mapping.
        assert_eq!(unsafe { *((a + 109) as *const u8) }, 7);
        // A read running into a PROT_NONE page stops there: the bytes before it copied.
        protect(a + 4096, 1, libc::PROT_NONE);
        buf.fill(0);
        assert_eq!(
            copy(buf.as_mut_ptr() as usize, a + 4000, 200),
            Some(Err(()))
        );
        assert!(
            buf[..96].iter().all(|&b| b == 0x5a),
            "the readable part came"
        );
        // A write to a read-only page fails; to an unmapped one too; from one as well.
        protect(a + 2 * 4096, 1, libc::PROT_READ);
        assert_eq!(copy(a + 2 * 4096, data.as_ptr() as usize, 8), Some(Err(())));
        unmap(a, 3);
        assert_eq!(copy(a, data.as_ptr() as usize, 8), Some(Err(())));
        assert_eq!(copy(buf.as_mut_ptr() as usize, a + 5, 8), Some(Err(())));
        assert_eq!(copy(0, 0, 0), Some(Ok(())), "an empty copy touches nothing");
    }

    #[test]
    fn a_file_mapping_past_its_end_is_a_failed_copy_and_a_replaced_handler_is_not_relied_on() {
        assert!(install());
        // A 4 KiB memfd mapped 8 KiB long: the second page raises SIGBUS.
        // SAFETY: plain system calls on a fresh memfd and mapping we own.
        let (fd, at) = unsafe {
            let fd = libc::memfd_create(c"guarded-test".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, 4096), 0);
            let at = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(at, libc::MAP_FAILED);
            (fd, at as usize)
        };
        let mut buf = [0u8; 64];
        assert_eq!(copy(buf.as_mut_ptr() as usize, at, 64), Some(Ok(())));
        assert_eq!(
            copy(buf.as_mut_ptr() as usize, at + 4096, 64),
            Some(Err(()))
        );
        // With SIGBUS blocked in this thread, or its handler replaced, the guarded path is
        // not taken (a bad pointer would crash): the caller copies another way.
        // SAFETY: changing this thread's mask and the SIGBUS action, then restoring both;
        // no guarded copy of another test can fault with SIGBUS meanwhile (only this test
        // maps past a file's end).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGBUS);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            assert_eq!(
                copy(buf.as_mut_ptr() as usize, at, 64),
                None,
                "SIGBUS blocked"
            );
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            let mut ours: libc::sigaction = std::mem::zeroed();
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, &mut ours);
            assert_eq!(
                copy(buf.as_mut_ptr() as usize, at, 64),
                None,
                "handler replaced"
            );
            libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut());
            assert_eq!(copy(buf.as_mut_ptr() as usize, at, 64), Some(Ok(())));
            libc::munmap(at as *mut _, 8192);
            libc::close(fd);
        }
    }
}
