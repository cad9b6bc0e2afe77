//! The controller listener: answers other controllers' Raft RPCs and, on the active controller,
//! commits the metadata changes other nodes forward (docs/cluster.md).

use super::liveness::Live;
use super::network::{Forwarded, QuorumRequest, QuorumResponse, read_frame, write_frame};
use super::types::MetadataRaft;
use openraft::Raft;
use openraft::error::{ClientWriteError, RaftError};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Accepts controller connections until `stop` turns true.
pub(super) async fn serve(
    listener: TcpListener,
    raft: Raft<MetadataRaft>,
    live: Live,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (raft, live) = (raft.clone(), live.clone());
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, &raft, &live).await {
                            tracing::debug!(%peer, error = %e, "controller connection ended");
                        }
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
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    while let Some(request) = read_frame::<QuorumRequest>(&mut stream).await? {
        let response = answer(raft, live, request).await;
        write_frame(&mut stream, &response).await?;
    }
    Ok(())
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
