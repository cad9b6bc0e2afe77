//! BumpLeaderEpochs served for another broker (a partition leader asking the broker that runs
//! the controller's writes here): each partition's leader epoch raised to at least
//! `MinLeaderEpoch + 1`, durably, through [`Host::bump_leader_epoch`], and the epoch afterwards
//! answered. The bumps are asked together, so a host that groups its controller writes makes
//! one write of them.

use super::system::MirrorSystem;
use crate::host::Host;
use crate::policy::MirrorError;
use actix::{Context, Handler, Message, ResponseFuture};
use kmirror_protocol::errors::ErrorCode;
use kmirror_protocol::messages::{
    BumpLeaderEpochsRequest, BumpLeaderEpochsResponse, bump_leader_epochs_response,
};
use std::collections::HashMap;

/// A BumpLeaderEpochs request, answered whole (errors per partition).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<BumpLeaderEpochsResponse, MirrorError>")]
pub struct ServeBumpLeaderEpochs(pub BumpLeaderEpochsRequest);

impl<H: Host> Handler<ServeBumpLeaderEpochs> for MirrorSystem<H> {
    type Result = ResponseFuture<Result<BumpLeaderEpochsResponse, MirrorError>>;

    fn handle(&mut self, msg: ServeBumpLeaderEpochs, _: &mut Context<Self>) -> Self::Result {
        let names: HashMap<uuid::Uuid, String> = self
            .host
            .topics()
            .into_iter()
            .map(|(name, meta)| (meta.topic_id, name))
            .collect();
        let mut bumps = Vec::new();
        for topic in &msg.0.topics {
            let name = names.get(&topic.topic_id);
            for p in &topic.partitions {
                bumps.push(name.map(|name| {
                    let bump =
                        self.host
                            .bump_leader_epoch(name, p.partition_index, p.min_leader_epoch);
                    actix::spawn(bump)
                }));
            }
        }
        Box::pin(async move {
            let mut bumps = bumps.into_iter();
            let mut topics = Vec::new();
            for topic in msg.0.topics {
                let mut partitions = Vec::new();
                for p in topic.partitions {
                    let outcome = match bumps.next().flatten() {
                        None => Err((ErrorCode::UNKNOWN_TOPIC_ID, "no topic has this id".into())),
                        Some(bump) => match bump.await {
                            Ok(Ok(Some(epoch))) => Ok(epoch),
                            Ok(Ok(None)) => Err((
                                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                                "no such partition".into(),
                            )),
                            Ok(Err(cause)) => Err((ErrorCode::REQUEST_TIMED_OUT, cause.message)),
                            Err(e) => Err((ErrorCode::UNKNOWN_SERVER_ERROR, e.to_string())),
                        },
                    };
                    let (error_code, error_message, leader_epoch) = match outcome {
                        Ok(epoch) => (0, None, epoch),
                        Err((code, message)) => (code.0, Some(message), -1),
                    };
                    partitions.push(bump_leader_epochs_response::PartitionResult {
                        partition_index: p.partition_index,
                        error_code,
                        error_message,
                        leader_epoch,
                        ..Default::default()
                    });
                }
                topics.push(bump_leader_epochs_response::TopicResult {
                    topic_name: names.get(&topic.topic_id).cloned().unwrap_or_default(),
                    topic_id: topic.topic_id,
                    partitions,
                    ..Default::default()
                });
            }
            Ok(BumpLeaderEpochsResponse {
                topics,
                ..Default::default()
            })
        })
    }
}
