//! Rows of an on-chip memory kept for a later reader: a deferred fp32 pass pair reads its
//! moving tensor where it lies, and a matrix-vector MATMUL its bf16 weights where LDWEIGHTS
//! found them; the core's memory (`core::CoreMem`, which sees every write) copies the rows
//! out just before their space is next written. Until then they cost nothing; after, the
//! copy holds them as they were.

use crate::gemm::View;
use neuron_isa::Space;

/// `k` rows of `n` elements of `space` at `view` (row `r` at `view.off + r * view.rs`,
/// elements consecutive; `T` the storage seen as f32 words or as 16-bit bf16 bits), and
/// their copy once the space has been written.
#[derive(Debug)]
pub struct Kept<T = f32> {
    pub space: Space,
    view: View,
    k: usize,
    n: usize,
    /// The rows as they were (dense, `k x n`), once a write to `space` came; the buffer
    /// otherwise (its capacity reused).
    copy: Vec<T>,
    copied: bool,
}

impl<T: Copy> Kept<T> {
    /// Rows at `view` (`cs` 1) of storage `len` elements long, `buf` the buffer for their
    /// copy; None where a row would leave the storage, or there are none.
    pub(crate) fn new(
        space: Space,
        view: View,
        k: usize,
        n: usize,
        len: usize,
        buf: Vec<T>,
    ) -> Option<Kept<T>> {
        let fits = view.cs == 1 && k > 0 && view.last(k, n).is_some_and(|l| l < len);
        fits.then_some(Kept {
            space,
            view,
            k,
            n,
            copy: buf,
            copied: false,
        })
    }

    /// Copy the rows out of `from` (their space's storage, about to be written), once.
    pub(crate) fn save(&mut self, from: &[T]) {
        if self.copied {
            return;
        }
        self.copy.clear();
        for r in 0..self.k {
            let at = self.view.off + r * self.view.rs;
            // `new` checked every row lies in the storage.
            self.copy.extend_from_slice(&from[at..at + self.n]);
        }
        self.copied = true;
    }

    /// The rows' copy, if the space has been written since they were kept (the values then
    /// lie only here: dense, `k x n`).
    pub fn copy(&self) -> Option<&[T]> {
        self.copied.then_some(&self.copy[..])
    }

    /// Where the rows lie in their space's storage (read there while [`Kept::copy`] is None).
    pub fn view(&self) -> View {
        self.view
    }

    /// The columns `[lo, hi)` (bytes of each partition) the rows lie in, where they lie in
    /// one partition each at the same offset (rows a partition's `stride` bytes apart,
    /// elements of `size` bytes); None for other layouts (every write then meets them).
    pub fn cols(&self, stride: usize, size: usize) -> Option<(usize, usize)> {
        let row = self.view.rs.checked_mul(size)?;
        if row != stride || stride == 0 {
            return None;
        }
        let lo = self.view.off.checked_mul(size)? % stride;
        let hi = lo.checked_add(self.n.checked_mul(size)?)?;
        (hi <= stride).then_some((lo, hi))
    }

    /// The rows' number and length.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.n)
    }

    /// The copy's buffer, for reuse.
    pub fn into_buffer(self) -> Vec<T> {
        self.copy
    }

    /// The copy's buffer, holding the rows (dense, `k x n`) whether or not a write came: the
    /// copy, or the rows copied now out of `from`, their space's storage.
    pub fn into_rows(mut self, from: &[T]) -> Vec<T> {
        self.save(from);
        self.copy
    }
}
