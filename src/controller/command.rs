//! Metadata commands: every change to the cluster's metadata, as one value a node can send to
//! the active controller and every controller can apply.
//!
//! Contract: [`Controller::execute`] is deterministic. Given the same metadata and the same
//! command, every node checks the same way, refuses with the same [`ControllerError`] or writes
//! the same records. Anything random or local (a new topic's id, the node asking) is chosen by
//! whoever proposes the command and travels inside it. This is what lets a quorum replicate the
//! commands themselves (docs/cluster.md): each node applies the committed log in order and ends
//! with the same image, and the node that proposed a command learns its outcome from its own
//! application of it.

use super::elections::ElectionType;
use super::partition_change::{IsrChange, IsrState};
use super::{Controller, ControllerError};
use crate::acl::{AclBinding, AclFilter};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// One change to the metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataCommand {
    /// The cluster's id, chosen by the first node to propose one (later proposals change
    /// nothing).
    InitCluster { id: String },
    /// Broker `node_id` started and is reached at `host:port`: a new broker epoch.
    RegisterBroker {
        node_id: i32,
        host: String,
        port: u16,
        /// The `directory.id` of its log directory (absent from commands written before
        /// brokers sent it).
        #[serde(default)]
        directory_id: Option<String>,
    },
    /// Broker `node_id` stopped heartbeating (the active controller decided).
    FenceBroker { node_id: i32 },
    /// Broker `node_id` heartbeats again.
    UnfenceBroker { node_id: i32 },
    /// Broker `node_id` is stopping: leadership and ISR membership move off it first.
    ControlledShutdown { node_id: i32 },
    /// Broker `node_id` started: it leaves ISRs with other members, and gets a new
    /// leadership term for every partition it leads alone.
    ResumeLeadership { node_id: i32 },
    /// ElectLeaders (`kafka-leader-election.sh`, the automatic leader rebalance): an election
    /// of `partitions` (topic, index), or of every partition when `None`.
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    },
    /// AlterPartition: the leader `broker_id`, at `broker_epoch`, changes ISRs.
    AlterPartition {
        broker_id: i32,
        broker_epoch: i64,
        changes: Vec<IsrChange>,
    },
    /// CreateTopics (`topic_id` chosen by the proposer, or the source's for a mirror topic).
    CreateTopic {
        name: String,
        partitions: i32,
        /// Replicas per partition (absent from commands written before replicas were placed:
        /// one).
        #[serde(default = "one_replica")]
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        topic_id: Uuid,
    },
    /// CreatePartitions.
    CreatePartitions { name: String, count: i32 },
    /// A topic's dynamic configs, all of them. With `base`, the configs the writer read and
    /// changed into `configs`: only the keys it changed (set, changed or removed) are applied
    /// to the topic's configs as they are when the command applies, as Kafka's per-key config
    /// records are, so writers of different keys from a stale image never undo each other (a
    /// config change racing a stop cannot bring `mirror.name` back).
    SetTopicConfigs {
        name: String,
        configs: BTreeMap<String, String>,
        #[serde(default)]
        base: Option<BTreeMap<String, String>>,
    },
    /// DeleteTopics.
    DeleteTopic { name: String },
    /// BumpLeaderEpochs: `(topic, partition, min_leader_epoch)` each.
    BumpLeaderEpochs { requests: Vec<(String, i32, i32)> },
    /// A block of `count` producer ids for one broker to hand out.
    AllocateProducerIds { count: i64 },
    /// CreateMirror.
    CreateMirror {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// A mirror's configs, all of them.
    SetMirrorConfigs {
        name: String,
        configs: BTreeMap<String, String>,
        /// The configs the writer read and changed: when the mirror's configs are no longer
        /// these, the change is refused ([`ControllerError::MirrorConfigsChanged`]) and the
        /// writer reads them again, so two changes racing through two brokers cannot lose one.
        #[serde(default)]
        base: Option<BTreeMap<String, String>>,
    },
    /// DeleteMirror.
    DeleteMirror { name: String },
    /// CreateAcls.
    CreateAcls { bindings: Vec<AclBinding> },
    /// DeleteAcls: each filter's matches.
    DeleteAcls { filters: Vec<AclFilter> },
}

fn one_replica() -> i32 {
    1
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// The change is in the metadata (read it there).
    Done,
    /// Each BumpLeaderEpochs request's epoch afterwards (`None`: no such partition).
    Epochs(Vec<Option<i32>>),
    /// The first id of the block handed out.
    ProducerIds(i64),
    /// What each DeleteAcls filter deleted.
    DeletedAcls(Vec<Vec<AclBinding>>),
    /// Each AlterPartition change's outcome: the partition's leader epoch, partition epoch and
    /// ISR afterwards, or why it was refused.
    IsrChanges(Vec<Result<IsrState, ControllerError>>),
    /// The partitions a broker in controlled shutdown still leads.
    StillLeads(usize),
    /// Each ElectLeaders partition's error code (topic, index, code).
    Elections(Vec<(String, i32, i16)>),
}

/// A command's outcome as every node computes it.
pub type Outcome = Result<Applied, ControllerError>;

impl Controller {
    /// Checks and applies one command (durably first when this controller has its own log).
    pub fn execute(&mut self, command: &MetadataCommand) -> Outcome {
        match command {
            MetadataCommand::InitCluster { id } => self.init_cluster(id)?,
            MetadataCommand::RegisterBroker {
                node_id,
                host,
                port,
                directory_id,
            } => {
                let directory_id = directory_id.as_deref();
                self.check_directory(*node_id, directory_id)?;
                self.register_broker(*node_id, host, *port, directory_id)?;
            }
            MetadataCommand::FenceBroker { node_id } => self.fence_broker(*node_id, true)?,
            MetadataCommand::UnfenceBroker { node_id } => self.fence_broker(*node_id, false)?,
            MetadataCommand::ControlledShutdown { node_id } => {
                return Ok(Applied::StillLeads(self.controlled_shutdown(*node_id)?));
            }
            MetadataCommand::ResumeLeadership { node_id } => self.resume_leadership(*node_id)?,
            MetadataCommand::ElectLeaders {
                election,
                partitions,
            } => {
                let answers = self.elect_leaders(*election, partitions.as_deref())?;
                return Ok(Applied::Elections(answers));
            }
            MetadataCommand::AlterPartition {
                broker_id,
                broker_epoch,
                changes,
            } => {
                let answers = self.alter_partition(*broker_id, *broker_epoch, changes)?;
                return Ok(Applied::IsrChanges(
                    answers
                        .into_iter()
                        .map(|a| a.map(|p| IsrState::of(&p)))
                        .collect(),
                ));
            }
            MetadataCommand::CreateTopic {
                name,
                partitions,
                replication_factor,
                configs,
                topic_id,
            } => {
                self.create_topic(
                    name,
                    *partitions,
                    *replication_factor,
                    configs.clone(),
                    Some(*topic_id),
                )?;
            }
            MetadataCommand::CreatePartitions { name, count } => {
                self.create_partitions(name, *count)?;
            }
            MetadataCommand::SetTopicConfigs {
                name,
                configs,
                base,
            } => {
                let configs = match base {
                    Some(base) => self.rebased_configs(name, base, configs)?,
                    None => configs.clone(),
                };
                self.set_topic_configs(name, configs)?;
            }
            MetadataCommand::DeleteTopic { name } => {
                self.delete_topic(name)?;
            }
            MetadataCommand::BumpLeaderEpochs { requests } => {
                return Ok(Applied::Epochs(self.bump_leader_epochs(requests)?));
            }
            MetadataCommand::AllocateProducerIds { count } => {
                return Ok(Applied::ProducerIds(self.allocate_producer_ids(*count)?));
            }
            MetadataCommand::CreateMirror { name, configs } => {
                self.create_mirror(name, configs.clone())?
            }
            MetadataCommand::SetMirrorConfigs {
                name,
                configs,
                base,
            } => {
                let current = self.mirrors().get(name);
                if base.is_some() && current.is_some() && current != base.as_ref() {
                    return Err(ControllerError::MirrorConfigsChanged(name.clone()));
                }
                self.set_mirror_configs(name, configs.clone())?
            }
            MetadataCommand::DeleteMirror { name } => self.delete_mirror(name)?,
            MetadataCommand::CreateAcls { bindings } => {
                for binding in bindings {
                    self.create_acl(binding.clone())?;
                }
            }
            MetadataCommand::DeleteAcls { filters } => {
                let mut deleted = Vec::with_capacity(filters.len());
                for filter in filters {
                    deleted.push(self.delete_acls(filter)?);
                }
                return Ok(Applied::DeletedAcls(deleted));
            }
        }
        Ok(Applied::Done)
    }
}
