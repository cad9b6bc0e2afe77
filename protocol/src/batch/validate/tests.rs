use super::*;
use crate::codec::{write_varint, write_varlong};
use bytes::BytesMut;
use kafka_protocol::compression::{Compressor, Gzip};
use kafka_protocol::records::{
    Compression as KpCompression, Record, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType as KpTimestampType,
};
use proptest::prelude::*;

const CODECS: [KpCompression; 5] = [
    KpCompression::None,
    KpCompression::Gzip,
    KpCompression::Snappy,
    KpCompression::Lz4,
    KpCompression::Zstd,
];

const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

/// A batch of `count` records (null and empty keys, headers) encoded by kafka-protocol, an
/// encoder independent of the validator.
fn encoded(count: i64, codec: KpCompression, producer_id: i64) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: if producer_id < 0 { -1 } else { 0 },
            timestamp_type: KpTimestampType::Creation,
            offset: i,
            // kafka-protocol starts a new batch where offset minus sequence changes, so
            // sequence-less records count up from -1 (see testing.rs).
            sequence: if producer_id < 0 {
                i as i32 - 1
            } else {
                i as i32
            },
            // Out of order, so the max timestamp is not simply the last one.
            timestamp: BASE_TIMESTAMP + (i * 7919) % 13,
            key: match i % 3 {
                0 => None,
                1 => Some(Bytes::new()),
                _ => Some(Bytes::from(format!("key-{i}"))),
            },
            value: (i % 4 != 3).then(|| Bytes::from(vec![b'v'; (i as usize * 37) % 300])),
            headers: (0..i % 3)
                .map(|h| {
                    (
                        kafka_protocol::protocol::StrBytes::from_string(format!("h{h}")),
                        (h % 2 == 0).then(|| Bytes::from_static(b"value")),
                    )
                })
                .collect(),
        })
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
    .expect("encodes");
    buf.freeze()
}

/// One record as Kafka lays it out, with the fields given raw so they can be wrong.
#[derive(Clone)]
struct RawRecord {
    timestamp_delta: i64,
    offset_delta: i32,
    key_length: i32,
    key: Vec<u8>,
    value_length: i32,
    value: Vec<u8>,
    /// Header keys and values, raw.
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Bytes added to the record's declared length.
    length_error: i32,
}

impl RawRecord {
    fn valid(offset_delta: i32) -> Self {
        RawRecord {
            timestamp_delta: i64::from(offset_delta),
            offset_delta,
            key_length: 1,
            key: b"k".to_vec(),
            value_length: 3,
            value: b"val".to_vec(),
            headers: Vec::new(),
            length_error: 0,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut body = vec![0u8];
        write_varlong(&mut body, self.timestamp_delta);
        write_varint(&mut body, self.offset_delta);
        write_varint(&mut body, self.key_length);
        body.extend_from_slice(&self.key);
        write_varint(&mut body, self.value_length);
        body.extend_from_slice(&self.value);
        write_varint(&mut body, self.headers.len() as i32);
        for (key, value) in &self.headers {
            write_varint(&mut body, key.len() as i32);
            body.extend_from_slice(key);
            match value {
                Some(v) => {
                    write_varint(&mut body, v.len() as i32);
                    body.extend_from_slice(v);
                }
                None => write_varint(&mut body, -1),
            }
        }
        write_varint(out, body.len() as i32 + self.length_error);
        out.extend_from_slice(&body);
    }
}

/// The fields of a hand-made batch header.
struct Header {
    attributes: i16,
    last_offset_delta: i32,
    max_timestamp: i64,
    producer_id: i64,
    base_sequence: i32,
    count: i32,
}

impl Header {
    fn for_records(count: i32) -> Self {
        Header {
            attributes: 0,
            last_offset_delta: count - 1,
            max_timestamp: BASE_TIMESTAMP + i64::from(count) - 1,
            producer_id: -1,
            base_sequence: -1,
            count,
        }
    }

    /// The batch with this header around `records` (already compressed if the attributes say
    /// so), with a valid CRC.
    fn batch(&self, records: &[u8]) -> Bytes {
        let mut b = Vec::with_capacity(HEADER_SIZE + records.len());
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((HEADER_SIZE - 12 + records.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&self.attributes.to_be_bytes());
        b.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        b.extend_from_slice(&BASE_TIMESTAMP.to_be_bytes());
        b.extend_from_slice(&self.max_timestamp.to_be_bytes());
        b.extend_from_slice(&self.producer_id.to_be_bytes());
        b.extend_from_slice(&(if self.producer_id < 0 { -1i16 } else { 0 }).to_be_bytes());
        b.extend_from_slice(&self.base_sequence.to_be_bytes());
        b.extend_from_slice(&self.count.to_be_bytes());
        b.extend_from_slice(records);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }
}

fn raw(records: &[RawRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        r.write(&mut out);
    }
    out
}

fn valid_records(count: i32) -> Vec<RawRecord> {
    (0..count).map(RawRecord::valid).collect()
}

fn code(batch: &Bytes) -> Option<ErrorCode> {
    validate_produced(batch, &TimestampLimits::NONE)
        .err()
        .map(|e| e.error_code())
}

#[test]
fn batches_kafka_protocol_encodes_are_valid_with_every_codec() {
    for codec in CODECS {
        for count in [1, 2, 10, 500] {
            for producer_id in [-1, 9] {
                let batch = encoded(count, codec, producer_id);
                assert_eq!(
                    validate_produced(&batch, &TimestampLimits::NONE),
                    Ok(()),
                    "{codec:?}, {count} records"
                );
            }
        }
    }
    let mut two = BytesMut::from(&encoded(3, KpCompression::None, -1)[..]);
    two.extend_from_slice(&encoded(4, KpCompression::Lz4, -1));
    assert_eq!(
        validate_produced(&two.freeze(), &TimestampLimits::NONE),
        Ok(())
    );
}

#[test]
fn the_hand_made_batch_is_valid() {
    let batch = Header::for_records(3).batch(&raw(&valid_records(3)));
    assert_eq!(validate_produced(&batch, &TimestampLimits::NONE), Ok(()));
}

#[test]
fn a_record_count_that_is_not_the_records_is_an_invalid_record() {
    // The case: 2^31-1 declared, one present.
    let mut header = Header::for_records(1);
    header.count = i32::MAX;
    header.last_offset_delta = i32::MAX - 1;
    let batch = header.batch(&raw(&valid_records(1)));
    assert!(
        matches!(
            validate_produced(&batch, &TimestampLimits::NONE),
            Err(InvalidBatch::Record { record: 1, .. })
        ),
        "{:?}",
        validate_produced(&batch, &TimestampLimits::NONE)
    );
    assert_eq!(code(&batch), Some(ErrorCode::INVALID_RECORD));
    // Fewer declared than present.
    let batch = Header::for_records(2).batch(&raw(&valid_records(3)));
    assert_eq!(code(&batch), Some(ErrorCode::INVALID_RECORD));
    for count in [0, -3] {
        let mut header = Header::for_records(1);
        header.count = count;
        let batch = header.batch(&raw(&valid_records(1)));
        assert_eq!(
            validate_produced(&batch, &TimestampLimits::NONE),
            Err(InvalidBatch::RecordCount { position: 0, count })
        );
    }
}

#[test]
fn a_last_offset_delta_that_is_not_the_count_minus_one_is_an_invalid_record() {
    for delta in [-5, 0, 3] {
        let mut header = Header::for_records(2);
        header.last_offset_delta = delta;
        let batch = header.batch(&raw(&valid_records(2)));
        assert_eq!(
            validate_produced(&batch, &TimestampLimits::NONE),
            Err(InvalidBatch::OffsetRange {
                position: 0,
                count: 2,
                last_offset_delta: delta
            })
        );
        assert_eq!(code(&batch), Some(ErrorCode::INVALID_RECORD));
    }
}

#[test]
fn offset_deltas_must_count_up_from_zero() {
    let mut records = valid_records(3);
    records.swap(1, 2);
    let batch = Header::for_records(3).batch(&raw(&records));
    assert_eq!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::OffsetDelta {
            position: 0,
            record: 1,
            found: 2
        })
    );
}

#[test]
fn an_unknown_codec_is_a_corrupt_message() {
    for codec in [5, 6, 7] {
        let mut header = Header::for_records(1);
        header.attributes = codec;
        let batch = header.batch(&raw(&valid_records(1)));
        assert_eq!(
            code(&batch),
            Some(ErrorCode::CORRUPT_MESSAGE),
            "codec {codec}"
        );
    }
}

#[test]
fn compressed_garbage_is_a_corrupt_message_with_every_codec() {
    for codec in 1..=4 {
        let mut header = Header::for_records(1);
        header.attributes = codec;
        let batch = header.batch(b"\x1f\x8bthis is not what it claims to be, at all");
        assert!(
            matches!(
                validate_produced(&batch, &TimestampLimits::NONE),
                Err(InvalidBatch::Decompress { .. })
            ),
            "codec {codec}: {:?}",
            validate_produced(&batch, &TimestampLimits::NONE)
        );
        assert_eq!(code(&batch), Some(ErrorCode::CORRUPT_MESSAGE));
    }
}

#[test]
fn valid_compression_of_invalid_records_is_an_invalid_record() {
    let mut records = valid_records(2);
    records[1].key_length = -5;
    let mut header = Header::for_records(2);
    header.attributes = 1;
    let batch = header.batch(&gzip(&raw(&records)));
    assert!(matches!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::Record { record: 1, .. })
    ));
}

/// A named way to spoil a record.
type Spoil = (&'static str, fn(&mut RawRecord));

#[test]
fn lengths_out_of_bounds_are_invalid_records() {
    let cases: [Spoil; 6] = [
        ("key length -5", |r| r.key_length = -5),
        ("value length -2", |r| r.value_length = -2),
        ("key longer than the record", |r| r.key_length = 1000),
        ("record length too long", |r| r.length_error = 4),
        ("record length too short", |r| r.length_error = -2),
        ("record length below a record's fields", |r| {
            r.length_error = -100
        }),
    ];
    for (what, spoil) in cases {
        let mut records = valid_records(2);
        spoil(&mut records[0]);
        let batch = Header::for_records(2).batch(&raw(&records));
        let result = validate_produced(&batch, &TimestampLimits::NONE);
        assert!(
            matches!(result, Err(InvalidBatch::Record { record: 0, .. })),
            "{what}: {result:?}"
        );
    }
}

fn gzip(records: &[u8]) -> Vec<u8> {
    let mut compressed = BytesMut::new();
    Gzip::compress(
        &mut compressed,
        |buf: &mut BytesMut| -> anyhow::Result<()> {
            buf.extend_from_slice(records);
            Ok(())
        },
    )
    .expect("compresses");
    compressed.to_vec()
}

#[test]
fn header_keys_must_be_utf8_even_when_cut_across_decompressed_pieces() {
    // Keys longer than the stream's buffer, shifted so a two-byte character straddles a piece.
    for shift in 0..3 {
        let mut record = RawRecord::valid(0);
        record.value = vec![b'v'; shift];
        record.value_length = shift as i32;
        record.headers = vec![("é".repeat(6000).into_bytes(), None)];
        let mut header = Header::for_records(1);
        header.attributes = 1;
        let batch = header.batch(&gzip(&raw(&[record])));
        assert_eq!(
            validate_produced(&batch, &TimestampLimits::NONE),
            Ok(()),
            "shift {shift}"
        );
    }
    for key in [
        vec![0xff],
        vec![b'a', 0xc3],
        "é".repeat(6000).into_bytes()[1..].to_vec(),
    ] {
        let mut record = RawRecord::valid(0);
        record.headers = vec![(key, Some(b"v".to_vec()))];
        for attributes in [0, 1] {
            let mut header = Header::for_records(1);
            header.attributes = attributes;
            let records = raw(&[record.clone()]);
            let records = if attributes == 1 {
                gzip(&records)
            } else {
                records
            };
            assert!(matches!(
                validate_produced(&header.batch(&records), &TimestampLimits::NONE),
                Err(InvalidBatch::Record {
                    reason: HEADER_KEY_NOT_UTF8,
                    ..
                })
            ));
        }
    }
}

#[test]
fn bytes_after_the_last_record_are_refused() {
    let mut bytes = raw(&valid_records(1));
    bytes.push(0);
    let batch = Header::for_records(1).batch(&bytes);
    assert!(matches!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::Record { record: 1, .. })
    ));
}

#[test]
fn a_max_timestamp_that_is_not_the_records_greatest_is_refused() {
    let mut header = Header::for_records(2);
    header.max_timestamp = i64::MAX;
    let batch = header.batch(&raw(&valid_records(2)));
    assert_eq!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::MaxTimestamp {
            position: 0,
            declared: i64::MAX,
            actual: BASE_TIMESTAMP + 1
        })
    );
    let mut records = valid_records(1);
    records[0].timestamp_delta = i64::MAX;
    let batch = Header::for_records(1).batch(&raw(&records));
    assert!(matches!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::Record { record: 0, .. })
    ));
}

#[test]
fn an_idempotent_batch_needs_a_sequence() {
    let mut header = Header::for_records(1);
    header.producer_id = 4;
    let batch = header.batch(&raw(&valid_records(1)));
    assert_eq!(code(&batch), Some(ErrorCode::INVALID_RECORD));
    header.base_sequence = 0;
    let batch = header.batch(&raw(&valid_records(1)));
    assert_eq!(validate_produced(&batch, &TimestampLimits::NONE), Ok(()));
}

#[test]
fn a_bad_crc_is_a_corrupt_message_and_a_later_bad_batch_is_found_at_its_position() {
    let good = Header::for_records(1).batch(&raw(&valid_records(1)));
    let mut flipped = BytesMut::from(&good[..]);
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert_eq!(code(&flipped.freeze()), Some(ErrorCode::CORRUPT_MESSAGE));
    let mut header = Header::for_records(1);
    header.last_offset_delta = -5;
    let mut both = BytesMut::from(&good[..]);
    both.extend_from_slice(&header.batch(&raw(&valid_records(1))));
    assert!(matches!(
        validate_produced(&both.freeze(), &TimestampLimits::NONE),
        Err(InvalidBatch::OffsetRange { position, .. }) if position == good.len()
    ));
}

#[test]
fn a_snappy_block_declaring_more_than_it_can_expand_to_is_refused_unallocated() {
    // A raw snappy block of a few bytes declaring 2^32-1 bytes.
    let mut header = Header::for_records(1);
    header.attributes = 2;
    let batch = header.batch(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00]);
    assert!(matches!(
        validate_produced(&batch, &TimestampLimits::NONE),
        Err(InvalidBatch::Decompress { .. })
    ));
}

proptest! {
    /// Whatever a batch with a valid CRC holds, the validator answers without panicking.
    #[test]
    fn arbitrary_records_never_panic(codec in 0i16..8, count in -2i32..40, records in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut header = Header::for_records(count.max(1));
        header.count = count;
        header.attributes = codec;
        let _ = validate_produced(&header.batch(&records), &TimestampLimits::NONE);
    }
}

#[test]
fn create_times_too_far_from_the_brokers_clock_are_an_invalid_timestamp() {
    // Records dated BASE_TIMESTAMP and BASE_TIMESTAMP + 1.
    let batch = Header::for_records(2).batch(&raw(&valid_records(2)));
    let limits = |now_ms, before_max_ms, after_max_ms| TimestampLimits {
        now_ms,
        before_max_ms,
        after_max_ms,
    };
    let hour = 3_600_000;
    // Within an hour ahead, and a week back: accepted.
    assert_eq!(
        validate_produced(&batch, &limits(BASE_TIMESTAMP - hour + 1, i64::MAX, hour)),
        Ok(())
    );
    assert_eq!(
        validate_produced(
            &batch,
            &limits(BASE_TIMESTAMP + 7 * 24 * hour, i64::MAX, hour)
        ),
        Ok(())
    );
    // Two hours ahead of the clock (Kafka 4's default allows one).
    let ahead = validate_produced(&batch, &limits(BASE_TIMESTAMP - 2 * hour, i64::MAX, hour));
    assert!(
        matches!(ahead, Err(InvalidBatch::Timestamp { timestamp, direction: "after", .. }) if timestamp == BASE_TIMESTAMP + 1),
        "{ahead:?}"
    );
    assert_eq!(
        ahead.err().map(|e| e.error_code()),
        Some(ErrorCode::INVALID_TIMESTAMP)
    );
    // Older than log.message.timestamp.before.max.ms allows.
    let behind = validate_produced(&batch, &limits(BASE_TIMESTAMP + 2 * hour, hour, hour));
    assert!(
        matches!(
            behind,
            Err(InvalidBatch::Timestamp {
                timestamp: BASE_TIMESTAMP,
                direction: "before",
                ..
            })
        ),
        "{behind:?}"
    );
    // A record without a timestamp (-1) is not dated.
    let mut records = valid_records(1);
    records[0].timestamp_delta = -1 - BASE_TIMESTAMP;
    let mut header = Header::for_records(1);
    header.max_timestamp = -1;
    let undated = header.batch(&raw(&records));
    assert_eq!(
        validate_produced(&undated, &limits(BASE_TIMESTAMP, hour, hour)),
        Ok(())
    );
}
