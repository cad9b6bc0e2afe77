//! Produce: leader appends (offsets assigned, leader epoch stamped, idempotence checked), then
//! the partition's leader state moves the high watermark (docs/replication.md §4) and waiting
//! fetches wake. `acks=0` gets no response; `acks=1` is answered after the leader's append;
//! `acks=all` is refused NOT_ENOUGH_REPLICAS before the append while the ISR is below
//! `min.insync.replicas`, and answered once the high watermark passes its records (or
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below it meanwhile, NOT_LEADER_OR_FOLLOWER
//! if leadership moved, REQUEST_TIMED_OUT after the request's timeout). A record batch larger than the topic's `max.message.bytes` answers
//! MESSAGE_TOO_LARGE. A read-only (mirror) partition answers READ_ONLY_TOPIC. A transactional
//! batch must belong to an ongoing transaction that added the partition (INVALID_TXN_STATE
//! otherwise), so no data escapes the markers its coordinator writes. Needs WRITE on each topic
//! and, for a transactional producer, on its transactional id. `__mirror_state` is written by
//! the coordinator only (INVALID_TOPIC_EXCEPTION). Each partition's batches are validated as
//! Kafka's LogValidator does (see [`kmirror_protocol::batch::validate`]) before its log is
//! locked: an invalid one answers CORRUPT_MESSAGE or INVALID_RECORD and nothing is appended.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::{Broker, Partition, internal_topics, now_ms};
use crate::replication::role::Role;
use crate::storage::StorageError;
use bytes::Bytes;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_actors::metadata::mirror_of;
use kmirror_actors::partition::Desired;
use kmirror_protocol::batch::RecordBatch;
use kmirror_protocol::batch::validate::{TimestampLimits, validate_produced};
use kmirror_protocol::errors::ErrorCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Kafka's error code for an append failure.
pub(super) fn error_code(e: &StorageError) -> i16 {
    match e {
        StorageError::InvalidBatch(_)
        | StorageError::PartialBatch(_)
        | StorageError::EmptyAppend
        | StorageError::InvalidControl(_) => ErrorCode::CORRUPT_MESSAGE.0,
        StorageError::ControlBatchProduced | StorageError::MultipleProducerBatches(_) => {
            ErrorCode::INVALID_RECORD.0
        }
        StorageError::OutOfOrderSequence { .. } => ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER.0,
        StorageError::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH.0,
        // The partition went while the request held it: retriable, the client's next metadata
        // says where it is now.
        StorageError::LogDeleted { .. } => ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
        _ => ErrorCode::KAFKA_STORAGE_ERROR.0,
    }
}

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: ProduceRequest,
) -> Option<ProduceResponse> {
    let id_allowed = request
        .transactional_id
        .as_ref()
        .is_none_or(|id| access.transactional_id(Operation::Write, id));
    let mut responses = Vec::new();
    // acks=all appends waiting for the high watermark: (topic, partition) answer positions.
    let mut waiting: Vec<Waiting> = Vec::new();
    for topic in request.topic_data {
        let name = topic.name.0.to_string();
        let denied = if internal_topics::is_internal(&name) {
            // Only the coordinators write them (a forged group record would be replayed).
            Some(ErrorCode::INVALID_TOPIC_EXCEPTION.0)
        } else if !id_allowed {
            Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
        } else if !access.topic(Operation::Write, &name) {
            Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0)
        } else {
            None
        };
        let mut partitions = Vec::new();
        for data in topic.partition_data {
            let mut out = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            if let Some(code) = denied {
                partitions.push(out.with_error_code(code));
                continue;
            }
            if let Some(why) = broker.oversized_batch(&name, data.index, data.records.as_ref()) {
                partitions.push(
                    out.with_error_code(ErrorCode::MESSAGE_TOO_LARGE.0)
                        .with_error_message(Some(StrBytes::from_string(why))),
                );
                continue;
            }
            let transactional = transactional_producer(data.records.as_ref());
            let outside_transaction = match transactional {
                Some(producer) => {
                    !broker
                        .in_transaction(
                            request.transactional_id.as_deref().map(|id| &**id),
                            producer,
                            &name,
                            data.index,
                        )
                        .await
                }
                None => false,
            };
            match (
                broker.partition(&name, data.index),
                broker.leader_epoch(&name, data.index),
            ) {
                (Some(partition), Some(_)) if partition.read_only.load(Ordering::SeqCst) => {
                    out = read_only(&partition, out);
                }
                (Some(_), Some(_)) if outside_transaction => {
                    out = out
                        .with_error_code(ErrorCode::INVALID_TXN_STATE.0)
                        .with_error_message(Some(StrBytes::from_static_str(
                            "the partition is not in an ongoing transaction of this producer",
                        )));
                }
                (Some(partition), Some(_))
                    if request.acks == -1 && !enough_replicas(&partition) =>
                {
                    out = out
                        .with_error_code(ErrorCode::NOT_ENOUGH_REPLICAS.0)
                        .with_error_message(Some(StrBytes::from_static_str(
                            "the partition's in-sync replicas are fewer than min.insync.replicas",
                        )));
                }
                (Some(partition), Some(_)) => {
                    let records = data.records.unwrap_or_default();
                    let (before_max_ms, after_max_ms) = broker.config().message_timestamp_max_ms;
                    let limits = TimestampLimits {
                        now_ms: crate::broker::now_ms(),
                        before_max_ms,
                        after_max_ms,
                    };
                    out = match validate_produced(&records, &limits) {
                        Err(invalid) => out
                            .with_error_code(invalid.error_code().0)
                            .with_error_message(Some(StrBytes::from_string(invalid.to_string()))),
                        Ok(()) => {
                            let (answer, end) = append(broker, &partition, records, out);
                            if let Some(end) = end.filter(|_| request.acks == -1) {
                                waiting.push(Waiting {
                                    topic: responses.len(),
                                    index: partitions.len(),
                                    partition,
                                    end,
                                });
                            }
                            answer
                        }
                    };
                }
                _ => out = out.with_error_code(broker.missing_partition_error(&name, data.index)),
            }
            partitions.push(out);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partitions),
        );
    }
    broker.notify_appended();
    let timeout = std::time::Duration::from_millis(request.timeout_ms.max(0) as u64);
    for (topic, index, code) in replicated(broker, waiting, timeout).await {
        let answer = &mut responses[topic].partition_responses[index];
        answer.error_code = code.0;
        if !code.is_ok() {
            answer.base_offset = -1;
            answer.error_message = Some(StrBytes::from_static_str(match code {
                ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
                    "appended by the leader, but the in-sync replicas fell below min.insync.replicas before it was replicated"
                }
                ErrorCode::REQUEST_TIMED_OUT => {
                    "appended by the leader, but not replicated to the in-sync replicas within the request's timeout"
                }
                _ => "leadership moved before the records were replicated",
            }));
        }
    }
    (request.acks != 0).then(|| ProduceResponse::default().with_responses(responses))
}

/// Whether an acks=all produce may append to `partition`: its ISR has `min.insync.replicas`.
fn enough_replicas(partition: &Partition) -> bool {
    let _log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
    match &*partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
        Role::Leader(state) => state.check_acks_all().is_ok(),
        Role::Follower { .. } => true,
    }
}

/// An acks=all append waiting for the high watermark.
struct Waiting {
    /// Its answer's position: topic, then partition.
    topic: usize,
    index: usize,
    partition: Arc<Partition>,
    /// The leader epoch it was appended at, and the offset after its records.
    end: (i32, i64),
}

/// Waits until each acks=all append's records are below the high watermark of the leader
/// epoch they were appended at, at most `timeout`: each one's outcome, by answer position.
/// Leadership lost or moved to another epoch meanwhile answers NOT_LEADER_OR_FOLLOWER: the
/// records may have been truncated.
async fn replicated(
    broker: &Broker,
    mut waiting: Vec<Waiting>,
    timeout: std::time::Duration,
) -> Vec<(usize, usize, ErrorCode)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut done = Vec::new();
    loop {
        // Registered before looking, so a rise right after still wakes us.
        let notified = broker.appended().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        waiting.retain(|w| match Broker::replication_outcome(&w.partition, w.end) {
            Some(code) => {
                done.push((w.topic, w.index, code));
                false
            }
            None => true,
        });
        if waiting.is_empty() {
            return done;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => {
                done.extend(
                    waiting
                        .into_iter()
                        .map(|w| (w.topic, w.index, ErrorCode::REQUEST_TIMED_OUT)),
                );
                return done;
            }
        }
    }
}

/// The answer to a produce to a read-only partition: READ_ONLY_TOPIC while the topic is
/// mirrored or paused; NOT_LEADER_OR_FOLLOWER, which clients retry, while a stopped topic's
/// partition finishes its failover or reloads its state (docs/failover.md).
fn read_only(partition: &Partition, out: PartitionProduceResponse) -> PartitionProduceResponse {
    let stopping = partition
        .configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get("mirror.name")
        .and_then(|v| mirror_of(v))
        .is_some_and(|(_, desired)| desired == Desired::Stopped);
    let (code, message) = if stopping {
        (
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            "the topic's mirror partition is finishing its failover; retry",
        )
    } else {
        (
            ErrorCode::READ_ONLY_TOPIC,
            "a mirror topic is read-only until its mirror partition is STOPPED",
        )
    };
    out.with_error_code(code.0)
        .with_error_message(Some(StrBytes::from_static_str(message)))
}

/// Appends validated records as the leader, at the leader epoch this node leads at, and
/// fills in the answer; with that epoch and the offset after the records when they are in
/// the log (appended now, or a duplicate of a batch appended
/// before, which an acks=all retry must see replicated too).
fn append(
    broker: &Broker,
    partition: &Partition,
    records: Bytes,
    out: PartitionProduceResponse,
) -> (PartitionProduceResponse, Option<(i32, i64)>) {
    let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
    // Again under the log's lock, where the flag is set before the log is cut or counted: a
    // produce that passed the first check while a restart's `mirror.name` was being applied
    // must not append after it (docs/failover.md "Restarting a stopped topic").
    if partition.read_only.load(Ordering::SeqCst) {
        return (read_only(partition, out), None);
    }
    let Some(epoch) = broker.led_epoch(partition) else {
        return (
            out.with_error_code(ErrorCode::NOT_LEADER_OR_FOLLOWER.0),
            None,
        );
    };
    match log.append_as_leader(records, epoch, now_ms()) {
        Ok(info) => {
            broker.committed_append(partition, &mut log);
            let answer = out
                .with_base_offset(info.first_offset)
                .with_log_start_offset(log.log_start_offset());
            (answer, Some((epoch, info.last_offset + 1)))
        }
        Err(e) => (
            out.with_error_code(error_code(&e))
                .with_error_message(Some(StrBytes::from_string(e.to_string()))),
            None,
        ),
    }
}

/// The producer (id, epoch) of a transactional batch; `None` for any other (anything
/// unparsable is left to the append's own checks).
fn transactional_producer(records: Option<&Bytes>) -> Option<(i64, i16)> {
    match records.map(|r| RecordBatch::new(r.clone())) {
        Some(Ok(batch)) if batch.is_transactional() => {
            Some((batch.producer_id(), batch.producer_epoch()))
        }
        _ => None,
    }
}
