//! ReadMirrorStates and WriteMirrorStates from other brokers of the cluster, answered by the
//! `__mirror_state` shards this broker leads. A request is split by the shard that owns each
//! partition; partitions of shards led elsewhere are answered NOT_COORDINATOR (the asking
//! broker's route is stale); the parts are merged into one response.

use super::shard_route::ShardRoute;
use super::system::MirrorSystem;
use crate::actor::{ReadMirrorStates, WriteMirrorStates};
use crate::coordinator::{PartitionKey, StateRead};
use crate::host::{Host, TopicPartition};
use crate::policy::MirrorError;
use actix::{Context, Handler, Message, ResponseActFuture, WrapFuture};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    ReadMirrorStatesRequest, ReadMirrorStatesResponse, WriteMirrorStatesRequest,
    WriteMirrorStatesResponse, read_mirror_states_request, read_mirror_states_response,
    write_mirror_states_request, write_mirror_states_response,
};
use kmirror_protocol::sharding::mirror_partition_shard;
use std::collections::BTreeMap;

/// ReadMirrorStates from another broker: answered by the shards owning the partitions.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<ReadMirrorStatesResponse, MirrorError>")]
pub struct ServeReadMirrorStates(pub ReadMirrorStatesRequest);

/// WriteMirrorStates from another broker: written by the shards owning the partitions, each
/// durable before the answer.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<WriteMirrorStatesResponse, MirrorError>")]
pub struct ServeWriteMirrorStates(pub WriteMirrorStatesRequest);

impl<H: Host> MirrorSystem<H> {
    fn shard_of(&self, mirror: &str, topic_id: &uuid::Uuid, partition: i32) -> usize {
        mirror_partition_shard(mirror, topic_id, partition, self.shards.len() as i32) as usize
    }
}

/// The handler of a Read/WriteMirrorStates request from another broker (see the module docs).
macro_rules! serve_by_shard {
    (
        $serve:ident,
        $serve_fn:ident,
        $request:ident,
        $response:ident,
        $request_mod:ident,
        $response_mod:ident,
        $shard_message:ident
    ) => {
        impl<H: Host> Handler<$serve> for MirrorSystem<H> {
            type Result = ResponseActFuture<Self, Result<$response, MirrorError>>;

            fn handle(&mut self, msg: $serve, _: &mut Context<Self>) -> Self::Result {
                self.after_state_topic(move |system, ctx| system.$serve_fn(msg, ctx))
            }
        }

        impl<H: Host> MirrorSystem<H> {
            fn $serve_fn(
                &mut self,
                msg: $serve,
                ctx: &mut Context<Self>,
            ) -> ResponseActFuture<Self, Result<$response, MirrorError>> {
                let split = self.ensure_shards(ctx).map(|()| {
                    let request = msg.0;
                    let mut by_shard: BTreeMap<usize, $request> = BTreeMap::new();
                    for topic in request.topics {
                        for p in topic.partitions {
                            let shard = self.shard_of(
                                &request.mirror_name,
                                &topic.topic_id,
                                p.partition_index,
                            );
                            let part = by_shard.entry(shard).or_insert_with(|| $request {
                                mirror_name: request.mirror_name.clone(),
                                ..Default::default()
                            });
                            match part
                                .topics
                                .iter_mut()
                                .find(|t| t.topic_id == topic.topic_id)
                            {
                                Some(t) => t.partitions.push(p),
                                None => part.topics.push($request_mod::Topic {
                                    topic_id: topic.topic_id,
                                    name: topic.name.clone(),
                                    partitions: vec![p],
                                    ..Default::default()
                                }),
                            }
                        }
                    }
                    let mut asked = Vec::new();
                    let mut elsewhere = Vec::new();
                    for (shard, part) in by_shard {
                        match self.shards.get(shard).and_then(ShardRoute::local) {
                            Some(addr) => asked.push(addr.send($shard_message(part))),
                            _ => elsewhere.extend(part.topics.into_iter().map(|t| {
                                $response_mod::Topic {
                                    topic_id: t.topic_id,
                                    name: t.name,
                                    partitions: t
                                        .partitions
                                        .iter()
                                        .map(|p| $response_mod::Partition {
                                            partition_index: p.partition_index,
                                            error_code: ErrorCode::NOT_COORDINATOR.0,
                                            ..Default::default()
                                        })
                                        .collect(),
                                    ..Default::default()
                                }
                            })),
                        }
                    }
                    (asked, elsewhere)
                });
                Box::pin(
                    async move {
                        let (asked, elsewhere) = split?;
                        let mut topics = elsewhere;
                        for answer in asked {
                            let answer = answer.await.map_err(|e| {
                                MirrorError::new(ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())
                            })?;
                            topics.extend(answer.topics);
                        }
                        let mut response = $response::default();
                        // One entry per topic, whichever shards answered for it.
                        for topic in topics {
                            match response
                                .topics
                                .iter_mut()
                                .find(|t| t.topic_id == topic.topic_id)
                            {
                                Some(t) => t.partitions.extend(topic.partitions),
                                None => response.topics.push(topic),
                            }
                        }
                        Ok(response)
                    }
                    .into_actor(self),
                )
            }
        }
    };
}

serve_by_shard!(
    ServeReadMirrorStates,
    serve_read,
    ReadMirrorStatesRequest,
    ReadMirrorStatesResponse,
    read_mirror_states_request,
    read_mirror_states_response,
    ReadMirrorStates
);
serve_by_shard!(
    ServeWriteMirrorStates,
    serve_write,
    WriteMirrorStatesRequest,
    WriteMirrorStatesResponse,
    write_mirror_states_request,
    write_mirror_states_response,
    WriteMirrorStates
);

/// A partition's stored state and LME as its shard answered, or the error to give the asker
/// (loading, moved, unreachable), who asks again.
pub type StateAnswer = Result<StateRead, ErrorCode>;

/// The states and LMEs `mirror` recorded for partitions of this cluster's topics, read from the
/// shards that own them wherever they are led (this broker's shard actors, or other brokers'
/// over ReadMirrorStates), so an answer needs no replay of the state topic. Each entry is
/// `(topic, partition)` with what its shard answered.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<(TopicPartition, StateAnswer)>, MirrorError>")]
pub struct ReadPartitionStates {
    /// The mirror.
    pub mirror: String,
    /// Each topic's name, id and partitions.
    pub topics: Vec<(String, uuid::Uuid, Vec<i32>)>,
}

impl<H: Host> Handler<ReadPartitionStates> for MirrorSystem<H> {
    type Result = ResponseActFuture<Self, Result<Vec<(TopicPartition, StateAnswer)>, MirrorError>>;

    fn handle(&mut self, msg: ReadPartitionStates, _: &mut Context<Self>) -> Self::Result {
        self.after_state_topic(move |system, ctx| system.read_states(msg, ctx))
    }
}

impl<H: Host> MirrorSystem<H> {
    fn read_states(
        &mut self,
        msg: ReadPartitionStates,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<Vec<(TopicPartition, StateAnswer)>, MirrorError>> {
        let asked = self.ensure_shards(ctx).map(|()| {
            let mut reads = Vec::new();
            for (name, topic_id, partitions) in &msg.topics {
                for &partition in partitions {
                    let shard = self.shard_of(&msg.mirror, topic_id, partition);
                    let Some(route) = self.shards.get(shard).cloned() else {
                        continue;
                    };
                    let key = PartitionKey {
                        mirror: msg.mirror.clone(),
                        topic_id: *topic_id,
                        partition,
                    };
                    let topic = name.clone();
                    reads.push(async move {
                        let read = route.read_state(key, &topic).await;
                        // A shard that could not be asked: the asker asks again.
                        let answer = read.unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE));
                        (TopicPartition::new(topic, partition), answer)
                    });
                }
            }
            reads
        });
        Box::pin(
            async move {
                let mut out = Vec::new();
                for read in asked? {
                    out.push(read.await);
                }
                Ok(out)
            }
            .into_actor(self),
        )
    }
}
