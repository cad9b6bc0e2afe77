//! One transactional id's state and its transitions, as pure functions of the request and the
//! clock (no I/O): the coordinator persists the result of each transition before answering.
//!
//! States follow Kafka's transaction coordinator: `Empty` after InitProducerId, `Ongoing` once a
//! partition or group is added, `PrepareCommit`/`PrepareAbort` while markers are written,
//! `CompleteCommit`/`CompleteAbort` after. A producer epoch older than the current one is fenced.

use kmirror_protocol::errors::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Kafka's largest usable producer epoch; past it the producer gets a new producer id.
const MAX_PRODUCER_EPOCH: i16 = i16::MAX - 1;

/// Where a transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnState {
    /// Initialised, nothing added yet.
    Empty,
    /// Partitions or groups added; data may be in the logs.
    Ongoing,
    /// Commit decided, markers being written.
    PrepareCommit,
    /// Abort decided, markers being written.
    PrepareAbort,
    /// Committed: markers written.
    CompleteCommit,
    /// Aborted: markers written.
    CompleteAbort,
}

/// Why a transactional request is refused; each maps to Kafka's error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// The producer id does not belong to this transactional id (or it is unknown).
    #[error("the producer id is not the one of this transactional id")]
    InvalidProducerIdMapping,
    /// A newer producer with the same transactional id exists.
    #[error("the producer has been fenced by a newer producer epoch")]
    ProducerFenced,
    /// Markers of the previous transaction are still being written: retry.
    #[error("a previous transaction is still completing")]
    ConcurrentTransactions,
    /// The request does not fit the transaction's state.
    #[error("the request does not fit the transaction's state")]
    InvalidTxnState,
    /// The transaction timeout is not within `(0, transaction.max.timeout.ms]`.
    #[error("the transaction timeout is out of range")]
    InvalidTransactionTimeout,
    /// The coordinator's log could not be written.
    #[error("the transaction log could not be written")]
    Storage,
    /// A marker could not be delivered now (a partition's leader or a group's coordinator is
    /// down or fenced): the completion is retried.
    #[error("a transaction marker could not be delivered yet")]
    MarkerUndelivered,
}

impl TxnError {
    /// Kafka's error code.
    pub fn code(self) -> i16 {
        match self {
            TxnError::InvalidProducerIdMapping => ErrorCode::INVALID_PRODUCER_ID_MAPPING.0,
            TxnError::ProducerFenced => ErrorCode::PRODUCER_FENCED.0,
            TxnError::ConcurrentTransactions => ErrorCode::CONCURRENT_TRANSACTIONS.0,
            TxnError::InvalidTxnState => ErrorCode::INVALID_TXN_STATE.0,
            TxnError::InvalidTransactionTimeout => ErrorCode::INVALID_TRANSACTION_TIMEOUT.0,
            TxnError::Storage => ErrorCode::KAFKA_STORAGE_ERROR.0,
            TxnError::MarkerUndelivered => ErrorCode::CONCURRENT_TRANSACTIONS.0,
        }
    }
}

/// The state of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnMetadata {
    /// The producer id.
    pub producer_id: i64,
    /// The current producer epoch.
    pub producer_epoch: i16,
    /// The producer's transaction timeout.
    pub timeout_ms: i32,
    /// Where the transaction is.
    pub state: TxnState,
    /// Partitions in the current transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// Groups in the current transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// When the current transaction started (its first add).
    pub started_ms: i64,
    /// When the state last changed.
    pub updated_ms: i64,
}

/// The work a commit or abort leaves to the broker: one marker per partition and per group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The transactional id.
    pub transactional_id: String,
    /// The producer id the markers carry.
    pub producer_id: i64,
    /// The producer epoch the markers carry.
    pub producer_epoch: i16,
    /// Commit or abort.
    pub commit: bool,
    /// Partitions that get a marker.
    pub partitions: Vec<(String, i32)>,
    /// Groups whose coordinators get a marker: their offsets committed in the transaction
    /// (TxnOffsetCommit, kept by the group coordinator) are applied or dropped.
    pub groups: Vec<String>,
}

/// What InitProducerId leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// The producer may start with this id and epoch.
    Ready(TxnMetadata),
    /// An ongoing transaction must be aborted first (its producer is fenced); then init again.
    AbortFirst(TxnMetadata, Completion),
}

impl TxnMetadata {
    /// A new transactional id.
    pub fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            producer_id,
            producer_epoch: 0,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            groups: BTreeSet::new(),
            started_ms: -1,
            updated_ms: now_ms,
        }
    }

    /// The completion a Prepare state stands for.
    pub fn completion(&self, transactional_id: &str) -> Option<Completion> {
        let commit = match self.state {
            TxnState::PrepareCommit => true,
            TxnState::PrepareAbort => false,
            _ => return None,
        };
        Some(Completion {
            transactional_id: transactional_id.to_string(),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            commit,
            partitions: self.partitions.iter().cloned().collect(),
            groups: self.groups.iter().cloned().collect(),
        })
    }

    /// InitProducerId for an existing id: a new epoch (or a new producer id when the epoch is
    /// exhausted, from `new_producer_id`). `expected` is the KIP-360 (id, epoch) a recovering
    /// producer sends.
    pub fn init(
        &self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        new_producer_id: i64,
        now_ms: i64,
    ) -> Result<InitOutcome, TxnError> {
        if let Some((id, epoch)) = expected
            && (id != self.producer_id || epoch != self.producer_epoch)
        {
            return Err(TxnError::ProducerFenced);
        }
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                Err(TxnError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                let mut aborting = self.bumped(new_producer_id);
                aborting.state = TxnState::PrepareAbort;
                aborting.updated_ms = now_ms;
                let completion = aborting
                    .completion(transactional_id)
                    .ok_or(TxnError::InvalidTxnState)?;
                Ok(InitOutcome::AbortFirst(aborting, completion))
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let mut next = self.bumped(new_producer_id);
                next.timeout_ms = timeout_ms;
                next.state = TxnState::Empty;
                next.clear(now_ms);
                Ok(InitOutcome::Ready(next))
            }
        }
    }

    /// Whether the next epoch bump needs a new producer id.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= MAX_PRODUCER_EPOCH
    }

    /// Whether an ongoing transaction outlived its timeout.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing && now_ms >= self.started_ms + i64::from(self.timeout_ms)
    }

    /// The same transaction one epoch later (a new producer id past the last epoch).
    fn bumped(&self, new_producer_id: i64) -> TxnMetadata {
        let mut next = self.clone();
        if self.epoch_exhausted() {
            next.producer_id = new_producer_id;
            next.producer_epoch = 0;
        } else {
            next.producer_epoch += 1;
        }
        next
    }

    fn clear(&mut self, now_ms: i64) {
        self.partitions.clear();
        self.groups.clear();
        self.started_ms = -1;
        self.updated_ms = now_ms;
    }

    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if producer_epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    /// Whether the producer at this epoch may commit offsets of a group `matches` in this
    /// transaction (TxnOffsetCommit): the transaction is ongoing and added such a group.
    pub fn check_offsets(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        matches: impl Fn(&str) -> bool,
    ) -> Result<(), TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        if self.state == TxnState::Ongoing && self.groups.iter().any(|g| matches(g)) {
            Ok(())
        } else {
            Err(TxnError::InvalidTxnState)
        }
    }

    /// The state after adding partitions and/or a group (AddPartitionsToTxn, AddOffsetsToTxn).
    pub fn add(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        group: Option<&str>,
        now_ms: i64,
    ) -> Result<TxnMetadata, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        let mut next = self.clone();
        match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(TxnError::ConcurrentTransactions);
            }
            TxnState::Ongoing => {}
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                next.clear(now_ms);
                next.state = TxnState::Ongoing;
                next.started_ms = now_ms;
            }
        }
        next.partitions.extend(partitions.iter().cloned());
        next.groups.extend(group.map(str::to_string));
        next.updated_ms = now_ms;
        Ok(next)
    }

    /// EndTxn: `Ok(None)` when the transaction already ended the same way (a retry).
    pub fn end(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Option<TxnMetadata>, TxnError> {
        self.check_producer(producer_id, producer_epoch)?;
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = self.clone();
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                next.updated_ms = now_ms;
                Ok(Some(next))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(None),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(TxnError::ConcurrentTransactions)
            }
            _ => Err(TxnError::InvalidTxnState),
        }
    }

    /// The state once every marker is written and the offsets applied.
    pub fn completed(&self, now_ms: i64) -> Option<TxnMetadata> {
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut next = self.clone();
        next.state = state;
        next.clear(now_ms);
        Some(next)
    }

    /// A transaction open longer than its timeout is aborted with a bumped epoch, which fences
    /// the producer that forgot it.
    pub fn expire(
        &self,
        transactional_id: &str,
        new_producer_id: i64,
        now_ms: i64,
    ) -> Option<(TxnMetadata, Completion)> {
        if !self.is_expired(now_ms) {
            return None;
        }
        let mut aborting = self.bumped(new_producer_id);
        aborting.state = TxnState::PrepareAbort;
        aborting.updated_ms = now_ms;
        let completion = aborting.completion(transactional_id)?;
        Some((aborting, completion))
    }
}
