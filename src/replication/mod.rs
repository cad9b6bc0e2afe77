//! Partition replication (docs/replication.md): the leader's side (followers' positions, the
//! high watermark, ISR changes, acks=all) as a pure state machine, in the style of the
//! engine's transition functions; the broker's actors feed it fetches, appends and ticks and
//! carry out its effects.

pub mod follower;
pub mod leader;
pub mod role;
