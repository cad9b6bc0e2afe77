//! kmirror against MirrorMaker 2 and against the physical reference, Kafka's ConsumerPerformance,
//! on the same source topics in the same run (`scripts/bench.sh mirror_vs_mm2`, which starts the
//! source Kafka, a second Kafka for MirrorMaker 2 to write to, and fetches MirrorMaker 2).
//!
//! For each partition count of `MM2_BENCH_PARTITIONS` (default `1,8,64`) and each of
//! `MM2_BENCH_RUNS` runs (default 3): Kafka's ProducerPerformance writes `MM2_BENCH_MIB` MiB
//! (default 2048) of 1 KiB lz4 records to a new source topic, then, one after the other:
//! 1. ConsumerPerformance reads the topic (the rate at which the source can be read at all);
//! 2. a `kmirror broker` process mirrors it (mirror created and topic started with
//!    `kmirror mirrors`);
//! 3. MirrorMaker 2 in dedicated mode copies it into the second Kafka (`tasks.max` = partitions
//!    up to 8, or `MM2_BENCH_MM2_TASKS`: 1 is MirrorMaker 2's default; lz4 on its producer so
//!    the copy is compressed like the source).
//!
//! Catching up: MB/s and records/s from the first record visible on the destination to the
//! last (ConsumerPerformance: its own `fetch.MB.sec`), and separately the time from start.
//! CPU seconds per GB moved: the mirroring process plus the destination broker (kmirror is
//! both; MirrorMaker 2 and the second Kafka are two processes); the source Kafka's CPU is shown
//! apart. Peak RSS of every process.
//!
//! Then end-to-end lag at a steady rate (`MM2_BENCH_LAG_MBPS`, default 20 MB/s, for
//! `MM2_BENCH_LAG_SECONDS`, default 20): with the mirror running, ProducerPerformance writes at
//! that rate and a reader on the destination fetches every batch as soon as it is visible;
//! each record's lag is the time it became visible minus its batch's newest timestamp (the
//! producer's create time). The reference row reads the source itself.
//!
//! Before each system the bench runs `sync`, so writeback of the previous system's copy does
//! not slow the next one's writes.
//!
//! The table prints medians over the runs and the ratios kmirror/MM2 and kmirror/reference.
//! `MM2_BENCH_SYSTEMS` (e.g. `reference,kmirror`) runs some only (`kmirror1` is kmirror with
//! one Fetch in flight, `mirror.num.replica.fetchers=1`: the defaults before the fetchers
//! paced themselves; it runs only when named), `MM2_BENCH_MAX_SECONDS` (default 1800) stops a
//! copy after that long and takes its rate from what it copied, `MM2_BENCH_LAG_SECONDS=0`
//! skips the lag phase, and `MM2_BENCH_KMIRROR_CONFIGS` (`k=v;k=v`) adds mirror configs for
//! kmirror (e.g. `mirror.fetch.max.bytes=8388608;mirror.num.replica.fetchers=4`).
//!
//! `MM2_BENCH_CATCHUP_LAG_SECONDS` (default 0: skipped) adds, after the systems of each run, a
//! fresh kmirror copying the run's backlog again while a one-partition topic written at 1 MB/s
//! is mirrored beside it; the steady topic's lag p50/p99 (from each record's append at the
//! source: the topic keeps `LogAppendTime`) is printed with how much of the backlog was copied
//! meanwhile. Topics written at a set rate use Kafka's default 16 KiB
//! batches; `MM2_BENCH_STEADY_BATCH_BYTES` (e.g. 262144, the backlog's) sets another size.
//!
//! Cross-region: `MM2_BENCH_DELAY_MS` (default 0) puts the readers of the source (the
//! reference, kmirror, MirrorMaker 2) in "another region": they connect through a proxy
//! (`kmirror_testkit::wan_proxy`) that holds every byte back half that many ms in each direction, so
//! each round trip to the source is that much longer. The proxy listens where the source
//! advertises its REMOTE listener (`KMIRROR_KAFKA_REMOTE`) and forwards to that listener
//! (`KMIRROR_KAFKA_REMOTE_LISTENER`), so clients stay on it after metadata. Producers stay on
//! the source's own listener, undelayed. The link can also be capped: `MM2_BENCH_BANDWIDTH_MBIT`
//! (shared by every connection, each way) and `MM2_BENCH_WINDOW_KIB` (bytes in flight per
//! connection, modelling the source's `socket.send.buffer.bytes`: 100 for Kafka's default), so
//! one connection carries at most window / round trip, as on a real link.

mod support;

use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{
    ClientConfig, FetchPartitionSpec, FetchSpec, Isolation, SourceClient,
};
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use kmirror_testkit::wan_proxy::{WanLink, WanProxy};
use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{
    consumer_performance_columns, cpu_seconds, kafka_pid, median, peak_rss_mib, spawn_kmirror,
    terminate,
};

const RECORD_BYTES: u64 = 1024;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One system's figures in one run.
#[derive(Debug, Clone, Default)]
struct Figures {
    mbps: f64,
    /// Between 10% and 90% of the backlog.
    middle_mbps: f64,
    records_per_s: f64,
    seconds_from_start: f64,
    cpu_per_gb: f64,
    source_cpu_per_gb: f64,
    peak_rss_mib: f64,
    destination_rss_mib: f64,
    lag_p50_ms: f64,
    lag_p99_ms: f64,
}

struct Clusters {
    /// The source's listener for producers (and checks of its end offsets).
    source: String,
    /// The source's listener for readers: REMOTE when delayed, else `source`.
    source_readers: String,
    source_pid: u32,
    target: String,
    target_pid: u32,
    mm2_dist: String,
    /// Extra mirror configs for kmirror (`MM2_BENCH_KMIRROR_CONFIGS`, `k=v;k=v`).
    kmirror_configs: String,
    /// How long a copy may take before its rate is taken from what it copied so far
    /// (`MM2_BENCH_MAX_SECONDS`).
    copy_limit: Duration,
    runtime: tokio::runtime::Runtime,
}

impl Clusters {
    fn client(&self, bootstrap: &str) -> Arc<SourceClient> {
        let mut config = ClientConfig::plaintext(bootstrap);
        config.request_timeout = Duration::from_secs(30);
        Arc::new(
            self.runtime
                .block_on(SourceClient::connect(config))
                .expect("connects"),
        )
    }

    /// The end offsets of `topic`'s partitions on the cluster of `client` (0 for a partition
    /// or topic not there yet).
    fn ends(&self, client: &SourceClient, topic: &str, partitions: u32) -> Vec<i64> {
        self.runtime.block_on(async {
            let Ok(metadata) = client.metadata(Some(&[topic])).await else {
                return vec![0; partitions as usize];
            };
            let Some(t) = metadata.topics.get(topic) else {
                return vec![0; partitions as usize];
            };
            let mut ends = Vec::new();
            for p in 0..partitions as i32 {
                let Some(leader) = t.partitions.get(p as usize).map(|m| m.leader) else {
                    ends.push(0);
                    continue;
                };
                let end = client
                    .list_offsets(leader, topic, p, LATEST, Isolation::ReadUncommitted)
                    .await
                    .map_or(0, |(offset, _)| offset);
                ends.push(end);
            }
            ends
        })
    }
}

/// Waits until `topic` on `client`'s cluster holds `records` records; returns when the first
/// and the last were seen.
/// How a copy went: when the first and the last record were seen, how many were copied, and
/// the rate (MB/s) between 10% and 90% of the records (the copy's pace once started and
/// before its last partitions finish; `None` when it did not get that far).
struct Copied {
    first: Instant,
    last: Instant,
    records: u64,
    middle_mbps: Option<f64>,
}

/// Waits until `records` records of `topic` are on `client`'s cluster, or `limit` after
/// `started`. With a kmirror's `metrics` address, prints its fetcher's Fetches in flight each
/// second.
#[allow(clippy::too_many_arguments)]
fn wait_copied(
    clusters: &Clusters,
    client: &SourceClient,
    topic: &str,
    partitions: u32,
    records: i64,
    started: Instant,
    limit: Duration,
    metrics: Option<&str>,
) -> Copied {
    let mut first = None;
    let mut pacing = Vec::new();
    let (mut at_10, mut at_90) = (None, None);
    loop {
        let copied: i64 = clusters.ends(client, topic, partitions).iter().sum();
        let now = Instant::now();
        if copied > 0 && first.is_none() {
            first = Some(now);
        }
        if at_10.is_none() && copied * 10 >= records {
            at_10 = Some((now, copied));
        }
        if at_90.is_none() && copied * 10 >= records * 9 {
            at_90 = Some((now, copied));
        }
        let second = now.duration_since(started).as_secs();
        if let Some(metrics) = metrics
            && pacing.len() as u64 <= second
        {
            let in_flight: f64 = support::scrape(metrics)
                .lines()
                .filter_map(|l| l.strip_prefix("kmirror_fetcher_fetches_in_flight{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            pacing.push(format!(
                "{second}s:{in_flight}/{:.0}MB",
                copied as f64 / 1e3
            ));
        }
        if copied >= records || now.duration_since(started) >= limit {
            if copied < records {
                eprintln!(
                    "{topic}: {copied} of {records} records copied when the {} s limit came",
                    limit.as_secs()
                );
            }
            if !pacing.is_empty() {
                eprintln!(
                    "{topic}: Fetches in flight (and MB copied) by second: {}",
                    pacing.join(" ")
                );
            }
            let middle_mbps = match (at_10, at_90) {
                (Some((t1, c1)), Some((t2, c2))) if t2 > t1 => Some(
                    (c2 - c1) as f64 * RECORD_BYTES as f64
                        / 1e6
                        / t2.duration_since(t1).as_secs_f64(),
                ),
                _ => None,
            };
            return Copied {
                first: first.unwrap_or(now),
                last: now,
                records: copied.max(0) as u64,
                middle_mbps,
            };
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// ProducerPerformance writing `records` records to `topic`, at `throughput` records per
/// second (-1: as fast as it can). A backlog is written in batches of 256 KiB; a topic written
/// at a set rate, whose lag is timed, in Kafka's default batches (16 KiB, unless
/// `MM2_BENCH_STEADY_BATCH_BYTES` says otherwise): at its rate a batch holds what 5 ms gather
/// either way, but its first ones hold what the producer queued while it connected, and
/// batches of 256 KiB made those 200-260 KB each, two or three windows of a distant link that
/// no fetcher brings over in less than three round trips.
fn produce(bootstrap: &str, topic: &str, records: u64, throughput: i64) {
    let props = format!("bootstrap.servers={bootstrap}");
    let batch = if throughput < 0 {
        262_144
    } else {
        env_or("MM2_BENCH_STEADY_BATCH_BYTES", 16_384)
    };
    kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--record-size",
            &RECORD_BYTES.to_string(),
            "--throughput",
            &throughput.to_string(),
            "--producer-props",
            &props,
            "acks=1",
            "linger.ms=5",
            &format!("batch.size={batch}"),
            "compression.type=lz4",
        ],
    );
}

/// ConsumerPerformance reading the whole topic.
fn reference(clusters: &Clusters, topic: &str, records: u64) -> Figures {
    let dist = kafka_env("KMIRROR_KAFKA_DIST");
    let source_cpu = cpu_seconds(clusters.source_pid);
    let started = Instant::now();
    let child = Command::new("java")
        .arg("-cp")
        .arg(format!("{dist}/libs/*"))
        .arg(format!(
            "-Dlog4j2.configurationFile=file:{dist}/log4j2.properties"
        ))
        .arg("org.apache.kafka.tools.ConsumerPerformance")
        .args([
            "--bootstrap-server",
            &clusters.source_readers,
            "--topic",
            topic,
            "--messages",
            &records.to_string(),
            "--timeout",
            "120000",
            "--hide-header",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("ConsumerPerformance starts");
    let pid = child.id();
    let (mut cpu, mut rss) = (0.0, 0.0);
    let sampler = std::thread::spawn(move || {
        // The last sample before the process ends: its CPU and peak RSS.
        loop {
            let (c, r) = (cpu_seconds(pid), peak_rss_mib(pid));
            if r == 0.0 {
                return (cpu, rss);
            }
            (cpu, rss) = (c, r);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let out = child.wait_with_output().expect("ConsumerPerformance ends");
    let elapsed = started.elapsed().as_secs_f64();
    let (cpu, rss) = sampler.join().expect("sampler");
    let text = String::from_utf8_lossy(&out.stdout);
    let cols = consumer_performance_columns(&text);
    let gb = cols[2] / 1024.0;
    Figures {
        mbps: cols[8] * 1.048_576,
        records_per_s: cols[9],
        seconds_from_start: elapsed,
        cpu_per_gb: cpu / gb,
        source_cpu_per_gb: (cpu_seconds(clusters.source_pid) - source_cpu) / gb,
        peak_rss_mib: rss,
        ..Figures::default()
    }
}

/// A kmirror broker process with mirror `bench` of the source created.
/// A `kmirror broker` with mirror `bench` created (its metrics on `metrics`, when given).
fn kmirror_broker(
    clusters: &Clusters,
    dir: &std::path::Path,
    extra: &str,
    metrics: Option<&str>,
) -> (Child, String) {
    let listener = metrics.map_or(String::new(), |m| format!("metrics.listener=http://{m}\n"));
    let (child, address) = spawn_kmirror(dir, &listener);
    let config = dir.join("mirror.properties");
    std::fs::write(
        &config,
        format!(
            "bootstrap.servers={}\n{}\n{extra}\n",
            clusters.source_readers,
            clusters.kmirror_configs.replace(';', "\n")
        ),
    )
    .expect("config");
    support::mirrors_cli(
        &address,
        &[
            "--create",
            "--mirror",
            "bench",
            "--mirror-config",
            config.to_str().expect("UTF-8"),
        ],
    );
    (child, address)
}

/// kmirror copying `topic`, with `extra` mirror configs (`k=v` lines).
fn kmirror(
    clusters: &Clusters,
    topic: &str,
    partitions: u32,
    records: u64,
    extra: &str,
) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let source_cpu = cpu_seconds(clusters.source_pid);
    let started = Instant::now();
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let (mut child, address) = kmirror_broker(clusters, dir.path(), extra, Some(&metrics));
    support::mirrors_cli(
        &address,
        &["--start", "--mirror", "bench", "--topics", topic],
    );
    let destination = clusters.client(&address);
    let copied = wait_copied(
        clusters,
        &destination,
        topic,
        partitions,
        records as i64,
        started,
        clusters.copy_limit,
        Some(&metrics),
    );
    let figures = copy_figures(
        &copied,
        started,
        cpu_seconds(child.id()),
        cpu_seconds(clusters.source_pid) - source_cpu,
        peak_rss_mib(child.id()),
        0.0,
    );
    // How the fetcher paced itself (the gauges of its last interval).
    for line in support::scrape(&metrics)
        .lines()
        .filter(|l| l.starts_with("kmirror_fetcher_") && !l.contains("_total"))
    {
        eprintln!("{topic} kmirror{extra}: {line}");
    }
    terminate(&mut child);
    keep_broker_log(dir.path(), &format!("{topic}{extra}"));
    figures
}

/// With `MM2_BENCH_KEEP_LOGS` set, copies the `broker.log` of the kmirror broker in `dir` there
/// as `<name>.log` (the broker's folder goes with the run).
fn keep_broker_log(dir: &std::path::Path, name: &str) {
    if let Ok(keep) = std::env::var("MM2_BENCH_KEEP_LOGS") {
        let _ = std::fs::copy(
            dir.join("broker.log"),
            std::path::Path::new(&keep).join(format!("{name}.log")),
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_figures(
    copied: &Copied,
    started: Instant,
    cpu: f64,
    source_cpu: f64,
    rss: f64,
    destination_rss: f64,
) -> Figures {
    let (records, first, last) = (copied.records, copied.first, copied.last);
    let window = last.duration_since(first).as_secs_f64().max(0.001);
    let bytes = (records * RECORD_BYTES) as f64;
    let gb = bytes / 1e9;
    Figures {
        mbps: bytes / 1e6 / window,
        middle_mbps: copied.middle_mbps.unwrap_or(f64::NAN),
        records_per_s: records as f64 / window,
        seconds_from_start: last.duration_since(started).as_secs_f64(),
        cpu_per_gb: cpu / gb,
        source_cpu_per_gb: source_cpu / gb,
        peak_rss_mib: rss,
        destination_rss_mib: destination_rss,
        ..Figures::default()
    }
}

/// A MirrorMaker 2 process (dedicated mode) copying `topic` from the source to the target.
fn spawn_mm2(clusters: &Clusters, dir: &std::path::Path, topic: &str, partitions: u32) -> Child {
    let config = dir.join("mm2.properties");
    std::fs::write(
        &config,
        format!(
            "clusters = A, B\n\
             A.bootstrap.servers = {}\n\
             B.bootstrap.servers = {}\n\
             A->B.enabled = true\n\
             A->B.topics = {topic}\n\
             B->A.enabled = false\n\
             tasks.max = {}\n\
             B.producer.compression.type = lz4\n\
             replication.factor = 1\n\
             checkpoints.topic.replication.factor = 1\n\
             heartbeats.topic.replication.factor = 1\n\
             offset-syncs.topic.replication.factor = 1\n\
             offset.storage.replication.factor = 1\n\
             status.storage.replication.factor = 1\n\
             config.storage.replication.factor = 1\n\
             sync.topic.acls.enabled = false\n\
             refresh.topics.interval.seconds = 1\n\
             emit.checkpoints.interval.seconds = 5\n",
            clusters.source_readers,
            clusters.target,
            env_or("MM2_BENCH_MM2_TASKS", partitions.min(8))
        ),
    )
    .expect("config");
    let log = std::fs::File::create(dir.join("mm2.log")).expect("log");
    Command::new("java")
        .args(["-Xms256m", "-Xmx2g", "-cp"])
        .arg(format!("{}/libs/*", clusters.mm2_dist))
        .arg(format!(
            "-Dlog4j2.configurationFile=file:{}/log4j2.properties",
            clusters.mm2_dist
        ))
        .arg("org.apache.kafka.connect.mirror.MirrorMaker")
        .arg(&config)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("MirrorMaker 2 starts")
}

fn mm2(clusters: &Clusters, topic: &str, partitions: u32, records: u64) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let (source_cpu, target_cpu) = (
        cpu_seconds(clusters.source_pid),
        cpu_seconds(clusters.target_pid),
    );
    let started = Instant::now();
    let mut child = spawn_mm2(clusters, dir.path(), topic, partitions);
    let target = clusters.client(&clusters.target);
    let copied = wait_copied(
        clusters,
        &target,
        &format!("A.{topic}"),
        partitions,
        records as i64,
        started,
        clusters.copy_limit,
        None,
    );
    let cpu = cpu_seconds(child.id()) + cpu_seconds(clusters.target_pid) - target_cpu;
    let figures = copy_figures(
        &copied,
        started,
        cpu,
        cpu_seconds(clusters.source_pid) - source_cpu,
        peak_rss_mib(child.id()),
        peak_rss_mib(clusters.target_pid),
    );
    terminate(&mut child);
    figures
}

/// Per-record visibility lags (ms) of `records` records produced to `topic` on the source while
/// `destination` (holding them as `destination_topic`) is read as they appear, the worst of
/// each second printed: p50 and p99 over every record, and p99 from the producer's second
/// second on (ProducerPerformance's first batches hold, at once, what its throttle let it owe
/// while it connected: at 1,000 records a second, 300-470 records within 250 ms).
fn lags(
    clusters: &Clusters,
    destination: &SourceClient,
    topic: &str,
    destination_topic: &str,
    partitions: u32,
    records: u64,
    rate: i64,
) -> (f64, f64, f64) {
    let start_offsets = clusters.ends(destination, destination_topic, partitions);
    let producer = {
        let (bootstrap, topic) = (clusters.source.clone(), topic.to_string());
        std::thread::spawn(move || produce(&bootstrap, &topic, records, rate))
    };
    let (samples, settled_p99) = clusters.runtime.block_on(async {
        let metadata = destination
            .metadata(Some(&[destination_topic]))
            .await
            .expect("metadata");
        let t = &metadata.topics[destination_topic];
        let leader = t.partitions[0].leader;
        let mut offsets = start_offsets;
        let mut samples: Vec<(i64, u64)> = Vec::new();
        let mut created: Vec<i64> = Vec::new();
        let began = Instant::now();
        let mut worst: Vec<i64> = Vec::new();
        let mut seen = 0u64;
        let deadline = Instant::now() + Duration::from_secs(600);
        while seen < records && Instant::now() < deadline {
            let spec = FetchSpec {
                partitions: (0..partitions as i32)
                    .map(|p| FetchPartitionSpec {
                        topic: destination_topic.to_string(),
                        topic_id: t.topic_id,
                        partition: p,
                        offset: offsets[p as usize],
                        current_leader_epoch: -1,
                        last_fetched_epoch: -1,
                        max_bytes: 8 << 20,
                    })
                    .collect(),
                isolation: Isolation::ReadUncommitted,
                max_wait_ms: 50,
                min_bytes: 1,
                max_bytes: 64 << 20,
            };
            let Ok(fetched) = destination.fetch(leader, &spec).await else {
                continue;
            };
            let now = kmirror::broker::now_ms();
            for part in fetched {
                for batch in RecordBatches::new(part.records).flatten() {
                    if batch.is_control() {
                        offsets[part.partition as usize] = batch.next_offset();
                        continue;
                    }
                    let count = batch.records_count().max(0) as u64;
                    let lag = now - batch.max_timestamp();
                    samples.push((lag, count));
                    created.push(batch.max_timestamp());
                    let second = began.elapsed().as_secs() as usize;
                    if worst.len() <= second {
                        worst.resize(second + 1, 0);
                    }
                    worst[second] = worst[second].max(lag);
                    seen += count;
                    offsets[part.partition as usize] = batch.next_offset();
                }
            }
        }
        // Where in the run the tail of the lag falls (a start, a stall, all along).
        eprintln!("{destination_topic}: the worst lag (ms) in each second: {worst:?}");
        // The producer's start apart.
        let first = created.iter().copied().min().unwrap_or_default();
        let settled: Vec<(i64, u64)> = samples
            .iter()
            .zip(&created)
            .filter(|(_, at)| **at >= first + 1_000)
            .map(|(sample, _)| *sample)
            .collect();
        let (p50, p99) = percentiles(settled);
        eprintln!(
            "{destination_topic}: from the producer's second second on: lag p50 {p50} ms, p99 \
             {p99} ms"
        );
        (samples, p99)
    });
    producer.join().expect("producer");
    let (p50, p99) = percentiles(samples);
    (p50, p99, settled_p99)
}

/// The lag of a steady 1 MB/s topic mirrored beside a catch-up: a fresh kmirror starts copying
/// `backlog` (`records` records, all on the source) and a one-partition topic together; while
/// the backlog copies, 1,000 records of 1 KiB per second go to the other topic for `seconds`,
/// and each is timed from its append at the source to its visibility on the destination (the
/// topic keeps `LogAppendTime`: timed from their creation, the producer's first records
/// carried the 300 ms they waited in it while it connected, which no mirror can take back, and
/// they alone held the p99 over the goal at 150 ms). Prints p50, p99,
/// the goal (two round trips + 100 ms) and how much of the backlog was copied meanwhile (the
/// figure counts only if the catch-up ran throughout).
fn lag_during_catch_up(
    clusters: &Clusters,
    backlog: &str,
    partitions: u32,
    records: u64,
    seconds: u64,
    round_trip_ms: u32,
    proxy: Option<&WanProxy>,
) {
    let steady = format!("{backlog}-steady");
    kafka_tools::create_topic(
        &clusters.source,
        &steady,
        1,
        &["message.timestamp.type=LogAppendTime"],
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = format!("127.0.0.1:{}", support::free_port());
    let (mut broker, address) = kmirror_broker(clusters, dir.path(), "", Some(&metrics));
    let topics = format!("{backlog},{steady}");
    support::mirrors_cli(
        &address,
        &["--start", "--mirror", "bench", "--topics", &topics],
    );
    let destination = clusters.client(&address);
    let copied = || -> i64 {
        clusters
            .ends(&destination, backlog, partitions)
            .iter()
            .sum()
    };
    // The steady topic mirrors (its first records copied) while the backlog is under way.
    let source = clusters.client(&clusters.source);
    catch_up(clusters, &source, &destination, &steady, &steady, 1);
    let before = copied();
    let _ = proxy.and_then(WanProxy::queue_waits);
    let (p50, p99, settled_p99) = lags(
        clusters,
        &destination,
        &steady,
        &steady,
        1,
        1000 * seconds,
        1000,
    );
    let after = copied();
    let queue = proxy
        .and_then(WanProxy::queue_waits)
        .map_or("no queue counted".to_string(), |q| {
            format!(
                "bytes from the source waited for the link under {} ms (p50), {} ms (p99), and \
                 left the proxy late by under {} ms (p50), {} ms (p99)",
                q.p50_under_ms, q.p99_under_ms, q.late_p50_under_ms, q.late_p99_under_ms
            )
        });
    let in_flight: String = support::scrape(&metrics)
        .lines()
        .filter(|l| l.starts_with("kmirror_fetcher_fetches_in_flight"))
        .collect();
    eprintln!(
        "{backlog}: a 1 MB/s topic beside the catch-up: lag p50 {p50} ms, p99 {p99} ms, p99 from \
         the producer's second second on {settled_p99} ms (goal: under {} ms); the backlog went \
         from {before} to {after} of {records} records meanwhile ({in_flight}); {queue}",
        2 * round_trip_ms + 100
    );
    terminate(&mut broker);
    keep_broker_log(dir.path(), &steady);
    delete_topic(&clusters.source, &steady);
}

/// p50 and p99 of weighted samples.
fn percentiles(mut samples: Vec<(i64, u64)>) -> (f64, f64) {
    samples.sort_unstable();
    let total: u64 = samples.iter().map(|(_, n)| n).sum();
    let at = |q: f64| {
        let want = (total as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (lag, n) in &samples {
            seen += n;
            if seen >= want {
                return *lag as f64;
            }
        }
        f64::NAN
    };
    (at(0.50), at(0.99))
}

/// Warms a mirror up (ten records per partition) and waits until the destination holds every
/// record the source topic has, so the lag measured next is not a backlog's.
fn catch_up(
    clusters: &Clusters,
    source: &SourceClient,
    destination: &SourceClient,
    topic: &str,
    destination_topic: &str,
    partitions: u32,
) {
    produce(&clusters.source, topic, u64::from(partitions) * 10, -1);
    let total: i64 = clusters.ends(source, topic, partitions).iter().sum();
    wait_copied(
        clusters,
        destination,
        destination_topic,
        partitions,
        total,
        Instant::now(),
        Duration::from_secs(1800),
        None,
    );
}

fn delete_topic(bootstrap: &str, topic: &str) {
    let _ = kafka_tools::kafka_tool_output(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--delete",
            "--topic",
            topic,
        ],
    );
}

fn main() {
    let partition_counts: Vec<u32> = std::env::var("MM2_BENCH_PARTITIONS")
        .unwrap_or_else(|_| "1,8,64".into())
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect();
    let runs: usize = env_or("MM2_BENCH_RUNS", 3);
    let mib: u64 = env_or("MM2_BENCH_MIB", 2048);
    let lag_mbps: f64 = env_or("MM2_BENCH_LAG_MBPS", 20.0);
    let lag_seconds: u64 = env_or("MM2_BENCH_LAG_SECONDS", 20);
    let measure_lag = lag_seconds > 0;
    let catch_up_lag_seconds: u64 = env_or("MM2_BENCH_CATCHUP_LAG_SECONDS", 0);
    let systems_env =
        std::env::var("MM2_BENCH_SYSTEMS").unwrap_or_else(|_| "reference,kmirror,mm2".into());
    let systems: Vec<&str> = systems_env.split(',').map(str::trim).collect();
    let records = mib * 1024 * 1024 / RECORD_BYTES;
    let delay_ms: u32 = env_or("MM2_BENCH_DELAY_MS", 0);
    let bandwidth_mbit: u64 = env_or("MM2_BENCH_BANDWIDTH_MBIT", 0);
    let window_kib: usize = env_or("MM2_BENCH_WINDOW_KIB", 0);
    let link = WanLink {
        bandwidth: (bandwidth_mbit > 0).then_some(bandwidth_mbit * 1_000_000 / 8),
        window: (window_kib > 0).then_some(window_kib * 1024),
        ..WanLink::delay(Duration::from_millis(u64::from(delay_ms)) / 2)
    };
    let wan = delay_ms > 0 || bandwidth_mbit > 0 || window_kib > 0;
    if wan {
        println!(
            "WAN model: round trip {delay_ms} ms, cap {} Mbit/s, window {} KiB per connection",
            if bandwidth_mbit > 0 {
                bandwidth_mbit.to_string()
            } else {
                "none".into()
            },
            if window_kib > 0 {
                window_kib.to_string()
            } else {
                "none".into()
            },
        );
    }
    let proxy = wan.then(|| {
        WanProxy::start(
            &kafka_env("KMIRROR_KAFKA_REMOTE"),
            &kafka_env("KMIRROR_KAFKA_REMOTE_LISTENER"),
            link,
        )
    });
    let clusters = Clusters {
        source: kafka_env("KMIRROR_KAFKA_BOOTSTRAP"),
        source_readers: if wan {
            kafka_env("KMIRROR_KAFKA_REMOTE")
        } else {
            kafka_env("KMIRROR_KAFKA_BOOTSTRAP")
        },
        source_pid: kafka_pid(&kafka_env("KMIRROR_KAFKA_DATA")),
        target: kafka_env("KMIRROR_KAFKA_TARGET_BOOTSTRAP"),
        target_pid: kafka_pid(&kafka_env("KMIRROR_KAFKA_TARGET_DATA")),
        mm2_dist: kafka_env("KMIRROR_MM2_DIST"),
        kmirror_configs: std::env::var("MM2_BENCH_KMIRROR_CONFIGS").unwrap_or_default(),
        copy_limit: Duration::from_secs(env_or("MM2_BENCH_MAX_SECONDS", 1800)),
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    };
    let tag = std::process::id();
    println!(
        "mirror_vs_mm2: {mib} MiB backlog of {RECORD_BYTES}-byte lz4 records, partitions {partition_counts:?}, {runs} runs; lag at {lag_mbps} MB/s for {lag_seconds} s; {delay_ms} ms added to each round trip to the source"
    );
    let mut table: BTreeMap<(u32, &str), Vec<Figures>> = BTreeMap::new();
    for &partitions in &partition_counts {
        for run in 0..runs {
            let topic = format!("mm2bench-{tag}-{partitions}p-{run}");
            kafka_tools::create_topic(&clusters.source, &topic, partitions, &[]);
            let produced = Instant::now();
            produce(&clusters.source, &topic, records, -1);
            eprintln!(
                "{topic}: {mib} MiB produced in {:.1} s",
                produced.elapsed().as_secs_f64()
            );
            for system in ["reference", "kmirror", "kmirror1", "mm2"] {
                if !systems.contains(&system) {
                    continue;
                }
                // Each system starts with no dirty pages left by the one before (writeback
                // of another system's copy would otherwise slow this one's writes).
                let _ = Command::new("sync").status();
                let figures = match system {
                    "reference" => reference(&clusters, &topic, records),
                    "kmirror" => kmirror(&clusters, &topic, partitions, records, ""),
                    "kmirror1" => kmirror(
                        &clusters,
                        &topic,
                        partitions,
                        records,
                        "mirror.num.replica.fetchers=1",
                    ),
                    _ => mm2(&clusters, &topic, partitions, records),
                };
                eprintln!("{topic} {system}: {figures:?}");
                table.entry((partitions, system)).or_default().push(figures);
            }
            if catch_up_lag_seconds > 0 {
                lag_during_catch_up(
                    &clusters,
                    &topic,
                    partitions,
                    records,
                    catch_up_lag_seconds,
                    delay_ms,
                    proxy.as_ref(),
                );
            }
            delete_topic(&clusters.source, &topic);
            delete_topic(&clusters.target, &format!("A.{topic}"));

            if !measure_lag {
                continue;
            }
            // Steady rate: end-to-end lag per system.
            let rate = (lag_mbps * 1e6 / RECORD_BYTES as f64) as i64;
            let lag_records = rate as u64 * lag_seconds;
            let lag_topic = format!("mm2lag-{tag}-{partitions}p-{run}");
            kafka_tools::create_topic(&clusters.source, &lag_topic, partitions, &[]);
            let source_client = clusters.client(&clusters.source);
            let mut measured = Vec::new();
            // The steady lag is the default kmirror's (one Fetch in flight is the catch-up's
            // "before").
            for system in systems.iter().copied().filter(|s| *s != "kmirror1") {
                let lag = match system {
                    "reference" => lags(
                        &clusters,
                        &clusters.client(&clusters.source_readers),
                        &lag_topic,
                        &lag_topic,
                        partitions,
                        lag_records,
                        rate,
                    ),
                    "kmirror" => {
                        let dir = tempfile::tempdir().expect("temp dir");
                        let (mut broker, address) = kmirror_broker(&clusters, dir.path(), "", None);
                        support::mirrors_cli(
                            &address,
                            &["--start", "--mirror", "bench", "--topics", &lag_topic],
                        );
                        let destination = clusters.client(&address);
                        catch_up(
                            &clusters,
                            &source_client,
                            &destination,
                            &lag_topic,
                            &lag_topic,
                            partitions,
                        );
                        let lag = lags(
                            &clusters,
                            &destination,
                            &lag_topic,
                            &lag_topic,
                            partitions,
                            lag_records,
                            rate,
                        );
                        terminate(&mut broker);
                        lag
                    }
                    _ => {
                        let mm2_dir = tempfile::tempdir().expect("temp dir");
                        let mut mm2 = spawn_mm2(&clusters, mm2_dir.path(), &lag_topic, partitions);
                        let target = clusters.client(&clusters.target);
                        let mirrored = format!("A.{lag_topic}");
                        catch_up(
                            &clusters,
                            &source_client,
                            &target,
                            &lag_topic,
                            &mirrored,
                            partitions,
                        );
                        let lag = lags(
                            &clusters,
                            &target,
                            &lag_topic,
                            &mirrored,
                            partitions,
                            lag_records,
                            rate,
                        );
                        terminate(&mut mm2);
                        delete_topic(&clusters.target, &mirrored);
                        lag
                    }
                };
                measured.push((system, lag));
            }
            for (system, (p50, p99, _)) in measured {
                eprintln!("{lag_topic} {system}: lag p50 {p50} ms, p99 {p99} ms");
                if let Some(f) = table
                    .get_mut(&(partitions, system))
                    .and_then(|runs| runs.last_mut())
                {
                    f.lag_p50_ms = p50;
                    f.lag_p99_ms = p99;
                }
            }
            delete_topic(&clusters.source, &lag_topic);
        }
    }
    print_table(&table, &partition_counts);
}

/// A figure read from one run.
type Metric = fn(&Figures) -> f64;

fn print_table(table: &BTreeMap<(u32, &str), Vec<Figures>>, partition_counts: &[u32]) {
    let med = |runs: &[Figures], f: fn(&Figures) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(f).collect();
        median(&mut values)
    };
    let metrics: [(&str, Metric); 10] = [
        ("catch-up MB/s", |f| f.mbps),
        ("catch-up MB/s, 10% to 90% of the backlog", |f| {
            f.middle_mbps
        }),
        ("catch-up records/s", |f| f.records_per_s),
        ("seconds from start", |f| f.seconds_from_start),
        ("CPU s per GB (mirror + destination)", |f| f.cpu_per_gb),
        ("source broker CPU s per GB", |f| f.source_cpu_per_gb),
        ("peak RSS MiB (mirroring process)", |f| f.peak_rss_mib),
        ("peak RSS MiB (MM2's destination Kafka)", |f| {
            f.destination_rss_mib
        }),
        ("lag p50 ms at steady rate", |f| f.lag_p50_ms),
        ("lag p99 ms at steady rate", |f| f.lag_p99_ms),
    ];
    println!(
        "\n{:<8} {:<40} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "parts",
        "median of runs",
        "reference",
        "kmirror",
        "km 1 flight",
        "MM2",
        "km/MM2",
        "km/ref",
        "km/km1"
    );
    for &p in partition_counts {
        let runs = |system: &str| table.get(&(p, system)).cloned().unwrap_or_default();
        let (reference, kmirror, one, mm2) = (
            runs("reference"),
            runs("kmirror"),
            runs("kmirror1"),
            runs("mm2"),
        );
        for (name, f) in metrics {
            let (r, k, o, m) = (
                med(&reference, f),
                med(&kmirror, f),
                med(&one, f),
                med(&mm2, f),
            );
            println!(
                "{p:<8} {name:<40} {r:>12.1} {k:>12.1} {o:>12.1} {m:>12.1} {:>10.2} {:>10.2} {:>10.2}",
                k / m,
                k / r,
                k / o
            );
        }
        // MB per CPU second, the goal's unit: 1000 / (CPU s per GB).
        let (k, m) = (
            1000.0 / med(&kmirror, |f| f.cpu_per_gb),
            1000.0 / med(&mm2, |f| f.cpu_per_gb),
        );
        println!(
            "{p:<8} {:<40} {:>12} {k:>12.1} {m:>12.1} {:>10.2}",
            "MB per CPU second",
            "-",
            k / m
        );
    }
}
