//! A node of a three-process cluster whose whole data directory was wiped comes back under its
//! old `node.id` (docs/cluster.md, "A replaced log directory").

use super::quorum_cluster::{create_topic, leaders_of};
use kmirror_testkit::local_cluster::LocalCluster;
use std::time::{Duration, Instant};

/// The node is refused, with a message naming the lost directory, instead of serving the
/// partitions it leads empty from offset 0 (as it did before: the hostile review's
/// `t_wipe.sh`), and the other nodes keep their metadata.
#[tokio::test]
async fn a_node_whose_data_directory_was_wiped_is_refused_not_served_empty() {
    let cluster = LocalCluster::start(3, "");
    create_topic(&cluster.clients[0], "w", 6)
        .await
        .expect("created");
    let leaders = leaders_of(&cluster.clients[0]).await.expect("metadata")["w"].clone();
    assert!(
        leaders.contains(&3),
        "node 3 leads a partition: {leaders:?}"
    );

    cluster.kill(3);
    let node_dir = cluster.dir.join("node-3");
    std::fs::remove_dir_all(cluster.data(3)).expect("wiped");
    let before = std::fs::metadata(node_dir.join("broker.log"))
        .expect("the log")
        .len() as usize;
    let mut wiped = cluster.spawn_unwaited(3);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = wiped.try_wait().expect("the node's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = wiped.kill();
            panic!("the wiped node 3 still runs after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let said = std::fs::read_to_string(node_dir.join("broker.log")).expect("the log")[before..]
        .to_string();
    assert!(!status.success(), "the wiped node exited cleanly: {said}");
    assert!(
        said.contains("data was lost or the directory replaced"),
        "the wiped node did not say why it stopped: {said}"
    );
    assert_eq!(
        leaders_of(&cluster.clients[0]).await.expect("metadata")["w"],
        leaders,
        "the others' metadata changed"
    );
}
