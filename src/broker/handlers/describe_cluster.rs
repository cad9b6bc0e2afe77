//! DescribeCluster: the cluster id and this node. Needs DESCRIBE on the cluster.

use super::access::{Access, CLUSTER_AUTHORIZATION_FAILED};
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

pub(super) fn handle(broker: &Broker, access: &Access) -> DescribeClusterResponse {
    if !access.cluster(Operation::Describe) {
        return DescribeClusterResponse::default().with_error_code(CLUSTER_AUTHORIZATION_FAILED);
    }
    let (host, port) = broker.config().advertised.clone();
    let node = BrokerId(broker.config().node_id);
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(broker.cluster_id()))
        .with_controller_id(node)
        .with_brokers(vec![
            DescribeClusterBroker::default()
                .with_broker_id(node)
                .with_host(StrBytes::from_string(host))
                .with_port(i32::from(port)),
        ])
}
