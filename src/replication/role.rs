//! This broker's part in one partition's replication, as the metadata gives it: the leader
//! (with its [`LeaderState`]) or a follower of a leader at a leader epoch.
//!
//! Contract: [`Role::next`] decides the role after a registration of the partition, keeping
//! the leader's state while the leader epoch stays (the registration's ISR replaces its own)
//! and starting a fresh one when this broker comes to lead or the epoch moves, as Kafka's
//! `Partition.makeLeader` does.

use super::leader::{Effect, LeaderSettings, LeaderState, LogPosition};
use crate::controller::{ANY_NODE, PartitionMeta};

/// What this broker is for a partition it holds a replica of.
#[derive(Debug, Clone)]
pub enum Role {
    /// It leads, at the state's leader epoch.
    Leader(Box<LeaderState>),
    /// It follows `leader` (`NO_LEADER`: none now) at `leader_epoch`.
    Follower { leader: i32, leader_epoch: i32 },
}

impl Role {
    /// A role before the first registration is applied: following nobody.
    pub fn unassigned() -> Role {
        Role::Follower {
            leader: crate::controller::NO_LEADER,
            leader_epoch: -1,
        }
    }

    /// Whether this broker leads at `leader_epoch` (any epoch for `None`).
    pub fn leads(&self, leader_epoch: Option<i32>) -> bool {
        matches!(self, Role::Leader(state) if leader_epoch.is_none_or(|e| e == state.leader_epoch()))
    }

    /// The role after registration `meta` of partition `(topic, partition)` reached node
    /// `node_id` at `now_ms`, and what the leader does about it.
    pub fn next(
        &mut self,
        (topic, partition): (&str, i32),
        node_id: i32,
        meta: &PartitionMeta,
        position: LogPosition,
        settings: LeaderSettings,
        now_ms: i64,
    ) -> Vec<Effect> {
        let leads = meta.leader == node_id || meta.leader == ANY_NODE;
        match self {
            Role::Leader(state) if leads && state.leader_epoch() == meta.leader_epoch => {
                state.set_settings(settings);
                state.registration(meta, position.log_end)
            }
            _ if leads => {
                let mut state =
                    LeaderState::new(topic, partition, node_id, meta, position, settings, now_ms);
                let mut effects = state.start();
                effects.extend(state.appended(position.log_end));
                *self = Role::Leader(Box::new(state));
                effects
            }
            _ => {
                *self = Role::Follower {
                    leader: meta.leader,
                    leader_epoch: meta.leader_epoch,
                };
                Vec::new()
            }
        }
    }
}
