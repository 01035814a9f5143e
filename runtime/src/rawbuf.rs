//! Copies to and from a caller-owned buffer (`nrt_tensor_attach_buffer`).
#![allow(unsafe_code)]

/// A buffer the caller attached and promised to keep alive for the tensor's lifetime.
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    pub ptr: usize,
    pub len: usize,
}

impl RawBuf {
    pub fn read(&self, off: usize, out: &mut [u8]) -> bool {
        if off.checked_add(out.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: in bounds of the attached buffer, which the caller of
        // `Tensor::attach_buffer` guaranteed valid; `out` is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.ptr + off) as *const u8,
                out.as_mut_ptr(),
                out.len(),
            )
        };
        true
    }

    pub fn write(&self, off: usize, data: &[u8]) -> bool {
        if off.checked_add(data.len()).is_none_or(|e| e > self.len) {
            return false;
        }
        // SAFETY: as in `read`; the attached buffer is writable by contract.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.ptr + off) as *mut u8, data.len())
        };
        true
    }
}
