//! Where a `__mirror_state` shard lives, as a mirror partition's ports see it: a shard actor
//! on this broker, or the broker of the cluster that leads the shard's partition, reached with
//! ReadMirrorStates / WriteMirrorStates over TCP.
//!
//! A remote shard's connection is opened on first use and dropped after a failure, so the next
//! request connects again; every failure is retryable for the partition (its state machine
//! tries again after its backoff).

use super::state_log::StateLogPorts;
use crate::actor::{CoordinatorShard, ReadMirrorStates, WriteMirrorStates};
use crate::host::Host;
use crate::partition::Cause;
use actix::Addr;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, ClientError};
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse,
};
use std::sync::Arc;

/// One shard, local or remote.
pub enum ShardRoute<H: Host> {
    /// The shard's actor on this broker.
    Local(Addr<CoordinatorShard<StateLogPorts<H>>>),
    /// The broker that leads the shard.
    Remote(Arc<RemoteShard>),
}

impl<H: Host> Clone for ShardRoute<H> {
    fn clone(&self) -> Self {
        match self {
            ShardRoute::Local(addr) => ShardRoute::Local(addr.clone()),
            ShardRoute::Remote(remote) => ShardRoute::Remote(remote.clone()),
        }
    }
}

impl<H: Host> std::fmt::Debug for ShardRoute<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardRoute::Local(_) => f.write_str("Local"),
            ShardRoute::Remote(remote) => write!(f, "Remote({})", remote.address),
        }
    }
}

/// A shard led by another broker of the cluster.
#[derive(Debug)]
pub struct RemoteShard {
    address: String,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl RemoteShard {
    /// The shard led by the broker at `address` (`host:port`).
    pub fn new(address: String) -> Self {
        RemoteShard {
            address,
            connection: tokio::sync::Mutex::new(None),
        }
    }

    async fn connection(&self) -> Result<Arc<Connection>, Cause> {
        let mut cached = self.connection.lock().await;
        if let Some(connection) = cached.as_ref() {
            return Ok(connection.clone());
        }
        let connection =
            Connection::connect(&self.address, &ClientConfig::plaintext(&self.address), None)
                .await
                .map_err(|e| {
                    Cause::retryable(format!("the coordinator at {}: {e}", self.address))
                })?;
        let connection = Arc::new(connection);
        *cached = Some(connection.clone());
        Ok(connection)
    }

    /// Sends one request with `send`, which answers the response's top-level error code and
    /// the response; a failed connection is dropped so the next call connects again.
    async fn call<T>(
        &self,
        send: impl AsyncFnOnce(Arc<Connection>) -> Result<(i16, T), ClientError>,
    ) -> Result<T, Cause> {
        let connection = self.connection().await?;
        match send(connection).await {
            Ok((0, answer)) => Ok(answer),
            Ok((code, _)) => Err(Cause::retryable(format!(
                "the coordinator at {} answered error {code}",
                self.address
            ))),
            Err(e) => {
                *self.connection.lock().await = None;
                Err(Cause::retryable(format!(
                    "the coordinator at {}: {e}",
                    self.address
                )))
            }
        }
    }
}

impl<H: Host> ShardRoute<H> {
    /// ReadMirrorStates on the shard.
    pub async fn read(
        &self,
        request: ReadMirrorStatesRequest,
    ) -> Result<ReadMirrorStatesResponse, Cause> {
        match self {
            ShardRoute::Local(shard) => shard
                .send(ReadMirrorStates(request))
                .await
                .map_err(|e| Cause::retryable(format!("the coordinator shard: {e}"))),
            ShardRoute::Remote(remote) => {
                remote
                    .call(async |c| {
                        let (_, answer) = c.send("ReadMirrorStates", &request, 0).await?;
                        Ok((answer.error_code, answer))
                    })
                    .await
            }
        }
    }

    /// WriteMirrorStates on the shard (answered once durable).
    pub async fn write(
        &self,
        request: WriteMirrorStatesRequest,
    ) -> Result<WriteMirrorStatesResponse, Cause> {
        match self {
            ShardRoute::Local(shard) => shard
                .send(WriteMirrorStates(request))
                .await
                .map_err(|e| Cause::retryable(format!("the coordinator shard: {e}"))),
            ShardRoute::Remote(remote) => {
                remote
                    .call(async |c| {
                        let (_, answer) = c.send("WriteMirrorStates", &request, 0).await?;
                        Ok((answer.error_code, answer))
                    })
                    .await
            }
        }
    }
}
