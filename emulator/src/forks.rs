//! Fork safety: a `fork` never leaves one of the emulator's locks held in the child.
//!
//! A forked child has only the forking thread. Had the device thread (or another ioctl) held
//! a device lock at that instant, the child's first ioctl would wait for it forever. So a
//! `pthread_atfork` prepare handler takes every live device's locks (state, then the shared
//! CRWL and VA tables) before the fork, and both the parent and the child release them after.
//! The locks are tried, never waited for, so no lock order can deadlock; if they cannot all
//! be had within a second the fork goes ahead without them.
// pthread_atfork and guards kept across it; every block has a SAFETY comment.
#![allow(unsafe_code)]

use crate::{DevShared, DevState};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

/// Devices alive in this process.
static LIVE: Mutex<Vec<Weak<DevShared>>> = Mutex::new(Vec::new());

type VaTable = BTreeMap<usize, (u32, usize, usize, u32)>;

/// Locks held across a fork. Fields drop in order: the guards before the `Arc`s that keep
/// their mutexes alive.
#[derive(Default)]
struct Held {
    state: Vec<MutexGuard<'static, DevState>>,
    range: Vec<MutexGuard<'static, Vec<u32>>>,
    va: Vec<MutexGuard<'static, VaTable>>,
    live: Option<MutexGuard<'static, Vec<Weak<DevShared>>>>,
    keep: Vec<Arc<DevShared>>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Make `sh` one of the devices whose locks a fork takes.
pub(crate) fn register(sh: &Arc<DevShared>) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering three plain `extern "C"` functions; they touch only this
        // module's state and never unwind.
        unsafe { libc::pthread_atfork(Some(prepare), Some(release), Some(release)) };
    });
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(sh));
}

fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Extend a guard's lifetime to `'static`.
///
/// # Safety
/// The mutex must outlive the returned guard (here: an `Arc` in the same `Held`, dropped
/// after the guards).
unsafe fn forever<T>(g: MutexGuard<'_, T>) -> MutexGuard<'static, T> {
    // SAFETY: same type, lifetime only; the caller keeps the mutex alive.
    unsafe { std::mem::transmute::<MutexGuard<'_, T>, MutexGuard<'static, T>>(g) }
}

fn try_hold() -> Option<Held> {
    let mut h = Held {
        live: Some(try_lock(&LIVE)?),
        ..Held::default()
    };
    h.keep = h
        .live
        .iter()
        .flat_map(|l| l.iter())
        .filter_map(Weak::upgrade)
        .collect();
    let keep: Vec<&'static DevShared> = h
        .keep
        .iter()
        // SAFETY: each `DevShared` lives in an `Arc` that `h.keep` holds until after the
        // guards taken from it are dropped (field order of `Held`).
        .map(|a| unsafe { &*Arc::as_ptr(a) })
        .collect();
    let mut globals: Vec<*const crate::Global> = Vec::new();
    for sh in keep {
        // SAFETY: see `keep` above.
        h.state.push(unsafe { forever(try_lock(&sh.state)?) });
        let g = Arc::as_ptr(&sh.global);
        if !globals.contains(&g) {
            globals.push(g);
            h.range.push(try_lock(&sh.global.crwl_range)?);
            h.va.push(try_lock(&sh.global.va_maps)?);
        }
    }
    Some(h)
}

extern "C" fn prepare() {
    // Never unwind out of a C callback.
    let _ = std::panic::catch_unwind(|| {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            if let Some(h) = try_hold() {
                HELD.with(|c| *c.borrow_mut() = Some(h));
                return;
            }
            if Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
    });
}

extern "C" fn release() {
    let _ = std::panic::catch_unwind(|| HELD.with(|c| drop(c.borrow_mut().take())));
}
