//! The exploration of every state reachable within a bounded number of inputs, with every input
//! applied to each, against the transition table of docs/design.md §2.

use super::*;
use crate::partition::state::{BumpBranch, LsoBranch, Stopping};
use std::collections::{BTreeSet, HashSet, VecDeque};

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
            | Effect::AppendPidReset { op, .. }
            | Effect::ScheduleRetry { op, .. } => Some(*op),
            Effect::AttachFetcher { .. }
            | Effect::RaiseFetcherEpoch { .. }
            | Effect::SetReadOnly(_) => None,
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
                next_pending.retain(|e| {
                    !matches!(
                        e,
                        Effect::AttachFetcher { .. }
                            | Effect::RaiseFetcherEpoch { .. }
                            | Effect::SetReadOnly(_)
                    )
                });
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
