//! The fetcher's ports over this broker and a source client: one consumer Fetch to a source
//! broker covering many partitions (READ_COMMITTED, so data stops at the source LSO, with each
//! partition's `LastFetchedEpoch` so a diverged history is answered with a DivergingEpoch), and
//! each answer applied to the local partition log by [`kmirror_actors::host::apply_fetch`].
//!
//! A mirror partition is the local partition with the source topic's name. The destination
//! leader epoch of the DLE >= SLE rule is read from this broker's controller at apply time.

use super::cause;
use super::fetch_settings::FetchSettings;
use super::stats::MirrorStats;
use crate::broker::{Broker, now_ms};
use actix::{Message, Recipient};
use dashmap::DashMap;
use kmirror_actors::actor::{FetchAnswers, FetchKey, FetcherPorts, PortFuture};
use kmirror_actors::host::{self, FetchProgress, FetchRequest, FetchResponse, HostError};
use kmirror_actors::partition::Cause;
use kmirror_protocol::client::FetchedPartition;
use kmirror_protocol::client::source::EARLIEST;
use kmirror_protocol::client::{FetchPartitionSpec, FetchSpec, Isolation, SourceClient};
use kmirror_protocol::errors::{ErrorClass, ErrorCode};
use std::sync::Arc;
use uuid::Uuid;

const OFFSET_OUT_OF_RANGE: ErrorCode = ErrorCode(1);

/// The ports of one fetcher: a source broker and this broker's logs.
#[derive(Debug, Clone)]
pub struct SourceFetcherPorts {
    broker: Arc<Broker>,
    source: Arc<SourceClient>,
    /// The source broker this fetcher reads from.
    leader: i32,
    stats: Arc<MirrorStats>,
    settings: FetchSettings,
    /// The source leader epoch of each partition, as its leader lookup found it (sent as
    /// `current_leader_epoch`, so a source whose leadership moved says so).
    epochs: SourceEpochs,
    /// Told of a partition whose source leader moved: it finds the new one and moves the
    /// partition to that broker's fetcher.
    moved: Option<Recipient<LeaderMoved>>,
    /// The source cluster id the mirror expects (once known): an answer from another cluster
    /// fails with that reason, never as deleted topics.
    source_cluster_id: SourceClusterId,
}

/// The cluster id a mirror's source must have: its `mirror.source.cluster.id`, or the one its
/// source first answered with.
pub type SourceClusterId = Arc<std::sync::OnceLock<String>>;

/// The source leader epochs of a mirror's partitions, shared by its pool and fetchers.
pub type SourceEpochs = Arc<DashMap<FetchKey, i32>>;

/// A partition's source leader moved (or is not known to be where it was fetched from).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct LeaderMoved(pub FetchKey);

impl SourceFetcherPorts {
    /// Ports fetching from source broker `leader` into `broker`'s logs as `settings` say,
    /// counting in `stats`; `epochs` holds the source leader epochs, and `moved` hears of
    /// partitions whose leader moved.
    pub fn new(
        broker: Arc<Broker>,
        source: Arc<SourceClient>,
        leader: i32,
        stats: Arc<MirrorStats>,
        settings: FetchSettings,
    ) -> Self {
        SourceFetcherPorts {
            broker,
            source,
            leader,
            stats,
            settings,
            epochs: SourceEpochs::default(),
            moved: None,
            source_cluster_id: SourceClusterId::default(),
        }
    }

    /// These ports within a pool: its leader epochs, where moved partitions go, and the source
    /// cluster id its mirror expects.
    pub fn in_pool(
        mut self,
        epochs: SourceEpochs,
        moved: Recipient<LeaderMoved>,
        source_cluster_id: SourceClusterId,
    ) -> Self {
        self.epochs = epochs;
        self.moved = Some(moved);
        self.source_cluster_id = source_cluster_id;
        self
    }

    fn topic_id(&self, topic: &str) -> Uuid {
        self.broker
            .topic(topic)
            .map(|t| t.topic_id)
            .unwrap_or_default()
    }
}

fn unknown(key: &FetchKey) -> Cause {
    Cause::fatal(format!(
        "{}-{} is not a partition of this broker",
        key.0, key.1
    ))
}

fn from_host(e: HostError) -> Cause {
    if e.retryable {
        Cause::retryable(e.message)
    } else {
        Cause::fatal(e.message)
    }
}

/// Errors that say the partition is not (or no longer) led by the broker fetched from, or not
/// at the leader epoch asked: a leader lookup heals them.
fn leader_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::FENCED_LEADER_EPOCH
            | ErrorCode::UNKNOWN_LEADER_EPOCH
            | ErrorCode::LEADER_NOT_AVAILABLE
            | ErrorCode::REPLICA_NOT_AVAILABLE
    )
}

/// One partition as a Fetch asked for it.
struct Asked {
    key: FetchKey,
    topic_id: Uuid,
    /// The source leader epoch sent as `current_leader_epoch`.
    source_leader_epoch: i32,
}

/// The partition asked for that an answer is about: answers name topics by id (Fetch v13+)
/// or by name, so both are matched.
fn asked_for<'a>(asked: &'a [Asked], p: &FetchedPartition) -> Option<&'a Asked> {
    asked.iter().find(|a| {
        a.key.1 == p.partition
            && ((!p.topic.is_empty() && p.topic == a.key.0)
                || (!a.topic_id.is_nil() && p.topic_id == a.topic_id))
    })
}

/// The source answers that it does not know a topic (by id or name) both while its metadata
/// propagates and once the topic is gone: asked again, a source without the topic, or with
/// another id under its name (deleted and created again), means the topic is gone for good.
/// The reason, by topic, for each such topic; a topic the source still has is left to retry.
async fn gone_topics(
    source: &SourceClient,
    source_cluster_id: &std::sync::OnceLock<String>,
    fetched: &[FetchedPartition],
    asked: &[Asked],
) -> std::collections::HashMap<String, String> {
    let unknown: std::collections::BTreeMap<&FetchKey, Uuid> = fetched
        .iter()
        .filter(|p| {
            matches!(
                p.error,
                ErrorCode::UNKNOWN_TOPIC_ID
                    | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                    | ErrorCode::INCONSISTENT_TOPIC_ID
            )
        })
        .filter_map(|p| asked_for(asked, p))
        .map(|a| (&a.key, a.topic_id))
        .collect();
    let mut gone = std::collections::HashMap::new();
    if unknown.is_empty() {
        return gone;
    }
    let names: Vec<&str> = unknown.keys().map(|(t, _)| t.as_str()).collect();
    let Ok(metadata) = source.metadata(Some(&names)).await else {
        return gone;
    };
    for ((topic, partition), id) in unknown {
        // A source that still has this topic (its metadata propagating) is left to retry.
        if let Err(cause) =
            super::source_topic::check(&metadata, source_cluster_id, topic, id, *partition)
        {
            gone.insert(topic.clone(), cause.message);
        }
    }
    gone
}

impl FetcherPorts for SourceFetcherPorts {
    fn next_fetch(&self, key: &FetchKey) -> Result<FetchRequest, Cause> {
        let partition = self
            .broker
            .partition(&key.0, key.1)
            .ok_or_else(|| unknown(key))?;
        let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        Ok(host::next_fetch(&*log, 0))
    }

    fn fetch(
        &self,
        requests: Vec<(FetchKey, FetchRequest)>,
    ) -> PortFuture<Result<FetchAnswers, Cause>> {
        let spec = FetchSpec {
            partitions: requests
                .iter()
                .map(|((topic, partition), request)| FetchPartitionSpec {
                    topic: topic.clone(),
                    topic_id: self.topic_id(topic),
                    partition: *partition,
                    offset: request.offset,
                    current_leader_epoch: self
                        .epochs
                        .get(&(topic.clone(), *partition))
                        .map_or(-1, |e| *e),
                    last_fetched_epoch: request.last_fetched_epoch,
                    max_bytes: i32::try_from(request.max_bytes).unwrap_or(i32::MAX),
                })
                .collect(),
            isolation: Isolation::ReadCommitted,
            max_wait_ms: self.settings.wait_max_ms,
            min_bytes: self.settings.min_bytes,
            max_bytes: self.settings.response_max_bytes,
        };
        let asked: Vec<Asked> = spec
            .partitions
            .iter()
            .map(|p| Asked {
                key: (p.topic.clone(), p.partition),
                topic_id: p.topic_id,
                source_leader_epoch: p.current_leader_epoch,
            })
            .collect();
        let source = self.source.clone();
        let leader = self.leader;
        let stats = self.stats.clone();
        let moved = self.moved.clone();
        let source_cluster_id = self.source_cluster_id.clone();
        Box::pin(async move {
            let fetched = match source.fetch(leader, &spec).await {
                Ok(fetched) => fetched,
                Err(e) => {
                    stats.fetch_failed(&e.to_string(), now_ms());
                    return Err(cause(&e));
                }
            };
            let bytes = fetched.iter().map(|p| p.records.len() as u64).sum();
            stats.fetched(bytes, now_ms());
            let gone = gone_topics(&source, &source_cluster_id, &fetched, &asked).await;
            let answers = fetched
                .into_iter()
                .filter_map(|p| {
                    // An answer for a partition not asked for is dropped, never misapplied.
                    let Some(a) = asked_for(&asked, &p) else {
                        tracing::warn!(topic = %p.topic, partition = p.partition, "a fetch answer for a partition not asked for");
                        return None;
                    };
                    let (key, source_leader_epoch) = (a.key.clone(), a.source_leader_epoch);
                    if let Some(reason) = gone.get(&key.0) {
                        return Some((key, Err(Cause::fatal(reason.clone()))));
                    }
                    // As Kafka's replica fetcher: the partition moves to its new leader's
                    // fetcher (after a fresh leader lookup, with a backoff), and stays
                    // MIRRORING. Nothing is applied from this answer.
                    if leader_moved(p.error)
                        && let Some(moved) = &moved
                    {
                        moved.do_send(LeaderMoved(key.clone()));
                        let nothing = FetchResponse::Records {
                            records: bytes::Bytes::new(),
                            high_watermark: -1,
                            source_leader_epoch: -1,
                        };
                        return Some((key, Ok(nothing)));
                    }
                    let answer = match (p.error, p.diverging_epoch) {
                        (ErrorCode::NONE, Some((epoch, end_offset))) => {
                            Ok(FetchResponse::Diverging { epoch, end_offset })
                        }
                        (ErrorCode::NONE, None) => Ok(FetchResponse::Records {
                            records: p.records,
                            high_watermark: p.high_watermark,
                            source_leader_epoch,
                        }),
                        // Answered where the source's log starts; found at apply time.
                        (OFFSET_OUT_OF_RANGE, _) => Ok(FetchResponse::OffsetOutOfRange {
                            log_start_offset: -1,
                        }),
                        (code, _) if code.class() == Some(ErrorClass::Fatal) => {
                            Err(Cause::fatal(format!("the source answered {code}")))
                        }
                        (code, _) => Err(Cause::retryable(format!("the source answered {code}"))),
                    };
                    Some((key, answer))
                })
                .collect();
            Ok(answers)
        })
    }

    fn apply(
        &self,
        key: &FetchKey,
        request: FetchRequest,
        response: FetchResponse,
    ) -> PortFuture<Result<FetchProgress, Cause>> {
        let broker = self.broker.clone();
        let source = self.source.clone();
        let leader = self.leader;
        let key = key.clone();
        let stats = self.stats.clone();
        let high_watermark = match &response {
            FetchResponse::Records { high_watermark, .. } => Some(*high_watermark),
            _ => None,
        };
        let topic_id = self.topic_id(&key.0);
        let source_cluster_id = self.source_cluster_id.clone();
        Box::pin(async move {
            // An answer that truncates the log is taken only from the topic this mirror copies
            // (a fetch by name, below Fetch v13, may have reached a topic created again).
            if matches!(
                response,
                FetchResponse::OffsetOutOfRange { .. } | FetchResponse::Diverging { .. }
            ) {
                super::source_topic::check_now(
                    &source,
                    &source_cluster_id,
                    &key.0,
                    topic_id,
                    key.1,
                )
                .await?;
            }
            // Both restart-at-the-source's-start cases need its log start, asked before the log
            // is locked.
            let needs_start = matches!(
                response,
                FetchResponse::OffsetOutOfRange { .. }
                    | FetchResponse::Diverging { epoch: ..0, .. }
            );
            let source_start = if needs_start {
                let (offset, _) = source
                    .list_offsets(leader, &key.0, key.1, EARLIEST, Isolation::ReadCommitted)
                    .await
                    .map_err(|e| cause(&e))?;
                Some(offset)
            } else {
                None
            };
            let response = match response {
                FetchResponse::OffsetOutOfRange { .. } => FetchResponse::OffsetOutOfRange {
                    log_start_offset: source_start.unwrap_or(0),
                },
                other => other,
            };
            let (partition, epoch) = broker
                .partition(&key.0, key.1)
                .zip(broker.leader_epoch(&key.0, key.1))
                .ok_or_else(|| unknown(&key))?;
            let progress = {
                let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
                let progress = host::apply_fetch(
                    &mut *log,
                    || {
                        source_start.ok_or_else(|| {
                            HostError::retryable("the source's log start is not known")
                        })
                    },
                    &request,
                    response,
                    epoch,
                )
                .inspect_err(|e| {
                    if !e.retryable {
                        stats.invariant_violated();
                    }
                })
                .map_err(from_host)?;
                if let Some(high_watermark) = high_watermark {
                    stats.lag(&key, high_watermark - log.log_end_offset());
                }
                progress
            };
            // Fetches waiting on this broker for new data care only when the log changed.
            if matches!(
                progress,
                FetchProgress::Appended { .. } | FetchProgress::Truncated
            ) {
                broker.notify_appended();
            }
            Ok(progress)
        })
    }
}
