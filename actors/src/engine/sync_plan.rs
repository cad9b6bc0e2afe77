//! What the metadata sync (docs/design.md §6) changes on the destination, decided from what it read
//! on both sides: pure functions, no I/O, so every rule is tested without a cluster.
//!
//! - [`check_source_cluster`]: the source must still be the cluster the mirror was created for;
//! - [`config_updates`]: the source topic's dynamic overrides, minus the exclusion list and
//!   `mirror.*`, set on the destination topic (set only: an override removed on the source stays);
//! - [`offsets_to_commit`]: a group's committed offsets of the mirror's active topics, the same
//!   offsets (no translation), clamped into the destination log's range, keeping the committed
//!   leader epoch unless clamped;
//! - [`SyncFilters::topic_auto_mirrored`]: whether a source topic starts mirroring by itself
//!   (`topics.include`, `topics.exclude`);
//! - [`acl_changes`]: the source bindings in `acls.include` to create, and the destination
//!   bindings in that scope that vanished from the source to delete (CLUSTER_MIRROR bindings are
//!   the destination's own and never touched).

#[cfg(test)]
mod tests;

use crate::epoch::EpochStart;
use crate::host::GroupOffset;
use kmirror_protocol::acl::{AclBinding, Operation, Permission, ResourceType};
use kmirror_protocol::client::source::CommittedOffset;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Topic configs never copied from the source (besides `mirror.*`): replication and
/// timestamp-validation settings belong to the destination cluster.
pub const DEFAULT_PROPERTIES_EXCLUDE: &[&str] = &[
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
];

/// Kafka's config source of a topic's dynamic override (DescribeConfigs).
pub const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// A mirror's sync filters, from its configs.
#[derive(Debug, Clone)]
pub struct SyncFilters {
    topics_include: Option<Regex>,
    topics_exclude: Option<Regex>,
    groups_include: Option<Regex>,
    groups_exclude: Option<Regex>,
    properties_exclude: Vec<Regex>,
    acl_rules: Vec<AclRule>,
}

/// A mirror config the sync cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {key}: {reason}")]
pub struct SyncConfigError {
    /// The config key.
    pub key: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

/// A regular expression matching whole names only.
fn whole(key: &'static str, pattern: &str) -> Result<Regex, SyncConfigError> {
    crate::policy::patterns::whole_name(pattern).map_err(|e| SyncConfigError {
        key,
        reason: e.to_string(),
    })
}

/// The comma-separated entries of a list config, trimmed, empty ones dropped.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

impl SyncFilters {
    /// The filters of a mirror (its configs under their names now, docs/mirror-configs.md):
    /// `topics.include` (none) and `topics.exclude` (`__.*`), `groups.include` (`.*`) and
    /// `groups.exclude` (none), comma-separated regular expressions matching whole names,
    /// `mirror.topic.properties.exclude` (the defaults; regular expressions, comma-separated)
    /// and `acls.include` (`*`; rules separated by commas).
    pub fn from_configs(
        configs: &BTreeMap<String, String>,
    ) -> Result<SyncFilters, SyncConfigError> {
        let get = |key: &str| configs.get(key).map(String::as_str);
        // An empty list matches nothing (not the empty name). Each entry must compile on its
        // own, and keeps its inline flags to itself: joined bare, `(?i)a|b` made `b`
        // case-insensitive too.
        let any_of = |key: &'static str, value: &str| {
            let patterns = list(value)
                .map(|p| whole(key, p).map(|_| format!("(?:{p})")))
                .collect::<Result<Vec<_>, _>>()?;
            if patterns.is_empty() {
                return Ok(None);
            }
            whole(key, &patterns.join("|")).map(Some)
        };
        let topics_include = any_of("topics.include", get("topics.include").unwrap_or(""))?;
        let topics_exclude = any_of("topics.exclude", get("topics.exclude").unwrap_or("__.*"))?;
        let groups_include = any_of("groups.include", get("groups.include").unwrap_or(".*"))?;
        let groups_exclude = any_of("groups.exclude", get("groups.exclude").unwrap_or(""))?;
        let properties_exclude = match get("mirror.topic.properties.exclude") {
            Some(value) => list(value)
                .map(|p| whole("mirror.topic.properties.exclude", p))
                .collect::<Result<_, _>>()?,
            None => DEFAULT_PROPERTIES_EXCLUDE
                .iter()
                .map(|p| whole("mirror.topic.properties.exclude", &regex::escape(p)))
                .collect::<Result<_, _>>()?,
        };
        let acl_rules = list(get("acls.include").unwrap_or("*"))
            .map(AclRule::parse)
            .collect::<Result<_, _>>()?;
        Ok(SyncFilters {
            topics_include,
            topics_exclude,
            groups_include,
            groups_exclude,
            properties_exclude,
            acl_rules,
        })
    }

    /// Whether a source topic starts mirroring by itself: `topics.include` matches it and
    /// `topics.exclude` does not (an exclusion wins; nothing is included by default).
    pub fn topic_auto_mirrored(&self, topic: &str) -> bool {
        self.topics_include
            .as_ref()
            .is_some_and(|r| r.is_match(topic))
            && !self
                .topics_exclude
                .as_ref()
                .is_some_and(|r| r.is_match(topic))
    }

    /// Whether the mirror starts topics by itself (`topics.include` is set).
    pub fn auto_mirrors(&self) -> bool {
        self.topics_include.is_some()
    }

    /// Whether a source group's offsets are synced (an exclusion wins).
    pub fn group_included(&self, group: &str) -> bool {
        self.groups_include
            .as_ref()
            .is_some_and(|r| r.is_match(group))
            && !self
                .groups_exclude
                .as_ref()
                .is_some_and(|r| r.is_match(group))
    }

    /// Whether a topic config is copied.
    pub fn property_included(&self, name: &str) -> bool {
        !name.starts_with("mirror.") && !self.properties_exclude.iter().any(|r| r.is_match(name))
    }

    /// Whether an ACL binding is in the mirror's scope.
    pub fn acl_included(&self, binding: &AclBinding) -> bool {
        binding.resource_type != ResourceType::ClusterMirror
            && self.acl_rules.iter().any(|rule| rule.matches(binding))
    }
}

/// One `mirror.acls.include` rule: `resourceType;resourceName;operation;permissionType;principal`,
/// `*` for any, trailing fields optional; the name and principal are regular expressions
/// (whole match), the enum names case-insensitive (`TOPIC`, `transactional_id`, ...).
#[derive(Debug, Clone)]
struct AclRule {
    resource_type: Option<String>,
    resource_name: Option<Regex>,
    operation: Option<String>,
    permission: Option<String>,
    principal: Option<Regex>,
}

const ACLS_INCLUDE: &str = "acls.include";

/// An enum name as a rule and Kafka spell it, compared without case and underscores.
fn enum_key(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

impl AclRule {
    fn parse(text: &str) -> Result<AclRule, SyncConfigError> {
        let fields: Vec<&str> = text.split(';').map(str::trim).collect();
        if fields.len() > 5 {
            return Err(SyncConfigError {
                key: ACLS_INCLUDE,
                reason: format!("{text:?} has more than 5 fields"),
            });
        }
        let field = |i: usize| {
            fields
                .get(i)
                .copied()
                .filter(|f| !f.is_empty() && *f != "*")
        };
        let named = |i: usize, known: &[String]| -> Result<Option<String>, SyncConfigError> {
            match field(i) {
                None => Ok(None),
                Some(name) if known.contains(&enum_key(name)) => Ok(Some(enum_key(name))),
                Some(name) => Err(SyncConfigError {
                    key: ACLS_INCLUDE,
                    reason: format!("unknown name {name:?} in {text:?}"),
                }),
            }
        };
        let regex = |i: usize| field(i).map(|p| whole(ACLS_INCLUDE, p)).transpose();
        Ok(AclRule {
            resource_type: named(0, &names(RESOURCE_TYPES))?,
            resource_name: regex(1)?,
            operation: named(2, &names(OPERATIONS))?,
            permission: named(3, &names(PERMISSIONS))?,
            principal: regex(4)?,
        })
    }

    fn matches(&self, b: &AclBinding) -> bool {
        let named = |want: &Option<String>, got: String| want.as_ref().is_none_or(|w| *w == got);
        named(
            &self.resource_type,
            enum_key(&format!("{:?}", b.resource_type)),
        ) && self
            .resource_name
            .as_ref()
            .is_none_or(|r| r.is_match(&b.resource_name))
            && named(&self.operation, enum_key(&format!("{:?}", b.operation)))
            && named(&self.permission, enum_key(&format!("{:?}", b.permission)))
            && self
                .principal
                .as_ref()
                .is_none_or(|r| r.is_match(&b.principal))
    }
}

const RESOURCE_TYPES: &[ResourceType] = &[
    ResourceType::Topic,
    ResourceType::Group,
    ResourceType::Cluster,
    ResourceType::TransactionalId,
    ResourceType::DelegationToken,
    ResourceType::User,
    ResourceType::ClusterMirror,
];
const OPERATIONS: &[Operation] = &[
    Operation::All,
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::Describe,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
    Operation::CreateTokens,
    Operation::DescribeTokens,
    Operation::TwoPhaseCommit,
];
const PERMISSIONS: &[Permission] = &[Permission::Allow, Permission::Deny];

fn names<T: std::fmt::Debug>(values: &[T]) -> Vec<String> {
    values.iter().map(|v| enum_key(&format!("{v:?}"))).collect()
}

/// Why the mirror's sync halts: the source answers with another cluster id than the mirror's
/// `mirror.source.cluster.id`.
pub fn check_source_cluster(expected: &str, found: &str) -> Result<(), String> {
    if expected == found {
        Ok(())
    } else {
        Err(format!(
            "the source cluster id is {found}, not the mirror's mirror.source.cluster.id \
             {expected}: the mirror's bootstrap.servers reach another cluster"
        ))
    }
}

/// The destination topic's configs after the sync, or None when nothing changes: the source's
/// dynamic overrides (`(name, value)`) that the filters let through, set over the current ones.
pub fn config_updates(
    source_overrides: &[(String, String)],
    current: &BTreeMap<String, String>,
    filters: &SyncFilters,
) -> Option<BTreeMap<String, String>> {
    let mut next = current.clone();
    for (name, value) in source_overrides {
        if filters.property_included(name) {
            next.insert(name.clone(), value.clone());
        }
    }
    (next != *current).then_some(next)
}

/// A destination partition's log as the offset clamp needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestinationLog {
    /// The log start offset.
    pub log_start: i64,
    /// The log end offset.
    pub log_end: i64,
    /// The leader epoch history.
    pub epochs: Vec<EpochStart>,
}

impl DestinationLog {
    /// The epoch of the record before `offset` (what a consumer commits with `offset`), if
    /// any.
    fn epoch_before(&self, offset: i64) -> Option<i32> {
        self.epochs
            .iter()
            .rev()
            .find(|(_, start)| *start < offset)
            .map(|(epoch, _)| *epoch)
    }
}

/// The commits that bring a destination group to the source group's offsets: for each source
/// offset of a partition in `logs` (the mirror's active partitions on this broker), the same
/// offset clamped into `[log_start, log_end]` (the committed epoch kept unless clamped, then the
/// destination's epoch of the record before), left out when the destination has it already.
pub fn offsets_to_commit(
    source: &[CommittedOffset],
    current: &BTreeMap<(String, i32), GroupOffset>,
    logs: &HashMap<(String, i32), DestinationLog>,
) -> Vec<(String, i32, GroupOffset)> {
    source
        .iter()
        .filter_map(|c| {
            let key = (c.topic.clone(), c.partition);
            let log = logs.get(&key)?;
            let offset = c
                .offset
                .clamp(log.log_start, log.log_end.max(log.log_start));
            let leader_epoch = if offset == c.offset {
                // Kafka's OffsetFetch answers -1 for a commit made without an epoch.
                (c.leader_epoch >= 0).then_some(c.leader_epoch)
            } else {
                log.epoch_before(offset)
            };
            let committed = GroupOffset {
                offset,
                leader_epoch,
                metadata: c.metadata.clone(),
            };
            (current.get(&key) != Some(&committed)).then_some((key.0, key.1, committed))
        })
        .collect()
}

/// ACL bindings to create on and delete from the destination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclChanges {
    /// In the source's filtered set, not on the destination.
    pub create: Vec<AclBinding>,
    /// On the destination, in the mirror's scope, gone from the source.
    pub delete: Vec<AclBinding>,
}

/// What makes the destination's bindings in the mirror's scope equal the source's.
pub fn acl_changes(
    source: &[AclBinding],
    destination: &[AclBinding],
    filters: &SyncFilters,
) -> AclChanges {
    let wanted: BTreeSet<&AclBinding> = source.iter().filter(|b| filters.acl_included(b)).collect();
    let present: BTreeSet<&AclBinding> = destination.iter().collect();
    AclChanges {
        create: wanted
            .iter()
            .filter(|b| !present.contains(*b))
            .map(|b| (*b).clone())
            .collect(),
        delete: present
            .iter()
            .filter(|b| filters.acl_included(b) && !wanted.contains(*b))
            .map(|b| (*b).clone())
            .collect(),
    }
}
