//! The broker's side of the mirroring engine: the host ports of `kmirror-actors` implemented over
//! this broker's partition logs and a client of the source cluster.
//!
//! - [`log`]: a partition log as the engine's `MirrorLog` (append the source's batches
//!   unchanged, truncate, the epoch history, the MIRROR_PID_RESET barrier);
//! - [`fetch`]: the fetcher's ports: one consumer Fetch (READ_COMMITTED, `LastFetchedEpoch`) to a
//!   source broker for many partitions, and applying each answer to the local log;
//! - [`fetch_settings`]: a mirror's `mirror.fetch.*` settings and fetchers per source broker;
//! - [`mirror_configs`]: a mirror's configs checked as a whole (CreateMirror and loading);
//! - [`fetcher_pool`]: a mirror's fetchers, each partition on one of its source leader's;
//! - [`partition`]: a mirror partition actor's ports (its shard, its fetcher, the controller,
//!   the log, the source);
//! - [`system`]: the engine assembled on this broker (shards, fetchers, partition actors);
//! - [`topics`]: starting, changing and describing mirrored topics;
//! - [`reactions`]: the engine's reactions to metadata changes and to its actors' liveness;
//! - [`state_topic`]: `__mirror_state` as a topic of this broker, and the coordinator shard's
//!   ports over it;
//! - [`shard_route`]: a shard as a partition sees it (here, or at the broker that leads it);
//! - [`shard_service`]: ReadMirrorStates / WriteMirrorStates from other brokers;
//! - [`stats`]: a mirror's fetch figures and lags, published as metrics;
//! - [`sync_plan`] and `sync`: the periodic metadata sync (source cluster id, partition counts,
//!   topic configs, group offsets, ACLs): what it changes, and the shell that reads and applies.
//!
//! A mirror topic has the source topic's name and id; each broker runs the partitions it leads.

pub mod fetch;
pub mod fetch_settings;
pub mod fetcher_pool;
pub mod log;
pub mod mirror_configs;
pub mod partition;
mod reactions;
pub mod shard_route;
pub mod shard_service;
mod source_topic;
pub mod state_topic;
pub mod stats;
mod sync;
pub mod sync_plan;
pub mod system;
pub mod topics;

use kmirror_actors::partition::Cause;
use kmirror_protocol::client::ClientError;

/// The engine's classification of a client failure.
pub(crate) fn cause(e: &ClientError) -> Cause {
    if e.is_retriable() {
        Cause::retryable(e.to_string())
    } else {
        Cause::fatal(e.to_string())
    }
}
