//! The `kmirror` binary as an operator runs it.

use std::process::Command;

fn kmirror(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(args)
        .output()
        .expect("the kmirror binary runs")
}

#[test]
fn version_and_help() {
    let out = kmirror(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kmirror {}", env!("CARGO_PKG_VERSION"))
    );
    let out = kmirror(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("protocol"));
}

#[test]
fn protocol_lists_every_api_and_mirror_error() {
    let out = kmirror(&["protocol"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "   94  CreateMirror",
        "  105  BumpLeaderEpochs",
        "  134  READ_ONLY_TOPIC",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = kmirror(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

#[test]
fn dump_log_prints_batches_and_flags_damage() {
    use kmirror::storage::{LogConfig, PartitionLog};
    use kmirror_protocol::testing::BatchSpec;

    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default(), 0).expect("opens");
    let batch = BatchSpec {
        producer_id: 4,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
        records: 3,
        ..BatchSpec::default()
    }
    .build();
    log.append_as_leader(batch, 2, 0).expect("appends");
    log.append_txn_marker(4, 0, true, 1, 2, 0).expect("commits");
    log.append_pid_reset("src-cluster", 3, 0).expect("resets");
    log.close(0).expect("closes");

    let path = dir.path().to_str().expect("utf-8 path");
    let out = kmirror(&["dump-log", path]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("baseOffset: 0 lastOffset: 2 count: 3"),
        "{text}"
    );
    assert!(
        text.contains("partitionLeaderEpoch: 2 producerId: 4"),
        "{text}"
    );
    assert!(
        text.contains("controlType: COMMIT coordinatorEpoch: 1"),
        "{text}"
    );
    assert!(
        text.contains("controlType: MIRROR_PID_RESET sourceClusterId: src-cluster"),
        "{text}"
    );
    assert!(
        text.contains("Summary: 1 segments, 3 batches, 0 with a bad CRC, 0 unreadable bytes"),
        "{text}"
    );

    // A torn tail is reported and the exit code says so; the file is not changed.
    let segment = dir.path().join(format!("{:020}.log", 0));
    let len = std::fs::metadata(&segment).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("opens")
        .set_len(len - 5)
        .expect("truncates");
    let out = kmirror(&["dump-log", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Stopped at position"));
    assert_eq!(std::fs::metadata(&segment).expect("stat").len(), len - 5);

    let out = kmirror(&["dump-log", "/nonexistent/partition"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/partition"));
}
