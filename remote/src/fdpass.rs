//! `SCM_RIGHTS` over a Unix stream: the daemon hands each connection the device arena's memfd
//! once, so the client maps the same bytes the device model reads and writes.
// sendmsg/recvmsg with control messages are raw libc calls; every block has a SAFETY comment.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Room for one control message carrying up to four fds.
const CMSG_ROOM: usize = 64;

/// Send all of `data`, the fd `fd` (if any) riding with its first byte.
pub fn send(sock: &impl AsRawFd, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut off = 0;
    let mut fd = fd;
    while off < data.len() {
        let mut iov = libc::iovec {
            iov_base: data[off..].as_ptr() as *mut libc::c_void,
            iov_len: data.len() - off,
        };
        let mut cbuf = [0u64; CMSG_ROOM / 8];
        // SAFETY: msghdr is plain data; zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(f) = fd {
            let space = unsafe_cmsg_space(std::mem::size_of::<RawFd>());
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = space;
            // SAFETY: msg_control points at `cbuf`, large enough for one header plus one fd
            // (CMSG_SPACE(4) <= CMSG_ROOM); CMSG_FIRSTHDR/CMSG_DATA stay inside it.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), f);
            }
        }
        // SAFETY: `msg` describes live buffers (iov over `data`, control over `cbuf`).
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        fd = None;
        off += n as usize;
    }
    Ok(())
}

fn unsafe_cmsg_space(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    unsafe { libc::CMSG_SPACE(n as u32) as usize }
}

/// Fill all of `buf`, collecting any fds that arrive with the bytes into `fds` (bounded: at
/// most 16 kept, the rest closed). End of stream before `buf` is full is `UnexpectedEof`.
pub fn recv_exact(sock: &impl AsRawFd, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        let mut iov = libc::iovec {
            iov_base: buf[off..].as_mut_ptr().cast(),
            iov_len: buf.len() - off,
        };
        let mut cbuf = [0u64; CMSG_ROOM / 8];
        // SAFETY: msghdr is plain data; zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_ROOM;
        // SAFETY: `msg` describes live, writable buffers; MSG_CMSG_CLOEXEC marks received fds
        // close-on-exec.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: walking the control messages the kernel wrote into `cbuf`, as the CMSG
        // macros define; each SCM_RIGHTS payload is an array of fds now owned by us.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c);
                    let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for k in 0..bytes / std::mem::size_of::<RawFd>() {
                        let f = std::ptr::read_unaligned(data.cast::<RawFd>().add(k));
                        let owned = OwnedFd::from_raw_fd(f);
                        if fds.len() < 16 {
                            fds.push(owned);
                        }
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        off += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn an_fd_rides_with_the_bytes() {
        let (a, b) = UnixStream::pair().expect("pair");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(std::env::temp_dir().join(format!("fdpass-{}", std::process::id())))
            .expect("tmp");
        f.write_all(b"shared").expect("write");
        send(&a, b"hello", Some(f.as_raw_fd())).expect("send");
        send(&a, b"!", None).expect("send");
        let mut buf = [0u8; 6];
        let mut fds = Vec::new();
        recv_exact(&b, &mut buf, &mut fds).expect("recv");
        assert_eq!(&buf, b"hello!");
        assert_eq!(fds.len(), 1);
        let mut g = std::fs::File::from(fds.pop().expect("fd"));
        g.rewind().expect("seek");
        let mut s = String::new();
        g.read_to_string(&mut s).expect("read");
        assert_eq!(s, "shared");
        drop(a);
        let mut one = [0u8; 1];
        let e = recv_exact(&b, &mut one, &mut fds).expect_err("eof");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let _ = std::fs::remove_file(
            std::env::temp_dir().join(format!("fdpass-{}", std::process::id())),
        );
    }
}
