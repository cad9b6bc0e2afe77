//! KIP-1279's inter-broker RPCs on a `kmirror broker` process over TCP: WriteMirrorStates for
//! partitions spread over several `__mirror_state` shards, durable across a restart and fenced
//! by leader epoch; ReadMirrorStates; BumpLeaderEpochs raising the leader epoch that Metadata
//! then shows; all three refused without CLUSTER_ACTION.

use super::{connection, create, spawn_broker, spawn_broker_with, stop_broker};
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    BumpLeaderEpochsRequest, ReadMirrorStatesRequest, WriteMirrorStatesRequest,
    bump_leader_epochs_request, read_mirror_states_request, write_mirror_states_request,
};
use kmirror_protocol::sharding::mirror_partition_shard;
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeSet;
use uuid::Uuid;

const TOPIC_ID: Uuid = Uuid::from_u128(0x4242);
const PARTITIONS: std::ops::Range<i32> = 0..6;

fn write(leader_epoch: i32, state: MirrorState, partitions: &[i32]) -> WriteMirrorStatesRequest {
    WriteMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![write_mirror_states_request::Topic {
            topic_id: TOPIC_ID,
            name: "orders".into(),
            partitions: partitions
                .iter()
                .map(|&partition_index| write_mirror_states_request::Partition {
                    partition_index,
                    leader_epoch,
                    state: state.wire_value(),
                    previous_state: MirrorState::Preparing.wire_value(),
                    last_mirror_epoch: -1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn read(partitions: &[i32]) -> ReadMirrorStatesRequest {
    ReadMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![read_mirror_states_request::Topic {
            topic_id: TOPIC_ID,
            name: "orders".into(),
            partitions: partitions
                .iter()
                .map(|&partition_index| read_mirror_states_request::Partition {
                    partition_index,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn bump(topic_id: Uuid, partitions: &[(i32, i32)]) -> BumpLeaderEpochsRequest {
    BumpLeaderEpochsRequest {
        topics: vec![bump_leader_epochs_request::TopicState {
            topic_id,
            partitions: partitions
                .iter()
                .map(|&(partition_index, min_leader_epoch)| {
                    bump_leader_epochs_request::LeaderEpochState {
                        partition_index,
                        min_leader_epoch,
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn mirror_states_and_leader_epochs_over_tcp_between_brokers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    let all: Vec<i32> = PARTITIONS.collect();
    let shards: BTreeSet<i32> = all
        .iter()
        .map(|&p| mirror_partition_shard("dr", &TOPIC_ID, p, 50))
        .collect();
    assert!(shards.len() > 1, "the partitions span several shards");

    let client = connection(&address).await;
    // The first request creates `__mirror_state`; its shards answer
    // COORDINATOR_LOAD_IN_PROGRESS until they have replayed it, and the asking broker retries.
    let mut written;
    loop {
        (_, written) = client
            .send(
                "WriteMirrorStates",
                &write(3, MirrorState::Mirroring, &all),
                0,
            )
            .await
            .expect("WriteMirrorStates answers");
        let mut partitions = written.topics.iter().flat_map(|t| t.partitions.iter());
        if !partitions.any(|p| p.error_code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(written.error_code, 0, "{written:?}");
    assert_eq!(written.topics.len(), 1, "one entry per topic: {written:?}");
    let codes: Vec<(i32, i16)> = written.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    assert_eq!(codes.len(), all.len());
    assert!(codes.iter().all(|(_, code)| *code == 0), "{codes:?}");
    let (_, fenced) = client
        .send(
            "WriteMirrorStates",
            &write(2, MirrorState::Stopped, &[0]),
            0,
        )
        .await
        .expect("WriteMirrorStates answers");
    assert_eq!(
        fenced.topics[0].partitions[0].error_code,
        ErrorCode::FENCED_LEADER_EPOCH.0,
        "an older leader is fenced"
    );

    // Durable: a restarted broker's shards replay them.
    stop_broker(broker);
    let (broker, address) = spawn_broker(dir.path()).await;
    let client = connection(&address).await;
    let mut states;
    loop {
        (_, states) = client
            .send("ReadMirrorStates", &read(&all), 0)
            .await
            .expect("ReadMirrorStates answers");
        let mut partitions = states.topics.iter().flat_map(|t| t.partitions.iter());
        if !partitions.any(|p| p.error_code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(states.error_code, 0, "{states:?}");
    let mut seen: Vec<(i32, i16, i8, i32)> = states
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| (p.partition_index, p.error_code, p.state, p.leader_epoch))
        .collect();
    seen.sort();
    let expected: Vec<(i32, i16, i8, i32)> = all
        .iter()
        .map(|&p| (p, 0, MirrorState::Mirroring.wire_value(), 3))
        .collect();
    assert_eq!(seen, expected);

    // BumpLeaderEpochs: the controller raises the epoch past MinLeaderEpoch; Metadata shows it.
    assert_eq!(create(&address, "bumped", 2).await, 0);
    let source = SourceClient::connect(ClientConfig::plaintext(&address))
        .await
        .expect("connects");
    let metadata = source.metadata(Some(&["bumped"])).await.expect("metadata");
    let topic_id = metadata.topics["bumped"].topic_id;
    let (_, bumped) = client
        .send("BumpLeaderEpochs", &bump(topic_id, &[(0, 7), (5, 1)]), 0)
        .await
        .expect("BumpLeaderEpochs answers");
    let results: Vec<(i32, i16, i32)> = bumped.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code, p.leader_epoch))
        .collect();
    assert_eq!(
        results,
        [(0, 0, 8), (5, 3, -1)],
        "partition 5 does not exist"
    );
    let (_, unknown) = client
        .send("BumpLeaderEpochs", &bump(Uuid::from_u128(9), &[(0, 1)]), 0)
        .await
        .expect("BumpLeaderEpochs answers");
    assert_eq!(
        unknown.topics[0].partitions[0].error_code,
        ErrorCode::UNKNOWN_TOPIC_ID.0
    );
    let metadata = source.metadata(Some(&["bumped"])).await.expect("metadata");
    assert_eq!(metadata.topics["bumped"].partitions[0].leader_epoch, 8);
    assert_eq!(metadata.topics["bumped"].partitions[1].leader_epoch, 0);
    stop_broker(broker);

    // Brokers only: without CLUSTER_ACTION all three are refused.
    let locked = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker_with(locked.path(), "authorizer.enabled=true\n").await;
    let client = connection(&address).await;
    let (_, w) = client
        .send(
            "WriteMirrorStates",
            &write(1, MirrorState::Mirroring, &[0]),
            0,
        )
        .await
        .expect("answers");
    let (_, r) = client
        .send("ReadMirrorStates", &read(&[0]), 0)
        .await
        .expect("answers");
    let (_, b) = client
        .send("BumpLeaderEpochs", &bump(topic_id, &[(0, 1)]), 0)
        .await
        .expect("answers");
    let denied = ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0;
    assert_eq!(
        (w.error_code, r.error_code, b.error_code),
        (denied, denied, denied)
    );
    stop_broker(broker);
}
