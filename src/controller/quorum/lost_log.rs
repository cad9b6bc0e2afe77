//! A node that starts with no Raft log asks the voters, before it takes part, whether the
//! active controller replicated entries to it: if so its log was lost (a wiped or replaced data
//! directory under the same `node.id`) and it refuses to start (docs/cluster.md, "A replaced
//! log directory"). Taking part with an empty log under its old id would break Raft's rule (it
//! could vote again in a term it voted in), and the active controller, finding a follower's
//! log shorter than what it acknowledged, stops its own Raft core.
//!
//! Only the active controller knows what it replicated to whom (soft state): a node wiped after
//! a change of active controller is not caught here. Its broker is then caught by its
//! registration (`directory.id`), once its image is caught up.

use super::QuorumError;
use super::auth::QuorumSecret;
use super::messages::{QuorumRequest, QuorumResponse};
use super::network::Peer;
use super::types::MetadataRaft;
use openraft::Raft;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long each voter has to answer (one that does not is not asked again: a cluster's
/// first start finds the others not yet up).
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// The highest log index this node (the active controller) knows `node_id` to hold.
pub(super) fn replicated_to(raft: &Raft<MetadataRaft>, node_id: u64) -> Option<u64> {
    raft.metrics()
        .borrow()
        .replication
        .as_ref()?
        .get(&node_id)?
        .map(|log_id| log_id.index)
}

/// Refuses to start node `node_id`, whose Raft log is empty, when a voter replicated entries
/// to it.
pub(super) async fn refuse_a_lost_log(
    node_id: u64,
    voters: &BTreeMap<i32, String>,
    secret: &Option<QuorumSecret>,
) -> Result<(), QuorumError> {
    for (voter, address) in voters.iter().filter(|(id, _)| **id as u64 != node_id) {
        let mut peer = Peer::new(address, secret.clone());
        let ask = QuorumRequest::ReplicatedTo { node_id };
        if let Ok(QuorumResponse::ReplicatedTo { index: Some(index) }) =
            peer.call(&ask, ASK_WITHIN).await
        {
            return Err(QuorumError::LostLog {
                node_id,
                voter: *voter,
                index,
            });
        }
    }
    Ok(())
}
