//! `libneuron_emu.so`: the emulator as a loadable device backend.
//!
//! Exports [`neuron_abi::backend::BACKEND_SYMBOL`], a table of C functions (open, close, ioctl,
//! mmap, munmap) over one process-wide [`Emulator`] configured from `NEURON_EMU_ARCH` /
//! `NEURON_EMU_DEVICES`. `libnrt.so` loads it with `dlopen` when `NEURON_EMU=1`, so the runtime
//! links only the ABI and the emulator stays on its side of the seam. When a daemon is
//! configured (`NEURON_EMU_SOCKET`, or one answers on the well-known socket; `docs/daemon.md`)
//! the devices are the daemon's, shared with other processes, instead of an in-process emulator.
#![allow(unsafe_code)]

use neuron_abi::backend::{BackendV1, BACKEND_VERSION};
use neuron_abi::{DeviceFile, Errno};
use neuron_emulator::serve::Machine;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The process-wide backend state. The emulator is created (from the environment, read anew
/// each time) when first needed and dropped when the last handle closes, so every
/// `nrt_init` after an `nrt_close` starts on fresh devices, as with the runtime's reset.
type Configured = Vec<Option<String>>;
type Built = Result<Arc<Machine>, String>;

#[derive(Default)]
struct State {
    /// The configuration read and the emulator built from it (or why it could not be).
    emu: Option<(Configured, Built)>,
    next: i64,
    open: HashMap<i64, Arc<dyn DeviceFile>>,
}

fn state() -> MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(State::default()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

impl State {
    /// The emulator, created on first use. While no file is open the environment is read
    /// again on each call and a changed configuration gets fresh devices.
    fn emu(&mut self) -> &Built {
        // The variables as set now; the configuration (and a fault plan's file) is read again
        // only when they changed, and never while a file is open.
        let key = env_key();
        let stale = match &self.emu {
            None => true,
            Some((have, _)) => self.open.is_empty() && *have != key,
        };
        if stale {
            self.emu = None;
        }
        &self
            .emu
            .get_or_insert_with(|| (key, Machine::from_env().map(Arc::new)))
            .1
    }
}

/// The environment variables an emulator's configuration comes from, as set now.
fn env_key() -> Vec<Option<String>> {
    use neuron_emu_remote::SOCKET_ENV;
    use neuron_emulator::envconfig::{ARCH_ENV, DEVICES_ENV, FAULTS_ENV, FAULTS_SEED_ENV};
    [
        ARCH_ENV,
        DEVICES_ENV,
        FAULTS_ENV,
        FAULTS_SEED_ENV,
        SOCKET_ENV,
    ]
    .iter()
    .map(|k| std::env::var(k).ok())
    .collect()
}

fn file(handle: i64) -> Result<Arc<dyn DeviceFile>, Errno> {
    state().open.get(&handle).cloned().ok_or(Errno::EBADF)
}

/// Run `f`, turning a panic into −EIO (a panic must not unwind through `extern "C"`).
fn guarded<T>(f: impl FnOnce() -> Result<T, Errno>, err: impl Fn(Errno) -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => err(e),
        Err(_) => err(Errno::EIO),
    }
}

unsafe extern "C" fn device_count() -> u32 {
    guarded(
        || {
            Ok(state()
                .emu()
                .as_ref()
                .map_or(0, |e| e.device_count() as u32))
        },
        |_| 0,
    )
}

unsafe extern "C" fn describe(buf: *mut u8, len: usize) -> usize {
    let s = guarded(
        || {
            Ok(match state().emu() {
                Ok(m) => m.describe(),
                Err(why) => format!("no emulated device: {why}"),
            })
        },
        |_| "no emulated device: internal error".to_string(),
    );
    if !buf.is_null() && len > 0 {
        let n = s.len().min(len - 1);
        // SAFETY: the caller passes `len` writable bytes at `buf`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf, n);
            *buf.add(n) = 0;
        }
    }
    s.len()
}

unsafe extern "C" fn open(index: u32, write_only: i32, pid: u32) -> i64 {
    guarded(
        || {
            let mut st = state();
            let emu = st.emu().as_ref().map_err(|_| Errno::ENODEV)?.clone();
            let f = emu.open(index as usize, write_only != 0, pid)?;
            st.next += 1;
            let h = st.next;
            st.open.insert(h, Arc::from(f));
            Ok(h)
        },
        |e| -(e.0 as i64),
    )
}

unsafe extern "C" fn close(handle: i64) -> i32 {
    guarded(
        || {
            let (f, emu) = {
                let mut st = state();
                let f = st.open.remove(&handle).ok_or(Errno::EBADF)?;
                let emu = if st.open.is_empty() {
                    st.emu.take()
                } else {
                    None
                };
                (f, emu)
            };
            // Outside the lock: dropping the last reference runs the driver's flush/release,
            // dropping the emulator joins its device threads.
            drop(f);
            drop(emu);
            Ok(0)
        },
        |e| -e.0,
    )
}

unsafe extern "C" fn ioctl(handle: i64, cmd: u32, arg: *mut u8) -> i64 {
    guarded(
        || {
            let f = file(handle)?;
            // SAFETY: the emulator touches `arg` only through copy-from/to-user, which turns
            // a bad pointer into EFAULT.
            unsafe { f.ioctl(cmd, arg) }.map(i64::from)
        },
        |e| -(e.0 as i64),
    )
}

unsafe extern "C" fn mmap(
    handle: i64,
    len: usize,
    prot: i32,
    offset: u64,
    out: *mut *mut u8,
) -> i32 {
    guarded(
        || {
            if out.is_null() {
                return Err(Errno::EFAULT);
            }
            let f = file(handle)?;
            let p = f.mmap(len, offset, prot)?;
            // SAFETY: checked non-null; the caller passes a writable pointer slot.
            unsafe { *out = p };
            Ok(0)
        },
        |e| -e.0,
    )
}

unsafe extern "C" fn munmap(handle: i64, addr: *mut u8, len: usize) -> i32 {
    guarded(
        || {
            file(handle)?.munmap(addr, len)?;
            Ok(0)
        },
        |e| -e.0,
    )
}

static TABLE: BackendV1 = BackendV1 {
    version: BACKEND_VERSION,
    size: std::mem::size_of::<BackendV1>() as u32,
    device_count,
    describe,
    open,
    close,
    ioctl,
    mmap,
    munmap,
};

/// The backend's entry point ([`neuron_abi::backend::BACKEND_SYMBOL`]).
#[no_mangle]
pub extern "C" fn neuron_emu_backend_v1() -> *const BackendV1 {
    &TABLE
}
