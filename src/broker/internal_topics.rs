//! The internal topics: the `__*` names the broker owns. `__mirror_state` is a topic of this
//! broker (the engine's coordinator shards, see [`kmirror_actors::engine::state_log`]);
//! `__consumer_offsets`, `__transaction_state` and `__cluster_metadata` are the names of its
//! other state (record logs under `log.dirs`, see [`crate::record_log`]), reserved as Kafka
//! reserves them. In a multi-process cluster `__consumer_offsets` and `__transaction_state`
//! also exist in the metadata, as the placement of the group and transaction coordinators
//! ([`crate::broker::coordinators`]): `__consumer_offsets` with replicated partition logs
//! holding the groups ([`crate::groups::journal`]), `__transaction_state` without logs.
//!
//! Contracts, for clients (the handlers ask here; the broker's own paths do not):
//! - none of these names can be created, by CreateTopics or by a Metadata request's
//!   auto-creation (INVALID_REQUEST), nor deleted (INVALID_REQUEST);
//! - an existing internal topic takes no change of a config that can delete its records
//!   (retention, cleanup policy) and no new partitions (`__mirror_state` routes a mirror to its
//!   shard by the partition count), both POLICY_VIOLATION.
//!
//! Invariant: an internal topic's records are never deleted by retention, whatever the broker's
//! `log.retention.*` defaults or the topic's configs (written before this guard) say. A
//! `__mirror_state` shard is rebuilt by replaying its partition from the start, so a deleted
//! segment would lose mirror partition states; [`log_config`] fixes both retention settings to
//! unlimited.

use crate::broker::coordinators::CoordinatorKind;
use crate::storage::LogConfig;
use kmirror_actors::engine::state_log::MIRROR_STATE_TOPIC;
use std::collections::BTreeMap;

/// The names the broker owns.
const INTERNAL_TOPICS: [&str; 4] = [
    MIRROR_STATE_TOPIC,
    CoordinatorKind::Group.topic(),
    CoordinatorKind::Transaction.topic(),
    "__cluster_metadata",
];

/// Topic configs whose change can delete an internal topic's records.
const STATE_LOSING_KEYS: [&str; 3] = ["retention.ms", "retention.bytes", "cleanup.policy"];

/// Whether `name` is an internal topic.
pub(crate) fn is_internal(name: &str) -> bool {
    INTERNAL_TOPICS.contains(&name)
}

/// Whether the partitions of `name` have logs (`__transaction_state` only places
/// coordinators; `__consumer_offsets` holds the groups in a cluster).
pub(crate) fn has_partition_logs(name: &str) -> bool {
    name != CoordinatorKind::Transaction.topic()
}

/// Why a client may not create `name` (CreateTopics, auto-creation), if it may not.
pub(crate) fn creation_refused(name: &str) -> Option<String> {
    is_internal(name)
        .then(|| format!("Creation of internal topic {name} is prohibited: the broker owns it"))
}

/// Why a client may not delete `name`, if it may not.
pub(crate) fn deletion_refused(name: &str) -> Option<String> {
    is_internal(name)
        .then(|| format!("Deletion of internal topic {name} is prohibited: the broker owns it"))
}

/// Why a client may not add partitions to `name`, if it may not.
pub(crate) fn create_partitions_refused(name: &str) -> Option<String> {
    is_internal(name).then(|| {
        format!(
            "internal topic {name} keeps the partition count the broker gave it (its state is \
             routed by it)"
        )
    })
}

/// Why a client's config change of `name` from `before` to `after` is refused, if it is.
pub(crate) fn config_change_refused(
    name: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Option<String> {
    if !is_internal(name) {
        return None;
    }
    // Removing a value (one set before this guard) only gives the broker's settings back.
    let key = STATE_LOSING_KEYS.iter().find(|key| {
        after
            .get(**key)
            .is_some_and(|v| before.get(**key) != Some(v))
    })?;
    Some(format!(
        "{key} of internal topic {name} is fixed by the broker: its records are never deleted"
    ))
}

/// The log settings of topic `name`: the broker's defaults with the topic's overrides, and for
/// an internal topic unlimited retention by time and size.
pub(crate) fn log_config(
    defaults: &LogConfig,
    name: &str,
    configs: &BTreeMap<String, String>,
) -> LogConfig {
    let mut config = defaults.with_overrides(configs);
    if is_internal(name) {
        config.retention_ms = -1;
        config.retention_bytes = -1;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_topics_keep_their_records_whatever_the_configs_say() {
        let defaults = LogConfig {
            retention_ms: 1000,
            retention_bytes: 1024,
            ..LogConfig::default()
        };
        let configs = BTreeMap::from([
            ("retention.ms".to_string(), "5".to_string()),
            ("segment.bytes".to_string(), "4096".to_string()),
        ]);
        let state = log_config(&defaults, MIRROR_STATE_TOPIC, &configs);
        assert_eq!((state.retention_ms, state.retention_bytes), (-1, -1));
        assert_eq!(state.segment_bytes, 4096, "other settings still apply");
        let other = log_config(&defaults, "orders", &configs);
        assert_eq!((other.retention_ms, other.retention_bytes), (5, 1024));
    }

    #[test]
    fn only_state_losing_changes_of_internal_topics_are_refused() {
        let before = BTreeMap::new();
        let retention = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        let flush = BTreeMap::from([("flush.messages".to_string(), "1".to_string())]);
        assert!(config_change_refused(MIRROR_STATE_TOPIC, &before, &retention).is_some());
        assert!(
            config_change_refused(MIRROR_STATE_TOPIC, &retention, &before).is_none(),
            "removing a value set before the guard is allowed"
        );
        assert!(config_change_refused(MIRROR_STATE_TOPIC, &before, &flush).is_none());
        assert!(config_change_refused("orders", &before, &retention).is_none());
        for name in INTERNAL_TOPICS {
            assert!(creation_refused(name).is_some() && deletion_refused(name).is_some());
        }
        assert!(
            creation_refused("__orders").is_none(),
            "only the broker's own names"
        );
    }
}
