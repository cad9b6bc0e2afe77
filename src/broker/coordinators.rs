//! Which broker coordinates a group or a transactional id (docs/cluster.md).
//!
//! In a multi-process cluster, as in Kafka, a group id hashes to a partition of
//! `__consumer_offsets` and a transactional id to a partition of `__transaction_state`
//! (`abs(Java hashCode) % partitions`); the broker leading that partition is the key's
//! coordinator. The two topics are created through the quorum by the first FindCoordinator
//! that needs one, their partitions spread over the live brokers like any topic's.
//! `__consumer_offsets` has Kafka's three replicas and partition logs holding the groups
//! ([`crate::groups::journal`]): when its leader dies, the new leader loads the partition and
//! coordinates its groups. `__transaction_state` holds no partition logs: each broker keeps
//! the transactions of the partitions it leads in its own record log (`__transaction_state/`),
//! replayed when it starts, so its partitions keep one replica and a leader that never
//! changes; while that leader is fenced its keys have no coordinator
//! (COORDINATOR_NOT_AVAILABLE) and wait for it.
//!
//! A single node, or brokers sharing one controller in one process, keep one coordinator for
//! every key: the lowest node id.

use super::Broker;
use crate::controller::{ControllerError, NO_LEADER};
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// Replicas per partition of `__consumer_offsets`: Kafka's default for
/// `offsets.topic.replication.factor`.
const OFFSETS_REPLICATION_FACTOR: i32 = 3;

/// The two kinds of keys FindCoordinator resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordinatorKind {
    /// A consumer group id.
    Group,
    /// A transactional id.
    Transaction,
}

impl CoordinatorKind {
    /// Replicas per partition of the kind's topic (fewer when fewer brokers are live). A
    /// transaction coordinator's state is in its broker's own record log, so its partition
    /// keeps one replica: a coordinator that moved would not have it.
    fn replication_factor(self, live_brokers: usize) -> i32 {
        match self {
            CoordinatorKind::Group => OFFSETS_REPLICATION_FACTOR.min(live_brokers.max(1) as i32),
            CoordinatorKind::Transaction => 1,
        }
    }

    /// The topic whose partitions place this kind's coordinators.
    pub const fn topic(self) -> &'static str {
        match self {
            CoordinatorKind::Group => "__consumer_offsets",
            CoordinatorKind::Transaction => "__transaction_state",
        }
    }
}

/// The coordinator partition of `key` among `partitions`: Kafka's `abs(key.hashCode()) %
/// partitions`, with Java's hash of the key's UTF-16 code units (so a key lands on the
/// partition it would in Kafka).
pub fn coordinator_partition(key: &str, partitions: i32) -> i32 {
    let hash = key.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    // Kafka's Utils.abs: the one value without a positive counterpart maps to 0.
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

impl Broker {
    /// The node coordinating `key`: `None` while its coordinator partition does not exist yet
    /// or it has no leader or its leader is fenced.
    pub fn coordinator_of(&self, kind: CoordinatorKind, key: &str) -> Option<i32> {
        self.coordinator_placement(kind, key).map(|(_, node)| node)
    }

    /// `key`'s coordinator partition (of the kind's topic) and the node coordinating it.
    pub(crate) fn coordinator_placement(
        &self,
        kind: CoordinatorKind,
        key: &str,
    ) -> Option<(i32, i32)> {
        let partition = self.coordinator_partition_of(kind, key)?;
        if self.quorum.is_none() {
            return Some((partition, self.coordinator_node()));
        }
        let leader = self.leader_of(kind.topic(), partition)?;
        (leader != NO_LEADER && !self.fenced_brokers().contains(&leader))
            .then_some((partition, leader))
    }

    /// `key`'s coordinator partition: among the partitions of the kind's topic in a cluster
    /// (`None` before it exists), else among the configured count.
    pub(crate) fn coordinator_partition_of(&self, kind: CoordinatorKind, key: &str) -> Option<i32> {
        if self.quorum.is_none() {
            return Some(coordinator_partition(key, self.configured_partitions(kind)));
        }
        let count = self.with_controller(|c| {
            c.topics()
                .get(kind.topic())
                .map(|t| t.partitions.len() as i32)
        })?;
        Some(coordinator_partition(key, count))
    }

    /// `offsets.topic.num.partitions` or `transaction.state.log.num.partitions`.
    fn configured_partitions(&self, kind: CoordinatorKind) -> i32 {
        match kind {
            CoordinatorKind::Group => self.config.coordinator_partitions.groups,
            CoordinatorKind::Transaction => self.config.coordinator_partitions.transactions,
        }
    }

    /// Whether this broker coordinates `key` (the group and transaction APIs answer
    /// NOT_COORDINATOR otherwise, and the client asks FindCoordinator again).
    /// A group's coordinator serves it only once it has loaded the group's partition of
    /// `__consumer_offsets` (until then clients are sent to find it again).
    pub fn coordinates(&self, kind: CoordinatorKind, key: &str) -> bool {
        self.coordinator_placement(kind, key)
            .is_some_and(|(partition, node)| {
                node == self.config.node_id
                    && (kind == CoordinatorKind::Transaction || self.groups.serves(partition))
            })
    }

    /// FindCoordinator's answer for `key`: its coordinator, creating the kind's topic through
    /// the quorum first if no broker has yet; else the error code the client gets.
    pub async fn find_coordinator(&self, kind: CoordinatorKind, key: &str) -> Result<i32, i16> {
        if let Some(node) = self.coordinator_of(kind, key) {
            return Ok(node);
        }
        if self.quorum.is_some() && self.topic(kind.topic()).is_none() {
            let partitions = self.configured_partitions(kind);
            let factor = kind.replication_factor(self.live_brokers());
            match self
                .create_topic(kind.topic(), partitions, factor, BTreeMap::new(), None)
                .await
            {
                // Another broker created it first: its placement is the one.
                Ok(_) | Err(ControllerError::TopicExists(_)) => {}
                Err(e) => {
                    tracing::warn!(topic = kind.topic(), error = %e, "creating a coordinator topic");
                }
            }
        }
        self.coordinator_of(kind, key)
            .ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_land_on_the_partitions_kafka_gives_them() {
        // Java: "my-group".hashCode() == -1906497762, taken positive; "".hashCode() == 0.
        assert_eq!(coordinator_partition("my-group", 50), 1_906_497_762 % 50);
        assert_eq!(coordinator_partition("", 50), 0);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: Kafka's abs gives 0.
        assert_eq!(coordinator_partition("polygenelubricants", 50), 0);
        // "zzzzzzzzzzzz".hashCode() == 1097476992 (the multiplications wrap).
        assert_eq!(coordinator_partition("zzzzzzzzzzzz", 7), 1_097_476_992 % 7);
        // UTF-16 code units, not bytes: "é" is one unit (233).
        assert_eq!(coordinator_partition("é", 1000), 233);
    }
}
