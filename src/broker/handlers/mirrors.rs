//! The KIP-1279 admin and cross-cluster RPCs this broker serves so far: CreateMirror,
//! ListMirrors and DeleteMirror (mirrors are durable in the controller's log), and
//! LastMirroredEpochs (answered from this cluster's `__mirror_state`).
//!
//! CreateMirror checks every config the mirror will run with
//! ([`crate::mirror::mirror_configs::validate`]: INVALID_CONFIG naming the key) and refuses a
//! `mirror.source.cluster.id` that is this cluster's own id (`kmirror mirrors --create` fills it
//! from the cluster `bootstrap.servers` reach); secrets in the configs (`sasl.password`) are
//! stored but never shown. Authorization: CREATE on the ClusterMirror
//! resource for CreateMirror, DELETE for DeleteMirror, DESCRIBE for ListMirrors (a mirror the
//! principal may not describe is left out), CLUSTER_ACTION on the cluster for
//! LastMirroredEpochs.
//!
//! LastMirroredEpochs asks every mirror whose `mirror.source.cluster.id` is the asking cluster
//! (the one the local topic's `mirror.name` names first) and reads each partition's LME by
//! replaying the `__mirror_state` partition of its shard (by the state topic's partition
//! count); no such mirror (or no record) answers -1.

use super::access::{Access, CLUSTER_AUTHORIZATION_FAILED};
use crate::acl::Operation;
use crate::broker::Broker;
use crate::mirror::mirror_configs;
use crate::mirror::state_topic::MIRROR_STATE_TOPIC;
use kmirror_actors::coordinator::Shard;
use kmirror_actors::metadata::mirror_of;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    CreateMirrorRequest, CreateMirrorResponse, DeleteMirrorRequest, DeleteMirrorResponse,
    LastMirroredEpochsRequest, LastMirroredEpochsResponse, ListMirrorsRequest, ListMirrorsResponse,
    last_mirrored_epochs_response, list_mirrors_response,
};
use kmirror_protocol::records::coordinator_records;
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::{BTreeMap, HashMap};

fn refused(code: ErrorCode, message: impl Into<String>) -> (i16, Option<String>) {
    (code.0, Some(message.into()))
}

pub(super) fn create(
    broker: &Broker,
    access: &Access,
    request: CreateMirrorRequest,
) -> CreateMirrorResponse {
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
                .and_then(|_| match configs.get("mirror.source.cluster.id") {
                    Some(source) => {
                        mirror_configs::check_not_this_cluster(source, &broker.cluster_id())
                    }
                    None => Ok(()),
                });
        match checked {
            Err(e) => refused(ErrorCode::INVALID_CONFIG, e.to_string()),
            Ok(()) => match broker.create_mirror(&request.mirror_name, configs) {
                Ok(()) => (0, None),
                Err(e) => (e.error_code(), Some(e.to_string())),
            },
        }
    };
    CreateMirrorResponse {
        error_code,
        error_message,
        ..Default::default()
    }
}

pub(super) fn list(
    broker: &Broker,
    access: &Access,
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

pub(super) fn delete(
    broker: &Broker,
    access: &Access,
    request: DeleteMirrorRequest,
) -> DeleteMirrorResponse {
    let (error_code, error_message) = if !access.mirror(Operation::Delete, &request.mirror_name) {
        refused(
            ErrorCode::MIRROR_AUTHORIZATION_FAILED,
            "DELETE on the mirror is needed",
        )
    } else {
        match broker.delete_mirror(&request.mirror_name) {
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

/// Replays one `__mirror_state` partition into a shard.
fn replay_shard(broker: &Broker, index: i32, count: i32) -> Option<Shard> {
    let partition = broker.partition(MIRROR_STATE_TOPIC, index)?;
    let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
    let mut shard = Shard::new(index, count);
    let replayed = log.for_each_batch(log.log_start_offset(), |batch| {
        if let Ok(records) = coordinator_records(batch) {
            for record in &records {
                shard.replay(record);
            }
        }
        Ok(())
    });
    if let Err(e) = replayed {
        tracing::error!(error = %e, "reading __mirror_state");
        return None;
    }
    shard.loaded();
    Some(shard)
}

pub(super) fn last_mirrored_epochs(
    broker: &Broker,
    access: &Access,
    request: LastMirroredEpochsRequest,
) -> LastMirroredEpochsResponse {
    if !access.cluster(Operation::ClusterAction) {
        return LastMirroredEpochsResponse {
            error_code: CLUSTER_AUTHORIZATION_FAILED,
            ..Default::default()
        };
    }
    // Every mirror of the asking cluster may hold the topic: the one the local topic names
    // (a stopped topic keeps `<mirror>.removed`) is asked first.
    let mut mirrors: Vec<String> = broker
        .mirrors()
        .into_iter()
        .filter(|(_, configs)| configs.get("mirror.source.cluster.id") == Some(&request.cluster_id))
        .map(|(name, _)| name)
        .collect();
    // The shard of a partition is decided by the state topic's partition count, which the
    // broker's config only sets when the topic is created.
    let count = broker
        .topic(MIRROR_STATE_TOPIC)
        .map_or(0, |t| t.partitions.len() as i32);
    let mut shards: HashMap<i32, Option<Shard>> = HashMap::new();
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let named = broker
                .topic(&topic.name)
                .and_then(|t| t.configs.get("mirror.name").cloned())
                .and_then(|v| mirror_of(&v).map(|(m, _)| m.to_string()));
            mirrors.sort_by_key(|m| Some(m) != named.as_ref());
            let partitions = topic
                .partitions
                .iter()
                .map(|&index| {
                    let lme = mirrors
                        .iter()
                        .filter(|_| count > 0)
                        .map(|mirror| {
                            let shard =
                                mirror_partition_shard(mirror, &topic.topic_id, index, count);
                            shards
                                .entry(shard)
                                .or_insert_with(|| replay_shard(broker, shard, count))
                                .as_ref()
                                .map_or(-1, |s| s.last_mirrored_epoch(mirror, &topic.name, index))
                        })
                        .find(|lme| *lme >= 0)
                        .unwrap_or(-1);
                    last_mirrored_epochs_response::Partition {
                        partition_index: index,
                        last_mirrored_epoch: lme,
                        ..Default::default()
                    }
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
