//! One NeuronCore's on-chip memories (SBUF and PSUM) and the scratch buffers its data path
//! reuses. The trn2 instruction semantics that work on them are in `cayman_exec`.

use crate::arch::ArchProfile;
use crate::hostmem::{F32Mem, MemSource};
use neuron_isa::Space;
use zerocopy::IntoBytes;

/// On-chip memories of one core.
#[derive(Debug)]
pub struct CoreMem {
    pub partitions: usize,
    pub sbuf_pb: usize,
    pub psum_pb: usize,
    /// Distance between partitions in storage: the TPB window's stride (256 KiB for SBUF,
    /// 16 KiB for PSUM), so the SBUF storage is exactly the 32 MiB window user space maps.
    pub sbuf_stride: usize,
    pub psum_stride: usize,
    /// SBUF, partition-major, `partitions * sbuf_pb` bytes, stored as f32 words so fp32 tiles
    /// can feed the GEMM without copies; page-aligned, possibly in memory user space maps.
    pub sbuf: F32Mem,
    pub psum: F32Mem,
}

impl CoreMem {
    pub fn new(p: &ArchProfile) -> Self {
        Self::with_memory(p, &crate::hostmem::heap_source)
    }

    /// SBUF and PSUM storage from `src` (the heap where it gives none). Allocation failure of
    /// this fixed-size, lazily-touched memory is fatal, like any allocation failure.
    pub fn with_memory(p: &ArchProfile, src: MemSource) -> Self {
        let words = |stride: u64| p.partitions * stride as usize / 4;
        let alloc = |n: usize| F32Mem::zeroed(n, src).expect("SBUF/PSUM storage");
        CoreMem {
            partitions: p.partitions,
            sbuf_pb: p.sbuf_partition_bytes,
            psum_pb: p.psum_partition_bytes,
            sbuf_stride: crate::arch::tpb::SBUF_PARTITION_STRIDE as usize,
            psum_stride: crate::arch::tpb::PSUM_PARTITION_STRIDE as usize,
            // Zeroed allocations this large come straight from the OS (or a sparse memfd):
            // untouched pages cost nothing.
            sbuf: alloc(words(crate::arch::tpb::SBUF_PARTITION_STRIDE)),
            psum: alloc(words(crate::arch::tpb::PSUM_PARTITION_STRIDE)),
        }
    }

    /// Reset-time clearing. PSUM (2 MiB) is zeroed; SBUF keeps its contents, as SRAM does
    /// across a core reset: zeroing the 32 MiB window would touch every page of it on each
    /// load, and programs must initialise what they read anyway.
    pub fn clear(&mut self) {
        self.psum.fill(0.0);
    }

    pub fn bytes(&self, s: Space) -> &[u8] {
        match s {
            Space::Sbuf => self.sbuf.as_bytes(),
            Space::Psum => self.psum.as_bytes(),
        }
    }

    /// The storage of `s` as f32 words (fp32 views of aligned tiles index it directly).
    pub fn f32s(&self, s: Space) -> &[f32] {
        match s {
            Space::Sbuf => &self.sbuf,
            Space::Psum => &self.psum,
        }
    }

    pub fn f32s_mut(&mut self, s: Space) -> &mut [f32] {
        match s {
            Space::Sbuf => &mut self.sbuf,
            Space::Psum => &mut self.psum,
        }
    }

    pub fn bytes_mut(&mut self, s: Space) -> &mut [u8] {
        match s {
            Space::Sbuf => self.sbuf.as_mut_bytes(),
            Space::Psum => self.psum.as_mut_bytes(),
        }
    }

    /// The bytes of `from` to read and of the other space to write (a move between SBUF and
    /// PSUM in one copy).
    pub fn across(&mut self, from: Space) -> (&[u8], &mut [u8]) {
        match from {
            Space::Sbuf => (self.sbuf.as_bytes(), self.psum.as_mut_bytes()),
            Space::Psum => (self.psum.as_bytes(), self.sbuf.as_mut_bytes()),
        }
    }
}

/// Scratch buffers reused across instructions (no allocation on the hot path).
#[derive(Debug, Default)]
pub struct Scratch {
    pub a: Vec<f32>,
    pub b: Vec<f32>,
    pub c: Vec<f32>,
    pub bytes: Vec<u8>,
    /// A MATMUL's moving tensor packed for AMX tiles, and the tiles' product.
    pub bpack: crate::gemm::amx::PackedB,
    pub tiles: Vec<f32>,
    /// A bf16 moving tensor's raw bits, for the tiles.
    pub bits16: Vec<u16>,
}
