//! Requests real clients sent, replayed byte for byte (issue 22). `tests/broker/captured/` holds
//! the first request of each API, version and client id that the clients of the compatibility
//! suite sent to a `kmirror broker` (kcat and confluent-kafka on librdkafka 2.0 and 2.16,
//! aiokafka, kafka-python, kafkajs, Sarama at protocol 0.11 / 2.0 / 3.6, kafka-go, franz-go,
//! Java kafka-clients 2.0 to 4.4 with both group protocols), captured by
//! `COMPAT_CAPTURE=DIR scripts/compat.sh` (tests/compat/capture.py). Each is sent to a fresh
//! broker, which must answer at the version it was sent: the response header carries the
//! request's correlation id and the body decodes whole at that version (a bare error, or a
//! field the version lacks, fails), and the connection keeps serving. (An ApiVersions newer
//! than the broker's is answered in v0 with UNSUPPORTED_VERSION and the ranges, as Kafka does.)

use super::{shut, start};
use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Message};
use kmirror_protocol::errors::ErrorCode;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Decodes `body` as the response of `key` at `version`, to its last byte.
macro_rules! decode_response {
    ($key:expr, $version:expr, $body:expr, $($api:ident => $ty:ty),* $(,)?) => {
        match $key {
            $(ApiKey::$api => <$ty>::decode($body, $version).map(|_| ()),)*
            other => Err(anyhow::anyhow!("no decoder for {other:?} in this test")),
        }
    };
}

fn decodes(key: ApiKey, version: i16, body: &mut Bytes) -> anyhow::Result<()> {
    decode_response!(key, version, body,
        Produce => ProduceResponse,
        Fetch => FetchResponse,
        ListOffsets => ListOffsetsResponse,
        Metadata => MetadataResponse,
        OffsetCommit => OffsetCommitResponse,
        OffsetFetch => OffsetFetchResponse,
        FindCoordinator => FindCoordinatorResponse,
        JoinGroup => JoinGroupResponse,
        Heartbeat => HeartbeatResponse,
        LeaveGroup => LeaveGroupResponse,
        SyncGroup => SyncGroupResponse,
        DescribeGroups => DescribeGroupsResponse,
        ListGroups => ListGroupsResponse,
        ApiVersions => ApiVersionsResponse,
        CreateTopics => CreateTopicsResponse,
        DeleteTopics => DeleteTopicsResponse,
        InitProducerId => InitProducerIdResponse,
        OffsetForLeaderEpoch => OffsetForLeaderEpochResponse,
        AddPartitionsToTxn => AddPartitionsToTxnResponse,
        AddOffsetsToTxn => AddOffsetsToTxnResponse,
        EndTxn => EndTxnResponse,
        TxnOffsetCommit => TxnOffsetCommitResponse,
        DescribeAcls => DescribeAclsResponse,
        CreateAcls => CreateAclsResponse,
        DeleteAcls => DeleteAclsResponse,
        DescribeConfigs => DescribeConfigsResponse,
        AlterConfigs => AlterConfigsResponse,
        DeleteGroups => DeleteGroupsResponse,
        IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
        CreatePartitions => CreatePartitionsResponse,
        DescribeCluster => DescribeClusterResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        ConsumerGroupDescribe => ConsumerGroupDescribeResponse,
    )
}

/// Sends one captured frame on a fresh connection; the response frame.
async fn replay(address: &str, frame: &[u8]) -> anyhow::Result<Bytes> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let size = i32::try_from(frame.len())?;
    stream.write_all(&size.to_be_bytes()).await?;
    stream.write_all(frame).await?;
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        let size = stream.read_i32().await?;
        let mut body = vec![0; usize::try_from(size)?];
        stream.read_exact(&mut body).await?;
        anyhow::Ok(Bytes::from(body))
    })
    .await??;
    // The connection still serves: an ApiVersions v0 is answered.
    let probe = [0u8, 18, 0, 0, 0, 0, 0, 9, 0xff, 0xff];
    stream
        .write_all(&(probe.len() as i32).to_be_bytes())
        .await?;
    stream.write_all(&probe).await?;
    let size = stream.read_i32().await?;
    let mut rest = vec![0; usize::try_from(size)?];
    stream.read_exact(&mut rest).await?;
    Ok(answer)
}

#[tokio::test]
async fn every_request_real_clients_sent_is_answered_at_its_version() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = start(dir.path()).await;
    let captured = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/broker/captured");
    let mut files: Vec<_> = std::fs::read_dir(&captured)
        .expect("tests/broker/captured")
        .map(|e| e.expect("an entry").path())
        .collect();
    files.sort();
    assert!(files.len() > 50, "only {} captured requests", files.len());
    let mut failures = Vec::new();
    let mut apis = std::collections::BTreeSet::new();
    for path in &files {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let frame = std::fs::read(path).expect("a captured frame");
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let Ok(api) = ApiKey::try_from(key) else {
            failures.push(format!("{name}: API key {key} is not Kafka's"));
            continue;
        };
        apis.insert(format!("{api:?} v{version}"));
        // An ApiVersions newer than the broker's is answered in v0 with UNSUPPORTED_VERSION and
        // the ranges, as Kafka does, so the client retries lower.
        let newer_api_versions =
            api == ApiKey::ApiVersions && version > ApiVersionsResponse::VERSIONS.max;
        let outcome = replay(&running.address, &frame).await.and_then(|mut body| {
            let answered_at = if newer_api_versions { 0 } else { version };
            let header =
                ResponseHeader::decode(&mut body, api.response_header_version(answered_at))?;
            anyhow::ensure!(
                header.correlation_id == correlation,
                "correlation id {} for {correlation}",
                header.correlation_id
            );
            if newer_api_versions {
                let answer = ApiVersionsResponse::decode(&mut body, 0)?;
                anyhow::ensure!(
                    answer.error_code == ErrorCode::UNSUPPORTED_VERSION.0,
                    "error {}",
                    answer.error_code
                );
                anyhow::ensure!(!answer.api_keys.is_empty(), "no ranges");
            } else {
                decodes(api, version, &mut body)?;
            }
            anyhow::ensure!(
                !body.has_remaining(),
                "{} bytes left over",
                body.remaining()
            );
            Ok(())
        });
        if let Err(e) = outcome {
            failures.push(format!("{name} ({api:?} v{version}): {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    eprintln!("{} captured requests answered: {apis:?}", files.len());
    shut(running).await;
}
