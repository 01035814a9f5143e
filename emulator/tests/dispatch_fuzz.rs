//! Property test: arbitrary ioctls (known and random command values, random argument bytes with
//! sanitised pointers) on arbitrary process identities never panic and never hang the device,
//! and the emulator still works afterwards. The cargo-fuzz target `emulator/fuzz` runs the same
//! driver (`neuron_emulator::fuzzing`) unbounded.

use neuron_abi::arch::Arch;
use neuron_abi::ioctl::NEURON_IOCTL_DEVICE_BASIC_INFO;
use neuron_emulator::fuzzing::{pick_command, run_ioctl};
use neuron_emulator::{Emulator, OpenOptions};
use proptest::prelude::*;
use std::sync::OnceLock;

fn emulator(arch: Arch) -> &'static Emulator {
    static V2: OnceLock<Emulator> = OnceLock::new();
    static V3: OnceLock<Emulator> = OnceLock::new();
    match arch {
        Arch::V3Trn2 => V3.get_or_init(|| Emulator::new(arch, 2)),
        _ => V2.get_or_init(|| Emulator::new(arch, 2)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn random_ioctls_never_panic(
        v3 in any::<bool>(),
        dev in 0usize..2,
        pid in 1u32..5,
        misc in any::<bool>(),
        calls in prop::collection::vec(
            (any::<u32>(), any::<u32>(), prop::collection::vec(any::<u8>(), 0..96), prop::collection::vec(any::<u8>(), 0..64)),
            1..6,
        ),
    ) {
        let arch = if v3 { Arch::V3Trn2 } else { Arch::V2Trn1 };
        let emu = emulator(arch);
        let f = emu.open(dev, OpenOptions { pid, write_only: misc }).expect("open");
        for (sel, raw, arg, scratch) in &calls {
            let _ = run_ioctl(&f, pick_command(*sel, *raw), arg, scratch);
        }
        drop(f);
        // Still alive.
        let g = emu.open(0, OpenOptions { pid: 99, write_only: true }).expect("open");
        prop_assert!(run_ioctl(&g, NEURON_IOCTL_DEVICE_BASIC_INFO, &[0u8; 8], &[]).is_ok());
    }
}
