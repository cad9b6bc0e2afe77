//! The metadata manager's decisions, in pure code: what a change of the cluster metadata means
//! for a mirrored topic whose partitions this broker runs.
//!
//! The broker's metadata is the truth (docs/design.md §2): `mirror.name` says what the topic should
//! do (`<mirror>`, `<mirror>.paused`, `<mirror>.removed`), the controller says each partition's
//! leader epoch. Whatever changed them (the KIP's RPCs, an operator's `kafka-configs`, a
//! BumpLeaderEpochs), the engine compares the metadata with what it last told the partitions
//! and reacts: a new desired state, a higher leader epoch, or the topic gone from the mirror
//! (deleted, or `mirror.name` naming something else), whose partitions are released.

use crate::host::types::TopicMeta;
use crate::partition::Desired;
use std::collections::BTreeMap;

/// The topic config that says which mirror a topic belongs to and what it should do:
/// `<mirror>`, `<mirror>.paused` or `<mirror>.removed` (docs/design.md §2).
pub const MIRROR_NAME: &str = "mirror.name";

/// The topic config where a restart of a stopped topic records what the operator confirmed
/// discarding (docs/failover.md "Restarting a stopped topic"): for each partition that holds
/// records written on this cluster since its failover, the log end offset at which they were
/// counted, as `partition:offset` pairs separated by commas. PREPARING cuts such records only
/// while the log still ends there; like `mirror.name`, only the mirror RPCs set it.
pub const DISCARD_CONFIRMED: &str = "mirror.discard.confirmed";

/// The topic config where a consistent stop (`kmirror mirrors --failover --consistent`) records
/// its point in time, in ms since the epoch: STOPPING cuts each partition before the first
/// batch newer than it (docs/failover.md, "A consistent cut"). Written with `mirror.name` in the
/// stop's one metadata change, so a STOPPING resumed after a crash cuts at the same point; only
/// the mirror RPCs set it, and a start or a plain stop removes it.
pub const STOP_CUT_TIMESTAMP: &str = "mirror.stop.cut.timestamp.ms";

/// The log end offsets a [`DISCARD_CONFIRMED`] value confirms, by partition (entries that do
/// not parse confirm nothing).
pub fn confirmed_log_ends(value: &str) -> BTreeMap<i32, i64> {
    value
        .split(',')
        .filter_map(|pair| {
            let (partition, offset) = pair.split_once(':')?;
            Some((partition.trim().parse().ok()?, offset.trim().parse().ok()?))
        })
        .collect()
}

/// The [`DISCARD_CONFIRMED`] value confirming `log_ends`.
pub fn confirmed_value(log_ends: &BTreeMap<i32, i64>) -> String {
    log_ends
        .iter()
        .map(|(partition, offset)| format!("{partition}:{offset}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What `mirror.name` asks of a topic of `mirror`; `None` when the value is not one of the
/// mirror's three spellings.
pub fn desired_from_mirror_name(mirror: &str, value: &str) -> Option<Desired> {
    match value.strip_prefix(mirror)? {
        "" => Some(Desired::Mirroring),
        ".paused" => Some(Desired::Paused),
        ".removed" => Some(Desired::Stopped),
        _ => None,
    }
}

/// The mirror a `mirror.name` value names, and what it asks of the topic. Mirror names may hold
/// dots but never end in `.paused` or `.removed`, so those suffixes are read first and anything
/// else is the name of a mirror to mirror from.
pub fn mirror_of(value: &str) -> Option<(&str, Desired)> {
    let (mirror, desired) = if let Some(mirror) = value.strip_suffix(".paused") {
        (mirror, Desired::Paused)
    } else if let Some(mirror) = value.strip_suffix(".removed") {
        (mirror, Desired::Stopped)
    } else {
        (value, Desired::Mirroring)
    };
    (!mirror.is_empty()).then_some((mirror, desired))
}

/// The topics of `mirror` among `topics`: those whose `mirror.name` names it, whatever it asks.
pub fn mirror_topics(topics: &BTreeMap<String, TopicMeta>, mirror: &str) -> Vec<String> {
    topics
        .iter()
        .filter(|(_, t)| {
            t.configs
                .get("mirror.name")
                .and_then(|value| mirror_of(value))
                .is_some_and(|(m, _)| m == mirror)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// The `mirror.name` value that asks `desired` of a topic of `mirror`.
pub fn mirror_name_value(mirror: &str, desired: Desired) -> String {
    match desired {
        Desired::Mirroring => mirror.to_string(),
        Desired::Paused => format!("{mirror}.paused"),
        Desired::Stopped => format!("{mirror}.removed"),
    }
}

/// What the partitions of a topic were last told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownTopic {
    /// The desired state.
    pub desired: Desired,
    /// Each partition's leader epoch, by index.
    pub leader_epochs: Vec<i32>,
}

/// The topic as the metadata shows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView<'a> {
    /// Its `mirror.name`, if set.
    pub mirror_name: Option<&'a str>,
    /// Each partition's leader epoch, by index.
    pub leader_epochs: &'a [i32],
}

/// What to do about one mirrored topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaction {
    /// Tell every partition the new desired state.
    Desired(Desired),
    /// Tell a partition its higher leader epoch.
    LeaderEpoch { partition: i32, leader_epoch: i32 },
    /// The topic is no longer this mirror's (deleted, or `mirror.name` names something else):
    /// its partitions stop fetching and are dropped.
    Release,
}

/// The reactions to the metadata `now` (`None`: the topic was deleted) for a topic of `mirror`
/// whose partitions were last told `known`.
pub fn react(mirror: &str, known: &KnownTopic, now: Option<&TopicView<'_>>) -> Vec<Reaction> {
    let Some(now) = now else {
        return vec![Reaction::Release];
    };
    let Some(desired) = now
        .mirror_name
        .and_then(|value| desired_from_mirror_name(mirror, value))
    else {
        return vec![Reaction::Release];
    };
    let mut reactions = Vec::new();
    if desired != known.desired {
        reactions.push(Reaction::Desired(desired));
    }
    for (index, (&epoch, &told)) in now
        .leader_epochs
        .iter()
        .zip(&known.leader_epochs)
        .enumerate()
    {
        if epoch > told {
            reactions.push(Reaction::LeaderEpoch {
                partition: index as i32,
                leader_epoch: epoch,
            });
        }
    }
    reactions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(desired: Desired, epochs: &[i32]) -> KnownTopic {
        KnownTopic {
            desired,
            leader_epochs: epochs.to_vec(),
        }
    }

    #[test]
    fn mirror_name_spellings_round_trip() {
        for desired in [Desired::Mirroring, Desired::Paused, Desired::Stopped] {
            let value = mirror_name_value("dr", desired);
            assert_eq!(desired_from_mirror_name("dr", &value), Some(desired));
        }
        assert_eq!(desired_from_mirror_name("dr", "dr2"), None);
        assert_eq!(desired_from_mirror_name("dr", "other"), None);
        assert_eq!(desired_from_mirror_name("dr", "dr.stopped"), None);
    }

    #[test]
    fn a_value_names_its_mirror() {
        assert_eq!(mirror_of("dr"), Some(("dr", Desired::Mirroring)));
        assert_eq!(mirror_of("dr.paused"), Some(("dr", Desired::Paused)));
        assert_eq!(mirror_of("dr.removed"), Some(("dr", Desired::Stopped)));
        assert_eq!(mirror_of("dr.west"), Some(("dr.west", Desired::Mirroring)));
        assert_eq!(
            mirror_of("dr.west.paused"),
            Some(("dr.west", Desired::Paused))
        );
        assert_eq!(mirror_of(""), None);
        assert_eq!(mirror_of(".paused"), None);
    }

    #[test]
    fn nothing_changed_means_no_reaction() {
        let view = TopicView {
            mirror_name: Some("dr"),
            leader_epochs: &[3, 4],
        };
        assert!(react("dr", &known(Desired::Mirroring, &[3, 4]), Some(&view)).is_empty());
    }

    #[test]
    fn a_config_change_and_a_bump_are_passed_on() {
        let view = TopicView {
            mirror_name: Some("dr.paused"),
            leader_epochs: &[3, 9],
        };
        assert_eq!(
            react("dr", &known(Desired::Mirroring, &[3, 4]), Some(&view)),
            [
                Reaction::Desired(Desired::Paused),
                Reaction::LeaderEpoch {
                    partition: 1,
                    leader_epoch: 9
                }
            ]
        );
    }

    #[test]
    fn a_deleted_topic_or_one_of_another_mirror_is_released() {
        let told = known(Desired::Mirroring, &[0]);
        assert_eq!(react("dr", &told, None), [Reaction::Release]);
        for other in [None, Some("other"), Some("dr-2.paused")] {
            let view = TopicView {
                mirror_name: other,
                leader_epochs: &[0],
            };
            assert_eq!(react("dr", &told, Some(&view)), [Reaction::Release]);
        }
    }
}
