//! The reference broker against Apache Kafka's broker, same clients, same settings, same run
//! (`scripts/bench.sh broker_vs_kafka`, which starts Kafka with scripts/kafka-local.sh).
//!
//! For one partition and for eight: Kafka's ProducerPerformance writes `BROKER_BENCH_RECORDS`
//! (default 500,000) records of 1 KiB with acks=all and `BROKER_BENCH_COMPRESSION` (default
//! `none`; `lz4`, `gzip`, ... as Kafka's `compression.type`), then ConsumerPerformance reads them all,
//! against a `kmirror broker` process (release build) and against Kafka. Prints records/s, MB/s,
//! the ratio kmirror/Kafka, and each broker's CPU seconds over the workload and peak RSS.
//! Consumer figures are ConsumerPerformance's `fetch.*` columns (reading, group join excluded;
//! the join time is printed on its own line). `BROKER_BENCH_PARTITIONS` (default `1,8`) picks the
//! partition counts.

mod support;

use kmirror_protocol::kafka_tools::{kafka_env, kafka_tool};
use support::{
    consumer_performance_columns, cpu_seconds, kafka_pid, peak_rss_mib, spawn_kmirror, terminate,
};

struct Figures {
    produce_rps: f64,
    produce_mbps: f64,
    consume_rps: f64,
    consume_mbps: f64,
    join_ms: f64,
    cpu: f64,
}

fn workload(
    address: &str,
    pid: u32,
    topic: &str,
    partitions: u32,
    records: u64,
    compression: &str,
) -> Figures {
    kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            address,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
    );
    let cpu_before = cpu_seconds(pid);
    let props = format!("bootstrap.servers={address}");
    let compression = format!("compression.type={compression}");
    let produced = kafka_tool(
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
            "acks=all",
            "linger.ms=5",
            "batch.size=131072",
            &compression,
        ],
    );
    let (produce_rps, produce_mbps) = (
        support::producer_figure(&produced, " records/sec"),
        support::producer_figure(&produced, " MB/sec"),
    );
    let consumed = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            address,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--timeout",
            "60000",
            "--hide-header",
        ],
    );
    let cols = consumer_performance_columns(&consumed);
    assert_eq!(cols[4] as u64, records, "every record consumed");
    Figures {
        produce_rps,
        produce_mbps,
        // fetch.nMsg.sec and fetch.MB.sec: the reading, without the group join.
        consume_rps: cols[9],
        consume_mbps: cols[8],
        join_ms: cols[6],
        cpu: cpu_seconds(pid) - cpu_before,
    }
}

fn main() {
    let records: u64 = std::env::var("BROKER_BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let compression =
        std::env::var("BROKER_BENCH_COMPRESSION").unwrap_or_else(|_| "none".to_string());
    let partition_counts: Vec<u32> = std::env::var("BROKER_BENCH_PARTITIONS")
        .unwrap_or_else(|_| "1,8".to_string())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("BROKER_BENCH_PARTITIONS: counts like 1,8")
        })
        .collect();
    let kafka_address = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let kafka_pid = kafka_pid(&kafka_env("KMIRROR_KAFKA_DATA"));
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut kmirror, kmirror_address) = spawn_kmirror(dir.path(), "");
    let run = std::process::id();
    println!(
        "broker_vs_kafka: {records} records of 1 KiB, compression {compression}, acks=all, linger.ms=5, batch.size=128 KiB"
    );
    for partitions in partition_counts {
        let topic = format!("bench-{run}-{partitions}");
        let k = workload(
            &kmirror_address,
            kmirror.id(),
            &topic,
            partitions,
            records,
            &compression,
        );
        let a = workload(
            &kafka_address,
            kafka_pid,
            &topic,
            partitions,
            records,
            &compression,
        );
        for (what, km, ak) in [
            ("produce records/s", k.produce_rps, a.produce_rps),
            ("produce MB/s", k.produce_mbps, a.produce_mbps),
            ("consume records/s", k.consume_rps, a.consume_rps),
            ("consume MB/s", k.consume_mbps, a.consume_mbps),
            ("group join ms", k.join_ms, a.join_ms),
            ("broker CPU s", k.cpu, a.cpu),
        ] {
            println!(
                "partitions={partitions} {what:<18} kmirror {km:>12.1}  kafka {ak:>12.1}  ratio {:.2}",
                km / ak
            );
        }
    }
    println!(
        "peak RSS MiB: kmirror {:.0}  kafka {:.0} (JVM heap fixed at 512 MiB by kafka-local.sh)",
        peak_rss_mib(kmirror.id()),
        peak_rss_mib(kafka_pid)
    );
    terminate(&mut kmirror);
}
