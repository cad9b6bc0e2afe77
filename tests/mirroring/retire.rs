//! A deleted mirror lets go of its source: with `kmirror broker` processes on both sides, a
//! topic mirrored, stopped and its mirror deleted with `kmirror mirrors`, the source broker's
//! `kmirror_broker_connections` (as its `/metrics` shows) falls back to none: no fetcher, pool
//! or client of the deleted mirror keeps a connection open. Needs only the `kmirror` binary.

use super::process::{create_mirror, free_port, spawn_broker, spawn_broker_with, wait_described};
use kafka_protocol::records::Compression;
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::client::{Outcome, Producer, create_topic};
use kmirror_testkit::local_cluster::scrape_text;
use std::time::{Duration, Instant};

/// The source's open client connections, as its `/metrics` shows them.
fn connections(metrics: &str) -> Option<f64> {
    scrape_text(metrics)
        .lines()
        .find_map(|l| l.strip_prefix("kmirror_broker_connections "))
        .and_then(|v| v.trim().parse().ok())
}

/// `kmirror mirrors ARGS` off the test's runtime, expecting success.
async fn cli_ok(address: &str, args: &[&str]) {
    let address = address.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let (code, text) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        mirrors_cli(&address, &args)
    })
    .await
    .expect("ran");
    assert_eq!(code, Some(0), "{text}");
}

#[actix_rt::test]
async fn a_deleted_mirror_closes_every_connection_to_its_source() {
    let (dir_s, dir_d) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let (port_s, port_d, port_m) = (free_port(), free_port(), free_port());
    let (source, destination) = (format!("127.0.0.1:{port_s}"), format!("127.0.0.1:{port_d}"));
    let metrics = format!("127.0.0.1:{port_m}");
    let _source_broker = spawn_broker_with(
        dir_s.path(),
        port_s,
        &format!("metrics.listener=http://{metrics}\n"),
    );
    let _destination_broker = spawn_broker(dir_d.path(), port_d);
    assert_eq!(create_topic(&source, "orders", 2).await, Ok(0));
    let mut producer = Producer::idempotent(&source);
    for partition in 0..2 {
        let values: Vec<String> = (0..50).map(|i| format!("order-{partition}-{i}")).collect();
        let outcome = producer
            .produce("orders", partition, &values, Compression::Lz4)
            .await;
        assert!(matches!(outcome, Outcome::Acked(_)), "{outcome:?}");
    }
    drop(producer);

    let dir = dir_d.path().to_path_buf();
    let (d, s) = (destination.clone(), source.clone());
    tokio::task::spawn_blocking(move || create_mirror(&dir, &d, "dr", &s))
        .await
        .expect("created");
    cli_ok(
        &destination,
        &["--start", "--mirror", "dr", "--topics", "orders"],
    )
    .await;
    wait_described(&destination, "dr", "orders", "MIRRORING", &[50, 50]).await;
    let open = connections(&metrics);
    assert!(
        open.is_some_and(|n| n >= 1.0),
        "the mirror fetches over its own connections: {open:?}"
    );

    cli_ok(
        &destination,
        &["--stop", "--mirror", "dr", "--topics", "orders"],
    )
    .await;
    wait_described(&destination, "dr", "orders", "STOPPED", &[51, 51]).await;
    cli_ok(&destination, &["--delete", "--mirror", "dr"]).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let open = connections(&metrics);
        if open == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "20 s after the mirror's deletion the source still serves {open:?} connections"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
