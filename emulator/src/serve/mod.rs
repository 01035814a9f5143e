//! The daemon side of `neuron-emu serve`: one [`Emulator`] served to many processes over a
//! Unix socket (`neuron_emu_remote::proto`), so they share devices, memory, core reservations
//! and the driver's per-process rules as with the real `neuron.ko`.
//!
//! One thread per connection. The caller's identity is the connection's `SO_PEERCRED` pid,
//! never a pid the client claims. An `Open` makes the connection a file's owner: the file
//! (an [`EmuFile`]) lives exactly as long as that connection, so a close, an exit or a
//! `kill -9` of the client runs the driver's flush/release as in-process. `Attach` runs more
//! connections of the same process against the file (threads blocked in an ioctl do not stall
//! others); `Inherit` gives a forked child of the opener its inherited file
//! ([`EmuFile::inherit`]). Memory the driver reads or writes goes through callbacks to the
//! caller (`usermem`). Mappings are made here with the in-process bookkeeping unchanged and
//! handed to the caller as (arena memfd, offset, protection).

mod machine;
mod usermem;

pub use machine::Machine;

use crate::{EmuFile, Emulator, OpenOptions};
use neuron_abi::Errno;
use neuron_emu_remote::fdpass;
use neuron_emu_remote::proto::{read_frame, Control, ProtoError, Reply, Request, VERSION};
use neuron_emu_remote::ranges::carve;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Most connections served at once (each is a thread).
pub const MAX_CONNECTIONS: usize = 1024;

/// Why the daemon could not start on a socket path.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("a daemon already answers on {0}")]
    Live(PathBuf),
    #[error("{path} exists and is not a socket; not replacing it")]
    NotSocket { path: PathBuf },
    #[error("cannot listen on {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
}

/// One served file: the driver's file, and the views of it the daemon mapped for its caller
/// (start -> ((), length)), unmapped when the owner's connection ends.
#[derive(Debug)]
struct Served {
    file: EmuFile,
    views: Mutex<BTreeMap<usize, ((), usize)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Served {
    fn drop(&mut self) {
        // The caller's side of these views is gone with its connection (or unmapped by the
        // client at close): drop the daemon's so chunk references are released before the
        // file's flush/release runs.
        let views = std::mem::take(&mut *lock(&self.views));
        for (va, ((), len)) in views {
            use neuron_abi::DeviceFile;
            let _ = self.file.munmap(va as *mut u8, len);
        }
    }
}

#[derive(Debug)]
struct Shared {
    emu: Arc<Emulator>,
    path: PathBuf,
    instance: String,
    uid: u32,
    stop: AtomicBool,
    files: Mutex<HashMap<u64, Weak<Served>>>,
    next: AtomicU64,
    /// A per-daemon secret mixed into tokens, so a token is not guessable from another.
    salt: u64,
    conns: AtomicUsize,
}

impl Shared {
    fn token(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n ^ self.salt);
        // Never 0 and unique: the counter in the low bits.
        (h.finish() << 20) | (n & 0xf_ffff) | 1 << 63
    }
}

/// A listening daemon.
#[derive(Debug)]
pub struct Server {
    sh: Arc<Shared>,
    listener: UnixListener,
}

/// The peer of a connection: (pid, uid).
// getsockopt(SO_PEERCRED) is one libc call.
#[allow(unsafe_code)]
fn peer(sock: &UnixStream) -> Option<(u32, u32)> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `c`, a live ucred.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && c.pid > 0).then_some((c.pid as u32, c.uid))
}

/// The parent pid of `pid` (from `/proc`), if known.
fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `child` descends from `ancestor` (a fork may have happened generations ago).
fn descends(child: u32, ancestor: u32) -> bool {
    let mut p = child;
    for _ in 0..64 {
        match parent_of(p) {
            Some(q) if q == ancestor => return true,
            Some(q) if q > 1 => p = q,
            _ => return false,
        }
    }
    false
}

impl Server {
    /// Listen on `path` for `emu`. A live daemon there is refused ([`BindError::Live`]); a
    /// stale socket file is replaced; a missing parent directory is created (mode 0700).
    /// `instance`: the preset name the hello reports (empty: none).
    pub fn bind(emu: Emulator, path: &Path, instance: &str) -> Result<Server, BindError> {
        let ioerr = |err| BindError::Io {
            path: path.to_path_buf(),
            err,
        };
        if let Ok(md) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !md.file_type().is_socket() {
                return Err(BindError::NotSocket {
                    path: path.to_path_buf(),
                });
            }
            if UnixStream::connect(path).is_ok() {
                return Err(BindError::Live(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(ioerr)?;
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(ioerr)?;
            }
        }
        let listener = UnixListener::bind(path).map_err(ioerr)?;
        let salt = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish()
        };
        Ok(Server {
            sh: Arc::new(Shared {
                emu: Arc::new(emu),
                path: path.to_path_buf(),
                instance: instance.to_string(),
                uid: neuron_emu_remote::socket::uid(),
                stop: AtomicBool::new(false),
                files: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
                salt,
                conns: AtomicUsize::new(0),
            }),
            listener,
        })
    }

    pub fn path(&self) -> &Path {
        &self.sh.path
    }

    /// The machine served (its control plane: reports, kernel log).
    pub fn emulator(&self) -> &Arc<Emulator> {
        &self.sh.emu
    }

    /// A handle that stops [`Server::run`] from another thread (or a signal's watcher).
    pub fn stopper(&self) -> Stopper {
        Stopper(self.sh.clone())
    }

    /// Accept and serve connections until stopped (a `Shutdown` request or [`Stopper::stop`]).
    pub fn run(&self) -> std::io::Result<()> {
        for s in self.listener.incoming() {
            if self.sh.stop.load(Ordering::Acquire) {
                break;
            }
            let Ok(s) = s else { continue };
            if self.sh.conns.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                self.sh.conns.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let sh = self.sh.clone();
            let spawned = std::thread::Builder::new()
                .name("neuron-emu-conn".into())
                .spawn(move || {
                    serve_conn(&sh, s);
                    sh.conns.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                self.sh.conns.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.sh.path);
    }
}

/// Stops a running [`Server`].
#[derive(Debug, Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    pub fn stop(&self) {
        request_stop(&self.0);
    }
}

fn request_stop(sh: &Shared) {
    sh.stop.store(true, Ordering::Release);
    // Wake the accept loop.
    let _ = UnixStream::connect(&sh.path);
}

/// What a connection is to the files.
enum Role {
    None,
    Owner(Arc<Served>),
    Attached(Weak<Served>),
}

impl Role {
    fn file(&self) -> Option<Arc<Served>> {
        match self {
            Role::None => None,
            Role::Owner(f) => Some(f.clone()),
            Role::Attached(w) => w.upgrade(),
        }
    }
}

fn done(ret: Result<i64, Errno>) -> Reply {
    Reply::Done {
        ret: ret.unwrap_or_else(|e| -i64::from(e.0)),
        writeback: None,
    }
}

fn serve_conn(sh: &Shared, sock: UnixStream) {
    let Some((pid, uid)) = peer(&sock) else {
        return;
    };
    let mut reader = BufReader::new(&sock);
    // The hello: a version mismatch ends the connection after saying ours.
    let hello = read_frame(&mut reader).and_then(|b| Ok(Request::decode(&b)?));
    let ok = matches!(hello, Ok(Request::Hello { version }) if version == VERSION);
    let arch = sh.emu.arch().map_or("trn2", |a| a.name());
    let r = Reply::Hello {
        version: VERSION,
        arch: arch.to_string(),
        devices: sh.emu.device_count() as u32,
        instance: sh.instance.clone(),
    };
    if (&sock).write_all(&r.encode()).is_err() || !ok {
        return;
    }
    let mut role = Role::None;
    loop {
        let body = match read_frame(&mut reader) {
            Ok(b) => b,
            Err(ProtoError::Closed) => break,
            Err(e) => {
                tracing::debug!(target: "KDRV", "daemon: pid {pid}: {e}");
                break;
            }
        };
        let req = match Request::decode(&body) {
            Ok(r) => r,
            Err(e) => {
                // Bad bytes end the connection (and with an owner, its file).
                tracing::debug!(target: "KDRV", "daemon: pid {pid}: {e}");
                let _ = (&sock).write_all(&done(Err(Errno::EINVAL)).encode());
                break;
            }
        };
        let reply = match req {
            Request::Open { index, write_only } if matches!(role, Role::None) => {
                let opts = OpenOptions { pid, write_only };
                match sh.emu.open(index as usize, opts) {
                    Ok(f) => {
                        let served = Arc::new(Served {
                            file: f.without_store_traps(),
                            views: Mutex::new(BTreeMap::new()),
                        });
                        let r = send_opened(sh, &sock, &served);
                        role = Role::Owner(served);
                        if r.is_err() {
                            break;
                        }
                        continue;
                    }
                    Err(e) => done(Err(e)),
                }
            }
            Request::Attach { token } if matches!(role, Role::None) => {
                let f = lock(&sh.files).get(&token).and_then(Weak::upgrade);
                // Only the opener's own threads attach (another process has no such fd).
                match f.filter(|f| f.file.pid() == pid) {
                    Some(f) => {
                        if send_token(&sock, &f, token).is_err() {
                            break;
                        }
                        role = Role::Attached(Arc::downgrade(&f));
                        continue;
                    }
                    None => done(Err(Errno::EBADF)),
                }
            }
            Request::Inherit { token } if matches!(role, Role::None) => {
                let f = lock(&sh.files).get(&token).and_then(Weak::upgrade);
                // A forked child (of any generation) of the opener inherits its fds.
                match f.filter(|f| f.file.pid() != pid && descends(pid, f.file.pid())) {
                    Some(f) => {
                        let served = Arc::new(Served {
                            file: f.file.inherit(pid),
                            views: Mutex::new(BTreeMap::new()),
                        });
                        drop(f);
                        let r = send_opened(sh, &sock, &served);
                        role = Role::Owner(served);
                        if r.is_err() {
                            break;
                        }
                        continue;
                    }
                    None => done(Err(Errno::EBADF)),
                }
            }
            Request::Ioctl { cmd, arg, pre } => match role.file() {
                Some(f) => {
                    let mem = usermem::RemoteMem::new(&sock, &mut reader, arg, pre);
                    let r = f.file.ioctl_with(cmd, arg, &mem);
                    mem.finish();
                    if mem.broken.get() {
                        break;
                    }
                    Reply::Done {
                        ret: r.map_or_else(|e| -i64::from(e.0), i64::from),
                        writeback: mem.writeback(),
                    }
                }
                None => done(Err(Errno::EBADF)),
            },
            Request::Mmap { len, offset, prot } => match role.file() {
                Some(f) => mmap(&f, len, offset, prot),
                None => done(Err(Errno::EBADF)),
            },
            Request::Munmap { addr, len } => match role.file() {
                Some(f) => done(munmap(&f, addr, len).map(|()| 0)),
                None => done(Err(Errno::EBADF)),
            },
            Request::Control(Control::Dmesg) => {
                let text: String = sh
                    .emu
                    .kernel_log()
                    .iter()
                    .map(|l| l.dmesg() + "\n")
                    .collect();
                Reply::Text(text)
            }
            Request::Control(Control::Sysfs { path }) => {
                let tree = if path.is_empty() {
                    crate::sysfs::Tree::render(&sh.emu)
                } else {
                    crate::sysfs::Tree::render_for(&sh.emu, &path)
                };
                Reply::Text(tree.encode())
            }
            Request::Control(Control::Shutdown) => {
                if uid == sh.uid {
                    let _ = (&sock).write_all(&done(Ok(0)).encode());
                    request_stop(sh);
                    break;
                }
                done(Err(Errno::EPERM))
            }
            // A second open on one connection, or a memory answer outside an ioctl.
            _ => done(Err(Errno::EINVAL)),
        };
        if (&sock).write_all(&reply.encode()).is_err() {
            break;
        }
    }
    if let Role::Owner(f) = role {
        lock(&sh.files).retain(|_, w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), &*f));
        // Dropping the last reference unmaps the daemon's views and runs flush/release; a
        // connection attached to it may hold it for the rest of one ioctl.
        drop(f);
    }
}

/// Register a new file and tell its owner the token (with the arena memfd).
fn send_opened(sh: &Shared, sock: &UnixStream, f: &Arc<Served>) -> Result<(), ()> {
    let token = sh.token();
    lock(&sh.files).insert(token, Arc::downgrade(f));
    send_token(sock, f, token)
}

fn send_token(sock: &UnixStream, f: &Served, token: u64) -> Result<(), ()> {
    let fd = if f.file.is_misc() {
        None
    } else {
        f.file.arena_fd()
    };
    let r = Reply::Opened {
        token,
        arena: fd.is_some(),
    };
    fdpass::send(sock, &r.encode(), fd).map_err(|_| ())
}

fn mmap(f: &Served, len: u64, offset: u64, prot: i32) -> Reply {
    use neuron_abi::DeviceFile;
    let Ok(len) = usize::try_from(len) else {
        return done(Err(Errno::EINVAL));
    };
    let p = match f.file.mmap(len, offset, prot) {
        Ok(p) => p,
        Err(e) => return done(Err(e)),
    };
    let Some((arena_off, prot)) = f.file.mapping_source(p) else {
        let _ = f.file.munmap(p, len);
        return done(Err(Errno::ENODEV));
    };
    let n = len.next_multiple_of(4096);
    lock(&f.views).insert(p as usize, ((), n));
    Reply::Mapped {
        addr: p as u64,
        arena_off,
        len: n as u64,
        prot,
    }
}

/// Unmap a range of this file's own views (never another file's).
fn munmap(f: &Served, addr: u64, len: u64) -> Result<(), Errno> {
    use neuron_abi::DeviceFile;
    let a = usize::try_from(addr).map_err(|_| Errno::EINVAL)?;
    let n = usize::try_from(len).map_err(|_| Errno::EINVAL)?;
    let parts = carve(&mut lock(&f.views), a, n).ok_or(Errno::EINVAL)?;
    for (start, n, ()) in parts {
        f.file.munmap(start as *mut u8, n)?;
    }
    Ok(())
}
