//! The source-cluster client against a real Apache Kafka 4.x started by
//! `scripts/kafka-local.sh` (scripts/test.sh starts it and exports `KMIRROR_KAFKA_*`).
//!
//! Data is produced by Kafka's own tools (ProducerPerformance with every codec,
//! TransactionalMessageCopier with random aborts); what the client fetches is compared byte for
//! byte with the broker's segment files. TLS and SASL run against the broker's SSL and SASL_SSL
//! listeners with a CA made by openssl and a SCRAM user created at format time. Fault tests kill,
//! freeze and restart the broker, so every test takes one lock and they run one at a time.

mod prototype;
mod version_cap;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::records::RecordBatchDecoder;
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::source::{EARLIEST, LATEST};
use kmirror_protocol::client::{
    ClientConfig, ClientError, FetchPartitionSpec, FetchSpec, Isolation, SaslConfig, SaslMechanism,
    SecurityProtocol, SourceClient,
};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::kafka_tools::{self, kafka_env, kafka_tool};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use uuid::Uuid;
use version_cap::VersionCapProxy;

static BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn create_topic(name: &str, partitions: u32, configs: &[&str]) {
    kafka_tools::create_topic(
        &kafka_env("KMIRROR_KAFKA_BOOTSTRAP"),
        name,
        partitions,
        configs,
    );
}

fn produce(topic: &str, records: u32, compression: &str, extra: &[&str]) {
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    kafka_tools::produce(&bootstrap, topic, records, compression, extra);
}

fn segment(topic: &str, partition: i32) -> Vec<u8> {
    let path = PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA"))
        .join("logs")
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A topic name unique to this run, so reruns against the same broker start empty.
fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

fn plaintext() -> ClientConfig {
    let mut c = ClientConfig::plaintext(&kafka_env("KMIRROR_KAFKA_BOOTSTRAP"));
    c.request_timeout = Duration::from_secs(15);
    c
}

/// Fetches a partition from offset 0 to its high watermark; returns the whole batches' bytes,
/// the aborted transactions seen, and the last answer's LSO.
async fn fetch_all(
    client: &SourceClient,
    topic: &str,
    isolation: Isolation,
) -> (Vec<u8>, Vec<(i64, i64)>, i64) {
    let meta = client.metadata(Some(&[topic])).await.expect("metadata");
    let t = &meta.topics[topic];
    let p = &t.partitions[0];
    let mut offset = 0;
    let mut bytes = Vec::new();
    let mut aborted = Vec::new();
    loop {
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: topic.to_string(),
                topic_id: t.topic_id,
                partition: 0,
                offset,
                current_leader_epoch: p.leader_epoch,
                last_fetched_epoch: -1,
                max_bytes: 256 * 1024,
            }],
            isolation,
            max_wait_ms: 100,
            min_bytes: 1,
            max_bytes: 1 << 20,
        };
        let answer = client
            .fetch(p.leader, &spec)
            .await
            .expect("fetch")
            .remove(0);
        assert_eq!(answer.error, ErrorCode::NONE);
        aborted.extend(
            answer
                .aborted_transactions
                .iter()
                .map(|a| (a.producer_id, a.first_offset)),
        );
        let mut batches = RecordBatches::new(answer.records.clone());
        let mut advanced = false;
        for batch in batches.by_ref() {
            let batch = batch.expect("valid batch");
            batch.verify_crc().expect("CRC holds");
            bytes.extend_from_slice(batch.as_bytes());
            offset = batch.next_offset();
            advanced = true;
        }
        let end = if isolation == Isolation::ReadCommitted {
            answer.last_stable_offset
        } else {
            answer.high_watermark
        };
        if offset >= end || !advanced {
            return (bytes, aborted, answer.last_stable_offset);
        }
    }
}

async fn latest_offset(client: &SourceClient, topic: &str) -> Result<i64, ClientError> {
    client
        .list_offsets(1, topic, 0, LATEST, Isolation::ReadUncommitted)
        .await
        .map(|(offset, _)| offset)
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn metadata_cluster_id_configs_and_no_lme_from_apache_kafka() {
    let _broker = BROKER.lock().await;
    let topic = unique("interop-meta");
    create_topic(&topic, 3, &["retention.ms=3600000"]);
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    assert_eq!(
        client.cluster_id().await.expect("cluster id"),
        kafka_env("KMIRROR_KAFKA_CLUSTER_ID")
    );
    let meta = client.metadata(Some(&[&topic])).await.expect("metadata");
    let t = &meta.topics[&topic];
    assert_ne!(t.topic_id, Uuid::nil());
    assert_eq!(t.partitions.len(), 3);
    assert!(
        t.partitions
            .iter()
            .all(|p| p.leader == 1 && p.leader_epoch >= 0 && p.isr == [1])
    );
    let configs = client
        .describe_topic_configs(&topic)
        .await
        .expect("configs");
    let retention = configs
        .iter()
        .find(|c| c.name == "retention.ms")
        .expect("retention.ms");
    assert_eq!(
        (retention.value.as_deref(), retention.source),
        (Some("3600000"), 1)
    );
    // Many requests in flight on one connection at once: answered in order, each to its caller.
    let client = std::sync::Arc::new(client);
    let mut calls = tokio::task::JoinSet::new();
    for p in 0..30 {
        let client = client.clone();
        let topic = topic.clone();
        calls.spawn(async move {
            let answer = client
                .list_offsets(1, &topic, p % 3, LATEST, Isolation::ReadUncommitted)
                .await;
            (p % 3, answer.map(|(offset, _)| offset))
        });
    }
    while let Some(done) = calls.join_next().await {
        let (_, offset) = done.expect("task");
        assert_eq!(offset.expect("pipelined request answered"), 0);
    }
    // Apache Kafka has no LastMirroredEpochs: "no LME" for every partition.
    let lmes = client
        .last_mirrored_epochs("some-cluster", &topic, t.topic_id, &[0, 1, 2])
        .await
        .expect("answers");
    let lmes: Vec<i32> = lmes.into_iter().map(|l| l.expect("no LME")).collect();
    assert_eq!(lmes, [-1, -1, -1]);
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn fetched_batches_are_the_brokers_bytes_for_every_codec() {
    let _broker = BROKER.lock().await;
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = unique(&format!("interop-codec-{codec}"));
        create_topic(&topic, 1, &[]);
        produce(&topic, 3000, codec, &[]);
        let (bytes, _, _) = fetch_all(&client, &topic, Isolation::ReadUncommitted).await;
        let stored = segment(&topic, 0);
        assert_eq!(
            bytes.len(),
            stored.len(),
            "{codec}: fetched {} of {} bytes",
            bytes.len(),
            stored.len()
        );
        assert!(
            bytes == stored,
            "{codec}: fetched bytes differ from the segment file"
        );
        // And Kafka's own decoding (kafka-protocol) sees all 3,000 records at offsets 0..3000.
        let mut wire = Bytes::from(bytes);
        let sets = RecordBatchDecoder::decode_all(&mut wire).expect("decodes");
        let offsets: Vec<i64> = sets
            .iter()
            .flat_map(|s| s.records.iter().map(|r| r.offset))
            .collect();
        assert!(
            offsets.iter().copied().eq(0..3000),
            "{codec}: {} records, not offsets 0..3000",
            offsets.len()
        );
    }
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn read_committed_fetches_list_aborted_transactions() {
    let _broker = BROKER.lock().await;
    let (input, output) = (unique("interop-txn-in"), unique("interop-txn-out"));
    create_topic(&input, 1, &[]);
    create_topic(&output, 1, &[]);
    produce(&input, 2000, "lz4", &[]);
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    kafka_tools::copy_transactionally(&bootstrap, &input, &output, "interop-copier", 2000);
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    let (bytes, aborted, lso) = fetch_all(&client, &output, Isolation::ReadCommitted).await;
    assert!(
        !aborted.is_empty(),
        "random aborts left aborted transactions"
    );
    let stored = segment(&output, 0);
    assert!(
        bytes.len() <= stored.len() && stored[..bytes.len()] == bytes[..],
        "fetched bytes are a prefix of the segment"
    );
    let batches: Vec<_> = RecordBatches::new(Bytes::from(bytes))
        .map(|b| b.expect("valid"))
        .collect();
    assert!(
        batches.iter().any(|b| b.is_control()),
        "markers are fetched too"
    );
    assert!(batches.last().is_some_and(|b| b.next_offset() <= lso));
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn tls_and_sasl_scram_plain_and_their_failures() {
    let _broker = BROKER.lock().await;
    let ca = PathBuf::from(kafka_env("KMIRROR_KAFKA_CA"));
    let tls = |bootstrap: &str, truststore: PathBuf| {
        let mut c = ClientConfig::plaintext(bootstrap);
        c.security_protocol = SecurityProtocol::Ssl;
        c.truststore = Some(kmirror_protocol::client::stores::Truststore {
            source: kmirror_protocol::client::stores::StoreSource::File(truststore),
            store_type: None,
            password: None,
        });
        c.connect_timeout = Duration::from_secs(10);
        c
    };
    let sasl = |mechanism, password: &str| {
        let mut c = tls(&kafka_env("KMIRROR_KAFKA_SASL_SSL"), ca.clone());
        c.security_protocol = SecurityProtocol::SaslSsl;
        c.sasl = Some(SaslConfig {
            mechanism,
            username: kafka_env("KMIRROR_KAFKA_USER"),
            password: password.to_string(),
            oauthbearer: None,
        });
        c
    };
    let expect_within = Duration::from_secs(20);

    let client = SourceClient::connect(tls(&kafka_env("KMIRROR_KAFKA_SSL"), ca.clone()))
        .await
        .expect("TLS connects");
    assert_eq!(
        client.cluster_id().await.expect("over TLS"),
        kafka_env("KMIRROR_KAFKA_CLUSTER_ID")
    );
    let wrong_ca = tokio::time::timeout(
        expect_within,
        SourceClient::connect(tls(
            &kafka_env("KMIRROR_KAFKA_SSL"),
            kafka_env("KMIRROR_KAFKA_OTHER_CA").into(),
        )),
    )
    .await
    .expect("a wrong CA fails fast");
    assert!(
        matches!(wrong_ca, Err(ClientError::Tls { .. })),
        "{wrong_ca:?}"
    );

    let password = kafka_env("KMIRROR_KAFKA_PASSWORD");
    for mechanism in [
        SaslMechanism::ScramSha512,
        SaslMechanism::ScramSha256,
        SaslMechanism::Plain,
    ] {
        let client = SourceClient::connect(sasl(mechanism, &password))
            .await
            .unwrap_or_else(|e| panic!("{mechanism:?}: {e}"));
        assert_eq!(
            client.cluster_id().await.expect("over SASL_SSL"),
            kafka_env("KMIRROR_KAFKA_CLUSTER_ID")
        );
    }
    let wrong = tokio::time::timeout(
        expect_within,
        SourceClient::connect(sasl(SaslMechanism::ScramSha512, "not-the-password")),
    )
    .await
    .expect("a wrong password fails fast");
    match wrong {
        Err(e @ ClientError::Authentication { .. }) => {
            assert!(!e.to_string().contains("not-the-password"))
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn epochs_divergence_and_faults_across_broker_restarts() {
    let _broker = BROKER.lock().await;
    let data = kafka_env("KMIRROR_KAFKA_DATA");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka-local.sh");
    let restart = || {
        let status = Command::new(script)
            .args(["restart", &data])
            .status()
            .expect("script runs");
        assert!(status.success());
    };
    create_topic("interop-epochs", 1, &[]);
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    client
        .metadata(Some(&["interop-epochs"]))
        .await
        .expect("metadata");
    // Offsets below are relative to where the log ends now (a rerun finds older data).
    let base = latest_offset(&client, "interop-epochs")
        .await
        .expect("latest");
    produce("interop-epochs", 500, "none", &[]);
    let meta = client
        .metadata(Some(&["interop-epochs"]))
        .await
        .expect("metadata");
    let t = meta.topics["interop-epochs"].clone();
    let old_epoch = t.partitions[0].leader_epoch;
    assert_eq!(
        latest_offset(&client, "interop-epochs")
            .await
            .expect("latest"),
        base + 500
    );
    let earliest = client
        .list_offsets(1, "interop-epochs", 0, EARLIEST, Isolation::ReadUncommitted)
        .await;
    assert_eq!(earliest.expect("earliest").0, 0);

    // A restart elects the leader again: the epoch advances.
    restart();
    produce("interop-epochs", 100, "none", &[]);
    let meta = client
        .metadata(Some(&["interop-epochs"]))
        .await
        .expect("metadata after restart");
    let new_epoch = meta.topics["interop-epochs"].partitions[0].leader_epoch;
    assert!(new_epoch > old_epoch, "epoch {old_epoch} -> {new_epoch}");
    let (epoch, end) = client
        .offset_for_leader_epoch(1, "interop-epochs", 0, new_epoch, old_epoch)
        .await
        .expect("OffsetForLeaderEpoch");
    assert_eq!((epoch, end), (old_epoch, base + 500));
    // A client claiming to hold epoch `old_epoch` up to offset base + 550 diverged: told where
    // that epoch ends.
    let spec = FetchSpec {
        partitions: vec![FetchPartitionSpec {
            topic: "interop-epochs".into(),
            topic_id: t.topic_id,
            partition: 0,
            offset: base + 550,
            current_leader_epoch: new_epoch,
            last_fetched_epoch: old_epoch,
            max_bytes: 1 << 20,
        }],
        isolation: Isolation::ReadCommitted,
        max_wait_ms: 100,
        min_bytes: 1,
        max_bytes: 1 << 20,
    };
    let answer = client.fetch(1, &spec).await.expect("fetch").remove(0);
    assert_eq!(answer.diverging_epoch, Some((old_epoch, base + 500)));
    assert!(answer.records.is_empty());

    // The same to a broker below Fetch v12 (no last fetched epoch, no diverging epoch in the
    // answer): the client finds the divergence with OffsetForLeaderEpoch, as Kafka's replica
    // fetcher does there. The proxy makes Kafka look older; it takes the port Kafka's REMOTE
    // listener advertises, so clients stay behind it after metadata.
    let old = VersionCapProxy::start(
        &kafka_env("KMIRROR_KAFKA_REMOTE"),
        &kafka_env("KMIRROR_KAFKA_REMOTE_LISTENER"),
        &[(ApiKey::Fetch, 11)],
    )
    .await;
    let mut config = plaintext();
    config.bootstrap_servers = vec![kafka_env("KMIRROR_KAFKA_REMOTE")];
    let old_client = SourceClient::connect(config).await.expect("connects");
    let answer = old_client.fetch(1, &spec).await.expect("fetch").remove(0);
    assert_eq!(answer.diverging_epoch, Some((old_epoch, base + 500)));
    assert!(answer.records.is_empty());
    // Where the history agrees the fetch goes on, at v11.
    let mut agreeing = spec.clone();
    agreeing.partitions[0].offset = base + 500;
    let answer = old_client
        .fetch(1, &agreeing)
        .await
        .expect("fetch")
        .remove(0);
    assert_eq!(
        (answer.error, answer.diverging_epoch),
        (ErrorCode::NONE, None)
    );
    let first = RecordBatches::new(answer.records)
        .next()
        .expect("records")
        .expect("valid");
    assert_eq!(
        (first.base_offset(), first.partition_leader_epoch()),
        (base + 500, new_epoch),
        "the records of the new epoch"
    );
    assert_eq!(old.newest_sent(ApiKey::Fetch), Some(11));
    drop(old);

    // Killed mid-fetch (a long poll on the log end): a typed error, then a reconnect.
    let mut waiting = spec.clone();
    waiting.partitions[0].offset = base + 600;
    waiting.partitions[0].last_fetched_epoch = new_epoch;
    waiting.max_wait_ms = 10_000;
    let pid = std::fs::read_to_string(format!("{data}/pid"))
        .expect("pid")
        .trim()
        .to_string();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .expect("kill");
    });
    let failed = client.fetch(1, &waiting).await;
    killer.await.expect("killer");
    assert!(
        matches!(failed, Err(ClientError::Connection { .. })),
        "{failed:?}"
    );
    assert!(failed.as_ref().err().is_some_and(ClientError::is_retriable));
    restart();
    let mut answer = None;
    for _ in 0..50 {
        match latest_offset(&client, "interop-epochs").await {
            Ok(v) => {
                answer = Some(v);
                break;
            }
            Err(e) => assert!(e.is_retriable(), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answer, Some(base + 600), "reconnected after the restart");

    // A frozen broker: the request times out instead of hanging.
    let pid = std::fs::read_to_string(format!("{data}/pid"))
        .expect("pid")
        .trim()
        .to_string();
    let mut impatient = plaintext();
    impatient.request_timeout = Duration::from_secs(2);
    let slow_client = SourceClient::connect(impatient).await.expect("connects");
    slow_client
        .metadata(Some(&["interop-epochs"]))
        .await
        .expect("metadata");
    Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .expect("SIGSTOP");
    // Wait until the kernel reports the process stopped (state T).
    for _ in 0..100 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .split(") ")
            .nth(1)
            .is_some_and(|rest| rest.starts_with('T'))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let frozen = slow_client
        .list_offsets(1, "interop-epochs", 0, LATEST, Isolation::ReadUncommitted)
        .await;
    Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .expect("SIGCONT");
    assert!(
        matches!(frozen, Err(ClientError::Timeout { .. })),
        "{frozen:?}"
    );
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn groups_committed_offsets_and_acls() {
    let _broker = BROKER.lock().await;
    let topic = unique("interop-groups");
    let group = unique("interop-group");
    create_topic(&topic, 1, &[]);
    produce(&topic, 100, "none", &[]);
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    kafka_tools::reset_group_offsets(&bootstrap, &group, &topic, 42);
    kafka_tool(
        "org.apache.kafka.tools.AclCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--add",
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            &topic,
        ],
    );
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    let groups = client.list_groups().await.expect("groups");
    let listed = groups
        .iter()
        .find(|g| g.group_id == group)
        .expect("the group is listed");
    assert_eq!(listed.state, "Empty");
    let committed = client.committed_offsets(&group).await.expect("offsets");
    let seen: Vec<(String, i32, i64)> = committed
        .iter()
        .map(|c| (c.topic.clone(), c.partition, c.offset))
        .collect();
    assert_eq!(seen, [(topic.clone(), 0, 42)]);
    let acls = client.describe_acls().await.expect("acls");
    let binding = acls
        .iter()
        .find(|a| a.resource_name == topic)
        .expect("the ACL is listed");
    // TOPIC, LITERAL, READ, ALLOW in Kafka's codes.
    assert_eq!(
        (
            binding.resource_type,
            binding.pattern_type,
            binding.principal.as_str(),
            binding.host.as_str(),
            binding.operation,
            binding.permission_type
        ),
        (2, 3, "User:bob", "*", 3, 3)
    );
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn incremental_fetch_sessions_return_the_same_bytes() {
    let _broker = BROKER.lock().await;
    let topic = unique("interop-session");
    create_topic(&topic, 3, &[]);
    produce(
        &topic,
        6000,
        "lz4",
        &["batch.size=4096", kafka_tools::ROUND_ROBIN],
    );
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    let meta = client.metadata(Some(&[&topic])).await.expect("metadata");
    let t = meta.topics[&topic].clone();
    let mut offsets = [0i64; 3];
    let mut ends = [i64::MAX; 3];
    let mut bytes: [Vec<u8>; 3] = Default::default();
    let mut rounds = 0;
    while (0..3).any(|p| offsets[p] < ends[p]) {
        rounds += 1;
        assert!(rounds < 10_000, "no progress");
        let spec = FetchSpec {
            partitions: (0..3)
                .map(|p| FetchPartitionSpec {
                    topic: topic.clone(),
                    topic_id: t.topic_id,
                    partition: p as i32,
                    offset: offsets[p],
                    current_leader_epoch: t.partitions[p].leader_epoch,
                    last_fetched_epoch: -1,
                    max_bytes: 16 * 1024,
                })
                .collect(),
            isolation: Isolation::ReadCommitted,
            max_wait_ms: 50,
            min_bytes: 1,
            max_bytes: 1 << 20,
        };
        for answer in client.fetch(1, &spec).await.expect("fetch") {
            let p = answer.partition as usize;
            assert_eq!(answer.error, ErrorCode::NONE);
            ends[p] = answer.high_watermark;
            for batch in RecordBatches::new(answer.records) {
                let batch = batch.expect("valid");
                bytes[p].extend_from_slice(batch.as_bytes());
                offsets[p] = batch.next_offset();
            }
        }
        if rounds == 1 {
            assert!(
                client.fetch_session(1).is_some(),
                "Kafka granted a fetch session"
            );
        }
    }
    let (id, epoch) = client.fetch_session(1).expect("the session lives on");
    assert!(
        id != 0 && epoch > 1,
        "incremental fetches ran: session {id} epoch {epoch}"
    );
    for (p, fetched) in bytes.iter().enumerate() {
        assert!(
            *fetched == segment(&topic, p as i32),
            "partition {p} differs from its segment"
        );
    }
}

/// Writes `lines` (`key:value`) with Kafka's ConsoleProducer.
fn produce_keyed(topic: &str, lines: &[String]) {
    use std::io::Write;
    let dist = kafka_env("KMIRROR_KAFKA_DIST");
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(format!("{dist}/libs/*"))
        .arg(format!(
            "-Dlog4j2.configurationFile=file:{dist}/log4j2.properties"
        ))
        .args([
            "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            &kafka_env("KMIRROR_KAFKA_BOOTSTRAP"),
            "--topic",
            topic,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("java runs");
    let mut stdin = child.stdin.take().expect("stdin");
    for line in lines {
        writeln!(stdin, "{line}").expect("writes");
    }
    drop(stdin);
    assert!(child.wait().expect("waits").success());
}

/// Every `*.log` segment of a partition, in offset order, back to back.
fn all_segments(topic: &str, partition: i32) -> Vec<u8> {
    let dir = PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA"))
        .join("logs")
        .join(format!("{topic}-{partition}"));
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("partition directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .flat_map(|p| std::fs::read(p).expect("reads"))
        .collect()
}

#[tokio::test]
#[ignore = "needs Apache Kafka: run scripts/test.sh"]
async fn compacted_topics_with_gaps_match_the_java_consumer() {
    let _broker = BROKER.lock().await;
    let topic = unique("interop-compacted");
    create_topic(
        &topic,
        1,
        &[
            "cleanup.policy=compact",
            "segment.ms=100",
            "min.cleanable.dirty.ratio=0.01",
            "min.compaction.lag.ms=0",
            "delete.retention.ms=100",
        ],
    );
    // Three rounds in separate segments: every key, then the even keys, then every third key;
    // the cleaner keeps the newest value of each, which leaves gaps all through the log.
    for round in 0..3 {
        let lines: Vec<String> = (0..50)
            .filter(|k| k % (round + 1) == 0)
            .map(|k| format!("key-{k}:round-{round}"))
            .collect();
        produce_keyed(&topic, &lines);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    produce_keyed(&topic, &["last:roll".to_string()]);
    let client = SourceClient::connect(plaintext()).await.expect("connects");
    let mut offsets = Vec::new();
    let mut bytes = Vec::new();
    for _ in 0..300 {
        let (fetched, _, _) = fetch_all(&client, &topic, Isolation::ReadCommitted).await;
        let mut wire = Bytes::from(fetched.clone());
        let sets = RecordBatchDecoder::decode_all(&mut wire).expect("decodes");
        offsets = sets
            .iter()
            .flat_map(|s| {
                s.records
                    .iter()
                    .map(|r| (r.offset, r.key.clone(), r.value.clone()))
            })
            .collect();
        bytes = fetched;
        if offsets.len() <= 60 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        offsets.len() <= 60,
        "the cleaner compacted the topic: {} records left",
        offsets.len()
    );
    assert!(
        offsets.windows(2).any(|w| w[1].0 > w[0].0 + 1),
        "compaction left gaps in the offsets"
    );
    assert!(
        bytes == all_segments(&topic, 0),
        "fetched bytes differ from the cleaned segments"
    );
    // Kafka's own consumer sees the same offsets, keys and values.
    let bootstrap = kafka_env("KMIRROR_KAFKA_BOOTSTRAP");
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--topic",
            &topic,
            "--from-beginning",
            "--timeout-ms",
            "5000",
            "--property",
            "print.offset=true",
            "--property",
            "print.key=true",
        ],
    );
    let java: Vec<(i64, String, String)> = out
        .lines()
        .filter_map(|l| {
            let mut fields = l.split('\t');
            let offset = fields.next()?.strip_prefix("Offset:")?.parse().ok()?;
            Some((
                offset,
                fields.next()?.to_string(),
                fields.next()?.to_string(),
            ))
        })
        .collect();
    let ours: Vec<(i64, String, String)> = offsets
        .iter()
        .map(|(o, k, v)| {
            let text = |b: &Option<Bytes>| {
                b.as_ref()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default()
            };
            (*o, text(k), text(v))
        })
        .collect();
    assert_eq!(ours, java);
}
