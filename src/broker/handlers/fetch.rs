//! Fetch (consumers and mirrors): whole batches up to the high watermark, or the LSO with the
//! aborted transactions for READ_COMMITTED; `LastFetchedEpoch` answered with a DivergingEpoch
//! when the caller's history left ours; `CurrentLeaderEpoch` fenced; long polling until
//! `min_bytes` arrive or `max_wait_ms` passes, at most `fetch.max.wait.ms`. As Kafka's delayed
//! fetch, a partition answered with an error (OFFSET_OUT_OF_RANGE for an offset past the log
//! end among them) or a diverging epoch ends the wait at once: waiting cannot change that answer.
//! The listener drops a waiting Fetch whose client disconnected (see [`crate::broker::server`]).
//! Fetch sessions are not granted (session id 0), so clients send full fetches. Each topic needs
//! READ.
//!
//! A follower's fetch (a replica id, with its broker epoch from v15) needs CLUSTER_ACTION and
//! reads up to the log end, not the high watermark; its fetch offset is the follower's log end,
//! which the partition's leader state learns first (docs/replication.md §5), so the high
//! watermark it answers already counts it.

use super::access::Access;
use super::fetch_response::{FetchAnswer, PartitionAnswer, TopicAnswer};
use super::offset_for_leader_epoch::epoch_error;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::storage::StorageError;
use kafka_protocol::messages::FetchRequest;
use kmirror_protocol::errors::ErrorCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One pass over the requested partitions; returns the response and the record bytes in it.
fn read_once(
    broker: &Broker,
    access: &Access,
    request: &FetchRequest,
    version: i16,
) -> (FetchAnswer, usize) {
    let read_committed = request.isolation_level == 1;
    let follower = follower_of(request, version);
    if follower.is_some() && !access.cluster(Operation::ClusterAction) {
        return (
            refuse_all(request, ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0),
            0,
        );
    }
    let mut total = 0usize;
    let mut topics = Vec::new();
    for topic in &request.topics {
        let name = if version >= 13 {
            broker.topic_name(&topic.topic_id)
        } else {
            Some(topic.topic.0.to_string())
        };
        let mut partitions = Vec::new();
        for p in &topic.partitions {
            let mut out = PartitionAnswer::new(p.partition);
            let found = name.as_deref().and_then(|n| {
                Some((
                    broker.partition(n, p.partition)?,
                    broker.leader_epoch(n, p.partition)?,
                ))
            });
            if follower.is_none()
                && name
                    .as_deref()
                    .is_some_and(|n| !access.topic(Operation::Read, n))
            {
                partitions.push(out.with_error(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0));
                continue;
            }
            let Some((partition, ours)) = found else {
                let missing = name
                    .as_deref()
                    .map(|n| broker.missing_partition_error(n, p.partition));
                let code = match missing {
                    Some(code) if code == ErrorCode::NOT_LEADER_OR_FOLLOWER.0 => code,
                    _ if version >= 13 => ErrorCode::UNKNOWN_TOPIC_ID.0,
                    _ => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
                };
                partitions.push(out.with_error(code));
                continue;
            };
            // The open log may be another incarnation of the name than the id asked for (a
            // topic deleted and created again while the log's close or open is pending): its
            // records are not the asked topic's.
            if version >= 13 && partition.topic_id != topic.topic_id {
                partitions.push(out.with_error(ErrorCode::INCONSISTENT_TOPIC_ID.0));
                continue;
            }
            let error = epoch_error(p.current_leader_epoch, ours);
            if error != 0 {
                partitions.push(out.with_error(error));
                continue;
            }
            let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            // A follower's position counts only once its history is known to be ours and its
            // offset in the log, as Kafka's leader skips it with a divergence or out of range:
            // else a returning replica with records this leader lacks would join the ISR
            // before it is told to truncate them.
            let in_log = (log.log_start_offset()..=log.log_end_offset()).contains(&p.fetch_offset);
            if let Some((replica, broker_epoch)) = follower
                && in_log
                && diverging(&log, p, version, true).is_none()
            {
                let name = name.as_deref().unwrap_or_default();
                let code = broker.follower_fetched(
                    name,
                    &partition,
                    &mut log,
                    (replica, broker_epoch),
                    p.fetch_offset,
                );
                if code != 0 {
                    partitions.push(out.with_error(code));
                    continue;
                }
            }
            out.high_watermark = log.high_watermark();
            out.last_stable_offset = log.last_stable_offset();
            out.log_start_offset = log.log_start_offset();
            if let Some(divergence) = diverging(&log, p, version, follower.is_some()) {
                out.diverging_epoch = Some(divergence);
                partitions.push(out);
                continue;
            }
            let upper = if follower.is_some() {
                log.log_end_offset()
            } else if read_committed {
                log.last_stable_offset()
            } else {
                log.high_watermark()
            };
            let room = (request.max_bytes.max(0) as usize).saturating_sub(total);
            let max = (p.partition_max_bytes.max(0) as usize).min(room);
            match log.read(p.fetch_offset, max, upper, total == 0) {
                Ok(read) => {
                    total += read.records.len();
                    if read_committed {
                        let aborted = log
                            .aborted_transactions(p.fetch_offset, upper)
                            .into_iter()
                            .map(|a| (a.producer_id, a.first_offset))
                            .collect();
                        out.aborted_transactions = Some(aborted);
                    }
                    out.records = Some(read.records);
                }
                Err(StorageError::OffsetOutOfRange { .. }) => {
                    out = out.with_error(ErrorCode::OFFSET_OUT_OF_RANGE.0)
                }
                Err(e) => {
                    tracing::error!(topic = ?name, partition = p.partition, error = %e, "fetch read");
                    out = out.with_error(ErrorCode::KAFKA_STORAGE_ERROR.0);
                }
            }
            partitions.push(out);
        }
        topics.push(TopicAnswer {
            name: topic.topic.0.to_string(),
            topic_id: topic.topic_id,
            partitions,
        });
    }
    (
        FetchAnswer {
            topics,
            ..FetchAnswer::default()
        },
        total,
    )
}

/// Where a fetcher's history leaves this log, if it does: the fetcher's last epoch ends
/// before its fetch offset here (or is unknown, or older). A follower ahead of this leader in
/// epochs (a mirror partition's source went back by an unclean election while leadership
/// moved) is cut at this log's latest epoch and end, where Kafka's lookup has no answer
/// (docs/replication.md §6).
fn diverging(
    log: &crate::storage::PartitionLog,
    p: &kafka_protocol::messages::fetch_request::FetchPartition,
    version: i16,
    follower: bool,
) -> Option<(i32, i64)> {
    if version < 12 || p.last_fetched_epoch < 0 {
        return None;
    }
    let (mut epoch, mut end) = log.end_offset_for(p.last_fetched_epoch);
    if let Some(latest) = log.latest_epoch()
        && p.last_fetched_epoch > latest
        && follower
    {
        (epoch, end) = (latest, log.log_end_offset());
    }
    (epoch < 0 || end < p.fetch_offset || epoch < p.last_fetched_epoch).then_some((epoch, end))
}

/// The follower a Fetch comes from, with its broker epoch (-1 before v15), or `None` for a
/// consumer's.
fn follower_of(request: &FetchRequest, version: i16) -> Option<(i32, i64)> {
    let (replica, epoch) = if version >= 15 {
        (
            request.replica_state.replica_id.0,
            request.replica_state.replica_epoch,
        )
    } else {
        (request.replica_id.0, -1)
    };
    (replica >= 0).then_some((replica, epoch))
}

/// Every partition of `request` answered `code`.
fn refuse_all(request: &FetchRequest, code: i16) -> FetchAnswer {
    FetchAnswer {
        topics: request
            .topics
            .iter()
            .map(|topic| TopicAnswer {
                name: topic.topic.0.to_string(),
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| PartitionAnswer::new(p.partition).with_error(code))
                    .collect(),
            })
            .collect(),
        ..FetchAnswer::default()
    }
}

/// Whether `answer` (holding `bytes` record bytes) goes out without waiting for more data:
/// `min_bytes` arrived, or a partition has an answer that waiting would not change.
fn answer_now(answer: &FetchAnswer, bytes: usize, min_bytes: i32) -> bool {
    bytes >= min_bytes.max(1) as usize
        || answer
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.error_code != 0 || p.diverging_epoch.is_some())
}

/// How long a Fetch may wait: its `max_wait_ms`, at most `cap` (`fetch.max.wait.ms`).
fn wait_for(max_wait_ms: i32, cap: Duration) -> Duration {
    Duration::from_millis(max_wait_ms.max(0) as u64).min(cap)
}

pub(super) async fn handle(
    broker: &Arc<Broker>,
    access: &Access<'_>,
    request: FetchRequest,
    version: i16,
) -> FetchAnswer {
    let wait = wait_for(request.max_wait_ms, broker.config().network.fetch_max_wait);
    let deadline = Instant::now() + wait;
    loop {
        // Registered before reading, so an append right after the read still wakes us.
        let appended = broker.appended();
        let notified = appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (response, bytes) = read_once(broker, access, &request, version);
        if answer_now(&response, bytes, request.min_bytes) || Instant::now() >= deadline {
            return response;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => return read_once(broker, access, &request, version).0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(partitions: Vec<PartitionAnswer>) -> FetchAnswer {
        FetchAnswer {
            topics: vec![TopicAnswer {
                partitions,
                ..TopicAnswer::default()
            }],
            ..FetchAnswer::default()
        }
    }

    #[test]
    fn an_error_or_a_divergence_is_answered_without_waiting() {
        let empty = answer(vec![PartitionAnswer::new(0), PartitionAnswer::new(1)]);
        assert!(!answer_now(&empty, 0, 1), "nothing yet: wait");
        assert!(answer_now(&empty, 1, 1), "min_bytes arrived");
        assert!(!answer_now(&empty, 10, 11));
        let out_of_range = answer(vec![
            PartitionAnswer::new(0),
            PartitionAnswer::new(1).with_error(ErrorCode::OFFSET_OUT_OF_RANGE.0),
        ]);
        assert!(answer_now(&out_of_range, 0, 1));
        let mut diverged = PartitionAnswer::new(0);
        diverged.diverging_epoch = Some((3, 10));
        assert!(answer_now(&answer(vec![diverged]), 0, 1));
    }

    #[test]
    fn the_wait_is_capped_by_fetch_max_wait_ms() {
        let cap = Duration::from_secs(30);
        assert_eq!(wait_for(i32::MAX, cap), cap);
        assert_eq!(wait_for(500, cap), Duration::from_millis(500));
        assert_eq!(wait_for(-1, cap), Duration::ZERO);
    }
}
