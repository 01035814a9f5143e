//! `NRT_STATUS` with the real values (`nrt-api-and-neff.md` §1.2).

use std::fmt;

/// Status codes returned by every runtime call. Values are the real `nrt_status.h` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NrtStatus {
    Success = 0,
    Failure = 1,
    Invalid = 2,
    InvalidHandle = 3,
    Resource = 4,
    Timeout = 5,
    HwError = 6,
    QueueFull = 7,
    LoadNotEnoughNc = 9,
    UnsupportedNeffVersion = 10,
    FailHostMemAlloc = 11,
    Uninitialized = 13,
    Closed = 14,
    QueueEmpty = 15,
    ExecUnitUnrecoverable = 101,
    ExecBadInput = 1002,
    ExecCompletedWithNumErr = 1003,
    ExecCompletedWithErr = 1004,
    ExecNcBusy = 1005,
    ExecOob = 1006,
    CollPending = 1100,
    ExecHwErrCollectives = 1200,
    ExecHwErrHbmUe = 1201,
    ExecHwErrNcUe = 1202,
    ExecHwErrDmaAbort = 1203,
    ExecSwNqOverflow = 1204,
    ExecHwErrRepairableHbmUe = 1205,
    NetworkProxyFailure = 1206,
}

impl NrtStatus {
    pub const ALL: [NrtStatus; 28] = [
        NrtStatus::Success,
        NrtStatus::Failure,
        NrtStatus::Invalid,
        NrtStatus::InvalidHandle,
        NrtStatus::Resource,
        NrtStatus::Timeout,
        NrtStatus::HwError,
        NrtStatus::QueueFull,
        NrtStatus::LoadNotEnoughNc,
        NrtStatus::UnsupportedNeffVersion,
        NrtStatus::FailHostMemAlloc,
        NrtStatus::Uninitialized,
        NrtStatus::Closed,
        NrtStatus::QueueEmpty,
        NrtStatus::ExecUnitUnrecoverable,
        NrtStatus::ExecBadInput,
        NrtStatus::ExecCompletedWithNumErr,
        NrtStatus::ExecCompletedWithErr,
        NrtStatus::ExecNcBusy,
        NrtStatus::ExecOob,
        NrtStatus::CollPending,
        NrtStatus::ExecHwErrCollectives,
        NrtStatus::ExecHwErrHbmUe,
        NrtStatus::ExecHwErrNcUe,
        NrtStatus::ExecHwErrDmaAbort,
        NrtStatus::ExecSwNqOverflow,
        NrtStatus::ExecHwErrRepairableHbmUe,
        NrtStatus::NetworkProxyFailure,
    ];

    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(c: u32) -> Option<NrtStatus> {
        NrtStatus::ALL.into_iter().find(|s| s.code() == c)
    }

    /// The C enumerator name.
    pub fn name(self) -> &'static str {
        match self {
            NrtStatus::Success => "NRT_SUCCESS",
            NrtStatus::Failure => "NRT_FAILURE",
            NrtStatus::Invalid => "NRT_INVALID",
            NrtStatus::InvalidHandle => "NRT_INVALID_HANDLE",
            NrtStatus::Resource => "NRT_RESOURCE",
            NrtStatus::Timeout => "NRT_TIMEOUT",
            NrtStatus::HwError => "NRT_HW_ERROR",
            NrtStatus::QueueFull => "NRT_QUEUE_FULL",
            NrtStatus::LoadNotEnoughNc => "NRT_LOAD_NOT_ENOUGH_NC",
            NrtStatus::UnsupportedNeffVersion => "NRT_UNSUPPORTED_NEFF_VERSION",
            NrtStatus::FailHostMemAlloc => "NRT_FAIL_HOST_MEM_ALLOC",
            NrtStatus::Uninitialized => "NRT_UNINITIALIZED",
            NrtStatus::Closed => "NRT_CLOSED",
            NrtStatus::QueueEmpty => "NRT_QUEUE_EMPTY",
            NrtStatus::ExecUnitUnrecoverable => "NRT_EXEC_UNIT_UNRECOVERABLE",
            NrtStatus::ExecBadInput => "NRT_EXEC_BAD_INPUT",
            NrtStatus::ExecCompletedWithNumErr => "NRT_EXEC_COMPLETED_WITH_NUM_ERR",
            NrtStatus::ExecCompletedWithErr => "NRT_EXEC_COMPLETED_WITH_ERR",
            NrtStatus::ExecNcBusy => "NRT_EXEC_NC_BUSY",
            NrtStatus::ExecOob => "NRT_EXEC_OOB",
            NrtStatus::CollPending => "NRT_COLL_PENDING",
            NrtStatus::ExecHwErrCollectives => "NRT_EXEC_HW_ERR_COLLECTIVES",
            NrtStatus::ExecHwErrHbmUe => "NRT_EXEC_HW_ERR_HBM_UE",
            NrtStatus::ExecHwErrNcUe => "NRT_EXEC_HW_ERR_NC_UE",
            NrtStatus::ExecHwErrDmaAbort => "NRT_EXEC_HW_ERR_DMA_ABORT",
            NrtStatus::ExecSwNqOverflow => "NRT_EXEC_SW_NQ_OVERFLOW",
            NrtStatus::ExecHwErrRepairableHbmUe => "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE",
            NrtStatus::NetworkProxyFailure => "NRT_NETWORK_PROXY_FAILURE",
        }
    }
}

impl fmt::Display for NrtStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// A failed runtime call: the status the C API returns plus the message the runtime logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct NrtError {
    pub status: NrtStatus,
    pub message: String,
    /// Already written to the log in the runtime's own words (the C layer then stays quiet).
    pub logged: bool,
}

impl NrtError {
    pub fn new(status: NrtStatus, message: impl Into<String>) -> Self {
        NrtError {
            status,
            message: message.into(),
            logged: false,
        }
    }

    /// Mark as already logged.
    pub fn logged(mut self) -> Self {
        self.logged = true;
        self
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(NrtStatus::Invalid, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_values() {
        assert_eq!(NrtStatus::Timeout.code(), 5);
        assert_eq!(NrtStatus::UnsupportedNeffVersion.code(), 10);
        assert_eq!(NrtStatus::ExecOob.code(), 1006);
        assert_eq!(NrtStatus::ExecHwErrDmaAbort.code(), 1203);
        for s in NrtStatus::ALL {
            assert_eq!(NrtStatus::from_code(s.code()), Some(s));
        }
        assert_eq!(NrtStatus::from_code(8), None);
    }
}
