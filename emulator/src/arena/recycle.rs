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
//! A kept arena remembers where its file held data ([`Extents`]): those pages stay
//! allocated, so the next zeroing writes them without asking, and asks the file only
//! between them (one `SEEK_DATA` a gap; the `SEEK_HOLE` walk over every page of an extent
//! was most of the zeroing's time, `docs/performance.md`, nineteenth session).
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
    known: Extents,
}

/// Extents of a kept arena's file that held data when it was last zeroed: sorted, disjoint
/// `[start, end)` byte ranges. A kept arena is never punched, so they still hold pages (a
/// range that somehow lost them reads zero and is merely allocated again by the zeroing).
#[derive(Debug, Default)]
pub(super) struct Extents(Vec<(u64, u64)>);

/// Extents remembered at most: beyond, the list is dropped and the next zeroing asks the
/// file everywhere, as with a fresh arena.
const MAX_EXTENTS: usize = 1 << 16;

impl Extents {
    /// The union of `self` and the sorted, disjoint `found`, or none past [`MAX_EXTENTS`].
    fn merged(self, found: Vec<(u64, u64)>) -> Extents {
        let mut all = self.0;
        all.extend(found);
        all.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(all.len());
        for (s, e) in all {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        if out.len() > MAX_EXTENTS {
            out = Vec::new();
        }
        Extents(out)
    }
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

/// A kept arena of device `index` mapped `size` bytes long: its memfd, base and the
/// extents its file holds.
pub(super) fn take(index: usize, size: u64) -> Option<(libc::c_int, usize, Extents)> {
    let pid = neuron_emu_remote::selfpid::get();
    let mut idle = lock();
    let at = idle
        .iter()
        .position(|a| a.pid == pid && a.index == index && a.size == size)?;
    let a = idle.swap_remove(at);
    REUSED.fetch_add(1, Ordering::Relaxed);
    Some((a.fd, a.base, a.known))
}

/// Offer the arena of a dropped device, whose file held data at least in `known`; true if
/// it was kept (else the caller unmaps it). The whole file is zeroed here: the regions left
/// at the device's end were not, and bytes a user mapping wrote after its region went (and
/// was then removed) are found too.
pub(super) fn offer(index: usize, fd: libc::c_int, base: usize, size: u64, known: Extents) -> bool {
    let pid = neuron_emu_remote::selfpid::get();
    if kept(&lock(), index) >= KEEP.load(Ordering::SeqCst) || mapped_elsewhere(fd, base, size) {
        return false;
    }
    let mut found = Vec::new();
    if !zero_range(fd, base, 0, size, &known.0, &mut found) {
        return false;
    }
    let known = known.merged(found);
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
        known,
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
    match off.checked_add(len) {
        Some(end) => zero_range(fd, base, off, end, &[], &mut Vec::new()),
        None => false,
    }
}

/// Zero every allocated byte of `[off, end)` of the memfd mapped at `base`: the `known`
/// extents (sorted, disjoint) without asking the file, the file asked where its data is
/// only between them; the extents found there are pushed on `found` (sorted, disjoint). As
/// [`zero_data`] otherwise.
fn zero_range(
    fd: libc::c_int,
    base: usize,
    off: u64,
    end: u64,
    known: &[(u64, u64)],
    found: &mut Vec<(u64, u64)>,
) -> bool {
    let zero = |from: u64, to: u64| {
        // SAFETY: `[from, to)` lies inside `[off, end)`, inside the file, which is mapped
        // read-write at `base` for its whole size; no Rust reference covers arena bytes
        // whose region is gone (this runs as a region is dropped, or once none is left).
        unsafe {
            std::ptr::write_bytes(
                (base as u64 + from) as usize as *mut u8,
                0,
                (to - from) as usize,
            )
        };
    };
    let mut next = 0; // the first known extent that may end past `at`
    let mut at = off;
    // Each turn moves `at` past a known extent, a gap's end or one extent of the file: all
    // finitely many.
    while at < end {
        while known.get(next).is_some_and(|k| k.1 <= at) {
            next += 1;
        }
        let gap_end = match known.get(next) {
            Some(&(s, e)) if s <= at => {
                let stop = e.min(end);
                zero(at, stop);
                at = stop;
                continue;
            }
            Some(&(s, _)) => s.min(end),
            None => end,
        };
        // SAFETY: lseek on our own memfd; the offset is in range of the file.
        let data = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data at or after `at` (a known extent left holds none either).
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
        }
        let data = data as u64;
        if data >= gap_end {
            at = gap_end;
            continue;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data as libc::off_t, libc::SEEK_HOLE) };
        if hole < 0 || (hole as u64) <= data {
            return false;
        }
        let stop = (hole as u64).min(end);
        zero(data, stop);
        found.push((data, stop));
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
    // Read into room for a few hundred mappings at once: the kernel writes the file a
    // read at a time, and a small first buffer cost a `statx` and three or four reads.
    let mut bytes = Vec::with_capacity(1 << 16);
    let read = std::fs::File::open("/proc/self/maps")
        .and_then(|mut f| std::io::Read::read_to_end(&mut f, &mut bytes));
    let (Ok(_), Ok(maps)) = (read, std::str::from_utf8(&bytes)) else {
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

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;
    const SIZE: u64 = 64 << 20;

    /// A memfd of [`SIZE`] bytes mapped shared: (fd, base).
    fn memfd() -> Option<(libc::c_int, usize)> {
        // SAFETY: plain syscalls on a fresh fd; every result is checked.
        unsafe {
            let fd = libc::memfd_create(c"recycle-test".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 || libc::ftruncate(fd, SIZE as libc::off_t) != 0 {
                return None;
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            (p != libc::MAP_FAILED).then_some((fd, p as usize))
        }
    }

    fn write(base: usize, at: u64, bytes: &[u8]) {
        assert!(at + bytes.len() as u64 <= SIZE);
        // SAFETY: inside the test's own mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (base as u64 + at) as usize as *mut u8,
                bytes.len(),
            )
        };
    }

    /// The whole file read through the fd (holes read as zeros without being allocated).
    fn all_zero(fd: libc::c_int) -> bool {
        let mut buf = vec![1u8; SIZE as usize];
        // SAFETY: pread into a buffer of exactly that size.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        n == SIZE as isize && buf.iter().all(|b| *b == 0)
    }

    /// The zeroing of a kept arena: the file asked everywhere the first time, the extents
    /// found remembered; the next time, known extents are zeroed without asking and only
    /// what lies between them is asked for (a new extent, one growing a known one). A known
    /// extent that lost its pages is merely written (zero) again.
    #[test]
    fn known_extents_are_zeroed_and_new_data_between_them_found() {
        let Some((fd, base)) = memfd() else {
            eprintln!("no memfd here; skipping");
            return;
        };
        let (a, b, c) = (1 << 20, (10 << 20) + 100, 30 << 20);
        write(base, a, &[7; 3 * PAGE as usize]);
        write(base, b, &[8; 50]);
        let mut found = Vec::new();
        assert!(zero_range(fd, base, 0, SIZE, &[], &mut found));
        assert_eq!(found, [(a, a + 3 * PAGE), (10 << 20, (10 << 20) + PAGE)]);
        assert!(all_zero(fd));
        let known = Extents::default().merged(found);

        write(base, a + 5000, &[9; 10]); // inside a known extent
        write(base, a + 3 * PAGE, &[9; 10]); // the page after it: the extent grows
        write(base, c + 1, &[9; 10]); // a new extent
                                      // SAFETY: punching a page of our own memfd: the known extent at `b` loses its page.
        assert_eq!(
            unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    10 << 20,
                    PAGE as libc::off_t,
                )
            },
            0
        );
        let mut found = Vec::new();
        assert!(zero_range(fd, base, 0, SIZE, &known.0, &mut found));
        assert_eq!(found, [(a + 3 * PAGE, a + 4 * PAGE), (c, c + PAGE)]);
        assert!(all_zero(fd));
        let known = known.merged(found);
        assert_eq!(
            known.0,
            [
                (a, a + 4 * PAGE),
                (10 << 20, (10 << 20) + PAGE),
                (c, c + PAGE)
            ]
        );

        // Nothing new: every byte zero again with nothing found.
        write(base, c + 100, &[1; 100]);
        let mut found = Vec::new();
        assert!(zero_range(fd, base, 0, SIZE, &known.0, &mut found));
        assert!(found.is_empty() && all_zero(fd));
        // SAFETY: the test's own mapping and fd.
        unsafe {
            libc::munmap(base as *mut libc::c_void, SIZE as usize);
            libc::close(fd);
        }
    }

    /// Overlapping and touching ranges merge; past [`MAX_EXTENTS`] nothing is remembered.
    #[test]
    fn extents_merge_and_are_bounded() {
        let e = Extents(vec![(0, 10), (20, 30)]).merged(vec![(5, 12), (30, 40), (50, 60)]);
        assert_eq!(e.0, [(0, 12), (20, 40), (50, 60)]);
        let many: Vec<(u64, u64)> = (0..=MAX_EXTENTS as u64)
            .map(|i| (i * 2, i * 2 + 1))
            .collect();
        assert!(Extents::default().merged(many).0.is_empty());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 24,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]
        /// Whatever was written and whatever the known list says (true extents, stale ones,
        /// ranges that never held data), one zeroing leaves every byte zero, and the known
        /// list it leaves covers every page that holds data.
        #[test]
        fn any_writes_and_any_known_list_end_all_zero(
            writes in proptest::collection::vec((0u64..SIZE / PAGE, 1usize..3 * PAGE as usize), 1..12),
            known in proptest::collection::vec((0u64..SIZE / PAGE, 1u64..8), 0..8),
        ) {
            let Some((fd, base)) = memfd() else { return Ok(()) };
            for &(page, len) in &writes {
                let at = page * PAGE;
                let len = len.min((SIZE - at) as usize);
                write(base, at, &vec![0xA5; len]);
            }
            let list: Vec<(u64, u64)> = known
                .iter()
                .map(|&(p, n)| (p * PAGE, ((p + n) * PAGE).min(SIZE)))
                .collect();
            let known = Extents::default().merged(list);
            let mut found = Vec::new();
            proptest::prop_assert!(zero_range(fd, base, 0, SIZE, &known.0, &mut found));
            proptest::prop_assert!(all_zero(fd));
            let after = known.merged(found);
            for &(page, _) in &writes {
                let at = page * PAGE;
                proptest::prop_assert!(after.0.iter().any(|&(s, e)| s <= at && at < e), "page {page} known");
            }
            // SAFETY: the test's own mapping and fd.
            unsafe {
                libc::munmap(base as *mut libc::c_void, SIZE as usize);
                libc::close(fd);
            }
        }
    }
}
