//! A malformed-input corpus built in the test; each case asserts its
//! specific error variant. Also the accepted-dialect cases (GNU tar,
//! directory entries, `./` prefixes, pax, long names).

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{assemble, gzip, neff_from_entries, raw_header, raw_tar, sample_model};
use flate2::{Compression, GzBuilder};
use neuron_neff::npy::NpyError;
use neuron_neff::{Limits, Neff, NeffError, NeffHeader, ParseOptions, HEADER_SIZE};

fn valid() -> Vec<u8> {
    sample_model().to_bytes().expect("writes")
}

fn set_u64(bytes: &mut [u8], off: usize, v: u64) {
    bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

fn opts(limits: Limits) -> ParseOptions {
    ParseOptions {
        limits,
        validate_hash: false,
    }
}

/// End of the gzip member is at or after the last non-zero byte.
fn last_nonzero(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).expect("non-empty")
}

#[test]
fn truncated_files() {
    let v = valid();
    for len in [0, 1, 100, 512, 1023] {
        assert!(
            matches!(Neff::parse(&v[..len]), Err(NeffError::FileTooShort { len: l }) if l == len),
            "len {len}"
        );
    }
    // Cut inside the payload, header unchanged: data_size runs past the end.
    for len in [1024, 1025, 2000, v.len() - 1] {
        assert!(
            matches!(
                Neff::parse(&v[..len]),
                Err(NeffError::DataSizeMismatch { data_size, available })
                    if data_size == (v.len() - 1024) as u64 && available == (len - 1024) as u64
            ),
            "len {len}"
        );
    }
    // Cut inside the gzip member with data_size adjusted to match: gzip error.
    let end = last_nonzero(&v);
    for cut in [1024 + 5, 1024 + 20, (1024 + end) / 2, end - 4, end] {
        let mut t = v[..cut].to_vec();
        set_u64(&mut t, 16, (cut - 1024) as u64);
        let r = Neff::parse(&t);
        assert!(matches!(r, Err(NeffError::Gzip(_))), "cut {cut}: {r:?}");
    }
    // Nothing at all after the header.
    let mut t = v[..1024].to_vec();
    set_u64(&mut t, 16, 0);
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))));
}

#[test]
fn bad_header_size() {
    for hs in [0u64, 512, 1023, 1025, 2048, u64::MAX] {
        let mut v = valid();
        set_u64(&mut v, 8, hs);
        assert!(
            matches!(Neff::parse(&v), Err(NeffError::HeaderSizeMismatch { header_size }) if header_size == hs),
            "{hs}"
        );
        assert!(matches!(
            NeffHeader::parse(&v),
            Err(NeffError::HeaderSizeMismatch { .. })
        ));
    }
}

#[test]
fn data_size_too_big() {
    let mut v = valid();
    let avail = (v.len() - HEADER_SIZE) as u64;
    for ds in [avail + 1, u64::MAX] {
        set_u64(&mut v, 16, ds);
        assert!(matches!(
            Neff::parse(&v),
            Err(NeffError::DataSizeMismatch { data_size, available }) if data_size == ds && available == avail
        ));
    }
}

#[test]
fn extra_bytes_after_data_size_are_ignored() {
    let mut v = valid();
    v.extend_from_slice(b"not part of the NEFF");
    assert_eq!(Neff::parse(&v).expect("parses").member_count(), 16);
}

#[test]
fn unsupported_version() {
    for (major, minor) in [(3u64, 0u64), (3, 7), (u64::MAX, 0)] {
        let mut v = valid();
        set_u64(&mut v, 24, major);
        set_u64(&mut v, 32, minor);
        assert!(matches!(
            Neff::parse(&v),
            Err(NeffError::UnsupportedVersion { major: a, minor: b }) if a == major && b == minor
        ));
    }
    // 0.x, 1.x and any minor are accepted.
    for (major, minor) in [(0u64, 0u64), (1, 0), (2, 99)] {
        let mut v = valid();
        set_u64(&mut v, 24, major);
        set_u64(&mut v, 32, minor);
        Neff::parse(&v).expect("accepted version");
    }
}

#[test]
fn unknown_feature_bits() {
    for bad in [0x1u64, 0x40000, 0x800000, 0x4000000, 1 << 40, 1 << 63] {
        let mut v = valid();
        set_u64(&mut v, 544, 0xc00 | bad);
        assert!(
            matches!(
                Neff::parse(&v),
                Err(NeffError::UnknownFeatureBits { bits, unknown }) if bits == 0xc00 | bad && unknown == bad
            ),
            "{bad:#x}"
        );
    }
}

#[test]
fn gzip_bomb_of_64_mib_hits_a_small_limit_fast() {
    // One 64 MiB member of zeros, compressed as a stream (never materialized).
    let size: u64 = 64 << 20;
    let mut gz = GzBuilder::new().write(Vec::new(), Compression::fast());
    gz.write_all(&raw_header(b"bomb", size, b'0'))
        .expect("vec write");
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&chunk).expect("vec write");
    }
    gz.write_all(&[0u8; 1024]).expect("vec write");
    let payload = gz.finish().expect("vec write");
    let bytes = assemble(&NeffHeader::default(), &payload);

    let limits = Limits {
        max_inflated_bytes: 1 << 20,
        ..Limits::default()
    };
    let t = Instant::now();
    assert!(matches!(
        Neff::parse_with(&bytes, &opts(limits)),
        Err(NeffError::InflatedTooLarge { limit }) if limit == 1 << 20
    ));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // The per-member limit catches it from the header, before inflating.
    let limits = Limits {
        max_member_bytes: 1 << 20,
        ..Limits::default()
    };
    assert!(matches!(
        Neff::parse_with(&bytes, &opts(limits)),
        Err(NeffError::MemberTooLarge { path, size: s, limit }) if path == "bomb" && s == size && limit == 1 << 20
    ));
    // With default limits it is a legitimate 64 MiB member.
    let n = Neff::parse(&bytes).expect("fits the defaults");
    assert_eq!(n.member("bomb").map(<[u8]>::len), Some(64 << 20));
}

/// 2 GiB of zeros (no tar structure at all) against the default 1 GiB limit.
/// Built with a streaming encoder; memory stays bounded on both sides.
#[test]
fn gzip_bomb_of_2_gib_hits_the_default_limit() {
    let mut gz = GzBuilder::new().write(Vec::new(), Compression::fast());
    let chunk = vec![0u8; 4 << 20];
    for _ in 0..512 {
        gz.write_all(&chunk).expect("vec write");
    }
    let payload = gz.finish().expect("vec write");
    assert!(payload.len() < 16 << 20, "compressed: {}", payload.len());
    let bytes = assemble(&NeffHeader::default(), &payload);
    let t = Instant::now();
    assert!(matches!(
        Neff::parse(&bytes),
        Err(NeffError::InflatedTooLarge { limit }) if limit == 1 << 30
    ));
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

#[test]
fn bad_member_paths() {
    for (path, reason_has) in [
        ("/etc/passwd", "absolute"),
        ("a/../b", ".."),
        ("..", ".."),
        ("../x", ".."),
        ("a/./b", "'.'"),
        ("a//b", "empty"),
        ("./", "empty"),
    ] {
        let v = neff_from_entries(&[("ok", b"1"), (path, b"2")]);
        let r = Neff::parse(&v);
        assert!(
            matches!(&r, Err(NeffError::BadMemberPath { path: p, reason }) if p == path && reason.contains(reason_has)),
            "{path}: {r:?}"
        );
    }
    // Non-UTF-8 name.
    let v = assemble(
        &NeffHeader::default(),
        &gzip(&raw_tar(&[(b"bad\xff", b"x", b'0')])),
    );
    assert!(matches!(
        Neff::parse(&v),
        Err(NeffError::BadMemberPath {
            reason: "not UTF-8",
            ..
        })
    ));
}

#[test]
fn duplicate_members() {
    let v = neff_from_entries(&[("a/b", b"1"), ("c", b"2"), ("a/b", b"3")]);
    assert!(matches!(Neff::parse(&v), Err(NeffError::DuplicateMember { path }) if path == "a/b"));
    // "./x" and "x" are the same member.
    let v = neff_from_entries(&[("./x", b"1"), ("x", b"2")]);
    assert!(matches!(Neff::parse(&v), Err(NeffError::DuplicateMember { path }) if path == "x"));
}

fn model_with(path: &str, bytes: &[u8]) -> Neff {
    let n = Neff::parse(&valid()).expect("valid");
    let mut w = neuron_neff::NeffWriter::new("patched");
    for (p, b) in n.members() {
        if p != path {
            w.add_member(p, b.to_vec());
        }
    }
    w.add_member(path, bytes.to_vec());
    Neff::parse(&w.to_bytes().expect("writes")).expect("parses")
}

fn model_without(path: &str) -> Neff {
    let n = Neff::parse(&valid()).expect("valid");
    let mut w = neuron_neff::NeffWriter::new("patched");
    for (p, b) in n.members().filter(|(p, _)| *p != path) {
        w.add_member(p, b.to_vec());
    }
    Neff::parse(&w.to_bytes().expect("writes")).expect("parses")
}

#[test]
fn bad_json_in_def() {
    let n = model_with("sg00/def.json", b"{\"var\": {");
    assert!(matches!(
        n.subgraph_def("sg00/def.json"),
        Err(NeffError::Json { member, .. }) if member == "sg00/def.json"
    ));
    assert!(matches!(
        n.validate_references(),
        Err(NeffError::Json { member, .. }) if member == "sg00/def.json"
    ));
    let n = model_with("neff.json", b"not json");
    assert!(matches!(n.neff_json(), Err(NeffError::Json { .. })));
    assert!(matches!(n.kelf(), Err(NeffError::Json { member, .. }) if member == "neff.json"));
}

#[test]
fn wrong_json_types() {
    let def = br#"{"dma_queue": {"q": {"type": "dynamic", "num_queues": "x", "owner": "sp", "semaphore_set": []}}}"#;
    let n = model_with("sg00/def.json", def);
    assert!(matches!(
        n.subgraph_def("sg00/def.json"),
        Err(NeffError::JsonShape { member, what }) if member == "sg00/def.json" && what.contains("string")
    ));
    let n = model_with("sg00/def.json", br#"{"var": {"x": {"type": 5}}}"#);
    assert!(matches!(
        n.subgraph_def("sg00/def.json"),
        Err(NeffError::JsonShape { .. })
    ));
    let n = model_with("sg00/def.json", b"[1, 2]");
    assert!(matches!(
        n.subgraph_def("sg00/def.json"),
        Err(NeffError::JsonShape { .. })
    ));
    let n = model_with("kelf-0.json", br#"{"graphs": "sg00"}"#);
    assert!(
        matches!(n.kelf(), Err(NeffError::JsonShape { member, .. }) if member == "kelf-0.json")
    );
    let n = model_with("sg00/PE.json", br#"{"dma": [{"id": -1}]}"#);
    assert!(matches!(
        n.engine_json("sg00", "PE.json"),
        Err(NeffError::JsonShape { .. })
    ));
    let n = model_with("sg00/tensor_map.json", br#"{"x": {"kind": "input"}}"#);
    assert!(matches!(
        n.tensor_map("sg00"),
        Err(NeffError::JsonShape { what, .. }) if what.contains("dtype")
    ));
}

#[test]
fn corrupted_gzip() {
    let v = valid();
    let end = last_nonzero(&v);
    // Bad magic.
    let mut t = v.clone();
    t[1024] = 0x1e;
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))));
    // Bad compression method.
    let mut t = v.clone();
    t[1026] = 7;
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))));
    // First deflate block with the reserved block type (BTYPE = 11).
    let mut t = v.clone();
    t[1024 + 10] = 0x07;
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))));
    // CRC32 of the trailer: the 8 trailer bytes end at the gzip end. ISIZE's
    // top byte is 0 for this small archive, so the last non-zero byte is
    // inside ISIZE; the CRC sits just before ISIZE.
    let isize_start = {
        // find the gzip end by decoding
        let mut d = flate2::bufread::GzDecoder::new(&v[1024..]);
        std::io::copy(&mut d, &mut std::io::sink()).expect("valid gzip");
        let rest = d.into_inner();
        v.len() - rest.len() - 4
    };
    assert!(isize_start <= end && end < isize_start + 4);
    let mut t = v.clone();
    t[isize_start - 2] ^= 0xff;
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))), "CRC");
    let mut t = v.clone();
    t[isize_start] ^= 0x01;
    assert!(matches!(Neff::parse(&t), Err(NeffError::Gzip(_))), "ISIZE");
}

/// A flipped byte inside the compressed stream of a real NEFF is reported
/// as a gzip error (the CRC check wins over the tar symptoms it causes).
#[test]
fn corrupted_deflate_data_in_a_real_file() {
    let v = common::fixture("akc-fused_bf16_s512.neff");
    let end = last_nonzero(&v);
    for frac in [10, 25, 50, 75, 90, 99] {
        let pos = 1024 + 10 + (end - 1024 - 10) * frac / 100;
        let mut t = v.clone();
        t[pos] ^= 0x10;
        let r = Neff::parse(&t);
        assert!(matches!(r, Err(NeffError::Gzip(_))), "{frac}%: {r:?}");
    }
}

#[test]
fn trailing_garbage_after_gzip() {
    let v = valid();
    // Append a padding block so there certainly is padding, then dirty it.
    let mut t = v.clone();
    t.extend_from_slice(&[0u8; 10240]);
    let ds = (t.len() - 1024) as u64;
    set_u64(&mut t, 16, ds);
    Neff::parse(&t).expect("zero padding is fine");
    let pos = t.len() - 100;
    t[pos] = 0x5a;
    assert!(matches!(
        Neff::parse(&t),
        Err(NeffError::TrailingGarbage { offset }) if offset == pos as u64
    ));
    // A second gzip member is garbage too.
    let mut payload = gzip(&raw_tar(&[(b"a", b"1", b'0')]));
    payload.extend_from_slice(&gzip(b"second"));
    assert!(matches!(
        Neff::parse(&assemble(&NeffHeader::default(), &payload)),
        Err(NeffError::TrailingGarbage { .. })
    ));
}

#[test]
fn member_count_over_limit() {
    let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
    let v = neff_from_entries(&entries);
    let limits = Limits {
        max_members: 9,
        ..Limits::default()
    };
    assert!(matches!(
        Neff::parse_with(&v, &opts(limits)),
        Err(NeffError::TooManyMembers { limit: 9 })
    ));
    let limits = Limits {
        max_members: 10,
        ..Limits::default()
    };
    assert_eq!(
        Neff::parse_with(&v, &opts(limits))
            .expect("at the limit")
            .member_count(),
        10
    );
}

#[test]
fn inflated_limit_is_exact() {
    let v = neff_from_entries(&[("a", b"hello")]);
    let tar_len = 512 + 512 + 1024;
    let at = |max| {
        Neff::parse_with(
            &v,
            &opts(Limits {
                max_inflated_bytes: max,
                ..Limits::default()
            }),
        )
    };
    at(tar_len).expect("exactly at the limit");
    assert!(matches!(
        at(tar_len - 1),
        Err(NeffError::InflatedTooLarge { .. })
    ));
}

#[test]
fn bad_npy_members() {
    let n = model_with("sg00/w.npy", b"\x93NUMPX\x01\x00v\x00{}");
    assert!(matches!(
        n.npy("sg00/w.npy"),
        Err(NeffError::Npy { member, source: NpyError::BadMagic }) if member == "sg00/w.npy"
    ));
    let good = neuron_neff::NpyArray::new(neuron_neff::NpyDtype::F32, vec![4, 4], vec![0; 64])
        .expect("npy")
        .to_bytes();
    let n = model_with("sg00/w.npy", &good[..good.len() - 3]);
    assert!(matches!(
        n.npy("sg00/w.npy"),
        Err(NeffError::Npy {
            source: NpyError::DataLength {
                expected: 64,
                actual: 61
            },
            ..
        })
    ));
    let n = model_with("sg00/w.npy", &good[..40]);
    assert!(matches!(
        n.npy("sg00/w.npy"),
        Err(NeffError::Npy {
            source: NpyError::Truncated { .. },
            ..
        })
    ));
    let mut bad_header = good.clone();
    bad_header[12..17].copy_from_slice(b"DESCR");
    let n = model_with("sg00/w.npy", &bad_header);
    assert!(matches!(
        n.npy("sg00/w.npy"),
        Err(NeffError::Npy {
            source: NpyError::HeaderSyntax { .. },
            ..
        })
    ));
}

#[test]
fn missing_references() {
    for (gone, referenced_by) in [
        ("sg00/PE.bin", "sg00/def.json"),
        ("sg00/Pool.json", "sg00/def.json"),
        ("sg00/w.npy", "sg00/def.json"),
        ("sg00/def.json", "kelf-0.json"),
        ("kelf-0.json", "neff.json"),
    ] {
        let n = model_without(gone);
        let r = n.validate_references();
        assert!(
            matches!(&r, Err(NeffError::MissingMember { path, referenced_by: by }) if path == gone && by == referenced_by),
            "{gone}: {r:?}"
        );
    }
    let n = model_without("sg00/SP.bin");
    assert!(matches!(
        n.subgraph_file("sg00", "SP.bin"),
        Err(NeffError::MissingMember { path, referenced_by }) if path == "sg00/SP.bin" && referenced_by == "sg00/def.json"
    ));
    // A file name escaping the subgraph directory is a bad path, not a lookup.
    assert!(matches!(
        n.subgraph_file("sg00", "../kelf-0.json"),
        Err(NeffError::BadMemberPath { .. })
    ));
}

#[test]
fn hash_checks() {
    let v = valid();
    let strict = ParseOptions {
        validate_hash: true,
        ..ParseOptions::default()
    };
    Neff::parse_with(&v, &strict).expect("writer output passes");
    // Upper 16 bytes are never compared under pkg 2.
    let mut t = v.clone();
    t[172 + 20] = 0x30;
    Neff::parse_with(&t, &strict).expect("upper half ignored");
    let mut t = v.clone();
    t[172] ^= 1;
    assert!(matches!(
        Neff::parse_with(&t, &strict),
        Err(NeffError::HashMismatch { pkg_version: 2, .. })
    ));
    Neff::parse(&t).expect("not checked by default");
    let mut t = v.clone();
    set_u64(&mut t, 0, 7);
    assert!(matches!(
        Neff::parse_with(&t, &strict),
        Err(NeffError::UnsupportedPackager { pkg_version: 7 })
    ));
    // pkg 1 = SHA-256 over all 32 bytes.
    let mut w = sample_model();
    w.header.pkg_version = 1;
    let mut t = w.to_bytes().expect("writes");
    Neff::parse_with(&t, &strict).expect("sha-256 passes");
    t[172 + 31] ^= 1;
    assert!(matches!(
        Neff::parse_with(&t, &strict),
        Err(NeffError::HashMismatch { pkg_version: 1, .. })
    ));
}

#[test]
fn truncated_tar_member() {
    // Header claims 2000 bytes; the archive ends after 100.
    let mut tar = raw_header(b"short", 2000, b'0').to_vec();
    tar.extend_from_slice(&[7u8; 100]);
    let v = assemble(&NeffHeader::default(), &gzip(&tar));
    assert!(matches!(Neff::parse(&v), Err(NeffError::Tar { .. })));
    // Bad header checksum.
    let mut tar = raw_tar(&[(b"a", b"1", b'0')]);
    tar[0] = b'b';
    let v = assemble(&NeffHeader::default(), &gzip(&tar));
    assert!(matches!(Neff::parse(&v), Err(NeffError::Tar { .. })));
}

#[test]
fn accepted_dialects() {
    // GNU headers, directory entries, "./" prefixes, a GNU long name, a pax
    // path, a symlink (skipped), any order.
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_size(0);
    dir.set_mode(0o755);
    b.append_data(&mut dir, "./sg00/", &[][..]).expect("dir");
    let file = |len: usize| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(len as u64);
        h.set_mode(0o644);
        h
    };
    b.append_data(&mut file(3), "./sg00/PE.bin", &b"abc"[..])
        .expect("file");
    let long = format!("sg00/{}", "n".repeat(150));
    b.append_data(&mut file(1), &long, &b"L"[..]).expect("long");
    b.append_pax_extensions([("path", &b"pax/renamed.txt"[..])])
        .expect("pax");
    b.append_data(&mut file(2), "placeholder", &b"px"[..])
        .expect("pax file");
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    b.append_link(&mut link, "sg00/link", "PE.bin")
        .expect("link");
    b.append_data(&mut file(2), "neff.json", &b"{}"[..])
        .expect("json");
    let tar = b.into_inner().expect("tar");
    let v = assemble(&NeffHeader::default(), &gzip(&tar));
    let n = Neff::parse(&v).expect("accepted");
    let paths: Vec<&str> = n.members().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["sg00/PE.bin", long.as_str(), "pax/renamed.txt", "neff.json"]
    );
    assert_eq!(n.member("./sg00/PE.bin"), Some(&b"abc"[..]));
    assert_eq!(n.member("pax/renamed.txt"), Some(&b"px"[..]));
}

#[test]
fn header_only_parse_is_independent_of_payload() {
    let v = valid();
    let h = NeffHeader::parse(&v[..1024]).expect("header alone");
    assert_eq!(h.name_str(), "sample.neff");
    assert!(matches!(
        NeffHeader::parse(&v[..1000]),
        Err(NeffError::FileTooShort { len: 1000 })
    ));
}
