//! A partition started, paused and resumed, failing and retrying with backoff, given up on by a
//! supervisor, and bumping its leader epoch ahead of the source's.

use super::*;

#[test]
fn start_goes_unknown_preparing_mirroring() {
    let mut h = Harness::new();
    h.start_mirroring();
    assert_eq!(
        h.persisted_log,
        [MirrorState::Preparing, MirrorState::Mirroring]
    );
    assert_eq!(h.p.leader_epoch(), 20);
}

#[test]
fn a_supervisor_giving_up_detaches_the_fetcher_and_fails_for_good() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::GaveUp("no progress for 120000 ms".into()));
    assert!(
        h.pending
            .iter()
            .any(|e| matches!(e, Effect::DetachFetcher { .. }))
    );
    let stored = h.persist_ok(MirrorState::Failed);
    assert_eq!(stored.retry_attempt, -1);
    assert_eq!(stored.error.as_deref(), Some("no progress for 120000 ms"));
    assert!(
        !h.pending
            .iter()
            .any(|e| matches!(e, Effect::ScheduleRetry { .. })),
        "not retried: {:?}",
        h.pending
    );
    // Giving up on a failed partition changes nothing; a stop still clears it.
    let step = h.send(Input::GaveUp("again".into()));
    assert!(step.effects.is_empty());
    h.send(Input::DesiredChanged(Desired::Stopped));
    h.persist_ok(MirrorState::Stopping);
}

#[test]
fn a_partition_waiting_to_retry_fails_for_good_when_told() {
    let mut h = Harness::new();
    h.become_preparing(3);
    let op = h.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
    h.send(Input::LmeLookedUp {
        op,
        result: Err(Cause::retryable("connection refused")),
    });
    assert_eq!(h.persist_ok(MirrorState::Failed).retry_attempt, 1);
    let Effect::ScheduleRetry { op: timer, .. } =
        h.take(|e| matches!(e, Effect::ScheduleRetry { .. }))
    else {
        unreachable!()
    };
    // The source turned out to be another cluster: FAILED for good, with that reason.
    h.send(Input::GaveUp("another cluster".into()));
    let stored = h.persist_ok(MirrorState::Failed);
    assert_eq!(stored.retry_attempt, -1);
    assert_eq!(stored.error.as_deref(), Some("another cluster"));
    // The old retry timer no longer resumes it.
    let step = h.send(Input::TimerFired { op: timer });
    assert!(step.effects.is_empty(), "{:?}", step.effects);
}

#[test]
fn pause_and_resume_skip_truncation() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::DesiredChanged(Desired::Paused));
    h.persist_ok(MirrorState::Pausing);
    let op = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op });
    h.persist_ok(MirrorState::Paused);
    assert_eq!(h.p.phase(), &Phase::Paused);
    h.send(Input::DesiredChanged(Desired::Mirroring));
    h.persist_ok(MirrorState::Mirroring);
    assert_eq!(
        h.pending,
        [
            Effect::SetReadOnly(true),
            Effect::AttachFetcher { leader_epoch: 20 }
        ]
    );
    // Pausing a stopped partition is refused.
    h.pending.clear();
    failover(&mut h, false);
    let step = h.send(Input::DesiredChanged(Desired::Paused));
    assert_eq!(
        step.outcome,
        Outcome::Rejected(Rejection::CannotPause(MirrorState::Stopped))
    );
    assert_eq!(
        h.p.desired(),
        Desired::Stopped,
        "a rejected command changes nothing"
    );
}

#[test]
fn failures_retry_with_backoff_and_clear_on_success() {
    let mut h = Harness::new();
    h.become_preparing(3);
    for attempt in 1..=3i16 {
        let op = h.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
        h.send(Input::LmeLookedUp {
            op,
            result: Err(Cause::retryable("source unreachable")),
        });
        let stored = h.persist_ok(MirrorState::Failed);
        assert_eq!(
            (stored.previous, stored.retry_attempt),
            (MirrorState::Preparing, attempt)
        );
        assert_eq!(stored.error.as_deref(), Some("source unreachable"));
        let Effect::ScheduleRetry { op, after_ms } =
            h.take(|e| matches!(e, Effect::ScheduleRetry { .. }))
        else {
            unreachable!()
        };
        assert_eq!(
            after_ms,
            1000 << (attempt - 1),
            "random 0.5 means no jitter"
        );
        h.send(Input::TimerFired { op });
        h.persist_ok(MirrorState::Preparing);
    }
    let op = h.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
    h.send(Input::LmeLookedUp { op, result: Ok(-1) });
    let op = h.op_of(|e| matches!(e, Effect::TruncateForLme { .. }));
    h.send(Input::Truncated { op, result: Ok(()) });
    let op = h.op_of(|e| matches!(e, Effect::AwaitIsr { .. }));
    h.send(Input::IsrCaughtUp { op });
    let stored = h.persist_ok(MirrorState::Mirroring);
    assert_eq!(
        stored.retry_attempt, 3,
        "the count survives until data flows"
    );
    h.pending.clear();
    h.send(Input::BatchesAppended { source_epoch: 0 });
    assert_eq!(h.p.retry_attempt(), 0);
    assert!(
        !h.pending
            .iter()
            .any(|e| matches!(e, Effect::PersistState { .. })),
        "no second write races the state writes"
    );
    h.pending.clear();
    h.send(Input::DesiredChanged(Desired::Paused));
    let stored = h.persist_ok(MirrorState::Pausing);
    assert_eq!(
        stored.retry_attempt, 0,
        "the next write carries the cleared count"
    );
}

#[test]
fn non_retryable_failures_wait_for_stop_then_start() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::FetchFailed(Cause::fatal("source topic deleted")));
    let stored = h.persist_ok(MirrorState::Failed);
    assert_eq!(
        (stored.previous, stored.retry_attempt),
        (MirrorState::Mirroring, -1)
    );
    assert!(
        !h.pending
            .iter()
            .any(|e| matches!(e, Effect::ScheduleRetry { .. }))
    );
    // A new leader keeps it FAILED.
    h.pending.clear();
    h.send(Input::BecameLeader {
        leader_epoch: 21,
        desired: Desired::Mirroring,
    });
    let op = h.op_of(|e| matches!(e, Effect::LoadState { .. }));
    h.send(Input::StateLoaded {
        op,
        stored: Some(stored),
    });
    h.persist_ok(MirrorState::Failed);
    // The operator stops it, which clears the failure, then starts it again.
    h.pending.clear();
    failover(&mut h, true);
    assert_eq!(h.p.retry_attempt(), 0);
    h.send(Input::DesiredChanged(Desired::Mirroring));
    h.persist_ok(MirrorState::Preparing);
}

#[test]
fn a_config_change_retries_a_partition_failed_for_good_into_the_state_it_failed_in() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::FetchFailed(Cause::fatal("authentication failed")));
    h.persist_ok(MirrorState::Failed);
    h.pending.clear();
    // The operator fixed the mirror's password: it mirrors again, without a stop.
    let step = h.send(Input::Retry);
    assert!(!step.effects.is_empty(), "a retry starts at once");
    h.persist_ok(MirrorState::Mirroring);
    // A retry of a partition that has not failed does nothing.
    h.pending.clear();
    let step = h.send(Input::Retry);
    assert!(step.effects.is_empty(), "{:?}", step.effects);
}

#[test]
fn backoff_doubles_caps_and_jitters() {
    let policy = RetryPolicy::default();
    assert_eq!(policy.backoff_ms(1, 0.5), 1000);
    assert_eq!(policy.backoff_ms(4, 0.5), 8000);
    assert_eq!(policy.backoff_ms(30, 0.5), 300_000);
    assert_eq!(policy.backoff_ms(1, 0.0), 800);
    assert_eq!(policy.backoff_ms(1, 1.0), 1200);
}

#[test]
fn the_leader_epoch_is_bumped_before_the_source_catches_up() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::BatchesAppended { source_epoch: 5 });
    assert!(h.pending.is_empty(), "5 is far below 20");
    h.send(Input::BatchesAppended { source_epoch: 17 });
    let op = h.op_of(|e| {
        matches!(
            e,
            Effect::BumpLeaderEpoch {
                min_leader_epoch: Some(27),
                ..
            }
        )
    });
    h.send(Input::SourceEpochSeen { source_epoch: 18 });
    assert!(h.pending.is_empty(), "one bump at a time");
    h.send(Input::EpochBumped { op, result: Ok(28) });
    assert_eq!(h.p.leader_epoch(), 28);
    assert_eq!(h.p.phase(), &Phase::Mirroring { bump: None });
    assert_eq!(
        h.pending,
        [Effect::RaiseFetcherEpoch { leader_epoch: 28 }],
        "the fetcher is told the bumped epoch"
    );
}

/// The fetcher holds back batches above the epoch it knows: every rise of the destination
/// leader epoch while it runs is told to it, and only a rise.
#[test]
fn the_fetcher_is_told_every_rise_of_the_leader_epoch() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::LeaderEpochChanged { leader_epoch: 23 });
    assert_eq!(h.pending, [Effect::RaiseFetcherEpoch { leader_epoch: 23 }]);
    h.pending.clear();
    h.send(Input::LeaderEpochChanged { leader_epoch: 21 });
    assert!(h.pending.is_empty(), "a lower epoch changes nothing");
    assert_eq!(h.p.leader_epoch(), 23);
    // Paused, the fetcher is gone: nothing to tell.
    h.send(Input::DesiredChanged(Desired::Paused));
    h.persist_ok(MirrorState::Pausing);
    h.pending.clear();
    h.send(Input::LeaderEpochChanged { leader_epoch: 30 });
    assert!(h.pending.is_empty(), "{:?}", h.pending);
}

/// A source epoch seen while a bump is in flight is not lost: if the bump lands within reach
/// of it, another follows at once (an idle source tells its new epoch only once).
#[test]
fn a_source_epoch_seen_during_a_bump_is_kept_ahead_of_after_it() {
    let mut h = Harness::new();
    h.start_mirroring();
    h.send(Input::SourceEpochSeen { source_epoch: 17 });
    let op = h.op_of(|e| {
        matches!(
            e,
            Effect::BumpLeaderEpoch {
                min_leader_epoch: Some(27),
                ..
            }
        )
    });
    h.send(Input::SourceEpochSeen { source_epoch: 26 });
    assert!(h.pending.is_empty(), "one bump at a time");
    h.send(Input::EpochBumped { op, result: Ok(28) });
    assert_eq!(h.p.leader_epoch(), 28);
    h.op_of(|e| {
        matches!(
            e,
            Effect::BumpLeaderEpoch {
                min_leader_epoch: Some(36),
                ..
            }
        )
    });
}
