//! Mirroring from a three-broker Apache Kafka (`scripts/kafka-local.sh start-cluster`: brokers
//! 1-3 and a controller-only node; scripts/test.sh exports `KMIRROR_KAFKA3_*`) while its
//! partition leaders die, which is what the epoch machinery exists for (docs/design.md §4).
//! With clean elections the mirror follows each new leader and loses or repeats nothing; after
//! an unclean election (an out-of-sync replica takes over, the source's log goes back) the
//! mirror truncates at the source's divergence point. Either way the destination ends byte for
//! byte the surviving source log, and its leader epoch (DLE) is at least the source's (SLE) and
//! every epoch in its log.

use super::process::{broker_with_mirror, wait_described};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::SourceClient;
use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::local_cluster::topics_of;
use kmirror_testkit::source::{source_client, source_ends};
use kmirror_testkit::{concatenated_segments, eventually};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The tests crash the shared source cluster's brokers: one at a time.
static KAFKA3: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bootstrap() -> String {
    kafka_env("KMIRROR_KAFKA3_BOOTSTRAP")
}

fn data() -> PathBuf {
    PathBuf::from(kafka_env("KMIRROR_KAFKA3_DATA"))
}

/// `scripts/kafka-local.sh VERB DATA_DIR node`: `kill-node` (SIGKILL) or `start-node`.
fn node(verb: &str, node: i32) {
    let out = std::process::Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/kafka-local.sh"
    ))
    .args([verb, data().to_str().expect("utf-8"), &node.to_string()])
    .output()
    .expect("kafka-local.sh runs");
    assert!(
        out.status.success(),
        "kafka-local.sh {verb} {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The source's leader and leader epoch of `topic`-`partition`, once it has a leader.
async fn source_leader(source: &SourceClient, topic: &str, partition: i32) -> (i32, i32) {
    eventually(
        &format!("a source leader for {topic}-{partition}"),
        || async {
            source
                .metadata(Some(&[topic]))
                .await
                .ok()
                .and_then(|m| {
                    let p = m
                        .topics
                        .get(topic)?
                        .partitions
                        .get(partition as usize)?
                        .clone();
                    Some((p.leader, p.leader_epoch))
                })
                .unwrap_or((-1, -1))
        },
        |(leader, _)| *leader > 0,
    )
    .await
}

/// Every segment of `topic`-`partition` under log directory `logs`, in offset order.
fn segments(logs: &Path, topic: &str, partition: i32) -> Vec<u8> {
    concatenated_segments(&logs.join(format!("{topic}-{partition}")))
}

/// Waits until the destination's `topic`-`partition` is the source leader's log byte for byte,
/// then checks DLE >= SLE and DLE >= every batch epoch in the destination's log.
async fn matches_the_surviving_source(
    source: &SourceClient,
    (dir, address): (&Path, &str),
    topic: &str,
    partition: i32,
) {
    let (leader, sle) = source_leader(source, topic, partition).await;
    let kafka = segments(
        &data().join(format!("node-{leader}/logs")),
        topic,
        partition,
    );
    let destination = eventually(
        &format!("{topic}-{partition} equal to Kafka broker {leader}'s log"),
        || async { segments(&dir.join("data"), topic, partition) },
        |bytes| *bytes == kafka,
    )
    .await;
    let dle = topics_of(address).await.expect("destination metadata")[topic][partition as usize]
        .leader_epoch;
    let newest = RecordBatches::new(destination.into())
        .map(|b| b.expect("a whole batch").partition_leader_epoch())
        .max()
        .unwrap_or(-1);
    assert!(
        dle >= sle && dle >= newest,
        "{topic}-{partition}: DLE {dle}, SLE {sle}, newest epoch in the log {newest}"
    );
}

/// Clean elections: while a producer writes with acks=all, the source leader of each partition
/// is SIGKILLed and restarted in turn; each new leader is one of the in-sync replicas, and the
/// mirror, following it, ends with the surviving log byte for byte (nothing lost or repeated).
#[actix_rt::test]
#[ignore = "needs a three-broker Apache Kafka: run scripts/test.sh"]
async fn a_mirror_follows_the_source_through_clean_leader_elections() {
    let _crashes = KAFKA3.lock().await;
    let bootstrap = bootstrap();
    let topic = format!("src3-clean-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, 2, &[]);
    kafka_tools::produce(&bootstrap, &topic, 5_000, "lz4", &[]);
    let source = source_client(&bootstrap).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, _, address) = broker_with_mirror(dir.path(), &bootstrap);
    let (code, text) = mirrors_cli(&address, &["--start", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let writer = tokio::task::spawn_blocking({
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        move || kafka_tools::produce(&bootstrap, &topic, 20_000, "lz4", &["batch.size=4096"])
    });
    for partition in 0..2 {
        let (leader, epoch) = source_leader(&source, &topic, partition).await;
        node("kill-node", leader);
        let (new_leader, new_epoch) = eventually(
            &format!("a new leader of {topic}-{partition}"),
            || source_leader(&source, &topic, partition),
            |(l, e)| *l != leader && *e > epoch,
        )
        .await;
        assert_ne!(new_leader, leader);
        assert!(new_epoch > epoch);
        tokio::time::sleep(Duration::from_secs(1)).await;
        node("start-node", leader);
    }
    writer.await.expect("the producer ran");
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&address, "dr", &topic, "MIRRORING", &ends).await;
    for partition in 0..2 {
        matches_the_surviving_source(&source, (dir.path(), &address), &topic, partition).await;
    }
}

/// An unclean election: a follower is SIGKILLed, the leader takes more records the mirror
/// copies, then the leader and the other follower die and the stale follower is elected
/// (`unclean.leader.election.enable=true`, kafka-leader-election.sh UNCLEAN) and written to.
/// The source's log went back: the mirror truncates at the divergence point and copies the new
/// leader's records, ending with its log byte for byte.
#[actix_rt::test]
#[ignore = "needs a three-broker Apache Kafka: run scripts/test.sh"]
async fn a_mirror_truncates_where_an_unclean_election_took_the_source_back() {
    let _crashes = KAFKA3.lock().await;
    let bootstrap = bootstrap();
    let topic = format!("src3-unclean-{}", std::process::id());
    kafka_tools::create_topic(
        &bootstrap,
        &topic,
        1,
        &[
            "unclean.leader.election.enable=true",
            "min.insync.replicas=1",
        ],
    );
    kafka_tools::produce(&bootstrap, &topic, 2_000, "lz4", &[]);
    let source = source_client(&bootstrap).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, _, address) = broker_with_mirror(dir.path(), &bootstrap);
    let (code, text) = mirrors_cli(&address, &["--start", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    wait_described(
        &address,
        "dr",
        &topic,
        "MIRRORING",
        &source_ends(&source, &topic, 1).await,
    )
    .await;

    // Every replica in sync first, so the one killed holds the first records.
    eventually(
        &format!("{topic}-0 with three in-sync replicas"),
        || async {
            source
                .metadata(Some(&[topic.as_str()]))
                .await
                .ok()
                .and_then(|m| Some(m.topics.get(&topic)?.partitions.first()?.isr.len()))
                .unwrap_or(0)
        },
        |isr| *isr == 3,
    )
    .await;
    let (leader, _) = source_leader(&source, &topic, 0).await;
    let others: Vec<i32> = (1..=3).filter(|n| *n != leader).collect();
    let (stale, other) = (others[0], others[1]);
    node("kill-node", stale);
    kafka_tools::produce(&bootstrap, &topic, 1_000, "lz4", &[]);
    let ahead = source_ends(&source, &topic, 1).await;
    wait_described(&address, "dr", &topic, "MIRRORING", &ahead).await;

    node("kill-node", leader);
    node("kill-node", other);
    node("start-node", stale);
    let stale_address = bootstrap
        .split(',')
        .nth(stale as usize - 1)
        .expect("the stale broker's address")
        .to_string();
    eventually(
        &format!("broker {stale} elected uncleanly"),
        || async {
            let _ = kafka_tools::kafka_tool_output(
                "org.apache.kafka.tools.LeaderElectionCommand",
                &[
                    "--bootstrap-server",
                    &stale_address,
                    "--election-type",
                    "UNCLEAN",
                    "--topic",
                    &topic,
                    "--partition",
                    "0",
                ],
            );
            source_leader(&source, &topic, 0).await.0
        },
        |l| *l == stale,
    )
    .await;
    kafka_tools::produce(&stale_address, &topic, 500, "lz4", &[]);
    let back = source_ends(&source, &topic, 1).await;
    assert!(
        back[0] < ahead[0] + 500,
        "the source went back: {back:?}, the mirror had {ahead:?}"
    );
    wait_described(&address, "dr", &topic, "MIRRORING", &back).await;
    matches_the_surviving_source(&source, (dir.path(), &address), &topic, 0).await;
    node("start-node", leader);
    node("start-node", other);
}
