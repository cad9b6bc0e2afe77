//! The engine's metrics catalogue: every metric this crate records, with its kind, labels and
//! help text. Names follow `kmirror_<subsystem>_<name>_<unit>`; counters end in `_total`.
//!
//! Metrics go through the `metrics` facade: the embedding broker installs a recorder (kmirror's
//! own broker exports them for Prometheus on `metrics.listener`); without one they cost a
//! no-op call. [`describe`] registers the help texts with the installed recorder.

/// How a metric behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution (exported as Prometheus buckets).
    Histogram,
}

/// One catalogued metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// What it measures.
    pub help: &'static str,
}

/// Mirror partitions this broker leads, per mirror and state (UNKNOWN, PREPARING, MIRRORING,
/// PAUSED, STOPPING, STOPPED, FAILED).
pub const STATE_PARTITIONS: &str = "kmirror_mirror_state_partitions";
/// State transitions of mirror partitions, as persisted in `__mirror_state`.
pub const TRANSITIONS: &str = "kmirror_mirror_transitions_total";
/// Partition actors restarted (stalled) or created again (dead) by their supervisor.
pub const RESTARTS: &str = "kmirror_supervisor_restarts_total";
/// Records written to `__mirror_state` by this broker's coordinator shards.
pub const COORDINATOR_WRITES: &str = "kmirror_coordinator_writes_total";
/// How long a coordinator shard's write took, from request to durable.
pub const COORDINATOR_WRITE_LATENCY: &str = "kmirror_coordinator_write_latency_seconds";

/// Fetch requests sent to the source, per mirror.
pub const FETCH_REQUESTS: &str = "kmirror_fetcher_requests_total";
/// Record bytes fetched from the source, per mirror.
pub const FETCH_BYTES: &str = "kmirror_fetcher_fetched_bytes_total";
/// Fetch requests that failed (the source unreachable or answering an error), per mirror.
pub const FETCH_ERRORS: &str = "kmirror_fetcher_errors_total";
/// Seconds since the mirror's last successful fetch.
pub const FETCH_AGE: &str = "kmirror_fetcher_last_success_age_seconds";
/// Records a mirror partition is behind its source (source high watermark minus local log end).
pub const PARTITION_LAG: &str = "kmirror_mirror_partition_lag_records";
/// The greatest partition lag of a mirror on this broker.
pub const MAX_LAG: &str = "kmirror_mirror_max_lag_records";
/// Fetched batches refused because they would break an invariant of the log
/// ([`crate::invariant::Invariant`]: offsets only increase, leader epochs never go down), per
/// mirror and invariant. Corrupt source batches are not counted here.
pub const INVARIANT_VIOLATIONS: &str = "kmirror_mirror_invariant_violations_total";
/// Metadata sync steps run, per mirror and kind.
pub const SYNC_RUNS: &str = "kmirror_sync_runs_total";
/// Metadata sync steps that failed, per mirror and kind.
pub const SYNC_ERRORS: &str = "kmirror_sync_errors_total";
/// 1 while a mirror's sync is halted because its source is another cluster, else 0.
pub const SYNC_HALTED: &str = "kmirror_sync_cluster_id_mismatch_mirrors";
/// Records removed from mirror partitions by truncation, per mirror and reason: `lso` (a stop
/// cuts back to the last stable offset) or `lme` (by leader epochs: a start or failback cuts
/// back to the last mirrored epoch's end, or a fetch finds where the log diverged from the
/// source's).
pub const TRUNCATED_RECORDS: &str = "kmirror_mirror_truncated_records_total";
/// Offsets the source deleted before a mirror partition copied them (retention or DeleteRecords
/// moved its log start past the partition's log end).
pub const SKIPPED_OFFSETS: &str = "kmirror_mirror_skipped_offsets_total";
/// The end of the range the last verification of a partition compared (`kmirror mirrors
/// --verify`).
pub const VERIFIED_OFFSET: &str = "kmirror_mirror_verified_offset";
/// 1 when the last verification of a partition found a difference, 0 when it found none.
pub const VERIFY_DIFFERENCE: &str = "kmirror_mirror_verify_difference";
/// When a partition was last verified, in seconds since the epoch.
pub const VERIFY_TIMESTAMP: &str = "kmirror_mirror_verify_timestamp_seconds";
/// Bytes compared by verifications.
pub const VERIFIED_BYTES: &str = "kmirror_mirror_verified_bytes_total";
/// How old the oldest source record a mirror partition has not yet mirrored is, in seconds (0
/// when caught up).
pub const PARTITION_LAG_SECONDS: &str = "kmirror_mirror_partition_lag_seconds";
/// The greatest time lag of a mirror's partitions on this broker.
pub const MAX_LAG_SECONDS: &str = "kmirror_mirror_max_lag_seconds";
/// Milliseconds the mirror's fetchers waited for `mirror.replication.throttled.rate`.
pub const THROTTLE_WAIT: &str = "kmirror_fetcher_throttle_wait_ms_total";
/// Fetches a mirror's fetcher may keep in flight to one source broker, as its pacing decided
/// (docs/design.md §4, "Fetching across a WAN").
pub const FETCHES_IN_FLIGHT: &str = "kmirror_fetcher_fetches_in_flight";
/// The round trip to a source broker, as a fetcher estimates it: its quickest small answer.
pub const FETCH_ROUND_TRIP: &str = "kmirror_fetcher_round_trip_seconds";
/// Record bytes per Fetch answer over a fetcher's last pacing interval.
pub const FETCH_ANSWER_BYTES: &str = "kmirror_fetcher_answer_bytes";
/// Record bytes applied from Fetches ahead of partitions' log ends (docs/design.md §4,
/// "Reading ahead"), per mirror.
pub const READ_AHEAD_BYTES: &str = "kmirror_fetcher_read_ahead_bytes_total";
/// Source topics a mirror started by itself because they match `topics.include`.
pub const AUTO_STARTED_TOPICS: &str = "kmirror_mirror_auto_started_topics_total";
/// Consumer groups whose offsets the sync left alone because they have members on the
/// destination.
pub const GROUPS_SKIPPED: &str = "kmirror_sync_groups_skipped_total";
/// The engine's metrics.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: STATE_PARTITIONS,
        kind: MetricKind::Gauge,
        labels: &["mirror", "state"],
        help: "Mirror partitions led by this broker, per mirror and state.",
    },
    MetricDef {
        name: TRANSITIONS,
        kind: MetricKind::Counter,
        labels: &["mirror", "from", "to"],
        help: "Mirror partition state transitions persisted in __mirror_state.",
    },
    MetricDef {
        name: RESTARTS,
        kind: MetricKind::Counter,
        labels: &["mirror", "reason"],
        help: "Partition actors restarted (stalled) or created again (dead) by their supervisor.",
    },
    MetricDef {
        name: COORDINATOR_WRITES,
        kind: MetricKind::Counter,
        labels: &["result"],
        help: "Writes of mirror partition records to __mirror_state by this broker's shards.",
    },
    MetricDef {
        name: COORDINATOR_WRITE_LATENCY,
        kind: MetricKind::Histogram,
        labels: &[],
        help: "Seconds from a __mirror_state write request to its record being durable.",
    },
    MetricDef {
        name: FETCH_REQUESTS,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Fetch requests sent to the source cluster.",
    },
    MetricDef {
        name: FETCH_BYTES,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Record bytes fetched from the source cluster.",
    },
    MetricDef {
        name: FETCH_ERRORS,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Fetch requests to the source cluster that failed.",
    },
    MetricDef {
        name: FETCH_AGE,
        kind: MetricKind::Gauge,
        labels: &["mirror"],
        help: "Seconds since the mirror's last successful fetch.",
    },
    MetricDef {
        name: PARTITION_LAG,
        kind: MetricKind::Gauge,
        labels: &["mirror", "topic", "partition"],
        help: "Records a mirror partition is behind the source's high watermark.",
    },
    MetricDef {
        name: MAX_LAG,
        kind: MetricKind::Gauge,
        labels: &["mirror"],
        help: "The greatest lag in records of the mirror's partitions on this broker.",
    },
    MetricDef {
        name: INVARIANT_VIOLATIONS,
        kind: MetricKind::Counter,
        labels: &["mirror", "invariant"],
        help: "Fetched data refused because it would break an invariant of the log.",
    },
    MetricDef {
        name: SYNC_RUNS,
        kind: MetricKind::Counter,
        labels: &["mirror", "kind"],
        help: "Metadata sync steps run (cluster_id, partitions, configs, groups, acls).",
    },
    MetricDef {
        name: SYNC_ERRORS,
        kind: MetricKind::Counter,
        labels: &["mirror", "kind"],
        help: "Metadata sync steps that failed.",
    },
    MetricDef {
        name: SYNC_HALTED,
        kind: MetricKind::Gauge,
        labels: &["mirror"],
        help: "1 while the mirror's sync is halted: its source answers with another cluster id.",
    },
    MetricDef {
        name: TRUNCATED_RECORDS,
        kind: MetricKind::Counter,
        labels: &["mirror", "reason"],
        help: "Records removed from mirror partitions by truncation (reason lso: a stop; lme: by leader epochs, at a start, failback or divergence; gap: a restart at the source's log start past a gap).",
    },
    MetricDef {
        name: SKIPPED_OFFSETS,
        kind: MetricKind::Counter,
        labels: &["mirror", "topic", "partition"],
        help: "Offsets the source deleted (retention, DeleteRecords) before the mirror partition copied them.",
    },
    MetricDef {
        name: VERIFIED_OFFSET,
        kind: MetricKind::Gauge,
        labels: &["mirror", "topic", "partition"],
        help: "The end of the range the last verification of the partition compared with the source.",
    },
    MetricDef {
        name: VERIFY_DIFFERENCE,
        kind: MetricKind::Gauge,
        labels: &["mirror", "topic", "partition"],
        help: "1 while a difference a verification found in the partition has not been compared again and found gone, 0 otherwise.",
    },
    MetricDef {
        name: VERIFY_TIMESTAMP,
        kind: MetricKind::Gauge,
        labels: &["mirror", "topic", "partition"],
        help: "When the partition was last verified against the source, in seconds since the epoch.",
    },
    MetricDef {
        name: VERIFIED_BYTES,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Bytes of the source compared with the destination by verifications.",
    },
    MetricDef {
        name: PARTITION_LAG_SECONDS,
        kind: MetricKind::Gauge,
        labels: &["mirror", "topic", "partition"],
        help: "Age in seconds of the oldest source record the partition has not mirrored yet.",
    },
    MetricDef {
        name: MAX_LAG_SECONDS,
        kind: MetricKind::Gauge,
        labels: &["mirror"],
        help: "The greatest time lag in seconds of the mirror's partitions on this broker.",
    },
    MetricDef {
        name: THROTTLE_WAIT,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Milliseconds the mirror's fetchers waited for mirror.replication.throttled.rate.",
    },
    MetricDef {
        name: FETCHES_IN_FLIGHT,
        kind: MetricKind::Gauge,
        labels: &["mirror", "source_broker"],
        help: "Fetches the mirror's fetcher may keep in flight to a source broker (its pacing).",
    },
    MetricDef {
        name: FETCH_ROUND_TRIP,
        kind: MetricKind::Gauge,
        labels: &["mirror", "source_broker"],
        help: "Round trip to a source broker as the fetcher estimates it (its quickest small answer).",
    },
    MetricDef {
        name: FETCH_ANSWER_BYTES,
        kind: MetricKind::Gauge,
        labels: &["mirror", "source_broker"],
        help: "Record bytes per Fetch answer over the fetcher's last pacing interval.",
    },
    MetricDef {
        name: READ_AHEAD_BYTES,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Record bytes applied from Fetches ahead of partitions' log ends (reading ahead).",
    },
    MetricDef {
        name: AUTO_STARTED_TOPICS,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Source topics the mirror started by itself because they match topics.include.",
    },
    MetricDef {
        name: GROUPS_SKIPPED,
        kind: MetricKind::Counter,
        labels: &["mirror"],
        help: "Consumer groups the offset sync skipped because they have members on the destination.",
    },
];

/// Registers the help texts of `catalogue` with the installed recorder.
pub fn describe(catalogue: &[MetricDef]) {
    for def in catalogue {
        match def.kind {
            MetricKind::Counter => metrics::describe_counter!(def.name, def.help),
            MetricKind::Gauge => metrics::describe_gauge!(def.name, def.help),
            MetricKind::Histogram => {
                metrics::describe_histogram!(def.name, metrics::Unit::Seconds, def.help)
            }
        }
    }
}
