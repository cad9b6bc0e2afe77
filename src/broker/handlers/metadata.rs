//! Metadata: the cluster's brokers and id, and topics with ids, leaders and leader epochs. Asking
//! for an unknown topic creates it when `auto.create.topics.enable` and the request allow it
//! (and the principal may CREATE). Topics the principal may not DESCRIBE are left out of "all
//! topics" and answered TOPIC_AUTHORIZATION_FAILED when named. An internal topic's name is never
//! auto-created: named while it does not exist, it is answered INVALID_REQUEST (see
//! [`crate::broker::internal_topics`]).

use super::access::Access;
use crate::acl::Operation;
use crate::broker::{Broker, internal_topics};
use crate::controller::{ANY_NODE, TopicMeta};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::{BTreeMap, BTreeSet};

/// A topic as clients see it: a partition without a leader, or whose leader is fenced, is
/// answered LEADER_NOT_AVAILABLE with leader -1 until one is elected; its replicas and ISR
/// as the metadata has them, fenced replicas listed offline.
fn topic_entry(
    name: &str,
    topic: &TopicMeta,
    node: i32,
    fenced: &BTreeSet<i32>,
) -> MetadataResponseTopic {
    // A partition placed before the cluster had brokers is this single node's.
    let node_of = |id: i32| BrokerId(if id == ANY_NODE { node } else { id });
    let leader = |p: &crate::controller::PartitionMeta| node_of(p.leader);
    let offline =
        |p: &crate::controller::PartitionMeta| !p.has_leader() || fenced.contains(&p.leader);
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_topic_id(topic.topic_id)
        .with_is_internal(internal_topics::is_internal(name))
        .with_partitions(
            topic
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    MetadataResponsePartition::default()
                        .with_partition_index(i as i32)
                        .with_error_code(if offline(p) {
                            ErrorCode::LEADER_NOT_AVAILABLE.0
                        } else {
                            0
                        })
                        .with_leader_id(if offline(p) { BrokerId(-1) } else { leader(p) })
                        .with_leader_epoch(p.leader_epoch)
                        .with_replica_nodes(p.replicas.iter().map(|&r| node_of(r)).collect())
                        .with_isr_nodes(p.isr.iter().map(|&r| node_of(r)).collect())
                        .with_offline_replicas(
                            p.replicas
                                .iter()
                                .filter(|r| fenced.contains(r))
                                .map(|&r| node_of(r))
                                .collect(),
                        )
                })
                .collect(),
        )
}

pub(super) async fn handle(
    broker: &Broker,
    access: &Access<'_>,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let node = broker.config().node_id;
    let fenced = broker.fenced_brokers();
    // Named topics are looked up one by one: a broker with many topics copies only those asked.
    let wanted: Option<Vec<String>> = request.topics.map(|ts| {
        ts.into_iter()
            .filter_map(|t| match t.name {
                Some(n) => Some(n.0.to_string()),
                None => broker.topic_name(&t.topic_id),
            })
            .collect()
    });
    // Versions 0-3 always allow auto-creation; later ones say so in the request.
    let may_create =
        broker.config().auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
    let mut answer = Vec::new();
    match wanted {
        None => {
            answer.extend(
                broker
                    .topics()
                    .iter()
                    .filter(|(name, _)| access.topic(Operation::Describe, name))
                    .map(|(name, t)| topic_entry(name, t, node, &fenced)),
            );
        }
        Some(names) => {
            for name in names {
                if !access.topic(Operation::Describe, &name) {
                    answer.push(
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(name))))
                            .with_error_code(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0),
                    );
                    continue;
                }
                let may_create_this = may_create
                    && (access.cluster(Operation::Create)
                        || access.topic(Operation::Create, &name));
                let mut topic = broker.topic(&name);
                if topic.is_none() && internal_topics::is_internal(&name) {
                    answer.push(
                        MetadataResponseTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(name))))
                            .with_error_code(ErrorCode::INVALID_REQUEST.0),
                    );
                    continue;
                }
                if topic.is_none() && may_create_this {
                    let created = broker
                        .create_topic(
                            &name,
                            broker.config().num_partitions,
                            -1,
                            BTreeMap::new(),
                            None,
                        )
                        .await;
                    match created {
                        Ok(created) => topic = Some(created),
                        Err(e) => tracing::warn!(topic = name, error = %e, "auto-creating a topic"),
                    }
                }
                match topic {
                    Some(t) => answer.push(topic_entry(&name, &t, node, &fenced)),
                    None => {
                        let code = if crate::controller::valid_topic_name(&name) {
                            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
                        } else {
                            ErrorCode::INVALID_TOPIC_EXCEPTION.0
                        };
                        answer.push(
                            MetadataResponseTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(name))))
                                .with_error_code(code),
                        );
                    }
                }
            }
        }
    }
    MetadataResponse::default()
        .with_brokers(
            broker
                .brokers()
                .into_iter()
                .filter(|b| !fenced.contains(&b.node_id))
                .map(|b| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.node_id))
                        .with_host(StrBytes::from_string(b.host))
                        .with_port(i32::from(b.port))
                })
                .collect(),
        )
        .with_cluster_id(Some(StrBytes::from_string(broker.cluster_id())))
        .with_controller_id(BrokerId(broker.controller_for_clients()))
        .with_topics(answer)
}
