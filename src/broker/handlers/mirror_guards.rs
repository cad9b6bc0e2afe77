//! What a client may not do to a mirror topic. A mirror topic is
//! byte-identical to its source until its partitions are STOPPED, and only the mirror RPCs
//! (Start/Stop/Pause/ResumeMirrorTopics) move it between states, so:
//! - `mirror.name` is never a client's to set, change or delete, on any topic (CreateTopics,
//!   AlterConfigs, IncrementalAlterConfigs): INVALID_CONFIG;
//! - while a mirror topic is *guarded* (`mirror.name` is `<mirror>` or `<mirror>.paused`, or it
//!   is `<mirror>.removed` but a partition here is still read-only, i.e. STOPPING), it takes no
//!   new partitions (READ_ONLY_TOPIC: counts follow the source) and no change of a config the
//!   metadata sync copies from the source or that deletes mirrored data (POLICY_VIOLATION);
//! - a mirroring or paused topic cannot be deleted (READ_ONLY_TOPIC): stopping it comes first.
//!
//! Appends are guarded where they happen (Produce, AddPartitionsToTxn and the transaction
//! markers) by each partition's read-only flag. The engine changes mirror topics through the
//! broker, not these handlers, so its own sync is unaffected.

use crate::broker::Broker;
use kmirror_actors::engine::sync_plan::SyncFilters;
use kmirror_actors::metadata::mirror_of;
use kmirror_actors::partition::Desired;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// The topic config only the mirror RPCs set.
const MIRROR_NAME: &str = "mirror.name";

/// Whether `key` is a topic config only the mirror RPCs set: `mirror.name` and what a restart
/// confirmed ([`kmirror_actors::metadata::DISCARD_CONFIRMED`]).
pub(super) fn managed_by_mirror_rpcs(key: &str) -> bool {
    key == MIRROR_NAME || key == kmirror_actors::metadata::DISCARD_CONFIRMED
}

/// Why a client may not touch `mirror.name`.
pub(super) const MIRROR_NAME_REFUSED: &str = "mirror.name is managed by the mirror RPCs and \
     cannot be set, changed or deleted by a client: use `kmirror mirrors` (--start, --pause, \
     --resume, --stop)";

/// Topic configs that delete mirrored data, refused on a guarded topic whatever the mirror's
/// `mirror.topic.properties.exclude` says.
const DATA_LOSS_KEYS: [&str; 3] = ["retention.ms", "retention.bytes", "cleanup.policy"];

/// The `mirror.name` of a topic that is mirroring or paused (not stopping or stopped).
fn active_mirror_name(configs: &BTreeMap<String, String>) -> Option<&str> {
    configs
        .get(MIRROR_NAME)
        .map(String::as_str)
        .filter(|value| !mirror_of(value).is_some_and(|(_, d)| d == Desired::Stopped))
        .filter(|value| !value.is_empty())
}

/// The `mirror.name` of a guarded topic: mirroring or paused, or stopped but with a partition
/// here that is not STOPPED yet.
pub(super) fn guarded_mirror_name<'a>(
    broker: &Broker,
    topic: &str,
    configs: &'a BTreeMap<String, String>,
) -> Option<&'a str> {
    if let Some(name) = active_mirror_name(configs) {
        return Some(name);
    }
    let name = configs.get(MIRROR_NAME).filter(|n| !n.is_empty())?;
    let partitions = broker.topic(topic).map_or(0, |t| t.partitions.len());
    (0..partitions as i32)
        .filter_map(|index| broker.partition(topic, index))
        .any(|p| p.read_only.load(Ordering::SeqCst))
        .then_some(name.as_str())
}

/// Why DeleteTopics refuses `topic`, if it does.
pub(super) fn delete_refused(topic: &str, configs: &BTreeMap<String, String>) -> Option<String> {
    let value = active_mirror_name(configs)?;
    let mirror = mirror_of(value).map_or(value, |(mirror, _)| mirror);
    Some(format!(
        "{topic} is a topic of mirror {mirror} and read-only; stop it first with \
         `kmirror mirrors --stop --mirror {mirror} --topics {topic}`, then delete it"
    ))
}

/// Why CreatePartitions refuses `topic`, if it does.
pub(super) fn create_partitions_refused(broker: &Broker, topic: &str) -> Option<String> {
    let meta = broker.topic(topic)?;
    let value = guarded_mirror_name(broker, topic, &meta.configs)?;
    Some(format!(
        "{topic} is a mirror topic (mirror.name={value}): its partition count follows the source \
         topic's until it is stopped with `kmirror mirrors --stop`"
    ))
}

/// Why a client's config change of `topic` from `before` to `after` is refused, if it is, as
/// (error code, message). (A request naming `mirror.name` is refused before this, even when it
/// would change nothing.)
pub(super) fn config_change_refused(
    broker: &Broker,
    topic: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Option<(kmirror_protocol::errors::ErrorCode, String)> {
    use kmirror_protocol::errors::ErrorCode;
    let managed_changed = before
        .keys()
        .chain(after.keys())
        .any(|key| managed_by_mirror_rpcs(key) && before.get(key) != after.get(key));
    if managed_changed {
        return Some((ErrorCode::INVALID_CONFIG, MIRROR_NAME_REFUSED.to_string()));
    }
    let value = guarded_mirror_name(broker, topic, before)?;
    let mirror = mirror_of(value).map_or(value, |(mirror, _)| mirror);
    // The mirror's own sync filters say what it copies (an unknown mirror's are the defaults);
    // filters that cannot be built count as copying everything, as far as this check goes.
    let mirror_configs = broker.mirrors().remove(mirror).unwrap_or_default();
    let filters = SyncFilters::from_configs(&mirror_configs).ok();
    let managed = |key: &str| {
        DATA_LOSS_KEYS.contains(&key) || filters.as_ref().is_none_or(|f| f.property_included(key))
    };
    let changed: Vec<&str> = before
        .keys()
        .chain(after.keys())
        .map(String::as_str)
        .filter(|key| !key.starts_with("mirror.") && before.get(*key) != after.get(*key))
        .filter(|key| managed(key))
        .collect();
    let first = changed.first()?;
    Some((
        ErrorCode::POLICY_VIOLATION,
        format!(
            "{first} of mirror topic {topic} (mirror.name={value}) follows the source or keeps \
             the mirrored data; it can change once the topic is stopped with `kmirror mirrors \
             --stop`"
        ),
    ))
}
