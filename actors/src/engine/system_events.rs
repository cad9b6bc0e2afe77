//! What the MirrorSystem tells itself: the broker's metadata changed ([`MetadataChanged`],
//! handled in `reactions`), and it is time for every mirror's metadata sync ([`SyncMetadata`],
//! handled in `sync`). They live apart from their handlers so the system that sends them does
//! not import the files that handle them.

use actix::Message;

/// The broker's metadata changed (or the system started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub(super) struct MetadataChanged;

/// Time for every mirror's metadata sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub(super) struct SyncMetadata;
