//! FindCoordinator: this node coordinates every group and every transactional id; other key
//! types (share groups) get COORDINATOR_NOT_AVAILABLE, so those clients fail clearly. Needs
//! DESCRIBE on the group or transactional id.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

const GROUP_KEY_TYPE: i8 = 0;
const TRANSACTION_KEY_TYPE: i8 = 1;

pub(super) fn handle(
    broker: &Broker,
    access: &Access,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    // One broker coordinates every group and transaction of the cluster.
    let coordinator = broker.coordinator_node();
    let (host, port) = broker
        .brokers()
        .into_iter()
        .find(|b| b.node_id == coordinator)
        .map_or_else(|| broker.config().advertised.clone(), |b| (b.host, b.port));
    let node = BrokerId(coordinator);
    let answer = |key: StrBytes| {
        let mut c = Coordinator::default().with_key(key.clone());
        let denied = match request.key_type {
            GROUP_KEY_TYPE if !access.group(Operation::Describe, &key) => {
                Some(ErrorCode::GROUP_AUTHORIZATION_FAILED.0)
            }
            TRANSACTION_KEY_TYPE if !access.transactional_id(Operation::Describe, &key) => {
                Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED.0)
            }
            _ => None,
        };
        if let Some(code) = denied {
            c = c
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code);
        } else if request.key_type == GROUP_KEY_TYPE || request.key_type == TRANSACTION_KEY_TYPE {
            c = c
                .with_node_id(node)
                .with_host(StrBytes::from_string(host.clone()))
                .with_port(i32::from(port));
        } else {
            c = c
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(ErrorCode::COORDINATOR_NOT_AVAILABLE.0)
                .with_error_message(Some(StrBytes::from_static_str(
                    "this broker coordinates groups and transactions only",
                )));
        }
        c
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .cloned()
            .map(answer)
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = answer(request.key.clone());
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_error_message(c.error_message)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}
