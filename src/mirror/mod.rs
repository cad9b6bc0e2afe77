//! The broker's side of the mirroring engine: `kmirror-actors`' host interface implemented over
//! this broker, and nothing else. Everything about mirroring lives in the engine; this module
//! only says how the engine reaches this broker's metadata, controller, logs, groups, ACLs and
//! source connections.
//!
//! - [`host`]: [`BrokerHost`], the engine's `Host` over the broker;
//! - [`log`]: a partition log leased to the engine as its `MirrorLog` (the mirror path of the
//!   storage engine, the high watermark kept at the log end: one replica).

pub mod host;
pub mod log;

pub use host::BrokerHost;
