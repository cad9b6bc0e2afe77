//! The broker's side of the mirroring engine: `kmirror-actors`' host interface implemented over
//! this broker, and nothing else. Everything about mirroring lives in the engine; this module
//! only says how the engine reaches this broker's metadata, controller, logs, groups, ACLs and
//! source connections.
//!
//! - [`host`]: [`BrokerHost`], the engine's `Host` over the broker, which leases the broker's
//!   partition logs to the engine as its `MirrorLog` (`crate::broker`'s `mirror_log`: the
//!   broker reads its own logs through it too, so it lives there).

pub mod host;

pub use host::BrokerHost;
