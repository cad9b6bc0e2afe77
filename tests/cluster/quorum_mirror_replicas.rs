//! Apache Kafka mirrored into a three-process cluster whose mirror topics have three replicas
//! (`default.replication.factor=3`, docs/replication.md §6): only each partition's leader
//! mirrors, its followers replicate the mirrored batches, and a leadership move carries the
//! mirror to the new leader.

use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_testkit::cli::{described, mirrors_cli, wait_described};
use kmirror_testkit::local_cluster::{LocalCluster, PartitionView, topics_of};
use kmirror_testkit::source::{segment, source_client, source_ends};
use kmirror_testkit::{concatenated_segments, eventually};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;

/// Every segment file of `topic`-`partition` on node `node`, concatenated in offset order.
fn replica(cluster: &LocalCluster, node: usize, topic: &str, partition: i32) -> Vec<u8> {
    concatenated_segments(&cluster.data(node).join(format!("{topic}-{partition}")))
}

/// `topic`'s partitions as the first node that answers shows them.
async fn views(cluster: &LocalCluster, topic: &str) -> Vec<PartitionView> {
    eventually(
        &format!("{topic}'s partitions, each with a leader"),
        || async {
            for address in &cluster.clients {
                if let Ok(mut topics) = topics_of(address).await
                    && let Some(views) = topics.remove(topic)
                {
                    return views;
                }
            }
            Vec::new()
        },
        |v: &Vec<PartitionView>| v.len() == PARTITIONS as usize && v.iter().all(|p| p.leader > 0),
    )
    .await
}

/// Waits until every partition of `topic` shows `state` through some node.
async fn wait_state(cluster: &LocalCluster, topic: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for address in &cluster.clients {
            let (address, name) = (address.clone(), topic.to_string());
            let now = tokio::task::spawn_blocking(move || described(&address, &name))
                .await
                .expect("described");
            if now.len() == PARTITIONS as usize && now.iter().all(|(s, _)| s == state) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{topic}: not {state} in 120 s");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The mirror partition's leader is SIGKILLed (and restarted) right after `--start`, while it
/// catches up with 20,000 records: the mirror goes on at the in-sync follower elected, and
/// once MIRRORING at Kafka's log ends all three replicas of each partition are Kafka's segment
/// byte for byte. Then the failover: a broker that leads neither partition is frozen past its
/// session (fenced, out of the ISRs), `--stop` is asked and partition 0's leader is SIGKILLed
/// while it stops. Every partition reaches STOPPED; the live replicas are Kafka's log and one
/// barrier batch, all equal; the topic takes writes; and once the frozen broker thaws, its
/// replicas catch up to the same bytes and rejoin the ISR.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_mirror_on_three_replicas_moves_with_its_leader_and_fails_over_with_a_follower_down() {
    let kafka = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("rf3-mirror-{}", std::process::id());
    kafka_tools::create_topic(&kafka, &topic, PARTITIONS as u32, &[]);
    kafka_tools::produce(&kafka, &topic, 20_000, "lz4", &[]);
    let cluster = LocalCluster::start(
        3,
        "default.replication.factor=3\nmin.insync.replicas=2\n\
         broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=4000\n\
         mirror.metadata.refresh.interval.ms=500\n",
    );
    let config = cluster.dir.join("dr.properties");
    std::fs::write(&config, format!("bootstrap.servers={kafka}\n")).expect("written");
    let config = config.to_str().expect("utf-8");
    let (code, text) = mirrors_cli(
        &cluster.clients[0],
        &["--create", "--mirror", "dr", "--mirror-config", config],
    );
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = mirrors_cli(
        &cluster.clients[1],
        &["--start", "--mirror", "dr", "--topics", &topic],
    );
    assert_eq!(code, Some(0), "{text}");
    let before = views(&cluster, &topic).await;
    assert!(
        before.iter().all(|p| p.isr.len() == 3),
        "three in-sync replicas: {before:?}"
    );
    let leader = before[0].leader as usize;
    cluster.kill(leader);
    cluster.restart(leader);

    let source = source_client(&kafka).await;
    let ends = source_ends(&source, &topic, PARTITIONS).await;
    wait_described(&cluster.clients[2], &topic, "MIRRORING", &ends).await;
    let after = views(&cluster, &topic).await;
    assert_ne!(
        after[0].leader as usize, leader,
        "the killed leader's partition moved: {after:?}"
    );
    for p in 0..PARTITIONS {
        let kafka_bytes = segment(&topic, p);
        for node in 1..=3 {
            eventually(
                &format!("{topic}-{p} on node {node} is Kafka's segment"),
                || async { replica(&cluster, node, &topic, p) == kafka_bytes },
                |same| *same,
            )
            .await;
        }
    }
    let after = eventually(
        "every replica back in the ISR",
        || views(&cluster, &topic),
        |v| v.iter().all(|p| p.isr.len() == 3),
    )
    .await;

    // The failover, with one broker down and partition 0's leader killed while stopping.
    let frozen = (1..=3)
        .find(|n| after.iter().all(|p| p.leader != *n as i32))
        .expect("a broker leading neither partition");
    cluster.signal(frozen, "STOP");
    eventually(
        "the frozen broker out of every ISR",
        || views(&cluster, &topic),
        |v| v.iter().all(|p| !p.isr.contains(&(frozen as i32))),
    )
    .await;
    let live = cluster.clients[frozen % 3].clone();
    let (code, text) = mirrors_cli(&live, &["--stop", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let stopping_leader = after[0].leader as usize;
    cluster.kill(stopping_leader);
    cluster.restart(stopping_leader);
    wait_state(&cluster, &topic, "STOPPED").await;
    let stopped = views(&cluster, &topic).await;
    for p in 0..PARTITIONS {
        let kafka_bytes = segment(&topic, p);
        let leader_bytes = replica(&cluster, stopped[p as usize].leader as usize, &topic, p);
        assert!(
            leader_bytes.len() > kafka_bytes.len() && leader_bytes.starts_with(&kafka_bytes),
            "{topic}-{p}: the leader's log is Kafka's ({} bytes) and a barrier ({} bytes)",
            kafka_bytes.len(),
            leader_bytes.len()
        );
        for node in (1..=3).filter(|n| *n != frozen) {
            eventually(
                &format!("{topic}-{p} on live node {node} equals its leader's"),
                || async { replica(&cluster, node, &topic, p) == leader_bytes },
                |same| *same,
            )
            .await;
        }
    }
    let (acked, out) = kafka_tools::verifiable_produce(&cluster.bootstrap(), &topic, 200);
    assert_eq!(acked, 200, "the failed-over topic takes writes: {out}");

    cluster.signal(frozen, "CONT");
    let last = eventually(
        "the thawed broker back in every ISR",
        || views(&cluster, &topic),
        |v| v.iter().all(|p| p.isr.len() == 3),
    )
    .await;
    for p in 0..PARTITIONS {
        let leader_bytes = replica(&cluster, last[p as usize].leader as usize, &topic, p);
        assert!(leader_bytes.starts_with(&segment(&topic, p)));
        for node in 1..=3 {
            eventually(
                &format!("{topic}-{p} on node {node} equals its leader's after the thaw"),
                || async { replica(&cluster, node, &topic, p) == leader_bytes },
                |same| *same,
            )
            .await;
        }
    }
}
