//! kmirror-actors: the KIP-1279 mirroring engine a broker embeds.
//!
//! The decisions are pure code, testable without a runtime:
//! - [`partition`]: each mirror partition's state machine (one exhaustive transition function);
//! - [`epoch`]: leader-epoch arithmetic (LME alignment, divergence, DLE >= SLE);
//! - [`liveness`]: when a supervisor restarts a partition actor, and when it gives up;
//! - [`metadata`]: how the engine reacts to metadata changes (`mirror.name`, leader epochs,
//!   deletions) of the topics it mirrors;
//! - [`coordinator`]: a `__mirror_state` shard whose state is built only by replaying records;
//! - [`host`]: the ports an embedding broker implements, and an in-memory host for tests;
//! - [`metrics`]: the catalogue of the metrics the engine records (through the `metrics` facade).
//!
//! [`actor`] runs them with actix: the mirror partition, fetcher and coordinator shard actors,
//! and the supervised partition handle (docs/design.md §11).

pub mod actor;
pub mod coordinator;
pub mod engine;
pub mod epoch;
pub mod host;
pub mod liveness;
pub mod metadata;
pub mod metrics;
pub mod partition;

pub use kmirror_protocol::state::MirrorState;
