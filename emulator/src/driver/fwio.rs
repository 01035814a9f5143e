//! The driver's side of the device firmware (`neuron_fw_io.c`, `driver-abi.md` §7.1): fw-io
//! requests through the misc-RAM mailbox (buffer addresses at 0x1f0-0x1fc, trigger, poll the
//! response's sequence number every 1 ms for up to 1 s, up to 30 attempts) and the reset
//! handshake (TPB map 0x1d8, reset type 0x1ec, trigger 0x800, poll 0x1ec every 100 ms until 0,
//! then firmware status 0x808 bit 3), and the inline protocol of firmware API ≥ 7
//! (`fw_io_execute_request_new`) that carries SET_POWER_PROFILE, GET_DATA and SET_FEATURE.
//! Waits happen on the driver's firmware timeline
//! ([`FwIo::clock`]), which starts at the device clock and never moves it.

use crate::DevState;
use neuron_abi::Errno;
use neuron_devmodel::firmware::mailbox::{self as mb, decode_response, encode_request};
use neuron_devmodel::firmware::Outcome;
use neuron_devmodel::Ps;

/// The driver's poll interval and timeout for a response, and its attempts.
pub(crate) const POLL: Ps = Ps(1_000_000_000);
pub(crate) const TIMEOUT: Ps = Ps(1_000_000_000_000);
pub(crate) const RETRIES: usize = 30;
/// The driver's poll interval on 0x1ec during a reset, and its give-up time (v3: 480 s).
pub(crate) const RESET_POLL: Ps = Ps(100_000_000_000);
pub(crate) const RESET_GIVE_UP: Ps = Ps(480_000_000_000_000);
/// Bus addresses of the driver's request and response buffers (project-defined: the real ones
/// are `virt_to_phys` of two kmalloc'ed 64 KiB buffers ORed with the PCI host base).
pub(crate) const REQUEST_PA: u64 = 0x8000_00f0_0000;
pub(crate) const RESPONSE_PA: u64 = 0x8000_00f1_0000;

/// The driver's fw-io context of one device.
#[derive(Debug, Clone, Default)]
pub(crate) struct FwIo {
    next_seq: u8,
    /// The driver's time on the firmware timeline.
    pub(crate) clock: Ps,
    /// Failed responses (`fw_io_err_count`).
    pub(crate) err_count: u64,
    /// How long the last request and the last reset took the driver (for tests and logs).
    pub(crate) last_request: Ps,
    pub(crate) last_reset: Ps,
}

/// The time the driver acts at: its firmware timeline, never behind the device.
pub(crate) fn now(g: &DevState) -> Ps {
    g.drv.fwio.clock.max(g.dev.now())
}

/// `fw_io_execute_request`: send `cmd` with `data`, wait for the answer; the response data,
/// or `EIO` once every attempt failed (the driver's -1) or the command is unknown.
pub(crate) fn execute(g: &mut DevState, cmd: u8, data: &[u8]) -> Result<Vec<u8>, Errno> {
    let start = now(g);
    for _ in 0..RETRIES {
        let at = now(g);
        // fw_io_init: the buffer addresses, again before every attempt.
        for (reg, v) in [
            (mb::REG_REQUEST_BASE_LO, REQUEST_PA as u32),
            (mb::REG_REQUEST_BASE_HI, (REQUEST_PA >> 32) as u32),
            (mb::REG_RESPONSE_BASE_LO, RESPONSE_PA as u32),
            (mb::REG_RESPONSE_BASE_HI, (RESPONSE_PA >> 32) as u32),
        ] {
            g.dev.fw_write_reg(reg, v, at);
        }
        g.drv.fwio.next_seq = g.drv.fwio.next_seq.wrapping_add(1).max(1);
        let seq = g.drv.fwio.next_seq;
        let req = encode_request(seq, cmd, data).ok_or(Errno::EINVAL)?;
        let answer = match g.dev.fw_request(at, &req) {
            Outcome::Answered { response, done_at } if done_at.0 - at.0 <= TIMEOUT.0 => {
                // The driver sees it at its first 1 ms poll at or after the firmware is done.
                let polls = (done_at.0 - at.0).div_ceil(POLL.0);
                g.drv.fwio.clock = at + Ps(polls * POLL.0);
                decode_response(cmd, &response).filter(|r| r.seq == seq)
            }
            _ => None,
        };
        let Some(r) = answer else {
            // No response with our sequence number in time: the attempt timed out.
            g.drv.fwio.clock = at + TIMEOUT;
            if cmd != mb::CMD_POST_TO_CW {
                tracing::warn!(target: "KDRV", "fw_io: seq: {seq}, cmd: {cmd} timed out");
            }
            continue;
        };
        if r.error == mb::FW_IO_SUCCESS {
            g.drv.fwio.last_request = g.drv.fwio.clock - start;
            return Ok(r.data);
        }
        g.drv.fwio.err_count += 1;
        tracing::warn!(target: "KDRV", "fw_io: seq: {seq}, cmd: {cmd} failed {}", r.error);
        if r.error == mb::FW_IO_UNKNOWN_COMMAND {
            break;
        }
    }
    g.drv.fwio.last_request = now(g) - start;
    Err(Errno::EIO)
}

/// `fw_io_initiate_reset` and the wait that follows: a TPB reset of the cores in `nc_map`
/// (bit n: core n), or a device reset. The firmware resets the cores; `false` if it never
/// finished (then the driver counts a failed reset).
pub(crate) fn reset(g: &mut DevState, device: bool, nc_map: u32, v3: bool) -> bool {
    let at = now(g);
    let kind = if device {
        mb::RESET_TYPE_DEVICE
    } else {
        // v3 partial-reset map: TPB n | SDMA group n+8 | TOP_SP group n+16; v2: TPB n.
        let tpbs = nc_map & 0xff;
        let map = if v3 {
            tpbs | tpbs << 8 | tpbs << 16
        } else {
            tpbs
        };
        g.dev.fw_write_reg(mb::REG_RESET_TPB_MAP_LO, map, at);
        mb::RESET_TYPE_TPB
    };
    g.dev.fw_write_reg(mb::REG_RESET, kind, at);
    if g.dev.fw_write_reg(mb::REG_TRIGGER, 0, at).is_none() {
        return false;
    }
    // Poll 0x1ec every 100 ms until it reads 0, then 0x808 until bit 3 clears (bounded).
    let mut t = at;
    let fw = |g: &DevState, m, t| g.dev.firmware().read_reg(m, t).unwrap_or(0);
    while fw(g, mb::REG_RESET, t) != 0
        || fw(g, mb::REG_FW_STATUS, t) & mb::FW_STATUS_RESET_BUSY != 0
    {
        if t.0 - at.0 >= RESET_GIVE_UP.0 {
            g.drv.fwio.clock = t;
            return false;
        }
        t += RESET_POLL;
    }
    g.drv.fwio.clock = t;
    g.drv.fwio.last_reset = t - at;
    true
}

/// `fw_io_post_metric`: at most 128 bytes (else `E2BIG`), copied to the misc-RAM metric buffer
/// and posted with POST_TO_CW.
pub(crate) fn post_metric(g: &mut DevState, blob: &[u8]) -> Result<(), Errno> {
    if blob.len() > mb::METRIC_BUF {
        return Err(Errno::E2BIG);
    }
    let at = now(g);
    write_window(g, blob, at);
    execute(g, mb::CMD_POST_TO_CW, blob).map(|_| ())
}

/// Store `bytes` into the misc-RAM data window, a dword at a time (the tail zero-padded).
fn write_window(g: &mut DevState, bytes: &[u8], at: Ps) {
    for (i, c) in bytes.chunks(4).take(mb::DATA_WINDOW / 4).enumerate() {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        g.dev
            .fw_write_reg(mb::REG_DATA + 4 * i as u64, u32::from_le_bytes(w), at);
    }
}

/// The inline protocol's per-command response timeout and attempts (`fw_io_cmd_timeout_tbl`,
/// `fw_io_cmd_retry_tbl`): a power-profile change may take the firmware 90 s.
fn inline_limits(cmd: u8) -> (Ps, usize) {
    const S: u64 = 1_000_000_000_000;
    match cmd {
        mb::CMD_READ | mb::CMD_POST_TO_CW => (Ps(S), 15),
        mb::CMD_SET_POWER_PROFILE => (Ps(90 * S), 3),
        mb::CMD_GET_DATA => (Ps(10 * S), 3),
        mb::CMD_SET_FEATURE => (Ps(60 * S), 3),
        _ => (TIMEOUT, RETRIES),
    }
}

/// `fw_io_execute_request_new`: `ENOTSUPP` below firmware API 7; else per attempt a fresh
/// sequence number, the data into the window, the header into 0x1f0/0x1f4, 0x1f8/0x1fc
/// zeroed, ACK 0xf0 = 1, trigger; poll 0x800 every 1 ms until the firmware clears it, then
/// read the response header from 0x1f0 and at most `resp_size` data bytes from the window.
/// `EIO` once every attempt failed or the command is unknown.
pub(crate) fn execute_inline(
    g: &mut DevState,
    cmd: u8,
    data: &[u8],
    resp_size: usize,
) -> Result<Vec<u8>, Errno> {
    let fw = |g: &DevState, m, t| g.dev.firmware().read_reg(m, t).unwrap_or(0);
    if fw(g, mb::REG_API_VERSION, now(g)) < 7 {
        return Err(Errno::ENOTSUPP);
    }
    if data.len() > mb::DATA_WINDOW {
        return Err(Errno::EINVAL);
    }
    let (timeout, attempts) = inline_limits(cmd);
    let start = now(g);
    for _ in 0..attempts {
        let at = now(g);
        g.drv.fwio.next_seq = g.drv.fwio.next_seq.wrapping_add(1).max(1);
        let seq = g.drv.fwio.next_seq;
        let req = encode_request(seq, cmd, data).ok_or(Errno::EINVAL)?;
        let dw = |i: usize| u32::from_le_bytes([req[i], req[i + 1], req[i + 2], req[i + 3]]);
        write_window(g, data, at);
        for (reg, v) in [
            (mb::REG_REQUEST_BASE_HI, dw(0)),
            (mb::REG_REQUEST_BASE_LO, dw(4)),
            (mb::REG_RESPONSE_BASE_HI, 0),
            (mb::REG_RESPONSE_BASE_LO, 0),
            (mb::REG_ACK, 1),
            (mb::REG_TRIGGER, 1),
        ] {
            g.dev.fw_write_reg(reg, v, at);
        }
        // Poll the trigger every 1 ms, bounded by the command's timeout.
        let mut t = at;
        while fw(g, mb::REG_TRIGGER, t) != 0 && t.0 - at.0 < timeout.0 {
            let left = g.dev.firmware().inline_busy_until().0.saturating_sub(t.0);
            t += Ps(left.div_ceil(POLL.0).max(1) * POLL.0);
        }
        g.drv.fwio.clock = t;
        if fw(g, mb::REG_TRIGGER, t) != 0 {
            tracing::warn!(target: "KDRV", "fw_io: seq: {seq}, cmd: {cmd} timed out");
            continue;
        }
        let hdr = fw(g, mb::REG_REQUEST_BASE_HI, t).to_le_bytes();
        if hdr[0] != seq {
            continue;
        }
        let error = hdr[1];
        if error == mb::FW_IO_SUCCESS {
            let size = u16::from_le_bytes([hdr[2], hdr[3]]) as usize;
            let n = size.saturating_sub(mb::RESP_HEADER_NEW).min(resp_size);
            let mut out = g.dev.firmware().data_window();
            out.truncate(n);
            g.drv.fwio.last_request = g.drv.fwio.clock - start;
            return Ok(out);
        }
        g.drv.fwio.err_count += 1;
        tracing::warn!(target: "KDRV", "fw_io: seq: {seq}, cmd: {cmd} failed {error}");
        if error == mb::FW_IO_UNKNOWN_COMMAND {
            break;
        }
    }
    g.drv.fwio.last_request = now(g) - start;
    Err(Errno::EIO)
}

/// `fw_io_set_power_profile`: SET_POWER_PROFILE with `{reserved u32, profile, voltage margin,
/// frequency index, OCW index}`; the last three are left 0 (the driver passes only a profile).
pub(crate) fn set_power_profile(g: &mut DevState, profile: u32) -> Result<(), Errno> {
    let mut rec = [0u8; 8];
    rec[4] = profile as u8;
    execute_inline(g, mb::CMD_SET_POWER_PROFILE, &rec, 0).map(|_| ())
}

/// `fw_io_get_performance_profile`: GET_DATA type 1; the profile byte of the answer.
pub(crate) fn get_performance_profile(g: &mut DevState) -> Result<u32, Errno> {
    let r = execute_inline(g, mb::CMD_GET_DATA, &[mb::GET_DATA_PERF_PROFILE], 8)?;
    r.get(4).map(|p| *p as u32).ok_or(Errno::EIO)
}

/// `fw_io_get_available_profiles`: GET_DATA type 2 with the feature asked about; the number
/// of profiles and their 32-byte bitmap.
pub(crate) fn get_available_profiles(
    g: &mut DevState,
    feature: u16,
) -> Result<(u8, [u8; 32]), Errno> {
    let f = feature.to_le_bytes();
    let req = [mb::GET_DATA_AVAILABLE_PROFILES, f[0], f[1]];
    let r = execute_inline(g, mb::CMD_GET_DATA, &req, 33)?;
    let mut bitmap = [0u8; 32];
    let n = *r.first().ok_or(Errno::EIO)?;
    for (d, s) in bitmap.iter_mut().zip(r.iter().skip(1)) {
        *d = *s;
    }
    Ok((n, bitmap))
}

/// `fw_io_enable_throttling_notifications`: SET_FEATURE with the whole bitmap (there is no
/// GET_FEATURE to merge with), bit 0 set or clear.
pub(crate) fn enable_throttling_notifications(g: &mut DevState, on: bool) -> Result<(), Errno> {
    let bits = if on {
        mb::FEATURE_THROTTLING_NOTIFICATIONS
    } else {
        0
    };
    execute_inline(g, mb::CMD_SET_FEATURE, &bits.to_le_bytes(), 0).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::super::bar::tests::one_reg;
    use super::super::info::BAR0_KVA;
    use super::super::testutil::Bench;
    use super::*;
    use neuron_abi::arch::Arch;
    use neuron_abi::ioctl::*;
    use neuron_abi::structs::*;

    fn misc(arch: Arch, m: u64) -> u64 {
        BAR0_KVA + arch.misc_ram_bar0_offset() + m
    }

    fn bar_read(b: &Bench, arch: Arch, m: u64) -> u32 {
        let addr = b.mem.put(&misc(arch, m));
        let out = b.mem.zeroed(4);
        assert_eq!(b.run(NEURON_IOCTL_BAR_READ, &one_reg(addr, out)), Ok(0));
        u32::from_le_bytes(b.mem.bytes(out, 4).try_into().expect("4 bytes"))
    }

    /// READ_HW_COUNTERS is one fw-io READ: the firmware reads the device (an HBM word written
    /// before, 0 where nothing answers), the driver sees the answer at its first 1 ms poll,
    /// and the request and response buffer addresses are programmed in misc RAM.
    #[test]
    fn read_hw_counters_goes_through_the_mailbox() {
        let b = Bench::v3();
        let arch = Arch::V3Trn2;
        let hbm = arch.hbm_bases()[0] + 0x1000;
        let src = b.mem.put(&0xfeed_beefu32);
        let p = ProgramEngineNc64 {
            dst: hbm,
            buffer: src,
            size: 4,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &p), Ok(0));
        let addrs = b.mem.put(&[hbm, 1u64 << 60]);
        let out = b.mem.zeroed(8);
        let a = ReadHwCounters {
            address: addrs,
            data: out,
            count: 2,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_READ_HW_COUNTERS, &a), Ok(0));
        assert_eq!(
            b.mem.bytes(out, 8),
            [0xfeed_beefu32.to_le_bytes(), [0; 4]].concat()
        );
        let g = b.emu.devices[0].lock();
        assert_eq!(g.dev.firmware().stats.requests, 1);
        assert_eq!(g.dev.firmware().request_base, REQUEST_PA);
        assert_eq!(
            g.drv.fwio.last_request, POLL,
            "answered within the first poll"
        );
        assert_eq!(g.dev.now(), Ps::ZERO, "the device clock did not move");
        drop(g);
        assert_eq!(
            bar_read(&b, arch, mb::REG_RESPONSE_BASE_LO),
            RESPONSE_PA as u32
        );
        assert_eq!(
            bar_read(&b, arch, mb::REG_RESPONSE_BASE_HI),
            (RESPONSE_PA >> 32) as u32
        );
    }

    /// POST_METRIC is a POST_TO_CW of at most 128 bytes.
    #[test]
    fn post_metric_goes_through_the_mailbox() {
        let b = Bench::v3();
        let blob = b.mem.put_bytes(&[7u8; 129]);
        let p = PostMetric {
            data: blob,
            data_size: 128,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_POST_METRIC, &p), Ok(0));
        let p = PostMetric {
            data_size: 129,
            ..p
        };
        assert_eq!(b.run(NEURON_IOCTL_POST_METRIC, &p), Err(Errno::E2BIG));
        let g = b.emu.devices[0].lock();
        assert_eq!(g.dev.firmware().last_metric, [7u8; 128]);
        assert_eq!(g.dev.firmware().stats.metrics_posted, 1);
    }

    /// An error response is retried while it is FW_IO_FAIL (30 attempts, then EIO) and not at
    /// all when the command is unknown; the driver counts each failed response.
    #[test]
    fn failed_and_unknown_commands_reach_the_caller_as_eio() {
        let b = Bench::v3();
        let mut g = b.emu.devices[0].lock();
        assert_eq!(execute(&mut g, mb::CMD_READ, &[]), Err(Errno::EIO));
        assert_eq!(g.drv.fwio.err_count, RETRIES as u64);
        assert_eq!(execute(&mut g, 9, &[]), Err(Errno::EIO));
        assert_eq!(g.drv.fwio.err_count, RETRIES as u64 + 1);
        assert_eq!(g.dev.firmware().stats.unknown_command, 1);
        // Sequence numbers wrap past 255 without ever being 0.
        for _ in 0..300 {
            assert!(execute(&mut g, mb::CMD_POST_TO_CW, b"m").is_ok());
        }
        assert_ne!(g.drv.fwio.next_seq, 0);
    }

    /// NC_RESET is the firmware handshake: the TPB map (v3: TPB, SDMA and TOP_SP bits) in
    /// 0x1d8, type 2 in 0x1ec, trigger; 0x1ec reads 0 and 0x808 bit 3 is clear at the driver's
    /// first 100 ms poll; the firmware reset the core (its microcode memories too).
    #[test]
    fn nc_reset_is_the_firmware_handshake() {
        let b = Bench::v3();
        let arch = Arch::V3Trn2;
        let iram = arch.tpb_sbuf_mmap_offset(1).expect("nc1") + neuron_abi::tpb::GPSIMD_IRAM;
        let src = b.mem.put(&[1u8; 16]);
        let p = ProgramEngineNc64 {
            nc_id: 1,
            dst: iram,
            buffer: src,
            size: 16,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &p), Ok(0));
        assert!(b.emu.devices[0]
            .lock()
            .dev
            .ucode(1)
            .expect("nc1")
            .clone()
            .check()
            .is_err());
        let r = DeviceReset {
            nc_map: 1 << 1,
            request_id: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_NC_RESET, &r), Ok(0));
        assert_eq!(bar_read(&b, arch, mb::REG_RESET_TPB_MAP_LO), 0x2_0202);
        assert_eq!(bar_read(&b, arch, mb::REG_RESET), 0);
        assert_eq!(
            bar_read(&b, arch, mb::REG_FW_STATUS) & mb::FW_STATUS_RESET_BUSY,
            0
        );
        let mut g = b.emu.devices[0].lock();
        assert_eq!(g.drv.fwio.last_reset, RESET_POLL);
        assert_eq!(
            g.dev.ucode(1).expect("nc1").clone().check(),
            Ok(()),
            "reset"
        );
        assert_eq!(g.drv.reset_req[1], 1);
        // A device reset takes longer: the driver polls until the firmware is done.
        assert!(reset(&mut g, true, 0, true));
        assert_eq!(
            g.drv.fwio.last_reset.0,
            (mb::RESET_DEVICE.0 + mb::RESET_STATUS_BUSY.0).div_ceil(RESET_POLL.0) * RESET_POLL.0
        );
        assert_eq!(g.dev.now(), Ps::ZERO);
    }

    /// User BAR_WRITEs to the mailbox registers (buffer addresses, trigger) are refused.
    #[test]
    fn user_bar_writes_to_the_mailbox_are_blocked() {
        let b = Bench::v3();
        let arch = Arch::V3Trn2;
        let val = b.mem.put(&1u32);
        for m in [0x1f0, 0x1f4, 0x1f8, 0x1fc, mb::REG_TRIGGER] {
            let addr = b.mem.put(&misc(arch, m));
            let w = BarRw {
                bar: 0,
                address: addr,
                data: val,
                count: 1,
                ..Default::default()
            };
            assert_eq!(
                b.run(NEURON_IOCTL_BAR_WRITE, &w),
                Err(Errno::EINVAL),
                "0x{m:x}"
            );
        }
        assert_eq!(b.emu.devices[0].lock().dev.firmware().request_base, 0);
    }

    /// POWER_PROFILE / GET_PERFORMANCE_PROFILE / AVAILABLE_PERF_PROFILES on v3 are inline
    /// fw-io requests: the firmware holds the profile, the driver saw each answer when it
    /// found the trigger cleared at a 1 ms poll, and the device clock never moved.
    #[test]
    fn power_profiles_go_through_the_inline_protocol() {
        let b = Bench::v3();
        let set = PowerProfile {
            sz: 8,
            ctrl: 0,
            profile: 4,
        };
        assert_eq!(b.run(NEURON_IOCTL_POWER_PROFILE, &set), Ok(0));
        {
            let g = b.emu.devices[0].lock();
            assert_eq!(g.dev.firmware().perf_profile[0], 4);
            assert_eq!(g.dev.firmware().stats.requests, 1);
            assert_eq!(g.drv.fwio.last_request, POLL);
            assert_eq!(g.dev.now(), Ps::ZERO);
        }
        let get = PowerProfile { ctrl: 1, ..set };
        let (r, v) = b.io(NEURON_IOCTL_GET_PERFORMANCE_PROFILE, &get);
        assert_eq!((r, v.profile), (Ok(0), 4));
        let (r, v) = b.io(
            NEURON_IOCTL_AVAILABLE_PERF_PROFILES,
            &AvailablePerfProfiles::default(),
        );
        assert_eq!((r, v.num_profiles, v.bitmap[0]), (Ok(0), 1, 1));
        assert_eq!(b.emu.devices[0].lock().dev.firmware().stats.requests, 3);
        // The response header is left in 0x1f0: the last request's sequence number, success.
        let hdr = bar_read(&b, Arch::V3Trn2, mb::REG_REQUEST_BASE_HI).to_le_bytes();
        assert_eq!(
            (hdr[0], hdr[1]),
            (b.emu.devices[0].lock().drv.fwio.next_seq, 0)
        );
        assert_eq!(bar_read(&b, Arch::V3Trn2, mb::REG_TRIGGER), 0);
    }

    /// THROTTLING_NOTIFICATIONS is SET_FEATURE of the whole bitmap, bit 0 on or off.
    #[test]
    fn throttling_notifications_set_the_firmware_feature() {
        let b = Bench::v3();
        let on = ThrottlingNotifications { enable: 1 };
        assert_eq!(b.run(NEURON_IOCTL_THROTTLING_NOTIFICATIONS, &on), Ok(0));
        assert_eq!(
            b.emu.devices[0].lock().dev.firmware().features,
            mb::FEATURE_THROTTLING_NOTIFICATIONS
        );
        let off = ThrottlingNotifications { enable: 0 };
        assert_eq!(b.run(NEURON_IOCTL_THROTTLING_NOTIFICATIONS, &off), Ok(0));
        assert_eq!(b.emu.devices[0].lock().dev.firmware().features, 0);
    }

    /// Firmware older than API 7 has no inline protocol: ENOTSUPP, nothing sent.
    #[test]
    fn inline_requests_need_firmware_api_7() {
        let b = Bench::v3();
        b.emu.devices[0]
            .lock()
            .dev
            .firmware_mut()
            .api_version_override = Some(6);
        assert_eq!(bar_read(&b, Arch::V3Trn2, mb::REG_API_VERSION), 6);
        let set = PowerProfile {
            sz: 8,
            ctrl: 0,
            profile: 1,
        };
        assert_eq!(
            b.run(NEURON_IOCTL_POWER_PROFILE, &set),
            Err(Errno::ENOTSUPP)
        );
        assert_eq!(b.emu.devices[0].lock().dev.firmware().stats.requests, 0);
    }

    /// POST_METRIC stages the blob in the misc-RAM data window before posting it.
    #[test]
    fn post_metric_stages_the_blob_in_misc_ram() {
        let b = Bench::v3();
        let blob = b.mem.put_bytes(b"cw-metric");
        let p = PostMetric {
            data: blob,
            data_size: 9,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_POST_METRIC, &p), Ok(0));
        assert_eq!(
            bar_read(&b, Arch::V3Trn2, mb::REG_DATA),
            u32::from_le_bytes(*b"cw-m")
        );
        assert_eq!(
            bar_read(&b, Arch::V3Trn2, mb::REG_DATA + 8),
            u32::from(b'c')
        );
    }
}
