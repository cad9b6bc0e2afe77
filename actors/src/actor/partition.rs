//! The MirrorPartition actor: owns one mirror partition's state machine and runs its effects.
//!
//! Lifecycle: started (supervised) when this broker becomes the partition's leader, it is told
//! so with [`BecomeLeader`]; every message becomes an [`Input`] of the pure
//! [`transition`]; the actor keeps the new [`Partition`] and runs the effects, in order, through
//! its [`PartitionPorts`]. An asynchronous effect runs as a future on the actor's arbiter and its
//! completion comes back as the input carrying the same operation id; a completion the state
//! machine no longer waits for is stale, dropped and counted. Retries wait on actix timers.
//!
//! Restart: [`Restart`] (sent by a supervisor that sees no progress) stops the actor; actix's
//! supervisor starts it again with the same address, the partition back at UNKNOWN, and the
//! actor replays its leadership, so the state machine reloads the persisted state and resumes
//! from it. In-flight completions of the old incarnation are stale to the new one. [`GiveUp`]
//! (the restart budget is spent) fails the partition through its state machine.

use super::ports::{FetcherProgress, PartitionPorts};
use crate::host::FetchProgress;
use crate::metrics as catalogue;
use crate::partition::{
    Desired, Effect, Env, Input, OpId, Outcome, Partition, Phase, Rejection, RetryPolicy,
    transition,
};
use actix::{
    Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, SpawnHandle, Supervised,
    WrapFuture,
};
use kmirror_protocol::state::MirrorState;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How long to wait before reading the coordinator's record again after a failed read.
const RELOAD_AFTER: Duration = Duration::from_secs(1);

/// This broker leads the partition now, at `leader_epoch`; `desired` is what `mirror.name` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct BecomeLeader {
    /// The destination leader epoch.
    pub leader_epoch: i32,
    /// What the topic config asks.
    pub desired: Desired,
}

/// The partition's leader epoch changed while this broker stays leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct ChangeLeaderEpoch(pub i32);

/// Another broker leads the partition now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct LoseLeadership;

/// The mirror's configs changed: a FAILED partition retries at once ([`Input::Retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct RetryFailed;

/// `mirror.name` changed (StartMirrorTopics, Pause/Resume, StopMirrorTopics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct ChangeDesired(pub Desired);

/// Start over from the persisted state (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct Restart;

/// What DescribeMirrors shows of the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSnapshot {
    /// The current state.
    pub state: MirrorState,
    /// The last state written to (or read from) the coordinator.
    pub persisted: MirrorState,
    /// The destination leader epoch, -1 when not leader.
    pub leader_epoch: i32,
    /// Consecutive failures.
    pub retry_attempt: i16,
    /// Why it failed, when FAILED.
    pub error: Option<String>,
    /// Completions dropped as stale since the actor started.
    pub stale_completions: u64,
    /// Restarts since the actor was created.
    pub restarts: u32,
    /// Inputs applied since the actor was created: a supervisor that sees it stand still while
    /// `busy` restarts the partition.
    pub progress: u64,
    /// Whether the partition waits for an effect to complete.
    pub busy: bool,
    /// Whether it is reading its record from `__mirror_state` (not busy: a shard away for long
    /// is retried, not given up on; a broker settling before it listens waits for it).
    pub loading: bool,
}

/// The partition cannot go on (its supervisor gave up on it, or the metadata sync found its
/// source is another cluster): it goes FAILED with this reason (not retried).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Rejection>")]
pub struct GiveUp(pub String);

/// Asks for a [`PartitionSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "PartitionSnapshot")]
pub struct DescribePartition;

/// What a partition's logs and metrics are labelled with.
#[derive(Debug, Clone)]
pub struct PartitionLabels {
    /// The mirror's name (the `mirror` label of its metrics).
    pub mirror: Arc<str>,
    /// Carries mirror, topic, partition and leader epoch into its logs.
    pub span: tracing::Span,
}

impl Default for PartitionLabels {
    fn default() -> Self {
        PartitionLabels {
            mirror: Arc::from(""),
            span: tracing::Span::none(),
        }
    }
}

/// One mirror partition's actor.
pub struct MirrorPartition<P: PartitionPorts> {
    partition: Partition,
    ports: Rc<P>,
    retry: RetryPolicy,
    random: Box<dyn FnMut() -> f64>,
    /// The last leadership command, replayed after a restart.
    leadership: Option<BecomeLeader>,
    stale_completions: u64,
    restarts: u32,
    progress: u64,
    labels: PartitionLabels,
    /// The state this actor counts itself in ([`catalogue::STATE_PARTITIONS`]).
    reported: Option<MirrorState>,
    /// Log changes in flight: cancelled (so they never land) once the phase stops waiting for
    /// them ([`Phase::awaited_log_change`]).
    log_changes: Vec<(OpId, SpawnHandle)>,
}

impl<P: PartitionPorts> std::fmt::Debug for MirrorPartition<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorPartition")
            .field("partition", &self.partition)
            .field("leadership", &self.leadership)
            .finish_non_exhaustive()
    }
}

impl<P: PartitionPorts> MirrorPartition<P> {
    /// A partition actor (not yet leader); `random` draws uniformly from `[0, 1)` for retry
    /// jitter.
    pub fn new(ports: P, retry: RetryPolicy, random: Box<dyn FnMut() -> f64>) -> Self {
        MirrorPartition {
            partition: Partition::default(),
            ports: Rc::new(ports),
            retry,
            random,
            leadership: None,
            stale_completions: 0,
            restarts: 0,
            progress: 0,
            labels: PartitionLabels::default(),
            reported: None,
            log_changes: Vec::new(),
        }
    }

    /// Labels the partition's logs and metrics.
    pub fn with_labels(mut self, labels: PartitionLabels) -> Self {
        self.labels = labels;
        self
    }

    /// Moves this partition's count to the state it is in now (or out, when `None`).
    fn report_state(&mut self, state: Option<MirrorState>) {
        if self.reported == state {
            return;
        }
        let gauge = |state: MirrorState| {
            metrics::gauge!(
                catalogue::STATE_PARTITIONS,
                "mirror" => self.labels.mirror.to_string(),
                "state" => state.to_string()
            )
        };
        if let Some(old) = self.reported {
            gauge(old).decrement(1.0);
        }
        if let Some(new) = state {
            gauge(new).increment(1.0);
        }
        self.reported = state;
    }

    /// Runs one input through the state machine, then its effects.
    fn take(&mut self, input: Input, ctx: &mut Context<Self>) -> Outcome {
        let env = Env {
            random: (self.random)(),
            retry: &self.retry,
        };
        let step = transition(&self.partition, &input, &env);
        self.labels.span.in_scope(|| {
            tracing::debug!(input = input.name(), outcome = ?step.outcome, effects = ?step.effects, phase = ?step.partition.phase(), "mirror partition took an input");
        });
        match &step.outcome {
            Outcome::Applied => {
                self.progress += 1;
                // A state is entered when the coordinator has it (docs/design.md §2).
                let (from, to) = (self.partition.persisted(), step.partition.persisted());
                if from != to {
                    let error = match step.partition.phase() {
                        Phase::Failed { failure, .. } => Some(failure.error.as_str()),
                        _ => None,
                    };
                    self.labels.span.in_scope(|| {
                        tracing::info!(%from, %to, cause = input.name(), error, "mirror partition state changed");
                    });
                    metrics::counter!(
                        catalogue::TRANSITIONS,
                        "mirror" => self.labels.mirror.to_string(),
                        "from" => from.to_string(),
                        "to" => to.to_string()
                    )
                    .increment(1);
                }
                self.partition = step.partition;
                self.report_state(Some(to));
                self.fence_log_changes(ctx);
                for effect in step.effects {
                    self.run(effect, ctx);
                }
            }
            Outcome::Stale => self.stale_completions += 1,
            Outcome::Rejected(_) => {}
        }
        step.outcome
    }

    /// Runs `port` and feeds its result back as the input `complete` makes of it.
    fn complete<T: 'static>(
        &self,
        ctx: &mut Context<Self>,
        port: super::ports::PortFuture<T>,
        complete: impl FnOnce(T) -> Input + 'static,
    ) {
        ctx.spawn(port.into_actor(self).map(move |result, actor, ctx| {
            actor.take(complete(result), ctx);
        }));
    }

    /// Cancels the log changes in flight that the phase no longer waits for. A port changes
    /// the log within one poll of its future, so a cancelled change has either landed before
    /// the phase moved on (and its completion is stale) or never lands.
    fn fence_log_changes(&mut self, ctx: &mut Context<Self>) {
        let awaited = self.partition.phase().awaited_log_change();
        self.log_changes.retain(|(op, handle)| {
            let keep = Some(*op) == awaited;
            if !keep {
                ctx.cancel_future(*handle);
            }
            keep
        });
    }

    /// Runs a port that changes the log, fenced by [`Self::fence_log_changes`].
    fn change_log<T: 'static>(
        &mut self,
        ctx: &mut Context<Self>,
        op: OpId,
        port: super::ports::PortFuture<T>,
        complete: impl FnOnce(T) -> Input + 'static,
    ) {
        let handle = ctx.spawn(port.into_actor(self).map(move |result, actor, ctx| {
            actor.log_changes.retain(|(pending, _)| *pending != op);
            actor.take(complete(result), ctx);
        }));
        self.log_changes.push((op, handle));
    }

    fn run(&mut self, effect: Effect, ctx: &mut Context<Self>) {
        let ports = self.ports.clone();
        match effect {
            Effect::LoadState { op } => self.load(op, ctx),
            Effect::PersistState { op, stored } => {
                self.complete(ctx, ports.persist_state(stored), move |result| {
                    Input::StatePersisted { op, result }
                })
            }
            Effect::LookUpLme { op } => self.complete(ctx, ports.look_up_lme(), move |result| {
                Input::LmeLookedUp { op, result }
            }),
            Effect::TruncateForLme { op, lme } => {
                self.change_log(ctx, op, ports.truncate_for_lme(lme), move |result| {
                    Input::Truncated { op, result }
                })
            }
            Effect::AwaitIsr { op } => {
                self.complete(ctx, ports.await_isr(), move |()| Input::IsrCaughtUp { op })
            }
            Effect::AttachFetcher { leader_epoch } => {
                ports.attach_fetcher(ctx.address().recipient(), leader_epoch)
            }
            Effect::RaiseFetcherEpoch { leader_epoch } => ports.raise_fetcher_epoch(leader_epoch),
            Effect::DetachFetcher { op } => self.complete(ctx, ports.detach_fetcher(), move |()| {
                Input::FetcherDetached { op }
            }),
            Effect::BumpLeaderEpoch {
                op,
                min_leader_epoch,
            } => self.complete(
                ctx,
                ports.bump_leader_epoch(min_leader_epoch),
                move |result| Input::EpochBumped { op, result },
            ),
            Effect::TruncateToLso { op } => {
                self.change_log(ctx, op, ports.truncate_to_lso(), move |result| {
                    Input::TruncatedToLso { op, result }
                })
            }
            Effect::PersistLme { op, lme } => {
                self.complete(ctx, ports.persist_lme(lme), move |result| {
                    Input::LmePersisted { op, result }
                })
            }
            Effect::AppendPidReset { op, leader_epoch } => self.change_log(
                ctx,
                op,
                ports.append_pid_reset(leader_epoch),
                move |result| Input::PidResetAppended { op, result },
            ),
            Effect::SetReadOnly(read_only) => ports.set_read_only(read_only),
            Effect::ScheduleRetry { op, after_ms } => {
                ctx.run_later(Duration::from_millis(after_ms), move |actor, ctx| {
                    actor.take(Input::TimerFired { op }, ctx);
                });
            }
        }
    }

    /// Reads the coordinator's record; a failed read is tried again (the state machine has no
    /// failure for it: without the record it cannot know what it was doing).
    fn load(&mut self, op: OpId, ctx: &mut Context<Self>) {
        let read = self.ports.load_state();
        ctx.spawn(read.into_actor(self).map(move |result, actor, ctx| match result {
            Ok(stored) => {
                actor.take(Input::StateLoaded { op, stored }, ctx);
            }
            Err(cause) => {
                tracing::warn!(error = %cause.message, "reading the mirror state; trying again");
                ctx.run_later(RELOAD_AFTER, move |actor, ctx| actor.load(op, ctx));
            }
        }));
    }

    fn command(&mut self, input: Input, ctx: &mut Context<Self>) -> Result<(), Rejection> {
        match self.take(input, ctx) {
            Outcome::Rejected(rejection) => Err(rejection),
            Outcome::Applied | Outcome::Stale => Ok(()),
        }
    }
}

impl<P: PartitionPorts> Actor for MirrorPartition<P> {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Context<Self>) {
        self.report_state(Some(self.partition.persisted()));
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.report_state(None);
    }
}

impl<P: PartitionPorts> Supervised for MirrorPartition<P> {
    fn restarting(&mut self, ctx: &mut Context<Self>) {
        self.restarts += 1;
        self.partition = Partition::default();
        self.log_changes.clear();
        self.report_state(Some(self.partition.persisted()));
        // Timers and completions of the stopped incarnation never run (actix drops them with the
        // old context); the new one starts from what the coordinator holds.
        if let Some(BecomeLeader {
            leader_epoch,
            desired,
        }) = self.leadership
        {
            self.take(
                Input::BecameLeader {
                    leader_epoch,
                    desired,
                },
                ctx,
            );
        }
    }
}

impl<P: PartitionPorts> Handler<BecomeLeader> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, msg: BecomeLeader, ctx: &mut Context<Self>) -> Self::Result {
        self.leadership = Some(msg);
        self.command(
            Input::BecameLeader {
                leader_epoch: msg.leader_epoch,
                desired: msg.desired,
            },
            ctx,
        )
    }
}

impl<P: PartitionPorts> Handler<ChangeLeaderEpoch> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, msg: ChangeLeaderEpoch, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(leadership) = &mut self.leadership {
            leadership.leader_epoch = msg.0;
        }
        self.command(
            Input::LeaderEpochChanged {
                leader_epoch: msg.0,
            },
            ctx,
        )
    }
}

impl<P: PartitionPorts> Handler<LoseLeadership> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, _: LoseLeadership, ctx: &mut Context<Self>) -> Self::Result {
        self.leadership = None;
        self.command(Input::LostLeadership, ctx)
    }
}

impl<P: PartitionPorts> Handler<ChangeDesired> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, msg: ChangeDesired, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(leadership) = &mut self.leadership {
            leadership.desired = msg.0;
        }
        self.command(Input::DesiredChanged(msg.0), ctx)
    }
}

impl<P: PartitionPorts> Handler<FetcherProgress> for MirrorPartition<P> {
    type Result = ();

    fn handle(&mut self, msg: FetcherProgress, ctx: &mut Context<Self>) {
        let input = match msg.0 {
            Ok(FetchProgress::Appended { source_epoch }) => Input::BatchesAppended { source_epoch },
            Ok(FetchProgress::HeldBack { source_epoch }) => Input::SourceEpochSeen { source_epoch },
            // Not news to the partition (a fetcher does not report them).
            Ok(FetchProgress::Idle | FetchProgress::Truncated { .. }) => return,
            Err(cause) => Input::FetchFailed(cause),
        };
        self.take(input, ctx);
    }
}

impl<P: PartitionPorts> Handler<Restart> for MirrorPartition<P> {
    type Result = ();

    fn handle(&mut self, _: Restart, ctx: &mut Context<Self>) {
        use actix::ActorContext;
        ctx.stop();
    }
}

impl<P: PartitionPorts> Handler<RetryFailed> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, _: RetryFailed, ctx: &mut Context<Self>) -> Self::Result {
        self.command(Input::Retry, ctx)
    }
}

impl<P: PartitionPorts> Handler<GiveUp> for MirrorPartition<P> {
    type Result = Result<(), Rejection>;

    fn handle(&mut self, msg: GiveUp, ctx: &mut Context<Self>) -> Self::Result {
        self.command(Input::GaveUp(msg.0), ctx)
    }
}

impl<P: PartitionPorts> Handler<DescribePartition> for MirrorPartition<P> {
    type Result = actix::MessageResult<DescribePartition>;

    fn handle(&mut self, _: DescribePartition, _: &mut Context<Self>) -> Self::Result {
        let error = match self.partition.phase() {
            Phase::Failed { failure, .. } => Some(failure.error.clone()),
            _ => None,
        };
        actix::MessageResult(PartitionSnapshot {
            state: self.partition.phase().state(),
            persisted: self.partition.persisted(),
            leader_epoch: self.partition.leader_epoch(),
            retry_attempt: self.partition.retry_attempt(),
            error,
            stale_completions: self.stale_completions,
            restarts: self.restarts,
            progress: self.progress,
            busy: self.partition.phase().is_busy(),
            loading: matches!(self.partition.phase(), crate::partition::Phase::Loading(_)),
        })
    }
}

#[cfg(test)]
pub(super) mod tests;
