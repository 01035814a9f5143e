//! Pod (ultraserver) ioctls: POD_INFO, POD_STATUS / _V2, POD_CTRL / _V2. A standard instance has
//! no pod, so every answer describes a single node (`driver-abi.md` §2.3).

use super::{Ctx, R};
use neuron_abi::consts::{POD_INFO_SZ, POD_STATE_SINGLE_NODE};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use std::mem::size_of;
use zerocopy::{FromZeros, IntoBytes};

#[derive(Debug)]
pub(crate) enum Req {
    Info,
    /// POD_STATUS (`size` 268) or POD_STATUS_V2 (276): the caller's struct length.
    Status {
        size: usize,
    },
    /// POD_CTRL (16) or POD_CTRL_V2 (20), widened to the V2 struct.
    Ctrl {
        size: usize,
        v: PodCtrlV2,
    },
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        Some(match cmd {
            NEURON_IOCTL_POD_INFO => cx
                .arg::<cmd::POD_INFO>()
                .and_then(|a| check_sz(a.sz, POD_INFO_SZ as usize))
                .map(|_| Req::Info),
            NEURON_IOCTL_POD_STATUS => cx
                .arg::<cmd::POD_STATUS>()
                .and_then(|a| check_sz(a.sz, size_of::<PodStatus>()))
                .map(|_| Req::Status {
                    size: size_of::<PodStatus>(),
                }),
            NEURON_IOCTL_POD_STATUS_V2 => cx
                .arg::<cmd::POD_STATUS_V2>()
                .and_then(|a| check_sz(a.v1.sz, size_of::<PodStatusV2>()))
                .map(|_| Req::Status {
                    size: size_of::<PodStatusV2>(),
                }),
            NEURON_IOCTL_POD_CTRL => cx.arg::<cmd::POD_CTRL>().and_then(|v1| {
                check_sz(v1.sz, size_of::<PodCtrl>())?;
                Ok(Req::Ctrl {
                    size: size_of::<PodCtrl>(),
                    v: PodCtrlV2 { v1, mode: 0 },
                })
            }),
            NEURON_IOCTL_POD_CTRL_V2 => cx.arg::<cmd::POD_CTRL_V2>().and_then(|v| {
                check_sz(v.v1.sz, size_of::<PodCtrlV2>())?;
                Ok(Req::Ctrl {
                    size: size_of::<PodCtrlV2>(),
                    v,
                })
            }),
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Info => {
                let mut v = PodInfo::new_zeroed();
                v.sz = POD_INFO_SZ;
                cx.reply(&v)
            }
            Req::Status { size } => {
                let mut v = PodStatusV2::new_zeroed();
                v.v1.sz = size as u16;
                v.v1.state = POD_STATE_SINGLE_NODE;
                v.v1.node_id = -1;
                cx.copy_out(cx.arg, &v.as_bytes()[..size]).map(|_| 0)
            }
            Req::Ctrl { size, mut v } => {
                // A standard instance has no pod: every request leaves it a single node.
                v.v1.state = POD_STATE_SINGLE_NODE;
                cx.copy_out(cx.arg, &v.as_bytes()[..size]).map(|_| 0)
            }
        }
    }
}

/// The versioned pod structs open with their own size: it must be the command's.
fn check_sz(sz: u16, want: usize) -> Result<(), Errno> {
    if sz as usize == want {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::Bench;
    use super::*;

    #[test]
    fn status_versions_report_a_single_node_in_their_own_size() {
        let b = Bench::v3();
        for (cmd, size) in [
            (NEURON_IOCTL_POD_STATUS, 268),
            (NEURON_IOCTL_POD_STATUS_V2, 276),
        ] {
            let mut buf = vec![0u8; size];
            buf[..2].copy_from_slice(&(size as u16).to_le_bytes());
            let a = b.mem.put_bytes(&buf);
            assert_eq!(b.raw(cmd, a), Ok(0));
            let v: PodStatus = b.mem.get(a);
            assert_eq!((v.sz as usize, v.state, v.node_id), (size, 4, -1));
            // The wrong size is refused.
            buf[..2].copy_from_slice(&7u16.to_le_bytes());
            assert_eq!(b.raw(cmd, b.mem.put_bytes(&buf)), Err(Errno::EINVAL));
        }
        // A V1-sized buffer for the V2 command faults (the driver copies 276 bytes).
        let mut buf = vec![0u8; 268];
        buf[..2].copy_from_slice(&276u16.to_le_bytes());
        assert_eq!(
            b.raw(NEURON_IOCTL_POD_STATUS_V2, b.mem.put_bytes(&buf)),
            Err(Errno::EFAULT)
        );
    }

    #[test]
    fn ctrl_and_info() {
        let b = Bench::v3();
        let c = PodCtrl {
            sz: 16,
            ..Default::default()
        };
        let (r, v) = b.io(NEURON_IOCTL_POD_CTRL, &c);
        assert_eq!(r, Ok(0));
        assert_eq!(v.state, POD_STATE_SINGLE_NODE);
        let c2 = PodCtrlV2 { v1: c, mode: 3 };
        assert_eq!(b.run(NEURON_IOCTL_POD_CTRL_V2, &c2), Err(Errno::EINVAL));
        let mut i = PodInfo::new_zeroed();
        i.sz = 260;
        assert_eq!(b.run(NEURON_IOCTL_POD_INFO, &i), Ok(0));
        i.sz = 1;
        assert_eq!(b.run(NEURON_IOCTL_POD_INFO, &i), Err(Errno::EINVAL));
    }
}
