//! The engine's actors (ARCHITECTURE.md "The engine's actors"): the shells that run the pure
//! decisions of [`crate::partition`] with actix.
//!
//! - [`partition::MirrorPartition`]: one per mirror partition this broker leads; owns the state
//!   machine, runs its effects through [`ports::PartitionPorts`], feeds completions back.

pub mod partition;
pub mod ports;

#[cfg(test)]
mod tests;

pub use partition::{
    BecomeLeader, ChangeDesired, ChangeLeaderEpoch, DescribePartition, FetcherProgress,
    LoseLeadership, MirrorPartition, PartitionSnapshot, Restart,
};
pub use ports::{PartitionPorts, PortFuture};
