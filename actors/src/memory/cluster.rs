//! A Kafka cluster in memory: the engine's second [`Host`], and a [`Source`] for the clusters that
//! mirror from it.
//!
//! A [`MemoryCluster`] is one broker (node 1) that leads every partition of its topics: a
//! metadata image with a version the engine follows, a controller that applies changes at once,
//! a [`MemoryLog`] per partition (real v2 batches), read-only flags, consumer group offsets and
//! ACLs. Clusters reach each other through a [`MemoryNetwork`] by their address
//! (`<cluster id>.memory:9092`), which can make a cluster unreachable to simulate a source that
//! is gone. As a source, a cluster answers what a Kafka broker would: metadata with leaders and
//! leader epochs, ListOffsets, READ_COMMITTED fetches with divergence and out-of-range answers,
//! NOT_LEADER_OR_FOLLOWER to a fetch sent to a broker that no longer leads the partition, and
//! LastMirroredEpochs from its own `__mirror_state` records.

use super::log::{MemoryLog, MemorySource};
use crate::coordinator::Shard;
use crate::engine::state_log::MIRROR_STATE_TOPIC;
use crate::epoch;
use crate::host::{
    Cause, EngineSettings, FetchRequest, FetchResponse, GroupOffset, GroupOffsets, Host,
    HostFuture, HostRefusal, MetadataDelta, MirrorLog, PartitionMeta, Source, TopicMeta,
};
use crate::liveness::LivenessPolicy;
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::client::source::{
    AclBinding as AclDescription, ClusterMetadata, CommittedOffset, ConfigEntry, EARLIEST,
    GroupListing, PartitionMetadata, TopicMetadata,
};
use kmirror_protocol::client::{ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::records::coordinator_records;
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

/// The node every partition of a memory cluster is led by, at first.
pub const NODE: i32 = 1;

/// The clusters that can reach each other, by address.
#[derive(Debug, Clone, Default)]
pub struct MemoryNetwork {
    clusters: Arc<Mutex<HashMap<String, MemoryCluster>>>,
    unreachable: Arc<Mutex<HashSet<String>>>,
}

impl MemoryNetwork {
    /// A new cluster on this network, reachable at `<cluster_id>.memory:9092`.
    pub fn cluster(&self, cluster_id: &str) -> MemoryCluster {
        let cluster = MemoryCluster {
            inner: Arc::new(Inner {
                cluster_id: cluster_id.to_string(),
                network: self.clone(),
                state: Mutex::new(State::default()),
                changes: tokio::sync::watch::channel(0).0,
            }),
        };
        lock(&self.clusters).insert(cluster.address(), cluster.clone());
        cluster
    }

    /// Makes the cluster at `address` unreachable (or reachable again) to every client.
    pub fn set_reachable(&self, address: &str, reachable: bool) {
        let mut unreachable = lock(&self.unreachable);
        if reachable {
            unreachable.remove(address);
        } else {
            unreachable.insert(address.to_string());
        }
    }

    /// The cluster at `address`, if reachable.
    fn reach(&self, address: &str) -> Result<MemoryCluster, ClientError> {
        let gone = || ClientError::Connection {
            broker: address.to_string(),
            message: "connection refused".into(),
        };
        if lock(&self.unreachable).contains(address) {
            return Err(gone());
        }
        lock(&self.clusters).get(address).cloned().ok_or_else(gone)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One cluster in memory (see the module docs).
#[derive(Debug, Clone)]
pub struct MemoryCluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cluster_id: String,
    network: MemoryNetwork,
    state: Mutex<State>,
    changes: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    version: u64,
    topics: BTreeMap<String, TopicMeta>,
    mirrors: BTreeMap<String, BTreeMap<String, String>>,
    logs: HashMap<(String, i32), MemoryLog>,
    read_only: HashSet<(String, i32)>,
    groups: BTreeMap<String, BTreeMap<(String, i32), GroupOffset>>,
    acls: Vec<AclBinding>,
    /// Appends made durable, per partition (what [`Host::make_durable`] was asked).
    durable_calls: HashMap<(String, i32), u64>,
    /// Where the cluster's other brokers listen, by node id.
    node_addresses: HashMap<i32, String>,
    /// Partitions whose next [`Host::spawn_with_log`] waits for the test to release it.
    held_leases: HashMap<(String, i32), tokio::sync::oneshot::Receiver<()>>,
}

impl MemoryCluster {
    /// Where clients reach it.
    pub fn address(&self) -> String {
        format!("{}.memory:9092", self.inner.cluster_id)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// Applies a metadata change and tells the engine.
    fn change<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (answer, version) = {
            let mut state = self.state();
            let answer = f(&mut state);
            state.version += 1;
            (answer, state.version)
        };
        self.inner.changes.send_replace(version);
        answer
    }

    /// CreateMirror: a mirror of this cluster with `configs`.
    pub fn create_mirror(&self, name: &str, configs: BTreeMap<String, String>) {
        self.change(|s| s.mirrors.insert(name.to_string(), configs));
    }

    /// Creates a plain topic (a new random id) of `partitions` partitions.
    pub fn create_plain_topic(&self, name: &str, partitions: i32) -> Result<(), HostRefusal> {
        create(self, name, partitions, BTreeMap::new(), None)
    }

    /// A producer's write of a batch of `records` records to a partition, as its leader
    /// takes it; refused while the partition is read-only (a mirror partition that is not
    /// STOPPED).
    pub fn produce(&self, topic: &str, partition: i32, records: usize) -> Result<(), String> {
        let mut state = self.state();
        let key = (topic.to_string(), partition);
        if state.read_only.contains(&key) {
            return Err(format!(
                "{topic}-{partition} is a mirror topic: READ_ONLY_TOPIC"
            ));
        }
        let epoch = leader_epoch(&state, topic, partition)
            .ok_or_else(|| format!("no partition {topic}-{partition}"))?;
        let log = state
            .logs
            .get_mut(&key)
            .ok_or_else(|| format!("no partition {topic}-{partition}"))?;
        log.produce(records, epoch, -1, false);
        Ok(())
    }

    /// The bytes of a partition's batches, back to back (empty when it does not exist).
    pub fn log_bytes(&self, topic: &str, partition: i32) -> Vec<u8> {
        self.state()
            .logs
            .get(&(topic.to_string(), partition))
            .map(MemoryLog::bytes)
            .unwrap_or_default()
    }

    /// A partition's log end offset (-1 when it does not exist).
    pub fn log_end(&self, topic: &str, partition: i32) -> i64 {
        self.state()
            .logs
            .get(&(topic.to_string(), partition))
            .map_or(-1, MirrorLog::log_end_offset)
    }

    /// Moves a partition's leadership to `node`: a new leader epoch, as Kafka's controller
    /// elects a leader (fetches sent to the old leader are answered NOT_LEADER_OR_FOLLOWER).
    pub fn move_leader(&self, topic: &str, partition: i32, node: i32) {
        self.change(|s| {
            if let Some(p) = s
                .topics
                .get_mut(topic)
                .and_then(|t| t.partitions.get_mut(partition as usize))
            {
                p.leader = node;
                p.leader_epoch += 1;
            }
        });
    }

    /// Where broker `node` of this cluster listens, as a metadata change (a broker-only node
    /// that joins again may come back at another address, docs/cluster.md "Roles").
    pub fn set_node_address(&self, node: i32, address: &str) {
        self.change(|s| s.node_addresses.insert(node, address.to_string()));
    }

    /// Holds the next [`Host::spawn_with_log`] on a partition (a fetcher's apply, say) until the
    /// returned sender fires or is dropped: a lease kept in flight, as a slow disk keeps one.
    pub fn hold_next_lease(&self, topic: &str, partition: i32) -> tokio::sync::oneshot::Sender<()> {
        let (release, held) = tokio::sync::oneshot::channel();
        self.state()
            .held_leases
            .insert((topic.to_string(), partition), held);
        release
    }

    /// What a broker restart loses: the read-only flags, set again as the partitions open.
    pub fn reopen(&self) {
        let cluster_id = self.inner.cluster_id.clone();
        let mut state = self.state();
        state.read_only.clear();
        let names: Vec<String> = state.topics.keys().cloned().collect();
        for name in names {
            open_read_only(&mut state, &name, &cluster_id);
        }
    }

    /// How often the engine asked for a partition's appends to be made durable.
    pub fn durable_calls(&self, topic: &str, partition: i32) -> u64 {
        self.state()
            .durable_calls
            .get(&(topic.to_string(), partition))
            .copied()
            .unwrap_or(0)
    }
}

fn leader_epoch(state: &State, topic: &str, partition: i32) -> Option<i32> {
    state
        .topics
        .get(topic)
        .and_then(|t| t.partitions.get(partition as usize))
        .map(|p| p.leader_epoch)
}

fn refusal(code: ErrorCode, message: String) -> HostRefusal {
    HostRefusal { code, message }
}

fn create(
    cluster: &MemoryCluster,
    name: &str,
    partitions: i32,
    configs: BTreeMap<String, String>,
    topic_id: Option<Uuid>,
) -> Result<(), HostRefusal> {
    cluster.change(|s| {
        if s.topics.contains_key(name) {
            return Err(refusal(
                ErrorCode::TOPIC_ALREADY_EXISTS,
                format!("topic {name} already exists"),
            ));
        }
        if partitions < 1 {
            return Err(refusal(
                ErrorCode::INVALID_PARTITIONS,
                "a topic needs a partition".into(),
            ));
        }
        let topic_id = topic_id.unwrap_or_else(|| Uuid::from_u128(rand::random()));
        s.topics.insert(
            name.to_string(),
            TopicMeta {
                topic_id,
                partitions: (0..partitions)
                    .map(|_| PartitionMeta {
                        leader_epoch: 0,
                        leader: NODE,
                    })
                    .collect(),
                configs,
            },
        );
        for p in 0..partitions {
            s.logs.insert((name.to_string(), p), MemoryLog::default());
        }
        follow_mirror_name(s, name, None);
        Ok(())
    })
}

/// As a broker does when `mirror.name` changes from `old`: the engine's rule
/// ([`crate::host::read_only_on_change`]) sets the flag at once where it says so; otherwise the
/// engine owns it.
fn follow_mirror_name(state: &mut State, topic: &str, old: Option<&str>) {
    let Some(meta) = state.topics.get(topic) else {
        return;
    };
    let new = meta.configs.get("mirror.name").map(String::as_str);
    let Some(read_only) = crate::host::read_only_on_change(old, new) else {
        return;
    };
    for p in 0..meta.partitions.len() as i32 {
        let key = (topic.to_string(), p);
        if read_only {
            state.read_only.insert(key);
        } else {
            state.read_only.remove(&key);
        }
    }
}

/// As a broker of cluster `cluster_id` does when it opens a partition at start
/// ([`crate::host::opens_read_only`]).
fn open_read_only(state: &mut State, topic: &str, cluster_id: &str) {
    let Some(meta) = state.topics.get(topic) else {
        return;
    };
    let mirror_name = meta.configs.get("mirror.name").cloned();
    for p in 0..meta.partitions.len() as i32 {
        let key = (topic.to_string(), p);
        let read_only = state.logs.get(&key).is_none_or(|log| {
            crate::host::opens_read_only(mirror_name.as_deref(), log, cluster_id).unwrap_or(true)
        });
        if read_only {
            state.read_only.insert(key);
        }
    }
}

/// The log lease of a memory partition.
fn leased<T>(
    state: &mut State,
    topic: &str,
    partition: i32,
    f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause>,
) -> Result<T, Cause> {
    let log = state
        .logs
        .get_mut(&(topic.to_string(), partition))
        .ok_or_else(|| Cause::retryable(format!("{topic}-{partition} is not a partition here")))?;
    f(log)
}

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
    ) -> HostFuture<Result<(), HostRefusal>> {
        let created = create(self, name, partitions, configs, topic_id);
        Box::pin(std::future::ready(created))
    }

    fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostRefusal>> {
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
    ) -> HostFuture<Result<(), HostRefusal>> {
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

    fn create_partitions(&self, name: &str, count: i32) -> HostFuture<Result<(), HostRefusal>> {
        let created = self.change(|s| {
            let Some(topic) = s.topics.get_mut(name) else {
                return Err(refusal(
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("no topic {name}"),
                ));
            };
            let before = topic.partitions.len() as i32;
            for _ in before..count {
                topic.partitions.push(PartitionMeta {
                    leader_epoch: 0,
                    leader: NODE,
                });
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
    ) -> HostFuture<Result<Option<i32>, Cause>> {
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

    fn with_log<T>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause>,
    ) -> Result<T, Cause> {
        leased(&mut self.state(), topic, partition, f)
    }

    fn spawn_with_log<T: Send + 'static>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause> + Send + 'static,
    ) -> HostFuture<Result<T, Cause>> {
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

    fn make_durable(&self, topic: &str, partition: i32) -> HostFuture<Result<(), Cause>> {
        *self
            .state()
            .durable_calls
            .entry((topic.to_string(), partition))
            .or_default() += 1;
        Box::pin(std::future::ready(Ok(())))
    }

    fn idle_group_offsets(&self, group: &str) -> HostFuture<Result<Option<GroupOffsets>, String>> {
        let offsets = self.state().groups.get(group).cloned().unwrap_or_default();
        Box::pin(std::future::ready(Ok(Some(offsets))))
    }

    fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, GroupOffset)>,
    ) -> HostFuture<Result<(), String>> {
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

    fn create_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), String>> {
        let mut state = self.state();
        for b in bindings {
            if !state.acls.contains(&b) {
                state.acls.push(b);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), String>> {
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

/// A client of a memory cluster, through its network.
#[derive(Debug)]
pub struct MemorySourceClient {
    network: MemoryNetwork,
    address: String,
}

impl MemorySourceClient {
    fn cluster(&self) -> Result<MemoryCluster, ClientError> {
        self.network.reach(&self.address)
    }
}

/// One partition's answer to a fetch, as a Kafka leader gives it.
fn fetched(
    state: &State,
    cluster_id: &str,
    leader: i32,
    asked: &kmirror_protocol::client::FetchPartitionSpec,
) -> FetchedPartition {
    let mut answer = FetchedPartition {
        topic_id: asked.topic_id,
        topic: asked.topic.clone(),
        partition: asked.partition,
        error: ErrorCode::NONE,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        records: bytes::Bytes::new(),
        aborted_transactions: Vec::new(),
        diverging_epoch: None,
        current_leader: None,
    };
    let topic = state.topics.get(&asked.topic);
    let (Some(topic), Some(log)) = (
        topic,
        state.logs.get(&(asked.topic.clone(), asked.partition)),
    ) else {
        answer.error = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        return answer;
    };
    if !asked.topic_id.is_nil() && topic.topic_id != asked.topic_id {
        answer.error = ErrorCode::UNKNOWN_TOPIC_ID;
        return answer;
    }
    let Some(meta) = topic.partitions.get(asked.partition as usize) else {
        answer.error = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        return answer;
    };
    if meta.leader != leader {
        answer.error = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        return answer;
    }
    if asked.current_leader_epoch >= 0 && asked.current_leader_epoch < meta.leader_epoch {
        answer.error = ErrorCode::FENCED_LEADER_EPOCH;
        return answer;
    }
    let request = FetchRequest {
        offset: asked.offset,
        last_fetched_epoch: (asked.last_fetched_epoch >= 0).then_some(asked.last_fetched_epoch),
        max_bytes: usize::try_from(asked.max_bytes).unwrap_or(usize::MAX),
    };
    let source = MemorySource {
        cluster_id: cluster_id.to_string(),
        log: Some(log),
        lmes: HashMap::new(),
        unreachable: None,
    };
    answer.high_watermark = log.log_end_offset();
    answer.last_stable_offset = log.last_stable_offset();
    answer.log_start_offset = log.log_start_offset();
    match source.fetch(&request) {
        Ok(FetchResponse::Records { records, .. }) => answer.records = records,
        Ok(FetchResponse::Diverging { epoch, end_offset }) => {
            answer.diverging_epoch = Some((epoch, end_offset));
        }
        Ok(FetchResponse::OffsetOutOfRange { .. }) => {
            answer.error = ErrorCode::OFFSET_OUT_OF_RANGE;
        }
        Err(_) => answer.error = ErrorCode::UNKNOWN_SERVER_ERROR,
    }
    answer
}

/// The LME `cluster` recorded for `partition` of `topic` in any mirror whose source is
/// `asking`, from its `__mirror_state` records (-1: none).
fn recorded_lme(state: &State, asking: &str, topic: &str, topic_id: Uuid, partition: i32) -> i32 {
    let shards = state
        .topics
        .get(MIRROR_STATE_TOPIC)
        .map_or(0, |t| t.partitions.len() as i32);
    let mirrors = state
        .mirrors
        .iter()
        .filter(|(_, c)| c.get("mirror.source.cluster.id").map(String::as_str) == Some(asking));
    for (mirror, _) in mirrors {
        let index = mirror_partition_shard(mirror, &topic_id, partition, shards.max(1));
        let mut shard = Shard::new(index, shards.max(1));
        if let Some(log) = state.logs.get(&(MIRROR_STATE_TOPIC.to_string(), index)) {
            for batch in log.batches() {
                for record in coordinator_records(batch).unwrap_or_default() {
                    shard.replay(&record);
                }
            }
        }
        shard.loaded();
        if let Some(lme) = shard.last_mirrored_epoch(mirror, topic, partition) {
            return lme;
        }
    }
    -1
}

impl Source for MemorySourceClient {
    fn cluster_id(&self) -> impl Future<Output = Result<String, ClientError>> {
        std::future::ready(self.cluster().map(|c| c.inner.cluster_id.clone()))
    }

    fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> impl Future<Output = Result<ClusterMetadata, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            let wanted = |name: &str| topics.is_none_or(|t| t.contains(&name));
            ClusterMetadata {
                cluster_id: Some(cluster.inner.cluster_id.clone()),
                brokers: HashMap::from([(NODE, cluster.address())]),
                topics: state
                    .topics
                    .iter()
                    .filter(|(name, _)| wanted(name) && !name.starts_with("__"))
                    .map(|(name, t)| {
                        let partitions = (0..)
                            .zip(&t.partitions)
                            .map(|(partition, p)| PartitionMetadata {
                                partition,
                                leader: p.leader,
                                leader_epoch: p.leader_epoch,
                                replicas: vec![p.leader],
                                isr: vec![p.leader],
                            })
                            .collect();
                        let topic = TopicMetadata {
                            name: name.clone(),
                            topic_id: t.topic_id,
                            partitions,
                        };
                        (name.clone(), topic)
                    })
                    .collect(),
                refused: HashMap::new(),
            }
        });
        std::future::ready(answer)
    }

    fn list_offsets(
        &self,
        _leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> impl Future<Output = Result<(i64, i32), ClientError>> {
        let answer = self.cluster().and_then(|cluster| {
            let state = cluster.state();
            let log = state
                .logs
                .get(&(topic.to_string(), partition))
                .ok_or_else(|| ClientError::NotFound(format!("{topic}-{partition}")))?;
            let epoch = leader_epoch(&state, topic, partition).unwrap_or(-1);
            let offset = match (timestamp, isolation) {
                (EARLIEST, _) => log.log_start_offset(),
                (_, Isolation::ReadCommitted) => log.last_stable_offset(),
                (_, Isolation::ReadUncommitted) => log.log_end_offset(),
            };
            Ok((offset, epoch))
        });
        std::future::ready(answer)
    }

    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            spec.partitions
                .iter()
                .map(|asked| fetched(&state, &cluster.inner.cluster_id, leader, asked))
                .collect()
        });
        async move {
            // A fetch with nothing new waits a little, as a broker's long poll does.
            if answer
                .as_ref()
                .is_ok_and(|a: &Vec<FetchedPartition>| a.iter().all(|p| p.records.is_empty()))
            {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            answer
        }
    }

    fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<i32>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let state = cluster.state();
            partitions
                .iter()
                .map(|p| recorded_lme(&state, cluster_id, topic, topic_id, *p))
                .collect()
        });
        std::future::ready(answer)
    }

    fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<ConfigEntry>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            cluster
                .state()
                .topics
                .get(topic)
                .map(|t| {
                    t.configs
                        .iter()
                        .map(|(name, value)| ConfigEntry {
                            name: name.clone(),
                            value: Some(value.clone()),
                            source: crate::engine::sync_plan::DYNAMIC_TOPIC_CONFIG,
                            sensitive: false,
                        })
                        .collect()
                })
                .unwrap_or_default()
        });
        std::future::ready(answer)
    }

    fn list_groups(&self) -> impl Future<Output = Result<Vec<GroupListing>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            cluster
                .state()
                .groups
                .keys()
                .map(|group_id| GroupListing {
                    group_id: group_id.clone(),
                    state: "Empty".into(),
                    protocol_type: "consumer".into(),
                })
                .collect()
        });
        std::future::ready(answer)
    }

    fn committed_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, ClientError>> {
        let answer = self.cluster().map(|cluster| {
            let offsets = cluster.state().groups.get(group).cloned();
            offsets
                .unwrap_or_default()
                .into_iter()
                .map(|((topic, partition), o)| CommittedOffset {
                    topic,
                    partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch.unwrap_or(-1),
                    metadata: o.metadata,
                })
                .collect()
        });
        std::future::ready(answer)
    }

    fn describe_acls(&self) -> impl Future<Output = Result<Vec<AclDescription>, ClientError>> {
        std::future::ready(Err(ClientError::Broker {
            api: "DescribeAcls",
            code: ErrorCode::SECURITY_DISABLED,
        }))
    }

    fn reconfigure(&self, _config: ClientConfig) -> Result<(), ClientError> {
        Ok(())
    }
}
