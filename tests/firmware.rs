//! Issue 18 end to end: the GpSimd microcode staged through the ABI from a generated carrier
//! found through the env override, from `nrt_set_pool_eng_ucode`'s images (a C program), and
//! an unknown image's device error with its real status. akc-fused_bf16_s512's Pool engine
//! issues DMA_DIRECT2D (GpSimd work); its outputs and device time are the pinned ones.

use neuron_abi::arch::Arch;
use neuron_abi::{tpb, DeviceFile};
use neuron_e2e_tests::{execute_builtin, repo_path};
use neuron_emulator::{Emulator, OpenOptions};
use neuron_firmware_loader::{reference, write};
use neuron_runtime::firmware::{PoolUcode, UcodeSource, ENV_UCODE_PATH};
use neuron_runtime::{Config, NrtStatus, Runtime};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const AKC: &str = "../shared/fixtures/real-neff/akc-fused_bf16_s512.neff";
/// `tests/e2e.rs::device_times_are_pinned` (with `calib::TRN2_WAKE` and `calib::with_wake`
/// since issue 17).
const AKC_PS: u64 = 35_736_912;

fn runtime(cfg: Config) -> (Emulator, Runtime) {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let f = emu.open(0, OpenOptions::default()).expect("open");
    let dev: Arc<dyn DeviceFile> = Arc::new(f);
    let cfg = Config {
        exec_timeout: Duration::from_secs(60),
        ..cfg
    };
    let rt = Runtime::new(dev, 0, cfg).expect("runtime");
    (emu, rt)
}

fn run(rt: &Runtime, neff: &str) -> Result<neuron_runtime::ExecOutput, neuron_runtime::NrtError> {
    let bytes = std::fs::read(repo_path(neff)).expect("fixture");
    let mut m = rt.load(&bytes, 0)?;
    execute_builtin(&mut m)
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nrt-fw18-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp");
    d
}

/// The digests the device computed over core `nc`'s GpSimd IRAM and DRAM.
fn device_digests(emu: &Emulator, nc: usize) -> (String, String) {
    emu.with_device(0, |d| {
        let (i, r) = d.ucode(nc).expect("core").digests();
        (reference::hex(&i), reference::hex(&r))
    })
    .expect("device")
}

/// (a) A `libnrtucode_extisa.so`-shaped carrier generated here, named by the env override
/// (a directory), is read, staged into every core the model uses and runs the model as the
/// default does; an unknown image from a carrier fails with the GpSimd exception; a carrier
/// that is missing is refused by `nrt_init`'s strict check.
#[test]
fn a_carrier_found_through_the_env_override_is_staged_and_runs() {
    let dir = tmpdir("carrier");
    let (i, d) = (reference::iram(), reference::dram());
    let carrier = write::ucode_carrier(&[(1, 0, &i), (2, 0, &d)]).expect("carrier");
    std::fs::write(dir.join("libnrtucode_extisa.so"), carrier).expect("write");
    std::env::set_var(ENV_UCODE_PATH, &dir);
    let cfg = Config::from_env_checked();
    let bad_dir = dir.join("other");
    std::fs::create_dir_all(&bad_dir).expect("tmp");
    let mut unknown = i.clone();
    unknown[100] ^= 1;
    let other = write::ucode_carrier(&[(1, 0, &unknown), (2, 0, &d)]).expect("carrier");
    std::fs::write(bad_dir.join("libnrtucode_extisa.so"), other).expect("write");
    std::env::set_var(ENV_UCODE_PATH, &bad_dir);
    let cfg_unknown = Config::from_env_checked();
    std::env::set_var(ENV_UCODE_PATH, dir.join("missing.so"));
    let cfg_missing = Config::from_env_checked();
    std::env::remove_var(ENV_UCODE_PATH);

    let cfg = cfg.expect("config");
    let u = cfg.pool_ucode.clone().expect("the carrier was found");
    assert_eq!(
        u.source,
        UcodeSource::Carrier(dir.join("libnrtucode_extisa.so"))
    );
    let (emu, rt) = runtime(cfg);
    let out = run(&rt, AKC).expect("runs on the staged reference image");
    assert_eq!(out.device_time_ps, AKC_PS, "device time unchanged");
    let (_e, rt_default) = runtime(Config::default());
    let def = run(&rt_default, AKC).expect("default");
    assert_eq!(out.outputs, def.outputs, "outputs unchanged");
    // Both cores of the LNC=2 model hold the staged images (written through the ABI).
    let want = (
        reference::hex(&reference::iram_sha256()),
        reference::hex(&reference::dram_sha256()),
    );
    for nc in [0, 1] {
        assert_eq!(device_digests(&emu, nc), want, "nc{nc}");
    }
    let sb = Arch::V3Trn2.tpb_sbuf_mmap_offset(0).expect("nc0");
    let mut head = [0u8; 20];
    emu.with_device(0, |dev| dev.read(sb + tpb::GPSIMD_IRAM, &mut head))
        .expect("device")
        .expect("IRAM readable");
    assert_eq!(&head, b"NEURON-EMU REFERENCE");

    let (emu, rt) = runtime(cfg_unknown.expect("an unknown image still loads"));
    let e = run(&rt, AKC).expect_err("unknown microcode");
    assert_eq!(e.status, NrtStatus::Timeout, "{e}");
    let digest = reference::hex(&reference::sha256(&unknown));
    assert!(e.message.contains("GpSimd exception"), "{e}");
    assert!(e.message.contains(&digest), "{e}");
    let faults = emu.with_device(0, |d| d.faults().to_vec()).expect("device");
    assert!(
        faults
            .iter()
            .any(|f| f.kind == neuron_devmodel::FaultKind::GpsimdException
                && f.detail.contains(&digest)),
        "{faults:?}"
    );

    let e = cfg_missing.expect_err("a named carrier must exist");
    assert_eq!(e.status, NrtStatus::Invalid);
    assert!(e.message.contains(ENV_UCODE_PATH), "{}", e.message);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (c) An unknown image (raw images, as `nrt_set_pool_eng_ucode` gives them): the GpSimd work
/// fails with a device error naming the digest and the real status of a GpSimd exception
/// (NRT_TIMEOUT); a model whose Pool engine does no GpSimd work (the MLP) still runs, with its
/// pinned device time.
#[test]
fn an_unknown_image_is_a_gpsimd_exception_with_its_digest() {
    let img = b"not the reference microcode".to_vec();
    let u = PoolUcode::from_images(&img, &[]).expect("images");
    let (emu, rt) = runtime(Config {
        pool_ucode: Some(Arc::new(u)),
        ..Default::default()
    });
    let e = run(&rt, AKC).expect_err("GpSimd exception");
    assert_eq!(e.status, NrtStatus::Timeout, "{e}");
    let digest = reference::hex(&reference::sha256(&img));
    assert!(
        e.message.contains(&digest) && e.message.contains("DMA_DIRECT2D"),
        "{e}"
    );
    let f = emu.with_device(0, |d| d.faults().to_vec()).expect("device");
    let f = f.last().expect("a device fault");
    assert_eq!(f.engine, Some(neuron_isa::Engine::Pool));
    assert!(
        f.detail.contains("unknown microcode") && f.detail.contains(&digest),
        "{f}"
    );
    let mlp = run(&rt, "fixtures/neff/mlp.neff");
    assert_eq!(mlp.map(|o| o.device_time_ps), Ok(22_020_014)); // tests/e2e.rs::device_times_are_pinned
}

/// A raw device with nothing staged (no runtime staging, a reset) behaves as if the reference
/// image were resident; staging something else then decides.
#[test]
fn an_unstaged_core_runs_as_if_the_reference_image_were_resident() {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    emu.with_device(0, |d| {
        let u = d.ucode(0).expect("core");
        assert_eq!(u.clone().check(), Ok(()));
        let sb = Arch::V3Trn2.tpb_sbuf_mmap_offset(0).expect("nc0");
        d.write(sb + tpb::GPSIMD_IRAM, &[1, 2, 3]).expect("IRAM");
        assert!(d.ucode(0).expect("core").clone().check().is_err());
        d.reset_nc(0);
        assert_eq!(d.ucode(0).expect("core").clone().check(), Ok(()));
        assert!(d
            .write(sb + tpb::GPSIMD_IRAM + tpb::GPSIMD_IRAM_SIZE - 1, &[0, 0])
            .is_err());
    })
    .expect("device");
}

/// (b) `nrt_set_pool_eng_ucode` from C before `nrt_init`: the reference images run the model;
/// after `nrt_init` the call is refused with NRT_INVALID; an unknown image's execution returns
/// NRT_TIMEOUT (5) with the GpSimd exception lines.
#[test]
fn nrt_set_pool_eng_ucode_from_c() {
    let tmp = tmpdir("c");
    let exe = neuron_e2e_tests::cprog::nrt_program("pool_ucode", &tmp);
    std::fs::write(tmp.join("iram.bin"), reference::iram()).expect("iram");
    std::fs::write(tmp.join("dram.bin"), reference::dram()).expect("dram");
    std::fs::write(tmp.join("bad.bin"), b"unknown image").expect("bad");
    let neff = repo_path(AKC);
    for (iram, want_exec) in [("iram.bin", 0), ("bad.bin", 5)] {
        let out = Command::new(&exe)
            .current_dir(&tmp)
            .args([iram, "dram.bin"])
            .arg(&neff)
            .env("NEURON_EMU", "1")
            .env_remove(ENV_UCODE_PATH)
            .env_remove("NEURON_EMU_SOCKET")
            .env_remove("NEURON_EMU_LIB")
            .env_remove("NEURON_EMU_FAULTS")
            .env_remove("LD_PRELOAD")
            .env_remove("NEURON_RT_VISIBLE_CORES")
            .env_remove("NEURON_RT_NUM_CORES")
            .output()
            .expect("run pool_ucode");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("set 0\n"), "{stdout}");
        assert!(stdout.contains("set-after-init 2\n"), "{stdout}");
        assert!(
            stdout.contains(&format!("exec {want_exec}\n")),
            "{iram}: {stdout}\n{stderr}"
        );
        if want_exec != 0 {
            assert!(
                stderr.contains("GPSIMD EXCEPTION OCCURRED: ILLEGAL INSTRUCTION"),
                "{stderr}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
