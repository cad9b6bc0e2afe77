use super::*;
use kmirror_protocol::records::{ControlBatchHeader, ControlRecord};
use kmirror_protocol::testing::BatchSpec;

fn data(
    base_offset: i64,
    producer_id: i64,
    epoch: i16,
    seq: i32,
    records: usize,
    txn: bool,
) -> RecordBatch {
    let bytes = BatchSpec {
        base_offset,
        producer_id,
        producer_epoch: epoch,
        base_sequence: seq,
        transactional: txn,
        records,
        ..BatchSpec::default()
    }
    .build();
    RecordBatch::new(bytes).expect("one batch")
}

fn marker(offset: i64, producer_id: i64, epoch: i16, commit: bool) -> (RecordBatch, ControlRecord) {
    let record = ControlRecord::EndTxn {
        commit,
        coordinator_epoch: 0,
    };
    let header = ControlBatchHeader {
        base_offset: offset,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch: epoch,
        timestamp_ms: 0,
    };
    let batch = RecordBatch::new(record.to_batch(&header).expect("builds")).expect("one batch");
    (batch, record)
}

#[test]
fn idempotent_checks_fence_reorder_and_dedupe() {
    let mut s = ProducerStateManager::default();
    let first = data(0, 7, 1, 0, 3, false);
    assert_eq!(
        s.check_produce(&first).expect("new producer"),
        ProduceCheck::Append
    );
    s.apply(&first, None);
    // A retry of the same batch is a duplicate with the original offsets.
    match s
        .check_produce(&data(50, 7, 1, 0, 3, false))
        .expect("checked")
    {
        ProduceCheck::Duplicate(meta) => assert_eq!((meta.first_offset, meta.last_offset), (0, 2)),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // The next sequence is 3; 5 is out of order.
    assert!(matches!(
        s.check_produce(&data(3, 7, 1, 5, 1, false)),
        Err(StorageError::OutOfOrderSequence {
            expected_sequence: 3,
            ..
        })
    ));
    assert_eq!(
        s.check_produce(&data(3, 7, 1, 3, 1, false))
            .expect("in order"),
        ProduceCheck::Append
    );
    // An older epoch is fenced; a newer one must restart at sequence 0.
    assert!(matches!(
        s.check_produce(&data(3, 7, 0, 3, 1, false)),
        Err(StorageError::InvalidProducerEpoch {
            current_epoch: 1,
            ..
        })
    ));
    assert!(matches!(
        s.check_produce(&data(3, 7, 2, 3, 1, false)),
        Err(StorageError::OutOfOrderSequence {
            expected_sequence: 0,
            ..
        })
    ));
    assert_eq!(
        s.check_produce(&data(3, 7, 2, 0, 1, false))
            .expect("new epoch"),
        ProduceCheck::Append
    );
}

#[test]
fn transactions_drive_lso_and_the_aborted_list() {
    let mut s = ProducerStateManager::default();
    s.apply(&data(0, 1, 0, 0, 2, true), None); // txn of producer 1 opens at 0
    s.apply(&data(2, 2, 0, 0, 1, false), None);
    s.apply(&data(3, 3, 0, 0, 1, true), None); // txn of producer 3 opens at 3
    assert_eq!(s.first_unstable_offset(), Some(0));
    let (abort, record) = marker(4, 1, 0, false);
    s.apply(&abort, Some(&record));
    assert_eq!(s.first_unstable_offset(), Some(3));
    let (commit, record) = marker(5, 3, 0, true);
    s.apply(&commit, Some(&record));
    assert_eq!(s.first_unstable_offset(), None);
    let aborted = AbortedTxn {
        producer_id: 1,
        first_offset: 0,
        last_offset: 4,
    };
    assert_eq!(s.aborted_between(0, 6), [aborted]);
    assert_eq!(s.aborted_between(4, 6), [aborted]);
    assert!(s.aborted_between(5, 6).is_empty());
    // Markers from an older coordinator or producer epoch are rejected.
    assert!(s.check_marker(1, 0, 0).is_ok());
    assert!(matches!(
        s.check_marker(1, -1, 0),
        Err(StorageError::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        s.check_marker(1, 0, -5),
        Err(StorageError::CoordinatorFenced { .. })
    ));
}

#[test]
fn pid_reset_forgets_producers_but_keeps_aborted_history() {
    let mut s = ProducerStateManager::default();
    s.apply(&data(0, 1, 0, 0, 1, true), None);
    let (abort, record) = marker(1, 1, 0, false);
    s.apply(&abort, Some(&record));
    s.apply(&data(2, 9, 4, 10, 1, true), None);
    let reset = ControlRecord::MirrorPidReset {
        source_cluster_id: "src".into(),
    };
    let batch = RecordBatch::new(
        reset
            .to_batch(&ControlBatchHeader::without_producer(3, 1, 0))
            .expect("builds"),
    )
    .expect("one batch");
    s.apply(&batch, Some(&reset));
    assert_eq!(s.producer_count(), 0);
    assert_eq!(s.first_unstable_offset(), None);
    assert_eq!(s.aborted_between(0, 10).len(), 1);
    // The source's producer may not continue its sequence: it is unknown now, so a fresh
    // producer with that id starts anywhere, and nothing is deduplicated against old batches.
    assert_eq!(
        s.check_produce(&data(4, 9, 4, 10, 1, false))
            .expect("unknown"),
        ProduceCheck::Append
    );
}

#[test]
fn snapshots_round_trip_and_reject_damage() {
    let mut s = ProducerStateManager::default();
    s.apply(&data(0, 1, 3, 0, 2, true), None);
    s.apply(&data(2, 2, 0, 7, 1, false), None);
    let (abort, record) = marker(3, 1, 3, false);
    s.apply(&abort, Some(&record));
    s.apply(&data(4, 1, 3, 2, 1, true), None);
    let snapshot = s.encode_snapshot(5);
    assert_eq!(
        ProducerStateManager::decode_snapshot(snapshot.clone()),
        Some((s.clone(), 5))
    );
    for at in [0, 3, 10, snapshot.len() - 1] {
        let mut bad = snapshot.to_vec();
        bad[at] ^= 1;
        assert_eq!(
            ProducerStateManager::decode_snapshot(Bytes::from(bad)),
            None,
            "flip at {at}"
        );
    }
    assert_eq!(
        ProducerStateManager::decode_snapshot(snapshot.slice(..20)),
        None
    );
}

#[test]
fn retention_drops_what_lies_before_the_log_start() {
    let mut s = ProducerStateManager::default();
    s.apply(&data(0, 1, 0, 0, 1, false), None);
    s.apply(&data(1, 2, 0, 0, 1, true), None);
    s.apply(&data(5, 3, 0, 0, 1, false), None);
    s.truncate_head(3);
    assert!(s.producer(1).is_none());
    assert!(
        s.producer(2).is_some(),
        "an ongoing transaction keeps its producer"
    );
    assert!(s.producer(3).is_some());
}
