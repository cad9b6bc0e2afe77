//! The engine's Fetcher actor mirroring a real Apache Kafka 4.x (started by
//! `scripts/kafka-local.sh`; scripts/test.sh exports `KMIRROR_KAFKA_*`) into a kmirror broker's
//! logs through the broker's ports (`kmirror::mirror`): an lz4 topic of three partitions and a
//! topic written by a transactional producer with random aborts. Every destination partition
//! ends up holding exactly the bytes of the source partition's segment file, at the same
//! offsets, and the partition actors heard of the appends. And the coordinator shard actor on
//! the broker's own `__mirror_state` topic, across a broker restart. And the MirrorSystem on a
//! broker: a topic of Apache Kafka started (PREPARING to MIRRORING), read-only meanwhile,
//! paused (nothing fetched while the source grows) and resumed (caught up), then the KIP's stop (fetcher removed, epoch bumped, LSO truncation, LME persisted, PID reset
//! appended) after which Kafka's Java producer writes to it. `process` drives `kmirror broker`
//! processes with `kmirror mirrors`; `failback` fails over and back between two of them;
//! `metadata` changes a mirrored topic with Kafka's own tools; `cluster` mirrors into three
//! brokers of one cluster in one process (clusters of `kmirror broker` processes are the
//! `cluster` test binary's); `source_cluster` mirrors a three-broker Kafka through clean and
//! unclean leader elections.

use actix::{Actor, Context, Handler};
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::mirror::BrokerHost;
use kmirror_actors::actor::{
    AttachPartition, DescribeFetcher, FetchEpochs, Fetcher, FetcherConfig, FetcherProgress,
};
use kmirror_actors::actor::{
    CoordinatorShard, LastMirroredEpoch, ReadMirrorStates, WriteMirrorStates,
};
use kmirror_actors::engine::fetch::EngineFetcherPorts;
use kmirror_actors::engine::fetch_lanes::FetchLanes;
use kmirror_actors::engine::state_log::{MIRROR_STATE_TOPIC, StateLogPorts};
use kmirror_actors::host::{FetchProgress, TopicPartition};
use kmirror_protocol::client::Isolation;
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::kafka_tools::{self, kafka_env};
use kmirror_testkit::source::{segment, source_client};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod assurance;
mod cluster;
mod disaster;
mod failback;
mod metadata;
mod operator;
mod process;
mod retire;
mod scenarios;
mod security;
mod source_cluster;
mod sync;
mod wan;

/// Stands in for the partition actors: counts what the fetcher reports.
struct Reports(Rc<RefCell<Vec<FetcherProgress>>>);

impl Actor for Reports {
    type Context = Context<Self>;
}

impl Handler<FetcherProgress> for Reports {
    type Result = ();

    fn handle(&mut self, msg: FetcherProgress, _: &mut Context<Self>) {
        self.0.borrow_mut().push(msg);
    }
}

/// The outcome of a metadata write of a single-node broker or of an in-process cluster, which
/// completes without waiting (its controller writes in place); panics if it would wait.
fn written<T>(write: impl std::future::Future<Output = T>) -> T {
    let mut write = std::pin::pin!(write);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match write.as_mut().poll(&mut context) {
        std::task::Poll::Ready(outcome) => outcome,
        std::task::Poll::Pending => panic!("a local metadata write waited"),
    }
}

/// Creates `__mirror_state` as the engine does the first time a mirror needs it.
fn ensure_state_topic(broker: &Broker) {
    if broker.topic(MIRROR_STATE_TOPIC).is_none() {
        let partitions = broker.config().mirror_state_partitions;
        written(broker.create_topic(MIRROR_STATE_TOPIC, partitions, 1, BTreeMap::new(), None))
            .expect("__mirror_state");
    }
}

fn destination_bytes(broker: &Broker, topic: &str, partition: i32) -> Vec<u8> {
    let partition = broker
        .partition(topic, partition)
        .expect("mirror partition");
    let log = partition.log.lock().expect("log");
    let mut bytes = Vec::new();
    log.for_each_batch(log.log_start_offset(), |b| {
        bytes.extend_from_slice(b.as_bytes());
        Ok(())
    })
    .expect("reads");
    bytes
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_fetcher_mirrors_apache_kafka_byte_for_byte() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let run = std::process::id();
    let plain = format!("mirrored-lz4-{run}");
    let input = format!("copier-input-{run}");
    let transactional = format!("mirrored-txn-{run}");
    kafka_tools::create_topic(&bootstrap, &plain, 3, &[]);
    kafka_tools::create_topic(&bootstrap, &input, 1, &[]);
    kafka_tools::create_topic(&bootstrap, &transactional, 1, &[]);
    kafka_tools::produce(&bootstrap, &plain, 30_000, "lz4", &["batch.size=16384"]);
    kafka_tools::produce(&bootstrap, &input, 3_000, "lz4", &[]);
    let copier = format!("mirror-copier-{run}");
    kafka_tools::copy_transactionally(&bootstrap, &input, &transactional, &copier, 3000);

    let source = source_client(&bootstrap).await;
    let metadata = source
        .metadata(Some(&[plain.as_str(), transactional.as_str()]))
        .await
        .expect("metadata");

    let dir = tempfile::tempdir().expect("temp dir");
    let broker = open_broker(dir.path());
    // Its topics name mirror dr, which must exist; no engine runs here, the fetcher is driven
    // by hand.
    broker
        .create_mirror(
            "dr",
            BTreeMap::from([("bootstrap.servers".to_string(), bootstrap.clone())]),
        )
        .await
        .expect("mirror dr created");
    let mut partitions = Vec::new();
    let mut leader = -1;
    for topic in [&plain, &transactional] {
        let t = &metadata.topics[topic.as_str()];
        let configs = BTreeMap::from([("mirror.name".to_string(), "dr".to_string())]);
        let created = broker
            .create_topic(
                topic,
                t.partitions.len() as i32,
                1,
                configs,
                Some(t.topic_id),
            )
            .await
            .expect("mirror topic created");
        assert_eq!(created.topic_id, t.topic_id, "the source's topic id");
        for p in &t.partitions {
            leader = p.leader;
            partitions.push((topic.clone(), p.partition));
        }
    }
    let reports = Rc::new(RefCell::new(Vec::new()));
    let fetcher = Fetcher::new(
        EngineFetcherPorts::new(
            BrokerHost(broker.clone()),
            Arc::new(
                FetchLanes::new(
                    BrokerHost(broker.clone()),
                    kmirror_protocol::client::ClientConfig::plaintext(&bootstrap),
                )
                .expect("lanes"),
            ),
            leader,
            Arc::new(kmirror_actors::engine::stats::MirrorStats::new("interop")),
            kmirror_actors::engine::fetch_settings::FetchSettings::default(),
        ),
        FetcherConfig {
            partition_max_bytes: 64 * 1024,
            ..FetcherConfig::default()
        },
    )
    .start();
    for key in &partitions {
        let progress = Reports(reports.clone()).start().recipient();
        fetcher
            .send(AttachPartition {
                key: TopicPartition::new(key.0.clone(), key.1),
                progress,
                // The destination leader epoch the partition's actor would attach with; the
                // source's unknown (-1), as a fetcher outside a pool fetches.
                epochs: FetchEpochs {
                    topic_id: uuid::Uuid::nil(),
                    source: -1,
                    destination: broker.leader_epoch(&key.0, key.1).expect("led"),
                },
            })
            .await
            .expect("fetcher alive");
    }

    // Done when every destination partition reaches its source's last stable offset.
    let mut targets = Vec::new();
    for (topic, partition) in &partitions {
        let (lso, _) = source
            .list_offsets(leader, topic, *partition, LATEST, Isolation::ReadCommitted)
            .await
            .expect("list offsets");
        targets.push(((topic.clone(), *partition), lso));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let behind: Vec<_> = targets
            .iter()
            .filter(|((topic, partition), lso)| {
                let p = broker.partition(topic, *partition).expect("partition");
                let end = p.log.lock().expect("log").log_end_offset();
                end < *lso
            })
            .collect();
        if behind.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "still behind: {behind:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for (topic, partition) in &partitions {
        let source_bytes = segment(topic, *partition);
        let mirrored = destination_bytes(&broker, topic, *partition);
        assert!(
            !mirrored.is_empty(),
            "{topic}-{partition} mirrored something"
        );
        assert!(
            mirrored == source_bytes,
            "{topic}-{partition}: {} bytes mirrored, the source segment has {}",
            mirrored.len(),
            source_bytes.len()
        );
    }
    let aborted = {
        let txn = broker.partition(&transactional, 0).expect("partition");
        let log = txn.log.lock().expect("log");
        log.aborted_transactions(0, log.log_end_offset())
    };
    assert!(
        !aborted.is_empty(),
        "the aborted transactions are known to the destination's READ_COMMITTED readers"
    );
    let appended = reports
        .borrow()
        .iter()
        .filter(|p| matches!(p, FetcherProgress(Ok(FetchProgress::Appended { .. }))))
        .count();
    assert!(appended >= partitions.len(), "{appended} appends reported");
    let snapshot = fetcher.send(DescribeFetcher).await.expect("alive");
    assert_eq!(snapshot.partitions.len(), partitions.len());
}

/// A broker over `dir` that advertises `port`.
fn open_broker_on(dir: &std::path::Path, port: u16) -> Arc<Broker> {
    let props = parse_properties(&format!(
        "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\nmirror.state.topic.num.partitions=4\n",
        dir.display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    Arc::new(Broker::open(config).expect("opens"))
}

/// A broker over `dir` with no listener.
fn open_broker(dir: &std::path::Path) -> Arc<Broker> {
    open_broker_on(dir, 0)
}

#[actix_rt::test]
async fn mirror_states_live_in_the_brokers_mirror_state_topic_across_a_restart() {
    use kmirror_protocol::messages::{
        ReadMirrorStatesRequest, WriteMirrorStatesRequest, read_mirror_states_request,
        write_mirror_states_request,
    };
    use kmirror_protocol::sharding::mirror_partition_shard;
    use kmirror_protocol::state::MirrorState;
    let dir = tempfile::tempdir().expect("temp dir");
    let topic_id = uuid::Uuid::from_u128(42);
    let shard = mirror_partition_shard("dr", &topic_id, 0, 4);
    let write = WriteMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![write_mirror_states_request::Topic {
            topic_id,
            name: "orders".into(),
            partitions: vec![write_mirror_states_request::Partition {
                partition_index: 0,
                leader_epoch: 3,
                state: MirrorState::Stopped.wire_value(),
                previous_state: MirrorState::Stopping.wire_value(),
                last_mirror_epoch: 2,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    {
        let broker = open_broker(dir.path());
        ensure_state_topic(&broker);
        assert_eq!(broker.topics()[MIRROR_STATE_TOPIC].partitions.len(), 4);
        let actor = CoordinatorShard::new(
            shard,
            4,
            StateLogPorts::new(BrokerHost(broker.clone()), shard),
        )
        .start();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answer = actor.send(WriteMirrorStates(write)).await.expect("alive");
        assert_eq!(answer.topics[0].partitions[0].error_code, 0);
        let end = broker
            .partition(MIRROR_STATE_TOPIC, shard)
            .expect("shard partition")
            .log
            .lock()
            .expect("log")
            .log_end_offset();
        assert_eq!(end, 2, "the state and the LME records, one batch");
        drop(actor);
        broker.close().expect("closes");
    }
    let broker = open_broker(dir.path());
    ensure_state_topic(&broker);
    let actor = CoordinatorShard::new(
        shard,
        4,
        StateLogPorts::new(BrokerHost(broker.clone()), shard),
    )
    .start();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let read = ReadMirrorStatesRequest {
        mirror_name: "dr".into(),
        topics: vec![read_mirror_states_request::Topic {
            topic_id,
            name: "orders".into(),
            partitions: vec![read_mirror_states_request::Partition {
                partition_index: 0,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let state = actor.send(ReadMirrorStates(read)).await.expect("alive");
    let p = &state.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.state, MirrorState::Stopped.wire_value());
    assert_eq!(p.leader_epoch, 3);
    let lme = actor
        .send(LastMirroredEpoch {
            mirror: "dr".into(),
            topic: "orders".into(),
            partition: 0,
        })
        .await
        .expect("alive");
    assert_eq!(lme, Some(2), "replayed from the topic after the restart");
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_mirror_system_mirrors_pauses_resumes_stops_and_the_topic_takes_java_writes() {
    use kmirror_actors::engine::system::{LoadMirror, MirrorSystem};
    use kmirror_actors::engine::topics::{ChangeTopic, DescribeTopic, StartTopic};
    use kmirror_actors::partition::{Desired, RetryPolicy};
    use kmirror_protocol::records::ControlRecord;
    use kmirror_protocol::sharding::mirror_partition_shard;
    use kmirror_protocol::state::MirrorState;

    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("stopped-mirror-{}", std::process::id());
    kafka_tools::create_topic(&bootstrap, &topic, 1, &[]);
    kafka_tools::produce(&bootstrap, &topic, 5_000, "lz4", &[]);
    let source = source_client(&bootstrap).await;
    let metadata = source
        .metadata(Some(&[topic.as_str()]))
        .await
        .expect("metadata");
    let source_topic = metadata.topics[topic.as_str()].clone();
    let leader = source_topic.partitions[0].leader;
    let source_cluster_id = source.cluster_id().await.expect("cluster id");

    let dir = tempfile::tempdir().expect("temp dir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let address = listener.local_addr().expect("address").to_string();
    let broker = open_broker_on(dir.path(), listener.local_addr().expect("address").port());
    let (stop_server, stopped) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(kmirror::broker::server::serve(
        broker.clone(),
        None,
        listener,
        stopped,
    ));

    broker
        .create_mirror(
            "dr",
            BTreeMap::from([("bootstrap.servers".to_string(), bootstrap.clone())]),
        )
        .await
        .expect("mirror created");
    let system = MirrorSystem::new(BrokerHost(broker.clone()), RetryPolicy::default()).start();
    system
        .send(LoadMirror("dr".into()))
        .await
        .expect("alive")
        .expect("mirror loaded");
    system
        .send(StartTopic {
            mirror: "dr".into(),
            topic: topic.clone(),
            confirmed: Default::default(),
        })
        .await
        .expect("alive")
        .expect("topic started");
    assert_eq!(
        broker.topics()[topic.as_str()].topic_id,
        source_topic.topic_id,
        "the destination topic has the source's id"
    );
    let wait_for = |wanted: MirrorState| {
        let system = system.clone();
        let topic = topic.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let described = system
                    .send(DescribeTopic {
                        mirror: "dr".into(),
                        topic: topic.clone(),
                    })
                    .await
                    .expect("alive")
                    .expect("described");
                if described.iter().all(|p| p.state == wanted) {
                    return described;
                }
                assert!(Instant::now() < deadline, "not {wanted:?}: {described:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let change = |desired: Desired| {
        let system = system.clone();
        let topic = topic.clone();
        async move {
            system
                .send(ChangeTopic {
                    mirror: "dr".into(),
                    topic,
                    desired,
                    cut_timestamp_ms: None,
                })
                .await
                .expect("alive")
                .expect("accepted");
        }
    };
    let mirror_name = || broker.topics()[topic.as_str()].configs["mirror.name"].clone();

    wait_for(MirrorState::Mirroring).await;
    let (lso, _) = source
        .list_offsets(leader, &topic, 0, LATEST, Isolation::ReadCommitted)
        .await
        .expect("list offsets");
    let partition = broker.partition(&topic, 0).expect("partition");
    let end = || partition.log.lock().expect("log").log_end_offset();
    let deadline = Instant::now() + Duration::from_secs(60);
    while end() < lso {
        assert!(Instant::now() < deadline, "mirrored {} of {lso}", end());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        partition
            .read_only
            .load(std::sync::atomic::Ordering::SeqCst),
        "read-only while mirroring"
    );
    assert_eq!(destination_bytes(&broker, &topic, 0), segment(&topic, 0));

    // Paused: the fetch stops, the log end stays while the source grows; resumed: it catches up.
    change(Desired::Paused).await;
    assert_eq!(mirror_name(), "dr.paused");
    wait_for(MirrorState::Paused).await;
    let paused_at = end();
    let (more_bootstrap, more_topic) = (bootstrap.clone(), topic.clone());
    tokio::task::spawn_blocking(move || {
        kafka_tools::produce(&more_bootstrap, &more_topic, 2_000, "lz4", &[]);
    })
    .await
    .expect("produced");
    let (lso, _) = source
        .list_offsets(leader, &topic, 0, LATEST, Isolation::ReadCommitted)
        .await
        .expect("list offsets");
    assert!(lso > paused_at);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(end(), paused_at, "nothing is fetched while PAUSED");
    assert!(
        partition
            .read_only
            .load(std::sync::atomic::Ordering::SeqCst)
    );
    change(Desired::Mirroring).await;
    assert_eq!(mirror_name(), "dr");
    wait_for(MirrorState::Mirroring).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while end() < lso {
        assert!(Instant::now() < deadline, "resumed to {} of {lso}", end());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(destination_bytes(&broker, &topic, 0), segment(&topic, 0));

    change(Desired::Stopped).await;
    assert_eq!(mirror_name(), "dr.removed");
    let stopped = wait_for(MirrorState::Stopped).await;
    let source_epoch = source_topic.partitions[0].leader_epoch;
    assert!(
        stopped[0].leader_epoch > source_epoch,
        "the destination epoch was bumped past the source's: {stopped:?}"
    );
    assert!(
        !partition
            .read_only
            .load(std::sync::atomic::Ordering::SeqCst)
    );
    let barrier = {
        let log = partition.log.lock().expect("log");
        log.find_batch(lso, |b| b.is_control()).expect("reads")
    };
    let barrier = barrier.expect("a control batch after the mirrored data");
    assert_eq!(
        barrier.base_offset(),
        lso,
        "appended right after the mirrored range"
    );
    assert_eq!(
        ControlRecord::parse(&barrier).expect("parses"),
        ControlRecord::MirrorPidReset { source_cluster_id }
    );
    // Issue 17 item 12: once STOPPED, the barrier and the STOPPED record (with the LME before
    // it) are durable, so a crash cannot run STOPPING again over acknowledged writes.
    {
        let log = partition.log.lock().expect("log");
        assert_eq!(
            log.recovery_point(),
            lso + 1,
            "the barrier is on disk before the topic takes writes"
        );
    }
    let shard_index = mirror_partition_shard(
        "dr",
        &source_topic.topic_id,
        0,
        broker.config().mirror_state_partitions,
    );
    {
        let state = broker
            .partition(MIRROR_STATE_TOPIC, shard_index)
            .expect("the shard's partition");
        let log = state.log.lock().expect("log");
        assert_eq!(
            log.recovery_point(),
            log.log_end_offset(),
            "the STOPPED record is on disk before the topic takes writes"
        );
    }
    // A shard loaded afresh from __mirror_state finds the LME the stop recorded.
    let replayed = CoordinatorShard::new(
        shard_index,
        broker.config().mirror_state_partitions,
        StateLogPorts::new(BrokerHost(broker.clone()), shard_index),
    )
    .start();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let lme = replayed
        .send(LastMirroredEpoch {
            mirror: "dr".into(),
            topic: topic.clone(),
            partition: 0,
        })
        .await
        .expect("alive");
    assert_eq!(
        lme,
        Some(source_epoch),
        "the LME is the last mirrored (source) epoch"
    );

    // On a blocking thread: the broker it writes to runs on this test's runtime.
    let producer_topic = topic.clone();
    let produced = tokio::task::spawn_blocking(move || {
        kafka_tools::kafka_tool(
            "org.apache.kafka.tools.VerifiableProducer",
            &[
                "--bootstrap-server",
                &address,
                "--topic",
                &producer_topic,
                "--max-messages",
                "10",
                "--acks",
                "-1",
            ],
        )
    })
    .await
    .expect("the producer ran");
    assert!(produced.contains("\"acked\":10"), "{produced}");
    assert_eq!(
        end(),
        lso + 1 + 10,
        "after the barrier, the producer's records"
    );
    let _ = stop_server.send(true);
    let _ = server.await;
}
