//! How far one broker's mirroring scales (`scripts/bench.sh scale`), in two parts.
//!
//! The engine: `SCALE_ENGINE_PARTITIONS` (default 100,000) supervised mirror partition actors,
//! the handles a MirrorSystem keeps, over in-memory ports (no logs). Measures the memory per
//! partition once all are MIRRORING (process RSS growth / partitions), the time from leadership to all MIRRORING,
//! the CPU used while they idle for 30 s (percent of one core), and the time for a Stop of
//! `SCALE_STOP_PARTITIONS` (default 10,000) of them to reach STOPPED.
//!
//! Each part runs `SCALE_RUNS` times (default 3) and the medians are printed at the end. The
//! RSS growth of runs after the first is smaller (the allocator keeps what the run before
//! freed), so the first run's is the one to quote.
//!
//! The broker: a `kmirror broker` source process with `SCALE_BROKER_PARTITIONS` (default
//! 100,000) partitions in topics of 100, mirrored by an in-process destination broker with its
//! MirrorSystem: every partition started, all MIRRORING (the RSS growth per partition now
//! includes its log's state and the mirror topic's metadata), 30 s idle (CPU of both
//! processes), then a Stop of the first `SCALE_STOP_PARTITIONS` partitions' topics to all
//! STOPPED; last, a clean restart of the source process (shutdown, then start to listening),
//! which holds every partition too. Both brokers hold more partition logs than descriptors:
//! their segment files stay within `log.open.files.max` (half the process's limit by default).

mod support;

use actix::Actor;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kmirror::mirror::BrokerHost;
use kmirror_actors::actor::{BecomeLeader, DescribePartition, SupervisedPartition};
use kmirror_actors::engine::system::{LoadMirror, MirrorSystem};
use kmirror_actors::engine::topics::{ChangeTopic, DescribeTopic, StartTopic};
use kmirror_actors::partition::{Desired, RetryPolicy};
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::memory_ports::MemoryPorts;
use support::{cpu_seconds, rss_mib, spawn_kmirror, terminate, terminate_within};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long the idle CPU is measured: the broker's default `mirror.metadata.refresh.interval.ms`,
/// so every window holds one metadata sync (a shorter one holds one or none).
const IDLE_WINDOW: Duration = Duration::from_secs(30);

/// CPU percent of one core a process used over `window`.
async fn idle_cpu(pids: &[u32], window: Duration) -> Vec<f64> {
    let before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    tokio::time::sleep(window).await;
    pids.iter()
        .zip(before)
        .map(|(p, b)| (cpu_seconds(*p) - b) / window.as_secs_f64() * 100.0)
        .collect()
}

/// One run's figures, in the order of the labels its caller prints.
type Figures = Vec<f64>;

fn engine(count: usize, stop: usize) -> Figures {
    let me = std::process::id();
    let system = actix::System::new();
    system.block_on(async move {
        let rss_before = rss_mib(me);
        let started = Instant::now();
        let mut partitions: Vec<SupervisedPartition<MemoryPorts>> = (0..count)
            .map(|_| {
                SupervisedPartition::start(MemoryPorts::default(), RetryPolicy::default(), || 0.5)
            })
            .collect();
        // (A request whose answer is dropped is never handled: each is awaited.)
        for p in &mut partitions {
            let _ = p
                .become_leader(BecomeLeader {
                    leader_epoch: 0,
                    desired: Desired::Mirroring,
                })
                .await;
        }
        wait_all(&partitions, MirrorState::Mirroring).await;
        let to_mirroring = started.elapsed();
        let per_partition = (rss_mib(me) - rss_before) * 1024.0 * 1024.0 / count as f64;
        let cpu = idle_cpu(&[me], IDLE_WINDOW).await[0];
        let stopping = Instant::now();
        for p in partitions.iter_mut().take(stop) {
            let _ = p.change_desired(Desired::Stopped).await;
        }
        wait_all(&partitions[..stop], MirrorState::Stopped).await;
        let to_stopped = stopping.elapsed();
        println!("scale (engine): {count} supervised mirror partition actors, in-memory ports");
        println!("  memory per partition (RSS growth)   {per_partition:>10.0} bytes");
        println!(
            "  leadership to all MIRRORING         {:>10.1} ms",
            to_mirroring.as_secs_f64() * 1e3
        );
        println!("  idle CPU over 30 s                  {cpu:>10.2} % of one core");
        println!(
            "  Stop of {stop} to all STOPPED      {:>10.1} ms",
            to_stopped.as_secs_f64() * 1e3
        );
        vec![
            per_partition,
            to_mirroring.as_secs_f64() * 1e3,
            cpu,
            to_stopped.as_secs_f64() * 1e3,
        ]
    })
}

async fn wait_all(partitions: &[SupervisedPartition<MemoryPorts>], state: MirrorState) {
    let mut last_report = Instant::now();
    loop {
        let mut all = true;
        for p in partitions {
            match p.addr().send(DescribePartition).await {
                Ok(s) if s.state == state => {}
                other => {
                    if last_report.elapsed() > Duration::from_secs(10) {
                        last_report = Instant::now();
                        eprintln!("waiting for {state}: a partition is at {other:?}");
                    }
                    all = false;
                    break;
                }
            }
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates `topics` topics of `per_topic` partitions on the broker at `address`.
async fn create_topics(address: &str, topics: &[String], per_topic: i32) {
    let connection = Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connects");
    for chunk in topics.chunks(10) {
        let request = CreateTopicsRequest::default()
            .with_topics(
                chunk
                    .iter()
                    .map(|name| {
                        CreatableTopic::default()
                            .with_name(TopicName(StrBytes::from_string(name.clone())))
                            .with_num_partitions(per_topic)
                            .with_replication_factor(1)
                    })
                    .collect(),
            )
            .with_timeout_ms(60_000);
        let (_, answer) = connection
            .send("CreateTopics", &request, 7)
            .await
            .expect("answers");
        for t in answer.topics {
            assert_eq!(t.error_code, 0, "creating {}", t.name.0);
        }
    }
}

fn broker(count: usize, stop: usize) -> Figures {
    const PER_TOPIC: usize = 100;
    let topics: Vec<String> = (0..count.div_ceil(PER_TOPIC))
        .map(|t| format!("scale-{t:04}"))
        .collect();
    let count = topics.len() * PER_TOPIC;
    let source_dir = tempfile::tempdir().expect("temp dir");
    let (mut source, source_address) = spawn_kmirror(source_dir.path(), "");
    let dir = tempfile::tempdir().expect("temp dir");
    let destination = support::open_broker(dir.path());
    let me = std::process::id();
    let source_pid = source.id();
    let system = actix::System::new();
    system
        .block_on(destination.create_mirror(
            "scale",
            BTreeMap::from([("bootstrap.servers".to_string(), source_address.clone())]),
        ))
        .expect("mirror");
    let mut figures = system.block_on(async {
        create_topics(&source_address, &topics, PER_TOPIC as i32).await;
        let engine = MirrorSystem::new(BrokerHost(destination.clone()), RetryPolicy::default()).start();
        engine
            .send(LoadMirror("scale".into()))
            .await
            .expect("alive")
            .expect("loaded");
        let rss_before = rss_mib(me);
        let started = Instant::now();
        for topic in &topics {
            engine
                .send(StartTopic {
                    mirror: "scale".into(),
                    topic: topic.clone(),
                    confirmed: Default::default(),
                })
                .await
                .expect("alive")
                .expect("started");
        }
        all_in(&engine, &topics, PER_TOPIC, MirrorState::Mirroring).await;
        let to_mirroring = started.elapsed();
        let per_partition = (rss_mib(me) - rss_before) * 1024.0 * 1024.0 / count as f64;
        let cpu = idle_cpu(&[me, source_pid], IDLE_WINDOW).await;
        let stopped_topics = &topics[..stop.div_ceil(PER_TOPIC).min(topics.len())];
        let stopping = Instant::now();
        for topic in stopped_topics {
            engine
                .send(ChangeTopic {
                    mirror: "scale".into(),
                    topic: topic.clone(),
                    desired: Desired::Stopped,
                    cut_timestamp_ms: None,
                })
                .await
                .expect("alive")
                .expect("stop accepted");
        }
        all_in(&engine, stopped_topics, PER_TOPIC, MirrorState::Stopped).await;
        let to_stopped = stopping.elapsed();
        let stopped = stopped_topics.len() * PER_TOPIC;
        println!(
            "scale (broker): {count} mirror partitions in {} topics from a kmirror source process",
            topics.len()
        );
        println!(
            "  memory per partition (RSS growth, log state and metadata included) {per_partition:>8.0} bytes"
        );
        println!(
            "  Start to all MIRRORING                           {:>10.1} ms",
            to_mirroring.as_secs_f64() * 1e3
        );
        println!(
            "  idle CPU over 30 s: destination {:.2} %, source {:.2} % of one core",
            cpu[0], cpu[1]
        );
        println!(
            "  Stop of {stopped} to all STOPPED                  {:>10.1} ms",
            to_stopped.as_secs_f64() * 1e3
        );
        println!(
            "  segment files open: destination {} (bound {}), reopened {}",
            destination.open_files().open_count(),
            destination.open_files().max(),
            destination.open_files().reopened()
        );
        vec![
            per_partition,
            to_mirroring.as_secs_f64() * 1e3,
            cpu[0],
            cpu[1],
            to_stopped.as_secs_f64() * 1e3,
        ]
    });
    let (closed, reopened) = restart(&mut source, source_dir.path());
    figures.extend([closed.as_secs_f64(), reopened.as_secs_f64()]);
    figures
}

/// A clean restart of the source broker, which holds every partition: how long its shutdown
/// (SIGTERM to exit, flushing and checkpointing every log) and its start (to listening, every
/// log opened) took.
fn restart(source: &mut std::process::Child, dir: &std::path::Path) -> (Duration, Duration) {
    let closing = Instant::now();
    let clean = terminate_within(source, Duration::from_secs(600));
    let closed = closing.elapsed();
    if !clean {
        println!("  source broker: killed after 600 s of shutdown (the start recovers)");
    }
    let opening = Instant::now();
    let (mut again, _) = spawn_kmirror(dir, "");
    let reopened = opening.elapsed();
    terminate(&mut again);
    println!(
        "  source broker: clean shutdown {:.1} s, start to listening {:.1} s",
        closed.as_secs_f64(),
        reopened.as_secs_f64()
    );
    (closed, reopened)
}

/// Prints the median of each figure over the runs.
fn print_medians(title: &str, labels: &[&str], runs: &[Figures]) {
    println!("{title}, median of {} runs:", runs.len());
    for (i, label) in labels.iter().enumerate() {
        let mut values: Vec<f64> = runs.iter().map(|r| r[i]).collect();
        let all: Vec<String> = values.iter().map(|v| format!("{v:.1}")).collect();
        println!(
            "  {label:<48} {:>12.1}   (runs: {})",
            support::median(&mut values),
            all.join(", ")
        );
    }
}

async fn all_in(
    engine: &actix::Addr<MirrorSystem<BrokerHost>>,
    topics: &[String],
    per_topic: usize,
    wanted: MirrorState,
) {
    let mut last_report = Instant::now();
    loop {
        let mut done = 0;
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for topic in topics {
            let described = engine
                .send(DescribeTopic {
                    mirror: "scale".into(),
                    topic: topic.clone(),
                })
                .await
                .expect("alive");
            let partitions = described.unwrap_or_default();
            if partitions.len() == per_topic && partitions.iter().all(|p| p.state == wanted) {
                done += 1;
            }
            for p in &partitions {
                *counts.entry(p.state.name().to_string()).or_default() += 1;
            }
        }
        if done == topics.len() {
            return;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!("waiting for {wanted}: {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    let engine_partitions = env_or("SCALE_ENGINE_PARTITIONS", 100_000);
    let stop = env_or("SCALE_STOP_PARTITIONS", 10_000).min(engine_partitions);
    let broker_partitions = env_or("SCALE_BROKER_PARTITIONS", 100_000);
    let runs = env_or("SCALE_RUNS", 3).max(1);
    let engine_runs: Vec<Figures> = (0..runs).map(|_| engine(engine_partitions, stop)).collect();
    let broker_runs: Vec<Figures> = if broker_partitions > 0 {
        (0..runs).map(|_| broker(broker_partitions, stop)).collect()
    } else {
        Vec::new()
    };
    print_medians(
        &format!("scale (engine): {engine_partitions} partitions"),
        &[
            "memory per partition, bytes (RSS growth)",
            "leadership to all MIRRORING, ms",
            "idle CPU over 30 s, % of one core",
            &format!("Stop of {stop} to all STOPPED, ms"),
        ],
        &engine_runs,
    );
    if !broker_runs.is_empty() {
        print_medians(
            &format!("scale (broker): {broker_partitions} partitions"),
            &[
                "memory per partition, bytes (RSS growth)",
                "Start to all MIRRORING, ms",
                "idle CPU over 30 s, destination, % of one core",
                "idle CPU over 30 s, source, % of one core",
                &format!("Stop of {stop} to all STOPPED, ms"),
                "source broker: clean shutdown, s",
                "source broker: start to listening, s",
            ],
            &broker_runs,
        );
    }
}
