//! The broker's metrics catalogue (the engine's own is [`kmirror_actors::metrics`]) and the
//! Prometheus exporter on `metrics.listener`.
//!
//! Names follow `kmirror_<subsystem>_<name>_<unit>`; counters end in `_total`, durations are in
//! seconds and exported as histograms. Labels: `mirror` (the mirror's name), `topic`,
//! `partition`, `kind` (a metadata sync step), `api` (a Kafka or KIP-1279 API name).

use kmirror_actors::metrics::{MetricDef, MetricKind};
use std::net::SocketAddr;

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
/// Fetched batches refused because they would break the log's invariants (corrupt, not at the
/// log end, lowering the leader epoch), per mirror.
pub const INVARIANT_VIOLATIONS: &str = "kmirror_mirror_invariant_violations_total";
/// Metadata sync steps run, per mirror and kind.
pub const SYNC_RUNS: &str = "kmirror_sync_runs_total";
/// Metadata sync steps that failed, per mirror and kind.
pub const SYNC_ERRORS: &str = "kmirror_sync_errors_total";
/// 1 while a mirror's sync is halted because its source is another cluster, else 0.
pub const SYNC_HALTED: &str = "kmirror_sync_cluster_id_mismatch_mirrors";
/// Requests served, per API.
pub const REQUESTS: &str = "kmirror_broker_requests_total";
/// Seconds from a request's frame read to its response encoded, per API.
pub const REQUEST_LATENCY: &str = "kmirror_broker_request_latency_seconds";
/// Segment log files open now (bounded by `log.open.files.max`).
pub const LOG_OPEN_FILES: &str = "kmirror_log_open_segment_files";
/// Segment log files opened again after the bound closed them.
pub const LOG_FILE_REOPENS: &str = "kmirror_log_segment_file_reopens_total";

/// The broker's metrics.
pub const CATALOGUE: &[MetricDef] = &[
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
        labels: &["mirror"],
        help: "Fetched data refused because it would break the log's invariants.",
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
        name: REQUESTS,
        kind: MetricKind::Counter,
        labels: &["api"],
        help: "Requests served by this broker.",
    },
    MetricDef {
        name: REQUEST_LATENCY,
        kind: MetricKind::Histogram,
        labels: &["api"],
        help: "Seconds to serve a request, from its frame read to its response encoded.",
    },
    MetricDef {
        name: LOG_OPEN_FILES,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Segment log files open now (at most log.open.files.max).",
    },
    MetricDef {
        name: LOG_FILE_REOPENS,
        kind: MetricKind::Counter,
        labels: &[],
        help: "Segment log files opened again after log.open.files.max closed them.",
    },
];

/// Latency buckets (seconds): 100 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Why metrics could not be exported.
#[derive(Debug, thiserror::Error)]
#[error("metrics.listener {address}: {reason}")]
pub struct ExporterError {
    address: SocketAddr,
    reason: String,
}

/// Installs the process's metrics recorder, served for Prometheus at `http://<address>/metrics`
/// (any path answers), and registers both catalogues' help texts.
pub fn install_exporter(address: SocketAddr) -> Result<(), ExporterError> {
    let failed = |e: &dyn std::fmt::Display| ExporterError {
        address,
        reason: e.to_string(),
    };
    // Bind first so a taken port is reported here, not lost in the exporter's task.
    std::net::TcpListener::bind(address).map_err(|e| failed(&e))?;
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(address)
        .set_buckets(BUCKETS)
        .map_err(|e| failed(&e))?
        .install()
        .map_err(|e| failed(&e))?;
    kmirror_actors::metrics::describe(kmirror_actors::metrics::CATALOGUE);
    kmirror_actors::metrics::describe(CATALOGUE);
    Ok(())
}
