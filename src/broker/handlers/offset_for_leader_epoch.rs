//! OffsetForLeaderEpoch: where an epoch ends in this log (Kafka's endOffsetFor), after the
//! usual leader-epoch fencing of the caller's current epoch.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kmirror_protocol::errors::ErrorCode;

/// Kafka's check of a client's view of the leader epoch (-1: the client does not say).
pub(super) fn epoch_error(current: i32, ours: i32) -> i16 {
    match current {
        -1 => 0,
        c if c < ours => ErrorCode::FENCED_LEADER_EPOCH.0,
        c if c > ours => ErrorCode::UNKNOWN_LEADER_EPOCH.0,
        _ => 0,
    }
}

pub(super) fn handle(
    broker: &Broker,
    access: &Access,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::new();
    for topic in request.topics {
        let name = topic.topic.0.to_string();
        let mut partitions = Vec::new();
        for p in topic.partitions {
            let mut out = EpochEndOffset::default()
                .with_partition(p.partition)
                .with_leader_epoch(-1)
                .with_end_offset(-1);
            if !access.topic(Operation::Describe, &name) {
                partitions.push(out.with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0));
                continue;
            }
            match (
                broker.partition(&name, p.partition),
                broker.leader_epoch(&name, p.partition),
            ) {
                (Some(partition), Some(ours)) => {
                    let error = epoch_error(p.current_leader_epoch, ours);
                    if error != 0 {
                        out = out.with_error_code(error);
                    } else {
                        let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
                        let (epoch, end) = log.end_offset_for(p.leader_epoch);
                        out = out.with_leader_epoch(epoch).with_end_offset(end);
                    }
                }
                _ => out = out.with_error_code(broker.missing_partition_error(&name, p.partition)),
            }
            partitions.push(out);
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
