//! A partition log in memory ([`MemoryLog`], the engine's [`MirrorLog`]) and the single-partition
//! doubles the deterministic simulation drives by hand: a source partition answering fetches as
//! a Kafka leader would, a controller of one leader epoch, a coordinator log. The logs hold real
//! v2 record batches (encoded by kafka-protocol), so "the destination equals the source" is a
//! comparison of bytes.

use crate::epoch::{self, EpochStart};
use crate::host::{FetchRequest, FetchResponse, HostError, MirrorLog};
use crate::partition::Cause;
use bytes::Bytes;
use kmirror_protocol::batch::{CheckedBatches, RecordBatch, RecordBatches};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::records::{ControlBatchHeader, ControlRecord, CoordinatorRecord};
use kmirror_protocol::testing::BatchSpec;
use std::collections::HashMap;

/// A partition log in memory, with Kafka's epoch and LSO semantics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryLog {
    batches: Vec<RecordBatch>,
    start: i64,
    next_value: usize,
}

impl MemoryLog {
    /// The batches, oldest first.
    pub fn batches(&self) -> &[RecordBatch] {
        &self.batches
    }

    /// The bytes of every batch, back to back.
    pub fn bytes(&self) -> Vec<u8> {
        self.batches
            .iter()
            .flat_map(|b| b.as_bytes().to_vec())
            .collect()
    }

    /// Moves the log start to `offset`, as Kafka's DeleteRecords does: whole batches below it
    /// go; a batch holding it stays, its records below the start no longer served.
    pub fn delete_records(&mut self, offset: i64) {
        self.batches.retain(|b| b.last_offset() >= offset);
        self.start = self.start.max(offset);
    }

    /// Kafka's end offset for `epoch` over this log.
    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        let history = self.epoch_history();
        if epoch < 0 {
            return (-1, -1);
        }
        if history.last().map(|(e, _)| *e) == Some(epoch) {
            return (epoch, self.log_end_offset());
        }
        match history.iter().find(|(e, _)| *e > epoch) {
            None => (-1, -1),
            Some((_, start)) => {
                let floor = history
                    .iter()
                    .rev()
                    .find(|(e, _)| *e <= epoch)
                    .map_or(epoch, |(e, _)| *e);
                (floor, *start)
            }
        }
    }

    /// Appends a data batch as a producer's leader would: the next offsets, `leader_epoch`,
    /// and the given producer (`transactional` opens or continues its transaction).
    pub fn produce(
        &mut self,
        records: usize,
        leader_epoch: i32,
        producer_id: i64,
        transactional: bool,
    ) {
        self.next_value += 1;
        let bytes = BatchSpec {
            base_offset: self.log_end_offset(),
            partition_leader_epoch: leader_epoch,
            producer_id,
            producer_epoch: if producer_id >= 0 { 0 } else { -1 },
            base_sequence: -1,
            transactional,
            records,
            value_size: 8 + self.next_value % 24,
            timestamp_ms: 1_700_000_000_000 + self.next_value as i64,
            ..BatchSpec::default()
        }
        .build();
        self.push(bytes);
    }

    /// Appends a transaction marker for `producer_id`.
    pub fn append_marker(&mut self, producer_id: i64, commit: bool, leader_epoch: i32) {
        let header = ControlBatchHeader {
            base_offset: self.log_end_offset(),
            partition_leader_epoch: leader_epoch,
            producer_id,
            producer_epoch: 0,
            timestamp_ms: 1_700_000_000_000,
        };
        let record = ControlRecord::EndTxn {
            commit,
            coordinator_epoch: 0,
        };
        self.push(record.to_batch(&header).expect("control batches encode"));
    }

    fn push(&mut self, bytes: Bytes) {
        for batch in RecordBatches::new(bytes) {
            self.batches.push(batch.expect("whole batches"));
        }
    }

    /// Producers with an open transaction, and its first offset.
    pub fn open_transactions(&self) -> HashMap<i64, i64> {
        let mut open = HashMap::new();
        for b in &self.batches {
            if b.is_control() {
                match ControlRecord::parse(b) {
                    Ok(ControlRecord::MirrorPidReset { .. }) => open.clear(),
                    Ok(ControlRecord::EndTxn { .. }) => {
                        open.remove(&b.producer_id());
                    }
                    _ => {}
                }
            } else if b.is_transactional() {
                open.entry(b.producer_id()).or_insert(b.base_offset());
            }
        }
        open
    }
}

impl MirrorLog for MemoryLog {
    fn log_start_offset(&self) -> i64 {
        self.start
    }

    fn log_end_offset(&self) -> i64 {
        self.batches
            .last()
            .map_or(self.start, RecordBatch::next_offset)
    }

    fn last_stable_offset(&self) -> i64 {
        let end = self.log_end_offset();
        self.open_transactions()
            .values()
            .copied()
            .min()
            .unwrap_or(end)
            .min(end)
    }

    fn epoch_history(&self) -> Vec<EpochStart> {
        let mut history: Vec<EpochStart> = Vec::new();
        for b in &self.batches {
            let e = b.partition_leader_epoch();
            if history.last().is_none_or(|(last, _)| e > *last) {
                history.push((e, b.base_offset()));
            }
        }
        history
    }

    fn find_batch(
        &self,
        from: i64,
        stop: &mut dyn FnMut(&RecordBatch) -> bool,
    ) -> Result<Option<RecordBatch>, HostError> {
        Ok(self
            .batches
            .iter()
            .filter(|b| b.last_offset() >= from)
            .find(|b| stop(b))
            .cloned())
    }

    fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>, HostError> {
        Ok(self
            .batches
            .iter()
            .find(|b| b.max_timestamp() >= timestamp)
            .map(|b| b.base_offset().max(self.start)))
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), HostError> {
        self.batches.retain(|b| b.last_offset() < offset);
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), HostError> {
        self.batches.clear();
        self.start = offset;
        Ok(())
    }

    fn append_mirrored(&mut self, checked: CheckedBatches) -> Result<(), HostError> {
        let mut expected = self.log_end_offset();
        let mut latest = self.epoch_history().last().map_or(-1, |(e, _)| *e);
        let mut batches = Vec::new();
        for b in checked.into_parts().1 {
            if b.base_offset() != expected {
                return Err(invalid(format!(
                    "mirrored batch at {} does not start at the log end {expected}",
                    b.base_offset()
                )));
            }
            if b.partition_leader_epoch() < latest {
                return Err(invalid("mirrored batch lowers the leader epoch"));
            }
            latest = b.partition_leader_epoch();
            expected = b.next_offset();
            batches.push(b);
        }
        self.batches.extend(batches);
        Ok(())
    }

    fn append_as_leader(&mut self, batch: Bytes, leader_epoch: i32) -> Result<(), HostError> {
        let mut buf = batch.to_vec();
        let mut next = self.log_end_offset();
        kmirror_protocol::batch::rewrite_batches(&mut buf, |b| {
            b.set_base_offset(next);
            b.set_partition_leader_epoch(leader_epoch);
            next += i64::from(b.last_offset_delta()) + 1;
        })
        .map_err(|e| invalid(e.to_string()))?;
        let checked =
            CheckedBatches::check(Bytes::from(buf)).map_err(|e| invalid(e.to_string()))?;
        self.batches.extend(checked.into_parts().1);
        Ok(())
    }

    fn append_pid_reset(
        &mut self,
        leader_epoch: i32,
        source_cluster_id: &str,
    ) -> Result<(), HostError> {
        let header = ControlBatchHeader::without_producer(
            self.log_end_offset(),
            leader_epoch,
            1_700_000_000_000,
        );
        let record = ControlRecord::MirrorPidReset {
            source_cluster_id: source_cluster_id.to_string(),
        };
        let bytes = record
            .to_batch(&header)
            .map_err(|e| invalid(e.to_string()))?;
        self.push(bytes);
        Ok(())
    }
}

/// A source partition: a log, the LMEs its cluster recorded, and scripted failures.
#[derive(Debug, Clone, Default)]
pub struct MemorySource<'a> {
    /// The cluster id.
    pub cluster_id: String,
    /// The source log.
    pub log: Option<&'a MemoryLog>,
    /// LMEs by the asking cluster's id.
    pub lmes: HashMap<String, i32>,
    /// When set, every call fails with this retryable error.
    pub unreachable: Option<String>,
}

impl MemorySource<'_> {
    fn log(&self) -> Result<&MemoryLog, Cause> {
        if let Some(why) = &self.unreachable {
            return Err(Cause::retryable(why.clone()));
        }
        self.log
            .ok_or_else(|| Cause::fatal("source topic does not exist"))
    }
}

impl MemorySource<'_> {
    /// LastMirroredEpochs: the LME the source recorded for this partition when it stopped
    /// mirroring from `asking_cluster_id`, or -1.
    pub fn last_mirrored_epoch(&self, asking_cluster_id: &str) -> Result<i32, Cause> {
        self.log()?;
        Ok(self.lmes.get(asking_cluster_id).copied().unwrap_or(-1))
    }

    /// The source partition's log start offset.
    pub fn log_start_offset(&self) -> Result<i64, Cause> {
        Ok(self.log()?.log_start_offset())
    }

    /// A consumer fetch (READ_COMMITTED) with `LastFetchedEpoch`, answered as a Kafka leader
    /// would: out of range, diverging, or whole batches below the LSO.
    pub fn fetch(&self, request: &FetchRequest) -> Result<FetchResponse, Cause> {
        let log = self.log()?;
        // Beyond the end with a last fetched epoch is a divergence question, answered below.
        let beyond_end =
            request.offset > log.log_end_offset() && request.last_fetched_epoch.is_none();
        if request.offset < log.log_start_offset() || beyond_end {
            return Ok(FetchResponse::OffsetOutOfRange {
                log_start_offset: log.log_start_offset(),
            });
        }
        if let Some(last_fetched_epoch) = request.last_fetched_epoch {
            let (epoch, end_offset) = log.end_offset_for(last_fetched_epoch);
            if epoch < 0 || end_offset < request.offset || epoch < last_fetched_epoch {
                return Ok(FetchResponse::Diverging { epoch, end_offset });
            }
        }
        let lso = log.last_stable_offset();
        let mut out = Vec::new();
        for b in log
            .batches()
            .iter()
            // From the batch holding the fetch offset, as Kafka answers (a log start moved
            // inside a batch by DeleteRecords is answered with that whole batch).
            .filter(|b| b.last_offset() >= request.offset && b.base_offset() < lso)
        {
            if !out.is_empty() && out.len() + b.size() > request.max_bytes {
                break;
            }
            out.extend_from_slice(b.as_bytes());
        }
        Ok(FetchResponse::Records {
            records: Bytes::from(out),
            high_watermark: log.log_end_offset(),
            // The source's leader epoch is at least its log's latest.
            source_leader_epoch: log.epoch_history().last().map(|(e, _)| *e),
        })
    }
}

/// A controller holding one partition's leader epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryController {
    /// The partition's leader epoch.
    pub leader_epoch: i32,
}

impl MemoryController {
    /// BumpLeaderEpochs for the partition: its leader epoch afterwards.
    pub fn bump_leader_epoch(&mut self, min_leader_epoch: i32) -> Result<i32, Cause> {
        self.leader_epoch = epoch::bumped_epoch(self.leader_epoch, min_leader_epoch);
        Ok(self.leader_epoch)
    }
}

/// A `__mirror_state` partition: its records, and a switch to make appends fail.
#[derive(Debug, Clone, Default)]
pub struct MemoryCoordinatorLog {
    /// Every record appended, in order.
    pub records: Vec<CoordinatorRecord>,
    /// When set, appends fail (a coordinator write failure).
    pub failing: bool,
}

impl MemoryCoordinatorLog {
    /// Appends records durably, unless appends fail.
    pub fn append(&mut self, records: &[CoordinatorRecord]) -> Result<(), Cause> {
        if self.failing {
            return Err(Cause::retryable("the __mirror_state append timed out"));
        }
        self.records.extend_from_slice(records);
        Ok(())
    }
}

/// A batch the log refuses (a broken offset or epoch rule, a batch that does not encode).
fn invalid(message: impl Into<String>) -> HostError {
    HostError::new(ErrorCode::INVALID_RECORD, message)
}
