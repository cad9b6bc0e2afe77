//! kmirror-actors: the KIP-1279 mirroring engine a broker embeds.
//!
//! Start from `examples/embed.rs` (`cargo run -p kmirror-actors --example embed`): two clusters
//! in memory, one mirroring the other, then a failover. Embedding takes three steps:
//! 1. implement [`host::Host`] for your broker (its metadata image and controller, partition
//!    logs leased through [`host::MirrorLog`], groups and ACLs, a clock, and a factory of
//!    [`host::Source`] connections, which [`kmirror_protocol::client::SourceClient`] already
//!    is); every method's rustdoc says what must hold when it returns and what the engine does
//!    when it fails; `memory::cluster` (feature `test-util`) is a complete host in one file;
//! 2. start the engine: [`engine::EngineRuntime::start`] runs it on its own thread and resumes
//!    the mirrors your metadata names;
//! 3. hand your request handlers the [`engine::Engine`] and send it the KIP-1279 RPCs' work
//!    ([`engine::Engine::ask`] with [`engine::system::LoadMirror`],
//!    [`engine::topics::StartTopic`], [`engine::topics::ChangeTopic`],
//!    [`engine::describe::DescribeMirror`], Read/WriteMirrorStates and LastMirroredEpochs).
//!
//! Inside, the decisions are pure code, testable without a runtime:
//! - [`partition`]: each mirror partition's state machine (one exhaustive transition function);
//! - [`epoch`]: leader-epoch arithmetic (LME alignment, divergence, DLE >= SLE);
//! - [`fetch_state`]: a fetcher's partitions, their epochs and whose turn the next Fetch is;
//! - [`fetch_pacing`], [`fetch_poll`] and [`fetch_lanes`]: how many Fetches a fetcher keeps in
//!   flight, when a fast partition near the source's end is polled, and when lanes open ahead;
//! - [`liveness`]: when a supervisor restarts a partition actor, and when it gives up;
//! - [`metadata`]: how the engine reacts to metadata changes (`mirror.name`, leader epochs,
//!   deletions) of the topics it mirrors;
//! - [`coordinator`]: a `__mirror_state` shard whose state is built only by replaying records;
//! - [`engine::sync_plan`]: what the metadata sync changes;
//! - [`metrics`]: the catalogue of the metrics the engine records (through the `metrics` facade).
//!
//! [`actor`] runs them with actix (the mirror partition, fetcher and coordinator shard actors,
//! and the supervised partition handle) and [`engine`] assembles them over the host
//! (docs/design.md §11 and §15).

pub mod actor;
pub mod coordinator;
pub mod engine;
pub mod epoch;
pub mod fetch_lanes;
pub mod fetch_pacing;
pub mod fetch_poll;
pub mod fetch_state;
pub mod host;
pub mod invariant;
pub mod liveness;
#[cfg(feature = "test-util")]
pub mod memory;
pub mod metadata;
pub mod metrics;
pub mod partition;
pub mod policy;
#[cfg(feature = "test-util")]
pub mod scenarios;

pub use kmirror_protocol::state::MirrorState;
