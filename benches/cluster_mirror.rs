//! Mirroring Apache Kafka into a 3-process kmirror cluster against a single `kmirror broker`,
//! in one run on one machine (docs/cluster.md): the same 6-partition lz4 backlog is mirrored
//! from the start into a fresh destination of each kind, alternately, and timed until every
//! partition's last stable offset on the destination equals Kafka's. In the cluster each
//! broker mirrors the partitions it leads, so the three processes share this machine's cores.
//!
//! A third destination is the cluster with `default.replication.factor=3` (and
//! `min.insync.replicas=2`): mirror topics of three replicas, caught up once the last stable
//! offsets (which follow the high watermark) reach Kafka's.
//!
//! `CLUSTER_BENCH_MB` (300) sizes the backlog, `CLUSTER_BENCH_ROUNDS` (2) the rounds of runs.

mod support;

use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_testkit::local_cluster::LocalCluster;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 6;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Each partition's last stable offset at `bootstrap` (any broker of the cluster).
async fn ends(bootstrap: &str, topic: &str) -> Option<Vec<i64>> {
    let client = SourceClient::connect(ClientConfig::plaintext(bootstrap))
        .await
        .ok()?;
    let metadata = client.metadata(Some(&[topic])).await.ok()?;
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        let leader = metadata
            .topics
            .get(topic)?
            .partitions
            .get(p as usize)?
            .leader;
        let (end, _) = client
            .list_offsets(leader, topic, p, LATEST, Isolation::ReadCommitted)
            .await
            .ok()?;
        ends.push(end);
    }
    Some(ends)
}

/// The bytes of the topic's segment files in Kafka's log directory.
fn backlog_bytes(topic: &str) -> u64 {
    let logs = PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA")).join("logs");
    (0..PARTITIONS)
        .flat_map(|p| {
            std::fs::read_dir(logs.join(format!("{topic}-{p}")))
                .into_iter()
                .flatten()
        })
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Mirrors the backlog into the destination at `bootstrap`; seconds until caught up.
async fn mirror(dir: &Path, bootstrap: &str, kafka: &str, topic: &str, wanted: &[i64]) -> f64 {
    let config = dir.join("bench.properties");
    std::fs::write(&config, format!("bootstrap.servers={kafka}\n")).expect("written");
    let config = config.to_str().expect("utf-8");
    let first = bootstrap.split(',').next().expect("an address");
    support::mirrors_cli(
        first,
        &["--create", "--mirror", "bench", "--mirror-config", config],
    );
    let start = Instant::now();
    support::mirrors_cli(first, &["--start", "--mirror", "bench", "--topics", topic]);
    loop {
        if ends(bootstrap, topic).await.as_deref() == Some(wanted) {
            return start.elapsed().as_secs_f64();
        }
        assert!(start.elapsed() < Duration::from_secs(600), "not caught up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    let kafka = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let mb = env_or("CLUSTER_BENCH_MB", 300);
    let rounds = env_or("CLUSTER_BENCH_ROUNDS", 2);
    let topic = format!("cluster-bench-{}", std::process::id());
    kafka_tools::create_topic(&kafka, &topic, PARTITIONS as u32, &[]);
    support::produce_backlog(&kafka, &topic, mb * 1024, "lz4");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let wanted = runtime
        .block_on(ends(&kafka, &topic))
        .expect("Kafka's ends");
    let bytes = backlog_bytes(&topic) as f64 / 1e6;
    println!(
        "backlog: {bytes:.1} MB on disk in {PARTITIONS} partitions, {} records",
        wanted.iter().sum::<i64>()
    );
    let mut ratios = Vec::new();
    let mut rf3_ratios = Vec::new();
    for round in 1..=rounds {
        let single_dir = tempfile::tempdir().expect("temp dir");
        let (mut single, address) = support::spawn_kmirror(single_dir.path(), "");
        let one = runtime.block_on(mirror(single_dir.path(), &address, &kafka, &topic, &wanted));
        support::terminate(&mut single);
        drop(single_dir);
        let cluster = LocalCluster::start(3, "");
        let three = runtime.block_on(mirror(
            &cluster.dir,
            &cluster.bootstrap(),
            &kafka,
            &topic,
            &wanted,
        ));
        drop(cluster);
        // The same cluster with mirror topics of three replicas: followers copy every batch.
        let cluster =
            LocalCluster::start(3, "default.replication.factor=3\nmin.insync.replicas=2\n");
        let replicated = runtime.block_on(mirror(
            &cluster.dir,
            &cluster.bootstrap(),
            &kafka,
            &topic,
            &wanted,
        ));
        drop(cluster);
        let (one_rate, three_rate, rf3_rate) = (bytes / one, bytes / three, bytes / replicated);
        ratios.push(three_rate / one_rate);
        rf3_ratios.push(rf3_rate / three_rate);
        println!(
            "round {round}: one broker {one_rate:.1} MB/s ({one:.2} s), 3-broker cluster {three_rate:.1} MB/s ({three:.2} s), cluster / one {:.2}; RF=3 {rf3_rate:.1} MB/s ({replicated:.2} s), RF=3 / RF=1 {:.2}",
            three_rate / one_rate,
            rf3_rate / three_rate
        );
    }
    println!(
        "median cluster / one broker: {:.2}; median RF=3 / RF=1 in the cluster: {:.2}",
        support::median(&mut ratios),
        support::median(&mut rf3_ratios)
    );
}
