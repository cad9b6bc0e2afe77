//! The MirrorSystem actor: the engine assembled on this broker. It owns the `__mirror_state`
//! shard actors (one per partition of the topic, all local on a single broker), one fetcher per
//! (mirror, source broker), and one supervised partition actor per mirrored partition.
//!
//! Starting a topic in a mirror (what StartMirrorTopics does) creates the destination topic
//! with the source topic's id and partition count and `mirror.name` set, starts its partition
//! actors and makes them leaders; changing what a topic should do (pause, resume, stop) sets
//! `mirror.name` the way DECISIONS.md 2 spells it and tells the partition actors.

use super::fetch::SourceFetcherPorts;
use super::partition::{BrokerPartitionPorts, MirrorPartitionSite};
use super::state_topic::{self, StateTopicPorts};
use crate::broker::Broker;
use actix::{
    Actor, ActorFutureExt, Addr, Context, Handler, Message, ResponseActFuture, Supervisor,
    WrapFuture,
};
use kmirror_actors::actor::{
    BecomeLeader, ChangeDesired, CoordinatorShard, DescribePartition, Fetcher, FetcherConfig,
    MirrorPartition, PartitionSnapshot,
};
use kmirror_actors::partition::{Desired, RetryPolicy};
use kmirror_protocol::client::{ClientError, ClusterMetadata, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Why a mirror request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct MirrorError {
    /// The KIP-1279 (or Kafka) error code.
    pub code: ErrorCode,
    /// For the operator.
    pub message: String,
}

impl MirrorError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        MirrorError {
            code,
            message: message.into(),
        }
    }
}

/// Registers a mirror: its name and a connected client of its source cluster.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct AddMirror {
    /// The mirror's name.
    pub name: String,
    /// The source cluster's client.
    pub source: Arc<SourceClient>,
}

/// Starts mirroring `topic` of the mirror's source.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct StartTopic {
    /// The mirror.
    pub mirror: String,
    /// The source topic (the destination topic gets the same name and id).
    pub topic: String,
}

/// Pause, resume or stop a mirrored topic.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct ChangeTopic {
    /// The mirror.
    pub mirror: String,
    /// The topic.
    pub topic: String,
    /// What it should do now.
    pub desired: Desired,
}

/// The partition snapshots of a mirrored topic, by partition.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<PartitionSnapshot>, MirrorError>")]
pub struct DescribeTopic {
    /// The mirror.
    pub mirror: String,
    /// The topic.
    pub topic: String,
}

type PartitionAddr = Addr<MirrorPartition<BrokerPartitionPorts>>;

struct MirrorRuntime {
    source: Arc<SourceClient>,
    source_cluster_id: String,
    fetchers: HashMap<i32, Addr<Fetcher<SourceFetcherPorts>>>,
    topics: BTreeMap<String, Vec<PartitionAddr>>,
}

/// The engine on one broker.
pub struct MirrorSystem {
    broker: Arc<Broker>,
    shards: Vec<Addr<CoordinatorShard<StateTopicPorts>>>,
    mirrors: HashMap<String, MirrorRuntime>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for MirrorSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSystem")
            .field("mirrors", &self.mirrors.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl MirrorSystem {
    /// The engine of `broker` (its actors start with the system).
    pub fn new(broker: Arc<Broker>, retry: RetryPolicy) -> Self {
        MirrorSystem {
            broker,
            shards: Vec::new(),
            mirrors: HashMap::new(),
            retry,
        }
    }

    /// `mirror.name` for a topic that should do `desired` (DECISIONS.md 2).
    fn mirror_name_value(mirror: &str, desired: Desired) -> String {
        match desired {
            Desired::Mirroring => mirror.to_string(),
            Desired::Paused => format!("{mirror}.paused"),
            Desired::Stopped => format!("{mirror}.removed"),
        }
    }
}

impl Actor for MirrorSystem {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        if let Err(e) = state_topic::ensure_topic(&self.broker) {
            tracing::error!(error = %e, "creating __mirror_state");
            return;
        }
        let count = self.broker.config().mirror_state_partitions;
        self.shards = (0..count)
            .map(|index| {
                CoordinatorShard::new(
                    index,
                    count,
                    StateTopicPorts::new(self.broker.clone(), index),
                )
                .start()
            })
            .collect();
    }
}

impl Handler<AddMirror> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: AddMirror, _: &mut Context<Self>) -> Self::Result {
        if self.mirrors.contains_key(&msg.name) {
            let exists = MirrorError::new(ErrorCode::MIRROR_ALREADY_EXISTS, "the mirror exists");
            return Box::pin(async move { Err(exists) }.into_actor(self));
        }
        let source = msg.source.clone();
        Box::pin(
            async move { source.cluster_id().await }
                .into_actor(self)
                .map(move |cluster_id, system, _| {
                    let source_cluster_id = cluster_id.map_err(|e| {
                        MirrorError::new(ErrorCode(-1), format!("the source cluster: {e}"))
                    })?;
                    system.mirrors.insert(
                        msg.name,
                        MirrorRuntime {
                            source: msg.source,
                            source_cluster_id,
                            fetchers: HashMap::new(),
                            topics: BTreeMap::new(),
                        },
                    );
                    Ok(())
                }),
        )
    }
}

impl Handler<StartTopic> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: StartTopic, _: &mut Context<Self>) -> Self::Result {
        let Some(runtime) = self.mirrors.get(&msg.mirror) else {
            let unknown = MirrorError::new(ErrorCode::UNKNOWN_MIRROR, "no such mirror");
            return Box::pin(async move { Err(unknown) }.into_actor(self));
        };
        let source = runtime.source.clone();
        let topic = msg.topic.clone();
        Box::pin(
            async move { source.metadata(Some(&[topic.as_str()])).await }
                .into_actor(self)
                .map(move |metadata, system, _| system.start_topic(msg, metadata)),
        )
    }
}

impl MirrorSystem {
    fn start_topic(
        &mut self,
        msg: StartTopic,
        metadata: Result<ClusterMetadata, ClientError>,
    ) -> Result<(), MirrorError> {
        let metadata = metadata
            .map_err(|e| MirrorError::new(ErrorCode(-1), format!("the source cluster: {e}")))?;
        let source_topic = metadata.topics.get(&msg.topic).ok_or_else(|| {
            MirrorError::new(
                ErrorCode(3),
                format!("the source has no topic {}", msg.topic),
            )
        })?;
        let broker = self.broker.clone();
        let shards = self.shards.clone();
        let retry = self.retry;
        let runtime = self
            .mirrors
            .get_mut(&msg.mirror)
            .ok_or_else(|| MirrorError::new(ErrorCode::UNKNOWN_MIRROR, "no such mirror"))?;
        if runtime.topics.contains_key(&msg.topic) {
            return Err(MirrorError::new(
                ErrorCode::TOPIC_ALREADY_IN_MIRROR,
                "the topic is mirrored already",
            ));
        }
        let configs = BTreeMap::from([("mirror.name".to_string(), msg.mirror.clone())]);
        let partitions = source_topic.partitions.len() as i32;
        broker
            .create_topic(&msg.topic, partitions, configs, Some(source_topic.topic_id))
            .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
        let mut actors = Vec::new();
        for p in &source_topic.partitions {
            let fetcher = runtime
                .fetchers
                .entry(p.leader)
                .or_insert_with(|| {
                    Fetcher::new(
                        SourceFetcherPorts::new(broker.clone(), runtime.source.clone(), p.leader),
                        FetcherConfig::default(),
                    )
                    .start()
                })
                .clone();
            let shard_index = mirror_partition_shard(
                &msg.mirror,
                &source_topic.topic_id,
                p.partition,
                shards.len() as i32,
            );
            let shard = shards
                .get(shard_index as usize)
                .cloned()
                .ok_or_else(|| MirrorError::new(ErrorCode(-1), "__mirror_state is not loaded"))?;
            let ports = BrokerPartitionPorts::new(
                MirrorPartitionSite {
                    mirror: msg.mirror.clone(),
                    topic: msg.topic.clone(),
                    topic_id: source_topic.topic_id,
                    partition: p.partition,
                    cluster_id: broker.cluster_id(),
                    source_cluster_id: runtime.source_cluster_id.clone(),
                },
                broker.clone(),
                runtime.source.clone(),
                shard,
                fetcher,
            );
            let actor =
                Supervisor::start(move |_| MirrorPartition::new(ports, retry, Box::new(rand_unit)));
            let leader_epoch = broker.leader_epoch(&msg.topic, p.partition).unwrap_or(0);
            let become_leader = actor.send(BecomeLeader {
                leader_epoch,
                desired: Desired::Mirroring,
            });
            actix::spawn(async move {
                if let Err(e) = become_leader.await {
                    tracing::error!(error = %e, "starting a mirror partition");
                }
            });
            actors.push(actor);
        }
        if let Some(runtime) = self.mirrors.get_mut(&msg.mirror) {
            runtime.topics.insert(msg.topic, actors);
        }
        Ok(())
    }

    fn partitions(&self, mirror: &str, topic: &str) -> Result<Vec<PartitionAddr>, MirrorError> {
        let runtime = self
            .mirrors
            .get(mirror)
            .ok_or_else(|| MirrorError::new(ErrorCode::UNKNOWN_MIRROR, "no such mirror"))?;
        runtime.topics.get(topic).cloned().ok_or_else(|| {
            MirrorError::new(
                ErrorCode::TOPIC_NOT_IN_MIRROR,
                "the topic is not in the mirror",
            )
        })
    }
}

/// A uniform draw in `[0, 1)` for retry jitter.
fn rand_unit() -> f64 {
    rand::random::<f64>()
}

impl Handler<ChangeTopic> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: ChangeTopic, _: &mut Context<Self>) -> Self::Result {
        let prepared = self.partitions(&msg.mirror, &msg.topic).and_then(|actors| {
            let mut configs = self
                .broker
                .topics()
                .get(&msg.topic)
                .map(|t| t.configs.clone())
                .unwrap_or_default();
            configs.insert(
                "mirror.name".to_string(),
                Self::mirror_name_value(&msg.mirror, msg.desired),
            );
            // `mirror.name` stays set (`<mirror>.removed` for a stop), so the topic stays
            // read-only until its partition actors reach STOPPED.
            self.broker
                .set_topic_configs(&msg.topic, configs)
                .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
            Ok(actors)
        });
        let desired = msg.desired;
        Box::pin(
            async move {
                for actor in prepared? {
                    actor
                        .send(ChangeDesired(desired))
                        .await
                        .map_err(|e| MirrorError::new(ErrorCode(-1), e.to_string()))?
                        .map_err(|e| {
                            MirrorError::new(ErrorCode::MIRROR_TOPIC_BEING_STOPPED, e.to_string())
                        })?;
                }
                Ok(())
            }
            .into_actor(self),
        )
    }
}

impl Handler<DescribeTopic> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<Vec<PartitionSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeTopic, _: &mut Context<Self>) -> Self::Result {
        let actors = self.partitions(&msg.mirror, &msg.topic);
        Box::pin(
            async move {
                let mut snapshots = Vec::new();
                for actor in actors? {
                    snapshots.push(
                        actor
                            .send(DescribePartition)
                            .await
                            .map_err(|e| MirrorError::new(ErrorCode(-1), e.to_string()))?,
                    );
                }
                Ok(snapshots)
            }
            .into_actor(self),
        )
    }
}
