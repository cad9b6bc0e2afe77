//! The failback lookup (docs/failover.md "Failing back"): the last mirror epoch this cluster
//! recorded for a partition while it mirrored from the cluster that asks, so that cluster keeps
//! what both share and truncates only what diverged. LastMirroredEpochs and the KIP
//! prototype's DescribeClusterMirrors tagged fields answer it alike.
//!
//! Every mirror whose `mirror.source.cluster.id` is the asking cluster may hold a topic; the one
//! the local topic's `mirror.name` names answers first (a stopped topic keeps
//! `<mirror>.removed`). A partition whose shard cannot answer yet answers its error, never -1:
//! -1 makes the asking cluster copy everything again.

use super::shard_service::{ReadPartitionStates, StateAnswer};
use super::system::MirrorSystem;
use crate::coordinator::StateRead;
use crate::host::{Host, TopicPartition};
use crate::metadata::{MIRROR_NAME, mirror_of};
use crate::policy::MirrorError;
use actix::{AsyncContext, Context, Handler, Message, ResponseFuture};
use kmirror_protocol::errors::ErrorCode;
use std::collections::HashMap;

/// The mirror config naming the source cluster's id.
pub const SOURCE_CLUSTER_ID: &str = "mirror.source.cluster.id";

/// One topic's LMEs: its name (empty: no topic here has its id), id and, per partition, the
/// LME (-1: none) or the error that says "ask again".
pub type TopicLmes = (String, uuid::Uuid, Vec<(i32, Result<i32, ErrorCode>)>);

/// The LMEs this cluster recorded for `topics` (name, id, partitions) while mirroring from
/// the cluster `asking`. A topic is found by its id; a name may be left empty. A topic id this
/// cluster does not have answers -1.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Vec<TopicLmes>, MirrorError>")]
pub struct LookupLmes {
    /// The cluster id of the cluster that asks.
    pub asking: String,
    /// Each topic's name, id and partitions.
    pub topics: Vec<(String, uuid::Uuid, Vec<i32>)>,
}

impl<H: Host> Handler<LookupLmes> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<Vec<TopicLmes>, MirrorError>>;

    fn handle(&mut self, mut msg: LookupLmes, ctx: &mut Context<Self>) -> Self::Result {
        let names: HashMap<uuid::Uuid, String> = self
            .host
            .topics()
            .into_iter()
            .map(|(name, meta)| (meta.topic_id, name))
            .collect();
        let unknown: Vec<TopicLmes> = msg
            .topics
            .extract_if(.., |(_, id, _)| !names.contains_key(id))
            .map(|(_, id, partitions)| {
                (
                    String::new(),
                    id,
                    partitions.iter().map(|&p| (p, Ok(-1))).collect(),
                )
            })
            .collect();
        for (name, id, _) in &mut msg.topics {
            if let Some(known) = names.get(id) {
                name.clone_from(known);
            }
        }
        let mirrors: Vec<String> = self
            .host
            .mirrors()
            .into_iter()
            .filter(|(_, c)| c.get(SOURCE_CLUSTER_ID) == Some(&msg.asking))
            .map(|(name, _)| name)
            .collect();
        let (system, host) = (ctx.address(), self.host.clone());
        Box::pin(async move {
            let mut answers: Vec<(String, HashMap<TopicPartition, StateAnswer>)> = Vec::new();
            for mirror in mirrors {
                let read = ReadPartitionStates {
                    mirror: mirror.clone(),
                    topics: msg.topics.clone(),
                };
                let read = system.send(read).await.map_err(|e| {
                    MirrorError::new(ErrorCode::COORDINATOR_NOT_AVAILABLE, e.to_string())
                })??;
                answers.push((mirror, read.into_iter().collect()));
            }
            Ok(msg
                .topics
                .into_iter()
                .map(|(name, topic_id, partitions)| {
                    let named = host
                        .topic(&name)
                        .and_then(|t| t.configs.get(MIRROR_NAME).cloned())
                        .and_then(|v| mirror_of(&v).map(|(m, _)| m.to_string()));
                    answers.sort_by_key(|(m, _)| Some(m) != named.as_ref());
                    let lmes = partitions
                        .iter()
                        .map(|&index| (index, lme(&answers, &name, index)))
                        .collect();
                    (name, topic_id, lmes)
                })
                .chain(unknown)
                .collect())
        })
    }
}

/// One partition's LME from the mirrors' answers, in the order asked: the first that knows it,
/// or the first that cannot answer yet; -1 when none recorded one.
fn lme(
    answers: &[(String, HashMap<TopicPartition, StateAnswer>)],
    topic: &str,
    partition: i32,
) -> Result<i32, ErrorCode> {
    let key = TopicPartition::new(topic.to_string(), partition);
    for (_, read) in answers {
        match read.get(&key) {
            Some(Ok(StateRead {
                lme: Some(found), ..
            })) => return Ok(*found),
            Some(Err(code)) => return Err(*code),
            _ => {}
        }
    }
    Ok(-1)
}
