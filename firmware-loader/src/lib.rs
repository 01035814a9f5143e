//! Reads Neuron firmware carriers (ELF shared objects) into typed, digested images.
//!
//! Parsing only: a carrier is never executed or `dlopen`-ed. Every count, range and loop is
//! bounded, and any input either yields a [`Carrier`] or a typed [`Error`] naming what and where.
//! See `docs/firmware.md` for which parts of the format are known and which are project-defined.

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use sha2::{Digest, Sha256};
use std::fmt;

pub mod reference;
pub mod write;

/// Largest carrier accepted (the real carriers are a few MiB).
pub const MAX_CARRIER_BYTES: usize = 256 << 20;
/// Most sections a carrier may declare.
pub const MAX_SECTIONS: usize = 4096;
/// Most symbols read from a carrier's symbol table.
pub const MAX_SYMBOLS: usize = 1 << 16;
/// Most images one carrier may hold.
pub const MAX_IMAGES: usize = 1024;
/// Most image bytes copied out of one carrier (aliased symbols could otherwise copy the same
/// large section many times over).
pub const MAX_TOTAL_IMAGE_BYTES: usize = MAX_CARRIER_BYTES;

/// Magic of a project-defined GpSimd microcode image header (`docs/firmware.md`, grade C).
pub const UCODE_MAGIC: [u8; 4] = *b"NXUC";
/// Version of the project-defined header this reader understands.
pub const UCODE_VERSION: u16 = 1;
/// Size of the project-defined header in bytes.
pub const UCODE_HEADER_LEN: usize = 24;
/// Headers (and so images) start on this boundary inside the section.
pub const UCODE_ALIGN: u64 = 16;
/// Load addresses must be aligned to this many bytes.
pub const LOAD_ALIGN: u64 = 4;
/// Section that holds the microcode images in a stripped carrier.
pub const UCODE_SECTION: &str = ".rodata";

/// Which kind of carrier a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CarrierKind {
    /// `libncfw.so`-shaped: images named by the symbol table.
    CollectiveSequencer,
    /// `libnrtucode_extisa.so`-shaped: stripped, images found by their own headers.
    GpSimdMicrocode,
}

/// What an image is (open: new kinds appear with new firmware).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageKind {
    /// A collective-sequencer program.
    CollectiveSequencer,
    /// GpSimd instruction RAM.
    GpSimdIram,
    /// GpSimd data RAM.
    GpSimdDram,
    /// A microcode header kind this reader does not know.
    Other(u16),
}

impl ImageKind {
    fn from_code(code: u16) -> Self {
        match code {
            1 => ImageKind::GpSimdIram,
            2 => ImageKind::GpSimdDram,
            c => ImageKind::Other(c),
        }
    }

    /// The header code of a microcode kind (`None` for symbol-found images).
    pub fn code(self) -> Option<u16> {
        match self {
            ImageKind::GpSimdIram => Some(1),
            ImageKind::GpSimdDram => Some(2),
            ImageKind::Other(c) => Some(c),
            ImageKind::CollectiveSequencer => None,
        }
    }
}

impl fmt::Display for ImageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageKind::CollectiveSequencer => f.write_str("collective-sequencer"),
            ImageKind::GpSimdIram => f.write_str("gpsimd-iram"),
            ImageKind::GpSimdDram => f.write_str("gpsimd-dram"),
            ImageKind::Other(c) => write!(f, "other({c})"),
        }
    }
}

/// The engine an image is meant for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Engine {
    /// The collective-communication sequencer.
    CollectiveSequencer,
    /// The GpSimd engine.
    GpSimd,
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Engine::CollectiveSequencer => "collective-sequencer",
            Engine::GpSimd => "gpsimd",
        })
    }
}

/// One image a carrier holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// What the image is.
    pub kind: ImageKind,
    /// The symbol name (sequencer carriers) or `ucode[N]` (microcode carriers).
    pub name: String,
    /// The section that holds it.
    pub section: String,
    /// The engine it targets.
    pub engine: Engine,
    /// Where the image is loaded in the engine's address space.
    pub load_address: u64,
    /// The image bytes' range in the carrier file.
    pub file_range: std::ops::Range<usize>,
    /// The image bytes.
    pub bytes: Vec<u8>,
    /// SHA-256 of `bytes`.
    pub sha256: [u8; 32],
}

impl Image {
    /// The digest as lowercase hex.
    pub fn digest_hex(&self) -> String {
        reference::hex(&self.sha256)
    }
}

/// A parsed carrier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carrier {
    /// Which kind of carrier.
    pub kind: CarrierKind,
    /// Its images, in file order.
    pub images: Vec<Image>,
}

/// Why a carrier was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The file exceeds [`MAX_CARRIER_BYTES`].
    #[error("carrier is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// File length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The ELF container itself could not be read (includes truncation inside the headers).
    #[error("not a readable ELF carrier ({len} bytes): {reason}")]
    Elf {
        /// File length.
        len: usize,
        /// What `object` reported.
        reason: String,
    },
    /// A section's file range runs past the end of the file.
    #[error("section {section} ({name}) at file offset {offset:#x}+{size:#x} runs past the end of the {len}-byte file (truncated?)")]
    SectionOutOfBounds {
        /// Section index.
        section: usize,
        /// Section name.
        name: String,
        /// File offset.
        offset: u64,
        /// Size in the file.
        size: u64,
        /// File length.
        len: usize,
    },
    /// Two sections share file bytes.
    #[error("sections {a} and {b} overlap in the file at offset {offset:#x}")]
    OverlappingSections {
        /// First section index.
        a: usize,
        /// Second section index.
        b: usize,
        /// Start of the later section.
        offset: u64,
    },
    /// A symbol's range does not fit in its section.
    #[error("symbol {name} at {address:#x} size {size:#x} runs past section {section} (size {section_size:#x})")]
    SymbolPastSection {
        /// Symbol name.
        name: String,
        /// Symbol address.
        address: u64,
        /// Symbol size.
        size: u64,
        /// Section index.
        section: usize,
        /// Section size.
        section_size: u64,
    },
    /// A count exceeds its limit.
    #[error("{what}: {count} exceeds the limit of {max}")]
    HugeCount {
        /// What was counted.
        what: &'static str,
        /// The count (at least `max + 1`).
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A load address or header offset is misaligned.
    #[error("{what} {value:#x} is not {align}-byte aligned")]
    BadAlignment {
        /// What was misaligned.
        what: String,
        /// The value.
        value: u64,
        /// Required alignment.
        align: u64,
    },
    /// A microcode header is malformed.
    #[error("microcode header at file offset {offset:#x}: {reason}")]
    BadHeader {
        /// File offset of the header.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// A microcode image's checksum does not match its bytes.
    #[error("microcode image at file offset {offset:#x}: checksum {found:#010x}, header says {expected:#010x}")]
    ChecksumMismatch {
        /// File offset of the header.
        offset: usize,
        /// Checksum in the header.
        expected: u32,
        /// Checksum of the bytes.
        found: u32,
    },
    /// The carrier holds no image at all.
    #[error("carrier holds no firmware image (no sized data symbols and no {UCODE_SECTION} microcode headers)")]
    NoImages,
}

/// The project-defined microcode checksum: the first four bytes of SHA-256, little-endian.
pub fn ucode_checksum(bytes: &[u8]) -> u32 {
    let d = Sha256::digest(bytes);
    u32::from_le_bytes([d[0], d[1], d[2], d[3]])
}

/// Reads a carrier of either kind: a symbol table with sized data symbols makes it a sequencer
/// carrier, otherwise it is read as a stripped microcode carrier.
pub fn parse(data: &[u8]) -> Result<Carrier, Error> {
    let len = data.len();
    if len > MAX_CARRIER_BYTES {
        return Err(Error::TooLarge {
            len,
            max: MAX_CARRIER_BYTES,
        });
    }
    let file = object::File::parse(data).map_err(|e| Error::Elf {
        len,
        reason: e.to_string(),
    })?;
    if file.format() != object::BinaryFormat::Elf {
        return Err(Error::Elf {
            len,
            reason: format!("{:?} container, not ELF", file.format()),
        });
    }
    check_sections(&file, len)?;
    let symbols = image_symbols(&file)?;
    let (kind, images) = if symbols.is_empty() {
        (CarrierKind::GpSimdMicrocode, ucode_images(&file, data)?)
    } else {
        (
            CarrierKind::CollectiveSequencer,
            symbol_images(&file, data, symbols)?,
        )
    };
    if images.is_empty() {
        return Err(Error::NoImages);
    }
    Ok(Carrier { kind, images })
}

fn section_name(s: &object::Section<'_, '_>) -> String {
    s.name().unwrap_or("<unnamed>").to_string()
}

/// Every section with file bytes lies inside the file and no two share bytes.
fn check_sections(file: &object::File<'_>, len: usize) -> Result<(), Error> {
    let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
    for (n, s) in file.sections().enumerate() {
        if n >= MAX_SECTIONS {
            return Err(Error::HugeCount {
                what: "sections",
                count: n + 1,
                max: MAX_SECTIONS,
            });
        }
        let Some((offset, size)) = s.file_range() else {
            continue;
        };
        let end = offset.checked_add(size);
        if end.is_none_or(|e| e > len as u64) {
            return Err(Error::SectionOutOfBounds {
                section: s.index().0,
                name: section_name(&s),
                offset,
                size,
                len,
            });
        }
        if size > 0 {
            ranges.push((offset, size, s.index().0));
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        let (a_off, a_size, a) = w[0];
        let (b_off, _, b) = w[1];
        if a_off + a_size > b_off {
            return Err(Error::OverlappingSections {
                a,
                b,
                offset: b_off,
            });
        }
    }
    Ok(())
}

/// A symbol that names an image: defined, data or text, sized.
struct ImageSymbol {
    name: String,
    address: u64,
    size: u64,
    section: object::SectionIndex,
}

fn image_symbols(file: &object::File<'_>) -> Result<Vec<ImageSymbol>, Error> {
    let mut out = Vec::new();
    for (n, sym) in file.symbols().enumerate() {
        if n >= MAX_SYMBOLS {
            return Err(Error::HugeCount {
                what: "symbols",
                count: n + 1,
                max: MAX_SYMBOLS,
            });
        }
        if !sym.is_definition()
            || sym.size() == 0
            || !matches!(sym.kind(), SymbolKind::Data | SymbolKind::Text)
        {
            continue;
        }
        let Some(section) = sym.section_index() else {
            continue;
        };
        if out.len() >= MAX_IMAGES {
            return Err(Error::HugeCount {
                what: "image symbols",
                count: out.len() + 1,
                max: MAX_IMAGES,
            });
        }
        out.push(ImageSymbol {
            name: sym.name().unwrap_or("<unnamed>").to_string(),
            address: sym.address(),
            size: sym.size(),
            section,
        });
    }
    Ok(out)
}

/// Where an image is and what it is, before its bytes are copied.
struct Found {
    kind: ImageKind,
    name: String,
    section: String,
    engine: Engine,
    load_address: u64,
    start: usize,
    end: usize,
}

/// Copies the image bytes out, charging them to the carrier's byte budget.
fn make_image(f: Found, data: &[u8], budget: &mut usize) -> Result<Image, Error> {
    let len = f.end - f.start;
    if len > *budget {
        return Err(Error::HugeCount {
            what: "total image bytes",
            count: MAX_TOTAL_IMAGE_BYTES - *budget + len,
            max: MAX_TOTAL_IMAGE_BYTES,
        });
    }
    *budget -= len;
    let bytes = data.get(f.start..f.end).unwrap_or_default().to_vec();
    let sha256 = Sha256::digest(&bytes).into();
    Ok(Image {
        kind: f.kind,
        name: f.name,
        section: f.section,
        engine: f.engine,
        load_address: f.load_address,
        file_range: f.start..f.end,
        bytes,
        sha256,
    })
}

fn symbol_images(
    file: &object::File<'_>,
    data: &[u8],
    symbols: Vec<ImageSymbol>,
) -> Result<Vec<Image>, Error> {
    // Validate every symbol before copying any bytes, so the byte budget is checked up front.
    let mut found_all = Vec::new();
    for sym in symbols {
        let section = file.section_by_index(sym.section).map_err(|e| Error::Elf {
            len: data.len(),
            reason: format!("symbol {}: {e}", sym.name),
        })?;
        let past = || Error::SymbolPastSection {
            name: sym.name.clone(),
            address: sym.address,
            size: sym.size,
            section: sym.section.0,
            section_size: section.size(),
        };
        // Sections without file bytes (.bss) cannot carry an image.
        let (sec_off, sec_size) = section.file_range().ok_or_else(past)?;
        let rel = sym
            .address
            .checked_sub(section.address())
            .ok_or_else(past)?;
        let rel_end = rel.checked_add(sym.size).ok_or_else(past)?;
        if rel_end > sec_size {
            return Err(past());
        }
        if sym.address % LOAD_ALIGN != 0 {
            return Err(Error::BadAlignment {
                what: format!("symbol {} address", sym.name),
                value: sym.address,
                align: LOAD_ALIGN,
            });
        }
        // check_sections proved sec_off + sec_size <= data.len(), so these fit in usize.
        let start = (sec_off + rel) as usize;
        let end = (sec_off + rel_end) as usize;
        let found = Found {
            kind: ImageKind::CollectiveSequencer,
            name: sym.name,
            section: section_name(&section),
            engine: Engine::CollectiveSequencer,
            load_address: sym.address,
            start,
            end,
        };
        found_all.push(found);
    }
    let total = found_all
        .iter()
        .fold(0usize, |t, f| t.saturating_add(f.end - f.start));
    if total > MAX_TOTAL_IMAGE_BYTES {
        return Err(Error::HugeCount {
            what: "total image bytes",
            count: total,
            max: MAX_TOTAL_IMAGE_BYTES,
        });
    }
    let mut budget = MAX_TOTAL_IMAGE_BYTES;
    let mut images = found_all
        .into_iter()
        .map(|f| make_image(f, data, &mut budget))
        .collect::<Result<Vec<_>, _>>()?;
    images.sort_by_key(|i| i.file_range.start);
    Ok(images)
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Walks the project-defined headers in the microcode section (layout in `docs/firmware.md`).
fn ucode_images(file: &object::File<'_>, data: &[u8]) -> Result<Vec<Image>, Error> {
    let Some(section) = file
        .sections()
        .find(|s| s.name() == Ok(UCODE_SECTION) && s.kind() != SectionKind::UninitializedData)
    else {
        return Ok(Vec::new());
    };
    let Some((sec_off, sec_size)) = section.file_range() else {
        return Ok(Vec::new());
    };
    // check_sections proved the section lies in the file.
    let base = sec_off as usize;
    let sec = data.get(base..base + sec_size as usize).unwrap_or_default();
    let mut images = Vec::new();
    let mut budget = MAX_TOTAL_IMAGE_BYTES;
    let mut at = 0usize;
    // Each pass consumes at least one header, so the loop runs at most sec.len()/24 times.
    while at < sec.len() {
        let off = base + at;
        let rest = &sec[at..];
        if rest.iter().take(UCODE_HEADER_LEN).all(|&b| b == 0) {
            break; // zero padding ends the image list
        }
        if rest.len() < UCODE_HEADER_LEN {
            return Err(Error::BadHeader {
                offset: off,
                reason: format!(
                    "{} bytes left, header needs {UCODE_HEADER_LEN} (truncated)",
                    rest.len()
                ),
            });
        }
        let h = &rest[..UCODE_HEADER_LEN];
        if h[..4] != UCODE_MAGIC {
            return Err(Error::BadHeader {
                offset: off,
                reason: format!("magic {:02x?}, expected {:02x?}", &h[..4], UCODE_MAGIC),
            });
        }
        let version = le_u16(h, 4);
        if version != UCODE_VERSION {
            return Err(Error::BadHeader {
                offset: off,
                reason: format!("version {version}, this reader knows {UCODE_VERSION}"),
            });
        }
        if images.len() >= MAX_IMAGES {
            return Err(Error::HugeCount {
                what: "microcode images",
                count: images.len() + 1,
                max: MAX_IMAGES,
            });
        }
        let kind = ImageKind::from_code(le_u16(h, 6));
        let load = u64::from(le_u32(h, 8));
        let size = le_u32(h, 12) as usize;
        let checksum = le_u32(h, 16);
        if le_u32(h, 20) != 0 {
            return Err(Error::BadHeader {
                offset: off,
                reason: "reserved word is not zero".into(),
            });
        }
        if load % LOAD_ALIGN != 0 {
            return Err(Error::BadAlignment {
                what: format!("microcode image {} load address", images.len()),
                value: load,
                align: LOAD_ALIGN,
            });
        }
        let body = rest.len() - UCODE_HEADER_LEN;
        if size > body {
            return Err(Error::BadHeader {
                offset: off,
                reason: format!("image size {size:#x} past the section ({body:#x} bytes left)"),
            });
        }
        let start = off + UCODE_HEADER_LEN;
        let end = start + size;
        let found = ucode_checksum(&data[start..end]);
        if found != checksum {
            return Err(Error::ChecksumMismatch {
                offset: off,
                expected: checksum,
                found,
            });
        }
        let name = format!("ucode[{}]", images.len());
        let found = Found {
            kind,
            name,
            section: UCODE_SECTION.to_string(),
            engine: Engine::GpSimd,
            load_address: load,
            start,
            end,
        };
        // Records never overlap, so the section length bounds this; charged for uniformity.
        images.push(make_image(found, data, &mut budget)?);
        at = (at + UCODE_HEADER_LEN + size).next_multiple_of(UCODE_ALIGN as usize);
    }
    Ok(images)
}

/// Writes one microcode record (header + bytes, padded to [`UCODE_ALIGN`]) in the project format.
/// Used by tests and tools to build carriers; the real format is not public.
pub fn encode_ucode_record(kind_code: u16, load_address: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(UCODE_HEADER_LEN + bytes.len() + UCODE_ALIGN as usize);
    out.extend_from_slice(&UCODE_MAGIC);
    out.extend_from_slice(&UCODE_VERSION.to_le_bytes());
    out.extend_from_slice(&kind_code.to_le_bytes());
    out.extend_from_slice(&load_address.to_le_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(&ucode_checksum(bytes).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(bytes);
    out.resize(out.len().next_multiple_of(UCODE_ALIGN as usize), 0);
    out
}
