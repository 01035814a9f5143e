//! Register and engine-memory access: BAR_READ / BAR_WRITE, READ_HW_COUNTERS (a fw-io READ
//! through the firmware mailbox) and PROGRAM_ENGINE / _NC / _NC64 folded into one request
//! (`driver-abi.md` §2.3, §2.4, §3.7).

use super::copy::{with_bounce, COPY_BLOCK};
use super::info::{bar0_size, routing_id, BAR0_KVA};
use super::{fwio, Ctx, R};
use crate::DevState;
use neuron_abi::arch::Arch;
use neuron_abi::consts::{BAR_RW_MAX_REGISTERS, SEMA_PAGE_SIZE, TPB_SEMA_PAGE_OFFSET};
use neuron_abi::ioctl::*;
use neuron_abi::structs::*;
use neuron_abi::Errno;
use neuron_devmodel::firmware::mailbox::CMD_READ;
use zerocopy::IntoBytes;

#[derive(Debug)]
pub(crate) enum Req {
    Bar {
        a: BarRw,
        read: bool,
    },
    HwCounters(ReadHwCounters),
    Program {
        nc: u32,
        dst: u64,
        buffer: u64,
        size: u64,
        offset: u64,
    },
}

impl Req {
    pub(crate) fn decode(cx: &Ctx, cmd: u32) -> Option<Result<Req, Errno>> {
        let bar = |read: bool| {
            let a = cx.arg::<cmd::BAR_READ>()?;
            if a.bar != 0 && !(read && a.bar == 2) {
                return Err(Errno::EINVAL);
            }
            if a.count > BAR_RW_MAX_REGISTERS {
                return Err(Errno::EINVAL);
            }
            Ok(Req::Bar { a, read })
        };
        Some(match cmd {
            NEURON_IOCTL_BAR_READ => bar(true),
            NEURON_IOCTL_BAR_WRITE => bar(false),
            NEURON_IOCTL_READ_HW_COUNTERS => cx.arg::<cmd::READ_HW_COUNTERS>().and_then(|a| {
                if a.count > BAR_RW_MAX_REGISTERS {
                    return Err(Errno::EINVAL);
                }
                Ok(Req::HwCounters(a))
            }),
            NEURON_IOCTL_PROGRAM_ENGINE => cx.arg::<cmd::PROGRAM_ENGINE>().map(|a| Req::Program {
                nc: 0,
                dst: a.dst,
                buffer: a.buffer,
                size: a.size as u64,
                offset: a.offset as u64,
            }),
            NEURON_IOCTL_PROGRAM_ENGINE_NC => {
                cx.arg::<cmd::PROGRAM_ENGINE_NC>().map(|a| Req::Program {
                    nc: a.nc_id,
                    dst: a.dst,
                    buffer: a.buffer,
                    size: a.size as u64,
                    offset: a.offset as u64,
                })
            }
            NEURON_IOCTL_PROGRAM_ENGINE_NC64 => {
                cx.arg::<cmd::PROGRAM_ENGINE_NC64>().map(|a| Req::Program {
                    nc: a.nc_id,
                    dst: a.dst,
                    buffer: a.buffer,
                    size: a.size,
                    offset: a.offset,
                })
            }
            _ => return None,
        })
    }

    pub(crate) fn handle(self, cx: &Ctx) -> R {
        match self {
            Req::Bar { a, read } => bar_rw(cx, a, read),
            Req::HwCounters(a) => {
                let mut addrs = vec![0u64; a.count as usize];
                cx.copy_in(a.address, addrs.as_mut_bytes())?;
                if addrs.is_empty() {
                    return Ok(0);
                }
                // fw_io_read_counters: one READ request through the firmware mailbox.
                let vals = fwio::execute(&mut cx.lock(), CMD_READ, addrs.as_bytes())?;
                cx.copy_out(a.data, &vals).map(|_| 0)
            }
            Req::Program {
                nc,
                dst,
                buffer,
                size,
                offset,
            } => program_engine(cx, nc, dst, buffer, size, offset),
        }
    }
}

/// The UDMA engine bases in BAR0 and each engine's span (`driver-abi.md` §3.7).
fn udma_engines(arch: Arch) -> Vec<(u64, u64)> {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => {
            let mut v: Vec<(u64, u64)> = (0..16u64)
                .flat_map(|e| {
                    [
                        (0x3000_0000 + e * 0x4_0000, 0x4_0000),
                        (0x3070_0000 + e * 0x4_0000, 0x4_0000),
                    ]
                })
                .collect();
            v.push((0x3060_0000, 0x4_0000));
            v.push((0x30d0_0000, 0x4_0000));
            v
        }
        Arch::V3Trn2 => {
            let mut v: Vec<(u64, u64)> = [0x8200_0000u64, 0x9400_0000, 0xa200_0000, 0xb400_0000]
                .iter()
                .flat_map(|s| (0..32u64).map(move |e| (s + e * 0x10_0000, 0x4_0000)))
                .collect();
            for b in [0x680_0000u64, 0x690_0000, 0x4680_0000, 0x4690_0000] {
                v.push((b, 0x4_0000));
            }
            v
        }
    }
}

/// Whether a BAR_WRITE to BAR0 offset `off` is one the driver blocks: a UDMA queue's ring base
/// (DRBP/CRBP low/high) or tail increment (DRTP_INC), or the firmware mailbox registers.
fn bar_write_blocked(arch: Arch, off: u64) -> bool {
    let misc = arch.misc_ram_bar0_offset();
    if let Some(m) = off.checked_sub(misc) {
        if (0x1f0..0x200).contains(&m) || m == 0x800 {
            return true;
        }
    }
    udma_engines(arch).iter().any(|&(b, span)| {
        let Some(rel) = off.checked_sub(b).filter(|r| *r < span) else {
            return false;
        };
        let q = if (0x1000..0x1_1000).contains(&rel) {
            rel - 0x1000
        } else if (0x2_1000..0x3_1000).contains(&rel) {
            rel - 0x2_1000
        } else {
            return false;
        };
        matches!(q % 0x1000, 0x28 | 0x2c | 0x38 | 0x44 | 0x48)
    })
}

/// Misc-RAM words a runtime may write (runtime-reserved ranges, `driver-abi.md` §7.1).
fn misc_ram_writable(m: u64) -> bool {
    (0xc0..=0xf0).contains(&m) || (0x1a0..=0x1d0).contains(&m)
}

/// The core whose register page holds BAR0 offset `off`, and the offset in the page.
fn reg_page_of(arch: Arch, off: u64) -> Option<(u32, u64)> {
    (0..arch.nc_count()).find_map(|nc| {
        let page = arch.tpb_bar0_offset(nc)? + TPB_SEMA_PAGE_OFFSET;
        // Checked: an offset below the page must not underflow (it is the caller's input).
        let rel = off.checked_sub(page).filter(|r| *r < SEMA_PAGE_SIZE)?;
        Some((nc, rel))
    })
}

fn bar_read_reg(g: &DevState, arch: Arch, index: usize, off: u64) -> u32 {
    if let Some((nc, rel)) = reg_page_of(arch, off) {
        return g
            .dev
            .regs(nc as usize)
            .and_then(|r| r.read_reg(rel))
            .unwrap_or(0);
    }
    if let Some(m) = off.checked_sub(arch.misc_ram_bar0_offset()) {
        match m {
            0x24 => return routing_id(arch, index as u32),
            0x38 => return 0x4e45_0000 | index as u32, // serial number, low word (made up)
            0x3c => return 0x0000_0e31,                // serial number, high word (made up)
            _ if misc_ram_writable(m) => return g.drv.misc_ram.get(&m).copied().unwrap_or(0),
            // The mailbox and reset registers are the firmware's.
            _ => {
                if let Some(v) = g.dev.firmware().read_reg(m, fwio::now(g)) {
                    return v;
                }
            }
        }
    }
    0
}

fn bar_rw(cx: &Ctx, a: BarRw, read: bool) -> R {
    let arch = cx.arch();
    // bar 0: one absolute address per register; bar 2: one base, registers in sequence.
    let n_addr = if a.bar == 0 { a.count as usize } else { 1 };
    let mut addrs = vec![0u64; n_addr];
    cx.copy_in(a.address, addrs.as_mut_bytes())?;
    let size = bar0_size(arch);
    let offs: Vec<u64> = (0..a.count as u64)
        .map(|i| {
            let kva = if a.bar == 0 {
                addrs[i as usize]
            } else {
                addrs.first().copied().unwrap_or(0).wrapping_add(4 * i)
            };
            kva.checked_sub(BAR0_KVA)
                .filter(|o| *o + 4 <= size && o % 4 == 0)
                .ok_or(Errno::EINVAL)
        })
        .collect::<Result<_, _>>()?;
    if read {
        let g = cx.lock();
        let vals: Vec<u32> = offs
            .iter()
            .map(|&o| bar_read_reg(&g, arch, cx.index(), o))
            .collect();
        drop(g);
        return cx.copy_out(a.data, vals.as_bytes()).map(|_| 0);
    }
    let mut vals = vec![0u32; a.count as usize];
    cx.copy_in(a.data, vals.as_mut_bytes())?;
    if offs.iter().any(|&o| bar_write_blocked(arch, o)) {
        return Err(Errno::EINVAL);
    }
    let mut g = cx.lock();
    for (&o, &v) in offs.iter().zip(&vals) {
        let mut done = false;
        if let Some((nc, rel)) = reg_page_of(arch, o) {
            g.dev.reg_write(nc as usize, rel, v);
            done = true;
        }
        if let Some(m) = o.checked_sub(arch.misc_ram_bar0_offset()) {
            if !done && misc_ram_writable(m) {
                g.drv.misc_ram.insert(m, v);
            }
        }
        // Other registers accept the store and keep nothing (not modelled).
    }
    cx.kick_with(g);
    Ok(0)
}

/// PROGRAM_ENGINE destinations (`driver-abi.md` §2.4, "program-engine regions"): v2 the two
/// TPB windows and the six TOP_SP windows; v3 the eight TPB device ranges and the HBMs (the
/// TOP_SP and PREPROC ranges of v3 are not listed in the reference and are left out).
fn program_regions(arch: Arch) -> Vec<(u64, u64)> {
    match arch {
        Arch::V2Trn1 | Arch::V2Inf2 => {
            vec![
                (0xfff_c000_0000, 2 * 0x400_0000),
                (0xfff_d000_0000, 6 * 0x40_0000),
            ]
        }
        Arch::V3Trn2 => {
            let mut v: Vec<(u64, u64)> = [
                0x20_0000_0000u64,
                0x30_0000_0000,
                0x60_0000_0000,
                0x70_0000_0000,
                0x8020_0000_0000,
                0x8030_0000_0000,
                0x8060_0000_0000,
                0x8070_0000_0000,
            ]
            .iter()
            .map(|&b| (b, 0x8_0400_0000))
            .collect();
            v.extend(arch.hbm_bases().iter().map(|&b| (b, arch.hbm_size())));
            v
        }
    }
}

/// Every bound is checked before anything moves; the data streams in bounded blocks.
fn program_engine(cx: &Ctx, nc: u32, dst: u64, buffer: u64, size: u64, offset: u64) -> R {
    let arch = cx.arch();
    let at = dst.checked_add(offset).ok_or(Errno::ENOMEM)?;
    let end = at.checked_add(size).ok_or(Errno::ENOMEM)?;
    if !program_regions(arch)
        .iter()
        .any(|&(b, l)| at >= b && end <= b + l)
    {
        return Err(Errno::ENOMEM);
    }
    if size == 0 || nc >= arch.nc_count() {
        // The bounce buffer allocation fails (size 0) or has no H2T queue (bad nc).
        return Err(Errno::ENOMEM);
    }
    let src = buffer.checked_add(offset).ok_or(Errno::EFAULT)?;
    with_bounce(size as usize, |tmp| {
        let mut done = 0u64;
        while done < size {
            let n = ((size - done) as usize).min(COPY_BLOCK);
            let t = &mut tmp[..n];
            cx.copy_in(src + done, t)?;
            cx.lock().dev.write(at + done, t).map_err(|_| Errno::EIO)?;
            done += n as u64;
        }
        Ok::<(), Errno>(())
    })?;
    cx.kick();
    Ok(0)
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::testutil::Bench;
    use super::*;

    /// A BAR_READ / BAR_WRITE of one BAR0 register: `address` and `data` are user pointers.
    pub(in crate::driver) fn one_reg(address: u64, data: u64) -> BarRw {
        BarRw {
            bar: 0,
            address,
            data,
            count: 1,
            ..Default::default()
        }
    }

    #[test]
    fn bar_reads_the_register_page_and_refuses_ring_registers() {
        let b = Bench::v3();
        let arch = Arch::V3Trn2;
        let page = arch.tpb_bar0_offset(0).expect("tpb") + TPB_SEMA_PAGE_OFFSET;
        let addr = b.mem.put(&(BAR0_KVA + page + 0x1400 + 4 * 3));
        let val = b.mem.put(&9u32);
        let w = one_reg(addr, val);
        assert_eq!(b.run(NEURON_IOCTL_BAR_WRITE, &w), Ok(0));
        let out = b.mem.zeroed(4);
        let addr_r = b.mem.put(&(BAR0_KVA + page + 0x1000 + 4 * 3));
        let r = BarRw {
            address: addr_r,
            data: out,
            ..w
        };
        assert_eq!(b.run(NEURON_IOCTL_BAR_READ, &r), Ok(0));
        assert_eq!(b.mem.bytes(out, 4), 9u32.to_le_bytes());
        // DRTP_INC of UDMA engine 0 queue 0 is the driver's to write.
        let ring = b.mem.put(&(BAR0_KVA + 0x8200_0000 + 0x1000 + 0x38));
        let blocked = BarRw { address: ring, ..w };
        assert_eq!(b.run(NEURON_IOCTL_BAR_WRITE, &blocked), Err(Errno::EINVAL));
        let many = BarRw { count: 101, ..r };
        assert_eq!(b.run(NEURON_IOCTL_BAR_READ, &many), Err(Errno::EINVAL));
        let bar2 = BarRw { bar: 2, ..w };
        assert_eq!(b.run(NEURON_IOCTL_BAR_WRITE, &bar2), Err(Errno::EINVAL));
        let unaligned = b.mem.put(&(BAR0_KVA + 2));
        let r = BarRw {
            address: unaligned,
            ..r
        };
        assert_eq!(b.run(NEURON_IOCTL_BAR_READ, &r), Err(Errno::EINVAL));
    }

    #[test]
    fn program_engine_bounds_before_data() {
        let b = Bench::v3();
        let hbm = Arch::V3Trn2.hbm_bases()[0];
        let src = b.mem.put_bytes(&[3u8; 64]);
        let p = ProgramEngineNc64 {
            nc_id: 0,
            dst: hbm,
            buffer: src,
            size: 64,
            offset: 0,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &p), Ok(0));
        // Outside every region, overflowing, empty, or on a bad core: ENOMEM as the driver.
        for bad in [
            ProgramEngineNc64 { dst: 1 << 52, ..p },
            ProgramEngineNc64 {
                size: u64::MAX,
                ..p
            },
            ProgramEngineNc64 { size: 0, ..p },
            ProgramEngineNc64 { nc_id: 99, ..p },
        ] {
            assert_eq!(
                b.run(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &bad),
                Err(Errno::ENOMEM),
                "{bad:?}"
            );
        }
        // A huge program from a short buffer faults on its first block.
        let huge = ProgramEngineNc64 {
            dst: 0x20_0000_0000,
            size: 1 << 34,
            ..p
        };
        assert_eq!(
            b.run(NEURON_IOCTL_PROGRAM_ENGINE_NC64, &huge),
            Err(Errno::EFAULT)
        );
        let v1 = ProgramEngine {
            dst: hbm,
            buffer: src,
            size: 64,
            offset: 0,
        };
        assert_eq!(b.run(NEURON_IOCTL_PROGRAM_ENGINE, &v1), Ok(0));
    }

    #[test]
    fn hw_counters_bounded() {
        let b = Bench::v3();
        let a = ReadHwCounters {
            count: 101,
            ..Default::default()
        };
        assert_eq!(b.run(NEURON_IOCTL_READ_HW_COUNTERS, &a), Err(Errno::EINVAL));
        // A read within the bound: `fwio::tests::read_hw_counters_goes_through_the_mailbox`.
    }
}
