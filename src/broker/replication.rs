//! The broker's side of partition replication (docs/replication.md §4): each open partition's
//! [`Role`], kept in line with the metadata, and the leader's state machine fed with the log's
//! appends, its high watermark written back to the log.
//!
//! Contract: a partition's log lock is taken before its role lock, everywhere; the high
//! watermark of a log this broker leads changes only through [`Broker::committed_append`] and
//! [`Broker::apply_role`] (the leader's state decides it), never by setting it to the log end.

use super::{Broker, Partition, now_ms};
use crate::controller::PartitionMeta;
use crate::controller::partition_change::IsrChange;
use crate::replication::leader::{Effect, LeaderSettings, LogPosition};
use crate::replication::role::Role;
use crate::storage::PartitionLog;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// An ISR change a leader proposes: partition, operation id, the AlterPartition entry.
pub(crate) type Proposal = (String, i32, u64, IsrChange);

/// The ISR changes proposed and not yet sent to the controller.
#[derive(Debug, Default)]
pub(crate) struct Proposals(Mutex<Vec<Proposal>>);

impl Broker {
    /// The leader's settings for a topic with `configs`: its `min.insync.replicas` (else the
    /// broker's) and the broker's `replica.lag.time.max.ms`.
    pub(crate) fn leader_settings(&self, configs: &BTreeMap<String, String>) -> LeaderSettings {
        let min_insync_replicas = configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(self.config.min_insync_replicas.max(1) as usize);
        LeaderSettings {
            replica_lag_time_max_ms: self.config.replica_lag_time_max_ms,
            min_insync_replicas,
        }
    }

    /// Brings partition `name`-`index`'s role in line with its registration `meta`.
    pub(crate) fn apply_role(
        &self,
        name: &str,
        index: i32,
        meta: &PartitionMeta,
        configs: &BTreeMap<String, String>,
        partition: &Partition,
    ) {
        let settings = self.leader_settings(configs);
        let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        let position = LogPosition {
            log_end: log.log_end_offset(),
            high_watermark: log.high_watermark(),
        };
        let mut role = partition.role.lock().unwrap_or_else(|e| e.into_inner());
        let effects = role.next(
            (name, index),
            self.config.node_id,
            meta,
            position,
            settings,
            now_ms(),
        );
        drop(role);
        self.carry_out(name, index, &mut log, effects);
    }

    /// After an append to a log this broker leads (`log` is `partition`'s, locked): the
    /// leader's state learns the new log end and the high watermark follows it.
    pub(crate) fn committed_append(&self, partition: &Partition, log: &mut PartitionLog) {
        let end = log.log_end_offset();
        let effects = match &mut *partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
            Role::Leader(state) => state.appended(end),
            Role::Follower { .. } => Vec::new(),
        };
        self.carry_out(&partition.topic, partition.index, log, effects);
    }

    /// After a truncation of a log this broker leads (a mirror partition cut to the source's
    /// history): the high watermark falls to the log end if it was past it, and followers'
    /// positions are forgotten until they fetch again (docs/replication.md §6).
    pub(crate) fn truncated(&self, partition: &Partition, log: &mut PartitionLog) {
        let end = log.log_end_offset();
        if let Role::Leader(state) = &mut *partition.role.lock().unwrap_or_else(|e| e.into_inner())
        {
            state.truncated(end);
        }
    }

    /// Queues an ISR change for the controller.
    fn propose_isr(&self, name: &str, index: i32, op: u64, change: IsrChange) {
        self.isr_proposals
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), index, op, change));
    }

    /// Carries out the leader's effects on partition `name`-`index` whose log is `log`.
    fn carry_out(&self, name: &str, index: i32, log: &mut PartitionLog, effects: Vec<Effect>) {
        let mut moved = false;
        for effect in effects {
            match effect {
                Effect::HighWatermark(hw) => {
                    log.update_high_watermark(hw);
                    moved = true;
                }
                Effect::ProposeIsr { op, change } => self.propose_isr(name, index, op, change),
            }
        }
        if moved {
            // Fetches and acks=all produces waiting for the high watermark.
            self.appended.notify_waiters();
        }
    }
}
