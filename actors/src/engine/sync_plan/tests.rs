use super::*;
use kmirror_protocol::acl::PatternType;

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn binding(resource_type: ResourceType, name: &str, principal: &str, op: Operation) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type: PatternType::Literal,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission: Permission::Allow,
    }
}

fn offset(topic: &str, partition: i32, offset: i64, leader_epoch: i32) -> CommittedOffset {
    CommittedOffset {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch,
        metadata: Some("m".into()),
    }
}

#[test]
fn a_changed_source_cluster_id_is_refused_with_both_ids() {
    assert!(check_source_cluster("abc", "abc").is_ok());
    let reason = check_source_cluster("abc", "xyz").expect_err("mismatch");
    assert!(reason.contains("abc") && reason.contains("xyz"), "{reason}");
}

#[test]
fn group_filters_match_whole_names_and_exclusion_wins() {
    let f = SyncFilters::from_configs(&configs(&[
        ("groups.include", "orders.*,billing"),
        ("groups.exclude", "orders-test"),
    ]))
    .expect("filters");
    assert!(f.group_included("orders-app"));
    assert!(f.group_included("billing"));
    assert!(!f.group_included("billing-2"));
    assert!(!f.group_included("orders-test"));
    let all = SyncFilters::from_configs(&BTreeMap::new()).expect("defaults");
    assert!(all.group_included("anything"));
}

/// Each entry of a pattern list compiles on its own and keeps its flags to itself. Failed
/// before: the entries were joined bare, so `(zz,payments)` compiled as `(zz|payments)`, and
/// `(?i)` in one entry made the entries after it case-insensitive.
#[test]
fn each_pattern_of_a_list_stands_alone() {
    for bad in ["(zz,payments)", "orders,x)|(.*"] {
        assert!(
            SyncFilters::from_configs(&configs(&[("topics.include", bad)])).is_err(),
            "{bad}"
        );
    }
    let f = SyncFilters::from_configs(&configs(&[("topics.include", "(?i)ORDERS,later-.*")]))
        .expect("filters");
    assert!(f.topic_auto_mirrored("orders") && f.topic_auto_mirrored("later-2"));
    assert!(!f.topic_auto_mirrored("LATER-2"));
}

#[test]
fn config_sync_copies_overrides_except_the_exclusions_and_mirror_keys() {
    let f = SyncFilters::from_configs(&BTreeMap::new()).expect("defaults");
    let current = configs(&[("mirror.name", "m"), ("retention.ms", "1000")]);
    let source = vec![
        ("retention.ms".to_string(), "5000".to_string()),
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("min.insync.replicas".to_string(), "2".to_string()),
        ("mirror.name".to_string(), "other".to_string()),
    ];
    let next = config_updates(&source, &current, &f).expect("changes");
    assert_eq!(
        next,
        configs(&[
            ("cleanup.policy", "compact"),
            ("mirror.name", "m"),
            ("retention.ms", "5000")
        ])
    );
    assert_eq!(config_updates(&source, &next, &f), None, "applied once");
    let custom = SyncFilters::from_configs(&configs(&[(
        "mirror.topic.properties.exclude",
        "retention\\..*",
    )]))
    .expect("custom");
    let next = config_updates(&source, &current, &custom).expect("changes");
    assert_eq!(next.get("retention.ms").map(String::as_str), Some("1000"));
    assert_eq!(
        next.get("min.insync.replicas").map(String::as_str),
        Some("2")
    );
}

#[test]
fn offsets_are_kept_or_clamped_into_the_destination_log() {
    let log = DestinationLog {
        log_start: 10,
        log_end: 100,
        epochs: vec![(1, 0), (4, 50)],
    };
    let logs = HashMap::from([
        (("t".to_string(), 0), log.clone()),
        (("t".to_string(), 1), log.clone()),
        (("t".to_string(), 2), log),
    ]);
    let source = vec![
        offset("t", 0, 60, 7),
        offset("t", 1, 5, 7),
        offset("t", 2, 500, 7),
        offset("not-mirrored", 0, 3, 1),
    ];
    let commits = offsets_to_commit(&source, &BTreeMap::new(), &logs);
    let got: Vec<(i32, i64, Option<i32>)> = commits
        .iter()
        .map(|(_, p, c)| (*p, c.offset, c.leader_epoch))
        .collect();
    // Within range: the source's epoch; clamped: the epoch of the destination record before.
    assert_eq!(
        got,
        vec![(0, 60, Some(7)), (1, 10, Some(1)), (2, 100, Some(4))]
    );
    let current: BTreeMap<(String, i32), GroupOffset> =
        commits.into_iter().map(|(t, p, c)| ((t, p), c)).collect();
    assert!(offsets_to_commit(&source, &current, &logs).is_empty());
}

#[test]
fn acl_sync_creates_missing_and_deletes_vanished_bindings_in_scope_only() {
    let f = SyncFilters::from_configs(&configs(&[(
        "acls.include",
        "TOPIC;orders.*, transactional_id",
    )]))
    .expect("filters");
    let read_orders = binding(ResourceType::Topic, "orders", "User:a", Operation::Read);
    let write_orders = binding(ResourceType::Topic, "orders", "User:a", Operation::Write);
    let other_topic = binding(ResourceType::Topic, "payments", "User:a", Operation::Read);
    let group = binding(ResourceType::Group, "g", "User:a", Operation::Read);
    let txn = binding(
        ResourceType::TransactionalId,
        "tx",
        "User:a",
        Operation::Write,
    );
    let mirror_acl = binding(
        ResourceType::ClusterMirror,
        "m",
        "User:ops",
        Operation::Alter,
    );
    let source = vec![read_orders.clone(), other_topic.clone(), group, txn.clone()];
    let destination = vec![
        write_orders.clone(),
        other_topic.clone(),
        mirror_acl.clone(),
        txn.clone(),
    ];
    let changes = acl_changes(&source, &destination, &f);
    assert_eq!(changes.create, vec![read_orders]);
    assert_eq!(changes.delete, vec![write_orders]);

    let everything = SyncFilters::from_configs(&BTreeMap::new()).expect("defaults");
    let changes = acl_changes(&[], &destination, &everything);
    assert!(
        !changes.delete.contains(&mirror_acl),
        "CLUSTER_MIRROR stays"
    );
    assert_eq!(changes.delete.len(), 3);
}

#[test]
fn malformed_filters_are_refused_with_their_key() {
    for (key, value) in [
        ("groups.include", "(unclosed"),
        ("acls.include", "TOPICS;x"),
        ("acls.include", "TOPIC;x;READ;ALLOW;User:a;extra"),
        ("mirror.topic.properties.exclude", "[z-a]"),
    ] {
        let e = SyncFilters::from_configs(&configs(&[(key, value)])).expect_err(value);
        assert_eq!(e.key, key);
    }
    let principal = SyncFilters::from_configs(&configs(&[("acls.include", "*;*;*;*;User:al.*")]))
        .expect("principal rule");
    assert!(principal.acl_included(&binding(
        ResourceType::Group,
        "g",
        "User:alice",
        Operation::Read
    )));
    assert!(!principal.acl_included(&binding(
        ResourceType::Group,
        "g",
        "User:bob",
        Operation::Read
    )));
}
