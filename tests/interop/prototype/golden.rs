//! Golden bytes both ways against the prototype's classes (`Golden.java`): the samples below are
//! the same values, field for field, as `Golden.java`'s, so equal bytes mean equal fields in the
//! same order, and the prototype decoding kmirror's bytes to its own sample means kmirror's
//! encodings carry what the prototype reads. kmirror's own tagged fields stay at their defaults
//! here: the prototype does not know them, and they are not written when at their default.

use bytes::Bytes;
use kmirror_protocol::codec::WireFormat;
use kmirror_protocol::messages::*;
use kmirror_protocol::records::{ControlBatchHeader, ControlRecord, MIRROR_PID_RESET};
use std::path::Path;
use std::process::Command;
use uuid::Uuid;

const U1: Uuid = Uuid::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
const U2: Uuid = Uuid::from_bytes([
    0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20,
]);

fn s(v: &str) -> String {
    v.to_string()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// One sample: the prototype's name for it and kmirror's encoding, with a check that kmirror
/// decodes the prototype's bytes back to the same value and encodes that value identically.
struct Sample {
    name: &'static str,
    ours: Bytes,
    decodes: Box<dyn Fn(Bytes) -> Result<(), String>>,
}

fn sample<T: WireFormat + PartialEq + std::fmt::Debug + 'static>(
    name: &'static str,
    value: T,
) -> Sample {
    let ours = value.to_bytes(0).expect("the sample encodes");
    Sample {
        name,
        ours,
        decodes: Box::new(move |theirs: Bytes| {
            let decoded = T::from_bytes(theirs.clone(), 0)
                .map_err(|e| format!("kmirror cannot decode the prototype's bytes: {e}"))?;
            if decoded != value {
                return Err(format!(
                    "kmirror decodes the prototype's bytes to another value:\n  ours   {value:?}\n  theirs {decoded:?}"
                ));
            }
            let again = decoded.to_bytes(0).map_err(|e| e.to_string())?;
            if again != theirs {
                return Err("kmirror re-encodes the prototype's bytes differently".into());
            }
            Ok(())
        }),
    }
}

fn topic_results<T>(make: impl Fn(String, i16, Option<String>) -> T) -> Vec<T> {
    vec![
        make(s("orders"), 3, Some(s("e2"))),
        make(s("payments"), 4, None),
    ]
}

fn samples() -> Vec<Sample> {
    vec![
        sample(
            "CreateClusterMirrorRequest",
            CreateMirrorRequest {
                mirror_name: s("m1"),
                configs: vec![
                    create_mirror_request::MirrorConfig {
                        name: s("bootstrap.servers"),
                        value: Some(s("src:9092")),
                        ..Default::default()
                    },
                    create_mirror_request::MirrorConfig {
                        name: s("client.id"),
                        value: None,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ),
        sample(
            "CreateClusterMirrorResponse",
            CreateMirrorResponse {
                throttle_time_ms: 10,
                error_code: 2,
                error_message: Some(s("e1")),
                ..Default::default()
            },
        ),
        sample(
            "StartMirrorTopicsRequest",
            StartMirrorTopicsRequest {
                mirror_name: s("m1"),
                topics: vec![
                    start_mirror_topics_request::TopicMetadata {
                        topic_id: U1,
                        topic_name: s("orders"),
                        num_partitions: 3,
                        ..Default::default()
                    },
                    start_mirror_topics_request::TopicMetadata {
                        topic_id: U2,
                        topic_name: s("payments"),
                        num_partitions: 4,
                        ..Default::default()
                    },
                ],
                state_validation_offset: 5,
                include_patterns: strings(&["ord.*", "pay.*"]),
                exclude_patterns: strings(&["tmp.*"]),
                ..Default::default()
            },
        ),
        sample(
            "StartMirrorTopicsResponse",
            StartMirrorTopicsResponse {
                throttle_time_ms: 11,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: topic_results(|name, error_code, error_message| {
                    start_mirror_topics_response::TopicResult {
                        name,
                        error_code,
                        error_message,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
        ),
        sample(
            "StopMirrorTopicsRequest",
            StopMirrorTopicsRequest {
                mirror_name: s("m1"),
                topics: ["orders", "payments"]
                    .map(|t| stop_mirror_topics_request::TopicMetadata {
                        topic_name: s(t),
                        ..Default::default()
                    })
                    .to_vec(),
                state_validation_offset: 6,
                patterns: strings(&["ord.*", "pay.*"]),
                ..Default::default()
            },
        ),
        sample(
            "StopMirrorTopicsResponse",
            StopMirrorTopicsResponse {
                throttle_time_ms: 12,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: topic_results(|name, error_code, error_message| {
                    stop_mirror_topics_response::TopicResult {
                        name,
                        error_code,
                        error_message,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
        ),
        sample(
            "ListClusterMirrorsRequest",
            ListMirrorsRequest {
                include_topic_names: true,
                ..Default::default()
            },
        ),
        sample(
            "ListClusterMirrorsResponse",
            ListMirrorsResponse {
                throttle_time_ms: 13,
                error_code: 2,
                error_message: Some(s("e1")),
                mirrors: vec![
                    list_mirrors_response::ListedMirror {
                        mirror_name: s("m1"),
                        source_bootstrap: s("src:9092"),
                        source_cluster_id: s("src-cluster-1"),
                        topic_count: 2,
                        topic_names: strings(&["orders", "payments"]),
                        ..Default::default()
                    },
                    list_mirrors_response::ListedMirror {
                        mirror_name: s("m2"),
                        source_bootstrap: s("src2:9092"),
                        source_cluster_id: s("src-cluster-2"),
                        topic_count: 1,
                        topic_names: strings(&["audit"]),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ),
        sample(
            "DescribeClusterMirrorsRequest",
            DescribeMirrorsRequest {
                mirror_names: strings(&["m1", "m2"]),
                include_authorized_operations: true,
                cluster_id: Some(s("dst-cluster-1")),
                last_mirror_epoch_lookups: vec![
                    describe_mirrors_request::LastMirrorEpochLookup {
                        topic_id: U1,
                        partitions: vec![1, 2],
                        ..Default::default()
                    },
                    describe_mirrors_request::LastMirrorEpochLookup {
                        topic_id: U2,
                        partitions: vec![3],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ),
        sample("DescribeClusterMirrorsResponse", describe_response()),
        sample(
            "ReadMirrorStatesRequest",
            ReadMirrorStatesRequest {
                mirror_name: s("m1"),
                topics: vec![
                    read_mirror_states_request::Topic {
                        name: s("orders"),
                        partitions: [1, 2]
                            .map(|partition_index| read_mirror_states_request::Partition {
                                partition_index,
                                ..Default::default()
                            })
                            .to_vec(),
                        ..Default::default()
                    },
                    read_mirror_states_request::Topic {
                        name: s("payments"),
                        partitions: vec![read_mirror_states_request::Partition {
                            partition_index: 3,
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ),
        sample(
            "ReadMirrorStatesResponse",
            ReadMirrorStatesResponse {
                throttle_time_ms: 15,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: vec![read_mirror_states_response::Topic {
                    name: s("orders"),
                    partitions: vec![
                        read_mirror_states_response::Partition {
                            partition_index: 1,
                            last_mirror_epoch: 4,
                            state: 2,
                            error_code: 5,
                            previous_state: 3,
                            retry_attempt: 6,
                            error_message: Some(s("e2")),
                            ..Default::default()
                        },
                        read_mirror_states_response::Partition {
                            partition_index: 2,
                            last_mirror_epoch: 7,
                            state: 4,
                            error_code: 8,
                            previous_state: 1,
                            retry_attempt: 9,
                            error_message: None,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ),
        sample(
            "WriteMirrorStatesRequest",
            WriteMirrorStatesRequest {
                mirror_name: s("m1"),
                topics: vec![write_mirror_states_request::Topic {
                    name: s("orders"),
                    partitions: vec![
                        write_mirror_states_request::Partition {
                            partition_index: 1,
                            last_mirror_epoch: 4,
                            state: 2,
                            ..Default::default()
                        },
                        write_mirror_states_request::Partition {
                            partition_index: 2,
                            last_mirror_epoch: 5,
                            state: 3,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                stopped_topics: strings(&["old1", "old2"]),
                ..Default::default()
            },
        ),
        sample(
            "WriteMirrorStatesResponse",
            WriteMirrorStatesResponse {
                throttle_time_ms: 16,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: vec![write_mirror_states_response::Topic {
                    name: s("orders"),
                    partitions: vec![
                        write_mirror_states_response::Partition {
                            partition_index: 1,
                            error_code: 3,
                            error_message: Some(s("e2")),
                            ..Default::default()
                        },
                        write_mirror_states_response::Partition {
                            partition_index: 2,
                            error_code: 4,
                            error_message: None,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ),
        sample(
            "PauseMirrorTopicsRequest",
            PauseMirrorTopicsRequest {
                mirror_name: s("m1"),
                topics: ["orders", "payments"]
                    .map(|t| pause_mirror_topics_request::TopicMetadata {
                        topic_name: s(t),
                        ..Default::default()
                    })
                    .to_vec(),
                state_validation_offset: 7,
                ..Default::default()
            },
        ),
        sample(
            "PauseMirrorTopicsResponse",
            PauseMirrorTopicsResponse {
                throttle_time_ms: 17,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: topic_results(|name, error_code, error_message| {
                    pause_mirror_topics_response::TopicResult {
                        name,
                        error_code,
                        error_message,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
        ),
        sample(
            "ResumeMirrorTopicsRequest",
            ResumeMirrorTopicsRequest {
                mirror_name: s("m1"),
                topics: ["orders", "payments"]
                    .map(|t| resume_mirror_topics_request::TopicMetadata {
                        topic_name: s(t),
                        ..Default::default()
                    })
                    .to_vec(),
                state_validation_offset: 8,
                ..Default::default()
            },
        ),
        sample(
            "ResumeMirrorTopicsResponse",
            ResumeMirrorTopicsResponse {
                throttle_time_ms: 18,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: topic_results(|name, error_code, error_message| {
                    resume_mirror_topics_response::TopicResult {
                        name,
                        error_code,
                        error_message,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            },
        ),
        sample(
            "DeleteClusterMirrorRequest",
            DeleteMirrorRequest {
                mirror_name: s("m1"),
                state_validation_offset: 9,
                ..Default::default()
            },
        ),
        sample(
            "DeleteClusterMirrorResponse",
            DeleteMirrorResponse {
                throttle_time_ms: 19,
                error_code: 2,
                error_message: Some(s("e1")),
                ..Default::default()
            },
        ),
        sample(
            "BumpLeaderEpochsRequest",
            BumpLeaderEpochsRequest {
                topics: vec![
                    bump_leader_epochs_request::TopicState {
                        topic_id: U1,
                        partitions: [(1, 4), (2, 5)]
                            .map(|(partition_index, min_leader_epoch)| {
                                bump_leader_epochs_request::LeaderEpochState {
                                    partition_index,
                                    min_leader_epoch,
                                    ..Default::default()
                                }
                            })
                            .to_vec(),
                        ..Default::default()
                    },
                    bump_leader_epochs_request::TopicState {
                        topic_id: U2,
                        partitions: vec![bump_leader_epochs_request::LeaderEpochState {
                            partition_index: 3,
                            min_leader_epoch: 6,
                            ..Default::default()
                        }],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        ),
        sample(
            "BumpLeaderEpochsResponse",
            BumpLeaderEpochsResponse {
                throttle_time_ms: 20,
                error_code: 2,
                error_message: Some(s("e1")),
                topics: vec![bump_leader_epochs_response::TopicResult {
                    topic_name: s("orders"),
                    partitions: vec![
                        bump_leader_epochs_response::PartitionResult {
                            partition_index: 1,
                            error_code: 3,
                            error_message: Some(s("e2")),
                            ..Default::default()
                        },
                        bump_leader_epochs_response::PartitionResult {
                            partition_index: 2,
                            error_code: 4,
                            error_message: None,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ),
    ]
}

fn describe_response() -> DescribeMirrorsResponse {
    let partition = |partition_index,
                     source_offset,
                     destination_offset,
                     lag,
                     state: &str,
                     retry_attempt,
                     error_message: Option<&str>| {
        describe_mirrors_response::DescribedPartition {
            partition_index,
            source_offset,
            destination_offset,
            lag,
            state: s(state),
            retry_attempt,
            error_message: error_message.map(s),
            ..Default::default()
        }
    };
    let lookup = |topic_id, partitions: &[(i32, i32)]| {
        describe_mirrors_response::LastMirrorEpochLookupResult {
            topic_id,
            partitions: partitions
                .iter()
                .map(|&(partition_index, last_mirror_epoch)| {
                    describe_mirrors_response::LastMirrorEpochPartitionResult {
                        partition_index,
                        last_mirror_epoch,
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        }
    };
    DescribeMirrorsResponse {
        throttle_time_ms: 14,
        error_code: 2,
        error_message: Some(s("e1")),
        mirrors: vec![
            describe_mirrors_response::DescribedMirror {
                error_code: 3,
                mirror_name: s("m1"),
                authorized_operations: 4,
                topics: vec![describe_mirrors_response::DescribedTopic {
                    topic_name: s("orders"),
                    partitions: vec![
                        partition(1, 100, 90, 10, "MIRRORING", 5, Some("e2")),
                        partition(2, 200, 150, 50, "FAILED", 6, None),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            },
            describe_mirrors_response::DescribedMirror {
                error_code: 7,
                mirror_name: s("m2"),
                authorized_operations: 8,
                topics: vec![describe_mirrors_response::DescribedTopic {
                    topic_name: s("audit"),
                    partitions: vec![partition(3, 300, 299, 1, "PAUSED", 9, Some("e3"))],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
        lookup_results: vec![lookup(U1, &[(1, 11), (2, 12)]), lookup(U2, &[(3, 13)])],
        ..Default::default()
    }
}

/// The PID reset record as the prototype's schema has it: `[int16 version][record]`.
fn pid_reset_record() -> Bytes {
    let record = MirrorPidResetRecord {
        source_cluster_id: s("src-cluster-1"),
        ..Default::default()
    };
    let mut bytes = vec![0, 0];
    bytes.extend_from_slice(&record.to_bytes(0).expect("encodes"));
    Bytes::from(bytes)
}

fn golden(dir: &Path, mode: &str, dir_arg: &Path) -> std::process::Output {
    Command::new("java")
        .arg("-cp")
        .arg(super::classpath(dir))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/prototype/Golden.java"
        ))
        .arg(mode)
        .arg(dir_arg)
        .output()
        .expect("java runs")
}

#[test]
#[ignore = "needs Java 17 and the KIP prototype: run scripts/test.sh"]
fn every_mirror_rpc_and_record_matches_the_prototype_byte_for_byte_both_ways() {
    let prototype = super::prototype_dir();
    let theirs = tempfile::tempdir().expect("temp dir");
    let written = golden(&prototype, "write", theirs.path());
    assert!(
        written.status.success(),
        "Golden.java write failed: {}",
        String::from_utf8_lossy(&written.stderr)
    );
    let ours = tempfile::tempdir().expect("temp dir");
    let mut failures = Vec::new();
    let samples = samples();
    assert_eq!(samples.len(), 22, "11 RPCs, request and response");
    for sample in samples {
        let path = theirs.path().join(format!("{}.bin", sample.name));
        let their_bytes = Bytes::from(std::fs::read(&path).expect("the prototype wrote it"));
        if their_bytes != sample.ours {
            failures.push(format!(
                "{}: kmirror encodes\n  {}\nthe prototype\n  {}",
                sample.name,
                hex(&sample.ours),
                hex(&their_bytes)
            ));
        }
        if let Err(why) = (sample.decodes)(their_bytes) {
            failures.push(format!("{}: {why}", sample.name));
        }
        std::fs::write(
            ours.path().join(format!("{}.bin", sample.name)),
            &sample.ours,
        )
        .expect("writes");
    }
    // The control record: its key, its value, and the whole batch the failover barrier is.
    let records: [(&str, Bytes); 3] = [
        (
            "ControlRecordKey",
            Bytes::from(
                [0i16, MIRROR_PID_RESET]
                    .iter()
                    .flat_map(|v| v.to_be_bytes())
                    .collect::<Vec<u8>>(),
            ),
        ),
        ("MirrorPidResetRecord", pid_reset_record()),
        (
            "MirrorPidResetBatch",
            ControlRecord::MirrorPidReset {
                source_cluster_id: s("src-cluster-1"),
            }
            .to_batch(&ControlBatchHeader::without_producer(
                42,
                5,
                1_700_000_000_000,
            ))
            .expect("encodes"),
        ),
    ];
    for (name, bytes) in records {
        let their_bytes =
            std::fs::read(theirs.path().join(format!("{name}.bin"))).expect("written");
        if their_bytes != bytes {
            failures.push(format!(
                "{name}: kmirror\n  {}\nthe prototype\n  {}",
                hex(&bytes),
                hex(&their_bytes)
            ));
        }
        std::fs::write(ours.path().join(format!("{name}.bin")), &bytes).expect("writes");
    }
    // kmirror parses the prototype's barrier as the barrier it is.
    let batch =
        Bytes::from(std::fs::read(theirs.path().join("MirrorPidResetBatch.bin")).expect("written"));
    let parsed = kmirror_protocol::batch::RecordBatches::new(batch)
        .next()
        .expect("one batch")
        .expect("a valid batch");
    assert_eq!(
        ControlRecord::parse(&parsed).expect("a control record"),
        ControlRecord::MirrorPidReset {
            source_cluster_id: s("src-cluster-1")
        }
    );
    // And the prototype reads kmirror's bytes as its own samples.
    let checked = golden(&prototype, "check", ours.path());
    let report = String::from_utf8_lossy(&checked.stdout);
    if !checked.status.success() {
        failures.push(format!(
            "the prototype does not read kmirror's bytes as its samples:\n{report}{}",
            String::from_utf8_lossy(&checked.stderr)
        ));
    }
    assert_eq!(
        report.lines().filter(|l| l.starts_with("OK ")).count(),
        25,
        "{report}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
