//! One mirrored topic on its [`Mirror`]: its start, the start of this broker's partitions of
//! it, and its pause, resume or stop (the system writes the change, the mirror tells its
//! partitions). The request-level rules around these (patterns,
//! authorization, which change a topic allows) are [`super::topic_requests`]'s.
//!
//! StartMirrorTopics ([`StartTopic`]) asks the source for the topic, then: creates the
//! destination topic with the source's id and partition count and `mirror.name` set; or joins a
//! plain topic with the source topic's id to the mirror (failback: the old source mirrors back
//! from the old destination and keeps what the LME says is shared); or restarts a stopped topic
//! of the mirror (`<mirror>.removed` becomes `<mirror>`). Any other topic of that name is in
//! the way. The partitions this broker leads start at once; the other brokers start theirs
//! when they see the metadata.

use super::mirror::{Mirror, MirroredTopic};
use super::partition_commands::log_rejection;
use super::partition_ports::{EnginePartitionPorts, MirrorPartitionSite};
use crate::actor::{
    BecomeLeader, DescribePartition, MirrorPartition, PartitionLabels, PartitionSnapshot,
    SupervisedPartition,
};
use crate::host::{Host, HostError, Source};
use crate::metadata::{
    DISCARD_CONFIRMED, KnownTopic, STOP_CUT_TIMESTAMP, confirmed_value, mirror_name_value,
    mirror_of,
};
use crate::partition::Desired;
use crate::policy::MirrorError;
use crate::policy::topic_changes::change_refused;
use actix::{ActorFutureExt, Addr, Context, Handler, Message, ResponseActFuture, WrapFuture};
use kmirror_protocol::client::source::TopicMetadata;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A partition actor of the engine.
pub type PartitionAddr<H> = Addr<MirrorPartition<EnginePartitionPorts<H>>>;

/// A uniform draw in `[0, 1)` for retry jitter.
fn rand_unit() -> f64 {
    rand::random::<f64>()
}

/// StartMirrorTopics for one topic of the mirror's source.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct StartTopic {
    /// The mirror.
    pub mirror: String,
    /// The source topic (the destination topic gets the same name and id).
    pub topic: String,
    /// For a restart of a stopped topic: the partitions holding records written here since the
    /// failover that the operator confirmed discarding, with the log end offset each was
    /// counted at (recorded as [`crate::metadata::DISCARD_CONFIRMED`]); empty otherwise.
    pub confirmed: BTreeMap<i32, i64>,
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
    /// For a stop: the consistent cut's point in time ([`STOP_CUT_TIMESTAMP`]), if any.
    pub cut_timestamp_ms: Option<i64>,
}

/// The names of the mirror's source topics (for StartMirrorTopics' IncludePatterns).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<String>, MirrorError>")]
pub struct SourceTopics(pub String);

impl<H: Host> Handler<SourceTopics> for Mirror<H> {
    type Result = ResponseActFuture<Self, Result<Vec<String>, MirrorError>>;

    fn handle(&mut self, _: SourceTopics, _: &mut Context<Self>) -> Self::Result {
        let source = self.source.clone();
        Box::pin(
            async move {
                let metadata = source.metadata(None).await.map_err(|e| {
                    MirrorError::new(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        format!("the source cluster: {e}"),
                    )
                })?;
                let mut names: Vec<String> = metadata.topics.into_keys().collect();
                names.sort();
                Ok(names)
            }
            .into_actor(self),
        )
    }
}

/// The snapshots of a mirrored topic's partitions on this broker, by partition.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<PartitionSnapshot>, MirrorError>")]
pub struct DescribeTopic {
    /// The mirror.
    pub mirror: String,
    /// The topic.
    pub topic: String,
}

/// A metadata change the host refused, as the mirror request's error.
fn refused(e: HostError) -> MirrorError {
    MirrorError::new(e.code, e.message)
}

impl<H: Host> Handler<StartTopic> for Mirror<H> {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: StartTopic, _: &mut Context<Self>) -> Self::Result {
        let source = self.source.clone();
        let topic = msg.topic.clone();
        let asked = async move {
            let metadata = source
                .metadata(Some(&[topic.as_str()]))
                .await
                .map_err(|e| {
                    MirrorError::new(
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        format!("the source cluster: {e}"),
                    )
                })?;
            metadata.topics.get(&topic).cloned().ok_or_else(|| {
                MirrorError::new(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("the source has no topic {topic}"),
                )
            })
        };
        let (topic, confirmed) = (msg.topic, msg.confirmed);
        Box::pin(
            asked
                .into_actor(self)
                .then(move |source_topic, mirror, _| {
                    let placed = source_topic.and_then(|source_topic| {
                        mirror.place_topic(&topic, &source_topic, &confirmed)
                    });
                    async move { placed?.await.map_err(refused).map(|()| topic) }.into_actor(mirror)
                })
                .map(|placed, mirror, _| mirror.start_partitions(&placed?)),
        )
    }
}

impl<H: Host> Mirror<H> {
    /// The metadata change that puts `topic` into `mirror`: the destination topic created with
    /// the source topic's id and partition count, or an existing topic of that id (plain, or
    /// stopped in this mirror) joined to it. Any other topic of that name is in the way.
    fn place_topic(
        &mut self,
        topic: &str,
        source_topic: &TopicMetadata,
        confirmed: &BTreeMap<i32, i64>,
    ) -> Result<crate::host::HostFuture<Result<(), HostError>>, MirrorError> {
        let mirror = self.name.as_str();
        match self.host.topic(topic) {
            None => {
                let configs = BTreeMap::from([("mirror.name".to_string(), mirror.to_string())]);
                let partitions = source_topic.partitions.len() as i32;
                Ok(self
                    .host
                    .create_topic(topic, partitions, configs, Some(source_topic.topic_id)))
            }
            Some(existing) => {
                let value = existing
                    .configs
                    .get("mirror.name")
                    .cloned()
                    .unwrap_or_default();
                let joins =
                    value.is_empty() || mirror_of(&value) == Some((mirror, Desired::Stopped));
                if !joins {
                    return Err(MirrorError::new(
                        ErrorCode::TOPIC_ALREADY_IN_CLUSTER_MIRROR,
                        format!("topic {topic} is in mirror {value} already"),
                    ));
                }
                if existing.topic_id != source_topic.topic_id {
                    return Err(MirrorError::new(
                        ErrorCode::INCONSISTENT_TOPIC_ID,
                        format!("topic {topic} exists with another topic id"),
                    ));
                }
                let mut configs = existing.configs.clone();
                configs.insert("mirror.name".to_string(), mirror.to_string());
                // Written with `mirror.name` in one change: no partition sees the restart
                // without the confirmation it carries.
                configs.remove(STOP_CUT_TIMESTAMP);
                if confirmed.is_empty() {
                    configs.remove(DISCARD_CONFIRMED);
                } else {
                    configs.insert(DISCARD_CONFIRMED.to_string(), confirmed_value(confirmed));
                }
                Ok(self.host.set_topic_configs(topic, configs))
            }
        }
    }

    /// Starts the partitions this broker leads of `topic` that do not run yet, with what its
    /// `mirror.name` asks. Local metadata alone says which they are (a mirror topic has its
    /// source topic's id and partitions), so they start while the source is unreachable.
    pub(super) fn start_partitions(&mut self, topic: &str) -> Result<(), MirrorError> {
        let host = self.host.clone();
        let mirror = self.name.clone();
        let mirror = mirror.as_str();
        let Some(meta) = host.topic(topic) else {
            return Ok(());
        };
        let Some((_, desired)) = meta
            .configs
            .get("mirror.name")
            .and_then(|v| mirror_of(v))
            .filter(|(m, _)| *m == mirror)
        else {
            return Ok(());
        };
        let topic_id = meta.topic_id;
        let indexes = 0..meta.partitions.len() as i32;
        let arbiters: BTreeMap<i32, actix::ArbiterHandle> = indexes
            .clone()
            .filter_map(|p| Some((p, self.arbiter_of(&topic_id, p)?)))
            .collect();
        let shards = &self.shards;
        let retry = self.retry;
        let cluster_id = host.cluster_id();
        let (source, pool, source_cluster_id, halted, stats) = (
            self.lookups.clone(),
            self.pool.clone(),
            self.source_cluster_id.clone(),
            self.halted.clone(),
            self.stats.clone(),
        );
        let mirrored = self
            .topics
            .entry(topic.to_string())
            .or_insert_with(|| MirroredTopic {
                topic_id,
                partitions: BTreeMap::new(),
                known: KnownTopic {
                    desired,
                    leader_epochs: meta.partitions.iter().map(|p| p.leader_epoch).collect(),
                },
            });
        for (partition, local) in indexes.zip(&meta.partitions) {
            if !host.leads(local) || mirrored.partitions.contains_key(&partition) {
                continue;
            }
            let shard_index =
                mirror_partition_shard(mirror, &topic_id, partition, shards.len() as i32);
            let shard = shards.get(shard_index as usize).cloned().ok_or_else(|| {
                MirrorError::new(
                    ErrorCode::UNKNOWN_SERVER_ERROR,
                    "__mirror_state is not loaded",
                )
            })?;
            let ports = EnginePartitionPorts::new(
                MirrorPartitionSite {
                    mirror: mirror.to_string(),
                    topic: topic.to_string(),
                    topic_id,
                    partition,
                    cluster_id: cluster_id.clone(),
                    source_cluster_id: source_cluster_id.clone(),
                },
                host.clone(),
                source.clone(),
                shard,
                pool.clone(),
                stats.clone(),
            );
            let span = tracing::info_span!(
                "mirror_partition",
                mirror,
                topic,
                partition,
                leader_epoch = local.leader_epoch
            );
            let mut actor = match arbiters.get(&partition) {
                Some(arbiter) => SupervisedPartition::start_in(
                    arbiter.clone(),
                    ports,
                    retry,
                    rand_unit,
                    PartitionLabels {
                        mirror: Arc::from(mirror),
                        span,
                    },
                ),
                None => SupervisedPartition::start(ports, retry, rand_unit),
            };
            log_rejection(actor.become_leader(BecomeLeader {
                leader_epoch: local.leader_epoch,
                desired: mirrored.known.desired,
            }));
            if let Some(reason) = halted
                .as_ref()
                .filter(|_| mirrored.known.desired == Desired::Mirroring)
            {
                log_rejection(actor.fail(reason.clone()));
            }
            mirrored.partitions.insert(partition, actor);
        }
        Ok(())
    }

    fn mirrored_topic(&mut self, topic: &str) -> Result<&mut MirroredTopic<H>, MirrorError> {
        self.topics.get_mut(topic).ok_or_else(|| {
            MirrorError::new(
                ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR,
                "the topic is not in the mirror",
            )
        })
    }
}

/// The partitions here of a topic whose change (pause, resume or stop) the system wrote: told
/// at once, so a refusal reaches the caller; the other brokers' see the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), MirrorError>")]
pub struct TellDesired {
    /// The topic.
    pub topic: String,
    /// What it should do now.
    pub desired: Desired,
}

impl<H: Host> Handler<TellDesired> for Mirror<H> {
    type Result = ResponseActFuture<Self, Result<(), MirrorError>>;

    fn handle(&mut self, msg: TellDesired, _: &mut Context<Self>) -> Self::Result {
        let told: Vec<_> = match self.mirrored_topic(&msg.topic) {
            Ok(mirrored) => {
                mirrored.known.desired = msg.desired;
                mirrored
                    .partitions
                    .values_mut()
                    .map(|p| p.change_desired(msg.desired))
                    .collect()
            }
            Err(_) => Vec::new(),
        };
        Box::pin(
            async move {
                for change in told {
                    change
                        .await
                        .map_err(|e| {
                            MirrorError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
                        })?
                        .map_err(|e| crate::policy::refusal::rejection(&e))?;
                }
                Ok(())
            }
            .into_actor(self),
        )
    }
}

/// The change of a topic's `mirror.name` that pauses, resumes or stops it, or why it is
/// refused (the topic is not in the mirror, or its `mirror.name` now does not allow it: checked
/// again here, on the configs the change is made from).
pub fn desired_configs(
    host: &impl Host,
    msg: &ChangeTopic,
) -> Result<BTreeMap<String, String>, MirrorError> {
    let configs = host.topic(&msg.topic).and_then(|t| {
        let in_mirror = t
            .configs
            .get("mirror.name")
            .and_then(|v| mirror_of(v))
            .is_some_and(|(m, _)| m == msg.mirror);
        in_mirror.then_some(t.configs)
    });
    let Some(mut configs) = configs else {
        return Err(MirrorError::new(
            ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR,
            "the topic is not in the mirror",
        ));
    };
    let value = configs.get("mirror.name").map(String::as_str);
    if let Some(refused) = change_refused(value, &msg.mirror, msg.desired) {
        return Err(refused);
    }
    configs.insert(
        "mirror.name".to_string(),
        mirror_name_value(&msg.mirror, msg.desired),
    );
    // A stop ends what a restart confirmed; the next restart counts again. Its point in time,
    // if it is a consistent one, is written in the same change as `mirror.name`.
    if msg.desired == Desired::Stopped {
        configs.remove(DISCARD_CONFIRMED);
        match msg.cut_timestamp_ms {
            Some(t) => configs.insert(STOP_CUT_TIMESTAMP.to_string(), t.to_string()),
            None => configs.remove(STOP_CUT_TIMESTAMP),
        };
    }
    Ok(configs)
}

impl<H: Host> Handler<DescribeTopic> for Mirror<H> {
    type Result = ResponseActFuture<Self, Result<Vec<PartitionSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeTopic, _: &mut Context<Self>) -> Self::Result {
        let actors: Result<Vec<PartitionAddr<H>>, MirrorError> = self
            .mirrored_topic(&msg.topic)
            .map(|t| t.partitions.values().map(|p| p.addr().clone()).collect());
        Box::pin(
            async move {
                let mut snapshots = Vec::new();
                for actor in actors? {
                    snapshots.push(actor.send(DescribePartition).await.map_err(|e| {
                        MirrorError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
                    })?);
                }
                Ok(snapshots)
            }
            .into_actor(self),
        )
    }
}
