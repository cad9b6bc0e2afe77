//! The controller listener: answers other controllers' Raft RPCs and, on the active controller,
//! commits the metadata changes other nodes forward and admits broker-only nodes as learners
//! (docs/cluster.md).
//!
//! Protections:
//! - With a shared secret, nothing is read or answered before the connection's handshake
//!   ([`super::auth`]) proves the other side knows it. A handshake must finish within
//!   [`HANDSHAKE_WITHIN`] with frames of a few hundred bytes, and at most [`MAX_PENDING`]
//!   connections wait in one: a new connection evicts the oldest waiting one, so strangers
//!   holding connections open cannot keep a node out (its handshake takes a round trip).
//! - At most [`MAX_CONNECTIONS`] connections are served at once (more are closed on accept or
//!   after their handshake); a connection silent for [`IDLE`] is closed (peers heartbeat far
//!   more often), and a frame must arrive whole within [`IDLE`] too.
//! - Refusals are logged at most once per [`WARN_EVERY`], with how many were not.

use super::auth::{QuorumSecret, server_handshake};
use super::election::{self, Contact};
use super::frame::{read_frame, write_frame};
use super::liveness::Live;
use super::messages::{Forwarded, QuorumRequest, QuorumResponse};
use super::types::MetadataRaft;
use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::AppendEntriesResponse;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::AbortHandle;

/// The most controller connections served at once (a cluster's nodes need a few each).
pub(super) const MAX_CONNECTIONS: usize = 256;
/// How long a connection may stay silent, or take to send one frame.
pub(super) const IDLE: Duration = Duration::from_secs(30);
/// How long a connection may take to prove the secret.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(5);
/// The most connections in their handshake at once.
const MAX_PENDING: usize = 32;
/// How often a kind of refusal is logged.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A warning logged at most once per [`WARN_EVERY`], counting the ones left out.
#[derive(Default)]
struct Throttle {
    last: Mutex<Option<Instant>>,
    left_out: AtomicU64,
}

impl Throttle {
    /// Calls `warn` with how many were left out since the last one, if one is due.
    fn warn(&self, warn: impl FnOnce(u64)) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < WARN_EVERY) {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        warn(self.left_out.swap(0, Ordering::Relaxed));
    }
}

/// What every connection of the listener shares.
struct Shared {
    raft: Raft<MetadataRaft>,
    /// When this node last heard an active controller (for pre-votes).
    contact: Contact,
    live: Live,
    /// `broker.session.timeout.ms`: a learner heard within it is alive.
    session_timeout: Duration,
    secret: Option<QuorumSecret>,
    slots: Arc<Semaphore>,
    /// Connections in their handshake, oldest first.
    pending: Mutex<VecDeque<(u64, AbortHandle)>>,
    refused: Throttle,
    crowded: Throttle,
}

impl Shared {
    /// A slot for a connection to be served, or `None` (logged) when all are taken.
    fn slot(&self, peer: SocketAddr) -> Option<OwnedSemaphorePermit> {
        let slot = self.slots.clone().try_acquire_owned().ok();
        if slot.is_none() {
            self.crowded.warn(|left_out| {
                tracing::warn!(%peer, limit = MAX_CONNECTIONS, left_out, "too many controller connections: closing a new one");
            });
        }
        slot
    }
}

/// Accepts controller connections until `stop` turns true.
pub(super) async fn serve(
    listener: TcpListener,
    raft: Raft<MetadataRaft>,
    contact: Contact,
    live: Live,
    session_timeout: Duration,
    secret: Option<QuorumSecret>,
    mut stop: watch::Receiver<bool>,
) {
    let shared = Arc::new(Shared {
        raft,
        contact,
        live,
        session_timeout,
        secret,
        slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        pending: Mutex::new(VecDeque::new()),
        refused: Throttle::default(),
        crowded: Throttle::default(),
    });
    let mut next_id = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    next_id += 1;
                    accept(&shared, next_id, stream, peer);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a controller connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            // Any change (or the quorum gone) means stop.
            _ = stop.changed() => return,
        }
    }
}

/// Serves one accepted connection: after its handshake when the nodes share a secret.
fn accept(shared: &Arc<Shared>, id: u64, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let Some(secret) = shared.secret.clone() else {
        if let Some(slot) = shared.slot(peer) {
            tokio::spawn(serve_connection(shared.clone(), stream, peer, slot));
        }
        return;
    };
    let mut pending = shared.pending.lock().unwrap_or_else(|e| e.into_inner());
    if pending.len() >= MAX_PENDING
        && let Some((_, oldest)) = pending.pop_front()
    {
        oldest.abort();
        shared.refused.warn(|left_out| {
            tracing::warn!(%peer, limit = MAX_PENDING, left_out, "refused a controller connection: evicted the oldest of those waiting in their handshake");
        });
    }
    let task_shared = shared.clone();
    let task = tokio::spawn(async move {
        let proven = tokio::time::timeout(HANDSHAKE_WITHIN, server_handshake(&mut stream, &secret))
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("no handshake within {HANDSHAKE_WITHIN:?}"),
                ))
            });
        task_shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(pending, _)| *pending != id);
        match proven {
            Ok(()) => {
                if let Some(slot) = task_shared.slot(peer) {
                    serve_connection(task_shared, stream, peer, slot).await;
                }
            }
            Err(e) => task_shared.refused.warn(|left_out| {
                tracing::warn!(%peer, error = %e, left_out, "refused a controller connection");
            }),
        }
    });
    pending.push_back((id, task.abort_handle()));
}

/// Answers an accepted connection until it ends, holding its slot.
async fn serve_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
) {
    if let Err(e) = connection(stream, &shared).await {
        tracing::debug!(%peer, error = %e, "controller connection ended");
    }
    drop(slot);
}

/// Answers one connection's requests in turn, until it closes or sends something that is not a
/// quorum frame.
async fn connection(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    loop {
        let request = tokio::time::timeout(IDLE, read_frame::<QuorumRequest>(&mut stream))
            .await
            .map_err(|_| std::io::Error::other(format!("silent for {IDLE:?}")))??;
        let Some(request) = request else {
            return Ok(());
        };
        let response = answer(shared, request).await;
        write_frame(&mut stream, &response).await?;
    }
}

async fn answer(shared: &Shared, request: QuorumRequest) -> QuorumResponse {
    let (raft, live) = (&shared.raft, &shared.live);
    match request {
        QuorumRequest::Heartbeat { node_id } => QuorumResponse::Heartbeat {
            counted: super::liveness::heard(live, node_id, std::time::Instant::now()),
        },
        // What openraft accepted from an active controller, and a vote granted, put off this
        // node's own candidacy (election.rs).
        QuorumRequest::AppendEntries(rpc) => {
            let answer = raft.append_entries(rpc).await;
            if matches!(&answer, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
                shared.contact.heard(Instant::now());
            }
            QuorumResponse::AppendEntries(answer)
        }
        QuorumRequest::Vote(rpc) => {
            let answer = raft.vote(rpc).await;
            if matches!(&answer, Ok(a) if a.vote_granted) {
                shared.contact.heard(Instant::now());
            }
            QuorumResponse::Vote(answer)
        }
        QuorumRequest::ReplicatedTo { node_id } => QuorumResponse::ReplicatedTo {
            index: super::lost_log::replicated_to(raft, node_id),
        },
        QuorumRequest::PreVote {
            candidate,
            last_applied,
        } => {
            let granted = election::answer(raft, &shared.contact, last_applied);
            tracing::debug!(candidate, granted, "pre-vote");
            QuorumResponse::PreVote { granted }
        }
        QuorumRequest::InstallSnapshot(rpc) => {
            let answer = raft.install_snapshot(rpc).await;
            if answer.is_ok() {
                shared.contact.heard(Instant::now());
            }
            QuorumResponse::InstallSnapshot(answer)
        }
        QuorumRequest::Join { node_id, address } => {
            let alive = super::liveness::alive(
                live,
                node_id as i32,
                std::time::Instant::now(),
                shared.session_timeout,
            );
            QuorumResponse::Joined(super::learner::admit(raft, node_id, address, alive).await)
        }
        QuorumRequest::Forward(command) => {
            QuorumResponse::Forwarded(match raft.client_write(command).await {
                Ok(written) => Forwarded::Applied {
                    index: written.log_id.index,
                    outcome: written.data.0,
                },
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                    Forwarded::NotLeader {
                        leader: to.leader_id,
                    }
                }
                Err(e) => Forwarded::Failed(e.to_string()),
            })
        }
    }
}
