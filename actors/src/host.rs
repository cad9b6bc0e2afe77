//! The ports: what the engine needs from the broker that embeds it, as traits, plus the few
//! procedures every host runs the same way on top of them.
//!
//! A broker implements [`MirrorLog`] over its partition log, [`SourceCluster`] over its client of
//! the source cluster, [`Controller`] over its metadata controller and [`CoordinatorLog`] over the
//! `__mirror_state` topic. `memory` (feature `test-util`) implements all of them in memory for
//! simulations and actor tests: a log of real record batches with epochs and producer state, a
//! source with scripted leader changes, unclean truncations and errors, a controller, a
//! coordinator log.

use crate::epoch::{self, Alignment, EpochStart};
use bytes::Bytes;
use kmirror_protocol::batch::CheckedBatches;
use kmirror_protocol::records::CoordinatorRecord;
use thiserror::Error;

/// A failed host operation, classified once.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct HostError {
    /// Whether retrying can help.
    pub retryable: bool,
    /// What happened.
    pub message: String,
}

impl HostError {
    /// A transient failure.
    pub fn retryable(message: impl Into<String>) -> HostError {
        HostError {
            retryable: true,
            message: message.into(),
        }
    }

    /// A failure retrying cannot fix.
    pub fn fatal(message: impl Into<String>) -> HostError {
        HostError {
            retryable: false,
            message: message.into(),
        }
    }
}

/// The destination partition's log.
pub trait MirrorLog {
    /// The first offset in the log.
    fn log_start_offset(&self) -> i64;
    /// The offset the next batch gets.
    fn log_end_offset(&self) -> i64;
    /// The last stable offset.
    fn last_stable_offset(&self) -> i64;
    /// The leader-epoch history, oldest first.
    fn epoch_history(&self) -> Vec<EpochStart>;
    /// The newest epoch among the batches that came from the source: every batch except the
    /// MIRROR_PID_RESET barriers this cluster wrote itself (a STOPPING interrupted after its
    /// barrier runs again, and its LME must not be the barrier's destination epoch). -1 if none.
    fn latest_mirrored_epoch(&self) -> i32;
    /// Drops every batch holding an offset at or after `offset`.
    fn truncate_to(&mut self, offset: i64) -> Result<(), HostError>;
    /// Empties the log and restarts it at `offset`.
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), HostError>;
    /// Appends the source's whole batches unchanged ([`apply_fetch`] checked their framing and
    /// CRC; the log checks where they go: at its end, epochs not lowered).
    fn append_mirrored(&mut self, batches: CheckedBatches) -> Result<(), HostError>;
    /// Appends the MIRROR_PID_RESET barrier stamped with `leader_epoch`.
    fn append_pid_reset(
        &mut self,
        leader_epoch: i32,
        source_cluster_id: &str,
    ) -> Result<(), HostError>;
}

/// Where a mirror fetcher reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    /// The destination's log end offset.
    pub offset: i64,
    /// The epoch of the destination's last batch, -1 if none.
    pub last_fetched_epoch: i32,
    /// Most bytes to return (whole batches; at least one).
    pub max_bytes: usize,
}

/// A source partition's answer to a consumer fetch (READ_COMMITTED).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchResponse {
    /// Whole batches from the fetch offset, all below the source's LSO.
    Records {
        /// The batches.
        records: Bytes,
        /// The source's high watermark.
        high_watermark: i64,
        /// The source leader epoch (SLE) the fetch was answered under, -1 when not known.
        source_leader_epoch: i32,
    },
    /// The destination's history diverged: the source's `epoch` ends at `end_offset`.
    Diverging { epoch: i32, end_offset: i64 },
    /// The fetch offset is outside the source log.
    OffsetOutOfRange { log_start_offset: i64 },
}

/// The source cluster, as the destination's client sees it.
pub trait SourceCluster {
    /// The source's cluster id.
    fn cluster_id(&self) -> String;
    /// LastMirroredEpochs: the LME the source recorded for this partition when it stopped
    /// mirroring from `asking_cluster_id`, or -1.
    fn last_mirrored_epoch(&self, asking_cluster_id: &str) -> Result<i32, HostError>;
    /// The source partition's log start offset.
    fn log_start_offset(&self) -> Result<i64, HostError>;
    /// A consumer fetch with `LastFetchedEpoch`.
    fn fetch(&self, request: &FetchRequest) -> Result<FetchResponse, HostError>;
}

/// The destination cluster's controller.
pub trait Controller {
    /// BumpLeaderEpochs for one partition: returns the partition's leader epoch afterwards.
    fn bump_leader_epoch(&mut self, min_leader_epoch: i32) -> Result<i32, HostError>;
}

/// The `__mirror_state` partition of one shard.
pub trait CoordinatorLog {
    /// Appends records durably; they are replayed into the shard only after this succeeds.
    fn append(&mut self, records: &[CoordinatorRecord]) -> Result<(), HostError>;
}

/// PREPARING's truncation for an LME (DECISIONS.md 3).
pub fn align_for_lme(
    log: &mut impl MirrorLog,
    source: &impl SourceCluster,
    lme: i32,
) -> Result<(), HostError> {
    match epoch::alignment_for_lme(lme, &log.epoch_history(), log.log_end_offset()) {
        Alignment::TruncateFully => log.truncate_fully_and_start_at(source.log_start_offset()?),
        Alignment::TruncateTo(offset) => log.truncate_to(offset),
        Alignment::KeepAll => Ok(()),
    }
}

/// What one fetch round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchProgress {
    /// Batches were appended; the source epoch: the greatest of theirs and the SLE.
    Appended { source_epoch: i32 },
    /// Nothing new below the source's LSO.
    Idle,
    /// Nothing appended, and the source epoch (the SLE, or the epoch of a next batch that is
    /// above the destination leader epoch and waits for a leader-epoch bump) has come within
    /// the bump threshold of the destination leader epoch (DLE >= SLE).
    HeldBack { source_epoch: i32 },
    /// The local log was truncated to where it agrees with the source.
    Truncated,
}

/// The fetch a mirror fetcher sends for one partition (DECISIONS.md 4): at the log end, with the
/// epoch of the last local batch.
pub fn next_fetch(log: &impl MirrorLog, max_bytes: usize) -> FetchRequest {
    FetchRequest {
        offset: log.log_end_offset(),
        last_fetched_epoch: log.epoch_history().last().map_or(-1, |(e, _)| *e),
        max_bytes,
    }
}

/// Applies the source's answer to `request`: truncate on divergence or out-of-range, append the
/// batches whose epoch does not exceed the destination leader epoch (whole, unchanged, CRC
/// checked).
pub fn apply_fetch(
    log: &mut impl MirrorLog,
    source_log_start: impl FnOnce() -> Result<i64, HostError>,
    request: &FetchRequest,
    response: FetchResponse,
    destination_leader_epoch: i32,
) -> Result<FetchProgress, HostError> {
    // An answer to a fetch from another log end is stale: the log was truncated or appended to
    // while it was in flight (a stop, a PREPARING truncation, another fetcher for a moment
    // after a leader move). Applied, it would truncate what is no longer there or, the log
    // allowing gaps, leave a silent hole. The next fetch asks from the log end again.
    if request.offset != log.log_end_offset() {
        return Ok(FetchProgress::Idle);
    }
    match response {
        FetchResponse::Diverging { epoch, .. } if epoch < 0 => {
            log.truncate_fully_and_start_at(source_log_start()?)?;
            Ok(FetchProgress::Truncated)
        }
        FetchResponse::Diverging { epoch, end_offset } => {
            let at =
                epoch::divergence_offset(epoch, end_offset, &log.epoch_history(), request.offset);
            log.truncate_to(at)?;
            Ok(FetchProgress::Truncated)
        }
        FetchResponse::OffsetOutOfRange { log_start_offset } => {
            log.truncate_fully_and_start_at(log_start_offset)?;
            Ok(FetchProgress::Truncated)
        }
        FetchResponse::Records {
            records,
            source_leader_epoch,
            ..
        } => {
            let mut checked = CheckedBatches::check(records)
                .map_err(|e| HostError::fatal(format!("corrupt batch from the source: {e}")))?;
            let mut keep = 0;
            let mut max_epoch = -1;
            for batch in checked.batches() {
                let epoch = batch.partition_leader_epoch();
                if epoch > destination_leader_epoch {
                    if keep == 0 {
                        return Ok(FetchProgress::HeldBack {
                            source_epoch: epoch.max(source_leader_epoch),
                        });
                    }
                    break;
                }
                max_epoch = max_epoch.max(epoch);
                keep += 1;
            }
            if keep == 0 {
                return Ok(
                    match epoch::bump_for(source_leader_epoch, destination_leader_epoch) {
                        Some(_) if source_leader_epoch >= 0 => FetchProgress::HeldBack {
                            source_epoch: source_leader_epoch,
                        },
                        _ => FetchProgress::Idle,
                    },
                );
            }
            checked.truncate(keep);
            log.append_mirrored(checked)?;
            Ok(FetchProgress::Appended {
                source_epoch: max_epoch.max(source_leader_epoch),
            })
        }
    }
}

/// One fetch round of a mirror fetcher for one partition: [`next_fetch`], the source's answer,
/// [`apply_fetch`].
pub fn fetch_round(
    log: &mut impl MirrorLog,
    source: &impl SourceCluster,
    destination_leader_epoch: i32,
    max_bytes: usize,
) -> Result<FetchProgress, HostError> {
    let request = next_fetch(log, max_bytes);
    let response = source.fetch(&request)?;
    apply_fetch(
        log,
        || source.log_start_offset(),
        &request,
        response,
        destination_leader_epoch,
    )
}

/// STOPPING's truncate-to-LSO branch: returns the newest mirrored epoch left in the log (the
/// LME).
pub fn truncate_to_lso(log: &mut impl MirrorLog) -> Result<i32, HostError> {
    log.truncate_to(log.last_stable_offset())?;
    Ok(log.latest_mirrored_epoch())
}

#[cfg(feature = "test-util")]
pub mod memory;
