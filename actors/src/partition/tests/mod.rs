//! Tests of the pure partition state machine (docs/design.md §2-5), grouped by theme: starting,
//! pausing, retrying and bumping epochs (`mirroring`), failover through STOPPING (`failover`), a
//! stopped topic started again (`failback`), and the exploration of every reachable state under
//! every input (`exploration`). This module holds what they share: the retry environment, the
//! table of legal state writes, and the harness that drives a partition and checks each write.

mod exploration;
mod failback;
mod failover;
mod mirroring;

use super::*;
use kmirror_protocol::state::MirrorState;

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
            | Effect::AppendPidReset { op, .. }
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
        assert!(
            self.pending
                .contains(&Effect::AttachFetcher { leader_epoch: 20 })
        );
        self.pending.clear();
        assert_eq!(self.p.phase(), &Phase::Mirroring { bump: None });
    }
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

/// Drives a fresh partition through a failover to STOPPED (writable).
fn stopped(h: &mut Harness) {
    h.start_mirroring();
    failover(h, true);
    assert_eq!(h.p.phase(), &Phase::Stopped);
    h.pending.clear();
}
