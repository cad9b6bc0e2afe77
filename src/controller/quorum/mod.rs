//! The metadata quorum: the controller's log replicated with Raft (openraft 0.9) across the
//! controllers named by `controller.quorum.voters` (docs/cluster.md).
//!
//! Lifecycle: [`Quorum::start`] opens the durable Raft log and the last snapshot under the
//! node's `__cluster_metadata/quorum/`, replays what was committed into this node's image (so a
//! restarted node reads its metadata before any leader exists), listens for the other
//! controllers, and, on a voter whose log is empty, proposes the voters as the first membership
//! (every voter proposes the same one, so whichever is first wins and the others are no-ops). A
//! broker-only node ([`ProcessRoles::Broker`]) instead asks the active controller to admit it as
//! a learner (`learner.rs`): it follows the log and never votes, so the quorum's majority is
//! counted over the voters alone. A node with the broker role heartbeats to the active
//! controller; a controller-only node does not (it is no broker: never fenced).
//!
//! Contracts:
//! - Every entry is one [`MetadataCommand`]; every node applies the committed entries in order
//!   to its [`Controller`] image with [`Controller::execute`], which is deterministic, so all
//!   images agree and the outcome each node computes is the same.
//! - [`Quorum::write`] returns only after the change is committed (fsynced on a majority) and
//!   applied to this node's image, so what the caller reads next includes it. On a node that
//!   is not the active controller it forwards the change there. A change that could not reach
//!   the active controller was not written; one whose answer was lost is reported as
//!   [`ControllerError::Unavailable`] and may still be applied.
//! - Node ids are never reused for a node with an empty log (Raft's rule): a node whose
//!   metadata directory was lost must join under a new `node.id`.

mod atomic_file;
mod auth;
mod election;
mod frame;
mod learner;
mod liveness;
mod log_store;
mod lost_log;
mod messages;
mod network;
mod replica;
mod roles;
mod server;
mod state_machine;
#[cfg(test)]
mod test_support;
mod types;

use crate::controller::{Controller, ControllerError, MetadataCommand, Outcome};
use crate::storage::StorageError;
use messages::{Forwarded, QuorumRequest, QuorumResponse};
use network::{CallError, Peer};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, Raft};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use types::MetadataRaft;

pub use auth::{MIN_SECRET_BYTES, QuorumSecret};
pub use roles::{ProcessRoles, UnknownRoles};

/// How a node takes part in the quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// This node's `node.id`.
    pub node_id: i32,
    /// `process.roles`: whether this node votes (else it is a learner) and whether it
    /// heartbeats as a broker.
    pub roles: ProcessRoles,
    /// Where the other nodes reach this node's controller listener (`host:port`): a learner
    /// gives it to the active controller when it joins.
    pub address: String,
    /// `controller.quorum.voters`: each voter's node id and controller address (`host:port`).
    pub voters: BTreeMap<i32, String>,
    /// Where this node's controller listener binds.
    pub listener: SocketAddr,
    /// Where the Raft log and snapshots live.
    pub dir: PathBuf,
    /// How long a metadata change may wait for the active controller.
    pub request_timeout: Duration,
    /// `broker.heartbeat.interval.ms`: how often this node's broker tells the active controller
    /// it is alive.
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms`: how long the active controller waits for a broker's
    /// heartbeat before fencing it.
    pub session_timeout: Duration,
    /// `controller.quorum.secret.file`: the secret every connection between nodes proves
    /// (`None`: the controller listener is unauthenticated).
    pub secret: Option<QuorumSecret>,
    /// The active controller's automatic leader rebalance (`None`:
    /// `auto.leader.rebalance.enable=false`).
    pub leader_rebalance: Option<LeaderRebalance>,
}

/// `leader.imbalance.check.interval.seconds` and `leader.imbalance.per.broker.percentage`:
/// how often the active controller looks for brokers leading too few of the partitions they
/// are the preferred replica of, and how few is too few
/// ([`crate::controller::Controller::imbalanced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderRebalance {
    /// How often it looks.
    pub interval: Duration,
    /// The share (percent) of a broker's preferred partitions it may not lead.
    pub imbalance_percentage: u32,
}

/// Why the quorum could not start.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// The Raft log or snapshot could not be read or written.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The controller listener could not bind.
    #[error("listening for controllers on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    /// Raft refused to start.
    #[error("starting the metadata quorum: {0}")]
    Raft(String),
    /// The active controller refused to admit this node as a learner.
    #[error("the active controller refused this node as a learner: {0}")]
    Refused(String),
    /// This node has no Raft log, but the active controller replicated entries to it: its
    /// data directory was lost or replaced (lost_log.rs).
    #[error(
        "node {node_id} has no metadata log, but the active controller (node {voter}) replicated \
         it up to index {index}: this node's data was lost or the directory replaced. Restore \
         the directory, or start the node under a new node.id with an empty log directory"
    )]
    LostLog {
        node_id: u64,
        voter: i32,
        index: u64,
    },
}

/// This node's member of the metadata quorum.
pub struct Quorum {
    node_id: u64,
    raft: Raft<MetadataRaft>,
    image: Arc<Mutex<Controller>>,
    request_timeout: Duration,
    /// Heartbeat sessions while this node is the active controller.
    live: liveness::Live,
    /// What this node proves to the others' controller listeners.
    secret: Option<QuorumSecret>,
    /// Connections kept for forwarded writes: (controller address, last used, connection).
    forwarders: Mutex<Vec<(String, tokio::time::Instant, Peer)>>,
    stop: watch::Sender<bool>,
    /// Whether this node's broker registered since it started: it heartbeats only then, so a
    /// broker the controller refuses (a wiped directory) is never unfenced by its heartbeats.
    registered: std::sync::atomic::AtomicBool,
}

/// The most connections kept for forwarded writes (one write in flight on each).
const FORWARDERS_KEPT: usize = 16;
/// A kept connection unused this long is not used again: the listener closes connections
/// silent for [`server::IDLE`], and a write sent on a closed one would look lost.
const FORWARDER_FRESH: Duration = Duration::from_secs(20);

/// Runs `work` until `stop` turns true.
async fn until_stopped(
    mut stop: watch::Receiver<bool>,
    work: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = work => {}
        _ = stop.changed() => {}
    }
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum")
            .field("node_id", &self.node_id)
            .field("leader", &self.leader())
            .finish()
    }
}

/// Raft's timing. openraft's election timer is off: `election.rs` stands for elections after a
/// pre-vote, 1.8 to 2.4 s after the active controller was last heard; the shortest election
/// timeout (which sets openraft's leader lease with the longest) is four heartbeats and
/// far above an fsync's latency on a busy 2-core machine, so slow disks do not cause elections.
fn raft_config() -> Result<openraft::Config, QuorumError> {
    openraft::Config {
        cluster_name: "kmirror-metadata".into(),
        heartbeat_interval: 150,
        election_timeout_min: 600,
        election_timeout_max: 1_200,
        install_snapshot_timeout: 5_000,
        snapshot_max_chunk_size: 1024 * 1024,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(5_000),
        max_in_snapshot_log_to_keep: 1_000,
        // A BumpLeaderEpochs entry of a large Stop holds thousands of partitions: few entries
        // per AppendEntries keep a frame far below the wire's limit.
        max_payload_entries: 16,
        // election.rs stands for elections, after a pre-vote.
        enable_elect: false,
        ..Default::default()
    }
    .validate()
    .map_err(|e| QuorumError::Raft(e.to_string()))
}

impl Quorum {
    /// Starts this node's member of the quorum over `image` (an empty [`Controller::replica`]):
    /// see the module doc.
    pub async fn start(
        config: QuorumConfig,
        image: Arc<Mutex<Controller>>,
    ) -> Result<Arc<Quorum>, QuorumError> {
        std::fs::create_dir_all(&config.dir)
            .map_err(crate::storage::error::io("create", &config.dir))?;
        if !log_store::log_exists(&config.dir) {
            lost_log::refuse_a_lost_log(config.node_id as u64, &config.voters, &config.secret)
                .await?;
        }
        let log = log_store::LogStore::open(&config.dir)?;
        let state = state_machine::StateMachine::open(&config.dir, image.clone())?;
        let node_id = config.node_id as u64;
        let raft = Raft::new(
            node_id,
            Arc::new(raft_config()?),
            network::Network::new(config.secret.clone()),
            log,
            state,
        )
        .await
        .map_err(|e| QuorumError::Raft(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(config.listener)
            .await
            .map_err(|source| QuorumError::Bind {
                address: config.listener,
                source,
            })?;
        let (stop, stopped) = watch::channel(false);
        let live = liveness::Live::default();
        let contact = election::Contact::new(std::time::Instant::now());
        tokio::spawn(server::serve(
            listener,
            raft.clone(),
            contact.clone(),
            live.clone(),
            config.session_timeout,
            config.secret.clone(),
            stopped.clone(),
        ));
        let quorum = Arc::new(Quorum {
            node_id,
            raft,
            image,
            request_timeout: config.request_timeout,
            live,
            secret: config.secret.clone(),
            forwarders: Mutex::new(Vec::new()),
            stop,
            registered: std::sync::atomic::AtomicBool::new(false),
        });
        if config.roles.is_voter() {
            quorum.bootstrap(&config.voters).await?;
        } else {
            learner::join(node_id, &config.address, &config.voters, &config.secret).await?;
        }
        tokio::spawn(until_stopped(
            stopped.clone(),
            quorum.clone().report_leadership(),
        ));
        tokio::spawn(until_stopped(
            stopped.clone(),
            election::stand_for_election(
                quorum.raft.clone(),
                contact,
                node_id,
                config.secret.clone(),
            ),
        ));
        if config.roles.is_broker() {
            tokio::spawn(until_stopped(
                stopped.clone(),
                quorum.clone().heartbeats(config.heartbeat_interval),
            ));
        }
        if let Some(rebalance) = config.leader_rebalance {
            tokio::spawn(until_stopped(
                stopped.clone(),
                quorum.clone().rebalance_leaders(rebalance),
            ));
        }
        tokio::spawn(until_stopped(
            stopped,
            quorum
                .clone()
                .fence_silent_brokers(config.heartbeat_interval, config.session_timeout),
        ));
        Ok(quorum)
    }

    /// Proposes the voters as the first membership when this node's log is empty.
    async fn bootstrap(&self, voters: &BTreeMap<i32, String>) -> Result<(), QuorumError> {
        let members: BTreeMap<u64, BasicNode> = voters
            .iter()
            .map(|(id, address)| (*id as u64, BasicNode::new(address)))
            .collect();
        match self.raft.initialize(members).await {
            Ok(()) => {
                tracing::info!(voters = ?voters, "metadata quorum formed");
                Ok(())
            }
            // Already a member of a formed quorum (a restart, or another voter was first).
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(QuorumError::Raft(e.to_string())),
        }
    }

    /// Says (log line, `kmirror_controller_active`) when this node becomes or stops being the
    /// active controller, as soon as Raft's metrics change.
    async fn report_leadership(self: Arc<Self>) {
        let mut metrics = self.raft.metrics();
        let mut active = false;
        metrics::gauge!(crate::metrics::CONTROLLER_ACTIVE).set(0.0);
        loop {
            let now = metrics.borrow_and_update().current_leader == Some(self.node_id);
            if now != active {
                active = now;
                if active {
                    tracing::info!("this node is the active controller");
                } else {
                    tracing::info!("this node is no longer the active controller");
                }
                metrics::gauge!(crate::metrics::CONTROLLER_ACTIVE).set(f64::from(u8::from(active)));
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// This node's broker registered (its registration applied): it heartbeats from now on.
    pub fn broker_registered(&self) {
        self.registered
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Tells the active controller, every `interval` once this node's broker registered, that
    /// it is alive.
    async fn heartbeats(self: Arc<Self>, interval: Duration) {
        let mut peer: Option<(u64, Peer)> = None;
        let mut tick = tokio::time::interval(interval);
        loop {
            tick.tick().await;
            if !self.registered.load(std::sync::atomic::Ordering::SeqCst) {
                continue;
            }
            let leader = {
                let metrics = self.raft.metrics();
                let metrics = metrics.borrow();
                metrics.current_leader.and_then(|id| {
                    let node = metrics.membership_config.membership().get_node(&id)?;
                    Some((id, node.addr.clone()))
                })
            };
            let Some((leader, address)) = leader else {
                continue;
            };
            if leader == self.node_id {
                liveness::heard(&self.live, self.node_id as i32, std::time::Instant::now());
                continue;
            }
            if peer.as_ref().is_none_or(|(id, _)| *id != leader) {
                peer = Some((leader, Peer::new(&address, self.secret.clone())));
            }
            if let Some((_, peer)) = peer.as_mut() {
                let beat = QuorumRequest::Heartbeat {
                    node_id: self.node_id as i32,
                };
                if let Err(e) = peer.call(&beat, interval).await {
                    tracing::debug!(controller = leader, error = %e, "heartbeat");
                }
            }
        }
    }

    /// While this node is the active controller, fences the brokers silent for `timeout` and
    /// unfences those heard again (see [`liveness`]).
    async fn fence_silent_brokers(self: Arc<Self>, interval: Duration, timeout: Duration) {
        let mut tick = tokio::time::interval(interval / 2);
        metrics::gauge!(crate::metrics::FENCED_BROKERS).set(0.0);
        metrics::gauge!(crate::metrics::OFFLINE_PARTITIONS).set(0.0);
        let mut last_tick = std::time::Instant::now();
        loop {
            tick.tick().await;
            let now = std::time::Instant::now();
            let pause = liveness::paused(last_tick, now, interval / 2, timeout);
            last_tick = now;
            let active = self.raft.metrics().borrow().current_leader == Some(self.node_id);
            let commands = {
                let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
                if !active {
                    if live.take().is_some() {
                        metrics::gauge!(crate::metrics::FENCED_BROKERS).set(0.0);
                        metrics::gauge!(crate::metrics::OFFLINE_PARTITIONS).set(0.0);
                    }
                    continue;
                }
                let sessions = live.get_or_insert_with(|| liveness::Sessions::new(now));
                if let Some(pause) = pause {
                    tracing::warn!(
                        ?pause,
                        "this controller did not run for a while: broker sessions are credited with its pause"
                    );
                    sessions.credit(pause, now);
                }
                let image = self.image.lock().unwrap_or_else(|e| e.into_inner());
                for (node_id, broker) in image.brokers() {
                    sessions.registered(*node_id, broker.epoch, now);
                }
                metrics::gauge!(crate::metrics::FENCED_BROKERS).set(image.fenced().len() as f64);
                metrics::gauge!(crate::metrics::OFFLINE_PARTITIONS)
                    .set(image.offline_partitions() as f64);
                liveness::decide(
                    now,
                    sessions,
                    image.brokers().keys().copied(),
                    image.fenced(),
                    timeout,
                )
            };
            for command in commands {
                tracing::warn!(?command, "broker liveness changed");
                if let Err(e) = self.write(command).await {
                    tracing::warn!(error = %e, "recording a broker's liveness");
                }
            }
        }
    }

    /// While this node is the active controller, every `rebalance.interval` moves leadership
    /// back to the preferred replicas of the brokers that lead too few of their partitions
    /// (Kafka's automatic leader rebalance, docs/replication.md §3).
    async fn rebalance_leaders(self: Arc<Self>, rebalance: LeaderRebalance) {
        let mut tick = tokio::time::interval(rebalance.interval);
        // The first tick is at once: a start waits a whole interval, as Kafka's does.
        tick.tick().await;
        loop {
            tick.tick().await;
            if self.raft.metrics().borrow().current_leader != Some(self.node_id) {
                continue;
            }
            let moves = self
                .image
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .imbalanced(rebalance.imbalance_percentage);
            if moves.is_empty() {
                continue;
            }
            let count = moves.len();
            let command = MetadataCommand::ElectLeaders {
                election: crate::controller::ElectionType::Preferred,
                partitions: Some(moves),
            };
            match self.write(command).await {
                Ok(_) => {
                    tracing::info!(
                        partitions = count,
                        "leader rebalance: preferred replicas lead again"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "leader rebalance"),
            }
        }
    }

    /// Resolves when Raft stopped for good on this node (a storage failure, a log that cannot
    /// be reconciled with the quorum's): why. The node must then stop rather than serve a
    /// metadata image that no longer follows the quorum.
    pub async fn failed(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(e) = &metrics.borrow_and_update().running_state {
                return e.to_string();
            }
            if metrics.changed().await.is_err() {
                return "the metadata quorum stopped".to_string();
            }
        }
    }

    /// The node the cluster's clients are told is the controller (Kafka's admin clients send
    /// it their CreateTopics): the active controller, or `fallback` while it is not known.
    pub fn active_or(&self, fallback: i32) -> i32 {
        self.leader().unwrap_or(fallback)
    }

    /// The active controller's node id, if this node knows one.
    pub fn leader(&self) -> Option<i32> {
        self.raft
            .metrics()
            .borrow()
            .current_leader
            .map(|id| id as i32)
    }

    /// This node's image of the metadata (changed only by the quorum).
    pub fn image(&self) -> &Arc<Mutex<Controller>> {
        &self.image
    }

    /// Commits `command` through the active controller and waits until this node applied it
    /// (see the module doc).
    pub async fn write(&self, command: MetadataCommand) -> Outcome {
        let deadline = tokio::time::Instant::now() + self.request_timeout;
        let mut last;
        loop {
            match self.raft.client_write(command.clone()).await {
                Ok(written) => return written.data.0,
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                    match (to.leader_id, to.leader_node) {
                        (Some(leader), Some(node)) if leader != self.node_id => {
                            match self.forward(&node.addr, &command, deadline).await {
                                Ok(Some(outcome)) => return outcome,
                                Ok(None) => {
                                    last = format!("controller {leader} is no longer active")
                                }
                                Err(e @ CallError::Unreachable { .. }) => last = e.to_string(),
                                Err(e @ CallError::Broken { .. }) => {
                                    return Err(ControllerError::Unavailable(format!(
                                        "the active controller {leader} did not answer ({e}); \
                                         the change may or may not be applied"
                                    )));
                                }
                            }
                        }
                        _ => {
                            last = "no active controller (an election is under way, or fewer \
                                    than a majority of the voters are up)"
                                .to_string()
                        }
                    }
                }
                Err(e) => {
                    return Err(ControllerError::Unavailable(format!(
                        "the metadata quorum failed: {e}"
                    )));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ControllerError::Unavailable(format!(
                    "no active controller committed the change within {:?}: {last}",
                    self.request_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A connection to the controller at `address` for one forwarded write: a kept one used
    /// lately, else a new one (connected and authenticated on first use).
    fn forwarder(&self, address: &str) -> Peer {
        let mut kept = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(_, used, _)| used.elapsed() < FORWARDER_FRESH);
        match kept.iter().position(|(a, _, _)| a == address) {
            Some(i) => kept.swap_remove(i).2,
            None => Peer::new(address, self.secret.clone()),
        }
    }

    /// Keeps a connection whose call was answered, for the next forwarded write.
    fn keep_forwarder(&self, address: &str, peer: Peer) {
        let mut kept = self.forwarders.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < FORWARDERS_KEPT {
            kept.push((address.to_string(), tokio::time::Instant::now(), peer));
        }
    }

    /// Forwards `command` to the controller at `address`: its outcome once this node applied
    /// it too, or `None` when that controller is not active (nothing was written).
    async fn forward(
        &self,
        address: &str,
        command: &MetadataCommand,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Outcome>, CallError> {
        let within = deadline.saturating_duration_since(tokio::time::Instant::now());
        let request = QuorumRequest::Forward(command.clone());
        let broken = |reason: String| CallError::Broken {
            address: address.to_string(),
            reason,
        };
        let mut peer = self.forwarder(address);
        let answer = peer.call(&request, within).await?;
        self.keep_forwarder(address, peer);
        match answer {
            QuorumResponse::Forwarded(Forwarded::Applied { index, outcome }) => {
                let within = deadline.saturating_duration_since(tokio::time::Instant::now());
                self.raft
                    .wait(Some(within))
                    .applied_index_at_least(Some(index), "a forwarded metadata change")
                    .await
                    .map_err(|e| broken(format!("committed at {index}, not applied here: {e}")))?;
                Ok(Some(outcome))
            }
            QuorumResponse::Forwarded(Forwarded::NotLeader { .. }) => Ok(None),
            QuorumResponse::Forwarded(Forwarded::Failed(why)) => Err(broken(why)),
            other => Err(broken(format!("answered out of turn: {other:?}"))),
        }
    }

    /// Stops taking part: the listener closes and Raft shuts down.
    pub async fn shutdown(&self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "stopping the metadata quorum");
        }
    }
}
