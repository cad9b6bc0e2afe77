//! kmirror-actors: the KIP-1279 mirroring engine a broker embeds.
//!
//! The decisions are pure code, testable without a runtime:
//! - [`partition`]: each mirror partition's state machine (one exhaustive transition function);
//! - [`epoch`]: leader-epoch arithmetic (LME alignment, divergence, DLE >= SLE);
//! - [`coordinator`]: a `__mirror_state` shard whose state is built only by replaying records;
//! - [`host`]: the ports an embedding broker implements, and an in-memory host for tests.
//!
//! The actors that run them (partition actors, fetcher pool, metadata manager, coordinator
//! shards) arrive with the "mirroring engine as actors" issue, following `ARCHITECTURE.md`.

pub mod coordinator;
pub mod epoch;
pub mod host;
pub mod partition;

pub use kmirror_protocol::state::MirrorState;
