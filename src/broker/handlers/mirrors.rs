//! The KIP-1279 admin and cross-cluster RPCs this broker serves so far: CreateMirror,
//! ListMirrors and DeleteMirror (mirrors are durable in the controller's log), and
//! LastMirroredEpochs (answered from this cluster's `__mirror_state`).
//!
//! CreateMirror checks every config the mirror will run with
//! ([`kmirror_actors::engine::mirror_configs::validate`]: INVALID_CONFIG naming the key) and refuses a
//! `mirror.source.cluster.id` that is this cluster's own id. Without one it asks the source
//! for its id, as `kmirror mirrors --create` does, refuses this cluster's the same way and
//! stores the id with the mirror; a source that does not answer is refused (INVALID_CONFIG
//! naming the key: given, the id creates the mirror while its source is down). Secrets in the
//! configs (`sasl.password`) are stored but never shown. With ValidateOnly (v1) nothing is
//! created: after the same authorization and name checks as a real create, the engine checks
//! the configs and the source from this broker ([`kmirror_actors::engine::validate`]) and the
//! response lists each check up to the first that failed. Authorization: CREATE on the
//! ClusterMirror resource for CreateMirror, DELETE for DeleteMirror, DESCRIBE for ListMirrors (a mirror the
//! principal may not describe is left out), CLUSTER_ACTION on the cluster for
//! LastMirroredEpochs.
//!
//! LastMirroredEpochs asks every mirror whose `mirror.source.cluster.id` is the asking cluster
//! (the one the local topic's `mirror.name` names first) and reads each partition's LME from
//! the `__mirror_state` shard that owns it, through the engine, wherever that shard is led;
//! no such mirror (or no record) answers -1, and a shard that cannot answer yet (loading,
//! moved) answers its error, never -1, since -1 makes the asking cluster copy everything again.

use super::access::Access;
use crate::acl::Operation;
use crate::broker::Broker;
use kmirror_actors::engine::Engine;
use kmirror_actors::engine::mirror_configs;
use kmirror_actors::engine::shard_service::{LmeAnswer, ReadLastMirroredEpochs};
use kmirror_actors::engine::validate::ValidateSource;
use kmirror_actors::host::TopicPartition;
use kmirror_actors::metadata::mirror_of;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    CreateMirrorRequest, CreateMirrorResponse, DeleteMirrorRequest, DeleteMirrorResponse,
    LastMirroredEpochsRequest, LastMirroredEpochsResponse, ListMirrorsRequest, ListMirrorsResponse,
    create_mirror_response, last_mirrored_epochs_response, list_mirrors_response,
};
use std::collections::{BTreeMap, HashMap};

fn refused(code: ErrorCode, message: impl Into<String>) -> (i16, Option<String>) {
    (code.0, Some(message.into()))
}

pub(super) async fn create(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: CreateMirrorRequest,
) -> CreateMirrorResponse {
    if request.validate_only {
        return validate(broker, engine, access, request).await;
    }
    let (error_code, error_message) = if !access.mirror(Operation::Create, &request.mirror_name) {
        refused(
            ErrorCode::MIRROR_AUTHORIZATION_FAILED,
            "CREATE on the mirror is needed",
        )
    } else {
        let configs: BTreeMap<String, String> = request
            .configs
            .into_iter()
            .filter_map(|c| c.value.map(|v| (c.name, v)))
            .collect();
        let checked =
            mirror_configs::validate(&configs, broker.config().mirror_num_replica_fetchers)
                .and_then(|settings| {
                    if let Some(source) = configs.get(SOURCE_CLUSTER_ID) {
                        mirror_configs::check_not_this_cluster(source, &broker.cluster_id())?
                    }
                    Ok(settings)
                });
        let created = match checked {
            Err(e) => Err(e.to_string()),
            Ok(settings) => with_source_cluster_id(broker, configs, settings.client)
                .await
                .map(|configs| (configs, settings.renamed)),
        };
        match created {
            Err(why) => refused(ErrorCode::INVALID_CONFIG, why),
            Ok((configs, renamed)) => {
                match broker.create_mirror(&request.mirror_name, configs).await {
                    Ok(()) => {
                        for (old, new) in renamed {
                            tracing::warn!(
                                mirror = request.mirror_name,
                                "{}",
                                mirror_configs::alias_warning(old, new)
                            );
                        }
                        (0, None)
                    }
                    Err(e) => (e.error_code(), Some(e.to_string())),
                }
            }
        }
    };
    CreateMirrorResponse {
        error_code,
        error_message,
        ..Default::default()
    }
}

/// The mirror config naming the cluster the mirror copies.
const SOURCE_CLUSTER_ID: &str = "mirror.source.cluster.id";

/// `configs` with [`SOURCE_CLUSTER_ID`]: as given, else the id the source answers with through
/// `client`, which must not be this cluster's; why not, naming the key.
async fn with_source_cluster_id(
    broker: &Broker,
    mut configs: BTreeMap<String, String>,
    client: ClientConfig,
) -> Result<BTreeMap<String, String>, String> {
    if configs.contains_key(SOURCE_CLUSTER_ID) {
        return Ok(configs);
    }
    let found = match SourceClient::connect(client).await {
        Ok(source) => source.cluster_id().await,
        Err(e) => Err(e),
    };
    let id = found.map_err(|e| {
        format!(
            "{SOURCE_CLUSTER_ID} is not set and the source did not tell its cluster id ({e}): \
             make bootstrap.servers reachable from this broker, or set {SOURCE_CLUSTER_ID}"
        )
    })?;
    mirror_configs::check_not_this_cluster(&id, &broker.cluster_id()).map_err(|e| e.to_string())?;
    configs.insert(SOURCE_CLUSTER_ID.to_string(), id);
    Ok(configs)
}

/// CreateMirror with ValidateOnly: a real create's refusals of the request itself (top-level
/// errors), then the engine's checks of the configs and the source; nothing is written.
async fn validate(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: CreateMirrorRequest,
) -> CreateMirrorResponse {
    let name = &request.mirror_name;
    let refusal = if !access.mirror(Operation::Create, name) {
        Some(refused(
            ErrorCode::MIRROR_AUTHORIZATION_FAILED,
            "CREATE on the mirror is needed",
        ))
    } else if !crate::controller::valid_mirror_name(name) {
        Some(refused(
            ErrorCode::INVALID_MIRROR_NAME,
            format!("invalid mirror name {name:?}"),
        ))
    } else if broker.mirrors().contains_key(name) {
        Some(refused(
            ErrorCode::MIRROR_ALREADY_EXISTS,
            format!("mirror {name} exists"),
        ))
    } else {
        None
    };
    let answer = match (refusal, engine) {
        (Some(refusal), _) => Err(refusal),
        (None, None) => Err(refused(
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "the mirroring engine is not running",
        )),
        (None, Some(engine)) => {
            let configs: BTreeMap<String, String> = request
                .configs
                .into_iter()
                .filter_map(|c| c.value.map(|v| (c.name, v)))
                .collect();
            engine
                .ask(ValidateSource { configs })
                .await
                .map_err(|e| (e.code.0, Some(e.message)))
        }
    };
    match answer {
        Ok(checks) => CreateMirrorResponse {
            checks: checks
                .into_iter()
                .map(|c| create_mirror_response::Check {
                    name: c.name.to_string(),
                    error_code: c.code.0,
                    error_message: Some(c.message),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
        Err((error_code, error_message)) => CreateMirrorResponse {
            error_code,
            error_message,
            ..Default::default()
        },
    }
}

pub(super) fn list(
    broker: &Broker,
    access: &Access<'_>,
    request: ListMirrorsRequest,
) -> ListMirrorsResponse {
    let mirrors = broker
        .mirrors()
        .into_iter()
        .filter(|(name, _)| access.mirror(Operation::Describe, name))
        .map(|(name, configs)| {
            let topics = broker.mirror_topics(&name);
            list_mirrors_response::ListedMirror {
                source_bootstrap: configs
                    .get("bootstrap.servers")
                    .cloned()
                    .unwrap_or_default(),
                source_cluster_id: configs
                    .get("mirror.source.cluster.id")
                    .cloned()
                    .unwrap_or_default(),
                topic_count: topics.len() as i32,
                topic_names: if request.include_topic_names {
                    topics
                } else {
                    Vec::new()
                },
                mirror_name: name,
                ..Default::default()
            }
        })
        .collect();
    ListMirrorsResponse {
        mirrors,
        ..Default::default()
    }
}

pub(super) async fn delete(
    broker: &Broker,
    access: &Access<'_>,
    request: DeleteMirrorRequest,
) -> DeleteMirrorResponse {
    let (error_code, error_message) = if !access.mirror(Operation::Delete, &request.mirror_name) {
        refused(
            ErrorCode::MIRROR_AUTHORIZATION_FAILED,
            "DELETE on the mirror is needed",
        )
    } else {
        match broker.delete_mirror(&request.mirror_name).await {
            Ok(()) => (0, None),
            Err(e) => (e.error_code(), Some(e.to_string())),
        }
    };
    DeleteMirrorResponse {
        error_code,
        error_message,
        ..Default::default()
    }
}

pub(super) async fn last_mirrored_epochs(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: LastMirroredEpochsRequest,
) -> LastMirroredEpochsResponse {
    if !access.cluster(Operation::ClusterAction) {
        return LastMirroredEpochsResponse {
            error_code: ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0,
            ..Default::default()
        };
    }
    let mirrors: Vec<String> = broker
        .mirrors()
        .into_iter()
        .filter(|(_, configs)| configs.get("mirror.source.cluster.id") == Some(&request.cluster_id))
        .map(|(name, _)| name)
        .collect();
    let topics: Vec<(String, uuid::Uuid, Vec<i32>)> = request
        .topics
        .iter()
        .map(|t| (t.name.clone(), t.topic_id, t.partitions.clone()))
        .collect();
    // Every mirror of the asking cluster may hold a topic; each mirror's answers by partition.
    let mut answers: Vec<(String, HashMap<TopicPartition, LmeAnswer>)> = Vec::new();
    if !mirrors.is_empty() {
        let Some(engine) = engine else {
            return LastMirroredEpochsResponse {
                error_code: ErrorCode::COORDINATOR_NOT_AVAILABLE.0,
                error_message: Some("the mirroring engine is not running".into()),
                ..Default::default()
            };
        };
        for mirror in mirrors {
            let read = engine
                .ask(ReadLastMirroredEpochs {
                    mirror: mirror.clone(),
                    topics: topics.clone(),
                })
                .await;
            match read {
                Ok(lmes) => answers.push((mirror, lmes.into_iter().collect())),
                Err(e) => {
                    return LastMirroredEpochsResponse {
                        error_code: e.code.0,
                        error_message: Some(e.message),
                        ..Default::default()
                    };
                }
            }
        }
    }
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            // The mirror the local topic names (a stopped topic keeps `<mirror>.removed`) is
            // asked first.
            let named = broker
                .topic(&topic.name)
                .and_then(|t| t.configs.get("mirror.name").cloned())
                .and_then(|v| mirror_of(&v).map(|(m, _)| m.to_string()));
            answers.sort_by_key(|(m, _)| Some(m) != named.as_ref());
            let partitions = topic
                .partitions
                .iter()
                .map(|&index| {
                    let key = TopicPartition::new(topic.name.clone(), index);
                    let mut out = last_mirrored_epochs_response::Partition {
                        partition_index: index,
                        ..Default::default()
                    };
                    for (_, lmes) in &answers {
                        match lmes.get(&key) {
                            Some(Ok(Some(lme))) => {
                                out.last_mirrored_epoch = *lme;
                                out.error_code = 0;
                                break;
                            }
                            // Not known yet is not "none": the asking cluster asks again
                            // (a mirror asked later must not answer for this one).
                            Some(Err(code)) => {
                                out.error_code = code.0;
                                break;
                            }
                            _ => {}
                        }
                    }
                    out
                })
                .collect();
            last_mirrored_epochs_response::Topic {
                name: topic.name,
                topic_id: topic.topic_id,
                partitions,
                ..Default::default()
            }
        })
        .collect();
    LastMirroredEpochsResponse {
        topics,
        ..Default::default()
    }
}
