//! A cluster of mixed `process.roles` (docs/cluster.md), started with `scripts/cluster-local.sh`:
//! node 1 controller-only, nodes 2 and 3 combined, node 4 broker-only (a Raft learner), as a
//! client sees it through kmirror's own Kafka client.

use super::quorum_cluster::{create_topic, leaders_of};
use kafka_protocol::messages::DescribeClusterRequest;
use kafka_protocol::records::Compression;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_testkit::client::{Outcome, Producer, read_back};
use kmirror_testkit::local_cluster::{LocalCluster, brokers_of};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A quick liveness cycle, so the test sees a silent broker fenced within seconds.
const LIVENESS: &str = "broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=3000";

/// The brokers DescribeCluster lists at `address`.
async fn described_brokers(address: &str) -> Vec<i32> {
    let connection = Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connected");
    let (_, answer) = connection
        .send("DescribeCluster", &DescribeClusterRequest::default(), 0)
        .await
        .expect("DescribeCluster answered");
    let mut brokers: Vec<i32> = answer.brokers.iter().map(|b| b.broker_id.0).collect();
    brokers.sort_unstable();
    brokers
}

/// Waits until `check` holds for node `address`'s Metadata (its topics' leaders); panics
/// with `what` after `within`.
async fn wait_metadata(
    address: &str,
    what: &str,
    within: Duration,
    check: impl Fn(&BTreeMap<String, Vec<i32>>) -> bool,
) -> BTreeMap<String, Vec<i32>> {
    let deadline = Instant::now() + within;
    loop {
        let topics = leaders_of(address).await;
        if let Ok(topics) = &topics
            && check(topics)
        {
            return topics.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?} at {address}: {topics:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces `values` to `topic`-`partition` at its leader `address`: the acknowledged offsets.
async fn produce(address: &str, topic: &str, partition: i32, values: &[String]) -> Vec<i64> {
    let mut producer = Producer::idempotent(address);
    match producer
        .produce(topic, partition, values, Compression::None)
        .await
    {
        Outcome::Acked(acked) => acked.iter().map(|a| a.offset).collect(),
        other => panic!("producing to {topic}-{partition} at {address}: {other:?}"),
    }
}

/// The partitions of `leaders` led by `node`.
fn led_by(leaders: &[i32], node: i32) -> Vec<i32> {
    (0..leaders.len() as i32)
        .filter(|p| leaders[*p as usize] == node)
        .collect()
}

/// Node 1 controller-only, 2 and 3 combined, 4 broker-only: Metadata and DescribeCluster list
/// brokers 2, 3 and 4 and never 1; topics created through node 4 (forwarded) are led by 2, 3
/// and 4; records produced to node 4 read back; a topic created through node 2 reaches node
/// 4's Metadata. The active controller SIGKILLed: another within seconds, and node 4 still
/// creates topics. Node 4 SIGKILLed: the active controller fences it, then, restarted, it
/// catches up on a topic created meanwhile and serves its records again. Node 1 SIGKILLed: two
/// voters of three go on.
#[tokio::test]
#[ignore = "starts four kmirror processes: run scripts/test.sh (or --include-ignored)"]
async fn a_controller_only_node_and_a_broker_only_learner_serve_clients_with_combined_nodes() {
    let cluster = LocalCluster::start_with_roles(
        &[
            "controller",
            "broker,controller",
            "broker,controller",
            "broker",
        ],
        LIVENESS,
    );
    let node = |n: usize| cluster.clients[n - 1].clone();
    let voters = [1, 2, 3];
    let active = cluster.wait_active_controller(&voters, Duration::from_secs(10));
    assert_eq!(
        cluster.active_controller(&[4]),
        None,
        "a learner never leads"
    );
    assert_eq!(cluster.clients[0], "-", "node 1 has no client listener");

    for n in [2, 3, 4] {
        assert_eq!(
            brokers_of(&node(n)).await,
            Ok(vec![2, 3, 4]),
            "Metadata at node {n}"
        );
        assert_eq!(described_brokers(&node(n)).await, vec![2, 3, 4]);
    }

    create_topic(&node(4), "spread", 6)
        .await
        .expect("created through the broker-only node");
    let topics = wait_metadata(&node(4), "spread", Duration::from_secs(5), |t| {
        t.contains_key("spread")
    })
    .await;
    let spread = topics["spread"].clone();
    assert_eq!(
        spread.iter().copied().collect::<BTreeSet<i32>>(),
        BTreeSet::from([2, 3, 4]),
        "partitions spread over the brokers, none on node 1: {spread:?}"
    );
    let on_4 = led_by(&spread, 4)[0];
    let values: Vec<String> = (0..50).map(|i| format!("record-{i}")).collect();
    let offsets = produce(&node(4), "spread", on_4, &values).await;
    assert_eq!(offsets, (0..50).collect::<Vec<i64>>());
    let expected: BTreeMap<i64, String> = (0..50).zip(values.iter().cloned()).collect();
    assert_eq!(
        read_back(&node(4), "spread", on_4).await,
        Ok(expected.clone())
    );

    create_topic(&node(2), "via-2", 3)
        .await
        .expect("created through node 2");
    wait_metadata(
        &node(4),
        "via-2 at the learner",
        Duration::from_secs(5),
        |t| t.contains_key("via-2"),
    )
    .await;

    // The active controller killed: another voter takes over; node 4 forwards to it.
    let killed_at = Instant::now();
    cluster.kill(active);
    let others: Vec<usize> = voters.iter().copied().filter(|n| *n != active).collect();
    let next = cluster.wait_active_controller(&others, Duration::from_secs(10));
    let failover = killed_at.elapsed();
    assert!(
        failover < Duration::from_secs(5),
        "a new active controller took {failover:?}"
    );
    create_topic(&node(4), "after-failover", 3)
        .await
        .expect("created through node 4 after the failover");
    cluster.restart(active);
    eprintln!("active controller {active} killed; {next} active after {failover:?}");

    // Node 4 killed: the active controller fences it; Metadata leaves it out and its
    // partitions have no leader.
    cluster.kill(4);
    let deadline = Instant::now() + Duration::from_secs(15);
    let fencer = loop {
        let active = cluster.active_controller(&voters);
        let fenced = active.and_then(|n| cluster.fenced_brokers(n));
        let brokers = brokers_of(&node(2)).await;
        let leaders = leaders_of(&node(2)).await.map(|t| t["spread"].clone());
        if fenced == Some(1)
            && brokers == Ok(vec![2, 3])
            && leaders.as_ref().is_ok_and(|l| l[on_4 as usize] == -1)
        {
            break active;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 not fenced: active {active:?} counts {fenced:?} fenced, brokers \
             {brokers:?}, spread led by {leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("node 4 fenced by the active controller {fencer:?}");
    create_topic(&node(2), "while-4-down", 4)
        .await
        .expect("created while node 4 is down");
    // Restarted, it re-joins as a learner, catches up and serves its partitions again.
    cluster.restart(4);
    let topics = wait_metadata(&node(4), "node 4 caught up", Duration::from_secs(15), |t| {
        t.contains_key("while-4-down") && t["spread"][on_4 as usize] == 4
    })
    .await;
    assert!(
        !topics["while-4-down"].contains(&4),
        "nothing was placed on fenced node 4: {topics:?}"
    );
    assert_eq!(read_back(&node(4), "spread", on_4).await, Ok(expected));
    let more = produce(&node(4), "spread", on_4, &["after-restart".to_string()]).await;
    assert_eq!(more, vec![50]);

    // Node 1 (controller-only) killed: 2 of 3 voters keep the quorum.
    cluster.kill(1);
    let last = cluster.wait_active_controller(&[2, 3], Duration::from_secs(10));
    create_topic(&node(4), "without-1", 6)
        .await
        .expect("created with two voters of three");
    let topics = wait_metadata(&node(3), "without-1", Duration::from_secs(5), |t| {
        t.contains_key("without-1")
    })
    .await;
    assert_eq!(
        topics["without-1"]
            .iter()
            .copied()
            .collect::<BTreeSet<i32>>(),
        BTreeSet::from([2, 3, 4]),
        "{topics:?}"
    );
    eprintln!("node 1 killed; node {last} active");
}
