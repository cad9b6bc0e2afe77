//! The partition actor on an actix system with paused time and scripted ports: the messages it
//! takes, the port calls it makes in order, retries on timers, restarts from persisted state.

use crate::actor::*;
use crate::host::FetchProgress;
use crate::partition::{Cause, Desired, RetryPolicy, StoredState};
use actix::{Addr, Recipient, Supervisor};
use kmirror_protocol::state::MirrorState;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

/// What the scripted broker holds and what it was asked.
#[derive(Default)]
pub(in crate::actor) struct Script {
    pub(in crate::actor) stored: Option<StoredState>,
    pub(in crate::actor) lme_answers: VecDeque<Result<i32, Cause>>,
    /// LME lookups that never complete (a source that accepts the request and never answers).
    pub(in crate::actor) lme_hangs: u32,
    /// State loads that panic (a bug that kills the actor).
    pub(in crate::actor) load_panics: u32,
    /// Followers that have not truncated yet: the ISR wait ends when this turns true.
    pub(in crate::actor) followers_caught_up: Option<tokio::sync::watch::Receiver<bool>>,
    /// A truncation for the LME that lands (changes the log) only when this turns true (a
    /// full truncation waiting on the source's log start).
    truncation_gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// Log changes that landed, in order.
    landed: Vec<String>,
    leader_epoch: i32,
    read_only: Option<bool>,
    pub(in crate::actor) fetcher: Option<Recipient<FetcherProgress>>,
    calls: Vec<String>,
}

#[derive(Clone, Default)]
pub(in crate::actor) struct ScriptedPorts(pub(in crate::actor) Rc<RefCell<Script>>);

impl ScriptedPorts {
    fn call(&self, name: impl Into<String>) {
        self.0.borrow_mut().calls.push(name.into());
    }

    pub(in crate::actor) fn calls(&self) -> Vec<String> {
        self.0.borrow().calls.clone()
    }
}

fn ready<T: 'static>(value: T) -> PortFuture<T> {
    Box::pin(std::future::ready(value))
}

impl PartitionPorts for ScriptedPorts {
    fn load_state(&self) -> PortFuture<Result<Option<StoredState>, Cause>> {
        self.call("load");
        let stored = self.0.borrow().stored.clone();
        let panics = std::mem::replace(&mut self.0.borrow_mut().load_panics, 0);
        if panics > 0 {
            self.0.borrow_mut().load_panics = panics - 1;
            return Box::pin(async { panic!("a bug in the port") });
        }
        ready(Ok(stored))
    }

    fn persist_state(&self, stored: StoredState) -> PortFuture<Result<(), Cause>> {
        self.call(format!("persist {}", stored.state.name()));
        self.0.borrow_mut().stored = Some(stored);
        ready(Ok(()))
    }

    fn look_up_lme(&self) -> PortFuture<Result<i32, Cause>> {
        self.call("lookup lme");
        let hangs = self.0.borrow().lme_hangs;
        if hangs > 0 {
            self.0.borrow_mut().lme_hangs = hangs - 1;
            return Box::pin(std::future::pending());
        }
        let answer = self
            .0
            .borrow_mut()
            .lme_answers
            .pop_front()
            .unwrap_or(Ok(-1));
        ready(answer)
    }

    fn truncate_for_lme(&self, lme: i32) -> PortFuture<Result<(), Cause>> {
        self.call(format!("truncate for lme {lme}"));
        let script = self.0.clone();
        let gate = script.borrow().truncation_gate.clone();
        Box::pin(async move {
            if let Some(mut gate) = gate {
                let _ = gate.wait_for(|open| *open).await;
            }
            script
                .borrow_mut()
                .landed
                .push(format!("truncated for lme {lme}"));
            Ok(())
        })
    }

    fn await_isr(&self) -> PortFuture<()> {
        self.call("await isr");
        match self.0.borrow().followers_caught_up.clone() {
            None => ready(()),
            Some(mut caught_up) => Box::pin(async move {
                let _ = caught_up.wait_for(|done| *done).await;
            }),
        }
    }

    fn attach_fetcher(&self, progress: Recipient<FetcherProgress>, leader_epoch: i32) {
        self.call(format!("attach fetcher at epoch {leader_epoch}"));
        self.0.borrow_mut().fetcher = Some(progress);
    }

    fn raise_fetcher_epoch(&self, leader_epoch: i32) {
        self.call(format!("raise fetcher epoch to {leader_epoch}"));
    }

    fn detach_fetcher(&self) -> PortFuture<()> {
        self.call("detach fetcher");
        self.0.borrow_mut().fetcher = None;
        ready(())
    }

    fn bump_leader_epoch(&self, min_leader_epoch: Option<i32>) -> PortFuture<Result<i32, Cause>> {
        self.call(format!("bump epoch to {min_leader_epoch:?}"));
        let mut script = self.0.borrow_mut();
        script.leader_epoch = (script.leader_epoch + 1).max(min_leader_epoch.unwrap_or(0));
        ready(Ok(script.leader_epoch))
    }

    fn truncate_to_lso(&self) -> PortFuture<Result<Option<i32>, Cause>> {
        self.call("truncate to lso");
        ready(Ok(Some(7)))
    }

    fn persist_lme(&self, lme: Option<i32>) -> PortFuture<Result<(), Cause>> {
        self.call(format!("persist lme {}", lme.unwrap_or(-1)));
        ready(Ok(()))
    }

    fn append_pid_reset(&self, leader_epoch: i32) -> PortFuture<Result<(), Cause>> {
        self.call(format!("append pid reset at epoch {leader_epoch}"));
        ready(Ok(()))
    }

    fn set_read_only(&self, read_only: bool) {
        self.call(format!("read only {read_only}"));
        self.0.borrow_mut().read_only = Some(read_only);
    }
}

fn start(ports: &ScriptedPorts) -> Addr<MirrorPartition<ScriptedPorts>> {
    let ports = ports.clone();
    Supervisor::start(move |_| {
        MirrorPartition::new(ports, RetryPolicy::default(), Box::new(|| 0.5))
    })
}

/// [`start`], then leadership at `leader_epoch` with the partition to be mirrored.
async fn start_leading(
    ports: &ScriptedPorts,
    leader_epoch: i32,
) -> Addr<MirrorPartition<ScriptedPorts>> {
    let addr = start(ports);
    addr.send(BecomeLeader {
        leader_epoch,
        desired: Desired::Mirroring,
    })
    .await
    .expect("alive")
    .expect("accepted");
    addr
}

/// Waits (on paused time) until the partition reports `state`; returns its snapshot.
async fn settle(
    addr: &Addr<MirrorPartition<ScriptedPorts>>,
    state: MirrorState,
) -> PartitionSnapshot {
    for _ in 0..1000 {
        let snapshot = addr.send(DescribePartition).await.expect("alive");
        if snapshot.state == state {
            return snapshot;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never reached {state:?}");
}

fn position(calls: &[String], call: &str) -> usize {
    calls
        .iter()
        .position(|c| c == call || c.starts_with(&format!("{call} ")))
        .unwrap_or_else(|| panic!("{call:?} not in {calls:?}"))
}

#[actix_rt::test]
async fn leadership_takes_a_new_partition_through_preparing_to_mirroring() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    ports.0.borrow_mut().lme_answers.push_back(Ok(4));
    let addr = start_leading(&ports, 3).await;
    let snapshot = settle(&addr, MirrorState::Mirroring).await;
    assert_eq!(snapshot.leader_epoch, 3);
    assert_eq!(snapshot.persisted, MirrorState::Mirroring);
    let calls = ports.calls();
    let order = [
        "load",
        "persist PREPARING",
        "lookup lme",
        "truncate for lme 4",
        "await isr",
        "persist MIRRORING",
        "attach fetcher at epoch 3",
    ];
    let positions: Vec<usize> = order.iter().map(|c| position(&calls, c)).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{calls:?}");
    assert_eq!(ports.0.borrow().read_only, Some(true), "{calls:?}");
    assert!(ports.0.borrow().fetcher.is_some());
}

#[actix_rt::test]
async fn stop_fails_over_through_the_kip_steps_and_makes_the_topic_writable() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    let addr = start_leading(&ports, 3).await;
    settle(&addr, MirrorState::Mirroring).await;
    let fetcher = ports.0.borrow().fetcher.clone().expect("attached");
    fetcher
        .send(FetcherProgress(Ok(FetchProgress::Appended {
            source_epoch: 2,
        })))
        .await
        .expect("alive");
    addr.send(ChangeDesired(Desired::Stopped))
        .await
        .expect("alive")
        .expect("accepted");
    let snapshot = settle(&addr, MirrorState::Stopped).await;
    assert_eq!(snapshot.persisted, MirrorState::Stopped);
    let calls = ports.calls();
    let detach = position(&calls, "detach fetcher");
    let lme = position(&calls, "persist lme 7");
    assert!(
        detach < position(&calls, "truncate to lso") && position(&calls, "truncate to lso") < lme
    );
    assert!(
        calls.iter().any(|c| c.starts_with("bump epoch")),
        "{calls:?}"
    );
    let reset = position(&calls, "append pid reset");
    assert_eq!(
        calls[reset],
        format!("append pid reset at epoch {}", snapshot.leader_epoch),
        "the barrier carries the bumped destination epoch"
    );
    assert!(
        lme < reset && reset < position(&calls, "persist STOPPED"),
        "{calls:?}"
    );
    assert_eq!(
        ports.0.borrow().read_only,
        Some(false),
        "writable once STOPPED"
    );
    assert!(
        snapshot.leader_epoch > 3,
        "the leader epoch was bumped: {snapshot:?}"
    );
}

#[actix_rt::test]
async fn a_failed_lme_lookup_is_retried_after_the_backoff() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    ports
        .0
        .borrow_mut()
        .lme_answers
        .push_back(Err(Cause::retryable("source unreachable")));
    let addr = start_leading(&ports, 1).await;
    let failed = settle(&addr, MirrorState::Failed).await;
    assert_eq!(failed.retry_attempt, 1);
    assert_eq!(failed.error.as_deref(), Some("source unreachable"));
    let started = tokio::time::Instant::now();
    settle(&addr, MirrorState::Mirroring).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the retry waited its backoff ({:?})",
        started.elapsed()
    );
    let lookups = ports.calls().iter().filter(|c| *c == "lookup lme").count();
    assert_eq!(lookups, 2);
}

#[actix_rt::test]
async fn a_restart_resumes_from_the_persisted_state() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    let addr = start_leading(&ports, 5).await;
    settle(&addr, MirrorState::Mirroring).await;
    let before = ports.calls().len();
    addr.send(Restart).await.expect("alive");
    let snapshot = settle(&addr, MirrorState::Mirroring).await;
    assert_eq!(snapshot.restarts, 1);
    let after: Vec<String> = ports.calls()[before..].to_vec();
    assert!(after.iter().any(|c| c == "load"), "{after:?}");
    assert!(
        !after.iter().any(|c| c == "lookup lme"),
        "MIRRORING was persisted: no new PREPARING ({after:?})"
    );
    assert!(
        after.iter().any(|c| c.starts_with("attach fetcher")),
        "{after:?}"
    );
}

#[actix_rt::test]
async fn preparing_waits_for_lagging_followers_and_is_not_a_stall() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    let (caught_up, lagging) = tokio::sync::watch::channel(false);
    ports.0.borrow_mut().followers_caught_up = Some(lagging);
    let addr = start_leading(&ports, 2).await;
    settle(&addr, MirrorState::Preparing).await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    let still = addr.send(DescribePartition).await.expect("alive");
    assert_eq!(still.state, MirrorState::Preparing, "followers still lag");
    assert!(
        !still.busy,
        "waiting for followers is not a stall a supervisor should restart"
    );
    assert!(
        !ports
            .calls()
            .iter()
            .any(|c| c.starts_with("attach fetcher"))
    );
    caught_up.send(true).expect("the partition waits");
    settle(&addr, MirrorState::Mirroring).await;
    assert!(
        ports
            .calls()
            .iter()
            .any(|c| c.starts_with("attach fetcher"))
    );
}

/// Issue 17 item 4: a stop while PREPARING's truncation is in flight (a full truncation waiting
/// on the source) cancels it: it never lands after STOPPED, where it would cut local writes.
#[actix_rt::test]
async fn a_stop_during_preparing_cancels_the_truncation_in_flight() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    let (open, gate) = tokio::sync::watch::channel(false);
    ports.0.borrow_mut().truncation_gate = Some(gate);
    let addr = start_leading(&ports, 2).await;
    settle(&addr, MirrorState::Preparing).await;
    for _ in 0..100 {
        if ports.calls().iter().any(|c| c == "truncate for lme -1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ports.calls().iter().any(|c| c == "truncate for lme -1"));
    addr.send(ChangeDesired(Desired::Stopped))
        .await
        .expect("alive")
        .expect("accepted");
    settle(&addr, MirrorState::Stopped).await;
    open.send(true).expect("a gate");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let snapshot = addr.send(DescribePartition).await.expect("alive");
    assert_eq!(snapshot.state, MirrorState::Stopped);
    assert!(
        ports.0.borrow().landed.is_empty(),
        "a cancelled truncation landed: {:?}",
        ports.0.borrow().landed
    );
}
