//! A follower's decision on one partition of its leader's Fetch answer (docs/replication.md
//! §5), pure: the replica fetcher reads the local log's facts, asks [`decide`], and carries out
//! the [`Action`].
//!
//! Contract: a follower never keeps bytes its leader does not have at the same offsets and
//! epochs. A DivergingEpoch answer cuts the log where the two histories part (where the
//! leader's epoch ends, or the follower's end of it if smaller; the next fetch asks again when
//! that was not yet the common point); OFFSET_OUT_OF_RANGE below the leader's log start starts
//! the log over there, above it (a follower with more than the leader and no epoch to compare)
//! cuts it to the leader's high watermark. Records are appended as they are; the follower's
//! high watermark is the leader's, capped at its own log end.

use bytes::Bytes;
use kmirror_protocol::errors::ErrorCode;

/// What the follower's log holds, as a decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    /// Its log start offset.
    pub log_start: i64,
    /// Its log end offset (the offset it fetched from).
    pub log_end: i64,
}

/// One partition of the leader's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The error code.
    pub error: ErrorCode,
    /// The leader's high watermark.
    pub high_watermark: i64,
    /// The leader's log start offset.
    pub log_start: i64,
    /// Where the histories part: the leader's epoch and where it ends.
    pub diverging_epoch: Option<(i32, i64)>,
    /// The record batches.
    pub records: Bytes,
}

/// What the follower does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Append `records` (possibly none) as they are, then take `high_watermark` (capped at the
    /// log end) and move the log start up to `log_start` if it is above the local one.
    Append {
        records: Bytes,
        high_watermark: i64,
        log_start: i64,
    },
    /// Cut the log to end at this offset (where the epoch lookup of `epoch` says the local
    /// history of it ends, at most the leader's end of it).
    Truncate { epoch: i32, leader_end: i64 },
    /// Empty the log and start it at this offset (the leader no longer has what follows the
    /// local log end).
    StartAt(i64),
    /// Cut the log to this offset.
    TruncateTo(i64),
    /// Wait `replica.fetch.backoff.ms` and fetch again (new metadata may move the partition).
    BackOff(ErrorCode),
}

/// The follower's action on `answer` for a partition whose log is `local`.
pub fn decide(local: Local, answer: &Answer) -> Action {
    if answer.error == ErrorCode::OFFSET_OUT_OF_RANGE {
        if answer.log_start >= 0 && local.log_end < answer.log_start {
            return Action::StartAt(answer.log_start);
        }
        if answer.high_watermark >= 0 && answer.high_watermark < local.log_end {
            return Action::TruncateTo(answer.high_watermark.max(local.log_start));
        }
        return Action::BackOff(answer.error);
    }
    if !answer.error.is_ok() {
        return Action::BackOff(answer.error);
    }
    if let Some((epoch, leader_end)) = answer.diverging_epoch {
        if epoch < 0 || leader_end < 0 {
            // The leader has no epoch at or below ours: nothing in common past its start.
            return Action::StartAt(answer.log_start.max(0));
        }
        return Action::Truncate { epoch, leader_end };
    }
    Action::Append {
        records: answer.records.clone(),
        high_watermark: answer.high_watermark,
        log_start: answer.log_start,
    }
}

/// Where [`Action::Truncate`] cuts: the smaller of the leader's end of `epoch` and the local
/// end of it (`local_end_for`: the local epoch lookup's answer for `epoch`), never below the
/// log start.
pub fn truncation_offset(local: Local, leader_end: i64, local_end_for: (i32, i64)) -> i64 {
    let (local_epoch, local_end) = local_end_for;
    let cut = if local_epoch < 0 || local_end < 0 {
        leader_end
    } else {
        leader_end.min(local_end)
    };
    cut.clamp(local.log_start, local.log_end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(error: ErrorCode) -> Answer {
        Answer {
            error,
            high_watermark: 80,
            log_start: 10,
            diverging_epoch: None,
            records: Bytes::from_static(b"batches"),
        }
    }

    const LOCAL: Local = Local {
        log_start: 0,
        log_end: 100,
    };

    #[test]
    fn records_are_appended_and_errors_back_off() {
        assert_eq!(
            decide(LOCAL, &answer(ErrorCode::NONE)),
            Action::Append {
                records: Bytes::from_static(b"batches"),
                high_watermark: 80,
                log_start: 10
            }
        );
        for code in [
            ErrorCode::FENCED_LEADER_EPOCH,
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::UNKNOWN_LEADER_EPOCH,
            ErrorCode::KAFKA_STORAGE_ERROR,
        ] {
            assert_eq!(decide(LOCAL, &answer(code)), Action::BackOff(code));
        }
    }

    /// Kafka's follower truncation: to the smaller of the leader's end of the diverging epoch
    /// and the follower's own end of it.
    #[test]
    fn a_diverging_epoch_cuts_where_the_histories_part() {
        let diverged = Answer {
            diverging_epoch: Some((4, 90)),
            ..answer(ErrorCode::NONE)
        };
        assert_eq!(
            decide(LOCAL, &diverged),
            Action::Truncate {
                epoch: 4,
                leader_end: 90
            }
        );
        assert_eq!(truncation_offset(LOCAL, 90, (4, 95)), 90);
        assert_eq!(truncation_offset(LOCAL, 90, (4, 70)), 70);
        // The follower lacks the epoch: the leader's end, and the next fetch asks again.
        assert_eq!(truncation_offset(LOCAL, 90, (-1, -1)), 90);
        assert_eq!(truncation_offset(LOCAL, 150, (-1, -1)), 100);
        let empty_leader = Answer {
            diverging_epoch: Some((-1, -1)),
            ..answer(ErrorCode::NONE)
        };
        assert_eq!(decide(LOCAL, &empty_leader), Action::StartAt(10));
    }

    #[test]
    fn out_of_range_starts_over_or_cuts_to_the_leaders_high_watermark() {
        let behind = Local {
            log_start: 0,
            log_end: 5,
        };
        assert_eq!(
            decide(behind, &answer(ErrorCode::OFFSET_OUT_OF_RANGE)),
            Action::StartAt(10)
        );
        assert_eq!(
            decide(LOCAL, &answer(ErrorCode::OFFSET_OUT_OF_RANGE)),
            Action::TruncateTo(80)
        );
        let unknown = Answer {
            high_watermark: -1,
            log_start: -1,
            ..answer(ErrorCode::OFFSET_OUT_OF_RANGE)
        };
        assert_eq!(
            decide(LOCAL, &unknown),
            Action::BackOff(ErrorCode::OFFSET_OUT_OF_RANGE)
        );
    }
}
