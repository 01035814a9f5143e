//! Rows of an on-chip memory kept for a later reader: a deferred fp32 pass pair reads its
//! moving tensor where it lies, and the core's memory (`core::CoreMem`, which sees every
//! write) copies the rows out just before their space is next written. Until then they cost
//! nothing; after, the copy holds them as they were.

use crate::gemm::View;
use neuron_isa::Space;

/// `k` rows of `n` fp32 words of `space` at `view` (row `r` at `view.off + r * view.rs`,
/// words consecutive), and their copy once the space has been written.
#[derive(Debug)]
pub struct Kept {
    pub space: Space,
    view: View,
    k: usize,
    n: usize,
    /// The rows as they were (dense, `k x n`), once a write to `space` came; the buffer
    /// otherwise (its capacity reused).
    copy: Vec<f32>,
    copied: bool,
}

impl Kept {
    /// Rows at `view` (`cs` 1) of storage `len` words long, `buf` the buffer for their copy;
    /// None where a row would leave the storage, or there are none.
    pub(crate) fn new(
        space: Space,
        view: View,
        k: usize,
        n: usize,
        len: usize,
        buf: Vec<f32>,
    ) -> Option<Kept> {
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
    pub(crate) fn save(&mut self, from: &[f32]) {
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
    pub fn copy(&self) -> Option<&[f32]> {
        self.copied.then_some(&self.copy[..])
    }

    /// The copy's buffer, for reuse.
    pub fn into_buffer(self) -> Vec<f32> {
        self.copy
    }
}
