//! Fetching from a distant source (docs/design.md §4, "Fetching across a WAN"), against Apache
//! Kafka as the source and a `kmirror broker` process: with more Fetches allowed than a topic
//! has partitions, a partition with a backlog is read ahead of its log end, and the copy stays
//! byte for byte, every offset once, in order; through a link that cuts connections in the
//! middle of answers (the WAN model, `kmirror_testkit::wan_proxy`), it still does; and
//! DescribeMirrors through a distant link shows the source's offsets of every topic.

use super::assurance::{
    cli_ok, create, create_topic, destination, json_of, metric, produce, wait_until,
};
use kmirror_protocol::kafka_tools::kafka_env;
use kmirror_testkit::local_cluster::scrape_text;
use kmirror_testkit::source::{source_client, source_ends};
use kmirror_testkit::wan_proxy::{WanLink, WanProxy};
use std::time::Duration;

/// The source's REMOTE listener has one address, where one proxy at a time can listen: the
/// tests that put a link there take turns.
static REMOTE_LINK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A proxy over `link` on the REMOTE listener's address, once the last test's proxy let it go
/// (a dropped proxy's runtime shuts down in the background: its listener may outlive it a
/// little).
async fn remote_link(link: WanLink) -> WanProxy {
    let listen = kafka_env("KMIRROR_KAFKA_REMOTE");
    for _ in 0..100 {
        if std::net::TcpListener::bind(&listen).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    WanProxy::start(&listen, &kafka_env("KMIRROR_KAFKA_REMOTE_LISTENER"), link)
}

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

/// A lossy link: the source's answers come through the WAN model (10 ms round trip, 100 KiB
/// windows), which cuts every connection in the middle of an answer once it carried 256 KiB
/// (answers of at most 64 KiB, so a fresh connection always gets some through), while the
/// mirror copies an eight-partition backlog with many Fetches in flight and reads ahead. Each
/// cut fails its Fetch as a whole (retried on a new connection, answers ahead dropped); the
/// copy ends caught up, byte for byte, every offset once (verified once the link healed).
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_link_that_cuts_connections_mid_answer_loses_nothing() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    // The source advertises its REMOTE listener at the proxy's address, so every connection the
    // mirror makes after metadata goes through the link too.
    let _link = REMOTE_LINK.lock().await;
    let proxy = remote_link(WanLink {
        window: Some(100 * 1024),
        cut_after: Some(256 << 10),
        ..WanLink::delay(Duration::from_millis(5))
    })
    .await;
    let topic = format!("wan-{}-cut", std::process::id());
    create_topic(&bootstrap, &topic, 8).await;
    produce(&bootstrap, &topic, 80_000).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "lossy",
        &format!(
            "bootstrap.servers={}\nfetch.max.bytes=16384\nfetch.response.max.bytes=65536\n",
            kafka_env("KMIRROR_KAFKA_REMOTE")
        ),
    );
    cli_ok(
        &address,
        &["--start", "--mirror", "lossy", "--topics", &topic],
    );
    let source = source_client(&bootstrap).await;
    let ends = source_ends(&source, &topic, 8).await;
    wait_until(&address, "lossy", &topic, "caught up", |p| {
        p.len() == 8
            && p.iter().all(|p| {
                p.state == "MIRRORING" && p.destination_offset == ends[p.partition_index as usize]
            })
    })
    .await;
    assert!(proxy.cuts() > 0, "the link cut no connection");
    // Healed for `--verify`, whose 1 MiB answers a fresh connection would never carry whole.
    proxy.heal();
    let scrape = scrape_text(&metrics);
    assert!(
        metric(
            &scrape,
            "kmirror_fetcher_fetches_in_flight",
            &[("mirror", "lossy")]
        )
        .is_some_and(|n| n >= 1.0),
        "{scrape}"
    );
    let text = cli_ok(
        &address,
        &[
            "--verify", "--mirror", "lossy", "--topics", &topic, "--json",
        ],
    );
    for row in json_of(&text).as_array().expect("rows") {
        let partition = row["partition"].as_i64().expect("a partition") as usize;
        assert_eq!(row["verifiedTo"], ends[partition], "{text}");
        assert_eq!(row["differenceOffset"], serde_json::Value::Null, "{text}");
    }
}

/// DescribeMirrors across a distant link (150 ms round trips, the WAN model): the source's
/// offsets of every topic are asked at once, so every partition of every topic shows them
/// within the describe's budget. Asked one after another (a metadata call and two ListOffsets
/// per partition, each a round trip), only the first topic or two fitted it; the others showed
/// no source offset and no lag.
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_describe_across_a_distant_link_shows_every_topics_source_offsets() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let _link = REMOTE_LINK.lock().await;
    let _proxy = remote_link(WanLink::delay(Duration::from_millis(75))).await;
    let topics: Vec<String> = (0..5)
        .map(|i| format!("wan-{}-describe-{i}", std::process::id()))
        .collect();
    for topic in &topics {
        create_topic(&bootstrap, topic, 4).await;
        produce(&bootstrap, topic, 200).await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, address, _metrics) = destination(dir.path());
    create(
        dir.path(),
        &address,
        "distant",
        &format!("bootstrap.servers={}\n", kafka_env("KMIRROR_KAFKA_REMOTE")),
    );
    cli_ok(
        &address,
        &[
            "--start",
            "--mirror",
            "distant",
            "--topics",
            &topics.join(","),
        ],
    );
    let source = source_client(&bootstrap).await;
    let mut ends = Vec::new();
    for topic in &topics {
        let topic_ends = source_ends(&source, topic, 4).await;
        wait_until(&address, "distant", topic, "caught up", |p| {
            p.len() == 4
                && p.iter().all(|p| {
                    p.state == "MIRRORING"
                        && p.destination_offset == topic_ends[p.partition_index as usize]
                })
        })
        .await;
        ends.push(topic_ends);
    }
    let described = describe_all(&address, "distant").await;
    for (topic, topic_ends) in topics.iter().zip(&ends) {
        let partitions = &described
            .iter()
            .find(|t| t.topic_name == *topic)
            .unwrap_or_else(|| panic!("{topic} not described: {described:?}"))
            .partitions;
        assert_eq!(partitions.len(), 4, "{topic}: {partitions:?}");
        for p in partitions {
            let end = topic_ends[p.partition_index as usize];
            assert_eq!(
                (p.source_offset, p.source_high_watermark, p.lag),
                (end, end, 0),
                "{topic}-{}: {described:?}",
                p.partition_index
            );
        }
    }
}

/// One DescribeMirrors of `mirror`: every topic it shows.
async fn describe_all(
    address: &str,
    mirror: &str,
) -> Vec<kmirror_protocol::messages::describe_mirrors_response::DescribedTopic> {
    use kmirror_protocol::client::ClientConfig;
    use kmirror_protocol::client::connection::Connection;
    use kmirror_protocol::messages::DescribeMirrorsRequest;
    let connection = Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connected");
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.into()],
        ..Default::default()
    };
    let (_, answer) = connection
        .send("DescribeMirrors", &request, 0)
        .await
        .expect("described");
    answer.mirrors.into_iter().flat_map(|m| m.topics).collect()
}
