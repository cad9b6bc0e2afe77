//! The engine's mirror-topic guards (`kmirror_actors::policy::guards`, docs/design.md §7) over
//! this broker's metadata: a stopped topic stays guarded while a partition here is still
//! read-only (its stop has not finished).

use crate::broker::Broker;
use kmirror_actors::policy::MirrorError;
use kmirror_actors::policy::guards;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Whether a partition of `topic` here is read-only.
fn read_only(broker: &Broker, topic: &str) -> bool {
    let partitions = broker.topic(topic).map_or(0, |t| t.partitions.len());
    (0..partitions as i32)
        .filter_map(|index| broker.partition(topic, index))
        .any(|p| p.read_only.load(Ordering::SeqCst))
}

/// Why `topic` takes no new partitions now, if it does not.
pub(super) fn create_partitions_refused(broker: &Broker, topic: &str) -> Option<String> {
    let meta = broker.topic(topic)?;
    let value = guards::guarded_mirror_name(&meta.configs, read_only(broker, topic))?;
    Some(guards::create_partitions_refused(topic, value))
}

/// Why a client's change of `topic`'s configs from `before` to `after` is refused, if it is.
pub(super) fn config_change_refused(
    broker: &Broker,
    topic: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Option<MirrorError> {
    let guarded = guards::guarded_mirror_name(before, read_only(broker, topic));
    let mirror = guarded.and_then(kmirror_actors::metadata::mirror_of);
    let mirror_configs = mirror
        .and_then(|(mirror, _)| broker.mirrors().remove(mirror))
        .unwrap_or_default();
    guards::config_change_refused(topic, before, after, guarded, &mirror_configs)
}
