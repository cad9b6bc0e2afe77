//! A transactional produce to a partition whose transaction coordinator is another broker
//! (docs/cluster.md): before the first batch of a transaction lands on the partition, its
//! leader asks the coordinator (AddPartitionsToTxn version 4, verify only) whether the
//! producer's ongoing transaction added the partition, as Kafka's brokers do since KIP-890. So
//! no batch lands outside a transaction whose coordinator will write its marker here.
//!
//! A yes is remembered for the producer's epoch and partition until a marker for the producer
//! lands on the partition (the transaction ended), so later batches of the same transaction
//! cost nothing. A coordinator that does not answer is a no (the producer retries).
//!
//! Offsets committed in a transaction (TxnOffsetCommit, at the group's coordinator) are
//! verified the same way, as the group's partition of `__consumer_offsets`: the transaction
//! coordinator checks that the producer, at its current epoch, has an ongoing transaction that
//! added the group (AddOffsetsToTxn), so a fenced producer's or a made-up producer id's offsets
//! never wait for a marker.

use super::Broker;
use super::coordinators::CoordinatorKind;
use crate::txn::TxnError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

/// Verified `(producer id, producer epoch, topic, partition)`.
pub(super) type Verified = std::sync::Mutex<std::collections::HashSet<(i64, i16, String, i32)>>;

impl Broker {
    /// Whether `producer`'s ongoing transaction (`transactional_id`) added the partition.
    pub(crate) async fn in_transaction(
        &self,
        transactional_id: Option<&str>,
        producer: (i64, i16),
        topic: &str,
        index: i32,
    ) -> bool {
        // Without its id only a local transaction can be found.
        let Some(transactional_id) = transactional_id else {
            return self.transactions.includes(producer, topic, index);
        };
        let Some(coordinator) = self.coordinator_of(CoordinatorKind::Transaction, transactional_id)
        else {
            return false;
        };
        if coordinator == self.config.node_id {
            return self.transactions.includes(producer, topic, index);
        }
        let key = (producer.0, producer.1, topic.to_string(), index);
        if self.verified().contains(&key) {
            return true;
        }
        match self
            .verify_with(coordinator, transactional_id, producer, topic, index)
            .await
        {
            Ok(0) => {
                self.verified().insert(key);
                true
            }
            Ok(_) => false,
            Err(why) => {
                tracing::warn!(
                    coordinator,
                    transactional_id,
                    topic,
                    partition = index,
                    error = why,
                    "verifying a transactional produce with its coordinator"
                );
                false
            }
        }
    }

    /// TxnOffsetCommit at the group coordinator: whether `producer`'s ongoing transaction
    /// (`transactional_id`) added `group` (AddOffsetsToTxn), asked of the transaction
    /// coordinator as a verification of the group's `__consumer_offsets` partition (KIP-890);
    /// 0, or the error code the commit gets. Asked every time: once per transaction and group.
    pub(crate) async fn verify_txn_offsets(
        &self,
        transactional_id: &str,
        producer: (i64, i16),
        group: &str,
    ) -> i16 {
        let coordinator = self.coordinator_of(CoordinatorKind::Transaction, transactional_id);
        let partition = self.coordinator_partition_of(CoordinatorKind::Group, group);
        let (Some(coordinator), Some(partition)) = (coordinator, partition) else {
            return ErrorCode::COORDINATOR_NOT_AVAILABLE.0;
        };
        if coordinator == self.config.node_id {
            return self
                .transactions
                .check_offsets(transactional_id, producer, |g| g == group)
                .err()
                .map_or(0, TxnError::code);
        }
        let topic = CoordinatorKind::Group.topic();
        self.verify_with(coordinator, transactional_id, producer, topic, partition)
            .await
            .unwrap_or_else(|why| {
                tracing::warn!(
                    coordinator,
                    transactional_id,
                    group,
                    error = why,
                    "verifying transactional offsets with their transaction coordinator"
                );
                ErrorCode::COORDINATOR_NOT_AVAILABLE.0
            })
    }

    /// Forgets the verifications of `producer_id` on a partition (its transaction ended there).
    pub(super) fn forget_verified(&self, producer_id: i64, topic: &str, index: i32) {
        self.verified()
            .retain(|(id, _, t, i)| !(*id == producer_id && t == topic && *i == index));
    }

    fn verified(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<(i64, i16, String, i32)>> {
        self.verified.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// AddPartitionsToTxn version 4, verify only, to broker `coordinator`: the partition's
    /// error code (0: the transaction added it).
    async fn verify_with(
        &self,
        coordinator: i32,
        transactional_id: &str,
        producer: (i64, i16),
        topic: &str,
        index: i32,
    ) -> Result<i16, String> {
        let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(
                    transactional_id.to_string(),
                )))
                .with_producer_id(ProducerId(producer.0))
                .with_producer_epoch(producer.1)
                .with_verify_only(true)
                .with_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![index]),
                ]),
        ]);
        let answer = self
            .call_broker(coordinator, "AddPartitionsToTxn", &request, 4)
            .await?;
        if answer.error_code != 0 {
            return Err(format!("answered error code {}", answer.error_code));
        }
        answer
            .results_by_transaction
            .iter()
            .flat_map(|t| &t.topic_results)
            .flat_map(|t| &t.results_by_partition)
            .find(|p| p.partition_index == index)
            .map(|p| p.partition_error_code)
            .ok_or_else(|| format!("no answer for {topic}-{index}"))
    }
}
