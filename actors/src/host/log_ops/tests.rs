//! Where a stop cuts ([`stop_cut`]), over the in-memory log.

use super::*;
use crate::memory::MemoryLog;

/// The timestamp [`MemoryLog::produce`] gives its `n`th batch.
fn nth_batch_time(n: i64) -> i64 {
    1_700_000_000_000 + n
}

/// A transaction whose marker lies above the last stable offset leaves its data below it:
/// cutting at the LSO alone would keep an aborted transaction's records without their end,
/// and the barrier would make them readable as committed. The cut goes below its first offset.
#[test]
fn a_stop_cuts_below_a_transaction_it_would_leave_without_its_end() {
    let mut log = MemoryLog::default();
    log.produce(3, 0, -1, false); // 0..3: plain
    log.produce(2, 0, 1, true); // 3..5: T1
    log.produce(4, 0, 2, true); // 5..9: T2, open at the end
    log.append_marker(1, false, 0); // 9: T1 aborted
    assert_eq!(log.last_stable_offset(), 5);
    let cut = stop_cut(&log, None).expect("read");
    assert_eq!(
        cut,
        StopCut {
            offset: 3,
            records: 6,
            open_transactions: 2,
        }
    );
    let (_, removed) = truncate_to_lso(&mut log, "dest", None).expect("cut");
    assert_eq!(removed, cut.records);
    assert_eq!(log.log_end_offset(), 3);
}

/// Without a transaction, a stop cuts at the LSO (the log end): nothing goes.
#[test]
fn a_log_without_open_transactions_is_not_cut() {
    let mut log = MemoryLog::default();
    log.produce(3, 0, -1, false);
    log.produce(2, 0, 1, true);
    log.append_marker(1, true, 0);
    let cut = stop_cut(&log, None).expect("read");
    assert_eq!(cut.offset, log.log_end_offset());
    assert_eq!((cut.records, cut.open_transactions), (0, 0));
}

/// A consistent cut at T removes every batch from the first one newer than T, as well as what
/// the LSO cut removes; the count is the records the truncation then removes.
#[test]
fn a_consistent_cut_removes_every_batch_from_the_first_newer_one() {
    let mut log = MemoryLog::default();
    for _ in 0..5 {
        log.produce(1, 0, -1, false); // batches 1..=5 at offsets 0..5
    }
    let cut = stop_cut(&log, Some(nth_batch_time(3))).expect("read");
    assert_eq!(
        cut,
        StopCut {
            offset: 3,
            records: 2,
            open_transactions: 0,
        }
    );
    let (_, removed) = truncate_to_lso(&mut log, "dest", Some(nth_batch_time(3))).expect("cut");
    assert_eq!(removed, 2);
    assert!(
        log.batches()
            .iter()
            .all(|b| b.max_timestamp() <= nth_batch_time(3)),
        "no record newer than the cut is left"
    );
    // A point after every batch cuts nothing; one before all of them cuts everything.
    let mut log = MemoryLog::default();
    log.produce(1, 0, -1, false);
    assert_eq!(
        stop_cut(&log, Some(nth_batch_time(9)))
            .expect("read")
            .records,
        0
    );
    assert_eq!(stop_cut(&log, Some(0)).expect("read").offset, 0);
}
