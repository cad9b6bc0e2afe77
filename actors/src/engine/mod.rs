//! The engine assembled: everything that runs mirroring on a broker, over the [`Host`] it is
//! embedded in.
//!
//! - [`system`]: the MirrorSystem actor, routing only: the shards of `__mirror_state`, one
//!   [`mirror::Mirror`] actor per mirror loaded here, metadata changes passed to them
//!   (`reactions`) and requests passed to the mirror they name (`system_routes`);
//! - [`mirror`]: one mirror on this broker (source clients, fetcher pool, topics, partition
//!   actors and their supervision, sync, figures), and its reactions (`mirror_reactions`);
//! - [`topic_requests`]: Start/Stop/Pause/ResumeMirrorTopics at the request level, per topic,
//!   by the rules of [`crate::policy`];
//! - [`topics`]: one topic started, paused, resumed or stopped;
//! - [`local_writes`]: what a restart of a stopped topic would discard, counted on every leader;
//! - [`describe`]: what DescribeMirrors shows;
//! - [`lme_lookup`]: the failback lookup of last mirror epochs;
//! - [`epoch_bumps`]: BumpLeaderEpochs served for another broker;
//! - [`fetcher_pool`] and [`fetch`]: a mirror's fetchers, each partition on a fetcher of its
//!   source leader; [`fetch_answer`] Kafka's fetch error table, pure;
//! - [`partition_ports`]: a partition actor's effects carried out over the host;
//!   [`coalescing_source`] merges the source lookups its partitions make at once;
//! - [`state_log`], [`shard_route`], [`shard_service`]: `__mirror_state` (its shards here,
//!   routes to the brokers that lead the others, and requests from them);
//! - [`sync`] and [`sync_plan`]: the periodic metadata sync (source cluster id, partition
//!   counts, topic configs, group offsets, ACLs) and its pure decisions;
//! - [`mirror_configs`], [`fetch_settings`]: a mirror's configs checked as a whole;
//! - [`throttle`]: `mirror.replication.throttled.rate`, the pace of a mirror's fetchers;
//! - [`stats`]: a mirror's fetch figures and lags, published as metrics;
//! - [`repeated`]: warnings of failures that persist, rate-limited;
//! - [`validate`]: CreateMirror's ValidateOnly checks of a mirror's source, creating nothing;
//! - [`handle`]: the engine as a host's request handlers and its process see it.
//!
//! A mirror topic has the source topic's name and id; each broker runs the partitions it leads.
//!
//! [`Host`]: crate::host::Host

pub mod coalescing_source;
pub mod describe;
pub mod epoch_bumps;
pub mod fetch;
pub mod fetch_answer;
pub mod fetch_lanes;
pub mod fetch_settings;
pub mod fetcher_pool;
pub mod gap_policy;
pub mod handle;
pub mod lme_lookup;
pub mod local_writes;
pub mod mirror;
pub mod mirror_configs;
mod mirror_reactions;
mod partition_commands;
pub mod partition_ports;
mod reactions;
pub mod repeated;
pub mod shard_route;
pub mod shard_service;
mod source_client;
mod source_topic;
pub mod state_log;
pub mod stats;
mod sync;
pub mod sync_plan;
pub mod system;
mod system_events;
mod system_routes;
pub mod throttle;
pub mod topic_requests;
pub mod topics;
pub mod validate;
pub mod verify;

pub use handle::{Engine, EngineRequest, EngineRuntime};
pub use system::MirrorSystem;

use crate::partition::Cause;
use kmirror_protocol::client::ClientError;

/// The engine's classification of a client failure.
pub(crate) fn cause(e: &ClientError) -> Cause {
    if e.is_retriable() {
        Cause::retryable(e.to_string())
    } else {
        Cause::fatal(e.to_string())
    }
}
