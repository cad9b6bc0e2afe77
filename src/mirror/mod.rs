//! The broker's side of the mirroring engine: the host ports of `kmirror-actors` implemented over
//! this broker's partition logs and a client of the source cluster.
//!
//! - [`log`]: a partition log as the engine's `MirrorLog` (append the source's batches
//!   unchanged, truncate, the epoch history, the MIRROR_PID_RESET barrier);
//! - [`fetch`]: the fetcher's ports: one consumer Fetch (READ_COMMITTED, `LastFetchedEpoch`) to a
//!   source broker for many partitions, and applying each answer to the local log;
//! - [`partition`]: a mirror partition actor's ports (its shard, its fetcher, the controller,
//!   the log, the source);
//! - [`system`]: the engine assembled on this broker (shards, fetchers, partition actors);
//! - [`state_topic`]: `__mirror_state` as a topic of this broker, and the coordinator shard's
//!   ports over it.
//!
//! A mirror topic has the source topic's name and id; its partitions are this broker's logs.

pub mod fetch;
pub mod log;
pub mod partition;
pub mod state_topic;
pub mod system;

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
