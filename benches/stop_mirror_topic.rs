//! How long StopMirrorTopics of a 1,000-partition topic takes to reach STOPPED on a kmirror
//! broker mirroring Apache Kafka (`scripts/bench.sh stop_mirror_topic`, which starts Kafka
//! with scripts/kafka-local.sh; `STOP_TOPIC_PARTITIONS` sets the count).
//!
//! A topic of `STOP_TOPIC_PARTITIONS` partitions on Kafka gets a few records per partition;
//! an in-process kmirror broker with its engine creates mirror `bench`, starts the topic and
//! waits until every partition is MIRRORING at the source's last stable offset. Then one
//! ChangeTopic(Stopped) (what StopMirrorTopics does) and the clock runs until every partition
//! reports STOPPED: per partition, the fetcher detached, the leader epoch bumped in the
//! controller's fsynced log, the log truncated to its LSO, the LME and each state written to
//! `__mirror_state`, and the MIRROR_PID_RESET barrier appended.

mod support;

use actix::Actor;
use kmirror::mirror::BrokerHost;
use kmirror_actors::engine::system::{LoadMirror, MirrorSystem};
use kmirror_actors::engine::topics::{ChangeTopic, DescribeTopic, StartTopic};
use kmirror_actors::partition::{Desired, RetryPolicy};
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_protocol::state::MirrorState;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn main() {
    let partitions: u32 = std::env::var("STOP_TOPIC_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("bench-stop-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, partitions, &[]);
    kafka_tools::produce(&bootstrap, &topic, partitions * 20, "lz4", &[]);

    let dir = tempfile::tempdir().expect("temp dir");
    let broker = support::open_broker(dir.path());
    let system = actix::System::new();
    system
        .block_on(broker.create_mirror(
            "bench",
            BTreeMap::from([("bootstrap.servers".to_string(), bootstrap.clone())]),
        ))
        .expect("mirror");
    let (to_mirroring, to_stopped) = system.block_on(async {
        let engine = MirrorSystem::new(BrokerHost(broker.clone()), RetryPolicy::default()).start();
        engine
            .send(LoadMirror("bench".into()))
            .await
            .expect("alive")
            .expect("loaded");
        let expected = partitions as usize;
        let all_in = |wanted: MirrorState| {
            let (engine, topic) = (engine.clone(), topic.clone());
            async move {
                let mut last_report = Instant::now();
                loop {
                    let described = engine
                        .send(DescribeTopic {
                            mirror: "bench".into(),
                            topic: topic.clone(),
                        })
                        .await
                        .expect("alive");
                    if let Ok(partitions) = &described
                        && partitions.len() == expected
                        && partitions.iter().all(|p| p.state == wanted)
                    {
                        return;
                    }
                    if last_report.elapsed() > Duration::from_secs(5) {
                        last_report = Instant::now();
                        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
                        for p in described.iter().flatten() {
                            *counts.entry(p.state.name().to_string()).or_default() += 1;
                        }
                        let failed = described
                            .iter()
                            .flatten()
                            .find_map(|p| p.error.clone())
                            .unwrap_or_default();
                        eprintln!("waiting for {wanted}: {counts:?} {failed}");
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let started = Instant::now();
        engine
            .send(StartTopic {
                mirror: "bench".into(),
                topic: topic.clone(),
                confirmed: Default::default(),
            })
            .await
            .expect("alive")
            .expect("started");
        all_in(MirrorState::Mirroring).await;
        // Caught up: every partition's log ends at the source's last stable offset.
        let source = SourceClient::connect(ClientConfig::plaintext(&bootstrap))
            .await
            .expect("connects");
        let metadata = source
            .metadata(Some(&[topic.as_str()]))
            .await
            .expect("metadata");
        let mut produced = 0;
        for p in &metadata.topics[topic.as_str()].partitions {
            let (lso, _) = source
                .list_offsets(
                    p.leader,
                    &topic,
                    p.partition,
                    LATEST,
                    Isolation::ReadCommitted,
                )
                .await
                .expect("offsets");
            produced += lso;
        }
        loop {
            let mirrored: i64 = (0..partitions as i32)
                .filter_map(|p| broker.partition(&topic, p))
                .map(|p| p.log.lock().expect("log").log_end_offset())
                .sum();
            if mirrored >= produced {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let to_mirroring = started.elapsed();

        let stopping = Instant::now();
        engine
            .send(ChangeTopic {
                mirror: "bench".into(),
                topic: topic.clone(),
                desired: Desired::Stopped,
                cut_timestamp_ms: None,
            })
            .await
            .expect("alive")
            .expect("stop accepted");
        all_in(MirrorState::Stopped).await;
        (to_mirroring, stopping.elapsed())
    });
    println!("stop_mirror_topic: {partitions} partitions mirrored from Apache Kafka, one broker");
    println!(
        "start to all MIRRORING  {:>10.1} ms",
        to_mirroring.as_secs_f64() * 1000.0
    );
    println!(
        "stop to all STOPPED     {:>10.1} ms  ({:.2} ms per partition)",
        to_stopped.as_secs_f64() * 1000.0,
        to_stopped.as_secs_f64() * 1000.0 / f64::from(partitions)
    );
}
