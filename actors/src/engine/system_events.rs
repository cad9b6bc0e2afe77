//! What the MirrorSystem tells itself: the broker's metadata changed ([`MetadataChanged`],
//! handled in `reactions`), and it is time to load the mirrors this broker coordinates, so
//! that they sync ([`SyncMetadata`], handled in `reactions`). They live apart from their handlers so the system that sends them does
//! not import the files that handle them.

use actix::Message;

/// The broker's metadata changed (or the system started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub(super) struct MetadataChanged;

/// Time to load the mirrors this broker coordinates that are not loaded (each syncs itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub(super) struct SyncMetadata;
