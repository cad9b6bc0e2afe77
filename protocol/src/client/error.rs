//! Errors of the source-cluster client, classified once so fetchers and the metadata manager
//! react the same way everywhere.

use crate::errors::{ErrorClass, ErrorCode};
use thiserror::Error;

/// Why a call to the source cluster failed.
#[derive(Debug, Clone, Error)]
pub enum ClientError {
    /// The configuration cannot work (bad address, unreadable trust store, unknown mechanism).
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// A connection could not be made or broke.
    #[error("connection to {broker} failed: {message}")]
    Connection { broker: String, message: String },
    /// The TLS handshake failed (untrusted certificate, wrong host name, protocol error).
    #[error("TLS handshake with {broker} failed: {message}")]
    Tls { broker: String, message: String },
    /// The broker refused the credentials.
    #[error("authentication with {broker} failed: {message}")]
    Authentication { broker: String, message: String },
    /// No answer within the request timeout.
    #[error("{api} request to {broker} timed out after {timeout_ms} ms")]
    Timeout {
        broker: String,
        api: &'static str,
        timeout_ms: u64,
    },
    /// The broker does not support any version of an API this client speaks.
    #[error("{broker} does not support {api}")]
    UnsupportedVersion { broker: String, api: &'static str },
    /// An answer could not be decoded.
    #[error("malformed {api} response from {broker}: {message}")]
    Protocol {
        broker: String,
        api: &'static str,
        message: String,
    },
    /// The broker answered with an error code.
    #[error("{api} failed: {code}")]
    Broker { api: &'static str, code: ErrorCode },
    /// The metadata does not know the topic, partition or broker.
    #[error("{0}")]
    NotFound(String),
    /// The broker's client quota held the request back: it answered nothing, asking the client
    /// to wait `throttle_ms` (a Fetch over its quota is answered empty).
    #[error("{api} throttled by the broker's quota for {throttle_ms} ms")]
    Throttled { api: &'static str, throttle_ms: i32 },
}

impl ClientError {
    /// Whether retrying (after a metadata refresh, with backoff) can help.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Connection { .. } | ClientError::Timeout { .. } => true,
            ClientError::Broker { code, .. } => code.class() != Some(ErrorClass::Fatal),
            ClientError::NotFound(_) | ClientError::Throttled { .. } => true,
            ClientError::Config(_)
            | ClientError::Tls { .. }
            | ClientError::Authentication { .. }
            | ClientError::UnsupportedVersion { .. }
            | ClientError::Protocol { .. } => false,
        }
    }
}
