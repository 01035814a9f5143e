//! Fuzz the fake driver's ioctl dispatcher: each input is a short sequence of ioctls (command
//! value picked from `COMMANDS` or raw, argument bytes, scratch bytes) issued by one of a few
//! process identities on a normal or misc fd. User pointers inside the argument are sanitised
//! (0 or into a guarded scratch buffer) by `neuron_emulator::fuzzing::run_ioctl`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use neuron_abi::arch::Arch;
use neuron_emulator::fuzzing::{pick_command, run_ioctl};
use neuron_emulator::{Emulator, OpenOptions};
use std::sync::OnceLock;

fn emulator(v3: bool) -> &'static Emulator {
    static V2: OnceLock<Emulator> = OnceLock::new();
    static V3: OnceLock<Emulator> = OnceLock::new();
    if v3 {
        V3.get_or_init(|| Emulator::new(Arch::V3Trn2, 2))
    } else {
        V2.get_or_init(|| Emulator::new(Arch::V2Trn1, 2))
    }
}

fn u32_at(d: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = d.get(at + i).copied().unwrap_or(0);
    }
    u32::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let Some((&hdr, mut rest)) = data.split_first() else {
        return;
    };
    let emu = emulator(hdr & 1 == 1);
    let dev = ((hdr >> 1) & 1) as usize;
    let opts = OpenOptions {
        pid: 1 + ((hdr >> 2) & 3) as u32,
        write_only: hdr & 0x10 != 0,
    };
    let Ok(f) = emu.open(dev, opts) else {
        return;
    };
    // Records: sel u32, raw u32, arg_len u8, scratch_len u8, then the bytes.
    for _ in 0..8 {
        if rest.len() < 10 {
            break;
        }
        let cmd = pick_command(u32_at(rest, 0), u32_at(rest, 4));
        let (al, sl) = (rest[8] as usize, rest[9] as usize);
        rest = &rest[10..];
        let arg = &rest[..al.min(rest.len())];
        rest = &rest[arg.len()..];
        let scratch = &rest[..sl.min(rest.len())];
        rest = &rest[scratch.len()..];
        let _ = run_ioctl(&f, cmd, arg, scratch);
    }
});
