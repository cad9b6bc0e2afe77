//! Failover: a partition taken through STOPPING to STOPPED (the parallel branches in either
//! order, failures inside STOPPING, a failover never abandoned), and a stopped partition left
//! alone by give-ups and kept writable while its record loads.

use super::*;

#[test]
fn failover_completes_with_the_parallel_branches_in_either_order() {
    for bump_first in [true, false] {
        let mut h = Harness::new();
        h.start_mirroring();
        failover(&mut h, bump_first);
        assert_eq!(
            h.persisted_log,
            [
                MirrorState::Preparing,
                MirrorState::Mirroring,
                MirrorState::Stopping,
                MirrorState::Stopped
            ]
        );
    }
}

/// Issue 17 item 3: a supervisor or a halted sync giving up never touches a STOPPED or PAUSED
/// partition (a stopped topic holds writes made since its failover).
#[test]
fn giving_up_leaves_stopped_and_paused_partitions_alone() {
    let mut h = Harness::new();
    h.start_mirroring();
    failover(&mut h, true);
    let step = h.send(Input::GaveUp("the source is another cluster".into()));
    assert_eq!(
        step.outcome,
        Outcome::Rejected(Rejection::LeftAlone(MirrorState::Stopped))
    );
    assert!(step.effects.is_empty());
    assert_eq!(h.p.phase(), &Phase::Stopped);

    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::DesiredChanged(Desired::Paused));
    h.persist_ok(MirrorState::Pausing);
    let op = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op });
    h.persist_ok(MirrorState::Paused);
    let step = h.send(Input::GaveUp("no progress".into()));
    assert_eq!(
        step.outcome,
        Outcome::Rejected(Rejection::LeftAlone(MirrorState::Paused))
    );
    assert_eq!(h.p.phase(), &Phase::Paused);
}

/// Issue 17 item 3: a mirror halted before its partitions loaded their state fails only the
/// ones that load mirroring; one that loads STOPPED becomes writable again.
#[test]
fn giving_up_before_the_state_loads_is_decided_by_the_loaded_state() {
    let stopped = StoredState {
        state: MirrorState::Stopped,
        previous: MirrorState::Unknown,
        retry_attempt: 0,
        error: None,
        leader_epoch: 31,
    };
    let mut h = Harness::new();
    h.send(Input::BecameLeader {
        leader_epoch: 32,
        desired: Desired::Stopped,
    });
    h.send(Input::GaveUp("the source is another cluster".into()));
    let op = h.op_of(|e| matches!(e, Effect::LoadState { .. }));
    h.send(Input::StateLoaded {
        op,
        stored: Some(stopped),
    });
    h.persist_ok(MirrorState::Stopped);
    assert!(h.pending.contains(&Effect::SetReadOnly(false)));
    assert_eq!(h.p.phase(), &Phase::Stopped);

    let mirroring = StoredState {
        state: MirrorState::Mirroring,
        previous: MirrorState::Unknown,
        retry_attempt: 0,
        error: None,
        leader_epoch: 31,
    };
    let mut h = Harness::new();
    h.send(Input::BecameLeader {
        leader_epoch: 32,
        desired: Desired::Mirroring,
    });
    h.send(Input::GaveUp("the source is another cluster".into()));
    let op = h.op_of(|e| matches!(e, Effect::LoadState { .. }));
    h.send(Input::StateLoaded {
        op,
        stored: Some(mirroring),
    });
    let stored = h.persist_ok(MirrorState::Failed);
    assert_eq!(stored.retry_attempt, -1);
    assert_eq!(
        stored.error.as_deref(),
        Some("the source is another cluster")
    );
}

/// Issue 17 items 5 and 7: a failure inside STOPPING waits out its backoff before STOPPING
/// runs again (no hot loop of coordinator writes), and keeps the STOPPING record, so a
/// restart meanwhile still knows the log was aligned and records the LME.
#[test]
fn a_failure_in_stopping_backs_off_and_keeps_the_alignment() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::DesiredChanged(Desired::Stopped));
    let stopping = h.persist_ok(MirrorState::Stopping);
    assert_eq!(stopping.previous, MirrorState::Mirroring, "aligned");
    let op = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op });
    let truncate = h.op_of(|e| matches!(e, Effect::TruncateToLso { .. }));
    let step = h.send(Input::TruncatedToLso {
        op: truncate,
        result: Err(Cause::retryable("disk full")),
    });
    assert!(
        !step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::PersistState { .. })),
        "no write until the backoff passed: {:?}",
        step.effects
    );
    let Some(Effect::ScheduleRetry {
        op: timer,
        after_ms,
    }) = step
        .effects
        .iter()
        .find(|e| matches!(e, Effect::ScheduleRetry { .. }))
        .cloned()
    else {
        panic!("no retry scheduled: {:?}", step.effects)
    };
    assert!(after_ms >= 800, "{after_ms}");
    assert_eq!(h.p.phase().state(), MirrorState::Failed);
    assert_eq!(h.p.persisted(), MirrorState::Stopping);

    // A restart now: the new leader reads the STOPPING record and records the real LME.
    let mut restarted = Harness::new();
    restarted.send(Input::BecameLeader {
        leader_epoch: 40,
        desired: Desired::Stopped,
    });
    let op = restarted.op_of(|e| matches!(e, Effect::LoadState { .. }));
    restarted.send(Input::StateLoaded {
        op,
        stored: Some(stopping),
    });
    restarted.persist_ok(MirrorState::Stopping);
    let op = restarted.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    restarted.send(Input::FetcherDetached { op });
    let op = restarted.op_of(|e| matches!(e, Effect::TruncateToLso { .. }));
    restarted.send(Input::TruncatedToLso {
        op,
        result: Ok(Some(30)),
    });
    restarted.op_of(|e| matches!(e, Effect::PersistLme { lme: Some(30), .. }));

    // Without a restart, the timer resumes STOPPING, still aligned.
    h.pending.clear();
    h.send(Input::TimerFired { op: timer });
    let again = h.persist_ok(MirrorState::Stopping);
    assert_eq!(again.previous, MirrorState::Mirroring);
}

/// Engine review finding 9: a partition whose topic is stopped but has no state record (stopped
/// before its first record, or the record lost) runs STOPPING, whose steps are idempotent, instead
/// of turning writable with no LSO cut, no bump and no barrier. Failed before the fix: it went
/// straight to writable.
#[test]
fn stopped_without_a_record_still_runs_stopping() {
    let mut h = Harness::new();
    h.send(Input::BecameLeader {
        leader_epoch: 4,
        desired: Desired::Stopped,
    });
    let op = h.op_of(|e| matches!(e, Effect::LoadState { .. }));
    let step = h.send(Input::StateLoaded { op, stored: None });
    assert!(
        !step.effects.contains(&Effect::SetReadOnly(false)),
        "{:?}",
        step.effects
    );
    // The state table reaches STOPPING through PREPARING, which stops at once.
    h.persist_ok(MirrorState::Preparing);
    h.persist_ok(MirrorState::Stopping);
    assert!(
        h.pending
            .iter()
            .any(|e| matches!(e, Effect::DetachFetcher { .. }))
    );
}

/// Engine review finding 12: a stopped topic's partition that becomes leader again (a broker
/// restart, a supervisor restart) is not made read-only while its record is read; the broker
/// opened it writable because its log holds the barrier. Failed before the fix: BecameLeader
/// always emitted SetReadOnly(true), so produce failed for as long as the shard was away.
#[test]
fn a_stopped_partition_stays_writable_while_its_record_loads() {
    let mut h = Harness::new();
    let step = h.send(Input::BecameLeader {
        leader_epoch: 9,
        desired: Desired::Stopped,
    });
    assert!(
        !step.effects.contains(&Effect::SetReadOnly(true)),
        "{:?}",
        step.effects
    );
    // Loading is not busy: a shard away for long is not a reason for a supervisor to give up.
    assert!(!h.p.phase().is_busy());
    // A mirrored one is read-only at once.
    let mut m = Harness::new();
    let step = m.send(Input::BecameLeader {
        leader_epoch: 9,
        desired: Desired::Mirroring,
    });
    assert!(step.effects.contains(&Effect::SetReadOnly(true)));
}

/// Engine review finding 13: a failover, once started, is retried whatever fails inside it: a
/// fatal cause, more failures than the policy's attempts, a supervisor giving up while a retry
/// waits. Failed before the fix: each left the partition read-only with no timer.
#[test]
fn a_failover_is_never_abandoned() {
    let mut h = Harness::new();
    h.policy.max_attempts = 2;
    h.start_mirroring();
    h.send(Input::DesiredChanged(Desired::Stopped));
    h.persist_ok(MirrorState::Stopping);
    let detach = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op: detach });
    for attempt in 0..5 {
        let bump = h.op_of(|e| matches!(e, Effect::BumpLeaderEpoch { .. }));
        h.pending.clear();
        h.send(Input::EpochBumped {
            op: bump,
            result: Err(Cause::fatal("the partition is gone")),
        });
        let Phase::Failed {
            failure,
            retry: Some(timer),
        } = h.p.phase().clone()
        else {
            panic!("attempt {attempt}: no retry in {:?}", h.p.phase());
        };
        assert_eq!(failure.previous, MirrorState::Stopping);
        assert!(failure.retry_attempt > 0 && failure.retry_attempt <= 2);
        if attempt == 3 {
            // A supervisor giving up while the retry waits does not end the failover either.
            h.send(Input::GaveUp("no progress".into()));
            assert!(
                matches!(h.p.phase(), Phase::Failed { retry: Some(_), .. }),
                "{:?}",
                h.p.phase()
            );
            let Phase::Failed {
                retry: Some(timer), ..
            } = h.p.phase().clone()
            else {
                unreachable!()
            };
            h.pending.clear();
            h.send(Input::TimerFired { op: timer });
        } else {
            h.send(Input::TimerFired { op: timer });
        }
        h.persist_ok(MirrorState::Stopping);
        let detach = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
        h.send(Input::FetcherDetached { op: detach });
    }
}
