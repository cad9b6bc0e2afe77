//! Issue 18 items 1, 2 and 10: what an operator sees when `kmirror broker` starts over a
//! damaged metadata log, over a log directory another broker holds, or with a bad setting.
//! Each broker is the binary on a free port with its stderr in a file.

use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror_protocol::testing::BatchSpec;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A `kmirror broker` process, killed when dropped.
struct Process {
    child: Child,
    stderr: PathBuf,
    address: String,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Process {
    /// What it wrote to stderr so far.
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Whether it accepts connections within `limit`, while it runs.
    fn serves_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if std::net::TcpStream::connect(&self.address).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Its exit status, if it exits within `limit`.
    fn exits_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts `kmirror broker` with `properties` (the listener is added) from `cwd`; its config
/// and stderr go to `files`.
fn spawn(files: &Path, name: &str, properties: &str, cwd: &Path) -> Process {
    let port = free_port();
    let config = files.join(format!("{name}.properties"));
    std::fs::write(
        &config,
        format!("listeners=PLAINTEXT://127.0.0.1:{port}\nlog.retention.ms=-1\n{properties}"),
    )
    .expect("config written");
    let stderr = files.join(format!("{name}.stderr"));
    let child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("the broker starts");
    Process {
        child,
        stderr,
        address: format!("127.0.0.1:{port}"),
    }
}

/// Every file under `dir` with its bytes, by path relative to `dir`.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).expect("lists").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("reads");
                out.insert(path.strip_prefix(dir).expect("inside").to_path_buf(), bytes);
            }
        }
    }
    out
}

/// A stopped broker's folder `data`: topics `alpha` (2 partitions) and `beta` (1), each
/// partition holding records; returns the byte offset of each topic's record in
/// `__cluster_metadata/metadata.log`.
fn stopped_broker_with_data(data: &Path) -> (usize, usize) {
    let props = parse_properties(&format!(
        "listeners=PLAINTEXT://127.0.0.1:0\nlog.dirs={}\nlog.retention.ms=-1\n",
        data.display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    let broker = Broker::open(config).expect("opens");
    let now = kmirror::broker::now_ms();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for (topic, partitions) in [("alpha", 2), ("beta", 1)] {
        runtime
            .block_on(broker.create_topic(topic, partitions, 1, BTreeMap::new(), None))
            .expect("creates");
        for p in 0..partitions {
            let batch = BatchSpec {
                records: 10,
                value_size: 100,
                timestamp_ms: now,
                ..BatchSpec::default()
            }
            .build();
            let partition = broker.partition(topic, p).expect("open");
            let mut log = partition.log.lock().expect("log");
            log.append_as_leader(batch, 0, now).expect("appends");
        }
    }
    broker.close().expect("closes");
    let metadata = std::fs::read(data.join("__cluster_metadata/metadata.log")).expect("log");
    let record = |topic: &str| {
        let body = format!(r#"{{"Topic":{{"name":"{topic}""#);
        metadata
            .windows(body.len())
            .position(|w| w == body.as_bytes())
            .expect("the topic's record")
            - 8
    };
    (record("alpha"), record("beta"))
}

/// Flips one bit in the body of the metadata record at `offset`.
fn flip_bit_in_record(data: &Path, offset: usize) {
    let path = data.join("__cluster_metadata/metadata.log");
    let mut bytes = std::fs::read(&path).expect("log");
    bytes[offset + 8 + 20] ^= 0x04;
    std::fs::write(&path, bytes).expect("written");
}

/// Issue 18 item 1: a flipped bit in a metadata record with intact records after it is not a
/// torn tail. The broker refuses to start, naming the file, the offset and the reason, and
/// changes nothing: the log and every partition directory stay as they were.
#[test]
fn a_flipped_bit_inside_the_metadata_log_stops_the_start_naming_the_offset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let (alpha, beta) = stopped_broker_with_data(&data);
    flip_bit_in_record(&data, alpha);
    let before = files_under(&data);

    let mut broker = spawn(
        dir.path(),
        "broker",
        &format!("log.dirs={}\n", data.display()),
        dir.path(),
    );
    let status = broker
        .exits_within(Duration::from_secs(60))
        .expect("the broker refuses to start");
    let stderr = broker.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let log = data.join("__cluster_metadata/metadata.log");
    for expected in [
        log.display().to_string(),
        format!("byte offset {alpha}"),
        "checksum mismatch".to_string(),
        format!("intact record after it, at byte offset {beta}"),
    ] {
        assert!(stderr.contains(&expected), "{expected:?} in\n{stderr}");
    }
    assert_eq!(files_under(&data), before, "nothing changed");
}

/// Issue 18 item 1: a flipped bit in the last metadata record (nothing intact after it, as
/// after a crash mid-append) is cut and reported, its bytes kept beside the log; the partition
/// directory of the topic that record created is renamed aside (`-stray`) with all its data and
/// reported, never deleted; the other topics' partitions serve their data.
#[test]
fn a_damaged_metadata_log_tail_is_cut_and_partitions_it_no_longer_names_are_kept_aside() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let (_, beta) = stopped_broker_with_data(&data);
    flip_bit_in_record(&data, beta);
    let before = files_under(&data);

    let mut broker = spawn(
        dir.path(),
        "broker",
        &format!("log.dirs={}\n", data.display()),
        dir.path(),
    );
    assert!(
        broker.serves_within(Duration::from_secs(60)),
        "the broker starts:\n{}",
        broker.stderr()
    );
    drop(broker);
    let stderr = std::fs::read_to_string(dir.path().join("broker.stderr")).expect("stderr");
    assert!(
        stderr.contains("cut a damaged tail") && stderr.contains(&format!("offset={beta}")),
        "{stderr}"
    );
    let kept = data.join(format!("__cluster_metadata/metadata.log.damaged-at-{beta}"));
    let metadata = Path::new("__cluster_metadata/metadata.log");
    assert_eq!(
        std::fs::read(&kept).expect("the cut bytes are kept"),
        before[metadata][beta..]
    );

    let strays: Vec<PathBuf> = std::fs::read_dir(&data)
        .expect("lists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("beta-0.") && name.ends_with("-stray")
        })
        .collect();
    assert_eq!(strays.len(), 1, "beta-0 renamed aside: {strays:?}");
    assert!(!data.join("beta-0").exists());
    assert!(
        stderr.contains("renamed aside") && stderr.contains("beta-0 -> "),
        "{stderr}"
    );
    let after = files_under(&data);
    let beta_files: Vec<_> = before
        .iter()
        .filter_map(|(path, bytes)| Some((path.strip_prefix("beta-0").ok()?, bytes)))
        .collect();
    assert!(!beta_files.is_empty());
    let stray = strays[0].strip_prefix(&data).expect("inside");
    for (file, bytes) in beta_files {
        assert_eq!(
            after.get(&stray.join(file)),
            Some(bytes),
            "{} kept in {}",
            file.display(),
            stray.display()
        );
    }
    for partition in ["alpha-0", "alpha-1"] {
        let segment = Path::new(partition).join("00000000000000000000.log");
        assert_eq!(after.get(&segment), before.get(&segment), "{partition}");
        assert!(before[&segment].len() > 1000, "{partition} holds records");
    }
}

/// Hostile report 2026-12-02 finding 3: the partition directory of a 249-character topic (the
/// longest name a topic may have) that no topic owns, as a deletion while the broker was down
/// leaves it, is renamed aside under a name of at most 255 bytes with its data, and the broker
/// starts.
#[test]
fn a_stray_directory_of_a_249_character_topic_is_set_aside_and_the_broker_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    stopped_broker_with_data(&data);
    let topic = "x".repeat(249);
    let stray = data.join(format!("{topic}-0"));
    std::fs::create_dir_all(&stray).expect("created");
    std::fs::write(stray.join("00000000000000000000.log"), b"kept bytes").expect("written");

    let mut broker = spawn(
        dir.path(),
        "broker",
        &format!("log.dirs={}\n", data.display()),
        dir.path(),
    );
    assert!(
        broker.serves_within(Duration::from_secs(60)),
        "the broker starts:\n{}",
        broker.stderr()
    );
    drop(broker);
    let stderr = std::fs::read_to_string(dir.path().join("broker.stderr")).expect("stderr");
    assert!(!stray.exists(), "set aside:\n{stderr}");
    let aside: Vec<String> = std::fs::read_dir(&data)
        .expect("lists")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("xxxx") && name.ends_with("-stray"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}\n{stderr}");
    assert!(
        aside[0].len() <= 255,
        "{} bytes: {}",
        aside[0].len(),
        aside[0]
    );
    assert!(
        aside[0].contains("-0."),
        "the partition is kept: {}",
        aside[0]
    );
    assert_eq!(
        std::fs::read(data.join(&aside[0]).join("00000000000000000000.log")).expect("kept"),
        b"kept bytes"
    );
    assert!(stderr.contains("renamed aside"), "{stderr}");
}

/// Issue 18 item 2: a second broker on a log directory another broker runs on refuses to start
/// and names the directory's `.lock`; the first one goes on serving, and once it is gone (even
/// killed) the directory can be used again.
#[test]
fn a_second_broker_on_the_same_log_dir_refuses_to_start_naming_the_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let properties = format!("log.dirs={}\n", data.display());
    let mut first = spawn(dir.path(), "first", &properties, dir.path());
    assert!(
        first.serves_within(Duration::from_secs(60)),
        "{}",
        first.stderr()
    );

    let mut second = spawn(dir.path(), "second", &properties, dir.path());
    let status = second
        .exits_within(Duration::from_secs(60))
        .expect("the second broker refuses to start");
    let stderr = second.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&data.join(".lock").display().to_string()) && stderr.contains("is in use"),
        "{stderr}"
    );
    assert!(
        std::net::TcpStream::connect(&first.address).is_ok(),
        "the first broker still serves"
    );

    drop(first);
    let mut third = spawn(dir.path(), "third", &properties, dir.path());
    assert!(
        third.serves_within(Duration::from_secs(60)),
        "the directory is free once its broker is gone:\n{}",
        third.stderr()
    );
}

/// Issue 18 item 10: settings that used to start a broker that could not work are refused
/// before anything is written, with the key named: an empty `log.dirs` (which wrote into the
/// working directory), several log directories (all but the first were ignored), a negative
/// `node.id` and a `log.segment.bytes` below Kafka's minimum.
#[test]
fn bad_broker_settings_stop_the_start_with_the_key_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = tempfile::tempdir().expect("working directory");
    let data = dir.path().join("data");
    for (name, properties, expected) in [
        ("empty-dirs", "log.dirs=\n".to_string(), "log.dirs="),
        (
            "two-dirs",
            format!("log.dirs={0}/a,{0}/b\n", dir.path().display()),
            "log.dirs=",
        ),
        (
            "node",
            format!("log.dirs={}\nnode.id=-1\n", data.display()),
            "node.id=-1",
        ),
        (
            "segment",
            format!("log.dirs={}\nlog.segment.bytes=1\n", data.display()),
            "log.segment.bytes=1",
        ),
    ] {
        let mut broker = spawn(dir.path(), name, &properties, cwd.path());
        let status = broker
            .exits_within(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{name}: the broker refuses to start"));
        let stderr = broker.stderr();
        assert_eq!(status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
    assert_eq!(
        std::fs::read_dir(cwd.path()).expect("lists").count(),
        0,
        "nothing written in the working directory"
    );
    for never in ["a", "b", "data"] {
        assert!(!dir.path().join(never).exists(), "{never} was not created");
    }
}
