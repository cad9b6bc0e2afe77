//! KIP-848's consumer group protocol (`group.protocol=consumer`) with Apache Kafka 4.4's own
//! Java tools against a `kmirror broker` process: console consumers share a topic's partitions
//! and take over those of a member that leaves, committing as they go; a VerifiableConsumer
//! reads every record exactly once across a broker killed with SIGKILL and restarted.

use super::{create_with_kafka_tools, described_offsets, spawn_broker_on, stop_broker};
use kmirror_protocol::kafka_tools::{kafka_tool, kafka_tool_command};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Group timing a test can wait for: 6 s sessions, 500 ms heartbeats.
const FAST_GROUPS: &str = "group.consumer.session.timeout.ms=6000\ngroup.consumer.min.session.timeout.ms=6000\ngroup.consumer.heartbeat.interval.ms=500\ngroup.consumer.min.heartbeat.interval.ms=500\n";

/// A Kafka tool running in the background, its stdout in a file; killed if the test fails.
struct Tool(Child);

impl Tool {
    fn spawn(class: &str, args: &[&str], stdout: &Path) -> Tool {
        let out = std::fs::File::create(stdout).expect("creates the output file");
        let child = kafka_tool_command(class, args)
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("java runs");
        Tool(child)
    }

    /// SIGTERM, as an operator stops a consumer: it commits and leaves the group.
    fn stop(mut self) {
        Command::new("kill")
            .arg(self.0.id().to_string())
            .status()
            .expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self.0.try_wait().expect("waits").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the tool did not stop within 30 s of SIGTERM");
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `check` every 500 ms until it answers, failing with `what` after `timeout`.
async fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `#PARTITIONS` of each member `kafka-consumer-groups --describe --members` shows, sorted.
fn member_partitions(address: &str, group: &str) -> Vec<usize> {
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            address,
            "--describe",
            "--members",
            "--group",
            group,
        ],
    );
    let mut counts: Vec<usize> = out
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() >= 5 && cols[0] == group).then(|| cols[4].parse().ok())?
        })
        .collect();
    counts.sort();
    counts
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// VerifiableProducer: `count` records valued `prefix.N`, keys spread over 60 values, acks=all.
fn produce_numbered(address: &str, topic: &str, prefix: u32, count: u32) {
    let out = kafka_tool(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            address,
            "--topic",
            topic,
            "--max-messages",
            &count.to_string(),
            "--acks",
            "-1",
            "--value-prefix",
            &prefix.to_string(),
            "--repeating-keys",
            "60",
        ],
    );
    assert!(out.contains(&format!("\"acked\":{count}")), "{out}");
}

/// Three ConsoleConsumers with `group.protocol=consumer` share a 6-partition topic (2 each,
/// as `kafka-consumer-groups --describe --members` shows); one is stopped, the other two take
/// over its partitions (3 each) and read what is produced next; every record is read exactly
/// once, and the committed offsets reach the log ends.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn console_consumers_of_the_consumer_protocol_share_partitions_and_take_over_from_one_that_leaves()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = super::free_port().await;
    let (broker, address) = spawn_broker_on(dir.path(), port, FAST_GROUPS).await;
    create_with_kafka_tools(&address, "shared", 6);
    produce_numbered(&address, "shared", 1, 600);
    let outputs: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("consumer-{i}.out")))
        .collect();
    let mut consumers: Vec<Option<Tool>> = outputs
        .iter()
        .map(|out| {
            Some(Tool::spawn(
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                &[
                    "--bootstrap-server",
                    &address,
                    "--topic",
                    "shared",
                    "--group",
                    "sharers",
                    "--from-beginning",
                    "--consumer-property",
                    "group.protocol=consumer",
                    "--consumer-property",
                    "auto.commit.interval.ms=500",
                ],
                out,
            ))
        })
        .collect();
    wait_for(
        "three members with two partitions each",
        Duration::from_secs(90),
        || (member_partitions(&address, "sharers") == [2, 2, 2]).then_some(()),
    )
    .await;
    let read = |outs: &[std::path::PathBuf], prefix: &str| -> BTreeSet<String> {
        outs.iter()
            .flat_map(|o| lines(o))
            .filter(|v| v.starts_with(prefix))
            .collect()
    };
    wait_for(
        "the first 600 records read",
        Duration::from_secs(60),
        || (read(&outputs, "1.").len() == 600).then_some(()),
    )
    .await;
    consumers[0].take().expect("running").stop();
    wait_for(
        "two members with three partitions each",
        Duration::from_secs(60),
        || (member_partitions(&address, "sharers") == [3, 3]).then_some(()),
    )
    .await;
    produce_numbered(&address, "shared", 2, 600);
    wait_for(
        "the next 600 records read by the two left",
        Duration::from_secs(60),
        || (read(&outputs[1..], "2.").len() == 600).then_some(()),
    )
    .await;
    let every: Vec<String> = outputs
        .iter()
        .flat_map(|o| lines(o))
        .filter(|v| v.starts_with("1.") || v.starts_with("2."))
        .collect();
    let distinct: BTreeSet<&String> = every.iter().collect();
    assert_eq!(every.len(), 1200, "each record read exactly once");
    assert_eq!(distinct.len(), 1200);
    assert!(
        !lines(&outputs[0]).iter().any(|v| v.starts_with("2.")),
        "the member that left read nothing after it left"
    );
    let rows = wait_for(
        "offsets committed at the log ends",
        Duration::from_secs(30),
        || {
            let rows = described_offsets(&address, "sharers", "shared");
            (rows.len() == 6 && rows.iter().all(|(_, current, end, _)| current == end))
                .then_some(rows)
        },
    )
    .await;
    assert_eq!(rows.iter().map(|r| r.2).sum::<i64>(), 1200);
    for c in consumers.iter_mut() {
        if let Some(tool) = c.take() {
            tool.stop();
        }
    }
    stop_broker(broker);
}

/// Offsets a VerifiableConsumer reported consumed, per partition, as [min, max] ranges in order.
fn consumed_ranges(path: &Path) -> BTreeMap<i64, Vec<(i64, i64)>> {
    let mut out: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for line in lines(path) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if event["name"] != "records_consumed" {
            continue;
        }
        for p in event["partitions"].as_array().into_iter().flatten() {
            let (Some(partition), Some(min), Some(max)) = (
                p["partition"].as_i64(),
                p["minOffset"].as_i64(),
                p["maxOffset"].as_i64(),
            ) else {
                continue;
            };
            out.entry(partition).or_default().push((min, max));
        }
    }
    out
}

fn consumed_count(ranges: &BTreeMap<i64, Vec<(i64, i64)>>) -> i64 {
    ranges
        .values()
        .flatten()
        .map(|(min, max)| max - min + 1)
        .sum()
}

/// A VerifiableConsumer of the consumer protocol (committing after each poll of 20 records)
/// reads a topic while the broker is killed with SIGKILL and restarted on the same port: the
/// member keeps its epoch and partitions (the group is durable), so every record is read once,
/// none lost, none repeated, and the committed offsets reach the log ends.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_verifiable_consumer_of_the_consumer_protocol_loses_and_repeats_nothing_across_a_broker_kill()
 {
    const RECORDS: i64 = 30_000;
    let dir = tempfile::tempdir().expect("temp dir");
    let port = super::free_port().await;
    let (broker, address) = spawn_broker_on(dir.path(), port, FAST_GROUPS).await;
    create_with_kafka_tools(&address, "steady", 4);
    produce_numbered(&address, "steady", 1, RECORDS as u32);
    let config = dir.path().join("consumer.properties");
    std::fs::write(&config, "max.poll.records=20\n").expect("writes");
    let events = dir.path().join("events.jsonl");
    let consumer = Tool::spawn(
        "org.apache.kafka.tools.VerifiableConsumer",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "steady",
            "--group-id",
            "steady-readers",
            "--group-protocol",
            "consumer",
            "--reset-policy",
            "earliest",
            "--consumer.config",
            config.to_str().expect("utf-8 path"),
        ],
        &events,
    );
    let at_kill = wait_for("a quarter read", Duration::from_secs(90), || {
        let n = consumed_count(&consumed_ranges(&events));
        (n >= RECORDS / 4).then_some(n)
    })
    .await;
    drop(broker);
    assert!(
        at_kill < RECORDS,
        "the kill came before the end ({at_kill} read)"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (broker, address) = spawn_broker_on(dir.path(), port, FAST_GROUPS).await;
    let ranges = wait_for(
        "every record read after the restart",
        Duration::from_secs(120),
        || {
            let ranges = consumed_ranges(&events);
            (consumed_count(&ranges) >= RECORDS).then_some(ranges)
        },
    )
    .await;
    // Nothing read twice: each partition's ranges follow one another without overlap.
    let mut total = 0;
    for (partition, list) in &ranges {
        let mut next = 0;
        for (min, max) in list {
            assert_eq!(
                *min, next,
                "partition {partition}: read from {min} after reaching {next} (a gap or a repeat)"
            );
            next = max + 1;
        }
        total += next;
    }
    assert_eq!(total, RECORDS, "every record read once");
    let rows = wait_for(
        "offsets committed at the log ends",
        Duration::from_secs(30),
        || {
            let rows = described_offsets(&address, "steady-readers", "steady");
            (rows.len() == 4 && rows.iter().all(|(_, current, end, _)| current == end))
                .then_some(rows)
        },
    )
    .await;
    assert_eq!(rows.iter().map(|r| r.2).sum::<i64>(), RECORDS);
    consumer.stop();
    stop_broker(broker);
}
