//! A per-device shared-memory arena: the host side of every byte user space may map.
//!
//! One `memfd` per device, mapped once read-write (the "kernel" view the device model reads and
//! writes). Host chunks live at their bus address inside it (bus addresses are below 4 GiB,
//! `driver-abi.md` §8); device chunks that get mapped receive a backing range above 4 GiB.
//! Each core's SBUF, PSUM and register page live there too. Because the memory is a file,
//! every user `mmap` is a NEW mapping of the same bytes with the user's protection
//! ([`Arena::map_user`]): user `munmap`/`mprotect` change only the user's view, a chunk of
//! another process is mapped read-only (`driver-abi.md` §2.4), and the view is excluded from
//! fork and core dumps like the driver's DONTCOPY|DONTDUMP. Freed ranges are hole-punched, so
//! the arena stays sparse; a forked child never punches (the memory is shared with its parent).
#![allow(unsafe_code)]

pub mod recycle;

use crate::chunks::RangeAlloc;
use neuron_devmodel::hostmem::HostRegion;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Arena offsets below this are host bus addresses.
const DEV_START: u64 = 1 << 32;
/// Room for device-chunk backings (sparse): address space only, no memory.
const DEV_LEN: u64 = 512 << 30;
/// The least room tried where the address space is limited (`ulimit -v`, valgrind): the
/// arena halves its device part from [`DEV_LEN`] down to this until the mapping succeeds.
const DEV_LEN_MIN: u64 = 1 << 30;

#[derive(Debug)]
struct Inner {
    /// The process that made the arena: only it frees arena memory.
    pid: u32,
    fd: libc::c_int,
    base: usize,
    size: u64,
    dev: Mutex<RangeAlloc>,
    /// The device index (what a kept arena is found by).
    index: usize,
    /// Freed ranges are zeroed, not punched out, and the arena is offered for the next
    /// device when this one goes ([`recycle`]).
    recycle: bool,
    /// The memfd was handed out ([`Arena::fd`]): other processes may map it.
    exported: AtomicBool,
    /// The device is going ([`Arena::closing`]): with `recycle`, its regions are left as
    /// they are, for `recycle::offer` to zero the whole file once (or for the file to go).
    closing: AtomicBool,
    /// Where the file held data when it was last zeroed (a kept arena's; else none known).
    known: recycle::Extents,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.recycle
            && neuron_emu_remote::selfpid::get() == self.pid
            && !self.exported.load(Ordering::SeqCst)
            && recycle::offer(
                self.index,
                self.fd,
                self.base,
                self.size,
                std::mem::take(&mut self.known),
            )
        {
            return;
        }
        // SAFETY: unmapping the mapping made in `Arena::new` and closing its fd, once. User
        // mappings made from it were removed by munmap or outlive it as the kernel's would.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.size as usize);
            libc::close(self.fd);
        }
    }
}

/// Keeps a range of the arena alive for a `HostRegion`; punches it out when dropped.
#[derive(Debug)]
struct Keep {
    inner: Arc<Inner>,
    off: u64,
    len: u64,
    dev: bool,
}

impl Drop for Keep {
    fn drop(&mut self) {
        if neuron_emu_remote::selfpid::get() != self.inner.pid {
            // A forked child's copy of the emulator: the bytes belong to the parent.
            return;
        }
        let kept = self.inner.recycle
            && (self.inner.closing.load(Ordering::Relaxed)
                || recycle::zero_data(self.inner.fd, self.inner.base, self.off, self.len));
        // SAFETY: fallocate on our own memfd; releases the pages of a range nobody uses any more.
        if !kept {
            unsafe {
                libc::fallocate(
                    self.inner.fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    self.off as libc::off_t,
                    self.len as libc::off_t,
                );
            }
        }
        if self.dev {
            self.inner
                .dev
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(self.off, self.len);
        }
    }
}

/// The arena of one device.
#[derive(Debug, Clone)]
pub struct Arena {
    inner: Arc<Inner>,
}

impl Arena {
    /// Create the arena; `None` if the OS refuses (no memfd, no address space), in which case
    /// the emulator falls back to heap memory and cannot make read-only aliases.
    pub fn new(index: usize) -> Option<Arena> {
        Self::sized(index, DEV_LEN)
    }

    /// [`Arena::new`] with at most `dev_len` bytes of room for device chunks, halved until the
    /// address space takes it: a process under `ulimit -v` (or valgrind, whose address space
    /// is smaller than 512 GiB) gets a smaller arena, and a device chunk beyond it is refused
    /// with ENOMEM when it is mapped, not every mapping with ENODEV.
    fn sized(index: usize, dev_len: u64) -> Option<Arena> {
        let recycle = recycle::enabled();
        if recycle {
            // A kept arena of the room asked for (one made smaller under a limited address
            // space is not found again: a fresh one is tried, as before).
            let room = dev_len.max(DEV_LEN_MIN);
            if let Some((fd, base, known)) = recycle::take(index, DEV_START + room) {
                return Some(Arena {
                    inner: Arc::new(Inner {
                        pid: neuron_emu_remote::selfpid::get(),
                        fd,
                        base,
                        size: DEV_START + room,
                        dev: Mutex::new(RangeAlloc::new(DEV_START, room)),
                        index,
                        recycle,
                        exported: AtomicBool::new(false),
                        closing: AtomicBool::new(false),
                        known,
                    }),
                });
            }
        }
        let name = std::ffi::CString::new(format!("neuron{index}-arena")).ok()?;
        // SAFETY: plain syscalls on a fresh fd; every result is checked.
        unsafe {
            let fd = libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let mut dev_len = dev_len.max(DEV_LEN_MIN);
            loop {
                let size = DEV_START + dev_len;
                if libc::ftruncate(fd, size as libc::off_t) == 0 {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        size as usize,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED | libc::MAP_NORESERVE,
                        fd,
                        0,
                    );
                    if p != libc::MAP_FAILED {
                        if dev_len < DEV_LEN {
                            tracing::info!(target: "KDRV",
                                "neuron{index}: address space limited, arena room for device chunks {} MiB",
                                dev_len >> 20);
                        }
                        return Some(Arena {
                            inner: Arc::new(Inner {
                                pid: neuron_emu_remote::selfpid::get(),
                                fd,
                                base: p as usize,
                                size,
                                dev: Mutex::new(RangeAlloc::new(DEV_START, dev_len)),
                                index,
                                recycle,
                                exported: AtomicBool::new(false),
                                closing: AtomicBool::new(false),
                                known: recycle::Extents::default(),
                            }),
                        });
                    }
                }
                if dev_len <= DEV_LEN_MIN {
                    libc::close(fd);
                    return None;
                }
                dev_len /= 2;
            }
        }
    }

    fn region(&self, off: u64, len: u64, dev: bool) -> Option<HostRegion> {
        if neuron_emu_remote::selfpid::get() != self.inner.pid {
            // A forked child's copy must not hand out memory its parent may hand out too.
            return None;
        }
        let end = off.checked_add(len)?;
        if len == 0 || end > self.inner.size || !off.is_multiple_of(4096) {
            return None;
        }
        let ptr = NonNull::new((self.inner.base as u64 + off) as usize as *mut u8)?;
        let keep = Keep {
            inner: self.inner.clone(),
            off,
            len,
            dev,
        };
        // SAFETY: the range lies inside the arena's read-write mapping, which `keep` keeps alive
        // (it holds the Arc); memfd memory is zero-initialised (fresh, hole-punched, or zeroed
        // as its last region went).
        Some(unsafe { HostRegion::from_external(ptr, len as usize, Box::new(keep)) })
    }

    /// Memory for a host chunk at host bus address `bus` (below 4 GiB).
    pub fn host_region(&self, bus: u64, len: u64) -> Option<HostRegion> {
        if bus.checked_add(len)? > DEV_START {
            return None;
        }
        self.region(bus, len, false)
    }

    /// A fresh backing range for a device chunk of `len` bytes.
    pub fn device_region(&self, len: u64) -> Option<HostRegion> {
        let off = self
            .inner
            .dev
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc(len, 4096)?;
        let r = self.region(off, len, true);
        if r.is_none() {
            self.inner
                .dev
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(off, len);
        }
        r
    }

    /// A new shared mapping, with protection `prot`, of the `len` arena bytes the device
    /// sees at `rw` (inside one of this arena's regions; page aligned). Excluded from fork
    /// and core dumps. Remove it with [`Arena::unmap_user`] (or part of it: it is an ordinary
    /// mapping).
    pub fn map_user(&self, rw: *const u8, len: usize, prot: i32) -> Option<*mut u8> {
        let off = (rw as usize).checked_sub(self.inner.base)? as u64;
        if off.checked_add(len as u64)? > self.inner.size || len == 0 || !off.is_multiple_of(4096) {
            return None;
        }
        // SAFETY: a fresh shared mapping of our own memfd at an address the kernel picks; no
        // existing memory moves.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot & (libc::PROT_READ | libc::PROT_WRITE),
                libc::MAP_SHARED,
                self.inner.fd,
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on the mapping just made. A failure leaves an ordinary mapping.
        unsafe {
            libc::madvise(p, len, libc::MADV_DONTFORK);
            libc::madvise(p, len, libc::MADV_DONTDUMP);
        }
        Some(p as *mut u8)
    }

    /// Where the arena byte the device sees at `rw` lies in the memfd (a daemon passes the
    /// memfd and this offset to a remote caller, which maps the same bytes).
    pub fn offset_of(&self, rw: *const u8) -> Option<u64> {
        let off = (rw as usize).checked_sub(self.inner.base)? as u64;
        (off < self.inner.size).then_some(off)
    }

    /// The device is going: its regions are all about to be dropped. A kept arena is then
    /// zeroed once as a whole (`recycle::offer`) instead of region by region.
    pub fn closing(&self) {
        self.inner.closing.store(true, Ordering::Relaxed);
    }

    /// The memfd (owned by the arena; valid while it lives). Handed out, it may be mapped
    /// by others: the arena is not kept for another device.
    pub fn fd(&self) -> i32 {
        self.inner.exported.store(true, Ordering::SeqCst);
        self.inner.fd
    }

    /// Remove (part of) a mapping made by [`Arena::map_user`].
    pub fn unmap_user(&self, p: *mut u8, len: usize) {
        // SAFETY: `p`/`len` lie in a user mapping this arena created (checked by the caller's
        // bookkeeping); unmapping it affects nothing else.
        unsafe { libc::munmap(p.cast(), len) };
    }

    /// A region for device-internal memory user space may map (SBUF, PSUM, register pages):
    /// a [`neuron_devmodel::hostmem::MemSource`].
    pub fn internal_region(&self, len: usize) -> Option<HostRegion> {
        self.device_region(len.checked_next_multiple_of(4096)? as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_see_writes_and_are_read_only() {
        let Some(a) = Arena::new(99) else {
            eprintln!("no memfd here; skipping");
            return;
        };
        let r = a.host_region(0x1000_0000, 8192).expect("host region");
        assert!(r.write(100, &[1, 2, 3]));
        let alias = a
            .map_user(r.as_ptr(), 8192, libc::PROT_READ)
            .expect("alias");
        // SAFETY: reading inside a live read-only mapping of 8 KiB.
        let v = unsafe { std::ptr::read_volatile(alias.add(101)) };
        assert_eq!(v, 2);
        a.unmap_user(alias, 8192);
        let d = a.device_region(1 << 20).expect("device region");
        assert!(d.write(0, &[7]));
        drop(d);
        let d2 = a.device_region(1 << 20).expect("again");
        let mut b = [9u8];
        assert!(d2.read(0, &mut b));
        assert_eq!(b[0], 0, "freed ranges are punched out");
    }

    /// Kept arenas (`recycle`): a dropped device's arena is the next one's, every byte it
    /// had written zero again (regions dropped during its life and at its end, a host
    /// region, SBUF-like device regions); one still mapped by user space, or whose memfd was
    /// handed out, is not kept. (One test: the keeping is process-wide.)
    #[test]
    fn a_kept_arena_comes_back_zeroed_and_only_when_nothing_else_maps_it() {
        if Arena::new(96).is_none() {
            eprintln!("no memfd here; skipping");
            return;
        }
        recycle::set(4);
        let a = Arena::new(91).expect("arena");
        // Which memfd an arena has (a fresh one is a new file; addresses may be reused).
        let ino = |a: &Arena| {
            // SAFETY: fstat into a zeroed struct on the arena's own fd.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            assert_eq!(unsafe { libc::fstat(a.inner.fd, &mut st) }, 0);
            st.st_ino
        };
        let first = ino(&a);
        let host = a.host_region(0x2000_0000, 3 << 20).expect("host region");
        assert!(host.write(5, &[1; 3000]) && host.write((3 << 20) - 1, &[2]));
        let early = a.device_region(1 << 20).expect("device region");
        assert!(early.write(4096 * 7 + 3, &[3; 9000]));
        drop(early); // freed during the device's life: zero for whoever gets the range next
        let again = a.device_region(1 << 20).expect("the same range again");
        let mut b = [9u8; 9000];
        assert!(again.read(4096 * 7 + 3, &mut b));
        assert!(b.iter().all(|x| *x == 0), "a freed range reads zero");
        assert!(again.write(100, &[4; 10]));
        a.closing(); // the device's end: its regions are left for the arena's zeroing
        drop((host, again, a));

        let b2 = Arena::new(91).expect("arena");
        assert_eq!(ino(&b2), first, "the dropped arena came back");
        let host = b2.host_region(0x2000_0000, 3 << 20).expect("host region");
        let dev = b2.device_region(1 << 20).expect("device region");
        let (mut h, mut d) = (vec![9u8; 3 << 20], vec![9u8; 1 << 20]);
        assert!(host.read(0, &mut h) && dev.read(0, &mut d));
        assert!(h.iter().chain(&d).all(|x| *x == 0), "every byte zero again");

        // A user mapping that outlives the device: that arena is not kept.
        let alias = b2
            .map_user(dev.as_ptr(), 4096, libc::PROT_READ)
            .expect("alias");
        drop((host, dev, b2));
        let c = Arena::new(91).expect("arena");
        assert_ne!(
            ino(&c),
            first,
            "an arena still mapped is not handed out again"
        );
        // SAFETY: the mapping made above, 4096 bytes; nothing else uses it.
        unsafe { libc::munmap(alias.cast(), 4096) };
        let (handed, _) = (ino(&c), c.fd());
        drop(c);
        let d = Arena::new(91).expect("arena");
        assert_ne!(
            ino(&d),
            handed,
            "an arena whose memfd was handed out is not kept"
        );
        let kept = ino(&d);
        let host = d.host_region(0x2000_0000, 1 << 20).expect("host region");
        assert!(host.write(3, &[5; 5000]));
        d.closing();
        drop((host, d));
        // Zeroed again where the last zeroing found data and where it did not.
        let e = Arena::new(91).expect("arena");
        assert_eq!(ino(&e), kept, "kept again once nothing else maps it");
        let host = e.host_region(0x2000_0000, 1 << 20).expect("host region");
        let dev = e.device_region(1 << 20).expect("device region");
        assert!(host.write(7, &[6; 9000]) && dev.write(4096 * 9, &[6; 3]));
        e.closing();
        drop((host, dev, e));
        let f = Arena::new(91).expect("arena");
        assert_eq!(ino(&f), kept);
        let host = f.host_region(0x2000_0000, 1 << 20).expect("host region");
        let dev = f.device_region(1 << 20).expect("device region");
        let (mut h, mut d) = (vec![9u8; 1 << 20], vec![9u8; 1 << 20]);
        assert!(host.read(0, &mut h) && dev.read(0, &mut d));
        assert!(h.iter().chain(&d).all(|x| *x == 0), "every byte zero again");
        drop((host, dev, f));
        recycle::set(0);
    }

    /// An arena with less room gives device regions up to it and refuses beyond, instead of
    /// failing as a whole.
    #[test]
    fn a_small_arena_gives_what_fits() {
        let Some(a) = Arena::sized(98, DEV_LEN_MIN) else {
            eprintln!("no memfd here; skipping");
            return;
        };
        assert_eq!(a.inner.size, DEV_START + DEV_LEN_MIN);
        let d = a.device_region(DEV_LEN_MIN / 2).expect("half the room");
        assert!(a.device_region(DEV_LEN_MIN).is_none(), "beyond the room");
        drop(d);
        assert!(
            a.device_region(DEV_LEN_MIN).is_some(),
            "the whole room once freed"
        );
        // Asked below the least room: the least room.
        let b = Arena::sized(97, 4096).expect("arena");
        assert_eq!(b.inner.size, DEV_START + DEV_LEN_MIN);
    }
}
