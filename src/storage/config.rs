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
    /// `max.message.bytes`: the largest record batch a producer may append. Produce checks it
    /// (MESSAGE_TOO_LARGE), not the log: a mirror appends the source's batches as they are.
    pub max_message_bytes: u64,
}

impl Default for LogConfig {
    /// Kafka's defaults: 1 GiB segments rolled weekly, an index entry every 4 KiB, 7 days of
    /// retention, flushing left to the OS (durability from replication), and batches of up to
    /// 1 MiB plus a batch's log overhead. A single-node deployment that must survive power loss
    /// sets `flush.messages=1`.
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_bytes: -1,
            retention_ms: 7 * 24 * 3600 * 1000,
            flush_messages: u64::MAX,
            flush_ms: i64::MAX,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// The smallest segment Kafka 4's validators accept (1 MiB, KIP-1030), for `segment.bytes` and
/// the broker's `log.segment.bytes`: smaller ones let a client make a file per batch and use up
/// the log directory's inodes.
pub const MIN_SEGMENT_BYTES: i64 = 1 << 20;

/// Kafka's default `max.message.bytes` (and broker `message.max.bytes`): 1 MiB and the 12 bytes
/// of a batch's offset and length.
pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = (1 << 20) + 12;

impl LogConfig {
    /// The range Kafka's validators give a topic config of these settings (and the broker key
    /// it overrides): `None` for other names.
    pub fn range(name: &str) -> Option<(i64, i64)> {
        let int_max = i64::from(i32::MAX);
        Some(match name {
            "segment.bytes" => (MIN_SEGMENT_BYTES, int_max),
            "segment.ms" => (1, i64::MAX),
            "index.interval.bytes" => (0, int_max),
            // -1 is unlimited.
            "retention.bytes" | "retention.ms" => (-1, i64::MAX),
            "flush.messages" => (1, i64::MAX),
            "flush.ms" => (0, i64::MAX),
            "max.message.bytes" => (0, int_max),
            _ => return None,
        })
    }

    /// Whether `value` is a valid value of topic config `name` (one of [`LogConfig::NAMES`]);
    /// the reason, naming both, when not.
    pub fn check(name: &str, value: &str) -> Result<(), String> {
        let Some((min, max)) = LogConfig::range(name) else {
            return Err(format!("{name} is not a topic config this broker supports"));
        };
        match value.trim().parse::<i64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(()),
            Ok(n) => Err(format!(
                "{name}={n} is out of range: it must be in [{min}, {max}]"
            )),
            Err(_) => Err(format!("{name}={value:?} is not a number")),
        }
    }

    /// The topic config names of these settings, in [`LogConfig::entries`] order.
    pub const NAMES: [&'static str; 8] = [
        "segment.bytes",
        "segment.ms",
        "index.interval.bytes",
        "retention.bytes",
        "retention.ms",
        "flush.messages",
        "flush.ms",
        "max.message.bytes",
    ];

    /// These settings under their topic config names, as DescribeConfigs reports them.
    pub fn entries(&self) -> Vec<(&'static str, String)> {
        // Unbounded (u64::MAX) counts show as Kafka's Long.MAX_VALUE.
        let flush_messages = i64::try_from(self.flush_messages).unwrap_or(i64::MAX);
        let values = [
            self.segment_bytes.to_string(),
            self.segment_ms.to_string(),
            self.index_interval_bytes.to_string(),
            self.retention_bytes.to_string(),
            self.retention_ms.to_string(),
            flush_messages.to_string(),
            self.flush_ms.to_string(),
            self.max_message_bytes.to_string(),
        ];
        LogConfig::NAMES.into_iter().zip(values).collect()
    }

    /// These settings with a topic's overrides applied (keys of [`LogConfig::entries`]; values
    /// that do not parse leave the setting as it was).
    pub fn with_overrides(
        &self,
        configs: &std::collections::BTreeMap<String, String>,
    ) -> LogConfig {
        let mut out = self.clone();
        for (key, value) in configs {
            match key.as_str() {
                "segment.bytes" => set(&mut out.segment_bytes, value),
                "segment.ms" => set(&mut out.segment_ms, value),
                "index.interval.bytes" => set(&mut out.index_interval_bytes, value),
                "retention.bytes" => set(&mut out.retention_bytes, value),
                "retention.ms" => set(&mut out.retention_ms, value),
                "flush.messages" => set(&mut out.flush_messages, value),
                "flush.ms" => set(&mut out.flush_ms, value),
                "max.message.bytes" => set(&mut out.max_message_bytes, value),
                _ => {}
            }
        }
        out
    }
}

fn set<T: std::str::FromStr>(field: &mut T, value: &str) {
    if let Ok(parsed) = value.trim().parse() {
        *field = parsed;
    }
}
