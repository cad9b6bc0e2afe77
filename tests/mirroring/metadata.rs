//! The engine reacts to metadata changes and the broker keeps clients from making the wrong
//! ones: `kafka-configs` setting `mirror.name` is refused (only `kmirror mirrors` pauses and
//! resumes a topic, and each partition's way to PAUSED is logged), `kafka-topics --delete` of a
//! mirroring topic is refused until `--stop`, after which deleting it releases its partitions
//! (nothing left fetching or FAILED) and the topic can be started again (by a regular
//! expression) and mirrors from scratch; a deleted source topic fails the partitions, as
//! `--describe --failed` shows.

use super::process::{
    create_mirror, free_port, produce, spawn_broker, spawn_broker_with, wait_described,
};
use kmirror_protocol::kafka_tools::{self, kafka_tool_output};
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::source::{source_client, source_ends};
use std::time::{Duration, Instant};

/// Runs one of Kafka's tools off the test's runtime: whether it succeeded, and its output.
async fn tool_output(class: &'static str, args: Vec<String>) -> (bool, String) {
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kafka_tool_output(class, &args)
    })
    .await
    .expect("ran");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Runs one of Kafka's tools; panics with its output when it fails.
async fn tool(class: &'static str, args: Vec<String>) {
    let (ok, text) = tool_output(class, args).await;
    assert!(ok, "{class}: {text}");
}

/// `kafka-configs --alter --add-config mirror.name=VALUE` on `topic`: whether it succeeded.
async fn set_mirror_name(address: &str, topic: &str, value: &str) -> (bool, String) {
    let args = [
        "--bootstrap-server",
        address,
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--alter",
        "--add-config",
        &format!("mirror.name={value}"),
    ];
    tool_output(
        "org.apache.kafka.tools.ConfigCommand",
        args.iter().map(|a| a.to_string()).collect(),
    )
    .await
}

/// `kafka-topics --delete` of `topic`: whether it succeeded.
async fn delete_topic(address: &str, topic: &str) -> (bool, String) {
    let args = ["--bootstrap-server", address, "--delete", "--topic", topic];
    tool_output(
        "org.apache.kafka.tools.TopicCommand",
        args.iter().map(|a| a.to_string()).collect(),
    )
    .await
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn kafka_configs_and_topic_deletion_wait_for_the_mirror_rpcs() {
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let (port_a, port_b) = (free_port(), free_port());
    let (a, b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
    let _source = spawn_broker(dir_a.path(), port_a);
    let _destination = spawn_broker_with(dir_b.path(), port_b, "kmirror.log.format=json\n");
    let topic = format!("metadata-{}", std::process::id());
    let (bootstrap, name) = (a.clone(), topic.clone());
    tokio::task::spawn_blocking(move || kafka_tools::create_topic(&bootstrap, &name, 2, &[]))
        .await
        .expect("created");
    produce(&a, &topic, 2_000).await;
    create_mirror(dir_b.path(), &b, "dr", &a);
    let (code, text) = mirrors_cli(&b, &["--start", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let source = source_client(&a).await;
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;

    // kafka-configs cannot pause it (nor make any topic a mirror topic): mirror.name is the
    // mirror RPCs' alone.
    let (ok, text) = set_mirror_name(&b, &topic, "dr.paused").await;
    assert!(!ok, "{text}");
    assert!(text.contains("mirror.name"), "{text}");
    wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;
    // kmirror mirrors pauses it: the destination stays where it is while the source grows.
    let (code, text) = mirrors_cli(&b, &["--pause", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    wait_described(&b, "dr", &topic, "PAUSED", &ends).await;
    // B logs JSON lines: each partition's way to PAUSED, with the mirror partition's labels.
    let log = std::fs::read_to_string(dir_b.path().join("broker.log")).expect("B's log");
    let paused: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON log line"))
        .filter(|l| l["fields"]["to"] == "PAUSED" && l["span"]["topic"] == topic.as_str())
        .collect();
    assert_eq!(paused.len(), 2, "{log}");
    for line in &paused {
        assert_eq!(line["fields"]["message"], "mirror partition state changed");
        assert_eq!(line["fields"]["from"], "PAUSING");
        assert_eq!(line["span"]["mirror"], "dr");
        assert_eq!(line["level"], "INFO");
    }
    produce(&a, &topic, 1_000).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_described(&b, "dr", &topic, "PAUSED", &ends).await;
    // ...and resumes it: caught up.
    let (code, text) = mirrors_cli(&b, &["--resume", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;

    // A mirroring topic cannot be deleted: it is stopped first.
    let (ok, text) = delete_topic(&b, &topic).await;
    assert!(!ok, "{text}");
    wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;
    let (code, text) = mirrors_cli(&b, &["--stop", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&b, "dr", &topic, "STOPPED", &after_barrier).await;
    // Deleting the stopped topic releases its partitions: DescribeMirrors no longer lists it.
    let (ok, text) = delete_topic(&b, &topic).await;
    assert!(ok, "{text}");
    wait_listed(&b, &[], 0).await;
    // Started again by a regular expression over the source's topics, it is mirrored from
    // scratch.
    let (code, text) = mirrors_cli(
        &b,
        &["--start", "--mirror", "dr", "--topics", "metadata-[0-9]+"],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains(&format!("{topic}: done")), "{text}");
    wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;
    let log = std::fs::read_to_string(dir_b.path().join("broker.log")).expect("B's log");
    assert!(!log.contains("FAILED"), "nothing failed:\n{log}");
    wait_listed(&b, &["--failed"], 0).await;

    // The source topic deleted: the partitions fail, and `--describe --failed` shows them.
    tool(
        "org.apache.kafka.tools.TopicCommand",
        [
            "--bootstrap-server",
            a.as_str(),
            "--delete",
            "--topic",
            topic.as_str(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect(),
    )
    .await;
    wait_listed(&b, &["--failed"], 2).await;
}

/// Waits until `kmirror mirrors --describe --mirror dr --json EXTRA` lists `count` partitions.
async fn wait_listed(address: &str, extra: &[&str], count: usize) {
    let mut args = vec!["--describe", "--mirror", "dr", "--json"];
    args.extend_from_slice(extra);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, text) = mirrors_cli(address, &args);
        assert_eq!(code, Some(0), "{text}");
        let json: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
        let listed = json.as_array().map_or(0, |p| p.len());
        if listed == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{listed} listed, waiting for {count}: {json}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
