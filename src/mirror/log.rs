//! A partition log as the engine's [`MirrorLog`]: the mirror path of the storage engine, with the
//! high watermark kept at the log end (one replica: what is appended is committed).

use crate::broker::now_ms;
use crate::storage::{GapPolicy, PartitionLog, StorageError};
use kmirror_actors::epoch::EpochStart;
use kmirror_actors::host::{HostError, MirrorLog};
use kmirror_protocol::batch::CheckedBatches;
use kmirror_protocol::records::ControlRecord;

fn host_error(e: StorageError) -> HostError {
    match e {
        StorageError::Io { .. } => HostError::retryable(e.to_string()),
        _ => HostError::fatal(e.to_string()),
    }
}

/// Whether `batch` is a MIRROR_PID_RESET barrier (written by this cluster when it stopped).
fn is_barrier(batch: &kmirror_protocol::batch::RecordBatch) -> bool {
    batch.is_control()
        && matches!(
            ControlRecord::parse(batch),
            Ok(ControlRecord::MirrorPidReset { .. })
        )
}

/// How many offsets this cluster wrote to a partition since it last failed over: those after
/// the newest MIRROR_PID_RESET barrier (0 if it never failed over here). Restarting the mirror
/// of a stopped topic discards them. Only the epochs after the barrier are read: the barrier
/// opens the epoch the stop bumped to, above every mirrored one.
pub fn written_since_failover(log: &PartitionLog) -> Result<i64, StorageError> {
    let entries = log.epoch_entries();
    let log_end = log.log_end_offset();
    for (i, entry) in entries.iter().enumerate().rev() {
        let end = entries.get(i + 1).map_or(log_end, |next| next.start_offset);
        let found = log.find_batch(entry.start_offset, |b| {
            b.base_offset() >= end || is_barrier(b)
        })?;
        if let Some(barrier) = found.filter(|b| b.base_offset() < end) {
            return Ok(log_end - (barrier.last_offset() + 1));
        }
    }
    Ok(0)
}

/// Whether the log's last batch is a MIRROR_PID_RESET barrier: a STOPPING run again (after a
/// crash between its barrier and STOPPED) finds its own barrier there and appends no second
/// one, so the log stays the source's up to exactly one barrier.
pub fn ends_with_barrier(log: &PartitionLog) -> Result<bool, StorageError> {
    let end = log.log_end_offset();
    if end <= log.log_start_offset() {
        return Ok(false);
    }
    let last = log.find_batch(end - 1, |b| b.last_offset() >= end - 1)?;
    Ok(last.is_some_and(|b| is_barrier(&b)))
}

/// Keeps the high watermark at the log end after a change.
fn committed(log: &mut PartitionLog) {
    let end = log.log_end_offset();
    log.update_high_watermark(end);
}

impl MirrorLog for PartitionLog {
    fn log_start_offset(&self) -> i64 {
        PartitionLog::log_start_offset(self)
    }

    fn log_end_offset(&self) -> i64 {
        PartitionLog::log_end_offset(self)
    }

    fn last_stable_offset(&self) -> i64 {
        PartitionLog::last_stable_offset(self)
    }

    fn epoch_history(&self) -> Vec<EpochStart> {
        self.epoch_entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    fn latest_mirrored_epoch(&self) -> i32 {
        // Newest epoch first: the first one holding a batch that is not this cluster's own
        // MIRROR_PID_RESET barrier.
        let entries = self.epoch_entries();
        for (i, entry) in entries.iter().enumerate().rev() {
            let end = entries
                .get(i + 1)
                .map_or(PartitionLog::log_end_offset(self), |next| next.start_offset);
            let mirrored = self.find_batch(entry.start_offset, |batch| {
                batch.base_offset() >= end || !is_barrier(batch)
            });
            match mirrored {
                Ok(Some(batch)) if batch.base_offset() < end => return entry.epoch,
                Ok(_) => {}
                // Unreadable: count the epoch as mirrored, the conservative answer for an LME.
                Err(e) => {
                    tracing::error!(error = %e, "reading the log for its last mirrored epoch");
                    return entry.epoch;
                }
            }
        }
        -1
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), HostError> {
        PartitionLog::truncate_to(self, offset).map_err(host_error)?;
        committed(self);
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), HostError> {
        PartitionLog::truncate_fully_and_start_at(self, offset).map_err(host_error)?;
        committed(self);
        Ok(())
    }

    fn append_mirrored(&mut self, checked: CheckedBatches) -> Result<(), HostError> {
        // A compacted source leaves gaps between batches.
        PartitionLog::append_mirrored_checked(self, checked, GapPolicy::AllowGaps, now_ms())
            .map_err(host_error)?;
        committed(self);
        Ok(())
    }

    fn append_pid_reset(
        &mut self,
        leader_epoch: i32,
        source_cluster_id: &str,
    ) -> Result<(), HostError> {
        PartitionLog::append_pid_reset(self, source_cluster_id, leader_epoch, now_ms())
            .map_err(host_error)?;
        committed(self);
        Ok(())
    }
}
