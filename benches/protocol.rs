//! Protocol micro-benchmarks (run with `scripts/bench.sh protocol` or `cargo bench --bench protocol`).
//!
//! - batch framing: read every header of a 10 MiB buffer of 16 KiB batches, without and with the
//!   CRC check; the baseline is kafka-protocol's `decode_batch_info` over the same bytes.
//! - DescribeMirrors with 1,000 partitions: encode and decode of our generated response; the
//!   baseline is kafka-protocol's ListOffsetsResponse v9 with the same number of partitions.

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::codec::WireFormat;
use kmirror_protocol::messages::DescribeMirrorsResponse;
use kmirror_protocol::messages::describe_mirrors_response::{
    DescribedMirror, DescribedPartition, DescribedTopic,
};
use std::hint::black_box;

const BATCH_BYTES: usize = 16 * 1024;
const BUFFER_BYTES: usize = 10 * 1024 * 1024;

/// A buffer of about 10 MiB of ~16 KiB uncompressed batches with increasing offsets.
fn ten_mib_of_batches() -> Bytes {
    let records_per_batch = 16;
    let value = Bytes::from(vec![b'x'; BATCH_BYTES / records_per_batch - 40]);
    let mut out = BytesMut::with_capacity(BUFFER_BYTES + BATCH_BYTES);
    let mut offset = 0i64;
    while out.len() < BUFFER_BYTES {
        let records: Vec<Record> = (0..records_per_batch as i64)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 3,
                producer_id: 7,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: offset + i,
                sequence: (offset + i) as i32,
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(value.clone()),
                headers: Default::default(),
            })
            .collect();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut out, &records, &options).expect("encodes");
        offset += records_per_batch as i64;
    }
    out.freeze()
}

fn batch_framing(c: &mut Criterion) {
    let buffer = ten_mib_of_batches();
    let mut group = c.benchmark_group("batch_framing_10MiB_of_16KiB");
    group.throughput(Throughput::Bytes(buffer.len() as u64));
    group.bench_function("kmirror_headers", |b| {
        b.iter(|| {
            let mut records = 0i64;
            for batch in RecordBatches::new(buffer.clone()) {
                let batch = batch.expect("valid");
                records += i64::from(batch.records_count()) + batch.last_offset();
            }
            black_box(records)
        })
    });
    group.bench_function("kmirror_headers_and_crc", |b| {
        b.iter(|| {
            let mut ok = 0usize;
            for batch in RecordBatches::new(buffer.clone()) {
                ok += usize::from(batch.expect("valid").verify_crc().is_ok());
            }
            black_box(ok)
        })
    });
    group.bench_function("kafka_protocol_decode_batch_info", |b| {
        b.iter(|| {
            let mut wire = buffer.clone();
            black_box(
                RecordBatchDecoder::decode_batch_info(&mut wire)
                    .expect("decodes")
                    .len(),
            )
        })
    });
    group.finish();
}

const TOPICS: usize = 10;
const PARTITIONS_PER_TOPIC: usize = 100;

fn describe_mirrors_response() -> DescribeMirrorsResponse {
    let topics = (0..TOPICS)
        .map(|t| DescribedTopic {
            topic_name: format!("orders-{t}"),
            topic_id: uuid::Uuid::from_u128(t as u128 + 1),
            partitions: (0..PARTITIONS_PER_TOPIC)
                .map(|p| DescribedPartition {
                    partition_index: p as i32,
                    state: "MIRRORING".into(),
                    source_offset: 1_000_000 + p as i64,
                    destination_offset: 999_000 + p as i64,
                    lag: 1_000,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    DescribeMirrorsResponse {
        mirrors: vec![DescribedMirror {
            mirror_name: "dr".into(),
            topics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn list_offsets_response() -> ListOffsetsResponse {
    let topics = (0..TOPICS)
        .map(|t| {
            ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(format!("orders-{t}"))))
                .with_partitions(
                    (0..PARTITIONS_PER_TOPIC)
                        .map(|p| {
                            ListOffsetsPartitionResponse::default()
                                .with_partition_index(p as i32)
                                .with_offset(1_000_000 + p as i64)
                                .with_timestamp(1_700_000_000_000)
                                .with_leader_epoch(5)
                        })
                        .collect(),
                )
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

fn describe_mirrors(c: &mut Criterion) {
    let ours = describe_mirrors_response();
    let ours_bytes = ours.to_bytes(0).expect("encodes");
    let theirs = list_offsets_response();
    let mut theirs_bytes = BytesMut::new();
    theirs.encode(&mut theirs_bytes, 9).expect("encodes");
    let theirs_bytes = theirs_bytes.freeze();

    let mut group = c.benchmark_group("response_1000_partitions");
    group.throughput(Throughput::Elements((TOPICS * PARTITIONS_PER_TOPIC) as u64));
    group.bench_function(
        BenchmarkId::new("encode", "kmirror_describe_mirrors_v0"),
        |b| b.iter(|| black_box(ours.to_bytes(0).expect("encodes"))),
    );
    group.bench_function(
        BenchmarkId::new("decode", "kmirror_describe_mirrors_v0"),
        |b| {
            b.iter(|| {
                black_box(
                    DescribeMirrorsResponse::from_bytes(ours_bytes.clone(), 0).expect("decodes"),
                )
            })
        },
    );
    group.bench_function(
        BenchmarkId::new("encode", "kafka_protocol_list_offsets_v9"),
        |b| {
            b.iter(|| {
                let mut buf = BytesMut::with_capacity(theirs_bytes.len());
                theirs.encode(&mut buf, 9).expect("encodes");
                black_box(buf)
            })
        },
    );
    group.bench_function(
        BenchmarkId::new("decode", "kafka_protocol_list_offsets_v9"),
        |b| {
            b.iter(|| {
                let mut wire = theirs_bytes.clone();
                black_box(ListOffsetsResponse::decode(&mut wire, 9).expect("decodes"))
            })
        },
    );
    group.finish();
}

criterion_group!(benches, batch_framing, describe_mirrors);
criterion_main!(benches);
