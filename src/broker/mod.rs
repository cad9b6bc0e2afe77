//! The reference broker: a Kafka-compatible broker over the storage engine and the controller,
//! so real Kafka clients produce to and consume from kmirror. `kmirror broker` is a single-node
//! cluster; brokers embedded in one process can share a controller ([`cluster`]).
//!
//! Lifecycle: [`Broker::open`] locks the log directory (its `.lock`, held until
//! [`Broker::close`] or drop, so a second broker on the directory refuses to start), replays
//! the controller's metadata, renames aside partition directories no topic owns (`-stray`,
//! never deleted) and opens every partition log it leads (recovering them); [`server::serve`]
//! accepts connections until shutdown; [`Broker::close`] flushes and closes the logs and
//! releases the directory.
//!
//! Contracts: one replica per partition, so a partition's high watermark is its log end and
//! `acks=all` is satisfied by the append itself; a partition's leader is the node the controller
//! placed it on, at the controller's leader epoch. The broker answers ApiVersions, Metadata, Produce (plain,
//! idempotent and transactional), Fetch (full fetches, long polling, READ_COMMITTED),
//! ListOffsets, OffsetForLeaderEpoch, CreateTopics, CreatePartitions, DeleteTopics,
//! DescribeConfigs, IncrementalAlterConfigs, AlterConfigs, DescribeCluster, the transaction
//! coordinator's APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
//! EndTxn), the classic group protocol (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups) and
//! CreateAcls, DescribeAcls, DeleteAcls, and KIP-1279's admin and cross-cluster RPCs
//! (CreateMirror, ListMirrors, DeleteMirror, Start/Stop/Pause/ResumeMirrorTopics,
//! DescribeMirrors, LastMirroredEpochs); any other API or version is answered
//! UNSUPPORTED_VERSION. With `authorizer.enabled=true` every API checks the controller's ACLs
//! (see [`crate::acl`]) for the anonymous principal of a PLAINTEXT listener and the client host.

mod cluster;
pub use cluster::ClusterStartError;
pub mod config;
pub mod config_error;
mod consumer_group_config;
pub mod coordinators;
mod durability;
mod epoch_bumps;
mod group_commit;
mod group_routing;
mod handlers;
pub(crate) mod internal_topics;
pub(crate) mod mirror_log;
pub mod network;
pub(crate) mod offsets_topic;
mod parallel;
mod peers;
pub mod quorum_config;
mod replica_fetcher;
mod replication;
pub mod server;
mod transactions;
mod txn_verification;

use crate::acl::{AclBinding, AclFilter, Operation, ResourceType, Session};
use crate::controller::quorum::Quorum;
use crate::controller::{
    Applied, Controller, ControllerError, MetadataCommand, MetadataDelta, Outcome, TopicMeta,
};
use crate::groups::GroupCoordinator;
use crate::storage::{LogDirLock, OpenFiles, PartitionLog, StorageError};
use crate::txn::TransactionCoordinator;
use config::BrokerConfig;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;
use uuid::Uuid;

/// How many threads close the logs when the broker stops ([`Broker::close`]).
const CLOSING_THREADS: usize = 16;
/// How many threads open the new logs of one topic (creating a log is inode allocation: at
/// 100,000 mirror partitions, most of a Start's time).
const OPENING_THREADS: usize = 4;

/// Closes a partition's log: flushed and closed when nothing else holds it, else made durable
/// at least (a request still holds it).
fn close_partition(p: Arc<Partition>) -> Result<(), StorageError> {
    match Arc::try_unwrap(p) {
        Ok(p) => p
            .log
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .close(now_ms()),
        Err(p) => p
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .flush(now_ms()),
    }
}

/// A partition this broker leads.
#[derive(Debug)]
pub struct Partition {
    /// The topic.
    topic: String,
    /// The partition index.
    index: i32,
    /// The log.
    pub log: Mutex<PartitionLog>,
    /// This broker's part in its replication (locked after `log` when both are held).
    role: Mutex<crate::replication::role::Role>,
    /// Whether producers are refused with READ_ONLY_TOPIC: a mirror partition (topic config
    /// `mirror.name` set) until the engine reports it STOPPED.
    pub read_only: AtomicBool,
    /// The id of the topic the log belongs to (a topic deleted and created again elsewhere in
    /// the cluster gets a new log).
    topic_id: Uuid,
    /// The topic configs last applied to the log.
    configs: Mutex<BTreeMap<String, String>>,
}

/// The broker's shared state.
#[derive(Debug)]
pub struct Broker {
    config: BrokerConfig,
    /// This node's controller, or the one the brokers of an in-process cluster share, or this
    /// node's image of a quorum's metadata (read here; written through `quorum`).
    controller: Arc<Mutex<Controller>>,
    /// The metadata quorum of a multi-process cluster (docs/cluster.md).
    quorum: Option<Arc<Quorum>>,
    /// The partitions open here, by topic and index.
    partitions: RwLock<HashMap<String, BTreeMap<i32, Arc<Partition>>>>,
    /// The bound on segment files the partition logs hold open (`log.open.files.max`).
    open_files: OpenFiles,
    /// Leader-epoch bumps waiting for their group commit.
    epoch_bumps: epoch_bumps::EpochBumps,
    durability: durability::Durability,
    /// Woken after every append and high watermark rise, for fetches waiting on `min_bytes`.
    appended: Notify,
    /// ISR changes the partitions this broker leads propose, for the controller.
    isr_proposals: replication::Proposals,
    groups: GroupCoordinator,
    /// In a cluster, the partitions of `__consumer_offsets` the groups live in.
    offsets_topic: Option<Arc<offsets_topic::OffsetsTopic>>,
    transactions: TransactionCoordinator,
    /// The controller's ACLs, copied for lock-free authorization on every request.
    acls: RwLock<Arc<Vec<AclBinding>>>,
    /// Held by [`Broker::reconcile`] (one at a time opens and removes logs): the count of
    /// metadata changes it last brought the logs in line with, `None` before the first.
    reconciled: Mutex<Option<u64>>,
    /// Transactional produces verified with a coordinator on another broker.
    verified: txn_verification::Verified,
    /// Other brokers' group listings, briefly kept for the mirror's offset sync.
    group_listings: group_routing::Listings,
    /// The producer ids this node hands out next (a block the controller allocated).
    producer_ids: Mutex<std::ops::Range<i64>>,
    /// The log directory's lock, from open until [`Broker::close`]: a broker closed in-process
    /// frees the directory for the next open even while a finished task still holds it.
    dir_lock: Mutex<Option<LogDirLock>>,
}

/// How many producer ids a broker takes from the controller at a time (as Kafka's brokers do).
const PRODUCER_ID_BLOCK: i64 = 1000;

/// Whether a topic's configs make it a mirror topic (docs/design.md §2: `mirror.name` set and not
/// empty).
pub fn is_mirror_topic(configs: &BTreeMap<String, String>) -> bool {
    configs
        .get("mirror.name")
        .is_some_and(|name| !name.is_empty())
}

/// The topic and index of a log directory entry that is a partition directory
/// (`<topic>-<index>`) no topic in `topics` owns. Internal topics' directories are the broker's
/// own state and are never set aside; a client's topic whose name merely starts with `__` is
/// judged like any other (else a topic created again under its name would serve the old one's
/// records).
fn stray_partition_dir<'a>(
    name: &'a str,
    topics: &[(String, TopicMeta)],
) -> Option<(&'a str, usize)> {
    // Only directories named as partition logs are ours to judge.
    partition_dir(name).filter(|(topic, index)| {
        !topics
            .iter()
            .any(|(owner, t)| owner == topic && *index < t.partitions.len())
    })
}

/// The topic and index a log directory entry named `<topic>-<index>` holds, for a topic that is
/// not internal.
fn partition_dir(name: &str) -> Option<(&str, usize)> {
    name.rsplit_once('-')
        .and_then(|(t, i)| Some((t, i.parse::<usize>().ok()?)))
        .filter(|(t, _)| crate::controller::valid_topic_name(t) && !internal_topics::is_internal(t))
}

/// The longest file name a log directory's file system takes (NAME_MAX).
const MAX_FILE_NAME_BYTES: usize = 255;

/// The name a stray partition directory is set aside under: `<topic>-<index>.<id>-stray`, its
/// topic cut so the whole name stays within [`MAX_FILE_NAME_BYTES`] (a legal 249-character topic
/// would otherwise exceed it by the suffix), as Kafka caps its `-stray` and `-delete` names.
fn stray_dir_name(topic: &str, index: usize) -> String {
    let tail = format!("-{index}.{}-stray", Uuid::new_v4().simple());
    let mut keep = topic
        .len()
        .min(MAX_FILE_NAME_BYTES.saturating_sub(tail.len()));
    while !topic.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{tail}", &topic[..keep])
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Broker {
    /// Locks the log directory, replays the metadata and opens every partition: a single-node
    /// cluster whose controller lives under `log.dirs/__cluster_metadata`.
    pub fn open(config: BrokerConfig) -> Result<Broker, StorageError> {
        let dir_lock = LogDirLock::acquire(&config.log_dir)?;
        let controller = Controller::open(&config.log_dir.join("__cluster_metadata"))?;
        Broker::open_with(config, Arc::new(Mutex::new(controller)), dir_lock)
    }

    /// Opens this node, holding its log directory, over `controller` (registering it there) and
    /// the partitions it leads.
    fn open_with(
        config: BrokerConfig,
        controller: Arc<Mutex<Controller>>,
        dir_lock: LogDirLock,
    ) -> Result<Broker, StorageError> {
        let (broker, unfinished) = Broker::assemble(config, controller, None, dir_lock)?;
        let (node_id, (host, port)) = (broker.config.node_id, broker.config.advertised.clone());
        // One process, one log directory holding the metadata too: a replaced directory is a
        // new cluster, nothing to compare.
        broker.with_controller(|c| c.register_broker(node_id, &host, port, None))?;
        broker.with_controller(|c| c.resume_leadership(node_id))?;
        broker.recover(unfinished)?;
        Ok(broker)
    }

    /// The broker's state over `controller` before it takes part: its coordinators opened from
    /// its log directory, and the transactions they found unfinished.
    pub(super) fn assemble(
        config: BrokerConfig,
        controller: Arc<Mutex<Controller>>,
        quorum: Option<Arc<Quorum>>,
        dir_lock: LogDirLock,
    ) -> Result<(Broker, Vec<crate::txn::Completion>), StorageError> {
        // A cluster keeps groups in the replicated partitions of `__consumer_offsets`, a
        // single process in its own record log.
        let offsets_topic = quorum
            .as_ref()
            .map(|_| Arc::new(offsets_topic::OffsetsTopic::new(controller.clone())));
        let groups = match &offsets_topic {
            Some(topic) => GroupCoordinator::on_partitions(topic.clone()),
            None => GroupCoordinator::open(&config.log_dir.join("__consumer_offsets"))?,
        }
        .with_consumer_settings(config.group_consumer.clone());
        let (transactions, unfinished) = TransactionCoordinator::open(
            &config.log_dir.join("__transaction_state"),
            config.transaction_max_timeout_ms,
        )?;
        let acls = RwLock::new(Arc::new(
            controller.lock().unwrap_or_else(|e| e.into_inner()).acls(),
        ));
        let broker = Broker {
            acls,
            reconciled: Mutex::new(None),
            producer_ids: Mutex::new(0..0),
            verified: Default::default(),
            group_listings: Default::default(),
            dir_lock: Mutex::new(Some(dir_lock)),
            controller,
            quorum,
            groups,
            offsets_topic,
            transactions,
            partitions: RwLock::new(HashMap::new()),
            open_files: OpenFiles::new(config.log_open_files_max),
            epoch_bumps: epoch_bumps::EpochBumps::default(),
            durability: durability::Durability::default(),
            appended: Notify::new(),
            isr_proposals: replication::Proposals::default(),
            config,
        };
        Ok((broker, unfinished))
    }

    /// Brings the log directory in line with the metadata once the node is registered: stray
    /// logs set aside, offsets of deleted topics forgotten, the partitions it leads opened, and
    /// transactions decided before a crash completed.
    pub(super) fn recover(
        &self,
        unfinished: Vec<crate::txn::Completion>,
    ) -> Result<(), StorageError> {
        let topics: Vec<(String, TopicMeta)> =
            self.with_controller(|c| c.topics().clone().into_iter().collect());
        self.set_aside_stray_logs(&topics)?;
        self.forget_offsets_of_deleted_topics()?;
        self.reconcile()?;
        // Transactions decided before a crash end before any client sees the partitions; one
        // that still fails is retried by housekeeping.
        for completion in unfinished {
            match self.complete_local_transaction(&completion) {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(transactional_id = %completion.transactional_id, "a transaction decided before the restart ends once the brokers of its partitions answer");
                }
                Err(e) => {
                    tracing::error!(transactional_id = %completion.transactional_id, error = %e, "completing a transaction at start-up");
                }
            }
        }
        Ok(())
    }

    fn with_controller<T>(&self, f: impl FnOnce(&mut Controller) -> T) -> T {
        let mut guard = self.controller.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// Renames partition directories no topic owns aside, as Kafka does (`<name>.<id>-stray`,
    /// see [`stray_dir_name`]), and reports them in one warning. A deletion that crashed before
    /// removing its logs leaves such directories, and so does metadata that lost a topic (a
    /// damaged tail cut off its log): the metadata's silence does not prove the data unwanted, so
    /// deleting is left to the operator, and a topic created again under the name starts empty.
    /// A directory that cannot be renamed is logged as an error and left where it is: no topic
    /// reads it, and refusing to start would keep every other partition offline
    /// (docs/broker-configs.md, "Log directory").
    fn set_aside_stray_logs(&self, topics: &[(String, TopicMeta)]) -> Result<(), StorageError> {
        let dir = &self.config.log_dir;
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        let mut strays = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((topic, index)) = stray_partition_dir(&name, topics) else {
                continue;
            };
            if !entry.path().is_dir() {
                continue;
            }
            let aside = dir.join(stray_dir_name(topic, index));
            match std::fs::rename(entry.path(), &aside) {
                Ok(()) => strays.push(format!("{name} -> {}", aside.display())),
                Err(e) => tracing::error!(
                    directory = %entry.path().display(),
                    to = %aside.display(),
                    error = %e,
                    "a partition directory no topic owns could not be renamed aside; it stays as it is, unused, until an operator moves or deletes it"
                ),
            }
        }
        if !strays.is_empty() {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(crate::storage::error::io("fsync directory", dir))?;
            tracing::warn!(
                count = strays.len(),
                directories = ?strays,
                "partition directories no topic owns were renamed aside with their data (-stray); delete them once they are not needed"
            );
        }
        Ok(())
    }

    /// Opens (recovering) one partition's log.
    fn open_partition(
        &self,
        name: &str,
        topic: &TopicMeta,
        index: i32,
    ) -> Result<(), StorageError> {
        let dir = self.config.log_dir.join(format!("{name}-{index}"));
        let settings = internal_topics::log_config(&self.config.log, name, &topic.configs);
        let (mut log, report) = PartitionLog::open(&dir, settings, &self.open_files, now_ms())?;
        if !report.problems.is_empty() {
            tracing::warn!(topic = name, partition = index, problems = ?report.problems, "recovered partition log");
        }
        let read_only = mirror_log::opens_read_only(
            &mut log,
            topic.configs.get("mirror.name").map(String::as_str),
            &self.cluster_id(),
        );
        let partition = Arc::new(Partition {
            topic: name.to_string(),
            index,
            log: Mutex::new(log),
            role: Mutex::new(crate::replication::role::Role::unassigned()),
            read_only: AtomicBool::new(read_only),
            topic_id: topic.topic_id,
            configs: Mutex::new(topic.configs.clone()),
        });
        // Its role before anyone finds it: a leader's high watermark from its state.
        self.apply_role(
            name,
            index,
            &topic.partitions[index as usize],
            &topic.configs,
            &partition,
        );
        self.partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .insert(index, partition);
        Ok(())
    }

    /// The bound on its open segment files.
    pub fn open_files(&self) -> &OpenFiles {
        &self.open_files
    }

    /// The settings.
    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> String {
        self.with_controller(|c| c.cluster_id().to_string())
    }

    /// A snapshot of the topics' metadata.
    pub fn topics(&self) -> BTreeMap<String, TopicMeta> {
        self.with_controller(|c| c.topics().clone())
    }

    /// One topic's metadata (without copying the others').
    pub fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.with_controller(|c| c.topics().get(name).cloned())
    }

    /// The name of the topic with this id.
    pub fn topic_name(&self, id: &Uuid) -> Option<String> {
        self.with_controller(|c| {
            c.topics()
                .iter()
                .find(|(_, t)| t.topic_id == *id)
                .map(|(n, _)| n.clone())
        })
    }

    /// The partitions open now (a copy, so no lock is held while working on them).
    fn open_partitions_now(&self) -> Vec<((String, i32), Arc<Partition>)> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flat_map(|(name, open)| open.iter().map(|(i, p)| ((name.clone(), *i), p.clone())))
            .collect()
    }

    /// A partition this broker leads (clients' reads and writes go to it alone).
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.replica(topic, index)
            .filter(|p| p.role.lock().unwrap_or_else(|e| e.into_inner()).leads(None))
    }

    /// A partition this broker holds a replica of, leading or following.
    pub(crate) fn replica(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .and_then(|open| open.get(&index))
            .cloned()
    }

    /// Why produced `records` are too large for partition `index` of `topic`: a record batch
    /// larger than its `max.message.bytes` (else the broker's `message.max.bytes`), each batch
    /// judged alone as Kafka does. `None` when every batch fits, when the partition is not open
    /// here, or for bytes that do not frame as batches (validation names those). Only Produce
    /// asks: mirrored batches are the source's, appended whatever their size.
    pub(crate) fn oversized_batch(
        &self,
        topic: &str,
        index: i32,
        records: Option<&bytes::Bytes>,
    ) -> Option<String> {
        let partition = self.partition(topic, index)?;
        let limit = {
            let configs = partition.configs.lock().unwrap_or_else(|e| e.into_inner());
            self.config.log.with_overrides(&configs).max_message_bytes
        };
        let size = kmirror_protocol::batch::RecordBatches::new(records?.clone())
            .map_while(Result::ok)
            .map(|batch| batch.size() as u64)
            .find(|size| *size > limit)?;
        Some(format!(
            "a record batch of {size} bytes is larger than max.message.bytes={limit} of topic \
             {topic}"
        ))
    }

    /// The brokers that can take new replicas: the registered ones not fenced (every registered
    /// one while all are fenced, as placement takes them then).
    pub(crate) fn live_brokers(&self) -> usize {
        self.with_controller(|c| {
            let live = c
                .brokers()
                .keys()
                .filter(|id| !c.fenced().contains(id))
                .count();
            if live == 0 { c.brokers().len() } else { live }
        })
    }

    /// Opens or closes a partition to producers (the engine clears it when a mirror partition
    /// reaches STOPPED); false when the partition does not exist.
    pub fn set_read_only(&self, topic: &str, index: i32, read_only: bool) -> bool {
        self.partition(topic, index)
            .map(|p| p.read_only.store(read_only, Ordering::SeqCst))
            .is_some()
    }

    /// The leader epoch of a partition.
    pub fn leader_epoch(&self, topic: &str, index: i32) -> Option<i32> {
        self.with_controller(|c| {
            c.topics()
                .get(topic)
                .and_then(|t| t.partitions.get(index as usize))
                .map(|p| p.leader_epoch)
        })
    }

    /// Applies one metadata change: on this node's controller, or through the metadata quorum
    /// (docs/cluster.md). Returns once the change is durable and in this node's image.
    pub(super) async fn write(&self, command: MetadataCommand) -> Outcome {
        match &self.quorum {
            Some(quorum) => quorum.write(command).await,
            None => self.with_controller(|c| c.execute(&command)),
        }
    }

    /// BumpLeaderEpochs for one partition: the leader epoch becomes at least
    /// `min_leader_epoch + 1`, durably. The log's epoch cache learns it from the next batch
    /// appended as leader (a mirror partition's cache holds the source's epochs until it is
    /// STOPPED). Returns the epoch afterwards, or `None` for an unknown partition.
    pub async fn bump_leader_epoch(
        &self,
        topic: &str,
        index: i32,
        min_leader_epoch: i32,
    ) -> Result<Option<i32>, ControllerError> {
        let bumped = self
            .bump_leader_epochs(vec![(topic.to_string(), index, min_leader_epoch)])
            .await?;
        Ok(bumped.into_iter().next().flatten())
    }

    /// [`Broker::bump_leader_epoch`] for many `(topic, partition, min_leader_epoch)`, durable
    /// together (one write).
    pub async fn bump_leader_epochs(
        &self,
        requests: Vec<(String, i32, i32)>,
    ) -> Result<Vec<Option<i32>>, ControllerError> {
        let count = requests.len();
        match self
            .write(MetadataCommand::BumpLeaderEpochs { requests })
            .await?
        {
            Applied::Epochs(epochs) if epochs.len() == count => Ok(epochs),
            other => Err(ControllerError::Storage(format!(
                "BumpLeaderEpochs of {count} partitions answered {other:?}"
            ))),
        }
    }

    /// The topic `name` as a change made through this node left it (the logs it leads open).
    /// Another topic's failing logs are not this change's error.
    fn changed_topic(&self, name: &str) -> Result<TopicMeta, ControllerError> {
        let reconciled = self.reconcile();
        let topic = self
            .topic(name)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?;
        match reconciled {
            Err(e) if !self.missing_logs(name, &topic).is_empty() => Err(e.into()),
            _ => Ok(topic),
        }
    }

    /// Creates a topic and its partition logs (a new topic id unless one is given).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        topic_id: Option<Uuid>,
    ) -> Result<TopicMeta, ControllerError> {
        self.write(MetadataCommand::CreateTopic {
            name: name.to_string(),
            partitions,
            replication_factor: self.replication_factor(replication_factor),
            configs,
            topic_id: topic_id.unwrap_or_else(Uuid::new_v4),
        })
        .await?;
        self.changed_topic(name)
    }

    /// Whether creating this topic would be accepted (CreateTopics with `validate_only`).
    pub fn check_create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<(), ControllerError> {
        let factor = self.replication_factor(replication_factor);
        self.with_controller(|c| c.check_create_topic(name, partitions, factor))
    }

    /// A requested replication factor, -1 being `default.replication.factor`.
    pub(crate) fn replication_factor(&self, requested: i32) -> i32 {
        if requested == -1 {
            self.config.default_replication_factor
        } else {
            requested
        }
    }

    /// Whether growing a topic to `count` partitions would be accepted (CreatePartitions with
    /// `validate_only`).
    pub fn check_create_partitions(&self, name: &str, count: i32) -> Result<(), ControllerError> {
        self.with_controller(|c| c.check_create_partitions(name, count))
    }

    /// Grows a topic to `count` partitions and opens the new logs this node leads.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
    ) -> Result<TopicMeta, ControllerError> {
        self.write(MetadataCommand::CreatePartitions {
            name: name.to_string(),
            count,
        })
        .await?;
        self.changed_topic(name)
    }

    /// Replaces a topic's dynamic configs and applies them to its open logs (see
    /// [`Broker::reconcile`] for the read-only flag).
    pub async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, ControllerError> {
        // The configs the caller changed are this broker's image of them (it read them
        // there): only its changes apply, to the configs as the controller has them.
        let base = self.topic(name).map(|t| t.configs);
        self.write(MetadataCommand::SetTopicConfigs {
            name: name.to_string(),
            configs,
            base,
        })
        .await?;
        self.changed_topic(name)
    }

    /// Deletes a topic: the controller's record first (the truth after a crash), then its
    /// committed offsets and its logs. Returns what the topic was.
    pub async fn delete_topic(&self, name: &str) -> Result<TopicMeta, ControllerError> {
        let before = self
            .topic(name)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?;
        self.write(MetadataCommand::DeleteTopic {
            name: name.to_string(),
        })
        .await?;
        self.reconcile()?;
        Ok(before)
    }

    /// A new producer id for an idempotent or transactional producer, from this node's block,
    /// never one a log here already knows. After a failover, a source producer that moved to
    /// this cluster keeps the id its source gave it (the MIRROR_PID_RESET barrier dropped the
    /// mirrored state, so its next batch starts a producer afresh): handing the same id to
    /// another producer refused that one's first batch with OUT_OF_ORDER_SEQUENCE_NUMBER
    /// (found by the nemesis, whose source and destination allocated ids from the same blocks
    /// before each cluster had a base of its own, `crate::controller::producer_id_base`;
    /// docs/failover.md, "Producer ids after a failover").
    pub fn allocate_producer_id(&self) -> Result<i64, ControllerError> {
        let id = self.next_producer_id()?;
        if !self.knows_producer(id) {
            return Ok(id);
        }
        tracing::info!(
            producer_id = id,
            "a producer id a log here knows (a producer that moved from a failed-over source) is not handed out"
        );
        // Rare: the logs' ids are read once, then the block is walked past them.
        let known = self.known_producers();
        loop {
            let next = self.next_producer_id()?;
            if !known.contains(&next) {
                return Ok(next);
            }
        }
    }

    /// Whether a log here holds producer state for `producer_id`.
    fn knows_producer(&self, producer_id: i64) -> bool {
        self.open_partitions_now().iter().any(|(_, partition)| {
            let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            log.producer_state().producer(producer_id).is_some()
        })
    }

    /// Every producer id the logs here hold state for.
    fn known_producers(&self) -> std::collections::HashSet<i64> {
        self.open_partitions_now()
            .iter()
            .flat_map(|(_, partition)| {
                let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
                log.producer_state().producer_ids().collect::<Vec<_>>()
            })
            .collect()
    }

    /// The next id of this node's block (taking a new block on a single node when it ran out).
    fn next_producer_id(&self) -> Result<i64, ControllerError> {
        let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
        if ids.is_empty() && self.quorum.is_none() {
            let first = self.with_controller(|c| c.allocate_producer_ids(PRODUCER_ID_BLOCK))?;
            *ids = first..first + PRODUCER_ID_BLOCK;
        }
        ids.next().ok_or_else(|| {
            ControllerError::Unavailable(
                "no producer ids: the metadata quorum did not answer".into(),
            )
        })
    }

    /// On a node of a quorum, takes a new block of producer ids when fewer than a tenth of the
    /// block are left (callers run it before they hand ids out).
    pub async fn ensure_producer_ids(&self) {
        let Some(quorum) = &self.quorum else {
            return;
        };
        let left = |ids: &std::ops::Range<i64>| ids.end - ids.start;
        if left(&self.producer_ids.lock().unwrap_or_else(|e| e.into_inner()))
            >= PRODUCER_ID_BLOCK / 10
        {
            return;
        }
        let written = quorum
            .write(MetadataCommand::AllocateProducerIds {
                count: PRODUCER_ID_BLOCK,
            })
            .await;
        match written {
            Ok(Applied::ProducerIds(first)) => {
                let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
                // Another caller may have taken a block meanwhile: keep the larger supply.
                if left(&ids) < PRODUCER_ID_BLOCK / 10 {
                    *ids = first..first + PRODUCER_ID_BLOCK;
                }
            }
            Ok(other) => tracing::error!(answer = ?other, "allocating producer ids"),
            Err(e) => tracing::warn!(error = %e, "allocating producer ids"),
        }
    }

    /// The group coordinator.
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// Whether `session` may do `operation` on the resource (always, with the authorizer off).
    pub fn authorize(
        &self,
        session: &Session,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.config.authorizer.enabled {
            return true;
        }
        let acls = self.acls();
        crate::acl::authorize(
            &self.config.authorizer,
            &acls,
            session,
            operation,
            resource_type,
            name,
        )
    }

    /// Every ACL.
    pub fn acls(&self) -> Arc<Vec<AclBinding>> {
        self.acls.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stores ACLs durably, all or none.
    pub async fn create_acls(&self, bindings: Vec<AclBinding>) -> Result<(), ControllerError> {
        self.write(MetadataCommand::CreateAcls { bindings }).await?;
        self.refresh_acls();
        Ok(())
    }

    /// Deletes the ACLs each filter selects; lists what each filter deleted.
    pub async fn delete_acls(
        &self,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<Vec<AclBinding>>, ControllerError> {
        let count = filters.len();
        let deleted = match self.write(MetadataCommand::DeleteAcls { filters }).await? {
            Applied::DeletedAcls(deleted) if deleted.len() == count => deleted,
            other => {
                return Err(ControllerError::Storage(format!(
                    "DeleteAcls of {count} filters answered {other:?}"
                )));
            }
        };
        self.refresh_acls();
        Ok(deleted)
    }

    /// Copies the controller's ACLs for the authorizer.
    fn refresh_acls(&self) {
        let acls = self.with_controller(|c| c.acls());
        *self.acls.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(acls);
    }

    /// Sees every durable metadata change (topics, configs, leader epochs, mirrors, ACLs).
    pub fn metadata_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.with_controller(|c| c.changes())
    }

    /// The metadata version now, what changed after version `followed` (everything for
    /// `None`) and the metadata of the topics it touched as it is now (a touched topic absent
    /// from it was deleted).
    pub fn metadata_since(
        &self,
        followed: Option<u64>,
    ) -> (u64, MetadataDelta, BTreeMap<String, TopicMeta>) {
        self.with_controller(|c| {
            let (version, delta) = c.changes_since(followed);
            let topics = if delta.everything {
                c.topics().clone()
            } else {
                delta
                    .topics
                    .iter()
                    .chain(&delta.leader_epochs)
                    .filter_map(|name| Some((name.clone(), c.topics().get(name)?.clone())))
                    .collect()
            };
            (version, delta, topics)
        })
    }

    /// Every mirror, with its configs.
    pub fn mirrors(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.with_controller(|c| c.mirrors().clone())
    }

    /// The topics of a mirror (whatever their state).
    pub fn mirror_topics(&self, mirror: &str) -> Vec<String> {
        self.with_controller(|c| c.mirror_topics(mirror))
    }

    /// CreateMirror, durably.
    pub async fn create_mirror(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        self.write(MetadataCommand::CreateMirror {
            name: name.to_string(),
            configs,
        })
        .await
        .map(drop)
    }

    /// A mirror's new configs (all of them, already checked), made from `base` (the configs
    /// read: refused with [`ControllerError::MirrorConfigsChanged`] if they changed since),
    /// durably; every broker's engine takes them at once: new fetchers, and the next connection
    /// to the source.
    pub async fn set_mirror_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        base: BTreeMap<String, String>,
    ) -> Result<(), ControllerError> {
        self.write(MetadataCommand::SetMirrorConfigs {
            name: name.to_string(),
            configs,
            base: Some(base),
        })
        .await
        .map(drop)
    }

    /// DeleteMirror, durably (only a mirror without topics).
    pub async fn delete_mirror(&self, name: &str) -> Result<(), ControllerError> {
        self.write(MetadataCommand::DeleteMirror {
            name: name.to_string(),
        })
        .await
        .map(drop)
    }

    /// The transaction coordinator.
    pub fn transactions(&self) -> &TransactionCoordinator {
        &self.transactions
    }

    /// Wakes fetches waiting for data.
    pub fn notify_appended(&self) {
        self.appended.notify_waiters();
    }

    /// What appends notify.
    pub fn appended(&self) -> &Notify {
        &self.appended
    }

    /// The log manager's periodic work on every partition: delete segments past retention and
    /// flush logs whose `flush.ms` has passed. Returns how many segments were deleted. A
    /// partition that fails is logged and skipped, so one bad disk path does not stop the rest.
    pub fn housekeeping(&self, now_ms: i64) -> usize {
        let partitions = self.open_partitions_now();
        let mut deleted = 0;
        for ((topic, index), partition) in partitions {
            let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            match log
                .apply_retention(now_ms)
                .and_then(|n| log.flush_if_due(now_ms).map(|()| n))
            {
                Ok(n) => deleted += n,
                Err(e) => {
                    tracing::error!(topic, partition = index, error = %e, "log housekeeping failed")
                }
            }
        }
        deleted
    }

    /// Flushes and closes every log, then releases the log directory. The logs close on
    /// [`CLOSING_THREADS`] threads: closing is a few fsyncs per log, waiting on the disk, and a
    /// broker with 10,000 partitions took 41 s to stop closing them one by one. Every log is
    /// closed even after one fails; the first failure is returned.
    pub fn close(&self) -> Result<(), StorageError> {
        let partitions: Vec<Arc<Partition>> = self
            .partitions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .flat_map(|(_, open)| open.into_values())
            .collect();
        parallel::each_in_parallel(partitions, CLOSING_THREADS, close_partition)?;
        *self.dir_lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_internal_topics_directories_are_exempt_from_being_set_aside() {
        let owned = vec![(
            "events".to_string(),
            TopicMeta {
                topic_id: Uuid::new_v4(),
                partitions: vec![crate::controller::PartitionMeta::led_by(1)],
                configs: BTreeMap::new(),
            },
        )];
        assert!(stray_partition_dir("events-0", &owned).is_none());
        assert!(stray_partition_dir("events-1", &owned).is_some());
        assert!(stray_partition_dir("__foo-0", &owned).is_some());
        assert!(stray_partition_dir("__Mirror_State-0", &owned).is_some());
        assert!(stray_partition_dir("__mirror_state-0", &owned).is_none());
        assert!(stray_partition_dir("__consumer_offsets", &owned).is_none());
        assert!(stray_partition_dir(".lock", &owned).is_none());
    }
}
