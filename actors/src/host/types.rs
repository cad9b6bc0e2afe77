//! The view types of the host interface: how the engine sees a host's metadata (topics,
//! partitions, their leaders and epochs, what changed), its settings, group offsets, and a
//! mirror fetch's position, answer and progress.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

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

/// A partition of the destination cluster, as the metadata image has it (Kafka's
/// `PartitionRegistration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMeta {
    /// Its leader epoch: +1 on every leader change and every bump.
    pub leader_epoch: i32,
    /// The node that leads it: [`NO_LEADER`] while no replica can lead, [`ANY_NODE`] for a
    /// partition placed before the cluster had brokers (the single node).
    pub leader: i32,
    /// The nodes assigned a replica of it, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The replicas in sync with the leader, the leader among them; never empty (the last
    /// member stays while no replica can lead).
    pub isr: Vec<i32>,
    /// +1 on every change of this record: the version an ISR change is checked against.
    pub partition_epoch: i32,
    /// Whether the leader was elected uncleanly and has not yet recovered.
    pub leader_recovery: LeaderRecovery,
}

/// Whether a partition's leader holds everything the partition acknowledged (Kafka's
/// `LeaderRecoveryState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaderRecovery {
    /// It does (every clean election).
    #[default]
    Recovered,
    /// It was elected from outside the ISR (an unclean election) and may lack acknowledged
    /// records.
    Recovering,
}

impl PartitionMeta {
    /// A new partition on `replicas` (the first leads), at leader epoch 0, every replica in
    /// sync (all are empty), as Kafka creates partitions.
    pub fn placed(replicas: Vec<i32>) -> PartitionMeta {
        let leader = replicas.first().copied().unwrap_or(ANY_NODE);
        let isr = if replicas.is_empty() {
            vec![leader]
        } else {
            replicas.clone()
        };
        PartitionMeta {
            leader_epoch: 0,
            leader,
            replicas,
            isr,
            partition_epoch: 0,
            leader_recovery: LeaderRecovery::Recovered,
        }
    }

    /// A new partition whose one replica is `leader`, at leader epoch 0.
    pub fn led_by(leader: i32) -> PartitionMeta {
        PartitionMeta::placed(vec![leader])
    }

    /// Whether it has a leader.
    pub fn has_leader(&self) -> bool {
        self.leader != NO_LEADER
    }
}

/// The leader of partitions placed before the cluster had brokers: the single node.
pub const ANY_NODE: i32 = -1;

/// The leader of a partition none of whose replicas can lead (all out of the ISR or fenced);
/// Kafka answers -1 on the wire for it.
pub const NO_LEADER: i32 = -2;

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
    /// The local log was truncated to where it agrees with the source, removing `records`;
    /// `skipped` is the range of offsets `[from, to)` the source deleted before they were
    /// mirrored, when the log restarted past its end (docs/failover.md, "Gaps").
    Truncated {
        records: u64,
        skipped: Option<(i64, i64)>,
    },
}
