//! Sparse device memory: only pages that were written use host memory; untouched pages read
//! as zeros. A trn2 device has 96 GiB of HBM; a typical run touches a few MiB.

use std::collections::HashMap;

pub const PAGE: u64 = 64 * 1024;

#[derive(Debug, Default)]
pub struct SparseMem {
    pages: HashMap<u64, Box<[u8]>>,
}

impl SparseMem {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes of host memory in use.
    pub fn resident_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(buf.len() - done);
            match self.pages.get(&pg) {
                Some(p) => buf[done..done + n].copy_from_slice(&p[off..off + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(data.len() - done);
            let page = self
                .pages
                .entry(pg)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Fill with a byte (zero fills of untouched pages stay sparse).
    pub fn fill(&mut self, addr: u64, len: u64, byte: u8) {
        let mut done = 0u64;
        while done < len {
            let a = addr + done;
            let (pg, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE - off as u64).min(len - done) as usize;
            if byte == 0 && !self.pages.contains_key(&pg) {
                done += n as u64;
                continue;
            }
            let page = self
                .pages
                .entry(pg)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[off..off + n].fill(byte);
            done += n as u64;
        }
    }

    /// Drop the pages fully inside `[addr, addr+len)` (freed memory returns to the host).
    pub fn discard(&mut self, addr: u64, len: u64) {
        let first = addr.div_ceil(PAGE);
        let end = (addr + len) / PAGE;
        if end > first && end - first < self.pages.len() as u64 * 4 {
            for pg in first..end {
                self.pages.remove(&pg);
            }
        } else {
            self.pages.retain(|pg, _| *pg < first || *pg >= end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_read_write_across_pages() {
        let mut m = SparseMem::new();
        let mut b = [1u8; 8];
        m.read(0x5_0000_0000, &mut b);
        assert_eq!(b, [0; 8]);
        assert_eq!(m.resident_bytes(), 0);
        let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        m.write(PAGE - 100, &data);
        assert_eq!(m.resident_bytes(), 2 * PAGE);
        let mut back = vec![0u8; 200];
        m.read(PAGE - 100, &mut back);
        assert_eq!(back, data);
        m.discard(0, 4 * PAGE);
        assert_eq!(m.resident_bytes(), 0);
        m.fill(10, 3 * PAGE, 0);
        assert_eq!(m.resident_bytes(), 0);
        m.fill(10, 5, 7);
        m.read(8, &mut b);
        assert_eq!(b, [0, 0, 7, 7, 7, 7, 7, 0]);
    }
}
