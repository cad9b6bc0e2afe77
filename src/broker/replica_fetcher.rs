//! Replica fetchers (docs/replication.md §5): this broker's followers copying their leaders'
//! logs. One task per leader, on a long-lived connection to its client listener, fetches every
//! partition this broker follows from it, with the broker's id and broker epoch, each
//! partition's leader epoch, log end and last epoch; [`crate::replication::follower`] decides
//! what each answer does to the log, and this shell does it.
//!
//! Lifecycle: [`Broker::run_replica_fetchers`] recomputes the followed partitions after every
//! metadata change (and every [`RECHECK`]), starts a task for a new leader, hands each task its
//! partitions, and ends a task whose leader has none left (dropping its channel). An answer is
//! applied only while the partition still follows that leader at that leader epoch, under the
//! log's lock, so a role change racing a fetch cannot append to a log that now leads.

use super::{Broker, now_ms};
use crate::replication::follower::{self, Action, Answer, Local};
use crate::replication::role::Role;
use crate::storage::{GapPolicy, PartitionLog, StorageError};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use kmirror_protocol::batch::CheckedBatches;
use kmirror_protocol::client::ClientConfig;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::errors::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

/// `replica.fetch.wait.max.ms`: how long a leader holds a follower's fetch for new records.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// `replica.fetch.response.max.bytes`.
const FETCH_MAX_BYTES: i32 = 10 * 1024 * 1024;
/// `replica.fetch.max.bytes`: per partition.
const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
/// `replica.fetch.backoff.ms`: the pause after an error.
const BACKOFF: Duration = Duration::from_secs(1);
/// How often the followed partitions are recomputed without a metadata change.
const RECHECK: Duration = Duration::from_secs(1);
/// The Fetch version a follower sends: topic ids and ReplicaState (every kmirror broker
/// serves it).
const FETCH_VERSION: i16 = 16;

/// A partition followed from one leader, at the leader epoch the metadata gave.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Followed {
    topic: String,
    topic_id: Uuid,
    partition: i32,
    leader_epoch: i32,
}

impl Broker {
    /// The partitions this broker follows, by leader.
    fn followed(&self) -> BTreeMap<i32, Vec<Followed>> {
        let mut by_leader: BTreeMap<i32, Vec<Followed>> = BTreeMap::new();
        for ((topic, partition), open) in self.open_partitions_now() {
            let role = open.role.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Role::Follower {
                leader,
                leader_epoch,
            } = role
                && leader >= 0
                && leader != self.config.node_id
            {
                by_leader.entry(leader).or_default().push(Followed {
                    topic,
                    topic_id: open.topic_id,
                    partition,
                    leader_epoch,
                });
            }
        }
        by_leader
    }

    /// Runs the replica fetchers until the metadata goes away (the broker closes).
    pub fn run_replica_fetchers(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let broker = self.clone();
        let mut changes = self.metadata_changes();
        tokio::spawn(async move {
            let mut fetchers: HashMap<i32, watch::Sender<Vec<Followed>>> = HashMap::new();
            loop {
                let followed = broker.followed();
                fetchers.retain(|leader, _| followed.contains_key(leader));
                for (leader, partitions) in followed {
                    match fetchers.get(&leader) {
                        Some(sender) => {
                            sender.send_if_modified(|current| {
                                let changed = *current != partitions;
                                *current = partitions;
                                changed
                            });
                        }
                        None => {
                            let (sender, receiver) = watch::channel(partitions);
                            tokio::spawn(fetch_from(broker.clone(), leader, receiver));
                            fetchers.insert(leader, sender);
                        }
                    }
                }
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(RECHECK) => {}
                }
            }
        })
    }

    /// The Fetch a follower sends for `followed`, each from its log end.
    fn replica_fetch_request(&self, followed: &[Followed]) -> FetchRequest {
        let node = self.config.node_id;
        let broker_epoch = self.with_controller(|c| c.broker_epoch(node)).unwrap_or(-1);
        let mut topics: BTreeMap<Uuid, FetchTopic> = BTreeMap::new();
        for f in followed {
            let Some(open) = self.replica(&f.topic, f.partition) else {
                continue;
            };
            let log = open.log.lock().unwrap_or_else(|e| e.into_inner());
            let partition = FetchPartition::default()
                .with_partition(f.partition)
                .with_current_leader_epoch(f.leader_epoch)
                .with_fetch_offset(log.log_end_offset())
                .with_last_fetched_epoch(log.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(log.log_start_offset())
                .with_partition_max_bytes(PARTITION_MAX_BYTES);
            topics
                .entry(f.topic_id)
                .or_insert_with(|| FetchTopic::default().with_topic_id(f.topic_id))
                .partitions
                .push(partition);
        }
        // ReplicaState carries the replica from v15 (replica_id must stay -1 there).
        FetchRequest::default()
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(node))
                    .with_replica_epoch(broker_epoch),
            )
            .with_max_wait_ms(FETCH_MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(FETCH_MAX_BYTES)
            .with_topics(topics.into_values().collect())
    }

    /// Applies `leader`'s answer to the partitions of `followed` it holds; whether the fetcher
    /// backs off before the next fetch (an error, or nothing copied).
    fn apply_replica_fetch(
        &self,
        leader: i32,
        followed: &[Followed],
        response: FetchResponse,
    ) -> bool {
        if response.error_code != 0 {
            tracing::warn!(leader, error = %ErrorCode(response.error_code), "replica fetch refused");
            return true;
        }
        let mut back_off = false;
        for topic in response.responses {
            for p in topic.partitions {
                let Some(f) = followed
                    .iter()
                    .find(|f| f.topic_id == topic.topic_id && f.partition == p.partition_index)
                else {
                    continue;
                };
                let answer = Answer {
                    error: ErrorCode(p.error_code),
                    high_watermark: p.high_watermark,
                    log_start: p.log_start_offset,
                    diverging_epoch: (p.diverging_epoch.epoch >= 0
                        || p.diverging_epoch.end_offset >= 0)
                        .then_some((p.diverging_epoch.epoch, p.diverging_epoch.end_offset)),
                    records: p.records.unwrap_or_default(),
                };
                if let Err(why) = self.apply_replica_answer(leader, f, &answer) {
                    tracing::warn!(
                        topic = f.topic,
                        partition = f.partition,
                        leader,
                        reason = why,
                        "replica fetch"
                    );
                    back_off = true;
                }
            }
        }
        back_off
    }

    /// Applies one partition's answer while it still follows `leader` at `f`'s epoch.
    fn apply_replica_answer(
        &self,
        leader: i32,
        f: &Followed,
        answer: &Answer,
    ) -> Result<(), String> {
        let Some(open) = self.replica(&f.topic, f.partition) else {
            return Ok(());
        };
        let mut log = open.log.lock().unwrap_or_else(|e| e.into_inner());
        let still = matches!(
            *open.role.lock().unwrap_or_else(|e| e.into_inner()),
            Role::Follower { leader: l, leader_epoch } if l == leader && leader_epoch == f.leader_epoch
        );
        if !still || open.topic_id != f.topic_id {
            return Ok(());
        }
        let local = Local {
            log_start: log.log_start_offset(),
            log_end: log.log_end_offset(),
        };
        let stored = |e: StorageError| e.to_string();
        match follower::decide(local, answer) {
            Action::Append {
                records,
                high_watermark,
                log_start,
            } => {
                let checked = CheckedBatches::check(records).map_err(|e| e.to_string())?;
                if !checked.is_empty() {
                    log.append_mirrored_checked(checked, GapPolicy::AllowGaps, now_ms())
                        .map_err(stored)?;
                    self.notify_appended();
                }
                if log_start > log.log_start_offset() && log_start <= log.log_end_offset() {
                    log.advance_log_start(log_start).map_err(stored)?;
                }
                follow_high_watermark(&mut log, high_watermark);
                Ok(())
            }
            Action::Truncate { epoch, leader_end } => {
                let cut = follower::truncation_offset(local, leader_end, log.end_offset_for(epoch));
                cut_follower(
                    &mut log,
                    f,
                    leader,
                    cut,
                    false,
                    "it diverged from its leader",
                )
            }
            Action::TruncateTo(offset) => cut_follower(
                &mut log,
                f,
                leader,
                offset,
                false,
                "it is past its leader's log end",
            ),
            Action::StartAt(offset) => cut_follower(
                &mut log,
                f,
                leader,
                offset,
                true,
                "its leader no longer has what follows its log end",
            ),
            Action::BackOff(code) => Err(format!("the leader answered {code}")),
        }
    }
}

/// Cuts a follower's log at `offset` (`start_over`: empties it and starts it there), saying
/// `why` in the broker's log.
fn cut_follower(
    log: &mut PartitionLog,
    f: &Followed,
    leader: i32,
    offset: i64,
    start_over: bool,
    why: &str,
) -> Result<(), String> {
    tracing::info!(
        topic = f.topic,
        partition = f.partition,
        leader,
        offset,
        start_over,
        reason = why,
        "cutting a follower's log"
    );
    let cut = if start_over {
        log.truncate_fully_and_start_at(offset)
    } else {
        log.truncate_to(offset)
    };
    cut.map_err(|e| e.to_string())
}

/// A follower's high watermark: the leader's, capped at its own log end.
fn follow_high_watermark(log: &mut PartitionLog, leader_high_watermark: i64) {
    if leader_high_watermark >= 0 {
        log.update_high_watermark(leader_high_watermark.min(log.log_end_offset()));
    }
}

/// One leader's fetcher: fetches `partitions` from `leader` until the channel closes.
async fn fetch_from(
    broker: Arc<Broker>,
    leader: i32,
    mut partitions: watch::Receiver<Vec<Followed>>,
) {
    let mut connection: Option<Connection> = None;
    loop {
        let followed = partitions.borrow_and_update().clone();
        if followed.is_empty() {
            if partitions.changed().await.is_err() {
                return;
            }
            continue;
        }
        let live = match connection.take().filter(Connection::is_alive) {
            Some(c) => Ok(c),
            None => connect(&broker, leader).await,
        };
        let conn = match live {
            Ok(c) => c,
            Err(why) => {
                tracing::warn!(
                    leader,
                    reason = why,
                    "replica fetcher cannot reach its leader"
                );
                if pause(&mut partitions).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let request = broker.replica_fetch_request(&followed);
        let timeout = Duration::from_secs(30);
        let sent = tokio::select! {
            sent = tokio::time::timeout(timeout, conn.send("Fetch", &request, FETCH_VERSION)) => sent,
            changed = partitions.changed() => {
                if changed.is_err() {
                    return;
                }
                connection = Some(conn);
                continue;
            }
        };
        match sent {
            Ok(Ok((_, response))) => {
                connection = Some(conn);
                let answering = broker.clone();
                let back_off = tokio::task::spawn_blocking(move || {
                    answering.apply_replica_fetch(leader, &followed, response)
                })
                .await
                .unwrap_or(true);
                if back_off && pause(&mut partitions).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(leader, error = %e, "replica fetch failed");
                if pause(&mut partitions).await.is_err() {
                    return;
                }
            }
            Err(_) => {
                tracing::debug!(leader, "replica fetch timed out");
            }
        }
    }
}

/// Connects to `leader`'s client listener.
async fn connect(broker: &Broker, leader: i32) -> Result<Connection, String> {
    let address = broker
        .address_of(leader)
        .ok_or_else(|| format!("broker {leader} is not registered"))?;
    let config = ClientConfig::plaintext(&address);
    Connection::connect(&address, &config, None)
        .await
        .map_err(|e| e.to_string())
}

/// Waits [`BACKOFF`], or less when the partitions change; `Err` when the fetcher is ended.
async fn pause(partitions: &mut watch::Receiver<Vec<Followed>>) -> Result<(), ()> {
    tokio::select! {
        changed = partitions.changed() => changed.map_err(|_| ()),
        _ = tokio::time::sleep(BACKOFF) => Ok(()),
    }
}
