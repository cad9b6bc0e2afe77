//! Produce on arbitrary record batches with a valid CRC, through the broker's request path, then
//! a consumer's read of what was appended: the broker either refuses a batch (an error code, the
//! log end unmoved) or keeps the log readable by a consumer (a Fetch from the old log end
//! returns batches kafka-protocol's decoder reads, holding exactly the new offsets in order).
//!
//! Input: `[flags][attributes][count: 4][last offset delta: 4][max timestamp: 8][producer id: 8]
//! [base sequence: 4][records...]`. Flag bit 0 makes the last offset delta `count - 1` and the
//! count small, so the fuzzer reaches the records rather than the header checks; bit 1 compresses
//! the records with the attributes' codec (when it is one), so it reaches the records inside
//! valid compression too. The CRC is always computed, so nothing is refused for it.
#![no_main]

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::broker::server::handle;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

const TOPIC: &str = "fuzzed";
const PRODUCE_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;
const HEADER: usize = 1 + 1 + 4 + 4 + 8 + 8 + 4;

struct Target {
    broker: Arc<Broker>,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn target() -> &'static Target {
    static TARGET: OnceLock<Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let props = parse_properties(&format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092\nlog.dirs={}\nlog.segment.bytes=1048576\n",
            dir.path().display()
        ))
        .expect("parses");
        let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let broker = runtime.block_on(async {
            let broker = Arc::new(Broker::open(config).expect("opens"));
            broker
                .create_topic(TOPIC, 1, Default::default(), None)
                .expect("creates the topic");
            broker
        });
        Target {
            broker,
            runtime,
            _dir: dir,
        }
    })
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(raw)
}

/// `records` compressed with `codec` (the attributes' low bits), or `None` for no codec.
fn compress(codec: u8, records: &[u8]) -> Option<Vec<u8>> {
    let mut out = BytesMut::new();
    let fill = |buf: &mut BytesMut| -> anyhow::Result<()> {
        buf.extend_from_slice(records);
        Ok(())
    };
    match codec {
        1 => Gzip::compress(&mut out, fill),
        2 => Snappy::compress(&mut out, fill),
        3 => Lz4::compress(&mut out, fill),
        4 => Zstd::compress(&mut out, fill),
        _ => return None,
    }
    .expect("compresses");
    Some(out.to_vec())
}

/// The batch the input describes, with a valid CRC.
fn batch(data: &[u8]) -> Option<Bytes> {
    if data.len() < HEADER {
        return None;
    }
    let (flags, attributes) = (data[0], data[1]);
    let (mut count, mut last_offset_delta) = (i32_at(data, 2), i32_at(data, 6));
    if flags & 1 != 0 {
        count = count.rem_euclid(64) + 1;
        last_offset_delta = count - 1;
    }
    let max_timestamp = i64_at(data, 10);
    let producer_id = i64_at(data, 18);
    let base_sequence = i32_at(data, 26);
    let raw = &data[HEADER..];
    let compressed = if flags & 2 != 0 {
        compress(attributes & 7, raw)
    } else {
        None
    };
    let records = compressed.as_deref().unwrap_or(raw);
    let mut b = Vec::with_capacity(61 + records.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + records.len()) as i32).to_be_bytes());
    b.extend_from_slice(&0i32.to_be_bytes());
    b.push(2);
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&i16::from(attributes).to_be_bytes());
    b.extend_from_slice(&last_offset_delta.to_be_bytes());
    b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
    b.extend_from_slice(&max_timestamp.to_be_bytes());
    b.extend_from_slice(&producer_id.to_be_bytes());
    b.extend_from_slice(&0i16.to_be_bytes());
    b.extend_from_slice(&base_sequence.to_be_bytes());
    b.extend_from_slice(&count.to_be_bytes());
    b.extend_from_slice(records);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Some(Bytes::from(b))
}

/// Sends one request through the broker's request path and decodes the answer.
fn call<R: Request>(t: &Target, request: &R, version: i16) -> R::Response {
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")))
        .encode(&mut frame, R::header_version(version))
        .expect("encodes the header");
    request.encode(&mut frame, version).expect("encodes");
    let answer = t
        .runtime
        .block_on(handle(&t.broker, None, "/fuzz", frame.freeze()))
        .expect("the connection stays")
        .expect("an answer");
    let mut body = BytesMut::new();
    for piece in answer.body {
        body.extend_from_slice(&piece.to_bytes().expect("the records read"));
    }
    R::Response::decode(&mut body.freeze(), version).expect("the answer decodes")
}

fn log_end(t: &Target) -> i64 {
    t.broker
        .partition(TOPIC, 0)
        .expect("led here")
        .log
        .lock()
        .expect("lock")
        .log_end_offset()
}

fuzz_target!(|data: &[u8]| {
    let Some(records) = batch(data) else { return };
    let t = target();
    let before = log_end(t);
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(1000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    let answer = call(t, &produce, PRODUCE_VERSION);
    let error = answer.responses[0].partition_responses[0].error_code;
    let after = log_end(t);
    if error != 0 {
        assert_eq!(after, before, "a refused batch appended something");
        return;
    }
    assert!(after >= before, "the log end moved back");

    // A consumer's read from the old log end: every batch decodes, offsets before..after in order.
    let fetch = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(16 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(before)
                        .with_partition_max_bytes(16 << 20),
                ]),
        ]);
    let fetched = call(t, &fetch, FETCH_VERSION);
    let partition = &fetched.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0, "the consumer's fetch fails");
    let mut wire = partition.records.clone().unwrap_or_default();
    let sets = RecordBatchDecoder::decode_all(&mut wire)
        .unwrap_or_else(|e| panic!("an accepted batch does not decode for a consumer: {e}"));
    let offsets: Vec<i64> = sets
        .iter()
        .flat_map(|set| set.records.iter().map(|r| r.offset))
        .collect();
    assert_eq!(
        offsets,
        (before..after).collect::<Vec<i64>>(),
        "the consumer does not read exactly the appended offsets in order"
    );
});
