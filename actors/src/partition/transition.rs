//! The one transition function of a mirror partition: `(partition, input, env) -> (partition,
//! effects)`, pure. No clock, no I/O, no actix: time arrives as inputs (`TimerFired`), randomness
//! as `Env::random`.
//!
//! Rules it follows (docs/design.md §2 and §5):
//! - A new state is written to the coordinator first ([`Effect::PersistState`]); its side effects
//!   start only when [`Input::StatePersisted`] confirms the write.
//! - The next state on leadership gain and on a desired-state change follows the docs/design.md §2
//!   rule, with one reading made explicit: a FAILED partition stays FAILED (its retries decide),
//!   except that a stop request takes it to STOPPING, which is how an operator clears a failure.
//! - A state is settled (MIRRORING, PAUSED, STOPPED, FAILED) or busy; a desired-state change
//!   that arrives while busy is remembered and applied when the partition settles, except a
//!   stop, which preempts PREPARING and PAUSING at once.
//! - Failures record the state they happened in and retry into it after an exponential backoff
//!   with jitter; non-retryable ones wait for an operator: a stop, or a change of the mirror's
//!   configs ([`Input::Retry`]).
//! - A completion whose operation id the current phase does not wait for is stale: ignored.

use super::state::{
    BumpBranch, Cause, Desired, Effect, Failure, Input, LsoBranch, OpId, Phase, PreparePhase,
    Rejection, Stopping, StoredState, Target,
};
use crate::epoch;
use kmirror_protocol::state::MirrorState;

/// Retry settings of FAILED partitions (`mirror.failed.retry.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Delay before the first retry.
    pub initial_backoff_ms: u64,
    /// Longest delay.
    pub max_backoff_ms: u64,
    /// Retries before the partition waits for an operator.
    pub max_attempts: i16,
    /// Relative jitter: the delay is scaled by a factor in `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff_ms: 1000,
            max_backoff_ms: 300_000,
            max_attempts: 100,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based), given a random draw in `[0, 1)`.
    pub fn backoff_ms(&self, attempt: i16, random: f64) -> u64 {
        let doublings = u32::try_from(attempt.max(1) - 1).unwrap_or(0).min(40);
        let base = self
            .initial_backoff_ms
            .saturating_mul(1u64 << doublings)
            .min(self.max_backoff_ms) as f64;
        let factor = 1.0 + self.jitter * (2.0 * random.clamp(0.0, 1.0) - 1.0);
        (base * factor).round() as u64
    }
}

/// What the transition may consult besides the partition and the input.
#[derive(Debug, Clone, Copy)]
pub struct Env<'a> {
    /// A uniform draw in `[0, 1)` from the shell's RNG, used for retry jitter.
    pub random: f64,
    /// Retry settings.
    pub retry: &'a RetryPolicy,
}

/// How an input was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It changed the partition or produced effects.
    Applied,
    /// A completion the partition no longer waits for (or a fact that does not apply in this
    /// phase): dropped.
    Stale,
    /// A command that cannot be honoured; nothing changed.
    Rejected(Rejection),
}

/// The result of one transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The partition after the input.
    pub partition: Partition,
    /// What the shell must do, in order.
    pub effects: Vec<Effect>,
    /// How the input was taken.
    pub outcome: Outcome,
}

/// One mirror partition's state machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    phase: Phase,
    desired: Desired,
    /// The destination leader epoch (DLE) while this broker leads; -1 otherwise.
    leader_epoch: i32,
    /// The greatest source epoch seen while mirroring (the SLE, or a batch's): a bump that
    /// lands below it is followed by another (DLE >= SLE).
    source_epoch: i32,
    /// Consecutive failures, carried through retries until a success clears them.
    retry_attempt: i16,
    /// The state the coordinator holds, as far as this partition knows.
    persisted: MirrorState,
    /// Whether the log holds only history shared with this mirror's source: set once PREPARING
    /// has truncated for the LME. A STOPPING of an unaligned log records no LME (-1), since the
    /// log's newest epoch is then this cluster's own, not one it took from the source.
    aligned: bool,
    /// A supervisor or the metadata sync gave up on the partition before its state was loaded:
    /// applied once it is, unless it loads STOPPED or PAUSED.
    given_up: Option<String>,
    next_op: u64,
}

impl Default for Partition {
    fn default() -> Self {
        Partition {
            phase: Phase::Unknown,
            desired: Desired::Mirroring,
            leader_epoch: -1,
            source_epoch: -1,
            retry_attempt: 0,
            persisted: MirrorState::Unknown,
            aligned: false,
            given_up: None,
            next_op: 1,
        }
    }
}

/// Takes one input: the transition function.
pub fn transition(partition: &Partition, input: &Input, env: &Env<'_>) -> Step {
    let mut next = partition.clone();
    let mut effects = Vec::new();
    let outcome = next.apply(input, env, &mut effects);
    if outcome != Outcome::Applied {
        return Step {
            partition: partition.clone(),
            effects: Vec::new(),
            outcome,
        };
    }
    // The fetcher holds the epoch it was attached with: a rise while it keeps running (a
    // metadata leader epoch change, a bump answered) is told to it, whatever input raised it.
    let fetching = |p: &Partition| matches!(p.phase, Phase::Mirroring { .. });
    if fetching(partition) && fetching(&next) && next.leader_epoch > partition.leader_epoch {
        effects.push(Effect::RaiseFetcherEpoch {
            leader_epoch: next.leader_epoch,
        });
    }
    Step {
        partition: next,
        effects,
        outcome,
    }
}

impl Partition {
    /// Where the partition is.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// What `mirror.name` asks.
    pub fn desired(&self) -> Desired {
        self.desired
    }

    /// The destination leader epoch, -1 when not leader.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Consecutive failures.
    pub fn retry_attempt(&self) -> i16 {
        self.retry_attempt
    }

    /// The last state this partition wrote to (or read from) the coordinator.
    pub fn persisted(&self) -> MirrorState {
        self.persisted
    }

    fn op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        op
    }

    fn apply(&mut self, input: &Input, env: &Env<'_>, fx: &mut Vec<Effect>) -> Outcome {
        use Outcome::{Applied, Stale};
        match (input, &self.phase) {
            (
                Input::BecameLeader {
                    leader_epoch,
                    desired,
                },
                _,
            ) => {
                if matches!(self.phase, Phase::Mirroring { .. } | Phase::Pausing(_)) {
                    // A previous leadership's fetcher may still run.
                    let op = self.op();
                    fx.push(Effect::DetachFetcher { op });
                }
                self.leader_epoch = *leader_epoch;
                self.desired = *desired;
                self.given_up = None;
                let op = self.op();
                self.phase = Phase::Loading(op);
                // A stopped topic keeps the writability the broker opened it with (writable
                // when its log holds the barrier of a finished failover) while its record is
                // read: its shard may be away (docs/failover.md). Whatever the record then
                // asks that is not STOPPED makes it read-only first.
                if *desired != Desired::Stopped {
                    fx.push(Effect::SetReadOnly(true));
                }
                fx.push(Effect::LoadState { op });
                Applied
            }
            (Input::LeaderEpochChanged { leader_epoch }, _) => {
                if self.leader_epoch < 0 {
                    return Outcome::Rejected(Rejection::NotLeader);
                }
                self.leader_epoch = self.leader_epoch.max(*leader_epoch);
                Applied
            }
            (Input::LostLeadership, _) => {
                if self.leader_epoch < 0 {
                    return Outcome::Rejected(Rejection::NotLeader);
                }
                if matches!(
                    self.phase,
                    Phase::Mirroring { .. }
                        | Phase::Pausing(_)
                        | Phase::Stopping(Stopping::DetachingFetcher(_))
                ) {
                    let op = self.op();
                    fx.push(Effect::DetachFetcher { op });
                }
                self.phase = Phase::Unknown;
                self.leader_epoch = -1;
                Applied
            }
            (Input::DesiredChanged(desired), _) => self.on_desired(*desired, fx),
            (Input::StateLoaded { op, stored }, Phase::Loading(waiting)) if op == waiting => {
                self.on_loaded(stored.as_ref(), fx);
                Applied
            }
            (
                Input::StatePersisted { op, result },
                Phase::Persisting {
                    op: waiting,
                    target,
                },
            ) if op == waiting => {
                let target = target.clone();
                match result {
                    Ok(()) => {
                        self.persisted = target.state();
                        self.enter(target, env, fx);
                    }
                    Err(cause) => self.fail_unpersisted(&target, cause, env, fx),
                }
                Applied
            }
            (
                Input::LmeLookedUp { op, result },
                Phase::Preparing {
                    op: waiting,
                    step: PreparePhase::LookingUpLme,
                },
            ) if op == waiting => {
                match result {
                    Ok(lme) => {
                        let op = self.op();
                        self.phase = Phase::Preparing {
                            op,
                            step: PreparePhase::Truncating,
                        };
                        fx.push(Effect::TruncateForLme { op, lme: *lme });
                    }
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::Truncated { op, result },
                Phase::Preparing {
                    op: waiting,
                    step: PreparePhase::Truncating,
                },
            ) if op == waiting => {
                match result {
                    Ok(()) => {
                        self.aligned = true;
                        let op = self.op();
                        self.phase = Phase::Preparing {
                            op,
                            step: PreparePhase::WaitingForIsr,
                        };
                        fx.push(Effect::AwaitIsr { op });
                    }
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::IsrCaughtUp { op },
                Phase::Preparing {
                    op: waiting,
                    step: PreparePhase::WaitingForIsr,
                },
            ) if op == waiting => {
                self.begin(Target::Mirroring, fx);
                Applied
            }
            (Input::FetcherDetached { op }, Phase::Pausing(waiting)) if op == waiting => {
                self.begin(Target::Paused, fx);
                Applied
            }
            (
                Input::FetcherDetached { op },
                Phase::Stopping(Stopping::DetachingFetcher(waiting)),
            ) if op == waiting => {
                let bump = self.op();
                let truncate = self.op();
                self.phase = Phase::Stopping(Stopping::Converging {
                    bump: BumpBranch::InFlight(bump),
                    lso: LsoBranch::Truncating(truncate),
                });
                fx.push(Effect::BumpLeaderEpoch {
                    op: bump,
                    min_leader_epoch: None,
                });
                fx.push(Effect::TruncateToLso { op: truncate });
                Applied
            }
            (Input::BatchesAppended { source_epoch }, Phase::Mirroring { bump }) => {
                let bump = *bump;
                // A successful append clears the failure count. It is not written on its own:
                // two state writes in flight could land out of order, so the coordinator learns
                // it with the next state write.
                self.retry_attempt = 0;
                self.source_epoch = self.source_epoch.max(*source_epoch);
                if bump.is_none() {
                    self.keep_epoch_ahead(fx);
                }
                Applied
            }
            (Input::SourceEpochSeen { source_epoch }, Phase::Mirroring { bump }) => {
                let bump = *bump;
                self.source_epoch = self.source_epoch.max(*source_epoch);
                if bump.is_none() {
                    self.keep_epoch_ahead(fx);
                }
                Applied
            }
            (Input::FetchFailed(cause), Phase::Mirroring { .. }) => {
                let op = self.op();
                fx.push(Effect::DetachFetcher { op });
                self.fail(cause, env, fx);
                Applied
            }
            (
                Input::EpochBumped { op, result },
                Phase::Mirroring {
                    bump: Some(waiting),
                },
            ) if op == waiting => {
                // A failed bump is tried again on the next append; one that landed still
                // within reach of a source epoch seen meanwhile is followed by another.
                self.phase = Phase::Mirroring { bump: None };
                if let Ok(epoch) = result {
                    self.leader_epoch = self.leader_epoch.max(*epoch);
                    self.keep_epoch_ahead(fx);
                }
                Applied
            }
            (
                Input::EpochBumped { op, result },
                Phase::Stopping(Stopping::Converging {
                    bump: BumpBranch::InFlight(waiting),
                    lso,
                }),
            ) if op == waiting => {
                let lso = *lso;
                match result {
                    Ok(epoch) => {
                        self.leader_epoch = self.leader_epoch.max(*epoch);
                        self.converge(BumpBranch::Done, lso, fx);
                    }
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::TruncatedToLso { op, result },
                Phase::Stopping(Stopping::Converging {
                    bump,
                    lso: LsoBranch::Truncating(waiting),
                }),
            ) if op == waiting => {
                let bump = *bump;
                match result {
                    Ok(latest_epoch) => {
                        let op = self.op();
                        fx.push(Effect::PersistLme {
                            op,
                            lme: latest_epoch.filter(|_| self.aligned),
                        });
                        self.converge(bump, LsoBranch::PersistingLme(op), fx);
                    }
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::LmePersisted { op, result },
                Phase::Stopping(Stopping::Converging {
                    bump,
                    lso: LsoBranch::PersistingLme(waiting),
                }),
            ) if op == waiting => {
                let bump = *bump;
                match result {
                    Ok(()) => self.converge(bump, LsoBranch::Done, fx),
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::PidResetAppended { op, result },
                Phase::Stopping(Stopping::ResettingPids(waiting)),
            ) if op == waiting => {
                match result {
                    Ok(()) => self.begin(Target::Stopped, fx),
                    Err(cause) => self.fail(cause, env, fx),
                }
                Applied
            }
            (
                Input::TimerFired { op },
                Phase::Failed {
                    failure,
                    retry: Some(waiting),
                },
            ) if op == waiting => {
                let target = self.resume_target(failure.previous);
                self.begin(target, fx);
                Applied
            }
            (Input::Retry, Phase::Failed { failure, .. }) => {
                if self.leader_epoch < 0 {
                    return Outcome::Rejected(Rejection::NotLeader);
                }
                let target = self.resume_target(failure.previous);
                self.begin(target, fx);
                Applied
            }
            // Only a FAILED partition has something to retry.
            (Input::Retry, _) => Stale,
            (Input::GaveUp(reason), _) => {
                if self.leader_epoch < 0 {
                    return Outcome::Rejected(Rejection::NotLeader);
                }
                let fatal = Cause::fatal(reason.clone());
                match &self.phase {
                    // Failed for good already, or an ordinary topic: nothing to give up.
                    Phase::Failed { retry: None, .. } | Phase::Unknown => {}
                    // STOPPED and PAUSED need nothing that can fail (a stopped topic holds the
                    // writes made since its failover): left alone.
                    Phase::Stopped
                    | Phase::Paused
                    | Phase::Persisting {
                        target: Target::Stopped | Target::Paused,
                        ..
                    } => return Outcome::Rejected(Rejection::LeftAlone(self.phase.state())),
                    // Its state is not known yet: decided once loaded.
                    Phase::Loading(_) => self.given_up = Some(reason.clone()),
                    // Failed but waiting to retry: it fails for good (its timer goes stale).
                    Phase::Failed { retry: Some(_), .. } => self.fail(&fatal, env, fx),
                    Phase::Mirroring { .. } | Phase::Pausing(_) => {
                        let op = self.op();
                        fx.push(Effect::DetachFetcher { op });
                        self.fail(&fatal, env, fx);
                    }
                    // A failover is finished whatever the source does: it is retried.
                    Phase::Stopping(stopping) => {
                        if matches!(stopping, Stopping::DetachingFetcher(_)) {
                            let op = self.op();
                            fx.push(Effect::DetachFetcher { op });
                        }
                        self.fail(&Cause::retryable(reason.clone()), env, fx);
                    }
                    Phase::Persisting {
                        target: Target::Stopping,
                        ..
                    } => self.fail(&Cause::retryable(reason.clone()), env, fx),
                    Phase::Persisting { .. } | Phase::Preparing { .. } => {
                        self.fail(&fatal, env, fx)
                    }
                }
                Applied
            }
            (
                Input::StateLoaded { .. }
                | Input::StatePersisted { .. }
                | Input::LmeLookedUp { .. }
                | Input::Truncated { .. }
                | Input::IsrCaughtUp { .. }
                | Input::FetcherDetached { .. }
                | Input::BatchesAppended { .. }
                | Input::SourceEpochSeen { .. }
                | Input::FetchFailed(_)
                | Input::EpochBumped { .. }
                | Input::TruncatedToLso { .. }
                | Input::LmePersisted { .. }
                | Input::PidResetAppended { .. }
                | Input::TimerFired { .. },
                _,
            ) => Stale,
        }
    }

    /// DLE >= SLE: asks for a bump when the greatest source epoch seen comes close (one bump
    /// at a time).
    fn keep_epoch_ahead(&mut self, fx: &mut Vec<Effect>) {
        if self.source_epoch < 0 {
            return;
        }
        if let Some(min) = epoch::bump_for(self.source_epoch, self.leader_epoch) {
            let op = self.op();
            self.phase = Phase::Mirroring { bump: Some(op) };
            fx.push(Effect::BumpLeaderEpoch {
                op,
                min_leader_epoch: Some(min),
            });
        }
    }

    /// STOPPING step 2 advanced; both branches done starts step 3.
    fn converge(&mut self, bump: BumpBranch, lso: LsoBranch, fx: &mut Vec<Effect>) {
        if bump == BumpBranch::Done && lso == LsoBranch::Done {
            let op = self.op();
            self.phase = Phase::Stopping(Stopping::ResettingPids(op));
            fx.push(Effect::AppendPidReset {
                op,
                leader_epoch: self.leader_epoch,
            });
        } else {
            self.phase = Phase::Stopping(Stopping::Converging { bump, lso });
        }
    }

    fn stored_for(&self, target: &Target) -> StoredState {
        let (previous, retry_attempt, error) = match target {
            Target::Failed(f) => (f.previous, f.retry_attempt, Some(f.error.clone())),
            // STOPPING's PreviousState says whether the log was aligned with the source, so a
            // STOPPING resumed by a new leader records the right LME.
            Target::Stopping if self.aligned => (MirrorState::Mirroring, self.retry_attempt, None),
            Target::Stopping => (MirrorState::Preparing, self.retry_attempt, None),
            _ => (MirrorState::Unknown, self.retry_attempt, None),
        };
        StoredState {
            state: target.state(),
            previous,
            retry_attempt,
            error,
            leader_epoch: self.leader_epoch,
        }
    }

    /// Writes `target` first; [`Partition::enter`] runs when the write is confirmed. The two
    /// states a writable partition enters (PREPARING of a restart, STOPPING) make it read-only
    /// before their write is issued: a write that is slow or fails (its shard away) must not
    /// leave a mirror topic taking produce that PREPARING would then cut.
    fn begin(&mut self, target: Target, fx: &mut Vec<Effect>) {
        if matches!(target, Target::Preparing | Target::Stopping) {
            fx.push(Effect::SetReadOnly(true));
        }
        let op = self.op();
        fx.push(Effect::PersistState {
            op,
            stored: self.stored_for(&target),
        });
        self.phase = Phase::Persisting { op, target };
    }

    /// The write of `target` is durable: start its work.
    fn enter(&mut self, target: Target, env: &Env<'_>, fx: &mut Vec<Effect>) {
        match target {
            // A topic to stop whose PREPARING was written only because no record existed (the
            // state table reaches STOPPING from PREPARING, not from UNKNOWN): stop at once.
            Target::Preparing if self.desired == Desired::Stopped => {
                self.aligned = false;
                self.begin(Target::Stopping, fx);
            }
            Target::Preparing => {
                self.aligned = false;
                let op = self.op();
                self.phase = Phase::Preparing {
                    op,
                    step: PreparePhase::LookingUpLme,
                };
                fx.push(Effect::LookUpLme { op });
            }
            Target::Mirroring => {
                self.phase = Phase::Mirroring { bump: None };
                fx.push(Effect::SetReadOnly(true));
                fx.push(Effect::AttachFetcher {
                    leader_epoch: self.leader_epoch,
                });
                self.reconcile(fx);
            }
            Target::Pausing => {
                let op = self.op();
                self.phase = Phase::Pausing(op);
                fx.push(Effect::DetachFetcher { op });
            }
            Target::Paused => {
                self.phase = Phase::Paused;
                self.retry_attempt = 0;
                self.reconcile(fx);
            }
            Target::Stopping => {
                let op = self.op();
                self.phase = Phase::Stopping(Stopping::DetachingFetcher(op));
                fx.push(Effect::DetachFetcher { op });
            }
            Target::Stopped => {
                self.phase = Phase::Stopped;
                self.retry_attempt = 0;
                fx.push(Effect::SetReadOnly(false));
                self.reconcile(fx);
            }
            Target::Failed(failure) => {
                self.retry_attempt = failure.retry_attempt;
                let retry = self.schedule_retry(&failure, env, fx);
                self.phase = Phase::Failed { failure, retry };
                self.reconcile(fx);
            }
        }
    }

    fn schedule_retry(
        &mut self,
        failure: &Failure,
        env: &Env<'_>,
        fx: &mut Vec<Effect>,
    ) -> Option<OpId> {
        let attempt = failure.retry_attempt;
        if attempt < 0 || attempt > env.retry.max_attempts {
            return None;
        }
        let op = self.op();
        fx.push(Effect::ScheduleRetry {
            op,
            after_ms: env.retry.backoff_ms(attempt, env.random),
        });
        Some(op)
    }

    /// The next attempt of a failing failover: counted up to the last one the policy allows and
    /// kept there, so it is always retried, at most every max backoff.
    fn failover_attempt(&self, env: &Env<'_>) -> i16 {
        self.retry_attempt
            .max(0)
            .saturating_add(1)
            .min(env.retry.max_attempts.max(1))
    }

    /// An effect of the current state failed: record FAILED with the state it happened in.
    ///
    /// A failure inside STOPPING is not written: the STOPPING record stays, with what it says
    /// about the log's alignment (so the LME a restart records is the right one), and the
    /// partition retries STOPPING after its backoff (a restart resumes it at once).
    fn fail(&mut self, cause: &Cause, env: &Env<'_>, fx: &mut Vec<Effect>) {
        let retry_attempt = if cause.retryable {
            self.retry_attempt.max(0).saturating_add(1)
        } else {
            -1
        };
        let previous = match &self.phase {
            // Failing again keeps the state the first failure happened in.
            Phase::Failed { failure, .. } => failure.previous,
            Phase::Persisting { target, .. } => match target {
                Target::Failed(failure) => failure.previous,
                other => other.state(),
            },
            phase => phase.state(),
        };
        if previous == MirrorState::Stopping {
            // A failover, once started, finishes whatever the source and the shards do: every
            // failure inside it is retried, at most every max backoff, however often it
            // failed or however it was classified.
            let failure = Failure {
                previous,
                retry_attempt: self.failover_attempt(env),
                error: cause.message.clone(),
            };
            self.retry_attempt = failure.retry_attempt;
            let retry = self.schedule_retry(&failure, env, fx);
            self.phase = Phase::Failed { failure, retry };
            return;
        }
        let failure = Failure {
            previous,
            retry_attempt,
            error: cause.message.clone(),
        };
        self.begin(Target::Failed(failure), fx);
    }

    /// The coordinator refused or lost a write: the partition cannot record anything, so it
    /// fails in memory only and retries the state it was entering.
    fn fail_unpersisted(
        &mut self,
        target: &Target,
        cause: &Cause,
        env: &Env<'_>,
        fx: &mut Vec<Effect>,
    ) {
        // A failover's writes are retried whatever the cause, like its other steps.
        let failing_over = matches!(target, Target::Stopping | Target::Stopped);
        let failure = match target {
            Target::Failed(f) => f.clone(),
            other => Failure {
                previous: other.state(),
                retry_attempt: if failing_over {
                    self.failover_attempt(env)
                } else if cause.retryable {
                    self.retry_attempt.max(0).saturating_add(1)
                } else {
                    -1
                },
                error: format!(
                    "writing {} to the coordinator: {}",
                    other.state(),
                    cause.message
                ),
            },
        };
        self.retry_attempt = failure.retry_attempt;
        let retry = self.schedule_retry(&failure, env, fx);
        self.phase = Phase::Failed { failure, retry };
    }

    /// The coordinator's record arrived after leadership gain: docs/design.md §2's next state.
    fn on_loaded(&mut self, stored: Option<&StoredState>, fx: &mut Vec<Effect>) {
        let current = stored.map_or(MirrorState::Unknown, |s| s.state);
        let previous = stored.map_or(MirrorState::Unknown, |s| s.previous);
        self.persisted = current;
        // MIRRORING, PAUSING and PAUSED are reached only through a completed PREPARING.
        let mirrored = |s: MirrorState| {
            matches!(
                s,
                MirrorState::Mirroring | MirrorState::Pausing | MirrorState::Paused
            )
        };
        self.aligned = match current {
            MirrorState::Stopping | MirrorState::Failed => mirrored(previous),
            other => mirrored(other),
        };
        self.retry_attempt = stored.map_or(0, |s| s.retry_attempt);
        let target = match (current, self.desired) {
            (MirrorState::Failed, Desired::Stopped) => Target::Stopping,
            (MirrorState::Failed, _) => Target::Failed(Failure {
                previous: stored.map_or(MirrorState::Unknown, |s| s.previous),
                retry_attempt: self.retry_attempt,
                error: stored.and_then(|s| s.error.clone()).unwrap_or_default(),
            }),
            // A pause cannot apply to a stopped partition (only MIRRORING pauses): it stays.
            (MirrorState::Stopped, Desired::Stopped | Desired::Paused) => Target::Stopped,
            // Without a record (stopped before the first was written, or a record lost) the
            // log may still hold mirrored data: STOPPING's steps are idempotent and leave the
            // barrier a restart's count relies on (docs/failover.md). The state table reaches
            // STOPPING through PREPARING, whose entry then stops at once.
            (MirrorState::Unknown, Desired::Stopped) => Target::Preparing,
            (_, Desired::Stopped) => Target::Stopping,
            (MirrorState::Paused, Desired::Paused) => Target::Paused,
            (MirrorState::Mirroring | MirrorState::Pausing, Desired::Paused) => Target::Pausing,
            (MirrorState::Paused, Desired::Mirroring) => Target::Mirroring,
            (MirrorState::Unknown | MirrorState::Stopped, _) => Target::Preparing,
            (MirrorState::Preparing, _) => Target::Preparing,
            (MirrorState::Mirroring, _) => Target::Mirroring,
            (MirrorState::Pausing, _) => Target::Pausing,
            (MirrorState::Stopping, _) => Target::Stopping,
        };
        let target = match (self.given_up.take(), target) {
            (Some(error), Target::Preparing | Target::Mirroring) => Target::Failed(Failure {
                previous: current,
                retry_attempt: -1,
                error,
            }),
            (Some(error), Target::Failed(failure)) => Target::Failed(Failure {
                retry_attempt: -1,
                error,
                ..failure
            }),
            (_, target) => target,
        };
        self.begin(target, fx);
    }

    /// `mirror.name` changed.
    fn on_desired(&mut self, desired: Desired, fx: &mut Vec<Effect>) -> Outcome {
        let current = match &self.phase {
            Phase::Persisting { target, .. } => target.state(),
            phase => phase.state(),
        };
        let leading = self.leader_epoch >= 0 && !matches!(self.phase, Phase::Loading(_));
        if desired == Desired::Paused
            && leading
            && matches!(
                current,
                MirrorState::Unknown | MirrorState::Stopping | MirrorState::Stopped
            )
        {
            return Outcome::Rejected(Rejection::CannotPause(current));
        }
        self.desired = desired;
        if !leading {
            return Outcome::Applied;
        }
        match &self.phase {
            Phase::Unknown if desired == Desired::Mirroring => self.begin(Target::Preparing, fx),
            Phase::Preparing { .. } | Phase::Pausing(_) if desired == Desired::Stopped => {
                self.begin(Target::Stopping, fx)
            }
            Phase::Mirroring { .. } | Phase::Paused | Phase::Stopped | Phase::Failed { .. } => {
                self.reconcile(fx)
            }
            _ => {}
        }
        Outcome::Applied
    }

    /// The state a retry resumes: the one the partition failed in, reached by a transition the
    /// coordinator's current record allows (a failure may have been recorded, or a write may
    /// have been lost, so the record can be the failed state, the one before it, or FAILED).
    fn resume_target(&self, previous: MirrorState) -> Target {
        use MirrorState as S;
        match (previous, self.persisted) {
            (S::Mirroring, _) => Target::Mirroring,
            (S::Pausing, S::Mirroring | S::Pausing) => Target::Pausing,
            (S::Paused, S::Pausing | S::Paused) => Target::Paused,
            (S::Pausing | S::Paused, _) => Target::Mirroring,
            (S::Stopped, S::Stopping | S::Stopped) => Target::Stopped,
            (S::Stopping | S::Stopped, _) => Target::Stopping,
            (S::Preparing | S::Failed | S::Unknown, _) => Target::Preparing,
        }
    }

    /// In a settled state, move toward the desired state if they differ.
    fn reconcile(&mut self, fx: &mut Vec<Effect>) {
        let target = match (&self.phase, self.desired) {
            (Phase::Mirroring { .. }, Desired::Paused) => Target::Pausing,
            (Phase::Failed { .. }, Desired::Stopped) => match self.persisted {
                MirrorState::Stopped => Target::Stopped,
                // Nothing recorded yet: through PREPARING, as a load without a record does.
                MirrorState::Unknown => Target::Preparing,
                _ => Target::Stopping,
            },
            (Phase::Mirroring { .. } | Phase::Paused, Desired::Stopped) => Target::Stopping,
            (Phase::Paused, Desired::Mirroring) => Target::Mirroring,
            (Phase::Stopped, Desired::Mirroring) => Target::Preparing,
            _ => return,
        };
        self.begin(target, fx);
    }
}
