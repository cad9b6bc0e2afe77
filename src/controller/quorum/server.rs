//! The controller listener: answers other controllers' Raft RPCs and, on the active controller,
//! commits the metadata changes other nodes forward and admits broker-only nodes as learners
//! (docs/cluster.md).
//!
//! Protections: with a shared secret, nothing is read or answered before the connection's
//! handshake ([`super::auth`]) proves the other side knows it; at most [`MAX_CONNECTIONS`] connections at once (more are closed on accept), a
//! connection silent for [`IDLE`] is closed (peers heartbeat far more often), and a frame must
//! arrive whole within [`IDLE`] too, so a slow or stray client cannot hold the listener.

use super::auth::{QuorumSecret, server_handshake};
use super::liveness::Live;
use super::network::{Forwarded, QuorumRequest, QuorumResponse, read_frame, write_frame};
use super::types::MetadataRaft;
use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// The most controller connections served at once (a cluster's nodes need a few each).
pub(super) const MAX_CONNECTIONS: usize = 256;
/// How long a connection may stay silent, or take to send one frame.
pub(super) const IDLE: Duration = Duration::from_secs(30);

/// Accepts controller connections until `stop` turns true.
pub(super) async fn serve(
    listener: TcpListener,
    raft: Raft<MetadataRaft>,
    live: Live,
    secret: Option<QuorumSecret>,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, limit = MAX_CONNECTIONS, "too many controller connections: closing a new one");
                        continue;
                    };
                    let (raft, live, secret) = (raft.clone(), live.clone(), secret.clone());
                    tokio::spawn(async move {
                        match connection(stream, &raft, &live, secret.as_ref()).await {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                                tracing::warn!(%peer, error = %e, "refused a controller connection");
                            }
                            Err(e) => {
                                tracing::debug!(%peer, error = %e, "controller connection ended");
                            }
                        }
                        drop(slot);
                    });
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

/// Answers one connection's requests in turn, until it closes or sends something that is not a
/// quorum frame.
async fn connection(
    mut stream: TcpStream,
    raft: &Raft<MetadataRaft>,
    live: &Live,
    secret: Option<&QuorumSecret>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    if let Some(secret) = secret {
        tokio::time::timeout(IDLE, server_handshake(&mut stream, secret))
            .await
            .map_err(|_| std::io::Error::other(format!("no handshake within {IDLE:?}")))??;
    }
    loop {
        let request = tokio::time::timeout(IDLE, read_frame::<QuorumRequest>(&mut stream))
            .await
            .map_err(|_| std::io::Error::other(format!("silent for {IDLE:?}")))??;
        let Some(request) = request else {
            return Ok(());
        };
        let response = answer(raft, live, request).await;
        write_frame(&mut stream, &response).await?;
    }
}

async fn answer(raft: &Raft<MetadataRaft>, live: &Live, request: QuorumRequest) -> QuorumResponse {
    match request {
        QuorumRequest::Heartbeat { node_id } => QuorumResponse::Heartbeat {
            counted: super::liveness::heard(live, node_id, std::time::Instant::now()),
        },
        QuorumRequest::AppendEntries(rpc) => {
            QuorumResponse::AppendEntries(raft.append_entries(rpc).await)
        }
        QuorumRequest::Vote(rpc) => QuorumResponse::Vote(raft.vote(rpc).await),
        QuorumRequest::InstallSnapshot(rpc) => {
            QuorumResponse::InstallSnapshot(raft.install_snapshot(rpc).await)
        }
        QuorumRequest::Join { node_id, address } => {
            QuorumResponse::Joined(super::learner::admit(raft, node_id, address).await)
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
