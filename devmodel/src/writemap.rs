//! Where an on-chip memory was last written, by column block (a byte range of every
//! partition): what lets a memo of its contents (a transpose's identity) or rows read where
//! they lie (`kept`) outlive writes to other columns. A write that says which columns it
//! touches stamps their blocks with its count (`CoreMem::writes`); one that does not stamps
//! them all.

/// Bytes of a partition one stamp covers.
pub const BLOCK: usize = 256;

/// The last write count of each column block of one memory, and of the last write that
/// named no columns.
#[derive(Debug, Clone)]
pub struct Stamps {
    all: u64,
    blocks: Vec<u64>,
}

impl Stamps {
    /// Stamps for partitions of `bytes` bytes, none written.
    pub fn new(bytes: usize) -> Stamps {
        Stamps {
            all: 0,
            blocks: vec![0; bytes.div_ceil(BLOCK)],
        }
    }

    /// Write `count` touched every column.
    pub fn all(&mut self, count: u64) {
        self.all = count;
    }

    /// Write `count` touched columns `[lo, hi)` of some partitions (past the partition's
    /// end: every column, as [`Stamps::all`]).
    pub fn cols(&mut self, count: u64, lo: usize, hi: usize) {
        match self.blocks.get_mut(lo / BLOCK..hi.div_ceil(BLOCK)) {
            Some(b) => b.fill(count),
            None => self.all = count,
        }
    }

    /// Whether no write after count `since` touched columns `[lo, hi)`.
    pub fn unwritten_since(&self, since: u64, lo: usize, hi: usize) -> bool {
        self.all <= since
            && self
                .blocks
                .get(lo / BLOCK..hi.div_ceil(BLOCK))
                .is_some_and(|b| b.iter().all(|c| *c <= since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write to some columns leaves others unwritten since; one to all columns, or to
    /// columns past the partition, writes everything; a range straddling a block boundary
    /// sees both blocks.
    #[test]
    fn writes_stamp_their_columns_or_all() {
        let mut s = Stamps::new(4 * BLOCK);
        assert!(s.unwritten_since(0, 0, 4 * BLOCK));
        s.cols(1, BLOCK, BLOCK + 8);
        assert!(s.unwritten_since(0, 0, BLOCK));
        assert!(s.unwritten_since(0, 2 * BLOCK, 4 * BLOCK));
        assert!(!s.unwritten_since(0, BLOCK - 4, BLOCK + 4));
        assert!(
            s.unwritten_since(1, 0, 4 * BLOCK),
            "written at 1, not after"
        );
        s.cols(2, 3 * BLOCK - 1, 3 * BLOCK + 1);
        assert!(!s.unwritten_since(1, 2 * BLOCK, 2 * BLOCK + 1));
        assert!(!s.unwritten_since(1, 3 * BLOCK, 3 * BLOCK + 1));
        s.cols(3, 3 * BLOCK, 5 * BLOCK);
        assert!(!s.unwritten_since(2, 0, 1), "past the end: everything");
        s.all(4);
        assert!(!s.unwritten_since(3, 0, 1));
        assert!(!s.unwritten_since(0, 0, 5 * BLOCK), "columns past the end");
    }
}
