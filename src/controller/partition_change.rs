//! The controller's decisions about one partition's leader and ISR (docs/replication.md §3), as
//! pure functions of its registration: every node applying a metadata command computes the
//! same change.
//!
//! Contract: [`next`] takes the partition as it is, the ISR the change asks for, which
//! replicas may lead and the kind of election, and returns the registration afterwards, or
//! `None` when nothing changes. Invariants it keeps, as Kafka's `PartitionChangeBuilder` does:
//! the ISR is never empty (when the last member goes, it stays and the partition has no
//! leader); a leader comes from the ISR, except in an unclean election, which sets the ISR to
//! the new leader alone and marks it recovering; the leader epoch rises by one on every leader
//! change (to no leader too), the partition epoch by one on every change.

use super::{ControllerError, LeaderRecovery, NO_LEADER, PartitionMeta};
use kmirror_protocol::errors::ErrorCode;

/// How a new leader may be chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Keep the leader if it may still lead; else the first replica, in assignment order,
    /// that is in the ISR and may lead.
    Online,
    /// As [`Election::Online`], then, when no ISR member may lead, the first replica that may
    /// (`unclean.leader.election.enable=true`: acknowledged records may be lost).
    Unclean,
    /// The preferred replica (the first assigned) when it is in the ISR and may lead; else as
    /// [`Election::Online`] (`kafka-leader-election.sh --election-type PREFERRED`).
    Preferred,
}

/// A partition's registration after a change that asks for `target_isr` (an empty one keeps
/// the ISR as it is), where `may_lead` says which brokers are live and not being removed, and
/// `recovered` reports that an uncleanly elected leader has recovered. `None`: no change.
pub fn next(
    current: &PartitionMeta,
    target_isr: &[i32],
    may_lead: impl Fn(i32) -> bool,
    election: Election,
    recovered: bool,
) -> Option<PartitionMeta> {
    let in_sync = |r: i32| target_isr.contains(&r) && may_lead(r);
    let first_in_sync = |skip: usize| {
        current
            .replicas
            .iter()
            .skip(skip)
            .copied()
            .find(|&r| in_sync(r))
    };
    let (leader, unclean) = match election {
        Election::Preferred => match current.replicas.first() {
            Some(&preferred) if in_sync(preferred) => (preferred, false),
            _ if in_sync(current.leader) => (current.leader, false),
            _ => (first_in_sync(1).unwrap_or(NO_LEADER), false),
        },
        Election::Online | Election::Unclean => {
            if in_sync(current.leader) {
                (current.leader, false)
            } else if let Some(leader) = first_in_sync(0) {
                (leader, false)
            } else if election == Election::Unclean
                && let Some(&leader) = current.replicas.iter().find(|&&r| may_lead(r))
            {
                (leader, true)
            } else {
                (NO_LEADER, false)
            }
        }
    };
    let mut after = current.clone();
    if leader != current.leader {
        after.leader = leader;
        after.leader_epoch = current.leader_epoch + 1;
        if unclean {
            after.isr = vec![leader];
            after.leader_recovery = LeaderRecovery::Recovering;
        }
    }
    if !unclean && !target_isr.is_empty() {
        after.isr = target_isr.to_vec();
    }
    if recovered {
        after.leader_recovery = LeaderRecovery::Recovered;
    }
    if after == *current {
        return None;
    }
    after.partition_epoch = current.partition_epoch + 1;
    Some(after)
}

/// The ISR `isr` without `broker` (an empty answer when it was the last member: the caller's
/// [`next`] then keeps it).
pub fn without(isr: &[i32], broker: i32) -> Vec<i32> {
    isr.iter().copied().filter(|&r| r != broker).collect()
}

/// An AlterPartition request for one partition: the leader asks to change its ISR.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IsrChange {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The leader epoch the leader leads at.
    pub leader_epoch: i32,
    /// The partition epoch of the registration the leader changes.
    pub partition_epoch: i32,
    /// The ISR it asks for, each member with the broker epoch the leader saw it fetch at
    /// (-1: unknown).
    pub new_isr: Vec<(i32, i64)>,
    /// The leader, elected uncleanly, has recovered.
    pub recovered: bool,
}

/// A partition's ISR as an AlterPartition answer gives it to the leader.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IsrState {
    /// The leader epoch.
    pub leader_epoch: i32,
    /// The partition epoch the next change is made from.
    pub partition_epoch: i32,
    /// The ISR.
    pub isr: Vec<i32>,
    /// Elected uncleanly and not yet recovered.
    pub recovering: bool,
}

impl IsrState {
    /// The ISR state of a registration.
    pub fn of(p: &PartitionMeta) -> IsrState {
        IsrState {
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: p.isr.clone(),
            recovering: p.leader_recovery == LeaderRecovery::Recovering,
        }
    }
}

/// Why an AlterPartition was refused, checked in Kafka's order (docs/replication.md §3).
pub fn check_isr_change(
    current: Option<&PartitionMeta>,
    sender: i32,
    change: &IsrChange,
    eligible: impl Fn(i32, i64) -> bool,
) -> Result<(), ControllerError> {
    let refuse = |code: ErrorCode, why: &str| {
        Err(ControllerError::IsrChangeRefused {
            code: code.0,
            reason: format!("{}-{}: {why}", change.topic, change.partition),
        })
    };
    let Some(current) = current else {
        return refuse(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, "no such partition");
    };
    // Epochs above this image's: this node is behind, as a stale controller would be.
    if change.leader_epoch > current.leader_epoch
        || change.partition_epoch > current.partition_epoch
    {
        return refuse(
            ErrorCode::NOT_CONTROLLER,
            "epochs this controller has not seen yet",
        );
    }
    if change.leader_epoch < current.leader_epoch {
        return refuse(ErrorCode::FENCED_LEADER_EPOCH, "an older leader epoch");
    }
    if current.leader != sender {
        return refuse(ErrorCode::INVALID_REQUEST, "the sender does not lead it");
    }
    if change.partition_epoch < current.partition_epoch {
        return refuse(
            ErrorCode::INVALID_UPDATE_VERSION,
            "an older partition epoch",
        );
    }
    let ids: Vec<i32> = change.new_isr.iter().map(|(id, _)| *id).collect();
    if ids.iter().any(|r| !current.replicas.contains(r)) || !ids.contains(&sender) {
        return refuse(
            ErrorCode::INVALID_REQUEST,
            "the ISR must be replicas and hold the leader",
        );
    }
    if ids.len() > 1 && current.leader_recovery == LeaderRecovery::Recovering && !change.recovered {
        return refuse(
            ErrorCode::INVALID_REQUEST,
            "a recovering leader cannot grow the ISR",
        );
    }
    if let Some((id, _)) = change
        .new_isr
        .iter()
        .find(|(id, epoch)| !current.isr.contains(id) && !eligible(*id, *epoch))
    {
        return Err(ControllerError::IsrChangeRefused {
            code: ErrorCode::INELIGIBLE_REPLICA.0,
            reason: format!(
                "{}-{}: replica {id} is fenced, shutting down or restarted",
                change.topic, change.partition
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(replicas: &[i32], isr: &[i32], leader: i32) -> PartitionMeta {
        PartitionMeta {
            leader_epoch: 100,
            leader,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            partition_epoch: 200,
            leader_recovery: LeaderRecovery::Recovered,
        }
    }

    fn live(ids: &'static [i32]) -> impl Fn(i32) -> bool {
        move |r| ids.contains(&r)
    }

    /// Kafka's PartitionChangeBuilderTest#testElectLeader, case by case: (replicas, isr,
    /// leader, live, election) -> (leader, unclean).
    #[test]
    fn leaders_are_elected_as_kafka_elects_them() {
        // (replicas, isr, leader, live, election, elected, unclean)
        type Case = (
            &'static [i32],
            &'static [i32],
            i32,
            &'static [i32],
            Election,
            i32,
            bool,
        );
        let cases: &[Case] = &[
            // The leader stays while it may lead.
            (
                &[2, 1, 3],
                &[2, 1, 3],
                2,
                &[1, 2, 3],
                Election::Online,
                2,
                false,
            ),
            // The preferred replica, when it is in sync, takes over a preferred election.
            (
                &[2, 1, 3],
                &[1, 2, 3],
                1,
                &[1, 2, 3],
                Election::Preferred,
                2,
                false,
            ),
            (
                &[2, 1, 3],
                &[1, 3],
                1,
                &[1, 2, 3],
                Election::Preferred,
                1,
                false,
            ),
            // A leader that went away is replaced by the first in-sync replica, in
            // assignment order.
            (&[2, 1, 3], &[1, 3], 2, &[1, 3], Election::Online, 1, false),
            (&[2, 1, 3], &[3, 1], 2, &[1, 3], Election::Online, 1, false),
            (&[2, 1, 3], &[3], 2, &[1, 3], Election::Online, 3, false),
            // No in-sync replica may lead: no leader, unless unclean elections are allowed.
            (
                &[2, 1, 3],
                &[2],
                2,
                &[1, 3],
                Election::Online,
                NO_LEADER,
                false,
            ),
            (&[2, 1, 3], &[2], 2, &[1, 3], Election::Unclean, 1, true),
            (&[2, 1, 3], &[2], 2, &[3], Election::Unclean, 3, true),
            (
                &[2, 1, 3],
                &[2],
                2,
                &[],
                Election::Unclean,
                NO_LEADER,
                false,
            ),
            // A preferred election never goes outside the ISR.
            (
                &[2, 1, 3],
                &[2],
                NO_LEADER,
                &[1, 3],
                Election::Preferred,
                NO_LEADER,
                false,
            ),
        ];
        for (i, &(replicas, isr, leader, up, election, want, unclean)) in cases.iter().enumerate() {
            let current = partition(replicas, isr, leader);
            let after = next(&current, isr, live(up), election, false);
            let got = after.as_ref().map_or(current.leader, |a| a.leader);
            assert_eq!(got, want, "case {i}: {current:?} {election:?}");
            let recovering =
                after.as_ref().map(|a| a.leader_recovery) == Some(LeaderRecovery::Recovering);
            assert_eq!(recovering, unclean, "case {i}");
            if unclean {
                assert_eq!(after.as_ref().map(|a| a.isr.clone()), Some(vec![want]));
            }
        }
    }

    /// The epochs move as Kafka's PartitionRegistration.merge moves them: a leader change
    /// (to none too) +1 leader epoch, every change +1 partition epoch, nothing for no change.
    #[test]
    fn epochs_rise_with_every_change_and_only_then() {
        let current = partition(&[1, 2, 3], &[1, 2, 3], 1);
        assert_eq!(
            next(
                &current,
                &[1, 2, 3],
                live(&[1, 2, 3]),
                Election::Online,
                false
            ),
            None
        );
        let shrunk = next(&current, &[1, 2], live(&[1, 2, 3]), Election::Online, false)
            .expect("a shrink is a change");
        assert_eq!(
            (shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch),
            (1, 100, 201)
        );
        assert_eq!(shrunk.isr, vec![1, 2]);
        let moved = next(&current, &[2, 3], live(&[2, 3]), Election::Online, false)
            .expect("the leader left");
        assert_eq!(
            (moved.leader, moved.leader_epoch, moved.partition_epoch),
            (2, 101, 201)
        );
        assert_eq!(moved.isr, vec![2, 3]);
    }

    /// The last ISR member stays in the ISR when it goes: the partition has no leader until
    /// that replica is back (Kafka without ELR), and then it leads again.
    #[test]
    fn the_last_in_sync_replica_is_kept_and_leads_again_when_it_returns() {
        let current = partition(&[1, 2, 3], &[1], 1);
        let fenced = next(
            &current,
            &without(&current.isr, 1),
            live(&[2, 3]),
            Election::Online,
            false,
        )
        .expect("the leader was fenced");
        assert_eq!((fenced.leader, fenced.leader_epoch), (NO_LEADER, 101));
        assert_eq!(fenced.isr, vec![1]);
        let back = next(
            &fenced,
            &fenced.isr.clone(),
            live(&[1, 2, 3]),
            Election::Online,
            false,
        )
        .expect("it is back");
        assert_eq!(
            (back.leader, back.leader_epoch, back.partition_epoch),
            (1, 102, 202)
        );
    }

    /// An unclean leader reports recovery with its next ISR change, which clears RECOVERING.
    #[test]
    fn an_unclean_leader_recovers() {
        let current = partition(&[1, 2], &[1], 1);
        let unclean = next(&current, &[], live(&[2]), Election::Unclean, false).expect("elected");
        assert_eq!((unclean.leader, unclean.isr.clone()), (2, vec![2]));
        assert_eq!(unclean.leader_recovery, LeaderRecovery::Recovering);
        let recovered =
            next(&unclean, &[2], live(&[2]), Election::Online, true).expect("recovered");
        assert_eq!(recovered.leader_recovery, LeaderRecovery::Recovered);
        assert_eq!(recovered.leader_epoch, unclean.leader_epoch);
    }

    fn isr_change(leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> IsrChange {
        IsrChange {
            topic: "t".into(),
            partition: 0,
            leader_epoch,
            partition_epoch,
            new_isr: isr.iter().map(|&r| (r, -1)).collect(),
            recovered: false,
        }
    }

    fn code(result: Result<(), ControllerError>) -> i16 {
        match result {
            Ok(()) => 0,
            Err(e) => e.error_code(),
        }
    }

    /// Kafka's ReplicationControlManagerTest AlterPartition cases, in its order of checks.
    #[test]
    fn isr_changes_are_checked_in_kafkas_order() {
        let current = partition(&[1, 2, 3], &[1, 2], 1);
        let all = |_: i32, _: i64| true;
        let check = |sender, change: IsrChange| {
            code(check_isr_change(Some(&current), sender, &change, all))
        };
        assert_eq!(check(1, isr_change(100, 200, &[1, 2, 3])), 0);
        assert_eq!(
            check(1, isr_change(99, 200, &[1, 2, 3])),
            ErrorCode::FENCED_LEADER_EPOCH.0
        );
        assert_eq!(
            check(2, isr_change(100, 200, &[1, 2, 3])),
            ErrorCode::INVALID_REQUEST.0
        );
        assert_eq!(
            check(1, isr_change(101, 200, &[1, 2])),
            ErrorCode::NOT_CONTROLLER.0
        );
        assert_eq!(
            check(1, isr_change(100, 201, &[1, 2])),
            ErrorCode::NOT_CONTROLLER.0
        );
        assert_eq!(
            check(1, isr_change(100, 199, &[1])),
            ErrorCode::INVALID_UPDATE_VERSION.0
        );
        assert_eq!(
            check(1, isr_change(100, 200, &[1, 4])),
            ErrorCode::INVALID_REQUEST.0
        );
        assert_eq!(
            check(1, isr_change(100, 200, &[2, 3])),
            ErrorCode::INVALID_REQUEST.0
        );
        let fenced = |r: i32, _: i64| r != 3;
        assert_eq!(
            code(check_isr_change(
                Some(&current),
                1,
                &isr_change(100, 200, &[1, 2, 3]),
                fenced
            )),
            ErrorCode::INELIGIBLE_REPLICA.0
        );
        // A member already in the ISR is not judged again (a shrink always goes through).
        assert_eq!(
            code(check_isr_change(
                Some(&current),
                1,
                &isr_change(100, 200, &[1]),
                |_, _| false
            )),
            0
        );
        assert_eq!(
            code(check_isr_change(None, 1, &isr_change(100, 200, &[1]), all)),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0
        );
    }
}
