//! Apache Kafka's command-line tools (producer and consumer performance, console consumer,
//! kafka-topics, kafka-consumer-groups, the transactional message copier) run from the distribution `scripts/test.sh` and
//! `scripts/bench.sh` download, for interop tests and benchmarks (feature `test-util`).
//! They read `KMIRROR_KAFKA_*` variables, which those scripts export.

use std::collections::BTreeMap;
use std::process::{Command, Output};

/// A `KMIRROR_KAFKA_*` variable; panics with how to get it when it is not set.
pub fn kafka_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these through scripts/test.sh or scripts/bench.sh")
    })
}

/// The command running one tool class with the distribution's jars and quiet logging.
pub fn kafka_tool_command(class: &str, args: &[&str]) -> Command {
    let dist = kafka_env("KMIRROR_KAFKA_DIST");
    let mut command = Command::new("java");
    command
        .arg("-cp")
        .arg(format!("{dist}/libs/*"))
        .arg(format!(
            "-Dlog4j2.configurationFile=file:{dist}/log4j2.properties"
        ))
        .arg(class)
        .args(args);
    command
}

/// Runs one tool class with the distribution's jars and quiet logging; returns its output.
pub fn kafka_tool_output(class: &str, args: &[&str]) -> Output {
    kafka_tool_command(class, args).output().expect("java runs")
}

/// Runs one tool class, asserts it succeeded, and returns its stdout and stderr together.
pub fn kafka_tool(class: &str, args: &[&str]) -> String {
    let out = kafka_tool_output(class, args);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{class} {args:?} failed:\n{text}");
    text
}

/// `kafka-topics --create --if-not-exists` with `--config` entries.
pub fn create_topic(bootstrap: &str, name: &str, partitions: u32, configs: &[&str]) {
    create_topic_of(bootstrap, name, partitions, None, configs);
}

/// TopicCommand --create of `name` with `replication_factor` replicas per partition.
pub fn create_replicated_topic(
    bootstrap: &str,
    name: &str,
    partitions: u32,
    replication_factor: u32,
) {
    create_topic_of(bootstrap, name, partitions, Some(replication_factor), &[]);
}

fn create_topic_of(
    bootstrap: &str,
    name: &str,
    partitions: u32,
    replication_factor: Option<u32>,
    configs: &[&str],
) {
    let partitions = partitions.to_string();
    let factor = replication_factor.map(|f| f.to_string());
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--if-not-exists",
        "--topic",
        name,
        "--partitions",
        &partitions,
    ];
    if let Some(factor) = &factor {
        args.extend(["--replication-factor", factor]);
    }
    for c in configs {
        args.extend(["--config", c]);
    }
    kafka_tool("org.apache.kafka.tools.TopicCommand", &args);
}

/// The producer property that spreads records over every partition in turn (Kafka's default
/// sticky partitioner fills a few batches at a time: a small run can leave a partition empty).
pub const ROUND_ROBIN: &str =
    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner";

/// ProducerPerformance: `records` records of 200 bytes with `compression`, `acks=all`,
/// `linger.ms=5`, and `extra` producer properties.
pub fn produce(bootstrap: &str, topic: &str, records: u32, compression: &str, extra: &[&str]) {
    let bootstrap = format!("bootstrap.servers={bootstrap}");
    let compression = format!("compression.type={compression}");
    let records = records.to_string();
    let mut args = vec![
        "--topic",
        topic,
        "--num-records",
        &records,
        "--record-size",
        "200",
        "--throughput",
        "-1",
        "--producer-props",
        bootstrap.as_str(),
        compression.as_str(),
        "acks=all",
        "linger.ms=5",
    ];
    args.extend(extra);
    kafka_tool("org.apache.kafka.tools.ProducerPerformance", &args);
}

/// TransactionalMessageCopier: copies `messages` records of partition 0 of `input` to `output`
/// in transactions of 100 with random aborts, committing the consumed offsets of group `id` in
/// each transaction (transactional id `id` too).
pub fn copy_transactionally(bootstrap: &str, input: &str, output: &str, id: &str, messages: u32) {
    let messages = messages.to_string();
    kafka_tool(
        "org.apache.kafka.tools.TransactionalMessageCopier",
        &[
            "--broker-list",
            bootstrap,
            "--input-topic",
            input,
            "--input-partition",
            "0",
            "--output-topic",
            output,
            "--transactional-id",
            id,
            "--consumer-group",
            id,
            "--max-messages",
            &messages,
            "--transaction-size",
            "100",
            "--enable-random-aborts",
        ],
    );
}

/// VerifiableProducer (`acks=-1`) writing `count` records to `topic`: how many were acknowledged
/// (-1 if it reported no figures), and its output.
pub fn verifiable_produce(bootstrap: &str, topic: &str, count: u32) -> (i64, String) {
    let out = kafka_tool(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--max-messages",
            &count.to_string(),
            "--acks",
            "-1",
        ],
    );
    let acked = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["name"] == "tool_data")
        .and_then(|v| v["acked"].as_i64())
        .unwrap_or(-1);
    (acked, out)
}

/// `kafka-consumer-groups --reset-offsets --to-offset`: group `group` (without members) has
/// read `offset` records of every partition of `topic`; returns the tool's output.
pub fn reset_group_offsets(bootstrap: &str, group: &str, topic: &str, offset: i64) -> String {
    kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--reset-offsets",
            "--to-offset",
            &offset.to_string(),
            "--execute",
        ],
    )
}

/// The values the console consumer prints reading all of `topic` at `isolation`
/// (`read_committed` or `read_uncommitted`), the numeric ones VerifiableProducer writes.
pub fn console_values(bootstrap: &str, topic: &str, isolation: &str) -> Vec<String> {
    numeric_lines(&kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--from-beginning",
            "--isolation-level",
            isolation,
            "--timeout-ms",
            "10000",
        ],
    ))
}

/// The values the console consumer of group `group` prints reading at most `max` records of
/// `topic` from the group's committed offsets (from the start without one), committing as it
/// goes (the consumer's auto-commit, and its final commit when it closes).
pub fn group_values(bootstrap: &str, topic: &str, group: &str, max: u32) -> Vec<String> {
    numeric_lines(&kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--max-messages",
            &max.to_string(),
            "--consumer-property",
            "auto.offset.reset=earliest",
            "--timeout-ms",
            "20000",
        ],
    ))
}

/// The lines of `text` that are numbers (the values VerifiableProducer writes).
fn numeric_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// `kafka-consumer-groups --describe`: group `group`'s committed offset of each partition of
/// `topic` (partitions without one are left out); `None` when the tool failed (no coordinator
/// answered, for one).
pub fn group_offsets(bootstrap: &str, group: &str, topic: &str) -> Option<BTreeMap<i32, i64>> {
    let out = kafka_tool_output(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ],
    );
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|cols| cols.len() > 5 && cols[0] == group && cols[1] == topic)
            .filter_map(|cols| Some((cols[2].parse().ok()?, cols[3].parse().ok()?)))
            .collect(),
    )
}
