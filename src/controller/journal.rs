//! What the recent metadata changes touched, so the broker's logs and the mirroring engine
//! follow a change by looking at the topics it named instead of at every topic.
//!
//! Contract: every change the controller applies after it opened is journaled under its change
//! count (the version after it). [`ChangeJournal::since`] answers what changed after a version a
//! reader last followed; a version older than the journal holds (it keeps the last
//! [`JOURNAL_CAPACITY`] changes), or a reader that never followed, gets
//! [`MetadataDelta::everything`], and the reader looks at all of it as before.

use super::{MetadataDelta, MetadataRecord};
use std::collections::VecDeque;

/// The changes the journal remembers; a reader further behind looks at everything.
pub(super) const JOURNAL_CAPACITY: usize = 1 << 16;

/// What one change touched.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Touched {
    /// Nothing a reader follows (a producer id block).
    Nothing,
    /// The cluster: its id, brokers, mirrors or ACLs.
    Cluster,
    /// A topic was created, deleted, grown or reconfigured.
    Topic(String),
    /// Only leader epochs of a topic's partitions.
    LeaderEpochs(String),
    /// Leader epochs of every topic (a broker resumed leadership).
    Everything,
}

impl Touched {
    fn of(record: &MetadataRecord) -> Touched {
        match record {
            MetadataRecord::ProducerIdBlock { .. } => Touched::Nothing,
            MetadataRecord::ClusterId { .. }
            | MetadataRecord::BrokerRegistered { .. }
            | MetadataRecord::BrokerFenced { .. }
            | MetadataRecord::BrokerShuttingDown { .. }
            | MetadataRecord::MirrorCreated { .. }
            | MetadataRecord::MirrorDeleted { .. }
            | MetadataRecord::MirrorConfigs { .. }
            | MetadataRecord::AclCreated { .. }
            | MetadataRecord::AclDeleted { .. } => Touched::Cluster,
            MetadataRecord::Topic { name, .. } | MetadataRecord::TopicDeleted { name } => {
                Touched::Topic(name.clone())
            }
            // A leader or ISR change moves logs and roles: as a topic change.
            MetadataRecord::PartitionCount { topic, .. }
            | MetadataRecord::PartitionChange { topic, .. }
            | MetadataRecord::TopicConfigs { topic, .. } => Touched::Topic(topic.clone()),
            MetadataRecord::LeaderEpoch { topic, .. } => Touched::LeaderEpochs(topic.clone()),
            MetadataRecord::LeadershipResumed { .. } => Touched::Everything,
        }
    }
}

/// The last [`JOURNAL_CAPACITY`] changes, each under the version it made.
#[derive(Debug, Default)]
pub(super) struct ChangeJournal {
    entries: VecDeque<(u64, Touched)>,
}

impl ChangeJournal {
    /// Remembers that `record` made `version`.
    pub(super) fn record(&mut self, version: u64, record: &MetadataRecord) {
        if self.entries.len() == JOURNAL_CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back((version, Touched::of(record)));
    }

    /// Remembers that `version` replaced the whole image (a snapshot was restored).
    pub(super) fn everything(&mut self, version: u64) {
        if self.entries.len() == JOURNAL_CAPACITY {
            self.entries.pop_front();
        }
        self.entries.push_back((version, Touched::Everything));
    }

    /// What changed after `followed` up to `current` (the controller's version now).
    pub(super) fn since(&self, followed: Option<u64>, current: u64) -> MetadataDelta {
        let Some(followed) = followed.filter(|v| *v <= current) else {
            return MetadataDelta::everything();
        };
        if followed == current {
            return MetadataDelta::default();
        }
        // The journal must hold every version after `followed`.
        if self
            .entries
            .front()
            .is_none_or(|(oldest, _)| *oldest > followed + 1)
        {
            return MetadataDelta::everything();
        }
        let mut delta = MetadataDelta::default();
        let first = self.entries.partition_point(|(v, _)| *v <= followed);
        for (_, touched) in self.entries.range(first..) {
            match touched {
                Touched::Nothing => {}
                Touched::Cluster => delta.cluster = true,
                Touched::Topic(name) => {
                    delta.leader_epochs.remove(name);
                    delta.topics.insert(name.clone());
                }
                Touched::LeaderEpochs(name) => {
                    if !delta.topics.contains(name) {
                        delta.leader_epochs.insert(name.clone());
                    }
                }
                Touched::Everything => return MetadataDelta::everything(),
            }
        }
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn configs(topic: &str) -> MetadataRecord {
        MetadataRecord::TopicConfigs {
            topic: topic.to_string(),
            configs: Default::default(),
        }
    }

    fn epoch(topic: &str) -> MetadataRecord {
        MetadataRecord::LeaderEpoch {
            topic: topic.to_string(),
            partition: 0,
            epoch: 1,
        }
    }

    #[test]
    fn a_reader_sees_the_topics_changed_after_the_version_it_followed() {
        let mut journal = ChangeJournal::default();
        journal.record(1, &configs("a"));
        journal.record(2, &epoch("b"));
        journal.record(3, &epoch("a"));
        journal.record(4, &MetadataRecord::ProducerIdBlock { next: 7 });
        let delta = journal.since(Some(1), 4);
        assert!(!delta.everything && !delta.cluster);
        assert_eq!(delta.topics, BTreeSet::new());
        assert_eq!(
            delta.leader_epochs,
            BTreeSet::from(["a".into(), "b".into()])
        );
        let delta = journal.since(Some(0), 4);
        assert_eq!(delta.topics, BTreeSet::from(["a".to_string()]));
        assert_eq!(delta.leader_epochs, BTreeSet::from(["b".to_string()]));
        assert!(delta.touches("a") && delta.touches("b") && !delta.touches("c"));
        assert_eq!(journal.since(Some(4), 4), MetadataDelta::default());
        assert_eq!(
            journal.since(Some(3), 4),
            MetadataDelta::default(),
            "a producer id block"
        );
    }

    #[test]
    fn a_reader_further_behind_than_the_journal_or_new_looks_at_everything() {
        let mut journal = ChangeJournal::default();
        assert!(journal.since(None, 0).everything);
        for version in 1..=(JOURNAL_CAPACITY as u64 + 2) {
            journal.record(version, &configs("a"));
        }
        let current = JOURNAL_CAPACITY as u64 + 2;
        assert!(journal.since(Some(1), current).everything);
        assert!(!journal.since(Some(2), current).everything);
        assert!(journal.since(Some(current + 1), current).everything);
    }

    #[test]
    fn resumed_leadership_and_cluster_changes_are_flagged() {
        let mut journal = ChangeJournal::default();
        journal.record(1, &MetadataRecord::MirrorDeleted { name: "m".into() });
        let delta = journal.since(Some(0), 1);
        assert!(delta.cluster && !delta.everything);
        journal.record(2, &MetadataRecord::LeadershipResumed { node_id: 1 });
        assert!(journal.since(Some(1), 2).everything);
    }
}
