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
/// failure.
pub(crate) async fn check_now(
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
