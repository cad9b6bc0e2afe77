//! Records kmirror reads and writes inside logs: `__mirror_state` coordinator records, and the
//! control records of partition logs (transaction markers and `MIRROR_PID_RESET`).
//!
//! Coordinator record framing (docs/design.md §8, as Kafka's coordinators frame theirs):
//! key = `[int16 record type][key fields at version 0]`, value = `[int16 version][value fields,
//! flexible]`, and a null value is a tombstone.
//!
//! Control records follow Kafka's layout: a batch with the control attribute holding exactly one
//! uncompressed record whose key is `[int16 version = 0][int16 type]`. Transaction markers
//! (types 0 abort, 1 commit) carry `[int16 version = 0][int32 coordinator epoch]`;
//! `MIRROR_PID_RESET` (type 7) carries `[int16 version][MirrorPidResetRecord, flexible]`. Every
//! reader of a log that meets a PID reset drops all producer state of the partition.

use crate::batch::{self, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, RecordBatch};
use crate::codec::{self, CodecError, WireFormat};
use crate::messages::{
    LastMirrorEpochsKey, LastMirrorEpochsValue, MirrorPartitionStateKey, MirrorPartitionStateValue,
    MirrorPidResetRecord,
};
use bytes::{Buf, Bytes};
use thiserror::Error;

/// Why a stored record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordError {
    /// The key or value bytes are malformed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The key names a coordinator record type this version does not know.
    #[error("unknown coordinator record type {0}")]
    UnknownRecordType(i16),
    /// The value was written with a version this build does not read.
    #[error("{record} value version {version} is not supported")]
    UnsupportedVersion { record: &'static str, version: i16 },
    /// The batch is not a control batch.
    #[error("batch at offset {0} is not a control batch")]
    NotControl(i64),
    /// Control batches are never compressed; this one claims to be.
    #[error("control batch at offset {0} is compressed")]
    CompressedControl(i64),
    /// A `__mirror_state` batch claims compression; kmirror never writes one.
    #[error("__mirror_state batch at offset {0} is compressed")]
    CompressedCoordinatorBatch(i64),
    /// A `__mirror_state` batch's records do not parse.
    #[error("malformed __mirror_state batch at offset {0}")]
    MalformedCoordinatorBatch(i64),
    /// A control batch must hold exactly one record.
    #[error("control batch at offset {base_offset} holds {count} records, not 1")]
    ControlRecordCount { base_offset: i64, count: i32 },
    /// The control record's key or value does not follow the layout of its type.
    #[error("malformed control record at offset {base_offset}: {reason}")]
    MalformedControl {
        base_offset: i64,
        reason: &'static str,
    },
}

/// A `__mirror_state` record, decoded. `None` values are tombstones.
#[derive(Debug, Clone, PartialEq)]
pub enum CoordinatorRecord {
    /// Type 1: the last mirrored epochs of the mirror's partitions that hash to this shard.
    LastMirrorEpochs {
        key: LastMirrorEpochsKey,
        value: Option<LastMirrorEpochsValue>,
    },
    /// Type 2: one mirror partition's state.
    MirrorPartitionState {
        key: MirrorPartitionStateKey,
        value: Option<MirrorPartitionStateValue>,
    },
}

/// `[int16 prefix][value at version]`: the prefix is the record type for keys, the version for
/// values.
fn prefixed<T: WireFormat>(prefix: i16, version: i16, value: &T) -> Result<Bytes, CodecError> {
    let mut out = Vec::with_capacity(2 + value.encoded_size(version)?);
    codec::write_int16(&mut out, prefix);
    value.write(&mut out, version)?;
    Ok(Bytes::from(out))
}

fn value_of<T: WireFormat>(
    value: Option<Bytes>,
    record: &'static str,
    versions: (i16, i16),
) -> Result<Option<T>, RecordError> {
    let Some(mut value) = value else {
        return Ok(None);
    };
    let version = codec::read_int16(&mut value)?;
    if version < versions.0 || version > versions.1 {
        return Err(RecordError::UnsupportedVersion { record, version });
    }
    Ok(Some(T::from_bytes(value, version)?))
}

impl CoordinatorRecord {
    /// The record's key bytes.
    pub fn key_bytes(&self) -> Result<Bytes, CodecError> {
        match self {
            CoordinatorRecord::LastMirrorEpochs { key, .. } => {
                prefixed(LastMirrorEpochsKey::RECORD_TYPE, 0, key)
            }
            CoordinatorRecord::MirrorPartitionState { key, .. } => {
                prefixed(MirrorPartitionStateKey::RECORD_TYPE, 0, key)
            }
        }
    }

    /// The record's value bytes at the newest version, or `None` for a tombstone.
    pub fn value_bytes(&self) -> Result<Option<Bytes>, CodecError> {
        match self {
            CoordinatorRecord::LastMirrorEpochs { value, .. } => value
                .as_ref()
                .map(|v| {
                    let version = LastMirrorEpochsValue::MAX_VERSION;
                    prefixed(version, version, v)
                })
                .transpose(),
            CoordinatorRecord::MirrorPartitionState { value, .. } => value
                .as_ref()
                .map(|v| {
                    let version = MirrorPartitionStateValue::MAX_VERSION;
                    prefixed(version, version, v)
                })
                .transpose(),
        }
    }

    /// Decodes a record from its key and (possibly null) value.
    pub fn decode(mut key: Bytes, value: Option<Bytes>) -> Result<CoordinatorRecord, RecordError> {
        let record_type = codec::read_int16(&mut key)?;
        match record_type {
            LastMirrorEpochsKey::RECORD_TYPE => Ok(CoordinatorRecord::LastMirrorEpochs {
                key: LastMirrorEpochsKey::from_bytes(key, 0)?,
                value: value_of(
                    value,
                    LastMirrorEpochsValue::NAME,
                    (
                        LastMirrorEpochsValue::MIN_VERSION,
                        LastMirrorEpochsValue::MAX_VERSION,
                    ),
                )?,
            }),
            MirrorPartitionStateKey::RECORD_TYPE => Ok(CoordinatorRecord::MirrorPartitionState {
                key: MirrorPartitionStateKey::from_bytes(key, 0)?,
                value: value_of(
                    value,
                    MirrorPartitionStateValue::NAME,
                    (
                        MirrorPartitionStateValue::MIN_VERSION,
                        MirrorPartitionStateValue::MAX_VERSION,
                    ),
                )?,
            }),
            other => Err(RecordError::UnknownRecordType(other)),
        }
    }
}

/// Control record type of an aborting transaction marker.
pub const ABORT: i16 = 0;
/// Control record type of a committing transaction marker.
pub const COMMIT: i16 = 1;
/// Control record type of the producer-state barrier written when a mirror partition stops.
pub const MIRROR_PID_RESET: i16 = 7;

const CONTROL_KEY_VERSION: i16 = 0;
const END_TXN_MARKER_VERSION: i16 = 0;
const CONTROL_ATTRIBUTE: i16 = 0x20;
const TRANSACTIONAL_ATTRIBUTE: i16 = 0x10;

/// A control record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord {
    /// A transaction marker: the producer's ongoing transaction committed or aborted.
    EndTxn {
        commit: bool,
        coordinator_epoch: i32,
    },
    /// The barrier after failover: all producer state before it is dropped.
    MirrorPidReset { source_cluster_id: String },
    /// A control type this crate does not interpret (KRaft's own control records).
    Other { record_type: i16 },
}

/// The batch-level fields of a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBatchHeader {
    /// The offset the control record takes.
    pub base_offset: i64,
    /// The epoch of the leader appending it.
    pub partition_leader_epoch: i32,
    /// The transactional producer whose transaction ends, or [`NO_PRODUCER_ID`].
    pub producer_id: i64,
    /// That producer's epoch, or [`NO_PRODUCER_EPOCH`].
    pub producer_epoch: i16,
    /// The record's timestamp, in ms since the epoch.
    pub timestamp_ms: i64,
}

impl ControlBatchHeader {
    /// A header for a control record no producer wrote (the PID reset barrier).
    pub fn without_producer(
        base_offset: i64,
        partition_leader_epoch: i32,
        timestamp_ms: i64,
    ) -> Self {
        ControlBatchHeader {
            base_offset,
            partition_leader_epoch,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_ms,
        }
    }
}

impl ControlRecord {
    /// The control record type.
    pub fn record_type(&self) -> i16 {
        match self {
            ControlRecord::EndTxn { commit: true, .. } => COMMIT,
            ControlRecord::EndTxn { commit: false, .. } => ABORT,
            ControlRecord::MirrorPidReset { .. } => MIRROR_PID_RESET,
            ControlRecord::Other { record_type } => *record_type,
        }
    }

    fn value_bytes(&self) -> Result<Option<Vec<u8>>, CodecError> {
        let mut value = Vec::new();
        match self {
            ControlRecord::EndTxn {
                coordinator_epoch, ..
            } => {
                codec::write_int16(&mut value, END_TXN_MARKER_VERSION);
                codec::write_int32(&mut value, *coordinator_epoch);
            }
            ControlRecord::MirrorPidReset { source_cluster_id } => {
                let record = MirrorPidResetRecord {
                    source_cluster_id: source_cluster_id.clone(),
                    ..MirrorPidResetRecord::default()
                };
                codec::write_int16(&mut value, MirrorPidResetRecord::MAX_VERSION);
                record.write(&mut value, MirrorPidResetRecord::MAX_VERSION)?;
            }
            ControlRecord::Other { .. } => return Ok(None),
        }
        Ok(Some(value))
    }

    /// Builds the complete v2 batch holding this control record, CRC included. Transaction
    /// markers carry the transactional attribute; the PID reset does not.
    pub fn to_batch(&self, header: &ControlBatchHeader) -> Result<Bytes, CodecError> {
        let mut key = Vec::with_capacity(4);
        codec::write_int16(&mut key, CONTROL_KEY_VERSION);
        codec::write_int16(&mut key, self.record_type());
        let value = self.value_bytes()?;
        let attributes = match self {
            ControlRecord::EndTxn { .. } => CONTROL_ATTRIBUTE | TRANSACTIONAL_ATTRIBUTE,
            _ => CONTROL_ATTRIBUTE,
        };
        encode_batch(
            header,
            attributes,
            &[(Some(Bytes::from(key)), value.map(Bytes::from))],
        )
    }

    /// Reads the control record of a control batch.
    pub fn parse(batch: &RecordBatch) -> Result<ControlRecord, RecordError> {
        let base_offset = batch.base_offset();
        if !batch.is_control() {
            return Err(RecordError::NotControl(base_offset));
        }
        if !matches!(batch.compression(), Ok(batch::Compression::None)) {
            return Err(RecordError::CompressedControl(base_offset));
        }
        if batch.records_count() != 1 {
            return Err(RecordError::ControlRecordCount {
                base_offset,
                count: batch.records_count(),
            });
        }
        let malformed = |reason| RecordError::MalformedControl {
            base_offset,
            reason,
        };
        let mut r = batch.records();
        let length = codec::read_varint(&mut r)?;
        if length < 0 || length as usize > r.remaining() {
            return Err(malformed("record length exceeds the batch"));
        }
        let _attributes = codec::read_int8(&mut r)?;
        let _timestamp_delta = codec::read_varlong(&mut r)?;
        let _offset_delta = codec::read_varint(&mut r)?;
        let mut key = read_record_field(&mut r)?.ok_or_else(|| malformed("null key"))?;
        let value = read_record_field(&mut r)?;
        if key.remaining() < 4 {
            return Err(malformed("key shorter than version and type"));
        }
        let key_version = key.get_i16();
        if key_version != CONTROL_KEY_VERSION {
            return Err(malformed("unknown control key version"));
        }
        let record_type = key.get_i16();
        match record_type {
            ABORT | COMMIT => {
                let mut value =
                    value.ok_or_else(|| malformed("transaction marker without value"))?;
                let version = codec::read_int16(&mut value)?;
                if version != END_TXN_MARKER_VERSION {
                    return Err(malformed("unknown transaction marker version"));
                }
                Ok(ControlRecord::EndTxn {
                    commit: record_type == COMMIT,
                    coordinator_epoch: codec::read_int32(&mut value)?,
                })
            }
            MIRROR_PID_RESET => {
                let mut value = value.ok_or_else(|| malformed("PID reset without value"))?;
                let version = codec::read_int16(&mut value)?;
                if !(MirrorPidResetRecord::MIN_VERSION..=MirrorPidResetRecord::MAX_VERSION)
                    .contains(&version)
                {
                    return Err(malformed("unknown PID reset version"));
                }
                // Newer versions may append fields; read what this version knows.
                let record = MirrorPidResetRecord::read(&mut value, version)?;
                Ok(ControlRecord::MirrorPidReset {
                    source_cluster_id: record.source_cluster_id,
                })
            }
            other => Ok(ControlRecord::Other { record_type: other }),
        }
    }
}

/// Reads a record's varint-prefixed key or value; length -1 is null.
fn read_record_field(r: &mut Bytes) -> Result<Option<Bytes>, CodecError> {
    let len = codec::read_varint(r)?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if r.remaining() < len {
        return Err(CodecError::Truncated {
            needed: len,
            remaining: r.remaining(),
        });
    }
    Ok(Some(r.split_to(len)))
}

#[cfg(test)]
mod tests;

/// A complete uncompressed v2 batch of `records` (key, value), CRC included: one record per
/// entry, offset deltas 0, 1, ...
fn encode_batch(
    header: &ControlBatchHeader,
    attributes: i16,
    records: &[(Option<Bytes>, Option<Bytes>)],
) -> Result<Bytes, CodecError> {
    let too_long = || CodecError::TooLong("record batch");
    let mut encoded = Vec::new();
    for (delta, (key, value)) in records.iter().enumerate() {
        let mut body = Vec::new();
        codec::write_int8(&mut body, 0); // record attributes
        codec::write_varlong(&mut body, 0); // timestamp delta
        codec::write_varint(&mut body, i32::try_from(delta).map_err(|_| too_long())?);
        for field in [key, value] {
            match field {
                Some(bytes) => {
                    codec::write_varint(
                        &mut body,
                        i32::try_from(bytes.len()).map_err(|_| too_long())?,
                    );
                    body.extend_from_slice(bytes);
                }
                None => codec::write_varint(&mut body, -1),
            }
        }
        codec::write_varint(&mut body, 0); // headers
        codec::write_varint(
            &mut encoded,
            i32::try_from(body.len()).map_err(|_| too_long())?,
        );
        encoded.extend_from_slice(&body);
    }
    let count = i32::try_from(records.len()).map_err(|_| too_long())?;
    let size = batch::HEADER_SIZE + encoded.len();
    let mut out = Vec::with_capacity(size);
    codec::write_int64(&mut out, header.base_offset);
    codec::write_int32(
        &mut out,
        i32::try_from(size - batch::LOG_OVERHEAD).map_err(|_| too_long())?,
    );
    codec::write_int32(&mut out, header.partition_leader_epoch);
    codec::write_int8(&mut out, batch::MAGIC_V2);
    codec::write_uint32(&mut out, 0); // CRC, filled below
    let crc_start = out.len();
    codec::write_int16(&mut out, attributes);
    codec::write_int32(&mut out, (count - 1).max(0)); // last offset delta
    codec::write_int64(&mut out, header.timestamp_ms);
    codec::write_int64(&mut out, header.timestamp_ms);
    codec::write_int64(&mut out, header.producer_id);
    codec::write_int16(&mut out, header.producer_epoch);
    codec::write_int32(&mut out, NO_SEQUENCE);
    codec::write_int32(&mut out, count);
    out.extend_from_slice(&encoded);
    let crc = crc32c::crc32c(&out[crc_start..]);
    out[crc_start - 4..crc_start].copy_from_slice(&crc.to_be_bytes());
    Ok(Bytes::from(out))
}

/// One record's key and value (each may be null).
pub type KeyValue = (Option<Bytes>, Option<Bytes>);

/// An uncompressed batch of `records` written by a leader itself (no producer), as the
/// coordinators' internal topics hold them.
pub fn leader_batch(
    records: &[KeyValue],
    partition_leader_epoch: i32,
    timestamp_ms: i64,
) -> Result<Bytes, CodecError> {
    let header = ControlBatchHeader::without_producer(0, partition_leader_epoch, timestamp_ms);
    encode_batch(&header, 0, records)
}

/// The records of one uncompressed batch, in order: what [`leader_batch`] wrote.
pub fn leader_batch_records(batch: &RecordBatch) -> Result<Vec<KeyValue>, RecordError> {
    let base_offset = batch.base_offset();
    if !matches!(batch.compression(), Ok(batch::Compression::None)) {
        return Err(RecordError::CompressedCoordinatorBatch(base_offset));
    }
    let mut r = batch.records();
    let mut out = Vec::new();
    for _ in 0..batch.records_count() {
        let length = codec::read_varint(&mut r)?;
        if length < 0 || length as usize > r.remaining() {
            return Err(RecordError::MalformedCoordinatorBatch(base_offset));
        }
        let mut record = r.split_to(length as usize);
        let _attributes = codec::read_int8(&mut record)?;
        let _timestamp_delta = codec::read_varlong(&mut record)?;
        let _offset_delta = codec::read_varint(&mut record)?;
        let key = read_record_field(&mut record)?;
        let value = read_record_field(&mut record)?;
        out.push((key, value));
    }
    Ok(out)
}

/// An uncompressed batch of coordinator records written by a leader itself (no producer), as
/// `__mirror_state` holds them.
pub fn coordinator_batch(
    records: &[CoordinatorRecord],
    partition_leader_epoch: i32,
    timestamp_ms: i64,
) -> Result<Bytes, CodecError> {
    let pairs = records
        .iter()
        .map(|r| Ok((Some(r.key_bytes()?), r.value_bytes()?)))
        .collect::<Result<Vec<_>, CodecError>>()?;
    leader_batch(&pairs, partition_leader_epoch, timestamp_ms)
}

/// The coordinator records of one uncompressed `__mirror_state` batch, in order.
pub fn coordinator_records(batch: &RecordBatch) -> Result<Vec<CoordinatorRecord>, RecordError> {
    leader_batch_records(batch)?
        .into_iter()
        .map(|(key, value)| {
            let key = key.ok_or(RecordError::MalformedCoordinatorBatch(batch.base_offset()))?;
            CoordinatorRecord::decode(key, value)
        })
        .collect()
}
