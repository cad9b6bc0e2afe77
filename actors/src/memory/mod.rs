//! In memory (feature `test-util`): a partition log and the simulation's single-partition
//! doubles ([`log`]), and whole clusters that run the engine as a second host ([`cluster`]): the
//! host this crate's behaviour suite ([`crate::scenarios`]) and `examples/embed.rs` run on.

pub mod cluster;
pub mod log;

pub use cluster::{MemoryCluster, MemoryNetwork, MemorySourceClient};
pub use log::{MemoryController, MemoryCoordinatorLog, MemoryLog, MemorySource};
