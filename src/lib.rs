//! kmirror: the reference broker runtime that embeds the KIP-1279 mirroring engine.
//!
//! - [`storage`]: durable partition logs of raw record batches.
//! - [`controller`]: cluster metadata as a durable, replayed record log.
//! - [`broker`]: the Kafka-compatible listener and its API handlers.
//! - [`groups`]: the group coordinator (consumer groups, committed offsets).
//! - [`txn`]: the transaction coordinator (transactional ids, commit and abort).
//! - [`record_log`]: small durable logs of serde records, replayed at start.

pub mod broker;
pub mod controller;
pub mod groups;
pub mod record_log;
pub mod storage;
pub mod txn;
