//! Replicated partitions across three processes (docs/replication.md): followers copy their
//! leader's log byte for byte and join the ISR; the leader frozen (SIGSTOP) past its session
//! is fenced and an in-sync follower is elected, holding every acknowledged record; the frozen
//! broker resumes as a follower, truncates what it had that the new leader does not, and
//! matches it again. (Frozen, not killed: a killed node restarts on its fixed ports, which
//! other tests' clusters may have taken meanwhile when the tests run together.)

use kafka_protocol::records::Compression;
use kmirror_testkit::client::{self, Outcome, Producer};
use kmirror_testkit::local_cluster::{LocalCluster, PartitionView, topics_of};
use kmirror_testkit::{concatenated_segments, eventually};
use std::collections::BTreeMap;

const TOPIC: &str = "replicated";

/// The partition as node `node` (1-based) shows it.
async fn view(cluster: &LocalCluster, node: usize) -> Option<PartitionView> {
    topics_of(&cluster.clients[node - 1])
        .await
        .ok()?
        .remove(TOPIC)?
        .into_iter()
        .next()
}

/// Every segment file of the partition on node `node`, concatenated in order.
fn replica_bytes(cluster: &LocalCluster, node: usize) -> Vec<u8> {
    concatenated_segments(&cluster.data(node).join(format!("{TOPIC}-0")))
}

/// Produces `count` batches of 10 records tagged `tag` to the partition's leader; the
/// acknowledged records by offset.
async fn produce(
    cluster: &LocalCluster,
    leader: i32,
    tag: &str,
    count: usize,
) -> BTreeMap<i64, String> {
    let mut producer = Producer::idempotent(&cluster.clients[leader as usize - 1]);
    let mut acked = BTreeMap::new();
    for batch in 0..count {
        let values: Vec<String> = (0..10).map(|i| format!("{tag}-{batch}-{i}")).collect();
        match producer.produce(TOPIC, 0, &values, Compression::Lz4).await {
            Outcome::Acked(records) => {
                acked.extend(records.into_iter().map(|r| (r.offset, r.value)));
            }
            other => panic!("batch {batch} of {tag} to leader {leader}: {other:?}"),
        }
    }
    acked
}

#[tokio::test]
async fn followers_replicate_and_a_frozen_leaders_in_sync_follower_takes_over() {
    let cluster = LocalCluster::start(3, "replica.lag.time.max.ms=4000\nmin.insync.replicas=2");
    let code = client::create_replicated_topic(&cluster.clients[0], TOPIC, 1, 3)
        .await
        .expect("CreateTopics answered");
    assert_eq!(code, 0);
    let first = eventually(
        "the partition is led",
        || view(&cluster, 1),
        |v| v.as_ref().is_some_and(|v| v.leader > 0),
    )
    .await
    .expect("a view");
    let mut acked = produce(&cluster, first.leader, "before", 30).await;

    // Every follower joins the ISR and holds the leader's bytes.
    eventually(
        "the followers join the ISR",
        || view(&cluster, first.leader as usize),
        |v| v.as_ref().is_some_and(|v| v.isr.len() == 3),
    )
    .await;
    let leader_bytes = replica_bytes(&cluster, first.leader as usize);
    assert!(!leader_bytes.is_empty());
    for node in 1..=3 {
        eventually(
            &format!("node {node} holds the leader's bytes"),
            || async { replica_bytes(&cluster, node) == leader_bytes },
            |same| *same,
        )
        .await;
    }

    // The leader stops answering: an in-sync follower leads at a higher epoch and holds every
    // acknowledged record.
    cluster.signal(first.leader as usize, "STOP");
    let survivor = (1..=3)
        .find(|&n| n != first.leader as usize)
        .expect("a survivor");
    let second = eventually(
        "a follower is elected",
        || view(&cluster, survivor),
        |v| {
            v.as_ref()
                .is_some_and(|v| v.leader > 0 && v.leader != first.leader)
        },
    )
    .await
    .expect("a view");
    assert!(
        second.leader_epoch > first.leader_epoch,
        "{first:?} then {second:?}"
    );
    assert!(!second.isr.contains(&first.leader), "{second:?}");
    acked.extend(produce(&cluster, second.leader, "after", 20).await);
    let read = client::read_back(&cluster.clients[second.leader as usize - 1], TOPIC, 0)
        .await
        .expect("read back");
    let differs = acked
        .iter()
        .find(|(offset, value)| read.get(offset) != Some(value));
    assert_eq!(differs, None, "every acknowledged record, once, in order");
    assert_eq!(read.len(), acked.len(), "nothing else");

    // The old leader resumes as a follower and matches the new leader again.
    cluster.signal(first.leader as usize, "CONT");
    eventually(
        "the old leader rejoins the ISR",
        || view(&cluster, second.leader as usize),
        |v| v.as_ref().is_some_and(|v| v.isr.len() == 3),
    )
    .await;
    let leader_bytes = replica_bytes(&cluster, second.leader as usize);
    for node in 1..=3 {
        eventually(
            &format!("node {node} holds the new leader's bytes"),
            || async { replica_bytes(&cluster, node) == leader_bytes },
            |same| *same,
        )
        .await;
    }
}

/// Controlled shutdown (docs/replication.md §3): SIGTERM to the leader moves leadership to an
/// in-sync follower before the broker exits, long before its 30 s session would have run out;
/// every acknowledged record is on the new leader, which takes writes at once.
#[tokio::test]
async fn sigterm_hands_leadership_to_an_in_sync_follower_before_the_broker_stops() {
    let cluster = LocalCluster::start(
        3,
        "min.insync.replicas=2\nbroker.session.timeout.ms=30000\n",
    );
    let code = client::create_replicated_topic(&cluster.clients[0], TOPIC, 1, 3)
        .await
        .expect("CreateTopics answered");
    assert_eq!(code, 0);
    let first = eventually(
        "the partition led with every replica in sync",
        || view(&cluster, 1),
        |v| v.as_ref().is_some_and(|v| v.leader > 0 && v.isr.len() == 3),
    )
    .await
    .expect("a view");
    let mut acked = produce(&cluster, first.leader, "before", 20).await;
    let survivor = (1..=3)
        .find(|&n| n != first.leader as usize)
        .expect("a survivor");
    let asked = std::time::Instant::now();
    cluster.signal(first.leader as usize, "TERM");
    let second = eventually(
        "a follower is elected",
        || view(&cluster, survivor),
        |v| {
            v.as_ref()
                .is_some_and(|v| v.leader > 0 && v.leader != first.leader)
        },
    )
    .await
    .expect("a view");
    let took = asked.elapsed();
    assert!(
        took < std::time::Duration::from_secs(10),
        "leadership moved after {took:?}: the session timeout, not the controlled shutdown"
    );
    assert!(second.leader_epoch > first.leader_epoch);
    assert!(!second.isr.contains(&first.leader), "{second:?}");
    let log = cluster
        .dir
        .join(format!("node-{}/broker.log", first.leader));
    eventually(
        "the stopped broker says it handed its leadership over",
        || async { std::fs::read_to_string(&log).unwrap_or_default() },
        |l| l.contains("controlled shutdown: leadership moved") && l.contains("stopped cleanly"),
    )
    .await;
    acked.extend(produce(&cluster, second.leader, "after", 10).await);
    let read = client::read_back(&cluster.clients[second.leader as usize - 1], TOPIC, 0)
        .await
        .expect("read back");
    let differs = acked
        .iter()
        .find(|(offset, value)| read.get(offset) != Some(value));
    assert_eq!(differs, None, "every acknowledged record, once, in order");
}
