//! Device memory handed to user space, used as a hostile but legal program may: mapped twice,
//! unmapped in parts, `mprotect`ed, written through read-only mappings, inherited by `fork`,
//! and register pages stored to many times and from many threads. The emulator must neither
//! crash nor lose a store, and a forked child must get errors and leave the parent intact.
// Raw mappings, fork and waitpid; every block has a SAFETY comment.
#![allow(unsafe_code)]

use neuron_abi::arch::Arch;
use neuron_abi::consts::{MMAP_BLOCK_TPB, MMAP_RESOURCE_SBUF, MMAP_RESOURCE_SEMAPHORE};
use neuron_abi::device::{PROT_READ, PROT_RW};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::{DeviceFile, Errno};
use neuron_e2e_tests::call::{ioctl, map_read_u32, map_write_u32};
use neuron_emulator::{EmuFile, Emulator, OpenOptions};
use std::sync::Arc;
use zerocopy::FromZeros;

const ARCH: Arch = Arch::V3Trn2;
const SEM_INC: usize = 0x1800;

fn open() -> (Emulator, Arc<EmuFile>) {
    let emu = Emulator::new(ARCH, 1);
    let f = emu.open(0, OpenOptions::default()).expect("open");
    (emu, Arc::new(f))
}

/// A host chunk of `size` bytes: (handle, mmap offset).
fn host_chunk(dev: &dyn DeviceFile, size: u64) -> Result<(u64, u64), Errno> {
    neuron_e2e_tests::call::alloc_chunk(dev, size, true)
}

/// The device copies `data` into the chunk at `off` (a device-side write).
fn device_write(dev: &dyn DeviceFile, h: u64, off: u64, data: &mut [u8]) {
    copy(dev, h, off, data, true);
}

/// The device copies the chunk's bytes at `off` out.
fn device_read(dev: &dyn DeviceFile, h: u64, off: u64, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    copy(dev, h, off, &mut b, false);
    b
}

fn copy(dev: &dyn DeviceFile, h: u64, off: u64, buf: &mut [u8], to_dev: bool) {
    let mut a = MemBufCopy64 {
        mem_handle: h,
        buffer: buf.as_mut_ptr() as u64,
        size: buf.len() as u64,
        offset: off,
        copy_to_mem_handle: to_dev as u32,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_MEM_BUF_COPY64, &mut a).expect("MEM_BUF_COPY64");
}

fn sem_read(dev: &dyn DeviceFile, idx: u32) -> u32 {
    let mut a = Semaphore {
        nc_id: 0,
        semaphore_index: idx,
        value: 0,
    };
    ioctl(dev, NEURON_IOCTL_SEMAPHORE_READ, &mut a).expect("SEMAPHORE_READ");
    a.value
}

fn sem_page(dev: &dyn DeviceFile, prot: i32) -> *mut u8 {
    let w = ARCH
        .resource_mmap(MMAP_BLOCK_TPB, 0, MMAP_RESOURCE_SEMAPHORE)
        .expect("semaphore row");
    dev.mmap(w.size as usize, w.offset, prot)
        .expect("map semaphore page")
}

/// Run `f` in a forked child and return how it ended (`waitpid` status).
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `f` (plain memory accesses, ioctls on the in-process emulator,
    // which only locks memory the parent's threads leave unlocked while the device is idle)
    // and leaves with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child at once, running no destructors or atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
    status
}

#[test]
fn a_chunk_mapped_twice_survives_both_unmaps() {
    let (_emu, dev) = open();
    let (h, off) = host_chunk(&*dev, 8192).expect("chunk");
    let a = dev.mmap(8192, off, PROT_RW).expect("map 1");
    let b = dev.mmap(8192, off, PROT_RW).expect("map 2");
    assert_ne!(a, b, "each mmap is a mapping of its own");
    map_write_u32(a, 100, 0xA5A5_0001);
    assert_eq!(
        map_read_u32(b, 100),
        0xA5A5_0001,
        "both views show the same memory"
    );
    dev.munmap(a, 8192).expect("unmap 1");
    dev.munmap(b, 8192).expect("unmap 2");
    assert_eq!(dev.munmap(b, 8192), Err(Errno::EINVAL), "already unmapped");
    // A program may also unmap with plain munmap(2): that removes only its own view.
    let c = dev.mmap(8192, off, PROT_RW).expect("map 3");
    // SAFETY: unmapping the view just returned, as a program would.
    assert_eq!(unsafe { libc::munmap(c.cast(), 8192) }, 0);
    let mut data = vec![7u8; 8192];
    device_write(&*dev, h, 0, &mut data);
    assert_eq!(
        device_read(&*dev, h, 0, 8192),
        data,
        "the device's memory is intact"
    );
}

#[test]
fn the_semaphore_page_mapped_twice_survives_both_unmaps() {
    let (_emu, dev) = open();
    let a = sem_page(&*dev, PROT_RW);
    let b = sem_page(&*dev, PROT_RW);
    assert_ne!(a, b);
    dev.munmap(a, 0x2000).expect("unmap 1");
    dev.munmap(b, 0x2000).expect("unmap 2");
    let c = sem_page(&*dev, PROT_RW);
    map_write_u32(c, SEM_INC + 4 * 3, 5);
    assert_eq!(sem_read(&*dev, 3), 5, "the live page still works");
    assert_eq!(
        map_read_u32(c, 0x1000 + 4 * 3),
        5,
        "and reads through the view are live"
    );
    // SAFETY: plain munmap(2) of the view just made.
    assert_eq!(unsafe { libc::munmap(c.cast(), 0x2000) }, 0);
    assert_eq!(sem_read(&*dev, 3), 5);
}

#[test]
fn partial_munmap_keeps_the_rest_of_the_mapping() {
    let (_emu, dev) = open();
    let (h, off) = host_chunk(&*dev, 3 * 4096).expect("chunk");
    let p = dev.mmap(3 * 4096, off, PROT_RW).expect("map");
    // SAFETY: the middle page of the mapping just made.
    let mid = unsafe { p.add(4096) };
    dev.munmap(mid, 4096).expect("unmap the middle page");
    assert_eq!(
        dev.munmap(mid, 4096),
        Err(Errno::EINVAL),
        "not mapped any more"
    );
    map_write_u32(p, 8, 11);
    // SAFETY: the last page, still mapped.
    let last = unsafe { p.add(2 * 4096) };
    map_write_u32(last, 8, 22);
    assert_eq!(device_read(&*dev, h, 8, 4), 11u32.to_le_bytes());
    assert_eq!(device_read(&*dev, h, 2 * 4096 + 8, 4), 22u32.to_le_bytes());
    assert_eq!(
        dev.munmap(p, 3 * 4096),
        Err(Errno::EINVAL),
        "a range with a hole is not all ours"
    );
    dev.munmap(p, 4096).expect("unmap the first page");
    dev.munmap(last, 100)
        .expect("unmap the last page (length rounded up)");
    assert_eq!(dev.munmap(last, 4096), Err(Errno::EINVAL));
    let mut data = vec![3u8; 3 * 4096];
    device_write(&*dev, h, 0, &mut data);
    assert_eq!(device_read(&*dev, h, 0, 3 * 4096), data);
}

/// One munmap over mappings that lie end to end (a chunk's and the register page's) removes
/// them all, as munmap(2) does: each is gone from the bookkeeping, the device keeps working
/// and the chunk's memory is intact.
#[test]
fn one_munmap_across_adjacent_mappings_removes_them_all() {
    let (_emu, dev) = open();
    let (h, off) = host_chunk(&*dev, 8192).expect("chunk");
    let mut maps: Vec<(usize, usize)> = Vec::new();
    for _ in 0..3 {
        maps.push((dev.mmap(8192, off, PROT_RW).expect("map") as usize, 8192));
        maps.push((sem_page(&*dev, PROT_RW) as usize, 0x2000));
    }
    maps.sort_unstable();
    // The kernel picks the addresses; new mappings usually go right below the last ones.
    let Some(i) = (1..maps.len()).find(|&i| maps[i - 1].0 + maps[i - 1].1 == maps[i].0) else {
        eprintln!("no two mappings placed end to end here; skipping");
        return;
    };
    let (lo, hi) = (maps[i - 1], maps[i]);
    dev.munmap(lo.0 as *mut u8, lo.1 + hi.1)
        .expect("one munmap over both");
    assert_eq!(
        dev.munmap(lo.0 as *mut u8, lo.1),
        Err(Errno::EINVAL),
        "gone"
    );
    assert_eq!(
        dev.munmap(hi.0 as *mut u8, hi.1),
        Err(Errno::EINVAL),
        "gone"
    );
    for &(p, n) in maps.iter().filter(|m| **m != lo && **m != hi) {
        dev.munmap(p as *mut u8, n)
            .expect("the others unmap on their own");
    }
    let mut data = vec![9u8; 8192];
    device_write(&*dev, h, 0, &mut data);
    assert_eq!(device_read(&*dev, h, 0, 8192), data);
    let c = sem_page(&*dev, PROT_RW);
    map_write_u32(c, SEM_INC + 4 * 2, 4);
    assert_eq!(sem_read(&*dev, 2), 4, "a fresh register view works");
}

#[test]
fn a_partly_unmapped_register_view_still_counts_stores_in_the_rest() {
    let (_emu, dev) = open();
    let p = sem_page(&*dev, PROT_RW);
    dev.munmap(p, 4096).expect("unmap the event half");
    map_write_u32(p, SEM_INC + 4 * 2, 1);
    map_write_u32(p, SEM_INC + 4 * 2, 1);
    assert_eq!(sem_read(&*dev, 2), 2);
    // SAFETY: the second page of the view, still mapped.
    dev.munmap(unsafe { p.add(4096) }, 4096)
        .expect("unmap the rest");
    assert_eq!(sem_read(&*dev, 2), 2);
}

#[test]
fn mprotect_read_only_leaves_the_device_writing() {
    let (_emu, dev) = open();
    let (h, off) = host_chunk(&*dev, 4096).expect("chunk");
    let p = dev.mmap(4096, off, PROT_RW).expect("map");
    // SAFETY: changing the protection of the user's own view, as a program may.
    assert_eq!(
        unsafe { libc::mprotect(p.cast(), 4096, libc::PROT_READ) },
        0
    );
    let mut data = (0..4096).map(|i| i as u8).collect::<Vec<u8>>();
    device_write(&*dev, h, 0, &mut data);
    assert_eq!(
        map_read_u32(p, 4),
        u32::from_le_bytes([4, 5, 6, 7]),
        "user sees device writes"
    );
    dev.munmap(p, 4096).expect("unmap");
}

#[test]
fn the_sbuf_mapping_is_page_aligned() {
    let (_emu, dev) = open();
    let w = ARCH
        .resource_mmap(MMAP_BLOCK_TPB, 0, MMAP_RESOURCE_SBUF)
        .expect("SBUF row");
    let p = dev
        .mmap(w.size as usize, w.offset, PROT_RW)
        .expect("map SBUF");
    assert_eq!(p as usize % 4096, 0, "SBUF mapping at {p:?}");
    dev.munmap(p, w.size as usize).expect("unmap");
}

/// Run this test binary again on test `child_scenario` with scenario `which`; how it ended.
fn run_scenario(which: &str) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_scenario",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("NEURON_MAPPINGS_SCENARIO", which)
        .output()
        .expect("spawn the test binary")
}

fn signal_of(out: &std::process::Output) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal()
}

/// Scenarios that must kill their process, run by the tests below in a child process.
#[test]
fn child_scenario() {
    let Ok(which) = std::env::var("NEURON_MAPPINGS_SCENARIO") else {
        return;
    };
    let (_emu, dev) = open();
    match which.as_str() {
        "chunk" => {
            let (_, off) = host_chunk(&*dev, 4096).expect("chunk");
            let p = dev.mmap(4096, off, PROT_READ).expect("map read-only");
            assert_eq!(map_read_u32(p, 0), 0, "readable");
            map_write_u32(p, 0, 1);
        }
        "regs" => {
            let p = sem_page(&*dev, PROT_READ);
            map_write_u32(p, SEM_INC, 1);
        }
        "overflow" => {
            // The store trap is installed; Rust's stack-overflow report must still work.
            let _p = sem_page(&*dev, PROT_RW);
            fn deep(n: u64) -> u64 {
                let a = std::hint::black_box([n; 64]);
                if a[1] == u64::MAX {
                    return 0;
                }
                deep(a[3] + 1) + a[7]
            }
            let t = std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(|| deep(0))
                .expect("thread");
            let _ = t.join();
        }
        other => panic!("unknown scenario {other}"),
    }
    // Reaching here means the store (or the overflow) went unnoticed.
    std::process::exit(3);
}

#[test]
fn a_prot_read_mapping_is_really_read_only() {
    for which in ["chunk", "regs"] {
        let out = run_scenario(which);
        assert_eq!(
            signal_of(&out),
            Some(libc::SIGSEGV),
            "{which}: a store through a PROT_READ mapping must crash: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn rusts_stack_overflow_report_survives_the_store_trap() {
    let out = run_scenario("overflow");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        signal_of(&out),
        Some(libc::SIGABRT),
        "{:?} {err}",
        out.status
    );
    assert!(err.contains("has overflowed its stack"), "{err}");
}

#[test]
fn a_forked_child_is_not_attached_and_its_close_leaves_the_parent_intact() {
    let (emu, dev) = open();
    let (h, _) = host_chunk(&*dev, 4096).expect("chunk");
    let mut data = vec![0x5Au8; 4096];
    device_write(&*dev, h, 0, &mut data);
    // The child takes these out and drops them (its close, its emulator's end); the parent's
    // copies are untouched by that.
    let child_dev = std::cell::RefCell::new(Some(dev.clone()));
    let child_emu = std::cell::RefCell::new(Some(emu));
    let st = in_child(|| {
        let Some(dev) = child_dev.borrow_mut().take() else {
            return 9;
        };
        // Codes: 0 = as expected; 1 = MEM_ALLOC (an attach-only command, `driver-abi.md` §1)
        // did not answer EACCES; 2 = mmap did not fail;
        // 3 = the emulator opened a new file in the child.
        let mut handle = 0u64;
        let mut a = MemAlloc {
            size: 4096,
            host_memory: 1,
            mem_handle: &mut handle as *mut u64 as u64,
            ..FromZeros::new_zeroed()
        };
        if ioctl(&*dev, NEURON_IOCTL_MEM_ALLOC, &mut a) != Err(Errno::EACCES) {
            return 1;
        }
        if dev.mmap(4096, 0, PROT_RW).is_ok() {
            return 2;
        }
        drop(dev);
        let emu = child_emu.borrow_mut().take();
        if emu
            .as_ref()
            .is_some_and(|e| e.open(0, OpenOptions::default()).is_ok())
        {
            return 3;
        }
        drop(emu);
        0
    });
    assert!(libc::WIFEXITED(st), "child status {st:#x}");
    assert_eq!(libc::WEXITSTATUS(st), 0, "child check failed");
    assert_eq!(
        device_read(&*dev, h, 0, 4096),
        data,
        "the parent's chunk is intact"
    );
    assert!(
        host_chunk(&*dev, 4096).is_ok(),
        "the parent is still attached"
    );
    drop(child_emu);
}

#[test]
fn every_store_to_the_increment_register_counts() {
    let (_emu, dev) = open();
    let p = sem_page(&*dev, PROT_RW);
    let mut want = 0;
    for (idx, n) in [(4u32, 2u32), (5, 3), (6, 4), (4, 4)] {
        for _ in 0..n {
            map_write_u32(p, SEM_INC + 4 * idx as usize, 1);
        }
        if idx == 4 {
            want += n;
        }
        let got = sem_read(&*dev, idx);
        assert_eq!(
            got,
            if idx == 4 { want } else { n },
            "{n} stores of 1 to $S[{idx}]"
        );
    }
    // In order, across registers: set 10, +1, set 3, +2 gives 5 (mailboxes would give 6).
    for (reg, v) in [(0x1400, 10), (SEM_INC, 1), (0x1400, 3), (SEM_INC, 2)] {
        map_write_u32(p, reg + 4 * 8, v);
    }
    assert_eq!(sem_read(&*dev, 8), 5, "stores applied in program order");
    // Atomic read-modify-write forms a C client may use (lock add, lock xadd) count too.
    // SAFETY: a 4-byte aligned word inside the live 8 KiB view.
    let w = unsafe { &*(p.add(SEM_INC + 4 * 7) as *const std::sync::atomic::AtomicU32) };
    w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let _ = std::hint::black_box(w.fetch_add(2, std::sync::atomic::Ordering::SeqCst));
    assert_eq!(sem_read(&*dev, 7), 3);
    dev.munmap(p, 0x2000).expect("unmap");
}

#[test]
fn four_threads_of_increments_lose_none() {
    let (_emu, dev) = open();
    let p = sem_page(&*dev, PROT_RW) as usize;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..100_000 {
                    map_write_u32(p as *mut u8, SEM_INC + 4 * 9, 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    assert_eq!(sem_read(&*dev, 9), 400_000);
    dev.munmap(p as *mut u8, 0x2000).expect("unmap");
}

/// With no ioctl after it, a trapped store is still applied (by the device thread, at a
/// quiescent point), and reads through the view see the live value.
#[test]
fn a_store_with_no_ioctl_after_it_still_takes_effect() {
    let (_emu, dev) = open();
    let p = sem_page(&*dev, PROT_RW);
    map_write_u32(p, SEM_INC + 4 * 20, 6);
    let t = std::time::Instant::now();
    while map_read_u32(p, 0x1000 + 4 * 20) != 6 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "never applied"
        );
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    dev.munmap(p, 0x2000).expect("unmap");
}

/// A fork while the device thread is busy running a model: the child's ioctls still answer
/// (no lock is left held in the child), every time.
#[test]
fn forking_while_the_device_runs_never_hangs_the_child() {
    use neuron_e2e_tests::{builtin_input, repo_path, setup};
    let s = setup(std::time::Duration::from_secs(60));
    let file = s.emu.open(0, OpenOptions::default()).expect("second file");
    let neff = std::fs::read(repo_path("fixtures/neff/mlp.neff")).expect("fixture");
    let x = builtin_input(neuron_isa::Dtype::Bf16, 128 * 512, 0);
    let mut m = s.rt.load(&neff, 0).expect("load");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let failure = std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                m.execute(&[("x", &x)]).expect("execute");
            }
        });
        let failure = (0..20).find_map(|round| {
            std::thread::sleep(std::time::Duration::from_millis(3));
            // SAFETY: the child makes ioctls and leaves with _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let mut handle = 0u64;
                let mut a = MemAlloc {
                    size: 4096,
                    host_memory: 1,
                    mem_handle: &mut handle as *mut u64 as u64,
                    ..FromZeros::new_zeroed()
                };
                let ok = ioctl(&file, NEURON_IOCTL_MEM_ALLOC, &mut a) == Err(Errno::EACCES);
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) };
            }
            let t = std::time::Instant::now();
            let mut status = 0;
            loop {
                // SAFETY: polling the child just forked.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid {
                    break;
                }
                if t.elapsed() > std::time::Duration::from_secs(10) {
                    // SAFETY: killing our own stuck child before failing.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return Some(format!("round {round}: the child hangs"));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            (!ok).then(|| format!("round {round}: child status {status:#x}"))
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        failure
    });
    assert_eq!(failure, None);
}
