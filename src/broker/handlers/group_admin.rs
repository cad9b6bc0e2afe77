//! ListGroups, DescribeGroups and DeleteGroups: what `kafka-consumer-groups.sh` shows and does.
//! ListGroups shows the groups the principal may DESCRIBE (all of them with DESCRIBE on the
//! cluster); DescribeGroups needs DESCRIBE and DeleteGroups DELETE on each group.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::broker::coordinators::CoordinatorKind;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, ListGroupsRequest, ListGroupsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;

pub(super) fn list(
    broker: &Broker,
    access: &Access<'_>,
    request: ListGroupsRequest,
) -> ListGroupsResponse {
    let everything = access.cluster(Operation::Describe);
    broker.groups().expire_consumer_members();
    let groups = broker
        .groups()
        .list()
        .into_iter()
        .filter(|g| everything || access.group(Operation::Describe, &g.group_id))
        .filter(|g| {
            request.states_filter.is_empty()
                || request
                    .states_filter
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(g.state))
        })
        .map(|g| {
            ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(g.group_id)))
                .with_protocol_type(StrBytes::from_string(g.protocol_type))
                .with_group_state(StrBytes::from_static_str(g.state))
                .with_group_type(StrBytes::from_static_str(g.group_type))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub(super) fn describe(
    broker: &Broker,
    access: &Access<'_>,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .into_iter()
        .map(|id| {
            if !access.group(Operation::Describe, &id.0) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ErrorCode::GROUP_AUTHORIZATION_FAILED.0);
            }
            if !broker.coordinates(CoordinatorKind::Group, &id.0) {
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ErrorCode::NOT_COORDINATOR.0);
            }
            let Some(group) = broker.groups().describe(&id.0) else {
                // Kafka describes an unknown group as Dead with no members.
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_group_state(StrBytes::from_static_str("Dead"));
            };
            if group.group_type() == "consumer" {
                // As Kafka: DescribeGroups is for classic groups; admin tools describe a
                // consumer group with ConsumerGroupDescribe.
                let message = format!("Group {} is not a classic group", id.0);
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ErrorCode::GROUP_ID_NOT_FOUND.0)
                    .with_error_message(Some(StrBytes::from_string(message)));
            }
            let protocol = group.protocol.clone().unwrap_or_default();
            let members = group
                .members
                .iter()
                .map(|(member_id, m)| {
                    let metadata = m
                        .protocols
                        .iter()
                        .find(|(n, _)| *n == protocol)
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default();
                    DescribedGroupMember::default()
                        .with_member_id(StrBytes::from_string(member_id.clone()))
                        .with_client_id(StrBytes::from_string(m.client_id.clone()))
                        .with_client_host(StrBytes::from_string(m.client_host.clone()))
                        .with_member_metadata(metadata)
                        .with_member_assignment(m.assignment.clone())
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_group_state(StrBytes::from_static_str(group.state.name()))
                .with_protocol_type(StrBytes::from_string(group.protocol_type.clone()))
                .with_protocol_data(StrBytes::from_string(protocol))
                .with_members(members)
                .with_authorized_operations(i32::MIN)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

pub(super) async fn delete(
    broker: &Broker,
    access: &Access<'_>,
    request: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::new();
    for id in request.groups_names {
        let error = if !access.group(Operation::Delete, &id.0) {
            ErrorCode::GROUP_AUTHORIZATION_FAILED.0
        } else if !broker.coordinates(CoordinatorKind::Group, &id.0) {
            ErrorCode::NOT_COORDINATOR.0
        } else {
            match broker.groups().delete(&id.0) {
                // Answered once the group's partition replicas hold the deletion.
                0 => broker
                    .group_writes_replicated(&id.0)
                    .await
                    .err()
                    .unwrap_or(0),
                refused => refused,
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(error),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
