//! Whether the source topic under a mirror topic's name is still the topic the mirror copies.
//!
//! A source topic deleted, or deleted and created again under the same name (another topic
//! id), is not a source the local copy may be aligned with: the engine never truncates what it
//! cannot prove is a copy of the source (docs/failover.md). Fetches from Fetch v13 on name
//! topics by id and are answered UNKNOWN_TOPIC_ID for another topic; older fetches name them by
//! name, so what could change the local log (PREPARING's alignment, a fetcher attaching, a
//! truncation a fetch answer asks for) checks the topic here first. Sources whose metadata has
//! no topic ids (below Metadata v10) can only be checked by name.
//!
//! The cluster is checked before the topic: a source address that now reaches another cluster
//! (its `cluster_id` not the mirror's `mirror.source.cluster.id`) has none of the mirror's
//! topics, and the reason an operator must see is the wrong cluster, not deleted topics.

use crate::host::Source;
use crate::partition::Cause;
use kmirror_protocol::client::source::ClusterMetadata;
use kmirror_protocol::errors::ErrorCode;
use std::sync::OnceLock;
use uuid::Uuid;

/// The verdict on the source's `metadata` for `topic`, which the mirror copies as topic
/// `topic_id`, partition `partition`: fatal when the cluster is not `expected_cluster` (once
/// known), or the topic is gone, is another topic, or lost the partition.
pub(crate) fn check(
    metadata: &ClusterMetadata,
    expected_cluster: &OnceLock<String>,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<(), Cause> {
    if let (Some(expected), Some(found)) = (expected_cluster.get(), metadata.cluster_id.as_deref())
    {
        super::sync_plan::check_source_cluster(expected, found).map_err(Cause::fatal)?;
    }
    // A topic the source refused to describe (not authorized after an ACL change, no leader
    // yet) is not a deleted one: only UNKNOWN_TOPIC_OR_PARTITION (or no entry) says it is gone.
    if let Some(code) = metadata
        .refused
        .get(topic)
        .filter(|code| **code != ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    {
        return Err(Cause::retryable(format!(
            "the source answered {code} for the metadata of topic {topic}"
        )));
    }
    let Some(found) = metadata.topics.get(topic) else {
        return Err(Cause::fatal(format!(
            "the source topic {topic} was deleted; the local copy is kept"
        )));
    };
    if !found.topic_id.is_nil() && !topic_id.is_nil() && found.topic_id != topic_id {
        return Err(Cause::fatal(format!(
            "the source topic {topic} was deleted and created again (its id is {}, this mirror \
             copies {}); the local copy is kept",
            kmirror_protocol::topic_id::to_kafka_string(&found.topic_id),
            kmirror_protocol::topic_id::to_kafka_string(&topic_id)
        )));
    }
    if found.partitions.len() <= partition as usize {
        return Err(Cause::fatal(format!(
            "the source topic {topic} has no partition {partition}; the local copy is kept"
        )));
    }
    Ok(())
}

/// [`check`] on the source's metadata now; a source that does not answer is a retryable
/// failure, and so is a topic that one lookup finds gone but the next, [`CONFIRM_AFTER`] later,
/// does not: a broker whose metadata lags (a ZooKeeper-mode source) answers
/// UNKNOWN_TOPIC_OR_PARTITION for a topic that exists, and a fatal verdict must hold twice.
pub(crate) async fn check_now(
    source: &impl Source,
    expected_cluster: &OnceLock<String>,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<(), Cause> {
    let first = look_up(source, expected_cluster, topic, topic_id, partition).await;
    confirm(first, source, expected_cluster, topic, topic_id, partition).await
}

/// [`check`] on the source's metadata asked now.
async fn look_up(
    source: &impl Source,
    expected_cluster: &OnceLock<String>,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<(), Cause> {
    let metadata = source
        .metadata(Some(&[topic]))
        .await
        .map_err(|e| super::cause(&e))?;
    check(&metadata, expected_cluster, topic, topic_id, partition)
}

/// How long a fatal verdict waits before it is asked again.
pub(crate) const CONFIRM_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A fatal verdict of [`check`] stands only if the source's metadata [`CONFIRM_AFTER`] later
/// gives one too; anything else is retried.
pub(crate) async fn confirm(
    first: Result<(), Cause>,
    source: &impl Source,
    expected_cluster: &OnceLock<String>,
    topic: &str,
    topic_id: Uuid,
    partition: i32,
) -> Result<(), Cause> {
    let first = match first {
        Err(cause) if !cause.retryable => cause,
        other => return other,
    };
    tokio::time::sleep(CONFIRM_AFTER).await;
    match look_up(source, expected_cluster, topic, topic_id, partition).await {
        Err(second) => Err(second),
        Ok(()) => Err(Cause::retryable(format!(
            "the source's metadata disagreed about topic {topic} (first: {}); asked again",
            first.message
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kmirror_protocol::client::source::{PartitionMetadata, TopicMetadata};
    use std::collections::HashMap;

    fn metadata(
        topic: Option<(&str, Uuid)>,
        refused: Option<(&str, ErrorCode)>,
    ) -> ClusterMetadata {
        ClusterMetadata {
            cluster_id: Some("src".into()),
            brokers: HashMap::new(),
            topics: topic
                .map(|(name, id)| {
                    let partition = PartitionMetadata {
                        partition: 0,
                        leader: 1,
                        leader_epoch: 0,
                        replicas: vec![1],
                        isr: vec![1],
                    };
                    let t = TopicMetadata {
                        name: name.into(),
                        topic_id: id,
                        partitions: vec![partition],
                    };
                    HashMap::from([(name.to_string(), t)])
                })
                .unwrap_or_default(),
            refused: refused
                .map(|(name, code)| HashMap::from([(name.to_string(), code)]))
                .unwrap_or_default(),
        }
    }

    /// Engine review finding 11: a topic the source refuses to describe (not authorized after an
    /// ACL change, no leader yet) is retried, not failed for good as "deleted". Failed before the
    /// fix: every refused topic read as deleted, non-retryable.
    #[test]
    fn only_an_unknown_topic_is_gone() {
        let cluster = OnceLock::new();
        let id = Uuid::from_u128(9);
        let unauthorized = metadata(None, Some(("t", ErrorCode::TOPIC_AUTHORIZATION_FAILED)));
        let cause = check(&unauthorized, &cluster, "t", id, 0).expect_err("not usable");
        assert!(cause.retryable, "{cause:?}");
        let unknown = metadata(None, Some(("t", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)));
        let cause = check(&unknown, &cluster, "t", id, 0).expect_err("gone");
        assert!(!cause.retryable, "{cause:?}");
        assert!(check(&metadata(Some(("t", id)), None), &cluster, "t", id, 0).is_ok());
    }
}
