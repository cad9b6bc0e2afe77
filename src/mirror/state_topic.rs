//! `__mirror_state` as a topic of this broker: one partition per coordinator shard, holding
//! uncompressed batches of coordinator records; and the shard actor's ports over it.
//!
//! The topic is created the first time a mirror needs it, with `mirror.state.topic.num.partitions`
//! partitions. A shard loads by reading its partition from the start and appends each write as
//! one batch stamped with the partition's leader epoch; the high watermark follows the log end
//! (one replica), so what is appended is what the next leader replays.

use crate::broker::{Broker, now_ms};
use crate::controller::ControllerError;
use kmirror_actors::actor::{PortFuture, ShardLogPorts};
use kmirror_actors::partition::Cause;
use kmirror_protocol::records::{CoordinatorRecord, coordinator_batch, coordinator_records};
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The internal topic's name.
pub const MIRROR_STATE_TOPIC: &str = "__mirror_state";

/// Creates `__mirror_state` unless it exists.
pub fn ensure_topic(broker: &Broker) -> Result<(), ControllerError> {
    if broker.topic(MIRROR_STATE_TOPIC).is_some() {
        return Ok(());
    }
    let partitions = broker.config().mirror_state_partitions;
    match broker.create_topic(MIRROR_STATE_TOPIC, partitions, BTreeMap::new(), None) {
        Ok(_) | Err(ControllerError::TopicExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The ports of the shard on `__mirror_state` partition `partition`.
#[derive(Debug, Clone)]
pub struct StateTopicPorts {
    broker: Arc<Broker>,
    partition: i32,
}

impl StateTopicPorts {
    /// Ports over `broker`'s `__mirror_state` partition `partition`.
    pub fn new(broker: Arc<Broker>, partition: i32) -> Self {
        StateTopicPorts { broker, partition }
    }

    fn read(&self) -> Result<Vec<CoordinatorRecord>, Cause> {
        let partition = self
            .broker
            .partition(MIRROR_STATE_TOPIC, self.partition)
            .ok_or_else(|| Cause::retryable("__mirror_state does not exist yet"))?;
        let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        let mut records = Vec::new();
        log.for_each_batch(log.log_start_offset(), |batch| {
            match coordinator_records(batch) {
                Ok(mut decoded) => records.append(&mut decoded),
                // A record this build cannot read is skipped, loudly: the rest of the shard
                // still loads.
                Err(e) => tracing::error!(offset = batch.base_offset(), error = %e, "unreadable __mirror_state batch"),
            }
            Ok(())
        })
        .map_err(|e| Cause::retryable(e.to_string()))?;
        Ok(records)
    }

    fn write(&self, records: &[CoordinatorRecord]) -> Result<(), Cause> {
        let (partition, epoch) = self
            .broker
            .partition(MIRROR_STATE_TOPIC, self.partition)
            .zip(self.broker.leader_epoch(MIRROR_STATE_TOPIC, self.partition))
            .ok_or_else(|| Cause::retryable("__mirror_state does not exist yet"))?;
        let batch = coordinator_batch(records, epoch, now_ms())
            .map_err(|e| Cause::fatal(format!("encoding __mirror_state records: {e}")))?;
        let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        log.append_as_leader(batch, epoch, now_ms())
            .map_err(|e| Cause::retryable(e.to_string()))?;
        let end = log.log_end_offset();
        log.update_high_watermark(end);
        Ok(())
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

impl ShardLogPorts for StateTopicPorts {
    fn read_all(&self) -> PortFuture<Result<Vec<CoordinatorRecord>, Cause>> {
        Box::pin(std::future::ready(self.read()))
    }

    fn append(
        &self,
        records: Vec<CoordinatorRecord>,
    ) -> Result<PortFuture<Result<(), Cause>>, Cause> {
        self.write(&records)?;
        if !stops(&records) {
            return Ok(Box::pin(std::future::ready(Ok(()))));
        }
        let partition = self.broker.partition(MIRROR_STATE_TOPIC, self.partition);
        let broker = self.broker.clone();
        Ok(Box::pin(async move {
            match partition {
                Some(partition) => broker
                    .make_durable(partition)
                    .await
                    .map_err(Cause::retryable),
                None => Err(Cause::retryable("__mirror_state does not exist yet")),
            }
        }))
    }
}
