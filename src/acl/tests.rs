use super::*;

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.to_string(),
        pattern_type,
        principal: principal.to_string(),
        host: "*".to_string(),
        operation,
        permission,
    }
}

fn enabled() -> AuthorizerConfig {
    AuthorizerConfig {
        enabled: true,
        super_users: vec!["User:admin".to_string()],
        allow_if_no_acls: false,
    }
}

fn session(principal: &str) -> Session {
    Session {
        principal: principal.to_string(),
        host: "10.0.0.7".to_string(),
    }
}

#[test]
fn disabled_allows_everything_and_enabled_denies_without_acls() {
    let alice = session("User:alice");
    let check = |config: &AuthorizerConfig| {
        authorize(
            config,
            &[],
            &alice,
            Operation::Write,
            ResourceType::Topic,
            "orders",
        )
    };
    assert!(check(&AuthorizerConfig::default()));
    assert!(!check(&enabled()));
    assert!(check(&AuthorizerConfig {
        allow_if_no_acls: true,
        ..enabled()
    }));
    assert!(authorize(
        &enabled(),
        &[],
        &session("User:admin"),
        Operation::Alter,
        ResourceType::Cluster,
        "kafka-cluster"
    ));
}

#[test]
fn literal_prefixed_wildcard_and_implied_operations() {
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;
    let acls = vec![
        binding(Topic, "orders", Literal, "User:alice", Write, Allow),
        binding(Topic, "logs-", Prefixed, "User:*", Read, Allow),
        binding(Group, "*", Literal, "User:alice", All, Allow),
        binding(Topic, "*", Literal, "User:bob", AlterConfigs, Allow),
    ];
    let alice = session("User:alice");
    let bob = session("User:bob");
    let can = |s: &Session, op, kind, name| authorize(&enabled(), &acls, s, op, kind, name);
    assert!(can(&alice, Write, Topic, "orders"));
    assert!(
        can(&alice, Describe, Topic, "orders"),
        "WRITE implies DESCRIBE"
    );
    assert!(!can(&alice, Read, Topic, "orders"));
    assert!(!can(&alice, Write, Topic, "orders2"), "literal is exact");
    assert!(can(&bob, Read, Topic, "logs-app"), "prefixed, User:*");
    assert!(!can(&bob, Read, Topic, "log"), "not under the prefix");
    assert!(can(&alice, Read, Group, "any-group"), "ALL on every group");
    assert!(
        can(&bob, DescribeConfigs, Topic, "x"),
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
    );
    assert!(!can(&bob, Write, Topic, "x"));
}

#[test]
fn deny_wins_and_hosts_must_match() {
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;
    let mut acls = vec![
        binding(Topic, "pay", Prefixed, "User:*", All, Allow),
        binding(Topic, "payments", Literal, "User:mallory", Write, Deny),
    ];
    let can = |acls: &[AclBinding], s: &Session, op| {
        authorize(&enabled(), acls, s, op, Topic, "payments")
    };
    assert!(can(&acls, &session("User:alice"), Write));
    assert!(!can(&acls, &session("User:mallory"), Write));
    assert!(can(&acls, &session("User:mallory"), Read));
    acls.push(AclBinding {
        host: "10.0.0.9".to_string(),
        ..binding(Topic, "payments", Literal, "User:alice", Read, Deny)
    });
    assert!(
        can(&acls, &session("User:alice"), Read),
        "a deny for another host"
    );
}

#[test]
fn filters_select_as_describe_and_delete_do() {
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;
    let literal = binding(Topic, "orders", Literal, "User:alice", Write, Allow);
    let prefixed = binding(Topic, "ord", Prefixed, "User:bob", Read, Allow);
    let wildcard = binding(Topic, "*", Literal, "User:carol", Read, Deny);
    let filter = |name: Option<&str>, pattern| AclFilter {
        resource_type: ResourceType::Any,
        resource_name: name.map(str::to_string),
        pattern_type: pattern,
        principal: None,
        host: None,
        operation: Operation::Any,
        permission: Permission::Any,
    };
    let selected = |f: &AclFilter| {
        [&literal, &prefixed, &wildcard]
            .into_iter()
            .filter(|b| f.matches(b))
            .count()
    };
    assert_eq!(selected(&filter(None, PatternType::Any)), 3);
    assert_eq!(selected(&filter(None, Literal)), 2);
    assert_eq!(selected(&filter(Some("orders"), PatternType::Any)), 1);
    assert_eq!(
        selected(&filter(Some("orders"), Match)),
        3,
        "every binding that applies to the name"
    );
    assert_eq!(selected(&filter(Some("ord"), Prefixed)), 1);
    let by_principal = AclFilter {
        principal: Some("User:bob".to_string()),
        ..filter(None, PatternType::Any)
    };
    assert_eq!(selected(&by_principal), 1);
}

#[test]
fn bindings_refuse_filter_values_and_bad_principals() {
    let ok = AclBinding::from_wire(2, "t", 3, "User:alice", "*", 4, 3).expect("valid");
    assert_eq!(ok.operation, Operation::Write);
    assert!(matches!(
        AclBinding::from_wire(1, "t", 3, "User:alice", "*", 4, 3),
        Err(AclError::InvalidCode { .. })
    ));
    assert!(matches!(
        AclBinding::from_wire(2, "t", 2, "User:alice", "*", 4, 3),
        Err(AclError::InvalidCode { .. })
    ));
    assert!(matches!(
        AclBinding::from_wire(2, "t", 3, "alice", "*", 4, 3),
        Err(AclError::InvalidPrincipal(_))
    ));
    assert!(matches!(
        AclBinding::from_wire(2, "t", 3, "User:alice", "", 4, 3),
        Err(AclError::Empty("host"))
    ));
}
