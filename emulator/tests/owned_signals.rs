//! `guarded::own_signals`: a program that owns its signal dispositions copies user memory
//! without querying them before each copy, and bad addresses still fail the copy (EFAULT)
//! instead of crashing; once a foreign signal passes through our handlers, copies go back
//! to checking. Its own test binary: the declaration is process-wide.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]
#![allow(unsafe_code)]

use neuron_emulator::guarded;
use std::sync::atomic::{AtomicUsize, Ordering};

static SEEN: AtomicUsize = AtomicUsize::new(0);

/// The disposition found before ours: counts and returns.
extern "C" fn earlier(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    SEEN.fetch_add(1, Ordering::SeqCst);
}

/// `len` bytes of a fresh shared mapping of a memfd with protection `prot`, the file only
/// `file_len` bytes long (pages past it raise SIGBUS).
fn mapping(len: usize, file_len: usize, prot: libc::c_int) -> usize {
    // SAFETY: a fresh memfd sized and mapped; results checked.
    unsafe {
        let fd = libc::memfd_create(c"owned-signals".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, file_len as libc::off_t), 0);
        let p = libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0);
        assert_ne!(p, libc::MAP_FAILED);
        libc::close(fd);
        p as usize
    }
}

#[test]
fn owned_copies_fail_on_bad_addresses_and_a_foreign_signal_brings_the_checks_back() {
    // SAFETY: installing a plain SA_SIGINFO handler before anything of ours.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = earlier as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut()), 0);
    }
    guarded::own_signals();
    assert!(guarded::install());
    assert!(guarded::owned());

    let mut buf = [0u8; 64];
    let good = mapping(8192, 8192, libc::PROT_READ | libc::PROT_WRITE);
    let none = mapping(4096, 4096, libc::PROT_NONE);
    let read_only = mapping(4096, 4096, libc::PROT_READ);
    let past_end = mapping(8192, 4096, libc::PROT_READ | libc::PROT_WRITE);
    let dst = buf.as_mut_ptr() as usize;
    assert_eq!(guarded::copy(dst, good + 100, 64), Some(Ok(())));
    assert_eq!(guarded::copy(dst, none, 64), Some(Err(())), "PROT_NONE");
    assert_eq!(
        guarded::copy(read_only, dst, 64),
        Some(Err(())),
        "read-only"
    );
    assert_eq!(
        guarded::copy(dst, past_end + 4096, 64),
        Some(Err(())),
        "SIGBUS"
    );
    assert_eq!(guarded::copy(dst, 8, 64), Some(Err(())), "unmapped");
    assert!(guarded::owned(), "the copies' own faults disturb nothing");
    assert_eq!(SEEN.load(Ordering::SeqCst), 0);

    // A SIGSEGV that is no copy's goes on to the earlier disposition, and copies check again.
    // SAFETY: raising a signal in this thread; the earlier handler returns.
    assert_eq!(unsafe { libc::raise(libc::SIGSEGV) }, 0);
    assert_eq!(SEEN.load(Ordering::SeqCst), 1);
    assert!(!guarded::owned());
    assert_eq!(
        guarded::copy(dst, none, 64),
        Some(Err(())),
        "checked, still guarded"
    );
    assert_eq!(guarded::copy(dst, good, 64), Some(Ok(())));
}
