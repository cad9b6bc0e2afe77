//! WriteTxnMarkers: another broker's transaction coordinator ends a transaction on partitions
//! this broker leads (docs/cluster.md). Each marker is written as the coordinator's own are
//! ([`crate::broker::Broker::write_marker`]); a partition this broker does not lead answers
//! NOT_LEADER_OR_FOLLOWER, a deleted one UNKNOWN_TOPIC_OR_PARTITION. Needs CLUSTER_ACTION.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::broker::coordinators::CoordinatorKind;
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
    // A marker that ended a group's offsets is answered once the replicas of its partition of
    // `__consumer_offsets` hold it: the transaction coordinator forgets it after the answer.
    for partition in markers
        .iter_mut()
        .flat_map(|m| m.topics.iter_mut())
        .filter(|t| t.name.0.as_str() == CoordinatorKind::Group.topic())
        .flat_map(|t| t.partitions.iter_mut())
        .filter(|p| p.error_code == 0)
    {
        if let Err(code) = broker
            .offsets_partition_replicated(partition.partition_index)
            .await
        {
            partition.error_code = code;
        }
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}
