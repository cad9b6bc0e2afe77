//! The prototype's `kafka-cluster-mirrors.sh`, unmodified, drives a kmirror destination whose
//! source is another kmirror broker, as an operator would: create, list, start by names and by
//! pattern, describe (table, `--json`, `--failed`), pause, a second pause refused with the
//! prototype's own exception, resume, stop, produce to the stopped topics, delete (stop, then
//! delete, as the prototype's workflow goes), and the topics stay writable afterwards. The CLI
//! exits 0 after an exception, so every step is checked on what it prints. Records are written
//! and counted with Apache Kafka's own tools (`KMIRROR_KAFKA_DIST`, set by scripts/test.sh).

use kmirror_protocol::kafka_tools::{create_topic, kafka_tool};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A kmirror broker process, killed when dropped.
struct Broker {
    child: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn broker() -> Broker {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        format!(
            // A metadata sync every second: auto-discovery starts new topics within seconds.
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\n\
             mirror.metadata.refresh.interval.ms=1000\n",
            dir.path().display()
        ),
    )
    .expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .stderr(Stdio::null())
        .spawn()
        .expect("the broker starts");
    let address = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(
            Instant::now() < deadline,
            "the broker at {address} never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Broker {
        child,
        address,
        _dir: dir,
    }
}

/// The prototype CLI against `destination`: stdout and stderr together.
fn cli(destination: &Broker, args: &[&str]) -> String {
    let script = super::prototype_dir().join("kafka-cluster-mirrors.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(["--bootstrap-server", &destination.address])
        .args(args)
        .output()
        .expect("the prototype CLI runs");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// `count` records produced to `topic` by Kafka's console producer, all acknowledged.
fn produce(bootstrap: &str, topic: &str, count: usize) {
    let input: String = (0..count).map(|i| format!("record-{i}\n")).collect();
    let mut child = kmirror_protocol::kafka_tools::kafka_tool_command(
        "org.apache.kafka.tools.ConsoleProducer",
        &[
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--producer-property",
            "acks=all",
        ],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("the console producer runs");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("records written");
    let out = child.wait_with_output().expect("the producer ends");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !text.contains("ERROR"),
        "producing to {topic} at {bootstrap} failed: {text}"
    );
}

/// The sum of `topic`'s log end offsets at `bootstrap`.
fn log_end(bootstrap: &str, topic: &str) -> i64 {
    kafka_tool(
        "org.apache.kafka.tools.GetOffsetShell",
        &["--bootstrap-server", bootstrap, "--topic", topic],
    )
    .lines()
    .filter_map(|l| l.rsplit(':').next()?.trim().parse::<i64>().ok())
    .sum()
}

/// Mirror `dr`'s config `key`, as `kmirror mirrors --describe-configs` shows it.
fn mirror_config(destination: &Broker, key: &str) -> Option<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["mirrors", "--bootstrap-server", &destination.address])
        .args(["--describe-configs", "--mirror", "dr"])
        .output()
        .expect("kmirror runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().find_map(|l| {
        l.trim()
            .strip_prefix(&format!("{key}="))
            .map(str::to_string)
    })
}

/// The `--describe --json` rows of mirror `dr`.
fn described(destination: &Broker) -> Vec<serde_json::Value> {
    let text = cli(destination, &["--describe", "--mirror", "dr", "--json"]);
    let json = text
        .lines()
        .find(|l| l.starts_with('['))
        .unwrap_or_else(|| panic!("no JSON rows in {text}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// Waits until every described partition of `topics` is in `state` with no lag; the last rows.
fn wait_for(destination: &Broker, topics: &[&str], state: &str) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = described(destination);
        let ours: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| topics.contains(&r["topic"].as_str().unwrap_or_default()))
            .collect();
        let settled = !ours.is_empty()
            && ours.iter().all(|r| {
                r["state"] == state && (state != "MIRRORING" || r["lag"] == serde_json::json!(0))
            });
        if settled {
            return rows;
        }
        assert!(
            Instant::now() < deadline,
            "{topics:?} never all {state}: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs Java 17, the KIP prototype and Apache Kafka's tools: run scripts/test.sh"]
fn the_prototype_cli_drives_a_kmirror_destination_end_to_end() {
    let (source, destination) = (broker(), broker());
    for (topic, partitions) in [
        ("orders", 2),
        ("payments", 1),
        ("audit-1", 1),
        ("audit-2", 1),
    ] {
        create_topic(&source.address, topic, partitions, &[]);
    }
    for topic in ["orders", "payments", "audit-1", "audit-2"] {
        produce(&source.address, topic, 40);
    }
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        format!("bootstrap.servers={}\n", source.address),
    )
    .expect("written");
    let config_file = config.path().to_str().expect("a UTF-8 path");

    let created = cli(
        &destination,
        &["--create", "--mirror", "dr", "--mirror-config", config_file],
    );
    assert!(created.contains("Created mirror dr"), "{created}");
    let listed = cli(&destination, &["--list"]);
    let row: Vec<&str> = listed
        .lines()
        .find(|l| l.starts_with("dr "))
        .unwrap_or_else(|| panic!("dr is not listed: {listed}"))
        .split_whitespace()
        .collect();
    assert_eq!((row[1], row[3]), ("0", source.address.as_str()), "{listed}");

    // Start by names, then by a pattern.
    let started = cli(
        &destination,
        &["--start", "--mirror", "dr", "--topics", "orders,payments"],
    );
    assert!(!started.contains("Exception"), "{started}");
    let started = cli(
        &destination,
        &["--start", "--mirror", "dr", "--topics", "audit-.*"],
    );
    assert!(!started.contains("Exception"), "{started}");
    let all = ["orders", "payments", "audit-1", "audit-2"];
    let rows = wait_for(&destination, &all, "MIRRORING");
    assert_eq!(
        mirror_config(&destination, "topics.include").as_deref(),
        Some("orders,payments,audit-.*"),
        "the start's patterns are kept"
    );
    assert_eq!(rows.len(), 5, "one row per partition: {rows:#?}");
    for row in &rows {
        for field in [
            "mirror",
            "topic",
            "partition",
            "sourceOffset",
            "destinationOffset",
            "lag",
            "state",
            "retryAttempt",
            "errorMessage",
        ] {
            assert!(row.get(field).is_some(), "no {field} in {row}");
        }
    }
    for topic in all {
        assert_eq!(log_end(&destination.address, topic), 40, "{topic} mirrored");
    }
    // The pattern was kept for auto-discovery: a matching topic created later is mirrored too.
    create_topic(&source.address, "audit-3", 1, &[]);
    produce(&source.address, "audit-3", 7);
    wait_for(&destination, &["audit-3"], "MIRRORING");
    assert_eq!(log_end(&destination.address, "audit-3"), 7);
    let table = cli(&destination, &["--describe", "--mirror", "dr"]);
    assert_eq!(
        table.lines().filter(|l| l.contains("MIRRORING")).count(),
        6,
        "{table}"
    );
    let failed = cli(&destination, &["--describe", "--mirror", "dr", "--failed"]);
    assert!(failed.contains("No failed partitions found"), "{failed}");
    let listed = cli(&destination, &["--list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["dr", "5"])),
        "{listed}"
    );

    // Pause; a second pause is refused with the prototype's exception; resume.
    let paused = cli(
        &destination,
        &["--pause", "--mirror", "dr", "--topics", "orders"],
    );
    assert!(
        paused.contains("Paused mirroring for 1 topic(s)"),
        "{paused}"
    );
    wait_for(&destination, &["orders"], "PAUSED");
    let again = cli(
        &destination,
        &["--pause", "--mirror", "dr", "--topics", "orders"],
    );
    assert!(
        again.contains("MirrorTopicAlreadyPausedException") && !again.contains("Paused mirroring"),
        "{again}"
    );
    let resumed = cli(
        &destination,
        &["--resume", "--mirror", "dr", "--topics", "orders"],
    );
    assert!(
        resumed.contains("Resumed mirroring for 1 topic(s)"),
        "{resumed}"
    );
    produce(&source.address, "orders", 10);
    wait_for(&destination, &all, "MIRRORING");
    assert_eq!(log_end(&destination.address, "orders"), 50);

    // Delete before the stop is refused; stop by names and a pattern; the topics take writes.
    let refused = cli(&destination, &["--delete", "--mirror", "dr"]);
    assert!(
        refused.contains("ClusterMirrorNotEmptyException") && !refused.contains("Deleted mirror"),
        "{refused}"
    );
    let stopped = cli(
        &destination,
        &[
            "--stop",
            "--mirror",
            "dr",
            "--topics",
            "orders,payments,audit-.*",
        ],
    );
    assert!(
        stopped.contains("Stopped mirroring for topics"),
        "{stopped}"
    );
    let all = ["orders", "payments", "audit-1", "audit-2", "audit-3"];
    wait_for(&destination, &all, "STOPPED");
    // The stop took its patterns out of auto-discovery: nothing restarts what failed over.
    assert_eq!(mirror_config(&destination, "topics.include"), None);
    produce(&destination.address, "orders", 5);
    // Each partition ends with the failover barrier (one offset), then the new records.
    assert_eq!(log_end(&destination.address, "orders"), 50 + 2 + 5);

    let deleted = cli(&destination, &["--delete", "--mirror", "dr"]);
    assert!(deleted.contains("Deleted mirror dr"), "{deleted}");
    let listed = cli(&destination, &["--list"]);
    assert!(listed.contains("No mirrors found"), "{listed}");
    // The stopped topics stay, with their data, writable.
    produce(&destination.address, "payments", 5);
    assert_eq!(log_end(&destination.address, "payments"), 40 + 1 + 5);
}
