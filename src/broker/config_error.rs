//! Why `server.properties` cannot start a broker: [`ConfigError`], shared by the broker's
//! config readers (`config.rs` and the sub-configs it reads: `network.rs`,
//! `consumer_group_config.rs`, `quorum_config.rs`), which all name the key at fault. A leaf of
//! its own, so the sub-configs need not import the reader that imports them.

use thiserror::Error;

/// Why a configuration cannot start a broker.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A required key is missing.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A value does not parse or is out of range.
    #[error("{key}={value}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    /// A line is not `key=value`.
    #[error("line {line}: expected key=value, got {text:?}")]
    Syntax { line: usize, text: String },
}

/// `key=value` cannot work, for `reason`.
pub(super) fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}
