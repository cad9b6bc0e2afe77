//! Replicated produce and leader elections, kmirror against Apache Kafka on this machine, in one
//! run (`scripts/bench.sh replicated_produce`, which starts a single Kafka and a three-broker
//! one with scripts/kafka-local.sh):
//!
//! - Kafka's ProducerPerformance writes `REPLICATED_BENCH_RECORDS` (300,000) records of 1 KiB to
//!   three partitions (`linger.ms=5`, `batch.size=131072`, no compression), as records/s, MB/s
//!   and its latency percentiles, into: a three-process kmirror cluster, replication factor 3,
//!   `min.insync.replicas=2`, acks=all; one `kmirror broker`, replication factor 1, acks=1; and
//!   the three-broker Apache Kafka, replication factor 3, `min.insync.replicas=2`, acks=all.
//! - Leader election time: a partition's leader is SIGKILLed (then SIGTERMed, after it is back)
//!   and the time until another broker's Metadata shows a new leader is measured, for the
//!   kmirror cluster (session timeout 4 s) and for Kafka (session timeout 6 s, kafka-local.sh).

mod support;

use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::kafka_tools::{kafka_env, kafka_tool};
use kmirror_testkit::local_cluster::LocalCluster;
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 3;

/// What ProducerPerformance reported.
struct Produced {
    records_per_s: f64,
    mb_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn create(bootstrap: &str, topic: &str, replication_factor: u32, configs: &[&str]) {
    let (partitions, factor) = (PARTITIONS.to_string(), replication_factor.to_string());
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        &partitions,
        "--replication-factor",
        &factor,
    ];
    for c in configs {
        args.extend(["--config", c]);
    }
    kafka_tool("org.apache.kafka.tools.TopicCommand", &args);
}

fn produce(bootstrap: &str, topic: &str, records: u64, acks: &str) -> Produced {
    let props = format!("bootstrap.servers={bootstrap}");
    let acks = format!("acks={acks}");
    let out = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            &acks,
            "linger.ms=5",
            "batch.size=131072",
        ],
    );
    Produced {
        records_per_s: support::producer_figure(&out, " records/sec"),
        mb_per_s: support::producer_figure(&out, " MB/sec"),
        p50_ms: support::producer_figure(&out, " ms 50th"),
        p99_ms: support::producer_figure(&out, " ms 99th"),
    }
}

/// The leader of `topic`-0 as the broker at `address` shows it (-1: none, or no answer).
async fn leader(address: &str, topic: &str) -> i32 {
    let Ok(client) = SourceClient::connect(ClientConfig::plaintext(address)).await else {
        return -1;
    };
    client
        .metadata(Some(&[topic]))
        .await
        .ok()
        .and_then(|m| Some(m.topics.get(topic)?.partitions.first()?.leader))
        .unwrap_or(-1)
}

/// Runs `crash` on the leader of `topic`-0 and times until another broker (`observers`, by
/// node id) shows a live new leader; then `revive` brings it back. Seconds.
async fn election(
    topic: &str,
    observers: &[(i32, String)],
    crash: impl Fn(i32),
    revive: impl Fn(i32),
) -> f64 {
    let first = leader(&observers[0].1, topic).await;
    assert!(first > 0, "{topic}-0 has a leader");
    let watcher = observers
        .iter()
        .find(|(id, _)| *id != first)
        .map(|(_, a)| a.clone())
        .expect("another broker");
    let started = Instant::now();
    crash(first);
    loop {
        let now = leader(&watcher, topic).await;
        if now > 0 && now != first {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no new leader"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed().as_secs_f64();
    revive(first);
    // The revived broker back in the ISR before the next measure.
    tokio::time::sleep(Duration::from_secs(8)).await;
    took
}

fn kafka3_node(verb: &str, node: i32) {
    let status = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/kafka-local.sh"
    ))
    .args([verb, &kafka_env("KMIRROR_KAFKA3_DATA"), &node.to_string()])
    .output()
    .expect("kafka-local.sh runs")
    .status;
    assert!(status.success(), "kafka-local.sh {verb} {node}");
}

fn kafka3_term(node: i32) {
    let pid = std::fs::read_to_string(format!(
        "{}/node-{node}/pid",
        kafka_env("KMIRROR_KAFKA3_DATA")
    ))
    .expect("the node's pid");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", pid.trim()])
        .status();
}

fn main() {
    let records: u64 = std::env::var("REPLICATED_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let run = std::process::id();
    let kafka3 = kafka_env("KMIRROR_KAFKA3_BOOTSTRAP");
    let cluster = LocalCluster::start(
        3,
        "min.insync.replicas=2\nbroker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=4000\n",
    );
    let single_dir = tempfile::tempdir().expect("temp dir");
    let (mut single, single_address) = support::spawn_kmirror(single_dir.path(), "");
    println!(
        "replicated_produce: {records} records of 1 KiB into {PARTITIONS} partitions, linger.ms=5, batch.size=128 KiB"
    );
    let topic = |what: &str| format!("rp-{run}-{what}");
    create(&cluster.bootstrap(), &topic("k3"), 3, &[]);
    create(&single_address, &topic("k1"), 1, &[]);
    create(&kafka3, &topic("a3"), 3, &["min.insync.replicas=2"]);
    let runs = [
        (
            "kmirror 3 brokers RF=3 acks=all",
            produce(&cluster.bootstrap(), &topic("k3"), records, "all"),
        ),
        (
            "kmirror 1 broker RF=1 acks=1",
            produce(&single_address, &topic("k1"), records, "1"),
        ),
        (
            "Kafka 3 brokers RF=3 acks=all",
            produce(&kafka3, &topic("a3"), records, "all"),
        ),
    ];
    let kafka = &runs[2].1;
    for (what, p) in &runs {
        println!(
            "{what:<34} {:>10.0} records/s {:>7.1} MB/s  p50 {:>6.0} ms  p99 {:>6.0} ms  \
             throughput/Kafka's {:.2}  p99/Kafka's {:.2}",
            p.records_per_s,
            p.mb_per_s,
            p.p50_ms,
            p.p99_ms,
            p.records_per_s / kafka.records_per_s,
            p.p99_ms / kafka.p99_ms,
        );
    }
    support::terminate(&mut single);

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let kmirror_nodes: Vec<(i32, String)> = cluster
        .clients
        .iter()
        .enumerate()
        .map(|(i, a)| (i as i32 + 1, a.clone()))
        .collect();
    let kafka_nodes: Vec<(i32, String)> = kafka3
        .split(',')
        .enumerate()
        .map(|(i, a)| (i as i32 + 1, a.to_string()))
        .collect();
    let elections = [
        (
            "kmirror SIGKILL",
            runtime.block_on(election(
                &topic("k3"),
                &kmirror_nodes,
                |n| cluster.kill(n as usize),
                |n| cluster.restart(n as usize),
            )),
        ),
        (
            "kmirror SIGTERM",
            runtime.block_on(election(
                &topic("k3"),
                &kmirror_nodes,
                |n| cluster.signal(n as usize, "TERM"),
                |n| cluster.restart(n as usize),
            )),
        ),
        (
            "Kafka SIGKILL",
            runtime.block_on(election(
                &topic("a3"),
                &kafka_nodes,
                |n| kafka3_node("kill-node", n),
                |n| kafka3_node("start-node", n),
            )),
        ),
        (
            "Kafka SIGTERM",
            runtime.block_on(election(&topic("a3"), &kafka_nodes, kafka3_term, |n| {
                kafka3_node("start-node", n)
            })),
        ),
    ];
    for (what, seconds) in elections {
        println!("leader election after {what:<16} {seconds:>6.2} s");
    }
}
