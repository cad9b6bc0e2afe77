//! kmirror: the reference broker runtime that embeds the KIP-1279 mirroring engine.
//!
//! - [`storage`]: durable partition logs of raw record batches.
//! - [`controller`]: cluster metadata as a durable, replayed record log.
//! - [`acl`]: ACL bindings and the authorizer's decision.
//! - [`broker`]: the Kafka-compatible listener and its API handlers.
//! - [`groups`]: the group coordinator (consumer groups, committed offsets).
//! - [`txn`]: the transaction coordinator (transactional ids, commit and abort).
//! - [`mirror`]: the mirroring engine's ports over this broker and a source client.
//! - [`record_log`]: small durable logs of serde records, replayed at start.
//! - [`replication`]: partition replication: the leader's state machine.
//! - [`metrics`]: the broker's metrics catalogue and the Prometheus exporter.
//! - [`accept_errors`]: the back-off of the Kafka and metrics listeners' accept loops.

/// mimalloc reserves large allocations with `MAP_NORESERVE`: a decoder that reserves an
/// attacker-chosen array length up front (kafka-protocol 0.18 does) gets address space it never
/// touches and fails on the missing bytes, instead of aborting the process. Unless the kernel
/// forbids overcommit (`vm.overcommit_memory=2`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod accept_errors;
pub mod acl;
pub mod broker;
pub mod controller;
pub mod groups;
pub mod metrics;
pub mod mirror;
pub mod record_log;
pub mod replication;
pub mod storage;
pub mod txn;
