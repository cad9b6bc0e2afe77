//! kmirror: the reference broker runtime that embeds the KIP-1279 mirroring engine.
//!
//! - [`storage`]: durable partition logs of raw record batches.
//! - [`controller`]: cluster metadata as a durable, replayed record log.
//! - [`broker`]: the Kafka-compatible listener and its API handlers.

pub mod broker;
pub mod controller;
pub mod storage;
