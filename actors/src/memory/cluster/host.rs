//! The memory cluster as the engine's [`Host`]: its metadata image and controller, its logs
//! leased one call at a time, group offsets and ACLs, and clients of other memory clusters.

use super::*;

impl Host for MemoryCluster {
    type Source = MemorySourceClient;

    fn cluster_id(&self) -> String {
        self.inner.cluster_id.clone()
    }

    fn settings(&self) -> EngineSettings {
        EngineSettings {
            state_partitions: 4,
            metadata_refresh_interval_ms: 500,
            num_replica_fetchers: 1,
            liveness: LivenessPolicy::default(),
        }
    }

    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    fn metadata_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    fn metadata_since(
        &self,
        followed: Option<u64>,
    ) -> (u64, MetadataDelta, BTreeMap<String, TopicMeta>) {
        let state = self.state();
        if followed == Some(state.version) {
            return (state.version, MetadataDelta::default(), BTreeMap::new());
        }
        // No journal: a reader behind looks at everything.
        (
            state.version,
            MetadataDelta::everything(),
            state.topics.clone(),
        )
    }

    fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.state().topics.get(name).cloned()
    }

    fn topics(&self) -> BTreeMap<String, TopicMeta> {
        self.state().topics.clone()
    }

    fn mirrors(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.state().mirrors.clone()
    }

    fn leads(&self, partition: &PartitionMeta) -> bool {
        partition.leader == NODE
    }

    fn node_address(&self, node_id: i32) -> Option<String> {
        if node_id == NODE {
            return Some(self.address());
        }
        self.state().node_addresses.get(&node_id).cloned()
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        topic_id: Option<Uuid>,
    ) -> HostFuture<Result<(), HostError>> {
        let created = create(self, name, partitions, configs, topic_id);
        Box::pin(std::future::ready(created))
    }

    fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>> {
        let set = self.change(|s| match s.topics.get_mut(name) {
            Some(topic) => {
                let old = topic.configs.get("mirror.name").cloned();
                topic.configs = configs;
                follow_mirror_name(s, name, old.as_deref());
                Ok(())
            }
            None => Err(refusal(
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                format!("no topic {name}"),
            )),
        });
        Box::pin(std::future::ready(set))
    }

    fn set_mirror_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        base: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>> {
        let set = self.change(|s| match s.mirrors.get_mut(name) {
            None => Err(refusal(
                ErrorCode::UNKNOWN_CLUSTER_MIRROR,
                format!("no mirror {name}"),
            )),
            Some(current) if *current != base => Err(refusal(
                ErrorCode::INVALID_CLUSTER_MIRROR_STATES,
                format!("the configs of mirror {name} changed since they were read"),
            )),
            Some(current) => {
                *current = configs;
                Ok(())
            }
        });
        Box::pin(std::future::ready(set))
    }

    fn create_partitions(&self, name: &str, count: i32) -> HostFuture<Result<(), HostError>> {
        let created = self.change(|s| {
            let Some(topic) = s.topics.get_mut(name) else {
                return Err(refusal(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("no topic {name}"),
                ));
            };
            let before = topic.partitions.len() as i32;
            for _ in before..count {
                topic.partitions.push(PartitionMeta::led_by(NODE));
            }
            for p in before..count {
                s.logs.insert((name.to_string(), p), MemoryLog::default());
            }
            Ok(())
        });
        Box::pin(std::future::ready(created))
    }

    fn bump_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> HostFuture<Result<Option<i32>, HostError>> {
        let bumped = self.change(|s| {
            s.topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition as usize))
                .map(|p| {
                    p.leader_epoch = epoch::bumped_epoch(p.leader_epoch, min_leader_epoch);
                    p.leader_epoch
                })
        });
        Box::pin(std::future::ready(Ok(bumped)))
    }

    fn set_read_only(&self, topic: &str, partition: i32, read_only: bool) {
        let key = (topic.to_string(), partition);
        let mut state = self.state();
        if read_only {
            state.read_only.insert(key);
        } else {
            state.read_only.remove(&key);
        }
    }

    fn with_log<T, E: From<HostError>>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E>,
    ) -> Result<T, E> {
        leased(&mut self.state(), topic, partition, f)
    }

    fn spawn_with_log<T: Send + 'static, E: From<HostError> + Send + 'static>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E> + Send + 'static,
    ) -> HostFuture<Result<T, E>> {
        let held = self
            .state()
            .held_leases
            .remove(&(topic.to_string(), partition));
        let Some(held) = held else {
            return Box::pin(std::future::ready(self.with_log(topic, partition, f)));
        };
        let (cluster, topic) = (self.clone(), topic.to_string());
        Box::pin(async move {
            let _ = held.await;
            cluster.with_log(&topic, partition, f)
        })
    }

    fn make_durable(&self, topic: &str, partition: i32) -> HostFuture<Result<(), HostError>> {
        *self
            .state()
            .durable_calls
            .entry((topic.to_string(), partition))
            .or_default() += 1;
        Box::pin(std::future::ready(Ok(())))
    }

    fn idle_group_offsets(
        &self,
        group: &str,
    ) -> HostFuture<Result<Option<GroupOffsets>, HostError>> {
        let offsets = self.state().groups.get(group).cloned().unwrap_or_default();
        Box::pin(std::future::ready(Ok(Some(offsets))))
    }

    fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, GroupOffset)>,
    ) -> HostFuture<Result<(), HostError>> {
        let mut state = self.state();
        let committed = state.groups.entry(group.to_string()).or_default();
        for (topic, partition, offset) in offsets {
            committed.insert((topic, partition), offset);
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn acls(&self) -> Vec<AclBinding> {
        self.state().acls.clone()
    }

    fn create_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>> {
        let mut state = self.state();
        for b in bindings {
            if !state.acls.contains(&b) {
                state.acls.push(b);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>> {
        self.state().acls.retain(|a| !bindings.contains(a));
        Box::pin(std::future::ready(Ok(())))
    }

    fn connect_source(&self, config: ClientConfig) -> Result<MemorySourceClient, ClientError> {
        let address = config
            .bootstrap_servers
            .first()
            .cloned()
            .ok_or_else(|| ClientError::Config("no bootstrap.servers".into()))?;
        Ok(MemorySourceClient {
            network: self.inner.network.clone(),
            address,
        })
    }
}
