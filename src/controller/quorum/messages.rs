//! The quorum's messages (docs/cluster.md): what one controller asks another over the
//! controller listener ([`QuorumRequest`]) and the answers ([`QuorumResponse`], with
//! [`Forwarded`] and [`Joined`]). A leaf, shared by those who send them ([`super::network`]'s
//! peers, the election, the learner, the lost-log check) and the listener that answers them
//! ([`super::server`]).

use super::types::MetadataRaft;
use crate::controller::{MetadataCommand, Outcome};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};

/// What one controller asks another.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum QuorumRequest {
    /// Raft's AppendEntries.
    AppendEntries(AppendEntriesRequest<MetadataRaft>),
    /// Raft's RequestVote.
    Vote(VoteRequest<u64>),
    /// Would the node asked vote for `candidate`, whose metadata is applied up to
    /// `last_applied`, now ([`super::election`])? Changes nothing.
    PreVote {
        candidate: u64,
        #[serde(default)]
        last_applied: Option<openraft::LogId<u64>>,
    },
    /// Up to which index did the node asked (the active controller) replicate to `node_id`
    /// ([`super::lost_log`])?
    ReplicatedTo { node_id: u64 },
    /// A snapshot chunk.
    InstallSnapshot(InstallSnapshotRequest<MetadataRaft>),
    /// A metadata change for the active controller to commit.
    Forward(MetadataCommand),
    /// Broker `node_id` is alive (sent to the active controller).
    Heartbeat { node_id: i32 },
    /// Broker-only node `node_id` asks to follow the log as a learner, reached at `address`
    /// (its controller listener).
    Join { node_id: u64, address: String },
}

/// The answer to a [`QuorumRequest`].
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum QuorumResponse {
    /// To AppendEntries.
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To RequestVote.
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To a pre-vote.
    PreVote { granted: bool },
    /// To ReplicatedTo: `None` when the node asked is not the active controller or replicated
    /// nothing to it.
    ReplicatedTo { index: Option<u64> },
    /// To a snapshot chunk.
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// To a forwarded change.
    Forwarded(Forwarded),
    /// To a heartbeat: whether the node asked is the active controller and counted it.
    Heartbeat { counted: bool },
    /// To a join request.
    Joined(Joined),
}

/// What became of a forwarded change.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Forwarded {
    /// Committed at log `index` and applied there with this outcome.
    Applied { index: u64, outcome: Outcome },
    /// The node asked is not the active controller (it names the one it knows, if any):
    /// nothing was written.
    NotLeader { leader: Option<u64> },
    /// The active controller could not commit it (its outcome is unknown).
    Failed(String),
}

/// The answer to a join request.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Joined {
    /// The node is a learner at the address it gave.
    Learner,
    /// The node asked is not the active controller; it names the one it knows (its address).
    NotLeader { leader: Option<String> },
    /// The node can never join as a learner (it is a voter).
    Refused(String),
    /// The change could not be committed now (a membership change in progress, ...).
    Failed(String),
}
