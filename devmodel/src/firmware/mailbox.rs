//! The fw-io mailbox of the firmware resident on the device, as the driver talks to it
//! (`driver-abi.md` §7.1, `neuron_fw_io.h`): a request `{seq u8, cmd u8, size u16, crc32c u32}`
//! and its data, answered by a response that echoes the sequence number with an error code. READ and
//! POST_TO_CW answer with the legacy 4-byte header `{seq, error, size}`; SET_POWER_PROFILE,
//! GET_DATA and SET_FEATURE with the 8-byte one that adds a crc32c. Those three travel by the
//! newer inline protocol (firmware API ≥ 7): header in 0x1f0/0x1f4, data in the 128-byte window
//! at 0x100, ACK 0xf0, and the firmware clears the trigger 0x800 when done. Also the reset handshake
//! registers (0x1d8 TPB map, 0x1ec reset type, 0x808 firmware status). Timings are device time
//! on the firmware's own timeline: they never move the device clock.

use crate::time::Ps;

/// fw-io commands (`FW_IO_CMD_*`).
pub const CMD_READ: u8 = 1;
pub const CMD_POST_TO_CW: u8 = 2;
pub const CMD_SET_POWER_PROFILE: u8 = 3;
pub const CMD_GET_DATA: u8 = 4;
pub const CMD_SET_FEATURE: u8 = 5;
/// Response error codes (`FW_IO_SUCCESS`, `FW_IO_FAIL`, `FW_IO_UNKNOWN_COMMAND`).
pub const FW_IO_SUCCESS: u8 = 0;
pub const FW_IO_FAIL: u8 = 1;
pub const FW_IO_UNKNOWN_COMMAND: u8 = 2;
/// Header sizes: the request, the legacy and the new response.
pub const REQ_HEADER: usize = 8;
pub const RESP_HEADER_LEGACY: usize = 4;
pub const RESP_HEADER_NEW: usize = 8;
/// Largest message (the driver's request and response buffers, `FW_IO_MAX_SIZE`).
pub const MAX_MSG: usize = 0xffff;
/// Most registers one READ asks for (`FW_IO_MAX_READLESS_READ_REGISTER_COUNT`).
pub const MAX_READ_REGS: usize = 100;
/// The metric buffer in misc RAM (0x100..0x17f, `FW_IO_REG_METRIC_BUF_SZ`).
pub const METRIC_BUF: usize = 128;
/// GET_DATA types (`fw_io_get_data_type`).
pub const GET_DATA_PERF_PROFILE: u8 = 0x01;
pub const GET_DATA_AVAILABLE_PROFILES: u8 = 0x02;
/// SET_FEATURE bit 0: throttling notifications.
pub const FEATURE_THROTTLING_NOTIFICATIONS: u32 = 1;

/// Misc-RAM offsets of the mailbox and reset registers (`neuron_fw_io.h`).
pub const REG_RESET_TPB_MAP_LO: u64 = 0x1d8;
pub const REG_RESET: u64 = 0x1ec;
pub const REG_REQUEST_BASE_HI: u64 = 0x1f0;
pub const REG_REQUEST_BASE_LO: u64 = 0x1f4;
pub const REG_RESPONSE_BASE_HI: u64 = 0x1f8;
pub const REG_RESPONSE_BASE_LO: u64 = 0x1fc;
pub const REG_TRIGGER: u64 = 0x800;
/// The firmware API version register, and the version this firmware reports: ≥ 6 selects the
/// newer ECC counter encoding, ≥ 7 the inline request protocol (`neuron_fw_io.c`).
pub const REG_API_VERSION: u64 = 0x00;
pub const API_VERSION: u32 = 7;
/// The inline protocol's ACK register and its 128-byte data window (also the metric buffer).
pub const REG_ACK: u64 = 0xf0;
pub const REG_DATA: u64 = 0x100;
pub const DATA_WINDOW: usize = 128;
pub const REG_FW_STATUS: u64 = 0x808;
/// 0x808 bit 3: the firmware is still busy after a reset.
pub const FW_STATUS_RESET_BUSY: u32 = 1 << 3;
/// Reset types written to 0x1ec (`FW_IO_RESET_TYPE_*`).
pub const RESET_TYPE_DEVICE: u32 = 1;
pub const RESET_TYPE_TPB: u32 = 2;

/// Firmware timings (project-defined, LOW: no public number): a request's fixed handling
/// time plus a per-byte cost, a READ's per-register cost, a TPB and a device reset, and the
/// time the firmware status stays busy after a reset.
pub const REQ_BASE: Ps = Ps(20_000_000);
pub const REQ_PER_BYTE: Ps = Ps(10_000);
pub const READ_PER_REG: Ps = Ps(1_000_000);
pub const RESET_TPB: Ps = Ps(20_000_000_000);
pub const RESET_DEVICE: Ps = Ps(200_000_000_000);
pub const RESET_STATUS_BUSY: Ps = Ps(5_000_000_000);

/// CRC32C (Castagnoli, reflected, seed and final xor 0xffffffff), as `neuron_fw_io.c`.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    c ^ 0xffff_ffff
}

/// A request as the driver builds it: header with the crc32c over the whole message (crc
/// field zero while computing). `None` when it would exceed [`MAX_MSG`].
pub fn encode_request(seq: u8, cmd: u8, data: &[u8]) -> Option<Vec<u8>> {
    let size = REQ_HEADER
        .checked_add(data.len())
        .filter(|s| *s <= MAX_MSG)?;
    let mut m = Vec::with_capacity(size);
    m.push(seq);
    m.push(cmd);
    m.extend_from_slice(&(size as u16).to_le_bytes());
    m.extend_from_slice(&[0; 4]);
    m.extend_from_slice(data);
    let crc = crc32c(&m);
    m[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(m)
}

/// Whether `cmd` answers with the 8-byte (crc-carrying) response header.
pub fn new_protocol(cmd: u8) -> bool {
    matches!(cmd, CMD_SET_POWER_PROFILE | CMD_GET_DATA | CMD_SET_FEATURE)
}

/// A decoded response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub seq: u8,
    pub error: u8,
    pub data: Vec<u8>,
}

/// Decode a response to `cmd`; `None` if its header is short, its size field disagrees with
/// the bytes, or (new header) its crc32c is wrong.
pub fn decode_response(cmd: u8, bytes: &[u8]) -> Option<Response> {
    let hdr = if new_protocol(cmd) {
        RESP_HEADER_NEW
    } else {
        RESP_HEADER_LEGACY
    };
    let size = u16::from_le_bytes([*bytes.get(2)?, *bytes.get(3)?]) as usize;
    if size < hdr || size > bytes.len() {
        return None;
    }
    if hdr == RESP_HEADER_NEW {
        let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
        let mut z = bytes[..size].to_vec();
        z[4..8].fill(0);
        if crc32c(&z) != crc {
            return None;
        }
    }
    Some(Response {
        seq: bytes[0],
        error: bytes[1],
        data: bytes[hdr..size].to_vec(),
    })
}

fn encode_response(seq: u8, error: u8, data: &[u8], new_hdr: bool) -> Vec<u8> {
    let hdr = if new_hdr {
        RESP_HEADER_NEW
    } else {
        RESP_HEADER_LEGACY
    };
    let size = hdr + data.len();
    let mut m = Vec::with_capacity(size);
    m.push(seq);
    m.push(error);
    m.extend_from_slice(&(size as u16).to_le_bytes());
    if hdr == RESP_HEADER_NEW {
        m.extend_from_slice(&[0; 4]);
    }
    m.extend_from_slice(data);
    if hdr == RESP_HEADER_NEW {
        let crc = crc32c(&m);
        m[4..8].copy_from_slice(&crc.to_le_bytes());
    }
    m
}

/// What the firmware did with a trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A response is in the response buffer from `done_at` on.
    Answered { response: Vec<u8>, done_at: Ps },
    /// Still handling an earlier request until `until`: the trigger is not taken and the
    /// response buffer is left alone (the driver's poll times out and it retries).
    Busy { until: Ps },
    /// Not a request (shorter than a header, or sequence number 0, which the driver never
    /// sends: a response carrying it would look like no response): ignored.
    Ignored,
}

/// Counters of the mailbox (what the firmware saw).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MailboxStats {
    pub requests: u64,
    pub failed: u64,
    pub unknown_command: u64,
    pub busy: u64,
    pub metrics_posted: u64,
}

/// The resident firmware of one device.
#[derive(Debug, Clone, Default)]
pub struct Firmware {
    /// When the request in hand is done (a trigger before then is [`Outcome::Busy`]).
    free_at: Ps,
    /// The request/response buffer addresses the driver programmed (0x1f0-0x1fc).
    pub request_base: u64,
    pub response_base: u64,
    /// The power profile (SET_POWER_PROFILE record) and the feature bitmap (SET_FEATURE).
    pub perf_profile: [u8; 4],
    pub features: u32,
    /// The last metric blob posted (at most [`METRIC_BUF`] bytes, as in misc RAM 0x100).
    pub last_metric: Vec<u8>,
    pub stats: MailboxStats,
    /// The reset handshake: the TPB map, the reset type while a reset runs, and when the
    /// reset and the busy status end.
    tpb_map: u32,
    /// Written to 0x1ec, not yet triggered.
    pending_type: u32,
    /// The type of the reset running until `reset_done`.
    running_type: u32,
    reset_done: Ps,
    status_ready: Ps,
    /// Inline protocol: the ACK register, the data window, and when the request in hand is
    /// done (0x800 reads 1 until then).
    ack: u32,
    data: [u32; DATA_WINDOW / 4],
    inline_done: Ps,
    /// Report another API version than [`API_VERSION`] (older firmware, for tests and
    /// fault experiments).
    pub api_version_override: Option<u32>,
}

/// A reset the firmware performs: which cores, and when 0x1ec and 0x808 bit 3 clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPlan {
    /// Bit n: core n.
    pub cores: u64,
    pub done_at: Ps,
    pub ready_at: Ps,
}

impl Firmware {
    /// Handle a trigger at `at` of the request `req`; `read` reads one device register (READ).
    pub fn handle(&mut self, at: Ps, req: &[u8], read: &mut dyn FnMut(u64) -> u32) -> Outcome {
        let new_hdr = req.get(1).is_some_and(|c| new_protocol(*c));
        self.process(at, req, read, new_hdr)
    }

    fn process(
        &mut self,
        at: Ps,
        req: &[u8],
        read: &mut dyn FnMut(u64) -> u32,
        new_hdr: bool,
    ) -> Outcome {
        if req.len() < REQ_HEADER || req[0] == 0 {
            return Outcome::Ignored;
        }
        if at < self.free_at {
            self.stats.busy += 1;
            return Outcome::Busy {
                until: self.free_at,
            };
        }
        self.stats.requests += 1;
        let (seq, cmd) = (req[0], req[1]);
        let (error, data) = self.answer(req, read);
        match error {
            FW_IO_FAIL => self.stats.failed += 1,
            FW_IO_UNKNOWN_COMMAND => self.stats.unknown_command += 1,
            _ => {}
        }
        let response = encode_response(seq, error, &data, new_hdr);
        let work = REQ_BASE
            + Ps(REQ_PER_BYTE
                .0
                .saturating_mul((req.len() + response.len()) as u64))
            + if cmd == CMD_READ && error == FW_IO_SUCCESS {
                Ps(READ_PER_REG.0.saturating_mul((data.len() / 4) as u64))
            } else {
                Ps::ZERO
            };
        let done_at = at + work;
        self.free_at = done_at;
        Outcome::Answered { response, done_at }
    }

    /// Check and run one request: (error code, response data).
    fn answer(&mut self, req: &[u8], read: &mut dyn FnMut(u64) -> u32) -> (u8, Vec<u8>) {
        let size = u16::from_le_bytes([req[2], req[3]]) as usize;
        if size < REQ_HEADER || size > req.len() {
            return (FW_IO_FAIL, Vec::new());
        }
        let msg = &req[..size];
        let crc = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
        let mut z = msg.to_vec();
        z[4..8].fill(0);
        if crc32c(&z) != crc {
            return (FW_IO_FAIL, Vec::new());
        }
        let data = &msg[REQ_HEADER..];
        match msg[1] {
            CMD_READ => {
                let n = data.len() / 8;
                if !data.len().is_multiple_of(8) || n == 0 || n > MAX_READ_REGS {
                    return (FW_IO_FAIL, Vec::new());
                }
                let vals: Vec<u8> = data
                    .chunks_exact(8)
                    .flat_map(|a| {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(a);
                        read(u64::from_le_bytes(w)).to_le_bytes()
                    })
                    .collect();
                (FW_IO_SUCCESS, vals)
            }
            CMD_POST_TO_CW => {
                if data.len() > METRIC_BUF {
                    return (FW_IO_FAIL, Vec::new());
                }
                self.last_metric = data.to_vec();
                self.stats.metrics_posted += 1;
                (FW_IO_SUCCESS, Vec::new())
            }
            CMD_SET_POWER_PROFILE => {
                // fw_io_req_perfprofile_data: reserved u32, profile, voltage margin,
                // frequency index, OCW index.
                if data.len() != 8 {
                    return (FW_IO_FAIL, Vec::new());
                }
                self.perf_profile.copy_from_slice(&data[4..8]);
                (FW_IO_SUCCESS, Vec::new())
            }
            CMD_GET_DATA => match data.first() {
                Some(&GET_DATA_PERF_PROFILE) => {
                    let mut r = vec![0u8; 4];
                    r.extend_from_slice(&self.perf_profile);
                    (FW_IO_SUCCESS, r)
                }
                Some(&GET_DATA_AVAILABLE_PROFILES) => {
                    // One profile (0, the default): num_profiles, then a 32-byte bitmap.
                    let mut r = vec![0u8; 33];
                    r[0] = 1;
                    r[1] = 1;
                    (FW_IO_SUCCESS, r)
                }
                _ => (FW_IO_FAIL, Vec::new()),
            },
            CMD_SET_FEATURE => {
                let Ok(w) = <[u8; 4]>::try_from(data) else {
                    return (FW_IO_FAIL, Vec::new());
                };
                self.features = u32::from_le_bytes(w);
                (FW_IO_SUCCESS, Vec::new())
            }
            _ => (FW_IO_UNKNOWN_COMMAND, Vec::new()),
        }
    }

    /// A driver store to a mailbox or reset register (misc-RAM offset `m`) at `at`. A store to
    /// 0x800 with a reset type in 0x1ec starts a reset and returns its plan; `nc_count` bounds
    /// the cores a device reset covers.
    pub fn write_reg(&mut self, m: u64, v: u32, at: Ps, nc_count: usize) -> Option<ResetPlan> {
        let set_lo = |base: &mut u64| *base = (*base & !0xffff_ffff) | v as u64;
        let set_hi = |base: &mut u64| *base = (*base & 0xffff_ffff) | (v as u64) << 32;
        match m {
            REG_RESET_TPB_MAP_LO => self.tpb_map = v,
            REG_RESET => self.pending_type = v,
            REG_REQUEST_BASE_LO => set_lo(&mut self.request_base),
            REG_REQUEST_BASE_HI => set_hi(&mut self.request_base),
            REG_RESPONSE_BASE_LO => set_lo(&mut self.response_base),
            REG_RESPONSE_BASE_HI => set_hi(&mut self.response_base),
            REG_ACK => self.ack = v,
            _ if (REG_DATA..REG_DATA + DATA_WINDOW as u64).contains(&m) => {
                self.data[((m - REG_DATA) / 4) as usize] = v;
            }
            REG_TRIGGER if self.pending_type == 0 && self.ack == 1 => self.run_inline(at),
            REG_TRIGGER if self.pending_type != 0 && at >= self.reset_done => {
                let all = if nc_count >= 64 {
                    u64::MAX
                } else {
                    (1u64 << nc_count) - 1
                };
                let kind = std::mem::take(&mut self.pending_type);
                let (cores, took) = match kind {
                    RESET_TYPE_DEVICE => (all, RESET_DEVICE),
                    // TPB map bits 7:0 are the TPBs (the SDMA and TOP_SP groups ride along).
                    RESET_TYPE_TPB => (u64::from(self.tpb_map & 0xff) & all, RESET_TPB),
                    _ => return None,
                };
                self.running_type = kind;
                self.reset_done = at + took;
                self.status_ready = self.reset_done + RESET_STATUS_BUSY;
                // A reset abandons any request in hand.
                self.free_at = self.free_at.min(at);
                return Some(ResetPlan {
                    cores,
                    done_at: self.reset_done,
                    ready_at: self.status_ready,
                });
            }
            _ => {}
        }
        None
    }

    /// A mailbox or reset register as read at `at` (`None`: not one of them).
    pub fn read_reg(&self, m: u64, at: Ps) -> Option<u32> {
        Some(match m {
            REG_RESET_TPB_MAP_LO => self.tpb_map,
            // The reset type reads back until the firmware has done the reset, then 0.
            REG_RESET => {
                if at < self.reset_done {
                    self.running_type
                } else {
                    self.pending_type
                }
            }
            REG_FW_STATUS => {
                if at < self.status_ready {
                    FW_STATUS_RESET_BUSY
                } else {
                    0
                }
            }
            REG_REQUEST_BASE_LO => self.request_base as u32,
            REG_REQUEST_BASE_HI => (self.request_base >> 32) as u32,
            REG_RESPONSE_BASE_LO => self.response_base as u32,
            REG_RESPONSE_BASE_HI => (self.response_base >> 32) as u32,
            REG_API_VERSION => self.api_version_override.unwrap_or(API_VERSION),
            REG_ACK => self.ack,
            REG_TRIGGER => u32::from(at < self.inline_done),
            _ if (REG_DATA..REG_DATA + DATA_WINDOW as u64).contains(&m) => {
                self.data[((m - REG_DATA) / 4) as usize]
            }
            _ => return None,
        })
    }

    /// When the inline request in hand is done (0x800 reads 1 before then).
    pub fn inline_busy_until(&self) -> Ps {
        self.inline_done
    }

    /// The data window as bytes.
    pub fn data_window(&self) -> Vec<u8> {
        self.data.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// An inline request (`fw_io_execute_request_new`): the header is the two dwords at
    /// 0x1f0/0x1f4, its data the first `size − 8` bytes of the window. The response header
    /// replaces them (0x1f0 = seq, error, size; 0x1f4 = crc32c), its data fills the window,
    /// and 0x800 reads 1 until the firmware is done. A request in hand delays this one.
    fn run_inline(&mut self, at: Ps) {
        let dw0 = (self.request_base >> 32) as u32;
        let dw1 = self.request_base as u32;
        let mut msg = Vec::with_capacity(REQ_HEADER + DATA_WINDOW);
        msg.extend_from_slice(&dw0.to_le_bytes());
        msg.extend_from_slice(&dw1.to_le_bytes());
        let size = (dw0 >> 16) as usize;
        // A size past the window cannot carry its data: the crc check fails it.
        let payload = size.saturating_sub(REQ_HEADER).min(DATA_WINDOW);
        msg.extend_from_slice(&self.data_window()[..payload]);
        let start = at.max(self.free_at);
        self.ack = 0;
        match self.process(start, &msg, &mut |_| 0, true) {
            Outcome::Answered { response, done_at } => {
                let word = |i: usize| {
                    let mut w = [0u8; 4];
                    for (k, b) in response.iter().skip(i).take(4).enumerate() {
                        w[k] = *b;
                    }
                    u32::from_le_bytes(w)
                };
                self.request_base = (word(0) as u64) << 32 | word(4) as u64;
                let body = response.get(RESP_HEADER_NEW..).unwrap_or(&[]);
                for (i, w) in self.data.iter_mut().enumerate() {
                    let mut b = [0u8; 4];
                    for (k, v) in body.iter().skip(4 * i).take(4).enumerate() {
                        b[k] = *v;
                    }
                    if 4 * i < body.len() {
                        *w = u32::from_le_bytes(b);
                    }
                }
                self.inline_done = done_at;
            }
            Outcome::Busy { until } => self.inline_done = until,
            Outcome::Ignored => self.inline_done = start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fw() -> Firmware {
        Firmware::default()
    }

    fn no_read(_: u64) -> u32 {
        0
    }

    /// Answer `req` at `at`: (response, done_at).
    fn answer(f: &mut Firmware, at: Ps, req: &[u8]) -> (Response, Ps) {
        let cmd = req[1];
        match f.handle(at, req, &mut |a| a as u32 ^ 0xffff_0000) {
            Outcome::Answered { response, done_at } => (
                decode_response(cmd, &response).expect("well-formed response"),
                done_at,
            ),
            o => panic!("not answered: {o:?}"),
        }
    }

    #[test]
    fn crc32c_is_castagnoli() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn read_echoes_seq_and_reads_each_register() {
        let mut f = fw();
        let addrs: Vec<u8> = [0x10u64, 0x2000_0004]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        let req = encode_request(7, CMD_READ, &addrs).expect("req");
        let (r, done) = answer(&mut f, Ps(1000), &req);
        assert_eq!((r.seq, r.error), (7, FW_IO_SUCCESS));
        let vals: Vec<u32> = r
            .data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(vals, [0xffff_0010, 0xdfff_0004]);
        // Legacy header: {seq, error, size} and no crc.
        let raw = match f.handle(done, &req, &mut no_read) {
            Outcome::Answered { response, .. } => response,
            o => panic!("{o:?}"),
        };
        assert_eq!(raw.len(), RESP_HEADER_LEGACY + 8);
        assert_eq!(u16::from_le_bytes([raw[2], raw[3]]), 12);
        let want =
            REQ_BASE + Ps(REQ_PER_BYTE.0 * (req.len() + raw.len()) as u64) + Ps(2 * READ_PER_REG.0);
        assert_eq!(done, Ps(1000) + want, "timing in device time");
        // No register or too many: a failed request.
        for (k, n) in [0usize, MAX_READ_REGS + 1].into_iter().enumerate() {
            let req = encode_request(8, CMD_READ, &vec![0; 8 * n]).expect("req");
            let (r, _) = answer(&mut f, Ps((k as u64 + 1) << 40), &req);
            assert_eq!((r.seq, r.error), (8, FW_IO_FAIL), "{n} registers");
        }
        assert_eq!(f.stats.failed, 2);
    }

    #[test]
    fn post_to_cw_keeps_the_metric() {
        let mut f = fw();
        let req = encode_request(1, CMD_POST_TO_CW, b"metric blob").expect("req");
        let (r, _) = answer(&mut f, Ps(0), &req);
        assert_eq!((r.seq, r.error, r.data.len()), (1, FW_IO_SUCCESS, 0));
        assert_eq!(f.last_metric, b"metric blob");
        assert_eq!(f.stats.metrics_posted, 1);
        let req = encode_request(2, CMD_POST_TO_CW, &[0; METRIC_BUF + 1]).expect("req");
        let (r, _) = answer(&mut f, Ps(1 << 40), &req);
        assert_eq!(r.error, FW_IO_FAIL, "larger than the metric buffer");
    }

    #[test]
    fn power_profile_data_and_features_use_the_crc_header() {
        let mut f = fw();
        let t = |k: u64| Ps(k << 40);
        let req = encode_request(3, CMD_SET_POWER_PROFILE, &[0, 0, 0, 0, 2, 1, 3, 4]).expect("r");
        let (r, _) = answer(&mut f, t(0), &req);
        assert_eq!((r.seq, r.error), (3, FW_IO_SUCCESS));
        let req = encode_request(4, CMD_GET_DATA, &[GET_DATA_PERF_PROFILE]).expect("r");
        let (r, _) = answer(&mut f, t(1), &req);
        assert_eq!(r.data, [0, 0, 0, 0, 2, 1, 3, 4]);
        let req = encode_request(5, CMD_GET_DATA, &[GET_DATA_AVAILABLE_PROFILES, 0, 0]).expect("r");
        let (r, _) = answer(&mut f, t(2), &req);
        assert_eq!((r.data.len(), r.data[0], r.data[1]), (33, 1, 1));
        let req = encode_request(6, CMD_GET_DATA, &[0x10, 0]).expect("r");
        assert_eq!(answer(&mut f, t(3), &req).0.error, FW_IO_FAIL, "BAR info");
        let req = encode_request(9, CMD_SET_FEATURE, &1u32.to_le_bytes()).expect("r");
        let (r, _) = answer(&mut f, t(4), &req);
        assert_eq!((r.seq, r.error), (9, FW_IO_SUCCESS));
        assert_eq!(f.features, FEATURE_THROTTLING_NOTIFICATIONS);
        let req = encode_request(10, CMD_SET_POWER_PROFILE, &[0; 4]).expect("r");
        assert_eq!(
            answer(&mut f, t(5), &req).0.error,
            FW_IO_FAIL,
            "short record"
        );
        // A corrupted new-style response is refused by the decoder.
        let raw = match f.handle(t(6), &req, &mut no_read) {
            Outcome::Answered { mut response, .. } => {
                response[1] ^= 1;
                response
            }
            o => panic!("{o:?}"),
        };
        assert_eq!(raw.len(), RESP_HEADER_NEW);
        assert_eq!(decode_response(CMD_SET_POWER_PROFILE, &raw), None);
    }

    #[test]
    fn bad_crc_bad_size_and_unknown_commands_are_error_responses() {
        let mut f = fw();
        let t = |k: u64| Ps(k << 40);
        let mut req = encode_request(11, CMD_READ, &[0; 8]).expect("req");
        req[8] ^= 0xff;
        let (r, _) = answer(&mut f, t(0), &req);
        assert_eq!((r.seq, r.error), (11, FW_IO_FAIL), "bad crc");
        let mut req = encode_request(12, CMD_READ, &[0; 8]).expect("req");
        req[2..4].copy_from_slice(&64u16.to_le_bytes());
        assert_eq!(
            answer(&mut f, t(1), &req).0.error,
            FW_IO_FAIL,
            "size past the bytes"
        );
        req[2..4].copy_from_slice(&4u16.to_le_bytes());
        assert_eq!(
            answer(&mut f, t(2), &req).0.error,
            FW_IO_FAIL,
            "size below the header"
        );
        let req = encode_request(13, 0, &[]).expect("req");
        let (r, _) = answer(&mut f, t(3), &req);
        assert_eq!((r.seq, r.error), (13, FW_IO_UNKNOWN_COMMAND));
        let req = encode_request(14, 6, &[1, 2]).expect("req");
        assert_eq!(answer(&mut f, t(4), &req).0.error, FW_IO_UNKNOWN_COMMAND);
        assert_eq!((f.stats.failed, f.stats.unknown_command), (3, 2));
        assert!(encode_request(1, CMD_READ, &vec![0; MAX_MSG]).is_none());
    }

    #[test]
    fn busy_and_sequence_zero_leave_the_response_alone() {
        let mut f = fw();
        let req = encode_request(1, CMD_POST_TO_CW, b"x").expect("req");
        let (_, done) = answer(&mut f, Ps(0), &req);
        let again = encode_request(2, CMD_POST_TO_CW, b"y").expect("req");
        assert_eq!(
            f.handle(Ps(done.0 - 1), &again, &mut no_read),
            Outcome::Busy { until: done }
        );
        assert_eq!(f.stats.busy, 1);
        assert_eq!(f.last_metric, b"x", "the busy request was not taken");
        let zero = encode_request(0, CMD_POST_TO_CW, b"z").expect("req");
        assert_eq!(f.handle(done, &zero, &mut no_read), Outcome::Ignored);
        assert_eq!(f.handle(done, &[1, 2, 3], &mut no_read), Outcome::Ignored);
        assert_eq!(answer(&mut f, done, &again).0.seq, 2);
    }

    #[test]
    fn reset_handshake_status_bits() {
        let mut f = fw();
        let at = Ps(1_000);
        assert_eq!(
            f.write_reg(REG_RESET_TPB_MAP_LO, 0b101 | 0b101 << 8, at, 8),
            None
        );
        assert_eq!(f.write_reg(REG_RESET, RESET_TYPE_TPB, at, 8), None);
        assert_eq!(f.read_reg(REG_RESET, at), Some(RESET_TYPE_TPB));
        let p = f.write_reg(REG_TRIGGER, 0, at, 8).expect("reset started");
        assert_eq!(p.cores, 0b101, "TPB bits only");
        assert_eq!(
            (p.done_at, p.ready_at),
            (at + RESET_TPB, at + RESET_TPB + RESET_STATUS_BUSY)
        );
        assert_eq!(
            f.read_reg(REG_RESET, Ps(p.done_at.0 - 1)),
            Some(RESET_TYPE_TPB)
        );
        assert_eq!(f.read_reg(REG_RESET, p.done_at), Some(0));
        assert_eq!(
            f.read_reg(REG_FW_STATUS, p.done_at),
            Some(FW_STATUS_RESET_BUSY)
        );
        assert_eq!(f.read_reg(REG_FW_STATUS, p.ready_at), Some(0));
        // A trigger with no reset type written is not a reset; a device reset covers all.
        assert_eq!(f.write_reg(REG_TRIGGER, 0, p.ready_at, 8), None);
        f.write_reg(REG_RESET, RESET_TYPE_DEVICE, p.ready_at, 8);
        let d = f
            .write_reg(REG_TRIGGER, 0, p.ready_at, 8)
            .expect("device reset");
        assert_eq!(d.cores, 0xff);
        assert_eq!(d.done_at, p.ready_at + RESET_DEVICE);
        f.write_reg(REG_RESPONSE_BASE_HI, 0x12, at, 8);
        f.write_reg(REG_RESPONSE_BASE_LO, 0x3456_0000, at, 8);
        assert_eq!(f.response_base, 0x12_3456_0000);
        assert_eq!(f.read_reg(REG_RESPONSE_BASE_HI, at), Some(0x12));
        assert_eq!(f.read_reg(0x24, at), None, "not a firmware register");
    }

    /// Drive one inline request as the driver does; the trigger reads 1 until the firmware
    /// is done, then 0x1f0 holds the response header and the window its data.
    fn inline(f: &mut Firmware, at: Ps, req: &[u8], data_len: usize) -> (u32, Vec<u8>, Ps) {
        for (i, c) in req[REQ_HEADER..REQ_HEADER + data_len].chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            f.write_reg(REG_DATA + 4 * i as u64, u32::from_le_bytes(w), at, 2);
        }
        let dw = |i: usize| u32::from_le_bytes(req[i..i + 4].try_into().expect("4 bytes"));
        f.write_reg(REG_REQUEST_BASE_HI, dw(0), at, 2);
        f.write_reg(REG_REQUEST_BASE_LO, dw(4), at, 2);
        f.write_reg(REG_ACK, 1, at, 2);
        assert_eq!(f.write_reg(REG_TRIGGER, 1, at, 2), None);
        assert_eq!(
            f.read_reg(REG_TRIGGER, at),
            Some(1),
            "busy right after the trigger"
        );
        let done = f.inline_busy_until();
        assert!(done > at);
        assert_eq!(f.read_reg(REG_TRIGGER, done), Some(0));
        assert_eq!(f.read_reg(REG_ACK, done), Some(0));
        let hdr = f.read_reg(REG_REQUEST_BASE_HI, done).expect("header");
        (hdr, f.data_window(), done)
    }

    #[test]
    fn inline_protocol_sets_and_reads_the_power_profile() {
        let mut f = fw();
        assert_eq!(f.read_reg(REG_API_VERSION, Ps::ZERO), Some(API_VERSION));
        let req = encode_request(5, CMD_SET_POWER_PROFILE, &[0, 0, 0, 0, 3, 0, 0, 0]).expect("req");
        let (hdr, _, t) = inline(&mut f, Ps::ZERO, &req, 8);
        let h = hdr.to_le_bytes();
        assert_eq!(
            (h[0], h[1], u16::from_le_bytes([h[2], h[3]])),
            (5, FW_IO_SUCCESS, 8)
        );
        assert_eq!(f.perf_profile, [3, 0, 0, 0]);
        let req = encode_request(6, CMD_GET_DATA, &[GET_DATA_PERF_PROFILE]).expect("req");
        let (hdr, data, _) = inline(&mut f, t, &req, 1);
        let h = hdr.to_le_bytes();
        assert_eq!(
            (h[0], h[1], u16::from_le_bytes([h[2], h[3]])),
            (6, FW_IO_SUCCESS, 16)
        );
        assert_eq!(data[4], 3, "profile byte of fw_io_get_perfprofile_response");
        // Available profiles: num_profiles then the 32-byte bitmap.
        let req =
            encode_request(7, CMD_GET_DATA, &[GET_DATA_AVAILABLE_PROFILES, 0, 0]).expect("req");
        let (hdr, data, _) = inline(&mut f, t, &req, 3);
        assert_eq!(hdr.to_le_bytes()[1], FW_IO_SUCCESS);
        assert_eq!((data[0], data[1]), (1, 1));
    }

    #[test]
    fn inline_protocol_refuses_bad_crc_and_oversized_requests() {
        let mut f = fw();
        let mut req = encode_request(9, CMD_SET_FEATURE, &1u32.to_le_bytes()).expect("req");
        req[8] ^= 1; // data no longer matches the crc
        let (hdr, _, t) = inline(&mut f, Ps::ZERO, &req, 4);
        assert_eq!(hdr.to_le_bytes()[..2], [9, FW_IO_FAIL]);
        assert_eq!(f.features, 0);
        // A size past the 128-byte window: the data cannot all be there, the crc fails.
        let big = encode_request(10, CMD_SET_FEATURE, &[0u8; 200]).expect("req");
        let (hdr, _, t) = inline(&mut f, t, &big, DATA_WINDOW);
        assert_eq!(hdr.to_le_bytes()[..2], [10, FW_IO_FAIL]);
        // A good SET_FEATURE then takes.
        let req = encode_request(11, CMD_SET_FEATURE, &1u32.to_le_bytes()).expect("req");
        let (hdr, _, _) = inline(&mut f, t, &req, 4);
        assert_eq!(hdr.to_le_bytes()[..2], [11, FW_IO_SUCCESS]);
        assert_eq!(f.features, FEATURE_THROTTLING_NOTIFICATIONS);
        assert_eq!(f.stats.failed, 2);
    }
}
