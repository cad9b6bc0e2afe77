use super::*;

fn join_request(group: &str, member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        group: group.to_string(),
        member_id: member_id.to_string(),
        require_known_member_id: true,
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout: Duration::from_secs(10),
        rebalance_timeout: Duration::from_secs(5),
        protocol_type: "consumer".to_string(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("{member_id}:{p}"))))
            .collect(),
    }
}

/// A new member first gets MEMBER_ID_REQUIRED, then joins with that id.
async fn join_new(coordinator: &GroupCoordinator, group: &str, protocols: &[&str]) -> JoinResult {
    let first = coordinator.join(join_request(group, "", protocols)).await;
    assert_eq!(first.error, ErrorCode::MEMBER_ID_REQUIRED.0);
    coordinator
        .join(join_request(group, &first.member_id, protocols))
        .await
}

#[tokio::test]
async fn a_lone_member_becomes_leader_and_gets_its_assignment() {
    let dir = tempfile::tempdir().expect("temp dir");
    let coordinator = GroupCoordinator::open(dir.path()).expect("opens");
    let joined = join_new(&coordinator, "g", &["range"]).await;
    assert_eq!(joined.error, 0);
    assert_eq!(joined.generation, 1);
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    let me = joined.member_id.clone();
    let (error, assignment) = coordinator
        .sync(
            "g",
            1,
            &me,
            vec![(me.clone(), Bytes::from_static(b"all"))],
            Duration::from_secs(1),
        )
        .await;
    assert_eq!((error, &assignment[..]), (0, &b"all"[..]));
    assert_eq!(
        coordinator.describe("g").expect("exists").state,
        GroupState::Stable
    );
    assert_eq!(coordinator.heartbeat("g", 1, &me), 0);
    assert_eq!(
        coordinator.heartbeat("g", 0, &me),
        ErrorCode::ILLEGAL_GENERATION.0
    );
}

#[tokio::test]
async fn a_second_member_triggers_a_rebalance_both_rejoin_and_share_one_generation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let coordinator = Arc::new(GroupCoordinator::open(dir.path()).expect("opens"));
    let a = join_new(&coordinator, "g", &["cooperative-sticky", "range"]).await;
    let (error, _) = coordinator
        .sync(
            "g",
            a.generation,
            &a.member_id,
            vec![],
            Duration::from_secs(1),
        )
        .await;
    assert_eq!(error, 0);
    // B supports only range: the group must move to the protocol both support.
    let b_task = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move { join_new(&coordinator, "g", &["range"]).await })
    };
    // A learns of the rebalance from its heartbeat, then rejoins.
    let mut heartbeat = 0;
    for _ in 0..100 {
        heartbeat = coordinator.heartbeat("g", a.generation, &a.member_id);
        if heartbeat == ErrorCode::REBALANCE_IN_PROGRESS.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(heartbeat, ErrorCode::REBALANCE_IN_PROGRESS.0);
    let a2 = coordinator
        .join(join_request(
            "g",
            &a.member_id,
            &["cooperative-sticky", "range"],
        ))
        .await;
    let b = b_task.await.expect("joins");
    assert_eq!((a2.error, b.error), (0, 0));
    assert_eq!(a2.generation, 2);
    assert_eq!(b.generation, 2);
    assert_eq!(a2.protocol.as_deref(), Some("range"));
    assert_eq!(a2.leader, a.member_id, "the leader stays");
    assert_eq!(a2.members.len(), 2, "the leader sees every member");
    assert!(b.members.is_empty(), "followers see none");
    let b_sync = {
        let coordinator = coordinator.clone();
        let id = b.member_id.clone();
        tokio::spawn(async move {
            coordinator
                .sync("g", 2, &id, vec![], Duration::from_secs(5))
                .await
        })
    };
    let assignments = vec![
        (a.member_id.clone(), Bytes::from_static(b"p0")),
        (b.member_id.clone(), Bytes::from_static(b"p1")),
    ];
    let (error, mine) = coordinator
        .sync("g", 2, &a.member_id, assignments, Duration::from_secs(5))
        .await;
    assert_eq!((error, &mine[..]), (0, &b"p0"[..]));
    let (error, theirs) = b_sync.await.expect("syncs");
    assert_eq!(
        (error, &theirs[..]),
        (0, &b"p1"[..]),
        "the follower waits for the leader's assignment"
    );
    // B leaves: A is told to rejoin, and a commit from B is refused.
    assert_eq!(
        coordinator.leave("g", std::slice::from_ref(&b.member_id)),
        vec![0]
    );
    assert_eq!(
        coordinator.heartbeat("g", 2, &a.member_id),
        ErrorCode::REBALANCE_IN_PROGRESS.0
    );
    let refused = coordinator.commit("g", 2, &b.member_id, vec![("t".into(), 0, committed(5))]);
    assert_eq!(refused, vec![ErrorCode::UNKNOWN_MEMBER_ID.0]);
}

fn committed(offset: i64) -> Committed {
    Committed {
        offset,
        leader_epoch: 3,
        metadata: Some("m".to_string()),
    }
}

#[tokio::test]
async fn committed_offsets_survive_a_restart_and_delete_removes_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let coordinator = GroupCoordinator::open(dir.path()).expect("opens");
        let joined = join_new(&coordinator, "g", &["range"]).await;
        let errors = coordinator.commit(
            "g",
            joined.generation,
            &joined.member_id,
            vec![
                ("t".into(), 0, committed(10)),
                ("t".into(), 1, committed(20)),
            ],
        );
        assert_eq!(errors, vec![0, 0]);
        // A stale generation is fenced.
        let fenced = coordinator.commit(
            "g",
            0,
            &joined.member_id,
            vec![("t".into(), 0, committed(99))],
        );
        assert_eq!(fenced, vec![ErrorCode::ILLEGAL_GENERATION.0]);
        assert_eq!(coordinator.delete("g"), ErrorCode::NON_EMPTY_GROUP.0);
        // An admin commit (no member) to an empty group is accepted.
        assert_eq!(
            coordinator.commit("h", -1, "", vec![("t".into(), 0, committed(7))]),
            vec![0]
        );
    }
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    let offsets = coordinator.committed("g");
    assert_eq!(offsets.get(&("t".to_string(), 0)), Some(&committed(10)));
    assert_eq!(offsets.get(&("t".to_string(), 1)), Some(&committed(20)));
    assert_eq!(
        coordinator.describe("g").expect("exists").state,
        GroupState::Empty,
        "members rejoin after a restart"
    );
    assert_eq!(coordinator.delete("h"), 0);
    assert_eq!(coordinator.delete("h"), ErrorCode::GROUP_ID_NOT_FOUND.0);
    drop(coordinator);
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    assert!(
        coordinator.committed("h").is_empty(),
        "the deletion is durable"
    );
    assert_eq!(coordinator.committed("g").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_member_whose_session_expires_is_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let coordinator = GroupCoordinator::open(dir.path()).expect("opens");
    let joined = join_new(&coordinator, "g", &["range"]).await;
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(
        coordinator.heartbeat("g", joined.generation, &joined.member_id),
        ErrorCode::UNKNOWN_MEMBER_ID.0
    );
    let group = coordinator.describe("g").expect("exists");
    assert_eq!(group.state, GroupState::Empty);
    assert!(group.members.is_empty());
}

#[test]
fn a_deleted_topics_offsets_are_forgotten_durably() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let coordinator = GroupCoordinator::open(dir.path()).expect("opens");
        for group in ["g1", "g2"] {
            let offsets = vec![
                ("gone".to_string(), 0, committed(5)),
                ("kept".to_string(), 0, committed(7)),
            ];
            assert_eq!(coordinator.commit(group, -1, "", offsets), vec![0, 0]);
        }
        coordinator.forget_topic("gone").expect("forgets");
        assert_eq!(
            coordinator.topics_with_offsets(),
            BTreeSet::from(["kept".to_string()])
        );
    }
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    for group in ["g1", "g2"] {
        let offsets = coordinator.committed(group);
        assert_eq!(offsets.len(), 1, "{group}: {offsets:?}");
        assert_eq!(offsets[&("kept".to_string(), 0)].offset, 7);
    }
}

/// A KIP-848 join of `member` to `group` subscribing to `t` (2 partitions in `view`).
fn consumer_join(coordinator: &GroupCoordinator, group: &str, member: &str) -> HeartbeatAnswer {
    let view: TopicsView = BTreeMap::from([("t".to_string(), ("id-t".to_string(), 2, true))]);
    coordinator
        .consumer_heartbeat(
            group,
            Heartbeat {
                member_id: member.to_string(),
                member_epoch: 0,
                rebalance_timeout_ms: 30_000,
                subscribed_topic_names: Some(vec!["t".to_string()]),
                ..Heartbeat::default()
            },
            &view,
        )
        .expect("joins")
}

/// Consumer groups are written as what changed, replayed whole, and the log is compacted to
/// the live state when it grows: 300 joins and leaves and 300 commits later, the log is a few
/// KiB, and a reopened coordinator has the same members, epochs, targets and offsets.
#[tokio::test]
async fn consumer_groups_replay_after_compaction_and_the_log_stays_small() {
    let dir = tempfile::tempdir().expect("temp dir");
    let before = {
        let coordinator =
            GroupCoordinator::open_compacting_at(dir.path(), 8 * 1024).expect("opens");
        for i in 0..300 {
            consumer_join(&coordinator, "c", &format!("m{}", i % 5));
            let offsets = vec![("t".to_string(), i % 2, committed(i64::from(i)))];
            assert_eq!(coordinator.commit("plain", -1, "", offsets), vec![0]);
        }
        let c = coordinator.describe("c").expect("exists");
        (
            c.consumer.expect("a consumer group").state,
            coordinator.committed("plain"),
        )
    };
    let size = std::fs::metadata(dir.path().join("offsets.log"))
        .expect("the log")
        .len();
    assert!(size < 32 * 1024, "the log is {size} bytes");
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    let after = coordinator.describe("c").expect("exists");
    assert_eq!(after.consumer.expect("a consumer group").state, before.0);
    assert_eq!(coordinator.committed("plain"), before.1);
    assert_eq!(before.0.members.len(), 5);
}

/// A consumer-protocol member that went silent no longer holds its group: once its session
/// passed, DeleteGroups deletes the group and an admin commit goes through.
#[tokio::test(start_paused = true)]
async fn a_silent_consumer_member_does_not_hold_its_group_after_its_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let coordinator = GroupCoordinator::open(dir.path()).expect("opens");
    consumer_join(&coordinator, "gz", "silent");
    assert_eq!(coordinator.delete("gz"), ErrorCode::NON_EMPTY_GROUP.0);
    assert_eq!(
        coordinator.commit("gz", -1, "", vec![("t".into(), 0, committed(1))]),
        vec![ErrorCode::UNKNOWN_MEMBER_ID.0]
    );
    tokio::time::advance(Duration::from_secs(46)).await;
    assert_eq!(
        coordinator.commit("gz", -1, "", vec![("t".into(), 0, committed(1))]),
        vec![0]
    );
    assert_eq!(coordinator.delete("gz"), 0);
}

/// A log that grew large before a start (compaction off, then on) is compacted at the first
/// append after it.
#[tokio::test]
async fn a_large_log_from_before_a_start_is_compacted_at_the_first_append() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let coordinator =
            GroupCoordinator::open_compacting_at(dir.path(), u64::MAX).expect("opens");
        for i in 0..200 {
            let offsets = vec![("t".to_string(), 0, committed(i))];
            assert_eq!(coordinator.commit("g", -1, "", offsets), vec![0]);
        }
    }
    let log = dir.path().join("offsets.log");
    let grown = std::fs::metadata(&log).expect("the log").len();
    let coordinator = GroupCoordinator::open_compacting_at(dir.path(), 4 * 1024).expect("reopens");
    assert!(grown > 4 * 1024, "{grown}");
    assert_eq!(
        coordinator.commit("g", -1, "", vec![("t".to_string(), 1, committed(1))]),
        vec![0]
    );
    let compacted = std::fs::metadata(&log).expect("the log").len();
    assert!(compacted < grown / 10, "{grown} -> {compacted}");
    drop(coordinator);
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    assert_eq!(
        coordinator.committed("g")[&("t".to_string(), 0)].offset,
        199
    );
    assert_eq!(coordinator.committed("g").len(), 2);
}

#[test]
fn transactional_offsets_wait_for_their_marker_across_restarts_and_compaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        // Compacting from the first byte: every append rewrites the log with the live state.
        let coordinator = GroupCoordinator::open_compacting_at(dir.path(), 1).expect("opens");
        assert_eq!(
            coordinator.commit_pending("g", (7, 0), -1, "", vec![("t".into(), 0, committed(5))]),
            vec![0]
        );
        assert_eq!(
            coordinator.commit_pending("h", (8, 2), -1, "", vec![("t".into(), 1, committed(9))]),
            vec![0]
        );
        assert!(coordinator.has_pending("g", "t", 0));
        assert!(
            coordinator.committed("g").is_empty(),
            "not before the marker"
        );
        // A member id that is not in the group is refused, as OffsetCommit's.
        assert_eq!(
            coordinator.commit_pending(
                "g",
                (7, 0),
                1,
                "stranger",
                vec![("t".into(), 0, committed(6))]
            ),
            vec![ErrorCode::UNKNOWN_MEMBER_ID.0]
        );
    }
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    assert!(
        coordinator.has_pending("g", "t", 0),
        "pending survives a restart"
    );
    // A marker of an older epoch than the pending offsets' leaves them.
    coordinator
        .end_transaction((8, 1), true, None)
        .expect("a stale marker");
    assert!(coordinator.has_pending("h", "t", 1));
    coordinator
        .end_transaction((7, 0), true, None)
        .expect("commit marker");
    coordinator
        .end_transaction((8, 2), false, None)
        .expect("abort marker");
    // A retried marker changes nothing.
    coordinator
        .end_transaction((7, 0), false, None)
        .expect("retried marker");
    assert_eq!(
        coordinator.committed("g").get(&("t".to_string(), 0)),
        Some(&committed(5))
    );
    assert!(
        coordinator.committed("h").is_empty(),
        "the abort dropped them"
    );
    assert!(!coordinator.has_pending("g", "t", 0) && !coordinator.has_pending("h", "t", 1));
    drop(coordinator);
    let coordinator = GroupCoordinator::open(dir.path()).expect("reopens");
    assert_eq!(
        coordinator.committed("g").len(),
        1,
        "the markers are durable"
    );
    assert!(!coordinator.has_pending("h", "t", 1));
}

/// `__consumer_offsets` as leader-written batches, kept in memory per partition: what the broker
/// appends, encoded and decoded as the broker does.
#[derive(Debug, Default)]
struct MemoryPartitions(Mutex<BTreeMap<i32, Vec<kmirror_protocol::batch::RecordBatch>>>);

impl OffsetsPartitions for MemoryPartitions {
    fn partition_of(&self, group: &str) -> Option<i32> {
        Some(crate::broker::coordinators::coordinator_partition(group, 4))
    }

    fn append(
        &self,
        partition: i32,
        records: Vec<kmirror_protocol::records::KeyValue>,
    ) -> Result<(), WriteError> {
        let bytes = kmirror_protocol::records::leader_batch(&records, 0, 0)
            .map_err(|e| WriteError::Encode(e.to_string()))?;
        let batch = kmirror_protocol::batch::RecordBatch::new(bytes).expect("a batch");
        self.0
            .lock()
            .expect("lock")
            .entry(partition)
            .or_default()
            .push(batch);
        Ok(())
    }
}

impl MemoryPartitions {
    fn records(&self, partition: i32) -> Vec<OffsetRecord> {
        self.0
            .lock()
            .expect("lock")
            .get(&partition)
            .into_iter()
            .flatten()
            .flat_map(GroupCoordinator::batch_records)
            .collect()
    }
}

#[test]
fn groups_on_partitions_are_served_once_loaded_and_a_new_leader_replays_them() {
    let topic = Arc::new(MemoryPartitions::default());
    let first = GroupCoordinator::on_partitions(topic.clone());
    let partition = crate::broker::coordinators::coordinator_partition("g", 4);
    // Not loaded: the group's writes are refused, the client looks for its coordinator again.
    assert!(!first.serves(partition));
    assert_eq!(
        first.commit("g", -1, "", vec![("t".into(), 0, committed(5))]),
        vec![ErrorCode::NOT_COORDINATOR.0]
    );
    assert!(topic.records(partition).is_empty(), "nothing written");
    first.load_partition(partition, Vec::new());
    assert!(first.serves(partition));
    assert_eq!(
        first.commit("g", -1, "", vec![("t".into(), 0, committed(5))]),
        vec![0]
    );
    assert_eq!(
        first.commit("g", -1, "", vec![("t".into(), 1, committed(9))]),
        vec![0]
    );
    // A transaction's pending offsets, then its commit marker.
    assert_eq!(
        first.commit_pending("g", (7, 0), -1, "", vec![("t".into(), 2, committed(4))]),
        vec![0]
    );
    first.end_transaction((7, 0), true, None).expect("ends");
    // The partition moves away: its groups are dropped here, their writes refused.
    first.unload_partition(partition);
    assert!(first.committed("g").is_empty());
    assert_eq!(
        first.commit("g", -1, "", vec![("t".into(), 0, committed(6))]),
        vec![ErrorCode::NOT_COORDINATOR.0]
    );
    // Another coordinator loads the partition's records: every acknowledged offset.
    let second = GroupCoordinator::on_partitions(topic.clone());
    second.load_partition(partition, topic.records(partition));
    let offsets: Vec<(i32, i64)> = second
        .committed("g")
        .into_iter()
        .map(|((_, p), c)| (p, c.offset))
        .collect();
    assert_eq!(offsets, vec![(0, 5), (1, 9), (2, 4)]);
    assert!(!second.has_pending("g", "t", 2));
    // A group of another partition is in no record of this one.
    let other = (0..100)
        .map(|i| format!("h{i}"))
        .find(|g| crate::broker::coordinators::coordinator_partition(g, 4) != partition)
        .expect("a group elsewhere");
    assert_eq!(
        second.commit(&other, -1, "", vec![("t".into(), 0, committed(1))]),
        vec![ErrorCode::NOT_COORDINATOR.0]
    );
}

#[test]
fn a_commit_on_partitions_is_seen_only_once_replicated_and_in_write_order() {
    let topic = Arc::new(MemoryPartitions::default());
    let coordinator = GroupCoordinator::on_partitions(topic.clone());
    let partition = crate::broker::coordinators::coordinator_partition("g", 4);
    coordinator.load_partition(partition, Vec::new());
    let (codes, older) =
        coordinator.commit_staged("g", -1, "", vec![("t".into(), 0, committed(5))]);
    assert_eq!(codes, vec![0]);
    let (_, newer) = coordinator.commit_staged("g", -1, "", vec![("t".into(), 0, committed(8))]);
    assert!(
        coordinator.committed("g").is_empty(),
        "written, not yet replicated: not seen"
    );
    assert_eq!(topic.records(partition).len(), 2, "both in the log");
    // The newer commit is replicated first; the older one after it does not undo it.
    coordinator.apply_staged(newer.expect("staged"));
    coordinator.apply_staged(older.expect("staged"));
    let seen: Vec<i64> = coordinator
        .committed("g")
        .values()
        .map(|c| c.offset)
        .collect();
    assert_eq!(seen, vec![8]);
    // A commit whose partition moved away before it was replicated is not applied here.
    let (_, late) = coordinator.commit_staged("g", -1, "", vec![("t".into(), 1, committed(3))]);
    coordinator.unload_partition(partition);
    coordinator.apply_staged(late.expect("staged"));
    assert!(coordinator.committed("g").is_empty());
}
