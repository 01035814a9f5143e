//! NumPy `.npy` arrays (format versions 1.0, 2.0, 3.0), little-endian only.
//!
//! NEFF constants (`file` vars, e.g. `sg00/value_sg0000_identity_82_CRSM.npy`)
//! are `.npy` files. neuronx-cc writes bfloat16 constants with descr `'<V2'`
//! (an opaque 2-byte element, as `ml_dtypes.bfloat16` saves); the matching
//! `tensor_map.json` entry says `"dtype": "bfloat16"`. Such arrays parse as
//! [`NpyDtype::Void`]`(2)`.

use std::borrow::Cow;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy's own `max_header_size` default is 10000; anything far beyond is hostile.
const MAX_HEADER_LEN: usize = 65536;

/// Errors of the `.npy` reader.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NpyError {
    /// The file does not start with `\x93NUMPY`.
    #[error("bad .npy magic (expected \\x93NUMPY at offset 0)")]
    BadMagic,
    /// Format version other than 1.0, 2.0, 3.0.
    #[error(".npy format version {major}.{minor} is not supported")]
    UnsupportedVersion { major: u8, minor: u8 },
    /// The file ends inside the preamble or header.
    #[error(".npy file is {len} bytes; its {what} needs {needed}")]
    Truncated {
        what: &'static str,
        needed: usize,
        len: usize,
    },
    /// The header length field is implausibly large.
    #[error(".npy header length {len} exceeds the {MAX_HEADER_LEN}-byte limit")]
    HeaderTooLarge { len: usize },
    /// The header dict could not be parsed.
    #[error(".npy header dict is malformed at byte {offset} of the header: {reason}")]
    HeaderSyntax { offset: usize, reason: &'static str },
    /// A required header key is missing.
    #[error(".npy header has no {key:?} key")]
    MissingKey { key: &'static str },
    /// The descr is big-endian, structured, or of an unknown kind.
    #[error(".npy dtype descr {descr:?} is not supported")]
    UnsupportedDtype { descr: String },
    /// The element count or byte size overflows.
    #[error(".npy shape {shape:?} overflows the addressable size")]
    ShapeOverflow { shape: Vec<usize> },
    /// The data is not exactly `element_count * dtype.size()` bytes.
    #[error(".npy data is {actual} bytes, expected {expected} for the dtype and shape")]
    DataLength { expected: usize, actual: usize },
}

/// Element type (all little-endian, as on the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NpyDtype {
    /// `<f4`
    F32,
    /// `<f2`
    F16,
    /// `<f8`
    F64,
    /// `|u1`
    U8,
    /// `|i1`
    I8,
    /// `<u2`
    U16,
    /// `<i2`
    I16,
    /// `<u4`
    U32,
    /// `<i4`
    I32,
    /// `<u8`
    U64,
    /// `<i8`
    I64,
    /// `|b1`
    Bool,
    /// `<Vn`: opaque n-byte elements. neuronx-cc stores bfloat16 as `<V2`.
    Void(usize),
}

impl NpyDtype {
    /// The canonical numpy descr string (`'<V{n}'` for [`NpyDtype::Void`], as neuronx-cc writes it).
    pub fn descr(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            NpyDtype::F32 => "<f4",
            NpyDtype::F16 => "<f2",
            NpyDtype::F64 => "<f8",
            NpyDtype::U8 => "|u1",
            NpyDtype::I8 => "|i1",
            NpyDtype::U16 => "<u2",
            NpyDtype::I16 => "<i2",
            NpyDtype::U32 => "<u4",
            NpyDtype::I32 => "<i4",
            NpyDtype::U64 => "<u8",
            NpyDtype::I64 => "<i8",
            NpyDtype::Bool => "|b1",
            NpyDtype::Void(n) => return Cow::Owned(format!("<V{n}")),
        })
    }

    /// Bytes per element.
    pub fn size(&self) -> usize {
        match self {
            NpyDtype::U8 | NpyDtype::I8 | NpyDtype::Bool => 1,
            NpyDtype::F16 | NpyDtype::U16 | NpyDtype::I16 => 2,
            NpyDtype::F32 | NpyDtype::U32 | NpyDtype::I32 => 4,
            NpyDtype::F64 | NpyDtype::U64 | NpyDtype::I64 => 8,
            NpyDtype::Void(n) => *n,
        }
    }

    /// Parses a numpy descr. Multi-byte numeric types must be `<`; 1-byte
    /// types and void accept any byte-order mark. Big-endian is refused.
    pub fn from_descr(descr: &str) -> Result<NpyDtype, NpyError> {
        let unsupported = || NpyError::UnsupportedDtype {
            descr: descr.to_owned(),
        };
        let mut chars = descr.chars();
        let order = chars.next().ok_or_else(unsupported)?;
        if !matches!(order, '<' | '>' | '|' | '=') {
            return Err(unsupported());
        }
        let body = chars.as_str();
        let dt = if let Some(n) = body.strip_prefix('V') {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(unsupported());
            }
            let n: usize = n.parse().map_err(|_| unsupported())?;
            if n == 0 {
                return Err(unsupported());
            }
            NpyDtype::Void(n)
        } else {
            match body {
                "f4" => NpyDtype::F32,
                "f2" => NpyDtype::F16,
                "f8" => NpyDtype::F64,
                "u1" => NpyDtype::U8,
                "i1" => NpyDtype::I8,
                "u2" => NpyDtype::U16,
                "i2" => NpyDtype::I16,
                "u4" => NpyDtype::U32,
                "i4" => NpyDtype::I32,
                "u8" => NpyDtype::U64,
                "i8" => NpyDtype::I64,
                "b1" => NpyDtype::Bool,
                _ => return Err(unsupported()),
            }
        };
        // Byte order only matters for multi-byte numeric types; accept '<' for
        // those (and '=' is host order, which we refuse to guess).
        let needs_le = !matches!(dt, NpyDtype::Void(_)) && dt.size() > 1;
        if needs_le && order != '<' {
            return Err(unsupported());
        }
        Ok(dt)
    }
}

/// A parsed `.npy` array; `data` is the raw little-endian element bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyArray {
    pub dtype: NpyDtype,
    pub shape: Vec<usize>,
    pub fortran_order: bool,
    pub data: Vec<u8>,
}

fn byte_len(dtype: NpyDtype, shape: &[usize]) -> Result<usize, NpyError> {
    shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| NpyError::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

impl NpyArray {
    /// A C-order array; `data.len()` must equal `product(shape) * dtype.size()`.
    pub fn new(dtype: NpyDtype, shape: Vec<usize>, data: Vec<u8>) -> Result<Self, NpyError> {
        let expected = byte_len(dtype, &shape)?;
        if data.len() != expected {
            return Err(NpyError::DataLength {
                expected,
                actual: data.len(),
            });
        }
        Ok(NpyArray {
            dtype,
            shape,
            fortran_order: false,
            data,
        })
    }

    /// Product of the shape (1 for a 0-d array); saturates on overflow
    /// (impossible for a value built by [`NpyArray::new`] or [`NpyArray::parse`]).
    pub fn element_count(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// Parses a complete `.npy` file. The data must be exactly the size the
    /// dtype and shape call for.
    pub fn parse(bytes: &[u8]) -> Result<NpyArray, NpyError> {
        if bytes.len() < 8 {
            if !MAGIC.starts_with(&bytes[..bytes.len().min(6)]) {
                return Err(NpyError::BadMagic);
            }
            return Err(NpyError::Truncated {
                what: "preamble",
                needed: 10,
                len: bytes.len(),
            });
        }
        if &bytes[..6] != MAGIC {
            return Err(NpyError::BadMagic);
        }
        let (major, minor) = (bytes[6], bytes[7]);
        let (len_size, utf8) = match (major, minor) {
            (1, 0) => (2usize, false),
            (2, 0) => (4, false),
            (3, 0) => (4, true),
            _ => return Err(NpyError::UnsupportedVersion { major, minor }),
        };
        let start = 8 + len_size;
        if bytes.len() < start {
            return Err(NpyError::Truncated {
                what: "preamble",
                needed: start,
                len: bytes.len(),
            });
        }
        let header_len = if len_size == 2 {
            usize::from(u16::from_le_bytes([bytes[8], bytes[9]]))
        } else {
            let v = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            usize::try_from(v).unwrap_or(usize::MAX)
        };
        if header_len > MAX_HEADER_LEN {
            return Err(NpyError::HeaderTooLarge { len: header_len });
        }
        let end = start + header_len;
        if bytes.len() < end {
            return Err(NpyError::Truncated {
                what: "header",
                needed: end,
                len: bytes.len(),
            });
        }
        let raw = &bytes[start..end];
        let text: Cow<'_, str> = if utf8 {
            Cow::Borrowed(
                std::str::from_utf8(raw).map_err(|e| NpyError::HeaderSyntax {
                    offset: e.valid_up_to(),
                    reason: "header is not UTF-8",
                })?,
            )
        } else {
            // latin-1
            Cow::Owned(raw.iter().map(|&b| char::from(b)).collect())
        };
        let header = parse_header(&text)?;
        let dtype = NpyDtype::from_descr(&header.descr)?;
        let expected = byte_len(dtype, &header.shape)?;
        let data = &bytes[end..];
        if data.len() != expected {
            return Err(NpyError::DataLength {
                expected,
                actual: data.len(),
            });
        }
        Ok(NpyArray {
            dtype,
            shape: header.shape,
            fortran_order: header.fortran_order,
            data: data.to_vec(),
        })
    }

    /// Serializes as numpy does: version 1.0 (2.0 if the header needs it),
    /// dict `{'descr': .., 'fortran_order': .., 'shape': (..), }` padded with
    /// spaces and a final `\n` to a multiple of 64 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let shape = match self.shape.as_slice() {
            [] => "()".to_owned(),
            [d] => format!("({d},)"),
            dims => {
                let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
                format!("({})", parts.join(", "))
            }
        };
        let dict = format!(
            "{{'descr': '{}', 'fortran_order': {}, 'shape': {}, }}",
            self.dtype.descr(),
            if self.fortran_order { "True" } else { "False" },
            shape
        );
        let build = |len_size: usize| {
            let pre = 8 + len_size;
            let unpadded = pre + dict.len() + 1;
            let total = unpadded.div_ceil(64) * 64;
            let header_len = total - pre;
            (pre, header_len)
        };
        let (mut len_size, mut major) = (2usize, 1u8);
        let (mut pre, mut header_len) = build(len_size);
        if header_len > usize::from(u16::MAX) {
            len_size = 4;
            major = 2;
            (pre, header_len) = build(len_size);
        }
        let mut out = Vec::with_capacity(pre + header_len + self.data.len());
        out.extend_from_slice(MAGIC);
        out.push(major);
        out.push(0);
        if len_size == 2 {
            out.extend_from_slice(&(header_len as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header_len as u32).to_le_bytes());
        }
        out.extend_from_slice(dict.as_bytes());
        out.resize(pre + header_len - 1, b' ');
        out.push(b'\n');
        out.extend_from_slice(&self.data);
        out
    }
}

struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A parser for exactly the Python literal numpy writes: a dict with string
/// keys whose values are strings, `True`/`False`, or tuples of integers.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn err(&self, reason: &'static str) -> NpyError {
        NpyError::HeaderSyntax {
            offset: self.pos,
            reason,
        }
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8, reason: &'static str) -> Result<(), NpyError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(reason))
        }
    }

    fn string(&mut self) -> Result<String, NpyError> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("expected a quoted string")),
        };
        self.pos += 1;
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos] != q {
            if self.s[self.pos] == b'\\' {
                return Err(self.err("escapes are not supported in strings"));
            }
            self.pos += 1;
        }
        if self.pos >= self.s.len() {
            return Err(self.err("unterminated string"));
        }
        let v = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(v)
    }

    fn integer(&mut self) -> Result<usize, NpyError> {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err("expected a non-negative integer"));
        }
        // Python 2 long suffix
        if self.s.get(self.pos) == Some(&b'L') {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos])
            .ok()
            .and_then(|t| t.trim_end_matches('L').parse().ok())
            .ok_or_else(|| self.err("integer out of range"))
    }

    fn value(&mut self) -> Result<Value, NpyError> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'T') if self.s[self.pos..].starts_with(b"True") => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            Some(b'F') if self.s[self.pos..].starts_with(b"False") => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            Some(b'(') => {
                self.pos += 1;
                let mut dims = Vec::new();
                loop {
                    if self.peek() == Some(b')') {
                        self.pos += 1;
                        break;
                    }
                    dims.push(self.integer()?);
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(b')') => {
                            self.pos += 1;
                            break;
                        }
                        _ => return Err(self.err("expected ',' or ')' in shape tuple")),
                    }
                }
                Ok(Value::Tuple(dims))
            }
            Some(b'[') => Err(self.err("structured dtypes are not supported")),
            _ => Err(self.err("unexpected value")),
        }
    }
}

fn parse_header(text: &str) -> Result<Header, NpyError> {
    let mut lx = Lexer {
        s: text.as_bytes(),
        pos: 0,
    };
    lx.expect(b'{', "expected '{'")?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        if lx.peek() == Some(b'}') {
            lx.pos += 1;
            break;
        }
        let key_pos = lx.pos;
        let key = lx.string()?;
        lx.expect(b':', "expected ':' after key")?;
        let value = lx.value()?;
        let dup = match (key.as_str(), value) {
            ("descr", Value::Str(s)) => descr.replace(s).is_some(),
            ("fortran_order", Value::Bool(b)) => fortran.replace(b).is_some(),
            ("shape", Value::Tuple(t)) => shape.replace(t).is_some(),
            ("descr" | "fortran_order" | "shape", _) => {
                return Err(NpyError::HeaderSyntax {
                    offset: key_pos,
                    reason: "header key has a value of the wrong type",
                })
            }
            _ => {
                return Err(NpyError::HeaderSyntax {
                    offset: key_pos,
                    reason: "unknown header key",
                })
            }
        };
        if dup {
            return Err(NpyError::HeaderSyntax {
                offset: key_pos,
                reason: "duplicate header key",
            });
        }
        match lx.peek() {
            Some(b',') => lx.pos += 1,
            Some(b'}') => {
                lx.pos += 1;
                break;
            }
            _ => return Err(lx.err("expected ',' or '}'")),
        }
    }
    if lx.peek().is_some() {
        return Err(lx.err("trailing characters after the header dict"));
    }
    Ok(Header {
        descr: descr.ok_or(NpyError::MissingKey { key: "descr" })?,
        fortran_order: fortran.ok_or(NpyError::MissingKey {
            key: "fortran_order",
        })?,
        shape: shape.ok_or(NpyError::MissingKey { key: "shape" })?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_matches_numpy_layout() {
        let a = NpyArray::new(NpyDtype::F16, vec![128, 128, 1, 1], vec![0; 32768]).expect("len");
        let b = a.to_bytes();
        assert_eq!(b.len(), 32896);
        assert_eq!(
            &b[10..79],
            b"{'descr': '<f2', 'fortran_order': False, 'shape': (128, 128, 1, 1), }"
        );
        assert_eq!(b[127], b'\n');
        assert_eq!(NpyArray::parse(&b).expect("parses"), a);
    }

    #[test]
    fn shapes_of_every_rank() {
        for shape in [vec![], vec![5], vec![2, 3], vec![0, 7]] {
            let n: usize = shape.iter().product();
            let a = NpyArray::new(NpyDtype::I32, shape.clone(), vec![7; n * 4]).expect("len");
            let back = NpyArray::parse(&a.to_bytes()).expect("parses");
            assert_eq!(back.shape, shape);
            assert_eq!(back.element_count(), n);
        }
    }

    #[test]
    fn descrs() {
        for d in [
            NpyDtype::F32,
            NpyDtype::F16,
            NpyDtype::F64,
            NpyDtype::U8,
            NpyDtype::I8,
            NpyDtype::U16,
            NpyDtype::I16,
            NpyDtype::U32,
            NpyDtype::I32,
            NpyDtype::U64,
            NpyDtype::I64,
            NpyDtype::Bool,
            NpyDtype::Void(2),
        ] {
            assert_eq!(NpyDtype::from_descr(&d.descr()), Ok(d));
        }
        assert_eq!(NpyDtype::from_descr("|V2"), Ok(NpyDtype::Void(2)));
        assert_eq!(NpyDtype::from_descr("<u1"), Ok(NpyDtype::U8));
        assert!(NpyDtype::from_descr(">f4").is_err());
        assert!(NpyDtype::from_descr("<c8").is_err());
        assert!(NpyDtype::from_descr("<V0").is_err());
        assert!(NpyDtype::from_descr("").is_err());
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let good = NpyArray::new(NpyDtype::U8, vec![4], vec![1, 2, 3, 4])
            .expect("len")
            .to_bytes();
        assert_eq!(
            NpyArray::parse(b"\x93NUMPX\x01\x00"),
            Err(NpyError::BadMagic)
        );
        assert!(matches!(
            NpyArray::parse(&good[..5]),
            Err(NpyError::Truncated { .. })
        ));
        assert!(matches!(
            NpyArray::parse(&good[..good.len() - 1]),
            Err(NpyError::DataLength {
                expected: 4,
                actual: 3
            })
        ));
        let mut v9 = good.clone();
        v9[6] = 9;
        assert!(matches!(
            NpyArray::parse(&v9),
            Err(NpyError::UnsupportedVersion { major: 9, .. })
        ));
        let big = NpyArray {
            dtype: NpyDtype::U64,
            shape: vec![usize::MAX, 2],
            fortran_order: false,
            data: vec![],
        };
        assert!(matches!(
            NpyArray::parse(&big.to_bytes()),
            Err(NpyError::ShapeOverflow { .. })
        ));
    }
}
