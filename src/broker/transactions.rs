//! What the broker does for the transaction coordinator: write a completion's markers to its
//! partitions, commit its offsets to the group coordinator, then mark it complete; and abort
//! transactions past their timeout.
//!
//! A marker is written at the partition's current leader epoch with coordinator epoch 0 (one
//! coordinator, never moved). A partition whose topic was deleted meanwhile gets no marker; a
//! partition whose producer already moved to a newer epoch (fenced meanwhile) is skipped too,
//! since the newer epoch's own end closes it. A partition that is read-only (it became a mirror
//! partition after joining the transaction) gets no marker either: a mirror partition holds only
//! the source's batches, and the mirror's truncation drops the transaction's data there.

use super::{Broker, now_ms};
use crate::storage::StorageError;
use crate::txn::{Completion, TxnError};
use std::sync::atomic::Ordering;

impl Broker {
    /// Writes `completion`'s markers and offsets, then completes it in the coordinator.
    pub fn complete_transaction(&self, completion: &Completion) -> Result<(), TxnError> {
        for (topic, index) in &completion.partitions {
            let (Some(partition), Some(epoch)) = (
                self.partition(topic, *index),
                self.leader_epoch(topic, *index),
            ) else {
                continue;
            };
            let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            // Under the log's lock: the flag is set before the mirror first truncates, so a
            // marker that got in before the flag is cut by that truncation.
            if partition.read_only.load(Ordering::SeqCst) {
                tracing::warn!(
                    topic,
                    partition = index,
                    producer_id = completion.producer_id,
                    "skipping the transaction marker of a read-only mirror partition"
                );
                continue;
            }
            let written = log.append_txn_marker(
                completion.producer_id,
                completion.producer_epoch,
                completion.commit,
                0,
                epoch,
                now_ms(),
            );
            match written {
                Ok(_) => {
                    let end = log.log_end_offset();
                    log.update_high_watermark(end);
                }
                Err(StorageError::InvalidProducerEpoch { .. }) => {
                    tracing::warn!(
                        topic,
                        partition = index,
                        producer_id = completion.producer_id,
                        "skipping the marker of a fenced producer epoch"
                    );
                }
                Err(e) => {
                    tracing::error!(topic, partition = index, error = %e, "writing a transaction marker");
                    return Err(TxnError::Storage);
                }
            }
        }
        for (group, topics) in &completion.offsets {
            let offsets = topics
                .iter()
                .flat_map(|(topic, partitions)| {
                    partitions
                        .iter()
                        .map(|(index, committed)| (topic.clone(), *index, committed.clone()))
                })
                .collect();
            self.groups
                .commit_transactional(group, offsets)
                .map_err(|e| {
                    tracing::error!(group, error = %e, "committing transactional offsets");
                    TxnError::Storage
                })?;
        }
        self.notify_appended();
        self.transactions.completed(completion, now_ms())
    }

    /// Aborts transactions past their timeout and retries completions whose markers failed;
    /// returns how many were finished.
    pub fn abort_timed_out_transactions(&self, now_ms: i64) -> usize {
        let allocate = || self.allocate_producer_id();
        let mut due = self.transactions.expire(now_ms, &allocate);
        due.extend(self.transactions.stalled(now_ms));
        due.iter()
            .filter(|c| match self.complete_transaction(c) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(transactional_id = %c.transactional_id, error = %e, "completing a transaction; retried later");
                    false
                }
            })
            .count()
    }
}
