//! The metadata quorum's costs (docs/cluster.md), a 3-process cluster side by side with a
//! single-node `kmirror broker` in one run (ratios, since the machine is shared):
//! - topic creations per second, one client in turn and 16 at once (each change committed by
//!   a majority and applied on the node asked before it is answered);
//! - leader-epoch bumps per second: BumpLeaderEpochs of 10,000 partitions in requests of 100
//!   (as a Stop of a 10,000-partition topic bumps each partition's epoch), sent to all three
//!   brokers at once for the cluster;
//! - the controller's failover: SIGKILL of the active controller until another node is active,
//!   and until a topic creation through a survivor is acknowledged (5 kills).
//!
//! `QUORUM_BENCH_TOPICS` (300) sets the creations.

mod support;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::messages::{BumpLeaderEpochsRequest, bump_leader_epochs_request};
use kmirror_testkit::local_cluster::{LocalCluster, topics_of};
use std::time::{Duration, Instant};

async fn connect(address: &str) -> Connection {
    Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connects")
}

async fn create(connection: &Connection, name: &str, partitions: i32) -> i16 {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
    let (_, answer) = connection
        .send("CreateTopics", &request, 7)
        .await
        .expect("CreateTopics answers");
    answer.topics[0].error_code
}

/// Creations per second: `count` topics, `parallel` clients (spread over `addresses`).
async fn creations(addresses: &[String], prefix: &str, count: usize, parallel: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..parallel {
        let address = addresses[client % addresses.len()].clone();
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            let connection = connect(&address).await;
            for i in (client..count).step_by(parallel) {
                let code = create(&connection, &format!("{prefix}-{i}"), 1).await;
                assert_eq!(code, 0, "{prefix}-{i}");
            }
        }));
    }
    for task in tasks {
        task.await.expect("creations");
    }
    count as f64 / start.elapsed().as_secs_f64()
}

/// Partitions bumped per second: every partition of `topic` (10,000) bumped once, in requests of
/// 100, each broker bumping the partitions it leads, all brokers at once.
async fn bumps(addresses: &[String], leaders_from: &str, topic: &str) -> f64 {
    let views = topics_of(leaders_from).await.expect("metadata")[topic].clone();
    let id = {
        let connection = connect(leaders_from).await;
        let (_, metadata) = connection
            .send(
                "Metadata",
                &kafka_protocol::messages::MetadataRequest::default().with_topics(None),
                12,
            )
            .await
            .expect("metadata");
        metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .expect("the topic")
            .topic_id
    };
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (node, address) in addresses.iter().enumerate() {
        let node = node as i32 + 1;
        let led: Vec<(i32, i32)> = views
            .iter()
            .enumerate()
            .filter(|(_, v)| addresses.len() == 1 || v.leader == node)
            .map(|(p, v)| (p as i32, v.leader_epoch))
            .collect();
        let address = address.clone();
        tasks.push(tokio::spawn(async move {
            let connection = connect(&address).await;
            for chunk in led.chunks(100) {
                let request = BumpLeaderEpochsRequest {
                    topics: vec![bump_leader_epochs_request::TopicState {
                        topic_id: id,
                        partitions: chunk
                            .iter()
                            .map(|&(partition_index, min_leader_epoch)| {
                                bump_leader_epochs_request::LeaderEpochState {
                                    partition_index,
                                    min_leader_epoch,
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let (_, answer) = connection
                    .send("BumpLeaderEpochs", &request, 0)
                    .await
                    .expect("BumpLeaderEpochs answers");
                assert!(
                    answer.topics[0]
                        .partitions
                        .iter()
                        .all(|p| p.error_code == 0),
                    "bumped"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("bumps");
    }
    views.len() as f64 / start.elapsed().as_secs_f64()
}

/// SIGKILL of the active controller: (until another node is active, until a creation through a
/// survivor is acknowledged).
async fn failover(cluster: &LocalCluster, round: usize) -> (Duration, Duration) {
    let all = [1, 2, 3];
    let active = cluster.wait_active_controller(&all, Duration::from_secs(30));
    let others: Vec<usize> = all.iter().copied().filter(|n| *n != active).collect();
    let survivor = cluster.clients[others[0] - 1].clone();
    let connection = connect(&survivor).await;
    let killed = Instant::now();
    cluster.kill(active);
    let elected = loop {
        if cluster.active_controller(&others).is_some() {
            break killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let code = create(&connection, &format!("failover-{round}"), 1).await;
    assert_eq!(code, 0, "created after the failover");
    let served = killed.elapsed();
    cluster.restart(active);
    (elected, served)
}

fn main() {
    let count: usize = std::env::var("QUORUM_BENCH_TOPICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let single_dir = tempfile::tempdir().expect("temp dir");
        let (mut single, single_address) = support::spawn_kmirror(single_dir.path(), "");
        let cluster = LocalCluster::start(3, "");
        cluster.wait_active_controller(&[1, 2, 3], Duration::from_secs(30));
        let one = vec![single_address.clone()];
        // A non-controller node answers after forwarding; the figures include that hop.
        let nodes = cluster.clients.clone();

        let single_seq = creations(&one, "seq", count, 1).await;
        let cluster_seq = creations(&nodes, "seq", count, 1).await;
        let single_par = creations(&one, "par", count, 16).await;
        let cluster_par = creations(&nodes, "par", count, 16).await;
        println!(
            "topic creations/s, one client: single node {single_seq:.0}, 3-node quorum {cluster_seq:.0} ({:.2}x)",
            cluster_seq / single_seq
        );
        println!(
            "topic creations/s, 16 clients: single node {single_par:.0}, 3-node quorum {cluster_par:.0} ({:.2}x)",
            cluster_par / single_par
        );

        let connection = connect(&single_address).await;
        assert_eq!(create(&connection, "wide", 10_000).await, 0);
        let connection = connect(&nodes[0]).await;
        assert_eq!(create(&connection, "wide", 10_000).await, 0);
        let single_bumps = bumps(&one, &single_address, "wide").await;
        let cluster_bumps = bumps(&nodes, &nodes[0], "wide").await;
        println!(
            "leader-epoch bumps/s (10,000 partitions, requests of 100): single node {single_bumps:.0}, 3 brokers {cluster_bumps:.0} ({:.2}x)",
            cluster_bumps / single_bumps
        );

        let mut elected = Vec::new();
        let mut served = Vec::new();
        for round in 0..5 {
            let (e, s) = failover(&cluster, round).await;
            elected.push(e.as_secs_f64() * 1000.0);
            served.push(s.as_secs_f64() * 1000.0);
        }
        println!(
            "controller failover (SIGKILL of the active controller, 5 times): new active after median {:.0} ms (max {:.0}), a creation acknowledged after median {:.0} ms (max {:.0})",
            support::median(&mut elected.clone()),
            elected.iter().cloned().fold(0.0, f64::max),
            support::median(&mut served.clone()),
            served.iter().cloned().fold(0.0, f64::max),
        );
        support::terminate(&mut single);
    });
}
