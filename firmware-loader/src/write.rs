//! Builds carriers shaped like the real ones with `object::write`, for tests and tools:
//! the project never ships or copies AWS's firmware binaries.

use crate::encode_ucode_record;
use object::write::{Object, Symbol, SymbolSection};
use object::SymbolScope;
use object::{Architecture, BinaryFormat, Endianness, SectionKind, SymbolFlags, SymbolKind};

/// Why a carrier could not be written.
pub type WriteError = object::write::Error;

fn new_obj() -> Object<'static> {
    Object::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little)
}

/// A `libncfw.so`-shaped carrier: each image a sized data symbol in `.rodata`, 16-aligned.
pub fn sequencer_carrier(images: &[(&str, &[u8])]) -> Result<Vec<u8>, WriteError> {
    let mut obj = new_obj();
    let sec = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    for (name, bytes) in images {
        let off = obj.append_section_data(sec, bytes, 16);
        obj.add_symbol(Symbol {
            name: name.as_bytes().to_vec(),
            value: off,
            size: bytes.len() as u64,
            kind: SymbolKind::Data,
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(sec),
            flags: SymbolFlags::None,
        });
    }
    obj.write()
}

/// A `libnrtucode_extisa.so`-shaped carrier: no image symbols, `section` as its `.rodata`.
pub fn ucode_carrier_raw(section: &[u8]) -> Result<Vec<u8>, WriteError> {
    let mut obj = new_obj();
    let sec = obj.add_section(Vec::new(), b".rodata".to_vec(), SectionKind::ReadOnlyData);
    obj.append_section_data(sec, section, 16);
    obj.write()
}

/// A microcode carrier of `(kind code, load address, bytes)` records in the project format.
pub fn ucode_carrier(images: &[(u16, u32, &[u8])]) -> Result<Vec<u8>, WriteError> {
    let body: Vec<u8> = images
        .iter()
        .flat_map(|(k, a, b)| encode_ucode_record(*k, *a, b))
        .collect();
    ucode_carrier_raw(&body)
}
