//! The transaction coordinator: transactional ids, their producer ids and epochs, and the
//! transaction state machine of [`metadata`], durable in `__transaction_state/transactions.log`.
//!
//! Lifecycle: [`TransactionCoordinator::open`] replays the log and returns the completions of
//! transactions a crash caught between their decision (`Prepare*`, durable) and their end; the
//! broker writes those markers before serving. Each request runs one transition of
//! [`TxnMetadata`] under the coordinator's lock and persists the new state before answering.
//!
//! Contracts: a `Prepare*` state is written before any marker, and `Complete*` only after every
//! marker (on its partitions and on its groups' coordinators) is durable, so a crash at any moment is finished by replay (a
//! marker written twice is a no-op for the partition). Ongoing transactions past their timeout
//! are aborted with a bumped epoch by [`TransactionCoordinator::expire`], which the broker's
//! housekeeping calls.

pub mod metadata;
#[cfg(test)]
mod tests;

use crate::record_log::RecordLog;
use crate::storage::StorageError;
pub use metadata::{Completion, InitOutcome, TxnError, TxnMetadata, TxnState};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// How long a `Prepare*` state may stay before housekeeping retries its markers (an EndTxn in
/// flight finishes well within it; a failed marker write does not).
const STALLED_COMPLETION_MS: i64 = 5_000;

#[derive(Debug, Serialize, Deserialize)]
enum TxnRecord {
    /// The whole state of one transactional id; the newest wins at replay.
    Put {
        transactional_id: String,
        metadata: TxnMetadata,
    },
}

#[derive(Debug, Default)]
struct Txns {
    by_id: HashMap<String, TxnMetadata>,
    /// Producer id to transactional id, for the produce path's check.
    by_producer: HashMap<i64, String>,
}

/// The transaction coordinator of this broker.
#[derive(Debug)]
pub struct TransactionCoordinator {
    log: Mutex<RecordLog<TxnRecord>>,
    txns: Mutex<Txns>,
    max_timeout_ms: i32,
}

/// Allocates a fresh producer id (the controller's blocks).
pub type AllocateProducerId<'a> = &'a dyn Fn() -> Result<i64, crate::controller::ControllerError>;

impl TransactionCoordinator {
    /// Replays the log under `dir`; returns the coordinator and the completions a crash left.
    pub fn open(
        dir: &Path,
        max_timeout_ms: i32,
    ) -> Result<(TransactionCoordinator, Vec<Completion>), StorageError> {
        let path = dir.join("transactions.log");
        let (log, records) = RecordLog::<TxnRecord>::open(&path)?;
        let mut txns = Txns::default();
        let replayed = records.len();
        for TxnRecord::Put {
            transactional_id,
            metadata,
        } in records
        {
            txns.by_producer
                .insert(metadata.producer_id, transactional_id.clone());
            txns.by_id.insert(transactional_id, metadata);
        }
        // Old states of the same ids make the log grow without bound; keep only the newest.
        let log = if replayed > 2 * txns.by_id.len() + 64 {
            let live: Vec<TxnRecord> = txns
                .by_id
                .iter()
                .map(|(id, m)| TxnRecord::Put {
                    transactional_id: id.clone(),
                    metadata: m.clone(),
                })
                .collect();
            RecordLog::rewrite(&path, &live)?
        } else {
            log
        };
        let pending = txns
            .by_id
            .iter()
            .filter_map(|(id, m)| m.completion(id))
            .collect();
        Ok((
            TransactionCoordinator {
                log: Mutex::new(log),
                txns: Mutex::new(txns),
                max_timeout_ms,
            },
            pending,
        ))
    }

    fn with_txns<T>(&self, f: impl FnOnce(&mut Txns) -> T) -> T {
        let mut guard = self.txns.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// Persists `metadata` for `id`, then makes it current.
    fn put(&self, txns: &mut Txns, id: &str, metadata: TxnMetadata) -> Result<(), TxnError> {
        let record = TxnRecord::Put {
            transactional_id: id.to_string(),
            metadata,
        };
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .append(&record)
            .map_err(|e| {
                tracing::error!(error = %e, transactional_id = id, "writing the transaction log");
                TxnError::Storage
            })?;
        let TxnRecord::Put { metadata, .. } = record;
        txns.by_producer
            .insert(metadata.producer_id, id.to_string());
        txns.by_id.insert(id.to_string(), metadata);
        Ok(())
    }

    /// InitProducerId with a transactional id.
    pub fn init_producer_id(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
        allocate: AllocateProducerId<'_>,
    ) -> Result<InitOutcome, TxnError> {
        if timeout_ms <= 0 || timeout_ms > self.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let fresh_id = || allocate().map_err(|_| TxnError::Storage);
        self.with_txns(|txns| {
            let outcome = match txns.by_id.get(id) {
                None => {
                    if expected.is_some() {
                        return Err(TxnError::InvalidProducerIdMapping);
                    }
                    InitOutcome::Ready(TxnMetadata::new(fresh_id()?, timeout_ms, now_ms))
                }
                Some(current) => {
                    let new_id = if current.epoch_exhausted() {
                        fresh_id()?
                    } else {
                        current.producer_id
                    };
                    current.init(id, timeout_ms, expected, new_id, now_ms)?
                }
            };
            let next = match &outcome {
                InitOutcome::Ready(m) | InitOutcome::AbortFirst(m, _) => m.clone(),
            };
            self.put(txns, id, next)?;
            Ok(outcome)
        })
    }

    /// Runs `transition` on `id`'s state and persists the result.
    fn update(
        &self,
        id: &str,
        transition: impl FnOnce(&TxnMetadata) -> Result<TxnMetadata, TxnError>,
    ) -> Result<(), TxnError> {
        self.with_txns(|txns| {
            let current = txns
                .by_id
                .get(id)
                .ok_or(TxnError::InvalidProducerIdMapping)?;
            let next = transition(current)?;
            self.put(txns, id, next)
        })
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn.
    pub fn add(
        &self,
        id: &str,
        producer: (i64, i16),
        partitions: &[(String, i32)],
        group: Option<&str>,
        now_ms: i64,
    ) -> Result<(), TxnError> {
        self.update(id, |m| {
            m.add(producer.0, producer.1, partitions, group, now_ms)
        })
    }

    /// EndTxn: the decision is durable when this returns; the broker then writes the
    /// completion's markers and calls [`Self::completed`]. `None`: a retry of an ended one.
    pub fn end(
        &self,
        id: &str,
        producer: (i64, i16),
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<Completion>, TxnError> {
        self.with_txns(|txns| {
            let current = txns
                .by_id
                .get(id)
                .ok_or(TxnError::InvalidProducerIdMapping)?;
            let Some(next) = current.end(producer.0, producer.1, commit, now_ms)? else {
                return Ok(None);
            };
            let completion = next.completion(id);
            self.put(txns, id, next)?;
            Ok(completion)
        })
    }

    /// Every marker and offset of `completion` is durable: the transaction is complete.
    pub fn completed(&self, completion: &Completion, now_ms: i64) -> Result<(), TxnError> {
        self.with_txns(|txns| {
            let Some(current) = txns.by_id.get(&completion.transactional_id) else {
                return Ok(());
            };
            // Another path (a retry by housekeeping) may have finished it already.
            if current.completion(&completion.transactional_id).as_ref() != Some(completion) {
                return Ok(());
            }
            match current.completed(now_ms) {
                Some(next) => self.put(txns, &completion.transactional_id, next),
                None => Ok(()),
            }
        })
    }

    /// Aborts ongoing transactions past their timeout (fencing their producers); returns the
    /// completions to write.
    pub fn expire(&self, now_ms: i64, allocate: AllocateProducerId<'_>) -> Vec<Completion> {
        self.with_txns(|txns| {
            let expired: Vec<String> = txns
                .by_id
                .iter()
                .filter(|(_, m)| m.is_expired(now_ms))
                .map(|(id, _)| id.clone())
                .collect();
            let mut completions = Vec::new();
            for id in expired {
                let Some(current) = txns.by_id.get(&id) else {
                    continue;
                };
                let new_id = if current.epoch_exhausted() {
                    match allocate() {
                        Ok(new_id) => new_id,
                        Err(_) => continue,
                    }
                } else {
                    current.producer_id
                };
                let Some((next, completion)) = current.expire(&id, new_id, now_ms) else {
                    continue;
                };
                tracing::info!(transactional_id = %id, producer_id = next.producer_id, "aborting a transaction past its timeout");
                if self.put(txns, &id, next).is_ok() {
                    completions.push(completion);
                }
            }
            completions
        })
    }

    /// Completions whose markers have not been written for a while (a failed write): retried by
    /// housekeeping.
    pub fn stalled(&self, now_ms: i64) -> Vec<Completion> {
        self.with_txns(|txns| {
            txns.by_id
                .iter()
                .filter(|(_, m)| now_ms - m.updated_ms >= STALLED_COMPLETION_MS)
                .filter_map(|(id, m)| m.completion(id))
                .collect()
        })
    }

    /// Whether `producer` is in an ongoing transaction that includes the partition: the check a
    /// transactional produce must pass, so no data lands outside a transaction the coordinator
    /// will end.
    pub fn includes(&self, producer: (i64, i16), topic: &str, partition: i32) -> bool {
        self.with_txns(|txns| {
            txns.by_producer
                .get(&producer.0)
                .and_then(|id| txns.by_id.get(id))
                .is_some_and(|m| {
                    m.producer_id == producer.0
                        && m.producer_epoch == producer.1
                        && m.state == TxnState::Ongoing
                        && m.partitions.contains(&(topic.to_string(), partition))
                })
        })
    }

    /// Whether `producer` may commit offsets of a group `matches` in the ongoing transaction of
    /// `id` (TxnOffsetCommit, checked for the group coordinator): the error otherwise.
    pub fn check_offsets(
        &self,
        id: &str,
        producer: (i64, i16),
        matches: impl Fn(&str) -> bool,
    ) -> Result<(), TxnError> {
        self.with_txns(|txns| {
            txns.by_id
                .get(id)
                .ok_or(TxnError::InvalidProducerIdMapping)?
                .check_offsets(producer.0, producer.1, matches)
        })
    }

    /// The state of one transactional id.
    pub fn describe(&self, id: &str) -> Option<TxnMetadata> {
        self.with_txns(|txns| txns.by_id.get(id).cloned())
    }
}
