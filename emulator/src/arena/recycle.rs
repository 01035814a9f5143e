//! Arenas kept for the next device of the process once theirs is gone, their memory zeroed
//! but still allocated: a fault campaign makes a fresh emulator for every experiment, and on
//! a VM the first touch of each arena page (SBUF and PSUM partitions, rings, queues) cost
//! ~2.2 µs of page allocation, with ~0.7 µs more to punch it out again: most of an
//! experiment's system time (`docs/performance.md`, seventeenth session). Zeroing a page
//! still allocated costs ~0.1 µs.
//!
//! Off unless asked for ([`set`]): a kept arena holds its memory until the process ends or
//! the keeping is turned off. An arena is kept only where nothing but the emulator can reach
//! its bytes: not in a forked child, not once its memfd was handed out (a daemon passes it
//! to remote callers), not while any other mapping of it exists in the process (a user
//! mapping that outlived its device). Zero is found with `SEEK_DATA`/`SEEK_HOLE` on the
//! memfd (allocated extents, resident or swapped out; holes read as zeros), never guessed.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Arenas kept at most for each device index (0: off).
static KEEP: AtomicUsize = AtomicUsize::new(0);
/// Arenas handed out again (for tests and reports).
static REUSED: AtomicU64 = AtomicU64::new(0);
static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());

/// A kept arena: its memfd and kernel-view mapping, all zero.
#[derive(Debug)]
struct Idle {
    /// The process that kept it (a forked child inherits the list, not the right to it).
    pid: u32,
    index: usize,
    fd: libc::c_int,
    base: usize,
    size: u64,
}

/// Keep up to `n` arenas of dropped devices of each device index for the next ones (0 turns
/// keeping off and releases those kept).
pub fn set(n: usize) {
    KEEP.store(n, Ordering::SeqCst);
    let mut idle = lock();
    let mut i = 0;
    while i < idle.len() {
        let index = idle[i].index;
        if idle[..i].iter().filter(|a| a.index == index).count() >= n {
            release(idle.swap_remove(i));
        } else {
            i += 1;
        }
    }
}

/// Arenas of device `index` kept now.
fn kept(idle: &[Idle], index: usize) -> usize {
    idle.iter().filter(|a| a.index == index).count()
}

/// Whether arenas made now are kept when their device goes.
pub(super) fn enabled() -> bool {
    KEEP.load(Ordering::Relaxed) > 0
}

/// Arenas handed out again since the process started.
pub fn reused() -> u64 {
    REUSED.load(Ordering::Relaxed)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Idle>> {
    // No step under the lock panics midway: a poisoned list is still consistent.
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A kept arena of device `index` mapped `size` bytes long: its memfd and base.
pub(super) fn take(index: usize, size: u64) -> Option<(libc::c_int, usize)> {
    let pid = neuron_emu_remote::selfpid::get();
    let mut idle = lock();
    let at = idle
        .iter()
        .position(|a| a.pid == pid && a.index == index && a.size == size)?;
    let a = idle.swap_remove(at);
    REUSED.fetch_add(1, Ordering::Relaxed);
    Some((a.fd, a.base))
}

/// Offer the arena of a dropped device; true if it was kept (else the caller unmaps it).
/// The whole file is zeroed here: the regions left at the device's end were not, and bytes
/// a user mapping wrote after its region went (and was then removed) are found too.
pub(super) fn offer(index: usize, fd: libc::c_int, base: usize, size: u64) -> bool {
    let pid = neuron_emu_remote::selfpid::get();
    if kept(&lock(), index) >= KEEP.load(Ordering::SeqCst) || mapped_elsewhere(fd, base, size) {
        return false;
    }
    if !zero_data(fd, base, 0, size) {
        return false;
    }
    let mut idle = lock();
    if kept(&idle, index) >= KEEP.load(Ordering::SeqCst) {
        return false;
    }
    idle.push(Idle {
        pid,
        index,
        fd,
        base,
        size,
    });
    true
}

fn release(a: Idle) {
    if a.pid != neuron_emu_remote::selfpid::get() {
        return; // A forked child's copy of the list: the parent's arena, not ours to unmap.
    }
    // SAFETY: the kept arena's own mapping and fd, which nothing else refers to any more.
    unsafe {
        libc::munmap(a.base as *mut libc::c_void, a.size as usize);
        libc::close(a.fd);
    }
}

/// Zero every allocated byte of `[off, off + len)` of the memfd mapped at `base` (`size` is
/// checked by the caller), leaving the pages allocated. False, with part of it maybe zeroed,
/// where the file cannot say where its data is: the caller punches the range out instead.
pub(super) fn zero_data(fd: libc::c_int, base: usize, off: u64, len: u64) -> bool {
    let Some(end) = off.checked_add(len) else {
        return false;
    };
    let mut at = off;
    // Each turn moves `at` past one extent, and a file has finitely many.
    while at < end {
        // SAFETY: lseek on our own memfd; the offset is in range of the file.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data at or after `at`.
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
        }
        let data = data as u64;
        if data >= end {
            return true;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
        if hole < 0 || (hole as u64) <= data {
            return false;
        }
        let stop = (hole as u64).min(end);
        // SAFETY: `[data, stop)` lies inside `[off, end)`, inside the file, which is mapped
        // read-write at `base` for its whole size; no Rust reference covers arena bytes
        // whose region is gone (this runs as a region is dropped, or once none is left).
        unsafe {
            std::ptr::write_bytes(
                (base as u64 + data) as usize as *mut u8,
                0,
                (stop - data) as usize,
            )
        };
        at = stop;
    }
    true
}

/// Whether any mapping of the memfd other than the kernel view `[base, base + size)`
/// exists in this process, or the question cannot be answered.
fn mapped_elsewhere(fd: libc::c_int, base: usize, size: u64) -> bool {
    // SAFETY: fstat into a zeroed struct on our own fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return true;
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return true;
    };
    let end = base as u64 + size;
    for line in maps.lines() {
        // "start-end perms offset major:minor inode path"
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(_), Some(_), Some(_), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if inode.parse::<u64>().ok() != Some(st.st_ino as u64) {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else {
            return true;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            return true;
        };
        if s < base as u64 || e > end {
            return true;
        }
    }
    false
}
