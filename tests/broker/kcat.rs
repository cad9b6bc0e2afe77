//! kcat (Debian's 1.7.1 on librdkafka 2.0.2, the CLI operators reach for first) against a
//! `kmirror broker` process: it asks ListOffsets v2, which the broker once could not answer.
//! `scripts/test.sh` installs it.

use super::{create, spawn_broker, stop_broker};
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

/// Runs kcat with `args`, `input` on its stdin; its stdout lines. A failure shows stderr.
fn kcat(args: &[&str], input: &str) -> Vec<String> {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat runs (scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("writes kcat's input");
    let out = child.wait_with_output().expect("kcat ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kcat {args:?} failed: {stderr}");
    assert!(!stderr.contains("ERROR"), "kcat {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// kcat produces with every codec (acks=all; the stored batches carry each codec), consumes
/// everything alone, lists offsets, and consumes in a group whose committed offsets a second
/// run resumes from.
#[tokio::test]
#[ignore = "needs kcat: run scripts/test.sh"]
async fn kcat_produces_with_every_codec_and_consumes_alone_and_in_a_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    assert_eq!(create(&address, "kcat", 3).await, 0);
    let mut produced = BTreeSet::new();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let lines: Vec<String> = (0..100).map(|i| format!("{codec}-{i}")).collect();
        let input = lines.join("\n") + "\n";
        let args = [
            "-P", "-b", &address, "-t", "kcat", "-z", codec, "-X", "acks=all",
        ];
        kcat(&args, &input);
        produced.extend(lines);
    }

    // Each codec's batches are stored compressed with it: librdkafka 2.0 compresses only for a
    // broker advertising Produce from v0, as Kafka 4 does, and sends uncompressed otherwise.
    let codecs: BTreeSet<String> = (0..3)
        .flat_map(|p| {
            let out = Command::new(env!("CARGO_BIN_EXE_kmirror"))
                .arg("dump-log")
                .arg(dir.path().join("data").join(format!("kcat-{p}")))
                .output()
                .expect("kmirror dump-log runs");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split("compression: ").nth(1))
                .filter_map(|c| c.split_whitespace().next())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        codecs,
        ["gzip", "lz4", "none", "snappy", "zstd"]
            .map(str::to_string)
            .into(),
        "the stored batches' codecs"
    );

    let consumed: BTreeSet<String> = kcat(
        &[
            "-C",
            "-b",
            &address,
            "-t",
            "kcat",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        "",
    )
    .into_iter()
    .collect();
    assert_eq!(consumed, produced, "kcat -C reads every record produced");

    // The log end of each partition (ListOffsets with a timestamp of -1), summing to 500.
    let ends: i64 = (0..3)
        .map(|p| {
            let out = kcat(&["-Q", "-b", &address, "-t", &format!("kcat:{p}:-1")], "");
            out.iter()
                .find_map(|l| l.split("offset ").nth(1))
                .and_then(|o| o.trim().parse::<i64>().ok())
                .unwrap_or_else(|| panic!("kcat -Q answered {out:?}"))
        })
        .sum();
    assert_eq!(ends, 500, "kcat -Q: the partitions' log ends");

    let group = [
        "-b",
        &address,
        "-G",
        "kcat-readers",
        "-X",
        "auto.offset.reset=earliest",
        "-e",
        "-q",
        "kcat",
    ];
    let first: BTreeSet<String> = kcat(&group, "").into_iter().collect();
    assert_eq!(first, produced, "kcat -G reads every record");
    let late: Vec<String> = (0..10).map(|i| format!("late-{i}")).collect();
    kcat(
        &["-P", "-b", &address, "-t", "kcat", "-X", "acks=all"],
        &(late.join("\n") + "\n"),
    );
    let second: BTreeSet<String> = kcat(&group, "").into_iter().collect();
    assert_eq!(
        second,
        late.into_iter().collect(),
        "kcat -G resumes from its committed offsets"
    );
    stop_broker(broker);
}
