//! DescribeCluster: the cluster id and its brokers. Needs DESCRIBE on the cluster.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

pub(super) fn handle(broker: &Broker, access: &Access) -> DescribeClusterResponse {
    if !access.cluster(Operation::Describe) {
        return DescribeClusterResponse::default()
            .with_error_code(ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0);
    }
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.cluster_id()))
        .with_controller_id(BrokerId(broker.controller_for_clients()))
        .with_brokers(
            broker
                .brokers()
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.node_id))
                        .with_host(StrBytes::from_string(b.host))
                        .with_port(i32::from(b.port))
                })
                .collect(),
        )
}
