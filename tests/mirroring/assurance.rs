//! Proof before the disaster, against Apache Kafka as the source and `kmirror broker`
//! processes driven with `kmirror mirrors` (docs/failover.md):
//! - `--verify` passes a clean mirror, finds one byte corrupted in a destination segment behind
//!   the broker's back, and finds where a failed-over topic's history diverged from the
//!   source's; the last result per partition is a metric;
//! - the offsets the source's retention deleted before a paused mirror copied them are counted
//!   exactly (describe, metric, log), and `mirror.source.gap.policy=fail` fails the partition
//!   instead, until the policy changes;
//! - `--failover --dry-run` with the source gone in the middle of a transaction's copy predicts
//!   the stop's cut record for record;
//! - `--failover --consistent` over three topics leaves no record newer than its point in any
//!   of them, and asks for the count it cuts;
//! - an idempotent producer whose id the destination allocated, equal to a mirrored producer
//!   id of the topic it writes after the failover, loses nothing as a duplicate.

use super::process::{BrokerProcess, described_partitions, free_port, spawn_broker_with};
use kafka_protocol::records::Compression;
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::source::EARLIEST;
use kmirror_protocol::client::{FetchPartitionSpec, FetchSpec, Isolation};
use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::client::{Outcome, Producer, RetryingProducer, read_back, resend};
use kmirror_testkit::local_cluster::scrape_text;
use kmirror_testkit::source::{source_client, source_ends};
use std::time::{Duration, Instant};

/// A destination `kmirror broker` refreshing metadata every 500 ms, with its metrics served:
/// the process, its address and its metrics address.
pub(super) fn destination(dir: &std::path::Path) -> (BrokerProcess, String, String) {
    let (port, metrics) = (free_port(), free_port());
    let broker = spawn_broker_with(
        dir,
        port,
        &format!(
            "mirror.metadata.refresh.interval.ms=500\nmetrics.listener=http://127.0.0.1:{metrics}\n"
        ),
    );
    (
        broker,
        format!("127.0.0.1:{port}"),
        format!("127.0.0.1:{metrics}"),
    )
}

/// `kmirror mirrors --create` of `mirror` with the properties `configs`.
pub(super) fn create(dir: &std::path::Path, address: &str, mirror: &str, configs: &str) {
    let path = dir.join(format!("{mirror}.properties"));
    std::fs::write(&path, configs).expect("written");
    cli_ok(
        address,
        &[
            "--create",
            "--mirror",
            mirror,
            "--mirror-config",
            path.to_str().expect("UTF-8"),
        ],
    );
}

pub(super) fn cli_ok(address: &str, args: &[&str]) -> String {
    let (code, text) = mirrors_cli(address, args);
    assert_eq!(code, Some(0), "kmirror mirrors {args:?}: {text}");
    text
}

/// The JSON the command printed (its first line that is JSON).
pub(super) fn json_of(text: &str) -> serde_json::Value {
    text.lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in {text}"))
}

/// Kafka's kafka-topics creating `topic`, off the test's runtime.
pub(super) async fn create_topic(bootstrap: &str, topic: &str, partitions: u32) {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        kafka_tools::create_topic(&bootstrap, &topic, partitions, &[])
    })
    .await
    .expect("created");
}

/// Kafka's producer writing `records` records to `topic`, off the test's runtime.
pub(super) async fn produce(bootstrap: &str, topic: &str, records: u32) {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        kafka_tools::produce(&bootstrap, &topic, records, "lz4", &[]);
    })
    .await
    .expect("produced");
}

/// Waits until `check` holds of `topic`'s partitions as described, up to 90 s.
pub(super) async fn wait_until(
    address: &str,
    mirror: &str,
    topic: &str,
    what: &str,
    check: impl Fn(&[kmirror_protocol::messages::describe_mirrors_response::DescribedPartition]) -> bool,
) -> Vec<kmirror_protocol::messages::describe_mirrors_response::DescribedPartition> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = described_partitions(address, mirror, topic).await;
        if !now.is_empty() && check(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {now:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A metric's value in a scrape, for the series whose labels include all of `labels`.
pub(super) fn metric(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The byte positions where each batch of a segment file starts, with its base offset.
fn batch_positions(segment: &[u8]) -> Vec<(usize, i64)> {
    let mut out = Vec::new();
    let mut position = 0;
    while position + 12 <= segment.len() {
        let base = i64::from_be_bytes(segment[position..position + 8].try_into().expect("8"));
        let length =
            i32::from_be_bytes(segment[position + 8..position + 12].try_into().expect("4"));
        out.push((position, base));
        position += 12 + length as usize;
    }
    out
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn verify_passes_a_clean_mirror_and_finds_a_corrupt_byte_and_a_divergent_tail() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (clean, diverged) = (format!("verify-{run}-clean"), format!("verify-{run}-tail"));
    create_topic(&bootstrap, &clean, 2).await;
    create_topic(&bootstrap, &diverged, 1).await;
    produce(&bootstrap, &clean, 3_000).await;
    produce(&bootstrap, &diverged, 500).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    cli_ok(
        &address,
        &[
            "--start",
            "--mirror",
            "dr",
            "--topics",
            &format!("{clean},{diverged}"),
        ],
    );
    let source = source_client(&bootstrap).await;
    let clean_ends = source_ends(&source, &clean, 2).await;
    let tail_end = source_ends(&source, &diverged, 1).await[0];
    wait_until(&address, "dr", &clean, "caught up", |p| {
        p.iter()
            .zip(&clean_ends)
            .all(|(p, end)| p.state == "MIRRORING" && p.destination_offset == *end)
    })
    .await;
    wait_until(&address, "dr", &diverged, "caught up", |p| {
        p[0].state == "MIRRORING" && p[0].destination_offset == tail_end
    })
    .await;

    // A clean mirror verifies, every offset of it, while it mirrors.
    let text = cli_ok(
        &address,
        &["--verify", "--mirror", "dr", "--topics", &clean, "--json"],
    );
    let rows = json_of(&text);
    for (row, end) in rows.as_array().expect("rows").iter().zip(&clean_ends) {
        assert_eq!(row["verifiedTo"], *end, "{text}");
        assert_eq!(row["differenceOffset"], serde_json::Value::Null, "{text}");
        assert!(row["bytes"].as_i64().is_some_and(|b| b > 0), "{text}");
    }
    let text = cli_ok(
        &address,
        &[
            "--verify", "--mirror", "dr", "--topics", &clean, "--last", "100",
        ],
    );
    assert!(text.contains("OK"), "{text}");

    // One byte of a record, inside the third batch of partition 1, flipped on disk.
    let path = dir
        .path()
        .join("data")
        .join(format!("{clean}-1"))
        .join("00000000000000000000.log");
    let mut bytes = std::fs::read(&path).expect("the segment");
    let (position, base) = batch_positions(&bytes)[2];
    bytes[position + 80] ^= 0x5a;
    std::fs::write(&path, &bytes).expect("corrupted");
    let (code, text) = mirrors_cli(
        &address,
        &["--verify", "--mirror", "dr", "--topics", &clean, "--json"],
    );
    assert_eq!(code, Some(1), "a difference exits 1: {text}");
    let rows = json_of(&text);
    assert_eq!(
        rows[0]["differenceOffset"],
        serde_json::Value::Null,
        "{text}"
    );
    assert_eq!(rows[1]["differenceOffset"], base, "{text}");
    assert!(
        rows[1]["difference"]
            .as_str()
            .is_some_and(|d| d.contains("corrupt")),
        "{text}"
    );
    let scrape = scrape_text(&metrics);
    let labels = |p: &'static str| [("topic", clean.as_str()), ("partition", p)];
    assert_eq!(
        metric(&scrape, "kmirror_mirror_verify_difference", &labels("1")),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        metric(&scrape, "kmirror_mirror_verify_difference", &labels("0")),
        Some(0.0),
        "{scrape}"
    );
    bytes[position + 80] ^= 0x5a;
    std::fs::write(&path, &bytes).expect("restored");
    // A run that does not reach the difference leaves it reported; one that does clears it.
    cli_ok(
        &address,
        &[
            "--verify", "--mirror", "dr", "--topics", &clean, "--last", "10",
        ],
    );
    let difference = || {
        metric(
            &scrape_text(&metrics),
            "kmirror_mirror_verify_difference",
            &labels("1"),
        )
    };
    assert_eq!(difference(), Some(1.0));
    cli_ok(
        &address,
        &["--verify", "--mirror", "dr", "--topics", &clean],
    );
    assert_eq!(difference(), Some(0.0));
    // An idle, caught-up mirror holds the source up to now: a failover bounded to 2 s of lag
    // stops it, however long ago its last record was written.
    tokio::time::sleep(Duration::from_secs(4)).await;
    cli_ok(
        &address,
        &[
            "--failover",
            "--max-lag-seconds",
            "2",
            "--timeout",
            "30s",
            "--mirror",
            "dr",
            "--topics",
            &clean,
        ],
    );

    // The diverged topic: failed over, and written on the destination; the source, gone quiet,
    // has nothing past the failover point.
    cli_ok(
        &address,
        &["--stop", "--mirror", "dr", "--topics", &diverged],
    );
    wait_until(&address, "dr", &diverged, "STOPPED", |p| {
        p[0].state == "STOPPED"
    })
    .await;
    produce(&address, &diverged, 20).await;
    for (round, why) in [(0, "the destination holds offsets"), (1, "differ")] {
        if round == 1 {
            // Then the source takes other writes at the same offsets.
            produce(&bootstrap, &diverged, 20).await;
        }
        let (code, text) = mirrors_cli(
            &address,
            &[
                "--verify", "--mirror", "dr", "--topics", &diverged, "--json",
            ],
        );
        assert_eq!(code, Some(1), "{text}");
        let rows = json_of(&text);
        assert_eq!(
            rows[0]["differenceOffset"], tail_end,
            "the histories part where the failover wrote its barrier: {text}"
        );
        assert_eq!(
            rows[0]["verifiedTo"], tail_end,
            "below it, the copy is the source's: {text}"
        );
        assert!(
            rows[0]["difference"]
                .as_str()
                .is_some_and(|d| d.contains(why)),
            "{text}"
        );
    }
}

/// The source's log start offset of `topic`-`partition`.
async fn source_start(bootstrap: &str, topic: &str) -> i64 {
    let source = source_client(bootstrap).await;
    let metadata = source.metadata(Some(&[topic])).await.expect("metadata");
    let leader = metadata.topics[topic].partitions[0].leader;
    source
        .list_offsets(leader, topic, 0, EARLIEST, Isolation::ReadUncommitted)
        .await
        .expect("list offsets")
        .0
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn offsets_the_source_deleted_before_they_were_copied_are_counted_or_fail_the_partition() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (counted, strict) = (format!("gap-{run}-counted"), format!("gap-{run}-strict"));
    for topic in [&counted, &strict] {
        create_topic(&bootstrap, topic, 1).await;
        produce(&bootstrap, topic, 100).await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "gaps",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    create(
        dir.path(),
        &address,
        "strict",
        &format!("bootstrap.servers={bootstrap}\nmirror.source.gap.policy=fail\n"),
    );
    for (mirror, topic) in [("gaps", &counted), ("strict", &strict)] {
        cli_ok(
            &address,
            &["--start", "--mirror", mirror, "--topics", topic],
        );
        wait_until(&address, mirror, topic, "caught up", |p| {
            p[0].state == "MIRRORING" && p[0].destination_offset == 100
        })
        .await;
        cli_ok(
            &address,
            &["--pause", "--mirror", mirror, "--topics", topic],
        );
        wait_until(&address, mirror, topic, "paused", |p| {
            p[0].state == "PAUSED"
        })
        .await;
    }

    // While the mirror is paused, the source's retention deletes what it has not copied.
    for topic in [&counted, &strict] {
        produce(&bootstrap, topic, 100).await;
        let (b, t) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka_tools::kafka_tool(
                "org.apache.kafka.tools.ConfigCommand",
                &[
                    "--bootstrap-server",
                    &b,
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    &t,
                    "--alter",
                    "--add-config",
                    "retention.ms=1000,segment.ms=100",
                ],
            )
        })
        .await
        .expect("altered");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for topic in [&counted, &strict] {
        // A new segment: the old one, past retention, goes.
        produce(&bootstrap, topic, 50).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut starts = Vec::new();
    for topic in [&counted, &strict] {
        loop {
            let start = source_start(&bootstrap, topic).await;
            if start > 100 {
                starts.push(start);
                break;
            }
            assert!(Instant::now() < deadline, "retention never ran on {topic}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    // continue: the gap is counted exactly, and mirroring goes on from the source's start.
    cli_ok(
        &address,
        &["--resume", "--mirror", "gaps", "--topics", &counted],
    );
    let gap = starts[0] - 100;
    let shown = wait_until(&address, "gaps", &counted, "past the gap", |p| {
        p[0].state == "MIRRORING" && p[0].destination_offset == 250
    })
    .await;
    assert_eq!(shown[0].skipped_offsets, gap, "{shown:?}");
    let scrape = scrape_text(&metrics);
    assert_eq!(
        metric(
            &scrape,
            "kmirror_mirror_skipped_offsets_total",
            &[("topic", counted.as_str()), ("partition", "0")]
        ),
        Some(gap as f64),
        "{scrape}"
    );
    let text = cli_ok(&address, &["--describe", "--mirror", "gaps"]);
    let row = text
        .lines()
        .find(|l| l.contains(&counted))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.split_whitespace().any(|w| w == gap.to_string()),
        "{text}"
    );
    let log = std::fs::read_to_string(dir.path().join("broker.log")).expect("the log");
    assert!(
        log.contains("the source deleted these offsets before they were mirrored")
            && log.contains(&format!("to={}", starts[0] - 1)),
        "the range is logged"
    );

    // fail: the partition fails, naming the range, and keeps its log as it was.
    cli_ok(
        &address,
        &["--resume", "--mirror", "strict", "--topics", &strict],
    );
    let failed = wait_until(&address, "strict", &strict, "FAILED", |p| {
        p[0].state == "FAILED"
    })
    .await;
    let reason = failed[0].error_message.clone().unwrap_or_default();
    assert!(
        reason.contains(&format!("offsets 100 to {}", starts[1] - 1)),
        "{reason}"
    );
    assert_eq!(failed[0].destination_offset, 100, "nothing was cut");
    // The operator accepts the gap: the partition retries and counts it.
    let path = dir.path().join("accept.properties");
    std::fs::write(&path, "mirror.source.gap.policy=continue\n").expect("written");
    cli_ok(
        &address,
        &[
            "--alter",
            "--mirror",
            "strict",
            "--mirror-config",
            path.to_str().expect("UTF-8"),
        ],
    );
    let shown = wait_until(&address, "strict", &strict, "past the gap", |p| {
        p[0].state == "MIRRORING" && p[0].destination_offset == 250
    })
    .await;
    assert_eq!(shown[0].skipped_offsets, starts[1] - 100, "{shown:?}");
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn the_dry_run_predicts_the_stop_record_for_record_with_the_source_gone() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let topic = format!("dry-run-{run}");
    create_topic(&bootstrap, &topic, 1).await;
    produce(&bootstrap, &topic, 200).await;
    // One transaction of 400 records in small batches, committed: the throttled mirror copies
    // it a batch at a time.
    let (b, t, id) = (bootstrap.clone(), topic.clone(), format!("dry-run-{run}"));
    tokio::task::spawn_blocking(move || {
        kafka_tools::produce(
            &b,
            &t,
            400,
            "none",
            &[
                "batch.size=1000",
                "--transactional-id",
                &id,
                "--transaction-duration-ms",
                "600000",
            ],
        );
    })
    .await
    .expect("produced");
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, _metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\nmirror.replication.throttled.rate=2048\n"),
    );
    cli_ok(&address, &["--start", "--mirror", "dr", "--topics", &topic]);
    // Inside the transaction: its data copied, its marker not.
    wait_until(&address, "dr", &topic, "inside the transaction", |p| {
        p[0].destination_offset >= 240
    })
    .await;
    // The source is gone: its address now leads nowhere.
    let path = dir.path().join("gone.properties");
    std::fs::write(
        &path,
        format!("bootstrap.servers=127.0.0.1:{}\n", free_port()),
    )
    .expect("written");
    cli_ok(
        &address,
        &[
            "--alter",
            "--mirror",
            "dr",
            "--mirror-config",
            path.to_str().expect("UTF-8"),
        ],
    );
    // Settled: nothing more arrives.
    let mut last = -1;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = described_partitions(&address, "dr", &topic).await[0].destination_offset;
        if now == last {
            break;
        }
        last = now;
    }
    assert!(last < 200 + 400, "the marker was not copied: {last}");

    let text = cli_ok(
        &address,
        &[
            "--failover",
            "--dry-run",
            "--mirror",
            "dr",
            "--topics",
            &topic,
            "--json",
        ],
    );
    let plan = json_of(&text);
    let row = &plan["partitions"][0];
    assert_eq!(row["cutOffset"], 200, "the open transaction goes: {text}");
    let predicted = row["cutRecords"].as_i64().expect("a count");
    assert_eq!(predicted, last - 200, "{text}");
    assert_eq!(row["openTransactions"], 1, "{text}");
    assert_eq!(row["sourceReachable"], false, "{text}");
    assert!(
        row["lagMs"].as_i64().is_some(),
        "the recovery point is known: {text}"
    );
    // The table says the same, and that nothing changed.
    let table = cli_ok(
        &address,
        &[
            "--failover",
            "--dry-run",
            "--mirror",
            "dr",
            "--topics",
            &topic,
        ],
    );
    assert!(table.contains("nothing was changed"), "{table}");
    assert_eq!(
        described_partitions(&address, "dr", &topic).await[0].state,
        "MIRRORING"
    );

    cli_ok(&address, &["--stop", "--mirror", "dr", "--topics", &topic]);
    let stopped = wait_until(&address, "dr", &topic, "STOPPED", |p| {
        p[0].state == "STOPPED"
    })
    .await;
    assert_eq!(
        stopped[0].truncated_at_stop_records, predicted,
        "the stop removed what the dry run said"
    );
    assert_eq!(
        stopped[0].destination_offset, 201,
        "cut at 200, then the barrier"
    );
    let records = read_back(&address, &topic, 0).await.expect("read");
    assert_eq!(records.len(), 200, "every record below the cut stays");
}

/// Every batch of `topic`-`partition` at `address`: (its greatest timestamp, whether it is a
/// control batch).
async fn batch_times(address: &str, topic: &str, partition: i32) -> Vec<(i64, bool)> {
    let client = source_client(address).await;
    let metadata = client.metadata(Some(&[topic])).await.expect("metadata");
    let t = &metadata.topics[topic];
    let leader = t.partitions[partition as usize].leader;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: topic.to_string(),
                topic_id: t.topic_id,
                partition,
                offset,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                max_bytes: 1 << 20,
            }],
            isolation: Isolation::ReadUncommitted,
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
        };
        let answer = client.fetch(leader, &spec).await.expect("fetched");
        let before = offset;
        for batch in RecordBatches::new(answer[0].records.clone()).map_while(Result::ok) {
            offset = batch.next_offset();
            out.push((batch.max_timestamp(), batch.is_control()));
        }
        if offset == before {
            return out;
        }
    }
}

/// Starts `topics` in mirror `dr` at `address` while Kafka's producers write to all of them for
/// `seconds`; once the mirror has caught up, pauses the first topic, writes to the others and
/// lets them copy that, then pauses them: they hold records newer than the first. Returns once
/// every partition is PAUSED.
async fn copy_then_pause_staggered(
    bootstrap: &str,
    address: &str,
    topics: &[String],
    seconds: u64,
) {
    let set = topics.join(",");
    cli_ok(address, &["--start", "--mirror", "dr", "--topics", &set]);
    let writing = {
        let (b, topics) = (bootstrap.to_string(), topics.to_vec());
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(seconds) {
                for topic in &topics {
                    kafka_tools::produce(&b, topic, 200, "lz4", &[]);
                }
            }
        })
    };
    writing.await.expect("written");
    let source = source_client(bootstrap).await;
    let caught_up = |topic: &String| {
        let (source, topic) = (source.clone(), topic.clone());
        async move {
            let partitions = described_partitions(address, "dr", &topic).await.len() as i32;
            let ends = source_ends(&source, &topic, partitions.max(1)).await;
            wait_until(address, "dr", &topic, "caught up", |p| {
                p.iter()
                    .zip(&ends)
                    .all(|(p, end)| p.state == "MIRRORING" && p.destination_offset == *end)
            })
            .await;
        }
    };
    for topic in topics {
        caught_up(topic).await;
    }
    cli_ok(
        address,
        &["--pause", "--mirror", "dr", "--topics", &topics[0]],
    );
    wait_until(address, "dr", &topics[0], "paused", |p| {
        p.iter().all(|p| p.state == "PAUSED")
    })
    .await;
    for topic in &topics[1..] {
        produce(bootstrap, topic, 300).await;
        caught_up(topic).await;
    }
    let rest = topics[1..].join(",");
    cli_ok(address, &["--pause", "--mirror", "dr", "--topics", &rest]);
    for topic in topics {
        wait_until(address, "dr", topic, "paused", |p| {
            p.iter().all(|p| p.state == "PAUSED")
        })
        .await;
    }
}

/// `--failover --dry-run --consistent` of `topics`: its point and the records it would cut.
fn consistent_plan(address: &str, topics: &[String]) -> (i64, i64) {
    let set = topics.join(",");
    let plan = json_of(&cli_ok(
        address,
        &[
            "--failover",
            "--dry-run",
            "--consistent",
            "--mirror",
            "dr",
            "--topics",
            &set,
            "--json",
        ],
    ));
    let point = plan["consistentPointMs"].as_i64().expect("a point");
    let records = plan["partitions"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["cutRecords"].as_i64().expect("a count"))
        .sum();
    (point, records)
}

/// The count a refused consistent failover asks to confirm with `--discard-records`.
fn count_to_confirm(refusal: &str) -> i64 {
    refusal
        .split("--discard-records ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("the refusal names the count: {refusal}"))
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_consistent_cut_leaves_no_record_newer_than_its_point_in_any_topic() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let topics: Vec<String> = ["orders", "payments", "shipments"]
        .iter()
        .map(|t| format!("cut-{run}-{t}"))
        .collect();
    for topic in &topics {
        create_topic(&bootstrap, topic, 2).await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, _metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    let set = topics.join(",");
    copy_then_pause_staggered(&bootstrap, &address, &topics, 8).await;

    // The dry run names the point and the cut; the failover asks for the count.
    let (point, predicted) = consistent_plan(&address, &topics);
    assert!(
        predicted > 0,
        "the later topics hold records newer than orders: {point} {predicted}"
    );
    let (code, text) = mirrors_cli(
        &address,
        &[
            "--failover",
            "--consistent",
            "--mirror",
            "dr",
            "--topics",
            &set,
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    let count = count_to_confirm(&text);
    assert_eq!(
        count, predicted,
        "nothing open on the source: all the cut is the point's"
    );
    for topic in &topics {
        let now = described_partitions(&address, "dr", topic).await;
        assert!(
            now.iter().all(|p| p.state == "PAUSED"),
            "refused, nothing changed: {now:?}"
        );
    }
    let text = cli_ok(
        &address,
        &[
            "--failover",
            "--consistent",
            "--mirror",
            "dr",
            "--topics",
            &set,
            "--discard-records",
            &count.to_string(),
        ],
    );
    assert!(
        text.contains(&format!("({point} ms)")),
        "the same point: {text}"
    );
    let mut removed = 0;
    for topic in &topics {
        let stopped = wait_until(&address, "dr", topic, "STOPPED", |p| {
            p.iter().all(|p| p.state == "STOPPED")
        })
        .await;
        removed += stopped
            .iter()
            .map(|p| p.truncated_at_stop_records)
            .sum::<i64>();
        for partition in 0..2 {
            let times = batch_times(&address, topic, partition).await;
            assert!(
                !times.is_empty(),
                "{topic}-{partition} keeps its older records"
            );
            let newer: Vec<&(i64, bool)> = times
                .iter()
                .filter(|(t, control)| !control && *t > point)
                .collect();
            assert!(
                newer.is_empty(),
                "{topic}-{partition} holds records newer than {point}: {newer:?}"
            );
        }
    }
    assert_eq!(removed, count, "the stop cut what was confirmed");
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_destination_producer_id_equal_to_a_mirrored_one_loses_nothing_after_the_failover() {
    let PidsSetup {
        bootstrap,
        topic,
        local,
        dir,
        broker: _broker,
        address,
    } = pids_setup("pids").await;
    // An idempotent producer of the destination, writing before the failover.
    let mut producer = Producer::idempotent(&address);
    let values =
        |from: usize| -> Vec<String> { (from..from + 10).map(|i| format!("v{i}")).collect() };
    let outcome = producer
        .produce(&local, 0, &values(0), Compression::None)
        .await;
    assert!(matches!(outcome, Outcome::Acked(_)), "{outcome:?}");
    let pid = producer.last.as_ref().expect("sent").producer.0;
    // The source's own producer writes the topic under the same producer id.
    let mut source_producer = RetryingProducer::with_id(pid, 0);
    mirrored_then_stopped(
        dir.path(),
        &address,
        &bootstrap,
        &topic,
        &mut source_producer,
    )
    .await;

    // The same producer, and a new one, write the failed-over topic: sequences from 0, as the
    // mirrored batches of that producer id had. None may be taken for a duplicate.
    for b in 0..5 {
        let outcome = producer
            .produce(&topic, 0, &values(100 + b * 10), Compression::None)
            .await;
        let Outcome::Acked(acked) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(acked[0].offset > 50, "appended, not a duplicate: {acked:?}");
    }
    let mut fresh = Producer::idempotent(&address);
    let outcome = fresh
        .produce(&topic, 0, &values(200), Compression::None)
        .await;
    assert!(matches!(outcome, Outcome::Acked(_)), "{outcome:?}");
    let records = read_back(&address, &topic, 0).await.expect("read");
    let held: Vec<&String> = records.values().collect();
    assert_eq!(held.len(), 50 + 50 + 10, "{held:?}");
    for i in (100..150).chain(200..210) {
        assert!(
            held.contains(&&format!("v{i}")),
            "v{i} was written after the failover and is there"
        );
    }
}

/// A one-partition topic on the source (Apache Kafka) and a destination broker with a
/// one-partition topic of its own (`local`), for the producer id tests.
struct PidsSetup {
    bootstrap: String,
    topic: String,
    local: String,
    dir: tempfile::TempDir,
    broker: BrokerProcess,
    address: String,
}

async fn pids_setup(prefix: &str) -> PidsSetup {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (topic, local) = (format!("{prefix}-{run}"), format!("{prefix}-{run}-local"));
    create_topic(&bootstrap, &topic, 1).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address, _metrics) = destination(dir.path());
    assert_eq!(
        kmirror_testkit::client::create_topic(&address, &local, 1).await,
        Ok(0)
    );
    PidsSetup {
        bootstrap,
        topic,
        local,
        dir,
        broker,
        address,
    }
}

/// Writes `v0`-`v49` to the source's `topic`-0 at `bootstrap` as `producer`, in five batches,
/// mirrors the topic into the destination at `address` (mirror `dr`, state in `dir`) until it
/// holds them, and stops the mirror: the topic is writable past its MIRROR_PID_RESET barrier.
async fn mirrored_then_stopped(
    dir: &std::path::Path,
    address: &str,
    bootstrap: &str,
    topic: &str,
    producer: &mut RetryingProducer,
) {
    for b in 0..5 {
        let values: Vec<String> = (b * 10..b * 10 + 10).map(|i| format!("v{i}")).collect();
        let sent = producer.batch(topic, 0, &values, Compression::None);
        let outcome = resend(bootstrap, &sent).await;
        assert!(matches!(outcome, Outcome::Acked(_)), "{outcome:?}");
    }
    create(
        dir,
        address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    cli_ok(address, &["--start", "--mirror", "dr", "--topics", topic]);
    wait_until(address, "dr", topic, "caught up", |p| {
        p[0].state == "MIRRORING" && p[0].destination_offset == 50
    })
    .await;
    cli_ok(address, &["--stop", "--mirror", "dr", "--topics", topic]);
    wait_until(address, "dr", topic, "STOPPED", |p| p[0].state == "STOPPED").await;
}

/// A source producer that moves to the failed-over destination keeps its producer id, and the
/// destination hands that id to none of its own producers. Found by the nemesis (seed
/// 1796576582810520787), whose two clusters allocate ids from the same blocks: the moved
/// producer's batch started its id afresh past the barrier, the destination then gave the same
/// id to a new transactional producer, and that one's first batch (sequence 0) was refused
/// with OUT_OF_ORDER_SEQUENCE_NUMBER. Here the source's producer is given the id the
/// destination allocates next, on purpose. Failed before the fix: the new producer was
/// refused (error 45).
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_producer_that_moved_from_the_source_keeps_its_id_to_itself() {
    let PidsSetup {
        bootstrap,
        topic,
        local,
        dir,
        broker: _broker,
        address,
    } = pids_setup("moved").await;
    let values =
        |from: usize| -> Vec<String> { (from..from + 10).map(|i| format!("v{i}")).collect() };
    // The destination's ids go up one by one: the next is this one's and one.
    let mut first = Producer::idempotent(&address);
    let outcome = first
        .produce(&local, 0, &values(0), Compression::None)
        .await;
    assert!(matches!(outcome, Outcome::Acked(_)), "{outcome:?}");
    let next = first.last.as_ref().expect("sent").producer.0 + 1;
    assert!(next > 1 << 24, "apart from Apache Kafka's ids: {next}");
    let mut moving = RetryingProducer::with_id(next, 0);
    mirrored_then_stopped(dir.path(), &address, &bootstrap, &topic, &mut moving).await;
    // The source's producer moves: its next batch (sequence 50) lands past the barrier.
    let sent = moving.batch(&topic, 0, &values(50), Compression::None);
    let outcome = resend(&address, &sent).await;
    assert!(matches!(outcome, Outcome::Acked(_)), "moved: {outcome:?}");
    // New producers of the destination, idempotent and transactional, get other ids and write.
    let mut fresh = Producer::idempotent(&address);
    let outcome = fresh
        .produce(&topic, 0, &values(100), Compression::None)
        .await;
    assert!(
        matches!(outcome, Outcome::Acked(_)),
        "idempotent: {outcome:?}"
    );
    assert_ne!(fresh.last.as_ref().expect("sent").producer.0, next);
    let mut transactional = Producer::transactional(&address, &topic);
    transactional
        .add_partitions(&topic, &[0])
        .await
        .expect("added");
    let outcome = transactional
        .produce(&topic, 0, &values(200), Compression::Lz4)
        .await;
    assert!(
        matches!(outcome, Outcome::Acked(_)),
        "transactional: {outcome:?}"
    );
    transactional.end(true).await.expect("committed");
    // The moved producer goes on (sequence 60).
    let sent = moving.batch(&topic, 0, &values(60), Compression::None);
    let outcome = resend(&address, &sent).await;
    assert!(
        matches!(outcome, Outcome::Acked(_)),
        "moved, again: {outcome:?}"
    );
    let records = read_back(&address, &topic, 0).await.expect("read");
    let held: Vec<&String> = records.values().collect();
    for i in (50..70).chain(100..110).chain(200..210) {
        assert!(
            held.contains(&&format!("v{i}")),
            "v{i} was written after the failover and is there: {held:?}"
        );
    }
}

/// The data records of `topic`-`partition` at `address`.
async fn data_records(address: &str, topic: &str, partition: i32) -> usize {
    read_back(address, topic, partition)
        .await
        .expect("read")
        .len()
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_consistent_stop_interrupted_by_a_crash_cuts_at_its_point() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let topics: Vec<String> = ["orders", "payments"]
        .iter()
        .map(|t| format!("cut-crash-{run}-{t}"))
        .collect();
    for topic in &topics {
        create_topic(&bootstrap, topic, 1).await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let extra = "mirror.metadata.refresh.interval.ms=500\n";
    let broker = spawn_broker_with(dir.path(), port, extra);
    let address = format!("127.0.0.1:{port}");
    create(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    let set = topics.join(",");
    copy_then_pause_staggered(&bootstrap, &address, &topics, 6).await;
    let (point, count) = consistent_plan(&address, &topics);
    let mut before = 0;
    for topic in &topics {
        before += data_records(&address, topic, 0).await;
    }

    // The failover starts; the broker is killed while it runs, and restarted.
    let mut failover = std::process::Command::new(kmirror_testkit::built_kmirror())
        .args(["mirrors", "--bootstrap-server", &address])
        .args([
            "--failover",
            "--consistent",
            "--mirror",
            "dr",
            "--topics",
            &set,
        ])
        .args(["--discard-records", &count.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    tokio::time::sleep(Duration::from_millis(400)).await;
    broker.signal("KILL");
    drop(broker);
    let _ = failover.wait();
    let _broker = spawn_broker_with(dir.path(), port, extra);
    // A topic stopped before the crash resumes its STOPPING at the same point; one still paused
    // is cut by the same command run again, at the point of those stopped already.
    let mut states = Vec::new();
    for topic in &topics {
        states.push(
            wait_until(&address, "dr", topic, "described", |_| true).await[0]
                .state
                .clone(),
        );
    }
    if states.iter().any(|s| s == "PAUSED") {
        let again = |discard: String| {
            let set = set.clone();
            let address = address.clone();
            move || {
                mirrors_cli(
                    &address,
                    &[
                        "--failover",
                        "--consistent",
                        "--mirror",
                        "dr",
                        "--topics",
                        &set,
                        "--discard-records",
                        &discard,
                    ],
                )
            }
        };
        let (code, text) = tokio::task::spawn_blocking(again(count.to_string()))
            .await
            .expect("ran");
        if code != Some(0) {
            // Some topics stopped before the crash: the rest cut fewer records.
            let rest = count_to_confirm(&text);
            let (code, text) = tokio::task::spawn_blocking(again(rest.to_string()))
                .await
                .expect("ran");
            assert_eq!(code, Some(0), "{states:?}: {text}");
        }
    }
    let mut after = 0;
    for topic in &topics {
        wait_until(&address, "dr", topic, "STOPPED", |p| {
            p[0].state == "STOPPED"
        })
        .await;
        let times = batch_times(&address, topic, 0).await;
        let newer: Vec<&(i64, bool)> = times
            .iter()
            .filter(|(t, control)| !control && *t > point)
            .collect();
        assert!(
            newer.is_empty(),
            "{topic} holds records newer than {point}: {newer:?}"
        );
        after += data_records(&address, topic, 0).await;
    }
    assert_eq!(
        before - after,
        count as usize,
        "the cut removed what the dry run counted, crash or not"
    );
}
