//! The quorum's wire: Raft's RPCs between controllers and metadata writes forwarded to the
//! active controller, over TCP on each controller's listener (docs/cluster.md).
//!
//! A connection starts with [`super::auth`]'s handshake when the nodes share a secret. Each
//! request ([`super::messages`]) is one frame ([`super::frame`]), answered by one response on
//! the same connection, one request in flight per connection.
//!
//! Contract: a failure before the request was written ([`CallError::Unreachable`]) left nothing
//! done, and the caller may try elsewhere; a failure after it ([`CallError::Broken`]) leaves the
//! outcome unknown.

use super::auth::{QuorumSecret, client_handshake};
use super::frame::{read_frame, write_frame};
use super::messages::{QuorumRequest, QuorumResponse};
use super::types::MetadataRaft;
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use std::time::Duration;
use tokio::net::TcpStream;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    /// Nothing was sent (no connection).
    #[error("cannot reach {address}: {reason}")]
    Unreachable { address: String, reason: String },
    /// The request may have been received; no answer came.
    #[error("no answer from {address}: {reason}")]
    Broken { address: String, reason: String },
}

/// A connection to one controller, opened on first use (and authenticated, with a secret) and
/// again after a failure.
#[derive(Debug)]
pub(super) struct Peer {
    address: String,
    secret: Option<QuorumSecret>,
    stream: Option<TcpStream>,
}

impl Peer {
    pub(super) fn new(address: &str, secret: Option<QuorumSecret>) -> Peer {
        Peer {
            address: address.to_string(),
            secret,
            stream: None,
        }
    }

    /// A new connection, through the handshake when the nodes share a secret.
    async fn connect(&self) -> std::io::Result<TcpStream> {
        let mut stream = TcpStream::connect(&self.address).await?;
        let _ = stream.set_nodelay(true);
        if let Some(secret) = &self.secret {
            client_handshake(&mut stream, secret).await?;
        }
        Ok(stream)
    }

    /// Sends `request` and waits for its answer, all within `within`.
    pub(super) async fn call(
        &mut self,
        request: &QuorumRequest,
        within: Duration,
    ) -> Result<QuorumResponse, CallError> {
        let address = self.address.clone();
        let unreachable = |reason: String| CallError::Unreachable {
            address: address.clone(),
            reason,
        };
        let broken = |reason: String| CallError::Broken {
            address: address.clone(),
            reason,
        };
        let deadline = tokio::time::Instant::now() + within;
        // A kept connection the other side closed (it restarted, or closed an idle one) is
        // replaced before anything is sent on it, so its loss never looks like a lost request.
        let kept = self.stream.take().filter(still_open);
        let mut stream = match kept {
            Some(stream) => stream,
            None => tokio::time::timeout_at(deadline, self.connect())
                .await
                .map_err(|_| unreachable(format!("no connection within {within:?}")))?
                .map_err(|e| unreachable(e.to_string()))?,
        };
        let exchange = async {
            write_frame(&mut stream, request).await?;
            read_frame::<QuorumResponse>(&mut stream).await
        };
        match tokio::time::timeout_at(deadline, exchange).await {
            Ok(Ok(Some(response))) => {
                self.stream = Some(stream);
                Ok(response)
            }
            Ok(Ok(None)) => Err(broken("the connection closed".into())),
            Ok(Err(e)) => Err(broken(e.to_string())),
            Err(_) => Err(broken(format!("no answer within {within:?}"))),
        }
    }
}

/// Whether a kept connection is still open: nothing to read (an answer is only ever read
/// after a request), neither an end nor an error.
fn still_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Makes a [`Peer`] per controller for Raft's replication.
#[derive(Debug)]
pub(super) struct Network {
    secret: Option<QuorumSecret>,
}

impl Network {
    pub(super) fn new(secret: Option<QuorumSecret>) -> Network {
        Network { secret }
    }
}

impl RaftNetworkFactory<MetadataRaft> for Network {
    type Network = RaftPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> RaftPeer {
        RaftPeer {
            target,
            peer: Peer::new(&node.addr, self.secret.clone()),
        }
    }
}

/// Raft's RPCs to one controller.
#[derive(Debug)]
pub(super) struct RaftPeer {
    target: u64,
    peer: Peer,
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

impl RaftPeer {
    async fn rpc<E: std::error::Error>(
        &mut self,
        request: QuorumRequest,
        option: &RPCOption,
    ) -> Result<QuorumResponse, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        match self.peer.call(&request, option.hard_ttl()).await {
            Ok(response) => Ok(response),
            Err(e @ CallError::Unreachable { .. }) => {
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e @ CallError::Broken { .. }) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }

    fn unexpected<E: std::error::Error>(
        &self,
        response: QuorumResponse,
    ) -> RPCError<u64, BasicNode, RaftError<u64, E>> {
        let e = std::io::Error::other(format!(
            "controller {} answered out of turn: {response:?}",
            self.target
        ));
        RPCError::Network(NetworkError::new(&e))
    }

    // The error type is openraft's, as `RaftNetwork` returns it.
    #[allow(clippy::result_large_err)]
    fn remote<T, E: std::error::Error>(
        &self,
        answer: Result<T, RaftError<u64, E>>,
    ) -> RpcResult<T, E> {
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<MetadataRaft> for RaftPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MetadataRaft>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>> {
        match self.rpc(QuorumRequest::AppendEntries(rpc), &option).await? {
            QuorumResponse::AppendEntries(answer) => self.remote(answer),
            other => Err(self.unexpected(other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MetadataRaft>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        match self
            .rpc(QuorumRequest::InstallSnapshot(rpc), &option)
            .await?
        {
            QuorumResponse::InstallSnapshot(answer) => self.remote(answer),
            other => Err(self.unexpected(other)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>> {
        match self.rpc(QuorumRequest::Vote(rpc), &option).await? {
            QuorumResponse::Vote(answer) => self.remote(answer),
            other => Err(self.unexpected(other)),
        }
    }
}
