//! The disaster a mirror exists for, with `kmirror broker` processes: the source cluster is
//! gone (SIGKILL, never restarted) and the destination broker restarts. A topic failed over
//! before the disaster takes writes from the destination's first request, and a topic still
//! mirroring fails over with one `kmirror mirrors --stop`, all without the source.

use super::process::{
    create_mirror, free_port, mirrors_cli, source_ends, spawn_broker, verifiable_produce,
    wait_described,
};
use super::source_client;
use kmirror_protocol::kafka_tools;
use std::time::{Duration, Instant};

/// Runs `kmirror mirrors` and expects success.
fn cli_ok(address: &str, args: &[&str]) -> String {
    let (code, text) = mirrors_cli(address, args);
    assert_eq!(code, Some(0), "kmirror mirrors {args:?}: {text}");
    text
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn with_the_source_gone_a_restarted_destination_fails_over() {
    let (dir_s, dir_d) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let (port_s, port_d) = (free_port(), free_port());
    let (source, destination) = (format!("127.0.0.1:{port_s}"), format!("127.0.0.1:{port_d}"));
    let run = std::process::id();
    let (a, b) = (format!("disaster-a-{run}"), format!("disaster-b-{run}"));
    let source_broker = spawn_broker(dir_s.path(), port_s);
    let mut destination_broker = spawn_broker(dir_d.path(), port_d);
    for topic in [&a, &b] {
        let (source, topic) = (source.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka_tools::create_topic(&source, &topic, 2, &[]);
            kafka_tools::produce(&source, &topic, 3_000, "lz4", &[]);
        })
        .await
        .expect("created and written");
    }
    create_mirror(dir_d.path(), &destination, "m1", &source);
    cli_ok(
        &destination,
        &["--start", "--mirror", "m1", "--topics", &format!("{a},{b}")],
    );
    let source_client_s = source_client(&source).await;
    let a_ends = source_ends(&source_client_s, &a, 2).await;
    let b_ends = source_ends(&source_client_s, &b, 2).await;
    wait_described(&destination, "m1", &a, "MIRRORING", &a_ends).await;
    wait_described(&destination, "m1", &b, "MIRRORING", &b_ends).await;

    // A fails over and takes writes on the destination.
    cli_ok(&destination, &["--stop", "--mirror", "m1", "--topics", &a]);
    let a_barrier: Vec<i64> = a_ends.iter().map(|e| e + 1).collect();
    wait_described(&destination, "m1", &a, "STOPPED", &a_barrier).await;
    let (acked, out) = verifiable_produce(&destination, &a, 500).await;
    assert_eq!(acked, 500, "{out}");

    // The source region is gone; the destination broker restarts.
    drop(source_broker);
    drop(destination_broker);
    destination_broker = spawn_broker(dir_d.path(), port_d);

    // A takes writes at once.
    let (acked, out) = verifiable_produce(&destination, &a, 300).await;
    assert_eq!(acked, 300, "A was failed over before the restart: {out}");
    let dest_client = source_client(&destination).await;
    let a_now = source_ends(&dest_client, &a, 2).await;
    let total: i64 = a_now.iter().sum();
    let expected: i64 = a_barrier.iter().sum::<i64>() + 800;
    assert_eq!(total, expected, "every acknowledged write is there: {a_now:?}");

    // Describe answers without the source and shows every partition, with why B waits.
    let started = Instant::now();
    let text = cli_ok(&destination, &["--describe", "--mirror", "m1", "--json"]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "describe took {:?}",
        started.elapsed()
    );
    let json: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let partitions = json["mirrors"][0]["partitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(partitions.len(), 4, "{json}");

    // B fails over with one --stop within 10 s, and takes writes.
    let started = Instant::now();
    cli_ok(&destination, &["--stop", "--mirror", "m1", "--topics", &b]);
    let b_barrier: Vec<i64> = b_ends.iter().map(|e| e + 1).collect();
    wait_described(&destination, "m1", &b, "STOPPED", &b_barrier).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "B's failover took {took:?}");
    let (acked, out) = verifiable_produce(&destination, &b, 200).await;
    assert_eq!(acked, 200, "{out}");
    drop(destination_broker);
}
