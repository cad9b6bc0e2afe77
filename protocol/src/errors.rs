//! One table of error codes: Kafka's (through kafka-protocol's `ResponseError`, codes -1 to 133)
//! and KIP-1279's (134 to 146, numbered as the KIP prototype numbers them: docs/wire.md), each with
//! its name, a message and a class.
//!
//! The class is decided here once, so every layer reacts the same way:
//! - [`ErrorClass::Retriable`]: try again, perhaps after refreshing metadata;
//! - [`ErrorClass::Fenced`]: this caller's epoch or identity was superseded; re-read state before
//!   anything else (a retry with the same epoch fails the same way);
//! - [`ErrorClass::Fatal`]: the request itself is wrong or not allowed; retrying cannot help.

use kafka_protocol::error::ResponseError;
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

/// How a caller should react to an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient: retry, possibly after refreshing metadata.
    Retriable,
    /// The caller's epoch or identity was superseded.
    Fenced,
    /// Retrying cannot help.
    Fatal,
}

/// A Kafka protocol error code (0 is success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub i16);

/// Name, message and class of one error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorInfo {
    /// The code.
    pub code: i16,
    /// Kafka's UPPER_SNAKE name, e.g. `NOT_LEADER_OR_FOLLOWER`.
    pub name: &'static str,
    /// A sentence for operators and logs.
    pub message: &'static str,
    /// How to react.
    pub class: ErrorClass,
    /// What an operator does about it (KIP-1279's codes; Kafka's have none here).
    pub action: Option<&'static str>,
}

/// KIP-1279's error codes, numbered and named as the KIP prototype numbers them (docs/wire.md).
const MIRROR_ERRORS: [ErrorInfo; 12] = [
    mirror(
        134,
        "READ_ONLY_TOPIC",
        "The topic is a mirror topic and is read-only until its mirroring is stopped.",
        ErrorClass::Fatal,
        "write to the source cluster, or fail the topic over first: kmirror mirrors --stop --mirror M --topics T, then wait until --describe shows it STOPPED",
    ),
    mirror(
        136,
        "CLUSTER_MIRROR_ALREADY_EXISTS",
        "A mirror with this name already exists.",
        ErrorClass::Fatal,
        "pick another name, or change the existing mirror's configs with --alter (--describe-configs shows them)",
    ),
    mirror(
        137,
        "UNKNOWN_CLUSTER_MIRROR",
        "No mirror has this name.",
        ErrorClass::Fatal,
        "check the name: kmirror mirrors --list shows the mirrors; create one with --create",
    ),
    mirror(
        138,
        "TOPIC_ALREADY_IN_CLUSTER_MIRROR",
        "The topic is already mirrored by a mirror.",
        ErrorClass::Fatal,
        "the topic belongs to another mirror: kmirror mirrors --list --json shows which; stop it there with --stop first, or leave it to that mirror",
    ),
    mirror(
        139,
        "TOPIC_NOT_IN_CLUSTER_MIRROR",
        "The topic is not mirrored by this mirror.",
        ErrorClass::Fatal,
        "check the mirror and topic names: kmirror mirrors --list --json shows each mirror's topics; --start adds a topic to a mirror",
    ),
    mirror(
        140,
        "MIRROR_TOPIC_ALREADY_PAUSED",
        "The mirror topic is already paused.",
        ErrorClass::Fatal,
        "nothing to do, the topic is paused: --resume continues it, --stop fails it over",
    ),
    mirror(
        141,
        "MIRROR_TOPIC_NOT_PAUSED",
        "The mirror topic is not paused.",
        ErrorClass::Fatal,
        "the topic is not paused, so there is nothing to resume: pause the topic first with --pause, or use --stop to fail it over",
    ),
    mirror(
        142,
        "MIRROR_TOPIC_BEING_STOPPED",
        "The mirror topic is stopping or stopped.",
        ErrorClass::Fatal,
        "the topic is stopping or stopped and no longer follows the source: --describe shows its state; --start mirrors it again",
    ),
    mirror(
        143,
        "CLUSTER_MIRROR_NOT_EMPTY",
        "The mirror still has topics that are not stopped.",
        ErrorClass::Fatal,
        "stop the mirror's remaining topics first (--stop --mirror M --topics ...), wait until --describe shows them STOPPED, then --delete; --list --json shows them",
    ),
    mirror(
        144,
        "CLUSTER_MIRROR_AUTHORIZATION_FAILED",
        "The principal is not authorized for this operation on the mirror.",
        ErrorClass::Fatal,
        "grant the principal an ACL on the mirror's CLUSTER_MIRROR resource (CREATE for --create, DELETE for --delete, ALTER to start, stop, pause or resume topics, DESCRIBE to list and describe, ALTER_CONFIGS and DESCRIBE_CONFIGS for its configs), or run as a super user",
    ),
    mirror(
        145,
        "INVALID_CLUSTER_MIRROR_STATES",
        "The mirror partition states changed concurrently or do not allow this change; read them again.",
        ErrorClass::Retriable,
        "brokers retry this themselves; if --describe --failed keeps showing it, check that every broker runs the same kmirror version",
    ),
    mirror(
        146,
        "MIRROR_TOPIC_NOT_STOPPED",
        "The mirror topic is not stopped.",
        ErrorClass::Fatal,
        "the operation needs the topic STOPPED: --stop it first and wait until --describe shows it STOPPED",
    ),
];

const fn mirror(
    code: i16,
    name: &'static str,
    message: &'static str,
    class: ErrorClass,
    action: &'static str,
) -> ErrorInfo {
    ErrorInfo {
        code,
        name,
        message,
        class,
        action: Some(action),
    }
}

/// Kafka errors that mean "your epoch or identity is stale" rather than "try again".
const FENCED: [i16; 9] = [
    47,  // INVALID_PRODUCER_EPOCH
    52,  // TRANSACTION_COORDINATOR_FENCED
    74,  // FENCED_LEADER_EPOCH
    77,  // STALE_BROKER_EPOCH
    82,  // FENCED_INSTANCE_ID
    90,  // PRODUCER_FENCED
    110, // FENCED_MEMBER_EPOCH
    124, // FENCED_STATE_EPOCH
    132, // STREAMS_TOPOLOGY_FENCED
];

impl ErrorCode {
    /// Kafka's UNKNOWN_SERVER_ERROR: an unexpected error on the broker.
    pub const UNKNOWN_SERVER_ERROR: ErrorCode = ErrorCode(-1);
    /// Success.
    pub const NONE: ErrorCode = ErrorCode(0);
    /// Kafka's OFFSET_OUT_OF_RANGE: the offset asked is outside the log.
    pub const OFFSET_OUT_OF_RANGE: ErrorCode = ErrorCode(1);
    /// Kafka's CORRUPT_MESSAGE: a produced batch whose bytes do not hold what they declare
    /// (CRC, framing, codec, record fields).
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    /// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    /// Kafka's LEADER_NOT_AVAILABLE: a leader election is under way.
    pub const LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(5);
    /// Kafka's NOT_LEADER_OR_FOLLOWER: the broker asked does not lead the partition.
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    /// Kafka's REQUEST_TIMED_OUT: no answer in time (here: no active controller); retry.
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(7);
    /// Kafka's REPLICA_NOT_AVAILABLE.
    pub const REPLICA_NOT_AVAILABLE: ErrorCode = ErrorCode(9);
    /// Kafka's MESSAGE_TOO_LARGE: a produced record batch larger than the topic's
    /// `max.message.bytes`.
    pub const MESSAGE_TOO_LARGE: ErrorCode = ErrorCode(10);
    /// Kafka's NETWORK_EXCEPTION: a connection could not be made or broke.
    pub const NETWORK_EXCEPTION: ErrorCode = ErrorCode(13);
    /// Kafka's COORDINATOR_LOAD_IN_PROGRESS: the coordinator is still loading; ask again.
    pub const COORDINATOR_LOAD_IN_PROGRESS: ErrorCode = ErrorCode(14);
    /// Kafka's COORDINATOR_NOT_AVAILABLE: the coordinator (a `__mirror_state` shard) cannot
    /// answer now; ask again.
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    /// Kafka's NOT_COORDINATOR: the broker asked is not the coordinator.
    pub const NOT_COORDINATOR: ErrorCode = ErrorCode(16);
    /// Kafka's INVALID_TOPIC_EXCEPTION: a topic name that is not legal.
    pub const INVALID_TOPIC_EXCEPTION: ErrorCode = ErrorCode(17);
    /// Kafka's NOT_ENOUGH_REPLICAS: an acks=all produce refused before the append, the ISR
    /// being below `min.insync.replicas`.
    pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode(19);
    /// Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND: an acks=all produce appended by the leader
    /// while the ISR shrank below `min.insync.replicas` before it was replicated.
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode = ErrorCode(20);
    /// Kafka's ILLEGAL_GENERATION: the member is not in the group's current generation.
    pub const ILLEGAL_GENERATION: ErrorCode = ErrorCode(22);
    /// Kafka's INCONSISTENT_GROUP_PROTOCOL: no protocol in common, or another protocol type.
    pub const INCONSISTENT_GROUP_PROTOCOL: ErrorCode = ErrorCode(23);
    /// Kafka's UNKNOWN_MEMBER_ID: the group does not know the member id.
    pub const UNKNOWN_MEMBER_ID: ErrorCode = ErrorCode(25);
    /// Kafka's INVALID_SESSION_TIMEOUT: a JoinGroup session timeout outside
    /// `group.min.session.timeout.ms` .. `group.max.session.timeout.ms`.
    pub const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode(26);
    /// Kafka's REBALANCE_IN_PROGRESS: the group is rebalancing: rejoin.
    pub const REBALANCE_IN_PROGRESS: ErrorCode = ErrorCode(27);
    /// Kafka's TOPIC_AUTHORIZATION_FAILED: ACLs deny the operation on the topic.
    pub const TOPIC_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(29);
    /// Kafka's GROUP_AUTHORIZATION_FAILED: ACLs deny the operation on the group.
    pub const GROUP_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(30);
    /// Kafka's CLUSTER_AUTHORIZATION_FAILED: ACLs deny the operation on the cluster.
    pub const CLUSTER_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(31);
    /// Kafka's INVALID_TIMESTAMP: a produced record's create time further in the past or the
    /// future than `log.message.timestamp.before.max.ms` / `after.max.ms` allow.
    pub const INVALID_TIMESTAMP: ErrorCode = ErrorCode(32);
    /// Kafka's UNSUPPORTED_VERSION: an API version the broker does not serve.
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(35);
    /// Kafka's TOPIC_ALREADY_EXISTS: create of a topic that exists.
    pub const TOPIC_ALREADY_EXISTS: ErrorCode = ErrorCode(36);
    /// Kafka's INVALID_PARTITIONS: a partition count that cannot be used.
    pub const INVALID_PARTITIONS: ErrorCode = ErrorCode(37);
    /// Kafka's INVALID_REPLICATION_FACTOR: a topic asking for more replicas than there are
    /// live brokers, or for fewer than one.
    pub const INVALID_REPLICATION_FACTOR: ErrorCode = ErrorCode(38);
    /// Kafka's INVALID_CONFIG: a config value (of a topic or a mirror) that cannot be used, or
    /// `mirror.name` named by a client.
    pub const INVALID_CONFIG: ErrorCode = ErrorCode(40);
    /// Kafka's NOT_CONTROLLER: the node is not (or no longer) the active controller, or is
    /// behind it.
    pub const NOT_CONTROLLER: ErrorCode = ErrorCode(41);
    /// Kafka's INVALID_REQUEST: a request the broker never serves, e.g. creating or deleting
    /// an internal topic.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    /// Kafka's POLICY_VIOLATION: a change a mirror topic does not take until it is stopped, or
    /// a restart of a stopped topic that would discard writes the operator did not confirm.
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    /// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER: a produced batch's sequence is not the next one.
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: ErrorCode = ErrorCode(45);
    /// Kafka's INVALID_PRODUCER_EPOCH: the producer epoch is older than the producer's.
    pub const INVALID_PRODUCER_EPOCH: ErrorCode = ErrorCode(47);
    /// Kafka's INVALID_TXN_STATE: the request does not fit the transaction's state.
    pub const INVALID_TXN_STATE: ErrorCode = ErrorCode(48);
    /// Kafka's INVALID_PRODUCER_ID_MAPPING: not the transactional id's producer id.
    pub const INVALID_PRODUCER_ID_MAPPING: ErrorCode = ErrorCode(49);
    /// Kafka's INVALID_TRANSACTION_TIMEOUT: a transaction timeout out of range.
    pub const INVALID_TRANSACTION_TIMEOUT: ErrorCode = ErrorCode(50);
    /// Kafka's CONCURRENT_TRANSACTIONS: the previous transaction is still completing; retry.
    pub const CONCURRENT_TRANSACTIONS: ErrorCode = ErrorCode(51);
    /// Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ACLs deny the transactional id.
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(53);
    /// Kafka's SECURITY_DISABLED: a security feature that is not enabled.
    pub const SECURITY_DISABLED: ErrorCode = ErrorCode(54);
    /// Kafka's OPERATION_NOT_ATTEMPTED: the rest of an all-or-nothing request one part of
    /// which was refused.
    pub const OPERATION_NOT_ATTEMPTED: ErrorCode = ErrorCode(55);
    /// Kafka's KAFKA_STORAGE_ERROR: a log could not be read or written.
    pub const KAFKA_STORAGE_ERROR: ErrorCode = ErrorCode(56);
    /// Kafka's SASL_AUTHENTICATION_FAILED: the SASL credentials were refused.
    pub const SASL_AUTHENTICATION_FAILED: ErrorCode = ErrorCode(58);
    /// Kafka's NON_EMPTY_GROUP: delete of a group that still has members.
    pub const NON_EMPTY_GROUP: ErrorCode = ErrorCode(68);
    /// Kafka's GROUP_ID_NOT_FOUND: no group has the id.
    pub const GROUP_ID_NOT_FOUND: ErrorCode = ErrorCode(69);
    /// Kafka's FETCH_SESSION_ID_NOT_FOUND: the broker does not know the fetch session.
    pub const FETCH_SESSION_ID_NOT_FOUND: ErrorCode = ErrorCode(70);
    /// Kafka's INVALID_FETCH_SESSION_EPOCH: the fetch session epoch is not the next one.
    pub const INVALID_FETCH_SESSION_EPOCH: ErrorCode = ErrorCode(71);
    /// Kafka's FENCED_LEADER_EPOCH: the leader epoch asked is older than the leader's.
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    /// Kafka's UNKNOWN_LEADER_EPOCH: the leader epoch asked is newer than the broker knows.
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    /// Kafka's STALE_BROKER_EPOCH: a broker epoch older than the broker's registration.
    pub const STALE_BROKER_EPOCH: ErrorCode = ErrorCode(77);
    /// Kafka's OFFSET_NOT_AVAILABLE: the offset asked is not there yet (a log whose end moved:
    /// ask again from where it is now).
    pub const OFFSET_NOT_AVAILABLE: ErrorCode = ErrorCode(78);
    /// Kafka's MEMBER_ID_REQUIRED: JoinGroup v4+: rejoin with the member id in the answer.
    pub const MEMBER_ID_REQUIRED: ErrorCode = ErrorCode(79);
    /// Kafka's PREFERRED_LEADER_NOT_AVAILABLE: a preferred election whose preferred replica is
    /// not in the ISR or not live.
    pub const PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(80);
    /// Kafka's GROUP_MAX_SIZE_REACHED: the group has as many members as it may.
    pub const GROUP_MAX_SIZE_REACHED: ErrorCode = ErrorCode(81);
    /// Kafka's ELIGIBLE_LEADERS_NOT_AVAILABLE: an unclean election with no live replica.
    pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: ErrorCode = ErrorCode(83);
    /// Kafka's ELECTION_NOT_NEEDED: the partition already has the leader the election asks for.
    pub const ELECTION_NOT_NEEDED: ErrorCode = ErrorCode(84);
    /// Kafka's INVALID_RECORD: a produced batch that is well formed but breaks a rule of the
    /// log (record count, offset deltas, sequence, timestamps).
    pub const INVALID_RECORD: ErrorCode = ErrorCode(87);
    /// Kafka's UNSTABLE_OFFSET_COMMIT: a transaction's offsets for the partition are pending.
    pub const UNSTABLE_OFFSET_COMMIT: ErrorCode = ErrorCode(88);
    /// Kafka's PRODUCER_FENCED: a newer producer has the transactional id.
    pub const PRODUCER_FENCED: ErrorCode = ErrorCode(90);
    /// Kafka's INVALID_UPDATE_VERSION: an AlterPartition made from an older partition epoch.
    pub const INVALID_UPDATE_VERSION: ErrorCode = ErrorCode(95);
    /// Kafka's UNKNOWN_TOPIC_ID: no topic has the id.
    pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode(100);
    /// Kafka's INCONSISTENT_TOPIC_ID: Start on a topic that exists here with another id than
    /// the source topic's.
    pub const INCONSISTENT_TOPIC_ID: ErrorCode = ErrorCode(103);
    /// Kafka's INELIGIBLE_REPLICA: an ISR member proposed that is fenced, shutting down or
    /// restarted since.
    pub const INELIGIBLE_REPLICA: ErrorCode = ErrorCode(107);
    /// Kafka's FENCED_MEMBER_EPOCH: the member epoch is not the group's: rejoin with epoch 0.
    pub const FENCED_MEMBER_EPOCH: ErrorCode = ErrorCode(110);
    /// Kafka's UNRELEASED_INSTANCE_ID: another live member holds the group instance id.
    pub const UNRELEASED_INSTANCE_ID: ErrorCode = ErrorCode(111);
    /// Kafka's UNSUPPORTED_ASSIGNOR: an assignor the broker does not offer.
    pub const UNSUPPORTED_ASSIGNOR: ErrorCode = ErrorCode(112);
    /// Kafka's STALE_MEMBER_EPOCH: the member epoch is older than the member's.
    pub const STALE_MEMBER_EPOCH: ErrorCode = ErrorCode(113);
    /// Kafka's INVALID_REGULAR_EXPRESSION: a subscription regex that does not compile.
    pub const INVALID_REGULAR_EXPRESSION: ErrorCode = ErrorCode(128);
    /// Produce to a mirror partition that is not STOPPED.
    pub const READ_ONLY_TOPIC: ErrorCode = ErrorCode(134);
    /// No mirror has the name.
    pub const UNKNOWN_CLUSTER_MIRROR: ErrorCode = ErrorCode(137);
    /// Start on a topic another mirror already has.
    pub const TOPIC_ALREADY_IN_CLUSTER_MIRROR: ErrorCode = ErrorCode(138);
    /// Stop, pause or resume with the wrong mirror.
    pub const TOPIC_NOT_IN_CLUSTER_MIRROR: ErrorCode = ErrorCode(139);
    /// Pause of a paused topic.
    pub const MIRROR_TOPIC_ALREADY_PAUSED: ErrorCode = ErrorCode(140);
    /// Resume of a topic that is not paused.
    pub const MIRROR_TOPIC_NOT_PAUSED: ErrorCode = ErrorCode(141);
    /// Pause or resume of a stopping or stopped topic.
    pub const MIRROR_TOPIC_BEING_STOPPED: ErrorCode = ErrorCode(142);
    /// Delete of a mirror that still has topics that are not stopped.
    pub const CLUSTER_MIRROR_NOT_EMPTY: ErrorCode = ErrorCode(143);
    /// ACLs deny the operation on the mirror.
    pub const CLUSTER_MIRROR_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(144);
    /// Create of a mirror that exists.
    pub const CLUSTER_MIRROR_ALREADY_EXISTS: ErrorCode = ErrorCode(136);
    /// Concurrent or illegal mirror state change.
    pub const INVALID_CLUSTER_MIRROR_STATES: ErrorCode = ErrorCode(145);
    /// An operation that needs a stopped topic, on one that is not.
    pub const MIRROR_TOPIC_NOT_STOPPED: ErrorCode = ErrorCode(146);

    /// Whether the code means success.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// The table entry, or `None` for success and for codes neither Kafka nor KIP-1279 define.
    pub fn info(self) -> Option<&'static ErrorInfo> {
        table().get(&self.0)
    }

    /// Kafka's name for the code; `NONE` for 0, `UNKNOWN_ERROR_CODE` for an undefined one.
    pub fn name(self) -> &'static str {
        match self.info() {
            Some(info) => info.name,
            None if self.is_ok() => "NONE",
            None => "UNKNOWN_ERROR_CODE",
        }
    }

    /// What an operator does about it, where the table says (every KIP-1279 code).
    pub fn action(self) -> Option<&'static str> {
        self.info().and_then(|info| info.action)
    }

    /// How to react; undefined codes are fatal (as Kafka's clients treat them), success is `None`.
    pub fn class(self) -> Option<ErrorClass> {
        match self.info() {
            Some(info) => Some(info.class),
            None if self.is_ok() => None,
            None => Some(ErrorClass::Fatal),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(info) => write!(f, "{} ({}): {}", info.name, info.code, info.message),
            None => write!(f, "{} ({})", self.name(), self.0),
        }
    }
}

impl From<ResponseError> for ErrorCode {
    fn from(e: ResponseError) -> Self {
        ErrorCode(e.code())
    }
}

/// kafka-protocol names its variants in CamelCase; Kafka's names are UPPER_SNAKE.
fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Kafka codes run from -1 to 133 in kafka-protocol 0.18; codes it does not know are `Unknown`.
fn kafka_info(code: i16) -> Option<ErrorInfo> {
    let error = ResponseError::try_from_code(code)?;
    if matches!(error, ResponseError::Unknown(_)) {
        return None;
    }
    let name: &'static str = Box::leak(upper_snake(&error.to_string()).into_boxed_str());
    // kafka-protocol keeps Kafka's descriptions in its docs only; say what the name says.
    let message: &'static str = Box::leak(name.to_lowercase().replace('_', " ").into_boxed_str());
    let class = if FENCED.contains(&code) {
        ErrorClass::Fenced
    } else if error.is_retriable() {
        ErrorClass::Retriable
    } else {
        ErrorClass::Fatal
    };
    Some(ErrorInfo {
        code,
        name,
        message,
        class,
        action: None,
    })
}

/// The whole table, built once (the leaked strings live as long as the table: the process).
fn table() -> &'static HashMap<i16, ErrorInfo> {
    static TABLE: OnceLock<HashMap<i16, ErrorInfo>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table: HashMap<i16, ErrorInfo> = (-1..134)
            .filter_map(kafka_info)
            .map(|i| (i.code, i))
            .collect();
        table.extend(MIRROR_ERRORS.iter().map(|i| (i.code, *i)));
        table
    })
}

/// Every defined error code, ascending.
pub fn all() -> Vec<&'static ErrorInfo> {
    let mut all: Vec<&'static ErrorInfo> = table().values().collect();
    all.sort_by_key(|i| i.code);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_codes_carry_kafka_names_and_classes() {
        let unknown_topic = ErrorCode(3).info().expect("defined");
        assert_eq!(unknown_topic.name, "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(unknown_topic.class, ErrorClass::Retriable);
        assert_eq!(ErrorCode(6).name(), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(ErrorCode(74).name(), "FENCED_LEADER_EPOCH");
        assert_eq!(ErrorCode(74).class(), Some(ErrorClass::Fenced));
        assert_eq!(ErrorCode(35).name(), "UNSUPPORTED_VERSION");
        assert_eq!(ErrorCode(35).class(), Some(ErrorClass::Fatal));
        assert_eq!(ErrorCode(14).name(), "COORDINATOR_LOAD_IN_PROGRESS");
        assert_eq!(ErrorCode(-1).name(), "UNKNOWN_SERVER_ERROR");
        assert_eq!(ErrorCode(133).name(), "SHARE_SESSION_LIMIT_REACHED");
        assert_eq!(
            ErrorCode::from(ResponseError::OffsetOutOfRange),
            ErrorCode(1)
        );
        for code in FENCED {
            assert_eq!(ErrorCode(code).class(), Some(ErrorClass::Fenced), "{code}");
        }
    }

    #[test]
    fn named_codes_carry_the_tables_names() {
        macro_rules! named {
            ($($name:ident),* $(,)?) => {
                $(assert_eq!(ErrorCode::$name.name(), stringify!($name));)*
            };
        }
        named!(
            PREFERRED_LEADER_NOT_AVAILABLE,
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            ELECTION_NOT_NEEDED,
            UNKNOWN_SERVER_ERROR,
            NONE,
            OFFSET_OUT_OF_RANGE,
            CORRUPT_MESSAGE,
            UNKNOWN_TOPIC_OR_PARTITION,
            LEADER_NOT_AVAILABLE,
            NOT_LEADER_OR_FOLLOWER,
            REQUEST_TIMED_OUT,
            REPLICA_NOT_AVAILABLE,
            NETWORK_EXCEPTION,
            COORDINATOR_LOAD_IN_PROGRESS,
            COORDINATOR_NOT_AVAILABLE,
            NOT_COORDINATOR,
            INVALID_TOPIC_EXCEPTION,
            NOT_ENOUGH_REPLICAS,
            NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            ILLEGAL_GENERATION,
            INCONSISTENT_GROUP_PROTOCOL,
            UNKNOWN_MEMBER_ID,
            INVALID_SESSION_TIMEOUT,
            REBALANCE_IN_PROGRESS,
            TOPIC_AUTHORIZATION_FAILED,
            GROUP_AUTHORIZATION_FAILED,
            CLUSTER_AUTHORIZATION_FAILED,
            INVALID_TIMESTAMP,
            UNSUPPORTED_VERSION,
            TOPIC_ALREADY_EXISTS,
            INVALID_PARTITIONS,
            INVALID_CONFIG,
            NOT_CONTROLLER,
            INVALID_REQUEST,
            POLICY_VIOLATION,
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            INVALID_PRODUCER_EPOCH,
            INVALID_TXN_STATE,
            INVALID_PRODUCER_ID_MAPPING,
            INVALID_TRANSACTION_TIMEOUT,
            CONCURRENT_TRANSACTIONS,
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            SECURITY_DISABLED,
            OPERATION_NOT_ATTEMPTED,
            KAFKA_STORAGE_ERROR,
            SASL_AUTHENTICATION_FAILED,
            NON_EMPTY_GROUP,
            GROUP_ID_NOT_FOUND,
            FETCH_SESSION_ID_NOT_FOUND,
            INVALID_FETCH_SESSION_EPOCH,
            FENCED_LEADER_EPOCH,
            UNKNOWN_LEADER_EPOCH,
            STALE_BROKER_EPOCH,
            MEMBER_ID_REQUIRED,
            GROUP_MAX_SIZE_REACHED,
            INVALID_RECORD,
            UNSTABLE_OFFSET_COMMIT,
            PRODUCER_FENCED,
            INVALID_UPDATE_VERSION,
            UNKNOWN_TOPIC_ID,
            INCONSISTENT_TOPIC_ID,
            INELIGIBLE_REPLICA,
            FENCED_MEMBER_EPOCH,
            UNRELEASED_INSTANCE_ID,
            UNSUPPORTED_ASSIGNOR,
            STALE_MEMBER_EPOCH,
            INVALID_REGULAR_EXPRESSION,
            READ_ONLY_TOPIC,
            UNKNOWN_CLUSTER_MIRROR,
            TOPIC_ALREADY_IN_CLUSTER_MIRROR,
            TOPIC_NOT_IN_CLUSTER_MIRROR,
            MIRROR_TOPIC_ALREADY_PAUSED,
            MIRROR_TOPIC_NOT_PAUSED,
            MIRROR_TOPIC_BEING_STOPPED,
            CLUSTER_MIRROR_NOT_EMPTY,
            CLUSTER_MIRROR_AUTHORIZATION_FAILED,
            CLUSTER_MIRROR_ALREADY_EXISTS,
            INVALID_CLUSTER_MIRROR_STATES,
            MIRROR_TOPIC_NOT_STOPPED,
        );
    }

    #[test]
    fn mirror_codes_are_the_prototypes() {
        let ours: Vec<(i16, &str)> = all()
            .into_iter()
            .filter(|i| i.code >= 134)
            .map(|i| (i.code, i.name))
            .collect();
        assert_eq!(
            ours,
            [
                (134, "READ_ONLY_TOPIC"),
                (136, "CLUSTER_MIRROR_ALREADY_EXISTS"),
                (137, "UNKNOWN_CLUSTER_MIRROR"),
                (138, "TOPIC_ALREADY_IN_CLUSTER_MIRROR"),
                (139, "TOPIC_NOT_IN_CLUSTER_MIRROR"),
                (140, "MIRROR_TOPIC_ALREADY_PAUSED"),
                (141, "MIRROR_TOPIC_NOT_PAUSED"),
                (142, "MIRROR_TOPIC_BEING_STOPPED"),
                (143, "CLUSTER_MIRROR_NOT_EMPTY"),
                (144, "CLUSTER_MIRROR_AUTHORIZATION_FAILED"),
                (145, "INVALID_CLUSTER_MIRROR_STATES"),
                (146, "MIRROR_TOPIC_NOT_STOPPED"),
            ]
        );
        assert_eq!(ErrorCode::READ_ONLY_TOPIC.name(), "READ_ONLY_TOPIC");
        for info in MIRROR_ERRORS {
            let action = ErrorCode(info.code).action().unwrap_or_default();
            assert!(
                action.len() > 20,
                "{} says what to do: {action:?}",
                info.name
            );
        }
        assert_eq!(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.action(), None);
        assert_eq!(
            ErrorCode::INVALID_CLUSTER_MIRROR_STATES.class(),
            Some(ErrorClass::Retriable)
        );
    }

    #[test]
    fn success_and_undefined_codes() {
        assert!(ErrorCode::NONE.is_ok());
        assert_eq!(ErrorCode::NONE.name(), "NONE");
        assert_eq!(ErrorCode::NONE.class(), None);
        assert_eq!(ErrorCode(999).name(), "UNKNOWN_ERROR_CODE");
        assert_eq!(ErrorCode(999).class(), Some(ErrorClass::Fatal));
        assert_eq!(
            ErrorCode(134).to_string(),
            "READ_ONLY_TOPIC (134): The topic is a mirror topic and is read-only until its mirroring is stopped."
        );
        // Codes are unique and the table is dense from -1 to 146, 0 and 135 (which the KIP
        // prototype leaves unassigned) excepted.
        let codes: Vec<i16> = all().iter().map(|i| i.code).collect();
        let expected: Vec<i16> = (-1..=146).filter(|c| *c != 0 && *c != 135).collect();
        assert_eq!(codes, expected);
    }
}
