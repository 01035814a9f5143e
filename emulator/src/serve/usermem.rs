//! A remote caller's address space for the driver ([`UserMemory`]): reads and writes become
//! `ReadMem` / `WriteMem` callbacks on the caller's connection, which the client answers with
//! `process_vm_readv` / `process_vm_writev` on itself (a bad pointer is `EFAULT` there).
//!
//! The argument struct the ioctl points at usually comes with the request (`pre`): reads
//! inside it are served here, writes inside it are kept and sent back with the final `Done`
//! (one round trip for most commands). An access that overlaps it but is not inside it first
//! flushes what was written and drops the copy, so the order of accesses is kept.

use crate::uaccess::UserMemory;
use neuron_abi::Errno;
use neuron_emu_remote::proto::{read_frame, Reply, Request, MAX_DATA};
use std::cell::{Cell, RefCell};
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Longest the daemon waits for one answer to a memory callback: a client that stops
/// answering loses its ioctl (`EFAULT`) and its connection, it does not hold the device.
const ANSWER_WAIT: Duration = Duration::from_secs(10);

/// The ioctl argument as the client sent it, and the range the driver wrote into it.
#[derive(Debug)]
struct ArgCopy {
    addr: u64,
    bytes: Vec<u8>,
    dirty: Option<(usize, usize)>,
}

/// One ioctl's view of the caller's memory.
#[derive(Debug)]
pub(crate) struct RemoteMem<'a, 'b> {
    sock: &'a UnixStream,
    reader: RefCell<&'a mut BufReader<&'b UnixStream>>,
    arg: RefCell<Option<ArgCopy>>,
    /// The connection failed mid-ioctl: every further access is EFAULT and the connection ends.
    pub(crate) broken: Cell<bool>,
    timed: Cell<bool>,
}

impl<'a, 'b> RemoteMem<'a, 'b> {
    pub(crate) fn new(
        sock: &'a UnixStream,
        reader: &'a mut BufReader<&'b UnixStream>,
        addr: u64,
        pre: Vec<u8>,
    ) -> RemoteMem<'a, 'b> {
        let arg = (!pre.is_empty()).then_some(ArgCopy {
            addr,
            bytes: pre,
            dirty: None,
        });
        RemoteMem {
            sock,
            reader: RefCell::new(reader),
            arg: RefCell::new(arg),
            broken: Cell::new(false),
            timed: Cell::new(false),
        }
    }

    /// What the driver wrote into the argument copy, to send back with `Done`.
    pub(crate) fn writeback(&self) -> Option<(u64, Vec<u8>)> {
        let a = self.arg.borrow_mut().take()?;
        let (lo, hi) = a.dirty?;
        Some((a.addr + lo as u64, a.bytes.get(lo..hi)?.to_vec()))
    }

    /// Restore the connection's blocking reads (no timeout) after a callback set one.
    pub(crate) fn finish(&self) {
        if self.timed.get() {
            let _ = self.sock.set_read_timeout(None);
        }
    }

    /// `[addr, addr + len)` relative to the argument copy: Some(offset) if inside it.
    fn inside(&self, addr: u64, len: usize) -> Option<usize> {
        let a = self.arg.borrow();
        let a = a.as_ref()?;
        let off = usize::try_from(addr.checked_sub(a.addr)?).ok()?;
        (off.checked_add(len)? <= a.bytes.len()).then_some(off)
    }

    /// Before an access outside the copy that overlaps it: write back and forget the copy.
    fn settle_overlap(&self, addr: u64, len: usize) -> Result<(), Errno> {
        let overlaps = self.arg.borrow().as_ref().is_some_and(|a| {
            let end = addr.saturating_add(len as u64);
            addr < a.addr + a.bytes.len() as u64 && a.addr < end
        });
        if overlaps {
            if let Some((at, data)) = self.writeback() {
                self.callback_write(at, &data)?;
            }
            *self.arg.borrow_mut() = None;
        }
        Ok(())
    }

    fn exchange(&self, r: &Reply) -> Result<Request, Errno> {
        let fail = |_| {
            self.broken.set(true);
            Errno::EFAULT
        };
        if self.broken.get() {
            return Err(Errno::EFAULT);
        }
        if !self.timed.replace(true) {
            let _ = self.sock.set_read_timeout(Some(ANSWER_WAIT));
        }
        let mut w = self.sock;
        w.write_all(&r.encode()).map_err(|e| fail(e.to_string()))?;
        let body = read_frame(&mut **self.reader.borrow_mut()).map_err(|e| fail(e.to_string()))?;
        Request::decode(&body).map_err(|e| fail(e.to_string()))
    }

    fn callback_read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        for (k, piece) in buf.chunks_mut(MAX_DATA).enumerate() {
            let at = addr
                .checked_add((k * MAX_DATA) as u64)
                .ok_or(Errno::EFAULT)?;
            let r = self.exchange(&Reply::ReadMem {
                addr: at,
                len: piece.len() as u32,
            })?;
            match r {
                Request::MemData(d) if d.len() == piece.len() => piece.copy_from_slice(&d),
                Request::MemFault { .. } => return Err(Errno::EFAULT),
                _ => {
                    self.broken.set(true);
                    return Err(Errno::EFAULT);
                }
            }
        }
        Ok(())
    }

    fn callback_write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        for (k, piece) in data.chunks(MAX_DATA).enumerate() {
            let at = addr
                .checked_add((k * MAX_DATA) as u64)
                .ok_or(Errno::EFAULT)?;
            let r = self.exchange(&Reply::WriteMem {
                addr: at,
                data: piece.to_vec(),
            })?;
            match r {
                Request::MemDone => {}
                Request::MemFault { .. } => return Err(Errno::EFAULT),
                _ => {
                    self.broken.set(true);
                    return Err(Errno::EFAULT);
                }
            }
        }
        Ok(())
    }
}

impl UserMemory for RemoteMem<'_, '_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        if buf.is_empty() {
            return Ok(());
        }
        if addr == 0 {
            return Err(Errno::EFAULT);
        }
        if let Some(off) = self.inside(addr, buf.len()) {
            if let Some(a) = self.arg.borrow().as_ref() {
                buf.copy_from_slice(&a.bytes[off..off + buf.len()]);
                return Ok(());
            }
        }
        self.settle_overlap(addr, buf.len())?;
        self.callback_read(addr, buf)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        if data.is_empty() {
            return Ok(());
        }
        if addr == 0 {
            return Err(Errno::EFAULT);
        }
        if let Some(off) = self.inside(addr, data.len()) {
            if let Some(a) = self.arg.borrow_mut().as_mut() {
                let end = off + data.len();
                a.bytes[off..end].copy_from_slice(data);
                a.dirty = Some(match a.dirty {
                    None => (off, end),
                    Some((lo, hi)) => (lo.min(off), hi.max(end)),
                });
                return Ok(());
            }
        }
        self.settle_overlap(addr, data.len())?;
        self.callback_write(addr, data)
    }
}
