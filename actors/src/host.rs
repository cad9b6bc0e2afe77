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
//! Errors are one type, [`Cause`]: retryable (the engine tries again after its backoff: a
//! partition stays in its state, a fetch is sent again) or fatal (the partition goes FAILED
//! with the message, an operator decides).
//!
//! The engine's own procedures over a leased log live here too ([`next_fetch`],
//! [`apply_fetch`], [`truncate_to_lso`], [`latest_mirrored_epoch`], [`own_failover_barrier`],
//! [`local_records`], [`opens_read_only`]): the broker's adapter, the in-memory host and the simulation run
//! the same code. docs/design.md §15 describes the contracts as a whole; `memory::cluster`
//! (feature `test-util`) is a complete host in one file, and `examples/embed.rs` runs it.

use crate::epoch::{self, EpochStart};
pub use crate::partition::Cause;
use bytes::Bytes;
use kmirror_protocol::acl::AclBinding;
use kmirror_protocol::batch::{CheckedBatches, RecordBatch};
use kmirror_protocol::client::source::{
    AclBinding as AclDescription, ClusterMetadata, CommittedOffset, ConfigEntry, GroupListing,
};
use kmirror_protocol::client::{ClientConfig, ClientError, FetchSpec, FetchedPartition, Isolation};
use kmirror_protocol::records::ControlRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use uuid::Uuid;

/// A host call in flight (it need not be `Send`: the engine awaits it on its own arbiter).
pub type HostFuture<T> = Pin<Box<dyn Future<Output = T>>>;

/// A partition of a topic, by the topic's name (the same on both clusters): how the fetchers
/// and the engine's per-partition figures and epochs are keyed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A partition of the destination cluster, as the metadata image has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMeta {
    /// Its leader epoch.
    pub leader_epoch: i32,
    /// The node that leads it ([`ANY_NODE`]: whichever node opens it, in a single-node
    /// cluster).
    pub leader: i32,
}

/// The leader of partitions placed before the cluster had brokers: the single node.
pub const ANY_NODE: i32 = -1;

/// A topic of the destination cluster, as the metadata image has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// The topic id (a mirror topic has its source topic's).
    pub topic_id: Uuid,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMeta>,
    /// Its dynamic configs (`mirror.name` among them).
    pub configs: BTreeMap<String, String>,
}

/// What changed in the metadata between two versions of the image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataDelta {
    /// Look at everything: the reader is further behind than the host remembers, or a change
    /// touched every topic.
    pub everything: bool,
    /// The cluster's brokers, mirrors (or their configs) or ACLs changed.
    pub cluster: bool,
    /// Topics created, deleted, grown or reconfigured.
    pub topics: BTreeSet<String>,
    /// Topics of which only partitions' leader epochs changed (not in `topics`).
    pub leader_epochs: BTreeSet<String>,
}

impl MetadataDelta {
    /// The delta of a reader that has to look at everything.
    pub fn everything() -> MetadataDelta {
        MetadataDelta {
            everything: true,
            cluster: true,
            ..MetadataDelta::default()
        }
    }

    /// Whether anything about `topic` changed (its epochs included).
    pub fn touches(&self, topic: &str) -> bool {
        self.everything || self.topics.contains(topic) || self.leader_epochs.contains(topic)
    }
}

/// The broker-wide settings the engine runs with (Kafka-style broker keys; see
/// docs/broker-configs.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    /// `mirror.state.topic.num.partitions`: partitions of `__mirror_state` when the engine
    /// creates it.
    pub state_partitions: i32,
    /// `mirror.metadata.refresh.interval.ms`: how often each mirror's metadata sync runs.
    pub metadata_refresh_interval_ms: u64,
    /// `mirror.num.replica.fetchers`: fetchers per source broker, unless a mirror sets its own.
    pub num_replica_fetchers: usize,
    /// `mirror.supervision.*`: when a partition actor is restarted, and when given up on.
    pub liveness: crate::liveness::LivenessPolicy,
}

/// A consumer group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// The offset.
    pub offset: i64,
    /// The leader epoch of the record before it, when known.
    pub leader_epoch: Option<i32>,
    /// The client's metadata string.
    pub metadata: Option<String>,
}

/// A consumer group's committed offsets, by topic and partition.
pub type GroupOffsets = BTreeMap<(String, i32), GroupOffset>;

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
    ) -> Result<Option<RecordBatch>, Cause>;
    /// Drops every batch holding an offset at or after `offset`.
    fn truncate_to(&mut self, offset: i64) -> Result<(), Cause>;
    /// Empties the log and restarts it at `offset`.
    fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), Cause>;
    /// Appends the source's whole batches unchanged (framing and CRC checked by
    /// [`apply_fetch`]; the log checks where they go: at or after its end where the source
    /// left gaps, epochs never lowered). A mirror partition has one replica's worth of
    /// commitment: what is appended is committed (the high watermark follows).
    fn append_mirrored(&mut self, batches: CheckedBatches) -> Result<(), Cause>;
    /// Appends the MIRROR_PID_RESET control batch stamped with `leader_epoch`, naming the
    /// source cluster whose producer ids it fences.
    fn append_pid_reset(&mut self, leader_epoch: i32, source_cluster_id: &str)
    -> Result<(), Cause>;
    /// Appends a batch this cluster writes as the partition's leader (`__mirror_state`
    /// records), at the log end, with `leader_epoch`.
    fn append_as_leader(&mut self, batch: Bytes, leader_epoch: i32) -> Result<(), Cause>;
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
    /// One consumer Fetch at broker `leader`.
    fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> impl Future<Output = Result<Vec<FetchedPartition>, ClientError>>;
    /// LastMirroredEpochs: what the source recorded for these partitions when it stopped
    /// mirroring from `cluster_id` (-1: nothing).
    fn last_mirrored_epochs(
        &self,
        cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> impl Future<Output = Result<Vec<i32>, ClientError>>;
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
    ) -> HostFuture<Result<(), HostRefusal>>;
    /// Replaces a topic's dynamic configs.
    fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostRefusal>>;
    /// Replaces a mirror's configs (already checked) with `configs`, made from `base`, the
    /// configs read: if they changed since (another change landed first), refused with
    /// INVALID_CLUSTER_MIRROR_STATES so the engine makes its change again from the configs now.
    fn set_mirror_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        base: BTreeMap<String, String>,
    ) -> HostFuture<Result<(), HostRefusal>>;
    /// Grows a topic to `count` partitions.
    fn create_partitions(&self, name: &str, count: i32) -> HostFuture<Result<(), HostRefusal>>;
    /// BumpLeaderEpochs for one partition: its leader epoch afterwards, above
    /// `min_leader_epoch` (`min_leader_epoch + 1` when it was not above it already; else
    /// unchanged), durable in the controller (`None`: the partition is gone).
    fn bump_leader_epoch(
        &self,
        topic: &str,
        partition: i32,
        min_leader_epoch: i32,
    ) -> HostFuture<Result<Option<i32>, Cause>>;
    /// Refuses (true) or accepts (false) produce requests to a partition.
    fn set_read_only(&self, topic: &str, partition: i32, read_only: bool);

    /// Runs `f` on the partition's log now, on the calling thread, with the log locked
    /// (retryable error: the partition is not open here). The engine uses it for the state
    /// machine's log changes, which must happen within one poll of their future.
    fn with_log<T>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause>,
    ) -> Result<T, Cause>;
    /// Runs `f` on the partition's log where the host says (the broker: its blocking pool),
    /// and wakes its fetch waiters when the log changed. The fetchers apply their answers
    /// through it: one call per answer, the batches handed over once.
    fn spawn_with_log<T: Send + 'static>(
        &self,
        topic: &str,
        partition: i32,
        f: impl FnOnce(&mut dyn MirrorLog) -> Result<T, Cause> + Send + 'static,
    ) -> HostFuture<Result<T, Cause>>;
    /// Resolves once everything appended to the partition so far is durable (fsynced).
    fn make_durable(&self, topic: &str, partition: i32) -> HostFuture<Result<(), Cause>>;

    /// A consumer group's committed offsets here, from its coordinator wherever it is; `None`
    /// while the group has members on this cluster (its offsets are its own then); an error
    /// when its coordinator cannot be asked.
    fn idle_group_offsets(&self, group: &str) -> HostFuture<Result<Option<GroupOffsets>, String>>;
    /// Commits offsets for a group (as an admin: no member, no generation).
    fn commit_offsets(
        &self,
        group: &str,
        offsets: Vec<(String, i32, GroupOffset)>,
    ) -> HostFuture<Result<(), String>>;
    /// Every ACL binding of this cluster.
    fn acls(&self) -> Vec<AclBinding>;
    /// Creates bindings (one that exists is left as it is), all or none.
    fn create_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), String>>;
    /// Deletes exactly these bindings, all or none.
    fn delete_acls(&self, bindings: Vec<AclBinding>) -> HostFuture<Result<(), String>>;

    /// A client of a mirror's source cluster with these settings (from the mirror's configs).
    /// The engine makes two per mirror: one for control requests, one for its fetchers.
    fn connect_source(&self, config: ClientConfig) -> Result<Self::Source, ClientError>;
}

/// A metadata change the host's controller refused: Kafka's error code and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HostRefusal {
    /// Kafka's error code (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, ...).
    pub code: kmirror_protocol::errors::ErrorCode,
    /// For the operator.
    pub message: String,
}

/// Where a mirror fetcher reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRequest {
    /// The destination's log end offset.
    pub offset: i64,
    /// The epoch of the destination's last batch (`None`: the log is empty).
    pub last_fetched_epoch: Option<i32>,
    /// Most bytes to return (whole batches; at least one).
    pub max_bytes: usize,
}

/// A source partition's answer to a consumer fetch (READ_COMMITTED).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchResponse {
    /// Whole batches from the fetch offset, all below the source's LSO.
    Records {
        /// The batches.
        records: Bytes,
        /// The source's high watermark.
        high_watermark: i64,
        /// The source leader epoch (SLE) the fetch was answered under, when known.
        source_leader_epoch: Option<i32>,
    },
    /// The destination's history diverged: the source's `epoch` ends at `end_offset`.
    Diverging { epoch: i32, end_offset: i64 },
    /// The fetch offset is outside the source log.
    OffsetOutOfRange { log_start_offset: i64 },
}

/// What one fetch round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchProgress {
    /// Batches were appended; the source epoch: the greatest of theirs and the SLE.
    Appended { source_epoch: i32 },
    /// Nothing new below the source's LSO.
    Idle,
    /// Nothing appended, and the source epoch (the SLE, or the epoch of a next batch that is
    /// above the destination leader epoch and waits for a leader-epoch bump) has come within
    /// the bump threshold of the destination leader epoch (DLE >= SLE).
    HeldBack { source_epoch: i32 },
    /// The local log was truncated to where it agrees with the source, removing `records`.
    Truncated { records: u64 },
}

/// The fetch a mirror fetcher sends for one partition (docs/design.md §4): at the log end, with
/// the epoch of the last local batch.
pub fn next_fetch(log: &dyn MirrorLog, max_bytes: usize) -> FetchRequest {
    FetchRequest {
        offset: log.log_end_offset(),
        last_fetched_epoch: log.epoch_history().last().map(|(e, _)| *e),
        max_bytes,
    }
}

/// Applies the source's answer to `request`: truncate on divergence or out-of-range, append the
/// batches whose epoch does not exceed the destination leader epoch (whole, unchanged, CRC
/// checked). `source_log_start` is the source's log start, where asked for (a divergence with
/// no common epoch restarts the log there).
pub fn apply_fetch(
    log: &mut dyn MirrorLog,
    source_log_start: Option<i64>,
    request: &FetchRequest,
    response: FetchResponse,
    destination_leader_epoch: i32,
) -> Result<FetchProgress, Cause> {
    // An answer to a fetch from another log end is stale: the log was truncated or appended to
    // while it was in flight (a stop, a PREPARING truncation, another fetcher for a moment
    // after a leader move). Applied, it would truncate what is no longer there or, the log
    // allowing gaps, leave a silent hole. The next fetch asks from the log end again.
    if request.offset != log.log_end_offset() {
        return Ok(FetchProgress::Idle);
    }
    let source_start =
        || source_log_start.ok_or_else(|| Cause::retryable("the source's log start is not known"));
    match response {
        FetchResponse::Diverging { epoch, .. } if epoch < 0 => {
            let start = source_start()?;
            let records = records_from(log, log.log_start_offset())?;
            log.truncate_fully_and_start_at(start)?;
            Ok(FetchProgress::Truncated { records })
        }
        FetchResponse::Diverging { epoch, end_offset } => {
            let at =
                epoch::divergence_offset(epoch, end_offset, &log.epoch_history(), request.offset);
            let records = records_from(log, at)?;
            log.truncate_to(at)?;
            Ok(FetchProgress::Truncated { records })
        }
        FetchResponse::OffsetOutOfRange { log_start_offset } => {
            let records = records_from(log, log.log_start_offset())?;
            log.truncate_fully_and_start_at(log_start_offset)?;
            Ok(FetchProgress::Truncated { records })
        }
        FetchResponse::Records {
            records,
            source_leader_epoch,
            ..
        } => {
            let mut checked = CheckedBatches::check(records)
                .map_err(|e| Cause::fatal(format!("corrupt batch from the source: {e}")))?;
            // The source epoch a batch reports: the greater of its own and the SLE.
            let with_sle = |epoch: i32| source_leader_epoch.map_or(epoch, |sle| epoch.max(sle));
            let mut keep = 0;
            let mut max_epoch = None;
            for batch in checked.batches() {
                let epoch = batch.partition_leader_epoch();
                if epoch > destination_leader_epoch {
                    if keep == 0 {
                        return Ok(FetchProgress::HeldBack {
                            source_epoch: with_sle(epoch),
                        });
                    }
                    break;
                }
                max_epoch = max_epoch.max(Some(epoch));
                keep += 1;
            }
            let Some(max_epoch) = max_epoch else {
                let close = source_leader_epoch
                    .filter(|sle| epoch::bump_for(*sle, destination_leader_epoch).is_some());
                return Ok(match close {
                    Some(sle) => FetchProgress::HeldBack { source_epoch: sle },
                    None => FetchProgress::Idle,
                });
            };
            checked.truncate(keep);
            // A source log start inside a batch (DeleteRecords moved it there) answers a fetch
            // from that start with the whole batch, beginning below it. An empty log restarts
            // at the batch's base offset, as Kafka's followers do; the records below the source's
            // log start stay readable here until retention removes them.
            let first_base = checked.batches().first().map(|b| b.base_offset());
            if let Some(base) = first_base.filter(|base| *base < request.offset)
                && log.log_end_offset() == log.log_start_offset()
            {
                log.truncate_fully_and_start_at(base)?;
            }
            log.append_mirrored(checked)?;
            Ok(FetchProgress::Appended {
                source_epoch: with_sle(max_epoch),
            })
        }
    }
}

/// Whether `batch` is a MIRROR_PID_RESET barrier (written by this cluster when it stopped).
pub fn is_barrier(batch: &RecordBatch) -> bool {
    batch.is_control()
        && matches!(
            ControlRecord::parse(batch),
            Ok(ControlRecord::MirrorPidReset { .. })
        )
}

/// The newest epoch among the batches that came from the source: every batch except the
/// MIRROR_PID_RESET barriers this cluster wrote itself (a STOPPING interrupted after its barrier
/// runs again, and its LME must not be the barrier's destination epoch); `None` if none. A batch
/// that cannot be read counts its epoch as mirrored: the conservative answer for an LME.
pub fn latest_mirrored_epoch(log: &dyn MirrorLog) -> Option<i32> {
    latest_mirrored_epoch_below(log, log.log_end_offset())
}

/// [`latest_mirrored_epoch`] of the batches below `limit`.
fn latest_mirrored_epoch_below(log: &dyn MirrorLog, limit: i64) -> Option<i32> {
    let history = log.epoch_history();
    for (i, (epoch, start)) in history.iter().enumerate().rev() {
        if *start >= limit {
            continue;
        }
        let end = history
            .get(i + 1)
            .map_or(limit, |(_, next)| *next)
            .min(limit);
        let found = log.find_batch(*start, &mut |b| b.base_offset() >= end || !is_barrier(b));
        match found {
            Ok(Some(batch)) if batch.base_offset() < end => return Some(*epoch),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e.message, "reading the log for its last mirrored epoch");
                return Some(*epoch);
            }
        }
    }
    None
}

/// The data records in the batches holding an offset at or after `offset`: what
/// `truncate_to(offset)` removes of what producers wrote (records, not offsets: a compacted
/// source leaves gaps inside batches; control records, such as transaction markers and the
/// stop's barrier, are not counted).
pub fn records_from(log: &dyn MirrorLog, offset: i64) -> Result<u64, Cause> {
    if offset >= log.log_end_offset() {
        return Ok(0);
    }
    let mut records = 0u64;
    log.find_batch(offset.max(log.log_start_offset()), &mut |batch| {
        if batch.last_offset() >= offset && !batch.is_control() {
            records += u64::try_from(batch.records_count()).unwrap_or(0);
        }
        false
    })?;
    Ok(records)
}

/// STOPPING's truncate-to-LSO branch: returns the newest mirrored epoch left in the log (the
/// LME; `None`: nothing mirrored is left) and the records removed. A log whose newest barrier is
/// this cluster's own ([`own_failover_barrier`]: a STOPPING run again after its barrier, the
/// partition writable since) is not cut: everything after the barrier was written by this
/// cluster's producers, and the LME is the one from before it.
pub fn truncate_to_lso(
    log: &mut dyn MirrorLog,
    cluster_id: &str,
) -> Result<(Option<i32>, u64), Cause> {
    if let Some(barrier) = own_failover_barrier(log, cluster_id)? {
        return Ok((latest_mirrored_epoch_below(log, barrier), 0));
    }
    let lso = log.last_stable_offset();
    let removed = records_from(log, lso)?;
    log.truncate_to(lso)?;
    Ok((latest_mirrored_epoch(log), removed))
}

/// The offset of the log's newest MIRROR_PID_RESET barrier if this cluster wrote it when its
/// mirror failed over: one that fences another cluster's producer ids than `cluster_id`'s (a
/// barrier mirrored back in a failback fences this cluster's own, and is followed by the other
/// cluster's batches). Everything after such a barrier was written here as leader: its failover's
/// steps that change the log (the LSO cut, the barrier) are done, and STOPPING run again skips
/// them, while the partition takes writes (docs/failover.md "A stopped topic stays writable").
pub fn own_failover_barrier(log: &dyn MirrorLog, cluster_id: &str) -> Result<Option<i64>, Cause> {
    let start = log.log_start_offset();
    let end = log.log_end_offset();
    for (_, epoch_start) in log.epoch_history().into_iter().rev() {
        let from = epoch_start.max(start);
        if from >= end {
            continue;
        }
        let Some(batch) = log.find_batch(from, &mut |_| true)? else {
            continue;
        };
        if !batch.is_control() {
            continue;
        }
        if let Ok(ControlRecord::MirrorPidReset { source_cluster_id }) =
            ControlRecord::parse(&batch)
        {
            return Ok((source_cluster_id != cluster_id).then(|| batch.base_offset()));
        }
    }
    Ok(None)
}

/// The offset of the first MIRROR_PID_RESET barrier in the log (`None`: it never failed over
/// here, or the barrier was truncated away). Everything from it on was written by this
/// cluster's producers: the barrier opens the epoch the stop bumped to, above every mirrored
/// one, and PREPARING cuts below it before anything is mirrored again. A barrier is the first
/// batch of its epoch, so only the first batch of each epoch is read.
pub fn first_barrier(log: &dyn MirrorLog) -> Result<Option<i64>, Cause> {
    let start = log.log_start_offset();
    let end = log.log_end_offset();
    for (_, epoch_start) in log.epoch_history() {
        let from = epoch_start.max(start);
        if from >= end {
            break;
        }
        if let Some(batch) = log.find_batch(from, &mut |_| true)?
            && is_barrier(&batch)
        {
            return Ok(Some(batch.base_offset()));
        }
    }
    Ok(None)
}

/// The records this cluster's producers wrote to a stopped partition since its failover (those
/// from its first barrier on), which restarting the mirror discards; control records (the
/// barrier, transaction markers) are not counted.
pub fn local_records(log: &dyn MirrorLog) -> Result<u64, Cause> {
    match first_barrier(log)? {
        Some(barrier) => records_from(log, barrier),
        None => Ok(0),
    }
}

/// The records this cluster's producers wrote that cutting the log at `cut` removes (0 when the
/// log never failed over here: a mirror's own history is the source's, fetched again).
pub fn local_records_from(log: &dyn MirrorLog, cut: i64) -> Result<u64, Cause> {
    match first_barrier(log)? {
        Some(barrier) => records_from(log, barrier.max(cut)),
        None => Ok(0),
    }
}

/// Whether a partition of a topic whose `mirror.name` is `mirror_name` opens read-only when a
/// broker of cluster `cluster_id` (re)opens it (docs/failover.md "A stopped topic stays
/// writable"): a mirror topic is, except one its mirror stopped whose newest barrier is this
/// cluster's own ([`own_failover_barrier`]). The barrier is durable after the failover's last
/// change to the log, so it proves the failover's data is final here: the topic stays writable
/// while its record is read, from a shard that may be on a broker that is away.
pub fn opens_read_only(
    mirror_name: Option<&str>,
    log: &dyn MirrorLog,
    cluster_id: &str,
) -> Result<bool, Cause> {
    match mirror_name.filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some(value) => match crate::metadata::mirror_of(value) {
            Some((_, crate::partition::Desired::Stopped)) => {
                Ok(own_failover_barrier(log, cluster_id)?.is_none())
            }
            _ => Ok(true),
        },
    }
}

/// How a change of a topic's `mirror.name` from `old` to `new` sets its partitions' read-only
/// flag at once, before the engine acts (docs/failover.md): `Some(true)` when the topic is to
/// be mirrored or paused and was not (a restart of a stopped topic: produce is refused from the
/// moment `mirror.name` names the mirror again, not from when PREPARING is durable),
/// `Some(false)` when it leaves mirroring altogether, `None` when the engine decides (a stop
/// makes the topic writable once STOPPED).
pub fn read_only_on_change(old: Option<&str>, new: Option<&str>) -> Option<bool> {
    // None: not a mirror topic; Some(true): mirrored or paused; Some(false): stopped.
    let mirrored = |v: Option<&str>| {
        v.filter(|v| !v.is_empty()).map(|v| {
            !matches!(
                crate::metadata::mirror_of(v),
                Some((_, crate::partition::Desired::Stopped))
            )
        })
    };
    match (mirrored(old), mirrored(new)) {
        (Some(_), None) => Some(false),
        (None | Some(false), Some(true)) => Some(true),
        _ => None,
    }
}
