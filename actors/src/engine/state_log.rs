//! `__mirror_state` as a topic of the host: one partition per coordinator shard, holding
//! uncompressed batches of coordinator records; and the shard actor's ports over it.
//!
//! The engine creates the topic the first time a mirror needs it, with
//! [`crate::host::EngineSettings::state_partitions`] partitions. A shard loads by reading its
//! partition from the start and appends each write as one batch stamped with the partition's
//! leader epoch. The partition is replicated like any other: a write is answered only once
//! every in-sync replica holds it ([`crate::host::Host::replicated`]), a STOPPED record only
//! once it is on disk too ([`crate::host::Host::make_durable`]), so the next leader replays
//! it; a shard whose partition changed leadership since it loaded writes nothing more.

use crate::actor::{PortFuture, ShardLogPorts};
use crate::host::Host;
use crate::partition::Cause;
use kmirror_protocol::records::{CoordinatorRecord, coordinator_batch, coordinator_records};
use kmirror_protocol::state::MirrorState;

/// The internal topic's name.
pub const MIRROR_STATE_TOPIC: &str = "__mirror_state";

/// The ports of the shard on `__mirror_state` partition `partition`.
#[derive(Debug, Clone)]
pub struct StateLogPorts<H: Host> {
    host: H,
    partition: i32,
    /// The partition's leader epoch when the shard started here: a write after it changed
    /// is refused (the shard moved, and perhaps back: a new actor loaded what others wrote).
    leader_epoch: Option<i32>,
}

impl<H: Host> StateLogPorts<H> {
    /// Ports over the host's `__mirror_state` partition `partition`, for the leadership it has
    /// now.
    pub fn new(host: H, partition: i32) -> Self {
        let leader_epoch = Self::epoch_of(&host, partition);
        StateLogPorts {
            host,
            partition,
            leader_epoch,
        }
    }

    /// The partition's leader epoch when these ports were made.
    pub fn leader_epoch(&self) -> Option<i32> {
        self.leader_epoch
    }

    fn epoch_of(host: &H, partition: i32) -> Option<i32> {
        host.topic(MIRROR_STATE_TOPIC)
            .and_then(|t| t.partitions.get(partition as usize).cloned())
            .map(|p| p.leader_epoch)
    }

    fn read(&self) -> Result<Vec<CoordinatorRecord>, Cause> {
        let mut records = Vec::new();
        self.host.with_log(MIRROR_STATE_TOPIC, self.partition, |log| {
            log.find_batch(log.log_start_offset(), &mut |batch| {
                match coordinator_records(batch) {
                    Ok(mut decoded) => records.append(&mut decoded),
                    // A record this build cannot read is skipped, loudly: the rest of the shard
                    // still loads.
                    Err(e) => tracing::error!(offset = batch.base_offset(), error = %e, "unreadable __mirror_state batch"),
                }
                false
            })
            .map(|_| ())
        })?;
        Ok(records)
    }

    fn write(&self, records: &[CoordinatorRecord]) -> Result<(), Cause> {
        let epoch = Self::epoch_of(&self.host, self.partition)
            .ok_or_else(|| Cause::retryable("__mirror_state does not exist yet"))?;
        if self.leader_epoch.is_some_and(|started| started != epoch) {
            return Err(Cause::retryable(format!(
                "__mirror_state partition {} changed leadership since this shard loaded it",
                self.partition
            )));
        }
        let batch = coordinator_batch(records, epoch, self.host.now_ms())
            .map_err(|e| Cause::fatal(format!("encoding __mirror_state records: {e}")))?;
        self.host
            .with_log(MIRROR_STATE_TOPIC, self.partition, |log| {
                Ok(log.append_as_leader(batch, epoch)?)
            })
    }
}

/// Whether `records` make a partition STOPPED: its topic takes writes once they are answered,
/// so they (and the LME written before them) must survive a crash first (a lost STOPPED would
/// run STOPPING again after a restart, over writes already acknowledged).
fn stops(records: &[CoordinatorRecord]) -> bool {
    records.iter().any(|r| {
        matches!(
            r,
            CoordinatorRecord::MirrorPartitionState { value: Some(v), .. }
                if v.state == MirrorState::Stopped.wire_value()
        )
    })
}

impl<H: Host> ShardLogPorts for StateLogPorts<H> {
    fn read_all(&self) -> PortFuture<Result<Vec<CoordinatorRecord>, Cause>> {
        Box::pin(std::future::ready(self.read()))
    }

    fn append(
        &self,
        records: Vec<CoordinatorRecord>,
    ) -> Result<PortFuture<Result<(), Cause>>, Cause> {
        self.write(&records)?;
        // Every write is answered once the in-sync replicas hold it (the shard's next leader
        // replays it); a STOPPED one also once it is on disk.
        let done = if stops(&records) {
            self.host.make_durable(MIRROR_STATE_TOPIC, self.partition)
        } else {
            self.host.replicated(MIRROR_STATE_TOPIC, self.partition)
        };
        Ok(Box::pin(async move { done.await.map_err(Cause::from) }))
    }
}
