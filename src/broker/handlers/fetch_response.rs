//! The Fetch response (versions 4-16) encoded as a list of chunks: the fields go into small
//! buffers and each partition's record batches stay the segment file range the log answered,
//! so the records are never read into the broker's memory (the listener writes the chunks one
//! after another, the ranges from the page cache). The bytes are exactly kafka-protocol's
//! encoding of the same response (tested).
//!
//! Only what this broker answers is representable: no throttling, no `CurrentLeader`, no
//! `SnapshotId`, no preferred read replica, no node endpoints.

use crate::storage::Records;
use bytes::BytesMut;
use kmirror_protocol::codec::{
    CodecError, write_array_len, write_int16, write_int32, write_int64, write_string,
    write_tagged_fields, write_unsigned_varint, write_uuid,
};
use uuid::Uuid;

/// First version with compact strings, arrays and tagged fields.
const FIRST_FLEXIBLE: i16 = 12;
/// First version naming topics by id.
const FIRST_TOPIC_ID: i16 = 13;
/// Tag of `DivergingEpoch` in a partition.
const DIVERGING_EPOCH_TAG: i32 = 0;

/// A Fetch response.
#[derive(Debug, Clone, Default)]
pub(super) struct FetchAnswer {
    /// The top-level error (v7+).
    pub(super) error_code: i16,
    /// The fetch session (v7+); 0: none.
    pub(super) session_id: i32,
    /// Per topic.
    pub(super) topics: Vec<TopicAnswer>,
}

/// One topic of a Fetch response.
#[derive(Debug, Clone, Default)]
pub(super) struct TopicAnswer {
    /// The name (versions before 13).
    pub(super) name: String,
    /// The id (version 13 on).
    pub(super) topic_id: Uuid,
    /// Per partition.
    pub(super) partitions: Vec<PartitionAnswer>,
}

/// One partition of a Fetch response.
#[derive(Debug, Clone)]
pub(super) struct PartitionAnswer {
    pub(super) index: i32,
    pub(super) error_code: i16,
    pub(super) high_watermark: i64,
    pub(super) last_stable_offset: i64,
    pub(super) log_start_offset: i64,
    /// `(epoch, end offset)` where the fetcher's history left ours (v12+).
    pub(super) diverging_epoch: Option<(i32, i64)>,
    /// `(producer id, first offset)` of aborted transactions, for READ_COMMITTED.
    pub(super) aborted_transactions: Option<Vec<(i64, i64)>>,
    /// Whole record batches as stored.
    pub(super) records: Option<Records>,
}

impl PartitionAnswer {
    /// A partition answer with nothing known yet.
    pub(super) fn new(index: i32) -> PartitionAnswer {
        PartitionAnswer {
            index,
            error_code: 0,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            diverging_epoch: None,
            aborted_transactions: None,
            records: None,
        }
    }

    /// The same answer with `error_code`.
    pub(super) fn with_error(mut self, error_code: i16) -> PartitionAnswer {
        self.error_code = error_code;
        self
    }
}

impl FetchAnswer {
    /// The response at `version` as chunks to write in order.
    pub(super) fn encode(&self, version: i16) -> Result<Vec<Records>, CodecError> {
        let flexible = version >= FIRST_FLEXIBLE;
        let mut chunks = Vec::new();
        let mut out = BytesMut::new();
        write_int32(&mut out, 0); // throttle_time_ms
        if version >= 7 {
            write_int16(&mut out, self.error_code);
            write_int32(&mut out, self.session_id);
        }
        write_array_len(&mut out, Some(self.topics.len()), flexible)?;
        for topic in &self.topics {
            if version >= FIRST_TOPIC_ID {
                write_uuid(&mut out, &topic.topic_id);
            } else {
                write_string(&mut out, &topic.name, flexible)?;
            }
            write_array_len(&mut out, Some(topic.partitions.len()), flexible)?;
            for partition in &topic.partitions {
                partition.encode_fields(&mut out, version)?;
                match &partition.records {
                    // Empty, not null, as Kafka sends with an error: librdkafka refuses null.
                    None => write_records_len(&mut out, 0, flexible)?,
                    Some(records) => {
                        write_records_len(&mut out, records.len(), flexible)?;
                        chunks.push(Records::Bytes(out.split().freeze()));
                        chunks.push(records.clone());
                    }
                }
                if flexible {
                    partition.encode_tagged_fields(&mut out)?;
                }
            }
            if flexible {
                write_tagged_fields(&mut out, &[])?;
            }
        }
        if flexible {
            write_tagged_fields(&mut out, &[])?;
        }
        chunks.push(Records::Bytes(out.freeze()));
        Ok(chunks)
    }
}

fn write_records_len(out: &mut BytesMut, len: usize, flexible: bool) -> Result<(), CodecError> {
    if flexible {
        let len = u32::try_from(len + 1).map_err(|_| CodecError::TooLong("records"))?;
        write_unsigned_varint(out, len);
    } else {
        let len = i32::try_from(len).map_err(|_| CodecError::TooLong("records"))?;
        write_int32(out, len);
    }
    Ok(())
}

impl PartitionAnswer {
    /// Everything before the records.
    fn encode_fields(&self, out: &mut BytesMut, version: i16) -> Result<(), CodecError> {
        let flexible = version >= FIRST_FLEXIBLE;
        write_int32(out, self.index);
        write_int16(out, self.error_code);
        write_int64(out, self.high_watermark);
        write_int64(out, self.last_stable_offset);
        if version >= 5 {
            write_int64(out, self.log_start_offset);
        }
        match &self.aborted_transactions {
            None => write_array_len(out, None, flexible)?,
            Some(aborted) => {
                write_array_len(out, Some(aborted.len()), flexible)?;
                for (producer_id, first_offset) in aborted {
                    write_int64(out, *producer_id);
                    write_int64(out, *first_offset);
                    if flexible {
                        write_tagged_fields(out, &[])?;
                    }
                }
            }
        }
        if version >= 11 {
            write_int32(out, -1); // preferred_read_replica
        }
        Ok(())
    }

    /// The partition's tagged fields (v12+): `DivergingEpoch` when there is one.
    fn encode_tagged_fields(&self, out: &mut BytesMut) -> Result<(), CodecError> {
        match self.diverging_epoch {
            None => write_tagged_fields(out, &[]),
            Some((epoch, end_offset)) => {
                let mut value = Vec::with_capacity(13);
                write_int32(&mut value, epoch);
                write_int64(&mut value, end_offset);
                write_tagged_fields(&mut value, &[])?;
                write_tagged_fields(out, &[(DIVERGING_EPOCH_TAG, &value)])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use kmirror_protocol::errors::ErrorCode;
    use proptest::prelude::*;

    /// The same response as kafka-protocol's type.
    fn as_kafka(answer: &FetchAnswer, version: i16) -> FetchResponse {
        let topics = answer
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut data = PartitionData::default()
                            .with_partition_index(p.index)
                            .with_error_code(p.error_code)
                            .with_high_watermark(p.high_watermark)
                            .with_last_stable_offset(p.last_stable_offset)
                            .with_log_start_offset(p.log_start_offset)
                            .with_preferred_read_replica(BrokerId(-1))
                            .with_records(Some(
                                p.records
                                    .as_ref()
                                    .map_or_else(Bytes::new, |r| r.to_bytes().expect("in memory")),
                            ))
                            .with_aborted_transactions(p.aborted_transactions.as_ref().map(|a| {
                                a.iter()
                                    .map(|(id, first)| {
                                        AbortedTransaction::default()
                                            .with_producer_id(ProducerId(*id))
                                            .with_first_offset(*first)
                                    })
                                    .collect()
                            }));
                        if let Some((epoch, end)) = p.diverging_epoch {
                            data = data.with_diverging_epoch(
                                EpochEndOffset::default()
                                    .with_epoch(epoch)
                                    .with_end_offset(end),
                            );
                        }
                        data
                    })
                    .collect();
                let entry = FetchableTopicResponse::default().with_partitions(partitions);
                if version >= FIRST_TOPIC_ID {
                    entry.with_topic_id(t.topic_id)
                } else {
                    entry.with_topic(TopicName(StrBytes::from_string(t.name.clone())))
                }
            })
            .collect();
        let mut response = FetchResponse::default().with_responses(topics);
        if version >= 7 {
            response = response
                .with_error_code(answer.error_code)
                .with_session_id(answer.session_id);
        }
        response
    }

    fn partition() -> impl Strategy<Value = PartitionAnswer> {
        (
            (
                0..100i32,
                prop_oneof![
                    Just(0i16),
                    Just(ErrorCode::OFFSET_OUT_OF_RANGE.0),
                    Just(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0)
                ],
            ),
            (-1..1_000_000i64, -1..1_000_000i64, -1..1_000i64),
            proptest::option::of((0..50i32, 0..100_000i64)),
            proptest::option::of(proptest::collection::vec((0..9i64, 0..99i64), 0..3)),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
        )
            .prop_map(
                |((index, error_code), (hw, lso, start), diverging, aborted, records)| {
                    PartitionAnswer {
                        index,
                        error_code,
                        high_watermark: hw,
                        last_stable_offset: lso,
                        log_start_offset: start,
                        diverging_epoch: diverging,
                        aborted_transactions: aborted,
                        records: records.map(|r| Records::Bytes(Bytes::from(r))),
                    }
                },
            )
    }

    fn answer() -> impl Strategy<Value = FetchAnswer> {
        let topic = (
            "[a-z]{1,12}",
            any::<u128>(),
            proptest::collection::vec(partition(), 0..4),
        )
            .prop_map(|(name, id, partitions)| TopicAnswer {
                name,
                topic_id: Uuid::from_u128(id),
                partitions,
            });
        (
            prop_oneof![Just(0i16), Just(ErrorCode::FETCH_SESSION_ID_NOT_FOUND.0)],
            0..3i32,
            proptest::collection::vec(topic, 0..3),
        )
            .prop_map(|(error_code, session_id, topics)| FetchAnswer {
                error_code,
                session_id,
                topics,
            })
    }

    proptest! {
        #[test]
        fn chunks_are_kafka_protocols_encoding(answer in answer(), version in 4i16..=16) {
            // Fields a version cannot carry are left at their defaults, as the handler does.
            let mut answer = answer;
            if version < 7 {
                answer.error_code = 0;
                answer.session_id = 0;
            }
            for p in answer.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                if version < 12 {
                    p.diverging_epoch = None;
                }
                if version < 5 {
                    p.log_start_offset = -1;
                }
            }
            let ours: Vec<u8> = answer
                .encode(version)
                .expect("encodes")
                .iter()
                .flat_map(|c| c.to_bytes().expect("in memory"))
                .collect();
            let mut theirs = BytesMut::new();
            as_kafka(&answer, version).encode(&mut theirs, version).expect("encodes");
            prop_assert_eq!(ours, theirs.to_vec());
        }
    }

    #[test]
    fn records_are_chunks_of_their_own() {
        let records = Bytes::from_static(b"batches as stored");
        let answer = FetchAnswer {
            topics: vec![TopicAnswer {
                name: "t".to_string(),
                topic_id: Uuid::nil(),
                partitions: vec![PartitionAnswer {
                    records: Some(Records::Bytes(records.clone())),
                    ..PartitionAnswer::new(0)
                }],
            }],
            ..FetchAnswer::default()
        };
        let chunks = answer.encode(16).expect("encodes");
        let shared = chunks
            .iter()
            .find_map(|c| match c {
                Records::Bytes(b) if *b == records => Some(b),
                _ => None,
            })
            .expect("the records are one chunk");
        assert_eq!(shared.as_ptr(), records.as_ptr(), "not copied");
    }
}
