//! `nrt_set_pool_eng_ucode` through the C ABI (called from Rust): its argument checks, and a
//! valid override before `nrt_init` staged onto the cores, refused after it. Its own test
//! binary: the override is process-global.
// These tests call the C ABI directly, which is unsafe by nature.
#![allow(unsafe_code)]

use nrt::*;
use std::ptr::null;

const INVALID: u32 = 2;

fn img(b: &[u8]) -> NrtUcodeImg {
    NrtUcodeImg {
        bin: if b.is_empty() { null() } else { b.as_ptr() },
        size: b.len(),
    }
}

#[test]
fn set_pool_eng_ucode_checks_then_overrides_until_init() {
    let (i, d) = (
        neuron_firmware_loader::reference::iram(),
        neuron_firmware_loader::reference::dram(),
    );
    let info = |iram: NrtUcodeImg, dram: NrtUcodeImg| NrtUcodeInfo { iram, dram };
    // SAFETY: every pointer below is null or a live slice of the given size.
    unsafe {
        assert_eq!(nrt_set_pool_eng_ucode(null()), INVALID, "NULL info");
        let no_bin = NrtUcodeImg {
            bin: null(),
            size: 4,
        };
        assert_eq!(nrt_set_pool_eng_ucode(&info(no_bin, img(&d))), INVALID);
        assert_eq!(
            nrt_set_pool_eng_ucode(&info(img(&[]), img(&d))),
            INVALID,
            "no IRAM"
        );
        let huge = vec![0u8; (1 << 20) + 1];
        assert_eq!(nrt_set_pool_eng_ucode(&info(img(&huge), img(&d))), INVALID);
        assert_eq!(nrt_set_pool_eng_ucode(&info(img(&i), img(&d))), 0);
    }
    std::env::set_var("NEURON_EMU", "1");
    std::env::remove_var("NEURON_EMU_UCODE_PATH");
    let e = c"";
    // SAFETY: valid C strings; the library was initialised just above for the late call.
    unsafe {
        assert_eq!(nrt_init(1, e.as_ptr(), e.as_ptr()), 0);
        assert_eq!(
            nrt_set_pool_eng_ucode(&info(img(&i), img(&d))),
            INVALID,
            "after init"
        );
        nrt_close();
    }
}
