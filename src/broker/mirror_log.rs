//! A partition log leased to the engine as its [`MirrorLog`]: the mirror path of the storage
//! engine. After every append the partition's leader state moves the high watermark (with the
//! ISR: docs/replication.md §6); after a truncation it forgets what it knew past the cut.
//!
//! It lives in the broker, which reads its own logs through it by the engine's rules (whether a
//! partition opens read-only, where a log's first barrier is); the engine's host
//! ([`crate::mirror`]) leases it to the engine.

use super::now_ms;
use crate::storage::{GapPolicy, PartitionLog, StorageError};
use bytes::Bytes;
use kmirror_actors::epoch::EpochStart;
use kmirror_actors::host::{HostError, MirrorLog};
use kmirror_protocol::batch::{CheckedBatches, RecordBatch};
use kmirror_protocol::errors::ErrorCode;

/// The log while the engine holds it, with the broker and partition whose leader state follows
/// its changes (`None` for a read).
pub(crate) struct Lease<'a>(
    pub(crate) &'a mut PartitionLog,
    pub(crate) Option<(&'a super::Broker, &'a super::Partition)>,
);

/// A storage failure in Kafka's terms: I/O is KAFKA_STORAGE_ERROR and batches that overlap
/// the log end OFFSET_NOT_AVAILABLE (both retriable: the next fetch asks from the log end
/// again, after the source's log or leader moved); a log deleted under the engine (its topic
/// went) NOT_LEADER_OR_FOLLOWER; anything else is a log that refuses what it was given,
/// INVALID_RECORD.
fn cause(e: StorageError) -> HostError {
    let code = match e {
        StorageError::Io { .. } => ErrorCode::KAFKA_STORAGE_ERROR,
        StorageError::OffsetOverlap { .. } => ErrorCode::OFFSET_NOT_AVAILABLE,
        StorageError::LogDeleted { .. } => ErrorCode::NOT_LEADER_OR_FOLLOWER,
        _ => ErrorCode::INVALID_RECORD,
    };
    HostError::new(code, e.to_string())
}

/// Whether a partition of a topic whose `mirror.name` is `mirror_name` opens read-only (the
/// engine's rule, [`kmirror_actors::host::opens_read_only`]); a log that cannot be read opens
/// read-only, the side that loses no write.
pub(super) fn opens_read_only(
    log: &mut PartitionLog,
    mirror_name: Option<&str>,
    cluster_id: &str,
) -> bool {
    kmirror_actors::host::opens_read_only(mirror_name, &Lease(log, None), cluster_id).unwrap_or_else(|e| {
        tracing::error!(error = %e.message, "reading a stopped mirror partition for its barrier; it opens read-only");
        true
    })
}

/// The offset of the log's first MIRROR_PID_RESET barrier ([`kmirror_actors::host::first_barrier`]);
/// `None` when there is none or the log cannot be read.
pub(super) fn first_barrier(log: &mut PartitionLog) -> Option<i64> {
    kmirror_actors::host::first_barrier(&Lease(log, None)).unwrap_or_else(|e| {
        tracing::error!(error = %e.message, "reading a partition log for its barrier");
        None
    })
}

impl Lease<'_> {
    /// After an append: the leader state learns the new log end.
    fn committed(&mut self) {
        if let Some((broker, partition)) = self.1 {
            broker.committed_append(partition, self.0);
        }
    }

    /// After a truncation: the leader state drops what it knew past the cut.
    fn truncated(&mut self) {
        if let Some((broker, partition)) = self.1 {
            broker.truncated(partition, self.0);
        }
    }
}

impl MirrorLog for Lease<'_> {
    fn log_start_offset(&self) -> i64 {
        self.0.log_start_offset()
    }

    fn log_end_offset(&self) -> i64 {
        self.0.log_end_offset()
    }

    fn last_stable_offset(&self) -> i64 {
        self.0.last_stable_offset()
    }

    fn epoch_history(&self) -> Vec<EpochStart> {
        self.0
            .epoch_entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    fn find_batch(
        &self,
        from: i64,
        stop: &mut dyn FnMut(&RecordBatch) -> bool,
    ) -> Result<Option<RecordBatch>, HostError> {
        self.0.find_batch(from, stop).map_err(cause)
    }

    fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>, HostError> {
        self.0.offset_for_timestamp(timestamp).map_err(cause)
    }

    fn truncate_to(&mut self, offset: i64) -> Result<(), HostError> {
        self.0.truncate_to(offset).map_err(cause)?;
        self.truncated();
        Ok(())
    }

    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), HostError> {
        self.0.truncate_fully_and_start_at(offset).map_err(cause)?;
        self.truncated();
        Ok(())
    }

    fn append_mirrored(&mut self, checked: CheckedBatches) -> Result<(), HostError> {
        // A compacted source leaves gaps between batches.
        self.0
            .append_mirrored_checked(checked, GapPolicy::AllowGaps, now_ms())
            .map_err(cause)?;
        self.committed();
        Ok(())
    }

    fn append_pid_reset(
        &mut self,
        leader_epoch: i32,
        source_cluster_id: &str,
    ) -> Result<(), HostError> {
        self.0
            .append_pid_reset(source_cluster_id, leader_epoch, now_ms())
            .map_err(cause)?;
        self.committed();
        Ok(())
    }

    fn append_as_leader(&mut self, batch: Bytes, leader_epoch: i32) -> Result<(), HostError> {
        self.0
            .append_as_leader(batch, leader_epoch, now_ms())
            .map_err(|e| HostError::new(ErrorCode::KAFKA_STORAGE_ERROR, e.to_string()))?;
        self.committed();
        Ok(())
    }
}
