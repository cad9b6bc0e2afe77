use super::*;
use std::cell::Cell;

const TIMEOUT: i32 = 60_000;

fn open(dir: &Path) -> (TransactionCoordinator, Vec<Completion>) {
    TransactionCoordinator::open(dir, 900_000).expect("open")
}

/// Producer ids 1000, 1001, ... as the controller would hand them out.
fn allocator() -> impl Fn() -> Result<i64, crate::controller::ControllerError> {
    let next = Cell::new(1000);
    move || {
        let id = next.get();
        next.set(id + 1);
        Ok(id)
    }
}

/// InitProducerId for "tx" that must be ready at once.
fn init(
    coordinator: &TransactionCoordinator,
    timeout_ms: i32,
    now_ms: i64,
    allocate: AllocateProducerId<'_>,
) -> (i64, i16) {
    match coordinator.init_producer_id("tx", timeout_ms, None, now_ms, allocate) {
        Ok(InitOutcome::Ready(m)) => (m.producer_id, m.producer_epoch),
        other => panic!("expected ready, got {other:?}"),
    }
}

fn partitions() -> Vec<(String, i32)> {
    vec![("orders".to_string(), 0), ("orders".to_string(), 1)]
}

#[test]
fn commit_carries_markers_for_partitions_and_groups_then_completes_durably() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, pending) = open(dir.path());
    assert!(pending.is_empty());
    let producer = init(&coordinator, TIMEOUT, 0, &allocate);
    assert_eq!(producer, (1000, 0));
    coordinator
        .add("tx", producer, &partitions(), None, 1)
        .expect("add partitions");
    assert!(coordinator.includes(producer, "orders", 1));
    assert!(!coordinator.includes(producer, "orders", 2));
    coordinator
        .add("tx", producer, &[], Some("copier"), 2)
        .expect("add offsets");
    let completion = coordinator
        .end("tx", producer, true, 4)
        .expect("end")
        .expect("a completion");
    assert!(completion.commit);
    assert_eq!(completion.partitions, partitions());
    assert_eq!(
        completion.groups,
        ["copier"],
        "the group's coordinator gets a marker"
    );
    assert_eq!(
        coordinator.describe("tx").map(|m| m.state),
        Some(TxnState::PrepareCommit)
    );
    coordinator.completed(&completion, 5).expect("completed");
    let done = coordinator.describe("tx").expect("known");
    assert_eq!(done.state, TxnState::CompleteCommit);
    assert!(done.partitions.is_empty());
    assert!(done.groups.is_empty());
    // A retried EndTxn of the same decision succeeds without new work.
    assert_eq!(coordinator.end("tx", producer, true, 6), Ok(None));
    assert_eq!(
        coordinator.end("tx", producer, false, 6),
        Err(TxnError::InvalidTxnState)
    );
    drop(coordinator);
    let (reopened, pending) = open(dir.path());
    assert!(pending.is_empty());
    assert_eq!(reopened.describe("tx"), Some(done));
}

#[test]
fn a_decision_a_crash_interrupted_is_handed_back_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, _) = open(dir.path());
    let producer = init(&coordinator, TIMEOUT, 0, &allocate);
    coordinator
        .add("tx", producer, &partitions(), None, 1)
        .expect("add");
    let completion = coordinator
        .end("tx", producer, false, 2)
        .expect("end")
        .expect("a completion");
    drop(coordinator);
    let (reopened, pending) = open(dir.path());
    assert_eq!(pending, vec![completion.clone()]);
    assert!(!pending[0].commit);
    reopened.completed(&completion, 3).expect("completed");
    assert_eq!(
        reopened.describe("tx").map(|m| m.state),
        Some(TxnState::CompleteAbort)
    );
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, _) = open(dir.path());
    let old = init(&coordinator, TIMEOUT, 0, &allocate);
    coordinator
        .add("tx", old, &partitions(), None, 1)
        .expect("add");
    let InitOutcome::AbortFirst(aborting, completion) = coordinator
        .init_producer_id("tx", TIMEOUT, None, 2, &allocate)
        .expect("init again")
    else {
        panic!("the open transaction must be aborted first");
    };
    assert_eq!(aborting.producer_epoch, 1);
    assert!(!completion.commit);
    assert_eq!(completion.producer_epoch, 1);
    assert_eq!(
        coordinator.init_producer_id("tx", TIMEOUT, None, 3, &allocate),
        Err(TxnError::ConcurrentTransactions)
    );
    coordinator.completed(&completion, 3).expect("completed");
    let new = init(&coordinator, TIMEOUT, 4, &allocate);
    assert_eq!(new, (old.0, 2));
    assert_eq!(
        coordinator.add("tx", old, &partitions(), None, 5),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        coordinator.add("tx", (77, 2), &partitions(), None, 5),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert!(!coordinator.includes(old, "orders", 0));
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_with_a_bumped_epoch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, _) = open(dir.path());
    let producer = init(&coordinator, 1_000, 0, &allocate);
    coordinator
        .add("tx", producer, &partitions(), None, 100)
        .expect("add");
    assert!(coordinator.expire(1_099, &allocate).is_empty());
    let expired = coordinator.expire(1_100, &allocate);
    assert_eq!(expired.len(), 1);
    assert!(!expired[0].commit);
    assert_eq!(expired[0].producer_epoch, producer.1 + 1);
    assert!(coordinator.stalled(1_100).is_empty());
    assert_eq!(coordinator.stalled(1_100 + STALLED_COMPLETION_MS), expired);
    assert_eq!(
        coordinator.end("tx", producer, true, 1_200),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn an_exhausted_epoch_moves_to_a_new_producer_id() {
    let metadata = TxnMetadata {
        producer_epoch: i16::MAX - 1,
        ..TxnMetadata::new(5, TIMEOUT, 0)
    };
    let InitOutcome::Ready(next) = metadata.init("tx", TIMEOUT, None, 6, 1).expect("init") else {
        panic!("an empty transaction is ready at once");
    };
    assert_eq!((next.producer_id, next.producer_epoch), (6, 0));
}

#[test]
fn offsets_need_the_group_in_the_ongoing_transaction_and_timeouts_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, _) = open(dir.path());
    assert_eq!(
        coordinator.init_producer_id("tx", 900_001, None, 0, &allocate),
        Err(TxnError::InvalidTransactionTimeout)
    );
    let is_g = |g: &str| g == "g";
    assert_eq!(
        coordinator.check_offsets("nobody", (1, 0), is_g),
        Err(TxnError::InvalidProducerIdMapping)
    );
    let producer = init(&coordinator, TIMEOUT, 0, &allocate);
    coordinator
        .add("tx", producer, &partitions(), None, 1)
        .expect("add");
    assert_eq!(
        coordinator.check_offsets("tx", producer, is_g),
        Err(TxnError::InvalidTxnState),
        "the group was not added (AddOffsetsToTxn)"
    );
    coordinator
        .add("tx", producer, &[], Some("g"), 2)
        .expect("add offsets");
    assert_eq!(coordinator.check_offsets("tx", producer, is_g), Ok(()));
    // A new epoch fences the old one's offsets.
    let fencing = coordinator.init_producer_id("tx", TIMEOUT, None, 3, &allocate);
    assert!(
        matches!(fencing, Ok(InitOutcome::AbortFirst(..))),
        "{fencing:?}"
    );
    assert_eq!(
        coordinator.check_offsets("tx", producer, is_g),
        Err(TxnError::ProducerFenced)
    );
}

#[test]
fn reopening_compacts_superseded_states() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allocate = allocator();
    let (coordinator, _) = open(dir.path());
    let mut producer = (0, 0);
    for round in 0..100 {
        producer = init(&coordinator, TIMEOUT, round, &allocate);
    }
    drop(coordinator);
    let path = dir.path().join("transactions.log");
    let before = std::fs::metadata(&path).expect("log").len();
    let (reopened, _) = open(dir.path());
    let after = std::fs::metadata(&path).expect("log").len();
    assert!(after * 50 < before, "{after} bytes after, {before} before");
    assert_eq!(
        reopened
            .describe("tx")
            .map(|m| (m.producer_id, m.producer_epoch)),
        Some(producer)
    );
    reopened
        .add("tx", producer, &partitions(), None, 200)
        .expect("the compacted log takes appends");
    drop(reopened);
    let (again, _) = open(dir.path());
    assert_eq!(
        again.describe("tx").map(|m| m.state),
        Some(TxnState::Ongoing)
    );
}
