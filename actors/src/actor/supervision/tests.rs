//! Supervision of partition actors on paused time, with the partition tests' scripted ports:
//! a partition stuck on an effect that never completes is restarted and resumes from its
//! persisted state; one that never moves is failed through its state machine once the restart
//! budget is spent; an actor killed by a panic is created again with its leadership.

use crate::actor::partition::tests::ScriptedPorts;
use crate::actor::*;
use crate::liveness::{LivenessPolicy, Verdict};
use crate::partition::{Desired, RetryPolicy};
use kmirror_protocol::state::MirrorState;
use std::time::Duration;

const POLICY: LivenessPolicy = LivenessPolicy {
    stall_timeout_ms: 1_000,
    max_restarts: 2,
    restart_window_ms: 60_000,
};

/// A supervised partition told to lead and mirror.
async fn supervised(ports: &ScriptedPorts) -> SupervisedPartition<ScriptedPorts> {
    let mut partition = SupervisedPartition::start(ports.clone(), RetryPolicy::default(), || 0.5);
    partition
        .become_leader(BecomeLeader {
            leader_epoch: 2,
            desired: Desired::Mirroring,
        })
        .await
        .expect("alive")
        .expect("accepted");
    partition
}

/// Plays the supervisor (a check every interval) until the partition reports `state`; returns
/// its snapshot and every verdict that was not Healthy.
async fn supervise_until(
    partition: &mut SupervisedPartition<ScriptedPorts>,
    state: MirrorState,
) -> (PartitionSnapshot, Vec<Verdict>) {
    let interval = Duration::from_millis(POLICY.check_interval_ms());
    let clock = tokio::time::Instant::now();
    let mut verdicts = Vec::new();
    for _ in 0..400 {
        tokio::time::sleep(interval).await;
        let observation = partition.observe(interval).await;
        let now_ms = clock.elapsed().as_millis() as i64;
        match partition.supervise(&POLICY, now_ms, observation) {
            Verdict::Healthy => {}
            other => verdicts.push(other),
        }
        if let Ok(snapshot) = partition.addr().send(DescribePartition).await
            && snapshot.state == state
        {
            return (snapshot, verdicts);
        }
    }
    panic!("never reached {state:?}; verdicts {verdicts:?}");
}

#[actix_rt::test]
async fn a_partition_stuck_on_an_effect_is_restarted_and_resumes() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    ports.0.borrow_mut().lme_hangs = 1;
    let mut partition = supervised(&ports).await;
    let (snapshot, verdicts) = supervise_until(&mut partition, MirrorState::Mirroring).await;
    assert_eq!(verdicts, [Verdict::Restart]);
    assert_eq!(snapshot.restarts, 1);
    let calls = ports.calls();
    let lookups = calls.iter().filter(|c| *c == "lookup lme").count();
    assert_eq!(lookups, 2, "asked again after the restart: {calls:?}");
    assert!(
        calls.iter().filter(|c| *c == "load").count() >= 2,
        "the restart reloaded the persisted state: {calls:?}"
    );
}

#[actix_rt::test]
async fn a_partition_that_never_moves_is_failed_when_its_restart_budget_is_spent() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    ports.0.borrow_mut().lme_hangs = u32::MAX;
    let mut partition = supervised(&ports).await;
    let (snapshot, verdicts) = supervise_until(&mut partition, MirrorState::Failed).await;
    assert_eq!(verdicts.len(), 3, "{verdicts:?}");
    assert_eq!(&verdicts[..2], [Verdict::Restart, Verdict::Restart]);
    assert!(matches!(
        &verdicts[2],
        Verdict::GiveUp {
            recreate: false,
            ..
        }
    ));
    assert_eq!(snapshot.restarts, 2);
    assert_eq!(
        snapshot.retry_attempt, -1,
        "not retried by the state machine"
    );
    let error = snapshot.error.unwrap_or_default();
    assert!(
        error.contains("no progress") && error.contains("after 2 restarts"),
        "{error}"
    );
    let stored = ports.0.borrow().stored.clone().expect("persisted");
    assert_eq!(
        stored.state,
        MirrorState::Failed,
        "the coordinator holds FAILED"
    );
    assert_eq!(stored.error.as_deref(), Some(error.as_str()));
}

#[actix_rt::test]
async fn an_actor_killed_by_a_panic_is_created_again_with_its_leadership() {
    tokio::time::pause();
    let ports = ScriptedPorts::default();
    ports.0.borrow_mut().load_panics = 1;
    let mut partition = supervised(&ports).await;
    let first = partition.addr().clone();
    let (snapshot, verdicts) = supervise_until(&mut partition, MirrorState::Mirroring).await;
    assert_eq!(verdicts, [Verdict::Recreate]);
    assert!(!first.connected(), "the first actor died");
    assert_eq!(snapshot.leader_epoch, 2, "the leadership was replayed");
    assert!(ports.0.borrow().fetcher.is_some(), "mirroring again");
}
