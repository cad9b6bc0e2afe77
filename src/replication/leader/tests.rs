use super::*;
use crate::controller::LeaderRecovery;

const LAG: i64 = 30_000;

impl LeaderState {
    /// A fetch by one of the partition's followers.
    fn fetched(
        &mut self,
        r: i32,
        epoch: i64,
        offset: i64,
        now: i64,
        end: i64,
        ok: bool,
    ) -> Vec<Effect> {
        self.follower_fetched(r, epoch, offset, now, end, ok)
            .expect("a follower of the partition")
    }
}

fn settings(min_insync_replicas: usize) -> LeaderSettings {
    LeaderSettings {
        replica_lag_time_max_ms: LAG,
        min_insync_replicas,
    }
}

fn meta(isr: &[i32]) -> PartitionMeta {
    PartitionMeta {
        leader_epoch: 5,
        leader: 1,
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
        partition_epoch: 9,
        leader_recovery: LeaderRecovery::Recovered,
    }
}

/// Leader 1 of replicas 1, 2, 3 whose log ends at `log_end`, at time 0.
fn leader(isr: &[i32], log_end: i64, high_watermark: i64, min_isr: usize) -> LeaderState {
    let position = LogPosition {
        log_end,
        high_watermark,
    };
    LeaderState::new("t", 0, 1, &meta(isr), position, settings(min_isr), 0)
}

fn proposal(effects: &[Effect]) -> Option<(u64, Vec<i32>)> {
    effects.iter().find_map(|e| match e {
        Effect::ProposeIsr { op, change } => {
            Some((*op, change.new_isr.iter().map(|(r, _)| *r).collect()))
        }
        Effect::HighWatermark(_) => None,
    })
}

fn hw_effect(effects: &[Effect]) -> Option<i64> {
    effects.iter().find_map(|e| match e {
        Effect::HighWatermark(hw) => Some(*hw),
        Effect::ProposeIsr { .. } => None,
    })
}

fn committed(leader: &LeaderState, isr: &[i32], partition_epoch: i32) -> Result<IsrState, i16> {
    Ok(IsrState {
        leader_epoch: leader.leader_epoch(),
        partition_epoch,
        isr: isr.to_vec(),
        recovering: false,
    })
}

/// The HW is the smallest log end of the ISR; it never falls and never passes the leader's.
#[test]
fn the_high_watermark_follows_the_slowest_in_sync_replica() {
    let mut l = leader(&[1, 2, 3], 100, 40, 1);
    assert_eq!(
        l.appended(100),
        vec![],
        "followers not heard at this epoch hold it"
    );
    assert_eq!(hw_effect(&l.fetched(2, 7, 80, 10, 100, true)), None);
    assert_eq!(hw_effect(&l.fetched(3, 7, 60, 10, 100, true)), Some(60));
    assert_eq!(hw_effect(&l.fetched(3, 7, 100, 20, 100, true)), Some(80));
    assert_eq!(hw_effect(&l.fetched(2, 7, 100, 20, 100, true)), Some(100));
    // A follower that truncated and fetches from below does not pull it back.
    assert_eq!(l.fetched(2, 7, 90, 30, 120, true), vec![]);
    assert_eq!(l.high_watermark(), 100);
    assert_eq!(l.acks_all_done(101), None);
    assert_eq!(l.acks_all_done(100), Some(ErrorCode::NONE));
}

/// A follower outside the ISR joins once it has the HW and this epoch's start: proposed,
/// counted at once for the HW, committed by the answer to that proposal only.
#[test]
fn a_caught_up_follower_joins_the_isr() {
    let mut l = leader(&[1, 2], 100, 100, 1);
    l.fetched(2, 7, 100, 0, 100, true);
    assert_eq!(
        proposal(&l.fetched(3, 8, 50, 0, 100, true)),
        None,
        "behind the HW"
    );
    l.appended(120);
    let effects = l.fetched(3, 8, 100, 1, 120, true);
    let (op, isr) = proposal(&effects).expect("proposed");
    assert_eq!(isr, vec![1, 2, 3]);
    match &effects[0] {
        Effect::ProposeIsr { change, .. } => {
            assert_eq!(change.new_isr, vec![(1, -1), (2, 7), (3, 8)]);
            assert_eq!((change.leader_epoch, change.partition_epoch), (5, 9));
        }
        other => panic!("{other:?}"),
    }
    // Pending, 3 holds the HW back already.
    l.fetched(2, 7, 120, 2, 120, true);
    assert_eq!(l.high_watermark(), 100);
    assert_eq!(l.maximal_isr(), vec![1, 2, 3]);
    // One proposal in flight.
    assert_eq!(proposal(&l.fetched(3, 8, 110, 3, 120, true)), None);
    // A stale answer does nothing; the right one commits.
    assert_eq!(
        l.alter_answered(op + 7, committed(&l, &[1, 2, 3], 10), 120),
        vec![]
    );
    assert_eq!(l.isr(), &[1, 2]);
    l.alter_answered(op, committed(&l, &[1, 2, 3], 10), 120);
    assert_eq!(l.isr(), &[1, 2, 3]);
    assert_eq!(hw_effect(&l.fetched(3, 8, 120, 4, 120, true)), Some(120));
}

/// A follower that has not reached where this leader epoch began does not join, nor one the
/// metadata has fenced, nor any while an unclean leader has not reported recovery.
#[test]
fn followers_join_only_with_this_epochs_history_and_when_eligible() {
    let mut l = leader(&[1], 100, 100, 1);
    assert_eq!(
        proposal(&l.fetched(2, 7, 100, 0, 100, false)),
        None,
        "fenced"
    );
    let mut behind = leader(&[1], 100, 90, 1);
    assert_eq!(proposal(&behind.fetched(2, 7, 95, 0, 100, true)), None);
    let mut m = meta(&[1]);
    m.leader_recovery = LeaderRecovery::Recovering;
    let position = LogPosition {
        log_end: 100,
        high_watermark: 100,
    };
    let mut unclean = LeaderState::new("t", 0, 1, &m, position, settings(1), 0);
    let (op, isr) = proposal(&unclean.start()).expect("reports recovery");
    assert_eq!(isr, vec![1]);
    assert_eq!(proposal(&unclean.fetched(2, 7, 100, 0, 100, true)), None);
    unclean.alter_answered(op, committed(&unclean, &[1], 10), 100);
    assert!(proposal(&unclean.fetched(2, 7, 100, 1, 100, true)).is_some());
}

/// Kafka's lag rule: a follower is out of sync once it has not been caught up for
/// `replica.lag.time.max.ms`; one that keeps fetching up to where the leader's log ended at
/// its previous fetch stays in, even while the leader keeps appending.
#[test]
fn a_lagging_follower_is_proposed_out_and_a_steady_one_stays() {
    let mut l = leader(&[1, 2, 3], 100, 100, 1);
    let mut end = 100;
    let mut now = 0;
    // 2 fetches each time up to where the log ended at its previous fetch, while the leader
    // appends 10 more; 3 never fetches.
    let (op, isr) = loop {
        l.fetched(2, 7, end, now, end + 10, true);
        end += 10;
        now += 10_000;
        let proposed = proposal(&l.tick(now, end));
        if now <= LAG {
            assert_eq!(proposed, None, "at {now}: 3 still has time");
            continue;
        }
        break proposed.expect("3 is out of sync");
    };
    assert_eq!(isr, vec![1, 2], "2 kept up");
    // A shrink counts once committed.
    assert_eq!(l.maximal_isr(), vec![1, 2, 3]);
    l.alter_answered(op, committed(&l, &[1, 2], 10), end);
    assert_eq!(l.maximal_isr(), vec![1, 2]);
}

/// min.insync.replicas: acks=all is refused before the append while the ISR is below it, the
/// HW does not rise then (strict minimum ISR), and a produce whose records the HW passed
/// before the ISR shrank below it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND.
#[test]
fn min_insync_replicas_holds_the_high_watermark_and_acks_all() {
    let mut l = leader(&[1, 2], 100, 100, 2);
    assert_eq!(l.check_acks_all(), Ok(()));
    l.fetched(2, 7, 110, 0, 110, true);
    assert_eq!(l.high_watermark(), 110);
    assert_eq!(l.acks_all_done(110), Some(ErrorCode::NONE));
    let shrunk = PartitionMeta {
        isr: vec![1],
        partition_epoch: 10,
        ..meta(&[1, 2])
    };
    l.registration(&shrunk, 120);
    assert_eq!(l.check_acks_all(), Err(ErrorCode::NOT_ENOUGH_REPLICAS));
    assert_eq!(
        l.appended(130),
        vec![],
        "alone below min.insync.replicas: no HW rise"
    );
    assert_eq!(l.high_watermark(), 110);
    assert_eq!(
        l.acks_all_done(110),
        Some(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    );
    assert_eq!(l.acks_all_done(120), None);
}

/// A registration the controller changed at the same leader epoch (it fenced a follower)
/// replaces the ISR and drops a proposal made from the older partition epoch; one from
/// another leader epoch or an older partition epoch changes nothing.
#[test]
fn a_newer_registration_replaces_the_isr_and_drops_the_proposal() {
    let mut l = leader(&[1, 2], 100, 100, 1);
    l.fetched(2, 7, 100, 0, 100, true);
    let (op, _) = proposal(&l.fetched(3, 8, 100, 0, 100, true)).expect("proposed");
    let controller_shrank = PartitionMeta {
        isr: vec![1],
        partition_epoch: 10,
        ..meta(&[1])
    };
    l.registration(&controller_shrank, 100);
    assert_eq!(l.maximal_isr(), vec![1]);
    assert_eq!(
        l.alter_answered(op, committed(&l, &[1, 2, 3], 11), 100),
        vec![]
    );
    assert_eq!(l.isr(), &[1]);
    let older = PartitionMeta {
        isr: vec![1, 2, 3],
        partition_epoch: 9,
        ..meta(&[1])
    };
    l.registration(&older, 100);
    assert_eq!(l.isr(), &[1]);
    // 3 may propose to join again from the new partition epoch.
    let effects = l.fetched(3, 8, 100, 1, 100, true);
    match effects
        .iter()
        .find(|e| matches!(e, Effect::ProposeIsr { .. }))
    {
        Some(Effect::ProposeIsr { change, .. }) => assert_eq!(change.partition_epoch, 10),
        other => panic!("{other:?}"),
    }
}

/// An answer that may hide an applied change (a timeout) keeps the proposal pending, its
/// maximal ISR counted, and a tick sends it again under the same operation id; a refusal that
/// says it was not applied drops it.
#[test]
fn an_uncertain_answer_keeps_the_proposal_and_a_refusal_drops_it() {
    let mut l = leader(&[1, 2], 100, 100, 1);
    l.fetched(2, 7, 100, 0, 100, true);
    let (op, _) = proposal(&l.fetched(3, 8, 100, 0, 100, true)).expect("proposed");
    assert_eq!(
        l.alter_answered(op, Err(ErrorCode::REQUEST_TIMED_OUT.0), 100),
        vec![]
    );
    assert_eq!(l.maximal_isr(), vec![1, 2, 3], "still counted");
    let (again, isr) = proposal(&l.tick(1, 100)).expect("sent again");
    assert_eq!((again, isr), (op, vec![1, 2, 3]));
    l.alter_answered(op, Err(ErrorCode::INELIGIBLE_REPLICA.0), 100);
    assert_eq!(l.maximal_isr(), vec![1, 2], "not applied: dropped");
}

/// Operation ids of a later leader epoch never match an earlier one's, so a late answer to
/// the old leadership cannot settle the new one's proposal.
#[test]
fn operation_ids_differ_across_leader_epochs() {
    let mut old = leader(&[1, 2], 100, 100, 1);
    old.fetched(2, 7, 100, 0, 100, true);
    let (old_op, _) = proposal(&old.fetched(3, 8, 100, 0, 100, true)).expect("proposed");
    let newer = PartitionMeta {
        leader_epoch: 6,
        ..meta(&[1, 2])
    };
    let position = LogPosition {
        log_end: 100,
        high_watermark: 100,
    };
    let mut l = LeaderState::new("t", 0, 1, &newer, position, settings(1), 0);
    l.fetched(2, 7, 100, 0, 100, true);
    let (op, _) = proposal(&l.fetched(3, 8, 100, 0, 100, true)).expect("proposed");
    assert_ne!(op, old_op);
    l.alter_answered(old_op, Err(ErrorCode::INELIGIBLE_REPLICA.0), 100);
    assert_eq!(
        l.maximal_isr(),
        vec![1, 2, 3],
        "the old answer settled nothing"
    );
}
