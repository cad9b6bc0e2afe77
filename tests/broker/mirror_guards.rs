//! A mirror topic stays byte-identical to its source until its partitions are STOPPED: every
//! client path that would append to it or change it is refused while it is read-only
//! (transactions and their markers, CreatePartitions, DeleteTopics, config changes), `mirror.name`
//! is never a client's to set, and CreateMirror refuses configs it could not run with, this
//! cluster as its own source included.
//!
//! Mirror topics are made here as StartMirrorTopics makes them (through the broker, with
//! `mirror.name`); no engine runs, so they stay as made.

use super::{Running, connection, create, fetch_all, produce, shut, start};
use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsResource as LegacyResource, AlterableConfig as LegacyConfig,
};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, AlterConfigsRequest,
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, EndTxnRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_protocol::batch::RecordBatch;
use kmirror_protocol::client::{ClientConfig, SourceClient};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{CreateMirrorRequest, create_mirror_request};
use kmirror_protocol::testing::BatchSpec;
use std::collections::BTreeMap;

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn records(count: usize) -> Bytes {
    BatchSpec {
        records: count,
        ..BatchSpec::default()
    }
    .build()
}

/// Makes `topic` a topic of mirror `dr` in `state` (`dr`, `dr.paused`, `dr.removed`), as the
/// mirror RPCs do: through the broker, not a client request.
async fn set_mirror_name(running: &Running, topic: &str, value: &str) {
    // A topic joins only a mirror that exists.
    if !running.broker.mirrors().contains_key("dr") {
        running
            .broker
            .create_mirror("dr", std::collections::BTreeMap::new())
            .await
            .expect("mirror dr created");
    }
    let mut configs = running.broker.topics()[topic].configs.clone();
    configs.insert("mirror.name".into(), value.into());
    running
        .broker
        .set_topic_configs(topic, configs)
        .await
        .expect("mirror.name set");
}

/// An ordinary topic holding `batches` batches of 3 records in partition 0.
async fn topic_with_records(running: &Running, topic: &str, batches: i64) {
    assert_eq!(create(&running.address, topic, 1).await, 0);
    for i in 0..batches {
        assert_eq!(
            produce(&running.address, topic, 0, records(3), -1).await,
            Some((0, i * 3))
        );
    }
}

async fn read(running: &Running, topic: &str) -> Vec<RecordBatch> {
    let client = SourceClient::connect(ClientConfig::plaintext(&running.address))
        .await
        .expect("connects");
    fetch_all(&client, topic, 0).await
}

/// InitProducerId for a transactional id; `(producer id, epoch)`.
async fn init_transactions(running: &Running, id: &str) -> (ProducerId, i16) {
    let (_, init) = connection(&running.address)
        .await
        .send(
            "InitProducerId",
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(name(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
            4,
        )
        .await
        .expect("InitProducerId answers");
    assert_eq!(init.error_code, 0);
    (init.producer_id, init.producer_epoch)
}

async fn add_partitions(
    running: &Running,
    id: &str,
    producer: (ProducerId, i16),
    topics: &[(&str, i32)],
) -> AddPartitionsToTxnResponse {
    let topics = topics
        .iter()
        .map(|(topic, partition)| {
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partitions(vec![*partition])
        })
        .collect();
    let (_, added) = connection(&running.address)
        .await
        .send(
            "AddPartitionsToTxn",
            &AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(name(id)))
                .with_v3_and_below_producer_id(producer.0)
                .with_v3_and_below_producer_epoch(producer.1)
                .with_v3_and_below_topics(topics),
            3,
        )
        .await
        .expect("AddPartitionsToTxn answers");
    added
}

async fn end_transaction(running: &Running, id: &str, producer: (ProducerId, i16)) -> i16 {
    let (_, ended) = connection(&running.address)
        .await
        .send(
            "EndTxn",
            &EndTxnRequest::default()
                .with_transactional_id(TransactionalId(name(id)))
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_committed(true),
            3,
        )
        .await
        .expect("EndTxn answers");
    ended.error_code
}

/// AddPartitionsToTxn refuses a read-only mirror partition with READ_ONLY_TOPIC (the others of
/// the request are not attempted, as Kafka adds all or nothing), so EndTxn has no marker to
/// write into it: a consumer of the mirror topic reads nothing the destination made.
#[tokio::test]
async fn add_partitions_to_txn_refuses_a_read_only_mirror_partition() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    topic_with_records(&running, "mirrored", 1).await;
    set_mirror_name(&running, "mirrored", "dr").await;
    assert_eq!(create(&running.address, "plain", 1).await, 0);
    let producer = init_transactions(&running, "tx").await;
    let added = add_partitions(&running, "tx", producer, &[("mirrored", 0), ("plain", 0)]).await;
    let codes: BTreeMap<String, i16> = added
        .results_by_topic_v3_and_below
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.results_by_partition[0].partition_error_code,
            )
        })
        .collect();
    assert_eq!(codes["mirrored"], ErrorCode::READ_ONLY_TOPIC.0, "{codes:?}");
    assert_eq!(
        codes["plain"],
        ErrorCode::OPERATION_NOT_ATTEMPTED.0,
        "{codes:?}"
    );
    end_transaction(&running, "tx", producer).await;
    let batches = read(&running, "mirrored").await;
    assert_eq!(batches.len(), 1, "only the mirrored batch: {batches:?}");
    assert!(batches.iter().all(|b| !b.is_control()), "no marker");
    shut(running).await;
}

/// A partition added to a transaction and then made a mirror partition (StartMirrorTopics
/// joining an existing topic) gets no marker when the transaction ends: a consumer reads the
/// batches that were there and no control batch at the destination's epoch.
#[tokio::test]
async fn end_txn_writes_no_marker_into_a_partition_that_became_read_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    topic_with_records(&running, "joined", 1).await;
    let producer = init_transactions(&running, "tx").await;
    let added = add_partitions(&running, "tx", producer, &[("joined", 0)]).await;
    assert_eq!(
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    let batch = BatchSpec {
        producer_id: producer.0.0,
        producer_epoch: producer.1,
        base_sequence: 0,
        transactional: true,
        records: 2,
        ..BatchSpec::default()
    }
    .build();
    assert_eq!(
        produce(&running.address, "joined", 0, batch, -1).await,
        Some((0, 3))
    );
    set_mirror_name(&running, "joined", "dr").await;
    assert_eq!(end_transaction(&running, "tx", producer).await, 0);
    let batches = read(&running, "joined").await;
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert!(
        batches.iter().all(|b| !b.is_control()),
        "no marker in a read-only partition: {batches:?}"
    );
    shut(running).await;
}

/// CreatePartitions of a mirror topic is refused (its partition count follows the source),
/// validate-only too; once stopped it grows like any topic.
#[tokio::test]
async fn create_partitions_is_refused_for_a_mirror_topic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    topic_with_records(&running, "mirrored", 1).await;
    let grow = |validate_only: bool| {
        CreatePartitionsRequest::default()
            .with_timeout_ms(5000)
            .with_validate_only(validate_only)
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(TopicName(name("mirrored")))
                    .with_count(3),
            ])
    };
    let client = connection(&running.address).await;
    for state in ["dr", "dr.paused"] {
        set_mirror_name(&running, "mirrored", state).await;
        for validate_only in [true, false] {
            let (_, answer) = client
                .send("CreatePartitions", &grow(validate_only), 3)
                .await
                .expect("CreatePartitions answers");
            assert_eq!(
                answer.results[0].error_code,
                ErrorCode::READ_ONLY_TOPIC.0,
                "{state} {answer:?}"
            );
        }
    }
    assert_eq!(running.broker.topics()["mirrored"].partitions.len(), 1);
    set_mirror_name(&running, "mirrored", "dr.removed").await;
    running.broker.set_read_only("mirrored", 0, false);
    let (_, answer) = client
        .send("CreatePartitions", &grow(false), 3)
        .await
        .expect("CreatePartitions answers");
    assert_eq!(answer.results[0].error_code, 0, "{answer:?}");
    shut(running).await;
}

/// DeleteTopics of a mirroring or paused topic is refused, telling the operator to stop it
/// first, and a consumer still reads every record; after the stop it is deleted.
#[tokio::test]
async fn deleting_a_mirroring_or_paused_topic_is_refused_until_it_is_stopped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    topic_with_records(&running, "mirrored", 2).await;
    let delete = DeleteTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topic_names(vec![TopicName(name("mirrored"))]);
    let client = connection(&running.address).await;
    for state in ["dr", "dr.paused"] {
        set_mirror_name(&running, "mirrored", state).await;
        let (_, answer) = client
            .send("DeleteTopics", &delete, 5)
            .await
            .expect("DeleteTopics answers");
        let result = &answer.responses[0];
        assert_eq!(
            result.error_code,
            ErrorCode::READ_ONLY_TOPIC.0,
            "{state} {answer:?}"
        );
        let message = result.error_message.as_deref().unwrap_or_default();
        assert!(message.contains("--stop"), "{message}");
        assert_eq!(read(&running, "mirrored").await.len(), 2, "every record");
    }
    set_mirror_name(&running, "mirrored", "dr.removed").await;
    let (_, answer) = client
        .send("DeleteTopics", &delete, 5)
        .await
        .expect("DeleteTopics answers");
    assert_eq!(answer.responses[0].error_code, 0, "{answer:?}");
    assert!(running.broker.topic("mirrored").is_none());
    shut(running).await;
}

/// One IncrementalAlterConfigs change of a topic; the resource's error code and message.
async fn alter_one(
    running: &Running,
    topic: &str,
    key: &str,
    operation: i8,
    value: Option<&str>,
) -> (i16, String) {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name(topic))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(name(key))
                    .with_config_operation(operation)
                    .with_value(value.map(name)),
            ]),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("IncrementalAlterConfigs", &request, 1)
        .await
        .expect("IncrementalAlterConfigs answers");
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

/// The legacy AlterConfigs (the given set replaces the visible configs).
async fn alter_legacy(running: &Running, topic: &str, configs: &[(&str, &str)]) -> i16 {
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
    answer.responses[0].error_code
}

const SET: i8 = 0;
const DELETE: i8 = 1;

/// `mirror.name` is the mirror RPCs' alone: a client setting it on an ordinary topic (by either
/// AlterConfigs, or at CreateTopics), changing it or deleting it is refused with INVALID_CONFIG
/// naming the key and `kmirror mirrors`, and the topics stay as they were: the ordinary one
/// writable with every record, the mirror one read-only.
#[tokio::test]
async fn clients_cannot_set_change_or_delete_mirror_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    topic_with_records(&running, "plain", 2).await;
    topic_with_records(&running, "mirrored", 1).await;
    set_mirror_name(&running, "mirrored", "dr").await;
    let refused = |(code, message): (i16, String)| {
        assert_eq!(code, ErrorCode::INVALID_CONFIG.0, "{message}");
        assert!(
            message.contains("mirror.name") && message.contains("kmirror mirrors"),
            "{message}"
        );
    };
    refused(alter_one(&running, "plain", "mirror.name", SET, Some("dr")).await);
    refused(alter_one(&running, "plain", "mirror.name", SET, Some("nobody")).await);
    refused(alter_one(&running, "mirrored", "mirror.name", DELETE, None).await);
    refused(alter_one(&running, "mirrored", "mirror.name", SET, Some("dr.removed")).await);
    assert_eq!(
        alter_legacy(&running, "plain", &[("mirror.name", "dr")]).await,
        ErrorCode::INVALID_CONFIG.0
    );
    let request = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(TopicName(name("born-mirrored")))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(name("mirror.name"))
                    .with_value(Some(name("nobody"))),
            ]),
    ]);
    let (_, created) = connection(&running.address)
        .await
        .send("CreateTopics", &request, 7)
        .await
        .expect("CreateTopics answers");
    assert_eq!(created.topics[0].error_code, ErrorCode::INVALID_CONFIG.0);
    assert!(running.broker.topic("born-mirrored").is_none());

    assert_eq!(read(&running, "plain").await.len(), 2, "every record");
    assert_eq!(
        produce(&running.address, "plain", 0, records(1), -1).await,
        Some((0, 6)),
        "still an ordinary topic"
    );
    assert_eq!(
        produce(&running.address, "mirrored", 0, records(1), -1).await,
        Some((ErrorCode::READ_ONLY_TOPIC.0, -1)),
        "still a mirror topic"
    );
    shut(running).await;
}

/// On a topic that is mirroring or paused, the configs the metadata sync copies from the source
/// (all the log settings, unless the mirror's `mirror.topic.properties.exclude` leaves one to
/// the destination) and those that delete mirrored data (retention) are refused with
/// POLICY_VIOLATION, validate-only too; a stopped topic takes them like any topic.
#[tokio::test]
async fn mirrored_topic_configs_are_refused_until_the_topic_is_stopped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    running
        .broker
        .create_mirror(
            "dr",
            BTreeMap::from([
                ("bootstrap.servers".to_string(), "source:9092".to_string()),
                (
                    "mirror.topic.properties.exclude".to_string(),
                    "flush\\..*,retention\\.ms".to_string(),
                ),
            ]),
        )
        .await
        .expect("mirror created");
    topic_with_records(&running, "mirrored", 1).await;
    // As the sync copies it from the source.
    let mut synced = running.broker.topics()["mirrored"].configs.clone();
    synced.insert("retention.ms".into(), "604800000".into());
    running
        .broker
        .set_topic_configs("mirrored", synced)
        .await
        .expect("synced");
    for state in ["dr", "dr.paused"] {
        set_mirror_name(&running, "mirrored", state).await;
        for (key, operation, value) in [
            ("retention.ms", SET, Some("1")),
            ("retention.bytes", SET, Some("1")),
            ("segment.bytes", SET, Some("1048576")),
            ("retention.ms", DELETE, None),
        ] {
            let (code, message) = alter_one(&running, "mirrored", key, operation, value).await;
            assert_eq!(
                code,
                ErrorCode::POLICY_VIOLATION.0,
                "{state} {key}: {message}"
            );
            assert!(message.contains(key), "{message}");
        }
        assert_eq!(
            alter_legacy(&running, "mirrored", &[("retention.bytes", "1")]).await,
            ErrorCode::POLICY_VIOLATION.0
        );
    }
    // The mirror leaves flush settings to the destination.
    assert_eq!(
        alter_one(&running, "mirrored", "flush.ms", SET, Some("1000"))
            .await
            .0,
        0
    );
    assert_eq!(read(&running, "mirrored").await.len(), 1, "every record");
    set_mirror_name(&running, "mirrored", "dr.removed").await;
    running.broker.set_read_only("mirrored", 0, false);
    assert_eq!(
        alter_one(&running, "mirrored", "retention.ms", SET, Some("60000"))
            .await
            .0,
        0
    );
    shut(running).await;
}

async fn create_mirror(running: &Running, mirror: &str, configs: &[(&str, &str)]) -> (i16, String) {
    let request = CreateMirrorRequest {
        mirror_name: mirror.to_string(),
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
    let (_, answer) = connection(&running.address)
        .await
        .send("CreateMirror", &request, 0)
        .await
        .expect("CreateMirror answers");
    (answer.error_code, answer.error_message.unwrap_or_default())
}

/// A mirror whose source is this cluster (its `mirror.source.cluster.id`, as `kmirror mirrors
/// --create` fills it from the cluster its `bootstrap.servers` reach, is this cluster's id) is
/// refused: starting a topic through it would truncate the topic it reads from.
#[tokio::test]
async fn create_mirror_refuses_this_cluster_as_its_source() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let own = running.broker.cluster_id();
    let (code, message) = create_mirror(
        &running,
        "loop",
        &[
            ("bootstrap.servers", running.address.as_str()),
            ("mirror.source.cluster.id", own.as_str()),
        ],
    )
    .await;
    assert_eq!(code, ErrorCode::INVALID_CONFIG.0, "{message}");
    assert!(message.contains("this cluster"), "{message}");
    assert!(running.broker.mirrors().is_empty());
    shut(running).await;
}

/// Hostile report 2026-12-02 finding 6: a CreateMirror that does not give
/// `mirror.source.cluster.id` makes the broker ask the source for it, as `kmirror mirrors
/// --create` does: this cluster is refused as a source the same way, another cluster's id is
/// stored with the mirror, and a source that does not answer is refused naming the key (given,
/// the id creates the mirror anyway).
#[tokio::test]
async fn create_mirror_without_a_source_cluster_id_asks_the_source() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let (code, message) = create_mirror(
        &running,
        "loop",
        &[("bootstrap.servers", running.address.as_str())],
    )
    .await;
    assert_eq!(code, ErrorCode::INVALID_CONFIG.0, "{message}");
    assert!(message.contains("this cluster"), "{message}");
    assert!(running.broker.mirrors().is_empty(), "not created");

    let source_dir = tempfile::tempdir().expect("temp dir");
    let source = start(source_dir.path()).await;
    let (code, message) = create_mirror(
        &running,
        "dr",
        &[("bootstrap.servers", source.address.as_str())],
    )
    .await;
    assert_eq!(code, 0, "{message}");
    assert_eq!(
        running.broker.mirrors()["dr"]
            .get("mirror.source.cluster.id")
            .cloned(),
        Some(source.broker.cluster_id()),
        "the source's id is stored"
    );
    shut(source).await;

    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let (code, message) = create_mirror(
        &running,
        "nowhere",
        &[("bootstrap.servers", nowhere.as_str())],
    )
    .await;
    assert_eq!(code, ErrorCode::INVALID_CONFIG.0, "{message}");
    assert!(message.contains("mirror.source.cluster.id"), "{message}");
    let (code, message) = create_mirror(
        &running,
        "nowhere",
        &[
            ("bootstrap.servers", nowhere.as_str()),
            ("mirror.source.cluster.id", "SRC"),
        ],
    )
    .await;
    assert_eq!(code, 0, "{message}");
    shut(running).await;
}

/// Hostile report 2026-12-02 finding 7: DescribeConfigs of a mirror hides every key Kafka types
/// PASSWORD (value null, flagged sensitive, as `kmirror mirrors --describe-configs` then shows
/// it): a private key's passphrase and PEM material given inline as well as passwords.
#[tokio::test]
async fn describe_configs_of_a_mirror_hides_every_password_typed_key() {
    use kafka_protocol::messages::DescribeConfigsRequest;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let secrets = [
        (
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "LEAK-passphrase",
        ),
        ("ssl.keystore.certificate.chain", "LEAK-chain"),
        ("ssl.truststore.certificates", "LEAK-ca"),
        ("ssl.key.password", "LEAK-password"),
    ];
    let mut configs: BTreeMap<String, String> = secrets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    configs.insert("bootstrap.servers".into(), "source:9092".into());
    running
        .broker
        .create_mirror("guarded", configs)
        .await
        .expect("created");
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(64)
            .with_resource_name(name("guarded"))
            .with_configuration_keys(None),
    ]);
    let (_, answer) = connection(&running.address)
        .await
        .send("DescribeConfigs", &request, 4)
        .await
        .expect("DescribeConfigs answers");
    let described = &answer.results[0];
    assert_eq!(described.error_code, 0, "{described:?}");
    for (key, _) in secrets {
        let entry = described
            .configs
            .iter()
            .find(|c| &*c.name == key)
            .unwrap_or_else(|| panic!("{key} is listed: {described:?}"));
        assert!(
            entry.is_sensitive && entry.value.is_none(),
            "{key} hidden: {entry:?}"
        );
    }
    assert!(!format!("{answer:?}").contains("LEAK"), "{answer:?}");
    assert!(
        described
            .configs
            .iter()
            .any(|c| &*c.name == "bootstrap.servers" && c.value.as_deref() == Some("source:9092")),
        "other keys shown: {described:?}"
    );
    shut(running).await;
}

/// CreateMirror checks every config it will run with and names the failing key.
#[tokio::test]
async fn create_mirror_validates_every_config_naming_the_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let base = [
        ("bootstrap.servers", "source:9092"),
        ("mirror.source.cluster.id", "SRC"),
    ];
    let refused = [
        ("bootstrap.servers", "source"),
        ("bootstrap.servers", "source:port"),
        ("bootstrap.servers", "a:9092,,b:9092"),
        ("fetch.max.bytes", "abc"),
        ("mirror.fetch.max.bytes", "-1"),
        ("fetch.response.max.bytes", "0"),
        ("fetch.wait.max.ms", "-5"),
        ("fetch.min.bytes", "x"),
        ("fetch.backoff.ms", "soon"),
        ("mirror.num.replica.fetchers", "100000"),
        ("mirror.num.replica.fetchers", "0"),
        ("mirror.replication.throttled.rate", "fast"),
        ("mirror.replication.throttled.rate", "10"),
        ("socket.receive.buffer.bytes", "big"),
        ("socket.timeout.ms", "later"),
        ("mirror.topic.properties.exclude", "("),
        ("topics.include", "("),
        ("topics.exclude", "a,("),
        ("groups.include", "("),
        ("mirror.groups.exclude", "a,("),
        ("acls.include", "NOT_A_TYPE"),
        ("security.protocol", "CARRIER_PIGEON"),
        ("sasl.mechanism", "GSSAPI"),
        ("mirror.fetch.max.byte", "1048576"),
    ];
    for (i, (key, value)) in refused.iter().enumerate() {
        let mut configs: BTreeMap<&str, &str> = base.into_iter().collect();
        configs.insert(key, value);
        if *key == "sasl.mechanism" {
            configs.insert("security.protocol", "SASL_PLAINTEXT");
            configs.insert("sasl.username", "alice");
        }
        let configs: Vec<(&str, &str)> = configs.into_iter().collect();
        let (code, message) = create_mirror(&running, &format!("m{i}"), &configs).await;
        assert_eq!(
            code,
            ErrorCode::INVALID_CONFIG.0,
            "{key}={value}: {message}"
        );
        assert!(message.contains(key), "{key}={value}: {message}");
    }
    assert!(running.broker.mirrors().is_empty(), "none was created");
    let (code, message) = create_mirror(
        &running,
        "good",
        &[
            ("bootstrap.servers", "a:9092, b.example:19092"),
            ("mirror.source.cluster.id", "SRC"),
            ("mirror.fetch.max.bytes", "8388608"),
            ("mirror.num.replica.fetchers", "4"),
            ("mirror.groups.exclude", "test-.*"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "secret"),
        ],
    )
    .await;
    assert_eq!(code, 0, "{message}");
    shut(running).await;
}
