//! Elections of the metadata quorum with a pre-vote (docs/cluster.md, "Elections with a
//! pre-vote"), on three processes started with `scripts/cluster-local.sh`.

use kmirror_testkit::local_cluster::LocalCluster;
use std::time::Duration;

/// How often a node's log says it stopped being the active controller.
fn depositions(cluster: &LocalCluster, node: usize) -> usize {
    std::fs::read_to_string(cluster.dir.join(format!("node-{node}/broker.log")))
        .unwrap_or_default()
        .matches("no longer the active controller")
        .count()
}

/// A voter cut off from the others (restarted with a wrong `controller.quorum.secret`, so
/// nobody accepts its connections) keeps standing for election while away; once it comes back
/// with the right secret the active controller stays active: the voter never raised its term
/// (without the pre-vote its higher term deposed the leader).
#[tokio::test]
async fn a_voter_cut_off_and_back_does_not_depose_the_active_controller() {
    let cluster = LocalCluster::start(3, "");
    let leader = cluster.wait_active_controller(&[1, 2, 3], Duration::from_secs(30));
    let cut = if leader == 3 { 2 } else { 3 };
    let properties = cluster.dir.join(format!("node-{cut}/server.properties"));
    let right = std::fs::read_to_string(&properties).expect("the node's properties");
    let wrong_secret = cluster.dir.join("wrong.secret");
    std::fs::write(&wrong_secret, "a-secret-no-other-node-knows-0123456789").expect("written");
    let wrong: String = right
        .lines()
        .map(|l| {
            if l.starts_with("controller.quorum.secret.file=") {
                format!("controller.quorum.secret.file={}\n", wrong_secret.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_ne!(wrong, right, "the node's properties name its secret file");

    cluster.kill(cut);
    std::fs::write(&properties, &wrong).expect("written");
    let mut alone = cluster.spawn_unwaited(cut);
    // Several election timeouts (1.8 to 2.4 s each) alone.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let _ = alone.kill();
    let _ = alone.wait();
    std::fs::write(&properties, &right).expect("written");
    let before = depositions(&cluster, leader);
    cluster.restart(cut);
    tokio::time::sleep(Duration::from_secs(8)).await;

    assert_eq!(
        depositions(&cluster, leader),
        before,
        "node {leader} stopped being the active controller when node {cut} came back"
    );
    assert_eq!(cluster.active_controller(&[1, 2, 3]), Some(leader));
}

/// How often a node's log says it became the active controller.
fn elections(cluster: &LocalCluster, node: usize) -> usize {
    std::fs::read_to_string(cluster.dir.join(format!("node-{node}/broker.log")))
        .unwrap_or_default()
        .matches("this node is the active controller")
        .count()
}

/// The active controller frozen (SIGSTOP: it accepts connections and never answers) is
/// replaced by one election, and the new active controller stays: before, a voter's pre-vote
/// waited for the frozen node's answer while another voter won, then stood anyway and deposed
/// the new leader (the review saw three elections in four of five rounds).
#[tokio::test]
async fn a_frozen_active_controller_is_replaced_once() {
    let cluster = LocalCluster::start(3, "");
    for round in 1..=3 {
        let frozen = cluster.wait_active_controller(&[1, 2, 3], Duration::from_secs(30));
        let others: Vec<usize> = (1..=3).filter(|n| *n != frozen).collect();
        let before: Vec<(usize, usize)> = others
            .iter()
            .map(|n| (elections(&cluster, *n), depositions(&cluster, *n)))
            .collect();
        cluster.signal(frozen, "STOP");
        let new = cluster.wait_active_controller(&others, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after: Vec<(usize, usize)> = others
            .iter()
            .map(|n| (elections(&cluster, *n), depositions(&cluster, *n)))
            .collect();
        cluster.signal(frozen, "CONT");
        let elected: usize = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).sum();
        let deposed: usize = after.iter().zip(&before).map(|(a, b)| a.1 - b.1).sum();
        assert_eq!(
            (elected, deposed),
            (1, 0),
            "round {round}: node {frozen} frozen, node {new} active: elections and depositions \
             among {others:?}"
        );
        assert_eq!(
            cluster.active_controller(&others),
            Some(new),
            "round {round}"
        );
        // The thawed node rejoins as a follower before the next round.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}
