//! The daemon's wire protocol: length-prefixed binary messages over a Unix stream socket.
//!
//! A frame is a little-endian `u32` body length followed by the body: one tag byte and the
//! tag's fields (integers little-endian, byte strings and text as a `u32` length plus bytes).
//! Every length is bounded before anything is allocated ([`MAX_FRAME`], [`MAX_DATA`],
//! [`MAX_TEXT`]); decoding never panics, whatever the bytes (a property test feeds it garbage),
//! and reports a typed [`DecodeError`]. Each connection starts with a [`Request::Hello`] /
//! [`Reply::Hello`] exchange carrying [`VERSION`]; a mismatch ends the connection.
//!
//! Client → daemon messages are [`Request`]s; daemon → client are [`Reply`]s. While an ioctl
//! runs, the daemon may send [`Reply::ReadMem`] callbacks, answered by [`Request::MemData`] or
//! [`Request::MemFault`] (or [`Request::MemDone`] after a [`Reply::WriteMem`]), until the
//! final [`Reply::Done`].

use std::io::{Read, Write};

/// Protocol version exchanged in the hello.
pub const VERSION: u32 = 1;
/// Most bytes one memory message (read answer, write callback, write-back) carries.
pub const MAX_DATA: usize = 64 << 20;
/// Most bytes of one text field (kernel log, instance name).
pub const MAX_TEXT: usize = 16 << 20;
/// Most bytes of one frame body (the largest field plus its message's fixed fields).
pub const MAX_FRAME: usize = MAX_DATA + 64;
/// Most bytes an ioctl request carries of the argument struct it points at (the
/// `_IOC_SIZE` field is 14 bits).
pub const MAX_ARG: usize = 1 << 14;

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("message truncated")]
    Truncated,
    #[error("a length of {len} exceeds the bound {max}")]
    TooLong { len: usize, max: usize },
    #[error("unknown message tag 0x{0:02x}")]
    UnknownTag(u8),
    #[error("unknown control request 0x{0:02x}")]
    UnknownControl(u8),
    #[error("text is not UTF-8")]
    BadUtf8,
    #[error("{0} bytes after the end of the message")]
    Trailing(usize),
    #[error("empty frame")]
    Empty,
}

/// A failure reading or writing a frame.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad message: {0}")]
    Decode(#[from] DecodeError),
    #[error("the peer closed the connection")]
    Closed,
    #[error("protocol version {0}, expected {VERSION}")]
    Version(u32),
    #[error("unexpected message: {0}")]
    Unexpected(&'static str),
}

/// A request on the socket that needs no device file (the control plane). More requests get
/// new tags; a daemon that does not know one answers `ENOSYS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The emulated kernel log (`dmesg`) as text.
    Dmesg,
    /// Stop the daemon (only from the daemon's own uid).
    Shutdown,
    /// The driver's sysfs tree, encoded as `neuron_emulator::sysfs::Tree::encode` writes it:
    /// the whole tree (`path` empty), or enough of it to read `path`.
    Sysfs { path: String },
}

/// Client → daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First message of every connection.
    Hello {
        version: u32,
    },
    /// `open("/dev/neuron<index>")`: this connection becomes the file's owner; its end is the
    /// file's close.
    Open {
        index: u32,
        write_only: bool,
    },
    /// Run further requests of this connection against the file `token` (one more thread of
    /// the same process on the same fd).
    Attach {
        token: u64,
    },
    /// The fd `token` used by a forked child: a new file as `EmuFile::inherit` makes it, owned
    /// by this connection.
    Inherit {
        token: u64,
    },
    /// `ioctl(fd, cmd, arg)`; `pre` holds the bytes at `arg` (up to `_IOC_SIZE`) if readable.
    Ioctl {
        cmd: u32,
        arg: u64,
        pre: Vec<u8>,
    },
    /// `mmap(len, prot, offset)`.
    Mmap {
        len: u64,
        offset: u64,
        prot: i32,
    },
    /// `munmap` of a range, in the daemon's addresses of the views.
    Munmap {
        addr: u64,
        len: u64,
    },
    Control(Control),
    /// Answer to [`Reply::ReadMem`]: the bytes.
    MemData(Vec<u8>),
    /// Answer to [`Reply::WriteMem`]: written.
    MemDone,
    /// Answer to a memory callback: the access failed with this errno (`EFAULT`).
    MemFault {
        errno: i32,
    },
}

/// Daemon → client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Hello {
        version: u32,
        /// Architecture name (`trn2`, `trn1`, `inf2`).
        arch: String,
        devices: u32,
        /// The instance preset the daemon emulates, if any (empty: none).
        instance: String,
    },
    /// The file's token; `arena`: the device arena's memfd rides with this message.
    Opened {
        token: u64,
        arena: bool,
    },
    /// The end of a request: a value ≥ 0, or −errno; `writeback`: bytes to store at an
    /// address first (the ioctl argument the driver wrote), a failure of which is `EFAULT`.
    Done {
        ret: i64,
        writeback: Option<(u64, Vec<u8>)>,
    },
    /// During an ioctl: send `len` bytes from the caller's address `addr`.
    ReadMem {
        addr: u64,
        len: u32,
    },
    /// During an ioctl: store `data` at the caller's address `addr`.
    WriteMem {
        addr: u64,
        data: Vec<u8>,
    },
    /// A mapping: `addr` is the daemon's view, `arena_off` where its bytes lie in the arena
    /// memfd, `prot` the protection granted.
    Mapped {
        addr: u64,
        arena_off: u64,
        len: u64,
        prot: i32,
    },
    Text(String),
}

mod tag {
    pub const HELLO: u8 = 0x01;
    pub const OPEN: u8 = 0x02;
    pub const ATTACH: u8 = 0x03;
    pub const INHERIT: u8 = 0x04;
    pub const IOCTL: u8 = 0x05;
    pub const MMAP: u8 = 0x06;
    pub const MUNMAP: u8 = 0x07;
    pub const CONTROL: u8 = 0x08;
    pub const MEM_DATA: u8 = 0x10;
    pub const MEM_DONE: u8 = 0x11;
    pub const MEM_FAULT: u8 = 0x12;

    pub const R_HELLO: u8 = 0x81;
    pub const R_OPENED: u8 = 0x82;
    pub const R_DONE: u8 = 0x83;
    pub const R_READ: u8 = 0x84;
    pub const R_WRITE: u8 = 0x85;
    pub const R_MAPPED: u8 = 0x86;
    pub const R_TEXT: u8 = 0x87;

    pub const C_DMESG: u8 = 0x01;
    pub const C_SHUTDOWN: u8 = 0x02;
    pub const C_SYSFS: u8 = 0x03;
}

/// Encoder of one frame (the length prefix is filled in by [`Enc::finish`]).
struct Enc(Vec<u8>);

impl Enc {
    fn new(t: u8) -> Enc {
        let mut v = Vec::with_capacity(32);
        v.extend_from_slice(&[0, 0, 0, 0, t]);
        Enc(v)
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(self, b: &[u8]) -> Self {
        let mut s = self.u32(b.len() as u32);
        s.0.extend_from_slice(b);
        s
    }
    fn finish(mut self) -> Vec<u8> {
        let n = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&n.to_le_bytes());
        self.0
    }
}

/// Decoder over one frame body.
struct Dec<'a> {
    b: &'a [u8],
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(self.u32()? as i32)
    }
    fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.u8()? != 0)
    }
    fn bytes(&mut self, max: usize) -> Result<Vec<u8>, DecodeError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(DecodeError::TooLong { len, max });
        }
        Ok(self.take(len)?.to_vec())
    }
    fn text(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes(MAX_TEXT)?).map_err(|_| DecodeError::BadUtf8)
    }
    fn end<T>(self, v: T) -> Result<T, DecodeError> {
        match self.b.len() {
            0 => Ok(v),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

impl Request {
    /// The whole frame (length prefix included).
    pub fn encode(&self) -> Vec<u8> {
        use tag::*;
        match self {
            Request::Hello { version } => Enc::new(HELLO).u32(*version),
            Request::Open { index, write_only } => {
                Enc::new(OPEN).u32(*index).u8(u8::from(*write_only))
            }
            Request::Attach { token } => Enc::new(ATTACH).u64(*token),
            Request::Inherit { token } => Enc::new(INHERIT).u64(*token),
            Request::Ioctl { cmd, arg, pre } => Enc::new(IOCTL).u32(*cmd).u64(*arg).bytes(pre),
            Request::Mmap { len, offset, prot } => {
                Enc::new(MMAP).u64(*len).u64(*offset).u32(*prot as u32)
            }
            Request::Munmap { addr, len } => Enc::new(MUNMAP).u64(*addr).u64(*len),
            Request::Control(Control::Dmesg) => Enc::new(CONTROL).u8(C_DMESG),
            Request::Control(Control::Shutdown) => Enc::new(CONTROL).u8(C_SHUTDOWN),
            Request::Control(Control::Sysfs { path }) => {
                Enc::new(CONTROL).u8(C_SYSFS).bytes(path.as_bytes())
            }
            Request::MemData(d) => Enc::new(MEM_DATA).bytes(d),
            Request::MemDone => Enc::new(MEM_DONE),
            Request::MemFault { errno } => Enc::new(MEM_FAULT).u32(*errno as u32),
        }
        .finish()
    }

    /// Decode a frame body (without the length prefix).
    pub fn decode(body: &[u8]) -> Result<Request, DecodeError> {
        use tag::*;
        let (&t, rest) = body.split_first().ok_or(DecodeError::Empty)?;
        let mut d = Dec { b: rest };
        let r = match t {
            HELLO => Request::Hello { version: d.u32()? },
            OPEN => Request::Open {
                index: d.u32()?,
                write_only: d.bool()?,
            },
            ATTACH => Request::Attach { token: d.u64()? },
            INHERIT => Request::Inherit { token: d.u64()? },
            IOCTL => Request::Ioctl {
                cmd: d.u32()?,
                arg: d.u64()?,
                pre: d.bytes(MAX_ARG)?,
            },
            MMAP => Request::Mmap {
                len: d.u64()?,
                offset: d.u64()?,
                prot: d.i32()?,
            },
            MUNMAP => Request::Munmap {
                addr: d.u64()?,
                len: d.u64()?,
            },
            CONTROL => Request::Control(match d.u8()? {
                C_DMESG => Control::Dmesg,
                C_SHUTDOWN => Control::Shutdown,
                C_SYSFS => Control::Sysfs { path: d.text()? },
                c => return Err(DecodeError::UnknownControl(c)),
            }),
            MEM_DATA => Request::MemData(d.bytes(MAX_DATA)?),
            MEM_DONE => Request::MemDone,
            MEM_FAULT => Request::MemFault { errno: d.i32()? },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end(r)
    }
}

impl Reply {
    /// The whole frame (length prefix included).
    pub fn encode(&self) -> Vec<u8> {
        use tag::*;
        match self {
            Reply::Hello {
                version,
                arch,
                devices,
                instance,
            } => Enc::new(R_HELLO)
                .u32(*version)
                .bytes(arch.as_bytes())
                .u32(*devices)
                .bytes(instance.as_bytes()),
            Reply::Opened { token, arena } => Enc::new(R_OPENED).u64(*token).u8(u8::from(*arena)),
            Reply::Done { ret, writeback } => {
                let e = Enc::new(R_DONE).u64(*ret as u64);
                match writeback {
                    None => e.u8(0),
                    Some((a, d)) => e.u8(1).u64(*a).bytes(d),
                }
            }
            Reply::ReadMem { addr, len } => Enc::new(R_READ).u64(*addr).u32(*len),
            Reply::WriteMem { addr, data } => Enc::new(R_WRITE).u64(*addr).bytes(data),
            Reply::Mapped {
                addr,
                arena_off,
                len,
                prot,
            } => Enc::new(R_MAPPED)
                .u64(*addr)
                .u64(*arena_off)
                .u64(*len)
                .u32(*prot as u32),
            Reply::Text(s) => Enc::new(R_TEXT).bytes(s.as_bytes()),
        }
        .finish()
    }

    /// Decode a frame body (without the length prefix).
    pub fn decode(body: &[u8]) -> Result<Reply, DecodeError> {
        use tag::*;
        let (&t, rest) = body.split_first().ok_or(DecodeError::Empty)?;
        let mut d = Dec { b: rest };
        let r = match t {
            R_HELLO => Reply::Hello {
                version: d.u32()?,
                arch: d.text()?,
                devices: d.u32()?,
                instance: d.text()?,
            },
            R_OPENED => Reply::Opened {
                token: d.u64()?,
                arena: d.bool()?,
            },
            R_DONE => {
                let ret = d.u64()? as i64;
                let writeback = match d.u8()? {
                    0 => None,
                    _ => Some((d.u64()?, d.bytes(MAX_DATA)?)),
                };
                Reply::Done { ret, writeback }
            }
            R_READ => {
                let addr = d.u64()?;
                let len = d.u32()?;
                if len as usize > MAX_DATA {
                    return Err(DecodeError::TooLong {
                        len: len as usize,
                        max: MAX_DATA,
                    });
                }
                Reply::ReadMem { addr, len }
            }
            R_WRITE => Reply::WriteMem {
                addr: d.u64()?,
                data: d.bytes(MAX_DATA)?,
            },
            R_MAPPED => Reply::Mapped {
                addr: d.u64()?,
                arena_off: d.u64()?,
                len: d.u64()?,
                prot: d.i32()?,
            },
            R_TEXT => Reply::Text(d.text()?),
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end(r)
    }
}

/// The body length a frame header announces, checked against [`MAX_FRAME`].
pub fn frame_len(header: [u8; 4]) -> Result<usize, DecodeError> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(DecodeError::TooLong {
            len,
            max: MAX_FRAME,
        });
    }
    if len == 0 {
        return Err(DecodeError::Empty);
    }
    Ok(len)
}

/// Read one frame body from `r` (the length checked before the buffer is allocated).
pub fn read_frame(r: &mut impl Read) -> Result<Vec<u8>, ProtoError> {
    let mut h = [0u8; 4];
    match r.read_exact(&mut h) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(ProtoError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = frame_len(h)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(body)
}

/// Write one encoded frame.
pub fn write_frame(w: &mut impl Write, frame: &[u8]) -> Result<(), ProtoError> {
    w.write_all(frame)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::Hello { version: VERSION },
            Request::Open {
                index: 3,
                write_only: true,
            },
            Request::Attach { token: 7 },
            Request::Inherit { token: u64::MAX },
            Request::Ioctl {
                cmd: 0x4008_4e64,
                arg: 0x7fff_0000,
                pre: vec![1, 2, 3],
            },
            Request::Mmap {
                len: 8192,
                offset: 0x2002700000,
                prot: 3,
            },
            Request::Munmap {
                addr: 0x1000,
                len: 4096,
            },
            Request::Control(Control::Dmesg),
            Request::Control(Control::Shutdown),
            Request::Control(Control::Sysfs {
                path: "/sys/module/neuron/version".into(),
            }),
            Request::MemData(vec![9; 100]),
            Request::MemDone,
            Request::MemFault { errno: 14 },
        ]
    }

    fn replies() -> Vec<Reply> {
        vec![
            Reply::Hello {
                version: VERSION,
                arch: "trn2".into(),
                devices: 2,
                instance: String::new(),
            },
            Reply::Opened {
                token: 1,
                arena: true,
            },
            Reply::Done {
                ret: -22,
                writeback: None,
            },
            Reply::Done {
                ret: 0,
                writeback: Some((0x10, vec![1, 2])),
            },
            Reply::ReadMem {
                addr: 0x1234,
                len: 16,
            },
            Reply::WriteMem {
                addr: 0x1234,
                data: vec![5; 8],
            },
            Reply::Mapped {
                addr: 1,
                arena_off: 2,
                len: 3,
                prot: 1,
            },
            Reply::Text("[    0.000000] hello\n".into()),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for r in requests() {
            let f = r.encode();
            assert_eq!(frame_len([f[0], f[1], f[2], f[3]]), Ok(f.len() - 4));
            assert_eq!(Request::decode(&f[4..]), Ok(r));
        }
        for r in replies() {
            let f = r.encode();
            assert_eq!(Reply::decode(&f[4..]), Ok(r.clone()));
            let mut rd = &f[..];
            let body = read_frame(&mut rd).expect("frame");
            assert_eq!(Reply::decode(&body), Ok(r));
        }
    }

    #[test]
    fn lengths_are_bounded_before_allocation() {
        let big = (MAX_FRAME as u32 + 1).to_le_bytes();
        assert!(matches!(frame_len(big), Err(DecodeError::TooLong { .. })));
        let mut rd = &[0xff, 0xff, 0xff, 0xff, 1][..];
        assert!(matches!(
            read_frame(&mut rd),
            Err(ProtoError::Decode(DecodeError::TooLong { .. }))
        ));
        // A data field claiming more than MAX_DATA.
        let mut b = vec![tag::MEM_DATA];
        b.extend_from_slice(&(MAX_DATA as u32 + 1).to_le_bytes());
        assert!(matches!(
            Request::decode(&b),
            Err(DecodeError::TooLong { .. })
        ));
        // An ioctl argument prefix above _IOC_SIZE's range.
        let r = Request::Ioctl {
            cmd: 0,
            arg: 0,
            pre: vec![0; MAX_ARG + 1],
        };
        assert!(matches!(
            Request::decode(&r.encode()[4..]),
            Err(DecodeError::TooLong { .. })
        ));
        let r = Reply::ReadMem {
            addr: 0,
            len: MAX_DATA as u32 + 1,
        };
        assert!(matches!(
            Reply::decode(&r.encode()[4..]),
            Err(DecodeError::TooLong { .. })
        ));
    }

    #[test]
    fn garbage_is_a_typed_error() {
        assert_eq!(Request::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(Request::decode(&[0x7f]), Err(DecodeError::UnknownTag(0x7f)));
        assert_eq!(
            Request::decode(&[tag::CONTROL, 0x99]),
            Err(DecodeError::UnknownControl(0x99))
        );
        assert_eq!(
            Request::decode(&[tag::ATTACH, 1]),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            Request::decode(&[tag::MEM_DONE, 0]),
            Err(DecodeError::Trailing(1))
        );
        let mut b = vec![tag::R_TEXT, 2, 0, 0, 0, 0xff, 0xfe];
        assert_eq!(Reply::decode(&b), Err(DecodeError::BadUtf8));
        b.truncate(6);
        assert_eq!(Reply::decode(&b), Err(DecodeError::Truncated));
        let mut rd = &[3, 0, 0, 0, 1][..];
        assert!(read_frame(&mut rd).is_err(), "short body");
        let mut rd = &[][..];
        assert!(matches!(read_frame(&mut rd), Err(ProtoError::Closed)));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_decoder(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Request::decode(&b);
            let _ = Reply::decode(&b);
            let mut rd = &b[..];
            let _ = read_frame(&mut rd);
        }

        #[test]
        fn mutated_frames_never_panic(i in 0usize..12, pos in 0usize..64, v in any::<u8>()) {
            let mut f = requests()[i].encode();
            let n = f.len();
            f[pos % n] = v;
            let _ = Request::decode(&f[4..]);
            let mut g = replies()[i % 8].encode();
            let n = g.len();
            g[pos % n] = v;
            let _ = Reply::decode(&g[4..]);
        }
    }
}
