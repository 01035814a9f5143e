//! This process's id without a system call each time it is asked: the driver checks it on
//! every ioctl and user-memory copy (is this a forked child's copy of the emulator?), and a
//! fault campaign makes hundreds of those an experiment, each `getpid` a trap on a VM.
//! The id is cached and forgotten in a fork's child (`pthread_atfork`), which asks again.
// pthread_atfork and fork in the test; every block has a SAFETY comment.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

/// The cached id, 0 until first asked and again in a fork's child.
static PID: AtomicU32 = AtomicU32::new(0);

extern "C" fn forget() {
    PID.store(0, Ordering::Relaxed);
}

/// This process's id (`getpid`), right in a child made by `fork` as well.
pub fn get() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => {
            static HOOK: Once = Once::new();
            HOOK.call_once(|| {
                // SAFETY: registers a plain `extern "C"` function that only stores to an
                // atomic (async-signal-safe, never unwinds).
                unsafe { libc::pthread_atfork(None, None, Some(forget)) };
            });
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_processs_and_a_forks_child_gets_its_own() {
        assert_eq!(get(), std::process::id());
        assert_eq!(get(), std::process::id(), "cached");
        // SAFETY: the child only calls async-signal-safe functions (getpid, write to a
        // pipe, _exit) and `get` (an atomic load, then getpid where the cache was cleared).
        let mut fds = [0i32; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let ok = get() == unsafe { libc::getpid() } as u32;
            let b = [u8::from(ok)];
            unsafe {
                libc::write(fds[1], b.as_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        let mut b = [0u8; 1];
        let n = unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
        let mut st = 0;
        unsafe {
            libc::waitpid(child, &mut st, 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(n, 1);
        assert_eq!(b[0], 1, "the child saw its parent's id");
        assert_eq!(get(), std::process::id(), "the parent's id after the fork");
    }
}
