//! The host interface: everything the engine needs from the broker that embeds it, and nothing
//! else. A broker implements three traits:
//!
//! - [`Host`]: its cluster as the engine sees it: the local metadata image and its changes,
//!   metadata writes through its controller, its partition logs (leased one call at a time
//!   through [`MirrorLog`]), consumer group offsets and ACLs for the metadata sync, a clock,
//!   and a factory of [`Source`] connections to a mirror's source cluster;
//! - [`MirrorLog`]: one partition's log while leased: read its range, epochs and batches,
//!   truncate it, append the source's batches unchanged, append the batches this cluster
//!   writes itself (the MIRROR_PID_RESET barrier, `__mirror_state` records);
//! - [`Source`]: a client of the source cluster (the engine implements it for
//!   [`kmirror_protocol::client::SourceClient`], so most hosts only build one).
//!
//! Errors are one type, [`HostError`]: Kafka's error code and why. The code's class decides:
//! retriable, the engine tries again after its backoff (a partition stays in its state, a fetch
//! is sent again); anything else fails the partition with the message (an operator decides) or
//! answers the request with the code. A source's errors are its client's [`ClientError`].
//!
//! This module holds the three traits; [`types`] the view types they speak in, and [`log_ops`]
//! the engine's own procedures over a leased log ([`next_fetch`], [`apply_fetch`],
//! [`stop_cut`], [`truncate_to_lso`], [`own_failover_barrier`], [`local_records`], [`opens_read_only`]), so
//! the broker's adapter, the in-memory host and the simulation run the same code.
//! docs/design.md §15 describes the contracts as a whole; `memory::cluster` (feature
//! `test-util`) is a complete host in one file, and `examples/embed.rs` runs it.

pub mod error;
pub mod log_ops;
pub mod types;

pub use error::HostError;
pub use log_ops::{
    StopCut, apply_fetch, first_barrier, is_barrier, latest_mirrored_epoch, local_records,
    local_records_from, next_fetch, opens_read_only, own_failover_barrier, read_only_on_change,
    records_from, stop_cut, truncate_to_lso,
};
pub use types::{
    ANY_NODE, EngineSettings, FetchProgress, FetchRequest, FetchResponse, GroupOffset,
    GroupOffsets, LeaderRecovery, MetadataDelta, NO_LEADER, PartitionMeta, TopicMeta,
    TopicPartition,
};

use crate::epoch::EpochStart;
use bytes::Bytes;
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::batch::{CheckedBatches, RecordBatch};
use kmirror_protocol::client::source::{
    AclBinding as AclDescription, ClusterMetadata, CommittedOffset, ConfigEntry, GroupListing,
    PartitionLme,
};
use kmirror_protocol::client::{ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use uuid::Uuid;

/// A host call in flight (it need not be `Send`: the engine awaits it on its own arbiter).
pub type HostFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// One partition's log while the engine holds its lease (one [`Host::with_log`] call). Every
/// method runs on the host's thread of that call; a change is in the log when the method
/// returns (durability is [`Host::make_durable`]'s).
pub trait MirrorLog {
    /// The first offset in the log.
    fn log_start_offset(&self) -> i64;
    /// The offset the next batch gets.
    fn log_end_offset(&self) -> i64;
    /// The last stable offset (below the first open transaction).
    fn last_stable_offset(&self) -> i64;
    /// The leader-epoch history: each epoch and its first offset, oldest first.
    fn epoch_history(&self) -> Vec<EpochStart>;
    /// Visits the batches from the one holding `from`, in order, until `stop` says so: that
    /// batch, or `None` when none did.
    fn find_batch(
        &self,
        from: i64,
        stop: &mut dyn FnMut(&RecordBatch) -> bool,
    ) -> Result<Option<RecordBatch>, HostError>;
    /// The base offset of the first batch whose greatest timestamp reaches `timestamp`
    /// (`None`: none does), as Kafka's time index answers it.
    fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<i64>, HostError>;
    /// Drops every batch holding an offset at or after `offset`.
    fn truncate_to(&mut self, offset: i64) -> Result<(), HostError>;
    /// Empties the log and restarts it at `offset`.
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), HostError>;
    /// Appends the source's whole batches unchanged (framing and CRC checked by
    /// [`apply_fetch`]; the log checks where they go: at or after its end where the source
    /// left gaps, epochs never lowered). A mirror partition has one replica's worth of
    /// commitment: what is appended is committed (the high watermark follows).
    fn append_mirrored(&mut self, batches: CheckedBatches) -> Result<(), HostError>;
    /// Appends the MIRROR_PID_RESET control batch stamped with `leader_epoch`, naming the
    /// source cluster whose producer ids it fences.
    fn append_pid_reset(
        &mut self,
        leader_epoch: i32,
        source_cluster_id: &str,
    ) -> Result<(), HostError>;
    /// Appends a batch this cluster writes as the partition's leader (`__mirror_state`
    /// records), at the log end, with `leader_epoch`.
    fn append_as_leader(&mut self, batch: Bytes, leader_epoch: i32) -> Result<(), HostError>;
}

/// A client of a mirror's source cluster. Every method may fail with a [`ClientError`]; the
/// engine classifies it with [`ClientError::is_retriable`].
pub trait Source: Send + Sync + 'static {
    /// The source cluster's id.
    fn cluster_id(&self) -> impl Future<Output = Result<String, ClientError>>;
    /// Metadata of `topics` (every topic when `None`).
    fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> impl Future<Output = Result<ClusterMetadata, ClientError>>;
    /// ListOffsets at broker `leader`: the offset for `timestamp` (`EARLIEST`, `LATEST`) and
    /// its leader epoch.
    fn list_offsets(
        &self,
        leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> impl Future<Output = Result<(i64, i32), ClientError>>;
    /// Opens the connection to broker `broker` (with its handshake) if it is not open yet, so
    /// the next request there does not wait for it, and tells the quickest round trip of the
    /// requests answered on it (the handshake's ApiVersions, then every request: none is
    /// answered quicker than the distance, one the broker held only overstates it), or `None`
    /// if the host cannot tell. `Some` only for a measured round trip: the quicker of this and
    /// the answers' measure is taken, so `Some(ZERO)` says the broker is near and keeps the
    /// lanes from opening ahead across any link. A fetcher judges the link's distance by it,
    /// and opens the lanes it will soon use across a distant link ahead of time
    /// (docs/design.md §4, "Lanes opened ahead"); with `None` it judges by its answers.
    fn connect(
        &self,
        broker: i32,
    ) -> impl Future<Output = Result<Option<std::time::Duration>, ClientError>>;
    /// One consumer Fetch at broker `leader`.
    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>>;
    /// LastMirroredEpochs: what the source recorded for these partitions when it stopped
    /// mirroring from `cluster_id`, in the order asked (-1: nothing; an error: that partition's
    /// shard could not say).
    fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<PartitionLme>, ClientError>>;
    /// A topic's configs (DescribeConfigs).
    fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<ConfigEntry>, ClientError>>;
    /// Every consumer group (ListGroups).
    fn list_groups(&self) -> impl Future<Output = Result<Vec<GroupListing>, ClientError>>;
    /// A group's committed offsets (OffsetFetch).
    fn committed_offsets(
        &self,
        group: &str,
    ) -> impl Future<Output = Result<Vec<CommittedOffset>, ClientError>>;
    /// Every ACL binding (DescribeAcls).
    fn describe_acls(&self) -> impl Future<Output = Result<Vec<AclDescription>, ClientError>>;
    /// Takes new connection and security settings: connections open now are dropped, the next
    /// request connects with them.
    fn reconfigure(&self, config: ClientConfig) -> Result<(), ClientError>;
}

/// The broker that embeds the engine. Methods that read answer from the local metadata image
/// at once; methods that change the cluster return a future that resolves once the change is
/// durable in the controller (and, for metadata, visible in the image). Write futures must
/// resolve in the order the calls were made (the engine tells a topic's partitions what a write
/// asked when its future resolves; kmirror's broker and the in-memory host resolve them at
/// once); the metadata change a write makes may reach the engine before or after its future
/// resolves.
pub trait Host: Clone + Send + Sync + Unpin + std::fmt::Debug + 'static {
    /// A connection to a mirror's source cluster.
    type Source: Source;

    /// This cluster's id.
    fn cluster_id(&self) -> String;
    /// The broker-wide settings of the engine.
    fn settings(&self) -> EngineSettings;
    /// Milliseconds since the Unix epoch (record timestamps, "unreachable since").
    fn now_ms(&self) -> i64;

    /// Bumped on every metadata change; the engine reacts to each wake-up once.
    fn metadata_changes(&self) -> tokio::sync::watch::Receiver<u64>;
    /// Opens the logs of partitions the metadata gives this broker (before the engine starts
    /// their mirror partitions), then answers the image's version, what changed since
    /// `followed` (everything when `None`), and the touched topics as they are now (a touched
    /// topic missing was deleted).
    fn metadata_since(
        &self,
        followed: Option<u64>,
    ) -> (u64, MetadataDelta, BTreeMap<String, TopicMeta>);
    /// One topic.
    fn topic(&self, name: &str) -> Option<TopicMeta>;
    /// Every topic.
    fn topics(&self) -> BTreeMap<String, TopicMeta>;
    /// Every mirror with its configs (CreateMirror / IncrementalAlterConfigs on the mirror).
    fn mirrors(&self) -> BTreeMap<String, BTreeMap<String, String>>;
    /// Whether this broker leads `partition`.
    fn leads(&self, partition: &PartitionMeta) -> bool;
    /// `host:port` of a node of this cluster (where its `__mirror_state` shards are asked).
    fn node_address(&self, node_id: i32) -> Option<String>;

    /// Creates a topic (with `topic_id` when given: a mirror topic has its source's).
    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: BTreeMap<String, String>,
        topic_id: Option<Uuid>,
    ) -> HostFuture<Result<(), HostError>>;
    /// Replaces a topic's dynamic configs.
    fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>>;
    /// Replaces a mirror's configs (already checked) with `configs`, made from `base`, the
    /// configs read: if they changed since (another change landed first), refused with
    /// INVALID_CLUSTER_MIRROR_STATES so the engine makes its change again from the configs now.
    fn set_mirror_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        base: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostError>>;
    /// Grows a topic to `count` partitions.
    fn create_partitions(&self, name: &str, count: i32) -> HostFuture<Result<(), HostError>>;
    /// BumpLeaderEpochs for one partition: its leader epoch afterwards, above
    /// `min_leader_epoch` (`min_leader_epoch + 1` when it was not above it already; else
    /// unchanged), durable in the controller (`None`: the partition is gone).
    fn bump_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> HostFuture<Result<Option<i32>, HostError>>;
    /// Refuses (true) or accepts (false) produce requests to a partition.
    fn set_read_only(&self, topic: &str, partition: i32, read_only: bool);

    /// Runs `f` on the partition's log now, on the calling thread, with the log locked (the
    /// partition not open here: [`HostError::not_here`]). The engine uses it for the state
    /// machine's log changes, which must happen within one poll of their future.
    fn with_log<T, E: From<HostError>>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E>,
    ) -> Result<T, E>;
    /// Runs `f` on the partition's log where the host says (the broker: its blocking pool),
    /// and wakes its fetch waiters when the log changed. The fetchers apply their answers
    /// through it: one call per answer, the batches handed over once.
    fn spawn_with_log<T: Send + 'static, E: From<HostError> + Send + 'static>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, E> + Send + 'static,
    ) -> HostFuture<Result<T, E>>;
    /// Resolves once everything appended to the partition so far is durable: fsynced, and
    /// where the partition has replicas, held by every in-sync one (below the high watermark),
    /// so a leader elected after a crash has it.
    fn make_durable(&self, topic: &str, partition: i32) -> HostFuture<Result<(), HostError>>;
    /// Resolves once everything appended to the partition so far is held by every in-sync
    /// replica (not forced to disk). A host without replicas has nothing to wait for.
    fn replicated(&self, _topic: &str, _partition: i32) -> HostFuture<Result<(), HostError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// A consumer group's committed offsets here, from its coordinator wherever it is; `None`
    /// while the group has members on this cluster (its offsets are its own then); an error
    /// when its coordinator cannot be asked.
    fn idle_group_offsets(
        &self,
        group: &str,
    ) -> HostFuture<Result<Option<GroupOffsets>, HostError>>;
    /// Commits offsets for a group (as an admin: no member, no generation).
    fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, GroupOffset)>,
    ) -> HostFuture<Result<(), HostError>>;
    /// Every ACL binding of this cluster.
    fn acls(&self) -> Vec<AclBinding>;
    /// Creates bindings (one that exists is left as it is), all or none.
    fn create_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>>;
    /// Deletes exactly these bindings, all or none.
    fn delete_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), HostError>>;

    /// A client of a mirror's source cluster with these settings (from the mirror's configs).
    /// The engine makes two per mirror: one for control requests, one for its fetchers.
    fn connect_source(&self, config: ClientConfig) -> Result<Self::Source, ClientError>;
}
