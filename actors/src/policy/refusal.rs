//! Why a mirror request, or one topic of it, was refused: a Kafka error code from the one table
//! (`kmirror_protocol::errors`) and a message for the operator.

use crate::MirrorState;
use crate::partition::Rejection;
use kmirror_protocol::errors::ErrorCode;

/// Why a mirror request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct MirrorError {
    /// The KIP-1279 (or Kafka) error code.
    pub code: ErrorCode,
    /// For the operator.
    pub message: String,
}

impl MirrorError {
    /// A refusal with `code`, explained by `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        MirrorError {
            code,
            message: message.into(),
        }
    }

    /// UNKNOWN_CLUSTER_MIRROR.
    pub fn unknown_mirror() -> Self {
        MirrorError::new(ErrorCode::UNKNOWN_CLUSTER_MIRROR, "no such mirror")
    }

    /// COORDINATOR_NOT_AVAILABLE: a host that does not run the engine (or whose engine has
    /// stopped) answers every mirror request so.
    pub fn engine_not_running() -> Self {
        MirrorError::new(
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            "the mirroring engine is not running",
        )
    }

    /// TOPIC_NOT_IN_CLUSTER_MIRROR.
    pub fn not_in_mirror() -> Self {
        MirrorError::new(
            ErrorCode::TOPIC_NOT_IN_CLUSTER_MIRROR,
            "the topic is not in the mirror",
        )
    }
}

/// A partition's refusal of a command as the request that asked it answers: a pause of a
/// partition on its way to STOPPED (or not yet started) is MIRROR_TOPIC_BEING_STOPPED, a
/// partition this broker no longer leads NOT_LEADER_OR_FOLLOWER (the client asks again).
pub fn rejection(rejected: &Rejection) -> MirrorError {
    let code = match rejected {
        Rejection::CannotPause(_) | Rejection::LeftAlone(MirrorState::Stopped) => {
            ErrorCode::MIRROR_TOPIC_BEING_STOPPED
        }
        Rejection::LeftAlone(_) => ErrorCode::INVALID_CLUSTER_MIRROR_STATES,
        Rejection::NotLeader => ErrorCode::NOT_LEADER_OR_FOLLOWER,
    };
    MirrorError::new(code, rejected.to_string())
}

/// StateValidationOffset is how the KIP prototype's brokers tell its controller at which
/// metadata offset they checked a request; admin clients send -1. kmirror's brokers forward
/// nothing of the kind, so any other value is refused rather than silently not checked.
pub fn state_validation_offset(offset: i64) -> Result<(), MirrorError> {
    if offset == -1 {
        return Ok(());
    }
    Err(MirrorError::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "StateValidationOffset {offset}: this broker validates the request itself; clients \
             send -1"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_has_its_kip_code() {
        let code = |r| rejection(&r).code;
        assert_eq!(
            code(Rejection::CannotPause(MirrorState::Stopping)),
            ErrorCode::MIRROR_TOPIC_BEING_STOPPED
        );
        assert_eq!(
            code(Rejection::NotLeader),
            ErrorCode::NOT_LEADER_OR_FOLLOWER
        );
        assert_eq!(
            code(Rejection::LeftAlone(MirrorState::Paused)),
            ErrorCode::INVALID_CLUSTER_MIRROR_STATES
        );
    }

    #[test]
    fn only_minus_one_is_a_state_validation_offset() {
        assert!(state_validation_offset(-1).is_ok());
        assert_eq!(
            state_validation_offset(7).map_err(|e| e.code),
            Err(ErrorCode::INVALID_REQUEST)
        );
    }
}
