//! Errors of the storage engine, typed so callers map each to the right Kafka error code.

use kmirror_protocol::batch::BatchError;
use std::path::PathBuf;
use thiserror::Error;

/// Why a log operation failed.
#[derive(Debug, Error)]
pub enum StorageError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record log is damaged where cutting it would drop records after the damage (see
    /// [`crate::record_log`]); nothing was changed.
    #[error(
        "{path} is damaged at byte offset {offset} ({damage}){}; refusing to start rather than cut it there: restore the file, or cut it at {offset} by hand to start without the records from there",
        intact_note(.intact_after)
    )]
    CorruptRecordLog {
        path: PathBuf,
        offset: u64,
        damage: Damage,
        intact_after: Option<u64>,
    },
    /// A batch header read to serve a request does not parse (the file was damaged on disk).
    #[error("{path}: the batch at byte {position} is damaged ({reason})")]
    DamagedBatch {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    /// Another broker (process or thread) holds the log directory's `.lock`.
    #[error(
        "log directory {dir} is in use: another broker holds {lock}; two brokers on one directory would overwrite each other's logs"
    )]
    LogDirLocked { dir: PathBuf, lock: PathBuf },
    /// Appended bytes are not valid v2 batches (Kafka: CORRUPT_MESSAGE / INVALID_RECORD).
    #[error("invalid batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// The append holds a partial trailing batch.
    #[error("append holds {0} bytes after its last complete batch")]
    PartialBatch(usize),
    /// The append holds no batch at all.
    #[error("append holds no record batch")]
    EmptyAppend,
    /// An idempotent or transactional produce holds more than one batch.
    #[error("a producer with an id may append one batch at a time, not {0}")]
    MultipleProducerBatches(usize),
    /// A control batch does not hold a valid control record.
    #[error("invalid control batch: {0}")]
    InvalidControl(#[from] kmirror_protocol::records::RecordError),
    /// A client tried to append a control batch through the produce path.
    #[error("control batches cannot be produced")]
    ControlBatchProduced,
    /// A mirrored batch starts before the log end offset.
    #[error(
        "mirrored batch at offset {base_offset} overlaps the log, which ends at {log_end_offset}"
    )]
    OffsetOverlap {
        base_offset: i64,
        log_end_offset: i64,
    },
    /// A mirrored batch leaves a gap after the log end offset where gaps are not allowed.
    #[error(
        "mirrored batch at offset {base_offset} leaves a gap after the log end offset {log_end_offset}"
    )]
    OffsetGap {
        base_offset: i64,
        log_end_offset: i64,
    },
    /// Batches of one append are not in increasing offset order.
    #[error(
        "batch at offset {base_offset} does not follow the previous batch ending at {previous_last_offset}"
    )]
    OffsetsNotIncreasing {
        base_offset: i64,
        previous_last_offset: i64,
    },
    /// A mirrored batch carries a lower leader epoch than the log already holds.
    #[error(
        "batch at offset {base_offset} has leader epoch {epoch}, below the log's latest epoch {latest_epoch}"
    )]
    EpochRegression {
        base_offset: i64,
        epoch: i32,
        latest_epoch: i32,
    },
    /// The producer's epoch is older than the one the log knows (Kafka: INVALID_PRODUCER_EPOCH).
    #[error("producer {producer_id} epoch {epoch} is fenced by epoch {current_epoch}")]
    InvalidProducerEpoch {
        producer_id: i64,
        epoch: i16,
        current_epoch: i16,
    },
    /// A sequence number does not follow the last one (Kafka: OUT_OF_ORDER_SEQUENCE_NUMBER).
    #[error("producer {producer_id} sent sequence {first_sequence}, expected {expected_sequence}")]
    OutOfOrderSequence {
        producer_id: i64,
        first_sequence: i32,
        expected_sequence: i32,
    },
    /// A transaction marker from an older transaction coordinator (Kafka: TRANSACTION_COORDINATOR_FENCED).
    #[error(
        "marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, below {current}"
    )]
    CoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
    /// A read or truncation offset lies outside the log (Kafka: OFFSET_OUT_OF_RANGE).
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// The log was deleted (its topic or partition went) while something still held it.
    #[error("the log in {dir} was deleted")]
    LogDeleted { dir: PathBuf },
    /// A batch could not be encoded.
    #[error("encoding a control batch: {0}")]
    Encode(#[from] kmirror_protocol::codec::CodecError),
}

/// Why the bytes at an offset of a record log ([`crate::record_log`]) are not an intact record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Damage {
    /// Fewer bytes are left than a frame header.
    #[error("{0} bytes left, fewer than a record header")]
    ShortHeader(usize),
    /// The declared length runs past the end of the file.
    #[error("a record of {length} bytes declared, {available} left in the file")]
    PastEnd { length: usize, available: usize },
    /// A zero length, which no append writes (zeroed space reads this way).
    #[error("a record of zero bytes")]
    Empty,
    /// The body does not match its CRC32C.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    /// The checksum holds but the body is not a record this version reads.
    #[error("the checksum holds but the record does not decode: {0}")]
    Undecodable(String),
}

/// How a [`StorageError::CorruptRecordLog`] message says what follows the damage.
fn intact_note(intact_after: &Option<u64>) -> String {
    intact_after.map_or_else(String::new, |at| {
        format!(" and holds an intact record after it, at byte offset {at}")
    })
}

/// Wraps an I/O error with the operation and the file it concerned.
pub(crate) fn io(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> StorageError {
    let path = path.into();
    move |source| StorageError::Io { op, path, source }
}
