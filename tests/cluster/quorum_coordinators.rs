//! Group and transaction coordinators spread over a three-process cluster (docs/cluster.md):
//! FindCoordinator through any node names the leader of the key's partition of
//! `__consumer_offsets` / `__transaction_state`, the others answer NOT_COORDINATOR, and Kafka's
//! TransactionalMessageCopier commits its group's offsets inside transactions whose
//! coordinator is another broker, surviving the group coordinator's SIGKILL; offsets of a
//! transaction that does not exist are refused and block nobody.

use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetFetchRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::kafka_tools::{self, kafka_tool};
use kmirror_testkit::local_cluster::{LocalCluster, topics_of};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub(super) const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

async fn connect(address: &str) -> Connection {
    Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connects")
}

/// FindCoordinator (version 3: one key) at `address`: the node named, or the error code.
pub(super) async fn coordinator(address: &str, key_type: i8, key: &str) -> Result<i32, i16> {
    let request = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_key(StrBytes::from_string(key.to_string()));
    let (_, answer) = tokio::time::timeout(
        Duration::from_secs(40),
        connect(address).await.send("FindCoordinator", &request, 3),
    )
    .await
    .expect("an answer")
    .expect("FindCoordinator");
    if answer.error_code == 0 {
        Ok(answer.node_id.0)
    } else {
        Err(answer.error_code)
    }
}

/// Kafka's partition for a key: `abs(String.hashCode()) % partitions`, computed here
/// independently of the broker.
pub(super) fn kafka_partition(key: &str, partitions: usize) -> usize {
    let hash = key
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    (if hash == i32::MIN {
        0
    } else {
        hash.unsigned_abs()
    }) as usize
        % partitions
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn coordinators_are_the_leaders_of_their_partitions_and_survive_a_kill() {
    let cluster = LocalCluster::start(3, "");
    // Every node names the same coordinator; Kafka's hash places the key.
    let mut by_group = BTreeMap::new();
    for i in 0..60 {
        let group = format!("group-{i}");
        let mut answers = BTreeSet::new();
        for address in &cluster.clients {
            answers.insert(coordinator(address, GROUP, &group).await);
        }
        assert_eq!(answers.len(), 1, "{group}: every node agrees: {answers:?}");
        let node = answers.into_iter().next().and_then(Result::ok);
        by_group.insert(group, node.expect("a coordinator"));
    }
    let coordinators: BTreeSet<i32> = by_group.values().copied().collect();
    assert_eq!(
        coordinators,
        BTreeSet::from([1, 2, 3]),
        "spread: {by_group:?}"
    );
    let topics = topics_of(&cluster.clients[1]).await.expect("metadata");
    let offsets = &topics["__consumer_offsets"];
    assert_eq!(offsets.len(), 50, "offsets.topic.num.partitions");
    for (group, node) in &by_group {
        assert_eq!(
            offsets[kafka_partition(group, 50)].leader,
            *node,
            "{group}: the leader of its partition coordinates it"
        );
    }
    // A node that does not coordinate a group says so.
    let (group, node) = by_group.iter().next().expect("a group");
    let other = cluster.clients[(*node as usize) % 3].clone();
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.clone())))
        .with_topics(None);
    let (_, answer) = connect(&other)
        .await
        .send("OffsetFetch", &request, 7)
        .await
        .expect("OffsetFetch");
    assert_eq!(answer.error_code, 16, "NOT_COORDINATOR from {other}");

    // A copier whose transaction coordinator and group coordinator are different brokers.
    let mut pick = None;
    for i in 0..100 {
        let id = format!("copier-{i}");
        let txn = coordinator(&cluster.clients[0], TRANSACTION, &id).await;
        let group = coordinator(&cluster.clients[0], GROUP, &id).await;
        if let (Ok(txn), Ok(group)) = (txn, group)
            && txn != group
        {
            pick = Some((id, txn, group));
            break;
        }
    }
    let (id, txn_node, group_node) = pick.expect("an id whose coordinators differ");
    let bootstrap = cluster.bootstrap();
    kafka_tools::create_topic(&bootstrap, "copy-in", 1, &[]);
    kafka_tools::create_topic(&bootstrap, "copy-out", 3, &[]);
    let (acked, produced) = kafka_tools::verifiable_produce(&bootstrap, "copy-in", 3000);
    assert_eq!(acked, 3000, "{produced}");
    kafka_tools::copy_transactionally(&bootstrap, "copy-in", "copy-out", &id, 3000);

    // Offsets of a transaction nobody began (a made-up producer id) are refused by the
    // group coordinator after asking the transaction coordinator, and leave nothing pending.
    let victim = format!("{id}-victim");
    let at = coordinator(&cluster.clients[0], GROUP, &victim)
        .await
        .expect("a coordinator");
    let address = &cluster.clients[at as usize - 1];
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("nobody-tx")))
        .with_group_id(GroupId(StrBytes::from_string(victim.clone())))
        .with_producer_id(ProducerId(123_456_789))
        .with_producer_epoch(0)
        .with_generation_id(-1)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("copy-in")))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(5),
                ]),
        ]);
    let (_, answer) = connect(address)
        .await
        .send("TxnOffsetCommit", &request, 3)
        .await
        .expect("TxnOffsetCommit");
    let code = answer.topics[0].partitions[0].error_code;
    assert_eq!(code, 49, "INVALID_PRODUCER_ID_MAPPING");
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(victim)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("copy-in")))
                .with_partition_indexes(vec![0]),
        ]));
    let (_, answer) = connect(address)
        .await
        .send("OffsetFetch", &request, 7)
        .await
        .expect("OffsetFetch");
    assert_eq!(
        answer.topics[0].partitions[0].error_code, 0,
        "no offset pending (UNSTABLE_OFFSET_COMMIT would block READ_COMMITTED consumers)"
    );

    // The group coordinator is killed and comes back: the offsets the transactions committed
    // are replayed from its log.
    cluster.kill(group_node as usize);
    cluster.restart(group_node as usize);
    let mut committed: Vec<i64> =
        kafka_tools::console_values(&bootstrap, "copy-out", "read_committed")
            .iter()
            .filter_map(|v| v.parse().ok())
            .collect();
    committed.sort();
    assert_eq!(
        committed,
        (0..3000).collect::<Vec<i64>>(),
        "each input record once (transactions coordinated by {txn_node}, group by {group_node})"
    );
    let described = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--describe",
            "--group",
            &id,
        ],
    );
    let row: Vec<&str> = described
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.len() > 5 && cols[1] == "copy-in")
        .unwrap_or_default();
    assert_eq!(
        row.get(2..5),
        Some(&["0", "3000", "3000"][..]),
        "the offsets committed inside the transactions: {described}"
    );
}
