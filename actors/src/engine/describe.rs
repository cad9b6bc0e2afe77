//! What DescribeMirrors shows of a mirror on this broker: per partition it leads, its actor's
//! state, the source's last stable offset and high watermark (asked at describe time, within
//! [`DESCRIBE_SOURCE_BUDGET`]; unknown when the source does not answer), the destination's log
//! end and last stable offsets, the lag in time, the records truncations removed, and for a
//! stopped topic the records written here since its failover (what a restart would discard).

use super::mirror::Mirror;
use super::partition_ports::EnginePartitionPorts;
use super::stats::Truncated;
use crate::actor::{DescribePartition, MirrorPartition, PartitionSnapshot};
use crate::host::StopCut;
use crate::host::{Host, Source, TopicPartition};
use crate::metadata::{MIRROR_NAME, STOP_CUT_TIMESTAMP, mirror_of};
use crate::partition::Desired;
use crate::policy::MirrorError;
use actix::{Addr, Context, Handler, Message, ResponseFuture};
use futures_util::StreamExt;
use kmirror_protocol::client::Isolation;
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::state::MirrorState;
use std::sync::Arc;

type PartitionAddr<H> = Addr<MirrorPartition<EnginePartitionPorts<H>>>;

/// One mirrored topic as DescribeMirrors shows it on this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSnapshot {
    /// The topic.
    pub topic: String,
    /// Its id (the source's).
    pub topic_id: uuid::Uuid,
    /// The partitions this broker leads.
    pub partitions: Vec<PartitionView>,
    /// The point in time of the consistent stop that stopped it, if one did.
    pub stop_cut_timestamp_ms: Option<i64>,
}

/// One mirror partition as DescribeMirrors shows it on this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// The partition index.
    pub partition: i32,
    /// Its actor's state.
    pub snapshot: PartitionSnapshot,
    /// The source's last stable offset (what the mirror copies up to); `None` where the
    /// source was not asked (the partition needs nothing of it) or did not answer.
    pub source_offset: Option<i64>,
    /// The source's high watermark: every acknowledged record, those of transactions still
    /// open included (the mirror copies them once they commit); `None` as above.
    pub source_high_watermark: Option<i64>,
    /// How old the oldest source record it has not mirrored is (0: caught up); `None` before
    /// its first fetch answer here, when it is not fetching, or while the source does not
    /// answer.
    pub lag_ms: Option<i64>,
    /// Records its truncations removed here.
    pub truncated: Truncated,
    /// Offsets the source deleted before they were mirrored here.
    pub skipped_offsets: u64,
    /// The destination log's end and last stable offsets, read together (-1: not readable).
    pub log_end_offset: i64,
    /// See `log_end_offset`.
    pub last_stable_offset: i64,
    /// For a stopped topic, the records written on this cluster since its failover
    /// ([`crate::host::local_records`]), counted in the same read as `log_end_offset`.
    pub local_records: Option<u64>,
    /// Where a stop would cut it now, when asked ([`CutQuery`]) and it is not stopped.
    pub stop_cut: Option<StopCut>,
    /// The source time (ms since the epoch) through which it holds everything the source
    /// wrote: the last fetch answer that found it caught up, or the newest record it mirrored
    /// while behind; before its first answer here, the newest record below its last stable
    /// offset. `None` for a stopped topic or an empty log.
    pub mirrored_through_ms: Option<i64>,
}

impl PartitionView {
    /// The records the destination lacks of what the source has (its last stable offset less
    /// the destination's log end), when both are known.
    pub fn lag(&self) -> Option<i64> {
        let source = self.source_offset?;
        (self.log_end_offset >= 0).then(|| (source - self.log_end_offset).max(0))
    }
}

/// Whether a describe also reports, per partition not stopped, where a stop would cut it now
/// ([`crate::host::stop_cut`]: a scan of the log's tail, so only when asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CutQuery {
    /// No.
    #[default]
    No,
    /// A stop: at the last stable offset.
    Stop,
    /// A consistent stop at this point in time (ms since the epoch).
    Consistent(i64),
}

/// Every topic of a mirror, with the snapshots of its partitions on this broker.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<Vec<TopicSnapshot>, MirrorError>")]
pub struct DescribeMirror(pub String, pub CutQuery);

impl<H: Host> Handler<DescribeMirror> for Mirror<H> {
    type Result = ResponseFuture<Result<Vec<TopicSnapshot>, MirrorError>>;

    fn handle(&mut self, msg: DescribeMirror, _: &mut Context<Self>) -> Self::Result {
        type Described<H> = (String, uuid::Uuid, Vec<(i32, PartitionAddr<H>)>);
        let now_ms = self.host.now_ms();
        let host = self.host.clone();
        let mirror = msg.0.clone();
        let cut = msg.1;
        let stats = self.stats.clone();
        // A source known not to answer is not asked (a frozen one would hold the describe for
        // the client's whole request timeout); the partitions it holds up say why instead.
        let source = self.unreachable.is_none().then(|| self.source.clone());
        // Why partitions waiting on the source make no progress: it does not answer (the
        // probe or the sync found), or its fetches fail. Fetches usually fail first and the
        // sync finds out later: the time counts from the first to fail.
        let unreachable = match (self.unreachable.clone(), self.stats.failing()) {
            (Some((since, error)), Some((fetches_since, _))) => {
                Some((since.min(fetches_since), error))
            }
            (told, fetches) => told.or(fetches),
        }
        .map(|(since, error)| {
            let seconds = (now_ms - since).max(0) / 1000;
            format!("source unreachable for {seconds} s: {error}")
        });
        let topics: Vec<Described<H>> = self
            .topics
            .iter()
            .map(|(name, mirrored)| {
                let addrs = mirrored
                    .partitions
                    .iter()
                    .map(|(index, p)| (*index, p.addr().clone()))
                    .collect();
                (name.clone(), mirrored.topic_id, addrs)
            })
            .collect();
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + DESCRIBE_SOURCE_BUDGET;
            let mut out: Vec<(TopicSnapshot, Vec<i32>)> = Vec::new();
            for (topic, topic_id, actors) in topics {
                let configs = host.topic(&topic).map(|t| t.configs).unwrap_or_default();
                let stopped = configs
                    .get(MIRROR_NAME)
                    .is_some_and(|v| mirror_of(v) == Some((&mirror, Desired::Stopped)));
                let stop_cut_timestamp_ms = configs
                    .get(STOP_CUT_TIMESTAMP)
                    .and_then(|t| t.parse().ok())
                    .filter(|_| stopped);
                let mut partitions = Vec::new();
                for (index, actor) in actors {
                    let mut snapshot = actor.send(DescribePartition).await.map_err(|e| {
                        MirrorError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
                    })?;
                    let fetching = waits_for_source(snapshot.state);
                    if fetching && snapshot.error.is_none() {
                        snapshot.error.clone_from(&unreachable);
                    }
                    let key = TopicPartition::new(topic.clone(), index);
                    let cut = match (stopped, cut) {
                        (true, _) | (_, CutQuery::No) => None,
                        (false, CutQuery::Stop) => Some(None),
                        (false, CutQuery::Consistent(t)) => Some(Some(t)),
                    };
                    let figures = log_figures(&host, &topic, index, stopped, cut).await;
                    let mirrored_through_ms = (!stopped)
                        .then(|| stats.mirrored_through_ms(&key).or(figures.newest_stable_ms))
                        .flatten();
                    partitions.push(PartitionView {
                        partition: index,
                        snapshot,
                        source_offset: None,
                        source_high_watermark: None,
                        // Unknown while the source does not answer: what it took
                        // meanwhile cannot be known.
                        lag_ms: (fetching && unreachable.is_none())
                            .then(|| stats.lag_ms(&key, now_ms))
                            .flatten(),
                        truncated: stats.truncations(&key),
                        skipped_offsets: stats.skipped_offsets(&key),
                        log_end_offset: figures.log_end_offset,
                        last_stable_offset: figures.last_stable_offset,
                        local_records: figures.local_records,
                        stop_cut: figures.stop_cut,
                        mirrored_through_ms,
                    });
                }
                // Stopped and paused partitions need nothing of the source; a dry run asks for
                // paused ones too (what their stop would lose).
                let asked: Vec<i32> = partitions
                    .iter()
                    .filter(|p| {
                        waits_for_source(p.snapshot.state)
                            || (cut != CutQuery::No
                                && matches!(
                                    p.snapshot.state,
                                    MirrorState::Pausing | MirrorState::Paused
                                ))
                    })
                    .map(|p| p.partition)
                    .collect();
                out.push((
                    TopicSnapshot {
                        topic,
                        topic_id,
                        partitions,
                        stop_cut_timestamp_ms,
                    },
                    asked,
                ));
            }
            // The topics' lookups side by side: across a WAN each costs round trips, and one
            // after another they would not fit the budget past the first few topics.
            if let Some(source) = source.as_ref() {
                let lookups = out.iter().map(|(t, asked)| async move {
                    if asked.is_empty() {
                        return Vec::new();
                    }
                    let offsets = source_offsets(&**source, &t.topic, t.topic_id, asked);
                    tokio::time::timeout_at(deadline, offsets)
                        .await
                        .unwrap_or_default()
                });
                let found: Vec<_> = futures_util::stream::iter(lookups)
                    .buffered(DESCRIBE_TOPICS_AT_ONCE)
                    .collect()
                    .await;
                for ((t, asked), offsets) in out.iter_mut().zip(found) {
                    for (index, (lso, hw)) in asked.iter().zip(offsets) {
                        if let Some(p) = t.partitions.iter_mut().find(|p| p.partition == *index) {
                            p.source_offset = lso;
                            p.source_high_watermark = hw;
                        }
                    }
                }
            }
            Ok(out.into_iter().map(|(t, _)| t).collect())
        })
    }
}

/// What one read of a partition's log shows (-1 and `None` where it cannot be read).
struct LogFigures {
    log_end_offset: i64,
    last_stable_offset: i64,
    /// When stopped: the records written here since the failover.
    local_records: Option<u64>,
    /// When asked (`Some(cut timestamp)`): where a stop would cut.
    stop_cut: Option<StopCut>,
    /// The greatest timestamp of the batch just below the last stable offset.
    newest_stable_ms: Option<i64>,
}

/// A partition's [`LogFigures`], from one lease of its log on the host's blocking pool (a cut
/// may scan the log's tail); `cut` asks where a stop (at that consistent point in time, if any)
/// would cut it.
async fn log_figures(
    host: &impl Host,
    topic: &str,
    partition: i32,
    stopped: bool,
    cut: Option<Option<i64>>,
) -> LogFigures {
    let unknown = LogFigures {
        log_end_offset: -1,
        last_stable_offset: -1,
        local_records: None,
        stop_cut: None,
        newest_stable_ms: None,
    };
    host.spawn_with_log(topic, partition, move |log| {
        let local = stopped
            .then(|| crate::host::local_records(log).ok())
            .flatten();
        let stop_cut = cut.and_then(|at| crate::host::stop_cut(log, at).ok());
        let lso = log.last_stable_offset();
        let newest_stable_ms = if lso > log.log_start_offset() {
            log.find_batch(lso - 1, &mut |_| true)?
                .map(|b| b.max_timestamp())
                .filter(|t| *t >= 0)
        } else {
            None
        };
        Ok::<_, crate::host::HostError>(LogFigures {
            log_end_offset: log.log_end_offset(),
            last_stable_offset: lso,
            local_records: local,
            stop_cut,
            newest_stable_ms,
        })
    })
    .await
    .unwrap_or(unknown)
}

/// How long one DescribeMirror waits for the source's offsets in all (past it, they show -1).
const DESCRIBE_SOURCE_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Topics whose source offsets one describe asks at a time, and partitions per topic (each two
/// ListOffsets): at most 512 requests out, so a mirror of thousands of partitions does not
/// queue the partitions' own lookups on the source's connection behind a describe.
const DESCRIBE_TOPICS_AT_ONCE: usize = 8;
const DESCRIBE_PARTITIONS_AT_ONCE: usize = 32;

/// Whether a partition in `state` needs the source to make progress.
fn waits_for_source(state: MirrorState) -> bool {
    match state {
        MirrorState::Preparing | MirrorState::Mirroring | MirrorState::Failed => true,
        MirrorState::Unknown
        | MirrorState::Pausing
        | MirrorState::Paused
        | MirrorState::Stopping
        | MirrorState::Stopped => false,
    }
}

/// The source's last stable offsets and high watermarks of `topic`'s partitions `indexes`
/// (`None` where unknown). A source topic of that name with another id than `topic_id` (deleted
/// and created again) has no offsets of the topic mirrored: all are unknown. The partitions are
/// asked side by side, [`DESCRIBE_PARTITIONS_AT_ONCE`] at a time (the client pipelines requests
/// on its connection to each leader).
async fn source_offsets(
    source: &impl Source,
    topic: &str,
    topic_id: uuid::Uuid,
    indexes: &[i32],
) -> Vec<(Option<i64>, Option<i64>)> {
    let leaders: Vec<i32> = match source.metadata(Some(&[topic])).await {
        Ok(metadata) => metadata
            .topics
            .get(topic)
            .filter(|t| t.topic_id.is_nil() || topic_id.is_nil() || t.topic_id == topic_id)
            .map(|t| t.partitions.iter().map(|p| p.leader).collect())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let leaders = &leaders;
    let lookups = indexes.iter().map(|&partition| async move {
        let Some(&leader) = leaders.get(partition as usize) else {
            return (None, None);
        };
        let latest = |isolation| {
            source.list_offsets(
                leader,
                topic,
                partition,
                kmirror_protocol::client::source::LATEST,
                isolation,
            )
        };
        let (lso, hw) = tokio::join!(
            latest(Isolation::ReadCommitted),
            latest(Isolation::ReadUncommitted)
        );
        (lso.ok().map(|(o, _)| o), hw.ok().map(|(o, _)| o))
    });
    futures_util::stream::iter(lookups)
        .buffered(DESCRIBE_PARTITIONS_AT_ONCE)
        .collect()
        .await
}

/// One mirror of [`DescribeMirrors`]: its name, and its topics or why they are not shown.
pub type DescribedMirror = (String, Result<Vec<TopicSnapshot>, MirrorError>);

/// DescribeMirrors: the mirrors named (every mirror when none is), each loaded (one created
/// since the broker started connects to its source) and described, or why not.
#[derive(Clone, Message)]
#[rtype(result = "Result<Vec<DescribedMirror>, MirrorError>")]
pub struct DescribeMirrors {
    /// The mirrors asked; empty: all.
    pub names: Vec<String>,
    /// Whether to report where a stop would cut each partition.
    pub cut: CutQuery,
    /// DESCRIBE on a mirror, as the host's authorizer answers it (a mirror without it answers
    /// CLUSTER_MIRROR_AUTHORIZATION_FAILED).
    pub may_describe: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

impl std::fmt::Debug for DescribeMirrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DescribeMirrors")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}
