use super::*;
use kmirror_protocol::messages::{read_mirror_states_request, write_mirror_states_request};
use kmirror_protocol::sharding::mirror_partition_shard;

pub(crate) const SHARDS: i32 = 4;

/// A partition index of topic `id` in mirror "dr" that hashes to `shard`.
pub(crate) fn partition_in(shard: i32, id: Uuid) -> i32 {
    (0..1000)
        .find(|p| mirror_partition_shard("dr", &id, *p, SHARDS) == shard)
        .expect("some partition hashes to every shard")
}

pub(crate) fn write(
    id: Uuid,
    partition: i32,
    state: MirrorState,
    leader_epoch: i32,
    lme: i32,
) -> WriteMirrorStatesRequest {
    WriteMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![write_mirror_states_request::Topic {
            topic_id: id,
            name: "orders".into(),
            partitions: vec![write_mirror_states_request::Partition {
                partition_index: partition,
                leader_epoch,
                state: state.wire_value(),
                last_mirror_epoch: lme,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub(crate) fn read(id: Uuid, partition: i32) -> ReadMirrorStatesRequest {
    ReadMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![read_mirror_states_request::Topic {
            topic_id: id,
            name: "orders".into(),
            partitions: vec![read_mirror_states_request::Partition {
                partition_index: partition,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn code(r: &WriteMirrorStatesResponse) -> i16 {
    r.topics[0].partitions[0].error_code
}

/// Validates, then appends and replays, as the actor does.
fn apply(
    shard: &mut Shard,
    log: &mut Vec<CoordinatorRecord>,
    request: &WriteMirrorStatesRequest,
) -> i16 {
    let (records, response) = shard.write_states(request);
    for r in &records {
        shard.replay(r);
    }
    log.extend(records);
    code(&response)
}

#[test]
fn writes_apply_only_by_replay_and_a_reload_rebuilds_the_same_state() {
    let id = Uuid::from_u128(42);
    let p = partition_in(1, id);
    let mut shard = Shard::new(1, SHARDS);
    let mut log = Vec::new();
    assert_eq!(
        code(
            &shard
                .write_states(&write(id, p, MirrorState::Preparing, 3, -1))
                .1
        ),
        14
    );
    shard.loaded();
    let (records, response) = shard.write_states(&write(id, p, MirrorState::Preparing, 3, -1));
    assert_eq!(code(&response), 0);
    assert_eq!(
        shard.partition_count(),
        0,
        "validation alone changes nothing"
    );
    for r in &records {
        shard.replay(r);
    }
    log.extend(records);
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, p, MirrorState::Stopping, 4, 17)
        ),
        0
    );
    let key = PartitionKey {
        mirror: "dr".into(),
        topic_id: id,
        partition: p,
    };
    assert_eq!(
        shard.state_of(&key).map(|s| (s.state, s.leader_epoch)),
        Some((MirrorState::Stopping, 4))
    );
    assert_eq!(shard.last_mirrored_epoch("dr", "orders", p), Some(17));
    let answer = shard.read_states(&read(id, p));
    let part = &answer.topics[0].partitions[0];
    assert_eq!(
        (
            part.error_code,
            part.state,
            part.last_mirror_epoch,
            part.leader_epoch
        ),
        (0, 4, 17, 4)
    );

    let mut reloaded = Shard::new(1, SHARDS);
    for r in &log {
        reloaded.replay(r);
    }
    reloaded.loaded();
    assert_eq!(reloaded, shard);
}

#[test]
fn fencing_ownership_and_validity() {
    let id = Uuid::from_u128(7);
    let mine = partition_in(2, id);
    let other = partition_in(3, id);
    let mut shard = Shard::new(2, SHARDS);
    shard.loaded();
    let mut log = Vec::new();
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, mine, MirrorState::Mirroring, 10, -1)
        ),
        0
    );
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, mine, MirrorState::Paused, 9, -1)
        ),
        74,
        "lower epoch fenced"
    );
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, mine, MirrorState::Pausing, 10, -1)
        ),
        0,
        "same epoch accepted"
    );
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, other, MirrorState::Mirroring, 10, -1)
        ),
        16
    );
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(id, mine, MirrorState::Unknown, 10, -1)
        ),
        145
    );
    let mut bad = write(id, mine, MirrorState::Mirroring, 10, -1);
    bad.topics[0].partitions[0].state = 42;
    assert_eq!(apply(&mut shard, &mut log, &bad), 145);
    assert_eq!(
        shard.read_states(&read(id, other)).topics[0].partitions[0].error_code,
        16
    );
    let unknown = shard.read_states(&read(
        Uuid::from_u128(8),
        partition_in(2, Uuid::from_u128(8)),
    ));
    assert_eq!(
        unknown.topics[0].partitions[0].state, 16,
        "no record reads as UNKNOWN"
    );
}

#[test]
fn lme_record_is_one_per_mirror_and_deletion_tombstones_everything() {
    let id = Uuid::from_u128(99);
    let mut shard = Shard::new(0, SHARDS);
    shard.loaded();
    let mut log = Vec::new();
    let ps: Vec<i32> = (0..200)
        .filter(|p| mirror_partition_shard("dr", &id, *p, SHARDS) == 0)
        .take(3)
        .collect();
    for (i, p) in ps.iter().enumerate() {
        assert_eq!(
            apply(
                &mut shard,
                &mut log,
                &write(id, *p, MirrorState::Stopping, 1, 10 + i as i32)
            ),
            0
        );
    }
    let CoordinatorRecord::LastMirrorEpochs { value: Some(v), .. } = log.last().expect("records")
    else {
        panic!("the last write rewrote the mirror's LME record");
    };
    assert_eq!(
        v.topics[0].partitions.len(),
        3,
        "the record lists every partition of the shard"
    );
    let tombstones = shard.forget_all_but(&LiveTopics::new());
    assert_eq!(tombstones.len(), 4);
    for t in &tombstones {
        shard.replay(t);
    }
    assert_eq!(shard.partition_count(), 0);
    assert_eq!(shard.last_mirrored_epoch("dr", "orders", ps[0]), None);
}

#[test]
fn a_deleted_topic_is_forgotten_and_the_other_topics_lmes_kept() {
    let (orders, payments) = (Uuid::from_u128(7), Uuid::from_u128(8));
    let mut shard = Shard::new(0, SHARDS);
    shard.loaded();
    let mut log = Vec::new();
    let p = partition_in(0, orders);
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(orders, p, MirrorState::Stopped, 12, 4)
        ),
        0
    );
    let q = partition_in(0, payments);
    let mut other = write(payments, q, MirrorState::Stopped, 3, 6);
    other.topics[0].name = "payments".into();
    assert_eq!(apply(&mut shard, &mut log, &other), 0);

    // orders deleted; payments lives on.
    let live = LiveTopics::from([(
        "dr".to_string(),
        std::collections::BTreeMap::from([(payments, "payments".to_string())]),
    )]);
    let records = shard.forget_all_but(&live);
    assert_eq!(
        records.len(),
        2,
        "a tombstone and the LME record rewritten: {records:?}"
    );
    for r in &records {
        shard.replay(r);
    }
    assert_eq!(shard.last_mirrored_epoch("dr", "orders", p), None);
    assert_eq!(shard.last_mirrored_epoch("dr", "payments", q), Some(6));
    // A topic created again under the same id starts over: epoch 0 is not fenced.
    assert_eq!(
        apply(
            &mut shard,
            &mut log,
            &write(orders, p, MirrorState::Preparing, 0, -1)
        ),
        0
    );
    // payments deleted too; orders, created again, is live again.
    let live = LiveTopics::from([(
        "dr".to_string(),
        std::collections::BTreeMap::from([(orders, "orders".to_string())]),
    )]);
    let records = shard.forget_all_but(&live);
    assert!(
        records
            .iter()
            .any(|r| matches!(r, CoordinatorRecord::LastMirrorEpochs { value: None, .. })),
        "no LME left: the record is tombstoned: {records:?}"
    );
}
