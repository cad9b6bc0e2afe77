//! Group commit for leader-epoch bumps: the BumpLeaderEpochs each mirror partition sends on its
//! way to STOPPED (and for DLE >= SLE) are made durable together.
//!
//! Every bump is a metadata record the controller fsyncs before answering; one fsync per
//! partition made a Stop of 10,000 partitions take 23 s, the fsyncs in a row. Here bumps share
//! one write and one fsync ([`super::group_commit`], [`super::Broker::bump_leader_epochs`]). A
//! bump is answered only once it is durable.

use super::Broker;
use super::group_commit::GroupCommit;
use std::sync::Arc;

/// The epoch after a bump (`None`: no such partition), or why it failed.
pub(crate) type BumpOutcome = Result<Option<i32>, String>;

/// Bumps waiting for the next flush: (topic, partition, `MinLeaderEpoch`).
pub(crate) type EpochBumps = Arc<GroupCommit<(String, i32, i32), BumpOutcome>>;

impl Broker {
    /// BumpLeaderEpochs for one partition through the group commit: the leader epoch becomes
    /// at least `min_leader_epoch + 1`, durably, and the epoch afterwards is returned. Must run
    /// inside a Tokio runtime.
    pub async fn bump_leader_epoch_grouped(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> BumpOutcome {
        let broker = Arc::clone(self);
        let flush = move |requests: &[(String, i32, i32)]| -> Vec<BumpOutcome> {
            // A blocking thread of the runtime: the write may wait for the metadata quorum.
            let written = tokio::runtime::Handle::current()
                .block_on(broker.bump_leader_epochs(requests.to_vec()));
            match written {
                Ok(epochs) => epochs.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e.to_string()); requests.len()],
            }
        };
        self.epoch_bumps
            .submit((topic.to_string(), partition, min_leader_epoch), flush, Err)
            .await
    }
}
