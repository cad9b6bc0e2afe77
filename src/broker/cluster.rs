//! This broker as one node of a cluster: where partitions live and how a node follows the
//! metadata others change.
//!
//! `kmirror broker` is a single-node cluster: its controller lives in its own folder and every
//! partition is its own. Brokers of an in-process cluster (tests, embedding runtimes) share one
//! controller ([`Broker::open_member`]): each registers its endpoint there, the controller places
//! each new partition's single replica on a broker, and each broker opens the logs of the
//! partitions it leads. Clients find leaders with Metadata and are answered
//! NOT_LEADER_OR_FOLLOWER by the others. Groups and transactions are coordinated as
//! [`super::coordinators`] says.
//!
//! Contract: [`Broker::reconcile`] brings the open logs in line with the metadata and is
//! idempotent; it runs after every change made through this broker, and
//! [`Broker::follow_metadata`] runs it after every change made through another.

use super::config::BrokerConfig;
use super::{Broker, OPENING_THREADS, Partition, internal_topics, parallel};
use crate::controller::quorum::Quorum;
use crate::controller::{
    ANY_NODE, BrokerEndpoint, Controller, ControllerError, MetadataCommand, PartitionMeta,
    TopicMeta,
};
use crate::storage::StorageError;
use kmirror_actors::host::read_only_on_change;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Why a node of a multi-process cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterStartError {
    /// Its log directory could not be locked or read.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The quorum refused a start-up change.
    #[error("the metadata quorum refused {command:?}: {error}")]
    Refused {
        command: MetadataCommand,
        error: ControllerError,
    },
}

impl Broker {
    /// Opens a node of a multi-process cluster whose metadata `quorum` replicates
    /// (docs/cluster.md): locks the log directory, then registers the broker through the
    /// quorum (waiting for it as long as it takes: a broker cannot serve without knowing the
    /// cluster) and opens the partitions it leads. Its image is caught up once its own
    /// registration is applied, so only then are logs judged stray.
    pub async fn open_clustered(
        config: BrokerConfig,
        quorum: Arc<Quorum>,
    ) -> Result<Broker, ClusterStartError> {
        let dir_lock = crate::storage::LogDirLock::acquire(&config.log_dir)?;
        let directory_id = crate::storage::meta_properties::directory_id(&config.log_dir)?;
        let image = quorum.image().clone();
        let (broker, unfinished) = Broker::assemble(config, image, Some(quorum.clone()), dir_lock)?;
        let (node_id, (host, port)) = (broker.config.node_id, broker.config.advertised.clone());
        for command in [
            MetadataCommand::InitCluster {
                id: crate::controller::new_cluster_id(),
            },
            MetadataCommand::RegisterBroker {
                node_id,
                host,
                port,
                directory_id: Some(directory_id.clone()),
            },
            MetadataCommand::ResumeLeadership { node_id },
        ] {
            let registers = matches!(command, MetadataCommand::RegisterBroker { .. });
            broker.write_until_done(command).await?;
            // Heartbeats count only from a broker the controller admitted.
            if registers {
                quorum.broker_registered();
            }
        }
        broker.ensure_producer_ids().await;
        broker.recover(unfinished)?;
        Ok(broker)
    }

    /// Writes a start-up change, trying again while no controller is active.
    async fn write_until_done(&self, command: MetadataCommand) -> Result<(), ClusterStartError> {
        let mut waited = 0;
        loop {
            match self.write(command.clone()).await {
                Ok(_) => return Ok(()),
                Err(ControllerError::Unavailable(why)) => {
                    waited += 1;
                    tracing::warn!(
                        attempt = waited,
                        reason = why,
                        "waiting for the metadata quorum to start"
                    );
                }
                Err(error) => return Err(ClusterStartError::Refused { command, error }),
            }
        }
    }

    /// Opens a broker of an in-process cluster whose brokers share `controller` (each with a
    /// log directory of its own: it is locked).
    pub fn open_member(
        config: BrokerConfig,
        controller: Arc<Mutex<Controller>>,
    ) -> Result<Broker, StorageError> {
        let dir_lock = crate::storage::LogDirLock::acquire(&config.log_dir)?;
        Broker::open_with(config, controller, dir_lock)
    }

    /// Whether this node leads the partition.
    pub fn leads(&self, partition: &PartitionMeta) -> bool {
        partition.leader == self.config.node_id || partition.leader == ANY_NODE
    }

    /// Whether the metadata has the partition, whichever broker leads it (group and
    /// transaction coordinators accept offsets and partitions of the whole cluster).
    pub fn partition_exists(&self, topic: &str, index: i32) -> bool {
        self.leader_of(topic, index).is_some()
    }

    /// The node that leads `topic`-`index`, if the partition exists.
    pub fn leader_of(&self, topic: &str, index: i32) -> Option<i32> {
        let leader = self.with_controller(|c| {
            c.topics()
                .get(topic)
                .and_then(|t| t.partitions.get(index as usize))
                .map(|p| p.leader)
        })?;
        Some(if leader == ANY_NODE {
            self.config.node_id
        } else {
            leader
        })
    }

    /// The brokers of the cluster, by node id (this one at least).
    pub fn brokers(&self) -> Vec<BrokerEndpoint> {
        let brokers: Vec<BrokerEndpoint> =
            self.with_controller(|c| c.brokers().values().cloned().collect());
        if brokers.is_empty() {
            let (host, port) = self.config.advertised.clone();
            return vec![BrokerEndpoint {
                node_id: self.config.node_id,
                host,
                port,
                directory_id: None,
                epoch: 0,
            }];
        }
        brokers
    }

    /// The node Metadata names as the controller. Kafka's admin clients send it their
    /// CreateTopics and the like, so it must be alive: in a cluster, the active controller
    /// (or this node while none is known; every node forwards changes); alone, this node.
    pub fn controller_for_clients(&self) -> i32 {
        match &self.quorum {
            Some(quorum) => {
                let active = quorum.active_or(self.config.node_id);
                let live = self.brokers().iter().any(|b| b.node_id == active)
                    && !self.fenced_brokers().contains(&active);
                if live { active } else { self.config.node_id }
            }
            None => self.coordinator_node(),
        }
    }

    /// The brokers fenced for silence (docs/cluster.md).
    pub fn fenced_brokers(&self) -> std::collections::BTreeSet<i32> {
        self.with_controller(|c| c.fenced().clone())
    }

    /// The broker that coordinates groups and transactions: the lowest node id.
    pub fn coordinator_node(&self) -> i32 {
        self.brokers()
            .first()
            .map_or(self.config.node_id, |b| b.node_id)
    }

    /// Why a partition that is not open here cannot be served: another node leads it
    /// (NOT_LEADER_OR_FOLLOWER), it only places coordinators and has no log
    /// (INVALID_TOPIC_EXCEPTION: not retried by clients), or it does not exist
    /// (UNKNOWN_TOPIC_OR_PARTITION).
    pub fn missing_partition_error(&self, topic: &str, index: i32) -> i16 {
        match self.leader_of(topic, index) {
            Some(leader) if leader != self.config.node_id => ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
            Some(_) if !internal_topics::has_partition_logs(topic) => {
                ErrorCode::INVALID_TOPIC_EXCEPTION.0
            }
            _ => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0,
        }
    }

    /// Brings the open logs in line with the metadata: opens the partitions this node leads
    /// that are not open, closes and removes those whose topic is gone (or was created again
    /// under another id) and forgets the topic's committed offsets, applies changed topic
    /// configs to the logs, and refreshes the ACL cache. The read-only flag follows
    /// `mirror.name` only when the topic becomes or stops being a mirror (the mirroring engine
    /// owns it otherwise).
    /// Only the topics changed since the last reconcile are looked at (the controller's
    /// journal names them), so metadata already brought in line with costs nothing and a
    /// change costs what its topics hold.
    /// A topic whose logs fail does not hold up the others: every changed topic is brought in
    /// line, the first failure is returned, and the change stays unreconciled so the failed
    /// topic is tried again on the next one.
    pub fn reconcile(&self) -> Result<(), StorageError> {
        let mut reconciled = self.reconciled.lock().unwrap_or_else(|e| e.into_inner());
        let (version, delta, mut metas) = self.metadata_since(*reconciled);
        if delta.cluster {
            let acls = self.with_controller(|c| c.acls());
            *self.acls.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(acls);
        }
        // Leader epochs alone change only the roles of the open partitions.
        for name in &delta.leader_epochs {
            if let Some(topic) = metas.get(name) {
                self.apply_roles(name, topic);
            }
        }
        let mut topics: BTreeMap<String, Option<TopicMeta>> = if delta.everything {
            metas.into_iter().map(|(name, t)| (name, Some(t))).collect()
        } else {
            delta
                .topics
                .iter()
                .map(|name| (name.clone(), metas.remove(name)))
                .collect()
        };
        if delta.everything {
            // Logs of topics the metadata no longer has.
            for name in self
                .partitions
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
            {
                topics.entry(name.clone()).or_insert(None);
            }
        }
        let mut failed = None;
        for (name, topic) in &topics {
            if let Err(e) = self.reconcile_topic(name, topic.as_ref()) {
                tracing::error!(topic = name, error = %e, "opening or closing the topic's logs");
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => {
                *reconciled = Some(version);
                Ok(())
            }
        }
    }

    /// The partitions of `topic` this node holds a replica of (leads or follows) whose logs
    /// are not open (none for a topic without partition logs).
    pub(super) fn missing_logs(&self, name: &str, topic: &TopicMeta) -> Vec<i32> {
        if !internal_topics::has_partition_logs(name) {
            return Vec::new();
        }
        (0..)
            .zip(&topic.partitions)
            .filter(|(i, p)| {
                (self.leads(p) || p.replicas.contains(&self.config.node_id))
                    && self.replica(name, *i).is_none()
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// [`Broker::reconcile`] for one topic, `None` when the metadata no longer has it.
    fn reconcile_topic(&self, name: &str, topic: Option<&TopicMeta>) -> Result<(), StorageError> {
        let open = self.open_of(name);
        for (index, partition) in open {
            let current = topic.filter(|t| {
                t.topic_id == partition.topic_id && (index as usize) < t.partitions.len()
            });
            let Some(topic) = current else {
                self.close_partition(name, index)?;
                continue;
            };
            let mut applied = partition.configs.lock().unwrap_or_else(|e| e.into_inner());
            if *applied != topic.configs {
                let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
                log.set_config(internal_topics::log_config(
                    &self.config.log,
                    name,
                    &topic.configs,
                ));
                // Under the log's lock: a produce checks the flag under it too, so none appends
                // after a restart's `mirror.name` is applied (docs/failover.md).
                let mirror_name = |c: &BTreeMap<String, String>| c.get("mirror.name").cloned();
                if let Some(read_only) = read_only_on_change(
                    mirror_name(&applied).as_deref(),
                    mirror_name(&topic.configs).as_deref(),
                ) {
                    partition.read_only.store(read_only, Ordering::SeqCst);
                }
                drop(log);
                *applied = topic.configs.clone();
            }
        }
        match topic {
            // Deleted: every group coordinated here forgets its offsets, whether or not this
            // broker held a replica of it.
            None => self.groups.forget_topic(name)?,
            Some(topic) => {
                self.apply_roles(name, topic);
                let missing = self.missing_logs(name, topic);
                parallel::each_in_parallel(missing, OPENING_THREADS, |index| {
                    self.open_partition(name, topic, index)
                })?;
            }
        }
        Ok(())
    }

    /// The open partitions of topic `name`, by index (a copy: no lock held).
    fn open_of(&self, name: &str) -> Vec<(i32, Arc<Partition>)> {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .map(|open| open.iter().map(|(i, p)| (*i, p.clone())).collect())
            .unwrap_or_default()
    }

    /// Brings the roles of `topic`'s open partitions in line with their registrations.
    fn apply_roles(&self, name: &str, topic: &TopicMeta) {
        let open = self.open_of(name);
        for (index, partition) in open {
            if partition.topic_id != topic.topic_id {
                continue;
            }
            if let Some(meta) = topic.partitions.get(index as usize) {
                self.apply_role(name, index, meta, &topic.configs, &partition);
            }
        }
    }

    /// Forgets an open partition and deletes its log (a request still holding it gets
    /// [`StorageError::LogDeleted`] for any write).
    fn close_partition(&self, name: &str, index: i32) -> Result<(), StorageError> {
        let closed = {
            let mut partitions = self.partitions.write().unwrap_or_else(|e| e.into_inner());
            let closed = partitions
                .get_mut(name)
                .and_then(|open| open.remove(&index));
            if partitions.get(name).is_some_and(BTreeMap::is_empty) {
                partitions.remove(name);
            }
            closed
        };
        match closed {
            Some(partition) => partition
                .log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .delete(),
            None => Ok(()),
        }
    }

    /// Runs [`Broker::reconcile`] after every metadata change (changes arriving meanwhile are
    /// taken together), and the replica fetchers and the leaders' ISR changes, until the
    /// controller goes away. It runs on a blocking thread: opening
    /// or deleting thousands of logs is file work that would hold a runtime worker.
    pub fn follow_metadata(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        // Followers copy their leaders' logs; leaders keep their ISRs.
        self.run_replica_fetchers();
        self.run_isr_changes();
        let broker = self.clone();
        let mut changes = self.metadata_changes();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                changes.mark_unchanged();
                let reconciling = broker.clone();
                let reconciled = tokio::task::spawn_blocking(move || reconciling.reconcile()).await;
                match reconciled {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::error!(error = %e, "following the cluster metadata"),
                    Err(e) => {
                        tracing::error!(error = %e, "following the cluster metadata: the task failed")
                    }
                }
            }
        })
    }
}
