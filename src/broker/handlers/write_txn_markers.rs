//! WriteTxnMarkers: another broker's transaction coordinator ends a transaction on partitions
//! this broker leads (docs/cluster.md). Each marker is written as the coordinator's own are
//! ([`crate::broker::Broker::write_marker`]) and answered once the partition's in-sync replicas
//! hold it; a partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER, a deleted one
//! UNKNOWN_TOPIC_OR_PARTITION. Needs CLUSTER_ACTION.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::broker::offsets_topic::GROUP_WRITE_TIMEOUT;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kmirror_protocol::errors::ErrorCode;

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let allowed = access.cluster(Operation::ClusterAction);
    let markers = request
        .markers
        .into_iter()
        .map(|marker| {
            let topics = marker
                .topics
                .into_iter()
                .map(|topic| {
                    let name = topic.name.0.to_string();
                    let partitions = topic
                        .partition_indexes
                        .iter()
                        .map(|index| {
                            let error_code = if allowed {
                                broker.write_marker(
                                    &name,
                                    *index,
                                    marker.producer_id.0,
                                    marker.producer_epoch,
                                    marker.transaction_result,
                                )
                            } else {
                                ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0
                            };
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(*index)
                                .with_error_code(error_code)
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(topic.name)
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics)
        })
        .collect();
    broker.notify_appended();
    let mut markers: Vec<WritableTxnMarkerResult> = markers;
    // A marker is answered once the partition's in-sync replicas hold it (Kafka writes markers
    // with acks=all): the transaction coordinator forgets the transaction after the answer.
    // One deadline for the whole request, within the sender's request timeout.
    let deadline = tokio::time::Instant::now() + GROUP_WRITE_TIMEOUT;
    for topic in markers.iter_mut().flat_map(|m| m.topics.iter_mut()) {
        let name = topic.name.0.to_string();
        for partition in topic.partitions.iter_mut().filter(|p| p.error_code == 0) {
            if let Err(code) = broker
                .marker_replicated(&name, partition.partition_index, deadline)
                .await
            {
                partition.error_code = code;
            }
        }
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}
