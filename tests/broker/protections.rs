//! Kafka's own protections against hostile or careless clients: produced batches are validated
//! as Kafka's LogValidator does (a valid CRC around invalid contents is refused and appends
//! nothing), the internal topics are the broker's alone, and a JoinGroup cannot ask for a
//! session the broker does not allow.

use super::{
    Running, connection, create, fetch_all, produce, shut, spawn_broker, start, start_with,
    stop_broker,
};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    GroupId, IncrementalAlterConfigsRequest, JoinGroupRequest, MetadataRequest, SyncGroupRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use kmirror_actors::engine::state_log::MIRROR_STATE_TOPIC;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::codec::{write_varint, write_varlong};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::kafka_tools::kafka_tool;
use kmirror_protocol::testing::BatchSpec;
use std::time::Duration;

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A batch built by hand, so its fields can be wrong; its CRC is always valid.
struct Hostile {
    attributes: i16,
    last_offset_delta: i32,
    count: i32,
    records: Vec<u8>,
}

impl Hostile {
    /// `count` well-formed records (offset deltas 0.., key and value present).
    fn records(count: i32) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..count {
            let mut body = vec![0u8];
            write_varlong(&mut body, 0);
            write_varint(&mut body, i);
            write_varint(&mut body, 1);
            body.push(b'k');
            write_varint(&mut body, 1);
            body.push(b'v');
            write_varint(&mut body, 0);
            write_varint(&mut out, body.len() as i32);
            out.extend_from_slice(&body);
        }
        out
    }

    fn valid(count: i32) -> Self {
        Hostile {
            attributes: 0,
            last_offset_delta: count - 1,
            count,
            records: Hostile::records(count),
        }
    }

    fn bytes(&self) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((49 + self.records.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.push(2);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&self.attributes.to_be_bytes());
        b.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        b.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&self.count.to_be_bytes());
        b.extend_from_slice(&self.records);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(b)
    }
}

/// The hostile batches (each with a valid CRC) and what Kafka answers them.
fn hostile_batches() -> Vec<(&'static str, Bytes, ErrorCode)> {
    let mut huge_count = Hostile::valid(1);
    huge_count.count = i32::MAX;
    huge_count.last_offset_delta = i32::MAX - 1;
    let mut backwards = Hostile::valid(2);
    backwards.last_offset_delta = -5;
    let mut codec7 = Hostile::valid(1);
    codec7.attributes = 7;
    let mut gzip_garbage = Hostile::valid(1);
    gzip_garbage.attributes = 1;
    gzip_garbage.records = b"\x1f\x8b\x08\x00 certainly not deflate data".to_vec();
    let mut negative_key = Hostile::valid(1);
    // The key length varint is the fifth byte of the record: length, attributes, timestamp
    // delta, offset delta, key length; -5 zigzags to 9.
    negative_key.records[4] = 9;
    vec![
        (
            "record count 2^31-1 with one record",
            huge_count.bytes(),
            ErrorCode::INVALID_RECORD,
        ),
        (
            "lastOffsetDelta -5",
            backwards.bytes(),
            ErrorCode::INVALID_RECORD,
        ),
        (
            "compression codec 7",
            codec7.bytes(),
            ErrorCode::CORRUPT_MESSAGE,
        ),
        (
            "gzip garbage",
            gzip_garbage.bytes(),
            ErrorCode::CORRUPT_MESSAGE,
        ),
        (
            "key length -5",
            negative_key.bytes(),
            ErrorCode::INVALID_RECORD,
        ),
    ]
}

#[tokio::test]
async fn produced_batches_with_a_valid_crc_and_invalid_contents_are_refused_and_appended_nowhere() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    assert_eq!(create(&running.address, "events", 1).await, 0);
    let first = produce(&running.address, "events", 0, Hostile::valid(3).bytes(), -1).await;
    assert_eq!(first, Some((0, 0)), "a valid hand-made batch is taken");
    for (what, batch, code) in hostile_batches() {
        let (error, base_offset) = produce(&running.address, "events", 0, batch, -1)
            .await
            .expect("answered");
        assert_eq!(
            (ErrorCode(error).name(), base_offset),
            (code.name(), -1),
            "{what}"
        );
    }
    let compressed = BatchSpec {
        records: 4,
        compression: kafka_protocol::records::Compression::Lz4,
        ..BatchSpec::default()
    }
    .build();
    let last = produce(&running.address, "events", 0, compressed, -1).await;
    assert_eq!(last, Some((0, 3)), "nothing was appended in between");

    // The log reads back as a consumer reads it: kafka-protocol's decoder, offsets 0..7 in order.
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    let mut offsets = Vec::new();
    for batch in fetch_all(&client, "events", 0).await {
        let mut wire = BytesMut::from(&batch.as_bytes()[..]);
        let set = RecordBatchDecoder::decode(&mut wire).expect("a consumer decodes it");
        offsets.extend(set.records.iter().map(|r| r.offset));
    }
    assert_eq!(offsets, (0..7).collect::<Vec<i64>>());
    shut(running).await;
}

async fn create_error(running: &Running, topic: &str) -> i16 {
    let request = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(name(topic)))
            .with_num_partitions(1)
            .with_replication_factor(1),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("CreateTopics", &request, 7)
        .await
        .expect("CreateTopics answers");
    answer.topics[0].error_code
}

async fn alter_error(running: &Running, topic: &str, key: &str, value: &str) -> i16 {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name(topic))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(name(key))
                    .with_config_operation(0)
                    .with_value(Some(name(value))),
            ]),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("IncrementalAlterConfigs", &request, 1)
        .await
        .expect("IncrementalAlterConfigs answers");
    answer.responses[0].error_code
}

async fn described(running: &Running, topic: &str, key: &str) -> Option<String> {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name(topic))
            .with_configuration_keys(None),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("DescribeConfigs", &request, 4)
        .await
        .expect("DescribeConfigs answers");
    answer.results[0]
        .configs
        .iter()
        .find(|c| &*c.name == key)
        .and_then(|c| c.value.as_ref().map(|v| v.to_string()))
}

#[tokio::test]
async fn internal_topics_refuse_clients_and_keep_their_records_whatever_retention_says() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Broker defaults under which any other topic loses its older segments (a segment per
    // append, as the appends below are apart).
    let running = start_with(
        dir.path(),
        "log.retention.bytes=1024\nlog.retention.ms=1000\nlog.roll.ms=1\nmirror.state.topic.num.partitions=2\n",
    )
    .await;
    let internal = [
        "__mirror_state",
        "__consumer_offsets",
        "__transaction_state",
        "__cluster_metadata",
    ];
    for topic in internal {
        assert_eq!(
            create_error(&running, topic).await,
            ErrorCode::INVALID_REQUEST.0,
            "{topic}"
        );
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(name(topic)))),
            ]))
            .with_allow_auto_topic_creation(true);
        let (_, answer) = connection(&running.address)
            .await
            .send("Metadata", &request, 12)
            .await
            .expect("Metadata answers");
        assert_eq!(
            answer.topics[0].error_code,
            ErrorCode::INVALID_REQUEST.0,
            "{topic} is not auto-created"
        );
        assert!(running.broker.topic(topic).is_none(), "{topic} not created");
    }

    // The engine's own creation goes on; clients cannot change what keeps its records.
    super::ensure_state_topic(&running.broker).await;
    assert_eq!(
        alter_error(&running, MIRROR_STATE_TOPIC, "retention.ms", "1000").await,
        ErrorCode::POLICY_VIOLATION.0
    );
    assert_eq!(
        alter_error(&running, MIRROR_STATE_TOPIC, "retention.bytes", "10").await,
        ErrorCode::POLICY_VIOLATION.0
    );
    assert_eq!(
        alter_error(&running, MIRROR_STATE_TOPIC, "flush.messages", "1").await,
        0,
        "a change that keeps every record is taken"
    );
    assert_eq!(
        described(&running, MIRROR_STATE_TOPIC, "retention.ms")
            .await
            .as_deref(),
        Some("-1")
    );
    let grow = CreatePartitionsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(TopicName(name(MIRROR_STATE_TOPIC)))
                .with_count(5),
        ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("CreatePartitions", &grow, 3)
        .await
        .expect("CreatePartitions answers");
    assert_eq!(answer.results[0].error_code, ErrorCode::POLICY_VIOLATION.0);
    let delete = DeleteTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topic_names(vec![TopicName(name(MIRROR_STATE_TOPIC))]);
    let (_, answer) = connection(&running.address)
        .await
        .send("DeleteTopics", &delete, 5)
        .await
        .expect("DeleteTopics answers");
    assert_eq!(answer.responses[0].error_code, ErrorCode::INVALID_REQUEST.0);
    assert_eq!(
        running
            .broker
            .topic(MIRROR_STATE_TOPIC)
            .map(|t| t.partitions.len()),
        Some(2)
    );

    // Records older and larger than the broker's retention stay in __mirror_state.
    let partition = running
        .broker
        .partition(MIRROR_STATE_TOPIC, 0)
        .expect("led here");
    let epoch = running
        .broker
        .leader_epoch(MIRROR_STATE_TOPIC, 0)
        .expect("epoch");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(2));
        let batch = BatchSpec {
            records: 3,
            value_size: 100,
            ..BatchSpec::default()
        }
        .build();
        partition
            .log
            .lock()
            .expect("lock")
            .append_as_leader(batch, epoch, kmirror::broker::now_ms())
            .expect("appends");
    }
    let segments = partition.log.lock().expect("lock").segment_bases().len();
    assert!(
        segments > 1,
        "{segments} segments: retention has some to delete"
    );
    running.broker.housekeeping(kmirror::broker::now_ms());
    let kept = {
        let log = partition.log.lock().expect("lock");
        (log.log_start_offset(), log.log_end_offset())
    };
    assert_eq!(kept, (0, 60), "no state record deleted");
    drop(partition);
    shut(running).await;
}

fn join_request(member_id: &str, session_ms: i32, rebalance_ms: i32) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(name("g")))
        .with_member_id(name(member_id))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(rebalance_ms)
        .with_protocol_type(name("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default()
                .with_name(name("range"))
                .with_metadata(Bytes::from_static(b"subscription")),
        ])
}

#[tokio::test]
async fn a_join_with_a_session_timeout_out_of_bounds_is_refused_and_a_consumer_then_gets_its_assignment()
 {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    for session_ms in [i32::MAX, 1_800_001, 5_999, 0, -1] {
        // JoinGroup v3 joins without a member-id round trip, as the hostile client did.
        let hostile = connection(&running.address).await;
        let (_, answer) = hostile
            .send("JoinGroup", &join_request("", session_ms, i32::MAX), 3)
            .await
            .expect("JoinGroup answers");
        assert_eq!(
            ErrorCode(answer.error_code).name(),
            ErrorCode::INVALID_SESSION_TIMEOUT.name(),
            "session {session_ms} ms"
        );
        drop(hostile);
    }
    // A consumer with Kafka's default timeouts joins, leads, and gets its assignment at once.
    let consumer = connection(&running.address).await;
    let (_, joined) = tokio::time::timeout(
        Duration::from_secs(10),
        consumer.send("JoinGroup", &join_request("", 45_000, 300_000), 3),
    )
    .await
    .expect("the join is not held by the refused member")
    .expect("JoinGroup answers");
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.leader, joined.member_id);
    let sync = SyncGroupRequest::default()
        .with_group_id(GroupId(name("g")))
        .with_generation_id(joined.generation_id)
        .with_member_id(joined.member_id.clone())
        .with_assignments(vec![
            SyncGroupRequestAssignment::default()
                .with_member_id(joined.member_id.clone())
                .with_assignment(Bytes::from_static(b"events-0")),
        ]);
    let (_, synced) = consumer
        .send("SyncGroup", &sync, 3)
        .await
        .expect("SyncGroup answers");
    assert_eq!(synced.error_code, 0);
    assert_eq!(&synced.assignment[..], b"events-0");
    shut(running).await;
}

/// A member with a valid session (6 s) and a rebalance timeout of 2^31-1 ms that goes silent
/// holds a newcomer's JoinGroup for its session only: the silent member is dropped once its
/// session passes and the newcomer's join completes, as Kafka expires it.
#[tokio::test]
async fn a_silent_member_holds_a_rebalance_for_its_session_timeout_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let silent = connection(&running.address).await;
    let (_, first) = silent
        .send("JoinGroup", &join_request("", 6_000, i32::MAX), 3)
        .await
        .expect("JoinGroup answers");
    assert_eq!(first.error_code, 0);
    drop(silent);
    let newcomer = connection(&running.address).await;
    let started = std::time::Instant::now();
    let (_, joined) = tokio::time::timeout(
        Duration::from_secs(20),
        newcomer.send("JoinGroup", &join_request("", 10_000, 300_000), 3),
    )
    .await
    .expect("the join completes once the silent member's session passed")
    .expect("JoinGroup answers");
    assert_eq!(joined.error_code, 0);
    assert_eq!(joined.leader, joined.member_id, "the newcomer alone leads");
    assert_eq!(joined.members.len(), 1, "the silent member was dropped");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    shut(running).await;
}

/// Kafka's console consumer, in the group a JoinGroup asking for a 2^31-1 ms session (then
/// disconnected) tried to join, gets its assignment and reads every record.
#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn kafkas_console_consumer_gets_its_assignment_after_an_unbounded_join_was_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (broker, address) = spawn_broker(dir.path()).await;
    assert_eq!(create(&address, "events", 1).await, 0);
    let batch = BatchSpec {
        records: 10,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&address, "events", 0, batch, -1).await,
        Some((0, 0))
    );
    let hostile = connection(&address).await;
    let (_, answer) = hostile
        .send("JoinGroup", &join_request("", i32::MAX, i32::MAX), 3)
        .await
        .expect("JoinGroup answers");
    assert_eq!(answer.error_code, ErrorCode::INVALID_SESSION_TIMEOUT.0);
    drop(hostile);
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "events",
            "--group",
            "g",
            "--from-beginning",
            "--max-messages",
            "10",
            "--timeout-ms",
            "30000",
        ],
    );
    let value = "v".repeat(16);
    assert_eq!(out.lines().filter(|l| *l == value).count(), 10, "{out}");
    stop_broker(broker);
}

/// A topic to create: name, partitions, configs.
type NewTopic<'a> = (&'a str, i32, &'a [(&'a str, &'a str)]);

/// CreateTopics answers for `topics`, in order.
async fn create_many(running: &Running, topics: &[NewTopic<'_>]) -> Vec<(i16, String)> {
    let request = CreateTopicsRequest::default().with_topics(
        topics
            .iter()
            .map(|(topic, partitions, configs)| {
                CreatableTopic::default()
                    .with_name(TopicName(name(topic)))
                    .with_num_partitions(*partitions)
                    .with_replication_factor(1)
                    .with_configs(
                        configs
                            .iter()
                            .map(|(k, v)| {
                                kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default()
                                    .with_name(name(k))
                                    .with_value(Some(name(v)))
                            })
                            .collect(),
                    )
            })
            .collect(),
    );
    let (_, answer) = connection(&running.address)
        .await
        .send("CreateTopics", &request, 7)
        .await
        .expect("CreateTopics answers");
    answer
        .topics
        .iter()
        .map(|t| {
            (
                t.error_code,
                t.error_message.as_deref().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A topic is never created with a config the broker would store and not enforce
/// (`cleanup.policy=compact` would lose a compacted topic's data to delete retention), nor with
/// a value outside Kafka's range; IncrementalAlterConfigs refuses the same values.
#[tokio::test]
async fn topic_configs_the_broker_does_not_enforce_or_out_of_range_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    for (key, value) in [
        ("cleanup.policy", "compact"),
        ("min.insync.replicas", "2"),
        ("segment.bytes", "1"),
        ("segment.ms", "0"),
        ("retention.ms", "-5"),
        ("flush.messages", "0"),
        ("index.interval.bytes", "-1"),
    ] {
        let answer = create_many(&running, &[("configured", 1, &[(key, value)])]).await;
        assert_eq!(
            answer[0].0,
            ErrorCode::INVALID_CONFIG.0,
            "{key}={value}: {answer:?}"
        );
        assert!(answer[0].1.contains(key), "{answer:?}");
    }
    let answer = create_many(
        &running,
        &[(
            "configured",
            1,
            &[("segment.bytes", "1048576"), ("retention.ms", "-1")],
        )],
    )
    .await;
    assert_eq!(answer[0].0, 0, "{answer:?}");
    for (key, value) in [
        ("segment.bytes", "0"),
        ("segment.ms", "-3"),
        ("flush.ms", "-1"),
    ] {
        assert_eq!(
            alter_error(&running, "configured", key, value).await,
            ErrorCode::INVALID_CONFIG.0,
            "{key}={value}"
        );
    }
    assert_eq!(
        described(&running, "configured", "segment.bytes")
            .await
            .as_deref(),
        Some("1048576")
    );
    shut(running).await;
}

/// Hostile report 2026-12-02 finding 5: `segment.bytes` below Kafka 4's floor of 1 MiB
/// (KIP-1030) is refused by CreateTopics, IncrementalAlterConfigs and AlterConfigs, naming the
/// key, so a client cannot make the broker write one segment file per batch.
#[tokio::test]
async fn segment_bytes_below_one_mebibyte_is_refused_by_every_config_request() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    for value in ["14", "1024", "1048575"] {
        let answer = create_many(&running, &[("tiny", 1, &[("segment.bytes", value)])]).await;
        assert_eq!(
            answer[0].0,
            ErrorCode::INVALID_CONFIG.0,
            "segment.bytes={value}: {answer:?}"
        );
        assert!(answer[0].1.contains("segment.bytes"), "{answer:?}");
    }
    assert!(running.broker.topic("tiny").is_none(), "not created");
    assert_eq!(create(&running.address, "tiny", 1).await, 0);
    assert_eq!(
        alter_error(&running, "tiny", "segment.bytes", "1048575").await,
        ErrorCode::INVALID_CONFIG.0
    );
    let (code, message) = alter_legacy(&running, "tiny", &[("segment.bytes", "14")]).await;
    assert_eq!(code, ErrorCode::INVALID_CONFIG.0, "{message}");
    assert!(message.contains("segment.bytes"), "{message}");
    assert_eq!(
        described(&running, "tiny", "segment.bytes")
            .await
            .as_deref(),
        Some("1073741824"),
        "unchanged"
    );
    assert_eq!(
        alter_error(&running, "tiny", "segment.bytes", "1048576").await,
        0,
        "the floor itself is taken"
    );
    shut(running).await;
}

/// The legacy AlterConfigs of a topic (the given set replaces its configs): code and message.
async fn alter_legacy(running: &Running, topic: &str, configs: &[(&str, &str)]) -> (i16, String) {
    use kafka_protocol::messages::AlterConfigsRequest;
    use kafka_protocol::messages::alter_configs_request::{
        AlterConfigsResource as LegacyResource, AlterableConfig as LegacyConfig,
    };
    let request = AlterConfigsRequest::default().with_resources(vec![
        LegacyResource::default()
            .with_resource_type(2)
            .with_resource_name(name(topic))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        LegacyConfig::default()
                            .with_name(name(k))
                            .with_value(Some(name(v)))
                    })
                    .collect(),
            ),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("AlterConfigs", &request, 2)
        .await
        .expect("AlterConfigs answers");
    let result = &answer.responses[0];
    (
        result.error_code,
        result
            .error_message
            .as_deref()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Hostile report 2026-12-02 finding 5: a produced record batch larger than the topic's
/// `max.message.bytes` (Kafka's default, 1048588 bytes, from the broker's `message.max.bytes`)
/// is MESSAGE_TOO_LARGE and nothing is appended; a topic that raises its limit takes it.
#[tokio::test]
async fn a_batch_larger_than_max_message_bytes_is_message_too_large() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    assert_eq!(create(&running.address, "limited", 1).await, 0);
    assert_eq!(
        described(&running, "limited", "max.message.bytes")
            .await
            .as_deref(),
        Some("1048588")
    );
    let big = BatchSpec {
        records: 2,
        value_size: 600_000,
        timestamp_ms: kmirror::broker::now_ms(),
        ..BatchSpec::default()
    }
    .build();
    assert!(big.len() > 1_048_588, "{} bytes", big.len());
    assert_eq!(
        produce(&running.address, "limited", 0, big.clone(), -1)
            .await
            .map(|(code, _)| code),
        Some(ErrorCode::MESSAGE_TOO_LARGE.0)
    );
    let end = |running: &Running| {
        running
            .broker
            .partition("limited", 0)
            .expect("open")
            .log
            .lock()
            .expect("lock")
            .log_end_offset()
    };
    assert_eq!(end(&running), 0, "nothing appended");
    assert_eq!(
        alter_error(&running, "limited", "max.message.bytes", "2000000").await,
        0
    );
    assert_eq!(
        produce(&running.address, "limited", 0, big, -1).await,
        Some((0, 0)),
        "taken under the raised limit"
    );
    assert_eq!(end(&running), 2);
    shut(running).await;

    // The broker's message.max.bytes is every topic's default.
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start_with(dir.path(), "message.max.bytes=2000\n").await;
    assert_eq!(create(&running.address, "small", 1).await, 0);
    let batch = |value_size| {
        BatchSpec {
            records: 1,
            value_size,
            timestamp_ms: kmirror::broker::now_ms(),
            ..BatchSpec::default()
        }
        .build()
    };
    assert_eq!(
        produce(&running.address, "small", 0, batch(3000), -1)
            .await
            .map(|(code, _)| code),
        Some(ErrorCode::MESSAGE_TOO_LARGE.0)
    );
    assert_eq!(
        produce(&running.address, "small", 0, batch(1000), -1).await,
        Some((0, 0))
    );
    shut(running).await;
}

/// CreateTopics with replication factor `factor`: code and message.
async fn create_replicated(running: &Running, topic: &str, factor: i16) -> (i16, String) {
    let request = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(name(topic)))
            .with_num_partitions(1)
            .with_replication_factor(factor),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("CreateTopics", &request, 7)
        .await
        .expect("CreateTopics answers");
    let result = &answer.topics[0];
    (
        result.error_code,
        result
            .error_message
            .as_deref()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Hostile report 2026-12-02 finding 5: a replication factor the cluster's live brokers cannot
/// give (here one broker), or one below 1 other than -1 (the default), is
/// INVALID_REPLICATION_FACTOR, as Kafka answers, and nothing is created.
#[tokio::test]
async fn a_replication_factor_above_the_live_brokers_is_invalid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    for factor in [2, 7, 0, -2] {
        let (code, message) = create_replicated(&running, "replicated", factor).await;
        assert_eq!(
            code,
            ErrorCode::INVALID_REPLICATION_FACTOR.0,
            "replication factor {factor}: {message}"
        );
        assert!(message.contains("replication factor"), "{message}");
    }
    assert!(running.broker.topic("replicated").is_none(), "not created");
    assert_eq!(create_replicated(&running, "default", -1).await.0, 0);
    assert_eq!(create_replicated(&running, "one", 1).await.0, 0);
    shut(running).await;
}

/// One request creates at most 10,000 partitions, across its topics and in CreatePartitions
/// (POLICY_VIOLATION, answered at once); the broker serves meanwhile and nothing is created.
#[tokio::test]
async fn one_request_creates_at_most_ten_thousand_partitions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let started = std::time::Instant::now();
    let answer = create_many(&running, &[("huge", 200_000, &[])]).await;
    assert_eq!(answer[0].0, ErrorCode::POLICY_VIOLATION.0, "{answer:?}");
    assert!(answer[0].1.contains("10000"), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let answer = create_many(
        &running,
        &[("half", 6_000, &[]), ("other-half", 6_000, &[])],
    )
    .await;
    assert_eq!(answer[0].0, 0, "{answer:?}");
    assert_eq!(answer[1].0, ErrorCode::POLICY_VIOLATION.0, "{answer:?}");
    let grow = CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default()
            .with_name(TopicName(name("half")))
            .with_count(16_001),
    ]);
    let (_, grown) = connection(&running.address)
        .await
        .send("CreatePartitions", &grow, 3)
        .await
        .expect("CreatePartitions answers");
    assert_eq!(grown.results[0].error_code, ErrorCode::POLICY_VIOLATION.0);
    assert_eq!(
        running.broker.topic("half").map(|t| t.partitions.len()),
        Some(6_000)
    );
    assert!(running.broker.topic("other-half").is_none());
    assert!(running.broker.topic("huge").is_none());
    shut(running).await;
}

/// A record dated a century ahead (which would keep its segment from ever expiring) is refused
/// with INVALID_TIMESTAMP under Kafka 4's default `log.message.timestamp.after.max.ms` (1 h),
/// and appends nothing; one dated now is taken.
#[tokio::test]
async fn records_dated_beyond_the_timestamp_bounds_are_an_invalid_timestamp() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    assert_eq!(create(&running.address, "dated", 1).await, 0);
    let now = kmirror::broker::now_ms();
    for ahead in [2 * 3_600_000, 100 * 365 * 24 * 3_600_000] {
        let batch = BatchSpec {
            records: 3,
            timestamp_ms: now + ahead,
            ..BatchSpec::default()
        }
        .build();
        let answer = produce(&running.address, "dated", 0, batch, -1).await;
        assert_eq!(
            answer.map(|(code, _)| code),
            Some(ErrorCode::INVALID_TIMESTAMP.0),
            "{ahead} ms ahead"
        );
    }
    let batch = BatchSpec {
        records: 3,
        timestamp_ms: now,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&running.address, "dated", 0, batch, -1).await,
        Some((0, 0))
    );
    shut(running).await;
}
