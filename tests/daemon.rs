//! `neuron-emu serve` with real processes: a daemon (a `Server` on a thread of this test, on a
//! temporary socket, never the well-known path) and clients that are separate processes (this
//! test binary run again on `daemon_child` with a role). They must share one machine with the
//! real driver's per-process rules: read-only views of another process's chunks, the
//! 16-process cap, core-range exclusion, cleanup on `kill -9`, no data left for the next
//! process, an inherited fd after `fork`; and real programs (a C program under the preload
//! shim, `libnrt.so`) run a NEFF through it.
// Raw mappings, fork and waitpid in the child roles; every block has a SAFETY comment.
#![allow(unsafe_code)]

use neuron_abi::arch::Arch;
use neuron_abi::device::PROT_RW;
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::{DeviceFile, Errno};
use neuron_e2e_tests::call::ioctl;
use neuron_emu_remote::RemoteMachine;
use neuron_emulator::serve::Server;
use neuron_emulator::Emulator;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use zerocopy::FromZeros;

/// Removes a test's temporary directory when the test ends (the libraries copied there are
/// tens of megabytes; repeated runs must not fill the disk).
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ROLE: &str = "NEURON_DAEMON_TEST_ROLE";
const SOCK: &str = "NEURON_DAEMON_TEST_SOCKET";

/// A daemon on a thread of this process; stopped (socket removed) on drop.
struct Daemon {
    path: PathBuf,
    emu: Arc<Emulator>,
    stop: neuron_emulator::serve::Stopper,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    fn start(name: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("neuron-emu-test-{}", std::process::id()));
        let path = dir.join(format!("{name}.sock"));
        let server = Server::bind(Emulator::new(Arch::V3Trn2, 1), &path, "").expect("bind");
        let emu = server.emulator().clone();
        let stop = server.stopper();
        let thread = std::thread::spawn(move || {
            server.run().expect("serve");
        });
        Daemon {
            path,
            emu,
            stop,
            thread: Some(thread),
        }
    }

    /// Device 0's bytes of memory owned by `pid`.
    fn memory_of(&self, pid: u32) -> u64 {
        let r = self.emu.device(0).expect("device 0");
        r.memory
            .iter()
            .filter(|m| m.pid == pid)
            .map(|m| m.bytes)
            .sum()
    }

    fn attached(&self) -> Vec<u32> {
        let r = self.emu.device(0).expect("device 0");
        r.processes.iter().map(|p| p.pid).collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        assert!(!self.path.exists(), "the socket file is removed");
    }
}

/// A client process running `role`; talks over stdin/stdout lines.
struct Client {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Client {
    fn spawn(d: &Daemon, role: &str, env: &[(&str, String)]) -> Client {
        let mut c = Command::new(std::env::current_exe().expect("test binary"));
        c.args(["--exact", "daemon_child", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(SOCK, &d.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().expect("spawn a client");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Client { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The value of the next `key value` line the client prints (other lines skipped).
    fn expect(&mut self, key: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).expect("read client output");
            if n == 0 {
                let st = self.child.wait();
                panic!("client ended before printing {key}: {st:?}");
            }
            // The harness may have printed "test daemon_child ... " before it on the line.
            let tag = format!("@{key} ");
            if let Some(at) = line.find(&tag) {
                return line[at + tag.len()..].trim_end().to_string();
            }
        }
    }

    /// Let the client go on (it waits for a line on stdin).
    fn go(&mut self) {
        let i = self.child.stdin.as_mut().expect("stdin");
        let _ = i.write_all(b"go\n");
        let _ = i.flush();
    }

    fn wait_ok(mut self) {
        self.go();
        let st = self.child.wait().expect("wait");
        assert!(st.success(), "client failed: {st:?}");
    }

    fn kill9(mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }
}

// ---- what the client processes do -----------------------------------------------------

fn say(key: &str, v: impl std::fmt::Display) {
    println!("@{key} {v}");
    let _ = std::io::stdout().flush();
}

fn wait_go() {
    let mut l = String::new();
    let _ = std::io::stdin().read_line(&mut l);
}

fn machine() -> RemoteMachine {
    RemoteMachine::connect(std::env::var(SOCK).expect("socket")).expect("daemon")
}

/// A chunk of `size` bytes (host or device): (handle, mmap offset).
fn chunk(dev: &dyn DeviceFile, size: u64, host: bool) -> Result<(u64, u64), Errno> {
    neuron_e2e_tests::call::alloc_chunk(dev, size, host)
}

fn range_mark(dev: &dyn DeviceFile, count: u32) -> Result<u64, Errno> {
    let mut m = CrwlNcMap {
        nc_count: count,
        start_nc_index: 0,
        end_nc_index: 1,
        ..FromZeros::new_zeroed()
    };
    ioctl(dev, NEURON_IOCTL_CRWL_NC_RANGE_MARK, &mut m).map(|_| m.bitmap)
}

fn errno_text(r: Result<impl Sized, Errno>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

/// A mapped view as a slice (test helper over a live mapping of `len` bytes).
fn view<'a>(p: *mut u8, len: usize) -> &'a mut [u8] {
    // SAFETY: `p` is a live mapping of `len` bytes the device just returned; the tests only
    // touch it while it is mapped.
    unsafe { std::slice::from_raw_parts_mut(p, len) }
}

const SIZE: usize = 1 << 16;

/// The client processes' roles (run by the tests below; a no-op when run as a test).
#[test]
fn daemon_child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let m = machine();
    match role.as_str() {
        // Allocates a host chunk, writes a pattern through its own (writable) mapping, holds.
        "writer" => {
            let f = m.open(0, false).expect("open");
            let (_, off) = chunk(&f, SIZE as u64, true).expect("chunk");
            let p = f.mmap(SIZE, off, PROT_RW).expect("map");
            for (k, b) in view(p, SIZE).iter_mut().enumerate() {
                *b = (k % 251) as u8;
            }
            say("offset", off);
            wait_go();
        }
        // Maps another process's chunk: read-only, the bytes visible, stores refused.
        "reader" => {
            let f = m.open(0, false).expect("open");
            let off: u64 = std::env::var("OFFSET").expect("offset").parse().expect("n");
            let p = f.mmap(SIZE, off, PROT_RW).expect("map another's chunk");
            let same = view(p, SIZE)
                .iter()
                .enumerate()
                .all(|(k, b)| *b == (k % 251) as u8);
            say("same", same);
            say(
                "store",
                errno_text(neuron_emu_remote::client::copy_to_self(p as u64, &[1])),
            );
            f.munmap(p, SIZE).expect("unmap");
        }
        // Opens and holds (the process cap).
        "holder" => {
            let f = m.open(0, false);
            say("open", errno_text(f.as_ref().map(|_| ()).map_err(|e| *e)));
            wait_go();
            drop(f);
        }
        // Holds chunks, core marks and a CRWL writer lock; prints its pid when done.
        "hog" => {
            let f = m.open(0, false).expect("open");
            let misc = m.open(0, true).expect("misc open");
            say("mark", errno_text(range_mark(&misc, 2)));
            for _ in 0..4 {
                chunk(&f, SIZE as u64, false).expect("chunk");
            }
            let (_, off) = chunk(&f, SIZE as u64, true).expect("host chunk");
            let _p = f.mmap(SIZE, off, PROT_RW).expect("map");
            let mut c = Crwl {
                nc_id: 0,
                uuid: Uuid32 { value: [3; 32] },
            };
            say(
                "lock",
                errno_text(ioctl(&f, NEURON_IOCTL_CRWL_WRITER_ENTER, &mut c)),
            );
            say("ready", 1);
            wait_go();
        }
        // Marks cores (after another process's marks: EBUSY; after its end: granted).
        "marker" => {
            let misc = m.open(0, true).expect("misc open");
            say("mark", errno_text(range_mark(&misc, 2)));
            let f = m.open(0, false).expect("open");
            let mut c = Crwl {
                nc_id: 0,
                uuid: Uuid32 { value: [4; 32] },
            };
            say(
                "lock",
                errno_text(ioctl(&f, NEURON_IOCTL_CRWL_WRITER_ENTER, &mut c)),
            );
        }
        // Writes a secret into a device chunk and a host chunk, then exits.
        "secret" => {
            let f = m.open(0, false).expect("open");
            for host in [false, true] {
                let (_, off) = chunk(&f, SIZE as u64, host).expect("chunk");
                let p = f.mmap(SIZE, off, PROT_RW).expect("map");
                view(p, SIZE).fill(0xA5);
            }
            say("done", 1);
        }
        // New chunks of the same kinds: nothing of the secret.
        "zeros" => {
            let f = m.open(0, false).expect("open");
            let mut clean = true;
            for host in [false, true] {
                let (_, off) = chunk(&f, SIZE as u64, host).expect("chunk");
                let p = f.mmap(SIZE, off, PROT_RW).expect("map");
                clean &= view(p, SIZE).iter().all(|b| *b == 0);
                let mut buf = vec![0xffu8; SIZE];
                let (h, _) = chunk(&f, SIZE as u64, host).expect("chunk");
                let mut c = MemBufCopy64 {
                    mem_handle: h,
                    buffer: buf.as_mut_ptr() as u64,
                    size: SIZE as u64,
                    offset: 0,
                    copy_to_mem_handle: 0,
                    ..FromZeros::new_zeroed()
                };
                ioctl(&f, NEURON_IOCTL_MEM_BUF_COPY64, &mut c).expect("copy out");
                clean &= buf.iter().all(|b| *b == 0);
            }
            say("clean", clean);
        }
        // A forked child using the parent's fd: an inherited file (A commands: EACCES).
        "fork" => {
            let f = m.open(0, false).expect("open");
            chunk(&f, 4096, true).expect("the parent allocates");
            // SAFETY: the child only issues ioctls through its socket connection, prints and
            // leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let mut handle = 0u64;
                let mut a = MemAlloc {
                    size: 4096,
                    host_memory: 1,
                    mem_handle: &mut handle as *mut u64 as u64,
                    ..FromZeros::new_zeroed()
                };
                let alloc = ioctl(&f, NEURON_IOCTL_MEM_ALLOC, &mut a);
                let mut info = DeviceBasicInfo::new_zeroed();
                let basic = ioctl(&f, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut info);
                let code = match (alloc, basic) {
                    (Err(Errno::EACCES), Ok(_)) if info.architecture == 3 => 0,
                    (Err(Errno::EACCES), _) => 2,
                    _ => 1,
                };
                // SAFETY: ends the child at once, running no destructors.
                unsafe { libc::_exit(code) };
            }
            let mut st = 0;
            // SAFETY: waiting for the child just forked.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            say("child", libc::WEXITSTATUS(st));
            say("parent", errno_text(chunk(&f, 4096, true)));
        }
        // Closes its fd while a forked child (holding copies of its sockets) still lives.
        "forkclose" => {
            let f = m.open(0, false).expect("open");
            chunk(&f, 4096, true).expect("chunk");
            // SAFETY: the child only sleeps and leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                std::thread::sleep(std::time::Duration::from_secs(3));
                // SAFETY: ends the child at once, running no destructors.
                unsafe { libc::_exit(0) };
            }
            drop(f);
            say("closed", 1);
            let mut st = 0;
            // SAFETY: waiting for the child just forked.
            unsafe { libc::waitpid(pid, &mut st, 0) };
        }
        other => panic!("unknown role {other}"),
    }
}

// ---- the tests --------------------------------------------------------------------------

#[test]
fn two_processes_share_one_device_with_read_only_views_of_each_others_chunks() {
    let d = Daemon::start("share");
    let mut a = Client::spawn(&d, "writer", &[]);
    let off = a.expect("offset");
    let mut b = Client::spawn(&d, "reader", &[("OFFSET", off)]);
    assert_eq!(b.expect("same"), "true", "B sees A's bytes");
    assert_eq!(b.expect("store"), "EFAULT", "B's view is read-only");
    b.wait_ok();
    a.wait_ok();
}

#[test]
fn the_seventeenth_process_gets_ebusy() {
    let d = Daemon::start("cap");
    let mut held: Vec<Client> = (0..16).map(|_| Client::spawn(&d, "holder", &[])).collect();
    for c in &mut held {
        assert_eq!(c.expect("open"), "ok");
    }
    let mut late = Client::spawn(&d, "holder", &[]);
    assert_eq!(late.expect("open"), "EBUSY");
    late.wait_ok();
    let first = held.remove(0);
    first.wait_ok();
    // The slot is free once the process's connection is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while d.attached().len() > 15 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut again = Client::spawn(&d, "holder", &[]);
    assert_eq!(again.expect("open"), "ok");
    again.wait_ok();
    for c in held {
        c.wait_ok();
    }
}

#[test]
fn core_marks_exclude_other_processes_and_kill_9_frees_everything() {
    let d = Daemon::start("kill");
    let mut a = Client::spawn(&d, "hog", &[]);
    assert_eq!(a.expect("mark"), "ok");
    assert_eq!(a.expect("lock"), "ok");
    a.expect("ready");
    let apid = a.pid();
    assert!(d.memory_of(apid) >= 5 * SIZE as u64, "A holds its chunks");
    let mut b = Client::spawn(&d, "marker", &[]);
    assert_eq!(b.expect("mark"), "EBUSY", "A's cores are A's");
    assert_eq!(b.expect("lock"), "EBUSY", "A holds the core's writer lock");
    b.wait_ok();
    a.kill9();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (d.memory_of(apid) > 0 || d.attached().contains(&apid))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(d.memory_of(apid), 0, "A's memory is freed");
    assert!(!d.attached().contains(&apid), "A is detached");
    let mut b = Client::spawn(&d, "marker", &[]);
    assert_eq!(b.expect("mark"), "ok", "A's marks went with it");
    assert_eq!(b.expect("lock"), "ok", "A's lock went with it");
    b.wait_ok();
}

#[test]
fn nothing_of_an_ended_process_is_readable_by_the_next() {
    let d = Daemon::start("secret");
    let mut a = Client::spawn(&d, "secret", &[]);
    a.expect("done");
    let apid = a.pid();
    a.wait_ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while d.attached().contains(&apid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut b = Client::spawn(&d, "zeros", &[]);
    assert_eq!(b.expect("clean"), "true");
    b.wait_ok();
}

#[test]
fn a_forked_child_on_the_parents_fd_is_not_attached() {
    let d = Daemon::start("fork");
    let mut a = Client::spawn(&d, "fork", &[]);
    assert_eq!(
        a.expect("child"),
        "0",
        "MEM_ALLOC: EACCES; DEVICE_BASIC_INFO works"
    );
    assert_eq!(a.expect("parent"), "ok", "the parent is still attached");
    a.wait_ok();
}

#[test]
fn hello_dmesg_and_shutdown_are_control_requests() {
    let d = Daemon::start("control");
    let m = RemoteMachine::connect(&d.path).expect("hello");
    assert_eq!(
        (m.arch(), m.device_count(), m.instance()),
        (Arch::V3Trn2, 1, "")
    );
    let f = m.open(0, false).expect("open");
    let msg = std::ffi::CString::new("hello from a client").expect("c string");
    let mut p = Printk {
        buffer: msg.as_ptr() as u64,
        size: msg.as_bytes_with_nul().len() as u32,
        ..FromZeros::new_zeroed()
    };
    let _ = ioctl(&f, NEURON_IOCTL_PRINTK, &mut p);
    let log = neuron_emu_remote::dmesg(&d.path).expect("dmesg");
    assert!(log.contains("hello from a client"), "{log}");
    assert_eq!(m.open(1, false).err(), Some(Errno::ENODEV));
    drop(f);
    neuron_emu_remote::shutdown(&d.path).expect("own uid may stop it");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while d.path.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(neuron_emu_remote::dmesg(&d.path).is_err(), "stopped");
}

use neuron_e2e_tests::cprog::built;

/// An unmodified C program runs the MLP NEFF through the daemon twice: under the preload shim
/// (libnrt.so's real-syscall path on /dev/neuron0) and through libnrt.so's `NEURON_EMU=1`
/// backend; both outputs match the golden and the daemon's device did the work.
#[test]
fn a_c_program_runs_a_neff_through_the_daemon_via_the_shim_and_via_libnrt() {
    let d = Daemon::start("neff");
    let tmp = std::env::temp_dir().join(format!("neuron-emu-daemon-neff-{}", std::process::id()));
    let _cleanup = Cleanup(tmp.clone());
    let _ = std::fs::remove_dir_all(&tmp);
    let exe = neuron_e2e_tests::cprog::nrt_program("run_neff", &tmp);
    let x = neuron_e2e_tests::builtin_input(neuron_isa::Dtype::Bf16, 128 * 512, 0);
    std::fs::write(tmp.join("x.bin"), &x).expect("x.bin");
    let want = neuron_e2e_tests::read_f32_npy(&neuron_e2e_tests::repo_path(
        "fixtures/neff/mlp.golden/y.npy",
    ));
    let neff = neuron_e2e_tests::repo_path("fixtures/neff/mlp.neff");
    for via in ["shim", "libnrt"] {
        let before = d.emu.stats(0).expect("stats").instructions;
        let mut c = Command::new(&exe);
        c.current_dir(&tmp)
            .arg(&neff)
            .args(["x", "x.bin"])
            .env("NEURON_EMU_SOCKET", &d.path)
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("NEURON_EMU_LIB")
            .env_remove("NEURON_EMU_FAULTS")
            .env_remove("NEURON_RT_VISIBLE_CORES")
            .env_remove("NEURON_RT_NUM_CORES");
        if via == "shim" {
            c.env("LD_PRELOAD", built("libneuron_emu_preload.so"))
                .env_remove("NEURON_EMU");
        } else {
            c.env("NEURON_EMU", "1");
        }
        let _ = std::fs::remove_file(tmp.join("y.out"));
        let out = c.output().expect("run run_neff");
        assert!(
            out.status.success(),
            "{via}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let y: Vec<f32> = std::fs::read(tmp.join("y.out"))
            .expect("y.out")
            .chunks_exact(2)
            .map(|c| neuron_isa::dtype::load_f32(neuron_isa::Dtype::Bf16, c))
            .collect();
        assert_eq!(y.len(), want.len(), "{via}");
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = y
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(err / scale <= 2e-2, "{via}: relative error {}", err / scale);
        let after = d.emu.stats(0).expect("stats").instructions;
        assert!(after > before, "{via}: the daemon's device ran the NEFF");
    }
}

/// A remote caller's store to a mapped register page (writable, untrapped: the mailbox mode)
/// takes effect with no ioctl after it: the device thread drains the mailboxes after its
/// settle time. Before that drain existed, the value register stayed 0 until the next ioctl.
#[test]
fn a_remote_store_with_no_ioctl_after_it_still_takes_effect() {
    let d = Daemon::start("store");
    let f = RemoteMachine::connect(&d.path)
        .expect("hello")
        .open(0, false)
        .expect("open");
    let w = Arch::V3Trn2
        .resource_mmap(
            neuron_abi::consts::MMAP_BLOCK_TPB,
            0,
            neuron_abi::consts::MMAP_RESOURCE_SEMAPHORE,
        )
        .expect("semaphore row");
    let p = f.mmap(w.size as usize, w.offset, PROT_RW).expect("map");
    const SEM_VALUE: usize = 0x1000;
    const SEM_INC: usize = 0x1800;
    neuron_e2e_tests::call::map_write_u32(p, SEM_INC + 4 * 3, 5);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while neuron_e2e_tests::call::map_read_u32(p, SEM_VALUE + 4 * 3) != 5
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        neuron_e2e_tests::call::map_read_u32(p, SEM_VALUE + 4 * 3),
        5
    );
    f.munmap(p, w.size as usize).expect("unmap");
}

/// Threads of one process share one fd: each concurrent caller gets a connection attached to
/// the same file (same pid, same attach slot), and all calls answer correctly.
#[test]
fn threads_of_one_process_share_one_fd() {
    let d = Daemon::start("threads");
    let f = Arc::new(
        RemoteMachine::connect(&d.path)
            .expect("hello")
            .open(0, false)
            .expect("open"),
    );
    let hs: Vec<_> = (0..4)
        .map(|_| {
            let f = f.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let mut i = DeviceBasicInfo::new_zeroed();
                    ioctl(&*f, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut i).expect("basic info");
                    assert_eq!(i.architecture, 3);
                }
                chunk(&*f, 4096, true).expect("chunk")
            })
        })
        .collect();
    for h in hs {
        h.join().expect("thread");
    }
    assert_eq!(
        d.attached(),
        vec![std::process::id()],
        "one process, one slot"
    );
    assert_eq!(d.memory_of(std::process::id()), 4 * 4096);
    drop(f);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !d.attached().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(d.attached().is_empty(), "closing the fd detaches");
}

/// A close is seen at once even while a forked child holds copies of the fd's sockets: the
/// parent's memory is freed and it is detached (the kernel's flush at each close).
#[test]
fn a_close_is_seen_while_a_forked_child_lives() {
    let d = Daemon::start("forkclose");
    let mut a = Client::spawn(&d, "forkclose", &[]);
    a.expect("closed");
    let apid = a.pid();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while d.attached().contains(&apid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        !d.attached().contains(&apid),
        "detached before the child ends"
    );
    assert_eq!(d.memory_of(apid), 0);
    a.wait_ok();
}

/// Garbage on the socket (no hello, a wrong version, a huge length, random frames, a memory
/// answer outside an ioctl) only ends that connection: the daemon keeps serving others.
#[test]
fn garbage_on_the_socket_ends_only_that_connection() {
    use neuron_emu_remote::proto::{Reply, Request};
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let d = Daemon::start("garbage");
    let hello = Request::Hello {
        version: neuron_emu_remote::proto::VERSION,
    }
    .encode();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut cases: Vec<Vec<u8>> = vec![
        vec![0xff; 16],
        Request::Hello { version: 99 }.encode(),
        [hello.clone(), vec![0xff, 0xff, 0xff, 0x7f, 1]].concat(),
        [hello.clone(), Request::MemData(vec![1; 8]).encode()].concat(),
        [
            hello.clone(),
            Request::Ioctl {
                cmd: 0x4008_4e64,
                arg: 16,
                pre: vec![],
            }
            .encode(),
        ]
        .concat(),
    ];
    for _ in 0..50 {
        let n = (rnd() % 64) as usize;
        let body: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
        let mut f = (n as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&body);
        cases.push([hello.clone(), f].concat());
    }
    for c in cases {
        let mut s = UnixStream::connect(&d.path).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let _ = s.write_all(&c);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        // Whatever came back are well-formed replies.
        let mut r = &rest[..];
        while let Ok(b) = neuron_emu_remote::proto::read_frame(&mut r) {
            assert!(Reply::decode(&b).is_ok(), "{b:?}");
        }
    }
    let f = RemoteMachine::connect(&d.path)
        .expect("still serving")
        .open(0, false)
        .expect("open");
    let mut i = DeviceBasicInfo::new_zeroed();
    ioctl(&f, NEURON_IOCTL_DEVICE_BASIC_INFO, &mut i).expect("basic info");
    assert_eq!(i.architecture, 3);
    assert!(d.attached().contains(&std::process::id()));
}
