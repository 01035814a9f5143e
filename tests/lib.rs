//! Shared helpers for the end-to-end tests: a runtime on an in-process emulated device.

use neuron_abi::arch::Arch;
use neuron_abi::DeviceFile;
use neuron_emulator::{Emulator, OpenOptions};
use neuron_runtime::{Config, Runtime};
use std::sync::Arc;
use std::time::Duration;

/// Path of a file under the repository root. A `../shared/...` path needs the shared fixtures
/// folder beside the repository: without it the test fails saying so (not with a bare
/// `NotFound` from a later read). It fails rather than skips: CI has the folder.
pub fn repo_path(rel: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    if rel.starts_with("../shared/") {
        let shared = root.join("../shared/fixtures");
        assert!(
            shared.is_dir(),
            "the shared fixtures folder is missing: expected {} (../shared/fixtures beside the repository), needed for {rel}",
            shared.display()
        );
    }
    root.join(rel)
}

/// An emulator plus a runtime bound to its device 0 through the in-process backend.
#[derive(Debug)]
pub struct Setup {
    pub emu: Emulator,
    pub rt: Runtime,
}

pub fn setup(timeout: Duration) -> Setup {
    let emu = Emulator::new(Arch::V3Trn2, 1);
    let f = emu
        .open(0, OpenOptions::default())
        .expect("open /dev/neuron0");
    let dev: Arc<dyn DeviceFile> = Arc::new(f);
    let rt = Runtime::new(
        dev,
        0,
        Config {
            exec_timeout: timeout,
            validate_hash: false,
            ..Default::default()
        },
    )
    .expect("runtime");
    Setup { emu, rt }
}

/// Run a loaded model once on the built-in inputs (`builtin_input` for each, in order).
pub fn execute_builtin(
    m: &mut neuron_runtime::Model,
) -> Result<neuron_runtime::ExecOutput, neuron_runtime::NrtError> {
    let infos: Vec<_> = m.inputs().cloned().collect();
    let data: Vec<Vec<u8>> = infos
        .iter()
        .enumerate()
        .map(|(i, t)| builtin_input(t.dtype, (t.size as usize) / t.dtype.size(), i))
        .collect();
    let args: Vec<(&str, &[u8])> = infos
        .iter()
        .zip(&data)
        .map(|(t, d)| (t.name.as_str(), d.as_slice()))
        .collect();
    m.execute(&args)
}

/// An execution's outputs by name, each converted to f32 from its dtype.
/// One execution of the real kernel `stem` (built-in inputs) on a fresh device: its output
/// and device core 0's counters before and after it.
pub fn run_real_once(
    stem: &str,
) -> (
    neuron_runtime::ExecOutput,
    neuron_devmodel::Stats,
    neuron_devmodel::Stats,
) {
    let bytes = real_neff(stem);
    let s = setup(Duration::from_secs(60));
    let mut m =
        s.rt.load(&bytes, 0)
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
    let before = s.emu.stats(0).unwrap_or_default();
    let out = execute_builtin(&mut m).unwrap_or_else(|e| panic!("{stem}: {e}"));
    let after = s.emu.stats(0).unwrap_or_default();
    (out, before, after)
}

pub fn outputs_f32(out: &neuron_runtime::ExecOutput) -> Vec<(String, Vec<f32>)> {
    out.outputs
        .iter()
        .map(|(info, raw)| {
            let v = raw
                .chunks_exact(info.dtype.size())
                .map(|c| neuron_isa::dtype::load_f32(info.dtype, c))
                .collect();
            (info.name.clone(), v)
        })
        .collect()
}

/// The bytes of `../shared/fixtures/real-neff/<stem>.neff`.
pub fn real_neff(stem: &str) -> Vec<u8> {
    std::fs::read(repo_path(&format!(
        "../shared/fixtures/real-neff/{stem}.neff"
    )))
    .unwrap_or_else(|e| panic!("real NEFF fixture {stem}: {e}"))
}

/// The built-in deterministic input bytes `neuron-emu run` uses for input `index`.
pub fn builtin_input(dtype: neuron_isa::Dtype, elems: usize, index: usize) -> Vec<u8> {
    let vals = neuron_kbuild::prng::uniform(neuron_kbuild::prng::input_seed(0, index), elems, 1.0);
    let mut b = vec![0u8; elems * dtype.size()];
    for (k, v) in vals.iter().enumerate() {
        neuron_isa::dtype::store_f32(dtype, *v, &mut b[k * dtype.size()..]);
    }
    b
}

/// Read a float32 .npy file's values.
pub fn read_f32_npy(path: &std::path::Path) -> Vec<f32> {
    let raw = std::fs::read(path).expect("read npy");
    let a = neuron_neff::npy::NpyArray::parse(&raw).expect("parse npy");
    assert_eq!(a.dtype, neuron_neff::npy::NpyDtype::F32);
    a.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Issue one ioctl with a typed argument struct.
pub mod call {
    #![allow(unsafe_code)]
    use neuron_abi::{DeviceFile, Errno};
    use zerocopy::IntoBytes;

    pub fn ioctl<T: IntoBytes + zerocopy::FromBytes>(
        dev: &dyn DeviceFile,
        cmd: u32,
        arg: &mut T,
    ) -> Result<i32, Errno> {
        // SAFETY: `arg` is an exclusively borrowed argument struct of the size the command
        // expects; embedded pointers are set by the caller to live buffers (or deliberately
        // invalid, which the device must reject with EFAULT).
        unsafe { dev.ioctl(cmd, arg.as_mut_bytes().as_mut_ptr()) }
    }

    /// MEM_ALLOC_V2MT of a `size`-byte chunk (host or device), then its mmap offset from
    /// MEM_GET_EXTENDED_INFO: (handle, mmap offset).
    pub fn alloc_chunk(dev: &dyn DeviceFile, size: u64, host: bool) -> Result<(u64, u64), Errno> {
        use neuron_abi::consts::MemType;
        use neuron_abi::ioctl::{NEURON_IOCTL_MEM_ALLOC_V2MT, NEURON_IOCTL_MEM_GET_EXTENDED_INFO};
        use neuron_abi::structs::{MemAllocV2MemType, MemGetExtendedInfo};
        use zerocopy::FromZeros;
        let mut handle = 0u64;
        let mut a = MemAllocV2MemType {
            size,
            host_memory: u32::from(host),
            mem_type: MemType::TENSORS_DEVICE.0,
            mem_handle: &mut handle as *mut u64 as u64,
            ..FromZeros::new_zeroed()
        };
        ioctl(dev, NEURON_IOCTL_MEM_ALLOC_V2MT, &mut a)?;
        let mut info = MemGetExtendedInfo {
            mem_handle: handle,
            ..FromZeros::new_zeroed()
        };
        ioctl(dev, NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &mut info)?;
        Ok((handle, info.mmap_offset))
    }

    /// An ioctl with a raw (possibly invalid) argument pointer.
    pub fn ioctl_raw(dev: &dyn DeviceFile, cmd: u32, arg: usize) -> Result<i32, Errno> {
        // SAFETY: used only with null/garbage pointers against devices that must validate
        // them (the emulator reads user memory with process_vm_readv), or with commands that
        // are refused before their argument is read.
        unsafe { dev.ioctl(cmd, arg as *mut u8) }
    }

    /// Read/write a u32 in a mapping made by `DeviceFile::mmap` (test helpers: callers pass
    /// pointers the device just returned).
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn map_read_u32(p: *mut u8, off: usize) -> u32 {
        // SAFETY: callers pass offsets inside a live mapping; volatile because the device
        // updates it concurrently.
        unsafe { std::ptr::read_volatile(p.add(off) as *const u32) }
    }
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn map_write_u32(p: *mut u8, off: usize, v: u32) {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(p.add(off) as *mut u32, v) }
    }
}

/// Building and finding the C programs of the tests: the shared libraries cargo built for this
/// run, and a program from `tests/c/` compiled with the system `cc` against `nrt.h` and a copy
/// of `libnrt.so` (with `libneuron_emu.so` beside it and the `libnrt.so.1` SONAME link).
pub mod cprog {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A library cargo built for this test run, next to the test binary (or one level up).
    pub fn built(name: &str) -> PathBuf {
        let exe = std::env::current_exe().expect("test exe");
        let deps = exe.parent().expect("deps dir");
        [deps, deps.parent().unwrap_or(deps)]
            .iter()
            .map(|d| d.join(name))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{name} not built next to {}", exe.display()))
    }

    /// `tests/c/<name>.c` compiled into `tmp/<name>`, linked with `-lnrt` against copies of the
    /// built libraries in `tmp/lib` (found through the program's rpath).
    pub fn nrt_program(name: &str, tmp: &Path) -> PathBuf {
        let lib = tmp.join("lib");
        std::fs::create_dir_all(&lib).expect("tmp");
        std::fs::copy(built("libnrt.so"), lib.join("libnrt.so")).expect("copy libnrt.so");
        std::fs::copy(built("libneuron_emu.so"), lib.join("libneuron_emu.so"))
            .expect("copy libneuron_emu.so");
        let _ = std::os::unix::fs::symlink("libnrt.so", lib.join("libnrt.so.1"));
        let exe = tmp.join(name);
        let repo = super::repo_path("");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let out = Command::new(cc)
            .arg(repo.join(format!("tests/c/{name}.c")))
            .arg("-o")
            .arg(&exe)
            .args(["-Wall", "-Werror"])
            .arg(format!("-I{}", repo.join("runtime/include").display()))
            .arg(format!("-L{}", lib.display()))
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lnrt")
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "cc {name}.c: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        exe
    }
}

/// max |got − want| over the pairs, in f64 (the numerator of the golden tests' relative error).
pub fn max_abs_diff(got: &[f32], want: &[f32]) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - *w as f64).abs())
        .fold(0f64, f64::max)
}
