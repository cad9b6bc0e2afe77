use super::*;

fn settings() -> ConsumerSettings {
    ConsumerSettings {
        session_timeout: Duration::from_secs(45),
        heartbeat_interval_ms: 5_000,
        max_size: 10,
        assignors: vec![Assignor::Uniform, Assignor::Range],
    }
}

fn topics(spec: &[(&str, i32)]) -> TopicsView {
    spec.iter()
        .enumerate()
        .map(|(i, (name, count))| (name.to_string(), (format!("id-{i}"), *count, true)))
        .collect()
}

/// A client as Kafka's: it owns what its last answer assigned, and reports it.
#[derive(Debug, Clone)]
struct Client {
    id: String,
    epoch: i32,
    owned: Partitions,
}

impl Client {
    fn join(group: &mut ConsumerGroup, id: &str, view: &TopicsView, now: Instant) -> Client {
        let joining = Heartbeat {
            member_id: id.to_string(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: Some(vec!["t".to_string()]),
            owned: Some(Partitions::new()),
            ..Heartbeat::default()
        };
        Client::join_with(group, joining, view, now)
    }

    /// Joins with `joining` (epoch 0) and takes what it is answered.
    fn join_with(
        group: &mut ConsumerGroup,
        joining: Heartbeat,
        view: &TopicsView,
        now: Instant,
    ) -> Client {
        let id = joining.member_id.clone();
        let answer = group
            .heartbeat(joining, view, &settings(), now)
            .expect("joins");
        Client {
            id,
            epoch: answer.member_epoch,
            owned: answer.assignment.unwrap_or_default(),
        }
    }

    fn beat(
        &mut self,
        group: &mut ConsumerGroup,
        view: &TopicsView,
        now: Instant,
    ) -> Result<(), HeartbeatError> {
        let answer = group.heartbeat(
            Heartbeat {
                member_id: self.id.clone(),
                member_epoch: self.epoch,
                rebalance_timeout_ms: -1,
                owned: Some(self.owned.clone()),
                ..Heartbeat::default()
            },
            view,
            &settings(),
            now,
        )?;
        self.epoch = answer.member_epoch;
        if let Some(a) = answer.assignment {
            self.owned = a;
        }
        Ok(())
    }
}

/// Member `id` leaves the group (epoch -1).
fn leave(group: &mut ConsumerGroup, id: &str, view: &TopicsView, now: Instant) -> HeartbeatAnswer {
    let leaving = Heartbeat {
        member_id: id.to_string(),
        member_epoch: -1,
        ..Heartbeat::default()
    };
    group
        .heartbeat(leaving, view, &settings(), now)
        .expect("leaves")
}

fn count(p: &Partitions) -> usize {
    p.values().map(BTreeSet::len).sum()
}

/// No partition is owned by two clients (what they act on) nor held by two members.
fn assert_exclusive(group: &ConsumerGroup, clients: &[Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, ps) in &c.owned {
            for p in ps {
                assert!(
                    seen.insert((t.clone(), *p)),
                    "{t}-{p} owned by two clients: {clients:?}"
                );
            }
        }
    }
    let mut held = BTreeSet::new();
    for m in group.state.members.values() {
        for (t, ps) in union(&m.assigned, &m.pending_revocation) {
            for p in ps {
                assert!(held.insert((t.clone(), p)), "{t}-{p} held by two members");
            }
        }
    }
}

fn settle(group: &mut ConsumerGroup, clients: &mut [Client], view: &TopicsView, now: Instant) {
    for _ in 0..6 {
        for i in 0..clients.len() {
            clients[i].beat(group, view, now).expect("heartbeat");
            assert_exclusive(group, clients);
        }
    }
}

#[test]
fn members_share_the_partitions_and_take_over_those_of_one_that_leaves() {
    let view = topics(&[("t", 6)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut clients = vec![Client::join(&mut group, "a", &view, now)];
    assert_eq!(count(&clients[0].owned), 6, "a lone member gets everything");
    clients.push(Client::join(&mut group, "b", &view, now));
    assert_eq!(count(&clients[1].owned), 0, "b waits until a revokes");
    assert_exclusive(&group, &clients);
    clients.push(Client::join(&mut group, "c", &view, now));
    settle(&mut group, &mut clients, &view, now);
    for c in &clients {
        assert_eq!(count(&c.owned), 2, "{c:?}");
        assert_eq!(c.epoch, group.state.group_epoch);
    }
    assert_eq!(group.state_name(), "Stable");
    // b leaves: a and c take its partitions.
    assert_eq!(leave(&mut group, "b", &view, now).member_epoch, -1);
    clients.remove(1);
    settle(&mut group, &mut clients, &view, now);
    assert_eq!(clients.iter().map(|c| count(&c.owned)).sum::<usize>(), 6);
    assert!(clients.iter().all(|c| count(&c.owned) == 3));
}

#[test]
fn an_old_epoch_is_fenced_unless_it_is_a_retry_of_a_lost_answer() {
    let mut view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let a = Client::join(&mut group, "a", &view, now);
    // A newer epoch than the group's is fenced.
    let mut liar = a.clone();
    liar.epoch += 5;
    assert!(matches!(
        liar.beat(&mut group, &view, now),
        Err(HeartbeatError::FencedMemberEpoch { .. })
    ));
    // The topic grows: a's next answer (a new epoch, more partitions) is lost on the way.
    view.get_mut("t").expect("t").1 = 4;
    let mut moved = a.clone();
    moved.beat(&mut group, &view, now).expect("a moves on");
    assert!(moved.epoch > a.epoch);
    // a retries with its previous epoch and what it owns: accepted, same answer.
    let mut retry = a.clone();
    retry
        .beat(&mut group, &view, now)
        .expect("the retry of a lost answer");
    assert_eq!((retry.epoch, &retry.owned), (moved.epoch, &moved.owned));
    // An older epoch claiming partitions it was never given is fenced.
    let mut stale = a.clone();
    stale.owned.entry("t".into()).or_default().insert(9);
    assert!(matches!(
        stale.beat(&mut group, &view, now),
        Err(HeartbeatError::FencedMemberEpoch { .. })
    ));
    // An unknown member is told so.
    let mut ghost = a.clone();
    ghost.id = "ghost".into();
    assert!(matches!(
        ghost.beat(&mut group, &view, now),
        Err(HeartbeatError::UnknownMemberId(_))
    ));
}

#[test]
fn silent_members_expire_after_their_session_and_laggards_after_their_rebalance_timeout() {
    let view = topics(&[("t", 4)]);
    let start = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut a = Client::join(&mut group, "a", &view, start);
    let _b = Client::join(&mut group, "b", &view, start);
    // a heartbeats, b stays silent past its session.
    let later = start + Duration::from_secs(46);
    a.beat(&mut group, &view, start + Duration::from_secs(20))
        .expect("a heartbeats");
    a.beat(&mut group, &view, later).expect("a heartbeats");
    assert!(!group.state.members.contains_key("b"), "b expired");
    a.beat(&mut group, &view, later).expect("a heartbeats");
    assert_eq!(count(&a.owned), 4, "a took b's partitions");
    // c joins, a must revoke; a keeps heartbeating but never reports the revocation.
    let c = Client::join(&mut group, "c", &view, later);
    let stubborn = a.owned.clone();
    a.beat(&mut group, &view, later).expect("told to revoke");
    assert!(count(&a.owned) < 4);
    let mut keep = |at: Instant| {
        a.owned = stubborn.clone();
        a.beat(&mut group, &view, at)
    };
    keep(later + Duration::from_secs(10)).expect("still within the rebalance timeout");
    let err = keep(later + Duration::from_secs(31)).expect_err("fenced after 30 s");
    assert!(matches!(err, HeartbeatError::UnknownMemberId(_)), "{err:?}");
    let mut clients = [c];
    settle(
        &mut group,
        &mut clients,
        &view,
        later + Duration::from_secs(31),
    );
    assert_eq!(count(&clients[0].owned), 4, "c gets everything");
}

#[test]
fn new_partitions_and_regex_subscriptions_move_the_group_epoch() {
    let mut view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut a = Client::join(&mut group, "a", &view, now);
    let before = group.state.group_epoch;
    view.get_mut("t").expect("t").1 = 4;
    a.beat(&mut group, &view, now).expect("heartbeat");
    assert!(group.state.group_epoch > before);
    assert_eq!(count(&a.owned), 4);
    let answer = group
        .heartbeat(
            Heartbeat {
                member_id: "r".into(),
                member_epoch: 0,
                rebalance_timeout_ms: 1000,
                subscribed_topic_regex: Some("lo.*".into()),
                ..Heartbeat::default()
            },
            &topics(&[("t", 4), ("logs", 3), ("xlogs", 1)]),
            &settings(),
            now,
        )
        .expect("joins with a regex");
    assert_eq!(
        answer
            .assignment
            .expect("assigned")
            .keys()
            .collect::<Vec<_>>(),
        vec!["logs"]
    );
    let bad = group.heartbeat(
        Heartbeat {
            member_id: "s".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            subscribed_topic_regex: Some("(".into()),
            ..Heartbeat::default()
        },
        &view,
        &settings(),
        now,
    );
    assert!(
        matches!(bad, Err(HeartbeatError::InvalidRegularExpression(_))),
        "{bad:?}"
    );
    // The bad regex is that member's error alone: it is not in the group, the others go on.
    assert!(!group.state.members.contains_key("s"));
    a.beat(&mut group, &view, now)
        .expect("the others still heartbeat");
    // A regex no topic filter needs, beyond the cap, is refused the same way.
    let huge = group.heartbeat(
        Heartbeat {
            member_id: "h".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            subscribed_topic_regex: Some("a".repeat(MAX_REGEX_BYTES + 1)),
            ..Heartbeat::default()
        },
        &view,
        &settings(),
        now,
    );
    assert!(
        matches!(huge, Err(HeartbeatError::InvalidRegularExpression(_))),
        "{huge:?}"
    );
    // Regexes Kafka's RE2J takes compile here too (ASCII classes, topic names being ASCII).
    for pattern in [r"\w{300}", r"(\w{1,50}){1,10}", r"(?i)\w{200}x\w{200}"] {
        compile_regex(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
    }
}

#[test]
fn joins_that_break_the_protocol_are_refused_by_name() {
    let view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let join = |assignor: Option<&str>, timeout: i32| Heartbeat {
        member_id: "a".into(),
        member_epoch: 0,
        rebalance_timeout_ms: timeout,
        subscribed_topic_names: Some(vec!["t".into()]),
        server_assignor: assignor.map(str::to_string),
        ..Heartbeat::default()
    };
    let e = group
        .heartbeat(join(Some("sticky"), 1000), &view, &settings(), now)
        .expect_err("unknown assignor");
    assert_eq!(e.code(), ErrorCode::UNSUPPORTED_ASSIGNOR.0);
    let e = group
        .heartbeat(join(None, -1), &view, &settings(), now)
        .expect_err("no rebalance timeout");
    assert_eq!(e.code(), ErrorCode::INVALID_REQUEST.0);
    group
        .heartbeat(join(Some("range"), 1000), &view, &settings(), now)
        .expect("range");
    assert_eq!(group.state.assignor, "range");
    let mut small = settings();
    small.max_size = 1;
    let e = group
        .heartbeat(
            Heartbeat {
                member_id: "b".into(),
                ..join(None, 1000)
            },
            &view,
            &small,
            now,
        )
        .expect_err("full");
    assert_eq!(e.code(), ErrorCode::GROUP_MAX_SIZE_REACHED.0);
}

#[test]
fn commits_need_the_current_member_epoch() {
    let view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let a = Client::join(&mut group, "a", &view, now);
    assert_eq!(group.validate_offsets_access("a", a.epoch), Ok(()));
    assert_eq!(
        group.validate_offsets_access("a", a.epoch - 1),
        Err(ErrorCode::STALE_MEMBER_EPOCH.0)
    );
    assert_eq!(
        group.validate_offsets_access("a", a.epoch + 1),
        Err(ErrorCode::FENCED_MEMBER_EPOCH.0)
    );
    assert_eq!(
        group.validate_offsets_access("", -1),
        Err(ErrorCode::UNKNOWN_MEMBER_ID.0),
        "an admin commit waits for an empty group"
    );
}

/// Members join, leave and heartbeat in a random order: no partition ever has two owners, and
/// once everyone heartbeats the group is stable with every partition owned.
#[test]
fn random_membership_changes_never_give_a_partition_two_owners() {
    use rand::{Rng, SeedableRng};
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let view = topics(&[("t", rng.gen_range(1..12))]);
        let now = Instant::now();
        let mut group = ConsumerGroup::default();
        let mut clients: Vec<Client> = Vec::new();
        let mut next = 0;
        for _ in 0..60 {
            match rng.gen_range(0..10) {
                0..=1 if clients.len() < 6 => {
                    next += 1;
                    clients.push(Client::join(&mut group, &format!("m{next}"), &view, now));
                }
                2 if !clients.is_empty() => {
                    let gone = clients.remove(rng.gen_range(0..clients.len()));
                    leave(&mut group, &gone.id, &view, now);
                }
                _ if !clients.is_empty() => {
                    let i = rng.gen_range(0..clients.len());
                    clients[i].beat(&mut group, &view, now).expect("heartbeat");
                }
                _ => {}
            }
            assert_exclusive(&group, &clients);
        }
        settle(&mut group, &mut clients, &view, now);
        if !clients.is_empty() {
            let owned: usize = clients.iter().map(|c| count(&c.owned)).sum();
            assert_eq!(owned as i32, view["t"].1, "seed {seed}");
            assert_eq!(group.state_name(), "Stable", "seed {seed}");
        }
    }
}

/// Each member's regex is resolved with its own rights: a member that may see `t2` and one that
/// may not, heartbeating in turn, settle on one group epoch; the limited member's regex never
/// brings it `t2`.
#[test]
fn members_with_different_rights_do_not_undo_each_others_regex() {
    let now = Instant::now();
    let all = topics(&[("t1", 2), ("t2", 2)]);
    let mut limited = all.clone();
    limited.get_mut("t2").expect("t2").2 = false;
    let mut group = ConsumerGroup::default();
    let join = |group: &mut ConsumerGroup, id: &str, view: &TopicsView| {
        let joining = Heartbeat {
            member_id: id.to_string(),
            member_epoch: 0,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_regex: Some("t.*".into()),
            ..Heartbeat::default()
        };
        Client::join_with(group, joining, view, now)
    };
    let mut x = join(&mut group, "x", &all);
    let mut y = join(&mut group, "y", &limited);
    for _ in 0..4 {
        x.beat(&mut group, &all, now).expect("x");
        y.beat(&mut group, &limited, now).expect("y");
    }
    let settled = group.state.group_epoch;
    for _ in 0..4 {
        x.beat(&mut group, &all, now).expect("x");
        y.beat(&mut group, &limited, now).expect("y");
    }
    assert_eq!(group.state.group_epoch, settled, "no epoch flapping");
    assert_eq!(
        group.state.members["y"].regex_topics,
        BTreeSet::from(["t1".to_string()])
    );
    assert!(!y.owned.contains_key("t2"), "{y:?}");
}

/// Regexes are compiled for members only: a heartbeat of an unknown member is refused before
/// its regex is looked at, Unicode mode is refused, and a member's regex is forgotten with it.
#[test]
fn regexes_are_compiled_for_members_only_and_forgotten_with_them() {
    let view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let ghost = group.heartbeat(
        Heartbeat {
            member_id: "ghost".into(),
            member_epoch: 5,
            subscribed_topic_regex: Some("t.*".into()),
            ..Heartbeat::default()
        },
        &view,
        &settings(),
        now,
    );
    assert!(matches!(ghost, Err(HeartbeatError::UnknownMemberId(_))));
    assert!(group.regexes.is_empty());
    for unicode in [r"(?u)\w{90}", r"(?iu:\w)+", r"(?u)."] {
        assert!(
            matches!(
                compile_regex(unicode),
                Err(HeartbeatError::InvalidRegularExpression(_))
            ),
            "{unicode}"
        );
    }
    assert!(compile_regex(r"(?i)T.*").is_ok());
    // A regex that parses only wrapped would match every topic: refused.
    assert!(matches!(
        compile_regex("t)|(.*"),
        Err(HeartbeatError::InvalidRegularExpression(_))
    ));
    let _r = group
        .heartbeat(
            Heartbeat {
                member_id: "r".into(),
                member_epoch: 0,
                rebalance_timeout_ms: 1000,
                subscribed_topic_regex: Some("t.*".into()),
                ..Heartbeat::default()
            },
            &view,
            &settings(),
            now,
        )
        .expect("joins");
    assert_eq!(group.regexes.len(), 1);
    leave(&mut group, "r", &view, now);
    assert!(group.regexes.is_empty(), "forgotten with its member");
}

/// Hostile report 2026-12-02 finding 4: SubscribedTopicNames beyond
/// [`MAX_SUBSCRIBED_TOPIC_NAMES`] names or [`MAX_SUBSCRIBED_TOPIC_NAMES_BYTES`] bytes of names is
/// INVALID_REQUEST and the member is not stored; a subscription at the caps joins.
#[test]
fn a_subscription_beyond_the_caps_is_an_invalid_request() {
    let view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let join = |id: &str, names: Vec<String>| Heartbeat {
        member_id: id.to_string(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(names),
        owned: Some(Partitions::new()),
        ..Heartbeat::default()
    };
    let many: Vec<String> = (0..=MAX_SUBSCRIBED_TOPIC_NAMES)
        .map(|i| format!("t{i}"))
        .collect();
    let long: Vec<String> = (0..4300)
        .map(|i| format!("{i:04}{}", "x".repeat(245)))
        .collect();
    for (what, names) in [("too many names", many.clone()), ("too many bytes", long)] {
        let refused = group
            .heartbeat(join("m", names), &view, &settings(), now)
            .expect_err(what);
        assert_eq!(
            refused.code(),
            ErrorCode::INVALID_REQUEST.0,
            "{what}: {refused}"
        );
        assert!(
            refused.to_string().contains("SubscribedTopicNames"),
            "{refused}"
        );
        assert!(!group.state.members.contains_key("m"), "{what}: not stored");
    }
    let at_cap = many[..MAX_SUBSCRIBED_TOPIC_NAMES].to_vec();
    group
        .heartbeat(join("m", at_cap), &view, &settings(), now)
        .expect("the caps themselves are taken");
}

/// Hostile report 2026-12-02 item 10: MemberEpoch -2 (a static member leaving for a while)
/// without an InstanceId is INVALID_REQUEST, as Kafka answers, and so is an epoch below -2; the
/// member stays.
#[test]
fn a_static_leave_without_an_instance_id_is_an_invalid_request() {
    let view = topics(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    Client::join(&mut group, "a", &view, now);
    for epoch in [-2, -3] {
        let leaving = Heartbeat {
            member_id: "a".into(),
            member_epoch: epoch,
            ..Heartbeat::default()
        };
        let refused = group
            .heartbeat(leaving, &view, &settings(), now)
            .expect_err("refused");
        assert_eq!(
            refused.code(),
            ErrorCode::INVALID_REQUEST.0,
            "{epoch}: {refused}"
        );
        let reason = if epoch == -2 {
            "InstanceId can't be null"
        } else {
            "MemberEpoch -3 is invalid"
        };
        assert!(refused.to_string().contains(reason), "{refused}");
        assert!(
            group.state.members.contains_key("a"),
            "{epoch}: still a member"
        );
    }
}
