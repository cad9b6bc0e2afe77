//! The metadata quorum's Raft types: what its log holds and what applying an entry answers.

use crate::controller::{Applied, MetadataCommand, Outcome};
use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// A command's outcome as the state machine answers it (blank and membership entries answer
/// [`Applied::Done`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Reply(pub(crate) Outcome);

impl Default for Reply {
    fn default() -> Self {
        Reply(Ok(Applied::Done))
    }
}

openraft::declare_raft_types!(
    /// kmirror's metadata quorum: node ids are Kafka's `node.id`s, a node's address is its
    /// controller listener, and each log entry is one [`MetadataCommand`].
    pub(crate) MetadataRaft:
        D = MetadataCommand,
        R = Reply,
);
