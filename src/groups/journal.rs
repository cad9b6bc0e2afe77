//! Where the group coordinator's records go (docs/cluster.md, "Coordinators on replicated
//! logs").
//!
//! A single node, or brokers sharing one process, keep every group in one record log of the
//! broker's directory. Brokers of a multi-process cluster keep each group in its partition of
//! `__consumer_offsets` (Kafka's `abs(hashCode) % partitions`), a replicated partition like any
//! other: the partition's leader coordinates its groups, writes their records as batches it
//! leads, and loads them by replaying the partition when it becomes leader; followers only
//! copy the batches. So a group's offsets survive the loss of its coordinator's broker and
//! disk: the next leader holds every record the in-sync replicas acknowledged.
//!
//! Contract: a record for a group of a partition this broker does not serve (not loaded: it
//! does not lead it, or has not finished loading it) is refused ([`WriteError::NotLed`]); the
//! broker answers NOT_COORDINATOR and the client finds the coordinator again.

use crate::record_log::RecordLog;
use crate::storage::StorageError;
use bytes::Bytes;
use kmirror_protocol::records::KeyValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A record write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The disk refused it.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The group's partition is not served here (led elsewhere, or still loading).
    #[error("{0}")]
    NotLed(String),
    /// A record could not be encoded.
    #[error("encoding a group record: {0}")]
    Encode(String),
}

/// The partitions of `__consumer_offsets`, as the broker leads them.
pub trait OffsetsPartitions: Send + Sync + std::fmt::Debug {
    /// The partition of `group`, `None` before the topic exists.
    fn partition_of(&self, group: &str) -> Option<i32>;
    /// Appends `records` (key, value) to `partition` as one batch stamped with the leader
    /// epoch this broker leads it at.
    fn append(&self, partition: i32, records: Vec<KeyValue>) -> Result<(), WriteError>;
}

/// The coordinator's record store.
#[derive(Debug)]
pub(super) enum Journal<R> {
    /// One record log for every group, compacted by rewriting it.
    Local {
        log: Mutex<RecordLog<R>>,
        path: PathBuf,
    },
    /// The partitions of `__consumer_offsets`, and those loaded here (locked after the
    /// groups, always).
    Partitions {
        topic: Arc<dyn OffsetsPartitions>,
        loaded: Mutex<BTreeSet<i32>>,
    },
}

impl<R: Serialize + DeserializeOwned> Journal<R> {
    /// Writes `records` of `group`.
    pub(super) fn append(&self, group: &str, records: &[R]) -> Result<(), WriteError> {
        if records.is_empty() {
            return Ok(());
        }
        match self {
            Journal::Local { log, .. } => Ok(log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append_all(records)?),
            Journal::Partitions { topic, loaded } => {
                let partition = topic.partition_of(group).ok_or_else(|| {
                    WriteError::NotLed("__consumer_offsets does not exist yet".into())
                })?;
                if !loaded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&partition)
                {
                    return Err(WriteError::NotLed(format!(
                        "__consumer_offsets partition {partition} (group {group}) is not served here"
                    )));
                }
                let pairs = records
                    .iter()
                    .map(|r| {
                        let value =
                            serde_json::to_vec(r).map_err(|e| WriteError::Encode(e.to_string()))?;
                        Ok((
                            Some(Bytes::from(group.to_string())),
                            Some(Bytes::from(value)),
                        ))
                    })
                    .collect::<Result<Vec<_>, WriteError>>()?;
                topic.append(partition, pairs)
            }
        }
    }

    /// Writes `record`, which concerns every group of `groups`, once to each of their
    /// partitions (once in all for a local log), each copy keyed by the first of its groups.
    pub(super) fn append_for<'a>(
        &self,
        groups: impl IntoIterator<Item = &'a str>,
        record: &R,
    ) -> Result<(), WriteError> {
        match self {
            Journal::Local { .. } => self.append("", std::slice::from_ref(record)),
            Journal::Partitions { topic, .. } => {
                let mut done = BTreeSet::new();
                for group in groups {
                    if topic.partition_of(group).is_some_and(|p| done.insert(p)) {
                        self.append(group, std::slice::from_ref(record))?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Whether records of groups on `partition` are written here (always, for a local log).
    pub(super) fn serves(&self, partition: i32) -> bool {
        match self {
            Journal::Local { .. } => true,
            Journal::Partitions { loaded, .. } => loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&partition),
        }
    }

    /// The partition of `group`, when groups live on partitions.
    pub(super) fn partition_of(&self, group: &str) -> Option<i32> {
        match self {
            Journal::Local { .. } => None,
            Journal::Partitions { topic, .. } => topic.partition_of(group),
        }
    }
}

/// The group records of one batch of a `__consumer_offsets` partition, in order; a record this
/// build cannot read is skipped, loudly.
pub(super) fn batch_records<R: DeserializeOwned>(
    batch: &kmirror_protocol::batch::RecordBatch,
) -> Vec<R> {
    if batch.is_control() {
        return Vec::new();
    }
    match kmirror_protocol::records::leader_batch_records(batch) {
        Ok(pairs) => pairs
            .into_iter()
            .filter_map(|(_, value)| {
                let value = value?;
                serde_json::from_slice(&value)
                    .map_err(|e| {
                        tracing::error!(offset = batch.base_offset(), error = %e, "unreadable __consumer_offsets record");
                    })
                    .ok()
            })
            .collect(),
        Err(e) => {
            tracing::error!(offset = batch.base_offset(), error = %e, "unreadable __consumer_offsets batch");
            Vec::new()
        }
    }
}
