//! Writer → reader round trips (property-based) and writer determinism.

mod common;

use neuron_neff::{
    Neff, NeffError, NeffHeader, NeffWriter, ParseOptions, DATA_BLOCK, FEATURE_EMU_TEST_ISA,
    KNOWN_FEATURE_BITS,
};
use proptest::prelude::*;

fn member_path() -> impl Strategy<Value = String> {
    // Components never start with '.', so "." and ".." cannot occur.
    "[a-z0-9_][a-z0-9_.-]{0,11}(/[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,11}){0,3}"
}

fn members() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    prop::collection::btree_map(
        member_path(),
        prop::collection::vec(any::<u8>(), 0..2048),
        0..10,
    )
    .prop_map(|m| m.into_iter().collect::<Vec<_>>())
    .prop_shuffle()
}

prop_compose! {
    fn header()(
        pkg_version in prop_oneof![Just(1u64), Just(2u64)],
        version_major in 0u64..=2,
        version_minor in any::<u64>(),
        build in "[ -~]{0,127}",
        num_tpb in any::<u32>(),
        uuid in any::<[u8; 16]>(),
        name in "[a-zA-Z0-9_. -]{0,255}",
        requested_tpb_count in any::<u32>(),
        tpb_per_node in prop::collection::vec(any::<u8>(), 64),
        feature_bits in any::<u64>(),
        lnc_size in any::<u32>(),
    ) -> NeffHeader {
        let mut h = NeffHeader {
            pkg_version,
            version_major,
            version_minor,
            num_tpb,
            uuid,
            requested_tpb_count,
            feature_bits: feature_bits & KNOWN_FEATURE_BITS,
            lnc_size,
            ..NeffHeader::default()
        };
        h.build_version[..build.len()].copy_from_slice(build.as_bytes());
        h.tpb_per_node.copy_from_slice(&tpb_per_node);
        h.set_name(&name).expect("name fits");
        h
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn writer_output_reads_back_identically(h in header(), ms in members()) {
        let mut w = NeffWriter::new("ignored");
        w.header = h.clone();
        for (p, b) in &ms {
            w.add_member(p, b.clone());
        }
        let bytes = w.to_bytes().expect("valid input writes");
        prop_assert_eq!(bytes.len() % DATA_BLOCK, 1024 % DATA_BLOCK);
        // Deterministic.
        prop_assert_eq!(&bytes, &w.to_bytes().expect("writes again"));

        let opts = ParseOptions { validate_hash: true, ..ParseOptions::default() };
        let n = Neff::parse_with(&bytes, &opts).expect("reads back");
        let got = n.header();
        let mut want = h.clone();
        want.header_size = 1024;
        want.data_size = got.data_size;
        want.hash = got.hash;
        prop_assert_eq!(got, &want);
        prop_assert_eq!(got.data_size as usize, bytes.len() - 1024);
        if h.pkg_version == 2 {
            prop_assert!(got.hash[16..].iter().all(|&b| b == 0));
        }

        let back: Vec<(String, Vec<u8>)> =
            n.members().map(|(p, b)| (p.to_owned(), b.to_vec())).collect();
        prop_assert_eq!(&back, &ms);
        for (p, b) in &ms {
            prop_assert_eq!(n.member(p), Some(b.as_slice()));
        }
    }

    /// Byte flips anywhere in a valid NEFF give an error or a parse, never a panic.
    #[test]
    fn mutations_never_panic(pos in 0usize..4096, val in any::<u8>(), cut in 0usize..8192) {
        let base = common::sample_model().to_bytes().expect("writes");
        let mut m = base.clone();
        let i = pos % m.len();
        m[i] ^= val | 1;
        if let Ok(n) = Neff::parse(&m) {
            let _ = n.validate_references();
            let _ = n.neff_json();
            let _ = n.tensor_map("sg00");
            let _ = n.npy("sg00/w.npy");
        }
        let _ = Neff::parse(&base[..cut.min(base.len())]);
    }
}

#[test]
fn writer_is_deterministic_and_uuid_is_name_derived() {
    let a = common::sample_model().to_bytes().expect("writes");
    let b = common::sample_model().to_bytes().expect("writes");
    assert_eq!(a, b);
    let n = Neff::parse(&a).expect("reads");
    let h = n.header();
    assert_eq!(h.uuid, neuron_neff::uuid_from_name("sample.neff"));
    assert_eq!(h.uuid[6] >> 4, 3, "RFC 4122 version 3");
    assert_eq!(h.uuid[8] >> 6, 0b10, "RFC 4122 variant");
    assert_ne!(
        NeffWriter::new("other.neff").header.uuid,
        NeffWriter::new("sample.neff").header.uuid
    );
    assert_eq!(h.name_str(), "sample.neff");
    assert_eq!((h.pkg_version, h.version_major, h.version_minor), (2, 2, 0));
}

#[test]
fn writer_archive_layout_matches_real_files() {
    let bytes = common::sample_model().to_bytes().expect("writes");
    let data = &bytes[1024..];
    assert_eq!(&data[..3], &[0x1f, 0x8b, 0x08]);
    assert_eq!(&data[4..8], &[0, 0, 0, 0], "gzip mtime 0");
    assert_eq!(data[9], 3, "gzip OS = Unix");
    let mut tar = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(data), &mut tar).expect("gunzip");
    let h = &tar[..512];
    assert_eq!(&h[257..265], b"ustar\x0000");
    assert_eq!(&h[100..107], b"0000664");
    assert_eq!(&h[265..271], b"nobody");
    assert_eq!(&h[136..147], b"00000000000", "mtime 0");
    assert_eq!(h[156], b'0');
}

#[test]
fn sample_model_views_and_references() {
    let n = Neff::parse(&common::sample_model().to_bytes().expect("writes")).expect("reads");
    n.validate_references().expect("references");
    let nj = n.neff_json().expect("neff.json");
    assert_eq!(
        nj.inputs(),
        vec![("x".to_owned(), "float32".to_owned(), vec![128, 1])]
    );
    let def = n.subgraph_def("sg00/def.json").expect("def");
    assert_eq!(def.dma_queue["qSPDynamicHW"].semaphore_set, [8, 9]);
    assert_eq!(
        def.extra.get("version").and_then(|v| v.as_str()),
        Some("0.6")
    );
    let w = n.npy("sg00/w.npy").expect("npy");
    assert_eq!(w.shape, [4, 4]);
    assert!(n.info().expect("info").is_some());
}

#[test]
fn long_paths_use_the_ustar_prefix() {
    let long_dir = "d".repeat(90);
    let path = format!("{long_dir}/{}", "f".repeat(90));
    let mut w = NeffWriter::new("long");
    w.add_member(&path, b"x".to_vec());
    let n = Neff::parse(&w.to_bytes().expect("writes")).expect("reads");
    assert_eq!(n.member(&path), Some(&b"x"[..]));

    let mut w = NeffWriter::new("too-long");
    w.add_member(&"g".repeat(120), b"x".to_vec());
    assert!(matches!(w.to_bytes(), Err(NeffError::BadMemberPath { .. })));
}

#[test]
fn writer_refuses_what_the_reader_would_refuse() {
    let mut w = NeffWriter::new("x");
    w.add_member("a/../b", vec![]);
    assert!(matches!(
        w.to_bytes(),
        Err(NeffError::BadMemberPath { reason, .. }) if reason.contains("..")
    ));

    let mut w = NeffWriter::new("x");
    w.add_member("a", vec![1]);
    w.add_member("./a", vec![2]);
    assert!(matches!(w.to_bytes(), Err(NeffError::DuplicateMember { path }) if path == "a"));

    let mut w = NeffWriter::new("x");
    w.header.version_major = 3;
    assert!(matches!(
        w.to_bytes(),
        Err(NeffError::UnsupportedVersion { major: 3, .. })
    ));

    let mut w = NeffWriter::new("x");
    w.header.feature_bits = 1 << 40;
    assert!(matches!(
        w.to_bytes(),
        Err(NeffError::UnknownFeatureBits { unknown, .. }) if unknown == 1 << 40
    ));

    let mut w = NeffWriter::new("x");
    w.header.pkg_version = 9;
    assert!(matches!(
        w.to_bytes(),
        Err(NeffError::UnsupportedPackager { pkg_version: 9 })
    ));

    // The project test-ISA bit is accepted (a real libnrt would refuse it).
    let mut w = NeffWriter::new("x");
    w.header.feature_bits = FEATURE_EMU_TEST_ISA;
    let n = Neff::parse(&w.to_bytes().expect("writes")).expect("reads");
    assert_eq!(n.header().feature_bits, FEATURE_EMU_TEST_ISA);
    assert_ne!(
        FEATURE_EMU_TEST_ISA & neuron_neff::LIBNRT_REJECTED_FEATURE_MASK,
        0
    );
}

#[test]
fn empty_neff_round_trips() {
    let bytes = NeffWriter::new("").to_bytes().expect("writes");
    let n = Neff::parse(&bytes).expect("reads");
    assert_eq!(n.member_count(), 0);
    assert!(matches!(
        n.neff_json(),
        Err(NeffError::MissingMember { path, .. }) if path == "neff.json"
    ));
    assert_eq!(n.info().expect("absent is fine"), None);
}

#[test]
fn overlong_writer_name_is_cut_at_a_char_boundary() {
    let name = "é".repeat(200); // 400 bytes
    let w = NeffWriter::new(&name);
    let s = w.header.name_str();
    assert!(s.len() <= 255);
    assert!(name.starts_with(&s));
}
