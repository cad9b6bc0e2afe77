//! A partition log: segments of raw v2 batches with the state Kafka keeps beside them.
//!
//! Lifecycle: [`PartitionLog::open`] recovers the directory (see below) and returns a report of
//! what it repaired; appends go through one of two paths; [`PartitionLog::flush`] makes every
//! batch below the log end offset durable; [`PartitionLog::close`] flushes and snapshots producer
//! state so the next open replays nothing.
//!
//! Append paths:
//! - [`PartitionLog::append_as_leader`] (produce): the leader assigns offsets from the log end
//!   and stamps its leader epoch into each batch header (both outside the CRC, rewritten in
//!   place), after the idempotent-producer checks;
//! - [`PartitionLog::append_mirrored`] (mirror fetcher): batches keep the source's offsets,
//!   epochs and bytes; they must start at the log end offset (or after it, where the source is
//!   compacted) and never lower the leader epoch; the epoch cache follows the batches' epochs.
//!   Their records are not validated again (the source did), but a batch this broker could not
//!   serve (an unknown codec, offsets running backwards) is refused.
//!
//! Files in the partition directory:
//! - `<offset>.log` / `<offset>.index`: segments ([`super::segment`]); log files are opened on
//!   demand within the broker's [`OpenFiles`] bound, so a broker holds more partitions than its
//!   descriptor limit; an index file exists once it has entries (none reads as empty);
//! - `leader-epoch-checkpoint`: the epoch cache, rewritten durably at truncations and, when
//!   it grew since, at flushes (the batches after the recovery point carry the newer epochs,
//!   and recovery reads them back);
//! - `log-state-checkpoint`: log start offset, recovery point and high watermark;
//! - `<offset>.snapshot`: producer state valid at that offset, written at segment rolls and close.
//!
//! Recovery: segments from the one holding the recovery point onward are verified batch by batch
//! (CRC, increasing offsets) and cut at the first torn or corrupt batch, and any later segment is
//! dropped; earlier segments only get their index checked. Producer state is the newest intact
//! snapshot replayed forward to the end; the epoch cache comes from its checkpoint, or from the
//! batches when the checkpoint is missing or damaged. Everything repaired is reported.
//!
//! Durability: data is fsynced by [`PartitionLog::flush`], which the flush policy
//! (`flush.messages`, `flush.ms`) calls after appends; truncations and deletions are fsynced at
//! once, so truncated data never comes back after a crash.
//!
//! Deletion: [`PartitionLog::delete`] removes the directory and leaves the log refusing every
//! append and truncation ([`StorageError::LogDeleted`]), for a request that still holds it.

use super::checkpoint::{self, CheckpointProblem};
use super::config::LogConfig;
use super::epoch_cache::{EpochCache, EpochEntry};
use super::error::{StorageError, io};
use super::open_files::OpenFiles;
use super::producer_state::{AbortedTxn, ProduceCheck, ProducerStateManager};
use super::records::Records;
use super::segment::{AppendedBatch, OpenMode, Segment, file_path, remove_if_present};
use bytes::Bytes;
use kmirror_protocol::batch::{
    BatchHeader, CheckedBatches, RecordBatch, RecordBatches, rewrite_batches,
};
use kmirror_protocol::records::{ControlBatchHeader, ControlRecord};
use std::collections::BTreeMap;
use std::fs;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

const EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
const STATE_CHECKPOINT: &str = "log-state-checkpoint";
/// How often a flush also rewrites `log-state-checkpoint` (Kafka's
/// `log.flush.offset.checkpoint.interval.ms`); recovery scans from an older point otherwise.
const STATE_CHECKPOINT_INTERVAL_MS: i64 = 60_000;
/// Bytes read per step when replaying batches.
const REPLAY_CHUNK: usize = 8 << 20;

/// Whether a mirrored append may start after the log end offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapPolicy {
    /// The first batch must start exactly at the log end offset.
    Contiguous,
    /// Compaction on the source may have removed whole batches: a later start is fine.
    AllowGaps,
}

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended (or of the duplicate's first record).
    pub first_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// Batches written.
    pub batches: usize,
    /// Bytes written.
    pub bytes: usize,
    /// The batch was a retry of one already in the log; nothing was written.
    pub duplicate: bool,
}

/// Whole batches read from the log.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, back to back: a range of one segment file (or nothing).
    pub records: Records,
    /// The offset after the last batch returned (the start offset when nothing was).
    pub next_offset: i64,
}

/// What [`PartitionLog::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments kept.
    pub segments: usize,
    /// Bytes cut from torn or corrupt segment tails.
    pub truncated_bytes: u64,
    /// Segments deleted because they followed a corruption or overlapped.
    pub dropped_segments: Vec<i64>,
    /// Segments whose index was rebuilt.
    pub rebuilt_indexes: usize,
    /// The offset producer-state replay started from.
    pub replayed_from: i64,
    /// Everything that was not as a clean shutdown leaves it, one line each.
    pub problems: Vec<String>,
}

/// A partition's log.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// The broker's bound on open segment files.
    files: OpenFiles,
    segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    high_watermark: i64,
    recovery_point: i64,
    epochs: EpochCache,
    producers: ProducerStateManager,
    unflushed_batches: u64,
    /// What `leader-epoch-checkpoint` holds (`None`: unreadable). Epochs the cache gained at
    /// the log end since are written by the next flush (the batches after the recovery point
    /// carry them anyway); truncations write at once.
    epochs_on_disk: Option<Vec<EpochEntry>>,
    last_flush_ms: i64,
    last_state_checkpoint_ms: i64,
    /// What `log-state-checkpoint` holds (`None`: unreadable), so an unchanged state is not
    /// written again.
    state_on_disk: Option<[i64; 3]>,
    /// The offset of the producer-state snapshot on disk that this state was loaded from or
    /// last written to.
    snapshot_at: Option<i64>,
    dir_dirty: bool,
    /// Set by [`PartitionLog::delete`].
    deleted: bool,
}

/// A batch parsed for appending: its header and, for control batches, the record.
struct Checked {
    batch: RecordBatch,
    control: Option<ControlRecord>,
}

fn frame(records: Bytes) -> Result<Vec<RecordBatch>, StorageError> {
    let mut iter = RecordBatches::new(records);
    let batches = iter.by_ref().collect::<Result<Vec<_>, _>>()?;
    if iter.partial_tail() > 0 {
        return Err(StorageError::PartialBatch(iter.partial_tail()));
    }
    if batches.is_empty() {
        return Err(StorageError::EmptyAppend);
    }
    for b in &batches {
        b.verify_crc()?;
    }
    Ok(batches)
}

fn header_of(b: &RecordBatch) -> BatchHeader {
    BatchHeader {
        base_offset: b.base_offset(),
        size: b.size(),
        partition_leader_epoch: b.partition_leader_epoch(),
        last_offset_delta: b.last_offset_delta(),
        max_timestamp: b.max_timestamp(),
    }
}

fn control_of(b: &RecordBatch) -> Result<Option<ControlRecord>, StorageError> {
    if b.is_control() {
        Ok(Some(ControlRecord::parse(b)?))
    } else {
        Ok(None)
    }
}

fn delete_segment_files(dir: &Path, base: i64) -> Result<(), StorageError> {
    for ext in ["log", "index"] {
        remove_if_present(&file_path(dir, base, ext))?;
    }
    Ok(())
}

fn parse_base_offset(name: &str, ext: &str) -> Option<i64> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    (stem.len() == 20).then(|| stem.parse().ok()).flatten()
}

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir`, recovering it as the module docs describe.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        files: &OpenFiles,
        now_ms: i64,
    ) -> Result<(PartitionLog, RecoveryReport), StorageError> {
        fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        let mut report = RecoveryReport::default();
        let mut log_bases = Vec::new();
        let mut snapshots = Vec::new();
        // A log made from nothing has nothing to recover or make durable: a crash before its
        // first flush leaves at most an empty directory, which opens the same way again.
        let mut fresh = true;
        for entry in fs::read_dir(dir).map_err(io("list", dir))? {
            let entry = entry.map_err(io("list", dir))?;
            fresh = false;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                fs::remove_file(entry.path()).map_err(io("delete", entry.path()))?;
                report
                    .problems
                    .push(format!("deleted unfinished file {name}"));
            } else if let Some(base) = parse_base_offset(&name, "log") {
                log_bases.push(base);
            } else if let Some(offset) = parse_base_offset(&name, "snapshot") {
                snapshots.push(offset);
            }
        }
        log_bases.sort_unstable();
        snapshots.sort_unstable();
        // An index without its log is a leftover of a deletion.
        for entry in fs::read_dir(dir).map_err(io("list", dir))? {
            let entry = entry.map_err(io("list", dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(base) = parse_base_offset(&name, "index")
                && log_bases.binary_search(&base).is_err()
            {
                fs::remove_file(entry.path()).map_err(io("delete", entry.path()))?;
            }
        }

        let state_path = dir.join(STATE_CHECKPOINT);
        let first_base = log_bases.first().copied().unwrap_or(0);
        // A missing checkpoint reads as the first segment's base thrice; one that does not
        // parse must be written again whatever the log holds.
        let state_on_disk = match checkpoint::read(&state_path, 3) {
            Ok(e) if e.len() == 1 => Some([e[0][0], e[0][1], e[0][2]]),
            Ok(_) => {
                report
                    .problems
                    .push("log-state-checkpoint holds no entry".into());
                None
            }
            Err(CheckpointProblem::Missing) => Some([first_base; 3]),
            Err(CheckpointProblem::Garbage(why)) => {
                report
                    .problems
                    .push(format!("ignored {why}; recovering every segment"));
                None
            }
        };
        let [mut log_start, mut recovery_point, mut high_watermark] =
            state_on_disk.unwrap_or([first_base; 3]);

        let mut segments = BTreeMap::new();
        let recover_from = log_bases
            .iter()
            .rev()
            .find(|b| **b <= recovery_point)
            .copied()
            .unwrap_or(first_base);
        let mut cut = false;
        for (i, &base) in log_bases.iter().enumerate() {
            let previous_end = segments.values().last().map(Segment::next_offset);
            if cut || previous_end.is_some_and(|end| base < end) {
                if !cut {
                    report
                        .problems
                        .push(format!("segment {base} overlaps the one before it"));
                }
                cut = true;
                delete_segment_files(dir, base)?;
                report.dropped_segments.push(base);
                continue;
            }
            let mode = if base >= recover_from {
                OpenMode::Recover
            } else {
                OpenMode::Flushed
            };
            let (segment, repaired) =
                Segment::open(dir, base, mode, config.index_interval_bytes, files, now_ms)?;
            if repaired.index_rebuilt && mode == OpenMode::Flushed {
                report
                    .problems
                    .push(format!("rebuilt the index of segment {base}"));
            }
            report.rebuilt_indexes += usize::from(repaired.index_rebuilt);
            if repaired.truncated_bytes > 0 {
                report.truncated_bytes += repaired.truncated_bytes;
                report.problems.push(format!(
                    "cut {} bytes from segment {base}: {}",
                    repaired.truncated_bytes,
                    repaired.reason.unwrap_or_default()
                ));
                cut = true;
            }
            let empty_middle = segment.size() == 0 && i + 1 < log_bases.len() && !cut;
            if empty_middle {
                segment.delete()?;
                report
                    .problems
                    .push(format!("deleted empty segment {base}"));
                continue;
            }
            segments.insert(base, segment);
        }
        if segments.is_empty() {
            segments.insert(log_start, Segment::create(dir, log_start, files, now_ms)?);
        }
        let first = *segments.keys().next().expect("at least one segment");
        let log_end = segments.values().last().map_or(first, Segment::next_offset);
        log_start = log_start.clamp(first, log_end);
        recovery_point = recovery_point.clamp(log_start, log_end);
        high_watermark = high_watermark.clamp(log_start, log_end);

        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            config,
            files: files.clone(),
            segments,
            log_start_offset: log_start,
            high_watermark,
            recovery_point,
            epochs: EpochCache::default(),
            producers: ProducerStateManager::default(),
            unflushed_batches: 0,
            // A missing checkpoint reads as no epochs (all a fresh log has).
            epochs_on_disk: Some(Vec::new()),
            last_flush_ms: now_ms,
            last_state_checkpoint_ms: now_ms,
            state_on_disk,
            snapshot_at: None,
            // The first flush of a fresh log with data makes its files' names durable.
            dir_dirty: fresh || !report.dropped_segments.is_empty(),
            deleted: false,
        };
        if fresh {
            report.segments = log.segments.len();
            return Ok((log, report));
        }

        let epochs_ok = match checkpoint::read(&dir.join(EPOCH_CHECKPOINT), 2) {
            Ok(entries) => {
                log.epochs = EpochCache::from_entries(entries.iter().map(|e| EpochEntry {
                    epoch: e[0] as i32,
                    start_offset: e[1],
                }));
                log.epochs_on_disk = Some(log.epochs.entries().to_vec());
                // The checkpoint holds every epoch below the recovery point; later ones were
                // only in memory when the broker stopped.
                log.extend_epochs_from(recovery_point)?;
                true
            }
            Err(CheckpointProblem::Missing) => log.log_end_offset() == log.log_start_offset,
            Err(CheckpointProblem::Garbage(why)) => {
                log.epochs_on_disk = None;
                report
                    .problems
                    .push(format!("ignored {why}; rebuilding epochs from batches"));
                false
            }
        };
        if !epochs_ok {
            log.rebuild_epochs()?;
        }
        log.epochs.truncate_from_end(log_end);
        log.epochs.truncate_from_start(log_start);
        report.replayed_from = log.reload_producer_state(&snapshots)?;
        report.segments = log.segments.len();
        // Everything kept was read back intact: make it durable and start clean from here.
        // What a clean shutdown left (nothing beyond the recovery point, the checkpoints as
        // they are now) is durable already, so a restart writes nothing; a cut was synced as
        // it was made.
        log.write_epoch_checkpoint()?;
        log.flush_all()?;
        log.write_state_checkpoint(now_ms)?;
        Ok((log, report))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// The offset the next batch gets.
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }

    /// Offsets below it are replicated (committed); consumers read up to it.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Offsets below it are durable.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// Offsets below `offset` were made durable by a sync of the whole filesystem (see
    /// `broker::durability`): the recovery point moves up to it. The checkpoints follow at the
    /// next flush; until then a crash recovers from the older ones, reading a little more.
    pub fn mark_synced(&mut self, offset: i64) {
        self.recovery_point = self.recovery_point.max(offset.min(self.log_end_offset()));
    }

    /// The last stable offset: READ_COMMITTED readers stop at the oldest ongoing transaction or
    /// the high watermark, and never below the log start (as Kafka: a transaction whose start
    /// was deleted cannot hold readers back).
    pub fn last_stable_offset(&self) -> i64 {
        self.producers
            .first_unstable_offset()
            .map_or(self.high_watermark, |first| first.min(self.high_watermark))
            .max(self.log_start_offset)
    }

    /// Aborted transactions a READ_COMMITTED fetch of `[start, upper)` must skip.
    pub fn aborted_transactions(&self, start: i64, upper: i64) -> Vec<AbortedTxn> {
        self.producers.aborted_between(start, upper)
    }

    /// The producer state.
    pub fn producer_state(&self) -> &ProducerStateManager {
        &self.producers
    }

    /// The epoch cache entries, oldest first.
    pub fn epoch_entries(&self) -> &[EpochEntry] {
        self.epochs.entries()
    }

    /// The newest leader epoch in the log.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    /// Kafka's OffsetForLeaderEpoch answer: see [`EpochCache::end_offset_for`].
    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_bases(&self) -> Vec<i64> {
        self.segments.keys().copied().collect()
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Sets the high watermark, clamped to the log.
    pub fn update_high_watermark(&mut self, offset: i64) {
        self.high_watermark = offset.clamp(self.log_start_offset, self.log_end_offset());
    }

    /// Records that `epoch` starts at the log end offset: what a leader does on election, and
    /// what a STOPPED mirror partition does once its epoch is bumped.
    pub fn assign_leader_epoch(&mut self, epoch: i32) {
        self.epochs.assign(epoch, self.log_end_offset());
    }

    /// The produce path: checks, assigns offsets, stamps `leader_epoch`, appends.
    pub fn append_as_leader(
        &mut self,
        records: Bytes,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let batches = frame(records.clone())?;
        if batches.iter().any(RecordBatch::is_control) {
            return Err(StorageError::ControlBatchProduced);
        }
        let idempotent = batches.iter().any(|b| b.producer_id() >= 0);
        if idempotent && batches.len() > 1 {
            return Err(StorageError::MultipleProducerBatches(batches.len()));
        }
        if let ProduceCheck::Duplicate(meta) = self.producers.check_produce(&batches[0])? {
            return Ok(AppendInfo {
                first_offset: meta.first_offset,
                last_offset: meta.last_offset,
                batches: 0,
                bytes: 0,
                duplicate: true,
            });
        }
        drop(batches);
        let mut buf = records
            .try_into_mut()
            .unwrap_or_else(|shared| bytes::BytesMut::from(&shared[..]));
        let mut next = self.log_end_offset();
        rewrite_batches(&mut buf, |b| {
            b.set_base_offset(next);
            b.set_partition_leader_epoch(leader_epoch);
            next = b.next_offset();
        })?;
        let data = buf.freeze();
        let checked = RecordBatches::new(data.clone())
            .map(|b| {
                b.map(|batch| Checked {
                    batch,
                    control: None,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.append_checked(&data, checked, Some(leader_epoch), now_ms)
    }

    /// Writes a transaction marker for `producer_id` as the leader.
    pub fn append_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        self.producers
            .check_marker(producer_id, producer_epoch, coordinator_epoch)?;
        let header = ControlBatchHeader {
            base_offset: self.log_end_offset(),
            partition_leader_epoch: leader_epoch,
            producer_id,
            producer_epoch,
            timestamp_ms: now_ms,
        };
        let record = ControlRecord::EndTxn {
            commit,
            coordinator_epoch,
        };
        self.append_control(record, &header, leader_epoch, now_ms)
    }

    /// Writes the `MIRROR_PID_RESET` barrier as the leader (the last step of STOPPING).
    pub fn append_pid_reset(
        &mut self,
        source_cluster_id: &str,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let header =
            ControlBatchHeader::without_producer(self.log_end_offset(), leader_epoch, now_ms);
        let record = ControlRecord::MirrorPidReset {
            source_cluster_id: source_cluster_id.to_string(),
        };
        self.append_control(record, &header, leader_epoch, now_ms)
    }

    fn append_control(
        &mut self,
        record: ControlRecord,
        header: &ControlBatchHeader,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let data = record.to_batch(header)?;
        let checked = vec![Checked {
            batch: RecordBatch::new(data.clone())?,
            control: Some(record),
        }];
        self.append_checked(&data, checked, Some(leader_epoch), now_ms)
    }

    /// The mirror path: appends the source's batches unchanged.
    pub fn append_mirrored(
        &mut self,
        records: Bytes,
        gaps: GapPolicy,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let batches = frame(records.clone())?;
        self.append_mirrored_batches(&records, batches, gaps, now_ms)
    }

    /// [`PartitionLog::append_mirrored`] of batches whose framing and CRC the mirror fetcher
    /// already checked (so they are not checked twice).
    pub fn append_mirrored_checked(
        &mut self,
        checked: CheckedBatches,
        gaps: GapPolicy,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let (records, batches) = checked.into_parts();
        if batches.is_empty() {
            return Err(StorageError::EmptyAppend);
        }
        self.append_mirrored_batches(&records, batches, gaps, now_ms)
    }

    /// Checks where framed batches go (at the log end, or after it where `gaps` allows;
    /// increasing offsets; epochs not lowered) and appends them.
    fn append_mirrored_batches(
        &mut self,
        records: &Bytes,
        batches: Vec<RecordBatch>,
        gaps: GapPolicy,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        // Before the offset checks: a deleted log's offsets say nothing about this append.
        self.refuse_if_deleted()?;
        let log_end_offset = self.log_end_offset();
        let mut previous_end = log_end_offset;
        let mut latest_epoch = self.epochs.latest_epoch().unwrap_or(-1);
        let mut checked = Vec::with_capacity(batches.len());
        for (i, batch) in batches.into_iter().enumerate() {
            // Stored as the source wrote it, so it must be one this broker can serve.
            batch.check_servable()?;
            let base_offset = batch.base_offset();
            if i == 0 && base_offset < log_end_offset {
                return Err(StorageError::OffsetOverlap {
                    base_offset,
                    log_end_offset,
                });
            }
            if i == 0 && base_offset > log_end_offset && gaps == GapPolicy::Contiguous {
                return Err(StorageError::OffsetGap {
                    base_offset,
                    log_end_offset,
                });
            }
            if base_offset < previous_end {
                return Err(StorageError::OffsetsNotIncreasing {
                    base_offset,
                    previous_last_offset: previous_end - 1,
                });
            }
            let epoch = batch.partition_leader_epoch();
            if epoch >= 0 && epoch < latest_epoch {
                return Err(StorageError::EpochRegression {
                    base_offset,
                    epoch,
                    latest_epoch,
                });
            }
            latest_epoch = latest_epoch.max(epoch);
            previous_end = batch.next_offset();
            let control = control_of(&batch)?;
            checked.push(Checked { batch, control });
        }
        self.append_checked(records, checked, None, now_ms)
    }

    /// Appends checked batches whose offsets are final; `data` is exactly their bytes, back to
    /// back, written with one call. `leader_epoch` is the epoch a leader append stamps; mirrored
    /// appends take each batch's own epoch.
    fn append_checked(
        &mut self,
        data: &[u8],
        checked: Vec<Checked>,
        leader_epoch: Option<i32>,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let first = checked.first().expect("frame() refuses empty appends");
        let first_offset = first.batch.base_offset();
        let last_offset = checked
            .last()
            .map_or(first_offset, |c| c.batch.last_offset());
        let total = data.len();
        self.refuse_if_deleted()?;
        self.maybe_roll(total, now_ms)?;

        let mut appended = Vec::with_capacity(checked.len());
        let mut position = 0;
        for c in &checked {
            appended.push(AppendedBatch {
                header: header_of(&c.batch),
                position,
            });
            position += c.batch.size();
        }
        debug_assert_eq!(position, total, "data holds exactly the checked batches");
        let interval = self.config.index_interval_bytes;
        self.active_mut().append(data, &appended, interval)?;

        // New epochs are made durable by the next flush, like the batches that carry them: an
        // fsynced checkpoint per epoch change cost a Stop of 10,000 mirror partitions 23 s.
        if let Some(epoch) = leader_epoch {
            self.epochs.assign(epoch, first_offset);
        }
        for c in &checked {
            if leader_epoch.is_none() {
                self.epochs
                    .assign(c.batch.partition_leader_epoch(), c.batch.base_offset());
            }
            self.producers.apply(&c.batch, c.control.as_ref());
        }
        self.unflushed_batches += checked.len() as u64;
        if self.unflushed_batches >= self.config.flush_messages
            || now_ms - self.last_flush_ms >= self.config.flush_ms
        {
            self.flush(now_ms)?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset,
            batches: checked.len(),
            bytes: total,
            duplicate: false,
        })
    }

    fn maybe_roll(&mut self, incoming: usize, now_ms: i64) -> Result<(), StorageError> {
        let active = self.active();
        let full = active.size() + incoming as u64 > self.config.segment_bytes;
        let old = now_ms - active.created_ms() >= self.config.segment_ms;
        if active.size() == 0 || !(full || old) {
            return Ok(());
        }
        let base = self.log_end_offset();
        self.write_snapshot(base)?;
        let segment = Segment::create(&self.dir, base, &self.files, now_ms)?;
        self.segments.insert(base, segment);
        self.dir_dirty = true;
        Ok(())
    }

    /// Whole batches from the batch holding `offset`: at most `max_bytes`, only batches
    /// starting below `upper_bound` (the high watermark, or the LSO for READ_COMMITTED), and at
    /// least one batch when `min_one_batch` even if it is larger than `max_bytes`. Only batch
    /// headers are read: the records are a range of the segment file, sent from the page cache
    /// (a memory map is not used because truncation under a mapped reader is undefined
    /// behaviour, SIGBUS, and because the workspace forbids `unsafe`).
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
    ) -> Result<ReadResult, StorageError> {
        let log_end_offset = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset,
                log_end_offset,
            });
        }
        let floor = self
            .segments
            .range(..=offset)
            .next_back()
            .map_or(self.log_start_offset, |(b, _)| *b);
        for segment in self.segments.range(floor..).map(|(_, s)| s) {
            let Some(position) = segment.position_of(offset)? else {
                continue;
            };
            let (end, next) = segment.extent(position, max_bytes, upper_bound, min_one_batch)?;
            return Ok(ReadResult {
                records: Records::File(segment.range(position, (end - position) as usize)?),
                next_offset: next.unwrap_or(offset),
            });
        }
        Ok(ReadResult {
            records: Records::Bytes(Bytes::new()),
            next_offset: offset,
        })
    }

    /// The base offset of the first batch whose greatest timestamp reaches `timestamp`.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>, StorageError> {
        for segment in self.segments.values() {
            if let Some(offset) = segment.offset_for_timestamp(timestamp)? {
                return Ok(Some(offset.max(self.log_start_offset)));
            }
        }
        Ok(None)
    }

    /// Calls `f` for every batch from the one holding `from` to the end, in order.
    pub fn for_each_batch(
        &self,
        from: i64,
        mut f: impl FnMut(&RecordBatch) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        self.scan(from, |batch| f(batch).map(|()| ControlFlow::Continue(())))
    }

    /// The first batch from the one holding `from` on for which `matches` holds.
    pub fn find_batch(
        &self,
        from: i64,
        mut matches: impl FnMut(&RecordBatch) -> bool,
    ) -> Result<Option<RecordBatch>, StorageError> {
        let mut found = None;
        self.scan(from, |batch| {
            if matches(batch) {
                found = Some(batch.clone());
                return Ok(ControlFlow::Break(()));
            }
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(found)
    }

    /// Visits batches from the one holding `from`, in order, until `f` breaks.
    fn scan(
        &self,
        from: i64,
        mut f: impl FnMut(&RecordBatch) -> Result<ControlFlow<()>, StorageError>,
    ) -> Result<(), StorageError> {
        for segment in self.segments.values() {
            if segment.next_offset() <= from {
                continue;
            }
            let Some(mut position) = segment.position_of(from)? else {
                continue;
            };
            while position < segment.size() {
                let len = ((segment.size() - position) as usize).min(REPLAY_CHUNK);
                let chunk = segment.read(position, len)?;
                let mut advanced = 0;
                for batch in RecordBatches::new(chunk) {
                    let batch = batch?;
                    advanced += batch.size();
                    if f(&batch)?.is_break() {
                        return Ok(());
                    }
                }
                if advanced == 0 {
                    // One batch larger than the chunk.
                    let head = segment.read(position, kmirror_protocol::batch::HEADER_SIZE)?;
                    let size = BatchHeader::parse(&head, position as usize)?.map_or(0, |h| h.size);
                    let batch = RecordBatch::new(segment.read(position, size)?)?;
                    advanced = batch.size();
                    if f(&batch)?.is_break() {
                        return Ok(());
                    }
                }
                position += advanced as u64;
            }
        }
        Ok(())
    }

    /// Drops every batch holding an offset at or after `offset`. A batch straddling `offset` is
    /// dropped whole, so afterwards the log end offset is at most `offset`; when that batch also
    /// holds the log start, the log restarts empty at `offset`.
    ///
    /// A truncation at or past the log end drops no batch, but an epoch that starts at the log
    /// end (stamped by an election after which nothing was appended) goes, as in Kafka: kept,
    /// a mirror would ask for that epoch, be told it diverged at the log end, truncate there
    /// and ask again, forever.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), StorageError> {
        self.refuse_if_deleted()?;
        if offset >= self.log_end_offset() {
            if self.epochs.truncate_from_end(self.log_end_offset()) {
                self.write_epoch_checkpoint()?;
            }
            return Ok(());
        }
        if offset < self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        let doomed: Vec<i64> = self
            .segments
            .range(offset..)
            .map(|(b, _)| *b)
            .filter(|b| *b != self.first_base())
            .collect();
        for base in doomed {
            if let Some(segment) = self.segments.remove(&base) {
                segment.delete()?;
            }
        }
        self.active_mut().truncate_to(offset)?;
        checkpoint::sync_dir(&self.dir)?;
        if self.log_end_offset() < self.log_start_offset {
            // The batch holding `offset` also held the log start: nothing visible is left.
            return self.truncate_fully_and_start_at(offset);
        }
        self.after_truncation()
    }

    /// Whether the log is one segment without a batch.
    fn holds_nothing(&self) -> bool {
        self.segments.len() == 1 && self.log_end_offset() == self.first_base()
    }

    fn first_base(&self) -> i64 {
        *self
            .segments
            .keys()
            .next()
            .expect("a log always has a segment")
    }

    fn after_truncation(&mut self) -> Result<(), StorageError> {
        let end = self.log_end_offset();
        self.high_watermark = self.high_watermark.min(end);
        self.recovery_point = self.recovery_point.min(end);
        if self.epochs.truncate_from_end(end) {
            self.write_epoch_checkpoint()?;
        }
        let snapshots = self.snapshot_offsets()?;
        self.reload_producer_state(&snapshots)?;
        self.write_state_checkpoint(self.last_flush_ms)
    }

    /// Empties the log and restarts it at `offset` (the mirror's answer to OFFSET_OUT_OF_RANGE,
    /// and a truncation below the log start).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), StorageError> {
        self.refuse_if_deleted()?;
        // Already one empty segment starting there with no epochs or producers (a new mirror
        // partition aligning with a source that starts at the same offset): nothing to undo.
        let empty_at_offset = self.holds_nothing()
            && self.first_base() == offset
            && self.log_start_offset == offset
            && self.epochs.entries().is_empty()
            && self.producers == ProducerStateManager::default();
        if empty_at_offset {
            return Ok(());
        }
        let now_ms = self.last_flush_ms;
        for (_, segment) in std::mem::take(&mut self.segments) {
            segment.delete()?;
        }
        for snapshot in self.snapshot_offsets()? {
            let path = file_path(&self.dir, snapshot, "snapshot");
            fs::remove_file(&path).map_err(io("delete", &path))?;
        }
        self.snapshot_at = None;
        self.segments.insert(
            offset,
            Segment::create(&self.dir, offset, &self.files, now_ms)?,
        );
        checkpoint::sync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.epochs.clear();
        self.producers = ProducerStateManager::default();
        self.write_epoch_checkpoint()?;
        self.write_state_checkpoint(now_ms)
    }

    /// Moves the log start up to `offset` (retention, DeleteRecords, or following the source's
    /// log start), deleting segments wholly below it. Beyond the log end it empties the log.
    pub fn advance_log_start(&mut self, offset: i64) -> Result<(), StorageError> {
        self.refuse_if_deleted()?;
        if offset <= self.log_start_offset {
            return Ok(());
        }
        if offset > self.log_end_offset() {
            return self.truncate_fully_and_start_at(offset);
        }
        self.log_start_offset = offset;
        let doomed: Vec<i64> = self
            .segments
            .iter()
            .take(self.segments.len() - 1)
            .filter(|(_, s)| s.next_offset() <= offset)
            .map(|(b, _)| *b)
            .collect();
        for base in &doomed {
            if let Some(segment) = self.segments.remove(base) {
                segment.delete()?;
            }
        }
        if !doomed.is_empty() {
            checkpoint::sync_dir(&self.dir)?;
        }
        self.high_watermark = self.high_watermark.max(offset);
        self.recovery_point = self.recovery_point.max(offset);
        if self.epochs.truncate_from_start(offset) {
            self.write_epoch_checkpoint()?;
        }
        self.producers.truncate_head(offset);
        self.write_state_checkpoint(self.last_flush_ms)
    }

    /// Deletes the oldest segments beyond `retention.bytes` or older than `retention.ms`, never
    /// the active one nor data above the high watermark. Returns how many were deleted; a
    /// deleted log has nothing left to delete.
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<usize, StorageError> {
        if self.deleted {
            return Ok(0);
        }
        let mut size = self.size_bytes() as i64;
        let mut new_start = None;
        let mut count = 0;
        let candidates: Vec<(i64, u64, i64, i64)> = self
            .segments
            .values()
            .take(self.segments.len() - 1)
            .map(|s| {
                (
                    s.base_offset(),
                    s.size(),
                    s.max_timestamp(),
                    s.next_offset(),
                )
            })
            .collect();
        for (_, bytes, max_timestamp, next_offset) in candidates {
            let by_size = self.config.retention_bytes >= 0
                && size - bytes as i64 >= self.config.retention_bytes;
            let by_time = self.config.retention_ms >= 0
                && max_timestamp >= 0
                && now_ms - max_timestamp > self.config.retention_ms;
            if !(by_size || by_time) || next_offset > self.high_watermark {
                break;
            }
            size -= bytes as i64;
            new_start = Some(next_offset);
            count += 1;
        }
        if let Some(offset) = new_start {
            self.advance_log_start(offset)?;
        }
        Ok(count)
    }

    /// Replaces the settings (a topic config change); they apply from the next append, roll,
    /// retention pass or flush on.
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Flushes when `flush.ms` has passed since the last flush and something is unflushed (the
    /// time-based half of the flush policy; appends apply both halves). A deleted log has no
    /// files to flush.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<(), StorageError> {
        if !self.deleted
            && self.unflushed_batches > 0
            && now_ms - self.last_flush_ms >= self.config.flush_ms
        {
            self.flush(now_ms)?;
        }
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), StorageError> {
        self.flush_all()?;
        self.last_flush_ms = now_ms;
        if now_ms - self.last_state_checkpoint_ms >= STATE_CHECKPOINT_INTERVAL_MS {
            self.write_state_checkpoint(now_ms)?;
        }
        Ok(())
    }

    fn flush_all(&mut self) -> Result<(), StorageError> {
        // Nothing appended since the last flush: the segments are durable. A log that holds
        // nothing loses nothing in a crash either (its files are made again, its leader epoch
        // assigned again when it opens).
        let flushed = self.recovery_point == self.log_end_offset()
            && !self.epochs_unsynced()
            && !self.dir_dirty;
        if self.holds_nothing() || flushed {
            self.unflushed_batches = 0;
            return Ok(());
        }
        let from = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(self.first_base(), |(b, _)| *b);
        for segment in self.segments.range_mut(from..).map(|(_, s)| s) {
            segment.flush()?;
        }
        if self.dir_dirty {
            checkpoint::sync_dir(&self.dir)?;
            self.dir_dirty = false;
        }
        self.write_epoch_checkpoint()?;
        self.recovery_point = self.log_end_offset();
        self.unflushed_batches = 0;
        Ok(())
    }

    /// Flushes, checkpoints and snapshots producer state, so the next open replays nothing.
    /// What is on disk already is not written again (an idle partition closes without an
    /// fsync), and an empty log needs no snapshot.
    pub fn close(mut self, now_ms: i64) -> Result<(), StorageError> {
        let end = self.log_end_offset();
        let nothing_to_replay =
            end == self.log_start_offset && self.producers == ProducerStateManager::default();
        if self.snapshot_at != Some(end) && !nothing_to_replay {
            self.write_snapshot(end)?;
        }
        // After the snapshot: its name is made durable with the segments.
        self.flush_all()?;
        self.write_state_checkpoint(now_ms)
    }

    /// Whether the epoch cache differs from its checkpoint.
    fn epochs_unsynced(&self) -> bool {
        self.epochs_on_disk.as_deref() != Some(self.epochs.entries())
    }

    /// Writes the epoch checkpoint, unless it holds the cache already.
    fn write_epoch_checkpoint(&mut self) -> Result<(), StorageError> {
        if !self.epochs_unsynced() {
            return Ok(());
        }
        let entries: Vec<Vec<i64>> = self
            .epochs
            .entries()
            .iter()
            .map(|e| vec![i64::from(e.epoch), e.start_offset])
            .collect();
        checkpoint::write(&self.dir.join(EPOCH_CHECKPOINT), &entries)?;
        self.epochs_on_disk = Some(self.epochs.entries().to_vec());
        Ok(())
    }

    fn write_state_checkpoint(&mut self, now_ms: i64) -> Result<(), StorageError> {
        self.last_state_checkpoint_ms = now_ms;
        let state = [
            self.log_start_offset,
            self.recovery_point,
            self.high_watermark,
        ];
        if self.state_on_disk == Some(state) {
            return Ok(());
        }
        checkpoint::write(&self.dir.join(STATE_CHECKPOINT), &[state.to_vec()])?;
        self.state_on_disk = Some(state);
        Ok(())
    }

    /// Removes the log's directory with everything in it; the log then refuses appends and
    /// truncations, so a request still holding it gets a clear answer.
    pub fn delete(&mut self) -> Result<(), StorageError> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &self.dir)(e)),
            _ => {
                self.deleted = true;
                Ok(())
            }
        }
    }

    /// Refuses once the log was deleted, before anything changes.
    fn refuse_if_deleted(&self) -> Result<(), StorageError> {
        if self.deleted {
            return Err(StorageError::LogDeleted {
                dir: self.dir.clone(),
            });
        }
        Ok(())
    }

    fn snapshot_offsets(&self) -> Result<Vec<i64>, StorageError> {
        let mut offsets = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io("list", &self.dir))? {
            let entry = entry.map_err(io("list", &self.dir))?;
            if let Some(offset) =
                parse_base_offset(&entry.file_name().to_string_lossy(), "snapshot")
            {
                offsets.push(offset);
            }
        }
        offsets.sort_unstable();
        Ok(offsets)
    }

    /// Writes the producer state valid at `offset` (the log end) and deletes older snapshots.
    fn write_snapshot(&mut self, offset: i64) -> Result<(), StorageError> {
        let path = file_path(&self.dir, offset, "snapshot");
        let tmp = path.with_extension("tmp");
        let bytes = self.producers.encode_snapshot(offset);
        fs::write(&tmp, &bytes).map_err(io("write", &tmp))?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io("fsync", &tmp))?;
        fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
        for old in self.snapshot_offsets()? {
            if old != offset {
                let old_path = file_path(&self.dir, old, "snapshot");
                fs::remove_file(&old_path).map_err(io("delete", &old_path))?;
            }
        }
        self.snapshot_at = Some(offset);
        self.dir_dirty = true;
        Ok(())
    }

    /// Rebuilds producer state at the log end: the newest intact snapshot not beyond it, replayed
    /// forward; snapshots beyond the end are deleted. Returns the replay start.
    fn reload_producer_state(&mut self, snapshots: &[i64]) -> Result<i64, StorageError> {
        let end = self.log_end_offset();
        let mut state = None;
        for &offset in snapshots.iter().rev() {
            let path = file_path(&self.dir, offset, "snapshot");
            let usable = offset <= end && offset >= self.log_start_offset && state.is_none();
            if usable {
                let bytes = fs::read(&path).map_err(io("read", &path))?;
                state = ProducerStateManager::decode_snapshot(Bytes::from(bytes))
                    .filter(|(_, at)| *at == offset);
            }
            if !usable || state.is_none() {
                fs::remove_file(&path).map_err(io("delete", &path))?;
            }
        }
        self.snapshot_at = state.as_ref().map(|(_, at)| *at);
        let (mut producers, from) =
            state.unwrap_or_else(|| (ProducerStateManager::default(), self.log_start_offset));
        // Snapshots sit at batch boundaries; the log start may not, and the batch holding it
        // counts (its transaction is visible).
        self.for_each_batch(from, |batch| {
            producers.apply(batch, control_of(batch)?.as_ref());
            Ok(())
        })?;
        self.producers = producers;
        self.producers.truncate_head(self.log_start_offset);
        Ok(from)
    }

    /// Adds the epochs of the batches from `offset` on to the cache.
    fn extend_epochs_from(&mut self, offset: i64) -> Result<(), StorageError> {
        let mut epochs = std::mem::take(&mut self.epochs);
        let scanned = self.for_each_batch(offset, |batch| {
            if batch.partition_leader_epoch() > epochs.latest_epoch().unwrap_or(-1) {
                epochs.assign(batch.partition_leader_epoch(), batch.base_offset());
            }
            Ok(())
        });
        self.epochs = epochs;
        scanned
    }

    fn rebuild_epochs(&mut self) -> Result<(), StorageError> {
        self.epochs = EpochCache::default();
        self.extend_epochs_from(self.log_start_offset)
    }
}

#[cfg(test)]
mod tests;
