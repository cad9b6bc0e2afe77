//! kmirror-protocol: the bytes kmirror puts on the wire and on disk.
//!
//! - [`codec`]: Kafka's wire primitives, written once.
//! - [`messages`]: the KIP-1279 RPCs and records, generated from `schemas/`.
//! - [`batch`]: a zero-copy view over RecordBatch v2 data that never decompresses, and
//!   [`batch::validate`], which checks a produced batch's records as Kafka's LogValidator does.
//! - [`client`]: the source-cluster client (TLS, SASL, typed calls).
//! - [`records`]: coordinator record framing, transaction markers and `MIRROR_PID_RESET`.
//! - [`errors`]: one table of error codes, Kafka's and ours, with their class.
//! - [`sharding`]: Java's `String.hashCode` and the `__mirror_state` shard functions.
//! - [`state`]: the mirror partition states' wire values and names.
//! - [`topic_id`]: Kafka's text form of topic ids.

pub mod acl;
pub mod batch;
pub mod client;
pub mod codec;
pub mod errors;
pub mod frame;
#[cfg(feature = "test-util")]
pub mod kafka_tools;
pub mod messages;
pub mod records;
pub mod sharding;
pub mod state;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod topic_id;
