//! Fuzz the firmware-carrier reader.
//!
//! Invariants: no panic; a successful parse is deterministic, every image's bytes are the file's
//! bytes at its range, and its digest is the SHA-256 of those bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

fuzz_target!(|data: &[u8]| {
    let Ok(carrier) = neuron_firmware_loader::parse(data) else {
        return;
    };
    assert_eq!(neuron_firmware_loader::parse(data).as_ref(), Ok(&carrier));
    for img in &carrier.images {
        assert_eq!(data.get(img.file_range.clone()), Some(img.bytes.as_slice()));
        assert_eq!(img.sha256, <[u8; 32]>::from(Sha256::digest(&img.bytes)));
    }
});
