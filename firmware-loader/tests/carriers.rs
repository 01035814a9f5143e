//! Loader tests over carriers generated here with `object::write` (never AWS binaries):
//! both carrier kinds, a malformed corpus, and writer -> reader / random-bytes properties.

use neuron_firmware_loader::{
    encode_ucode_record, parse, write, CarrierKind, Engine, Error, ImageKind, MAX_IMAGES,
    MAX_TOTAL_IMAGE_BYTES,
};
use object::write::Object;
use object::{Architecture, BinaryFormat, Endianness, SectionKind};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

fn new_obj() -> Object<'static> {
    Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little)
}

fn sequencer_carrier(images: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(&str, &[u8])> = images.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    write::sequencer_carrier(&refs).expect("write carrier")
}

fn ucode_carrier_raw(section: &[u8]) -> Vec<u8> {
    write::ucode_carrier_raw(section).expect("write carrier")
}

fn ucode_carrier(images: &[(u16, u32, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(u16, u32, &[u8])> = images
        .iter()
        .map(|(k, a, b)| (*k, *a, b.as_slice()))
        .collect();
    write::ucode_carrier(&refs).expect("write carrier")
}

/// File offset of the first occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present")
}

#[test]
fn sequencer_carrier_images_found_by_symbol() {
    let a = vec![0xa5; 100];
    let b = (0..=255u8).collect::<Vec<_>>();
    let file = sequencer_carrier(&[("cc_seq_main", a.clone()), ("cc_seq_reduce", b.clone())]);
    let c = parse(&file).expect("parse");
    assert_eq!(c.kind, CarrierKind::CollectiveSequencer);
    assert_eq!(c.images.len(), 2);
    let i0 = &c.images[0];
    assert_eq!(i0.name, "cc_seq_main");
    assert_eq!(i0.section, ".rodata");
    assert_eq!(i0.kind, ImageKind::CollectiveSequencer);
    assert_eq!(i0.engine, Engine::CollectiveSequencer);
    assert_eq!(i0.bytes, a);
    assert_eq!(&file[i0.file_range.clone()], &a[..]);
    assert_eq!(i0.sha256, <[u8; 32]>::from(Sha256::digest(&a)));
    let i1 = &c.images[1];
    assert_eq!(i1.name, "cc_seq_reduce");
    assert_eq!(i1.bytes, b);
    assert_eq!(i1.load_address, 112); // 100 rounded up to the 16-byte alignment
    assert_eq!(i1.digest_hex().len(), 64);
}

#[test]
fn ucode_carrier_images_found_by_header() {
    let iram = vec![0x11; 64];
    let dram = vec![0x22; 37];
    let file = ucode_carrier(&[
        (1, 0x1000, iram.clone()),
        (2, 0x8000, dram.clone()),
        (9, 0, vec![1]),
    ]);
    let c = parse(&file).expect("parse");
    assert_eq!(c.kind, CarrierKind::GpSimdMicrocode);
    let kinds: Vec<_> = c.images.iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        [
            ImageKind::GpSimdIram,
            ImageKind::GpSimdDram,
            ImageKind::Other(9)
        ]
    );
    assert!(c.images.iter().all(|i| i.engine == Engine::GpSimd));
    assert_eq!(c.images[0].load_address, 0x1000);
    assert_eq!(c.images[0].bytes, iram);
    assert_eq!(c.images[1].load_address, 0x8000);
    assert_eq!(c.images[1].bytes, dram);
    assert_eq!(&file[c.images[1].file_range.clone()], &dram[..]);
}

#[test]
fn empty_carrier_is_no_images() {
    assert_eq!(parse(&ucode_carrier(&[])), Err(Error::NoImages));
}

#[test]
fn truncated_at_every_point_is_a_clean_error() {
    for file in [
        sequencer_carrier(&[("a", vec![7; 40]), ("b", vec![8; 300])]),
        ucode_carrier(&[(1, 0, vec![3; 200]), (2, 64, vec![4; 50])]),
    ] {
        for cut in 0..file.len() {
            assert!(parse(&file[..cut]).is_err(), "cut at {cut} parsed");
        }
        assert!(parse(&file).is_ok());
    }
}

#[test]
fn bogus_symbol_size_is_symbol_past_section() {
    let mut file = sequencer_carrier(&[("victim", vec![9; 32])]);
    // Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64. The only sized
    // symbol has st_size == 32; patch it to a huge value.
    let needle = 32u64.to_le_bytes();
    let pos = file
        .windows(8)
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .find(|&i| i >= 16 && file[i - 8..i] == 0u64.to_le_bytes()) // value 0 precedes size
        .expect("symbol size field");
    file[pos..pos + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    match parse(&file) {
        Err(Error::SymbolPastSection { name, .. }) => assert_eq!(name, "victim"),
        other => panic!("expected SymbolPastSection, got {other:?}"),
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Section header table offset and entry geometry of a little-endian ELF64 file.
fn shdrs(file: &[u8]) -> (usize, usize, usize) {
    let shoff = le64(file, 0x28) as usize;
    let shentsize = u16::from_le_bytes([file[0x3a], file[0x3b]]) as usize;
    let shnum = u16::from_le_bytes([file[0x3c], file[0x3d]]) as usize;
    (shoff, shentsize, shnum)
}

/// Index of the section header whose file offset is `offset` and size non-zero.
fn section_at(file: &[u8], offset: usize) -> usize {
    let (shoff, ent, num) = shdrs(file);
    (0..num)
        .find(|&i| {
            let h = shoff + i * ent;
            let off = le64(file, h + 0x18);
            let size = le64(file, h + 0x20);
            off as usize == offset && size > 0
        })
        .expect("section header")
}

#[test]
fn overlapping_sections_are_refused() {
    let mut obj = new_obj();
    let ro = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    obj.append_section_data(ro, &encode_ucode_record(1, 0, &[0x5a; 64]), 16);
    let data = obj.add_section(Vec::new(), b".data".to_vec(), SectionKind::Data);
    obj.append_section_data(data, b"DATAMARKDATAMARK", 16);
    let file = obj.write().expect("write carrier");
    assert!(parse(&file).is_ok());
    let rodata_off = find(&file, b"NXUC");
    let other = section_at(&file, find(&file, b"DATAMARK"));
    let (shoff, ent, _) = shdrs(&file);
    // Point .data's file range into .rodata's bytes.
    let mut bad = file.clone();
    let h = shoff + other * ent;
    bad[h + 0x18..h + 0x20].copy_from_slice(&(rodata_off as u64 + 8).to_le_bytes());
    assert!(
        matches!(parse(&bad), Err(Error::OverlappingSections { .. })),
        "{:?}",
        parse(&bad)
    );
}

#[test]
fn section_past_end_is_out_of_bounds() {
    let file = ucode_carrier(&[(1, 0, vec![1; 16])]);
    let rodata_off = find(&file, b"NXUC");
    let rodata = section_at(&file, rodata_off);
    let (shoff, ent, _) = shdrs(&file);
    let mut bad = file.clone();
    let h = shoff + rodata * ent;
    bad[h + 0x20..h + 0x28].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(
        matches!(
            parse(&bad),
            Err(Error::SectionOutOfBounds { .. }) | Err(Error::Elf { .. })
        ),
        "{:?}",
        parse(&bad)
    );
}

#[test]
fn huge_section_count_is_a_clean_error() {
    let mut file = ucode_carrier(&[(1, 0, vec![1; 16])]);
    file[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(parse(&file).is_err());
}

#[test]
fn huge_image_count_is_huge_count() {
    let images: Vec<_> = (0..=MAX_IMAGES)
        .map(|i| (1u16, (i * 4) as u32, vec![]))
        .collect();
    let file = ucode_carrier(&images);
    assert!(matches!(
        parse(&file),
        Err(Error::HugeCount {
            what: "microcode images",
            ..
        })
    ));
}

#[test]
fn aliased_symbols_cannot_copy_past_the_byte_budget() {
    use object::write::{Symbol, SymbolSection};
    use object::{SymbolFlags, SymbolKind, SymbolScope};
    let mut obj = new_obj();
    let sec = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    let size = 1usize << 20;
    obj.append_section_data(sec, &vec![0u8; size], 16);
    let aliases = MAX_TOTAL_IMAGE_BYTES / size + 1;
    for i in 0..aliases {
        obj.add_symbol(Symbol {
            name: format!("alias{i}").into_bytes(),
            value: 0,
            size: size as u64,
            kind: SymbolKind::Data,
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(sec),
            flags: SymbolFlags::None,
        });
    }
    let file = obj.write().expect("write carrier");
    assert!(matches!(
        parse(&file),
        Err(Error::HugeCount {
            what: "total image bytes",
            ..
        })
    ));
}

#[test]
fn header_faults_name_what_and_where() {
    let good = encode_ucode_record(1, 0x40, &[1, 2, 3, 4]);
    let file = ucode_carrier_raw(&good);
    let at = find(&file, b"NXUC");
    type Case = (usize, &'static [u8], fn(&Error) -> bool);
    let cases: [Case; 5] = [
        (0, b"XXXX", |e| matches!(e, Error::BadHeader { .. })),
        (4, &[2, 0], |e| matches!(e, Error::BadHeader { .. })),
        (8, &[0x41, 0, 0, 0], |e| {
            matches!(e, Error::BadAlignment { value: 0x41, .. })
        }),
        (12, &[0xff, 0xff, 0, 0], |e| {
            matches!(e, Error::BadHeader { .. })
        }),
        (16, &[0, 0, 0, 0], |e| {
            matches!(e, Error::ChecksumMismatch { .. })
        }),
    ];
    for (field, bytes, ok) in cases {
        let mut bad = file.clone();
        bad[at + field..at + field + bytes.len()].copy_from_slice(bytes);
        let err = parse(&bad).expect_err("malformed header parsed");
        assert!(ok(&err), "field {field}: {err}");
        assert!(
            err.to_string().contains(&format!("{at:#x}")) || field == 8,
            "{err}"
        );
    }
}

#[test]
fn garbage_is_an_elf_error() {
    assert!(matches!(
        parse(b"not an elf at all"),
        Err(Error::Elf { .. })
    ));
    assert!(matches!(parse(&[]), Err(Error::Elf { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sequencer_round_trip(imgs in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..200), 1..8)) {
        let named: Vec<(String, Vec<u8>)> =
            imgs.iter().enumerate().map(|(i, b)| (format!("img{i}"), b.clone())).collect();
        let refs: Vec<(&str, Vec<u8>)> = named.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
        let c = parse(&sequencer_carrier(&refs)).expect("parse");
        prop_assert_eq!(c.images.len(), named.len());
        for (img, (n, b)) in c.images.iter().zip(&named) {
            prop_assert_eq!(&img.name, n);
            prop_assert_eq!(&img.bytes, b);
        }
    }

    #[test]
    fn ucode_round_trip(imgs in prop::collection::vec((1u16..4, 0u32..0x4000_0000, prop::collection::vec(any::<u8>(), 0..200)), 1..8)) {
        let imgs: Vec<_> = imgs.into_iter().map(|(k, a, b)| (k, a & !3, b)).collect();
        let c = parse(&ucode_carrier(&imgs)).expect("parse");
        prop_assert_eq!(c.images.len(), imgs.len());
        for (img, (k, a, b)) in c.images.iter().zip(&imgs) {
            prop_assert_eq!(img.kind.code(), Some(*k));
            prop_assert_eq!(img.load_address, u64::from(*a));
            prop_assert_eq!(&img.bytes, b);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = parse(&bytes);
    }

    #[test]
    fn mutated_carriers_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16)) {
        for mut file in [
            sequencer_carrier(&[("a", vec![1; 64]), ("b", vec![2; 64])]),
            ucode_carrier(&[(1, 0, vec![1; 64]), (2, 64, vec![2; 64])]),
        ] {
            for (i, v) in &flips {
                let at = i.index(file.len());
                file[at] = *v;
            }
            if let Ok(c) = parse(&file) {
                for img in &c.images {
                    prop_assert_eq!(file.get(img.file_range.clone()), Some(img.bytes.as_slice()));
                }
            }
        }
    }
}
