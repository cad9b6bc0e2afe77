//! The Apache Kafka source of the tests (started by `scripts/kafka-local.sh`; scripts/test.sh
//! exports `KMIRROR_KAFKA_*`): a patient client, its partitions' last stable offsets, and the
//! bytes of its segment files.

use kmirror_protocol::client::source::LATEST;
use kmirror_protocol::client::{ClientConfig, Isolation, SourceClient};
use kmirror_protocol::kafka_tools::kafka_env;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The bytes of the first segment file of partition `partition` of `topic` in Kafka's data
/// directory (`KMIRROR_KAFKA_DATA`).
pub fn segment(topic: &str, partition: i32) -> Vec<u8> {
    let path = PathBuf::from(kafka_env("KMIRROR_KAFKA_DATA"))
        .join("logs")
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A client of the source cluster, patient with a loaded machine.
pub async fn source_client(bootstrap: &str) -> Arc<SourceClient> {
    let mut config = ClientConfig::plaintext(bootstrap);
    config.request_timeout = Duration::from_secs(15);
    Arc::new(SourceClient::connect(config).await.expect("connects"))
}

/// The source's last stable offsets of `topic`'s partitions.
pub async fn source_ends(source: &SourceClient, topic: &str, partitions: i32) -> Vec<i64> {
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
