//! ListOffsets: earliest (-2), latest (-1: the high watermark, or the LSO for READ_COMMITTED),
//! or the first batch reaching a timestamp.
//!
//! The leader epoch is answered from v4 on only: older versions have no such field, and an
//! answer carrying one cannot be encoded at their version (kcat and librdkafka 2.0 ask v2).

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kmirror_protocol::errors::ErrorCode;

pub(super) fn handle(
    broker: &Broker,
    access: &Access,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let answers_epoch = version >= 4;
    let read_committed = request.isolation_level == 1;
    let mut topics = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::new();
        for p in topic.partitions {
            let mut out = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1);
            if !access.topic(Operation::Describe, &name) {
                partitions.push(out.with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0));
                continue;
            }
            match broker.partition(&name, p.partition_index) {
                None => {
                    out = out
                        .with_error_code(broker.missing_partition_error(&name, p.partition_index))
                }
                Some(partition) => {
                    let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
                    let found = match p.timestamp {
                        -2 => Ok(Some(log.log_start_offset())),
                        -1 if read_committed => Ok(Some(log.last_stable_offset())),
                        -1 => Ok(Some(log.high_watermark())),
                        ts => log.offset_for_timestamp(ts),
                    };
                    match found {
                        Ok(Some(offset)) => {
                            out = out.with_offset(offset);
                            if answers_epoch {
                                out = out.with_leader_epoch(log.latest_epoch().unwrap_or(-1));
                            }
                        }
                        Ok(None) => {}
                        Err(_) => out = out.with_error_code(ErrorCode::KAFKA_STORAGE_ERROR.0),
                    }
                }
            }
            partitions.push(out);
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}
