//! Elections an operator asks for (ElectLeaders: `kafka-leader-election.sh`) and the active
//! controller's automatic leader rebalance (docs/replication.md §3).
//!
//! A preferred election moves a partition's leadership to its preferred replica (the first
//! assigned) when that replica is in the ISR and live; it is how leadership goes back to where
//! placement spread it after brokers died and returned. An unclean election gives a partition
//! without a leader one from outside the ISR (acknowledged records may be lost), whatever the
//! topic's `unclean.leader.election.enable`. Every change goes through
//! [`partition_change::next`], at the next leader epoch, as any election.
//!
//! The rebalance (`auto.leader.rebalance.enable`, on by default as in Kafka) runs on the active
//! controller every `leader.imbalance.check.interval.seconds`: a broker leading fewer than
//! `100 - leader.imbalance.per.broker.percentage` % of the partitions it is the preferred
//! replica of gets them back by preferred elections.

use super::partition_change::{self, Election};
use super::{Controller, NO_LEADER, PartitionMeta, partition_change_record};
use crate::storage::StorageError;
use kmirror_protocol::errors::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The elections ElectLeaders asks for (its `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ElectionType {
    /// 0: the preferred replica.
    Preferred,
    /// 1: any live replica when the partition has no leader.
    Unclean,
}

impl ElectionType {
    /// The type of ElectLeaders' wire value, `None` for a value Kafka does not define.
    pub fn from_wire(value: i8) -> Option<ElectionType> {
        match value {
            0 => Some(ElectionType::Preferred),
            1 => Some(ElectionType::Unclean),
            _ => None,
        }
    }
}

/// One partition's outcome of an election: the error code ElectLeaders answers (NONE when
/// elected) and the partition afterwards when it changed.
fn decide(
    election: ElectionType,
    p: &PartitionMeta,
    may_lead: impl Fn(i32) -> bool,
) -> (ErrorCode, Option<PartitionMeta>) {
    match election {
        ElectionType::Preferred => {
            let Some(&preferred) = p.replicas.first() else {
                return (ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE, None);
            };
            if p.leader == preferred {
                return (ErrorCode::ELECTION_NOT_NEEDED, None);
            }
            match partition_change::next(p, &p.isr, may_lead, Election::Preferred, false) {
                Some(after) if after.leader == preferred => (ErrorCode::NONE, Some(after)),
                _ => (ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE, None),
            }
        }
        ElectionType::Unclean => {
            if p.leader != NO_LEADER && may_lead(p.leader) {
                return (ErrorCode::ELECTION_NOT_NEEDED, None);
            }
            match partition_change::next(p, &p.isr, may_lead, Election::Unclean, false) {
                Some(after) if after.leader != NO_LEADER => (ErrorCode::NONE, Some(after)),
                _ => (ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE, None),
            }
        }
    }
}

impl Controller {
    /// ElectLeaders: an `election` of `partitions` (topic, index), or of every partition when
    /// `None` (whose answers then leave out the partitions that needed none, as Kafka's do).
    /// Answers each partition's error code.
    pub fn elect_leaders(
        &mut self,
        election: ElectionType,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<(String, i32, i16)>, StorageError> {
        let every: Vec<(String, i32)>;
        let asked = match partitions {
            Some(asked) => asked,
            None => {
                every = self
                    .topics
                    .iter()
                    .flat_map(|(name, t)| (0..t.partitions.len() as i32).map(|i| (name.clone(), i)))
                    .collect();
                &every
            }
        };
        let mut records = Vec::new();
        let mut answers = Vec::new();
        for (name, index) in asked {
            let partition = self.topics.get(name).and_then(|t| {
                usize::try_from(*index)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            });
            let code = match partition {
                None => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                Some(p) => {
                    let (code, after) = decide(election, p, |r| self.live(r));
                    if let Some(after) = after {
                        records.push(partition_change_record(name, *index as usize, &after));
                    }
                    code
                }
            };
            if partitions.is_some() || code != ErrorCode::ELECTION_NOT_NEEDED {
                answers.push((name.clone(), *index, code.0));
            }
        }
        self.append_all(records)?;
        Ok(answers)
    }

    /// The partitions a leader rebalance moves back to their preferred replicas: those of
    /// every live broker that leads fewer than `100 - percentage` % of the partitions it is
    /// the preferred replica of, where it is in the ISR and does not lead.
    pub fn imbalanced(&self, percentage: u32) -> Vec<(String, i32)> {
        // Per preferred broker: (partitions it is preferred for, those it does not lead and
        // could).
        let mut per_broker: BTreeMap<i32, (usize, Vec<(String, i32)>)> = BTreeMap::new();
        for (name, topic) in &self.topics {
            for (index, p) in topic.partitions.iter().enumerate() {
                let Some(&preferred) = p.replicas.first() else {
                    continue;
                };
                let entry = per_broker.entry(preferred).or_default();
                entry.0 += 1;
                if p.leader != preferred && p.isr.contains(&preferred) && self.live(preferred) {
                    entry.1.push((name.clone(), index as i32));
                }
            }
        }
        per_broker
            .into_values()
            .filter(|(total, movable)| movable.len() * 100 > *total * percentage as usize)
            .flat_map(|(_, movable)| movable)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::MetadataCommand;
    use std::collections::BTreeMap;

    /// A controller with brokers 1-3 and topic `t` of three partitions of three replicas,
    /// placed round-robin (partition i preferred on broker i+1).
    fn controller() -> Controller {
        let mut c = Controller::replica();
        for node_id in 1..=3 {
            c.execute(&MetadataCommand::RegisterBroker {
                node_id,
                host: "h".into(),
                port: 9000 + node_id as u16,
                directory_id: None,
            })
            .expect("registered");
        }
        c.create_topic("t", 3, 3, BTreeMap::new(), None)
            .expect("created");
        c
    }

    fn leaders(c: &Controller) -> Vec<i32> {
        c.topics()["t"]
            .partitions
            .iter()
            .map(|p| p.leader)
            .collect()
    }

    #[test]
    fn a_preferred_election_gives_leadership_back_after_a_broker_returns() {
        let mut c = controller();
        let preferred: Vec<i32> = c.topics()["t"]
            .partitions
            .iter()
            .map(|p| p.replicas[0])
            .collect();
        assert_eq!(leaders(&c), preferred);
        let first = preferred[0];
        // Its broker fenced: another in-sync replica leads; back: nothing moves by itself.
        c.fence_broker(first, true).expect("fenced");
        assert_ne!(leaders(&c)[0], first);
        let answers = c
            .elect_leaders(ElectionType::Preferred, Some(&[("t".into(), 0)]))
            .expect("written");
        assert_eq!(
            answers,
            vec![("t".into(), 0, ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE.0)],
            "a fenced preferred replica cannot lead"
        );
        c.fence_broker(first, false).expect("unfenced");
        // Out of the ISR after its fencing: it must catch up first.
        let p = c.topics()["t"].partitions[0].clone();
        assert!(!p.isr.contains(&first));
        assert_eq!(
            c.elect_leaders(ElectionType::Preferred, None)
                .expect("written"),
            vec![("t".into(), 0, ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE.0)]
        );
        assert!(
            c.imbalanced(10).is_empty(),
            "not in the ISR: nothing to move"
        );
        // Back in the ISR (its leader's AlterPartition): the rebalance and the election move it.
        let mut isr = p.isr.clone();
        isr.push(first);
        let mut after = p.clone();
        after.isr = isr;
        after.partition_epoch += 1;
        c.append_all(vec![partition_change_record("t", 0, &after)])
            .expect("written");
        assert_eq!(c.imbalanced(10), vec![("t".to_string(), 0)]);
        let epoch = c.topics()["t"].partitions[0].leader_epoch;
        assert_eq!(
            c.elect_leaders(ElectionType::Preferred, None)
                .expect("written"),
            vec![("t".into(), 0, 0)],
            "every partition asked; only the one elected answered"
        );
        assert_eq!(leaders(&c), preferred);
        assert_eq!(c.topics()["t"].partitions[0].leader_epoch, epoch + 1);
        assert_eq!(
            c.elect_leaders(
                ElectionType::Preferred,
                Some(&[("t".into(), 0), ("u".into(), 0)])
            )
            .expect("written"),
            vec![
                ("t".into(), 0, ErrorCode::ELECTION_NOT_NEEDED.0),
                ("u".into(), 0, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0)
            ]
        );
    }

    #[test]
    fn an_unclean_election_picks_a_live_replica_outside_the_isr_only_without_a_leader() {
        let mut c = controller();
        assert_eq!(
            c.elect_leaders(ElectionType::Unclean, Some(&[("t".into(), 1)]))
                .expect("written"),
            vec![("t".into(), 1, ErrorCode::ELECTION_NOT_NEEDED.0)]
        );
        // Partition 1 shrinks to its leader alone, which is then fenced: no leader.
        let mut p = c.topics()["t"].partitions[1].clone();
        let leader = p.leader;
        p.isr = vec![leader];
        p.partition_epoch += 1;
        c.append_all(vec![partition_change_record("t", 1, &p)])
            .expect("written");
        c.fence_broker(leader, true).expect("fenced");
        assert_eq!(c.topics()["t"].partitions[1].leader, NO_LEADER);
        let answers = c
            .elect_leaders(ElectionType::Unclean, Some(&[("t".into(), 1)]))
            .expect("written");
        assert_eq!(answers, vec![("t".into(), 1, 0)]);
        let after = &c.topics()["t"].partitions[1];
        assert!(after.leader != NO_LEADER && after.leader != leader);
        assert_eq!(
            after.isr,
            vec![after.leader],
            "the new leader alone in the ISR"
        );
    }
}
