//! Support for fuzzing the dispatcher (the cargo-fuzz target in `emulator/fuzz` and the property
//! test in `emulator/tests`): turn arbitrary bytes into one ioctl whose embedded user pointers
//! are either 0 or point into a scratch buffer, since the emulator writes through user pointers
//! as a kernel would. Not part of the emulator's API.
#![allow(unsafe_code)]

use crate::EmuFile;
use neuron_abi::ioctl::*;
use neuron_abi::{DeviceFile, Errno};

/// Bytes of the argument buffer (larger than every argument struct).
pub const ARG_LEN: usize = 16 << 10;
/// Bytes of the scratch buffer user pointers are redirected into.
pub const SCRATCH_LEN: usize = 64 << 10;

/// Offsets of the user-pointer fields of each command's argument struct (`driver-abi.md` §2.5).
pub fn pointer_offsets(cmd: u32) -> &'static [usize] {
    match cmd {
        NEURON_IOCTL_MEM_ALLOC => &[24],
        NEURON_IOCTL_MEM_ALLOC_V2 => &[32],
        NEURON_IOCTL_MEM_ALLOC_V2MT
        | NEURON_IOCTL_MEM_ALLOC_V2MT64
        | NEURON_IOCTL_MEM_ALLOC_V2MT64_PA => &[40],
        NEURON_IOCTL_MEM_GET_PA => &[8],
        NEURON_IOCTL_MEM_GET_INFO => &[8, 16],
        NEURON_IOCTL_DUMP_MEM_CHUNKS => &[16],
        NEURON_IOCTL_MEM_BUF_COPY
        | NEURON_IOCTL_MEM_BUF_COPY64
        | NEURON_IOCTL_MEM_BUF_ZEROCOPY64
        | NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES => &[8],
        NEURON_IOCTL_DMABUF_FD => &[16],
        NEURON_IOCTL_DMA_ENG_GET_STATE => &[8],
        NEURON_IOCTL_DMA_QUEUE_GET_STATE => &[8, 16],
        NEURON_IOCTL_DMA_COPY_DESCRIPTORS | NEURON_IOCTL_DMA_COPY_DESCRIPTORS64 => &[8],
        NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT => &[24],
        NEURON_IOCTL_BAR_READ | NEURON_IOCTL_BAR_WRITE => &[8, 16],
        NEURON_IOCTL_READ_HW_COUNTERS => &[0, 8],
        NEURON_IOCTL_PROGRAM_ENGINE => &[8],
        NEURON_IOCTL_PROGRAM_ENGINE_NC | NEURON_IOCTL_PROGRAM_ENGINE_NC64 => &[16],
        NEURON_IOCTL_POST_METRIC | NEURON_IOCTL_PRINTK => &[0],
        NEURON_IOCTL_GET_LOGICAL_TO_PHYSICAL_NC_MAP => &[0],
        NEURON_IOCTL_HOST_MEM_PIN => &[0],
        _ => &[],
    }
}

/// An anonymous mapping with a PROT_NONE guard page after it, so writes that run past the end
/// fault (EFAULT through `uaccess`) instead of corrupting the heap.
#[derive(Debug)]
struct Guarded {
    base: *mut u8,
    len: usize,
}

impl Guarded {
    fn new(len: usize) -> Option<Guarded> {
        let total = len + 4096;
        // SAFETY: a fresh private anonymous mapping; then the last page is made inaccessible.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            let base = p as *mut u8;
            libc::mprotect(base.add(len).cast(), 4096, libc::PROT_NONE);
            Some(Guarded { base, len })
        }
    }

    fn fill(&mut self, data: &[u8]) {
        let n = data.len().min(self.len);
        // SAFETY: `n` bytes inside our own read-write mapping; the rest is zeroed.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.base, n);
            std::ptr::write_bytes(self.base.add(n), 0, self.len - n);
        }
    }

    fn word(&mut self, off: usize) -> Option<u64> {
        if off + 8 > self.len {
            return None;
        }
        let mut b = [0u8; 8];
        // SAFETY: in bounds (checked above).
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), b.as_mut_ptr(), 8) };
        Some(u64::from_le_bytes(b))
    }

    fn set_word(&mut self, off: usize, v: u64) {
        if off + 8 <= self.len {
            // SAFETY: in bounds (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), self.base.add(off), 8)
            };
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `new`.
        unsafe { libc::munmap(self.base.cast(), self.len + 4096) };
    }
}

/// Issue `cmd` on `f` with `arg` (random bytes) as the argument struct and `scratch` (random
/// bytes) as the memory its pointers may reach. Pointer fields become 0 (if their low bit is set)
/// or an address inside the scratch buffer; every 8-byte word of the scratch buffer is made
/// smaller than 64 KiB, so pointers nested in it (batch descriptors) are invalid and fail
/// cleanly. Returns the ioctl's result.
pub fn run_ioctl(f: &EmuFile, cmd: u32, arg: &[u8], scratch: &[u8]) -> Result<i32, Errno> {
    let (Some(mut a), Some(mut s)) = (Guarded::new(ARG_LEN), Guarded::new(SCRATCH_LEN)) else {
        return Err(Errno::ENOMEM);
    };
    s.fill(scratch);
    // Only the copied bytes can hold large words; the rest is zero.
    for off in (0..scratch.len().min(SCRATCH_LEN)).step_by(8) {
        if let Some(w) = s.word(off) {
            s.set_word(off, w & 0xffff);
        }
    }
    a.fill(arg);
    for &off in pointer_offsets(cmd) {
        if let Some(w) = a.word(off) {
            let p = if w & 1 == 1 {
                0
            } else {
                s.base as u64 + (w >> 1) % SCRATCH_LEN as u64
            };
            a.set_word(off, p);
        }
    }
    // SAFETY: the argument buffer is ARG_LEN bytes (more than any argument struct) and every
    // pointer in it is 0 or inside the guarded scratch buffer; the emulator reaches user memory
    // only through `uaccess` (guarded copies or process_vm_readv/writev: EFAULT, never a fault).
    unsafe { f.ioctl(cmd, a.base) }
}

/// Pick a command from the input: mostly a known value, sometimes a raw one.
pub fn pick_command(sel: u32, raw: u32) -> u32 {
    if sel.is_multiple_of(16) {
        raw
    } else {
        COMMANDS[(sel as usize / 16) % COMMANDS.len()].cmd
    }
}
