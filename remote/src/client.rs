//! The client of `neuron-emu serve`: [`RemoteMachine`] (the daemon's devices and control
//! requests) and [`RemoteFile`], a [`DeviceFile`] whose every call runs on the daemon's one
//! emulated machine.
//!
//! One open is one connection (the owner: its end is the file's close, so even `kill -9` runs
//! the driver's per-process cleanup). Other threads calling into the same file get more
//! connections attached to it (a blocking ioctl does not stall them). The daemon reads and
//! writes the caller's memory through callbacks this side answers with `process_vm_readv` /
//! `process_vm_writev` on itself, so a bad pointer is `EFAULT`, never a crash, and the daemon
//! needs no ptrace rights. A forked child that uses the file gets its own connection to an
//! inherited file (`EmuFile::inherit` semantics: no attach, **A** commands `EACCES`).
//! Mappings are mappings of the device arena's memfd, passed once per connection.
// Mapping the arena, process_vm_readv/writev on ourselves: raw libc calls with SAFETY comments.
#![allow(unsafe_code)]

use crate::fdpass;
use crate::proto::{Control, ProtoError, Reply, Request, MAX_ARG, VERSION};
use crate::ranges::carve;
use neuron_abi::arch::Arch;
use neuron_abi::{DeviceFile, Errno};
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

const PAGE: usize = 4096;
/// Idle connections a file keeps beyond its owner.
const IDLE_KEEP: usize = 8;

/// Copy `buf.len()` bytes from this process's address `addr` (`EFAULT` if unreadable).
pub fn copy_from_self(addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    if buf.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes our own exclusively borrowed buffer; the kernel validates
    // `remote` and reports EFAULT instead of touching invalid memory.
    let n = unsafe {
        libc::process_vm_readv(
            crate::selfpid::get() as libc::pid_t,
            &local,
            1,
            &remote,
            1,
            0,
        )
    };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Copy `data` to this process's address `addr` (`EFAULT` if not writable).
pub fn copy_to_self(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` describes our own buffer (only read); the kernel validates `remote`.
    let n = unsafe {
        libc::process_vm_writev(
            crate::selfpid::get() as libc::pid_t,
            &local,
            1,
            &remote,
            1,
            0,
        )
    };
    if n == data.len() as isize {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no daemon at {path}: {err}")]
    Connect { path: PathBuf, err: std::io::Error },
    #[error("daemon at {path}: {err}")]
    Proto { path: PathBuf, err: ProtoError },
    #[error("daemon at {path} refused: {errno}")]
    Refused { path: PathBuf, errno: Errno },
}

/// What the daemon says about itself in the hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloInfo {
    pub arch: Arch,
    pub devices: u32,
    pub instance: String,
}

/// One connection to the daemon.
#[derive(Debug)]
struct Conn {
    sock: UnixStream,
    owner: bool,
}

impl Conn {
    fn connect(path: &Path) -> Result<(Conn, HelloInfo), ControlError> {
        let perr = |err| ControlError::Proto {
            path: path.to_path_buf(),
            err,
        };
        let sock = UnixStream::connect(path).map_err(|err| ControlError::Connect {
            path: path.to_path_buf(),
            err,
        })?;
        let c = Conn { sock, owner: false };
        c.send(&Request::Hello { version: VERSION }).map_err(perr)?;
        match c.recv(&mut Vec::new()).map_err(perr)? {
            Reply::Hello {
                version,
                arch,
                devices,
                instance,
            } => {
                if version != VERSION {
                    return Err(perr(ProtoError::Version(version)));
                }
                let arch = Arch::from_name(&arch)
                    .ok_or_else(|| perr(ProtoError::Unexpected("unknown architecture")))?;
                Ok((
                    c,
                    HelloInfo {
                        arch,
                        devices,
                        instance,
                    },
                ))
            }
            _ => Err(perr(ProtoError::Unexpected("no hello"))),
        }
    }

    fn send(&self, r: &Request) -> Result<(), ProtoError> {
        fdpass::send(&self.sock, &r.encode(), None)?;
        Ok(())
    }

    /// The next reply, with any fds that came with it.
    fn recv(&self, fds: &mut Vec<OwnedFd>) -> Result<Reply, ProtoError> {
        let mut h = [0u8; 4];
        fdpass::recv_exact(&self.sock, &mut h, fds).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ProtoError::Closed,
            _ => ProtoError::Io(e),
        })?;
        let len = crate::proto::frame_len(h)?;
        let mut body = Vec::new();
        body.try_reserve_exact(len)
            .map_err(|_| ProtoError::Unexpected("out of memory"))?;
        body.resize(len, 0);
        fdpass::recv_exact(&self.sock, &mut body, fds)?;
        Ok(Reply::decode(&body)?)
    }

    /// A request answered by `Done`: its value or −errno.
    fn call(&self, r: &Request) -> Result<i64, Errno> {
        self.send(r).map_err(|_| Errno::EIO)?;
        match self.recv(&mut Vec::new()).map_err(|_| Errno::EIO)? {
            Reply::Done { ret, .. } => Ok(ret),
            _ => Err(Errno::EIO),
        }
    }

    /// Open / attach / inherit: the file's token and its arena fd (if it has one).
    fn file(&self, r: &Request) -> Result<(u64, Option<OwnedFd>), Errno> {
        self.send(r).map_err(|_| Errno::EIO)?;
        let mut fds = Vec::new();
        match self.recv(&mut fds).map_err(|_| Errno::EIO)? {
            Reply::Opened { token, arena } => Ok((token, arena.then(|| fds.pop()).flatten())),
            Reply::Done { ret, .. } if ret < 0 => Err(errno_of(ret)),
            _ => Err(Errno::EIO),
        }
    }
}

fn errno_of(ret: i64) -> Errno {
    Errno(i32::try_from(-ret).unwrap_or(Errno::EIO.0))
}

/// The daemon's machine as seen from this process.
#[derive(Debug, Clone)]
pub struct RemoteMachine {
    path: PathBuf,
    info: HelloInfo,
}

impl RemoteMachine {
    /// Connect to the daemon at `path` and read its hello.
    pub fn connect(path: impl AsRef<Path>) -> Result<RemoteMachine, ControlError> {
        let path = path.as_ref().to_path_buf();
        let (_c, info) = Conn::connect(&path)?;
        Ok(RemoteMachine { path, info })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn arch(&self) -> Arch {
        self.info.arch
    }
    pub fn device_count(&self) -> usize {
        self.info.devices as usize
    }
    /// The instance preset the daemon emulates (empty: none).
    pub fn instance(&self) -> &str {
        &self.info.instance
    }

    /// `open("/dev/neuron<index>")` on the daemon's machine, as this process.
    pub fn open(&self, index: usize, write_only: bool) -> Result<RemoteFile, Errno> {
        let (mut c, _) = Conn::connect(&self.path).map_err(|_| Errno::ENODEV)?;
        let index = u32::try_from(index).map_err(|_| Errno::ENODEV)?;
        let (token, arena) = c.file(&Request::Open { index, write_only })?;
        c.owner = true;
        Ok(RemoteFile {
            path: self.path.clone(),
            main: Arc::new(Pool::new(std::process::id(), token, c, arena)),
            forked: Mutex::new(None),
        })
    }

    /// The daemon's kernel log (`dmesg`) as text.
    pub fn dmesg(&self) -> Result<String, ControlError> {
        dmesg(&self.path)
    }

    /// The daemon's encoded sysfs tree (see [`sysfs`]).
    pub fn sysfs(&self, attr: &str) -> Result<String, ControlError> {
        sysfs(&self.path, attr)
    }
}

fn control(path: &Path, c: Control) -> Result<Reply, ControlError> {
    let (conn, _) = Conn::connect(path)?;
    let perr = |err| ControlError::Proto {
        path: path.to_path_buf(),
        err,
    };
    conn.send(&Request::Control(c)).map_err(perr)?;
    match conn.recv(&mut Vec::new()).map_err(perr)? {
        Reply::Done { ret, .. } if ret < 0 => Err(ControlError::Refused {
            path: path.to_path_buf(),
            errno: errno_of(ret),
        }),
        r => Ok(r),
    }
}

/// The kernel log (`dmesg`) of the daemon at `path`.
pub fn dmesg(path: &Path) -> Result<String, ControlError> {
    match control(path, Control::Dmesg)? {
        Reply::Text(s) => Ok(s),
        _ => Err(ControlError::Proto {
            path: path.to_path_buf(),
            err: ProtoError::Unexpected("no text"),
        }),
    }
}

/// The encoded sysfs tree of the daemon at `path` (all of it if `attr` is empty, else enough
/// to read `attr`).
pub fn sysfs(path: &Path, attr: &str) -> Result<String, ControlError> {
    match control(
        path,
        Control::Sysfs {
            path: attr.to_string(),
        },
    )? {
        Reply::Text(s) => Ok(s),
        _ => Err(ControlError::Proto {
            path: path.to_path_buf(),
            err: ProtoError::Unexpected("no text"),
        }),
    }
}

/// Ask the daemon at `path` to stop (refused with `EPERM` unless from its own uid).
pub fn shutdown(path: &Path) -> Result<(), ControlError> {
    control(path, Control::Shutdown).map(|_| ())
}

/// The connections of one process to one daemon-side file.
#[derive(Debug)]
struct Pool {
    /// The process these connections belong to (a forked child must not use its parent's).
    pid: u32,
    token: u64,
    idle: Mutex<Vec<Conn>>,
    /// The device arena (the memfd every mapping maps).
    arena: Mutex<Option<OwnedFd>>,
    /// This process's mappings: start -> (daemon address − start, length in whole pages).
    views: Mutex<BTreeMap<usize, (u64, usize)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    fn new(pid: u32, token: u64, owner: Conn, arena: Option<OwnedFd>) -> Pool {
        Pool {
            pid,
            token,
            idle: Mutex::new(vec![owner]),
            arena: Mutex::new(arena),
            views: Mutex::new(BTreeMap::new()),
        }
    }

    /// Run `f` on an idle connection, or a new one attached to the file.
    fn with<R>(&self, path: &Path, f: impl FnOnce(&Conn) -> Result<R, Errno>) -> Result<R, Errno> {
        let c = lock(&self.idle).pop();
        let c = match c {
            Some(c) => c,
            None => {
                let (c, _) = Conn::connect(path).map_err(|_| Errno::EIO)?;
                let (_, arena) = c.file(&Request::Attach { token: self.token })?;
                let mut a = lock(&self.arena);
                if a.is_none() {
                    *a = arena;
                }
                c
            }
        };
        let r = f(&c);
        // A connection that failed mid-request may hold a half-read reply: drop it (the
        // owner too: its end closes the file, as a broken file should).
        if !matches!(r, Err(Errno::EIO)) {
            let mut idle = lock(&self.idle);
            if c.owner || idle.len() < IDLE_KEEP {
                idle.push(c);
            }
        }
        r
    }

    /// Unmap this process's remaining views (at close: the daemon drops its side at the
    /// connection's end, and the memory must not stay visible once it can be reused).
    fn unmap_all(&self) {
        for (va, (_, len)) in std::mem::take(&mut *lock(&self.views)) {
            // SAFETY: a mapping of the arena made by `RemoteFile::mmap`, still recorded.
            unsafe { libc::munmap(va as *mut libc::c_void, len) };
        }
    }
}

/// An open file on one of the daemon's `/dev/neuronN`.
#[derive(Debug)]
pub struct RemoteFile {
    path: PathBuf,
    main: Arc<Pool>,
    /// The file as a forked child of the opener uses it (an inherited file of its own).
    forked: Mutex<Option<Arc<Pool>>>,
}

impl RemoteFile {
    /// The connections of the calling process: the opener's, or a forked child's own
    /// inherited file (created on first use).
    fn pool(&self) -> Result<Arc<Pool>, Errno> {
        let me = std::process::id();
        if me == self.main.pid {
            return Ok(self.main.clone());
        }
        let mut f = lock(&self.forked);
        if let Some(p) = f.as_ref().filter(|p| p.pid == me) {
            return Ok(p.clone());
        }
        let (mut c, _) = Conn::connect(&self.path).map_err(|_| Errno::EIO)?;
        let (token, arena) = c.file(&Request::Inherit {
            token: self.main.token,
        })?;
        c.owner = true;
        // The parent's (or an earlier ancestor's) pool is not this process's: forget it
        // without touching its mappings (they were not inherited: DONTFORK).
        if let Some(old) = f.take() {
            lock(&old.views).clear();
        }
        let p = Arc::new(Pool::new(me, token, c, arena));
        *f = Some(p.clone());
        Ok(p)
    }

    fn ioctl_on(&self, c: &Conn, cmd: u32, arg: u64) -> Result<i32, Errno> {
        // The argument struct travels with the request when it is readable (one round trip
        // for most commands); the daemon asks for anything else.
        let size = ((cmd >> 16) & 0x3fff) as usize;
        let mut pre = vec![0u8; size.min(MAX_ARG)];
        if copy_from_self(arg, &mut pre).is_err() {
            pre.clear();
        }
        let io = |_| Errno::EIO;
        c.send(&Request::Ioctl { cmd, arg, pre }).map_err(io)?;
        loop {
            match c.recv(&mut Vec::new()).map_err(io)? {
                Reply::ReadMem { addr, len } => {
                    let mut b = Vec::new();
                    b.try_reserve_exact(len as usize)
                        .map_err(|_| Errno::ENOMEM)?;
                    b.resize(len as usize, 0);
                    let m = match copy_from_self(addr, &mut b) {
                        Ok(()) => Request::MemData(b),
                        Err(e) => Request::MemFault { errno: e.0 },
                    };
                    c.send(&m).map_err(io)?;
                }
                Reply::WriteMem { addr, data } => {
                    let m = match copy_to_self(addr, &data) {
                        Ok(()) => Request::MemDone,
                        Err(e) => Request::MemFault { errno: e.0 },
                    };
                    c.send(&m).map_err(io)?;
                }
                Reply::Done { ret, writeback } => {
                    if let Some((addr, data)) = writeback {
                        copy_to_self(addr, &data)?;
                    }
                    return if ret < 0 {
                        Err(errno_of(ret))
                    } else {
                        i32::try_from(ret).map_err(|_| Errno::EIO)
                    };
                }
                _ => return Err(Errno::EIO),
            }
        }
    }

    fn map_on(
        &self,
        pool: &Pool,
        c: &Conn,
        len: usize,
        offset: u64,
        prot: i32,
    ) -> Result<*mut u8, Errno> {
        let req = Request::Mmap {
            len: len as u64,
            offset,
            prot,
        };
        c.send(&req).map_err(|_| Errno::EIO)?;
        let (sva, off, mlen, gprot) = match c.recv(&mut Vec::new()).map_err(|_| Errno::EIO)? {
            Reply::Mapped {
                addr,
                arena_off,
                len,
                prot,
            } => (addr, arena_off, len, prot),
            Reply::Done { ret, .. } if ret < 0 => return Err(errno_of(ret)),
            _ => return Err(Errno::EIO),
        };
        let undo = || {
            let _ = c.call(&Request::Munmap {
                addr: sva,
                len: mlen,
            });
        };
        let arena = lock(&pool.arena);
        let Some(fd) = arena.as_ref() else {
            drop(arena);
            undo();
            return Err(Errno::ENODEV);
        };
        let mlen_us = usize::try_from(mlen).map_err(|_| Errno::EIO)?;
        // SAFETY: a fresh shared mapping of the arena memfd at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mlen_us,
                gprot & (libc::PROT_READ | libc::PROT_WRITE),
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off as libc::off_t,
            )
        };
        drop(arena);
        if p == libc::MAP_FAILED {
            undo();
            return Err(Errno::ENOMEM);
        }
        // SAFETY: advice on the mapping just made (the driver's DONTCOPY | DONTDUMP).
        unsafe {
            libc::madvise(p, mlen_us, libc::MADV_DONTFORK);
            libc::madvise(p, mlen_us, libc::MADV_DONTDUMP);
        }
        let va = p as usize;
        lock(&pool.views).insert(
            va,
            (sva.wrapping_sub(va as u64), mlen_us.next_multiple_of(PAGE)),
        );
        Ok(p.cast())
    }
}

impl DeviceFile for RemoteFile {
    // The argument is only read and written through process_vm_readv/writev on ourselves,
    // which turn bad pointers into EFAULT, so this is sound for any `arg`.
    #[allow(unsafe_code)]
    unsafe fn ioctl(&self, cmd: u32, arg: *mut u8) -> Result<i32, Errno> {
        let pool = self.pool()?;
        pool.with(&self.path, |c| self.ioctl_on(c, cmd, arg as u64))
    }

    fn mmap(&self, len: usize, offset: u64, prot: i32) -> Result<*mut u8, Errno> {
        if len == 0 || len > (1usize << 47) {
            return Err(Errno::EINVAL);
        }
        let pool = self.pool()?;
        pool.with(&self.path, |c| self.map_on(&pool, c, len, offset, prot))
    }

    fn munmap(&self, addr: *mut u8, len: usize) -> Result<(), Errno> {
        let a = addr as usize;
        let n = len.checked_next_multiple_of(PAGE).ok_or(Errno::EINVAL)?;
        if !a.is_multiple_of(PAGE) || n == 0 {
            return Err(Errno::EINVAL);
        }
        let pool = self.pool()?;
        let parts = carve(&mut lock(&pool.views), a, n).ok_or(Errno::EINVAL)?;
        let mut r = Ok(());
        for (start, len, delta) in parts {
            // SAFETY: (part of) a mapping of the arena made by `mmap` above.
            unsafe { libc::munmap(start as *mut libc::c_void, len) };
            let req = Request::Munmap {
                addr: (start as u64).wrapping_add(delta),
                len: len as u64,
            };
            let got = pool.with(&self.path, |c| c.call(&req));
            match got {
                Err(e) => r = Err(e),
                Ok(v) if v < 0 => r = Err(errno_of(v)),
                Ok(_) => {}
            }
        }
        r
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        let me = std::process::id();
        if me == self.main.pid {
            self.main.unmap_all();
            // A forked child may still hold copies of these sockets: shut them down so the
            // daemon sees this close now (the kernel's flush runs at each close).
            for c in lock(&self.main.idle).iter() {
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
            }
        }
        if let Some(p) = lock(&self.forked).as_ref().filter(|p| p.pid == me) {
            p.unmap_all();
        }
        // Dropping the connections closes them: the daemon sees the end of the owner's and
        // runs the driver's flush/release (in a forked child these are the child's copies of
        // the parent's sockets: closing them ends nothing).
    }
}
