//! Builders of real record batches for tests and benchmarks of other crates (feature
//! `test-util`). Batches are encoded by kafka-protocol's encoder, an implementation independent
//! of this crate's views, so tests check our reading of Kafka's format rather than our own writing.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// What a test batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Leader epoch stamped in the header.
    pub partition_leader_epoch: i32,
    /// Producer id, or -1.
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence of the first record, or -1.
    pub base_sequence: i32,
    /// Whether a transactional producer wrote it.
    pub transactional: bool,
    /// How many records.
    pub records: usize,
    /// Bytes of each record's value.
    pub value_size: usize,
    /// Timestamp of the first record; each next record is 1 ms later.
    pub timestamp_ms: i64,
    /// Codec of the records section.
    pub compression: Compression,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_offset: 0,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            records: 1,
            value_size: 16,
            timestamp_ms: 1_700_000_000_000,
            compression: Compression::None,
        }
    }
}

impl BatchSpec {
    /// Encodes the batch.
    pub fn build(&self) -> Bytes {
        let records: Vec<Record> = (0..self.records as i64)
            .map(|i| Record {
                transactional: self.transactional,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: self.partition_leader_epoch,
                producer_id: self.producer_id,
                producer_epoch: self.producer_epoch,
                timestamp_type: TimestampType::Creation,
                offset: self.base_offset + i,
                // kafka-protocol batches consecutive records whose offset minus sequence is
                // constant and takes the first record's sequence as the base sequence, so
                // sequence-less records count up from -1.
                sequence: if self.base_sequence < 0 {
                    i as i32 - 1
                } else {
                    self.base_sequence.wrapping_add(i as i32)
                },
                timestamp: self.timestamp_ms + i,
                // Independent of the base offset, so a batch rebuilt at the offset a leader
                // assigned is byte-identical to the one a client sent.
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(vec![b'v'; self.value_size])),
                headers: Default::default(),
            })
            .collect();
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: self.compression,
        };
        RecordBatchEncoder::encode(&mut out, &records, &options)
            .expect("kafka-protocol encodes any well-formed record list");
        out.freeze()
    }
}

/// Default batches of `per_batch` records each, back to back, covering offsets `from` to `to`
/// (as a source's answer holds them).
pub fn batch_run(from: i64, to: i64, per_batch: usize) -> Bytes {
    let mut out = BytesMut::new();
    for base in (from..to).step_by(per_batch.max(1)) {
        out.extend_from_slice(
            &BatchSpec {
                base_offset: base,
                records: per_batch,
                ..BatchSpec::default()
            }
            .build(),
        );
    }
    out.freeze()
}
