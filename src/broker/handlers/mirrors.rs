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
use kmirror_actors::MirrorState;
use kmirror_actors::coordinator::StateRead;
use kmirror_actors::engine::Engine;
use kmirror_actors::engine::lme_lookup::{LookupLmes, SOURCE_CLUSTER_ID};
use kmirror_actors::engine::mirror_configs;
use kmirror_actors::engine::shard_service::ReadPartitionStates;
use kmirror_actors::engine::validate::ValidateSource;
use kmirror_actors::metadata::mirror_of;
use kmirror_actors::partition::Desired;
use kmirror_actors::policy::MirrorError;
use kmirror_actors::policy::refusal::state_validation_offset;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    CreateMirrorRequest, CreateMirrorResponse, DeleteMirrorRequest, DeleteMirrorResponse,
    LastMirroredEpochsRequest, LastMirroredEpochsResponse, ListMirrorsRequest, ListMirrorsResponse,
    create_mirror_response, last_mirrored_epochs_response, list_mirrors_response,
};
use std::collections::BTreeMap;

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
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
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
            ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
            "CREATE on the mirror is needed",
        ))
    } else if !crate::controller::valid_mirror_name(name) {
        let invalid = crate::controller::ControllerError::InvalidMirrorName(name.clone());
        Some((invalid.error_code(), Some(invalid.to_string())))
    } else if broker.mirrors().contains_key(name) {
        Some(refused(
            ErrorCode::CLUSTER_MIRROR_ALREADY_EXISTS,
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

/// DeleteClusterMirror: the KIP's workflow is stop, then delete, so a mirror goes once each of
/// its topics is STOPPED (its partitions too, not merely asked to stop); the stopped topics stay
/// as ordinary writable topics (docs/failover.md).
pub(super) async fn delete(
    broker: &Broker,
    engine: Option<&Engine>,
    access: &Access<'_>,
    request: DeleteMirrorRequest,
) -> DeleteMirrorResponse {
    let name = &request.mirror_name;
    let (error_code, error_message) =
        if let Err(e) = state_validation_offset(request.state_validation_offset) {
            (e.code.0, Some(e.message))
        } else if !access.mirror(Operation::Delete, name) {
            refused(
                ErrorCode::CLUSTER_MIRROR_AUTHORIZATION_FAILED,
                "DELETE on the mirror is needed",
            )
        } else {
            match all_stopped(broker, engine, name).await {
                Err(refusal) => refusal,
                Ok(()) => match broker.delete_mirror(name).await {
                    Ok(()) => (0, None),
                    Err(e) => (e.error_code(), Some(e.to_string())),
                },
            }
        };
    DeleteMirrorResponse {
        error_code,
        error_message,
        ..Default::default()
    }
}

/// Whether every partition of every topic of `mirror` is STOPPED, as the shards recorded it;
/// the refusal to answer if not. The controller checks again that every topic is asked to stop
/// when it deletes the mirror, so a start racing the delete loses one way or the other.
async fn all_stopped(
    broker: &Broker,
    engine: Option<&Engine>,
    mirror: &str,
) -> Result<(), (i16, Option<String>)> {
    if !broker.mirrors().contains_key(mirror) {
        return Ok(()); // the controller answers UNKNOWN_CLUSTER_MIRROR
    }
    let mut asked = Vec::new();
    let mut not_stopped = Vec::new();
    for topic in broker.mirror_topics(mirror) {
        let Some(meta) = broker.topic(&topic) else {
            continue;
        };
        let value = meta.configs.get("mirror.name").cloned().unwrap_or_default();
        if mirror_of(&value).map(|(_, desired)| desired) != Some(Desired::Stopped) {
            not_stopped.push(topic);
            continue;
        }
        asked.push((
            topic,
            meta.topic_id,
            (0..meta.partitions.len() as i32).collect(),
        ));
    }
    if !not_stopped.is_empty() {
        return Err(refused(
            ErrorCode::CLUSTER_MIRROR_NOT_EMPTY,
            format!(
                "mirror {mirror} still has topics that are not stopped: {}; stop them first",
                not_stopped.join(", ")
            ),
        ));
    }
    if asked.is_empty() {
        return Ok(());
    }
    let Some(engine) = engine else {
        return Err(refused(
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "the mirroring engine is not running",
        ));
    };
    let read = engine
        .ask(ReadPartitionStates {
            mirror: mirror.to_string(),
            topics: asked,
        })
        .await
        .map_err(|e| (e.code.0, Some(e.message)))?;
    let mut stopping = Vec::new();
    for (partition, answer) in read {
        match answer {
            Err(code) => {
                return Err(refused(
                    code,
                    format!("the state of {partition} could not be read; try again"),
                ));
            }
            Ok(StateRead {
                stored: Some(stored),
                ..
            }) if stored.state == MirrorState::Stopped => {}
            Ok(read) => stopping.push(format!(
                "{partition} ({})",
                read.stored.map_or("UNKNOWN", |s| s.state.name())
            )),
        }
    }
    if stopping.is_empty() {
        Ok(())
    } else {
        Err(refused(
            ErrorCode::CLUSTER_MIRROR_NOT_EMPTY,
            format!(
                "mirror {mirror} has partitions that are not STOPPED yet: {}; wait until --describe shows them STOPPED",
                stopping.join(", ")
            ),
        ))
    }
}

pub(super) async fn last_mirrored_epochs(
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
    let asked = request
        .topics
        .into_iter()
        .map(|t| (t.name, t.topic_id, t.partitions))
        .collect();
    let lookup = LookupLmes {
        asking: request.cluster_id,
        topics: asked,
    };
    let found = match engine {
        Some(engine) => engine.ask(lookup).await,
        None => Err(MirrorError::engine_not_running()),
    };
    match found {
        Err(e) => LastMirroredEpochsResponse {
            error_code: e.code.0,
            error_message: Some(e.message),
            ..Default::default()
        },
        Ok(found) => LastMirroredEpochsResponse {
            topics: found
                .into_iter()
                .map(
                    |(name, topic_id, partitions)| last_mirrored_epochs_response::Topic {
                        name,
                        topic_id,
                        partitions: partitions
                            .into_iter()
                            .map(|(partition_index, lme)| {
                                let (last_mirrored_epoch, error_code) = match lme {
                                    Ok(lme) => (lme, 0),
                                    Err(code) => (-1, code.0),
                                };
                                last_mirrored_epochs_response::Partition {
                                    partition_index,
                                    last_mirrored_epoch,
                                    error_code,
                                    ..Default::default()
                                }
                            })
                            .collect(),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        },
    }
}
