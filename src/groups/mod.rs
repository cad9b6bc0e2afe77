//! The group coordinator of the reference broker: Kafka's classic consumer-group protocol
//! (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) and committed offsets.
//!
//! Lifecycle of a group: Empty -> PreparingRebalance (a member joins or leaves, or a session
//! expires) -> CompletingRebalance (every member rejoined, or the rebalance timeout passed: the
//! generation advances, the leader gets the members' metadata) -> Stable (the leader's SyncGroup
//! delivered the assignments) -> PreparingRebalance ... -> Empty when the last member leaves.
//! Assignment stays the clients' business (range, cooperative-sticky, ...): the coordinator only
//! carries the bytes.
//!
//! Committed offsets (with their leader epoch and metadata) are durable: each commit is a record
//! of the coordinator's [`journal`] (on one node `log.dirs/__consumer_offsets/offsets.log`,
//! fsynced before the answer, replayed at start; in a multi-process cluster the group's
//! partition of `__consumer_offsets`, replicated, replayed by each new leader).
//! Classic membership is not persisted, as in Kafka: classic consumers rejoin after a restart.
//! Offsets a transaction commits (TxnOffsetCommit) are durable too but pending, per producer
//! id, until the transaction coordinator's marker for this coordinator arrives
//! ([`GroupCoordinator::end_transaction`]): a commit applies them, an abort drops them.
//!
//! Consumer groups of KIP-848's protocol (`group.protocol=consumer`, ConsumerGroupHeartbeat)
//! live in [`consumer`]: the broker assigns with the [`assignors`]; their membership is durable
//! (a record of the same log on every change), so members keep their epochs and partitions
//! across a restart. A group is of one protocol while it has members: the other protocol's
//! members are refused (INCONSISTENT_GROUP_PROTOCOL for JoinGroup, GROUP_ID_NOT_FOUND for
//! ConsumerGroupHeartbeat); an empty group goes to whichever protocol joins it.

pub mod assignors;
pub mod consumer;
pub mod journal;

use crate::record_log::RecordLog;
use crate::storage::StorageError;
use assignors::Partitions;
use bytes::Bytes;
use consumer::{
    ConsumerGroup, ConsumerGroupState, ConsumerMember, ConsumerSettings, Heartbeat,
    HeartbeatAnswer, HeartbeatError, TopicsView,
};
use journal::{Journal, OffsetsPartitions, WriteError};
use kmirror_protocol::errors::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often a JoinGroup waiting for the rebalance looks for members whose session passed.
const JOIN_EXPIRY_CHECK: Duration = Duration::from_millis(500);

/// A group's state, named as ListGroups and DescribeGroups report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members.
    Empty,
    /// Waiting for members to rejoin.
    PreparingRebalance,
    /// Waiting for the leader's assignment.
    CompletingRebalance,
    /// Running.
    Stable,
}

impl GroupState {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The offset.
    pub offset: i64,
    /// The leader epoch of the record before it, or -1.
    pub leader_epoch: i32,
    /// The client's metadata string.
    pub metadata: Option<String>,
}

/// A record of the group coordinator's log: replayed in order, it gives every group's state.
#[derive(Debug, Serialize, Deserialize)]
pub enum OffsetRecord {
    Commit {
        group: String,
        topic: String,
        partition: i32,
        committed: Committed,
    },
    DeleteGroup {
        group: String,
    },
    /// An offset a transaction committed, pending until its marker.
    TxnCommit {
        group: String,
        producer_id: i64,
        producer_epoch: i16,
        topic: String,
        partition: i32,
        committed: Committed,
    },
    /// The marker of `producer_id`'s transaction at `producer_epoch`: its pending offsets (of
    /// that epoch or older) apply or go.
    TxnEnd {
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    },
    /// The topic was deleted: every group forgets its offsets.
    TopicDeleted {
        topic: String,
    },
    /// A consumer group's whole state (written by compaction).
    ConsumerGroup {
        group: String,
        state: ConsumerGroupState,
    },
    /// A consumer group's epochs, subscribed topics and assignor after a change.
    ConsumerGroupMeta {
        group: String,
        group_epoch: i32,
        assignment_epoch: i32,
        topics_seen: BTreeMap<String, (String, i32)>,
        assignor: String,
    },
    /// A consumer group member after a change (None: it left).
    ConsumerMember {
        group: String,
        member_id: String,
        member: Option<ConsumerMember>,
    },
    /// A member's target assignment after a change (None: it has none any more).
    ConsumerTarget {
        group: String,
        member_id: String,
        target: Option<Partitions>,
    },
}

/// The offsets one producer's unfinished transaction committed to a group.
#[derive(Debug, Clone, Default)]
struct Pending {
    /// The producer epoch of the transaction.
    epoch: i16,
    offsets: BTreeMap<(String, i32), Committed>,
}

impl Pending {
    /// Adds offsets committed at `epoch`; a newer epoch's transaction replaces an older one's.
    fn add(&mut self, epoch: i16, offsets: impl IntoIterator<Item = ((String, i32), Committed)>) {
        if epoch > self.epoch {
            self.offsets.clear();
            self.epoch = epoch;
        }
        self.offsets.extend(offsets);
    }
}

/// A member of a group.
#[derive(Debug, Clone)]
pub struct Member {
    /// The client id.
    pub client_id: String,
    /// The client's host.
    pub client_host: String,
    /// The protocols it supports, with their metadata, in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// Its assignment in the current generation.
    pub assignment: Bytes,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    last_seen: Instant,
    joined_generation: Option<i32>,
}

/// One group.
#[derive(Debug, Clone)]
pub struct Group {
    /// The state.
    pub state: GroupState,
    /// The generation.
    pub generation: i32,
    /// The protocol type ("consumer").
    pub protocol_type: String,
    /// The chosen protocol (assignor).
    pub protocol: Option<String>,
    /// The leader's member id.
    pub leader: Option<String>,
    /// The members.
    pub members: BTreeMap<String, Member>,
    /// Committed offsets.
    pub offsets: BTreeMap<(String, i32), Committed>,
    /// Offsets of unfinished transactions, by producer id.
    pending: BTreeMap<i64, Pending>,
    /// The consumer-protocol group, when the group is one.
    pub consumer: Option<ConsumerGroup>,
    rebalance_deadline: Option<Instant>,
    /// The write sequence of the commit each offset came from ([`Staged`]): an older commit
    /// replicated after a newer one does not replace it.
    commit_seq: BTreeMap<(String, i32), u64>,
}

/// A commit written to the group's partition of `__consumer_offsets` but not applied yet: it
/// becomes the group's offsets once its partition's in-sync replicas hold it
/// ([`GroupCoordinator::apply_staged`]), as Kafka's coordinator applies a commit only once its
/// append succeeded.
#[derive(Debug)]
#[must_use = "a staged commit is applied once replicated, or dropped"]
pub struct Staged {
    group: String,
    offsets: Vec<(String, i32, Committed)>,
    seq: u64,
}

impl Group {
    fn new() -> Group {
        Group {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            offsets: BTreeMap::new(),
            pending: BTreeMap::new(),
            consumer: None,
            rebalance_deadline: None,
            commit_seq: BTreeMap::new(),
        }
    }

    /// Whether consumer-protocol members are in the group.
    fn has_consumer_members(&self) -> bool {
        self.consumer
            .as_ref()
            .is_some_and(|c| !c.state.members.is_empty())
    }

    /// The type ListGroups reports: "consumer" for a consumer-protocol group, else "classic".
    pub fn group_type(&self) -> &'static str {
        if self.consumer.is_some() && self.members.is_empty() {
            "consumer"
        } else {
            "classic"
        }
    }

    /// The state ListGroups and describes report.
    pub fn state_name(&self) -> &'static str {
        match &self.consumer {
            Some(c) if self.members.is_empty() => c.state_name(),
            _ => self.state.name(),
        }
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            self.state = GroupState::PreparingRebalance;
            let longest = self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or_default();
            self.rebalance_deadline = Some(now + longest);
            for m in self.members.values_mut() {
                m.joined_generation = None;
            }
        }
    }

    /// Drops members whose session expired; a loss starts a rebalance. A member that rejoined
    /// the rebalance under way is waiting in its JoinGroup and is alive, as Kafka keeps members
    /// with a pending join alive; one that has not rejoined is dropped once its session passes,
    /// so a member that left without a word holds the rebalance for its session timeout, not
    /// for the longest rebalance timeout a client asked for.
    fn expire(&mut self, now: Instant) {
        let before = self.members.len();
        let rebalancing = (self.state == GroupState::PreparingRebalance).then_some(self.generation);
        for m in self.members.values_mut() {
            if rebalancing.is_some() && m.joined_generation == rebalancing {
                m.last_seen = now;
            }
        }
        self.members
            .retain(|_, m| now.saturating_duration_since(m.last_seen) <= m.session_timeout);
        if self.members.len() != before {
            self.after_departure(now);
        }
    }

    fn after_departure(&mut self, now: Instant) {
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.protocol = None;
            self.generation += 1;
        } else {
            self.prepare_rebalance(now);
        }
    }

    /// Completes the join phase when every member rejoined or the deadline passed.
    fn maybe_complete_join(&mut self, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self
            .members
            .values()
            .all(|m| m.joined_generation == Some(self.generation));
        let expired = self.rebalance_deadline.is_some_and(|d| now >= d);
        if !(all_joined || expired) {
            return;
        }
        let generation = self.generation;
        self.members
            .retain(|_, m| m.joined_generation == Some(generation));
        if self.members.is_empty() {
            self.after_departure(now);
            return;
        }
        // The first protocol of the first member that every member supports.
        let first = self
            .members
            .values()
            .next()
            .map(|m| m.protocols.clone())
            .unwrap_or_default();
        self.protocol = first.iter().map(|(name, _)| name.clone()).find(|name| {
            self.members
                .values()
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        });
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.generation += 1;
        for m in self.members.values_mut() {
            m.joined_generation = Some(self.generation);
            m.assignment = Bytes::new();
        }
        self.state = GroupState::CompletingRebalance;
        self.rebalance_deadline = None;
    }
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, Default)]
pub struct JoinResult {
    /// Kafka error code.
    pub error: i16,
    /// The new generation.
    pub generation: i32,
    /// The chosen protocol.
    pub protocol: Option<String>,
    /// The protocol type.
    pub protocol_type: Option<String>,
    /// The leader.
    pub leader: String,
    /// The member's id.
    pub member_id: String,
    /// For the leader: every member's metadata for the chosen protocol.
    pub members: Vec<(String, Bytes)>,
}

/// A JoinGroup's arguments.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// The group.
    pub group: String,
    /// The member id ("" to get one).
    pub member_id: String,
    /// Whether the client understands MEMBER_ID_REQUIRED (JoinGroup v4+).
    pub require_known_member_id: bool,
    /// The client id.
    pub client_id: String,
    /// The client's host.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout: Duration,
    /// Rebalance timeout.
    pub rebalance_timeout: Duration,
    /// The protocol type.
    pub protocol_type: String,
    /// Supported protocols with metadata.
    pub protocols: Vec<(String, Bytes)>,
}

/// The coordinator of every group.
#[derive(Debug)]
pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, Group>>,
    journal: Journal<OffsetRecord>,
    /// The log's length after its last compaction: it is compacted again at twice that (and at
    /// least `compact_min_bytes`), so it stays within a few times the live state.
    compacted_len: std::sync::atomic::AtomicU64,
    compact_min_bytes: u64,
    consumer_settings: ConsumerSettings,
    changed: Notify,
    next_member: std::sync::atomic::AtomicU64,
    /// The sequence of the next staged commit.
    next_seq: std::sync::atomic::AtomicU64,
}

/// The offsets log is never compacted below this size.
const COMPACT_MIN_BYTES: u64 = 16 * 1024 * 1024;

impl GroupCoordinator {
    /// Opens the offsets log under `dir` and replays it; consumer groups run with Kafka's
    /// default settings until [`GroupCoordinator::with_consumer_settings`].
    pub fn open(dir: &Path) -> Result<GroupCoordinator, StorageError> {
        Self::open_compacting_at(dir, COMPACT_MIN_BYTES)
    }

    /// The `group.consumer.*` settings consumer groups run with.
    pub fn with_consumer_settings(mut self, settings: ConsumerSettings) -> GroupCoordinator {
        self.consumer_settings = settings;
        self
    }

    /// [`GroupCoordinator::open`], compacting the log from `compact_min_bytes` on.
    pub fn open_compacting_at(
        dir: &Path,
        compact_min_bytes: u64,
    ) -> Result<GroupCoordinator, StorageError> {
        let log_path = dir.join("offsets.log");
        let (log, records) = RecordLog::open(&log_path)?;
        let mut groups: HashMap<String, Group> = HashMap::new();
        for record in records {
            apply(&mut groups, record);
        }
        // Unknown until the first compaction: a log that grew large before this start is
        // compacted at its first append.
        let compacted_len = std::sync::atomic::AtomicU64::new(0);
        Ok(GroupCoordinator {
            groups: Mutex::new(groups),
            journal: Journal::Local {
                log: Mutex::new(log),
                path: log_path,
            },
            compacted_len,
            compact_min_bytes,
            consumer_settings: ConsumerSettings::default(),
            changed: Notify::new(),
            next_member: std::sync::atomic::AtomicU64::new(1),
            next_seq: std::sync::atomic::AtomicU64::new(1),
        })
    }

    /// A coordinator of groups kept in the partitions of `__consumer_offsets` (a multi-process
    /// cluster: [`journal`]): it serves the groups of a partition once the broker loads it.
    pub fn on_partitions(topic: Arc<dyn OffsetsPartitions>) -> GroupCoordinator {
        GroupCoordinator {
            groups: Mutex::new(HashMap::new()),
            journal: Journal::Partitions {
                topic,
                loaded: Mutex::new(BTreeSet::new()),
            },
            compacted_len: std::sync::atomic::AtomicU64::new(0),
            compact_min_bytes: COMPACT_MIN_BYTES,
            consumer_settings: ConsumerSettings::default(),
            changed: Notify::new(),
            next_member: std::sync::atomic::AtomicU64::new(1),
            next_seq: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// This broker became the leader of `partition` of `__consumer_offsets`, whose records
    /// are `records`: its groups are replaced by their replay, and served from now on.
    pub fn load_partition(&self, partition: i32, records: Vec<OffsetRecord>) {
        self.with_groups(|groups| {
            groups.retain(|id, _| self.journal.partition_of(id) != Some(partition));
            let mut loaded = HashMap::new();
            for record in records {
                apply(&mut loaded, record);
            }
            let count = loaded.len();
            groups.extend(loaded);
            if let Journal::Partitions { loaded, .. } = &self.journal {
                loaded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(partition);
            }
            tracing::info!(
                partition,
                groups = count,
                "loaded a __consumer_offsets partition"
            );
        });
        self.changed.notify_waiters();
    }

    /// This broker no longer leads `partition` of `__consumer_offsets`: its groups are
    /// dropped (the next leader loads them) and their writes refused.
    pub fn unload_partition(&self, partition: i32) {
        self.with_groups(|groups| {
            if let Journal::Partitions { loaded, .. } = &self.journal {
                loaded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&partition);
            }
            groups.retain(|id, _| self.journal.partition_of(id) != Some(partition));
        });
        self.changed.notify_waiters();
    }

    /// Whether this coordinator serves the groups of `partition` of `__consumer_offsets`
    /// (always, when every group is in a local log).
    pub fn serves(&self, partition: i32) -> bool {
        self.journal.serves(partition)
    }

    /// The group records of one batch of a `__consumer_offsets` partition.
    pub fn batch_records(batch: &kmirror_protocol::batch::RecordBatch) -> Vec<OffsetRecord> {
        journal::batch_records(batch)
    }

    fn with_groups<T>(&self, f: impl FnOnce(&mut HashMap<String, Group>) -> T) -> T {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut groups)
    }

    /// JoinGroup: waits until the rebalance completes (or the member must retry).
    pub async fn join(&self, request: JoinRequest) -> JoinResult {
        let now = Instant::now();
        let mut member_id = request.member_id.clone();
        if member_id.is_empty() {
            let n = self
                .next_member
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            member_id = format!(
                "{}-{n}-{}",
                request.client_id,
                uuid::Uuid::new_v4().simple()
            );
            if request.require_known_member_id {
                return JoinResult {
                    error: ErrorCode::MEMBER_ID_REQUIRED.0,
                    member_id,
                    ..JoinResult::default()
                };
            }
        }
        let joined_at = self.with_groups(|groups| {
            let group = groups
                .entry(request.group.clone())
                .or_insert_with(Group::new);
            group.expire(now);
            if group.has_consumer_members() {
                return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL.0);
            }
            if !group.members.is_empty() && group.protocol_type != request.protocol_type {
                return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL.0);
            }
            if !group.members.is_empty()
                && !request.protocols.iter().any(|(n, _)| {
                    group
                        .members
                        .values()
                        .all(|m| m.protocols.iter().any(|(p, _)| p == n))
                })
            {
                return Err(ErrorCode::INCONSISTENT_GROUP_PROTOCOL.0);
            }
            group.protocol_type = request.protocol_type.clone();
            // An empty consumer-protocol group becomes a classic one.
            group.consumer = None;
            let member = group
                .members
                .entry(member_id.clone())
                .or_insert_with(|| Member {
                    client_id: request.client_id.clone(),
                    client_host: request.client_host.clone(),
                    protocols: Vec::new(),
                    assignment: Bytes::new(),
                    session_timeout: request.session_timeout,
                    rebalance_timeout: request.rebalance_timeout,
                    last_seen: now,
                    joined_generation: None,
                });
            member.protocols = request.protocols.clone();
            member.session_timeout = request.session_timeout;
            member.rebalance_timeout = request.rebalance_timeout;
            member.last_seen = now;
            group.prepare_rebalance(now);
            let generation = group.generation;
            if let Some(m) = group.members.get_mut(&member_id) {
                m.joined_generation = Some(generation);
            }
            group.maybe_complete_join(now);
            Ok(generation)
        });
        let joined_at = match joined_at {
            Ok(g) => g,
            Err(error) => {
                return JoinResult {
                    error,
                    member_id,
                    ..JoinResult::default()
                };
            }
        };
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (result, deadline) = self.with_groups(|groups| {
                let Some(group) = groups.get_mut(&request.group) else {
                    return (Some(ErrorCode::UNKNOWN_MEMBER_ID.0), None);
                };
                let now = Instant::now();
                group.expire(now);
                group.maybe_complete_join(now);
                if group.generation > joined_at {
                    return (None, None);
                }
                if !group.members.contains_key(&member_id) {
                    return (Some(ErrorCode::UNKNOWN_MEMBER_ID.0), None);
                }
                (Some(0), group.rebalance_deadline)
            });
            match result {
                None => break,
                Some(0) => {}
                Some(error) => {
                    return JoinResult {
                        error,
                        member_id,
                        ..JoinResult::default()
                    };
                }
            }
            // Woken by any change, and at least every half second to expire members that
            // left without a word.
            let poll = Instant::now() + JOIN_EXPIRY_CHECK;
            let wait = deadline.map_or(poll, |d| d.min(poll));
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wait) => {}
            }
        }
        self.changed.notify_waiters();
        self.with_groups(|groups| {
            let Some(group) = groups.get(&request.group) else {
                return JoinResult {
                    error: ErrorCode::UNKNOWN_MEMBER_ID.0,
                    member_id: member_id.clone(),
                    ..JoinResult::default()
                };
            };
            if !group.members.contains_key(&member_id) {
                return JoinResult {
                    error: ErrorCode::UNKNOWN_MEMBER_ID.0,
                    member_id: member_id.clone(),
                    ..JoinResult::default()
                };
            }
            let leader = group.leader.clone().unwrap_or_default();
            let protocol = group.protocol.clone();
            let members = if leader == member_id {
                group
                    .members
                    .iter()
                    .map(|(id, m)| {
                        let metadata = m
                            .protocols
                            .iter()
                            .find(|(n, _)| Some(n) == protocol.as_ref())
                            .map(|(_, md)| md.clone())
                            .unwrap_or_default();
                        (id.clone(), metadata)
                    })
                    .collect()
            } else {
                Vec::new()
            };
            JoinResult {
                error: 0,
                generation: group.generation,
                protocol,
                protocol_type: Some(group.protocol_type.clone()),
                leader,
                member_id: member_id.clone(),
                members,
            }
        })
    }

    /// SyncGroup: the leader hands out assignments; everyone waits for theirs.
    pub async fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        timeout: Duration,
    ) -> (i16, Bytes) {
        let deadline = Instant::now() + timeout;
        let check = self.with_groups(|groups| {
            let Some(group) = groups.get_mut(group_id) else {
                return Err(ErrorCode::UNKNOWN_MEMBER_ID.0);
            };
            let Some(member) = group.members.get_mut(member_id) else {
                return Err(ErrorCode::UNKNOWN_MEMBER_ID.0);
            };
            member.last_seen = Instant::now();
            if generation != group.generation {
                return Err(ErrorCode::ILLEGAL_GENERATION.0);
            }
            if group.state == GroupState::PreparingRebalance {
                return Err(ErrorCode::REBALANCE_IN_PROGRESS.0);
            }
            if group.leader.as_deref() == Some(member_id)
                && group.state == GroupState::CompletingRebalance
            {
                for (id, assignment) in assignments {
                    if let Some(m) = group.members.get_mut(&id) {
                        m.assignment = assignment;
                    }
                }
                group.state = GroupState::Stable;
            }
            Ok(())
        });
        if let Err(error) = check {
            return (error, Bytes::new());
        }
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let state = self.with_groups(|groups| {
                let group = groups.get(group_id)?;
                if group.generation != generation || !group.members.contains_key(member_id) {
                    return Some(Err(ErrorCode::REBALANCE_IN_PROGRESS.0));
                }
                match group.state {
                    GroupState::Stable => Some(Ok(group.members[member_id].assignment.clone())),
                    GroupState::CompletingRebalance => None,
                    _ => Some(Err(ErrorCode::REBALANCE_IN_PROGRESS.0)),
                }
            });
            match state {
                Some(Ok(assignment)) => return (0, assignment),
                Some(Err(error)) => return (error, Bytes::new()),
                None if Instant::now() >= deadline => {
                    return (ErrorCode::REBALANCE_IN_PROGRESS.0, Bytes::new());
                }
                None => {}
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// How long a SyncGroup of this member may wait for the leader's assignment.
    pub fn rebalance_timeout(&self, group_id: &str, member_id: &str) -> Duration {
        self.with_groups(|groups| {
            groups
                .get(group_id)
                .and_then(|g| g.members.get(member_id))
                .map_or(Duration::ZERO, |m| m.rebalance_timeout)
        })
    }

    /// Heartbeat.
    pub fn heartbeat(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        let now = Instant::now();
        let error = self.with_groups(|groups| {
            let Some(group) = groups.get_mut(group_id) else {
                return ErrorCode::UNKNOWN_MEMBER_ID.0;
            };
            group.expire(now);
            let Some(member) = group.members.get_mut(member_id) else {
                return ErrorCode::UNKNOWN_MEMBER_ID.0;
            };
            member.last_seen = now;
            if generation != group.generation {
                return ErrorCode::ILLEGAL_GENERATION.0;
            }
            if group.state == GroupState::PreparingRebalance {
                return ErrorCode::REBALANCE_IN_PROGRESS.0;
            }
            group.maybe_complete_join(now);
            0
        });
        self.changed.notify_waiters();
        error
    }

    /// LeaveGroup for these members; returns each one's error.
    pub fn leave(&self, group_id: &str, members: &[String]) -> Vec<i16> {
        let now = Instant::now();
        let errors = self.with_groups(|groups| {
            let Some(group) = groups.get_mut(group_id) else {
                return vec![ErrorCode::UNKNOWN_MEMBER_ID.0; members.len()];
            };
            let errors = members
                .iter()
                .map(|m| {
                    if group.members.remove(m).is_some() {
                        0
                    } else {
                        ErrorCode::UNKNOWN_MEMBER_ID.0
                    }
                })
                .collect();
            group.after_departure(now);
            group.maybe_complete_join(now);
            errors
        });
        self.changed.notify_waiters();
        errors
    }

    /// OffsetCommit: `generation` -1 with an empty member id commits for an empty group (admin
    /// tools); otherwise the member must be in the current generation.
    pub fn commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Vec<i16> {
        let check = self.check_committer(group_id, generation, member_id);
        if check != 0 {
            return vec![check; offsets.len()];
        }
        self.write_offsets(group_id, offsets)
    }

    /// [`GroupCoordinator::commit`] for a group kept in `__consumer_offsets`: the offsets are
    /// written, and applied by [`GroupCoordinator::apply_staged`] once replicated (`None`: a
    /// local log's commit, applied at once, or a refused one).
    pub fn commit_staged(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> (Vec<i16>, Option<Staged>) {
        if matches!(self.journal, Journal::Local { .. }) {
            return (self.commit(group_id, generation, member_id, offsets), None);
        }
        let check = self.check_committer(group_id, generation, member_id);
        if check != 0 {
            return (vec![check; offsets.len()], None);
        }
        let records = commit_records(group_id, &offsets);
        let count = offsets.len();
        let written = self.with_groups(|_| {
            self.journal.append(group_id, &records)?;
            // Under the groups' lock: sequences follow the log's order.
            Ok::<u64, WriteError>(
                self.next_seq
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            )
        });
        match written {
            Ok(seq) => (
                vec![0; count],
                Some(Staged {
                    group: group_id.to_string(),
                    offsets,
                    seq,
                }),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "committing offsets");
                (vec![write_error_code(&e); count], None)
            }
        }
    }

    /// A staged commit's partition replicas hold it: its offsets become the group's, unless
    /// a later commit of the same partition already did, or the group's partition moved away
    /// meanwhile (its next leader replays the commit from the log).
    pub fn apply_staged(&self, staged: Staged) {
        let Staged {
            group,
            offsets,
            seq,
        } = staged;
        self.with_groups(|groups| {
            if self
                .journal
                .partition_of(&group)
                .is_some_and(|p| !self.journal.serves(p))
            {
                return;
            }
            let entry = groups.entry(group).or_insert_with(Group::new);
            for (topic, partition, committed) in offsets {
                let key = (topic, partition);
                if entry
                    .commit_seq
                    .get(&key)
                    .is_none_or(|applied| *applied < seq)
                {
                    entry.commit_seq.insert(key.clone(), seq);
                    entry.offsets.insert(key, committed);
                }
            }
        });
    }

    /// Whether `member_id` at `generation` may commit the group's offsets (0) or the error.
    fn check_committer(&self, group_id: &str, generation: i32, member_id: &str) -> i16 {
        self.with_groups(|groups| {
            let group = groups
                .entry(group_id.to_string())
                .or_insert_with(Group::new);
            self.expire_consumer_group(group_id, group, Instant::now());
            if let Some(consumer) = group.consumer.as_ref().filter(|_| group.members.is_empty()) {
                return match consumer.validate_offsets_access(member_id, generation) {
                    Ok(()) => 0,
                    Err(code) => code,
                };
            }
            if generation < 0 && member_id.is_empty() {
                return if group.members.is_empty() {
                    0
                } else {
                    ErrorCode::UNKNOWN_MEMBER_ID.0
                };
            }
            match group.members.get_mut(member_id) {
                None => ErrorCode::UNKNOWN_MEMBER_ID.0,
                Some(_) if generation != group.generation => ErrorCode::ILLEGAL_GENERATION.0,
                Some(m) => {
                    m.last_seen = Instant::now();
                    0
                }
            }
        })
    }

    /// TxnOffsetCommit (the transaction coordinator confirmed the transaction): the offsets
    /// wait, durably, for the marker of the transaction of `producer` (id, epoch). A member id
    /// must be current at `generation`, as for OffsetCommit; without one they are taken
    /// whatever the membership (producers before KIP-447).
    pub fn commit_pending(
        &self,
        group_id: &str,
        producer: (i64, i16),
        generation: i32,
        member_id: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Vec<i16> {
        if !member_id.is_empty() {
            let check = self.check_committer(group_id, generation, member_id);
            if check != 0 {
                return vec![check; offsets.len()];
            }
        }
        let count = offsets.len();
        let records: Vec<OffsetRecord> = offsets
            .iter()
            .map(|(topic, partition, committed)| OffsetRecord::TxnCommit {
                group: group_id.to_string(),
                producer_id: producer.0,
                producer_epoch: producer.1,
                topic: topic.clone(),
                partition: *partition,
                committed: committed.clone(),
            })
            .collect();
        let written = self.with_groups(|groups| {
            self.journal.append(group_id, &records)?;
            groups
                .entry(group_id.to_string())
                .or_insert_with(Group::new)
                .pending
                .entry(producer.0)
                .or_default()
                .add(
                    producer.1,
                    offsets
                        .into_iter()
                        .map(|(topic, partition, committed)| ((topic, partition), committed)),
                );
            Ok::<(), WriteError>(())
        });
        match written {
            Ok(()) => {
                self.compact_if_large();
                vec![0; count]
            }
            Err(e) => {
                tracing::warn!(error = %e, "committing transactional offsets");
                vec![write_error_code(&e); count]
            }
        }
    }

    /// The marker of the transaction of `producer` (id, epoch): its pending offsets, in every
    /// group of this coordinator, are committed (whatever the membership now, as in Kafka) or
    /// dropped, durably. A marker with nothing pending (a retry) changes nothing, and one older
    /// than the pending offsets' epoch leaves them.
    pub fn end_transaction(
        &self,
        producer: (i64, i16),
        commit: bool,
        partition: Option<i32>,
    ) -> Result<(), WriteError> {
        self.with_groups(|groups| {
            // A partition not served here (moved, or loading) ends nothing: refused, so the
            // marker is sent again rather than lost.
            if let Some(p) = partition.filter(|p| !self.journal.serves(*p)) {
                return Err(WriteError::NotLed(format!(
                    "__consumer_offsets partition {p} is not served here"
                )));
            }
            // The groups of the marker's partition of `__consumer_offsets` (every group when
            // it names none, or in a local log).
            let of_partition = |id: &str| {
                partition.is_none()
                    || self
                        .journal
                        .partition_of(id)
                        .is_none_or(|p| Some(p) == partition)
            };
            let due: Vec<String> = groups
                .iter()
                .filter(|(id, g)| {
                    of_partition(id)
                        && g.pending
                            .get(&producer.0)
                            .is_some_and(|p| p.epoch <= producer.1)
                })
                .map(|(id, _)| id.clone())
                .collect();
            if due.is_empty() {
                return Ok(());
            }
            self.journal.append_for(
                due.iter().map(String::as_str),
                &OffsetRecord::TxnEnd {
                    producer_id: producer.0,
                    producer_epoch: producer.1,
                    commit,
                },
            )?;
            let mut ending: HashMap<String, Group> = due
                .iter()
                .filter_map(|id| groups.remove_entry(id))
                .collect();
            end_pending(&mut ending, producer, commit);
            groups.extend(ending);
            Ok::<(), WriteError>(())
        })?;
        self.changed.notify_waiters();
        self.compact_if_large();
        Ok(())
    }

    /// Whether an unfinished transaction holds an offset of `group` for the partition
    /// (OffsetFetch with RequireStable).
    pub fn has_pending(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.with_groups(|groups| {
            groups
                .get(group_id)
                .is_some_and(|g| g.pending.values().any(|p| p.offsets.contains_key(&key)))
        })
    }

    fn write_offsets(&self, group_id: &str, offsets: Vec<(String, i32, Committed)>) -> Vec<i16> {
        let count = offsets.len();
        match self.write_offsets_durably(group_id, offsets) {
            Ok(()) => vec![0; count],
            Err(e) => {
                tracing::warn!(error = %e, "committing offsets");
                vec![write_error_code(&e); count]
            }
        }
    }

    /// Makes committed offsets durable (one write, one fsync), then current; under the
    /// groups' lock, so a compaction sees either neither or both.
    fn write_offsets_durably(
        &self,
        group_id: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Result<(), WriteError> {
        let records = commit_records(group_id, &offsets);
        self.with_groups(|groups| {
            self.journal.append(group_id, &records)?;
            let group = groups
                .entry(group_id.to_string())
                .or_insert_with(Group::new);
            for (topic, partition, committed) in offsets {
                group.offsets.insert((topic, partition), committed);
            }
            Ok::<(), WriteError>(())
        })?;
        self.compact_if_large();
        Ok(())
    }

    /// The committed offsets of a group (all of them when `partitions` is None).
    pub fn committed(&self, group_id: &str) -> BTreeMap<(String, i32), Committed> {
        self.with_groups(|groups| {
            groups
                .get(group_id)
                .map(|g| g.offsets.clone())
                .unwrap_or_default()
        })
    }

    /// A snapshot of a group.
    pub fn describe(&self, group_id: &str) -> Option<Group> {
        self.with_groups(|groups| {
            let group = groups.get_mut(group_id)?;
            group.expire(Instant::now());
            Some(group.clone())
        })
    }

    /// The state ListGroups reports for one group (members expired first), if it exists.
    pub fn state_of(&self, group_id: &str) -> Option<&'static str> {
        self.with_groups(|groups| {
            let group = groups.get_mut(group_id)?;
            group.expire(Instant::now());
            Some(group.state_name())
        })
    }

    /// Every group, by id.
    pub fn list(&self) -> Vec<GroupListing> {
        let now = Instant::now();
        let mut out: Vec<GroupListing> = self.with_groups(|groups| {
            groups
                .iter_mut()
                .map(|(id, g)| {
                    g.expire(now);
                    GroupListing {
                        group_id: id.clone(),
                        state: g.state_name(),
                        protocol_type: if g.group_type() == "consumer" {
                            "consumer".to_string()
                        } else {
                            g.protocol_type.clone()
                        },
                        group_type: g.group_type(),
                    }
                })
                .collect()
        });
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// ConsumerGroupHeartbeat: the group's and the member's transition, made durable before
    /// the answer when anything changed.
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        heartbeat: Heartbeat,
        topics: &TopicsView,
    ) -> Result<HeartbeatAnswer, (i16, String)> {
        let now = Instant::now();
        let settings = &self.consumer_settings;
        let answer = self.with_groups(|groups| {
            let group = groups
                .entry(group_id.to_string())
                .or_insert_with(Group::new);
            group.expire(now);
            if !group.members.is_empty() {
                return Err((
                    ErrorCode::GROUP_ID_NOT_FOUND.0,
                    format!("Group {group_id} is not a consumer group"),
                ));
            }
            let consumer = group.consumer.get_or_insert_with(ConsumerGroup::default);
            let before = consumer.state.clone();
            let answer = consumer
                .heartbeat(heartbeat, topics, settings, now)
                .map_err(|e: HeartbeatError| (e.code(), e.to_string()));
            self.persist_consumer(group_id, consumer, before)?;
            answer
        });
        self.compact_if_large();
        answer
    }

    /// The heartbeat interval consumer-protocol members are told.
    pub fn consumer_heartbeat_interval_ms(&self) -> i32 {
        self.consumer_settings.heartbeat_interval_ms
    }

    /// Writes what changed in a consumer group (its epochs and topics, each changed member,
    /// each changed target); puts the old state back when the log cannot be written (the
    /// client retries).
    fn persist_consumer(
        &self,
        group_id: &str,
        consumer: &mut ConsumerGroup,
        before: ConsumerGroupState,
    ) -> Result<(), (i16, String)> {
        let records = consumer_changes(group_id, &before, &consumer.state);
        if records.is_empty() {
            return Ok(());
        }
        self.journal.append(group_id, &records).map_err(|e| {
            tracing::warn!(error = %e, group = group_id, "writing a consumer group");
            consumer.state = before;
            let code = match e {
                WriteError::NotLed(_) => ErrorCode::NOT_COORDINATOR.0,
                WriteError::Storage(_) | WriteError::Encode(_) => {
                    ErrorCode::COORDINATOR_NOT_AVAILABLE.0
                }
            };
            (code, format!("the group could not be written: {e}"))
        })
    }

    /// Expires the consumer-protocol members of every group whose session passed (durably);
    /// the broker calls it every second, so a group whose members all went silent empties.
    pub fn expire_consumer_members(&self) {
        let now = Instant::now();
        self.with_groups(|groups| {
            for (id, group) in groups.iter_mut() {
                self.expire_consumer_group(id, group, now);
            }
        });
        self.compact_if_large();
    }

    /// Expires one group's silent consumer-protocol members, durably.
    fn expire_consumer_group(&self, id: &str, group: &mut Group, now: Instant) {
        if let Some(consumer) = group.consumer.as_mut() {
            let before = consumer.state.clone();
            consumer.expire(now, &self.consumer_settings);
            // A failed write keeps the members: the next pass expires them again.
            let _ = self.persist_consumer(id, consumer, before);
        }
    }

    /// Rewrites the offsets log with the live state (every committed offset, every consumer
    /// group) once it has grown to twice its size after the last compaction.
    fn compact_if_large(&self) {
        use std::sync::atomic::Ordering;
        let threshold =
            (2 * self.compacted_len.load(Ordering::Relaxed)).max(self.compact_min_bytes);
        // Partitions of `__consumer_offsets` are not rewritten: a loading leader replays them
        // whole (docs/cluster.md).
        let Journal::Local { log, path } = &self.journal else {
            return;
        };
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() < threshold {
            return;
        }
        let mut live = Vec::new();
        for (id, group) in groups.iter() {
            for ((topic, partition), committed) in &group.offsets {
                live.push(OffsetRecord::Commit {
                    group: id.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    committed: committed.clone(),
                });
            }
            for (producer_id, pending) in &group.pending {
                for ((topic, partition), committed) in &pending.offsets {
                    live.push(OffsetRecord::TxnCommit {
                        group: id.clone(),
                        producer_id: *producer_id,
                        producer_epoch: pending.epoch,
                        topic: topic.clone(),
                        partition: *partition,
                        committed: committed.clone(),
                    });
                }
            }
            if let Some(consumer) = &group.consumer {
                live.push(OffsetRecord::ConsumerGroup {
                    group: id.clone(),
                    state: consumer.state.clone(),
                });
            }
        }
        match RecordLog::rewrite(path, &live) {
            Ok(compacted) => {
                tracing::info!(
                    before = log.len(),
                    after = compacted.len(),
                    "compacted the consumer offsets log"
                );
                self.compacted_len.store(compacted.len(), Ordering::Relaxed);
                *log = compacted;
            }
            Err(e) => {
                // The rename may have happened (a later step failed): appends must go to the
                // file the path now names, so it is opened again; the next append retries.
                tracing::error!(error = %e, "compacting the consumer offsets log");
                match RecordLog::open(path) {
                    Ok((reopened, _)) => *log = reopened,
                    Err(e) => tracing::error!(error = %e, "reopening the consumer offsets log"),
                }
            }
        }
    }

    /// OffsetFetch v9+ with a member: the member and its epoch must be current in a consumer
    /// group (STALE_MEMBER_EPOCH or UNKNOWN_MEMBER_ID otherwise).
    pub fn validate_offset_fetch(&self, group_id: &str, member_id: &str, epoch: i32) -> i16 {
        self.with_groups(
            |groups| match groups.get(group_id).and_then(|g| g.consumer.as_ref()) {
                Some(consumer) => consumer
                    .validate_offsets_access(member_id, epoch)
                    .err()
                    .unwrap_or(0),
                None => 0,
            },
        )
    }

    /// Forgets every group's offsets of a deleted topic, durably (a topic created later under
    /// the same name starts without them).
    pub fn forget_topic(&self, topic: &str) -> Result<(), StorageError> {
        self.with_groups(|groups| {
            let known = groups.values().any(|g| {
                g.offsets.keys().any(|(t, _)| t == topic)
                    || g.pending
                        .values()
                        .any(|p| p.offsets.keys().any(|(t, _)| t == topic))
            });
            if !known {
                return Ok(());
            }
            let ids: Vec<&String> = groups.keys().collect();
            let record = OffsetRecord::TopicDeleted {
                topic: topic.to_string(),
            };
            match self
                .journal
                .append_for(ids.into_iter().map(String::as_str), &record)
            {
                Ok(()) => {}
                // A partition that moved away meanwhile: its next leader forgets the topic
                // when it loads the partition.
                Err(WriteError::NotLed(e)) => {
                    tracing::info!(error = %e, topic, "a deleted topic's offsets are forgotten by the next coordinator")
                }
                Err(WriteError::Storage(e)) => return Err(e),
                Err(WriteError::Encode(e)) => {
                    tracing::error!(error = %e, topic, "forgetting a deleted topic's offsets")
                }
            }
            forget(groups, topic);
            Ok(())
        })
    }

    /// Topics some group has offsets for.
    pub fn topics_with_offsets(&self) -> BTreeSet<String> {
        self.with_groups(|groups| {
            groups
                .values()
                .flat_map(|g| g.offsets.keys().map(|(t, _)| t.clone()))
                .collect()
        })
    }

    /// DeleteGroups for one group: only an empty group goes.
    pub fn delete(&self, group_id: &str) -> i16 {
        self.with_groups(|groups| {
            let Some(group) = groups.get_mut(group_id) else {
                return ErrorCode::GROUP_ID_NOT_FOUND.0;
            };
            self.expire_consumer_group(group_id, group, Instant::now());
            if !group.members.is_empty() || group.has_consumer_members() {
                return ErrorCode::NON_EMPTY_GROUP.0;
            }
            let record = OffsetRecord::DeleteGroup {
                group: group_id.to_string(),
            };
            match self.journal.append(group_id, std::slice::from_ref(&record)) {
                Ok(()) => {
                    groups.remove(group_id);
                    0
                }
                Err(e) => write_error_code(&e),
            }
        })
    }
}

/// The error code a client gets for a record write that did not happen: NOT_COORDINATOR when
/// the group's partition is not served here (it asks FindCoordinator again), else
/// KAFKA_STORAGE_ERROR.
fn write_error_code(e: &WriteError) -> i16 {
    match e {
        WriteError::NotLed(_) => ErrorCode::NOT_COORDINATOR.0,
        WriteError::Storage(_) | WriteError::Encode(_) => ErrorCode::KAFKA_STORAGE_ERROR.0,
    }
}

/// The records of a commit of `offsets` to group `group_id`.
fn commit_records(group_id: &str, offsets: &[(String, i32, Committed)]) -> Vec<OffsetRecord> {
    offsets
        .iter()
        .map(|(topic, partition, committed)| OffsetRecord::Commit {
            group: group_id.to_string(),
            topic: topic.clone(),
            partition: *partition,
            committed: committed.clone(),
        })
        .collect()
}

/// Replays one record into `groups`.
fn apply(groups: &mut HashMap<String, Group>, record: OffsetRecord) {
    match record {
        OffsetRecord::Commit {
            group,
            topic,
            partition,
            committed,
        } => {
            groups
                .entry(group)
                .or_insert_with(Group::new)
                .offsets
                .insert((topic, partition), committed);
        }
        OffsetRecord::TxnCommit {
            group,
            producer_id,
            producer_epoch,
            topic,
            partition,
            committed,
        } => {
            groups
                .entry(group)
                .or_insert_with(Group::new)
                .pending
                .entry(producer_id)
                .or_default()
                .add(producer_epoch, [((topic, partition), committed)]);
        }
        OffsetRecord::TxnEnd {
            producer_id,
            producer_epoch,
            commit,
        } => end_pending(groups, (producer_id, producer_epoch), commit),
        OffsetRecord::DeleteGroup { group } => {
            groups.remove(&group);
        }
        OffsetRecord::TopicDeleted { topic } => forget(groups, &topic),
        OffsetRecord::ConsumerGroup { group, state } => {
            groups.entry(group).or_insert_with(Group::new).consumer =
                Some(ConsumerGroup::from_state(state));
        }
        OffsetRecord::ConsumerGroupMeta {
            group,
            group_epoch,
            assignment_epoch,
            topics_seen,
            assignor,
        } => {
            let state = consumer_state(groups, group);
            state.group_epoch = group_epoch;
            state.assignment_epoch = assignment_epoch;
            state.topics_seen = topics_seen;
            state.assignor = assignor;
        }
        OffsetRecord::ConsumerMember {
            group,
            member_id,
            member,
        } => {
            let state = consumer_state(groups, group);
            match member {
                Some(m) => state.members.insert(member_id, m),
                None => state.members.remove(&member_id),
            };
        }
        OffsetRecord::ConsumerTarget {
            group,
            member_id,
            target,
        } => {
            let state = consumer_state(groups, group);
            match target {
                Some(t) => state.target.insert(member_id, t),
                None => state.target.remove(&member_id),
            };
        }
    }
}

/// The consumer-protocol state of `group`, made when absent (replay).
fn consumer_state(groups: &mut HashMap<String, Group>, group: String) -> &mut ConsumerGroupState {
    &mut groups
        .entry(group)
        .or_insert_with(Group::new)
        .consumer
        .get_or_insert_with(ConsumerGroup::default)
        .state
}

/// The records that take a consumer group from `before` to `after`: its epochs and topics
/// when they changed, each member and each target that changed.
fn consumer_changes(
    group: &str,
    before: &ConsumerGroupState,
    after: &ConsumerGroupState,
) -> Vec<OffsetRecord> {
    let mut records = Vec::new();
    if (
        before.group_epoch,
        before.assignment_epoch,
        &before.topics_seen,
        &before.assignor,
    ) != (
        after.group_epoch,
        after.assignment_epoch,
        &after.topics_seen,
        &after.assignor,
    ) {
        records.push(OffsetRecord::ConsumerGroupMeta {
            group: group.to_string(),
            group_epoch: after.group_epoch,
            assignment_epoch: after.assignment_epoch,
            topics_seen: after.topics_seen.clone(),
            assignor: after.assignor.clone(),
        });
    }
    let ids: BTreeSet<&String> = before.members.keys().chain(after.members.keys()).collect();
    for id in ids {
        if before.members.get(id) != after.members.get(id) {
            records.push(OffsetRecord::ConsumerMember {
                group: group.to_string(),
                member_id: id.clone(),
                member: after.members.get(id).cloned(),
            });
        }
    }
    let ids: BTreeSet<&String> = before.target.keys().chain(after.target.keys()).collect();
    for id in ids {
        if before.target.get(id) != after.target.get(id) {
            records.push(OffsetRecord::ConsumerTarget {
                group: group.to_string(),
                member_id: id.clone(),
                target: after.target.get(id).cloned(),
            });
        }
    }
    records
}

/// One group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// Its state's name (classic: Empty, PreparingRebalance, ...; consumer: Empty,
    /// Assigning, Reconciling, Stable).
    pub state: &'static str,
    /// The protocol type ("consumer" for consumer groups of either protocol).
    pub protocol_type: String,
    /// "classic" or "consumer".
    pub group_type: &'static str,
}

/// Drops `topic`'s offsets from every group.
fn forget(groups: &mut HashMap<String, Group>, topic: &str) {
    for group in groups.values_mut() {
        group.offsets.retain(|(t, _), _| t != topic);
        for pending in group.pending.values_mut() {
            pending.offsets.retain(|(t, _), _| t != topic);
        }
        group
            .pending
            .retain(|_, pending| !pending.offsets.is_empty());
    }
}

/// Applies (`commit`) or drops the pending offsets of `producer` (id, epoch) in every group:
/// those of its epoch or older.
fn end_pending(groups: &mut HashMap<String, Group>, producer: (i64, i16), commit: bool) {
    for group in groups.values_mut() {
        let due = group
            .pending
            .get(&producer.0)
            .is_some_and(|p| p.epoch <= producer.1);
        if let Some(pending) = due.then(|| group.pending.remove(&producer.0)).flatten()
            && commit
        {
            group.offsets.extend(pending.offsets);
        }
    }
}

#[cfg(test)]
mod tests;
