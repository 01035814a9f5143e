//! Every nrt.h entry point through the C ABI (called from Rust), each error status the layer
//! returns, the order rules, and the environment variables. The library keeps process-global
//! state, so the tests serialise on one lock.
// These tests call the C ABI directly, which is unsafe by nature.
#![allow(unsafe_code)]

use nrt::*;
use std::ffi::{c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const UNINIT: u32 = 13;
const CLOSED: u32 = 14;
const INVALID: u32 = 2;
const FAILURE: u32 = 1;

fn repo(p: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(p)
}

fn clean_env() {
    for v in [
        "NEURON_RT_VISIBLE_CORES",
        "NEURON_RT_NUM_CORES",
        "NEURON_RT_EXEC_TIMEOUT",
        "NEURON_RT_VALIDATE_HASH",
        "NEURON_EMU_ARCH",
        "NEURON_EMU_DEVICES",
        "NEURON_RT_RESET_CORES",
        "NEURON_EMU_LIB",
        "NEURON_LOGICAL_NC_CONFIG",
        "NEURON_RT_MAP_HBM",
        "NEURON_RT_LOG_LEVEL",
        "NEURON_RT_LOG_LEVEL_TDRV",
    ] {
        std::env::remove_var(v);
    }
    std::env::set_var("NEURON_EMU", "1");
}

fn init() -> u32 {
    let e = CString::new("").expect("c string");
    // SAFETY: valid C strings.
    unsafe { nrt_init(1, e.as_ptr(), e.as_ptr()) }
}

fn status_str(s: u32) -> String {
    // SAFETY: nrt_get_status_as_str returns a static C string.
    unsafe { CStr::from_ptr(nrt_get_status_as_str(s)) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn order_rules_version_and_counts() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean_env();
    nrt_close();
    unsafe {
        let neff = std::fs::read(repo("fixtures/neff/mlp.neff")).expect("fixture");
        let mut m = null_mut();
        let before = nrt_load(neff.as_ptr() as *const c_void, neff.len(), -1, -1, &mut m);
        assert!(before == UNINIT || before == CLOSED, "{before}");
        let mut t = null_mut();
        assert!(matches!(
            nrt_tensor_allocate(0, 0, 16, null_mut(), &mut t),
            UNINIT | CLOSED
        ));
        // Exempt calls work before init.
        let mut v: NrtVersion = std::mem::zeroed();
        assert_eq!(
            nrt_get_version(&mut v, std::mem::size_of::<NrtVersion>()),
            0
        );
        assert_eq!(v.rt_major, 2);
        assert!(CStr::from_ptr(v.rt_detail.as_ptr())
            .to_string_lossy()
            .starts_with("neuron-emu"));
        assert_eq!(nrt_get_version(null_mut(), 8), INVALID);
        let mut n = 0u32;
        assert_eq!(nrt_get_total_vnc_count(&mut n), 0);
        assert_eq!(n, 4, "one emulated trn2 device: 8 physical cores, LNC=2");
        assert_eq!(nrt_get_total_nc_count(&mut n), 0);
        std::env::set_var("NEURON_LOGICAL_NC_CONFIG", "1");
        assert_eq!(nrt_get_total_nc_count(&mut n), 0);
        assert_eq!(n, 8, "LNC=1: every physical core is a logical core");
        std::env::set_var("NEURON_LOGICAL_NC_CONFIG", "3");
        assert_eq!(nrt_get_total_nc_count(&mut n), INVALID, "LNC is 1 or 2");
        std::env::remove_var("NEURON_LOGICAL_NC_CONFIG");
        std::env::set_var("NEURON_RT_VISIBLE_CORES", "2-3");
        assert_eq!(nrt_get_visible_vnc_count(&mut n), 0);
        assert_eq!(n, 2);
        std::env::set_var("NEURON_RT_VISIBLE_CORES", "3,1");
        assert_eq!(nrt_get_visible_nc_count(&mut n), INVALID, "not increasing");
        std::env::remove_var("NEURON_RT_VISIBLE_CORES");
        std::env::set_var("NEURON_RT_NUM_CORES", "3");
        assert_eq!(nrt_get_visible_vnc_count(&mut n), 0);
        assert_eq!(n, 3);
        std::env::remove_var("NEURON_RT_NUM_CORES");
        std::env::set_var("NEURON_EMU_ARCH", "trn1");
        assert_eq!(nrt_get_total_vnc_count(&mut n), 0);
        assert_eq!(n, 2, "trn1 has 2 cores");
        std::env::set_var("NEURON_EMU_ARCH", "trn9");
        assert_eq!(nrt_get_total_vnc_count(&mut n), FAILURE);
        std::env::remove_var("NEURON_EMU_ARCH");
    }
    assert_eq!(status_str(5), "NRT_TIMEOUT");
    assert_eq!(status_str(1006), "NRT_EXEC_OOB");
    assert_eq!(status_str(8), "NRT_UNKNOWN_STATUS");
}

#[test]
fn full_api_on_the_mlp() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean_env();
    nrt_close();
    assert_eq!(init(), 0);
    assert_eq!(init(), FAILURE, "init twice");
    unsafe {
        let mut info: NrtInstanceInfo = std::mem::zeroed();
        assert_eq!(
            nrt_get_instance_info(&mut info, std::mem::size_of::<NrtInstanceInfo>()),
            0
        );
        assert_eq!(info.family, 5, "NRT_INSTANCE_TRN2");
        assert_eq!(nrt_get_instance_info(&mut info, 4), INVALID);
        let mut n = 0;
        assert_eq!(nrt_get_visible_vnc_count(&mut n), 0);
        assert_eq!(n, 4, "LNC=2: 4 logical cores");

        // Load.
        let neff = std::fs::read(repo("fixtures/neff/mlp.neff")).expect("fixture");
        let mut m = null_mut();
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, neff.len(), -1, 2, &mut m),
            INVALID,
            "vnc_count must be -1"
        );
        assert_eq!(nrt_load(std::ptr::null(), 0, -1, -1, &mut m), INVALID);
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, neff.len(), 99, -1, &mut m),
            9,
            "NRT_LOAD_NOT_ENOUGH_NC"
        );
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, 100, -1, -1, &mut m),
            INVALID,
            "truncated NEFF"
        );
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, neff.len(), -1, -1, &mut m),
            0
        );
        let mut c = 0;
        assert_eq!(nrt_get_model_vnc_count(m, &mut c), 0);
        assert_eq!(c, 1);
        assert_eq!(nrt_get_model_nc_count(m, &mut c), 0);
        let mut vnc = 99u32;
        let mut out_size = 0usize;
        assert_eq!(nrt_get_model_info(m, &mut vnc, 4, &mut out_size), 0);
        assert_eq!((vnc, out_size), (0, 4));

        // Tensor info.
        let mut ti: *mut c_void = null_mut();
        assert_eq!(nrt_get_model_tensor_info(m, &mut ti), 0);
        let count = *(ti as *const u64);
        assert_eq!(count, 2);
        let arr = (ti as *const u8).add(8) as *const NrtTensorInfo;
        let x = &*arr;
        let y = &*arr.add(1);
        assert_eq!(CStr::from_ptr(x.name.as_ptr()).to_str(), Ok("x"));
        assert_eq!((x.usage, x.size, x.dtype, x.ndim), (0, 131072, 6, 2));
        assert_eq!(std::slice::from_raw_parts(x.shape, 2), &[128, 512]);
        assert_eq!(CStr::from_ptr(y.name.as_ptr()).to_str(), Ok("y"));
        assert_eq!((y.usage, y.size), (1, 32768));
        assert_eq!(nrt_free_model_tensor_info(ti), 0);

        // Tensors of every placement.
        let name = CString::new("t").expect("c string");
        let (mut dt, mut ht, mut vt) = (null_mut(), null_mut(), null_mut());
        assert_eq!(nrt_tensor_allocate(0, 0, 4096, name.as_ptr(), &mut dt), 0);
        assert_eq!(nrt_tensor_allocate(1, 0, 4096, name.as_ptr(), &mut ht), 0);
        assert_eq!(nrt_tensor_allocate(2, -1, 4096, name.as_ptr(), &mut vt), 0);
        assert_eq!(
            nrt_tensor_allocate(7, 0, 4096, name.as_ptr(), &mut vt),
            INVALID,
            "placement"
        );
        assert_eq!(
            nrt_tensor_allocate(0, 50, 4096, name.as_ptr(), &mut vt),
            INVALID,
            "vnc"
        );
        assert_eq!(
            nrt_tensor_allocate(1, 0, 8 << 20, name.as_ptr(), &mut vt),
            INVALID,
            "HOST is capped at 4 MB"
        );
        assert_eq!(nrt_tensor_get_size(dt), 4096);
        assert!(nrt_tensor_get_va(dt).is_null(), "device memory has no VA");
        assert!(!nrt_tensor_get_va(ht).is_null());
        assert!(!nrt_tensor_get_va(vt).is_null());
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        for t in [dt, ht, vt] {
            assert_eq!(
                nrt_tensor_write(t, data.as_ptr() as *const c_void, 0, 4096),
                0
            );
            let mut back = vec![0u8; 4096];
            assert_eq!(
                nrt_tensor_read(t, back.as_mut_ptr() as *mut c_void, 0, 4096),
                0
            );
            assert_eq!(back, data);
            assert_eq!(
                nrt_tensor_read(t, back.as_mut_ptr() as *mut c_void, 1, 4096),
                INVALID,
                "beyond the tensor"
            );
        }
        let mut stats: NrtVncMemoryStats = std::mem::zeroed();
        let mut sz = 0usize;
        assert_eq!(
            nrt_get_vnc_memory_stats(
                0,
                &mut stats,
                std::mem::size_of::<NrtVncMemoryStats>(),
                &mut sz
            ),
            0
        );
        assert!(
            stats.bytes_used >= 4096 && stats.bytes_limit > stats.bytes_used,
            "{stats:?}"
        );
        assert_eq!(
            nrt_get_vnc_memory_stats(99, &mut stats, 16, &mut sz),
            INVALID
        );
        assert_eq!(nrt_tensor_memset(dt, 16, 0xAB, 32), 0);
        assert_eq!(nrt_tensor_copy(dt, 0, vt, 0, 4096), 0);
        let va = nrt_tensor_get_va(vt) as *const u8;
        assert_eq!(*va.add(16), 0xAB);
        assert_eq!(*va.add(48), data[48]);
        // Slices share storage.
        let mut sl = null_mut();
        assert_eq!(
            nrt_tensor_allocate_slice(vt, 1024, 16, name.as_ptr(), &mut sl),
            0
        );
        assert_eq!(nrt_tensor_get_size(sl), 16);
        assert_eq!(nrt_tensor_memset(sl, 0, 7, 16), 0);
        assert_eq!(*va.add(1024), 7);
        assert_eq!(
            nrt_tensor_allocate_slice(vt, 4090, 16, name.as_ptr(), &mut sl),
            INVALID
        );
        // Empty tensor + caller buffer.
        let mut et = null_mut();
        assert_eq!(nrt_tensor_allocate_empty(name.as_ptr(), &mut et), 0);
        let mut ebuf = [0u8; 8];
        assert_eq!(
            nrt_tensor_read(et, ebuf.as_mut_ptr() as *mut c_void, 0, 8),
            INVALID,
            "no storage yet"
        );
        let mut mine = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(
            nrt_tensor_attach_buffer(et, mine.as_mut_ptr() as *mut c_void, 8),
            0
        );
        assert_eq!(
            nrt_tensor_read(et, ebuf.as_mut_ptr() as *mut c_void, 0, 8),
            0
        );
        assert_eq!(ebuf, mine);
        // Batches.
        let mut b0 = [0u8; 4];
        let mut b1 = [0u8; 4];
        let ops = [
            NrtTensorBatchOp {
                offset: 0,
                size: 4,
                buffer: b0.as_mut_ptr() as *mut c_void,
            },
            NrtTensorBatchOp {
                offset: 100,
                size: 4,
                buffer: b1.as_mut_ptr() as *mut c_void,
            },
        ];
        let batch = NrtTensorBatch {
            tensor: ht,
            ops: ops.as_ptr(),
            num_ops: 2,
        };
        assert_eq!(nrt_tensor_read_batch(&batch, 1, false), 0);
        assert_eq!(&b0, &data[0..4]);
        assert_eq!(&b1, &data[100..104]);
        b0.copy_from_slice(&[9; 4]);
        assert_eq!(nrt_tensor_write_batch(&batch, 1, false), 0);
        let mut chk = [0u8; 4];
        assert_eq!(
            nrt_tensor_read(ht, chk.as_mut_ptr() as *mut c_void, 0, 4),
            0
        );
        assert_eq!(chk, [9; 4]);

        // Tensor sets and execution.
        let (mut ins, mut outs) = (null_mut(), null_mut());
        assert_eq!(nrt_allocate_tensor_set(&mut ins), 0);
        assert_eq!(nrt_allocate_tensor_set(&mut outs), 0);
        let (xn, yn) = (CString::new("x").expect("x"), CString::new("y").expect("y"));
        let (mut xt, mut yt) = (null_mut(), null_mut());
        assert_eq!(nrt_tensor_allocate(0, 0, 131072, xn.as_ptr(), &mut xt), 0);
        assert_eq!(nrt_tensor_allocate(0, 0, 32768, yn.as_ptr(), &mut yt), 0);
        assert_eq!(nrt_add_tensor_to_tensor_set(outs, yn.as_ptr(), yt), 0);
        assert_eq!(nrt_execute(m, ins, outs), INVALID, "missing input");
        assert_eq!(nrt_add_tensor_to_tensor_set(ins, xn.as_ptr(), dt), 0);
        assert_eq!(nrt_execute(m, ins, outs), INVALID, "wrong input size");
        assert_eq!(
            nrt_add_tensor_to_tensor_set(ins, xn.as_ptr(), xt),
            0,
            "replace by name"
        );
        let mut got = null_mut();
        assert_eq!(
            nrt_get_tensor_from_tensor_set(ins, xn.as_ptr(), &mut got),
            0
        );
        assert_eq!(got, xt);
        let zn = CString::new("z").expect("z");
        assert_eq!(
            nrt_get_tensor_from_tensor_set(ins, zn.as_ptr(), &mut got),
            FAILURE
        );
        let vals =
            neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, 0), 128 * 512, 1.0);
        let x: Vec<u8> = vals
            .iter()
            .flat_map(|v| half_bits(*v).to_le_bytes())
            .collect();
        assert_eq!(
            nrt_tensor_write(xt, x.as_ptr() as *const c_void, 0, x.len()),
            0
        );
        assert_eq!(nrt_execute(m, ins, outs), 0);
        let mut y = vec![0u8; 32768];
        assert_eq!(
            nrt_tensor_read(yt, y.as_mut_ptr() as *mut c_void, 0, y.len()),
            0
        );
        let want = golden();
        let err = y
            .chunks_exact(2)
            .zip(&want)
            .map(|(b, w)| {
                (f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16) - w).abs()
            })
            .fold(0f32, f32::max);
        assert!(err <= 2e-2, "max abs err {err}");
        assert_eq!(nrt_execute_repeat(m, ins, outs, 2), 0);
        assert_eq!(nrt_execute_repeat(m, ins, outs, 0), INVALID);
        assert_eq!(nrt_execute(m, null_mut(), outs), INVALID);

        // Cleanup in the documented order; handles are cleared.
        assert_eq!(nrt_unload(m), 0);
        for t in [
            &mut dt, &mut ht, &mut vt, &mut sl, &mut et, &mut xt, &mut yt,
        ] {
            nrt_tensor_free(t);
            assert!(t.is_null());
        }
        nrt_destroy_tensor_set(&mut ins);
        nrt_destroy_tensor_set(&mut outs);
        assert!(ins.is_null());
        nrt_close();
        let mut t = null_mut();
        assert_eq!(nrt_tensor_allocate(0, 0, 16, null_mut(), &mut t), CLOSED);
        assert_eq!(nrt_get_instance_info(&mut info, 32), CLOSED);
        // Re-initialising after close is allowed; nrt_close unloads what is still loaded, and
        // the handle can still be released afterwards.
        assert_eq!(init(), 0);
        let mut m2 = null_mut();
        assert_eq!(
            nrt_load(neff.as_ptr() as *const c_void, neff.len(), -1, -1, &mut m2),
            0
        );
        nrt_close();
        let mut c2 = 0;
        assert_eq!(nrt_get_model_vnc_count(m2, &mut c2), CLOSED);
        assert_eq!(
            nrt_unload(m2),
            CLOSED,
            "handle freed, status says the runtime is closed"
        );
        assert_eq!(
            nrt_unload(m2),
            INVALID,
            "a second unload is refused, not a double free"
        );
    }
}

fn half_bits(v: f32) -> u16 {
    let mut b = [0u8; 2];
    neuron_isa::dtype::store_f32(neuron_isa::Dtype::Bf16, v, &mut b);
    u16::from_le_bytes(b)
}

fn golden() -> Vec<f32> {
    let raw = std::fs::read(repo("fixtures/neff/mlp.golden/y.npy")).expect("golden");
    let hl = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    raw[10 + hl..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn device_selection_env() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean_env();
    nrt_close();
    let real = (0..64).any(|i| std::path::Path::new(&format!("/dev/neuron{i}")).exists());
    if !real {
        std::env::set_var("NEURON_EMU", "0");
        assert_eq!(
            init(),
            FAILURE,
            "no device and the embedded one is forbidden"
        );
        std::env::remove_var("NEURON_EMU");
        assert_eq!(
            init(),
            FAILURE,
            "no device: the emulator is used only when NEURON_EMU=1 asks for it"
        );
    }
    std::env::set_var("NEURON_EMU", "1");
    std::env::set_var("NEURON_EMU_LIB", "/nonexistent/libneuron_emu.so");
    assert_eq!(init(), FAILURE, "a backend that cannot be loaded");
    std::env::set_var("NEURON_EMU_LIB", "/lib/x86_64-linux-gnu/libc.so.6");
    if std::path::Path::new("/lib/x86_64-linux-gnu/libc.so.6").exists() {
        assert_eq!(init(), FAILURE, "a library that is not a backend");
    }
    std::env::remove_var("NEURON_EMU_LIB");
    std::env::set_var("NEURON_EMU_DEVICES", "abc");
    assert_eq!(
        init(),
        FAILURE,
        "a bad NEURON_EMU_DEVICES is refused, not defaulted"
    );
    std::env::remove_var("NEURON_EMU_DEVICES");
    std::env::set_var("NEURON_EMU", "maybe");
    assert_eq!(init(), FAILURE);
    std::env::set_var("NEURON_EMU", "1");
    std::env::set_var("NEURON_EMU_ARCH", "trn1");
    assert_eq!(init(), 0);
    unsafe {
        let mut info: NrtInstanceInfo = std::mem::zeroed();
        assert_eq!(nrt_get_instance_info(&mut info, 32), 0);
        // Architecture 2 is trn1 or inf2; the ioctl ABI does not tell them apart.
        assert_eq!(info.family, 2, "NRT_INSTANCE_TRN1");
        let mut n = 0;
        assert_eq!(nrt_get_visible_vnc_count(&mut n), 0);
        assert_eq!(n, 2);
    }
    nrt_close();
    std::env::set_var("NEURON_RT_VISIBLE_CORES", "3-5");
    std::env::set_var("NEURON_EMU_ARCH", "trn2");
    assert_eq!(init(), 4, "NRT_RESOURCE: logical cores 4-5 do not exist");
    clean_env();
}

/// A set but invalid runtime variable makes nrt_init fail with NRT_INVALID (and a log line
/// naming it) instead of being replaced by its default.
#[test]
fn bad_environment_values_fail_nrt_init() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    clean_env();
    nrt_close();
    for (var, value) in [
        ("NEURON_RT_LOG_LEVEL", "bogus"),
        ("NEURON_RT_LOG_LEVEL_TDRV", "loud"),
        ("NEURON_RT_EXEC_TIMEOUT", "0"),
        ("NEURON_RT_EXEC_TIMEOUT", "soon"),
        ("NEURON_RT_VISIBLE_CORES", "two"),
        ("NEURON_RT_VISIBLE_CORES", "3,1"),
        ("NEURON_LOGICAL_NC_CONFIG", "3"),
        ("NEURON_RT_NUM_CORES", "-1"),
        ("NEURON_RT_NUM_CORES", "many"),
    ] {
        std::env::set_var(var, value);
        assert_eq!(init(), INVALID, "{var}={value}");
        std::env::remove_var(var);
    }
    std::env::remove_var("NEURON_RT_LOG_LEVEL_TDRV");
    // Valid values still initialise.
    std::env::set_var("NEURON_RT_LOG_LEVEL", "warning");
    std::env::set_var("NEURON_RT_EXEC_TIMEOUT", "2.5");
    std::env::set_var("NEURON_LOGICAL_NC_CONFIG", "1");
    assert_eq!(init(), 0);
    let mut n = 0;
    // SAFETY: a valid out pointer.
    assert_eq!(unsafe { nrt_get_visible_nc_count(&mut n) }, 0);
    assert_eq!(n, 8, "LNC=1");
    nrt_close();
    std::env::remove_var("NEURON_RT_LOG_LEVEL");
    clean_env();
}
