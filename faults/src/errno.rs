//! Errno names a plan may use, and the real driver's fault-injection points
//! (`driver-abi.md` §7.4: debugfs `neuron/fail_*` under CONFIG_FAULT_INJECTION), each with the
//! calls it fails and the errno it makes them return.

/// Pseudo command value standing for `mmap` of the device node in an ioctl-fail site (no
/// Neuron ioctl has the value 0: their type byte is `'N'`).
pub const MMAP: u32 = 0;

/// One driver fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultPoint {
    pub name: &'static str,
    /// Command names (without `NEURON_IOCTL_`) it fails; `"mmap"` is [`MMAP`].
    pub calls: &'static [&'static str],
    pub errno: i32,
}

const ENOMEM: i32 = 12;
const ENOSPC: i32 = 28;
const ETIMEDOUT: i32 = 110;

/// The points of the 2.26 driver, with the calls each guards (the allocation, the DMA waits of
/// the copy paths, the firmware I/O reads and metric posts, the core's mmap).
pub const FAULT_POINTS: &[FaultPoint] = &[
    FaultPoint {
        name: "fail_mc_alloc",
        calls: &[
            "MEM_ALLOC",
            "MEM_ALLOC_V2",
            "MEM_ALLOC_V2MT",
            "MEM_ALLOC_V2MT64",
            "MEM_ALLOC_V2MT64_PA",
        ],
        errno: ENOMEM,
    },
    FaultPoint {
        name: "fail_dma_wait",
        calls: &[
            "MEM_BUF_COPY",
            "MEM_BUF_COPY64",
            "MEM_BUF_ZEROCOPY64",
            "MEM_BUF_ZEROCOPY64_BATCHES",
            "MEM_COPY",
            "MEM_COPY64",
            "MEM_COPY_ASYNC_WAIT",
            "MEMSET",
            "MEMSET64",
            "PROGRAM_ENGINE",
            "PROGRAM_ENGINE_NC",
            "PROGRAM_ENGINE_NC64",
        ],
        errno: ETIMEDOUT,
    },
    FaultPoint {
        name: "fail_fwio_read",
        calls: &["READ_HW_COUNTERS"],
        errno: ETIMEDOUT,
    },
    FaultPoint {
        name: "fail_fwio_post_metric",
        calls: &["POST_METRIC"],
        errno: ETIMEDOUT,
    },
    FaultPoint {
        name: "fail_nc_mmap",
        calls: &["mmap"],
        errno: ENOSPC,
    },
];

/// The command values a fault point fails, and its errno.
pub fn driver_fault_point(name: &str) -> Option<(Vec<u32>, i32)> {
    let p = FAULT_POINTS.iter().find(|p| p.name == name)?;
    let cmds = p
        .calls
        .iter()
        .filter_map(|c| {
            if *c == "mmap" {
                Some(MMAP)
            } else {
                neuron_abi::ioctl::COMMANDS
                    .iter()
                    .find(|i| i.name == *c)
                    .map(|i| i.cmd)
            }
        })
        .collect();
    Some((cmds, p.errno))
}

/// Errno values by name (the ones a driver call can return).
pub const ERRNOS: &[(&str, i32)] = &[
    ("EPERM", 1),
    ("ENOENT", 2),
    ("EINTR", 4),
    ("EIO", 5),
    ("ENXIO", 6),
    ("E2BIG", 7),
    ("EBADF", 9),
    ("EAGAIN", 11),
    ("ENOMEM", ENOMEM),
    ("EACCES", 13),
    ("EFAULT", 14),
    ("EBUSY", 16),
    ("EEXIST", 17),
    ("ENODEV", 19),
    ("EINVAL", 22),
    ("ENOSPC", ENOSPC),
    ("ENOSYS", 38),
    ("EBADMSG", 74),
    ("ETIMEDOUT", ETIMEDOUT),
    ("EALREADY", 114),
];

pub fn by_name(name: &str) -> Option<i32> {
    ERRNOS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| *v)
}

pub fn name_of(v: i32) -> Option<&'static str> {
    ERRNOS.iter().find(|(_, e)| *e == v).map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_names_real_calls() {
        for p in FAULT_POINTS {
            let (cmds, e) = driver_fault_point(p.name).expect("known point");
            assert_eq!(
                cmds.len(),
                p.calls.len(),
                "{}: a call name is not a command",
                p.name
            );
            assert!(name_of(e).is_some());
        }
        assert_eq!(by_name("enomem"), Some(12));
        assert_eq!(by_name("EWHAT"), None);
    }
}
