//! Random sequences of appends, truncations, log-start moves and restarts, run against the real
//! log and a plain in-memory model; after every step both must hold the same batches (bytes and
//! offsets), the same LSO, the same aborted transactions and the same epoch answers.

use bytes::Bytes;
use kmirror::storage::{AbortedTxn, GapPolicy, LogConfig, OpenFiles, PartitionLog};
use kmirror_protocol::batch::{RecordBatch, RecordBatches};
use kmirror_protocol::records::{ControlBatchHeader, ControlRecord};
use kmirror_protocol::testing::BatchSpec;
use proptest::prelude::*;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

const NOW: i64 = 1_700_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    /// Produce `records` records, optionally as producer `pid` (idempotent, maybe in a transaction).
    Produce {
        records: usize,
        pid: Option<i64>,
        txn: bool,
        bump_epoch: bool,
    },
    /// A mirrored batch at the log end with the current epoch (bumped first, maybe).
    Mirror { records: usize, bump_epoch: bool },
    /// End producer `pid`'s transaction, if one is open.
    EndTxn { pid: i64, commit: bool },
    /// The failover barrier.
    PidReset,
    /// Truncate at a point between the log start (0.0) and end (1.0).
    Truncate(f64),
    /// Move the log start up, at most to the LSO.
    AdvanceStart(f64),
    /// Flush, then either close cleanly or drop (a crash after the flush), and reopen.
    Restart { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1usize..5, prop::option::of(0i64..3), any::<bool>(), prop::bool::weighted(0.1))
            .prop_map(|(records, pid, txn, bump_epoch)| Op::Produce { records, pid, txn, bump_epoch }),
        3 => (1usize..5, prop::bool::weighted(0.2)).prop_map(|(records, bump_epoch)| Op::Mirror { records, bump_epoch }),
        2 => (0i64..3, any::<bool>()).prop_map(|(pid, commit)| Op::EndTxn { pid, commit }),
        1 => Just(Op::PidReset),
        1 => (0.0f64..1.0).prop_map(Op::Truncate),
        1 => (0.0f64..1.0).prop_map(Op::AdvanceStart),
        1 => any::<bool>().prop_map(|clean| Op::Restart { clean }),
    ]
}

/// The model: the batches the log should hold, in order, and its start.
#[derive(Default)]
struct Model {
    batches: Vec<Bytes>,
    log_start: i64,
    leo: i64,
    epoch: i32,
}

fn batch(b: &Bytes) -> RecordBatch {
    RecordBatch::new(b.clone()).expect("model batches are whole")
}

impl Model {
    fn visible(&self) -> impl Iterator<Item = RecordBatch> + '_ {
        self.batches
            .iter()
            .map(batch)
            .filter(|b| b.last_offset() >= self.log_start)
    }

    /// Per producer: the open transaction's first offset and the last sequence, and the offsets
    /// of visible data batches whose transaction was aborted, as a consumer reading from the log
    /// start sees them.
    fn producers(&self) -> (HashMap<i64, i64>, HashMap<i64, i32>, BTreeSet<i64>) {
        let mut open: HashMap<i64, i64> = HashMap::new();
        let mut members: HashMap<i64, Vec<i64>> = HashMap::new();
        let mut last_seq = HashMap::new();
        let mut aborted = BTreeSet::new();
        for b in self.visible() {
            if b.is_control() {
                match ControlRecord::parse(&b).expect("model control batches parse") {
                    ControlRecord::MirrorPidReset { .. } => {
                        open.clear();
                        members.clear();
                        last_seq.clear();
                    }
                    ControlRecord::EndTxn { commit, .. } => {
                        open.remove(&b.producer_id());
                        let txn = members.remove(&b.producer_id()).unwrap_or_default();
                        if !commit {
                            aborted.extend(txn);
                        }
                    }
                    ControlRecord::Other { .. } => {}
                }
            } else if b.producer_id() >= 0 {
                last_seq.insert(b.producer_id(), b.last_sequence());
                if b.is_transactional() {
                    open.entry(b.producer_id()).or_insert(b.base_offset());
                    members
                        .entry(b.producer_id())
                        .or_default()
                        .push(b.base_offset());
                }
            }
        }
        (open, last_seq, aborted)
    }

    /// What the log's aborted-transaction list says of the visible transactional data batches.
    fn aborted_by(&self, list: &[AbortedTxn]) -> BTreeSet<i64> {
        self.visible()
            .filter(|b| !b.is_control() && b.is_transactional())
            .filter(|b| {
                list.iter().any(|a| {
                    a.producer_id == b.producer_id()
                        && a.first_offset <= b.base_offset()
                        && b.base_offset() <= a.last_offset
                })
            })
            .map(|b| b.base_offset())
            .collect()
    }

    /// Per producer, the last sequence it wrote since the last PID reset: what a producer
    /// continues from. (The log may have forgotten the producer, and then accepts any sequence.)
    fn last_sequences(&self) -> HashMap<i64, i32> {
        let mut last = HashMap::new();
        for b in self.batches.iter().map(batch) {
            if b.is_control() {
                if matches!(
                    ControlRecord::parse(&b),
                    Ok(ControlRecord::MirrorPidReset { .. })
                ) {
                    last.clear();
                }
            } else if b.producer_id() >= 0 {
                last.insert(b.producer_id(), b.last_sequence());
            }
        }
        last
    }

    /// The offset after the last marker (or PID reset) that ended a transaction which began below
    /// the log start.
    fn markers_of_transactions_before_start(&self) -> i64 {
        let mut first: HashMap<i64, i64> = HashMap::new();
        let mut floor = 0;
        for b in self.batches.iter().map(batch) {
            if b.is_control() {
                // A PID reset ends every transaction, a marker its producer's.
                let ended: Vec<i64> = if b.producer_id() < 0 {
                    first.drain().map(|(_, f)| f).collect()
                } else {
                    first.remove(&b.producer_id()).into_iter().collect()
                };
                if ended.iter().any(|f| *f < self.log_start) {
                    floor = b.next_offset();
                }
            } else if b.is_transactional() {
                first.entry(b.producer_id()).or_insert(b.base_offset());
            }
        }
        floor
    }

    fn lso(&self) -> i64 {
        let (open, _, _) = self.producers();
        open.values()
            .copied()
            .min()
            .unwrap_or(self.leo)
            .min(self.leo)
            .max(self.log_start)
    }

    /// Kafka's OffsetForLeaderEpoch over epochs derived from the batches themselves.
    fn end_offset_for(&self, requested: i32) -> (i32, i64) {
        if requested < 0 {
            return (-1, -1);
        }
        let mut epochs: Vec<(i32, i64)> = Vec::new();
        for b in self.visible() {
            let e = b.partition_leader_epoch();
            if epochs.last().is_none_or(|(last, _)| e > *last) {
                epochs.push((e, b.base_offset().max(self.log_start)));
            }
        }
        if epochs.last().map(|(e, _)| *e) == Some(requested) {
            return (requested, self.leo);
        }
        match epochs.iter().find(|(e, _)| *e > requested) {
            None => (-1, -1),
            Some((_, higher_start)) => {
                let floor = epochs
                    .iter()
                    .rev()
                    .find(|(e, _)| *e <= requested)
                    .map_or(requested, |(e, _)| *e);
                (floor, *higher_start)
            }
        }
    }

    fn push(&mut self, bytes: Bytes) {
        self.leo = batch(&bytes).next_offset();
        self.batches.push(bytes);
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn reopen(dir: &Path) -> PartitionLog {
    PartitionLog::open(dir, config(), &OpenFiles::new(64), NOW)
        .expect("opens")
        .0
}

fn stored(log: &PartitionLog) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    loop {
        let r = log
            .read(offset, 700, log.log_end_offset(), true)
            .expect("reads within the log");
        if r.records.is_empty() {
            return out;
        }
        out.extend_from_slice(&r.records.to_bytes().expect("read"));
        offset = r.next_offset;
    }
}

fn check(log: &PartitionLog, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_end_offset(), model.leo);
    prop_assert_eq!(log.log_start_offset(), model.log_start);
    let expected: Vec<u8> = model
        .visible()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect();
    let actual = stored(log);
    prop_assert!(
        actual == expected,
        "stored bytes differ: {} vs {} bytes",
        actual.len(),
        expected.len()
    );
    prop_assert!(
        RecordBatches::new(Bytes::from(actual)).all(|b| b.is_ok_and(|b| b.verify_crc().is_ok()))
    );
    prop_assert_eq!(log.last_stable_offset(), model.lso());
    let (_, _, aborted) = model.producers();
    let listed = log.aborted_transactions(model.log_start, model.leo + 1);
    prop_assert_eq!(model.aborted_by(&listed), aborted);
    for epoch in -1..=model.epoch + 1 {
        prop_assert_eq!(
            log.end_offset_for(epoch),
            model.end_offset_for(epoch),
            "epoch {}",
            epoch
        );
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut log = reopen(dir.path());
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Produce {
                records,
                pid,
                txn,
                bump_epoch,
            } => {
                model.epoch += i32::from(bump_epoch);
                let (open, _, _) = model.producers();
                let last_seq = model.last_sequences();
                let (producer_id, producer_epoch, base_sequence, transactional) = match pid {
                    Some(p) => (
                        p,
                        0,
                        last_seq.get(&p).map_or(0, |s| s + 1),
                        txn || open.contains_key(&p),
                    ),
                    None => (-1, -1, -1, false),
                };
                let spec = BatchSpec {
                    base_offset: model.leo,
                    partition_leader_epoch: model.epoch,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    transactional,
                    records,
                    value_size: 40,
                    ..BatchSpec::default()
                };
                // The client's batch starts at offset 0 with no epoch; the leader rewrites both.
                let sent = BatchSpec {
                    base_offset: 0,
                    partition_leader_epoch: -1,
                    ..spec
                }
                .build();
                log.append_as_leader(sent, model.epoch, NOW)
                    .expect("in-order produce appends");
                model.push(spec.build());
            }
            Op::Mirror {
                records,
                bump_epoch,
            } => {
                model.epoch += i32::from(bump_epoch);
                let bytes = BatchSpec {
                    base_offset: model.leo,
                    partition_leader_epoch: model.epoch,
                    records,
                    value_size: 40,
                    ..BatchSpec::default()
                }
                .build();
                log.append_mirrored(bytes.clone(), GapPolicy::Contiguous, NOW)
                    .expect("contiguous mirror appends");
                model.push(bytes);
            }
            Op::EndTxn { pid, commit } => {
                let (open, _, _) = model.producers();
                if open.contains_key(&pid) {
                    log.append_txn_marker(pid, 0, commit, 0, model.epoch, NOW)
                        .expect("marker appends");
                    let header = ControlBatchHeader {
                        base_offset: model.leo,
                        partition_leader_epoch: model.epoch,
                        producer_id: pid,
                        producer_epoch: 0,
                        timestamp_ms: NOW,
                    };
                    let record = ControlRecord::EndTxn {
                        commit,
                        coordinator_epoch: 0,
                    };
                    model.push(record.to_batch(&header).expect("builds"));
                }
            }
            Op::PidReset => {
                log.append_pid_reset("src", model.epoch, NOW)
                    .expect("appends");
                let header = ControlBatchHeader::without_producer(model.leo, model.epoch, NOW);
                let record = ControlRecord::MirrorPidReset {
                    source_cluster_id: "src".into(),
                };
                model.push(record.to_batch(&header).expect("builds"));
            }
            Op::Truncate(at) => {
                // Never cut the marker of a transaction that began below the log start: that
                // would reopen a transaction the log only partly holds, whose LSO is then only
                // bounded (at least the log start, at most its first visible batch), not exact.
                let floor = model
                    .markers_of_transactions_before_start()
                    .max(model.log_start);
                let offset = floor + ((model.leo - floor) as f64 * at) as i64;
                log.truncate_to(offset).expect("truncates");
                if let Some(cut) = model
                    .batches
                    .iter()
                    .position(|b| batch(b).last_offset() >= offset)
                {
                    model.leo = model.leo.min(batch(&model.batches[cut]).base_offset());
                    model.batches.truncate(cut);
                }
                if model.leo < model.log_start {
                    model.batches.clear();
                    model.log_start = offset;
                    model.leo = offset;
                }
            }
            Op::AdvanceStart(at) => {
                let limit = model.lso();
                let offset = model.log_start + ((limit - model.log_start) as f64 * at) as i64;
                log.update_high_watermark(model.leo);
                log.advance_log_start(offset).expect("advances");
                model.log_start = model.log_start.max(offset);
            }
            Op::Restart { clean } => {
                if clean {
                    log.close(NOW).expect("closes");
                } else {
                    log.flush(NOW).expect("flushes");
                    drop(log);
                }
                log = reopen(dir.path());
            }
        }
        log.update_high_watermark(model.leo);
        check(&log, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}
