//! The coordinator shard actor with a scripted `__mirror_state` partition on paused time.

use super::*;
use crate::actor::ports::PortFuture;
use crate::coordinator::shard::tests::{
    SHARDS, partition_in, read as read_request, write as write_request,
};
use crate::partition::Cause;
use actix::{Actor, Addr};
use kmirror_protocol::messages::WriteMirrorStatesResponse;
use kmirror_protocol::records::CoordinatorRecord;
use kmirror_protocol::state::MirrorState;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::sync::oneshot;
use uuid::Uuid;

#[derive(Default)]
struct Partition {
    records: Vec<CoordinatorRecord>,
    /// Loading waits for this, when set.
    load_gate: Option<oneshot::Receiver<()>>,
    fail_appends: bool,
    /// When set, the next append is durable only once this is released (or fails if it is
    /// dropped).
    sync_gate: Option<oneshot::Receiver<()>>,
}

#[derive(Clone, Default)]
struct ScriptedLog(Rc<RefCell<Partition>>);

impl ShardLogPorts for ScriptedLog {
    fn read_all(&self) -> PortFuture<Result<Vec<CoordinatorRecord>, Cause>> {
        let gate = self.0.borrow_mut().load_gate.take();
        let log = self.0.clone();
        Box::pin(async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            Ok(log.borrow().records.clone())
        })
    }

    fn append(
        &self,
        records: Vec<CoordinatorRecord>,
    ) -> Result<PortFuture<Result<(), Cause>>, Cause> {
        let mut log = self.0.borrow_mut();
        if log.fail_appends {
            return Err(Cause::retryable("disk full"));
        }
        log.records.extend(records);
        let gate = log.sync_gate.take();
        Ok(Box::pin(async move {
            match gate {
                Some(gate) => gate.await.map_err(|_| Cause::retryable("the sync failed")),
                None => Ok(()),
            }
        }))
    }
}

/// A partition of topic `id` in mirror "dr" owned by shard 0.
fn owned_partition(id: Uuid) -> i32 {
    partition_in(0, id)
}

fn write(
    id: Uuid,
    partition: i32,
    state: MirrorState,
    leader_epoch: i32,
    lme: i32,
) -> WriteMirrorStates {
    WriteMirrorStates(write_request(id, partition, state, leader_epoch, lme))
}

fn read(id: Uuid, partition: i32) -> ReadMirrorStates {
    ReadMirrorStates(read_request(id, partition))
}

fn code(r: &WriteMirrorStatesResponse) -> i16 {
    r.topics[0].partitions[0].error_code
}

fn start(log: &ScriptedLog) -> Addr<CoordinatorShard<ScriptedLog>> {
    CoordinatorShard::new(0, SHARDS, log.clone()).start()
}

/// [`start`], then lets the load finish.
async fn start_loaded(log: &ScriptedLog) -> Addr<CoordinatorShard<ScriptedLog>> {
    let shard = start(log);
    tokio::time::sleep(Duration::from_millis(10)).await;
    shard
}

#[actix_rt::test]
async fn writes_are_durable_before_they_are_answered_and_a_new_leader_replays_them() {
    tokio::time::pause();
    let log = ScriptedLog::default();
    let id = Uuid::from_u128(7);
    let p = owned_partition(id);
    let shard = start_loaded(&log).await;
    let answer = shard
        .send(write(id, p, MirrorState::Stopped, 4, 3))
        .await
        .expect("alive");
    assert_eq!(code(&answer), 0);
    assert_eq!(
        log.0.borrow().records.len(),
        2,
        "the state and the mirror's LMEs"
    );
    let fenced = shard
        .send(write(id, p, MirrorState::Mirroring, 3, -1))
        .await
        .expect("alive");
    assert_eq!(
        code(&fenced),
        74,
        "FENCED_LEADER_EPOCH: a write from an older leader"
    );
    drop(shard);

    let successor = start_loaded(&log).await;
    let state = successor.send(read(id, p)).await.expect("alive");
    let partition = &state.topics[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert_eq!(partition.state, MirrorState::Stopped.wire_value());
    assert_eq!(partition.leader_epoch, 4);
    let lme = successor
        .send(LastMirroredEpoch {
            mirror: "dr".into(),
            topic: "orders".into(),
            partition: p,
        })
        .await
        .expect("alive");
    assert_eq!(lme, Some(3));
}

#[actix_rt::test]
async fn while_loading_requests_are_answered_load_in_progress() {
    tokio::time::pause();
    let log = ScriptedLog::default();
    let (release, gate) = oneshot::channel();
    log.0.borrow_mut().load_gate = Some(gate);
    let id = Uuid::from_u128(9);
    let p = owned_partition(id);
    let shard = start(&log);
    let answer = shard
        .send(write(id, p, MirrorState::Preparing, 1, -1))
        .await
        .expect("alive");
    assert_eq!(code(&answer), 14, "COORDINATOR_LOAD_IN_PROGRESS");
    assert!(log.0.borrow().records.is_empty());
    assert!(
        shard
            .send(ForgetAllBut(Default::default()))
            .await
            .expect("alive")
            .is_err()
    );
    let _ = release.send(());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let answer = shard
        .send(write(id, p, MirrorState::Preparing, 1, -1))
        .await
        .expect("alive");
    assert_eq!(code(&answer), 0);
}

#[actix_rt::test]
async fn a_failed_append_changes_nothing() {
    tokio::time::pause();
    let log = ScriptedLog::default();
    let id = Uuid::from_u128(11);
    let p = owned_partition(id);
    let shard = start_loaded(&log).await;
    assert_eq!(
        code(
            &shard
                .send(write(id, p, MirrorState::Mirroring, 2, -1))
                .await
                .expect("alive")
        ),
        0
    );
    log.0.borrow_mut().fail_appends = true;
    let failed = shard
        .send(write(id, p, MirrorState::Paused, 2, -1))
        .await
        .expect("alive");
    assert_eq!(code(&failed), 56, "KAFKA_STORAGE_ERROR");
    let state = shard.send(read(id, p)).await.expect("alive");
    assert_eq!(
        state.topics[0].partitions[0].state,
        MirrorState::Mirroring.wire_value(),
        "the shard still holds what is durable"
    );
    log.0.borrow_mut().fail_appends = false;
    shard
        .send(ForgetAllBut(Default::default()))
        .await
        .expect("alive")
        .expect("deleted");
    let state = shard.send(read(id, p)).await.expect("alive");
    assert_eq!(
        state.topics[0].partitions[0].state,
        MirrorState::Unknown.wire_value()
    );
}

/// Writes pipeline through the sync: while one write waits to be durable the next is
/// validated (seeing the first), appended and answered once its own sync is done; the first is
/// answered only when durable, and one whose sync fails is answered KAFKA_STORAGE_ERROR.
#[actix_rt::test]
async fn writes_go_on_while_an_earlier_one_waits_for_its_sync() {
    tokio::time::pause();
    let log = ScriptedLog::default();
    let (a, b) = (Uuid::from_u128(21), Uuid::from_u128(22));
    let shard = start_loaded(&log).await;
    let (release, gate) = oneshot::channel();
    log.0.borrow_mut().sync_gate = Some(gate);
    let first =
        actix_rt::spawn(shard.send(write(a, owned_partition(a), MirrorState::Stopped, 4, 3)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = shard
        .send(write(b, owned_partition(b), MirrorState::Mirroring, 2, -1))
        .await
        .expect("alive");
    assert_eq!(code(&second), 0, "answered while the first waits");
    assert!(!first.is_finished(), "the first waits for its sync");
    let fenced = shard
        .send(write(a, owned_partition(a), MirrorState::Mirroring, 3, -1))
        .await
        .expect("alive");
    assert_eq!(code(&fenced), 74, "validated against the first write");
    let _ = release.send(());
    let first = first.await.expect("joined").expect("alive");
    assert_eq!(code(&first), 0);

    let (failing, gate) = oneshot::channel::<()>();
    log.0.borrow_mut().sync_gate = Some(gate);
    let third =
        actix_rt::spawn(shard.send(write(b, owned_partition(b), MirrorState::Paused, 2, -1)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(failing);
    let third = third.await.expect("joined").expect("alive");
    assert_eq!(code(&third), 56, "KAFKA_STORAGE_ERROR: never made durable");
}
