//! The NTFF container reader on the six profiles.

#[path = "../examples/align/common.rs"]
mod common;

use common::*;
use neuron_isa::ntff::{Ntff, NtffError};
use neuron_isa::Engine;

#[test]
fn toc_locates_every_program() {
    for k in kernels() {
        let nt = read_ntff(&fixtures().join(format!("real-profiles/{k}.ntff")));
        assert!(nt.neff_name.ends_with(".neff"), "{k}: {}", nt.neff_name);
        assert_eq!(nt.programs.len(), 10);
        for p in &nt.programs {
            assert_eq!(p.bytes.len() % 64, 0);
            // prologue / NEFF body / epilogue segments.
            assert_eq!(p.segments.len(), 3, "{k} {} {}", p.subgraph, p.engine);
            assert_eq!(p.segments[1].kind, 2);
            let epi = p.epilogue_start().expect("epilogue") as usize;
            assert_eq!(epi + p.segments[2].count as usize, p.words(), "{k}");
            // Every program starts with NOTIFY and ends with NOTIFY, COMPARE_BRANCH ALWAYS.
            let w = &p.bytes;
            assert_eq!(w[0], 0xa6);
            assert_eq!(w[w.len() - 128], 0xa6);
            assert_eq!(w[w.len() - 64], 0xa9);
        }
        // Programs are contiguous in the blob, sg00 then sg01, engines in order.
        let mut off = nt.blob_offset;
        for sg in ["sg00", "sg01"] {
            for e in Engine::ALL {
                let p = nt.program(sg, e).expect("program");
                assert_eq!(p.file_offset, off, "{k} {sg} {e}");
                off += p.bytes.len();
            }
        }
    }
}

#[test]
fn rejects_garbage() {
    assert_eq!(Ntff::parse(&[0u8; 10]).err(), Some(NtffError::Short(10)));
    let mut b = vec![0u8; 256];
    b[0] = 7;
    assert_eq!(Ntff::parse(&b).err(), Some(NtffError::Magic(7)));
    b[0] = 6;
    b[1] = 0xff;
    b[2] = 0xff;
    assert!(Ntff::parse(&b).is_err());
}
