//! Storage benchmarks (`scripts/bench.sh storage`). Each group measures the log beside the plain
//! file operation moving the same bytes, in the same run, so the ratio survives a noisy machine.
//!
//! - append of 16 KiB batches (64 MiB per iteration), no fsync in either, vs `write_all` of the
//!   same batches to one file;
//! - recovery (open) of a 1 GiB log after a crash (no checkpoint: every batch CRC-checked) and
//!   after a clean close, vs reading the same files sequentially;
//! - sequential read of the 1 GiB log in 1 MiB fetches vs plain 1 MiB preads.

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kmirror::storage::{GapPolicy, LogConfig, OpenFiles, PartitionLog};
use kmirror_protocol::testing::BatchSpec;
use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

const NOW: i64 = 1_700_000_000_000;
const BATCH: usize = 16 * 1024;
const APPEND_BYTES: usize = 64 << 20;
const LOG_BYTES: usize = 1 << 30;

/// Source-like batches of about 16 KiB each, with consecutive offsets from 0.
fn batches(total: usize) -> Vec<Bytes> {
    let one = BatchSpec {
        records: 16,
        value_size: BATCH / 16 - 24,
        partition_leader_epoch: 1,
        ..BatchSpec::default()
    };
    let mut out = Vec::new();
    let mut size = 0;
    let mut offset = 0;
    while size < total {
        let b = BatchSpec {
            base_offset: offset,
            ..one
        }
        .build();
        size += b.len();
        offset += 16;
        out.push(b);
    }
    out
}

fn append(c: &mut Criterion) {
    let input = batches(APPEND_BYTES);
    let bytes: u64 = input.iter().map(|b| b.len() as u64).sum();
    let mut group = c.benchmark_group("append_16KiB_batches");
    group.throughput(Throughput::Bytes(bytes)).sample_size(10);
    group.bench_function("plain_file_write_all", |b| {
        b.iter_batched(
            || tempfile::tempdir().expect("temp dir"),
            |dir| {
                let mut file = File::create(dir.path().join("plain")).expect("creates");
                for batch in &input {
                    file.write_all(batch).expect("writes");
                }
                dir
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("partition_log_append_mirrored", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("temp dir");
                let (log, _) =
                    PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), NOW)
                        .expect("opens");
                (dir, log)
            },
            |(dir, mut log)| {
                for batch in &input {
                    log.append_mirrored(batch.clone(), GapPolicy::Contiguous, NOW)
                        .expect("appends");
                }
                (dir, log)
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("partition_log_append_as_leader", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("temp dir");
                let (log, _) =
                    PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), NOW)
                        .expect("opens");
                (dir, log)
            },
            |(dir, mut log)| {
                for batch in &input {
                    log.append_as_leader(batch.clone(), 1, NOW)
                        .expect("appends");
                }
                (dir, log)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// Writes a 1 GiB log (1 GiB segments, Kafka's default) into `dir` and closes it cleanly.
fn one_gib_log(dir: &Path) {
    let (mut log, _) =
        PartitionLog::open(dir, LogConfig::default(), &OpenFiles::new(64), NOW).expect("opens");
    for batch in batches(LOG_BYTES) {
        log.append_mirrored(batch, GapPolicy::Contiguous, NOW)
            .expect("appends");
    }
    log.close(NOW).expect("closes");
}

fn read_files_sequentially(dir: &Path, chunk: usize) -> u64 {
    let mut total = 0u64;
    let mut buf = vec![0u8; chunk];
    let mut logs: Vec<_> = fs::read_dir(dir)
        .expect("lists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    for path in logs {
        let file = File::open(&path).expect("opens");
        let len = file.metadata().expect("stat").len();
        let mut position = 0;
        while position < len {
            let n = ((len - position) as usize).min(chunk);
            file.read_exact_at(&mut buf[..n], position).expect("reads");
            total += n as u64;
            position += n as u64;
        }
    }
    total
}

fn recovery_and_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    one_gib_log(dir.path());
    let bytes = read_files_sequentially(dir.path(), 1 << 20);

    let mut group = c.benchmark_group("recovery_1GiB");
    group
        .throughput(Throughput::Bytes(bytes))
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("plain_sequential_read_8MiB", |b| {
        b.iter(|| black_box(read_files_sequentially(dir.path(), 8 << 20)))
    });
    group.bench_function("open_after_crash_full_crc_scan", |b| {
        b.iter_batched(
            || fs::remove_file(dir.path().join("log-state-checkpoint")).expect("removes"),
            |()| {
                let (log, report) =
                    PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), NOW)
                        .expect("opens");
                assert_eq!(report.truncated_bytes, 0);
                log.close(NOW).expect("closes");
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("open_after_clean_close", |b| {
        b.iter(|| {
            let (log, _) =
                PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), NOW)
                    .expect("opens");
            black_box(log.log_end_offset())
        })
    });
    group.finish();

    let (log, _) = PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), NOW)
        .expect("opens");
    let mut group = c.benchmark_group("sequential_read_1GiB");
    group
        .throughput(Throughput::Bytes(bytes))
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("plain_pread_1MiB", |b| {
        b.iter(|| black_box(read_files_sequentially(dir.path(), 1 << 20)))
    });
    group.bench_function("partition_log_read_1MiB", |b| {
        b.iter(|| {
            let mut offset = log.log_start_offset();
            let mut total = 0usize;
            let end = log.log_end_offset();
            while offset < end {
                let r = log.read(offset, 1 << 20, end, true).expect("reads");
                total += r.records.len();
                offset = r.next_offset;
            }
            black_box(total)
        })
    });
    group.finish();
}

criterion_group!(benches, append, recovery_and_reads);
criterion_main!(benches);
