//! Where a `__mirror_state` shard lives, as a mirror partition's ports see it: a shard actor
//! on this broker, or the broker of the cluster that leads the shard's partition, reached with
//! ReadMirrorStates / WriteMirrorStates over TCP. Every partition of a shard shares one
//! [`ShardRoute`], which the system re-points when the shard's leadership moves (a broker that
//! comes to lead it starts its actor, which loads by replay).
//!
//! A remote shard's connection is opened on first use and dropped after a failure or once the
//! other side closed it (its broker restarted), so the next request connects again; a request
//! waits [`SHARD_REQUEST_TIMEOUT`] at most (a frozen broker's shards move within its session
//! timeout); every failure is retryable for the partition (its state machine tries again after
//! its backoff).

#[cfg(test)]
mod tests;

use super::state_log::StateLogPorts;
use crate::actor::{CoordinatorShard, ReadState, WriteStates};
use crate::coordinator::{PartitionKey, StateRead, StateWrite};
use crate::host::Host;
use crate::partition::{Cause, StoredState};
use actix::Addr;
use kmirror_protocol::client::connection::Connection;
use kmirror_protocol::client::{ClientConfig, ClientError};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, WriteMirrorStatesRequest, read_mirror_states_request,
    write_mirror_states_request,
};
use kmirror_protocol::state::MirrorState;
use std::sync::Arc;
use std::time::Duration;

/// How long a request to a remote shard may take: shorter than a client's 30 s, since a
/// partition waiting on a frozen broker should retry at the shard's new leader soon.
pub const SHARD_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where one shard is now: its actor here, or the broker leading it.
pub enum Route<H: Host> {
    /// The shard's actor on this broker, started at this leader epoch of its partition.
    Local(Addr<CoordinatorShard<StateLogPorts<H>>>, i32),
    /// The broker that leads the shard.
    Remote(Arc<RemoteShard>),
}

impl<H: Host> Clone for Route<H> {
    fn clone(&self) -> Self {
        match self {
            Route::Local(addr, epoch) => Route::Local(addr.clone(), *epoch),
            Route::Remote(remote) => Route::Remote(remote.clone()),
        }
    }
}

/// One shard's route, shared by every partition whose state it holds: when the shard's
/// leadership moves, [`ShardRoute::set`] re-routes all of them at once (docs/replication.md §6).
pub struct ShardRoute<H: Host>(Arc<std::sync::Mutex<Route<H>>>);

impl<H: Host> ShardRoute<H> {
    /// A route to `route`.
    pub fn new(route: Route<H>) -> Self {
        ShardRoute(Arc::new(std::sync::Mutex::new(route)))
    }

    /// Where the shard is now.
    pub fn current(&self) -> Route<H> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The shard is now at `route`, for every holder of this route.
    pub fn set(&self, route: Route<H>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = route;
    }

    /// The shard's actor, when it runs here.
    pub fn local(&self) -> Option<Addr<CoordinatorShard<StateLogPorts<H>>>> {
        match self.current() {
            Route::Local(addr, _) => Some(addr),
            Route::Remote(_) => None,
        }
    }
}

/// Whether this broker leads the coordinator shard of `mirror` among `shards` (none loaded:
/// no).
pub fn coordinates<H: Host>(shards: &[ShardRoute<H>], mirror: &str) -> bool {
    if shards.is_empty() {
        return false;
    }
    let index = kmirror_protocol::sharding::mirror_shard(mirror, shards.len() as i32);
    shards
        .get(index as usize)
        .is_some_and(|s| s.local().is_some())
}

impl<H: Host> Clone for ShardRoute<H> {
    fn clone(&self) -> Self {
        ShardRoute(self.0.clone())
    }
}

impl<H: Host> std::fmt::Debug for Route<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Local(_, epoch) => write!(f, "Local(epoch {epoch})"),
            Route::Remote(remote) => write!(f, "Remote({})", remote.address()),
        }
    }
}

impl<H: Host> std::fmt::Debug for ShardRoute<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.current().fmt(f)
    }
}

/// A shard led by another broker of the cluster.
#[derive(Debug)]
pub struct RemoteShard {
    /// `host:port` of the broker leading the shard, followed as it changes (a broker-only
    /// node that joins again may come back at another address).
    address: std::sync::Mutex<String>,
    /// The open connection, with the address it reaches.
    connection: tokio::sync::Mutex<Option<(String, Arc<Connection>)>>,
}

impl RemoteShard {
    /// The shard led by the broker at `address` (`host:port`).
    pub fn new(address: String) -> Self {
        RemoteShard {
            address: std::sync::Mutex::new(address),
            connection: tokio::sync::Mutex::new(None),
        }
    }

    /// Where the shard's broker is now.
    pub fn address(&self) -> String {
        self.address
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The shard's broker is now at `address`: the next request connects there (every
    /// partition sharing this route follows at once).
    pub fn readdress(&self, address: String) {
        *self.address.lock().unwrap_or_else(|e| e.into_inner()) = address;
    }

    async fn connection(&self) -> Result<Arc<Connection>, Cause> {
        let address = self.address();
        let mut cached = self.connection.lock().await;
        if let Some((at, connection)) = cached.as_ref()
            && *at == address
            && connection.is_alive()
        {
            return Ok(connection.clone());
        }
        let mut config = ClientConfig::plaintext(&address);
        config.request_timeout = SHARD_REQUEST_TIMEOUT;
        let connection = Connection::connect(&address, &config, None)
            .await
            .map_err(|e| Cause::retryable(format!("the coordinator at {address}: {e}")))?;
        let connection = Arc::new(connection);
        *cached = Some((address, connection.clone()));
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
                self.address()
            ))),
            Err(e) => {
                *self.connection.lock().await = None;
                Err(Cause::retryable(format!(
                    "the coordinator at {}: {e}",
                    self.address()
                )))
            }
        }
    }
}

impl<H: Host> ShardRoute<H> {
    /// A partition's stored state and LME: `Ok(Err(code))` when the shard answered that it
    /// cannot (loading, not the coordinator), `Err` when it could not be asked. A local shard
    /// is asked directly; a remote one with one ReadMirrorStates.
    pub async fn read_state(
        &self,
        key: PartitionKey,
        topic: &str,
    ) -> Result<Result<StateRead, ErrorCode>, Cause> {
        match self.current() {
            Route::Local(shard, _) => shard
                .send(ReadState {
                    key,
                    topic: topic.to_string(),
                })
                .await
                .map_err(|e| Cause::retryable(format!("the coordinator shard: {e}"))),
            Route::Remote(remote) => {
                let request = ReadMirrorStatesRequest {
                    mirror_name: key.mirror.clone(),
                    topics: vec![read_mirror_states_request::Topic {
                        topic_id: key.topic_id,
                        name: topic.to_string(),
                        partitions: vec![read_mirror_states_request::Partition {
                            partition_index: key.partition,
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let answer = remote
                    .call(async |c| {
                        let (_, answer) = c.send("ReadMirrorStates", &request, 0).await?;
                        Ok((answer.error_code, answer))
                    })
                    .await?;
                let p = answer
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .next()
                    .ok_or_else(|| Cause::retryable("the coordinator answered nothing"))?;
                if p.error_code != 0 {
                    return Ok(Err(ErrorCode(p.error_code)));
                }
                let state = MirrorState::from_wire(p.state).unwrap_or(MirrorState::Unknown);
                let stored = (state != MirrorState::Unknown).then(|| StoredState {
                    state,
                    previous: MirrorState::from_wire(p.previous_state)
                        .unwrap_or(MirrorState::Unknown),
                    retry_attempt: p.retry_attempt,
                    error: p.error_message,
                    leader_epoch: p.leader_epoch,
                });
                Ok(Ok(StateRead {
                    stored,
                    lme: (p.last_mirror_epoch >= 0).then_some(p.last_mirror_epoch),
                }))
            }
        }
    }

    /// Writes a partition's state (and LME) once durable. A newer leader's record fences it
    /// (fatal: this broker no longer leads the partition); anything else is retryable.
    pub async fn write_state(&self, mirror: &str, write: StateWrite) -> Result<(), Cause> {
        let code = match self.current() {
            Route::Local(shard, _) => shard
                .send(WriteStates {
                    mirror: mirror.to_string(),
                    writes: vec![write],
                })
                .await
                .map_err(|e| Cause::retryable(format!("the coordinator shard: {e}")))?
                .into_iter()
                .next()
                .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
            Route::Remote(remote) => {
                let request = WriteMirrorStatesRequest {
                    mirror_name: mirror.to_string(),
                    topics: vec![write_mirror_states_request::Topic {
                        topic_id: write.topic_id,
                        name: write.topic,
                        partitions: vec![write_mirror_states_request::Partition {
                            partition_index: write.partition,
                            leader_epoch: write.stored.leader_epoch,
                            state: write.stored.state.wire_value(),
                            previous_state: write.stored.previous.wire_value(),
                            retry_attempt: write.stored.retry_attempt,
                            error_message: write.stored.error,
                            last_mirror_epoch: write.lme.unwrap_or(-1),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                let answer = remote
                    .call(async |c| {
                        let (_, answer) = c.send("WriteMirrorStates", &request, 0).await?;
                        Ok((answer.error_code, answer))
                    })
                    .await?;
                answer
                    .topics
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .next()
                    .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |p| ErrorCode(p.error_code))
            }
        };
        match code {
            ErrorCode::NONE => Ok(()),
            ErrorCode::FENCED_LEADER_EPOCH => Err(Cause::fatal(
                "a newer leader wrote this partition's mirror state",
            )),
            code => Err(Cause::retryable(format!(
                "writing the mirror state: {code}"
            ))),
        }
    }
}
