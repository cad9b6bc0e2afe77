//! ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848's consumer group protocol
//! (`group.protocol=consumer`), decided by [`crate::groups::consumer`]. This shell turns topic
//! ids into names and back, authorizes, and hands the member a fresh id when a v0 client joins
//! without one (v1 clients pick their own). A heartbeat needs READ on the group; a regex
//! subscription only matches topics the principal may DESCRIBE. ConsumerGroupDescribe needs
//! DESCRIBE on each group and answers GROUP_ID_NOT_FOUND for classic groups, as Kafka does, so
//! admin tools fall back to DescribeGroups.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::coordinators::CoordinatorKind;
use crate::broker::{Broker, internal_topics};
use crate::groups::assignors::Partitions;
use crate::groups::consumer::{Heartbeat, TopicsView};
use kafka_protocol::messages::consumer_group_describe_response::{
    self as describe_response, DescribedGroup, Member,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{self as heartbeat_response};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;
use uuid::Uuid;

/// Every topic: name -> (id, partitions, whether the principal's regex may match it: not
/// internal, DESCRIBE allowed). Named subscriptions see all topics, so members with different
/// rights agree on the group's topics (the fetch and commit checks guard the data).
fn topics_view(broker: &Broker, access: &Access) -> TopicsView {
    broker
        .topics()
        .into_iter()
        .map(|(name, meta)| {
            let visible =
                !internal_topics::is_internal(&name) && access.topic(Operation::Describe, &name);
            let id = meta.topic_id.to_string();
            (name, (id, meta.partitions.len() as i32, visible))
        })
        .collect()
}

fn ids_of(view: &TopicsView) -> BTreeMap<&str, Uuid> {
    view.iter()
        .filter_map(|(name, (id, _, _))| Some((name.as_str(), id.parse().ok()?)))
        .collect()
}

fn heartbeat_error(code: i16, message: String) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

pub(super) fn heartbeat(
    broker: &Broker,
    access: &Access,
    request: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> ConsumerGroupHeartbeatResponse {
    let group = request.group_id.0.to_string();
    if group.is_empty() {
        return heartbeat_error(
            ErrorCode::INVALID_REQUEST.0,
            "GroupId can't be empty".into(),
        );
    }
    if !access.group(Operation::Read, &group) {
        return heartbeat_error(
            ErrorCode::GROUP_AUTHORIZATION_FAILED.0,
            format!("group {group}"),
        );
    }
    if !broker.coordinates(CoordinatorKind::Group, &group) {
        return heartbeat_error(
            ErrorCode::NOT_COORDINATOR.0,
            format!("this broker does not coordinate group {group}"),
        );
    }
    let mut member_id = request.member_id.to_string();
    if member_id.is_empty() {
        if version >= 1 || request.member_epoch != 0 {
            return heartbeat_error(
                ErrorCode::INVALID_REQUEST.0,
                "MemberId can't be empty".into(),
            );
        }
        member_id = Uuid::new_v4().to_string();
    }
    let view = topics_view(broker, access);
    let names: BTreeMap<Uuid, &str> = ids_of(&view).into_iter().map(|(n, id)| (id, n)).collect();
    // Owned partitions of topics since deleted are dropped: nobody can own them.
    let owned = request.topic_partitions.map(|topics| {
        let mut owned = Partitions::new();
        for t in topics {
            if let Some(name) = names.get(&t.topic_id) {
                owned
                    .entry(name.to_string())
                    .or_default()
                    .extend(t.partitions);
            }
        }
        owned
    });
    let input = Heartbeat {
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|s| s.to_string()),
        rack_id: request.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        subscribed_topic_regex: request.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: request.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    };
    match broker.groups().consumer_heartbeat(&group, input, &view) {
        Err((code, message)) => heartbeat_error(code, message),
        Ok(answer) => {
            let ids = ids_of(&view);
            let assignment = answer.assignment.map(|partitions| {
                let topics = partitions
                    .into_iter()
                    .filter_map(|(name, ps)| {
                        Some(
                            heartbeat_response::TopicPartitions::default()
                                .with_topic_id(*ids.get(name.as_str())?)
                                .with_partitions(ps.into_iter().collect()),
                        )
                    })
                    .collect();
                heartbeat_response::Assignment::default().with_topic_partitions(topics)
            });
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(StrBytes::from_string(answer.member_id)))
                .with_member_epoch(answer.member_epoch)
                .with_heartbeat_interval_ms(broker.groups().consumer_heartbeat_interval_ms())
                .with_assignment(assignment)
        }
    }
}

fn described(partitions: &Partitions, ids: &BTreeMap<&str, Uuid>) -> describe_response::Assignment {
    let topics = partitions
        .iter()
        .filter_map(|(name, ps)| {
            Some(
                describe_response::TopicPartitions::default()
                    .with_topic_id(*ids.get(name.as_str())?)
                    .with_topic_name(TopicName(StrBytes::from_string(name.clone())))
                    .with_partitions(ps.iter().copied().collect()),
            )
        })
        .collect();
    describe_response::Assignment::default().with_topic_partitions(topics)
}

pub(super) fn describe(
    broker: &Broker,
    access: &Access,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    broker.groups().expire_consumer_members();
    let view = topics_view(broker, access);
    let ids = ids_of(&view);
    let groups = request
        .group_ids
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
            let group = broker.groups().describe(&id.0);
            let Some((group, consumer)) = group.and_then(|g| {
                let consumer = g.consumer.clone()?;
                g.members.is_empty().then_some((g, consumer))
            }) else {
                let message = format!("Group {} is not a consumer group", id.0);
                return DescribedGroup::default()
                    .with_group_id(id)
                    .with_error_code(ErrorCode::GROUP_ID_NOT_FOUND.0)
                    .with_error_message(Some(StrBytes::from_string(message)));
            };
            let state = &consumer.state;
            let members = state
                .members
                .iter()
                .map(|(member_id, m)| {
                    let target = state.target.get(member_id).cloned().unwrap_or_default();
                    Member::default()
                        .with_member_id(StrBytes::from_string(member_id.clone()))
                        .with_instance_id(m.instance_id.clone().map(StrBytes::from_string))
                        .with_rack_id(m.rack_id.clone().map(StrBytes::from_string))
                        .with_member_epoch(m.member_epoch)
                        .with_client_id(StrBytes::from_string(m.client_id.clone()))
                        .with_client_host(StrBytes::from_string(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed_topic_names
                                .iter()
                                .map(|t| TopicName(StrBytes::from_string(t.clone())))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(
                            m.subscribed_topic_regex.clone().map(StrBytes::from_string),
                        )
                        .with_assignment(described(&m.assigned, &ids))
                        .with_target_assignment(described(&target, &ids))
                        .with_member_type(1)
                })
                .collect();
            DescribedGroup::default()
                .with_group_id(id)
                .with_group_state(StrBytes::from_static_str(group.state_name()))
                .with_group_epoch(state.group_epoch)
                .with_assignment_epoch(state.assignment_epoch)
                .with_assignor_name(StrBytes::from_string(state.assignor.clone()))
                .with_members(members)
                .with_authorized_operations(i32::MIN)
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
