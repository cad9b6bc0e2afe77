//! Hostile clients against a real `kmirror broker` process (issue 18's exhaustion attacks).
//!
//! Each test starts its own broker on free ports, runs one attack over raw sockets, then checks
//! what a user would: that a producer and a consumer (this project's client) still work and,
//! where the attack held resources, that the broker's descriptors (`/proc/PID/fd`) and memory
//! (`VmRSS` of `/proc/PID/status`) came back near where they were before it. Brokers are killed
//! when a test ends, passing or not.
//!
//! The broker is the binary `KMIRROR_HOSTILE_BROKER` names (`scripts/test.sh` builds the release
//! binary an operator runs and names it), else this build's `kmirror`.

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, FetchRequest, ProduceRequest, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::testing::BatchSpec;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// This test process may hold as many descriptors as its hard limit allows (the attacks open
/// a thousand sockets; a soft limit of 1024 is common).
fn raise_own_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    setrlimit(Resource::Nofile, raised).expect("raises the soft descriptor limit");
}

/// A `kmirror broker` process over a temporary directory, with Prometheus metrics on; killed
/// when dropped.
struct Broker {
    dir: tempfile::TempDir,
    port: u16,
    metrics_port: u16,
    child: Child,
}

impl Broker {
    /// Starts a broker with `extra` lines in its `server.properties` and waits until it listens.
    fn start(extra: &str) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let metrics_port = free_port();
        std::fs::write(
            dir.path().join("server.properties"),
            format!(
                "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n\
                 mirror.state.topic.num.partitions=1\n\
                 metrics.listener=http://127.0.0.1:{metrics_port}\n{extra}",
                dir.path().join("data").display()
            ),
        )
        .expect("server.properties written");
        let log = std::fs::File::create(dir.path().join("broker.log")).expect("broker.log");
        let binary = std::env::var_os("KMIRROR_HOSTILE_BROKER").map_or_else(
            || PathBuf::from(env!("CARGO_BIN_EXE_kmirror")),
            PathBuf::from,
        );
        let child = Command::new(&binary)
            .args(["broker", "--config"])
            .arg(dir.path().join("server.properties"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{} broker does not start: {e}", binary.display()));
        let mut broker = Broker {
            dir,
            port,
            metrics_port,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(broker.address()).is_err() {
            if let Ok(Some(status)) = broker.child.try_wait() {
                panic!("the broker exited at start ({status}):\n{}", broker.log());
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not listen in 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn socket_address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn proc_path(&self, file: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{file}", self.child.id()))
    }

    /// Descriptors the broker holds.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(self.proc_path("fd"))
            .expect("/proc/PID/fd")
            .count()
    }

    /// Descriptors the broker holds once the connections of earlier requests are gone (the
    /// baseline attacks are measured against).
    async fn quiet_fds(&self) -> usize {
        assert!(
            eventually(Duration::from_secs(10), || {
                self.metric("kmirror_broker_connections") == 0.0
            })
            .await,
            "client connections linger"
        );
        // The scrape's own connection closes just after its answer.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.open_fds()
    }

    /// Resident memory, MiB.
    fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(self.proc_path("status")).expect("/proc/PID/status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kib / 1024
    }

    /// CPU time used so far (user and system), seconds.
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(self.proc_path("stat")).expect("/proc/PID/stat");
        // Fields after the command's closing parenthesis: utime and stime are the 12th and
        // 13th, in clock ticks (USER_HZ, 100 on Linux).
        let fields: Vec<u64> = stat
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .map(|f| f.parse().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default();
        (fields[11] + fields[12]) as f64 / 100.0
    }

    /// Sets the broker's soft descriptor limit to `limit` (its hard limit, inherited from this
    /// process, stays, so the limit can be raised again).
    fn limit_descriptors(&self, limit: u64) {
        use rustix::process::{Pid, Resource, Rlimit, getrlimit, prlimit};
        prlimit(
            Some(Pid::from_child(&self.child)),
            Resource::Nofile,
            Rlimit {
                current: Some(limit),
                maximum: getrlimit(Resource::Nofile).maximum,
            },
        )
        .expect("prlimit on the broker");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    /// The answer of the metrics listener to `request` (a whole HTTP request).
    fn http(&self, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port))
            .expect("the metrics listener accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        stream.write_all(request.as_bytes()).expect("writes");
        let mut text = String::new();
        stream
            .read_to_string(&mut text)
            .expect("an answer, then the close");
        text
    }

    /// The sum of `name`'s samples on `/metrics` (0 when not exported yet).
    fn metric(&self, name: &str) -> f64 {
        self.http("GET /metrics HTTP/1.1\r\nHost: kmirror\r\nConnection: close\r\n\r\n")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split([' ', '{']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 100 ms until it holds or `limit` passes; whether it held.
async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn within<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {limit:?}"))
}

fn name(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A request frame: size, header, body.
fn frame<R: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    request: &R,
) -> Vec<u8> {
    let mut body = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(name("hostile")))
        .encode(&mut body, R::header_version(version))
        .expect("encodes");
    request.encode(&mut body, version).expect("encodes");
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// ApiVersions v0: the smallest request every broker answers.
fn api_versions(correlation_id: i32) -> Vec<u8> {
    frame(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &kafka_protocol::messages::ApiVersionsRequest::default(),
    )
}

/// A Fetch v12 of `topic`-0 from `offset`.
fn fetch_request(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(name(topic)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ])
}

/// Reads one response frame; its correlation id and the rest, or None if the connection
/// closed first.
async fn response(stream: &mut TcpStream) -> Option<(i32, Vec<u8>)> {
    let size = stream.read_i32().await.ok()?;
    let mut body = vec![0u8; usize::try_from(size).ok()?];
    stream.read_exact(&mut body).await.ok()?;
    let correlation_id = i32::from_be_bytes(body.get(..4)?.try_into().ok()?);
    Some((correlation_id, body))
}

/// Whether the broker closed `stream` (end of stream or reset) within `limit`; false if it is
/// still open (or sent bytes).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(limit, stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// Connects from the loopback address `source` (any 127.x.y.z is this host), so per-address
/// limits can be tested apart from other connections.
async fn connect_from(source: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((IpAddr::from(source), 0)))?;
    socket.connect(to).await
}

async fn client(address: &str) -> Connection {
    within(
        "connecting a client",
        Duration::from_secs(30),
        Connection::connect(address, &ClientConfig::plaintext(address), None),
    )
    .await
    .expect("a client connects")
}

async fn create_topic(address: &str, topic: &str) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(name(topic)))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
    let connection = client(address).await;
    let (_, answer) = within(
        "CreateTopics",
        Duration::from_secs(30),
        connection.send("CreateTopics", &request, 7),
    )
    .await
    .expect("CreateTopics answered");
    assert_eq!(answer.topics[0].error_code, 0, "creating {topic}");
}

/// Produces `records` records to `topic`-0 (acks=all); the base offset.
async fn produce(address: &str, topic: &str, records: usize) -> i64 {
    let batch = BatchSpec {
        records,
        ..BatchSpec::default()
    }
    .build();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(name(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ]),
        ]);
    let connection = client(address).await;
    let (_, answer) = within(
        "Produce",
        Duration::from_secs(30),
        connection.send("Produce", &request, 11),
    )
    .await
    .expect("Produce answered");
    let partition = &answer.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 0, "producing to {topic}");
    partition.base_offset
}

/// A Fetch of `topic`-0 from `offset` on a client connection: the partition's error and
/// records.
async fn fetch(address: &str, topic: &str, offset: i64, max_wait_ms: i32) -> (i16, Bytes) {
    let connection = client(address).await;
    let (_, answer) = within(
        "Fetch",
        Duration::from_secs(60),
        connection.send("Fetch", &fetch_request(topic, offset, max_wait_ms), 12),
    )
    .await
    .expect("Fetch answered");
    let partition = &answer.responses[0].partitions[0];
    (
        partition.error_code,
        partition.records.clone().unwrap_or_default(),
    )
}

/// A producer and a consumer still work: a new topic takes 5 records and gives them back;
/// with `KMIRROR_PYTHON` set (`scripts/test.sh` sets it), a librdkafka producer and consumer
/// group then do the same on another new topic.
async fn assert_serves(broker: &Broker, topic: &str) {
    let address = broker.address();
    create_topic(&address, topic).await;
    let base = produce(&address, topic, 5).await;
    let (error, records) = fetch(&address, topic, base, 500).await;
    assert_eq!(error, 0, "fetching {topic}");
    let fetched: i32 = RecordBatches::new(records)
        .map(|b| b.expect("a whole batch").records_count())
        .sum();
    assert_eq!(fetched, 5, "records read back from {topic}");
    let Some(python) = std::env::var_os("KMIRROR_PYTHON") else {
        return;
    };
    let real = format!("{topic}-librdkafka");
    create_topic(&address, &real).await;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile/librdkafka_serves.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args([address.as_str(), real.as_str(), "100"])
        .kill_on_drop(true)
        .output();
    let out = within("librdkafka's round trip", Duration::from_secs(120), out)
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "librdkafka could not produce and consume {real}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 18, item 5: with its descriptors exhausted the broker neither spins on accept nor
/// floods its log; once clients leave it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_backs_off_and_logs_little_when_descriptors_run_out() {
    raise_own_descriptor_limit();
    let broker = Broker::start("");
    assert_serves(&broker, "before").await;
    let baseline = broker.quiet_fds().await;
    // Room for 20 more descriptors, then 100 clients: the kernel completes the handshakes of
    // those the broker cannot accept (up to the listener's backlog of 128).
    broker.limit_descriptors(baseline as u64 + 20);
    let mut clients = Vec::new();
    for _ in 0..100 {
        clients.push(
            TcpStream::connect(broker.socket_address())
                .await
                .expect("the kernel completes the handshake"),
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log_before = broker.log().len();
    let cpu_before = broker.cpu_seconds();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let cpu = broker.cpu_seconds() - cpu_before;
    let log = broker.log();
    let new_log = &log[log_before.min(log.len())..];
    let accept_lines = log.lines().filter(|l| l.contains("accept failed")).count();
    assert!(accept_lines >= 1, "the exhaustion is reported:\n{new_log}");
    assert!(accept_lines <= 3, "{accept_lines} accept lines");
    assert!(
        new_log.len() < 10_000,
        "{} log bytes in 4 s of exhaustion",
        new_log.len()
    );
    assert!(cpu < 1.0, "{cpu:.2} s of CPU in 4 s of exhaustion");
    drop(clients);
    assert!(
        eventually(Duration::from_secs(20), || broker.open_fds()
            <= baseline + 4)
        .await,
        "{} descriptors after the clients left, {baseline} before",
        broker.open_fds()
    );
    broker.limit_descriptors(baseline as u64 + 200);
    // The metrics listener needs a descriptor too: asked only now.
    assert!(broker.metric("kmirror_broker_accept_errors_total") >= 1.0);
    assert_serves(&broker, "after-exhaustion").await;
}

/// Issue 18, item 6: a connection that sends nothing, half a frame, or a frame a byte at a
/// time is closed after `connections.max.idle.ms`; one that keeps completing requests is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_after_connections_max_idle_ms() {
    let broker = Broker::start("connections.max.idle.ms=1500\n");
    assert_serves(&broker, "before").await;
    let baseline = broker.quiet_fds().await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(broker.socket_address())
        .await
        .expect("connects");
    let mut half = TcpStream::connect(broker.socket_address())
        .await
        .expect("connects");
    half.write_all(&100i32.to_be_bytes()).await.expect("writes");
    half.write_all(&[0u8; 10]).await.expect("writes");
    let trickle_to = broker.socket_address();
    let trickle = tokio::spawn(async move {
        let mut slow = TcpStream::connect(trickle_to).await.expect("connects");
        // A 1000-byte frame, one byte every 100 ms: each byte is activity, no request ends.
        let mut sent = Vec::from(1000i32.to_be_bytes());
        sent.resize(1004, 0);
        for byte in sent {
            if slow.write_all(&[byte]).await.is_err() {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the trickling connection stayed open for 100 s");
    });
    let mut active = TcpStream::connect(broker.socket_address())
        .await
        .expect("connects");
    let active_task = tokio::spawn(async move {
        // A request every 500 ms for 4 s: never idle.
        for correlation_id in 0..8 {
            active
                .write_all(&api_versions(correlation_id))
                .await
                .expect("the active connection stays open");
            let answer = response(&mut active).await;
            assert_eq!(answer.map(|a| a.0), Some(correlation_id), "answered");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    assert!(closed_within(&mut silent, Duration::from_secs(10)).await);
    let silent_after = started.elapsed();
    assert!(closed_within(&mut half, Duration::from_secs(10)).await);
    let half_after = started.elapsed();
    let trickle_after = trickle.await.expect("trickle task").duration_since(started);
    for (what, after) in [
        ("silent", silent_after),
        ("half a frame", half_after),
        ("trickling", trickle_after),
    ] {
        assert!(
            after >= Duration::from_millis(1200) && after < Duration::from_secs(8),
            "the {what} connection closed after {after:?}"
        );
    }
    active_task
        .await
        .expect("the active connection was served throughout");
    assert!(broker.metric("kmirror_broker_connections_closed_total") >= 3.0);
    assert!(
        eventually(Duration::from_secs(10), || broker.open_fds()
            <= baseline + 2)
        .await,
        "{} descriptors, {baseline} before",
        broker.open_fds()
    );
    assert_serves(&broker, "after-idle").await;
}

/// Issue 18, item 6: `max.connections.per.ip` closes connections beyond it from one address
/// while other addresses connect; a slot freed is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_per_ip_are_closed() {
    let broker = Broker::start("max.connections.per.ip=5\n");
    let to = broker.socket_address();
    let mut held = Vec::new();
    for correlation_id in 0..5 {
        let mut stream = connect_from([127, 0, 0, 2], to).await.expect("connects");
        stream
            .write_all(&api_versions(correlation_id))
            .await
            .expect("writes");
        assert!(
            response(&mut stream).await.is_some(),
            "connection {correlation_id} served"
        );
        held.push(stream);
    }
    let mut sixth = connect_from([127, 0, 0, 2], to).await.expect("connects");
    assert!(
        closed_within(&mut sixth, Duration::from_secs(5)).await,
        "a sixth connection from 127.0.0.2 is closed"
    );
    let mut other = connect_from([127, 0, 0, 3], to).await.expect("connects");
    other.write_all(&api_versions(7)).await.expect("writes");
    assert!(
        response(&mut other).await.is_some(),
        "another address is served"
    );
    drop(held.pop());
    let mut served = false;
    for attempt in 0..50 {
        let mut stream = connect_from([127, 0, 0, 2], to).await.expect("connects");
        if stream.write_all(&api_versions(attempt)).await.is_ok()
            && response(&mut stream).await.is_some()
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the freed slot is given to a new connection");
    assert!(broker.metric("kmirror_broker_connections_closed_total") >= 1.0);
    assert_serves(&broker, "after-per-ip").await;
}

/// Issue 18, item 6: at `max.connections` the broker accepts nothing more; a client waiting
/// in the backlog is served once a connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_wait_until_one_closes() {
    let broker = Broker::start("max.connections=5\n");
    // The start-up probe's connection must be gone from the count first.
    assert!(
        eventually(Duration::from_secs(10), || {
            broker.metric("kmirror_broker_connections") == 0.0
        })
        .await
    );
    let mut held = Vec::new();
    for correlation_id in 0..5 {
        let mut stream = TcpStream::connect(broker.socket_address())
            .await
            .expect("connects");
        stream
            .write_all(&api_versions(correlation_id))
            .await
            .expect("writes");
        assert!(
            response(&mut stream).await.is_some(),
            "connection {correlation_id} served"
        );
        held.push(stream);
    }
    let mut waiting = TcpStream::connect(broker.socket_address())
        .await
        .expect("the kernel completes the handshake");
    waiting.write_all(&api_versions(9)).await.expect("writes");
    assert!(
        tokio::time::timeout(Duration::from_secs(2), response(&mut waiting))
            .await
            .is_err(),
        "a sixth connection is not served while five are open"
    );
    drop(held.pop());
    let answer = within(
        "the waiting client",
        Duration::from_secs(10),
        response(&mut waiting),
    )
    .await;
    assert_eq!(answer.map(|a| a.0), Some(9), "served once a slot freed");
    drop(waiting);
    drop(held);
    assert_serves(&broker, "after-max-connections").await;
}

/// Issue 18, item 7: a Fetch past the log end is answered OFFSET_OUT_OF_RANGE at once, not
/// after its `max_wait_ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_past_the_log_end_is_answered_out_of_range_at_once() {
    let broker = Broker::start("");
    assert_serves(&broker, "events").await;
    let started = Instant::now();
    let (error, _) = fetch(&broker.address(), "events", 1_000, 60_000).await;
    let took = started.elapsed();
    assert_eq!(error, ErrorCode::OFFSET_OUT_OF_RANGE.0);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert_serves(&broker, "after-out-of-range").await;
}

/// Issue 18, item 7: a Fetch never waits longer than `fetch.max.wait.ms`, whatever its
/// `max_wait_ms` (2^31 - 1 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waits_at_most_fetch_max_wait_ms() {
    let broker = Broker::start("fetch.max.wait.ms=1000\n");
    assert_serves(&broker, "events").await;
    let started = Instant::now();
    let (error, records) = fetch(&broker.address(), "events", 5, i32::MAX).await;
    let took = started.elapsed();
    assert_eq!(
        (error, records.len()),
        (0, 0),
        "an empty answer at the log end"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "answered after {took:?}"
    );
    assert_serves(&broker, "after-capped-wait").await;
}

/// Issue 18, item 7: 200 clients each send a Fetch at the log end with `max_wait_ms` 2^31 - 1
/// and disconnect; the broker lets go of their descriptors at once (the default
/// `fetch.max.wait.ms` would hold them 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_fetch_is_released_when_its_client_disconnects() {
    raise_own_descriptor_limit();
    let broker = Broker::start("");
    assert_serves(&broker, "events").await;
    let baseline = broker.quiet_fds().await;
    let request = frame(ApiKey::Fetch, 12, 1, &fetch_request("events", 5, i32::MAX));
    let mut clients = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(broker.socket_address())
            .await
            .expect("connects");
        stream.write_all(&request).await.expect("writes");
        clients.push(stream);
    }
    assert!(
        eventually(Duration::from_secs(10), || broker.open_fds()
            >= baseline + 200)
        .await,
        "the fetches wait ({} descriptors)",
        broker.open_fds()
    );
    drop(clients);
    let released = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || broker.open_fds() <= baseline + 2).await,
        "{} descriptors 5 s after the clients left, {baseline} before",
        broker.open_fds()
    );
    assert!(released.elapsed() < Duration::from_secs(5));
    assert!(broker.metric("kmirror_broker_connections_closed_total") >= 200.0);
    assert_serves(&broker, "after-abandoned-fetches").await;
}

/// Issue 18, item 9: 1,000 connections each declare a 100 MB frame and send 10 bytes of it;
/// the broker's memory follows the bytes received (it took 2.3 GB when it reserved the
/// declared sizes) and comes back once they leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_frame_sizes_are_not_reserved_before_their_bytes_arrive() {
    raise_own_descriptor_limit();
    let broker = Broker::start("");
    assert_serves(&broker, "before").await;
    let baseline_fds = broker.quiet_fds().await;
    let baseline_rss = broker.rss_mib();
    let mut claim = 100_000_000i32.to_be_bytes().to_vec();
    claim.extend_from_slice(&[0, 3, 0, 9, 0, 0, 0, 1, 0xff, 0xff]);
    let mut clients = Vec::new();
    for _ in 0..1000 {
        let mut stream = TcpStream::connect(broker.socket_address())
            .await
            .expect("connects");
        stream.write_all(&claim).await.expect("writes");
        clients.push(stream);
    }
    assert!(
        eventually(Duration::from_secs(20), || broker.open_fds()
            >= baseline_fds + 1000)
        .await,
        "the connections are accepted ({} descriptors)",
        broker.open_fds()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = broker.rss_mib();
    assert!(
        held < baseline_rss + 200,
        "{held} MiB resident with 1,000 claims of 100 MB ({baseline_rss} MiB before)"
    );
    drop(clients);
    assert!(
        eventually(Duration::from_secs(10), || broker.open_fds()
            <= baseline_fds + 2)
        .await,
        "{} descriptors after the clients left, {baseline_fds} before",
        broker.open_fds()
    );
    assert!(
        eventually(Duration::from_secs(10), || broker.rss_mib()
            < baseline_rss + 64)
        .await,
        "{} MiB resident after the clients left, {baseline_rss} MiB before",
        broker.rss_mib()
    );
    assert_serves(&broker, "after-claims").await;
}

/// Issue 18, item 9: with `queued.max.request.bytes`, a frame that reserved the whole pool
/// holds other requests back, unread, until its connection goes; then they are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_max_request_bytes_holds_requests_back_until_the_pool_frees() {
    let pool: i32 = 1_048_576;
    let broker = Broker::start(&format!(
        "socket.request.max.bytes={pool}\nqueued.max.request.bytes={pool}\n"
    ));
    assert_serves(&broker, "before").await;
    let mut hog = TcpStream::connect(broker.socket_address())
        .await
        .expect("connects");
    hog.write_all(&pool.to_be_bytes()).await.expect("writes");
    hog.write_all(&[0, 3, 0, 9, 0, 0, 0, 1])
        .await
        .expect("writes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waiting = TcpStream::connect(broker.socket_address())
        .await
        .expect("connects");
    waiting.write_all(&api_versions(4)).await.expect("writes");
    assert!(
        tokio::time::timeout(Duration::from_secs(2), response(&mut waiting))
            .await
            .is_err(),
        "a request waits while another holds the whole pool"
    );
    drop(hog);
    let answer = within(
        "the held-back request",
        Duration::from_secs(10),
        response(&mut waiting),
    )
    .await;
    assert_eq!(answer.map(|a| a.0), Some(4), "served once the pool freed");
    assert_serves(&broker, "after-pool").await;
}

/// Issue 18, item 11: the metrics listener answers `/metrics` only; other paths are 404 and
/// other methods on it 405.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_on_the_metrics_path_only() {
    let broker = Broker::start("");
    assert_serves(&broker, "events").await;
    let metrics =
        broker.http("GET /metrics HTTP/1.1\r\nHost: kmirror\r\nConnection: close\r\n\r\n");
    assert!(metrics.starts_with("HTTP/1.1 200 "), "{metrics}");
    assert!(
        metrics.contains("kmirror_broker_requests_total"),
        "{metrics}"
    );
    for path in ["/", "/metricsx", "/admin", "/metrics/extra"] {
        let answer = broker.http(&format!(
            "GET {path} HTTP/1.1\r\nHost: kmirror\r\nConnection: close\r\n\r\n"
        ));
        assert!(answer.starts_with("HTTP/1.1 404 "), "{path}: {answer}");
        assert!(!answer.contains("kmirror_broker"), "{path}: {answer}");
    }
    let answer = broker.http(
        "POST /metrics HTTP/1.1\r\nHost: kmirror\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
    assert_serves(&broker, "after-metrics").await;
}
