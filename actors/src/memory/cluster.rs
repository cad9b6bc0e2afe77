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
    EngineSettings, FetchRequest, FetchResponse, GroupOffset, GroupOffsets, Host, HostError,
    HostFuture, MetadataDelta, MirrorLog, PartitionMeta, Source, TopicMeta,
};
use crate::liveness::LivenessPolicy;
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::client::source::{
    AclBinding as AclDescription, ClusterMetadata, CommittedOffset, ConfigEntry, EARLIEST,
    GroupListing, PartitionLme, PartitionMetadata, TopicMetadata,
};
use kmirror_protocol::client::{ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::records::coordinator_records;
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use uuid::Uuid;

mod host;
mod source_client;

pub use source_client::MemorySourceClient;

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
    pub fn create_plain_topic(&self, name: &str, partitions: i32) -> Result<(), HostError> {
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

fn refusal(code: ErrorCode, message: String) -> HostError {
    HostError::new(code, message)
}

fn create(
    cluster: &MemoryCluster,
    name: &str,
    partitions: i32,
    configs: BTreeMap<String, String>,
    topic_id: Option<Uuid>,
) -> Result<(), HostError> {
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
                    .map(|_| PartitionMeta::led_by(NODE))
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
fn leased<T, E: From<HostError>>(
    state: &mut State,
    topic: &str,
    partition: i32,
    f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E>,
) -> Result<T, E> {
    let log = state
        .logs
        .get_mut(&(topic.to_string(), partition))
        .ok_or_else(|| HostError::not_here(topic, partition))?;
    f(log)
}
