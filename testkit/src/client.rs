//! Kafka clients over the raw protocol (no JVM per cycle): topic creation, an idempotent and a
//! transactional producer that record what the broker acknowledged, ListOffsets, and a reader
//! that fetches a partition back record by record.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, CreateTopicsRequest, EndTxnRequest, InitProducerIdRequest,
    ListOffsetsRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{
    ClientConfig, FetchPartitionSpec, FetchSpec, Isolation, SourceClient,
};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// How long any one request may take before its outcome counts as unknown.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A record the broker acknowledged (acks=-1): where it is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// What became of one produce.
#[derive(Debug)]
pub enum Outcome {
    /// Written at these offsets.
    Acked(Vec<Acked>),
    /// The broker answered with this error code: nothing written.
    Refused(i16),
    /// No answer (connection lost, timeout): written or not.
    Unknown(String),
}

async fn within<T, E: std::fmt::Display>(
    what: &str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {REQUEST_TIMEOUT:?}")),
    }
}

async fn connect(address: &str) -> Result<Connection, String> {
    within(
        "connect",
        Connection::connect(address, &ClientConfig::plaintext(address), None),
    )
    .await
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// CreateTopics of `topic` with `partitions`, one replica each; the topic's error code.
pub async fn create_topic(address: &str, topic: &str, partitions: i32) -> Result<i16, String> {
    create_replicated_topic(address, topic, partitions, 1).await
}

/// CreateTopics of `topic` with `partitions` of `replication_factor` replicas; the topic's
/// error code.
pub async fn create_replicated_topic(
    address: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
) -> Result<i16, String> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(name(topic)))
                .with_num_partitions(partitions)
                .with_replication_factor(replication_factor),
        ]);
    let connection = connect(address).await?;
    let (_, answer) = within("CreateTopics", connection.send("CreateTopics", &request, 7)).await?;
    Ok(answer.topics[0].error_code)
}

/// The log end offset (`committed` false) or last stable offset of `topic`-`partition`.
pub async fn end_offset(
    address: &str,
    topic: &str,
    partition: i32,
    committed: bool,
) -> Result<i64, String> {
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_isolation_level(i8::from(committed))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(partition)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(-1),
                ]),
        ]);
    let connection = connect(address).await?;
    let (_, answer) = within("ListOffsets", connection.send("ListOffsets", &request, 7)).await?;
    let p = &answer.topics[0].partitions[0];
    if p.error_code != 0 {
        return Err(format!("ListOffsets: error {}", p.error_code));
    }
    Ok(p.offset)
}

/// An idempotent batch as sent, to send again verbatim from elsewhere.
#[derive(Debug, Clone)]
pub struct Sent {
    pub topic: String,
    pub partition: i32,
    pub batch: Bytes,
    /// Where the broker that acknowledged it put it.
    pub base_offset: i64,
    pub producer: (i64, i16, i32),
}

/// Sends `sent.batch` again, as its producer would retry it, to the broker at `address` (no
/// InitProducerId: the producer id, epoch and sequence are the original ones).
pub async fn resend(address: &str, sent: &Sent) -> Outcome {
    let connection = match connect(address).await {
        Ok(c) => c,
        Err(e) => return Outcome::Unknown(e),
    };
    let request = produce_request(&sent.topic, sent.partition, sent.batch.clone(), None);
    match within("Produce", connection.send("Produce", &request, 11)).await {
        Ok((_, response)) => {
            let p = &response.responses[0].partition_responses[0];
            if p.error_code == 0 {
                Outcome::Acked(vec![Acked {
                    partition: sent.partition,
                    offset: p.base_offset,
                    value: "(resent batch)".into(),
                }])
            } else {
                Outcome::Refused(p.error_code)
            }
        }
        Err(e) => Outcome::Unknown(e),
    }
}

fn produce_request(
    topic: &str,
    partition: i32,
    batch: Bytes,
    transactional_id: Option<&str>,
) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_transactional_id(transactional_id.map(|t| TransactionalId(name(t))))
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(name(topic)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch)),
                ]),
        ])
}

/// A producer over one connection: idempotent, or transactional with `transactional_id`.
/// Any request without an answer drops the connection and the producer id, so the next use
/// starts over with InitProducerId (for a transactional id that fences and aborts whatever
/// the lost one left open).
#[derive(Debug)]
pub struct Producer {
    address: String,
    transactional_id: Option<String>,
    session: Option<(Connection, i64, i16)>,
    sequences: BTreeMap<(String, i32), i32>,
    /// Partitions added to the open transaction.
    in_txn: Vec<(String, i32)>,
    /// The last batch acknowledged.
    pub last: Option<Sent>,
}

impl Producer {
    pub fn idempotent(address: &str) -> Producer {
        Producer::new(address, None)
    }

    pub fn transactional(address: &str, transactional_id: &str) -> Producer {
        Producer::new(address, Some(transactional_id.to_string()))
    }

    fn new(address: &str, transactional_id: Option<String>) -> Producer {
        Producer {
            address: address.to_string(),
            transactional_id,
            session: None,
            sequences: BTreeMap::new(),
            in_txn: Vec::new(),
            last: None,
        }
    }

    /// Forgets the connection and producer id.
    pub fn reset(&mut self) {
        self.session = None;
        self.sequences.clear();
        self.in_txn.clear();
    }

    async fn session(&mut self) -> Result<&(Connection, i64, i16), String> {
        if self.session.is_none() {
            let connection = connect(&self.address).await?;
            let (pid, epoch) =
                init_producer_id(&connection, self.transactional_id.as_deref()).await?;
            self.sequences.clear();
            self.in_txn.clear();
            self.session = Some((connection, pid, epoch));
        }
        Ok(self.session.as_ref().expect("just set"))
    }

    /// Starts over with InitProducerId, which for a transactional id fences the previous
    /// producer and aborts the transaction it left open.
    pub async fn fence(&mut self) -> Result<(), String> {
        self.reset();
        let result = self.session().await.map(|_| ());
        if result.is_err() {
            self.reset();
        }
        result
    }

    /// Whether a transaction is open (partitions were added to it).
    pub fn in_transaction(&self) -> bool {
        !self.in_txn.is_empty()
    }

    /// Adds `topic`'s `partitions` to the transaction (transactional producers only).
    pub async fn add_partitions(&mut self, topic: &str, partitions: &[i32]) -> Result<(), String> {
        let txn = self
            .transactional_id
            .clone()
            .expect("a transactional producer");
        let result = async {
            let (connection, pid, epoch) = self.session().await?;
            let request = AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(name(&txn)))
                .with_v3_and_below_producer_id(ProducerId(*pid))
                .with_v3_and_below_producer_epoch(*epoch)
                .with_v3_and_below_topics(vec![
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(name(topic)))
                        .with_partitions(partitions.to_vec()),
                ]);
            let (_, added) = within(
                "AddPartitionsToTxn",
                connection.send("AddPartitionsToTxn", &request, 3),
            )
            .await?;
            for p in added
                .results_by_topic_v3_and_below
                .iter()
                .flat_map(|t| t.results_by_partition.iter())
            {
                if p.partition_error_code != 0 {
                    return Err(format!(
                        "AddPartitionsToTxn: partition {} error {}",
                        p.partition_index, p.partition_error_code
                    ));
                }
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => {
                self.in_txn
                    .extend(partitions.iter().map(|p| (topic.to_string(), *p)));
                Ok(())
            }
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    /// Ends the open transaction; Ok(()) only when the broker answered without error.
    pub async fn end(&mut self, commit: bool) -> Result<(), String> {
        let txn = self
            .transactional_id
            .clone()
            .expect("a transactional producer");
        let result = async {
            let (connection, pid, epoch) = self.session().await?;
            let request = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(name(&txn)))
                .with_producer_id(ProducerId(*pid))
                .with_producer_epoch(*epoch)
                .with_committed(commit);
            let (_, ended) = within("EndTxn", connection.send("EndTxn", &request, 3)).await?;
            if ended.error_code != 0 {
                return Err(format!("EndTxn: error {}", ended.error_code));
            }
            Ok(())
        }
        .await;
        self.in_txn.clear();
        if result.is_err() {
            self.reset();
        }
        result
    }

    /// Produces `values` as one batch to `topic`-`partition` with acks=-1.
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[String],
        compression: Compression,
    ) -> Outcome {
        let transactional = self.transactional_id.is_some();
        let (pid, epoch) = match self.session().await {
            Ok((_, pid, epoch)) => (*pid, *epoch),
            Err(e) => {
                self.reset();
                return Outcome::Unknown(e);
            }
        };
        let key = (topic.to_string(), partition);
        let sequence = *self.sequences.get(&key).unwrap_or(&0);
        let batch = encode_batch((pid, epoch, sequence), transactional, values, compression);
        let request = produce_request(
            topic,
            partition,
            batch.clone(),
            self.transactional_id.as_deref(),
        );
        let (connection, _, _) = self.session.as_ref().expect("a session");
        let answer = within("Produce", connection.send("Produce", &request, 11)).await;
        match answer {
            Ok((_, response)) => {
                let p = &response.responses[0].partition_responses[0];
                if p.error_code == 0 {
                    self.sequences.insert(key, sequence + values.len() as i32);
                    self.last = Some(Sent {
                        topic: topic.to_string(),
                        partition,
                        batch,
                        base_offset: p.base_offset,
                        producer: (pid, epoch, sequence),
                    });
                    Outcome::Acked(
                        values
                            .iter()
                            .enumerate()
                            .map(|(i, v)| Acked {
                                partition,
                                offset: p.base_offset + i as i64,
                                value: v.clone(),
                            })
                            .collect(),
                    )
                } else {
                    // The sequence is not consumed by a refused batch, but the producer state
                    // of a refusing broker is not worth trusting: start over.
                    self.reset();
                    Outcome::Refused(p.error_code)
                }
            }
            Err(e) => {
                self.reset();
                Outcome::Unknown(e)
            }
        }
    }
}

/// InitProducerId over `connection`: a producer id and epoch (for `transactional_id`, fencing
/// the previous producer of that id).
async fn init_producer_id(
    connection: &Connection,
    transactional_id: Option<&str>,
) -> Result<(i64, i16), String> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(name(t))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let (_, init) = within(
        "InitProducerId",
        connection.send("InitProducerId", &request, 4),
    )
    .await?;
    if init.error_code != 0 {
        return Err(format!("InitProducerId: error {}", init.error_code));
    }
    Ok((init.producer_id.0, init.producer_epoch))
}

/// One batch of `values` from producer (id, epoch, first sequence), keys `k0`, `k1`, ...
fn encode_batch(
    (pid, epoch, sequence): (i64, i16, i32),
    transactional: bool,
    values: &[String],
    compression: Compression,
) -> Bytes {
    // Now, not a fixed instant: a broker's time retention (7 days by default) deletes the
    // segments of older records, and a long-lived Kafka source did so in the middle of a run.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            partition_leader_epoch: -1,
            producer_id: pid,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence + i as i32,
            timestamp: now + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(v.clone())),
            headers: Default::default(),
            delete_horizon: false,
        })
        .collect();
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("kafka-protocol encodes a well-formed record list");
    batch.freeze()
}

/// An idempotent producer that retries as Kafka's does: a batch keeps its producer id, epoch
/// and sequence however often it is sent ([`resend`]), to whichever broker leads its partition
/// by then, so a write whose answer was lost lands once.
#[derive(Debug)]
pub struct RetryingProducer {
    pid: i64,
    epoch: i16,
    sequences: BTreeMap<(String, i32), i32>,
}

impl RetryingProducer {
    /// A producer id from the broker at `address`.
    pub async fn init(address: &str) -> Result<RetryingProducer, String> {
        let connection = connect(address).await?;
        let (pid, epoch) = init_producer_id(&connection, None).await?;
        Ok(RetryingProducer {
            pid,
            epoch,
            sequences: BTreeMap::new(),
        })
    }

    /// A producer writing as producer id `pid`, epoch `epoch`, whoever allocated it (to make
    /// two clusters' producer ids meet).
    pub fn with_id(pid: i64, epoch: i16) -> RetryingProducer {
        RetryingProducer {
            pid,
            epoch,
            sequences: BTreeMap::new(),
        }
    }

    /// The next batch of `values` for `topic`-`partition` (its sequence numbers taken), to send
    /// with [`resend`] until a broker acknowledges it.
    pub fn batch(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[String],
        compression: Compression,
    ) -> Sent {
        let sequence = self
            .sequences
            .entry((topic.to_string(), partition))
            .or_insert(0);
        let first = *sequence;
        *sequence += values.len() as i32;
        Sent {
            topic: topic.to_string(),
            partition,
            batch: encode_batch((self.pid, self.epoch, first), false, values, compression),
            base_offset: -1,
            producer: (self.pid, self.epoch, first),
        }
    }
}

/// Every data record of `topic`-`partition` at `address` (READ_UNCOMMITTED), by offset, read
/// with Fetch; control records are left out.
pub async fn read_back(
    address: &str,
    topic: &str,
    partition: i32,
) -> Result<BTreeMap<i64, String>, String> {
    let mut config = ClientConfig::plaintext(address);
    config.request_timeout = REQUEST_TIMEOUT;
    let client = within("connect", SourceClient::connect(config)).await?;
    let metadata = within("Metadata", client.metadata(Some(&[topic]))).await?;
    let t = metadata
        .topics
        .get(topic)
        .ok_or_else(|| format!("{topic} is not in the metadata"))?;
    let p = t
        .partitions
        .get(partition as usize)
        .ok_or_else(|| format!("{topic}-{partition} is not in the metadata"))?;
    let mut offset = 0;
    let mut out = BTreeMap::new();
    loop {
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: topic.to_string(),
                topic_id: t.topic_id,
                partition,
                offset,
                current_leader_epoch: p.leader_epoch,
                last_fetched_epoch: -1,
                max_bytes: 1 << 20,
            }],
            isolation: Isolation::ReadUncommitted,
            max_wait_ms: 10,
            min_bytes: 1,
            max_bytes: 1 << 20,
        };
        let mut answer = within("Fetch", client.fetch(p.leader, &spec)).await?;
        let answer = answer.pop().ok_or("an empty Fetch answer")?;
        if answer.error.0 != 0 {
            return Err(format!("Fetch at {offset}: error {}", answer.error.0));
        }
        let before = offset;
        for batch in RecordBatches::new(answer.records) {
            let batch = batch.map_err(|e| format!("a bad batch at {offset}: {e}"))?;
            offset = batch.next_offset();
            if batch.is_control() {
                continue;
            }
            let mut bytes = batch.as_bytes().clone();
            let set = RecordBatchDecoder::decode(&mut bytes)
                .map_err(|e| format!("undecodable batch at {}: {e}", batch.base_offset()))?;
            for r in set.records {
                let value = r
                    .value
                    .map(|v| String::from_utf8_lossy(&v).into_owned())
                    .unwrap_or_default();
                out.insert(r.offset, value);
            }
        }
        if offset == before {
            return Ok(out);
        }
    }
}
