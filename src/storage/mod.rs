//! The storage engine: a durable partition log of raw Kafka record batches.
//!
//! Batches are stored exactly as they arrive (never decompressed or re-encoded), so a mirrored
//! log is byte-identical to its source. Around the raw segments the engine keeps what Kafka keeps:
//! a sparse offset and time index per segment, the leader-epoch cache, producer state (for
//! idempotence, the last stable offset and aborted transactions), the log start offset, high
//! watermark and recovery point; and it recovers all of it after a crash. [`PartitionLog`] is
//! the entry point; its docs describe the lifecycle and the files.

mod checkpoint;
pub mod config;
pub mod dir_lock;
pub mod dump;
pub mod epoch_cache;
pub mod error;
pub mod log;
pub mod meta_properties;
pub mod open_files;
pub mod producer_state;
pub mod records;
pub mod segment;

pub use config::LogConfig;
pub use dir_lock::LogDirLock;
pub use epoch_cache::{EpochCache, EpochEntry};
pub use error::StorageError;
pub use log::{AppendInfo, GapPolicy, PartitionLog, ReadResult, RecoveryReport};
pub use open_files::OpenFiles;
pub use producer_state::{AbortedTxn, ProducerStateManager};
pub use records::{FileRange, Records};
