//! A child process appends in a loop, flushing every batch (`flush.messages=1`) and printing an
//! acknowledgement after each flush; the parent kills it with SIGKILL at random moments, then
//! reopens the log and checks that every acknowledged batch is intact and byte-identical, that
//! the tail is clean, and that appends continue.
//!
//! The child is this same test binary, re-run with `KMIRROR_CRASH_CHILD_DIR` set, running
//! [`crash_child_appender`] (which does nothing in an ordinary test run).

use kmirror::storage::{LogConfig, OpenFiles, PartitionLog};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::testing::BatchSpec;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "KMIRROR_CRASH_CHILD_DIR";
const EPOCH: i32 = 3;
const KILLS: usize = 24;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 64 * 1024,
        index_interval_bytes: 1024,
        flush_messages: 1,
        ..LogConfig::default()
    }
}

/// The batch the child writes at `offset`: a function of the offset only, so the parent can
/// rebuild the exact bytes expected there.
fn batch_at(offset: i64) -> BatchSpec {
    BatchSpec {
        base_offset: offset,
        partition_leader_epoch: EPOCH,
        records: 1 + (offset % 4) as usize,
        value_size: 50 + ((offset * 37) % 900) as usize,
        timestamp_ms: 1_700_000_000_000 + offset,
        ..BatchSpec::default()
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[test]
fn crash_child_appender() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mut log, _) = PartitionLog::open(Path::new(&dir), config(), &OpenFiles::new(64), now_ms())
        .expect("child opens");
    loop {
        let offset = log.log_end_offset();
        let sent = BatchSpec {
            base_offset: 0,
            partition_leader_epoch: -1,
            ..batch_at(offset)
        }
        .build();
        let info = log
            .append_as_leader(sent, EPOCH, now_ms())
            .expect("child appends");
        // Written and fsynced (flush.messages=1): acknowledge.
        println!("ACK {} {}", info.first_offset, info.last_offset);
    }
}

/// A small deterministic generator for kill delays (xorshift).
struct Delays(u64);

impl Delays {
    fn next_ms(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        10 + self.0 % 150
    }
}

fn verify(dir: &Path, acked: &[(i64, i64)]) -> PartitionLog {
    let (log, report) = PartitionLog::open(dir, config(), &OpenFiles::new(64), now_ms())
        .expect("the log opens after SIGKILL");
    let mut stored = Vec::new();
    log.for_each_batch(log.log_start_offset(), |b| {
        stored.push(b.clone());
        Ok(())
    })
    .expect("reads");
    assert!(
        stored.iter().all(|b| b.verify_crc().is_ok()),
        "clean tail: {report:?}"
    );
    for (i, b) in stored.iter().enumerate() {
        let expected = batch_at(b.base_offset()).build();
        assert_eq!(
            b.as_bytes(),
            &expected,
            "batch {i} at offset {} differs",
            b.base_offset()
        );
        if let Some(next) = stored.get(i + 1) {
            assert_eq!(
                next.base_offset(),
                b.next_offset(),
                "offsets are contiguous"
            );
        }
    }
    let end = log.log_end_offset();
    for &(first, last) in acked {
        assert!(
            last < end,
            "acknowledged batch {first}..={last} lost (log ends at {end}): {report:?}"
        );
        let r = log
            .read(first, 1 << 20, end, true)
            .expect("reads an acknowledged offset");
        let batch = RecordBatches::new(r.records.to_bytes().expect("read"))
            .next()
            .expect("a batch")
            .expect("valid");
        assert_eq!(batch.base_offset(), first);
        assert_eq!(batch.as_bytes(), &batch_at(first).build());
    }
    log
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_batch() {
    let dir = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test binary path");
    let mut delays = Delays(0x9e37_79b9_7f4a_7c15);
    let mut acked: Vec<(i64, i64)> = Vec::new();
    let mut kills_mid_run = 0;
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "crash::crash_child_appender",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("child starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|line| {
                    let mut parts = line.strip_prefix("ACK ")?.split(' ');
                    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
                })
                .collect::<Vec<(i64, i64)>>()
        });
        let delay = Duration::from_millis(delays.next_ms());
        let started = Instant::now();
        std::thread::sleep(delay);
        let still_running = child.try_wait().expect("polls child").is_none();
        kills_mid_run += usize::from(still_running);
        child.kill().expect("SIGKILL");
        child.wait().expect("reaps child");
        let new_acks = reader.join().expect("reader thread");
        acked.extend(new_acks);
        let log = verify(dir.path(), &acked);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "round {round} hung"
        );
        drop(log);
    }
    assert!(
        kills_mid_run >= 20,
        "only {kills_mid_run} kills hit a running child"
    );
    assert!(
        acked.len() > 100,
        "the children acknowledged only {} batches",
        acked.len()
    );
    // Appends continue after the last crash, and survive a clean restart.
    let mut log = verify(dir.path(), &acked);
    let offset = log.log_end_offset();
    let sent = BatchSpec {
        base_offset: 0,
        ..batch_at(offset)
    }
    .build();
    log.append_as_leader(sent, EPOCH, now_ms())
        .expect("appends after recovery");
    log.close(now_ms()).expect("closes");
    let log = verify(dir.path(), &acked);
    assert_eq!(
        log.log_end_offset(),
        offset + batch_at(offset).records as i64
    );
}
