//! What the broker does for the transaction coordinator: write a completion's markers to its
//! partitions and to its groups' coordinators (which apply or drop the transaction's offsets),
//! then mark it complete; and abort transactions past their timeout.
//!
//! A marker is written at the partition's current leader epoch with coordinator epoch 0 (one
//! coordinator, never moved). A partition whose topic was deleted meanwhile gets no marker; a
//! partition whose producer already moved to a newer epoch (fenced meanwhile) is skipped too,
//! since the newer epoch's own end closes it. A partition that is read-only (it became a mirror
//! partition after joining the transaction) gets no marker either: a mirror partition holds only
//! the source's batches, and the mirror's truncation drops the transaction's data there.

use super::coordinators::CoordinatorKind;
use super::{Broker, Partition, now_ms};
use crate::groups::journal::WriteError;
use crate::storage::StorageError;
use crate::txn::{Completion, TxnError};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::metadata::mirror_of;
use kmirror_actors::partition::Desired;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// A completion's partitions led by other brokers, by leader.
type Remote = BTreeMap<i32, Vec<(String, i32)>>;

impl Broker {
    /// Writes `completion`'s markers (on this broker's partitions, then through WriteTxnMarkers
    /// to the brokers leading the others) and offsets, then completes it in the coordinator.
    /// A marker that could not be written fails the completion; housekeeping retries it.
    /// The markers written here are replicated before the completion counts (the coordinator
    /// forgets a completed transaction: a marker lost with its leader would leave the
    /// transaction open on the next one).
    pub async fn complete_transaction(&self, completion: &Completion) -> Result<(), TxnError> {
        let (remote, written) = self.write_local_markers(completion)?;
        let deadline = tokio::time::Instant::now() + super::offsets_topic::GROUP_WRITE_TIMEOUT;
        for (topic, index) in written {
            if let Err(code) = self.marker_replicated(&topic, index, deadline).await {
                tracing::info!(
                    transactional_id = %completion.transactional_id,
                    topic,
                    partition = index,
                    error = ErrorCode(code).name(),
                    "a marker is not replicated yet; the transaction ends later"
                );
                return Err(TxnError::MarkerUndelivered);
            }
        }
        for (leader, partitions) in remote {
            self.send_markers(leader, completion, &partitions).await?;
        }
        self.finish_completion(completion)
    }

    /// At start-up, before clients come: completes `completion` if every partition it touches
    /// is this broker's (true), else leaves it to housekeeping, which completes it once the
    /// other brokers answer.
    pub(super) fn complete_local_transaction(
        &self,
        completion: &Completion,
    ) -> Result<bool, TxnError> {
        if !self.write_local_markers(completion)?.0.is_empty() {
            return Ok(false);
        }
        self.finish_completion(completion).map(|()| true)
    }

    /// Writes the markers of `completion` on the partitions this broker leads, and ends its
    /// offsets if this broker coordinates one of its groups; returns the others by leader (a
    /// group's marker goes to its partition of `__consumer_offsets`). A deleted topic's
    /// partitions get none. A group without a reachable coordinator fails it before any marker.
    /// Also returns the partitions written here (data partitions, and the groups' partitions
    /// of `__consumer_offsets`).
    fn write_local_markers(
        &self,
        completion: &Completion,
    ) -> Result<(Remote, Vec<(String, i32)>), TxnError> {
        let mut remote = Remote::new();
        let mut written = Vec::new();
        let mut local_groups = Vec::new();
        for group in &completion.groups {
            match self.coordinator_placement(CoordinatorKind::Group, group) {
                None => {
                    tracing::warn!(
                        transactional_id = %completion.transactional_id,
                        group,
                        "the group has no coordinator now; the transaction ends later"
                    );
                    return Err(TxnError::MarkerUndelivered);
                }
                Some((partition, node)) if node == self.config.node_id => {
                    if !self.groups.serves(partition) {
                        tracing::info!(
                            transactional_id = %completion.transactional_id,
                            group,
                            "the group's partition is still loading; the transaction ends later"
                        );
                        return Err(TxnError::MarkerUndelivered);
                    }
                    local_groups.push(partition);
                }
                Some((partition, node)) => {
                    let marker = (CoordinatorKind::Group.topic().to_string(), partition);
                    remote.entry(node).or_default().push(marker);
                }
            }
        }
        for (topic, index) in &completion.partitions {
            match self.leader_of(topic, *index) {
                None => {}
                Some(leader) if leader != self.config.node_id => {
                    remote
                        .entry(leader)
                        .or_default()
                        .push((topic.clone(), *index));
                }
                Some(_) => {
                    let code = self.write_marker(
                        topic,
                        *index,
                        completion.producer_id,
                        completion.producer_epoch,
                        completion.commit,
                    );
                    if code != 0 {
                        return Err(TxnError::Storage);
                    }
                    written.push((topic.clone(), *index));
                }
            }
        }
        local_groups.sort_unstable();
        local_groups.dedup();
        let producer = (completion.producer_id, completion.producer_epoch);
        for partition in local_groups {
            // Refused (not ended) if the partition moved or began loading since the check.
            self.end_group_transaction(producer, completion.commit, Some(partition))?;
            written.push((CoordinatorKind::Group.topic().to_string(), partition));
        }
        Ok((remote, written))
    }

    /// A transaction's marker for the groups this broker coordinates (those of one partition
    /// of `__consumer_offsets`, when given).
    fn end_group_transaction(
        &self,
        producer: (i64, i16),
        commit: bool,
        partition: Option<i32>,
    ) -> Result<(), TxnError> {
        self.groups
            .end_transaction(producer, commit, partition)
            .map_err(|e| match e {
                WriteError::NotLed(why) => {
                    tracing::info!(producer_id = producer.0, why, "transactional offsets end later");
                    TxnError::MarkerUndelivered
                }
                e => {
                    tracing::error!(producer_id = producer.0, error = %e, "ending transactional offsets");
                    TxnError::Storage
                }
            })
    }

    /// Writes one transaction marker on a partition this broker leads (on a partition of
    /// `__consumer_offsets`: ends the producer's offsets in the groups coordinated here): the
    /// error code for WriteTxnMarkers (0 when written, or skipped as the module doc says).
    pub(crate) fn write_marker(
        &self,
        topic: &str,
        index: i32,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> i16 {
        if topic == CoordinatorKind::Group.topic() {
            return match self.leader_of(topic, index) {
                // Its groups are not loaded yet: ending nothing would lose the marker.
                Some(leader) if leader == self.config.node_id && !self.groups.serves(index) => {
                    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.0
                }
                Some(leader) if leader == self.config.node_id => {
                    match self.end_group_transaction(
                        (producer_id, producer_epoch),
                        commit,
                        Some(index),
                    ) {
                        Ok(()) => 0,
                        Err(TxnError::MarkerUndelivered) => ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
                        Err(_) => ErrorCode::KAFKA_STORAGE_ERROR.0,
                    }
                }
                Some(_) => ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
                None => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
            };
        }
        let Some(partition) = self.partition(topic, index) else {
            return self.missing_partition_error(topic, index);
        };
        let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        // The epoch stamped is one this node leads at, read under the log's lock.
        let Some(epoch) = self.led_epoch(&partition) else {
            return ErrorCode::NOT_LEADER_OR_FOLLOWER.0;
        };
        // Under the log's lock. A partition its mirror owns (mirrored or paused) holds the
        // source's batches, and a transaction of this cluster's producers only after a
        // failover's barrier, while a restart is about to cut it: its marker is written (a
        // restart refused for unconfirmed writes leaves the transaction in place, and a later
        // stop must not find it open), anything else is skipped (the flag is set before
        // PREPARING truncates, so a transaction that got in before it is cut). A stopped
        // topic's partition that is read-only for a moment (reloading, or finishing its
        // failover) holds this cluster's own transactions: their markers are written, or the
        // LSO would stay behind them for good (docs/failover.md).
        if partition.read_only.load(Ordering::SeqCst) && mirror_owns(&partition) {
            let local = match log.producer_state().ongoing_start(producer_id) {
                Some(start) => {
                    super::mirror_log::first_barrier(&mut log).is_some_and(|b| b <= start)
                }
                None => false,
            };
            if !local {
                tracing::warn!(
                    topic,
                    partition = index,
                    producer_id,
                    "skipping the transaction marker of a mirror partition: the mirror's restart cuts the transaction"
                );
                return 0;
            }
        }
        match log.append_txn_marker(producer_id, producer_epoch, commit, 0, epoch, now_ms()) {
            Ok(_) => {
                self.committed_append(&partition, &mut log);
                drop(log);
                self.forget_verified(producer_id, topic, index);
                0
            }
            Err(StorageError::InvalidProducerEpoch { .. }) => {
                tracing::warn!(
                    topic,
                    partition = index,
                    producer_id,
                    "skipping the marker of a fenced producer epoch"
                );
                0
            }
            // The partition went while this held it: answered as if it had gone before.
            Err(StorageError::LogDeleted { .. }) => {
                drop(log);
                self.missing_partition_error(topic, index)
            }
            Err(e) => {
                tracing::error!(topic, partition = index, error = %e, "writing a transaction marker");
                ErrorCode::KAFKA_STORAGE_ERROR.0
            }
        }
    }

    /// WriteTxnMarkers to broker `leader` for `partitions` of `completion`.
    async fn send_markers(
        &self,
        leader: i32,
        completion: &Completion,
        partitions: &[(String, i32)],
    ) -> Result<(), TxnError> {
        let failed = |why: String| {
            tracing::warn!(
                transactional_id = %completion.transactional_id,
                broker = leader,
                error = why,
                "writing transaction markers on another broker; retried later"
            );
            TxnError::MarkerUndelivered
        };
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, index) in partitions {
            topics.entry(topic).or_default().push(*index);
        }
        let request = WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default()
                .with_producer_id(ProducerId(completion.producer_id))
                .with_producer_epoch(completion.producer_epoch)
                .with_transaction_result(completion.commit)
                .with_coordinator_epoch(0)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(topic, indexes)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                                .with_partition_indexes(indexes)
                        })
                        .collect(),
                ),
        ]);
        let answer = self
            .call_broker(leader, "WriteTxnMarkers", &request, 1)
            .await
            .map_err(failed)?;
        let refused: Vec<String> = answer
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| {
                t.partitions
                    .iter()
                    // A partition whose topic was deleted meanwhile needs no marker.
                    .filter(|p| {
                        p.error_code != 0 && p.error_code != ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                    })
                    .map(move |p| {
                        format!(
                            "{}-{}: {}",
                            t.name.0,
                            p.partition_index,
                            ErrorCode(p.error_code)
                        )
                    })
            })
            .collect();
        if refused.is_empty() {
            Ok(())
        } else {
            Err(failed(refused.join(", ")))
        }
    }

    /// Completes `completion` in the coordinator: every marker is written.
    fn finish_completion(&self, completion: &Completion) -> Result<(), TxnError> {
        self.notify_appended();
        self.transactions.completed(completion, now_ms())
    }

    /// Aborts transactions past their timeout and retries completions whose markers failed;
    /// returns how many were finished.
    pub async fn abort_timed_out_transactions(&self, now_ms: i64) -> usize {
        self.ensure_producer_ids().await;
        let allocate = || self.allocate_producer_id();
        let mut due = self.transactions.expire(now_ms, &allocate);
        due.extend(self.transactions.stalled(now_ms));
        let mut finished = 0;
        for completion in &due {
            match self.complete_transaction(completion).await {
                Ok(()) => finished += 1,
                Err(e) => {
                    tracing::error!(transactional_id = %completion.transactional_id, error = %e, "completing a transaction; retried later");
                }
            }
        }
        finished
    }
}

/// Whether a partition's topic is mirrored or paused (its `mirror.name` names a mirror and does
/// not ask it to stop).
fn mirror_owns(partition: &Partition) -> bool {
    partition
        .configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get("mirror.name")
        .and_then(|v| mirror_of(v))
        .is_some_and(|(_, desired)| desired != Desired::Stopped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::config::{BrokerConfig, parse_properties};
    use kmirror_protocol::testing::BatchSpec;
    use std::sync::Arc;

    fn broker(dir: &std::path::Path) -> Broker {
        let props = parse_properties(&format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={}\n",
            dir.display()
        ))
        .expect("parses");
        let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
        Broker::open(config).expect("opens")
    }

    /// A topic with `mirror.name` = `value` whose partition 0 holds an open transaction of
    /// producer 7 and is read-only (a stopped topic reloading, or a restart cutting it).
    async fn open_transaction(broker: &Broker, value: &str) -> Arc<Partition> {
        if let Some((mirror, _)) = mirror_of(value) {
            broker
                .create_mirror(mirror, BTreeMap::new())
                .await
                .expect("mirror created");
        }
        let configs = BTreeMap::from([("mirror.name".to_string(), value.to_string())]);
        broker
            .create_topic("t", 1, 1, configs, None)
            .await
            .expect("created");
        broker.reconcile().expect("opened");
        let partition = broker.partition("t", 0).expect("open here");
        let epoch = broker.leader_epoch("t", 0).expect("led here");
        let batch = BatchSpec {
            partition_leader_epoch: epoch,
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: 0,
            transactional: true,
            records: 3,
            ..BatchSpec::default()
        }
        .build();
        let mut log = partition.log.lock().expect("log");
        log.append_as_leader(batch, epoch, now_ms())
            .expect("appended");
        assert_eq!(log.last_stable_offset(), 0);
        drop(log);
        partition.read_only.store(true, Ordering::SeqCst);
        partition
    }

    /// Engine review finding 3: the marker of a transaction on a stopped topic's partition is
    /// written while the partition is read-only for a moment (at every broker start, a stopped
    /// topic without its barrier yet opens read-only), so the LSO moves past it. Failed before
    /// the fix: the marker was skipped and answered as written, and READ_COMMITTED readers
    /// waited behind the transaction for good.
    #[tokio::test]
    async fn a_stopped_topics_markers_are_written_while_it_is_read_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let broker = broker(dir.path());
        let partition = open_transaction(&broker, "m.removed").await;
        assert_eq!(broker.write_marker("t", 0, 7, 0, true), 0);
        let log = partition.log.lock().expect("log");
        assert_eq!(log.log_end_offset(), 4, "the marker follows the 3 records");
        assert_eq!(log.last_stable_offset(), 4);
    }

    /// On a topic its mirror owns, a transaction from before any failover is one the mirror's
    /// start cuts: its marker is skipped, the log left as the mirror will have it.
    #[tokio::test]
    async fn a_mirror_partitions_marker_is_skipped_without_a_failover() {
        let dir = tempfile::tempdir().expect("temp dir");
        let broker = broker(dir.path());
        let partition = open_transaction(&broker, "m").await;
        assert_eq!(broker.write_marker("t", 0, 7, 0, true), 0);
        assert_eq!(partition.log.lock().expect("log").log_end_offset(), 3);
    }
}
