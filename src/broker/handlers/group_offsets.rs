//! OffsetCommit and OffsetFetch: committed offsets, durable in the group coordinator's log.
//! OffsetFetch with `RequireStable` answers UNSTABLE_OFFSET_COMMIT for a partition whose offset
//! an ongoing transaction is committing. OffsetCommit needs READ on the group and each topic;
//! OffsetFetch DESCRIBE on both (topics the principal may not see are left out of "all").
//! In a KIP-848 consumer group a member commits and fetches with its current member epoch
//! (OffsetCommit v9, OffsetFetch v9): a newer one is FENCED_MEMBER_EPOCH, an older one
//! STALE_MEMBER_EPOCH; a commit without a member is only for an empty group.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use crate::broker::coordinators::CoordinatorKind;
use crate::groups::Committed;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

pub(super) async fn commit(
    broker: &Broker,
    access: &Access<'_>,
    request: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group = request.group_id.0.to_string();
    let group_allowed = access.group(Operation::Read, &group);
    let mut topics = Vec::new();
    let mut staged = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let denied = if !group_allowed {
            Some(ErrorCode::GROUP_AUTHORIZATION_FAILED.0)
        } else if !broker.coordinates(CoordinatorKind::Group, &group) {
            Some(ErrorCode::NOT_COORDINATOR.0)
        } else if !access.topic(Operation::Read, &name) {
            Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0)
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
            .partition(|p| broker.partition_exists(&name, p.partition_index));
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
        let (errors, written) = broker.groups().commit_staged(
            &group,
            request.generation_id_or_member_epoch,
            &request.member_id,
            offsets,
        );
        staged.extend(written);
        let partitions = known
            .iter()
            .zip(errors)
            .map(|(p, error)| (p.partition_index, error))
            .chain(
                unknown
                    .iter()
                    .map(|p| (p.partition_index, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)),
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
    // Answered once the group's partition replicas hold the commit (a new coordinator has it).
    let written = |p: &&mut OffsetCommitResponsePartition| p.error_code == 0;
    let any_written = topics
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut())
        .any(|p| written(&p));
    if any_written {
        match broker.group_writes_replicated(&group).await {
            Ok(()) => staged
                .into_iter()
                .for_each(|s| broker.groups().apply_staged(s)),
            Err(code) => topics
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .filter(written)
                .for_each(|p| p.error_code = code),
        }
    }
    OffsetCommitResponse::default().with_topics(topics)
}

/// A [`Fetched`] as one of OffsetFetch's two partition types (before v8, and from v8 on),
/// which have the same fields.
macro_rules! fetched_as {
    ($partition:ty, $f:expr) => {{
        let f: Fetched = $f;
        <$partition>::default()
            .with_partition_index(f.index)
            .with_committed_offset(f.offset)
            .with_committed_leader_epoch(f.leader_epoch)
            .with_metadata(f.metadata)
            .with_error_code(f.error)
    }};
}

/// One partition's answer to OffsetFetch, before it takes the shape of the request's version.
struct Fetched {
    index: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<StrBytes>,
    error: i16,
}

fn partition_answer(index: i32, committed: Option<&Committed>) -> Fetched {
    match committed {
        Some(c) => Fetched {
            index,
            offset: c.offset,
            leader_epoch: c.leader_epoch,
            metadata: Some(StrBytes::from_string(
                c.metadata.clone().unwrap_or_default(),
            )),
            error: 0,
        },
        // Kafka's "no committed offset": -1 with no error.
        None => Fetched {
            index,
            offset: -1,
            leader_epoch: -1,
            metadata: Some(StrBytes::default()),
            error: 0,
        },
    }
}

/// The committed offsets of one group: every one when `topics` is None. `member` (OffsetFetch
/// v9+) must be a current member of a consumer group at that epoch.
fn fetch_group(
    broker: &Broker,
    access: &Access<'_>,
    group: &str,
    topics: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
    member: Option<(&str, i32)>,
) -> (i16, Vec<(TopicName, Vec<Fetched>)>) {
    if !access.group(Operation::Describe, group) {
        return (ErrorCode::GROUP_AUTHORIZATION_FAILED.0, Vec::new());
    }
    if !broker.coordinates(CoordinatorKind::Group, group) {
        return (ErrorCode::NOT_COORDINATOR.0, Vec::new());
    }
    if let Some((member_id, epoch)) = member {
        let error = broker
            .groups()
            .validate_offset_fetch(group, member_id, epoch);
        if error != 0 {
            return (error, Vec::new());
        }
    }
    let committed = broker.groups().committed(group);
    let topics = match topics {
        None => {
            let mut by_topic: BTreeMap<String, Vec<Fetched>> = BTreeMap::new();
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
                .map(|(name, partitions)| (TopicName(StrBytes::from_string(name)), partitions))
                .collect()
        }
        Some(topics) => topics
            .into_iter()
            .map(|(topic, indexes)| {
                let name = topic.0.to_string();
                let partitions = indexes
                    .iter()
                    .map(|i| {
                        if !access.topic(Operation::Describe, &name) {
                            return Fetched {
                                index: *i,
                                offset: -1,
                                leader_epoch: -1,
                                metadata: None,
                                error: ErrorCode::TOPIC_AUTHORIZATION_FAILED.0,
                            };
                        }
                        let mut answer = partition_answer(*i, committed.get(&(name.clone(), *i)));
                        // A READ_COMMITTED consumer waits for a transaction's offsets to settle.
                        if require_stable && broker.groups().has_pending(group, &name, *i) {
                            answer.error = ErrorCode::UNSTABLE_OFFSET_COMMIT.0;
                        }
                        answer
                    })
                    .collect();
                (topic, partitions)
            })
            .collect(),
    };
    (0, topics)
}

/// OffsetFetch: one group at the top level before v8, a list of groups from v8 on.
pub(super) fn fetch(
    broker: &Broker,
    access: &Access<'_>,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version < 8 {
        let topics = request.topics.map(|ts| {
            ts.into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect()
        });
        let (error, topics) = fetch_group(
            broker,
            access,
            &request.group_id.0,
            topics,
            request.require_stable,
            None,
        );
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                OffsetFetchResponseTopic::default()
                    .with_name(name)
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|f| fetched_as!(OffsetFetchResponsePartition, f))
                            .collect(),
                    )
            })
            .collect();
        return OffsetFetchResponse::default()
            .with_error_code(error)
            .with_topics(topics);
    }
    let groups = request
        .groups
        .into_iter()
        .map(|g| {
            let topics = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let member_id = g.member_id.as_ref().map(|m| m.to_string());
            let member = match (&member_id, g.member_epoch) {
                (None, epoch) if epoch < 0 => None,
                (id, epoch) => Some((id.as_deref().unwrap_or_default(), epoch)),
            };
            let (error, topics) = fetch_group(
                broker,
                access,
                &g.group_id.0,
                topics,
                request.require_stable,
                member,
            );
            let topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    OffsetFetchResponseTopics::default()
                        .with_name(name)
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|f| fetched_as!(OffsetFetchResponsePartitions, f))
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id)
                .with_error_code(error)
                .with_topics(topics)
        })
        .collect();
    OffsetFetchResponse::default().with_groups(groups)
}
