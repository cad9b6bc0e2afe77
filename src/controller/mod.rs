//! The controller of the single-node reference broker: cluster metadata as a durable, replayed
//! record log under `log.dirs/__cluster_metadata/`.
//!
//! Lifecycle: [`Controller::open`] replays `metadata.log` (cutting a damaged tail after the last
//! intact record, refusing damage with intact records after it, see [`crate::record_log`]),
//! and writes the cluster id record the first time; every change is one record appended and fsynced
//! before it is applied, so a restart rebuilds exactly the state that was acknowledged.
//! Records are framed by [`crate::record_log`].

use crate::acl::{AclBinding, AclFilter};
use crate::record_log::RecordLog;
use crate::storage::StorageError;
use kmirror_protocol::errors::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use thiserror::Error;
use uuid::Uuid;

mod command;
mod elections;
mod journal;
pub mod partition_change;
pub mod quorum;
mod snapshot;

pub use command::{Applied, MetadataCommand, Outcome};
pub use elections::ElectionType;

pub use kmirror_actors::host::{
    ANY_NODE, LeaderRecovery, MetadataDelta, NO_LEADER, PartitionMeta, TopicMeta,
};

/// One metadata change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// The cluster's id, written once.
    ClusterId { id: String },
    /// A broker of the cluster and where clients reach it (written every time it starts).
    BrokerRegistered {
        node_id: i32,
        host: String,
        port: u16,
        /// The `directory.id` of its log directory (`meta.properties`); absent from records
        /// written before brokers sent it.
        #[serde(default)]
        directory_id: Option<String>,
        /// Its broker epoch: above every broker epoch before it, so a broker's requests
        /// from before a restart are told apart (0 in records written before epochs).
        #[serde(default)]
        epoch: i64,
    },
    /// Broker `node_id` was fenced (it stopped heartbeating: its partitions have no leader for
    /// clients and new partitions avoid it), or unfenced (it is back).
    BrokerFenced { node_id: i32, fenced: bool },
    /// Broker `node_id` is shutting down (controlled shutdown, docs/replication.md §3): it
    /// leads nothing and joins no ISR until it registers again.
    BrokerShuttingDown { node_id: i32 },
    /// A topic was created; `leaders` names each partition's broker (empty in logs written
    /// before brokers were placed: the single node leads them), and `replicas` each partition's
    /// replicas, its leader first (empty in logs written before replicas were placed: the
    /// leader alone).
    Topic {
        name: String,
        topic_id: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
        #[serde(default)]
        leaders: Vec<i32>,
        #[serde(default)]
        replicas: Vec<Vec<i32>>,
        /// Every replica starts in the ISR (false in records written before followers
        /// replicated: their followers hold nothing, the ISR is the leader alone).
        #[serde(default)]
        all_in_sync: bool,
    },
    /// A partition's leader epoch was bumped (BumpLeaderEpochs): its leader and ISR stay,
    /// its partition epoch rises by one.
    LeaderEpoch {
        topic: String,
        partition: i32,
        epoch: i32,
    },
    /// A partition's leader or ISR changed (an election, an ISR change, a restart): its
    /// registration afterwards (Kafka's `PartitionChangeRecord`, with every field).
    PartitionChange {
        topic: String,
        partition: i32,
        leader: i32,
        isr: Vec<i32>,
        leader_epoch: i32,
        partition_epoch: i32,
        /// Elected uncleanly and not yet recovered.
        #[serde(default)]
        recovering: bool,
    },
    /// Broker `node_id` took leadership of its partitions again at start-up: each partition it
    /// leads with no other replica in sync got a leader epoch (and partition epoch) one
    /// higher, as a Kafka broker's partitions get new leader epochs when it re-registers.
    LeadershipResumed { node_id: i32 },
    /// The next producer id to hand out.
    ProducerIdBlock { next: i64 },
    /// A topic grew to `count` partitions (CreatePartitions), the new ones led by `leaders`,
    /// on `replicas` (as in [`MetadataRecord::Topic`]).
    PartitionCount {
        topic: String,
        count: i32,
        #[serde(default)]
        leaders: Vec<i32>,
        #[serde(default)]
        replicas: Vec<Vec<i32>>,
        /// As in [`MetadataRecord::Topic`].
        #[serde(default)]
        all_in_sync: bool,
    },
    /// A topic was deleted.
    TopicDeleted { name: String },
    /// A topic's dynamic configs, all of them, after a change.
    TopicConfigs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    /// A mirror was created with these configs (CreateMirror).
    MirrorCreated {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// A mirror was deleted.
    MirrorDeleted { name: String },
    /// A mirror's configs, all of them, after an IncrementalAlterConfigs.
    MirrorConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// An ACL was created.
    AclCreated { binding: AclBinding },
    /// An ACL was deleted.
    AclDeleted { binding: AclBinding },
}

/// A broker of the cluster as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    /// `node.id`.
    pub node_id: i32,
    /// The advertised host.
    pub host: String,
    /// The advertised port.
    pub port: u16,
    /// The `directory.id` of the log directory it registered with (docs/cluster.md, "A
    /// replaced log directory").
    pub directory_id: Option<String>,
    /// Its broker epoch, new at every start (docs/replication.md §2).
    pub epoch: i64,
}

/// Why a metadata change was refused. Serialisable: a command's outcome travels from the node
/// that applied it to the node that asked.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ControllerError {
    /// The topic exists (Kafka: TOPIC_ALREADY_EXISTS).
    #[error("topic {0} already exists")]
    TopicExists(String),
    /// A name Kafka would refuse (Kafka: INVALID_TOPIC_EXCEPTION).
    #[error("invalid topic name {0:?}")]
    InvalidName(String),
    /// A partition count below one, or not above the current one (Kafka: INVALID_PARTITIONS).
    #[error("invalid partition count {0}")]
    InvalidPartitions(i32),
    /// A replication factor below one or above the brokers that can hold a replica (Kafka:
    /// INVALID_REPLICATION_FACTOR).
    #[error("replication factor {factor} cannot be placed: {brokers} broker(s) can hold a replica")]
    InvalidReplicationFactor { factor: i32, brokers: usize },
    /// No such topic (Kafka: UNKNOWN_TOPIC_OR_PARTITION).
    #[error("unknown topic {0}")]
    UnknownTopic(String),
    /// A mirror with the name exists (CLUSTER_MIRROR_ALREADY_EXISTS).
    #[error("mirror {0} already exists")]
    MirrorExists(String),
    /// A mirror name breaks the rules (INVALID_REQUEST: the KIP prototype has no code for it).
    #[error(
        "invalid mirror name {0:?}: a mirror is named like a Kafka topic (1 to 249 of [a-zA-Z0-9._-], not . or ..), and the name may not end in .paused or .removed"
    )]
    InvalidMirrorName(String),
    /// No mirror has the name (UNKNOWN_CLUSTER_MIRROR).
    #[error("unknown mirror {0}")]
    UnknownMirror(String),
    /// The mirror still has topics that are not stopped (CLUSTER_MIRROR_NOT_EMPTY).
    #[error("mirror {0} still has topics that are not stopped; stop them first")]
    MirrorNotEmpty(String),
    /// A change of a topic's `mirror.name` made from a value that is no longer the topic's
    /// (another mirror RPC changed it meanwhile, through another broker): refused, so a pause or
    /// a start racing a stop cannot undo it (INVALID_CLUSTER_MIRROR_STATES).
    #[error(
        "the mirror state of topic {topic} changed meanwhile (mirror.name is now {now:?}); nothing was changed"
    )]
    MirrorStateChanged { topic: String, now: String },
    /// A change of a mirror's configs made from configs that are no longer the mirror's
    /// (another change landed meanwhile, through another broker): refused, read them again
    /// (INVALID_CLUSTER_MIRROR_STATES, which clients retry).
    #[error("the configs of mirror {0} changed meanwhile; nothing was changed, try again")]
    MirrorConfigsChanged(String),
    /// A broker registered with a log directory other than the one holding partitions it is
    /// the last in-sync replica of: their data was lost or the directory replaced (Kafka: a
    /// replica whose directory is unknown is offline). It is not admitted.
    #[error(
        "node {node_id} leads partitions kept in log directory {registered}, but its log \
         directory is now another one ({now}): its data was lost or the directory replaced, and \
         no other in-sync replica holds them. Restore that directory, or start the node under a \
         new node.id"
    )]
    DirectoryReplaced {
        node_id: i32,
        registered: String,
        now: String,
    },
    /// An AlterPartition refused, with the Kafka error code the leader gets
    /// ([`partition_change::check_isr_change`]).
    #[error("ISR change refused: {reason}")]
    IsrChangeRefused { code: i16, reason: String },
    /// The metadata log could not be written.
    #[error("{0}")]
    Storage(String),
    /// No active controller answered in time (no quorum, or an election is under way); the
    /// change may still be applied later (Kafka: REQUEST_TIMED_OUT, which clients retry).
    #[error("{0}")]
    Unavailable(String),
}

impl From<StorageError> for ControllerError {
    fn from(e: StorageError) -> Self {
        ControllerError::Storage(e.to_string())
    }
}

impl ControllerError {
    /// The Kafka error code a client gets for it.
    pub fn error_code(&self) -> i16 {
        match self {
            ControllerError::TopicExists(_) => ErrorCode::TOPIC_ALREADY_EXISTS.0,
            ControllerError::InvalidName(_) => ErrorCode::INVALID_TOPIC_EXCEPTION.0,
            ControllerError::InvalidPartitions(_) => ErrorCode::INVALID_PARTITIONS.0,
            ControllerError::InvalidReplicationFactor { .. } => {
                ErrorCode::INVALID_REPLICATION_FACTOR.0
            }
            ControllerError::UnknownTopic(_) => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
            ControllerError::MirrorExists(_) => ErrorCode::CLUSTER_MIRROR_ALREADY_EXISTS.0,
            ControllerError::InvalidMirrorName(_) => ErrorCode::INVALID_REQUEST.0,
            ControllerError::UnknownMirror(_) => ErrorCode::UNKNOWN_CLUSTER_MIRROR.0,
            ControllerError::MirrorNotEmpty(_) => ErrorCode::CLUSTER_MIRROR_NOT_EMPTY.0,
            ControllerError::MirrorStateChanged { .. }
            | ControllerError::MirrorConfigsChanged(_) => {
                ErrorCode::INVALID_CLUSTER_MIRROR_STATES.0
            }
            // The registering broker's log directory is not the one holding its partitions.
            ControllerError::Storage(_) | ControllerError::DirectoryReplaced { .. } => {
                ErrorCode::KAFKA_STORAGE_ERROR.0
            }
            ControllerError::IsrChangeRefused { code, .. } => *code,
            ControllerError::Unavailable(_) => ErrorCode::REQUEST_TIMED_OUT.0,
        }
    }
}

/// The controller state and its log.
#[derive(Debug)]
pub struct Controller {
    /// The single-node metadata log; `None` for a quorum's replica, whose durable log is the
    /// quorum's (docs/cluster.md).
    log: Option<RecordLog<MetadataRecord>>,
    cluster_id: String,
    topics: BTreeMap<String, TopicMeta>,
    next_producer_id: i64,
    acls: BTreeSet<AclBinding>,
    mirrors: BTreeMap<String, BTreeMap<String, String>>,
    brokers: BTreeMap<i32, BrokerEndpoint>,
    /// The brokers fenced for silence (docs/cluster.md).
    fenced: BTreeSet<i32>,
    /// The brokers in controlled shutdown since their last registration.
    shutting_down: BTreeSet<i32>,
    /// Counts the changes applied, for whoever reacts to metadata (the mirroring engine).
    changes: tokio::sync::watch::Sender<u64>,
    /// What the recent changes touched.
    journal: journal::ChangeJournal,
}

/// Partition `i` of topic `name` as a [`MetadataRecord::Topic`] or
/// [`MetadataRecord::PartitionCount`] places it: its replicas as recorded, every one in sync,
/// or, in records written before replicas were placed, its leader alone. A coordinator
/// topic's ISR is its leader alone: its state lives in that broker's own record logs, not in
/// replicas (docs/replication.md §7), so its leadership must not move to another.
fn placed_partition(
    name: &str,
    (leaders, replicas, all_in_sync): (&[i32], &[Vec<i32>], bool),
    i: usize,
) -> PartitionMeta {
    let mut placed = match replicas.get(i).filter(|r| !r.is_empty()) {
        Some(replicas) => PartitionMeta::placed(replicas.clone()),
        None => PartitionMeta::led_by(leaders.get(i).copied().unwrap_or(ANY_NODE)),
    };
    if !all_in_sync || !crate::broker::internal_topics::has_partition_logs(name) {
        placed.isr = vec![placed.leader];
    }
    placed
}

/// Whether broker `node_id` leads partition `p` with no other replica in sync (or it is the
/// single node's): what [`MetadataRecord::LeadershipResumed`] gives a new leadership term.
fn leads_alone(p: &PartitionMeta, node_id: i32) -> bool {
    p.leader == ANY_NODE || (p.leader == node_id && p.isr.iter().all(|&r| r == node_id))
}

/// The record of partition `index` of `topic` becoming `after`.
fn partition_change_record(topic: &str, index: usize, after: &PartitionMeta) -> MetadataRecord {
    MetadataRecord::PartitionChange {
        topic: topic.to_string(),
        partition: index as i32,
        leader: after.leader,
        isr: after.isr.clone(),
        leader_epoch: after.leader_epoch,
        partition_epoch: after.partition_epoch,
        recovering: after.leader_recovery == LeaderRecovery::Recovering,
    }
}

/// A new cluster id, as Kafka writes them (a random UUID in Kafka's base64 form).
pub fn new_cluster_id() -> String {
    kmirror_protocol::topic_id::to_kafka_string(&Uuid::new_v4())
}

/// Mirror names follow Kafka's topic-name rules, as in the KIP prototype, except that a name may
/// not end in `.paused` or `.removed`: those suffixes are how `mirror.name` values ask a topic
/// to pause or stop (docs/design.md), and a name ending in one would read as another mirror's.
pub fn valid_mirror_name(name: &str) -> bool {
    valid_topic_name(name) && !name.ends_with(".paused") && !name.ends_with(".removed")
}

/// Kafka's topic-name rules: 1 to 249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Controller {
    /// Opens (or creates) the metadata log in `dir` and replays it.
    pub fn open(dir: &Path) -> Result<Controller, StorageError> {
        let (log, records) = RecordLog::open(&dir.join("metadata.log"))?;
        let mut controller = Controller::replica();
        controller.log = Some(log);
        for record in &records {
            controller.apply(record);
        }
        controller.init_cluster(&new_cluster_id())?;
        Ok(controller)
    }

    /// An empty image without a log of its own: a quorum member's replica of the metadata,
    /// changed only by the commands the quorum commits.
    pub fn replica() -> Controller {
        Controller {
            log: None,
            cluster_id: String::new(),
            topics: BTreeMap::new(),
            next_producer_id: 1000,
            acls: BTreeSet::new(),
            mirrors: BTreeMap::new(),
            brokers: BTreeMap::new(),
            fenced: BTreeSet::new(),
            shutting_down: BTreeSet::new(),
            changes: tokio::sync::watch::Sender::new(0),
            journal: journal::ChangeJournal::default(),
        }
    }

    fn apply(&mut self, record: &MetadataRecord) {
        match record {
            MetadataRecord::ClusterId { id } => self.cluster_id = id.clone(),
            MetadataRecord::BrokerRegistered {
                node_id,
                host,
                port,
                directory_id,
                epoch,
            } => {
                self.shutting_down.remove(node_id);
                self.brokers.insert(
                    *node_id,
                    BrokerEndpoint {
                        node_id: *node_id,
                        host: host.clone(),
                        port: *port,
                        directory_id: directory_id.clone(),
                        epoch: *epoch,
                    },
                );
            }
            MetadataRecord::BrokerShuttingDown { node_id } => {
                self.shutting_down.insert(*node_id);
            }
            MetadataRecord::BrokerFenced { node_id, fenced } => {
                if *fenced {
                    self.fenced.insert(*node_id);
                } else {
                    self.fenced.remove(node_id);
                }
            }
            MetadataRecord::Topic {
                name,
                topic_id,
                partitions,
                configs,
                leaders,
                replicas,
                all_in_sync,
            } => {
                let topic_id =
                    kmirror_protocol::topic_id::from_kafka_string(topic_id).unwrap_or_default();
                self.topics.insert(
                    name.clone(),
                    TopicMeta {
                        topic_id,
                        partitions: (0..*partitions as usize)
                            .map(|i| placed_partition(name, (leaders, replicas, *all_in_sync), i))
                            .collect(),
                        configs: configs.clone(),
                    },
                );
            }
            MetadataRecord::LeaderEpoch {
                topic,
                partition,
                epoch,
            } => {
                if let Some(p) = self
                    .topics
                    .get_mut(topic)
                    .and_then(|t| t.partitions.get_mut(*partition as usize))
                {
                    p.leader_epoch = *epoch;
                    p.partition_epoch += 1;
                }
            }
            MetadataRecord::PartitionChange {
                topic,
                partition,
                leader,
                isr,
                leader_epoch,
                partition_epoch,
                recovering,
            } => {
                if let Some(p) = self
                    .topics
                    .get_mut(topic)
                    .and_then(|t| t.partitions.get_mut(*partition as usize))
                {
                    p.leader = *leader;
                    p.isr = isr.clone();
                    p.leader_epoch = *leader_epoch;
                    p.partition_epoch = *partition_epoch;
                    p.leader_recovery = if *recovering {
                        LeaderRecovery::Recovering
                    } else {
                        LeaderRecovery::Recovered
                    };
                }
            }
            MetadataRecord::LeadershipResumed { node_id } => {
                for p in self
                    .topics
                    .values_mut()
                    .flat_map(|t| t.partitions.iter_mut())
                {
                    if leads_alone(p, *node_id) {
                        p.leader_epoch += 1;
                        p.partition_epoch += 1;
                    }
                }
            }
            MetadataRecord::ProducerIdBlock { next } => self.next_producer_id = *next,
            MetadataRecord::PartitionCount {
                topic,
                count,
                leaders,
                replicas,
                all_in_sync,
            } => {
                if let Some(t) = self.topics.get_mut(topic) {
                    let count = usize::try_from(*count).unwrap_or(0);
                    let before = t.partitions.len();
                    for i in before..count {
                        t.partitions.push(placed_partition(
                            topic,
                            (leaders, replicas, *all_in_sync),
                            i - before,
                        ));
                    }
                }
            }
            MetadataRecord::TopicDeleted { name } => {
                self.topics.remove(name);
            }
            MetadataRecord::TopicConfigs { topic, configs } => {
                if let Some(t) = self.topics.get_mut(topic) {
                    t.configs = configs.clone();
                }
            }
            MetadataRecord::MirrorCreated { name, configs }
            | MetadataRecord::MirrorConfigs { name, configs } => {
                self.mirrors.insert(name.clone(), configs.clone());
            }
            MetadataRecord::MirrorDeleted { name } => {
                self.mirrors.remove(name);
            }
            MetadataRecord::AclCreated { binding } => {
                self.acls.insert(binding.clone());
            }
            MetadataRecord::AclDeleted { binding } => {
                self.acls.remove(binding);
            }
        }
    }

    /// Appends a record durably, then applies it and tells the watchers.
    fn append(&mut self, record: MetadataRecord) -> Result<(), StorageError> {
        self.append_all(vec![record])
    }

    /// Appends records durably together (one fsync), then applies them.
    fn append_all(&mut self, records: Vec<MetadataRecord>) -> Result<(), StorageError> {
        if let Some(log) = &mut self.log {
            log.append_all(&records)?;
        }
        self.applied(&records);
        Ok(())
    }

    /// Applies durable records, journals them and tells the watchers (once).
    fn applied(&mut self, records: &[MetadataRecord]) {
        let mut version = self.change_count();
        for record in records {
            self.apply(record);
            version += 1;
            self.journal.record(version, record);
        }
        self.changes.send_replace(version);
    }

    /// How many changes were applied since the controller opened.
    pub fn change_count(&self) -> u64 {
        *self.changes.borrow()
    }

    /// The version now and what changed after version `followed` (everything for `None`, or
    /// for a version older than the journal holds).
    pub fn changes_since(&self, followed: Option<u64>) -> (u64, MetadataDelta) {
        let current = self.change_count();
        (current, self.journal.since(followed, current))
    }

    /// A receiver that sees every durable metadata change (the count of changes so far).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Sets the cluster id unless it is set.
    pub fn init_cluster(&mut self, id: &str) -> Result<(), StorageError> {
        if !self.cluster_id.is_empty() {
            return Ok(());
        }
        self.append(MetadataRecord::ClusterId { id: id.to_string() })?;
        // A new cluster's producer ids start at a base of its own, written as a block of its
        // own: a cluster created before keeps counting from 1000, replayed or restored alike.
        self.append(MetadataRecord::ProducerIdBlock {
            next: producer_id_base(id),
        })
    }

    /// The brokers of the cluster, by node id.
    pub fn brokers(&self) -> &BTreeMap<i32, BrokerEndpoint> {
        &self.brokers
    }

    /// Refuses broker `node_id` when it registers with another log directory than the one it
    /// registered with before while it is the last in-sync replica of a partition (a fenced
    /// leader still is): that partition's data was on the lost directory
    /// ([`ControllerError::DirectoryReplaced`]). Elsewhere the new directory is accepted and the
    /// broker leaves the ISRs ([`Controller::register_broker`]).
    pub fn check_directory(
        &self,
        node_id: i32,
        directory_id: Option<&str>,
    ) -> Result<(), ControllerError> {
        let registered = self
            .brokers
            .get(&node_id)
            .and_then(|b| b.directory_id.as_deref());
        match (registered, directory_id) {
            (Some(registered), Some(now))
                if registered != now && self.holds_needed_replicas(node_id) =>
            {
                Err(ControllerError::DirectoryReplaced {
                    node_id,
                    registered: registered.to_string(),
                    now: now.to_string(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Registers broker `node_id` at a start: where it is reached, its log directory (a
    /// broker that sends none keeps the one recorded) and a new broker epoch. A fenced broker
    /// is unfenced, and partitions without a leader elect one.
    pub fn register_broker(
        &mut self,
        node_id: i32,
        host: &str,
        port: u16,
        directory_id: Option<&str>,
    ) -> Result<(), StorageError> {
        let registered = self
            .brokers
            .get(&node_id)
            .and_then(|b| b.directory_id.clone());
        let epoch = self.brokers.values().map(|b| b.epoch).max().unwrap_or(0) + 1;
        let replaced = matches!((&registered, directory_id), (Some(was), Some(now)) if was != now);
        let mut records = vec![MetadataRecord::BrokerRegistered {
            node_id,
            host: host.to_string(),
            port,
            directory_id: directory_id.map(str::to_string).or(registered),
            epoch,
        }];
        // A new directory holds none of the broker's replicas: it leaves every ISR and fetches
        // them again as a follower. It stays the leader where it is the last in-sync replica:
        // only `__transaction_state` partitions, which hold no log (`check_directory` refused
        // the rest).
        if replaced {
            records.extend(self.leaving_isrs(node_id, true));
        }
        // A broker that registers is alive.
        if self.fenced.contains(&node_id) {
            records.extend(self.unfencing(node_id));
        }
        self.append_all(records)
    }

    /// Whether broker `node_id` is the last in-sync replica of a partition with a partition
    /// log: the one replica an election may pick, whose data the partition needs.
    /// `__transaction_state` has none (the transactions are in the coordinating broker's own
    /// record log, lost with its directory: refusing the broker would not bring it back, and
    /// would keep it out for good).
    fn holds_needed_replicas(&self, node_id: i32) -> bool {
        self.topics
            .iter()
            .filter(|(name, _)| crate::broker::internal_topics::has_partition_logs(name))
            .flat_map(|(_, t)| &t.partitions)
            .any(|p| {
                (p.leader == node_id || p.isr.contains(&node_id))
                    && partition_change::without(&p.isr, node_id).is_empty()
            })
    }

    /// Whether broker `node_id` is registered, not fenced and not shutting down: a replica an
    /// election may pick and an ISR may take.
    fn live(&self, node_id: i32) -> bool {
        self.brokers.contains_key(&node_id)
            && !self.fenced.contains(&node_id)
            && !self.shutting_down.contains(&node_id)
    }

    /// The brokers that may not lead or join an ISR: fenced or shutting down.
    pub fn ineligible(&self) -> BTreeSet<i32> {
        self.fenced.union(&self.shutting_down).copied().collect()
    }

    /// Controlled shutdown of broker `node_id` (Kafka's, docs/replication.md §3): it leaves
    /// every ISR it is not the last member of, and the partitions it leads elect another
    /// in-sync leader, before it stops; until it registers again it is not elected nor taken
    /// back into an ISR. Answers how many partitions it still leads (it was their last
    /// in-sync replica: they go offline when it stops).
    pub fn controlled_shutdown(&mut self, node_id: i32) -> Result<usize, StorageError> {
        if !self.brokers.contains_key(&node_id) {
            return Ok(0);
        }
        let mut records = Vec::new();
        if !self.shutting_down.contains(&node_id) {
            records.push(MetadataRecord::BrokerShuttingDown { node_id });
        }
        records.extend(self.leaving_isrs(node_id, true));
        self.append_all(records)?;
        Ok(self
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.leader == node_id)
            .count())
    }

    /// The election a topic's partitions get: unclean only with the topic's
    /// `unclean.leader.election.enable=true`.
    fn election(topic: &TopicMeta) -> partition_change::Election {
        match topic.configs.get("unclean.leader.election.enable") {
            Some(v) if v.eq_ignore_ascii_case("true") => partition_change::Election::Unclean,
            _ => partition_change::Election::Online,
        }
    }

    /// The records of what `decide` changes, partition by partition.
    fn partition_changes(
        &self,
        mut decide: impl FnMut(&TopicMeta, &PartitionMeta) -> Option<PartitionMeta>,
    ) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for (name, topic) in &self.topics {
            for (index, partition) in topic.partitions.iter().enumerate() {
                if let Some(after) = decide(topic, partition) {
                    records.push(partition_change_record(name, index, &after));
                }
            }
        }
        records
    }

    /// Broker `node_id` fenced: it leaves every ISR (the last member stays) and the partitions
    /// it led elect new leaders (docs/replication.md §3).
    fn fencing(&self, node_id: i32) -> Vec<MetadataRecord> {
        let mut records = vec![MetadataRecord::BrokerFenced {
            node_id,
            fenced: true,
        }];
        records.extend(self.leaving_isrs(node_id, false));
        records
    }

    /// Broker `node_id` leaves every ISR (the last member stays) and the partitions it led
    /// elect new leaders among the other live replicas; with `keep_sole`, partitions it is the
    /// last in-sync replica of are left as they are (a controlled shutdown: it leads them until
    /// it stops, and a quick restart finds them still its own).
    fn leaving_isrs(&self, node_id: i32, keep_sole: bool) -> Vec<MetadataRecord> {
        self.partition_changes(|topic, p| {
            if !p.isr.contains(&node_id) && p.leader != node_id {
                return None;
            }
            if keep_sole && partition_change::without(&p.isr, node_id).is_empty() {
                return None;
            }
            partition_change::next(
                p,
                &partition_change::without(&p.isr, node_id),
                |r| r != node_id && self.live(r),
                Controller::election(topic),
                false,
            )
        })
    }

    /// Broker `node_id` unfenced: partitions without a leader elect one.
    fn unfencing(&self, node_id: i32) -> Vec<MetadataRecord> {
        let mut records = vec![MetadataRecord::BrokerFenced {
            node_id,
            fenced: false,
        }];
        records.extend(self.partition_changes(|topic, p| {
            if p.has_leader() {
                return None;
            }
            partition_change::next(
                p,
                &p.isr,
                |r| r == node_id || self.live(r),
                Controller::election(topic),
                false,
            )
        }));
        records
    }

    /// Fences or unfences a registered broker (nothing is written when it already is), with
    /// the elections that follow.
    pub fn fence_broker(&mut self, node_id: i32, fenced: bool) -> Result<(), StorageError> {
        if !self.brokers.contains_key(&node_id) || self.fenced.contains(&node_id) == fenced {
            return Ok(());
        }
        let records = if fenced {
            self.fencing(node_id)
        } else {
            self.unfencing(node_id)
        };
        self.append_all(records)
    }

    /// How many partitions have no leader.
    pub fn offline_partitions(&self) -> usize {
        self.topics
            .values()
            .flat_map(|t| &t.partitions)
            .filter(|p| !p.has_leader())
            .count()
    }

    /// The broker epoch broker `node_id` registered with last.
    pub fn broker_epoch(&self, node_id: i32) -> Option<i64> {
        self.brokers.get(&node_id).map(|b| b.epoch)
    }

    /// The brokers fenced for silence.
    pub fn fenced(&self) -> &BTreeSet<i32> {
        &self.fenced
    }

    /// The brokers a new replica may go to: those not fenced (all registered ones when every
    /// broker is fenced: this one's own heartbeats not yet counted).
    fn placeable(&self) -> Vec<i32> {
        let live: Vec<i32> = self
            .brokers
            .keys()
            .copied()
            .filter(|id| !self.fenced.contains(id))
            .collect();
        if live.is_empty() {
            self.brokers.keys().copied().collect()
        } else {
            live
        }
    }

    /// The replicas of `count` new partitions after the first `from` of topic `name`, `factor`
    /// each (at most the brokers that can hold one; the caller checked): leaders go round the
    /// placeable brokers from a place the name decides (so topics spread over the cluster),
    /// and each partition's followers are the brokers after its leader, shifted by one more
    /// on every round, as Kafka's placer does, so one broker's followers spread over all the
    /// others.
    fn place(&self, name: &str, from: usize, count: usize, factor: usize) -> Vec<Vec<i32>> {
        let ids = self.placeable();
        if ids.is_empty() {
            return vec![vec![ANY_NODE]; count];
        }
        let n = ids.len();
        let factor = factor.clamp(1, n);
        let start = name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        (from..from + count)
            .map(|i| {
                let first = start.wrapping_add(i) % n;
                let shift = (start / n).wrapping_add(i / n);
                let followers = (0..factor - 1).map(|j| {
                    // Offsets 1..n from the leader, distinct for j < n - 1.
                    ids[(first + 1 + (shift.wrapping_add(j)) % (n - 1)) % n]
                });
                std::iter::once(ids[first]).chain(followers).collect()
            })
            .collect()
    }

    /// Every mirror, with its configs.
    pub fn mirrors(&self) -> &BTreeMap<String, BTreeMap<String, String>> {
        &self.mirrors
    }

    /// The topics of a mirror: those whose `mirror.name` is the mirror's name, with or without
    /// the `.paused` / `.removed` suffix.
    pub fn mirror_topics(&self, mirror: &str) -> Vec<String> {
        kmirror_actors::metadata::mirror_topics(&self.topics, mirror)
    }

    /// CreateMirror.
    pub fn create_mirror(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        if !valid_mirror_name(name) {
            return Err(ControllerError::InvalidMirrorName(name.to_string()));
        }
        if self.mirrors.contains_key(name) {
            return Err(ControllerError::MirrorExists(name.to_string()));
        }
        self.append(MetadataRecord::MirrorCreated {
            name: name.to_string(),
            configs,
        })?;
        Ok(())
    }

    /// A mirror's new configs (all of them), checked by the caller.
    pub fn set_mirror_configs(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        if !self.mirrors.contains_key(name) {
            return Err(ControllerError::UnknownMirror(name.to_string()));
        }
        self.append(MetadataRecord::MirrorConfigs {
            name: name.to_string(),
            configs,
        })?;
        Ok(())
    }

    /// DeleteMirror: a mirror goes once every topic it has is asked to stop (the broker checked
    /// that their partitions are STOPPED). Those topics keep their data and leave the mirror:
    /// their `mirror.*` configs are removed, so they are ordinary writable topics.
    pub fn delete_mirror(&mut self, name: &str) -> Result<(), ControllerError> {
        if !self.mirrors.contains_key(name) {
            return Err(ControllerError::UnknownMirror(name.to_string()));
        }
        let topics = self.mirror_topics(name);
        let stopped = |t: &TopicMeta| {
            t.configs
                .get("mirror.name")
                .and_then(|v| kmirror_actors::metadata::mirror_of(v))
                .is_some_and(|(_, desired)| desired == kmirror_actors::partition::Desired::Stopped)
        };
        if topics.iter().any(|t| !stopped(&self.topics[t])) {
            return Err(ControllerError::MirrorNotEmpty(name.to_string()));
        }
        // One batch: a crash leaves the mirror with its topics or gone without them.
        let mut records: Vec<MetadataRecord> = topics
            .into_iter()
            .map(|topic| {
                let mut configs = self.topics[&topic].configs.clone();
                configs.retain(|key, _| !key.starts_with("mirror."));
                MetadataRecord::TopicConfigs { topic, configs }
            })
            .collect();
        records.push(MetadataRecord::MirrorDeleted {
            name: name.to_string(),
        });
        self.append_all(records)?;
        Ok(())
    }

    /// A topic's new `mirror.name` (in `configs`; `current` are its configs now, `None` for a new
    /// topic) may only name a mirror that exists: a start racing the mirror's deletion through
    /// another broker would otherwise leave a read-only topic no mirror answers for.
    fn check_mirror_named(
        &self,
        configs: &BTreeMap<String, String>,
        current: Option<&BTreeMap<String, String>>,
    ) -> Result<(), ControllerError> {
        let value = configs.get("mirror.name");
        if value == current.and_then(|c| c.get("mirror.name")) {
            return Ok(());
        }
        match value.and_then(|v| kmirror_actors::metadata::mirror_of(v)) {
            Some((mirror, _)) if !self.mirrors.contains_key(mirror) => {
                Err(ControllerError::UnknownMirror(mirror.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Every ACL.
    pub fn acls(&self) -> Vec<AclBinding> {
        self.acls.iter().cloned().collect()
    }

    /// Stores an ACL (creating one that exists changes nothing).
    pub fn create_acl(&mut self, binding: AclBinding) -> Result<(), StorageError> {
        if self.acls.contains(&binding) {
            return Ok(());
        }
        self.append(MetadataRecord::AclCreated { binding })
    }

    /// Deletes every ACL `filter` selects; returns them.
    pub fn delete_acls(&mut self, filter: &AclFilter) -> Result<Vec<AclBinding>, StorageError> {
        let selected: Vec<AclBinding> = self
            .acls
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect();
        for binding in &selected {
            self.append(MetadataRecord::AclDeleted {
                binding: binding.clone(),
            })?;
        }
        Ok(selected)
    }

    /// Every topic.
    pub fn topics(&self) -> &BTreeMap<String, TopicMeta> {
        &self.topics
    }

    /// Whether [`Controller::create_topic`] would accept this name, partition count and
    /// replication factor.
    pub fn check_create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<(), ControllerError> {
        if !valid_topic_name(name) {
            return Err(ControllerError::InvalidName(name.to_string()));
        }
        if self.topics.contains_key(name) {
            return Err(ControllerError::TopicExists(name.to_string()));
        }
        if partitions < 1 {
            return Err(ControllerError::InvalidPartitions(partitions));
        }
        let brokers = self.placeable().len().max(1);
        if replication_factor < 1 || replication_factor as usize > brokers {
            return Err(ControllerError::InvalidReplicationFactor {
                factor: replication_factor,
                brokers,
            });
        }
        Ok(())
    }

    /// Creates a topic with `replication_factor` replicas per partition, keeping `topic_id`
    /// when one is given (mirror topics keep the source's).
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        topic_id: Option<Uuid>,
    ) -> Result<TopicMeta, ControllerError> {
        self.check_create_topic(name, partitions, replication_factor)?;
        self.check_mirror_named(&configs, None)?;
        let id = topic_id.unwrap_or_else(Uuid::new_v4);
        let replicas = self.place(name, 0, partitions as usize, replication_factor as usize);
        self.append(MetadataRecord::Topic {
            name: name.to_string(),
            topic_id: kmirror_protocol::topic_id::to_kafka_string(&id),
            partitions,
            configs,
            leaders: replicas.iter().map(|r| r[0]).collect(),
            replicas,
            all_in_sync: true,
        })?;
        Ok(self.topics[name].clone())
    }

    /// Whether [`Controller::create_partitions`] would accept growing `name` to `count`.
    pub fn check_create_partitions(&self, name: &str, count: i32) -> Result<(), ControllerError> {
        let current = self
            .topics
            .get(name)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?
            .partitions
            .len();
        if usize::try_from(count).map_or(true, |c| c <= current) {
            return Err(ControllerError::InvalidPartitions(count));
        }
        Ok(())
    }

    /// Grows a topic to `count` partitions (partitions are never removed, as in Kafka).
    pub fn create_partitions(
        &mut self,
        name: &str,
        count: i32,
    ) -> Result<TopicMeta, ControllerError> {
        self.check_create_partitions(name, count)?;
        let partitions = &self.topics[name].partitions;
        let before = partitions.len();
        // New partitions get as many replicas as the topic's first, as Kafka's do, as far as
        // the brokers that can hold one allow.
        let factor = partitions
            .first()
            .map_or(1, |p| p.replicas.len())
            .clamp(1, self.placeable().len().max(1));
        let replicas = self.place(name, before, count as usize - before, factor);
        self.append(MetadataRecord::PartitionCount {
            topic: name.to_string(),
            count,
            leaders: replicas.iter().map(|r| r[0]).collect(),
            replicas,
            all_in_sync: true,
        })?;
        Ok(self.topics[name].clone())
    }

    /// Replaces a topic's dynamic configs.
    pub fn set_topic_configs(
        &mut self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, ControllerError> {
        let Some(topic) = self.topics.get(name) else {
            return Err(ControllerError::UnknownTopic(name.to_string()));
        };
        self.check_mirror_named(&configs, Some(&topic.configs))?;
        self.append(MetadataRecord::TopicConfigs {
            topic: name.to_string(),
            configs,
        })?;
        Ok(self.topics[name].clone())
    }

    /// The configs of topic `name` now, with the changes a writer made from `base` to
    /// `configs` applied to them key by key (see [`MetadataCommand::SetTopicConfigs`]).
    pub fn rebased_configs(
        &self,
        name: &str,
        base: &BTreeMap<String, String>,
        configs: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ControllerError> {
        let mut current = self
            .topics
            .get(name)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?
            .configs
            .clone();
        // `mirror.name` is compared and set: its changes are the mirror RPCs' state
        // transitions, each legal only from the value it was checked against.
        const MIRROR_NAME: &str = "mirror.name";
        if configs.get(MIRROR_NAME) != base.get(MIRROR_NAME)
            && current.get(MIRROR_NAME) != base.get(MIRROR_NAME)
        {
            return Err(ControllerError::MirrorStateChanged {
                topic: name.to_string(),
                now: current.get(MIRROR_NAME).cloned().unwrap_or_default(),
            });
        }
        for (key, value) in configs {
            if base.get(key) != Some(value) {
                current.insert(key.clone(), value.clone());
            }
        }
        for key in base.keys().filter(|k| !configs.contains_key(*k)) {
            current.remove(key);
        }
        Ok(current)
    }

    /// Deletes a topic; returns what it was.
    pub fn delete_topic(&mut self, name: &str) -> Result<TopicMeta, ControllerError> {
        let topic = self
            .topics
            .get(name)
            .cloned()
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?;
        self.append(MetadataRecord::TopicDeleted {
            name: name.to_string(),
        })?;
        Ok(topic)
    }

    /// Raises a partition's leader epoch to at least `min_leader_epoch + 1` (BumpLeaderEpochs);
    /// returns the epoch afterwards.
    pub fn bump_leader_epoch(
        &mut self,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> Result<Option<i32>, StorageError> {
        let bumped =
            self.bump_leader_epochs(&[(topic.to_string(), partition, min_leader_epoch)])?;
        Ok(bumped.into_iter().next().flatten())
    }

    /// [`Controller::bump_leader_epoch`] for many partitions, in order, made durable together
    /// (one fsync); `None` for a partition that does not exist.
    pub fn bump_leader_epochs(
        &mut self,
        requests: &[(String, i32, i32)],
    ) -> Result<Vec<Option<i32>>, StorageError> {
        // Epochs as the batch leaves them, so a partition asked twice sees its first bump.
        let mut epochs: HashMap<(&str, i32), i32> = HashMap::new();
        let mut records = Vec::new();
        let mut answers = Vec::with_capacity(requests.len());
        for (topic, partition, min_leader_epoch) in requests {
            let current = epochs
                .get(&(topic.as_str(), *partition))
                .copied()
                .or_else(|| {
                    self.topics
                        .get(topic)
                        .and_then(|t| t.partitions.get(*partition as usize))
                        .map(|p| p.leader_epoch)
                });
            let Some(current) = current else {
                answers.push(None);
                continue;
            };
            let epoch = kmirror_actors::epoch::bumped_epoch(current, *min_leader_epoch);
            if epoch != current {
                epochs.insert((topic.as_str(), *partition), epoch);
                records.push(MetadataRecord::LeaderEpoch {
                    topic: topic.clone(),
                    partition: *partition,
                    epoch,
                });
            }
            answers.push(Some(epoch));
        }
        if !records.is_empty() {
            self.append_all(records)?;
        }
        Ok(answers)
    }

    /// Broker `node_id` started again (called once per start). It may have lost what it had
    /// not flushed, so it leaves the ISRs that have other members (it rejoins by catching up)
    /// and the partitions it led there elect another leader; a partition it leads alone gets
    /// a new leadership term, so records produced from now on carry epochs above everything
    /// written before the restart and a log that diverged while this node was away is told
    /// apart by epoch (failback relies on it).
    pub fn resume_leadership(&mut self, node_id: i32) -> Result<(), StorageError> {
        if self.topics.is_empty() {
            return Ok(());
        }
        // One record bumps the partitions it leads alone (replayed by `leads_alone`).
        let mut records = vec![MetadataRecord::LeadershipResumed { node_id }];
        records.extend(self.partition_changes(|topic, p| {
            if leads_alone(p, node_id) || !p.isr.contains(&node_id) {
                return None;
            }
            partition_change::next(
                p,
                &partition_change::without(&p.isr, node_id),
                |r| r != node_id && self.live(r),
                Controller::election(topic),
                false,
            )
        }));
        self.append_all(records)
    }

    /// AlterPartition from broker `sender` at `broker_epoch`: each ISR change checked
    /// ([`partition_change::check_isr_change`]) and applied, all durable together. A stale
    /// broker epoch refuses them all (STALE_BROKER_EPOCH).
    pub fn alter_partition(
        &mut self,
        sender: i32,
        broker_epoch: i64,
        changes: &[partition_change::IsrChange],
    ) -> Result<Vec<Result<PartitionMeta, ControllerError>>, ControllerError> {
        if self.broker_epoch(sender) != Some(broker_epoch) {
            return Err(ControllerError::IsrChangeRefused {
                code: ErrorCode::STALE_BROKER_EPOCH.0,
                reason: format!(
                    "broker {sender} at broker epoch {broker_epoch} is not registered so (restarted since?)"
                ),
            });
        }
        // Registrations as the batch leaves them, so a partition asked twice is checked
        // against its first change.
        let mut changed: HashMap<(String, i32), PartitionMeta> = HashMap::new();
        let mut records = Vec::new();
        let mut answers = Vec::with_capacity(changes.len());
        for change in changes {
            let key = (change.topic.clone(), change.partition);
            let current = changed.get(&key).cloned().or_else(|| {
                self.topics
                    .get(&change.topic)
                    .and_then(|t| t.partitions.get(change.partition as usize))
                    .cloned()
            });
            let eligible = |id: i32, epoch: i64| {
                self.live(id) && (epoch < 0 || self.broker_epoch(id) == Some(epoch))
            };
            if let Err(e) =
                partition_change::check_isr_change(current.as_ref(), sender, change, eligible)
            {
                answers.push(Err(e));
                continue;
            }
            let Some(current) = current else { continue };
            let isr: Vec<i32> = change.new_isr.iter().map(|(id, _)| *id).collect();
            match partition_change::next(
                &current,
                &isr,
                |r| r == sender || self.live(r),
                partition_change::Election::Online,
                change.recovered,
            ) {
                Some(after) => {
                    records.push(partition_change_record(
                        &change.topic,
                        change.partition as usize,
                        &after,
                    ));
                    changed.insert(key, after.clone());
                    answers.push(Ok(after));
                }
                None => answers.push(Ok(current)),
            }
        }
        if !records.is_empty() {
            self.append_all(records)?;
        }
        Ok(answers)
    }

    /// Hands out `count` producer ids from the first returned, durably (ids are never reused
    /// across restarts); a broker hands them out one by one.
    pub fn allocate_producer_ids(&mut self, count: i64) -> Result<i64, StorageError> {
        let id = self.next_producer_id;
        self.append(MetadataRecord::ProducerIdBlock {
            next: id + count.max(1),
        })?;
        Ok(id)
    }
}

/// Where a cluster's producer ids start: 2^24 or more, at a point its id decides (FNV-1a, so
/// every node and every version computes the same). Mirrored batches keep the source's
/// producer ids, and a source producer that moves to the destination after a failover keeps
/// its id: a destination producer given the same id is refused on any partition both write
/// (OUT_OF_ORDER_SEQUENCE_NUMBER), whichever came first (found by review). Apache Kafka hands
/// ids out from 0 up, and two kmirror clusters start 2^24 apart at least but for one chance
/// in 2^30 (docs/failover.md, "Producer ids after a failover").
pub fn producer_id_base(cluster_id: &str) -> i64 {
    let hash = cluster_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
    let slot = i64::try_from(hash % ((1 << 30) - 1)).unwrap_or(0) + 1;
    slot << 24
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Engine review finding 8: two writers of different keys from the same (stale) configs do
    /// not undo each other: a stop's `mirror.name` survives a config change read before it.
    /// Failed before the fix: the later write replaced the whole map, reverting the stop.
    /// Hostile review: a node whose data directory was wiped came back under its old id and
    /// served its partitions empty. Its registration with a new directory is refused while it
    /// leads partitions; one that leads nothing may change directory.
    #[test]
    fn a_broker_leading_partitions_cannot_register_a_new_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        let register = |dir: &str| MetadataCommand::RegisterBroker {
            node_id: 1,
            host: "h".into(),
            port: 9092,
            directory_id: Some(dir.into()),
        };
        c.execute(&register("a")).expect("first registration");
        c.execute(&register("b"))
            .expect("leads nothing: may change");
        c.execute(&register("b")).expect("the same directory again");
        c.create_topic("orders", 2, 1, BTreeMap::new(), None)
            .expect("creates");
        assert!(
            c.topics()["orders"]
                .partitions
                .iter()
                .all(|p| p.leader == 1)
        );
        assert!(matches!(
            c.execute(&register("c")),
            Err(ControllerError::DirectoryReplaced { node_id: 1, ref registered, ref now })
                if registered == "b" && now == "c"
        ));
        assert_eq!(c.brokers()[&1].directory_id.as_deref(), Some("b"));
        // Fenced, it leads nothing, but is still the partitions' last in-sync replica.
        c.fence_broker(1, true).expect("fences");
        assert!(
            c.topics()["orders"]
                .partitions
                .iter()
                .all(|p| !p.has_leader())
        );
        assert!(matches!(
            c.execute(&register("c")),
            Err(ControllerError::DirectoryReplaced { .. })
        ));
        c.execute(&register("b")).expect("its own directory back");
        assert!(
            c.topics()["orders"]
                .partitions
                .iter()
                .all(|p| p.leader == 1)
        );
    }

    /// docs/replication.md §3: a broker whose directory was wiped comes back with a new one.
    /// Where other in-sync replicas hold its partitions it is accepted, leaves every ISR and
    /// loses leadership to an in-sync replica, so an empty log never leads or counts for acks.
    #[test]
    fn a_wiped_broker_rejoins_outside_the_isrs_where_others_hold_the_data() {
        let mut c = Controller::replica();
        let register = |id: i32, dir: &str| MetadataCommand::RegisterBroker {
            node_id: id,
            host: "h".into(),
            port: 9092,
            directory_id: Some(dir.into()),
        };
        for id in 1..=3 {
            c.execute(&register(id, "first")).expect("registers");
        }
        c.create_topic("orders", 3, 3, BTreeMap::new(), None)
            .expect("creates");
        // The transaction coordinators' topic holds no logs: each partition's ISR is its
        // leader alone.
        c.create_topic("__transaction_state", 3, 3, BTreeMap::new(), None)
            .expect("creates");
        let before = c.topics()["orders"].partitions.clone();
        let led: Vec<usize> = (0..3).filter(|&i| before[i].leader == 1).collect();
        assert!(!led.is_empty(), "broker 1 leads a partition: {before:?}");
        let coordinated: Vec<PartitionMeta> = c.topics()["__transaction_state"].partitions.clone();
        assert!(coordinated.iter().any(|p| p.leader == 1 && p.isr == [1]));
        c.execute(&register(1, "wiped"))
            .expect("others hold every partition with a log");
        assert_eq!(
            c.topics()["__transaction_state"].partitions,
            coordinated,
            "it keeps coordinating what it coordinated (that state was in its own directory)"
        );
        for (i, p) in c.topics()["orders"].partitions.iter().enumerate() {
            assert!(!p.isr.contains(&1), "partition {i}: {p:?}");
            assert_eq!(p.replicas, before[i].replicas, "still a replica");
            assert!(
                p.leader != 1 && p.isr.contains(&p.leader),
                "partition {i}: {p:?}"
            );
            if led.contains(&i) {
                assert_eq!(p.leader_epoch, before[i].leader_epoch + 1);
            }
        }
        assert_eq!(c.brokers()[&1].directory_id.as_deref(), Some("wiped"));
        // Broker 2 is now the last in-sync replica of a partition once 3 is fenced: its
        // directory cannot be replaced.
        c.fence_broker(3, true).expect("fences");
        assert!(matches!(
            c.execute(&register(2, "wiped")),
            Err(ControllerError::DirectoryReplaced { node_id: 2, .. })
        ));
    }

    /// docs/replication.md §3, controlled shutdown: the stopping broker loses leadership to an
    /// in-sync replica and leaves the ISRs at once (no session timeout), is refused back into an
    /// ISR (INELIGIBLE_REPLICA) and never elected while stopping, keeps only what it is the last
    /// in-sync replica of, survives a snapshot, and is eligible again once it registers.
    #[test]
    fn controlled_shutdown_moves_leadership_first() {
        let mut c = Controller::replica();
        for id in 1..=3 {
            c.register_broker(id, "h", 9092, None).expect("registers");
        }
        c.create_topic("orders", 3, 3, BTreeMap::new(), None)
            .expect("creates");
        c.create_topic("single", 3, 1, BTreeMap::new(), None)
            .expect("creates");
        let before = c.topics()["orders"].partitions.clone();
        let singles_led = c.topics()["single"]
            .partitions
            .iter()
            .filter(|p| p.leader == 1)
            .count();
        let still = c
            .execute(&MetadataCommand::ControlledShutdown { node_id: 1 })
            .expect("applies");
        assert_eq!(still, Applied::StillLeads(singles_led));
        for (i, p) in c.topics()["orders"].partitions.iter().enumerate() {
            assert!(p.leader != 1 && p.has_leader(), "partition {i}: {p:?}");
            assert!(!p.isr.contains(&1), "partition {i}: {p:?}");
            if before[i].leader == 1 {
                assert_eq!(p.leader_epoch, before[i].leader_epoch + 1);
            }
        }
        assert!(c.ineligible().contains(&1));
        // Its leader asks to take it back: refused while it stops.
        let p = c.topics()["orders"].partitions[0].clone();
        let epoch_of = |c: &Controller, id: i32| c.broker_epoch(id).expect("registered");
        let back = partition_change::IsrChange {
            topic: "orders".into(),
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: [p.isr.clone(), vec![1]]
                .concat()
                .into_iter()
                .map(|r| (r, epoch_of(&c, r)))
                .collect(),
            recovered: false,
        };
        let answers = c
            .alter_partition(p.leader, epoch_of(&c, p.leader), &[back])
            .expect("answered");
        assert_eq!(
            answers[0].as_ref().map(|_| ()).map_err(|e| e.error_code()),
            Err(ErrorCode::INELIGIBLE_REPLICA.0)
        );
        // A snapshot keeps it stopping; its next registration ends that.
        let mut copy = Controller::replica();
        for record in c.image_records() {
            copy.apply(&record);
        }
        assert!(copy.ineligible().contains(&1));
        c.register_broker(1, "h", 9092, None).expect("registers");
        assert!(!c.ineligible().contains(&1));
    }

    #[test]
    fn config_writes_from_a_stale_image_change_only_their_keys() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        c.create_mirror("m", BTreeMap::new()).expect("created");
        let read = BTreeMap::from([("mirror.name".to_string(), "m".to_string())]);
        c.create_topic("orders", 1, 1, read.clone(), None)
            .expect("creates");
        let stop = BTreeMap::from([("mirror.name".to_string(), "m.removed".to_string())]);
        let stale = BTreeMap::from([
            ("mirror.name".to_string(), "m".to_string()),
            ("min.insync.replicas".to_string(), "2".to_string()),
        ]);
        for (configs, base) in [(stop, read.clone()), (stale, read)] {
            c.execute(&MetadataCommand::SetTopicConfigs {
                name: "orders".into(),
                configs,
                base: Some(base),
            })
            .expect("applied");
        }
        assert_eq!(
            c.topics()["orders"].configs,
            BTreeMap::from([
                ("min.insync.replicas".to_string(), "2".to_string()),
                ("mirror.name".to_string(), "m.removed".to_string()),
            ])
        );
        // A pause checked against the mirroring topic, landing after the stop, is refused
        // (found by the cluster nemesis: it turned the STOPPED topic read-only again).
        let pause = BTreeMap::from([("mirror.name".to_string(), "m.paused".to_string())]);
        let stale = BTreeMap::from([("mirror.name".to_string(), "m".to_string())]);
        assert!(matches!(
            c.execute(&MetadataCommand::SetTopicConfigs {
                name: "orders".into(),
                configs: pause,
                base: Some(stale),
            }),
            Err(ControllerError::MirrorStateChanged { .. })
        ));
        assert_eq!(c.topics()["orders"].configs["mirror.name"], "m.removed");
    }

    #[test]
    fn a_topic_cannot_join_a_mirror_that_is_gone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        let mirror_name = |v: &str| BTreeMap::from([("mirror.name".to_string(), v.to_string())]);
        c.create_mirror("m", BTreeMap::new()).expect("created");
        c.create_topic("stopped", 1, 1, mirror_name("m.removed"), None)
            .expect("created");
        c.create_topic("plain", 1, 1, BTreeMap::new(), None)
            .expect("created");
        c.delete_mirror("m")
            .expect("deleted: its only topic is stopped");
        assert_eq!(c.topics()["stopped"].configs, BTreeMap::new());
        // A start that checked the mirror before the delete lands after it: refused.
        assert!(matches!(
            c.create_topic("late", 1, 1, mirror_name("m"), None),
            Err(ControllerError::UnknownMirror(_))
        ));
        assert!(matches!(
            c.set_topic_configs("plain", mirror_name("m")),
            Err(ControllerError::UnknownMirror(_))
        ));
        assert!(!c.topics().contains_key("late"));
        assert_eq!(c.topics()["plain"].configs, BTreeMap::new());
    }

    #[test]
    fn a_mirror_config_change_from_stale_configs_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        let configs = |include: &str| {
            BTreeMap::from([
                ("bootstrap.servers".to_string(), "src:9092".to_string()),
                ("topics.include".to_string(), include.to_string()),
            ])
        };
        c.create_mirror("m", configs("a")).expect("created");
        let set = |configs, base| MetadataCommand::SetMirrorConfigs {
            name: "m".into(),
            configs,
            base: Some(base),
        };
        // Two starts read `a`; the first adds `b`, the second, adding `c` from `a`, is refused
        // rather than dropping `b`.
        c.execute(&set(configs("a,b"), configs("a")))
            .expect("applies");
        assert!(matches!(
            c.execute(&set(configs("a,c"), configs("a"))),
            Err(ControllerError::MirrorConfigsChanged(_))
        ));
        c.execute(&set(configs("a,b,c"), configs("a,b")))
            .expect("applies");
        assert_eq!(c.mirrors()["m"], configs("a,b,c"));
    }

    #[test]
    fn metadata_survives_restarts_and_torn_tails() {
        let dir = tempfile::tempdir().expect("temp dir");
        let given = Uuid::from_u128(77);
        let (cluster, id) = {
            let mut c = Controller::open(dir.path()).expect("opens");
            let t = c
                .create_topic("orders", 3, 1, BTreeMap::new(), Some(given))
                .expect("creates");
            assert!(matches!(
                c.create_topic("orders", 1, 1, BTreeMap::new(), None),
                Err(ControllerError::TopicExists(_))
            ));
            assert!(matches!(
                c.create_topic("bad name", 1, 1, BTreeMap::new(), None),
                Err(ControllerError::InvalidName(_))
            ));
            assert_eq!(
                c.bump_leader_epoch("orders", 1, 9).expect("bumps"),
                Some(10)
            );
            assert_eq!(
                c.bump_leader_epoch("orders", 1, 3).expect("no-op"),
                Some(10)
            );
            let base = producer_id_base(c.cluster_id());
            assert!(base >= 1 << 24, "apart from Apache Kafka's ids");
            assert_eq!(c.allocate_producer_ids(1).expect("id"), base);
            (c.cluster_id().to_string(), t.topic_id)
        };
        assert_eq!(id, given, "a given topic id is kept");
        // A torn append at the end is cut on open.
        use std::io::Write;
        let path = dir.path().join("metadata.log");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("opens");
        f.write_all(&[0, 0, 0, 50, 1, 2]).expect("writes");
        drop(f);
        let mut c = Controller::open(dir.path()).expect("reopens");
        assert_eq!(c.cluster_id(), cluster);
        assert_eq!(c.topics()["orders"].partitions[1].leader_epoch, 10);
        assert_eq!(c.topics()["orders"].topic_id, given);
        assert_eq!(
            c.allocate_producer_ids(1).expect("id"),
            producer_id_base(&cluster) + 1,
            "ids are not reused"
        );
    }

    /// Two clusters' producer ids start apart, each at a base its cluster id decides.
    #[test]
    fn each_cluster_hands_out_producer_ids_from_a_base_of_its_own() {
        let (a, b) = (
            producer_id_base("ORHe0z8zSuyxwgbDsm5_Fg"),
            producer_id_base("sv2aojvIQtWlT634_rgJFA"),
        );
        assert!(a >= 1 << 24 && b >= 1 << 24, "{a} {b}");
        assert_eq!((a % (1 << 24), b % (1 << 24)), (0, 0));
        assert!((a - b).abs() >= 1 << 24, "{a} {b}");
        assert_eq!(a, producer_id_base("ORHe0z8zSuyxwgbDsm5_Fg"), "stable");
        // A cluster created before the base was written keeps counting from 1000.
        let mut old = Controller::replica();
        old.restore(&[MetadataRecord::ClusterId {
            id: "ORHe0z8zSuyxwgbDsm5_Fg".into(),
        }]);
        assert_eq!(old.allocate_producer_ids(1).expect("id"), 1000);
        // A new one starts at its base, a replica of it alike.
        let mut new = Controller::replica();
        new.init_cluster("ORHe0z8zSuyxwgbDsm5_Fg").expect("init");
        assert_eq!(new.allocate_producer_ids(1).expect("id"), a);
    }

    #[test]
    fn replicas_are_placed_apart_and_spread_over_the_brokers() {
        let mut c = Controller::replica();
        for id in 1..=4 {
            c.register_broker(id, "h", 9092, None).expect("registers");
        }
        let topic = c
            .create_topic("orders", 12, 3, BTreeMap::new(), None)
            .expect("creates");
        let mut led = BTreeMap::<i32, usize>::new();
        let mut follows = BTreeMap::<(i32, i32), usize>::new();
        for p in &topic.partitions {
            let distinct: BTreeSet<i32> = p.replicas.iter().copied().collect();
            assert_eq!(distinct.len(), 3, "{:?}", p.replicas);
            assert_eq!(p.leader, p.replicas[0]);
            assert_eq!(p.isr, p.replicas, "every replica is in sync at creation");
            *led.entry(p.leader).or_default() += 1;
            for &f in &p.replicas[1..] {
                *follows.entry((p.leader, f)).or_default() += 1;
            }
        }
        assert_eq!(led.values().copied().collect::<Vec<_>>(), [3, 3, 3, 3]);
        // Each broker's followers are not always the same two brokers.
        for leader in 1..=4 {
            let others = follows.keys().filter(|(l, _)| *l == leader).count();
            assert_eq!(others, 3, "broker {leader}'s followers: {follows:?}");
        }
        let grown = c.create_partitions("orders", 14).expect("grows");
        assert!(grown.partitions[12..].iter().all(|p| p.replicas.len() == 3));
        // A record written before replicas were placed reads as the leader alone.
        let old: MetadataRecord = serde_json::from_str(
            r#"{"Topic":{"name":"old","topic_id":"","partitions":1,"configs":{},"leaders":[2]}}"#,
        )
        .expect("reads");
        c.apply(&old);
        assert_eq!(c.topics()["old"].partitions[0].replicas, vec![2]);
        for factor in [0, 5] {
            assert!(matches!(
                c.create_topic("refused", 1, factor, BTreeMap::new(), None),
                Err(ControllerError::InvalidReplicationFactor { .. })
            ));
        }
        c.fence_broker(4, true).expect("fences");
        assert!(
            c.check_create_topic("refused", 1, 4).is_err(),
            "a fenced broker holds none"
        );
        assert!(c.check_create_topic("placed", 1, 3).is_ok());
    }

    #[test]
    fn epoch_bumps_of_one_batch_are_applied_in_order_and_durable_together() {
        let dir = tempfile::tempdir().expect("temp dir");
        let before = {
            let mut c = Controller::open(dir.path()).expect("opens");
            c.create_topic("orders", 2, 1, BTreeMap::new(), None)
                .expect("creates");
            let before = std::fs::metadata(dir.path().join("metadata.log"))
                .expect("log")
                .len();
            let changes = c.change_count();
            let bumped = c
                .bump_leader_epochs(&[
                    ("orders".into(), 0, 4),
                    ("orders".into(), 0, 4),
                    ("orders".into(), 1, 0),
                    ("missing".into(), 0, 1),
                    ("orders".into(), 9, 1),
                ])
                .expect("bumps");
            // The second bump of partition 0 sees the first: 5 is already above 4.
            assert_eq!(bumped, vec![Some(5), Some(5), Some(1), None, None]);
            assert_eq!(c.change_count(), changes + 2, "two epoch records");
            before
        };
        let c = Controller::open(dir.path()).expect("reopens");
        assert_eq!(c.topics()["orders"].partitions[0].leader_epoch, 5);
        assert_eq!(c.topics()["orders"].partitions[1].leader_epoch, 1);
        let after = std::fs::metadata(dir.path().join("metadata.log"))
            .expect("log")
            .len();
        assert!(after > before);
    }

    #[test]
    fn a_reader_learns_which_topics_changed_since_the_version_it_followed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut c = Controller::open(dir.path()).expect("opens");
        let (opened, delta) = c.changes_since(None);
        assert!(delta.everything, "a new reader looks at everything");
        for name in ["a", "b", "c"] {
            c.create_topic(name, 2, 1, BTreeMap::new(), None)
                .expect("creates");
        }
        let (created, delta) = c.changes_since(Some(opened));
        assert_eq!(created, c.change_count());
        assert_eq!(delta.topics.len(), 3);
        c.bump_leader_epochs(&[("a".into(), 0, 0), ("b".into(), 1, 0)])
            .expect("bumps");
        c.set_topic_configs("b", BTreeMap::from([("k".into(), "v".into())]))
            .expect("configures");
        c.delete_topic("c").expect("deletes");
        c.allocate_producer_ids(1).expect("id");
        let (now, delta) = c.changes_since(Some(created));
        assert_eq!(now, created + 5);
        assert!(!delta.everything && !delta.cluster);
        assert_eq!(delta.topics, BTreeSet::from(["b".into(), "c".into()]));
        assert_eq!(delta.leader_epochs, BTreeSet::from(["a".into()]));
        c.create_mirror("m", BTreeMap::new()).expect("mirror");
        assert!(c.changes_since(Some(now)).1.cluster);
        // After a restart the versions start again: readers begin with everything.
        drop(c);
        let c = Controller::open(dir.path()).expect("reopens");
        assert!(c.changes_since(Some(now)).1.everything);
    }

    #[test]
    fn partitions_grow_and_deleted_topics_stay_deleted_after_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let mut c = Controller::open(dir.path()).expect("opens");
            c.create_topic("grows", 1, 1, BTreeMap::new(), None)
                .expect("creates");
            c.create_topic("goes", 2, 1, BTreeMap::new(), None)
                .expect("creates");
            assert_eq!(
                c.create_partitions("grows", 4)
                    .expect("grows")
                    .partitions
                    .len(),
                4
            );
            assert!(matches!(
                c.create_partitions("grows", 4),
                Err(ControllerError::InvalidPartitions(4))
            ));
            assert!(matches!(
                c.create_partitions("nope", 4),
                Err(ControllerError::UnknownTopic(_))
            ));
            c.delete_topic("goes").expect("deletes");
            assert!(matches!(
                c.delete_topic("goes"),
                Err(ControllerError::UnknownTopic(_))
            ));
        }
        let mut c = Controller::open(dir.path()).expect("reopens");
        assert_eq!(c.topics()["grows"].partitions.len(), 4);
        assert!(!c.topics().contains_key("goes"));
        let again = c
            .create_topic("goes", 1, 1, BTreeMap::new(), None)
            .expect("recreates");
        assert_eq!(again.partitions.len(), 1, "a recreated topic starts fresh");
    }

    /// docs/replication.md §3 end to end on one image: the leader grows the ISR through
    /// AlterPartition; fencing the leader elects an in-sync follower at the next epoch;
    /// fencing every ISR member leaves the last one in the ISR and no leader, until it is
    /// back; a restart takes the broker out of the ISR; stale requests are refused; and a
    /// snapshot rebuilds all of it.
    #[test]
    fn fencing_elects_from_the_isr_and_isr_changes_are_checked() {
        let mut c = Controller::replica();
        for id in 1..=3 {
            c.register_broker(id, "h", 9092, None).expect("registers");
        }
        let epochs: Vec<i64> = (1..=3)
            .map(|id| c.broker_epoch(id).expect("registered"))
            .collect();
        c.create_topic("orders", 1, 3, BTreeMap::new(), None)
            .expect("creates");
        let p = c.topics()["orders"].partitions[0].clone();
        let (leader, followers) = (p.leader, [p.replicas[1], p.replicas[2]]);
        assert_eq!(p.isr, p.replicas, "all in sync at creation");
        let epoch_of = |c: &Controller, id: i32| c.broker_epoch(id).expect("registered");
        let change =
            |partition_epoch: i32, isr: &[i32], c: &Controller| partition_change::IsrChange {
                topic: "orders".into(),
                partition: 0,
                leader_epoch: 0,
                partition_epoch,
                new_isr: isr.iter().map(|&r| (r, epoch_of(c, r))).collect(),
                recovered: false,
            };
        let shrink = change(0, &[leader, followers[0]], &c);
        // A broker epoch from before a restart speaks for nobody.
        let stale = c.alter_partition(
            leader,
            epoch_of(&c, leader) - 100,
            std::slice::from_ref(&shrink),
        );
        assert_eq!(
            stale.map(|_| ()).map_err(|e| e.error_code()),
            Err(ErrorCode::STALE_BROKER_EPOCH.0)
        );
        let answers = c
            .alter_partition(leader, epoch_of(&c, leader), std::slice::from_ref(&shrink))
            .expect("the leader's epoch");
        let shrunk = answers[0].clone().expect("shrunk");
        assert_eq!(shrunk.isr, vec![leader, followers[0]]);
        assert_eq!((shrunk.leader_epoch, shrunk.partition_epoch), (0, 1));
        // The same request again is made from an older partition epoch.
        let again = c
            .alter_partition(leader, epoch_of(&c, leader), &[shrink])
            .expect("answers");
        assert_eq!(
            again[0].clone().map_err(|e| e.error_code()).map(|_| ()),
            Err(ErrorCode::INVALID_UPDATE_VERSION.0)
        );
        let grow = change(1, &p.replicas, &c);
        let answers = c
            .alter_partition(leader, epoch_of(&c, leader), &[grow])
            .expect("answers");
        assert_eq!(answers[0].clone().expect("grown").partition_epoch, 2);

        c.fence_broker(leader, true).expect("fences");
        let p = c.topics()["orders"].partitions[0].clone();
        assert_eq!(
            p.leader, followers[0],
            "the first in-sync replica in assignment order"
        );
        assert_eq!(p.isr, followers.to_vec());
        assert_eq!((p.leader_epoch, p.partition_epoch), (1, 3));
        c.fence_broker(followers[0], true).expect("fences");
        c.fence_broker(followers[1], true).expect("fences");
        let p = c.topics()["orders"].partitions[0].clone();
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![followers[1]]));
        assert_eq!(p.leader_epoch, 3);
        // The former leader is back, but out of sync: no leader, unclean elections being off.
        c.fence_broker(leader, false).expect("unfences");
        assert_eq!(c.topics()["orders"].partitions[0].leader, NO_LEADER);
        // The last in-sync replica is back and leads.
        c.register_broker(followers[1], "h", 9092, None)
            .expect("registers again");
        assert!(epoch_of(&c, followers[1]) > *epochs.iter().max().expect("three"));
        let p = c.topics()["orders"].partitions[0].clone();
        assert_eq!((p.leader, p.leader_epoch), (followers[1], 4));

        let mut rebuilt = Controller::replica();
        rebuilt.restore(&c.image_records());
        assert_eq!(rebuilt.topics(), c.topics());
        assert_eq!(rebuilt.brokers(), c.brokers());
        assert_eq!(rebuilt.fenced(), c.fenced());
    }

    /// With `unclean.leader.election.enable=true` a replica outside the ISR takes over when no
    /// in-sync one can, alone in the ISR and RECOVERING; a restarted broker leaves the ISRs
    /// that have other members.
    #[test]
    fn unclean_elections_and_restarts() {
        let mut c = Controller::replica();
        for id in 1..=2 {
            c.register_broker(id, "h", 9092, None).expect("registers");
        }
        let configs = BTreeMap::from([(
            "unclean.leader.election.enable".to_string(),
            "true".to_string(),
        )]);
        c.create_topic("t", 1, 2, configs, None).expect("creates");
        let p = c.topics()["t"].partitions[0].clone();
        let (leader, follower) = (p.leader, p.replicas[1]);
        // The follower fell behind and left the ISR.
        let alone = partition_change::IsrChange {
            topic: "t".into(),
            partition: 0,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![(leader, -1)],
            recovered: false,
        };
        let epoch = c.broker_epoch(leader).expect("registered");
        c.alter_partition(leader, epoch, &[alone]).expect("shrinks");
        c.fence_broker(leader, true).expect("fences");
        let p = c.topics()["t"].partitions[0].clone();
        assert_eq!((p.leader, p.isr.clone()), (follower, vec![follower]));
        assert_eq!(p.leader_recovery, LeaderRecovery::Recovering);
        c.fence_broker(leader, false).expect("unfences");
        assert_eq!(
            c.topics()["t"].partitions[0].leader,
            follower,
            "a leader stays"
        );

        c.create_topic("u", 1, 2, BTreeMap::new(), None)
            .expect("creates");
        let p = c.topics()["u"].partitions[0].clone();
        assert_eq!(p.isr.len(), 2);
        let leader = p.leader;
        c.resume_leadership(leader).expect("restarted");
        let p = c.topics()["u"].partitions[0].clone();
        assert_ne!(
            p.leader, leader,
            "a restarted leader hands over to an in-sync follower"
        );
        assert!(!p.isr.contains(&leader));
    }
}
