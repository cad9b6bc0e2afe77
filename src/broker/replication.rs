//! The broker's side of partition replication (docs/replication.md §4): each open partition's
//! [`Role`], kept in line with the metadata, and the leader's state machine fed with the log's
//! appends, its high watermark written back to the log.
//!
//! Contract: a partition's log lock is taken before its role lock, everywhere; the high
//! watermark of a log this broker leads changes only through the leader's state (appends,
//! followers' fetches, ISR changes), never by setting it to the log end.
//!
//! [`Broker::run_isr_changes`] is the leader's clock and its line to the controller: every half
//! `replica.lag.time.max.ms` it ticks each led partition (lagging followers proposed out), and
//! it sends the queued ISR proposals as one AlterPartition, feeding each answer back by
//! operation id (the leader state decides what an error means: see
//! [`crate::replication::leader::LeaderState::alter_answered`]).

use super::coordinators::CoordinatorKind;
use super::{Broker, Partition, now_ms};
use crate::controller::partition_change::IsrChange;
use crate::controller::partition_change::IsrState;
use crate::controller::{ANY_NODE, Applied, MetadataCommand, PartitionMeta};
use crate::replication::leader::{Effect, LeaderSettings, LogPosition};
use crate::replication::role::Role;
use crate::storage::PartitionLog;
use kmirror_protocol::errors::ErrorCode;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How often queued ISR proposals are sent.
const PROPOSALS_EVERY: Duration = Duration::from_millis(50);
/// How often the replication gauges are set.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

/// An ISR change a leader proposes: partition, operation id, the AlterPartition entry.
pub(crate) type Proposal = (String, i32, u64, IsrChange);

/// The ISR changes proposed and not yet sent to the controller.
#[derive(Debug, Default)]
pub(crate) struct Proposals(Mutex<Vec<Proposal>>);

impl Broker {
    /// The leader's settings for a topic with `configs`: its `min.insync.replicas` (else the
    /// broker's) and the broker's `replica.lag.time.max.ms`.
    pub(crate) fn leader_settings(&self, configs: &BTreeMap<String, String>) -> LeaderSettings {
        let min_insync_replicas = configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(self.config.min_insync_replicas.max(1) as usize);
        LeaderSettings {
            replica_lag_time_max_ms: self.config.replica_lag_time_max_ms,
            min_insync_replicas,
        }
    }

    /// Brings partition `name`-`index`'s role in line with its registration `meta`.
    pub(crate) fn apply_role(
        &self,
        name: &str,
        index: i32,
        meta: &PartitionMeta,
        configs: &BTreeMap<String, String>,
        partition: &Partition,
    ) {
        let settings = self.leader_settings(configs);
        let mut log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        let position = LogPosition {
            log_end: log.log_end_offset(),
            high_watermark: log.high_watermark(),
        };
        let mut role = partition.role.lock().unwrap_or_else(|e| e.into_inner());
        // A new leader's epoch starts at its log end; a follower's cache holds its leader's
        // epochs, from the batches it copies, as a mirror partition's holds the source's
        // (docs/design.md §4).
        let leads = meta.leader == self.config.node_id || meta.leader == ANY_NODE;
        if leads && !role.leads(Some(meta.leader_epoch)) && !super::is_mirror_topic(configs) {
            log.assign_leader_epoch(meta.leader_epoch);
        }
        let before = role.leads(Some(meta.leader_epoch));
        // Led at an earlier epoch: a leader that becomes a follower at the next epoch did not
        // lead at that one either, yet it lost its leadership.
        let led = role.leads(None);
        let effects = role.next(
            (name, index),
            self.config.node_id,
            meta,
            position,
            settings,
            now_ms(),
        );
        let now_leads = role.leads(Some(meta.leader_epoch));
        let changed = now_leads != before || (led && !now_leads);
        drop(role);
        self.carry_out(name, index, &mut log, effects);
        drop(log);
        if changed {
            // acks=all produces waiting on the old role answer now.
            self.appended.notify_waiters();
            if name == CoordinatorKind::Group.topic() {
                self.offsets_leadership(index, partition, now_leads);
            }
        }
    }

    /// The leader epoch to stamp on records this broker appends to `partition` as its leader:
    /// the metadata's, read with its leader in one look, so a node never stamps an epoch
    /// another node leads at (a follower holding records of its leader's epoch that its
    /// leader lacks would never be told it diverged). `None` when this node does not lead it.
    /// Called under the partition's log lock.
    pub(crate) fn led_epoch(&self, partition: &Partition) -> Option<i32> {
        let node = self.config.node_id;
        let epoch = self.with_controller(|c| {
            let p = c
                .topics()
                .get(&partition.topic)
                .filter(|t| t.topic_id == partition.topic_id)?
                .partitions
                .get(partition.index as usize)?;
            (p.leader == node || p.leader == ANY_NODE).then_some(p.leader_epoch)
        })?;
        let leads = partition
            .role
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .leads(None);
        leads.then_some(epoch)
    }

    /// After an append to a log this broker leads (`log` is `partition`'s, locked): the
    /// leader's state learns the new log end and the high watermark follows it.
    pub(crate) fn committed_append(&self, partition: &Partition, log: &mut PartitionLog) {
        let end = log.log_end_offset();
        let effects = match &mut *partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
            Role::Leader(state) => state.appended(end),
            Role::Follower { .. } => Vec::new(),
        };
        self.carry_out(&partition.topic, partition.index, log, effects);
    }

    /// After a truncation of a log this broker leads (a mirror partition cut to the source's
    /// history): the high watermark falls to the log end if it was past it, and followers'
    /// positions are forgotten until they fetch again (docs/replication.md §6).
    pub(crate) fn truncated(&self, partition: &Partition, log: &mut PartitionLog) {
        let end = log.log_end_offset();
        if let Role::Leader(state) = &mut *partition.role.lock().unwrap_or_else(|e| e.into_inner())
        {
            state.truncated(end);
        }
    }

    /// Controlled shutdown (docs/replication.md §3): asks the controller to move leadership
    /// and ISR membership off this broker, then waits (at most `within`) until this broker's
    /// metadata shows it leads no partition another replica could take, so clients move to the
    /// new leaders before it stops. A controller out of reach or a slow change is logged and
    /// the stop goes on (the session timeout fences the broker then, as after a crash).
    pub async fn controlled_shutdown(&self, within: Duration) {
        let node = self.config.node_id;
        let deadline = Instant::now() + within;
        let still = loop {
            match tokio::time::timeout_at(
                deadline,
                self.write(MetadataCommand::ControlledShutdown { node_id: node }),
            )
            .await
            {
                Ok(Ok(Applied::StillLeads(n))) => break Some(n),
                Ok(Ok(_)) => break None,
                Ok(Err(e)) if Instant::now() < deadline => {
                    tracing::warn!(error = %e, "controlled shutdown: trying again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "controlled shutdown refused: stopping without it");
                    return;
                }
                Err(_) => {
                    tracing::warn!(
                        "controlled shutdown: no controller answered in time: stopping without it"
                    );
                    return;
                }
            }
        };
        // The change reaches this broker's metadata and roles; then its partitions are
        // followers and clients go to the new leaders.
        while Instant::now() < deadline {
            let leads = self.with_controller(|c| {
                c.topics()
                    .values()
                    .flat_map(|t| &t.partitions)
                    .filter(|p| p.leader == node && p.isr.len() > 1)
                    .count()
            });
            if leads == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!(
            still_leads = still.unwrap_or(0),
            "controlled shutdown: leadership moved off this broker (it still leads only partitions it is the last in-sync replica of)"
        );
    }

    /// Where an acks=all append to `partition` that ended at offset `end` under leader epoch
    /// `epoch` stands: `None` while the high watermark is below `end`; NONE or
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND once past it; NOT_LEADER_OR_FOLLOWER when leadership
    /// moved meanwhile (the records may have been truncated).
    pub(crate) fn replication_outcome(
        partition: &Partition,
        (epoch, end): (i32, i64),
    ) -> Option<ErrorCode> {
        let _log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
        match &*partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
            // A state older than the epoch stamped is the same leadership, its role not yet
            // refreshed after an epoch bump: nothing was truncated since.
            Role::Leader(state) if state.leader_epoch() <= epoch => state.acks_all_done(end),
            Role::Leader(_) | Role::Follower { .. } => Some(ErrorCode::NOT_LEADER_OR_FOLLOWER),
        }
    }

    /// Waits until everything appended to `partition` so far is below its high watermark, so
    /// every in-sync replica holds it and any leader elected next has it: what the mirror's
    /// barrier and STOPPED record need before the topic takes writes (docs/replication.md §6).
    /// At most `replica.lag.time.max.ms` twice (a follower lagging that long leaves the ISR and
    /// the high watermark moves without it); an error when it did not, or leadership moved.
    pub(crate) async fn replicated_to_isr(&self, partition: &Partition) -> Result<(), String> {
        self.replication_settled(partition).await.map(|_| ())
    }

    /// [`Broker::replicated_to_isr`], telling whether the in-sync replicas were at least
    /// `min.insync.replicas` (NONE) or fewer (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    pub(crate) async fn replication_settled(
        &self,
        partition: &Partition,
    ) -> Result<ErrorCode, String> {
        let position = {
            let log = partition.log.lock().unwrap_or_else(|e| e.into_inner());
            match &*partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
                Role::Leader(state) => (state.leader_epoch(), log.log_end_offset()),
                Role::Follower { .. } => {
                    return Err(format!(
                        "{}-{} is no longer led here",
                        partition.topic, partition.index
                    ));
                }
            }
        };
        let bound = Duration::from_millis(2 * self.config.replica_lag_time_max_ms.max(1) as u64);
        let deadline = Instant::now() + bound;
        loop {
            // Registered before looking, so a rise right after still wakes us.
            let notified = self.appended().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match Broker::replication_outcome(partition, position) {
                Some(code @ (ErrorCode::NONE | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND)) => {
                    return Ok(code);
                }
                Some(code) => {
                    return Err(format!(
                        "{}-{}: {} before its in-sync replicas had offset {}",
                        partition.topic,
                        partition.index,
                        code.name(),
                        position.1
                    ));
                }
                None => {}
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(format!(
                        "{}-{}: the in-sync replicas did not reach offset {} within {bound:?}",
                        partition.topic, partition.index, position.1
                    ));
                }
            }
        }
    }

    /// A follower's fetch of partition `name` (`partition`, its log `log` locked) from
    /// `fetch_offset`: the leader state learns the follower's log end. Answers an error code:
    /// NOT_LEADER_OR_FOLLOWER when this broker does not lead it or the fetcher holds no replica
    /// of it, STALE_BROKER_EPOCH when the fetcher's broker epoch is not its registration's.
    pub(crate) fn follower_fetched(
        &self,
        name: &str,
        partition: &Partition,
        log: &mut PartitionLog,
        (replica, broker_epoch): (i32, i64),
        fetch_offset: i64,
    ) -> i16 {
        let (registered, ineligible) =
            self.with_controller(|c| (c.broker_epoch(replica), c.ineligible().contains(&replica)));
        if broker_epoch >= 0 && registered.is_some_and(|e| e != broker_epoch) {
            return ErrorCode::STALE_BROKER_EPOCH.0;
        }
        let eligible = registered.is_some() && !ineligible;
        let end = log.log_end_offset();
        let effects = match &mut *partition.role.lock().unwrap_or_else(|e| e.into_inner()) {
            Role::Leader(state) => {
                match state.follower_fetched(
                    replica,
                    broker_epoch,
                    fetch_offset,
                    now_ms(),
                    end,
                    eligible,
                ) {
                    Some(effects) => effects,
                    None => return ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
                }
            }
            Role::Follower { .. } => return ErrorCode::NOT_LEADER_OR_FOLLOWER.0,
        };
        self.carry_out(name, partition.index, log, effects);
        0
    }

    /// Queues an ISR change for the controller.
    fn propose_isr(&self, name: &str, index: i32, op: u64, change: IsrChange) {
        self.isr_proposals
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.to_string(), index, op, change));
    }

    /// Runs the leader's clock and sends its ISR proposals until the metadata goes away.
    pub fn run_isr_changes(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let broker = self.clone();
        let changes = self.metadata_changes();
        let lag = u64::try_from(self.config.replica_lag_time_max_ms).unwrap_or(30_000);
        let tick = Duration::from_millis(lag / 2).clamp(PROPOSALS_EVERY, Duration::from_secs(15));
        tokio::spawn(async move {
            let (mut last_tick, mut last_gauges) = (Instant::now(), Instant::now());
            while changes.has_changed().is_ok() {
                tokio::time::sleep(PROPOSALS_EVERY).await;
                if last_tick.elapsed() >= tick {
                    last_tick = Instant::now();
                    broker.tick_leaders();
                }
                if last_gauges.elapsed() >= GAUGES_EVERY {
                    last_gauges = Instant::now();
                    broker.replication_gauges();
                }
                broker.send_isr_proposals().await;
            }
        })
    }

    /// Sets the under-replicated and under-min-ISR gauges from the partitions led here.
    fn replication_gauges(&self) {
        let (mut under_replicated, mut under_min_isr) = (0usize, 0usize);
        for (_, open) in self.open_partitions_now() {
            let _log = open.log.lock().unwrap_or_else(|e| e.into_inner());
            if let Role::Leader(state) = &*open.role.lock().unwrap_or_else(|e| e.into_inner()) {
                under_replicated += usize::from(state.isr().len() < state.replica_count());
                under_min_isr += usize::from(state.check_acks_all().is_err());
            }
        }
        metrics::gauge!(crate::metrics::UNDER_REPLICATED).set(under_replicated as f64);
        metrics::gauge!(crate::metrics::UNDER_MIN_ISR).set(under_min_isr as f64);
    }

    /// Ticks the state of every partition led here.
    fn tick_leaders(&self) {
        for ((name, index), open) in self.open_partitions_now() {
            let mut log = open.log.lock().unwrap_or_else(|e| e.into_inner());
            let end = log.log_end_offset();
            let effects = match &mut *open.role.lock().unwrap_or_else(|e| e.into_inner()) {
                Role::Leader(state) => state.tick(now_ms(), end),
                Role::Follower { .. } => continue,
            };
            self.carry_out(&name, index, &mut log, effects);
        }
    }

    /// Sends the queued ISR proposals as one AlterPartition and applies the answers.
    async fn send_isr_proposals(&self) {
        let proposals: Vec<Proposal> = std::mem::take(
            &mut *self
                .isr_proposals
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if proposals.is_empty() {
            return;
        }
        let node = self.config.node_id;
        let broker_epoch = self.with_controller(|c| c.broker_epoch(node)).unwrap_or(-1);
        let command = MetadataCommand::AlterPartition {
            broker_id: node,
            broker_epoch,
            changes: proposals.iter().map(|(_, _, _, c)| c.clone()).collect(),
        };
        let answers: Vec<Result<IsrState, i16>> = match self.write(command).await {
            Ok(Applied::IsrChanges(answers)) => answers
                .into_iter()
                .map(|a| a.map_err(|e| e.error_code()))
                .collect(),
            Ok(other) => {
                tracing::error!(answer = ?other, "AlterPartition answered with something else");
                vec![Err(ErrorCode::UNKNOWN_SERVER_ERROR.0); proposals.len()]
            }
            Err(e) => {
                tracing::warn!(error = %e, "AlterPartition not applied; proposed again later");
                vec![Err(e.error_code()); proposals.len()]
            }
        };
        for ((name, index, op, _), answer) in proposals.into_iter().zip(answers) {
            if let Err(code) = &answer {
                tracing::info!(topic = name, partition = index, error = %ErrorCode(*code), "ISR change refused");
            }
            let Some(open) = self.replica(&name, index) else {
                continue;
            };
            let mut log = open.log.lock().unwrap_or_else(|e| e.into_inner());
            let end = log.log_end_offset();
            let effects = match &mut *open.role.lock().unwrap_or_else(|e| e.into_inner()) {
                Role::Leader(state) => {
                    let before = state.isr().len();
                    let effects = state.alter_answered(op, answer, end);
                    match state.isr().len().cmp(&before) {
                        Ordering::Greater => {
                            metrics::counter!(crate::metrics::ISR_EXPANDS).increment(1)
                        }
                        Ordering::Less => {
                            metrics::counter!(crate::metrics::ISR_SHRINKS).increment(1)
                        }
                        Ordering::Equal => {}
                    }
                    effects
                }
                Role::Follower { .. } => continue,
            };
            self.carry_out(&name, index, &mut log, effects);
        }
    }

    /// Carries out the leader's effects on partition `name`-`index` whose log is `log`.
    fn carry_out(&self, name: &str, index: i32, log: &mut PartitionLog, effects: Vec<Effect>) {
        let mut moved = false;
        for effect in effects {
            match effect {
                Effect::HighWatermark(hw) => {
                    log.update_high_watermark(hw);
                    moved = true;
                }
                Effect::ProposeIsr { op, change } => self.propose_isr(name, index, op, change),
            }
        }
        if moved {
            // Fetches and acks=all produces waiting for the high watermark.
            self.appended.notify_waiters();
        }
    }
}
