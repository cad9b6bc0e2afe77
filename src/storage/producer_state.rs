//! Producer state of one partition: per producer id its epoch, recent sequences and ongoing
//! transaction, plus the aborted transactions that READ_COMMITTED fetches must skip.
//!
//! Every append path feeds it the batches it wrote, in offset order (data and control alike), and
//! recovery replays the log through the same [`ProducerStateManager::apply`]; nothing else changes
//! it. From it come:
//! - the first unstable offset (start of the oldest ongoing transaction), which bounds the LSO;
//! - the aborted transactions overlapping a fetch;
//! - the idempotent-producer checks of the leader path ([`ProducerStateManager::check_produce`]):
//!   fenced epochs, out-of-order sequences, and duplicates of the last five batches;
//! - a `MIRROR_PID_RESET` control batch drops every producer and ongoing transaction (the aborted
//!   list stays: older data still needs it).
//!
//! Snapshots ([`ProducerStateManager::encode_snapshot`]) let recovery start at the recovery point
//! instead of replaying the whole log.

use super::error::StorageError;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kmirror_protocol::batch::{NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch};
use kmirror_protocol::records::ControlRecord;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// How many recent batches per producer are kept for duplicate detection (Kafka's value).
const RECENT_BATCHES: usize = 5;
const SNAPSHOT_VERSION: i16 = 1;

/// One batch an idempotent producer wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the first record.
    pub first_sequence: i32,
    /// Sequence of the last record.
    pub last_sequence: i32,
    /// Offset of the first record.
    pub first_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
}

/// What the log knows of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The newest epoch seen.
    pub producer_epoch: i16,
    /// The coordinator epoch of the newest transaction marker.
    pub coordinator_epoch: i32,
    /// Offset of the producer's newest batch or marker.
    pub last_offset: i64,
    /// The first offset of the ongoing transaction, if one is open.
    pub current_txn_first_offset: Option<i64>,
    /// The newest batches of the current epoch, oldest first.
    pub recent: VecDeque<BatchMetadata>,
}

impl ProducerEntry {
    fn new(producer_epoch: i16) -> Self {
        ProducerEntry {
            producer_epoch,
            coordinator_epoch: -1,
            last_offset: -1,
            current_txn_first_offset: None,
            recent: VecDeque::new(),
        }
    }

    fn last_sequence(&self) -> i32 {
        self.recent.back().map_or(NO_SEQUENCE, |b| b.last_sequence)
    }
}

/// An aborted transaction: READ_COMMITTED readers skip the producer's data in this range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch.
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
}

/// The leader path's verdict on a batch before it is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceCheck {
    /// Append it.
    Append,
    /// A retry of a batch already in the log: answer with its offsets, append nothing.
    Duplicate(BatchMetadata),
}

/// Producer state of a partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    /// Ongoing transactions by first offset.
    ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions in marker order.
    aborted: Vec<AbortedTxn>,
}

fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX { 0 } else { last + 1 }
}

impl ProducerStateManager {
    /// The state of one producer.
    pub fn producer(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// The producer ids tracked.
    pub fn producer_ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.producers.keys().copied()
    }

    /// How many producers are tracked.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Checks an idempotent producer's data batch on the leader path, before offsets are
    /// assigned. Batches without a producer id always pass.
    pub fn check_produce(&self, batch: &RecordBatch) -> Result<ProduceCheck, StorageError> {
        let producer_id = batch.producer_id();
        if producer_id < 0 {
            return Ok(ProduceCheck::Append);
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            // A producer the log does not know (new, or expired by retention) may start anywhere.
            return Ok(ProduceCheck::Append);
        };
        let epoch = batch.producer_epoch();
        if epoch < entry.producer_epoch {
            return Err(StorageError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current_epoch: entry.producer_epoch,
            });
        }
        let first_sequence = batch.base_sequence();
        if epoch > entry.producer_epoch {
            if first_sequence != 0 && entry.producer_epoch != NO_PRODUCER_EPOCH {
                return Err(StorageError::OutOfOrderSequence {
                    producer_id,
                    first_sequence,
                    expected_sequence: 0,
                });
            }
            return Ok(ProduceCheck::Append);
        }
        if let Some(dup) = entry.recent.iter().find(|b| {
            b.first_sequence == first_sequence && b.last_sequence == batch.last_sequence()
        }) {
            return Ok(ProduceCheck::Duplicate(*dup));
        }
        let last = entry.last_sequence();
        if last != NO_SEQUENCE && first_sequence != next_sequence(last) {
            return Err(StorageError::OutOfOrderSequence {
                producer_id,
                first_sequence,
                expected_sequence: next_sequence(last),
            });
        }
        Ok(ProduceCheck::Append)
    }

    /// Checks a transaction marker the leader is about to write.
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), StorageError> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < entry.producer_epoch {
            return Err(StorageError::InvalidProducerEpoch {
                producer_id,
                epoch: producer_epoch,
                current_epoch: entry.producer_epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(StorageError::CoordinatorFenced {
                producer_id,
                coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Applies a batch now in the log, offsets final. `control` is the batch's control record
    /// when it is a control batch.
    pub fn apply(&mut self, batch: &RecordBatch, control: Option<&ControlRecord>) {
        let producer_id = batch.producer_id();
        match control {
            Some(ControlRecord::MirrorPidReset { .. }) => {
                self.producers.clear();
                self.ongoing.clear();
            }
            Some(ControlRecord::EndTxn {
                commit,
                coordinator_epoch,
            }) if producer_id >= 0 => {
                let entry = self
                    .producers
                    .entry(producer_id)
                    .or_insert_with(|| ProducerEntry::new(batch.producer_epoch()));
                entry.producer_epoch = entry.producer_epoch.max(batch.producer_epoch());
                entry.coordinator_epoch = *coordinator_epoch;
                entry.last_offset = batch.last_offset();
                if let Some(first_offset) = entry.current_txn_first_offset.take() {
                    self.ongoing.remove(&first_offset);
                    if !commit {
                        self.aborted.push(AbortedTxn {
                            producer_id,
                            first_offset,
                            last_offset: batch.last_offset(),
                        });
                    }
                }
            }
            Some(_) => {}
            None if producer_id >= 0 => {
                let epoch = batch.producer_epoch();
                let entry = self
                    .producers
                    .entry(producer_id)
                    .or_insert_with(|| ProducerEntry::new(epoch));
                if epoch > entry.producer_epoch {
                    entry.producer_epoch = epoch;
                    entry.recent.clear();
                }
                if batch.base_sequence() != NO_SEQUENCE {
                    if entry.recent.len() == RECENT_BATCHES {
                        entry.recent.pop_front();
                    }
                    entry.recent.push_back(BatchMetadata {
                        first_sequence: batch.base_sequence(),
                        last_sequence: batch.last_sequence(),
                        first_offset: batch.base_offset(),
                        last_offset: batch.last_offset(),
                    });
                }
                entry.last_offset = batch.last_offset();
                if batch.is_transactional() && entry.current_txn_first_offset.is_none() {
                    entry.current_txn_first_offset = Some(batch.base_offset());
                    self.ongoing.insert(batch.base_offset(), producer_id);
                }
            }
            None => {}
        }
    }

    /// The first offset of the oldest ongoing transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// The first offset of `producer_id`'s open transaction in this partition, if it has one.
    pub fn ongoing_start(&self, producer_id: i64) -> Option<i64> {
        self.ongoing
            .iter()
            .find(|(_, id)| **id == producer_id)
            .map(|(first, _)| *first)
    }

    /// Aborted transactions a READ_COMMITTED fetch of `[start, upper)` must know about.
    pub fn aborted_between(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        self.aborted
            .iter()
            .filter(|a| a.last_offset >= start && a.first_offset < upper)
            .copied()
            .collect()
    }

    /// The log start moved to `log_start`: forget producers and aborted transactions wholly
    /// before it (producers with an ongoing transaction stay).
    pub fn truncate_head(&mut self, log_start: i64) {
        self.producers
            .retain(|_, e| e.last_offset >= log_start || e.current_txn_first_offset.is_some());
        self.aborted.retain(|a| a.last_offset >= log_start);
    }

    /// Encodes the whole state, stamped with the log offset it is valid at.
    pub fn encode_snapshot(&self, offset: i64) -> Bytes {
        let mut body = BytesMut::new();
        body.put_i64(offset);
        let mut producers: Vec<(&i64, &ProducerEntry)> = self.producers.iter().collect();
        producers.sort_by_key(|(id, _)| **id);
        body.put_u32(producers.len() as u32);
        for (id, e) in producers {
            body.put_i64(*id);
            body.put_i16(e.producer_epoch);
            body.put_i32(e.coordinator_epoch);
            body.put_i64(e.last_offset);
            body.put_i64(e.current_txn_first_offset.unwrap_or(-1));
            body.put_u8(e.recent.len() as u8);
            for b in &e.recent {
                body.put_i32(b.first_sequence);
                body.put_i32(b.last_sequence);
                body.put_i64(b.first_offset);
                body.put_i64(b.last_offset);
            }
        }
        body.put_u32(self.aborted.len() as u32);
        for a in &self.aborted {
            body.put_i64(a.producer_id);
            body.put_i64(a.first_offset);
            body.put_i64(a.last_offset);
        }
        let mut out = BytesMut::with_capacity(body.len() + 6);
        out.put_i16(SNAPSHOT_VERSION);
        out.put_u32(crc32c::crc32c(&body));
        out.extend_from_slice(&body);
        out.freeze()
    }

    /// Decodes a snapshot, returning the state and the offset it is valid at; `None` when the
    /// bytes are not an intact snapshot of this version.
    pub fn decode_snapshot(mut bytes: Bytes) -> Option<(ProducerStateManager, i64)> {
        if bytes.remaining() < 6 || bytes.get_i16() != SNAPSHOT_VERSION {
            return None;
        }
        let crc = bytes.get_u32();
        if crc32c::crc32c(&bytes) != crc {
            return None;
        }
        let need = |b: &Bytes, n: usize| (b.remaining() >= n).then_some(());
        need(&bytes, 12)?;
        let offset = bytes.get_i64();
        let count = bytes.get_u32() as usize;
        let mut state = ProducerStateManager::default();
        for _ in 0..count {
            need(&bytes, 8 + 2 + 4 + 8 + 8 + 1)?;
            let id = bytes.get_i64();
            let mut entry = ProducerEntry::new(bytes.get_i16());
            entry.coordinator_epoch = bytes.get_i32();
            entry.last_offset = bytes.get_i64();
            let txn = bytes.get_i64();
            entry.current_txn_first_offset = (txn >= 0).then_some(txn);
            let recent = bytes.get_u8() as usize;
            need(&bytes, recent * 24)?;
            for _ in 0..recent {
                entry.recent.push_back(BatchMetadata {
                    first_sequence: bytes.get_i32(),
                    last_sequence: bytes.get_i32(),
                    first_offset: bytes.get_i64(),
                    last_offset: bytes.get_i64(),
                });
            }
            if let Some(first) = entry.current_txn_first_offset {
                state.ongoing.insert(first, id);
            }
            state.producers.insert(id, entry);
        }
        need(&bytes, 4)?;
        let aborted = bytes.get_u32() as usize;
        need(&bytes, aborted * 24)?;
        for _ in 0..aborted {
            state.aborted.push(AbortedTxn {
                producer_id: bytes.get_i64(),
                first_offset: bytes.get_i64(),
                last_offset: bytes.get_i64(),
            });
        }
        (!bytes.has_remaining()).then_some((state, offset))
    }
}

#[cfg(test)]
mod tests;
