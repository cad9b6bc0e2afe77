//! What a client may not do to a mirror topic. A mirror topic is byte-identical to its source
//! until its partitions are STOPPED, and only the mirror RPCs (Start/Stop/Pause/ResumeMirrorTopics)
//! move it between states, so:
//! - `mirror.name` (and what a restart confirmed, [`DISCARD_CONFIRMED`], and a consistent stop's
//!   point in time, [`STOP_CUT_TIMESTAMP`]) is never a client's to
//!   set, change or delete, on any topic: INVALID_CONFIG;
//! - while a mirror topic is *guarded* (`mirror.name` is `<mirror>` or `<mirror>.paused`, or it
//!   is `<mirror>.removed` but a partition is still read-only, i.e. STOPPING), it takes no new
//!   partitions (READ_ONLY_TOPIC: counts follow the source) and no change of a config the
//!   metadata sync copies from the source or that deletes mirrored data: POLICY_VIOLATION;
//! - a mirroring or paused topic cannot be deleted (READ_ONLY_TOPIC): stopping it comes first.
//!
//! Appends are guarded where they happen, by each partition's read-only flag. The host applies
//! these to client requests only; the engine's own changes go around them.

use super::refusal::MirrorError;
use crate::engine::sync_plan::SyncFilters;
use crate::metadata::{DISCARD_CONFIRMED, MIRROR_NAME, STOP_CUT_TIMESTAMP, mirror_of};
use crate::partition::Desired;
use kmirror_protocol::errors::ErrorCode;
use std::collections::BTreeMap;

/// Whether `key` is a topic config only the mirror RPCs set.
pub fn managed_by_mirror_rpcs(key: &str) -> bool {
    key == MIRROR_NAME || key == DISCARD_CONFIRMED || key == STOP_CUT_TIMESTAMP
}

/// Why a client may not touch `mirror.name`.
pub const MIRROR_NAME_REFUSED: &str = "mirror.name is managed by the mirror RPCs and cannot be \
     set, changed or deleted by a client: use `kmirror mirrors` (--start, --pause, --resume, \
     --stop)";

/// Topic configs that delete mirrored data, refused on a guarded topic whatever the mirror's
/// `mirror.topic.properties.exclude` says.
const DATA_LOSS_KEYS: [&str; 3] = ["retention.ms", "retention.bytes", "cleanup.policy"];

/// `mirror.name` while it asks the topic to mirror or pause (not stopped).
fn active_mirror_name(configs: &BTreeMap<String, String>) -> Option<&str> {
    configs
        .get(MIRROR_NAME)
        .map(String::as_str)
        .filter(|value| !value.is_empty())
        .filter(|value| !mirror_of(value).is_some_and(|(_, d)| d == Desired::Stopped))
}

/// The `mirror.name` of a guarded topic: mirroring or paused, or stopped while `read_only`
/// (a partition of it is still read-only: its stop has not finished).
pub fn guarded_mirror_name(configs: &BTreeMap<String, String>, read_only: bool) -> Option<&str> {
    active_mirror_name(configs).or_else(|| {
        configs
            .get(MIRROR_NAME)
            .map(String::as_str)
            .filter(|value| !value.is_empty() && read_only)
    })
}

/// Why `topic` (with `configs`) cannot be deleted now, if it cannot.
pub fn delete_refused(topic: &str, configs: &BTreeMap<String, String>) -> Option<String> {
    let value = active_mirror_name(configs)?;
    let mirror = mirror_of(value).map_or(value, |(mirror, _)| mirror);
    Some(format!(
        "{topic} is a topic of mirror {mirror} and read-only; stop it first with `kmirror \
         mirrors --stop --mirror {mirror} --topics {topic}`, then delete it"
    ))
}

/// Why guarded `topic` (whose `mirror.name` is `value`) takes no new partitions.
pub fn create_partitions_refused(topic: &str, value: &str) -> String {
    format!(
        "{topic} is a mirror topic (mirror.name={value}): its partition count follows the source \
         topic's until it is stopped with `kmirror mirrors --stop`"
    )
}

/// Why a client's change of `topic`'s configs from `before` to `after` is refused, if it is:
/// INVALID_CONFIG for the configs only the mirror RPCs set, POLICY_VIOLATION for a config a
/// guarded topic (`guarded`: its `mirror.name`) follows from the source or keeps its data by.
/// `mirror_configs` are those of the mirror it names (which topic properties the sync copies).
pub fn config_change_refused(
    topic: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    guarded: Option<&str>,
    mirror_configs: &BTreeMap<String, String>,
) -> Option<MirrorError> {
    let changed = |key: &str| before.get(key) != after.get(key);
    let keys = || before.keys().chain(after.keys()).map(String::as_str);
    if keys().any(|key| managed_by_mirror_rpcs(key) && changed(key)) {
        return Some(MirrorError::new(
            ErrorCode::INVALID_CONFIG,
            MIRROR_NAME_REFUSED,
        ));
    }
    let value = guarded?;
    let filters = SyncFilters::from_configs(mirror_configs).ok();
    let followed = |key: &str| {
        DATA_LOSS_KEYS.contains(&key) || filters.as_ref().is_none_or(|f| f.property_included(key))
    };
    let first = keys().find(|key| !key.starts_with("mirror.") && changed(key) && followed(key))?;
    Some(MirrorError::new(
        ErrorCode::POLICY_VIOLATION,
        format!(
            "{first} of mirror topic {topic} (mirror.name={value}) follows the source or keeps \
             the mirrored data; it can change once the topic is stopped with `kmirror mirrors \
             --stop`"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_stopped_topic_is_guarded_only_while_read_only() {
        let stopped = configs(&[("mirror.name", "m.removed")]);
        assert_eq!(guarded_mirror_name(&stopped, false), None);
        assert_eq!(guarded_mirror_name(&stopped, true), Some("m.removed"));
        let paused = configs(&[("mirror.name", "m.paused")]);
        assert_eq!(guarded_mirror_name(&paused, false), Some("m.paused"));
        assert!(delete_refused("t", &paused).is_some());
        assert!(delete_refused("t", &stopped).is_none());
    }

    #[test]
    fn clients_never_touch_mirror_name_and_guarded_topics_keep_their_data() {
        let before = configs(&[("mirror.name", "m")]);
        let renamed = configs(&[("mirror.name", "other")]);
        let refused = |after: &BTreeMap<String, String>, guarded| {
            config_change_refused("t", &before, after, guarded, &BTreeMap::new()).map(|e| e.code)
        };
        assert_eq!(refused(&renamed, None), Some(ErrorCode::INVALID_CONFIG));
        let shorter = configs(&[("mirror.name", "m"), ("retention.ms", "1")]);
        assert_eq!(
            refused(&shorter, Some("m")),
            Some(ErrorCode::POLICY_VIOLATION)
        );
        assert_eq!(refused(&shorter, None), None);
    }
}
