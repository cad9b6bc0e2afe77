//! OffsetCommit and OffsetFetch: committed offsets, durable in the group coordinator's log.
//! OffsetFetch with `RequireStable` answers UNSTABLE_OFFSET_COMMIT for a partition whose offset
//! an ongoing transaction is committing. OffsetCommit needs READ on the group and each topic;
//! OffsetFetch DESCRIBE on both (topics the principal may not see are left out of "all").

use super::access::{Access, GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED};
use crate::acl::Operation;
use crate::broker::Broker;
use crate::groups::Committed;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;

pub(super) fn commit(
    broker: &Broker,
    access: &Access,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let group_allowed = access.group(Operation::Read, &group);
    let mut topics = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let denied = if !group_allowed {
            Some(GROUP_AUTHORIZATION_FAILED)
        } else if !access.topic(Operation::Read, &name) {
            Some(TOPIC_AUTHORIZATION_FAILED)
        } else {
            None
        };
        if let Some(code) = denied {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            topics.push(
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
            continue;
        }
        let (known, unknown): (Vec<_>, Vec<_>) = topic
            .partitions
            .into_iter()
            .partition(|p| broker.partition(&name, p.partition_index).is_some());
        let offsets: Vec<(String, i32, Committed)> = known
            .iter()
            .map(|p| {
                let committed = Committed {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                };
                (name.clone(), p.partition_index, committed)
            })
            .collect();
        let errors = broker.groups().commit(
            &group,
            request.generation_id_or_member_epoch,
            &request.member_id,
            offsets,
        );
        let partitions = known
            .iter()
            .zip(errors)
            .map(|(p, error)| (p.partition_index, error))
            .chain(
                unknown
                    .iter()
                    .map(|p| (p.partition_index, UNKNOWN_TOPIC_OR_PARTITION)),
            )
            .map(|(index, error)| {
                OffsetCommitResponsePartition::default()
                    .with_partition_index(index)
                    .with_error_code(error)
            })
            .collect();
        topics.push(
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    OffsetCommitResponse::default().with_topics(topics)
}

fn partition_answer(index: i32, committed: Option<&Committed>) -> OffsetFetchResponsePartition {
    let answer = OffsetFetchResponsePartition::default().with_partition_index(index);
    match committed {
        Some(c) => answer
            .with_committed_offset(c.offset)
            .with_committed_leader_epoch(c.leader_epoch)
            .with_metadata(Some(StrBytes::from_string(
                c.metadata.clone().unwrap_or_default(),
            ))),
        // Kafka's "no committed offset": -1 with no error.
        None => answer
            .with_committed_offset(-1)
            .with_committed_leader_epoch(-1)
            .with_metadata(Some(StrBytes::default())),
    }
}

pub(super) fn fetch(
    broker: &Broker,
    access: &Access,
    request: OffsetFetchRequest,
) -> OffsetFetchResponse {
    let group = request.group_id.0.to_string();
    if !access.group(Operation::Describe, &group) {
        return OffsetFetchResponse::default().with_error_code(GROUP_AUTHORIZATION_FAILED);
    }
    let committed = broker.groups().committed(&group);
    let topics = match request.topics {
        // Every committed offset of the group.
        None => {
            let mut by_topic: BTreeMap<String, Vec<OffsetFetchResponsePartition>> = BTreeMap::new();
            for ((topic, index), c) in committed
                .iter()
                .filter(|((topic, _), _)| access.topic(Operation::Describe, topic))
            {
                by_topic
                    .entry(topic.clone())
                    .or_default()
                    .push(partition_answer(*index, Some(c)));
            }
            by_topic
                .into_iter()
                .map(|(name, partitions)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name)))
                        .with_partitions(partitions)
                })
                .collect()
        }
        Some(topics) => topics
            .into_iter()
            .map(|t| {
                let name = t.name.0.to_string();
                let partitions = t
                    .partition_indexes
                    .iter()
                    .map(|i| {
                        if !access.topic(Operation::Describe, &name) {
                            return OffsetFetchResponsePartition::default()
                                .with_partition_index(*i)
                                .with_committed_offset(-1)
                                .with_error_code(TOPIC_AUTHORIZATION_FAILED);
                        }
                        let answer = partition_answer(*i, committed.get(&(name.clone(), *i)));
                        // A READ_COMMITTED consumer waits for a transaction's offsets to settle.
                        if request.require_stable
                            && broker.transactions().has_pending_offsets(&group, &name, *i)
                        {
                            answer.with_error_code(UNSTABLE_OFFSET_COMMIT)
                        } else {
                            answer
                        }
                    })
                    .collect();
                OffsetFetchResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect(),
    };
    OffsetFetchResponse::default().with_topics(topics)
}
