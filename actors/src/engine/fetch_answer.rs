//! Kafka's fetch error table, in pure code (as `AbstractFetcherThread.processFetchRequest`
//! decides it): what one partition's answer to a mirror Fetch means for the partition.
//!
//! - a topic the source no longer has (checked twice by the shell: `gone_topics`) fails the
//!   partition for good;
//! - an answer saying the partition is not (or no longer) led by the broker fetched from, or not
//!   at the leader epoch asked, moves it to its new leader's fetcher; nothing of it is applied;
//! - a DivergingEpoch, the records, or OFFSET_OUT_OF_RANGE are applied to the log
//!   (`host::apply_fetch` decides the truncation);
//! - any other error is retried after the backoff, as Kafka's fetchers do: one a client treats
//!   as final (UNKNOWN_SERVER_ERROR, an authorization an ACL change may restore) is no proof the
//!   partition cannot go on.

use crate::host::FetchResponse;
use crate::partition::Cause;
use kmirror_protocol::client::FetchedPartition;
use kmirror_protocol::errors::ErrorCode;

/// What to do with one partition's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchAction {
    /// Apply it to the local log.
    Apply(FetchResponse),
    /// Its source leader moved: look it up and move the partition to that broker's fetcher.
    MoveToLeader,
    /// Report the failure to the partition (retryable: it stays in its state and fetches again
    /// after its backoff; fatal: it goes FAILED).
    Fail(Cause),
}

/// Errors that say the partition is not (or no longer) led by the broker fetched from, or not
/// at the leader epoch asked: a leader lookup heals them.
fn leader_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::FENCED_LEADER_EPOCH
            | ErrorCode::UNKNOWN_LEADER_EPOCH
            | ErrorCode::LEADER_NOT_AVAILABLE
            | ErrorCode::REPLICA_NOT_AVAILABLE
    )
}

/// The action for `fetched`, asked with `source_leader_epoch` as its current leader epoch;
/// `gone` is why its topic is gone from the source, when it is.
pub fn classify(
    fetched: FetchedPartition,
    source_leader_epoch: Option<i32>,
    gone: Option<&str>,
) -> FetchAction {
    if let Some(reason) = gone {
        return FetchAction::Fail(Cause::fatal(reason));
    }
    if leader_moved(fetched.error) {
        return FetchAction::MoveToLeader;
    }
    match (fetched.error, fetched.diverging_epoch) {
        (ErrorCode::NONE, Some((epoch, end_offset))) => {
            FetchAction::Apply(FetchResponse::Diverging { epoch, end_offset })
        }
        (ErrorCode::NONE, None) => FetchAction::Apply(FetchResponse::Records {
            records: fetched.records,
            high_watermark: fetched.high_watermark,
            source_leader_epoch,
        }),
        // Answered with where the source's log starts, which the apply asks for.
        (ErrorCode::OFFSET_OUT_OF_RANGE, _) => {
            FetchAction::Apply(FetchResponse::OffsetOutOfRange {
                log_start_offset: -1,
            })
        }
        (code, _) => FetchAction::Fail(Cause::retryable(format!("the source answered {code}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn answer(error: ErrorCode, diverging_epoch: Option<(i32, i64)>) -> FetchedPartition {
        FetchedPartition {
            topic_id: uuid::Uuid::nil(),
            topic: "orders".into(),
            partition: 0,
            error,
            high_watermark: 42,
            last_stable_offset: 40,
            log_start_offset: 0,
            records: Bytes::from_static(b"batches"),
            aborted_transactions: Vec::new(),
            diverging_epoch,
            current_leader: None,
        }
    }

    /// Every row of the table, as Kafka's fetcher tests pin them.
    #[test]
    fn each_answer_has_its_action() {
        let retry = |code: ErrorCode| {
            FetchAction::Fail(Cause::retryable(format!("the source answered {code}")))
        };
        let records = FetchAction::Apply(FetchResponse::Records {
            records: Bytes::from_static(b"batches"),
            high_watermark: 42,
            source_leader_epoch: Some(7),
        });
        let table = [
            (ErrorCode::NONE, None, records),
            (
                ErrorCode::NONE,
                Some((3, 100)),
                FetchAction::Apply(FetchResponse::Diverging {
                    epoch: 3,
                    end_offset: 100,
                }),
            ),
            (
                ErrorCode::OFFSET_OUT_OF_RANGE,
                None,
                FetchAction::Apply(FetchResponse::OffsetOutOfRange {
                    log_start_offset: -1,
                }),
            ),
            (
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                None,
                FetchAction::MoveToLeader,
            ),
            (
                ErrorCode::FENCED_LEADER_EPOCH,
                None,
                FetchAction::MoveToLeader,
            ),
            (
                ErrorCode::UNKNOWN_LEADER_EPOCH,
                None,
                FetchAction::MoveToLeader,
            ),
            (
                ErrorCode::LEADER_NOT_AVAILABLE,
                None,
                FetchAction::MoveToLeader,
            ),
            (
                ErrorCode::REPLICA_NOT_AVAILABLE,
                None,
                FetchAction::MoveToLeader,
            ),
            (
                ErrorCode::UNKNOWN_SERVER_ERROR,
                None,
                retry(ErrorCode::UNKNOWN_SERVER_ERROR),
            ),
            (
                ErrorCode::TOPIC_AUTHORIZATION_FAILED,
                None,
                retry(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
            ),
            (
                ErrorCode::UNKNOWN_TOPIC_ID,
                None,
                retry(ErrorCode::UNKNOWN_TOPIC_ID),
            ),
            (
                ErrorCode::KAFKA_STORAGE_ERROR,
                None,
                retry(ErrorCode::KAFKA_STORAGE_ERROR),
            ),
        ];
        for (code, diverging, expected) in table {
            assert_eq!(
                classify(answer(code, diverging), Some(7), None),
                expected,
                "{code} {diverging:?}"
            );
        }
    }

    /// A topic confirmed gone fails the partition for good, whatever the answer said.
    #[test]
    fn a_gone_topic_fails_the_partition_for_good() {
        for code in [ErrorCode::UNKNOWN_TOPIC_ID, ErrorCode::NONE] {
            assert_eq!(
                classify(
                    answer(code, None),
                    None,
                    Some("the source topic was deleted")
                ),
                FetchAction::Fail(Cause::fatal("the source topic was deleted"))
            );
        }
    }
}
