//! The `__mirror_state` coordinator: shards whose state is built only by replaying records.

pub mod shard;

pub use shard::{LiveTopics, LmeMap, PartitionKey, Shard, StateRead, StateWrite};
