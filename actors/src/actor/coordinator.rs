//! The CoordinatorShard actor: one per `__mirror_state` partition this broker leads, running a
//! pure [`Shard`].
//!
//! Lifecycle: started when the broker becomes the partition's leader, it reads the partition's
//! records through its [`ShardLogPorts`] and replays them; until that finishes every request is
//! answered COORDINATOR_LOAD_IN_PROGRESS by the shard itself. The broker stops the actor when it
//! loses the leadership (a new leader loads from the log; nothing lives only in memory).
//!
//! Writes (WriteMirrorStates, mirror deletion) are validated by the shard, appended through the
//! port and replayed at once, each before the next is validated, so the fencing check of one
//! write sees every write before it. A write is answered only once the port says it is durable;
//! meanwhile later writes go on (their syncs join the one in flight: a shard of many stopping
//! partitions does not wait one sync per write). An append that fails changes nothing and
//! answers KAFKA_STORAGE_ERROR for the partitions it carried; one appended but not made durable
//! answers the same (it stays in the log and in memory, as in Kafka's page cache, and the
//! writer, told it failed, writes again).

use super::ports::PortFuture;
use crate::coordinator::{PartitionKey, Shard, StateRead, StateWrite};
use crate::partition::Cause;
use actix::{
    Actor, ActorFutureExt, AsyncContext, Context, Handler, Message, ResponseFuture, WrapFuture,
};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse,
};
use kmirror_protocol::records::CoordinatorRecord;
use std::rc::Rc;

/// The shard's `__mirror_state` partition, as the broker reads and writes it.
pub trait ShardLogPorts: 'static {
    /// Every record of the partition, oldest first.
    fn read_all(&self) -> PortFuture<Result<Vec<CoordinatorRecord>, Cause>>;
    /// Appends records now, after every earlier append (an error: nothing was appended); the
    /// future resolves once they are durable.
    fn append(
        &self,
        records: Vec<CoordinatorRecord>,
    ) -> Result<PortFuture<Result<(), Cause>>, Cause>;
}

/// A broker's own partition states to write (its partition actors' writes: no wire request);
/// answered each write's error code once durable (KAFKA_STORAGE_ERROR when the append or the
/// sync failed).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Vec<ErrorCode>")]
pub struct WriteStates {
    /// The mirror.
    pub mirror: String,
    /// The writes.
    pub writes: Vec<StateWrite>,
}

/// A partition's stored state and LME, or why this shard cannot answer.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<StateRead, ErrorCode>")]
pub struct ReadState {
    /// The partition.
    pub key: PartitionKey,
    /// Its topic's name.
    pub topic: String,
}

/// WriteMirrorStates for keys of this shard.
#[derive(Debug, Clone, Message)]
#[rtype(result = "WriteMirrorStatesResponse")]
pub struct WriteMirrorStates(pub WriteMirrorStatesRequest);

/// ReadMirrorStates for keys of this shard.
#[derive(Debug, Clone, Message)]
#[rtype(result = "ReadMirrorStatesResponse")]
pub struct ReadMirrorStates(pub ReadMirrorStatesRequest);

/// The LME this shard holds for a mirror's partition (`None`: none): what LastMirroredEpochs
/// answers.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Option<i32>")]
pub struct LastMirroredEpoch {
    /// The mirror.
    pub mirror: String,
    /// The topic name.
    pub topic: String,
    /// The partition.
    pub partition: i32,
}

/// Forgets every record of this shard that is not of a live mirror's live topic
/// ([`crate::coordinator::Shard::forget_all_but`]): deleted mirrors, deleted topics, topics
/// moved out of their mirror.
#[derive(Debug, Clone, PartialEq, Eq, Message)]
#[rtype(result = "Result<(), Cause>")]
pub struct ForgetAllBut(pub crate::coordinator::shard::LiveTopics);

/// One `__mirror_state` shard's actor.
pub struct CoordinatorShard<P: ShardLogPorts> {
    shard: Shard,
    ports: Rc<P>,
}

impl<P: ShardLogPorts> std::fmt::Debug for CoordinatorShard<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorShard")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

impl<P: ShardLogPorts> CoordinatorShard<P> {
    /// The actor of `__mirror_state` partition `index` of `num_shards`.
    pub fn new(index: i32, num_shards: i32, ports: P) -> Self {
        CoordinatorShard {
            shard: Shard::new(index, num_shards),
            ports: Rc::new(ports),
        }
    }

    fn load(&mut self, ctx: &mut Context<Self>) {
        let read = self.ports.read_all();
        ctx.spawn(read.into_actor(self).map(|result, actor, ctx| match result {
            Ok(records) => {
                for record in &records {
                    actor.shard.replay(record);
                }
                actor.shard.loaded();
            }
            Err(cause) => {
                tracing::warn!(error = %cause.message, "loading a __mirror_state shard; trying again");
                ctx.run_later(std::time::Duration::from_secs(1), |actor, ctx| actor.load(ctx));
            }
        }));
    }
}

impl<P: ShardLogPorts> Actor for CoordinatorShard<P> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.load(ctx);
    }
}

impl<P: ShardLogPorts> Handler<WriteMirrorStates> for CoordinatorShard<P> {
    type Result = ResponseFuture<WriteMirrorStatesResponse>;

    fn handle(&mut self, msg: WriteMirrorStates, _: &mut Context<Self>) -> Self::Result {
        let (records, response) = self.shard.write_states(&msg.0);
        Box::pin(self.write_durably(records, response, storage_error))
    }
}

impl<P: ShardLogPorts> Handler<WriteStates> for CoordinatorShard<P> {
    type Result = ResponseFuture<Vec<ErrorCode>>;

    fn handle(&mut self, msg: WriteStates, _: &mut Context<Self>) -> Self::Result {
        let (records, codes) = self.shard.write(&msg.mirror, &msg.writes);
        let failed = |codes: Vec<ErrorCode>, _: &Cause| {
            codes
                .into_iter()
                .map(|c| {
                    if c.is_ok() {
                        ErrorCode::KAFKA_STORAGE_ERROR
                    } else {
                        c
                    }
                })
                .collect()
        };
        Box::pin(self.write_durably(records, codes, failed))
    }
}

impl<P: ShardLogPorts> Handler<ReadState> for CoordinatorShard<P> {
    type Result = Result<StateRead, ErrorCode>;

    fn handle(&mut self, msg: ReadState, _: &mut Context<Self>) -> Self::Result {
        self.shard.read(&msg.key, &msg.topic)
    }
}

/// `response` with KAFKA_STORAGE_ERROR for every partition the write carried.
fn storage_error(
    mut response: WriteMirrorStatesResponse,
    cause: &Cause,
) -> WriteMirrorStatesResponse {
    for p in response
        .topics
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut())
    {
        if p.error_code == 0 {
            p.error_code = kmirror_protocol::errors::ErrorCode::KAFKA_STORAGE_ERROR.0;
            p.error_message = Some(cause.message.clone());
        }
    }
    response
}

impl<P: ShardLogPorts> Handler<ReadMirrorStates> for CoordinatorShard<P> {
    type Result = actix::MessageResult<ReadMirrorStates>;

    fn handle(&mut self, msg: ReadMirrorStates, _: &mut Context<Self>) -> Self::Result {
        actix::MessageResult(self.shard.read_states(&msg.0))
    }
}

impl<P: ShardLogPorts> Handler<LastMirroredEpoch> for CoordinatorShard<P> {
    type Result = Option<i32>;

    fn handle(&mut self, msg: LastMirroredEpoch, _: &mut Context<Self>) -> Option<i32> {
        self.shard
            .last_mirrored_epoch(&msg.mirror, &msg.topic, msg.partition)
    }
}

impl<P: ShardLogPorts> Handler<ForgetAllBut> for CoordinatorShard<P> {
    type Result = ResponseFuture<Result<(), Cause>>;

    fn handle(&mut self, msg: ForgetAllBut, _: &mut Context<Self>) -> Self::Result {
        if self.shard.is_loading() {
            let loading = Err(Cause::retryable(
                "the __mirror_state shard is still loading",
            ));
            return Box::pin(async move { loading });
        }
        let records = self.shard.forget_all_but(&msg.0);
        if records.is_empty() {
            return Box::pin(async { Ok(()) });
        }
        match self.append_and_replay(records) {
            Ok(durable) => durable,
            Err(cause) => Box::pin(async move { Err(cause) }),
        }
    }
}

impl<P: ShardLogPorts> CoordinatorShard<P> {
    /// Appends `records` and replays them now; the answer once they are durable, or
    /// `failed(answer, cause)` when the append or the sync failed (records appended but not
    /// durable stay in the log and in memory, as in Kafka's page cache; the writer, told it
    /// failed, writes again).
    fn write_durably<T: 'static>(
        &mut self,
        records: Vec<CoordinatorRecord>,
        answer: T,
        failed: impl FnOnce(T, &Cause) -> T + 'static,
    ) -> impl std::future::Future<Output = T> + 'static {
        let count = records.len() as u64;
        let asked = std::time::Instant::now();
        let durable = if records.is_empty() {
            Ok(None)
        } else {
            self.append_and_replay(records).map(Some)
        };
        async move {
            let durable = match durable {
                Ok(None) => return answer,
                Ok(Some(durable)) => durable.await,
                Err(cause) => Err(cause),
            };
            match durable {
                Ok(()) => {
                    metrics::histogram!(crate::metrics::COORDINATOR_WRITE_LATENCY)
                        .record(asked.elapsed().as_secs_f64());
                    metrics::counter!(crate::metrics::COORDINATOR_WRITES, "result" => "ok")
                        .increment(count);
                    answer
                }
                Err(cause) => {
                    metrics::counter!(crate::metrics::COORDINATOR_WRITES, "result" => "error")
                        .increment(count);
                    failed(answer, &cause)
                }
            }
        }
    }

    /// Appends `records` and replays them; the future says when they are durable.
    fn append_and_replay(
        &mut self,
        records: Vec<CoordinatorRecord>,
    ) -> Result<PortFuture<Result<(), Cause>>, Cause> {
        let durable = self.ports.append(records.clone())?;
        for record in &records {
            self.shard.replay(record);
        }
        Ok(durable)
    }
}

#[cfg(test)]
mod tests;
