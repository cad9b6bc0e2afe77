//! WriteTxnMarkers: another broker's transaction coordinator ends a transaction on partitions
//! this broker leads (docs/cluster.md). Each marker is written as the coordinator's own are
//! ([`crate::broker::Broker::write_marker`]); a partition this broker does not lead answers
//! NOT_LEADER_OR_FOLLOWER, a deleted one UNKNOWN_TOPIC_OR_PARTITION. Needs CLUSTER_ACTION.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kmirror_protocol::errors::ErrorCode;

pub(super) fn handle(
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
    WriteTxnMarkersResponse::default().with_markers(markers)
}
