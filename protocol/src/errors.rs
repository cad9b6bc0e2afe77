//! One table of error codes: Kafka's (through kafka-protocol's `ResponseError`, codes -1 to 133)
//! and KIP-1279's (134 to 145, docs/design.md §7), each with its name, a message and a class.
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
}

/// KIP-1279's error codes, ours until upstream assigns final numbers.
const MIRROR_ERRORS: [ErrorInfo; 12] = [
    mirror(
        134,
        "READ_ONLY_TOPIC",
        "The topic is a mirror topic and is read-only until its mirroring is stopped.",
        ErrorClass::Fatal,
    ),
    mirror(
        135,
        "INVALID_MIRROR_NAME",
        "The mirror name is not a legal topic name or ends in .paused or .removed.",
        ErrorClass::Fatal,
    ),
    mirror(
        136,
        "UNKNOWN_MIRROR",
        "No mirror has this name.",
        ErrorClass::Fatal,
    ),
    mirror(
        137,
        "TOPIC_ALREADY_IN_MIRROR",
        "The topic is already mirrored by a mirror.",
        ErrorClass::Fatal,
    ),
    mirror(
        138,
        "TOPIC_NOT_IN_MIRROR",
        "The topic is not mirrored by this mirror.",
        ErrorClass::Fatal,
    ),
    mirror(
        139,
        "MIRROR_TOPIC_ALREADY_PAUSED",
        "The mirror topic is already paused.",
        ErrorClass::Fatal,
    ),
    mirror(
        140,
        "MIRROR_TOPIC_NOT_PAUSED",
        "The mirror topic is not paused.",
        ErrorClass::Fatal,
    ),
    mirror(
        141,
        "MIRROR_TOPIC_BEING_STOPPED",
        "The mirror topic is stopping or stopped.",
        ErrorClass::Fatal,
    ),
    mirror(
        142,
        "MIRROR_NOT_EMPTY",
        "The mirror still has mirroring or paused topics.",
        ErrorClass::Fatal,
    ),
    mirror(
        143,
        "MIRROR_AUTHORIZATION_FAILED",
        "The principal is not authorized for this operation on the mirror.",
        ErrorClass::Fatal,
    ),
    mirror(
        144,
        "MIRROR_ALREADY_EXISTS",
        "A mirror with this name already exists.",
        ErrorClass::Fatal,
    ),
    mirror(
        145,
        "INVALID_MIRROR_STATES",
        "The mirror partition states changed concurrently or do not allow this change; read them again.",
        ErrorClass::Retriable,
    ),
];

const fn mirror(
    code: i16,
    name: &'static str,
    message: &'static str,
    class: ErrorClass,
) -> ErrorInfo {
    ErrorInfo {
        code,
        name,
        message,
        class,
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
    /// Success.
    pub const NONE: ErrorCode = ErrorCode(0);
    /// Produce to a mirror partition that is not STOPPED.
    pub const READ_ONLY_TOPIC: ErrorCode = ErrorCode(134);
    /// A mirror name breaks the naming rules.
    pub const INVALID_MIRROR_NAME: ErrorCode = ErrorCode(135);
    /// No mirror has the name.
    pub const UNKNOWN_MIRROR: ErrorCode = ErrorCode(136);
    /// Start on a topic another mirror already has.
    pub const TOPIC_ALREADY_IN_MIRROR: ErrorCode = ErrorCode(137);
    /// Stop, pause or resume with the wrong mirror.
    pub const TOPIC_NOT_IN_MIRROR: ErrorCode = ErrorCode(138);
    /// Pause of a paused topic.
    pub const MIRROR_TOPIC_ALREADY_PAUSED: ErrorCode = ErrorCode(139);
    /// Resume of a topic that is not paused.
    pub const MIRROR_TOPIC_NOT_PAUSED: ErrorCode = ErrorCode(140);
    /// Pause or resume of a stopping or stopped topic.
    pub const MIRROR_TOPIC_BEING_STOPPED: ErrorCode = ErrorCode(141);
    /// Delete of a mirror that still has topics.
    pub const MIRROR_NOT_EMPTY: ErrorCode = ErrorCode(142);
    /// ACLs deny the operation on the mirror.
    pub const MIRROR_AUTHORIZATION_FAILED: ErrorCode = ErrorCode(143);
    /// Create of a mirror that exists.
    pub const MIRROR_ALREADY_EXISTS: ErrorCode = ErrorCode(144);
    /// Concurrent or illegal mirror state change.
    pub const INVALID_MIRROR_STATES: ErrorCode = ErrorCode(145);
    /// Kafka's INCONSISTENT_TOPIC_ID: Start on a topic that exists here with another id than
    /// the source topic's.
    pub const INCONSISTENT_TOPIC_ID: ErrorCode = ErrorCode(103);
    /// Kafka's INVALID_CONFIG: a config value (of a topic or a mirror) that cannot be used, or
    /// `mirror.name` named by a client.
    pub const INVALID_CONFIG: ErrorCode = ErrorCode(40);
    /// Kafka's POLICY_VIOLATION: a change a mirror topic does not take until it is stopped, or
    /// a restart of a stopped topic that would discard writes the operator did not confirm.
    pub const POLICY_VIOLATION: ErrorCode = ErrorCode(44);
    /// Kafka's KAFKA_STORAGE_ERROR: a log could not be read or written.
    pub const KAFKA_STORAGE_ERROR: ErrorCode = ErrorCode(56);
    /// Kafka's UNKNOWN_TOPIC_ID: no topic has the id.
    pub const UNKNOWN_TOPIC_ID: ErrorCode = ErrorCode(100);
    /// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: ErrorCode = ErrorCode(3);
    /// Kafka's LEADER_NOT_AVAILABLE: a leader election is under way.
    pub const LEADER_NOT_AVAILABLE: ErrorCode = ErrorCode(5);
    /// Kafka's NOT_LEADER_OR_FOLLOWER: the broker asked does not lead the partition.
    pub const NOT_LEADER_OR_FOLLOWER: ErrorCode = ErrorCode(6);
    /// Kafka's REPLICA_NOT_AVAILABLE.
    pub const REPLICA_NOT_AVAILABLE: ErrorCode = ErrorCode(9);
    /// Kafka's FENCED_LEADER_EPOCH: the leader epoch asked is older than the leader's.
    pub const FENCED_LEADER_EPOCH: ErrorCode = ErrorCode(74);
    /// Kafka's UNKNOWN_LEADER_EPOCH: the leader epoch asked is newer than the broker knows.
    pub const UNKNOWN_LEADER_EPOCH: ErrorCode = ErrorCode(75);
    /// Kafka's COORDINATOR_NOT_AVAILABLE: the coordinator (a `__mirror_state` shard) cannot
    /// answer now; ask again.
    pub const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode(15);
    /// Kafka's OPERATION_NOT_ATTEMPTED: the rest of an all-or-nothing request one part of
    /// which was refused.
    pub const OPERATION_NOT_ATTEMPTED: ErrorCode = ErrorCode(55);
    /// Kafka's CORRUPT_MESSAGE: a produced batch whose bytes do not hold what they declare
    /// (CRC, framing, codec, record fields).
    pub const CORRUPT_MESSAGE: ErrorCode = ErrorCode(2);
    /// Kafka's INVALID_RECORD: a produced batch that is well formed but breaks a rule of the
    /// log (record count, offset deltas, sequence, timestamps).
    pub const INVALID_RECORD: ErrorCode = ErrorCode(87);
    /// Kafka's INVALID_TIMESTAMP: a produced record's create time further in the past or the
    /// future than `log.message.timestamp.before.max.ms` / `after.max.ms` allow.
    pub const INVALID_TIMESTAMP: ErrorCode = ErrorCode(32);
    /// Kafka's INVALID_REQUEST: a request the broker never serves, e.g. creating or deleting
    /// an internal topic.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(42);
    /// Kafka's INVALID_SESSION_TIMEOUT: a JoinGroup session timeout outside
    /// `group.min.session.timeout.ms` .. `group.max.session.timeout.ms`.
    pub const INVALID_SESSION_TIMEOUT: ErrorCode = ErrorCode(26);

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
    fn mirror_codes_are_the_decisions_table() {
        let ours: Vec<(i16, &str)> = all()
            .into_iter()
            .filter(|i| i.code >= 134)
            .map(|i| (i.code, i.name))
            .collect();
        assert_eq!(
            ours,
            [
                (134, "READ_ONLY_TOPIC"),
                (135, "INVALID_MIRROR_NAME"),
                (136, "UNKNOWN_MIRROR"),
                (137, "TOPIC_ALREADY_IN_MIRROR"),
                (138, "TOPIC_NOT_IN_MIRROR"),
                (139, "MIRROR_TOPIC_ALREADY_PAUSED"),
                (140, "MIRROR_TOPIC_NOT_PAUSED"),
                (141, "MIRROR_TOPIC_BEING_STOPPED"),
                (142, "MIRROR_NOT_EMPTY"),
                (143, "MIRROR_AUTHORIZATION_FAILED"),
                (144, "MIRROR_ALREADY_EXISTS"),
                (145, "INVALID_MIRROR_STATES"),
            ]
        );
        assert_eq!(ErrorCode::READ_ONLY_TOPIC.name(), "READ_ONLY_TOPIC");
        assert_eq!(
            ErrorCode::INVALID_MIRROR_STATES.class(),
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
        // Codes are unique and the table is dense from -1 to 145, 0 excepted.
        let codes: Vec<i16> = all().iter().map(|i| i.code).collect();
        let expected: Vec<i16> = (-1..=145).filter(|c| *c != 0).collect();
        assert_eq!(codes, expected);
    }
}
