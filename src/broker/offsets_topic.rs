//! `__consumer_offsets` as the group coordinator's journal in a multi-process cluster
//! (docs/cluster.md, "Coordinators on replicated logs"; [`crate::groups::journal`]).
//!
//! Lifecycle: the broker becomes the leader of a partition of `__consumer_offsets` → its role
//! changes → [`Broker::offsets_leadership`] replays the partition into the coordinator, which
//! serves the partition's groups from then on; it stops leading → their state is dropped and
//! their writes refused. A group write is one batch the leader appends at its leader epoch
//! (under the partition's log lock, as a produce); the request is answered once the in-sync
//! replicas hold it ([`Broker::group_writes_replicated`]), so the next leader replays it.
//!
//! Lock order: the coordinator's groups, then the partition's log, then its role (an append
//! runs under the groups' lock); a load reads the log first and takes the groups' lock after
//! letting the log go.

use super::coordinators::CoordinatorKind;
use super::{Broker, Partition, now_ms};
use crate::controller::Controller;
use crate::groups::GroupCoordinator;
use crate::groups::journal::{OffsetsPartitions, WriteError};
use crate::storage::StorageError;
use kmirror_protocol::batch::RecordBatch;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::records::KeyValue;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How long a group write waits for its partition's in-sync replicas before the client is
/// answered COORDINATOR_NOT_AVAILABLE: Kafka's `offsets.commit.timeout.ms` default, well within
/// a client's request timeout (the write may still be replicated later).
pub(crate) const GROUP_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The partitions of `__consumer_offsets` as the coordinator sees them: placed by the
/// metadata, written through the broker once it is shared.
#[derive(Debug)]
pub(crate) struct OffsetsTopic {
    controller: Arc<Mutex<Controller>>,
    broker: OnceLock<Weak<Broker>>,
}

impl OffsetsTopic {
    /// The topic as `controller`'s metadata places it; writes wait for [`OffsetsTopic::attach`].
    pub(crate) fn new(controller: Arc<Mutex<Controller>>) -> OffsetsTopic {
        OffsetsTopic {
            controller,
            broker: OnceLock::new(),
        }
    }

    /// Writes go through `broker` from now on.
    pub(crate) fn attach(&self, broker: &Arc<Broker>) {
        let _ = self.broker.set(Arc::downgrade(broker));
    }
}

impl OffsetsPartitions for OffsetsTopic {
    fn partition_of(&self, group: &str) -> Option<i32> {
        let count = self
            .controller
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .topics()
            .get(CoordinatorKind::Group.topic())
            .map(|t| t.partitions.len() as i32)?;
        Some(super::coordinators::coordinator_partition(group, count))
    }

    fn append(&self, partition: i32, records: Vec<KeyValue>) -> Result<(), WriteError> {
        let broker =
            self.broker.get().and_then(Weak::upgrade).ok_or_else(|| {
                WriteError::NotLed("the broker does not serve clients yet".into())
            })?;
        broker.append_group_records(partition, records)
    }
}

impl Broker {
    /// Shares the broker, and in a cluster gives its group coordinator the partitions of
    /// `__consumer_offsets` to write to.
    pub fn into_shared(self) -> Arc<Broker> {
        let broker = Arc::new(self);
        if let Some(topic) = &broker.offsets_topic {
            topic.attach(&broker);
        }
        broker
    }

    /// Appends group records to partition `index` of `__consumer_offsets`, which this broker
    /// leads, as one batch of its leader epoch.
    fn append_group_records(&self, index: i32, records: Vec<KeyValue>) -> Result<(), WriteError> {
        let topic = CoordinatorKind::Group.topic();
        let not_led = || WriteError::NotLed(format!("{topic}-{index} is not led here"));
        let partition = self.partition(topic, index).ok_or_else(not_led)?;
        let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.led_epoch(&partition).ok_or_else(not_led)?;
        let batch = kmirror_protocol::records::leader_batch(&records, epoch, now_ms())
            .map_err(|e| WriteError::Encode(e.to_string()))?;
        match log.append_as_leader(batch, epoch, now_ms()) {
            Ok(_) => {}
            Err(StorageError::LogDeleted { .. }) => return Err(not_led()),
            Err(e) => return Err(e.into()),
        }
        self.committed_append(&partition, &mut log);
        drop(log);
        self.notify_appended();
        Ok(())
    }

    /// Waits until what this broker wrote for `group` is held by the in-sync replicas of its
    /// partition of `__consumer_offsets` (at once when groups are in a local log): the answer
    /// to a commit comes after it, so the partition's next leader has the commit. An error
    /// code when it did not get there: NOT_COORDINATOR when the partition moved,
    /// COORDINATOR_NOT_AVAILABLE when its replicas did not follow within
    /// [`GROUP_WRITE_TIMEOUT`] or were fewer than `min.insync.replicas` (both retried).
    pub(crate) async fn group_writes_replicated(&self, group: &str) -> Result<(), i16> {
        if self.offsets_topic.is_none() {
            return Ok(());
        }
        match self.coordinator_partition_of(CoordinatorKind::Group, group) {
            Some(index) => {
                let deadline = Instant::now() + GROUP_WRITE_TIMEOUT;
                self.offsets_partition_replicated(index, deadline).await
            }
            None => Err(ErrorCode::NOT_COORDINATOR.0),
        }
    }

    /// [`Broker::group_writes_replicated`] for everything written so far to partition `index`
    /// of `__consumer_offsets`, waiting until `deadline` at most.
    async fn offsets_partition_replicated(&self, index: i32, deadline: Instant) -> Result<(), i16> {
        let Some(partition) = self.partition(CoordinatorKind::Group.topic(), index) else {
            return Err(ErrorCode::NOT_COORDINATOR.0);
        };
        match tokio::time::timeout_at(deadline, self.replication_settled(&partition)).await {
            Ok(Ok(ErrorCode::NONE)) => Ok(()),
            // Fewer in-sync replicas than `min.insync.replicas` hold it, as Kafka's coordinator
            // refuses such a commit (the client retries).
            Ok(Ok(_)) => Err(ErrorCode::COORDINATOR_NOT_AVAILABLE.0),
            Ok(Err(e)) => {
                tracing::warn!(partition = index, error = %e, "a group write did not reach the in-sync replicas");
                Err(ErrorCode::COORDINATOR_NOT_AVAILABLE.0)
            }
            Err(_) => {
                tracing::warn!(
                    partition = index,
                    "a group write did not reach the in-sync replicas within {GROUP_WRITE_TIMEOUT:?}"
                );
                Err(ErrorCode::COORDINATOR_NOT_AVAILABLE.0)
            }
        }
    }

    /// Waits (until `deadline`) until a transaction marker this broker wrote on `topic`-`index`
    /// is held by the partition's in-sync replicas, as Kafka writes markers with acks=all: the
    /// coordinator forgets the transaction once answered, so a marker lost with its leader
    /// would leave the transaction open on the next one. At once on a single node.
    pub(crate) async fn marker_replicated(
        &self,
        topic: &str,
        index: i32,
        deadline: Instant,
    ) -> Result<(), i16> {
        if self.quorum.is_none() {
            return Ok(());
        }
        if topic == CoordinatorKind::Group.topic() {
            return self.offsets_partition_replicated(index, deadline).await;
        }
        let Some(partition) = self.partition(topic, index) else {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER.0);
        };
        match tokio::time::timeout_at(deadline, self.replicated_to_isr(&partition)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!(topic, partition = index, error = %e, "a marker did not reach the in-sync replicas");
                Err(ErrorCode::NOT_LEADER_OR_FOLLOWER.0)
            }
            Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT.0),
        }
    }

    /// After partition `index` of `__consumer_offsets` changed role here: loads its groups
    /// when this broker now leads it (offsets of topics deleted meanwhile are forgotten),
    /// drops them when it does not. Called with no lock held.
    pub(super) fn offsets_leadership(&self, index: i32, partition: &Partition, leads: bool) {
        if self.offsets_topic.is_none() {
            return;
        }
        // Dropped first, also when it leads: no write lands and nothing stale is served while
        // the partition is read.
        self.groups.unload_partition(index);
        if !leads {
            return;
        }
        let mut records = Vec::new();
        let read = {
            let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            let start = log.log_start_offset();
            log.find_batch(start, &mut |batch: &RecordBatch| {
                records.extend(GroupCoordinator::batch_records(batch));
                false
            })
        };
        if let Err(e) = read {
            // Served without what could not be read, loudly: refusing the partition's groups
            // for good would be worse than the records past the damage.
            tracing::error!(partition = index, error = %e, "reading a __consumer_offsets partition");
        }
        self.groups.load_partition(index, records);
        if let Err(e) = self.forget_offsets_of_deleted_topics() {
            tracing::error!(error = %e, "forgetting deleted topics' offsets");
        }
    }

    /// Forgets, in every group coordinated here, the offsets of topics the metadata no longer
    /// has (a deletion that crashed before they were forgotten, or one applied while a
    /// partition's groups were coordinated elsewhere).
    pub(super) fn forget_offsets_of_deleted_topics(&self) -> Result<(), StorageError> {
        let with_offsets = self.groups.topics_with_offsets();
        let deleted: Vec<String> = self.with_controller(|c| {
            with_offsets
                .into_iter()
                .filter(|t| !c.topics().contains_key(t))
                .collect()
        });
        for topic in deleted {
            self.groups.forget_topic(&topic)?;
        }
        Ok(())
    }
}
