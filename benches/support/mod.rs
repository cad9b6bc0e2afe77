//! What the process-level benchmarks share: a process's CPU time and peak RSS from `/proc`, free
//! ports, a `kmirror broker` process, stopping processes with SIGTERM, medians, mirror
//! partition ports in memory (the WAN model is `kmirror_testkit::wan_proxy`).

#![allow(dead_code)] // Each benchmark binary uses a part.

pub(crate) mod memory_ports;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// CPU seconds (user + system) a process has used so far; 0 once it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let Some(close) = stat.rfind(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

/// Peak resident set size in MiB; 0 once the process is gone.
pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM:")
}

/// Current resident set size in MiB.
pub(crate) fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` field given in KiB, in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The figures of ConsumerPerformance's summary line (`--hide-header`): start, end,
/// data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
/// fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec.
pub(crate) fn consumer_performance_columns(output: &str) -> Vec<f64> {
    output
        .lines()
        .find(|l| l.matches(',').count() >= 5)
        .expect("consumer summary")
        .split(',')
        .map(|c| c.trim().parse().unwrap_or(f64::NAN))
        .collect()
}

/// A broker of this build in this process, over `dir`, listening nowhere.
pub(crate) fn open_broker(dir: &std::path::Path) -> std::sync::Arc<kmirror::broker::Broker> {
    use kmirror::broker::config::{BrokerConfig, parse_properties};
    let props = parse_properties(&format!(
        "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={}\n",
        dir.display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    std::sync::Arc::new(kmirror::broker::Broker::open(config).expect("opens"))
}

/// A port nothing listens on now.
/// The text of a broker's `/metrics` at `metrics` (`host:port`; a plain HTTP/1.0 GET).
pub(crate) fn scrape(metrics: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(metrics).expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: kmirror\r\n\r\n")
        .expect("request");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("response");
    body
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A `kmirror broker` process (this build) over `dir` with `extra` config lines; its address.
pub(crate) fn spawn_kmirror(dir: &std::path::Path, extra: &str) -> (Child, String) {
    let port = free_port();
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n{extra}",
            dir.join("data").display()
        ),
    )
    .expect("config");
    let log = std::fs::File::create(dir.join("broker.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .stderr(log)
        .spawn()
        .expect("kmirror broker starts");
    let address = format!("127.0.0.1:{port}");
    // A broker reopening 100,000 partitions takes a while (the scale bench restarts one).
    let deadline = Instant::now() + Duration::from_secs(600);
    while std::net::TcpStream::connect(&address).is_err() {
        assert!(Instant::now() < deadline, "kmirror broker did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, address)
}

/// Stops a process with SIGTERM (SIGKILL after 30 s) and reaps it.
pub(crate) fn terminate(child: &mut Child) {
    terminate_within(child, Duration::from_secs(30));
}

/// Stops a process with SIGTERM, SIGKILL after `grace`, and reaps it; whether it exited by
/// itself.
pub(crate) fn terminate_within(child: &mut Child, grace: Duration) -> bool {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + grace;
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let exited = matches!(child.try_wait(), Ok(Some(_)));
    let _ = child.kill();
    let _ = child.wait();
    exited
}

/// The process id a `scripts/kafka-local.sh` data directory records.
pub(crate) fn kafka_pid(data_dir: &str) -> u32 {
    std::fs::read_to_string(format!("{data_dir}/pid"))
        .expect("Kafka's pid file")
        .trim()
        .parse()
        .expect("pid")
}

/// The median of `values` (NaN when empty).
pub(crate) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// `kmirror mirrors --bootstrap-server address ARGS`, which must succeed.
pub(crate) fn mirrors_cli(address: &str, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["mirrors", "--bootstrap-server", address])
        .args(args)
        .output()
        .expect("kmirror mirrors runs");
    assert!(
        out.status.success(),
        "kmirror mirrors {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Kafka's ProducerPerformance writing `records` records of 1 KiB to `topic` as fast as it can
/// (acks=all, 128 KiB batches, `compression`).
pub(crate) fn produce_backlog(bootstrap: &str, topic: &str, records: u64, compression: &str) {
    kmirror_protocol::kafka_tools::kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            "1024",
            "--throughput",
            "-1",
            "--producer-props",
            &format!("bootstrap.servers={bootstrap}"),
            "acks=all",
            "linger.ms=5",
            "batch.size=131072",
            &format!("compression.type={compression}"),
        ],
    );
}

/// A figure of ProducerPerformance's summary line ("N records sent, R records/sec (M MB/sec),
/// A ms avg latency, X ms max latency, P ms 50th, ..."): the number just before `marker`
/// (" records/sec", " MB/sec", " ms 50th", " ms 99th", ...).
pub(crate) fn producer_figure(output: &str, marker: &str) -> f64 {
    let summary = output
        .lines()
        .rfind(|l| l.contains("records sent"))
        .expect("the producer's summary");
    let at = summary.find(marker).expect("the figure in the summary");
    summary[..at]
        .split([' ', '(', ','])
        .rfind(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .expect("a number")
}

/// The log ends of `topic`'s first `partitions` partitions on the cluster at `address`.
pub(crate) fn log_ends(
    runtime: &tokio::runtime::Runtime,
    partitions: i32,
    address: &str,
    topic: &str,
) -> Vec<i64> {
    use kmirror_protocol::client::source::LATEST;
    use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
    runtime.block_on(async {
        let client = SourceClient::connect(ClientConfig::plaintext(address))
            .await
            .expect("connected");
        let metadata = client.metadata(Some(&[topic])).await.expect("metadata");
        let mut ends = Vec::new();
        for p in 0..partitions {
            let leader = metadata.topics[topic].partitions[p as usize].leader;
            let (end, _) = client
                .list_offsets(leader, topic, p, LATEST, Isolation::ReadCommitted)
                .await
                .expect("list offsets");
            ends.push(end);
        }
        ends
    })
}
