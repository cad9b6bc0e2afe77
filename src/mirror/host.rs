//! [`BrokerHost`]: the engine's [`Host`] over this broker.
//!
//! Metadata reads answer from the controller's image; metadata writes go through the
//! controller (durable in its log before they return) and open or close the logs they touch;
//! a leased log is the partition's [`PartitionLog`] under its lock; fetch answers are applied
//! on tokio's blocking pool, and a log that changed wakes the fetches waiting on it; BumpLeaderEpochs
//! and the durability of `__mirror_state` and of the MIRROR_PID_RESET barrier go through the
//! broker's group commits.

use crate::acl::AclFilter;
use crate::broker::mirror_log::Lease;
use crate::broker::{Broker, now_ms};
use crate::controller::ControllerError;
use crate::groups::Committed;
use crate::storage::PartitionLog;
use kmirror_actors::host::{
    EngineSettings, GroupOffset, GroupOffsets, Host, HostError, HostFuture, MetadataDelta,
    MirrorLog, PartitionMeta, TopicMeta,
};
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::client::{ClientConfig, ClientError, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;
use std::sync::Arc;
use uuid::Uuid;

/// The broker, as the engine's host.
#[derive(Debug, Clone)]
pub struct BrokerHost(pub Arc<Broker>);

fn refused(e: ControllerError) -> HostError {
    HostError::new(ErrorCode(e.error_code()), e.to_string())
}

/// A write of the metadata quorum or the group commit that did not land (it may once the
/// quorum or the disk answers again).
fn not_written(message: String) -> HostError {
    HostError::new(ErrorCode::REQUEST_TIMED_OUT, message)
}

impl BrokerHost {
    /// Runs `f` on the partition's log, locked.
    fn lease<T, E: From<HostError>>(
        broker: &Broker,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E>,
    ) -> Result<T, E> {
        // Not open (yet): the broker opens what the metadata gives it, and a deleted topic's
        // partition is released by the engine's metadata reaction.
        let opened = broker
            .partition(topic, partition)
            .ok_or_else(|| HostError::not_here(topic, partition))?;
        let mut log = opened.log.lock().unwrap_or_else(|e| e.into_inner());
        let log: &mut PartitionLog = &mut log;
        f(&mut Lease(log, Some((broker, &opened))))
    }
}

impl Host for BrokerHost {
    type Source = SourceClient;

    fn cluster_id(&self) -> String {
        self.0.cluster_id()
    }

    fn settings(&self) -> EngineSettings {
        let config = self.0.config();
        EngineSettings {
            state_partitions: config.mirror_state_partitions,
            metadata_refresh_interval_ms: config.mirror_metadata_refresh_interval_ms,
            num_replica_fetchers: config.mirror_num_replica_fetchers,
            liveness: config.mirror_liveness,
        }
    }

    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn metadata_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.metadata_changes()
    }

    fn metadata_since(
        &self,
        followed: Option<u64>,
    ) -> (u64, MetadataDelta, BTreeMap<String, TopicMeta>) {
        // The logs follow the same change; they must be open before partitions start.
        if let Err(e) = self.0.reconcile() {
            tracing::error!(error = %e, "opening the partitions of a metadata change");
        }
        self.0.metadata_since(followed)
    }

    fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.0.topic(name)
    }

    fn topics(&self) -> BTreeMap<String, TopicMeta> {
        self.0.topics()
    }

    fn mirrors(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.0.mirrors()
    }

    fn leads(&self, partition: &PartitionMeta) -> bool {
        self.0.leads(partition)
    }

    fn node_address(&self, node_id: i32) -> Option<String> {
        self.0.address_of(node_id)
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        topic_id: Option<Uuid>,
    ) -> HostFuture<Result<(), HostError>> {
        let (broker, name) = (self.0.clone(), name.to_string());
        Box::pin(async move {
            let created = broker
                .create_topic(&name, partitions, -1, configs, topic_id)
                .await;
            created.map(drop).map_err(refused)
        })
    }

    fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>> {
        let (broker, name) = (self.0.clone(), name.to_string());
        Box::pin(async move {
            let set = broker.set_topic_configs(&name, configs).await;
            set.map(drop).map_err(refused)
        })
    }

    fn set_mirror_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        base: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>> {
        let (broker, name) = (self.0.clone(), name.to_string());
        Box::pin(async move {
            let set = broker.set_mirror_configs(&name, configs, base).await;
            set.map_err(refused)
        })
    }

    fn create_partitions(&self, name: &str, count: i32) -> HostFuture<Result<(), HostError>> {
        let (broker, name) = (self.0.clone(), name.to_string());
        Box::pin(async move {
            let created = broker.create_partitions(&name, count).await;
            created.map(drop).map_err(refused)
        })
    }

    fn bump_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> HostFuture<Result<Option<i32>, HostError>> {
        let broker = self.0.clone();
        let topic = topic.to_string();
        Box::pin(async move {
            broker
                .bump_leader_epoch_grouped(&topic, partition, min_leader_epoch)
                .await
                .map_err(not_written)
        })
    }

    fn set_read_only(&self, topic: &str, partition: i32, read_only: bool) {
        self.0.set_read_only(topic, partition, read_only);
    }

    fn with_log<T, E: From<HostError>>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E>,
    ) -> Result<T, E> {
        let (changed, result) = {
            let mut changed = false;
            let result = BrokerHost::lease(&self.0, topic, partition, |log| {
                let before = (log.log_start_offset(), log.log_end_offset());
                let result = f(log);
                changed = before != (log.log_start_offset(), log.log_end_offset());
                result
            });
            (changed, result)
        };
        if changed {
            self.0.notify_appended();
        }
        result
    }

    fn spawn_with_log<T: Send + 'static, E: From<HostError> + Send + 'static>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E> + Send + 'static,
    ) -> HostFuture<Result<T, E>> {
        let host = self.clone();
        let topic = topic.to_string();
        let applied = tokio::task::spawn_blocking(move || host.with_log(&topic, partition, f));
        Box::pin(async move {
            applied.await.map_err(|e| {
                HostError::new(
                    ErrorCode::KAFKA_STORAGE_ERROR,
                    format!("applying to the log: {e}"),
                )
            })?
        })
    }

    fn make_durable(&self, topic: &str, partition: i32) -> HostFuture<Result<(), HostError>> {
        let broker = self.0.clone();
        let opened = broker
            .partition(topic, partition)
            .ok_or_else(|| HostError::not_here(topic, partition));
        Box::pin(async move {
            broker
                .make_durable(opened?)
                .await
                .map_err(|e| HostError::new(ErrorCode::KAFKA_STORAGE_ERROR, e))
        })
    }

    fn replicated(&self, topic: &str, partition: i32) -> HostFuture<Result<(), HostError>> {
        let broker = self.0.clone();
        let opened = broker
            .partition(topic, partition)
            .ok_or_else(|| HostError::not_here(topic, partition));
        Box::pin(async move {
            broker
                .replicated_to_isr(&*opened?)
                .await
                .map_err(|e| HostError::new(ErrorCode::NOT_LEADER_OR_FOLLOWER, e))
        })
    }

    fn idle_group_offsets(
        &self,
        group: &str,
    ) -> HostFuture<Result<Option<GroupOffsets>, HostError>> {
        let broker = self.0.clone();
        let group = group.to_string();
        Box::pin(async move {
            let offsets = broker
                .idle_group_offsets(&group)
                .await
                .map_err(|e| HostError::new(ErrorCode::COORDINATOR_NOT_AVAILABLE, e))?;
            Ok(offsets.map(|offsets| {
                offsets
                    .into_iter()
                    .map(|(key, c)| {
                        let offset = GroupOffset {
                            offset: c.offset,
                            leader_epoch: (c.leader_epoch >= 0).then_some(c.leader_epoch),
                            metadata: c.metadata,
                        };
                        (key, offset)
                    })
                    .collect()
            }))
        })
    }

    fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, GroupOffset)>,
    ) -> HostFuture<Result<(), HostError>> {
        let commits = offsets
            .into_iter()
            .map(|(topic, partition, o)| {
                let committed = Committed {
                    offset: o.offset,
                    // The group coordinator's (and Kafka's) "no epoch".
                    leader_epoch: o.leader_epoch.unwrap_or(-1),
                    metadata: o.metadata,
                };
                (topic, partition, committed)
            })
            .collect();
        let broker = self.0.clone();
        let group = group.to_string();
        Box::pin(async move {
            broker
                .commit_group_offsets(&group, commits)
                .await
                .map_err(|e| HostError::new(ErrorCode::COORDINATOR_NOT_AVAILABLE, e))
        })
    }

    fn acls(&self) -> Vec<AclBinding> {
        self.0.acls().to_vec()
    }

    fn create_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>> {
        let broker = self.0.clone();
        Box::pin(async move { broker.create_acls(bindings).await.map_err(refused) })
    }

    fn delete_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>> {
        let broker = self.0.clone();
        let exact: Vec<AclFilter> = bindings.iter().map(AclFilter::exactly).collect();
        Box::pin(async move { broker.delete_acls(exact).await.map(drop).map_err(refused) })
    }

    fn connect_source(&self, config: ClientConfig) -> Result<SourceClient, ClientError> {
        SourceClient::new(config)
    }
}
