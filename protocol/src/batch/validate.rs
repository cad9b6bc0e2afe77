//! Validation of produced record batches, as Kafka's `LogValidator` validates a client's batches
//! before the leader appends them.
//!
//! Lifecycle and contract: the Produce path calls [`validate_produced`] on a partition's records
//! before it takes the partition's log, and appends nothing when it answers an error; what it
//! accepts is stored byte-for-byte. Nothing is re-encoded: uncompressed records are walked in
//! place, compressed ones are decompressed as a stream and walked as they come out, so memory
//! stays bounded by the codecs' buffers whatever sizes the batch declares. Mirrored batches are
//! not validated here: their source validated them, and they stay the source's bytes.
//!
//! A batch is valid when (the Kafka error a violation answers in brackets):
//! - its framing and CRC are valid and its codec is one Kafka defines (CORRUPT_MESSAGE), and its
//!   compressed records decompress (CORRUPT_MESSAGE);
//! - it declares at least one record and `lastOffsetDelta` is the record count minus one, and a
//!   batch with a producer id has a sequence (INVALID_RECORD);
//! - it holds exactly the declared records, nothing after them; each record's length is the
//!   bytes its fields take, its offset delta is its index (0, 1, ... in order), its key and value
//!   lengths are -1 (null) or more, its header count and header key lengths 0 or more, its
//!   header keys UTF-8, and its varints at most 5 (int) or 10 (long) bytes (INVALID_RECORD);
//! - each record's timestamp (base timestamp + delta) fits in an int64 and, with create-time
//!   timestamps, the header's max timestamp is the greatest of them, as Kafka stores it
//!   (INVALID_RECORD);
//! - with create-time timestamps, no record's timestamp (other than -1, none) lies more than
//!   [`TimestampLimits::before_max_ms`] before the broker's clock or
//!   [`TimestampLimits::after_max_ms`] after it (INVALID_TIMESTAMP): a record dated a century
//!   ahead would keep its segment from ever expiring.

use super::{BatchError, Compression, HEADER_SIZE, RecordBatch, RecordBatches, TimestampType};
use crate::errors::ErrorCode;
use bytes::Bytes;
use std::io::{self, BufRead, BufReader, Read};
use thiserror::Error;

/// How far from the broker's clock a produced record's create time may lie: Kafka's
/// `log.message.timestamp.before.max.ms` and `log.message.timestamp.after.max.ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampLimits {
    /// The broker's clock, ms since the epoch.
    pub now_ms: i64,
    /// How far in the past a record may be dated.
    pub before_max_ms: i64,
    /// How far in the future a record may be dated.
    pub after_max_ms: i64,
}

impl TimestampLimits {
    /// No bound (the validation of tools that have no clock to compare with).
    pub const NONE: TimestampLimits = TimestampLimits {
        now_ms: 0,
        before_max_ms: i64::MAX,
        after_max_ms: i64::MAX,
    };

    /// Whether `timestamp` is no further in the past than allowed.
    fn not_too_old(&self, timestamp: i64) -> bool {
        timestamp >= self.now_ms.saturating_sub(self.before_max_ms)
    }

    /// Whether `timestamp` is no further in the future than allowed.
    fn not_too_new(&self, timestamp: i64) -> bool {
        timestamp <= self.now_ms.saturating_add(self.after_max_ms)
    }
}

/// Why a produced batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidBatch {
    /// Framing, magic, CRC or codec.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The header declares no records, or a negative number.
    #[error("batch at byte {position} declares {count} records; a batch holds at least one")]
    RecordCount { position: usize, count: i32 },
    /// `lastOffsetDelta` does not match the record count, so offsets would not follow.
    #[error(
        "batch at byte {position} declares {count} records but a last offset delta of \
         {last_offset_delta}; it must be {count} - 1"
    )]
    OffsetRange {
        position: usize,
        count: i32,
        last_offset_delta: i32,
    },
    /// An idempotent producer's batch without a sequence.
    #[error("batch at byte {position} of producer {producer_id} has sequence {sequence}")]
    Sequence {
        position: usize,
        producer_id: i64,
        sequence: i32,
    },
    /// A record's offset delta is not its place in the batch.
    #[error("batch at byte {position}: record {record} has offset delta {found}")]
    OffsetDelta {
        position: usize,
        record: i32,
        found: i32,
    },
    /// A record's bytes do not hold what they declare.
    #[error("batch at byte {position}, record {record}: {reason}")]
    Record {
        position: usize,
        record: i32,
        reason: &'static str,
    },
    /// The compressed records do not decompress.
    #[error("batch at byte {position}: its {codec} records do not decompress: {reason}")]
    Decompress {
        position: usize,
        codec: &'static str,
        reason: String,
    },
    /// The header's max timestamp is not its records' greatest.
    #[error(
        "batch at byte {position} declares max timestamp {declared}, but its records' greatest is \
         {actual}"
    )]
    MaxTimestamp {
        position: usize,
        declared: i64,
        actual: i64,
    },
    /// A record's create time is too far from the broker's clock.
    #[error(
        "batch at byte {position} holds a record dated {timestamp}, more than {limit_ms} ms \
         {direction} the broker's clock ({now_ms})"
    )]
    Timestamp {
        position: usize,
        timestamp: i64,
        now_ms: i64,
        limit_ms: i64,
        direction: &'static str,
    },
}

impl InvalidBatch {
    /// The error code Kafka answers for it.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            InvalidBatch::Batch(BatchError::UnsupportedMagic { .. }) => ErrorCode::INVALID_RECORD,
            InvalidBatch::Batch(_) | InvalidBatch::Decompress { .. } => ErrorCode::CORRUPT_MESSAGE,
            InvalidBatch::Timestamp { .. } => ErrorCode::INVALID_TIMESTAMP,
            _ => ErrorCode::INVALID_RECORD,
        }
    }
}

/// Validates every complete batch of one partition's produced records, in order (a partial
/// trailing batch and an empty append are the append's to refuse).
pub fn validate_produced(records: &Bytes, limits: &TimestampLimits) -> Result<(), InvalidBatch> {
    let mut position = 0;
    for batch in RecordBatches::new(records.clone()) {
        let batch = batch?;
        batch.verify_crc()?;
        validate_batch(&batch, position, limits)?;
        position += batch.size();
    }
    Ok(())
}

/// Validates one batch whose framing and CRC are checked; `position` is its byte position in
/// the request, for the message.
pub fn validate_batch(
    batch: &RecordBatch,
    position: usize,
    limits: &TimestampLimits,
) -> Result<(), InvalidBatch> {
    let count = batch.records_count();
    if count <= 0 {
        return Err(InvalidBatch::RecordCount { position, count });
    }
    let last_offset_delta = batch.last_offset_delta();
    if i64::from(last_offset_delta) + 1 != i64::from(count) {
        return Err(InvalidBatch::OffsetRange {
            position,
            count,
            last_offset_delta,
        });
    }
    if batch.producer_id() >= 0 && batch.base_sequence() < 0 {
        return Err(InvalidBatch::Sequence {
            position,
            producer_id: batch.producer_id(),
            sequence: batch.base_sequence(),
        });
    }
    let codec = batch.compression()?;
    let records = &batch.as_bytes()[HEADER_SIZE..];
    let base_timestamp = batch.base_timestamp();
    let walked = match codec {
        Compression::None => walk(
            &mut Slice {
                bytes: records,
                at: 0,
            },
            count,
            base_timestamp,
        ),
        Compression::Gzip => walk(
            &mut Stream::new(flate2::read::MultiGzDecoder::new(records)),
            count,
            base_timestamp,
        ),
        Compression::Snappy => walk(
            &mut Stream::new(Snappy::new(records)),
            count,
            base_timestamp,
        ),
        Compression::Lz4 => match lz4::Decoder::new(records) {
            Ok(decoder) => walk(&mut Stream::new(decoder), count, base_timestamp),
            Err(e) => Err((0, Stop::Fault(e.to_string()))),
        },
        Compression::Zstd => match zstd::stream::read::Decoder::with_buffer(records) {
            Ok(decoder) => walk(&mut Stream::new(decoder), count, base_timestamp),
            Err(e) => Err((0, Stop::Fault(e.to_string()))),
        },
    };
    let (least, greatest) = walked.map_err(|(record, stop)| match stop {
        Stop::Fault(reason) => InvalidBatch::Decompress {
            position,
            codec: codec.name(),
            reason,
        },
        Stop::Malformed(reason) => InvalidBatch::Record {
            position,
            record,
            reason,
        },
        Stop::OffsetDelta(found) => InvalidBatch::OffsetDelta {
            position,
            record,
            found,
        },
    })?;
    if batch.timestamp_type() == TimestampType::CreateTime {
        if batch.max_timestamp() != greatest {
            return Err(InvalidBatch::MaxTimestamp {
                position,
                declared: batch.max_timestamp(),
                actual: greatest,
            });
        }
        let refused = |timestamp: i64, limit_ms: i64, direction| InvalidBatch::Timestamp {
            position,
            timestamp,
            now_ms: limits.now_ms,
            limit_ms,
            direction,
        };
        if let Some(least) = least.filter(|t| !limits.not_too_old(*t)) {
            return Err(refused(least, limits.before_max_ms, "before"));
        }
        if greatest != NO_TIMESTAMP && !limits.not_too_new(greatest) {
            return Err(refused(greatest, limits.after_max_ms, "after"));
        }
    }
    Ok(())
}

/// A record's timestamp when it has none.
const NO_TIMESTAMP: i64 = -1;

/// Why walking the records stopped.
enum Stop {
    /// The decompressor failed.
    Fault(String),
    /// The bytes do not hold a record as declared.
    Malformed(&'static str),
    /// The record's offset delta is not its index.
    OffsetDelta(i32),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Self {
        Stop::Fault(e.to_string())
    }
}

/// Where record bytes come from: the batch itself, or a decompressing stream.
trait Source {
    /// Up to `max` of the next bytes, not consumed; empty at the end.
    fn peek(&mut self, max: usize) -> io::Result<&[u8]>;
    /// Consumes `n` bytes of what [`Source::peek`] returned.
    fn advance(&mut self, n: usize);
    /// Bytes consumed so far.
    fn consumed(&self) -> u64;

    /// The next byte, `None` at the end.
    fn next_byte(&mut self) -> io::Result<Option<u8>> {
        let Some(&byte) = self.peek(1)?.first() else {
            return Ok(None);
        };
        self.advance(1);
        Ok(Some(byte))
    }

    /// Skips `n` bytes; false when fewer were left.
    fn skip(&mut self, n: u64) -> io::Result<bool> {
        let mut left = n;
        while left > 0 {
            let step = self
                .peek(usize::try_from(left).unwrap_or(usize::MAX))?
                .len();
            if step == 0 {
                return Ok(false);
            }
            self.advance(step);
            left -= step as u64;
        }
        Ok(true)
    }
}

/// Uncompressed records, walked in place.
struct Slice<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Source for Slice<'_> {
    fn peek(&mut self, max: usize) -> io::Result<&[u8]> {
        let rest = &self.bytes[self.at..];
        Ok(&rest[..rest.len().min(max)])
    }

    fn advance(&mut self, n: usize) {
        self.at += n;
    }

    fn consumed(&self) -> u64 {
        self.at as u64
    }
}

/// Decompressed records, read through a small buffer and never held whole.
struct Stream<R> {
    inner: BufReader<R>,
    consumed: u64,
}

impl<R: Read> Stream<R> {
    fn new(inner: R) -> Self {
        Stream {
            inner: BufReader::new(inner),
            consumed: 0,
        }
    }
}

impl<R: Read> Source for Stream<R> {
    fn peek(&mut self, max: usize) -> io::Result<&[u8]> {
        let buffered = self.inner.fill_buf()?;
        Ok(&buffered[..buffered.len().min(max)])
    }

    fn advance(&mut self, n: usize) {
        self.inner.consume(n);
        self.consumed += n as u64;
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }
}

/// The least a record's body takes: attributes, timestamp delta, offset delta, key length,
/// value length and header count, one byte each.
const MIN_RECORD_BODY: i32 = 6;

/// Kafka's unsigned varint of at most `max_bytes` bytes; `None` when truncated or too long.
fn unsigned<S: Source>(src: &mut S, max_bytes: u32) -> io::Result<Option<u64>> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let Some(byte) = src.next_byte()? else {
            return Ok(None);
        };
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Ok(None)
}

/// A zigzag varint (int32), as Kafka's `ByteUtils.readVarint` reads it.
fn varint<S: Source>(src: &mut S, what: &'static str) -> Result<i32, Stop> {
    let raw = unsigned(src, 5)?.ok_or(Stop::Malformed(what))? as u32;
    Ok((raw >> 1) as i32 ^ -((raw & 1) as i32))
}

/// A zigzag varlong (int64).
fn varlong<S: Source>(src: &mut S, what: &'static str) -> Result<i64, Stop> {
    let raw = unsigned(src, 10)?.ok_or(Stop::Malformed(what))?;
    Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
}

/// Skips a nullable length-prefixed field (key, value, header value) that must end by `end`.
fn nullable_field<S: Source>(
    src: &mut S,
    end: u64,
    what: &'static str,
    bad_length: &'static str,
    too_long: &'static str,
) -> Result<(), Stop> {
    let length = varint(src, what)?;
    if length < -1 {
        return Err(Stop::Malformed(bad_length));
    }
    if length > 0 {
        let length = length as u64;
        if src.consumed() + length > end {
            return Err(Stop::Malformed(too_long));
        }
        if !src.skip(length)? {
            return Err(Stop::Malformed("the batch ends inside a record"));
        }
    }
    Ok(())
}

const HEADER_KEY_NOT_UTF8: &str = "header key is not UTF-8";

/// Skips a header key, which must be UTF-8 (the record format makes header keys strings, and
/// consumers decode them), checked piece by piece so a long key is never held whole.
fn header_key<S: Source>(src: &mut S, end: u64) -> Result<(), Stop> {
    let length = varint(src, "header key length is not a varint")?;
    if length < 0 {
        return Err(Stop::Malformed("header key length is negative"));
    }
    let mut left = length as u64;
    if src.consumed() + left > end {
        return Err(Stop::Malformed("header key runs past its record"));
    }
    // The first bytes of a character the previous piece cut (a character takes at most 4).
    let mut cut = [0u8; 4];
    let mut cut_len = 0;
    while left > 0 {
        let piece = src.peek(usize::try_from(left).unwrap_or(usize::MAX))?;
        if piece.is_empty() {
            return Err(Stop::Malformed("the batch ends inside a record"));
        }
        let mut used = 0;
        while cut_len > 0 && cut_len < cut.len() && used < piece.len() {
            cut[cut_len] = piece[used];
            cut_len += 1;
            used += 1;
            match std::str::from_utf8(&cut[..cut_len]) {
                Ok(_) => cut_len = 0,
                Err(e) if e.error_len().is_some() => {
                    return Err(Stop::Malformed(HEADER_KEY_NOT_UTF8));
                }
                Err(_) => {}
            }
        }
        if let Err(e) = std::str::from_utf8(&piece[used..]) {
            if e.error_len().is_some() || cut_len > 0 {
                return Err(Stop::Malformed(HEADER_KEY_NOT_UTF8));
            }
            let tail = &piece[used + e.valid_up_to()..];
            cut[..tail.len()].copy_from_slice(tail);
            cut_len = tail.len();
        }
        let step = piece.len();
        src.advance(step);
        left -= step as u64;
    }
    if cut_len > 0 {
        return Err(Stop::Malformed(HEADER_KEY_NOT_UTF8));
    }
    Ok(())
}

/// Walks `count` records and checks nothing follows them; returns the least timestamp other than
/// [`NO_TIMESTAMP`] (if any) and the greatest, or the index of the record where it stopped and
/// why.
fn walk<S: Source>(
    src: &mut S,
    count: i32,
    base_timestamp: i64,
) -> Result<(Option<i64>, i64), (i32, Stop)> {
    let mut greatest = i64::MIN;
    let mut least: Option<i64> = None;
    for record in 0..count {
        let timestamp = one_record(src, record, base_timestamp).map_err(|s| (record, s))?;
        greatest = greatest.max(timestamp);
        if timestamp != NO_TIMESTAMP {
            least = Some(least.map_or(timestamp, |l| l.min(timestamp)));
        }
    }
    match src.next_byte() {
        Ok(None) => Ok((least, greatest)),
        Ok(Some(_)) => Err((
            count,
            Stop::Malformed("bytes follow the last declared record"),
        )),
        Err(e) => Err((count, e.into())),
    }
}

/// Checks one record; returns its timestamp.
fn one_record<S: Source>(src: &mut S, index: i32, base_timestamp: i64) -> Result<i64, Stop> {
    let length = varint(src, "record length is not a varint")?;
    if length < MIN_RECORD_BODY {
        return Err(Stop::Malformed(
            "record length is less than a record's fields take",
        ));
    }
    let end = src.consumed() + length as u64;
    if src.next_byte()?.is_none() {
        return Err(Stop::Malformed("the batch ends inside a record"));
    }
    let delta = varlong(src, "timestamp delta is not a varlong")?;
    let offset_delta = varint(src, "offset delta is not a varint")?;
    if offset_delta != index {
        return Err(Stop::OffsetDelta(offset_delta));
    }
    let timestamp = base_timestamp
        .checked_add(delta)
        .ok_or(Stop::Malformed("timestamp overflows"))?;
    nullable_field(
        src,
        end,
        "key length is not a varint",
        "key length is below -1",
        "key runs past its record",
    )?;
    nullable_field(
        src,
        end,
        "value length is not a varint",
        "value length is below -1",
        "value runs past its record",
    )?;
    let headers = varint(src, "header count is not a varint")?;
    if headers < 0 {
        return Err(Stop::Malformed("header count is negative"));
    }
    for _ in 0..headers {
        if src.consumed() >= end {
            return Err(Stop::Malformed("more headers than the record holds"));
        }
        header_key(src, end)?;
        nullable_field(
            src,
            end,
            "header value length is not a varint",
            "header value length is below -1",
            "header value runs past its record",
        )?;
    }
    if src.consumed() != end {
        return Err(Stop::Malformed(
            "record length does not match the bytes its fields take",
        ));
    }
    Ok(timestamp)
}

/// The xerial framing Kafka's Java producer writes around snappy blocks.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// The framing header: magic, version and compatible version.
const XERIAL_HEADER: usize = 16;
/// A snappy copy element of 3 bytes expands to at most 64, so no valid block decompresses to
/// more than 22 times its size; a block declaring more is refused before anything is allocated.
const SNAPPY_MAX_EXPANSION: usize = 22;

/// Snappy records: xerial-framed blocks (`[int32 length][raw block]...` after the header), or
/// one raw block without the header (what librdkafka writes), decompressed one block at a time.
struct Snappy<'a> {
    input: &'a [u8],
    framed: bool,
    block: Vec<u8>,
    at: usize,
}

impl<'a> Snappy<'a> {
    fn new(input: &'a [u8]) -> Self {
        let framed = input.len() >= XERIAL_HEADER && input.starts_with(XERIAL_MAGIC);
        Snappy {
            input: if framed {
                &input[XERIAL_HEADER..]
            } else {
                input
            },
            framed,
            block: Vec::new(),
            at: 0,
        }
    }

    /// Decompresses the next block; false at the end.
    fn next_block(&mut self) -> io::Result<bool> {
        if self.input.is_empty() {
            return Ok(false);
        }
        let compressed = if self.framed {
            let Some((length, rest)) = self.input.split_first_chunk::<4>() else {
                return Err(invalid_data("a snappy block length is cut short"));
            };
            let length = u32::from_be_bytes(*length) as usize;
            if length > rest.len() {
                return Err(invalid_data("a snappy block runs past the records"));
            }
            let (block, rest) = rest.split_at(length);
            self.input = rest;
            block
        } else {
            std::mem::take(&mut self.input)
        };
        let length = snap::raw::decompress_len(compressed)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if length > compressed.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
            return Err(invalid_data(
                "a snappy block declares more than its size can expand to",
            ));
        }
        self.block.clear();
        self.block.resize(length, 0);
        snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.at = 0;
        Ok(true)
    }
}

fn invalid_data(reason: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}

impl Read for Snappy<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.at);
        out[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
