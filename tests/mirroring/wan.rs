//! Fetching from a distant source (docs/design.md §4, "Fetching across a WAN"), against Apache
//! Kafka as the source and a `kmirror broker` process: with more Fetches allowed than a topic
//! has partitions, a partition with a backlog is read ahead of its log end, and the copy stays
//! byte for byte, every offset once, in order.

use super::assurance::{
    cli_ok, create, create_topic, destination, json_of, metric, produce, wait_until,
};
use kmirror_protocol::kafka_tools::kafka_env;
use kmirror_testkit::local_cluster::scrape_text;
use kmirror_testkit::source::{source_client, source_ends};

/// Answers of 16 KiB make every answer of a one-partition backlog show more to come, so the
/// fetcher reads ahead from its first answers on; `--verify` then compares every batch of the
/// copy with the source's, and the read-ahead counter shows the copy went through that path.
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_partition_read_ahead_is_copied_byte_for_byte() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("wan-{}-ahead", std::process::id());
    create_topic(&bootstrap, &topic, 1).await;
    produce(&bootstrap, &topic, 40_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "far",
        &format!("bootstrap.servers={bootstrap}\nfetch.max.bytes=16384\n"),
    );
    cli_ok(
        &address,
        &["--start", "--mirror", "far", "--topics", &topic],
    );
    let source = source_client(&bootstrap).await;
    let end = source_ends(&source, &topic, 1).await[0];
    wait_until(&address, "far", &topic, "caught up", |p| {
        p[0].state == "MIRRORING" && p[0].destination_offset == end
    })
    .await;
    let scrape = scrape_text(&metrics);
    let ahead = metric(
        &scrape,
        "kmirror_fetcher_read_ahead_bytes_total",
        &[("mirror", "far")],
    )
    .unwrap_or(0.0);
    assert!(ahead > 0.0, "nothing was read ahead: {scrape}");
    let text = cli_ok(
        &address,
        &["--verify", "--mirror", "far", "--topics", &topic, "--json"],
    );
    let row = &json_of(&text)[0];
    assert_eq!(row["verifiedTo"], end, "{text}");
    assert_eq!(row["differenceOffset"], serde_json::Value::Null, "{text}");
}
