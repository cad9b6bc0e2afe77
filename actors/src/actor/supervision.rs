//! A supervised mirror partition: the actor's address, what it needs to be created again, the
//! leadership it was last given, and its [`Liveness`].
//!
//! Lifecycle: [`SupervisedPartition::start`] starts the actor under actix's supervisor;
//! leadership and desired-state commands go through the handle, which remembers them so an
//! actor created again after dying (a panicking handler closes its mailbox, and actix does not
//! restart that) gets them replayed. The owner (the mirror's actor) observes every partition each
//! [`LivenessPolicy::check_interval_ms`] with [`SupervisedPartition::observe`] and hands the
//! result to [`SupervisedPartition::supervise`], which decides in pure code and acts: a
//! [`Restart`], a new actor, or [`GiveUp`].

use super::partition::{
    BecomeLeader, ChangeDesired, ChangeLeaderEpoch, DescribePartition, GiveUp, LoseLeadership,
    MirrorPartition, PartitionLabels, Restart, RetryFailed,
};
use super::ports::PartitionPorts;
use crate::liveness::{Liveness, LivenessPolicy, Observation, Verdict};
use crate::partition::{Desired, RetryPolicy};
use actix::{Addr, MailboxError, Supervisor};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Starts a partition actor over `ports` (on the arbiter the handle was made for).
type Spawn<P> = Box<dyn Fn(P) -> Addr<MirrorPartition<P>>>;

/// One supervised partition actor.
pub struct SupervisedPartition<P: PartitionPorts + Clone> {
    addr: Addr<MirrorPartition<P>>,
    ports: P,
    spawn: Spawn<P>,
    leadership: Option<BecomeLeader>,
    liveness: Liveness,
    /// The `mirror` label of its restart counts.
    mirror: Arc<str>,
}

impl<P: PartitionPorts + Clone> std::fmt::Debug for SupervisedPartition<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedPartition")
            .field("leadership", &self.leadership)
            .field("liveness", &self.liveness)
            .finish_non_exhaustive()
    }
}

impl<P: PartitionPorts + Clone + Send> SupervisedPartition<P> {
    /// Starts the partition's actor on `arbiter` (and any new one after it dies there), so the
    /// partitions of a broker spread over its cores; `random` draws from `[0, 1)`.
    /// Its logs and metrics carry `labels`.
    pub fn start_in(
        arbiter: actix::ArbiterHandle,
        ports: P,
        retry: RetryPolicy,
        random: fn() -> f64,
        labels: PartitionLabels,
    ) -> Self {
        let mirror = labels.mirror.clone();
        let spawn: Spawn<P> = Box::new(move |ports: P| {
            let labels = labels.clone();
            Supervisor::start_in_arbiter(&arbiter, move |_| {
                MirrorPartition::new(ports, retry, Box::new(random)).with_labels(labels)
            })
        });
        let mut partition = Self::with_spawn(ports, spawn);
        partition.mirror = mirror;
        // Shown from the start, at zero until a restart happens.
        for reason in ["stalled", "dead"] {
            partition.count_restarts(reason, 0);
        }
        partition
    }
}

impl<P: PartitionPorts + Clone> SupervisedPartition<P> {
    /// Starts the partition's actor on the current arbiter; `random` draws from `[0, 1)`.
    pub fn start(ports: P, retry: RetryPolicy, random: fn() -> f64) -> Self {
        let spawn: Spawn<P> = Box::new(move |ports: P| {
            Supervisor::start(move |_| MirrorPartition::new(ports, retry, Box::new(random)))
        });
        Self::with_spawn(ports, spawn)
    }

    fn with_spawn(ports: P, spawn: Spawn<P>) -> Self {
        SupervisedPartition {
            addr: spawn(ports.clone()),
            ports,
            spawn,
            leadership: None,
            liveness: Liveness::default(),
            mirror: Arc::from(""),
        }
    }

    /// The partition cannot go on (the metadata sync found its source is another cluster): it
    /// goes FAILED with `reason`, not retried.
    pub fn fail(
        &self,
        reason: String,
    ) -> impl Future<Output = Result<Result<(), crate::partition::Rejection>, MailboxError>> + use<P>
    {
        self.addr.send(GiveUp(reason))
    }

    /// The mirror's configs changed: a FAILED partition retries now, with a fresh restart
    /// budget (what failed it may be what the operator just fixed).
    pub fn retry(&mut self) {
        self.liveness = Liveness::default();
        self.addr.do_send(RetryFailed);
    }

    fn count_restarts(&self, reason: &'static str, restarts: u64) {
        metrics::counter!(
            crate::metrics::RESTARTS,
            "mirror" => self.mirror.to_string(),
            "reason" => reason
        )
        .increment(restarts);
    }

    /// The actor's current address (it changes when a dead actor is created again).
    pub fn addr(&self) -> &Addr<MirrorPartition<P>> {
        &self.addr
    }

    /// This broker leads the partition: tells the actor, remembering it for a new actor.
    pub fn become_leader(
        &mut self,
        msg: BecomeLeader,
    ) -> impl Future<Output = Result<Result<(), crate::partition::Rejection>, MailboxError>> + use<P>
    {
        self.leadership = Some(msg);
        self.addr.send(msg)
    }

    /// `mirror.name` changed: tells the actor, remembering it for a new actor.
    pub fn change_desired(
        &mut self,
        desired: Desired,
    ) -> impl Future<Output = Result<Result<(), crate::partition::Rejection>, MailboxError>> + use<P>
    {
        if let Some(leadership) = &mut self.leadership {
            leadership.desired = desired;
        }
        self.addr.send(ChangeDesired(desired))
    }

    /// The partition's leader epoch rose: tells the actor, remembering it for a new actor.
    pub fn change_leader_epoch(
        &mut self,
        leader_epoch: i32,
    ) -> impl Future<Output = Result<Result<(), crate::partition::Rejection>, MailboxError>> + use<P>
    {
        if let Some(leadership) = &mut self.leadership {
            leadership.leader_epoch = leadership.leader_epoch.max(leader_epoch);
        }
        self.addr.send(ChangeLeaderEpoch(leader_epoch))
    }

    /// This broker no longer runs the partition: the actor stops fetching and forgets its
    /// leadership (a new actor would not get it).
    pub fn lose_leadership(
        &mut self,
    ) -> impl Future<Output = Result<Result<(), crate::partition::Rejection>, MailboxError>> + use<P>
    {
        self.leadership = None;
        self.addr.send(LoseLeadership)
    }

    /// Asks the actor how it is doing, waiting at most `timeout`. The question is sent at once
    /// (and the timeout starts then); the future only waits for the answer.
    pub fn observe(&self, timeout: Duration) -> impl Future<Output = Observation> + use<P> {
        let describe = self.addr.send(DescribePartition).timeout(timeout);
        async move {
            match describe.await {
                Ok(snapshot) => Observation::Alive {
                    progress: snapshot.progress,
                    busy: snapshot.busy,
                },
                Err(MailboxError::Timeout) => Observation::Unresponsive,
                Err(MailboxError::Closed) => Observation::Dead,
            }
        }
    }

    /// Takes an observation made at `now_ms` and acts on the verdict, which it returns.
    pub fn supervise(
        &mut self,
        policy: &LivenessPolicy,
        now_ms: i64,
        observation: Observation,
    ) -> Verdict {
        let verdict = self.liveness.observe(policy, now_ms, observation);
        match &verdict {
            Verdict::Healthy => {}
            Verdict::Restart => {
                tracing::warn!(
                    ?observation,
                    "restarting a mirror partition that makes no progress"
                );
                self.count_restarts("stalled", 1);
                self.addr.do_send(Restart);
            }
            Verdict::Recreate => {
                tracing::warn!("creating a dead mirror partition actor again");
                self.count_restarts("dead", 1);
                self.recreate();
            }
            Verdict::GiveUp { recreate, reason } => {
                tracing::error!(%reason, "giving up on a mirror partition");
                if *recreate {
                    self.count_restarts("dead", 1);
                    self.recreate();
                }
                self.addr.do_send(GiveUp(reason.clone()));
            }
        }
        verdict
    }

    fn recreate(&mut self) {
        self.addr = (self.spawn)(self.ports.clone());
        if let Some(leadership) = self.leadership {
            self.addr.do_send(leadership);
        }
    }
}

#[cfg(test)]
mod tests;
