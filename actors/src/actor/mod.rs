//! The engine's actors (docs/design.md §11): the shells that run the pure
//! decisions of [`crate::partition`] with actix.
//!
//! - [`partition::MirrorPartition`]: one per mirror partition this broker leads; owns the state
//!   machine, runs its effects through [`ports::PartitionPorts`], feeds completions back.
//! - [`coordinator::CoordinatorShard`]: one per `__mirror_state` partition this broker leads;
//!   loads by replaying it, writes through [`coordinator::ShardLogPorts`] before answering.
//! - [`fetcher::Fetcher`]: one Fetch in flight for the partitions attached to it; applies each
//!   answer through [`fetcher::FetcherPorts`] and reports to the partition's actor.
//! - [`supervision::SupervisedPartition`]: a partition actor's handle for its supervisor, which
//!   restarts it when it stalls, creates it again when it dies, and gives up after a budget.

pub mod coordinator;
pub mod fetcher;
pub mod partition;
pub mod ports;
pub mod supervision;

pub use coordinator::{
    CoordinatorShard, ForgetAllBut, LastMirroredEpoch, ReadMirrorStates, ReadState, ShardLogPorts,
    WriteMirrorStates, WriteStates,
};
pub use fetcher::{
    AttachPartition, DescribeFetcher, DetachPartition, FetchAnswers, FetchEpochs, Fetched, Fetcher,
    FetcherConfig, FetcherPorts, FetcherSnapshot, PartitionFetch, RaiseDestinationEpoch,
    detach_partition,
};
pub use partition::{
    BecomeLeader, ChangeDesired, ChangeLeaderEpoch, DescribePartition, GiveUp, LoseLeadership,
    MirrorPartition, PartitionLabels, PartitionSnapshot, Restart, RetryFailed,
};
pub use ports::{FetcherProgress, PartitionPorts, PortFuture};
pub use supervision::SupervisedPartition;
