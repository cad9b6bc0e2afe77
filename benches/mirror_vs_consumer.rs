//! Mirroring throughput, Apache Kafka -> kmirror, against Kafka's own consumer reading the same
//! topic from the same source in the same run (`scripts/bench.sh mirror_vs_consumer`, which
//! starts Kafka with scripts/kafka-local.sh).
//!
//! ProducerPerformance writes `MIRROR_BENCH_RECORDS` (default 500,000) records of 1 KiB with lz4
//! into an eight-partition topic. ConsumerPerformance reads it all (its `fetch.*` figures, group
//! join excluded; a first read warms the page cache). Then one Fetcher actor on the broker's
//! ports mirrors all eight partitions into a fresh kmirror broker (durable logs in a temporary
//! directory) until every partition reaches the source's last stable offset; the destination
//! is checked byte for byte against Kafka's segment files. Prints records/s, MB/s and the ratio.
//!
//! The mirror writes every byte it fetches, the consumer writes nothing; so the run also times
//! plain `write` calls of the same number of bytes into a file on the destination's filesystem
//! (no fsync, as the log does not fsync by default), after `sync` empties the dirty pages:
//! this machine's page-cache write rate at that size, the ceiling of any mirror here.

mod support;

use actix::Actor;
use kmirror::mirror::BrokerHost;
use kmirror_actors::actor::{
    AttachPartition, FetchEpochs, Fetcher, FetcherConfig, FetcherProgress,
};
use kmirror_actors::engine::fetch::EngineFetcherPorts;
use kmirror_actors::engine::fetch_lanes::FetchLanes;
use kmirror_actors::engine::fetch_settings::FetchSettings;
use kmirror_actors::engine::stats::MirrorStats;
use kmirror_actors::host::TopicPartition;
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 8;

/// Progress reports go nowhere: the benchmark watches the logs.
struct Sink;

impl Actor for Sink {
    type Context = actix::Context<Self>;
}

impl actix::Handler<FetcherProgress> for Sink {
    type Result = ();

    fn handle(&mut self, _: FetcherProgress, _: &mut actix::Context<Self>) {}
}

fn consumer_performance(bootstrap: &str, topic: &str, records: &str) -> (f64, f64) {
    let out = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            records,
        ],
    );
    // start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    // rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    let summary = out
        .lines()
        .rfind(|l| l.matches(',').count() >= 9 && l.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no ConsumerPerformance summary in:\n{out}"));
    let fields: Vec<&str> = summary.split(',').map(str::trim).collect();
    (
        fields[9].parse().expect("fetch.nMsg.sec"),
        fields[8].parse().expect("fetch.MB.sec"),
    )
}

/// Empties the page cache's dirty pages, so each timed phase starts from the same state.
fn sync() {
    let synced = std::process::Command::new("sync").status();
    assert!(synced.is_ok_and(|s| s.success()), "sync ran");
}

/// Writes `total` bytes (repeating `chunk`) into a new file under `dir` and returns MB/s.
fn plain_write_mb_s(dir: &std::path::Path, total: u64, chunk: &[u8]) -> f64 {
    use std::io::Write;
    let path = dir.join("plain-write");
    let mut file = std::fs::File::create(&path).expect("creates");
    let started = Instant::now();
    let mut written = 0u64;
    while written < total {
        let n = chunk.len().min((total - written) as usize);
        file.write_all(&chunk[..n]).expect("writes");
        written += n as u64;
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).expect("removes");
    written as f64 / f64::from(1 << 20) / elapsed
}

fn main() {
    let records: u32 = std::env::var("MIRROR_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("bench-mirror-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, PARTITIONS as u32, &[]);
    support::produce_backlog(&bootstrap, &topic, records.into(), "lz4");
    let all = records.to_string();
    consumer_performance(&bootstrap, &topic, &all);
    let (java_records_s, java_mb_s) = consumer_performance(&bootstrap, &topic, &all);

    let dir = tempfile::tempdir().expect("temp dir");
    let segment_of = |p: i32| {
        std::fs::read(
            PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA"))
                .join("logs")
                .join(format!("{topic}-{p}"))
                .join("00000000000000000000.log"),
        )
        .expect("source segment")
    };
    let source_bytes: u64 = (0..PARTITIONS).map(|p| segment_of(p).len() as u64).sum();
    let chunk: Vec<u8> = segment_of(0).into_iter().take(1 << 20).collect();
    sync();
    let plain_mb_s = plain_write_mb_s(dir.path(), source_bytes, &chunk);
    sync();
    let broker = support::open_broker(dir.path());

    let system = actix::System::new();
    let (elapsed, mirrored_bytes) = system.block_on(async {
        let source = Arc::new(
            SourceClient::connect(ClientConfig::plaintext(&bootstrap))
                .await
                .expect("connects"),
        );
        let metadata = source
            .metadata(Some(&[topic.as_str()]))
            .await
            .expect("metadata");
        let t = &metadata.topics[topic.as_str()];
        broker
            .create_mirror(
                "bench",
                BTreeMap::from([("bootstrap.servers".to_string(), bootstrap.clone())]),
            )
            .await
            .expect("mirror bench created");
        let configs = BTreeMap::from([("mirror.name".to_string(), "bench".to_string())]);
        broker
            .create_topic(&topic, PARTITIONS, 1, configs, Some(t.topic_id))
            .await
            .expect("mirror topic");
        let leader = t.partitions[0].leader;
        let mut targets = Vec::new();
        for p in 0..PARTITIONS {
            let (lso, _) = source
                .list_offsets(leader, &topic, p, LATEST, Isolation::ReadCommitted)
                .await
                .expect("lso");
            targets.push((p, lso));
        }
        let sink = Sink.start().recipient();
        let started = Instant::now();
        let fetcher = Fetcher::new(
            EngineFetcherPorts::new(
                BrokerHost(broker.clone()),
                Arc::new(
                    FetchLanes::new(
                        BrokerHost(broker.clone()),
                        ClientConfig::plaintext(&bootstrap),
                    )
                    .expect("lanes"),
                ),
                leader,
                Arc::new(MirrorStats::new("bench")),
                FetchSettings::default(),
            ),
            FetcherConfig::default(),
        )
        .start();
        for p in 0..PARTITIONS {
            fetcher
                .send(AttachPartition {
                    key: TopicPartition::new(topic.clone(), p),
                    progress: sink.clone(),
                    // The destination leader epoch the partition's actor attaches with.
                    epochs: FetchEpochs {
                        topic_id: uuid::Uuid::nil(),
                        source: -1,
                        destination: broker.leader_epoch(&topic, p).expect("led"),
                    },
                })
                .await
                .expect("fetcher alive");
        }
        loop {
            let done = targets.iter().all(|(p, lso)| {
                let partition = broker.partition(&topic, *p).expect("partition");
                let end = partition.log.lock().expect("log").log_end_offset();
                end >= *lso
            });
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let bytes: u64 = (0..PARTITIONS)
            .map(|p| {
                let partition = broker.partition(&topic, p).expect("partition");
                let log = partition.log.lock().expect("log");
                log.size_bytes()
            })
            .sum();
        (elapsed, bytes)
    });

    for p in 0..PARTITIONS {
        let source_segment = segment_of(p);
        let partition = broker.partition(&topic, p).expect("partition");
        let log = partition.log.lock().expect("log");
        let mut mirrored = Vec::with_capacity(source_segment.len());
        log.for_each_batch(log.log_start_offset(), |b| {
            mirrored.extend_from_slice(b.as_bytes());
            Ok(())
        })
        .expect("reads");
        assert!(
            mirrored == source_segment,
            "partition {p} differs from the source"
        );
    }

    let mirror_records_s = f64::from(records) / elapsed;
    let mirror_mb_s = mirrored_bytes as f64 / f64::from(1 << 20) / elapsed;
    println!(
        "mirror_vs_consumer: {records} records of 1 KiB, lz4, {PARTITIONS} partitions, one fetcher"
    );
    println!(
        "records/s  kmirror mirroring {mirror_records_s:>12.0}  ConsumerPerformance {java_records_s:>12.0}  ratio {:.2}",
        mirror_records_s / java_records_s
    );
    println!(
        "MB/s       kmirror mirroring {mirror_mb_s:>12.1}  ConsumerPerformance {java_mb_s:>12.1}  (mirror: bytes stored, lz4; consumer: uncompressed values)"
    );
    println!(
        "MB/s       kmirror mirroring {mirror_mb_s:>12.1}  plain file writes   {plain_mb_s:>12.1}  ratio {:.2}  (same bytes, same filesystem: the write ceiling)",
        mirror_mb_s / plain_mb_s
    );
    println!("destination byte-identical to the source segments: yes");
}
