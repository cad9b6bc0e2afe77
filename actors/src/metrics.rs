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
