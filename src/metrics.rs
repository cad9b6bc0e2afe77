//! The broker's metrics catalogue (the engine's own is [`kmirror_actors::metrics`]) and the
//! Prometheus exporter on `metrics.listener`.
//!
//! The exporter is a small HTTP/1 server of its own: `GET` (or `HEAD`) `/metrics` is answered
//! with Prometheus' text format, any other path 404 and another method on `/metrics` 405; each
//! answer closes its connection. The recorder's upkeep (draining histograms) runs every 5 s.
//!
//! Names follow `kmirror_<subsystem>_<name>_<unit>`; counters end in `_total`, durations are in
//! seconds and exported as histograms. Labels: `mirror` (the mirror's name), `topic`,
//! `partition`, `kind` (a metadata sync step), `api` (a Kafka or KIP-1279 API name).

use crate::accept_errors::AcceptErrors;
use kmirror_actors::metrics::{MetricDef, MetricKind};
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Requests served, per API.
pub const REQUESTS: &str = "kmirror_broker_requests_total";
/// Seconds from a request's frame read to its response encoded, per API.
pub const REQUEST_LATENCY: &str = "kmirror_broker_request_latency_seconds";
/// Client connections open on the Kafka listener.
pub const CONNECTIONS: &str = "kmirror_broker_connections";
/// Connections the broker closed to protect itself, per reason.
pub const CONNECTIONS_CLOSED: &str = "kmirror_broker_connections_closed_total";
/// Accepts that failed on the Kafka listener (mostly descriptors exhausted).
pub const ACCEPT_ERRORS: &str = "kmirror_broker_accept_errors_total";
/// Segment log files open now (bounded by `log.open.files.max`).
pub const LOG_OPEN_FILES: &str = "kmirror_log_open_segment_files";
/// Segment log files opened again after the bound closed them.
pub const LOG_FILE_REOPENS: &str = "kmirror_log_segment_file_reopens_total";

/// 1 on the node that is the metadata quorum's active controller, 0 on the others
/// (docs/cluster.md).
pub const CONTROLLER_ACTIVE: &str = "kmirror_controller_active";
/// Brokers the active controller fenced for silence (0 on the other nodes).
pub const FENCED_BROKERS: &str = "kmirror_controller_fenced_brokers";

/// Partitions led here whose ISR lacks some of their replicas (Kafka's
/// UnderReplicatedPartitions).
pub const UNDER_REPLICATED: &str = "kmirror_replication_under_replicated_partitions";
/// Partitions led here whose ISR is below `min.insync.replicas` (Kafka's
/// UnderMinIsrPartitionCount): acks=all produces are refused.
pub const UNDER_MIN_ISR: &str = "kmirror_replication_under_min_isr_partitions";
/// ISR shrinks the controller committed for partitions led here (Kafka's IsrShrinksPerSec).
pub const ISR_SHRINKS: &str = "kmirror_replication_isr_shrinks_total";
/// ISR expansions the controller committed for partitions led here (Kafka's IsrExpandsPerSec).
pub const ISR_EXPANDS: &str = "kmirror_replication_isr_expands_total";
/// Partitions without a leader, on the active controller (Kafka's OfflinePartitionsCount).
pub const OFFLINE_PARTITIONS: &str = "kmirror_controller_offline_partitions";

/// The broker's metrics.
pub const CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: UNDER_REPLICATED,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Partitions led by this broker whose ISR lacks some of their replicas.",
    },
    MetricDef {
        name: UNDER_MIN_ISR,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Partitions led by this broker whose ISR is below min.insync.replicas.",
    },
    MetricDef {
        name: ISR_SHRINKS,
        kind: MetricKind::Counter,
        labels: &[],
        help: "ISR shrinks committed for partitions led by this broker.",
    },
    MetricDef {
        name: ISR_EXPANDS,
        kind: MetricKind::Counter,
        labels: &[],
        help: "ISR expansions committed for partitions led by this broker.",
    },
    MetricDef {
        name: OFFLINE_PARTITIONS,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Partitions without a leader, as the active controller sees them.",
    },
    MetricDef {
        name: CONTROLLER_ACTIVE,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "1 on the active controller of the metadata quorum, 0 elsewhere.",
    },
    MetricDef {
        name: FENCED_BROKERS,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Brokers fenced for silence, as the active controller sees them.",
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
        name: CONNECTIONS,
        kind: MetricKind::Gauge,
        labels: &[],
        help: "Client connections open on the Kafka listener.",
    },
    MetricDef {
        name: CONNECTIONS_CLOSED,
        kind: MetricKind::Counter,
        labels: &["reason"],
        help: "Connections closed by the broker: max_connections_per_ip, idle \
               (connections.max.idle.ms), client_gone_during_fetch.",
    },
    MetricDef {
        name: ACCEPT_ERRORS,
        kind: MetricKind::Counter,
        labels: &[],
        help: "Accepts that failed on the Kafka listener (descriptors exhausted, mostly).",
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

/// How often the recorder's upkeep runs.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// How long one HTTP exchange may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request head read.
const MAX_HEAD: usize = 8192;

/// Why metrics could not be exported.
#[derive(Debug, thiserror::Error)]
#[error("metrics.listener {address}: {reason}")]
pub struct ExporterError {
    address: SocketAddr,
    reason: String,
}

/// Installs the process's metrics recorder, served for Prometheus at `http://<address>/metrics`
/// by tasks of the current runtime, and registers both catalogues' help texts.
pub async fn install_exporter(address: SocketAddr) -> Result<(), ExporterError> {
    let failed = |e: &dyn std::fmt::Display| ExporterError {
        address,
        reason: e.to_string(),
    };
    let listener = TcpListener::bind(address).await.map_err(|e| failed(&e))?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| failed(&e))?
        .install_recorder()
        .map_err(|e| failed(&e))?;
    kmirror_actors::metrics::describe(kmirror_actors::metrics::CATALOGUE);
    kmirror_actors::metrics::describe(CATALOGUE);
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(serve(listener, handle));
    Ok(())
}

async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let mut errors = AcceptErrors::default();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                errors.accepted();
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(HTTP_TIMEOUT, exchange(stream, &handle)).await;
                });
            }
            Err(e) => {
                let next = errors.failed(std::time::Instant::now());
                if let Some(count) = next.report {
                    tracing::warn!(error = %e, errors = count, "metrics listener: accept failed");
                }
                tokio::time::sleep(next.pause).await;
            }
        }
    }
}

/// What an HTTP request asks of the exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `GET /metrics` (`HEAD`: the same without the body); a query string is ignored.
    Metrics { head_only: bool },
    /// Any other path.
    NotFound,
    /// `/metrics` with another method.
    MethodNotAllowed,
    /// Not an HTTP/1 request line.
    BadRequest,
}

/// Routes a request by its request line (the head's first line).
fn route(head: &[u8]) -> Route {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Route::BadRequest;
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path != "/metrics" {
        return Route::NotFound;
    }
    match method {
        "GET" => Route::Metrics { head_only: false },
        "HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

/// Reads one request head and answers it; the connection closes after the answer.
async fn exchange(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // The whole head is read first: closing with request bytes unread resets the connection,
    // which can destroy the answer before the client reads it.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let route = route(&head);
    let (status, body, allow) = match route {
        Route::Metrics { .. } => ("200 OK", handle.render(), ""),
        Route::NotFound => (
            "404 Not Found",
            "not found: the metrics are at /metrics\n".to_string(),
            "",
        ),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "only GET and HEAD\n".to_string(),
            "Allow: GET, HEAD\r\n",
        ),
        Route::BadRequest => ("400 Bad Request", "bad request\n".to_string(), ""),
    };
    let content_type = match route {
        Route::Metrics { .. } => "text/plain; version=0.0.4; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    };
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if route != (Route::Metrics { head_only: true }) {
        answer.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&answer).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_metrics_path_is_served() {
        let metrics = Route::Metrics { head_only: false };
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), metrics);
        assert_eq!(route(b"GET /metrics?name[]=x HTTP/1.0\r\n\r\n"), metrics);
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1\r\n\r\n"),
            Route::Metrics { head_only: true }
        );
        for other in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"GET /metricsx HTTP/1.1\r\n\r\n",
            b"GET /metrics/ HTTP/1.1\r\n\r\n",
            b"GET /admin/../metrics HTTP/1.1\r\n\r\n",
            b"POST /anything HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                route(other),
                Route::NotFound,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(
            route(b"DELETE /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed
        );
        for bad in [
            &b""[..],
            b"GET /metrics\r\n\r\n",
            b"\xff\xfe",
            b"GET /metrics SPDY/3\r\n",
        ] {
            assert_eq!(route(bad), Route::BadRequest);
        }
    }
}
