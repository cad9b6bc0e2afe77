//! The engine's own procedures over a leased log ([`super::Host::with_log`]): where a fetch
//! starts, applying a fetch answer, cutting to the last stable offset, the MIRROR_PID_RESET
//! barriers a failover writes and what they say (the records written here since, whether a
//! partition opens read-only). The broker's adapter, the in-memory host and the simulation run
//! the same code.

use super::MirrorLog;
use super::types::{FetchProgress, FetchRequest, FetchResponse};
use crate::engine::gap_policy::{GAP_POLICY, GapPolicy};
use crate::epoch;
use crate::invariant::{BatchBounds, check_append};
use crate::partition::Cause;
use kmirror_protocol::batch::{CheckedBatches, RecordBatch};
use kmirror_protocol::records::ControlRecord;

/// The fetch a mirror fetcher sends for one partition (docs/design.md §4): at the log end, with
/// the epoch of the last local batch.
pub fn next_fetch(log: &dyn MirrorLog, max_bytes: usize) -> FetchRequest {
    FetchRequest {
        offset: log.log_end_offset(),
        last_fetched_epoch: log.epoch_history().last().map(|(e, _)| *e),
        max_bytes,
    }
}

/// Applies the source's answer to `request`: truncate on divergence or out-of-range, append the
/// batches whose epoch does not exceed the destination leader epoch (whole, unchanged, CRC
/// checked). `source_log_start` is the source's log start, where asked for (a divergence with
/// no common epoch restarts the log there). Out of range past the log end (the source deleted
/// offsets not yet mirrored), `gaps` decides: restart there, counting them, or fail changing
/// nothing.
pub fn apply_fetch(
    log: &mut dyn MirrorLog,
    source_log_start: Option<i64>,
    request: &FetchRequest,
    response: FetchResponse,
    destination_leader_epoch: i32,
    gaps: GapPolicy,
) -> Result<FetchProgress, Cause> {
    // An answer to a fetch from another log end is stale: the log was truncated or appended to
    // while it was in flight (a stop, a PREPARING truncation, another fetcher for a moment
    // after a leader move). Applied, it would truncate what is no longer there or, the log
    // allowing gaps, leave a silent hole. The next fetch asks from the log end again.
    if request.offset != log.log_end_offset() {
        return Ok(FetchProgress::Idle);
    }
    let source_start =
        || source_log_start.ok_or_else(|| Cause::retryable("the source's log start is not known"));
    match response {
        FetchResponse::Diverging { epoch, .. } if epoch < 0 => {
            let start = source_start()?;
            let records = records_from(log, log.log_start_offset())?;
            log.truncate_fully_and_start_at(start)?;
            Ok(FetchProgress::Truncated {
                records,
                skipped: None,
            })
        }
        FetchResponse::Diverging { epoch, end_offset } => {
            let at =
                epoch::divergence_offset(epoch, end_offset, &log.epoch_history(), request.offset);
            let records = records_from(log, at)?;
            log.truncate_to(at)?;
            Ok(FetchProgress::Truncated {
                records,
                skipped: None,
            })
        }
        FetchResponse::OffsetOutOfRange { log_start_offset } => {
            let end = log.log_end_offset();
            let skipped = (log_start_offset > end).then_some((end, log_start_offset));
            if let (Some((from, to)), GapPolicy::Fail) = (skipped, gaps) {
                return Err(Cause::fatal(format!(
                    "the source deleted offsets {from} to {} before they were mirrored (its \
                     log start is {to}: retention or DeleteRecords); {GAP_POLICY}=fail keeps \
                     the partition as it is",
                    to - 1
                )));
            }
            let records = records_from(log, log.log_start_offset())?;
            log.truncate_fully_and_start_at(log_start_offset)?;
            Ok(FetchProgress::Truncated { records, skipped })
        }
        FetchResponse::Records {
            records,
            source_leader_epoch,
            ..
        } => {
            let mut checked = CheckedBatches::check(records)
                .map_err(|e| Cause::fatal(format!("corrupt batch from the source: {e}")))?;
            // The source epoch a batch reports: the greater of its own and the SLE.
            let with_sle = |epoch: i32| source_leader_epoch.map_or(epoch, |sle| epoch.max(sle));
            let mut keep = 0;
            let mut max_epoch = None;
            for batch in checked.batches() {
                let epoch = batch.partition_leader_epoch();
                if epoch > destination_leader_epoch {
                    if keep == 0 {
                        return Ok(FetchProgress::HeldBack {
                            source_epoch: with_sle(epoch),
                        });
                    }
                    break;
                }
                max_epoch = max_epoch.max(Some(epoch));
                keep += 1;
            }
            let Some(max_epoch) = max_epoch else {
                let close = source_leader_epoch
                    .filter(|sle| epoch::bump_for(*sle, destination_leader_epoch).is_some());
                return Ok(match close {
                    Some(sle) => FetchProgress::HeldBack { source_epoch: sle },
                    None => FetchProgress::Idle,
                });
            };
            checked.truncate(keep);
            // A source log start inside a batch (DeleteRecords moved it there) answers a fetch
            // from that start with the whole batch, beginning below it. An empty log restarts
            // at the batch's base offset, as Kafka's followers do; the records below the source's
            // log start stay readable here until retention removes them.
            let first_base = checked.batches().first().map(|b| b.base_offset());
            if let Some(base) = first_base.filter(|base| *base < request.offset)
                && log.log_end_offset() == log.log_start_offset()
            {
                log.truncate_fully_and_start_at(base)?;
            }
            let latest_epoch = log.epoch_history().last().map_or(-1, |(epoch, _)| *epoch);
            let bounds = checked.batches().iter().map(|b| BatchBounds {
                base_offset: b.base_offset(),
                next_offset: b.next_offset(),
                leader_epoch: b.partition_leader_epoch(),
            });
            check_append(log.log_end_offset(), latest_epoch, bounds)
                .map_err(|(invariant, why)| Cause::broken(invariant, why))?;
            log.append_mirrored(checked)?;
            Ok(FetchProgress::Appended {
                source_epoch: with_sle(max_epoch),
            })
        }
    }
}

/// Whether `batch` is a MIRROR_PID_RESET barrier (written by this cluster when it stopped).
pub fn is_barrier(batch: &RecordBatch) -> bool {
    batch.is_control()
        && matches!(
            ControlRecord::parse(batch),
            Ok(ControlRecord::MirrorPidReset { .. })
        )
}

/// The newest epoch among the batches that came from the source: every batch except the
/// MIRROR_PID_RESET barriers this cluster wrote itself (a STOPPING interrupted after its barrier
/// runs again, and its LME must not be the barrier's destination epoch); `None` if none. A batch
/// that cannot be read counts its epoch as mirrored: the conservative answer for an LME.
pub fn latest_mirrored_epoch(log: &dyn MirrorLog) -> Option<i32> {
    latest_mirrored_epoch_below(log, log.log_end_offset())
}

/// [`latest_mirrored_epoch`] of the batches below `limit`.
fn latest_mirrored_epoch_below(log: &dyn MirrorLog, limit: i64) -> Option<i32> {
    let history = log.epoch_history();
    for (i, (epoch, start)) in history.iter().enumerate().rev() {
        if *start >= limit {
            continue;
        }
        let end = history
            .get(i + 1)
            .map_or(limit, |(_, next)| *next)
            .min(limit);
        let found = log.find_batch(*start, &mut |b| b.base_offset() >= end || !is_barrier(b));
        match found {
            Ok(Some(batch)) if batch.base_offset() < end => return Some(*epoch),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e.message, "reading the log for its last mirrored epoch");
                return Some(*epoch);
            }
        }
    }
    None
}

/// The data records in the batches holding an offset at or after `offset`: what
/// `truncate_to(offset)` removes of what producers wrote (records, not offsets: a compacted
/// source leaves gaps inside batches; control records, such as transaction markers and the
/// stop's barrier, are not counted). A batch holding the log start (DeleteRecords moved it
/// inside) counts only its records from the log start on, the ones readable here.
pub fn records_from(log: &dyn MirrorLog, offset: i64) -> Result<u64, Cause> {
    if offset >= log.log_end_offset() {
        return Ok(0);
    }
    let start = log.log_start_offset();
    let from = offset.max(start);
    let mut records = 0u64;
    log.find_batch(from, &mut |batch| {
        if batch.last_offset() >= from && !batch.is_control() {
            let count = u64::try_from(batch.records_count()).unwrap_or(0);
            let unreadable = u64::try_from(start - batch.base_offset()).unwrap_or(0);
            records += count.saturating_sub(unreadable);
        }
        false
    })?;
    Ok(records)
}

/// How far back in source time, from a stop's cut, the start of a transaction still open there
/// is looked for: twice Kafka's default `transaction.max.timeout.ms` (15 minutes), after which
/// the source's coordinator aborts it.
pub const OPEN_TRANSACTION_WINDOW_MS: i64 = 30 * 60 * 1000;

/// Where a stop cuts a partition's log, and what the cut removes (docs/failover.md, "What a stop
/// cuts"). The dry run reports it; STOPPING cuts exactly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StopCut {
    /// The new log end.
    pub offset: i64,
    /// The data records in the batches removed ([`records_from`]).
    pub records: u64,
    /// The transactions whose records the cut removes unfinished: their producers' data
    /// batches from the cut on, counted by producer id.
    pub open_transactions: u64,
}

/// Where a stop cuts: at the last stable offset, or for a consistent cut at `cut_timestamp_ms`
/// at the first batch whose greatest timestamp is newer if that comes first; then, while a
/// transaction is open at the cut (its data below, its marker above), at that transaction's
/// first offset, so no transaction is left without its end: the barrier would make its data
/// readable as committed whatever the source decided.
pub fn stop_cut(log: &dyn MirrorLog, cut_timestamp_ms: Option<i64>) -> Result<StopCut, Cause> {
    let end = log.log_end_offset();
    let mut at = log.last_stable_offset().min(end);
    if let Some(t) = cut_timestamp_ms
        && let Some(newer) = log.offset_for_timestamp(t.saturating_add(1))?
    {
        at = at.min(newer);
    }
    // Only a marker in the tail can end a transaction open at the cut (one still open at the
    // log end starts at or after the LSO): without one, nothing below the cut is scanned.
    let mut tail_markers = false;
    log.find_batch(at, &mut |batch| {
        tail_markers |= batch.base_offset() >= at && batch.is_control() && !is_barrier(batch);
        tail_markers
    })?;
    if tail_markers {
        let mut newest_ms = -1;
        log.find_batch(
            at.saturating_sub(1).max(log.log_start_offset()),
            &mut |batch| {
                newest_ms = batch.max_timestamp();
                true
            },
        )?;
        let from = log
            .offset_for_timestamp(newest_ms.saturating_sub(OPEN_TRANSACTION_WINDOW_MS))?
            .unwrap_or(at)
            .max(log.log_start_offset());
        while let Some(first) = open_transaction_start(log, from, at)? {
            at = first;
        }
    }
    // A batch holding the log start begins below it: the cut is named where the log begins.
    at = at.max(log.log_start_offset());
    let mut producers = std::collections::BTreeSet::new();
    if at < end {
        log.find_batch(at, &mut |batch| {
            if batch.last_offset() >= at && !batch.is_control() && batch.is_transactional() {
                producers.insert(batch.producer_id());
            }
            false
        })?;
    }
    Ok(StopCut {
        offset: at,
        records: records_from(log, at)?,
        open_transactions: producers.len() as u64,
    })
}

/// The first offset of the oldest transaction open at `at` among those begun at or after
/// `from` (its data below `at`, no marker below `at`), if it is below `at`.
fn open_transaction_start(log: &dyn MirrorLog, from: i64, at: i64) -> Result<Option<i64>, Cause> {
    let mut open: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
    log.find_batch(from, &mut |batch| {
        if batch.base_offset() >= at {
            return true;
        }
        if batch.is_control() {
            if is_barrier(batch) {
                open.clear();
            } else {
                open.remove(&batch.producer_id());
            }
        } else if batch.is_transactional() {
            open.entry(batch.producer_id())
                .or_insert(batch.base_offset());
        }
        false
    })?;
    Ok(open.values().copied().min().filter(|first| *first < at))
}

/// STOPPING's truncation: cuts the log where [`stop_cut`] says (at the last stable offset, or
/// the consistent cut's point in time, `cut_timestamp_ms`) and returns the newest mirrored
/// epoch left in the log (the LME; `None`: nothing mirrored is left) and the records removed. A
/// log whose newest barrier is this cluster's own ([`own_failover_barrier`]: a STOPPING run
/// again after its barrier, the partition writable since) is not cut: everything after the
/// barrier was written by this cluster's producers, and the LME is the one from before it.
pub fn truncate_to_lso(
    log: &mut dyn MirrorLog,
    cluster_id: &str,
    cut_timestamp_ms: Option<i64>,
) -> Result<(Option<i32>, u64), Cause> {
    if let Some(barrier) = own_failover_barrier(log, cluster_id)? {
        return Ok((latest_mirrored_epoch_below(log, barrier), 0));
    }
    let cut = stop_cut(log, cut_timestamp_ms)?;
    log.truncate_to(cut.offset)?;
    Ok((latest_mirrored_epoch(log), cut.records))
}

/// The offset of the log's newest MIRROR_PID_RESET barrier if this cluster wrote it when its
/// mirror failed over: one that fences another cluster's producer ids than `cluster_id`'s (a
/// barrier mirrored back in a failback fences this cluster's own, and is followed by the other
/// cluster's batches). Everything after such a barrier was written here as leader: its failover's
/// steps that change the log (the LSO cut, the barrier) are done, and STOPPING run again skips
/// them, while the partition takes writes (docs/failover.md "A stopped topic stays writable").
pub fn own_failover_barrier(log: &dyn MirrorLog, cluster_id: &str) -> Result<Option<i64>, Cause> {
    let start = log.log_start_offset();
    let end = log.log_end_offset();
    for (_, epoch_start) in log.epoch_history().into_iter().rev() {
        let from = epoch_start.max(start);
        if from >= end {
            continue;
        }
        let Some(batch) = log.find_batch(from, &mut |_| true)? else {
            continue;
        };
        if !batch.is_control() {
            continue;
        }
        if let Ok(ControlRecord::MirrorPidReset { source_cluster_id }) =
            ControlRecord::parse(&batch)
        {
            return Ok((source_cluster_id != cluster_id).then(|| batch.base_offset()));
        }
    }
    Ok(None)
}

/// The offset of the first MIRROR_PID_RESET barrier in the log (`None`: it never failed over
/// here, or the barrier was truncated away). Everything from it on was written by this
/// cluster's producers: the barrier opens the epoch the stop bumped to, above every mirrored
/// one, and PREPARING cuts below it before anything is mirrored again. A barrier is the first
/// batch of its epoch, so only the first batch of each epoch is read.
pub fn first_barrier(log: &dyn MirrorLog) -> Result<Option<i64>, Cause> {
    let start = log.log_start_offset();
    let end = log.log_end_offset();
    for (_, epoch_start) in log.epoch_history() {
        let from = epoch_start.max(start);
        if from >= end {
            break;
        }
        if let Some(batch) = log.find_batch(from, &mut |_| true)?
            && is_barrier(&batch)
        {
            return Ok(Some(batch.base_offset()));
        }
    }
    Ok(None)
}

/// The records this cluster's producers wrote to a stopped partition since its failover (those
/// from its first barrier on), which restarting the mirror discards; control records (the
/// barrier, transaction markers) are not counted.
pub fn local_records(log: &dyn MirrorLog) -> Result<u64, Cause> {
    match first_barrier(log)? {
        Some(barrier) => records_from(log, barrier),
        None => Ok(0),
    }
}

/// The records this cluster's producers wrote that cutting the log at `cut` removes (0 when the
/// log never failed over here: a mirror's own history is the source's, fetched again).
pub fn local_records_from(log: &dyn MirrorLog, cut: i64) -> Result<u64, Cause> {
    match first_barrier(log)? {
        Some(barrier) => records_from(log, barrier.max(cut)),
        None => Ok(0),
    }
}

/// Whether a partition of a topic whose `mirror.name` is `mirror_name` opens read-only when a
/// broker of cluster `cluster_id` (re)opens it (docs/failover.md "A stopped topic stays
/// writable"): a mirror topic is, except one its mirror stopped whose newest barrier is this
/// cluster's own ([`own_failover_barrier`]). The barrier is durable after the failover's last
/// change to the log, so it proves the failover's data is final here: the topic stays writable
/// while its record is read, from a shard that may be on a broker that is away.
pub fn opens_read_only(
    mirror_name: Option<&str>,
    log: &dyn MirrorLog,
    cluster_id: &str,
) -> Result<bool, Cause> {
    match mirror_name.filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some(value) => match crate::metadata::mirror_of(value) {
            Some((_, crate::partition::Desired::Stopped)) => {
                Ok(own_failover_barrier(log, cluster_id)?.is_none())
            }
            _ => Ok(true),
        },
    }
}

/// How a change of a topic's `mirror.name` from `old` to `new` sets its partitions' read-only
/// flag at once, before the engine acts (docs/failover.md): `Some(true)` when the topic is to
/// be mirrored or paused and was not (a restart of a stopped topic: produce is refused from the
/// moment `mirror.name` names the mirror again, not from when PREPARING is durable),
/// `Some(false)` when it leaves mirroring altogether, `None` when the engine decides (a stop
/// makes the topic writable once STOPPED).
pub fn read_only_on_change(old: Option<&str>, new: Option<&str>) -> Option<bool> {
    // None: not a mirror topic; Some(true): mirrored or paused; Some(false): stopped.
    let mirrored = |v: Option<&str>| {
        v.filter(|v| !v.is_empty()).map(|v| {
            !matches!(
                crate::metadata::mirror_of(v),
                Some((_, crate::partition::Desired::Stopped))
            )
        })
    };
    match (mirrored(old), mirrored(new)) {
        (Some(_), None) => Some(false),
        (None | Some(false), Some(true)) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
