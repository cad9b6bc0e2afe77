//! KIP-1279's topic RPCs, answered by the mirroring engine: StartMirrorTopics,
//! StopMirrorTopics, PauseMirrorTopics, ResumeMirrorTopics and DescribeMirrors (with the KIP
//! prototype's failback lookup in its tagged fields).
//!
//! Each handler decodes, authorizes, asks the engine and encodes: the rules (patterns, the
//! discard confirmation, which pause, resume or stop a topic allows) are the engine's
//! (`kmirror_actors::engine::topic_requests`, docs/design.md §7). A topic change needs ALTER on
//! the mirror (DESCRIBE for DescribeMirrors); the engine asks this broker's ACLs for
//! ALTER_CONFIGS on each topic and, for patterns, on the mirror.

use super::access::Access;
use crate::acl::{Operation, ResourceType};
use crate::broker::Broker;
use kmirror_actors::engine::Engine;
use kmirror_actors::engine::describe::{CutQuery, DescribeMirrors, DescribedMirror, PartitionView};
use kmirror_actors::engine::lme_lookup::LookupLmes;
use kmirror_actors::engine::local_writes::records;
use kmirror_actors::engine::topic_requests::{ChangeTopics, StartTopics, TopicAccess, TopicResult};
use kmirror_actors::partition::Desired;
use kmirror_actors::policy::MirrorError;
use kmirror_actors::policy::refusal::state_validation_offset;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::describe_mirrors_response as response;
use kmirror_protocol::messages::{
    DescribeMirrorsRequest, DescribeMirrorsResponse, PauseMirrorTopicsRequest,
    PauseMirrorTopicsResponse, ResumeMirrorTopicsRequest, ResumeMirrorTopicsResponse,
    StartMirrorTopicsRequest, StartMirrorTopicsResponse, StopMirrorTopicsRequest,
    StopMirrorTopicsResponse, describe_mirrors_request, pause_mirror_topics_response,
    resume_mirror_topics_response, start_mirror_topics_response, stop_mirror_topics_response,
};
use std::sync::Arc;

/// The checks every topic RPC makes before the engine sees it, and what the engine may ask.
fn admitted(
    broker: &Arc<Broker>,
    access: &Access<'_>,
    mirror: &str,
    state_validation: i64,
) -> Result<TopicAccess, MirrorError> {
    state_validation_offset(state_validation)?;
    if !access.mirror(Operation::Alter, mirror) {
        return Err(MirrorError::new(
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
            "ALTER on the mirror is needed",
        ));
    }
    Ok(TopicAccess {
        alter_topic_configs: access.of_every(broker, Operation::AlterConfigs, ResourceType::Topic),
        alter_mirror_configs: access.mirror(Operation::AlterConfigs, mirror),
    })
}

/// A topic RPC's handler: the checks of [`admitted`], the engine's request `$ask` makes of the
/// decoded request and the access, and the response (each RPC has its own generated types, of
/// one shape). The top-level error is the request's own, else the first topic's with the topic
/// named (as the KIP prototype's schemas say), so a client that reads only it sees a refusal.
macro_rules! topic_rpc {
    ($name:ident, $request:ident, $response:ident, $module:ident, $ask:expr) => {
        pub(super) async fn $name(
            broker: &Arc<Broker>,
            engine: Option<&Engine>,
            access: &Access<'_>,
            request: $request,
        ) -> $response {
            let answer = async {
                let offset = request.state_validation_offset;
                let access = admitted(broker, access, &request.mirror_name, offset)?;
                engine
                    .ok_or_else(MirrorError::engine_not_running)?
                    .ask($ask(request, access))
                    .await
            };
            let (error, topics) = match answer.await {
                Ok(topics) => (first_refusal(&topics), topics),
                Err(e) => (Some(e), Vec::new()),
            };
            $response {
                error_code: error.as_ref().map_or(0, |e| e.code.0),
                error_message: error.map(|e| e.message),
                topics: topics
                    .into_iter()
                    .map(|t| $module::TopicResult {
                        name: t.topic,
                        error_code: t.error.as_ref().map_or(0, |e| e.code.0),
                        error_message: t.error.map(|e| e.message),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }
        }
    };
}

/// The first topic's refusal, naming the topic.
fn first_refusal(topics: &[TopicResult]) -> Option<MirrorError> {
    topics.iter().find_map(|t| {
        let e = t.error.as_ref()?;
        Some(MirrorError::new(
            e.code,
            format!("{}: {}", t.topic, e.message),
        ))
    })
}

/// The topics a request names.
macro_rules! named {
    ($request:expr) => {
        $request.topics.into_iter().map(|t| t.topic_name).collect()
    };
}

topic_rpc!(
    start_topics,
    StartMirrorTopicsRequest,
    StartMirrorTopicsResponse,
    start_mirror_topics_response,
    |r: StartMirrorTopicsRequest, access| StartTopics {
        mirror: r.mirror_name,
        topics: named!(r),
        include: r.include_patterns,
        exclude: r.exclude_patterns,
        discard_local_records: r.discard_local_records,
        access,
    }
);

topic_rpc!(
    stop_topics,
    StopMirrorTopicsRequest,
    StopMirrorTopicsResponse,
    stop_mirror_topics_response,
    |r: StopMirrorTopicsRequest, access| ChangeTopics {
        mirror: r.mirror_name,
        topics: named!(r),
        patterns: r.patterns,
        desired: Desired::Stopped,
        cut_timestamp_ms: (r.cut_timestamp_ms >= 0).then_some(r.cut_timestamp_ms),
        access,
    }
);

topic_rpc!(
    pause_topics,
    PauseMirrorTopicsRequest,
    PauseMirrorTopicsResponse,
    pause_mirror_topics_response,
    |r: PauseMirrorTopicsRequest, access| ChangeTopics {
        mirror: r.mirror_name,
        topics: named!(r),
        patterns: Vec::new(),
        desired: Desired::Paused,
        cut_timestamp_ms: None,
        access,
    }
);

topic_rpc!(
    resume_topics,
    ResumeMirrorTopicsRequest,
    ResumeMirrorTopicsResponse,
    resume_mirror_topics_response,
    |r: ResumeMirrorTopicsRequest, access| ChangeTopics {
        mirror: r.mirror_name,
        topics: named!(r),
        patterns: Vec::new(),
        desired: Desired::Mirroring,
        cut_timestamp_ms: None,
        access,
    }
);

pub(super) async fn describe(
    broker: &Arc<Broker>,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: DescribeMirrorsRequest,
) -> DescribeMirrorsResponse {
    let answer = async {
        let engine = engine.ok_or_else(MirrorError::engine_not_running)?;
        let lookup_results = match (&request.cluster_id, &request.last_mirror_epoch_lookups) {
            (Some(asking), lookups) if !lookups.is_empty() => {
                if !access.cluster(Operation::ClusterAction) {
                    return Err(MirrorError::new(
                        ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
                        "the failback lookup needs CLUSTER_ACTION",
                    ));
                }
                failback_lookup(engine, asking, lookups).await?
            }
            _ => Vec::new(),
        };
        let cut = match (request.include_stop_cut, request.cut_timestamp_ms) {
            (false, _) => CutQuery::No,
            (true, ..0) => CutQuery::Stop,
            (true, t) => CutQuery::Consistent(t),
        };
        let asked = DescribeMirrors {
            names: request.mirror_names,
            cut,
            may_describe: access.of_every(broker, Operation::Describe, ResourceType::ClusterMirror),
        };
        let mirrors = engine.ask(asked).await?;
        Ok(DescribeMirrorsResponse {
            mirrors: mirrors.into_iter().map(described_mirror).collect(),
            lookup_results,
            ..Default::default()
        })
    };
    answer
        .await
        .unwrap_or_else(|e: MirrorError| DescribeMirrorsResponse {
            error_code: e.code.0,
            error_message: Some(e.message),
            ..Default::default()
        })
}

/// One mirror as DescribeMirrors carries it.
fn described_mirror((mirror_name, topics): DescribedMirror) -> response::DescribedMirror {
    let (topics, error) = match topics {
        Ok(topics) => (topics, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    response::DescribedMirror {
        mirror_name,
        error_code: error.as_ref().map_or(0, |e| e.code.0),
        error_message: error.map(|e| e.message),
        topics: topics
            .into_iter()
            .map(|t| response::DescribedTopic {
                topic_name: t.topic,
                topic_id: t.topic_id,
                partitions: t.partitions.into_iter().map(described_partition).collect(),
                stop_cut_timestamp_ms: t.stop_cut_timestamp_ms.unwrap_or(-1),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// One partition as DescribeMirrors carries it (-1 where a figure is not known).
fn described_partition(view: PartitionView) -> response::DescribedPartition {
    response::DescribedPartition {
        partition_index: view.partition,
        state: view.snapshot.state.name().to_string(),
        source_offset: view.source_offset.unwrap_or(-1),
        destination_offset: view.log_end_offset,
        lag: view.lag().unwrap_or(-1),
        retry_attempt: view.snapshot.retry_attempt,
        error_message: view.snapshot.error,
        lag_time_ms: view.lag_ms.unwrap_or(-1),
        truncated_at_stop_records: records(view.truncated.at_stop),
        truncated_at_start_records: records(view.truncated.at_start),
        source_high_watermark: view.source_high_watermark.unwrap_or(-1),
        destination_last_stable_offset: view.last_stable_offset,
        local_records: view.local_records.map_or(-1, records),
        skipped_offsets: records(view.skipped_offsets),
        stop_cut_offset: view.stop_cut.map_or(-1, |c| c.offset),
        stop_cut_records: view.stop_cut.map_or(-1, |c| records(c.records)),
        stop_cut_open_transactions: view.stop_cut.map_or(-1, |c| records(c.open_transactions)),
        mirrored_through_ms: view.mirrored_through_ms.unwrap_or(-1),
        ..Default::default()
    }
}

/// The KIP prototype's failback lookup, carried by DescribeClusterMirrors' tagged fields: the
/// engine's answer ([`LookupLmes`]) by topic id. Its results have no per-partition error, so a
/// partition whose shard cannot answer yet fails the whole request (retriable), never -1; a
/// topic id this cluster does not have answers -1.
async fn failback_lookup(
    engine: &Engine,
    asking: &str,
    lookups: &[describe_mirrors_request::LastMirrorEpochLookup],
) -> Result<Vec<response::LastMirrorEpochLookupResult>, MirrorError> {
    let topics = lookups
        .iter()
        .map(|l| (String::new(), l.topic_id, l.partitions.clone()))
        .collect();
    let asking = asking.to_string();
    let found = engine.ask(LookupLmes { asking, topics }).await?;
    found
        .into_iter()
        .map(|(name, topic_id, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition_index, lme)| {
                    let last_mirror_epoch = lme.map_err(|code| {
                        let why = format!("the last mirror epoch of {name}-{partition_index} cannot be read yet; ask again");
                        MirrorError::new(code, why)
                    })?;
                    Ok(response::LastMirrorEpochPartitionResult {
                        partition_index,
                        last_mirror_epoch,
                        ..Default::default()
                    })
                })
                .collect::<Result<_, MirrorError>>()?;
            Ok(response::LastMirrorEpochLookupResult {
                topic_id,
                partitions,
                ..Default::default()
            })
        })
        .collect()
}
