//! Kafka wire primitives: fixed-width integers, unsigned and zig-zag varints, classic and compact
//! strings, bytes and arrays, UUIDs and tagged-field sections.
//!
//! The generated message types in [`crate::messages`] are written entirely in terms of these
//! functions, so every rule of the encoding lives here once:
//! - flexible versions use compact lengths (`uvarint(len + 1)`, `0` meaning null) and end every
//!   struct with a tagged-field section; non-flexible versions use `int16`/`int32` lengths with `-1`
//!   meaning null;
//! - decoding never trusts a length: it checks the bytes are there before it allocates, so hostile
//!   input gets a [`CodecError`], never a panic or a huge allocation.
//!
//! Readers work on [`Bytes`] and advance it, so byte fields and unknown tagged fields are zero-copy
//! slices of the input frame.

use bytes::{Buf, Bytes};
use thiserror::Error;
use uuid::Uuid;

/// Why bytes could not be decoded or a value could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// The input ended before a value was complete.
    #[error("input ended early: {needed} more bytes needed, {remaining} left")]
    Truncated { needed: usize, remaining: usize },
    /// An unsigned varint ran past 5 bytes (or a varlong past 10).
    #[error("varint is longer than its maximum encoded size")]
    VarintTooLong,
    /// A length prefix was negative (other than the null marker) or too large.
    #[error("invalid length {0}")]
    InvalidLength(i64),
    /// A string field held bytes that are not UTF-8.
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    /// A null arrived or was given where the version does not allow one.
    #[error("field {field} is null but not nullable at version {version}")]
    NullNotAllowed { field: &'static str, version: i16 },
    /// A field set to a non-default value does not exist at the version being encoded.
    #[error("field {field} does not exist at version {version} and is not ignorable")]
    FieldNotInVersion { field: &'static str, version: i16 },
    /// The message does not define the version asked for.
    #[error("{message} has no version {version} (valid: {min} to {max})")]
    UnsupportedVersion {
        message: &'static str,
        version: i16,
        min: i16,
        max: i16,
    },
    /// A known tagged field's value did not fill exactly its declared size.
    #[error("tagged field {tag} declared {declared} bytes but its value used {used}")]
    TaggedFieldSize {
        tag: i32,
        declared: usize,
        used: usize,
    },
    /// Bytes were left over after a value that should have filled its whole buffer.
    #[error("{0} bytes left over after the value")]
    TrailingBytes(usize),
    /// A value is too long for its length prefix.
    #[error("{0} is too long to encode")]
    TooLong(&'static str),
}

/// Something bytes are written to: a buffer, or a counter when only the size is wanted.
pub trait Writer {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
}

impl Writer for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Writer for bytes::BytesMut {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A [`Writer`] that only counts, so one encoding routine also computes sizes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SizeCounter(pub usize);

impl Writer for SizeCounter {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// Adapts any [`bytes::BufMut`] (kafka-protocol's `ByteBufMut` buffers among them) to [`Writer`].
#[derive(Debug)]
pub struct BufWriter<'a, B>(pub &'a mut B);

impl<B: bytes::BufMut> Writer for BufWriter<'_, B> {
    fn put(&mut self, bytes: &[u8]) {
        self.0.put_slice(bytes);
    }
}

/// A struct or message with a versioned wire encoding.
pub trait WireFormat: Sized {
    /// Writes `self` as encoded at `version`.
    fn write<W: Writer>(&self, w: &mut W, version: i16) -> Result<(), CodecError>;
    /// Reads a value encoded at `version`, advancing `r` past it.
    fn read(r: &mut Bytes, version: i16) -> Result<Self, CodecError>;

    /// The encoded size at `version`.
    fn encoded_size(&self, version: i16) -> Result<usize, CodecError> {
        let mut counter = SizeCounter::default();
        self.write(&mut counter, version)?;
        Ok(counter.0)
    }

    /// Encodes `self` into a new buffer.
    fn to_bytes(&self, version: i16) -> Result<Bytes, CodecError> {
        let mut out = Vec::with_capacity(self.encoded_size(version)?);
        self.write(&mut out, version)?;
        Ok(Bytes::from(out))
    }

    /// Decodes a value that must fill `bytes` exactly.
    fn from_bytes(mut bytes: Bytes, version: i16) -> Result<Self, CodecError> {
        let value = Self::read(&mut bytes, version)?;
        if bytes.has_remaining() {
            return Err(CodecError::TrailingBytes(bytes.remaining()));
        }
        Ok(value)
    }
}

fn need(r: &Bytes, n: usize) -> Result<(), CodecError> {
    if r.remaining() < n {
        Err(CodecError::Truncated {
            needed: n,
            remaining: r.remaining(),
        })
    } else {
        Ok(())
    }
}

macro_rules! fixed_width {
    ($write:ident, $read:ident, $t:ty, $get:ident) => {
        #[doc = concat!("Writes a big-endian `", stringify!($t), "`.")]
        pub fn $write<W: Writer>(w: &mut W, v: $t) {
            w.put(&v.to_be_bytes());
        }
        #[doc = concat!("Reads a big-endian `", stringify!($t), "`.")]
        pub fn $read(r: &mut Bytes) -> Result<$t, CodecError> {
            need(r, std::mem::size_of::<$t>())?;
            Ok(r.$get())
        }
    };
}

fixed_width!(write_int8, read_int8, i8, get_i8);
fixed_width!(write_int16, read_int16, i16, get_i16);
fixed_width!(write_uint16, read_uint16, u16, get_u16);
fixed_width!(write_int32, read_int32, i32, get_i32);
fixed_width!(write_uint32, read_uint32, u32, get_u32);
fixed_width!(write_int64, read_int64, i64, get_i64);
fixed_width!(write_float64, read_float64, f64, get_f64);

/// Writes a boolean as one byte.
pub fn write_bool<W: Writer>(w: &mut W, v: bool) {
    w.put(&[u8::from(v)]);
}

/// Reads a boolean; any non-zero byte is true, as in Kafka.
pub fn read_bool(r: &mut Bytes) -> Result<bool, CodecError> {
    need(r, 1)?;
    Ok(r.get_u8() != 0)
}

/// Writes a UUID as 16 big-endian bytes.
pub fn write_uuid<W: Writer>(w: &mut W, v: &Uuid) {
    w.put(v.as_bytes());
}

/// Reads a UUID.
pub fn read_uuid(r: &mut Bytes) -> Result<Uuid, CodecError> {
    need(r, 16)?;
    let mut raw = [0u8; 16];
    r.copy_to_slice(&mut raw);
    Ok(Uuid::from_bytes(raw))
}

/// Writes an unsigned LEB128 varint (at most 5 bytes).
pub fn write_unsigned_varint<W: Writer>(w: &mut W, mut v: u32) {
    let mut buf = [0u8; 5];
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    w.put(&buf[..=n]);
}

/// Reads an unsigned varint.
pub fn read_unsigned_varint(r: &mut Bytes) -> Result<u32, CodecError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        need(r, 1)?;
        let byte = r.get_u8();
        // The fifth byte may only carry the top four bits of a u32.
        if i == 4 && byte > 0x0f {
            return Err(CodecError::VarintTooLong);
        }
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(CodecError::VarintTooLong)
}

/// Writes a zig-zag signed varint, as record fields use.
pub fn write_varint<W: Writer>(w: &mut W, v: i32) {
    write_unsigned_varint(w, ((v << 1) ^ (v >> 31)) as u32);
}

/// Reads a zig-zag signed varint.
pub fn read_varint(r: &mut Bytes) -> Result<i32, CodecError> {
    let raw = read_unsigned_varint(r)?;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Writes a zig-zag signed varlong (at most 10 bytes).
pub fn write_varlong<W: Writer>(w: &mut W, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    let mut buf = [0u8; 10];
    let mut n = 0;
    while raw >= 0x80 {
        buf[n] = (raw as u8) | 0x80;
        raw >>= 7;
        n += 1;
    }
    buf[n] = raw as u8;
    w.put(&buf[..=n]);
}

/// Reads a zig-zag signed varlong.
pub fn read_varlong(r: &mut Bytes) -> Result<i64, CodecError> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        need(r, 1)?;
        let byte = r.get_u8();
        if i == 9 && byte > 0x01 {
            return Err(CodecError::VarintTooLong);
        }
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    Err(CodecError::VarintTooLong)
}

/// Writes the length prefix of a string, bytes or array; `None` is null.
/// Classic strings use an `int16` prefix, classic bytes and arrays an `int32` prefix.
fn write_len<W: Writer>(
    w: &mut W,
    len: Option<usize>,
    flexible: bool,
    classic_i16: bool,
    what: &'static str,
) -> Result<(), CodecError> {
    match (flexible, len) {
        (true, None) => write_unsigned_varint(w, 0),
        (true, Some(n)) => {
            let n = u32::try_from(n)
                .ok()
                .and_then(|n| n.checked_add(1))
                .ok_or(CodecError::TooLong(what))?;
            write_unsigned_varint(w, n);
        }
        (false, None) if classic_i16 => write_int16(w, -1),
        (false, None) => write_int32(w, -1),
        (false, Some(n)) if classic_i16 => {
            write_int16(w, i16::try_from(n).map_err(|_| CodecError::TooLong(what))?)
        }
        (false, Some(n)) => {
            write_int32(w, i32::try_from(n).map_err(|_| CodecError::TooLong(what))?)
        }
    }
    Ok(())
}

/// Reads a length prefix written by [`write_len`]; `None` is null.
fn read_len(r: &mut Bytes, flexible: bool, classic_i16: bool) -> Result<Option<usize>, CodecError> {
    let raw: i64 = if flexible {
        i64::from(read_unsigned_varint(r)?) - 1
    } else if classic_i16 {
        i64::from(read_int16(r)?)
    } else {
        i64::from(read_int32(r)?)
    };
    match raw {
        -1 => Ok(None),
        n if n < 0 => Err(CodecError::InvalidLength(n)),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| CodecError::InvalidLength(n)),
    }
}

/// Writes a nullable string.
pub fn write_nullable_string<W: Writer>(
    w: &mut W,
    v: Option<&str>,
    flexible: bool,
) -> Result<(), CodecError> {
    write_len(w, v.map(str::len), flexible, true, "string")?;
    if let Some(s) = v {
        w.put(s.as_bytes());
    }
    Ok(())
}

/// Writes a non-null string.
pub fn write_string<W: Writer>(w: &mut W, v: &str, flexible: bool) -> Result<(), CodecError> {
    write_nullable_string(w, Some(v), flexible)
}

/// Reads a nullable string.
pub fn read_nullable_string(r: &mut Bytes, flexible: bool) -> Result<Option<String>, CodecError> {
    match read_len(r, flexible, true)? {
        None => Ok(None),
        Some(n) => {
            need(r, n)?;
            let raw = r.split_to(n);
            std::str::from_utf8(&raw)
                .map(|s| Some(s.to_owned()))
                .map_err(|_| CodecError::InvalidUtf8)
        }
    }
}

/// Reads a string that must not be null.
pub fn read_string(
    r: &mut Bytes,
    flexible: bool,
    field: &'static str,
    version: i16,
) -> Result<String, CodecError> {
    read_nullable_string(r, flexible)?.ok_or(CodecError::NullNotAllowed { field, version })
}

/// Writes nullable bytes.
pub fn write_nullable_bytes<W: Writer>(
    w: &mut W,
    v: Option<&[u8]>,
    flexible: bool,
) -> Result<(), CodecError> {
    write_len(w, v.map(<[u8]>::len), flexible, false, "bytes")?;
    if let Some(b) = v {
        w.put(b);
    }
    Ok(())
}

/// Writes non-null bytes.
pub fn write_bytes<W: Writer>(w: &mut W, v: &[u8], flexible: bool) -> Result<(), CodecError> {
    write_nullable_bytes(w, Some(v), flexible)
}

/// Reads nullable bytes as a zero-copy slice of the input.
pub fn read_nullable_bytes(r: &mut Bytes, flexible: bool) -> Result<Option<Bytes>, CodecError> {
    match read_len(r, flexible, false)? {
        None => Ok(None),
        Some(n) => {
            need(r, n)?;
            Ok(Some(r.split_to(n)))
        }
    }
}

/// Reads bytes that must not be null.
pub fn read_bytes(
    r: &mut Bytes,
    flexible: bool,
    field: &'static str,
    version: i16,
) -> Result<Bytes, CodecError> {
    read_nullable_bytes(r, flexible)?.ok_or(CodecError::NullNotAllowed { field, version })
}

/// Writes an array's length prefix; `None` is a null array.
pub fn write_array_len<W: Writer>(
    w: &mut W,
    len: Option<usize>,
    flexible: bool,
) -> Result<(), CodecError> {
    write_len(w, len, flexible, false, "array")
}

/// Reads an array's length prefix. The length is checked against the bytes left (every element
/// takes at least one byte), so a hostile count cannot force a large allocation.
pub fn read_array_len(r: &mut Bytes, flexible: bool) -> Result<Option<usize>, CodecError> {
    let len = read_len(r, flexible, false)?;
    if let Some(n) = len
        && n > r.remaining()
    {
        return Err(CodecError::InvalidLength(n as i64));
    }
    Ok(len)
}

/// Reads an array that must not be null, each element with `elem`.
pub fn read_array<T>(
    r: &mut Bytes,
    flexible: bool,
    field: &'static str,
    version: i16,
    elem: impl FnMut(&mut Bytes) -> Result<T, CodecError>,
) -> Result<Vec<T>, CodecError> {
    read_nullable_array(r, flexible, elem)?.ok_or(CodecError::NullNotAllowed { field, version })
}

/// Reads a nullable array, each element with `elem`.
pub fn read_nullable_array<T>(
    r: &mut Bytes,
    flexible: bool,
    mut elem: impl FnMut(&mut Bytes) -> Result<T, CodecError>,
) -> Result<Option<Vec<T>>, CodecError> {
    let Some(n) = read_array_len(r, flexible)? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(elem(r)?);
    }
    Ok(Some(out))
}

/// Writes a tagged-field section: the count, then each `(tag, value)` in ascending tag order.
/// `fields` must already be sorted by tag.
pub fn write_tagged_fields<W: Writer>(
    w: &mut W,
    fields: &[(i32, &[u8])],
) -> Result<(), CodecError> {
    let count = u32::try_from(fields.len()).map_err(|_| CodecError::TooLong("tagged fields"))?;
    write_unsigned_varint(w, count);
    for (tag, value) in fields {
        write_unsigned_varint(w, *tag as u32);
        let len = u32::try_from(value.len()).map_err(|_| CodecError::TooLong("tagged field"))?;
        write_unsigned_varint(w, len);
        w.put(value);
    }
    Ok(())
}

/// Reads a tagged-field section and calls `field(tag, value)` for each entry; `value` is exactly
/// the entry's bytes (a zero-copy slice).
pub fn read_tagged_fields(
    r: &mut Bytes,
    mut field: impl FnMut(i32, Bytes) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    let count = read_unsigned_varint(r)?;
    for _ in 0..count {
        let tag = read_unsigned_varint(r)?;
        let tag = i32::try_from(tag).map_err(|_| CodecError::InvalidLength(i64::from(tag)))?;
        let len = read_unsigned_varint(r)? as usize;
        need(r, len)?;
        field(tag, r.split_to(len))?;
    }
    Ok(())
}

/// Decodes a known tagged field's value, which must use all of its bytes.
pub fn read_tagged_value<T>(
    tag: i32,
    mut value: Bytes,
    read: impl FnOnce(&mut Bytes) -> Result<T, CodecError>,
) -> Result<T, CodecError> {
    let declared = value.len();
    let decoded = read(&mut value)?;
    if value.has_remaining() {
        return Err(CodecError::TaggedFieldSize {
            tag,
            declared,
            used: declared - value.remaining(),
        });
    }
    Ok(decoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(f: impl FnOnce(&mut Vec<u8>)) -> Bytes {
        let mut v = Vec::new();
        f(&mut v);
        Bytes::from(v)
    }

    #[test]
    fn unsigned_varint_matches_kafka_examples() {
        for (value, encoded) in [
            (0u32, &[0x00u8][..]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (u32::MAX, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ] {
            let mut b = bytes_of(|w| write_unsigned_varint(w, value));
            assert_eq!(&b[..], encoded);
            assert_eq!(read_unsigned_varint(&mut b), Ok(value));
        }
    }

    #[test]
    fn zigzag_varints_round_trip_at_the_edges() {
        for v in [0, -1, 1, -64, 63, 64, i32::MIN, i32::MAX] {
            let mut b = bytes_of(|w| write_varint(w, v));
            assert_eq!(read_varint(&mut b), Ok(v));
        }
        for v in [0, -1, 1, i64::MIN, i64::MAX, 1 << 40] {
            let mut b = bytes_of(|w| write_varlong(w, v));
            assert_eq!(read_varlong(&mut b), Ok(v));
        }
        // -1 zig-zags to 1, 1 to 2: the encodings records use for "no key" and small deltas.
        assert_eq!(&bytes_of(|w| write_varint(w, -1))[..], &[0x01]);
        assert_eq!(&bytes_of(|w| write_varint(w, 1))[..], &[0x02]);
    }

    #[test]
    fn overlong_varints_are_rejected() {
        let mut b = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(read_unsigned_varint(&mut b), Err(CodecError::VarintTooLong));
        let mut b = Bytes::from_static(&[0xff; 11]);
        assert_eq!(read_varlong(&mut b), Err(CodecError::VarintTooLong));
    }

    #[test]
    fn compact_and_classic_strings_differ_only_in_prefix() {
        assert_eq!(
            &bytes_of(|w| write_string(w, "ab", true).expect("encodes"))[..],
            &[3, b'a', b'b']
        );
        assert_eq!(
            &bytes_of(|w| write_string(w, "ab", false).expect("encodes"))[..],
            &[0, 2, b'a', b'b']
        );
        assert_eq!(
            &bytes_of(|w| write_nullable_string(w, None, true).expect("encodes"))[..],
            &[0]
        );
        assert_eq!(
            &bytes_of(|w| write_nullable_string(w, None, false).expect("encodes"))[..],
            &[0xff, 0xff]
        );
    }

    #[test]
    fn hostile_lengths_are_errors_not_allocations() {
        // A compact array claiming 2^32 - 2 elements with no bytes behind it.
        let mut b = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            read_array_len(&mut b, true),
            Err(CodecError::InvalidLength(_))
        ));
        let mut b = Bytes::from_static(&[0x7f, 0xff, b'a']);
        assert!(matches!(
            read_nullable_string(&mut b, false),
            Err(CodecError::Truncated { .. })
        ));
        let mut b = Bytes::from_static(&[0xff, 0xfe]);
        assert_eq!(
            read_nullable_string(&mut b, false),
            Err(CodecError::InvalidLength(-2))
        );
        let mut b = Bytes::from_static(&[3, 0xff, 0xfe]);
        assert_eq!(
            read_nullable_string(&mut b, true),
            Err(CodecError::InvalidUtf8)
        );
    }

    #[test]
    fn tagged_value_must_fill_its_declared_size() {
        let value = Bytes::from_static(&[0, 0, 0, 7, 9]);
        assert_eq!(
            read_tagged_value(3, value, read_int32),
            Err(CodecError::TaggedFieldSize {
                tag: 3,
                declared: 5,
                used: 4
            })
        );
    }
}
