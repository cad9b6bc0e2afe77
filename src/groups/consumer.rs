//! KIP-848 consumer groups (`group.protocol=consumer`): the broker assigns, members reconcile.
//!
//! Lifecycle, as Apache Kafka 4 serves it through ConsumerGroupHeartbeat:
//! - A member joins with member epoch 0 and its subscription. Any change of membership,
//!   subscriptions or subscribed topics' partition counts bumps the **group epoch**; the
//!   assignor then computes the **target assignment** for that epoch (the assignment epoch).
//! - Each member moves to the target on its own heartbeats (one transition function,
//!   [`reconcile`]): partitions it must give up are first revoked (state
//!   `UnrevokedPartitions`, member epoch unchanged) until a heartbeat reports them no longer
//!   owned; then it takes the target epoch and every target partition no other member still owns
//!   (`UnreleasedPartitions` while some are held elsewhere, `Stable` once it has them all). A
//!   partition is never owned by two members at once.
//! - A member leaves with epoch -1 (-2: a static member leaving for a while), or is removed when
//!   its session (`group.consumer.session.timeout.ms`) passes without a heartbeat, or when it
//!   keeps partitions it must revoke beyond its rebalance timeout. Removal bumps the group epoch.
//! - A heartbeat with an older epoch is fenced (FENCED_MEMBER_EPOCH) unless it is the epoch just
//!   before and owns nothing outside its assignment (its last answer was lost).
//! - Requests Kafka refuses are INVALID_REQUEST: epoch -2 without an instance id, an epoch below
//!   -2, and SubscribedTopicNames beyond [`MAX_SUBSCRIBED_TOPIC_NAMES`] names or
//!   [`MAX_SUBSCRIBED_TOPIC_NAMES_BYTES`] bytes (docs/errors.md).
//!
//! The durable part ([`ConsumerGroupState`]) is written to the offsets log on every change and
//! replayed at start, so members keep their epochs and partitions across a broker restart; the
//! timers are not (they restart from the load).

use super::assignors::{Assignor, Partitions};
use kmirror_protocol::errors::ErrorCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// Where a member is on its way to the target assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    /// It has its whole target.
    Stable,
    /// It must first give up partitions.
    UnrevokedPartitions,
    /// It has the target epoch but waits for partitions other members still own.
    UnreleasedPartitions,
}

/// A member of a consumer group (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMember {
    /// The member epoch.
    pub member_epoch: i32,
    /// The epoch before the last change (a heartbeat with it may be a lost answer's retry).
    pub previous_member_epoch: i32,
    /// Where it is in reconciliation.
    pub state: MemberState,
    /// `group.instance.id` (static membership).
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// The client id.
    pub client_id: String,
    /// The client's host.
    pub client_host: String,
    /// Topics it subscribes to by name.
    pub subscribed_topic_names: BTreeSet<String>,
    /// The regular expression it subscribes with, if any.
    pub subscribed_topic_regex: Option<String>,
    /// The topics its regex matched at its last heartbeat, resolved with its own principal's
    /// rights (so members with different rights never undo each other's resolution).
    #[serde(default)]
    pub regex_topics: BTreeSet<String>,
    /// The assignor it asked for.
    pub server_assignor: Option<String>,
    /// How long it may take to revoke partitions.
    pub rebalance_timeout_ms: i32,
    /// Partitions it owns now.
    pub assigned: Partitions,
    /// Partitions it must give up.
    pub pending_revocation: Partitions,
}

/// The durable state of one consumer group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroupState {
    /// Bumped by every change of membership, subscriptions or subscribed topics.
    pub group_epoch: i32,
    /// The group epoch the target assignment was computed for.
    pub assignment_epoch: i32,
    /// Members by member id.
    pub members: BTreeMap<String, ConsumerMember>,
    /// The target assignment, by member id.
    pub target: BTreeMap<String, Partitions>,
    /// The subscribed topics (name, partition count and topic id as text) the target was
    /// computed from.
    pub topics_seen: BTreeMap<String, (String, i32)>,
    /// The assignor the target was computed with.
    pub assignor: String,
}

/// The broker's `group.consumer.*` settings a heartbeat needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSettings {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub max_size: usize,
    /// `group.consumer.assignors`: the first is the default.
    pub assignors: Vec<Assignor>,
}

impl Default for ConsumerSettings {
    /// Apache Kafka 4's defaults.
    fn default() -> ConsumerSettings {
        ConsumerSettings {
            session_timeout: Duration::from_secs(45),
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![Assignor::Uniform, Assignor::Range],
        }
    }
}

/// One ConsumerGroupHeartbeat, decoded, with topics by name.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    /// The member id (the broker's fresh candidate when the client sent none).
    pub member_id: String,
    /// 0 joins, -1 leaves, -2 leaves for a while (static), > 0 heartbeats.
    pub member_epoch: i32,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// `client.rack`, when sent.
    pub rack_id: Option<String>,
    /// -1 when unchanged.
    pub rebalance_timeout_ms: i32,
    /// The subscription, when sent.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// The regex subscription, when sent ("" clears it).
    pub subscribed_topic_regex: Option<String>,
    /// The assignor, when sent.
    pub server_assignor: Option<String>,
    /// The partitions the member owns, when sent.
    pub owned: Option<Partitions>,
    /// The client id.
    pub client_id: String,
    /// The client's host.
    pub client_host: String,
}

/// Every topic of the broker: name -> (topic id as text, partition count, whether a regex
/// subscription of the asking member may match it: not internal, and DESCRIBE allowed to its
/// principal). Named subscriptions see every topic, so members with different rights agree on
/// the group's topics.
pub type TopicsView = BTreeMap<String, (String, i32, bool)>;

/// The longest SubscribedTopicRegex taken (Kafka sets none; a regex this long is no topic
/// filter, and compiling it costs every member of the broker).
pub const MAX_REGEX_BYTES: usize = 4096;

/// The most bytes of names (their lengths summed) one member's SubscribedTopicNames may hold.
/// Kafka sets no such bound, but the member record that stores the names must fit one
/// `__consumer_offsets` batch (about 1 MiB), so a larger subscription fails there; here every
/// member's subscription is held in memory and written on each change.
pub const MAX_SUBSCRIBED_TOPIC_NAMES_BYTES: usize = 1 << 20;

/// The most names one member's SubscribedTopicNames may hold: each costs memory whatever its
/// length, and a larger set of topics is better named by SubscribedTopicRegex.
pub const MAX_SUBSCRIBED_TOPIC_NAMES: usize = 32_768;

/// Refuses a SubscribedTopicNames beyond [`MAX_SUBSCRIBED_TOPIC_NAMES`] names or
/// [`MAX_SUBSCRIBED_TOPIC_NAMES_BYTES`] bytes.
fn check_subscribed_topic_names(names: &[String]) -> Result<(), HeartbeatError> {
    let bytes: usize = names.iter().map(String::len).sum();
    if names.len() > MAX_SUBSCRIBED_TOPIC_NAMES || bytes > MAX_SUBSCRIBED_TOPIC_NAMES_BYTES {
        return Err(HeartbeatError::InvalidRequest(format!(
            "SubscribedTopicNames holds {} names of {bytes} bytes: at most \
             {MAX_SUBSCRIBED_TOPIC_NAMES} names and {MAX_SUBSCRIBED_TOPIC_NAMES_BYTES} bytes \
             are taken (SubscribedTopicRegex names many topics at once)",
            names.len()
        )));
    }
    Ok(())
}

/// The most memory one compiled subscription regex may take (its program and its lazy DFA).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a subscription regex as Kafka's RE2J matches it against whole topic names. Topic
/// names are ASCII, so classes like `\w` are ASCII too, and Unicode mode (`(?u)`) is refused:
/// smaller automata, each within [`REGEX_SIZE_LIMIT`] (a bytes regex, which may then match any
/// byte).
pub fn compile_regex(pattern: &str) -> Result<regex::bytes::Regex, HeartbeatError> {
    let invalid = |why: String| HeartbeatError::InvalidRegularExpression(why);
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(invalid(format!(
            "SubscribedTopicRegex is {} bytes, more than {MAX_REGEX_BYTES}",
            pattern.len()
        )));
    }
    if enables_unicode(pattern) {
        return Err(invalid(format!(
            "{pattern}: Unicode mode (?u) is not available: topic names are ASCII"
        )));
    }
    // It must parse on its own: wrapped unchecked, `x)|(.*` matched every topic.
    let build = |pattern: &str| {
        regex::bytes::RegexBuilder::new(pattern)
            .unicode(false)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| invalid(format!("{pattern}: {e}")))
    };
    build(pattern)?;
    build(&format!("^(?:{pattern})$"))
}

/// Whether an inline flag group (`(?u)`, `(?iu:...)`) turns Unicode mode on.
fn enables_unicode(pattern: &str) -> bool {
    pattern.match_indices("(?").any(|(at, _)| {
        pattern[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphabetic() || *c == '-')
            .take_while(|c| *c != '-')
            .any(|c| c == 'u')
    })
}

/// What a heartbeat is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    /// The member id.
    pub member_id: String,
    /// The member epoch (-1 or -2 after a leave).
    pub member_epoch: i32,
    /// The partitions the member should own now.
    pub assignment: Option<Partitions>,
}

/// Why a heartbeat was refused (Kafka's error names).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// The member is not in the group (left, expired, or never joined).
    #[error("UNKNOWN_MEMBER_ID: member {0} is not in the group")]
    UnknownMemberId(String),
    /// Its epoch is not the group's idea of it: it must rejoin with epoch 0.
    #[error("FENCED_MEMBER_EPOCH: member epoch {received} does not match {expected}")]
    FencedMemberEpoch {
        /// What it sent.
        received: i32,
        /// What the group has.
        expected: i32,
    },
    /// Another live member holds the instance id.
    #[error("UNRELEASED_INSTANCE_ID: instance id {0} is held by another member")]
    UnreleasedInstanceId(String),
    /// The assignor is not in `group.consumer.assignors`.
    #[error("UNSUPPORTED_ASSIGNOR: {0} is not one of the broker's assignors")]
    UnsupportedAssignor(String),
    /// `group.consumer.max.size` members already.
    #[error("GROUP_MAX_SIZE_REACHED: the group has {0} members")]
    GroupMaxSizeReached(usize),
    /// The request breaks the protocol.
    #[error("INVALID_REQUEST: {0}")]
    InvalidRequest(String),
    /// SubscribedTopicRegex does not compile (or is beyond [`MAX_REGEX_BYTES`]).
    #[error("INVALID_REGULAR_EXPRESSION: {0}")]
    InvalidRegularExpression(String),
}

impl HeartbeatError {
    /// Kafka's error code.
    pub fn code(&self) -> i16 {
        match self {
            HeartbeatError::UnknownMemberId(_) => ErrorCode::UNKNOWN_MEMBER_ID.0,
            HeartbeatError::FencedMemberEpoch { .. } => ErrorCode::FENCED_MEMBER_EPOCH.0,
            HeartbeatError::UnreleasedInstanceId(_) => ErrorCode::UNRELEASED_INSTANCE_ID.0,
            HeartbeatError::UnsupportedAssignor(_) => ErrorCode::UNSUPPORTED_ASSIGNOR.0,
            HeartbeatError::GroupMaxSizeReached(_) => ErrorCode::GROUP_MAX_SIZE_REACHED.0,
            HeartbeatError::InvalidRequest(_) => ErrorCode::INVALID_REQUEST.0,
            HeartbeatError::InvalidRegularExpression(_) => ErrorCode::INVALID_REGULAR_EXPRESSION.0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Timers {
    session: Instant,
    revocation: Option<Instant>,
}

/// A consumer group: its durable state, its members' timers and its compiled regexes.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    /// What is written and replayed.
    pub state: ConsumerGroupState,
    timers: HashMap<String, Timers>,
    /// The subscription regexes of current members, compiled once.
    regexes: HashMap<String, regex::bytes::Regex>,
}

fn union(a: &Partitions, b: &Partitions) -> Partitions {
    let mut out = a.clone();
    for (t, ps) in b {
        out.entry(t.clone()).or_default().extend(ps);
    }
    out
}

fn minus(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .map(|(t, ps)| {
            let rest: BTreeSet<i32> = match b.get(t) {
                Some(other) => ps.difference(other).copied().collect(),
                None => ps.clone(),
            };
            (t.clone(), rest)
        })
        .filter(|(_, ps)| !ps.is_empty())
        .collect()
}

fn intersect(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .filter_map(|(t, ps)| {
            let both: BTreeSet<i32> = ps.intersection(b.get(t)?).copied().collect();
            (!both.is_empty()).then(|| (t.clone(), both))
        })
        .collect()
}

fn is_empty(a: &Partitions) -> bool {
    a.values().all(BTreeSet::is_empty)
}

/// The next state of `member` towards `target` (at `target_epoch`), given the partitions other
/// members own and, when the heartbeat said, the partitions the member owns.
pub fn reconcile(
    member: &ConsumerMember,
    target: &Partitions,
    target_epoch: i32,
    owned_elsewhere: &Partitions,
    reported: Option<&Partitions>,
) -> ConsumerMember {
    let mut next = member.clone();
    match member.state {
        MemberState::UnrevokedPartitions => {
            let revoked =
                reported.is_some_and(|r| is_empty(&intersect(r, &member.pending_revocation)));
            if !revoked {
                return next;
            }
            next.pending_revocation = Partitions::new();
            next.state = MemberState::Stable;
            reconcile(&next, target, target_epoch, owned_elsewhere, reported)
        }
        MemberState::Stable | MemberState::UnreleasedPartitions => {
            if member.member_epoch == target_epoch && member.state == MemberState::Stable {
                return next;
            }
            let keep = intersect(&member.assigned, target);
            let revoke = minus(&member.assigned, target);
            if !is_empty(&revoke) {
                next.assigned = keep;
                next.pending_revocation = revoke;
                next.state = MemberState::UnrevokedPartitions;
                return next;
            }
            let wanted = minus(target, &member.assigned);
            let free = minus(&wanted, owned_elsewhere);
            next.assigned = union(&keep, &free);
            if next.member_epoch != target_epoch {
                next.previous_member_epoch = member.member_epoch;
                next.member_epoch = target_epoch;
            }
            next.state = if free == wanted {
                MemberState::Stable
            } else {
                MemberState::UnreleasedPartitions
            };
            next
        }
    }
}

impl ConsumerGroup {
    /// A group from its replayed state.
    pub fn from_state(state: ConsumerGroupState) -> ConsumerGroup {
        ConsumerGroup {
            state,
            timers: HashMap::new(),
            regexes: HashMap::new(),
        }
    }

    /// Kafka's name of the group's state: Empty, Assigning, Reconciling or Stable.
    pub fn state_name(&self) -> &'static str {
        let s = &self.state;
        if s.members.is_empty() {
            "Empty"
        } else if s.group_epoch > s.assignment_epoch {
            "Assigning"
        } else if s
            .members
            .values()
            .any(|m| m.member_epoch != s.assignment_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn bump(&mut self) {
        self.state.group_epoch += 1;
    }

    fn remove(&mut self, member_id: &str) {
        if self.state.members.remove(member_id).is_some() {
            self.state.target.remove(member_id);
            self.timers.remove(member_id);
            self.forget_unused_regexes();
            self.bump();
        }
    }

    /// Removes members whose session passed, or that held partitions to revoke beyond their
    /// rebalance timeout. Members replayed after a restart get fresh timers here.
    pub fn expire(&mut self, now: Instant, settings: &ConsumerSettings) {
        let mut gone = Vec::new();
        for (id, member) in &self.state.members {
            let timers = self.timers.entry(id.clone()).or_insert_with(|| Timers {
                session: now + settings.session_timeout,
                revocation: (member.state == MemberState::UnrevokedPartitions)
                    .then(|| now + rebalance_timeout(member)),
            });
            if now >= timers.session || timers.revocation.is_some_and(|d| now >= d) {
                gone.push(id.clone());
            }
        }
        for id in gone {
            tracing::info!(member = %id, "consumer group member expired");
            self.remove(&id);
        }
    }

    /// Checks an OffsetCommit's (or OffsetFetch's) member and epoch, as Kafka does for consumer
    /// groups: an admin commit (no member, negative epoch) only for an empty group; a newer
    /// epoch is fenced, an older one stale.
    pub fn validate_offsets_access(&self, member_id: &str, epoch: i32) -> Result<(), i16> {
        if epoch < 0 && member_id.is_empty() {
            return if self.state.members.is_empty() {
                Ok(())
            } else {
                Err(ErrorCode::UNKNOWN_MEMBER_ID.0)
            };
        }
        let member = self
            .state
            .members
            .get(member_id)
            .ok_or(ErrorCode::UNKNOWN_MEMBER_ID.0)?;
        match epoch.cmp(&member.member_epoch) {
            std::cmp::Ordering::Greater => Err(ErrorCode::FENCED_MEMBER_EPOCH.0),
            std::cmp::Ordering::Less => Err(ErrorCode::STALE_MEMBER_EPOCH.0),
            std::cmp::Ordering::Equal => Ok(()),
        }
    }

    /// One heartbeat: the transition of the group and of this member.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &TopicsView,
        settings: &ConsumerSettings,
        now: Instant,
    ) -> Result<HeartbeatAnswer, HeartbeatError> {
        self.expire(now, settings);
        if hb.member_epoch < -2 {
            return Err(HeartbeatError::InvalidRequest(format!(
                "MemberEpoch {} is invalid",
                hb.member_epoch
            )));
        }
        if hb.member_epoch == -2 && hb.instance_id.is_none() {
            return Err(HeartbeatError::InvalidRequest(
                "InstanceId can't be null: MemberEpoch -2 is a static member's leave".into(),
            ));
        }
        if hb.member_epoch < 0 {
            return self.leave(hb);
        }
        if let Some(assignor) = hb
            .server_assignor
            .as_ref()
            .filter(|a| !settings.assignors.iter().any(|known| known.name() == *a))
        {
            return Err(HeartbeatError::UnsupportedAssignor(assignor.clone()));
        }
        let mut subscription_changed = false;
        if hb.member_epoch != 0 {
            let member = self
                .state
                .members
                .get(&hb.member_id)
                .ok_or_else(|| HeartbeatError::UnknownMemberId(hb.member_id.clone()))?;
            let lost_answer = hb.member_epoch == member.previous_member_epoch
                && hb
                    .owned
                    .as_ref()
                    .is_some_and(|o| is_empty(&minus(o, &member.assigned)));
            if hb.member_epoch != member.member_epoch && !lost_answer {
                return Err(HeartbeatError::FencedMemberEpoch {
                    received: hb.member_epoch,
                    expected: member.member_epoch,
                });
            }
        }
        // Checked before anything changes: a subscription that cannot be used is this member's
        // error alone, and is never stored.
        if let Some(names) = &hb.subscribed_topic_names {
            check_subscribed_topic_names(names)?;
        }
        if let Some(pattern) = hb.subscribed_topic_regex.as_ref().filter(|p| !p.is_empty()) {
            self.regex(pattern)?;
        }
        if hb.member_epoch == 0 {
            self.join(&hb, settings)?;
            subscription_changed = true;
        }
        let Some(member) = self.state.members.get_mut(&hb.member_id) else {
            return Err(HeartbeatError::UnknownMemberId(hb.member_id));
        };
        member.client_id = hb.client_id.clone();
        member.client_host = hb.client_host.clone();
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id.clone();
        }
        if hb.rebalance_timeout_ms > 0 {
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(names) = &hb.subscribed_topic_names {
            let names: BTreeSet<String> = names.iter().cloned().collect();
            subscription_changed |= names != member.subscribed_topic_names;
            member.subscribed_topic_names = names;
        }
        if let Some(regex) = &hb.subscribed_topic_regex {
            let regex = (!regex.is_empty()).then(|| regex.clone());
            subscription_changed |= regex != member.subscribed_topic_regex;
            member.subscribed_topic_regex = regex;
        }
        if hb.server_assignor.is_some() && hb.server_assignor != member.server_assignor {
            member.server_assignor = hb.server_assignor.clone();
            subscription_changed = true;
        }
        let pattern = member.subscribed_topic_regex.clone();
        // (A stored pattern was checked when it was sent; one that no longer compiles
        // matches nothing.)
        let matched = match pattern.map(|p| self.regex(&p)) {
            Some(Ok(regex)) => topics
                .iter()
                .filter(|(name, (_, _, visible))| *visible && regex.is_match(name.as_bytes()))
                .map(|(name, _)| name.clone())
                .collect(),
            Some(Err(_)) | None => BTreeSet::new(),
        };
        if let Some(member) = self.state.members.get_mut(&hb.member_id) {
            subscription_changed |= matched != member.regex_topics;
            member.regex_topics = matched;
        }
        self.forget_unused_regexes();
        let topics_changed = self.refresh_topics(topics);
        if subscription_changed || topics_changed {
            self.bump();
        }
        self.refresh_target(settings);
        let member_id = hb.member_id.clone();
        let owned_elsewhere = self
            .state
            .members
            .iter()
            .filter(|(id, _)| **id != member_id)
            .fold(Partitions::new(), |acc, (_, m)| {
                union(&union(&acc, &m.assigned), &m.pending_revocation)
            });
        let target = self
            .state
            .target
            .get(&member_id)
            .cloned()
            .unwrap_or_default();
        let Some(member) = self.state.members.get_mut(&member_id) else {
            return Err(HeartbeatError::UnknownMemberId(member_id));
        };
        let next = reconcile(
            member,
            &target,
            self.state.assignment_epoch,
            &owned_elsewhere,
            hb.owned.as_ref(),
        );
        let revocation_started = next.state == MemberState::UnrevokedPartitions
            && member.state != MemberState::UnrevokedPartitions;
        *member = next;
        let answer = HeartbeatAnswer {
            member_id: member_id.clone(),
            member_epoch: member.member_epoch,
            assignment: Some(member.assigned.clone()),
        };
        let revocation = match member.state {
            MemberState::UnrevokedPartitions => Some(rebalance_timeout(member)),
            _ => None,
        };
        let timers = self.timers.entry(member_id).or_insert(Timers {
            session: now,
            revocation: None,
        });
        timers.session = now + settings.session_timeout;
        match revocation {
            None => timers.revocation = None,
            Some(timeout) if revocation_started || timers.revocation.is_none() => {
                timers.revocation = Some(now + timeout)
            }
            Some(_) => {}
        }
        Ok(answer)
    }

    fn join(&mut self, hb: &Heartbeat, settings: &ConsumerSettings) -> Result<(), HeartbeatError> {
        if hb.rebalance_timeout_ms <= 0 {
            return Err(HeartbeatError::InvalidRequest(
                "RebalanceTimeoutMs must be set when joining".into(),
            ));
        }
        if hb.subscribed_topic_names.is_none() && hb.subscribed_topic_regex.is_none() {
            return Err(HeartbeatError::InvalidRequest(
                "SubscribedTopicNames or SubscribedTopicRegex must be set when joining".into(),
            ));
        }
        if hb.owned.as_ref().is_some_and(|o| !is_empty(o)) {
            return Err(HeartbeatError::InvalidRequest(
                "TopicPartitions must be empty when joining".into(),
            ));
        }
        if let Some(instance) = &hb.instance_id {
            let holder = self
                .state
                .members
                .iter()
                .find(|(id, m)| m.instance_id.as_ref() == Some(instance) && **id != hb.member_id)
                .map(|(id, m)| (id.clone(), m.member_epoch));
            match holder {
                // It left for a while (epoch -2): the newcomer replaces it.
                Some((id, -2)) => self.remove(&id),
                Some(_) => return Err(HeartbeatError::UnreleasedInstanceId(instance.clone())),
                None => {}
            }
        }
        // A member rejoining under its id owns nothing any more: its partitions are free.
        self.remove(&hb.member_id);
        if self.state.members.len() >= settings.max_size {
            return Err(HeartbeatError::GroupMaxSizeReached(
                self.state.members.len(),
            ));
        }
        self.state.members.insert(
            hb.member_id.clone(),
            ConsumerMember {
                member_epoch: 0,
                previous_member_epoch: -1,
                state: MemberState::Stable,
                instance_id: hb.instance_id.clone(),
                rack_id: None,
                client_id: String::new(),
                client_host: String::new(),
                subscribed_topic_names: BTreeSet::new(),
                subscribed_topic_regex: None,
                regex_topics: BTreeSet::new(),
                server_assignor: None,
                rebalance_timeout_ms: hb.rebalance_timeout_ms,
                assigned: Partitions::new(),
                pending_revocation: Partitions::new(),
            },
        );
        Ok(())
    }

    fn leave(&mut self, hb: Heartbeat) -> Result<HeartbeatAnswer, HeartbeatError> {
        if !self.state.members.contains_key(&hb.member_id) {
            return Err(HeartbeatError::UnknownMemberId(hb.member_id));
        }
        let temporary = hb.member_epoch == -2
            && self
                .state
                .members
                .get(&hb.member_id)
                .is_some_and(|m| m.instance_id.is_some());
        if temporary {
            // A static member keeps its partitions for its session, for its next instance.
            if let Some(member) = self.state.members.get_mut(&hb.member_id) {
                member.previous_member_epoch = member.member_epoch;
                member.member_epoch = -2;
            }
        } else {
            self.remove(&hb.member_id);
        }
        Ok(HeartbeatAnswer {
            member_id: hb.member_id,
            member_epoch: if temporary { -2 } else { -1 },
            assignment: None,
        })
    }

    /// The compiled `pattern`, compiled now if no current member uses it yet.
    fn regex(&mut self, pattern: &str) -> Result<regex::bytes::Regex, HeartbeatError> {
        if let Some(regex) = self.regexes.get(pattern) {
            return Ok(regex.clone());
        }
        let regex = compile_regex(pattern)?;
        self.regexes.insert(pattern.to_string(), regex.clone());
        Ok(regex)
    }

    /// Keeps compiled only the regexes current members subscribe with.
    fn forget_unused_regexes(&mut self) {
        let members = &self.state.members;
        self.regexes.retain(|pattern, _| {
            members
                .values()
                .any(|m| m.subscribed_topic_regex.as_deref() == Some(pattern))
        });
    }

    /// The topics each member subscribes to: its names, and what its regex matched at its last
    /// heartbeat.
    fn subscribed_topics(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.state
            .members
            .iter()
            .map(|(id, m)| {
                let topics = m
                    .subscribed_topic_names
                    .union(&m.regex_topics)
                    .cloned()
                    .collect();
                (id.clone(), topics)
            })
            .collect()
    }

    /// Records the subscribed topics as they exist now (name, id, partition count); whether
    /// any appeared, vanished or grew since the target was computed.
    fn refresh_topics(&mut self, topics: &TopicsView) -> bool {
        let subscriptions = self.subscribed_topics();
        let seen: BTreeMap<String, (String, i32)> = subscriptions
            .values()
            .flatten()
            .filter_map(|t| {
                topics
                    .get(t)
                    .map(|(id, count, _)| (t.clone(), (id.clone(), *count)))
            })
            .collect();
        if seen == self.state.topics_seen {
            return false;
        }
        self.state.topics_seen = seen;
        true
    }

    /// Computes the target assignment when the group epoch moved past it.
    fn refresh_target(&mut self, settings: &ConsumerSettings) {
        if self.state.group_epoch <= self.state.assignment_epoch {
            return;
        }
        let subscriptions = self.subscribed_topics();
        let assignor = self.chosen_assignor(settings);
        let counts: BTreeMap<String, i32> = self
            .state
            .topics_seen
            .iter()
            .map(|(t, (_, c))| (t.clone(), *c))
            .collect();
        self.state.target = assignor.assign(&subscriptions, &counts, &self.state.target);
        self.state.assignor = assignor.name().to_string();
        self.state.assignment_epoch = self.state.group_epoch;
    }

    /// The assignor most members ask for; the broker's default when none asks.
    fn chosen_assignor(&self, settings: &ConsumerSettings) -> Assignor {
        let default = settings
            .assignors
            .first()
            .copied()
            .unwrap_or(Assignor::Uniform);
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.state.members.values() {
            if let Some(a) = &m.server_assignor {
                *votes.entry(a.as_str()).or_default() += 1;
            }
        }
        settings
            .assignors
            .iter()
            .copied()
            .max_by_key(|a| (votes.get(a.name()).copied().unwrap_or(0), *a == default))
            .unwrap_or(default)
    }
}

fn rebalance_timeout(member: &ConsumerMember) -> Duration {
    Duration::from_millis(u64::try_from(member.rebalance_timeout_ms).unwrap_or(0))
}

#[cfg(test)]
mod tests;
