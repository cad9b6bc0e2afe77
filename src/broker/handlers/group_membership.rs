//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic rebalance protocol, decided by
//! [`crate::groups::GroupCoordinator`]. Static membership (`group.instance.id`) is not served:
//! such members are treated as dynamic ones. A JoinGroup whose session timeout lies outside
//! `group.min.session.timeout.ms` .. `group.max.session.timeout.ms` is answered
//! INVALID_SESSION_TIMEOUT and joins nothing.

use crate::broker::Broker;
use crate::groups::JoinRequest;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::time::Duration;

fn millis(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

pub(super) async fn join(
    broker: &Broker,
    request: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> JoinGroupResponse {
    // Checked before anything else, as Kafka does: a member with a session the broker does not
    // allow never joins, so it cannot hold a rebalance for that long.
    if !broker
        .config()
        .group_session_timeout_ms
        .contains(&request.session_timeout_ms)
    {
        return JoinGroupResponse::default()
            .with_error_code(ErrorCode::INVALID_SESSION_TIMEOUT.0)
            .with_generation_id(-1)
            .with_member_id(request.member_id);
    }
    let rebalance_timeout = if version == 0 {
        request.session_timeout_ms
    } else {
        request.rebalance_timeout_ms
    };
    let result = broker
        .groups()
        .join(JoinRequest {
            group: request.group_id.0.to_string(),
            member_id: request.member_id.to_string(),
            require_known_member_id: version >= 4,
            client_id: client_id.to_string(),
            client_host: client_host.to_string(),
            session_timeout: millis(request.session_timeout_ms),
            rebalance_timeout: millis(rebalance_timeout),
            protocol_type: request.protocol_type.to_string(),
            protocols: request
                .protocols
                .into_iter()
                .map(|p| (p.name.to_string(), p.metadata))
                .collect(),
        })
        .await;
    let members = result
        .members
        .into_iter()
        .map(|(id, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(StrBytes::from_string(id))
                .with_metadata(metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_error_code(result.error)
        .with_generation_id(if result.error == 0 {
            result.generation
        } else {
            -1
        })
        .with_protocol_type(result.protocol_type.map(StrBytes::from_string))
        .with_protocol_name(result.protocol.map(StrBytes::from_string))
        .with_leader(StrBytes::from_string(result.leader))
        .with_member_id(StrBytes::from_string(result.member_id))
        .with_members(members)
}

pub(super) async fn sync(broker: &Broker, request: SyncGroupRequest) -> SyncGroupResponse {
    let group = request.group_id.0.to_string();
    let timeout = broker
        .groups()
        .rebalance_timeout(&group, &request.member_id);
    let (error, assignment) = broker
        .groups()
        .sync(
            &group,
            request.generation_id,
            &request.member_id,
            request
                .assignments
                .into_iter()
                .map(|a| (a.member_id.to_string(), a.assignment))
                .collect(),
            timeout,
        )
        .await;
    SyncGroupResponse::default()
        .with_error_code(error)
        .with_protocol_type(request.protocol_type)
        .with_protocol_name(request.protocol_name)
        .with_assignment(assignment)
}

pub(super) fn heartbeat(broker: &Broker, request: HeartbeatRequest) -> HeartbeatResponse {
    let error = broker.groups().heartbeat(
        &request.group_id.0,
        request.generation_id,
        &request.member_id,
    );
    HeartbeatResponse::default().with_error_code(error)
}

pub(super) fn leave(
    broker: &Broker,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group = request.group_id.0.to_string();
    if version < 3 {
        let errors = broker
            .groups()
            .leave(&group, &[request.member_id.to_string()]);
        return LeaveGroupResponse::default().with_error_code(errors.first().copied().unwrap_or(0));
    }
    let ids: Vec<String> = request
        .members
        .iter()
        .map(|m| m.member_id.to_string())
        .collect();
    let errors = broker.groups().leave(&group, &ids);
    let members = request
        .members
        .into_iter()
        .zip(errors)
        .map(|(m, error)| {
            MemberResponse::default()
                .with_member_id(m.member_id)
                .with_group_instance_id(m.group_instance_id)
                .with_error_code(error)
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}
