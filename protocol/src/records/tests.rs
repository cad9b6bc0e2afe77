use super::*;
use crate::batch::{RecordBatch, RecordBatches};
use crate::messages::{MirrorPartitionStateValue, last_mirror_epochs_value};
use crate::state::MirrorState;
use kafka_protocol::records::RecordBatchDecoder;
use uuid::Uuid;

fn lme_record() -> CoordinatorRecord {
    let partitions = [(0, 5), (1, 7)]
        .into_iter()
        .map(
            |(partition_index, last_mirror_epoch)| last_mirror_epochs_value::Partition {
                partition_index,
                last_mirror_epoch,
                ..Default::default()
            },
        )
        .collect();
    CoordinatorRecord::LastMirrorEpochs {
        key: LastMirrorEpochsKey {
            mirror_name: "dr".into(),
        },
        value: Some(LastMirrorEpochsValue {
            topics: vec![last_mirror_epochs_value::Topic {
                name: "t".into(),
                partitions,
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

#[test]
fn last_mirror_epochs_golden_bytes() {
    let record = lme_record();
    // Key: record type 1, then MirrorName as a classic (non-flexible) string.
    const KEY: &[u8] = &[0x00, 0x01, 0x00, 0x02, b'd', b'r'];
    const VALUE: &[u8] = &[
        0x00, 0x00, // value version 0
        0x02, // Topics: compact array of 1
        0x02, b't', // Name
        0x03, // Partitions: compact array of 2
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, // 0 -> 5, no tagged fields
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, // 1 -> 7, no tagged fields
        0x00, // topic tagged fields
        0x00, // value tagged fields
    ];
    assert_eq!(&record.key_bytes().expect("encodes")[..], KEY);
    assert_eq!(
        record.value_bytes().expect("encodes").as_deref(),
        Some(VALUE)
    );
    assert_eq!(
        CoordinatorRecord::decode(Bytes::from_static(KEY), Some(Bytes::from_static(VALUE))),
        Ok(record)
    );
}

#[test]
fn partition_state_records_and_tombstones_round_trip() {
    let key = MirrorPartitionStateKey {
        mirror_name: "dr".into(),
        topic_id: Uuid::from_u128(7),
        partition: 3,
    };
    let value = MirrorPartitionStateValue {
        state: MirrorState::Failed.wire_value(),
        previous_state: MirrorState::Mirroring.wire_value(),
        retry_attempt: 2,
        error_message: Some("source unreachable".into()),
        leader_epoch: 4,
        ..Default::default()
    };
    for value in [Some(value), None] {
        let record = CoordinatorRecord::MirrorPartitionState {
            key: key.clone(),
            value,
        };
        let k = record.key_bytes().expect("encodes");
        assert_eq!(&k[..2], &[0x00, 0x02]);
        let v = record.value_bytes().expect("encodes");
        assert_eq!(CoordinatorRecord::decode(k, v), Ok(record));
    }
}

#[test]
fn unknown_types_and_versions_are_errors() {
    assert_eq!(
        CoordinatorRecord::decode(Bytes::from_static(&[0x00, 0x09, 0x00]), None),
        Err(RecordError::UnknownRecordType(9))
    );
    assert_eq!(
        CoordinatorRecord::decode(
            Bytes::from_static(&[0x00, 0x01, 0x00, 0x01, b'm']),
            Some(Bytes::from_static(&[0x00, 0x03, 0x01, 0x00]))
        ),
        Err(RecordError::UnsupportedVersion {
            record: "LastMirrorEpochsValue",
            version: 3
        })
    );
    assert!(matches!(
        CoordinatorRecord::decode(Bytes::from_static(&[0x00]), None),
        Err(RecordError::Codec(_))
    ));
}

/// A COMMIT marker written out field by field from Kafka's record batch and control record
/// specs; the CRC was computed by an independent CRC-32C implementation.
const COMMIT_MARKER: &[u8] = &[
    0, 0, 0, 0, 0, 0, 0, 42, // base offset
    0, 0, 0, 66, // batch length: 78 - 12
    0, 0, 0, 5, // partition leader epoch
    2, // magic
    0x74, 0x47, 0x1a, 0x4e, // CRC-32C of everything after it
    0x00, 0x30, // attributes: control | transactional, no compression
    0, 0, 0, 0, // last offset delta
    0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // base timestamp 1700000000000
    0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // max timestamp
    0, 0, 0, 0, 0, 0, 0x03, 0xe8, // producer id 1000
    0, 2, // producer epoch
    0xff, 0xff, 0xff, 0xff, // base sequence -1
    0, 0, 0, 1,    // one record
    0x20, // record length 16 (zig-zag)
    0x00, // record attributes
    0x00, // timestamp delta
    0x00, // offset delta
    0x08, 0, 0, 0, 1, // key length 4: version 0, type 1 (COMMIT)
    0x0c, 0, 0, 0, 0, 0, 9,    // value length 6: version 0, coordinator epoch 9
    0x00, // no headers
];

fn marker_header() -> ControlBatchHeader {
    ControlBatchHeader {
        base_offset: 42,
        partition_leader_epoch: 5,
        producer_id: 1000,
        producer_epoch: 2,
        timestamp_ms: 1_700_000_000_000,
    }
}

#[test]
fn transaction_marker_matches_the_hand_built_batch() {
    let marker = ControlRecord::EndTxn {
        commit: true,
        coordinator_epoch: 9,
    };
    let built = marker.to_batch(&marker_header()).expect("builds");
    assert_eq!(&built[..], COMMIT_MARKER);

    let batch = RecordBatch::new(Bytes::from_static(COMMIT_MARKER)).expect("one batch");
    assert_eq!(batch.verify_crc(), Ok(()));
    assert!(batch.is_control() && batch.is_transactional());
    assert_eq!(ControlRecord::parse(&batch), Ok(marker));

    // kafka-protocol's decoder (its own CRC check) sees the same record.
    let mut wire = Bytes::from_static(COMMIT_MARKER);
    let set = RecordBatchDecoder::decode(&mut wire).expect("kafka-protocol decodes");
    let record = &set.records[0];
    assert!(record.control && record.transactional);
    assert_eq!(
        (record.offset, record.producer_id, record.producer_epoch),
        (42, 1000, 2)
    );
    assert_eq!(record.key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
    assert_eq!(record.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 9][..]));
}

#[test]
fn abort_marker_and_pid_reset_round_trip() {
    for record in [
        ControlRecord::EndTxn {
            commit: false,
            coordinator_epoch: -1,
        },
        ControlRecord::MirrorPidReset {
            source_cluster_id: "Kq8n3bW1TvG0lB4zZ2c9xA".into(),
        },
    ] {
        let header = match record {
            ControlRecord::MirrorPidReset { .. } => {
                ControlBatchHeader::without_producer(77, 12, 1_700_000_000_000)
            }
            _ => marker_header(),
        };
        let bytes = record.to_batch(&header).expect("builds");
        let batch = RecordBatches::new(bytes.clone())
            .next()
            .expect("a batch")
            .expect("valid");
        assert_eq!(batch.verify_crc(), Ok(()));
        assert_eq!(batch.base_offset(), header.base_offset);
        assert_eq!(batch.producer_id(), header.producer_id);
        assert_eq!(
            batch.is_transactional(),
            matches!(record, ControlRecord::EndTxn { .. })
        );
        assert_eq!(ControlRecord::parse(&batch).as_ref(), Ok(&record));
        let mut wire = bytes;
        let set = RecordBatchDecoder::decode(&mut wire).expect("kafka-protocol decodes");
        let key = set.records[0].key.clone().expect("control key");
        assert_eq!(&key[2..4], &record.record_type().to_be_bytes());
    }
}

#[test]
fn parse_rejects_what_is_not_a_control_record() {
    let marker = Bytes::from_static(COMMIT_MARKER);
    let mut data = COMMIT_MARKER.to_vec();
    data[22] = 0x00; // clear the control attribute
    let plain = RecordBatch::new(Bytes::from(data)).expect("framed");
    assert_eq!(
        ControlRecord::parse(&plain),
        Err(RecordError::NotControl(42))
    );

    let mut data = marker.to_vec();
    data[22] = 0x33; // lz4
    let compressed = RecordBatch::new(Bytes::from(data)).expect("framed");
    assert_eq!(
        ControlRecord::parse(&compressed),
        Err(RecordError::CompressedControl(42))
    );

    let mut data = marker.to_vec();
    data[67] = 0x01; // key version 1
    let bad_key = RecordBatch::new(Bytes::from(data)).expect("framed");
    assert!(matches!(
        ControlRecord::parse(&bad_key),
        Err(RecordError::MalformedControl { .. })
    ));

    let mut data = marker.to_vec();
    data[61] = 0x7e; // record length beyond the batch
    let long = RecordBatch::new(Bytes::from(data)).expect("framed");
    assert!(ControlRecord::parse(&long).is_err());
}

#[test]
fn coordinator_batches_round_trip_and_kafka_reads_them() {
    let tombstone = CoordinatorRecord::MirrorPartitionState {
        key: MirrorPartitionStateKey {
            mirror_name: "dr".into(),
            topic_id: Uuid::from_u128(9),
            partition: 1,
        },
        value: None,
    };
    let records = vec![lme_record(), tombstone];
    let bytes = coordinator_batch(&records, 6, 1_700_000_000_000).expect("encodes");
    let batch = RecordBatch::new(bytes.clone()).expect("a batch");
    batch.verify_crc().expect("CRC");
    assert_eq!(batch.records_count(), 2);
    assert_eq!(batch.last_offset(), 1);
    assert_eq!(batch.partition_leader_epoch(), 6);
    assert!(!batch.is_control() && !batch.is_transactional());
    assert_eq!(coordinator_records(&batch).expect("decodes"), records);
    // Kafka's own decoder reads the same two records.
    let mut buf = bytes.clone();
    let decoded = RecordBatchDecoder::decode(&mut buf).expect("kafka-protocol decodes");
    let keys: Vec<_> = decoded.records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        records
            .iter()
            .map(|r| Some(r.key_bytes().expect("key")))
            .collect::<Vec<_>>()
    );
    assert!(decoded.records[1].value.is_none(), "the tombstone");
}
