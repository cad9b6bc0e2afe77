//! KIP-1279's inter-broker RPCs: ReadMirrorStates and WriteMirrorStates (a partition leader
//! asking the broker that leads its `__mirror_state` shard) and BumpLeaderEpochs (a partition
//! leader asking the controller to raise leader epochs).
//!
//! All three need CLUSTER_ACTION on the cluster (docs/design.md §7): brokers call them, clients do
//! not. Read and write go to this broker's shards through the mirroring engine, split by the
//! shard that owns each partition; a write is answered once it is durable in `__mirror_state`.
//! BumpLeaderEpochs raises each partition's leader epoch to at least `MinLeaderEpoch + 1`
//! durably in the controller's log and answers the epoch afterwards.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kmirror_actors::engine::shard_service::{ServeReadMirrorStates, ServeWriteMirrorStates};
use kmirror_actors::engine::{Engine, EngineRequest};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    BumpLeaderEpochsRequest, BumpLeaderEpochsResponse, ReadMirrorStatesRequest,
    ReadMirrorStatesResponse, WriteMirrorStatesRequest, WriteMirrorStatesResponse,
    bump_leader_epochs_response,
};

/// The engine's answer, or the top-level error that stands for it.
async fn engine_answer<M: EngineRequest>(
    engine: Option<&Engine>,
    message: M,
) -> Result<M::Answer, (i16, String)> {
    let engine = engine.ok_or_else(|| {
        (
            ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
            "the mirroring engine is not running".to_string(),
        )
    })?;
    engine.ask(message).await.map_err(|e| (e.code.0, e.message))
}

pub(super) async fn read_states(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: ReadMirrorStatesRequest,
) -> ReadMirrorStatesResponse {
    if !access.cluster(Operation::ClusterAction) {
        return ReadMirrorStatesResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0,
            error_message: Some("CLUSTER_ACTION on the cluster is needed".into()),
            ..Default::default()
        };
    }
    engine_answer(engine, ServeReadMirrorStates(request))
        .await
        .unwrap_or_else(|(error_code, message)| ReadMirrorStatesResponse {
            error_code,
            error_message: Some(message),
            ..Default::default()
        })
}

pub(super) async fn write_states(
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: WriteMirrorStatesRequest,
) -> WriteMirrorStatesResponse {
    if !access.cluster(Operation::ClusterAction) {
        return WriteMirrorStatesResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0,
            error_message: Some("CLUSTER_ACTION on the cluster is needed".into()),
            ..Default::default()
        };
    }
    engine_answer(engine, ServeWriteMirrorStates(request))
        .await
        .unwrap_or_else(|(error_code, message)| WriteMirrorStatesResponse {
            error_code,
            error_message: Some(message),
            ..Default::default()
        })
}

pub(super) async fn bump_leader_epochs(
    broker: &Broker,
    access: &Access<'_>,
    request: BumpLeaderEpochsRequest,
) -> BumpLeaderEpochsResponse {
    if !access.cluster(Operation::ClusterAction) {
        return BumpLeaderEpochsResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0,
            error_message: Some("CLUSTER_ACTION on the cluster is needed".into()),
            ..Default::default()
        };
    }
    let names: Vec<Option<String>> = request
        .topics
        .iter()
        .map(|t| broker.topic_name(&t.topic_id))
        .collect();
    // Every partition of a known topic in one metadata write.
    let wanted: Vec<(String, i32, i32)> = request
        .topics
        .iter()
        .zip(&names)
        .filter_map(|(t, name)| Some((name.as_ref()?, &t.partitions)))
        .flat_map(|(name, partitions)| {
            partitions
                .iter()
                .map(|p| (name.clone(), p.partition_index, p.min_leader_epoch))
        })
        .collect();
    let count = wanted.len();
    let mut bumped = match broker.bump_leader_epochs(wanted).await {
        Ok(epochs) => epochs.into_iter().map(Ok).collect::<Vec<_>>(),
        Err(e) => vec![Err((e.error_code(), e.to_string())); count],
    }
    .into_iter();
    let topics = request
        .topics
        .into_iter()
        .zip(names)
        .map(|(topic, name)| {
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let outcome = match &name {
                        None => Err((
                            ErrorCode::UNKNOWN_TOPIC_ID.0,
                            "no topic has this id".to_string(),
                        )),
                        Some(_) => bumped.next().unwrap_or(Ok(None)).and_then(|epoch| {
                            epoch.ok_or_else(|| {
                                (
                                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
                                    "no such partition".to_string(),
                                )
                            })
                        }),
                    };
                    let (error_code, error_message, leader_epoch) = match outcome {
                        Ok(epoch) => (0, None, epoch),
                        Err((code, message)) => (code, Some(message), -1),
                    };
                    bump_leader_epochs_response::PartitionResult {
                        partition_index: p.partition_index,
                        error_code,
                        error_message,
                        leader_epoch,
                        ..Default::default()
                    }
                })
                .collect();
            bump_leader_epochs_response::TopicResult {
                topic_name: name.unwrap_or_default(),
                topic_id: topic.topic_id,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    BumpLeaderEpochsResponse {
        topics,
        ..Default::default()
    }
}
