//! Fetch throughput of the source client against Apache Kafka's own consumer, same data, same
//! run (`scripts/bench.sh source_fetch`, which starts Kafka with scripts/kafka-local.sh).
//!
//! Produces ~1 GiB of 1 KiB uncompressed records into a one-partition topic with Kafka's
//! ProducerPerformance, then reads it all with ConsumerPerformance (its own MB/s) and with
//! `SourceClient::fetch` at two per-partition fetch sizes, and prints MB/s and the ratio.
//! Set `SOURCE_FETCH_MB` for another size.

use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::{
    ClientConfig, FetchPartitionSpec, FetchSpec, Isolation, SourceClient,
};
use kmirror_protocol::kafka_tools::{kafka_env, kafka_tool};
use std::time::Instant;

async fn read_all(client: &SourceClient, topic: &str, partition_max_bytes: i32) -> (u64, f64) {
    let meta = client.metadata(Some(&[topic])).await.expect("metadata");
    let t = &meta.topics[topic];
    let leader = t.partitions[0].leader;
    let (end, _) = client
        .list_offsets(leader, topic, 0, -1, Isolation::ReadUncommitted)
        .await
        .expect("end");
    let started = Instant::now();
    let mut offset = 0;
    let mut bytes = 0u64;
    while offset < end {
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: topic.to_string(),
                topic_id: t.topic_id,
                partition: 0,
                offset,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                max_bytes: partition_max_bytes,
            }],
            isolation: Isolation::ReadCommitted,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 50 << 20,
        };
        let answer = client.fetch(leader, &spec).await.expect("fetch").remove(0);
        for batch in RecordBatches::new(answer.records) {
            let batch = batch.expect("valid");
            bytes += batch.size() as u64;
            offset = batch.next_offset();
        }
    }
    (bytes, started.elapsed().as_secs_f64())
}

fn main() {
    let megabytes: u64 = std::env::var("SOURCE_FETCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let records = (megabytes * 1024).to_string();
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("bench-fetch-{}", std::process::id());
    kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--create",
            "--topic",
            &topic,
            "--partitions",
            "1",
        ],
    );
    let props = format!("bootstrap.servers={bootstrap}");
    let started = Instant::now();
    kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            &topic,
            "--num-records",
            &records,
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            "acks=1",
            "linger.ms=10",
            "batch.size=262144",
            "compression.type=none",
        ],
    );
    println!(
        "produced {megabytes} MiB in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A first read warms the page cache and the broker's JIT for both readers.
    kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--messages",
            &records,
        ],
    );
    let started = Instant::now();
    let out2 = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--messages",
            &records,
        ],
    );
    let java_wall = started.elapsed().as_secs_f64();
    // The summary line: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
    // nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec (MB = 2^20 bytes).
    // fetch.MB.sec leaves out the consumer group's join, which a mirror does not have.
    let summary = out2
        .lines()
        .rfind(|l| {
            l.matches(',').count() >= 5 && l.chars().next().is_some_and(|c| c.is_ascii_digit())
        })
        .unwrap_or_else(|| panic!("no ConsumerPerformance summary in:\n{out2}"));
    let fields: Vec<&str> = summary.split(',').map(str::trim).collect();
    let java_mb_s: f64 = fields[8].parse().expect("fetch.MB.sec");
    let java_with_join: f64 = fields[3].parse().expect("MB.sec");

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = runtime
        .block_on(SourceClient::connect(ClientConfig::plaintext(&bootstrap)))
        .expect("connects");
    println!();
    let row =
        |name: &str, value: f64, ratio: &str| println!("{name:<46} {value:>10.1} {ratio:>10}");
    println!("{:<46} {:>10} {:>10}", "reader", "MiB/s", "vs Java");
    row("Kafka ConsumerPerformance, fetch.MB.sec", java_mb_s, "1.00");
    row("  same, MB.sec (with the group join)", java_with_join, "");
    row(
        "  same, wall clock with JVM start",
        megabytes as f64 / java_wall,
        "",
    );
    for partition_max in [1 << 20, 8 << 20] {
        let (bytes, secs) = runtime.block_on(read_all(&client, &topic, partition_max));
        let mb_s = bytes as f64 / (1 << 20) as f64 / secs;
        let name = format!(
            "kmirror SourceClient::fetch, {} MiB/partition",
            partition_max >> 20
        );
        row(&name, mb_s, &format!("{:.2}", mb_s / java_mb_s));
    }
}
