//! The source cluster as a mirror sees it: bootstrap, metadata, one connection per broker
//! (reconnected on demand with exponential backoff), and the typed calls fetchers and the
//! metadata manager make.

use super::config::ClientConfig;
use super::connection::Connection;
use super::error::ClientError;
use super::fetch::{FetchSession, SessionKey, build_fetch, process_fetch};
use super::tls;
use crate::errors::ErrorCode;
use crate::messages::{LastMirroredEpochsRequest, last_mirrored_epochs_request};
use bytes::Bytes;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeAclsRequest, DescribeClusterRequest, DescribeConfigsRequest, FetchRequest,
    FindCoordinatorRequest, GroupId, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetFetchRequest, OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use uuid::Uuid;

pub use super::fetch::{
    AbortedTransaction, FetchPartitionSpec, FetchSpec, FetchedPartition, Isolation,
};

/// ListOffsets timestamp for the log start.
pub const EARLIEST: i64 = -2;
/// ListOffsets timestamp for the log end (the high watermark, or LSO when read committed).
pub const LATEST: i64 = -1;

/// One partition's LastMirroredEpochs answer: its LME (-1: none) or why its shard could not say.
pub type PartitionLme = Result<i32, ClientError>;

/// The error of a partition a LastMirroredEpochs answer leaves out: never "no LME" (-1), which
/// would copy the whole partition again.
pub fn lme_unanswered(topic: &str, partition: i32) -> ClientError {
    ClientError::Protocol {
        broker: "the source".into(),
        api: "LastMirroredEpochs",
        message: format!("no answer for partition {topic}-{partition}"),
    }
}

/// A partition in the source's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The index.
    pub partition: i32,
    /// The leader's broker id (-1 when offline).
    pub leader: i32,
    /// The leader epoch.
    pub leader_epoch: i32,
    /// The replicas.
    pub replicas: Vec<i32>,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
}

/// A topic in the source's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    /// The name.
    pub name: String,
    /// The topic id.
    pub topic_id: Uuid,
    /// Its partitions, by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// The source cluster's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// The cluster id.
    pub cluster_id: Option<String>,
    /// Brokers by id, as `host:port`.
    pub brokers: HashMap<i32, String>,
    /// Topics that exist, by name.
    pub topics: HashMap<String, TopicMetadata>,
    /// Topics the broker answered with an error instead (TOPIC_AUTHORIZATION_FAILED,
    /// LEADER_NOT_AVAILABLE, ...), by name: not in `topics`.
    pub refused: HashMap<String, ErrorCode>,
}

/// A config entry of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The key.
    pub name: String,
    /// The value (None when sensitive or unset).
    pub value: Option<String>,
    /// Kafka's config source (1 = dynamic topic config, 5 = static broker, 5/6 defaults...).
    pub source: i8,
    /// Whether the value is secret.
    pub sensitive: bool,
}

/// A consumer group of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// Its state (Empty, Stable, ...), as the broker names it.
    pub state: String,
    /// Its protocol type ("consumer" for consumer groups).
    pub protocol_type: String,
}

/// A committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The leader epoch committed with it, or -1.
    pub leader_epoch: i32,
    /// The commit's metadata string.
    pub metadata: Option<String>,
}

/// An ACL binding, with Kafka's numeric codes (resource type 2 = topic, 3 = group, 4 = cluster;
/// pattern 3 = literal, 4 = prefixed; operation 3 = read, 4 = write, ...; permission 3 = allow,
/// 2 = deny).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AclBinding {
    /// The resource type.
    pub resource_type: i8,
    /// The resource name.
    pub resource_name: String,
    /// The pattern type.
    pub pattern_type: i8,
    /// The principal, e.g. `User:alice`.
    pub principal: String,
    /// The host, `*` for any.
    pub host: String,
    /// The operation.
    pub operation: i8,
    /// Allow or deny.
    pub permission_type: i8,
}

struct Backoff {
    failures: u32,
    until: Instant,
}

/// What a new connection is made with: the config and the TLS setup built from it.
#[derive(Debug)]
struct Setup {
    config: ClientConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Setup {
    fn new(config: ClientConfig) -> Result<Setup, ClientError> {
        let tls = match (&config.truststore, config.security_protocol.uses_tls()) {
            (Some(truststore), true) => Some(tls::client_config(
                truststore,
                config.keystore.as_ref(),
                config.verify_hostname,
            )?),
            (None, true) => {
                return Err(ClientError::Config(
                    "TLS needs ssl.truststore.location or ssl.truststore.certificates".into(),
                ));
            }
            (_, false) => None,
        };
        Ok(Setup { config, tls })
    }
}

/// An open connection and the setup it was made with.
type MadeWith = (Arc<Setup>, Arc<Connection>);

/// A client of one source cluster.
#[derive(Debug)]
pub struct SourceClient {
    /// Swapped whole by [`SourceClient::reconfigure`]; each connection reads it once.
    setup: std::sync::RwLock<Arc<Setup>>,
    /// Open connections by address, each with the [`Setup`] it was made with (one made with
    /// a replaced setup is not used again).
    connections: Mutex<HashMap<String, MadeWith>>,
    backoff: std::sync::Mutex<HashMap<String, Backoff>>,
    brokers: std::sync::Mutex<HashMap<i32, String>>,
    sessions: std::sync::Mutex<HashMap<i32, FetchSession>>,
    /// For brokers below Fetch v12: the (current leader epoch, last fetched epoch) each
    /// partition's history was last checked at with OffsetForLeaderEpoch.
    checked_epochs: std::sync::Mutex<HashMap<SessionKey, (i32, i32)>>,
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failures", self.failures)
    }
}

/// Which broker a request goes to.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Any broker (metadata-like requests).
    Any,
    /// A partition leader.
    Broker(i32),
}

const RECONNECT_BACKOFF_MS: u64 = 50;
const RECONNECT_BACKOFF_MAX_MS: u64 = 5000;

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

impl SourceClient {
    /// Connects to the first reachable bootstrap server.
    pub async fn connect(config: ClientConfig) -> Result<SourceClient, ClientError> {
        let client = SourceClient::new(config)?;
        client.any_connection().await?;
        Ok(client)
    }

    /// A client that connects on first use (and reconnects with backoff after), so a mirror
    /// whose source is down can still be loaded; only a bad configuration fails here.
    pub fn new(config: ClientConfig) -> Result<SourceClient, ClientError> {
        let client = SourceClient {
            setup: std::sync::RwLock::new(Arc::new(Setup::new(config)?)),
            connections: Mutex::new(HashMap::new()),
            backoff: std::sync::Mutex::new(HashMap::new()),
            brokers: std::sync::Mutex::new(HashMap::new()),
            sessions: std::sync::Mutex::new(HashMap::new()),
            checked_epochs: std::sync::Mutex::new(HashMap::new()),
        };
        Ok(client)
    }

    fn setup(&self) -> Arc<Setup> {
        self.setup.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a changed config (new credentials, certificates, bootstrap servers) at once:
    /// connections open now are not used again, so the next request connects with it.
    /// Requests under way finish on the connections they hold. A config that cannot be set up
    /// changes nothing.
    pub fn reconfigure(&self, config: ClientConfig) -> Result<(), ClientError> {
        let setup = Arc::new(Setup::new(config)?);
        *self.setup.write().unwrap_or_else(|e| e.into_inner()) = setup;
        self.backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.brokers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    /// The connection to `address`, reconnecting when it broke (with exponential backoff between
    /// failed attempts).
    async fn connection(&self, address: &str) -> Result<Arc<Connection>, ClientError> {
        let setup = self.setup();
        let mut connections = self.connections.lock().await;
        if let Some((made_with, c)) = connections.get(address)
            && c.is_alive()
            && Arc::ptr_eq(made_with, &setup)
        {
            return Ok(c.clone());
        }
        connections.remove(address);
        let wait = self.backoff.lock().ok().and_then(|b| {
            b.get(address)
                .map(|b| b.until.saturating_duration_since(Instant::now()))
        });
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            tokio::time::sleep(wait).await;
        }
        match Connection::connect(address, &setup.config, setup.tls.clone()).await {
            Ok(c) => {
                let c = Arc::new(c);
                connections.insert(address.to_string(), (setup.clone(), c.clone()));
                if let Ok(mut b) = self.backoff.lock() {
                    b.remove(address);
                }
                Ok(c)
            }
            Err(e) => {
                if let Ok(mut b) = self.backoff.lock() {
                    let entry = b.entry(address.to_string()).or_insert(Backoff {
                        failures: 0,
                        until: Instant::now(),
                    });
                    entry.failures += 1;
                    let ms = (RECONNECT_BACKOFF_MS << entry.failures.min(10))
                        .min(RECONNECT_BACKOFF_MAX_MS);
                    entry.until = Instant::now() + Duration::from_millis(ms);
                }
                Err(e)
            }
        }
    }

    /// Any working connection: a known broker or a bootstrap server.
    async fn any_connection(&self) -> Result<Arc<Connection>, ClientError> {
        let mut candidates: Vec<String> = self
            .brokers
            .lock()
            .map(|b| b.values().cloned().collect())
            .unwrap_or_default();
        candidates.extend(self.setup().config.bootstrap_servers.iter().cloned());
        let mut last = None;
        for address in candidates {
            match self.connection(&address).await {
                Ok(c) => return Ok(c),
                // Credentials and certificates do not get better on another broker.
                Err(
                    e @ (ClientError::Authentication { .. }
                    | ClientError::Tls { .. }
                    | ClientError::Config(_)),
                ) => {
                    return Err(e);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Config("bootstrap.servers is empty".into())))
    }

    /// Sends `request` to `target`. A request that finds its connection broken (the broker
    /// restarted since it was opened) is sent once more on a new connection: every call here is
    /// a read, so repeating it is safe.
    async fn send_to<R: kafka_protocol::protocol::Request>(
        &self,
        target: Target,
        api: &'static str,
        request: &R,
        max_version: i16,
    ) -> Result<(i16, R::Response), ClientError> {
        let mut retried = false;
        loop {
            let connection = match target {
                Target::Any => self.any_connection().await?,
                Target::Broker(id) => self.broker(id).await?,
            };
            match connection.send(api, request, max_version).await {
                Err(ClientError::Connection { .. }) if !retried => {
                    retried = true;
                    self.connections.lock().await.remove(connection.broker());
                }
                other => return other,
            }
        }
    }

    /// The connection to broker `id`, from the last metadata (refreshed once when `id` is not
    /// in it, as right after connecting).
    pub async fn broker(&self, id: i32) -> Result<Arc<Connection>, ClientError> {
        let known =
            |client: &SourceClient| client.brokers.lock().ok().and_then(|b| b.get(&id).cloned());
        let address = match known(self) {
            Some(address) => address,
            None => {
                Box::pin(self.metadata(Some(&[]))).await?;
                known(self).ok_or_else(|| {
                    ClientError::NotFound(format!("broker {id} is not in the metadata"))
                })?
            }
        };
        self.connection(&address).await
    }

    /// Metadata for `topics` (all topics when `None`), with topic ids and leader epochs.
    pub async fn metadata(&self, topics: Option<&[&str]>) -> Result<ClusterMetadata, ClientError> {
        // A mirror only reads the source: asking about a topic must never create it there
        // (Kafka's default `auto.create.topics.enable` would).
        let request = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                    .collect()
            }));
        let (_, response) = self.send_to(Target::Any, "Metadata", &request, 12).await?;
        let brokers: HashMap<i32, String> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
            .collect();
        if let Ok(mut known) = self.brokers.lock() {
            *known = brokers.clone();
        }
        let mut out = HashMap::new();
        let mut refused = HashMap::new();
        for t in &response.topics {
            let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                refused.insert(name, ErrorCode(t.error_code));
                continue;
            }
            let mut partitions: Vec<PartitionMetadata> = t
                .partitions
                .iter()
                .map(|p| PartitionMetadata {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            out.insert(
                name.clone(),
                TopicMetadata {
                    name,
                    topic_id: t.topic_id,
                    partitions,
                },
            );
        }
        Ok(ClusterMetadata {
            cluster_id: response.cluster_id.map(|c| c.to_string()),
            brokers,
            topics: out,
            refused,
        })
    }

    /// The source cluster's id (DescribeCluster; Metadata on brokers without it).
    pub async fn cluster_id(&self) -> Result<String, ClientError> {
        match self
            .send_to(
                Target::Any,
                "DescribeCluster",
                &DescribeClusterRequest::default(),
                2,
            )
            .await
        {
            Ok((_, r)) if r.error_code == 0 => Ok(r.cluster_id.to_string()),
            Ok((_, r)) => Err(ClientError::Broker {
                api: "DescribeCluster",
                code: ErrorCode(r.error_code),
            }),
            Err(ClientError::UnsupportedVersion { .. }) => self
                .metadata(Some(&[]))
                .await?
                .cluster_id
                .ok_or_else(|| ClientError::NotFound("the source reports no cluster id".into())),
            Err(e) => Err(e),
        }
    }

    /// A consumer fetch (replica id -1) from broker `leader`.
    ///
    /// A partition whose history diverged from the leader's is answered with its diverging
    /// epoch and no records: by the broker from Fetch v12 on, and below v12 (which carries no
    /// last fetched epoch) by [`SourceClient::diverged_below_v12`] before the fetch.
    pub async fn fetch(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> Result<Vec<FetchedPartition>, ClientError> {
        let (spec, mut diverged) = self.diverged_below_v12(leader, spec).await?;
        if spec.partitions.is_empty() {
            return Ok(diverged);
        }
        let mut fetched = match self.fetch_in_session(leader, &spec).await {
            // The broker evicted or lost the session: start a new one with a full fetch.
            Err(ClientError::Broker { code, .. })
                if code == ErrorCode::FETCH_SESSION_ID_NOT_FOUND
                    || code == ErrorCode::INVALID_FETCH_SESSION_EPOCH =>
            {
                self.fetch_in_session(leader, &spec).await
            }
            other => other,
        }?;
        fetched.append(&mut diverged);
        Ok(fetched)
    }

    /// Divergence for brokers below Fetch v12, as Kafka's replica fetcher finds it there: an
    /// OffsetForLeaderEpoch for the last fetched epoch, asked again whenever the partition's
    /// current leader epoch or last fetched epoch changed. The leader's answer (the greatest
    /// epoch not above it and where that ends) shows a divergence when it names an older epoch
    /// or ends before the fetch offset; such a partition is answered here as a v12 broker
    /// would (its diverging epoch, no records) and left out of the Fetch. Returns the spec
    /// still to fetch and those answers; from v12 on, the spec unchanged.
    async fn diverged_below_v12(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> Result<(FetchSpec, Vec<FetchedPartition>), ClientError> {
        let connection = self.broker(leader).await?;
        if connection.version_of::<FetchRequest>().unwrap_or(0) >= 12 {
            return Ok((spec.clone(), Vec::new()));
        }
        let mut rest = spec.clone();
        rest.partitions.clear();
        let mut diverged = Vec::new();
        for p in &spec.partitions {
            let key = (p.topic_id, p.topic.clone(), p.partition);
            let epochs = (p.current_leader_epoch, p.last_fetched_epoch);
            let checked = self
                .checked_epochs
                .lock()
                .ok()
                .and_then(|c| c.get(&key).copied());
            if p.last_fetched_epoch < 0 || checked == Some(epochs) {
                rest.partitions.push(p.clone());
                continue;
            }
            let answer = |error, diverging_epoch| FetchedPartition {
                topic_id: p.topic_id,
                topic: p.topic.clone(),
                partition: p.partition,
                error,
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                records: Bytes::new(),
                aborted_transactions: Vec::new(),
                diverging_epoch,
                current_leader: None,
            };
            match self
                .offset_for_leader_epoch(
                    leader,
                    &p.topic,
                    p.partition,
                    p.current_leader_epoch,
                    p.last_fetched_epoch,
                )
                .await
            {
                Ok((epoch, end_offset))
                    if epoch == p.last_fetched_epoch && end_offset >= p.offset =>
                {
                    if let Ok(mut c) = self.checked_epochs.lock() {
                        c.insert(key, epochs);
                    }
                    rest.partitions.push(p.clone());
                }
                Ok((epoch, end_offset)) => {
                    diverged.push(answer(ErrorCode::NONE, Some((epoch, end_offset))));
                }
                Err(ClientError::Broker { code, .. }) => diverged.push(answer(code, None)),
                Err(e) => return Err(e),
            }
        }
        Ok((rest, diverged))
    }

    /// The fetch session held with `leader`, as (session id, next epoch), if any.
    pub fn fetch_session(&self, leader: i32) -> Option<(i32, i32)> {
        self.sessions
            .lock()
            .ok()?
            .get(&leader)
            .map(|s| (s.id, s.epoch))
    }

    /// One fetch within the incremental fetch session (KIP-227) this client keeps with
    /// `leader`: the first fetch is full and asks for a session; later ones list only the
    /// partitions whose position changed and forget the ones no longer asked for, and the
    /// answer holds only partitions with news. A broker that grants no session gets full
    /// fetches. A session is taken out while its fetch runs, so a concurrent fetch to the same
    /// broker simply goes without one, and one whose fetch failed is gone. The request and the
    /// next session are made by [`build_fetch`] and [`process_fetch`]; only the sending is here.
    async fn fetch_in_session(
        &self,
        leader: i32,
        spec: &FetchSpec,
    ) -> Result<Vec<FetchedPartition>, ClientError> {
        let connection = self.broker(leader).await?;
        let version = connection.version_of::<FetchRequest>().ok_or_else(|| {
            ClientError::UnsupportedVersion {
                broker: connection.broker().to_string(),
                api: "Fetch",
            }
        })?;
        let session = self
            .sessions
            .lock()
            .ok()
            .and_then(|mut s| s.remove(&leader));
        let (request, asked) = build_fetch(session.as_ref(), spec, version);
        let (_, response) = self
            .send_to(Target::Broker(leader), "Fetch", &request, version)
            .await?;
        let (fetched, next) = process_fetch(response, asked)?;
        if let Some(next) = next
            && let Ok(mut sessions) = self.sessions.lock()
        {
            sessions.insert(leader, next);
        }
        Ok(fetched)
    }

    /// ListOffsets for one partition: `timestamp` is [`EARLIEST`], [`LATEST`] or a time in ms.
    /// Returns the offset and its leader epoch.
    pub async fn list_offsets(
        &self,
        leader: i32,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: Isolation,
    ) -> Result<(i64, i32), ClientError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_isolation_level(if isolation == Isolation::ReadCommitted {
                1
            } else {
                0
            })
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp),
                    ]),
            ]);
        let (_, response) = self
            .send_to(Target::Broker(leader), "ListOffsets", &request, 9)
            .await?;
        let p = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| {
                ClientError::NotFound(format!("{topic}-{partition} missing from ListOffsets"))
            })?;
        if p.error_code != 0 {
            return Err(ClientError::Broker {
                api: "ListOffsets",
                code: ErrorCode(p.error_code),
            });
        }
        Ok((p.offset, p.leader_epoch))
    }

    /// OffsetForLeaderEpoch (consumer form): where `leader_epoch` ends on the leader. Returns the
    /// greatest epoch not above it and its end offset (`(-1, -1)` when unknown).
    pub async fn offset_for_leader_epoch(
        &self,
        leader: i32,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64), ClientError> {
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(topic_name(topic))
                    .with_partitions(vec![
                        OffsetForLeaderPartition::default()
                            .with_partition(partition)
                            .with_current_leader_epoch(current_leader_epoch)
                            .with_leader_epoch(leader_epoch),
                    ]),
            ]);
        let (_, response) = self
            .send_to(Target::Broker(leader), "OffsetForLeaderEpoch", &request, 4)
            .await?;
        let p = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| {
                ClientError::NotFound(format!(
                    "{topic}-{partition} missing from OffsetForLeaderEpoch"
                ))
            })?;
        if p.error_code != 0 {
            return Err(ClientError::Broker {
                api: "OffsetForLeaderEpoch",
                code: ErrorCode(p.error_code),
            });
        }
        Ok((p.leader_epoch, p.end_offset))
    }

    /// The configs of a topic.
    pub async fn describe_topic_configs(
        &self,
        topic: &str,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.to_string()))
                .with_configuration_keys(None),
        ]);
        let (_, response) = self
            .send_to(Target::Any, "DescribeConfigs", &request, 4)
            .await?;
        let result = response.results.into_iter().next().ok_or_else(|| {
            ClientError::NotFound(format!("topic {topic} missing from DescribeConfigs"))
        })?;
        if result.error_code != 0 {
            return Err(ClientError::Broker {
                api: "DescribeConfigs",
                code: ErrorCode(result.error_code),
            });
        }
        Ok(result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: c.config_source,
                sensitive: c.is_sensitive,
            })
            .collect())
    }

    /// The ids of the cluster's brokers.
    async fn broker_ids(&self) -> Result<Vec<i32>, ClientError> {
        Ok(self
            .metadata(Some(&[]))
            .await?
            .brokers
            .keys()
            .copied()
            .collect())
    }

    /// LastMirroredEpochs (kmirror sources only): the LME per partition the source recorded when
    /// it stopped mirroring from `asking_cluster_id`, in the order asked; a source without the
    /// API (Apache Kafka) means "no LME", -1 for every partition. A partition whose shard could
    /// not answer is its own error, so one partition's shard does not fail the others.
    pub async fn last_mirrored_epochs(
        &self,
        asking_cluster_id: &str,
        topic: &str,
        topic_id: Uuid,
        partitions: &[i32],
    ) -> Result<Vec<PartitionLme>, ClientError> {
        let request = LastMirroredEpochsRequest {
            cluster_id: asking_cluster_id.to_string(),
            topics: vec![last_mirrored_epochs_request::Topic {
                name: topic.to_string(),
                topic_id,
                partitions: partitions.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        };
        // Any broker answers: it reads each partition's shard wherever that shard is led.
        let response = match self
            .send_to(Target::Any, "LastMirroredEpochs", &request, 0)
            .await
        {
            Ok((_, r)) => r,
            // A cluster that cannot mirror never mirrored from us.
            Err(ClientError::UnsupportedVersion { .. }) => {
                return Ok(vec![Ok(-1); partitions.len()]);
            }
            Err(e) => return Err(e),
        };
        let failed = |code: i16| ClientError::Broker {
            api: "LastMirroredEpochs",
            code: ErrorCode(code),
        };
        if response.error_code != 0 {
            return Err(failed(response.error_code));
        }
        let mut answers: HashMap<i32, PartitionLme> = HashMap::new();
        for p in response.topics.iter().flat_map(|t| t.partitions.iter()) {
            // A shard that could not answer yet is no answer: never read it as "none" (-1),
            // which would copy the whole partition again.
            let answer = match p.error_code {
                0 => Ok(p.last_mirrored_epoch),
                code => Err(failed(code)),
            };
            answers.insert(p.partition_index, answer);
        }
        // A partition the answer leaves out is unanswered, not "none", for the same reason.
        Ok(partitions
            .iter()
            .map(|p| {
                answers
                    .remove(p)
                    .unwrap_or_else(|| Err(lme_unanswered(topic, *p)))
            })
            .collect())
    }

    /// Every group of the source (ListGroups on every broker: each lists the groups it
    /// coordinates).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>, ClientError> {
        let mut groups = Vec::new();
        for broker in self.broker_ids().await? {
            let (_, response) = self
                .send_to(
                    Target::Broker(broker),
                    "ListGroups",
                    &ListGroupsRequest::default(),
                    5,
                )
                .await?;
            if response.error_code != 0 {
                return Err(ClientError::Broker {
                    api: "ListGroups",
                    code: ErrorCode(response.error_code),
                });
            }
            groups.extend(response.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                state: g.group_state.to_string(),
                protocol_type: g.protocol_type.to_string(),
            }));
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(groups)
    }

    /// The committed offsets of `group` (FindCoordinator, then OffsetFetch to the coordinator).
    pub async fn committed_offsets(
        &self,
        group: &str,
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        // Version 3 at most: one key per request, answered in the top-level fields.
        let find = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0);
        let (_, found) = self
            .send_to(Target::Any, "FindCoordinator", &find, 3)
            .await?;
        let (error, coordinator) = (found.error_code, found.node_id.0);
        if error != 0 {
            return Err(ClientError::Broker {
                api: "FindCoordinator",
                code: ErrorCode(error),
            });
        }
        // Versions 1-7 carry one group and answer for all its topics when topics is null.
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(None);
        let (_, response) = self
            .send_to(Target::Broker(coordinator), "OffsetFetch", &request, 7)
            .await?;
        if response.error_code != 0 {
            return Err(ClientError::Broker {
                api: "OffsetFetch",
                code: ErrorCode(response.error_code),
            });
        }
        let mut out = Vec::new();
        for t in response.topics {
            for p in t.partitions {
                if p.error_code != 0 || p.committed_offset < 0 {
                    continue;
                }
                out.push(CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.map(|m| m.to_string()),
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// Every ACL binding of the source (DescribeAcls matching anything).
    pub async fn describe_acls(&self) -> Result<Vec<AclBinding>, ClientError> {
        const ANY: i8 = 1;
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(ANY)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(ANY)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY);
        let (_, response) = self
            .send_to(Target::Any, "DescribeAcls", &request, 3)
            .await?;
        if response.error_code != 0 {
            return Err(ClientError::Broker {
                api: "DescribeAcls",
                code: ErrorCode(response.error_code),
            });
        }
        let mut out: Vec<AclBinding> = response
            .resources
            .into_iter()
            .flat_map(|r| {
                r.acls.into_iter().map(move |a| AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                })
            })
            .collect();
        out.sort();
        Ok(out)
    }
}
