//! The metadata sync as an operator relies on it at failover, from a real Apache Kafka into a
//! `kmirror broker` process with `authorizer.enabled=true`: a consumer group's offsets committed
//! on Kafka arrive (same offsets), and after `--stop` Kafka's Java consumer in that group reads
//! every remaining record exactly once; partitions added on the source are added and mirrored;
//! topic configs changed on the source arrive except the excluded ones; an ACL created on the
//! source arrives and is enforced (the Java consumer is refused), and disappears once deleted
//! on the source. `/metrics` is parsed by Prometheus' Python client and shows every catalogued
//! metric, and every metric that the Grafana dashboard and the alerting rules in `dashboards/`
//! query (so an import never shows an empty panel for want of a metric). And the cluster-id
//! guard: a mirror whose source address now reaches another cluster halts, with the reason in
//! `--describe --failed` and in a metric.

use super::process::{
    create_mirror, free_port, produce, spawn_broker, spawn_broker_with, wait_described,
};
use kmirror_actors::metrics::{MetricDef, MetricKind};
use kmirror_protocol::client::SourceClient;
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool_output};
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::eventually;
use kmirror_testkit::source::{source_client, source_ends};
use std::collections::{BTreeSet, HashMap};

/// Runs one of Kafka's tools off the test's runtime: its exit success and output.
async fn tool(class: &'static str, args: Vec<String>) -> (bool, String) {
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kafka_tool_output(class, &args)
    })
    .await
    .expect("ran");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// `kmirror mirrors --create` with these mirror configs.
fn create_mirror_with(dir: &std::path::Path, address: &str, mirror: &str, configs: &str) {
    let path = dir.join(format!("{mirror}.properties"));
    std::fs::write(&path, configs).expect("written");
    let (code, text) = mirrors_cli(
        address,
        &[
            "--create",
            "--mirror",
            mirror,
            "--mirror-config",
            path.to_str().expect("UTF-8"),
        ],
    );
    assert_eq!(code, Some(0), "{text}");
}

/// The metric sample names of a scrape of `http://address/metrics`, as Prometheus' own Python
/// parser reads them (it refuses malformed exposition text).
async fn scrape(address: &str) -> BTreeSet<String> {
    let url = format!("http://{address}/metrics");
    let out = tokio::task::spawn_blocking(move || {
        let python = std::env::var("KMIRROR_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = r#"
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        print(sample.name)
"#;
        std::process::Command::new(python)
            .args(["-c", script, &url])
            .output()
            .expect("python runs")
    })
    .await
    .expect("ran");
    assert!(
        out.status.success(),
        "the scrape does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The catalogued metrics missing from a scrape (a histogram shows as `<name>_bucket`).
fn missing(samples: &BTreeSet<String>) -> Vec<&'static str> {
    let catalogue: Vec<&MetricDef> = kmirror_actors::metrics::CATALOGUE
        .iter()
        .chain(kmirror::metrics::CATALOGUE)
        .collect();
    catalogue
        .into_iter()
        .filter(|def| {
            let sample = match def.kind {
                MetricKind::Histogram => format!("{}_bucket", def.name),
                MetricKind::Counter | MetricKind::Gauge => def.name.to_string(),
            };
            !samples.contains(&sample)
        })
        .map(|def| def.name)
        .collect()
}

/// The Grafana dashboard shipped for operators.
const DASHBOARD: &str = include_str!("../../dashboards/kmirror-mirrors.json");
/// The Prometheus alerting rules shipped for operators.
const ALERTS: &str = include_str!("../../dashboards/kmirror-alerts.yml");

/// The metric names (`kmirror_...` identifiers) in PromQL expressions.
fn metric_names<'a>(exprs: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    let name = regex::Regex::new("kmirror_[a-z0-9_]+").expect("regex");
    exprs
        .into_iter()
        .flat_map(|expr| name.find_iter(expr).map(|m| m.as_str().to_string()))
        .collect()
}

/// The metric names the dashboard's queries (every `expr` field, at any depth) use.
fn dashboard_metrics() -> BTreeSet<String> {
    fn exprs<'a>(value: &'a serde_json::Value, found: &mut Vec<&'a str>) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, value) in fields {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(expr)) => found.push(expr),
                        _ => exprs(value, found),
                    }
                }
            }
            serde_json::Value::Array(values) => values.iter().for_each(|v| exprs(v, found)),
            _ => {}
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(DASHBOARD).expect("dashboards/kmirror-mirrors.json is JSON");
    let mut found = Vec::new();
    exprs(&dashboard, &mut found);
    metric_names(found)
}

/// The metric names the alerting rules' `expr:` values use: on the key's line, or a block
/// (`>-`) on the lines indented below it.
fn alert_metrics() -> BTreeSet<String> {
    let indent = |line: &str| line.len() - line.trim_start().len();
    let mut found = Vec::new();
    let mut lines = ALERTS.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(first) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let mut expr = first.to_string();
        while let Some(more) =
            lines.next_if(|next| next.trim().is_empty() || indent(next) > indent(line))
        {
            expr.push(' ');
            expr.push_str(more.trim());
        }
        found.push(expr);
    }
    metric_names(found.iter().map(String::as_str))
}

/// The catalogued metric a queried name is a series of: itself, or a histogram's
/// `_bucket`, `_sum` or `_count`.
fn catalogued(name: &str) -> Option<&'static MetricDef> {
    let mut defs = kmirror_actors::metrics::CATALOGUE
        .iter()
        .chain(kmirror::metrics::CATALOGUE);
    defs.find(|def| {
        def.name == name
            || (def.kind == MetricKind::Histogram
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name.strip_suffix(suffix) == Some(def.name)))
    })
}

/// The dashboard and the rules query only catalogued metrics (a typo shows here, without a
/// broker), the dashboard shows every engine metric and filters by data source, broker and
/// mirror, and the rules watch lag, states, fetches, the sync and the logs' invariants.
#[test]
fn the_dashboard_and_the_alerts_query_catalogued_metrics() {
    let (dashboard, alerts) = (dashboard_metrics(), alert_metrics());
    let json: serde_json::Value =
        serde_json::from_str(DASHBOARD).expect("dashboards/kmirror-mirrors.json is JSON");
    let variables: Vec<&str> = json["templating"]["list"]
        .as_array()
        .map(|list| list.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(variables, ["datasource", "instance", "mirror"]);
    let unknown: Vec<&String> = dashboard
        .iter()
        .chain(&alerts)
        .filter(|name| catalogued(name).is_none())
        .collect();
    assert!(unknown.is_empty(), "not in a catalogue: {unknown:?}");
    let shown: BTreeSet<&str> = dashboard
        .iter()
        .filter_map(|name| catalogued(name).map(|def| def.name))
        .collect();
    let unshown: Vec<&str> = kmirror_actors::metrics::CATALOGUE
        .iter()
        .map(|def| def.name)
        .filter(|name| !shown.contains(name))
        .collect();
    assert!(
        unshown.is_empty(),
        "engine metrics without a panel: {unshown:?}"
    );
    for watched in [
        "kmirror_mirror_max_lag_records",
        "kmirror_mirror_max_lag_seconds",
        "kmirror_mirror_state_partitions",
        "kmirror_sync_cluster_id_mismatch_mirrors",
        "kmirror_mirror_invariant_violations_total",
        "kmirror_fetcher_last_success_age_seconds",
        "kmirror_sync_errors_total",
    ] {
        assert!(
            alerts.contains(watched),
            "no alert on {watched}: {alerts:?}"
        );
    }
}

/// A `kmirror broker` mirroring another one, its `/metrics` scraped: every metric name that
/// the dashboard's and the alerting rules' queries use is there (a histogram's as its
/// `_bucket`, `_sum` and `_count` series).
#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn every_metric_the_dashboard_and_the_alerts_query_is_scraped() {
    let used: BTreeSet<String> = dashboard_metrics()
        .into_iter()
        .chain(alert_metrics())
        .collect();
    // The engine's 26 metrics, the histogram's three series: the extraction found the queries.
    assert!(used.len() >= 28, "too few metric names found: {used:?}");
    let pair = KmirrorPair::mirroring("watched").await;
    // The verification panels' metrics appear once a verification ran.
    let (code, text) = mirrors_cli(&pair.b, &["--verify", "--mirror", "dr"]);
    assert_eq!(code, Some(0), "{text}");
    let metrics = pair.metrics.clone();
    eventually(
        "the metrics the dashboard and the alerts query, missing from /metrics",
        || async {
            let samples = scrape(&metrics).await;
            used.iter()
                .filter(|name| !samples.contains(*name))
                .cloned()
                .collect::<Vec<String>>()
        },
        |missing| missing.is_empty(),
    )
    .await;
}

/// What a librdkafka consumer (confluent-kafka) in `group` gets first from `topic`: `RECORD`,
/// or the name of the error it is refused with. (Kafka's console consumer leaves a
/// TopicAuthorizationException to a logger it does not bind, and exits 0.)
async fn first_record(address: &str, topic: &str, group: &str) -> String {
    let args = [address.to_string(), topic.to_string(), group.to_string()];
    let out = tokio::task::spawn_blocking(move || {
        let python = std::env::var("KMIRROR_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = r#"
import sys, time
from confluent_kafka import Consumer
c = Consumer({'bootstrap.servers': sys.argv[1], 'group.id': sys.argv[3],
              'auto.offset.reset': 'earliest'})
c.subscribe([sys.argv[2]])
deadline = time.time() + 30
answer = 'NOTHING'
while time.time() < deadline:
    m = c.poll(0.5)
    if m is None:
        continue
    answer = m.error().name() if m.error() else 'RECORD'
    break
c.close()
print(answer)
"#;
        std::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .args(&args)
            .output()
            .expect("python runs")
    })
    .await
    .expect("ran");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A group's committed offsets by partition.
async fn committed(client: &SourceClient, group: &str) -> HashMap<i32, i64> {
    client
        .committed_offsets(group)
        .await
        .map(|c| c.into_iter().map(|c| (c.partition, c.offset)).collect())
        .unwrap_or_default()
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn the_sync_brings_group_offsets_configs_and_acls_for_a_clean_failover() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (topic, group) = (format!("sync-orders-{run}"), format!("sync-readers-{run}"));
    kafka_tools::create_topic(&bootstrap, &topic, 2, &["retention.ms=3600000"]);
    kafka_tools::produce(
        &bootstrap,
        &topic,
        2_000,
        "lz4",
        &[kafka_tools::ROUND_ROBIN],
    );
    let source = source_client(&bootstrap).await;
    // The group has read 42 records of each partition on Kafka.
    {
        let (bootstrap, group, topic) = (bootstrap.clone(), group.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka_tools::reset_group_offsets(&bootstrap, &group, &topic, 42)
        })
        .await
        .expect("offsets reset");
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let (port, metrics_port) = (free_port(), free_port());
    let address = format!("127.0.0.1:{port}");
    let _broker = spawn_broker_with(
        dir.path(),
        port,
        &format!(
            "mirror.metadata.refresh.interval.ms=500\nauthorizer.enabled=true\n\
             allow.everyone.if.no.acl.found=true\nmetrics.listener=http://127.0.0.1:{metrics_port}\n"
        ),
    );
    create_mirror_with(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\nmirror.acls.include=TOPIC;sync-.*\n"),
    );
    let (code, text) = mirrors_cli(&address, &["--start", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let destination = source_client(&address).await;

    // The source grows to 3 partitions: so does the destination, and the new one mirrors.
    let (ok, text) = tool(
        "org.apache.kafka.tools.TopicCommand",
        strings(&[
            "--bootstrap-server",
            &bootstrap,
            "--alter",
            "--topic",
            &topic,
            "--partitions",
            "3",
        ]),
    )
    .await;
    assert!(ok, "{text}");
    {
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka_tools::produce(&bootstrap, &topic, 3_000, "lz4", &[])
        })
        .await
        .expect("produced");
    }
    let ends = source_ends(&source, &topic, 3).await;
    assert!(ends.iter().all(|e| *e > 42), "{ends:?}");
    wait_described(&address, "dr", &topic, "MIRRORING", &ends).await;

    // The group's offsets arrive unchanged (partition 2 had none on the source).
    let offsets = eventually(
        "the group's offsets on the destination",
        || committed(&destination, &group),
        |c| c.len() == 2 && c.values().all(|o| *o == 42),
    )
    .await;
    assert_eq!(offsets, HashMap::from([(0, 42), (1, 42)]));

    // Config changes on the source arrive, except the excluded min.insync.replicas.
    let (ok, text) = tool(
        "org.apache.kafka.tools.ConfigCommand",
        strings(&[
            "--bootstrap-server",
            &bootstrap,
            "--entity-type",
            "topics",
            "--entity-name",
            &topic,
            "--alter",
            "--add-config",
            "retention.ms=7200000,min.insync.replicas=1,max.message.bytes=2000000",
        ]),
    )
    .await;
    assert!(ok, "{text}");
    let configs = eventually(
        "the source's config changes on the destination",
        || async {
            destination
                .describe_topic_configs(&topic)
                .await
                .map(|entries| {
                    entries
                        .into_iter()
                        .filter(|e| e.source == 1)
                        .map(|e| (e.name, e.value.unwrap_or_default()))
                        .collect::<HashMap<_, _>>()
                })
                .unwrap_or_default()
        },
        |c| c.get("max.message.bytes").map(String::as_str) == Some("2000000"),
    )
    .await;
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some("7200000")
    );
    assert_eq!(
        configs.get("min.insync.replicas"),
        None,
        "excluded: {configs:?}"
    );

    // An ACL created on the source arrives and is enforced: the topic now has ACLs and none
    // allows the anonymous Java consumer.
    let acl = |action: &'static str| {
        strings(&[
            "--bootstrap-server",
            &bootstrap,
            action,
            "--force",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            &topic,
        ])
    };
    let (ok, text) = tool("org.apache.kafka.tools.AclCommand", acl("--add")).await;
    assert!(ok, "{text}");
    let has_bob = |acls: &Vec<kmirror_protocol::client::source::AclBinding>| {
        acls.iter()
            .any(|a| a.resource_name == topic && a.principal == "User:bob" && a.operation == 3)
    };
    eventually(
        "the ACL on the destination",
        || async { destination.describe_acls().await.unwrap_or_default() },
        has_bob,
    )
    .await;
    let consume = |group: String, timeout_ms: &'static str| {
        tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            strings(&[
                "--bootstrap-server",
                &address,
                "--topic",
                &topic,
                "--group",
                &group,
                "--formatter-property",
                "print.partition=true",
                "--formatter-property",
                "print.offset=true",
                "--timeout-ms",
                timeout_ms,
            ]),
        )
    };
    let intruder = format!("sync-intruder-{run}");
    let first = first_record(&address, &topic, &intruder).await;
    assert_eq!(
        first, "TOPIC_AUTHORIZATION_FAILED",
        "refused while the ACL exists"
    );
    let (ok, text) = tool("org.apache.kafka.tools.AclCommand", acl("--remove")).await;
    assert!(ok, "{text}");
    eventually(
        "the ACL gone from the destination",
        || async { destination.describe_acls().await.unwrap_or_default() },
        |acls| !has_bob(acls),
    )
    .await;
    let first = first_record(&address, &topic, &intruder).await;
    assert_eq!(first, "RECORD", "allowed again once the ACL is gone");

    // Every catalogued metric is scraped, in a format Prometheus parses (the verification's
    // once a verification ran: the mirror is the source's copy).
    let (code, text) = mirrors_cli(&address, &["--verify", "--mirror", "dr"]);
    assert_eq!(code, Some(0), "{text}");
    let metrics_address = format!("127.0.0.1:{metrics_port}");
    let samples = eventually(
        "every catalogued metric in /metrics",
        || scrape(&metrics_address),
        |s| missing(s).is_empty(),
    )
    .await;
    assert!(samples.contains("kmirror_sync_runs_total"), "{samples:?}");

    // Failover: the group continues on the destination where it left off on the source.
    let (code, text) = mirrors_cli(&address, &["--stop", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&address, "dr", &topic, "STOPPED", &after_barrier).await;
    let (_, text) = consume(group.clone(), "10000").await;
    let record = regex::Regex::new(r"Partition:(\d+)\s+Offset:(\d+)").expect("regex");
    let mut seen: Vec<(i32, i64)> = record
        .captures_iter(&text)
        .map(|c| {
            (
                c[1].parse().expect("partition"),
                c[2].parse().expect("offset"),
            )
        })
        .collect();
    let read = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), read, "no record read twice");
    // Partition 2 had no committed offset: the consumer starts at its end (latest), as on Kafka.
    let expected: Vec<(i32, i64)> = (0..2)
        .flat_map(|p| (42..ends[p as usize]).map(move |o| (p, o)))
        .collect();
    assert_eq!(
        seen.len(),
        expected.len(),
        "{}",
        &text[..text.len().min(2000)]
    );
    assert_eq!(
        seen, expected,
        "every record after the committed offsets, once"
    );
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka's tools: run scripts/test.sh"]
async fn a_source_that_became_another_cluster_halts_the_mirror() {
    let dir_a2 = tempfile::tempdir().expect("temp dir");
    // Every field bound: the folders and the destination live to the end of the test.
    let KmirrorPair {
        _dirs,
        source,
        _destination,
        port_a,
        b,
        metrics,
    } = KmirrorPair::mirroring("guarded").await;

    // The source's address now reaches a new, empty cluster (another cluster id).
    drop(source);
    let _impostor = spawn_broker(dir_a2.path(), port_a);
    let text = eventually(
        "the mirror halted",
        || async { mirrors_cli(&b, &["--describe", "--mirror", "dr", "--failed"]).1 },
        // (While the source is down the partitions fail and retry; the fetchers and the
        // sync's guard fail them for good with the wrong cluster as the reason, never as
        // deleted topics.)
        |text| text.matches("mirror.source.cluster.id").count() >= 2,
    )
    .await;
    assert!(!text.contains("was deleted"), "{text}");
    // The sync's guard counts the mirror (at its next run, after the fetchers may have seen
    // the impostor first).
    eventually(
        "the sync counted the mismatch",
        || http_get(&metrics),
        |samples| {
            samples
                .lines()
                .any(|l| l.starts_with("kmirror_sync_cluster_id_mismatch_mirrors{mirror=\"dr\"} 1"))
        },
    )
    .await;
}

/// Two `kmirror broker` processes, A the source of mirror `dr` on B (with a metrics
/// listener), a two-partition topic of A started and caught up.
struct KmirrorPair {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    source: super::process::BrokerProcess,
    _destination: super::process::BrokerProcess,
    port_a: u16,
    b: String,
    metrics: String,
}

impl KmirrorPair {
    async fn mirroring(prefix: &str) -> KmirrorPair {
        let (dir_a, dir_b) = (
            tempfile::tempdir().expect("temp dir"),
            tempfile::tempdir().expect("temp dir"),
        );
        let (port_a, port_b, metrics_port) = (free_port(), free_port(), free_port());
        let (a, b) = (format!("127.0.0.1:{port_a}"), format!("127.0.0.1:{port_b}"));
        let source = spawn_broker(dir_a.path(), port_a);
        let destination = spawn_broker_with(
            dir_b.path(),
            port_b,
            &format!(
                "mirror.metadata.refresh.interval.ms=500\nmetrics.listener=http://127.0.0.1:{metrics_port}\n"
            ),
        );
        let topic = format!("{prefix}-{}", std::process::id());
        let (bootstrap, name) = (a.clone(), topic.clone());
        tokio::task::spawn_blocking(move || kafka_tools::create_topic(&bootstrap, &name, 2, &[]))
            .await
            .expect("created");
        produce(&a, &topic, 500).await;
        create_mirror(dir_b.path(), &b, "dr", &a);
        let (code, text) = mirrors_cli(&b, &["--start", "--mirror", "dr", "--topics", &topic]);
        assert_eq!(code, Some(0), "{text}");
        let ends = source_ends(&*source_client(&a).await, &topic, 2).await;
        wait_described(&b, "dr", &topic, "MIRRORING", &ends).await;
        KmirrorPair {
            _dirs: (dir_a, dir_b),
            source,
            _destination: destination,
            port_a,
            b,
            metrics: format!("127.0.0.1:{metrics_port}"),
        }
    }
}

/// The text of `http://address/metrics` (a plain HTTP/1.0 GET).
async fn http_get(address: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: kmirror\r\n\r\n")
        .await
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).await.expect("response");
    body
}

/// A consumer group of KIP-848's protocol on the source (Kafka 4.4's ConsoleConsumer with
/// `group.protocol=consumer` read 300 records and committed): the sync brings its offsets, and
/// after `--stop` the same group, again with the new protocol and now on the `kmirror broker`,
/// reads every remaining record exactly once.
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_consumer_protocol_groups_offsets_are_synced_and_it_resumes_there_after_failover() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (topic, group) = (
        format!("sync-kip848-{run}"),
        format!("kip848-readers-{run}"),
    );
    kafka_tools::create_topic(&bootstrap, &topic, 2, &[]);
    {
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            kafka_tools::produce(&bootstrap, &topic, 1_000, "zstd", &[])
        })
        .await
        .expect("produced");
    }
    let consume = |address: &str, max: &'static str| {
        tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            strings(&[
                "--bootstrap-server",
                address,
                "--topic",
                &topic,
                "--group",
                &group,
                "--from-beginning",
                "--consumer-property",
                "group.protocol=consumer",
                "--formatter-property",
                "print.partition=true",
                "--formatter-property",
                "print.offset=true",
                "--max-messages",
                max,
                "--timeout-ms",
                "15000",
            ]),
        )
    };
    let record = regex::Regex::new(r"Partition:(\d+)\s+Offset:(\d+)").expect("regex");
    let read = |text: &str| -> Vec<(i32, i64)> {
        record
            .captures_iter(text)
            .map(|c| {
                (
                    c[1].parse().expect("partition"),
                    c[2].parse().expect("offset"),
                )
            })
            .collect()
    };
    let (_, text) = consume(&bootstrap, "300").await;
    assert_eq!(read(&text).len(), 300, "{text}");
    let source = source_client(&bootstrap).await;
    let on_source = committed(&source, &group).await;
    assert_eq!(on_source.values().sum::<i64>(), 300, "{on_source:?}");

    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let _broker = spawn_broker_with(
        dir.path(),
        port,
        "mirror.metadata.refresh.interval.ms=500\n",
    );
    create_mirror_with(
        dir.path(),
        &address,
        "dr",
        &format!("bootstrap.servers={bootstrap}\n"),
    );
    let (code, text) = mirrors_cli(&address, &["--start", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&address, "dr", &topic, "MIRRORING", &ends).await;
    let destination = source_client(&address).await;
    eventually(
        "the consumer-protocol group's offsets on the destination",
        || committed(&destination, &group),
        |c| *c == on_source,
    )
    .await;

    let (code, text) = mirrors_cli(&address, &["--stop", "--mirror", "dr", "--topics", &topic]);
    assert_eq!(code, Some(0), "{text}");
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&address, "dr", &topic, "STOPPED", &after_barrier).await;
    let (_, text) = consume(&address, "700").await;
    let mut seen = read(&text);
    let count = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), count, "no record read twice");
    let expected: Vec<(i32, i64)> = (0..2)
        .flat_map(|p| {
            let from = on_source.get(&p).copied().unwrap_or(0);
            (from..ends[p as usize]).map(move |o| (p, o))
        })
        .collect();
    assert_eq!(
        seen, expected,
        "every record after the synced offsets, once"
    );
}
