use super::state::{BumpBranch, LsoBranch, Stopping};
use super::*;
use kmirror_protocol::state::MirrorState;
use std::collections::{BTreeSet, HashSet, VecDeque};

fn env(policy: &RetryPolicy) -> Env<'_> {
    Env {
        random: 0.5,
        retry: policy,
    }
}

/// docs/design.md §2: target <- allowed sources; same -> same is always legal.
fn legal(from: MirrorState, to: MirrorState) -> bool {
    use MirrorState::*;
    from == to
        || match to {
            Preparing => matches!(from, Unknown | Stopped | Failed),
            Mirroring => matches!(from, Preparing | Paused | Failed),
            Pausing => from == Mirroring,
            Paused => from == Pausing,
            Stopping => matches!(from, Preparing | Mirroring | Pausing | Paused | Failed),
            Stopped => from == Stopping,
            Failed => true,
            Unknown => false,
        }
}

/// Drives a partition and remembers the effects it has not completed yet.
struct Harness {
    policy: RetryPolicy,
    p: Partition,
    pending: Vec<Effect>,
    persisted_log: Vec<MirrorState>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            policy: RetryPolicy::default(),
            p: Partition::default(),
            pending: Vec::new(),
            persisted_log: Vec::new(),
        }
    }

    fn send(&mut self, input: Input) -> Step {
        let before = self.p.persisted();
        let step = transition(&self.p, &input, &env(&self.policy));
        // A write is judged against what the coordinator holds when it is issued (for a load,
        // the record just read).
        let from = step.partition.persisted();
        for e in &step.effects {
            if let Effect::PersistState { stored, .. } = e {
                assert!(
                    legal(from, stored.state),
                    "{from} -> {} on {input:?}",
                    stored.state
                );
            }
        }
        if step.partition.persisted() != before {
            self.persisted_log.push(step.partition.persisted());
        }
        self.p = step.partition.clone();
        self.pending.extend(step.effects.iter().cloned());
        step
    }

    fn take(&mut self, pick: impl Fn(&Effect) -> bool) -> Effect {
        let at = self
            .pending
            .iter()
            .position(pick)
            .unwrap_or_else(|| panic!("no such effect in {:?}", self.pending));
        self.pending.remove(at)
    }

    fn persist_ok(&mut self, expected: MirrorState) -> StoredState {
        let Effect::PersistState { op, stored } =
            self.take(|e| matches!(e, Effect::PersistState { .. }))
        else {
            unreachable!()
        };
        assert_eq!(stored.state, expected);
        self.send(Input::StatePersisted { op, result: Ok(()) });
        stored
    }

    fn op_of(&mut self, pick: impl Fn(&Effect) -> bool) -> OpId {
        match self.take(pick) {
            Effect::LoadState { op }
            | Effect::LookUpLme { op }
            | Effect::TruncateForLme { op, .. }
            | Effect::AwaitIsr { op }
            | Effect::DetachFetcher { op }
            | Effect::BumpLeaderEpoch { op, .. }
            | Effect::TruncateToLso { op }
            | Effect::PersistLme { op, .. }
            | Effect::AppendPidReset { op }
            | Effect::ScheduleRetry { op, .. }
            | Effect::PersistState { op, .. } => op,
            other => panic!("{other:?} has no operation"),
        }
    }

    /// Leader at `leader_epoch` of a partition with no stored state, desired MIRRORING:
    /// PREPARING made durable, the LME lookup next.
    fn become_preparing(&mut self, leader_epoch: i32) {
        self.send(Input::BecameLeader {
            leader_epoch,
            desired: Desired::Mirroring,
        });
        let op = self.op_of(|e| matches!(e, Effect::LoadState { .. }));
        self.send(Input::StateLoaded { op, stored: None });
        self.persist_ok(MirrorState::Preparing);
    }

    fn start_mirroring(&mut self) {
        self.become_preparing(20);
        let op = self.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
        self.send(Input::LmeLookedUp { op, result: Ok(-1) });
        let op = self.op_of(|e| matches!(e, Effect::TruncateForLme { lme: -1, .. }));
        self.send(Input::Truncated { op, result: Ok(()) });
        let op = self.op_of(|e| matches!(e, Effect::AwaitIsr { .. }));
        self.send(Input::IsrCaughtUp { op });
        self.persist_ok(MirrorState::Mirroring);
        assert!(self.pending.contains(&Effect::AttachFetcher));
        self.pending.clear();
        assert_eq!(self.p.phase(), &Phase::Mirroring { bump: None });
    }
}

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

fn failover(h: &mut Harness, bump_first: bool) {
    h.send(Input::DesiredChanged(Desired::Stopped));
    h.persist_ok(MirrorState::Stopping);
    assert!(h.pending.contains(&Effect::SetReadOnly(true)));
    let op = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op });
    let bump = h.op_of(|e| {
        matches!(
            e,
            Effect::BumpLeaderEpoch {
                min_leader_epoch: None,
                ..
            }
        )
    });
    let truncate = h.op_of(|e| matches!(e, Effect::TruncateToLso { .. }));
    if bump_first {
        h.send(Input::EpochBumped {
            op: bump,
            result: Ok(31),
        });
        assert!(
            !h.pending
                .iter()
                .any(|e| matches!(e, Effect::AppendPidReset { .. }))
        );
    }
    h.send(Input::TruncatedToLso {
        op: truncate,
        result: Ok(Some(30)),
    });
    let lme = h.op_of(|e| matches!(e, Effect::PersistLme { lme: Some(30), .. }));
    h.send(Input::LmePersisted {
        op: lme,
        result: Ok(()),
    });
    if !bump_first {
        assert!(
            !h.pending
                .iter()
                .any(|e| matches!(e, Effect::AppendPidReset { .. }))
        );
        h.send(Input::EpochBumped {
            op: bump,
            result: Ok(31),
        });
    }
    let reset = h.op_of(|e| matches!(e, Effect::AppendPidReset { .. }));
    h.send(Input::PidResetAppended {
        op: reset,
        result: Ok(()),
    });
    h.persist_ok(MirrorState::Stopped);
    assert!(h.pending.contains(&Effect::SetReadOnly(false)));
    h.pending.clear();
    assert_eq!(h.p.phase(), &Phase::Stopped);
    assert_eq!(h.p.leader_epoch(), 31);
}

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

#[test]
fn restart_after_stop_prepares_again() {
    let mut h = Harness::new();
    h.start_mirroring();
    failover(&mut h, true);
    h.send(Input::DesiredChanged(Desired::Mirroring));
    h.persist_ok(MirrorState::Preparing);
    let op = h.op_of(|e| matches!(e, Effect::LookUpLme { .. }));
    h.send(Input::LmeLookedUp { op, result: Ok(30) });
    let op = h.op_of(|e| matches!(e, Effect::TruncateForLme { lme: 30, .. }));
    h.send(Input::Truncated { op, result: Ok(()) });
    let op = h.op_of(|e| matches!(e, Effect::AwaitIsr { .. }));
    h.send(Input::IsrCaughtUp { op });
    h.persist_ok(MirrorState::Mirroring);
    assert_eq!(h.p.phase(), &Phase::Mirroring { bump: None });
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
        [Effect::SetReadOnly(true), Effect::AttachFetcher]
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

/// Every input a partition can receive, with op ids taken from what it waits for (plus a stale
/// id), and each completion both succeeding and failing.
fn inputs_for(p: &Partition, pending: &[Effect]) -> Vec<Input> {
    let mut ops: BTreeSet<OpId> = pending
        .iter()
        .filter_map(|e| match e {
            Effect::LoadState { op }
            | Effect::PersistState { op, .. }
            | Effect::LookUpLme { op }
            | Effect::TruncateForLme { op, .. }
            | Effect::AwaitIsr { op }
            | Effect::DetachFetcher { op }
            | Effect::BumpLeaderEpoch { op, .. }
            | Effect::TruncateToLso { op }
            | Effect::PersistLme { op, .. }
            | Effect::AppendPidReset { op }
            | Effect::ScheduleRetry { op, .. } => Some(*op),
            Effect::AttachFetcher | Effect::SetReadOnly(_) => None,
        })
        .collect();
    ops.insert(OpId(9999));
    let retryable = Cause::retryable("transient");
    let fatal = Cause::fatal("fatal");
    let mut inputs = vec![
        Input::BecameLeader {
            leader_epoch: p.leader_epoch().max(0) + 1,
            desired: Desired::Mirroring,
        },
        Input::BecameLeader {
            leader_epoch: p.leader_epoch().max(0) + 1,
            desired: Desired::Stopped,
        },
        Input::LeaderEpochChanged {
            leader_epoch: p.leader_epoch() + 1,
        },
        Input::LostLeadership,
        Input::DesiredChanged(Desired::Mirroring),
        Input::DesiredChanged(Desired::Paused),
        Input::DesiredChanged(Desired::Stopped),
        Input::BatchesAppended {
            source_epoch: p.leader_epoch(),
        },
        Input::SourceEpochSeen {
            source_epoch: p.leader_epoch(),
        },
        Input::FetchFailed(retryable.clone()),
        Input::FetchFailed(fatal.clone()),
        Input::GaveUp("no progress".into()),
    ];
    for op in ops {
        inputs.push(Input::StateLoaded { op, stored: None });
        for state in [
            MirrorState::Mirroring,
            MirrorState::Paused,
            MirrorState::Stopping,
            MirrorState::Stopped,
            MirrorState::Failed,
        ] {
            inputs.push(Input::StateLoaded {
                op,
                stored: Some(StoredState {
                    state,
                    previous: MirrorState::Mirroring,
                    retry_attempt: 1,
                    error: None,
                    leader_epoch: 1,
                }),
            });
        }
        for cause in [&retryable, &fatal] {
            inputs.push(Input::StatePersisted {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::LmeLookedUp {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::Truncated {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::EpochBumped {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::TruncatedToLso {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::LmePersisted {
                op,
                result: Err(cause.clone()),
            });
            inputs.push(Input::PidResetAppended {
                op,
                result: Err(cause.clone()),
            });
        }
        inputs.extend([
            Input::StatePersisted { op, result: Ok(()) },
            Input::LmeLookedUp { op, result: Ok(-1) },
            Input::LmeLookedUp { op, result: Ok(4) },
            Input::Truncated { op, result: Ok(()) },
            Input::IsrCaughtUp { op },
            Input::FetcherDetached { op },
            Input::EpochBumped {
                op,
                result: Ok(p.leader_epoch() + 11),
            },
            Input::TruncatedToLso {
                op,
                result: Ok(Some(3)),
            },
            Input::LmePersisted { op, result: Ok(()) },
            Input::PidResetAppended { op, result: Ok(()) },
            Input::TimerFired { op },
        ]);
    }
    inputs
}

fn is_command(input: &Input) -> bool {
    matches!(
        input,
        Input::BecameLeader { .. }
            | Input::LeaderEpochChanged { .. }
            | Input::LostLeadership
            | Input::DesiredChanged(_)
            | Input::GaveUp(_)
    )
}

fn phase_kind(phase: &Phase) -> String {
    match phase {
        Phase::Preparing { step, .. } => format!("Preparing/{step:?}"),
        Phase::Stopping(Stopping::DetachingFetcher(_)) => "Stopping/Detaching".into(),
        Phase::Stopping(Stopping::Converging { bump, lso }) => format!(
            "Stopping/Converging/{}/{}",
            matches!(bump, BumpBranch::Done),
            match lso {
                LsoBranch::Truncating(_) => "truncating",
                LsoBranch::PersistingLme(_) => "lme",
                LsoBranch::Done => "done",
            }
        ),
        Phase::Stopping(Stopping::ResettingPids(_)) => "Stopping/ResettingPids".into(),
        Phase::Persisting { target, .. } => format!("Persisting/{}", target.state()),
        Phase::Failed { retry, .. } => format!("Failed/{}", retry.is_some()),
        Phase::Mirroring { bump } => format!("Mirroring/{}", bump.is_some()),
        Phase::Unknown => "Unknown".into(),
        Phase::Loading(_) => "Loading".into(),
        Phase::Pausing(_) => "Pausing".into(),
        Phase::Paused => "Paused".into(),
        Phase::Stopped => "Stopped".into(),
    }
}

/// Explores every state reachable within a bounded number of inputs and applies every input to
/// each: observed state writes are legal docs/design.md §2 transitions, commands are applied or
/// rejected with a typed reason (never dropped), stale completions change nothing.
#[test]
fn every_state_and_input_pair_obeys_the_transition_table() {
    let policy = RetryPolicy::default();
    let env = env(&policy);
    let mut seen: HashSet<String> = HashSet::new();
    let mut kinds: BTreeSet<String> = BTreeSet::new();
    let mut queue: VecDeque<(Partition, Vec<Effect>, usize)> = VecDeque::new();
    // Start from the empty partition and from points along the scenarios above, so a bounded
    // breadth-first search still reaches deep states.
    queue.push_back((Partition::default(), Vec::new(), 0));
    let mut h = Harness::new();
    h.start_mirroring();
    queue.push_back((h.p.clone(), h.pending.clone(), 0));
    h.send(Input::DesiredChanged(Desired::Stopped));
    h.persist_ok(MirrorState::Stopping);
    let op = h.op_of(|e| matches!(e, Effect::DetachFetcher { .. }));
    h.send(Input::FetcherDetached { op });
    queue.push_back((h.p.clone(), h.pending.clone(), 0));
    let bump = h.op_of(|e| matches!(e, Effect::BumpLeaderEpoch { .. }));
    h.send(Input::EpochBumped {
        op: bump,
        result: Ok(40),
    });
    let truncate = h.op_of(|e| matches!(e, Effect::TruncateToLso { .. }));
    h.send(Input::TruncatedToLso {
        op: truncate,
        result: Ok(Some(3)),
    });
    queue.push_back((h.p.clone(), h.pending.clone(), 0));
    let mut pairs = 0usize;
    while let Some((p, pending, depth)) = queue.pop_front() {
        if !seen.insert(format!("{p:?}|{pending:?}")) || seen.len() > 30_000 {
            continue;
        }
        kinds.insert(phase_kind(p.phase()));
        for input in inputs_for(&p, &pending) {
            pairs += 1;
            let step = transition(&p, &input, &env);
            match &step.outcome {
                Outcome::Applied => {}
                Outcome::Rejected(_) => {
                    assert!(is_command(&input), "only commands are rejected: {input:?}");
                    assert_eq!(step.partition, p);
                    assert!(step.effects.is_empty());
                }
                Outcome::Stale => {
                    assert!(
                        !is_command(&input),
                        "commands are never dropped: {input:?} in {p:?}"
                    );
                    assert_eq!(step.partition, p, "stale inputs change nothing");
                    assert!(step.effects.is_empty());
                }
            }
            for e in &step.effects {
                if let Effect::PersistState { stored, .. } = e {
                    assert!(
                        legal(step.partition.persisted(), stored.state),
                        "illegal write {} -> {} on {input:?} in {:?}",
                        step.partition.persisted(),
                        stored.state,
                        p.phase()
                    );
                    assert_eq!(stored.leader_epoch, step.partition.leader_epoch());
                }
            }
            if step.partition.persisted() != p.persisted() {
                assert!(matches!(
                    input,
                    Input::StatePersisted { result: Ok(()), .. } | Input::StateLoaded { .. }
                ));
                assert!(
                    legal(p.persisted(), step.partition.persisted())
                        || matches!(input, Input::StateLoaded { .. })
                );
            }
            if input_matters(&input) && depth < 6 && step.outcome == Outcome::Applied {
                let mut next_pending: Vec<Effect> = pending.clone();
                next_pending.extend(step.effects);
                next_pending
                    .retain(|e| !matches!(e, Effect::AttachFetcher | Effect::SetReadOnly(_)));
                if next_pending.len() > 6 {
                    next_pending.drain(..next_pending.len() - 6);
                }
                queue.push_back((step.partition, next_pending, depth + 1));
            }
        }
    }
    for expected in [
        "Unknown",
        "Loading",
        "Persisting/PREPARING",
        "Preparing/LookingUpLme",
        "Preparing/Truncating",
        "Preparing/WaitingForIsr",
        "Mirroring/false",
        "Mirroring/true",
        "Pausing",
        "Paused",
        "Stopping/Detaching",
        "Stopping/Converging/false/truncating",
        "Stopping/Converging/true/lme",
        "Stopping/Converging/false/done",
        "Stopping/ResettingPids",
        "Stopped",
        "Failed/true",
        "Failed/false",
    ] {
        assert!(
            kinds.contains(expected),
            "state {expected} not reached; reached {kinds:?}"
        );
    }
    assert!(pairs > 10_000, "only {pairs} (state, input) pairs driven");
}

/// Inputs worth exploring further from (the stale variants only repeat their origin).
fn input_matters(input: &Input) -> bool {
    !matches!(
        input,
        Input::StateLoaded { op: OpId(9999), .. }
            | Input::StatePersisted { op: OpId(9999), .. }
            | Input::TimerFired { op: OpId(9999) }
    )
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

/// Drives a fresh partition through a failover to STOPPED (writable).
fn stopped(h: &mut Harness) {
    h.start_mirroring();
    failover(h, true);
    assert_eq!(h.p.phase(), &Phase::Stopped);
    h.pending.clear();
}

/// Engine review finding 2: a restart of a stopped topic makes it read-only before PREPARING's
/// record is even issued, and a write that fails (the shard away) leaves it read-only: it must
/// not take produce that PREPARING then cuts. Failed before the fix: SetReadOnly(true) came only
/// with the durable PREPARING.
#[test]
fn a_restart_is_read_only_before_its_record_is_written() {
    let mut h = Harness::new();
    stopped(&mut h);
    let step = h.send(Input::DesiredChanged(Desired::Mirroring));
    let read_only = step
        .effects
        .iter()
        .position(|e| *e == Effect::SetReadOnly(true))
        .expect("read-only at once");
    let persist = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::PersistState { .. }))
        .expect("PREPARING written");
    assert!(read_only < persist, "{:?}", step.effects);
    let op = h.op_of(|e| matches!(e, Effect::PersistState { .. }));
    let step = h.send(Input::StatePersisted {
        op,
        result: Err(Cause::retryable(
            "the coordinator at b3: connection refused",
        )),
    });
    assert!(
        !step.effects.contains(&Effect::SetReadOnly(false)),
        "{:?}",
        step.effects
    );
    assert!(matches!(h.p.phase(), Phase::Failed { .. }));
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
