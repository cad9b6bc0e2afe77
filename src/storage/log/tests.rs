use super::*;
use kmirror_protocol::batch::BatchError;
use kmirror_protocol::testing::BatchSpec;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

const NOW: i64 = 1_700_000_000_000;

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 512,
        ..LogConfig::default()
    }
}

fn open(dir: &Path, config: LogConfig) -> (PartitionLog, RecoveryReport) {
    PartitionLog::open(dir, config, &OpenFiles::new(64), NOW).expect("opens")
}

fn plain(records: usize) -> Bytes {
    BatchSpec {
        records,
        value_size: 100,
        ..BatchSpec::default()
    }
    .build()
}

/// A source-side batch: offsets and epoch as the source assigned them.
fn sourced(base_offset: i64, records: usize, epoch: i32) -> Bytes {
    BatchSpec {
        base_offset,
        partition_leader_epoch: epoch,
        records,
        value_size: 100,
        ..BatchSpec::default()
    }
    .build()
}

fn all_batches(log: &PartitionLog) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    log.for_each_batch(log.log_start_offset(), |b| {
        out.push(b.clone());
        Ok(())
    })
    .expect("reads");
    out
}

#[test]
fn leader_appends_assign_offsets_and_stamp_the_epoch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    let a = log.append_as_leader(plain(3), 5, NOW).expect("appends");
    let b = log.append_as_leader(plain(2), 6, NOW).expect("appends");
    assert_eq!((a.first_offset, a.last_offset), (0, 2));
    assert_eq!((b.first_offset, b.last_offset), (3, 4));
    assert_eq!(log.log_end_offset(), 5);
    let batches = all_batches(&log);
    let headers: Vec<(i64, i32)> = batches
        .iter()
        .map(|b| (b.base_offset(), b.partition_leader_epoch()))
        .collect();
    assert_eq!(headers, [(0, 5), (3, 6)]);
    assert!(batches.iter().all(|b| b.verify_crc().is_ok()));
    assert_eq!(log.end_offset_for(5), (5, 3));
    assert_eq!(log.end_offset_for(6), (6, 5));
}

/// Reads find their end from batch headers, jumping to the last index entry inside the bound:
/// against a walk over every batch, for every start, size and bound, the same batches.
#[test]
fn reads_end_where_a_walk_over_every_batch_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 700,
        ..LogConfig::default()
    };
    let (mut log, _) = open(dir.path(), config);
    for i in 0..40 {
        log.append_as_leader(plain(1 + i % 4), 0, NOW)
            .expect("appends");
    }
    let batches = all_batches(&log);
    let end = log.log_end_offset();
    log.update_high_watermark(end);
    let sizes: Vec<usize> = batches.iter().map(RecordBatch::size).collect();
    for offset in (0..end).step_by(3) {
        let first = batches
            .iter()
            .position(|b| b.next_offset() > offset)
            .expect("a batch holds it");
        for max in [0, 100, sizes[first], 1_000, 2_500, 7_000, 1 << 20] {
            for upper in [offset, offset + 5, end - 7, end] {
                for min_one in [false, true] {
                    let mut taken = Vec::new();
                    let mut room = max;
                    for b in &batches[first..] {
                        let forced = taken.is_empty() && min_one;
                        if b.base_offset() >= upper || (b.size() > room && !forced) {
                            break;
                        }
                        room = room.saturating_sub(b.size());
                        taken.push(b.base_offset());
                    }
                    let r = log.read(offset, max, upper, min_one).expect("reads");
                    let read: Vec<i64> = RecordBatches::new(r.records.to_bytes().expect("read"))
                        .map(|b| b.expect("whole").base_offset())
                        .collect();
                    let case = (offset, max, upper, min_one);
                    assert_eq!(read, taken, "{case:?}");
                    let next = batches
                        .iter()
                        .find(|b| Some(&b.base_offset()) == taken.last())
                        .map_or(offset, RecordBatch::next_offset);
                    assert_eq!(r.next_offset, next, "{case:?}");
                }
            }
        }
    }
}

/// A truncation while an answer is out (a range being sent, or pages `sendfile` handed to a
/// socket) does not change the answer's bytes: the cut segment is a new file, the answer keeps
/// reading the old one, even after new batches land where the cut ones were. Before, the file
/// was cut in place and a consumer received zeros (docs/wire.md, "Records").
#[test]
fn an_answer_taken_before_a_cut_keeps_its_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    for _ in 0..6 {
        log.append_as_leader(plain(2), 0, NOW).expect("appends");
    }
    log.update_high_watermark(log.log_end_offset());
    let answer = log.read(0, 1 << 20, 12, false).expect("reads");
    let before = answer.records.to_bytes().expect("read");
    log.truncate_to(4).expect("cut");
    for _ in 0..6 {
        log.append_as_leader(plain(3), 1, NOW).expect("appends");
    }
    assert_eq!(
        answer.records.to_bytes().expect("read after the cut"),
        before,
        "the answer's bytes changed under it"
    );
    let offsets: Vec<(i64, i32)> = all_batches(&log)
        .iter()
        .map(|b| (b.base_offset(), b.partition_leader_epoch()))
        .collect();
    assert_eq!(offsets[..3], [(0, 0), (2, 0), (4, 1)], "{offsets:?}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("lists")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A batch whose header was damaged on disk is refused when a read starts at it (the Fetch
/// answers KAFKA_STORAGE_ERROR), never skipped: before, the read went on in the next segment
/// and the offsets in between were silently missing.
#[test]
fn a_damaged_batch_is_refused_not_skipped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    for _ in 0..20 {
        log.append_as_leader(plain(2), 0, NOW).expect("appends");
    }
    log.update_high_watermark(log.log_end_offset());
    let batches = all_batches(&log);
    assert!(log.segment_bases().len() > 1, "several segments");
    // The third batch of the first segment: its magic byte (byte 16 of the header) set to 7.
    let position: usize = batches[..2].iter().map(RecordBatch::size).sum();
    let first = dir.path().join(format!("{:020}.log", 0));
    let file = OpenOptions::new().write(true).open(&first).expect("opens");
    file.write_all_at(&[7], (position + 16) as u64)
        .expect("damaged");
    let damaged = batches[2].base_offset();
    assert!(matches!(
        log.read(damaged, 1 << 20, log.high_watermark(), true),
        Err(StorageError::DamagedBatch { .. })
    ));
    // From before it: the batches before it come whole (bytes past a header the read did not
    // walk go as stored, as Kafka sends them: the client's CRC check judges them).
    let r = log
        .read(0, 1 << 20, log.high_watermark(), true)
        .expect("reads");
    let offsets: Vec<i64> = RecordBatches::new(r.records.to_bytes().expect("read"))
        .map_while(Result::ok)
        .map(|b| b.base_offset())
        .collect();
    assert_eq!(offsets, [0, 2], "{offsets:?}");
}

#[test]
fn reads_return_whole_batches_up_to_the_bound() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    for _ in 0..10 {
        log.append_as_leader(plain(2), 0, NOW).expect("appends");
    }
    log.update_high_watermark(14);
    let size = all_batches(&log)[0].size();
    // From the middle of a batch: the read starts at that batch.
    let r = log
        .read(3, 10 * size, log.high_watermark(), false)
        .expect("reads");
    let offsets: Vec<i64> = RecordBatches::new(r.records.to_bytes().expect("read"))
        .map(|b| b.expect("valid").base_offset())
        .collect();
    assert_eq!(offsets.first(), Some(&2));
    assert!(offsets.iter().all(|o| *o < 14), "{offsets:?}");
    assert_eq!(r.next_offset, offsets.last().map_or(3, |o| o + 2));
    // max_bytes smaller than a batch: nothing, unless one batch is required.
    assert!(
        log.read(0, size - 1, 20, false)
            .expect("reads")
            .records
            .is_empty()
    );
    assert_eq!(
        log.read(0, size - 1, 20, true)
            .expect("reads")
            .records
            .len(),
        size
    );
    assert!(
        log.read(20, 100, 20, true)
            .expect("reads")
            .records
            .is_empty()
    );
    assert!(matches!(
        log.read(21, 100, 20, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn idempotent_retries_are_not_written_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), LogConfig::default());
    let batch = BatchSpec {
        producer_id: 11,
        producer_epoch: 0,
        base_sequence: 0,
        records: 4,
        ..BatchSpec::default()
    }
    .build();
    let first = log
        .append_as_leader(batch.clone(), 0, NOW)
        .expect("appends");
    let retry = log.append_as_leader(batch, 0, NOW).expect("dedupes");
    assert!(retry.duplicate);
    assert_eq!(
        (retry.first_offset, retry.last_offset),
        (first.first_offset, first.last_offset)
    );
    assert_eq!(log.log_end_offset(), 4);
    let gap = BatchSpec {
        producer_id: 11,
        producer_epoch: 0,
        base_sequence: 9,
        ..BatchSpec::default()
    }
    .build();
    assert!(matches!(
        log.append_as_leader(gap, 0, NOW),
        Err(StorageError::OutOfOrderSequence {
            expected_sequence: 4,
            ..
        })
    ));
}

#[test]
fn mirrored_appends_keep_bytes_and_reject_overlaps_gaps_and_epoch_regressions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    let a = sourced(0, 5, 3);
    let b = sourced(5, 5, 4);
    let mut both = a.to_vec();
    both.extend_from_slice(&b);
    log.append_mirrored(Bytes::from(both.clone()), GapPolicy::Contiguous, NOW)
        .expect("appends");
    let stored: Vec<u8> = all_batches(&log)
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect();
    assert_eq!(stored, both, "mirrored bytes are stored unchanged");
    assert_eq!(
        log.epoch_entries(),
        [
            EpochEntry {
                epoch: 3,
                start_offset: 0
            },
            EpochEntry {
                epoch: 4,
                start_offset: 5
            }
        ]
    );

    assert!(matches!(
        log.append_mirrored(sourced(8, 1, 4), GapPolicy::Contiguous, NOW),
        Err(StorageError::OffsetOverlap {
            base_offset: 8,
            log_end_offset: 10
        })
    ));
    assert!(matches!(
        log.append_mirrored(sourced(12, 1, 4), GapPolicy::Contiguous, NOW),
        Err(StorageError::OffsetGap {
            base_offset: 12,
            log_end_offset: 10
        })
    ));
    assert!(matches!(
        log.append_mirrored(sourced(10, 1, 2), GapPolicy::Contiguous, NOW),
        Err(StorageError::EpochRegression {
            epoch: 2,
            latest_epoch: 4,
            ..
        })
    ));
    let mut torn = sourced(10, 1, 4).to_vec();
    torn.truncate(torn.len() - 3);
    assert!(matches!(
        log.append_mirrored(Bytes::from(torn), GapPolicy::Contiguous, NOW),
        Err(StorageError::PartialBatch(_))
    ));
    let mut corrupt = sourced(10, 1, 4).to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert!(matches!(
        log.append_mirrored(Bytes::from(corrupt), GapPolicy::Contiguous, NOW),
        Err(StorageError::InvalidBatch(_))
    ));
    // A compacted source may skip whole batches.
    log.append_mirrored(sourced(12, 1, 4), GapPolicy::AllowGaps, NOW)
        .expect("gap allowed");
    assert_eq!(log.log_end_offset(), 13);
    assert_eq!(log.log_end_offset(), 13, "failed appends wrote nothing");
}

/// `batch` with the 16-bit field at `at` (attributes 21, or the high half of the last offset
/// delta 23) set to `value` and the CRC made valid again, as a source that wrote it would.
fn patched(batch: Bytes, at: usize, value: i16) -> Bytes {
    let mut b = batch.to_vec();
    b[at..at + 2].copy_from_slice(&value.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

#[test]
fn mirrored_batches_the_broker_cannot_serve_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), LogConfig::default());
    assert!(matches!(
        log.append_mirrored(patched(sourced(0, 2, 1), 21, 7), GapPolicy::Contiguous, NOW),
        Err(StorageError::InvalidBatch(BatchError::UnknownCompression {
            codec: 7,
            ..
        }))
    ));
    // -1 in the high half makes the last offset delta negative.
    assert!(matches!(
        log.append_mirrored(
            patched(sourced(0, 2, 1), 23, -1),
            GapPolicy::Contiguous,
            NOW
        ),
        Err(StorageError::InvalidBatch(
            BatchError::NegativeLastOffsetDelta { .. }
        ))
    ));
    assert_eq!(log.log_end_offset(), 0, "nothing appended");
    log.append_mirrored(sourced(0, 2, 1), GapPolicy::Contiguous, NOW)
        .expect("a servable batch is appended");
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn transactions_give_lso_and_aborted_ranges_and_pid_reset_clears_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), LogConfig::default());
    let txn = |seq| {
        BatchSpec {
            producer_id: 5,
            producer_epoch: 1,
            base_sequence: seq,
            transactional: true,
            records: 2,
            ..BatchSpec::default()
        }
        .build()
    };
    log.append_as_leader(txn(0), 0, NOW).expect("appends");
    log.append_as_leader(plain(1), 0, NOW).expect("appends");
    log.update_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), 0);
    log.append_txn_marker(5, 1, false, 0, 0, NOW)
        .expect("aborts");
    log.update_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), 4);
    assert_eq!(
        log.aborted_transactions(0, 4),
        [AbortedTxn {
            producer_id: 5,
            first_offset: 0,
            last_offset: 3
        }]
    );
    log.append_as_leader(txn(2), 0, NOW).expect("appends");
    log.update_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), 4);
    // Failover: truncate to the LSO, then the PID reset barrier.
    log.truncate_to(log.last_stable_offset())
        .expect("truncates");
    let reset = log
        .append_pid_reset("source-cluster", 9, NOW)
        .expect("appends");
    assert_eq!(reset.first_offset, 4);
    assert_eq!(log.producer_state().producer_count(), 0);
    log.update_high_watermark(log.log_end_offset());
    assert_eq!(log.last_stable_offset(), 5);
    let batches = all_batches(&log);
    let last = batches.last().expect("a batch");
    assert_eq!(
        ControlRecord::parse(last).expect("control"),
        ControlRecord::MirrorPidReset {
            source_cluster_id: "source-cluster".into()
        }
    );
    // The state survives a restart: the reset is replayed, the aborted range kept.
    log.close(NOW).expect("closes");
    let (log, _) = open(dir.path(), LogConfig::default());
    assert_eq!(log.producer_state().producer_count(), 0);
    assert_eq!(log.aborted_transactions(0, 5).len(), 1);
}

#[test]
fn truncation_drops_whole_batches_and_fixes_epochs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    let mut offset = 0;
    for epoch in [1, 1, 2, 2, 3, 3, 3, 4] {
        for _ in 0..3 {
            log.append_mirrored(sourced(offset, 4, epoch), GapPolicy::Contiguous, NOW)
                .expect("appends");
            offset += 4;
        }
    }
    assert!(
        log.segment_bases().len() > 2,
        "several segments: {:?}",
        log.segment_bases()
    );
    log.update_high_watermark(offset);
    // Epoch 3 starts at 48; truncating inside the batch 52..55 drops that batch whole.
    log.truncate_to(54).expect("truncates");
    assert_eq!(log.log_end_offset(), 52);
    assert_eq!(log.high_watermark(), 52);
    assert_eq!(log.latest_epoch(), Some(3));
    assert_eq!(log.end_offset_for(2), (2, 48));
    assert_eq!(log.end_offset_for(3), (3, 52));
    assert_eq!(log.end_offset_for(4), (-1, -1));
    log.append_mirrored(sourced(52, 4, 5), GapPolicy::Contiguous, NOW)
        .expect("appends after truncation");
    assert_eq!(log.end_offset_for(3), (3, 52));
    assert_eq!(log.end_offset_for(4), (3, 52));
    // Truncating to an epoch's start removes the epoch.
    log.truncate_to(48).expect("truncates");
    assert_eq!(log.latest_epoch(), Some(2));
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_eq!(log.log_end_offset(), 48);
    assert_eq!(log.end_offset_for(2), (2, 48));

    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.append_mirrored(sourced(0, 4, 1), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.truncate_fully_and_start_at(1000).expect("restarts");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (1000, 1000));
    assert!(log.epoch_entries().is_empty());
    log.append_mirrored(sourced(1000, 2, 7), GapPolicy::Contiguous, NOW)
        .expect("appends at the new start");
}

#[test]
fn retention_and_log_start_advance_delete_whole_segments() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = LogConfig {
        retention_bytes: 8192,
        ..small_segments()
    };
    let (mut log, _) = open(dir.path(), config.clone());
    for _ in 0..100 {
        log.append_as_leader(plain(2), 0, NOW).expect("appends");
    }
    let segments = log.segment_bases().len();
    // Nothing above the high watermark is deleted.
    assert_eq!(log.apply_retention(NOW).expect("runs"), 0);
    log.update_high_watermark(log.log_end_offset());
    let deleted = log.apply_retention(NOW).expect("runs");
    assert!(deleted > 0);
    assert_eq!(log.segment_bases().len(), segments - deleted);
    assert!(log.size_bytes() >= 8192 && log.size_bytes() < 8192 + 4096);
    assert_eq!(log.log_start_offset(), log.segment_bases()[0]);
    assert!(matches!(
        log.read(0, 100, 200, true),
        Err(StorageError::OffsetOutOfRange { .. })
    ));

    // Time-based retention.
    let old = tempfile::tempdir().expect("temp dir");
    let config = LogConfig {
        retention_ms: 1000,
        ..small_segments()
    };
    let (mut log, _) = open(old.path(), config);
    for _ in 0..60 {
        log.append_as_leader(plain(2), 0, NOW).expect("appends");
    }
    log.update_high_watermark(log.log_end_offset());
    assert_eq!(log.apply_retention(NOW).expect("runs"), 0);
    let later = NOW + 10 * 1000;
    assert!(log.apply_retention(later).expect("runs") > 0);
    assert_eq!(
        log.segment_bases().len(),
        1,
        "all but the active segment expired"
    );

    // The mirror follows the source's log start, even past its own end.
    log.advance_log_start(log.log_end_offset() + 50)
        .expect("advances");
    assert_eq!(log.log_start_offset(), log.log_end_offset());
}

/// A log of 40 mirrored batches over several segments, closed cleanly; returns its segment
/// bases, its bytes, its epochs and its end offset.
fn filled(dir: &Path) -> (Vec<i64>, Vec<u8>, Vec<EpochEntry>, i64) {
    let (mut log, _) = open(dir, small_segments());
    for i in 0..40 {
        log.append_mirrored(
            sourced(i * 3, 3, (i / 10) as i32),
            GapPolicy::Contiguous,
            NOW,
        )
        .expect("appends");
    }
    let bytes = all_batches(&log)
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect();
    let result = (
        log.segment_bases(),
        bytes,
        log.epoch_entries().to_vec(),
        log.log_end_offset(),
    );
    log.close(NOW).expect("closes");
    result
}

fn stored_bytes(log: &PartitionLog) -> Vec<u8> {
    all_batches(log)
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect()
}

#[test]
fn recovery_cuts_a_torn_tail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (bases, bytes, _, _) = filled(dir.path());
    let last = file_path(dir.path(), bases[bases.len() - 1], "log");
    let file = OpenOptions::new().write(true).open(&last).expect("opens");
    let len = file.metadata().expect("stat").len();
    file.set_len(len - 7).expect("truncates");
    // Make the torn segment count as unflushed.
    fs::remove_file(dir.path().join(STATE_CHECKPOINT)).expect("removes");
    let (mut log, report) = open(dir.path(), small_segments());
    assert!(report.truncated_bytes > 0, "{report:?}");
    assert!(
        report.problems.iter().any(|p| p.contains("torn")),
        "{report:?}"
    );
    let end = log.log_end_offset();
    assert_eq!(end, 117, "exactly the last batch is lost");
    let stored = stored_bytes(&log);
    assert_eq!(&bytes[..stored.len()], &stored[..]);
    log.append_mirrored(sourced(end, 3, 3), GapPolicy::Contiguous, NOW)
        .expect("appends continue");
}

#[test]
fn recovery_cuts_at_a_flipped_byte_and_drops_what_follows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (bases, bytes, _, _) = filled(dir.path());
    let kept_before = fs::metadata(file_path(dir.path(), bases[0], "log"))
        .expect("stat")
        .len();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(file_path(dir.path(), bases[1], "log"))
        .expect("opens");
    // Flip a byte inside the records of the batch at the middle of the segment.
    let mut raw = vec![0u8; file.metadata().expect("stat").len() as usize];
    file.read_exact_at(&mut raw, 0).expect("reads");
    let mut iter = RecordBatches::new(Bytes::from(raw.clone()));
    let middle = raw.len() / 2;
    while iter.position() + iter.clone().next().expect("a batch").expect("valid").size() <= middle {
        iter.next();
    }
    let target = iter.position() + kmirror_protocol::batch::HEADER_SIZE + 5;
    file.write_all_at(&[raw[target] ^ 0x10], target as u64)
        .expect("writes");
    // A garbage state checkpoint forces full recovery.
    fs::write(dir.path().join(STATE_CHECKPOINT), "garbage").expect("writes");
    let (log, report) = open(dir.path(), small_segments());
    assert!(
        report.problems.iter().any(|p| p.contains("ignored")),
        "{report:?}"
    );
    assert!(
        report.problems.iter().any(|p| p.contains("CRC")),
        "{report:?}"
    );
    assert_eq!(report.dropped_segments, bases[2..].to_vec(), "{report:?}");
    let stored = stored_bytes(&log);
    assert!(stored.len() as u64 > kept_before);
    assert_eq!(
        &bytes[..stored.len()],
        &stored[..],
        "what is kept is byte-identical"
    );
}

#[test]
fn recovery_drops_a_batch_whose_base_offset_was_damaged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (bases, bytes, _, _) = filled(dir.path());
    let path = file_path(dir.path(), bases[0], "log");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opens");
    let mut raw = vec![0u8; file.metadata().expect("stat").len() as usize];
    file.read_exact_at(&mut raw, 0).expect("reads");
    // The base offset of the fourth batch (outside the CRC) gets a low bit flipped: +4.
    let fourth: usize = RecordBatches::new(Bytes::from(raw.clone()))
        .take(3)
        .map(|b| b.expect("valid").size())
        .sum();
    file.write_all_at(&[raw[fourth + 7] ^ 0x04], (fourth + 7) as u64)
        .expect("writes");
    fs::remove_file(dir.path().join(STATE_CHECKPOINT)).expect("removes");
    let (log, report) = open(dir.path(), small_segments());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("does not follow")),
        "{report:?}"
    );
    assert_eq!(
        log.log_end_offset(),
        9,
        "the three intact batches before it remain"
    );
    let stored = stored_bytes(&log);
    assert_eq!(&bytes[..stored.len()], &stored[..]);
}

#[test]
fn recovery_rebuilds_a_missing_index_and_a_garbage_epoch_checkpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (bases, bytes, entries, end) = filled(dir.path());
    fs::remove_file(file_path(dir.path(), bases[0], "index")).expect("removes");
    fs::write(dir.path().join(EPOCH_CHECKPOINT), "0\n9\n1 2\n").expect("writes");
    let (log, report) = open(dir.path(), small_segments());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("rebuilt the index")),
        "{report:?}"
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("rebuilding epochs")),
        "{report:?}"
    );
    assert_eq!(
        report.rebuilt_indexes, 2,
        "the damaged one and the active one"
    );
    assert_eq!(log.epoch_entries(), &entries[..]);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(stored_bytes(&log), bytes);
    // Index lookups work again: offset 61 is in the batch starting at 60.
    let r = log.read(61, 1 << 20, end, false).expect("reads");
    let first = RecordBatches::new(r.records.to_bytes().expect("read"))
        .next()
        .expect("a batch")
        .expect("valid");
    assert_eq!(first.base_offset(), 60);
}

#[test]
fn timestamps_find_batches() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    for i in 0..50 {
        let batch = BatchSpec {
            timestamp_ms: NOW + i * 1000,
            records: 2,
            value_size: 100,
            ..BatchSpec::default()
        }
        .build();
        log.append_as_leader(batch, 0, NOW).expect("appends");
    }
    assert_eq!(log.offset_for_timestamp(0).expect("looks up"), Some(0));
    // Batch i holds timestamps NOW + 1000 i and NOW + 1000 i + 1.
    assert_eq!(
        log.offset_for_timestamp(NOW + 20_000).expect("looks up"),
        Some(40)
    );
    assert_eq!(
        log.offset_for_timestamp(NOW + 20_001).expect("looks up"),
        Some(40)
    );
    assert_eq!(
        log.offset_for_timestamp(NOW + 20_002).expect("looks up"),
        Some(42)
    );
    assert_eq!(
        log.offset_for_timestamp(NOW + 60_000).expect("looks up"),
        None
    );
}

#[test]
fn epochs_grown_since_the_last_flush_come_back_from_the_batches_after_a_crash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.append_mirrored(sourced(0, 4, 1), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.flush(NOW).expect("flushes");
    let checkpoint = dir.path().join(EPOCH_CHECKPOINT);
    let flushed = fs::read_to_string(&checkpoint).expect("checkpoint");
    // New epochs after the flush: the checkpoint waits for the next flush.
    log.append_mirrored(sourced(4, 4, 3), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.append_mirrored(sourced(8, 2, 6), GapPolicy::Contiguous, NOW)
        .expect("appends");
    assert_eq!(
        fs::read_to_string(&checkpoint).expect("checkpoint"),
        flushed
    );
    // A crash: nothing flushed or closed.
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_eq!(
        log.epoch_entries(),
        &[
            EpochEntry {
                epoch: 1,
                start_offset: 0
            },
            EpochEntry {
                epoch: 3,
                start_offset: 4
            },
            EpochEntry {
                epoch: 6,
                start_offset: 8
            },
        ]
    );
    assert_eq!(log.end_offset_for(3), (3, 8));
}

#[test]
fn a_new_log_makes_nothing_durable_before_its_first_flush_and_reopens_after_a_crash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, report) = open(dir.path(), small_segments());
    assert_eq!(report.segments, 1);
    // A new mirror partition aligning with a source that starts at 0: nothing to undo.
    log.truncate_fully_and_start_at(0).expect("truncates");
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["00000000000000000000.log"],
        "no checkpoint is written for an empty log, and no index before it has an entry"
    );
    // A crash before anything was appended: the same empty log, recovered without an index.
    drop(log);
    let (mut log, report) = open(dir.path(), small_segments());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    assert!(!file_path(dir.path(), 0, "index").exists());
    // Aligning with a source that starts later does move it, durably.
    log.truncate_fully_and_start_at(7).expect("truncates");
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (7, 7));
    // Another new log, appended to, then a crash before its first flush: recovery reads the
    // batches back, epochs included.
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.append_mirrored(sourced(0, 3, 2), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.append_mirrored(sourced(3, 2, 4), GapPolicy::Contiguous, NOW)
        .expect("appends");
    drop(log);
    let (mut log, _) = open(dir.path(), small_segments());
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(log.end_offset_for(2), (2, 3));
    assert_eq!(log.latest_epoch(), Some(4));
    log.flush(NOW).expect("flushes");
    assert!(dir.path().join(EPOCH_CHECKPOINT).exists());
    // A new log closed empty (a broker shut down before anything was produced) writes nothing.
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.assign_leader_epoch(3);
    log.close(NOW).expect("closes");
    let names: Vec<String> = fs::read_dir(dir.path())
        .expect("lists")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["00000000000000000000.log"]);
}

#[test]
fn a_clean_restart_rewrites_no_checkpoint_and_a_crash_with_unflushed_data_does() {
    use std::os::unix::fs::MetadataExt;
    let inodes = |dir: &Path| -> Vec<u64> {
        [EPOCH_CHECKPOINT, STATE_CHECKPOINT]
            .iter()
            .map(|name| fs::metadata(dir.join(name)).expect("checkpoint").ino())
            .collect()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.append_mirrored(sourced(0, 4, 1), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.close(NOW).expect("closes");
    // Checkpoints are replaced by rename: an unchanged inode is a file left alone.
    let closed = inodes(dir.path());
    let (log, report) = open(dir.path(), small_segments());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(inodes(dir.path()), closed, "a clean restart writes nothing");
    assert_eq!(log.log_end_offset(), 4);
    let snapshot = dir.path().join("00000000000000000004.snapshot");
    let snapshot_inode = fs::metadata(&snapshot).expect("snapshot").ino();
    // Closing an idle log writes nothing either.
    log.close(NOW).expect("closes");
    assert_eq!(inodes(dir.path()), closed, "an idle close writes nothing");
    assert_eq!(
        fs::metadata(&snapshot).expect("snapshot").ino(),
        snapshot_inode
    );
    let (mut log, _) = open(dir.path(), small_segments());
    // Appended after the restart, then a crash: the next open makes it durable.
    log.append_mirrored(sourced(4, 2, 3), GapPolicy::Contiguous, NOW)
        .expect("appends");
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_ne!(inodes(dir.path()), closed);
    assert_eq!(log.recovery_point(), 6);
    assert_eq!(log.latest_epoch(), Some(3));
    // Log start 0, recovery point 6 (the high watermark is the broker's to raise).
    let state = fs::read_to_string(dir.path().join(STATE_CHECKPOINT)).expect("state");
    assert!(
        state.lines().nth(2).is_some_and(|l| l.starts_with("0 6 ")),
        "{state}"
    );
}

/// An epoch stamped at the log end by an election, with nothing appended after it, goes with
/// a truncation to the log end (Kafka's `truncateTo` does the same), durably.
#[test]
fn a_truncation_to_the_log_end_drops_an_epoch_stamped_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = open(dir.path(), small_segments());
    log.append_mirrored(sourced(0, 4, 0), GapPolicy::Contiguous, NOW)
        .expect("appends");
    log.assign_leader_epoch(1);
    assert_eq!(log.epoch_entries().len(), 2);
    log.truncate_to(4).expect("truncated");
    let epochs: Vec<(i32, i64)> = log
        .epoch_entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, vec![(0, 0)]);
    assert_eq!(log.log_end_offset(), 4);
    drop(log);
    let (log, _) = open(dir.path(), small_segments());
    assert_eq!(log.epoch_entries().len(), 1, "the checkpoint says so too");
}

/// A request can still hold a log when its topic is deleted: what it tries then is refused
/// with a reason of its own, and the directory stays gone.
#[test]
fn a_deleted_log_refuses_appends_and_truncations() {
    let root = tempfile::tempdir().expect("temp dir");
    for data in [false, true] {
        let dir = root.path().join(format!("deleted-{data}"));
        let (mut log, _) = open(&dir, small_segments());
        if data {
            log.append_as_leader(plain(2), 0, NOW).expect("appends");
            log.flush(NOW).expect("flushes");
        }
        log.delete().expect("deletes");
        assert!(!dir.exists());
        let deleted = |r: Result<(), StorageError>| {
            assert!(matches!(r, Err(StorageError::LogDeleted { .. })), "{r:?}")
        };
        deleted(log.append_as_leader(plain(1), 0, NOW).map(|_| ()));
        deleted(
            log.append_mirrored(
                sourced(log.log_end_offset(), 1, 1),
                GapPolicy::AllowGaps,
                NOW,
            )
            .map(|_| ()),
        );
        // A mirrored append that would overlap is refused for the deletion, not the overlap.
        deleted(
            log.append_mirrored(sourced(0, 1, 1), GapPolicy::AllowGaps, NOW)
                .map(|_| ()),
        );
        deleted(log.truncate_fully_and_start_at(40));
        deleted(log.truncate_to(0));
        deleted(log.advance_log_start(1));
        // Housekeeping passes over it quietly.
        assert_eq!(log.apply_retention(NOW + 1_000_000_000).expect("no-op"), 0);
        log.flush_if_due(NOW + 1_000_000_000).expect("no-op");
        assert!(!dir.exists(), "a deleted log made its directory again");
    }
}
