//! `kmirror broker` processes driven as operators drive them: `kmirror mirrors` for the
//! mirror's lifecycle, DescribeMirrors to watch it, SIGKILL for crashes. Each broker writes its
//! log lines to `broker.log` in its folder (appended across restarts).

use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use kmirror_testkit::cli::mirrors_cli;
use kmirror_testkit::source::{segment, source_client, source_ends};
use std::time::{Duration, Instant};

/// A `kmirror broker` process over `dir` on `port`, killed when dropped; a test that fails
/// while it runs prints the end of its log.
pub(crate) struct BrokerProcess(std::process::Child, std::path::PathBuf);

impl BrokerProcess {
    /// SIGTERM, as an operator stops a broker cleanly, and waits for it to exit.
    pub(crate) fn terminate(&mut self) {
        self.signal("TERM");
        let _ = self.0.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`, ...) to the process.
    pub(crate) fn signal(&self, signal: &str) {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &self.0.id().to_string()])
            .status();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking() {
            // The folder goes with the failed test: what the broker said goes to its output.
            let log = std::fs::read_to_string(&self.1).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(200)..].join("\n");
            eprintln!("--- the last lines of {} ---\n{tail}", self.1.display());
        }
    }
}

/// The first segment of `topic`-`partition` in the `kmirror broker` folder `dir`.
pub(crate) fn kmirror_segment(dir: &std::path::Path, topic: &str, partition: i32) -> Vec<u8> {
    let path = dir
        .join("data")
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log");
    std::fs::read(&path).unwrap_or_else(|e| {
        let found: Vec<String> = path
            .parent()
            .and_then(|folder| std::fs::read_dir(folder).ok())
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        panic!("{}: {e} (the folder holds {found:?})", path.display())
    })
}

/// Kafka's producer writing `records` lz4 records to `topic` at `address`, off the test's
/// runtime.
pub(crate) async fn produce(address: &str, topic: &str, records: u32) {
    let (address, topic) = (address.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        kafka_tools::produce(&address, &topic, records, "lz4", &[]);
    })
    .await
    .expect("produced");
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub(crate) fn spawn_broker(dir: &std::path::Path, port: u16) -> BrokerProcess {
    spawn_broker_with(dir, port, "")
}

/// [`spawn_broker`] with `extra` lines in its `server.properties`.
pub(crate) fn spawn_broker_with(dir: &std::path::Path, port: u16, extra: &str) -> BrokerProcess {
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\nmirror.state.topic.num.partitions=4\n{extra}",
            dir.display()
        ),
    )
    .expect("config written");
    let log_path = dir.join("broker.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("log file");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .stderr(log)
        .spawn()
        .expect("the broker starts");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    BrokerProcess(child, log_path)
}

/// Creates mirror `mirror` of the cluster at `bootstrap` on the broker at `address` with
/// `kmirror mirrors --create` (its config file in `dir`).
pub(crate) fn create_mirror(dir: &std::path::Path, address: &str, mirror: &str, bootstrap: &str) {
    let mirror_config = dir.join(format!("{mirror}.properties"));
    std::fs::write(&mirror_config, format!("bootstrap.servers={bootstrap}\n")).expect("written");
    let config = mirror_config.to_str().expect("a UTF-8 path");
    let (code, text) = mirrors_cli(
        address,
        &["--create", "--mirror", mirror, "--mirror-config", config],
    );
    assert_eq!(code, Some(0), "{text}");
}

/// A `kmirror broker` process over `dir` on a free port, with mirror `dr` of the cluster at
/// `bootstrap` created by `kmirror mirrors --create`; returns it, its port and its address.
pub(crate) fn broker_with_mirror(
    dir: &std::path::Path,
    bootstrap: &str,
) -> (BrokerProcess, u16, String) {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let broker = spawn_broker(dir, port);
    create_mirror(dir, &address, "dr", bootstrap);
    (broker, port, address)
}

/// DescribeMirrors of `mirror`: (state, destination offset) per partition of `topic`.
pub(crate) async fn described(address: &str, mirror: &str, topic: &str) -> Vec<(String, i64)> {
    described_partitions(address, mirror, topic)
        .await
        .into_iter()
        .map(|p| match &p.error_message {
            // A failure shows its reason, so a wait that times out says why.
            Some(error) if p.state == "FAILED" => {
                (format!("FAILED: {error}"), p.destination_offset)
            }
            _ => (p.state.clone(), p.destination_offset),
        })
        .collect()
}

/// `topic`'s partitions as DescribeMirrors of `mirror` at `address` shows them (none while the
/// broker does not answer).
pub(crate) async fn described_partitions(
    address: &str,
    mirror: &str,
    topic: &str,
) -> Vec<kmirror_protocol::messages::describe_mirrors_response::DescribedPartition> {
    use kmirror_protocol::client::connection::Connection;
    use kmirror_protocol::messages::DescribeMirrorsRequest;
    let Ok(connection) =
        Connection::connect(address, &ClientConfig::plaintext(address), None).await
    else {
        return Vec::new();
    };
    let request = DescribeMirrorsRequest {
        mirror_names: vec![mirror.into()],
        ..Default::default()
    };
    let Ok((_, answer)) = connection.send("DescribeMirrors", &request, 0).await else {
        return Vec::new();
    };
    answer
        .mirrors
        .into_iter()
        .flat_map(|m| m.topics)
        .filter(|t| t.topic_name == topic)
        .flat_map(|t| t.partitions)
        .collect()
}

/// Waits until DescribeMirrors of `mirror` shows every partition of `topic` in `state` at the
/// offsets `ends`.
pub(crate) async fn wait_described(
    address: &str,
    mirror: &str,
    topic: &str,
    state: &str,
    ends: &[i64],
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = described(address, mirror, topic).await;
        let wanted: Vec<(String, i64)> = ends.iter().map(|e| (state.to_string(), *e)).collect();
        if now == wanted {
            return;
        }
        if Instant::now() >= deadline {
            let partitions = described_partitions(address, mirror, topic).await;
            panic!("{now:?}, waiting for {wanted:?}; described: {partitions:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kmirror broker` as operators run it: a mirror created and a topic started with
/// `kmirror mirrors`, followed with DescribeMirrors; the broker is killed with SIGKILL while the
/// source keeps growing, restarted, and resumes from `__mirror_state` without gaps or
/// duplicates (its segment files equal Kafka's byte for byte); then `kmirror mirrors --stop`
/// takes the topic to STOPPED, as `--describe --json` shows.
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_broker_process_mirrors_through_the_rpcs_and_resumes_after_sigkill() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("process-mirror-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, 2, &[]);
    kafka_tools::produce(&bootstrap, &topic, 10_000, "lz4", &[]);
    let source = source_client(&bootstrap).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, port, address) = broker_with_mirror(dir.path(), &bootstrap);
    let cli = |args: &[&str]| mirrors_cli(&address, args);
    let start = ["--start", "--mirror", "dr", "--topics", topic.as_str()];
    let (code, text) = cli(&start);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cli(&start);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("TOPIC_ALREADY_IN_CLUSTER_MIRROR"), "{text}");
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&address, "dr", &topic, "MIRRORING", &ends).await;

    // SIGKILL, more data on the source, restart: the mirror resumes where its log ends.
    drop(broker);
    tokio::task::spawn_blocking({
        let (bootstrap, topic) = (bootstrap.clone(), topic.clone());
        move || kafka_tools::produce(&bootstrap, &topic, 5_000, "lz4", &[])
    })
    .await
    .expect("produced");
    let ends = source_ends(&source, &topic, 2).await;
    let broker = spawn_broker(dir.path(), port);
    wait_described(&address, "dr", &topic, "MIRRORING", &ends).await;
    for p in 0..2 {
        let mirrored = kmirror_segment(dir.path(), &topic, p);
        assert!(
            mirrored == segment(&topic, p),
            "partition {p}: {} bytes mirrored, the source has {}",
            mirrored.len(),
            segment(&topic, p).len()
        );
    }

    let (code, text) = cli(&["--describe", "--mirror", "dr", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    for (p, end) in ends.iter().enumerate() {
        let partition = &json[p];
        assert_eq!(partition["sourceOffset"], *end, "{json}");
        assert_eq!(partition["destinationOffset"], *end, "{json}");
        assert_eq!(partition["lag"], 0, "caught up: {json}");
    }
    let (code, text) = cli(&["--stop", "--mirror", "dr", "--topics", topic.as_str()]);
    assert_eq!(code, Some(0), "{text}");
    // The PID reset barrier follows the mirrored data in each partition.
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&address, "dr", &topic, "STOPPED", &after_barrier).await;
    let (code, text) = cli(&["--describe", "--mirror", "dr", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let partitions = json.as_array().cloned().unwrap_or_default();
    assert_eq!(partitions.len(), 2, "{json}");
    assert!(partitions.iter().all(|p| p["state"] == "STOPPED"), "{json}");
    drop(broker);
}

/// Three topics of Apache Kafka in one `kmirror mirrors --start`, then written while mirrored:
/// lz4 (200,000 records), compacted, and a transactional producer with aborts. Each destination
/// partition equals its source segment;
/// Kafka's console consumer (READ_COMMITTED) reads the same records from both clusters; Kafka's
/// producer is refused while the topics are mirrors.
#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn three_kinds_of_topics_mirror_and_read_the_same_from_java() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let (lz4, compacted, input, txn) = (
        format!("three-lz4-{run}"),
        format!("three-compacted-{run}"),
        format!("three-input-{run}"),
        format!("three-txn-{run}"),
    );
    kafka_tools::create_topic(&bootstrap, &lz4, 2, &[]);
    kafka_tools::create_topic(&bootstrap, &compacted, 1, &["cleanup.policy=compact"]);
    kafka_tools::create_topic(&bootstrap, &input, 1, &[]);
    kafka_tools::create_topic(&bootstrap, &txn, 1, &[]);
    let source = source_client(&bootstrap).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let (_broker, _, address) = broker_with_mirror(dir.path(), &bootstrap);
    let topics = format!("{lz4},{compacted},{txn}");
    let (code, text) = mirrors_cli(
        &address,
        &["--start", "--mirror", "dr", "--topics", &topics],
    );
    assert_eq!(code, Some(0), "{text}");
    // Written while the mirror runs (the broker is another process: blocking here is fine).
    kafka_tools::produce(&bootstrap, &lz4, 200_000, "lz4", &[]);
    // A compacted topic takes only keyed records (ProducerPerformance sends none).
    let keyed = kafka_tool(
        "org.apache.kafka.tools.VerifiableProducer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &compacted,
            "--max-messages",
            "5000",
            "--repeating-keys",
            "100",
            "--acks",
            "-1",
        ],
    );
    assert!(
        keyed.contains("\"acked\":5000"),
        "every keyed record is acknowledged:\n{keyed}"
    );
    kafka_tools::produce(&bootstrap, &input, 3_000, "lz4", &[]);
    kafka_tools::copy_transactionally(&bootstrap, &input, &txn, &format!("three-{run}"), 3_000);
    for (topic, partitions) in [(&lz4, 2), (&compacted, 1), (&txn, 1)] {
        let ends = source_ends(&source, topic, partitions).await;
        wait_described(&address, "dr", topic, "MIRRORING", &ends).await;
        for p in 0..partitions {
            let mirrored = kmirror_segment(dir.path(), topic, p);
            assert!(
                mirrored == segment(topic, p),
                "{topic}-{p} differs from the source"
            );
        }
    }

    let console = |server: String, topic: String| {
        tokio::task::spawn_blocking(move || {
            let mut values: Vec<String> = kafka_tool(
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                &[
                    "--bootstrap-server",
                    &server,
                    "--topic",
                    &topic,
                    "--from-beginning",
                    "--isolation-level",
                    "read_committed",
                    "--timeout-ms",
                    "10000",
                ],
            )
            .lines()
            // ProducerPerformance's values: 200 random capital letters.
            .filter(|l| l.len() == 200 && l.bytes().all(|b| b.is_ascii_uppercase()))
            .map(str::to_string)
            .collect();
            values.sort();
            values
        })
    };
    let from_source = console(bootstrap.clone(), txn.clone()).await.expect("ran");
    let from_mirror = console(address.clone(), txn.clone()).await.expect("ran");
    assert_eq!(from_source.len(), 3_000, "each input record committed once");
    assert_eq!(from_mirror, from_source, "the mirror reads like the source");

    let refused = tokio::task::spawn_blocking({
        let (address, lz4) = (address.clone(), lz4.clone());
        move || {
            kafka_tool(
                "org.apache.kafka.tools.VerifiableProducer",
                &[
                    "--bootstrap-server",
                    &address,
                    "--topic",
                    &lz4,
                    "--max-messages",
                    "3",
                    "--acks",
                    "-1",
                ],
            )
        }
    })
    .await
    .expect("ran");
    assert!(
        refused.contains("\"acked\":0"),
        "a mirror topic is read-only: {refused}"
    );
}

/// Kafka's VerifiableProducer ([`kafka_tools::verifiable_produce`]) off the test's runtime.
pub(crate) async fn verifiable_produce(address: &str, topic: &str, count: u32) -> (i64, String) {
    let (address, topic) = (address.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || kafka_tools::verifiable_produce(&address, &topic, count))
        .await
        .expect("ran")
}
