//! The reference broker over TCP: kmirror's own client (and raw kafka-protocol requests) as the
//! Kafka client, in-process; and Apache Kafka's own tools against a `kmirror broker` process
//! (ignored by plain `cargo test`, run by scripts/test.sh, which provides Kafka's jars).

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource, AlterableConfig as LegacyAlterableConfig,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AlterConfigsRequest, ApiVersionsRequest, CreateAclsRequest,
    CreateTopicsRequest, DescribeConfigsRequest, InitProducerIdRequest, MetadataRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kmirror::acl::AclBinding;
use kmirror::broker::Broker;
use kmirror::broker::config::{BrokerConfig, parse_properties};
use kmirror::mirror::BrokerHost;
use kmirror_actors::engine::EngineRuntime;
use kmirror_actors::engine::state_log::{MIRROR_STATE_TOPIC, StateLogPorts};
use kmirror_protocol::batch::{RecordBatch, RecordBatches};
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{
    ClientConfig, ClientError, FetchPartitionSpec, FetchSpec, Isolation, SourceClient,
};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::kafka_tools::{
    self, kafka_env, kafka_tool, kafka_tool_output, verifiable_produce,
};
use kmirror_protocol::testing::BatchSpec;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

mod captured;
mod consumer_protocol;
mod kcat;
mod mirror_guards;
mod mirror_states;
mod protections;
mod versions;

struct Running {
    broker: Arc<Broker>,
    address: String,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    /// The mirroring engine, when it runs ([`start_mirroring`]).
    engine: Option<EngineRuntime>,
}

async fn start(dir: &Path) -> Running {
    start_with(dir, "").await
}

/// [`start`] with `extra` lines in the broker's properties.
async fn start_with(dir: &Path, extra: &str) -> Running {
    start_broker(dir, extra, false).await
}

/// [`start_with`], with the mirroring engine as `kmirror broker` runs it.
async fn start_mirroring(dir: &Path, extra: &str) -> Running {
    start_broker(dir, extra, true).await
}

async fn start_broker(dir: &Path, extra: &str, mirroring: bool) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let port = listener.local_addr().expect("address").port();
    let props = parse_properties(&format!(
        "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\nnum.partitions=2\n{extra}",
        dir.display()
    ))
    .expect("parses");
    let (config, _) = BrokerConfig::from_properties(&props).expect("valid");
    let broker = Arc::new(open_again(config).await);
    let engine =
        mirroring.then(|| EngineRuntime::start(BrokerHost(broker.clone())).expect("engine"));
    let (stop, stopped) = watch::channel(false);
    let server = tokio::spawn(kmirror::broker::server::serve(
        broker.clone(),
        engine.as_ref().map(|e| e.engine().clone()),
        listener,
        stopped,
    ));
    Running {
        broker,
        address: format!("127.0.0.1:{port}"),
        stop,
        server,
        engine,
    }
}

/// Opens a broker on `config`, over a folder a broker of this test may have just closed: a
/// child process another test forks in that moment holds a copy of the lock's descriptor until
/// it executes its program (the descriptor closes on exec), so a refused lock is tried again
/// for a few seconds.
async fn open_again(config: BrokerConfig) -> Broker {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match Broker::open(config.clone()) {
            Err(kmirror::storage::StorageError::LogDirLocked { .. })
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            opened => return opened.expect("opens"),
        }
    }
}

async fn shut(running: Running) {
    let _ = running.stop.send(true);
    let _ = running.server.await;
    if let Some(engine) = running.engine {
        engine.stop();
    }
    running.broker.close().expect("closes");
}

/// Creates `__mirror_state` as the engine does the first time a mirror needs it.
async fn ensure_state_topic(broker: &Broker) {
    if broker.topic(MIRROR_STATE_TOPIC).is_none() {
        let partitions = broker.config().mirror_state_partitions;
        broker
            .create_topic(
                MIRROR_STATE_TOPIC,
                partitions,
                1,
                std::collections::BTreeMap::new(),
                None,
            )
            .await
            .expect("__mirror_state");
    }
}

async fn connection(address: &str) -> Connection {
    Connection::connect(address, &ClientConfig::plaintext(address), None)
        .await
        .expect("connects")
}

async fn create(address: &str, name: &str, partitions: i32) -> i16 {
    create_with_configs(address, name, partitions, &[]).await
}

/// CreateTopics with topic configs; returns the topic's error code.
async fn create_with_configs(
    address: &str,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> i16 {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(configs),
    ]);
    let (_, response) = connection(address)
        .await
        .send("CreateTopics", &request, 7)
        .await
        .expect("answers");
    response.topics[0].error_code
}

async fn produce(
    address: &str,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> Option<(i16, i64)> {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let (_, response) = connection(address)
        .await
        .send("Produce", &request, 11)
        .await
        .ok()?;
    let p = &response.responses[0].partition_responses[0];
    Some((p.error_code, p.base_offset))
}

async fn fetch_all(client: &SourceClient, topic: &str, partition: i32) -> Vec<RecordBatch> {
    let meta = client.metadata(Some(&[topic])).await.expect("metadata");
    let t = &meta.topics[topic];
    let mut offset = 0;
    let mut out = Vec::new();
    loop {
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: topic.to_string(),
                topic_id: t.topic_id,
                partition,
                offset,
                current_leader_epoch: t.partitions[partition as usize].leader_epoch,
                last_fetched_epoch: -1,
                max_bytes: 1 << 20,
            }],
            isolation: Isolation::ReadUncommitted,
            max_wait_ms: 10,
            min_bytes: 1,
            max_bytes: 1 << 20,
        };
        let answer = client.fetch(1, &spec).await.expect("fetch").remove(0);
        assert_eq!(answer.error.0, 0);
        let before = out.len();
        for b in RecordBatches::new(answer.records) {
            let b = b.expect("valid");
            offset = b.next_offset();
            out.push(b);
        }
        if out.len() == before {
            return out;
        }
    }
}

#[tokio::test]
async fn produce_fetch_offsets_and_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let address = running.address.clone();
    assert_eq!(create(&address, "orders", 2).await, 0);
    assert_eq!(
        create(&address, "orders", 2).await,
        ErrorCode::TOPIC_ALREADY_EXISTS.0
    );
    assert_eq!(
        create(&address, "bad name", 1).await,
        ErrorCode::INVALID_TOPIC_EXCEPTION.0
    );

    let mut sent = Vec::new();
    for i in 0..5 {
        let batch = BatchSpec {
            records: 3,
            value_size: 50 + i,
            ..BatchSpec::default()
        }
        .build();
        let (error, base) = produce(&address, "orders", 1, batch.clone(), -1)
            .await
            .expect("answered");
        assert_eq!((error, base), (0, 3 * i as i64));
        sent.push(batch);
    }
    // An idempotent producer's retry is answered with the original offsets, not appended again.
    let idempotent = BatchSpec {
        producer_id: 9,
        producer_epoch: 0,
        base_sequence: 0,
        records: 2,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&address, "orders", 1, idempotent.clone(), -1).await,
        Some((0, 15))
    );
    assert_eq!(
        produce(&address, "orders", 1, idempotent, -1).await,
        Some((0, 15))
    );
    // acks=0: appended, no answer; the connection stays usable.
    let mut raw = TcpStream::connect(&address).await.expect("connects");
    let unacknowledged = ProduceRequest::default()
        .with_acks(0)
        .with_timeout_ms(5000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(BatchSpec::default().build())),
                ]),
        ]);
    let mut frame = BytesMut::new();
    kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(0)
        .with_request_api_version(9)
        .with_correlation_id(7)
        .encode(&mut frame, 2)
        .expect("encodes");
    unacknowledged.encode(&mut frame, 9).expect("encodes");
    raw.write_all(&(frame.len() as i32).to_be_bytes())
        .await
        .expect("writes");
    raw.write_all(&frame).await.expect("writes");
    let mut api_versions = BytesMut::new();
    kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(18)
        .with_request_api_version(0)
        .with_correlation_id(8)
        .encode(&mut api_versions, 1)
        .expect("encodes");
    raw.write_all(&(api_versions.len() as i32).to_be_bytes())
        .await
        .expect("writes");
    raw.write_all(&api_versions).await.expect("writes");
    let _len = raw.read_i32().await.expect("the next request is answered");
    assert_eq!(
        raw.read_i32().await.expect("correlation id"),
        8,
        "the first answer on the connection is the ApiVersions one"
    );
    let end = running
        .broker
        .partition("orders", 0)
        .map(|p| p.log.lock().expect("log").log_end_offset());
    assert_eq!(end, Some(1), "the acks=0 batch was appended");
    assert_eq!(
        produce(&address, "missing", 0, BatchSpec::default().build(), 1)
            .await
            .map(|r| r.0),
        Some(3)
    );

    let client = SourceClient::connect(ClientConfig::plaintext(&address))
        .await
        .expect("connects");
    assert_eq!(
        client.cluster_id().await.expect("cluster id"),
        running.broker.cluster_id()
    );
    let stored = fetch_all(&client, "orders", 1).await;
    assert_eq!(stored.len(), 6);
    for (i, batch) in stored.iter().take(5).enumerate() {
        // The broker assigned the offsets and its epoch; everything under the CRC is the producer's.
        assert_eq!(batch.base_offset(), 3 * i as i64);
        assert_eq!(&batch.as_bytes()[21..], &sent[i][21..]);
        assert!(batch.verify_crc().is_ok());
    }
    assert_eq!(
        client
            .list_offsets(1, "orders", 1, LATEST, Isolation::ReadUncommitted)
            .await
            .expect("latest")
            .0,
        17
    );
    assert_eq!(
        client
            .offset_for_leader_epoch(1, "orders", 1, 0, 0)
            .await
            .expect("epoch end"),
        (0, 17)
    );

    // A restart keeps topics, ids, offsets and the cluster id.
    let cluster_id = running.broker.cluster_id();
    let topic_id = client
        .metadata(Some(&["orders"]))
        .await
        .expect("metadata")
        .topics["orders"]
        .topic_id;
    shut(running).await;
    let running = start(dir.path()).await;
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    assert_eq!(client.cluster_id().await.expect("cluster id"), cluster_id);
    let meta = client.metadata(Some(&["orders"])).await.expect("metadata");
    assert_eq!(meta.topics["orders"].topic_id, topic_id);
    let after = fetch_all(&client, "orders", 1).await;
    assert_eq!(
        after, stored,
        "every acknowledged batch is back, byte for byte"
    );
    shut(running).await;
}

/// A topic created with `mirror.name` (as StartMirrorTopics creates it) is a mirror topic:
/// producers get READ_ONLY_TOPIC and nothing is written, until the engine opens the partition
/// (as it does at STOPPED); the config is hidden from DescribeConfigs.
#[tokio::test]
async fn mirror_topics_are_read_only_until_opened() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    // The mirror leaves the flush settings to the destination, so they may change below.
    running
        .broker
        .create_mirror(
            "dr",
            std::collections::BTreeMap::from([
                ("bootstrap.servers".to_string(), "source:9092".to_string()),
                (
                    "mirror.topic.properties.exclude".to_string(),
                    "flush\\..*".to_string(),
                ),
            ]),
        )
        .await
        .expect("mirror created");
    running
        .broker
        .create_topic(
            "mirrored",
            2,
            1,
            std::collections::BTreeMap::from([("mirror.name".to_string(), "dr".to_string())]),
            None,
        )
        .await
        .expect("created");
    let records = || {
        BatchSpec {
            records: 3,
            ..BatchSpec::default()
        }
        .build()
    };
    let refused = produce(&running.address, "mirrored", 0, records(), -1).await;
    assert_eq!(refused, Some((ErrorCode::READ_ONLY_TOPIC.0, -1)));
    let end = running
        .broker
        .partition("mirrored", 0)
        .expect("exists")
        .log
        .lock()
        .expect("lock")
        .log_end_offset();
    assert_eq!(end, 0, "nothing was written");
    assert!(running.broker.set_read_only("mirrored", 0, false));
    assert_eq!(
        produce(&running.address, "mirrored", 0, records(), -1).await,
        Some((0, 0)),
        "a stopped mirror partition takes writes"
    );
    assert_eq!(
        produce(&running.address, "mirrored", 1, records(), -1).await,
        Some((ErrorCode::READ_ONLY_TOPIC.0, -1)),
        "the flag is per partition"
    );
    let describe = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("mirrored"))
            .with_configuration_keys(None),
    ]);
    let (_, described) = connection(&running.address)
        .await
        .send("DescribeConfigs", &describe, 4)
        .await
        .expect("answers");
    let names: Vec<&str> = described.results[0]
        .configs
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert!(names.contains(&"retention.ms"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mirror.")), "{names:?}");

    // The legacy AlterConfigs replaces the visible configs; the hidden mirror.* ones stay. A
    // mirroring topic takes no retention change (POLICY_VIOLATION) and, like any topic, no
    // config this broker does not enforce (INVALID_CONFIG).
    let alter = |configs: Vec<(&'static str, &'static str)>| {
        AlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("mirrored"))
                .with_configs(
                    configs
                        .into_iter()
                        .map(|(k, v)| {
                            LegacyAlterableConfig::default()
                                .with_name(StrBytes::from_static_str(k))
                                .with_value(Some(StrBytes::from_static_str(v)))
                        })
                        .collect(),
                ),
        ])
    };
    let client = connection(&running.address).await;
    let (_, altered) = client
        .send("AlterConfigs", &alter(vec![("flush.ms", "60000")]), 2)
        .await
        .expect("answers");
    assert_eq!(altered.responses[0].error_code, 0);
    let (_, refused) = client
        .send("AlterConfigs", &alter(vec![("retention.ms", "60000")]), 2)
        .await
        .expect("answers");
    assert_eq!(
        refused.responses[0].error_code,
        ErrorCode::POLICY_VIOLATION.0
    );
    let (_, refused) = client
        .send(
            "AlterConfigs",
            &alter(vec![("cleanup.policy", "compact")]),
            2,
        )
        .await
        .expect("answers");
    assert_eq!(refused.responses[0].error_code, ErrorCode::INVALID_CONFIG.0);
    let configs = running.broker.topics()["mirrored"].configs.clone();
    assert_eq!(configs.get("flush.ms").map(String::as_str), Some("60000"));
    assert_eq!(configs.get("retention.ms"), None);
    assert_eq!(configs.get("mirror.name").map(String::as_str), Some("dr"));
    assert_eq!(
        produce(&running.address, "mirrored", 1, records(), -1).await,
        Some((ErrorCode::READ_ONLY_TOPIC.0, -1)),
        "still a mirror topic"
    );
    ensure_state_topic(&running.broker).await;
    assert_eq!(
        produce(&running.address, "__mirror_state", 0, records(), -1).await,
        Some((ErrorCode::INVALID_TOPIC_EXCEPTION.0, -1)),
        "only the coordinator writes __mirror_state"
    );
    shut(running).await;
}

/// Retention from topic configs: with `segment.ms=1` (a segment per produce, as the test waits
/// between them; `segment.bytes` may not go below 1 MiB) and `retention.bytes=2048`, the log
/// manager's pass deletes the oldest segments and the earliest offset a consumer can list moves
/// up; what is left still reads back.
#[tokio::test]
async fn retention_deletes_old_segments_and_moves_the_log_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let configs = [("segment.ms", "1"), ("retention.bytes", "2048")];
    assert_eq!(
        create_with_configs(&running.address, "retained", 1, &configs).await,
        0
    );
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let batch = BatchSpec {
            records: 3,
            value_size: 100,
            timestamp_ms: kmirror::broker::now_ms(),
            ..BatchSpec::default()
        }
        .build();
        let (error, _) = produce(&running.address, "retained", 0, batch, -1)
            .await
            .expect("answered");
        assert_eq!(error, 0);
    }
    let deleted = running.broker.housekeeping(kmirror::broker::now_ms());
    assert!(deleted > 0, "segments beyond retention.bytes are deleted");
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    let (earliest, _) = client
        .list_offsets(1, "retained", 0, -2, Isolation::ReadUncommitted)
        .await
        .expect("earliest");
    let (latest, _) = client
        .list_offsets(1, "retained", 0, -1, Isolation::ReadUncommitted)
        .await
        .expect("latest");
    assert!(earliest > 0, "the log start moved up");
    assert_eq!(latest, 60, "no record above the log start is lost");
    let size = running
        .broker
        .partition("retained", 0)
        .expect("exists")
        .log
        .lock()
        .expect("lock")
        .size_bytes();
    assert!(size <= 2048 + 1024, "{size} bytes kept");
    assert_eq!(
        running.broker.housekeeping(kmirror::broker::now_ms()),
        0,
        "nothing more to delete"
    );
    shut(running).await;
}

/// A partition whose log cannot be made (a file where its directory goes) fails its own topic
/// with KAFKA_STORAGE_ERROR, and holds up nothing else: the topic's other partitions open, and
/// topics created afterwards, before or after it in name order, are created and take writes.
#[tokio::test]
async fn a_partition_whose_log_cannot_be_made_fails_only_its_own_topic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    std::fs::write(dir.path().join("q-1"), b"not a directory").expect("written");
    assert_eq!(
        create(&running.address, "q", 4).await,
        ErrorCode::KAFKA_STORAGE_ERROR.0
    );
    for partition in [0, 2, 3] {
        assert!(
            running.broker.partition("q", partition).is_some(),
            "q-{partition}"
        );
    }
    for topic in ["aa", "zz"] {
        assert_eq!(create(&running.address, topic, 1).await, 0, "{topic}");
        let batch = BatchSpec {
            records: 3,
            ..BatchSpec::default()
        }
        .build();
        let (error, offset) = produce(&running.address, topic, 0, batch, -1)
            .await
            .expect("answered");
        assert_eq!((error, offset), (0, 0), "{topic}");
    }
    shut(running).await;
}

#[tokio::test]
async fn concurrent_epoch_bumps_are_committed_together_and_survive_a_restart() {
    const PARTITIONS: i32 = 64;
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    assert_eq!(create(&running.address, "bumped", PARTITIONS).await, 0);
    let mut bumps = tokio::task::JoinSet::new();
    // Every partition once, and partition 0 three times: a repeat of a bump changes nothing.
    for p in (0..PARTITIONS).chain([0, 0]) {
        let broker = running.broker.clone();
        bumps.spawn(async move { (p, broker.bump_leader_epoch_grouped("bumped", p, 10).await) });
    }
    let missing = running
        .broker
        .bump_leader_epoch_grouped("bumped", PARTITIONS, 10)
        .await;
    assert_eq!(missing, Ok(None), "a partition that does not exist");
    let mut answered = 0;
    while let Some(joined) = bumps.join_next().await {
        let (p, outcome) = joined.expect("joins");
        assert_eq!(outcome, Ok(Some(11)), "partition {p}");
        answered += 1;
    }
    assert_eq!(answered, PARTITIONS + 2);
    for p in 0..PARTITIONS {
        assert_eq!(running.broker.leader_epoch("bumped", p), Some(11));
    }
    shut(running).await;
    // The bumps were durable: the restart's new term starts above them.
    let running = start(dir.path()).await;
    for p in 0..PARTITIONS {
        let epoch = running.broker.leader_epoch("bumped", p).expect("exists");
        assert!(
            epoch > 11,
            "partition {p} at epoch {epoch} after the restart"
        );
    }
    shut(running).await;
}

/// Descriptors this process holds on segment files of `topic`'s partitions under `dir`.
fn open_segment_files(dir: &Path, topic: &str) -> usize {
    let prefix = format!("{topic}-");
    std::fs::read_dir("/proc/self/fd")
        .expect("lists descriptors")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| {
            target
                .strip_prefix(dir)
                .is_ok_and(|inside| inside.to_string_lossy().starts_with(&prefix))
        })
        .count()
}

#[tokio::test]
async fn more_partitions_than_open_files_keep_every_record_across_a_restart() {
    const PARTITIONS: i32 = 100;
    const BOUND: usize = 16;
    let dir = tempfile::tempdir().expect("temp dir");
    let bound = format!("log.open.files.max={BOUND}");
    let running = start_with(dir.path(), &bound).await;
    assert_eq!(create(&running.address, "wide", PARTITIONS).await, 0);
    // Two rounds over every partition: each append of the second round reopens a closed file.
    let mut produced = vec![Vec::new(); PARTITIONS as usize];
    for round in 0..2 {
        for p in 0..PARTITIONS {
            let batch = BatchSpec {
                records: 3,
                value_size: 10 + p as usize + round,
                ..BatchSpec::default()
            }
            .build();
            let (error, base) = produce(&running.address, "wide", p, batch.clone(), -1)
                .await
                .expect("answered");
            assert_eq!((error, base), (0, 3 * round as i64));
            produced[p as usize].push(batch);
        }
        let open = open_segment_files(dir.path(), "wide");
        assert!(
            open > 0 && open <= BOUND,
            "{open} segment files open, bound {BOUND}"
        );
    }
    // The records section and CRC are what the producer sent; the broker only stamps the
    // offset and epoch before them.
    let check = |fetched: Vec<RecordBatch>, p: usize| {
        assert_eq!(fetched.len(), 2, "partition {p}");
        for (got, sent) in fetched.iter().zip(&produced[p]) {
            got.verify_crc().expect("crc holds");
            assert_eq!(got.as_bytes()[17..], sent[17..], "partition {p}");
        }
    };
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    for p in 0..PARTITIONS {
        check(fetch_all(&client, "wide", p).await, p as usize);
    }
    assert!(open_segment_files(dir.path(), "wide") <= BOUND);
    shut(running).await;

    let running = start_with(dir.path(), &bound).await;
    let open = open_segment_files(dir.path(), "wide");
    assert!(open <= BOUND, "{open} segment files open after the restart");
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    for p in (0..PARTITIONS).rev() {
        check(fetch_all(&client, "wide", p).await, p as usize);
    }
    shut(running).await;
}

#[tokio::test]
async fn malformed_input_closes_only_that_connection_and_unknown_apis_are_answered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let closed = |mut s: TcpStream| async move {
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf).await, Ok(0) | Err(_))
    };
    // A frame larger than socket.request.max.bytes.
    let mut s = TcpStream::connect(&running.address)
        .await
        .expect("connects");
    s.write_all(&i32::MAX.to_be_bytes()).await.expect("writes");
    assert!(closed(s).await);
    // An API key Kafka does not define, then one this broker does not serve (DescribeLogDirs), on
    // one connection: each answered UNSUPPORTED_VERSION after its correlation id, and the
    // connection stays usable.
    let mut s = TcpStream::connect(&running.address)
        .await
        .expect("connects");
    s.write_all(&[0, 0, 0, 10, 0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0xff, 0xff])
        .await
        .expect("writes");
    s.write_all(&[0, 0, 0, 10, 0, 35, 0, 2, 0, 0, 0, 2, 0xff, 0xff])
        .await
        .expect("writes");
    for correlation_id in [1i32, 2] {
        let mut answer = [0u8; 10];
        s.read_exact(&mut answer).await.expect("answered");
        let mut expected = 6i32.to_be_bytes().to_vec();
        expected.extend_from_slice(&correlation_id.to_be_bytes());
        expected.extend_from_slice(&ErrorCode::UNSUPPORTED_VERSION.0.to_be_bytes());
        assert_eq!(answer.to_vec(), expected, "UNSUPPORTED_VERSION");
    }
    s.write_all(&[0, 0, 0, 12, 0, 0, 0, 9, 0, 0, 0, 3, 0xff, 0xff, 0xde, 0xad])
        .await
        .expect("writes");
    assert!(
        closed(s).await,
        "a body that does not decode still closes it"
    );
    // A Produce body that does not decode.
    let mut s = TcpStream::connect(&running.address)
        .await
        .expect("connects");
    s.write_all(&[0, 0, 0, 12, 0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xde, 0xad])
        .await
        .expect("writes");
    assert!(closed(s).await);
    // A client that disconnects mid-request.
    let mut s = TcpStream::connect(&running.address)
        .await
        .expect("connects");
    s.write_all(&[0, 0, 1, 0, 0, 18]).await.expect("writes");
    drop(s);
    // ApiVersions at a version from the future: the v0 fallback answer with UNSUPPORTED_VERSION.
    let mut s = TcpStream::connect(&running.address)
        .await
        .expect("connects");
    let mut frame = BytesMut::new();
    kafka_protocol::messages::RequestHeader::default()
        .with_request_api_key(18)
        .with_request_api_version(99)
        .with_correlation_id(5)
        .encode(&mut frame, 1)
        .expect("encodes");
    ApiVersionsRequest::default()
        .encode(&mut frame, 0)
        .expect("encodes");
    s.write_all(&(frame.len() as i32).to_be_bytes())
        .await
        .expect("writes");
    s.write_all(&frame).await.expect("writes");
    let len = s.read_i32().await.expect("answered") as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.expect("reads");
    assert_eq!(&body[..4], &5i32.to_be_bytes(), "correlation id");
    assert_eq!(
        &body[4..6],
        &ErrorCode::UNSUPPORTED_VERSION.0.to_be_bytes(),
        "UNSUPPORTED_VERSION"
    );
    // The broker still serves everyone else.
    assert_eq!(create(&running.address, "still-fine", 1).await, 0);
    shut(running).await;
}

/// With `authorizer.enabled=true` and no ACL, an anonymous client sees no topic and every
/// request on one is refused with the resource's *_AUTHORIZATION_FAILED; ACLs (for its host,
/// durable across a restart) open exactly what they name.
#[tokio::test]
async fn the_authorizer_enforces_acls_per_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let strict = "authorizer.enabled=true\n";
    let running = start_with(dir.path(), strict).await;
    let address = running.address.clone();
    let client = connection(&address).await;
    assert_eq!(
        create(&address, "ledger", 1).await,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED.0,
        "CREATE refused"
    );
    running
        .broker
        .create_topic("ledger", 1, 1, Default::default(), None)
        .await
        .expect("created by the operator");
    let batch = BatchSpec::default().build();
    assert_eq!(
        produce(&address, "ledger", 0, batch.clone(), -1)
            .await
            .map(|r| r.0),
        Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED.0)
    );
    let (_, meta) = client
        .send(
            "Metadata",
            &MetadataRequest::default().with_topics(None),
            12,
        )
        .await
        .expect("Metadata answers");
    assert!(meta.topics.is_empty(), "no DESCRIBE, no topic listed");
    let (_, created) = client
        .send(
            "CreateAcls",
            &CreateAclsRequest::default().with_creations(vec![
                AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("ledger"))
                    .with_resource_pattern_type(3)
                    .with_principal(StrBytes::from_static_str("User:ANONYMOUS"))
                    .with_host(StrBytes::from_static_str("*"))
                    .with_operation(4)
                    .with_permission_type(3),
            ]),
            3,
        )
        .await
        .expect("CreateAcls answers");
    assert_eq!(
        created.results[0].error_code,
        ErrorCode::CLUSTER_AUTHORIZATION_FAILED.0
    );
    let grant = |name: &str, host: &str, operation| {
        AclBinding::from_wire(2, name, 4, "User:ANONYMOUS", host, operation, 3).expect("valid")
    };
    let results = running.broker.create_acls(vec![
        grant("led", "127.0.0.1", 4),
        grant("ledger", "10.9.9.9", 3),
    ]);
    results.await.expect("ACLs stored");
    assert_eq!(
        produce(&address, "ledger", 0, batch.clone(), -1).await,
        Some((0, 0)),
        "WRITE on the prefix, from this host"
    );
    shut(running).await;

    let running = start_with(dir.path(), strict).await;
    let address = running.address.clone();
    let client = connection(&address).await;
    assert_eq!(
        produce(&address, "ledger", 0, batch, -1).await,
        Some((0, 1)),
        "the ACLs survived the restart"
    );
    let (_, meta) = client
        .send(
            "Metadata",
            &MetadataRequest::default().with_topics(None),
            12,
        )
        .await
        .expect("Metadata answers");
    assert_eq!(meta.topics.len(), 1, "WRITE implies DESCRIBE");
    let fetched =
        kmirror_protocol::client::SourceClient::connect(ClientConfig::plaintext(&address))
            .await
            .expect("connects");
    let answer = fetched
        .fetch(
            1,
            &FetchSpec {
                partitions: vec![FetchPartitionSpec {
                    topic: "ledger".to_string(),
                    topic_id: meta.topics[0].topic_id,
                    partition: 0,
                    offset: 0,
                    current_leader_epoch: -1,
                    last_fetched_epoch: -1,
                    max_bytes: 1 << 20,
                }],
                isolation: Isolation::ReadUncommitted,
                max_wait_ms: 10,
                min_bytes: 1,
                max_bytes: 1 << 20,
            },
        )
        .await
        .expect("fetch answers");
    assert_eq!(
        answer[0].error,
        ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        "READ is granted only to another host"
    );
    shut(running).await;
}

/// Array lengths no frame could hold (2^31 - 1 elements in a 14-byte DescribeConfigs, 2^32 - 2
/// in a flexible one) are refused as undecodable requests; the broker neither aborts on the
/// up-front reservation kafka-protocol's decoders make nor stops serving.
#[tokio::test]
async fn impossible_array_lengths_are_refused_without_reserving_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let classic =
        Bytes::from_static(&[0, 32, 0, 1, 0, 0, 0, 7, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]);
    let flexible = Bytes::from_static(&[
        0, 32, 0, 4, 0, 0, 0, 8, 0xff, 0xff, 0, 0xfe, 0xff, 0xff, 0xff, 0x0f,
    ]);
    for frame in [classic, flexible] {
        let answer = kmirror::broker::server::handle(&running.broker, None, "/test", frame).await;
        assert!(answer.is_err(), "refused: {answer:?}");
    }
    assert_eq!(create(&running.address, "after-bad-arrays", 1).await, 0);
    shut(running).await;
}

/// KIP-1279's CreateMirror, ListMirrors and DeleteMirror over the wire (durable across a
/// restart, refused with the KIP's codes), and LastMirroredEpochs answered from the broker's
/// `__mirror_state` for the mirror whose source is the asking cluster.
#[tokio::test]
async fn mirrors_are_created_listed_deleted_and_answer_last_mirrored_epochs() {
    use kmirror_protocol::messages::{
        CreateMirrorRequest, DeleteMirrorRequest, DescribeMirrorsRequest, DescribeMirrorsResponse,
        ListMirrorsRequest, create_mirror_request, describe_mirrors_request,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let create_mirror = |name: &str, configs: &[(&str, &str)]| CreateMirrorRequest {
        mirror_name: name.to_string(),
        configs: configs
            .iter()
            .map(|(k, v)| create_mirror_request::MirrorConfig {
                name: k.to_string(),
                value: Some(v.to_string()),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let source_configs = [
        ("bootstrap.servers", "source:9092"),
        ("mirror.source.cluster.id", "SRC-ID"),
        ("sasl.password", "hunter2"),
    ];
    let client = connection(&running.address).await;
    for (request, code) in [
        (create_mirror("m1", &source_configs), 0),
        (
            create_mirror("m1", &source_configs),
            ErrorCode::CLUSTER_MIRROR_ALREADY_EXISTS.0,
        ),
        (
            create_mirror("bad name", &source_configs),
            ErrorCode::INVALID_REQUEST.0,
        ),
        (
            create_mirror("m1.paused", &source_configs),
            ErrorCode::INVALID_REQUEST.0,
        ),
        (create_mirror("dc.west", &source_configs), 0),
        (
            create_mirror("m2", &[("mirror.source.cluster.id", "X")]),
            ErrorCode::INVALID_CONFIG.0,
        ),
    ] {
        let (_, answer) = client
            .send("CreateMirror", &request, 0)
            .await
            .expect("CreateMirror answers");
        assert_eq!(answer.error_code, code, "{:?}", request.mirror_name);
    }
    // A mirror named with dots, as topics may be, goes like any other.
    let (_, deleted) = client
        .send(
            "DeleteMirror",
            &DeleteMirrorRequest {
                mirror_name: "dc.west".into(),
                ..Default::default()
            },
            0,
        )
        .await
        .expect("DeleteMirror answers");
    assert_eq!(deleted.error_code, 0, "{deleted:?}");
    shut(running).await;

    let running = start(dir.path()).await;
    let client = connection(&running.address).await;
    let (_, listed) = client
        .send(
            "ListMirrors",
            &ListMirrorsRequest {
                include_topic_names: true,
                ..Default::default()
            },
            0,
        )
        .await
        .expect("ListMirrors answers");
    assert_eq!(listed.mirrors.len(), 1, "the mirror survived the restart");
    assert_eq!(listed.mirrors[0].mirror_name, "m1");
    assert_eq!(listed.mirrors[0].source_bootstrap, "source:9092");
    assert_eq!(listed.mirrors[0].source_cluster_id, "SRC-ID");
    assert!(
        !format!("{listed:?}").contains("hunter2"),
        "no secrets shown"
    );

    // The LME of a stopped partition, as its shard recorded it in __mirror_state.
    // A stopped topic of m1, as StopMirrorTopics leaves it, and its LME.
    let topic_id = uuid::Uuid::from_u128(77);
    stopped_topic(&running.broker, "m1", "orders", topic_id).await;
    write_stopped_lme(&running.broker, "m1", "orders", topic_id, 5).await;
    // The engine's shards load it and answer.
    shut(running).await;
    let running = start_mirroring(dir.path(), "").await;
    let client = connection(&running.address).await;
    let source = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    let lmes = lmes_once_loaded(&source, "SRC-ID", "orders", topic_id, &[0, 1]).await;
    assert_eq!(lmes, vec![5, -1]);
    let none = lmes_once_loaded(&source, "ANOTHER", "orders", topic_id, &[0]).await;
    assert_eq!(none, vec![-1], "no mirror from that cluster");

    // The KIP prototype's failback lookup asks the same through DescribeClusterMirrors' tagged
    // fields, by topic id; a topic id this cluster does not have answers -1.
    let unknown_id = uuid::Uuid::from_u128(78);
    let lookup = |cluster_id: &str| DescribeMirrorsRequest {
        mirror_names: vec!["m1".into()],
        cluster_id: Some(cluster_id.into()),
        last_mirror_epoch_lookups: [(topic_id, vec![0, 1]), (unknown_id, vec![0])]
            .into_iter()
            .map(
                |(topic_id, partitions)| describe_mirrors_request::LastMirrorEpochLookup {
                    topic_id,
                    partitions,
                    ..Default::default()
                },
            )
            .collect(),
        ..Default::default()
    };
    let answered = |answer: &DescribeMirrorsResponse| -> Vec<(uuid::Uuid, i32, i32)> {
        answer
            .lookup_results
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic_id, p.partition_index, p.last_mirror_epoch))
            })
            .collect()
    };
    let (_, described) = client
        .send("DescribeMirrors", &lookup("SRC-ID"), 0)
        .await
        .expect("DescribeMirrors answers");
    assert_eq!(described.error_code, 0, "{described:?}");
    assert_eq!(
        answered(&described),
        [(topic_id, 0, 5), (topic_id, 1, -1), (unknown_id, 0, -1)]
    );
    let (_, described) = client
        .send("DescribeMirrors", &lookup("ANOTHER"), 0)
        .await
        .expect("DescribeMirrors answers");
    assert_eq!(
        answered(&described),
        [(topic_id, 0, -1), (topic_id, 1, -1), (unknown_id, 0, -1)],
        "no mirror from that cluster"
    );

    // Stop, then delete: a topic not stopped keeps the mirror; a stopped one leaves with it
    // and stays, writable.
    running
        .broker
        .create_topic(
            "audit",
            1,
            1,
            std::collections::BTreeMap::from([("mirror.name".to_string(), "m1.paused".into())]),
            None,
        )
        .await
        .expect("created");
    let delete = DeleteMirrorRequest {
        mirror_name: "m1".into(),
        ..Default::default()
    };
    let (_, refused) = client
        .send("DeleteMirror", &delete, 0)
        .await
        .expect("DeleteMirror answers");
    assert_eq!(refused.error_code, ErrorCode::CLUSTER_MIRROR_NOT_EMPTY.0);
    assert!(
        refused
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("audit"),
        "{refused:?}"
    );
    running.broker.delete_topic("audit").await.expect("deleted");
    let (_, deleted) = client
        .send("DeleteMirror", &delete, 0)
        .await
        .expect("DeleteMirror answers");
    assert_eq!(deleted.error_code, 0, "{deleted:?}");
    assert!(running.broker.mirrors().is_empty());
    let orders = running
        .broker
        .topic("orders")
        .expect("the stopped topic stays");
    assert_eq!(orders.configs.get("mirror.name"), None, "{orders:?}");
    shut(running).await;
}

/// Creates `topic` (id `topic_id`, one partition) as a topic of `mirror` that
/// StopMirrorTopics left writable.
async fn stopped_topic(broker: &Broker, mirror: &str, topic: &str, topic_id: uuid::Uuid) {
    broker
        .create_topic(
            topic,
            1,
            1,
            std::collections::BTreeMap::from([(
                "mirror.name".to_string(),
                format!("{mirror}.removed"),
            )]),
            Some(topic_id),
        )
        .await
        .expect("created");
}

/// Writes, as the shard of `mirror`'s partition 0 of `topic` (id `topic_id`) would, a STOPPED
/// state with `lme` into `broker`'s `__mirror_state`.
async fn write_stopped_lme(
    broker: &Arc<Broker>,
    mirror: &str,
    topic: &str,
    topic_id: uuid::Uuid,
    lme: i32,
) {
    use kmirror_actors::actor::ShardLogPorts;
    use kmirror_actors::coordinator::{Shard, StateWrite};
    use kmirror_actors::partition::StoredState;
    use kmirror_protocol::sharding::mirror_partition_shard;
    use kmirror_protocol::state::MirrorState;
    ensure_state_topic(broker).await;
    let count = broker.config().mirror_state_partitions;
    let index = mirror_partition_shard(mirror, &topic_id, 0, count);
    let mut shard = Shard::new(index, count);
    shard.loaded();
    let (records, _) = shard.write(
        mirror,
        &[StateWrite {
            topic: topic.into(),
            topic_id,
            partition: 0,
            stored: StoredState {
                state: MirrorState::Stopped,
                previous: MirrorState::Stopping,
                retry_attempt: 0,
                error: None,
                leader_epoch: 9,
            },
            lme: Some(lme),
        }],
    );
    StateLogPorts::new(BrokerHost(broker.clone()), index)
        .append(records)
        .expect("appended")
        .await
        .expect("durable");
}

/// Issue 17 item 9: LastMirroredEpochs answers from every mirror of the asking cluster (not
/// only the first), and finds shards by the state topic's partition count even after the
/// broker's `mirror.state.topic.num.partitions` changed.
#[tokio::test]
async fn last_mirrored_epochs_answer_from_every_mirror_of_the_asking_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    for mirror in ["m1", "m2"] {
        running
            .broker
            .create_mirror(
                mirror,
                std::collections::BTreeMap::from([
                    ("bootstrap.servers".to_string(), "source:9092".to_string()),
                    ("mirror.source.cluster.id".to_string(), "SRC-ID".to_string()),
                ]),
            )
            .await
            .expect("created");
    }
    let (orders, items) = (uuid::Uuid::from_u128(77), uuid::Uuid::from_u128(78));
    stopped_topic(&running.broker, "m1", "orders", orders).await;
    stopped_topic(&running.broker, "m2", "items", items).await;
    write_stopped_lme(&running.broker, "m1", "orders", orders, 5).await;
    write_stopped_lme(&running.broker, "m2", "items", items, 7).await;
    shut(running).await;
    // Restarted with another partition count for the (existing) state topic.
    let running = start_mirroring(dir.path(), "mirror.state.topic.num.partitions=7\n").await;
    let source = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    for (topic, topic_id, lme) in [("orders", orders, 5), ("items", items, 7)] {
        let lmes = lmes_once_loaded(&source, "SRC-ID", topic, topic_id, &[0]).await;
        assert_eq!(lmes, vec![lme], "{topic}");
    }
    shut(running).await;
}

/// LastMirroredEpochs, asked again while the shards load (COORDINATOR_LOAD_IN_PROGRESS): the
/// answer is never "none" before they have loaded.
async fn lmes_once_loaded(
    source: &SourceClient,
    asking: &str,
    topic: &str,
    topic_id: uuid::Uuid,
    partitions: &[i32],
) -> Vec<i32> {
    for _ in 0..100 {
        let answer = source
            .last_mirrored_epochs(asking, topic, topic_id, partitions)
            .await
            .and_then(|lmes| lmes.into_iter().collect::<Result<Vec<i32>, _>>());
        match answer {
            Ok(lmes) => return lmes,
            Err(ClientError::Broker {
                code: ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
                ..
            }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("LastMirroredEpochs: {e}"),
        }
    }
    panic!("the shards did not load within 10 s")
}

/// A `kmirror broker` process, killed if a failing test drops it (so no orphan outlives the run).
struct BrokerProcess(std::process::Child);

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A transactional producer over the wire, then a crash after EndTxn's decision is durable but
/// before any marker is written: the restarted broker writes the commit marker before serving,
/// so READ_COMMITTED readers (the last stable offset) see the records.
#[tokio::test]
async fn a_commit_decided_before_a_crash_is_finished_at_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let address = running.address.clone();
    assert_eq!(create(&address, "payments", 2).await, 0);
    let client = connection(&address).await;
    let (_, init) = client
        .send(
            "InitProducerId",
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("pay"))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await
        .expect("InitProducerId answers");
    assert_eq!(init.error_code, 0);
    let batch = BatchSpec {
        producer_id: init.producer_id.0,
        producer_epoch: init.producer_epoch,
        base_sequence: 0,
        transactional: true,
        records: 5,
        value_size: 20,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&address, "payments", 0, batch.clone(), -1).await,
        Some((ErrorCode::INVALID_TXN_STATE.0, -1)),
        "before the partition is added"
    );
    let (_, added) = client
        .send(
            "AddPartitionsToTxn",
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str(
                    "pay",
                )))
                .with_v3_and_below_producer_id(init.producer_id)
                .with_v3_and_below_producer_epoch(init.producer_epoch)
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(StrBytes::from_static_str("payments")))
                        .with_partitions(vec![0]),
                ]),
            3,
        )
        .await
        .expect("AddPartitionsToTxn answers");
    assert_eq!(
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    assert_eq!(
        produce(&address, "payments", 0, batch, -1).await,
        Some((0, 0))
    );
    let stable = |broker: &Broker| {
        let partition = broker.partition("payments", 0).expect("partition");
        let log = partition.log.lock().expect("log");
        (log.last_stable_offset(), log.log_end_offset())
    };
    assert_eq!(
        stable(&running.broker),
        (0, 5),
        "the open transaction holds the LSO"
    );
    running
        .broker
        .transactions()
        .end("pay", (init.producer_id.0, init.producer_epoch), true, 0)
        .expect("the decision")
        .expect("markers to write");
    // The crash: no markers, no clean close.
    let _ = running.stop.send(true);
    let _ = running.server.await;
    drop(running.broker);

    let running = start(dir.path()).await;
    assert_eq!(
        stable(&running.broker),
        (6, 6),
        "the commit marker was written at start-up"
    );
    assert_eq!(
        running
            .broker
            .transactions()
            .describe("pay")
            .map(|m| m.state),
        Some(kmirror::txn::TxnState::CompleteCommit)
    );
    let partition = running.broker.partition("payments", 0).expect("partition");
    assert!(
        partition
            .log
            .lock()
            .expect("log")
            .aborted_transactions(0, 6)
            .is_empty(),
        "committed, not aborted"
    );
    drop(partition);
    shut(running).await;
}

/// Starts a `kmirror broker` process with its data under `dir`; returns it and its address.
async fn spawn_broker(dir: &Path) -> (BrokerProcess, String) {
    spawn_broker_with(dir, "").await
}

/// [`spawn_broker`] with `extra` lines appended to its `server.properties`.
async fn spawn_broker_with(dir: &Path, extra: &str) -> (BrokerProcess, String) {
    spawn_broker_on(dir, free_port().await, extra).await
}

/// A loopback port free at the time of asking.
async fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds")
        .local_addr()
        .expect("addr")
        .port()
}

/// [`spawn_broker_with`] on `port` (a restart where clients wait for the same address).
async fn spawn_broker_on(dir: &Path, port: u16, extra: &str) -> (BrokerProcess, String) {
    let config = dir.join("server.properties");
    std::fs::write(
        &config,
        format!(
            "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}/data\nnum.partitions=1\n{extra}",
            dir.display()
        ),
    )
    .expect("writes config");
    let broker = Command::new(env!("CARGO_BIN_EXE_kmirror"))
        .args(["broker", "--config"])
        .arg(&config)
        .spawn()
        .expect("kmirror broker starts");
    let address = format!("127.0.0.1:{port}");
    for _ in 0..100 {
        if TcpStream::connect(&address).await.is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (BrokerProcess(broker), address)
}

/// Creates a topic with `kafka-topics --create`.
fn create_with_kafka_tools(address: &str, topic: &str, partitions: u32) {
    kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            address,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
    );
}

/// Stops the broker with SIGTERM and checks it shut down cleanly.
fn stop_broker(mut broker: BrokerProcess) {
    Command::new("kill")
        .arg(broker.0.id().to_string())
        .status()
        .expect("SIGTERM");
    assert!(
        broker.0.wait().expect("exits").success(),
        "a clean shutdown on SIGTERM"
    );
}

/// Apache Kafka's producer (idempotent, acks=all, lz4), console consumer and
/// ConsumerPerformance against a `kmirror broker` process; the stored batches are fetched back
/// byte-identical.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn kafkas_own_tools_against_the_kmirror_broker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    create_with_kafka_tools(&address, "java", 1);
    let props = format!("bootstrap.servers={address}");
    let out = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            "java",
            "--num-records",
            "100000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            "acks=all",
            "enable.idempotence=true",
            "compression.type=lz4",
        ],
    );
    assert!(out.contains("100000 records sent"), "{out}");
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "java",
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            "100000",
            "--timeout-ms",
            "30000",
            "--property",
            "print.offset=true",
        ],
    );
    let offsets: Vec<i64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Offset:")?.split('\t').next()?.parse().ok())
        .collect();
    assert_eq!(
        offsets.len(),
        100_000,
        "the console consumer read every record"
    );
    assert!(offsets.iter().copied().eq(0..100_000));
    // ConsumerPerformance (a subscribing group member) reads them all too.
    let out = kafka_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "java",
            "--messages",
            "100000",
            "--timeout",
            "30000",
            "--hide-header",
        ],
    );
    let consumed: Vec<&str> = out
        .lines()
        .find(|l| l.matches(',').count() >= 5)
        .map(|l| l.split(',').map(str::trim).collect())
        .unwrap_or_default();
    assert_eq!(
        consumed.get(4).copied(),
        Some("100000"),
        "ConsumerPerformance consumed every record:\n{out}"
    );
    // What a fetch returns is exactly what the broker stored.
    let client = SourceClient::connect(ClientConfig::plaintext(&address))
        .await
        .expect("connects");
    let fetched: Vec<u8> = fetch_all(&client, "java", 0)
        .await
        .iter()
        .flat_map(|b| b.as_bytes().to_vec())
        .collect();
    let stored =
        std::fs::read(dir.path().join("data/java-0/00000000000000000000.log")).expect("segment");
    assert!(
        fetched == stored,
        "fetched {} bytes, stored {}",
        fetched.len(),
        stored.len()
    );
    let lz4 = RecordBatches::new(Bytes::from(fetched))
        .filter_map(Result::ok)
        .all(|b| b.compression().is_ok_and(|c| c.name() == "lz4"));
    assert!(lz4, "the Java producer's lz4 batches are stored as sent");
    stop_broker(broker);
}

/// The `PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG` columns `kafka-consumer-groups --describe`
/// prints for `topic`.
fn described_offsets(address: &str, group: &str, topic: &str) -> Vec<(i32, i64, i64, i64)> {
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            address,
            "--describe",
            "--group",
            group,
        ],
    );
    let mut rows: Vec<(i32, i64, i64, i64)> = out
        .lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() < 6 || cols[0] != group || cols[1] != topic {
                return None;
            }
            Some((
                cols[2].parse().ok()?,
                cols[3].parse().ok()?,
                cols[4].parse().ok()?,
                cols[5].parse().ok()?,
            ))
        })
        .collect();
    rows.sort();
    rows
}

/// Kafka's console consumer as a group member (FindCoordinator, JoinGroup, SyncGroup,
/// Heartbeat, OffsetCommit on close) and `kafka-consumer-groups` against a `kmirror broker`
/// process: every record is read once, the committed offsets are the log ends, a second member
/// of the group resumes from them, and they survive a broker restart.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_kafka_consumer_group_commits_offsets_that_survive_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    create_with_kafka_tools(&address, "events", 3);
    let props = format!("bootstrap.servers={address}");
    let out = kafka_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        &[
            "--topic",
            "events",
            "--num-records",
            "30000",
            "--record-size",
            "50",
            "--throughput",
            "-1",
            "--producer-props",
            &props,
            "acks=all",
            kafka_tools::ROUND_ROBIN,
        ],
    );
    assert!(out.contains("30000 records sent"), "{out}");
    let consume = |max: &str, timeout: &str| {
        kafka_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--bootstrap-server",
                &address,
                "--topic",
                "events",
                "--group",
                "readers",
                "--from-beginning",
                "--max-messages",
                max,
                "--timeout-ms",
                timeout,
                "--property",
                "print.partition=true",
                "--property",
                "print.offset=true",
            ],
        )
    };
    let out = consume("30000", "30000");
    let mut seen: Vec<(i32, i64)> = out
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let partition = cols.next()?.strip_prefix("Partition:")?.parse().ok()?;
            let offset = cols.next()?.strip_prefix("Offset:")?.parse().ok()?;
            Some((partition, offset))
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 30_000, "every record once");
    let rows = described_offsets(&address, "readers", "events");
    assert_eq!(rows.len(), 3, "one row per partition: {rows:?}");
    for (partition, current, end, lag) in &rows {
        assert_eq!(
            current, end,
            "partition {partition} committed at its log end"
        );
        assert_eq!(*lag, 0);
    }
    assert_eq!(rows.iter().map(|r| r.2).sum::<i64>(), 30_000);
    // A new member of the group resumes from the committed offsets: nothing left to read.
    let out = consume("1", "5000");
    assert!(
        !out.lines().any(|l| l.starts_with("Partition:")),
        "the group had already read everything:\n{out}"
    );
    stop_broker(broker);

    let (broker, address) = spawn_broker(dir.path()).await;
    let client = SourceClient::connect(ClientConfig::plaintext(&address))
        .await
        .expect("connects");
    let mut committed: Vec<(i32, i64, i32)> = client
        .committed_offsets("readers")
        .await
        .expect("offset fetch")
        .into_iter()
        .filter(|c| c.topic == "events")
        .map(|c| (c.partition, c.offset, c.leader_epoch))
        .collect();
    committed.sort();
    let expected: Vec<(i32, i64, i32)> = rows.iter().map(|r| (r.0, r.2, 0)).collect();
    assert_eq!(
        committed, expected,
        "committed offsets and their leader epochs survive the restart"
    );
    kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            &address,
            "--delete",
            "--group",
            "readers",
        ],
    );
    let listed = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &["--bootstrap-server", &address, "--list"],
    );
    assert!(
        !listed.lines().any(|l| l.trim() == "readers"),
        "the group is deleted:\n{listed}"
    );
    stop_broker(broker);
}

/// `kafka-topics` against a `kmirror broker` process: create, describe, alter (add partitions),
/// delete; the changes hold across a restart and a deleted topic's logs are gone.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn topic_command_creates_describes_alters_and_deletes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    let topics = |args: &[&str]| {
        let mut all = vec!["--bootstrap-server", address.as_str()];
        all.extend_from_slice(args);
        kafka_tool("org.apache.kafka.tools.TopicCommand", &all)
    };
    topics(&[
        "--create",
        "--topic",
        "grows",
        "--partitions",
        "2",
        "--config",
        "retention.ms=3600000",
    ]);
    topics(&["--create", "--topic", "goes", "--partitions", "1"]);
    topics(&["--alter", "--topic", "grows", "--partitions", "5"]);
    let described = topics(&["--describe", "--topic", "grows"]);
    assert!(
        described.contains("PartitionCount: 5"),
        "five partitions after alter:\n{described}"
    );
    let rows = described
        .lines()
        .filter(|l| l.contains("Partition: ") && l.contains("Leader: 1"))
        .count();
    assert_eq!(rows, 5, "every partition led by this node:\n{described}");
    assert!(
        described.contains("retention.ms=3600000"),
        "the topic's override is described:\n{described}"
    );
    // Shrinking is refused with Kafka's error.
    let shrink = kafka_tool_output(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &address,
            "--alter",
            "--topic",
            "grows",
            "--partitions",
            "3",
        ],
    );
    let text = String::from_utf8_lossy(&shrink.stdout).into_owned()
        + &String::from_utf8_lossy(&shrink.stderr);
    assert!(
        !shrink.status.success() && text.contains("invalid partition count 3"),
        "shrinking is refused with the controller's reason:\n{text}"
    );
    // kafka-configs changes a topic config (IncrementalAlterConfigs); DescribeConfigs shows it.
    let configs = |args: &[&str]| {
        let mut all = vec![
            "--bootstrap-server",
            address.as_str(),
            "--entity-type",
            "topics",
            "--entity-name",
            "grows",
        ];
        all.extend_from_slice(args);
        kafka_tool_output("org.apache.kafka.tools.ConfigCommand", &all)
    };
    assert!(
        configs(&["--alter", "--add-config", "retention.bytes=1048576"])
            .status
            .success()
    );
    let shown = configs(&["--describe"]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains("retention.bytes=1048576") && shown.contains("retention.ms=3600000"),
        "both overrides are described:\n{shown}"
    );
    let refused = configs(&["--alter", "--add-config", "cleanup.policy=compact"]);
    let text = String::from_utf8_lossy(&refused.stdout).into_owned()
        + &String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && text.contains("not a topic config this broker supports"),
        "an unenforced config is refused:\n{text}"
    );
    // Records in the doomed topic: its deletion must take them with it.
    kafka_tools::produce(&address, "goes", 100, "none", &[]);
    assert!(dir.path().join("data/goes-0").exists());
    topics(&["--delete", "--topic", "goes"]);
    assert!(
        !dir.path().join("data/goes-0").exists(),
        "the deleted log is removed"
    );
    stop_broker(broker);

    let (broker, address) = spawn_broker(dir.path()).await;
    let listed = kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &["--bootstrap-server", &address, "--list"],
    );
    let names: Vec<&str> = listed.lines().map(str::trim).collect();
    assert!(
        names.contains(&"grows") && !names.contains(&"goes"),
        "{listed}"
    );
    let described = kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &address,
            "--describe",
            "--topic",
            "grows",
        ],
    );
    assert!(described.contains("PartitionCount: 5"), "{described}");
    assert!(
        described.contains("retention.bytes=1048576"),
        "the altered config survives the restart:\n{described}"
    );
    stop_broker(broker);
}

/// Runs `tests/broker/SCRIPT ARGS` with the confluent-kafka venv's Python; returns the JSON
/// line it prints last.
fn confluent_report(script: &str, args: &[&str]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/broker")
        .join(script);
    let out = Command::new(kafka_env("KMIRROR_PYTHON"))
        .arg(path)
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON line")
}

/// confluent-kafka (librdkafka, pinned in tests/broker/requirements.txt) against a `kmirror
/// broker` process: idempotent lz4 producing, a consumer group with committed offsets, and a new
/// member resuming exactly after them.
#[tokio::test]
#[ignore = "needs confluent-kafka: run scripts/test.sh"]
async fn confluent_kafka_round_trip_with_a_consumer_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    let report = confluent_report("confluent_roundtrip.py", &[&address, "librdkafka", "20000"]);
    assert_eq!(report["consumed_distinct"], 20_000, "{report}");
    assert_eq!(report["committed_total"], 20_000, "{report}");
    let late: Vec<String> = (0..10).map(|i| format!("late-{i}")).collect();
    assert_eq!(
        report["read_after_resume"],
        serde_json::json!(late),
        "the new member resumed at the committed offsets"
    );
    stop_broker(broker);
}

/// Per-partition offset ranges a VerifiableConsumer run reports in its `records_consumed` events.
fn consumed_ranges(out: &str) -> Vec<(i64, i64, i64)> {
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["name"] == "records_consumed")
        .flat_map(|v| {
            v["partitions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|p| {
                    (
                        p["partition"].as_i64().unwrap_or(-1),
                        p["minOffset"].as_i64().unwrap_or(-1),
                        p["maxOffset"].as_i64().unwrap_or(-1),
                    )
                })
        })
        .collect()
}

/// Kafka's VerifiableProducer (acks=all) and VerifiableConsumer (a group committing after every
/// poll) with a broker restart between two consumer runs: together they read every acknowledged
/// record exactly once, the second run starting where the first one committed.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn verifiable_producer_and_consumer_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    create_with_kafka_tools(&address, "verified", 3);
    let (acked, produced) = verifiable_produce(&address, "verified", 20_000);
    assert_eq!(acked, 20_000, "every record acknowledged: {produced}");
    let consume = |address: &str| {
        kafka_tool(
            "org.apache.kafka.tools.VerifiableConsumer",
            &[
                "--bootstrap-server",
                address,
                "--topic",
                "verified",
                "--group-id",
                "verifiers",
                "--max-messages",
                "10000",
                "--reset-policy",
                "earliest",
            ],
        )
    };
    let first = consumed_ranges(&consume(&address));
    stop_broker(broker);
    let (broker, address) = spawn_broker(dir.path()).await;
    let second = consumed_ranges(&consume(&address));
    let mut ranges: Vec<(i64, i64, i64)> = first.iter().chain(&second).copied().collect();
    ranges.sort();
    let total: i64 = ranges.iter().map(|(_, lo, hi)| hi - lo + 1).sum();
    assert_eq!(
        total, 20_000,
        "20,000 records read in the two runs: {ranges:?}"
    );
    for partition in 0..3 {
        let mut next = 0;
        for (_, lo, hi) in ranges.iter().filter(|r| r.0 == partition) {
            assert_eq!(
                *lo, next,
                "partition {partition}: no gap and no repeat: {ranges:?}"
            );
            next = hi + 1;
        }
    }
    assert!(
        !second.is_empty(),
        "the second run resumed after the restart"
    );
    stop_broker(broker);
}

/// Kafka's TransactionalMessageCopier (consume, produce transactionally, commit the consumed
/// offsets in the transaction, abort at random) against a `kmirror broker`, restarted before
/// anything is read: READ_COMMITTED sees every input record exactly once, READ_UNCOMMITTED also
/// the aborted copies, and the copier's group committed the whole input.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn a_transactional_copier_with_random_aborts_is_read_committed_exactly_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    create_with_kafka_tools(&address, "copy-in", 1);
    create_with_kafka_tools(&address, "copy-out", 3);
    let (acked, produced) = verifiable_produce(&address, "copy-in", 5000);
    assert_eq!(acked, 5000, "{produced}");
    let copied = kafka_tool(
        "org.apache.kafka.tools.TransactionalMessageCopier",
        &[
            "--broker-list",
            &address,
            "--input-topic",
            "copy-in",
            "--input-partition",
            "0",
            "--output-topic",
            "copy-out",
            "--transactional-id",
            "copier",
            "--consumer-group",
            "copiers",
            "--transaction-size",
            "100",
            "--enable-random-aborts",
            "--use-group-metadata",
        ],
    );
    assert!(copied.contains("\"totalProcessed\":5000"), "{copied}");
    stop_broker(broker);
    let (broker, address) = spawn_broker(dir.path()).await;

    let mut committed = kafka_tools::console_values(&address, "copy-out", "read_committed");
    committed.sort_by_key(|v| v.parse::<i64>().unwrap_or(-1));
    let expected: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
    assert_eq!(
        committed, expected,
        "each input record once, nothing aborted"
    );
    let uncommitted = kafka_tools::console_values(&address, "copy-out", "read_uncommitted");
    assert!(
        uncommitted.len() > 5000,
        "random aborts left aborted copies that only READ_UNCOMMITTED returns ({})",
        uncommitted.len()
    );
    assert_eq!(
        described_offsets(&address, "copiers", "copy-in"),
        vec![(0, 5000, 5000, 0)],
        "the offsets committed inside the transactions"
    );
    stop_broker(broker);
}

/// confluent-kafka transactions: commit, abort, commit; fencing by a second producer with the
/// same transactional id; a transaction left open is aborted by the broker at its timeout.
#[tokio::test]
#[ignore = "needs confluent-kafka: run scripts/test.sh"]
async fn confluent_kafka_transactions_commit_abort_fence_and_time_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker_with(
        dir.path(),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=500\n",
    )
    .await;
    let report = confluent_report(
        "confluent_transactions.py",
        &[&address, "py-transactions", "1000"],
    );
    let mut expected: Vec<String> = ["committed-a", "committed-b", "committed-c"]
        .iter()
        .flat_map(|prefix| (0..1000).map(move |i| format!("{prefix}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(
        report["read_committed"],
        serde_json::json!(expected),
        "only committed records, each once"
    );
    assert_eq!(report["fenced"], true, "{report}");
    assert_eq!(report["read_uncommitted_aborted"], 1000, "{report}");
    assert_eq!(report["read_uncommitted_hanging"], 10, "{report}");
    stop_broker(broker);
}

/// Kafka's `kafka-acls` against a `kmirror broker` with `authorizer.enabled=true`: a DENY on one
/// topic refuses the Java producer with TopicAuthorizationException, an ALLOW for another
/// principal on a prefix shuts the anonymous consumer out, both survive a restart, and removing
/// the DENY lets the producer through.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn kafka_acls_are_enforced_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = "authorizer.enabled=true\nallow.everyone.if.no.acl.found=true\n";
    let (broker, address) = spawn_broker_with(dir.path(), settings).await;
    for topic in ["secret", "open", "private-data"] {
        create_with_kafka_tools(&address, topic, 1);
    }
    let acls = |address: &str, args: &[&str]| {
        let mut all = vec!["--bootstrap-server", address];
        all.extend_from_slice(args);
        kafka_tool("org.apache.kafka.tools.AclCommand", &all)
    };
    acls(
        &address,
        &[
            "--add",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Write",
            "--topic",
            "secret",
        ],
    );
    acls(
        &address,
        &[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--resource-pattern-type",
            "prefixed",
            "--topic",
            "private",
        ],
    );
    let (acked, out) = verifiable_produce(&address, "secret", 3);
    assert_eq!(acked, 0, "{out}");
    assert!(out.contains("TopicAuthorizationException"), "{out}");
    assert_eq!(verifiable_produce(&address, "open", 3).0, 3);
    stop_broker(broker);

    let (broker, address) = spawn_broker_with(dir.path(), settings).await;
    let listed = acls(&address, &["--list"]);
    assert!(
        listed.contains("name=secret, patternType=LITERAL")
            && listed
                .contains("principal=User:ANONYMOUS, host=*, operation=WRITE, permissionType=DENY")
            && listed.contains("name=private, patternType=PREFIXED")
            && listed
                .contains("principal=User:alice, host=*, operation=READ, permissionType=ALLOW"),
        "{listed}"
    );
    let (acked, out) = verifiable_produce(&address, "secret", 3);
    assert_eq!(acked, 0, "still refused after the restart: {out}");
    // ConsumerPerformance, since the console consumer swallows the exception.
    let out = kafka_tool_output(
        "org.apache.kafka.tools.ConsumerPerformance",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "private-data",
            "--num-records",
            "1",
            "--timeout",
            "10000",
        ],
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("TopicAuthorizationException"),
        "the anonymous consumer is refused: {text}"
    );
    acls(
        &address,
        &[
            "--remove",
            "--force",
            "--deny-principal",
            "User:ANONYMOUS",
            "--operation",
            "Write",
            "--topic",
            "secret",
        ],
    );
    assert_eq!(
        verifiable_produce(&address, "secret", 3).0,
        3,
        "the DENY is gone"
    );
    stop_broker(broker);
}

/// StartMirrorTopics refuses internal topic names (`__consumer_offsets` and the like): a mirror
/// copy of one could be neither used nor deleted. Refused per topic, before the source is asked.
#[tokio::test]
async fn start_mirror_topics_refuses_internal_topic_names() {
    use kmirror_protocol::messages::{StartMirrorTopicsRequest, start_mirror_topics_request};
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_mirroring(dir.path(), "").await;
    running
        .broker
        .create_mirror(
            "dr",
            std::collections::BTreeMap::from([(
                "bootstrap.servers".to_string(),
                "127.0.0.1:1".to_string(),
            )]),
        )
        .await
        .expect("mirror");
    let client = connection(&running.address).await;
    let request = StartMirrorTopicsRequest {
        mirror_name: "dr".into(),
        topics: ["__consumer_offsets", "__mirror_state", "__anything"]
            .into_iter()
            .map(|name| start_mirror_topics_request::TopicMetadata {
                topic_name: name.into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let (_, answer) = client
        .send("StartMirrorTopics", &request, 0)
        .await
        .expect("StartMirrorTopics answers");
    // The top-level error is the first topic's, as the KIP prototype's clients read it.
    assert_eq!(
        answer.error_code,
        ErrorCode::INVALID_TOPIC_EXCEPTION.0,
        "{answer:?}"
    );
    let codes: Vec<i16> = answer.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(
        codes,
        vec![ErrorCode::INVALID_TOPIC_EXCEPTION.0; 3],
        "{answer:?}"
    );
    assert!(running.broker.topic("__consumer_offsets").is_none());
    shut(running).await;
}
