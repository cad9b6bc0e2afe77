//! A partition's leader side of replication (docs/replication.md §4), as a pure state machine:
//! what the leader knows of its followers, the high watermark (HW) it derives from the ISR, the
//! ISR changes it proposes to the controller, and whether an acks=all produce is done.
//!
//! Lifecycle: [`LeaderState::new`] when this broker becomes the partition's leader (at a leader
//! epoch, from its registration); [`LeaderState::follower_fetched`] for each follower fetch,
//! [`LeaderState::appended`] after each local append, [`LeaderState::tick`] periodically,
//! [`LeaderState::registration`] when the metadata's registration changes at the same leader
//! epoch, and [`LeaderState::alter_answered`] with the controller's answer to a proposal. A new
//! leader epoch makes a new state. Time is an input (milliseconds); nothing here does I/O.
//!
//! Invariants:
//! - the HW never falls (except with the log: [`LeaderState::truncated`]), never passes the leader's log end, and rises only to an offset every
//!   member of the maximal ISR (the committed ISR plus a pending expansion) has, and only while
//!   the committed ISR has at least `min.insync.replicas` members or every replica (Kafka's
//!   strict minimum ISR), so each record below it is on that many replicas;
//! - at most one ISR proposal is in flight; its answer carries its operation id, and an answer
//!   to an older proposal changes nothing;
//! - an expansion counts for the HW as soon as it is proposed, a shrink only once committed.

use crate::controller::PartitionMeta;
use crate::controller::partition_change::{IsrChange, IsrState};
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// What the leader knows of one follower (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    /// Its log end offset: the offset it last fetched from (-1: not heard at this epoch).
    log_end: i64,
    /// The last time it was caught up with the leader.
    last_caught_up_ms: i64,
    /// The leader's log end when it last fetched, and when.
    last_fetch_leader_end: i64,
    last_fetch_ms: i64,
    /// The broker epoch it fetched with (-1: not heard).
    broker_epoch: i64,
}

/// The ISR as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Isr {
    /// As the controller recorded it.
    Committed,
    /// A proposal in flight, `change` asking for the ISR `proposed`.
    Pending {
        op: u64,
        proposed: Vec<i32>,
        change: IsrChange,
    },
}

/// A partition's log position, as a new leader starts from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPosition {
    /// Where the log ends.
    pub log_end: i64,
    /// Its high watermark.
    pub high_watermark: i64,
}

/// Settings from the topic's and the broker's configs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderSettings {
    /// `replica.lag.time.max.ms`: a follower not caught up this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `min.insync.replicas`.
    pub min_insync_replicas: usize,
}

/// What the leader does after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The HW rose to this offset: write it to the log and complete waiting requests.
    HighWatermark(i64),
    /// Send this AlterPartition to the controller; answer with [`LeaderState::alter_answered`]
    /// and `op`.
    ProposeIsr { op: u64, change: IsrChange },
}

/// The leader side of one partition at one leader epoch.
#[derive(Debug, Clone)]
pub struct LeaderState {
    topic: String,
    partition: i32,
    node_id: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    recovering: bool,
    /// The committed ISR.
    isr: Vec<i32>,
    pending: Isr,
    followers: BTreeMap<i32, Follower>,
    high_watermark: i64,
    /// The leader's log end when it became leader at this epoch: a follower joins the ISR only
    /// once it has everything before it (it holds this epoch's history).
    epoch_start_offset: i64,
    next_op: u64,
    settings: LeaderSettings,
}

impl LeaderState {
    /// This broker (`node_id`) leads `meta` from now (`now_ms`), its log at `position`.
    /// Followers in the ISR count as caught up now, so none leaves it before it had
    /// `replica.lag.time.max.ms` to fetch.
    pub fn new(
        topic: &str,
        partition: i32,
        node_id: i32,
        meta: &PartitionMeta,
        position: LogPosition,
        settings: LeaderSettings,
        now_ms: i64,
    ) -> LeaderState {
        let LogPosition {
            log_end,
            high_watermark,
        } = position;
        let followers = meta
            .replicas
            .iter()
            // A partition placed before brokers were (ANY_NODE) is this node's alone.
            .filter(|&&r| r != node_id && r >= 0)
            .map(|&r| {
                let in_sync = meta.isr.contains(&r);
                let follower = Follower {
                    log_end: -1,
                    last_caught_up_ms: if in_sync { now_ms } else { 0 },
                    last_fetch_leader_end: -1,
                    last_fetch_ms: 0,
                    broker_epoch: -1,
                };
                (r, follower)
            })
            .collect();
        LeaderState {
            topic: topic.to_string(),
            partition,
            node_id,
            leader_epoch: meta.leader_epoch,
            partition_epoch: meta.partition_epoch,
            recovering: meta.leader_recovery == crate::controller::LeaderRecovery::Recovering,
            isr: meta.isr.clone(),
            pending: Isr::Committed,
            followers,
            high_watermark: high_watermark.min(log_end),
            epoch_start_offset: log_end,
            // Operation ids of different leader epochs never meet.
            next_op: (meta.leader_epoch.max(0) as u64) << 32,
            settings,
        }
    }

    /// What a new leader does first: one elected uncleanly reports that it has recovered
    /// (its log is the partition's now), with itself as the ISR, before any follower joins.
    pub fn start(&mut self) -> Vec<Effect> {
        if self.recovering {
            return self.propose(vec![self.node_id], true);
        }
        Vec::new()
    }

    /// New settings (a topic's or the broker's configs changed).
    pub fn set_settings(&mut self, settings: LeaderSettings) {
        self.settings = settings;
    }

    /// The leader epoch this state leads at.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// How many replicas the partition has, the leader's included.
    pub fn replica_count(&self) -> usize {
        self.followers.len() + 1
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// The committed ISR plus a pending expansion: whose log ends the HW waits for.
    pub fn maximal_isr(&self) -> Vec<i32> {
        match &self.pending {
            Isr::Pending { proposed, .. } => {
                let mut all = self.isr.clone();
                all.extend(proposed.iter().filter(|r| !self.isr.contains(r)));
                all
            }
            Isr::Committed => self.isr.clone(),
        }
    }

    /// `min.insync.replicas`, at most the replicas there are (Kafka's effective minimum), so a
    /// topic asking more than it has still takes writes.
    fn min_insync_replicas(&self) -> usize {
        self.settings.min_insync_replicas.min(self.replica_count())
    }

    /// The size of the ISR that decides acks=all: the maximal ISR (a pending shrink does not
    /// count until committed).
    fn acks_isr_len(&self) -> usize {
        self.maximal_isr().len()
    }

    /// Whether an acks=all produce may append now: refused NOT_ENOUGH_REPLICAS while the ISR
    /// is below `min.insync.replicas`.
    pub fn check_acks_all(&self) -> Result<(), ErrorCode> {
        if self.acks_isr_len() < self.min_insync_replicas() {
            return Err(ErrorCode::NOT_ENOUGH_REPLICAS);
        }
        Ok(())
    }

    /// Whether an acks=all produce whose records end before `required_offset` is done:
    /// `None` while the HW is below it; then NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when
    /// the ISR shrank below `min.insync.replicas` meanwhile.
    pub fn acks_all_done(&self, required_offset: i64) -> Option<ErrorCode> {
        if self.high_watermark < required_offset {
            return None;
        }
        Some(if self.acks_isr_len() < self.min_insync_replicas() {
            ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
        } else {
            ErrorCode::NONE
        })
    }

    /// Follower `replica` (at `broker_epoch`, `eligible` when the metadata has it live and
    /// not shutting down) fetched from `fetch_offset` at `now_ms`, the leader's log ending at
    /// `leader_end`. Its state follows Kafka's `Replica.updateFetchState`: it is caught up
    /// when it fetched at the leader's end, or at least where the leader's log ended at its
    /// previous fetch. `None` when `replica` holds no replica of the partition.
    pub fn follower_fetched(
        &mut self,
        replica: i32,
        broker_epoch: i64,
        fetch_offset: i64,
        now_ms: i64,
        leader_end: i64,
        eligible: bool,
    ) -> Option<Vec<Effect>> {
        let f = self.followers.get_mut(&replica)?;
        if fetch_offset >= leader_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= f.last_fetch_leader_end && f.last_fetch_leader_end >= 0 {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end = fetch_offset;
        f.last_fetch_leader_end = leader_end;
        f.last_fetch_ms = now_ms;
        f.broker_epoch = broker_epoch;
        let mut effects = self.advance(leader_end);
        if eligible && self.may_join(replica) {
            let mut proposed = self.isr.clone();
            proposed.push(replica);
            effects.extend(self.propose(proposed, false));
            // An expansion counts at once.
            effects.extend(self.advance(leader_end));
        }
        Some(effects)
    }

    /// The local log now ends at `leader_end` (an append, or the log opened).
    pub fn appended(&mut self, leader_end: i64) -> Vec<Effect> {
        self.advance(leader_end)
    }

    /// The leader's log was cut to end at `log_end` (a mirror partition following its source's
    /// history): the HW falls with it if it was past, and what the leader knew of followers'
    /// log ends is forgotten, so the HW rises again only on their next fetches.
    pub fn truncated(&mut self, log_end: i64) {
        self.high_watermark = self.high_watermark.min(log_end);
        self.epoch_start_offset = self.epoch_start_offset.min(log_end);
        for f in self.followers.values_mut() {
            f.log_end = -1;
            f.last_fetch_leader_end = -1;
        }
    }

    /// Periodic check (every half `replica.lag.time.max.ms`): ISR members not caught up for
    /// longer than it are proposed out.
    /// A proposal still in flight is sent again (its answer may have been lost); an unclean
    /// leader that has not yet reported its recovery reports it again.
    pub fn tick(&mut self, now_ms: i64, leader_end: i64) -> Vec<Effect> {
        if let Isr::Pending { op, change, .. } = &self.pending {
            return vec![Effect::ProposeIsr {
                op: *op,
                change: change.clone(),
            }];
        }
        if self.recovering {
            return self.propose(vec![self.node_id], true);
        }
        let lag = self.settings.replica_lag_time_max_ms;
        let out_of_sync = |r: &i32| {
            self.followers
                .get(r)
                .is_some_and(|f| f.log_end != leader_end && now_ms - f.last_caught_up_ms > lag)
        };
        if !self.isr.iter().any(out_of_sync) {
            return Vec::new();
        }
        let proposed: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|r| !out_of_sync(r))
            .collect();
        self.propose(proposed, false)
    }

    /// The metadata's registration of the partition changed while this broker still leads it
    /// at the same leader epoch (the controller changed the ISR itself, e.g. when fencing a
    /// follower). A pending proposal made from an older partition epoch is dropped.
    pub fn registration(&mut self, meta: &PartitionMeta, leader_end: i64) -> Vec<Effect> {
        if meta.leader_epoch != self.leader_epoch || meta.partition_epoch <= self.partition_epoch {
            return Vec::new();
        }
        self.partition_epoch = meta.partition_epoch;
        self.isr = meta.isr.clone();
        self.recovering = meta.leader_recovery == crate::controller::LeaderRecovery::Recovering;
        self.pending = Isr::Committed;
        self.advance(leader_end)
    }

    /// The controller answered proposal `op`: the partition's state afterwards, or an error
    /// code. An answer to an older proposal changes nothing. A refusal that says the change
    /// was not applied (INELIGIBLE_REPLICA, INVALID_REQUEST, STALE_BROKER_EPOCH, an unknown
    /// partition) drops the proposal, so a later fetch or tick proposes again; any other error
    /// (a timeout, a controller behind or moved, another change first) may hide an applied
    /// change, so the proposal stays pending, its maximal ISR counted, until the metadata's
    /// registration settles it or a tick sends it again.
    pub fn alter_answered(
        &mut self,
        op: u64,
        answer: Result<IsrState, i16>,
        leader_end: i64,
    ) -> Vec<Effect> {
        if !matches!(&self.pending, Isr::Pending { op: pending, .. } if *pending == op) {
            return Vec::new();
        }
        let not_applied = [
            ErrorCode::INELIGIBLE_REPLICA,
            ErrorCode::INVALID_REQUEST,
            ErrorCode::STALE_BROKER_EPOCH,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ];
        if let Err(code) = answer
            && !not_applied.contains(&ErrorCode(code))
        {
            return Vec::new();
        }
        self.pending = Isr::Committed;
        match answer {
            Ok(state) if state.leader_epoch == self.leader_epoch => {
                if state.partition_epoch > self.partition_epoch {
                    self.partition_epoch = state.partition_epoch;
                    self.isr = state.isr;
                    self.recovering = state.recovering;
                }
                self.advance(leader_end)
            }
            Ok(_) | Err(_) => Vec::new(),
        }
    }

    /// Whether `replica` may join the ISR now: no proposal in flight, not in the ISR, it has
    /// everything up to the HW and this epoch's start.
    fn may_join(&self, replica: i32) -> bool {
        self.pending == Isr::Committed
            && !self.recovering
            && !self.isr.contains(&replica)
            && self.followers.get(&replica).is_some_and(|f| {
                f.log_end >= self.high_watermark && f.log_end >= self.epoch_start_offset
            })
    }

    /// Proposes `proposed` as the ISR (and, with `recovered`, that an unclean leader has
    /// recovered).
    fn propose(&mut self, proposed: Vec<i32>, recovered: bool) -> Vec<Effect> {
        let op = self.next_op;
        self.next_op += 1;
        let new_isr = proposed
            .iter()
            .map(|&r| {
                let epoch = self.followers.get(&r).map_or(-1, |f| f.broker_epoch);
                (r, epoch)
            })
            .collect();
        let change = IsrChange {
            topic: self.topic.clone(),
            partition: self.partition,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr,
            recovered,
        };
        self.pending = Isr::Pending {
            op,
            proposed,
            change: change.clone(),
        };
        vec![Effect::ProposeIsr { op, change }]
    }

    /// Raises the HW to the smallest log end of the maximal ISR, if it rose.
    fn advance(&mut self, leader_end: i64) -> Vec<Effect> {
        // Strict minimum ISR, on the committed ISR (a pending expansion is not yet on record),
        // capped at the replicas there are: a topic asking more than it has would otherwise
        // never show a record.
        if self.isr.len() < self.min_insync_replicas() {
            return Vec::new();
        }
        let isr = self.maximal_isr();
        let lowest = isr
            .iter()
            .filter(|&&r| r != self.node_id)
            .map(|r| self.followers.get(r).map_or(-1, |f| f.log_end))
            .fold(leader_end, i64::min);
        if lowest > self.high_watermark {
            self.high_watermark = lowest;
            return vec![Effect::HighWatermark(lowest)];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
