//! A Kafka consumer group's committed offsets survive the loss of its coordinator's broker and
//! disk (docs/cluster.md, "Coordinators on replicated logs"): the group lives in its partition
//! of `__consumer_offsets`, replicated three times; the coordinator is SIGKILLed and its data
//! disk lost, another broker loads the partition and coordinates the group with its offsets,
//! Kafka's console consumer goes on from them (every record read once), the wiped broker
//! rejoins empty and catches up, and then the second coordinator dies with its disk too; a
//! deleted topic's offsets leave the group.

use super::quorum_coordinators::{GROUP, coordinator, kafka_partition};
use kmirror_protocol::kafka_tools;
use kmirror_testkit::eventually;
use kmirror_testkit::local_cluster::{LocalCluster, topics_of};
use std::collections::{BTreeMap, BTreeSet};

const TOPIC: &str = "orders";
const GROUP_ID: &str = "billing";
const RECORDS: u32 = 3000;

/// The group's coordinator as the nodes other than `except` name it, once they agree on one
/// other than `except`.
async fn coordinator_besides(cluster: &LocalCluster, except: i32) -> i32 {
    let named = eventually(
        "the live nodes agree on a coordinator other than the dead one",
        || async {
            let mut named = BTreeSet::new();
            for (i, address) in cluster.clients.iter().enumerate() {
                if i as i32 + 1 != except {
                    named.insert(coordinator(address, GROUP, GROUP_ID).await);
                }
            }
            named
        },
        |named| named.len() == 1 && matches!(named.first(), Some(Ok(node)) if *node != except),
    )
    .await;
    named
        .into_iter()
        .next()
        .and_then(Result::ok)
        .expect("a coordinator")
}

/// The group's committed offsets, once `kafka-consumer-groups --describe` shows some.
async fn committed(bootstrap: &str) -> BTreeMap<i32, i64> {
    eventually(
        "kafka-consumer-groups --describe shows the group's offsets",
        || async { kafka_tools::group_offsets(bootstrap, GROUP_ID, TOPIC) },
        |offsets| offsets.as_ref().is_some_and(|o| !o.is_empty()),
    )
    .await
    .unwrap_or_default()
}

/// Waits until node `node` is in the ISR of the group's partition of `__consumer_offsets`
/// again, as node `asked` shows it.
async fn in_sync_again(cluster: &LocalCluster, asked: i32, node: i32) {
    let partition = kafka_partition(GROUP_ID, 50);
    eventually(
        "the rejoined broker back in the ISR of the group's partition",
        || async {
            topics_of(&cluster.clients[asked as usize - 1])
                .await
                .ok()
                .and_then(|mut t| t.remove("__consumer_offsets"))
                .and_then(|p| p.get(partition).cloned())
        },
        |view| view.as_ref().is_some_and(|v| v.isr.contains(&node)),
    )
    .await;
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_consumer_groups_offsets_survive_the_loss_of_its_coordinators_broker_and_disk() {
    let cluster = LocalCluster::start(3, "min.insync.replicas=2\nreplica.lag.time.max.ms=4000");
    let bootstrap = cluster.bootstrap();
    kafka_tools::create_replicated_topic(&bootstrap, TOPIC, 3, 3);
    let (acked, produced) = kafka_tools::verifiable_produce(&bootstrap, TOPIC, RECORDS);
    assert_eq!(acked, i64::from(RECORDS), "{produced}");

    // Kafka's consumer reads part of the topic in the group and commits.
    let first = kafka_tools::group_values(&bootstrap, TOPIC, GROUP_ID, 1200);
    assert_eq!(first.len(), 1200, "the first reader's records");
    let first_coordinator = coordinator(&cluster.clients[0], GROUP, GROUP_ID)
        .await
        .expect("a coordinator");
    let before = committed(&bootstrap).await;
    assert_eq!(before.values().sum::<i64>(), 1200, "committed: {before:?}");

    // The coordinator dies with its data disk.
    cluster.kill(first_coordinator as usize);
    cluster.lose_data_disk(first_coordinator as usize);
    let second_coordinator = coordinator_besides(&cluster, first_coordinator).await;
    assert_eq!(
        committed(&bootstrap).await,
        before,
        "the offsets node {second_coordinator} loaded after node {first_coordinator} and its disk were lost"
    );

    // The group goes on from its offsets: every record read once in all.
    let rest = kafka_tools::group_values(&bootstrap, TOPIC, GROUP_ID, RECORDS - 1200);
    let mut read: Vec<i64> = first
        .iter()
        .chain(&rest)
        .map(|v| v.parse().expect("a number"))
        .collect();
    read.sort_unstable();
    assert_eq!(
        read,
        (0..i64::from(RECORDS)).collect::<Vec<_>>(),
        "each record once across the coordinator's loss"
    );
    let after = committed(&bootstrap).await;
    assert_eq!(after.values().sum::<i64>(), i64::from(RECORDS), "{after:?}");

    // The wiped broker rejoins empty and catches up; then the second coordinator dies with
    // its disk: the offsets are still there, on the replicas left.
    cluster.restart(first_coordinator as usize);
    in_sync_again(&cluster, second_coordinator, first_coordinator).await;
    cluster.kill(second_coordinator as usize);
    cluster.lose_data_disk(second_coordinator as usize);
    let third = coordinator_besides(&cluster, second_coordinator).await;
    assert_eq!(
        committed(&bootstrap).await,
        after,
        "the offsets node {third} loaded after node {second_coordinator} and its disk were lost"
    );

    // A deleted topic's offsets leave the group, whichever broker held the topic's one replica.
    kafka_tools::create_replicated_topic(&bootstrap, "gone", 1, 1);
    kafka_tools::reset_group_offsets(&bootstrap, GROUP_ID, "gone", 0);
    assert_eq!(
        kafka_tools::group_offsets(&bootstrap, GROUP_ID, "gone"),
        Some(BTreeMap::from([(0, 0)]))
    );
    kafka_tools::kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--delete",
            "--topic",
            "gone",
        ],
    );
    eventually(
        "the deleted topic's offsets forgotten",
        || async { kafka_tools::group_offsets(&bootstrap, GROUP_ID, "gone") },
        |offsets| offsets.as_ref().is_some_and(BTreeMap::is_empty),
    )
    .await;
    assert_eq!(
        committed(&bootstrap).await,
        after,
        "the other topic's offsets stay"
    );
}
