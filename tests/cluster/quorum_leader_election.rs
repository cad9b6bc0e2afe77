//! Leadership back to the preferred replicas (docs/replication.md §3): after a broker died and
//! returned, its partitions are led by the other replicas; Kafka's `kafka-leader-election.sh
//! --election-type PREFERRED` gives them back (and says nothing more is needed when run again),
//! and with `auto.leader.rebalance.enable` the active controller does it by itself.

use kmirror_protocol::kafka_tools::kafka_tool_output;
use kmirror_testkit::eventually;
use kmirror_testkit::local_cluster::{LocalCluster, PartitionView, topics_of};

const TOPIC: &str = "spread";
const LIVENESS: &str = "broker.heartbeat.interval.ms=500\nbroker.session.timeout.ms=3000\n\
                        replica.lag.time.max.ms=3000\n";

/// The topic's partitions as node `node` shows them.
async fn views(cluster: &LocalCluster, node: usize) -> Vec<PartitionView> {
    topics_of(&cluster.clients[node - 1])
        .await
        .ok()
        .and_then(|mut t| t.remove(TOPIC))
        .unwrap_or_default()
}

/// Creates the topic (six partitions, three replicas), kills node 1 until it is fenced and
/// the others lead its partitions, restarts it and waits until it is in every ISR again; the
/// partitions as node 2 shows them then.
async fn leadership_moved_off_node_1(cluster: &LocalCluster) -> Vec<PartitionView> {
    let code = kmirror_testkit::client::create_replicated_topic(&cluster.clients[1], TOPIC, 6, 3)
        .await
        .expect("CreateTopics answered");
    assert_eq!(code, 0);
    let placed = eventually(
        "every partition led by its preferred replica",
        || views(cluster, 2),
        |v| {
            v.len() == 6
                && v.iter()
                    .all(|p| p.isr.len() == 3 && p.leader == p.replicas[0])
        },
    )
    .await;
    assert!(
        placed.iter().any(|p| p.replicas[0] == 1),
        "node 1 is the preferred replica of some: {placed:?}"
    );
    cluster.kill(1);
    eventually(
        "node 1's partitions led by others",
        || views(cluster, 2),
        |v| v.len() == 6 && v.iter().all(|p| p.leader > 1),
    )
    .await;
    cluster.restart(1);
    eventually(
        "node 1 back in every ISR",
        || views(cluster, 2),
        |v| v.len() == 6 && v.iter().all(|p| p.isr.contains(&1)),
    )
    .await
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn kafka_leader_election_gives_leadership_back_to_the_preferred_replicas() {
    let cluster = LocalCluster::start(3, &format!("{LIVENESS}auto.leader.rebalance.enable=false"));
    let before = leadership_moved_off_node_1(&cluster).await;
    assert!(
        before.iter().all(|p| p.leader != 1),
        "no rebalance by itself: {before:?}"
    );
    let elect = |scope: &[&str]| {
        let mut args = vec![
            "--bootstrap-server",
            &cluster.clients[1],
            "--election-type",
            "PREFERRED",
        ];
        args.extend_from_slice(scope);
        let out = kafka_tool_output("org.apache.kafka.tools.LeaderElectionCommand", &args);
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    };
    let (done, said) = elect(&["--topic", TOPIC, "--partition", "0"]);
    let after_one = views(&cluster, 2).await;
    assert!(done, "{said}\nbefore: {before:?}\nafter: {after_one:?}");
    if before[0].replicas[0] == 1 {
        assert!(said.contains("Successfully completed"), "{said}");
        assert_eq!(after_one[0].leader, 1);
        assert_eq!(after_one[0].leader_epoch, before[0].leader_epoch + 1);
    }
    let (done, said) = elect(&["--all-topic-partitions"]);
    assert!(done, "{said}");
    let after = eventually(
        "every partition led by its preferred replica again",
        || views(&cluster, 3),
        |v| v.len() == 6 && v.iter().all(|p| p.leader == p.replicas[0]),
    )
    .await;
    for (b, a) in before.iter().zip(&after) {
        if b.leader != b.replicas[0] {
            assert!(
                a.leader_epoch > b.leader_epoch,
                "a new epoch: {b:?} -> {a:?}"
            );
        }
    }
    assert!(!said.contains("Error"), "{said}");
    // Nothing left to elect: asked again for one partition, Kafka's tool says so.
    let (done, again) = elect(&["--topic", TOPIC, "--partition", "1"]);
    assert!(
        done && again.contains("Valid replica already elected"),
        "{again}"
    );
}

#[tokio::test]
async fn the_active_controller_rebalances_leadership_by_itself() {
    let cluster = LocalCluster::start(
        3,
        &format!("{LIVENESS}leader.imbalance.check.interval.seconds=2"),
    );
    leadership_moved_off_node_1(&cluster).await;
    eventually(
        "every partition led by its preferred replica again",
        || views(&cluster, 3),
        |v| v.len() == 6 && v.iter().all(|p| p.leader == p.replicas[0]),
    )
    .await;
}
