//! FindCoordinator: the broker coordinating each group or transactional id
//! ([`crate::broker::coordinators`]); in a multi-process cluster the first request for a kind
//! creates its coordinator topic. Other key types (share groups) get COORDINATOR_NOT_AVAILABLE,
//! so those clients fail clearly. Needs DESCRIBE on the group or transactional id.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::broker::coordinators::CoordinatorKind;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

const GROUP_KEY_TYPE: i8 = 0;
const TRANSACTION_KEY_TYPE: i8 = 1;

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let keys = if version >= 4 {
        request.coordinator_keys.clone()
    } else {
        vec![request.key.clone()]
    };
    let mut coordinators = Vec::with_capacity(keys.len());
    for key in keys {
        coordinators.push(answer(broker, access, request.key_type, key).await);
    }
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = coordinators.remove(0);
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_error_message(c.error_message)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}

/// The coordinator of one key, or why there is none.
async fn answer(broker: &Broker, access: &Access<'_>, key_type: i8, key: StrBytes) -> Coordinator {
    let refused = |code: ErrorCode, message: Option<&'static str>| {
        Coordinator::default()
            .with_key(key.clone())
            .with_node_id(BrokerId(-1))
            .with_port(-1)
            .with_error_code(code.0)
            .with_error_message(message.map(StrBytes::from_static_str))
    };
    let kind = match key_type {
        GROUP_KEY_TYPE if !access.group(Operation::Describe, &key) => {
            return refused(ErrorCode::GROUP_AUTHORIZATION_FAILED, None);
        }
        TRANSACTION_KEY_TYPE if !access.transactional_id(Operation::Describe, &key) => {
            return refused(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None);
        }
        GROUP_KEY_TYPE => CoordinatorKind::Group,
        TRANSACTION_KEY_TYPE => CoordinatorKind::Transaction,
        _ => {
            return refused(
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                Some("this broker coordinates groups and transactions only"),
            );
        }
    };
    let node = match broker.find_coordinator(kind, &key).await {
        Ok(node) => node,
        Err(code) => return refused(ErrorCode(code), None),
    };
    let Some(endpoint) = broker.brokers().into_iter().find(|b| b.node_id == node) else {
        return refused(ErrorCode::COORDINATOR_NOT_AVAILABLE, None);
    };
    Coordinator::default()
        .with_key(key.clone())
        .with_node_id(BrokerId(node))
        .with_host(StrBytes::from_string(endpoint.host))
        .with_port(i32::from(endpoint.port))
}
