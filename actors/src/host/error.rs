//! The host interface's one error: Kafka's error code for what the host could not do, and why.
//! The code's class (from the protocol's one error table) says whether trying again can help,
//! so a host never decides the engine's retries: a log not open here is
//! NOT_LEADER_OR_FOLLOWER (retriable), a failing disk KAFKA_STORAGE_ERROR (retriable), a batch
//! the log refuses INVALID_RECORD (fatal), a metadata change the controller refuses its own
//! code (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, ...).
//!
//! The engine turns it into the partition's [`Cause`] where a partition's work failed (a
//! retriable code keeps the partition in its state, any other fails it) and into a
//! `MirrorError` with the same code where a request did.

use crate::partition::Cause;
use kmirror_protocol::errors::{ErrorClass, ErrorCode};

/// What the host could not do: Kafka's error code and, for operators, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HostError {
    /// Kafka's error code; its class says whether trying again can help.
    pub code: ErrorCode,
    /// For the operator.
    pub message: String,
}

impl HostError {
    /// `code`, because of `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        HostError {
            code,
            message: message.into(),
        }
    }

    /// The partition is not open on this broker (not led here, or its log not open yet).
    pub fn not_here(topic: &str, partition: i32) -> Self {
        HostError::new(
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            format!(
                "{topic}-{partition} has no open log on this broker (it is led elsewhere, or its \
                 log could not be opened: the broker's log says why)"
            ),
        )
    }

    /// Whether trying again later can help (the code's class is retriable).
    pub fn retryable(&self) -> bool {
        self.code.class() == Some(ErrorClass::Retriable)
    }
}

impl From<HostError> for Cause {
    fn from(e: HostError) -> Cause {
        if e.retryable() {
            Cause::retryable(e.message)
        } else {
            Cause::fatal(e.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_decides_whether_a_partition_retries() {
        let table = [
            (ErrorCode::NOT_LEADER_OR_FOLLOWER, true),
            (ErrorCode::KAFKA_STORAGE_ERROR, true),
            (ErrorCode::REQUEST_TIMED_OUT, true),
            (ErrorCode::OFFSET_NOT_AVAILABLE, true),
            (ErrorCode::COORDINATOR_NOT_AVAILABLE, true),
            (ErrorCode::INVALID_RECORD, false),
            (ErrorCode::TOPIC_ALREADY_EXISTS, false),
        ];
        for (code, retryable) in table {
            let cause = Cause::from(HostError::new(code, "why"));
            assert_eq!(cause.retryable, retryable, "{code}");
            assert_eq!(cause.message, "why");
        }
    }
}
