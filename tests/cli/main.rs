//! The `kmirror` binary as an operator runs it.

use std::process::Command;

mod data_dir;
mod hostile_input;
mod validate_only;

fn kmirror(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(args)
        .output()
        .expect("the kmirror binary runs")
}

#[test]
fn version_and_help() {
    let out = kmirror(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kmirror {}", env!("CARGO_PKG_VERSION"))
    );
    let out = kmirror(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("protocol"));
}

#[test]
fn protocol_lists_every_api_and_mirror_error() {
    let out = kmirror(&["protocol"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "   94  CreateMirror",
        "  105  BumpLeaderEpochs",
        "  134  READ_ONLY_TOPIC",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = kmirror(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

#[test]
fn dump_log_prints_batches_and_flags_damage() {
    use kmirror::storage::{LogConfig, OpenFiles, PartitionLog};
    use kmirror_protocol::testing::BatchSpec;

    let dir = tempfile::tempdir().expect("temp dir");
    let (mut log, _) = PartitionLog::open(dir.path(), LogConfig::default(), &OpenFiles::new(64), 0)
        .expect("opens");
    let batch = BatchSpec {
        producer_id: 4,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
        records: 3,
        ..BatchSpec::default()
    }
    .build();
    log.append_as_leader(batch, 2, 0).expect("appends");
    log.append_txn_marker(4, 0, true, 1, 2, 0).expect("commits");
    log.append_pid_reset("src-cluster", 3, 0).expect("resets");
    log.close(0).expect("closes");

    let path = dir.path().to_str().expect("utf-8 path");
    let out = kmirror(&["dump-log", path]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("baseOffset: 0 lastOffset: 2 count: 3"),
        "{text}"
    );
    assert!(
        text.contains("partitionLeaderEpoch: 2 producerId: 4"),
        "{text}"
    );
    assert!(
        text.contains("controlType: COMMIT coordinatorEpoch: 1"),
        "{text}"
    );
    assert!(
        text.contains("controlType: MIRROR_PID_RESET sourceClusterId: src-cluster"),
        "{text}"
    );
    assert!(
        text.contains("Summary: 1 segments, 3 batches, 0 with a bad CRC, 0 unreadable bytes"),
        "{text}"
    );

    // A torn tail is reported and the exit code says so; the file is not changed.
    let segment = dir.path().join(format!("{:020}.log", 0));
    let len = std::fs::metadata(&segment).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("opens")
        .set_len(len - 5)
        .expect("truncates");
    let out = kmirror(&["dump-log", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Stopped at position"));
    assert_eq!(std::fs::metadata(&segment).expect("stat").len(), len - 5);

    let out = kmirror(&["dump-log", "/nonexistent/partition"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/partition"));
}

/// A `kmirror broker` process on a free port, killed when dropped.
struct Broker(std::process::Child, String);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn broker(dir: &std::path::Path) -> Broker {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\n",
            dir.display()
        ),
    )
    .expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the broker starts");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Broker(child, address)
}

#[test]
fn mirrors_are_created_listed_and_deleted_with_script_friendly_exit_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = broker(dir.path());
    let owned_address = broker.1.clone();
    let address = owned_address.as_str();
    // Another broker is the source: any Kafka cluster answers the cluster id lookup.
    let source_dir = tempfile::tempdir().expect("temp dir");
    let source = self::broker(source_dir.path());
    let mirror_config = dir.path().join("dr.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={}\n", source.1)).expect("written");
    let config = mirror_config.to_str().expect("utf-8 path");
    let text = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let create = [
        "mirrors",
        "--bootstrap-server",
        address,
        "--create",
        "--mirror",
        "dr",
    ];
    let mut with_config = create.to_vec();
    with_config.extend(["--mirror-config", config]);
    let out = kmirror(&with_config);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("Created mirror dr."));
    let again = kmirror(&with_config);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(
        text(&again).contains("CLUSTER_MIRROR_ALREADY_EXISTS"),
        "{}",
        text(&again)
    );
    let usage = kmirror(&create);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));

    let listed = kmirror(&["mirrors", "--bootstrap-server", address, "--list", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed));
    let json: serde_json::Value =
        serde_json::from_slice(&listed.stdout).expect("one JSON document");
    assert_eq!(json["mirrors"][0]["mirror"], "dr");
    assert_eq!(json["mirrors"][0]["sourceBootstrap"], source.1.as_str());
    assert!(
        !json["mirrors"][0]["sourceClusterId"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "the source's cluster id was looked up: {json}"
    );
    let table = kmirror(&["mirrors", "--bootstrap-server", address, "--list"]);
    assert!(
        text(&table).lines().any(|l| l.starts_with("dr ")),
        "{}",
        text(&table)
    );

    let delete = [
        "mirrors",
        "--bootstrap-server",
        address,
        "--delete",
        "--mirror",
        "dr",
    ];
    assert_eq!(kmirror(&delete).status.code(), Some(0));
    let gone = kmirror(&delete);
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        text(&gone).contains("UNKNOWN_CLUSTER_MIRROR"),
        "{}",
        text(&gone)
    );
    drop(broker);
    let unreachable = kmirror(&["mirrors", "--bootstrap-server", address, "--list"]);
    assert_eq!(unreachable.status.code(), Some(3), "{}", text(&unreachable));
}

/// `kmirror mirrors --create` with `bootstrap.servers` reaching the destination itself: the
/// cluster id it looks up is the destination's own, and the broker refuses the mirror (exit 1,
/// INVALID_CONFIG saying the source is this cluster) instead of letting a `--start` truncate
/// the topics it would read.
#[test]
fn creating_a_mirror_of_its_own_cluster_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = broker(dir.path());
    let address = broker.1.as_str();
    let mirror_config = dir.path().join("loop.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={address}\n")).expect("written");
    let out = kmirror(&[
        "mirrors",
        "--bootstrap-server",
        address,
        "--create",
        "--mirror",
        "loop",
        "--mirror-config",
        mirror_config.to_str().expect("utf-8 path"),
    ]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("INVALID_CONFIG"), "{text}");
    assert!(text.contains("this cluster"), "{text}");
    let listed = kmirror(&["mirrors", "--bootstrap-server", address, "--list", "--json"]);
    let json: serde_json::Value =
        serde_json::from_slice(&listed.stdout).expect("one JSON document");
    assert_eq!(json["mirrors"], serde_json::json!([]), "no mirror: {json}");
}

/// Issue 17 item 17 (review): a `mirror.source.cluster.id` in the mirror's file must be the id
/// its `bootstrap.servers` answer with: another one is refused at `--create`, naming both.
#[test]
fn creating_a_mirror_with_another_clusters_id_is_refused() {
    let (source_dir, dir) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let source = broker(source_dir.path());
    let destination = broker(dir.path());
    let mirror_config = dir.path().join("wrong.properties");
    std::fs::write(
        &mirror_config,
        format!(
            "bootstrap.servers={}\nmirror.source.cluster.id=not-that-cluster\n",
            source.1
        ),
    )
    .expect("written");
    let out = kmirror(&[
        "mirrors",
        "--bootstrap-server",
        destination.1.as_str(),
        "--create",
        "--mirror",
        "wrong",
        "--mirror-config",
        mirror_config.to_str().expect("utf-8 path"),
    ]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("not-that-cluster") && text.contains("is not the cluster"),
        "{text}"
    );
}

/// The README's "run the main job" command, `kmirror quickstart`, runs to completion with the
/// flag that ends it after the failover: both brokers started, the topic mirrored (every
/// partition MIRRORING, then STOPPED), written on the destination after the failover, the
/// endpoints printed, and its brokers and folder gone afterwards.
#[test]
fn the_readme_quickstart_runs_through_the_failover() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let command = readme
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("cargo run --release -- quickstart"))
        .expect("the README runs the quickstart with cargo run");
    let args: Vec<&str> = command
        .split('#')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip_while(|a| *a != "--")
        .skip(1)
        .chain(["--exit-after-failover"])
        .collect();
    assert_eq!(args.first(), Some(&"quickstart"), "{command}");
    let out = kmirror(&args);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for partition in 0..3 {
        let row = |state: &str| {
            text.lines().any(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.get(2) == Some(&partition.to_string().as_str())
                    && fields.get(3) == Some(&state)
            })
        };
        assert!(
            row("MIRRORING") && row("STOPPED"),
            "partition {partition}:\n{text}"
        );
        assert!(
            text.contains(&format!(
                "Produced 10 records to orders-{partition} on the destination"
            )),
            "{text}"
        );
    }
    assert!(
        text.contains("Metrics for Prometheus: http://127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("--bootstrap-server 127.0.0.1:"), "{text}");
    let folder = text
        .lines()
        .find_map(|l| l.strip_prefix("kmirror quickstart: data and logs in "))
        .expect("the folder is printed");
    assert!(
        !std::path::Path::new(folder.trim()).exists(),
        "{folder} is removed"
    );
}

/// `--describe` of a mirror that does not exist fails (UNKNOWN_CLUSTER_MIRROR, exit 1) instead of
/// printing an empty table; `--watch` honours `--json` (one document per refresh) and ends
/// quietly, exit 0, when its reader goes away (`| head`), instead of panicking.
#[test]
fn describe_refuses_an_unknown_mirror_and_watch_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = broker(dir.path());
    let address = broker.1.clone();
    let source_dir = tempfile::tempdir().expect("temp dir");
    let source = self::broker(source_dir.path());
    let text = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let describe = ["mirrors", "--bootstrap-server", &address, "--describe"];
    let mut unknown = describe.to_vec();
    unknown.extend(["--mirror", "nosuch"]);
    let out = kmirror(&unknown);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("UNKNOWN_CLUSTER_MIRROR"),
        "{}",
        text(&out)
    );
    unknown.push("--json");
    let out = kmirror(&unknown);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json[0]["errorCode"], 137, "{json}");
    assert_eq!(json[0]["mirror"], "nosuch", "{json}");

    let mirror_config = dir.path().join("dr.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={}\n", source.1)).expect("written");
    let created = kmirror(&[
        "mirrors",
        "--bootstrap-server",
        &address,
        "--create",
        "--mirror",
        "dr",
        "--mirror-config",
        mirror_config.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(created.status.code(), Some(0), "{}", text(&created));
    let piped = Command::new("bash")
        .args([
            "-c",
            r#""$0" mirrors --bootstrap-server "$1" --describe --watch 1 --json | head -n 2; echo "exit=${PIPESTATUS[0]}""#,
            env!("CARGO_BIN_EXE_kmirror"),
            &address,
        ])
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&piped.stdout);
    let stderr = String::from_utf8_lossy(&piped.stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        3,
        "two refreshes, then the exit status:\n{stdout}{stderr}"
    );
    for line in &lines[..2] {
        let json: serde_json::Value = serde_json::from_str(line).expect("one JSON per refresh");
        assert!(json.is_array(), "{line}");
    }
    assert_eq!(lines[2], "exit=0", "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
