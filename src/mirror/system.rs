//! The MirrorSystem actor: the engine assembled on this broker. It owns the `__mirror_state`
//! shard actors (one per partition of the topic, all local on a single broker; the topic is
//! created when the first mirror is loaded), one fetcher per (mirror, source broker), and one
//! supervised partition actor per mirrored partition.
//!
//! Starting a topic in a mirror (what StartMirrorTopics does) creates the destination topic
//! with the source topic's id and partition count and `mirror.name` set, starts its partition
//! actors and makes them leaders; changing what a topic should do (pause, resume, stop) sets
//! `mirror.name` the way DECISIONS.md 2 spells it and tells the partition actors.
//!
//! Restart: when the system starts it loads every mirror of the controller (connecting to its
//! source with the mirror's configs) and starts the partition actors of every topic whose
//! `mirror.name` names it, with the desired state the suffix says; each actor reloads its state
//! from `__mirror_state` and resumes (a MIRRORING partition fetches from its log end).
//!
//! Supervision: every [`LivenessPolicy::check_interval_ms`] the system observes each partition
//! actor and lets its [`SupervisedPartition`] restart it (stalled), create it again (dead) or
//! give up on it (FAILED) once its restart budget is spent.

use super::fetch::SourceFetcherPorts;
use super::partition::{BrokerPartitionPorts, MirrorPartitionSite};
use super::state_topic::{self, StateTopicPorts};
use crate::broker::Broker;
use actix::{
    Actor, ActorFutureExt, Addr, AsyncContext, Context, Handler, Message, ResponseActFuture,
    WrapFuture,
};
use kmirror_actors::actor::{
    BecomeLeader, CoordinatorShard, DeleteMirror, DescribePartition, Fetcher, FetcherConfig,
    ForgetTopic, MirrorPartition, PartitionSnapshot, ReadMirrorStates, SupervisedPartition,
    WriteMirrorStates,
};
use kmirror_actors::liveness::{LivenessPolicy, Observation};
use kmirror_actors::metadata::{
    KnownTopic, Reaction, TopicView, desired_from_mirror_name, mirror_name_value, react,
};
use kmirror_actors::partition::{Desired, RetryPolicy};
use kmirror_protocol::client::{ClientConfig, ClientError, ClusterMetadata, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse, read_mirror_states_request, write_mirror_states_request,
};
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    topics: BTreeMap<String, MirroredTopic>,
}

/// A topic's partition actors and what they were last told.
struct MirroredTopic {
    topic_id: uuid::Uuid,
    partitions: Vec<SupervisedPartition<BrokerPartitionPorts>>,
    known: KnownTopic,
}

/// The engine on one broker.
pub struct MirrorSystem {
    broker: Arc<Broker>,
    shards: Vec<Addr<CoordinatorShard<StateTopicPorts>>>,
    mirrors: HashMap<String, MirrorRuntime>,
    retry: RetryPolicy,
    liveness: LivenessPolicy,
    /// The supervisor's clock: milliseconds since this instant (actix time, so tests pause it).
    clock: tokio::time::Instant,
    /// A liveness check is under way (they never overlap).
    checking: bool,
}

impl std::fmt::Debug for MirrorSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSystem")
            .field("mirrors", &self.mirrors.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl MirrorSystem {
    /// The engine of `broker` (its actors start with the system); partitions are supervised
    /// as the broker's `mirror.supervision.*` configs say.
    pub fn new(broker: Arc<Broker>, retry: RetryPolicy) -> Self {
        let liveness = broker.config().mirror_liveness;
        MirrorSystem {
            broker,
            shards: Vec::new(),
            mirrors: HashMap::new(),
            retry,
            liveness,
            clock: tokio::time::Instant::now(),
            checking: false,
        }
    }

    /// Observes every partition actor, then acts on what each [`SupervisedPartition`] decides.
    fn check_liveness(&mut self, ctx: &mut Context<Self>) {
        if self.checking {
            return;
        }
        self.checking = true;
        let timeout = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        let observations: Vec<_> = self
            .mirrors
            .iter()
            .flat_map(|(mirror, runtime)| {
                runtime.topics.iter().flat_map(move |(topic, mirrored)| {
                    mirrored
                        .partitions
                        .iter()
                        .enumerate()
                        .map(move |(index, p)| {
                            let key = (mirror.clone(), topic.clone(), index);
                            let observe = p.observe(timeout);
                            async move { (key, observe.await) }
                        })
                })
            })
            .collect();
        // Each question is asked (and its timeout started) when `observe` is called, so
        // awaiting the answers one after the other takes one timeout at most.
        let gathered = async move {
            let mut observed = Vec::with_capacity(observations.len());
            for observation in observations {
                observed.push(observation.await);
            }
            observed
        };
        ctx.spawn(gathered.into_actor(self).map(|observed, system, _| {
            system.checking = false;
            let now_ms = system.clock.elapsed().as_millis() as i64;
            for ((mirror, topic, index), observation) in observed {
                system.supervise(&mirror, &topic, index, now_ms, observation);
            }
        }));
    }

    fn supervise(
        &mut self,
        mirror: &str,
        topic: &str,
        index: usize,
        now_ms: i64,
        observation: Observation,
    ) {
        let policy = self.liveness;
        if let Some(partition) = self
            .mirrors
            .get_mut(mirror)
            .and_then(|r| r.topics.get_mut(topic))
            .and_then(|t| t.partitions.get_mut(index))
        {
            partition.supervise(&policy, now_ms, observation);
        }
    }

    /// Creates `__mirror_state` (the first time a mirror is used) and starts its shards.
    fn ensure_shards(&mut self) -> Result<(), MirrorError> {
        if !self.shards.is_empty() {
            return Ok(());
        }
        state_topic::ensure_topic(&self.broker)
            .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
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
        Ok(())
    }
}

impl Actor for MirrorSystem {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let interval = std::time::Duration::from_millis(self.liveness.check_interval_ms());
        ctx.run_interval(interval, |system, ctx| system.check_liveness(ctx));
        // React to metadata changes, whoever made them (coalesced: one reaction per wake-up).
        let mut changes = self.broker.metadata_changes();
        let me = ctx.address();
        actix::spawn({
            let me = me.clone();
            async move {
                while changes.changed().await.is_ok() {
                    changes.mark_unchanged();
                    if me.send(MetadataChanged).await.is_err() {
                        return;
                    }
                }
            }
        });
        // Resume what the controller says is mirrored.
        let mirrors: Vec<(String, Vec<String>)> = self
            .broker
            .mirrors()
            .into_keys()
            .map(|name| {
                let topics = self.broker.mirror_topics(&name);
                (name, topics)
            })
            .collect();
        actix::spawn(async move {
            for (mirror, topics) in mirrors {
                match me.send(LoadMirror(mirror.clone())).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::error!(mirror, error = %e, "loading a mirror at start-up");
                        continue;
                    }
                    Err(_) => return,
                }
                for topic in topics {
                    let started = me
                        .send(StartTopic {
                            mirror: mirror.clone(),
                            topic: topic.clone(),
                        })
                        .await;
                    if let Ok(Err(e)) = started {
                        tracing::error!(mirror, topic, error = %e, "resuming a mirror topic");
                    }
                }
            }
        });
    }
}

/// The broker's metadata changed: the metadata manager's reaction (see
/// [`kmirror_actors::metadata`]) for every topic the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
struct MetadataChanged;

impl Handler<MetadataChanged> for MirrorSystem {
    type Result = ();

    fn handle(&mut self, _: MetadataChanged, _: &mut Context<Self>) {
        // A deleted mirror: its fetchers go with its runtime, its records with tombstones.
        let mirrors = self.broker.mirrors();
        let deleted: Vec<String> = self
            .mirrors
            .keys()
            .filter(|name| !mirrors.contains_key(*name))
            .cloned()
            .collect();
        for mirror in deleted {
            tracing::info!(mirror, "mirror deleted");
            self.mirrors.remove(&mirror);
            for shard in &self.shards {
                log_failure(shard.send(DeleteMirror(mirror.clone())));
            }
        }
        let topics = self.broker.topics();
        let shard_count = self.shards.len() as i32;
        for (mirror, runtime) in &mut self.mirrors {
            let mut released = Vec::new();
            for (name, mirrored) in &mut runtime.topics {
                let topic = topics.get(name);
                let epochs: Vec<i32> = topic
                    .map(|t| t.partitions.iter().map(|p| p.leader_epoch).collect())
                    .unwrap_or_default();
                let view = topic.map(|t| TopicView {
                    mirror_name: t.configs.get("mirror.name").map(String::as_str),
                    leader_epochs: &epochs,
                });
                for reaction in react(mirror, &mirrored.known, view.as_ref()) {
                    tracing::info!(mirror, topic = name, ?reaction, "metadata changed");
                    match reaction {
                        Reaction::Desired(desired) => {
                            mirrored.known.desired = desired;
                            for p in &mut mirrored.partitions {
                                log_rejection(p.change_desired(desired));
                            }
                        }
                        Reaction::LeaderEpoch {
                            partition,
                            leader_epoch,
                        } => {
                            if let Some(told) =
                                mirrored.known.leader_epochs.get_mut(partition as usize)
                            {
                                *told = leader_epoch;
                            }
                            if let Some(p) = mirrored.partitions.get_mut(partition as usize) {
                                log_rejection(p.change_leader_epoch(leader_epoch));
                            }
                        }
                        Reaction::Release => {
                            for p in &mut mirrored.partitions {
                                log_rejection(p.lose_leadership());
                            }
                            // Its states and LMEs mean nothing for a topic created again
                            // under the same (the source's) id.
                            let owning: BTreeSet<i32> = (0..mirrored.partitions.len() as i32)
                                .map(|p| {
                                    mirror_partition_shard(
                                        mirror,
                                        &mirrored.topic_id,
                                        p,
                                        shard_count,
                                    )
                                })
                                .collect();
                            for index in owning {
                                if let Some(shard) = self.shards.get(index as usize) {
                                    log_failure(shard.send(ForgetTopic {
                                        mirror: mirror.clone(),
                                        topic_id: mirrored.topic_id,
                                        topic: name.clone(),
                                    }));
                                }
                            }
                            released.push(name.clone());
                        }
                    }
                }
            }
            for name in released {
                runtime.topics.remove(&name);
            }
        }
    }
}

/// Runs a write sent to a coordinator shard, logging a failure.
fn log_failure(
    write: impl std::future::Future<
        Output = Result<Result<(), kmirror_actors::partition::Cause>, actix::MailboxError>,
    > + 'static,
) {
    actix::spawn(async move {
        match write.await {
            Ok(Ok(())) => {}
            Ok(Err(cause)) => tracing::error!(error = %cause.message, "forgetting mirror states"),
            Err(e) => tracing::error!(error = %e, "a coordinator shard is gone"),
        }
    });
}

/// Runs a command sent to a partition actor, logging a refusal (the metadata is the truth; the
/// actor's state machine decides what the command means for it).
fn log_rejection(
    command: impl std::future::Future<
        Output = Result<Result<(), kmirror_actors::partition::Rejection>, actix::MailboxError>,
    > + 'static,
) {
    actix::spawn(async move {
        match command.await {
            Ok(Ok(())) => {}
            Ok(Err(rejection)) => tracing::warn!(%rejection, "a metadata change was refused"),
            Err(e) => tracing::warn!(error = %e, "a partition actor is gone"),
        }
    });
}

/// Loads a mirror of the controller: connects to its source with its configs. Loading a
/// loaded mirror changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct LoadMirror(pub String);

impl Handler<LoadMirror> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: LoadMirror, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.ensure_shards() {
            return Box::pin(async move { Err(e) }.into_actor(self));
        }
        let name = msg.0;
        let configs = self.broker.mirrors().get(&name).cloned();
        let loaded = self.mirrors.contains_key(&name);
        Box::pin(
            async move {
                if loaded {
                    return Ok(None);
                }
                let configs = configs.ok_or_else(|| {
                    MirrorError::new(ErrorCode::UNKNOWN_MIRROR, format!("no mirror {name}"))
                })?;
                let props: HashMap<String, String> = configs.into_iter().collect();
                let config = ClientConfig::from_properties(&props)
                    .map_err(|e| MirrorError::new(ErrorCode(40), e.to_string()))?;
                let source = SourceClient::connect(config).await.map_err(|e| {
                    MirrorError::new(ErrorCode(-1), format!("the source cluster: {e}"))
                })?;
                let cluster_id = source.cluster_id().await.map_err(|e| {
                    MirrorError::new(ErrorCode(-1), format!("the source cluster: {e}"))
                })?;
                Ok(Some((name, Arc::new(source), cluster_id)))
            }
            .into_actor(self)
            .map(|loaded, system, _| {
                if let Some((name, source, source_cluster_id)) = loaded? {
                    system.mirrors.entry(name).or_insert_with(|| MirrorRuntime {
                        source,
                        source_cluster_id,
                        fetchers: HashMap::new(),
                        topics: BTreeMap::new(),
                    });
                }
                Ok(())
            }),
        )
    }
}

impl Handler<AddMirror> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: AddMirror, _: &mut Context<Self>) -> Self::Result {
        if let Err(e) = self.ensure_shards() {
            return Box::pin(async move { Err(e) }.into_actor(self));
        }
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
        // A topic of this mirror already here (a restart) resumes with what `mirror.name`
        // asks; a plain topic with the source topic's id joins the mirror (failback: the old
        // source mirrors back from the old destination and keeps what the LME says is shared);
        // any other topic of that name is in the way.
        let desired = match broker.topic(&msg.topic) {
            None => {
                let configs = BTreeMap::from([("mirror.name".to_string(), msg.mirror.clone())]);
                let partitions = source_topic.partitions.len() as i32;
                broker
                    .create_topic(&msg.topic, partitions, configs, Some(source_topic.topic_id))
                    .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
                Desired::Mirroring
            }
            Some(existing) => {
                let value = existing
                    .configs
                    .get("mirror.name")
                    .cloned()
                    .unwrap_or_default();
                let desired = if value.is_empty() {
                    Desired::Mirroring
                } else if let Some(desired) = desired_from_mirror_name(&msg.mirror, &value) {
                    desired
                } else {
                    return Err(MirrorError::new(
                        ErrorCode::TOPIC_ALREADY_IN_MIRROR,
                        format!(
                            "topic {} exists and is not in mirror {}",
                            msg.topic, msg.mirror
                        ),
                    ));
                };
                if existing.topic_id != source_topic.topic_id {
                    return Err(MirrorError::new(
                        ErrorCode::INCONSISTENT_TOPIC_ID,
                        format!("topic {} exists with another topic id", msg.topic),
                    ));
                }
                if value.is_empty() {
                    let mut configs = existing.configs.clone();
                    configs.insert("mirror.name".to_string(), msg.mirror.clone());
                    broker
                        .set_topic_configs(&msg.topic, configs)
                        .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
                }
                desired
            }
        };
        let mut partitions = Vec::new();
        let mut leader_epochs = Vec::new();
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
            let mut partition = SupervisedPartition::start(ports, retry, rand_unit);
            let leader_epoch = broker.leader_epoch(&msg.topic, p.partition).unwrap_or(0);
            leader_epochs.push(leader_epoch);
            let become_leader = partition.become_leader(BecomeLeader {
                leader_epoch,
                desired,
            });
            actix::spawn(async move {
                if let Err(e) = become_leader.await {
                    tracing::error!(error = %e, "starting a mirror partition");
                }
            });
            partitions.push(partition);
        }
        if let Some(runtime) = self.mirrors.get_mut(&msg.mirror) {
            let known = KnownTopic {
                desired,
                leader_epochs,
            };
            runtime.topics.insert(
                msg.topic,
                MirroredTopic {
                    topic_id: source_topic.topic_id,
                    partitions,
                    known,
                },
            );
        }
        Ok(())
    }

    fn mirrored_topic(
        &mut self,
        mirror: &str,
        topic: &str,
    ) -> Result<&mut MirroredTopic, MirrorError> {
        let runtime = self
            .mirrors
            .get_mut(mirror)
            .ok_or_else(|| MirrorError::new(ErrorCode::UNKNOWN_MIRROR, "no such mirror"))?;
        runtime.topics.get_mut(topic).ok_or_else(|| {
            MirrorError::new(
                ErrorCode::TOPIC_NOT_IN_MIRROR,
                "the topic is not in the mirror",
            )
        })
    }

    /// The current addresses of a topic's partition actors.
    fn partition_addrs(
        &mut self,
        mirror: &str,
        topic: &str,
    ) -> Result<Vec<PartitionAddr>, MirrorError> {
        Ok(self
            .mirrored_topic(mirror, topic)?
            .partitions
            .iter()
            .map(|p| p.addr().clone())
            .collect())
    }
}

/// A uniform draw in `[0, 1)` for retry jitter.
fn rand_unit() -> f64 {
    rand::random::<f64>()
}

impl Handler<ChangeTopic> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: ChangeTopic, _: &mut Context<Self>) -> Self::Result {
        // Known before `mirror.name` changes.
        let known = self.mirrored_topic(&msg.mirror, &msg.topic).map(|_| ());
        let prepared = known.and_then(|()| {
            let mut configs = self
                .broker
                .topic(&msg.topic)
                .map(|t| t.configs)
                .unwrap_or_default();
            configs.insert(
                "mirror.name".to_string(),
                mirror_name_value(&msg.mirror, msg.desired),
            );
            // `mirror.name` stays set (`<mirror>.removed` for a stop), so the topic stays
            // read-only until its partition actors reach STOPPED.
            self.broker
                .set_topic_configs(&msg.topic, configs)
                .map_err(|e| MirrorError::new(ErrorCode(e.error_code()), e.to_string()))?;
            let mirrored = self.mirrored_topic(&msg.mirror, &msg.topic)?;
            mirrored.known.desired = msg.desired;
            let changes: Vec<_> = mirrored
                .partitions
                .iter_mut()
                .map(|p| p.change_desired(msg.desired))
                .collect();
            Ok(changes)
        });
        Box::pin(
            async move {
                for change in prepared? {
                    change
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
        let actors = self.partition_addrs(&msg.mirror, &msg.topic);
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

/// One mirrored topic as DescribeMirrors shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSnapshot {
    /// The topic.
    pub topic: String,
    /// Its id (the source's).
    pub topic_id: uuid::Uuid,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionSnapshot>,
    /// The source's last stable offset of each partition (what the mirror copies up to), -1
    /// where the source could not be asked.
    pub source_offsets: Vec<i64>,
}

/// Every topic of a mirror, with its partitions' snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<TopicSnapshot>, MirrorError>")]
pub struct DescribeMirror(pub String);

impl Handler<DescribeMirror> for MirrorSystem {
    type Result = ResponseActFuture<Self, Result<Vec<TopicSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeMirror, _: &mut Context<Self>) -> Self::Result {
        let source = self.mirrors.get(&msg.0).map(|r| r.source.clone());
        let topics: Result<Vec<(String, uuid::Uuid, Vec<PartitionAddr>)>, MirrorError> = self
            .mirrors
            .get(&msg.0)
            .ok_or_else(|| MirrorError::new(ErrorCode::UNKNOWN_MIRROR, "no such mirror"))
            .map(|runtime| {
                let known = self.broker.topics();
                runtime
                    .topics
                    .iter()
                    .map(|(name, mirrored)| {
                        let id = known.get(name).map(|t| t.topic_id).unwrap_or_default();
                        let addrs = mirrored
                            .partitions
                            .iter()
                            .map(|p| p.addr().clone())
                            .collect();
                        (name.clone(), id, addrs)
                    })
                    .collect()
            });
        Box::pin(
            async move {
                let mut out = Vec::new();
                for (topic, topic_id, actors) in topics? {
                    let mut partitions = Vec::new();
                    for actor in actors {
                        partitions.push(
                            actor
                                .send(DescribePartition)
                                .await
                                .map_err(|e| MirrorError::new(ErrorCode(-1), e.to_string()))?,
                        );
                    }
                    let source_offsets = match &source {
                        Some(source) => source_offsets(source, &topic, partitions.len()).await,
                        None => vec![-1; partitions.len()],
                    };
                    out.push(TopicSnapshot {
                        topic,
                        topic_id,
                        partitions,
                        source_offsets,
                    });
                }
                Ok(out)
            }
            .into_actor(self),
        )
    }
}

/// The source's last stable offsets of `topic`'s first `count` partitions (-1 where unknown).
async fn source_offsets(source: &SourceClient, topic: &str, count: usize) -> Vec<i64> {
    let leaders: Vec<i32> = match source.metadata(Some(&[topic])).await {
        Ok(metadata) => metadata
            .topics
            .get(topic)
            .map(|t| t.partitions.iter().map(|p| p.leader).collect())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let mut offsets = Vec::with_capacity(count);
    for partition in 0..count {
        let offset = match leaders.get(partition) {
            Some(&leader) => source
                .list_offsets(
                    leader,
                    topic,
                    partition as i32,
                    kmirror_protocol::client::source::LATEST,
                    kmirror_protocol::client::Isolation::ReadCommitted,
                )
                .await
                .map_or(-1, |(offset, _)| offset),
            None => -1,
        };
        offsets.push(offset);
    }
    offsets
}

/// The engine running on its own actix system thread, for a broker whose listener runs on
/// tokio: its address is `Send`, so handlers anywhere can message it.
#[derive(Debug)]
pub struct EngineHandle {
    /// The MirrorSystem.
    pub addr: Addr<MirrorSystem>,
    system: actix::System,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EngineHandle {
    /// Starts the engine of `broker` on a new thread.
    pub fn start(broker: Arc<Broker>) -> std::io::Result<EngineHandle> {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("kmirror-engine".into())
            .spawn(move || {
                let runner = actix::System::new();
                let started = runner.block_on(async move {
                    let addr = MirrorSystem::new(broker, RetryPolicy::default()).start();
                    (addr, actix::System::current())
                });
                if tx.send(started).is_ok() {
                    let _ = runner.run();
                }
            })?;
        let (addr, system) = rx
            .recv()
            .map_err(|_| std::io::Error::other("the mirroring engine did not start"))?;
        Ok(EngineHandle {
            addr,
            system,
            thread: Some(thread),
        })
    }

    /// Stops the engine and waits for its thread.
    pub fn stop(mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// ReadMirrorStates from another broker: answered by the shards owning the partitions.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<ReadMirrorStatesResponse, MirrorError>")]
pub struct ServeReadMirrorStates(pub ReadMirrorStatesRequest);

/// WriteMirrorStates from another broker: written by the shards owning the partitions, each
/// durable before the answer.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<WriteMirrorStatesResponse, MirrorError>")]
pub struct ServeWriteMirrorStates(pub WriteMirrorStatesRequest);

impl MirrorSystem {
    fn shard_of(&self, mirror: &str, topic_id: &uuid::Uuid, partition: i32) -> usize {
        mirror_partition_shard(mirror, topic_id, partition, self.shards.len() as i32) as usize
    }
}

/// The handler of a Read/WriteMirrorStates request from another broker: the partitions are
/// split by the shard that owns them, each shard answers its part, and the parts are merged
/// into one response (a topic's partitions under one entry).
macro_rules! serve_by_shard {
    ($serve:ident, $request:ident, $response:ident, $request_mod:ident, $shard_message:ident) => {
        impl Handler<$serve> for MirrorSystem {
            type Result = ResponseActFuture<Self, Result<$response, MirrorError>>;

            fn handle(&mut self, msg: $serve, _: &mut Context<Self>) -> Self::Result {
                let split = self.ensure_shards().map(|()| {
                    let request = msg.0;
                    let mut by_shard: BTreeMap<usize, $request> = BTreeMap::new();
                    for topic in request.topics {
                        for p in topic.partitions {
                            let shard = self.shard_of(
                                &request.mirror_name,
                                &topic.topic_id,
                                p.partition_index,
                            );
                            let part = by_shard.entry(shard).or_insert_with(|| $request {
                                mirror_name: request.mirror_name.clone(),
                                ..Default::default()
                            });
                            match part
                                .topics
                                .iter_mut()
                                .find(|t| t.topic_id == topic.topic_id)
                            {
                                Some(t) => t.partitions.push(p),
                                None => part.topics.push($request_mod::Topic {
                                    topic_id: topic.topic_id,
                                    name: topic.name.clone(),
                                    partitions: vec![p],
                                    ..Default::default()
                                }),
                            }
                        }
                    }
                    by_shard
                        .into_iter()
                        .filter_map(|(shard, part)| {
                            Some(self.shards.get(shard)?.send($shard_message(part)))
                        })
                        .collect::<Vec<_>>()
                });
                Box::pin(
                    async move {
                        let mut response = $response::default();
                        for answer in split? {
                            let answer = answer
                                .await
                                .map_err(|e| MirrorError::new(ErrorCode(-1), e.to_string()))?;
                            for topic in answer.topics {
                                match response
                                    .topics
                                    .iter_mut()
                                    .find(|t| t.topic_id == topic.topic_id)
                                {
                                    Some(t) => t.partitions.extend(topic.partitions),
                                    None => response.topics.push(topic),
                                }
                            }
                        }
                        Ok(response)
                    }
                    .into_actor(self),
                )
            }
        }
    };
}

serve_by_shard!(
    ServeReadMirrorStates,
    ReadMirrorStatesRequest,
    ReadMirrorStatesResponse,
    read_mirror_states_request,
    ReadMirrorStates
);
serve_by_shard!(
    ServeWriteMirrorStates,
    WriteMirrorStatesRequest,
    WriteMirrorStatesResponse,
    write_mirror_states_request,
    WriteMirrorStates
);
