//! Broker-only nodes as Raft learners (KRaft's observers): they receive the quorum's log and
//! snapshots like a voter, apply them to their image, and never vote (docs/cluster.md).
//!
//! Lifecycle: at start a broker-only node asks the voters in turn, on their controller
//! listeners, to admit it ([`join`]), giving its own controller listener's address, to which
//! the active controller then pushes the log. The node asked admits it only if it is the active
//! controller ([`admit`]); otherwise it names the active controller it knows, which is asked
//! next. The node keeps asking until one admits it, as a broker waits for the quorum at start.
//!
//! Contracts: joining is idempotent: a node already a learner at the same address changes
//! nothing, one at another address has its address updated. A voter is never made a learner
//! (its configuration and the quorum's disagree: refused).

use super::QuorumError;
use super::auth::QuorumSecret;
use super::messages::{Joined, QuorumRequest, QuorumResponse};
use super::network::Peer;
use super::types::MetadataRaft;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long one join request may take.
const ASK_WITHIN: Duration = Duration::from_secs(5);
/// The pause between rounds over the voters.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// What the active controller does for a node asking to join as a learner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// A voter cannot also be a learner.
    RefuseVoter,
    /// A learner at another address that is still alive (heard within the session timeout):
    /// a second process with the same node.id, refused as Kafka refuses a duplicate
    /// registration until the first one's session ends.
    RefuseDuplicate,
    /// Already a learner at this address: nothing to write.
    AlreadyLearner,
    /// A learner at another address, no longer heard: the address is updated.
    UpdateAddress,
    /// Not a member: added as a learner.
    Add,
}

/// Decides what admitting a node means, given whether it is a voter, the address the
/// membership holds for it and whether the node there is alive.
fn admission(is_voter: bool, known: Option<&str>, address: &str, alive: bool) -> Admission {
    match known {
        _ if is_voter => Admission::RefuseVoter,
        Some(known) if known == address => Admission::AlreadyLearner,
        Some(_) if alive => Admission::RefuseDuplicate,
        Some(_) => Admission::UpdateAddress,
        None => Admission::Add,
    }
}

/// Answers a join request on this node's controller listener; `alive`: whether broker
/// `node_id` is heard from now.
pub(super) async fn admit(
    raft: &Raft<MetadataRaft>,
    node_id: u64,
    address: String,
    alive: bool,
) -> Joined {
    let (decision, committed) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow();
        let membership = metrics.membership_config.membership();
        if metrics.current_leader != Some(metrics.id) {
            let leader = metrics
                .current_leader
                .and_then(|id| membership.get_node(&id))
                .map(|node| node.addr.clone());
            return Joined::NotLeader { leader };
        }
        // Applied means committed: a membership not applied yet could still be lost.
        let membership_index = metrics.membership_config.log_id().as_ref().map(|l| l.index);
        let committed = metrics.last_applied.as_ref().map(|l| l.index) >= membership_index;
        let decision = admission(
            membership.voter_ids().any(|id| id == node_id),
            membership.get_node(&node_id).map(|node| node.addr.as_str()),
            &address,
            alive,
        );
        (decision, committed)
    };
    let node = BasicNode::new(&address);
    let written = match decision {
        Admission::RefuseVoter => {
            return Joined::Refused(format!(
                "node {node_id} is a voter of the metadata quorum: a voter cannot join as a \
                 learner (give it process.roles with controller, or a node.id that is no voter)"
            ));
        }
        Admission::RefuseDuplicate => {
            return Joined::Failed(format!(
                "node {node_id} is alive at another address: a second node with node.id \
                 {node_id} is admitted only once the first one's session has ended"
            ));
        }
        Admission::AlreadyLearner if committed => return Joined::Learner,
        Admission::AlreadyLearner => {
            return Joined::Failed(
                "the membership naming this learner is not committed yet".into(),
            );
        }
        Admission::Add => raft.add_learner(node_id, node, false).await,
        Admission::UpdateAddress => {
            let nodes = BTreeMap::from([(node_id, node)]);
            raft.change_membership(ChangeMembers::SetNodes(nodes), true)
                .await
        }
    };
    match written {
        Ok(_) => {
            tracing::info!(node = node_id, %address, ?decision, "a broker-only node joined as a learner");
            Joined::Learner
        }
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => Joined::NotLeader {
            leader: to.leader_node.map(|node| node.addr),
        },
        Err(e) => Joined::Failed(e.to_string()),
    }
}

/// Asks the voters until the active controller admits this node (`node_id`, reached at
/// `address`) as a learner; see the module doc.
pub(super) async fn join(
    node_id: u64,
    address: &str,
    voters: &BTreeMap<i32, String>,
    secret: &Option<QuorumSecret>,
) -> Result<(), QuorumError> {
    let request = QuorumRequest::Join {
        node_id,
        address: address.to_string(),
    };
    let mut leader: Option<String> = None;
    let mut rounds: u32 = 0;
    loop {
        let asked: Vec<String> = leader
            .take()
            .into_iter()
            .chain(voters.values().cloned())
            .collect();
        let mut last = String::from("no voter answered");
        for target in asked {
            let mut peer = Peer::new(&target, secret.clone());
            match peer.call(&request, ASK_WITHIN).await {
                Ok(QuorumResponse::Joined(Joined::Learner)) => {
                    tracing::info!(
                        controller = target,
                        "joined the metadata quorum as a learner"
                    );
                    return Ok(());
                }
                Ok(QuorumResponse::Joined(Joined::Refused(why))) => {
                    return Err(QuorumError::Refused(why));
                }
                Ok(QuorumResponse::Joined(Joined::NotLeader {
                    leader: Some(known),
                })) => {
                    last = format!("{target} is not the active controller");
                    leader = Some(known);
                    break;
                }
                Ok(QuorumResponse::Joined(Joined::NotLeader { leader: None })) => {
                    last = format!("{target} knows no active controller");
                }
                Ok(QuorumResponse::Joined(Joined::Failed(why))) => last = why,
                Ok(other) => last = format!("{target} answered out of turn: {other:?}"),
                Err(e) => last = e.to_string(),
            }
        }
        rounds += 1;
        // A line every few seconds while no controller admits this node.
        if rounds.is_multiple_of(25) {
            tracing::warn!(
                reason = last,
                "waiting for the active controller to admit this node as a learner"
            );
        }
        tokio::time::sleep(RETRY_AFTER).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learner_joins_once_moves_its_address_and_a_voter_never_joins() {
        let here = "127.0.0.1:9093";
        assert_eq!(admission(false, None, here, false), Admission::Add);
        assert_eq!(
            admission(false, Some(here), here, true),
            Admission::AlreadyLearner
        );
        assert_eq!(
            admission(false, Some("127.0.0.1:1"), here, false),
            Admission::UpdateAddress
        );
        assert_eq!(
            admission(false, Some("127.0.0.1:1"), here, true),
            Admission::RefuseDuplicate,
            "the node at the other address is still heard"
        );
        assert_eq!(
            admission(true, Some(here), here, false),
            Admission::RefuseVoter
        );
    }
}
