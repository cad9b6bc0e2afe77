//! The engine's Fetcher actor mirroring a real Apache Kafka 4.x (started by
//! `scripts/kafka-local.sh`; scripts/test.sh exports `KMIRROR_KAFKA_*`) into a kmirror broker's
//! logs through the broker's ports (`kmirror::mirror`): an lz4 topic of three partitions and a
//! topic written by a transactional producer with random aborts. Every destination partition
//! ends up holding exactly the bytes of the source partition's segment file, at the same
//! offsets, and the partition actors heard of the appends. And the coordinator shard actor on
//! the broker's own `__mirror_state` topic, across a broker restart. And the MirrorSystem on a
//! broker: a topic of Apache Kafka started (PREPARING to MIRRORING), read-only meanwhile,
//! paused (nothing fetched while the source grows) and resumed (caught up), then the KIP's stop (fetcher removed, epoch bumped, LSO truncation, LME persisted, PID reset
//! appended) after which Kafka's Java producer writes to it.

use actix::{Actor, Context, Handler};
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::mirror::fetch::SourceFetcherPorts;
use kmirror::mirror::state_topic::{self, MIRROR_STATE_TOPIC, StateTopicPorts};
use kmirror_actors::actor::{
    AttachPartition, DescribeFetcher, Fetcher, FetcherConfig, FetcherProgress,
};
use kmirror_actors::actor::{
    CoordinatorShard, LastMirroredEpoch, ReadMirrorStates, WriteMirrorStates,
};
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

fn segment(topic: &str, partition: i32) -> Vec<u8> {
    let path = PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA"))
        .join("logs")
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A client of the source cluster, patient with a loaded machine.
async fn source_client(bootstrap: &str) -> Arc<SourceClient> {
    let mut config = ClientConfig::plaintext(bootstrap);
    config.request_timeout = Duration::from_secs(15);
    Arc::new(SourceClient::connect(config).await.expect("connects"))
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
    let mut partitions = Vec::new();
    let mut leader = -1;
    for topic in [&plain, &transactional] {
        let t = &metadata.topics[topic.as_str()];
        let configs = BTreeMap::from([("mirror.name".to_string(), "dr".to_string())]);
        let created = broker
            .create_topic(topic, t.partitions.len() as i32, configs, Some(t.topic_id))
            .expect("mirror topic created");
        assert_eq!(created.topic_id, t.topic_id, "the source's topic id");
        for p in &t.partitions {
            leader = p.leader;
            partitions.push((topic.clone(), p.partition));
        }
    }

    let reports = Rc::new(RefCell::new(Vec::new()));
    let fetcher = Fetcher::new(
        SourceFetcherPorts::new(broker.clone(), source.clone(), leader),
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
                key: key.clone(),
                progress,
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
        .filter(|p| matches!(p, FetcherProgress::Appended { .. }))
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
        state_topic::ensure_topic(&broker).expect("created");
        assert_eq!(broker.topics()[MIRROR_STATE_TOPIC].partitions.len(), 4);
        let actor =
            CoordinatorShard::new(shard, 4, StateTopicPorts::new(broker.clone(), shard)).start();
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
    state_topic::ensure_topic(&broker).expect("exists");
    let actor =
        CoordinatorShard::new(shard, 4, StateTopicPorts::new(broker.clone(), shard)).start();
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
    assert_eq!(lme, 2, "replayed from the topic after the restart");
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_mirror_system_mirrors_pauses_resumes_stops_and_the_topic_takes_java_writes() {
    use kmirror::mirror::system::{
        AddMirror, ChangeTopic, DescribeTopic, MirrorSystem, StartTopic,
    };
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
        listener,
        stopped,
    ));

    let system = MirrorSystem::new(broker.clone(), RetryPolicy::default()).start();
    system
        .send(AddMirror {
            name: "dr".into(),
            source: source.clone(),
        })
        .await
        .expect("alive")
        .expect("mirror added");
    system
        .send(StartTopic {
            mirror: "dr".into(),
            topic: topic.clone(),
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
    // A shard loaded afresh from __mirror_state finds the LME the stop recorded.
    let shard_index = mirror_partition_shard(
        "dr",
        &source_topic.topic_id,
        0,
        broker.config().mirror_state_partitions,
    );
    let replayed = CoordinatorShard::new(
        shard_index,
        broker.config().mirror_state_partitions,
        StateTopicPorts::new(broker.clone(), shard_index),
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
        lme, source_epoch,
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

/// A `kmirror broker` process over `dir` on `port`, killed when dropped.
struct BrokerProcess(std::process::Child);

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_broker(dir: &std::path::Path, port: u16) -> BrokerProcess {
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\nmirror.state.topic.num.partitions=4\n",
            dir.display()
        ),
    )
    .expect("config written");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .spawn()
        .expect("the broker starts");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..200 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    BrokerProcess(child)
}

/// `kmirror mirrors --bootstrap-server address ARGS`: exit code and output.
fn mirrors_cli(address: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["mirrors", "--bootstrap-server", address])
        .args(args)
        .output()
        .expect("kmirror mirrors runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// A `kmirror broker` process over `dir` on a free port, with mirror `dr` of the cluster at
/// `bootstrap` created by `kmirror mirrors --create`; returns it, its port and its address.
fn broker_with_mirror(dir: &std::path::Path, bootstrap: &str) -> (BrokerProcess, u16, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let broker = spawn_broker(dir, port);
    let mirror_config = dir.join("dr.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={bootstrap}\n")).expect("written");
    let config = mirror_config.to_str().expect("a UTF-8 path");
    let (code, text) = mirrors_cli(
        &address,
        &["--create", "--mirror", "dr", "--mirror-config", config],
    );
    assert_eq!(code, Some(0), "{text}");
    (broker, port, address)
}

/// DescribeMirrors of mirror `dr`: (state, destination offset) per partition of `topic`.
async fn described(address: &str, topic: &str) -> Vec<(String, i64)> {
    use kmirror_protocol::client::connection::Connection;
    use kmirror_protocol::messages::DescribeMirrorsRequest;
    let Ok(connection) =
        Connection::connect(address, &ClientConfig::plaintext(address), None).await
    else {
        return Vec::new();
    };
    let request = DescribeMirrorsRequest {
        mirror_names: vec!["dr".into()],
        ..Default::default()
    };
    let Ok((_, answer)) = connection.send("DescribeMirrors", &request, 0).await else {
        return Vec::new();
    };
    answer
        .mirrors
        .iter()
        .flat_map(|m| m.topics.iter())
        .filter(|t| t.topic_name == topic)
        .flat_map(|t| t.partitions.iter())
        .map(|p| match &p.error_message {
            // A failure shows its reason, so a wait that times out says why.
            Some(error) if p.state == "FAILED" => {
                (format!("FAILED: {error}"), p.destination_offset)
            }
            _ => (p.state.clone(), p.destination_offset),
        })
        .collect()
}

/// Waits until DescribeMirrors shows every partition of `topic` in `state` at the offsets
/// `ends`.
async fn wait_described(address: &str, topic: &str, state: &str, ends: &[i64]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = described(address, topic).await;
        let wanted: Vec<(String, i64)> = ends.iter().map(|e| (state.to_string(), *e)).collect();
        if now == wanted {
            return;
        }
        assert!(Instant::now() < deadline, "{now:?}, waiting for {wanted:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The source's last stable offsets of `topic`'s partitions.
async fn source_ends(source: &SourceClient, topic: &str, partitions: i32) -> Vec<i64> {
    let metadata = source.metadata(Some(&[topic])).await.expect("metadata");
    let mut ends = Vec::new();
    for p in 0..partitions {
        let leader = metadata.topics[topic].partitions[p as usize].leader;
        let (lso, _) = source
            .list_offsets(leader, topic, p, LATEST, Isolation::ReadCommitted)
            .await
            .expect("list offsets");
        ends.push(lso);
    }
    ends
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
    assert!(text.contains("TOPIC_ALREADY_IN_MIRROR"), "{text}");
    let ends = source_ends(&source, &topic, 2).await;
    wait_described(&address, &topic, "MIRRORING", &ends).await;

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
    wait_described(&address, &topic, "MIRRORING", &ends).await;
    for p in 0..2 {
        let mirrored = std::fs::read(
            dir.path()
                .join("data")
                .join(format!("{topic}-{p}"))
                .join("00000000000000000000.log"),
        )
        .expect("destination segment");
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
        let partition = &json["mirrors"][0]["partitions"][p];
        assert_eq!(partition["sourceOffset"], *end, "{json}");
        assert_eq!(partition["destinationOffset"], *end, "{json}");
        assert_eq!(partition["lag"], 0, "caught up: {json}");
    }
    let (code, text) = cli(&["--stop", "--mirror", "dr", "--topics", topic.as_str()]);
    assert_eq!(code, Some(0), "{text}");
    // The PID reset barrier follows the mirrored data in each partition.
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&address, &topic, "STOPPED", &after_barrier).await;
    let (code, text) = cli(&["--describe", "--mirror", "dr", "--json"]);
    assert_eq!(code, Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let partitions = json["mirrors"][0]["partitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
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
    kafka_tools::produce(&bootstrap, &compacted, 5_000, "none", &[]);
    kafka_tools::produce(&bootstrap, &input, 3_000, "lz4", &[]);
    kafka_tools::copy_transactionally(&bootstrap, &input, &txn, &format!("three-{run}"), 3_000);
    for (topic, partitions) in [(&lz4, 2), (&compacted, 1), (&txn, 1)] {
        let ends = source_ends(&source, topic, partitions).await;
        wait_described(&address, topic, "MIRRORING", &ends).await;
        for p in 0..partitions {
            let mirrored = std::fs::read(
                dir.path()
                    .join("data")
                    .join(format!("{topic}-{p}"))
                    .join("00000000000000000000.log"),
            )
            .expect("destination segment");
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
