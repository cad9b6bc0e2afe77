//! The fetchers' ports over the host and a source connection: one consumer Fetch to a source
//! broker covering many partitions (READ_COMMITTED, so data stops at the source LSO, with each
//! partition's `LastFetchedEpoch` so a diverged history is answered with a DivergingEpoch), and
//! each answer applied to the local partition log by [`crate::host::apply_fetch`] in one
//! [`Host::spawn_with_log`] call.
//!
//! Kafka's fetch error table is [`super::fetch_answer::classify`], pure; this shell carries its
//! actions out: an answer for a partition whose leader moved sends it to its new leader's
//! fetcher, and an unknown topic is looked up twice ([`gone_topics`]) before it fails the
//! partition.
//!
//! A mirror partition is the local partition with the source topic's name. The leader epochs
//! come with each call from the fetcher, which was told them: the source's (sent as
//! `current_leader_epoch`) by the pool's leader lookup, the destination's (of the DLE >= SLE
//! rule) by the partition's actor, its one owner; never read from the host.

use super::cause;
use super::fetch_answer::{FetchAction, classify};
use super::fetch_lanes::FetchLanes;
use super::fetch_settings::FetchSettings;
use super::gap_policy::{GAP_POLICY, GapPolicy};
use super::stats::MirrorStats;
use super::throttle::Throttle;
use crate::actor::{FetchEpochs, Fetched, FetcherPorts, PartitionFetch, PortFuture};
use crate::fetch_pacing::PacingReport;
use crate::host::{self, FetchProgress, FetchRequest, FetchResponse, Host, Source, TopicPartition};
use crate::partition::Cause;
use actix::{Message, Recipient};
use kmirror_protocol::batch::RecordBatches;
use kmirror_protocol::client::source::{ClusterMetadata, EARLIEST};
use kmirror_protocol::client::{
    ClientError, FetchPartitionSpec, FetchSpec, FetchedPartition, Isolation,
};
use kmirror_protocol::errors::ErrorCode;
use std::sync::Arc;
use uuid::Uuid;

/// The ports of one fetcher: a source broker and this broker's logs.
pub struct EngineFetcherPorts<H: Host> {
    host: H,
    /// The connections Fetches go on; lane 0 also asks everything else.
    lanes: Arc<FetchLanes<H>>,
    /// The source broker this fetcher reads from.
    leader: i32,
    stats: Arc<MirrorStats>,
    settings: FetchSettings,
    /// Told of a partition whose source leader moved: it finds the new one and moves the
    /// partition to that broker's fetcher.
    moved: Option<Recipient<LeaderMoved>>,
    /// The source cluster id the mirror expects (once known): an answer from another cluster
    /// fails with that reason, never as deleted topics.
    source_cluster_id: SourceClusterId,
    /// The mirror's pace on this broker, shared by its fetchers.
    throttle: Arc<Throttle>,
}

impl<H: Host> std::fmt::Debug for EngineFetcherPorts<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineFetcherPorts")
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

/// The cluster id a mirror's source must have: its `mirror.source.cluster.id`, or the one its
/// source first answered with.
pub type SourceClusterId = Arc<std::sync::OnceLock<String>>;

/// A partition's source leader moved (or is not known to be where it was fetched from).
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub struct LeaderMoved(pub TopicPartition);

impl<H: Host> EngineFetcherPorts<H> {
    /// Ports fetching from source broker `leader` on `lanes` into `host`'s logs as `settings`
    /// say, counting in `stats`.
    pub fn new(
        host: H,
        lanes: Arc<FetchLanes<H>>,
        leader: i32,
        stats: Arc<MirrorStats>,
        settings: FetchSettings,
    ) -> Self {
        EngineFetcherPorts {
            host,
            lanes,
            leader,
            stats,
            settings,
            moved: None,
            source_cluster_id: SourceClusterId::default(),
            throttle: Arc::new(Throttle::new(None)),
        }
    }

    /// These ports paced by `throttle` (unlimited otherwise).
    pub fn throttled(mut self, throttle: Arc<Throttle>) -> Self {
        self.throttle = throttle;
        self
    }

    /// These ports within a pool: where moved partitions go, and the source cluster id its
    /// mirror expects.
    pub fn in_pool(
        mut self,
        moved: Recipient<LeaderMoved>,
        source_cluster_id: SourceClusterId,
    ) -> Self {
        self.moved = Some(moved);
        self.source_cluster_id = source_cluster_id;
        self
    }

    fn topic_id(&self, topic: &str) -> Uuid {
        self.host
            .topic(topic)
            .map(|t| t.topic_id)
            .unwrap_or_default()
    }
}

/// One partition as a Fetch asked for it.
struct Asked {
    key: TopicPartition,
    /// Asked ahead of its log end: its answer says nothing of the partition's lag.
    ahead: bool,
    topic_id: Uuid,
    /// The source leader epoch sent as `current_leader_epoch`, when known.
    source_leader_epoch: Option<i32>,
    /// Where the fetch asked it from: the local log end.
    offset: i64,
}

/// The partition asked for that an answer is about: answers name topics by id (Fetch v13+)
/// or by name. Where both sides have an id, the id decides: an answer about another topic of
/// the same name (deleted and created again) is no answer to what was asked.
fn asked_for<'a>(asked: &'a [Asked], p: &FetchedPartition) -> Option<&'a Asked> {
    asked.iter().find(|a| {
        a.key.partition == p.partition
            && if !a.topic_id.is_nil() && !p.topic_id.is_nil() {
                p.topic_id == a.topic_id
            } else {
                !p.topic.is_empty() && p.topic == a.key.topic
            }
    })
}

/// The source answers that it does not know a topic (by id or name) both while its metadata
/// propagates and once the topic is gone: asked again, a source without the topic, or with
/// another id under its name (deleted and created again), means the topic is gone for good.
/// The reason, by topic, for each such topic; a topic the source still has is left to retry.
///
/// The fetcher waits for this, and so do the other topics it fetches: however many partitions
/// and topics are answered unknown, it costs one metadata lookup, and, only when that one finds
/// some gone, one wait of [`super::source_topic::CONFIRM_AFTER`] and one more lookup.
async fn gone_topics(
    source: &impl Source,
    source_cluster_id: &std::sync::OnceLock<String>,
    fetched: &[FetchedPartition],
    asked: &[Asked],
) -> std::collections::HashMap<String, String> {
    use super::source_topic::{CONFIRM_AFTER, check};
    let unknown: std::collections::BTreeMap<&TopicPartition, Uuid> = fetched
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
    let Some(first) = topics_metadata(source, unknown.keys().copied()).await else {
        return gone;
    };
    // A source that still has the topic (its metadata propagating) is left to retry.
    let fatal = |metadata: &ClusterMetadata, key: &TopicPartition, id: Uuid| {
        check(metadata, source_cluster_id, &key.topic, id, key.partition)
            .err()
            .filter(|cause| !cause.retryable)
    };
    let suspects: Vec<(&TopicPartition, Uuid)> = unknown
        .into_iter()
        .filter(|(key, id)| fatal(&first, key, *id).is_some())
        .collect();
    if suspects.is_empty() {
        return gone;
    }
    // A verdict stands only if a second lookup, a moment later, gives it too: a broker whose
    // metadata lags answers UNKNOWN_TOPIC_OR_PARTITION for a topic that exists.
    tokio::time::sleep(CONFIRM_AFTER).await;
    let Some(second) = topics_metadata(source, suspects.iter().map(|(key, _)| *key)).await else {
        return gone;
    };
    for (key, id) in suspects {
        if let Some(cause) = fatal(&second, key, id) {
            gone.entry(key.topic.clone()).or_insert(cause.message);
        }
    }
    gone
}

/// Whether the source has more of partition `p`, asked from `offset`, than its answer brought:
/// its last stable offset lies beyond the answer's last batch (or beyond `offset`, when the answer's
/// bytes went to other partitions). Batch headers only are read.
fn has_more(p: &FetchedPartition, offset: i64) -> bool {
    // READ_COMMITTED answers stop at the last stable offset.
    let limit = if p.last_stable_offset >= 0 {
        p.last_stable_offset
    } else {
        p.high_watermark
    };
    if p.error != ErrorCode::NONE || limit < 0 {
        return false;
    }
    let end = RecordBatches::new(p.records.clone())
        .map_while(Result::ok)
        .last()
        .map_or(offset, |b| b.next_offset());
    limit > end
}

/// The source's metadata of the topics of `partitions` (each named once); `None` when it does
/// not answer.
async fn topics_metadata<'a>(
    source: &impl Source,
    partitions: impl Iterator<Item = &'a TopicPartition>,
) -> Option<ClusterMetadata> {
    let mut names: Vec<&str> = partitions.map(|k| k.topic.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    source.metadata(Some(&names)).await.ok()
}

impl<H: Host> FetcherPorts for EngineFetcherPorts<H> {
    fn next_fetch(&self, key: &TopicPartition) -> Result<FetchRequest, Cause> {
        self.host.with_log(&key.topic, key.partition, |log| {
            Ok(host::next_fetch(log, 0))
        })
    }

    fn connect(&self, lane: usize) -> PortFuture<Result<Option<std::time::Duration>, Cause>> {
        let (lanes, leader) = (self.lanes.clone(), self.leader);
        Box::pin(async move {
            let source = lanes.lane(lane).map_err(|e| cause(&e))?;
            source.connect(leader).await.map_err(|e| cause(&e))
        })
    }

    fn fetch(
        &self,
        lane: usize,
        requests: Vec<PartitionFetch>,
        max_bytes: i32,
    ) -> PortFuture<Result<Fetched, Cause>> {
        let spec = FetchSpec {
            partitions: requests
                .iter()
                .map(|p| FetchPartitionSpec {
                    topic: p.key.topic.clone(),
                    topic_id: self.topic_id(&p.key.topic),
                    partition: p.key.partition,
                    offset: p.request.offset,
                    current_leader_epoch: p.current_leader_epoch,
                    last_fetched_epoch: p.request.last_fetched_epoch.unwrap_or(-1),
                    max_bytes: self.throttle.partition_bytes(
                        i32::try_from(p.request.max_bytes).unwrap_or(i32::MAX),
                        requests.len(),
                    ),
                })
                .collect(),
            isolation: Isolation::ReadCommitted,
            max_wait_ms: self.settings.wait_max_ms,
            min_bytes: self.settings.min_bytes,
            max_bytes: self.throttle.fetch_bytes(max_bytes),
        };
        let asked: Vec<Asked> = spec
            .partitions
            .iter()
            .zip(&requests)
            .map(|(p, r)| Asked {
                key: TopicPartition::new(p.topic.clone(), p.partition),
                ahead: r.ahead,
                topic_id: p.topic_id,
                source_leader_epoch: (p.current_leader_epoch >= 0)
                    .then_some(p.current_leader_epoch),
                offset: p.offset,
            })
            .collect();
        let lanes = self.lanes.clone();
        let leader = self.leader;
        let stats = self.stats.clone();
        let moved = self.moved.clone();
        let source_cluster_id = self.source_cluster_id.clone();
        let host = self.host.clone();
        let throttle = self.throttle.clone();
        Box::pin(async move {
            let waited = throttle.wait().await;
            if !waited.is_zero() {
                stats.throttled(waited);
            }
            let source = lanes.lane(lane).map_err(|e| cause(&e))?;
            let fetched = match source.fetch(leader, &spec).await {
                Ok(fetched) => fetched,
                Err(e) => {
                    stats.fetch_failed(&e.to_string(), host.now_ms());
                    // A leader that cannot be reached or does not answer may be gone for
                    // good, its partitions led by another broker now: they look their leader
                    // up again (after the pool's backoff, one lookup per topic), as a Kafka
                    // client refreshes its metadata on a disconnect.
                    if matches!(
                        e,
                        ClientError::Connection { .. } | ClientError::Timeout { .. }
                    ) && let Some(moved) = &moved
                    {
                        for a in &asked {
                            moved.do_send(LeaderMoved(a.key.clone()));
                        }
                    }
                    return Err(cause(&e));
                }
            };
            let bytes = fetched.iter().map(|p| p.records.len() as u64).sum();
            let backlog = fetched
                .iter()
                .any(|p| asked_for(&asked, p).is_some_and(|a| has_more(p, a.offset)));
            throttle.paid(bytes, tokio::time::Instant::now());
            let now_ms = host.now_ms();
            stats.fetched(bytes, now_ms);
            // An incremental fetch session leaves out the partitions with nothing new: one that
            // was caught up still is, as of this answer.
            let answered: std::collections::HashSet<(&str, i32)> = fetched
                .iter()
                .filter_map(|p| asked_for(&asked, p))
                .map(|a| (a.key.topic.as_str(), a.key.partition))
                .collect();
            for a in asked.iter().filter(|a| {
                !a.ahead && !answered.contains(&(a.key.topic.as_str(), a.key.partition))
            }) {
                stats.still_caught_up(&a.key, now_ms);
            }
            let source = lanes.first();
            let gone = gone_topics(&*source, &source_cluster_id, &fetched, &asked).await;
            let answers = fetched
                .into_iter()
                .filter_map(|p| {
                    // An answer for a partition not asked for is dropped, never misapplied.
                    let Some(a) = asked_for(&asked, &p) else {
                        tracing::warn!(topic = %p.topic, partition = p.partition, "a fetch answer for a partition not asked for");
                        return None;
                    };
                    let (key, source_leader_epoch) = (a.key.clone(), a.source_leader_epoch);
                    let gone = gone.get(&key.topic).map(String::as_str);
                    let answer = match classify(p, source_leader_epoch, gone) {
                        // No records (nothing new, or the answer's bytes went to other
                        // partitions) is not applied: its lag is counted here.
                        FetchAction::Apply(FetchResponse::Records {
                            records,
                            high_watermark,
                            source_leader_epoch,
                        }) if records.is_empty() && high_watermark >= 0 => {
                            if !a.ahead {
                                stats.lag(&key, high_watermark - a.offset);
                                stats.mirrored(&key, a.offset < high_watermark, None, now_ms);
                            }
                            Ok(FetchResponse::Records {
                                records,
                                high_watermark,
                                source_leader_epoch,
                            })
                        }
                        FetchAction::Apply(response) => Ok(response),
                        FetchAction::Fail(cause) => Err(cause),
                        // As Kafka's replica fetcher: the partition moves to its new leader's
                        // fetcher (after a fresh leader lookup, with a backoff), and stays
                        // MIRRORING. Nothing is applied from this answer.
                        FetchAction::MoveToLeader => match &moved {
                            Some(moved) => {
                                moved.do_send(LeaderMoved(key.clone()));
                                Ok(FetchResponse::Records {
                                    records: bytes::Bytes::new(),
                                    high_watermark: -1,
                                    source_leader_epoch: None,
                                })
                            }
                            None => Err(Cause::retryable("the source partition's leader moved")),
                        },
                    };
                    Some((key, answer))
                })
                .collect();
            Ok(Fetched {
                answers,
                bytes,
                backlog,
                throttled: !waited.is_zero(),
            })
        })
    }

    fn paced(&self, report: &PacingReport) {
        self.stats.paced(self.leader, report);
    }

    fn applied_ahead(&self, bytes: u64) {
        self.stats.read_ahead(bytes);
    }

    fn apply(
        &self,
        key: &TopicPartition,
        request: FetchRequest,
        response: FetchResponse,
        epochs: FetchEpochs,
    ) -> PortFuture<Result<FetchProgress, Cause>> {
        let host = self.host.clone();
        let source = self.lanes.first();
        let leader = self.leader;
        let key = key.clone();
        let stats = self.stats.clone();
        let high_watermark = match &response {
            FetchResponse::Records { high_watermark, .. } => Some(*high_watermark),
            _ => None,
        };
        // Each whole batch's end and newest timestamp (headers only: Bytes clones), for the
        // lag in time.
        let batch_times: Vec<(i64, i64)> = match &response {
            FetchResponse::Records { records, .. } => RecordBatches::new(records.clone())
                .map_while(Result::ok)
                .filter(|b| b.max_timestamp() >= 0)
                .map(|b| (b.next_offset(), b.max_timestamp()))
                .collect(),
            _ => Vec::new(),
        };
        let fetched_from = request.offset;
        let topic_id = self.topic_id(&key.topic);
        let destination_epoch = epochs.destination;
        let source_cluster_id = self.source_cluster_id.clone();
        Box::pin(async move {
            // An answer that truncates the log is taken only from the topic this mirror copies
            // (a fetch by name, below Fetch v13, may have reached a topic created again).
            if matches!(
                response,
                FetchResponse::OffsetOutOfRange { .. } | FetchResponse::Diverging { .. }
            ) {
                super::source_topic::check_now(
                    &*source,
                    &source_cluster_id,
                    &key.topic,
                    topic_id,
                    key.partition,
                )
                .await?;
            }
            // Both restart-at-the-source's-start cases need its log start, asked before the log
            // is leased.
            let needs_start = matches!(
                response,
                FetchResponse::OffsetOutOfRange { .. }
                    | FetchResponse::Diverging { epoch: ..0, .. }
            );
            let source_start = if needs_start {
                let (offset, _) = source
                    .list_offsets(
                        leader,
                        &key.topic,
                        key.partition,
                        EARLIEST,
                        Isolation::ReadCommitted,
                    )
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
            // An answer fetched for a topic since deleted (and perhaps created again under its
            // name) is not applied: the partition's new incarnation fetches for itself. Checked
            // last before the log is leased, after every wait for the source.
            let current_id = host.topic(&key.topic).map(|t| t.topic_id);
            if !epochs.topic_id.is_nil() && current_id != Some(epochs.topic_id) {
                return Err(Cause::retryable(format!(
                    "topic {} was deleted while it was fetched",
                    key.topic
                )));
            }
            // Read only where it may apply: the mirrors' configs are not cloned per answer.
            let gaps = match response {
                FetchResponse::OffsetOutOfRange { .. } => {
                    GapPolicy::of(host.mirrors().get(stats.mirror()))
                }
                _ => GapPolicy::Continue,
            };
            let applied = host.spawn_with_log(&key.topic, key.partition, move |log| {
                let progress = host::apply_fetch(
                    log,
                    source_start,
                    &request,
                    response,
                    destination_epoch,
                    gaps,
                )?;
                Ok((progress, log.log_end_offset()))
            });
            let (progress, log_end) = applied.await.inspect_err(|e: &Cause| {
                if let Some(invariant) = e.broken {
                    stats.invariant_violated(invariant);
                }
            })?;
            match progress {
                FetchProgress::Truncated {
                    records,
                    skipped: Some((from, to)),
                } => {
                    tracing::warn!(topic = %key.topic, partition = key.partition, from, to = to - 1, offsets = to - from, removed = records, "the source deleted these offsets before they were mirrored (retention or DeleteRecords): they are not on this cluster; the partition restarts at the source's log start ({GAP_POLICY}=continue), and the records it held below the gap are removed with it");
                    stats.skipped(&key, (to - from) as u64);
                    stats.truncated_for_gap(&key, records);
                }
                FetchProgress::Truncated { records, .. } if records > 0 => {
                    tracing::warn!(topic = %key.topic, partition = key.partition, records, log_end, "truncated where the log diverged from the source's (its leader epochs): records this cluster held past that point are gone");
                    stats.truncated_at_start(&key, records);
                }
                _ => {}
            }
            if let Some(high_watermark) = high_watermark {
                stats.lag(&key, high_watermark - log_end);
                let newest_ms = batch_times
                    .iter()
                    .rev()
                    .find(|(end, _)| *end <= log_end && *end > fetched_from)
                    .map(|(_, timestamp)| *timestamp);
                stats.mirrored(&key, log_end < high_watermark, newest_ms, host.now_ms());
            }
            Ok(progress)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(topic: &str, topic_id: Uuid, partition: i32) -> FetchedPartition {
        FetchedPartition {
            topic_id,
            topic: topic.to_string(),
            partition,
            error: ErrorCode::NONE,
            high_watermark: 0,
            last_stable_offset: 0,
            log_start_offset: 0,
            records: bytes::Bytes::new(),
            aborted_transactions: Vec::new(),
            diverging_epoch: None,
            current_leader: None,
        }
    }

    /// A topic deleted and created again at the source, its 200 partitions answered
    /// UNKNOWN_TOPIC_ID in one fetch, and a topic the source still has: the verdict costs one
    /// confirmation wait, not one per partition (the fetcher's other topics wait for it).
    #[tokio::test(start_paused = true)]
    async fn a_gone_topic_is_confirmed_once_however_many_partitions_it_has() {
        use crate::host::Host;
        use kmirror_protocol::client::ClientConfig;
        let network = crate::memory::MemoryNetwork::default();
        let source = network.cluster("src");
        source
            .create_plain_topic("recreated", 200)
            .expect("created");
        source.create_plain_topic("kept", 1).expect("created");
        let kept_id = source.topic("kept").expect("kept").topic_id;
        let client = network
            .cluster("dst")
            .connect_source(ClientConfig::plaintext(&source.address()))
            .expect("client");
        let copied = Uuid::from_u128(7);
        let mut asked: Vec<Asked> = (0..200)
            .map(|p| Asked {
                key: TopicPartition::new("recreated".to_string(), p),
                topic_id: copied,
                source_leader_epoch: None,
                offset: 0,
                ahead: false,
            })
            .collect();
        asked.push(Asked {
            key: TopicPartition::new("kept".to_string(), 0),
            topic_id: kept_id,
            source_leader_epoch: None,
            offset: 0,
            ahead: false,
        });
        let fetched: Vec<FetchedPartition> = asked
            .iter()
            .map(|a| FetchedPartition {
                error: ErrorCode::UNKNOWN_TOPIC_ID,
                ..answer("", a.topic_id, a.key.partition)
            })
            .collect();
        let started = tokio::time::Instant::now();
        let gone = gone_topics(&client, &std::sync::OnceLock::new(), &fetched, &asked).await;
        assert_eq!(
            started.elapsed(),
            crate::engine::source_topic::CONFIRM_AFTER
        );
        assert_eq!(gone.len(), 1, "{gone:?}");
        assert!(
            gone["recreated"].contains("deleted and created again"),
            "{gone:?}"
        );
    }

    #[test]
    fn an_answer_about_another_topic_of_the_same_name_answers_nothing() {
        let (ours, recreated) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let asked = [Asked {
            key: TopicPartition::new("orders".to_string(), 0),
            topic_id: ours,
            source_leader_epoch: None,
            offset: 0,
            ahead: false,
        }];
        let found = |p: &FetchedPartition| asked_for(&asked, p).map(|a| a.topic_id);
        assert_eq!(found(&answer("", ours, 0)), Some(ours), "by id");
        assert_eq!(
            found(&answer("orders", Uuid::nil(), 0)),
            Some(ours),
            "by name"
        );
        assert_eq!(found(&answer("orders", recreated, 0)), None);
        assert_eq!(found(&answer("", recreated, 0)), None);
        assert_eq!(found(&answer("orders", ours, 1)), None);
    }
}
