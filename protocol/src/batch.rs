//! A zero-copy view over RecordBatch v2 data, the unit Kafka stores and ships.
//!
//! Layout of a batch (big-endian), as in Kafka's `DefaultRecordBatch`:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | base offset |
//! | 8..12 | batch length (bytes after this field) |
//! | 12..16 | partition leader epoch |
//! | 16 | magic (2) |
//! | 17..21 | CRC32C of bytes 21..end |
//! | 21..23 | attributes: codec (bits 0-2), timestamp type (3), transactional (4), control (5), delete horizon (6) |
//! | 23..27 | last offset delta |
//! | 27..35 | base timestamp |
//! | 35..43 | max timestamp |
//! | 43..51 | producer id |
//! | 51..53 | producer epoch |
//! | 53..57 | base sequence |
//! | 57..61 | record count |
//! | 61.. | records, compressed as a block when the codec is not none |
//!
//! Contracts:
//! - Nothing here decompresses or re-encodes: a [`RecordBatch`] is a slice of the buffer it came
//!   from, so mirrored bytes stay the source's bytes. Only [`validate`], which checks a produced
//!   batch's records, decompresses (as a stream, to look, never to store).
//! - [`RecordBatches`] yields complete batches and stops cleanly at a partial trailing batch (a
//!   broker cuts the last batch of a fetch at `max_bytes`); [`RecordBatches::partial_tail`] tells
//!   how many bytes were left over. A structurally invalid header is an error and ends iteration.
//! - The CRC is verified only when asked ([`RecordBatch::verify_crc`]): the fetch path verifies,
//!   a read path that only forwards need not.
//! - The base offset and the partition leader epoch lie outside the CRC, so
//!   [`RecordBatchMut`] rewrites them in place and the batch stays valid.

use bytes::Bytes;
use std::fmt;
use thiserror::Error;

/// Bytes before the batch length field ends: base offset and batch length.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, records excluded.
pub const HEADER_SIZE: usize = 61;
/// The only record format kmirror reads.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch written by no idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch of a batch written by no idempotent producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Sequence of a batch written by no idempotent producer.
pub const NO_SEQUENCE: i32 = -1;

const BASE_OFFSET: usize = 0;
const LENGTH: usize = 8;
const PARTITION_LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORDS_COUNT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
const TRANSACTIONAL_FLAG: i16 = 0x10;
const CONTROL_FLAG: i16 = 0x20;
const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Why bytes are not a valid record batch.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// The batch length field is smaller than a v2 header.
    #[error(
        "batch at byte {position} declares length {length}, less than the v2 header's {}",
        HEADER_SIZE - LOG_OVERHEAD
    )]
    LengthTooSmall { position: usize, length: i32 },
    /// The batch is not in the v2 format.
    #[error("batch at byte {position} has magic {magic}; only v2 record batches are supported")]
    UnsupportedMagic { position: usize, magic: i8 },
    /// The stored CRC does not match the bytes.
    #[error(
        "batch at offset {base_offset} is corrupt: stored CRC {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        base_offset: i64,
        stored: u32,
        computed: u32,
    },
    /// The attributes name a compression codec Kafka does not define.
    #[error("batch at offset {base_offset} uses unknown compression codec {codec}")]
    UnknownCompression { base_offset: i64, codec: i16 },
    /// The last offset delta is negative: the batch would end before it starts.
    #[error("batch at offset {base_offset} has last offset delta {last_offset_delta}")]
    NegativeLastOffsetDelta {
        base_offset: i64,
        last_offset_delta: i32,
    },
    /// A buffer meant to hold exactly one batch holds less or more.
    #[error("expected exactly one batch of {expected} bytes, got {actual} bytes")]
    NotOneBatch { expected: usize, actual: usize },
}

/// The codec that compressed a batch's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Uncompressed.
    None,
    /// gzip.
    Gzip,
    /// Snappy (xerial framing, as Kafka writes it).
    Snappy,
    /// LZ4 frame.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    fn from_bits(bits: i16) -> Option<Compression> {
        Some(match bits {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return None,
        })
    }

    /// The codec's name as Kafka's `compression.type` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// What a batch's timestamps mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker on append.
    LogAppendTime,
}

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(raw)
}

/// Checks the header at the start of `b` and returns the batch's total size, or `None` if `b`
/// ends before the batch does.
fn complete_batch_size(b: &[u8], position: usize) -> Result<Option<usize>, BatchError> {
    if b.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let length = i32_at(b, LENGTH);
    if length < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
        return Err(BatchError::LengthTooSmall { position, length });
    }
    let size = LOG_OVERHEAD + length as usize;
    if b.len() < size {
        return Ok(None);
    }
    let magic = b[MAGIC] as i8;
    if magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic { position, magic });
    }
    Ok(Some(size))
}

/// Kafka's sequence arithmetic: sequences wrap from `i32::MAX` to 0.
fn add_to_sequence(base: i32, delta: i32) -> i32 {
    if base > i32::MAX - delta {
        delta - (i32::MAX - base) - 1
    } else {
        base + delta
    }
}

/// Header accessors shared by the shared and the mutable view.
macro_rules! header_getters {
    () => {
        /// The offset of the first record.
        pub fn base_offset(&self) -> i64 {
            i64_at(self.raw(), BASE_OFFSET)
        }

        /// The batch length field: bytes after it.
        pub fn batch_length(&self) -> i32 {
            i32_at(self.raw(), LENGTH)
        }

        /// The leader epoch stamped by the leader that appended the batch.
        pub fn partition_leader_epoch(&self) -> i32 {
            i32_at(self.raw(), PARTITION_LEADER_EPOCH)
        }

        /// The offset delta of the last record: `last_offset - base_offset`. Compaction may
        /// have removed records, so this, not the record count, gives the next offset.
        pub fn last_offset_delta(&self) -> i32 {
            i32_at(self.raw(), LAST_OFFSET_DELTA)
        }

        /// The offset of the last record the batch was written with.
        pub fn last_offset(&self) -> i64 {
            self.base_offset() + i64::from(self.last_offset_delta())
        }

        /// The offset after the batch.
        pub fn next_offset(&self) -> i64 {
            self.last_offset() + 1
        }
    };
}

/// The fields of a batch header needed to walk a log without reading whole batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// The offset of the first record.
    pub base_offset: i64,
    /// The whole batch's size in bytes.
    pub size: usize,
    /// The leader epoch stamped on the batch.
    pub partition_leader_epoch: i32,
    /// `last_offset - base_offset`.
    pub last_offset_delta: i32,
    /// The greatest record timestamp.
    pub max_timestamp: i64,
}

impl BatchHeader {
    /// Reads the header at the start of `b`, which needs only [`HEADER_SIZE`] bytes; `None` when
    /// `b` is shorter. `position` is reported in errors.
    pub fn parse(b: &[u8], position: usize) -> Result<Option<BatchHeader>, BatchError> {
        if b.len() < HEADER_SIZE {
            return Ok(None);
        }
        let length = i32_at(b, LENGTH);
        if length < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
            return Err(BatchError::LengthTooSmall { position, length });
        }
        let magic = b[MAGIC] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic { position, magic });
        }
        Ok(Some(BatchHeader {
            base_offset: i64_at(b, BASE_OFFSET),
            size: LOG_OVERHEAD + length as usize,
            partition_leader_epoch: i32_at(b, PARTITION_LEADER_EPOCH),
            last_offset_delta: i32_at(b, LAST_OFFSET_DELTA),
            max_timestamp: i64_at(b, MAX_TIMESTAMP),
        }))
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }
}

/// One complete RecordBatch v2: a zero-copy slice of the buffer it was found in.
#[derive(Clone, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
}

impl RecordBatch {
    /// Wraps a buffer that must hold exactly one complete v2 batch.
    pub fn new(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let not_one = |expected| BatchError::NotOneBatch {
            expected,
            actual: bytes.len(),
        };
        match complete_batch_size(&bytes, 0)? {
            Some(size) if size == bytes.len() => Ok(RecordBatch { bytes }),
            Some(size) => Err(not_one(size)),
            None if bytes.len() < LOG_OVERHEAD => Err(not_one(HEADER_SIZE)),
            None => Err(not_one(LOG_OVERHEAD + i32_at(&bytes, LENGTH) as usize)),
        }
    }

    fn raw(&self) -> &[u8] {
        &self.bytes
    }

    header_getters!();

    /// The whole batch, header included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The whole batch, header included.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// The batch's size in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The record format version (always 2 here).
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC] as i8
    }

    /// The stored CRC32C.
    pub fn crc(&self) -> u32 {
        i32_at(&self.bytes, CRC) as u32
    }

    /// The CRC32C of the bytes the stored CRC covers (attributes to the end).
    pub fn compute_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[ATTRIBUTES..])
    }

    /// Checks the stored CRC against the bytes.
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored == computed {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch {
                base_offset: self.base_offset(),
                stored,
                computed,
            })
        }
    }

    /// The raw attributes field.
    pub fn attributes(&self) -> i16 {
        i16_at(&self.bytes, ATTRIBUTES)
    }

    /// The codec that compressed the records.
    pub fn compression(&self) -> Result<Compression, BatchError> {
        let codec = self.attributes() & COMPRESSION_MASK;
        Compression::from_bits(codec).ok_or(BatchError::UnknownCompression {
            base_offset: self.base_offset(),
            codec,
        })
    }

    /// What the timestamps mean.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes() & TIMESTAMP_TYPE_FLAG != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether a transactional producer wrote the batch.
    pub fn is_transactional(&self) -> bool {
        self.attributes() & TRANSACTIONAL_FLAG != 0
    }

    /// Whether the batch holds a control record (transaction marker, `MIRROR_PID_RESET`, ...).
    pub fn is_control(&self) -> bool {
        self.attributes() & CONTROL_FLAG != 0
    }

    /// Whether the base timestamp is a compaction delete horizon.
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes() & DELETE_HORIZON_FLAG != 0
    }

    /// The first record's timestamp (or the delete horizon, see [`Self::has_delete_horizon`]).
    pub fn base_timestamp(&self) -> i64 {
        i64_at(&self.bytes, BASE_TIMESTAMP)
    }

    /// The greatest record timestamp.
    pub fn max_timestamp(&self) -> i64 {
        i64_at(&self.bytes, MAX_TIMESTAMP)
    }

    /// The producer id, or [`NO_PRODUCER_ID`].
    pub fn producer_id(&self) -> i64 {
        i64_at(&self.bytes, PRODUCER_ID)
    }

    /// The producer epoch, or [`NO_PRODUCER_EPOCH`].
    pub fn producer_epoch(&self) -> i16 {
        i16_at(&self.bytes, PRODUCER_EPOCH)
    }

    /// The first record's sequence, or [`NO_SEQUENCE`].
    pub fn base_sequence(&self) -> i32 {
        i32_at(&self.bytes, BASE_SEQUENCE)
    }

    /// The last record's sequence (wrapping as Kafka does), or [`NO_SEQUENCE`].
    pub fn last_sequence(&self) -> i32 {
        match self.base_sequence() {
            NO_SEQUENCE => NO_SEQUENCE,
            base => add_to_sequence(base, self.last_offset_delta()),
        }
    }

    /// The number of records the batch holds.
    pub fn records_count(&self) -> i32 {
        i32_at(&self.bytes, RECORDS_COUNT)
    }

    /// Checks what a broker needs to serve a batch it did not validate itself (a mirrored one):
    /// a codec Kafka defines, and offsets that do not run backwards.
    pub fn check_servable(&self) -> Result<(), BatchError> {
        self.compression()?;
        let last_offset_delta = self.last_offset_delta();
        if last_offset_delta < 0 {
            return Err(BatchError::NegativeLastOffsetDelta {
                base_offset: self.base_offset(),
                last_offset_delta,
            });
        }
        Ok(())
    }

    /// The records section as stored: compressed when [`Self::compression`] is not none.
    pub fn records(&self) -> Bytes {
        self.bytes.slice(HEADER_SIZE..)
    }
}

impl fmt::Debug for RecordBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset_delta", &self.last_offset_delta())
            .field("partition_leader_epoch", &self.partition_leader_epoch())
            .field("size", &self.size())
            .field("attributes", &self.attributes())
            .field("producer_id", &self.producer_id())
            .field("producer_epoch", &self.producer_epoch())
            .field("base_sequence", &self.base_sequence())
            .field("records_count", &self.records_count())
            .finish()
    }
}

/// Iterates over the complete batches of a buffer, stopping at a partial trailing batch.
#[derive(Debug, Clone)]
pub struct RecordBatches {
    rest: Bytes,
    position: usize,
    failed: bool,
}

impl RecordBatches {
    /// Starts at the beginning of `bytes`.
    pub fn new(bytes: Bytes) -> RecordBatches {
        RecordBatches {
            rest: bytes,
            position: 0,
            failed: false,
        }
    }

    /// Bytes not yielded: after the iterator returned `None`, the partial trailing batch (0 when
    /// the buffer ended on a batch boundary).
    pub fn partial_tail(&self) -> usize {
        self.rest.len()
    }

    /// Byte position of the next batch in the original buffer.
    pub fn position(&self) -> usize {
        self.position
    }
}

impl Iterator for RecordBatches {
    type Item = Result<RecordBatch, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match complete_batch_size(&self.rest, self.position) {
            Ok(Some(size)) => {
                self.position += size;
                Some(Ok(RecordBatch {
                    bytes: self.rest.split_to(size),
                }))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Whole record batches whose framing and CRC were checked, with the bytes they span: what the
/// mirror path appends, so each fetched batch is checked once between the socket and the log.
#[derive(Debug, Clone, Default)]
pub struct CheckedBatches {
    bytes: Bytes,
    batches: Vec<RecordBatch>,
}

impl CheckedBatches {
    /// Checks every whole batch of `records`; a partial batch at the end (what a size-capped
    /// fetch leaves) is not part of the result.
    pub fn check(records: Bytes) -> Result<CheckedBatches, BatchError> {
        let mut batches = Vec::new();
        let mut end = 0;
        for batch in RecordBatches::new(records.clone()) {
            let batch = batch?;
            batch.verify_crc()?;
            end += batch.size();
            batches.push(batch);
        }
        Ok(CheckedBatches {
            bytes: records.slice(..end),
            batches,
        })
    }

    /// Keeps the first `count` batches.
    pub fn truncate(&mut self, count: usize) {
        self.batches.truncate(count);
        let end = self.batches.iter().map(RecordBatch::size).sum();
        self.bytes.truncate(end);
    }

    /// The batches, in order.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// Exactly the bytes of the batches, back to back.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Whether it holds no batch.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// The bytes and the batches.
    pub fn into_parts(self) -> (Bytes, Vec<RecordBatch>) {
        (self.bytes, self.batches)
    }
}

/// A mutable view of one batch's header, for the two fields outside the CRC.
#[derive(Debug)]
pub struct RecordBatchMut<'a> {
    buf: &'a mut [u8],
}

impl RecordBatchMut<'_> {
    fn raw(&self) -> &[u8] {
        self.buf
    }

    header_getters!();

    /// Sets the base offset (the leader assigns offsets on append).
    pub fn set_base_offset(&mut self, offset: i64) {
        self.buf[BASE_OFFSET..BASE_OFFSET + 8].copy_from_slice(&offset.to_be_bytes());
    }

    /// Sets the partition leader epoch (the leader stamps its epoch on append).
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.buf[PARTITION_LEADER_EPOCH..PARTITION_LEADER_EPOCH + 4]
            .copy_from_slice(&epoch.to_be_bytes());
    }
}

/// Calls `f` with a mutable header view of each complete batch in `buf`, in order, and returns
/// the number of bytes those batches span (a partial trailing batch is left untouched).
pub fn rewrite_batches(
    buf: &mut [u8],
    mut f: impl FnMut(&mut RecordBatchMut<'_>),
) -> Result<usize, BatchError> {
    let mut position = 0;
    while let Some(size) = complete_batch_size(&buf[position..], position)? {
        let mut batch = RecordBatchMut {
            buf: &mut buf[position..position + size],
        };
        f(&mut batch);
        position += size;
    }
    Ok(position)
}

pub mod validate;

#[cfg(test)]
mod tests;
