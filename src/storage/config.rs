//! Per-partition log settings, named after Kafka's topic configs.

/// How a partition log rolls, retains and flushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll to a new segment when the active one would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is older than this.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes between two offset-index (and time-index) entries.
    pub index_interval_bytes: u64,
    /// `retention.bytes`: delete the oldest segments while the log is larger; -1 = unlimited.
    pub retention_bytes: i64,
    /// `retention.ms`: delete segments whose newest record is older; -1 = unlimited.
    pub retention_ms: i64,
    /// `flush.messages`: fsync after this many batches appended since the last flush.
    pub flush_messages: u64,
    /// `flush.ms`: fsync when the last flush is older than this.
    pub flush_ms: i64,
}

impl Default for LogConfig {
    /// Kafka's defaults: 1 GiB segments rolled weekly, an index entry every 4 KiB, 7 days of
    /// retention, and flushing left to the OS (durability from replication). A single-node
    /// deployment that must survive power loss sets `flush.messages=1`.
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            flush_messages: u64::MAX,
            flush_ms: i64::MAX,
        }
    }
}
