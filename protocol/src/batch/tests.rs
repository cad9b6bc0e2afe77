use super::*;
use bytes::BytesMut;
use kafka_protocol::records::{
    Compression as KpCompression, Record, RecordBatchDecoder, RecordBatchEncoder,
    RecordEncodeOptions, TimestampType as KpTimestampType,
};
use proptest::prelude::*;

const CODECS: [(KpCompression, Compression); 5] = [
    (KpCompression::None, Compression::None),
    (KpCompression::Gzip, Compression::Gzip),
    (KpCompression::Snappy, Compression::Snappy),
    (KpCompression::Lz4, Compression::Lz4),
    (KpCompression::Zstd, Compression::Zstd),
];

fn record(offset: i64, sequence: i32, control: bool) -> Record {
    Record {
        transactional: control,
        control,
        delete_horizon: false,
        partition_leader_epoch: 7,
        producer_id: 42,
        producer_epoch: 3,
        timestamp_type: KpTimestampType::Creation,
        offset,
        sequence,
        timestamp: 1_700_000_000_000 + offset,
        key: Some(Bytes::from(format!("key-{offset}"))),
        value: Some(Bytes::from(vec![b'v'; 100])),
        headers: Default::default(),
    }
}

/// One batch of `count` records starting at `base`, encoded by kafka-protocol.
fn encode(base: i64, count: i64, codec: KpCompression) -> Bytes {
    let records: Vec<Record> = (base..base + count)
        .map(|o| record(o, 10 + (o - base) as i32, false))
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: codec,
        },
    )
    .expect("kafka-protocol encodes");
    buf.freeze()
}

#[test]
fn reads_every_header_field_for_every_codec() {
    for (kp, ours) in CODECS {
        let bytes = encode(100, 5, kp);
        let mut iter = RecordBatches::new(bytes.clone());
        let batch = iter.next().expect("one batch").expect("valid");
        assert!(iter.next().is_none());
        assert_eq!(iter.partial_tail(), 0);

        assert_eq!(batch.compression(), Ok(ours));
        assert_eq!(batch.base_offset(), 100);
        assert_eq!(batch.last_offset_delta(), 4);
        assert_eq!((batch.last_offset(), batch.next_offset()), (104, 105));
        assert_eq!(batch.records_count(), 5);
        assert_eq!(batch.partition_leader_epoch(), 7);
        assert_eq!(batch.magic(), 2);
        assert_eq!(batch.producer_id(), 42);
        assert_eq!(batch.producer_epoch(), 3);
        assert_eq!((batch.base_sequence(), batch.last_sequence()), (10, 14));
        assert_eq!(batch.base_timestamp(), 1_700_000_000_100);
        assert_eq!(batch.max_timestamp(), 1_700_000_000_104);
        assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
        assert!(!batch.is_control() && !batch.is_transactional() && !batch.has_delete_horizon());
        assert_eq!(batch.batch_length() as usize + LOG_OVERHEAD, bytes.len());
        assert_eq!(batch.verify_crc(), Ok(()));
        // Zero-copy: the batch is the input's own memory.
        assert_eq!(batch.as_bytes().as_ptr(), bytes.as_ptr());
        assert_eq!(batch.as_bytes(), &bytes);
        assert_eq!(RecordBatch::new(bytes.clone()).as_ref(), Ok(&batch));
    }
}

#[test]
fn control_batches_are_flagged() {
    let mut buf = BytesMut::new();
    let mut marker = record(9, -1, true);
    marker.key = Some(Bytes::from_static(&[0, 0, 0, 1]));
    marker.value = Some(Bytes::from_static(&[0, 0, 0, 0, 0, 5]));
    RecordBatchEncoder::encode(
        &mut buf,
        [&marker],
        &RecordEncodeOptions {
            version: 2,
            compression: KpCompression::None,
        },
    )
    .expect("encodes");
    let batch = RecordBatch::new(buf.freeze()).expect("one batch");
    assert!(batch.is_control());
    assert!(batch.is_transactional());
    assert_eq!(batch.base_offset(), 9);
    assert_eq!(batch.verify_crc(), Ok(()));
}

#[test]
fn stops_cleanly_at_every_cut_of_a_trailing_batch() {
    let first = encode(0, 3, KpCompression::Lz4);
    let second = encode(3, 4, KpCompression::None);
    let mut all = BytesMut::from(&first[..]);
    all.extend_from_slice(&second);
    let all = all.freeze();
    for cut in 0..=all.len() {
        let mut iter = RecordBatches::new(all.slice(..cut));
        let offsets: Vec<i64> = iter
            .by_ref()
            .map(|b| b.expect("no error on a cut").base_offset())
            .collect();
        let expected: Vec<i64> = match cut {
            c if c == all.len() => vec![0, 3],
            c if c >= first.len() => vec![0],
            _ => vec![],
        };
        assert_eq!(offsets, expected, "cut at {cut}");
        let consumed = match expected.len() {
            2 => all.len(),
            1 => first.len(),
            _ => 0,
        };
        assert_eq!(iter.partial_tail(), cut - consumed);
        assert_eq!(iter.position(), consumed);
    }
}

#[test]
fn a_flipped_byte_under_the_crc_is_detected() {
    let bytes = encode(0, 5, KpCompression::Zstd);
    for at in [ATTRIBUTES, RECORDS_COUNT, HEADER_SIZE + 3, bytes.len() - 1] {
        let mut corrupt = bytes.to_vec();
        corrupt[at] ^= 0x40;
        let batch = RecordBatch::new(Bytes::from(corrupt)).expect("still framed");
        assert!(
            matches!(batch.verify_crc(), Err(BatchError::CrcMismatch { .. })),
            "flip at byte {at}"
        );
    }
}

#[test]
fn base_offset_and_epoch_rewrite_in_place_keep_the_crc() {
    let mut buf = BytesMut::from(&encode(0, 3, KpCompression::Snappy)[..]);
    buf.extend_from_slice(&encode(0, 2, KpCompression::None));
    let partial = encode(0, 2, KpCompression::Gzip);
    buf.extend_from_slice(&partial[..20]);
    let mut next = 500;
    let spanned = rewrite_batches(&mut buf, |b| {
        b.set_base_offset(next);
        b.set_partition_leader_epoch(12);
        next = b.next_offset();
    })
    .expect("valid batches");
    assert_eq!(next, 505);
    assert_eq!(spanned, buf.len() - 20);
    let complete = buf.freeze().slice(..spanned);
    let batches: Vec<RecordBatch> = RecordBatches::new(complete.clone())
        .collect::<Result<_, _>>()
        .expect("valid");
    assert_eq!(
        batches
            .iter()
            .map(|b| (b.base_offset(), b.partition_leader_epoch()))
            .collect::<Vec<_>>(),
        [(500, 12), (503, 12)]
    );
    assert!(batches.iter().all(|b| b.verify_crc().is_ok()));
    // Kafka's decoder (which verifies the CRC) agrees.
    let mut wire = complete;
    let sets = RecordBatchDecoder::decode_all(&mut wire).expect("kafka-protocol decodes");
    let offsets: Vec<i64> = sets
        .iter()
        .flat_map(|s| s.records.iter().map(|r| r.offset))
        .collect();
    assert_eq!(offsets, [500, 501, 502, 503, 504]);
    assert!(
        sets.iter()
            .flat_map(|s| &s.records)
            .all(|r| r.partition_leader_epoch == 12)
    );
}

#[test]
fn structural_errors_end_iteration() {
    let good = encode(0, 1, KpCompression::None);
    let mut old_magic = good.to_vec();
    old_magic[MAGIC] = 1;
    let mut iter = RecordBatches::new(Bytes::from(old_magic));
    assert_eq!(
        iter.next(),
        Some(Err(BatchError::UnsupportedMagic {
            position: 0,
            magic: 1
        }))
    );
    assert_eq!(iter.next(), None);

    let mut short = good.to_vec();
    short[LENGTH..LENGTH + 4].copy_from_slice(&10i32.to_be_bytes());
    let mut both = good.to_vec();
    both.extend_from_slice(&short);
    let results: Vec<_> = RecordBatches::new(Bytes::from(both)).collect();
    assert_eq!(results.len(), 2);
    assert!(results[0].is_ok());
    assert_eq!(
        results[1],
        Err(BatchError::LengthTooSmall {
            position: good.len(),
            length: 10
        })
    );

    let mut unknown_codec = good.to_vec();
    unknown_codec[ATTRIBUTES + 1] |= 0x07;
    let batch = RecordBatch::new(Bytes::from(unknown_codec)).expect("framed");
    assert_eq!(
        batch.compression(),
        Err(BatchError::UnknownCompression {
            base_offset: 0,
            codec: 7
        })
    );
    assert_eq!(
        RecordBatch::new(good.slice(..30)),
        Err(BatchError::NotOneBatch {
            expected: good.len(),
            actual: 30
        })
    );
}

#[test]
fn sequences_wrap_like_kafka() {
    let mut buf = encode(0, 4, KpCompression::None).to_vec();
    buf[BASE_SEQUENCE..BASE_SEQUENCE + 4].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
    let batch = RecordBatch::new(Bytes::from(buf)).expect("framed");
    // MAX-1, MAX, 0, 1
    assert_eq!(batch.last_sequence(), 1);
}

proptest! {
    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let bytes = Bytes::from(data);
        for batch in RecordBatches::new(bytes.clone()).flatten() {
            let _ = (batch.verify_crc(), batch.compression(), batch.last_sequence(), batch.records());
        }
        let mut copy = bytes.to_vec();
        let _ = rewrite_batches(&mut copy, |b| b.set_base_offset(b.next_offset()));
    }

    #[test]
    fn batch_sequences_split_at_their_boundaries(
        sizes in proptest::collection::vec(1i64..20, 1..6),
        cut_back in 0usize..200,
    ) {
        let mut all = BytesMut::new();
        let mut base = 0;
        for n in &sizes {
            all.extend_from_slice(&encode(base, *n, KpCompression::None));
            base += n;
        }
        let all = all.freeze();
        let cut = all.len().saturating_sub(cut_back);
        let mut iter = RecordBatches::new(all.slice(..cut));
        let mut expected = 0;
        for batch in iter.by_ref() {
            let batch = batch.expect("valid");
            prop_assert_eq!(batch.base_offset(), expected);
            prop_assert!(batch.verify_crc().is_ok());
            expected = batch.next_offset();
        }
        prop_assert_eq!(iter.position() + iter.partial_tail(), cut);
    }
}

#[test]
fn checked_batches_leave_out_a_partial_tail_and_refuse_a_flipped_byte() {
    let (a, b) = (
        encode(0, 3, KpCompression::Lz4),
        encode(3, 2, KpCompression::None),
    );
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&a);
    buf.extend_from_slice(&b);
    buf.extend_from_slice(&a[..a.len() / 2]);
    let mut checked = CheckedBatches::check(buf.clone().freeze()).expect("whole batches valid");
    assert_eq!(checked.batches().len(), 2);
    assert_eq!(checked.bytes().len(), a.len() + b.len());
    checked.truncate(1);
    assert_eq!(checked.bytes(), &a);
    assert_eq!(checked.batches()[0].next_offset(), 3);

    // A byte of the second batch's records flipped: its CRC no longer holds.
    let last = a.len() + b.len() - 1;
    buf[last] ^= 0xff;
    assert!(matches!(
        CheckedBatches::check(buf.freeze()),
        Err(BatchError::CrcMismatch { .. })
    ));
}
