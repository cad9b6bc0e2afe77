//! A destination cluster of three kmirror brokers in this test process: one shared controller,
//! each broker with its own listener, log folder and mirroring engine, every partition's single
//! replica placed on one of them. Apache Kafka -> this cluster: `kmirror mirrors` on one broker
//! creates the mirror and starts a 12-partition topic; each broker mirrors the partitions it
//! leads. Partitions whose `__mirror_state` shard another broker leads can only persist their
//! states (PREPARING, MIRRORING, the LME, STOPPED) through ReadMirrorStates /
//! WriteMirrorStates over TCP; the test checks that some do, that every partition's log on its
//! broker equals Kafka's segment, that a stop reaches STOPPED everywhere, and that Kafka's
//! producer then writes to the topic through the cluster's metadata.

use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::controller::Controller;
use kmirror::mirror::BrokerHost;
use kmirror_actors::coordinator::{PartitionKey, Shard};
use kmirror_actors::engine::EngineRuntime;
use kmirror_actors::engine::state_log::MIRROR_STATE_TOPIC;
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use kmirror_protocol::records::coordinator_records;
use kmirror_protocol::sharding::mirror_partition_shard;
use kmirror_testkit::cli::{mirrors_cli, wait_described};
use kmirror_testkit::source::{segment, source_client, source_ends};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 12;
/// `__mirror_state` partitions: not a multiple of the broker count, so that among consecutive
/// partitions (whose shard numbers advance by one) some land on a shard another broker leads.
const SHARDS: i32 = 5;

/// One broker of the cluster, serving until dropped.
struct Member {
    node_id: i32,
    broker: Arc<Broker>,
    address: String,
    engine: Option<EngineRuntime>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(engine) = self.engine.take() {
            engine.stop();
        }
    }
}

async fn start_member(root: &Path, node_id: i32, controller: Arc<Mutex<Controller>>) -> Member {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let address = listener.local_addr().expect("address").to_string();
    let props = parse_properties(&format!(
        "node.id={node_id}\nlisteners=PLAINTEXT://{address}\nlog.dirs={}\nmirror.state.topic.num.partitions={SHARDS}\n",
        root.join(format!("broker-{node_id}")).display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    let broker = Arc::new(Broker::open_member(config, controller).expect("opens"));
    broker.follow_metadata();
    let engine = EngineRuntime::start(BrokerHost(broker.clone())).expect("engine");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(kmirror::broker::server::serve(
        broker.clone(),
        Some(engine.engine().clone()),
        listener,
        stopped,
    ));
    Member {
        node_id,
        broker,
        address,
        engine: Some(engine),
        stop,
    }
}

/// `kmirror mirrors` off the test's runtime (which serves the brokers meanwhile).
async fn cli(address: &str, args: &[&str]) -> (Option<i32>, String) {
    let address = address.to_string();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        mirrors_cli(&address, &args)
    })
    .await
    .expect("ran")
}

#[actix_rt::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn three_brokers_mirror_their_partitions_with_remote_coordinator_shards() {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let topic = format!("cluster-{}", std::process::id());
    // One-partition topics: some have their only partition on one broker and its shard on
    // another, which runs nothing of them (the shard must still forget them when deleted).
    let singles: Vec<String> = (0..6)
        .map(|i| format!("cluster-single-{}-{i}", std::process::id()))
        .collect();
    let (b, t, s) = (bootstrap.clone(), topic.clone(), singles.clone());
    tokio::task::spawn_blocking(move || {
        kafka_tools::create_topic(&b, &t, PARTITIONS as u32, &[]);
        kafka_tools::produce(&b, &t, 30_000, "lz4", &[]);
        for single in &s {
            kafka_tools::create_topic(&b, single, 1, &[]);
        }
    })
    .await
    .expect("source ready");

    let root = tempfile::tempdir().expect("temp dir");
    let controller = Arc::new(Mutex::new(
        Controller::open(&root.path().join("controller")).expect("controller"),
    ));
    let mut members = Vec::new();
    for node_id in 1..=3 {
        members.push(start_member(root.path(), node_id, controller.clone()).await);
    }
    let first = members[0].address.clone();
    let mirror_config = root.path().join("dr.properties");
    std::fs::write(&mirror_config, format!("bootstrap.servers={bootstrap}\n")).expect("written");
    let (code, text) = cli(
        &first,
        &[
            "--create",
            "--mirror",
            "dr",
            "--mirror-config",
            mirror_config.to_str().expect("UTF-8"),
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cli(&first, &["--start", "--mirror", "dr", "--topics", &topic]).await;
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = cli(
        &first,
        &["--start", "--mirror", "dr", "--topics", &singles.join(",")],
    )
    .await;
    assert_eq!(code, Some(0), "{text}");

    let source = source_client(&bootstrap).await;
    let ends = source_ends(&source, &topic, PARTITIONS).await;
    wait_described(&first, &topic, "MIRRORING", &ends).await;

    // Where things are: partitions on every broker, and some whose shard is on another one.
    let metadata = members[0].broker.topic(&topic).expect("mirror topic");
    let state_topic = members[0]
        .broker
        .topic(MIRROR_STATE_TOPIC)
        .expect("__mirror_state");
    let leaders: Vec<i32> = (0..PARTITIONS)
        .map(|p| members[0].broker.leader_of(&topic, p).expect("leader"))
        .collect();
    for m in &members {
        assert!(
            leaders.contains(&m.node_id),
            "broker {} leads some partitions: {leaders:?}",
            m.node_id
        );
    }
    let remote = (0..PARTITIONS)
        .filter(|&p| {
            let shard = mirror_partition_shard("dr", &metadata.topic_id, p, SHARDS);
            state_topic.partitions[shard as usize].leader != leaders[p as usize]
        })
        .count();
    assert!(
        remote > 0,
        "some partitions' coordinator shard is on another broker"
    );

    // Each partition's log, on the broker that leads it, is Kafka's segment byte for byte.
    for p in 0..PARTITIONS {
        let member = members
            .iter()
            .find(|m| m.node_id == leaders[p as usize])
            .expect("leader");
        let mirrored = std::fs::read(
            root.path()
                .join(format!("broker-{}", member.node_id))
                .join(format!("{topic}-{p}"))
                .join("00000000000000000000.log"),
        )
        .expect("destination segment");
        assert!(
            mirrored == segment(&topic, p),
            "{topic}-{p} differs from the source"
        );
        assert!(member.broker.partition(&topic, p).is_some());
    }

    // Failover: every broker stops its partitions; Kafka's producer writes through the cluster.
    let (code, text) = cli(&first, &["--stop", "--mirror", "dr", "--topics", &topic]).await;
    assert_eq!(code, Some(0), "{text}");
    let after_barrier: Vec<i64> = ends.iter().map(|e| e + 1).collect();
    wait_described(&first, &topic, "STOPPED", &after_barrier).await;
    let (address, t) = (members[1].address.clone(), topic.clone());
    let produced = tokio::task::spawn_blocking(move || {
        kafka_tool(
            "org.apache.kafka.tools.VerifiableProducer",
            &[
                "--bootstrap-server",
                &address,
                "--topic",
                &t,
                "--max-messages",
                "120",
                "--acks",
                "-1",
            ],
        )
    })
    .await
    .expect("ran");
    assert!(produced.contains("\"acked\":120"), "{produced}");
    let written: i64 = (0..PARTITIONS)
        .map(|p| {
            let member = members
                .iter()
                .find(|m| m.node_id == leaders[p as usize])
                .expect("leader");
            let partition = member.broker.partition(&topic, p).expect("partition");
            let end = partition.log.lock().expect("log").log_end_offset();
            end - after_barrier[p as usize]
        })
        .sum();
    assert_eq!(
        written, 120,
        "every record landed on its partition's broker"
    );

    // Issue 17 item 10: the topics deleted, every shard forgets them, also those led by
    // brokers that ran none of their partitions (no record resurfaces for a topic created
    // again).
    let mut deleted = vec![(topic.clone(), metadata.topic_id, PARTITIONS)];
    let mut elsewhere = 0;
    for single in &singles {
        wait_described(&first, single, "MIRRORING", &[0]).await;
        let id = members[0].broker.topic(single).expect("mirrored").topic_id;
        let shard = mirror_partition_shard("dr", &id, 0, SHARDS);
        if state_topic.partitions[shard as usize].leader
            != members[0].broker.leader_of(single, 0).expect("leader")
        {
            elsewhere += 1;
        }
        deleted.push((single.clone(), id, 1));
    }
    assert!(elsewhere > 0, "some single's shard is on another broker");
    for (name, _, _) in &deleted {
        members[0].broker.delete_topic(name).await.expect("deleted");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        for member in &members {
            for shard in 0..SHARDS {
                let Some(partition) = member.broker.partition(MIRROR_STATE_TOPIC, shard) else {
                    continue;
                };
                let records = {
                    let log = partition.log.lock().expect("log");
                    let mut replayed = Shard::new(shard, SHARDS);
                    log.for_each_batch(log.log_start_offset(), |batch| {
                        for record in coordinator_records(batch).expect("decodes") {
                            replayed.replay(&record);
                        }
                        Ok(())
                    })
                    .expect("reads");
                    replayed
                };
                let remembered: usize = deleted
                    .iter()
                    .map(|(name, id, partitions)| {
                        (0..*partitions)
                            .filter(|p| {
                                records.last_mirrored_epoch("dr", name, *p).is_some()
                                    || records
                                        .state_of(&PartitionKey {
                                            mirror: "dr".into(),
                                            topic_id: *id,
                                            partition: *p,
                                        })
                                        .is_some()
                            })
                            .count()
                    })
                    .sum();
                if remembered > 0 {
                    left.push((member.node_id, shard, remembered));
                }
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "shards still hold the deleted topic: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(members);
}
